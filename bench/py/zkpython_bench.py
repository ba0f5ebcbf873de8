#!/usr/bin/python3
"""The benchmark scenarios through zkpython, the C client's Python bindings (the
`zookeeper` C extension, built by bench/zkpython/build.sh; put its lib dir on PYTHONPATH).

    PYTHONPATH=bench/zkpython/build/lib /usr/bin/python3 bench/py/zkpython_bench.py \
        --hosts 127.0.0.1:2181 --scenario sync --n 1000 --rounds 3
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zookeeper  # noqa: E402

from benchlib import ZkError, RecipeLock, main  # noqa: E402

ACL = [{"perms": 0x1f, "scheme": "world", "id": "anyone"}]

KINDS = {
    zookeeper.NoNodeException: "NoNode",
    zookeeper.NodeExistsException: "NodeExists",
    zookeeper.BadVersionException: "BadVersion",
    zookeeper.NotEmptyException: "NotEmpty",
    zookeeper.NoChildrenForEphemeralsException: "NoChildrenForEphemerals",
    zookeeper.ConnectionLossException: "ConnectionLoss",
    zookeeper.SessionExpiredException: "SessionExpired",
}
RC_KINDS = {
    zookeeper.NONODE: "NoNode",
    zookeeper.NODEEXISTS: "NodeExists",
    zookeeper.BADVERSION: "BadVersion",
    zookeeper.NOTEMPTY: "NotEmpty",
    zookeeper.NOCHILDRENFOREPHEMERALS: "NoChildrenForEphemerals",
    zookeeper.CONNECTIONLOSS: "ConnectionLoss",
    zookeeper.SESSIONEXPIRED: "SessionExpired",
}


def kind_of_rc(rc):
    if rc == zookeeper.OK:
        return None
    return RC_KINDS.get(rc, "Other")


def translate(fn):
    def wrapped(*a, **kw):
        try:
            return fn(*a, **kw)
        except zookeeper.ZooKeeperException as e:
            raise ZkError(KINDS.get(type(e), "Other"))
    return wrapped


def watcher_fn(watch):
    """A zkpython watcher cb(handle, type, state, path) calling watch(type) for node events
    (session events also reach path watchers in the C client: ignored here)."""
    if watch is None:
        return None

    def cb(_h, etype, _state, _path):
        if etype != zookeeper.SESSION_EVENT:
            watch(etype)
    return cb


class Handle(object):
    def __init__(self, hosts):
        cv = threading.Condition()
        connected = [False]

        def global_watcher(_h, _type, state, _path):
            with cv:
                if state == zookeeper.CONNECTED_STATE:
                    connected[0] = True
                cv.notify_all()

        # the zkpython connection pattern: hold the Condition across init, then wait.
        with cv:
            self.h = zookeeper.init(hosts, global_watcher, 10000)
            cv.wait_for(lambda: connected[0], 10.0)
        if not connected[0]:
            raise RuntimeError("zkpython: could not connect to %s" % hosts)

    @translate
    def create(self, path, data, ephemeral=False, sequence=False):
        flags = (zookeeper.EPHEMERAL if ephemeral else 0) | (zookeeper.SEQUENCE if sequence else 0)
        return zookeeper.create(self.h, path, data, ACL, flags)

    @translate
    def get(self, path, watch=None):
        data, stat = zookeeper.get(self.h, path, watcher_fn(watch))
        return data, stat["version"]

    @translate
    def set(self, path, data, version=-1):
        zookeeper.set(self.h, path, data, version)

    @translate
    def exists(self, path, watch=None):
        return zookeeper.exists(self.h, path, watcher_fn(watch)) is not None

    @translate
    def delete(self, path, version=-1):
        zookeeper.delete(self.h, path, version)

    @translate
    def get_children(self, path, watch=None):
        return zookeeper.get_children(self.h, path, watcher_fn(watch))

    def acreate(self, path, data, done):
        zookeeper.acreate(self.h, path, data, ACL, 0, lambda _h, rc, _p: done(kind_of_rc(rc)))

    def aget(self, path, done):
        zookeeper.aget(self.h, path, None, lambda _h, rc, _d, _s: done(kind_of_rc(rc)))

    def adelete(self, path, done):
        zookeeper.adelete(self.h, path, -1, lambda _h, rc: done(kind_of_rc(rc)))

    def close(self):
        zookeeper.close(self.h)


class Adapter(object):
    name = "zkpython"

    def connect(self, hosts):
        return Handle(hosts)

    def make_lock(self, handle, path, notif):
        return RecipeLock(handle, path, notif)


if __name__ == "__main__":
    zookeeper.set_log_stream(open(os.devnull, "w"))
    main(Adapter(), "zkpython")
