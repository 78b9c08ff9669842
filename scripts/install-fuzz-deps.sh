#!/usr/bin/env bash
# Installs what `make fuzz` needs beyond scripts/install-deps.sh: Debian's
# clang 14 with its runtime libraries (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer). Opt-in: only the fuzz target calls it.
# Idempotent: asks dpkg first and touches apt only when something is missing.
# Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(clang-14 libclang-rt-14-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

if ((${#missing[@]})); then
  echo "install-fuzz-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install-fuzz-deps: all packages present"
