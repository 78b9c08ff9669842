#!/usr/bin/env bash
# Installs every Debian package SpotTrain needs to build, test, benchmark and run
# its demo. Idempotent: asks dpkg first and touches apt only when something is
# missing. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache clang-format
  # libraries
  libtorch-dev libopenblas0-openmp
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libxxhash-dev libzstd-dev zlib1g-dev libzip-dev libgloo-dev libcpp-httplib-dev libxgboost-dev
  libturbojpeg0-dev libpng-dev libcsv-dev
  libsqlite3-dev sqlite3
  prometheus-cpp-dev
  # the S3 checkpoint tier: HTTP and SigV4 signing, SHA-256, S3's XML answers
  libcurl4-openssl-dev libssl-dev libxml2-dev
  # elastic training: etcd for multi-machine rendezvous, iproute2 for the network-namespace test
  etcd-server etcd-client iproute2
  # the Slurm provider's tests: a real cluster (munged, slurmctld, slurmd nodes in network
  # namespaces) and the tools the provider runs (sbatch, squeue, sacct, scancel); the tests
  # start their own daemons, none is left running as a service
  slurmctld slurmd slurm-client munge
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # data and the Python side (interop test, benchmark baseline): Fashion-MNIST,
  # and the King James Bible for the language model (examples/gpt-bible)
  dataset-fashion-mnist bible-kjv python3 python3-torch python3-numpy python3-yaml
  # the project virtual environment of the reference peers and test servers
  # (scripts/install-python-peers.sh)
  python3-venv
  # monitoring: a Prometheus server and promtool for the metrics tests, protoc to
  # read TensorBoard event files back, Chromium and its WebDriver for the dashboard
  # test, Node.js to fetch the dashboard's front-end libraries from npm at build time
  prometheus protobuf-compiler python3-crc32c chromium chromium-driver nodejs
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# LibTorch links against the generic BLAS name; make sure the optimized OpenBLAS
# serves it, not the single-threaded reference BLAS that the base image carries.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
want=/usr/lib/$arch/openblas-openmp/libblas.so.3
if [[ -e "$want" ]]; then
  current=$(readlink -f "/etc/alternatives/libblas.so.3-$arch" 2>/dev/null || true)
  if [[ "$current" != "$(readlink -f "$want")" ]]; then
    "${sudo_cmd[@]}" update-alternatives --set "libblas.so.3-$arch" "$want" >/dev/null
  fi
  want_lapack=/usr/lib/$arch/openblas-openmp/liblapack.so.3
  if [[ -e "$want_lapack" ]]; then
    current=$(readlink -f "/etc/alternatives/liblapack.so.3-$arch" 2>/dev/null || true)
    if [[ "$current" != "$(readlink -f "$want_lapack")" ]]; then
      "${sudo_cmd[@]}" update-alternatives --set "liblapack.so.3-$arch" "$want_lapack" >/dev/null
    fi
  fi
fi
# npm ships inside some Node.js builds; Debian's own nodejs needs the npm package.
if ! command -v npm >/dev/null; then
  echo "install-deps: installing npm"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends npm
fi
echo "install-deps: all packages present"
