#!/usr/bin/env bash
# The recipe rows of an older commit ("before") and of this tree ("after"), in one run
# against one throwaway server: `zookeeper-bench before-after` (see bench/README.md).
#
#   bench/before-after.sh <old-commit> [before-after flags: --pairs 6 --instructions --peers none ...]
#
# The old commit's tree is exported (git archive: no worktree registered) into a temporary
# directory and built there in release mode with its own target directory; that directory
# is removed at the end, also on failure or Ctrl-C. The old tree gets this tree's whole
# bench crate (BENCH_DIR: the scenario code and the modules it uses), so both binaries
# run the same scenario code and only the libraries differ; code the old libraries
# cannot compile fails the build with cargo's message. So the old commit needs the current crate names
# (`zookeeper_mt`, `zookeeper_mt_recipes`) and recipe module paths: the crates were
# renamed and the recipes regrouped after the one-core rebuild, whose before/after
# figures in bench/README.md were measured before that, with the names of the time.
set -euo pipefail

BENCH_DIR=bench

old=${1:?usage: bench/before-after.sh <old-commit> [zookeeper-bench before-after flags]}
shift
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
old_rev=$(git -C "$repo" rev-parse --short "$old^{commit}")
new_rev=$(git -C "$repo" describe --always --dirty --abbrev=7)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/zkbench-before.XXXXXX")
# Each long step runs in the background, in a process group of its own (set -m), and is
# waited for, so that a signal is handled at once: the step's whole group (cargo and its
# rustc processes, or the bench and its clients) is stopped, then the directory removed.
set -m
child=
step() { # DIR COMMAND...: runs COMMAND in DIR
    (cd "$1" && shift && exec "$@") &
    child=$!
    wait "$child"
    child=
}
on_signal() {
    if [ -n "$child" ]; then
        kill -TERM -- "-$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
        sleep 1 # the group's other processes
    fi
    exit "$1"
}
cleanup() { rm -rf "$tmp" 2>/dev/null || { sleep 1; rm -rf "$tmp"; }; }
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

echo "== exporting $old_rev to $tmp/src" >&2
mkdir "$tmp/src"
git -C "$repo" archive "$old_rev" | tar -x -C "$tmp/src"
if ! git -C "$repo" diff --quiet "$old_rev" -- "$BENCH_DIR"; then
    echo "   $BENCH_DIR/: this tree's version (differs from $old_rev's)" >&2
fi
rm -rf "${tmp:?}/src/$BENCH_DIR"
cp -r "$repo/$BENCH_DIR" "$tmp/src/$BENCH_DIR"
rm -rf "$tmp/src/$BENCH_DIR/zkpython/build"

echo "== building before ($old_rev) in $tmp/target" >&2
step "$tmp/src" env CARGO_TARGET_DIR="$tmp/target" cargo build --release -p zookeeper-bench
echo "== building after ($new_rev)" >&2
step "$repo" cargo build --release -p zookeeper-bench
new_bin=$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/zookeeper-bench

step "$repo" "$new_bin" before-after --old "$tmp/target/release/zookeeper-bench" \
    --old-label "$old_rev" --new-label "$new_rev" \
    --command "bench/before-after.sh $old $*" "$@"
