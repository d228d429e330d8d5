/*
 * test_rt_builtins.c — now(), rand_seed()/rand_f32(), node_id(),
 * hostname(), and the std.io file builtins with their error messages.
 * Files live in a fresh temporary directory removed at the end.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_builtins", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"io.sflow", 4, 1};
static char dir[] = "/tmp/sflow_rt_io_XXXXXX";

static sf_str *S(const char *c) { return sf_str_new(c, (int64_t)strlen(c)); }

/* An owned path inside the test directory. */
static sf_str *P(const char *name) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return S(buf);
}

static void test_now(void) {
  double a = sf_now();
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  double b = sf_now();
  CU_ASSERT(a >= 0 && b - a >= 0.0015 && b - a < 5);
}

static void test_rand(void) {
  float first[4];
  for (int i = 0; i < 4; i++)
    first[i] = sf_rand_f32(); /* unseeded: as if seeded with 0 */
  sf_rand_seed(0);
  for (int i = 0; i < 4; i++)
    CU_ASSERT(sf_rand_f32() == first[i]);
  sf_rand_seed(42);
  float a = sf_rand_f32();
  sf_rand_seed(43);
  CU_ASSERT(sf_rand_f32() != a);
  double sum = 0;
  bool in_range = true, grid = true;
  for (int i = 0; i < 100000; i++) {
    float r = sf_rand_f32();
    in_range &= r >= 0.0f && r < 1.0f;
    grid &= r * 16777216.0f == (float)(int32_t)(r * 16777216.0f);
    sum += r;
  }
  CU_ASSERT(in_range && grid);
  CU_ASSERT(sum / 100000 > 0.49 && sum / 100000 < 0.51);
}

static void test_node_and_host(void) {
  CHECK_INT(sf_node_id(), 0);
  sf_str *h = sf_hostname();
  CU_ASSERT(sf_str_len(h) > 0);
  sf_release(h);
}

static void test_write_read(void) {
  sf_str *p = P("a.txt"), *t = S("one\ntwo\r\n\nthree"), *more = S("\nfour\n");
  CU_ASSERT(!sf_file_exists(p));
  sf_write_file(p, t, &LOC);
  CU_ASSERT(sf_file_exists(p));
  sf_str *r = sf_read_file(p, &LOC);
  CU_ASSERT(sf_str_eq(r, t));
  sf_release(r);
  sf_append_file(p, more, &LOC);
  sf_array *lines = sf_read_lines(p, &LOC);
  char *out = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&out, &n);
  for (int64_t i = 0; i < lines->len; i++)
    fprintf(f, "[%s]", sf__str_data(((sf_str **)lines->data)[i]));
  fclose(f);
  CHECK_STR(out, "[one][two][][three][four]");
  free(out);
  sf_release(lines);
  sf_write_file(p, NULL, &LOC); /* truncates to empty */
  lines = sf_read_lines(p, &LOC);
  CHECK_INT(lines->len, 0);
  sf_release(lines);
  sf_release(p), sf_release(t), sf_release(more);
}

static void test_read_lines_edges(void) {
  static const struct { const char *text; int64_t n; } cases[] = {
      {"a", 1}, {"a\n", 1}, {"\n", 1}, {"a\n\n", 2}, {"a\nb", 2}, {"\r\n", 1}};
  sf_str *p = P("l.txt");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sf_str *t = S(cases[i].text);
    sf_write_file(p, t, &LOC);
    sf_array *a = sf_read_lines(p, &LOC);
    CHECK_INT(a->len, cases[i].n);
    sf_release(a);
    sf_release(t);
  }
  sf_release(p);
}

static void test_io_errors(void) {
  char want[512];
  sf_str *p = P("missing.txt");
  snprintf(want, sizeof want,
           "io.sflow:4:1: runtime error: cannot read \"%s/missing.txt\": No such file or directory",
           dir);
  EXPECT_ERROR(sf_read_file(p, &LOC), want);
  EXPECT_ERROR(sf_read_lines(p, &LOC), want);
  sf_release(p);
  p = P("");
  snprintf(want, sizeof want, "io.sflow:4:1: runtime error: cannot read \"%s/\": Is a directory",
           dir);
  EXPECT_ERROR(sf_read_file(p, &LOC), want);
  sf_release(p);
  p = P("no/such/dir/x");
  snprintf(want, sizeof want,
           "io.sflow:4:1: runtime error: cannot write \"%s/no/such/dir/x\": its folder does "
           "not exist",
           dir);
  EXPECT_ERROR(sf_write_file(p, NULL, &LOC), want);
  snprintf(want, sizeof want,
           "io.sflow:4:1: runtime error: cannot append to \"%s/no/such/dir/x\": No such file or "
           "directory",
           dir);
  EXPECT_ERROR(sf_append_file(p, NULL, &LOC), want);
  sf_release(p);
  EXPECT_ERROR(sf_read_file(NULL, &LOC),
               "io.sflow:4:1: runtime error: cannot read \"\": No such file or directory");
  p = sf_str_new("a\0b", 3);
  EXPECT_ERROR(sf_read_file(p, &LOC),
               "io.sflow:4:1: runtime error: cannot read \"a\\u{0}b\": Invalid argument");
  CU_ASSERT(!sf_file_exists(p));
  sf_release(p);
}

static void cleanup(void) {
  const char *names[] = {"a.txt", "l.txt"};
  char buf[256];
  for (size_t i = 0; i < 2; i++) {
    snprintf(buf, sizeof buf, "%s/%s", dir, names[i]);
    unlink(buf);
  }
  rmdir(dir);
}

int main(int argc, char **argv) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  static const rt_test tests[] = {
      {"now", test_now},
      {"rand", test_rand},
      {"node_and_host", test_node_and_host},
      {"write_read", test_write_read},
      {"read_lines_edges", test_read_lines_edges},
      {"io_errors", test_io_errors},
      {NULL, NULL},
  };
  int r = rt_run("rt_builtins", tests, argc, argv);
  cleanup();
  return r;
}
