/*
 * str.c — immutable byte strings, number formatting and number parsing.
 *
 * Strings are one allocation (header, length, bytes, NUL) and, as far as
 * any holder can tell, never change after creation, so tasks share them
 * across threads without locks.  A NULL sf_str* is the empty string
 * everywhere, because zero-filled memory (a new str[] array, a struct
 * before its fields are set) must be a valid value.
 *
 * The one exception is sf_str_append (`s += t`, `s = s + t`): when the
 * string's only reference is the one being replaced (count 1, not a
 * literal), nobody else can see it, so it grows in place, copy on write
 * otherwise.  Such strings keep spare room, rounded up to a power of two
 * and recorded in the header's flags as its log2, so a loop of appends
 * costs amortised O(1) per append instead of a copy of the whole string.
 *
 * Key design choice for floats: print exactly what Python's repr() prints,
 * the shortest decimal that reads back to the same bits, so numbers in logs
 * match what ML engineers see from NumPy/PyTorch scripts.  The digits come
 * from fmtfloat.c (Schubfach), the one routine every float printer uses.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* ------------------------------------------------------------ basics */

static sf_str empty_str = {{-1, SF_OBJ_STR, 0}, 0, ""};


sf_str *sf_str_empty(void) { return &empty_str; }

/* A short string comes from the per-thread block caches (mem.c), not
 * malloc: splitting a text makes millions of words, and malloc and free
 * were a third of a word count's time.  Its hdr.flags says so
 * (SF__STR_BLOCK | the block class), for sf__str_free and for the append
 * path, which must not realloc such a block. */
static sf_str *str_alloc(int64_t len) {
  if (len < 0 || (uint64_t)len > SIZE_MAX - sizeof(sf_str) - 1)
    sf_runtime_error(NULL, "out of memory");
  size_t n = sizeof(sf_str) + (size_t)len + 1;
  int32_t cls = -1;
  sf_str *s = n <= SF__BLOCK_MAX ? sf__block_alloc(n, &cls) : sf_alloc(n);
  s->hdr = (sf_obj){1, SF_OBJ_STR, cls >= 0 ? SF__STR_BLOCK | cls : 0};
  s->len = len;
  s->data[len] = '\0';
  return s;
}

sf_str *sf__str_alloc(int64_t len) { return str_alloc(len); }

/* ------------------------------------------------------------ appends */

/* Strings made by an append hold 2^flags bytes of data (NUL included);
 * flags 0 means exactly len + 1, as every other string and every literal
 * the compiler emits has. */
#define STR_MIN_ROOM_LOG2 5 /* 32 bytes: a few short appends before a realloc */

static size_t str_room(const sf_str *s) {
  int32_t f = s->hdr.flags;
  return f && !(f & SF__STR_BLOCK) ? (size_t)1 << f : (size_t)s->len + 1;
}

void sf__str_free(sf_str *s) {
  if (s->hdr.flags & SF__STR_BLOCK)
    sf__block_free(s, s->hdr.flags & ~SF__STR_BLOCK);
  else
    sf_free(s);
}

/* log2 of the smallest power of two >= need (need > 0). */
static int32_t room_log2(uint64_t need) {
  int32_t k = STR_MIN_ROOM_LOG2;
  while (((uint64_t)1 << k) < need)
    k++;
  return k;
}

static sf_str *str_alloc_room(int64_t len, int32_t k) {
  if ((size_t)1 << k > SIZE_MAX - sizeof(sf_str))
    sf_runtime_error(NULL, "out of memory");
  sf_str *s = sf_alloc(sizeof(sf_str) + ((size_t)1 << k));
  s->hdr = (sf_obj){1, SF_OBJ_STR, k};
  s->len = len;
  return s;
}

/* Is the caller's reference the only one?  Acquire pairs with the release
 * of another holder's sf_release, so its last reads of the bytes happen
 * before this thread writes them. */
static bool str_unique(const sf_str *s) {
  return s && __atomic_load_n(&s->hdr.rc, __ATOMIC_ACQUIRE) == 1;
}

sf_str *sf_str_append(sf_str *a, sf_str *b) {
  int64_t la = sf__str_len(a), lb = sf__str_len(b);
  if (lb == 0)
    return a ? a : sf_str_empty();
  if (la > INT64_MAX - lb - 1 || (uint64_t)(la + lb) >= (uint64_t)1 << 62)
    sf_runtime_error(NULL, "out of memory");
  uint64_t need = (uint64_t)(la + lb) + 1;
  if (!str_unique(a)) {
    /* Shared or a literal: copy on write, with room for the next appends. */
    sf_str *s = str_alloc_room(la + lb, room_log2(need));
    memcpy(s->data, sf__str_data(a), (size_t)la);
    memcpy(s->data + la, b->data, (size_t)lb);
    s->data[la + lb] = '\0';
    sf_release(a);
    return s;
  }
  if (need > str_room(a)) {
    int32_t k = room_log2(need);
    bool self = b == a; /* s += s: the source moves with the realloc */
    if (a->hdr.flags & SF__STR_BLOCK) {
      /* A cached block cannot be realloc'd: move to a malloc'd one. */
      sf_str *g = sf_alloc(sizeof(sf_str) + ((size_t)1 << k));
      memcpy(g, a, sizeof(sf_str) + (size_t)la);
      sf__str_free(a);
      a = g;
    } else {
      a = sf__realloc(a, sizeof(sf_str) + ((size_t)1 << k));
    }
    a->hdr.flags = k;
    if (self)
      b = a;
  }
  /* With b == a the source [0, la) and the target [la, 2la) do not overlap. */
  memcpy(a->data + la, b->data, (size_t)lb);
  a->len = la + lb;
  a->data[la + lb] = '\0';
  return a;
}

sf_str *sf_str_new(const char *bytes, int64_t len) {
  if (len <= 0)
    return sf_str_empty();
  sf_str *s = str_alloc(len);
  memcpy(s->data, bytes, (size_t)len);
  return s;
}

sf_str *sf_str_concat(sf_str *a, sf_str *b) {
  int64_t la = sf__str_len(a), lb = sf__str_len(b);
  /* Strings are immutable, so an empty side lets us share the other. */
  if (lb == 0 || la == 0) {
    sf_str *r = lb == 0 ? a : b;
    if (!r)
      return sf_str_empty();
    sf_retain(r);
    return r;
  }
  if (la > INT64_MAX - lb)
    sf_runtime_error(NULL, "out of memory");
  sf_str *s = str_alloc(la + lb);
  memcpy(s->data, a->data, (size_t)la);
  memcpy(s->data + la, b->data, (size_t)lb);
  return s;
}

int32_t sf_str_cmp(sf_str *a, sf_str *b) {
  int64_t la = sf__str_len(a), lb = sf__str_len(b);
  int c = memcmp(sf__str_data(a), sf__str_data(b), (size_t)(la < lb ? la : lb));
  if (c != 0)
    return c < 0 ? -1 : 1;
  return la < lb ? -1 : la > lb;
}

bool sf_str_eq(sf_str *a, sf_str *b) {
  int64_t la = sf__str_len(a);
  return a == b ||
         (la == sf__str_len(b) && memcmp(sf__str_data(a), sf__str_data(b), (size_t)la) == 0);
}

int64_t sf_str_len(sf_str *s) { return sf__str_len(s); }

static sf_str *str_from_c(const char *c) { return sf_str_new(c, (int64_t)strlen(c)); }

sf_str *sf_str_from_bool(bool v) { return str_from_c(v ? "true" : "false"); }

sf_str *sf_str_from_i64(int64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return str_from_c(buf);
}

sf_str *sf_str_from_f64(double v) {
  char buf[SF__FLOAT_BUF];
  return sf_str_new(buf, sf__fmt_f64_repr(v, buf));
}

sf_str *sf_str_from_f32(float v) {
  char buf[SF__FLOAT_BUF];
  return sf_str_new(buf, sf__fmt_f32_repr(v, buf));
}

sf_str *sf_fmt_f64(double v, int64_t digits, const sf_loc *loc) {
  if (digits < 0 || digits > 100)
    sf_runtime_error(loc, "fmt: digits must be between 0 and 100, got %" PRId64, digits);
  /* glibc rounds the exact binary value half-to-even, as Python does; only
   * NaN differs (glibc may print "-nan"). */
  if (isnan(v))
    return str_from_c("nan");
  int d = (int)digits;
  int n = snprintf(NULL, 0, "%.*f", d, v);
  sf_str *s = str_alloc(n);
  snprintf(s->data, (size_t)n + 1, "%.*f", d, v);
  return s;
}

/* ------------------------------------------------------------ quoting */

/* The escaped form of one byte inside a double-quoted sflow literal. */
static int escape_byte(unsigned char c, char out[8]) {
  switch (c) {
  case '"': return sprintf(out, "\\\"");
  case '\\': return sprintf(out, "\\\\");
  case '\n': return sprintf(out, "\\n");
  case '\t': return sprintf(out, "\\t");
  case '\r': return sprintf(out, "\\r");
  default:
    if (c < 0x20 || c == 0x7f)
      return sprintf(out, "\\u{%x}", c);
    out[0] = (char)c;
    out[1] = '\0';
    return 1;
  }
}

void sf__quote(const char *s, size_t len, size_t max_bytes, char *buf, size_t n) {
  size_t o = 0;
  bool cut = len > max_bytes;
  size_t take = cut ? max_bytes : len;
  if (n < 8) {
    if (n)
      buf[0] = '\0';
    return;
  }
  buf[o++] = '"';
  for (size_t i = 0; i < take; i++) {
    char e[8];
    int k = escape_byte((unsigned char)s[i], e);
    if (o + (size_t)k + 5 > n) { /* room for ..." and NUL */
      cut = true;
      break;
    }
    memcpy(buf + o, e, (size_t)k);
    o += (size_t)k;
  }
  if (cut) {
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o++] = '"';
  buf[o] = '\0';
}

void sf__buf_put_quoted(sf__buf *b, const char *s, size_t len) {
  sf__buf_put(b, "\"", 1);
  size_t run = 0; /* bytes copied verbatim in one go, the common case */
  for (size_t i = 0; i < len; i++) {
    char e[8];
    int k = escape_byte((unsigned char)s[i], e);
    if (k == 1 && e[0] == s[i]) {
      run++;
      continue;
    }
    sf__buf_put(b, s + i - run, run);
    run = 0;
    sf__buf_put(b, e, (size_t)k);
  }
  sf__buf_put(b, s + len - run, run);
  sf__buf_put(b, "\"", 1);
}

/* ------------------------------------------------------------ parsing */

static int digit_value(char c, int base) {
  int d = c >= '0' && c <= '9'   ? c - '0'
          : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                 : 99;
  return d < base ? d : -1;
}

/* Integer text as the language writes literals: optional sign, decimal or
 * 0x hex digits, single underscores between digits. */
sf__parse_status sf__parse_i64(const char *s, size_t len, int64_t *out) {
  size_t i = 0;
  bool neg = i < len && s[i] == '-';
  if (i < len && (s[i] == '-' || s[i] == '+'))
    i++;
  int base = 10;
  if (len - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
    base = 16;
    i += 2;
  }
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  uint64_t acc = 0;
  bool range = false, after_digit = false;
  for (; i < len; i++) {
    if (s[i] == '_' && after_digit) {
      after_digit = false;
      continue;
    }
    int d = digit_value(s[i], base);
    if (d < 0)
      return SF__PARSE_BAD;
    after_digit = true;
    if (acc > (limit - (uint64_t)d) / (uint64_t)base)
      range = true;
    else
      acc = acc * (uint64_t)base + (uint64_t)d;
  }
  if (!after_digit) /* no digits, or a trailing underscore */
    return SF__PARSE_BAD;
  if (range)
    return SF__PARSE_RANGE;
  *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
  return SF__PARSE_OK;
}

sf__parse_status sf__parse_i32(const char *s, size_t len, int32_t *out) {
  int64_t v;
  sf__parse_status st = sf__parse_i64(s, len, &v);
  if (st == SF__PARSE_OK && (v < INT32_MIN || v > INT32_MAX))
    st = SF__PARSE_RANGE;
  if (st == SF__PARSE_OK)
    *out = (int32_t)v;
  return st;
}

/* strtod's syntax (also inf, nan, hex floats) over the whole text; s[len]
 * must be NUL.  Like Python's float(), a value too large reads as inf. */
static sf__parse_status parse_float(const char *s, size_t len, bool f32, double *out) {
  if (len == 0 || isspace((unsigned char)s[0]))
    return SF__PARSE_BAD;
  char *end;
  *out = f32 ? strtof(s, &end) : strtod(s, &end);
  return end == s + len ? SF__PARSE_OK : SF__PARSE_BAD;
}

sf__parse_status sf__parse_f64(const char *s, size_t len, double *out) {
  return parse_float(s, len, false, out);
}

sf__parse_status sf__parse_f32(const char *s, size_t len, float *out) {
  double d;
  sf__parse_status st = parse_float(s, len, true, &d);
  if (st == SF__PARSE_OK)
    *out = (float)d;
  return st;
}

sf__parse_status sf__parse_bool(const char *s, size_t len, bool *out) {
  if (len == 4 && memcmp(s, "true", 4) == 0)
    *out = true;
  else if (len == 5 && memcmp(s, "false", 5) == 0)
    *out = false;
  else
    return SF__PARSE_BAD;
  return SF__PARSE_OK;
}

/* ------------------------------------------------------------- casts */

_Noreturn static void cast_fail(sf_str *s, const char *type, sf__parse_status st,
                                const sf_loc *loc) {
  char q[160];
  sf__quote(sf__str_data(s), (size_t)sf__str_len(s), 64, q, sizeof q);
  sf_runtime_error(loc, "cannot convert %s to %s%s", q, type,
                   st == SF__PARSE_RANGE ? ": out of range" : "");
}

/* Casts from str ignore surrounding whitespace (ASCII: " 3.5\n" is 3.5),
 * so fields cut from a line convert as they are; the command-line flags
 * parse strictly through sf__parse_* directly. */
static bool is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static const char *trimmed(sf_str *s, size_t *len) {
  const char *p = sf__str_data(s);
  size_t n = (size_t)sf__str_len(s);
  while (n && is_ws(p[0]))
    p++, n--;
  while (n && is_ws(p[n - 1]))
    n--;
  *len = n;
  return p;
}

#define STR_CAST(name, T, parse, tname)                      \
  T name(sf_str *s, const sf_loc *loc) {                     \
    T v = 0;                                                 \
    size_t n;                                                \
    const char *p = trimmed(s, &n);                          \
    sf__parse_status st = parse(p, n, &v);                   \
    if (st != SF__PARSE_OK)                                  \
      cast_fail(s, tname, st, loc);                          \
    return v;                                                \
  }
STR_CAST(sf_str_to_i64, int64_t, sf__parse_i64, "i64")
STR_CAST(sf_str_to_i32, int32_t, sf__parse_i32, "i32")
STR_CAST(sf_str_to_f64, double, sf__parse_f64, "f64")
STR_CAST(sf_str_to_f32, float, sf__parse_f32, "f32")
STR_CAST(sf_str_to_bool, bool, sf__parse_bool, "bool")

_Noreturn static void float_cast_fail(double v, const char *type, const sf_loc *loc) {
  char buf[SF__FLOAT_BUF];
  sf__fmt_f64_repr(v, buf);
  sf_runtime_error(loc, "cannot convert %s to %s", buf, type);
}

/* The bounds are exact powers of two, so the comparisons are exact; the
 * cast then truncates toward zero as C does. */
int64_t sf_f64_to_i64(double v, const sf_loc *loc) {
  if (!(v >= -0x1p63 && v < 0x1p63))
    float_cast_fail(v, "i64", loc);
  return (int64_t)v;
}

int32_t sf_f64_to_i32(double v, const sf_loc *loc) {
  if (!(v > -0x1p31 - 1 && v < 0x1p31))
    float_cast_fail(v, "i32", loc);
  return (int32_t)v;
}
