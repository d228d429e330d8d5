/*
 * lexer.c — source text to the token array the parser reads.
 *
 * Runs the flex scanner (grammar/sflow.l) over a whole source, decodes
 * literals, and applies the two rules that make newlines end statements
 * (Go's rule, adapted):
 *   - inside ( ) and [ ] and struct-literal braces, newlines are ignored;
 *   - elsewhere a newline becomes a terminator when the line ends with a
 *     token that can end a statement (a name, a literal, `)`, `]`, `}`,
 *     return/break/continue), unless the next line starts with `else`,
 *     `{` or `.`, which continue the construct;
 *   - at statement level, a name right after a `)` on the same line starts
 *     a new statement, so lists of calls read as the design sketch writes
 *     them (`s.strip() s.lower()`): no expression puts a name after `)`.
 * It also pairs brackets so that the parser can point at the opener of an
 * unclosed construct, recognises struct-literal braces (`Name {` followed
 * by `field:`), and stops at SFLOW_MAX_NESTING levels of brackets so no
 * later pass can recurse without bound.
 */
#include "sflowc.h"
#include "parser.h"
#include "lexer_raw.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef void *yyscan_t;
int sflow_raw_lex_init_extra(struct RawExtra *extra, yyscan_t *scanner);
int sflow_raw_lex_destroy(yyscan_t scanner);
int sflow_raw_lex(yyscan_t scanner);
char *sflow_raw_get_text(yyscan_t scanner);
int sflow_raw_get_leng(yyscan_t scanner);
void *sflow_raw__scan_bytes(const char *bytes, int len, yyscan_t scanner);

const char *const sflow_keywords[] = {
    "fn",    "task",  "actor",    "kernel", "workflow", "struct", "const",
    "let",   "var",   "if",       "else",   "while",    "for",    "in",
    "return", "break", "continue", "await", "spawn",    "launch", "import",
    "true",  "false",
};
const int sflow_nkeywords = sizeof sflow_keywords / sizeof *sflow_keywords;

static const int keyword_tokens[] = {
    TOK_FN,     TOK_TASK,  TOK_ACTOR,    TOK_KERNEL, TOK_WORKFLOW, TOK_STRUCT, TOK_CONST,
    TOK_LET,    TOK_VAR,   TOK_IF,       TOK_ELSE,   TOK_WHILE,    TOK_FOR,    TOK_IN,
    TOK_RETURN, TOK_BREAK, TOK_CONTINUE, TOK_AWAIT,  TOK_SPAWN,    TOK_LAUNCH, TOK_IMPORT,
    TOK_TRUE,   TOK_FALSE,
};

const char *const sflow_type_names[] = {"bool", "i32", "i64", "f32", "f64", "str", "future", "group",
                                        "map", "tensor"};
const int sflow_ntype_names = sizeof sflow_type_names / sizeof *sflow_type_names;

const char *const sflow_builtin_names[] = {
    "print",     "len",        "sqrt",          "exp",            "log",       "tanh",
    "abs",       "min",        "max",           "pow",            "floor",     "now",
    "rand_seed", "rand_f32",   "fmt",           "fail",           "attempt",   "node_id",
    "hostname",  "thread_id",  "group_rank",    "group_size",     "allreduce_sum",
    "allreduce_mean", "broadcast", "allgather", "barrier",        "zeros_f32", "zeros_f64",
    "zeros_i32", "zeros_i64",  "matmul",
    /* the data core */
    "sin",       "cos",        "tan",           "atan2",          "ceil",      "round",
    "rand_int",  "randn_f32",  "sort",          "argsort",        "join",      "PI",
    "ord",       "chr",
    /* std.tune */
    "failure",
};
const int sflow_nbuiltin_names = sizeof sflow_builtin_names / sizeof *sflow_builtin_names;

const char *tok_spelling(int kind) {
  switch (kind) {
  case 0: return "EOF";
  case TOK_IDENT: return "IDENT";
  case TOK_INT: return "INT";
  case TOK_FLOAT: return "FLOAT";
  case TOK_STRING: return "STRING";
  case TOK_NEWLINE: return "NEWLINE";
  case TOK_LBRACE_STRUCT: return "'{'";
  case TOK_OROR: return "'||'";
  case TOK_ANDAND: return "'&&'";
  case TOK_EQ: return "'=='";
  case TOK_NE: return "'!='";
  case TOK_LE: return "'<='";
  case TOK_GE: return "'>='";
  case TOK_SHL: return "'<<'";
  case TOK_SHR: return "'>>'";
  case TOK_ADD_ASSIGN: return "'+='";
  case TOK_SUB_ASSIGN: return "'-='";
  case TOK_MUL_ASSIGN: return "'*='";
  case TOK_DIV_ASSIGN: return "'/='";
  case TOK_ARROW: return "'->'";
  case TOK_DOTDOT: return "'..'";
  case TOK_MAP: return "'map'";
  case TOK_TARGS: return "'<'";
  }
  for (int i = 0; i < sflow_nkeywords; i++)
    if (keyword_tokens[i] == kind)
      return arena_printf("'%s'", sflow_keywords[i]);
  if (kind > 0 && kind < 128)
    return arena_printf("'%c'", kind);
  return "?";
}

const char *tok_name(int kind) {
  switch (kind) {
  case 0: return "end of file";
  case TOK_IDENT: return "identifier";
  case TOK_INT: return "integer literal";
  case TOK_FLOAT: return "float literal";
  case TOK_STRING: return "string literal";
  case TOK_NEWLINE: return "newline";
  }
  return tok_spelling(kind);
}

/* ------------------------------------------------------------ decoding */

typedef struct {
  int file;
  Source *src;
  Token *toks;
  int n, cap;
  int line, col; /* position of the next raw token */
  long off;
} Lexer;

static Loc here(Lexer *L, long off, int len) {
  return (Loc){L->file, L->line, L->col, (int)off, len};
}

/* Advances line/col over text. */
static void advance(Lexer *L, const char *text, int len) {
  for (int i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\n') {
      L->line++;
      L->col = 1;
    } else if ((c & 0xC0) != 0x80) {
      L->col++;
    }
  }
  L->off += len;
}

static void push(Lexer *L, Token t) {
  if (L->n == L->cap) {
    L->cap = L->cap ? L->cap * 2 : 1024;
    Token *nt = realloc(L->toks, sizeof(Token) * (size_t)L->cap);
    if (!nt)
      ice("out of memory (token array)");
    L->toks = nt;
  }
  L->toks[L->n++] = t;
}

static bool decode_int(const char *text, int len, bool hex, Loc loc, int64_t *out) {
  uint64_t v = 0;
  bool overflow = false, digits = false;
  int i = hex ? 2 : 0;
  for (; i < len; i++) {
    char c = text[i];
    if (c == '_') {
      if (!digits || i + 1 == len || text[i + 1] == '_') {
        diag_error(loc, "misplaced '_' in integer literal");
        return false;
      }
      continue;
    }
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
    uint64_t base = hex ? 16 : 10;
    if (v > (UINT64_MAX - (uint64_t)d) / base)
      overflow = true;
    v = v * base + (uint64_t)d;
    digits = true;
  }
  if (!digits) {
    diag_error(loc, "hexadecimal literal has no digits");
    return false;
  }
  if (overflow || v > (uint64_t)INT64_MAX + 1) {
    diag_error(loc, "integer literal is too large for i64");
    return false;
  }
  *out = (int64_t)v; /* 2^63 wraps to INT64_MIN; sema allows it only negated */
  return true;
}

static bool decode_float(const char *text, int len, Loc loc, double *out) {
  char buf[512];
  int j = 0;
  for (int i = 0; i < len; i++) {
    if (text[i] == '_') {
      bool ok = i > 0 && i + 1 < len && text[i - 1] >= '0' && text[i - 1] <= '9' &&
                text[i + 1] >= '0' && text[i + 1] <= '9';
      if (!ok) {
        diag_error(loc, "misplaced '_' in float literal");
        return false;
      }
      continue;
    }
    if (j >= (int)sizeof buf - 1) {
      diag_error(loc, "float literal is too long");
      return false;
    }
    buf[j++] = text[i];
  }
  buf[j] = 0;
  errno = 0;
  double v = strtod(buf, NULL);
  if (errno == ERANGE && isinf(v)) {
    diag_error(loc, "float literal is too large for f64");
    return false;
  }
  *out = v;
  return true;
}

/* Length of a valid UTF-8 sequence at p (at most n bytes), or 0. */
static int utf8_len(const unsigned char *p, size_t n) {
  if (p[0] < 0x80)
    return 1;
  int len = (p[0] & 0xE0) == 0xC0 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3 : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
  if (!len || (size_t)len > n)
    return 0;
  for (int i = 1; i < len; i++)
    if ((p[i] & 0xC0) != 0x80)
      return 0;
  uint32_t cp = len == 2 ? (p[0] & 0x1Fu) : len == 3 ? (p[0] & 0x0Fu) : (p[0] & 0x07u);
  for (int i = 1; i < len; i++)
    cp = (cp << 6) | (p[i] & 0x3Fu);
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

static void put_utf8(Buf *b, uint32_t cp) {
  if (cp < 0x80) {
    buf_putc(b, (char)cp);
  } else if (cp < 0x800) {
    buf_putc(b, (char)(0xC0 | (cp >> 6)));
    buf_putc(b, (char)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    buf_putc(b, (char)(0xE0 | (cp >> 12)));
    buf_putc(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
    buf_putc(b, (char)(0x80 | (cp & 0x3F)));
  } else {
    buf_putc(b, (char)(0xF0 | (cp >> 18)));
    buf_putc(b, (char)(0x80 | ((cp >> 12) & 0x3F)));
    buf_putc(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
    buf_putc(b, (char)(0x80 | (cp & 0x3F)));
  }
}

/* Decodes \u{XXXX} starting at text[i] == 'u'; returns chars consumed. */
static int decode_unicode(Lexer *L, const char *text, int len, int i, Loc loc, Buf *out) {
  int j = i + 1;
  Loc eloc = loc;
  eloc.col += i - 1;
  eloc.off += i - 1;
  eloc.len = 2;
  if (j >= len || text[j] != '{') {
    diag_error(eloc, "invalid unicode escape: expected '\\u{XXXX}'");
    return 1;
  }
  uint32_t cp = 0;
  int digits = 0;
  for (j++; j < len && text[j] != '}' && text[j] != '"'; j++) {
    char c = text[j];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0 || digits >= 6) {
      diag_error(eloc, "invalid unicode escape: expected 1 to 6 hex digits in '\\u{...}'");
      return j - i;
    }
    cp = cp * 16 + (uint32_t)d;
    digits++;
  }
  eloc.len = j - i + 2;
  if (j >= len || text[j] != '}' || digits == 0) {
    diag_error(eloc, "invalid unicode escape: expected '\\u{XXXX}'");
    return j - i;
  }
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    diag_error(eloc, "invalid unicode escape: U+%X is not a Unicode scalar value", cp);
    return j - i + 1;
  }
  (void)L;
  put_utf8(out, cp);
  return j - i + 1;
}

static void decode_string(Lexer *L, const char *text, int len, Loc loc, Token *t) {
  Buf out = {0};
  buf_putn(&out, "", 0);
  for (int i = 1; i < len - 1;) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\\') {
      char e = text[i + 1];
      Loc eloc = loc;
      eloc.col += i; /* columns are bytes here: close enough inside ASCII escapes */
      eloc.off += i;
      eloc.len = 2;
      i += 2;
      switch (e) {
      case 'n': buf_putc(&out, '\n'); break;
      case 't': buf_putc(&out, '\t'); break;
      case 'r': buf_putc(&out, '\r'); break;
      case '0': buf_putc(&out, '\0'); break;
      case '\\': buf_putc(&out, '\\'); break;
      case '"': buf_putc(&out, '"'); break;
      case 'u': i += decode_unicode(L, text, len, i - 1, loc, &out) - 1; break;
      default:
        if ((unsigned char)e >= 0x20 && (unsigned char)e < 0x7f)
          diag_error(eloc, "unknown escape sequence '\\%c'", e);
        else
          diag_error(eloc, "unknown escape sequence");
      }
      continue;
    }
    int n = utf8_len((const unsigned char *)text + i, (size_t)(len - 1 - i));
    if (!n) {
      Loc bl = loc;
      bl.off += i;
      bl.col += i;
      bl.len = 1;
      diag_error(bl, "invalid UTF-8 in string literal");
      i++;
      continue;
    }
    if (c < 0x20 && c != '\t') {
      Loc bl = loc;
      bl.off += i;
      bl.col += i;
      bl.len = 1;
      diag_error(bl, "control character in string literal (use an escape such as '\\n')");
    }
    buf_putn(&out, text + i, (size_t)n);
    i += n;
  }
  t->sval = arena_strndup(out.data, out.len);
  t->slen = out.len;
  buf_free(&out);
}

static int keyword_kind(const char *text, int len) {
  for (int i = 0; i < sflow_nkeywords; i++)
    if ((int)strlen(sflow_keywords[i]) == len && memcmp(sflow_keywords[i], text, (size_t)len) == 0)
      return keyword_tokens[i];
  return TOK_IDENT;
}

/* Scans the whole source into L->toks, raw newlines included. */
static void scan_all(Lexer *L) {
  struct RawExtra extra = {0};
  yyscan_t sc;
  if (sflow_raw_lex_init_extra(&extra, &sc))
    ice("cannot initialise the scanner");
  if (L->src->len > 0x7fffffff) {
    diag_error((Loc){L->file, 1, 1, 0, 1}, "source file is larger than 2 GiB");
    sflow_raw_lex_destroy(sc);
    return;
  }
  sflow_raw__scan_bytes(L->src->text, (int)L->src->len, sc);
  long bad_char_end = 0; /* end of a multi-byte character already reported */
  Loc comment_at = here(L, 0, 2);
  for (;;) {
    extra.pos = L->off;
    int k = sflow_raw_lex(sc);
    const char *text = sflow_raw_get_text(sc);
    int len = sflow_raw_get_leng(sc);
    Loc loc = here(L, L->off, len);
    if (k == 0)
      break;
    Token t = {.kind = k, .loc = loc};
    switch (k) {
    case RAW_COMMENT_NL:
      t.kind = TOK_NEWLINE;
      push(L, t);
      break;
    case RAW_SKIP:
      if (len == 2 && text[0] == '/' && text[1] == '*')
        comment_at = loc; /* only a block comment opener is lexed as those 2 bytes */
      break;
    case RAW_UNTERMINATED_COMMENT:
      diag_error(comment_at, "unterminated block comment");
      break;
    /* A bad literal still becomes a token (an empty string, the number 0)
     * so that the parser does not add "expected expression" to the error. */
    case RAW_UNTERMINATED_STRING:
      loc.len = 1;
      diag_error(loc, "unterminated string literal");
      push(L, (Token){.kind = TOK_STRING, .loc = t.loc, .text = "\"...\"", .sval = ""});
      break;
    case RAW_BAD_NUMBER:
      diag_error(loc, "invalid suffix on number literal");
      t.kind = TOK_INT;
      t.text = arena_strndup(text, (size_t)(len < 64 ? len : 64));
      push(L, t);
      break;
    case RAW_BAD_BYTE: {
      unsigned char c = (unsigned char)text[0];
      int n = c >= 0x80 ? utf8_len((const unsigned char *)L->src->text + L->off, L->src->len - (size_t)L->off) : 1;
      loc.len = 1;
      if (L->off < bad_char_end)
        break; /* a later byte of a character reported as a whole */
      if (c == 0)
        diag_error(loc, "unexpected NUL byte in source");
      else if (n > 1) {
        bad_char_end = L->off + n;
        diag_error(loc, "unexpected character '%.*s' (non-ASCII characters are allowed only in strings and comments)",
                   n, L->src->text + L->off);
      } else if (c >= 0x80)
        diag_error(loc, "unexpected byte 0x%02X (non-ASCII characters are allowed only in strings and comments)", c);
      else if (c < 0x20 || c == 0x7f)
        diag_error(loc, "unexpected control character 0x%02X", c);
      else
        diag_error(loc, "unexpected character '%c'", c);
      break;
    }
    case RAW_HEX:
    case TOK_INT:
      t.kind = TOK_INT;
      t.text = arena_strndup(text, (size_t)(len < 64 ? len : 64));
      if (!decode_int(text, len, k == RAW_HEX, loc, &t.ival))
        t.ival = 0;
      push(L, t);
      break;
    case TOK_FLOAT:
      t.text = arena_strndup(text, (size_t)(len < 64 ? len : 64));
      if (!decode_float(text, len, loc, &t.fval))
        t.fval = 0;
      push(L, t);
      break;
    case TOK_STRING:
      t.text = "\"...\"";
      decode_string(L, text, len, loc, &t);
      push(L, t);
      break;
    case TOK_IDENT:
      t.kind = keyword_kind(text, len);
      t.text = arena_strndup(text, (size_t)len);
      push(L, t);
      break;
    default:
      t.text = arena_strndup(text, (size_t)len);
      push(L, t);
    }
    advance(L, text, len);
    if (diag_too_many())
      break;
  }
  sflow_raw_lex_destroy(sc);
}

/* ----------------------------------------------------------- filtering */

static bool ends_statement(int k) {
  switch (k) {
  case TOK_IDENT: case TOK_INT: case TOK_FLOAT: case TOK_STRING: case TOK_TRUE: case TOK_FALSE:
  case TOK_RETURN: case TOK_BREAK: case TOK_CONTINUE: case ')': case ']': case '}':
    return true;
  }
  return false;
}

static bool continues_line(int k) { return k == TOK_ELSE || k == '{' || k == '.'; }

static int closer_of(int k) { return k == '(' ? ')' : k == '[' ? ']' : '}'; }

/* Is toks[i] ('{') the start of a struct literal?  `Name {` or
 * `mod.Name {` followed by `field:`, and not a struct/actor declaration. */
static bool struct_brace(Token *raw, int n, int i) {
  if (i == 0 || raw[i - 1].kind != TOK_IDENT)
    return false;
  if (i >= 2 && (raw[i - 2].kind == TOK_STRUCT || raw[i - 2].kind == TOK_ACTOR))
    return false;
  int j = i + 1;
  while (j < n && raw[j].kind == TOK_NEWLINE)
    j++;
  if (j + 1 >= n || raw[j].kind != TOK_IDENT)
    return false;
  int k = j + 1;
  while (k < n && raw[k].kind == TOK_NEWLINE)
    k++;
  return k < n && raw[k].kind == ':';
}

/* Is raw[i] the `map` of a map type, `map<K, ...`?  Only when `<` follows
 * it at once and a name follows that: `map` is not a keyword (std.data has
 * a function data.map), and `map < x` stays a comparison. */
static bool map_type_start(Token *raw, int n, int i) {
  Token *t = &raw[i];
  /* `fn map<T, R>(` declares std.data's generic map: a name. */
  if (i > 0 && raw[i - 1].kind == TOK_FN)
    return false;
  return t->kind == TOK_IDENT && !strcmp(t->text, "map") && i + 2 < n && raw[i + 1].kind == '<' &&
         raw[i + 1].loc.off == t->loc.off + 3 && raw[i + 2].kind == TOK_IDENT;
}

/* Does raw[i] open a generic type's argument list (`map<`, `future<`,
 * `group<`)?  Its closing `>` ends a line like a name does, so an actor
 * field `var m: map<str, i64>` ends at the newline. */
static bool generic_open(Token *raw, int i) {
  if (i == 0 || raw[i].kind != '<')
    return false;
  Token *p = &raw[i - 1];
  return p->kind == TOK_MAP ||
         (p->kind == TOK_IDENT && (!strcmp(p->text, "future") || !strcmp(p->text, "group")));
}

/* Is raw[i] ('<') the start of a call's type argument, `f<Batch>(` or
 * `data.load<map<str, i64>>(`?  Right after a name with no space, then
 * only what a type is written with, up to the matching '>' and a '('. */
static bool type_args_start(Token *raw, int n, int i) {
  if (i == 0 || raw[i].kind != '<' || raw[i - 1].kind != TOK_IDENT ||
      raw[i].loc.off != raw[i - 1].loc.off + raw[i - 1].loc.len)
    return false;
  int depth = 1;
  for (int j = i + 1; j < n; j++) {
    switch (raw[j].kind) {
    case TOK_IDENT: case TOK_MAP: case '.': case '[': case ']': case ',':
      continue;
    case '<': depth++; continue;
    case '>': depth--; break;
    case TOK_SHR: depth -= 2; break;
    default: return false;
    }
    if (depth < 0)
      return false;
    if (depth == 0)
      return j + 1 < n && raw[j + 1].kind == '(';
  }
  return false;
}

typedef struct {
  int kind; /* '(' '[' '{' or TOK_LBRACE_STRUCT */
  int index; /* in the output array */
} Open;

bool lex_fatal;

Token *lex_source(int file, int *ntok) {
  lex_fatal = false;
  Lexer L = {.file = file, .src = src_get(file), .line = 1, .col = 1};
  scan_all(&L);
  Token *raw = L.toks;
  int n = L.n;

  Token *out = arena_alloc(sizeof(Token) * (size_t)(n + 2));
  bool *closes_type = arena_alloc((size_t)n + 2); /* out[k] is a generic's last '>' */
  int angles = 0; /* generic type arguments open */
  int m = 0;
  Open stack[SFLOW_MAX_NESTING + 1];
  int depth = 0;
  for (int i = 0; i < n; i++) {
    Token t = raw[i];
    if (map_type_start(raw, n, i))
      raw[i].kind = t.kind = TOK_MAP;
    if (type_args_start(raw, n, i))
      t.kind = TOK_TARGS;
    if (generic_open(raw, i))
      angles++;
    else if (angles > 0 && (t.kind == '>' || t.kind == TOK_SHR)) {
      angles -= t.kind == '>' ? 1 : 2;
      if (angles <= 0)
        closes_type[m] = true;
      if (angles < 0)
        angles = 0;
    } else if (t.kind == ';' || t.kind == '{' || t.kind == '}' || t.kind == '=')
      angles = 0;
    if (t.kind == TOK_NEWLINE) {
      bool inside = depth > 0 && stack[depth - 1].kind != '{';
      int next = i + 1;
      while (next < n && raw[next].kind == TOK_NEWLINE)
        next++;
      bool cont = next < n && continues_line(raw[next].kind);
      if (!inside && !cont && m > 0 && (ends_statement(out[m - 1].kind) || closes_type[m - 1])) {
        t.loc.len = 1;
        out[m++] = t;
      }
      /* The rest of the run of newlines would decide the same way (nothing
       * after a terminator ends a statement), so skip it: rescanning it
       * for each of its newlines made 200k blank lines quadratic. */
      i = next - 1;
      continue;
    }
    if (t.kind == TOK_IDENT && m > 0 && out[m - 1].kind == ')' &&
        !(depth > 0 && stack[depth - 1].kind != '{'))
      out[m++] = (Token){.kind = TOK_NEWLINE, .loc = {t.loc.file, t.loc.line, t.loc.col, t.loc.off, 1}};
    if (t.kind == '{' && struct_brace(raw, n, i))
      t.kind = TOK_LBRACE_STRUCT;
    if (t.kind == '(' || t.kind == '[' || t.kind == '{' || t.kind == TOK_LBRACE_STRUCT) {
      if (depth == SFLOW_MAX_NESTING) {
        diag_error(t.loc, "brackets nested too deeply (more than %d levels)", SFLOW_MAX_NESTING);
        lex_fatal = true;
        m = 0; /* nothing is parsed: the error above says all there is */
        break;
      }
      stack[depth++] = (Open){t.kind, m};
    } else if (t.kind == ')' || t.kind == ']' || t.kind == '}') {
      /* Pop to the matching opener if there is one; a stray closer leaves
       * the stack alone and the parser reports it. */
      for (int d = depth - 1; d >= 0; d--) {
        int ok = stack[d].kind == TOK_LBRACE_STRUCT ? '}' : closer_of(stack[d].kind);
        if (ok == t.kind) {
          depth = d;
          break;
        }
      }
    }
    out[m++] = t;
  }
  /* A final terminator lets the last item end without a newline. */
  Loc end = {file, L.line, L.col, (int)L.off, 0};
  if (m > 0 && (ends_statement(out[m - 1].kind) || closes_type[m - 1]))
    out[m++] = (Token){.kind = TOK_NEWLINE, .loc = end};
  out[m] = (Token){.kind = 0, .loc = end};
  free(raw);
  *ntok = m;
  return out;
}
