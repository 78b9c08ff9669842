#!/bin/sh
# What `make bench` runs: the end-to-end benchmarks (see docs/benchmarks.md).
# Builds nothing: pass a build directory where spot_bench is already built.
#   bench/run.sh BUILD_DIR [spot_bench flags...]
# Prints the tables and writes them to BUILD_DIR/bench-results.md as well.
# Takes about 30 minutes on 2 cores; keep the machine otherwise idle.
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [spot_bench flags...]" >&2
  exit 2
fi
build=$1
shift
bin="$build/bin/spot_bench"
if [ ! -x "$bin" ]; then
  echo "error: $bin not found: build it first (ninja -C $build spot_bench)" >&2
  exit 1
fi
out="$build/bench-results.md"
tmp="$out.tmp"
# Tables go to stdout (kept), progress to stderr (shown only).
if ! "$bin" --workloads train,gpt,images,ckpt,sim,fleet,elastic,run,command,monitor "$@" > "$tmp"; then
  cat "$tmp"
  echo "error: spot_bench failed; partial results in $tmp" >&2
  exit 1
fi
mv "$tmp" "$out"
cat "$out"
echo "results written to $out" >&2
