#!/usr/bin/env bash
# Idempotent set-up: installs the Debian packages this project needs, only those missing.
#
#   libzookeeper-mt-dev  the ZooKeeper C client (headers + libzookeeper_mt) we bind
#   zookeeper            the Java server the tests, examples and benchmarks start on loopback
#   default-jre-headless a Java runtime for that server
#   pkg-config           one of the ways build.rs looks for the C client
#   python3-kazoo        the Python client the comparison benchmarks measure against
#   python3-dev dpkg-dev build zkpython (seed 000's Python bindings) from Debian's source
#                        package for the benchmarks and the behaviour comparison test
#   valgrind             memory checking of the client and recipe tests
#   npm                  only if missing: fetches the pinned C client source for `vendored`
#
# Runs apt-get as root, or through sudo. Prints what it installs; does nothing if all
# are present. Set ZK_SETUP_SKIP=1 to skip entirely (e.g. on a non-Debian machine where
# you installed the equivalents yourself).
set -euo pipefail

if [ "${ZK_SETUP_SKIP:-0}" = "1" ]; then
  echo "setup: ZK_SETUP_SKIP=1, skipping package checks"
  exit 0
fi

packages=(libzookeeper-mt-dev zookeeper default-jre-headless pkg-config python3-kazoo python3-dev dpkg-dev valgrind)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all required Debian packages are installed (${packages[*]})"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing packages: ${missing[*]}, and no apt-get here." >&2
  echo "setup: install the equivalents yourself, then re-run with ZK_SETUP_SKIP=1." >&2
  exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "setup: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "setup: installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
