/*
 * safetensors.c — the tensors of a value by field path (params, grads),
 * and nn.save / nn.load in Hugging Face's safetensors format.
 *
 * The format (huggingface/safetensors, "Format"): an unsigned 64-bit
 * little-endian header length N, N bytes of JSON — an object mapping each
 * tensor's name to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets into the data that follows, relative to its start) plus an
 * optional "__metadata__" object of strings — then the data, each tensor
 * row-major little-endian.  We write F32 with `{"format": "pt"}` metadata
 * (what transformers writes) and pad the header with spaces so the data
 * starts 8-byte aligned; we read F32, F16 and BF16, converting to f32.
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
#include <inttypes.h>
#include <stdarg.h>
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

/* -------------------------------------------------------------- save */

typedef struct {
  sf__buf head, data;
  const sf_loc *loc;
  int64_t count;
} saver;

static void put_s(sf__buf *b, const char *s) { sf__buf_put(b, s, strlen(s)); }

/* A JSON string: names are field paths, but a struct field may hold any
 * identifier, so quotes, backslashes and control bytes are escaped. */
static void put_json_str(sf__buf *b, const char *s) {
  sf__buf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      sf__buf_put(b, e, 2);
    } else if (c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", c);
      put_s(b, e);
    } else
      sf__buf_put(b, (const char *)&c, 1);
  }
  sf__buf_put(b, "\"", 1);
}

static void save_one(void *ctx, const char *path, sf_tensor *t) {
  saver *s = ctx;
  char num[64];
  if (!*path)
    sf_runtime_error(s->loc, "nn.save: a tensor needs a name: save a struct holding it");
  put_s(&s->head, ",");
  put_json_str(&s->head, path);
  put_s(&s->head, ":{\"dtype\":\"F32\",\"shape\":[");
  for (int32_t i = 0; i < t->ndim; i++) {
    snprintf(num, sizeof num, "%s%" PRId64, i ? "," : "", t->shape[i]);
    put_s(&s->head, num);
  }
  size_t begin = s->data.len;
  sf_tensor *c = sf__t_contig(t);
  sf__buf_put(&s->data, (const char *)sf__t_data(c), (size_t)c->numel * sizeof(float));
  sf_release(c);
  snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", begin, s->data.len);
  put_s(&s->head, num);
  s->count++;
}

void sf_std_nn_save(const void *m, const sf_type *T, sf_str *path, const sf_type *T_again,
                    const sf_loc *loc) {
  saver s = {.loc = loc};
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

enum { DT_F32 = 1, DT_F16, DT_BF16 };

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

/* The header into l->entries, every offset checked against the data. */
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
  if (n > l->view.len - 8 || n < 2) {
    fail_msg(l, "nn.load: %s is not a safetensors file (header length %" PRIu64 " for a file "
             "of %zu bytes)", f, n, l->view.len);
    return false;
  }
  char err[256];
  if (!sf__cjson_load(err, sizeof err)) {
    fail_msg(l, "nn.load: %s: %s", f, err);
    return false;
  }
  const char *end = NULL;
  l->root = sf__cjson_parse(l->view.data + 8, (size_t)n, &end);
  if (jtype(l->root) != cJSON_Object) {
    fail_msg(l, "nn.load: %s: the header is not a JSON object (bad JSON at byte %td)", f,
             end ? end - l->view.data : (ptrdiff_t)8);
    return false;
  }
  l->data = l->view.data + 8 + n;
  l->data_len = l->view.len - 8 - n;
  int64_t cap = 0;
  for (const cJSON *c = l->root->child; c; c = c->next)
    cap++;
  l->entries = sf__alloc_n((size_t)(cap ? cap : 1), sizeof *l->entries);
  for (const cJSON *c = l->root->child; c; c = c->next) {
    if (!strcmp(c->string, "__metadata__"))
      continue;
    entry *e = &l->entries[l->nentries++];
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
    int32_t size = 0;
    if (!strcmp(dt->valuestring, "F32"))
      e->dtype = DT_F32, size = 4;
    else if (!strcmp(dt->valuestring, "F16"))
      e->dtype = DT_F16, size = 2;
    else if (!strcmp(dt->valuestring, "BF16"))
      e->dtype = DT_BF16, size = 2;
    e->supported = size != 0;
    e->begin = (uint64_t)offs[0];
    e->end = (uint64_t)offs[1];
    uint64_t numel = 1;
    for (int32_t i = 0; i < e->ndim; i++)
      numel = e->shape[i] && numel > UINT64_MAX / 16 / (uint64_t)e->shape[i]
                  ? UINT64_MAX / 16 : numel * (uint64_t)e->shape[i];
    if (e->begin > e->end || e->end > l->data_len ||
        (size && e->end - e->begin != numel * (uint64_t)size)) {
      fail_msg(l, "nn.load: %s: the data of \"%s\" (offsets %" PRIu64 "..%" PRIu64 ") does not "
               "fit %s %s within the %" PRIu64 " data bytes", f, e->name, e->begin, e->end,
               e->dtype_name, sf__shape_str(e->ndim, e->shape, (char[SF__SHAPE_BUF]){0}),
               l->data_len);
      return false;
    }
  }
  return true;
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
  /* Everything is given back before an error is raised: a runtime error
   * inside a task unwinds with longjmp. */
  sf_free(l.entries);
  sf__cjson_delete(l.root);
  char err[sizeof l.err];
  bool failed = l.failed;
  memcpy(err, l.err, sizeof err);
  sf__view_close(&l.view);
  if (failed)
    sf_runtime_error(loc, "%s", err);
}
