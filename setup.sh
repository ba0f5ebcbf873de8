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
#                        with `vendored,tls` (scripts/setup-security.sh installs it too)
#
# Runs apt-get as root, or through sudo. Prints what it installs; does nothing if all
# are present. Set ZK_SETUP_SKIP=1 to skip entirely (e.g. on a non-Debian machine where
# you installed the equivalents yourself).
set -euo pipefail

if [ "${ZK_SETUP_SKIP:-0}" = "1" ]; then
  echo "setup: ZK_SETUP_SKIP=1, skipping package checks"
  exit 0
fi

packages=(libzookeeper-mt-dev zookeeper default-jre-headless pkg-config python3-kazoo python3-dev dpkg-dev valgrind default-jdk-headless libcurator-recipes-java libssl-dev)
command -v npm >/dev/null 2>&1 || packages+=(npm)

exec "$(dirname "$0")"/scripts/ensure-packages.sh setup "${packages[@]}"
