#!/usr/bin/env bash
# The King James Bible (Debian's bible-kjv) as a character-level corpus:
# runs/data/bible/{train.bin,val.bin,vocab.json}, the last 10% held out.
# Usage: bash examples/gpt-bible/prepare.sh [OUT_DIR] [SPOT_BINARY]
set -euo pipefail
out=${1:-runs/data/bible}
spot=${2:-build/bin/spot}
if ! command -v bible >/dev/null; then
  echo "prepare.sh: the bible command is missing: apt-get install bible-kjv" >&2
  exit 2
fi
mkdir -p "$out"
# One verse a line, without its reference ("Ge1:1 In the beginning ...").
bible -f Gen1:1-Rev22:21 | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$out/bible.txt"
"$spot" prepare-text "$out/bible.txt" --out "$out" --val-fraction 0.1
