#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, then every crate's tests against
# real ZooKeeper servers the harness starts on loopback, then the raw-FFI tests again
# against the vendored (statically linked, built from pinned source) C client.
# This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every Debian package any stage below uses (the TLS/SASL ones included: the MSRV stage
# builds `tls,sasl`), installed before the first stage runs; idempotent.
./setup.sh

echo "== rustfmt, clippy and rustdoc (house rules) =="
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "== MSRV: the published crates build with the declared rust-version, and not below it =="
./scripts/msrv.sh

echo "== cargo test --workspace (system libzookeeper_mt) =="
cargo test --workspace --all-targets
cargo test --workspace --doc
echo "== zookeeper-mt's tracing feature (structured C log events) =="
cargo clippy -p zookeeper-mt --features tracing --all-targets -- -D warnings
cargo test -p zookeeper-mt --features tracing --test tracing_events

echo "== every example, each on its own throwaway server, its output checked =="
./scripts/examples.sh

echo "== zookeeper-mt-sys against the vendored C client =="
vendor/fetch-c-client.sh
cargo test -p zookeeper-mt-sys --features vendored

echo "== the published crates, from their .crate files alone (package, publish --dry-run, a fresh project on the system and the vendored C client) =="
./scripts/registry-check.sh

echo "== valgrind memcheck over the client and recipe test binaries =="
./scripts/valgrind.sh

echo "== AddressSanitizer over the client, recipe and soak suites (vendored C client instrumented) =="
./scripts/asan.sh

echo "== ThreadSanitizer over the client's concurrency suites (std and C client instrumented) =="
./scripts/tsan.sh

echo "== TLS and SASL through the vendored C client =="
cargo test -p zookeeper-mt-sys --features tls,sasl
cargo test -p zookeeper-mt --features tls,sasl --test security
