#!/usr/bin/env bash
# Packages the four publishable crates (zookeeper-mt-sys, zookeeper-mt,
# zookeeper-mt-recipes, zookeeper-testing) so that a user with only the registry can build them, `vendored`
# included.
#
#   scripts/package.sh [CARGO_ARGS...]            cargo package (the .crate files land in
#                                                 <target dir>/package/)
#   scripts/package.sh publish [CARGO_ARGS...]    cargo publish, e.g. `publish --dry-run`
#
# The `vendored` feature compiles the pinned ZooKeeper C client, so the -sys package must
# carry its source. Third-party source is never committed, so it is staged here, for the
# duration of the cargo command only:
#   1. vendor/fetch-c-client.sh downloads the pinned npm package zookeeper@7.3.0 into a
#      temporary directory and checks the sha256 of it and of the C client tarball inside
#      (a fresh, verified copy: never a possibly edited vendor/ tree);
#   2. the part of that tree the build reads is copied to zookeeper-mt-sys/c-client/
#      (gitignored; listed in the manifest's `include`), with the C client's LICENSE and
#      NOTICE.txt, src/hashtable/LICENSE.txt, and a SOURCE.txt naming where it came from.
#      Left out: tests/, ssl/ (test certificates), the autotools/cmake/maven build files
#      but CMakeLists.txt (the build reads the version from it), docs;
#   3. cargo packages (or publishes) the three crates together: with several `-p`, cargo
#      resolves the not yet published interdependencies through a temporary local registry
#      and verifies each package by building it from its own .crate contents;
#   4. c-client/ is removed again (also on failure), so in-repository builds keep using
#      vendor/zookeeper-client-c.
#
# Uncommitted changes: cargo counts the staged (gitignored) c-client/ files as uncommitted
# and refuses without `--allow-dirty`, so this script checks the rest itself: it refuses
# if git reports changes in the three crates or the root files they ship (Cargo.toml,
# Cargo.lock, LICENSE-*), unless you pass `--allow-dirty`; then passes `--allow-dirty`
# to cargo. (So the .crate's .cargo_vcs_info.json always says "dirty": the staged source.)
#
# Environment: CARGO_TARGET_DIR as for any cargo command.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

crates=(zookeeper-mt-sys zookeeper-mt zookeeper-mt-recipes zookeeper-testing)
stage="$repo/zookeeper-mt-sys/c-client"

mode=package
if [[ $# -gt 0 && $1 == publish ]]; then
    mode=publish
    shift
fi

say() { printf 'package: %s\n' "$*" >&2; }

allow_dirty=0
for arg in "$@"; do
    if [[ $arg == --allow-dirty ]]; then
        allow_dirty=1
    fi
done
if [[ $allow_dirty == 0 ]]; then
    changes=$(git status --porcelain -- "${crates[@]}" Cargo.toml Cargo.lock LICENSE-MIT LICENSE-APACHE)
    if [[ -n $changes ]]; then
        say "error: uncommitted changes in what the packages contain (commit them, or pass --allow-dirty):"
        printf '%s\n' "$changes" >&2
        exit 1
    fi
    # The staged C client source only (checked above for everything else).
    set -- --allow-dirty "$@"
fi

work=$(mktemp -d)
cleanup() {
    rm -rf "$work" "$stage"
}
trap cleanup EXIT

# 1. A fresh, checksum-verified copy of the pinned source (npm's cache makes it cheap).
ZOOKEEPER_C_CLIENT_SRC="$work/zookeeper-client-c" vendor/fetch-c-client.sh
src="$work/zookeeper-client-c"
stamp=$(cat "$src/.fetch-c-client.stamp")
release=$(sed -n 's/^project(zookeeper VERSION \([^)]*\)).*/\1/p' "$src/CMakeLists.txt")
[[ -n $release ]] || {
    say "error: no release version in the C client's CMakeLists.txt"
    exit 1
}

# 2. Stage what the build needs, with the licence files.
rm -rf "$stage"
mkdir -p "$stage"
for item in LICENSE NOTICE.txt README ChangeLog CMakeLists.txt include generated src; do
    [[ -e "$src/$item" ]] || {
        say "error: the C client tarball has no $item"
        exit 1
    }
    cp -R "$src/$item" "$stage/"
done
cat >"$stage/SOURCE.txt" <<EOF
The Apache ZooKeeper C client ${release}, as shipped in the npm registry package
${stamp}
(the pinned checksums are in vendor/fetch-c-client.sh of the zookeeper-mt repository).

Only what the build of zookeeper-mt-sys reads is kept: CMakeLists.txt, include/,
generated/ and src/, with the licence files. The tarball's tests/, ssl/ (test
certificates), autotools/maven build files and docs are left out; nothing is modified.

Licence: Apache-2.0 (LICENSE, NOTICE.txt), except src/hashtable/ (BSD-3-Clause, see
src/hashtable/LICENSE.txt). The OpenSSL and Cyrus SASL licences in LICENSE concern those
libraries, which are not included: the tls/sasl features link the system's.
EOF
say "staged the C client source in ${stage#"$repo"/} ($(du -sk "$stage" | cut -f1) KiB)"

# 3. Package (or publish) the three together.
# Cargo verifies a package against the others through a temporary registry, and unpacks
# their .crate files under $CARGO_HOME/registry/src/<that registry>/<name>-<version>; a
# directory already there (from an earlier run at the same path, same version, older
# code) is reused without comparing contents, and the verification would build against
# stale sources. Our own crates' unpacked copies go first (nothing else is named so).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for crate in "${crates[@]}"; do
    rm -rf "$cargo_home"/registry/src/*/"$crate"-[0-9]* \
        "$cargo_home"/registry/cache/*/"$crate"-[0-9]*.crate
done
packages=()
for crate in "${crates[@]}"; do
    packages+=(-p "$crate")
done
say "cargo $mode ${packages[*]} $*"
cargo "$mode" "${packages[@]}" "$@"

if [[ $mode == package ]]; then
    target_dir=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    for crate in "${crates[@]}"; do
        version=$(cargo metadata --format-version 1 --no-deps |
            python3 -c 'import json, sys
name = sys.argv[1]
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == name))' "$crate")
        file="$target_dir/package/$crate-$version.crate"
        [[ -f "$file" ]] || {
            say "error: expected $file"
            exit 1
        }
        say "$(printf '%-70s %6s KiB' "$file" "$(($(stat -c %s "$file") / 1024))")"
    done
fi
