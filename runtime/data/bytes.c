/*
 * bytes.c — a file's raw bytes as an sflow i32[] (one element per byte,
 * 0..255), and back.
 *
 * Key design choice: i32[], not str.  A str is UTF-8 text by the
 * language's rules (slicing checks sequence boundaries), and arbitrary
 * bytes are not text; an i32[] indexes and does arithmetic on each byte
 * with no conversion, which is what byte-level code (a tokenizer's byte
 * fallback, a header check, a checksum) does.  The cost is four bytes of
 * memory per byte, which matters only for files that should be read in
 * a typed format (.npy, CSV) anyway.
 */
#include <errno.h>
#include <inttypes.h>

#include "data.h"

sf_array *sf_std_data_read_bytes(sf_str *path, const sf_loc *loc) {
  sf__view v;
  sf__view_open_or_fail(&v, path, loc);
  if (v.len > (size_t)INT32_MAX * 4) {
    size_t n = v.len;
    sf__view_close(&v);
    sf_runtime_error(loc, "read_bytes: %s is %zu bytes, too large for an i32[] of bytes (use "
                     "read_npy or read_csv for data)", sf__str_data(path), n);
  }
  sf_array *a = sf_array_new(&sf_type_i32, (int64_t)v.len, loc);
  const unsigned char *s = (const unsigned char *)v.data;
  int32_t *d = a->data;
  for (size_t i = 0; i < v.len; i++)
    d[i] = s[i];
  sf__view_close(&v);
  return a;
}

void sf_std_data_write_bytes(sf_str *path, sf_array *bytes, const sf_loc *loc) {
  int64_t n = bytes ? bytes->len : 0;
  if (bytes)
    sf_array_host(bytes);
  char *buf = sf_alloc(n ? (size_t)n : 1);
  for (int64_t i = 0; i < n; i++) {
    int32_t v = ((int32_t *)bytes->data)[i];
    if (v < 0 || v > 255) {
      sf_free(buf);
      sf_runtime_error(loc, "write_bytes: element %" PRId64 " is %d, not a byte (0..255)", i, v);
    }
    buf[i] = (char)v;
  }
  sf__write_or_fail(path, buf, (size_t)n, sf_free, buf, loc);
}
