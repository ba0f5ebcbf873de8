#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time and prints how many inputs
# each one executed, then the same properties as plain `cargo test` loops.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]        (default 60)
#
# Environment:
#   FUZZ_TARGETS      targets to run (default: every target in fuzz/fuzz_targets)
#   FUZZ_SANITIZER    cargo-fuzz sanitizer: address (default) or none
#   ZK_FUZZ_ITERS     inputs per property for the plain-test loops (default 100000)
#
# Targets (fuzz-props/src/ has the properties):
#   path_validation   validate_path never panics and agrees with the server's
#                     PathUtils.validatePath (ported as an oracle)
#   error_code        Error::from_code / Error::code round-trip, Display never panics
#   requests          arbitrary arguments through every request's Rust->C conversion
#                     on a closed handle: a deserved typed error or Closed, no panic
#
# The machine has stable Rust only; cargo-fuzz needs nightly flags (-Zsanitizer...),
# so this sets RUSTC_BOOTSTRAP=1 (stable rustc ships the ASan runtime). No ZooKeeper
# server is needed. The working corpus lives in fuzz/corpus/<target> (not committed),
# seeded from the tiny committed fuzz/seeds/<target>; crashes go to fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=${1:-60}
sanitizer=${FUZZ_SANITIZER:-address}
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz =="
    cargo install cargo-fuzz --locked
fi

targets=${FUZZ_TARGETS:-$(ls fuzz_targets | sed 's/\.rs$//')}
summary=()
for target in $targets; do
    echo "== cargo fuzz run $target (${seconds}s, sanitizer=$sanitizer) =="
    mkdir -p "corpus/$target"
    log=$(mktemp)
    status=0
    cargo fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" >"$log" 2>&1 || status=$?
    grep -E '^(Done|#[0-9]+ +DONE)' "$log" || true
    runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$log" | tail -1)
    if [ "$status" -ne 0 ]; then
        tail -40 "$log"
        rm -f "$log"
        echo "FAILED: $target (exit $status); the crashing input is in fuzz/artifacts/$target/"
        exit "$status"
    fi
    rm -f "$log"
    summary+=("$target: ${runs:-?}")
done

echo "== plain-test loops (ZK_FUZZ_ITERS=${ZK_FUZZ_ITERS:-100000}) =="
unset RUSTC_BOOTSTRAP
cargo test --lib --release -- --nocapture 2>&1 | grep -E '^(fuzz loops|test result)'

echo "== fuzz executions =="
printf '%s\n' "${summary[@]}"
