"""A kazoo 2.x participant driven over stdin/stdout by zk-harness (`zk_harness::peers`).

    python3 kazoo_peer.py <recipe> key=value...

Keys: connect (connect string), path (recipe path), id (participant id, default "kazoo"),
session_ms (session timeout, default 10000), permits (semaphore leases, default 1),
curator (counter: 1 for kazoo's support_curator layout, default 0).

Recipes: lock, read-lock, write-lock, semaphore, election (kazoo Lock, ReadLock,
WriteLock, Semaphore, Election), counter (Counter), party (Party).

Protocol: prints READY once connected and the recipe object is built, then runs one
command per stdin line. Every command ends with exactly one line `OK ...` or
`ERROR <message>`, after zero or more data lines. Times are time.monotonic_ns(),
CLOCK_MONOTONIC on Linux.

Lock-like recipes:  ACQUIRE -> OK <enter_ns>;  RELEASE -> OK <exit_ns>;
                    RUN <count> <hold_us> -> SECTION <enter_ns> <exit_ns> (count lines), OK
Counter:            GET -> OK <value>;  SET <value> -> OK (an unconditional write);
                    ADD <delta> <times> -> ADDED <pre> <post> (times lines), OK
Party:              JOIN -> OK;  LEAVE -> OK;  MEMBERS -> OK <id,id,...> (sorted)
All:                QUIT -> stops the client, OK, exits. End of stdin exits too.
"""

import struct
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Held:
    """Acquire/release over a kazoo lock-like object."""

    def __init__(self, make):
        self.make = make
        self.held = []

    def acquire(self):
        lock = self.make()
        lock.acquire()
        self.held.append(lock)

    def release(self):
        if not self.held:
            raise RuntimeError("nothing held")
        self.held.pop().release()


class ElectionTerm:
    """kazoo's Election only offers run(func): a term is func running on a thread."""

    def __init__(self, client, path, ident):
        self.client, self.path, self.ident = client, path, ident
        self.terms = []

    def acquire(self):
        elected, done = threading.Event(), threading.Event()
        election = self.client.Election(self.path, self.ident)

        def lead():
            elected.set()
            done.wait()

        thread = threading.Thread(target=election.run, args=(lead,), daemon=True)
        thread.start()
        elected.wait()
        self.terms.append((done, thread))

    def release(self):
        if not self.terms:
            raise RuntimeError("not leader")
        done, thread = self.terms.pop()
        done.set()
        thread.join()


def lock_command(held, cmd):
    if cmd[0] == "ACQUIRE":
        held.acquire()
        say("OK %d" % time.monotonic_ns())
    elif cmd[0] == "RELEASE":
        exit_ns = time.monotonic_ns()
        held.release()
        say("OK %d" % exit_ns)
    elif cmd[0] == "RUN":
        count, hold = int(cmd[1]), int(cmd[2]) / 1e6
        for _ in range(count):
            held.acquire()
            enter = time.monotonic_ns()
            if hold > 0:
                time.sleep(hold)
            exit_ns = time.monotonic_ns()
            held.release()
            say("SECTION %d %d" % (enter, exit_ns))
        say("OK")
    else:
        say("ERROR unknown command " + cmd[0])


def counter_command(client, counter, curator, cmd):
    if cmd[0] == "GET":
        say("OK %d" % counter.value)
    elif cmd[0] == "SET":
        value = int(cmd[1])
        client.ensure_path(counter.path)
        data = struct.pack(">i", value) if curator else repr(value).encode("ascii")
        client.set(counter.path, data)
        say("OK")
    elif cmd[0] == "ADD":
        delta, times = int(cmd[1]), int(cmd[2])
        for _ in range(times):
            counter += delta
            say("ADDED %d %d" % (counter.pre_value, counter.post_value))
        say("OK")
    else:
        say("ERROR unknown command " + cmd[0])


def party_command(party, cmd):
    if cmd[0] == "JOIN":
        party.join()
        say("OK")
    elif cmd[0] == "LEAVE":
        party.leave()
        say("OK")
    elif cmd[0] == "MEMBERS":
        say("OK " + ",".join(sorted(party)))
    else:
        say("ERROR unknown command " + cmd[0])


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: kazoo_peer.py <recipe> key=value...\n")
        return 2
    recipe = argv[1]
    args = dict(arg.split("=", 1) for arg in argv[2:])
    path, ident = args["path"], args.get("id", "kazoo")
    # Conflicting counter changes are retried by kazoo's command retry: retry fast.
    retry = KazooRetry(max_tries=-1, delay=0.005, backoff=1.5, max_delay=0.1)
    client = KazooClient(
        hosts=args["connect"],
        timeout=int(args.get("session_ms", "10000")) / 1000.0,
        command_retry=retry,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1),
    )
    client.start(timeout=30)

    handler = None
    if recipe == "lock":
        held = Held(lambda: client.Lock(path, ident))
    elif recipe == "read-lock":
        held = Held(lambda: client.ReadLock(path, ident))
    elif recipe == "write-lock":
        held = Held(lambda: client.WriteLock(path, ident))
    elif recipe == "semaphore":
        permits = int(args.get("permits", "1"))
        held = Held(lambda: client.Semaphore(path, ident, max_leases=permits))
    elif recipe == "election":
        held = ElectionTerm(client, path, ident)
    elif recipe == "counter":
        curator = args.get("curator", "0") == "1"
        counter = client.Counter(path, support_curator=curator)
        handler = lambda cmd: counter_command(client, counter, curator, cmd)
    elif recipe == "party":
        party = client.Party(path, ident)
        handler = lambda cmd: party_command(party, cmd)
    else:
        sys.stderr.write("unknown recipe %s\n" % recipe)
        return 2
    if handler is None:
        handler = lambda cmd: lock_command(held, cmd)
    say("READY")

    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "QUIT":
            break
        try:
            handler(cmd)
        except Exception as error:  # reported to the driver, which decides
            say("ERROR %r" % (error,))
    client.stop()
    client.close()
    say("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
