/*
 * device.c — tensors on the GPU: where an op runs (sf__nn_gpu_here), the
 * storage's device copy and the accessors that keep it and the host copy
 * coherent, and the nn kernels' table and launch (docs/nn.md, "GPU").
 *
 * Key design choices:
 *  - The context decides, not the tensor: an op runs on the GPU when the
 *    running call (an actor method of an actor with @gpus > 0, or a task
 *    call placed on a device) holds one and the driver is up.  Inputs on
 *    the host are uploaded (and keep their device copy: a param goes over
 *    once), results are device tensors; in a CPU context a device tensor
 *    is read back at its first host access.
 *  - A storage keeps a host and a device copy with `where` saying which is
 *    current, as sf_array does.  Host code reaches values only through
 *    sf__t_data (read) and sf__t_wdata (write), inline tests of `where`
 *    that cost the CPU path one compare; the slow path here copies device
 *    to host (cuMemcpyDtoH on the legacy stream, which waits for the work
 *    before it: the only synchronisation of a training step) and counts it
 *    in sf__gpu_stats.d2h_syncs.
 *  - Device memory comes from the caching allocator (runtime/gpu/alloc.c);
 *    kernels and cuBLAS go on stream 0 without waiting, so a step is a
 *    queue of launches the host never waits for until it reads a value.
 *  - Kernels come from the files of kernels/ through sf__gpu_function (NVRTC and
 *    the on-disk cache) once per device; a per-process table keyed by the
 *    entry's name makes every later lookup a few loads, without a lock.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;

/* -------------------------------------------------------- placement */

/* The answer for the call running on this thread, keyed by what decides
 * it: the actor (and its rank) or the task's device.  A call on another
 * thread, or the next call, has another key (or the same answer). */
static _Thread_local struct {
  bool valid, on;
  const void *actor;
  int64_t rank;
  int32_t gpu, dev;
} here_cache;
static int no_gpu; /* sf__gpu_ready said no once: no GPU for this process */

bool sf__nn_gpu_here(const sf_loc *loc) {
  sf_actor *a = sf__current_actor();
  int32_t gpu = sf__current_gpu;
  if (a) {
    if (sf__actor_desc(a)->gpus <= 0)
      return false;
  } else if (gpu < 0) {
    return false;
  }
  if (__atomic_load_n(&no_gpu, __ATOMIC_RELAXED) && !sf__options.require_gpu)
    return false;
  int64_t rank = a ? sf__actor_rank(a) : 0;
  if (here_cache.valid && here_cache.actor == a && here_cache.gpu == gpu &&
      here_cache.rank == rank && (!here_cache.on || sf__gpu_current_device() == here_cache.dev))
    return here_cache.on;
  bool on = sf__gpu_ready(loc);
  if (!on)
    __atomic_store_n(&no_gpu, 1, __ATOMIC_RELAXED);
  here_cache.valid = true;
  here_cache.on = on;
  here_cache.actor = a;
  here_cache.rank = rank;
  here_cache.gpu = gpu;
  here_cache.dev = on ? sf__gpu_current_device() : -1;
  return on;
}

/* ------------------------------------------------- driver entries */

static struct {
  pthread_once_t once;
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **);
} DRV = {.once = PTHREAD_ONCE_INIT};

static void drv_init(void) {
  *(void **)&DRV.htod = sf__cuda_sym("cuMemcpyHtoD_v2");
  *(void **)&DRV.dtoh = sf__cuda_sym("cuMemcpyDtoH_v2");
  *(void **)&DRV.launch = sf__cuda_sym("cuLaunchKernel");
}

static void drv(const sf_loc *loc) {
  pthread_once(&DRV.once, drv_init);
  if (!DRV.htod || !DRV.dtoh || !DRV.launch)
    sf_runtime_error(loc, "GPU: tensors on the device need the CUDA driver (%s)",
                     sf__gpu_unavailable_reason());
}

/* ---------------------------------------------------------- storage */

/* Host syncs of one storage from two threads (a param read by two members
 * at once) must not copy twice into one buffer; the slow path is rare. */
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;

static int32_t st_device(const sf__storage *s) { return s->gpu - 1; }

/* Runs with s's device current (a device read from a CPU-context thread,
 * or a storage of another device), then puts the thread's back. */
static int32_t enter_device(int32_t k) {
  int32_t was = sf__gpu_current_device();
  if (k != was)
    sf__gpu_use_device(k);
  return was;
}
static void leave_device(int32_t k, int32_t was) {
  if (k != was)
    sf__gpu_use_device(was);
}

/* The device copy into the host copy (made when missing). */
static void copy_back(sf__storage *s, const sf_loc *loc) {
  drv(loc);
  if (!s->data)
    s->data = sf__storage_host_alloc(s->len);
  size_t bytes = (size_t)s->len * sizeof(float);
  int32_t was = enter_device(st_device(s));
  CUresult rc = bytes ? DRV.dtoh(s->data, (CUdeviceptr)(uintptr_t)s->dev, bytes) : 0;
  leave_device(st_device(s), was);
  if (rc != 0)
    sf__cuda_fail("cuMemcpyDtoH (reading a tensor back)", rc, loc);
  SF__GPU_STAT_ADD(d2h_syncs, 1);
  SF__GPU_STAT_ADD(d2h_bytes, bytes);
}

float *sf__t_host_sync(const sf_tensor *t, bool write) {
  sf__storage *s = t->st;
  pthread_mutex_lock(&sync_mu);
  bool read = s->where == SF__WHERE_DEVICE;
  if (read) {
    copy_back(s, NULL);
    s->where = SF__WHERE_BOTH;
  }
  if (write)
    s->where = SF__WHERE_HOST;
  pthread_mutex_unlock(&sync_mu);
  /* The read waited for the device: the kernels this thread launched
   * without waiting are checked now, at no extra wait (gpu.c). */
  if (read)
    sf__gpu_kcheck(true, NULL);
  return s->data + t->offset;
}

sf__storage *sf__storage_dev_new(int64_t len, const sf_loc *loc) {
  sf__storage *s = sf_alloc(sizeof *s);
  s->rc = 1;
  s->len = len;
  s->data = NULL;
  s->dev = (void *)(uintptr_t)sf__dev_alloc(sf__storage_bytes(len), loc);
  s->where = SF__WHERE_DEVICE;
  s->gpu = sf__gpu_current_device() + 1;
  return s;
}

void sf__storage_dev_free(sf__storage *s) {
  sf__dev_free((uint64_t)(uintptr_t)s->dev, sf__storage_bytes(s->len), st_device(s));
  s->dev = NULL;
  s->gpu = 0;
}

/* ------------------------------------------------- pinned staging */

/* A synchronous cuMemcpyHtoD from pageable memory waits for every kernel
 * queued before it, and cuMemcpyHtoDAsync from pageable memory may too
 * (CUDA's "API synchronization behavior"): a step that uploads its batch
 * would wait for the previous step each time.  So an upload is copied
 * into NSTAGE pinned buffers of its device, filled one after another, and
 * queued with cuMemcpyHtoDAsync on stream 0 from there; each buffer's
 * event, recorded after its latest copy, says (stream order) when all of
 * its copies have run.  Only refilling a buffer whose copies have not run
 * yet waits (the device is NSTAGE buffers of uploads behind: hundreds of
 * batches), counted in h2d_waits, as is every synchronous copy of the
 * fallback (a driver without these entries, or SFLOW_PINNED_STAGING=0). */
#define NSTAGE 4
#define STAGE_BYTES ((size_t)4 << 20)
#define STAGE_DEVICES 16
enum { CU_NOT_READY = 600, CU_HOSTALLOC_PORTABLE = 1 };
typedef struct {
  char *buf;   /* STAGE_BYTES of pinned memory, NULL until first used */
  size_t used; /* bytes of buf handed out since it was last refilled */
  void *ev;    /* recorded after the latest copy out of buf */
  bool queued;
} stage;
static struct {
  pthread_once_t once;
  bool ok;
  CUresult (*host_alloc)(void **, size_t, unsigned);
  CUresult (*htod_async)(CUdeviceptr, const void *, size_t, void *);
  CUresult (*ev_create)(void **, unsigned);
  CUresult (*ev_record)(void *, void *);
  CUresult (*ev_query)(void *);
  CUresult (*ev_sync)(void *);
  pthread_mutex_t mu[STAGE_DEVICES];
  stage s[STAGE_DEVICES][NSTAGE];
  int cur[STAGE_DEVICES]; /* the buffer being filled */
} STG = {.once = PTHREAD_ONCE_INIT};

static void stage_init(void) {
  *(void **)&STG.host_alloc = sf__cuda_sym("cuMemHostAlloc");
  *(void **)&STG.htod_async = sf__cuda_sym("cuMemcpyHtoDAsync_v2");
  *(void **)&STG.ev_create = sf__cuda_sym("cuEventCreate");
  *(void **)&STG.ev_record = sf__cuda_sym("cuEventRecord");
  *(void **)&STG.ev_query = sf__cuda_sym("cuEventQuery");
  *(void **)&STG.ev_sync = sf__cuda_sym("cuEventSynchronize");
  const char *e = getenv("SFLOW_PINNED_STAGING");
  STG.ok = STG.host_alloc && STG.htod_async && STG.ev_create && STG.ev_record && STG.ev_query &&
           STG.ev_sync && !(e && !strcmp(e, "0"));
  for (int i = 0; i < STAGE_DEVICES; i++)
    pthread_mutex_init(&STG.mu[i], NULL);
}

/* Buffer st of device k made free to refill: its memory allocated at the
 * first use, its copies waited for (under STG.mu[k]).  False when pinned
 * memory cannot be had (the caller copies synchronously). */
static bool stage_refill(int32_t k, stage *st, const sf_loc *loc) {
  if (!st->buf) {
    void *p = NULL;
    if (STG.host_alloc(&p, STAGE_BYTES, CU_HOSTALLOC_PORTABLE) != 0 ||
        STG.ev_create(&st->ev, 0) != 0)
      return false; /* no pinned memory left: the synchronous copy will do */
    st->buf = p;
  }
  if (st->queued) {
    CUresult rc = STG.ev_query(st->ev);
    if (rc == CU_NOT_READY) {
      SF__GPU_STAT_ADD(h2d_waits, 1);
      rc = STG.ev_sync(st->ev);
    }
    if (rc != 0) {
      pthread_mutex_unlock(&STG.mu[k]);
      sf__cuda_fail("cuEventSynchronize (a pinned staging buffer)", rc, loc);
    }
    st->queued = false;
  }
  st->used = 0;
  return true;
}

/* n (<= STAGE_BYTES) bytes of staging memory of device k, in the buffer
 * being filled or the next one; NULL without pinned memory. */
static char *stage_room(int32_t k, size_t n, stage **out, const sf_loc *loc) {
  stage *st = &STG.s[k][STG.cur[k]];
  if (!st->buf || st->used + n > STAGE_BYTES) {
    if (st->buf)
      st = &STG.s[k][STG.cur[k] = (STG.cur[k] + 1) % NSTAGE];
    if (!stage_refill(k, st, loc))
      return NULL;
  }
  char *p = st->buf + st->used;
  st->used += (n + 255) & ~(size_t)255; /* the next copy's source 256-byte aligned */
  *out = st;
  return p;
}

/* bytes at src into device memory dst, queued on stream 0 in chunks
 * through the staging buffers; returns the bytes queued, fewer than asked
 * (0) when pinned memory is not to be had. */
static size_t upload_pinned(CUdeviceptr dst, const char *src, size_t bytes, const sf_loc *loc) {
  int32_t k = sf__gpu_current_device();
  if (k < 0 || k >= STAGE_DEVICES)
    return 0;
  size_t off = 0;
  pthread_mutex_lock(&STG.mu[k]);
  while (off < bytes) {
    size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
    stage *st;
    char *p = stage_room(k, n, &st, loc);
    if (!p)
      break;
    memcpy(p, src + off, n);
    CUresult rc = STG.htod_async(dst + off, p, n, NULL);
    if (rc == 0)
      rc = STG.ev_record(st->ev, NULL);
    if (rc != 0) {
      pthread_mutex_unlock(&STG.mu[k]);
      sf__cuda_fail("cuMemcpyHtoDAsync (a tensor to the device, from pinned memory)", rc, loc);
    }
    st->queued = true;
    off += n;
  }
  pthread_mutex_unlock(&STG.mu[k]);
  SF__GPU_STAT_ADD(h2d_pinned, off);
  return off;
}

void sf__dev_upload(uint64_t dst, const void *src, size_t bytes, const sf_loc *loc) {
  drv(loc);
  pthread_once(&STG.once, stage_init);
  size_t done = bytes && STG.ok ? upload_pinned(dst, src, bytes, loc) : 0;
  if (done < bytes) {
    CUresult rc = DRV.htod(dst + done, (const char *)src + done, bytes - done);
    if (rc != 0)
      sf__cuda_fail("cuMemcpyHtoD (a tensor to the device)", rc, loc);
    SF__GPU_STAT_ADD(h2d_waits, 1); /* pageable and synchronous: waits for the stream */
  }
  SF__GPU_STAT_ADD(h2d_bytes, bytes);
}

/* The host values into the device copy. */
static void upload(sf__storage *s, const sf_loc *loc) {
  sf__dev_upload((CUdeviceptr)(uintptr_t)s->dev, s->data, (size_t)s->len * sizeof(float), loc);
}

uint64_t sf__t_dptr(sf_tensor *t, const sf_loc *loc) {
  sf__storage *s = t->st;
  int32_t here = sf__gpu_current_device();
  if (s->dev && st_device(s) != here) {
    /* Made on another device: through the host to this one. */
    pthread_mutex_lock(&sync_mu);
    if (s->where == SF__WHERE_DEVICE)
      copy_back(s, loc);
    s->where = SF__WHERE_HOST;
    pthread_mutex_unlock(&sync_mu);
    sf__storage_dev_free(s);
  }
  if (!s->dev) {
    s->dev = (void *)(uintptr_t)sf__dev_alloc(sf__storage_bytes(s->len), loc);
    s->gpu = here + 1;
    upload(s, loc);
    s->where = SF__WHERE_BOTH;
  } else if (s->where == SF__WHERE_HOST) {
    upload(s, loc);
    s->where = SF__WHERE_BOTH;
  }
  return (uint64_t)(uintptr_t)s->dev + (uint64_t)t->offset * sizeof(float);
}

void sf__t_dwrote(sf_tensor *t) { t->st->where = SF__WHERE_DEVICE; }

sf_tensor *sf__t_dempty(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  int64_t n = sf__t_numel_checked(ndim, shape, loc);
  return sf__t_over(ndim, shape, sf__storage_dev_new(n, loc));
}

sf_tensor *sf__t_dzeros(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return sf__gpu_full(ndim, shape, 0.0f, loc);
}

sf_tensor *sf__t_like_here(const sf_tensor *t) {
  if (sf__nn_gpu_here(NULL))
    return sf__t_dempty(t->ndim, t->shape, NULL);
  return sf__t_like(t);
}

sf_tensor *sf__t_place(sf_tensor *t, const sf_loc *loc) {
  if (t && sf__nn_gpu_here(loc))
    (void)sf__t_dptr(t, loc);
  return t;
}

/* ---------------------------------------------------------- kernels */

/* Entries by name and device.  Slots are filled under the mutex and read
 * without it: a slot's name is published last (release), so a reader that
 * sees it sees the function too. */
#define KSLOTS 512
typedef struct {
  const char *entry; /* NULL: empty */
  const char *file;
  int32_t dev;
  void *fn;
} kslot;
static kslot ktab[KSLOTS];
static pthread_mutex_t kmu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t khash(const char *file, const char *entry, int32_t dev) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)dev;
  for (const char *p = file; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (const char *p = entry; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

void *sf__nn_kernel(const char *file, const char *entry, int *block, const sf_loc *loc) {
  int32_t dev = sf__gpu_current_device();
  uint64_t h = khash(file, entry, dev);
  *block = 256;
  for (uint64_t i = 0; i < KSLOTS; i++) {
    kslot *k = &ktab[(h + i) % KSLOTS];
    const char *e = __atomic_load_n(&k->entry, __ATOMIC_ACQUIRE);
    if (!e)
      break;
    if (k->dev == dev && !strcmp(e, entry) && !strcmp(k->file, file))
      return k->fn;
  }
  const sf__kernel_source *src = sf__kernel_source_find(file);
  if (!src)
    sf_runtime_error(loc, "GPU: kernels/%s.cu is not embedded in the runtime", file);
  int suggested;
  void *fn = sf__gpu_function(src->text, entry, &suggested, loc);
  pthread_mutex_lock(&kmu);
  for (uint64_t i = 0; i < KSLOTS; i++) {
    kslot *k = &ktab[(h + i) % KSLOTS];
    if (!k->entry) {
      /* The names are copied: a caller may build them in a buffer. */
      char *e = strdup(entry), *f = strdup(file);
      if (!e || !f) {
        free(e);
        free(f);
        break;
      }
      k->file = f;
      k->dev = dev;
      k->fn = fn;
      __atomic_store_n(&k->entry, e, __ATOMIC_RELEASE);
      break;
    }
    if (k->dev == dev && !strcmp(k->entry, entry) && !strcmp(k->file, file))
      break; /* another thread's, the same function */
  }
  pthread_mutex_unlock(&kmu); /* a full table only loses the fast path */
  return fn;
}

void sf__nn_launch(void *f, int64_t grid, int block, unsigned shmem, void **params,
                   const sf_loc *loc) {
  if (grid <= 0)
    return;
  if (grid > 0x7fffffff)
    sf_runtime_error(loc, "GPU: a launch of %" PRId64 " blocks is too large for one grid", grid);
  drv(loc);
  CUresult rc = DRV.launch(f, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, shmem, NULL, params,
                           NULL);
  if (rc != 0)
    sf__cuda_fail("cuLaunchKernel (a tensor kernel)", rc, loc);
  SF__GPU_STAT_ADD(gpu_launches, 1);
}
