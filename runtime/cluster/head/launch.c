/*
 * launch.c — a multi-node run's start on the head: workers started on
 * every host of --nodes, each with a control connection back; their
 * shutdown; and the node table the rest of the runtime asks.
 *
 * Head start-up, in parallel for all hosts (one thread per host, so 32
 * hosts start in about the time of one): SSH connect, host key check and
 * authentication (ssh.c); whether the host can run this executable
 * (architecture, glibc, CPU features: hostcheck.c); a listener on the
 * head's address of that SSH connection (only the interfaces the workers
 * reach us by, never INADDR_ANY); SFTP deployment of this executable by content hash; exec in
 * worker mode with a fresh 256-bit secret on the channel's stdin.  The
 * worker first hashes the file it runs and says on stdout whether it is
 * ours: a damaged cached copy is copied again, once (a worker killed from
 * outside or silent before it says is its node's failure, named with the
 * cause, not a damaged file).  Then every worker
 * connects back, passes the HMAC challenge (wire.c), and sends HELLO with
 * that hash, which must equal ours.  Connections not yet authenticated are
 * "greeters", read without blocking beside the nodes, bounded in number,
 * size (wire.c reads only handshake frames) and time.
 *
 * After start-up the control thread (control.c) owns every socket and
 * SSH session; the worker's side is worker_main.c.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "head_internal.h"
#include "metrics.h"

/* Extra seconds beyond --connect-timeout a launched run's rank 0 waits
 * for the other ranks (their hosts may still be starting them). */
#define LAUNCH_WAIT_S 50

static int wait_ready(char *err, size_t errlen);

sf__head sf__head_table = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .wake = {-1, -1}};

/* ============================================================ start-up */

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
  sf__addr_str((struct sockaddr *)&ss, sl, host, sizeof host, &p);
  if (!H.port)
    H.port = p;
  H.listen_fd[H.nlisten] = fd;
  snprintf(H.listen_addr[H.nlisten], 64, "%s", addr);
  H.nlisten++;
  if (logging())
    sf__cluster_note("sflow: control plane listening on %s%s%s:%u", strchr(addr, ':') ? "[" : "",
                     addr, strchr(addr, ':') ? "]" : "", p);
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
      sf__addr_str((struct sockaddr *)&ss, sl, host, sizeof host, &p);
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
  int64_t t0 = sf__now_ms();
  if (sf__ssh_connect(&nd->target, &H.ssh, &nd->ssh, nd->error, sizeof nd->error) == 0)
    nd->connect_ms = sf__now_ms() - t0;
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
  /* The object store's knobs (worker/objects_worker.c), digits only. */
  char objenv[224] = "";
  /* And a test's skew of the worker's trace clock (trace.c). */
  static const char *const objvars[] = {"SFLOW_OBJECT_THRESHOLD", "SFLOW_OBJECT_SERVE_DELAY_MS",
                                        "SFLOW_TEST_CLOCK_SKEW_MS"};
  for (size_t i = 0; i < sizeof objvars / sizeof *objvars; i++) {
    const char *v = getenv(objvars[i]);
    if (v && *v && strlen(v) < 20 && strspn(v, "0123456789") == strlen(v))
      snprintf(objenv + strlen(objenv), sizeof objenv - strlen(objenv), " %s=%s", objvars[i], v);
  }
  /* The BLAS kernel the user forced on the head, forced on the workers
   * too: a product's bits depend on the kernel (docs/nn.md), and a run's
   * must not depend on which node computed them.  A name only. */
  const char *core = getenv("OPENBLAS_CORETYPE");
  if (core && *core && strlen(core) < 32 &&
      strspn(core, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
          strlen(core))
    snprintf(objenv + strlen(objenv), sizeof objenv - strlen(objenv), " OPENBLAS_CORETYPE=%s",
             core);
  snprintf(cmd, n,
           "RANK=%d LOCAL_RANK=0 WORLD_SIZE=%d LOCAL_WORLD_SIZE=1 MASTER_ADDR='%s' "
           "MASTER_PORT=%u%s '%s' --sflow-worker '%d@%s%s%s:%u/%s'%s%s%s%s%s%s",
           id, H.n + 1, nd->listen_addr, H.master_port, objenv, path, id, v6 ? "[" : "",
           nd->listen_addr, v6 ? "]" : "", port, H.exe_hex, threads,
           logging() ? " --cluster-log" : "",
           sf__options.trace ? " --sflow-trace" : "", /* its events come to our trace */
           sf__metrics_on ? " --sflow-metrics" : "", /* its figures come to our /metrics */
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
  int64_t t0 = sf__now_ms();
  struct sockaddr_storage ss;
  socklen_t sl;
  if (sf__ssh_local_addr(nd->ssh, &ss, &sl)) {
    snprintf(err, errlen, "%s: cannot tell which address of this machine the worker can reach "
             "(no route to the host outside its ProxyCommand)", nd->label);
    return NULL;
  }
  sf__addr_str((struct sockaddr *)&ss, sl, nd->listen_addr, sizeof nd->listen_addr, NULL);
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
  nd->check_ms = sf__now_ms() - t0;
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

/* Whether the signal that ended the worker came from outside (SIGKILL,
 * SIGTERM, ...), not from its own code: a damaged executable crashes
 * (SEGV, BUS, ILL, FPE, ABRT, TRAP, SYS) or does not start at all. */
static bool killed_from_outside(const sf__ssh *ssh) {
  static const char *const crashes[] = {"SEGV", "BUS", "ILL", "FPE", "ABRT", "TRAP", "SYS"};
  const char *sig = sf__ssh_signal(ssh);
  if (!*sig)
    return false;
  for (size_t i = 0; i < sizeof crashes / sizeof *crashes; i++)
    if (!strcmp(sig, crashes[i]))
      return false;
  return true;
}

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
  /* A worker stopped or killed from outside before it hashed itself says
   * nothing about the file: the start fails with that cause, on this
   * node, and the copy the other nodes may be starting stays. */
  if (rc == SF__SSH_SILENT || (rc == SF__SSH_ENDED && killed_from_outside(nd->ssh)))
    return -1;
  /* A cached file that did not even start (a damaged ELF header, or code
   * that crashes) is damaged too; a fresh copy that does not start is
   * another failure. */
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
  int64_t t1 = sf__now_ms(), t2 = t1;
  char path[1200], why[400];
  bool recopied = false;
  for (int attempt = 0;; attempt++) {
    if (sf__ssh_deploy(nd->ssh, H.exe_path, H.exe_hex, H.ssh.remote_cache, path, sizeof path,
                       &nd->copied, err, errlen))
      return NULL;
    t2 = sf__now_ms();
    int64_t go_at = sf__now_ms();
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
      theirs |= !strcmp(recopies[i].path, path) && recopies[i].at >= go_at; /* ms: a tie is theirs */
    int rc = 0;
    if (!theirs) {
      sf__cluster_note("sflow: node %d %s: cached executable %s was damaged (%s); copied again", id,
                       nd->label, path, why);
      rc = sf__ssh_unlink(nd->ssh, path, err, errlen);
      if (!rc)
        rc = sf__ssh_deploy(nd->ssh, H.exe_path, H.exe_hex, H.ssh.remote_cache, path,
                            sizeof path, &nd->copied, err, errlen);
      struct recopy *more = rc ? NULL : realloc(recopies, (size_t)(nrecopies + 1) * sizeof *more);
      if (more) {
        recopies = more;
        snprintf(recopies[nrecopies].path, sizeof recopies[nrecopies].path, "%s", path);
        recopies[nrecopies++].at = sf__now_ms();
      }
      recopied = true;
    } else if (logging()) {
      sf__cluster_note(
          "sflow: node %d %s: cached executable %s was damaged; another node copied it again", id,
          nd->label, path);
    }
    pthread_mutex_unlock(&recopy_mu);
    if (rc || start_checked(nd, err, errlen))
      return NULL;
  }
  nd->copied |= recopied;
  sf__ssh_detach(nd->ssh);
  nd->ssh_open = true;
  if (logging())
    sf__cluster_note(
        "sflow: node %d %s: %s %s, worker started (ssh %.2f s, check %.2f s, deploy %.2f s, "
        "exec %.2f s)",
        id, nd->label, nd->copied ? "copied" : "found cached", path, nd->connect_ms / 1e3,
        nd->check_ms / 1e3, (t2 - t1) / 1e3, (sf__now_ms() - t2) / 1e3);
  return NULL;
}

/* ============================================ failure, stop, node table */

static void stop_at_exit(void) { sf__cluster_stop(); }

/* Everything the head holds, closed (workers see their stdin close). */
static void teardown(void) {
  for (int i = 0; i < H.n; i++) {
    node *nd = &H.nodes[i];
    if (nd->conn.fd >= 0)
      sf__conn_close(&nd->conn);
    sf__head_out_clear(nd);
    sf__ssh_close(nd->ssh, nd->lost || !nd->ready);
    nd->ssh = NULL;
    nd->ssh_open = false;
    sf__ssh_target_free(&nd->target); /* its jump hosts */
  }
  for (int i = 0; i < H.nlisten; i++)
    close(H.listen_fd[i]);
  H.nlisten = 0;
  for (int i = 0; i < PREAUTH_MAX; i++)
    if (H.greet[i].conn.fd >= 0)
      sf__conn_close(&H.greet[i].conn);
  memset(H.secret, 0, sizeof H.secret);
  if (H.launch && H.launch->rdv[0]) /* the next job must not find our address */
    unlink(H.launch->rdv);
}

/* How long the head waits for every worker's hello. */
static int64_t wait_s(void) {
  return sf__options.connect_timeout + (H.launch ? LAUNCH_WAIT_S : 20);
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
    if (nd->error[0])
      o += (size_t)snprintf(err + o, errlen - o, "\n  %s", nd->error);
    else if (H.launch) /* nobody here started it */
      o += (size_t)snprintf(err + o, errlen - o,
                            "\n  %s: did not connect within %d s (not started by the launcher, "
                            "or started with another secret or head address?)",
                            nd->label, (int)wait_s());
    else /* it started and said its executable is intact, then went quiet */
      o += (size_t)snprintf(err + o, errlen - o,
                            "\n  %s: the worker did not connect back within %d s of its start",
                            nd->label, (int)wait_s());
  }
  /* Shut down the workers that did start before leaving. */
  sf__frame sd = {.type = SF__F_SHUTDOWN};
  for (int i = 0; i < H.n; i++)
    if (H.nodes[i].alive)
      sf__head_send_frame(&H.nodes[i], &sd);
  teardown();
  H.stopping = true; /* nothing left for sf__cluster_stop to do */
  return -1;
}


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
    sf__cluster_note("sflow: warning: %.*s", (int)(nl - w), w);
  }
  int rc = 0;
  for (int i = 0; i < H.n && !rc; i++) {
    node *nd = &H.nodes[i];
    rc = sf__sshcfg_resolve(cfg, nd->host, &H.ssh, &nd->target, err, errlen);
    if (rc)
      break;
    snprintf(nd->label, sizeof nd->label, "%s", nd->target.name);
    if (nd->target.warning[0])
      sf__cluster_note("sflow: warning: %s", nd->target.warning);
    if (logging())
      sf__cluster_note("sflow: node %d %s: %s@%s port %d", i + 1, nd->label, nd->target.user,
                       nd->target.host, nd->target.port);
  }
  sf__sshcfg_free(cfg);
  return rc;
}

/* ======================================================= launched runs */

/* Rank 0's listener, before which the secret was read (main.c): only on
 * the address the other ranks are told to dial (MASTER_ADDR, Slurm's
 * first host, or this host's name published in the rendezvous file), as
 * sf__launch_bind_addr finds it here; on every interface, with a notice,
 * when that is not an address of this machine (a Kubernetes Service's is
 * not the pod's) or is loopback while ranks run on other hosts.  The HMAC
 * handshake keeps out whoever does not know the secret either way.  With
 * a rendezvous file: a port of the kernel's choosing, published there as
 * the numeric address listened on. */
static int listen_launched(const sf__launch *L, char *err, size_t errlen) {
  struct sockaddr_storage ss = {0};
  socklen_t sl = sizeof(struct sockaddr_in);
  struct sockaddr_in *in = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
  uint16_t port = L->rdv[0] ? 0 : (uint16_t)L->port;
  char self[256] = "", why[512] = "";
  gethostname(self, sizeof self - 1);
  const char *name = L->rdv[0] ? self : L->host;
  bool one_addr = sf__launch_bind_addr(L, name, &ss, &sl, why, sizeof why) == 1;
  if (!one_addr) {
    ss = (struct sockaddr_storage){0};
    sl = sizeof *in;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_ANY);
    sf__cluster_note("sflow: %s rank 0: %s, so the control plane listens on every interface "
                     "(the secret's handshake still admits only the job's ranks)", L->engine,
                     why);
  }
  if (ss.ss_family == AF_INET6)
    in6->sin6_port = htons(port);
  else
    in->sin_port = htons(port);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&ss, sl);
  if (rc || listen(fd, 256)) {
    int e = errno;
    snprintf(err, errlen, "rank 0 cannot listen on port %u for the other ranks: %s%s", port,
             strerror(e), e == EADDRINUSE ? " (another job's? set MASTER_PORT, or srun "
                                             "--resv-ports under Slurm)" : "");
    if (fd >= 0)
      close(fd);
    return -1;
  }
  sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  sf__addr_str((struct sockaddr *)&ss, sl, H.listen_addr[0], sizeof H.listen_addr[0], &H.port);
  H.listen_fd[0] = fd;
  H.nlisten = 1;
  const char *published = one_addr ? H.listen_addr[0] : self;
  if (L->rdv[0] && sf__launch_publish(L, published, H.port, err, errlen))
    return -1;
  if (logging())
    sf__cluster_note("sflow: %s rank 0 of %d: control plane listening on %s:%u%s%s", L->engine,
                     L->size, H.listen_addr[0], H.port, L->rdv[0] ? ", published in " : "",
                     L->rdv);
  return 0;
}

/* The node table of a launched run: ranks 1..size-1, named by rank. */
static int launched_nodes(const sf__launch *L, char *err, size_t errlen) {
  H.n = L->size - 1;
  H.hosts.n = H.n;
  H.hosts.hosts = calloc((size_t)H.n, sizeof *H.hosts.hosts);
  H.nodes = calloc((size_t)H.n, sizeof *H.nodes);
  if (!H.nodes || !H.hosts.hosts) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < H.n; i++) {
    char name[32];
    snprintf(name, sizeof name, "rank %d", i + 1);
    H.hosts.hosts[i] = (sf__host){.name = strdup(name), .slots = -1, .gpus = -1};
    H.nodes[i].host = &H.hosts.hosts[i];
    H.nodes[i].conn.fd = -1;
    snprintf(H.nodes[i].label, sizeof H.nodes[i].label, "%s", name);
  }
  return 0;
}

/* Rank 0 of a launched run: listen, then wait for the other ranks, which
 * the launcher started beside us, to dial in and authenticate. */
static int start_launched(const sf__launch *L, char *err, size_t errlen) {
  H.launch = L;
  memcpy(H.secret, L->key, sizeof H.secret);
  if (pipe2(H.wake, O_CLOEXEC | O_NONBLOCK)) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  for (int i = 0; i < PREAUTH_MAX; i++)
    sf__conn_init(&H.greet[i].conn, -1);
  if (launched_nodes(L, err, errlen) || listen_launched(L, err, errlen))
    return -1;
  H.started = true;
  atexit(stop_at_exit);
  return 0;
}

int sf__cluster_start(char *err, size_t errlen) {
  const sf__launch *L = sf__launched.kind != SF__LAUNCH_NONE ? &sf__launched : NULL;
  if ((!sf__options.nodes && !L) || H.started)
    return 0;
  H.t0 = sf__now_ms();
  if (L) {
    if (sf__sha256_file("/proc/self/exe", H.exe_hash, err, errlen) ||
        start_launched(L, err, errlen))
      return -1;
    return wait_ready(err, errlen);
  }
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
  if (getcwd(cwd, sizeof cwd) && strlen(cwd) <= SF__CWD_MAX) {
    strcpy(H.cwd_arg, " --sflow-cwd ");
    sf__hex((const uint8_t *)cwd, strlen(cwd), H.cwd_arg + strlen(H.cwd_arg));
  } else {
    sf__cluster_note("sflow: the working directory is %s; workers start in their login folder",
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
  if (failed) {
    pthread_mutex_lock(&H.mu);
    int r = start_failed(err, errlen);
    pthread_mutex_unlock(&H.mu);
    return r;
  }
  return wait_ready(err, errlen);
}

/* Waits for every worker to connect back and say hello, then starts the
 * control thread.  A worker whose channel closes first fails at once,
 * with its output shown.  A launched run's ranks start beside rank 0,
 * on hosts the launcher was still setting up: they get longer. */
static int wait_ready(char *err, size_t errlen) {
  bool failed = false;
  int64_t deadline = sf__now_ms() + wait_s() * 1000;
  int64_t next_hb = 0;
  pthread_mutex_lock(&H.mu);
  while (!failed) {
    int ready = 0;
    for (int i = 0; i < H.n; i++) {
      ready += H.nodes[i].ready;
      failed |= H.nodes[i].error[0] != '\0';
    }
    if (ready == H.n || failed || sf__now_ms() > deadline)
      break;
    sf__head_control_round(50, &next_hb);
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
    sf__cluster_note("sflow: %d %s ready in %.2f s", H.n, sf__plural(H.n, "node", "nodes"),
                     (double)(sf__now_ms() - H.t0) / 1000.0);
  if (!H.launch)
    set_head_env();
  sf__launch_mark(); /* a program a task starts is not a rank of this run */
  /* Running from before the thread exists, so that no frame sent from now
   * on takes the blocking start-up path beside it. */
  H.thread_running = true;
  if (pthread_create(&H.thread, NULL, sf__head_control_thread, NULL)) {
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
  sf__head_wake();
  if (H.thread_running) {
    pthread_join(H.thread, NULL);
    sf__head_note_silences();
    H.thread_running = false;
  }
  pthread_mutex_lock(&H.mu);
  sf__frame sd = {.type = SF__F_SHUTDOWN};
  sd.u.shutdown.reason = (sf__bytes){(const uint8_t *)"run finished", 12};
  for (int i = 0; i < H.n; i++)
    if (H.nodes[i].alive)
      sf__head_send_frame(&H.nodes[i], &sd);
  /* Wait (bounded) for the workers to close their end, so their processes
   * have gone before the head returns. */
  int64_t deadline = sf__now_ms() + 3000;
  for (;;) {
    int open = 0;
    struct pollfd pf[1024];
    int np = 0;
    for (int i = 0; i < H.n && np < 1024; i++)
      if (H.nodes[i].conn.fd >= 0)
        pf[np++] = (struct pollfd){H.nodes[i].conn.fd, POLLIN, 0};
    open = np;
    if (!open || sf__now_ms() > deadline)
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
    sf__head_pump_ssh(&H.nodes[i]);
  teardown();
  H.stopping = true;
  pthread_mutex_unlock(&H.mu);
  if (logging())
    sf__cluster_note("sflow: all nodes stopped");
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

