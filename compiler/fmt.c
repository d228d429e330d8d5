/*
 * fmt.c — `sflowc fmt`: the canonical layout of sflow source, also the
 * language server's formatting.
 *
 * A pretty-printer over the token stream, not the AST: the lexer gives
 * every token with its place, and the text between two tokens holds the
 * comments and line breaks, so nothing the author wrote is lost.  Line
 * breaks stay where they are (sflow ends a statement at a newline, so they
 * carry meaning), runs of blank lines become one, and leading and trailing
 * blank lines go.  What is decided here:
 *
 *   - indentation: two spaces per open `{`; inside `(`, `[` and a struct
 *     literal's `{`, a line lines up with the first token after the opener
 *     when one follows it on its line, else it is indented two spaces (one
 *     level per line however many brackets the line opens); a line that
 *     starts with a closer goes back to its opener's statement; a line that
 *     starts with `.` is a continuation, two spaces deeper; one that
 *     follows a line ending in a binary operator is at least two spaces
 *     deeper than its statement and otherwise keeps the author's indent
 *     (the tree both indents such lines and aligns them under the
 *     expression after `=`);
 *   - spaces: one around binary operators and `=`, `->`; none inside
 *     `( )` and `[ ]`, before `,` `:` `)` `]` `.`, after `.` and unary
 *     `-` `!`, between a name and its call's `(` or index `[`, inside
 *     `map<K, V>` and `f<T>(`; one after `,` and `:`, inside `{ }` written
 *     on one line, after keywords; `@` of an annotation sticks to its name;
 *   - comments keep their text; a comment after code keeps its gap (tables
 *     of trailing comments stay aligned), and the comment lines written
 *     under it stay under it; any other comment on its own line is indented
 *     as code there would be (inside the block even before its `}`).
 *
 * Where sflow's lexer reads spaces (`f<T>(` is a type argument only
 * written without a space before `<`), the layout keeps the author's
 * choice.  Only whitespace changes, so the program means the same; the
 * tests check that on every .sflow file of the tree (fmt twice = fmt once,
 * the same LLVM IR before and after).
 */
#include "lsp.h"
#include "parser.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
  int kind;     /* '(' '[' '{', or TOK_LBRACE_STRUCT */
  int base;     /* indent (columns) of the statement it was opened in */
  int align;    /* column of the first token after it on its line, or -1 */
  bool annot;   /* the parentheses of an annotation's arguments */
} Open;

typedef struct {
  const char *src;
  Buf out;
  bool line_start; /* nothing written on the current line yet */
  int blank;       /* newlines seen since the last token or comment */
  Open stack[SFLOW_MAX_NESTING + 1];
  int depth;
  int angles;      /* generic type arguments open: map<, future<, f<T> */
  int line_indent; /* indent (columns) of the statement the line is in */
  bool fresh;      /* the top of the stack was opened by the last token */
  bool annot_paren;/* the next '(' holds an annotation's arguments */
  int trail_src;   /* source column of the comment ending the last line ... */
  int trail_out;   /* ... and its column in the output; -1: none */
  bool cont;       /* the line before ended in a binary operator */
} Fmt;

static bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool is_keyword(const Token *t) {
  return t->kind != TOK_IDENT && t->kind != TOK_MAP && t->kind != TOK_INT && t->kind != TOK_FLOAT &&
         t->kind != TOK_STRING && t->text && word_char(t->text[0]);
}

/* Tokens after which `-` is binary and `(` / `[` is a call or an index. */
static bool ends_operand(const Token *t, bool generic_close) {
  switch (t->kind) {
  case TOK_IDENT: case TOK_MAP: case TOK_INT: case TOK_FLOAT: case TOK_STRING: case TOK_TRUE:
  case TOK_FALSE: case ')': case ']': case '}':
    return true;
  default:
    return generic_close;
  }
}

static bool is_binary_op(int k) {
  switch (k) {
  case '+': case '-': case '*': case '/': case '%': case '<': case '>': case '=': case '&': case '|':
  case '^': case TOK_OROR: case TOK_ANDAND: case TOK_EQ: case TOK_NE: case TOK_LE: case TOK_GE:
  case TOK_SHL: case TOK_SHR: case TOK_ADD_ASSIGN: case TOK_SUB_ASSIGN: case TOK_MUL_ASSIGN:
  case TOK_DIV_ASSIGN: case TOK_ARROW:
    return true;
  default:
    return false;
  }
}

static void trim_line(Fmt *f) {
  while (f->out.len && (f->out.data[f->out.len - 1] == ' ' || f->out.data[f->out.len - 1] == '\t'))
    f->out.len--;
}

static void newline(Fmt *f) {
  trim_line(f);
  buf_putc(&f->out, '\n');
  f->line_start = true;
}

static void indent(Fmt *f, int cols) {
  for (int i = 0; i < cols; i++)
    buf_putc(&f->out, ' ');
  f->line_start = false;
}

static int column(Fmt *f) {
  size_t i = f->out.len;
  while (i > 0 && f->out.data[i - 1] != '\n')
    i--;
  return (int)(f->out.len - i);
}

static bool paren_like(int k) { return k == '(' || k == '[' || k == TOK_LBRACE_STRUCT; }

/* The indent (columns) of a line whose first token is t. */
static int indent_for(Fmt *f, const Token *t) {
  if (t->kind == ')' || t->kind == ']' || t->kind == '}') {
    for (int d = f->depth - 1; d >= 0; d--) {
      int k = f->stack[d].kind;
      if ((t->kind == ')' && k == '(') || (t->kind == ']' && k == '[') ||
          (t->kind == '}' && (k == '{' || k == TOK_LBRACE_STRUCT)))
        return f->stack[d].base;
    }
  }
  bool in_parens = f->depth && paren_like(f->stack[f->depth - 1].kind);
  if (f->cont && !in_parens) {
    /* After a binary operator the tree uses both a plain continuation
     * indent and alignment under the expression: the author's indent
     * stands when it is at least the statement's plus two. */
    int least = (f->depth ? f->stack[f->depth - 1].base + 2 : 0) + 2;
    int had = 0;
    for (int i = t->loc.off; i > 0 && f->src[i - 1] != '\n'; i--)
      had = f->src[i - 1] == ' ' ? had + 1 : f->src[i - 1] == '\t' ? had + 2 : 0;
    return had >= least ? had : least;
  }
  if (!f->depth)
    return t->kind == '.' || f->cont ? 2 : 0;
  Open *top = &f->stack[f->depth - 1];
  int c = top->align >= 0 ? top->align : top->base + 2;
  if (t->kind == '.' || (f->cont && !paren_like(top->kind)))
    c += 2;
  return c;
}

/* The indent of the statement a line starting at indent c belongs to:
 * inside brackets opened on an earlier line, that line's statement. */
static int statement_indent(Fmt *f, int c) {
  int k = f->depth - 1;
  /* A struct literal's brace that ends its line nests like a block. */
  while (k >= 0 && paren_like(f->stack[k].kind) &&
         !(f->stack[k].kind == TOK_LBRACE_STRUCT && f->stack[k].align < 0))
    k--;
  return k + 1 < f->depth ? f->stack[k + 1].base : c;
}

/* Writes the line breaks and comments between two tokens: text[a, b). */
static void gap(Fmt *f, int a, int b, int next_level) {
  const char *s = f->src;
  int nl = 0;
  for (int i = a; i < b;) {
    char c = s[i];
    if (c == '\n') {
      nl++;
      i++;
    } else if (c == '/' && i + 1 < b && (s[i + 1] == '/' || s[i + 1] == '*')) {
      int e = i + 2;
      if (s[i + 1] == '/')
        while (e < b && s[e] != '\n')
          e++;
      else {
        while (e + 1 < b && !(s[e] == '*' && s[e + 1] == '/'))
          e++;
        e = e + 2 <= b ? e + 2 : b;
      }
      if (nl > 0 && f->out.len) {
        newline(f);
        if (nl > 1)
          newline(f);
      }
      int src_col = i;
      while (src_col > 0 && s[src_col - 1] != '\n')
        src_col--;
      src_col = i - src_col;
      if (f->line_start || !f->out.len) {
        /* The next line of a trailing comment, written under it, stays
         * under it; other comment lines are indented as code. */
        bool under = f->trail_out >= 0 && nl == 1 && src_col == f->trail_src;
        indent(f, under ? f->trail_out : next_level);
        if (!under)
          f->trail_out = -1;
      } else {
        /* After code: the author's gap (at least one space). */
        int g = i;
        while (g > a && (s[g - 1] == ' ' || s[g - 1] == '\t'))
          g--;
        trim_line(f);
        for (int k = 0; k < (i > g ? i - g : 1); k++)
          buf_putc(&f->out, ' ');
        f->trail_src = src_col;
        f->trail_out = column(f);
      }
      buf_putn(&f->out, s + i, (size_t)(e - i));
      f->line_start = false;
      nl = 0;
      i = e;
    } else {
      i++;
    }
  }
  if (nl > 0 && f->out.len) {
    newline(f);
    if (nl > 1)
      newline(f);
  }
}

/* Space between tokens p and t on one line: 1, 0, or -1 for "as written". */
static int spacing(Fmt *f, const Token *p, const Token *t, bool p_generic_close, bool p_unary,
                   bool t_generic_open, bool p_annot_at, bool t_annot_at) {
  int pk = p->kind, tk = t->kind;
  if (p_annot_at)
    return 0;
  if (t_annot_at)
    return 1;
  if (tk == ',' || tk == ';' || tk == ')' || tk == ']')
    return 0;
  if (pk == '(' || pk == '[')
    return 0;
  if (pk == '.' || tk == '.')
    return 0;
  if (pk == TOK_DOTDOT || tk == TOK_DOTDOT)
    return -1;
  if (tk == ':') {
    bool in_index = f->depth && f->stack[f->depth - 1].kind == '[';
    return in_index ? -1 : 0;
  }
  if (pk == ':' || pk == ',')
    return f->depth && f->stack[f->depth - 1].kind == '[' && pk == ':' ? -1 : 1;
  if (t_generic_open || tk == TOK_TARGS)
    return 0;
  if (pk == TOK_TARGS || (pk == '<' && f->angles > 0))
    return 0;
  if ((tk == '>' || tk == TOK_SHR) && f->angles > 0)
    return 0;
  if (pk == '{' && tk == '}')
    return -1;
  if (tk == '{' || tk == TOK_LBRACE_STRUCT || pk == '{' || pk == TOK_LBRACE_STRUCT || tk == '}')
    return 1;
  if (p_unary)
    return 0;
  if (tk == '(' || tk == '[') {
    if (ends_operand(p, p_generic_close))
      return 0;
    if (pk == TOK_FN)
      return -1; /* fn(Point) -> f64, a type */
    return 1;
  }
  if (is_binary_op(tk) || is_binary_op(pk))
    return 1;
  if (tk == '-' || tk == '!')
    return 1;
  if (is_keyword(p) || is_keyword(t))
    return 1;
  if (ends_operand(p, p_generic_close) && (word_char(t->text ? t->text[0] : 0) || tk == TOK_STRING))
    return 1;
  return -1;
}

/* Would writing a and b with nothing between make one token of them? */
static bool would_merge(const char *src, const Token *a, const Token *b) {
  char x = src[a->loc.off + a->loc.len - 1], y = src[b->loc.off];
  if (word_char(x) && word_char(y))
    return true;
  static const char ops[] = "+-*/%<>=!&|^.:";
  return strchr(ops, x) && strchr(ops, y);
}

static void format_tokens(Fmt *f, Token *toks, int n, size_t len) {
  const Token *p = NULL;
  bool p_generic_close = false, p_unary = false, p_annot_at = false;
  bool after_annot = false; /* the last thing written was an annotation */
  int prev_end = 0;
  for (int i = 0; i < n; i++) {
    Token *t = &toks[i];
    if (t->kind == TOK_NEWLINE || t->kind == 0)
      continue;
    t->text = arena_strndup(f->src + t->loc.off, (size_t)t->loc.len);
    /* A comment on its own line is indented as code there, even when a
     * closer follows it (the last comment of a block stays inside). */
    Token plain = {.kind = TOK_IDENT, .loc = t->loc};
    gap(f, prev_end, t->loc.off, indent_for(f, &plain));
    bool generic_open = t->kind == '<' && p && (p->kind == TOK_MAP || (p->kind == TOK_IDENT &&
                        p->loc.off + p->loc.len == t->loc.off));
    bool annot_at = t->kind == '@' && i + 1 < n && toks[i + 1].kind == TOK_IDENT &&
                    toks[i + 1].loc.off == t->loc.off + 1 && (f->line_start || after_annot || !p);
    if (f->line_start || !f->out.len) {
      if (p && !f->line_start)
        newline(f);
      int c = indent_for(f, t);
      f->line_indent = statement_indent(f, c);
      indent(f, c);
    } else {
      int sp = spacing(f, p, t, p_generic_close, p_unary, generic_open, p_annot_at, annot_at);
      bool had = t->loc.off > prev_end;
      if (sp < 0)
        sp = had;
      if (!sp && had && would_merge(f->src, p, t))
        sp = 1;
      if (t->kind == '@' && !annot_at && !p_unary)
        sp = 1; /* a @ b */
      if (p && p->kind == '@' && !p_annot_at)
        sp = 1;
      if (sp)
        buf_putc(&f->out, ' ');
      if (f->fresh && f->depth)
        f->stack[f->depth - 1].align = column(f);
    }
    f->fresh = false;
    buf_puts(&f->out, t->text);
    f->line_start = false;
    f->trail_out = -1;
    /* What t leaves open or closes. */
    bool generic_close = false;
    if (generic_open || t->kind == TOK_TARGS)
      f->angles++;
    else if (f->angles > 0 && (t->kind == '>' || t->kind == TOK_SHR)) {
      f->angles -= t->kind == '>' ? 1 : 2;
      if (f->angles < 0)
        f->angles = 0;
      generic_close = true;
    } else if (t->kind == ';' || t->kind == '{' || t->kind == '}' || t->kind == '=')
      f->angles = 0;
    bool closes_annot = false;
    if (t->kind == '(' || t->kind == '[' || t->kind == '{' || t->kind == TOK_LBRACE_STRUCT) {
      if (f->depth < SFLOW_MAX_NESTING)
        f->stack[f->depth++] = (Open){t->kind, f->line_indent, -1, t->kind == '(' && f->annot_paren};
      f->fresh = t->kind != '{';
    } else if (t->kind == ')' || t->kind == ']' || t->kind == '}') {
      for (int d = f->depth - 1; d >= 0; d--)
        if ((t->kind == ')' && f->stack[d].kind == '(') || (t->kind == ']' && f->stack[d].kind == '[') ||
            (t->kind == '}' && (f->stack[d].kind == '{' || f->stack[d].kind == TOK_LBRACE_STRUCT))) {
          closes_annot = f->stack[d].annot;
          f->depth = d;
          break;
        }
    }
    bool unary = (t->kind == '-' || t->kind == '!') && !(p && ends_operand(p, p_generic_close));
    /* An annotation ends at its name, or at the ')' of its arguments. */
    if (annot_at) {
      after_annot = false;
    } else if (p_annot_at) {
      f->annot_paren = i + 1 < n && toks[i + 1].kind == '(' && toks[i + 1].loc.off == t->loc.off + t->loc.len;
      after_annot = !f->annot_paren;
    } else {
      if (t->kind == '(')
        f->annot_paren = false;
      after_annot = closes_annot;
    }
    f->cont = is_binary_op(t->kind) && !generic_close && !(f->angles > 0);
    p = t;
    p_generic_close = generic_close;
    p_unary = unary;
    p_annot_at = annot_at;
    prev_end = t->loc.off + t->loc.len;
  }
  gap(f, prev_end, (int)len, 0);
  trim_line(f);
  /* Exactly one newline at the end, none at the start. */
  while (f->out.len && f->out.data[f->out.len - 1] == '\n')
    f->out.len--;
  if (f->out.len)
    buf_putc(&f->out, '\n');
}

static char fmt_why[512];

static void first_error(void *ctx, DiagLevel lvl, Loc loc, const char *msg) {
  (void)ctx;
  if (lvl == DIAG_ERROR && !fmt_why[0])
    snprintf(fmt_why, sizeof fmt_why, "%d:%d: %s", loc.line, loc.col, msg);
}

char *fmt_text(const char *path, const char *text, size_t len, const char **why) {
  if (why) {
    fmt_why[0] = 0;
    diag_set_sink(first_error, NULL);
  }
  int errors = diag_error_count();
  int file = src_add(arena_strdup(path), text, len, "");
  int n;
  Token *toks = lex_source(file, &n);
  bool bad = diag_error_count() > errors || lex_fatal;
  if (why) {
    diag_set_sink(NULL, NULL);
    *why = fmt_why;
  }
  if (bad)
    return NULL;
  Fmt f = {.src = src_get(file)->text, .line_start = true, .trail_out = -1};
  format_tokens(&f, toks, n, len);
  buf_putc(&f.out, 0);
  return f.out.data ? f.out.data : strdup("");
}

/* sflowc fmt [--check] FILE...: rewrites each file in its canonical layout
 * (a file already in it is not touched); with --check, lists the files
 * that are not and exits 1 if there are any.  `-` reads standard input and
 * writes the result to standard output. */
int fmt_main(int argc, char **argv) {
  bool check = false;
  int nfiles = 0, rc = 0;
  diag_init(DIAG_HUMAN, -1);
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--check")) {
      check = true;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: sflowc fmt [--check] FILE...\n"
             "  rewrites each FILE in sflow's canonical layout ('-': stdin to stdout)\n"
             "  --check  only list the files that are not formatted; exit 1 if any\n");
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "sflowc fmt: error: unknown option '%s'\nusage: sflowc fmt [--check] FILE...\n", argv[i]);
      return 2;
    }
  }
  for (int i = 0; i < argc; i++) {
    const char *path = argv[i];
    if (!strcmp(path, "--check"))
      continue;
    nfiles++;
    size_t len;
    char why[128];
    char *text;
    if (!strcmp(path, "-")) {
      Buf b = {0};
      char chunk[65536];
      size_t got;
      while ((got = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        buf_putn(&b, chunk, got);
      buf_putc(&b, 0);
      len = b.len - 1;
      text = b.data;
      path = "<stdin>";
    } else {
      text = read_file(path, &len, why, sizeof why);
    }
    if (!text) {
      fprintf(stderr, "sflowc fmt: error: cannot read '%s': %s\n", path, why);
      rc = 1;
      continue;
    }
    char *out = fmt_text(path, text, len, NULL);
    if (!out) {
      fprintf(stderr, "sflowc fmt: error: '%s' was not formatted: it has lexical errors (above)\n", path);
      rc = 1;
    } else if (!strcmp(argv[i], "-")) {
      fputs(out, stdout);
    } else if (strlen(out) != len || memcmp(out, text, len)) {
      if (check) {
        printf("%s\n", path);
        rc = rc ? rc : 1;
      } else {
        /* Write beside it and rename, so a failure leaves the file whole. */
        char *tmp = arena_printf("%s.fmt-tmp", path);
        FILE *fp = fopen(tmp, "w");
        bool ok = fp && fwrite(out, 1, strlen(out), fp) == strlen(out);
        ok = fp && !fclose(fp) && ok;
        struct stat st; /* the file keeps its permissions */
        if (ok && !stat(path, &st))
          ok = !chmod(tmp, st.st_mode & 07777);
        if (!ok || rename(tmp, path)) {
          fprintf(stderr, "sflowc fmt: error: cannot write '%s'\n", path);
          remove(tmp);
          rc = 1;
        }
      }
    }
    free(out);
    free(text);
  }
  if (!nfiles) {
    fprintf(stderr, "sflowc fmt: error: no input files\nusage: sflowc fmt [--check] FILE...\n");
    return 2;
  }
  return rc;
}
