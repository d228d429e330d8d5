/*
 * safetensors.c — the tensors of a value by field path (params, grads),
 * and nn.save / nn.load in Hugging Face's safetensors format.
 *
 * The format (huggingface/safetensors, "Format"): an unsigned 64-bit
 * little-endian header length N, N bytes of JSON — an object mapping each
 * tensor's name to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets into the data that follows, relative to its start) plus an
 * optional "__metadata__" object of strings — then the data, each tensor
 * row-major little-endian.  We write F32 (or, asked, every tensor as F16
 * or BF16, rounded to nearest even) with `{"format": "pt"}` metadata (what
 * transformers writes) and pad the header with spaces so the data starts
 * 8-byte aligned; we read F32, F16 and BF16, converting to f32.
 *
 * Key design choice: names are the field paths of the sflow value
 * (`fc1.weight`, `layers.0.bias`), walked from the type descriptor in
 * field order, so a struct laid out as a PyTorch module's attributes
 * reads and writes the same names as its state_dict.  Load checks every
 * name, dtype, shape and offset before it copies anything, so a file that
 * fails leaves the model as it was.  The header is parsed by the data
 * layer's cJSON (dlopen'ed on first use); the nn layer stands on data for
 * that and for its file views and atomic writes.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* cJSON is dlopen'ed by the data layer, so only its struct layout and
 * type bits are used here, never its functions. */
static int jtype(const cJSON *j) { return j ? j->type & 0xff : 0; }

static const cJSON *jget(const cJSON *obj, const char *key) {
  for (const cJSON *c = obj->child; c; c = c->next)
    if (c->string && !strcmp(c->string, key))
      return c;
  return NULL;
}

/* --------------------------------------------------------- the walk */

typedef struct {
  char path[512];
  size_t len;
  sf__tensor_visit fn;
  void *ctx;
} walker;

static void walk_value(walker *w, const sf_type *t, const void *p);

static void walk_named(walker *w, const char *name, const sf_type *t, const void *p) {
  size_t saved = w->len;
  int n = snprintf(w->path + w->len, sizeof w->path - w->len, "%s%s", w->len ? "." : "", name);
  if (n > 0)
    w->len += (size_t)n < sizeof w->path - w->len ? (size_t)n : sizeof w->path - w->len - 1;
  walk_value(w, t, p);
  w->len = saved;
  w->path[saved] = '\0';
}

static void walk_value(walker *w, const sf_type *t, const void *p) {
  switch (t->kind) {
  case SF_TENSOR: {
    sf_tensor *x = *(sf_tensor *const *)p;
    if (x)
      w->fn(w->ctx, w->path, x);
    return;
  }
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      walk_named(w, t->fields[i].name, t->fields[i].type, (const char *)p + t->fields[i].offset);
    return;
  case SF_ARRAY: {
    const sf_array *a = *(sf_array *const *)p;
    if (!a || !sf__type_has_refs(t->elem))
      return;
    for (int64_t i = 0; i < a->len; i++) {
      char ix[24];
      snprintf(ix, sizeof ix, "%" PRId64, i);
      walk_named(w, ix, t->elem, sf__array_at(a, i));
    }
    return;
  }
  default: /* numbers, strings, maps (not walked), handles */
    return;
  }
}

void sf__walk_tensors(const void *m, const sf_type *T, sf__tensor_visit fn, void *ctx) {
  walker w = {.fn = fn, .ctx = ctx};
  if (m && T)
    walk_value(&w, T, m);
}

/* ------------------------------------------------ params and grads */

typedef struct {
  sf_array *out;
  bool grads;
} collect_ctx;

static void collect_one(void *ctx, const char *path, sf_tensor *t) {
  collect_ctx *c = ctx;
  sf_tensor *x = c->grads ? sf__t_grad(t) : (sf_retain(t), t);
  sf_array_push(c->out, &x, NULL);
}

static sf_array *collect_all(const void *m, const sf_type *T, bool grads, const sf_loc *loc) {
  collect_ctx c = {.out = sf_array_new(&sf__type_tensor, 0, loc),
                   .grads = grads};
  sf__walk_tensors(m, T, collect_one, &c);
  return c.out;
}

sf_array *sf_std_nn_params(const void *m, const sf_type *T, const sf_type *T_again,
                           const sf_loc *loc) {
  return collect_all(m, T, false, loc);
}

sf_array *sf_std_nn_grads(const void *m, const sf_type *T, const sf_type *T_again,
                          const sf_loc *loc) {
  return collect_all(m, T, true, loc);
}

/* ------------------------------------------------ half precisions */

float sf__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f)
    bits = sign | 0x7f800000u | (man << 13); /* inf, nan */
  else if (exp)
    bits = sign | ((exp + 112) << 23) | (man << 13);
  else if (!man)
    bits = sign; /* zero */
  else { /* subnormal: normalise */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

float sf__bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Rounding to the nearest, ties to even, on the bits: adding half an
 * ulp of the target (less one, plus the bit that would become its last)
 * carries exactly when the dropped part is over half, or half with an
 * odd last bit.  A carry out of the largest finite value gives the
 * infinity, which is the correctly rounded overflow.  NaN is made quiet
 * (its sign and top payload bits kept), never rounded into an infinity. */
uint16_t sf__f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x0040);
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

uint16_t sf__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, the top payload bits kept */
    return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
  if (ax >= 0x477ff000u) /* 65520 and up (halfway past 65504, to even): inf */
    return sign | 0x7c00;
  if (ax >= 0x38800000u) { /* a normal f16 (2^-14 and up): rebias by 127 - 15 */
    uint32_t r = ax - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1);
    return sign | (uint16_t)(r >> 13);
  }
  if (ax <= 0x33000000u) /* up to 2^-25, half the smallest subnormal: to zero (even) */
    return sign;
  /* A subnormal: the 24-bit significand in units of 2^-24, shifted by
   * 126 - e (14..24 for these exponents), rounded to even. */
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, sh = 126 - e;
  uint32_t q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
  if (rem > half || (rem == half && (q & 1)))
    q++;
  return sign | (uint16_t)q;
}

/* ---------------------------------------------------------- round_bf16 */

static void round_bf16_into(const float *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dst[i] = sf__bf16_to_f32(sf__f32_to_bf16(src[i]));
}

/* torch's x.bfloat16().float(): the gradient is cast the same way. */
static void bw_round_bf16(sf__node *n, sf_tensor *g) {
  sf_tensor *r = sf__t_like(g);
  round_bf16_into(sf__t_data(g), sf__t_data(r), g->numel);
  sf__grad_add(n->in[0], r);
}

sf_tensor *sf__t_round_bf16(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "round_bf16", loc);
  sf_tensor *c = sf__t_contig(t);
  sf_tensor *out = sf__t_like(t);
  round_bf16_into(sf__t_data(c), sf__t_data(out), t->numel);
  sf_release(c);
  sf__record("round_bf16", out, bw_round_bf16, t, NULL);
  return out;
}

sf_tensor *sf_std_nn_round_bf16(sf_tensor *t, const sf_loc *loc) {
  return sf__t_round_bf16(t, loc);
}

/* -------------------------------------------------------------- save */

enum { DT_F32 = 1, DT_F16, DT_BF16 };

typedef struct {
  sf__buf head, data;
  const sf_loc *loc;
  int64_t count;
  int32_t dtype; /* DT_*: what every tensor is stored as */
} saver;

static void put_s(sf__buf *b, const char *s) { sf__buf_put(b, s, strlen(s)); }

/* A JSON string: names are field paths, but a struct field may hold any
 * identifier, so quotes, backslashes and control bytes are escaped. */
static void put_json_str(sf__buf *b, const char *s) { sf__buf_json_str(b, s, strlen(s)); }

static void save_one(void *ctx, const char *path, sf_tensor *t) {
  saver *s = ctx;
  char num[64];
  if (!*path)
    sf_runtime_error(s->loc, "nn.save: a tensor needs a name: save a struct holding it");
  put_s(&s->head, ",");
  put_json_str(&s->head, path);
  put_s(&s->head, s->dtype == DT_F32 ? ":{\"dtype\":\"F32\",\"shape\":["
                 : s->dtype == DT_F16 ? ":{\"dtype\":\"F16\",\"shape\":["
                                      : ":{\"dtype\":\"BF16\",\"shape\":[");
  for (int32_t i = 0; i < t->ndim; i++) {
    snprintf(num, sizeof num, "%s%" PRId64, i ? "," : "", t->shape[i]);
    put_s(&s->head, num);
  }
  size_t begin = s->data.len;
  sf_tensor *c = sf__t_contig(t);
  const float *v = sf__t_data(c);
  if (s->dtype == DT_F32) {
    sf__buf_put(&s->data, (const char *)v, (size_t)c->numel * sizeof(float));
  } else {
    uint16_t chunk[1024];
    for (int64_t i = 0; i < c->numel; i += 1024) {
      int64_t m = c->numel - i < 1024 ? c->numel - i : 1024;
      for (int64_t j = 0; j < m; j++)
        chunk[j] = s->dtype == DT_F16 ? sf__f32_to_f16(v[i + j]) : sf__f32_to_bf16(v[i + j]);
      sf__buf_put(&s->data, (const char *)chunk, (size_t)m * 2);
    }
  }
  sf_release(c);
  snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", begin, s->data.len);
  put_s(&s->head, num);
  s->count++;
}

/* "f32", "bf16", "f16" (either case) as DT_*; anything else is an error
 * naming it. */
static int32_t save_dtype(sf_str *dtype, const sf_loc *loc) {
  static const struct {
    const char *name;
    int32_t dt;
  } names[] = {{"f32", DT_F32}, {"F32", DT_F32}, {"bf16", DT_BF16}, {"BF16", DT_BF16},
               {"f16", DT_F16}, {"F16", DT_F16}};
  const char *d = sf__str_data(dtype);
  int64_t n = sf__str_len(dtype);
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if ((int64_t)strlen(names[i].name) == n && !memcmp(names[i].name, d, (size_t)n))
      return names[i].dt;
  sf_runtime_error(loc, "nn.save: dtype \"%.*s\" is not one of \"f32\", \"bf16\", \"f16\"",
                   (int)(n > 64 ? 64 : n), d);
}

void sf_std_nn_save(const void *m, const sf_type *T, sf_str *path, sf_str *dtype,
                    const sf_type *T_again, const sf_loc *loc) {
  saver s = {.loc = loc, .dtype = save_dtype(dtype, loc)};
  sf__buf_init(&s.head, NULL, 0);
  sf__buf_init(&s.data, NULL, 0);
  sf__buf_put(&s.head, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in below */
  put_s(&s.head, "{\"__metadata__\":{\"format\":\"pt\"}");
  sf__walk_tensors(m, T, save_one, &s);
  put_s(&s.head, "}");
  while (s.head.len % 8) /* the data starts 8-byte aligned */
    sf__buf_put(&s.head, " ", 1);
  uint64_t n = s.head.len - 8;
  for (int i = 0; i < 8; i++)
    s.head.data[i] = (char)(n >> (8 * i) & 0xff);
  sf__buf_put(&s.head, s.data.data, s.data.len);
  sf__buf_free(&s.data);
  sf__write_or_fail(path, s.head.data, s.head.len, (void (*)(void *))sf__buf_free, &s.head, loc);
}

/* -------------------------------------------------------------- load */

typedef struct {
  const char *name;   /* the file's */
  int32_t dtype;      /* SF_F32, or the half kinds below */
  int32_t ndim;
  int64_t shape[SF__TMAX];
  uint64_t begin, end;
  bool used;
  bool supported;
  char dtype_name[16];
} entry;

typedef struct {
  sf__view view;
  cJSON *root;
  entry *entries;
  int64_t nentries;
  const char *data;
  uint64_t data_len;
  char err[768];
  bool failed;
  bool copying;
  const char *file;
} loader;

static void fail_msg(loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_msg(loader *l, const char *fmt, ...) {
  if (l->failed)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->err, sizeof l->err, fmt, ap);
  va_end(ap);
  l->failed = true;
}

static bool read_u64s(const cJSON *arr, int64_t *out, int32_t max, int32_t *n) {
  if (jtype(arr) != cJSON_Array)
    return false;
  int32_t k = 0;
  for (const cJSON *c = arr->child; c; c = c->next) {
    if (k == max || jtype(c) != cJSON_Number || c->valuedouble < 0 || c->valuedouble > 9.0e15 ||
        c->valuedouble != (double)(int64_t)c->valuedouble)
      return false;
    out[k++] = (int64_t)c->valuedouble;
  }
  *n = k;
  return true;
}

/* The bytes of one element of each dtype the format defines (the reference
 * library's Dtype); 0 for a name it does not define. */
static int32_t dtype_size(const char *name) {
  static const struct {
    const char *name;
    int32_t size;
  } sizes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
               {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},  {"BF16", 2},
               {"I32", 4},  {"U32", 4}, {"F32", 4}, {"F64", 8},     {"I64", 8},
               {"U64", 8},  {"C64", 8}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    if (!strcmp(sizes[i].name, name))
      return sizes[i].size;
  return 0;
}

/* The reference library's limit on the header (a bigger one is refused
 * before it is read). */
#define MAX_HEADER 100000000ull

/* The header's bytes: UTF-8, a JSON object from the first byte, then only
 * padding (spaces; the reference library's JSON parser also skips tabs and
 * line breaks there). */
static bool parse_json(loader *l, uint64_t n) {
  const char *f = l->file, *h = l->view.data + 8;
  size_t valid = sf__utf8_valid_prefix(h, (size_t)n);
  if (valid < n) {
    fail_msg(l, "nn.load: %s: the header is not valid UTF-8 (at byte %zu)", f, 8 + valid);
    return false;
  }
  if (h[0] != '{') {
    fail_msg(l, "nn.load: %s: the header does not start with '{' (byte 8 is 0x%02x)", f,
             (unsigned char)h[0]);
    return false;
  }
  char err[256];
  if (!sf__cjson_load(err, sizeof err)) {
    fail_msg(l, "nn.load: %s: %s", f, err);
    return false;
  }
  const char *end = NULL;
  l->root = sf__cjson_parse(h, (size_t)n, &end);
  if (jtype(l->root) != cJSON_Object) {
    fail_msg(l, "nn.load: %s: the header is not a JSON object (bad JSON at byte %td)", f,
             end ? end - l->view.data : (ptrdiff_t)8);
    return false;
  }
  for (const char *c = end ? end : h + n; c < h + n; c++)
    if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') {
      fail_msg(l, "nn.load: %s: the header holds bytes after its JSON object (at byte %td; "
               "only space padding may follow it)", f, c - l->view.data);
      return false;
    }
  return true;
}

/* "__metadata__", when there, maps names to strings. */
static bool check_metadata(loader *l, const cJSON *m) {
  bool ok = jtype(m) == cJSON_Object;
  for (const cJSON *c = ok ? m->child : NULL; c && ok; c = c->next)
    ok = jtype(c) == cJSON_String;
  if (!ok)
    fail_msg(l, "nn.load: %s: the header's \"__metadata__\" is not an object of strings", l->file);
  return ok;
}

/* One tensor's entry: its dtype, shape and offsets, the offsets checked
 * against the data and against the bytes its dtype and shape need. */
static bool parse_entry(loader *l, const cJSON *c, entry *e) {
  const char *f = l->file;
  memset(e, 0, sizeof *e);
  e->name = c->string;
  bool obj = jtype(c) == cJSON_Object;
  const cJSON *dt = obj ? jget(c, "dtype") : NULL;
  const cJSON *sh = obj ? jget(c, "shape") : NULL;
  const cJSON *off = obj ? jget(c, "data_offsets") : NULL;
  int64_t offs[2];
  int32_t noff = 0;
  if (!obj || jtype(dt) != cJSON_String || !read_u64s(sh, e->shape, SF__TMAX, &e->ndim) ||
      !read_u64s(off, offs, 2, &noff) || noff != 2) {
    fail_msg(l, "nn.load: %s: the header's entry \"%s\" is malformed (it needs dtype, shape "
             "of at most %d dimensions, and data_offsets [begin, end])", f, e->name, SF__TMAX);
    return false;
  }
  snprintf(e->dtype_name, sizeof e->dtype_name, "%s", dt->valuestring);
  int32_t size = dtype_size(dt->valuestring);
  if (!size) {
    fail_msg(l, "nn.load: %s: \"%s\" has dtype \"%s\", which the safetensors format does not "
             "define", f, e->name, e->dtype_name);
    return false;
  }
  e->dtype = !strcmp(dt->valuestring, "F32") ? DT_F32 : !strcmp(dt->valuestring, "F16") ? DT_F16
             : !strcmp(dt->valuestring, "BF16") ? DT_BF16 : 0;
  e->supported = e->dtype != 0;
  e->begin = (uint64_t)offs[0];
  e->end = (uint64_t)offs[1];
  uint64_t numel = 1;
  for (int32_t i = 0; i < e->ndim; i++)
    numel = e->shape[i] && numel > UINT64_MAX / 16 / (uint64_t)e->shape[i]
                ? UINT64_MAX / 16 : numel * (uint64_t)e->shape[i];
  if (e->begin > e->end || e->end > l->data_len || e->end - e->begin != numel * (uint64_t)size) {
    fail_msg(l, "nn.load: %s: the data of \"%s\" (offsets %" PRIu64 "..%" PRIu64 ") does not "
             "fit %s %s within the %" PRIu64 " data bytes", f, e->name, e->begin, e->end,
             e->dtype_name, sf__shape_str(e->ndim, e->shape, (char[SF__SHAPE_BUF]){0}),
             l->data_len);
    return false;
  }
  return true;
}

static int by_offsets(const void *x, const void *y) {
  const entry *a = *(entry *const *)x, *b = *(entry *const *)y;
  return a->begin != b->begin ? (a->begin < b->begin ? -1 : 1)
         : a->end != b->end   ? (a->end < b->end ? -1 : 1)
                              : 0;
}

/* The format's layout: taken in order of their offsets, each tensor's
 * bytes start where the previous one's end (the first at 0), and the last
 * ends at the end of the file: no gap, no overlap, nothing after. */
static bool check_layout(loader *l) {
  const char *f = l->file;
  entry **order = sf__alloc_n((size_t)(l->nentries ? l->nentries : 1), sizeof *order);
  for (int64_t i = 0; i < l->nentries; i++)
    order[i] = &l->entries[i];
  qsort(order, (size_t)l->nentries, sizeof *order, by_offsets);
  uint64_t at = 0;
  const entry *prev = NULL;
  for (int64_t i = 0; i < l->nentries && !l->failed; i++) {
    const entry *e = order[i];
    if (e->begin < at)
      fail_msg(l, "nn.load: %s: the data of \"%s\" (offsets %" PRIu64 "..%" PRIu64 ") overlaps "
               "that of \"%s\" (offsets %" PRIu64 "..%" PRIu64 ")", f, e->name, e->begin, e->end,
               prev->name, prev->begin, prev->end);
    else if (e->begin > at)
      fail_msg(l, "nn.load: %s: the data of \"%s\" starts at byte %" PRIu64 " but %s at byte "
               "%" PRIu64 ": %" PRIu64 " %s belong to no tensor", f, e->name, e->begin,
               prev ? "the tensor before it ends" : "the data starts", at, e->begin - at,
               sf__plural((int64_t)(e->begin - at), "byte", "bytes"));
    at = e->end;
    prev = e;
  }
  if (!l->failed && at != l->data_len)
    fail_msg(l, "nn.load: %s: the tensors' data ends at byte %" PRIu64 " of the %" PRIu64
             " data bytes: %" PRIu64 " %s after it belong to no tensor (or the header length, "
             "%zu, is wrong)", f, at, l->data_len, l->data_len - at,
             sf__plural((int64_t)(l->data_len - at), "byte", "bytes"),
             (size_t)(l->data - l->view.data - 8));
  sf_free(order);
  return !l->failed;
}

static int by_name(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Each of the header's n names once (the JSON parser keeps both of a name
 * given twice; which one a reader takes is anyone's guess). */
static bool check_names(loader *l, int64_t n) {
  const char **names = sf__alloc_n((size_t)(n ? n : 1), sizeof *names);
  int64_t k = 0;
  for (const cJSON *c = l->root->child; c; c = c->next)
    names[k++] = c->string;
  qsort(names, (size_t)n, sizeof *names, by_name);
  for (int64_t i = 1; i < n && !l->failed; i++)
    if (!strcmp(names[i - 1], names[i]))
      fail_msg(l, "nn.load: %s: the header names \"%s\" twice", l->file, names[i]);
  sf_free(names);
  return !l->failed;
}

/* The header into l->entries, checked against every rule of the format
 * (huggingface/safetensors, as its own loader checks them), so a file
 * that library refuses is refused here too, naming why. */
static bool parse_header(loader *l) {
  const char *f = l->file;
  if (l->view.len < 8) {
    fail_msg(l, "nn.load: %s is not a safetensors file (%zu bytes, shorter than the 8-byte "
             "header length)", f, l->view.len);
    return false;
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; i++)
    n |= (uint64_t)(unsigned char)l->view.data[i] << (8 * i);
  if (n > MAX_HEADER && n <= l->view.len - 8) {
    fail_msg(l, "nn.load: %s: the header length %" PRIu64 " is over the format's limit of %llu "
             "bytes", f, n, MAX_HEADER);
    return false;
  }
  if (n > l->view.len - 8 || n < 2) {
    fail_msg(l, "nn.load: %s is not a safetensors file (header length %" PRIu64 " for a file "
             "of %zu bytes)", f, n, l->view.len);
    return false;
  }
  if (!parse_json(l, n))
    return false;
  l->data = l->view.data + 8 + n;
  l->data_len = l->view.len - 8 - n;
  int64_t cap = 0;
  for (const cJSON *c = l->root->child; c; c = c->next)
    cap++;
  l->entries = sf__alloc_n((size_t)(cap ? cap : 1), sizeof *l->entries);
  if (!check_names(l, cap))
    return false;
  for (const cJSON *c = l->root->child; c; c = c->next) {
    if (!strcmp(c->string, "__metadata__")) {
      if (!check_metadata(l, c))
        return false;
      continue;
    }
    if (!parse_entry(l, c, &l->entries[l->nentries++]))
      return false;
  }
  return check_layout(l);
}

static entry *find_entry(loader *l, const char *name) {
  for (int64_t i = 0; i < l->nentries; i++)
    if (!strcmp(l->entries[i].name, name))
      return &l->entries[i];
  return NULL;
}

static void convert(const entry *e, const char *src, float *dst, int64_t n) {
  if (e->dtype == DT_F32) {
    memcpy(dst, src, (size_t)n * 4);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    dst[i] = e->dtype == DT_F16 ? sf__f16_to_f32(h) : sf__bf16_to_f32(h);
  }
}

/* The end of a load: everything given back before an error is raised (a
 * runtime error inside a task unwinds with longjmp), then the error. */
static void load_end(loader *l, const sf_loc *loc) {
  sf_free(l->entries);
  sf__cjson_delete(l->root);
  char err[sizeof l->err];
  bool failed = l->failed;
  memcpy(err, l->err, sizeof err);
  sf__view_close(&l->view);
  if (failed)
    sf_runtime_error(loc, "%s", err);
}

/* First pass: every tensor of the struct is in the file with its shape
 * and a dtype we read; second pass (copying): the values go in. */
static void load_one(void *ctx, const char *path, sf_tensor *t) {
  loader *l = ctx;
  if (l->failed)
    return;
  entry *e = find_entry(l, path);
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  if (!l->copying) {
    if (!e) {
      fail_msg(l, "nn.load: %s has no tensor \"%s\" (the struct's %s, shape %s)", l->file, path,
               path, SF__SHP(t, sa));
      return;
    }
    bool same = e->ndim == t->ndim;
    for (int32_t i = 0; same && i < t->ndim; i++)
      same = e->shape[i] == t->shape[i];
    if (!same) {
      fail_msg(l, "nn.load: %s: \"%s\" has shape %s in the file, but the struct's is %s", l->file,
               path, sf__shape_str(e->ndim, e->shape, sb), SF__SHP(t, sa));
      return;
    }
    if (!e->supported) {
      fail_msg(l, "nn.load: %s: \"%s\" is %s; nn.load reads F32, F16 and BF16", l->file, path,
               e->dtype_name);
      return;
    }
    e->used = true;
    return;
  }
  const char *src = l->data + e->begin;
  if (sf__t_is_contig(t)) {
    convert(e, src, sf__t_wdata(t), t->numel);
    return;
  }
  sf_tensor *c = sf__t_like(t);
  convert(e, src, sf__t_data(c), t->numel);
  sf__t_copy_into(t, c);
  sf_release(c);
}

void sf_std_nn_load(const void *m, const sf_type *T, sf_str *path, bool strict,
                    const sf_type *T_again, const sf_loc *loc) {
  loader l = {.file = sf__data_path(path, "read", loc)};
  sf__view_open_or_fail(&l.view, path, loc);
  if (parse_header(&l)) {
    sf__walk_tensors(m, T, load_one, &l);
    for (int64_t i = 0; strict && !l.failed && i < l.nentries; i++)
      if (!l.entries[i].used)
        fail_msg(&l, "nn.load: %s has a tensor \"%s\" that the struct lacks (strict = false "
                 "ignores it)", l.file, l.entries[i].name);
    if (!l.failed) {
      l.copying = true;
      sf__walk_tensors(m, T, load_one, &l);
    }
  }
  load_end(&l, loc);
}

/* ------------------------------------------------ by explicit names */

/* names[i] as a NUL-terminated copy (sf_free it), for the walkers'
 * callbacks, which take C strings. */
static char *name_at(sf_array *names, int64_t i) {
  sf_str *s = ((sf_str **)names->data)[i];
  int64_t n = sf__str_len(s);
  char *c = sf_alloc((size_t)n + 1);
  memcpy(c, sf__str_data(s), (size_t)n);
  c[n] = 0;
  return c;
}

static void check_pairs(const char *fn, sf_array *names, sf_array *ts, const sf_loc *loc) {
  int64_t a = names ? names->len : 0, b = ts ? ts->len : 0;
  if (a != b)
    sf_runtime_error(loc, "%s: %" PRId64 " names for %" PRId64 " tensors (one name each)", fn, a, b);
  for (int64_t i = 0; i < b; i++)
    if (!((sf_tensor **)ts->data)[i])
      sf_runtime_error(loc, "%s: tensor %" PRId64 " is not set", fn, i);
}

/* nn.save_tensors: what nn.save writes, the names given rather than
 * field paths (a file another library names, such as PEFT's adapters). */
void sf_std_nn_save_tensors(sf_array *names, sf_array *ts, sf_str *path, sf_str *dtype,
                            const sf_loc *loc) {
  check_pairs("nn.save_tensors", names, ts, loc);
  saver s = {.loc = loc, .dtype = save_dtype(dtype, loc)};
  sf__buf_init(&s.head, NULL, 0);
  sf__buf_init(&s.data, NULL, 0);
  sf__buf_put(&s.head, "\0\0\0\0\0\0\0\0", 8);
  put_s(&s.head, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int64_t i = 0; i < ts->len; i++) {
    char *name = name_at(names, i);
    save_one(&s, name, ((sf_tensor **)ts->data)[i]);
    sf_free(name);
  }
  put_s(&s.head, "}");
  while (s.head.len % 8)
    sf__buf_put(&s.head, " ", 1);
  uint64_t n = s.head.len - 8;
  for (int i = 0; i < 8; i++)
    s.head.data[i] = (char)(n >> (8 * i) & 0xff);
  sf__buf_put(&s.head, s.data.data, s.data.len);
  sf__buf_free(&s.data);
  sf__write_or_fail(path, s.head.data, s.head.len, (void (*)(void *))sf__buf_free, &s.head, loc);
}

/* nn.load_tensors: nn.load with the names given; the file may hold others. */
void sf_std_nn_load_tensors(sf_array *names, sf_array *ts, sf_str *path, const sf_loc *loc) {
  check_pairs("nn.load_tensors", names, ts, loc);
  loader l = {.file = sf__data_path(path, "read", loc)};
  sf__view_open_or_fail(&l.view, path, loc);
  if (parse_header(&l)) {
    for (int pass = 0; pass < 2 && !l.failed; pass++) {
      l.copying = pass == 1;
      for (int64_t i = 0; i < ts->len && !l.failed; i++) {
        char *name = name_at(names, i);
        load_one(&l, name, ((sf_tensor **)ts->data)[i]);
        sf_free(name);
      }
    }
  }
  load_end(&l, loc);
}

/* ------------------------------------------- a file kept open (std.llm) */

/* A reader that keeps pointers into the file (std.llm's decoder reads a
 * checkpoint's F32/F16/BF16 weights where they lie): the header checked
 * by the rules nn.load applies, the mapping kept for the process. */
struct sf__st_file {
  loader l;
  sf__st_tensor *t;
};

sf__st_file *sf__st_open(const char *path, char *err, size_t errlen) {
  sf__st_file *f = sf_alloc(sizeof *f);
  memset(f, 0, sizeof *f);
  f->l.file = path;
  if (!sf__view_open(&f->l.view, path)) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    sf_free(f);
    return NULL;
  }
  if (!parse_header(&f->l)) {
    /* the loader's messages begin "nn.load: "; the caller names itself */
    const char *m = f->l.err;
    if (!strncmp(m, "nn.load: ", 9))
      m += 9;
    snprintf(err, errlen, "%s", m);
    sf_free(f->l.entries);
    sf__cjson_delete(f->l.root);
    sf__view_close(&f->l.view);
    sf_free(f);
    return NULL;
  }
  f->t = sf__alloc_n((size_t)(f->l.nentries ? f->l.nentries : 1), sizeof *f->t);
  for (int64_t i = 0; i < f->l.nentries; i++) {
    const entry *e = &f->l.entries[i];
    sf__st_tensor *t = &f->t[i];
    t->name = e->name;
    t->dtype = e->dtype == DT_F32 ? SF__ST_F32 : e->dtype == DT_F16 ? SF__ST_F16
               : e->dtype == DT_BF16 ? SF__ST_BF16 : 0;
    t->dtype_name = e->dtype_name;
    t->ndim = e->ndim;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->data = f->l.data + e->begin;
  }
  return f;
}

const sf__st_tensor *sf__st_find(const sf__st_file *f, const char *name) {
  for (int64_t i = 0; i < f->l.nentries; i++)
    if (!strcmp(f->t[i].name, name))
      return &f->t[i];
  return NULL;
}
