#!/usr/bin/python3
"""Runs bench/compare/behaviour.script through zkpython (the C client's Python bindings) and prints
one result line per step: `L<line> <result>`. `zookeeper-bench compare` runs the same
script through our crates and diffs the two outputs.

    PYTHONPATH=bench/zkpython/build/lib /usr/bin/python3 bench/py/compare_behaviour.py \
        --hosts 127.0.0.1:2181 --base /cmp-zkpython --script bench/compare/behaviour.script
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zookeeper  # noqa: E402

from benchlib import Counter, PostQueue, ZkError, delete_tree  # noqa: E402
from zkpython_bench import Handle, ACL  # noqa: E402

EVENT_NAMES = {
    zookeeper.CREATED_EVENT: "NodeCreated",
    zookeeper.DELETED_EVENT: "NodeDeleted",
    zookeeper.CHANGED_EVENT: "NodeDataChanged",
    zookeeper.CHILD_EVENT: "NodeChildrenChanged",
}

MODES = {
    "persistent": 0,
    "ephemeral": zookeeper.EPHEMERAL,
    "sequential": zookeeper.SEQUENCE,
    "ephemeral_sequential": zookeeper.EPHEMERAL | zookeeper.SEQUENCE,
}


class Failure(Exception):
    pass


def kind(exc):
    name = type(exc).__name__
    return name[:-len("Exception")] if name.endswith("Exception") else name


class Interpreter(object):
    def __init__(self, hosts, base):
        self.hosts = hosts
        self.base = base
        self.conn = Handle(hosts)
        self.h = self.conn.h
        self.events = []
        self.cv = threading.Condition()
        self.queues = {}

    def path(self, p):
        if p.startswith("BAD:"):
            return p[4:]
        return self.base + p

    def rel(self, p):
        return p[len(self.base):] if p.startswith(self.base) else p

    def watcher(self, _h, etype, _state, path):
        if etype == zookeeper.SESSION_EVENT:
            return
        with self.cv:
            self.events.append("%s %s" % (EVENT_NAMES.get(etype, str(etype)), self.rel(path)))
            self.cv.notify_all()

    @staticmethod
    def data(d):
        return "-" if not d else d

    def fmt_get(self, data, stat):
        return "ok data=%s version=%d children=%d ephemeral=%s" % (
            self.data(data), stat["version"], stat["numChildren"],
            "true" if stat["ephemeralOwner"] != 0 else "false")

    def fmt_exists(self, stat):
        if stat is None:
            return "ok none"
        return "ok version=%d children=%d" % (stat["version"], stat["numChildren"])

    def queue(self, path):
        q = self.queues.get(path)
        if q is None:
            q = self.queues[path] = benchlib_queue(self.conn, self.path(path))
        return q

    def step(self, op, args):
        h = self.h
        w = self.watcher
        if op == "create":
            data = "" if args[1] == "-" else args[1]
            flags = MODES[args[2] if len(args) > 2 else "persistent"]
            return "ok " + self.rel(zookeeper.create(h, self.path(args[0]), data, ACL, flags))
        if op == "get":
            return self.fmt_get(*zookeeper.get(h, self.path(args[0])))
        if op == "watch_get":
            return self.fmt_get(*zookeeper.get(h, self.path(args[0]), w))
        if op == "set":
            data = "" if args[1] == "-" else args[1]
            stat = zookeeper.set2(h, self.path(args[0]), data, int(args[2]))
            return "ok version=%d" % stat["version"]
        if op == "exists":
            return self.fmt_exists(zookeeper.exists(h, self.path(args[0])))
        if op == "watch_exists":
            return self.fmt_exists(zookeeper.exists(h, self.path(args[0]), w))
        if op == "delete":
            zookeeper.delete(h, self.path(args[0]), int(args[1]))
            return "ok"
        if op == "children":
            return "ok [%s]" % ",".join(sorted(zookeeper.get_children(h, self.path(args[0]))))
        if op == "watch_children":
            return "ok [%s]" % ",".join(sorted(zookeeper.get_children(h, self.path(args[0]), w)))
        if op == "events":
            want = int(args[0])
            deadline = time.time() + 5.0
            with self.cv:
                while len(self.events) < want and time.time() < deadline:
                    self.cv.wait(0.05)
            time.sleep(0.2)  # anything extra arriving late is reported too
            with self.cv:
                got, self.events = self.events, []
            return "ok [%s]" % ",".join(sorted(got))
        # --- the classic queue (ZooKeeperQueue): queue node created by the producer
        if op == "qnew":
            try:
                zookeeper.create(h, self.path(args[0]), "queue top level", ACL, 0)
            except zookeeper.NodeExistsException:
                pass
            return "ok"
        if op == "qput":
            self.queue(args[0]).enqueue(args[1])
            return "ok"
        if op == "qget":
            item = self.queue(args[0]).dequeue()
            return "ok %s" % item
        if op == "qtake":
            return "ok %s" % self.queue(args[0]).block_dequeue()
        if op == "qtake_after_put":
            other = Handle(self.hosts)
            try:
                oq = benchlib_queue(other, self.path(args[0]))
                t = threading.Timer(0.2, lambda: oq.enqueue(args[1]))
                t.start()
                item = self.queue(args[0]).block_dequeue()
                t.join()
                return "ok %s" % item
            finally:
                other.close()
        if op == "qdrain":
            k = int(args[1])
            handles = [Handle(self.hosts) for _ in range(k)]
            items, lock = [], threading.Lock()

            def consume(conn):
                q = benchlib_queue(conn, self.path(args[0]))
                while True:
                    item = q.dequeue()
                    if item is None:
                        return
                    with lock:
                        items.append(item)
            threads = [threading.Thread(target=consume, args=(c,)) for c in handles]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for c in handles:
                c.close()
            return "ok count=%d distinct=%d items=[%s]" % (
                len(items), len(set(items)), ",".join(sorted(items)))
        raise Failure("unknown op %s" % op)


def benchlib_queue(conn, path):
    """The classic queue (benchlib.PostQueue) over a zkpython handle; its errors arrive as
    benchlib ZkErrors carrying the same kind names."""
    return PostQueue(conn, path, Counter())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--script", required=True)
    a = p.parse_args()
    zookeeper.set_log_stream(open(os.devnull, "w"))
    it = Interpreter(a.hosts, a.base)
    zookeeper.create(it.h, a.base, "", ACL, 0)
    with open(a.script) as f:
        for lineno, line in enumerate(f, 1):
            text = line.split("#", 1)[0].split("=>", 1)[0].strip()
            if not text:
                continue
            parts = text.split()
            try:
                result = it.step(parts[0], parts[1:])
            except zookeeper.ZooKeeperException as e:
                result = "err " + kind(e)
            except ZkError as e:
                result = "err " + e.kind
            print("L%d %s" % (lineno, result), flush=True)
    delete_tree(it.conn, a.base)
    it.conn.close()


if __name__ == "__main__":
    main()
