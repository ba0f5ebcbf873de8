#!/usr/bin/env bash
# Idempotent set-up: installs the Debian packages this project needs, only those missing.
#
#   libzookeeper-mt-dev  the ZooKeeper C client (headers + libzookeeper_mt) we bind
#   zookeeper            the Java server the tests, examples and benchmarks start on loopback
#   default-jre-headless a Java runtime for that server
#   default-jdk-headless javac: zk-harness compiles a small Java program that writes
#                        crafted data dirs (counters at their ends) with the server's classes
#   pkg-config           one of the ways build.rs looks for the C client
#   python3-kazoo        the Python client the comparison benchmarks measure against
#   python3-dev dpkg-dev build zkpython (the C client's Python bindings) from Debian's source
#                        package for the benchmarks and the behaviour comparison test
#   valgrind             memory checking of the client and recipe tests
#   npm                  only if missing: fetches the pinned C client source for `vendored`
#   libssl-dev           OpenSSL headers: scripts/registry-check.sh builds the packaged crates
#                        with `vendored,tls`, and the MSRV check builds `tls,sasl`
#   and every package of scripts/setup-security.sh (libsasl2-dev, libsasl2-modules, openssl
#   ...): the MSRV stage of the test command builds the `sasl` feature long before the
#   TLS/SASL stage, so one set-up at the top installs what every stage needs.
#
# Runs apt-get as root, or through sudo. Prints what it installs; does nothing if all
# are present. ZK_SETUP_LIST=1 prints the package list instead. Set ZK_SETUP_SKIP=1 to skip entirely (e.g. on a non-Debian machine where
# you installed the equivalents yourself).
set -euo pipefail

if [ "${ZK_SETUP_SKIP:-0}" = "1" ]; then
  echo "setup: ZK_SETUP_SKIP=1, skipping package checks"
  exit 0
fi

packages=(libzookeeper-mt-dev zookeeper default-jre-headless pkg-config python3-kazoo python3-dev dpkg-dev valgrind default-jdk-headless libcurator-recipes-java libssl-dev)
command -v npm >/dev/null 2>&1 || packages+=(npm)

# The TLS/SASL packages, read from the one list that names them.
mapfile -t security < <(sed -n 's/^packages=(\(.*\))$/\1/p' "$(dirname "$0")"/scripts/setup-security.sh | tr ' ' '\n')
[ ${#security[@]} -gt 0 ] || { echo "setup: no packages=(...) line in scripts/setup-security.sh" >&2; exit 1; }
packages+=("${security[@]}")
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | awk '!seen[$0]++')

# ZK_SETUP_LIST=1: print the list, one per line, and install nothing
# (scripts/fresh-machine.sh reads it).
if [ "${ZK_SETUP_LIST:-0}" = "1" ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

exec "$(dirname "$0")"/scripts/ensure-packages.sh setup "${packages[@]}"
