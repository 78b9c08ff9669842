#!/usr/bin/env bash
# Makes the project's Python virtual environment (.venv at the repository root)
# and installs the pinned packages of python/requirements-peers.txt into it.
#
# The environment is made from Debian's /usr/bin/python3 with
# --system-site-packages, so Debian's python3-torch stays importable beside the
# packages from PyPI. Idempotent: a stamp in the environment holds a hash of the
# requirements file and the interpreter's version; when it matches, nothing is
# done. When PyPI cannot be reached, it says so loudly, leaves a marker file
# (.venv/peers-unavailable, with the reason) that the tests needing these
# packages read to skip, and exits 0: the rest of the project builds and tests
# without them.
#
# Environment: SPOT_VENV overrides where the environment goes.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SPOT_VENV:-$root/.venv}
requirements=$root/python/requirements-peers.txt
python=/usr/bin/python3
stamp=$venv/peers.stamp
unavailable=$venv/peers-unavailable

if [[ ! -r "$requirements" ]]; then
  echo "install-python-peers: $requirements: no such file" >&2
  exit 1
fi
want=$({ sha256sum <"$requirements"; "$python" --version; } | sha256sum | cut -d' ' -f1)

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] &&
  "$venv/bin/python" -c '' 2>/dev/null; then
  echo "install-python-peers: $venv up to date"
  exit 0
fi

if ! "$venv/bin/python" -c '' 2>/dev/null; then
  # `python3 -m venv` needs Debian's python3-venv (ensurepip).
  if [[ $(dpkg-query -W -f='${db:Status-Status}' python3-venv 2>/dev/null) != installed ]]; then
    echo "install-python-peers: installing python3-venv"
    sudo_cmd=()
    if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
      --no-install-recommends python3-venv
  fi
  echo "install-python-peers: creating $venv"
  "$python" -m venv --system-site-packages "$venv"
fi
rm -f "$stamp"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "install-python-peers: installing $(grep -cv '^\s*\(#\|$\)' "$requirements") pinned package(s)"
if "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements" >"$log" 2>&1; then
  rm -f "$unavailable"
  echo "$want" >"$stamp"
  echo "install-python-peers: $venv ready"
  exit 0
fi

# Failed: tell an unreachable index (skip loudly) from a real error (fail).
# The probe asks the index itself, not the local wheel folders pip may know.
if env -u PIP_FIND_LINKS "$venv/bin/python" -m pip index versions --no-cache-dir \
  --disable-pip-version-check pip >/dev/null 2>&1; then
  cat "$log" >&2
  echo "install-python-peers: pip install -r $requirements failed (see above)" >&2
  exit 1
fi
{
  echo "PyPI could not be reached from this machine, so $requirements"
  echo "was not installed into $venv; the tests that need these packages skip."
  printf '%s\n' "$(tail -n 3 "$log")"
} >"$unavailable"
echo "=====================================================================" >&2
echo "install-python-peers: WARNING: PyPI is unreachable." >&2
sed 's/^/install-python-peers: /' "$unavailable" >&2
echo "=====================================================================" >&2
exit 0
