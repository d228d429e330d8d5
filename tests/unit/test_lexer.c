/*
 * test_lexer.c — unit tests of compiler/lexer.c: token kinds and
 * positions, the newline-as-terminator rules, struct-literal braces,
 * literal decoding, lexical errors and the nesting limit.
 *
 * Each test lexes a small source with lex_source and compares the token
 * stream, written as a string of tok_spelling names, so a failure prints
 * the whole stream the parser would have seen.
 */
#include "front_test.h"
#include "parser.h"

static Token *toks;
static int ntok;

static Token *lexn(const char *src, size_t len) {
  ft_reset();
  int f = src_add("t.sflow", src, len, "");
  toks = lex_source(f, &ntok);
  return toks;
}
static Token *lex(const char *src) { return lexn(src, strlen(src)); }

/* The stream as "'let' IDENT '=' INT NEWLINE EOF". */
static const char *kinds(void) {
  Buf b = {0};
  for (int i = 0; i <= ntok; i++)
    buf_printf(&b, "%s%s", i ? " " : "", tok_spelling(toks[i].kind));
  char *s = arena_strdup(b.data);
  buf_free(&b);
  return s;
}

static void test_kinds_and_positions(void) {
  lex("let x = 42\n  y += 1.5 // c\n");
  CHECK_STR(kinds(), "'let' IDENT '=' INT NEWLINE IDENT '+=' FLOAT NEWLINE EOF");
  CHECK_INT(toks[1].loc.line, 1);
  CHECK_INT(toks[1].loc.col, 5);
  CHECK_STR(toks[1].text, "x");
  CHECK_INT(toks[3].loc.col, 9);
  CHECK_INT(toks[3].loc.len, 2);
  CHECK_INT(toks[5].loc.line, 2);
  CHECK_INT(toks[5].loc.col, 3);
  CHECK_INT(toks[5].loc.off, 13);
  CHECK_INT(toks[6].loc.len, 2);
  CHECK_INT(ft_ndiags, 0);
}

static void test_every_operator(void) {
  lex("|| && == != <= >= << >> += -= *= /= -> .. + - * / % < > = ! & | ^ ( ) [ ] , . : ; @");
  CHECK_STR(kinds(), "'||' '&&' '==' '!=' '<=' '>=' '<<' '>>' '+=' '-=' '*=' '/=' '->' '..' "
                     "'+' '-' '*' '/' '%' '<' '>' '=' '!' '&' '|' '^' '(' ')' '[' ']' ',' '.' "
                     "':' ';' '@' EOF");
}

static void test_keywords(void) {
  lex("fn task actor kernel workflow struct const let var if else while for in return "
      "break continue await spawn launch import true false fnx _");
  CHECK_STR(kinds(), "'fn' 'task' 'actor' 'kernel' 'workflow' 'struct' 'const' 'let' 'var' "
                     "'if' 'else' 'while' 'for' 'in' 'return' 'break' 'continue' 'await' "
                     "'spawn' 'launch' 'import' 'true' 'false' IDENT IDENT NEWLINE EOF");
}

static void test_columns_count_characters(void) {
  /* A multi-byte character in a comment is one column. */
  lex("/* \xC3\xA9 */ x");
  CHECK_INT(toks[0].loc.col, 9);
  CHECK_INT(toks[0].loc.off, 9); /* offsets are bytes */
}

static void test_newline_ends_statement(void) {
  lex("x\n\n\ny\n");
  CHECK_STR(kinds(), "IDENT NEWLINE IDENT NEWLINE EOF");
  lex("return\nbreak\ncontinue\n\"s\"\n1\n2.0\ntrue\nfalse\n)\n]\n}\n");
  CHECK_STR(kinds(), "'return' NEWLINE 'break' NEWLINE 'continue' NEWLINE STRING NEWLINE INT "
                     "NEWLINE FLOAT NEWLINE 'true' NEWLINE 'false' NEWLINE ')' NEWLINE ']' "
                     "NEWLINE '}' NEWLINE EOF");
}

static void test_newline_after_operator_continues(void) {
  lex("x = a +\n  b\n");
  CHECK_STR(kinds(), "IDENT '=' IDENT '+' IDENT NEWLINE EOF");
  lex("let x =\n1");
  CHECK_STR(kinds(), "'let' IDENT '=' INT NEWLINE EOF");
}

static void test_else_on_next_line(void) {
  lex("if a {\n  x\n}\nelse {\n  y\n}\n");
  CHECK_STR(kinds(), "'if' IDENT '{' IDENT NEWLINE '}' 'else' '{' IDENT NEWLINE '}' NEWLINE EOF");
  /* Blank lines and comments between } and else change nothing. */
  lex("if a { x }\n\n// c\n\nelse { y }");
  CHECK_STR(kinds(), "'if' IDENT '{' IDENT '}' 'else' '{' IDENT '}' NEWLINE EOF");
}

static void test_brace_and_dot_on_next_line(void) {
  lex("fn f()\n{\n}\n");
  CHECK_STR(kinds(), "'fn' IDENT '(' ')' '{' '}' NEWLINE EOF");
  lex("xs\n  .split(2)\n");
  CHECK_STR(kinds(), "IDENT '.' IDENT '(' INT ')' NEWLINE EOF");
}

static void test_newlines_inside_brackets(void) {
  lex("f(a,\n  b\n)\n");
  CHECK_STR(kinds(), "IDENT '(' IDENT ',' IDENT ')' NEWLINE EOF");
  lex("[1,\n 2\n]");
  CHECK_STR(kinds(), "'[' INT ',' INT ']' NEWLINE EOF");
  /* Inside a block inside parentheses, newlines end statements again. */
  lex("f({\n x\n y\n})");
  CHECK_STR(kinds(), "IDENT '(' '{' IDENT NEWLINE IDENT NEWLINE '}' ')' NEWLINE EOF");
}

static void test_block_comment_with_newline_is_newline(void) {
  lex("x /* a\n b */ y");
  CHECK_STR(kinds(), "IDENT NEWLINE IDENT NEWLINE EOF");
  lex("x /* a b */ y");
  CHECK_STR(kinds(), "IDENT IDENT NEWLINE EOF");
}

static void test_struct_literal_brace(void) {
  lex("let p = Point { x: 1, y: 2 }");
  CHECK_STR(kinds(), "'let' IDENT '=' IDENT '{' IDENT ':' INT ',' IDENT ':' INT '}' NEWLINE EOF");
  CHECK_INT(toks[4].kind, TOK_LBRACE_STRUCT);
  /* Newlines inside a struct literal are ignored like inside parentheses. */
  lex("P {\n  x: 1,\n  y: 2\n}\n");
  CHECK_INT(toks[1].kind, TOK_LBRACE_STRUCT);
  CHECK_STR(kinds(), "IDENT '{' IDENT ':' INT ',' IDENT ':' INT '}' NEWLINE EOF");
  lex("m.P {\n x: 1 }");
  CHECK_INT(toks[3].kind, TOK_LBRACE_STRUCT);
}

static void test_block_brace_is_not_struct(void) {
  lex("if c { x }");
  CHECK_INT(toks[2].kind, '{');
  lex("struct P { x: i64 }");
  CHECK_INT(toks[2].kind, '{');
  lex("actor A { x: i64 }");
  CHECK_INT(toks[2].kind, '{');
  lex("while c { f(x) }");
  CHECK_INT(toks[2].kind, '{');
}

static void test_integers(void) {
  lex("0 42 1_000_000 0x2A 0xff_ff 0XAB 9223372036854775807");
  CHECK_STR(kinds(), "INT INT INT INT INT INT INT NEWLINE EOF");
  CHECK_INT(toks[0].ival, 0);
  CHECK_INT(toks[1].ival, 42);
  CHECK_INT(toks[2].ival, 1000000);
  CHECK_INT(toks[3].ival, 42);
  CHECK_INT(toks[4].ival, 0xffff);
  CHECK_INT(toks[5].ival, 0xab);
  CHECK_INT(toks[6].ival, INT64_MAX);
  CHECK_INT(ft_ndiags, 0);
  /* 2^63 is accepted (as the magnitude of INT64_MIN); sema checks its sign. */
  lex("9223372036854775808");
  CHECK_INT(ft_ndiags, 0);
  CHECK_INT(toks[0].ival, INT64_MIN);
}

static void test_integer_errors(void) {
  lex("9223372036854775809");
  CHECK_STR(ft_diags.data, "error 1:1: integer literal is too large for i64\n");
  lex("99999999999999999999999");
  CHECK_STR(ft_diags.data, "error 1:1: integer literal is too large for i64\n");
  lex("1__0");
  CHECK_STR(ft_diags.data, "error 1:1: misplaced '_' in integer literal\n");
  lex("1_");
  CHECK_STR(ft_diags.data, "error 1:1: misplaced '_' in integer literal\n");
  lex("0x");
  CHECK_STR(ft_diags.data, "error 1:1: hexadecimal literal has no digits\n");
  lex("12abc");
  CHECK_STR(ft_diags.data, "error 1:1: invalid suffix on number literal\n");
}

static void test_floats(void) {
  lex("1.0 .5 3e-4 1.5e3 1e+20 2.5E2 1_000.5");
  CHECK_STR(kinds(), "FLOAT FLOAT FLOAT FLOAT FLOAT FLOAT FLOAT NEWLINE EOF");
  CU_ASSERT_DOUBLE_EQUAL(toks[0].fval, 1.0, 0);
  CU_ASSERT_DOUBLE_EQUAL(toks[1].fval, 0.5, 0);
  CU_ASSERT_DOUBLE_EQUAL(toks[2].fval, 3e-4, 0);
  CU_ASSERT_DOUBLE_EQUAL(toks[3].fval, 1500.0, 0);
  CU_ASSERT_DOUBLE_EQUAL(toks[4].fval, 1e20, 0);
  CU_ASSERT_DOUBLE_EQUAL(toks[5].fval, 250.0, 0);
  CU_ASSERT_DOUBLE_EQUAL(toks[6].fval, 1000.5, 0);
  CHECK_STR(toks[2].text, "3e-4");
  CHECK_INT(ft_ndiags, 0);
  /* `0..10` is a range, not a float. */
  lex("0..10");
  CHECK_STR(kinds(), "INT '..' INT NEWLINE EOF");
}

static void test_float_errors(void) {
  lex("1e999");
  CHECK_STR(ft_diags.data, "error 1:1: float literal is too large for f64\n");
  lex("1_.5");
  CHECK_STR(ft_diags.data, "error 1:1: misplaced '_' in float literal\n");
}

static void test_string_escapes(void) {
  lex("\"a\\n\\t\\r\\\\\\\"\\0z\"");
  CHECK_STR(kinds(), "STRING NEWLINE EOF");
  CHECK_INT(toks[0].slen, 8);
  CU_ASSERT(memcmp(toks[0].sval, "a\n\t\r\\\"\0z", 8) == 0);
  lex("\"\\u{1F600}\\u{41}\\u{e9}\"");
  CHECK_INT(toks[0].slen, 4 + 1 + 2);
  CU_ASSERT(memcmp(toks[0].sval, "\xF0\x9F\x98\x80" "A" "\xC3\xA9", 7) == 0);
  lex("\"h\xC3\xA9llo \xE2\x82\xAC\"");
  CHECK_INT(toks[0].slen, 10);
  CHECK_INT(ft_ndiags, 0);
}

static void test_string_escape_errors(void) {
  lex("\"a\\qb\"");
  CHECK_STR(ft_diags.data, "error 1:3: unknown escape sequence '\\q'\n");
  lex("\"\\u{110000}\"");
  CHECK_STR(ft_diags.data,
            "error 1:2: invalid unicode escape: U+110000 is not a Unicode scalar value\n");
  lex("\"\\u{D800}\"");
  CHECK_STR(ft_diags.data, "error 1:2: invalid unicode escape: U+D800 is not a Unicode scalar value\n");
  lex("\"\\u1234\"");
  CHECK_STR(ft_diags.data, "error 1:2: invalid unicode escape: expected '\\u{XXXX}'\n");
  lex("\"\\u{}\"");
  CHECK_STR(ft_diags.data, "error 1:2: invalid unicode escape: expected '\\u{XXXX}'\n");
  lex("\"\\u{1234567}\"");
  CHECK_INT(ft_ndiags, 1);
  lex("\"\\u{12");
  CU_ASSERT(ft_ndiags >= 1);
}

static void test_unterminated_string(void) {
  lex("let s = \"abc\nx");
  CHECK_STR(ft_diags.data, "error 1:9: unterminated string literal\n");
  lex("\"abc\\");
  CHECK_STR(ft_diags.data, "error 1:1: unterminated string literal\n");
}

static void test_unterminated_comment(void) {
  /* Reported at the opener, not at the end of the file. */
  lex("x /* never closed\n\n");
  CHECK_STR(ft_diags.data, "error 1:3: unterminated block comment\n");
  lex("x\n  /* a /* b\n*");
  CHECK_STR(ft_diags.data, "error 2:3: unterminated block comment\n");
}

static void test_nul_bytes(void) {
  lexn("let\0x", 5);
  CHECK_STR(ft_diags.data, "error 1:4: unexpected NUL byte in source\n");
  CHECK_STR(kinds(), "'let' IDENT NEWLINE EOF");
  /* Inside a string a NUL byte is a control character. */
  lexn("\"a\0b\"", 5);
  CHECK_STR(ft_diags.data, "error 1:3: control character in string literal (use an escape such as '\\n')\n");
}

static void test_invalid_utf8(void) {
  lex("x \xff y");
  CHECK_STR(ft_diags.data, "error 1:3: unexpected byte 0xFF (non-ASCII characters are allowed "
                           "only in strings and comments)\n");
  lex("\"\xff\"");
  CHECK_STR(ft_diags.data, "error 1:2: invalid UTF-8 in string literal\n");
  /* Overlong encodings and surrogates are not UTF-8 either. */
  lex("\"\xC0\xAF\"");
  CHECK_INT(ft_ndiags, 2);
  lex("\"\xED\xA0\x80\"");
  CU_ASSERT(ft_ndiags >= 1);
  /* A truncated sequence at the end of a string. */
  lex("\"\xE2\x82\"");
  CU_ASSERT(ft_ndiags >= 1);
  /* Valid UTF-8 in comments is fine. */
  lex("// \xE2\x82\xAC\nx");
  CHECK_INT(ft_ndiags, 0);
}

static void test_bad_characters(void) {
  lex("a $ b");
  CHECK_STR(ft_diags.data, "error 1:3: unexpected character '$'\n");
  lex("a \x01 b");
  CHECK_STR(ft_diags.data, "error 1:3: unexpected control character 0x01\n");
}

static void test_nesting_limit(void) {
  Buf b = {0};
  for (int i = 0; i < SFLOW_MAX_NESTING; i++)
    buf_putc(&b, '(');
  for (int i = 0; i < SFLOW_MAX_NESTING; i++)
    buf_putc(&b, ')');
  lex(b.data);
  CHECK_INT(ft_ndiags, 0);
  CU_ASSERT(!lex_fatal);
  CHECK_INT(ntok, 2 * SFLOW_MAX_NESTING + 1);
  buf_free(&b);
  for (int i = 0; i <= SFLOW_MAX_NESTING; i++)
    buf_puts(&b, "[{(" + i % 3);
  lex(b.data);
  char want[128];
  snprintf(want, sizeof want, "error 1:%d: brackets nested too deeply (more than %d levels)\n",
           SFLOW_MAX_NESTING + 1 + 0, SFLOW_MAX_NESTING);
  CU_ASSERT(lex_fatal);
  CHECK_INT(ft_ndiags, 1);
  CHECK_INT(ntok, 0);
  buf_free(&b);
}

static void test_too_many_errors_stops(void) {
  Buf b = {0};
  for (int i = 0; i < 10000; i++)
    buf_puts(&b, "$ ");
  lex(b.data);
  CU_ASSERT(diag_too_many());
  CHECK_INT(ft_ndiags, 50);
  buf_free(&b);
}

static void test_empty_source(void) {
  lexn("", 0);
  CHECK_STR(kinds(), "EOF");
  lex("\n\n// only a comment\n");
  CHECK_STR(kinds(), "EOF");
}

static void test_tok_names(void) {
  CHECK_STR(tok_name(TOK_IDENT), "identifier");
  CHECK_STR(tok_name(0), "end of file");
  CHECK_STR(tok_name(TOK_WHILE), "'while'");
  CHECK_STR(tok_name('('), "'('");
  CHECK_STR(tok_name(TOK_ARROW), "'->'");
}

int main(int argc, char **argv) {
  static const ft_test tests[] = {
      {"kinds_and_positions", test_kinds_and_positions},
      {"every_operator", test_every_operator},
      {"keywords", test_keywords},
      {"columns_count_characters", test_columns_count_characters},
      {"newline_ends_statement", test_newline_ends_statement},
      {"newline_after_operator_continues", test_newline_after_operator_continues},
      {"else_on_next_line", test_else_on_next_line},
      {"brace_and_dot_on_next_line", test_brace_and_dot_on_next_line},
      {"newlines_inside_brackets", test_newlines_inside_brackets},
      {"block_comment_with_newline_is_newline", test_block_comment_with_newline_is_newline},
      {"struct_literal_brace", test_struct_literal_brace},
      {"block_brace_is_not_struct", test_block_brace_is_not_struct},
      {"integers", test_integers},
      {"integer_errors", test_integer_errors},
      {"floats", test_floats},
      {"float_errors", test_float_errors},
      {"string_escapes", test_string_escapes},
      {"string_escape_errors", test_string_escape_errors},
      {"unterminated_string", test_unterminated_string},
      {"unterminated_comment", test_unterminated_comment},
      {"nul_bytes", test_nul_bytes},
      {"invalid_utf8", test_invalid_utf8},
      {"bad_characters", test_bad_characters},
      {"nesting_limit", test_nesting_limit},
      {"too_many_errors_stops", test_too_many_errors_stops},
      {"empty_source", test_empty_source},
      {"tok_names", test_tok_names},
      {NULL, NULL},
  };
  int rc = ft_run("lexer", tests, argc, argv);
  ft_reset();
  buf_free(&ft_diags);
  src_reset();
  arena_free_all();
  return rc;
}
