/*
 * test_diag.c — unit tests of compiler/diag.c: edit distance and "did you
 * mean" suggestions, the human format (location, source line, caret), the
 * JSON format (one object per line), notes, the error limit and the sink.
 *
 * The formats are checked byte for byte on captured stderr, since that is
 * exactly what users and editors read.
 */
#include "front_test.h"

static int file;

/* Registers src as t.sflow and sends diagnostics to stderr in fmt. */
static void setup(const char *src, DiagFormat fmt) {
  ft_reset();
  diag_set_sink(NULL, NULL);
  diag_init(fmt, 0);
  file = src_add("t.sflow", src, strlen(src), "");
}

static Loc at(int line, int col, int off, int len) { return (Loc){file, line, col, off, len}; }

static void test_edit_distance(void) {
  CHECK_INT(edit_distance("kitten", "sitting", 10), 3);
  CHECK_INT(edit_distance("", "abc", 5), 3);
  CHECK_INT(edit_distance("abc", "", 5), 3);
  CHECK_INT(edit_distance("abc", "abc", 0), 0);
  CHECK_INT(edit_distance("flaw", "lawn", 5), 2);
  CHECK_INT(edit_distance("sqrt", "sqrt_", 5), 1);
}

static void test_edit_distance_limit(void) {
  /* Past the limit the answer is limit+1, whatever the true distance. */
  CHECK_INT(edit_distance("abcdef", "uvwxyz", 2), 3);
  CHECK_INT(edit_distance("a", "abcdefgh", 3), 4);
  CHECK_INT(edit_distance("kitten", "sitting", 3), 3);
  CHECK_INT(edit_distance("kitten", "sitting", 2), 3);
  /* Very long names are not compared at all. */
  char longname[400];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  CHECK_INT(edit_distance(longname, longname, 5), 6);
}

static void test_suggest_closest(void) {
  const char *c[] = {"print", "len", "sqrt", "println"};
  CHECK_STR(suggest("prnt", c, 4), "print");
  CHECK_STR(suggest("lne", c, 4), "len");
  CHECK_STR(suggest("sqr", c, 4), "sqrt");
  /* The first of equally close candidates wins. */
  const char *d[] = {"cat", "bat"};
  CHECK_STR(suggest("hat", d, 2), "cat");
}

static void test_suggest_limit_rule(void) {
  /* The limit is (len+2)/3: 1 for names of 1..3, 2 for 4..6, 3 for 7..9. */
  const char *c1[] = {"xy"};
  CU_ASSERT_PTR_NULL(suggest("ab", c1, 1)); /* distance 2 > 1 */
  const char *c2[] = {"ax"};
  CHECK_STR(suggest("ab", c2, 1), "ax");    /* distance 1 */
  const char *c3[] = {"abxy"};
  CHECK_STR(suggest("abcd", c3, 1), "abxy"); /* 2 <= 2 */
  const char *c4[] = {"axyz"};
  CU_ASSERT_PTR_NULL(suggest("abcd", c4, 1)); /* 3 > 2 */
  const char *c5[] = {"abcdxyz"};
  CHECK_STR(suggest("abcdefg", c5, 1), "abcdxyz"); /* 3 <= 3 */
  const char *c6[] = {"abcwxyz"};
  CU_ASSERT_PTR_NULL(suggest("abcdefg", c6, 1)); /* 4 > 3 */
}

static void test_suggest_skips_self_and_null(void) {
  const char *c[] = {"len", NULL, "lenn"};
  CHECK_STR(suggest("len", c, 3), "lenn");
  const char *only[] = {"len"};
  CU_ASSERT_PTR_NULL(suggest("len", only, 1));
  CU_ASSERT_PTR_NULL(suggest("x", NULL, 0));
}

static void test_human_format(void) {
  setup("let x = 1\nlet y = zz + 1\n", DIAG_HUMAN);
  capture_begin();
  diag_error(at(2, 9, 18, 2), "unknown name '%s'", "zz");
  char *out = capture_end();
  CHECK_STR(out, "t.sflow:2:9: error: unknown name 'zz'\n"
                 "   let y = zz + 1\n"
                 "           ^~\n");
  free(out);
  CHECK_INT(diag_error_count(), 1);
}

static void test_human_warning_and_note(void) {
  setup("fn f() {\n  let unused = 1\n}\n", DIAG_HUMAN);
  capture_begin();
  diag_warning(at(2, 7, 15, 6), "unused variable '%s'", "unused");
  diag_note(at(1, 1, 0, 2), "in this function");
  char *out = capture_end();
  CHECK_STR(out, "t.sflow:2:7: warning: unused variable 'unused'\n"
                 "     let unused = 1\n"
                 "         ^~~~~~\n"
                 "t.sflow:1:1: note: in this function\n"
                 "   fn f() {\n"
                 "   ^~\n");
  free(out);
  CHECK_INT(diag_error_count(), 0);
}

static void test_caret_after_tabs_and_utf8(void) {
  /* Tabs are copied to the caret line and a multi-byte character takes
   * one column, so the caret stays under the token. */
  setup("\tlet s = \"\xC3\xA9\" + q\n", DIAG_HUMAN);
  capture_begin();
  diag_error(at(1, 16, 16, 1), "unknown name 'q'");
  char *out = capture_end();
  CHECK_STR(out, "t.sflow:1:16: error: unknown name 'q'\n"
                 "   \tlet s = \"\xC3\xA9\" + q\n"
                 "   \t              ^\n");
  free(out);
}

static void test_caret_at_end_of_line(void) {
  setup("let x = (1 +\n", DIAG_HUMAN);
  capture_begin();
  diag_error(at(1, 13, 12, 1), "expected expression, found end of line");
  char *out = capture_end();
  CHECK_STR(out, "t.sflow:1:13: error: expected expression, found end of line\n"
                 "   let x = (1 +\n"
                 "               ^\n");
  free(out);
}

static void test_long_line_is_windowed(void) {
  Buf src = {0};
  for (int i = 0; i < 5000; i++)
    buf_putc(&src, 'a');
  buf_puts(&src, " $\n");
  setup(src.data, DIAG_HUMAN);
  capture_begin();
  diag_error(at(1, 5002, 5001, 1), "unexpected character '$'");
  char *out = capture_end();
  /* Header + one windowed line + caret line, each far shorter than 5000. */
  char *l1 = strchr(out, '\n'), *l2 = l1 ? strchr(l1 + 1, '\n') : NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(l2);
  CU_ASSERT(l2 - l1 < 300);
  CU_ASSERT(strstr(out, "   ...  ") != NULL);
  CU_ASSERT(strstr(l2, "^\n") != NULL);
  free(out);
  buf_free(&src);
}

static void test_control_bytes_shown_as_spaces(void) {
  setup("a\x01" "b\n", DIAG_HUMAN);
  capture_begin();
  diag_error(at(1, 2, 1, 1), "unexpected control character 0x01");
  char *out = capture_end();
  CHECK_STR(out, "t.sflow:1:2: error: unexpected control character 0x01\n"
                 "   a b\n"
                 "    ^\n");
  free(out);
}

static void test_json_format(void) {
  setup("let x = 1\nlet y = zz\n", DIAG_JSON);
  capture_begin();
  diag_error(at(2, 9, 18, 2), "unknown name 'zz'");
  diag_note(at(1, 5, 4, 1), "did you mean \"x\"?\tor\\not");
  char *out = capture_end();
  CHECK_STR(out, "{\"file\":\"t.sflow\",\"line\":2,\"column\":9,\"end_column\":11,"
                 "\"severity\":\"error\",\"message\":\"unknown name 'zz'\"}\n"
                 "{\"file\":\"t.sflow\",\"line\":1,\"column\":5,\"end_column\":6,"
                 "\"severity\":\"note\",\"message\":\"did you mean \\\"x\\\"?\\u0009or\\\\not\"}\n");
  free(out);
}

static void test_json_escapes_bytes(void) {
  setup("x\n", DIAG_JSON);
  capture_begin();
  diag_error(at(1, 1, 0, 0), "byte \xff and newline\n");
  char *out = capture_end();
  /* Every line is one JSON object; non-ASCII bytes are escaped. */
  CHECK_STR(out, "{\"file\":\"t.sflow\",\"line\":1,\"column\":1,\"end_column\":2,"
                 "\"severity\":\"error\",\"message\":\"byte \\u00ff and newline\\n\"}\n");
  free(out);
}

static void test_error_limit(void) {
  setup("x\n", DIAG_HUMAN);
  capture_begin();
  for (int i = 0; i < 60; i++) {
    diag_error(at(1, 1, 0, 1), "error %d", i);
    diag_note(at(1, 1, 0, 1), "note %d", i);
  }
  char *out = capture_end();
  CU_ASSERT(diag_too_many());
  CHECK_INT(diag_error_count(), 60);
  CU_ASSERT(strstr(out, "error 49\n") != NULL);
  CU_ASSERT(strstr(out, "note 49\n") != NULL);
  /* Errors past the limit, and their notes, are not shown. */
  CU_ASSERT(strstr(out, "error 50") == NULL);
  CU_ASSERT(strstr(out, "note 50") == NULL);
  CU_ASSERT(strstr(out, "sflowc: too many errors, stopping\n") != NULL);
  free(out);
  diag_reset();
  CHECK_INT(diag_error_count(), 0);
  CU_ASSERT(!diag_too_many());
}

static void test_sink(void) {
  setup("let x = 1\n", DIAG_HUMAN);
  diag_set_sink(ft_sink, NULL);
  capture_begin();
  diag_error(at(1, 5, 4, 1), "bad %s", "x");
  diag_note(at(1, 1, 0, 3), "here");
  diag_warning(at(1, 9, 8, 1), "w");
  char *out = capture_end();
  CHECK_STR(out, ""); /* nothing on stderr */
  CHECK_STR(ft_diags.data, "error 1:5: bad x\nnote 1:1: here\nwarning 1:9: w\n");
  CHECK_INT(diag_error_count(), 1);
  free(out);
  diag_set_sink(NULL, NULL);
}

static void test_unknown_file(void) {
  setup("x\n", DIAG_HUMAN);
  capture_begin();
  diag_error((Loc){99, 3, 4, 0, 1}, "somewhere");
  char *out = capture_end();
  CHECK_STR(out, "<unknown>:3:4: error: somewhere\n");
  free(out);
}

static void test_long_message_is_truncated(void) {
  setup("x\n", DIAG_HUMAN);
  char big[3000];
  memset(big, 'm', sizeof big - 1);
  big[sizeof big - 1] = 0;
  capture_begin();
  diag_error(at(1, 1, 0, 1), "%s", big);
  char *out = capture_end();
  CU_ASSERT(strlen(out) < 1200);
  free(out);
}

int main(int argc, char **argv) {
  static const ft_test tests[] = {
      {"edit_distance", test_edit_distance},
      {"edit_distance_limit", test_edit_distance_limit},
      {"suggest_closest", test_suggest_closest},
      {"suggest_limit_rule", test_suggest_limit_rule},
      {"suggest_skips_self_and_null", test_suggest_skips_self_and_null},
      {"human_format", test_human_format},
      {"human_warning_and_note", test_human_warning_and_note},
      {"caret_after_tabs_and_utf8", test_caret_after_tabs_and_utf8},
      {"caret_at_end_of_line", test_caret_at_end_of_line},
      {"long_line_is_windowed", test_long_line_is_windowed},
      {"control_bytes_shown_as_spaces", test_control_bytes_shown_as_spaces},
      {"json_format", test_json_format},
      {"json_escapes_bytes", test_json_escapes_bytes},
      {"error_limit", test_error_limit},
      {"sink", test_sink},
      {"unknown_file", test_unknown_file},
      {"long_message_is_truncated", test_long_message_is_truncated},
      {NULL, NULL},
  };
  int rc = ft_run("diag", tests, argc, argv);
  buf_free(&ft_diags);
  src_reset();
  arena_free_all();
  return rc;
}
