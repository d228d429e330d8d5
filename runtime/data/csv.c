/*
 * csv.c — RFC 4180 CSV into typed columns, and back.
 *
 * The reader takes quoted fields ("a,b"), doubled quotes inside them
 * ("say ""hi"""), line breaks inside them, CRLF or LF line ends, a UTF-8
 * byte-order mark and a header row; blank lines are skipped.  Each column
 * is i64, f64, f32, bool or str, given by the caller or inferred.
 *
 * Key design choice: one pass over a mapped file with the number parsed
 * straight from the bytes.  A numeric field that is not quoted is never
 * copied or tokenized first: the number parser runs at the field's start
 * and the byte after the number must end the field, else the field takes
 * the general path (quotes, blanks, a bad value).  Values go into one
 * growing C array per column, sized from the first row's length, so a
 * numeric file costs no allocation per field; the arrays become the sflow
 * arrays without a copy.
 *
 * Inference: an inferred column starts as i64; a value that is not an
 * integer (or an empty field) turns it into f64 in place (the integers
 * read so far convert exactly below 2^53); a value that is no number turns
 * it into str, which restarts the parse (the earlier values' text is
 * gone), at most once per column.  A column whose first value is True,
 * False, true, false, TRUE or FALSE (pandas' words) is bool, and turns str
 * on any other value, an empty field included, as pandas makes it object.  A column the caller typed never
 * changes: a value that does not fit is an error naming the file, line,
 * column and the column's name.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>

#include "data.h"

typedef struct parser {
  const char *buf, *p, *end;
  const char *name;
  char sep;
  bool header;            /* the first record named the columns */
  const char *stop;       /* no record starts at or after it (a chunk's end) */
  int64_t line;           /* line number of p */
  const char *line_start; /* first byte of that line */
  sf__buf scratch;        /* a quoted field's content */
  sf__csv *out;
  char **names; /* the first record's fields, while it is read */
  int64_t nnames;
  char *err;
  size_t errlen;
  jmp_buf jb; /* 1: bad input (err set); 2: a column became str, restart */
} parser;

/* --------------------------------------------------------- kinds */

int32_t sf__col_kind_of(const char *s, size_t n) {
  static const char *names[] = {"auto", "i64", "f64", "f32", "str", "bool"};
  for (int32_t k = 0; k < 6; k++)
    if (strlen(names[k]) == n && memcmp(names[k], s, n) == 0)
      return k;
  return -1;
}

const char *sf__col_kind_name(int32_t kind) {
  static const char *names[] = {"auto", "i64", "f64", "f32", "str", "bool"};
  return kind >= 0 && kind <= SF__COL_BOOL ? names[kind] : "?";
}

/* --------------------------------------------------------- errors */

__attribute__((format(printf, 3, 4))) _Noreturn static void fail_at(parser *ps, const char *at,
                                                                    const char *fmt, ...) {
  int64_t line = ps->line, col = (int64_t)(at - ps->line_start) + 1;
  int n = snprintf(ps->err, ps->errlen, "%s:%" PRId64 ":%" PRId64 ": ", ps->name, line, col);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < ps->errlen)
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  longjmp(ps->jb, 1);
}

static void quoted(const char *s, size_t n, char *q, size_t qn) { sf__quote(s, n, 40, q, qn); }

/* --------------------------------------------------------- columns */

static size_t kind_size(int32_t k) { return k == SF__COL_F32 ? 4 : k == SF__COL_BOOL ? 1 : 8; }

static void col_grow(sf__csv_col *c) {
  int64_t cap = c->cap ? c->cap * 2 : 1024;
  c->data = sf__realloc(c->data, (size_t)cap * kind_size(c->kind));
  c->cap = cap;
}

static inline void push_i64(sf__csv_col *c, int64_t v) {
  if (c->len == c->cap)
    col_grow(c);
  ((int64_t *)c->data)[c->len++] = v;
}
static inline void push_f64(sf__csv_col *c, double v) {
  if (c->len == c->cap)
    col_grow(c);
  ((double *)c->data)[c->len++] = v;
}
static inline void push_f32(sf__csv_col *c, float v) {
  if (c->len == c->cap)
    col_grow(c);
  ((float *)c->data)[c->len++] = v;
}
static inline void push_bool(sf__csv_col *c, bool v) {
  if (c->len == c->cap)
    col_grow(c);
  ((bool *)c->data)[c->len++] = v;
}
static inline void push_str(sf__csv_col *c, sf_str *v) {
  if (c->len == c->cap)
    col_grow(c);
  ((sf_str **)c->data)[c->len++] = v;
}

static void col_clear(sf__csv_col *c) {
  if (c->kind == SF__COL_STR)
    for (int64_t i = 0; i < c->len; i++)
      sf_release(((sf_str **)c->data)[i]);
  sf_free(c->data);
  c->data = NULL;
  c->len = c->cap = 0;
}

void sf__csv_free(sf__csv *c) {
  for (int64_t i = 0; i < c->ncols; i++) {
    col_clear(&c->cols[i]);
    sf_free(c->cols[i].name);
  }
  sf_free(c->cols);
  c->cols = NULL;
  c->ncols = c->nrows = 0;
}

/* An inferred i64 column turns f64, in place (both are 8 bytes). */
static void widen_to_f64(sf__csv_col *c) {
  int64_t *iv = c->data;
  double *dv = c->data;
  for (int64_t i = 0; i < c->len; i++)
    dv[i] = (double)iv[i];
  c->kind = SF__COL_F64;
}

/* --------------------------------------------------------- scanning */

static inline void newline(parser *ps, const char *after) {
  ps->line++;
  ps->line_start = after;
}

/* Whether e ends a field: the separator, a line end or the end of input.
 * A lone CR is data; CR LF (or a CR at the very end) ends a line. */
static inline bool is_term(const parser *ps, const char *e) {
  if (e >= ps->end)
    return true;
  char c = *e;
  return c == ps->sep || c == '\n' || (c == '\r' && (e + 1 == ps->end || e[1] == '\n'));
}

/* The text of the field at ps->p, which moves to the byte after it (the
 * separator or line end).  Quoted content is unescaped into scratch;
 * unquoted text points into the input. */
static void token(parser *ps, const char **s, size_t *n) {
  const char *p = ps->p, *end = ps->end;
  if (p < end && *p == '"') {
    int64_t open_line = ps->line, open_col = (int64_t)(p - ps->line_start) + 1;
    ps->scratch.len = 0;
    p++;
    for (;;) {
      const char *q = memchr(p, '"', (size_t)(end - p));
      const char *stop = q ? q : end;
      for (const char *nl = p; (nl = memchr(nl, '\n', (size_t)(stop - nl))); nl++)
        newline(ps, nl + 1);
      if (!q)
        fail_at(ps, end, "a quoted field is not closed (it opens at line %" PRId64
                ", column %" PRId64 ")", open_line, open_col);
      sf__buf_put(&ps->scratch, p, (size_t)(q - p));
      if (q + 1 < end && q[1] == '"') {
        sf__buf_put(&ps->scratch, "\"", 1);
        p = q + 2;
        continue;
      }
      p = q + 1;
      break;
    }
    if (!is_term(ps, p))
      fail_at(ps, p, "unexpected '%c' after a closing quote (a quote inside a quoted field "
              "is written twice: \"\")", *p);
    *s = ps->scratch.data ? ps->scratch.data : "";
    *n = ps->scratch.len;
  } else {
    const char *q = p;
    char sep = ps->sep;
    while (q < end && *q != sep && *q != '\n' && !(*q == '\r' && (q + 1 == end || q[1] == '\n')))
      q++;
    *s = p;
    *n = (size_t)(q - p);
    p = q;
  }
  ps->p = p;
}

static void trim(const char **s, size_t *n) {
  while (*n && (**s == ' ' || **s == '\t')) {
    (*s)++;
    (*n)--;
  }
  while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
    (*n)--;
}

static sf_str *text_value(parser *ps, const char *at, const char *s, size_t n,
                          const char *colname) {
  size_t ok = sf__utf8_valid_prefix(s, n);
  if (ok < n)
    fail_at(ps, at, "column \"%s\": invalid UTF-8 (byte 0x%02x at offset %zu of the field)",
            colname, (unsigned char)s[ok], ok);
  if (memchr(s, 0, n))
    fail_at(ps, at, "column \"%s\": a NUL byte in a field (is this a CSV file?)", colname);
  return sf_str_new(s, (int64_t)n);
}

/* 1 or 0 for pandas' words for true and false, -1 for anything else. */
static int bool_word(const char *s, size_t n) {
  static const char *words[] = {"True", "TRUE", "true", "False", "FALSE", "false"};
  for (int i = 0; i < 6; i++)
    if (strlen(words[i]) == n && memcmp(words[i], s, n) == 0)
      return i < 3;
  return -1;
}

/* An inferred column read the integer "-0" (as f64, -0.0; as i64 before
 * it widened, 0.0): which of the two it holds depends on the order the
 * values came in, so the chunked reader leaves such a column to one pass. */
static void note_neg_zero(sf__csv_col *c, const char *s, const char *e) {
  if (!c->inferred || s == e || *s != '-')
    return;
  for (s++; s < e; s++)
    if (*s < '0' || *s > '9')
      return;
  c->neg_zero = true;
}

/* The general path of a field: any quoting, blanks around numbers, empty
 * fields, and the errors and widening of inferred columns. */
static void field_slow(parser *ps, sf__csv_col *c) {
  const char *at = ps->p, *s;
  size_t n;
  token(ps, &s, &n);
  if (c->kind == SF__COL_STR) {
    push_str(c, text_value(ps, at, s, n, c->name));
    return;
  }
  trim(&s, &n);
  const char *e = s + n;
  char q[128];
  int b = bool_word(s, n);
  if (c->kind == SF__COL_I64 && c->inferred && c->len == 0 && b >= 0) {
    c->kind = SF__COL_BOOL; /* the first value: the column is bool */
  }
  if (c->kind == SF__COL_BOOL) {
    if (b >= 0) {
      push_bool(c, b);
      return;
    }
  } else if (c->kind == SF__COL_I64) {
    int64_t v;
    bool ovf = false;
    if (n && sf__parse_int64(s, e, &v, &ovf) == e) {
      if (v == 0)
        note_neg_zero(c, s, e);
      push_i64(c, v);
      return;
    }
    double d = NAN;
    if (c->inferred && (n == 0 || sf__parse_double(s, e, &d) == e)) {
      widen_to_f64(c);
      push_f64(c, d);
      return;
    }
    if (!c->inferred) {
      quoted(s, n, q, sizeof q);
      if (n == 0)
        fail_at(ps, at, "column \"%s\": an empty field in an i64 column", c->name);
      fail_at(ps, at, "column \"%s\": cannot read %s as i64%s", c->name, q,
              ovf ? ": out of range" : "");
    }
  } else if (c->kind == SF__COL_F64) {
    double d = NAN;
    if (n == 0 || sf__parse_double(s, e, &d) == e) {
      if (d == 0 && signbit(d))
        note_neg_zero(c, s, e);
      push_f64(c, d);
      return;
    }
  } else {
    float f = NAN;
    if (n == 0 || sf__parse_float(s, e, &f) == e) {
      push_f32(c, f);
      return;
    }
  }
  if (c->inferred) {
    col_clear(c); /* under its old kind: the values are numbers or bools */
    c->kind = SF__COL_STR;
    longjmp(ps->jb, 2);
  }
  quoted(s, n, q, sizeof q);
  fail_at(ps, at, "column \"%s\": cannot read %s as %s", c->name, q,
          sf__col_kind_name(c->kind));
}

/* One field into its column: numbers straight from the bytes when the
 * field is plain, else field_slow. */
static inline void field(parser *ps, sf__csv_col *c) {
  const char *p = ps->p, *e = NULL;
  if (p < ps->end && *p != '"' && *p != ' ' && *p != '\t') {
    switch (c->kind) {
    case SF__COL_F64: {
      double d;
      e = sf__parse_double(p, ps->end, &d);
      if (e && is_term(ps, e)) {
        if (d == 0 && signbit(d))
          note_neg_zero(c, p, e);
        push_f64(c, d);
        ps->p = e;
        return;
      }
      break;
    }
    case SF__COL_I64: {
      int64_t v;
      bool ovf;
      e = sf__parse_int64(p, ps->end, &v, &ovf);
      if (e && is_term(ps, e)) {
        if (v == 0)
          note_neg_zero(c, p, e);
        push_i64(c, v);
        ps->p = e;
        return;
      }
      break;
    }
    case SF__COL_F32: {
      float f;
      e = sf__parse_float(p, ps->end, &f);
      if (e && is_term(ps, e)) {
        push_f32(c, f);
        ps->p = e;
        return;
      }
      break;
    }
    default:
      break;
    }
  }
  field_slow(ps, c);
}

/* After the last field of a record: a line end or the end of input. */
static void end_record(parser *ps, int64_t ncols) {
  const char *p = ps->p;
  if (p >= ps->end)
    return;
  if (*p == '\n') {
    ps->p = p + 1;
    newline(ps, p + 1);
  } else if (*p == '\r') {
    ps->p = p + (p + 1 < ps->end ? 2 : 1);
    newline(ps, ps->p);
  } else {
    fail_at(ps, p, "this row has more than the %" PRId64 " field%s of the %s", ncols,
            ncols == 1 ? "" : "s", ps->header ? "header" : "first row");
  }
}

/* Skips blank lines; false at the end of input. */
static bool skip_blank(parser *ps) {
  for (;;) {
    const char *p = ps->p;
    if (p >= ps->end)
      return false;
    if (*p == '\n') {
      ps->p = p + 1;
      newline(ps, ps->p);
    } else if (*p == '\r' && (p + 1 == ps->end || p[1] == '\n')) {
      ps->p = p + (p + 1 < ps->end ? 2 : 1);
      newline(ps, ps->p);
    } else {
      return true;
    }
  }
}

static char *copy_name(const char *s, size_t n) {
  char *c = sf_alloc(n + 1);
  memcpy(c, s, n);
  c[n] = 0;
  return c;
}

/* The first record's fields as column names (a header) or only counted;
 * the names collect in ps->names so a failure can free them. */
static void first_record(parser *ps, bool names) {
  int64_t cap = 0;
  for (;;) {
    const char *at = ps->p, *s;
    size_t len;
    token(ps, &s, &len);
    char nm[32];
    if (!names) {
      snprintf(nm, sizeof nm, "c%" PRId64, ps->nnames);
      s = nm;
      len = strlen(nm);
    } else {
      size_t ok = sf__utf8_valid_prefix(s, len);
      if (ok < len || memchr(s, 0, len))
        fail_at(ps, at, "the header's field %" PRId64 " is not valid UTF-8 text (is this a "
                "CSV file?)", ps->nnames + 1);
      for (int64_t k = 0; k < ps->nnames; k++)
        if (strlen(ps->names[k]) == len && memcmp(ps->names[k], s, len) == 0)
          fail_at(ps, at, "the header names column \"%s\" twice (columns %" PRId64
                  " and %" PRId64 ")", ps->names[k], k + 1, ps->nnames + 1);
    }
    if (ps->nnames == cap) {
      cap = cap ? cap * 2 : 16;
      ps->names = sf__realloc(ps->names, (size_t)cap * sizeof *ps->names);
    }
    ps->names[ps->nnames++] = copy_name(s, len);
    if (ps->p < ps->end && *ps->p == ps->sep) {
      ps->p++;
      continue;
    }
    break;
  }
}

static void free_names(parser *ps) {
  for (int64_t i = 0; i < ps->nnames; i++)
    sf_free(ps->names[i]);
  sf_free(ps->names);
  ps->names = NULL;
  ps->nnames = 0;
}

/* The header (or the first row's width): 0, or 1 on bad input. */
static int read_header(parser *ps, bool header) {
  if (setjmp(ps->jb))
    return 1;
  if (!skip_blank(ps))
    return 0; /* no records: no columns */
  const char *first = ps->p, *first_ls = ps->line_start;
  int64_t first_line = ps->line;
  first_record(ps, header);
  if (header) {
    end_record(ps, ps->nnames);
  } else {
    ps->p = first; /* the first record is data */
    ps->line = first_line;
    ps->line_start = first_ls;
  }
  return 0;
}

/* Every record from ps->p: 0, 1 on bad input, 2 when an inferred column
 * became str (the caller starts over). */
static int read_rows(parser *ps, sf__csv *out) {
  int r = setjmp(ps->jb);
  if (r)
    return r;
  int64_t ncols = out->ncols;
  sf__csv_col *cols = out->cols;
  while (skip_blank(ps) && ps->p < ps->stop) {
    for (int64_t i = 0; i < ncols; i++) {
      field(ps, &cols[i]);
      if (i + 1 < ncols) {
        if (ps->p < ps->end && *ps->p == ps->sep)
          ps->p++;
        else
          fail_at(ps, ps->p, "this row has %" PRId64 " field%s, the %s has %" PRId64, i + 1,
                  i ? "s" : "", ps->header ? "header" : "first row", ncols);
      }
    }
    end_record(ps, ncols);
    out->nrows++;
  }
  return 0;
}

/* Room in every column for the rows the first one's length predicts,
 * plus a tenth. */
static void presize(sf__csv *out, const char *start, const char *end) {
  const char *nl = memchr(start, '\n', (size_t)(end - start));
  size_t row_len = nl ? (size_t)(nl - start) + 1 : (size_t)(end - start) + 1;
  int64_t guess = (int64_t)((size_t)(end - start) / row_len);
  guess += guess / 10 + 16;
  if (guess > (1 << 26))
    guess = 1 << 26;
  for (int64_t i = 0; i < out->ncols; i++) {
    sf__csv_col *c = &out->cols[i];
    c->data = sf__alloc_n((size_t)guess, kind_size(c->kind));
    c->cap = guess;
  }
}

/* ------------------------------------------------- reading in chunks */

/* A large body is read in chunks over the pool: it is cut after a line
 * end near each n-th of it, each chunk parsed alone from its cut (its own
 * parser and columns, stopping at the first record that starts at or
 * after the next cut), and the chunks are then checked in order.  A cut
 * holds when the chunk before it, parsed from a cut that holds, ended its
 * last record exactly there; a cut inside a quoted field (which may hold
 * line ends) fails that check, and its chunk is parsed again, on the
 * caller, from where the chunk before really ended.  What chunks cannot
 * settle alone goes to one pass over the whole body, so the table and any
 * message are the one-thread reader's: an error in a chunk (the one pass
 * finds the first, with its line), and inferred kinds that differ between
 * chunks beyond i64 against f64 (a bool column's first value, a column
 * that turned str in one chunk only) or that hold an integer "-0". */
enum { CSV_PAR_BYTES = 1 << 20, CSV_CHUNK_MIN = 256 << 10, CSV_CHUNKS_MAX = 64 };

typedef struct csv_chunk {
  const char *from, *stop; /* its cut, and the next one */
  const char *first;       /* its first record (blank lines skipped) */
  const char *last;        /* where it ended: the first record at or past stop */
  sf__csv t;               /* its values; the names are the reader's */
  int r;                   /* read_rows' answer: 0, or 1 on bad input */
} csv_chunk;

typedef struct csv_par {
  const parser *proto; /* the reader's settings */
  const sf__csv *out;  /* the columns as the header left them */
  csv_chunk *ch;
} csv_par;

static void chunk_free(csv_chunk *c) {
  for (int64_t i = 0; i < c->t.ncols; i++)
    col_clear(&c->t.cols[i]);
  sf_free(c->t.cols);
  c->t = (sf__csv){0};
}

static void chunk_parse(const csv_par *cp, csv_chunk *c, const char *from) {
  const sf__csv *k = cp->out;
  char err[256]; /* a chunk's message is never shown: the one pass gives it */
  parser ps = {.buf = cp->proto->buf, .p = from, .end = cp->proto->end, .stop = c->stop,
               .name = cp->proto->name, .sep = cp->proto->sep, .header = cp->proto->header,
               .line = 1, .line_start = from, .err = err, .errlen = sizeof err};
  sf__buf_init(&ps.scratch, NULL, 0);
  c->t.ncols = k->ncols;
  c->t.nrows = 0;
  c->t.cols = sf__alloc_n((size_t)(k->ncols ? k->ncols : 1), sizeof *c->t.cols);
  for (int64_t i = 0; i < k->ncols; i++)
    c->t.cols[i] = (sf__csv_col){.name = k->cols[i].name, .kind = k->cols[i].kind,
                                 .inferred = k->cols[i].inferred};
  ps.out = &c->t;
  skip_blank(&ps);
  const char *first = ps.p, *first_ls = ps.line_start;
  int64_t first_line = ps.line;
  c->first = first;
  const char *stop = c->stop > first ? c->stop : first;
  presize(&c->t, first, stop);
  int r;
  while ((r = read_rows(&ps, &c->t)) == 2) {
    for (int64_t i = 0; i < c->t.ncols; i++)
      col_clear(&c->t.cols[i]);
    c->t.nrows = 0;
    ps.p = first;
    ps.line = first_line;
    ps.line_start = first_ls;
    presize(&c->t, first, stop);
  }
  c->r = r;
  c->last = ps.p;
  sf__buf_free(&ps.scratch);
}

static void chunks_parse(void *ctx, int64_t lo, int64_t hi) {
  csv_par *cp = ctx;
  for (int64_t k = lo; k < hi; k++)
    chunk_parse(cp, &cp->ch[k], cp->ch[k].from);
}

/* Each chunk's values into their place in the table's columns (the
 * column data and row offsets set by parse_chunks). */
typedef struct csv_join {
  csv_chunk *ch;
  sf__csv *out;
  int64_t *row0;
} csv_join;

static void chunks_join(void *ctx, int64_t lo, int64_t hi) {
  csv_join *j = ctx;
  for (int64_t k = lo; k < hi; k++) {
    csv_chunk *c = &j->ch[k];
    for (int64_t i = 0; i < j->out->ncols; i++) {
      sf__csv_col *to = &j->out->cols[i], *from = &c->t.cols[i];
      if (from->kind == SF__COL_I64 && to->kind == SF__COL_F64)
        widen_to_f64(from);
      size_t size = kind_size(to->kind);
      memcpy((char *)to->data + (size_t)j->row0[k] * size, from->data, (size_t)from->len * size);
      from->len = 0; /* a str column's values moved: not released here */
    }
    chunk_free(c);
  }
}

/* The kind of column i over all chunks, or -1 when they leave it to one
 * pass (above). */
static int32_t joined_kind(const csv_chunk *ch, int64_t n, int64_t i, int32_t kind) {
  bool any = false, neg_zero = false;
  for (int64_t k = 0; k < n; k++) {
    const sf__csv_col *c = &ch[k].t.cols[i];
    neg_zero |= c->neg_zero;
    if (!ch[k].t.nrows)
      continue; /* no values: its kind says nothing */
    if (!any || c->kind == kind)
      kind = c->kind;
    else if ((kind == SF__COL_I64 || kind == SF__COL_F64) &&
             (c->kind == SF__COL_I64 || c->kind == SF__COL_F64))
      kind = SF__COL_F64;
    else
      return -1;
    any = true;
  }
  return neg_zero && kind == SF__COL_F64 ? -1 : kind;
}

/* Reads the body [start, end) in chunks into out: true, or false when it
 * is small, the pool has one thread, or the chunks leave it to one pass
 * (out is then as it was). */
static bool parse_chunks(parser *ps, sf__csv *out, const char *start) {
  size_t body = (size_t)(ps->end - start);
  int64_t n = (int64_t)sf__par_threads() * 4;
  if (n > CSV_CHUNKS_MAX)
    n = CSV_CHUNKS_MAX;
  if ((int64_t)(body / CSV_CHUNK_MIN) < n)
    n = (int64_t)(body / CSV_CHUNK_MIN);
  if (sf__par_threads() < 2 || body < CSV_PAR_BYTES || n < 2 || !out->ncols)
    return false;
  csv_chunk *ch = sf__alloc_n((size_t)n, sizeof *ch);
  memset(ch, 0, (size_t)n * sizeof *ch);
  ch[0].from = start;
  for (int64_t k = 1; k < n; k++) {
    const char *at = start + body / (size_t)n * (size_t)k;
    if (at < ch[k - 1].from)
      at = ch[k - 1].from;
    const char *nl = memchr(at, '\n', (size_t)(ps->end - at));
    ch[k].from = nl ? nl + 1 : ps->end;
  }
  for (int64_t k = 0; k < n; k++)
    ch[k].stop = k + 1 < n ? ch[k + 1].from : ps->end;
  csv_par cp = {.proto = ps, .out = out, .ch = ch};
  sf__par_for(n, 1, chunks_parse, &cp);
  bool ok = true;
  for (int64_t k = 0; k < n && ok; k++) {
    if (k && ch[k].first != ch[k - 1].last) { /* the cut fell inside a record */
      chunk_free(&ch[k]);
      chunk_parse(&cp, &ch[k], ch[k - 1].last);
    }
    ok = ch[k].r == 0;
  }
  int32_t *kinds = sf__alloc_n((size_t)out->ncols, sizeof *kinds);
  for (int64_t i = 0; i < out->ncols && ok; i++)
    ok = (kinds[i] = joined_kind(ch, n, i, out->cols[i].kind)) >= 0;
  if (!ok) {
    for (int64_t k = 0; k < n; k++)
      chunk_free(&ch[k]);
    sf_free(ch);
    sf_free(kinds);
    return false;
  }
  int64_t *row0 = sf__alloc_n((size_t)n, sizeof *row0), rows = 0;
  for (int64_t k = 0; k < n; k++) {
    row0[k] = rows;
    rows += ch[k].t.nrows;
  }
  for (int64_t i = 0; i < out->ncols; i++) {
    sf__csv_col *c = &out->cols[i];
    c->kind = kinds[i];
    c->data = sf__alloc_n((size_t)(rows ? rows : 1), kind_size(c->kind));
    c->len = c->cap = rows;
  }
  out->nrows = rows;
  csv_join j = {.ch = ch, .out = out, .row0 = row0};
  sf__par_for(n, 1, chunks_join, &j);
  sf_free(row0);
  sf_free(kinds);
  sf_free(ch);
  return true;
}

bool sf__csv_parse(const char *buf, size_t len, const char *name, const sf__csv_opts *o,
                   sf__csv *out, char *err, size_t errlen) {
  parser ps = {.buf = buf, .p = buf, .end = buf + len, .stop = buf + len, .name = name, .sep = o->sep,
               .header = o->header, .line = 1, .line_start = buf, .out = out, .err = err,
               .errlen = errlen};
  *out = (sf__csv){0};
  if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
    ps.p = ps.line_start = buf + 3;
  sf__buf_init(&ps.scratch, NULL, 0);
  if (read_header(&ps, o->header)) {
    free_names(&ps);
    sf__buf_free(&ps.scratch);
    return false;
  }
  if (o->ntypes && ps.nnames && o->ntypes != ps.nnames) {
    snprintf(err, errlen, "%s: %" PRId64 " column types given, but the file has %" PRId64
             " columns", name, o->ntypes, ps.nnames);
    free_names(&ps);
    sf__buf_free(&ps.scratch);
    return false;
  }
  out->ncols = ps.nnames;
  out->cols = sf__alloc_n((size_t)(ps.nnames ? ps.nnames : 1), sizeof *out->cols);
  for (int64_t i = 0; i < ps.nnames; i++) {
    int32_t k = o->ntypes ? o->types[i] : SF__COL_AUTO;
    out->cols[i] = (sf__csv_col){.name = ps.names[i], .inferred = k == SF__COL_AUTO,
                                 .kind = k == SF__COL_AUTO ? SF__COL_I64 : k};
  }
  sf_free(ps.names);
  ps.names = NULL;
  const char *start = ps.p, *start_ls = ps.line_start;
  int64_t start_line = ps.line;
  ps.stop = ps.end;
  if (parse_chunks(&ps, out, start)) {
    sf__buf_free(&ps.scratch);
    return true;
  }
  presize(out, start, ps.end);
  int r;
  while ((r = read_rows(&ps, out)) == 2) {
    /* Kinds stay as they became (an f64 stays f64); values start over. */
    for (int64_t i = 0; i < out->ncols; i++)
      col_clear(&out->cols[i]);
    out->nrows = 0;
    ps.p = start;
    ps.line = start_line;
    ps.line_start = start_ls;
    presize(out, start, ps.end);
  }
  sf__buf_free(&ps.scratch);
  if (r) {
    sf__csv_free(out);
    return false;
  }
  return true;
}

/* ------------------------------------------------------- sflow side */

/* An sflow array that takes over a C block of len elements (sf_alloc'ed),
 * shrunk to size: the column becomes the array without a copy. */
static sf_array *adopt(const sf_type *elem, void *data, int64_t len, int64_t cap,
                       const sf_loc *loc) {
  sf_array *a = sf_array_new(elem, 0, loc);
  sf_free(a->data);
  size_t size = (size_t)elem->size;
  if (cap > len + len / 4 + 16)
    data = sf__realloc(data, (size_t)(len ? len : 1) * size);
  a->data = data ? data : sf_alloc(1);
  a->len = len;
  return a;
}

static char sep_of(sf_str *sep, const sf_loc *loc) {
  if (sf__str_len(sep) != 1 || sf__str_data(sep)[0] == '"' || sf__str_data(sep)[0] == '\n' ||
      sf__str_data(sep)[0] == '\r')
    sf_runtime_error(loc, "csv: the separator must be one byte other than a quote or a line "
                     "end, got \"%s\"", sf__str_data(sep));
  return sf__str_data(sep)[0];
}

/* The column kinds the caller asked for (str[]), or a runtime error. */
static int32_t *kinds_of(sf_array *types, const sf_loc *loc) {
  int64_t n = types ? types->len : 0;
  if (!n)
    return NULL;
  int32_t *k = sf__alloc_n((size_t)n, sizeof *k);
  for (int64_t i = 0; i < n; i++) {
    sf_str *t = ((sf_str **)types->data)[i];
    k[i] = sf__col_kind_of(sf__str_data(t), (size_t)sf__str_len(t));
    if (k[i] < 0) {
      char q[80];
      sf__quote(sf__str_data(t), (size_t)sf__str_len(t), 40, q, sizeof q);
      sf_free(k);
      sf_runtime_error(loc, "csv: column type %" PRId64 " is %s; the types are \"auto\", "
                       "\"i64\", \"f64\", \"f32\", \"bool\" and \"str\"", i + 1, q);
    }
  }
  return k;
}

/* The parsed columns into a Table at out (see data.h); c is emptied. */
static void to_table(sf__csv *c, void *out, const sf_type *tt, const sf_loc *loc) {
  *(int64_t *)sf__field(tt, out, "rows", SF_I64, loc) = c->nrows;
  sf_array **colsp = sf__field(tt, out, "columns", SF_ARRAY, loc);
  const sf_type *ct = NULL;
  for (int32_t i = 0; i < tt->nfields; i++)
    if (!strcmp(tt->fields[i].name, "columns"))
      ct = tt->fields[i].type->elem;
  sf_array *cols = sf_array_new(ct, c->ncols, loc);
  *colsp = cols;
  for (int64_t i = 0; i < c->ncols; i++) {
    sf__csv_col *col = &c->cols[i];
    void *e = sf__array_at(cols, i);
    *(sf_str **)sf__field(ct, e, "name", SF_STR, loc) = sf_str_new(col->name, (int64_t)strlen(col->name));
    const char *kn = sf__col_kind_name(col->kind);
    *(sf_str **)sf__field(ct, e, "kind", SF_STR, loc) = sf_str_new(kn, (int64_t)strlen(kn));
    static const struct { const char *field; int32_t kind; } slots[] = {
        {"floats", SF__COL_F64}, {"floats32", SF__COL_F32}, {"ints", SF__COL_I64},
        {"texts", SF__COL_STR}, {"bools", SF__COL_BOOL}};
    for (int s = 0; s < 5; s++) {
      sf_array **slot = sf__field(ct, e, slots[s].field, SF_ARRAY, loc);
      const sf_type *et = NULL;
      for (int32_t f = 0; f < ct->nfields; f++)
        if (!strcmp(ct->fields[f].name, slots[s].field))
          et = ct->fields[f].type->elem;
      if (slots[s].kind == col->kind) {
        *slot = adopt(et, col->data, col->len, col->cap, loc);
        col->data = NULL;
        col->len = col->cap = 0;
      } else {
        *slot = sf_array_new(et, 0, loc);
      }
    }
  }
  sf__csv_free(c);
}

static void parse_into(void *out, const sf_type *tt, const char *buf, size_t len,
                       const char *name, sf_str *sep, bool header, sf_array *types,
                       sf__view *view, const sf_loc *loc) {
  sf__csv_opts o = {.sep = sep_of(sep, loc), .header = header};
  int32_t *kinds = kinds_of(types, loc);
  o.types = kinds;
  o.ntypes = types ? types->len : 0;
  sf__csv c;
  char err[SF__ERROR_MAX - 128];
  bool ok = sf__csv_parse(buf, len, name, &o, &c, err, sizeof err);
  sf_free(kinds);
  if (!ok) {
    if (view)
      sf__view_close(view);
    sf_runtime_error(loc, "%s", err);
  }
  if (view)
    sf__view_close(view);
  to_table(&c, out, tt, loc);
}

void sf_std_data_read_csv(void *out, const sf_type *out_type, sf_str *path, sf_str *sep,
                          bool header, const sf_loc *loc) {
  sf_std_data_read_csv_as(out, out_type, path, NULL, sep, header, loc);
}

void sf_std_data_read_csv_as(void *out, const sf_type *out_type, sf_str *path, sf_array *types,
                             sf_str *sep, bool header, const sf_loc *loc) {
  sf__view v;
  sf__view_open_or_fail(&v, path, loc);
  /* The name in messages must outlive the view's close. */
  parse_into(out, out_type, v.data, v.len, sf__str_data(path), sep, header, types, &v, loc);
}

void sf_std_data_parse_csv(void *out, const sf_type *out_type, sf_str *text, sf_str *name,
                           sf_str *sep, bool header, const sf_loc *loc) {
  parse_into(out, out_type, sf__str_data(text), (size_t)sf__str_len(text), sf__str_data(name),
             sep, header, NULL, NULL, loc);
}

/* ---------------------------------------------------------- writer */

static void put_text(sf__buf *b, const char *s, size_t n, char sep, bool lone) {
  bool need = (n == 0 && lone);
  for (size_t i = 0; i < n && !need; i++)
    need = s[i] == sep || s[i] == '"' || s[i] == '\n' || s[i] == '\r';
  if (!need) {
    sf__buf_put(b, s, n);
    return;
  }
  sf__buf_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '"')
      sf__buf_put(b, "\"", 1);
    sf__buf_put(b, s + i, 1);
  }
  sf__buf_put(b, "\"", 1);
}

sf_str *sf_std_data_format_csv(const void *table, const sf_type *tt, sf_str *sep,
                               const sf_loc *loc) {
  char sp = sep_of(sep, loc);
  void *t = (void *)table;
  int64_t rows = *(int64_t *)sf__field(tt, t, "rows", SF_I64, loc);
  sf_array *cols = *(sf_array **)sf__field(tt, t, "columns", SF_ARRAY, loc);
  int64_t nc = cols ? cols->len : 0;
  const sf_type *ct = nc ? cols->elem : NULL;
  /* Each column's values and kind, checked before anything is written. */
  sf_array **vals = sf__alloc_n((size_t)(nc ? nc : 1), sizeof *vals);
  int32_t *kind = sf__alloc_n((size_t)(nc ? nc : 1), sizeof *kind);
  static const char *slot_of[] = {NULL, "ints", "floats", "floats32", "texts", "bools"};
  for (int64_t i = 0; i < nc; i++) {
    void *c = sf__array_at(cols, i);
    sf_str *kn = *(sf_str **)sf__field(ct, c, "kind", SF_STR, loc);
    sf_str *nm = *(sf_str **)sf__field(ct, c, "name", SF_STR, loc);
    kind[i] = sf__col_kind_of(sf__str_data(kn), (size_t)sf__str_len(kn));
    if (kind[i] <= SF__COL_AUTO) {
      sf_free(vals);
      sf_free(kind);
      sf_runtime_error(loc, "csv: column \"%s\" has kind \"%s\"; a table's columns are i64, "
                       "f64, f32, bool or str", sf__str_data(nm), sf__str_data(kn));
    }
    vals[i] = *(sf_array **)sf__field(ct, c, slot_of[kind[i]], SF_ARRAY, loc);
    int64_t n = vals[i] ? vals[i]->len : 0;
    if (n != rows) {
      sf_free(vals);
      sf_free(kind);
      sf_runtime_error(loc, "csv: column \"%s\" has %" PRId64 " values, the table has %" PRId64
                       " rows", sf__str_data(nm), n, rows);
    }
    sf_array_host(vals[i]);
  }
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  for (int64_t i = 0; i < nc; i++) {
    sf_str *nm = *(sf_str **)sf__field(ct, sf__array_at(cols, i), "name", SF_STR, loc);
    if (i)
      sf__buf_put(&b, &sp, 1);
    put_text(&b, sf__str_data(nm), (size_t)sf__str_len(nm), sp, nc == 1);
  }
  if (nc)
    sf__buf_put(&b, "\n", 1);
  char num[SF__FLOAT_BUF + 8];
  for (int64_t r = 0; r < rows && nc; r++) {
    for (int64_t i = 0; i < nc; i++) {
      if (i)
        sf__buf_put(&b, &sp, 1);
      int n = 0;
      switch (kind[i]) {
      case SF__COL_I64:
        n = snprintf(num, sizeof num, "%" PRId64, ((int64_t *)vals[i]->data)[r]);
        break;
      case SF__COL_F64:
        n = sf__fmt_f64_repr(((double *)vals[i]->data)[r], num);
        break;
      case SF__COL_F32:
        n = sf__fmt_f32_repr(((float *)vals[i]->data)[r], num);
        break;
      case SF__COL_BOOL: /* pandas' words, which read back as bool there and here */
        n = ((bool *)vals[i]->data)[r] ? 4 : 5;
        memcpy(num, n == 4 ? "True" : "False", (size_t)n);
        break;
      default: {
        sf_str *s = ((sf_str **)vals[i]->data)[r];
        put_text(&b, sf__str_data(s), (size_t)sf__str_len(s), sp, nc == 1);
        continue;
      }
      }
      sf__buf_put(&b, num, (size_t)n);
    }
    sf__buf_put(&b, "\n", 1);
  }
  sf_free(vals);
  sf_free(kind);
  sf_str *s = sf_str_new(b.data ? b.data : "", (int64_t)b.len);
  sf__buf_free(&b);
  return s;
}

void sf_std_data_write_csv(sf_str *path, const void *table, const sf_type *table_type,
                           sf_str *sep, const sf_loc *loc) {
  sf_str *s = sf_std_data_format_csv(table, table_type, sep, loc);
  sf__write_or_fail(path, sf__str_data(s), (size_t)sf__str_len(s), sf_release, s, loc);
}

