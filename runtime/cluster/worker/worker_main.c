/*
 * worker_main.c — the whole life of a worker process of a multi-node run
 * (--sflow-worker SPEC): it checks the executable it runs, connects back
 * to the head, proves the run's secret, says hello and serves the head's
 * frames until told to stop.
 *
 * Key design choice: workers cannot outlive the head.  A worker exits when
 * told to (SHUTDOWN), when its control connection closes, when the head is
 * silent too long, or when its stdin (the SSH channel) reaches end of file,
 * so a SIGKILLed head leaves nothing behind: the kernel closes its sockets.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "worker_internal.h"

/* A worker's handshake with the head.  The head answers once every node
 * has started (launch.c), which one slow node (a copy over a slow link, a
 * loaded host, a worker that stays silent for --connect-timeout) delays:
 * with 5 s here the healthy nodes gave up first and were named as the
 * ones that failed.  A head that goes away ends the wait sooner (its
 * connection closes, or its SSH session and so PR_SET_PDEATHSIG). */
#define AUTH_TIMEOUT_MS 120000
#define DIAL_TIMEOUT_S 10 /* a worker connecting back to the head */

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

typedef struct worker {
  sf__conn conn;
  pthread_mutex_t send_mu;
  uint8_t secret[SF__SECRET_LEN];
  int data_fd;
  uint32_t node;
  /* the group job running on its own thread (one at a time) */
  pthread_t group_thread;
  bool group_running;
  uint64_t group;
  uint32_t rank, size, iters, dtype;
  uint64_t count;
  sf__peer *peers;
} worker;

/* Frames waiting to be written, in order: small ones encoded into the
 * tail's buffer, each pre-encoded one (a checkpoint) in a piece of its own.
 * Whoever finds nobody writing writes them all, so results finishing
 * together leave in one write; nobody encodes a large frame under
 * send_mu, which the control loop's heartbeat answers need.  The loop
 * itself never writes a pre-encoded piece: it stops before one, and the
 * thread that queued it (waiting in sf__worker_send_encoded) writes it,
 * so the loop reads on while hundreds of MB go out. */
typedef struct wseg {
  struct wseg *next;
  sf__wbuf b;
  bool sealed; /* pre-encoded: nothing is appended to it */
} wseg;
static wseg *w_q, *w_q_tail, *w_q_spare;
static bool w_flushing;
static pthread_cond_t w_idle = PTHREAD_COND_INITIALIZER; /* w_flushing went false */
static _Thread_local bool on_loop; /* the control loop's thread */

static wseg *wq_push(bool sealed) {
  wseg *s = w_q_spare && !sealed ? w_q_spare : calloc(1, sizeof *s);
  if (!s)
    return NULL;
  if (s == w_q_spare)
    w_q_spare = NULL;
  s->next = NULL;
  s->sealed = sealed;
  if (w_q_tail)
    w_q_tail->next = s;
  else
    w_q = s;
  w_q_tail = s;
  return s;
}

/* Writes the queue out; the caller holds send_mu and nobody else writes. */
static void wq_flush(worker *w) {
  w_flushing = true;
  while (w_q && !(on_loop && w_q->sealed)) {
    wseg *s = w_q;
    w_q = s->next;
    if (!w_q)
      w_q_tail = NULL;
    pthread_mutex_unlock(&w->send_mu);
    /* A lost head: the loop sees it. */
    (void)sf__write_all(w->conn.fd, (const char *)s->b.p, s->b.n);
    pthread_mutex_lock(&w->send_mu);
    if (!s->sealed && !w_q_spare) { /* small frames' buffer: kept for the next */
      s->b.n = 0;
      w_q_spare = s;
    } else {
      sf__wbuf_free(&s->b);
      free(s);
    }
  }
  w_flushing = false;
  pthread_cond_broadcast(&w_idle);
}

static void worker_send(worker *w, const sf__frame *f) {
  pthread_mutex_lock(&w->send_mu);
  wseg *s = w_q_tail && !w_q_tail->sealed ? w_q_tail : wq_push(false);
  if (!s || sf__wire_encode(&s->b, f) || w_flushing) {
    pthread_mutex_unlock(&w->send_mu);
    return;
  }
  wq_flush(w);
  pthread_mutex_unlock(&w->send_mu);
}

static worker *W; /* this process's worker, for sf__worker_send_frame */

int sf__worker_data_fd(void) { return W ? W->data_fd : -1; }
const uint8_t *sf__worker_secret(void) { return W ? W->secret : NULL; }

void sf__worker_send_frame(const sf__frame *f) {
  if (W)
    worker_send(W, f);
}

void sf__worker_send_encoded(sf__wbuf *b) {
  if (!W || !b->n) {
    sf__wbuf_free(b);
    return;
  }
  pthread_mutex_lock(&W->send_mu);
  wseg *s = wq_push(true);
  if (s) {
    s->b = *b;
    *b = (sf__wbuf){0};
    while (w_flushing) /* the loop stops before it; another writer takes it */
      pthread_cond_wait(&w_idle, &W->send_mu);
    if (w_q) /* empty: another writer wrote it */
      wq_flush(W);
  }
  pthread_mutex_unlock(&W->send_mu);
  sf__wbuf_free(b); /* not queued: out of memory */
}

/* The selftest pattern: member r holds (r+1)*(i%1024+1), so the sum is
 * size*(size+1)/2*(i%1024+1), exact in every type for groups up to 64. */
static void fill(void *buf, uint64_t count, sf__dtype t, uint32_t rank) {
  for (uint64_t i = 0; i < count; i++) {
    double v = (double)(rank + 1) * (double)(i % 1024 + 1);
    switch (t) {
    case SF__DT_F32: ((float *)buf)[i] = (float)v; break;
    case SF__DT_F64: ((double *)buf)[i] = v; break;
    case SF__DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
  }
}

static int64_t check(const void *buf, uint64_t count, sf__dtype t, uint32_t size) {
  double k = (double)size * (size + 1) / 2.0;
  for (uint64_t i = 0; i < count; i++) {
    double want = k * (double)(i % 1024 + 1), got;
    switch (t) {
    case SF__DT_F32: got = ((const float *)buf)[i]; break;
    case SF__DT_F64: got = ((const double *)buf)[i]; break;
    case SF__DT_I32: got = ((const int32_t *)buf)[i]; break;
    default: got = (double)((const int64_t *)buf)[i]; break;
    }
    if (got != want)
      return (int64_t)i;
  }
  return -1;
}

static void *group_job(void *arg) {
  worker *w = arg;
  sf__frame done = {.type = SF__F_GROUP_DONE};
  done.u.group_done.group = w->group;
  done.u.group_done.rank = w->rank;
  char msg[256] = "";
  sf__ring ring;
  uint64_t elapsed = 0;
  bool ok = false;
  void *buf = NULL;
  if (sf__ring_connect(&ring, w->group, (int)w->rank, (int)w->size, w->peers, w->data_fd,
                       w->secret, 10000, msg, sizeof msg) == 0) {
    size_t es = sf__dtype_size((sf__dtype)w->dtype);
    buf = w->count ? malloc(w->count * es) : NULL;
    ok = !w->count || buf;
    if (!ok)
      snprintf(msg, sizeof msg, "out of memory for %llu elements", (unsigned long long)w->count);
    for (uint32_t it = 0; ok && w->count && it < w->iters; it++) {
      fill(buf, w->count, (sf__dtype)w->dtype, w->rank);
      /* Every member starts the timed call together, as the MPI side of
       * bench/cluster does (mpi_allreduce.c): a member's time is then the
       * collective's, not its wait for slower members to fill and check. */
      if (w->size > 1 && sf__ring_barrier(&ring, msg, sizeof msg)) {
        ok = false;
        break;
      }
      uint64_t t0 = now_ns();
      ok = sf__ring_allreduce(&ring, buf, w->count, (sf__dtype)w->dtype, SF__OP_SUM, msg,
                              sizeof msg) == 0;
      /* The first of several iterations warms up connections and pages. */
      if (it > 0 || w->iters == 1)
        elapsed += now_ns() - t0;
      int64_t bad = ok ? check(buf, w->count, (sf__dtype)w->dtype, w->size) : -1;
      if (bad >= 0) {
        snprintf(msg, sizeof msg, "rank %u: wrong sum at element %lld", w->rank, (long long)bad);
        ok = false;
      }
    }
    if (ok && w->size > 1)
      ok = sf__ring_barrier(&ring, msg, sizeof msg) == 0;
    sf__ring_close(&ring);
  }
  free(buf);
  done.u.group_done.ok = ok;
  done.u.group_done.elapsed_ns = elapsed;
  done.u.group_done.bytes = w->count * sf__dtype_size((sf__dtype)w->dtype);
  done.u.group_done.message = (sf__bytes){(const uint8_t *)msg, (uint32_t)strlen(msg)};
  worker_send(w, &done);
  return NULL;
}

static void start_group(worker *w, const sf__frame *f) {
  if (w->group_running) {
    pthread_join(w->group_thread, NULL);
    w->group_running = false;
  }
  free(w->peers);
  w->peers = calloc(f->u.group_setup.size, sizeof *w->peers);
  size_t off = 0;
  for (uint32_t i = 0; w->peers && i < f->u.group_setup.size; i++)
    sf__wire_peer(f->u.group_setup.peers, &off, w->peers[i].addr, sizeof w->peers[i].addr,
                  &w->peers[i].port);
  w->group = f->u.group_setup.group;
  w->rank = f->u.group_setup.rank;
  w->size = f->u.group_setup.size;
  w->count = f->u.group_setup.count;
  w->dtype = f->u.group_setup.dtype;
  w->iters = f->u.group_setup.iters;
  if (w->peers && !pthread_create(&w->group_thread, NULL, group_job, w))
    w->group_running = true;
}

/* "ID@ADDR:PORT" or "ID@[ADDR]:PORT". */
/* ID@ADDR:PORT[/HASH]: HASH (hex SHA-256) is what the head deployed, which
 * the worker checks its own executable against before anything else. */
static int parse_spec(const char *spec, uint32_t *id, char *addr, size_t an, char *port,
                      size_t pn, char *hash, size_t hn) {
  const char *at = strchr(spec, '@');
  if (!at)
    return -1;
  *id = (uint32_t)strtoul(spec, NULL, 10);
  const char *a = at + 1, *colon;
  if (*a == '[') {
    const char *close = strchr(a, ']');
    if (!close || close[1] != ':')
      return -1;
    snprintf(addr, an, "%.*s", (int)(close - a - 1), a + 1);
    colon = close + 1;
  } else {
    colon = strrchr(a, ':');
    if (!colon)
      return -1;
    snprintf(addr, an, "%.*s", (int)(colon - a), a);
  }
  const char *slash = strchr(colon + 1, '/');
  snprintf(port, pn, "%.*s", (int)(slash ? (size_t)(slash - colon - 1) : strlen(colon + 1)),
           colon + 1);
  snprintf(hash, hn, "%s", slash ? slash + 1 : "");
  if (*hash && strlen(hash) != 2 * SF__HASH_LEN)
    return -1;
  return *id ? 0 : -1;
}

/* Reads the secret line from stdin: 64 hex digits and a newline. */
static int read_secret(uint8_t secret[SF__SECRET_LEN]) {
  char line[2 * SF__SECRET_LEN + 1];
  size_t n = 0;
  int64_t deadline = sf__now_ms() + 30000;
  while (n < sizeof line) {
    struct pollfd pf = {0, POLLIN, 0};
    int left = (int)(deadline - sf__now_ms());
    if (left <= 0 || poll(&pf, 1, left) <= 0)
      return -1;
    ssize_t k = read(0, line + n, sizeof line - n);
    if (k <= 0) {
      if (k < 0 && errno == EINTR)
        continue;
      return -1;
    }
    n += (size_t)k;
  }
  bool ok = line[2 * SF__SECRET_LEN] == '\n' && sf__unhex(line, secret, SF__SECRET_LEN);
  memset(line, 0, sizeof line);
  return ok ? 0 : -1;
}

/* The head at addr:port (numeric: the address the head gave; else a
 * name a launcher gave, resolved here).  *refused (when not NULL) says
 * the head is not listening yet, or not reachable yet: worth another
 * try. */
static int dial_head(const char *addr, const char *port, bool numeric, bool *refused, char *err,
                     size_t errlen) {
  struct addrinfo hints = {.ai_flags = AI_NUMERICSERV | (numeric ? AI_NUMERICHOST : 0),
                           .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  int gr = getaddrinfo(addr, port, &hints, &ai);
  /* A name not there yet: a Kubernetes pod's DNS record appears when
   * the pod runs, and rank 0's may start after ours. */
  if (refused)
    *refused = gr == EAI_AGAIN || gr == EAI_NONAME || gr == EAI_FAIL;
  if (gr) {
    snprintf(err, errlen, "bad head address %s:%s%s%s", addr, port, numeric ? "" : ": ",
             numeric ? "" : gai_strerror(gr));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct timeval tv = {DIAL_TIMEOUT_S, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen)) {
    /* SO_SNDTIMEO bounds connect too; when it runs out (a firewall that
     * drops, a cut link) Linux says EINPROGRESS, which would read as
     * nonsense in the message. */
    int e = errno;
    if (refused)
      *refused = e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH ||
                 e == EINPROGRESS || e == EAGAIN || e == ETIMEDOUT;
    char why[64];
    snprintf(why, sizeof why, "no answer within %d s", DIAL_TIMEOUT_S);
    snprintf(err, errlen, "cannot connect to the head at %s:%s: %s", addr, port,
             e == EINPROGRESS || e == EAGAIN ? why : strerror(e));
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    return -1;
  }
  freeaddrinfo(ai);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static void worker_hello(worker *w, const char *data_addr, uint16_t data_port,
                         uint16_t obj_port, const uint8_t hash[SF__HASH_LEN]) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  sf__frame f = {.type = SF__F_HELLO};
  f.u.hello.pid = (uint32_t)getpid();
  /* Its slots: --threads when given (a launched rank's CPU share). */
  f.u.hello.cpus = (uint32_t)(sf__options.threads > 0 ? sf__options.threads
                                                      : sysconf(_SC_NPROCESSORS_ONLN));
  f.u.hello.gpus = (uint32_t)sf__gpu_devices(); /* the head's hostfile gpus=N wins */
  f.u.hello.data_port = data_port;
  f.u.hello.obj_port = obj_port;
  f.u.hello.host = (sf__bytes){(const uint8_t *)host, (uint32_t)strlen(host)};
  f.u.hello.data_addr = (sf__bytes){(const uint8_t *)data_addr, (uint32_t)strlen(data_addr)};
  memcpy(f.u.hello.exe_hash, hash, SF__HASH_LEN);
  worker_send(w, &f);
}

/* Serves the head until shutdown or until the head is gone. */
/* watch_stdin: stdin is the head's SSH channel (a launched rank's stdin
 * is the launcher's, often /dev/null). */
static int worker_loop(worker *w, bool watch_stdin) {
  int64_t last_rx = sf__now_ms();
  char err[256];
  on_loop = true;
  for (;;) {
    struct pollfd pf[2] = {{w->conn.fd, POLLIN, 0}, {0, POLLIN, 0}};
    poll(pf, watch_stdin ? 2 : 1, 250);
    if (watch_stdin && pf[1].revents) {
      char buf[256];
      ssize_t k = read(0, buf, sizeof buf);
      if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) {
        if (sf__options.cluster_log)
          sf__cluster_note("sflow worker %u: the head's SSH session ended; exiting", w->node);
        return SF__EXIT_NODES;
      }
    }
    if (pf[0].revents) {
      /* A frame still arriving counts as the head's sign of life. */
      size_t before = w->conn.rx_n;
      int r = sf__conn_fill(&w->conn);
      if (w->conn.rx_n > before)
        last_rx = sf__now_ms();
      sf__frame f;
      int k;
      while ((k = sf__conn_next(&w->conn, &f, err, sizeof err)) == 1) {
        last_rx = sf__now_ms();
        switch (f.type) {
        case SF__F_HEARTBEAT: {
          sf__frame c = {.type = SF__F_CLOCK};
          c.u.clock.seq = f.u.heartbeat.seq;
          c.u.clock.head_ns = f.u.heartbeat.time_ns;
          c.u.clock.worker_ns = sf__trace_clock_ns();
          worker_send(w, &c);
          break;
        }
        case SF__F_SHUTDOWN:
          sf__trace_ship(); /* the last events, while the head still reads */
          sf__metrics_ship(true);
          return (int)f.u.shutdown.code;
        case SF__F_GROUP_SETUP: start_group(w, &f); break;
        case SF__F_TASK_SUBMIT: sf__remote_worker_submit(&f); break;
        case SF__F_OBJECT: sf__remote_worker_object(&f); break;
        case SF__F_ACTOR_CREATE:
        case SF__F_ACTOR_CALL:
        case SF__F_ACTOR_STOP: sf__ractor_worker_take(&w->conn); break;
        default: break;
        }
      }
      if (k < 0) {
        sf__cluster_note("sflow worker %u: %s from the head; exiting", w->node, err);
        return SF__EXIT_NODES;
      }
      if (r <= 0) {
        if (sf__options.cluster_log)
          sf__cluster_note("sflow worker %u: the head closed the control connection; exiting",
                           w->node);
        return SF__EXIT_NODES;
      }
    }
    sf__trace_ship(); /* events of work still running, at most 250 ms old */
    sf__metrics_ship(false); /* --metrics-port on the head: each second */
    if (sf__now_ms() - last_rx > SF__HEARTBEAT_TIMEOUT_MS) {
      sf__cluster_note("sflow worker %u: no heartbeat from the head for %.1f s; exiting", w->node,
                       (double)(sf__now_ms() - last_rx) / 1000.0);
      return SF__EXIT_NODES;
    }
  }
}

/* Into the head's folder (--sflow-cwd), when this host has it; else the
 * worker stays in its login folder and says so (its stderr reaches the
 * head). */
static void worker_chdir(unsigned node) {
  const char *hex = sf__options.worker_cwd;
  if (!hex)
    return;
  size_t n = strlen(hex) / 2;
  char dir[SF__CWD_MAX + 1];
  if (strlen(hex) % 2 || n > SF__CWD_MAX || !sf__unhex(hex, (uint8_t *)dir, n) ||
      memchr(dir, 0, n)) {
    sf__cluster_note("sflow worker %u: bad --sflow-cwd; staying in the login folder", node);
    return;
  }
  dir[n] = '\0';
  if (chdir(dir))
    sf__cluster_note(
        "sflow worker %u: no folder %s on this host (%s); relative paths start from the "
        "login folder",
        node, dir, strerror(errno));
}

/* A worker connected to the head (fd): proves the secret, listens for
 * the data plane and objects, says hello and serves until told to stop. */
static int serve(worker *w, int fd, const uint8_t hash[SF__HASH_LEN], bool watch_stdin) {
  char err[512];
  sf__conn_init(&w->conn, fd);
  if (sf__auth_worker(&w->conn, w->secret, w->node, AUTH_TIMEOUT_MS, err, sizeof err)) {
    sf__cluster_note("sflow worker %u: %s", w->node, err);
    sf__conn_close(&w->conn);
    return SF__EXIT_NODES;
  }
  /* The data plane listens on the address the head reached us by. */
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char local[64];
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  sf__addr_str((struct sockaddr *)&ss, sl, local, sizeof local, NULL);
  uint16_t dport = 0;
  w->data_fd = sf__ring_listen(local, &dport, err, sizeof err);
  if (w->data_fd < 0)
    sf__cluster_note("sflow worker %u: %s (group collectives unavailable)", w->node, err);
  /* A second listener for the object store: the ring accepts on its own
   * one synchronously during group set-up, so they must not share. */
  uint16_t oport = 0;
  int obj_fd = sf__ring_listen(local, &oport, err, sizeof err);
  if (obj_fd < 0)
    sf__cluster_note("sflow worker %u: %s (objects go through the head)", w->node, err);
  sf__node_id = w->node;
  W = w;
  if (sf__options.worker_trace)
    sf__trace_worker_begin();
  sf__remote_worker_start();
  if (obj_fd >= 0)
    sf__remote_objects_listen(obj_fd); /* its thread owns obj_fd for the process's life */
  worker_hello(w, local, dport, obj_fd >= 0 ? oport : 0, hash);
  int rc = worker_loop(w, watch_stdin);
  if (w->group_running) {
    /* A collective still running is bounded by its ring timeout. */
    pthread_join(w->group_thread, NULL);
  }
  sf__conn_close(&w->conn);
  if (w->data_fd >= 0)
    close(w->data_fd);
  memset(w->secret, 0, sizeof w->secret);
  return rc;
}

int sf__worker_main(const char *spec) {
  /* If the SSH session process above us goes, so do we. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  static worker w;
  w.data_fd = -1;
  pthread_mutex_init(&w.send_mu, NULL);
  char addr[64], port[16], err[512], want[2 * SF__HASH_LEN + 2];
  if (parse_spec(spec, &w.node, addr, sizeof addr, port, sizeof port, want, sizeof want)) {
    sf__cluster_note("sflow worker: bad --sflow-worker '%s' (expected ID@ADDR:PORT[/SHA256])",
                     spec);
    return SF__EXIT_USAGE;
  }
  /* Before anything else: is this file the executable the head deployed?
   * A cached copy damaged in place (same name, same size) says so on
   * stdout, which the head reads before it waits for us, and the head
   * copies it again. */
  uint8_t hash[SF__HASH_LEN] = {0};
  char hex[2 * SF__HASH_LEN + 1] = "";
  if (sf__sha256_file("/proc/self/exe", hash, err, sizeof err))
    sf__cluster_note("sflow worker %u: %s", w.node, err);
  else
    sf__hex(hash, SF__HASH_LEN, hex);
  if (*want) {
    char line[2 * SF__HASH_LEN + 32];
    bool same = !strcmp(want, hex);
    int k = snprintf(line, sizeof line, "%s %s\n", same ? SF__EXE_OK : SF__EXE_DAMAGED,
                     *hex ? hex : "unreadable");
    (void)sf__write_all(1, line, (size_t)k);
    if (!same)
      return SF__EXIT_EXE_DAMAGED;
  }
  if (read_secret(w.secret)) {
    sf__cluster_note("sflow worker %u: no secret on stdin", w.node);
    return SF__EXIT_NODES;
  }
  worker_chdir(w.node);
  int fd = dial_head(addr, port, true, NULL, err, sizeof err);
  if (fd < 0) {
    sf__cluster_note("sflow worker %u: %s", w.node, err);
    return SF__EXIT_NODES;
  }
  return serve(&w, fd, hash, true);
}

/* A launched rank dials rank 0, which the launcher started at the same
 * time: "connection refused" (not listening yet) and a rendezvous file
 * not written yet are tried again, after 5 ms, doubling to 100 ms, until
 * the bound (rank 0 is usually listening within tens of ms). */
static int dial_launched(const sf__launch *L, int64_t deadline, char *err, size_t errlen) {
  long wait_ms = 5;
  for (;;) {
    char host[256], port[16];
    unsigned p = L->port;
    int lr = 0;
    snprintf(host, sizeof host, "%s", L->host);
    if (L->rdv[0])
      lr = sf__launch_lookup(L, host, sizeof host, &p, err, errlen);
    if (lr < 0)
      return -1;
    bool again = lr == 1;
    if (lr == 1)
      snprintf(err, errlen, "rank 0 has not published its address in %s", L->rdv);
    else {
      snprintf(port, sizeof port, "%u", p);
      int fd = dial_head(host, port, false, &again, err, errlen);
      if (fd >= 0)
        return fd;
    }
    if (!again || sf__now_ms() > deadline)
      return -1;
    struct timespec ts = {0, wait_ms * 1000000L};
    nanosleep(&ts, NULL);
    wait_ms = wait_ms * 2 > 100 ? 100 : wait_ms * 2;
  }
}

static void exit_tempfail(int sig) {
  (void)sig;
  _exit(75); /* EX_TEMPFAIL: requeue and --resume */
}

int sf__worker_launched(void) {
  const sf__launch *L = &sf__launched;
  /* If the launcher's daemon above us goes, so do we. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  /* scancel --signal=TERM and a time limit's warning reach every rank at
   * once: rank 0 syncs its journal and exits 75 (journal.c, "stop
   * signals"), and a worker's state is rebuilt by the head's --resume, so
   * a rank exits 75 too, never with a different failure for srun to
   * report. */
  signal(SIGTERM, exit_tempfail);
  signal(SIGUSR1, exit_tempfail);
  static worker w;
  w.data_fd = -1;
  w.node = (uint32_t)L->rank;
  memcpy(w.secret, L->key, sizeof w.secret);
  pthread_mutex_init(&w.send_mu, NULL);
  char err[1400];
  uint8_t hash[SF__HASH_LEN] = {0}; /* the head refuses a rank running another executable */
  if (sf__sha256_file("/proc/self/exe", hash, err, sizeof err))
    sf__cluster_note("sflow worker %u: %s", w.node, err);
  int64_t deadline = sf__now_ms() + (sf__options.connect_timeout + 50) * 1000;
  int fd = dial_launched(L, deadline, err, sizeof err);
  if (fd < 0) {
    sf__cluster_note("sflow worker %u (%s rank %d of %d): %s", w.node, L->engine, L->rank,
                     L->size, err);
    return SF__EXIT_NODES;
  }
  return serve(&w, fd, hash, false);
}
