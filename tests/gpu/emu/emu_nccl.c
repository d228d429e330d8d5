/*
 * emu_nccl.c — the emulator's in-process NCCL (ranks are threads, each on
 * its own emulated device).
 */
#include "emu.h"

/* ================================================================= NCCL */
/*
 * An in-process NCCL (SFLOW_NCCL=libsflow_emu.so): the ranks of a
 * communicator are threads of this process, each on its own emulated
 * device.  A collective is matched across ranks by its sequence number on
 * each communicator; the last rank to enqueue it runs it (sums in rank
 * order), and until then the other ranks' streams are not ready, so the
 * runtime's watchdog polls it as it polls a GPU.  Ranks in other processes
 * are not emulated (nccl_check stays a GPU test).
 */
enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER };
typedef struct {
  unsigned char b[128];
} NcclId;
#define NCCL_ID_MAGIC "SFEMUNCCL"

typedef struct Op {
  int kind, dtype, redop, root, n, arrived, refs;
  size_t count;
  uint64_t seq;
  const void **send;
  void **recv;
  bool done;
  struct Op *next;
} Op;
typedef struct NGroup {
  NcclId id;
  int n, joined, gone;
  struct NComm **ranks;
  Op *ops;
  struct NGroup *next;
} NGroup;
typedef struct NComm {
  uint32_t magic;
  NGroup *g;
  int rank, dev;
  uint64_t seq;
  int async;
  char last[400];
} NComm;
#define NCOMM_MAGIC 0x4e434f4du

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  NGroup *groups;
  uint64_t ids;
  char last[400];
} NC = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, ""};

static void op_unref(Op *o) {
  if (--o->refs == 0 && o->done) {
    free(o->send);
    free(o->recv);
    free(o);
  }
}

/* Is the collective stream s waits for done (waiting for it when asked)?
 * A done one is dropped from the stream. */
bool stream_ready(void *sv, bool wait) {
  Stream *s = sv;
  if (!s->pending)
    return true;
  pthread_mutex_lock(&NC.mu);
  while (wait && !s->pending->done)
    pthread_cond_wait(&NC.cv, &NC.mu);
  bool done = s->pending->done;
  if (done) {
    Op *o = s->pending;
    s->pending = NULL;
    op_unref(o);
  }
  pthread_mutex_unlock(&NC.mu);
  return done;
}

/* A destroyed stream lets go of its collective, done or not. */
void stream_drop(Stream *s) {
  if (!s->pending)
    return;
  pthread_mutex_lock(&NC.mu);
  Op *o = s->pending;
  s->pending = NULL;
  op_unref(o);
  pthread_mutex_unlock(&NC.mu);
}

API int ncclGetVersion(int *v) {
  *v = 29900; /* "2.99.0": the emulator's, not a real NCCL's */
  return ncclSuccess;
}
API const char *ncclGetErrorString(int rc) {
  switch (rc) {
  case 0: return "no error";
  case 1: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case 2: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case 3: return "internal error - please report this issue to the NCCL developers";
  case 4: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case 5: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case 6: return "remote process exited or there was a network error";
  case 7: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
API const char *ncclGetLastError(NComm *c) {
  return c && c->magic == NCOMM_MAGIC && c->last[0] ? c->last : NC.last;
}
API int ncclGetUniqueId(NcclId *id) {
  memset(id, 0, sizeof *id);
  memcpy(id->b, NCCL_ID_MAGIC, sizeof NCCL_ID_MAGIC);
  pthread_mutex_lock(&NC.mu);
  uint64_t k = ++NC.ids;
  pthread_mutex_unlock(&NC.mu);
  uint64_t pid = (uint64_t)getpid(), t = (uint64_t)(now_ms() * 1e3);
  memcpy(id->b + 16, &pid, 8);
  memcpy(id->b + 24, &k, 8);
  memcpy(id->b + 32, &t, 8);
  return ncclSuccess;
}

/* Records an error on c (its async state and last message); under NC.mu. */
static int comm_error(NComm *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int comm_error(NComm *c, int rc, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(NC.last, sizeof NC.last, "%s", msg);
  if (c) {
    snprintf(c->last, sizeof c->last, "%s", msg);
    c->async = rc;
  }
  say("NCCL: %s", msg);
  return rc;
}

static int init_rank(NComm **out, int n, NcclId id, int rank, bool blocking) {
  if (!out || n < 1 || rank < 0 || rank >= n || memcmp(id.b, NCCL_ID_MAGIC, sizeof NCCL_ID_MAGIC)) {
    pthread_mutex_lock(&NC.mu);
    comm_error(NULL, 0, "ncclCommInitRank: invalid arguments (rank %d of %d, or not an id from "
               "ncclGetUniqueId)", rank, n);
    pthread_mutex_unlock(&NC.mu);
    return ncclInvalidArgument;
  }
  if (!G.inited || !cur_ctx) {
    pthread_mutex_lock(&NC.mu);
    comm_error(NULL, 0, "ncclCommInitRank: no CUDA context is current on this thread");
    pthread_mutex_unlock(&NC.mu);
    return ncclUnhandledCudaError;
  }
  pthread_mutex_lock(&NC.mu);
  NGroup *g = NC.groups;
  while (g && memcmp(&g->id, &id, sizeof id))
    g = g->next;
  if (!g) {
    g = calloc(1, sizeof *g);
    g->id = id;
    g->n = n;
    g->ranks = calloc((size_t)n, sizeof *g->ranks);
    g->next = NC.groups;
    NC.groups = g;
  }
  int rc = ncclSuccess;
  if (g->n != n)
    rc = comm_error(NULL, ncclInvalidUsage, "ncclCommInitRank: rank %d says %d ranks, another "
                    "rank said %d", rank, n, g->n);
  else if (g->ranks[rank])
    rc = comm_error(NULL, ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
  for (int r = 0; rc == ncclSuccess && r < n; r++)
    if (g->ranks[r] && g->ranks[r]->dev == cur_ctx->dev)
      rc = comm_error(NULL, ncclInvalidUsage, "ncclCommInitRank: ranks %d and %d are both on "
                      "device %d (NCCL needs one device per rank)", r, rank, cur_ctx->dev);
  if (rc != ncclSuccess) {
    pthread_mutex_unlock(&NC.mu);
    return rc;
  }
  NComm *c = calloc(1, sizeof *c);
  c->magic = NCOMM_MAGIC;
  c->g = g;
  c->rank = rank;
  c->dev = cur_ctx->dev;
  c->async = ncclInProgress;
  g->ranks[rank] = c;
  if (++g->joined == n) {
    for (int r = 0; r < n; r++)
      g->ranks[r]->async = ncclSuccess;
    pthread_cond_broadcast(&NC.cv);
  }
  while (blocking && c->async == ncclInProgress)
    pthread_cond_wait(&NC.cv, &NC.mu);
  rc = c->async;
  pthread_mutex_unlock(&NC.mu);
  *out = c;
  return rc;
}

/* config: ncclConfig_t; its `blocking` field follows size_t size and two
 * unsigned ints (magic, version).  NULL: blocking, as NCCL's default. */
API int ncclCommInitRankConfig(NComm **out, int n, NcclId id, int rank, void *config) {
  bool blocking = true;
  if (config) {
    int b;
    memcpy(&b, (char *)config + sizeof(size_t) + 2 * sizeof(unsigned), sizeof b);
    blocking = b != 0;
  }
  return init_rank(out, n, id, rank, blocking);
}
API int ncclCommInitRank(NComm **out, int n, NcclId id, int rank) {
  return init_rank(out, n, id, rank, true);
}
static bool valid_comm(const NComm *c) { return c && c->magic == NCOMM_MAGIC; }
API int ncclCommGetAsyncError(NComm *c, int *st) {
  if (!valid_comm(c))
    return ncclInvalidArgument;
  pthread_mutex_lock(&NC.mu);
  *st = c->async;
  pthread_mutex_unlock(&NC.mu);
  return ncclSuccess;
}
API int ncclCommCount(const NComm *c, int *n) {
  if (!valid_comm(c))
    return ncclInvalidArgument;
  *n = c->g->n;
  return ncclSuccess;
}
API int ncclCommUserRank(const NComm *c, int *r) {
  if (!valid_comm(c))
    return ncclInvalidArgument;
  *r = c->rank;
  return ncclSuccess;
}
API int ncclCommCuDevice(const NComm *c, int *d) {
  if (!valid_comm(c))
    return ncclInvalidArgument;
  *d = c->dev;
  return ncclSuccess;
}
API int ncclGroupStart(void) { return ncclSuccess; }
API int ncclGroupEnd(void) { return ncclSuccess; }
API int ncclCommFinalize(NComm *c) { return valid_comm(c) ? ncclSuccess : ncclInvalidArgument; }

/* Takes c out of its group (the group goes with its last member); under NC.mu. */
static void leave_group(NComm *c) {
  NGroup *g = c->g;
  g->ranks[c->rank] = NULL;
  c->magic = 0;
  free(c);
  if (++g->gone < g->n)
    return;
  for (NGroup **pp = &NC.groups; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      break;
    }
  for (Op *o = g->ops, *next; o; o = next) {
    next = o->next;
    o->done = true; /* never completes now; streams still holding it drop it */
    if (o->refs == 0) {
      free(o->send);
      free(o->recv);
      free(o);
    }
  }
  free(g->ranks);
  free(g);
  pthread_cond_broadcast(&NC.cv);
}
API int ncclCommDestroy(NComm *c) {
  if (!valid_comm(c))
    return ncclInvalidArgument;
  pthread_mutex_lock(&NC.mu);
  leave_group(c);
  pthread_mutex_unlock(&NC.mu);
  return ncclSuccess;
}
/* As NCCL: an aborted rank's peers are not told; they wait until their own
 * watchdog gives up. */
API int ncclCommAbort(NComm *c) { return ncclCommDestroy(c); }

static size_t nccl_size(int t) {
  switch (t) {
  case 0: case 1: return 1;
  case 2: case 3: case 7: return 4;
  case 4: case 5: case 8: return 8;
  case 9: return 2;
  default: return 0; /* float16 and unknown types: not emulated */
  }
}

/* dst[i] = dst[i] (op) src[i] for one element type, in place. */
#define REDUCE(T)                                                                        \
  do {                                                                                   \
    T *d = dst;                                                                          \
    const T *s = src;                                                                    \
    for (size_t i = 0; i < n; i++)                                                       \
      d[i] = op == 1 ? (T)(d[i] * s[i]) : op == 2 ? (d[i] > s[i] ? d[i] : s[i])          \
           : op == 3 ? (d[i] < s[i] ? d[i] : s[i]) : (T)(d[i] + s[i]);                   \
  } while (0)
static void reduce_into(void *dst, const void *src, size_t n, int t, int op) {
  switch (t) {
  case 0: REDUCE(int8_t); break;
  case 1: REDUCE(uint8_t); break;
  case 2: REDUCE(int32_t); break;
  case 3: REDUCE(uint32_t); break;
  case 4: REDUCE(int64_t); break;
  case 5: REDUCE(uint64_t); break;
  case 7: REDUCE(float); break;
  case 8: REDUCE(double); break;
  case 9: {
    uint16_t *d = dst;
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++) {
      float a = bf16_to_f32(d[i]), b = bf16_to_f32(s[i]);
      d[i] = f32_to_bf16(op == 1 ? a * b : op == 2 ? fmaxf(a, b) : op == 3 ? fminf(a, b) : a + b);
    }
    break;
  }
  }
}
#undef REDUCE
static void divide(void *x, size_t n, int t, int by) {
  for (size_t i = 0; i < n; i++)
    switch (t) {
    case 0: ((int8_t *)x)[i] /= by; break;
    case 1: ((uint8_t *)x)[i] /= by; break;
    case 2: ((int32_t *)x)[i] /= by; break;
    case 3: ((uint32_t *)x)[i] /= (uint32_t)by; break;
    case 4: ((int64_t *)x)[i] /= by; break;
    case 5: ((uint64_t *)x)[i] /= (uint64_t)by; break;
    case 7: ((float *)x)[i] /= (float)by; break;
    case 8: ((double *)x)[i] /= by; break;
    case 9: ((uint16_t *)x)[i] = f32_to_bf16(bf16_to_f32(((uint16_t *)x)[i]) / (float)by); break;
    }
}

/* Runs a collective every rank has enqueued; under NC.mu. */
static void run_op(Op *o) {
  size_t es = nccl_size(o->dtype), bytes = o->count * es;
  int n = o->n;
  if (o->kind == OP_ALLGATHER) {
    char *tmp = malloc(bytes * (size_t)n + 1);
    for (int k = 0; k < n; k++)
      memcpy(tmp + (size_t)k * bytes, o->send[k], bytes);
    for (int r = 0; r < n; r++)
      memcpy(o->recv[r], tmp, bytes * (size_t)n);
    free(tmp);
  } else {
    char *tmp = malloc(bytes + 1);
    if (o->kind == OP_BROADCAST) {
      memcpy(tmp, o->send[o->root], bytes);
    } else {
      memcpy(tmp, o->send[0], bytes);
      for (int k = 1; k < n; k++)
        reduce_into(tmp, o->send[k], o->count, o->dtype, o->redop);
      if (o->redop == 4)
        divide(tmp, o->count, o->dtype, n);
    }
    for (int r = 0; r < n; r++)
      memcpy(o->recv[r], tmp, bytes);
    free(tmp);
  }
}

static bool nccl_mem(NComm *c, const char *fn, const char *what, const void *p, size_t n) {
  if (n == 0)
    return true;
  pthread_mutex_lock(&M.mu);
  Alloc *a = find_range((uintptr_t)p, n);
  bool ok = a && a->kind == MEM_DEVICE && a->dev == c->dev;
  char why[200] = "";
  if (!ok) {
    if (a)
      snprintf(why, sizeof why, "memory of device %d, but rank %d is on device %d", a->dev,
               c->rank, c->dev);
    else
      describe((uintptr_t)p, why, sizeof why);
  }
  pthread_mutex_unlock(&M.mu);
  if (!ok) { /* refused at once (a GPU would fault later), the communicator kept */
    pthread_mutex_lock(&NC.mu);
    comm_error(NULL, 0, "%s (rank %d): the %s buffer %p + %zu bytes is not device memory of "
               "the rank's device: %s", fn, c->rank, what, p, n, why);
    snprintf(c->last, sizeof c->last, "%s", NC.last);
    pthread_mutex_unlock(&NC.mu);
  }
  return ok;
}

/* Asynchronous mode: does a collective still waiting for a rank use
 * [base, base + size)?  Freeing that memory is a bug a GPU shows as
 * garbage (or a cuMemFree that waits for a peer for ever). */
const char *nccl_uses(uintptr_t base, size_t size) {
  const char *what = NULL;
  pthread_mutex_lock(&NC.mu);
  for (NGroup *g = NC.groups; g && !what; g = g->next)
    for (Op *o = g->ops; o && !what; o = o->next) {
      if (o->done)
        continue;
      size_t bytes = o->count * nccl_size(o->dtype);
      for (int r = 0; r < o->n && !what; r++) {
        uintptr_t sp = (uintptr_t)o->send[r], rp = (uintptr_t)o->recv[r];
        size_t rb = o->kind == OP_ALLGATHER ? bytes * (size_t)o->n : bytes;
        if ((sp && sp < base + size && sp + bytes > base) || (rp && rp < base + size && rp + rb > base))
          what = o->kind == OP_ALLREDUCE ? "ncclAllReduce" : o->kind == OP_BROADCAST ? "ncclBroadcast" : "ncclAllGather";
      }
    }
  pthread_mutex_unlock(&NC.mu);
  return what;
}

static int enqueue(NComm *c, const char *fn, int kind, const void *send, void *recv, size_t count,
                   int dtype, int redop, int root, void *stream) {
  if (!valid_comm(c))
    return ncclInvalidArgument;
  if (!valid_stream(stream))
    return ncclInvalidArgument;
  /* Asynchronous mode: the collective runs when the last rank enqueues it,
   * so what its stream must wait for runs first: the stream's own queue,
   * and the legacy stream's work when the stream is blocking.  A
   * CU_STREAM_NON_BLOCKING stream's collective does not wait for stream 0:
   * kernels still queued there that write its buffers have not run. */
  if (G.async && cur_ctx) {
    q_sync_stream(stream);
  }
  pthread_mutex_lock(&NC.mu);
  NGroup *g = c->g;
  size_t es = nccl_size(dtype);
  int rc = ncclSuccess;
  if (c->async != ncclSuccess)
    rc = c->async == ncclInProgress
             ? comm_error(c, ncclInvalidUsage, "%s (rank %d): the communicator is not ready yet",
                          fn, c->rank)
             : c->async;
  else if (!es)
    rc = comm_error(c, ncclInvalidArgument, "%s (rank %d): data type %d is not emulated", fn,
                    c->rank, dtype);
  else if (kind == OP_ALLREDUCE && (redop < 0 || redop > 4))
    rc = comm_error(c, ncclInvalidArgument, "%s (rank %d): reduction %d", fn, c->rank, redop);
  else if (kind == OP_BROADCAST && (root < 0 || root >= g->n))
    rc = comm_error(c, ncclInvalidArgument, "%s (rank %d): root %d of %d ranks", fn, c->rank,
                    root, g->n);
  pthread_mutex_unlock(&NC.mu);
  if (rc != ncclSuccess)
    return rc;
  size_t bytes = count * es, rbytes = kind == OP_ALLGATHER ? bytes * (size_t)g->n : bytes;
  if ((!(kind == OP_BROADCAST && c->rank != root) && !nccl_mem(c, fn, "send", send, bytes)) ||
      !nccl_mem(c, fn, "receive", recv, rbytes))
    return ncclUnhandledCudaError;
  pthread_mutex_lock(&NC.mu);
  uint64_t seq = c->seq++;
  Op *o = g->ops;
  while (o && o->seq != seq)
    o = o->next;
  if (!o) {
    o = calloc(1, sizeof *o);
    o->kind = kind, o->dtype = dtype, o->redop = redop, o->root = root, o->count = count;
    o->n = g->n;
    o->seq = seq;
    o->send = calloc((size_t)g->n, sizeof *o->send);
    o->recv = calloc((size_t)g->n, sizeof *o->recv);
    o->next = g->ops;
    g->ops = o;
  } else if (o->kind != kind || o->count != count || o->dtype != dtype ||
             (kind == OP_ALLREDUCE && o->redop != redop) || (kind == OP_BROADCAST && o->root != root)) {
    static const char *const kinds[] = {"ncclAllReduce", "ncclBroadcast", "ncclAllGather"};
    rc = comm_error(c, ncclInvalidUsage, "collective %llu: rank %d calls %s of %zu elements of "
                    "type %d, another rank %s of %zu of type %d (every rank must make the same "
                    "calls in the same order)", (unsigned long long)seq, c->rank, fn, count, dtype,
                    kinds[o->kind], o->count, o->dtype);
    /* The ranks already in it learn it too, and their streams stop waiting. */
    for (int r = 0; r < g->n; r++)
      if (o->recv[r] && g->ranks[r]) {
        g->ranks[r]->async = rc;
        snprintf(g->ranks[r]->last, sizeof g->ranks[r]->last, "%s", c->last);
      }
    o->done = true;
    for (Op **pp = &g->ops; *pp; pp = &(*pp)->next)
      if (*pp == o) {
        *pp = o->next;
        break;
      }
    if (o->refs == 0) {
      free(o->send);
      free(o->recv);
      free(o);
    }
    pthread_cond_broadcast(&NC.cv);
    pthread_mutex_unlock(&NC.mu);
    return rc;
  }
  o->send[c->rank] = send;
  o->recv[c->rank] = recv;
  if (++o->arrived == o->n) {
    run_op(o);
    o->done = true;
    for (Op **pp = &g->ops; *pp; pp = &(*pp)->next)
      if (*pp == o) {
        *pp = o->next;
        break;
      }
    pthread_cond_broadcast(&NC.cv);
  }
  if ((uintptr_t)stream > 2) {
    Stream *s = stream;
    if (s->pending) { /* the one before it on this stream runs first */
      Op *prev = s->pending;
      while (!prev->done)
        pthread_cond_wait(&NC.cv, &NC.mu);
      s->pending = NULL;
      op_unref(prev);
    }
    s->pending = o;
    o->refs++;
  } else {
    o->refs++;
    while (!o->done)
      pthread_cond_wait(&NC.cv, &NC.mu);
    op_unref(o);
  }
  if (o->done && o->refs == 0) {
    free(o->send);
    free(o->recv);
    free(o);
  }
  pthread_mutex_unlock(&NC.mu);
  return ncclSuccess;
}

API int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, NComm *c,
                      void *stream) {
  return enqueue(c, "ncclAllReduce", OP_ALLREDUCE, send, recv, count, dtype, op, 0, stream);
}
API int ncclBroadcast(const void *send, void *recv, size_t count, int dtype, int root, NComm *c,
                      void *stream) {
  return enqueue(c, "ncclBroadcast", OP_BROADCAST, send, recv, count, dtype, 0, root, stream);
}
API int ncclAllGather(const void *send, void *recv, size_t count, int dtype, NComm *c,
                      void *stream) {
  return enqueue(c, "ncclAllGather", OP_ALLGATHER, send, recv, count, dtype, 0, 0, stream);
}
