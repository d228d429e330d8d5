/*
 * mem.c — allocation and reference counting of runtime objects.
 *
 * Every string, array, future, actor, group and tensor starts with an sf_obj header
 * whose count is changed with atomic builtins, because tasks on different
 * threads share arrays and strings freely.  A negative count marks an
 * immortal object (string literals the compiler emits as constants): those
 * are never written to, so constant data can live in read-only memory.
 * Releasing the last reference frees the object and, driven by the element
 * descriptor, releases every reference stored inside it.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

sf__dtor_fn sf__obj_dtor[SF_OBJ_TENSOR + 1];

void *sf_alloc(size_t n) {
  /* malloc(0) may return NULL; asking for one byte keeps "never NULL". */
  void *p = malloc(n ? n : 1);
  if (!p)
    sf_runtime_error(NULL, "out of memory");
  return p;
}

void sf_free(void *p) { free(p); }

void *sf__realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q)
    sf_runtime_error(NULL, "out of memory");
  return q;
}

/* ------------------------------------------------------------ blocks
 *
 * Size classes up to SF__BLOCK_MAX.  Each thread keeps a free
 * list per class; a list that grows past LOCAL_MAX hands BATCH blocks to a
 * global depot, and an empty list takes a batch from the depot before
 * carving a fresh block (below).  So a thread that frees what another allocated (main
 * releasing futures that pool threads completed, or the reverse) passes
 * the blocks back in batches instead of growing without bound, and steady
 * state costs a pointer push and pop.  Memory stays with the cache once
 * allocated (the high-water mark, as with any caching allocator); a thread
 * that ends gives its lists to the depot. */

#include <pthread.h>

/* Classes: 16..256 bytes by 16 (a future alone, a future with its task
 * record: 208 bytes for a task of one i64, which a class of 256 wasted a
 * quarter of), then 320..512 by 64. */
#define NCLASS (16 + (SF__BLOCK_MAX - 256) / 64)

static int class_of(size_t n) { return n <= 256 ? (int)((n - 1) / 16) : 16 + (int)((n - 257) / 64); }
static size_t class_size(int k) { return k < 16 ? (size_t)(k + 1) * 16 : 256 + (size_t)(k - 15) * 64; }
#define LOCAL_MAX 2048
#define BATCH 1024

typedef struct block { struct block *next; } block;

typedef struct {
  block *head[NCLASS];
  int32_t count[NCLASS];
  bool registered;
} block_cache;

static _Thread_local block_cache cache;
static struct {
  pthread_mutex_t lock;
  block *batches[NCLASS]; /* each batch: up to BATCH blocks linked by next;
                           * its first block's second word links batches */
  pthread_key_t key;
  pthread_once_t once;
} depot = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

/* The second word of a batch's first block links the depot's batches. */
static block **batch_link(block *b) { return (block **)((char *)b + sizeof(block *)); }

/* Fresh blocks are carved from regions instead of a malloc each: a round of
 * a million pipelined tasks touches tens of MB of futures for the first
 * time, and one page fault per 4 KiB (with malloc's header and bookkeeping
 * per block) was a quarter of its CPU.  A thread carves its blocks from a
 * PIECE of its own (no lock per block); pieces come from shared regions.
 * The first region is small and plain, so a program that makes few blocks
 * keeps its few pages; the later ones are 2 MiB-aligned and offered to
 * transparent huge pages (one fault per 2 MiB where the kernel agrees, as
 * with "madvise", Debian's default).  Regions are never unmapped: blocks
 * stay with the cache, as they did with malloc. */
#include <sys/mman.h>

#define FIRST_REGION ((size_t)256 << 10)
#define REGION ((size_t)2 << 20)
#define PIECE ((size_t)16 << 10)

/* A piece left by a thread that ended, for the next thread that needs one
 * (threads come and go: spares for abandoned attempts, connections):
 * its first words say where it ends and link the next. */
typedef struct spare_piece {
  struct spare_piece *next;
  char *end;
} spare_piece;

static struct {
  pthread_mutex_t lock;
  char *next, *end;
  int regions;
  spare_piece *spares;
} fresh = {.lock = PTHREAD_MUTEX_INITIALIZER};
static _Thread_local char *piece, *piece_end;

static bool region_new(void) {
  size_t n = fresh.regions ? REGION : FIRST_REGION;
  size_t map = fresh.regions ? 2 * REGION : n;
  char *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return false;
  if (fresh.regions) { /* keep the 2 MiB-aligned middle */
    char *a = (char *)(((uintptr_t)p + REGION - 1) & ~(uintptr_t)(REGION - 1));
    if (a > p)
      munmap(p, (size_t)(a - p));
    if (a + REGION < p + map)
      munmap(a + REGION, (size_t)(p + map - (a + REGION)));
    p = a;
#ifdef MADV_HUGEPAGE
    madvise(p, REGION, MADV_HUGEPAGE);
#endif
  }
  fresh.next = p;
  fresh.end = p + n;
  fresh.regions++;
  return true;
}

static void *block_fresh(size_t n) {
  if ((size_t)(piece_end - piece) < n) {
    pthread_mutex_lock(&fresh.lock);
    spare_piece *sp = fresh.spares; /* each holds SF__BLOCK_MAX bytes or more */
    bool ok = true;
    if (sp) {
      fresh.spares = sp->next;
      piece = (char *)sp;
      piece_end = sp->end;
    } else if ((ok = (size_t)(fresh.end - fresh.next) >= PIECE || region_new())) {
      piece = fresh.next;
      piece_end = piece + PIECE;
      fresh.next += PIECE;
    }
    pthread_mutex_unlock(&fresh.lock);
    if (!ok)
      return sf_alloc(n); /* never freed as a block's memory: kept by the cache too */
  }
  void *b = piece;
  piece += n;
  return b;
}

/* The rest of this thread's piece, for another thread (at its end). */
static void piece_give_back(void) {
  if ((size_t)(piece_end - piece) < SF__BLOCK_MAX)
    return; /* too little to be worth a link: at most a class's worth lost */
  spare_piece *sp = (spare_piece *)piece;
  sp->end = piece_end;
  pthread_mutex_lock(&fresh.lock);
  sp->next = fresh.spares;
  fresh.spares = sp;
  pthread_mutex_unlock(&fresh.lock);
  piece = piece_end = NULL;
}

static void cache_flush(void *arg) {
  block_cache *c = arg;
  pthread_mutex_lock(&depot.lock);
  for (int k = 0; k < NCLASS; k++)
    if (c->head[k]) { /* a short batch is still a batch: the counts are not kept there */
      *batch_link(c->head[k]) = depot.batches[k];
      depot.batches[k] = c->head[k];
      c->head[k] = NULL;
      c->count[k] = 0;
    }
  pthread_mutex_unlock(&depot.lock);
  piece_give_back();
}

static void depot_init(void) { pthread_key_create(&depot.key, cache_flush); }

/* The thread's cache, registered to go to the depot when the thread ends. */
static block_cache *my_cache(void) {
  block_cache *c = &cache;
  if (!c->registered) {
    pthread_once(&depot.once, depot_init);
    pthread_setspecific(depot.key, c);
    c->registered = true;
  }
  return c;
}

void *sf__block_alloc(size_t n, int32_t *cls) {
  if (n > SF__BLOCK_MAX || n == 0) {
    *cls = -1;
    return sf_alloc(n);
  }
  int k = class_of(n);
  *cls = k;
  block_cache *c = &cache;
  block *b = c->head[k];
  if (!b) {
    c = my_cache();
    pthread_mutex_lock(&depot.lock);
    b = depot.batches[k];
    if (b)
      depot.batches[k] = *batch_link(b);
    pthread_mutex_unlock(&depot.lock);
    if (!b)
      return block_fresh(class_size(k));
    /* The batch becomes this thread's list; its length is not known, so
     * count it as full: the next overflow hands back at most a batch. */
    c->count[k] = BATCH;
  }
  c->head[k] = b->next;
  if (c->count[k] > 0)
    c->count[k]--;
  return b;
}

void sf__block_free(void *p, int32_t cls) {
  if (cls < 0) {
    sf_free(p);
    return;
  }
  block_cache *c = my_cache();
  block *b = p;
  if (c->count[cls] >= LOCAL_MAX) {
    /* Split off the first BATCH blocks (this one first) for the depot. */
    b->next = c->head[cls];
    block *last = b;
    for (int i = 1; i < BATCH && last->next; i++)
      last = last->next;
    c->head[cls] = last->next;
    last->next = NULL;
    c->count[cls] = c->count[cls] + 1 - BATCH;
    if (c->count[cls] < 0)
      c->count[cls] = 0;
    pthread_mutex_lock(&depot.lock);
    *batch_link(b) = depot.batches[cls];
    depot.batches[cls] = b;
    pthread_mutex_unlock(&depot.lock);
    return;
  }
  b->next = c->head[cls];
  c->head[cls] = b;
  c->count[cls]++;
}

void *sf__alloc_n(size_t count, size_t size) {
  if (size && count > SIZE_MAX / size)
    sf_runtime_error(NULL, "out of memory");
  return sf_alloc(count * size);
}

void sf_retain(void *obj) {
  sf_obj *o = obj;
  if (!o || __atomic_load_n(&o->rc, __ATOMIC_RELAXED) < 0)
    return;
  /* Relaxed is enough: a new reference can only come from an existing one,
   * which already keeps the object alive (the same reasoning as
   * std::shared_ptr). */
  __atomic_fetch_add(&o->rc, 1, __ATOMIC_RELAXED);
}

static void array_destroy(sf_array *a) {
  const sf_type *t = a->elem;
  if (t && a->data && sf__type_has_refs(t))
    for (int64_t i = 0; i < a->len; i++)
      sf_value_release(t, sf__array_at(a, i));
  if (a->dev) /* only the GPU layer makes device copies, and set the hook first */
    sf__array_dev_free(a);
  sf_free(a->data);
  sf_free(a);
}

static void obj_destroy(sf_obj *o) {
  switch (o->tag) {
  case SF_OBJ_ARRAY:
    array_destroy((sf_array *)o);
    return;
  case SF_OBJ_MAP:
    sf__map_destroy((sf_map *)o);
    return;
  case SF_OBJ_FUTURE:
  case SF_OBJ_ACTOR:
  case SF_OBJ_GROUP:
  case SF_OBJ_TENSOR:
    if (sf__obj_dtor[o->tag]) {
      sf__obj_dtor[o->tag](o);
      return;
    }
    sf_free(o);
    return;
  default: /* SF_OBJ_STR: the bytes are inline */
    sf__str_free((sf_str *)o);
    return;
  }
}

void sf_release(void *obj) {
  sf_obj *o = obj;
  if (!o || __atomic_load_n(&o->rc, __ATOMIC_RELAXED) < 0)
    return;
  /* Acquire-release so every write made through other references happens
   * before the destructor reads the object. */
  if (__atomic_sub_fetch(&o->rc, 1, __ATOMIC_ACQ_REL) == 0)
    obj_destroy(o);
}

/* Applies fn to every reference slot inside a value of type t at p. */
static void each_ref(const sf_type *t, void *p, void (*fn)(void *)) {
  switch (t->kind) {
  case SF_STR:
  case SF_ARRAY:
  case SF_FUTURE:
  case SF_ACTOR:
  case SF_GROUP:
  case SF_MAP:
  case SF_TENSOR:
    fn(*(void **)p);
    return;
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      each_ref(t->fields[i].type, (char *)p + t->fields[i].offset, fn);
    return;
  default:
    return;
  }
}

void sf_value_retain(const sf_type *t, void *p) {
  if (t && p)
    each_ref(t, p, sf_retain);
}

void sf_value_release(const sf_type *t, void *p) {
  if (t && p)
    each_ref(t, p, sf_release);
}
