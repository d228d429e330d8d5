/*
 * test_rt_map.c — map<K, V> from C, as the standard library's C code uses
 * it: insertion order through updates, removals and re-insertions; growth
 * and compaction over many keys (every entry checked); the missing-key
 * error naming the key; printing; serialization round trips and malformed
 * bytes refused; the interned descriptors.  Leaks are checked by running
 * this test under valgrind.
 */
#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_map", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"m.sflow", 4, 7};

static sf_str *S(const char *c) { return sf_str_new(c, (int64_t)strlen(c)); }

static void put_i64(sf_map *m, const char *k, int64_t v) {
  sf_str *key = S(k);
  *(int64_t *)sf_map_put(m, &key, &LOC) = v;
  sf_release(key); /* the map keeps its own reference */
}

static int64_t at_i64(sf_map *m, const char *k) {
  sf_str *key = S(k);
  int64_t v = *(int64_t *)sf_map_at(m, &key, &LOC);
  sf_release(key);
  return v;
}

static char *printed(const sf_type *t, sf_map *m) {
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__format_value(&b, t, &m, false);
  sf__buf_put(&b, "", 1);
  char *s = strdup(b.data);
  sf__buf_free(&b);
  return s;
}

static void test_order(void) {
  const sf_type *t = sf__map_type(&sf_type_str, &sf_type_i64);
  CHECK_STR(t->name, "map<str, i64>");
  sf_map *m = sf_map_new(t);
  put_i64(m, "c", 3);
  put_i64(m, "a", 1);
  put_i64(m, "b", 2);
  put_i64(m, "a", 10); /* an update keeps its place */
  char *p = printed(t, m);
  CHECK_STR(p, "{\"c\": 3, \"a\": 10, \"b\": 2}");
  free(p);
  sf_str *c = S("c");
  CU_ASSERT(sf_map_remove(m, &c));
  CU_ASSERT(!sf_map_remove(m, &c));
  CU_ASSERT(!sf_map_has(m, &c));
  sf_release(c);
  put_i64(m, "c", 30); /* back in, at the end */
  p = printed(t, m);
  CHECK_STR(p, "{\"a\": 10, \"b\": 2, \"c\": 30}");
  free(p);
  sf_array *ks = sf_map_keys(m, &LOC);
  CHECK_INT(ks->len, 3);
  CHECK_STR(sf__str_data(((sf_str **)ks->data)[2]), "c");
  sf_release(ks);
  int64_t dflt = -1;
  sf_str *z = S("z");
  CHECK_INT(*(const int64_t *)sf_map_get(m, &z, &dflt), -1);
  EXPECT_ERROR(sf_map_at(m, &z, &LOC), "m.sflow:4:7: runtime error: key \"z\" not found in map<str, i64>");
  sf_release(z);
  sf_release(m);
}

/* 100,000 integer keys, every other one removed and half of those put back
 * (growth, tombstones and compaction), each entry checked after. */
static void test_many(void) {
  const sf_type *t = sf__map_type(&sf_type_i64, &sf_type_i64);
  sf_map *m = sf_map_new(t);
  enum { N = 100000 };
  for (int64_t i = 0; i < N; i++)
    *(int64_t *)sf_map_put(m, &i, &LOC) = i * 3;
  for (int64_t i = 1; i < N; i += 2)
    CU_ASSERT(sf_map_remove(m, &i));
  for (int64_t i = 1; i < N; i += 4)
    *(int64_t *)sf_map_put(m, &i, &LOC) = -i;
  CHECK_INT(sf_map_len(m), N / 2 + N / 4);
  int bad = 0;
  for (int64_t i = 0; i < N; i++) {
    bool want = i % 2 == 0 || i % 4 == 1;
    if (sf_map_has(m, &i) != want)
      bad++;
    else if (want && *(int64_t *)sf_map_at(m, &i, &LOC) != (i % 2 == 0 ? i * 3 : -i))
      bad++;
  }
  CHECK_INT(bad, 0);
  /* Order: the evens in order, then the re-inserted odds in order. */
  sf_array *ks = sf_map_keys(m, &LOC);
  const int64_t *k = ks->data;
  CHECK_INT(k[0], 0);
  CHECK_INT(k[N / 2 - 1], N - 2);
  CHECK_INT(k[N / 2], 1);
  CHECK_INT(k[ks->len - 1], N - 3);
  sf_release(ks);
  sf_release(m);
}

static void test_serialize(void) {
  const sf_type *inner = sf__map_type(&sf_type_str, &sf_type_i64);
  const sf_type *t = sf__map_type(&sf_type_bool, inner);
  sf_map *m = sf_map_new(t);
  bool yes = true, no = false;
  sf_map *a = sf_map_new(inner), *b = sf_map_new(inner);
  put_i64(a, "x", 1);
  put_i64(a, "", 2);
  *(sf_map **)sf_map_put(m, &yes, &LOC) = a;
  *(sf_map **)sf_map_put(m, &no, &LOC) = b;
  sf__buf buf;
  sf__buf_init(&buf, NULL, 0);
  sf__ser_value(&buf, t, &m);
  sf_map *back = NULL;
  sf__reader r = {(const unsigned char *)buf.data, (const unsigned char *)buf.data + buf.len};
  CU_ASSERT(sf__de_value(&r, t, &back));
  CU_ASSERT(r.p == r.end);
  char *p1 = printed(t, m), *p2 = printed(t, back);
  CHECK_STR(p2, "{true: {\"x\": 1, \"\": 2}, false: {}}");
  CHECK_STR(p1, p2);
  free(p1);
  free(p2);
  CHECK_INT(at_i64(*(sf_map **)sf_map_at(back, &yes, &LOC), ""), 2);
  sf_release(back);
  /* Truncated at every length: refused, nothing leaked. */
  for (size_t n = 0; n < buf.len; n++) {
    sf_map *x = NULL;
    sf__reader tr = {(const unsigned char *)buf.data, (const unsigned char *)buf.data + n};
    CU_ASSERT(!sf__de_value(&tr, t, &x));
    sf_value_release(t, &x);
  }
  /* A key written twice is malformed. */
  sf__buf dup;
  sf__buf_init(&dup, NULL, 0);
  sf__ser_u64(&dup, 2);
  for (int i = 0; i < 2; i++) {
    sf__buf_put(&dup, "\1", 1);
    sf__ser_u64(&dup, 0);
  }
  sf_map *x = NULL;
  sf__reader dr = {(const unsigned char *)dup.data, (const unsigned char *)dup.data + dup.len};
  CU_ASSERT(!sf__de_value(&dr, t, &x));
  sf_value_release(t, &x);
  sf__buf_free(&dup);
  sf__buf_free(&buf);
  sf_release(m);
}

static void test_types(void) {
  const sf_type mine = sf_type_str; /* a compiler-emitted copy */
  CU_ASSERT(sf__map_type(&mine, &sf_type_f64) == sf__map_type(&sf_type_str, &sf_type_f64));
  CU_ASSERT(sf__map_type(&sf_type_i32, &sf_type_f64) != sf__map_type(&sf_type_i64, &sf_type_f64));
  CU_ASSERT(sf__type_has_refs(sf__map_type(&sf_type_i32, &sf_type_f64)));
  CHECK_INT(sf_map_len(NULL), 0);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"order", test_order},
      {"many", test_many},
      {"serialize", test_serialize},
      {"types", test_types},
      {NULL, NULL},
  };
  return rt_run("rt_map", tests, argc, argv);
}
