#!/usr/bin/env bash
# Builds zkpython, the C client's Python bindings (the `zookeeper` C extension from
# ZooKeeper's contrib), for /usr/bin/python3 against the system libzookeeper_mt, into
# bench/zkpython/build/ (gitignored). Its source is never committed: it is fetched from
# Debian's source package `zookeeper` (3.8.0, the same release as libzookeeper-mt-dev)
# through apt with a temporary deb-src list, and fixed at build time:
#   1. `PyIOBase_Type` is not exported by Python 3.11: set_log_stream's isinstance check on
#      it becomes a check for a `fileno` attribute (the function then calls fileno anyway);
#   2. `#` formats need PY_SSIZE_T_CLEAN (3.10+ raises SystemError without it) and
#      Py_ssize_t lengths: the define is added and every length bound to `s#` becomes
#      Py_ssize_t (parsed lengths) or is cast to it (built values).
# Idempotent: does nothing when the module for this script version is already built.
#
# Needs: apt-get, dpkg-source (dpkg-dev), gcc, libzookeeper-mt-dev, python3-dev.
# Usage: bench/zkpython/build.sh        -> prints the directory to put on PYTHONPATH
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
out="$here/build"
python="${ZKPYTHON_PYTHON:-/usr/bin/python3}"
version="3.8.0-11+deb12u2"   # Debian bookworm's zookeeper (matches libzookeeper-mt-dev)
fix_level=1                  # bump when the fixes below change
stamp="$out/.stamp"
want="$version fix=$fix_level python=$("$python" -c 'import sys; print(sys.version.split()[0])')"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && ls "$out"/lib/zookeeper*.so >/dev/null 2>&1; then
  echo "$out/lib"
  exit 0
fi

mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- fetch Debian's source package (a private apt state: the system lists are untouched)
src_dir="$out/src"
if [ ! -f "$src_dir/src/c/zookeeper.c.orig" ]; then
  # deb-src lines for the Debian mirrors this machine already uses (deb.debian.org if none)
  codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
  codename="${codename:-bookworm}"
  uris="$(grep -rhoE 'https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -E '/debian(-security)?/?$' | sed 's:/$::' | sort -u || true)"
  [ -n "$uris" ] || uris="http://deb.debian.org/debian"
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
  keyring="/usr/share/keyrings/debian-archive-keyring.gpg"
  for uri in $uris; do
    case "$uri" in
      *-security) echo "deb-src [signed-by=$keyring] $uri $codename-security main" ;;
      *) echo "deb-src [signed-by=$keyring] $uri $codename main"
         echo "deb-src [signed-by=$keyring] $uri $codename-updates main" ;;
    esac
  done >"$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -qq)
  # as root, apt would hand the download to user _apt, who cannot write our temp dir
  [ "$(id -u)" -ne 0 ] || apt_opts+=(-o APT::Sandbox::User=root)
  echo "zkpython: fetching Debian source package zookeeper=$version from $(echo $uris)" >&2
  apt-get "${apt_opts[@]}" update >&2
  # the pinned version, else whichever 3.8.0 revision the mirror has now
  (cd "$work/dl" && { apt-get "${apt_opts[@]}" source --download-only "zookeeper=$version" >&2 \
      || apt-get "${apt_opts[@]}" source --download-only zookeeper >&2; })
  ls "$work"/dl/zookeeper_3.8.0-*.dsc >/dev/null
  # Only the zkpython contrib dir is kept; dpkg-source applies Debian's patches
  # (one of them, 28-no-openssl-for-python-build, concerns zkpython's setup.py).
  (cd "$work/dl" && dpkg-source --no-check -x ./*.dsc "$work/zk" >/dev/null)
  rm -rf "$src_dir"
  cp -r "$work/zk/zookeeper-contrib/zookeeper-contrib-zkpython" "$src_dir"
  cp "$src_dir/src/c/zookeeper.c" "$src_dir/src/c/zookeeper.c.orig"
fi

# --- apply the two fixes to a fresh copy, checking each one actually matched
c="$work/zookeeper.c"
cp "$src_dir/src/c/zookeeper.c.orig" "$c"
expect() { # expect COUNT PATTERN: the fixed file must contain PATTERN exactly COUNT times
  local n; n="$(grep -cF -- "$2" "$c" || true)"
  if [ "$n" != "$1" ]; then
    echo "zkpython: fix did not apply: expected $1 x '$2', found $n" >&2
    exit 1
  fi
}
# fix 1: PyIOBase_Type
sed -i -e '/extern PyTypeObject PyIOBase_Type;/d' \
       -e 's/!PyObject_IsInstance(pystream, (PyObject \*)&PyIOBase_Type)/!PyObject_HasAttrString(pystream, "fileno")/' "$c"
expect 0 'PyIOBase_Type'
expect 1 'PyObject_HasAttrString(pystream, "fileno")'
# fix 2: PY_SSIZE_T_CLEAN + Py_ssize_t lengths
sed -i -e 's/^#include <Python.h>/#define PY_SSIZE_T_CLEAN\n#include <Python.h>/' \
       -e 's/int zkhid; char \*path; char \*value; int valuelen;/int zkhid; char *path; char *value; Py_ssize_t valuelen;/' \
       -e 's/int zkhid; char \*path; char \*buffer; int buflen; int version=-1;/int zkhid; char *path; char *buffer; Py_ssize_t buflen; int version=-1;/' \
       -e 's/^  int certLen;/  Py_ssize_t certLen;/' \
       -e 's/^  int valuelen;/  Py_ssize_t valuelen;/' \
       -e 's/^  int buflen;/  Py_ssize_t buflen;/' \
       -e 's/value,value_len, pystat/value,(Py_ssize_t)value_len, pystat/' \
       -e 's/buffer,buffer_len < 0 ? 0 : buffer_len, stat_dict/buffer,(Py_ssize_t)(buffer_len < 0 ? 0 : buffer_len), stat_dict/' "$c"
expect 1 '#define PY_SSIZE_T_CLEAN'
expect 2 'Py_ssize_t valuelen;'
expect 3 'Py_ssize_t buflen;'
expect 1 'Py_ssize_t certLen;'
expect 1 '(Py_ssize_t)value_len'
expect 1 '(Py_ssize_t)(buffer_len'
expect 0 'int valuelen'
expect 0 'int buflen'
expect 0 'int certLen'

# --- build the extension with the flags Python itself was built with
include="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
suffix="$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
if [ ! -f "$include/Python.h" ]; then
  echo "zkpython: $include/Python.h missing: install python3-dev" >&2
  exit 1
fi
if [ ! -f /usr/include/zookeeper/zookeeper.h ]; then
  echo "zkpython: /usr/include/zookeeper/zookeeper.h missing: install libzookeeper-mt-dev" >&2
  exit 1
fi
mkdir -p "$out/lib"
rm -f "$out"/lib/zookeeper*.so
cp "$src_dir/src/c/pyzk_docstrings.h" "$work/"
gcc -shared -fPIC -O2 -g -DTHREADED -Wno-deprecated-declarations \
    -I"$include" -I/usr/include/zookeeper -I"$work" \
    "$c" -o "$out/lib/zookeeper$suffix" -lzookeeper_mt
cp "$c" "$out/zookeeper.fixed.c"   # kept (gitignored) for debugging
# smoke: import and a call that needs no server
"$python" -c "import sys; sys.path.insert(0, '$out/lib'); import zookeeper; zookeeper.set_log_stream(open('/dev/null', 'w')); assert zookeeper.OK == 0" \
  || { echo "zkpython: built module fails to import" >&2; exit 1; }
echo "$want" >"$stamp"
echo "zkpython: built $out/lib/zookeeper$suffix" >&2
echo "$out/lib"
