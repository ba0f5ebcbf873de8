#!/usr/bin/env python3
"""Where the binding's extra time goes: the same op through the Rust client process
(`zookeeper-bench client --scenario op`) and the C one (`zkbench --scenario op`), under
callgrind (instructions, exact and load-independent) and perf (syscalls, context switches,
kernel vs user samples). Prints Markdown.

    bench/profile/profile.py [--hosts H] [--ops get,aget] [--n-sync 2000]
                             [--n-pipelined 10000] [--window 1000] [--reps 3]
                             [--no-callgrind] [--no-perf] [--out FILE]

Every figure is per op and by difference: a run whose timed phase repeats REPS + 1 times
minus a run with one repetition, divided by REPS x n. Start-up, connect, node set-up,
warm-up and close cancel out; what remains is the ops themselves, in every thread of the
process (the caller and both C client threads). Without --hosts a server is started with
`zookeeper-bench serve` (forceSync=no) and stopped at the end.

Needs valgrind (callgrind_annotate) and perf (Debian linux-perf; syscall tracepoints and
the cpu-clock software event: hardware counters are not required).
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Self cost (exclusive Ir) grouped by function / object name; first match wins. The
# `core::iter`/`memchr`/`str::iter` entries of the Rust binary are the path checks (their
# callers are `validate_path` and `CString::new`: see the inclusive table).
CATEGORIES = [
    ("C client (libzookeeper_mt)", r"libzookeeper_mt"),
    ("malloc / free", r"(^|[^a-z_])(_int_malloc|_int_free|malloc|free|realloc|calloc|cfree|"
                      r"malloc_consolidate|unlink_chunk|tcache\w*|__rust_alloc|__rust_dealloc|"
                      r"__rdl_alloc|__rdl_dealloc|__rust_realloc)( |$)"),
    ("registry (slab)", r"context::registry|hashbrown|HashMap|hash_one|RandomState|sip::Hasher"),
    ("path check + CString", r"path::|CString|validate_path|core::iter::traits::iterator::"
                            r"Iterator::try_fold|core::slice::memchr|core::str::"),
    ("ACL conversion", r"zookeeper_mt::acl::|CAcl"),
    ("reply slot (mutex, condvar, Arc)", r"parking_lot|ReplySlot|Fulfiller|Condvar|RawMutex|"
                                         r"ZkFuture|zookeeper::reply::"),
    ("pthread / futex (user side)", r"pthread_|futex|__lll_|syscall( |$)|sem_"),
    ("libc other", r"libc\.so"),
    ("binding other (zookeeper-mt, std)", r"zookeeper|std::|core::|alloc::"),
]

# Inclusive cost (the function and all it calls) of the layers worth naming.
INCLUSIVE = [
    r"zookeeper_mt::ops::(\w+::)*<impl zookeeper_mt::client::ZooKeeper>::\w+_async",
    r"zookeeper_mt::path::validate_path",
    r"CString>::new::SpecNewImpl>::spec_new_impl",
    r"zookeeper_mt::reply::ZkFuture<T>::pending",
    r"zookeeper_mt::reply::ZkFuture<T>::wait",
    r"zookeeper_mt::reply::ReplySlot::wait_take",
    r"zookeeper_mt::context::(\w+::)*\w+_completion",
    r"zookeeper_mt::reply::ReplySlot::fulfill",
    r"hashbrown::",
    r"^zoo_a?w?(get|exists|set|create|delete)\w*",
    r"^zookeeper_process",
    r"^zookeeper_interest",
]

# Calls per op of these (exact symbol names, summed).
COUNTED = [
    ("allocations (malloc, calloc, realloc)", ("malloc", "calloc", "realloc")),
    ("of which Rust's (__rdl_alloc)", ("__rustc::__rdl_alloc", "__rdl_alloc",
                                       "__rustc::__rdl_realloc", "__rdl_realloc")),
    ("pthread_mutex_lock", ("pthread_mutex_lock", "pthread_mutex_lock@@GLIBC_2.2.5",
                            "___pthread_mutex_lock")),
    ("pthread_cond_wait / timedwait", ("pthread_cond_wait@@GLIBC_2.3.2", "pthread_cond_wait",
                                       "pthread_cond_timedwait@@GLIBC_2.3.2",
                                       "pthread_cond_timedwait", "___pthread_cond_timedwait64",
                                       "___pthread_cond_wait")),
    ("pthread_cond_signal / broadcast", ("pthread_cond_signal@@GLIBC_2.3.2",
                                         "pthread_cond_broadcast@@GLIBC_2.3.2",
                                         "pthread_cond_signal", "pthread_cond_broadcast",
                                         "___pthread_cond_signal", "___pthread_cond_broadcast")),
    ("libc syscall() (parking_lot's futex calls)", ("syscall",)),
]

PERF_EVENTS = [
    ("task-clock", "CPU time µs (task-clock)"),
    ("context-switches", "context switches"),
    ("raw_syscalls:sys_enter", "syscalls, all"),
    ("syscalls:sys_enter_futex", "futex"),
    ("syscalls:sys_enter_poll", "poll"),
    ("syscalls:sys_enter_read", "read"),
    ("syscalls:sys_enter_write", "write"),
    ("syscalls:sys_enter_sendto", "sendto"),
    ("syscalls:sys_enter_recvfrom", "recvfrom"),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def binaries():
    sh(["cargo", "build", "--release", "-p", "zookeeper-bench", "--quiet"], cwd=ROOT)
    rust = os.path.join(ROOT, "target", "release", "zookeeper-bench")
    cands = glob.glob(os.path.join(ROOT, "target", "release", "build", "zookeeper-bench-*",
                                   "out", "zkbench"))
    if not cands:
        sys.exit("the C client bench (zkbench) was not built: see bench/build.rs")
    return rust, max(cands, key=os.path.getmtime)


class Client:
    def __init__(self, name, argv, hosts, args, op_map=None):
        self.name, self.argv, self.hosts, self.args = name, argv, hosts, args
        self.op_map = op_map or {}

    def cmd(self, op, reps):
        op = self.op_map.get(op, op)
        n = self.args.n_pipelined if op.startswith("a") else self.args.n_sync
        return self.argv + ["--hosts", self.hosts, "--scenario", "op", "--op", op,
                            "--n", str(n), "--window", str(self.args.window),
                            "--reps", str(reps), "--prefix", "/zkprofile"]


# ---------------------------------------------------------------- callgrind

def annotate(path, inclusive=False):
    out = sh(["callgrind_annotate", "--threshold=100"] +
             (["--inclusive=yes"] if inclusive else []) + [path]).stdout
    costs, started = {}, False
    for line in out.splitlines():
        if "file:function" in line:
            started = True
            continue
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line) if started else None
        if not m:
            continue
        ir, rest = int(m.group(1).replace(",", "")), m.group(2)
        obj = ""
        om = re.search(r"\s\[([^\]]*)\]$", rest)
        if om:
            obj = os.path.basename(om.group(1))
            rest = rest[: om.start()]
        func = rest.split(":", 1)[1] if ":" in rest else rest
        key = (func, obj)
        costs[key] = costs.get(key, 0) + ir
    total = re.search(r"([\d,]+)\s+\(100.0%\)\s+PROGRAM TOTALS", out)
    return costs, int(total.group(1).replace(",", ""))


def calls(path):
    """Calls per callee name, summed over callers (cfn= / calls= lines)."""
    names, totals, current = {}, {}, None
    with open(path) as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m:
                    if m.group(2) is not None:
                        names[m.group(1)] = m.group(2)
                    if line.startswith("cfn="):
                        current = names.get(m.group(1))
            elif line.startswith("calls=") and current is not None:
                totals[current] = totals.get(current, 0) + int(line[6:].split()[0])
    return totals


def category(func, obj):
    key = f"{func} [{obj}]"
    for name, pattern in CATEGORIES:
        if re.search(pattern, key):
            return name
    return "other"


def callgrind(client, op, args, workdir):
    outs = []
    for reps in (1, args.reps + 1):
        out = os.path.join(workdir, f"{client.name}-{op}-{reps}.callgrind")
        sh(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + client.cmd(op, reps))
        outs.append(out)
    ops = args.reps * (args.n_pipelined if op.startswith("a") else args.n_sync)
    (s1, t1), (sn, tn) = annotate(outs[0]), annotate(outs[1])
    (i1, _), (i_n, _) = annotate(outs[0], True), annotate(outs[1], True)
    c1, cn = calls(outs[0]), calls(outs[1])
    per = lambda a, b: {k: (b.get(k, 0) - a.get(k, 0)) / ops for k in set(a) | set(b)}
    return {
        "total": (tn - t1) / ops,
        "self": per(s1, sn),
        "incl": per(i1, i_n),
        "calls": {label: sum(cn.get(x, 0) - c1.get(x, 0) for x in names) / ops
                  for label, names in COUNTED},
    }


# ---------------------------------------------------------------- perf

def perf_stat(client, op, args):
    got = []
    for reps in (1, args.reps + 1):
        out = sh(["perf", "stat", "-x", ",", "-e", ",".join(e for e, _ in PERF_EVENTS)] +
                 client.cmd(op, reps)).stderr
        counts = {}
        for line in out.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[2] in dict(PERF_EVENTS):
                try:
                    counts[parts[2]] = float(parts[0])
                except ValueError:
                    pass
        got.append(counts)
    ops = args.reps * (args.n_pipelined if op.startswith("a") else args.n_sync)
    res = {e: (got[1].get(e, 0) - got[0].get(e, 0)) / ops for e, _ in PERF_EVENTS}
    res["task-clock"] *= 1000.0  # msec -> µs
    return res


def perf_record(client, op, args, workdir):
    data = os.path.join(workdir, f"{client.name}-{op}.perf")
    sh(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o", data] +
       client.cmd(op, args.reps + 1))
    out = sh(["perf", "report", "-i", data, "--stdio", "--sort", "dso"]).stdout
    shares = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m:
            dso = m.group(2)
            group = ("kernel" if "kernel" in dso else "libc" if dso.startswith("libc") else
                     "libzookeeper_mt" if "zookeeper_mt" in dso else
                     "client binary" if dso in ("zookeeper-bench", "zkbench") else "other")
            shares[group] = shares.get(group, 0) + float(m.group(1))
    out = sh(["perf", "report", "-i", data, "--stdio", "--sort", "sym"]).stdout
    top = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(.*)$", line)
        if m and len(top) < 8:
            top.append((float(m.group(1)), m.group(2), m.group(3).strip()))
    return shares, top


# ---------------------------------------------------------------- report

def label(op, args):
    return {"get": "sync get", "exists": "sync exists", "set": "sync set",
            "create_delete": "sync create+delete",
            "aget": f"pipelined get, {args.window} in flight",
            "acreate": f"pipelined create, {args.window} in flight (ephemeral sequential "
                       "under --reps)"}.get(op, op)


def summary_table(summary, args):
    """One row per op: instructions per request, Rust next to C, and the ratio (for the
    get also against C doing the binding's one-order hand-off, zoo_aget + wait)."""
    w = ["### Instructions per request (callgrind, every thread of the client process)\n",
         "| op | C | C via zoo_aget + wait | Rust | Rust/C | Rust/C hop | allocs C | allocs Rust |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
    alloc = COUNTED[0][0]
    for op, total, calls in summary:
        hop = total.get("c_hop")
        w.append(f"| {label(op, args)} | {total['c']:,.0f} | "
                 + (f"{hop:,.0f}" if hop else "–")
                 + f" | {total['rust']:,.0f} | {total['rust'] / total['c']:.2f} | "
                 + (f"{total['rust'] / hop:.2f}" if hop else "–")
                 + f" | {calls['c'][alloc]:.1f} | {calls['rust'][alloc]:.1f} |")
    return "\n".join(w) + "\n"


def report(op, args, cg, ps, pr):
    w = []
    names = [c for c in ("rust", "c", "c_hop") if c in (cg or ps)]
    title = {"rust": "Rust", "c": "C", "c_hop": "C via zoo_aget + wait"}
    w.append(f"### {label(op, args)}\n")
    if "c_hop" in names:
        w.append("*C via zoo_aget + wait*: the same get done the binding's way in C (the "
                 "completion thread copies the value and wakes the caller through a condition "
                 "variable), where `zoo_get` is woken by the IO thread directly.\n")
    w.append("| per op | " + " | ".join(title[c] for c in names) + " | Rust − C |")
    w.append("|---|" + "---:|" * (len(names) + 1))

    def row(name, vals, fmt="{:,.0f}"):
        cells = [fmt.format(v) if v is not None else "–" for v in vals]
        d = fmt.format(vals[0] - vals[1]) if len(vals) >= 2 and None not in vals[:2] else ""
        w.append(f"| {name} | " + " | ".join(cells) + f" | {d} |")

    if cg:
        row("instructions (user space)", [cg[c]["total"] for c in names])
        for lab, _ in COUNTED:
            row(lab, [cg[c]["calls"][lab] for c in names], "{:.2f}")
    if ps:
        for e, lab in PERF_EVENTS:
            row(lab, [ps[c][e] for c in names], "{:.1f}" if e == "task-clock" else "{:.2f}")
    if pr:
        for g in ("kernel", "libc", "libzookeeper_mt", "client binary"):
            row(f"cpu-clock samples in {g} (%)", [pr[c][0].get(g, 0.0) for c in names],
                "{:.0f}")
    if cg:
        w.append("\nInstructions per op by where they are spent (self cost):\n")
        w.append("| category | " + " | ".join(title[c] for c in names) + " |")
        w.append("|---|" + "---:|" * len(names))
        cats = {}
        for c in names:
            for (func, obj), v in cg[c]["self"].items():
                k = category(func, obj)
                cats.setdefault(k, {}).setdefault(c, 0)
                cats[k][c] += v
        for k in [n for n, _ in CATEGORIES] + ["other"]:
            if k in cats and any(abs(v) >= 1 for v in cats[k].values()):
                w.append(f"| {k} | " + " | ".join(f"{cats[k].get(c, 0):,.0f}" for c in names) +
                         " |")
        for c in names:
            incl = cg[c]["incl"]
            shown, lines = set(), []
            for pattern in INCLUSIVE:
                for (func, obj), v in sorted(incl.items(), key=lambda kv: -kv[1]):
                    if re.search(pattern, func) and v >= 1 and (func, obj) not in shown:
                        shown.add((func, obj))
                        lines.append(f"| `{func}` | {v:,.0f} |")
            if lines:
                w.append(f"\n{title[c]}: inclusive instructions per op (each row includes what "
                         "it calls):\n")
                w.append("| function | Ir/op |\n|---|---:|")
                w.extend(lines)
            top = sorted(cg[c]["self"].items(), key=lambda kv: -kv[1])[: args.top]
            w.append(f"\n{title[c]}: top functions by self instructions per op:\n")
            w.append("| function | object | Ir/op |\n|---|---|---:|")
            for (func, obj), v in top:
                w.append(f"| `{func}` | {obj} | {v:,.0f} |")
    if pr:
        for c in names:
            w.append(f"\n{title[c]}: top cpu-clock samples (whole run, {args.reps + 1} reps):\n")
            w.append("| share | k/u | symbol |\n|---:|---|---|")
            for share, ring, sym in pr[c][1]:
                w.append(f"| {share:.1f} % | {'kernel' if ring == 'k' else 'user'} | `{sym}` |")
    return "\n".join(w) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts")
    ap.add_argument("--ops", default="get,aget")
    ap.add_argument("--n-sync", type=int, default=2000)
    ap.add_argument("--n-pipelined", type=int, default=10000)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    rust_bin, c_bin = binaries()
    server = None
    hosts = args.hosts
    if not hosts:
        server = subprocess.Popen([rust_bin, "serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = server.stdout.readline()
        if not line.startswith("HOSTS "):
            server.kill()
            sys.exit("zookeeper-bench serve did not start a server")
        hosts = line.split()[1]
    import tempfile
    workdir = args.workdir or tempfile.mkdtemp(prefix="zkprofile-")
    try:
        clients = [Client("rust", [rust_bin, "client"], hosts, args),
                   Client("c", [c_bin], hosts, args)]
        load0 = open("/proc/loadavg").read().split()[:3]
        text = ["## Profile: Rust vs C per op (by difference of repetitions)\n",
                f"- n = {args.n_sync} sync / {args.n_pipelined} pipelined ops per repetition, "
                f"{args.reps} extra repetitions; server {hosts}; load average before: "
                f"{' '.join(load0)}\n"]
        hop = Client("c_hop", [c_bin], hosts, args, {"get": "get_hop"})
        summary = []
        for op in args.ops.split(","):
            cg, ps, pr = {}, {}, {}
            for c in clients + ([hop] if op == "get" else []):
                print(f"profile: {op} {c.name}", file=sys.stderr)
                if not args.no_callgrind:
                    cg[c.name] = callgrind(c, op, args, workdir)
                if not args.no_perf:
                    ps[c.name] = perf_stat(c, op, args)
                    pr[c.name] = perf_record(c, op, args, workdir)
            text.append(report(op, args, cg, ps, pr))
            if cg:
                summary.append((op, {name: got["total"] for name, got in cg.items()},
                                {name: got["calls"] for name, got in cg.items()}))
        if summary:
            text.insert(2, summary_table(summary, args))
        load1 = open("/proc/loadavg").read().split()[:3]
        text.append(f"- load average after: {' '.join(load1)}\n")
        out = "\n".join(text)
        print(out)
        if args.out:
            with open(args.out, "w") as f:
                f.write(out)
    finally:
        if server:
            server.stdin.close()
            server.wait(timeout=60)
        if not args.workdir:
            for f in glob.glob(os.path.join(workdir, "*")):
                os.remove(f)
            os.rmdir(workdir)


if __name__ == "__main__":
    main()
