#!/usr/bin/env bash
# Pretrain on the Old Testament, fine-tune on Luke, train on Luke from scratch,
# and print the validation losses side by side.
# Usage: bash examples/gpt-finetune/run.sh [SPOT_BINARY]
set -euo pipefail
spot=${1:-build/bin/spot}
dir=examples/gpt-finetune
bash "$dir/prepare.sh" "$spot"
for job in pretrain finetune scratch; do
  "$spot" train "$dir/$job.yaml" --plain --log-interval 30
done
for run in gpt-luke-finetuned gpt-luke-scratch; do
  python3 - "runs/$run/summary.json" "$run" <<'PY'
import json, math, sys
s = json.load(open(sys.argv[1]))
loss = s["test_loss"]
print(f"{sys.argv[2]:20} {s['steps']} steps: val loss {loss:.4f}, perplexity {math.exp(loss):.2f}")
PY
done
