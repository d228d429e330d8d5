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
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define API __attribute__((visibility("default")))
#define EMU_VERSION "sflow-emu 1"
#define MAX_DEV 16
#define MAX_THREADS 1024

extern char **environ;

/* The shim header, embedded at build time (SF_EMU_SHIM is its path). */
__asm__(".section .rodata\n"
        ".balign 16\n"
        "sf_emu_shim_text:\n"
        ".incbin \"" SF_EMU_SHIM "\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char sf_emu_shim_text[] __asm__("sf_emu_shim_text");

/* ----------------------------------------------------------- helpers */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
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

static long env_long(const char *name, long dflt) {
  const char *e = getenv(name);
  if (!e || !*e)
    return dflt;
  char *end;
  long v = strtol(e, &end, 10);
  return *end ? dflt : v;
}
static bool env_on(const char *name, bool dflt) {
  const char *e = getenv(name);
  if (!e || !*e)
    return dflt;
  return strcmp(e, "0") != 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *xstrdup(const char *s) {
  char *d = strdup(s ? s : "");
  if (!d)
    abort();
  return d;
}

/* Two independent 64-bit hashes: 128 bits of content address. */
typedef struct {
  uint64_t a, b;
} Hash;
static void hash_init(Hash *h) {
  h->a = 0xcbf29ce484222325ull;
  h->b = 0x9e3779b97f4a7c15ull;
}
static void hash_add(Hash *h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h->a = (h->a ^ s[i]) * 0x100000001b3ull;
    h->b = (h->b ^ s[i]) * 0xff51afd7ed558ccdull;
    h->b ^= h->b >> 29;
  }
  /* a separator, so ("ab","c") and ("a","bc") differ */
  h->a = (h->a ^ 0xff) * 0x100000001b3ull;
  h->b = (h->b ^ (uint64_t)n) * 0xc4ceb9fe1a85ec53ull;
}
static void hash_str(Hash *h, const char *s) { hash_add(h, s, strlen(s)); }
static void hash_hex(const Hash *h, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h->a, (unsigned long long)h->b);
}

static void mkdirs(const char *dir) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

static bool write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap + 1);
  size_t r;
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      cap *= 2;
      char *nb = realloc(b, cap + 1);
      if (!nb) {
        free(b);
        b = NULL;
      }
      b = nb;
    }
  }
  fclose(f);
  if (!b)
    return NULL;
  b[n] = 0;
  if (len)
    *len = n;
  return b;
}

static void rmtree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      char p[PATH_MAX];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
        rmtree(p);
      else
        unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* ================================================================ driver */

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

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

typedef struct Ctx {
  uint32_t magic;
  int dev;
} Ctx;
#define CTX_MAGIC 0x43545845u

static struct {
  pthread_once_t once;
  bool inited;
  int ndev;
  uint64_t total_mem; /* per device */
  uint64_t used[MAX_DEV];
  Ctx ctx[MAX_DEV];
  bool guard, poison, check_ptrs, trace;
  bool async; /* SFLOW_EMU_ASYNC: work queued per stream ("asynchronous mode") */
  size_t page;
} G = {.once = PTHREAD_ONCE_INIT};

static __thread Ctx *cur_ctx;
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

#define NEED_INIT()                                 \
  do {                                              \
    if (!G.inited)                                  \
      return CUDA_ERROR_NOT_INITIALIZED;            \
  } while (0)
#define NEED_CTX()                                  \
  do {                                              \
    if (!G.inited)                                  \
      return CUDA_ERROR_NOT_INITIALIZED;            \
    if (!cur_ctx)                                   \
      return no_context(__func__);                  \
  } while (0)

static CUresult no_context(const char *fn) {
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
static void q_sync_device(int dev);
static CUresult q_error(int dev);
static const char *nccl_uses(uintptr_t base, size_t size);
API CUresult cuCtxSynchronize(void) {
  NEED_CTX();
  q_sync_device(cur_ctx->dev);
  return G.async ? q_error(cur_ctx->dev) : CUDA_SUCCESS;
}

/* -------------------------------------------------------------- memory */

enum { MEM_DEVICE, MEM_HOST, MEM_GLOBAL };
typedef struct {
  uintptr_t base;
  size_t size;
  void *map;       /* the mapping (guarded) or malloc block */
  size_t map_len;  /* 0: malloc'ed */
  int dev, kind;
} Alloc;

static struct {
  pthread_mutex_t mu;
  Alloc *a;
  size_t n, cap;
} M = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Index of the first allocation with base > p, under M.mu. */
static size_t upper(uintptr_t p) {
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
static Alloc *find_range(uintptr_t p, size_t n) {
  size_t i = upper(p);
  if (i == 0)
    return NULL;
  Alloc *a = &M.a[i - 1];
  if (p + n < p || p + n > a->base + a->size || (n > 0 && p >= a->base + a->size))
    return NULL;
  return a;
}

static void insert_alloc(Alloc al) {
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
static void describe(uintptr_t p, char *out, size_t n) {
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

static CUresult mem_alloc(uintptr_t *out, size_t size, int dev, int kind) {
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

static CUresult mem_free(uintptr_t p, int kind, const char *fn) {
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
static bool check_range(const char *fn, const char *what, uintptr_t p, size_t n) {
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

static bool valid_stream(void *s);
static bool stream_ready(void *s, bool wait);
typedef struct Stream Stream;
struct Op;
/* Work queued on a stream in asynchronous mode, run in order when CUDA's
 * semantics force it (q_sync_*). */
typedef struct Work {
  CUresult (*run)(void *arg); /* arg: one malloc block, freed after */
  void *arg;
  uint64_t seq; /* issue order across streams (the legacy stream's implicit waits) */
  struct Work *next;
} Work;
typedef struct {
  Work *head, *tail;
} Queue;
struct Stream {
  uint32_t magic;
  int dev;
  bool blocking;      /* made without CU_STREAM_NON_BLOCKING: ordered with the legacy stream */
  Queue q;            /* asynchronous mode's queued work */
  Stream *next_live;  /* the live streams made here (Q.streams) */
  struct Op *pending; /* an NCCL collective this stream waits for (emulated NCCL) */
};
#define STREAM_MAGIC 0x5354524du
static void stream_drop(Stream *s);
/* A valid stream, after the work queued on it before (an emulated NCCL
 * collective) has finished. */
#define NEED_STREAM(s)                         \
  do {                                         \
    if (!valid_stream(s))                      \
      return CUDA_ERROR_INVALID_HANDLE;        \
    if ((uintptr_t)(s) > 2)                    \
      stream_ready((s), true);                 \
  } while (0)
#define VALID_STREAM(s)                        \
  do {                                         \
    if (!valid_stream(s))                      \
      return CUDA_ERROR_INVALID_HANDLE;        \
  } while (0)

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
static struct {
  pthread_mutex_t mu;  /* the queues and the stream list */
  pthread_mutex_t run; /* one queue runs at a time, in order */
  Queue legacy[MAX_DEV];
  Stream *streams;
  uint64_t seq;
  CUresult err[MAX_DEV];
} Q = {.mu = PTHREAD_MUTEX_INITIALIZER, .run = PTHREAD_MUTEX_INITIALIZER};

static Queue *q_of(void *s) {
  return (uintptr_t)s <= 2 ? &Q.legacy[cur_ctx->dev] : &((Stream *)s)->q;
}

static void q_push(void *s, CUresult (*run)(void *), void *arg) {
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
static CUresult q_error(int dev) {
  pthread_mutex_lock(&Q.mu);
  CUresult rc = Q.err[dev];
  Q.err[dev] = CUDA_SUCCESS;
  pthread_mutex_unlock(&Q.mu);
  return rc;
}

static void q_sync_legacy(int dev) {
  if (G.async)
    q_drain_ordered(dev, UINT64_MAX);
}

static void q_sync_stream(void *s) {
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

static void q_sync_device(int dev) {
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
  if (!check_range("cuMemcpyDtoH", "source", (uintptr_t)src, n))
    return CUDA_ERROR_INVALID_VALUE;
  q_sync_legacy(cur_ctx->dev);
  if (n)
    memmove(dst, (const void *)(uintptr_t)src, n);
  return G.async ? q_error(cur_ctx->dev) : CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
  NEED_CTX();
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
  q_sync_legacy(cur_ctx->dev); /* unified addressing: either side may be the host */
  if (n)
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
/* A memset on stream s (NULL: the legacy stream): device memory is set
 * without the host waiting, so asynchronous mode queues it. */
static CUresult memset_on(void *s, const char *fn, uint64_t dst, size_t count, int width,
                          unsigned v) {
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
static bool valid_stream(void *s) {
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

/* ================================================================ NVRTC */

/* The kernel cache of nvrtc.c (the same rule), under which the emulator
 * keeps its compiled modules unless SFLOW_EMU_CACHE says otherwise. */
static void cache_dir(char *out, size_t n) {
  const char *e = getenv("SFLOW_EMU_CACHE");
  if (e && *e) {
    snprintf(out, n, "%s", e);
    return;
  }
  if ((e = getenv("SFLOW_KERNEL_CACHE")) && *e)
    snprintf(out, n, "%s/emu", e);
  else if ((e = getenv("XDG_CACHE_HOME")) && *e)
    snprintf(out, n, "%s/sflow/kernels/emu", e);
  else
    snprintf(out, n, "%s/.cache/sflow/kernels/emu", getenv("HOME") ? getenv("HOME") : "/tmp");
}

enum {
  NVRTC_SUCCESS = 0,
  NVRTC_ERROR_OUT_OF_MEMORY = 1,
  NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
  NVRTC_ERROR_INVALID_INPUT = 3,
  NVRTC_ERROR_INVALID_PROGRAM = 4,
  NVRTC_ERROR_INVALID_OPTION = 5,
  NVRTC_ERROR_COMPILATION = 6,
  NVRTC_ERROR_INTERNAL_ERROR = 11,
};

API const char *nvrtcGetErrorString(int rc) {
  switch (rc) {
  case 0: return "NVRTC_SUCCESS";
  case 1: return "NVRTC_ERROR_OUT_OF_MEMORY";
  case 2: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
  case 3: return "NVRTC_ERROR_INVALID_INPUT";
  case 4: return "NVRTC_ERROR_INVALID_PROGRAM";
  case 5: return "NVRTC_ERROR_INVALID_OPTION";
  case 6: return "NVRTC_ERROR_COMPILATION";
  case 11: return "NVRTC_ERROR_INTERNAL_ERROR";
  default: return "NVRTC_ERROR unknown";
  }
}
API int nvrtcVersion(int *major, int *minor) {
  *major = 99; /* not a real NVRTC: its cache keys never meet a real one's */
  *minor = 0;
  return NVRTC_SUCCESS;
}
API int nvrtcGetNumSupportedArchs(int *n) {
  *n = 1;
  return NVRTC_SUCCESS;
}
API int nvrtcGetSupportedArchs(int *a) {
  a[0] = 90;
  return NVRTC_SUCCESS;
}

typedef struct Prog {
  uint32_t magic;
  char *src, *name;
  int nh;
  char **hsrc, **hname;
  char *log;
  char *image;
  size_t image_len;
} Prog;
#define PROG_MAGIC 0x50524f47u

API int nvrtcCreateProgram(Prog **out, const char *src, const char *name, int nh,
                           const char *const *hsrc, const char *const *hname) {
  if (!out || !src || nh < 0 || (nh > 0 && (!hsrc || !hname)))
    return NVRTC_ERROR_INVALID_INPUT;
  Prog *p = calloc(1, sizeof *p);
  if (!p)
    return NVRTC_ERROR_OUT_OF_MEMORY;
  p->magic = PROG_MAGIC;
  p->src = xstrdup(src);
  p->name = xstrdup(name && *name ? name : "default_program");
  p->nh = nh;
  p->hsrc = calloc((size_t)nh + 1, sizeof *p->hsrc);
  p->hname = calloc((size_t)nh + 1, sizeof *p->hname);
  for (int i = 0; i < nh; i++) {
    p->hsrc[i] = xstrdup(hsrc[i]);
    p->hname[i] = xstrdup(hname[i]);
  }
  *out = p;
  return NVRTC_SUCCESS;
}
static bool valid_prog(const Prog *p) { return p && p->magic == PROG_MAGIC; }

API int nvrtcDestroyProgram(Prog **pp) {
  if (!pp || !valid_prog(*pp))
    return NVRTC_ERROR_INVALID_PROGRAM;
  Prog *p = *pp;
  for (int i = 0; i < p->nh; i++) {
    free(p->hsrc[i]);
    free(p->hname[i]);
  }
  free(p->hsrc);
  free(p->hname);
  free(p->src);
  free(p->name);
  free(p->log);
  free(p->image);
  p->magic = 0;
  free(p);
  *pp = NULL;
  return NVRTC_SUCCESS;
}

/* Runs argv with stdout and stderr into log; the exit status (-1: could
 * not run). */
static int run_tool(char *const *argv, const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    FILE *f = fopen(log, "a");
    if (f) {
      fprintf(f, "sflow-emu: cannot run the host compiler '%s': %s (SFLOW_EMU_CXX names it)\n",
              argv[0], strerror(rc));
      fclose(f);
    }
    return -1;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Splits s on spaces into argv (appended at *n); the strings are s's own
 * (s is modified). */
static void split_words(char *s, char **argv, int *n, int max) {
  for (char *t = strtok(s, " \t"); t && *n < max; t = strtok(NULL, " \t"))
    argv[(*n)++] = t;
}

static const char *const CXXFLAGS[] = {
    "-std=c++17", "-O1", "-g0", "-fPIC", "-w", "-fwrapv", "-fno-strict-aliasing",
    "-ffp-contract=off", "-fno-math-errno", "-fno-exceptions", NULL};

/* The options the emulator passes on to the C++ compiler (-D -U -I -std),
 * in NVRTC's spellings; the others (architecture, -default-device, fmad...)
 * mean nothing on the host. */
static int host_options(int nopt, const char *const *opts, char **out, int max, char *err,
                        size_t errn) {
  int k = 0;
  for (int i = 0; i < nopt; i++) {
    const char *o = opts[i];
    if (!o)
      continue;
    const char *val = NULL;
    char flag = 0;
    if (!strncmp(o, "-D", 2) || !strncmp(o, "--define-macro=", 15))
      flag = 'D', val = o[1] == 'D' ? o + 2 : o + 15;
    else if (!strncmp(o, "-U", 2) || !strncmp(o, "--undefine-macro=", 17))
      flag = 'U', val = o[1] == 'U' ? o + 2 : o + 17;
    else if (!strncmp(o, "-I", 2) || !strncmp(o, "--include-path=", 15))
      flag = 'I', val = o[1] == 'I' ? o + 2 : o + 15;
    else if (!strncmp(o, "-std=", 5) || !strncmp(o, "--std=", 6))
      flag = 's', val = strchr(o, '=') + 1;
    if (!flag)
      continue;
    if ((flag == 'D' || flag == 'U' || flag == 'I') && !*val) {
      if (i + 1 >= nopt) {
        snprintf(err, errn, "nvrtc: option %s needs a value", o);
        return -1;
      }
      val = opts[++i];
    }
    if (k >= max)
      break;
    size_t n = strlen(val) + 8;
    out[k] = malloc(n);
    if (flag == 's')
      snprintf(out[k], n, "-std=%s", val);
    else
      snprintf(out[k], n, "-%c%s", flag, val);
    k++;
  }
  return k;
}

/* The file name a program's text is written under: its NVRTC name, made
 * safe. */
static void safe_name(const char *name, char *out, size_t n) {
  size_t k = 0;
  for (const char *s = name; *s && k + 1 < n; s++)
    out[k++] = (char)((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                              (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '-'
                          ? *s
                          : '_');
  out[k] = 0;
  if (!k || out[0] == '.')
    snprintf(out, n, "program.cu");
}

/* The kernels of a preprocessed program: every `__global__` (the shim's
 * attribute) function that is not a template, once each. */
static char **scan_kernels(const char *ii, int *count) {
  static const char mark[] = "__attribute__((sf_emu_global))";
  char **names = NULL;
  int n = 0, cap = 0;
  for (const char *p = strstr(ii, mark); p; p = strstr(p + 1, mark)) {
    /* A template kernel cannot be named by cuModuleGetFunction here. */
    const char *b = p;
    while (b > ii && b[-1] != ';' && b[-1] != '}')
      b--;
    bool tmpl = false;
    for (const char *t = b; t < p; t++)
      if (!strncmp(t, "template", 8)) {
        tmpl = true;
        break;
      }
    const char *s = p + sizeof mark - 1;
    while (*s == ' ' || *s == '\t' || *s == '\n')
      s++;
    if (strncmp(s, "void", 4) || !(s[4] == ' ' || s[4] == '\t' || s[4] == '\n'))
      continue;
    s += 4;
    while (*s == ' ' || *s == '\t' || *s == '\n')
      s++;
    const char *id = s;
    while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
           *s == '_')
      s++;
    size_t len = (size_t)(s - id);
    while (*s == ' ' || *s == '\t' || *s == '\n')
      s++;
    if (!len || *s != '(' || tmpl)
      continue;
    bool dup = false;
    for (int i = 0; i < n; i++)
      if (strlen(names[i]) == len && !strncmp(names[i], id, len))
        dup = true;
    if (dup)
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      names = realloc(names, (size_t)cap * sizeof *names);
    }
    names[n] = malloc(len + 1);
    memcpy(names[n], id, len);
    names[n][len] = 0;
    n++;
  }
  *count = n;
  return names;
}

/* Appends a file's text to a malloc'ed log, without the work folder's
 * prefix (so messages name "softmax.cu:12:3", not a temporary path). */
static void log_append(char **log, const char *file, const char *tmp) {
  char *t = read_file(file, NULL);
  if (!t || !*t) {
    free(t);
    return;
  }
  size_t tl = strlen(tmp), cap = strlen(t) + 1;
  char *o = malloc(cap + (*log ? strlen(*log) : 0) + 1), *w = o;
  if (*log) {
    strcpy(o, *log);
    w = o + strlen(o);
  }
  for (const char *s = t; *s;) {
    if (!strncmp(s, tmp, tl) && s[tl] == '/')
      s += tl + 1;
    else
      *w++ = *s++;
  }
  *w = 0;
  free(*log);
  free(t);
  *log = o;
}

/* Compiles src (with its headers and host options) into the module cache;
 * returns the path of the shared object (malloc'ed) or NULL with *log set. */
static char *compile_module(const char *src, const char *name, int nh, char **hsrc, char **hname,
                            int nhost, char **host, char **log) {
  char dir[PATH_MAX];
  cache_dir(dir, sizeof dir);
  const char *cxx = getenv("SFLOW_EMU_CXX");
  if (!cxx || !*cxx)
    cxx = "c++";
  const char *extra = getenv("SFLOW_EMU_CXXFLAGS");
  Hash h;
  hash_init(&h);
  hash_str(&h, EMU_VERSION);
  hash_str(&h, sf_emu_shim_text);
  hash_str(&h, cxx);
  hash_str(&h, extra ? extra : "");
  for (int i = 0; CXXFLAGS[i]; i++)
    hash_str(&h, CXXFLAGS[i]);
  for (int i = 0; i < nhost; i++)
    hash_str(&h, host[i]);
  for (int i = 0; i < nh; i++) {
    hash_str(&h, hname[i]);
    hash_str(&h, hsrc[i]);
  }
  hash_str(&h, src);
  char key[33];
  hash_hex(&h, key);
  char so[PATH_MAX + 64];
  snprintf(so, sizeof so, "%s/%s.so", dir, key);
  if (access(so, R_OK) == 0)
    return xstrdup(so);

  mkdirs(dir);
  /* The shim, once per version of its text. */
  Hash hs;
  hash_init(&hs);
  hash_str(&hs, sf_emu_shim_text);
  char skey[33], shim[PATH_MAX + 64];
  hash_hex(&hs, skey);
  snprintf(shim, sizeof shim, "%s/cuda_shim-%.16s.h", dir, skey);
  if (access(shim, R_OK) != 0) {
    char tmp[PATH_MAX + 80];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", shim, (int)getpid());
    if (!write_file(tmp, sf_emu_shim_text, strlen(sf_emu_shim_text)) || rename(tmp, shim) != 0) {
      unlink(tmp);
      *log = xstrdup("sflow-emu: cannot write the shim header into the module cache");
      return NULL;
    }
  }
  /* Work folders of compiles killed midway (over 10 minutes old) go first. */
  DIR *dd = opendir(dir);
  for (struct dirent *e; dd && (e = readdir(dd));) {
    char old[PATH_MAX + 300];
    struct stat st;
    snprintf(old, sizeof old, "%s/%s", dir, e->d_name);
    if (!strncmp(e->d_name, ".work-", 6) && stat(old, &st) == 0 &&
        time(NULL) - st.st_mtime > 600)
      rmtree(old);
  }
  if (dd)
    closedir(dd);
  char work[PATH_MAX + 64];
  snprintf(work, sizeof work, "%s/.work-XXXXXX", dir);
  if (!mkdtemp(work)) {
    char m[PATH_MAX + 100];
    snprintf(m, sizeof m, "sflow-emu: cannot make a work folder in %s: %s", dir, strerror(errno));
    *log = xstrdup(m);
    return NULL;
  }
  char file[128], path[PATH_MAX + 200], ii[PATH_MAX + 80], all[PATH_MAX + 80],
      out[PATH_MAX + 80], lg[PATH_MAX + 80];
  safe_name(name, file, sizeof file);
  snprintf(path, sizeof path, "%s/%s", work, file);
  snprintf(ii, sizeof ii, "%s/scan.ii", work);
  snprintf(all, sizeof all, "%s/sf_emu_all.cpp", work);
  snprintf(out, sizeof out, "%s/module.so", work);
  snprintf(lg, sizeof lg, "%s/log", work);
  char *result = NULL;
  bool ok = write_file(path, src, strlen(src));
  for (int i = 0; ok && i < nh; i++) {
    char hp[PATH_MAX + 200];
    snprintf(hp, sizeof hp, "%s/%s", work, hname[i]);
    char *slash = strrchr(hp, '/');
    *slash = 0;
    mkdirs(hp);
    *slash = '/';
    ok = write_file(hp, hsrc[i], strlen(hsrc[i]));
  }
  if (!ok) {
    *log = xstrdup("sflow-emu: cannot write the program into the work folder");
    goto done;
  }
  /* argv: compiler words, flags, extra words, host options, -include, -I. */
  char cxxbuf[1024], extrabuf[1024];
  snprintf(cxxbuf, sizeof cxxbuf, "%s", cxx);
  snprintf(extrabuf, sizeof extrabuf, "%s", extra ? extra : "");
  char incw[PATH_MAX + 80];
  snprintf(incw, sizeof incw, "-I%s", work);
  char *argv[128];
  int n = 0;
  split_words(cxxbuf, argv, &n, 8);
  int base = n;
  for (int i = 0; CXXFLAGS[i]; i++)
    argv[n++] = (char *)CXXFLAGS[i];
  split_words(extrabuf, argv, &n, 40);
  for (int i = 0; i < nhost && n < 100; i++)
    argv[n++] = host[i];
  char keydef[64];
  snprintf(keydef, sizeof keydef, "-DSF_EMU_SHIM_KEY=\"%.16s\"", skey);
  argv[n++] = keydef;
  argv[n++] = "-include";
  argv[n++] = shim;
  argv[n++] = incw;
  int common = n;
  /* Pass 1: preprocess, to find the kernels. */
  argv[n++] = "-E";
  argv[n++] = "-P";
  argv[n++] = "-x";
  argv[n++] = "c++";
  argv[n++] = path;
  argv[n++] = "-o";
  argv[n++] = ii;
  argv[n] = NULL;
  (void)base;
  if (run_tool(argv, lg) != 0) {
    log_append(log, lg, work);
    if (!*log)
      *log = xstrdup("sflow-emu: the host compiler failed to preprocess the program");
    goto done;
  }
  char *text = read_file(ii, NULL);
  int nk = 0;
  char **kernels = text ? scan_kernels(text, &nk) : NULL;
  free(text);
  /* Pass 2: the program and a launcher per kernel. */
  size_t cap = 256 + strlen(file);
  for (int i = 0; i < nk; i++)
    cap += strlen(kernels[i]) + 32;
  char *w = malloc(cap);
  int off = snprintf(w, cap, "#include \"%s\"\n", file);
  for (int i = 0; i < nk; i++) {
    off += snprintf(w + off, cap - (size_t)off, "SF_EMU_KERNEL(%s)\n", kernels[i]);
    free(kernels[i]);
  }
  free(kernels);
  ok = write_file(all, w, (size_t)off);
  free(w);
  n = common;
  argv[n++] = "-shared";
  argv[n++] = all;
  argv[n++] = "-o";
  argv[n++] = out;
  argv[n++] = "-lm";
  argv[n] = NULL;
  if (!ok || run_tool(argv, lg) != 0) {
    log_append(log, lg, work);
    if (!*log)
      *log = xstrdup("sflow-emu: the host compiler failed");
    goto done;
  }
  if (rename(out, so) != 0) {
    *log = xstrdup("sflow-emu: cannot move the module into the cache");
    goto done;
  }
  result = xstrdup(so);
done:
  rmtree(work);
  return result;
}

/* The first 16 hex digits of the shim's hash: a module built with another
 * shim is rebuilt, not loaded. */
static void shim_key(char out[17]) {
  Hash hs;
  hash_init(&hs);
  hash_str(&hs, sf_emu_shim_text);
  char k[33];
  hash_hex(&hs, k);
  memcpy(out, k, 16);
  out[16] = 0;
}

/* The image ("CUBIN"): magic, the shared object's path, the program name,
 * the host options and the source (to rebuild a cleaned cache). */
#define IMG_MAGIC "SFEMUIMG1"
static char *make_image(const char *so, const char *name, int nhost, char **host, const char *src,
                        size_t *len) {
  size_t n = sizeof IMG_MAGIC + strlen(so) + 1 + strlen(name) + 1 + 16 + strlen(src) + 1;
  for (int i = 0; i < nhost; i++)
    n += strlen(host[i]) + 1;
  char *img = malloc(n), *w = img;
  memcpy(w, IMG_MAGIC, sizeof IMG_MAGIC), w += sizeof IMG_MAGIC;
  w = stpcpy(w, so) + 1;
  w = stpcpy(w, name) + 1;
  w += sprintf(w, "%d", nhost) + 1;
  for (int i = 0; i < nhost; i++)
    w = stpcpy(w, host[i]) + 1;
  w = stpcpy(w, src) + 1;
  *len = (size_t)(w - img);
  return img;
}

API int nvrtcCompileProgram(Prog *p, int nopt, const char *const *opts) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  if (nopt < 0 || (nopt > 0 && !opts))
    return NVRTC_ERROR_INVALID_INPUT;
  free(p->log);
  p->log = NULL;
  free(p->image);
  p->image = NULL;
  char *host[64];
  char err[256];
  int nhost = host_options(nopt, opts, host, 64, err, sizeof err);
  if (nhost < 0) {
    p->log = xstrdup(err);
    return NVRTC_ERROR_INVALID_OPTION;
  }
  char *so = compile_module(p->src, p->name, p->nh, p->hsrc, p->hname, nhost, host, &p->log);
  int rc = NVRTC_ERROR_COMPILATION;
  if (so) {
    p->image = make_image(so, p->name, nhost, host, p->src, &p->image_len);
    rc = NVRTC_SUCCESS;
  }
  free(so);
  for (int i = 0; i < nhost; i++)
    free(host[i]);
  return rc;
}

API int nvrtcGetProgramLogSize(Prog *p, size_t *n) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  *n = (p->log ? strlen(p->log) : 0) + 1;
  return NVRTC_SUCCESS;
}
API int nvrtcGetProgramLog(Prog *p, char *out) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  strcpy(out, p->log ? p->log : "");
  return NVRTC_SUCCESS;
}
API int nvrtcGetCUBINSize(Prog *p, size_t *n) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  if (!p->image)
    return NVRTC_ERROR_INVALID_INPUT;
  *n = p->image_len;
  return NVRTC_SUCCESS;
}
API int nvrtcGetCUBIN(Prog *p, char *out) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  if (!p->image)
    return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, p->image, p->image_len);
  return NVRTC_SUCCESS;
}
/* PTX is the same image (cuModuleLoadData takes either). */
API int nvrtcGetPTXSize(Prog *p, size_t *n) { return nvrtcGetCUBINSize(p, n); }
API int nvrtcGetPTX(Prog *p, char *out) { return nvrtcGetCUBIN(p, out); }
/* Name expressions: only plain extern "C" names are supported. */
API int nvrtcAddNameExpression(Prog *p, const char *expr) {
  (void)expr;
  return valid_prog(p) ? NVRTC_SUCCESS : NVRTC_ERROR_INVALID_PROGRAM;
}
API int nvrtcGetLoweredName(Prog *p, const char *expr, const char **lowered) {
  if (!valid_prog(p))
    return NVRTC_ERROR_INVALID_PROGRAM;
  while (*expr == '&' || *expr == ' ')
    expr++;
  *lowered = expr;
  return NVRTC_SUCCESS;
}

/* ============================================================== modules */

struct sf_emu_state {
  struct { unsigned x, y, z; } threadIdx, blockIdx, blockDim, gridDim;
  void (*sync)(void);
  void (*exit_thread)(void);
  void (*fail)(const char *what);
  int (*check_ptr)(const void *p, int index);
  unsigned long long clock;
};

typedef struct Module {
  uint32_t magic;
  int dev;
  void *so;
  struct sf_emu_state *st;
  char *path;
} Module;
#define MODULE_MAGIC 0x4d4f444cu

typedef struct Function {
  uint32_t magic;
  Module *m;
  void (*body)(void **);
  int (*check)(void **);
  unsigned (*sizes)(unsigned long *); /* NULL: a module from an older shim */
  char *name;
} Function;
#define FUNCTION_MAGIC 0x46554e43u

static void emu_sync(void);
static void emu_exit_thread(void);
static void emu_fail(const char *what);
static int emu_check_ptr(const void *p, int index);

/* Parses an image: NULL-terminated fields into f (so, name, nhost, opts..., src). */
static bool parse_image(const char *img, const char **so, const char **name, int *nhost,
                        const char **host, int maxh, const char **src) {
  if (memcmp(img, IMG_MAGIC, sizeof IMG_MAGIC))
    return false;
  const char *r = img + sizeof IMG_MAGIC;
  *so = r, r += strlen(r) + 1;
  *name = r, r += strlen(r) + 1;
  *nhost = atoi(r), r += strlen(r) + 1;
  if (*nhost < 0 || *nhost > maxh)
    return false;
  for (int i = 0; i < *nhost; i++)
    host[i] = r, r += strlen(r) + 1;
  *src = r;
  return true;
}

/* Was the module at path built with the shim whose key is want? */
static bool module_current(const char *path, const char *want) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return false;
  const char *(*key)(void) = (const char *(*)(void))dlsym(h, "sf_emu_shim_key");
  bool ok = key && !strcmp(key(), want);
  dlclose(h);
  return ok;
}

API CUresult cuModuleLoadData(Module **out, const void *image) {
  NEED_CTX();
  const char *so, *name, *src, *host[64];
  int nhost;
  if (!image || !parse_image(image, &so, &name, &nhost, host, 64, &src)) {
    say("cuModuleLoadData: not an emulator image (a real CUBIN or PTX, or a corrupt one)");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  char *path = xstrdup(so);
  char want[17];
  shim_key(want);
  if (access(path, R_OK) != 0 || !module_current(path, want)) {
    /* A cleaned module cache, or a module of an older emulator: rebuild
     * from the image's source. */
    char *log = NULL;
    free(path);
    path = compile_module(src, name, 0, NULL, NULL, nhost, (char **)host, &log);
    if (!path) {
      say("cuModuleLoadData: the module %s is gone and does not rebuild: %s", so, log ? log : "?");
      free(log);
      return CUDA_ERROR_INVALID_IMAGE;
    }
    free(log);
  }
  /* Each device gets its own copy of the object, so that its globals and
   * __shared__ arrays are the device's own, as on GPUs (dlopen shares one
   * instance per file, hard links included). */
  if (cur_ctx->dev > 0) {
    char *copy = malloc(strlen(path) + 16);
    sprintf(copy, "%s.dev%d.so", path, cur_ctx->dev);
    if (access(copy, R_OK) != 0) {
      size_t n = 0;
      char *bytes = read_file(path, &n);
      char tmp[PATH_MAX + 64];
      snprintf(tmp, sizeof tmp, "%s.%d.tmp", copy, (int)getpid());
      if (!bytes || !write_file(tmp, bytes, n) || rename(tmp, copy) != 0)
        unlink(tmp);
      free(bytes);
    }
    free(path);
    path = copy;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    say("cuModuleLoadData: %s", dlerror());
    free(path);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  struct sf_emu_state *(*get)(void) = (struct sf_emu_state * (*)(void)) dlsym(h, "sf_emu_module_state");
  if (!get) {
    say("cuModuleLoadData: %s is not an emulator module", path);
    dlclose(h);
    free(path);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  Module *m = calloc(1, sizeof *m);
  m->magic = MODULE_MAGIC;
  m->dev = cur_ctx->dev;
  m->so = h;
  m->st = get();
  m->st->sync = emu_sync;
  m->st->exit_thread = emu_exit_thread;
  m->st->fail = emu_fail;
  m->st->check_ptr = emu_check_ptr;
  m->path = path;
  *out = m;
  return CUDA_SUCCESS;
}
API CUresult cuModuleLoadDataEx(Module **out, const void *image, unsigned n, void *opts,
                                void **vals) {
  (void)n, (void)opts, (void)vals;
  return cuModuleLoadData(out, image);
}
API CUresult cuModuleUnload(Module *m) {
  NEED_INIT();
  if (!m || m->magic != MODULE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  /* The shared object stays loaded: functions handed out may outlive it
   * in a caller's table, and a GPU would fault on them just the same. */
  m->magic = 0;
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(Function **out, Module *m, const char *name) {
  NEED_CTX();
  if (!m || m->magic != MODULE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  char sym[512];
  snprintf(sym, sizeof sym, "sf_emu_k_%s", name);
  void *body = dlsym(m->so, sym);
  snprintf(sym, sizeof sym, "sf_emu_c_%s", name);
  void *check = dlsym(m->so, sym);
  if (!body || !check)
    return CUDA_ERROR_NOT_FOUND;
  Function *f = calloc(1, sizeof *f);
  f->magic = FUNCTION_MAGIC;
  f->m = m;
  *(void **)&f->body = body;
  *(void **)&f->check = check;
  snprintf(sym, sizeof sym, "sf_emu_s_%s", name);
  *(void **)&f->sizes = dlsym(m->so, sym);
  f->name = xstrdup(name);
  *out = f;
  return CUDA_SUCCESS;
}
/* A module's global variable (a __device__ or __constant__ one): its host
 * address, registered so that copies to and from it pass the checks. */
API CUresult cuModuleGetGlobal_v2(uint64_t *dptr, size_t *bytes, Module *m, const char *name) {
  NEED_CTX();
  if (!m || m->magic != MODULE_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  void *p = dlsym(m->so, name);
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!p || !dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
    return CUDA_ERROR_NOT_FOUND;
  size_t size = sym->st_size;
  pthread_mutex_lock(&M.mu);
  if (!find_range((uintptr_t)p, size ? size : 1))
    insert_alloc((Alloc){(uintptr_t)p, size ? size : 1, NULL, 0, m->dev, MEM_GLOBAL});
  pthread_mutex_unlock(&M.mu);
  if (dptr)
    *dptr = (uintptr_t)p;
  if (bytes)
    *bytes = size;
  return CUDA_SUCCESS;
}

static bool valid_function(const Function *f) { return f && f->magic == FUNCTION_MAGIC; }

API CUresult cuFuncGetAttribute(int *v, int attr, Function *f) {
  NEED_INIT();
  if (!valid_function(f))
    return CUDA_ERROR_INVALID_HANDLE;
  switch (attr) {
  case 0: *v = 1024; break; /* max threads per block */
  case 4: *v = 32; break;   /* registers */
  case 5: case 6: *v = 90; break;
  default: *v = 0;
  }
  return CUDA_SUCCESS;
}
API CUresult cuFuncSetAttribute(Function *f, int attr, int v) {
  (void)attr, (void)v;
  NEED_INIT();
  return valid_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuFuncSetCacheConfig(Function *f, int c) {
  (void)c;
  NEED_INIT();
  return valid_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, Function *f,
                                              void *smem_fn, size_t smem, int limit) {
  (void)smem_fn, (void)smem;
  NEED_CTX();
  if (!valid_function(f))
    return CUDA_ERROR_INVALID_HANDLE;
  int b = 256;
  if (limit > 0 && limit < b)
    b = limit;
  *block = b;
  *min_grid = 132 * (2048 / b);
  return CUDA_SUCCESS;
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, Function *f, int block,
                                                         size_t smem) {
  (void)smem;
  NEED_CTX();
  if (!valid_function(f) || block <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  *n = 2048 / block > 32 ? 32 : 2048 / block;
  return CUDA_SUCCESS;
}

/* =============================================================== fibers */

enum { F_NEW, F_RUN, F_WAIT, F_DONE };
typedef struct {
  void *sp;
  int state;
  int stack;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
} Fiber;

static struct {
  pthread_mutex_t mu; /* one launch at a time */
  Fiber f[MAX_THREADS];
  char *stack[MAX_THREADS]; /* lowest usable address; a guard page below */
  int nstacks;
  int freelist[MAX_THREADS], nfree;
  size_t stack_size;
  void *sched_sp;
#if !defined(__x86_64__)
  ucontext_t sched_uc;
#endif
  int cur, nthreads; /* cur: the running fiber's place in the sweep */
  bool reverse;
  unsigned bx, by;
  Function *fn;
  void **params;
  struct sf_emu_state *st;
  volatile sig_atomic_t running;
  pthread_t thread;
  bool failed;
  char failmsg[600];
} L = {.mu = PTHREAD_MUTEX_INITIALIZER};

#if defined(__x86_64__)
/* sf_emu_swap(&save, to): saves the callee-saved registers on this stack,
 * stores the stack pointer in *save, and resumes the context whose stack
 * pointer is `to`.  (Kernels never change MXCSR or the x87 control word,
 * so those are not switched.) */
__asm__(".text\n"
        ".type sf_emu_swap,@function\n"
        "sf_emu_swap:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size sf_emu_swap, .-sf_emu_swap\n"
        ".type sf_emu_fiber_entry,@function\n"
        "sf_emu_fiber_entry:\n"
        "  movq %r12, %rdi\n  callq *%r13\n  ud2\n"
        ".size sf_emu_fiber_entry, .-sf_emu_fiber_entry\n");
void sf_emu_swap(void **save, void *to) __asm__("sf_emu_swap");
void sf_emu_fiber_entry(void) __asm__("sf_emu_fiber_entry");
#endif

static void fiber_main(void *arg);

static void fiber_init(int i, char *stack_lo) {
  Fiber *f = &L.f[i];
#if defined(__x86_64__)
  uint64_t *top = (uint64_t *)(((uintptr_t)stack_lo + L.stack_size) & ~(uintptr_t)15);
  uint64_t *sp = top - 2; /* A: 16-aligned, where sp lands after `ret` */
  sp[-1] = (uint64_t)(uintptr_t)sf_emu_fiber_entry;
  sp[-2] = 0;                             /* rbp */
  sp[-3] = 0;                             /* rbx */
  sp[-4] = (uint64_t)(uintptr_t)f;        /* r12: the argument */
  sp[-5] = (uint64_t)(uintptr_t)fiber_main; /* r13: the function */
  sp[-6] = 0;                             /* r14 */
  sp[-7] = 0;                             /* r15 */
  f->sp = &sp[-7];
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack_lo;
  f->uc.uc_stack.ss_size = L.stack_size;
  f->uc.uc_link = NULL;
  makecontext(&f->uc, (void (*)(void))fiber_main, 1, f); /* pointer fits on LP64 targets */
#endif
}

static void to_fiber(int i) {
#if defined(__x86_64__)
  sf_emu_swap(&L.sched_sp, L.f[i].sp);
#else
  swapcontext(&L.sched_uc, &L.f[i].uc);
#endif
}

static void to_scheduler(Fiber *f) {
#if defined(__x86_64__)
  sf_emu_swap(&f->sp, L.sched_sp);
#else
  swapcontext(&f->uc, &L.sched_uc);
#endif
}

/* Leaves fiber f for fiber t (both of the running block). */
static void switch_fiber(Fiber *f, Fiber *t) {
#if defined(__x86_64__)
  sf_emu_swap(&f->sp, t->sp);
#else
  swapcontext(&f->uc, &t->uc);
#endif
}

static void set_thread_index(int i);
static char *new_stack(void);

/* The next thread of this sweep after the current one that can run (one
 * not started yet gets a stack first), made current; NULL when there is
 * none (the scheduler then ends the sweep). */
static Fiber *next_fiber(void) {
  for (int j = L.cur + 1; j < L.nthreads; j++) {
    Fiber *t = &L.f[j];
    if (t->state == F_NEW) {
      if (!L.nfree) {
        char *s = new_stack();
        if (!s)
          return NULL; /* the scheduler reports it */
        L.stack[L.nstacks] = s;
        L.freelist[L.nfree++] = L.nstacks++;
      }
      t->stack = L.freelist[--L.nfree];
      fiber_init(j, L.stack[t->stack]);
      t->state = F_RUN;
    }
    if (t->state == F_RUN) {
      L.cur = j;
      set_thread_index(j);
      return t;
    }
  }
  return NULL;
}

static void release_stack(Fiber *f);

/* Leaves fiber f (waiting or done) for the next runnable thread, else for
 * the scheduler: a barrier costs one switch per thread, not two.  A done
 * fiber's stack is given back only once the next thread has its own (it
 * is still running on it until the switch). */
static void leave(Fiber *f) {
  Fiber *t = next_fiber();
  if (f->state == F_DONE)
    release_stack(f);
  if (t)
    switch_fiber(f, t);
  else
    to_scheduler(f);
}

/* Fibers are numbered in the order a sweep runs them; SFLOW_EMU_ORDER=
 * reverse runs a block's threads last to first, so that a result which
 * depends on the order (a missing barrier) shows as a difference. */
static void set_thread_index(int pos) {
  unsigned bx = L.bx, by = L.by;
  int i = L.reverse ? L.nthreads - 1 - pos : pos;
  L.st->threadIdx.x = (unsigned)i % bx;
  L.st->threadIdx.y = ((unsigned)i / bx) % by;
  L.st->threadIdx.z = (unsigned)i / (bx * by);
}

/* Gives a finished thread's stack back (it is reused only once this
 * fiber has switched away for good). */
static void release_stack(Fiber *f) {
  L.freelist[L.nfree++] = f->stack;
  f->stack = -1;
}

/* A fiber runs its thread, then, while the next thread of the block has
 * not started, that one on the same stack: a block without barriers costs
 * a call per thread, not a switch. */
static void fiber_main(void *arg) {
  Fiber *f = arg;
  for (;;) {
    L.fn->body(L.params);
    f = &L.f[L.cur];
    f->state = F_DONE;
    int j = L.cur + 1;
    if (j < L.nthreads && L.f[j].state == F_NEW) {
      L.f[j].stack = f->stack;
      f->stack = -1;
      L.f[j].state = F_RUN;
      L.cur = j;
      set_thread_index(j);
      continue;
    }
    leave(f);
    abort(); /* never resumed */
  }
}

static void emu_sync(void) {
  Fiber *f = &L.f[L.cur];
  f->state = F_WAIT;
  leave(f); /* whoever resumes this fiber makes it current first */
}
static void emu_exit_thread(void) {
  Fiber *f = &L.f[L.cur];
  f->state = F_DONE;
  leave(f);
  abort();
}
static void emu_fail(const char *what) {
  if (!L.failed)
    snprintf(L.failmsg, sizeof L.failmsg, "%s%s",
             strncmp(what, "__trap", 6) ? "unsupported on the emulator: inline PTX " : "",
             strncmp(what, "__trap", 6) ? what : "__trap() was called");
  L.failed = true;
  Fiber *f = &L.f[L.cur];
  f->state = F_DONE;
  release_stack(f);
  to_scheduler(f);
  abort();
}

static int emu_check_ptr(const void *p, int index) {
  if (!p || !G.check_ptrs)
    return 0;
  uintptr_t a = (uintptr_t)p;
  pthread_mutex_lock(&M.mu);
  Alloc *al = find_range(a, 0);
  bool ok = al && (al->kind != MEM_DEVICE || al->dev == L.fn->m->dev);
  char why[200] = "";
  if (!ok) {
    if (al)
      snprintf(why, sizeof why, "memory of device %d, not of device %d", al->dev, L.fn->m->dev);
    else
      describe(a, why, sizeof why);
  }
  pthread_mutex_unlock(&M.mu);
  if (!ok)
    say("kernel '%s': pointer parameter %d (%p) is %s", L.fn->name, index, p, why);
  return ok ? 0 : 1;
}

static char *new_stack(void) {
  size_t len = L.stack_size + G.page;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  mprotect(m, G.page, PROT_NONE);
  return m + G.page;
}

/* ---------------------------------------------------- crashes in a kernel */

static struct sigaction old_segv, old_bus;
static void install_handlers(void);
static __thread char *alt_stack;

static void on_fault(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (L.running && pthread_equal(pthread_self(), L.thread)) {
    uintptr_t a = (uintptr_t)si->si_addr;
    char why[200] = "an address outside device memory";
    for (int i = 0; i < L.nstacks; i++)
      if (a >= (uintptr_t)L.stack[i] - G.page && a < (uintptr_t)L.stack[i])
        snprintf(why, sizeof why, "a stack overflow of the thread (SFLOW_EMU_STACK_KB=%zu)",
                 L.stack_size >> 10);
    if (pthread_mutex_trylock(&M.mu) == 0) {
      size_t i = upper(a);
      if (i > 0 && a >= M.a[i - 1].base + M.a[i - 1].size &&
          a - (M.a[i - 1].base + M.a[i - 1].size) < 2 * G.page)
        snprintf(why, sizeof why, "%zu bytes past the end of the allocation of %zu bytes at %#lx",
                 (size_t)(a - (M.a[i - 1].base + M.a[i - 1].size)), M.a[i - 1].size,
                 (unsigned long)M.a[i - 1].base);
      pthread_mutex_unlock(&M.mu);
    }
    char msg[800];
    int n = snprintf(msg, sizeof msg,
                     "sflow-emu: kernel '%s' crashed (%s) in block (%u,%u,%u) thread (%u,%u,%u) "
                     "at address %p: %s\n",
                     L.fn->name, sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", L.st->blockIdx.x,
                     L.st->blockIdx.y, L.st->blockIdx.z, L.st->threadIdx.x, L.st->threadIdx.y,
                     L.st->threadIdx.z, si->si_addr, why);
    if (n > 0)
      (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  }
  /* The previous disposition, and the fault again (default: the process
   * dies of the signal). */
  sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, NULL);
}

static void install_fault_handler(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!alt_stack) {
    size_t n = 64 * 1024;
    alt_stack = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alt_stack != MAP_FAILED) {
      stack_t ss = {.ss_sp = alt_stack, .ss_size = n, .ss_flags = 0};
      stack_t old;
      if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE))
        sigaltstack(&ss, NULL);
    }
  }
  pthread_once(&once, install_handlers);
}
static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
}

/* ---------------------------------------------------------------- launch */

static CUresult run_grid(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, void **params) {
  int nt = (int)(bx * by * bz);
  struct sf_emu_state *st = f->m->st;
  L.fn = f;
  L.params = params;
  L.st = st;
  L.bx = bx;
  L.by = by;
  L.nthreads = nt;
  L.failed = false;
  st->gridDim.x = gx, st->gridDim.y = gy, st->gridDim.z = gz;
  st->blockDim.x = bx, st->blockDim.y = by, st->blockDim.z = bz;
  CUresult rc = CUDA_SUCCESS;
  L.thread = pthread_self();
  L.running = 1;
  for (unsigned z = 0; z < gz && rc == CUDA_SUCCESS; z++)
    for (unsigned y = 0; y < gy && rc == CUDA_SUCCESS; y++)
      for (unsigned x = 0; x < gx && rc == CUDA_SUCCESS; x++) {
        st->blockIdx.x = x, st->blockIdx.y = y, st->blockIdx.z = z;
        L.nfree = 0;
        for (int s = L.nstacks - 1; s >= 0; s--)
          L.freelist[L.nfree++] = s;
        for (int i = 0; i < nt; i++)
          L.f[i].state = F_NEW, L.f[i].stack = -1;
        for (;;) {
          for (int i = 0; i < nt; i++) {
            Fiber *fb = &L.f[i];
            if (fb->state == F_NEW) {
              if (!L.nfree) {
                char *s = new_stack();
                if (!s) {
                  say("kernel '%s': no memory for the stack of thread %d", f->name, i);
                  rc = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
                  goto out;
                }
                L.stack[L.nstacks] = s;
                L.freelist[L.nfree++] = L.nstacks++;
              }
              fb->stack = L.freelist[--L.nfree];
              fiber_init(i, L.stack[fb->stack]);
              fb->state = F_RUN;
            }
            if (fb->state != F_RUN)
              continue;
            L.cur = i;
            set_thread_index(i);
            to_fiber(i);
            if (L.failed) {
              say("kernel '%s' (block (%u,%u,%u) thread (%u,%u,%u)): %s", f->name, x, y, z,
                  st->threadIdx.x, st->threadIdx.y, st->threadIdx.z, L.failmsg);
              rc = CUDA_ERROR_LAUNCH_FAILED;
              goto out;
            }
            i = L.cur; /* the fiber may have run the threads after i too */
          }
          int waiting = 0, done = 0;
          for (int i = 0; i < nt; i++)
            waiting += L.f[i].state == F_WAIT, done += L.f[i].state == F_DONE;
          if (!waiting)
            break;
          if (done) {
            say("kernel '%s': deadlock in block (%u,%u,%u): %d of its %d threads wait at "
                "__syncthreads() while %d have exited (a barrier that not every thread of the "
                "block reaches)",
                f->name, x, y, z, waiting, nt, done);
            rc = CUDA_ERROR_LAUNCH_FAILED;
            goto out;
          }
          for (int i = 0; i < nt; i++)
            L.f[i].state = F_RUN;
        }
      }
out:
  L.running = 0;
  return rc;
}

static CUresult launch_now(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, void **params);

/* A queued launch: the grid and a copy of each parameter's bytes, made at
 * the call as the driver makes it (the caller's argument variables may be
 * gone or rewritten by the time the stream runs the kernel). */
typedef struct {
  Function *f;
  unsigned g[3], b[3];
  unsigned n;
  void **params; /* n pointers into bytes, both in this block */
  unsigned char bytes[];
} LaunchW;
static CUresult launch_run(void *arg) {
  LaunchW *w = arg;
  return launch_now(w->f, w->g[0], w->g[1], w->g[2], w->b[0], w->b[1], w->b[2], w->params);
}
static void q_launch(void *stream, Function *f, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, void **params) {
  unsigned n = f->sizes(NULL);
  unsigned long sz[n ? n : 1];
  f->sizes(sz);
  size_t total = 0;
  for (unsigned i = 0; i < n; i++)
    total += (sz[i] + 15) & ~15ul;
  size_t head = (sizeof(LaunchW) + n * sizeof(void *) + 15) & ~(size_t)15;
  LaunchW *w = aligned_alloc(16, (head + total + 15) & ~(size_t)15);
  if (!w)
    abort();
  *w = (LaunchW){f, {gx, gy, gz}, {bx, by, bz}, n, NULL};
  w->params = (void **)w->bytes;
  unsigned char *at = (unsigned char *)w + head;
  for (unsigned i = 0; i < n; i++) {
    memcpy(at, params[i], sz[i]);
    w->params[i] = at;
    at += (sz[i] + 15) & ~15ul;
  }
  q_push(stream, launch_run, w);
}

API CUresult cuLaunchKernel(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, void *stream,
                            void **params, void **extra) {
  NEED_CTX();
  if (!valid_function(f) || f->m->magic != MODULE_MAGIC) {
    say("cuLaunchKernel: not a function handle (%p)", (void *)f);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (f->m->dev != cur_ctx->dev) {
    say("cuLaunchKernel: kernel '%s' was loaded on device %d, but device %d is current",
        f->name, f->m->dev, cur_ctx->dev);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  NEED_STREAM(stream);
  if (!gx || !gy || !gz || !bx || !by || !bz || gx > 0x7fffffffu || gy > 65535 || gz > 65535 ||
      bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > MAX_THREADS) {
    say("cuLaunchKernel: kernel '%s': invalid launch grid (%u,%u,%u) block (%u,%u,%u)", f->name,
        gx, gy, gz, bx, by, bz);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shmem > 232448) {
    say("cuLaunchKernel: kernel '%s': %u bytes of dynamic shared memory", f->name, shmem);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (extra) {
    say("cuLaunchKernel: kernel '%s': `extra` parameters are not supported", f->name);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (G.async && f->sizes) {
    pthread_mutex_lock(&L.mu); /* the pointer checks name L.fn */
    L.fn = f;
    int bad = f->check(params);
    pthread_mutex_unlock(&L.mu);
    if (bad < 0) {
      say("cuLaunchKernel: kernel '%s' takes parameters, but kernelParams is NULL", f->name);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad > 0)
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    q_launch(stream, f, gx, gy, gz, bx, by, bz, params);
    return CUDA_SUCCESS;
  }
  return launch_now(f, gx, gy, gz, bx, by, bz, params);
}

/* Runs a launch now (the synchronous mode, or a queued one's turn). */
static CUresult launch_now(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, void **params) {
  install_fault_handler();
  pthread_mutex_lock(&L.mu);
  if (!L.stack_size) {
    long kb = env_long("SFLOW_EMU_STACK_KB", 256);
    L.stack_size = (size_t)(kb < 16 ? 16 : kb) << 10;
    L.stack_size = (L.stack_size + G.page - 1) & ~(G.page - 1);
    const char *o = getenv("SFLOW_EMU_ORDER");
    L.reverse = o && !strcmp(o, "reverse");
  }
  L.fn = f;
  double t0 = G.trace ? now_ms() : 0;
  int bad = f->check(params);
  CUresult rc;
  if (bad < 0) {
    say("cuLaunchKernel: kernel '%s' takes parameters, but kernelParams is NULL", f->name);
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (bad > 0) {
    rc = CUDA_ERROR_ILLEGAL_ADDRESS;
  } else {
    rc = run_grid(f, gx, gy, gz, bx, by, bz, params);
  }
  if (G.trace)
    say("launch %s grid (%u,%u,%u) block (%u,%u,%u) on device %d: %.3f ms%s", f->name, gx, gy,
        gz, bx, by, bz, cur_ctx->dev, now_ms() - t0, rc ? " FAILED" : "");
  pthread_mutex_unlock(&L.mu);
  return rc;
}

/* =============================================================== cuBLAS */

enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum { CUBLAS_TF32_TENSOR_OP_MATH = 3 };

typedef struct Blas {
  uint32_t magic;
  int dev;
  int math;
  int ptr_mode;
  void *stream;
} Blas;
#define BLAS_MAGIC 0x424c4153u

API int cublasCreate_v2(Blas **out) {
  if (!G.inited || !cur_ctx) {
    say("cublasCreate: no CUDA context is current on this thread");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  Blas *b = calloc(1, sizeof *b);
  if (!b)
    return CUBLAS_STATUS_ALLOC_FAILED;
  b->magic = BLAS_MAGIC;
  b->dev = cur_ctx->dev;
  *out = b;
  return CUBLAS_STATUS_SUCCESS;
}
static bool valid_blas(const Blas *b) { return b && b->magic == BLAS_MAGIC; }
API int cublasDestroy_v2(Blas *b) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  b->magic = 0;
  free(b);
  return CUBLAS_STATUS_SUCCESS;
}
/* MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL: 99.0.0, as its NVRTC says 99.0. */
API int cublasGetProperty(int type, int *v) {
  if (type < 0 || type > 2 || !v)
    return CUBLAS_STATUS_INVALID_VALUE;
  *v = type == 0 ? 99 : 0;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetVersion_v2(Blas *b, int *v) {
  (void)b;
  *v = 990000;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetMathMode(Blas *b, int mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode < 0 || mode > 3)
    return CUBLAS_STATUS_INVALID_VALUE;
  b->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetMathMode(Blas *b, int *mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = b->math;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetPointerMode_v2(Blas *b, int mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  b->ptr_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetPointerMode_v2(Blas *b, int *mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = b->ptr_mode;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetStream_v2(Blas *b, void *s) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_stream(s))
    return CUBLAS_STATUS_INVALID_VALUE;
  b->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetStream_v2(Blas *b, void **s) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *s = b->stream;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetWorkspace_v2(Blas *b, void *ws, size_t n) {
  (void)ws, (void)n;
  return valid_blas(b) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
API const char *cublasGetStatusString(int s) {
  switch (s) {
  case 0: return "the operation completed successfully";
  case 1: return "the library was not initialized";
  case 3: return "the resource allocation failed";
  case 7: return "an invalid numeric value was used as an argument";
  case 13: return "the GPU program failed to execute";
  case 15: return "the functionality requested is not supported";
  default: return "unknown error";
  }
}
API const char *cublasGetStatusName(int s) {
  switch (s) {
  case 0: return "CUBLAS_STATUS_SUCCESS";
  case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
  case 7: return "CUBLAS_STATUS_INVALID_VALUE";
  case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f32_to_bf16(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float round_tf32(float f) { /* 10 mantissa bits, to nearest (ties away), as cvt.rna */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u)
    u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&f, &u, 4);
  return f;
}

static size_t tsize(int t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }

/* The extent in bytes of a column-major rows×cols matrix with leading
 * dimension ld. */
static size_t extent(int rows, int cols, long long ld, int t) {
  if (rows <= 0 || cols <= 0)
    return 0;
  return ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * tsize(t);
}

/* Is [p, p + n) device memory of the handle's device?  Else loud. */
static bool blas_mem(const Blas *h, const char *fn, const char *what, const void *p, size_t n) {
  if (n == 0)
    return true;
  pthread_mutex_lock(&M.mu);
  Alloc *a = find_range((uintptr_t)p, n);
  bool ok = a && (a->kind != MEM_DEVICE || a->dev == h->dev);
  char why[200] = "";
  if (!ok) {
    if (a)
      snprintf(why, sizeof why, "memory of device %d, but the handle is device %d's", a->dev, h->dev);
    else
      describe((uintptr_t)p, why, sizeof why);
  }
  pthread_mutex_unlock(&M.mu);
  if (!ok)
    say("%s: matrix %s (%p, %zu bytes) is not in device memory: %s", fn, what, p, n, why);
  return ok;
}

typedef struct {
  const char *fn;
  int ta, tb, m, n, k;
  const void *A, *B;
  void *C;
  long long lda, ldb, ldc, sa, sb, sc;
  int batch;
  int atype, btype, ctype;
  bool f64, tf32, in_bf16; /* in_bf16: 32F inputs rounded to bf16 (FAST_16BF) */
} Gemm;

static float load_f(const void *p, int t, size_t i) {
  return t == CUDA_R_32F ? ((const float *)p)[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}

/* C = alpha op(A) op(B) + beta C, column-major, each element a sum over
 * p = 0..k-1 in order (float accumulators for the 32F compute types);
 * beta == 0 overwrites C. */
static int gemm_run(const Blas *h, const Gemm *g, const void *alpha, const void *beta) {
  if (!valid_blas(h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!cur_ctx || cur_ctx->dev != h->dev) {
    say("%s: the handle belongs to device %d, but %s is current", g->fn, h->dev,
        cur_ctx ? "another device" : "no context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if ((g->ta != 0 && g->ta != 1) || (g->tb != 0 && g->tb != 1) || g->m < 0 || g->n < 0 ||
      g->k < 0 || g->batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  int ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  if (g->lda < (ar > 1 ? ar : 1) || g->ldb < (br > 1 ? br : 1) || g->ldc < (g->m > 1 ? g->m : 1)) {
    say("%s: a leading dimension is too small (lda %lld for %d rows, ldb %lld for %d, ldc %lld "
        "for %d)",
        g->fn, g->lda, ar, g->ldb, br, g->ldc, g->m);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g->m == 0 || g->n == 0 || g->batch == 0)
    return CUBLAS_STATUS_SUCCESS;
  for (int b = 0; b < g->batch; b++) {
    const char *A = (const char *)g->A + (size_t)b * (size_t)g->sa * tsize(g->atype);
    const char *B = (const char *)g->B + (size_t)b * (size_t)g->sb * tsize(g->btype);
    char *C = (char *)g->C + (size_t)b * (size_t)g->sc * tsize(g->ctype);
    if ((g->k > 0 && (!blas_mem(h, g->fn, "A", A, extent(ar, ac, g->lda, g->atype)) ||
                      !blas_mem(h, g->fn, "B", B, extent(br, bc, g->ldb, g->btype)))) ||
        !blas_mem(h, g->fn, "C", C, extent(g->m, g->n, g->ldc, g->ctype)))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  int m = g->m, n = g->n, k = g->k;
  if (g->f64) {
    double al = *(const double *)alpha, be = *(const double *)beta;
    double *acc = malloc((size_t)m * sizeof *acc);
    for (int b = 0; b < g->batch; b++) {
      const double *A = (const double *)g->A + (size_t)b * (size_t)g->sa;
      const double *B = (const double *)g->B + (size_t)b * (size_t)g->sb;
      double *C = (double *)g->C + (size_t)b * (size_t)g->sc;
      for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++)
          acc[i] = 0;
        for (int p = 0; p < k; p++) {
          double bv = g->tb ? B[j + (size_t)p * g->ldb] : B[p + (size_t)j * g->ldb];
          for (int i = 0; i < m; i++)
            acc[i] += (g->ta ? A[p + (size_t)i * g->lda] : A[i + (size_t)p * g->lda]) * bv;
        }
        for (int i = 0; i < m; i++) {
          double *c = &C[i + (size_t)j * g->ldc];
          *c = be == 0 ? al * acc[i] : al * acc[i] + be * *c;
        }
      }
    }
    free(acc);
    return CUBLAS_STATUS_SUCCESS;
  }
  float al = *(const float *)alpha, be = *(const float *)beta;
  float *acc = malloc((size_t)m * sizeof *acc);
  /* op(A) as floats, k rows of m (p-major), rounded as the compute type says. */
  float *a = malloc((size_t)m * (size_t)(k ? k : 1) * sizeof *a);
  float *bcol = malloc((size_t)(k ? k : 1) * sizeof *bcol);
  if (!acc || !a || !bcol) {
    free(acc), free(a), free(bcol);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  for (int b = 0; b < g->batch; b++) {
    const char *A = (const char *)g->A + (size_t)b * (size_t)g->sa * tsize(g->atype);
    const char *B = (const char *)g->B + (size_t)b * (size_t)g->sb * tsize(g->btype);
    char *C = (char *)g->C + (size_t)b * (size_t)g->sc * tsize(g->ctype);
    for (int p = 0; p < k; p++)
      for (int i = 0; i < m; i++) {
        float v = load_f(A, g->atype, g->ta ? p + (size_t)i * g->lda : i + (size_t)p * g->lda);
        if (g->tf32)
          v = round_tf32(v);
        else if (g->in_bf16)
          v = bf16_to_f32(f32_to_bf16(v));
        a[(size_t)p * m + i] = v;
      }
    for (int j = 0; j < n; j++) {
      for (int p = 0; p < k; p++) {
        float v = load_f(B, g->btype, g->tb ? j + (size_t)p * g->ldb : p + (size_t)j * g->ldb);
        if (g->tf32)
          v = round_tf32(v);
        else if (g->in_bf16)
          v = bf16_to_f32(f32_to_bf16(v));
        bcol[p] = v;
      }
      for (int i = 0; i < m; i++)
        acc[i] = 0.0f;
      for (int p = 0; p < k; p++) {
        const float *ap = a + (size_t)p * m;
        float bv = bcol[p];
        for (int i = 0; i < m; i++)
          acc[i] += ap[i] * bv;
      }
      for (int i = 0; i < m; i++) {
        size_t ci = i + (size_t)j * g->ldc;
        float old = be == 0.0f ? 0.0f : load_f(C, g->ctype, ci);
        float v = be == 0.0f ? al * acc[i] : al * acc[i] + be * old;
        if (g->ctype == CUDA_R_32F)
          ((float *)C)[ci] = v;
        else
          ((uint16_t *)C)[ci] = f32_to_bf16(v);
      }
    }
  }
  free(acc), free(a), free(bcol);
  return CUBLAS_STATUS_SUCCESS;
}

/* A product queued on the handle's stream (asynchronous mode): its scalars
 * copied now when they are host values (CUBLAS_POINTER_MODE_HOST), its
 * matrices checked when it runs; a failure then is the stream's error. */
typedef struct {
  const Blas *h;
  Gemm g;
  double alpha[2], beta[2]; /* the host scalars' bytes */
  bool host_scalars;
  const void *dalpha, *dbeta;
} GemmW;
static CUresult gemm_work(void *arg) {
  GemmW *w = arg;
  int rc = w->host_scalars ? gemm_run(w->h, &w->g, w->alpha, w->beta)
                           : gemm_run(w->h, &w->g, w->dalpha, w->dbeta);
  if (rc != CUBLAS_STATUS_SUCCESS)
    say("%s (queued on a stream): cuBLAS status %d when it ran", w->g.fn, rc);
  return rc == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}
static int gemm_call(const Blas *h, const Gemm *g, const void *alpha, const void *beta) {
  if (!G.async)
    return gemm_run(h, g, alpha, beta);
  if (!valid_blas(h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!cur_ctx || cur_ctx->dev != h->dev) {
    say("%s: the handle belongs to device %d, but %s is current", g->fn, h->dev,
        cur_ctx ? "another device" : "no context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  GemmW *w = calloc(1, sizeof *w);
  if (!w)
    return CUBLAS_STATUS_ALLOC_FAILED;
  w->h = h;
  w->g = *g;
  w->host_scalars = h->ptr_mode == 0;
  if (w->host_scalars) {
    size_t sz = g->f64 ? sizeof(double) : sizeof(float);
    memcpy(w->alpha, alpha, sz);
    memcpy(w->beta, beta, sz);
  } else {
    w->dalpha = alpha, w->dbeta = beta;
  }
  q_push(h->stream, gemm_work, w);
  return CUBLAS_STATUS_SUCCESS;
}

API int cublasSgemm_v2(Blas *h, int ta, int tb, int m, int n, int k, const float *alpha,
                       const float *A, int lda, const float *B, int ldb, const float *beta,
                       float *C, int ldc) {
  Gemm g = {"cublasSgemm", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, 1,
            CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, false, false, false};
  g.tf32 = valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return gemm_call(h, &g, alpha, beta);
}
API int cublasDgemm_v2(Blas *h, int ta, int tb, int m, int n, int k, const double *alpha,
                       const double *A, int lda, const double *B, int ldb, const double *beta,
                       double *C, int ldc) {
  Gemm g = {"cublasDgemm", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, 1,
            CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, true, false, false};
  return gemm_call(h, &g, alpha, beta);
}
API int cublasSgemmStridedBatched(Blas *h, int ta, int tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, long long sa,
                                  const float *B, int ldb, long long sb, const float *beta,
                                  float *C, int ldc, long long sc, int batch) {
  Gemm g = {"cublasSgemmStridedBatched", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, sa, sb, sc,
            batch, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, false, false, false};
  g.tf32 = valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return gemm_call(h, &g, alpha, beta);
}
API int cublasDgemmStridedBatched(Blas *h, int ta, int tb, int m, int n, int k,
                                  const double *alpha, const double *A, int lda, long long sa,
                                  const double *B, int ldb, long long sb, const double *beta,
                                  double *C, int ldc, long long sc, int batch) {
  Gemm g = {"cublasDgemmStridedBatched", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, sa, sb, sc,
            batch, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, true, false, false};
  return gemm_call(h, &g, alpha, beta);
}

/* The type combinations of cublasGemmEx that the emulator runs: 32F/16BF
 * inputs with a 32F compute type (C 32F, or 16BF with 16BF inputs), and
 * all-64F. */
static int gemm_ex_setup(const Blas *h, Gemm *g, int compute) {
  bool c32 = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
             compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  bool c64 = compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC;
  if (c64 && g->atype == CUDA_R_64F && g->btype == CUDA_R_64F && g->ctype == CUDA_R_64F) {
    g->f64 = true;
    return CUBLAS_STATUS_SUCCESS;
  }
  bool ok = c32 && g->atype == g->btype &&
            ((g->atype == CUDA_R_32F && g->ctype == CUDA_R_32F) ||
             (g->atype == CUDA_R_16BF && (g->ctype == CUDA_R_32F || g->ctype == CUDA_R_16BF)));
  if (!ok) {
    say("%s: types A %d, B %d, C %d with compute type %d are not supported by the emulator", g->fn,
        g->atype, g->btype, g->ctype, compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (g->atype == CUDA_R_32F) {
    g->tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
              (compute == CUBLAS_COMPUTE_32F && valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH);
    g->in_bf16 = compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  return CUBLAS_STATUS_SUCCESS;
}

API int cublasGemmEx(Blas *h, int ta, int tb, int m, int n, int k, const void *alpha,
                     const void *A, int atype, int lda, const void *B, int btype, int ldb,
                     const void *beta, void *C, int ctype, int ldc, int compute, int algo) {
  (void)algo;
  Gemm g = {"cublasGemmEx", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, 1,
            atype, btype, ctype, false, false, false};
  int rc = gemm_ex_setup(h, &g, compute);
  return rc ? rc : gemm_call(h, &g, alpha, beta);
}
API int cublasGemmStridedBatchedEx(Blas *h, int ta, int tb, int m, int n, int k,
                                   const void *alpha, const void *A, int atype, int lda,
                                   long long sa, const void *B, int btype, int ldb, long long sb,
                                   const void *beta, void *C, int ctype, int ldc, long long sc,
                                   int batch, int compute, int algo) {
  (void)algo;
  Gemm g = {"cublasGemmStridedBatchedEx", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, sa, sb, sc,
            batch, atype, btype, ctype, false, false, false};
  int rc = gemm_ex_setup(h, &g, compute);
  return rc ? rc : gemm_call(h, &g, alpha, beta);
}

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
static bool stream_ready(void *sv, bool wait) {
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
static void stream_drop(Stream *s) {
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
static const char *nccl_uses(uintptr_t base, size_t size) {
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
