"""Scenario drivers shared by zkpython_bench.py and kazoo_bench.py.

Each client script wraps its library in an adapter with the small interface below and
calls main(adapter_factory, client_name). Results go to stdout as one line per measured
phase, the same protocol the Rust and C clients speak:

    RESULT metric=<name> round=<r> ops=<n> secs=<elapsed> notif=<watch events> [lat_p50_us=..]
    RSS peak_kb=<VmHWM of this process>

Adapter interface (errors raise ZkError(kind), kind in ERROR_KINDS):
    connect(hosts) -> handle object with:
      create(path, data, ephemeral=False, sequence=False) -> created path
      get(path, watch=None) -> (data: str, version: int)
      set(path, data, version=-1)
      exists(path, watch=None) -> bool
      delete(path, version=-1)
      get_children(path, watch=None) -> [names]
      acreate(path, data, done)      done(kind_or_None) called from a library thread
      aget(path, done)               done(kind_or_None)
      adelete(path, done)            done(kind_or_None)
      close()
    watch callbacks are called as watch(event_type_name) from a library thread.
"""

import argparse
import os
import sys
import threading
import time

ERROR_KINDS = ("NoNode", "NodeExists", "BadVersion", "NotEmpty", "NoChildrenForEphemerals",
               "ConnectionLoss", "SessionExpired", "Other")

DATA = "x" * 64


class ZkError(Exception):
    def __init__(self, kind):
        Exception.__init__(self, kind)
        self.kind = kind


def peak_rss_kb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def emit(metric, rnd, ops, secs, notif=0, **extra):
    fields = " ".join("%s=%s" % (k, v) for k, v in sorted(extra.items()))
    print("RESULT metric=%s round=%d ops=%d secs=%.6f notif=%d %s" % (
        metric, rnd, ops, secs, notif, fields), flush=True)


class Counter(object):
    """Thread-safe counter of watch notifications."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def inc(self):
        with self.lock:
            self.n += 1

    def get(self):
        with self.lock:
            return self.n


def ensure_path(zk, path):
    parts = path.strip("/").split("/")
    cur = ""
    for p in parts:
        cur += "/" + p
        try:
            zk.create(cur, "")
        except ZkError as e:
            if e.kind != "NodeExists":
                raise


def delete_tree(zk, path):
    try:
        children = zk.get_children(path)
    except ZkError as e:
        if e.kind == "NoNode":
            return
        raise
    for c in children:
        delete_tree(zk, path + "/" + c)
    try:
        zk.delete(path)
    except ZkError as e:
        if e.kind != "NoNode":
            raise


# ---------------------------------------------------------------- sync ops

def scenario_sync(adapter, args, rnd, base):
    zk = adapter.connect(args.hosts)
    try:
        ensure_path(zk, base)
        n = args.n
        paths = ["%s/n%07d" % (base, i) for i in range(n)]
        t = time.perf_counter()
        for p in paths:
            zk.create(p, DATA)
        emit("sync_create", rnd, n, time.perf_counter() - t)
        t = time.perf_counter()
        for p in paths:
            zk.get(p)
        emit("sync_get", rnd, n, time.perf_counter() - t)
        t = time.perf_counter()
        for p in paths:
            zk.set(p, DATA)
        emit("sync_set", rnd, n, time.perf_counter() - t)
        t = time.perf_counter()
        for p in paths:
            zk.exists(p)
        emit("sync_exists", rnd, n, time.perf_counter() - t)
        t = time.perf_counter()
        for p in paths:
            zk.delete(p)
        emit("sync_delete", rnd, n, time.perf_counter() - t)
        delete_tree(zk, base)
    finally:
        zk.close()


# ---------------------------------------------------------------- pipelined async

class Window(object):
    """At most `size` requests in flight; a Condition counts completions (the zkpython
    pattern: the completion callback runs on the C completion thread)."""

    def __init__(self, size):
        self.size = size
        self.cv = threading.Condition()
        self.in_flight = 0
        self.errors = 0

    def acquire(self):
        with self.cv:
            while self.in_flight >= self.size:
                self.cv.wait()
            self.in_flight += 1

    def done(self, kind):
        with self.cv:
            self.in_flight -= 1
            if kind is not None:
                self.errors += 1
            self.cv.notify()

    def drain(self):
        with self.cv:
            while self.in_flight > 0:
                self.cv.wait()


def pipelined(paths, submit, window):
    w = Window(window)
    t = time.perf_counter()
    for p in paths:
        w.acquire()
        submit(p, w.done)
    w.drain()
    if w.errors:
        raise RuntimeError("%d async requests failed" % w.errors)
    return time.perf_counter() - t


def scenario_async(adapter, args, rnd, base):
    zk = adapter.connect(args.hosts)
    try:
        ensure_path(zk, base)
        n, win = args.n, args.window
        paths = ["%s/n%07d" % (base, i) for i in range(n)]
        secs = pipelined(paths, lambda p, d: zk.acreate(p, DATA, d), win)
        emit("async_create_w%d" % win, rnd, n, secs)
        secs = pipelined(paths, zk.aget, win)
        emit("async_get_w%d" % win, rnd, n, secs)
        pipelined(paths, zk.adelete, max(win, 100))
        delete_tree(zk, base)
    finally:
        zk.close()


# ---------------------------------------------------------------- watch latency

def scenario_watch(adapter, args, rnd, base):
    writer = adapter.connect(args.hosts)
    watcher = adapter.connect(args.hosts)
    try:
        ensure_path(writer, base)
        node = base + "/w"
        writer.create(node, DATA)
        fired = threading.Event()
        notif = Counter()

        def on_event(_type):
            notif.inc()
            fired.set()

        lat = []
        t = time.perf_counter()
        for _ in range(args.n):
            fired.clear()
            watcher.get(node, on_event)
            t0 = time.perf_counter()
            writer.set(node, DATA)
            if not fired.wait(10.0):
                raise RuntimeError("watch did not fire")
            lat.append(time.perf_counter() - t0)
        secs = time.perf_counter() - t
        lat.sort()
        emit("watch", rnd, args.n, secs, notif.get(),
             lat_p50_us=int(lat[len(lat) // 2] * 1e6), lat_p99_us=int(lat[int(len(lat) * 0.99)] * 1e6))
        delete_tree(writer, base)
    finally:
        watcher.close()
        writer.close()


# ---------------------------------------------------------------- the classic queue recipe

class PostQueue(object):
    """The classic ZooKeeper queue recipe (ZooKeeperQueue): sequential children of one znode;
    take = sorted get_children, get + delete the first one that is still there; blocking
    take sets a child watch and waits on a Condition the watcher notifies. (The classic recipe's
    loop reads children[0] on every iteration; this takes `child`, as its text says.)"""

    def __init__(self, zk, path, notif):
        self.zk = zk
        self.path = path
        self.cv = threading.Condition()
        self.notif = notif

    def enqueue(self, val):
        self.zk.create(self.path + "/item-", val, sequence=True)

    def get_and_delete(self, node):
        try:
            data, version = self.zk.get(node)
            self.zk.delete(node, version)
            return data
        except ZkError as e:
            if e.kind in ("NoNode", "BadVersion"):
                return None
            raise

    def dequeue(self):
        while True:
            children = sorted(self.zk.get_children(self.path))
            if not children:
                return None
            for child in children:
                data = self.get_and_delete(self.path + "/" + child)
                if data is not None:
                    return data

    def block_dequeue(self):
        def queue_watcher(_type):
            self.notif.inc()
            with self.cv:
                self.cv.notify()

        while True:
            with self.cv:
                children = sorted(self.zk.get_children(self.path, queue_watcher))
                for child in children:
                    data = self.get_and_delete(self.path + "/" + child)
                    if data is not None:
                        return data
                self.cv.wait()


def scenario_queue(adapter, args, rnd, base):
    producer = adapter.connect(args.hosts)
    consumers = [adapter.connect(args.hosts) for _ in range(args.workers)]
    try:
        ensure_path(producer, base + "/q")
        qpath = base + "/q"
        notif = Counter()
        q = PostQueue(producer, qpath, notif)
        t = time.perf_counter()
        for i in range(args.n):
            q.enqueue("item-%d" % i)
        emit("queue_put", rnd, args.n, time.perf_counter() - t)

        taken = Counter()
        got = []
        got_lock = threading.Lock()

        def consume(zk):
            cq = PostQueue(zk, qpath, notif)
            while True:
                item = cq.block_dequeue()
                if item == "STOP":
                    return
                with got_lock:
                    got.append(item)
                taken.inc()
                if taken.get() == args.n:
                    for _ in range(args.workers):
                        q.enqueue("STOP")

        threads = [threading.Thread(target=consume, args=(c,)) for c in consumers]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t
        if len(got) != args.n or len(set(got)) != args.n:
            raise RuntimeError("queue lost or duplicated items: %d taken" % len(got))
        emit("queue_take_c%d" % args.workers, rnd, args.n, secs, notif.get())
        delete_tree(producer, base)
    finally:
        for c in consumers:
            c.close()
        producer.close()


# ---------------------------------------------------------------- lock handoff

class RecipeLock(object):
    """ZooKeeper's lock recipe: ephemeral sequential node, the lowest holds the lock, every
    other waiter watches only its predecessor (exists watch)."""

    def __init__(self, zk, path, notif):
        self.zk = zk
        self.path = path
        self.notif = notif
        self.node = None

    def acquire(self):
        me = self.zk.create(self.path + "/lock-", "", ephemeral=True, sequence=True)
        name = me.rsplit("/", 1)[1]
        while True:
            children = sorted(self.zk.get_children(self.path), key=lambda c: c[-10:])
            idx = children.index(name)
            if idx == 0:
                self.node = me
                return
            fired = threading.Event()

            def on_event(_type):
                self.notif.inc()
                fired.set()

            if self.zk.exists(self.path + "/" + children[idx - 1], on_event):
                fired.wait()

    def release(self):
        self.zk.delete(self.node)
        self.node = None


def scenario_lock(adapter, args, rnd, base):
    setup = adapter.connect(args.hosts)
    handles = [adapter.connect(args.hosts) for _ in range(args.workers)]
    try:
        lpath = base + "/lock"
        ensure_path(setup, lpath)
        notif = Counter()
        per = args.n // args.workers
        holder = [0]
        overlap = [False]

        def contend(zk):
            lock = adapter.make_lock(zk, lpath, notif)
            for _ in range(per):
                lock.acquire()
                holder[0] += 1
                if holder[0] != 1:
                    overlap[0] = True
                holder[0] -= 1
                lock.release()

        threads = [threading.Thread(target=contend, args=(h,)) for h in handles]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t
        if overlap[0]:
            raise RuntimeError("two holders at once")
        emit("lock_c%d" % args.workers, rnd, per * args.workers, secs, notif.get())
        delete_tree(setup, base)
    finally:
        for h in handles:
            h.close()
        setup.close()


# ---------------------------------------------------------------- id generator

def cas_add(zk, path, delta):
    """Versioned read-modify-write; returns the first id of the reserved range."""
    while True:
        data, version = zk.get(path)
        cur = int(data or "0")
        try:
            zk.set(path, str(cur + delta), version)
            return cur
        except ZkError as e:
            if e.kind != "BadVersion":
                raise


def scenario_idgen(adapter, args, rnd, base):
    setup = adapter.connect(args.hosts)
    handles = [adapter.connect(args.hosts) for _ in range(args.workers)]
    try:
        ensure_path(setup, base)
        ctr = base + "/ctr"
        setup.create(ctr, "0")
        per = args.n // args.workers
        batch = 1 if args.mode == "naive" else args.batch
        ids = []
        ids_lock = threading.Lock()

        def work(zk):
            mine = []
            nxt, end = 0, 0
            for _ in range(per):
                if nxt == end:
                    nxt = cas_add(zk, ctr, batch)
                    end = nxt + batch
                mine.append(nxt)
                nxt += 1
            with ids_lock:
                ids.extend(mine)

        threads = [threading.Thread(target=work, args=(h,)) for h in handles]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t
        if len(set(ids)) != len(ids):
            raise RuntimeError("duplicate ids")
        emit("id_%s_w%d" % (args.mode, args.workers), rnd, len(ids), secs)
        delete_tree(setup, base)
    finally:
        for h in handles:
            h.close()
        setup.close()


SCENARIOS = {
    "sync": scenario_sync,
    "async": scenario_async,
    "watch": scenario_watch,
    "queue": scenario_queue,
    "lock": scenario_lock,
    "idgen": scenario_idgen,
}


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", required=True)
    p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--window", type=int, default=100)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--mode", default="naive", choices=["naive", "batched"])
    p.add_argument("--prefix", default="/zkbench")
    return p.parse_args(argv)


def main(adapter, client):
    args = parse_args(sys.argv[1:])
    fn = SCENARIOS[args.scenario]
    for rnd in range(args.rounds):
        base = "%s/%s-%d-%s-r%d" % (args.prefix, client, os.getpid(), args.scenario, rnd)
        fn(adapter, args, rnd, base)
    print("RSS peak_kb=%d" % peak_rss_kb(), flush=True)
