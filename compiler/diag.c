/*
 * diag.c — every message the compiler shows a user.
 *
 * Human format follows clang and rustc: `file:line:col: error: message`,
 * the source line as written, and a caret (with tildes under the rest of
 * the token).  JSON format writes one object per line on stderr, shaped
 * like rustc's, and nothing else goes to stderr in that mode.  Colour is
 * used only when stderr is a terminal and NO_COLOR is unset.
 */
#include "sflowc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static DiagFormat format = DIAG_HUMAN;
static bool use_color;
static int nerrors;
static int max_errors = 50;
static bool suppressed; /* notes of a suppressed error are suppressed too */
static DiagSink sink;
static void *sink_ctx;

void diag_init(DiagFormat fmt, int color) {
  format = fmt;
  if (color < 0) {
    const char *nc = getenv("NO_COLOR");
    const char *term = getenv("TERM");
    use_color = isatty(2) && !(nc && *nc) && !(term && strcmp(term, "dumb") == 0);
  } else {
    use_color = color;
  }
  if (fmt == DIAG_JSON)
    use_color = false;
}

void diag_set_sink(DiagSink s, void *ctx) {
  sink = s;
  sink_ctx = ctx;
}

void diag_reset(void) {
  nerrors = 0;
  suppressed = false;
}

int diag_error_count(void) { return nerrors; }
bool diag_too_many(void) { return nerrors >= max_errors; }

static const char *level_name(DiagLevel l) {
  return l == DIAG_ERROR ? "error" : l == DIAG_WARNING ? "warning" : "note";
}

static const char *level_color(DiagLevel l) {
  return l == DIAG_ERROR ? "\033[1;31m" : l == DIAG_WARNING ? "\033[1;35m" : "\033[1;36m";
}

/* Length of the well-formed UTF-8 sequence of 2 to 4 bytes at p, or 0. */
static int utf8_seq(const unsigned char *p) {
  int n = (p[0] & 0xE0) == 0xC0 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3 : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80)
      return 0;
  return p[0] < 0xC2 ? 0 : n;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p >= 0x80 && utf8_seq(p)) {
      /* UTF-8 passes through: '\u00c2\u00b5' would read back as "Âµ", not "µ". */
      fwrite(p, 1, (size_t)utf8_seq(p), f);
      p += utf8_seq(p) - 1;
    } else if (*p < 0x20 || *p >= 0x7f)
      fprintf(f, "\\u%04x", *p); /* a stray byte, not a code point: still valid JSON */
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* The source line containing byte offset off, as [start, end). */
static void line_bounds(Source *s, int off, size_t *start, size_t *end) {
  size_t o = off < 0 ? 0 : (size_t)off;
  if (o > s->len)
    o = s->len;
  size_t a = o, b = o;
  while (a > 0 && s->text[a - 1] != '\n')
    a--;
  while (b < s->len && s->text[b] != '\n')
    b++;
  if (b > a && s->text[b - 1] == '\r')
    b--;
  *start = a;
  *end = b;
}

/* Prints the source line with a caret.  Very long lines are shown as a
 * window around the column; control bytes become spaces so the caret
 * stays aligned. */
static void show_line(Source *s, Loc loc) {
  size_t a, b;
  line_bounds(s, loc.off, &a, &b);
  size_t col = (size_t)loc.off - a;
  size_t from = a, to = b;
  const size_t window = 100;
  bool cut_left = false, cut_right = false;
  if (col > window) {
    from = a + col - window / 2;
    cut_left = true;
  }
  if (to - from > window * 2) {
    to = from + window * 2;
    cut_right = true;
  }
  Buf line = {0}, caret = {0};
  buf_puts(&line, cut_left ? "   ...  " : "   ");
  buf_puts(&caret, cut_left ? "        " : "   ");
  for (size_t i = from; i < to; i++) {
    unsigned char c = (unsigned char)s->text[i];
    buf_putc(&line, c == '\t' ? '\t' : (c < 0x20 || c == 0x7f) ? ' ' : (char)c);
  }
  if (cut_right)
    buf_puts(&line, " ...");
  for (size_t i = from; i < (size_t)loc.off && i < to; i++) {
    unsigned char c = (unsigned char)s->text[i];
    if (c == '\t')
      buf_putc(&caret, '\t');
    else if ((c & 0xC0) != 0x80) /* one column per UTF-8 character */
      buf_putc(&caret, ' ');
  }
  buf_puts(&caret, use_color ? "\033[1;32m^" : "^");
  int len = loc.len;
  for (int i = 1; i < len && (size_t)loc.off + (size_t)i < b && i < 80; i++)
    buf_putc(&caret, '~');
  if (use_color)
    buf_puts(&caret, "\033[0m");
  fprintf(stderr, "%s\n%s\n", line.data, caret.data);
  buf_free(&line);
  buf_free(&caret);
}

static void emit(DiagLevel lvl, Loc loc, const char *fmt, va_list ap) {
  if (lvl == DIAG_ERROR) {
    suppressed = nerrors >= max_errors;
    nerrors++;
    if (suppressed) {
      if (nerrors == max_errors + 1 && !sink && format == DIAG_HUMAN)
        fprintf(stderr, "sflowc: too many errors, stopping\n");
      return;
    }
  } else if (lvl == DIAG_WARNING) {
    suppressed = false;
  } else if (suppressed) {
    return;
  }
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (sink) {
    sink(sink_ctx, lvl, loc, msg);
    return;
  }
  Source *s = src_get(loc.file);
  const char *path = s ? s->path : "<unknown>";
  if (format == DIAG_JSON) {
    fputs("{\"file\":", stderr);
    json_str(stderr, path);
    fprintf(stderr, ",\"line\":%d,\"column\":%d,\"end_column\":%d,\"severity\":\"%s\",\"message\":",
            loc.line, loc.col, loc.col + (loc.len > 0 ? loc.len : 1), level_name(lvl));
    json_str(stderr, msg);
    fputs("}\n", stderr);
    return;
  }
  if (use_color)
    fprintf(stderr, "\033[1m%s:%d:%d: %s%s:\033[0m\033[1m %s\033[0m\n", path, loc.line, loc.col,
            level_color(lvl), level_name(lvl), msg);
  else
    fprintf(stderr, "%s:%d:%d: %s: %s\n", path, loc.line, loc.col, level_name(lvl), msg);
  if (s && loc.line > 0)
    show_line(s, loc);
}

void diag_error(Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(DIAG_ERROR, loc, fmt, ap);
  va_end(ap);
}

void diag_warning(Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(DIAG_WARNING, loc, fmt, ap);
  va_end(ap);
}

void diag_note(Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(DIAG_NOTE, loc, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------- did you mean */

/* Edit distance counting a swap of two neighbours as one edit (optimal
 * string alignment), since "lables" for "labels" is the commonest typo;
 * gives up (returning limit+1) once every cell of a row exceeds limit. */
int edit_distance(const char *a, const char *b, int limit) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (abs(la - lb) > limit)
    return limit + 1;
  if (lb > 256)
    return limit + 1;
  int rows[3][258];
  int *pp = rows[0], *prev = rows[1], *row = rows[2];
  for (int j = 0; j <= lb; j++)
    prev[j] = j;
  for (int i = 1; i <= la; i++) {
    int best = row[0] = i;
    for (int j = 1; j <= lb; j++) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      int v = prev[j - 1] + cost;
      if (prev[j] + 1 < v)
        v = prev[j] + 1;
      if (row[j - 1] + 1 < v)
        v = row[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < v)
        v = pp[j - 2] + 1;
      row[j] = v;
      if (v < best)
        best = v;
    }
    if (best > limit)
      return limit + 1;
    int *t = pp;
    pp = prev;
    prev = row;
    row = t;
  }
  return prev[lb];
}

const char *suggest(const char *name, const char *const *cands, int n) {
  int limit = ((int)strlen(name) + 2) / 3;
  /* Replacing every letter is no suggestion: 'i' is not a typo of 'f'. */
  if (limit >= (int)strlen(name))
    limit = (int)strlen(name) - 1;
  const char *best = NULL;
  int bestd = limit + 1;
  for (int i = 0; i < n; i++) {
    if (!cands[i] || strcmp(cands[i], name) == 0)
      continue;
    int d = edit_distance(name, cands[i], limit);
    if (d < bestd) {
      bestd = d;
      best = cands[i];
    }
  }
  return best;
}
