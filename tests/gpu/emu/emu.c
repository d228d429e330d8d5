/*
 * emu.c — a host emulator of the CUDA driver API, NVRTC and cuBLAS: one
 * shared library (libsflow_emu.so) that stands in for libcuda.so.1,
 * libnvrtc and libcublas, so that sflow's GPU code paths and the real
 * kernel sources run in `make test` on a machine without a GPU.
 *
 *   SFLOW_CUDA=.../libsflow_emu.so SFLOW_NVRTC=.../libsflow_emu.so \
 *   SFLOW_CUBLAS=.../libsflow_emu.so ./program --require-gpu
 *
 * It is a test tool, not a GPU, and says so: the device is named "sflow
 * host emulator (not a GPU)", NVRTC reports version 99.0 (so the kernel
 * cache never mixes its images with a real NVRTC's).  What it checks that
 * a GPU would only get wrong silently or later: every driver call needs
 * cuInit and a current context; a kernel's pointer parameters, every copy,
 * memset and free must name device memory of the current device
 * (allocations are end-aligned against a guard page, filled with 0xff
 * bytes, so a read of never-written memory shows as NaN / -1); a
 * __syncthreads() that not every thread of a block reaches is a deadlock,
 * reported, never a hang; a crash inside a kernel names the kernel, block
 * and thread.  What it cannot catch: races (threads of a block switch only
 * at barriers), the memory model, warp behaviour, real performance, and
 * cuBLAS's algorithms (its products are plain loops).
 *
 * Key design choices:
 *  - NVRTC: nvrtcCompileProgram runs the host C++ compiler (SFLOW_EMU_CXX,
 *    default c++) on the program with cuda_shim.h force-included, after a
 *    preprocessing pass that finds the `__global__` functions; the shared
 *    object it makes exports a trampoline per kernel that unpacks
 *    cuLaunchKernel's `void **params` by the kernel's own parameter types.
 *    Objects are content-addressed (a hash of the source, options, shim
 *    and compiler) in SFLOW_EMU_CACHE, default <kernel cache>/emu, so a
 *    module already built is never compiled again, by any process.  The
 *    "CUBIN" is a small image naming that object and carrying the source,
 *    so a cleaned cache rebuilds instead of failing.
 *  - Launches run synchronously, blocks one after another, the threads of
 *    a block as fibers (an 8-register context switch on x86-64, ucontext
 *    elsewhere) switched at __syncthreads() and thread exit; one launch at
 *    a time in the process (a mutex), which CUDA's stream semantics allow.
 *  - SFLOW_EMU_ASYNC=1 ("asynchronous mode", below the memory section)
 *    queues launches, copies, memsets and cuBLAS products per stream and
 *    runs them only where CUDA makes the host wait, so stream-ordering
 *    bugs (a read that does not wait, NCCL's non-blocking stream running
 *    before stream 0's kernels) change results instead of passing.
 *  - Memory is host memory: a device pointer is a host address.
 *
 * Files (over emu.h): emu.c the helpers, contexts, memory, copies, the
 * asynchronous mode's queues, streams and the device-operation counter
 * (SFLOW_EMU_COUNT); emu_nvrtc.c NVRTC and modules; emu_launch.c the
 * fibers and cuLaunchKernel; emu_blas.c cuBLAS and cuBLASLt; emu_nccl.c
 * NCCL.
 */
#include "emu.h"

/* ----------------------------------------------------------- helpers */

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof buf - 2)
    n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  fputs("sflow-emu: ", stderr);
  fwrite(buf, 1, (size_t)n, stderr);
  fflush(stderr);
}

long env_long(const char *name, long dflt) {
  const char *e = getenv(name);
  if (!e || !*e)
    return dflt;
  char *end;
  long v = strtol(e, &end, 10);
  return *end ? dflt : v;
}
bool env_on(const char *name, bool dflt) {
  const char *e = getenv(name);
  if (!e || !*e)
    return dflt;
  return strcmp(e, "0") != 0;
}

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

char *xstrdup(const char *s) {
  char *d = strdup(s ? s : "");
  if (!d)
    abort();
  return d;
}



static const struct {
  int code;
  const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

API CUresult cuGetErrorString(CUresult rc, const char **s) {
  for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
    if (errors[i].code == rc) {
      *s = errors[i].text;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGetErrorName(CUresult rc, const char **s) {
  for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
    if (errors[i].code == rc) {
      *s = errors[i].name;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* The library's version string: how a caller can tell the emulator from a
 * driver (dlsym "sf_emu_version"). */
API const char *sf_emu_version(void) { return EMU_VERSION; }


EmuGlobals G = {.once = PTHREAD_ONCE_INIT};

__thread Ctx *cur_ctx;
static __thread Ctx *ctx_stack[16];
static __thread int ctx_depth;

static void global_init(void) {
  long n = env_long("SFLOW_EMU_DEVICES", 1);
  G.ndev = n < 0 ? 0 : n > MAX_DEV ? MAX_DEV : (int)n;
  long mb = env_long("SFLOW_EMU_MEM_MB", 16384);
  G.total_mem = (uint64_t)(mb > 0 ? mb : 16384) << 20;
  for (int i = 0; i < MAX_DEV; i++)
    G.ctx[i] = (Ctx){CTX_MAGIC, i};
  G.guard = env_on("SFLOW_EMU_GUARD", true);
  G.poison = env_on("SFLOW_EMU_POISON", true);
  G.check_ptrs = env_on("SFLOW_EMU_CHECK_PTRS", true);
  G.trace = env_on("SFLOW_EMU_TRACE", false);
  G.async = env_on("SFLOW_EMU_ASYNC", false);
  G.page = (size_t)sysconf(_SC_PAGESIZE);
}

CUresult no_context(const char *fn) {
  say("%s: no current context on this thread (cuCtxSetCurrent was not called here)", fn);
  return CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuInit(unsigned flags) {
  pthread_once(&G.once, global_init);
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (G.ndev == 0)
    return CUDA_ERROR_NO_DEVICE;
  G.inited = true;
  return CUDA_SUCCESS;
}
API CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetCount(int *n) {
  NEED_INIT();
  *n = G.ndev;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(int *dev, int ordinal) {
  NEED_INIT();
  if (ordinal < 0 || ordinal >= G.ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetName(char *name, int len, int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= G.ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "sflow host emulator (not a GPU) #%d", dev);
  return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= G.ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  *bytes = G.total_mem;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= G.ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
  case 1: *v = 1024; break;          /* max threads per block */
  case 2: case 3: *v = 1024; break;  /* max block dim x, y */
  case 4: *v = 64; break;            /* z */
  case 5: *v = 0x7fffffff; break;    /* max grid dim x */
  case 6: case 7: *v = 65535; break; /* y, z */
  case 8: *v = 49152; break;         /* shared memory per block */
  case 9: *v = 65536; break;         /* constant memory */
  case 10: *v = 32; break;           /* warp size */
  case 12: *v = 65536; break;        /* registers per block */
  case 13: *v = 1980000; break;      /* clock rate, kHz */
  case 16: *v = 132; break;          /* multiprocessors */
  case 39: *v = 2048; break;         /* threads per multiprocessor */
  case 41: *v = 1; break;            /* unified addressing */
  case 75: *v = 9; break;            /* compute capability: 9.0, "sm_90" */
  case 76: *v = 0; break;
  case 81: *v = 233472; break;       /* shared memory per multiprocessor */
  case 97: *v = 232448; break;       /* max shared memory per block, opt-in */
  default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= G.ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  *ctx = &G.ctx[dev];
  return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  NEED_INIT();
  return dev >= 0 && dev < G.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
static bool valid_ctx(const void *c) {
  const Ctx *x = c;
  return x >= G.ctx && x < G.ctx + G.ndev && x->magic == CTX_MAGIC;
}
API CUresult cuCtxSetCurrent(void *ctx) {
  NEED_INIT();
  if (ctx && !valid_ctx(ctx))
    return CUDA_ERROR_INVALID_CONTEXT;
  cur_ctx = ctx;
  return CUDA_SUCCESS;
}
API CUresult cuCtxGetCurrent(void **ctx) {
  NEED_INIT();
  *ctx = cur_ctx;
  return CUDA_SUCCESS;
}
API CUresult cuCtxGetDevice(int *dev) {
  NEED_CTX();
  *dev = cur_ctx->dev;
  return CUDA_SUCCESS;
}
API CUresult cuCtxPushCurrent_v2(void *ctx) {
  NEED_INIT();
  if (!valid_ctx(ctx) || ctx_depth == 16)
    return CUDA_ERROR_INVALID_VALUE;
  ctx_stack[ctx_depth++] = cur_ctx;
  cur_ctx = ctx;
  return CUDA_SUCCESS;
}
API CUresult cuCtxPopCurrent_v2(void **ctx) {
  NEED_CTX();
  if (ctx)
    *ctx = cur_ctx;
  cur_ctx = ctx_depth ? ctx_stack[--ctx_depth] : NULL;
  return CUDA_SUCCESS;
}
void q_sync_device(int dev);
CUresult q_error(int dev);
API CUresult cuCtxSynchronize(void) {
  NEED_CTX();
  q_sync_device(cur_ctx->dev);
  return G.async ? q_error(cur_ctx->dev) : CUDA_SUCCESS;
}

/* ------------------------------------------------- counting device operations
 *
 * SFLOW_EMU_COUNT=1 counts the device operations a program issues: kernel
 * launches, cuBLAS products, copies and memsets, each at its API call (in
 * either mode), and prints one line at exit,
 *   sflow-emu-count: launches=L blas=B copies=C sets=S ops=L+B+C+S
 * SFLOW_EMU_COUNT=names adds a line per kernel or call name with its count
 * (most first).  What a GPU profiler would show as kernels, cuBLAS calls
 * and memcpy/memset rows; a cuBLAS call counts once whatever kernels it
 * would run on a GPU. */
typedef struct {
  const char *name;
  uint64_t n;
} CountName;
static struct {
  pthread_mutex_t mu;
  int mode; /* 0 off, 1 totals, 2 names */
  uint64_t n[EMU_KINDS];
  CountName names[512];
  int nnames;
} CNT = {.mu = PTHREAD_MUTEX_INITIALIZER, .mode = -1};

static int cnt_cmp(const void *a, const void *b) {
  uint64_t x = ((const CountName *)a)->n, y = ((const CountName *)b)->n;
  return x < y ? 1 : x > y ? -1 : 0;
}

__attribute__((destructor)) static void count_report(void) {
  if (CNT.mode <= 0)
    return;
  uint64_t *n = CNT.n;
  fprintf(stderr,
          "sflow-emu-count: launches=%llu blas=%llu copies=%llu sets=%llu ops=%llu\n",
          (unsigned long long)n[EMU_LAUNCH], (unsigned long long)n[EMU_BLAS],
          (unsigned long long)n[EMU_COPY], (unsigned long long)n[EMU_SET],
          (unsigned long long)(n[EMU_LAUNCH] + n[EMU_BLAS] + n[EMU_COPY] + n[EMU_SET]));
  if (CNT.mode == 2) {
    qsort(CNT.names, (size_t)CNT.nnames, sizeof CNT.names[0], cnt_cmp);
    for (int i = 0; i < CNT.nnames; i++)
      fprintf(stderr, "sflow-emu-count: %s %llu\n", CNT.names[i].name,
              (unsigned long long)CNT.names[i].n);
  }
}

void emu_count(int kind, const char *name) {
  if (CNT.mode == 0)
    return;
  pthread_mutex_lock(&CNT.mu);
  if (CNT.mode < 0) {
    const char *e = getenv("SFLOW_EMU_COUNT");
    CNT.mode = !e || !*e || !strcmp(e, "0") ? 0 : !strcmp(e, "names") ? 2 : 1;
  }
  if (CNT.mode > 0) {
    CNT.n[kind]++;
    if (CNT.mode == 2) {
      int i = 0;
      while (i < CNT.nnames && strcmp(CNT.names[i].name, name))
        i++;
      if (i == CNT.nnames && i < (int)(sizeof CNT.names / sizeof CNT.names[0])) {
        CNT.names[i].name = xstrdup(name);
        CNT.nnames++;
      }
      if (i < CNT.nnames)
        CNT.names[i].n++;
    }
  }
  pthread_mutex_unlock(&CNT.mu);
}

/* -------------------------------------------------------------- memory */


EmuAllocs M = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Index of the first allocation with base > p, under M.mu. */
size_t upper(uintptr_t p) {
  size_t lo = 0, hi = M.n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (M.a[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The allocation holding [p, p + n) (n 0: p may be its end), under M.mu. */
Alloc *find_range(uintptr_t p, size_t n) {
  size_t i = upper(p);
  if (i == 0)
    return NULL;
  Alloc *a = &M.a[i - 1];
  if (p + n < p || p + n > a->base + a->size || (n > 0 && p >= a->base + a->size))
    return NULL;
  return a;
}

void insert_alloc(Alloc al) {
  if (M.n == M.cap) {
    M.cap = M.cap ? M.cap * 2 : 256;
    Alloc *na = realloc(M.a, M.cap * sizeof *na);
    if (!na)
      abort();
    M.a = na;
  }
  size_t i = upper(al.base);
  memmove(M.a + i + 1, M.a + i, (M.n - i) * sizeof *M.a);
  M.a[i] = al;
  M.n++;
}

/* Describes p for a message: which allocation it falls in or near. */
void describe(uintptr_t p, char *out, size_t n) {
  size_t i = upper(p);
  if (i > 0) {
    Alloc *a = &M.a[i - 1];
    if (p < a->base + a->size) {
      snprintf(out, n, "inside the %s of %zu bytes at %#lx (offset %zu)",
               a->kind == MEM_HOST ? "pinned host buffer" : "allocation", a->size,
               (unsigned long)a->base, (size_t)(p - a->base));
      return;
    }
    if (p - (a->base + a->size) < (1u << 20)) {
      snprintf(out, n, "%zu bytes past the end of the allocation of %zu bytes at %#lx",
               (size_t)(p - (a->base + a->size)), a->size, (unsigned long)a->base);
      return;
    }
  }
  snprintf(out, n, "not device memory (a host pointer, freed memory, or garbage)");
}

CUresult mem_alloc(uintptr_t *out, size_t size, int dev, int kind) {
  if (size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&M.mu);
  if (kind == MEM_DEVICE && G.used[dev] + size > G.total_mem) {
    pthread_mutex_unlock(&M.mu);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&M.mu);
  Alloc al = {0, size, NULL, 0, dev, kind};
  size_t rounded = (size + 255) & ~(size_t)255;
  if (G.guard) {
    size_t len = ((rounded + G.page - 1) & ~(G.page - 1)) + G.page;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
      return CUDA_ERROR_OUT_OF_MEMORY;
    mprotect((char *)m + len - G.page, G.page, PROT_NONE);
    al.map = m;
    al.map_len = len;
    al.base = (uintptr_t)m + len - G.page - rounded;
  } else {
    void *m = aligned_alloc(256, rounded);
    if (!m)
      return CUDA_ERROR_OUT_OF_MEMORY;
    al.map = m;
    al.base = (uintptr_t)m;
  }
  if (G.poison && kind == MEM_DEVICE)
    memset((void *)al.base, 0xff, size);
  pthread_mutex_lock(&M.mu);
  insert_alloc(al);
  if (kind == MEM_DEVICE)
    G.used[dev] += size;
  pthread_mutex_unlock(&M.mu);
  *out = al.base;
  return CUDA_SUCCESS;
}

CUresult mem_free(uintptr_t p, int kind, const char *fn) {
  pthread_mutex_lock(&M.mu);
  size_t i = upper(p);
  if (i == 0 || M.a[i - 1].base != p || M.a[i - 1].kind != kind) {
    char why[200];
    describe(p, why, sizeof why);
    pthread_mutex_unlock(&M.mu);
    say("%s(%#lx): not the start of a live %s: %s (a double free?)", fn, (unsigned long)p,
        kind == MEM_HOST ? "pinned host buffer" : "device allocation", why);
    return CUDA_ERROR_INVALID_VALUE;
  }
  Alloc a = M.a[i - 1];
  memmove(M.a + i - 1, M.a + i, (M.n - i) * sizeof *M.a);
  M.n--;
  if (kind == MEM_DEVICE)
    G.used[a.dev] -= a.size;
  pthread_mutex_unlock(&M.mu);
  if (a.map_len)
    munmap(a.map, a.map_len);
  else
    free(a.map);
  return CUDA_SUCCESS;
}

/* Is [p, p + n) device (or pinned) memory?  Otherwise a loud message. */
bool check_range(const char *fn, const char *what, uintptr_t p, size_t n) {
  if (n == 0)
    return true;
  pthread_mutex_lock(&M.mu);
  Alloc *a = find_range(p, n);
  bool ok = a != NULL;
  char why[200] = "";
  if (!ok) {
    size_t i = upper(p);
    if (i > 0 && p >= M.a[i - 1].base && p < M.a[i - 1].base + M.a[i - 1].size)
      snprintf(why, sizeof why, "it runs %zu bytes past the end of the allocation of %zu bytes at %#lx",
               (size_t)(p + n - (M.a[i - 1].base + M.a[i - 1].size)), M.a[i - 1].size,
               (unsigned long)M.a[i - 1].base);
    else
      describe(p, why, sizeof why);
  }
  pthread_mutex_unlock(&M.mu);
  if (!ok)
    say("%s: the %s %#lx + %zu bytes is not inside one device allocation: %s", fn, what,
        (unsigned long)p, n, why);
  return ok;
}

API CUresult cuMemAlloc_v2(uint64_t *dptr, size_t size) {
  NEED_CTX();
  uintptr_t p = 0;
  CUresult rc = mem_alloc(&p, size, cur_ctx->dev, MEM_DEVICE);
  *dptr = p;
  return rc;
}
API CUresult cuMemFree_v2(uint64_t dptr) {
  NEED_CTX();
  if (dptr == 0)
    return CUDA_SUCCESS;
  q_sync_device(cur_ctx->dev); /* cuMemFree synchronises the device */
  if (G.async) {
    const char *coll = NULL;
    pthread_mutex_lock(&M.mu);
    Alloc *a = find_range((uintptr_t)dptr, 0);
    uintptr_t base = a ? a->base : 0;
    size_t size = a ? a->size : 0;
    pthread_mutex_unlock(&M.mu);
    if (a && base == (uintptr_t)dptr)
      coll = nccl_uses(base, size);
    if (coll) {
      say("cuMemFree(%#lx): an unfinished %s (waiting for another rank) still uses this memory",
          (unsigned long)dptr, coll);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  return mem_free((uintptr_t)dptr, MEM_DEVICE, "cuMemFree");
}
API CUresult cuMemAllocHost_v2(void **pp, size_t size) {
  NEED_CTX();
  uintptr_t p = 0;
  CUresult rc = mem_alloc(&p, size, cur_ctx->dev, MEM_HOST);
  *pp = (void *)p;
  return rc;
}
API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) {
  (void)flags;
  return cuMemAllocHost_v2(pp, size);
}
API CUresult cuMemFreeHost(void *p) {
  NEED_CTX();
  q_sync_device(cur_ctx->dev);
  return mem_free((uintptr_t)p, MEM_HOST, "cuMemFreeHost");
}
API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
  NEED_CTX();
  pthread_mutex_lock(&M.mu);
  *total = G.total_mem;
  *free_b = G.total_mem - G.used[cur_ctx->dev];
  pthread_mutex_unlock(&M.mu);
  return CUDA_SUCCESS;
}


/* ----------------------------------------------- asynchronous mode
 *
 * SFLOW_EMU_ASYNC=1 queues every launch, copy, memset and cuBLAS product
 * on its stream (the legacy default stream per device, each created stream
 * apart) and runs the queue only where CUDA's semantics make the host wait
 * for it, so work that the runtime orders wrongly shows: a kernel reading
 * a buffer the host rewrote or re-issued before the stream got to it, a
 * result read without waiting for the stream that writes it.  The points
 * that run queued work, as CUDA documents them:
 *  - cuCtxSynchronize, cuMemFree / cuMemFreeHost (they synchronise the
 *    device): every queue of the current device;
 *  - the legacy stream (cuMemcpyDtoH, cuStreamSynchronize(0)): the blocking
 *    streams' work first (the legacy stream waits for them), then its own;
 *  - a created stream (cuStreamSynchronize/Query, an event recorded on it):
 *    the legacy stream first when it is a blocking stream, then its own;
 *    a CU_STREAM_NON_BLOCKING stream (nccl.c's) never waits for stream 0.
 * Pageable host memory given to an HtoD copy (sync or async) is staged at
 * the call, as CUDA does; pinned memory is read when the copy runs.  A
 * kernel's parameters are copied at the launch, as the driver does.  Work
 * that fails when it runs (a kernel's trap, memory freed since it was
 * queued) is reported then, and its error returned by the next call that
 * waits on that device. */
EmuQueues Q = {.mu = PTHREAD_MUTEX_INITIALIZER, .run = PTHREAD_MUTEX_INITIALIZER};

static Queue *q_of(void *s) {
  return (uintptr_t)s <= 2 ? &Q.legacy[cur_ctx->dev] : &((Stream *)s)->q;
}

void q_push(void *s, CUresult (*run)(void *), void *arg) {
  Work *w = malloc(sizeof *w);
  if (!w)
    abort();
  *w = (Work){run, arg, 0, NULL};
  pthread_mutex_lock(&Q.mu);
  w->seq = ++Q.seq;
  Queue *q = q_of(s);
  if (q->tail)
    q->tail->next = w;
  else
    q->head = w;
  q->tail = w;
  pthread_mutex_unlock(&Q.mu);
}

static Work *q_pop(Queue *q) {
  Work *w = q->head;
  if (w) {
    q->head = w->next;
    if (!q->head)
      q->tail = NULL;
  }
  return w;
}

static void q_exec(Work *w, int dev) {
  CUresult rc = w->run(w->arg);
  pthread_mutex_lock(&Q.mu);
  if (rc != CUDA_SUCCESS && Q.err[dev] == CUDA_SUCCESS)
    Q.err[dev] = rc;
  pthread_mutex_unlock(&Q.mu);
  free(w->arg);
  free(w);
}

/* Runs q's work in order (a non-blocking stream's: it waits for nothing). */
static void q_drain(Queue *q, int dev) {
  pthread_mutex_lock(&Q.run);
  for (;;) {
    pthread_mutex_lock(&Q.mu);
    Work *w = q_pop(q);
    pthread_mutex_unlock(&Q.mu);
    if (!w)
      break;
    q_exec(w, dev);
  }
  pthread_mutex_unlock(&Q.run);
}

/* Runs the work of dev's legacy stream and blocking streams issued up to
 * seq `upto`, in issue order: the legacy stream waits for the blocking
 * streams' earlier work and they wait for its, so issue order is an order
 * CUDA may run them in (two blocking streams' may also overlap). */
static void q_drain_ordered(int dev, uint64_t upto) {
  pthread_mutex_lock(&Q.run);
  for (;;) {
    pthread_mutex_lock(&Q.mu);
    Queue *best = Q.legacy[dev].head && Q.legacy[dev].head->seq <= upto ? &Q.legacy[dev] : NULL;
    for (Stream *s = Q.streams; s; s = s->next_live)
      if (s->dev == dev && s->blocking && s->q.head && s->q.head->seq <= upto &&
          (!best || s->q.head->seq < best->head->seq))
        best = &s->q;
    Work *w = best ? q_pop(best) : NULL;
    pthread_mutex_unlock(&Q.mu);
    if (!w)
      break;
    q_exec(w, dev);
  }
  pthread_mutex_unlock(&Q.run);
}

/* A created stream of dev with queued work. */
static Stream *q_next_stream(int dev) {
  pthread_mutex_lock(&Q.mu);
  Stream *s = Q.streams;
  while (s && (s->dev != dev || !s->q.head))
    s = s->next_live;
  pthread_mutex_unlock(&Q.mu);
  return s;
}

/* The first error of work that ran on dev since the last call that asked. */
CUresult q_error(int dev) {
  pthread_mutex_lock(&Q.mu);
  CUresult rc = Q.err[dev];
  Q.err[dev] = CUDA_SUCCESS;
  pthread_mutex_unlock(&Q.mu);
  return rc;
}

void q_sync_legacy(int dev) {
  if (G.async)
    q_drain_ordered(dev, UINT64_MAX);
}

void q_sync_stream(void *s) {
  if (!G.async)
    return;
  if ((uintptr_t)s <= 2) {
    q_sync_legacy(cur_ctx->dev);
    return;
  }
  Stream *x = s;
  if (!x->blocking) {
    q_drain(&x->q, x->dev);
    return;
  }
  for (;;) { /* its work, and the legacy stream's before each item */
    pthread_mutex_lock(&Q.mu);
    uint64_t upto = x->q.tail ? x->q.tail->seq : 0;
    pthread_mutex_unlock(&Q.mu);
    if (!upto)
      break;
    q_drain_ordered(x->dev, upto);
  }
}

void q_sync_device(int dev) {
  if (!G.async)
    return;
  q_sync_legacy(dev);
  for (Stream *s; (s = q_next_stream(dev));)
    q_drain(&s->q, dev);
}

/* Is p inside pinned host memory (cuMemAllocHost)? */
static bool is_pinned(const void *p) {
  pthread_mutex_lock(&M.mu);
  Alloc *a = find_range((uintptr_t)p, 1);
  bool pinned = a && a->kind == MEM_HOST;
  pthread_mutex_unlock(&M.mu);
  return pinned;
}

enum { C_DST_DEV = 1, C_SRC_DEV = 2 };
typedef struct {
  const char *fn;
  uintptr_t dst, src; /* src 0: the staged bytes below */
  size_t n;
  int dev_sides;
  unsigned char staged[];
} CopyW;

/* A queued copy, its device sides checked again when it runs: memory
 * freed (or re-used by the allocator's cuMemFree) since the call is loud. */
static CUresult copy_run(void *arg) {
  CopyW *c = arg;
  const void *src = c->src ? (const void *)c->src : c->staged;
  if (((c->dev_sides & C_DST_DEV) && !check_range(c->fn, "destination (when the queued copy ran)", c->dst, c->n)) ||
      ((c->dev_sides & C_SRC_DEV) && c->src && !check_range(c->fn, "source (when the queued copy ran)", c->src, c->n)))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  memmove((void *)c->dst, src, c->n);
  return CUDA_SUCCESS;
}

/* Queues a copy on s; stage: copy the source bytes now (pageable memory). */
static void q_copy(void *s, const char *fn, uintptr_t dst, const void *src, size_t n, int sides,
                   bool stage) {
  CopyW *c = malloc(sizeof *c + (stage ? n : 0));
  if (!c)
    abort();
  *c = (CopyW){fn, dst, stage ? 0 : (uintptr_t)src, n, sides};
  if (stage)
    memcpy(c->staged, src, n);
  q_push(s, copy_run, c);
}

typedef struct {
  const char *fn;
  uintptr_t dst;
  size_t count;
  int width;
  unsigned v;
} SetW;
static CUresult set_run(void *arg) {
  SetW *m = arg;
  if (!check_range(m->fn, "destination (when the queued memset ran)", m->dst, m->count * m->width))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (size_t i = 0; i < m->count; i++)
    if (m->width == 1)
      ((unsigned char *)m->dst)[i] = (unsigned char)m->v;
    else if (m->width == 2)
      ((unsigned short *)m->dst)[i] = (unsigned short)m->v;
    else
      ((unsigned *)m->dst)[i] = m->v;
  return CUDA_SUCCESS;
}
static void q_set(void *s, const char *fn, uintptr_t dst, size_t count, int width, unsigned v) {
  SetW *m = malloc(sizeof *m);
  if (!m)
    abort();
  *m = (SetW){fn, dst, count, width, v};
  q_push(s, set_run, m);
}

API CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) {
  NEED_CTX();
  emu_count(EMU_COPY, __func__);
  if (!check_range("cuMemcpyHtoD", "destination", (uintptr_t)dst, n))
    return CUDA_ERROR_INVALID_VALUE;
  if (G.async && n) {
    /* The legacy stream's earlier work first; pageable bytes are staged and
     * the device write may still be in flight when the call returns (CUDA's
     * "API synchronization behavior"), so it is queued on the legacy stream. */
    q_sync_legacy(cur_ctx->dev);
    if (is_pinned(src))
      memmove((void *)(uintptr_t)dst, src, n);
    else
      q_copy(NULL, "cuMemcpyHtoD", (uintptr_t)dst, src, n, C_DST_DEV, true);
    return q_error(cur_ctx->dev);
  }
  if (n)
    memmove((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
  NEED_CTX();
  emu_count(EMU_COPY, __func__);
  if (!check_range("cuMemcpyDtoH", "source", (uintptr_t)src, n))
    return CUDA_ERROR_INVALID_VALUE;
  q_sync_legacy(cur_ctx->dev);
  if (n)
    memmove(dst, (const void *)(uintptr_t)src, n);
  return G.async ? q_error(cur_ctx->dev) : CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
  NEED_CTX();
  emu_count(EMU_COPY, __func__);
  if (!check_range("cuMemcpyDtoD", "destination", (uintptr_t)dst, n) ||
      !check_range("cuMemcpyDtoD", "source", (uintptr_t)src, n))
    return CUDA_ERROR_INVALID_VALUE;
  if (G.async && n) { /* asynchronous with respect to the host */
    q_copy(NULL, "cuMemcpyDtoD", (uintptr_t)dst, (const void *)(uintptr_t)src, n,
           C_DST_DEV | C_SRC_DEV, false);
    return CUDA_SUCCESS;
  }
  if (n)
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemcpy(uint64_t dst, uint64_t src, size_t n) {
  NEED_CTX();
  emu_count(EMU_COPY, __func__);
  q_sync_legacy(cur_ctx->dev); /* unified addressing: either side may be the host */
  if (n)
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
/* A memset on stream s (NULL: the legacy stream): device memory is set
 * without the host waiting, so asynchronous mode queues it. */
static CUresult memset_on(void *s, const char *fn, uint64_t dst, size_t count, int width,
                          unsigned v) {
  emu_count(EMU_SET, fn);
  if (dst & (uint64_t)(width - 1)) {
    say("%s: destination %#lx is not %d-byte aligned", fn, (unsigned long)dst, width);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!check_range(fn, "destination", (uintptr_t)dst, count * width))
    return CUDA_ERROR_INVALID_VALUE;
  if (G.async && count) {
    q_set(s, fn, (uintptr_t)dst, count, width, v);
    return CUDA_SUCCESS;
  }
  SetW m = {fn, (uintptr_t)dst, count, width, v};
  return set_run(&m);
}
API CUresult cuMemsetD8_v2(uint64_t dst, unsigned char v, size_t n) {
  NEED_CTX();
  return memset_on(NULL, "cuMemsetD8", dst, n, 1, v);
}
API CUresult cuMemsetD16_v2(uint64_t dst, unsigned short v, size_t n) {
  NEED_CTX();
  return memset_on(NULL, "cuMemsetD16", dst, n, 2, v);
}
API CUresult cuMemsetD32_v2(uint64_t dst, unsigned v, size_t n) {
  NEED_CTX();
  return memset_on(NULL, "cuMemsetD32", dst, n, 4, v);
}
API CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  if (!G.async)
    return cuMemcpyHtoD_v2(dst, src, n);
  emu_count(EMU_COPY, __func__);
  if (!check_range("cuMemcpyHtoDAsync", "destination", (uintptr_t)dst, n))
    return CUDA_ERROR_INVALID_VALUE;
  if (n) /* pageable: staged now; pinned: read when the stream gets to it */
    q_copy(s, "cuMemcpyHtoDAsync", (uintptr_t)dst, src, n, C_DST_DEV, !is_pinned(src));
  return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  if (!G.async)
    return cuMemcpyDtoH_v2(dst, src, n);
  emu_count(EMU_COPY, __func__);
  if (!check_range("cuMemcpyDtoHAsync", "source", (uintptr_t)src, n))
    return CUDA_ERROR_INVALID_VALUE;
  if (n && is_pinned(dst)) {
    q_copy(s, "cuMemcpyDtoHAsync", (uintptr_t)dst, (const void *)(uintptr_t)src, n, C_SRC_DEV,
           false);
    return CUDA_SUCCESS;
  }
  q_sync_stream(s); /* to pageable memory: returns once the copy is done */
  if (n)
    memmove(dst, (const void *)(uintptr_t)src, n);
  return q_error(cur_ctx->dev);
}
API CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  if (!G.async)
    return cuMemcpyDtoD_v2(dst, src, n);
  emu_count(EMU_COPY, __func__);
  if (!check_range("cuMemcpyDtoDAsync", "destination", (uintptr_t)dst, n) ||
      !check_range("cuMemcpyDtoDAsync", "source", (uintptr_t)src, n))
    return CUDA_ERROR_INVALID_VALUE;
  if (n)
    q_copy(s, "cuMemcpyDtoDAsync", (uintptr_t)dst, (const void *)(uintptr_t)src, n,
           C_DST_DEV | C_SRC_DEV, false);
  return CUDA_SUCCESS;
}
API CUresult cuMemcpyAsync(uint64_t dst, uint64_t src, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  q_sync_stream(s);
  return cuMemcpy(dst, src, n);
}
API CUresult cuMemsetD8Async(uint64_t dst, unsigned char v, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  return memset_on(s, "cuMemsetD8Async", dst, n, 1, v);
}
API CUresult cuMemsetD16Async(uint64_t dst, unsigned short v, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  return memset_on(s, "cuMemsetD16Async", dst, n, 2, v);
}
API CUresult cuMemsetD32Async(uint64_t dst, unsigned v, size_t n, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  return memset_on(s, "cuMemsetD32Async", dst, n, 4, v);
}

/* -------------------------------------------------------------- streams */

typedef struct {
  uint32_t magic;
  double t;
  bool recorded;
  void *stream; /* where it was recorded (asynchronous mode syncs it) */
} Event;
#define EVENT_MAGIC 0x45564e54u

/* NULL, CU_STREAM_LEGACY (1), CU_STREAM_PER_THREAD (2), or one made here. */
bool valid_stream(void *s) {
  if ((uintptr_t)s <= 2)
    return true;
  if (((Stream *)s)->magic == STREAM_MAGIC)
    return true;
  say("not a stream: %p (destroyed, or not a CUstream)", s);
  return false;
}

API CUresult cuStreamCreate(void **s, unsigned flags) {
  NEED_CTX();
  Stream *x = calloc(1, sizeof *x);
  x->magic = STREAM_MAGIC;
  x->dev = cur_ctx->dev;
  x->blocking = !(flags & 1u); /* CU_STREAM_NON_BLOCKING */
  pthread_mutex_lock(&Q.mu);
  x->next_live = Q.streams;
  Q.streams = x;
  pthread_mutex_unlock(&Q.mu);
  *s = x;
  return CUDA_SUCCESS;
}
API CUresult cuStreamCreateWithPriority(void **s, unsigned flags, int prio) {
  (void)prio;
  return cuStreamCreate(s, flags);
}
API CUresult cuStreamDestroy_v2(void *s) {
  NEED_INIT();
  if ((uintptr_t)s <= 2 || !valid_stream(s))
    return CUDA_ERROR_INVALID_HANDLE;
  if (G.async && cur_ctx) /* its queued work still runs (CUDA: destroy does not wait) */
    q_sync_stream(s);
  pthread_mutex_lock(&Q.mu);
  for (Stream **pp = &Q.streams; *pp; pp = &(*pp)->next_live)
    if (*pp == s) {
      *pp = ((Stream *)s)->next_live;
      break;
    }
  pthread_mutex_unlock(&Q.mu);
  stream_drop(s);
  ((Stream *)s)->magic = 0;
  free(s);
  return CUDA_SUCCESS;
}
API CUresult cuStreamSynchronize(void *s) {
  NEED_CTX();
  VALID_STREAM(s);
  q_sync_stream(s);
  if ((uintptr_t)s > 2)
    stream_ready(s, true);
  return G.async ? q_error(cur_ctx->dev) : CUDA_SUCCESS;
}
API CUresult cuStreamQuery(void *s) {
  NEED_CTX();
  VALID_STREAM(s);
  q_sync_stream(s); /* queued work "finishes" when asked about */
  CUresult rc = G.async ? q_error(cur_ctx->dev) : CUDA_SUCCESS;
  if (rc != CUDA_SUCCESS)
    return rc;
  if ((uintptr_t)s > 2 && !stream_ready(s, false))
    return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}
API CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) {
  (void)flags;
  NEED_CTX();
  NEED_STREAM(s);
  /* The event's stream runs now: stricter than CUDA (s waits for less),
   * so it can hide an ordering bug but never invents one. */
  if (G.async && e && ((Event *)e)->magic == EVENT_MAGIC && ((Event *)e)->recorded)
    q_sync_stream(((Event *)e)->stream);
  return CUDA_SUCCESS;
}
API CUresult cuEventCreate(void **e, unsigned flags) {
  NEED_CTX();
  (void)flags;
  Event *x = calloc(1, sizeof *x);
  x->magic = EVENT_MAGIC;
  *e = x;
  return CUDA_SUCCESS;
}
static bool valid_event(void *e) { return e && ((Event *)e)->magic == EVENT_MAGIC; }
API CUresult cuEventRecord(void *e, void *s) {
  NEED_CTX();
  NEED_STREAM(s);
  if (!valid_event(e))
    return CUDA_ERROR_INVALID_HANDLE;
  ((Event *)e)->t = now_ms();
  ((Event *)e)->recorded = true;
  ((Event *)e)->stream = s;
  return CUDA_SUCCESS;
}
API CUresult cuEventSynchronize(void *e) {
  NEED_CTX();
  if (!valid_event(e))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!G.async || !((Event *)e)->recorded)
    return CUDA_SUCCESS;
  if (((uintptr_t)((Event *)e)->stream > 2) && !valid_stream(((Event *)e)->stream))
    return CUDA_SUCCESS; /* its stream is gone, and with it the work */
  q_sync_stream(((Event *)e)->stream);
  return q_error(cur_ctx->dev);
}
API CUresult cuEventQuery(void *e) { return cuEventSynchronize(e); }
API CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  NEED_CTX();
  if (!valid_event(a) || !valid_event(b))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!((Event *)a)->recorded || !((Event *)b)->recorded)
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = (float)(((Event *)b)->t - ((Event *)a)->t);
  return CUDA_SUCCESS;
}
API CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) {
  return cuEventElapsedTime(ms, a, b);
}
API CUresult cuEventDestroy_v2(void *e) {
  NEED_INIT();
  if (!valid_event(e))
    return CUDA_ERROR_INVALID_HANDLE;
  ((Event *)e)->magic = 0;
  free(e);
  return CUDA_SUCCESS;
}

