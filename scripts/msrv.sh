#!/usr/bin/env bash
# Checks the minimum supported Rust version (MSRV) of the four published crates
# (zookeeper-mt-sys, zookeeper-mt, zookeeper-mt-recipes, zookeeper-testing): see docs/msrv.md.
#
#   scripts/msrv.sh
#
# The MSRV is read from `rust-version` in [workspace.package] of the root Cargo.toml, the
# single source of truth (zk-harness/Cargo.toml, which does not inherit it, must agree).
# The script:
#   1. installs the MSRV toolchain (x.y.0, the oldest release the declaration admits) and
#      the newest release of the minor just below it, with rustup's minimal profile, if
#      they are missing (later runs download nothing);
#   2. resolves dependencies as a user on the MSRV would: in a copy of the workspace
#      (target/msrv/ws, removed on exit), a fresh lockfile with cargo's MSRV-aware resolver
#      (CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback, needs the default toolchain's
#      cargo >= 1.84): every dependency at its newest version whose own `rust-version`
#      admits ours. The committed Cargo.lock is not touched (the dev-only crates may use
#      newer dependencies with the main toolchain);
#   3. `cargo +MSRV check --locked` of the three lib targets, with default features and
#      with `zookeeper-mt/tls,zookeeper-mt/sasl` (zookeeper-mt-sys's tls and sasl: the
#      vendored C client is compiled, so vendor/fetch-c-client.sh runs first);
#   4. the same check of the lib targets with the release just below the MSRV, which must
#      fail in one of our crates: the declared value is the true minimum, not just a
#      passing one.
#
# Builds go to target/msrv/target (their own CARGO_TARGET_DIR: old toolchains would
# otherwise invalidate the main build's artifacts). About 1 minute on two cores once the
# toolchains are installed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

crates=(-p zookeeper-mt-sys -p zookeeper-mt -p zookeeper-mt-recipes -p zookeeper-testing)

# rust-version of [workspace.package] in the root manifest.
msrv=$(awk '
    /^\[/ { in_section = ($0 == "[workspace.package]") }
    in_section && /^rust-version *=/ { gsub(/.*= *"|".*/, ""); print; exit }
' Cargo.toml)
[[ "$msrv" =~ ^1\.([0-9]+)(\.[0-9]+)?$ ]] || {
    echo "msrv: no rust-version \"1.x\" in [workspace.package] of Cargo.toml (got '$msrv')" >&2
    exit 1
}
minor=${BASH_REMATCH[1]}
harness=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' zk-harness/Cargo.toml)
if [[ "$harness" != "$msrv" ]]; then
    echo "msrv: zk-harness/Cargo.toml says rust-version \"$harness\", the workspace \"$msrv\"" >&2
    exit 1
fi
# "1.82" admits 1.82.0, so that is what is checked; below it, the last 1.81.x.
msrv_toolchain=$msrv
[[ -n "${BASH_REMATCH[2]}" ]] || msrv_toolchain=$msrv.0
below_toolchain=1.$((minor - 1))

ensure_toolchain() {
    if ! rustup run "$1" rustc --version >/dev/null 2>&1; then
        rustup toolchain install --profile minimal --no-self-update "$1"
    fi
    rustup run "$1" rustc --version
}
ensure_toolchain "$msrv_toolchain"
ensure_toolchain "$below_toolchain"

# The MSRV-aware resolver is read from the environment by cargo >= 1.84.
resolver_cargo=$(cargo --version)
if [[ ! "$resolver_cargo" =~ ^cargo\ 1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 84)); then
    echo "msrv: the default toolchain's cargo must be >= 1.84 to resolve for the MSRV (have: $resolver_cargo)" >&2
    exit 1
fi

vendor/fetch-c-client.sh

export CARGO_TARGET_DIR="$root/target/msrv/target"
ws="$root/target/msrv/ws"
logs="$root/target/msrv"
trap 'rm -rf "$ws"' EXIT
rm -rf "$ws"
mkdir -p "$ws" "$CARGO_TARGET_DIR"
# The working tree as it is (uncommitted edits included) without build outputs; tar keeps
# the modification times, so unchanged sources are not rebuilt on the next run. The C
# client source comes along (or from ZOOKEEPER_C_CLIENT_SRC, an absolute path, if set).
tar -cf - --exclude=./.git --exclude=./target --exclude=./fuzz/target . | tar -xf - -C "$ws"

cd "$ws"
rm -f Cargo.lock
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo generate-lockfile

echo "msrv: cargo +$msrv_toolchain check (default features)"
cargo "+$msrv_toolchain" check --locked --lib "${crates[@]}"
echo "msrv: cargo +$msrv_toolchain check --features zookeeper-mt/tls,zookeeper-mt/sasl"
cargo "+$msrv_toolchain" check --locked --lib "${crates[@]}" --features zookeeper-mt/tls,zookeeper-mt/sasl

echo "msrv: cargo +$below_toolchain check must fail (the MSRV is the true minimum)"
below_log="$logs/below.log"
# --ignore-rust-version: cargo would otherwise refuse before compiling anything.
if cargo "+$below_toolchain" check --locked --keep-going --ignore-rust-version --lib "${crates[@]}" \
    >"$below_log" 2>&1; then
    echo "msrv: $below_toolchain builds the crates too: rust-version \"$msrv\" is not the minimum" >&2
    exit 1
fi
# It must fail in our code, not in a dependency or the toolchain (then it proves nothing).
if ! grep -q '^error: could not compile `zookeeper-mt' "$below_log"; then
    echo "msrv: $below_toolchain failed, but not in our crates (see $below_log):" >&2
    grep -m 5 '^error' "$below_log" >&2 || tail -n 20 "$below_log" >&2
    exit 1
fi
echo "msrv: $below_toolchain fails as it should; first error:"
grep -m 1 -A 1 '^error' "$below_log" | sed 's/^/  /'
echo "msrv: rust-version $msrv is the minimum, and it builds"
