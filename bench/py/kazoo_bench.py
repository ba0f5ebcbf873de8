#!/usr/bin/python3
"""The benchmark scenarios through kazoo (Debian's python3-kazoo, pure Python).

    /usr/bin/python3 bench/py/kazoo_bench.py --hosts 127.0.0.1:2181 --scenario sync --n 1000

Async requests use kazoo's *_async calls (IAsyncResult.rawlink for completion); the lock
scenario uses kazoo's own Lock recipe, the queue and id generator the same algorithms as
the zkpython script (the classic queue recipe; versioned compare-and-set).
"""

import logging
import os
import sys

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


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    main(Adapter(), "kazoo")
