/*
 * test_rt_nccl.c — the NCCL layer without a GPU: the real libnccl.so.2
 * loads and reports its version and makes a unique id; a missing, disabled
 * or too old library is a clear message; and, against a fake library
 * (tests/gpu/fake_nccl.c), communicator creation is non-blocking and the
 * watchdog turns a hang, an asynchronous error or a failed member into an
 * error with the communicator aborted, within its bound.
 *
 * Loading happens once per process, so each library case runs in a child
 * process and reports one line back through a pipe.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <libgen.h>
#include <sys/wait.h>
#include <time.h>

#include "gpu.h"
#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_nccl", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static char fake_path[4096];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs fn(out) in a child with SFLOW_NCCL=lib (NULL: unset) and returns
 * the line it wrote. */
static void in_child(const char *lib, void (*fn)(char *out, size_t n), char *got, size_t n) {
  int fds[2];
  CU_ASSERT_FATAL(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (lib)
      setenv("SFLOW_NCCL", lib, 1);
    else
      unsetenv("SFLOW_NCCL");
    char out[1024] = "";
    fn(out, sizeof out);
    ssize_t w = write(fds[1], out, strlen(out));
    _exit(w < 0);
  }
  close(fds[1]);
  ssize_t k = 0, r;
  while (k < (ssize_t)n - 1 && (r = read(fds[0], got + k, n - 1 - (size_t)k)) > 0)
    k += r;
  got[k > 0 ? k : 0] = '\0';
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
}

static void load_report(char *out, size_t n) {
  char err[512], v[32];
  if (!sf__nccl_load(err, sizeof err)) {
    snprintf(out, n, "no: %s", err);
    return;
  }
  sf__nccl_version_string(v, sizeof v);
  snprintf(out, n, "yes %d %s", sf__nccl_version(), v);
}

static void id_report(char *out, size_t n) {
  sf__nccl_id id;
  char err[512];
  memset(&id, 0, sizeof id);
  if (!sf__nccl_new_id(&id, err, sizeof err)) {
    snprintf(out, n, "no: %s", err);
    return;
  }
  int nonzero = 0;
  for (int i = 0; i < SF__NCCL_ID_BYTES; i++)
    nonzero += id.bytes[i] != 0;
  snprintf(out, n, "id %s", nonzero ? "set" : "zero");
}

/* The installed library: loads, is 2.14 or later, makes an id (no GPU
 * needed for that: it is the bootstrap's socket address). */
static void test_real_library(void) {
  char got[1024];
  in_child(NULL, load_report, got, sizeof got);
  int code = 0;
  char v[64] = "";
  CU_ASSERT_FATAL(sscanf(got, "yes %d %63s", &code, v) == 2);
  CU_ASSERT(code >= 21400);
  printf("\n  NCCL %s (code %d) loaded\n", v, code);
  in_child(NULL, id_report, got, sizeof got);
  printf("  ncclGetUniqueId: %s\n", got);
  CHECK_STR(got, "id set");
}

/* The real library on a machine without a GPU: creating a communicator
 * fails with NCCL's own message, without hanging. */
static void init_report(char *out, size_t n) {
  sf__nccl_id id;
  char err[900];
  sf__nccl_watch w = {NULL, NULL, 20, NULL};
  if (!sf__nccl_new_id(&id, err, sizeof err)) {
    snprintf(out, n, "no id: %s", err);
    return;
  }
  sf__nccl_comm *c = sf__nccl_comm_init(&id, 0, 1, &w, err, sizeof err);
  snprintf(out, n, "%s", c ? "made a communicator" : err);
}

static void test_real_init_without_gpu(void) {
  if (access("/dev/nvidia0", F_OK) == 0) {
    printf("\n  (a GPU is present: the GPU tests cover this)\n");
    return;
  }
  char got[1024];
  double t0 = now_s();
  in_child(NULL, init_report, got, sizeof got);
  printf("\n  %.2f s: %s\n", now_s() - t0, got);
  CU_ASSERT(strstr(got, "NCCL") != NULL && strstr(got, "rank 0 of 1") != NULL);
  CU_ASSERT(now_s() - t0 < 20);
}

static void test_missing_library(void) {
  char got[1024];
  in_child("/nonexistent/libnccl.so.2", load_report, got, sizeof got);
  CU_ASSERT(!strncmp(got, "no: /nonexistent/libnccl.so.2 cannot be loaded (", 48));
  in_child("off", load_report, got, sizeof got);
  CHECK_STR(got, "no: SFLOW_NCCL=off turns NCCL off");
  setenv("FAKE_NCCL_VERSION", "21306", 1);
  in_child(fake_path, load_report, got, sizeof got);
  unsetenv("FAKE_NCCL_VERSION");
  char want[4200];
  snprintf(want, sizeof want, "no: %s is NCCL 2.13.6; sflow needs 2.14 or later (non-blocking "
           "communicators)", fake_path);
  CHECK_STR(got, want);
}

static void test_timeout_knob(void) {
  unsetenv("SFLOW_NCCL_TIMEOUT");
  CU_ASSERT(sf__nccl_timeout() == 300.0);
  setenv("SFLOW_NCCL_TIMEOUT", "2.5", 1);
  CU_ASSERT(sf__nccl_timeout() == 2.5);
  setenv("SFLOW_NCCL_TIMEOUT", "-1", 1);
  CU_ASSERT(sf__nccl_timeout() == 300.0);
  setenv("SFLOW_NCCL_TIMEOUT", "soon", 1);
  CU_ASSERT(sf__nccl_timeout() == 300.0);
  unsetenv("SFLOW_NCCL_TIMEOUT");
}

/* ------------------------------------------------ against the fake */

static int *fake_int(const char *name) {
  void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
  int *p = h ? dlsym(h, name) : NULL;
  CU_ASSERT_FATAL(p != NULL);
  return p;
}

static int member_failed_after;
static double t_start;
static bool failed_soon(void *ctx, char *why, size_t n) {
  (void)ctx;
  if (now_s() - t_start < member_failed_after * 0.001)
    return false;
  snprintf(why, n, "member 1 of the group failed: index 9 out of bounds");
  return true;
}

static char told_why[256];
static int told_aborts;
static void told(void *ctx, const char *why) {
  (void)ctx;
  snprintf(told_why, sizeof told_why, "%s", why);
  void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
  told_aborts = *(int *)dlsym(h, "fake_aborts");
}

static void test_watchdog(void) {
  setenv("SFLOW_NCCL", fake_path, 1);
  char err[1024];
  CU_ASSERT_FATAL(sf__nccl_load(err, sizeof err));
  sf__nccl_id id;
  CU_ASSERT_FATAL(sf__nccl_new_id(&id, err, sizeof err));
  int *aborts = fake_int("fake_aborts");

  /* A peer that never comes: creation ends at the deadline, aborted. */
  setenv("FAKE_NCCL_INIT", "hang", 1);
  sf__nccl_watch w = {NULL, NULL, 0.3, NULL};
  double t0 = now_s();
  sf__nccl_comm *c = sf__nccl_comm_init(&id, 0, 2, &w, err, sizeof err);
  double took = now_s() - t0;
  CU_ASSERT(c == NULL);
  CHECK_STR(err, "creating the NCCL communicator (rank 0 of 2) did not finish within 0.3 s "
                 "(SFLOW_NCCL_TIMEOUT): a member of the group is dead, stopped or not making "
                 "the same call");
  printf("\n  hung init ended after %.2f s (bound 0.3 s)\n", took);
  CU_ASSERT(took >= 0.3 && took < 2.0);
  CHECK_INT(*aborts, 1);
  CHECK_INT(*fake_int("fake_last_blocking"), 0);
  CU_ASSERT(*(unsigned *)fake_int("fake_last_magic") == 0xcafebeefu);

  /* The same through the environment knob. */
  setenv("SFLOW_NCCL_TIMEOUT", "0.2", 1);
  sf__nccl_watch dflt = {NULL, NULL, 0, NULL};
  c = sf__nccl_comm_init(&id, 1, 2, &dflt, err, sizeof err);
  unsetenv("SFLOW_NCCL_TIMEOUT");
  CU_ASSERT(c == NULL);
  CU_ASSERT(strstr(err, "did not finish within 0.2 s (SFLOW_NCCL_TIMEOUT)") != NULL);
  CHECK_INT(*aborts, 2);

  /* A member fails elsewhere: the wait ends with its reason, long before
   * the deadline. */
  member_failed_after = 100;
  t_start = now_s();
  sf__nccl_watch g = {failed_soon, NULL, 60, told};
  c = sf__nccl_comm_init(&id, 0, 2, &g, err, sizeof err);
  took = now_s() - t_start;
  CU_ASSERT(c == NULL);
  CHECK_STR(err, "member 1 of the group failed: index 9 out of bounds");
  CU_ASSERT(took < 2.0);
  CHECK_INT(*aborts, 3);
  /* The group heard of it before the abort started. */
  CHECK_STR(told_why, "member 1 of the group failed: index 9 out of bounds");
  CHECK_INT(told_aborts, 2);

  /* NCCL reports an error asynchronously: its text and last error. */
  setenv("FAKE_NCCL_INIT", "async", 1);
  c = sf__nccl_comm_init(&id, 0, 2, &w, err, sizeof err);
  CU_ASSERT(c == NULL);
  CHECK_STR(err, "creating the NCCL communicator (rank 0 of 2): NCCL reports unhandled system "
                 "error (fake) (NCCL error 2): peer 1 closed the connection (fake)");
  CHECK_INT(*aborts, 4);

  /* Refused at once. */
  setenv("FAKE_NCCL_INIT", "fail", 1);
  c = sf__nccl_comm_init(&id, 1, 2, &w, err, sizeof err);
  CU_ASSERT(c == NULL);
  CHECK_STR(err, "ncclCommInitRankConfig (rank 1 of 2) failed: invalid usage (fake) (NCCL "
                 "error 5)");
  CHECK_INT(*fake_int("fake_last_rank"), 1); /* the id went by value, in between */
  CHECK_INT(*fake_int("fake_last_nranks"), 2);

  /* Ready: a collective without a GPU fails cleanly (no stream), the
   * communicator is then finalized and destroyed, not aborted. */
  setenv("FAKE_NCCL_INIT", "ok", 1);
  c = sf__nccl_comm_init(&id, 0, 2, &w, err, sizeof err);
  CU_ASSERT_FATAL(c != NULL);
  CU_ASSERT(!sf__nccl_allreduce(c, 0x1000, 4, &sf_type_f32, false, &w, err, sizeof err));
  CHECK_STR(err, "the CUDA driver is not loaded (no GPU on this thread)");
  int before = *aborts;
  sf__nccl_comm_free(c, false);
  CHECK_INT(*fake_int("fake_finalizes"), 1);
  CHECK_INT(*fake_int("fake_destroys"), 1);
  CHECK_INT(*aborts, before);
  unsetenv("FAKE_NCCL_INIT");
}

/* allreduce_mean's division kernels compile with the real NVRTC. */
static void test_div_kernels(void) {
  char why[256];
  CU_ASSERT_FATAL(sf__nvrtc_load(why, sizeof why));
  sf__blob img = {0};
  char *log = NULL;
  bool ok = sf__nvrtc_compile(sf__nccl_div_src, "sf_nccl_div", "sm_80", &img, &log);
  if (!ok)
    printf("\n%s\n", log ? log : "?");
  CU_ASSERT(ok);
  sf__blob_free(&img);
  free(log);
}

/* ------------------------------------------- groups across processes */

static void test_id_wire(void) {
  sf__nccl_id id, back;
  for (int i = 0; i < SF__NCCL_ID_BYTES; i++)
    id.bytes[i] = (unsigned char)(i * 7);
  uint8_t wire[SF__NCCL_ID_WIRE];
  char err[256];
  sf__nccl_id_pack(&id, 0x1122334455667788ull, 3, wire);
  CU_ASSERT(!memcmp(wire, "NCID\x88\x77\x66\x55\x44\x33\x22\x11\x03\0\0\0", 16));
  CU_ASSERT_FATAL(sf__nccl_id_unpack(wire, sizeof wire, 0x1122334455667788ull, 3, &back, err,
                                     sizeof err));
  CU_ASSERT(!memcmp(id.bytes, back.bytes, SF__NCCL_ID_BYTES));
  CU_ASSERT(!sf__nccl_id_unpack(wire, sizeof wire, 0x1122334455667788ull, 4, &back, err,
                                sizeof err));
  CHECK_STR(err, "an NCCL id for group 1234605616436508552 generation 3, not group "
                 "1234605616436508552 generation 4");
  CU_ASSERT(!sf__nccl_id_unpack(wire, 10, 0, 0, &back, err, sizeof err));
  CHECK_STR(err, "not an NCCL id (10 bytes)");
}

/* An in-memory control plane: one mailbox. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint8_t msg[SF__NCCL_ID_WIRE];
  bool full;
} box = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, false};

static bool box_send(void *ctx, const uint8_t *p, size_t n, char *err, size_t errn) {
  (void)ctx, (void)err, (void)errn;
  pthread_mutex_lock(&box.mu);
  memcpy(box.msg, p, n);
  box.full = true;
  pthread_cond_broadcast(&box.cv);
  pthread_mutex_unlock(&box.mu);
  return true;
}

static bool box_recv(void *ctx, uint8_t *p, size_t n, double limit, char *err, size_t errn) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)limit;
  ts.tv_nsec += (long)((limit - (double)(time_t)limit) * 1e9);
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&box.mu);
  while (!box.full && pthread_cond_timedwait(&box.cv, &box.mu, &ts) == 0) {
  }
  bool ok = box.full;
  if (ok)
    memcpy(p, box.msg, n);
  pthread_mutex_unlock(&box.mu);
  if (!ok)
    snprintf(err, errn, "no id within %g s", limit);
  return ok;
}

static sf__nccl_carrier carrier = {box_send, box_recv, NULL};
static sf__nccl_comm *joined[2];
static char join_err[2][512];

static void *join_rank(void *p) {
  int r = (int)(intptr_t)p;
  sf__nccl_watch w = {NULL, NULL, 5, NULL};
  joined[r] = sf__nccl_comm_join(r, 2, 42, 1, &carrier, &w, join_err[r], sizeof join_err[r]);
  return NULL;
}

static void test_join(void) {
  setenv("SFLOW_NCCL", fake_path, 1);
  setenv("FAKE_NCCL_INIT", "ok", 1);
  char err[512];
  CU_ASSERT_FATAL(sf__nccl_load(err, sizeof err));
  /* Member 1 first: it waits for the id member 0 sends. */
  pthread_t t[2];
  pthread_create(&t[1], NULL, join_rank, (void *)(intptr_t)1);
  nanosleep(&(struct timespec){0, 50000000}, NULL);
  pthread_create(&t[0], NULL, join_rank, (void *)(intptr_t)0);
  pthread_join(t[0], NULL);
  pthread_join(t[1], NULL);
  CU_ASSERT(joined[0] != NULL && joined[1] != NULL);
  if (!joined[0] || !joined[1])
    printf("\n  rank 0: %s\n  rank 1: %s\n", join_err[0], join_err[1]);
  sf__nccl_comm_free(joined[0], false);
  sf__nccl_comm_free(joined[1], false);
  /* A stale id (the generation before a restart) is refused. */
  sf__nccl_watch w = {NULL, NULL, 0.2, NULL};
  CU_ASSERT(sf__nccl_comm_join(1, 2, 42, 2, &carrier, &w, err, sizeof err) == NULL);
  CHECK_STR(err, "receiving the NCCL id from member 0: an NCCL id for group 42 generation 1, "
                 "not group 42 generation 2");
  /* No id at all: bounded by the watchdog's time. */
  box.full = false;
  double t0 = now_s();
  CU_ASSERT(sf__nccl_comm_join(1, 2, 42, 2, &carrier, &w, err, sizeof err) == NULL);
  CHECK_STR(err, "receiving the NCCL id from member 0: no id within 0.2 s");
  CU_ASSERT(now_s() - t0 < 2);
  unsetenv("FAKE_NCCL_INIT");
}

/* ------------------------------------ the transport of the interface */

/* Two members of one process through NCCL stacked on shared memory, with
 * host arrays: NCCL meets them through the host transport and hands the
 * call down, with no second meeting (a missing or extra barrier would
 * hang or mix two calls' buffers). */
static void *stacked;
static sf_array *part[2];

static void *member_main(void *p) {
  int64_t r = (int64_t)(intptr_t)p;
  for (int round = 0; round < 50; round++) {
    for (int64_t i = 0; i < part[r]->len; i++)
      ((float *)part[r]->data)[i] = (float)(r + 1) * (float)(i + round);
    sf__coll_buf b = {.a = part[r], .data = part[r]->data, .elem = part[r]->elem,
                      .count = part[r]->len, .what = "allreduce_sum", .gpu = -1};
    sf__coll_nccl.allreduce(stacked, r, &b, false, NULL);
    sf__coll_nccl.barrier(stacked, r, "barrier", NULL);
  }
  return NULL;
}

static void test_transport(void) {
  /* Shared memory is there without any install; NCCL and the ring only
   * once their layers register them. */
  CU_ASSERT(sf__coll_transports[SF__COLL_SHM] == &sf__coll_shm);
  CU_ASSERT(sf__coll_transports[SF__COLL_RING] == NULL);
  CU_ASSERT(sf__comm_new(2, SF__COLL_RING, NULL, 0) == NULL);
  sf__coll_transports[SF__COLL_NCCL] = NULL;
  sf__comm *c = sf__comm_new(2, SF__COLL_SHM, NULL, 0);
  CHECK_STR(sf__comm_transport(c), "shared memory");
  sf__comm_release(c);
  sf__gpu_install();
  CU_ASSERT(sf__coll_transports[SF__COLL_NCCL] == &sf__coll_nccl);
  c = sf__comm_new(2, SF__COLL_SHM, NULL, 0);
  CHECK_STR(sf__comm_transport(c), "nccl");
  sf__comm_release(c);
  c = sf__comm_new(1, SF__COLL_SHM, NULL, 0); /* a lone member meets no one */
  CHECK_STR(sf__comm_transport(c), "shared memory");
  sf__comm_release(c);

  for (int n = 10; n <= 5000; n += 4990) { /* the small path and the sliced one */
    _Atomic int64_t pending[2] = {0, 0};
    void *hs = sf__coll_shm.init(2, (const void *)pending);
    sf__coll_stack st = {&sf__coll_shm, hs, 0};
    stacked = sf__coll_nccl.init(2, &st);
    part[0] = sf_array_new(&sf_type_f32, n, NULL);
    part[1] = sf_array_new(&sf_type_f32, n, NULL);
    pthread_t t[2];
    for (intptr_t r = 0; r < 2; r++)
      pthread_create(&t[r], NULL, member_main, (void *)r);
    for (int r = 0; r < 2; r++)
      pthread_join(t[r], NULL);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
      for (int r = 0; r < 2; r++)
        bad += ((float *)part[r]->data)[i] != 3.0f * (float)(i + 49);
    if (bad)
      printf("\n  n %d: %d elements differ from 3 * (i + 49)\n", n, bad);
    CHECK_INT(bad, 0);
    sf__coll_nccl.destroy(stacked);
    sf__coll_shm.destroy(hs);
    sf_release(part[0]);
    sf_release(part[1]);
  }
}

/* Children fork from this process: the cases that load a library in the
 * parent (watchdog, join) come last. */
static const rt_test tests[] = {
    {"div_kernels", test_div_kernels},
    {"real_library", test_real_library},
    {"real_init_without_gpu", test_real_init_without_gpu},
    {"missing_library", test_missing_library},
    {"timeout_knob", test_timeout_knob},
    {"transport", test_transport},
    {"watchdog", test_watchdog},
    {"id_wire", test_id_wire},
    {"join", test_join},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  /* The fake library is built beside this test (tests/gpu/suite.cmake). */
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  self[k > 0 ? k : 0] = '\0';
  snprintf(fake_path, sizeof fake_path, "%s/libsflow_fake_nccl.so", dirname(self));
  return rt_run("rt_nccl", tests, argc, argv);
}
