/*
 * gpu.c — the driver API, device arrays, and `launch`.
 *
 * libcuda.so.1 is dlopen'ed at the first launch (or matmul); when it is
 * missing, or has no device, the program says so once on stderr and runs
 * every kernel through its CPU version, which the compiler emits beside the
 * CUDA C (--require-gpu turns that into a runtime error).
 *
 * Key design choice: device copies are lazy, and the compiler marks where
 * host code may look.  An array passed to a kernel gets a device copy only
 * when its host copy is newer; a kernel that writes it leaves the device
 * copy as the only current one.  Generated code indexes arrays inline, so
 * the runtime cannot see host reads and writes; instead the compiler calls
 * sf_gpu_settle() before the first host statement that follows a run of
 * GPU statements (launches, matmuls into a variable, and loops of them).
 * Settling copies back what kernels wrote and marks every device copy
 * stale, because the host may now change the array in place.  A training
 * loop of launches therefore moves its arrays over PCIe once each way, and
 * the byte counters in sf__gpu_stats (printed with SFLOW_GPU_STATS=1) let
 * the tests check exactly that.  A launch over arrays waits for its kernel
 * and reads its failure record; a launch of a kernel that takes tensors
 * does not wait (a custom op inside a training step), and its record is
 * checked at the next point that waits anyway ("deferred kernel checks").
 *
 * Devices: the process uses device SFLOW_DEVICE (default 0; a rank a
 * launcher started, LOCAL_RANK modulo the visible devices), except for
 * the members of a group whose actor asks @gpus(g): member r runs on
 * device SFLOW_DEVICE + floor(r * g), modulo the device count, so that
 * @gpus(1) spreads a group over the GPUs (one NCCL rank per GPU, nccl.c)
 * and @gpus(0.5) puts two members on each.  Each device copy remembers its
 * device (sf_array.gpu); an array used on another device is moved there
 * through the host.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"

#define MAX_DEVICES 16

/* Driver API types and constants (cuda.h, stable ABI). */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef uint64_t CUdeviceptr;
enum { CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

sf__gpu_stats_t sf__gpu_stats;

static struct {
  void *lib;
  bool ok;
  char why[640];
  int32_t ordinal;               /* the default device (SFLOW_DEVICE) */
  int32_t ndev;
  char arch[MAX_DEVICES][16];    /* "sm_90" */
  CUcontext ctx[MAX_DEVICES];    /* primary contexts, retained at first use */
  pthread_mutex_t mu;
  CUresult (*init)(unsigned);
  CUresult (*dev_count)(int *);
  CUresult (*dev_get)(CUdevice *, int);
  CUresult (*dev_attr)(int *, int, CUdevice);
  CUresult (*ctx_retain)(CUcontext *, CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*mfree)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*sync)(void);
  CUresult (*load)(CUmodule *, const void *);
  CUresult (*getfn)(CUfunction *, CUmodule, const char *);
  CUresult (*occupancy)(int *, int *, CUfunction, void *, size_t, int);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **);
  CUresult (*errstr)(CUresult, const char **);
} D = {.mu = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

_Noreturn void sf__cuda_fail(const char *what, int rc, const sf_loc *loc) {
  const char *msg = NULL;
  if (!D.errstr || D.errstr(rc, &msg) != 0 || !msg)
    msg = "unknown error";
  sf_runtime_error(loc, "GPU: %s failed: %s (CUDA error %d)", what, msg, rc);
}
#define CU(call, what, loc)                   \
  do {                                        \
    CUresult rc_ = (call);                    \
    if (rc_ != 0)                             \
      sf__cuda_fail(what, rc_, loc);          \
  } while (0)

void *sf__cuda_sym(const char *name) { return D.lib ? dlsym(D.lib, name) : NULL; }

/* Retains device k's primary context and reads its architecture; under
 * D.mu once the driver is up. */
static CUresult open_device(int32_t k) {
  CUdevice dev;
  int maj = 0, min = 0;
  CUresult rc = D.dev_get(&dev, k);
  if (rc == 0)
    rc = D.ctx_retain(&D.ctx[k], dev);
  if (rc != 0)
    return rc;
  D.dev_attr(&maj, CU_ATTR_CC_MAJOR, dev);
  D.dev_attr(&min, CU_ATTR_CC_MINOR, dev);
  snprintf(D.arch[k], sizeof D.arch[k], "sm_%d%d", maj, min);
  return 0;
}

static bool load_driver(void) {
  const char *e = getenv("SFLOW_NO_GPU");
  if (e && *e && strcmp(e, "0")) {
    snprintf(D.why, sizeof D.why, "SFLOW_NO_GPU is set");
    return false;
  }
  /* SFLOW_CUDA names another driver library (the host emulator, tests/gpu/emu). */
  const char *drv = getenv("SFLOW_CUDA");
  if (!drv || !*drv)
    drv = "libcuda.so.1";
  D.lib = dlopen(drv, RTLD_NOW | RTLD_LOCAL);
  if (!D.lib) {
    if (strcmp(drv, "libcuda.so.1"))
      snprintf(D.why, sizeof D.why, "SFLOW_CUDA=%.200s does not load", drv);
    else
      snprintf(D.why, sizeof D.why, "libcuda.so.1 not found");
    return false;
  }
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&D.init, "cuInit"}, {(void **)&D.dev_count, "cuDeviceGetCount"},
      {(void **)&D.dev_get, "cuDeviceGet"}, {(void **)&D.dev_attr, "cuDeviceGetAttribute"},
      {(void **)&D.ctx_retain, "cuDevicePrimaryCtxRetain"}, {(void **)&D.ctx_set, "cuCtxSetCurrent"},
      {(void **)&D.alloc, "cuMemAlloc_v2"}, {(void **)&D.mfree, "cuMemFree_v2"},
      {(void **)&D.htod, "cuMemcpyHtoD_v2"}, {(void **)&D.dtoh, "cuMemcpyDtoH_v2"},
      {(void **)&D.memset8, "cuMemsetD8_v2"}, {(void **)&D.sync, "cuCtxSynchronize"},
      {(void **)&D.load, "cuModuleLoadData"}, {(void **)&D.getfn, "cuModuleGetFunction"},
      {(void **)&D.occupancy, "cuOccupancyMaxPotentialBlockSize"},
      {(void **)&D.launch, "cuLaunchKernel"}, {(void **)&D.errstr, "cuGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
    if (!(*syms[i].slot = dlsym(D.lib, syms[i].name))) {
      snprintf(D.why, sizeof D.why, "%.200s lacks %s", drv, syms[i].name);
      return false;
    }
  int n = 0, maj = 0, min = 0, ord = 0;
  CUresult rc = D.init(0);
  if (rc == 0)
    rc = D.dev_count(&n);
  if (rc != 0 || n == 0) {
    snprintf(D.why, sizeof D.why, rc ? "the CUDA driver found no usable device (error %d)" : "no CUDA device", rc);
    return false;
  }
  if ((e = getenv("SFLOW_DEVICE")) && *e)
    ord = atoi(e);
  else if ((e = getenv("SFLOW_LOCAL_RANK")) && *e && atoi(e) >= 0)
    ord = atoi(e) % n; /* a launched rank (cluster/net/launcher.c): its LOCAL_RANK-th device */
  CUdevice dev;
  if (ord < 0 || ord >= n || D.dev_get(&dev, ord) != 0) {
    snprintf(D.why, sizeof D.why, "no CUDA device %d (SFLOW_DEVICE)", ord);
    return false;
  }
  D.ordinal = ord;
  D.ndev = n < MAX_DEVICES ? n : MAX_DEVICES;
  if ((rc = open_device(ord)) != 0) {
    snprintf(D.why, sizeof D.why, "cannot create a CUDA context (error %d)", rc);
    return false;
  }
  (void)maj, (void)min;
  char why[512];
  if (!sf__nvrtc_load(why, sizeof why)) {
    snprintf(D.why, sizeof D.why, "a GPU but no NVRTC: %s", why);
    return false;
  }
  return true;
}

static void array_to_host(sf_array *a);
static void gpu_init(void) {
  if (sf__array_to_host != array_to_host) /* a unit test, not main.c: no thread reads it yet */
    sf__gpu_install();
  D.ok = load_driver();
}

/* The device of the work running on this thread (see the top). */
static _Thread_local int32_t cur_dev = -1;

/* A group member first (its method may run inline on a thread that was
 * running a task with a GPU of its own), then a task's @gpus device. */
static int32_t placement(void) {
  sf_actor *a = sf__current_actor();
  const sf_actor_desc *d = a ? sf__actor_desc(a) : NULL;
  if (d && d->gpus > 0 && sf__actor_size(a) > 1)
    return (int32_t)((D.ordinal + (int64_t)((double)sf__actor_rank(a) * d->gpus + 1e-9)) %
                     D.ndev);
  if (sf__current_gpu >= 0 && !a)
    return sf__current_gpu % D.ndev;
  return D.ordinal;
}

static int32_t here(void) { return cur_dev >= 0 ? cur_dev : D.ordinal; }

/* Makes device k's context current (its own, for a moment, around work
 * on an array of another device). */
static void set_device(int32_t k) { D.ctx_set(D.ctx[k]); }

int32_t sf__gpu_current_device(void) { return here(); }

/* Overrides resources.c's weak default: the devices @gpus can be given. */
int32_t sf__gpu_devices(void) {
  pthread_once(&gpu_once, gpu_init);
  return D.ok ? D.ndev : 0;
}

void sf__gpu_use_device(int32_t k) {
  cur_dev = k;
  set_device(k);
}
const char *sf__gpu_unavailable_reason(void) { return D.why; }
const char *sf__gpu_arch(void) { return D.arch[here()]; }

bool sf__gpu_ready(const sf_loc *loc) {
  pthread_once(&gpu_once, gpu_init);
  if (D.ok) {
    int32_t k = placement();
    if (!D.ctx[k]) {
      pthread_mutex_lock(&D.mu);
      CUresult rc = D.ctx[k] ? 0 : open_device(k);
      pthread_mutex_unlock(&D.mu);
      if (rc != 0)
        sf__cuda_fail("cuDevicePrimaryCtxRetain", rc, loc);
    }
    cur_dev = k;
    set_device(k); /* the primary context, current on this thread */
    return true;
  }
  if (sf__options.require_gpu)
    sf_runtime_error(loc, "no GPU (%s), and --require-gpu was given", D.why);
  if (!sf__options.quiet && sf__no_gpu_notice_first()) {
    char line[400];
    int k = snprintf(line, sizeof line, "sflow: no GPU (%s); kernels run on the CPU\n", D.why);
    (void)sf__out_write(2, line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1);
  }
  return false;
}

void sf__gpu_sync(const sf_loc *loc) { CU(D.sync(), "cuCtxSynchronize", loc); }

/* --------------------------------------------------------- arrays */

static size_t nbytes(const sf_array *a) { return (size_t)a->len * (size_t)a->elem->size; }

/* sf_array.gpu: 1 + the device of a->dev (0: not set, the default). */
static int32_t array_device(const sf_array *a) { return a->gpu > 0 ? a->gpu - 1 : D.ordinal; }
int32_t sf__gpu_array_device(const sf_array *a) { return array_device(a); }

static void to_host(sf_array *a);

/* An array whose device copy is on another device than this thread's:
 * its host copy made current, its old buffer freed. */
static void leave_device(sf_array *a) {
  to_host(a);
  set_device(array_device(a));
  D.mfree((CUdeviceptr)(uintptr_t)a->dev);
  set_device(here());
  a->dev = NULL;
  a->gpu = 0;
}

uint64_t sf__gpu_device_alloc(sf_array *a, const sf_loc *loc) {
  if (!a || a->len == 0)
    return 0;
  if (a->dev && array_device(a) != here())
    leave_device(a);
  if (!a->dev) {
    CUdeviceptr p = 0;
    CU(D.alloc(&p, nbytes(a)), "cuMemAlloc", loc);
    a->dev = (void *)(uintptr_t)p;
    a->gpu = here() + 1;
  }
  return (uint64_t)(uintptr_t)a->dev;
}

uint64_t sf__gpu_device_copy(sf_array *a, const sf_loc *loc) {
  if (!a || a->len == 0)
    return 0;
  bool fresh = !a->dev || array_device(a) != here();
  uint64_t p = sf__gpu_device_alloc(a, loc);
  if (fresh || a->where == SF__WHERE_HOST) {
    CU(D.htod(p, a->data, nbytes(a)), "cuMemcpyHtoD", loc);
    SF__GPU_STAT_ADD(h2d_bytes, nbytes(a));
    SF__GPU_STAT_ADD(h2d_waits, 1); /* pageable and synchronous: waits for the stream */
    a->where = SF__WHERE_BOTH;
  }
  return p;
}

/* Arrays touched on the device since this thread last settled, each
 * retained so it outlives the run of GPU statements.  An entry whose only
 * reference is the list's own is dead (a loop's `h = matmul(...)` drops
 * the previous h): nothing can read it, so it is released without being
 * copied back, when the list fills (before it grows) and at the settle.
 * The list therefore holds at most about twice the live arrays, the bytes
 * a settle copies do not grow with a loop's length, and a hash set of the
 * entries keeps a touch O(1). */
static _Thread_local struct {
  sf_array **a;    /* (n) the entries, in the order of their first touch */
  size_t n, cap;
  sf_array **set;  /* (2 cap) open addressing over the entries; NULL: empty */
} P;

static size_t slot_of(const sf_array *a, size_t mask) {
  uint64_t h = (uint64_t)(uintptr_t)a * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 17) & mask;
}
static bool set_has(const sf_array *a) {
  size_t mask = 2 * P.cap - 1;
  for (size_t i = slot_of(a, mask); P.set[i]; i = (i + 1) & mask)
    if (P.set[i] == a)
      return true;
  return false;
}
static void set_put(sf_array *a) {
  size_t mask = 2 * P.cap - 1, i = slot_of(a, mask);
  while (P.set[i])
    i = (i + 1) & mask;
  P.set[i] = a;
}

static bool dead(sf_array *a) { return __atomic_load_n(&a->hdr.rc, __ATOMIC_ACQUIRE) == 1; }

/* Drops the dead entries, then grows the list when it is still over half
 * full, and rebuilds the set. */
static void prune_pending(void) {
  size_t k = 0;
  for (size_t i = 0; i < P.n; i++) {
    if (dead(P.a[i])) {
      SF__GPU_STAT_ADD(settle_dropped, 1);
      sf_release(P.a[i]); /* frees it, and its device buffer unread */
    } else {
      P.a[k++] = P.a[i];
    }
  }
  P.n = k;
  if (!P.cap || 2 * P.n > P.cap) {
    size_t cap = P.cap ? 2 * P.cap : 16;
    sf_array **a = realloc(P.a, cap * sizeof *a);
    if (!a)
      sf_runtime_error(NULL, "out of memory");
    P.a = a;
    P.cap = cap;
  }
  free(P.set);
  if (!(P.set = calloc(2 * P.cap, sizeof *P.set)))
    sf_runtime_error(NULL, "out of memory");
  for (size_t i = 0; i < P.n; i++)
    set_put(P.a[i]);
}

void sf__gpu_touch(sf_array *a) {
  if (!a || !a->dev)
    return;
  if (P.cap && set_has(a))
    return;
  if (P.n == P.cap)
    prune_pending();
  sf_retain(a);
  P.a[P.n++] = a;
  set_put(a);
  uint64_t peak = __atomic_load_n(&sf__gpu_stats.pending_peak, __ATOMIC_RELAXED);
  while (P.n > peak && !__atomic_compare_exchange_n(&sf__gpu_stats.pending_peak, &peak, P.n,
                                                    true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

void sf__gpu_device_wrote(sf_array *a) {
  if (!a || !a->dev)
    return;
  a->where = SF__WHERE_DEVICE;
  sf__gpu_touch(a);
}

static void to_host(sf_array *a) {
  if (a->where == SF__WHERE_DEVICE) {
    bool other = array_device(a) != here();
    if (other)
      set_device(array_device(a));
    CUresult rc = D.dtoh(a->data, (CUdeviceptr)(uintptr_t)a->dev, nbytes(a));
    if (other)
      set_device(here());
    if (rc != 0)
      sf__cuda_fail("cuMemcpyDtoH", rc, NULL);
    SF__GPU_STAT_ADD(d2h_bytes, nbytes(a));
  }
  a->where = SF__WHERE_HOST;
}

void sf_gpu_settle(void) {
  if (!P.n)
    return; /* nothing to copy: no wait, so the deferred checks wait too */
  /* Take the list first: releasing an array may free it. */
  sf_array **list = P.a;
  size_t n = P.n;
  free(P.set);
  P.a = P.set = NULL;
  P.n = P.cap = 0;
  bool waited = false;
  for (size_t i = 0; i < n; i++) {
    if (dead(list[i])) { /* nothing refers to it: released below, unread */
      SF__GPU_STAT_ADD(settle_dropped, 1);
      continue;
    }
    waited |= list[i]->where == SF__WHERE_DEVICE;
    to_host(list[i]);
  }
  for (size_t i = 0; i < n; i++)
    sf_release(list[i]);
  free(list);
  sf__gpu_kcheck(waited, NULL); /* a copy back waited for the device */
}

/* sf_array_host (array.c) when a's only current copy is on the device. */
static void array_to_host(sf_array *a) {
  set_device(here());
  to_host(a);
}

void sf__gpu_install(void) {
  sf__call_begin_hook = sf__gpu_call_begin;
  sf__call_end_hook = sf__gpu_call_end;
  sf__call_fail_hook = sf__gpu_call_abandon;
  sf__array_dev_free = sf__gpu_array_free;
  sf__array_to_host = array_to_host;
  sf__coll_transports[SF__COLL_NCCL] = &sf__coll_nccl;
}

void sf__gpu_array_free(sf_array *a) {
  if (a->dev && D.mfree) {
    set_device(array_device(a));
    D.mfree((CUdeviceptr)(uintptr_t)a->dev);
    set_device(here());
  }
  a->dev = NULL;
  a->gpu = 0;
}

/* ---------------------------------------------------------- modules */

typedef struct {
  const char *src; /* the program text's address: kernels' texts are constants */
  int32_t dev;     /* modules are per context */
  const char *entry;
  CUfunction fn;
  int block;
} LoadedFn;
static LoadedFn *loaded;
static size_t nloaded, cap_loaded;

void *sf__gpu_function(const char *src, const char *entry, int *block, const sf_loc *loc) {
  pthread_mutex_lock(&D.mu);
  for (size_t i = 0; i < nloaded; i++)
    if (loaded[i].src == src && loaded[i].dev == here() && !strcmp(loaded[i].entry, entry)) {
      *block = loaded[i].block;
      pthread_mutex_unlock(&D.mu);
      return loaded[i].fn;
    }
  sf__blob img;
  bool hit;
  char *log = NULL;
  double t0 = now_ms();
  const char *arch = D.arch[here()];
  if (!sf__kernel_image(src, entry, arch, &img, &hit, &log)) {
    pthread_mutex_unlock(&D.mu);
    char msg[SF__ERROR_MAX / 2];
    snprintf(msg, sizeof msg, "%s", log ? log : "?");
    free(log);
    sf_runtime_error(loc, "GPU: NVRTC could not compile kernel '%s' for %s: %s", entry, arch, msg);
  }
  double t1 = now_ms();
  CUmodule mod;
  CUfunction fn;
  CUresult rc = D.load(&mod, img.data);
  sf__blob_free(&img);
  if (rc == 0)
    rc = D.getfn(&fn, mod, entry);
  if (rc != 0) {
    pthread_mutex_unlock(&D.mu);
    sf__cuda_fail("loading the kernel module", rc, loc);
  }
  int min_grid = 0, bs = 256;
  if (D.occupancy(&min_grid, &bs, fn, NULL, 0, 0) != 0 || bs <= 0)
    bs = 256;
  if (hit) {
    SF__GPU_STAT_ADD(cache_hits, 1);
    sf__gpu_stats.load_ms += now_ms() - t0;
  } else {
    SF__GPU_STAT_ADD(compiles, 1);
    sf__gpu_stats.compile_ms += t1 - t0;
  }
  if (nloaded == cap_loaded) {
    cap_loaded = cap_loaded ? cap_loaded * 2 : 16;
    LoadedFn *p = realloc(loaded, cap_loaded * sizeof *p);
    if (!p)
      sf_runtime_error(loc, "out of memory");
    loaded = p;
  }
  /* The entry's text is copied: callers pass names built in a buffer of
   * their own (kernels.c's "sflow_<op>_f32"), which later names another. */
  char *name = strdup(entry);
  if (!name)
    sf_runtime_error(loc, "out of memory");
  loaded[nloaded++] = (LoadedFn){src, here(), name, fn, bs};
  *block = bs;
  pthread_mutex_unlock(&D.mu);
  return fn;
}

void sf__gpu_launch(void *f, int block, int64_t n, void **params, const sf_loc *loc) {
  if (n <= 0)
    return;
  int64_t grid = (n + block - 1) / block;
  if (grid > 0x7fffffff)
    sf_runtime_error(loc, "launch of %" PRId64 " threads is too large for one grid", n);
  CU(D.launch((CUfunction)f, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, 0, NULL, params, NULL),
     "cuLaunchKernel", loc);
  sf__gpu_sync(loc);
}

/* ----------------------------------------------------------- launch */

/* Mirrors sf_kerr in cudagen.c's prelude. */
typedef struct {
  int32_t code, line, col, lock;
  int64_t a, b;
  double x;
  uint64_t ntid; /* ~ the failing thread's index; 0: no failure */
} KErr;

static CUdeviceptr kerr_buf(const sf_loc *loc) {
  static _Thread_local CUdeviceptr p[MAX_DEVICES];
  if (!p[here()])
    CU(D.alloc(&p[here()], sizeof(KErr)), "cuMemAlloc", loc);
  return p[here()];
}

/* The failure as the CPU version reports it, at the kernel's line; a
 * kernel that takes tensors also names itself and its launch (ktail). */
static void kerr_message(const sf_kernel_desc *k, const KErr *e, char *buf, size_t n) {
  char num[SF__FLOAT_BUF];
  switch (e->code) {
  case 1: snprintf(buf, n, "index %" PRId64 " out of bounds for length %" PRId64, e->a, e->b); break;
  case 2: snprintf(buf, n, "integer division by zero"); break;
  default:
    sf__fmt_f64_repr(e->x, num);
    snprintf(buf, n, "cannot convert %s to %s", num, e->code == 3 ? "i32" : "i64");
  }
  (void)k;
}

static int ktail(const sf_kernel_desc *k, const sf_loc *launch, char *buf, size_t n) {
  return snprintf(buf, n, " (kernel '%s', launched at %s:%d:%d)", k->name,
                  launch && launch->file ? launch->file : "?", launch ? (int)launch->line : 0,
                  launch ? (int)launch->col : 0);
}

_Noreturn static void kernel_error(const sf_kernel_desc *k, const KErr *e, const sf_loc *launch) {
  sf_loc at = {k->file, e->line, e->col};
  char msg[256], tail[256] = "";
  kerr_message(k, e, msg, sizeof msg);
  if (launch)
    ktail(k, launch, tail, sizeof tail);
  sf_runtime_error(&at, "%s%s", msg, tail);
}

/* ------------------------------------------- deferred kernel checks
 *
 * A kernel that takes tensors runs in a training step, where the host
 * must not wait for the device (docs/nn.md "Streams").  Its launch goes on
 * stream 0 and returns; its failure record stays on the device, one slot
 * per launch in a buffer of this thread, and the launch (kernel, source
 * place, slot) goes on this thread's list.  The list is checked at the
 * next point that waits anyway: a tensor read back (sf__t_data), a settle
 * that copies arrays back, an arrays-only launch (it waits for its own
 * record), the end of the task call or actor method, the end of main.
 * One read of the used slots then raises the first failed launch's error,
 * at the kernel's line, naming the kernel and the launch.  A call checks
 * only its own launches (call_mark): a task run inline by an await on
 * this thread does not report the failure of the call that awaits. */
#define KSLOTS 256

typedef struct {
  const sf_kernel_desc *k;
  const sf_loc *loc;
  int32_t dev, slot;
} KPending;

static _Thread_local KPending *kp;
static _Thread_local int32_t nkp, cap_kp, call_mark;
static _Thread_local CUdeviceptr kslots[MAX_DEVICES];
static _Thread_local int32_t kused[MAX_DEVICES];

static void kcheck(int32_t from, bool waited, const sf_loc *loc);

/* A free record on this thread's device, checking the launches so far
 * when all KSLOTS are taken (a long run of launches: one wait per KSLOTS).
 * sf_launch calls it before it holds the launch's tensors, so that a
 * failure raised here leaks nothing. */
static void kslot_room(const sf_loc *loc) {
  int32_t d = here();
  if (kused[d] == KSLOTS)
    kcheck(call_mark, false, loc);
  if (kused[d] == KSLOTS)
    kcheck(0, false, loc); /* the rest are an outer call's */
}

/* The record of a deferred launch on this thread's device. */
static CUdeviceptr kslot_take(const sf_kernel_desc *k, const sf_loc *loc) {
  int32_t d = here();
  kslot_room(loc);
  if (!kslots[d]) {
    CU(D.alloc(&kslots[d], KSLOTS * sizeof(KErr)), "cuMemAlloc", loc);
    CU(D.memset8(kslots[d], 0, KSLOTS * sizeof(KErr)), "cuMemsetD8", loc);
  }
  if (nkp == cap_kp) {
    cap_kp = cap_kp ? cap_kp * 2 : 32;
    KPending *p = realloc(kp, (size_t)cap_kp * sizeof *p);
    if (!p)
      sf_runtime_error(loc, "out of memory");
    kp = p;
  }
  int32_t slot = kused[d]++;
  kp[nkp++] = (KPending){k, loc, d, slot};
  return kslots[d] + (CUdeviceptr)slot * sizeof(KErr);
}

/* Checks the launches [from, nkp) of this thread; waited: the device is
 * known idle (a read just waited), so this read is not counted as a sync. */
static void kcheck(int32_t from, bool waited, const sf_loc *loc) {
  if (nkp <= from)
    return;
  static _Thread_local KErr recs[KSLOTS];
  int32_t bad = -1;
  KErr e = {0};
  bool counted = waited;
  for (int32_t d = 0; d < MAX_DEVICES; d++) {
    int32_t lo = KSLOTS, hi = 0, keep = 0; /* slots of the checked launches; kept below */
    for (int32_t i = 0; i < nkp; i++)
      if (kp[i].dev == d) {
        if (i >= from) {
          lo = kp[i].slot < lo ? kp[i].slot : lo;
          hi = kp[i].slot + 1 > hi ? kp[i].slot + 1 : hi;
        } else {
          keep = kp[i].slot + 1 > keep ? kp[i].slot + 1 : keep;
        }
      }
    if (lo >= hi)
      continue;
    if (d != here())
      set_device(d);
    CUresult rc = D.dtoh(&recs[lo], kslots[d] + (CUdeviceptr)lo * sizeof(KErr),
                         (size_t)(hi - lo) * sizeof(KErr));
    if (rc == 0)
      rc = D.memset8(kslots[d] + (CUdeviceptr)lo * sizeof(KErr), 0,
                     (size_t)(hi - lo) * sizeof(KErr));
    if (d != here())
      set_device(here());
    if (rc != 0)
      sf__cuda_fail("reading kernels' failure records", rc, loc);
    if (!counted) {
      SF__GPU_STAT_ADD(d2h_syncs, 1);
      counted = true;
    }
    for (int32_t i = from; i < nkp; i++)
      if (kp[i].dev == d && recs[kp[i].slot].code > 0 && (bad < 0 || i < bad)) {
        bad = i;
        e = recs[kp[i].slot];
      }
    kused[d] = keep;
  }
  KPending p = bad >= 0 ? kp[bad] : (KPending){0};
  nkp = from;
  if (bad >= 0)
    kernel_error(p.k, &e, p.loc);
}

int32_t sf__gpu_call_begin(void) {
  int32_t was = call_mark;
  call_mark = nkp;
  return was;
}

/* The mark is put back only after the check passed: a failure goes on to
 * sf__gpu_call_abandon, which still needs it. */
void sf__gpu_call_end(int32_t was) {
  kcheck(call_mark, false, NULL);
  call_mark = was;
}

/* A call that failed: its launches are forgotten, their slots cleared. */
void sf__gpu_call_abandon(int32_t was) {
  int32_t mark = call_mark;
  call_mark = was;
  if (nkp <= mark)
    return;
  for (int32_t d = 0; d < MAX_DEVICES; d++) {
    int32_t lo = KSLOTS, keep = 0;
    for (int32_t i = 0; i < nkp; i++)
      if (kp[i].dev == d) {
        if (i >= mark)
          lo = kp[i].slot < lo ? kp[i].slot : lo;
        else
          keep = kp[i].slot + 1 > keep ? kp[i].slot + 1 : keep;
      }
    if (lo >= kused[d])
      continue;
    if (d != here())
      set_device(d);
    D.memset8(kslots[d] + (CUdeviceptr)lo * sizeof(KErr), 0,
              (size_t)(kused[d] - lo) * sizeof(KErr));
    if (d != here())
      set_device(here());
    kused[d] = keep;
  }
  nkp = mark;
}

void sf__gpu_kcheck(bool waited, const sf_loc *loc) { kcheck(call_mark, waited, loc); }
void sf__gpu_kcheck_exit(void) { kcheck(0, false, NULL); }

static void launch_gpu(const sf_kernel_desc *k, int64_t n, void *args, bool deferred,
                       const sf_loc *loc) {
  int block;
  CUfunction fn = sf__gpu_function(k->cuda, k->entry, &block, loc);
  /* The record first: taking it may check earlier launches (and raise)
   * before anything below is allocated. */
  CUdeviceptr err = deferred ? kslot_take(k, loc) : 0;
  const sf_type *at = k->args;
  int np = at ? at->nfields : 0;
  /* Two slots per parameter (an array's pointer and length), plus n, err. */
  void **params = sf__alloc_n((size_t)np * 2 + 2, sizeof *params);
  uint64_t *ptrs = sf__alloc_n((size_t)np + 1, sizeof *ptrs);
  int64_t *lens = sf__alloc_n((size_t)np + 1, sizeof *lens);
  if (!deferred) {
    err = kerr_buf(loc);
    CU(D.memset8(err, 0, sizeof(KErr)), "cuMemsetD8", loc);
  }
  int q = 0;
  params[q++] = &n;
  params[q++] = &err;
  for (int i = 0; i < np; i++) {
    const sf_field *f = &at->fields[i];
    char *slot = (char *)args + f->offset;
    if (f->type->kind == SF_ARRAY) {
      sf_array *a = *(sf_array **)slot;
      ptrs[i] = sf__gpu_device_copy(a, loc);
      lens[i] = a ? a->len : 0;
      params[q++] = &ptrs[i];
      params[q++] = &lens[i];
    } else if (f->type->kind == SF_TENSOR) { /* as an f32[]: address, numel */
      ptrs[i] = sf__ktensors.dptr(*(void **)slot, &lens[i], loc);
      params[q++] = &ptrs[i];
      params[q++] = &lens[i];
    } else {
      params[q++] = slot;
    }
  }
  int64_t grid = (n + block - 1) / block;
  if (grid > 0x7fffffff)
    sf_runtime_error(loc, "launch of %" PRId64 " threads is too large for one grid", n);
  if (n > 0)
    CU(D.launch(fn, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, 0, NULL, params, NULL),
       "cuLaunchKernel", loc);
  for (int i = 0; i < np; i++)
    if (at->fields[i].type->kind == SF_ARRAY) {
      sf_array *a = *(sf_array **)((char *)args + at->fields[i].offset);
      if (i >= 64 || (k->writes >> i & 1))
        sf__gpu_device_wrote(a);
      else
        sf__gpu_touch(a);
    }
  sf_free(params);
  sf_free(ptrs);
  sf_free(lens);
  SF__GPU_STAT_ADD(gpu_launches, 1);
  if (deferred)
    return;
  /* An arrays-only launch waits for its record (its semantics since
   * before tensors); the deferred launches before it are then done too. */
  KErr e;
  sf__gpu_sync(loc);
  CU(D.dtoh(&e, err, sizeof e), "cuMemcpyDtoH", loc);
  kcheck(call_mark, true, loc);
  if (e.code > 0)
    kernel_error(k, &e, NULL);
}

#define CPU_GRAIN 16384 /* thread ids per chunk, at least */

typedef struct cpu_launch {
  const sf_kernel_desc *k;
  void *args;
} cpu_launch;

static void cpu_range(void *ctx, int64_t lo, int64_t hi) {
  cpu_launch *c = ctx;
  c->k->cpu(lo, hi, c->args);
}

sf__kernel_tensors sf__ktensors;

static bool takes_tensors(const sf_kernel_desc *k) {
  for (int i = 0; k->args && i < k->args->nfields; i++)
    if (k->args->fields[i].type->kind == SF_TENSOR)
      return true;
  return false;
}

/* The CPU version of a kernel that takes tensors, its error caught so
 * that the message names the kernel and the launch as the GPU's does, and
 * the launch's tensors are released first. */
static __attribute__((noinline)) bool cpu_run_caught(const sf_kernel_desc *k, int64_t n,
                                                      void *blk) {
  jmp_buf jb, *saved = sf__error_jmp;
  sf_frame *saved_frames = sf__error_frames;
  sf__error_jmp = &jb;
  sf__error_frames = sf_frames;
  if (setjmp(jb) != 0) {
    sf__error_jmp = saved;
    sf__error_frames = saved_frames;
    return false;
  }
  if (n >= CPU_GRAIN * 2) {
    cpu_launch c = {k, blk};
    sf__parallel_for(n, CPU_GRAIN, cpu_range, &c);
  } else {
    k->cpu(0, n, blk);
  }
  sf__error_jmp = saved;
  sf__error_frames = saved_frames;
  return true;
}

/* A kernel that takes tensors runs where tensor ops run (on the GPU only
 * when the running call holds one, docs/nn.md "GPU"), and on the GPU
 * without waiting (the deferred checks above); others wherever a GPU is
 * ready, as before tensors, and wait for their record. */
void sf_launch(const sf_kernel_desc *k, int64_t n, void *args, const sf_loc *loc) {
  if (n < 0)
    sf_runtime_error(loc, "launch of kernel '%s' with a negative thread count %" PRId64, k->name, n);
  bool tens = takes_tensors(k);
  bool gpu = tens ? sf__ktensors.on_gpu(loc) : sf__gpu_ready(loc);
  if (gpu && tens)
    kslot_room(loc);
  void *blk = tens ? sf__ktensors.begin(k, args, gpu, loc) : args;
  if (gpu) {
    launch_gpu(k, n, blk, tens, loc);
  } else {
    SF__GPU_STAT_ADD(cpu_launches, 1);
    if (tens) {
      if (!cpu_run_caught(k, n, blk)) {
        char msg[SF__ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", sf__error_message);
        size_t len = strlen(msg);
        ktail(k, loc, msg + len, sizeof msg - len);
        sf__ktensors.end(k, blk, gpu);
        sf__raise_message(msg);
      }
    } else if (n >= CPU_GRAIN * 2) { /* on the CPU threads: large launches split over the pool */
      cpu_launch c = {k, blk};
      sf__parallel_for(n, CPU_GRAIN, cpu_range, &c);
    } else {
      k->cpu(0, n, blk);
    }
  }
  if (tens)
    sf__ktensors.end(k, blk, gpu);
}

/* SFLOW_GPU_STATS=1: one line of counters on stderr at exit, for tests and
 * benchmarks. */
static void print_stats(void) {
  sf_gpu_settle();
  const sf__gpu_stats_t *s = &sf__gpu_stats;
  sf__dalloc_stats m = sf__dev_stats(); /* the tensor allocator (alloc.c) */
  fprintf(stderr,
          "sflow-gpu-stats: h2d_bytes=%" PRIu64 " d2h_bytes=%" PRIu64 " gpu_launches=%" PRIu64
          " cpu_launches=%" PRIu64 " compiles=%" PRIu64 " cache_hits=%" PRIu64
          " compile_ms=%.3f load_ms=%.3f gpu_matmuls=%" PRIu64 " cpu_matmuls=%" PRIu64
          " d2h_syncs=%" PRIu64 " dev_in_use=%" PRIu64 " dev_cached=%" PRIu64
          " dev_peak=%" PRIu64 " dev_allocs=%" PRIu64 " settle_dropped=%" PRIu64
          " pending_peak=%" PRIu64 " h2d_waits=%" PRIu64 " h2d_pinned=%" PRIu64 "\n",
          s->h2d_bytes, s->d2h_bytes, s->gpu_launches, s->cpu_launches, s->compiles,
          s->cache_hits, s->compile_ms, s->load_ms, s->gpu_matmuls, s->cpu_matmuls,
          s->d2h_syncs, m.in_use, m.cached, m.peak, m.allocs, s->settle_dropped,
          s->pending_peak, s->h2d_waits, s->h2d_pinned);
}

__attribute__((constructor)) static void stats_hook(void) {
  const char *e = getenv("SFLOW_GPU_STATS");
  if (e && *e && strcmp(e, "0"))
    atexit(print_stats);
}
