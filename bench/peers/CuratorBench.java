/*
 * The recipe scenarios (queue, lock, counter) through Apache Curator 5.4 (Debian's
 * libcurator-recipes-java), the Java column of the side-by-side. Compiled by the bench
 * runner with javac against /usr/share/java; speaks the same flags and output protocol as
 * c/zkbench.c and py/benchlib.py:
 *
 *   java -cp <build>:<curator jars> CuratorBench --hosts H --scenario queue|lock|idgen
 *        [--rounds R] [--n N] [--workers K] [--batch B] [--mode naive|batched] [--prefix P]
 *   java -Xmx1g -cp ... CuratorBench --hosts H --scenario tree_cache|curator_cache
 *        --prefix ROOT [--n CHANGES] [--value V] [--bound SECS]
 *
 *   RESULT metric=<name> round=<r> ops=<n> secs=<elapsed> notif=0 notif_unknown=1
 *   RSS peak_kb=<VmHWM>
 *
 * Recipes: SimpleDistributedQueue (offer / blocking take: the drop-in for ZooKeeper's own
 * queue recipe, the same shape as the classic queue recipe), InterProcessMutex, and
 * DistributedAtomicLong (optimistic versioned set; add(batch) for the batched counter).
 * Curator does not expose how many watch events its recipes received: notif_unknown=1.
 *
 * The cache scenarios (bench/src/cache_scale.rs runs them): TreeCache or CuratorCache on
 * ROOT, timed to its initialized signal; then READY on stdout, and on GO from stdin the
 * time until the cache's listener has seen an update carrying V for N distinct paths (the
 * runner makes those changes), or SECS. No warm-up there: the load is one process's first.
 *
 * The JVM starts interpreted: before the measured rounds, untimed rounds at a quarter of n
 * run in the same process for at least 1.5 s, so the figures are Curator's steady state
 * rather than the JIT's warm-up.
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.cache.TreeCache;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.queue.SimpleDistributedQueue;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;

public final class CuratorBench {
  private static String hosts;
  private static String scenario;
  private static String mode = "naive";
  private static String prefix = "/zkbench";
  private static int rounds = 1, n = 1000, workers = 1, batch = 100;
  private static String value = "burst";
  private static int bound = 120;
  private static long expect = 0;
  /** How long a cache may take after its initialized signal to hold the whole tree. */
  private static final double FULL_BOUND_SECS = 30;

  private static final double WARM_UP_SECS = 1.5;
  private static final byte[] STOP = "STOP".getBytes(StandardCharsets.UTF_8);

  public static void main(String[] args) throws Exception {
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (!a.startsWith("--") || i + 1 >= args.length) die("bad argument " + a);
      String v = args[++i];
      switch (a.substring(2)) {
        case "hosts": hosts = v; break;
        case "scenario": scenario = v; break;
        case "rounds": rounds = Integer.parseInt(v); break;
        case "n": n = Integer.parseInt(v); break;
        case "workers": workers = Integer.parseInt(v); break;
        case "batch": batch = Integer.parseInt(v); break;
        case "mode": mode = v; break;
        case "prefix": prefix = v; break;
        case "value": value = v; break;
        case "bound": bound = Integer.parseInt(v); break;
        case "expect": expect = Long.parseLong(v); break;
        case "window": break; // accepted for a uniform command line; no async scenario here
        default: die("unknown flag " + a);
      }
    }
    if (hosts == null || scenario == null) die("--hosts and --scenario are required");
    if (n < 1 || workers < 1 || batch < 1 || rounds < 1) die("counts must be positive");
    if (scenario.equals("tree_cache") || scenario.equals("curator_cache")) {
      cache(scenario.equals("curator_cache"));
      System.out.println("RSS peak_kb=" + peakRssKb());
      System.out.flush();
      System.exit(0);
    }
    long pid = ProcessHandle.current().pid();
    int full = n;
    // untimed warm-up rounds (JIT) for at least WARM_UP_SECS, then the measured rounds
    double warmStart = now();
    int warmRounds = 0;
    for (int r = -1; r < rounds; r++) {
      n = r < 0 ? Math.max(workers * 2, full / 4) : full;
      String base = String.format("%s/curator-%d-%s-%d", prefix, pid, scenario, warmRounds++);
      switch (scenario) {
        case "queue": queue(r, base); break;
        case "lock": lock(r, base); break;
        case "idgen": idgen(r, base); break;
        default: die("unsupported scenario " + scenario);
      }
      if (r < 0 && now() - warmStart < WARM_UP_SECS) r--; // warm up again
    }
    System.out.println("RSS peak_kb=" + peakRssKb());
    System.out.flush();
    System.exit(0);
  }

  private static void die(String msg) {
    System.err.println("CuratorBench: " + msg);
    System.exit(1);
  }

  private static long peakRssKb() {
    return statusKb("VmHWM:");
  }

  private static long statusKb(String field) {
    try {
      for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
        if (line.startsWith(field)) return Long.parseLong(line.replaceAll("[^0-9]", ""));
      }
    } catch (Exception e) {
      // fall through
    }
    return 0;
  }

  private static void emit(int round, String metric, long ops, double secs) {
    if (round < 0) return; // warm-up
    System.out.printf("RESULT metric=%s round=%d ops=%d secs=%.6f notif=0 notif_unknown=1%n",
        metric, round, ops, secs);
    System.out.flush();
  }

  private static CuratorFramework connect() throws Exception {
    CuratorFramework c =
        CuratorFrameworkFactory.newClient(hosts, 10000, 10000, new RetryNTimes(3, 100));
    c.start();
    if (!c.blockUntilConnected(10, java.util.concurrent.TimeUnit.SECONDS)) {
      die("could not connect to " + hosts);
    }
    return c;
  }

  private static void deleteTree(CuratorFramework c, String path) throws Exception {
    try {
      c.delete().deletingChildrenIfNeeded().forPath(path);
    } catch (KeeperException.NoNodeException e) {
      // already gone
    }
  }

  private static double now() {
    return System.nanoTime() / 1e9;
  }

  /** Runs one body per worker on its own thread; rethrows the first failure. */
  private interface Body {
    void run(int worker) throws Exception;
  }

  private static void parallel(int k, Body body) throws Exception {
    List<Thread> threads = new ArrayList<>();
    final Exception[] failure = new Exception[1];
    for (int i = 0; i < k; i++) {
      final int w = i;
      Thread t = new Thread(() -> {
        try {
          body.run(w);
        } catch (Exception e) {
          synchronized (failure) {
            if (failure[0] == null) failure[0] = e;
          }
        }
      });
      threads.add(t);
      t.start();
    }
    for (Thread t : threads) t.join();
    if (failure[0] != null) throw failure[0];
  }

  // ------------------------------------------------------------------ queue

  private static void queue(int round, String base) throws Exception {
    String qpath = base + "/q";
    CuratorFramework producer = connect();
    List<CuratorFramework> consumers = new ArrayList<>();
    for (int i = 0; i < workers; i++) consumers.add(connect());
    SimpleDistributedQueue q = new SimpleDistributedQueue(producer, qpath);
    double t = now();
    for (int i = 0; i < n; i++) q.offer(("item-" + i).getBytes(StandardCharsets.UTF_8));
    emit(round, "queue_put", n, now() - t);
    AtomicInteger taken = new AtomicInteger();
    HashSet<String> got = new HashSet<>();
    final int total = n;
    t = now();
    parallel(workers, w -> {
      SimpleDistributedQueue mine = new SimpleDistributedQueue(consumers.get(w), qpath);
      for (;;) {
        byte[] item = mine.take();
        if (java.util.Arrays.equals(item, STOP)) return;
        synchronized (got) {
          got.add(new String(item, StandardCharsets.UTF_8));
        }
        if (taken.incrementAndGet() == total) {
          for (int i = 0; i < workers; i++) q.offer(STOP);
        }
      }
    });
    double secs = now() - t;
    if (got.size() != n) die("queue lost or duplicated items: " + got.size() + " of " + n);
    emit(round, "queue_take_c" + workers, n, secs);
    for (CuratorFramework c : consumers) c.close();
    deleteTree(producer, base);
    producer.close();
  }

  // ------------------------------------------------------------------ lock

  private static void lock(int round, String base) throws Exception {
    String lpath = base + "/lock";
    CuratorFramework setup = connect();
    List<CuratorFramework> handles = new ArrayList<>();
    for (int i = 0; i < workers; i++) handles.add(connect());
    int per = n / workers;
    AtomicInteger holders = new AtomicInteger();
    AtomicBoolean overlap = new AtomicBoolean();
    double t = now();
    parallel(workers, w -> {
      InterProcessMutex mutex = new InterProcessMutex(handles.get(w), lpath);
      for (int i = 0; i < per; i++) {
        mutex.acquire();
        if (holders.incrementAndGet() != 1) overlap.set(true);
        holders.decrementAndGet();
        mutex.release();
      }
    });
    double secs = now() - t;
    if (overlap.get()) die("lock: two holders at once");
    emit(round, "lock_c" + workers, (long) per * workers, secs);
    for (CuratorFramework c : handles) c.close();
    deleteTree(setup, base);
    setup.close();
  }

  // ------------------------------------------------------------------ counter (id generator)

  private static void idgen(int round, String base) throws Exception {
    String ctr = base + "/ctr";
    CuratorFramework setup = connect();
    List<CuratorFramework> handles = new ArrayList<>();
    for (int i = 0; i < workers; i++) handles.add(connect());
    int per = n / workers;
    int step = mode.equals("naive") ? 1 : batch;
    long[] all = new long[per * workers];
    AtomicLong retries = new AtomicLong();
    double t = now();
    parallel(workers, w -> {
      // Optimistic only (no promotion to a lock): a versioned set, retried on BadVersion.
      DistributedAtomicLong counter =
          new DistributedAtomicLong(handles.get(w), ctr, new RetryNTimes(Integer.MAX_VALUE, 0));
      long next = 0, end = 0;
      for (int i = 0; i < per; i++) {
        if (next == end) {
          AtomicValue<Long> v = counter.add((long) step);
          while (!v.succeeded()) {
            retries.incrementAndGet();
            v = counter.add((long) step);
          }
          next = v.preValue();
          end = next + step;
        }
        all[w * per + i] = next++;
      }
    });
    double secs = now() - t;
    HashSet<Long> distinct = new HashSet<>();
    for (long id : all) distinct.add(id);
    if (distinct.size() != all.length) die("duplicate ids");
    emit(round, "id_" + mode + "_w" + workers, all.length, secs);
    for (CuratorFramework c : handles) c.close();
    deleteTree(setup, base);
    setup.close();
  }

  // ------------------------------------------------------------------ caches at scale

  /** What the cache's listener has seen (guarded by itself). */
  private static final class Tally {
    long added, updated;
    final HashSet<String> matched = new HashSet<>();
    double doneAt = -1, fullAt = -1;

    void added(byte[] want, String path, byte[] data) {
      synchronized (this) {
        if (++added == expect) {
          fullAt = now();
          notifyAll();
        }
      }
      matched(want, path, data);
    }

    synchronized void matched(byte[] want, String path, byte[] data) {
      if (java.util.Arrays.equals(data, want) && matched.add(path) && matched.size() == n) {
        doneAt = now();
        notifyAll();
      }
    }
  }

  private static void onUpdate(Tally tally, byte[] want, String path, byte[] data) {
    synchronized (tally) {
      tally.updated++;
    }
    tally.matched(want, path, data);
  }

  /** Nodes of a TreeCache holding `want` (all nodes when `want` is null), walked from `path`. */
  private static long walk(TreeCache tc, String path, byte[] want) {
    ChildData d = tc.getCurrentData(path);
    long count = d != null && (want == null || java.util.Arrays.equals(d.getData(), want)) ? 1 : 0;
    Map<String, ChildData> children = tc.getCurrentChildren(path);
    if (children != null) {
      for (String name : children.keySet()) count += walk(tc, path + "/" + name, want);
    }
    return count;
  }

  private static void cache(boolean curatorCache) throws Exception {
    CuratorFramework c = connect();
    // Connection changes during the run (a lost connection explains a partial cache).
    List<String> states = java.util.Collections.synchronizedList(new ArrayList<>());
    c.getConnectionStateListenable().addListener((client, state) -> {
      states.add(state.toString());
      System.err.println("CuratorBench: connection " + state + " at " + now());
    });
    c.getUnhandledErrorListenable().addListener((message, e) ->
        System.err.println("CuratorBench: unhandled error: " + message + ": " + e));
    byte[] want = value.getBytes(StandardCharsets.UTF_8);
    Tally tally = new Tally();
    CountDownLatch initialized = new CountDownLatch(1);
    CuratorCache cc = null;
    TreeCache tc = null;
    Runtime rt = Runtime.getRuntime();
    System.gc();
    long heapBaseKb = (rt.totalMemory() - rt.freeMemory()) / 1024;
    double t = now();
    if (curatorCache) {
      // CuratorCache.build: one persistent recursive watch (ZooKeeper 3.6+ addWatch).
      cc = CuratorCache.build(c, prefix);
      cc.listenable().addListener(CuratorCacheListener.builder()
          .forCreates(node -> tally.added(want, node.getPath(), node.getData()))
          .forChanges((old, node) -> onUpdate(tally, want, node.getPath(), node.getData()))
          .forInitialized(initialized::countDown)
          .build());
      cc.start();
    } else {
      tc = TreeCache.newBuilder(c, prefix).build();
      tc.getListenable().addListener((client, event) -> {
        switch (event.getType()) {
          case NODE_ADDED:
            tally.added(want, event.getData().getPath(), event.getData().getData());
            break;
          case NODE_UPDATED:
            onUpdate(tally, want, event.getData().getPath(), event.getData().getData());
            break;
          case INITIALIZED:
            initialized.countDown();
            break;
          default:
            break;
        }
      });
      tc.start();
    }
    if (!initialized.await(Math.max(bound, 600), TimeUnit.SECONDS)) die("cache not initialized");
    double load = now() - t;
    long added;
    synchronized (tally) {
      added = tally.added;
    }
    // Until the whole tree is in: its listener saw every node added (TreeCache), or the
    // cache holds every node (CuratorCache, polled: its listener may see fewer creates).
    double full = -1;
    double until = now() + FULL_BOUND_SECS;
    while (now() < until) {
      long have;
      synchronized (tally) {
        have = tally.added;
        if (have >= expect) {
          full = Math.max(load, tally.fullAt - t);
          break;
        }
      }
      if (cc != null && cc.size() >= expect) {
        full = now() - t;
        break;
      }
      Thread.sleep(10);
    }
    long rss = statusKb("VmRSS:");
    long peak = peakRssKb();
    System.gc();
    System.gc();
    long heapKb = (rt.totalMemory() - rt.freeMemory()) / 1024;
    long nodes = curatorCache ? cc.size() : walk(tc, prefix, null);
    System.out.printf(
        "RESULT metric=cache_load round=0 ops=%d secs=%.6f notif=%d rss_kb=%d peak_kb=%d "
            + "heap_kb=%d heap_base_kb=%d xmx_mb=%d mode=%s full_secs=%.6f conn_changes=%d%n",
        nodes, load, added, rss, peak, heapKb, heapBaseKb, rt.maxMemory() / (1024 * 1024),
        curatorCache ? "persistent_recursive" : "watches", full, states.size());
    System.out.println("READY");
    System.out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    String line = in.readLine();
    if (line != null && line.trim().equals("GO")) {
      double t0 = now();
      double deadline = t0 + bound;
      int seen;
      long updated;
      double secs;
      boolean complete;
      synchronized (tally) {
        while (tally.doneAt < 0 && now() < deadline) {
          tally.wait(Math.max(1, (long) ((deadline - now()) * 1000)));
        }
        complete = tally.doneAt >= 0;
        secs = (complete ? tally.doneAt : now()) - t0;
        seen = tally.matched.size();
        updated = tally.updated;
      }
      long cachedOk = curatorCache
          ? cc.stream().filter(d -> java.util.Arrays.equals(d.getData(), want)).count()
          : walk(tc, prefix, want);
      System.out.printf(
          "RESULT metric=cache_burst round=0 ops=%d secs=%.6f notif=%d cached_ok=%d complete=%d%n",
          seen, secs, updated, cachedOk, complete ? 1 : 0);
      System.out.flush();
    }
    if (cc != null) cc.close();
    if (tc != null) tc.close();
    c.close();
  }
}
