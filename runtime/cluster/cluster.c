/*
 * cluster.c — a multi-node run: the head starts workers on every host of
 * --nodes and keeps a control connection to each; a worker process serves
 * its head until told to stop or until the head disappears.
 *
 * Head start-up, in parallel for all hosts (one thread per host, so 32
 * hosts start in about the time of one): SSH connect, host key check and
 * authentication (ssh.c); whether the host can run this executable
 * (architecture, glibc, CPU features: hostcheck.c); a listener on the head's address of that SSH
 * connection (only the interfaces the workers reach us by, never
 * INADDR_ANY); SFTP deployment of this executable by content hash; exec in
 * worker mode with a fresh 256-bit secret on the channel's stdin.  The
 * worker first hashes the file it runs and says on stdout whether it is
 * ours: a damaged cached copy is copied again, once.  Then every worker
 * connects back, passes the HMAC challenge (wire.c), and sends HELLO with
 * that hash, which must equal ours.  Connections not yet authenticated are
 * "greeters", read without blocking beside the nodes, bounded in number,
 * size (wire.c reads only handshake frames) and time.
 *
 * After start-up one control thread owns every socket and SSH session: it
 * sends heartbeats, declares a node lost when its connection closes or it
 * is silent for SF__HEARTBEAT_TIMEOUT_MS, forwards worker stderr, refuses
 * (and logs) strangers, and collects group results.
 *
 * Key design choice: workers cannot outlive the head.  A worker exits when
 * told to (SHUTDOWN), when its control connection closes, when the head is
 * silent too long, or when its stdin (the SSH channel) reaches end of file,
 * so a SIGKILLed head leaves nothing behind: the kernel closes its sockets.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

#define MAX_LISTEN 16
#define AUTH_TIMEOUT_MS 5000 /* a worker's handshake with the head */
/* Connections to the control plane that have not authenticated yet: at
 * most this many at once, each dropped when it has not proved the secret
 * and said hello within PREAUTH_TIMEOUT_MS. */
#define PREAUTH_MAX 64
#define PREAUTH_TIMEOUT_MS 5000
#define DIAL_TIMEOUT_S 10 /* a worker connecting back to the head */

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Numeric "addr" and port of a socket address. */
static void addr_str(const struct sockaddr *sa, socklen_t sl, char *host, size_t hn,
                     uint16_t *port) {
  char serv[16] = "0";
  if (getnameinfo(sa, sl, host, (socklen_t)hn, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV))
    snprintf(host, hn, "?");
  if (port)
    *port = (uint16_t)atoi(serv);
}

static void peer_str(int fd, char *buf, size_t n) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[64] = "?";
  uint16_t port = 0;
  if (!getpeername(fd, (struct sockaddr *)&ss, &sl))
    addr_str((struct sockaddr *)&ss, sl, host, sizeof host, &port);
  snprintf(buf, n, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (k < 0)
    return;
  if ((size_t)k > sizeof line - 2)
    k = (int)sizeof line - 2;
  line[k++] = '\n';
  sf__out_write(2, line, (size_t)k); /* on the head: clear of the progress line */
}

/* ================================================================ head */

typedef struct node {
  const sf__host *host;
  sf__ssh_target target; /* where and how to connect (sshconfig.c) */
  char label[300];    /* the host as written ("gpu1", "[127.0.0.2]:2222") */
  sf__ssh *ssh;
  sf__conn conn;      /* control connection; fd -1 until authenticated */
  sf__wbuf out;       /* frames not yet written (out.p[out_off..out.n)) */
  size_t out_off;
  bool ready, alive, lost;
  bool ssh_open;
  uint32_t pid, cpus, gpus;
  char data_addr[64];
  uint16_t data_port, obj_port; /* group rings; the object store (remote.c) */
  char hostname[256];
  int64_t last_rx;
  /* Clock alignment (sf__cluster_clock): the best sample so far. */
  int64_t clock_off;
  uint64_t clock_rtt;
  int clock_n;
  bool copied;
  int64_t connect_ms;        /* phase 1: TCP + handshake + authentication */
  int64_t check_ms;          /* phase 2: listener, start of the command, host check */
  char path[1200];           /* the executable's copy on the host */
  char cmd[4096 + 512];      /* the host check, then the worker (check_host) */
  double start_s;     /* seconds from the run's start to HELLO */
  char error[768];    /* start-up failure */
  char listen_addr[64];
  /* the current group operation */
  bool group_done, group_ok;
  uint64_t group_ns;
  char group_msg[256];
} node;

/* A connection to the control plane before it has authenticated and
 * said hello.  The control thread reads greeters without blocking, beside
 * the nodes, so one that says nothing holds up neither the accept loop
 * nor anyone else; until the handshake passes its connection reads only
 * handshake frames (wire.c), so a stranger costs a few hundred bytes
 * whatever length it claims. */
typedef struct greeter {
  sf__conn conn;
  int64_t deadline;
  uint8_t nonce[32];  /* the challenge sent */
  uint32_t node;      /* the node it proved to be, 0 before the auth frame */
  char who[96];       /* peer address, for messages */
} greeter;

/* The head's working directory goes to the workers, hex-encoded (no
 * quoting), when it is at most this long. */
#define CWD_MAX 1024

static struct {
  bool started;
  sf__hostlist hosts;
  node *nodes; /* nodes[i] is node id i + 1 */
  int n;
  uint8_t secret[SF__SECRET_LEN];
  uint8_t exe_hash[SF__HASH_LEN];
  char exe_hex[2 * SF__HASH_LEN + 1];
  char exe_path[PATH_MAX];
  char cwd_arg[2 * CWD_MAX + 16]; /* " --sflow-cwd HEX", or "" */
  sf__ssh_opts ssh;
  int listen_fd[MAX_LISTEN];
  char listen_addr[MAX_LISTEN][64];
  int nlisten;
  greeter greet[PREAUTH_MAX]; /* conn.fd -1: a free slot */
  uint16_t port;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  _Atomic bool thread_running; /* set before the control thread starts */
  bool stopping;
  int wake[2];
  sf__node_lost_fn lost_fn;
  int lost_count;
  uint64_t group_seq;
  int64_t t0;
  unsigned master_port; /* MASTER_PORT for the users' own rendezvous */
} H = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .wake = {-1, -1}};

static bool logging(void) { return sf__options.cluster_log; }

/* A listener on the numeric address addr (the head's side of an SSH
 * connection); all listeners share one port when the kernel allows. */
static int listener_for(const char *addr, char *err, size_t errlen) {
  for (int i = 0; i < H.nlisten; i++)
    if (!strcmp(H.listen_addr[i], addr))
      return 0;
  if (H.nlisten == MAX_LISTEN) {
    snprintf(err, errlen, "more than %d local addresses", MAX_LISTEN);
    return -1;
  }
  char port[8];
  snprintf(port, sizeof port, "%u", H.port);
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(addr, port, &hints, &ai)) {
    snprintf(err, errlen, "bad local address %s", addr);
    return -1;
  }
  /* Non-blocking: the control thread accepts until none is waiting. */
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = fd < 0 ? -1 : bind(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc && H.port && fd >= 0) { /* that port is taken on this address: any */
    ((struct sockaddr_in *)ai->ai_addr)->sin_port = 0;
    rc = bind(fd, ai->ai_addr, ai->ai_addrlen);
  }
  freeaddrinfo(ai);
  if (rc || listen(fd, 256)) {
    snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  char host[64];
  uint16_t p = 0;
  addr_str((struct sockaddr *)&ss, sl, host, sizeof host, &p);
  if (!H.port)
    H.port = p;
  H.listen_fd[H.nlisten] = fd;
  snprintf(H.listen_addr[H.nlisten], 64, "%s", addr);
  H.nlisten++;
  if (logging())
    note("sflow: control plane listening on %s%s%s:%u", strchr(addr, ':') ? "[" : "", addr,
         strchr(addr, ':') ? "]" : "", p);
  return 0;
}

static uint16_t listener_port(const char *addr) {
  for (int i = 0; i < H.nlisten; i++)
    if (!strcmp(H.listen_addr[i], addr)) {
      struct sockaddr_storage ss;
      socklen_t sl = sizeof ss;
      uint16_t p = 0;
      char host[64];
      getsockname(H.listen_fd[i], (struct sockaddr *)&ss, &sl);
      addr_str((struct sockaddr *)&ss, sl, host, sizeof host, &p);
      return p;
    }
  return 0;
}

/* Start-up phase 1, one thread per host: TCP connect, host key check and
 * authentication.  Nothing is run, copied or started anywhere until every
 * host has passed this, so one refused host key starts no session
 * elsewhere. */
static void *connect_host(void *arg) {
  node *nd = arg;
  int64_t t0 = now_ms();
  if (sf__ssh_connect(&nd->target, &H.ssh, &nd->ssh, nd->error, sizeof nd->error) == 0)
    nd->connect_ms = now_ms() - t0;
  return NULL;
}

/* The worker's command line after `env` (arguments for the outer shell):
 * torchrun's names (docs/cluster.md, "Environment"), given by env(1) so
 * that they are in the worker's environment from exec on: no setenv
 * beside threads, and /proc/PID/environ shows what the worker got.
 * MASTER_ADDR is the head's address this worker dials; MASTER_PORT is left
 * free for the user's own rendezvous (not sflow's control port). */
static void worker_args(node *nd, const char *path, uint16_t port, char *cmd, size_t n) {
  int id = (int)(nd - H.nodes) + 1;
  bool v6 = strchr(nd->listen_addr, ':') != NULL;
  /* host:N or slots=N from the hostfile: the worker runs N tasks at once. */
  char threads[32] = "";
  if (nd->host->slots > 0)
    snprintf(threads, sizeof threads, " --threads %d", nd->host->slots);
  /* The object store's knobs (remote.c, objects), digits only. */
  char objenv[160] = "";
  /* And a test's skew of the worker's trace clock (trace.c). */
  static const char *const objvars[] = {"SFLOW_OBJECT_THRESHOLD", "SFLOW_OBJECT_SERVE_DELAY_MS",
                                        "SFLOW_TEST_CLOCK_SKEW_MS"};
  for (size_t i = 0; i < sizeof objvars / sizeof *objvars; i++) {
    const char *v = getenv(objvars[i]);
    if (v && *v && strlen(v) < 20 && strspn(v, "0123456789") == strlen(v))
      snprintf(objenv + strlen(objenv), sizeof objenv - strlen(objenv), " %s=%s", objvars[i], v);
  }
  snprintf(cmd, n,
           "RANK=%d LOCAL_RANK=0 WORLD_SIZE=%d LOCAL_WORLD_SIZE=1 MASTER_ADDR='%s' "
           "MASTER_PORT=%u%s '%s' --sflow-worker '%d@%s%s%s:%u/%s'%s%s%s%s%s",
           id, H.n + 1, nd->listen_addr, H.master_port, objenv, path, id, v6 ? "[" : "",
           nd->listen_addr, v6 ? "]" : "", port, H.exe_hex, threads,
           logging() ? " --cluster-log" : "",
           sf__options.trace ? " --sflow-trace" : "", /* its events come to our trace */
           /* a hostfile's gpus=N on a host without them is an error there too */
           sf__options.require_gpu ? " --require-gpu" : "", H.cwd_arg);
}

#define CHECKED "sflow-host-checked"

/* Starts nd->cmd: the host check, which must pass; the command then
 * waits for "go".  0, or -1 with err. */
static int start_checked(node *nd, char *err, size_t errlen) {
  char out[8192];
  if (sf__ssh_start(nd->ssh, nd->cmd, err, errlen) ||
      sf__ssh_read_until(nd->ssh, CHECKED, "the host check (is /bin/sh there?)", out, sizeof out,
                         err, errlen))
    return -1;
  return sf__host_check(nd->label, out, err, errlen);
}

/* Phase 2, one thread per host: listen, then start the worker's command,
 * which first prints what the host has (hostcheck.c) and then waits for a
 * "go" line on stdin before it execs the worker; the head refuses a host
 * whose architecture, glibc or CPU features cannot run this executable,
 * by name, before anything is copied anywhere.  One SSH session command
 * for both, since a command costs the host a session (a fork and a
 * shell: about 0.2 s on a busy machine). */
static void *check_host(void *arg) {
  node *nd = arg;
  char *err = nd->error;
  size_t errlen = sizeof nd->error;
  int64_t t0 = now_ms();
  struct sockaddr_storage ss;
  socklen_t sl;
  sf__ssh_local_addr(nd->ssh, &ss, &sl);
  addr_str((struct sockaddr *)&ss, sl, nd->listen_addr, sizeof nd->listen_addr, NULL);
  pthread_mutex_lock(&H.mu);
  char lerr[256];
  int lr = listener_for(nd->listen_addr, lerr, sizeof lerr);
  uint16_t port = listener_port(nd->listen_addr);
  pthread_mutex_unlock(&H.mu);
  if (lr) {
    snprintf(err, errlen, "%s: %s", nd->label, lerr);
    return NULL;
  }
  /* sf__ssh_deploy's name for the copy. */
  snprintf(nd->path, sizeof nd->path, "%s/sflow-%s", H.ssh.remote_cache, H.exe_hex);
  char args[4096]; /* path + cwd + at most ~400 */
  worker_args(nd, nd->path, port, args, sizeof args);
  /* `read` takes one line and leaves the secret after it for the worker;
   * end of file (the head gave up on the start) runs nothing. */
  snprintf(nd->cmd, sizeof nd->cmd,
           "exec /bin/sh -c '%s; echo " CHECKED "; read go && [ \"$go\" = go ] && exec \"$@\"' "
           "sflow env %s",
           sf__host_probe_cmd, args);
  start_checked(nd, err, errlen);
  nd->check_ms = now_ms() - t0;
  return NULL;
}

/* Copies made again because a cached one was damaged, by path: nodes on
 * one shared file system find the same damaged file, and only the first
 * to see it copies; the others start what it copied (a node elsewhere
 * whose own copy is damaged finds it damaged again, and copies then). */
static pthread_mutex_t recopy_mu = PTHREAD_MUTEX_INITIALIZER;
static struct recopy {
  char path[1200];
  int64_t at; /* when the new copy was in place */
} *recopies;
static int nrecopies;

/* Sends "go" and the secret; the worker's first line then says whether
 * the file it runs is this executable.  1 when it is, 0 when the copy is
 * damaged (why in why), -1 on another failure (err). */
static int start_worker(node *nd, char *why, size_t wl, char *err, size_t errlen) {
  char go[3 + 2 * SF__SECRET_LEN + 2];
  memcpy(go, "go\n", 3);
  sf__hex(H.secret, SF__SECRET_LEN, go + 3);
  go[3 + 2 * SF__SECRET_LEN] = '\n';
  go[3 + 2 * SF__SECRET_LEN + 1] = '\0';
  int rc = sf__ssh_send(nd->ssh, go, sizeof go - 1, err, errlen);
  memset(go, 0, sizeof go);
  if (rc)
    return -1;
  char out[512];
  rc = sf__ssh_read_until(nd->ssh, SF__EXE_OK, "the worker", out, sizeof out, err, errlen);
  if (rc == 0)
    return 1;
  if (strstr(out, SF__EXE_DAMAGED)) {
    snprintf(why, wl, "its content hash differs");
    err[0] = '\0'; /* not a failure of the start (yet) */
    return 0;
  }
  /* A cached file that did not even start (a damaged ELF header) is
   * damaged too; a fresh copy that does not start is another failure. */
  if (!nd->copied) {
    size_t ll = strlen(nd->target.label);
    const char *e = !strncmp(err, nd->target.label, ll) && !strncmp(err + ll, ": ", 2)
                        ? err + ll + 2 : err; /* without the host: the message has it */
    snprintf(why, wl, "it did not start: %.200s", e);
    err[0] = '\0';
    return 0;
  }
  return -1;
}

/* Phase 3, one thread per host: deploy, then tell the waiting command to
 * exec the worker, with the run's secret on its stdin.  A cached copy the
 * worker finds damaged is removed and copied again, once; a copy that is
 * damaged right after copying is an error. */
static void *launch(void *arg) {
  node *nd = arg;
  int id = (int)(nd - H.nodes) + 1;
  char *err = nd->error;
  size_t errlen = sizeof nd->error;
  int64_t t1 = now_ms(), t2 = t1;
  char path[1200], why[400];
  bool recopied = false;
  for (int attempt = 0;; attempt++) {
    if (sf__ssh_deploy(nd->ssh, H.exe_path, H.exe_hex, H.ssh.remote_cache, path, sizeof path,
                       &nd->copied, err, errlen))
      return NULL;
    t2 = now_ms();
    int64_t go_at = now_ms();
    int r = start_worker(nd, why, sizeof why, err, errlen);
    if (r > 0)
      break;
    if (r < 0)
      return NULL;
    if (nd->copied || recopied || attempt > 2) {
      snprintf(err, errlen,
               "%s: the copy of this executable at %.200s is damaged right after copying it (%.150s); "
               "is something on the host changing the file?",
               nd->label, path, why);
      return NULL;
    }
    pthread_mutex_lock(&recopy_mu);
    bool theirs = false;
    for (int i = 0; i < nrecopies; i++)
      theirs |= !strcmp(recopies[i].path, path) && recopies[i].at > go_at;
    int rc = 0;
    if (!theirs) {
      note("sflow: node %d %s: cached executable %s was damaged (%s); copied again", id,
           nd->label, path, why);
      rc = sf__ssh_unlink(nd->ssh, path, err, errlen);
      if (!rc)
        rc = sf__ssh_deploy(nd->ssh, H.exe_path, H.exe_hex, H.ssh.remote_cache, path,
                            sizeof path, &nd->copied, err, errlen);
      struct recopy *more = rc ? NULL : realloc(recopies, (size_t)(nrecopies + 1) * sizeof *more);
      if (more) {
        recopies = more;
        snprintf(recopies[nrecopies].path, sizeof recopies[nrecopies].path, "%s", path);
        recopies[nrecopies++].at = now_ms();
      }
      recopied = true;
    } else if (logging()) {
      note("sflow: node %d %s: cached executable %s was damaged; another node copied it again",
           id, nd->label, path);
    }
    pthread_mutex_unlock(&recopy_mu);
    if (rc || start_checked(nd, err, errlen))
      return NULL;
  }
  nd->copied |= recopied;
  sf__ssh_detach(nd->ssh);
  nd->ssh_open = true;
  if (logging())
    note("sflow: node %d %s: %s %s, worker started (ssh %.2f s, check %.2f s, deploy %.2f s, "
         "exec %.2f s)",
         id, nd->label, nd->copied ? "copied" : "found cached", path, nd->connect_ms / 1e3,
         nd->check_ms / 1e3, (t2 - t1) / 1e3, (now_ms() - t2) / 1e3);
  return NULL;
}

static void mark_lost(node *nd, const char *why) {
  if (nd->lost || !nd->ready)
    return;
  if (H.stopping) { /* an orderly stop: workers leaving is expected */
    nd->alive = false;
    if (nd->conn.fd >= 0)
      sf__conn_close(&nd->conn);
    return;
  }
  nd->lost = true;
  nd->alive = false;
  H.lost_count++;
  int id = (int)(nd - H.nodes) + 1;
  if (nd->conn.fd >= 0)
    sf__conn_close(&nd->conn);
  note("sflow: node %d (%s) lost: %s", id, nd->label, why);
  nd->out.n = nd->out_off = 0;
  if (H.lost_fn) { /* remote.c resubmits work: it takes H.mu itself */
    char reason[256];
    snprintf(reason, sizeof reason, "%s", why);
    sf__node_lost_fn fn = H.lost_fn;
    pthread_mutex_unlock(&H.mu);
    fn(id, reason);
    pthread_mutex_lock(&H.mu);
  }
  pthread_cond_broadcast(&H.cv);
}

/* HELLO after a good handshake: checks the executable hash. */
static int take_hello(node *nd, const sf__frame *f, char *err, size_t errlen) {
  if (f->type != SF__F_HELLO) {
    snprintf(err, errlen, "expected hello, got %s", sf__wire_type_name(f->type));
    return -1;
  }
  if (!sf__ct_equal(f->u.hello.exe_hash, H.exe_hash, SF__HASH_LEN)) {
    snprintf(err, errlen, "runs a different executable (content hash differs)");
    return -1;
  }
  nd->pid = f->u.hello.pid;
  nd->cpus = f->u.hello.cpus;
  nd->gpus = f->u.hello.gpus;
  nd->data_port = f->u.hello.data_port;
  nd->obj_port = f->u.hello.obj_port;
  snprintf(nd->hostname, sizeof nd->hostname, "%.*s", (int)f->u.hello.host.n,
           (const char *)f->u.hello.host.p);
  snprintf(nd->data_addr, sizeof nd->data_addr, "%.*s", (int)f->u.hello.data_addr.n,
           (const char *)f->u.hello.data_addr.p);
  return 0;
}

static void handle_frame(node *nd, const sf__frame *f);

/* Frames already buffered on nd's connection (they came with its hello,
 * or a fill stopped at its batch). */
static void take_frames(node *nd) {
  char err[256];
  sf__frame f;
  int k;
  while (nd->conn.fd >= 0 && (k = sf__conn_next(&nd->conn, &f, err, sizeof err)) != 0) {
    if (k < 0) {
      mark_lost(nd, err);
      return;
    }
    nd->last_rx = now_ms();
    handle_frame(nd, &f);
  }
}

__attribute__((format(printf, 2, 3))) static void greet_drop(greeter *g, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  note("sflow: refused control connection from %s: %s", g->who, why);
  sf__conn_close(&g->conn);
}

/* New connections on a listener: each becomes a greeter with the
 * challenge sent.  When PREAUTH_MAX are already waiting, the oldest is
 * dropped, so a flood of silent connections delays a real worker by at
 * most its own handshake's round trips, never by their timeout. */
static void accept_new(int lfd) {
  for (int burst = 0; burst < PREAUTH_MAX; burst++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    greeter *g = NULL;
    for (int i = 0; i < PREAUTH_MAX && !g; i++)
      if (H.greet[i].conn.fd < 0)
        g = &H.greet[i];
    if (!g) {
      g = &H.greet[0];
      for (int i = 1; i < PREAUTH_MAX; i++)
        if (H.greet[i].deadline < g->deadline)
          g = &H.greet[i];
      greet_drop(g, "%d connections were authenticating at once; dropped the oldest",
                 PREAUTH_MAX);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sf__conn_init(&g->conn, fd);
    peer_str(fd, g->who, sizeof g->who);
    g->node = 0;
    g->deadline = now_ms() + PREAUTH_TIMEOUT_MS;
    char err[256];
    /* 40 bytes on a new socket: its buffer is empty, so never a wait. */
    if (sf__auth_challenge(&g->conn, g->nonce, 0, err, sizeof err))
      greet_drop(g, "%s", err);
  }
}

/* The greeter proved to be node nd and said hello: nd is ready. */
static void promote(greeter *g, node *nd) {
  int id = (int)(nd - H.nodes) + 1;
  nd->conn = g->conn;
  sf__conn_init(&g->conn, -1);
  nd->ready = nd->alive = true;
  nd->last_rx = now_ms();
  nd->start_s = (double)(now_ms() - H.t0) / 1000.0;
  if (logging())
    note("sflow: node %d ready: %s (host %s, pid %u, %u cpus, objects on %s:%u, %s, %.2f s)", id,
         nd->label, nd->hostname, nd->pid, nd->cpus, nd->data_addr, nd->obj_port,
         nd->copied ? "copied" : "cached", nd->start_s);
  take_frames(nd);
}

/* What a greeter sent: its auth frame, then its hello. */
static void greet_read(greeter *g) {
  int r = sf__conn_fill(&g->conn);
  char err[256];
  sf__frame f;
  int k;
  while ((k = sf__conn_next(&g->conn, &f, err, sizeof err)) == 1) {
    if (!g->node) {
      uint32_t id = 0;
      if (sf__auth_answer(&g->conn, &f, H.secret, g->nonce, &id, 0, err, sizeof err)) {
        greet_drop(g, "%s", err);
        return;
      }
      if (id < 1 || id > (uint32_t)H.n || H.nodes[id - 1].ready) {
        greet_drop(g, "node %u %s", id,
                   id < 1 || id > (uint32_t)H.n ? "does not exist" : "is already connected");
        return;
      }
      g->node = id;
      g->deadline = now_ms() + PREAUTH_TIMEOUT_MS;
      continue;
    }
    node *nd = &H.nodes[g->node - 1];
    if (nd->ready) {
      greet_drop(g, "node %u is already connected", g->node);
      return;
    }
    if (take_hello(nd, &f, err, sizeof err)) {
      note("sflow: refused node %u from %s: %s", g->node, g->who, err);
      snprintf(nd->error, sizeof nd->error, "%s: worker %s", nd->label, err);
      sf__conn_close(&g->conn);
      return;
    }
    promote(g, nd);
    return;
  }
  if (k < 0)
    greet_drop(g, "%s", err);
  else if (r == 0)
    greet_drop(g, "closed the connection before %s", g->node ? "its hello" : "authenticating");
  else if (r < 0)
    greet_drop(g, "receive failed: %s", strerror(errno));
}

static void greet_expire(int64_t t) {
  for (int i = 0; i < PREAUTH_MAX; i++) {
    greeter *g = &H.greet[i];
    if (g->conn.fd >= 0 && t >= g->deadline)
      greet_drop(g, "%s within %.0f s", g->node ? "no hello" : "did not authenticate",
                 PREAUTH_TIMEOUT_MS / 1000.0);
  }
}

static void pump_ssh(node *nd) {
  if (!nd->ssh || !nd->ssh_open)
    return;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "[node %d] ", (int)(nd - H.nodes) + 1);
  if (sf__ssh_pump(nd->ssh, 2, prefix) == 0) {
    nd->ssh_open = false;
    if (!nd->ready && !nd->error[0])
      snprintf(nd->error, sizeof nd->error,
               "%s: the worker exited before connecting back (see its output above)", nd->label);
    else if (nd->ready)
      mark_lost(nd, "its process ended (SSH channel closed)");
  }
}

/* Writes what nd->out holds without blocking: 0 when all is written or
 * the socket is full, -1 on an error (message in err). */
static int flush_out(node *nd, char *err, size_t errlen) {
  while (nd->conn.fd >= 0 && nd->out_off < nd->out.n) {
    ssize_t k = send(nd->conn.fd, nd->out.p + nd->out_off, nd->out.n - nd->out_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      nd->out_off += (size_t)k;
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return 0;
    snprintf(err, errlen, "send failed: %s", k < 0 ? strerror(errno) : "closed");
    return -1;
  }
  if (nd->out_off == nd->out.n)
    nd->out.n = nd->out_off = 0;
  else if (nd->out_off > (1u << 20) && nd->out_off > nd->out.n / 2) {
    memmove(nd->out.p, nd->out.p + nd->out_off, nd->out.n - nd->out_off);
    nd->out.n -= nd->out_off;
    nd->out_off = 0;
  }
  return 0;
}

/* Set by the control thread itself: comparing with H.thread would read it
 * while pthread_create may still be writing it. */
static _Thread_local bool is_control_thread;

static bool on_control_thread(void) { return is_control_thread; }

static void wake(void);

/* Frames go through nd->out, in order with the task frames of remote.c.
 * The control thread (or anyone while it is not running) writes at once;
 * another thread leaves the writing to the control thread and wakes it,
 * so that only the control thread ever closes a connection. */
static void send_frame(node *nd, const sf__frame *f) {
  char err[128];
  if (nd->conn.fd < 0 || sf__wire_encode(&nd->out, f))
    return;
  if (on_control_thread()) {
    if (flush_out(nd, err, sizeof err))
      mark_lost(nd, err);
  } else if (!H.thread_running) { /* start-up and stop: bounded, blocking */
    int64_t deadline = now_ms() + 1000;
    while (nd->out_off < nd->out.n) {
      if (flush_out(nd, err, sizeof err)) {
        mark_lost(nd, err);
        return;
      }
      if (nd->out_off < nd->out.n) {
        if (now_ms() > deadline) {
          mark_lost(nd, "timed out sending");
          return;
        }
        struct pollfd pf = {nd->conn.fd, POLLOUT, 0};
        poll(&pf, 1, 50);
      }
    }
  } else {
    wake();
  }
}

int sf__cluster_send(int id, const void *bytes, size_t n) {
  pthread_mutex_lock(&H.mu);
  if (!H.started || H.stopping || id < 1 || id > H.n || !H.nodes[id - 1].alive ||
      H.nodes[id - 1].conn.fd < 0) {
    pthread_mutex_unlock(&H.mu);
    return -1;
  }
  node *nd = &H.nodes[id - 1];
  bool was_empty = nd->out_off == nd->out.n;
  if (nd->out.cap - nd->out.n < n) {
    size_t cap = nd->out.cap ? nd->out.cap : 65536;
    while (cap - nd->out.n < n)
      cap *= 2;
    uint8_t *p = realloc(nd->out.p, cap);
    if (!p) {
      pthread_mutex_unlock(&H.mu);
      return -1;
    }
    nd->out.p = p;
    nd->out.cap = cap;
  }
  memcpy(nd->out.p + nd->out.n, bytes, n);
  nd->out.n += n;
  /* On the control thread (a result led to more work) the bytes leave
   * with the next round, together with the rest of this batch. */
  bool ctl = on_control_thread();
  pthread_mutex_unlock(&H.mu);
  if (!ctl && was_empty)
    wake();
  return 0;
}

/* Heartbeats answered at once after a node is ready, when tracing: enough
 * samples for a good clock offset before the first events arrive, instead
 * of one per SF__HEARTBEAT_MS. */
#define CLOCK_BURST 8

static void heartbeat(node *nd) {
  static uint64_t seq;
  sf__frame hb = {.type = SF__F_HEARTBEAT};
  hb.u.heartbeat.seq = ++seq;
  hb.u.heartbeat.time_ns = sf__trace_clock_ns();
  send_frame(nd, &hb);
}

/* A heartbeat's answer: one sample of the worker's clock offset. */
static void clock_sample(node *nd, const sf__frame *f) {
  uint64_t t0 = f->u.clock.head_ns, t1 = f->u.clock.worker_ns, t2 = sf__trace_clock_ns();
  if (t0 > t2)
    return; /* not a time we sent */
  uint64_t rtt = t2 - t0;
  if (!nd->clock_n || rtt < nd->clock_rtt) {
    nd->clock_rtt = rtt;
    nd->clock_off = (int64_t)(t1 - (t0 + rtt / 2));
  }
  if (++nd->clock_n == CLOCK_BURST && logging())
    note("sflow: node %d clock offset %+.3f ms (round trip %.3f ms)", (int)(nd - H.nodes) + 1,
         (double)nd->clock_off / 1e6, (double)nd->clock_rtt / 1e6);
  if (nd->clock_n < CLOCK_BURST && sf__options.trace)
    heartbeat(nd);
}

bool sf__cluster_clock(int id, int64_t *offset_ns, uint64_t *rtt_ns) {
  *offset_ns = 0;
  *rtt_ns = 0;
  if (!H.started || id < 1 || id > H.n)
    return false;
  pthread_mutex_lock(&H.mu);
  node *nd = &H.nodes[id - 1];
  bool ok = nd->clock_n > 0;
  if (ok) {
    *offset_ns = nd->clock_off;
    *rtt_ns = nd->clock_rtt;
  }
  pthread_mutex_unlock(&H.mu);
  return ok;
}

static void handle_frame(node *nd, const sf__frame *f) {
  switch (f->type) {
  case SF__F_HEARTBEAT: break; /* last_rx is enough */
  case SF__F_CLOCK: clock_sample(nd, f); break;
  case SF__F_TRACE: sf__trace_remote((int)(nd - H.nodes) + 1, f); break;
  case SF__F_LOG:
    note("[node %d] %.*s", (int)(nd - H.nodes) + 1, (int)f->u.log.line.n,
         (const char *)f->u.log.line.p);
    break;
  case SF__F_TASK_RESULT:
  case SF__F_PRINT:
    /* remote.c completes futures and may send more work: without H.mu,
     * which only this thread's own bookkeeping needs (f points into this
     * node's receive buffer, which only this thread touches). */
    pthread_mutex_unlock(&H.mu);
    if (f->type == SF__F_TASK_RESULT)
      sf__remote_on_result((int)(nd - H.nodes) + 1, f);
    else
      sf__remote_on_print((int)(nd - H.nodes) + 1, (const char *)f->u.log.line.p,
                          f->u.log.line.n);
    pthread_mutex_lock(&H.mu);
    break;
  case SF__F_OBJECT: /* a chunk of a large result (remote.c, objects) */
    pthread_mutex_unlock(&H.mu); /* as for task results */
    sf__remote_on_object((int)(nd - H.nodes) + 1, f);
    pthread_mutex_lock(&H.mu);
    break;
  case SF__F_ACTOR_RESULT:
  case SF__F_ACTOR_STATE:
    pthread_mutex_unlock(&H.mu); /* as for task results */
    sf__ractor_on_frame((int)(nd - H.nodes) + 1, f);
    pthread_mutex_lock(&H.mu);
    break;
  case SF__F_GROUP_DONE:
    if (f->u.group_done.group == H.group_seq) {
      nd->group_done = true;
      nd->group_ok = f->u.group_done.ok;
      nd->group_ns = f->u.group_done.elapsed_ns;
      snprintf(nd->group_msg, sizeof nd->group_msg, "%.*s", (int)f->u.group_done.message.n,
               (const char *)f->u.group_done.message.p);
      pthread_cond_broadcast(&H.cv);
    }
    break;
  default:
    note("sflow: node %d sent an unexpected %s frame", (int)(nd - H.nodes) + 1,
         sf__wire_type_name(f->type));
  }
}

static void read_node(node *nd) {
  int r = sf__conn_fill(&nd->conn);
  take_frames(nd);
  if (nd->conn.fd < 0)
    return; /* lost: a malformed frame */
  if (r == 0)
    mark_lost(nd, "its control connection closed (process died?)");
  else if (r < 0)
    mark_lost(nd, strerror(errno));
}

/* One round of the control loop; the caller holds H.mu. */
static void control_round(int timeout_ms, int64_t *next_hb) {
  struct pollfd pf[1 + MAX_LISTEN + PREAUTH_MAX + 2 * 1024];
  node *owner[1 + MAX_LISTEN + PREAUTH_MAX + 2 * 1024];
  greeter *gowner[PREAUTH_MAX];
  int np = 0, ng = 0, nl = H.nlisten; /* the layout of pf, whatever changes meanwhile */
  pf[np] = (struct pollfd){H.wake[0], POLLIN, 0};
  owner[np++] = NULL;
  for (int i = 0; i < nl; i++) {
    pf[np] = (struct pollfd){H.listen_fd[i], POLLIN, 0};
    owner[np++] = NULL;
  }
  for (int i = 0; i < PREAUTH_MAX; i++)
    if (H.greet[i].conn.fd >= 0) {
      gowner[ng++] = &H.greet[i];
      pf[np] = (struct pollfd){H.greet[i].conn.fd, POLLIN, 0};
      owner[np++] = NULL;
    }
  for (int i = 0; i < H.n && np < (int)(sizeof pf / sizeof pf[0]) - 2; i++) {
    node *nd = &H.nodes[i];
    if (nd->conn.fd >= 0) {
      char err[128];
      if (nd->out_off < nd->out.n && flush_out(nd, err, sizeof err)) {
        mark_lost(nd, err);
        continue;
      }
      short ev = POLLIN | (nd->out_off < nd->out.n ? POLLOUT : 0);
      pf[np] = (struct pollfd){nd->conn.fd, ev, 0};
      owner[np++] = nd;
    }
    if (nd->ssh_open) {
      pf[np] = (struct pollfd){sf__ssh_socket(nd->ssh), POLLIN, 0};
      owner[np++] = nd;
    }
  }
  pthread_mutex_unlock(&H.mu);
  poll(pf, (nfds_t)np, timeout_ms);
  pthread_mutex_lock(&H.mu);
  if (pf[0].revents) {
    char buf[64];
    while (read(H.wake[0], buf, sizeof buf) > 0) {
    }
  }
  /* Greeters first: a slot they free can take a new connection below. */
  for (int i = 0; i < ng; i++)
    if (pf[1 + nl + i].revents && gowner[i]->conn.fd == pf[1 + nl + i].fd)
      greet_read(gowner[i]);
  for (int i = 1; i <= nl; i++)
    if (pf[i].revents & POLLIN)
      accept_new(pf[i].fd);
  for (int i = 1 + nl + ng; i < np; i++) {
    node *nd = owner[i];
    if (!pf[i].revents)
      continue;
    if (nd->conn.fd == pf[i].fd) {
      if (pf[i].revents & POLLOUT) {
        char err[128];
        if (flush_out(nd, err, sizeof err)) {
          mark_lost(nd, err);
          continue;
        }
      }
      if (pf[i].revents & (POLLIN | POLLERR | POLLHUP))
        read_node(nd);
    } else
      pump_ssh(nd);
  }
  /* SSH output can arrive without the socket looking readable (libssh2
   * buffers), so every round pumps every open channel. */
  for (int i = 0; i < H.n; i++)
    pump_ssh(&H.nodes[i]);
  int64_t t = now_ms();
  greet_expire(t);
  for (int i = 0; i < H.n; i++) {
    node *nd = &H.nodes[i];
    if (nd->alive && t - nd->last_rx > SF__HEARTBEAT_TIMEOUT_MS) {
      char why[96];
      snprintf(why, sizeof why, "no heartbeat for %.1f s", (double)(t - nd->last_rx) / 1000.0);
      mark_lost(nd, why);
    }
  }
  if (t >= *next_hb) {
    *next_hb = t + SF__HEARTBEAT_MS;
    for (int i = 0; i < H.n; i++)
      if (H.nodes[i].alive)
        heartbeat(&H.nodes[i]);
  }
}

static void *control_thread(void *arg) {
  (void)arg;
  is_control_thread = true;
  int64_t next_hb = 0;
  pthread_mutex_lock(&H.mu);
  while (!H.stopping)
    control_round(100, &next_hb);
  pthread_mutex_unlock(&H.mu);
  return NULL;
}

static void wake(void) {
  if (H.wake[1] >= 0) {
    char c = 1;
    (void)!write(H.wake[1], &c, 1);
  }
}

/* Everything the head holds, closed (workers see their stdin close). */
static void teardown(void) {
  for (int i = 0; i < H.n; i++) {
    node *nd = &H.nodes[i];
    if (nd->conn.fd >= 0)
      sf__conn_close(&nd->conn);
    sf__wbuf_free(&nd->out);
    nd->out_off = 0;
    sf__ssh_close(nd->ssh, nd->lost || !nd->ready);
    nd->ssh = NULL;
    nd->ssh_open = false;
  }
  for (int i = 0; i < H.nlisten; i++)
    close(H.listen_fd[i]);
  H.nlisten = 0;
  for (int i = 0; i < PREAUTH_MAX; i++)
    if (H.greet[i].conn.fd >= 0)
      sf__conn_close(&H.greet[i].conn);
  memset(H.secret, 0, sizeof H.secret);
}

static int start_failed(char *err, size_t errlen) {
  size_t o = 0;
  int bad = 0, errors = 0;
  for (int i = 0; i < H.n; i++)
    errors += H.nodes[i].error[0] != '\0';
  /* Hosts that failed say why; when none did, the ones not ready timed out.
   * Healthy hosts that were cut short by another's failure are not listed. */
  for (int i = 0; i < H.n; i++)
    if (errors ? H.nodes[i].error[0] != '\0' : !H.nodes[i].ready)
      bad++;
  o += (size_t)snprintf(err, errlen, "%d of %d %s failed to start:", bad, H.n,
                        sf__plural(H.n, "node", "nodes"));
  for (int i = 0; i < H.n && o < errlen; i++) {
    node *nd = &H.nodes[i];
    if (errors ? !nd->error[0] : nd->ready)
      continue;
    o += (size_t)snprintf(err + o, errlen - o, "\n  %s",
                          nd->error[0] ? nd->error : "the worker did not connect back in time");
  }
  /* Shut down the workers that did start before leaving. */
  sf__frame sd = {.type = SF__F_SHUTDOWN};
  for (int i = 0; i < H.n; i++)
    if (H.nodes[i].alive)
      send_frame(&H.nodes[i], &sd);
  teardown();
  H.stopping = true; /* nothing left for sf__cluster_stop to do */
  return -1;
}

static void stop_at_exit(void) { sf__cluster_stop(); }

/* The head is rank 0 under torchrun's names; its MASTER_ADDR is the
 * address node 1 dials (with several interfaces each worker gets its own).
 * Called before the control thread starts, with the start-up threads
 * joined: setenv is not safe while another thread may read the
 * environment. */
static void set_head_env(void) {
  char v[32];
  setenv("RANK", "0", 1);
  setenv("LOCAL_RANK", "0", 1);
  snprintf(v, sizeof v, "%d", H.n + 1);
  setenv("WORLD_SIZE", v, 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", H.nodes[0].listen_addr, 1);
  snprintf(v, sizeof v, "%u", H.master_port);
  setenv("MASTER_PORT", v, 1);
}

/* Runs fn on every host at once, one thread each; true when any failed. */
static bool on_every_host(pthread_t *th, void *(*fn)(void *)) {
  for (int i = 0; i < H.n; i++)
    if (pthread_create(&th[i], NULL, fn, &H.nodes[i])) {
      snprintf(H.nodes[i].error, sizeof H.nodes[i].error, "%s: cannot start a thread",
               H.nodes[i].label);
      th[i] = 0;
    }
  bool failed = false;
  for (int i = 0; i < H.n; i++) {
    if (th[i])
      pthread_join(th[i], NULL);
    failed |= H.nodes[i].error[0] != '\0';
  }
  return failed;
}

/* Each host through ~/.ssh/config (or --ssh-config), as ssh would reach
 * it; the config's warnings and each host's go to stderr once. */
static int resolve_hosts(char *err, size_t errlen) {
  sf__sshcfg *cfg = NULL;
  if (sf__sshcfg_load(sf__options.ssh_config, &cfg, err, errlen))
    return -1;
  const char *w = sf__sshcfg_warnings(cfg);
  for (const char *nl; *w; w = nl + 1) {
    nl = strchr(w, '\n');
    note("sflow: warning: %.*s", (int)(nl - w), w);
  }
  int rc = 0;
  for (int i = 0; i < H.n && !rc; i++) {
    node *nd = &H.nodes[i];
    rc = sf__sshcfg_resolve(cfg, nd->host, &H.ssh, &nd->target, err, errlen);
    if (rc)
      break;
    snprintf(nd->label, sizeof nd->label, "%s", nd->target.name);
    if (nd->target.warning[0])
      note("sflow: warning: %s", nd->target.warning);
    if (logging())
      note("sflow: node %d %s: %s@%s port %d", i + 1, nd->label, nd->target.user,
           nd->target.host, nd->target.port);
  }
  sf__sshcfg_free(cfg);
  return rc;
}

int sf__cluster_start(char *err, size_t errlen) {
  if (!sf__options.nodes || H.started)
    return 0;
  H.t0 = now_ms();
  if (sf__hosts_from_arg(sf__options.nodes, &H.hosts, err, errlen))
    return -1;
  /* MASTER_PORT: the user's, or torchrun's default.  It is a port for the
   * user's own rendezvous (PyTorch env://): sflow's control plane listens
   * on a port of its own. */
  H.master_port = 29500;
  const char *mp = getenv("MASTER_PORT");
  if (mp && *mp) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(mp, &end, 10);
    if (errno || *end || v < 1 || v > 65535 || *mp == '-' || *mp == '+') {
      snprintf(err, errlen, "MASTER_PORT='%.40s' in the environment is not a port (1..65535)",
               mp);
      return -1;
    }
    H.master_port = (unsigned)v;
  }
  if (!sf__ssh_load(err, errlen))
    return -1;
  ssize_t k = readlink("/proc/self/exe", H.exe_path, sizeof H.exe_path - 1);
  if (k <= 0) {
    snprintf(err, errlen, "cannot find this executable: %s", strerror(errno));
    return -1;
  }
  H.exe_path[k] = '\0';
  if (sf__sha256_file(H.exe_path, H.exe_hash, err, errlen))
    return -1;
  sf__host_requirements(H.exe_path);
  sf__hex(H.exe_hash, SF__HASH_LEN, H.exe_hex);
  /* Workers start in the head's folder where their host has it (as
   * mpirun does), so relative paths in a program mean the same on every
   * node of a shared file system. */
  char cwd[PATH_MAX];
  H.cwd_arg[0] = '\0';
  if (getcwd(cwd, sizeof cwd) && strlen(cwd) <= CWD_MAX) {
    strcpy(H.cwd_arg, " --sflow-cwd ");
    sf__hex((const uint8_t *)cwd, strlen(cwd), H.cwd_arg + strlen(H.cwd_arg));
  } else {
    note("sflow: the working directory is %s; workers start in their login folder",
         getcwd(cwd, sizeof cwd) ? "too long to pass on" : "gone");
  }
  if (sf__random_bytes(H.secret, sizeof H.secret)) {
    snprintf(err, errlen, "no kernel randomness for the run secret");
    return -1;
  }
  H.ssh = (sf__ssh_opts){sf__options.ssh_user, sf__options.ssh_key, sf__options.known_hosts,
                         sf__options.accept_new_host_keys, (int)sf__options.connect_timeout,
                         sf__options.remote_cache ? sf__options.remote_cache : ".cache/sflow"};
  if (pipe2(H.wake, O_CLOEXEC | O_NONBLOCK)) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  H.n = H.hosts.n;
  H.nodes = calloc((size_t)H.n, sizeof *H.nodes);
  pthread_t *th = calloc((size_t)H.n, sizeof *th);
  if (!H.nodes || !th) {
    free(th);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < H.n; i++) {
    H.nodes[i].host = &H.hosts.hosts[i];
    H.nodes[i].conn.fd = -1;
  }
  for (int i = 0; i < PREAUTH_MAX; i++)
    sf__conn_init(&H.greet[i].conn, -1);
  if (resolve_hosts(err, errlen)) {
    free(th);
    return -1;
  }
  H.started = true;
  atexit(stop_at_exit);
  bool failed = on_every_host(th, connect_host);
  if (!failed)
    failed = on_every_host(th, check_host);
  if (!failed)
    failed = on_every_host(th, launch);
  free(th);
  /* Wait for every worker to connect back and say hello.  A worker whose
   * channel closes first fails at once, with its output shown. */
  int64_t deadline = now_ms() + (int64_t)(sf__options.connect_timeout + 20) * 1000;
  int64_t next_hb = 0;
  pthread_mutex_lock(&H.mu);
  while (!failed) {
    int ready = 0;
    for (int i = 0; i < H.n; i++) {
      ready += H.nodes[i].ready;
      failed |= H.nodes[i].error[0] != '\0';
    }
    if (ready == H.n || failed || now_ms() > deadline)
      break;
    control_round(50, &next_hb);
  }
  int ready = 0;
  for (int i = 0; i < H.n; i++)
    ready += H.nodes[i].ready;
  if (ready != H.n) {
    int r = start_failed(err, errlen);
    pthread_mutex_unlock(&H.mu);
    return r;
  }
  pthread_mutex_unlock(&H.mu);
  if (logging())
    note("sflow: %d %s ready in %.2f s", H.n, sf__plural(H.n, "node", "nodes"),
         (double)(now_ms() - H.t0) / 1000.0);
  set_head_env();
  /* Running from before the thread exists, so that no frame sent from now
   * on takes the blocking start-up path beside it. */
  H.thread_running = true;
  if (pthread_create(&H.thread, NULL, control_thread, NULL)) {
    H.thread_running = false;
    snprintf(err, errlen, "cannot start the control thread");
    return start_failed(err, errlen);
  }
  return 0;
}

void sf__cluster_stop(void) {
  if (!H.started)
    return;
  pthread_mutex_lock(&H.mu);
  if (!H.thread_running && H.stopping) {
    pthread_mutex_unlock(&H.mu);
    return;
  }
  H.stopping = true;
  pthread_mutex_unlock(&H.mu);
  wake();
  if (H.thread_running) {
    pthread_join(H.thread, NULL);
    H.thread_running = false;
  }
  pthread_mutex_lock(&H.mu);
  sf__frame sd = {.type = SF__F_SHUTDOWN};
  sd.u.shutdown.reason = (sf__bytes){(const uint8_t *)"run finished", 12};
  for (int i = 0; i < H.n; i++)
    if (H.nodes[i].alive)
      send_frame(&H.nodes[i], &sd);
  /* Wait (bounded) for the workers to close their end, so their processes
   * have gone before the head returns. */
  int64_t deadline = now_ms() + 3000;
  for (;;) {
    int open = 0;
    struct pollfd pf[1024];
    int np = 0;
    for (int i = 0; i < H.n && np < 1024; i++)
      if (H.nodes[i].conn.fd >= 0)
        pf[np++] = (struct pollfd){H.nodes[i].conn.fd, POLLIN, 0};
    open = np;
    if (!open || now_ms() > deadline)
      break;
    poll(pf, (nfds_t)np, 50);
    for (int i = 0; i < H.n; i++) {
      node *nd = &H.nodes[i];
      if (nd->conn.fd < 0)
        continue;
      int r = sf__conn_fill(&nd->conn);
      /* The trace events a worker ships as it stops are kept; anything
       * else (late heartbeats, answers nobody waits for) is dropped. */
      sf__frame f;
      char err[128];
      int k;
      while ((k = sf__conn_next(&nd->conn, &f, err, sizeof err)) == 1)
        if (f.type == SF__F_TRACE)
          sf__trace_remote(i + 1, &f);
      if (r <= 0 || k < 0) {
        nd->alive = false;
        sf__conn_close(&nd->conn);
      }
    }
  }
  for (int i = 0; i < H.n; i++)
    pump_ssh(&H.nodes[i]);
  teardown();
  H.stopping = true;
  pthread_mutex_unlock(&H.mu);
  if (logging())
    note("sflow: all nodes stopped");
}

int sf__cluster_nodes(void) { return 1 + (H.started ? H.n : 0); }

bool sf__cluster_node(int id, sf__node_info *out) {
  if (id == 0) {
    *out = (sf__node_info){0, "localhost", (int)sysconf(_SC_NPROCESSORS_ONLN),
                           (int)sf__gpu_devices(), (int)getpid(), true};
    return true;
  }
  if (!H.started || id < 1 || id > H.n)
    return false;
  pthread_mutex_lock(&H.mu);
  node *nd = &H.nodes[id - 1];
  *out = (sf__node_info){id, nd->host->name,
                         nd->host->slots > 0 ? nd->host->slots : (int)nd->cpus,
                         nd->host->gpus >= 0 ? nd->host->gpus : (int)nd->gpus, (int)nd->pid,
                         nd->alive};
  pthread_mutex_unlock(&H.mu);
  return true;
}

/* Node id's data-plane address and one of its two listeners' ports. */
static bool listener_of(int id, bool objects, char *addr, size_t n, uint16_t *port) {
  pthread_mutex_lock(&H.mu);
  const node *nd = H.started && id >= 1 && id <= H.n ? &H.nodes[id - 1] : NULL;
  uint16_t p = nd ? (objects ? nd->obj_port : nd->data_port) : 0;
  if (p) {
    snprintf(addr, n, "%s", nd->data_addr);
    *port = p;
  }
  pthread_mutex_unlock(&H.mu);
  return p != 0;
}

bool sf__cluster_obj_addr(int id, char *addr, size_t n, uint16_t *port) {
  return listener_of(id, true, addr, n, port);
}

bool sf__cluster_data_addr(int id, char *addr, size_t n, uint16_t *port) {
  return listener_of(id, false, addr, n, port);
}

void sf__cluster_on_node_lost(sf__node_lost_fn fn) {
  pthread_mutex_lock(&H.mu);
  H.lost_fn = fn;
  pthread_mutex_unlock(&H.mu);
}

int sf__cluster_group_bench(const int *members, int n, uint64_t count, sf__dtype t, int iters,
                            sf__group_result *res, char *err, size_t errlen) {
  *res = (sf__group_result){0};
  if (n < 1 || n > SF__GROUP_MAX) {
    snprintf(err, errlen, "a group needs 1 to %d members", SF__GROUP_MAX);
    return -1;
  }
  pthread_mutex_lock(&H.mu);
  for (int i = 0; i < n; i++)
    if (members[i] < 1 || members[i] > H.n || !H.nodes[members[i] - 1].alive) {
      pthread_mutex_unlock(&H.mu);
      snprintf(err, errlen, "group member node %d is not a live worker", members[i]);
      return -1;
    }
  uint64_t group = ++H.group_seq;
  sf__wbuf peers = {0};
  for (int i = 0; i < n; i++) {
    node *nd = &H.nodes[members[i] - 1];
    sf__wire_put_peer(&peers, nd->data_addr, nd->data_port);
    nd->group_done = false;
  }
  for (int i = 0; i < n; i++) {
    sf__frame f = {.type = SF__F_GROUP_SETUP};
    f.u.group_setup.group = group;
    f.u.group_setup.rank = (uint32_t)i;
    f.u.group_setup.size = (uint32_t)n;
    f.u.group_setup.count = count;
    f.u.group_setup.dtype = (uint32_t)t;
    f.u.group_setup.iters = (uint32_t)(iters < 1 ? 1 : iters);
    f.u.group_setup.peers = (sf__bytes){peers.p, (uint32_t)peers.n};
    send_frame(&H.nodes[members[i] - 1], &f);
  }
  sf__wbuf_free(&peers);
  wake();
  for (;;) {
    int done = 0, dead = 0;
    for (int i = 0; i < n; i++) {
      node *nd = &H.nodes[members[i] - 1];
      done += nd->group_done;
      dead += !nd->alive && !nd->group_done;
    }
    if (done == n || dead)
      break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&H.cv, &H.mu, &ts);
  }
  res->ok = true;
  uint64_t worst = 0;
  for (int i = 0; i < n; i++) {
    node *nd = &H.nodes[members[i] - 1];
    if (!nd->group_done || !nd->group_ok) {
      if (res->ok)
        snprintf(res->message, sizeof res->message, "node %d: %.200s", members[i],
                 nd->group_done ? nd->group_msg : "lost during the collective");
      res->ok = false;
    }
    if (nd->group_ns > worst)
      worst = nd->group_ns;
  }
  pthread_mutex_unlock(&H.mu);
  int timed = iters > 1 ? iters - 1 : 1;
  res->seconds = (double)worst / 1e9 / timed;
  return 0;
}

/* -------------------------------------------------------------- selftest */

static int parse_dtype(const char *s, sf__dtype *t) {
  static const char *const names[] = {"f32", "f64", "i32", "i64"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) {
      *t = (sf__dtype)i;
      return 0;
    }
  return -1;
}

static int selftest_allreduce(const char *spec) {
  char counts[512], type[16] = "f32";
  int iters = 3;
  if (sscanf(spec, "allreduce:%511[^:]:%15[^:]:%d", counts, type, &iters) < 1) {
    note("sflow: bad selftest '%s'", spec);
    return SF__EXIT_USAGE;
  }
  sf__dtype t;
  if (parse_dtype(type, &t)) {
    note("sflow: bad selftest type '%s'", type);
    return SF__EXIT_USAGE;
  }
  int members[SF__GROUP_MAX], n = H.n < SF__GROUP_MAX ? H.n : SF__GROUP_MAX;
  for (int i = 0; i < n; i++)
    members[i] = i + 1;
  int rc = 0;
  for (char *tok = strtok(counts, ","); tok; tok = strtok(NULL, ",")) {
    uint64_t count = strtoull(tok, NULL, 10);
    sf__group_result res;
    char err[256];
    if (sf__cluster_group_bench(members, n, count, t, iters, &res, err, sizeof err)) {
      note("sflow: allreduce: %s", err);
      return SF__EXIT_NODES;
    }
    double bytes = (double)count * (double)sf__dtype_size(t);
    double algbw = res.seconds > 0 ? bytes / res.seconds / 1e6 : 0;
    printf("allreduce nodes=%d type=%s count=%llu bytes=%.0f %s time_us=%.1f algbw_MBps=%.1f "
           "busbw_MBps=%.1f%s%s\n",
           n, type, (unsigned long long)count, bytes, res.ok ? "exact" : "FAILED",
           res.seconds * 1e6, algbw, algbw * 2.0 * (n - 1) / n, res.ok ? "" : " ",
           res.ok ? "" : res.message);
    fflush(stdout);
    if (!res.ok)
      rc = SF__EXIT_NODES;
  }
  return rc;
}

/* The nodes, their workers' pids, and the head's torchrun variables as
 * getenv sees them: a test reads a worker's in /proc/PID/environ, but the
 * head sets its own with setenv, which /proc does not show. */
static void print_ready(void) {
  printf("%d %s ready\n", H.n, sf__plural(H.n, "node", "nodes"));
  for (int i = 0; i < H.n; i++)
    printf("node %d %s pid %u\n", i + 1, H.nodes[i].label, H.nodes[i].pid);
  static const char *const names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT"};
  printf("head env");
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    printf(" %s=%s", names[i], getenv(names[i]) ? getenv(names[i]) : "(unset)");
  printf("\n");
  fflush(stdout);
}

int sf__cluster_selftest(const char *spec) {
  if (!H.started) {
    note("sflow: --sflow-selftest needs --nodes");
    return SF__EXIT_USAGE;
  }
  if (!strcmp(spec, "ready")) {
    print_ready();
    return 0;
  }
  double secs;
  if (sscanf(spec, "hold:%lf", &secs) == 1) {
    print_ready();
    int64_t end = now_ms() + (int64_t)(secs * 1000);
    pthread_mutex_lock(&H.mu);
    while (now_ms() < end && H.lost_count == 0) {
      sf__cond_wait_ns(&H.cv, &H.mu, 100000000);
    }
    int lost = H.lost_count;
    pthread_mutex_unlock(&H.mu);
    return lost ? SF__EXIT_NODES : 0;
  }
  if (!strncmp(spec, "allreduce:", 10))
    return selftest_allreduce(spec);
  note("sflow: unknown selftest '%s' (ready, hold:S, allreduce:COUNTS:TYPE:ITERS)", spec);
  return SF__EXIT_USAGE;
}

/* ============================================================== worker */

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

/* Senders append to one buffer; whoever finds nobody writing writes it
 * all, so results finishing together leave in one write. */
static sf__wbuf w_out, w_spare;
static bool w_flushing;

static void worker_send(worker *w, const sf__frame *f) {
  pthread_mutex_lock(&w->send_mu);
  if (sf__wire_encode(&w_out, f) || w_flushing) {
    pthread_mutex_unlock(&w->send_mu);
    return;
  }
  w_flushing = true;
  while (w_out.n) {
    sf__wbuf b = w_out;
    w_out = w_spare;
    w_out.n = 0;
    pthread_mutex_unlock(&w->send_mu);
    (void)sf__write_all(w->conn.fd, (const char *)b.p, b.n); /* a lost head: the loop sees it */
    pthread_mutex_lock(&w->send_mu);
    w_spare = b;
  }
  w_flushing = false;
  pthread_mutex_unlock(&w->send_mu);
}

static worker *W; /* this process's worker, for sf__worker_send_frame */

int sf__worker_data_fd(void) { return W ? W->data_fd : -1; }
const uint8_t *sf__worker_secret(void) { return W ? W->secret : NULL; }

void sf__worker_send_frame(const sf__frame *f) {
  if (W)
    worker_send(W, f);
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
  int64_t deadline = now_ms() + 30000;
  while (n < sizeof line) {
    struct pollfd pf = {0, POLLIN, 0};
    int left = (int)(deadline - now_ms());
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

static int dial_head(const char *addr, const char *port, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                           .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(addr, port, &hints, &ai)) {
    snprintf(err, errlen, "bad head address %s:%s", addr, port);
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
  f.u.hello.cpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
  f.u.hello.gpus = (uint32_t)sf__gpu_devices(); /* the head's hostfile gpus=N wins */
  f.u.hello.data_port = data_port;
  f.u.hello.obj_port = obj_port;
  f.u.hello.host = (sf__bytes){(const uint8_t *)host, (uint32_t)strlen(host)};
  f.u.hello.data_addr = (sf__bytes){(const uint8_t *)data_addr, (uint32_t)strlen(data_addr)};
  memcpy(f.u.hello.exe_hash, hash, SF__HASH_LEN);
  worker_send(w, &f);
}

/* Serves the head until shutdown or until the head is gone. */
static int worker_loop(worker *w) {
  int64_t last_rx = now_ms();
  char err[256];
  for (;;) {
    struct pollfd pf[2] = {{w->conn.fd, POLLIN, 0}, {0, POLLIN, 0}};
    poll(pf, 2, 250);
    if (pf[1].revents) {
      char buf[256];
      ssize_t k = read(0, buf, sizeof buf);
      if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) {
        if (sf__options.cluster_log)
          note("sflow worker %u: the head's SSH session ended; exiting", w->node);
        return SF__EXIT_NODES;
      }
    }
    if (pf[0].revents) {
      int r = sf__conn_fill(&w->conn);
      sf__frame f;
      int k;
      while ((k = sf__conn_next(&w->conn, &f, err, sizeof err)) == 1) {
        last_rx = now_ms();
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
          return (int)f.u.shutdown.code;
        case SF__F_GROUP_SETUP: start_group(w, &f); break;
        case SF__F_TASK_SUBMIT: sf__remote_worker_submit(&f); break;
        case SF__F_OBJECT: sf__remote_worker_object(&f); break;
        case SF__F_ACTOR_CREATE:
        case SF__F_ACTOR_CALL:
        case SF__F_ACTOR_STOP: sf__ractor_worker_frame(&f); break;
        default: break;
        }
      }
      if (k < 0) {
        note("sflow worker %u: %s from the head; exiting", w->node, err);
        return SF__EXIT_NODES;
      }
      if (r <= 0) {
        if (sf__options.cluster_log)
          note("sflow worker %u: the head closed the control connection; exiting", w->node);
        return SF__EXIT_NODES;
      }
    }
    sf__trace_ship(); /* events of work still running, at most 250 ms old */
    if (now_ms() - last_rx > SF__HEARTBEAT_TIMEOUT_MS) {
      note("sflow worker %u: no heartbeat from the head for %.1f s; exiting", w->node,
           (double)(now_ms() - last_rx) / 1000.0);
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
  char dir[CWD_MAX + 1];
  if (strlen(hex) % 2 || n > CWD_MAX || !sf__unhex(hex, (uint8_t *)dir, n) ||
      memchr(dir, 0, n)) {
    note("sflow worker %u: bad --sflow-cwd; staying in the login folder", node);
    return;
  }
  dir[n] = '\0';
  if (chdir(dir))
    note("sflow worker %u: no folder %s on this host (%s); relative paths start from the "
         "login folder", node, dir, strerror(errno));
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
    note("sflow worker: bad --sflow-worker '%s' (expected ID@ADDR:PORT[/SHA256])", spec);
    return SF__EXIT_USAGE;
  }
  /* Before anything else: is this file the executable the head deployed?
   * A cached copy damaged in place (same name, same size) says so on
   * stdout, which the head reads before it waits for us, and the head
   * copies it again. */
  uint8_t hash[SF__HASH_LEN] = {0};
  char hex[2 * SF__HASH_LEN + 1] = "";
  if (sf__sha256_file("/proc/self/exe", hash, err, sizeof err))
    note("sflow worker %u: %s", w.node, err);
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
    note("sflow worker %u: no secret on stdin", w.node);
    return SF__EXIT_NODES;
  }
  worker_chdir(w.node);
  int fd = dial_head(addr, port, err, sizeof err);
  if (fd < 0) {
    note("sflow worker %u: %s", w.node, err);
    return SF__EXIT_NODES;
  }
  sf__conn_init(&w.conn, fd);
  if (sf__auth_worker(&w.conn, w.secret, w.node, AUTH_TIMEOUT_MS, err, sizeof err)) {
    note("sflow worker %u: %s", w.node, err);
    sf__conn_close(&w.conn);
    return SF__EXIT_NODES;
  }
  /* The data plane listens on the address the head reached us by. */
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char local[64];
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  addr_str((struct sockaddr *)&ss, sl, local, sizeof local, NULL);
  uint16_t dport = 0;
  w.data_fd = sf__ring_listen(local, &dport, err, sizeof err);
  if (w.data_fd < 0)
    note("sflow worker %u: %s (group collectives unavailable)", w.node, err);
  /* A second listener for the object store: the ring accepts on its own
   * one synchronously during group set-up, so they must not share. */
  uint16_t oport = 0;
  int obj_fd = sf__ring_listen(local, &oport, err, sizeof err);
  if (obj_fd < 0)
    note("sflow worker %u: %s (objects go through the head)", w.node, err);
  sf__node_id = w.node;
  W = &w;
  if (sf__options.worker_trace)
    sf__trace_worker_begin();
  sf__remote_worker_start();
  if (obj_fd >= 0)
    sf__remote_objects_listen(obj_fd); /* its thread owns obj_fd for the process's life */
  worker_hello(&w, local, dport, obj_fd >= 0 ? oport : 0, hash);
  int rc = worker_loop(&w);
  if (w.group_running) {
    /* A collective still running is bounded by its ring timeout. */
    pthread_join(w.group_thread, NULL);
  }
  sf__conn_close(&w.conn);
  if (w.data_fd >= 0)
    close(w.data_fd);
  memset(w.secret, 0, sizeof w.secret);
  return rc;
}
