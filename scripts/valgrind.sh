#!/usr/bin/env bash
# valgrind memcheck over the zookeeper-mt test binaries (its unit tests and every
# integration test file) and recipe test binaries, one test thread each, against the real
# servers the harness starts (the JVMs run natively: children are not traced).
#
#   scripts/valgrind.sh [BINARY...]
#
# BINARY is a test target name (`ops`, `close`, `lock`, ...; `unit-zookeeper_mt` and
# `unit-zookeeper_mt_recipes` for the unit tests). Default: every test binary of zookeeper-mt and of
# the recipes (about 25 binaries, 3-5 minutes on two cores: the tests wait on a real
# server much more than they compute, so memcheck's slowdown costs little).
#
# A binary fails if memcheck finds an invalid access, a use of uninitialised memory or a
# *definite* leak (`--errors-for-leak-kinds=definite`), or if its tests fail. The summary
# prints memcheck's ERROR SUMMARY and the definitely-lost bytes per binary; full logs go
# to target/valgrind/<binary>.log.
#
# Suppressions: scripts/valgrind.supp, only for leaks inside libzookeeper_mt itself (see
# the comments there). Nothing of ours is suppressed.
#
# Nothing is skipped by default (every test passes under memcheck); the soak
# (integration/tests/soak.rs, 100,000 watches) is left to native runs.
#
# Environment:
#   VALGRIND_TIMEOUT   seconds per binary before it is killed (default 240)
#   VALGRIND_SKIP      libtest filters to skip, e.g. "idle_consumers concurrent_consumers"
#                      (substring match, applied to every binary)
#   VALGRIND_ARGS      extra valgrind arguments
set -euo pipefail
cd "$(dirname "$0")/.."

per_binary=${VALGRIND_TIMEOUT:-240}
logs=target/valgrind
mkdir -p "$logs"

if ! command -v valgrind >/dev/null; then
    echo "valgrind is not installed (apt-get install valgrind)" >&2
    exit 2
fi

# Test binaries of zookeeper-mt and the recipes: "name path" lines.
binaries=$(cargo test -p zookeeper-mt -p zookeeper-mt-recipes --no-run --message-format=json 2>/dev/null |
    jq -r 'select(.profile.test == true and .executable != null)
           | (if .target.kind[0] == "lib" then "unit-" + .target.name else .target.name end)
             + " " + .executable')

# `steps` and `drop_steps` are left out: they check protocol outcomes over a few hundred
# sessions (no new memory paths), which under memcheck would take longer than every other
# binary together. `loss_timing` too: it measures a holder's loss report against another
# client's takeover in real time (the paths it runs are those of `lock`, `semaphore` and
# `election`, which memcheck covers), and memcheck's serialized threads would measure
# valgrind, not the recipe.
default_set=$(awk '{ print $1 }' <<<"$binaries" | grep -vx -e steps -e drop_steps -e loss_timing | sort)
wanted=${*:-$default_set}

skip=()
for filter in ${VALGRIND_SKIP:-}; do
    skip+=(--skip "$filter")
done

supp=()
[[ -f scripts/valgrind.supp ]] && supp=(--suppressions=scripts/valgrind.supp)

# run_memcheck EXE LOG: one memcheck run of a test binary; returns its exit status.
run_memcheck() {
    # shellcheck disable=SC2086
    timeout --kill-after=10 "$per_binary" valgrind \
        --tool=memcheck --leak-check=full --show-leak-kinds=definite \
        --errors-for-leak-kinds=definite --error-exitcode=1 --fair-sched=yes \
        --num-callers=40 "${supp[@]}" ${VALGRIND_ARGS:-} \
        "$1" --test-threads=1 "${skip[@]}" >"$2" 2>&1
}

status=0
summary=()
for name in $wanted; do
    exe=$(awk -v n="$name" '$1 == n { print $2 }' <<<"$binaries" | head -n1)
    if [[ -z "$exe" ]]; then
        echo "no test binary named $name" >&2
        status=1
        continue
    fi
    log="$logs/$name.log"
    rm -f "$log.valgrind-died"
    echo "== $name ($exe) =="
    started=$(date +%s)
    rc=0
    run_memcheck "$exe" "$log" || rc=$?
    retried=""
    if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && ! grep -q 'ERROR SUMMARY:' "$log"; then
        # memcheck prints its ERROR SUMMARY whenever the program ends, however it ends
        # (exit, panic, signal). A log without one means valgrind itself gave up (an
        # internal panic or its own out-of-memory), which says nothing about our code:
        # show why, keep that log, and run the binary once more.
        echo "valgrind itself ended without a summary (exit $rc); its log's tail:"
        tail -n 40 "$log" | sed 's/^/    /'
        mv "$log" "$log.valgrind-died"
        rc=0
        run_memcheck "$exe" "$log" || rc=$?
        retried=" (rerun: valgrind died on the first run, see $log.valgrind-died)"
    fi
    took=$(($(date +%s) - started))
    errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors' "$log" | tail -n1 | grep -Eo '[0-9]+' || echo "?")
    lost=$(grep -Eo 'definitely lost: [0-9,]+ bytes in [0-9,]+ blocks' "$log" | tail -n1 || true)
    [[ -n "$lost" ]] || lost="definitely lost: 0 bytes"
    suppressed=$(grep -Eo 'suppressed: [0-9,]+ bytes in [0-9,]+ blocks' "$log" | tail -n1 | sed 's/suppressed: //' || true)
    tests=$(grep -E '^test result:' "$log" | tail -n1 | sed 's/; finished in.*//' || true)
    case $rc in
    0) verdict=ok ;;
    124 | 137) verdict="TIMEOUT after ${per_binary}s" ;;
    *) verdict="FAILED (exit $rc)" ;;
    esac
    if [[ $rc -ne 0 ]]; then
        status=1
        echo "$name failed; its log's tail:"
        tail -n 60 "$log" | sed 's/^/    /'
    fi
    line=$(printf '%-18s %-8s ERROR SUMMARY: %s errors; %s; C-library leak suppressed: %s; %s; %ss%s' \
        "$name" "$verdict" "$errors" "$lost" "${suppressed:-0 bytes}" "${tests:-no test result}" "$took" "$retried")
    echo "$line"
    summary+=("$line")
done

echo
echo "== valgrind memcheck summary (logs in $logs/) =="
printf '%s\n' "${summary[@]}"
exit $status
