/*
 * nccl_check.c — runtime/gpu/nccl.c on real GPUs, with two processes as two
 * ranks, the way a group across nodes uses it: rank 0 makes the unique id
 * and the parent carries its 128 bytes (hex) to rank 1, as the control
 * plane would.  Exits 77 without a GPU (ctest: not run).
 *
 *   nccl_check            exact results of allreduce sum/mean (f32, f64,
 *                         i64), broadcast, allgather and barrier at three
 *                         sizes; then a peer that dies (SIGKILL) and a peer
 *                         that stops (SIGSTOP) after joining: rank 0 must
 *                         fail, naming the cause, within the watchdog bound
 *   nccl_check --bench    also allreduce bus bandwidth from 1 KB to 256 MB,
 *                         as "TABLE|check|figure|peer|goal" lines
 *
 * NCCL refuses two ranks on one GPU of one host.  With fewer than two GPUs
 * each rank gets its own NCCL_HOSTID, so NCCL takes them for two hosts and
 * connects them over sockets: correct, but the bandwidth is the socket
 * path's, which the table says.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <pthread.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "nccl_check", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};
extern char **environ;

#define WATCHDOG_S 5.0 /* SFLOW_NCCL_TIMEOUT for the failure checks */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------ a rank */

static int rank, nranks, failures;
static sf__nccl_comm *comm;
static sf__nccl_watch watch = {NULL, NULL, 0, NULL};

/* A device array of n elements of t, filled by f(rank, i). */
static sf_array *dev_array(const sf_type *t, int64_t n, double (*f)(int, int64_t)) {
  sf_array *a = sf_array_new(t, n, NULL);
  for (int64_t i = 0; i < n; i++) {
    double v = f(rank, i);
    switch (t->kind) {
    case SF_F32: ((float *)a->data)[i] = (float)v; break;
    case SF_F64: ((double *)a->data)[i] = v; break;
    default: ((int64_t *)a->data)[i] = (int64_t)v; break;
    }
  }
  sf__gpu_device_copy(a, NULL);
  return a;
}

static uint64_t dptr(sf_array *a) { return (uint64_t)(uintptr_t)a->dev; }

/* Copies the device result back and compares it with want(i), exactly. */
static void expect(const char *what, sf_array *a, double (*want)(int64_t)) {
  a->where = SF__WHERE_DEVICE;
  sf_array_host(a);
  int64_t bad = -1;
  double got = 0;
  for (int64_t i = 0; i < a->len && bad < 0; i++) {
    switch (a->elem->kind) {
    case SF_F32: got = ((float *)a->data)[i]; break;
    case SF_F64: got = ((double *)a->data)[i]; break;
    default: got = (double)((int64_t *)a->data)[i]; break;
    }
    if (got != want(i))
      bad = i;
  }
  printf("rank %d: %-4s %s n=%" PRId64 "%s", rank, bad < 0 ? "ok" : "FAIL", what, a->len,
         bad < 0 ? "\n" : "");
  if (bad >= 0) {
    printf(": [%" PRId64 "] = %.17g, want %.17g\n", bad, got, want(bad));
    failures++;
  }
}

static void check(bool ok, const char *what, const char *err) {
  if (!ok) {
    printf("rank %d: FAIL %s: %s\n", rank, what, err);
    failures++;
  }
}

static double f_sum(int r, int64_t i) { return r * 1000 + i % 1000; }
static double w_sum(int64_t i) { return 1000 + 2 * (i % 1000); }
static double f_mean(int r, int64_t i) { return r * 0.5 + (double)(i % 97); }
static double w_mean(int64_t i) { return (double)(i % 97) + 0.25; }
static double f_big(int r, int64_t i) { return r * 1e12 + (double)i; }
static double w_big(int64_t i) { return 1e12 + 2.0 * (double)i; }
static double f_bc(int r, int64_t i) { return r * 100 + i % 100; }
static double w_bc(int64_t i) { return 100 + i % 100; }
static double f_ag(int r, int64_t i) { return r * 10 + i % 10; }
static int64_t ag_len;
static double w_ag(int64_t i) { return (double)(i / ag_len) * 10 + (double)(i % ag_len % 10); }

static void exact_checks(void) {
  char err[1024];
  int64_t sizes[] = {1, 1000, (1 << 20) + 3};
  for (int s = 0; s < 3; s++) {
    int64_t n = sizes[s];
    sf_array *a = dev_array(&sf_type_f32, n, f_sum);
    check(sf__nccl_allreduce(comm, dptr(a), n, &sf_type_f32, false, &watch, err, sizeof err),
          "allreduce f32", err);
    expect("allreduce_sum f32", a, w_sum);
    sf_release(a);
    a = dev_array(&sf_type_f64, n, f_mean);
    check(sf__nccl_allreduce(comm, dptr(a), n, &sf_type_f64, true, &watch, err, sizeof err),
          "allreduce mean f64", err);
    expect("allreduce_mean f64", a, w_mean);
    sf_release(a);
    a = dev_array(&sf_type_i64, n, f_big);
    check(sf__nccl_allreduce(comm, dptr(a), n, &sf_type_i64, false, &watch, err, sizeof err),
          "allreduce i64", err);
    expect("allreduce_sum i64", a, w_big);
    sf_release(a);
    a = dev_array(&sf_type_f32, n, f_bc);
    check(sf__nccl_broadcast(comm, dptr(a), n, &sf_type_f32, 1, &watch, err, sizeof err),
          "broadcast", err);
    expect("broadcast(root 1) f32", a, w_bc);
    sf_release(a);
    a = dev_array(&sf_type_f32, n, f_ag);
    sf_array *out = sf_array_new(&sf_type_f32, n * nranks, NULL);
    uint64_t q = sf__gpu_device_alloc(out, NULL);
    check(sf__nccl_allgather(comm, dptr(a), q, n, &sf_type_f32, &watch, err, sizeof err),
          "allgather", err);
    ag_len = n;
    expect("allgather f32", out, w_ag);
    sf_release(a);
    sf_release(out);
  }
  check(sf__nccl_barrier(comm, &watch, err, sizeof err), "barrier", err);
  printf("rank %d: %-4s barrier\n", rank, failures ? "-" : "ok");
}

/* Rank 0 with a peer that dies or stops: the allreduce must fail, with
 * the cause, within the watchdog bound (plus a margin for the abort). */
static void lone_allreduce(const char *how) {
  char err[1024];
  sf_array *a = dev_array(&sf_type_f32, 1 << 20, f_sum);
  double t0 = now();
  bool ok = sf__nccl_allreduce(comm, dptr(a), a->len, &sf_type_f32, false, &watch, err,
                               sizeof err);
  double dt = now() - t0;
  if (ok) {
    printf("rank 0: FAIL allreduce with a %s peer succeeded\n", how);
    failures++;
  } else {
    bool in_time = dt <= WATCHDOG_S + 12;
    printf("rank 0: %-4s peer %s: error after %.2f s (bound %.0f s + 12 s to abort): %s\n",
           in_time ? "ok" : "FAIL", how, dt, WATCHDOG_S, err);
    printf("TABLE|NCCL: a %s peer becomes an error|after %.1f s|watchdog %.0f s|%s\n", how, dt,
           WATCHDOG_S, in_time ? "ok" : "FAIL");
    failures += !in_time;
  }
  sf_release(a);
}

static void bench(void) {
  char err[1024];
  int64_t sizes[] = {1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 24, 1 << 28};
  for (int s = 0; s < 6; s++) {
    int64_t bytes = sizes[s], n = bytes / 4;
    sf_array *a = dev_array(&sf_type_f32, n, f_sum);
    int reps = bytes >= (1 << 28) ? 5 : bytes >= (1 << 24) ? 20 : 100;
    bool ok = true;
    for (int w = 0; w < 3 && ok; w++)
      ok = sf__nccl_allreduce(comm, dptr(a), n, &sf_type_f32, false, &watch, err, sizeof err);
    double t0 = now();
    for (int r = 0; r < reps && ok; r++)
      ok = sf__nccl_allreduce(comm, dptr(a), n, &sf_type_f32, false, &watch, err, sizeof err);
    double dt = (now() - t0) / reps;
    check(ok, "bench allreduce", err);
    if (rank == 0 && ok)
      printf("BENCH %" PRId64 " %.3f %.2f\n", bytes, dt * 1e6,
             (double)bytes * 2.0 * (nranks - 1) / nranks / dt / 1e9);
    sf_release(a);
  }
}

static int rank_main(const char *idhex, const char *mode) {
  if (!sf__gpu_ready(NULL)) {
    printf("rank %d: no GPU (%s)\n", rank, sf__gpu_unavailable_reason());
    return 77;
  }
  char err[1024];
  sf__nccl_id id;
  if (!idhex) { /* rank 0: make the id, hand it to the parent */
    if (!sf__nccl_new_id(&id, err, sizeof err)) {
      printf("rank 0: FAIL %s\n", err);
      return 1;
    }
    printf("ID ");
    for (int i = 0; i < SF__NCCL_ID_BYTES; i++)
      printf("%02x", id.bytes[i]);
    printf("\n");
    fflush(stdout);
  } else {
    for (int i = 0; i < SF__NCCL_ID_BYTES; i++) {
      unsigned v = 0;
      if (sscanf(idhex + 2 * i, "%2x", &v) != 1)
        return 2;
      id.bytes[i] = (unsigned char)v;
    }
  }
  double t0 = now();
  comm = sf__nccl_comm_init(&id, rank, nranks, &watch, err, sizeof err);
  if (!comm) {
    printf("rank %d: FAIL communicator: %s\n", rank, err);
    return 1;
  }
  printf("rank %d: ok   communicator ready in %.2f s (GPU %d)\n", rank, now() - t0,
         sf__gpu_current_device());
  fflush(stdout);
  bool lone = !strcmp(mode, "die") || !strcmp(mode, "stop");
  if (lone && rank == 1)
    raise(!strcmp(mode, "die") ? SIGKILL : SIGSTOP);
  if (lone)
    lone_allreduce(!strcmp(mode, "die") ? "dead" : "stopped");
  else if (!strcmp(mode, "bench"))
    bench();
  else
    exact_checks();
  sf__nccl_comm_free(comm, failures > 0 || lone);
  fflush(stdout);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------- the parent */

static int gpus;

/* The environment of rank r in `mode` (calloc'ed; its new strings in
 * buf): the caller's, with the rank's device, a host id of its own where
 * both ranks share GPU 0, and the watchdog's bound: WATCHDOG_S for the
 * failure checks; for the others the caller's SFLOW_NCCL_TIMEOUT, else the
 * pair's limit, so that a hang ends in the watchdog's message before the
 * parent kills the rank (NCCL's default is 300 s).  Both ranks are on this
 * host: NCCL's sockets go over the loopback and InfiniBand is left alone
 * (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1) unless the caller says else. */
static char **rank_env(int r, const char *mode, double limit, char buf[4][64]) {
  bool fails = strcmp(mode, "check") && strcmp(mode, "bench");
  snprintf(buf[0], 64, "SFLOW_DEVICE=%d", gpus >= 2 ? r : 0);
  snprintf(buf[1], 64, "NCCL_HOSTID=sflow-nccl-check-%d", r);
  snprintf(buf[2], 64, "SFLOW_NCCL_TIMEOUT=%g", fails ? WATCHDOG_S : limit - 10);
  size_t ne = 0;
  while (environ[ne])
    ne++;
  char **env = calloc(ne + 6, sizeof *env);
  size_t m = 0;
  for (size_t i = 0; i < ne; i++)
    if (strncmp(environ[i], "SFLOW_DEVICE=", 13) && strncmp(environ[i], "NCCL_HOSTID=", 12) &&
        (strncmp(environ[i], "SFLOW_NCCL_TIMEOUT=", 19) || !fails))
      env[m++] = environ[i];
  env[m++] = buf[0];
  if (gpus < 2)
    env[m++] = buf[1];
  if (fails || !getenv("SFLOW_NCCL_TIMEOUT"))
    env[m++] = buf[2];
  if (!getenv("NCCL_SOCKET_IFNAME"))
    env[m++] = "NCCL_SOCKET_IFNAME=lo";
  if (!getenv("NCCL_IB_DISABLE"))
    env[m++] = "NCCL_IB_DISABLE=1";
  return env;
}

static pid_t spawn_rank(int r, const char *mode, double limit, const char *idhex, int out_fd) {
  char self[4096], rs[16], buf[4][64];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  self[k > 0 ? k : 0] = '\0';
  snprintf(rs, sizeof rs, "%d", r);
  char *argv[] = {self, "--rank", rs, "--mode", (char *)mode, "--id", (char *)(idhex ? idhex : "-"),
                  NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  char **env = rank_env(r, mode, limit, buf);
  pid_t pid = -1;
  if (posix_spawn(&pid, self, &fa, NULL, argv, env) != 0)
    pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  return pid;
}

/* Waits for pid for at most limit seconds; kills it after that. */
static int reap(pid_t pid, double limit, bool *hung) {
  int st = 0;
  double t0 = now();
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (now() - t0 > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      *hung = true;
      return -1;
    }
    nanosleep(&(struct timespec){0, 20000000}, NULL);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Kills rank 0 once the limit has passed, so that reading its output
 * cannot hang the parent. */
typedef struct {
  pid_t pid;
  double limit;
  _Atomic int done;
} guard;

static void *guard_thread(void *p) {
  guard *g = p;
  for (double t0 = now(); !atomic_load(&g->done); nanosleep(&(struct timespec){0, 50000000}, NULL))
    if (now() - t0 > g->limit) {
      kill(g->pid, SIGKILL);
      break;
    }
  return NULL;
}

/* Runs both ranks in `mode`; rank 0's output (after its ID line) goes to
 * stdout.  Returns the number of failures. */
static int run_pair(const char *mode, double limit) {
  int fds[2];
  if (pipe(fds) != 0)
    return 1;
  pid_t p0 = spawn_rank(0, mode, limit, NULL, fds[1]);
  close(fds[1]);
  guard g = {p0, limit + 5, 0};
  pthread_t gt;
  bool guarded = p0 > 0 && pthread_create(&gt, NULL, guard_thread, &g) == 0;
  FILE *in = fdopen(fds[0], "r");
  char line[1024];
  char idhex[2 * SF__NCCL_ID_BYTES + 1] = "";
  pid_t p1 = -1;
  while (p0 > 0 && fgets(line, sizeof line, in)) {
    if (!strncmp(line, "ID ", 3) && p1 < 0 && strlen(line) >= 3 + 2 * SF__NCCL_ID_BYTES) {
      memcpy(idhex, line + 3, 2 * SF__NCCL_ID_BYTES);
      p1 = spawn_rank(1, mode, limit, idhex, -1);
      continue;
    }
    if (!strncmp(line, "BENCH ", 6)) {
      long long bytes;
      double us, gbs;
      if (sscanf(line + 6, "%lld %lf %lf", &bytes, &us, &gbs) == 3) {
        char size[32];
        if (bytes >= (1 << 20))
          snprintf(size, sizeof size, "%lld MB", bytes >> 20);
        else
          snprintf(size, sizeof size, "%lld KB", bytes >> 10);
        printf("TABLE|sflow NCCL allreduce f32 %s, 2 ranks%s|%.2f GB/s bus (%.1f us)|torch.distributed row|>= 90%% of torch\n",
               size, gpus >= 2 ? "" : " on 1 GPU via sockets", gbs, us);
      }
      continue;
    }
    fputs(line, stdout);
    fflush(stdout);
  }
  fclose(in);
  atomic_store(&g.done, 1);
  if (guarded)
    pthread_join(gt, NULL);
  bool hung = false;
  int rc0 = p0 > 0 ? reap(p0, limit, &hung) : -1;
  int rc1 = p1 > 0 ? reap(p1, !strcmp(mode, "check") || !strcmp(mode, "bench") ? limit : 0.1, &hung)
                   : -1;
  if (!strcmp(mode, "stop") || !strcmp(mode, "die"))
    rc1 = 0; /* killed on purpose (a stopped one by reap) */
  if (rc0 == 77)
    return 77;
  if ((hung && rc0 < 0) || rc0 == 128 + SIGKILL)
    printf("nccl_check: FAIL %s: rank 0 still running after %.0f s: a hang\n", mode, limit);
  return (rc0 != 0) + (rc1 != 0);
}

int main(int argc, char **argv) {
  if (argc >= 7 && !strcmp(argv[1], "--rank")) {
    rank = atoi(argv[2]);
    nranks = 2;
    return rank_main(strcmp(argv[6], "-") ? argv[6] : NULL, argv[4]);
  }
  if (argc == 4 && !strcmp(argv[1], "--rank-env")) {
    /* nccl_check --rank-env MODE GPUS: the environment a rank would get
     * (tests/gpu/nccl_env.py checks it without a GPU). */
    char buf[4][64];
    gpus = atoi(argv[3]);
    double limit = !strcmp(argv[2], "check") ? 120 : !strcmp(argv[2], "bench") ? 300 : 60;
    char **env = rank_env(0, argv[2], limit, buf);
    for (char **e = env; *e; e++)
      if (!strncmp(*e, "SFLOW_", 6) || !strncmp(*e, "NCCL_", 5))
        printf("%s\n", *e);
    free(env);
    return 0;
  }
  bool want_bench = argc > 1 && !strcmp(argv[1], "--bench");
  setvbuf(stdout, NULL, _IOLBF, 0);
  char why[512], v[32];
  if (!sf__nccl_load(why, sizeof why)) {
    printf("nccl_check: FAIL: %s\n", why);
    return 1;
  }
  sf__nccl_version_string(v, sizeof v);
  printf("nccl_check: NCCL %s\n", v);
  /* The parent only counts the GPUs; the ranks are fresh processes. */
  gpus = sf__gpu_devices();
  if (gpus == 0) {
    printf("nccl_check: SKIP: no GPU (%s)\n", sf__gpu_unavailable_reason());
    return 77;
  }
  printf("nccl_check: %d GPU%s: %s\n", gpus, gpus == 1 ? "" : "s",
         gpus >= 2 ? "one rank per GPU" : "two ranks on GPU 0 as two NCCL hosts (sockets)");
  int failed = run_pair("check", 120);
  if (failed == 77)
    return 77;
  printf("TABLE|NCCL allreduce/broadcast/allgather, 2 ranks|%s|exact|exact\n",
         failed ? "FAIL" : "exact");
  failed += run_pair("die", 60);
  failed += run_pair("stop", 60);
  if (want_bench)
    failed += run_pair("bench", 300);
  printf("nccl_check: %s\n", failed ? "FAILED" : "all passed");
  return failed ? 1 : 0;
}
