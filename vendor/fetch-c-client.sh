#!/usr/bin/env bash
# Fetches the ZooKeeper C client source used by `--features zookeeper-mt-sys/vendored`.
#
# The source (with the generated jute files, which a plain upstream checkout lacks) ships
# inside the npm registry package `zookeeper@7.3.0` as `deps/zookeeper-client-c.tar.gz`.
# Both the npm tarball and the inner C client tarball are checked against the sha256
# values pinned below before anything is unpacked.
#
# Destination: $ZOOKEEPER_C_CLIENT_SRC if set (the build reads the same variable), else
# vendor/zookeeper-client-c/ next to this script (gitignored: third-party source is never
# committed). Re-running is a no-op once the destination holds a matching stamp.
set -euo pipefail

NPM_PACKAGE="zookeeper@7.3.0"
NPM_TARBALL_SHA256="4a54e62f1617ccb3da5e5b03bfce57a7369c36aa1da34b10be20829d1faff21d"
C_CLIENT_MEMBER="package/deps/zookeeper-client-c.tar.gz"
C_CLIENT_SHA256="19a5f0574fcb9c07bfb4d7b0b0c40a3fb760d8c0e1728444014b8ccb758b82e7"
STAMP_NAME=".fetch-c-client.stamp"
STAMP="${NPM_PACKAGE} ${C_CLIENT_MEMBER#package/} sha256=${C_CLIENT_SHA256}"

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${ZOOKEEPER_C_CLIENT_SRC:-${script_dir}/zookeeper-client-c}"

say() { printf 'fetch-c-client: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

verify() { # verify <file> <expected sha256> <description>
    local actual
    actual="$(sha256_of "$1")"
    if [[ "$actual" != "$2" ]]; then
        die "checksum mismatch for $3: expected $2, got $actual"
    fi
    say "verified $3 (sha256 $actual)"
}

# The build script runs in the crate directory, so a relative path would mean something else
# there than here.
[[ "$dest" == /* ]] || die "ZOOKEEPER_C_CLIENT_SRC must be an absolute path (got '$dest')"

if [[ -f "$dest/$STAMP_NAME" && "$(cat "$dest/$STAMP_NAME")" == "$STAMP" ]]; then
    say "up to date: $dest"
    exit 0
fi

# Only ever replace a directory this script created (it carries a stamp) or an empty one:
# ZOOKEEPER_C_CLIENT_SRC may point at somebody's own tree.
if [[ -e "$dest" && ! -f "$dest/$STAMP_NAME" ]] && [[ ! -d "$dest" || -n "$(ls -A "$dest")" ]]; then
    die "$dest exists but was not created by this script; remove it or set ZOOKEEPER_C_CLIENT_SRC elsewhere"
fi

command -v npm >/dev/null 2>&1 || die "npm is needed to download ${NPM_PACKAGE} from the npm registry"

parent="$(dirname "$dest")"
mkdir -p "$parent"
# Work next to the destination so the final move is a rename on the same filesystem.
work="$(mktemp -d "$parent/.fetch-c-client.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The tarballs were made on macOS: keep GNU tar quiet about the Apple xattr headers.
tar_flags=(--no-same-owner)
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
    tar_flags+=(--warning=no-unknown-keyword)
fi

say "downloading ${NPM_PACKAGE} from the npm registry"
npm_tarball="$(cd "$work" && npm pack --silent "$NPM_PACKAGE" | tail -n 1)"
[[ -f "$work/$npm_tarball" ]] || die "npm pack did not produce a tarball (got '${npm_tarball}')"
verify "$work/$npm_tarball" "$NPM_TARBALL_SHA256" "$npm_tarball"

tar "${tar_flags[@]}" -xzf "$work/$npm_tarball" -C "$work" "$C_CLIENT_MEMBER" ||
    die "$npm_tarball has no $C_CLIENT_MEMBER"
verify "$work/$C_CLIENT_MEMBER" "$C_CLIENT_SHA256" "${C_CLIENT_MEMBER#package/}"

mkdir "$work/unpacked"
tar "${tar_flags[@]}" -xzf "$work/$C_CLIENT_MEMBER" -C "$work/unpacked"
src="$work/unpacked/zookeeper-client-c"
for f in include/zookeeper.h generated/zookeeper.jute.c generated/zookeeper.jute.h src/mt_adaptor.c; do
    [[ -f "$src/$f" ]] || die "unexpected tarball layout: zookeeper-client-c/$f is missing"
done
printf '%s\n' "$STAMP" >"$src/$STAMP_NAME"

rm -rf "$dest"
mv "$src" "$dest"
say "unpacked the ZooKeeper C client into $dest"
