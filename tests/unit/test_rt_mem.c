/*
 * test_rt_mem.c — reference counts, descriptor-driven release of nested
 * values, destructor hooks, and arrays (creation, split, index errors,
 * growth by push and pop, and that a grown array serializes as a fresh one),
 * and how core treats tensors through the nn layer's hooks.
 * Leaks are checked by running this test under valgrind.
 */
#include <pthread.h>

#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_mem", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"m.sflow", 9, 2};

static sf_str *S(const char *c) { return sf_str_new(c, (int64_t)strlen(c)); }

static void test_refcount(void) {
  sf_str *s = S("abc");
  CHECK_INT(s->hdr.rc, 1);
  sf_retain(s);
  CHECK_INT(s->hdr.rc, 2);
  sf_release(s);
  CHECK_INT(s->hdr.rc, 1);
  sf_release(s);
  sf_retain(NULL);
  sf_release(NULL);
  sf_str *e = sf_str_empty(); /* immortal: counts never change */
  sf_retain(e);
  sf_release(e);
  sf_release(e);
  CU_ASSERT(e->hdr.rc < 0);
}

static void test_nested_release(void) {
  /* str[][]: releasing the outer array releases every inner string. */
  const sf_type *strs = sf__array_type(&sf_type_str);
  sf_array *outer = sf_array_new(strs, 2, NULL);
  for (int i = 0; i < 2; i++) {
    sf_array *inner = sf_array_new(&sf_type_str, 2, NULL);
    ((sf_str **)inner->data)[0] = S("x");
    ((sf_array **)outer->data)[i] = inner;
  }
  sf_str *shared = S("shared");
  sf_retain(shared);
  ((sf_str **)((sf_array **)outer->data)[1]->data)[1] = shared;
  sf_release(outer);
  CHECK_INT(shared->hdr.rc, 1); /* the array's reference was dropped */
  sf_release(shared);
}

typedef struct pair {
  int64_t k;
  sf_str *s;
  sf_array *a;
} pair;

static void test_struct_values(void) {
  const sf_field f[] = {{"k", offsetof(pair, k), &sf_type_i64},
                        {"s", offsetof(pair, s), &sf_type_str},
                        {"a", offsetof(pair, a), sf__array_type(&sf_type_i32)}};
  const sf_type pt = {SF_STRUCT, sizeof(pair), 8, 3, NULL, f, "Pair"};
  CU_ASSERT(sf__type_has_refs(&pt));
  sf_array *arr = sf_array_new(&pt, 3, NULL);
  pair *p = arr->data;
  p[0].s = S("a");
  p[2].a = sf_array_new(&sf_type_i32, 4, NULL);
  sf_retain(p[0].s);
  sf_str *keep = p[0].s;
  sf_value_retain(&pt, &p[2]);
  sf_array *keep_a = p[2].a;
  CHECK_INT(keep_a->hdr.rc, 2);
  sf_release(arr);
  CHECK_INT(keep->hdr.rc, 1);
  CHECK_INT(keep_a->hdr.rc, 1);
  sf_release(keep);
  sf_release(keep_a);
}

static int dtor_calls;
static void future_dtor(sf_obj *o) {
  dtor_calls++;
  sf_free(o);
}

static void test_dtor_hooks(void) {
  sf__dtor_fn runtime_hook = sf__obj_dtor[SF_OBJ_FUTURE]; /* future.c's */
  sf__obj_dtor[SF_OBJ_FUTURE] = NULL;
  sf_obj *fut = sf_alloc(sizeof *fut);
  *fut = (sf_obj){1, SF_OBJ_FUTURE, 0};
  sf_release(fut); /* no hook: just freed */
  sf__obj_dtor[SF_OBJ_FUTURE] = future_dtor;
  fut = sf_alloc(sizeof *fut);
  *fut = (sf_obj){1, SF_OBJ_FUTURE, 0};
  sf_retain(fut);
  sf_release(fut);
  CHECK_INT(dtor_calls, 0);
  sf_release(fut);
  CHECK_INT(dtor_calls, 1);
  sf__obj_dtor[SF_OBJ_FUTURE] = runtime_hook;
}

enum { THREADS = 8, ROUNDS = 100000 };

static void *churn(void *arg) {
  for (int i = 0; i < ROUNDS; i++) {
    sf_retain(arg);
    sf_release(arg);
  }
  return NULL;
}

static void test_atomic_counts(void) {
  sf_str *s = S("shared across threads");
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, churn, s);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  CHECK_INT(s->hdr.rc, 1);
  sf_release(s);
}

/* Blocks of every size: 16-aligned, each its own bytes (a pattern written
 * into all of them at once survives), of the class asked for; freed ones
 * come back before fresh ones are carved. */
static void test_blocks(void) {
  enum { PER = 64 };
  static unsigned char *b[SF__BLOCK_MAX + 1][PER];
  static int32_t cls[SF__BLOCK_MAX + 1][PER];
  for (size_t n = 1; n <= SF__BLOCK_MAX; n++)
    for (int i = 0; i < PER; i++) {
      b[n][i] = sf__block_alloc(n, &cls[n][i]);
      CU_ASSERT(((uintptr_t)b[n][i] & 15) == 0);
      CU_ASSERT(cls[n][i] >= 0);
      memset(b[n][i], (int)((n * 7 + (size_t)i) & 0xff), n);
    }
  bool intact = true;
  for (size_t n = 1; n <= SF__BLOCK_MAX; n++)
    for (int i = 0; i < PER; i++)
      for (size_t k = 0; k < n; k++)
        intact &= b[n][i][k] == (unsigned char)((n * 7 + (size_t)i) & 0xff);
  CU_ASSERT(intact);
  int32_t c208;
  void *p = sf__block_alloc(208, &c208);
  int32_t c209;
  void *q = sf__block_alloc(209, &c209);
  CU_ASSERT(c209 == c208 + 1); /* 16 bytes apart up to 256 */
  sf__block_free(q, c209);
  sf__block_free(p, c208);
  int32_t again;
  CU_ASSERT(sf__block_alloc(208, &again) == p && again == c208); /* the freed one first */
  sf__block_free(p, c208);
  for (size_t n = 1; n <= SF__BLOCK_MAX; n++)
    for (int i = 0; i < PER; i++)
      sf__block_free(b[n][i], cls[n][i]);
}

/* Threads that each carve a block, keep it and end: each later thread
 * carves from the piece the last one left, not from a fresh piece of its
 * own (2,000 threads would otherwise hold 2,000 pieces, 31 MiB). */
enum { SHORT_THREADS = 2000 };
static void *carve_one(void *out) {
  int32_t cls;
  *(void **)out = sf__block_alloc(48, &cls);
  return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

static void test_short_threads(void) {
  static void *got[SHORT_THREADS];
  for (int i = 0; i < SHORT_THREADS; i++) {
    pthread_t t;
    CU_ASSERT(pthread_create(&t, NULL, carve_one, &got[i]) == 0);
    pthread_join(t, NULL);
  }
  qsort(got, SHORT_THREADS, sizeof got[0], cmp_ptr);
  int windows = 1; /* distinct 16 KiB windows the blocks lie in */
  for (int i = 1; i < SHORT_THREADS; i++)
    windows += ((uintptr_t)got[i] >> 14) != ((uintptr_t)got[i - 1] >> 14);
  printf("  %d blocks of 48 bytes from %d threads lie in %d windows of 16 KiB\n", SHORT_THREADS,
         SHORT_THREADS, windows);
  CU_ASSERT(windows <= 16);
  for (int i = 0; i < SHORT_THREADS; i++)
    sf__block_free(got[i], 2); /* class of 48 bytes */
}

static void test_array_new(void) {
  sf_array *a = sf_array_new(&sf_type_f64, 5, &LOC);
  CHECK_INT(a->len, 5);
  CU_ASSERT(a->elem == &sf_type_f64);
  for (int i = 0; i < 5; i++)
    CU_ASSERT(((double *)a->data)[i] == 0.0);
  sf_release(a);
  a = sf_array_new(&sf_type_i64, 0, &LOC);
  CHECK_INT(a->len, 0);
  sf_release(a);
  EXPECT_ERROR(sf_array_new(&sf_type_i64, -3, &LOC),
               "m.sflow:9:2: runtime error: negative array length -3");
  EXPECT_ERROR(sf_array_new(&sf_type_i64, INT64_MAX / 4, &LOC),
               "m.sflow:9:2: runtime error: "
               "array of 2305843009213693951 i64 elements is too large");
}

/* Lengths of the chunks of a.split(k) for an i64 array of length n. */
static void check_split(int64_t n, int64_t k, const char *want) {
  sf_array *a = sf_array_new(&sf_type_i64, n, NULL);
  for (int64_t i = 0; i < n; i++)
    ((int64_t *)a->data)[i] = i;
  sf_array *parts = sf_array_split(a, k, &LOC);
  char got[256] = "";
  int64_t next = 0;
  bool in_order = true;
  for (int64_t i = 0; i < parts->len; i++) {
    sf_array *p = ((sf_array **)parts->data)[i];
    size_t o = strlen(got);
    snprintf(got + o, sizeof got - o, "%s%lld", i ? "," : "", (long long)p->len);
    for (int64_t j = 0; j < p->len; j++)
      in_order &= ((int64_t *)p->data)[j] == next++;
  }
  CHECK_STR(got, want);
  CU_ASSERT(in_order && next == n);
  CHECK_STR(parts->elem->name, "i64[]");
  CU_ASSERT(parts->elem->kind == SF_ARRAY && parts->elem->elem == &sf_type_i64);
  sf_release(parts);
  sf_release(a);
}

static void test_split(void) {
  check_split(10, 3, "4,3,3");
  check_split(9, 3, "3,3,3");
  check_split(2, 4, "1,1,0,0");
  check_split(0, 2, "0,0");
  check_split(7, 1, "7");
  sf_array *a = sf_array_new(&sf_type_i64, 3, NULL);
  EXPECT_ERROR(sf_array_split(a, 0, &LOC),
               "m.sflow:9:2: runtime error: split: the number of chunks must be positive, got 0");
  sf_release(a);
  /* Splitting strings shares them: the chunks hold their own references. */
  sf_array *s = sf_array_new(&sf_type_str, 2, NULL);
  sf_str *x = S("x");
  ((sf_str **)s->data)[0] = x;
  sf_array *parts = sf_array_split(s, 2, NULL);
  CHECK_INT(x->hdr.rc, 2);
  sf_release(s);
  CHECK_INT(x->hdr.rc, 1);
  sf_release(parts);
  /* The interned descriptor is built once per element type. */
  CU_ASSERT(sf__array_type(&sf_type_str) == sf__array_type(&sf_type_str));
  const sf_type my_i64 = sf_type_i64; /* a compiler-emitted copy */
  CU_ASSERT(sf__array_type(&my_i64) == sf__array_type(&sf_type_i64));
}

static void test_index_fail(void) {
  EXPECT_ERROR(sf_index_fail(5, 3, &LOC),
               "m.sflow:9:2: runtime error: index 5 out of bounds for length 3");
  EXPECT_ERROR(sf_index_fail(-1, 0, &LOC),
               "m.sflow:9:2: runtime error: index -1 out of bounds for length 0");
  sf_array_host(NULL);
}

/* The serialized bytes of a value of type t at p. */
static sf__buf ser(const sf_type *t, const void *p) {
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__ser_value(&b, t, p);
  return b;
}

static void test_push_pop_serialize(void) {
  /* push doubles the room; pop moves the last reference out. */
  sf_array *xs = sf_array_new(&sf_type_i64, 0, NULL);
  for (int64_t i = 0; i < 5; i++)
    sf_array_push(xs, &i, &LOC);
  CHECK_INT(xs->len, 5);
  CU_ASSERT(xs->cap >= 5 && xs->cap == 8);
  sf_array *strs = sf_array_new(&sf_type_str, 0, NULL);
  sf_str *x = S("x");
  for (int i = 0; i < 3; i++) {
    sf_retain(x);
    sf_array_push(strs, &x, &LOC);
  }
  CHECK_INT(x->hdr.rc, 4);
  sf_str *popped = NULL;
  sf_array_pop(strs, &popped, &LOC);
  CU_ASSERT(popped == x && strs->len == 2);
  CHECK_INT(x->hdr.rc, 4); /* moved, not copied */
  sf_release(popped);
  /* The grown arrays' bytes equal those of fresh ones with the same
   * elements: the spare room never travels, and reads back as len. */
  sf_array *fresh = sf_array_new(&sf_type_i64, 5, NULL);
  for (int64_t i = 0; i < 5; i++)
    ((int64_t *)fresh->data)[i] = i;
  const sf_type *ai64 = sf__array_type(&sf_type_i64), *astr = sf__array_type(&sf_type_str);
  sf__buf a = ser(ai64, &xs), b = ser(ai64, &fresh);
  CU_ASSERT(a.len == b.len && a.len == 8 + 5 * 8 && memcmp(a.data, b.data, a.len) == 0);
  sf__buf c = ser(astr, &strs);
  CU_ASSERT(c.len == 8 + 2 * (8 + 1));
  sf_array *back = NULL;
  sf__reader r = {(const unsigned char *)c.data, (const unsigned char *)c.data + c.len};
  CU_ASSERT(sf__de_value(&r, astr, &back));
  CU_ASSERT(back && back->len == 2 && back->cap == 2 &&
            sf_str_eq(((sf_str **)back->data)[1], x));
  sf_value_release(astr, &back);
  sf__buf_free(&a);
  sf__buf_free(&b);
  sf__buf_free(&c);
  sf_release(fresh);
  sf_release(strs);
  sf_release(xs);
  CHECK_INT(x->hdr.rc, 1);
  sf_release(x);
  sf_array *empty = sf_array_new(&sf_type_i64, 0, NULL);
  int64_t v;
  EXPECT_ERROR(sf_array_pop(empty, &v, &LOC), "m.sflow:9:2: runtime error: pop from an empty array");
  sf_release(empty);
}

/* Tensors (SF_TENSOR) through the hooks the nn layer installs: a stand-in
 * tensor object here, holding one float, with its own hooks. */
typedef struct fake_tensor {
  sf_obj hdr;
  float v;
} fake_tensor;

static int tensor_frees;
static void fake_dtor(sf_obj *o) {
  tensor_frees++;
  sf_free(o);
}
static void fake_ser(sf__buf *b, const void *t) {
  sf__buf_put(b, (const char *)&((const fake_tensor *)t)->v, 4);
}
static bool fake_de(sf__reader *r, void **out) {
  if (r->end - r->p < 4)
    return false;
  fake_tensor *t = sf_alloc(sizeof *t);
  *t = (fake_tensor){{1, SF_OBJ_TENSOR, 0}, 0};
  memcpy(&t->v, r->p, 4);
  r->p += 4;
  *out = t;
  return true;
}
static void fake_format(sf__buf *b, const void *t) {
  char num[32];
  int n = snprintf(num, sizeof num, "tensor(%g)", (double)((const fake_tensor *)t)->v);
  sf__buf_put(b, num, (size_t)n);
}

typedef struct layer {
  void *w, *b; /* tensors */
} layer;

static void test_tensor_hooks(void) {
  static const sf_type tt = {.kind = SF_TENSOR, .size = 8, .align = 8, .name = "tensor"};
  const sf_field f[] = {{"w", offsetof(layer, w), &tt}, {"b", offsetof(layer, b), &tt}};
  const sf_type lt = {.kind = SF_STRUCT, .size = sizeof(layer), .align = 8, .nfields = 2,
                      .fields = f, .name = "Layer"};
  CU_ASSERT(sf__type_has_refs(&lt));
  /* With no hooks no tensor can exist: an unset one still travels as a
   * zero byte, and a present one cannot be read back. */
  layer unset = {NULL, NULL};
  sf__buf u = ser(&lt, &unset);
  CU_ASSERT(u.len == 2 && u.data[0] == 0 && u.data[1] == 0);
  layer back = {0};
  sf__reader r = {(const unsigned char *)u.data, (const unsigned char *)u.data + u.len};
  CU_ASSERT(sf__de_value(&r, &lt, &back) && !back.w && !back.b && r.p == r.end);
  const unsigned char one[] = {1, 0, 0, 128, 63};
  sf__reader r1 = {one, one + sizeof one};
  CU_ASSERT(!sf__de_value(&r1, &tt, &back.w));
  sf__buf_free(&u);

  sf__obj_dtor[SF_OBJ_TENSOR] = fake_dtor;
  sf__tensor_ser = fake_ser;
  sf__tensor_de = fake_de;
  sf__tensor_format = fake_format;
  fake_tensor *w = sf_alloc(sizeof *w);
  *w = (fake_tensor){{1, SF_OBJ_TENSOR, 0}, 1.5f};
  layer l = {w, NULL};
  sf_value_retain(&lt, &l);
  CHECK_INT(w->hdr.rc, 2);
  sf__buf a = ser(&lt, &l);
  CU_ASSERT(a.len == 1 + 4 + 1 && a.data[0] == 1 && a.data[5] == 0);
  layer got = {0};
  sf__reader ra = {(const unsigned char *)a.data, (const unsigned char *)a.data + a.len};
  CU_ASSERT(sf__de_value(&ra, &lt, &got) && got.w && !got.b);
  CU_ASSERT(got.w && ((fake_tensor *)got.w)->v == 1.5f);
  const unsigned char two[] = {2};
  sf__reader r2 = {two, two + 1};
  void *bad = NULL;
  CU_ASSERT(!sf__de_value(&r2, &tt, &bad) && !bad);
  sf__buf p;
  sf__buf_init(&p, NULL, 0);
  sf__format_value(&p, &lt, &l, false);
  sf__buf_put(&p, "", 1);
  CHECK_STR(p.data, "Layer{w: tensor(1.5), b: <tensor unset>}");
  sf__buf_free(&p);
  sf__buf_free(&a);
  sf_value_release(&lt, &got);
  CHECK_INT(tensor_frees, 1);
  sf_value_release(&lt, &l);
  CHECK_INT(w->hdr.rc, 1);
  sf_value_release(&lt, &l);
  CHECK_INT(tensor_frees, 2);
  sf__obj_dtor[SF_OBJ_TENSOR] = NULL;
  sf__tensor_ser = NULL;
  sf__tensor_de = NULL;
  sf__tensor_format = NULL;
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"refcount", test_refcount},
      {"nested_release", test_nested_release},
      {"struct_values", test_struct_values},
      {"dtor_hooks", test_dtor_hooks},
      {"tensor_hooks", test_tensor_hooks},
      {"atomic_counts", test_atomic_counts},
      {"blocks", test_blocks},
      {"short_threads", test_short_threads},
      {"array_new", test_array_new},
      {"split", test_split},
      {"index_fail", test_index_fail},
      {"push_pop_serialize", test_push_pop_serialize},
      {NULL, NULL},
  };
  return rt_run("rt_mem", tests, argc, argv);
}
