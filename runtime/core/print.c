/*
 * print.c — the print() builtin and the printed form of every value.
 *
 * A line is built in a per-thread buffer and leaves with a single write(2)
 * to fd 1, so lines printed by concurrent tasks never interleave and no
 * stdio lock or buffer sits between a crash and the user's output.  The
 * buffer starts in thread-local storage and moves to the heap only for a
 * long line; it returns to the inline storage after each line, so a worker
 * thread that ends leaks nothing.
 *
 * Printed forms: top-level strings print raw; strings inside arrays and
 * structs print quoted with sflow escapes (`["a", "b\n"]`) so element
 * boundaries stay visible; structs print as `Batch{x: [1.0], y: [2]}`;
 * floats print Python-style (see str.c), f32 with the shortest digits that
 * read back as the f32.
 *
 * The compiler must evaluate all arguments of a print before
 * sf_print_begin: an argument that itself prints would reset the line.
 */
#include <stdarg.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

/* ------------------------------------------------------------ buffers */

void sf__buf_init(sf__buf *b, char *storage, size_t cap) {
  *b = (sf__buf){.data = storage, .cap = storage ? cap : 0,
                 .inline_data = storage, .inline_cap = storage ? cap : 0};
}

void sf__buf_grow(sf__buf *b, size_t n) {
  if (n <= b->cap - b->len)
    return;
  if (n > SIZE_MAX / 4 - b->len)
    sf_runtime_error(NULL, "out of memory");
  size_t cap = b->cap ? b->cap * 2 : 256;
  while (cap - b->len < n)
    cap *= 2;
  char *d = sf_alloc(cap);
  if (b->len)
    memcpy(d, b->data, b->len);
  if (b->data != b->inline_data)
    sf_free(b->data);
  b->data = d;
  b->cap = cap;
}

void sf__buf_free(sf__buf *b) {
  if (b->data != b->inline_data)
    sf_free(b->data);
  sf__buf_init(b, b->inline_data, b->inline_cap);
}

void sf__buf_printf(sf__buf *b, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n <= 0)
    return;
  if ((size_t)n < sizeof line) {
    sf__buf_put(b, line, (size_t)n);
    return;
  }
  sf__buf_grow(b, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void sf__buf_json_str(sf__buf *b, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  sf__buf_put(b, "\"", 1);
  size_t run = 0, i = 0; /* p[run..i) passes through as it is */
  while (i < n) {
    unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      i++;
      continue;
    }
    size_t bad = 0, k = c < 0x80 ? 1 : sf__utf8_seq(p + i, n - i, &bad);
    if (k > 1) {
      i += k;
      continue;
    }
    sf__buf_put(b, s + run, i - run);
    switch (c) {
    case '"': sf__buf_put(b, "\\\"", 2); break;
    case '\\': sf__buf_put(b, "\\\\", 2); break;
    case '\n': sf__buf_put(b, "\\n", 2); break;
    case '\r': sf__buf_put(b, "\\r", 2); break;
    case '\t': sf__buf_put(b, "\\t", 2); break;
    default:
      if (k == 0)
        sf__buf_put(b, "\\ufffd", 6);
      else
        sf__buf_printf(b, "\\u%04x", c);
    }
    i += k ? k : bad;
    run = i;
  }
  sf__buf_put(b, s + run, n - run);
  sf__buf_put(b, "\"", 1);
}

static void put_c(sf__buf *b, const char *s) { sf__buf_put(b, s, strlen(s)); }

bool sf__write_all(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    buf += w;
    n -= (size_t)w;
  }
  return true;
}

/* ------------------------------------------------------------- values */

void (*sf__tensor_format)(sf__buf *b, const void *tensor);

static void format_array(sf__buf *b, const sf_array *a) {
  sf__buf_put(b, "[", 1);
  for (int64_t i = 0; a && i < a->len; i++) {
    if (i > 0)
      sf__buf_put(b, ", ", 2);
    sf__format_value(b, a->elem, sf__array_at(a, i), true);
  }
  sf__buf_put(b, "]", 1);
}

/* {"the": 2, "a": 1}: Python's dict, in insertion order. */
static void format_map(sf__buf *b, const sf_type *t, const sf_map *m) {
  sf__buf_put(b, "{", 1);
  int64_t pos = 0;
  const void *k;
  void *v;
  for (bool first = true; sf__map_next(m, &pos, &k, &v); first = false) {
    if (!first)
      sf__buf_put(b, ", ", 2);
    sf__format_value(b, t->fields[0].type, k, true);
    sf__buf_put(b, ": ", 2);
    sf__format_value(b, t->elem, v, true);
  }
  sf__buf_put(b, "}", 1);
}

void (*sf__tensor_format)(sf__buf *b, const void *tensor);

/* `<fn sq>`: the name from the program's table of function values. */
static void format_fn(sf__buf *b, int64_t ix) {
  if (ix <= 0 || ix >= sf__nfns || !sf__fn_names) {
    put_c(b, "<fn unset>");
    return;
  }
  put_c(b, "<fn ");
  put_c(b, sf__fn_names[ix]);
  sf__buf_put(b, ">", 1);
}

static void format_struct(sf__buf *b, const sf_type *t, const char *p) {
  put_c(b, t->name ? t->name : "struct");
  sf__buf_put(b, "{", 1);
  for (int32_t i = 0; i < t->nfields; i++) {
    const sf_field *f = &t->fields[i];
    if (i > 0)
      sf__buf_put(b, ", ", 2);
    put_c(b, f->name ? f->name : "?");
    sf__buf_put(b, ": ", 2);
    sf__format_value(b, f->type, p + f->offset, true);
  }
  sf__buf_put(b, "}", 1);
}

/* `<actor Counter>`, `<group Counter>`: a group descriptor may be named
 * "group<Counter>", so the inner name is taken from between the brackets. */
static void format_handle(sf__buf *b, const char *what, const char *name) {
  size_t n = name ? strlen(name) : 0;
  const char *lt = name ? strchr(name, '<') : NULL;
  if (lt && n > 0 && name[n - 1] == '>') {
    n = (size_t)(name + n - 1 - (lt + 1));
    name = lt + 1;
  }
  sf__buf_put(b, "<", 1);
  put_c(b, what);
  if (n > 0) {
    sf__buf_put(b, " ", 1);
    sf__buf_put(b, name, n);
  }
  sf__buf_put(b, ">", 1);
}

static void format_number(sf__buf *b, const sf_type *t, const void *p) {
  char num[SF__FLOAT_BUF];
  int n = 0;
  switch (t->kind) {
  case SF_I32: n = sprintf(num, "%" PRId32, *(const int32_t *)p); break;
  case SF_I64: n = sprintf(num, "%" PRId64, *(const int64_t *)p); break;
  case SF_F32: n = sf__fmt_f32_repr(*(const float *)p, num); break;
  default: n = sf__fmt_f64_repr(*(const double *)p, num); break;
  }
  sf__buf_put(b, num, (size_t)n);
}

void sf__format_value(sf__buf *b, const sf_type *t, const void *p, bool nested) {
  switch (t->kind) {
  case SF_BOOL:
    put_c(b, *(const bool *)p ? "true" : "false");
    return;
  case SF_I32: case SF_I64: case SF_F32: case SF_F64:
    format_number(b, t, p);
    return;
  case SF_STR: {
    const sf_str *s = *(sf_str *const *)p;
    if (nested)
      sf__buf_put_quoted(b, sf__str_data(s), (size_t)sf__str_len(s));
    else
      sf__buf_put(b, sf__str_data(s), (size_t)sf__str_len(s));
    return;
  }
  case SF_ARRAY: format_array(b, *(sf_array *const *)p); return;
  case SF_STRUCT: format_struct(b, t, p); return;
  case SF_MAP: format_map(b, t, *(sf_map *const *)p); return;
  case SF_FN: format_fn(b, *(const int64_t *)p); return;
  case SF_TENSOR: {
    const void *x = *(void *const *)p;
    if (x && sf__tensor_format) /* set by the nn layer, which alone makes tensors */
      sf__tensor_format(b, x);
    else
      put_c(b, "<tensor unset>");
    return;
  }
  case SF_FUTURE: put_c(b, "<future>"); return;
  case SF_ACTOR: format_handle(b, "actor", t->name); return;
  case SF_GROUP: format_handle(b, "group", t->name); return;
  default: put_c(b, "()"); return; /* SF_VOID */
  }
}

/* -------------------------------------------------------------- print */

#define LINE_INLINE 1024

static _Thread_local struct {
  char storage[LINE_INLINE];
  sf__buf buf;
  int nargs;
} line;

/* The line buffer, set up on a thread's first print. */
static sf__buf *line_buf(void) {
  if (!line.buf.inline_data)
    sf__buf_init(&line.buf, line.storage, sizeof line.storage);
  return &line.buf;
}

static sf__buf *next_arg(void) {
  if (line.nargs++ > 0)
    sf__buf_put(line_buf(), " ", 1);
  return line_buf();
}

void sf_print_begin(void) {
  sf__buf_free(line_buf()); /* drops a line abandoned by a runtime error */
  line.nargs = 0;
}

void sf_print_bool(bool v) { sf__format_value(next_arg(), &sf_type_bool, &v, false); }
void sf_print_i64(int64_t v) { sf__format_value(next_arg(), &sf_type_i64, &v, false); }
void sf_print_f64(double v) { sf__format_value(next_arg(), &sf_type_f64, &v, false); }
void sf_print_f32(float v) { sf__format_value(next_arg(), &sf_type_f32, &v, false); }
void sf_print_str(sf_str *s) { sf__format_value(next_arg(), &sf_type_str, &s, false); }

void sf_print_value(const sf_type *t, const void *p) {
  sf__format_value(next_arg(), t, p, false);
}

/* ------------------------------------------------ the sink stack */

/* Each thread has a stack of sinks: the frame of the innermost journaled
 * call running on it.  A line goes to the top frame only, so a call's
 * record holds exactly the lines that call printed: a main-level task run
 * inline inside another (the consumer awaiting its producer) pushes its
 * own frame, and its lines land in its own record and nowhere else, as
 * the replay prints each record once.  A call that is not journaled (a
 * task or actor call made by a task or an actor) pushes nothing: its
 * lines are part of the journaled call that made it. */
_Thread_local sf__capture *sf__capture_cur;
bool sf__capture_on;

void sf__capture_begin(sf__capture *c, int mode) {
  sf__buf_init(&c->buf, NULL, 0);
  c->prev = sf__capture_cur;
  c->pushed = mode != SF__CAPTURE_OFF && sf__capture_on;
  c->mode = c->pushed ? mode : SF__CAPTURE_OFF;
  if (c->pushed)
    sf__capture_cur = c;
}

void sf__capture_end(sf__capture *c) {
  if (!c->pushed)
    return;
  /* Frames nest strictly (a call runs to its end on the thread that
   * started it), so c is the top one. */
  sf__capture_cur = c->prev;
  c->pushed = false;
}

const char *sf__capture_out(const sf__capture *c, size_t *n) {
  *n = c->mode == SF__CAPTURE_KEEP ? c->buf.len : 0;
  return *n ? c->buf.data : NULL;
}

void sf__capture_free(sf__capture *c) {
  sf__capture_end(c);
  sf__buf_free(&c->buf);
  c->mode = SF__CAPTURE_OFF;
}

bool sf__capture_muted(void) { return sf__capture_cur && sf__capture_cur->mode == SF__CAPTURE_MUTE; }

void sf__capture_line(const char *s, size_t n) {
  if (sf__capture_cur && sf__capture_cur->mode == SF__CAPTURE_KEEP)
    sf__buf_put(&sf__capture_cur->buf, s, n);
}

void (*sf__print_hook)(const char *line, size_t n);
bool (*sf__out_writer)(int fd, const char *buf, size_t n) = sf__write_all;
_Thread_local bool sf__print_mute;
_Thread_local sf__buf *sf__print_keep;

void sf_print_end(void) {
  sf__buf *b = line_buf();
  sf__buf_put(b, "\n", 1);
  /* A closed stdout (`./prog | head`) must not turn into a runtime error:
   * the write fails or SIGPIPE ends the program, as for any Unix tool. */
  if (sf__print_hook) { /* a worker of a --nodes run: the line goes to the head */
    if (!sf__print_mute) { /* unless a restarted actor replays a call */
      sf__print_hook(b->data, b->len);
      if (sf__print_keep) /* a task's attempt: its result carries it too */
        sf__buf_put(sf__print_keep, b->data, b->len);
    }
  } else if (sf__capture_cur) { /* a journaled call: keep the line, or mute a replay */
    sf__capture_line(b->data, b->len);
    if (!sf__capture_muted()) {
      (void)sf__out_writer(1, b->data, b->len);
      if (sf__print_keep)
        sf__buf_put(sf__print_keep, b->data, b->len);
    }
  } else {
    (void)sf__out_writer(1, b->data, b->len);
    if (sf__print_keep) /* a --nodes task run on the head (dispatch.c journals it) */
      sf__buf_put(sf__print_keep, b->data, b->len);
  }
  sf__buf_free(b);
  line.nargs = 0;
}
