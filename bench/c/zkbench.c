/*
 * The benchmark scenarios through the raw ZooKeeper C client (libzookeeper_mt), the
 * baseline the Rust crate is compared against. Built by bench/build.rs:
 *
 *   cc -O2 -DTHREADED -I/usr/include/zookeeper zkbench.c -lzookeeper_mt -lpthread -o zkbench
 *
 * Usage (the same flags as bench/py/benchlib.py):
 *   zkbench --hosts H --scenario sync|async|watch|queue|lock|idgen [--rounds R] [--n N]
 *           [--window W] [--workers K] [--batch B] [--mode naive|batched] [--prefix P]
 *   zkbench --hosts H --scenario op --op get|exists|set|create_delete|aget|acreate|get_hop
 *           [--n N] [--window W] [--reps R]        (one op kind: the paired runs)
 *   zkbench --hosts H --scenario watchscale --watches K [--n N]
 *   zkbench --hosts H --scenario sessions --n S
 *
 * Prints one line per measured phase and the peak RSS:
 *   RESULT metric=<name> round=<r> ops=<n> secs=<elapsed> notif=<watch events> [...]
 *   RSS peak_kb=<VmHWM>
 * Exits non-zero (with a message on stderr) on any unexpected ZooKeeper error.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zookeeper.h>

static const char DATA[] =
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; /* 64 bytes */
#define DATA_LEN 64

struct args {
  const char *hosts, *scenario, *mode, *prefix, *op;
  int rounds, n, window, workers, batch, watches, reps;
};
static struct args A = {NULL, NULL, "naive", "/zkbench", "get", 1, 1000, 100, 1, 100, 0, 1};

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "zkbench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* This process's CPU time (all threads, user + system) and context switches. */
struct usage {
  double user_us, sys_us;
  long csw;
};

static struct usage usage_now(void) {
  struct rusage ru;
  struct usage u = {0, 0, 0};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    u.user_us = ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec;
    u.sys_us = ru.ru_stime.tv_sec * 1e6 + ru.ru_stime.tv_usec;
    u.csw = ru.ru_nvcsw + ru.ru_nivcsw;
  }
  return u;
}

/* "cpu_us=.. user_us=.. sys_us=.. csw=.." since `start` */
static void usage_since(struct usage start, char *out, size_t cap) {
  struct usage u = usage_now();
  double user = u.user_us - start.user_us, sys = u.sys_us - start.sys_us;
  snprintf(out, cap, "cpu_us=%.0f user_us=%.0f sys_us=%.0f csw=%ld", user + sys, user, sys,
           u.csw - start.csw);
}

static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  size_t len = strlen(field);
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, len) == 0) kb = strtol(line + len, NULL, 10);
  fclose(f);
  return kb;
}

static void emit(const char *metric, int rnd, long ops, double secs, long notif, const char *extra) {
  printf("RESULT metric=%s round=%d ops=%ld secs=%.6f notif=%ld %s\n", metric, rnd, ops, secs,
         notif, extra ? extra : "");
  fflush(stdout);
}

static void check(int rc, const char *what, const char *path) {
  if (rc != ZOK) die("%s %s: %s", what, path ? path : "", zerror(rc));
}

/* ------------------------------------------------------------------ a counter + event */

struct event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int fired;
};

static void event_init(struct event *e) {
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->fired = 0;
}

static void event_set(struct event *e) {
  pthread_mutex_lock(&e->mu);
  e->fired = 1;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void event_wait(struct event *e) {
  pthread_mutex_lock(&e->mu);
  while (!e->fired) pthread_cond_wait(&e->cv, &e->mu);
  e->fired = 0;
  pthread_mutex_unlock(&e->mu);
}

static long notif_count; /* watch notifications (node events only) */
static pthread_mutex_t notif_mu = PTHREAD_MUTEX_INITIALIZER;

static void notif_inc(void) {
  pthread_mutex_lock(&notif_mu);
  notif_count++;
  pthread_mutex_unlock(&notif_mu);
}

/* A path watcher: counts node events and wakes whoever waits on the event (session
 * events also reach path watchers in the C client: ignored). */
static void event_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh; (void)state; (void)path;
  if (type == ZOO_SESSION_EVENT) return;
  notif_inc();
  event_set((struct event *)ctx);
}

/* ------------------------------------------------------------------ connection */

struct conn {
  zhandle_t *zh;
  struct event connected;
};

static void global_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh; (void)path;
  if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) event_set((struct event *)ctx);
}

static struct conn *zk_connect(void) {
  struct conn *c = calloc(1, sizeof *c);
  event_init(&c->connected);
  c->zh = zookeeper_init(A.hosts, global_watcher, 10000, NULL, &c->connected, 0);
  if (!c->zh) die("zookeeper_init(%s): %s", A.hosts, strerror(errno));
  /* the Rust crate defaults to a 10 s re-resolution delay; give C the same */
  zoo_set_servers_resolution_delay(c->zh, 10000);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  pthread_mutex_lock(&c->connected.mu);
  while (!c->connected.fired)
    if (pthread_cond_timedwait(&c->connected.cv, &c->connected.mu, &deadline) == ETIMEDOUT)
      die("could not connect to %s", A.hosts);
  pthread_mutex_unlock(&c->connected.mu);
  return c;
}

static void zk_close(struct conn *c) {
  zookeeper_close(c->zh);
  free(c);
}

static void ensure_path(zhandle_t *zh, const char *path) {
  char cur[1024] = "";
  const char *p = path;
  while (*p) {
    const char *slash = strchr(p + 1, '/');
    size_t len = slash ? (size_t)(slash - path) : strlen(path);
    memcpy(cur, path, len);
    cur[len] = 0;
    int rc = zoo_create(zh, cur, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) check(rc, "create", cur);
    if (!slash) break;
    p = slash;
  }
}

static void delete_tree(zhandle_t *zh, const char *path) {
  struct String_vector kids;
  int rc = zoo_get_children(zh, path, 0, &kids);
  if (rc == ZNONODE) return;
  check(rc, "get_children", path);
  for (int i = 0; i < kids.count; i++) {
    char child[1024];
    snprintf(child, sizeof child, "%s/%s", path, kids.data[i]);
    delete_tree(zh, child);
  }
  deallocate_String_vector(&kids);
  rc = zoo_delete(zh, path, -1);
  if (rc != ZNONODE) check(rc, "delete", path);
}

static char **node_paths(const char *base, int n) {
  char **paths = malloc(sizeof(char *) * n);
  for (int i = 0; i < n; i++) {
    paths[i] = malloc(strlen(base) + 16);
    sprintf(paths[i], "%s/n%07d", base, i);
  }
  return paths;
}

static void free_paths(char **paths, int n) {
  for (int i = 0; i < n; i++) free(paths[i]);
  free(paths);
}

/* ------------------------------------------------------------------ sync ops */

static void scenario_sync(int rnd, const char *base) {
  struct conn *c = zk_connect();
  ensure_path(c->zh, base);
  char **paths = node_paths(base, A.n);
  char buf[128];
  int len;
  struct Stat stat;
  double t = now();
  for (int i = 0; i < A.n; i++)
    check(zoo_create(c->zh, paths[i], DATA, DATA_LEN, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), "create",
          paths[i]);
  emit("sync_create", rnd, A.n, now() - t, 0, NULL);
  t = now();
  for (int i = 0; i < A.n; i++) {
    len = sizeof buf;
    check(zoo_get(c->zh, paths[i], 0, buf, &len, &stat), "get", paths[i]);
  }
  emit("sync_get", rnd, A.n, now() - t, 0, NULL);
  t = now();
  for (int i = 0; i < A.n; i++)
    check(zoo_set(c->zh, paths[i], DATA, DATA_LEN, -1), "set", paths[i]);
  emit("sync_set", rnd, A.n, now() - t, 0, NULL);
  t = now();
  for (int i = 0; i < A.n; i++) check(zoo_exists(c->zh, paths[i], 0, &stat), "exists", paths[i]);
  emit("sync_exists", rnd, A.n, now() - t, 0, NULL);
  t = now();
  for (int i = 0; i < A.n; i++) check(zoo_delete(c->zh, paths[i], -1), "delete", paths[i]);
  emit("sync_delete", rnd, A.n, now() - t, 0, NULL);
  delete_tree(c->zh, base);
  free_paths(paths, A.n);
  zk_close(c);
}

/* ------------------------------------------------------------------ pipelined async */

struct window {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int in_flight, size;
  long errors;
};

static void window_acquire(struct window *w) {
  pthread_mutex_lock(&w->mu);
  while (w->in_flight >= w->size) pthread_cond_wait(&w->cv, &w->mu);
  w->in_flight++;
  pthread_mutex_unlock(&w->mu);
}

static void window_done(struct window *w, int rc) {
  pthread_mutex_lock(&w->mu);
  w->in_flight--;
  if (rc != ZOK) w->errors++;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void window_drain(struct window *w) {
  pthread_mutex_lock(&w->mu);
  while (w->in_flight > 0) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

static void string_done(int rc, const char *value, const void *data) {
  (void)value;
  window_done((struct window *)data, rc);
}

static void data_done(int rc, const char *value, int len, const struct Stat *stat, const void *data) {
  (void)value; (void)len; (void)stat;
  window_done((struct window *)data, rc);
}

static void void_done(int rc, const void *data) { window_done((struct window *)data, rc); }

/* A_CREATE_REPEATABLE: ephemeral sequential, so that one set of paths serves every
 * repetition of --reps and the nodes go with the session (see scenario_op). */
enum aop { A_CREATE, A_CREATE_REPEATABLE, A_GET, A_DELETE };

static double pipelined(zhandle_t *zh, char **paths, int n, enum aop op, int size) {
  struct window w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, size, 0};
  double t = now();
  for (int i = 0; i < n; i++) {
    window_acquire(&w);
    int rc;
    switch (op) {
    case A_CREATE:
      rc = zoo_acreate(zh, paths[i], DATA, DATA_LEN, &ZOO_OPEN_ACL_UNSAFE, 0, string_done, &w);
      break;
    case A_CREATE_REPEATABLE:
      rc = zoo_acreate(zh, paths[i], DATA, DATA_LEN, &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL | ZOO_SEQUENCE, string_done, &w);
      break;
    case A_GET: rc = zoo_aget(zh, paths[i], 0, data_done, &w); break;
    default: rc = zoo_adelete(zh, paths[i], -1, void_done, &w); break;
    }
    check(rc, "async submit", paths[i]);
  }
  window_drain(&w);
  if (w.errors) die("%ld async requests failed", w.errors);
  return now() - t;
}

static void scenario_async(int rnd, const char *base) {
  struct conn *c = zk_connect();
  ensure_path(c->zh, base);
  char **paths = node_paths(base, A.n);
  char metric[64];
  double secs = pipelined(c->zh, paths, A.n, A_CREATE, A.window);
  snprintf(metric, sizeof metric, "async_create_w%d", A.window);
  emit(metric, rnd, A.n, secs, 0, NULL);
  secs = pipelined(c->zh, paths, A.n, A_GET, A.window);
  snprintf(metric, sizeof metric, "async_get_w%d", A.window);
  emit(metric, rnd, A.n, secs, 0, NULL);
  pipelined(c->zh, paths, A.n, A_DELETE, A.window > 100 ? A.window : 100);
  delete_tree(c->zh, base);
  free_paths(paths, A.n);
  zk_close(c);
}

/* ------------------------------------------------------------------ watch latency */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void scenario_watch(int rnd, const char *base) {
  struct conn *writer = zk_connect(), *watcher = zk_connect();
  ensure_path(writer->zh, base);
  char node[1024];
  snprintf(node, sizeof node, "%s/w", base);
  check(zoo_create(writer->zh, node, DATA, DATA_LEN, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), "create",
        node);
  struct event ev;
  event_init(&ev);
  double *lat = malloc(sizeof(double) * A.n);
  long before = notif_count;
  char buf[128];
  struct Stat stat;
  double t = now();
  for (int i = 0; i < A.n; i++) {
    int len = sizeof buf;
    check(zoo_wget(watcher->zh, node, event_watcher, &ev, buf, &len, &stat), "wget", node);
    double t0 = now();
    check(zoo_set(writer->zh, node, DATA, DATA_LEN, -1), "set", node);
    event_wait(&ev);
    lat[i] = now() - t0;
  }
  double secs = now() - t;
  qsort(lat, A.n, sizeof(double), cmp_double);
  char extra[128];
  snprintf(extra, sizeof extra, "lat_p50_us=%ld lat_p99_us=%ld", (long)(lat[A.n / 2] * 1e6),
           (long)(lat[(int)(A.n * 0.99)] * 1e6));
  emit("watch", rnd, A.n, secs, notif_count - before, extra);
  free(lat);
  delete_tree(writer->zh, base);
  zk_close(watcher);
  zk_close(writer);
}

/* ------------------------------------------------------------------ the classic queue recipe */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

struct queue_ctx {
  const char *qpath;
  struct conn *producer;
  pthread_mutex_t mu; /* guards taken, stop_sent */
  long taken;
  int workers, n;
};

/* get + delete one item; returns 1 and the data in buf if it was ours */
static int get_and_delete(zhandle_t *zh, const char *node, char *buf, int *len) {
  struct Stat stat;
  int rc = zoo_get(zh, node, 0, buf, len, &stat);
  if (rc == ZNONODE) return 0;
  check(rc, "get", node);
  rc = zoo_delete(zh, node, stat.version);
  if (rc == ZNONODE || rc == ZBADVERSION) return 0;
  check(rc, "delete", node);
  return 1;
}

/* The classic blocking dequeue: children with a watch, sorted, take the first still there,
 * else wait for the watch. */
static int block_dequeue(zhandle_t *zh, const char *qpath, struct event *ev, char *buf, int cap) {
  for (;;) {
    struct String_vector kids;
    check(zoo_wget_children(zh, qpath, event_watcher, ev, &kids), "wget_children", qpath);
    qsort(kids.data, kids.count, sizeof(char *), cmp_str);
    for (int i = 0; i < kids.count; i++) {
      char node[1024];
      snprintf(node, sizeof node, "%s/%s", qpath, kids.data[i]);
      int len = cap - 1;
      if (get_and_delete(zh, node, buf, &len)) {
        buf[len < 0 ? 0 : len] = 0;
        deallocate_String_vector(&kids);
        return len;
      }
    }
    deallocate_String_vector(&kids);
    event_wait(ev);
  }
}

static void enqueue(zhandle_t *zh, const char *qpath, const char *val) {
  char path[1024];
  snprintf(path, sizeof path, "%s/item-", qpath);
  check(zoo_create(zh, path, val, (int)strlen(val), &ZOO_OPEN_ACL_UNSAFE, ZOO_SEQUENCE, NULL, 0),
        "create", path);
}

struct consumer {
  pthread_t thread;
  struct queue_ctx *q;
  struct conn *c;
};

static void *consume(void *arg) {
  struct consumer *me = arg;
  struct queue_ctx *q = me->q;
  struct event ev;
  event_init(&ev);
  char buf[128];
  for (;;) {
    block_dequeue(me->c->zh, q->qpath, &ev, buf, sizeof buf);
    if (strcmp(buf, "STOP") == 0) break;
    pthread_mutex_lock(&q->mu);
    long taken = ++q->taken;
    pthread_mutex_unlock(&q->mu);
    if (taken == q->n)
      for (int i = 0; i < q->workers; i++) enqueue(q->producer->zh, q->qpath, "STOP");
  }
  /* A watch may still be registered with &ev on the stack: the C client keeps it until
   * it fires or the handle closes, so close this consumer's handle before returning. */
  zk_close(me->c);
  me->c = NULL;
  return NULL;
}

static void scenario_queue(int rnd, const char *base) {
  struct queue_ctx q;
  char qpath[1024];
  snprintf(qpath, sizeof qpath, "%s/q", base);
  q.qpath = qpath;
  q.producer = zk_connect();
  pthread_mutex_init(&q.mu, NULL);
  q.taken = 0;
  q.workers = A.workers;
  q.n = A.n;
  struct consumer *cons = calloc(A.workers, sizeof *cons);
  for (int i = 0; i < A.workers; i++) {
    cons[i].q = &q;
    cons[i].c = zk_connect();
  }
  ensure_path(q.producer->zh, qpath);
  double t = now();
  char val[32];
  for (int i = 0; i < A.n; i++) {
    snprintf(val, sizeof val, "item-%d", i);
    enqueue(q.producer->zh, qpath, val);
  }
  emit("queue_put", rnd, A.n, now() - t, 0, NULL);
  long before = notif_count;
  t = now();
  for (int i = 0; i < A.workers; i++) pthread_create(&cons[i].thread, NULL, consume, &cons[i]);
  for (int i = 0; i < A.workers; i++) pthread_join(cons[i].thread, NULL);
  double secs = now() - t;
  if (q.taken != A.n) die("queue: %ld taken of %d", q.taken, A.n);
  char metric[64];
  snprintf(metric, sizeof metric, "queue_take_c%d", A.workers);
  emit(metric, rnd, A.n, secs, notif_count - before, NULL);
  delete_tree(q.producer->zh, base);
  zk_close(q.producer);
  free(cons);
}

/* ------------------------------------------------------------------ lock handoff */

struct contender {
  pthread_t thread;
  struct conn *c;
  const char *lpath;
  int per;
};

static volatile int holders;
static volatile int overlap;

/* ZooKeeper's lock recipe: ephemeral sequential node; the lowest holds the lock; every
 * other contender watches only its predecessor. */
static void lock_acquire(zhandle_t *zh, const char *lpath, struct event *ev, char *me, int cap) {
  char prefix[1024];
  snprintf(prefix, sizeof prefix, "%s/lock-", lpath);
  check(zoo_create(zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, me, cap),
        "create", prefix);
  const char *name = strrchr(me, '/') + 1;
  for (;;) {
    struct String_vector kids;
    check(zoo_get_children(zh, lpath, 0, &kids), "get_children", lpath);
    qsort(kids.data, kids.count, sizeof(char *), cmp_str);
    int idx = -1;
    for (int i = 0; i < kids.count; i++)
      if (strcmp(kids.data[i], name) == 0) idx = i;
    if (idx < 0) die("lock node %s vanished", me);
    if (idx == 0) {
      deallocate_String_vector(&kids);
      return;
    }
    char pred[1024];
    snprintf(pred, sizeof pred, "%s/%s", lpath, kids.data[idx - 1]);
    deallocate_String_vector(&kids);
    struct Stat stat;
    int rc = zoo_wexists(zh, pred, event_watcher, ev, &stat);
    if (rc == ZOK) event_wait(ev);
    else if (rc != ZNONODE) check(rc, "wexists", pred);
  }
}

static void *contend(void *arg) {
  struct contender *me = arg;
  struct event ev;
  event_init(&ev);
  char node[1024];
  for (int i = 0; i < me->per; i++) {
    lock_acquire(me->c->zh, me->lpath, &ev, node, sizeof node);
    if (__sync_add_and_fetch(&holders, 1) != 1) overlap = 1;
    __sync_sub_and_fetch(&holders, 1);
    check(zoo_delete(me->c->zh, node, -1), "delete", node);
  }
  return NULL;
}

static void scenario_lock(int rnd, const char *base) {
  struct conn *setup = zk_connect();
  char lpath[1024];
  snprintf(lpath, sizeof lpath, "%s/lock", base);
  ensure_path(setup->zh, lpath);
  struct contender *cs = calloc(A.workers, sizeof *cs);
  int per = A.n / A.workers;
  for (int i = 0; i < A.workers; i++) {
    cs[i].c = zk_connect();
    cs[i].lpath = lpath;
    cs[i].per = per;
  }
  long before = notif_count;
  double t = now();
  for (int i = 0; i < A.workers; i++) pthread_create(&cs[i].thread, NULL, contend, &cs[i]);
  for (int i = 0; i < A.workers; i++) pthread_join(cs[i].thread, NULL);
  double secs = now() - t;
  if (overlap) die("lock: two holders at once");
  char metric[64];
  snprintf(metric, sizeof metric, "lock_c%d", A.workers);
  emit(metric, rnd, (long)per * A.workers, secs, notif_count - before, NULL);
  for (int i = 0; i < A.workers; i++) zk_close(cs[i].c);
  delete_tree(setup->zh, base);
  zk_close(setup);
  free(cs);
}

/* ------------------------------------------------------------------ id generator */

struct idworker {
  pthread_t thread;
  struct conn *c;
  const char *ctr;
  int per, batch;
  long *ids;
};

/* versioned read-modify-write: returns the first id of the reserved range */
static long cas_add(zhandle_t *zh, const char *path, int delta) {
  for (;;) {
    char buf[64];
    int len = sizeof buf - 1;
    struct Stat stat;
    check(zoo_get(zh, path, 0, buf, &len, &stat), "get", path);
    buf[len < 0 ? 0 : len] = 0;
    long cur = strtol(buf, NULL, 10);
    char next[32];
    int n = snprintf(next, sizeof next, "%ld", cur + delta);
    int rc = zoo_set(zh, path, next, n, stat.version);
    if (rc == ZOK) return cur;
    if (rc != ZBADVERSION) check(rc, "set", path);
  }
}

static void *idwork(void *arg) {
  struct idworker *w = arg;
  long next = 0, end = 0;
  for (int i = 0; i < w->per; i++) {
    if (next == end) {
      next = cas_add(w->c->zh, w->ctr, w->batch);
      end = next + w->batch;
    }
    w->ids[i] = next++;
  }
  return NULL;
}

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return x < y ? -1 : x > y;
}

static void scenario_idgen(int rnd, const char *base) {
  struct conn *setup = zk_connect();
  ensure_path(setup->zh, base);
  char ctr[1024];
  snprintf(ctr, sizeof ctr, "%s/ctr", base);
  check(zoo_create(setup->zh, ctr, "0", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), "create", ctr);
  int per = A.n / A.workers;
  int batch = strcmp(A.mode, "naive") == 0 ? 1 : A.batch;
  long *all = malloc(sizeof(long) * (size_t)per * A.workers);
  struct idworker *ws = calloc(A.workers, sizeof *ws);
  for (int i = 0; i < A.workers; i++) {
    ws[i].c = zk_connect();
    ws[i].ctr = ctr;
    ws[i].per = per;
    ws[i].batch = batch;
    ws[i].ids = all + (size_t)i * per;
  }
  double t = now();
  for (int i = 0; i < A.workers; i++) pthread_create(&ws[i].thread, NULL, idwork, &ws[i]);
  for (int i = 0; i < A.workers; i++) pthread_join(ws[i].thread, NULL);
  double secs = now() - t;
  long total = (long)per * A.workers;
  qsort(all, total, sizeof(long), cmp_long);
  for (long i = 1; i < total; i++)
    if (all[i] == all[i - 1]) die("duplicate id %ld", all[i]);
  char metric[64];
  snprintf(metric, sizeof metric, "id_%s_w%d", A.mode, A.workers);
  emit(metric, rnd, total, secs, 0, NULL);
  for (int i = 0; i < A.workers; i++) zk_close(ws[i].c);
  delete_tree(setup->zh, base);
  zk_close(setup);
  free(ws);
  free(all);
}

/* ------------------------------------------------------------------ one op kind (paired runs) */

enum opkind { OP_GET, OP_EXISTS, OP_SET, OP_CREATE_DELETE, OP_AGET, OP_ACREATE, OP_GET_HOP };

static enum opkind parse_op(const char *op) {
  static const char *names[] = {"get",     "exists",  "set",    "create_delete",
                                "aget",    "acreate", "get_hop"};
  for (int i = 0; i < 7; i++)
    if (!strcmp(op, names[i])) return (enum opkind)i;
  die("unknown --op %s", op);
  return OP_GET;
}

/* A blocking get the way the Rust binding does it: zoo_aget, the completion (on the C
 * completion thread) copies the value and wakes the caller waiting on a condition
 * variable. zoo_get instead is woken straight from the IO thread: one hand-off fewer. */
struct hop {
  struct event ev;
  int rc, len;
  char buf[128];
};

static void hop_done(int rc, const char *value, int len, const struct Stat *stat,
                     const void *data) {
  struct hop *h = (struct hop *)data;
  (void)stat;
  h->rc = rc;
  h->len = value && len > 0 ? (len < (int)sizeof h->buf ? len : (int)sizeof h->buf) : 0;
  if (h->len) memcpy(h->buf, value, h->len);
  event_set(&h->ev);
}

/* `n` operations of one kind on `paths`: sync ones one after another, the pipelined ones
 * with at most A.window in flight. */
static void run_op(zhandle_t *zh, enum opkind k, char **paths, int n) {
  char buf[128];
  int len;
  struct Stat stat;
  switch (k) {
  case OP_GET:
    for (int i = 0; i < n; i++) {
      len = sizeof buf;
      check(zoo_get(zh, paths[i], 0, buf, &len, &stat), "get", paths[i]);
    }
    break;
  case OP_EXISTS:
    for (int i = 0; i < n; i++) check(zoo_exists(zh, paths[i], 0, &stat), "exists", paths[i]);
    break;
  case OP_SET:
    for (int i = 0; i < n; i++) check(zoo_set(zh, paths[i], DATA, DATA_LEN, -1), "set", paths[i]);
    break;
  case OP_CREATE_DELETE:
    for (int i = 0; i < n; i++) {
      check(zoo_create(zh, paths[i], DATA, DATA_LEN, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), "create",
            paths[i]);
      check(zoo_delete(zh, paths[i], -1), "delete", paths[i]);
    }
    break;
  case OP_AGET: pipelined(zh, paths, n, A_GET, A.window); break;
  case OP_ACREATE:
    pipelined(zh, paths, n, A.reps > 1 ? A_CREATE_REPEATABLE : A_CREATE, A.window);
    break;
  case OP_GET_HOP: {
    struct hop h;
    event_init(&h.ev);
    for (int i = 0; i < n; i++) {
      check(zoo_aget(zh, paths[i], 0, hop_done, &h), "aget", paths[i]);
      event_wait(&h.ev);
      check(h.rc, "get (via aget)", paths[i]);
    }
    break;
  }
  }
}

/* One op kind, timed alone in its own process: setup (the nodes it reads or writes) and a
 * warm-up on other nodes are untimed; the timed phase reports this process's CPU time
 * and context switches (all threads: the caller and both C client threads). --reps R
 * repeats the timed phase on the same nodes (profilers subtract a 1-rep run from an R-rep
 * run to get the cost of the ops alone). Pipelined creates under --reps R > 1 are
 * ephemeral sequential: the same paths serve every repetition and the nodes go with the
 * session, so no work in the process grows with R but the creates themselves. */
static void scenario_op(int rnd, const char *base) {
  enum opkind k = parse_op(A.op);
  struct conn *c = zk_connect();
  char wbase[600], metric[64], extra[160];
  snprintf(wbase, sizeof wbase, "%s/warm", base);
  ensure_path(c->zh, wbase);
  int warm = A.n / 5 < 1000 ? A.n / 5 : 1000;
  if (warm < 1) warm = 1;
  char **paths = node_paths(base, A.n), **wpaths = node_paths(wbase, warm);
  int existing = k != OP_CREATE_DELETE && k != OP_ACREATE;
  if (existing) {
    pipelined(c->zh, paths, A.n, A_CREATE, 1000);
    pipelined(c->zh, wpaths, warm, A_CREATE, 1000);
  }
  run_op(c->zh, k, wpaths, warm);
  struct usage u0 = usage_now();
  double t = now();
  for (int r = 0; r < A.reps; r++) run_op(c->zh, k, paths, A.n);
  double secs = now() - t;
  usage_since(u0, extra, sizeof extra);
  snprintf(metric, sizeof metric, "op_%s", A.op);
  emit(metric, rnd, (long)A.n * A.reps, secs, 0, extra);
  if (k == OP_ACREATE && A.reps > 1) {
    /* The ephemerals end with the session; what is left is base and its warm. */
    zk_close(c);
    c = zk_connect();
    delete_tree(c->zh, base);
    free_paths(paths, A.n);
    free_paths(wpaths, warm);
    zk_close(c);
    return;
  }
  if (k != OP_CREATE_DELETE) {
    pipelined(c->zh, paths, A.n, A_DELETE, 1000);
    pipelined(c->zh, wpaths, warm, A_DELETE, 1000);
  }
  delete_tree(c->zh, base);
  free_paths(paths, A.n);
  free_paths(wpaths, warm);
  zk_close(c);
}

/* ------------------------------------------------------------------ cost against armed watches */

static void never_fires(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh; (void)type; (void)state; (void)path; (void)ctx;
}

static void exists_done(int rc, const struct Stat *stat, const void *data) {
  (void)stat;
  window_done((struct window *)data, rc == ZNONODE ? ZOK : rc);
}

/* Arms A.watches exists-watches on absent nodes (they never fire), then times sync gets
 * and pipelined gets (A.window in flight) on other nodes. */
static void scenario_watchscale(int rnd, const char *base) {
  struct conn *c = zk_connect();
  ensure_path(c->zh, base);
  char abase[600], extra[256];
  snprintf(abase, sizeof abase, "%s/absent", base);
  char **paths = node_paths(base, A.n);
  int k = A.watches;
  char **absent = k > 0 ? node_paths(abase, k) : NULL;
  pipelined(c->zh, paths, A.n, A_CREATE, 1000);
  struct window w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 1000, 0};
  for (int i = 0; i < k; i++) {
    window_acquire(&w);
    check(zoo_awexists(c->zh, absent[i], never_fires, NULL, exists_done, &w), "awexists",
          absent[i]);
  }
  window_drain(&w);
  if (w.errors) die("%ld exists-watch registrations failed", w.errors);
  run_op(c->zh, OP_GET, paths, A.n < 500 ? A.n : 500); /* warm-up */
  struct usage u0 = usage_now();
  double t = now();
  run_op(c->zh, OP_GET, paths, A.n);
  double secs = now() - t;
  usage_since(u0, extra, sizeof extra);
  emit("ws_get", rnd, A.n, secs, 0, extra);
  u0 = usage_now();
  t = now();
  run_op(c->zh, OP_AGET, paths, A.n);
  secs = now() - t;
  usage_since(u0, extra, sizeof extra);
  size_t len = strlen(extra);
  snprintf(extra + len, sizeof extra - len, " rss_kb=%ld", status_kb("VmRSS:"));
  emit("ws_aget", rnd, A.n, secs, 0, extra);
  pipelined(c->zh, paths, A.n, A_DELETE, 1000);
  delete_tree(c->zh, base);
  free_paths(paths, A.n);
  if (absent) free_paths(absent, k);
  zk_close(c); /* frees the armed watches */
}

/* ------------------------------------------------------------------ memory per session */

/* Opens A.n sessions (each connected and having answered one exists), reports RSS before
 * and after, then closes them. */
static void scenario_sessions(int rnd, const char *base) {
  (void)base;
  long rss0 = status_kb("VmRSS:");
  struct conn **cs = malloc(sizeof *cs * A.n);
  struct Stat stat;
  double t = now();
  for (int i = 0; i < A.n; i++) {
    cs[i] = zk_connect();
    check(zoo_exists(cs[i]->zh, "/", 0, &stat), "exists", "/");
  }
  double secs = now() - t;
  char extra[160];
  snprintf(extra, sizeof extra, "rss0_kb=%ld rss_kb=%ld threads=%ld", rss0, status_kb("VmRSS:"),
           status_kb("Threads:"));
  emit("sessions", rnd, A.n, secs, 0, extra);
  for (int i = 0; i < A.n; i++) zk_close(cs[i]);
  free(cs);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  static struct option opts[] = {
      {"hosts", required_argument, 0, 'h'},  {"scenario", required_argument, 0, 's'},
      {"rounds", required_argument, 0, 'r'}, {"n", required_argument, 0, 'n'},
      {"window", required_argument, 0, 'w'}, {"workers", required_argument, 0, 'k'},
      {"batch", required_argument, 0, 'b'},  {"mode", required_argument, 0, 'm'},
      {"prefix", required_argument, 0, 'p'}, {"op", required_argument, 0, 'o'},
      {"watches", required_argument, 0, 'W'}, {"reps", required_argument, 0, 'R'},
      {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'h': A.hosts = optarg; break;
    case 's': A.scenario = optarg; break;
    case 'r': A.rounds = atoi(optarg); break;
    case 'n': A.n = atoi(optarg); break;
    case 'w': A.window = atoi(optarg); break;
    case 'k': A.workers = atoi(optarg); break;
    case 'b': A.batch = atoi(optarg); break;
    case 'm': A.mode = optarg; break;
    case 'p': A.prefix = optarg; break;
    case 'o': A.op = optarg; break;
    case 'W': A.watches = atoi(optarg); break;
    case 'R': A.reps = atoi(optarg); break;
    default: die("bad arguments");
    }
  }
  if (!A.hosts || !A.scenario) die("--hosts and --scenario are required");
  if (A.n < 1 || A.window < 1 || A.workers < 1 || A.batch < 1 || A.rounds < 1 || A.watches < 0 ||
      A.reps < 1)
    die("--n, --window, --workers, --batch, --rounds must be positive");
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  void (*fn)(int, const char *) = NULL;
  if (!strcmp(A.scenario, "sync")) fn = scenario_sync;
  else if (!strcmp(A.scenario, "async")) fn = scenario_async;
  else if (!strcmp(A.scenario, "watch")) fn = scenario_watch;
  else if (!strcmp(A.scenario, "queue")) fn = scenario_queue;
  else if (!strcmp(A.scenario, "lock")) fn = scenario_lock;
  else if (!strcmp(A.scenario, "idgen")) fn = scenario_idgen;
  else if (!strcmp(A.scenario, "op")) fn = scenario_op;
  else if (!strcmp(A.scenario, "watchscale")) fn = scenario_watchscale;
  else if (!strcmp(A.scenario, "sessions")) fn = scenario_sessions;
  else die("unknown scenario %s", A.scenario);
  for (int r = 0; r < A.rounds; r++) {
    char base[512];
    snprintf(base, sizeof base, "%s/c-%d-%s-r%d", A.prefix, (int)getpid(), A.scenario, r);
    fn(r, base);
  }
  printf("RSS peak_kb=%ld\n", status_kb("VmHWM:"));
  return 0;
}
