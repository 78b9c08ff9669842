#!/usr/bin/env bash
# Two corpora of the King James Bible (Debian's bible-kjv) for transfer learning:
# the Old Testament to pretrain on (runs/data/bible-ot) and the Gospel of Luke to
# fine-tune on (runs/data/luke, in the Old Testament's vocabulary).
# Usage: bash examples/gpt-finetune/prepare.sh [SPOT_BINARY]
set -euo pipefail
spot=${1:-build/bin/spot}
if ! command -v bible >/dev/null; then
  echo "prepare.sh: the bible command is missing: apt-get install bible-kjv" >&2
  exit 2
fi
verses() { bible -f "$1" | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //'; }
mkdir -p runs/data/bible-ot runs/data/luke
verses Gen1:1-Mal4:6 >runs/data/bible-ot/text.txt
verses Luke1:1-Luke24:53 >runs/data/luke/text.txt
"$spot" prepare-text runs/data/bible-ot/text.txt --out runs/data/bible-ot
"$spot" prepare-text runs/data/luke/text.txt --out runs/data/luke --vocab runs/data/bible-ot/vocab.json
