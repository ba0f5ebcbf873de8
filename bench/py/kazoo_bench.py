#!/usr/bin/python3
"""The benchmark scenarios through kazoo (Debian's python3-kazoo, pure Python).

    /usr/bin/python3 bench/py/kazoo_bench.py --hosts 127.0.0.1:2181 --scenario sync --n 1000

Async requests use kazoo's *_async calls (IAsyncResult.rawlink for completion); the lock
scenario uses kazoo's own Lock recipe, the queue and id generator the same algorithms as
the zkpython script (the classic queue recipe; versioned compare-and-set).

    /usr/bin/python3 bench/py/kazoo_bench.py --hosts H --scenario tree_cache --prefix ROOT \
        [--n CHANGES] [--value V] [--bound SECS]

tree_cache (bench/src/cache_scale.rs runs it): kazoo.recipe.cache.TreeCache on ROOT, timed
to its INITIALIZED event; then READY on stdout, and on GO from stdin the time until the
cache's listener has seen a NODE_UPDATED carrying V for CHANGES distinct paths (the runner
makes those changes), or SECS.
"""

import argparse
import logging
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kazoo import exceptions as kx  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.recipe.lock import Lock  # noqa: E402

from benchlib import ZkError, main  # noqa: E402

KINDS = {
    kx.NoNodeError: "NoNode",
    kx.NodeExistsError: "NodeExists",
    kx.BadVersionError: "BadVersion",
    kx.NotEmptyError: "NotEmpty",
    kx.NoChildrenForEphemeralsError: "NoChildrenForEphemerals",
    kx.ConnectionLoss: "ConnectionLoss",
    kx.SessionExpiredError: "SessionExpired",
}


def kind_of(exc):
    if exc is None:
        return None
    return KINDS.get(type(exc), "Other")


def translate(fn):
    def wrapped(*a, **kw):
        try:
            return fn(*a, **kw)
        except kx.KazooException as e:
            raise ZkError(kind_of(e))
    return wrapped


def watcher_fn(watch):
    if watch is None:
        return None
    return lambda event: watch(event.type)


def _decode(b):
    return b.decode() if b is not None else None


class Handle(object):
    def __init__(self, hosts):
        self.zk = KazooClient(hosts=hosts, timeout=10.0)
        self.zk.start(timeout=10.0)

    @translate
    def create(self, path, data, ephemeral=False, sequence=False):
        return self.zk.create(path, data.encode(), ephemeral=ephemeral, sequence=sequence)

    @translate
    def get(self, path, watch=None):
        data, stat = self.zk.get(path, watcher_fn(watch))
        return _decode(data), stat.version

    @translate
    def set(self, path, data, version=-1):
        self.zk.set(path, data.encode(), version)

    @translate
    def exists(self, path, watch=None):
        return self.zk.exists(path, watcher_fn(watch)) is not None

    @translate
    def delete(self, path, version=-1):
        self.zk.delete(path, version)

    @translate
    def get_children(self, path, watch=None):
        return self.zk.get_children(path, watcher_fn(watch))

    def acreate(self, path, data, done):
        self.zk.create_async(path, data.encode()).rawlink(lambda r: done(kind_of(r.exception)))

    def aget(self, path, done):
        self.zk.get_async(path).rawlink(lambda r: done(kind_of(r.exception)))

    def adelete(self, path, done):
        self.zk.delete_async(path).rawlink(lambda r: done(kind_of(r.exception)))

    def close(self):
        self.zk.stop()
        self.zk.close()


class CountingLock(object):
    """kazoo's Lock, counting the predecessor-watch notifications it receives."""

    def __init__(self, handle, path, notif):
        self.lock = Lock(handle.zk, path)
        original = self.lock._watch_predecessor

        def counting(event):
            notif.inc()
            original(event)
        # kazoo passes self._watch_predecessor at each get(): an instance attribute wins.
        self.lock._watch_predecessor = counting

    def acquire(self):
        self.lock.acquire()

    def release(self):
        self.lock.release()


class Adapter(object):
    name = "kazoo"

    def connect(self, hosts):
        return Handle(hosts)

    def make_lock(self, handle, path, notif):
        return CountingLock(handle, path, notif)


def status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def walk(cache, path, want):
    """Nodes of the cache holding `want` (all nodes when `want` is None), below `path`."""
    count = 0
    stack = [path]
    while stack:
        p = stack.pop()
        d = cache.get_data(p)
        if d is not None and (want is None or d.data == want):
            count += 1
        for name in cache.get_children(p) or ():
            stack.append(p + "/" + name)
    return count


def tree_cache(args):
    from kazoo.recipe.cache import TreeCache, TreeEvent
    zk = KazooClient(hosts=args.hosts, timeout=10.0)
    zk.start(timeout=10.0)
    want = args.value.encode()
    cond = threading.Condition()
    tally = {"added": 0, "updated": 0, "done_at": None, "full_at": None}
    matched = set()
    initialized = threading.Event()

    def listener(event):
        if event.event_type == TreeEvent.INITIALIZED:
            initialized.set()
            return
        if event.event_type not in (TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED):
            return
        node = event.event_data
        with cond:
            if event.event_type == TreeEvent.NODE_ADDED:
                tally["added"] += 1
                if tally["added"] == args.expect:
                    tally["full_at"] = time.monotonic()
                    cond.notify_all()
            else:
                tally["updated"] += 1
            if node.data == want and node.path not in matched:
                matched.add(node.path)
                if len(matched) == args.n:
                    tally["done_at"] = time.monotonic()
                    cond.notify_all()

    t = time.monotonic()
    cache = TreeCache(zk, args.prefix)
    cache.listen(listener)
    cache.start()
    if not initialized.wait(max(args.bound, 600)):
        sys.exit("kazoo_bench: cache not initialized")
    load = time.monotonic() - t
    until = time.monotonic() + 30  # for the rest of the tree after INITIALIZED
    with cond:
        added = tally["added"]
        while tally["added"] < args.expect and time.monotonic() < until:
            cond.wait(until - time.monotonic())
        full = -1 if tally["full_at"] is None else max(load, tally["full_at"] - t)
    rss, peak = status_kb("VmRSS:"), status_kb("VmHWM:")
    print("RESULT metric=cache_load round=0 ops=%d secs=%.6f notif=%d rss_kb=%d peak_kb=%d "
          "mode=watches full_secs=%.6f" % (walk(cache, args.prefix, None), load, added, rss, peak,
                                           full), flush=True)
    print("READY", flush=True)
    line = sys.stdin.readline()
    if line.strip() == "GO":
        t0 = time.monotonic()
        deadline = t0 + args.bound
        with cond:
            while tally["done_at"] is None and time.monotonic() < deadline:
                cond.wait(deadline - time.monotonic())
            done_at = tally["done_at"]
            secs = (done_at if done_at is not None else time.monotonic()) - t0
            seen, updated = len(matched), tally["updated"]
        print("RESULT metric=cache_burst round=0 ops=%d secs=%.6f notif=%d cached_ok=%d "
              "complete=%d" % (seen, secs, updated, walk(cache, args.prefix, want),
                               int(done_at is not None)), flush=True)
    cache.close()
    zk.stop()
    zk.close()
    print("RSS peak_kb=%d" % status_kb("VmHWM:"), flush=True)


def cache_args(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--value", default="burst")
    ap.add_argument("--bound", type=int, default=120)
    ap.add_argument("--expect", type=int, default=0)
    return ap.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    if "tree_cache" in sys.argv[1:]:
        tree_cache(cache_args(sys.argv[1:]))
    else:
        main(Adapter(), "kazoo")
