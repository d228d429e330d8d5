/*
 * nccl.c — group collectives on device arrays over NCCL, with a watchdog.
 *
 * libnccl.so.2 is dlopen'ed at the first device collective that needs it,
 * like libcuda and NVRTC in gpu.c: an executable still starts on machines
 * without NCCL, and only a group that needs it hears about it.  No NCCL
 * header is included; the few types used are declared below with the ABI
 * values of nccl.h.
 *
 * Key design choice: never block inside NCCL.  NCCL has no timeout (a dead
 * peer leaves the others in a stream synchronize for ever), so every
 * communicator is non-blocking (config.blocking = 0) and every wait is a
 * polling loop (wait_for) over ncclCommGetAsyncError, the stream, the
 * group's "a member has failed" flag and a deadline ($SFLOW_NCCL_TIMEOUT,
 * default 300 s).  Whatever ends the wait early aborts the communicator
 * (on a helper thread, itself bounded: ncclCommAbort can hang while peers
 * are still inside NCCL) and becomes an error naming the collective, the
 * group and the cause.
 *
 * This file is also the collective interface's NCCL transport (sched.h,
 * sf__coll_transport; registered by sf__gpu_install), stacked on a group's
 * host transport: see "the NCCL transport" below.  NCCL needs one GPU per
 * rank, so members that share a GPU (fractional @gpus) stage through the
 * host instead.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"

/* nccl.h, ABI values. */
typedef int ncclResult_t;
enum { NCCL_OK = 0, NCCL_IN_PROGRESS = 7 };
typedef struct ncclComm *ncclComm_t;
enum { NCCL_INT8 = 0, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_INT64 = 4, NCCL_FLOAT32 = 7,
       NCCL_FLOAT64 = 8 };
enum { NCCL_SUM = 0 };
/* ncclConfig_t as of NCCL 2.14, the first with `blocking`: NCCL copies
 * config.size bytes and fills later fields with their defaults by
 * config.version, so this prefix works with every later library. */
typedef struct {
  size_t size;
  unsigned int magic, version;
  int blocking, cga_cluster_size, min_ctas, max_ctas;
  const char *net_name;
} nccl_config;
#define NCCL_CONFIG_MAGIC 0xcafebeefu
#define NCCL_UNDEF_INT (-2147483647 - 1)
#define NCCL_V2_14 21400 /* NCCL_VERSION(2, 14, 0) */

/* Driver calls for the communicator's stream (libcuda, through gpu.c). */
enum { CU_STREAM_NON_BLOCKING = 1, CU_ERROR_NOT_READY = 600 };

static struct {
  void *lib;
  bool ok;
  int version;
  char why[256];
  ncclResult_t (*get_version)(int *);
  ncclResult_t (*get_unique_id)(sf__nccl_id *);
  ncclResult_t (*init_rank_config)(ncclComm_t *, int, sf__nccl_id, int, nccl_config *);
  ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*abort)(ncclComm_t);
  ncclResult_t (*finalize)(ncclComm_t);
  ncclResult_t (*destroy)(ncclComm_t);
  ncclResult_t (*allreduce)(const void *, void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*broadcast)(const void *, void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*allgather)(const void *, void *, size_t, int, ncclComm_t, void *);
  const char *(*errstr)(ncclResult_t);
  const char *(*last_error)(ncclComm_t); /* 2.13+, may be NULL */
  int (*stream_create)(void **, unsigned);
  int (*stream_query)(void *);
  int (*stream_destroy)(void *);
  int (*stream_sync)(void *);
} L;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

struct sf__nccl_comm {
  ncclComm_t comm; /* NULL once aborted */
  void *stream;    /* CUstream of this rank's collectives */
  int rank, n;
  int dev;         /* the GPU it was made on */
  sf_array one;    /* barrier: one i32 on that GPU (only .dev used) */
  char why[SF__ERROR_MAX / 2]; /* why it was aborted */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------ loading */

static bool sym(void **slot, const char *name) {
  *slot = dlsym(L.lib, name);
  if (!*slot)
    snprintf(L.why, sizeof L.why, "the NCCL library lacks %s", name);
  return *slot != NULL;
}

static bool load(void) {
  const char *e = getenv("SFLOW_NCCL");
  if (e && (!strcmp(e, "off") || !strcmp(e, "0"))) {
    snprintf(L.why, sizeof L.why, "SFLOW_NCCL=%s turns NCCL off", e);
    return false;
  }
  const char *file = e && *e ? e : "libnccl.so.2";
  if (!(L.lib = dlopen(file, RTLD_NOW | RTLD_LOCAL))) {
    const char *d = dlerror();
    snprintf(L.why, sizeof L.why, "%s cannot be loaded (%s)", file, d ? d : "not found");
    return false;
  }
  if (!sym((void **)&L.get_version, "ncclGetVersion") ||
      !sym((void **)&L.errstr, "ncclGetErrorString"))
    return false;
  if (L.get_version(&L.version) != NCCL_OK || L.version < NCCL_V2_14) {
    char v[32];
    sf__nccl_version_string(v, sizeof v);
    snprintf(L.why, sizeof L.why, "%s is NCCL %s; sflow needs 2.14 or later (non-blocking "
             "communicators)", file, v);
    return false;
  }
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&L.get_unique_id, "ncclGetUniqueId"},
      {(void **)&L.init_rank_config, "ncclCommInitRankConfig"},
      {(void **)&L.async_error, "ncclCommGetAsyncError"}, {(void **)&L.abort, "ncclCommAbort"},
      {(void **)&L.finalize, "ncclCommFinalize"}, {(void **)&L.destroy, "ncclCommDestroy"},
      {(void **)&L.allreduce, "ncclAllReduce"}, {(void **)&L.broadcast, "ncclBroadcast"},
      {(void **)&L.allgather, "ncclAllGather"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
    if (!sym(syms[i].slot, syms[i].name))
      return false;
  L.last_error = (const char *(*)(ncclComm_t))dlsym(L.lib, "ncclGetLastError");
  return true;
}

static void load_init(void) {
  L.ok = load();
  if (!L.ok)
    L.version = L.version && L.lib ? L.version : 0;
}

bool sf__nccl_load(char *err, size_t n) {
  pthread_once(&load_once, load_init);
  if (!L.ok && err && n)
    snprintf(err, n, "%s", L.why);
  return L.ok;
}

int sf__nccl_version(void) { return L.lib ? L.version : 0; }

void sf__nccl_version_string(char *out, size_t n) {
  int v = sf__nccl_version();
  if (!v)
    snprintf(out, n, "not loaded");
  else if (v < 10000) /* before 2.9 NCCL coded X*1000 + Y*100 + Z */
    snprintf(out, n, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
  else
    snprintf(out, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

double sf__nccl_timeout(void) {
  const char *e = getenv("SFLOW_NCCL_TIMEOUT");
  double t;
  if (e && *e && sf__parse_f64(e, strlen(e), &t) == SF__PARSE_OK && t > 0)
    return t;
  return 300.0;
}

/* "ncclAllReduce failed: unhandled system error (NCCL error 2): <last error>" */
static void nccl_message(ncclComm_t comm, ncclResult_t rc, char *out, size_t n) {
  const char *s = L.errstr ? L.errstr(rc) : NULL;
  const char *last = comm && L.last_error ? L.last_error(comm) : NULL;
  snprintf(out, n, "%s (NCCL error %d)%s%s", s ? s : "unknown error", rc,
           last && *last ? ": " : "", last && *last ? last : "");
}

/* ------------------------------------------------------------ abort */

typedef struct {
  ncclComm_t comm;
  _Atomic int done;
} abort_job;

static void *abort_thread(void *p) {
  abort_job *j = p;
  L.abort(j->comm);
  if (atomic_exchange(&j->done, 1)) /* the caller gave up waiting: ours to free */
    free(j);
  return NULL;
}

/* ncclCommAbort, bounded: it can hang while a peer is still inside NCCL
 * (NVIDIA/nccl #863), so it runs on its own thread and the caller waits
 * at most 10 s for it; a hung abort is left behind, not waited for. */
static void abort_comm(ncclComm_t comm) {
  abort_job *j = calloc(1, sizeof *j);
  pthread_t t;
  if (!j)
    return;
  j->comm = comm;
  if (pthread_create(&t, NULL, abort_thread, j) != 0) {
    L.abort(comm);
    free(j);
    return;
  }
  pthread_detach(t);
  for (double t0 = now_s(); now_s() - t0 < 10 && !atomic_load(&j->done);)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (atomic_exchange(&j->done, 1))
    free(j);
}

/* Aborts c (once), after telling the group, and formats the error: false,
 * for `return fail(...)`. */
__attribute__((format(printf, 5, 6))) static bool fail(sf__nccl_comm *c, const sf__nccl_watch *w,
                                                       char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  if (w && w->failing)
    w->failing(w->ctx, err);
  if (c && c->comm) {
    snprintf(c->why, sizeof c->why, "%s", err);
    abort_comm(c->comm);
    c->comm = NULL;
  }
  return false;
}

/* ---------------------------------------------------------- waiting */

enum { WAIT_COMM, WAIT_STREAM };
#define HOT_POLL_S 0.002 /* polls without sleeping, on a machine with an idle core */

/* Polls until the communicator is ready (WAIT_COMM: init, finalize) or
 * until its stream has run the enqueued work (WAIT_STREAM), under the
 * watchdog.  The loop spins for up to HOT_POLL_S, then sleeps 50 us, then
 * (after 100 ms) 1 ms a poll: a collective's latency matters, a dead
 * peer's 1 ms does not. */
static bool wait_for(sf__nccl_comm *c, int kind, const char *what, const sf__nccl_watch *w,
                     char *err, size_t n) {
  double limit = w && w->timeout_s > 0 ? w->timeout_s : sf__nccl_timeout();
  double t0 = now_s();
  char why[SF__ERROR_MAX / 2], msg[512];
  sf__sched_block_begin();
  bool ok = false;
  for (;;) {
    ncclResult_t st = NCCL_OK, rc = L.async_error(c->comm, &st);
    if (rc != NCCL_OK)
      st = rc;
    if (st != NCCL_OK && st != NCCL_IN_PROGRESS) {
      nccl_message(c->comm, st, msg, sizeof msg);
      fail(c, w, err, n, "%s: NCCL reports %s", what, msg);
      break;
    }
    if (st == NCCL_OK) {
      int q = kind == WAIT_STREAM ? L.stream_query(c->stream) : 0;
      if (q == 0) {
        ok = true;
        break;
      }
      if (q != CU_ERROR_NOT_READY) {
        fail(c, w, err, n, "%s: the GPU stream failed (CUDA error %d)", what, q);
        break;
      }
    }
    if (w && w->failed && w->failed(w->ctx, why, sizeof why)) {
      fail(c, w, err, n, "%s", why);
      break;
    }
    if (now_s() - t0 > limit) {
      fail(c, w, err, n, "%s did not finish within %g s (SFLOW_NCCL_TIMEOUT): a member of the "
           "group is dead, stopped or not making the same call", what, limit);
      break;
    }
    /* Nothing wakes a thread when the GPU finishes, so it polls: a pure
     * spin for the first HOT_POLL_S while the machine has a core to spare
     * (sf__spin_ns), then sleeps between polls.  Never sched_yield: on a
     * busy machine it gives the core away for a whole time slice. */
    double waited = now_s() - t0;
    if (waited < HOT_POLL_S && sf__spin_ns() > 0)
      for (int k = 0; k < 64; k++)
        sf__cpu_relax();
    else
      nanosleep(&(struct timespec){0, waited < 0.1 ? 50000 : 1000000}, NULL);
  }
  sf__sched_block_end();
  return ok;
}

/* ---------------------------------------------------- communicators */

bool sf__nccl_new_id(sf__nccl_id *id, char *err, size_t n) {
  if (!sf__nccl_load(err, n))
    return false;
  ncclResult_t rc = L.get_unique_id(id);
  if (rc != NCCL_OK) {
    char msg[512];
    nccl_message(NULL, rc, msg, sizeof msg);
    snprintf(err, n, "ncclGetUniqueId failed: %s", msg);
    return false;
  }
  return true;
}

static bool stream_syms(char *err, size_t n) {
  if (L.stream_create)
    return true;
  L.stream_query = (int (*)(void *))sf__cuda_sym("cuStreamQuery");
  L.stream_destroy = (int (*)(void *))sf__cuda_sym("cuStreamDestroy_v2");
  L.stream_create = (int (*)(void **, unsigned))sf__cuda_sym("cuStreamCreate");
  L.stream_sync = (int (*)(void *))sf__cuda_sym("cuStreamSynchronize");
  if (!L.stream_create || !L.stream_query || !L.stream_destroy || !L.stream_sync) {
    snprintf(err, n, "the CUDA driver is not loaded (no GPU on this thread)");
    L.stream_create = NULL;
    return false;
  }
  return true;
}

sf__nccl_comm *sf__nccl_comm_init(const sf__nccl_id *id, int rank, int n,
                                  const sf__nccl_watch *w, char *err, size_t errn) {
  if (!sf__nccl_load(err, errn))
    return NULL;
  sf__nccl_comm *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errn, "out of memory");
    return NULL;
  }
  c->rank = rank;
  c->n = n;
  c->dev = sf__gpu_current_device();
  nccl_config cfg = {sizeof cfg, NCCL_CONFIG_MAGIC, NCCL_V2_14, 0, NCCL_UNDEF_INT,
                     NCCL_UNDEF_INT, NCCL_UNDEF_INT, NULL};
  ncclResult_t rc = L.init_rank_config(&c->comm, n, *id, rank, &cfg);
  if (rc != NCCL_OK && rc != NCCL_IN_PROGRESS) {
    char msg[512];
    nccl_message(c->comm, rc, msg, sizeof msg);
    snprintf(err, errn, "ncclCommInitRankConfig (rank %d of %d) failed: %s", rank, n, msg);
    if (c->comm)
      abort_comm(c->comm);
    free(c);
    return NULL;
  }
  char what[96];
  snprintf(what, sizeof what, "creating the NCCL communicator (rank %d of %d)", rank, n);
  if (!c->comm || !wait_for(c, WAIT_COMM, what, w, err, errn)) {
    if (!c->comm && rc == NCCL_OK)
      snprintf(err, errn, "%s: NCCL returned no communicator", what);
    free(c);
    return NULL;
  }
  return c;
}

/* The two halves of ending communicators, so that a group can start
 * finalizing every rank before it waits for any. */
static void finalize_start(sf__nccl_comm *c, bool abort) {
  if (!c || !c->comm)
    return;
  ncclResult_t rc = abort ? NCCL_OK : L.finalize(c->comm);
  if (abort || (rc != NCCL_OK && rc != NCCL_IN_PROGRESS)) {
    abort_comm(c->comm);
    c->comm = NULL;
  }
}

static void finalize_end(sf__nccl_comm *c) {
  if (!c)
    return;
  if (c->comm) {
    char err[256];
    sf__nccl_watch w = {NULL, NULL, 10, NULL};
    if (wait_for(c, WAIT_COMM, "ncclCommFinalize", &w, err, sizeof err))
      L.destroy(c->comm); /* a failed wait has aborted it */
  }
  if (c->stream)
    L.stream_destroy(c->stream);
  if (c->one.dev)
    sf__gpu_array_free(&c->one);
  free(c);
}

void sf__nccl_comm_free(sf__nccl_comm *c, bool abort) {
  finalize_start(c, abort);
  finalize_end(c);
}

/* ------------------------------------------- groups across processes */

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void sf__nccl_id_pack(const sf__nccl_id *id, uint64_t group, uint32_t generation,
                      uint8_t out[SF__NCCL_ID_WIRE]) {
  memcpy(out, "NCID", 4);
  put_le(out + 4, group, 8);
  put_le(out + 12, generation, 4);
  memcpy(out + 16, id->bytes, SF__NCCL_ID_BYTES);
}

bool sf__nccl_id_unpack(const uint8_t *p, size_t n, uint64_t group, uint32_t generation,
                        sf__nccl_id *id, char *err, size_t errn) {
  if (n != SF__NCCL_ID_WIRE || memcmp(p, "NCID", 4)) {
    snprintf(err, errn, "not an NCCL id (%zu bytes)", n);
    return false;
  }
  uint64_t g = get_le(p + 4, 8);
  uint32_t gen = (uint32_t)get_le(p + 12, 4);
  if (g != group || gen != generation) {
    snprintf(err, errn, "an NCCL id for group %" PRIu64 " generation %u, not group %" PRIu64
             " generation %u", g, gen, group, generation);
    return false;
  }
  memcpy(id->bytes, p + 16, SF__NCCL_ID_BYTES);
  return true;
}

sf__nccl_comm *sf__nccl_comm_join(int rank, int n, uint64_t group, uint32_t generation,
                                  const sf__nccl_carrier *carrier, const sf__nccl_watch *w,
                                  char *err, size_t errn) {
  sf__nccl_id id;
  uint8_t wire[SF__NCCL_ID_WIRE];
  char why[512];
  if (rank == 0) {
    if (!sf__nccl_new_id(&id, err, errn))
      return NULL;
    sf__nccl_id_pack(&id, group, generation, wire);
    if (!carrier->send(carrier->ctx, wire, sizeof wire, why, sizeof why)) {
      snprintf(err, errn, "sending the NCCL id to the group: %s", why);
      return NULL;
    }
  } else {
    double limit = w && w->timeout_s > 0 ? w->timeout_s : sf__nccl_timeout();
    if (!carrier->recv(carrier->ctx, wire, sizeof wire, limit, why, sizeof why)) {
      snprintf(err, errn, "receiving the NCCL id from member 0: %s", why);
      return NULL;
    }
    if (!sf__nccl_id_unpack(wire, sizeof wire, group, generation, &id, why, sizeof why)) {
      snprintf(err, errn, "receiving the NCCL id from member 0: %s", why);
      return NULL;
    }
  }
  return sf__nccl_comm_init(&id, rank, n, w, err, errn);
}

/* --------------------------------------------------------- collectives */

/* The NCCL type of an element, or -1: numbers keep their type (they are
 * reduced), other plain data travels as bytes, references never. */
static int dtype(const sf_type *t, int64_t *count) {
  switch (t->kind) {
  case SF_F32: return NCCL_FLOAT32;
  case SF_F64: return NCCL_FLOAT64;
  case SF_I32: return NCCL_INT32;
  case SF_I64: return NCCL_INT64;
  default:
    if (sf__type_has_refs(t))
      return -1;
    *count *= t->size;
    return NCCL_UINT8;
  }
}

/* Checks the outcome of enqueuing a collective, then waits for it. */
static bool finish(sf__nccl_comm *c, ncclResult_t rc, const char *what, const sf__nccl_watch *w,
                   char *err, size_t n) {
  if (rc != NCCL_OK && rc != NCCL_IN_PROGRESS) {
    char msg[512];
    nccl_message(c->comm, rc, msg, sizeof msg);
    return fail(c, w, err, n, "%s failed: %s", what, msg);
  }
  return wait_for(c, WAIT_STREAM, what, w, err, n);
}

/* A live communicator with its stream (made at the first collective, in
 * the context current now: the communicator's device). */
static bool usable(sf__nccl_comm *c, char *err, size_t n) {
  if (!c || !c->comm) {
    snprintf(err, n, "the NCCL communicator was aborted earlier: %s", c ? c->why : "none");
    return false;
  }
  if (!c->stream) {
    if (!stream_syms(err, n))
      return false;
    int q = L.stream_create(&c->stream, CU_STREAM_NON_BLOCKING);
    if (q != 0) {
      c->stream = NULL;
      snprintf(err, n, "cuStreamCreate failed (CUDA error %d)", q);
      return false;
    }
  }
  /* The stream is non-blocking: it does not wait for the legacy stream,
   * where the buffer was written (kernels, and a pageable cuMemcpyHtoD,
   * whose DMA may still run after the call returns).  The host waits for
   * the legacy stream's work first (nothing there after collective.c's
   * own wait; a legacy-stream hang would be the GPU's, not a peer's). */
  int q = L.stream_sync(NULL);
  if (q != 0) {
    snprintf(err, n, "the GPU's earlier work failed (CUDA error %d)", q);
    return false;
  }
  return true;
}

/* x[i] /= by on the device, by the same C division as the CPU path. */
const char sf__nccl_div_src[] =
    "#define DIV(name, T) extern \"C\" __global__ void name(long long n, T *x, T by) {\\\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\\\n"
    "  if (i < n) x[i] = x[i] / by; }\n"
    "DIV(sf_nccl_div_f32, float)\nDIV(sf_nccl_div_f64, double)\n"
    "DIV(sf_nccl_div_i32, int)\nDIV(sf_nccl_div_i64, long long)\n";

static void divide_on_device(uint64_t buf, int64_t count, const sf_type *t, int64_t by) {
  union { float f; double d; int32_t i; int64_t l; } v;
  const char *entry;
  switch (t->kind) {
  case SF_F32: v.f = (float)by; entry = "sf_nccl_div_f32"; break;
  case SF_F64: v.d = (double)by; entry = "sf_nccl_div_f64"; break;
  case SF_I32: v.i = (int32_t)by; entry = "sf_nccl_div_i32"; break;
  default: v.l = by; entry = "sf_nccl_div_i64"; break;
  }
  int block;
  void *fn = sf__gpu_function(sf__nccl_div_src, entry, &block, NULL);
  long long n = count;
  void *params[] = {&n, &buf, &v};
  sf__gpu_launch(fn, block, count, params, NULL);
}

bool sf__nccl_allreduce(sf__nccl_comm *c, uint64_t buf, int64_t count, const sf_type *elem,
                        bool mean, const sf__nccl_watch *w, char *err, size_t n) {
  int dt = dtype(elem, &count);
  if (!usable(c, err, n))
    return false;
  if (dt == NCCL_UINT8 || dt < 0) {
    snprintf(err, n, "arrays of %s cannot be reduced", elem->name);
    return false;
  }
  void *p = (void *)(uintptr_t)buf;
  if (!finish(c, L.allreduce(p, p, (size_t)count, dt, NCCL_SUM, c->comm, c->stream),
              "ncclAllReduce", w, err, n))
    return false;
  if (mean)
    divide_on_device(buf, count, elem, c->n);
  return true;
}

/* The NCCL type of elem for a collective that moves data (count scaled
 * to it), or -1 with err set when c cannot be used or elem cannot move. */
static int movable(sf__nccl_comm *c, const sf_type *elem, int64_t *count, char *err, size_t n) {
  int dt = dtype(elem, count);
  if (!usable(c, err, n))
    return -1;
  if (dt < 0)
    snprintf(err, n, "arrays of %s cannot be sent from the device", elem->name);
  return dt;
}

bool sf__nccl_broadcast(sf__nccl_comm *c, uint64_t buf, int64_t count, const sf_type *elem,
                        int root, const sf__nccl_watch *w, char *err, size_t n) {
  int dt = movable(c, elem, &count, err, n);
  if (dt < 0)
    return false;
  void *p = (void *)(uintptr_t)buf;
  return finish(c, L.broadcast(p, p, (size_t)count, dt, root, c->comm, c->stream),
                "ncclBroadcast", w, err, n);
}

bool sf__nccl_allgather(sf__nccl_comm *c, uint64_t send, uint64_t recv, int64_t count,
                        const sf_type *elem, const sf__nccl_watch *w, char *err, size_t n) {
  int dt = movable(c, elem, &count, err, n);
  if (dt < 0)
    return false;
  return finish(c, L.allgather((void *)(uintptr_t)send, (void *)(uintptr_t)recv,
                               (size_t)count, dt, c->comm, c->stream),
                "ncclAllGather", w, err, n);
}

bool sf__nccl_barrier(sf__nccl_comm *c, const sf__nccl_watch *w, char *err, size_t n) {
  if (!usable(c, err, n))
    return false;
  if (!c->one.dev) {
    c->one = (sf_array){.len = 1, .elem = &sf_type_i32};
    sf__gpu_device_alloc(&c->one, NULL);
  }
  uint64_t one = (uint64_t)(uintptr_t)c->one.dev;
  return finish(c, L.allreduce((void *)(uintptr_t)one, (void *)(uintptr_t)one, 1, NCCL_INT32,
                               NCCL_SUM, c->comm, c->stream),
                "ncclAllReduce (barrier)", w, err, n);
}

/* ------------------------------------------------ the NCCL transport */

/* The collective interface's device transport (sched.h), stacked on the
 * group's host transport: shared memory for a group of this process, the
 * TCP ring for a member on a worker.  It meets the members through the
 * host transport, so every member decides alike: on the device when every
 * member's array is there, of one shape, on a GPU of its own (NCCL needs
 * one GPU per rank); otherwise the host transport runs the call, which
 * copies device arrays to the host first.  The unique id goes from member
 * 0 to the others through the host transport's broadcast; one communicator
 * per member and incarnation of the group (a restarted group is a new
 * sf__comm, so a new id). */
typedef struct nstate {
  const sf__coll_transport *host;
  void *hs;
  uint64_t id;            /* the group's incarnation: in the packed id */
  int64_t n;
  sf__nccl_comm **comm;   /* per member, made on the member's thread at its
                             first device collective (shared memory: every
                             member's; the ring: this member's alone) */
  _Atomic bool failed;    /* a device collective failed: abort, not finalize */
} nstate;

static void *nccl_init(int64_t n, const void *arg) {
  const sf__coll_stack *st = arg;
  nstate *g = calloc(1, sizeof *g);
  if (!g || !(g->comm = calloc((size_t)n, sizeof *g->comm))) {
    free(g);
    return NULL;
  }
  g->host = st->host;
  g->hs = st->hs;
  g->id = st->id;
  g->n = n;
  return g;
}

/* Finalize every member's communicator first, then destroy: finalizing
 * one rank may wait for the others. */
static void nccl_destroy(void *s) {
  nstate *g = s;
  char why[8];
  bool abort = atomic_load(&g->failed) || g->host->failed(g->hs, why, sizeof why);
  for (int64_t k = 0; k < g->n; k++)
    finalize_start(g->comm[k], abort);
  for (int64_t k = 0; k < g->n; k++)
    finalize_end(g->comm[k]);
  free(g->comm);
  free(g);
}

static bool nccl_off(void) {
  const char *e = getenv("SFLOW_NCCL");
  return e && (!strcmp(e, "off") || !strcmp(e, "0"));
}

/* The GPU this member offers its array on, or -1: its only current copy
 * is on a device and its elements travel as NCCL types (numbers, for a
 * reduction).  A member of a group across processes also needs NCCL here
 * (else, with a notice once, the group stages through the host); in one
 * process every member sees the same library, and device_ok raises. */
static int64_t offer(const nstate *g, const sf__coll_buf *b) {
  sf_array *a = b->a;
  if (!a || a->where != SF__WHERE_DEVICE || !a->dev || g->n > 64)
    return -1;
  int64_t one = 1;
  int dt = dtype(a->elem, &one);
  if (dt < 0 || (b->reduce && dt == NCCL_UINT8))
    return -1;
  if (!g->host->shared_memory) {
    char why[256];
    if (!a->len || nccl_off())
      return -1;
    if (!sf__nccl_load(why, sizeof why)) {
      static _Atomic int told;
      if (!atomic_exchange(&told, 1))
        sf__notice("node %lld: %s; device collectives of groups here stage through the host",
                   (long long)sf__node_id, why);
      return -1;
    }
  }
  return sf__node_id * 4096 + sf__gpu_array_device(a);
}

/* The members meet: true when the group runs this call on the device.
 * Raises when NCCL is needed in this process but cannot load. */
static bool device_ok(nstate *g, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  b->gpu = offer(g, b);
  sf__coll_view v;
  g->host->meet(g->hs, rank, b, &v, loc);
  if (v.shares[0] >= 0) {
    static _Atomic int told;
    if (!atomic_exchange(&told, 1))
      sf__notice("members %" PRId64 " and %" PRId64 " of a group share GPU %d: their "
                 "device collectives go through the host (NCCL needs one GPU per member)",
                 v.shares[0], v.shares[1], (int)(b->gpu % 4096));
    return false;
  }
  if (!v.device || nccl_off())
    return false;
  char why[256];
  if (!sf__nccl_load(why, sizeof why)) {
    /* Members of one process may still be reading this one's buffer (on
     * its stack) from the meeting; every member raises here alike. */
    if (g->host->shared_memory)
      g->host->barrier(g->hs, rank, b->what, loc);
    sf_runtime_error(loc, "%s: the group's arrays are on %" PRId64 " GPUs, which needs NCCL, "
                     "but %s (install NCCL 2.14 or later, name the library with SFLOW_NCCL, "
                     "or set SFLOW_NCCL=off to stage device collectives through the host)",
                     b->what, g->n, why);
  }
  return true;
}

/* The watchdog's view of the group: the host transport's "can no longer
 * meet", and telling it that this member failed before it aborts its
 * communicator (shared memory wakes the members waiting for it; the ring's
 * peers are bounded by its timeout). */
typedef struct {
  nstate *g;
  int64_t rank;
} member;

static bool host_failed(void *ctx, char *why, size_t n) {
  member *m = ctx;
  return m->g->host->failed(m->g->hs, why, n);
}

static void host_abort(void *ctx, const char *why) {
  member *m = ctx;
  m->g->host->member_failed(m->g->hs, m->rank, why);
}

/* "group of actor 'Trainer' (member 1 of 2)" */
static void group_name(int64_t rank, int64_t n, char *out, size_t len) {
  sf_actor *a = sf__current_actor();
  const sf_actor_desc *d = a ? sf__actor_desc(a) : NULL;
  snprintf(out, len, "group of actor '%s' (member %" PRId64 " of %" PRId64 ")",
           d ? d->name : "?", rank, n);
}

_Noreturn static void group_error(nstate *g, int64_t rank, const sf__dev_op *op,
                                  const char *cause, const sf_loc *loc) {
  char name[160], what[SF__ERROR_MAX / 2 + 64];
  group_name(rank, g->n, name, sizeof name);
  atomic_store(&g->failed, true);
  snprintf(what, sizeof what, "an earlier collective failed: %s", cause);
  g->host->abort(g->hs, rank, what); /* every later collective fails at once */
  sf_runtime_error(loc, "%s on the device (NCCL), %s: %s", op->what, name, cause);
}

/* The id, packed, from member 0 to the others over the host transport.
 * Member 0 broadcasts zeros when it could not make one, so that the
 * others fail with its reason's place instead of waiting. */
static const sf_type wire_type = {.kind = SF_BOOL, .size = 1, .align = 1, .name = "byte"};

static bool share_id(nstate *g, int64_t rank, const char *what, sf__nccl_id *id, char *err,
                     size_t n, const sf_loc *loc) {
  uint8_t wire[SF__NCCL_ID_WIRE] = {0};
  bool made = rank != 0 || sf__nccl_new_id(id, err, n);
  if (rank == 0 && made)
    sf__nccl_id_pack(id, g->id, 0, wire);
  sf__coll_buf b = {.data = wire, .elem = &wire_type, .count = sizeof wire, .what = what,
                    .gpu = -1};
  g->host->broadcast(g->hs, rank, &b, 0, loc);
  if (rank == 0 || !made)
    return made;
  char why[256];
  if (!sf__nccl_id_unpack(wire, sizeof wire, g->id, 0, id, why, sizeof why)) {
    snprintf(err, n, "member 0 made no NCCL id (%s)", why);
    return false;
  }
  return true;
}

/* Runs op on the device for member rank; raises on failure, naming the
 * collective, the group and the cause. */
static void run_on_device(nstate *g, int64_t rank, sf_array *a, sf__dev_op *op,
                          const sf_loc *loc) {
  member me = {g, rank};
  sf__nccl_watch w = {host_failed, &me, 0, host_abort};
  char err[SF__ERROR_MAX / 2];
  if (!sf__gpu_ready(loc)) /* unreachable: an array on the device means a GPU */
    sf_runtime_error(loc, "%s: the array is on a GPU but the GPU is not usable", op->what);
  /* The member's context, current on this thread: its array's device. */
  sf__gpu_use_device(sf__gpu_array_device(a));
  if (!g->comm[rank]) {
    sf__nccl_id id;
    /* Members of one process may still be reading each other's buffers
     * from the meeting; the id's broadcast brings new ones. */
    if (g->host->shared_memory)
      g->host->barrier(g->hs, rank, op->what, loc);
    if (!share_id(g, rank, op->what, &id, err, sizeof err, loc))
      group_error(g, rank, op, err, loc);
    if (!(g->comm[rank] = sf__nccl_comm_init(&id, (int)rank, (int)g->n, &w, err, sizeof err)))
      group_error(g, rank, op, err, loc);
  }
  if (!sf__nccl_run(g->comm[rank], a, g->n, op, &w, err, sizeof err, loc))
    group_error(g, rank, op, err, loc);
  /* Members of one process read each other's buffers when they meet: a
   * root may finish before the last member has read them. */
  if (g->host->shared_memory)
    g->host->barrier(g->hs, rank, op->what, loc);
}

static void nccl_allreduce(void *s, int64_t rank, sf__coll_buf *b, bool mean, const sf_loc *loc) {
  nstate *g = s;
  b->reduce = b->same_len = true;
  if (!device_ok(g, rank, b, loc)) {
    g->host->allreduce(g->hs, rank, b, mean, loc);
    return;
  }
  sf__dev_op op = {.kind = SF__DEV_ALLREDUCE, .what = b->what, .mean = mean};
  run_on_device(g, rank, b->a, &op, loc);
}

static void nccl_broadcast(void *s, int64_t rank, sf__coll_buf *b, int64_t root,
                           const sf_loc *loc) {
  nstate *g = s;
  b->same_len = true;
  if (!device_ok(g, rank, b, loc)) {
    g->host->broadcast(g->hs, rank, b, root, loc);
    return;
  }
  sf__dev_op op = {.kind = SF__DEV_BROADCAST, .what = b->what, .root = root};
  run_on_device(g, rank, b->a, &op, loc);
}

/* NCCL's allgather takes one length from every member: device_ok's view
 * requires it. */
static sf_array *nccl_allgather(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  nstate *g = s;
  if (!device_ok(g, rank, b, loc))
    return g->host->allgather(g->hs, rank, b, loc);
  sf__dev_op op = {.kind = SF__DEV_ALLGATHER, .what = b->what};
  run_on_device(g, rank, b->a, &op, loc);
  return op.out;
}

/* reduce_scatter on the device is NCCL's allreduce, of which the member
 * keeps its shard: ncclReduceScatter takes one count per rank (shards
 * here differ by one element) and need not sum in the allreduce's order,
 * and the shard must hold the allreduce's bits.  The host path is the
 * host transport's reduce_scatter, as the allreduce's is its allreduce. */
static void nccl_reduce_scatter(void *s, int64_t rank, sf__coll_buf *b, bool mean,
                                const sf_loc *loc) {
  nstate *g = s;
  b->reduce = b->same_len = true;
  if (!device_ok(g, rank, b, loc)) {
    g->host->reduce_scatter(g->hs, rank, b, mean, loc);
    return;
  }
  sf__dev_op op = {.kind = SF__DEV_ALLREDUCE, .what = b->what, .mean = mean};
  run_on_device(g, rank, b->a, &op, loc);
}

/* all_gather of shards on the device: one ncclBroadcast per member of its
 * shard, in place (the shards' counts differ, which ncclAllGather does not
 * take). */
static void nccl_all_gather(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  nstate *g = s;
  b->same_len = true;
  if (!device_ok(g, rank, b, loc)) {
    g->host->all_gather(g->hs, rank, b, loc);
    return;
  }
  sf__dev_op op = {.kind = SF__DEV_SHARDS, .what = b->what};
  run_on_device(g, rank, b->a, &op, loc);
}

/* A barrier moves no array: the host transport's. */
static void nccl_barrier(void *s, int64_t rank, const char *what, const sf_loc *loc) {
  nstate *g = s;
  g->host->barrier(g->hs, rank, what, loc);
}

static void nccl_abort(void *s, int64_t rank, const char *why) {
  nstate *g = s;
  g->host->abort(g->hs, rank, why);
}

static void nccl_member_failed(void *s, int64_t rank, const char *why) {
  nstate *g = s;
  g->host->member_failed(g->hs, rank, why);
}

static bool nccl_failed(void *s, char *why, size_t n) {
  nstate *g = s;
  return g->host->failed(g->hs, why, n);
}

const sf__coll_transport sf__coll_nccl = {
    .name = "nccl", .init = nccl_init, .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast, .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter, .all_gather = nccl_all_gather, .barrier = nccl_barrier,
    .abort = nccl_abort, .member_failed = nccl_member_failed, .failed = nccl_failed,
    .destroy = nccl_destroy};

bool sf__nccl_run(sf__nccl_comm *nc, sf_array *a, int64_t n, sf__dev_op *op,
                  const sf__nccl_watch *w, char *err, size_t errn, const sf_loc *loc) {
  uint64_t p = (uint64_t)(uintptr_t)a->dev;
  if (nc->dev != sf__gpu_array_device(a)) { /* moved since: back to the rank's GPU */
    sf__gpu_use_device(nc->dev);
    p = sf__gpu_device_copy(a, loc);
  }
  bool ok;
  switch (op->kind) {
  case SF__DEV_ALLREDUCE:
    ok = sf__nccl_allreduce(nc, p, a->len, a->elem, op->mean, w, err, errn);
    break;
  case SF__DEV_BROADCAST:
    ok = sf__nccl_broadcast(nc, p, a->len, a->elem, (int)op->root, w, err, errn);
    break;
  case SF__DEV_SHARDS: {
    ok = true;
    size_t es = (size_t)a->elem->size;
    for (int64_t k = 0; k < n && ok; k++) {
      int64_t lo, hi;
      sf__coll_shard(a->len, k, n, &lo, &hi);
      if (hi > lo)
        ok = sf__nccl_broadcast(nc, p + (uint64_t)lo * es, hi - lo, a->elem, (int)k, w, err, errn);
    }
    break;
  }
  default: {
    sf_array *out = sf_array_new(a->elem, a->len * n, loc);
    uint64_t q = sf__gpu_device_alloc(out, loc);
    ok = sf__nccl_allgather(nc, p, q, a->len, a->elem, w, err, errn);
    if (ok) {
      sf__gpu_device_wrote(out);
      op->out = out;
    } else {
      sf_release(out);
    }
  }
  }
  if (ok)
    sf__gpu_device_wrote(a); /* settled (copied back) with this thread's other device work */
  return ok;
}
