#!/usr/bin/env bash
# GPU checks: configures and builds SpotTrain against a CUDA LibTorch in its
# own build directory and runs the tests that need a GPU (GpuTest.*: the CNN
# and the GPT trained on device cuda, fp16 with dynamic loss scaling, a
# bit-for-bit restore on cuda). `make test` never needs this script: on a
# CPU-only LibTorch those tests skip with a loud message.
#
# Usage:
#   CMAKE_PREFIX_PATH=/opt/libtorch scripts/gpu-check.sh      # or
#   Torch_DIR=/opt/libtorch/share/cmake/Torch scripts/gpu-check.sh
# Environment:
#   GPU_BUILD   build directory, absolute or relative to the repository (default: build-gpu)
#   JOBS        parallel compile jobs (default: the number of cores)
#   GTEST_FILTER  tests to run (default: GpuTest.*:PrecisionTest.*:LossScalerTest.*)
#   CMAKE_ARGS  extra arguments for cmake's configure step
# Exit status: 0 when the checks ran and passed; 1 when they failed; 2 when
# no CUDA LibTorch was given or the GPU checks were skipped (no GPU visible).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GPU_BUILD:-build-gpu}"
[[ "$build" == /* ]] || build="$root/$build"  # relative to the repository
jobs="${JOBS:-$(nproc)}"
filter="${GTEST_FILTER:-GpuTest.*:PrecisionTest.*:LossScalerTest.*}"

if [[ -z "${CMAKE_PREFIX_PATH:-}" && -z "${Torch_DIR:-}" ]]; then
  echo "gpu-check: give a CUDA LibTorch: CMAKE_PREFIX_PATH=/path/to/libtorch or" \
       "Torch_DIR=/path/to/libtorch/share/cmake/Torch" >&2
  exit 2
fi

configure=(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
           -DSPOT_BUILD_BENCH=OFF)
[[ -n "${CMAKE_PREFIX_PATH:-}" ]] && configure+=("-DCMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH")
[[ -n "${Torch_DIR:-}" ]] && configure+=("-DTorch_DIR=$Torch_DIR")
# shellcheck disable=SC2206
configure+=(${CMAKE_ARGS:-})
"${configure[@]}"

cmake --build "$build" -j "$jobs" --target spot_train_test
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
"$build/src/train/spot_train_test" --gtest_filter="$filter" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [[ $status -ne 0 ]]; then
  echo "gpu-check: FAILED" >&2
  exit 1
fi
if grep -q '^\[  SKIPPED \] GpuTest' "$log"; then
  echo "gpu-check: the GPU tests were SKIPPED: torch::cuda::is_available() is false" \
       "(no GPU visible, or a driver mismatch); nothing was checked on a GPU" >&2
  exit 2
fi
echo "gpu-check: passed on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'a GPU')"
