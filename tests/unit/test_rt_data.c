/*
 * test_rt_data.c — the data layer (runtime/data/): the number parser
 * against strtod, CSV (quoting, line ends, inference, every error message),
 * JSON into typed values through hand-built descriptors (the path in each
 * error), .npy headers, the shuffled batches' invariants, UTF-8
 * validation.  JSON loads libcjson.so.1 with dlopen, as programs do.
 */
#include <math.h>
#include <stddef.h>

#include "rt_test.h"

#include "data.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_data", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"t.sflow", 3, 7};

/* ------------------------------------------------------------ numbers */

static void check_double(const char *s) {
  double a = 0, b = strtod(s, NULL);
  const char *e = sf__parse_double(s, s + strlen(s), &a);
  bool ok = e == s + strlen(s) && memcmp(&a, &b, sizeof a) == 0;
  if (!ok)
    fprintf(stderr, "\n  %s: got %.17g want %.17g\n", s, a, b);
  CU_ASSERT(ok);
  float fa = 0, fb = strtof(s, NULL);
  sf__parse_float(s, s + strlen(s), &fa);
  if (memcmp(&fa, &fb, sizeof fa) != 0)
    fprintf(stderr, "\n  %s: f32 got %.9g want %.9g\n", s, fa, fb);
  CU_ASSERT(memcmp(&fa, &fb, sizeof fa) == 0);
}

/* Hand-picked hard cases: halfway points, the largest and smallest
 * normals, subnormals, overflow, more than 19 digits, signed zero. */
static void test_parse_double_edges(void) {
  static const char *cases[] = {
      "0", "-0", "0.0", "-0.0", "1", "-1", "0.1", "0.2", "0.3", "1e23", "8.589973e9",
      "9007199254740992", "9007199254740993", "9007199254740995", "2.2250738585072014e-308",
      "2.2250738585072011e-308", "4.9406564584124654e-324", "1e-400", "1e400",
      "1.7976931348623157e308", "1.7976931348623159e308", "123456789012345678901234567890",
      "0.000000000000000000000000000000000000001", "3.14159265358979323846264338327950288",
      "7.038531e-26", "1.00000005960464477539062500", "1.00000017881393432617187499",
      "16777217", "33554434.999999999", "4.5", "5e-324", "2.4703282292062328e-324",
      "1.5e+16", "1E5", ".5", "5.", "+3.25", "inf", "-Infinity", "1e", "12e+"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *s = cases[i];
    if (!strcmp(s, "1e") || !strcmp(s, "12e+")) {
      /* The exponent is incomplete: the number ends before the 'e'. */
      double d;
      const char *e = sf__parse_double(s, s + strlen(s), &d);
      CU_ASSERT(e && *e == 'e');
      continue;
    }
    check_double(s);
  }
  double d;
  const char *bad[] = {"", "-", ".", "e5", "abc", "+-1", "--1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CU_ASSERT(sf__parse_double(bad[i], bad[i] + strlen(bad[i]), &d) == NULL);
  const char *nan = "nan";
  CU_ASSERT(sf__parse_double(nan, nan + 3, &d) == nan + 3 && isnan(d));
}

/* A million random numbers in four shapes (17-digit round trips, short
 * decimals, fixed 3-decimal, big mantissas with wide exponents), each
 * equal bit for bit to strtod's and strtof's. */
static void test_parse_double_random(void) {
  uint64_t s = 12345;
  char buf[64];
  int bad = 0;
  for (int i = 0; i < 1000000; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t r = s >> 11;
    double x;
    memcpy(&x, &s, 8);
    switch (i % 4) {
    case 0:
      if (!isfinite(x))
        continue;
      snprintf(buf, sizeof buf, "%.17g", x);
      break;
    case 1: snprintf(buf, sizeof buf, "%.*g", 1 + (int)(r % 17), (double)r / 1e7); break;
    case 2: snprintf(buf, sizeof buf, "%.3f", (double)(r % 100000000) / 1e3); break;
    default:
      snprintf(buf, sizeof buf, "%llue%d", (unsigned long long)(r % 10000000000000000000ULL),
               (int)(r % 700) - 350);
    }
    double a, b = strtod(buf, NULL);
    float fa, fb = strtof(buf, NULL);
    const char *e = sf__parse_double(buf, buf + strlen(buf), &a);
    sf__parse_float(buf, buf + strlen(buf), &fa);
    if (!e || *e || memcmp(&a, &b, 8) || memcmp(&fa, &fb, 4)) {
      if (bad++ < 5)
        fprintf(stderr, "\n  %s: got %.17g / %.9g, strtod %.17g / %.9g\n", buf, a, fa, b, fb);
    }
  }
  CHECK_INT(bad, 0);
}

static void test_parse_int64(void) {
  int64_t v;
  bool ovf;
  const char *s = "9223372036854775807";
  CU_ASSERT(sf__parse_int64(s, s + strlen(s), &v, &ovf) == s + strlen(s));
  CHECK_INT(v, INT64_MAX);
  s = "-9223372036854775808";
  CU_ASSERT(sf__parse_int64(s, s + strlen(s), &v, &ovf) == s + strlen(s));
  CHECK_INT(v, INT64_MIN);
  s = "9223372036854775808";
  CU_ASSERT(sf__parse_int64(s, s + strlen(s), &v, &ovf) == NULL && ovf);
  s = "-";
  CU_ASSERT(sf__parse_int64(s, s + 1, &v, &ovf) == NULL && !ovf);
  s = "12x";
  CU_ASSERT(sf__parse_int64(s, s + 3, &v, &ovf) == s + 2);
  CHECK_INT(v, 12);
}

/* ---------------------------------------------------------------- CSV */

static bool parse(const char *text, bool header, const int32_t *types, int64_t ntypes,
                  sf__csv *c, char *err) {
  sf__csv_opts o = {.sep = ',', .header = header, .types = types, .ntypes = ntypes};
  return sf__csv_parse(text, strlen(text), "d.csv", &o, c, err, 512);
}

static const char *str_at(const sf__csv *c, int64_t col, int64_t row) {
  return sf__str_data(((sf_str **)c->cols[col].data)[row]);
}

static void test_csv_quoting(void) {
  sf__csv c;
  char err[512];
  const char *text = "name,note,n\r\n"
                     "\"Smith, J\",\"said \"\"hi\"\"\",1\r\n"
                     "plain,\"two\nlines\",2\r\n"
                     "\"\",,3\r\n";
  CU_ASSERT_FATAL(parse(text, true, NULL, 0, &c, err));
  CHECK_INT(c.ncols, 3);
  CHECK_INT(c.nrows, 3);
  CHECK_STR(c.cols[0].name, "name");
  CHECK_INT(c.cols[0].kind, SF__COL_STR);
  CHECK_STR(str_at(&c, 0, 0), "Smith, J");
  CHECK_STR(str_at(&c, 1, 0), "said \"hi\"");
  CHECK_STR(str_at(&c, 1, 1), "two\nlines");
  CHECK_STR(str_at(&c, 0, 2), "");
  CHECK_STR(str_at(&c, 1, 2), "");
  CHECK_INT(c.cols[2].kind, SF__COL_I64);
  CHECK_INT(((int64_t *)c.cols[2].data)[2], 3);
  sf__csv_free(&c);
}

static void test_csv_inference(void) {
  sf__csv c;
  char err[512];
  /* a: integers; b: an integer then a float (widened in place); c: an
   * empty field (NaN); d: numbers, then a word (str, by a restart). */
  const char *text = "\xEF\xBB\xBF" "a,b,c,d\n1,2,3,4\n\n5,6.5,,x\n";
  CU_ASSERT_FATAL(parse(text, true, NULL, 0, &c, err));
  CHECK_STR(c.cols[0].name, "a");
  CHECK_INT(c.nrows, 2);
  CHECK_INT(c.cols[0].kind, SF__COL_I64);
  CHECK_INT(c.cols[1].kind, SF__COL_F64);
  CU_ASSERT(((double *)c.cols[1].data)[0] == 2.0 && ((double *)c.cols[1].data)[1] == 6.5);
  CHECK_INT(c.cols[2].kind, SF__COL_F64);
  CU_ASSERT(isnan(((double *)c.cols[2].data)[1]));
  CHECK_INT(c.cols[3].kind, SF__COL_STR);
  CHECK_STR(str_at(&c, 3, 0), "4");
  CHECK_STR(str_at(&c, 3, 1), "x");
  sf__csv_free(&c);
  /* No header: names c0, c1; quoted and blank-padded numbers. */
  CU_ASSERT_FATAL(parse("\"1.5\", 2 \n3,4", false, NULL, 0, &c, err));
  CHECK_STR(c.cols[1].name, "c1");
  CHECK_INT(c.nrows, 2);
  CHECK_INT(c.cols[0].kind, SF__COL_F64);
  CU_ASSERT(((double *)c.cols[0].data)[0] == 1.5);
  CHECK_INT(((int64_t *)c.cols[1].data)[0], 2);
  sf__csv_free(&c);
  /* Given types, f32 rounded correctly. */
  int32_t types[] = {SF__COL_F32, SF__COL_STR};
  CU_ASSERT_FATAL(parse("x,y\n0.1,5\n", true, types, 2, &c, err));
  CU_ASSERT(((float *)c.cols[0].data)[0] == 0.1f);
  CHECK_STR(str_at(&c, 1, 0), "5");
  sf__csv_free(&c);
  /* Nothing at all: no columns. */
  CU_ASSERT_FATAL(parse("", true, NULL, 0, &c, err));
  CHECK_INT(c.ncols, 0);
  sf__csv_free(&c);
}

static void check_csv_error(const char *text, bool header, const int32_t *types, int64_t nt,
                            const char *want) {
  sf__csv c;
  char err[512] = "";
  CU_ASSERT(!parse(text, header, types, nt, &c, err));
  CHECK_STR(err, want);
}

static void test_csv_errors(void) {
  int32_t i64s[] = {SF__COL_I64, SF__COL_I64};
  int32_t f64s[] = {SF__COL_F64, SF__COL_F64};
  check_csv_error("a,b\n1,2\n3,x\n", true, i64s, 2,
                  "d.csv:3:3: column \"b\": cannot read \"x\" as i64");
  check_csv_error("a,b\n1,2\n3,99999999999999999999\n", true, i64s, 2,
                  "d.csv:3:3: column \"b\": cannot read \"99999999999999999999\" as i64: out "
                  "of range");
  check_csv_error("a,b\n1,\n", true, i64s, 2, "d.csv:2:3: column \"b\": an empty field in an "
                  "i64 column");
  check_csv_error("a,b\n1.5,2.5e\n", true, f64s, 2,
                  "d.csv:2:5: column \"b\": cannot read \"2.5e\" as f64");
  check_csv_error("a,b\n1,2\n3\n", true, NULL, 0, "d.csv:3:2: this row has 1 field, the "
                  "header has 2");
  check_csv_error("a,b\n1,2,3\n", true, NULL, 0, "d.csv:2:4: this row has more than the 2 "
                  "fields of the header");
  check_csv_error("a,b\n1,\"open\n\nstill open", true, NULL, 0,
                  "d.csv:4:11: a quoted field is not closed (it opens at line 2, column 3)");
  check_csv_error("a,b\n1,\"x\"y\n", true, NULL, 0, "d.csv:2:6: unexpected 'y' after a "
                  "closing quote (a quote inside a quoted field is written twice: \"\")");
  check_csv_error("a,b\n1,caf\xc3\n", true, NULL, 0, "d.csv:2:3: column \"b\": invalid UTF-8 "
                  "(byte 0xc3 at offset 3 of the field)");
  check_csv_error("a,a\n", true, NULL, 0, "d.csv:1:3: the header names column \"a\" twice "
                  "(columns 1 and 2)");
  check_csv_error("a,b\n", true, i64s, 1, "d.csv: 1 column types given, but the file has 2 "
                  "columns");
  check_csv_error("\x7f" "ELF\xff\xfe\x01", true, NULL, 0,
                  "d.csv:1:1: the header's field 1 is not valid UTF-8 text (is this a CSV "
                  "file?)");
}

/* ---------------------------------------------------------------- UTF-8 */

static void test_utf8(void) {
  CHECK_INT(sf__utf8_valid_prefix("plain ascii text!", 17), 17);
  CHECK_INT(sf__utf8_valid_prefix("caf\xc3\xa9", 5), 5);
  CHECK_INT(sf__utf8_valid_prefix("\xf0\x9f\x98\x80", 4), 4);
  CHECK_INT(sf__utf8_valid_prefix("ab\xc0\xaf", 4), 2);     /* overlong */
  CHECK_INT(sf__utf8_valid_prefix("ab\xed\xa0\x80", 5), 2); /* surrogate */
  CHECK_INT(sf__utf8_valid_prefix("ab\xf4\x90\x80\x80", 6), 2); /* > U+10FFFF */
  CHECK_INT(sf__utf8_valid_prefix("abcdefgh\xe2\x82", 10), 8); /* truncated */
  CHECK_INT(sf__utf8_valid_prefix("\x80", 1), 0);
}

/* ---------------------------------------------------------------- JSON */

/* struct Item { price: f64, qty: i32 }  struct Order { name: str,
 * items: Item[], ok: bool, big: i64 } */
typedef struct item { double price; int32_t qty; } item;
typedef struct order { sf_str *name; sf_array *items; bool ok; int64_t big; } order;
static const sf_field item_fields[] = {{"price", offsetof(item, price), &sf_type_f64},
                                       {"qty", offsetof(item, qty), &sf_type_i32}};
static const sf_type item_type = {SF_STRUCT, sizeof(item), 8, 2, NULL, item_fields, "Item"};
static const sf_type items_type = {SF_ARRAY, 8, 8, 0, &item_type, NULL, "Item[]"};
static const sf_field order_fields[] = {{"name", offsetof(order, name), &sf_type_str},
                                        {"items", offsetof(order, items), &items_type},
                                        {"ok", offsetof(order, ok), &sf_type_bool},
                                        {"big", offsetof(order, big), &sf_type_i64}};
static const sf_type order_type = {SF_STRUCT, sizeof(order), 8, 4, NULL, order_fields, "Order"};

static void test_json_typed(void) {
  char errbuf[256];
  if (!sf__cjson_load(errbuf, sizeof errbuf)) {
    fprintf(stderr, "\n  %s\n", errbuf);
    CU_FAIL("libcjson.so.1 does not load");
    return;
  }
  sf_str *text = sf_str_new("{\"name\": \"o\\u00e9\", \"extra\": [1], \"items\": [{\"price\": 1.5, "
                            "\"qty\": 2}, {\"qty\": 3, \"price\": 0.1}], \"ok\": true, \"big\": "
                            "-9007199254740991}", -1 + (int64_t)sizeof "{\"name\": \"o\\u00e9\", \"extra\": [1], \"items\": [{\"price\": 1.5, \"qty\": 2}, {\"qty\": 3, \"price\": 0.1}], \"ok\": true, \"big\": -9007199254740991}");
  sf_str *name = sf_str_new("o.json", 6);
  order o = {0};
  sf_std_data_from_json(&o, &order_type, text, name, &order_type, &LOC);
  CHECK_STR(sf__str_data(o.name), "o\xc3\xa9");
  CHECK_INT(o.items->len, 2);
  CU_ASSERT(((item *)o.items->data)[1].price == 0.1);
  CHECK_INT(((item *)o.items->data)[1].qty, 3);
  CU_ASSERT(o.ok);
  CHECK_INT(o.big, -9007199254740991LL);
  /* Back to text: fields in declaration order, shortest floats. */
  sf_str *back = sf_std_data_to_json(&o, &order_type, &order_type, &LOC);
  CHECK_STR(sf__str_data(back), "{\"name\": \"o\xc3\xa9\", \"items\": [{\"price\": 1.5, \"qty\": 2}, "
            "{\"price\": 0.1, \"qty\": 3}], \"ok\": true, \"big\": -9007199254740991}");
  sf_release(back);
  sf_value_release(&order_type, &o);
  sf_release(text);
  static const struct { const char *in, *want; } bad[] = {
      {"{\"name\": \"a\", \"items\": [{\"price\": 1, \"qty\": 2}, {\"price\": \"9\", \"qty\": 1}], "
       "\"ok\": true, \"big\": 1}",
       "t.sflow:3:7: runtime error: o.json: $.items[1].price: expected f64, found a string"},
      {"{\"name\": \"a\", \"items\": [{\"price\": 1}], \"ok\": true, \"big\": 1}",
       "t.sflow:3:7: runtime error: o.json: $.items[0]: missing field \"qty\" (of Item)"},
      {"{\"name\": \"a\", \"items\": [{\"price\": 1, \"qty\": 2.5}], \"ok\": true, \"big\": 1}",
       "t.sflow:3:7: runtime error: o.json: $.items[0].qty: expected an integer, found 2.5"},
      {"{\"name\": \"a\", \"items\": [], \"ok\": true, \"big\": 9223372036854775808}",
       "t.sflow:3:7: runtime error: o.json: $.big: 9223372036854775808 is out of range for i64"},
      {"{\"name\": \"a\", \"items\": [], \"ok\": true, \"big\": 1e19}",
       "t.sflow:3:7: runtime error: o.json: $.big: 1e+19 is 2^53 or more written with a fraction "
       "or exponent, which reads as an f64 and is not exact; write the integer's digits"},
      {"[1]", "t.sflow:3:7: runtime error: o.json: $: expected an object (Order), found an array"},
      {"{\"name\": 1,\n \"x\": }", "t.sflow:3:7: runtime error: o.json:2:7: invalid JSON at \"}\""},
      {"{\"name\": \"a\"} x", "t.sflow:3:7: runtime error: o.json:1:15: invalid JSON at \"x\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sf_str *t = sf_str_new(bad[i].in, (int64_t)strlen(bad[i].in));
    order z = {0};
    EXPECT_ERROR(sf_std_data_from_json(&z, &order_type, t, name, &order_type, &LOC), bad[i].want);
    CU_ASSERT(z.name == NULL && z.items == NULL); /* nothing left behind */
    sf_release(t);
  }
  double nan_v = NAN;
  EXPECT_ERROR(sf_std_data_to_json(&nan_v, &sf_type_f64, &sf_type_f64, &LOC),
               "t.sflow:3:7: runtime error: to_json: $: NaN has no JSON form");
  sf_release(name);
}

/* ---------------------------------------------------------------- npy */

static void npy_error(const char *bytes, size_t n, const char *want) {
  sf__npy h;
  char err[512] = "";
  CU_ASSERT(!sf__npy_parse_header(bytes, n, "a.npy", &h, err, sizeof err));
  CHECK_STR(err, want);
}

/* A version 1.0 file of this header and no data into buf; its length. */
static size_t v1(const char *hdr, char *buf) {
  size_t hl = strlen(hdr);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)hl;
  buf[9] = (char)(hl >> 8);
  memcpy(buf + 10, hdr, hl);
  return 10 + hl;
}

static void test_npy_header(void) {
  sf__npy h;
  char err[512];
  char v2[256];
  const char *hd = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 0, 3), }";
  size_t hl = 128 - 12;
  memcpy(v2, "\x93NUMPY\x02\x00", 8);
  v2[8] = (char)hl; v2[9] = v2[10] = v2[11] = 0;
  memset(v2 + 12, ' ', hl);
  memcpy(v2 + 12, hd, strlen(hd));
  v2[127] = '\n';
  if (!sf__npy_parse_header(v2, 128, "a.npy", &h, err, sizeof err))
    fprintf(stderr, "\n  %s\n", err);
  CU_ASSERT_FATAL(sf__npy_parse_header(v2, 128, "a.npy", &h, err, sizeof err));
  CHECK_INT(h.kind, SF_I64);
  CHECK_INT(h.ndim, 3);
  CHECK_INT(h.count, 0);
  CHECK_INT(h.data_off, 128);
  npy_error("\x93NUMPY\x01\x00\xff\xff{}", 12, "a.npy: byte 8: the header length 65535 runs past "
            "the end of the file (12 bytes)");
  npy_error("\x93NUMPY\x04\x00\x00\x00", 10, "a.npy: byte 6: unsupported .npy format version "
            "4.0 (1.0, 2.0 and 3.0 are read)");
  char buf[256];
  size_t n = v1("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999, 99999999999), }",
                buf);
  npy_error(buf, n, "a.npy: byte 74: the shape's element count overflows");
  n = v1("{'descr': '<f8', 'shape': ()}", buf);
  npy_error(buf, n, "a.npy: byte 10: malformed .npy header: it lacks 'fortran_order'");
  n = v1("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", buf);
  npy_error(buf, n, "a.npy: byte 67: truncated .npy file: the shape needs 32 bytes of data, the "
            "file has 0");
}

/* ------------------------------------------------------------- batches */

static void test_batches(void) {
  /* Every index once per epoch, in another order per epoch; rank parts
   * tile each global batch for every worker count. */
  sf_array *p0 = sf_std_data_permutation(1000, 5, 0, &LOC);
  sf_array *p1 = sf_std_data_permutation(1000, 5, 1, &LOC);
  char seen[1000] = {0};
  int64_t same = 0;
  for (int i = 0; i < 1000; i++) {
    seen[((int64_t *)p0->data)[i]]++;
    same += ((int64_t *)p0->data)[i] == ((int64_t *)p1->data)[i];
  }
  for (int i = 0; i < 1000; i++)
    CHECK_INT(seen[i], 1);
  CU_ASSERT(same < 20);
  for (int64_t w = 1; w <= 8; w++) {
    int64_t pos = 0;
    sf_array *parts[8];
    for (int64_t r = 0; r < w; r++)
      parts[r] = sf_std_data_batches(1000, 64, 5, 0, r, w, false, &LOC);
    for (int64_t b = 0; b < parts[0]->len; b++)
      for (int64_t r = 0; r < w; r++) {
        sf_array *part = ((sf_array **)parts[r]->data)[b];
        for (int64_t i = 0; i < part->len; i++)
          CU_ASSERT(((int64_t *)part->data)[i] == ((int64_t *)p0->data)[pos++]);
      }
    CHECK_INT(pos, 1000);
    for (int64_t r = 0; r < w; r++)
      sf_release(parts[r]);
  }
  sf_release(p0);
  sf_release(p1);
  EXPECT_ERROR(sf_std_data_batches(10, 0, 1, 0, 0, 1, false, &LOC),
               "t.sflow:3:7: runtime error: batches: batch_size must be positive, got 0");
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"parse_double_edges", test_parse_double_edges},
      {"parse_double_random", test_parse_double_random},
      {"parse_int64", test_parse_int64},
      {"csv_quoting", test_csv_quoting},
      {"csv_inference", test_csv_inference},
      {"csv_errors", test_csv_errors},
      {"utf8", test_utf8},
      {"json_typed", test_json_typed},
      {"npy_header", test_npy_header},
      {"batches", test_batches},
      {NULL, NULL},
  };
  return rt_run("rt_data", tests, argc, argv);
}
