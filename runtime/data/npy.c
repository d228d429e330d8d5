/*
 * npy.c — NumPy's .npy files (format versions 1.0, 2.0 and 3.0), read and
 * written: f32, f64, i32, i64 and u8 elements, C order, little-endian.
 *
 * A file is the magic "\x93NUMPY", a version, a header length (2 bytes in
 * version 1, 4 in 2 and 3), and a header that is a Python dict literal
 * ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") padded
 * so the data starts on a 64-byte boundary.
 *
 * Key design choice: the header is parsed by a small strict reader of
 * exactly that literal, with every length checked against the file's
 * size before it is used, so a damaged or hostile file (a header length of
 * 4 GB, a shape whose product overflows, a truncated data block) is an
 * error naming the file and the byte offset, never a large allocation or a
 * read past the end.  What the format allows and std.data does not
 * (Fortran order, big-endian, other dtypes, object arrays) is refused by
 * name with the way out, rather than converted silently.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>

#include "data.h"

typedef struct hreader {
  const char *p, *end, *start; /* start: byte 0 of the file, for offsets */
  const char *name;
  char *err;
  size_t errlen;
} hreader;

__attribute__((format(printf, 3, 4))) static bool herr(hreader *r, const char *at,
                                                       const char *fmt, ...) {
  int n = snprintf(r->err, r->errlen, "%s: byte %td: ", r->name, at - r->start);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < r->errlen)
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

static void skip_ws(hreader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n'))
    r->p++;
}

static bool expect(hreader *r, char c) {
  skip_ws(r);
  if (r->p >= r->end || *r->p != c)
    return herr(r, r->p, "malformed .npy header: expected '%c'", c);
  r->p++;
  return true;
}

/* A quoted Python string (no escapes: the header's keys and dtypes have
 * none) into buf. */
static bool read_string(hreader *r, char *buf, size_t n) {
  skip_ws(r);
  if (r->p >= r->end || (*r->p != '\'' && *r->p != '"'))
    return herr(r, r->p, "malformed .npy header: expected a quoted string");
  char q = *r->p++;
  const char *s = r->p;
  while (r->p < r->end && *r->p != q && *r->p != '\\')
    r->p++;
  if (r->p >= r->end || *r->p != q)
    return herr(r, s - 1, "malformed .npy header: an unterminated or escaped string");
  size_t len = (size_t)(r->p - s);
  r->p++;
  if (len >= n)
    return herr(r, s, "malformed .npy header: a string of %zu bytes", len);
  memcpy(buf, s, len);
  buf[len] = 0;
  return true;
}

static bool read_shape(hreader *r, sf__npy *h) {
  if (!expect(r, '('))
    return false;
  h->ndim = 0;
  h->count = 1;
  for (;;) {
    skip_ws(r);
    if (r->p < r->end && *r->p == ')') {
      r->p++;
      return true;
    }
    const char *at = r->p;
    int64_t d;
    bool ovf;
    const char *e = sf__parse_int64(r->p, r->end, &d, &ovf);
    if (!e || d < 0)
      return herr(r, at, "malformed .npy header: a shape entry must be a non-negative integer");
    r->p = e;
    if (h->ndim == SF__NPY_MAX_DIMS)
      return herr(r, at, "the shape has more than %d dimensions", SF__NPY_MAX_DIMS);
    h->shape[h->ndim++] = d;
    if (d && h->count > INT64_MAX / 16 / d)
      return herr(r, at, "the shape's element count overflows");
    h->count *= d;
    skip_ws(r);
    if (r->p < r->end && *r->p == ',')
      r->p++;
    else if (r->p >= r->end || *r->p != ')')
      return herr(r, r->p, "malformed .npy header: expected ',' or ')' in the shape");
  }
}

/* descr: '<f4' and friends; '|' and '=' count as little-endian for one
 * byte and native (x86-64, aarch64: little) order. */
static bool read_descr(hreader *r, const char *at, const char *d, sf__npy *h) {
  static const struct { const char *code; int32_t kind, size; const char *name; } known[] = {
      {"f4", SF_F32, 4, "f32"}, {"f8", SF_F64, 8, "f64"}, {"i4", SF_I32, 4, "i32"},
      {"i8", SF_I64, 8, "i64"}, {"u1", SF__NPY_U8, 1, "u8"}};
  char order = d[0];
  const char *code = d;
  if (order == '<' || order == '>' || order == '|' || order == '=')
    code++;
  else
    order = '=';
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (!strcmp(code, known[i].code)) {
      if (order == '>' && known[i].size > 1)
        return herr(r, at, "big-endian data (dtype '%s') is not supported: save it "
                    "little-endian (a.astype('<%s'))", d, code);
      h->kind = known[i].kind;
      h->item_size = known[i].size;
      return true;
    }
  return herr(r, at, "unsupported dtype '%s': std.data reads f32 ('<f4'), f64 ('<f8'), i32 "
              "('<i4'), i64 ('<i8') and u8 ('|u1')", d);
}

bool sf__npy_parse_header(const char *buf, size_t len, const char *name, sf__npy *h,
                          char *err, size_t errlen) {
  hreader r = {.p = buf, .end = buf + len, .start = buf, .name = name, .err = err,
               .errlen = errlen};
  *h = (sf__npy){0};
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
    return herr(&r, buf, "not a .npy file (it does not start with \"\\x93NUMPY\")");
  unsigned major = (unsigned char)buf[6], minor = (unsigned char)buf[7];
  size_t hlen, pre;
  if (major == 1) {
    hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12)
      return herr(&r, buf + len, "truncated .npy file (%zu bytes)", len);
    hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8 |
           (size_t)(unsigned char)buf[10] << 16 | (size_t)(unsigned char)buf[11] << 24;
    pre = 12;
  } else {
    return herr(&r, buf + 6, "unsupported .npy format version %u.%u (1.0, 2.0 and 3.0 are "
                "read)", major, minor);
  }
  if (hlen > len - pre)
    return herr(&r, buf + 8, "the header length %zu runs past the end of the file (%zu bytes)",
                hlen, len);
  r.p = buf + pre;
  r.end = buf + pre + hlen;
  char key[32], descr[64] = "";
  bool have_descr = false, have_order = false, have_shape = false;
  if (!expect(&r, '{'))
    return false;
  for (;;) {
    skip_ws(&r);
    if (r.p < r.end && *r.p == '}') {
      r.p++;
      break;
    }
    const char *at = r.p;
    if (!read_string(&r, key, sizeof key) || !expect(&r, ':'))
      return false;
    skip_ws(&r);
    const char *vat = r.p;
    if (!strcmp(key, "descr")) {
      if (r.p < r.end && *r.p == '[')
        return herr(&r, vat, "structured dtypes are not supported (std.data reads arrays of "
                    "one number type)");
      if (!read_string(&r, descr, sizeof descr) || !read_descr(&r, vat, descr, h))
        return false;
      have_descr = true;
    } else if (!strcmp(key, "fortran_order")) {
      if ((size_t)(r.end - r.p) >= 5 && !memcmp(r.p, "False", 5)) {
        r.p += 5;
      } else if ((size_t)(r.end - r.p) >= 4 && !memcmp(r.p, "True", 4)) {
        return herr(&r, vat, "Fortran-order data is not supported: save a C-order array "
                    "(np.ascontiguousarray(a))");
      } else {
        return herr(&r, vat, "malformed .npy header: fortran_order must be True or False");
      }
      have_order = true;
    } else if (!strcmp(key, "shape")) {
      if (!read_shape(&r, h))
        return false;
      have_shape = true;
    } else {
      return herr(&r, at, "malformed .npy header: unknown key '%s'", key);
    }
    skip_ws(&r);
    if (r.p < r.end && *r.p == ',')
      r.p++;
    else if (r.p >= r.end || *r.p != '}')
      return herr(&r, r.p, "malformed .npy header: expected ',' or '}'");
  }
  if (!have_descr || !have_order || !have_shape)
    return herr(&r, buf + pre, "malformed .npy header: it lacks '%s'",
                !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
  h->data_off = pre + hlen;
  size_t need = (size_t)h->count * (size_t)h->item_size;
  if (need > len - h->data_off)
    return herr(&r, buf + len, "truncated .npy file: the shape needs %zu bytes of data, the "
                "file has %zu", need, len - h->data_off);
  return true;
}

static const char *npy_kind_name(int32_t k) {
  switch (k) {
  case SF_F32: return "f32";
  case SF_F64: return "f64";
  case SF_I32: return "i32";
  case SF_I64: return "i64";
  case SF__NPY_U8: return "u8";
  default: return "?";
  }
}

static void open_npy(sf_str *path, sf__view *v, sf__npy *h, const sf_loc *loc) {
  sf__view_open_or_fail(v, path, loc);
  char err[512];
  if (!sf__npy_parse_header(v->data, v->len, sf__str_data(path), h, err, sizeof err)) {
    sf__view_close(v);
    sf_runtime_error(loc, "%s", err);
  }
}

void sf_std_data_npy_read(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc) {
  sf__view v;
  sf__npy h;
  open_npy(path, &v, &h, loc);
  const sf_type *dt = NULL, *st = NULL;
  for (int32_t i = 0; i < out_type->nfields; i++) {
    if (!strcmp(out_type->fields[i].name, "data"))
      dt = out_type->fields[i].type->elem;
    if (!strcmp(out_type->fields[i].name, "shape"))
      st = out_type->fields[i].type->elem;
  }
  sf_array **datap = sf__field(out_type, out, "data", SF_ARRAY, loc);
  sf_array **shapep = sf__field(out_type, out, "shape", SF_ARRAY, loc);
  int32_t want = dt ? dt->kind : -1;
  bool fits = want == h.kind || (h.kind == SF__NPY_U8 && (want == SF_I32 || want == SF_I64));
  if (!fits) {
    sf__view_close(&v);
    sf_runtime_error(loc, "%s holds %s data; read it with data.read_npy_%s", sf__str_data(path),
                     npy_kind_name(h.kind), h.kind == SF__NPY_U8 ? "i32" : npy_kind_name(h.kind));
  }
  sf_array *a = sf_array_new(dt, h.count, loc);
  const unsigned char *src = (const unsigned char *)v.data + h.data_off;
  if (h.kind == SF__NPY_U8 && want == SF_I32)
    for (int64_t i = 0; i < h.count; i++)
      ((int32_t *)a->data)[i] = src[i];
  else if (h.kind == SF__NPY_U8)
    for (int64_t i = 0; i < h.count; i++)
      ((int64_t *)a->data)[i] = src[i];
  else if (h.count)
    memcpy(a->data, src, (size_t)h.count * (size_t)h.item_size);
  sf__view_close(&v);
  sf_array *s = sf_array_new(st, h.ndim, loc);
  for (int32_t i = 0; i < h.ndim; i++)
    ((int64_t *)s->data)[i] = h.shape[i];
  *datap = a;
  *shapep = s;
}

sf_str *sf_std_data_npy_dtype(sf_str *path, const sf_loc *loc) {
  sf__view v;
  sf__npy h;
  open_npy(path, &v, &h, loc);
  sf__view_close(&v);
  const char *n = npy_kind_name(h.kind);
  return sf_str_new(n, (int64_t)strlen(n));
}

void sf_std_data_npy_write(sf_str *path, sf_array *data, sf_array *shape, bool as_u8,
                           const sf_loc *loc) {
  int32_t kind = data ? data->elem->kind : SF_F32;
  const char *descr = NULL;
  switch (kind) {
  case SF_F32: descr = "<f4"; break;
  case SF_F64: descr = "<f8"; break;
  case SF_I32: descr = as_u8 ? "|u1" : "<i4"; break;
  case SF_I64: descr = as_u8 ? "|u1" : "<i8"; break;
  default:
    sf_runtime_error(loc, "write_npy: %s elements cannot be stored (f32, f64, i32, i64)",
                     data->elem->name ? data->elem->name : "these");
  }
  int64_t n = data ? data->len : 0, nd = shape ? shape->len : 0, count = 1;
  if (nd > SF__NPY_MAX_DIMS)
    sf_runtime_error(loc, "write_npy: a shape of %" PRId64 " dimensions (at most %d)", nd,
                     SF__NPY_MAX_DIMS);
  sf__buf hdr;
  sf__buf_init(&hdr, NULL, 0);
  char tmp[64];
  int k = snprintf(tmp, sizeof tmp, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  sf__buf_put(&hdr, tmp, (size_t)k);
  for (int64_t i = 0; i < nd; i++) {
    int64_t d = ((int64_t *)shape->data)[i];
    if (d < 0 || (d && count > INT64_MAX / d)) {
      sf__buf_free(&hdr);
      sf_runtime_error(loc, "write_npy: shape entry %" PRId64 " is %" PRId64, i, d);
    }
    count *= d;
    k = snprintf(tmp, sizeof tmp, "%s%" PRId64, i ? ", " : "", d);
    sf__buf_put(&hdr, tmp, (size_t)k);
  }
  if (nd == 1)
    sf__buf_put(&hdr, ",", 1);
  sf__buf_put(&hdr, "), }", 4);
  if (count != n) {
    sf__buf_free(&hdr);
    sf_runtime_error(loc, "write_npy: the shape holds %" PRId64 " elements, the data %" PRId64,
                     count, n);
  }
  /* Version 1 unless the header needs more than 65535 bytes; padded with
   * spaces and a newline so the data starts on a 64-byte boundary. */
  size_t pre = hdr.len + 1 + 10 <= 65535 ? 10 : 12;
  size_t total = (pre + hdr.len + 1 + 63) / 64 * 64;
  size_t hlen = total - pre;
  size_t isz = as_u8 ? 1 : (size_t)data->elem->size;
  size_t bytes = total + (size_t)n * isz;
  char *out = sf_alloc(bytes ? bytes : 1);
  memcpy(out, "\x93NUMPY", 6);
  out[6] = pre == 10 ? 1 : 2;
  out[7] = 0;
  for (size_t i = 0; i < pre - 8; i++)
    out[8 + i] = (char)(hlen >> (8 * i));
  memcpy(out + pre, hdr.data, hdr.len);
  memset(out + pre + hdr.len, ' ', hlen - hdr.len - 1);
  out[total - 1] = '\n';
  sf__buf_free(&hdr);
  if (data)
    sf_array_host(data);
  if (as_u8) {
    for (int64_t i = 0; i < n; i++) {
      int64_t v = kind == SF_I32 ? ((int32_t *)data->data)[i] : ((int64_t *)data->data)[i];
      if (v < 0 || v > 255) {
        sf_free(out);
        sf_runtime_error(loc, "write_npy: element %" PRId64 " is %" PRId64 ", not a u8 (0..255)",
                         i, v);
      }
      out[total + (size_t)i] = (char)v;
    }
  } else if (n) {
    memcpy(out + total, data->data, (size_t)n * isz);
  }
  sf__write_or_fail(path, out, bytes, sf_free, out, loc);
}

/* The stdlib's externs, one per element type (externs are not
 * overloaded): each reads into its own struct (shape, data). */
void sf_std_data_read_npy_f32(void *out, const sf_type *t, sf_str *path, const sf_loc *loc) {
  sf_std_data_npy_read(out, t, path, loc);
}
void sf_std_data_read_npy_f64(void *out, const sf_type *t, sf_str *path, const sf_loc *loc) {
  sf_std_data_npy_read(out, t, path, loc);
}
void sf_std_data_read_npy_i32(void *out, const sf_type *t, sf_str *path, const sf_loc *loc) {
  sf_std_data_npy_read(out, t, path, loc);
}
void sf_std_data_read_npy_i64(void *out, const sf_type *t, sf_str *path, const sf_loc *loc) {
  sf_std_data_npy_read(out, t, path, loc);
}
void sf_std_data_write_npy_f32(sf_str *path, sf_array *data, sf_array *shape,
                               const sf_loc *loc) {
  sf_std_data_npy_write(path, data, shape, false, loc);
}
void sf_std_data_write_npy_f64(sf_str *path, sf_array *data, sf_array *shape,
                               const sf_loc *loc) {
  sf_std_data_npy_write(path, data, shape, false, loc);
}
void sf_std_data_write_npy_i32(sf_str *path, sf_array *data, sf_array *shape,
                               const sf_loc *loc) {
  sf_std_data_npy_write(path, data, shape, false, loc);
}
void sf_std_data_write_npy_i64(sf_str *path, sf_array *data, sf_array *shape,
                               const sf_loc *loc) {
  sf_std_data_npy_write(path, data, shape, false, loc);
}
void sf_std_data_write_npy_u8(sf_str *path, sf_array *data, sf_array *shape,
                              const sf_loc *loc) {
  sf_std_data_npy_write(path, data, shape, true, loc);
}
