#!/usr/bin/env bash
# ensure-packages.sh NAME PACKAGE...: installs the Debian packages that are missing, with
# apt-get as root or through sudo, printing what it does under the prefix NAME. Does
# nothing if all are installed. Shared by ./setup.sh and scripts/setup-security.sh.
set -euo pipefail

name=$1
shift
packages=("$@")

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "$name: all required Debian packages are installed (${packages[*]})"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "$name: missing packages: ${missing[*]}, and no apt-get here." >&2
  echo "$name: install the equivalents yourself, then re-run with ZK_SETUP_SKIP=1." >&2
  exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "$name: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "$name: installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "$name: done"
