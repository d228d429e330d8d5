/*
 * test_rt_gpualloc.c — the caching device allocator of tensor storage
 * (runtime/gpu/alloc.c) driven through a host backend: malloc'ed blocks
 * stand for device memory, and a byte budget makes the backend run out of
 * memory on demand.  Checks the size classes, reuse of a freed block by
 * the next request of its class, the counters, out-of-memory giving the
 * cache back and retrying once, the error message, and the cache bound.
 */
#include "gpu.h"
#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_gpualloc", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

/* Host "device memory" with a budget: alloc fails (CUDA's out of memory,
 * error 2) past it. */
typedef struct {
  size_t budget, used;
  int allocs, frees;
  struct { uint64_t p; size_t n; } live[1024];
  int nlive;
} host_dev;

static int h_alloc(void *ctx, uint64_t *p, size_t n) {
  host_dev *h = ctx;
  h->allocs++;
  if (h->used + n > h->budget)
    return 2;
  void *m = malloc(n);
  if (!m)
    return 2;
  *p = (uint64_t)(uintptr_t)m;
  h->used += n;
  h->live[h->nlive].p = *p;
  h->live[h->nlive].n = n;
  h->nlive++;
  return 0;
}

static int h_free(void *ctx, uint64_t p) {
  host_dev *h = ctx;
  h->frees++;
  for (int i = 0; i < h->nlive; i++)
    if (h->live[i].p == p) {
      h->used -= h->live[i].n;
      h->live[i] = h->live[--h->nlive];
      free((void *)(uintptr_t)p);
      return 0;
    }
  CU_FAIL("free of a block the backend never gave");
  return 1;
}

static sf__dalloc *make(host_dev *h, size_t budget, size_t bound) {
  memset(h, 0, sizeof *h);
  h->budget = budget;
  sf__dalloc_backend be = {h_alloc, h_free, h};
  return sf__dalloc_new(&be, bound);
}

static void test_rounding(void) {
  CU_ASSERT(sf__dalloc_round(0) == 512);
  CU_ASSERT(sf__dalloc_round(1) == 512);
  CU_ASSERT(sf__dalloc_round(512) == 512);
  CU_ASSERT(sf__dalloc_round(513) == 1024);
  CU_ASSERT(sf__dalloc_round((1 << 20) - 1) == (1 << 20));   /* 512-byte classes below 1 MiB */
  CU_ASSERT(sf__dalloc_round(1 << 20) == (2 << 20));         /* 2 MiB multiples from 1 MiB */
  CU_ASSERT(sf__dalloc_round((2 << 20) + 1) == (4 << 20));
  CU_ASSERT(sf__dalloc_round(5 << 20) == (6 << 20));
}

static void test_reuse(void) {
  host_dev h;
  char err[256];
  sf__dalloc *a = make(&h, 1 << 30, 0);
  uint64_t p = sf__dalloc_get(a, 1000, err, sizeof err);
  uint64_t q = sf__dalloc_get(a, 3 << 20, err, sizeof err);
  CU_ASSERT_FATAL(p && q);
  CU_ASSERT(h.allocs == 2);
  sf__dalloc_stats s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.in_use == 1024 + (4 << 20));
  CU_ASSERT(s.cached == 0 && s.allocs == 2 && s.peak == s.in_use);
  /* Freed, then asked for again in the same class: the same block, no
   * backend call. */
  sf__dalloc_put(a, p, 1000);
  s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.in_use == 4 << 20 && s.cached == 1024);
  uint64_t p2 = sf__dalloc_get(a, 1023, err, sizeof err);
  CU_ASSERT(p2 == p);
  CU_ASSERT(h.allocs == 2);
  /* Another class is a new block. */
  uint64_t r = sf__dalloc_get(a, 100, err, sizeof err);
  CU_ASSERT(r && r != p);
  CU_ASSERT(h.allocs == 3);
  /* A large block goes back to its 2 MiB class. */
  sf__dalloc_put(a, q, 3 << 20);
  CU_ASSERT(sf__dalloc_get(a, (3 << 20) + 5, err, sizeof err) == q);
  CU_ASSERT(sf__dalloc_get(a, 5 << 20, err, sizeof err) != q); /* (6 MiB): another class */
  s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.reuses == 2 && s.allocs == 4 && s.frees == 0);
  /* The most recently freed of a class first. */
  uint64_t x = sf__dalloc_get(a, 2048, err, sizeof err), y = sf__dalloc_get(a, 2048, err, sizeof err);
  sf__dalloc_put(a, x, 2048);
  sf__dalloc_put(a, y, 2048);
  CU_ASSERT(sf__dalloc_get(a, 2048, err, sizeof err) == y);
  CU_ASSERT(sf__dalloc_get(a, 2048, err, sizeof err) == x);
  /* Many classes (the free-list table grows and rehashes). */
  uint64_t many[300];
  for (int i = 0; i < 300; i++)
    many[i] = sf__dalloc_get(a, (size_t)(i + 10) * 512, err, sizeof err);
  for (int i = 0; i < 300; i++)
    sf__dalloc_put(a, many[i], (size_t)(i + 10) * 512);
  int calls = h.allocs;
  for (int i = 299; i >= 0; i--)
    CU_ASSERT(sf__dalloc_get(a, (size_t)(i + 10) * 512, err, sizeof err) == many[i]);
  CU_ASSERT(h.allocs == calls);
  sf__dalloc_free(a); /* gives the cache back; the blocks in use are the test's */
}

static void test_oom(void) {
  host_dev h;
  char err[256] = "";
  /* 10 KiB of "device memory": two 4 KiB blocks fit, a third does not
   * until the cached one is given back. */
  sf__dalloc *a = make(&h, 10 << 10, 0);
  uint64_t p = sf__dalloc_get(a, 4096, err, sizeof err);
  uint64_t q = sf__dalloc_get(a, 4096, err, sizeof err);
  CU_ASSERT_FATAL(p && q);
  sf__dalloc_put(a, q, 4096); /* cached: 4 KiB */
  uint64_t r = sf__dalloc_get(a, 3000, err, sizeof err); /* another class: OOM, trim, retry */
  CU_ASSERT(r != 0);
  sf__dalloc_stats s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.oom_retries == 1 && s.cached == 0 && s.frees == 1);
  CU_ASSERT(s.in_use == 4096 + 3072);
  /* Nothing cached and no room: the error names asked, in use, cached. */
  CU_ASSERT(sf__dalloc_get(a, 8192, err, sizeof err) == 0);
  CU_ASSERT_STRING_EQUAL(err, "GPU: out of memory: 8192 bytes asked, 7168 in use, 0 cached (CUDA error 2)");
  /* With something cached that does not make room: given back, retried,
   * still out of memory. */
  sf__dalloc_put(a, r, 3000);
  CU_ASSERT(sf__dalloc_get(a, 8192, err, sizeof err) == 0);
  CU_ASSERT_STRING_EQUAL(err, "GPU: out of memory: 8192 bytes asked, 4096 in use, 3072 cached "
                              "(given back, and the allocation retried) (CUDA error 2)");
  s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.cached == 0 && s.in_use == 4096 && s.oom_retries == 2);
  CU_ASSERT(h.used == 4096);
  sf__dalloc_put(a, p, 4096);
  sf__dalloc_free(a);
  CU_ASSERT(h.used == 0 && h.nlive == 0);
}

static void test_bound(void) {
  host_dev h;
  char err[256];
  /* A cache of at most 2 KiB: a block freed past it goes straight back. */
  sf__dalloc *a = make(&h, 1 << 30, 2048);
  uint64_t b[3];
  for (int i = 0; i < 3; i++)
    b[i] = sf__dalloc_get(a, 1024, err, sizeof err);
  for (int i = 0; i < 3; i++)
    sf__dalloc_put(a, b[i], 1024);
  sf__dalloc_stats s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.cached == 2048 && s.frees == 1 && s.in_use == 0 && s.peak == 3072);
  sf__dalloc_trim(a);
  s = sf__dalloc_stats_of(a);
  CU_ASSERT(s.cached == 0 && s.frees == 3 && h.used == 0);
  sf__dalloc_free(a);
}

static const rt_test tests[] = {
    {"rounding", test_rounding},
    {"reuse", test_reuse},
    {"oom", test_oom},
    {"bound", test_bound},
    {NULL, NULL},
};

int main(int argc, char **argv) { return rt_run("rt_gpualloc", tests, argc, argv); }
