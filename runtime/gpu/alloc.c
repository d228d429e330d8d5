/*
 * alloc.c — the caching device allocator of tensor storage (docs/nn.md,
 * "GPU"), one per device, over cuMemAlloc / cuMemFree.
 *
 * A training step frees and makes the same activations and gradients
 * every step; cuMemAlloc and cuMemFree each cost tens of microseconds and
 * cuMemFree synchronises the device, so calling them per tensor would
 * serialise every step.  Instead a freed block goes to a free list of its
 * size class and the next request of that class takes it back.
 *
 * Key design choices:
 *  - Size classes: a request is rounded up to a multiple of 512 bytes
 *    below 1 MiB and of 2 MiB from 1 MiB up; a block is only ever reused
 *    for its own class (no splitting), so fragmentation is bounded by the
 *    rounding.  The free lists are a small open-addressed table from class
 *    to a stack of blocks, the most recently freed first (warm in L2).
 *  - Reuse is safe without events because every tensor kernel, cuBLAS
 *    call and copy goes on the legacy default stream (stream 0): work that
 *    still reads a freed block is ordered before any work that writes it
 *    again.
 *  - Out of memory: the cached blocks are given back (cuMemFree) and the
 *    request tried once more; a second failure is a runtime error naming
 *    the bytes asked, in use and cached.
 *  - The cache is unbounded by default (the working set of a step is what
 *    it holds, and OOM empties it); SFLOW_GPU_CACHE_MB bounds it: a block
 *    freed past the bound goes back to the driver at once.
 *  - Written over a backend of two function pointers, so the unit test
 *    (tests/unit/test_rt_gpualloc.c) drives the whole logic with host
 *    memory and a fake out-of-memory.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

#define SMALL_MAX ((size_t)1 << 20) /* below: 512-byte classes */
#define SMALL_STEP ((size_t)512)
#define LARGE_STEP ((size_t)2 << 20)

size_t sf__dalloc_round(size_t bytes) {
  if (bytes == 0)
    bytes = 1;
  size_t step = bytes < SMALL_MAX ? SMALL_STEP : LARGE_STEP;
  return (bytes + step - 1) / step * step;
}

typedef struct {
  size_t size;    /* the class (0: an empty slot) */
  uint64_t *blk;  /* a stack of free blocks of this class */
  int64_t n, cap;
} freelist;

struct sf__dalloc {
  pthread_mutex_t mu;
  sf__dalloc_backend be;
  size_t bound;   /* cache bound in bytes, 0: none */
  freelist *lists;
  int64_t nlists, caplists; /* caplists: a power of two */
  sf__dalloc_stats st;
};

sf__dalloc *sf__dalloc_new(const sf__dalloc_backend *be, size_t cache_bound) {
  sf__dalloc *a = calloc(1, sizeof *a);
  if (!a)
    return NULL;
  pthread_mutex_init(&a->mu, NULL);
  a->be = *be;
  a->bound = cache_bound;
  return a;
}

/* The free list of class size; made when make is set, else NULL if none. */
static freelist *list_of(sf__dalloc *a, size_t size, bool make) {
  if (a->caplists) {
    size_t mask = (size_t)a->caplists - 1, h = (size / SMALL_STEP * 0x9E3779B97F4A7C15ull) & mask;
    for (;; h = (h + 1) & mask) {
      if (a->lists[h].size == size)
        return &a->lists[h];
      if (a->lists[h].size == 0)
        break;
    }
  }
  if (!make)
    return NULL;
  if ((a->nlists + 1) * 2 > a->caplists) { /* grow: rehash the classes */
    int64_t cap = a->caplists ? a->caplists * 2 : 64;
    freelist *nl = calloc((size_t)cap, sizeof *nl);
    if (!nl)
      return NULL;
    for (int64_t i = 0; i < a->caplists; i++)
      if (a->lists[i].size) {
        size_t m = (size_t)cap - 1, h = (a->lists[i].size / SMALL_STEP * 0x9E3779B97F4A7C15ull) & m;
        while (nl[h].size)
          h = (h + 1) & m;
        nl[h] = a->lists[i];
      }
    free(a->lists);
    a->lists = nl;
    a->caplists = cap;
  }
  size_t mask = (size_t)a->caplists - 1, h = (size / SMALL_STEP * 0x9E3779B97F4A7C15ull) & mask;
  while (a->lists[h].size)
    h = (h + 1) & mask;
  a->lists[h].size = size;
  a->nlists++;
  return &a->lists[h];
}

/* Gives every cached block back to the backend; under a->mu. */
static void trim_locked(sf__dalloc *a) {
  for (int64_t i = 0; i < a->caplists; i++) {
    freelist *l = &a->lists[i];
    for (int64_t k = 0; k < l->n; k++) {
      a->be.free(a->be.ctx, l->blk[k]);
      a->st.frees++;
    }
    a->st.cached -= (uint64_t)l->n * l->size;
    l->n = 0;
  }
}

uint64_t sf__dalloc_get(sf__dalloc *a, size_t bytes, char *err, size_t errn) {
  size_t size = sf__dalloc_round(bytes);
  pthread_mutex_lock(&a->mu);
  freelist *l = list_of(a, size, false);
  uint64_t p = 0;
  if (l && l->n) {
    p = l->blk[--l->n];
    a->st.cached -= size;
    a->st.reuses++;
  } else {
    int rc = a->be.alloc(a->be.ctx, &p, size);
    a->st.allocs++;
    if (rc != 0 && a->st.cached) {
      /* Out of memory (or any failure): the cache back, then once more. */
      uint64_t had = a->st.cached;
      trim_locked(a);
      a->st.oom_retries++;
      rc = a->be.alloc(a->be.ctx, &p, size);
      a->st.allocs++;
      if (rc != 0) {
        snprintf(err, errn, "GPU: out of memory: %zu bytes asked, %" PRIu64 " in use, %" PRIu64
                 " cached (given back, and the allocation retried) (CUDA error %d)", size,
                 a->st.in_use, had, rc);
        pthread_mutex_unlock(&a->mu);
        return 0;
      }
    } else if (rc != 0) {
      snprintf(err, errn, "GPU: out of memory: %zu bytes asked, %" PRIu64 " in use, 0 cached "
               "(CUDA error %d)", size, a->st.in_use, rc);
      pthread_mutex_unlock(&a->mu);
      return 0;
    }
  }
  a->st.in_use += size;
  if (a->st.in_use > a->st.peak)
    a->st.peak = a->st.in_use;
  pthread_mutex_unlock(&a->mu);
  return p;
}

void sf__dalloc_put(sf__dalloc *a, uint64_t p, size_t bytes) {
  if (!p)
    return;
  size_t size = sf__dalloc_round(bytes);
  pthread_mutex_lock(&a->mu);
  a->st.in_use -= size;
  freelist *l = a->bound && a->st.cached + size > a->bound ? NULL : list_of(a, size, true);
  if (l && l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 8;
    uint64_t *nb = realloc(l->blk, (size_t)cap * sizeof *nb);
    if (nb) {
      l->blk = nb;
      l->cap = cap;
    } else {
      l = NULL;
    }
  }
  if (l) {
    l->blk[l->n++] = p;
    a->st.cached += size;
  } else { /* past the bound: straight back to the driver */
    a->be.free(a->be.ctx, p);
    a->st.frees++;
  }
  pthread_mutex_unlock(&a->mu);
}

void sf__dalloc_trim(sf__dalloc *a) {
  pthread_mutex_lock(&a->mu);
  trim_locked(a);
  pthread_mutex_unlock(&a->mu);
}

sf__dalloc_stats sf__dalloc_stats_of(sf__dalloc *a) {
  pthread_mutex_lock(&a->mu);
  sf__dalloc_stats s = a->st;
  pthread_mutex_unlock(&a->mu);
  return s;
}

void sf__dalloc_free(sf__dalloc *a) {
  if (!a)
    return;
  sf__dalloc_trim(a);
  for (int64_t i = 0; i < a->caplists; i++)
    free(a->lists[i].blk);
  free(a->lists);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* ------------------------------------------------ the device backend */

#define MAX_DEV 16
typedef int (*mem_alloc_fn)(uint64_t *, size_t);
typedef int (*mem_free_fn)(uint64_t);

static struct {
  pthread_mutex_t mu;
  sf__dalloc *dev[MAX_DEV];
  int32_t ord[MAX_DEV];
  mem_alloc_fn alloc;
  mem_free_fn mfree;
} A = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The driver calls run on the device the block belongs to: an allocation
 * is always made on the calling thread's current device (its own), a free
 * of the cache may come from another thread, so it makes the block's
 * device current for the call. */
static int dev_alloc(void *ctx, uint64_t *p, size_t n) {
  (void)ctx;
  return A.alloc(p, n);
}

static int dev_free(void *ctx, uint64_t p) {
  int32_t k = *(int32_t *)ctx, was = sf__gpu_current_device();
  if (k != was)
    sf__gpu_use_device(k);
  int rc = A.mfree(p);
  if (k != was)
    sf__gpu_use_device(was);
  return rc;
}

static size_t cache_bound(void) {
  const char *e = getenv("SFLOW_GPU_CACHE_MB");
  if (!e || !*e)
    return 0;
  char *end;
  double mb = strtod(e, &end);
  return *end || !(mb > 0) ? 0 : (size_t)(mb * 1048576.0);
}

static sf__dalloc *device_allocator(int32_t k, const sf_loc *loc) {
  if (k < 0 || k >= MAX_DEV)
    sf_runtime_error(loc, "GPU: device %d is out of the allocator's range", (int)k);
  sf__dalloc *a = __atomic_load_n(&A.dev[k], __ATOMIC_ACQUIRE);
  if (a)
    return a;
  pthread_mutex_lock(&A.mu);
  if (!A.alloc) {
    *(void **)&A.alloc = sf__cuda_sym("cuMemAlloc_v2");
    *(void **)&A.mfree = sf__cuda_sym("cuMemFree_v2");
  }
  if (!A.alloc || !A.mfree) {
    pthread_mutex_unlock(&A.mu);
    sf_runtime_error(loc, "GPU: the CUDA driver lacks cuMemAlloc_v2 or cuMemFree_v2");
  }
  if (!(a = A.dev[k])) {
    A.ord[k] = k;
    sf__dalloc_backend be = {dev_alloc, dev_free, &A.ord[k]};
    a = sf__dalloc_new(&be, cache_bound());
    if (!a) {
      pthread_mutex_unlock(&A.mu);
      sf_runtime_error(loc, "out of memory");
    }
    __atomic_store_n(&A.dev[k], a, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&A.mu);
  return a;
}

uint64_t sf__dev_alloc(size_t bytes, const sf_loc *loc) {
  sf__dalloc *a = device_allocator(sf__gpu_current_device(), loc);
  char err[SF__ERROR_MAX / 2];
  uint64_t p = sf__dalloc_get(a, bytes, err, sizeof err);
  if (!p)
    sf_runtime_error(loc, "%s", err);
  return p;
}

void sf__dev_free(uint64_t p, size_t bytes, int32_t dev) {
  if (!p || dev < 0 || dev >= MAX_DEV || !A.dev[dev])
    return;
  sf__dalloc_put(A.dev[dev], p, bytes);
}

sf__dalloc_stats sf__dev_stats(void) {
  sf__dalloc_stats t = {0};
  for (int k = 0; k < MAX_DEV; k++) {
    sf__dalloc *a = __atomic_load_n(&A.dev[k], __ATOMIC_ACQUIRE);
    if (!a)
      continue;
    sf__dalloc_stats s = sf__dalloc_stats_of(a);
    t.in_use += s.in_use;
    t.cached += s.cached;
    t.peak += s.peak;
    t.allocs += s.allocs;
    t.frees += s.frees;
    t.reuses += s.reuses;
    t.oom_retries += s.oom_retries;
  }
  return t;
}
