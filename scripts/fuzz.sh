#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang 14 and runs each for
# FUZZ_SECONDS, one after another, then prints a table: target, seconds,
# executions, coverage (edges and features, with the gain over the seeds),
# corpus inputs added, crashes. `make fuzz` runs it; see docs/fuzzing.md.
#
#   scripts/fuzz.sh [TARGET...]      every target of build-fuzz/targets.txt by default
#
# Environment:
#   FUZZ_SECONDS=60       run time per target
#   FUZZ_BUILD=build-fuzz build directory (corpora, crash artifacts, logs live in it)
#   FUZZ_JOBS=2           parallel compile jobs
#   FUZZ_BUILD_LOCK=FILE  hold this flock(1) lock while compiling (shared machines)
#   FUZZ_FLAGS="..."      more libFuzzer flags for every target (e.g. -jobs=2 -workers=2)
#   FUZZ_BUILD_ONLY=1     configure and build, run nothing
#
# Each target's run reads the seeds of fuzz/corpus/TARGET and grows its own
# corpus in FUZZ_BUILD/corpus/TARGET (kept between runs, so a later run starts
# where this one stopped); crashes, leaks, timeouts and out-of-memory inputs
# go to FUZZ_BUILD/artifacts/TARGET/, the log to FUZZ_BUILD/logs/TARGET.log.
# Exit status 1 when any target crashed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-2}

# --- configure and build ---
if [[ ! -f "$build/build.ninja" ]]; then
  CC=clang-14 CXX=clang++-14 cmake -S fuzz -B "$build" -G Ninja
fi
build_cmd=(cmake --build "$build" -j "$jobs")
# Named targets: build only those.
if (($# > 0)); then build_cmd+=(--target); for t in "$@"; do build_cmd+=("${t}_fuzzer"); done; fi
if [[ -n "${FUZZ_BUILD_LOCK:-}" ]]; then build_cmd=(flock "$FUZZ_BUILD_LOCK" "${build_cmd[@]}"); fi
"${build_cmd[@]}"
[[ -n "${FUZZ_BUILD_ONLY:-}" ]] && exit 0

# --- per-target settings: dictionary, longest input ---
dict_of() {
  case "$1" in
    spec_reader | job_spec) echo yaml ;;
    csv | price_csv | catalog_csv) echo csv ;;
    availability_json | aws_price_history | ckpt_manifest | rendezvous_state | metadata_answer | log_line)
      echo json ;;
    prometheus_text) echo prometheus ;;
    api_request) echo http ;;
    *) echo "" ;;
  esac
}
max_len_of() {
  case "$1" in
    ckpt_file | ckpt_codec) echo 16384 ;;
    spec_reader | job_spec | availability_json | aws_price_history | tensorboard) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

# The last "cov: N ft: M" of a libFuzzer log line matching `pattern`.
stat_of() {  # log pattern field
  { grep -E "$2" "$1" || true; } | tail -n 1 | sed -nE "s/.* $3: ([0-9]+).*/\1/p"
}

# Stack traces for UndefinedBehaviorSanitizer reports too.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

if (($# > 0)); then targets=("$@"); else mapfile -t targets <"$build/targets.txt"; fi
mkdir -p "$build/logs"
rows=()
crashed=0
for t in "${targets[@]}"; do
  bin="$build/bin/${t}_fuzzer"
  [[ -x "$bin" ]] || { echo "fuzz.sh: no target $t ($bin)" >&2; exit 2; }
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  log="$build/logs/$t.log"
  mkdir -p "$corpus" "$artifacts"
  before=$(find "$artifacts" -type f | wc -l)
  flags=(-max_total_time="$seconds" -max_len="$(max_len_of "$t")" -timeout=10
         -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/")
  dict=$(dict_of "$t")
  [[ -n "$dict" ]] && flags+=(-dict="fuzz/dicts/$dict.dict")
  # shellcheck disable=SC2206  # FUZZ_FLAGS is a list of flags
  flags+=(${FUZZ_FLAGS:-})
  seeds=()
  [[ -d "fuzz/corpus/$t" ]] && seeds=("fuzz/corpus/$t")
  echo "fuzz.sh: $t for ${seconds}s (log: $log)"
  status=ok
  if ! "$bin" "${flags[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1; then status=FAILED; fi
  after=$(find "$artifacts" -type f | wc -l)
  found=$((after - before))
  if ((found > 0)) || [[ $status == FAILED ]]; then
    crashed=1
    status="FAILED: $(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer): [a-z-]+|contract broken at [^ ]+|runtime error: [^(]+' "$log" || echo 'see log')"
  fi
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  added=$(sed -nE 's/^stat::new_units_added: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  if [[ -z "$execs" ]]; then  # killed before libFuzzer's final stats (e.g. a deadly signal)
    execs=$({ grep -E '^#[0-9]+' "$log" || true; } | tail -n 1 | sed -nE 's/^#([0-9]+).*/\1/p')
  fi
  cov0=$(stat_of "$log" 'INITED' cov)
  ft0=$(stat_of "$log" 'INITED' ft)
  cov1=$(stat_of "$log" '(DONE|NEW|REDUCE|pulse|INITED) ' cov)
  ft1=$(stat_of "$log" '(DONE|NEW|REDUCE|pulse|INITED) ' ft)
  cov="${cov1:-?} (+$(( ${cov1:-0} - ${cov0:-0} )))"
  ft="${ft1:-?} (+$(( ${ft1:-0} - ${ft0:-0} )))"
  rows+=("$(printf '%-18s %7s %12s %16s %16s %7s %7s  %s' "$t" "$seconds" "${execs:-?}" \
    "$cov" "$ft" "${added:-?}" "$found" "$status")")
done

echo
printf '%-18s %7s %12s %16s %16s %7s %7s  %s\n' target seconds executions "cov (new)" \
  "features (new)" added crashes status
for r in "${rows[@]}"; do echo "$r"; done
if ((crashed)); then
  echo
  echo "fuzz.sh: crashes are in $build/artifacts/<target>/; reproduce one with"
  echo "  $build/bin/<target>_fuzzer <artifact>"
fi
exit "$crashed"
