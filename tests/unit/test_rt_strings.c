/*
 * test_rt_strings.c — strings, float printing (Python repr), fmt(), and
 * the casts between strings and numbers, including their error messages.
 */
#include <math.h>

#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_strings", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"t.sflow", 3, 7};

static sf_str *S(const char *c) { return sf_str_new(c, (int64_t)strlen(c)); }

static void test_basics(void) {
  sf_str *a = S("ab"), *b = S("abc"), *e = sf_str_empty();
  CHECK_INT(sf_str_len(a), 2);
  CHECK_INT(sf_str_len(NULL), 0);
  CHECK_INT(sf_str_cmp(a, b), -1);
  CHECK_INT(sf_str_cmp(b, a), 1);
  CHECK_INT(sf_str_cmp(a, a), 0);
  CHECK_INT(sf_str_cmp(NULL, e), 0);
  CU_ASSERT(sf_str_eq(NULL, e));
  CU_ASSERT(!sf_str_eq(a, b));
  CHECK_SF_STR(sf_str_concat(a, b), "ababc");
  CHECK_SF_STR(sf_str_concat(a, NULL), "ab");
  CHECK_SF_STR(sf_str_concat(NULL, NULL), "");
  sf_release(a);
  sf_release(b);
  sf_release(e);
}

/* sf_str_append: in place for the only reference, a copy for any other
 * holder; the caller's reference to the first argument is consumed. */
static void test_append(void) {
  sf_str *s = sf_str_append(NULL, NULL);
  CHECK_STR(sf__str_data(s), "");
  sf_str *lit = sf_str_empty(); /* immortal, like a literal: copied */
  s = sf_str_append(lit, sf_str_empty());
  CU_ASSERT(s == lit);
  sf_str *ab = S("ab");
  s = sf_str_append(NULL, ab); /* a new string with room to grow */
  CU_ASSERT(s != ab);
  sf_str *first = s;
  s = sf_str_append(s, ab); /* 4 bytes in a 32-byte room: the same object */
  CU_ASSERT(s == first);
  CHECK_STR(sf__str_data(s), "abab");
  sf_retain(s); /* another holder: the next append must copy */
  sf_str *held = s;
  s = sf_str_append(s, ab);
  CU_ASSERT(s != held);
  CHECK_STR(sf__str_data(held), "abab");
  CHECK_STR(sf__str_data(s), "ababab");
  CHECK_INT(held->hdr.rc, 1);
  sf_release(held);
  for (int i = 0; i < 5; i++)
    s = sf_str_append(s, s); /* s += s, through reallocs that move it */
  CHECK_INT(sf_str_len(s), 6 * 32);
  CU_ASSERT(!memcmp(sf__str_data(s) + 6 * 31, "ababab", 7)); /* NUL included */
  for (int i = 0; i < 100000; i++)
    s = sf_str_append(s, ab);
  CHECK_INT(sf_str_len(s), 6 * 32 + 200000);
  CHECK_INT(s->hdr.flags, 18); /* 200,193 bytes (NUL included) in a 2^18-byte room */
  CHECK_INT(s->data[sf_str_len(s)], 0);
  sf_release(s);
  sf_release(ab);
}

static void test_cmp_is_bytewise(void) {
  sf_str *hi = sf_str_new("\xc3\xa9", 2), *lo = S("z");
  CHECK_INT(sf_str_cmp(lo, hi), -1); /* 'z' < 0xC3 as unsigned bytes */
  sf_str *nul = sf_str_new("a\0b", 3), *a = S("a");
  CHECK_INT(sf_str_len(nul), 3);
  CHECK_INT(sf_str_cmp(a, nul), -1);
  CU_ASSERT(!sf_str_eq(a, nul));
  sf_release(hi);
  sf_release(lo);
  sf_release(nul);
  sf_release(a);
}

static void test_from_ints_bools(void) {
  CHECK_SF_STR(sf_str_from_i64(0), "0");
  CHECK_SF_STR(sf_str_from_i64(-42), "-42");
  CHECK_SF_STR(sf_str_from_i64(INT64_MIN), "-9223372036854775808");
  CHECK_SF_STR(sf_str_from_bool(true), "true");
  CHECK_SF_STR(sf_str_from_bool(false), "false");
}

static void test_f64_repr(void) {
  static const struct { double v; const char *want; } cases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {0.0001, "0.0001"},
      {1e+20, "1e+20"},
      {1.5e+20, "1.5e+20"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345.0, "123456789012345.0"},
      {100.0, "100.0"},
      {0.30000000000000004, "0.30000000000000004"},
      {2.5e-7, "2.5e-07"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {-1.5, "-1.5"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {9007199254740993.0, "9007199254740992.0"},
      /* 2^-1017: the correctly rounded 16-digit candidate misses, its
       * neighbour above the value is the shortest (Python agrees). */
      {0x1p-1017, "7.120236347223045e-307"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK_SF_STR(sf_str_from_f64(cases[i].v), cases[i].want);
  CHECK_SF_STR(sf_str_from_f64(INFINITY), "inf");
  CHECK_SF_STR(sf_str_from_f64(-INFINITY), "-inf");
  CHECK_SF_STR(sf_str_from_f64(NAN), "nan");
  CHECK_SF_STR(sf_str_from_f64(-NAN), "nan");
}

static void test_f32_repr(void) {
  CHECK_SF_STR(sf_str_from_f32(0.1f), "0.1");
  CHECK_SF_STR(sf_str_from_f32(16777216.0f), "16777216.0");
  CHECK_SF_STR(sf_str_from_f32(3.14159f), "3.14159");
  CHECK_SF_STR(sf_str_from_f32(1e-5f), "1e-05");
  CHECK_SF_STR(sf_str_from_f32(1e16f), "1e+16");
  CHECK_SF_STR(sf_str_from_f32(-0.0f), "-0.0");
  CHECK_SF_STR(sf_str_from_f32(1.0f / 3.0f), "0.33333334");
  CHECK_SF_STR(sf_str_from_f32(3.4028235e38f), "3.4028235e+38");
  CHECK_SF_STR(sf_str_from_f32(1e-45f), "1e-45");
  CHECK_SF_STR(sf_str_from_f32(INFINITY), "inf");
  CHECK_SF_STR(sf_str_from_f32(NAN), "nan");
}

static void test_fmt(void) {
  CHECK_SF_STR(sf_fmt_f64(3.14159, 2, &LOC), "3.14");
  CHECK_SF_STR(sf_fmt_f64(2.5, 0, &LOC), "2"); /* half to even */
  CHECK_SF_STR(sf_fmt_f64(3.5, 0, &LOC), "4");
  CHECK_SF_STR(sf_fmt_f64(-1.005, 2, &LOC), "-1.00"); /* -1.00499999... */
  CHECK_SF_STR(sf_fmt_f64(0.125, 2, &LOC), "0.12");
  CHECK_SF_STR(sf_fmt_f64(-0.0, 1, &LOC), "-0.0");
  CHECK_SF_STR(sf_fmt_f64(NAN, 2, &LOC), "nan");
  CHECK_SF_STR(sf_fmt_f64(-INFINITY, 2, &LOC), "-inf");
  CHECK_SF_STR(sf_fmt_f64(1e22, 1, &LOC), "10000000000000000000000.0");
  sf_str *big = sf_fmt_f64(1e308, 100, &LOC);
  CHECK_INT(sf_str_len(big), 309 + 1 + 100);
  sf_release(big);
  EXPECT_ERROR(sf_fmt_f64(1.0, -1, &LOC),
               "t.sflow:3:7: runtime error: fmt: digits must be between 0 and 100, got -1");
  EXPECT_ERROR(sf_fmt_f64(1.0, 101, &LOC),
               "t.sflow:3:7: runtime error: fmt: digits must be between 0 and 100, got 101");
}

/* A cast that must succeed; the string is released. */
static int64_t to_i64(const char *c) {
  sf_str *s = S(c);
  int64_t v = sf_str_to_i64(s, &LOC);
  sf_release(s);
  return v;
}

static void test_str_to_int(void) {
  CHECK_INT(to_i64("42"), 42);
  CHECK_INT(to_i64("-42"), -42);
  CHECK_INT(to_i64("+7"), 7);
  CHECK_INT(to_i64("0x2A"), 42);
  CHECK_INT(to_i64("-0xff"), -255);
  CHECK_INT(to_i64("1_000_000"), 1000000);
  CHECK_INT(to_i64("9223372036854775807"), INT64_MAX);
  CHECK_INT(to_i64("-9223372036854775808"), INT64_MIN);
  /* Casts ignore surrounding ASCII whitespace (fields cut from a line). */
  CHECK_INT(to_i64(" 7 "), 7);
  CHECK_INT(to_i64("\t-3\r\n"), -3);
  sf_str *s = S("-2147483648");
  CHECK_INT(sf_str_to_i32(s, &LOC), INT32_MIN);
  sf_release(s);
}

static void expect_i64_error(const char *text, const char *want) {
  sf_str *s = S(text);
  EXPECT_ERROR(sf_str_to_i64(s, &LOC), want);
  sf_release(s);
}

static void test_str_to_int_errors(void) {
  const char *p = "t.sflow:3:7: runtime error: ";
  char want[256];
  static const char *bad[] = {"abc", "", " ", "1 2", "1_", "_1", "1__0", "0x", "--1",
                              "1.0", "12a", "0x1g", "+"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(want, sizeof want, "%scannot convert \"%s\" to i64", p, bad[i]);
    expect_i64_error(bad[i], want);
  }
  expect_i64_error("9223372036854775808",
                   "t.sflow:3:7: runtime error: cannot convert \"9223372036854775808\" to i64: "
                   "out of range");
  expect_i64_error("a\nb\"", "t.sflow:3:7: runtime error: cannot convert \"a\\nb\\\"\" to i64");
  sf_str *s = S("2147483648");
  EXPECT_ERROR(sf_str_to_i32(s, &LOC),
               "t.sflow:3:7: runtime error: cannot convert \"2147483648\" to i32: out of range");
  sf_release(s);
  /* A long input is cut in the message. */
  char big[200];
  memset(big, '7', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  big[150] = 'x';
  s = S(big);
  EXPECT_ERROR(sf_str_to_i64(s, &LOC),
               "t.sflow:3:7: runtime error: cannot convert "
               "\"7777777777777777777777777777777777777777777777777777777777777777...\" to i64");
  sf_release(s);
}

static void test_str_to_float(void) {
  sf_str *s = S("2.5e-3");
  CU_ASSERT(sf_str_to_f64(s, &LOC) == 2.5e-3);
  sf_release(s);
  s = S("-inf");
  CU_ASSERT(isinf(sf_str_to_f64(s, &LOC)) && sf_str_to_f64(s, &LOC) < 0);
  sf_release(s);
  s = S("nan");
  CU_ASSERT(isnan(sf_str_to_f64(s, &LOC)));
  sf_release(s);
  s = S("1e999"); /* like Python's float(): too large reads as inf */
  CU_ASSERT(isinf(sf_str_to_f64(s, &LOC)));
  sf_release(s);
  s = S("0.1");
  CU_ASSERT(sf_str_to_f32(s, &LOC) == 0.1f);
  sf_release(s);
  s = S("7");
  CU_ASSERT(sf_str_to_f64(s, &LOC) == 7.0);
  sf_release(s);
  s = S(" 3.5 \n");
  CU_ASSERT(sf_str_to_f64(s, &LOC) == 3.5);
  sf_release(s);
  static const char *bad[] = {"", "  ", "1. 5", "1.5x", "abc", "1,5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char want[128];
    snprintf(want, sizeof want, "t.sflow:3:7: runtime error: cannot convert \"%s\" to f64", bad[i]);
    s = S(bad[i]);
    EXPECT_ERROR(sf_str_to_f64(s, &LOC), want);
    sf_release(s);
  }
  s = S("x");
  EXPECT_ERROR(sf_str_to_f32(s, &LOC), "t.sflow:3:7: runtime error: cannot convert \"x\" to f32");
  sf_release(s);
}

static void test_str_to_bool(void) {
  sf_str *t = S("true"), *f = S("false"), *y = S("yes");
  CU_ASSERT(sf_str_to_bool(t, &LOC) == true);
  CU_ASSERT(sf_str_to_bool(f, &LOC) == false);
  EXPECT_ERROR(sf_str_to_bool(y, &LOC),
               "t.sflow:3:7: runtime error: cannot convert \"yes\" to bool");
  sf_release(t);
  sf_release(f);
  sf_release(y);
}

static void test_float_to_int(void) {
  CHECK_INT(sf_f64_to_i64(2.9, &LOC), 2);
  CHECK_INT(sf_f64_to_i64(-2.9, &LOC), -2);
  CHECK_INT(sf_f64_to_i64(-0x1p63, &LOC), INT64_MIN);
  CHECK_INT(sf_f64_to_i32(2147483647.9, &LOC), INT32_MAX);
  CHECK_INT(sf_f64_to_i32(-2147483648.9, &LOC), INT32_MIN);
  EXPECT_ERROR(sf_f64_to_i64(NAN, &LOC), "t.sflow:3:7: runtime error: cannot convert nan to i64");
  EXPECT_ERROR(sf_f64_to_i64(0x1p63, &LOC),
               "t.sflow:3:7: runtime error: cannot convert 9.223372036854776e+18 to i64");
  EXPECT_ERROR(sf_f64_to_i32(2147483648.0, &LOC),
               "t.sflow:3:7: runtime error: cannot convert 2147483648.0 to i32");
  EXPECT_ERROR(sf_f64_to_i32(-INFINITY, &LOC),
               "t.sflow:3:7: runtime error: cannot convert -inf to i32");
}

/* ord, chr and codepoints (text.c): every UTF-8 length at its bounds,
 * and malformed sequences refused with their byte offset. */
static void test_codepoints(void) {
  static const int64_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000,
                                0x10FFFF};
  for (size_t i = 0; i < sizeof cps / sizeof *cps; i++) {
    sf_str *c = sf_str_chr(cps[i], &LOC);
    CU_ASSERT(sf_str_ord(c, &LOC) == cps[i]);
    sf_array *a = sf_str_codepoints(c, &LOC);
    CU_ASSERT(a->len == 1 && ((int64_t *)a->data)[0] == cps[i]);
    sf_release(a);
    sf_release(c);
  }
  const char *bad[][2] = {
      {"a\x80", "t.sflow:3:7: runtime error: codepoints: invalid UTF-8 at byte 1 (0x80)"},
      {"\xC3", "t.sflow:3:7: runtime error: codepoints: invalid UTF-8 at byte 0 (0xc3)"},
      {"ab\xC0\xAF", "t.sflow:3:7: runtime error: codepoints: invalid UTF-8 at byte 2 (0xc0)"},
      {"\xED\xA0\x80", "t.sflow:3:7: runtime error: codepoints: invalid UTF-8 at byte 0 (0xed)"},
      {"\xF4\x90\x80\x80", "t.sflow:3:7: runtime error: codepoints: invalid UTF-8 at byte 0 (0xf4)"},
      {"\xFF", "t.sflow:3:7: runtime error: codepoints: invalid UTF-8 at byte 0 (0xff)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sf_str *t = S(bad[i][0]);
    EXPECT_ERROR(sf_str_codepoints(t, &LOC), bad[i][1]);
    sf_release(t);
  }
  sf_str *e = S("");
  EXPECT_ERROR(sf_str_ord(e, &LOC),
               "t.sflow:3:7: runtime error: ord: expected one character, found the empty string");
  sf_release(e);
  EXPECT_ERROR(sf_str_chr(-1, &LOC),
               "t.sflow:3:7: runtime error: chr: -1 is outside the Unicode range [0, 0x10FFFF]");
  EXPECT_ERROR(sf_str_chr(0xDFFF, &LOC),
               "t.sflow:3:7: runtime error: chr: 57343 (U+DFFF) is a surrogate, not a character");
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"basics", test_basics},
      {"append", test_append},
      {"cmp_is_bytewise", test_cmp_is_bytewise},
      {"from_ints_bools", test_from_ints_bools},
      {"f64_repr", test_f64_repr},
      {"f32_repr", test_f32_repr},
      {"fmt", test_fmt},
      {"str_to_int", test_str_to_int},
      {"str_to_int_errors", test_str_to_int_errors},
      {"str_to_float", test_str_to_float},
      {"str_to_bool", test_str_to_bool},
      {"float_to_int", test_float_to_int},
      {"codepoints", test_codepoints},
      {NULL, NULL},
  };
  return rt_run("rt_strings", tests, argc, argv);
}
