/*
 * text.c — the string methods: split, slices, find, strip, lower/upper,
 * replace, starts_with/ends_with, join, and code points (ord, chr,
 * codepoints: UTF-8 decoded strictly).
 *
 * Key design choice: offsets are bytes, as in Go and Rust, so s[a..b] and
 * s.find(t) are O(1) and O(n) and agree with len(s); a slice may only cut
 * between UTF-8 sequences (an offset at a continuation byte is a runtime
 * error naming it), so no slice of valid text is ever invalid text.  Case
 * mapping and whitespace are ASCII only, which is what CSV headers, log
 * lines and identifiers need; full Unicode case folding belongs with the
 * tokenizer's normalisation, not in every `lower()`.
 *
 * Every result is owned (+1).  A method whose result equals its receiver
 * (strip of a stripped string, a whole-string slice) hands back the same
 * object retained: strings never change, so sharing is invisible.
 */
#define _GNU_SOURCE /* memmem */
#include <inttypes.h>
#include <string.h>

#include "core.h"

/* The string itself, as an owned result. */
static sf_str *same(sf_str *s) {
  if (!s)
    return sf_str_empty();
  sf_retain(s);
  return s;
}

static bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* A UTF-8 continuation byte (10xxxxxx) never starts a character. */
static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* -------------------------------------------------------------- UTF-8 */

size_t sf__utf8_seq(const unsigned char *s, size_t n, size_t *bad) {
  unsigned char c = s[0];
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    need = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0)
      lo = 0xA0; /* no overlong forms */
    else if (c == 0xED)
      hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0)
      lo = 0x90;
    else if (c == 0xF4)
      hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t i = 1; i < need; i++) {
    unsigned char b = i < n ? s[i] : 0;
    bool ok = i == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xBF;
    if (!ok) {
      *bad = i;
      return 0;
    }
  }
  return need;
}

/* ------------------------------------------------------------- split */

/* An owned str[] of n empty slots. */
static sf_array *str_array(int64_t n) { return sf_array_new(&sf_type_str, n, NULL); }

static void put(sf_array *a, int64_t i, const char *p, int64_t n) {
  ((sf_str **)a->data)[i] = sf_str_new(p, n);
}

/* Python's str.split(sep): n separators give n + 1 parts, empty ones
 * included ("a,,b" -> "a", "", "b"; "" -> [""]). */
sf_array *sf_str_split(sf_str *s, sf_str *sep, const sf_loc *loc) {
  const char *p = sf__str_data(s), *q = sf__str_data(sep);
  int64_t n = sf__str_len(s), m = sf__str_len(sep);
  if (m == 0)
    sf_runtime_error(loc, "split: the separator is empty");
  int64_t parts = 1;
  for (const char *at = p; (at = memmem(at, (size_t)(p + n - at), q, (size_t)m)); at += m)
    parts++;
  sf_array *out = str_array(parts);
  const char *from = p;
  for (int64_t i = 0; i < parts - 1; i++) {
    const char *at = memmem(from, (size_t)(p + n - from), q, (size_t)m);
    put(out, i, from, at - from);
    from = at + m;
  }
  put(out, parts - 1, from, p + n - from);
  return out;
}

/* Python's str.split(): runs of whitespace separate, and there are no
 * empty parts ("  a  b " -> "a", "b"; "   " -> []). */
sf_array *sf_str_split_ws(sf_str *s) {
  const unsigned char *p = (const unsigned char *)sf__str_data(s);
  int64_t n = sf__str_len(s), parts = 0;
  for (int64_t i = 0; i < n;) {
    while (i < n && is_space(p[i]))
      i++;
    if (i < n)
      parts++;
    while (i < n && !is_space(p[i]))
      i++;
  }
  sf_array *out = str_array(parts);
  int64_t k = 0;
  for (int64_t i = 0; i < n;) {
    while (i < n && is_space(p[i]))
      i++;
    int64_t from = i;
    while (i < n && !is_space(p[i]))
      i++;
    if (i > from)
      put(out, k++, (const char *)p + from, i - from);
  }
  return out;
}

/* `for w in s.split(sep)` and `for w in s.split()` without the array: the
 * part that starts at *pos, advancing *pos past it and its separator, or
 * NULL (and *pos = -1) after the last.  *pos starts at 0.  The parts are
 * exactly split's and split_ws's; each is made when the loop reaches it
 * and freed when the loop moves on, so splitting a 60 MB text into words
 * holds one word at a time, from the hot end of the block cache. */
sf_str *sf_str_split_next(sf_str *s, sf_str *sep, int64_t *pos, const sf_loc *loc) {
  const char *p = sf__str_data(s);
  int64_t n = sf__str_len(s), i = *pos;
  if (i < 0)
    return NULL;
  if (sep) {
    const char *q = sf__str_data(sep);
    int64_t m = sf__str_len(sep);
    if (m == 0)
      sf_runtime_error(loc, "split: the separator is empty");
    const char *at = memmem(p + i, (size_t)(n - i), q, (size_t)m);
    int64_t end = at ? at - p : n;
    *pos = at ? end + m : -1;
    return sf_str_new(p + i, end - i);
  }
  while (i < n && is_space((unsigned char)p[i]))
    i++;
  if (i == n) {
    *pos = -1;
    return NULL;
  }
  int64_t from = i;
  while (i < n && !is_space((unsigned char)p[i]))
    i++;
  *pos = i;
  return sf_str_new(p + from, i - from);
}

/* ------------------------------------------------------------ slices */

sf_str *sf_str_slice(sf_str *s, int64_t from, int64_t to, const sf_loc *loc) {
  const unsigned char *p = (const unsigned char *)sf__str_data(s);
  int64_t n = sf__str_len(s);
  if (from < 0 || to > n || from > to)
    sf_runtime_error(loc, "string slice [%" PRId64 "..%" PRId64 "] out of range for length %" PRId64,
                     from, to, n);
  /* An offset is a boundary at either end or before a leading byte. */
  if (from < n && is_cont(p[from]))
    sf_runtime_error(loc, "string slice [%" PRId64 "..%" PRId64 "]: offset %" PRId64
                     " is inside a UTF-8 sequence", from, to, from);
  if (to < n && is_cont(p[to]))
    sf_runtime_error(loc, "string slice [%" PRId64 "..%" PRId64 "]: offset %" PRId64
                     " is inside a UTF-8 sequence", from, to, to);
  if (from == 0 && to == n)
    return same(s);
  return sf_str_new((const char *)p + from, to - from);
}

/* The length of the character whose leading byte is c: 1 for ASCII and
 * for a byte that leads nothing valid (so invalid text still advances). */
static int64_t char_len(unsigned char c) {
  return c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
}

sf_str *sf_str_at(sf_str *s, int64_t i, const sf_loc *loc) {
  const unsigned char *p = (const unsigned char *)sf__str_data(s);
  int64_t n = sf__str_len(s);
  if (i < 0 || i >= n)
    sf_runtime_error(loc, "string index %" PRId64 " out of range for length %" PRId64, i, n);
  if (is_cont(p[i]))
    sf_runtime_error(loc, "string index %" PRId64 " is inside a UTF-8 sequence", i);
  int64_t k = char_len(p[i]);
  if (k > n - i)
    k = n - i;
  return sf_str_new((const char *)p + i, k);
}

/* -------------------------------------------------------- searching */

int64_t sf_str_find(sf_str *s, sf_str *t) {
  const char *p = sf__str_data(s);
  int64_t n = sf__str_len(s), m = sf__str_len(t);
  if (m == 0)
    return 0;
  const char *at = memmem(p, (size_t)n, sf__str_data(t), (size_t)m);
  return at ? at - p : -1;
}

bool sf_str_starts_with(sf_str *s, sf_str *t) {
  int64_t n = sf__str_len(s), m = sf__str_len(t);
  return m <= n && memcmp(sf__str_data(s), sf__str_data(t), (size_t)m) == 0;
}

bool sf_str_ends_with(sf_str *s, sf_str *t) {
  int64_t n = sf__str_len(s), m = sf__str_len(t);
  return m <= n && memcmp(sf__str_data(s) + n - m, sf__str_data(t), (size_t)m) == 0;
}

/* ------------------------------------------------------ transforms */

sf_str *sf_str_strip(sf_str *s) {
  const unsigned char *p = (const unsigned char *)sf__str_data(s);
  int64_t lo = 0, hi = sf__str_len(s);
  while (lo < hi && is_space(p[lo]))
    lo++;
  while (hi > lo && is_space(p[hi - 1]))
    hi--;
  if (lo == 0 && hi == sf__str_len(s))
    return same(s);
  return sf_str_new((const char *)p + lo, hi - lo);
}

static sf_str *map_case(sf_str *s, char from_lo, char from_hi, int delta) {
  const char *p = sf__str_data(s);
  int64_t n = sf__str_len(s), i = 0;
  while (i < n && !(p[i] >= from_lo && p[i] <= from_hi))
    i++;
  if (i >= n)
    return same(s);
  sf_str *r = sf__str_alloc(n);
  memcpy(r->data, p, (size_t)n);
  for (; i < n; i++)
    if (r->data[i] >= from_lo && r->data[i] <= from_hi)
      r->data[i] = (char)(r->data[i] + delta);
  return r;
}

sf_str *sf_str_lower(sf_str *s) { return map_case(s, 'A', 'Z', 'a' - 'A'); }
sf_str *sf_str_upper(sf_str *s) { return map_case(s, 'a', 'z', 'A' - 'a'); }

/* Every occurrence, left to right, never overlapping (Python's replace). */
sf_str *sf_str_replace(sf_str *s, sf_str *from, sf_str *to, const sf_loc *loc) {
  const char *p = sf__str_data(s), *f = sf__str_data(from), *t = sf__str_data(to);
  int64_t n = sf__str_len(s), m = sf__str_len(from), k = sf__str_len(to);
  if (m == 0)
    sf_runtime_error(loc, "replace: the text to replace is empty");
  int64_t count = 0;
  for (const char *at = p; (at = memmem(at, (size_t)(p + n - at), f, (size_t)m)); at += m)
    count++;
  if (count == 0)
    return same(s);
  if (k > m && count > (INT64_MAX / 2 - n) / (k - m))
    sf_runtime_error(loc, "replace: the result is too large");
  sf_str *r = sf__str_alloc(n + count * (k - m));
  char *w = r->data;
  const char *from_p = p;
  for (int64_t i = 0; i < count; i++) {
    const char *at = memmem(from_p, (size_t)(p + n - from_p), f, (size_t)m);
    memcpy(w, from_p, (size_t)(at - from_p));
    w += at - from_p;
    memcpy(w, t, (size_t)k);
    w += k;
    from_p = at + m;
  }
  memcpy(w, from_p, (size_t)(p + n - from_p));
  return r;
}

sf_str *sf_str_join(sf_str *sep, sf_array *xs) {
  int64_t n = xs ? xs->len : 0, m = sf__str_len(sep);
  if (n == 0)
    return sf_str_empty();
  sf_str **v = xs->data;
  if (n == 1)
    return same(v[0]);
  int64_t total = m * (n - 1);
  for (int64_t i = 0; i < n; i++) {
    if (sf__str_len(v[i]) > INT64_MAX / 2 - total)
      sf_runtime_error(NULL, "join: the result is too large");
    total += sf__str_len(v[i]);
  }
  sf_str *r = sf__str_alloc(total);
  char *w = r->data;
  for (int64_t i = 0; i < n; i++) {
    if (i) {
      memcpy(w, sf__str_data(sep), (size_t)m);
      w += m;
    }
    memcpy(w, sf__str_data(v[i]), (size_t)sf__str_len(v[i]));
    w += sf__str_len(v[i]);
  }
  return r;
}

/* ------------------------------------------------------ code points */

/* The code point of the UTF-8 sequence at p[i] (n bytes in all), its
 * length into *len; a malformed sequence (a stray continuation byte, a
 * truncated or overlong one, a surrogate, past U+10FFFF) is a runtime
 * error at loc naming what and the offset. */
static int64_t decode_at(const unsigned char *p, int64_t n, int64_t i, int64_t *len,
                         const char *what, const sf_loc *loc) {
  size_t bad = 0, k = sf__utf8_seq(p + i, (size_t)(n - i), &bad);
  if (k == 0)
    sf_runtime_error(loc, "%s: invalid UTF-8 at byte %" PRId64 " (0x%02x)", what, i, p[i]);
  int64_t cp = k == 1 ? p[i] : p[i] & (0x7F >> k);
  for (size_t j = 1; j < k; j++)
    cp = cp << 6 | (p[i + j] & 0x3F);
  *len = (int64_t)k;
  return cp;
}

int64_t sf_str_ord(sf_str *s, const sf_loc *loc) {
  const unsigned char *p = (const unsigned char *)sf__str_data(s);
  int64_t n = sf__str_len(s), k = 0;
  if (n == 0)
    sf_runtime_error(loc, "ord: expected one character, found the empty string");
  int64_t cp = decode_at(p, n, 0, &k, "ord", loc);
  if (k != n)
    sf_runtime_error(loc, "ord: expected one character, found a string of %" PRId64 " bytes "
                     "(its first character takes %" PRId64 ")", n, k);
  return cp;
}

sf_str *sf_str_chr(int64_t cp, const sf_loc *loc) {
  if (cp < 0 || cp > 0x10FFFF)
    sf_runtime_error(loc, "chr: %" PRId64 " is outside the Unicode range [0, 0x10FFFF]", cp);
  if (cp >= 0xD800 && cp <= 0xDFFF)
    sf_runtime_error(loc, "chr: %" PRId64 " (U+%04" PRIX64 ") is a surrogate, not a character",
                     cp, cp);
  char b[4];
  int64_t k;
  if (cp < 0x80) {
    b[0] = (char)cp;
    k = 1;
  } else if (cp < 0x800) {
    b[0] = (char)(0xC0 | cp >> 6);
    b[1] = (char)(0x80 | (cp & 0x3F));
    k = 2;
  } else if (cp < 0x10000) {
    b[0] = (char)(0xE0 | cp >> 12);
    b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    b[2] = (char)(0x80 | (cp & 0x3F));
    k = 3;
  } else {
    b[0] = (char)(0xF0 | cp >> 18);
    b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    k = 4;
  }
  return sf_str_new(b, k);
}

sf_array *sf_str_codepoints(sf_str *s, const sf_loc *loc) {
  const unsigned char *p = (const unsigned char *)sf__str_data(s);
  int64_t n = sf__str_len(s), count = 0;
  for (int64_t i = 0; i < n; i++)
    count += !is_cont(p[i]);
  sf_array *r = sf_array_new(&sf_type_i64, count, loc);
  int64_t *d = r->data, m = 0;
  for (int64_t i = 0, k = 0; i < n; i += k) {
    int64_t cp = decode_at(p, n, i, &k, "codepoints", loc);
    if (m < count)
      d[m] = cp;
    m++;
  }
  return r;
}
