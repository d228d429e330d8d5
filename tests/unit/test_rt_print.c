/*
 * test_rt_print.c — print(): argument separation, one line per call, the
 * printed form of every kind of value, long lines, and lines from many
 * threads that must never interleave.
 */
#include <pthread.h>

#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_print", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static sf_str *S(const char *c) { return sf_str_new(c, (int64_t)strlen(c)); }

/* What one print_value of (t, p) writes, as a whole line without '\n'. */
static char *printed(const sf_type *t, const void *p) {
  rt_capture c = rt_capture_begin(1);
  sf_print_begin();
  sf_print_value(t, p);
  sf_print_end();
  char *out = rt_capture_end(c);
  size_t n = strlen(out);
  if (n && out[n - 1] == '\n')
    out[n - 1] = '\0';
  return out;
}

#define CHECK_PRINTED(t, p, want)   \
  do {                              \
    char *o_ = printed((t), (p));   \
    CHECK_STR(o_, (want));          \
    free(o_);                       \
  } while (0)

static void test_scalars_in_one_line(void) {
  sf_str *s = S("hi \"there\"");
  rt_capture c = rt_capture_begin(1);
  sf_print_begin();
  sf_print_i64(-7);
  sf_print_bool(true);
  sf_print_f64(0.1);
  sf_print_f32(0.1f);
  sf_print_str(s);
  sf_print_str(NULL);
  sf_print_f64(1e16);
  sf_print_end();
  sf_print_begin();
  sf_print_end();
  char *out = rt_capture_end(c);
  CHECK_STR(out, "-7 true 0.1 0.1 hi \"there\"  1e+16\n\n");
  free(out);
  sf_release(s);
}

static void test_arrays(void) {
  sf_array *a = sf_array_new(&sf_type_i64, 3, NULL);
  for (int i = 0; i < 3; i++)
    ((int64_t *)a->data)[i] = i + 1;
  CHECK_PRINTED(&sf_type_i64, &(int64_t){5}, "5");
  CHECK_PRINTED(sf__array_type(&sf_type_i64), &a, "[1, 2, 3]");
  sf_array *f = sf_array_new(&sf_type_f32, 2, NULL);
  ((float *)f->data)[0] = 0.1f;
  ((float *)f->data)[1] = 16777216.0f;
  CHECK_PRINTED(sf__array_type(&sf_type_f32), &f, "[0.1, 16777216.0]");
  sf_array *e = sf_array_new(&sf_type_f64, 0, NULL), *null = NULL;
  CHECK_PRINTED(sf__array_type(&sf_type_f64), &e, "[]");
  CHECK_PRINTED(sf__array_type(&sf_type_f64), &null, "[]");
  sf_array *s = sf_array_new(&sf_type_str, 3, NULL);
  ((sf_str **)s->data)[0] = S("a");
  ((sf_str **)s->data)[1] = S("b\"\n\x01");
  CHECK_PRINTED(sf__array_type(&sf_type_str), &s, "[\"a\", \"b\\\"\\n\\u{1}\", \"\"]");
  sf_array *b = sf_array_new(&sf_type_bool, 2, NULL);
  ((bool *)b->data)[1] = true;
  CHECK_PRINTED(sf__array_type(&sf_type_bool), &b, "[false, true]");
  sf_array *nested = sf_array_split(a, 2, NULL);
  CHECK_PRINTED(nested->elem, &nested, "[[1, 2], [3]]");
  sf_release(a), sf_release(f), sf_release(e), sf_release(s), sf_release(b), sf_release(nested);
}

typedef struct batch {
  sf_array *x;
  int32_t n;
  sf_str *name;
} batch;

static const sf_field batch_fields[] = {
    {"x", offsetof(batch, x), NULL}, /* type set in the test: not constant */
    {"n", offsetof(batch, n), &sf_type_i32},
    {"name", offsetof(batch, name), &sf_type_str},
};

static void test_structs_and_handles(void) {
  sf_field fields[3];
  memcpy(fields, batch_fields, sizeof fields);
  fields[0].type = sf__array_type(&sf_type_f64);
  const sf_type bt = {SF_STRUCT, sizeof(batch), 8, 3, NULL, fields, "Batch"};
  batch v = {sf_array_new(&sf_type_f64, 1, NULL), 2, S("b")};
  ((double *)v.x->data)[0] = 1.0;
  CHECK_PRINTED(&bt, &v, "Batch{x: [1.0], n: 2, name: \"b\"}");
  const sf_type fut = {SF_FUTURE, 8, 8, 0, &sf_type_i64, NULL, "future<i64>"};
  const sf_type act = {SF_ACTOR, 8, 8, 0, NULL, NULL, "Counter"};
  const sf_type grp = {SF_GROUP, 8, 8, 0, NULL, NULL, "group<Counter>"};
  void *h = NULL;
  CHECK_PRINTED(&fut, &h, "<future>");
  CHECK_PRINTED(&act, &h, "<actor Counter>");
  CHECK_PRINTED(&grp, &h, "<group Counter>");
  sf_value_release(&bt, &v);
}

static void test_long_line(void) {
  enum { N = 100000 };
  char *big = malloc(N + 1);
  memset(big, 'x', N);
  big[N] = '\0';
  sf_str *s = sf_str_new(big, N);
  rt_capture c = rt_capture_begin(1);
  sf_print_begin();
  sf_print_str(s);
  sf_print_i64(1);
  sf_print_end();
  char *out = rt_capture_end(c);
  CHECK_INT(strlen(out), N + 3);
  CU_ASSERT(strncmp(out, big, N) == 0 && strcmp(out + N, " 1\n") == 0);
  free(out);
  free(big);
  sf_release(s);
}

enum { THREADS = 8, LINES = 500 };

static void *printer(void *arg) {
  sf_str *word = S("abcdefghijklmnopqrstuvwxyz");
  for (int i = 0; i < LINES; i++) {
    sf_print_begin();
    sf_print_i64((int64_t)(intptr_t)arg);
    for (int k = 0; k < 20; k++)
      sf_print_str(word);
    sf_print_end();
  }
  sf_release(word);
  return NULL;
}

static void test_threads_do_not_interleave(void) {
  rt_capture c = rt_capture_begin(1);
  pthread_t th[THREADS];
  for (intptr_t i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, printer, (void *)i);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  char *out = rt_capture_end(c);
  int lines = 0, bad = 0;
  for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"), lines++)
    bad += strlen(l) != 2 + 20 * 27 - 1 || l[0] < '0' || l[0] > '7';
  CHECK_INT(lines, THREADS * LINES);
  CHECK_INT(bad, 0);
  free(out);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"scalars_in_one_line", test_scalars_in_one_line},
      {"arrays", test_arrays},
      {"structs_and_handles", test_structs_and_handles},
      {"long_line", test_long_line},
      {"threads_do_not_interleave", test_threads_do_not_interleave},
      {NULL, NULL},
  };
  return rt_run("rt_print", tests, argc, argv);
}
