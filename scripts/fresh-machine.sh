#!/usr/bin/env bash
# Proves that the README's two commands work on a fresh machine, from a clean clone:
#
#   scripts/fresh-machine.sh [--yes] [--keep]
#
#   1. clones the current commit (HEAD; uncommitted edits are not part of it) into a
#      temporary directory;
#   2. removes the project's Debian packages: every package ./setup.sh installs
#      (`ZK_SETUP_LIST=1 ./setup.sh` prints them; the TLS/SASL ones are among them),
#      except those a new machine of this workplace already has (FRESH_MACHINE_KEEP,
#      default below; set it to override). It warns first and, without --yes, asks;
#   3. runs the README's two commands, read from the README's "Running the examples and
#      tests" block (not copied here), one after the other in the clone, and prints each
#      command's exit status and wall time. Logs: <tmp>/logs/<n>.log.
#
# The packages come back with the first command (./setup.sh); if the run is interrupted
# before that, run ./setup.sh yourself. The clone is removed on exit unless --keep is
# given. The second command is the whole test suite: about 40 minutes on 2 cores, from a
# clean target directory. Exit status: 0 if both commands exited 0.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

yes=0
keep=0
for arg in "$@"; do
    case $arg in
        --yes) yes=1 ;;
        --keep) keep=1 ;;
        *) echo "usage: scripts/fresh-machine.sh [--yes] [--keep]" >&2; exit 2 ;;
    esac
done

# What a new machine of this workplace's Rust kind already has, of the packages set-up
# installs (its package list: python3-dev, dpkg-dev, valgrind, openssl, libssl-dev and
# libsasl2-modules are preinstalled). Removing them would test a machine that does not exist.
keep_list=${FRESH_MACHINE_KEEP:-"python3-dev dpkg-dev valgrind openssl libssl-dev libsasl2-modules"}

mapfile -t wanted < <(ZK_SETUP_LIST=1 ./setup.sh)
[ ${#wanted[@]} -gt 0 ] || { echo "fresh-machine: ./setup.sh listed no packages" >&2; exit 1; }
remove=()
for package in "${wanted[@]}"; do
    [[ " $keep_list " == *" $package "* ]] && continue
    if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        remove+=("$package")
    fi
done

# The README's two commands: the non-comment lines of the first ```sh block after the
# heading "## Running the examples and tests", each without its trailing comment.
mapfile -t commands < <(awk '
    /^## Running the examples and tests/ { section = 1; next }
    section && /^## / { exit }
    section && /^```sh/ { block = 1; next }
    block && /^```/ { exit }
    block && NF { sub(/[[:space:]]+#.*$/, ""); print }
' README.md)
if [ ${#commands[@]} -ne 2 ]; then
    echo "fresh-machine: expected two commands in README.md's test block, found ${#commands[@]}:" >&2
    printf '  %s\n' "${commands[@]}" >&2
    exit 1
fi

commit=$(git rev-parse HEAD)
echo "fresh-machine: commit $commit"
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
    echo "fresh-machine: note: uncommitted changes are not part of the clone"
echo "fresh-machine: the README's commands:"
printf '  %s\n' "${commands[@]}"

if [ ${#remove[@]} -gt 0 ]; then
    echo
    echo "WARNING: this removes these Debian packages from this machine: ${remove[*]}"
    echo "         (kept, as a new machine has them: $keep_list)"
    echo "         The first command (./setup.sh) installs them again; to put them back"
    echo "         yourself, run ./setup.sh in $repo."
    if [ "$yes" = 0 ]; then
        read -r -p "Remove them and go on? [y/N] " answer
        [[ "$answer" == [yY]* ]] || { echo "fresh-machine: nothing removed"; exit 1; }
    fi
    if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get remove -y -qq "${remove[@]}" >/dev/null
    echo "fresh-machine: removed ${remove[*]}"
else
    echo "fresh-machine: none of the project's packages is installed; nothing to remove"
fi

work=$(mktemp -d -t zk-fresh-machine.XXXXXX)
cleanup() {
    if [ "$keep" = 1 ]; then echo "fresh-machine: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
git clone --quiet --no-local "$repo" "$work/repo"
git -C "$work/repo" checkout --quiet "$commit"
mkdir -p "$work/logs"

status=0
results=()
for i in "${!commands[@]}"; do
    command=${commands[$i]}
    log="$work/logs/$((i + 1)).log"
    echo
    echo "fresh-machine: [$((i + 1))/2] $command   (log: $log)"
    start=$(date +%s)
    set +e
    (cd "$work/repo" && bash -c "$command") >"$log" 2>&1
    rc=$?
    set -e
    seconds=$(($(date +%s) - start))
    results+=("$(printf 'rc %-3s %5ss  %s' "$rc" "$seconds" "$command")")
    echo "fresh-machine: rc $rc after ${seconds}s"
    if [ "$rc" -ne 0 ]; then
        status=1
        tail -n 30 "$log" | sed 's/^/  | /'
        [ "$keep" = 1 ] || cp "$log" "$repo/target/fresh-machine-$((i + 1)).log" 2>/dev/null || true
    fi
done

echo
echo "fresh-machine: commit $commit, packages removed first: ${remove[*]:-none}"
printf '  %s\n' "${results[@]}"
exit $status
