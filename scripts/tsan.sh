#!/usr/bin/env bash
# ThreadSanitizer over the client's concurrency-heavy suites against real servers, with
# the standard library (-Zbuild-std) and the vendored C client (-fsanitize=thread)
# instrumented, so that a data race between our code and a C thread (the IO thread, the
# completion thread) or between our own threads is reported with both stacks.
#
#   scripts/tsan.sh [TEST...]
#
# TEST: zookeeper-mt integration test names (default below). Every report is sorted by
# scripts/tsan_reports.py: reports whose accesses all lie inside the C client are its
# own races (counted and listed, not failed on: e.g. its xid counter is an inline-asm
# atomic TSan cannot see, its threads read `zh->state` unlocked); any report with an
# access in Rust code fails the stage.
#
# Needs the rust-src component (for -Zbuild-std; installed here with rustup) and, as
# scripts/asan.sh, nightly flags on stable through RUSTC_BOOTSTRAP=1. Builds go to
# target/tsan/ (the first build compiles the standard library: a few minutes).
#
# Environment:
#   TSAN_TEST_THREADS   libtest threads per binary (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
threads=${TSAN_TEST_THREADS:-2}
default_tests="session close concurrency async_ops watches reconnect multi"
tests=${*:-$default_tests}

sysroot=$(rustc --print sysroot)
if [[ ! -d "$sysroot/lib/rustlib/src/rust/library" ]]; then
    echo "== installing the rust-src component (for -Zbuild-std) =="
    if ! rustup component add rust-src; then
        echo "tsan.sh: the rust-src component cannot be installed, so the standard library" >&2
        echo "cannot be built instrumented (-Zbuild-std); without it ThreadSanitizer reports" >&2
        echo "false races on every std synchronization. Skipping the ThreadSanitizer stage." >&2
        exit 0
    fi
fi

vendor/fetch-c-client.sh

export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=thread -Cforce-frame-pointers=yes"
export CFLAGS_x86_64_unknown_linux_gnu="-fsanitize=thread -g -O1"
export CARGO_TARGET_DIR=target/tsan
logs=$PWD/target/tsan/logs
rm -rf "$logs"
mkdir -p "$logs"
# Keep going after a report and exit as the tests say (the reports are sorted
# afterwards); one log file per process.
export TSAN_OPTIONS="halt_on_error=0:exitcode=0:report_signal_unsafe=0:history_size=4:log_path=$logs/tsan"

test_args=()
for test in $tests; do
    test_args+=(--test "$test")
done

echo "== building with ThreadSanitizer (-Zbuild-std) =="
cargo test -Zbuild-std --target "$target" -p zookeeper-mt --features zookeeper-mt-sys/vendored \
    "${test_args[@]}" --no-run 2>&1 | grep -E '^(error|warning: unused)' || true

echo "== running: $tests =="
status=0
set +e
cargo test -Zbuild-std --target "$target" -p zookeeper-mt --features zookeeper-mt-sys/vendored \
    --no-fail-fast "${test_args[@]}" -- --test-threads="$threads" 2>&1 |
    grep -E '^(test result|     Running|test .* FAILED|thread .* panicked)'
tests_rc=${PIPESTATUS[0]}
set -e
[[ $tests_rc -eq 0 ]] || status=1

echo
echo "== ThreadSanitizer reports (logs in $logs/) =="
shopt -s nullglob
reports=("$logs"/tsan.*)
if [[ ${#reports[@]} -eq 0 ]]; then
    echo "ThreadSanitizer: no reports"
elif ! python3 scripts/tsan_reports.py "${reports[@]}"; then
    status=1
fi
[[ $tests_rc -eq 0 ]] || echo "tsan.sh: some tests failed under ThreadSanitizer (exit $tests_rc)"
exit $status
