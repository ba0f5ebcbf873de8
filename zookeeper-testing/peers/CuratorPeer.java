// A Curator 5.x participant driven over stdin/stdout by zk-harness (`zk_harness::peers`).
//
//   java -cp <classes>:<curator jars> CuratorPeer <recipe> key=value...
//
// Keys: connect (connect string), path (recipe path), id (participant id, default "curator"),
// session_ms (session timeout, default 10000), permits (semaphore leases, default 1),
// seed (shared-count seed, default 0).
//
// Recipes: mutex, read-lock, write-lock, leader-latch, semaphore (InterProcessMutex,
// InterProcessReadWriteLock's read or write lock, LeaderLatch, InterProcessSemaphoreV2),
// shared-count (SharedCount), atomic-long (DistributedAtomicLong, optimistic mode),
// group-member (GroupMember, its payload the id).
//
// Protocol: prints READY once connected and the recipe object is built, then runs one
// command per stdin line. Every command ends with exactly one line `OK ...` or
// `ERROR <message>`, after zero or more data lines. Lines starting with `EVENT` may come
// at any time (listener callbacks). Times are System.nanoTime(), CLOCK_MONOTONIC on Linux.
//
// Lock-like recipes:  ACQUIRE -> OK <enter_ns>;  RELEASE -> OK <exit_ns>;
//                     RUN <count> <hold_us> -> SECTION <enter_ns> <exit_ns> (count lines), OK
// Counters:           GET -> OK <value>;  SET <value> -> OK;
//                     ADD <delta> <times> -> ADDED <pre> <post> (times lines), OK
//                     WATCH (shared-count) -> OK, then EVENT CHANGED <value> on each change
// Group member:       JOIN -> OK;  LEAVE -> OK;  MEMBERS -> OK <id,id,...> (sorted, as the
//                     joined GroupMember's cache reads them)
// All:                QUIT -> closes the client, OK, exits. End of stdin exits too.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.SharedCountListener;
import org.apache.curator.framework.recipes.shared.SharedCountReader;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorPeer {
    private static final PrintStream OUT = new PrintStream(System.out, true);

    private static synchronized void say(String line) {
        OUT.println(line);
    }

    /** Something that can be held: acquired and released in turn. */
    private interface Holdable {
        void acquire() throws Exception;

        void release() throws Exception;
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            System.err.println("usage: CuratorPeer <recipe> key=value...");
            System.exit(2);
        }
        String recipe = argv[0];
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            int eq = argv[i].indexOf('=');
            if (eq < 0) {
                System.err.println("bad argument " + argv[i]);
                System.exit(2);
            }
            args.put(argv[i].substring(0, eq), argv[i].substring(eq + 1));
        }
        String connect = required(args, "connect");
        String path = required(args, "path");
        String id = args.getOrDefault("id", "curator");
        int sessionMs = Integer.parseInt(args.getOrDefault("session_ms", "10000"));

        CuratorFramework client = CuratorFrameworkFactory.newClient(
                connect, sessionMs, Math.min(sessionMs, 15000), new RetryNTimes(Integer.MAX_VALUE, 50));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            say("ERROR not connected after 30 s");
            System.exit(1);
        }

        Holdable holdable = null;
        SharedCount sharedCount = null;
        DistributedAtomicLong atomicLong = null;
        GroupMember[] member = null;
        switch (recipe) {
            case "mutex":
                holdable = mutex(new InterProcessMutex(client, path));
                break;
            case "read-lock":
                holdable = mutex(new InterProcessReadWriteLock(client, path).readLock());
                break;
            case "write-lock":
                holdable = mutex(new InterProcessReadWriteLock(client, path).writeLock());
                break;
            case "leader-latch":
                holdable = latch(client, path, id);
                break;
            case "semaphore":
                holdable = semaphore(new InterProcessSemaphoreV2(
                        client, path, Integer.parseInt(args.getOrDefault("permits", "1"))));
                break;
            case "shared-count":
                sharedCount = new SharedCount(
                        client, path, Integer.parseInt(args.getOrDefault("seed", "0")));
                sharedCount.start();
                break;
            case "atomic-long":
                // Optimistic mode only: each change is a versioned set, retried on conflict.
                atomicLong = new DistributedAtomicLong(client, path, new RetryNTimes(0, 0));
                break;
            case "group-member":
                member = new GroupMember[1]; // joined: [0] != null
                break;
            default:
                System.err.println("unknown recipe " + recipe);
                System.exit(2);
        }
        say("READY");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split("\\s+");
            if (cmd[0].isEmpty()) {
                continue;
            }
            try {
                if (cmd[0].equals("QUIT")) {
                    break;
                }
                if (holdable != null) {
                    lockCommand(holdable, cmd);
                } else if (sharedCount != null) {
                    sharedCountCommand(sharedCount, cmd);
                } else if (member != null) {
                    groupCommand(client, path, id, member, cmd);
                } else {
                    atomicLongCommand(atomicLong, cmd);
                }
            } catch (Exception e) {
                say("ERROR " + e.toString().replace('\n', ' '));
            }
        }
        if (sharedCount != null) {
            sharedCount.close();
        }
        if (member != null && member[0] != null) {
            member[0].close();
        }
        client.close();
        say("OK");
        System.exit(0);
    }

    private static String required(Map<String, String> args, String key) {
        String value = args.get(key);
        if (value == null) {
            System.err.println("missing argument " + key + "=...");
            System.exit(2);
        }
        return value;
    }

    private static Holdable mutex(InterProcessMutex mutex) {
        return new Holdable() {
            public void acquire() throws Exception {
                mutex.acquire();
            }

            public void release() throws Exception {
                mutex.release();
            }
        };
    }

    private static Holdable latch(CuratorFramework client, String path, String id) {
        // A closed LeaderLatch cannot start again: one latch per term of leadership.
        return new Holdable() {
            LeaderLatch current;

            public void acquire() throws Exception {
                if (current != null) {
                    throw new IllegalStateException("already leader");
                }
                LeaderLatch latch = new LeaderLatch(client, path, id);
                latch.start();
                latch.await();
                current = latch;
            }

            public void release() throws Exception {
                if (current == null) {
                    throw new IllegalStateException("not leader");
                }
                current.close();
                current = null;
            }
        };
    }

    private static Holdable semaphore(InterProcessSemaphoreV2 semaphore) {
        return new Holdable() {
            final ArrayDeque<Lease> leases = new ArrayDeque<>();

            public void acquire() throws Exception {
                leases.push(semaphore.acquire());
            }

            public void release() throws Exception {
                Lease lease = leases.poll();
                if (lease == null) {
                    throw new IllegalStateException("no lease held");
                }
                semaphore.returnLease(lease);
            }
        };
    }

    private static void lockCommand(Holdable holdable, String[] cmd) throws Exception {
        switch (cmd[0]) {
            case "ACQUIRE":
                holdable.acquire();
                say("OK " + System.nanoTime());
                break;
            case "RELEASE": {
                long exit = System.nanoTime();
                holdable.release();
                say("OK " + exit);
                break;
            }
            case "RUN": {
                int count = Integer.parseInt(cmd[1]);
                long holdNanos = Long.parseLong(cmd[2]) * 1000;
                for (int i = 0; i < count; i++) {
                    holdable.acquire();
                    long enter = System.nanoTime();
                    if (holdNanos > 0) {
                        LockSupport.parkNanos(holdNanos);
                    }
                    long exit = System.nanoTime();
                    holdable.release();
                    say("SECTION " + enter + " " + exit);
                }
                say("OK");
                break;
            }
            default:
                say("ERROR unknown command " + cmd[0]);
        }
    }

    private static void sharedCountCommand(SharedCount count, String[] cmd) throws Exception {
        switch (cmd[0]) {
            case "GET":
                say("OK " + count.getCount());
                break;
            case "SET":
                count.setCount(Integer.parseInt(cmd[1]));
                say("OK");
                break;
            case "ADD": {
                int delta = Integer.parseInt(cmd[1]);
                int times = Integer.parseInt(cmd[2]);
                for (int i = 0; i < times; i++) {
                    while (true) {
                        VersionedValue<Integer> seen = count.getVersionedValue();
                        if (count.trySetCount(seen, seen.getValue() + delta)) {
                            say("ADDED " + seen.getValue() + " " + (seen.getValue() + delta));
                            break;
                        }
                        // Lost the race; the listener or the failed set refreshes the cache.
                        LockSupport.parkNanos(200_000);
                    }
                }
                say("OK");
                break;
            }
            case "WATCH":
                count.addListener(new SharedCountListener() {
                    public void countHasChanged(SharedCountReader reader, int newCount) {
                        say("EVENT CHANGED " + newCount);
                    }

                    public void stateChanged(CuratorFramework client, ConnectionState state) {
                        say("EVENT STATE " + state);
                    }
                });
                say("OK");
                break;
            default:
                say("ERROR unknown command " + cmd[0]);
        }
    }

    private static void groupCommand(
            CuratorFramework client, String path, String id, GroupMember[] member, String[] cmd) {
        switch (cmd[0]) {
            case "JOIN":
                if (member[0] == null) {
                    member[0] = new GroupMember(
                            client, path, id, id.getBytes(java.nio.charset.StandardCharsets.UTF_8));
                    member[0].start();
                }
                say("OK");
                break;
            case "LEAVE":
                if (member[0] != null) {
                    member[0].close();
                    member[0] = null;
                }
                say("OK");
                break;
            case "MEMBERS":
                if (member[0] == null) {
                    say("ERROR not joined");
                } else {
                    say("OK " + String.join(",", new TreeSet<>(member[0].getCurrentMembers().keySet())));
                }
                break;
            default:
                say("ERROR unknown command " + cmd[0]);
        }
    }

    private static void atomicLongCommand(DistributedAtomicLong value, String[] cmd)
            throws Exception {
        switch (cmd[0]) {
            case "GET": {
                AtomicValue<Long> read = value.get();
                if (!read.succeeded()) {
                    throw new IllegalStateException("get did not succeed");
                }
                say("OK " + read.postValue());
                break;
            }
            case "SET":
                value.forceSet(Long.parseLong(cmd[1]));
                say("OK");
                break;
            case "ADD": {
                long delta = Long.parseLong(cmd[1]);
                int times = Integer.parseInt(cmd[2]);
                for (int i = 0; i < times; i++) {
                    while (true) {
                        AtomicValue<Long> result = value.add(delta);
                        if (result.succeeded()) {
                            say("ADDED " + result.preValue() + " " + result.postValue());
                            break;
                        }
                        LockSupport.parkNanos(200_000);
                    }
                }
                say("OK");
                break;
            }
            default:
                say("ERROR unknown command " + cmd[0]);
        }
    }
}
