/*
 * gguf.c — reads GGUF files (ggml's container for LLM weights, versions 2
 * and 3): the header, every metadata key/value (scalars, strings, arrays),
 * the tensor infos and the aligned data section, over a read-only mapping
 * of the file (fileview.c).
 *
 * The format (ggml/docs/gguf.md), all little-endian:
 *   u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count;
 *   kv_count × { string key, u32 value_type, value };
 *   tensor_count × { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type,
 *                    u64 offset };
 *   padding to general.alignment (default 32), then the tensor data, each
 *   tensor at data_start + offset (a multiple of the alignment).
 * A string is u64 length + bytes (no NUL); an array is u32 element type,
 * u64 count, then the elements.
 *
 * Key design choice: a cursor that fails, not one that trusts.  Each read
 * goes through take(), which checks the bytes are there, so a truncated or
 * hostile file ends in a message naming the field and its offset; sizes
 * are computed with overflow checks; nothing is copied (keys, strings and
 * tensor data stay pointers into the mapping), so opening a 100 MB model
 * costs the parse of its few-hundred-KB header.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "gguf.h"

/* ----------------------------------------------------------- types */

static const char *const vtype_names[SF__GGUF_NVTYPES] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
static const uint8_t vtype_size[SF__GGUF_NVTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *sf__gguf_vtype_name(uint32_t t) { return t < SF__GGUF_NVTYPES ? vtype_names[t] : "?"; }

/* ggml_type: name, bytes per block, elements per block (ggml.c's
 * type_traits).  Ids 4 and 5 (Q4_2, Q4_3) were removed from ggml. */
static const struct {
  const char *name;
  uint16_t block_bytes, block;
} ggml_types[] = {
    [0] = {"F32", 4, 1},        [1] = {"F16", 2, 1},          [2] = {"Q4_0", 18, 32},
    [3] = {"Q4_1", 20, 32},     [6] = {"Q5_0", 22, 32},       [7] = {"Q5_1", 24, 32},
    [8] = {"Q8_0", 34, 32},     [9] = {"Q8_1", 36, 32},       [10] = {"Q2_K", 84, 256},
    [11] = {"Q3_K", 110, 256},  [12] = {"Q4_K", 144, 256},    [13] = {"Q5_K", 176, 256},
    [14] = {"Q6_K", 210, 256},  [15] = {"Q8_K", 292, 256},    [16] = {"IQ2_XXS", 66, 256},
    [17] = {"IQ2_XS", 74, 256}, [18] = {"IQ3_XXS", 98, 256},  [19] = {"IQ1_S", 50, 256},
    [20] = {"IQ4_NL", 18, 32},  [21] = {"IQ3_S", 110, 256},   [22] = {"IQ2_S", 82, 256},
    [23] = {"IQ4_XS", 136, 256}, [24] = {"I8", 1, 1},         [25] = {"I16", 2, 1},
    [26] = {"I32", 4, 1},       [27] = {"I64", 8, 1},         [28] = {"F64", 8, 1},
    [29] = {"IQ1_M", 56, 256},  [30] = {"BF16", 2, 1},
};
#define NGGML ((uint32_t)(sizeof ggml_types / sizeof ggml_types[0]))

const char *sf__ggml_type_name(uint32_t t) {
  return t < NGGML && ggml_types[t].name ? ggml_types[t].name : "?";
}

uint64_t sf__ggml_bytes(uint32_t t, int64_t n) {
  if (t >= NGGML || !ggml_types[t].name || n < 0 || n % ggml_types[t].block)
    return 0;
  uint64_t blocks = (uint64_t)n / ggml_types[t].block;
  if (blocks > UINT64_MAX / ggml_types[t].block_bytes)
    return 0;
  return blocks * ggml_types[t].block_bytes;
}

/* ---------------------------------------------------------- cursor */

typedef struct {
  const char *data;
  size_t len, pos;
  char *err;
  size_t errlen;
} cursor;

static bool fail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(cursor *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, c->errlen, fmt, ap);
  va_end(ap);
  return false;
}

/* The next n bytes, or NULL (and an error naming what) past the end. */
static const char *take(cursor *c, uint64_t n, const char *what) {
  if (n > c->len - c->pos) {
    fail(c, "%s at offset %zu: the file ends (%zu bytes) before its %" PRIu64 " bytes", what,
         c->pos, c->len, n);
    return NULL;
  }
  const char *p = c->data + c->pos;
  c->pos += n;
  return p;
}

static bool u32(cursor *c, uint32_t *v, const char *what) {
  const char *p = take(c, 4, what);
  if (p)
    memcpy(v, p, 4);
  return p != NULL;
}

static bool u64(cursor *c, uint64_t *v, const char *what) {
  const char *p = take(c, 8, what);
  if (p)
    memcpy(v, p, 8);
  return p != NULL;
}

static bool string(cursor *c, const char **s, uint64_t *n, const char *what) {
  if (!u64(c, n, what))
    return false;
  *s = take(c, *n, what);
  return *s != NULL;
}

/* ------------------------------------------------------------- parse */

/* Skips one value of type t (validating it), the key named for errors. */
static bool skip_value(cursor *c, uint32_t t, const sf__gguf_kv *kv) {
  const char *s;
  uint64_t n;
  if (t >= SF__GGUF_NVTYPES)
    return fail(c, "metadata \"%.*s\" at offset %zu: unknown value type %" PRIu32, (int)kv->key_len,
                kv->key, c->pos, t);
  if (t == SF__GGUF_STR)
    return string(c, &s, &n, "metadata string");
  if (t == SF__GGUF_ARR)
    return fail(c, "metadata \"%.*s\": an array of arrays, which GGUF does not define",
                (int)kv->key_len, kv->key);
  return take(c, vtype_size[t], "metadata value") != NULL;
}

static bool parse_kv(cursor *c, sf__gguf_kv *kv) {
  uint64_t klen;
  if (!string(c, &kv->key, &klen, "metadata key"))
    return false;
  if (klen > UINT32_MAX)
    return fail(c, "metadata key at offset %zu: %" PRIu64 " bytes long", c->pos, klen);
  kv->key_len = (uint32_t)klen;
  if (!u32(c, &kv->type, "metadata value type"))
    return false;
  kv->n = 1;
  kv->elem = 0;
  if (kv->type != SF__GGUF_ARR) {
    kv->val = c->data + c->pos;
    return skip_value(c, kv->type, kv);
  }
  if (!u32(c, &kv->elem, "array element type") || !u64(c, &kv->n, "array length"))
    return false;
  kv->val = c->data + c->pos;
  if (kv->elem >= SF__GGUF_NVTYPES || kv->elem == SF__GGUF_ARR)
    return skip_value(c, kv->elem, kv);
  if (kv->elem != SF__GGUF_STR) {
    uint64_t sz = vtype_size[kv->elem];
    if (kv->n > (c->len - c->pos) / sz)
      return fail(c, "metadata \"%.*s\": an array of %" PRIu64 " %s runs past the end of the file",
                  (int)kv->key_len, kv->key, kv->n, vtype_names[kv->elem]);
    c->pos += kv->n * sz;
    return true;
  }
  for (uint64_t i = 0; i < kv->n; i++) {
    const char *s;
    uint64_t n;
    if (!string(c, &s, &n, "array string"))
      return fail(c, "metadata \"%.*s\": string %" PRIu64 " of %" PRIu64 " runs past the end of the file",
                  (int)kv->key_len, kv->key, i, kv->n);
  }
  return true;
}

static bool parse_tensor(cursor *c, sf__gguf_tensor *t, int64_t index) {
  uint64_t nlen, d;
  uint32_t nd;
  if (!string(c, &t->name, &nlen, "tensor name"))
    return false;
  if (nlen > 256)
    return fail(c, "tensor %" PRId64 " at offset %zu: a name of %" PRIu64 " bytes (at most 256)",
                index, c->pos, nlen);
  t->name_len = (uint32_t)nlen;
  if (!u32(c, &nd, "tensor n_dims"))
    return false;
  if (nd < 1 || nd > 4)
    return fail(c, "tensor \"%.*s\": n_dims is %" PRIu32 " (1..4)", (int)nlen, t->name, nd);
  t->ndim = (int32_t)nd;
  t->numel = 1;
  for (uint32_t i = 0; i < nd; i++) {
    if (!u64(c, &d, "tensor dims"))
      return false;
    if (d == 0 || d > (uint64_t)INT64_MAX / (uint64_t)t->numel)
      return fail(c, "tensor \"%.*s\": dims[%" PRIu32 "] = %" PRIu64 " (zero, or the product overflows)",
                  (int)nlen, t->name, i, d);
    t->dims[i] = (int64_t)d;
    t->numel *= (int64_t)d;
  }
  for (int i = (int)nd; i < 4; i++)
    t->dims[i] = 1;
  if (!u32(c, &t->type, "tensor type") || !u64(c, &t->offset, "tensor offset"))
    return false;
  if (t->type >= NGGML || !ggml_types[t->type].name)
    return fail(c, "tensor \"%.*s\": unknown ggml type id %" PRIu32, (int)nlen, t->name, t->type);
  if (t->dims[0] % ggml_types[t->type].block)
    return fail(c, "tensor \"%.*s\": a row of %" PRId64 " is not a whole number of %s blocks (%d)",
                (int)nlen, t->name, t->dims[0], ggml_types[t->type].name, ggml_types[t->type].block);
  t->bytes = sf__ggml_bytes(t->type, t->numel);
  if (!t->bytes)
    return fail(c, "tensor \"%.*s\": its size overflows", (int)nlen, t->name);
  return true;
}

/* general.alignment, when present, must be a u32 power of two. */
static bool alignment_of(cursor *c, sf__gguf *g) {
  g->alignment = 32;
  const sf__gguf_kv *kv = sf__gguf_find(g, "general.alignment");
  if (!kv)
    return true;
  uint32_t a;
  if (kv->type != SF__GGUF_U32)
    return fail(c, "metadata \"general.alignment\" is a %s, not a u32", sf__gguf_vtype_name(kv->type));
  memcpy(&a, kv->val, 4);
  if (a == 0 || (a & (a - 1)))
    return fail(c, "metadata \"general.alignment\" is %" PRIu32 ", not a power of two", a);
  g->alignment = a;
  return true;
}

static bool parse(cursor *c, sf__gguf *g) {
  uint32_t magic;
  uint64_t nt, nkv;
  if (!u32(c, &magic, "magic"))
    return false;
  if (memcmp(&magic, "GGUF", 4))
    return fail(c, "magic: the file does not start with \"GGUF\" (not a GGUF file)");
  if (!u32(c, &g->version, "version"))
    return false;
  if (g->version != 2 && g->version != 3)
    return fail(c, "version: %" PRIu32 " (sflow reads GGUF versions 2 and 3)", g->version);
  if (!u64(c, &nt, "tensor_count") || !u64(c, &nkv, "metadata_kv_count"))
    return false;
  /* Each key takes at least 12 bytes and each tensor info at least 28:
   * counts the file cannot hold are refused before anything is allocated. */
  if (nkv > (c->len - c->pos) / 12)
    return fail(c, "metadata_kv_count: %" PRIu64 " keys cannot fit in %zu bytes", nkv, c->len);
  if (nt > (c->len - c->pos) / 28)
    return fail(c, "tensor_count: %" PRIu64 " tensors cannot fit in %zu bytes", nt, c->len);
  g->nkv = (int64_t)nkv;
  g->ntensors = (int64_t)nt;
  g->kv = sf_alloc((nkv ? nkv : 1) * sizeof *g->kv);
  g->tensors = sf_alloc((nt ? nt : 1) * sizeof *g->tensors);
  for (uint64_t i = 0; i < nkv; i++)
    if (!parse_kv(c, &g->kv[i]))
      return false;
  if (!alignment_of(c, g))
    return false;
  for (uint64_t i = 0; i < nt; i++)
    if (!parse_tensor(c, &g->tensors[i], (int64_t)i))
      return false;
  uint64_t start = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
  for (uint64_t i = 0; i < nt; i++) {
    sf__gguf_tensor *t = &g->tensors[i];
    if (t->offset % g->alignment)
      return fail(c, "tensor \"%.*s\": offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                  (int)t->name_len, t->name, t->offset, g->alignment);
    if (start > c->len || t->offset > c->len - start || t->bytes > c->len - start - t->offset)
      return fail(c, "tensor \"%.*s\": its %" PRIu64 " bytes at data offset %" PRIu64
                  " lie outside the file (%zu bytes, data from %" PRIu64 ")",
                  (int)t->name_len, t->name, t->bytes, t->offset, c->len, start);
    t->data = c->data + start + t->offset;
  }
  return true;
}

bool sf__gguf_parse(sf__gguf *g, const char *data, size_t len, char *err, size_t errlen) {
  memset(g, 0, sizeof *g);
  cursor c = {data, len, 0, err, errlen};
  if (parse(&c, g))
    return true;
  sf_free(g->kv);
  sf_free(g->tensors);
  g->kv = NULL;
  g->tensors = NULL;
  return false;
}

bool sf__gguf_open(sf__gguf *g, const char *path, char *err, size_t errlen) {
  sf__view v;
  memset(g, 0, sizeof *g);
  if (!sf__view_open(&v, path)) {
    snprintf(err, errlen, "%s: cannot read it: %s", path, strerror(errno));
    return false;
  }
  char why[400];
  if (!sf__gguf_parse(g, v.data, v.len, why, sizeof why)) {
    snprintf(err, errlen, "%s: %s", path, why);
    sf__view_close(&v);
    return false;
  }
  size_t n = strlen(path) + 1;
  char *name = sf_alloc(n);
  memcpy(name, path, n);
  v.name = name;
  g->view = v;
  return true;
}

void sf__gguf_close(sf__gguf *g) {
  sf__view_close(&g->view);
  sf_free((void *)g->view.name);
  sf_free(g->kv);
  sf_free(g->tensors);
  memset(g, 0, sizeof *g);
}

/* ------------------------------------------------------------ lookup */

const sf__gguf_kv *sf__gguf_find(const sf__gguf *g, const char *key) {
  size_t n = strlen(key);
  for (int64_t i = 0; i < g->nkv; i++)
    if (g->kv[i].key_len == n && !memcmp(g->kv[i].key, key, n))
      return &g->kv[i];
  return NULL;
}

const sf__gguf_tensor *sf__gguf_tensor_named(const sf__gguf *g, const char *name) {
  size_t n = strlen(name);
  for (int64_t i = 0; i < g->ntensors; i++)
    if (g->tensors[i].name_len == n && !memcmp(g->tensors[i].name, name, n))
      return &g->tensors[i];
  return NULL;
}

bool sf__gguf_int(const sf__gguf_kv *kv, int64_t *out) {
  const char *p = kv->val;
  union {
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64;
    int64_t i64;
  } v;
  if (kv->type == SF__GGUF_ARR || kv->type == SF__GGUF_STR || kv->type >= SF__GGUF_NVTYPES ||
      kv->type == SF__GGUF_F32 || kv->type == SF__GGUF_F64)
    return false;
  memcpy(&v, p, vtype_size[kv->type]);
  switch (kv->type) {
  case SF__GGUF_U8: *out = v.u8; return true;
  case SF__GGUF_BOOL: *out = v.u8 != 0; return true;
  case SF__GGUF_I8: *out = v.i8; return true;
  case SF__GGUF_U16: *out = v.u16; return true;
  case SF__GGUF_I16: *out = v.i16; return true;
  case SF__GGUF_U32: *out = v.u32; return true;
  case SF__GGUF_I32: *out = v.i32; return true;
  case SF__GGUF_U64:
    if (v.u64 > INT64_MAX)
      return false;
    *out = (int64_t)v.u64;
    return true;
  default: *out = v.i64; return true;
  }
}

bool sf__gguf_float(const sf__gguf_kv *kv, double *out) {
  int64_t i;
  if (kv->type == SF__GGUF_F32) {
    float f;
    memcpy(&f, kv->val, 4);
    *out = f;
    return true;
  }
  if (kv->type == SF__GGUF_F64) {
    memcpy(out, kv->val, 8);
    return true;
  }
  if (!sf__gguf_int(kv, &i))
    return false;
  *out = (double)i;
  return true;
}
