#!/usr/bin/env bash
# Runs every example of integration/examples/ the way a new user would, each on its own
# throwaway server (ZK_HOSTS unset), two at a time, each within a time bound; checks its
# exit status and the lines that show what it demonstrates, and names each that failed.
#
#   scripts/examples.sh               every example once
#   scripts/examples.sh --runs 20     every example 20 times (flakiness check)
#   scripts/examples.sh lock queue    only these examples
#
# Environment: EXAMPLES_JOBS (parallel runs, default 2), EXAMPLE_TIMEOUT_S (default 180).
set -euo pipefail
cd "$(dirname "$0")/.."

# What each example must print: one extended regular expression per line, every one must
# match some line of its output. An example missing here is a failure (a new example
# must say what it demonstrates).
expectations() {
    cat <<'TABLE'
async_minimal_executor	^task 1 released it$
async_minimal_executor	^task 2 released it$
async_minimal_executor	^leading: true$
async_watchdog	^every request answered: true$
async_watchdog	^released once the link was back: true$
async_watchdog	^every request settled after close_async: true$
async_watchdog	^longest poll or drop: 
async_tokio	^9 jobs done by 3 workers, report says 9; 0 left in the queue$
config_watch	in order: true, final version [0-9]+ seen: true$
config_watch	^\[watcher\] config deleted, stopping$
crawler	^16 links crawled, 0 of them twice
crawler	crashed holding http://
fenced_writes	^stale write refused by the server
fenced_writes	^data: written by the second holder$
group_membership	^three members: yes$
group_membership	^web-1's new address: yes$
group_membership	^web-2 gone: yes$
group_membership	^web-0 back in a new session: yes$
group_membership	^an empty group: yes$
group_membership	^  kazoo sees \["python-worker", "rust-worker"\]$
group_membership	^  we see \["python-worker", "rust-worker"\]$
id_generator	^  2000 ids, 2000 distinct, 0 duplicates -> all unique$
id_generator	^  batch 50 +2000 
leader_latch	^  the Curator process leads
leader_latch	^  rust-[0-9] leads again: .*the old guard is still lost: true$
leader_latch	^closed; nodes left in the election: 0$
lock	^4 processes held the lock one at a time; 3 wake-ups in all
managed_session	^session 0x[0-9a-f]+ expired by the server \(its ephemeral lease is gone\)$
managed_session	^\[states\] Lost \(generation 1\)$
managed_session	^\[states\] NewSession \(generation 2\)$
managed_session	^lease lost with generation 1; it still exists: false \(not re-taken\)$
managed_session	^\[cache\] config now "threads=8" \(read in session generation 2\)$
priority_queue	^  page the on-call$
priority_queue	c\.png refused, queue full$
priority_queue	^work queue: dead letters \["
queue	^queue item 1$
queue	^queue item 3$
reentrant_lock	^main: released$
reentrant_lock	^other process: got it \(holds: 1\)$
shared_count	^  shared-count@Curator#1: 100 increments$
shared_count	^  counter@Kazoo#2: 100 increments$
shared_count	^final value 600 = 4 Rust threads \+ 2 peers x 100 increments
tokio_service	^instance [01] led and produced 12 jobs$
tokio_service	^12 jobs produced by the leader, 12 done by 3 workers; 0 left in the queue, 0 in progress$
tokio_service	^shut down: nothing lost, nothing left$
testing_service	^killing the leader, member [0-9]$
testing_service	^worker-0's session 0x[0-9a-f]+ expired$
testing_service	^[0-9]+ critical sections, none overlapping, tokens increasing$
tree_cache	^initial load: 7 nodes$
tree_cache	^after close: 0 contexts left on the handle$
TABLE
}

# One run of one example: `run_one OUTDIR NAME RUN`. Prints one result line (and the
# output of a failed run); the exit status says whether it passed.
run_one() {
    local dir=$1 name=$2 run=$3
    local out="$dir/$name.$run.out" bin="target/debug/examples/$name"
    local start=$SECONDS status=0 missing=""
    # `timeout` signals the example's whole process group; the example's servers and
    # peers die with it (PDEATHSIG).
    env -u ZK_HOSTS timeout -k 10 "${EXAMPLE_TIMEOUT_S:-180}" "$bin" >"$out" 2>&1 || status=$?
    local patterns
    patterns=$(expectations | awk -F'\t' -v n="$name" '$1 == n { print $2 }')
    [ -n "$patterns" ] || missing="(no expected lines listed for this example)"
    while IFS= read -r pattern; do
        [ -z "$pattern" ] && continue
        grep -Eq -- "$pattern" "$out" || missing+="${missing:+; }missing: $pattern"
    done <<<"$patterns"
    local took=$((SECONDS - start))
    if [ "$status" -eq 0 ] && [ -z "$missing" ]; then
        echo "ok    $name (run $run, ${took}s)"
        return 0
    fi
    [ "$status" -eq 124 ] && missing="timed out; $missing"
    {
        echo "FAIL  $name (run $run, exit $status, ${took}s) $missing"
        sed 's/^/      | /' "$out"
    } >"$out.failed"
    cat "$out.failed"
    return 1
}

if [ "${1:-}" = "--one" ]; then
    shift
    run_one "$@"
    exit
fi

runs=1
names=()
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    *) names+=("$1"); shift ;;
    esac
done
if [ ${#names[@]} -eq 0 ]; then
    for file in integration/examples/*.rs; do names+=("$(basename "$file" .rs)"); done
fi

cargo build --quiet -p zookeeper-integration --examples
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for run in $(seq 1 "$runs"); do
    for name in "${names[@]}"; do echo "$name $run"; done
done | xargs -P "${EXAMPLES_JOBS:-2}" -n 2 "$0" --one "$dir" || true

total=$((runs * ${#names[@]}))
failed=$(find "$dir" -name '*.failed' | wc -l)
if [ "$failed" -gt 0 ]; then
    echo "examples: $failed of $total runs FAILED:"
    find "$dir" -name '*.failed' -exec head -n 1 {} \; | sort
    exit 1
fi
echo "examples: all $total runs passed (${#names[@]} examples x $runs)"
