/*
 * llm.c — std.llm's externs (stdlib/llm.sflow): GGUF files opened through
 * the data layer's reader (gguf.c), their metadata as sflow values, their
 * tensors dequantized to f32 tensors or multiplied in their block format
 * (quant.c).
 *
 * Key design choice: a process-wide table of open files, keyed by path.
 * The sflow values (Gguf, QWeight) carry only the path and names, so they
 * travel to tasks and nodes like any struct; each process maps a file once,
 * on first use, and keeps it mapped, so a weight is a pointer into the page
 * cache and a decoder step reads it from there directly.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "quant.h"

/* ---------------------------------------------------------- the files */

#define FILES_MAX 32
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static sf__gguf *files[FILES_MAX];
static int nfiles;

/* The open file of path, opened (and checked) on first use. */
static const sf__gguf *file_of(sf_str *path, const sf_loc *loc) {
  const char *p = sf__data_path(path, "read", loc);
  pthread_mutex_lock(&files_lock);
  for (int i = 0; i < nfiles; i++)
    if (!strcmp(files[i]->view.name, p)) {
      sf__gguf *g = files[i];
      pthread_mutex_unlock(&files_lock);
      return g;
    }
  if (nfiles == FILES_MAX) {
    pthread_mutex_unlock(&files_lock);
    sf_runtime_error(loc, "llm: %s: more than %d GGUF files open in one process", p, FILES_MAX);
  }
  sf__gguf *g = sf_alloc(sizeof *g);
  char err[700];
  if (!sf__gguf_open(g, p, err, sizeof err)) {
    pthread_mutex_unlock(&files_lock);
    sf_free(g);
    sf_runtime_error(loc, "llm: %s", err);
  }
  files[nfiles++] = g;
  pthread_mutex_unlock(&files_lock);
  return g;
}

static sf_str *path_of(const void *g, const sf_type *t, const sf_loc *loc) {
  return *(sf_str **)sf__field(t, (void *)g, "path", SF_STR, loc);
}

static const sf_type *field_type(const sf_type *t, const char *name) {
  for (int32_t i = 0; i < t->nfields; i++)
    if (!strcmp(t->fields[i].name, name))
      return t->fields[i].type;
  return NULL;
}

#define FIELD(t, base, name, kind, T) (*(T *)sf__field((t), (void *)(base), (name), (kind), loc))

static void set_str(const sf_type *t, void *base, const char *name, const char *s, size_t n,
                    const sf_loc *loc) {
  sf_str **slot = &FIELD(t, base, name, SF_STR, sf_str *);
  sf_release(*slot);
  *slot = sf_str_new(s, (int64_t)n);
}

/* ---------------------------------------------------------- gguf_open */

void sf_std_llm_gguf_open(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc) {
  const sf__gguf *g = file_of(path, loc);
  set_str(out_type, out, "path", sf__str_data(path), (size_t)sf__str_len(path), loc);
  FIELD(out_type, out, "version", SF_I64, int64_t) = g->version;
  FIELD(out_type, out, "alignment", SF_I64, int64_t) = (int64_t)g->alignment;
  sf_array *keys = sf_array_new(&sf_type_str, g->nkv, loc), *types;
  sf_array **slot = &FIELD(out_type, out, "keys", SF_ARRAY, sf_array *);
  sf_release(*slot);
  *slot = keys;
  types = sf_array_new(&sf_type_str, g->nkv, loc);
  slot = &FIELD(out_type, out, "key_types", SF_ARRAY, sf_array *);
  sf_release(*slot);
  *slot = types;
  for (int64_t i = 0; i < g->nkv; i++) {
    const sf__gguf_kv *kv = &g->kv[i];
    ((sf_str **)keys->data)[i] = sf_str_new(kv->key, kv->key_len);
    char ty[32];
    if (kv->type == SF__GGUF_ARR)
      snprintf(ty, sizeof ty, "arr[%s]", sf__gguf_vtype_name(kv->elem));
    else
      snprintf(ty, sizeof ty, "%s", sf__gguf_vtype_name(kv->type));
    ((sf_str **)types->data)[i] = sf_str_new(ty, (int64_t)strlen(ty));
  }
  const sf_type *tt = field_type(out_type, "tensors");
  if (!tt || tt->kind != SF_ARRAY)
    sf_runtime_error(loc, "internal error: std.llm: Gguf has no tensors array (%s:%d)", __FILE__, __LINE__);
  sf_array *ts = sf_array_new(tt->elem, g->ntensors, loc);
  slot = &FIELD(out_type, out, "tensors", SF_ARRAY, sf_array *);
  sf_release(*slot);
  *slot = ts;
  for (int64_t i = 0; i < g->ntensors; i++) {
    const sf__gguf_tensor *t = &g->tensors[i];
    void *e = (char *)ts->data + i * tt->elem->size;
    set_str(tt->elem, e, "name", t->name, t->name_len, loc);
    const char *tn = sf__ggml_type_name(t->type);
    set_str(tt->elem, e, "type", tn, strlen(tn), loc);
    sf_array *shape = sf_array_new(&sf_type_i64, t->ndim, loc);
    for (int32_t d = 0; d < t->ndim; d++)
      ((int64_t *)shape->data)[d] = t->dims[t->ndim - 1 - d];
    sf_array **ss = &FIELD(tt->elem, e, "shape", SF_ARRAY, sf_array *);
    sf_release(*ss);
    *ss = shape;
    FIELD(tt->elem, e, "offset", SF_I64, int64_t) = (int64_t)((const char *)t->data - g->view.data);
  }
}

/* ----------------------------------------------------------- metadata */

static const sf__gguf_kv *key_of(const sf__gguf *g, sf_str *key, const sf_loc *loc) {
  const sf__gguf_kv *kv = sf__gguf_find(g, sf__str_data(key));
  if (!kv)
    sf_runtime_error(loc, "llm: %s: no metadata key \"%s\"", g->view.name, sf__str_data(key));
  return kv;
}

static void wrong_type(const sf__gguf *g, const sf__gguf_kv *kv, const char *want,
                       const sf_loc *loc) {
  sf_runtime_error(loc, "llm: %s: metadata \"%.*s\" is a %s%s%s%s, not %s", g->view.name,
                   (int)kv->key_len, kv->key, sf__gguf_vtype_name(kv->type),
                   kv->type == SF__GGUF_ARR ? "[" : "",
                   kv->type == SF__GGUF_ARR ? sf__gguf_vtype_name(kv->elem) : "",
                   kv->type == SF__GGUF_ARR ? "]" : "", want);
}

int64_t sf_std_llm_meta_int(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, t, loc), loc);
  const sf__gguf_kv *kv = key_of(f, key, loc);
  int64_t v;
  if (!sf__gguf_int(kv, &v))
    wrong_type(f, kv, "an integer", loc);
  return v;
}

double sf_std_llm_meta_float(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, t, loc), loc);
  const sf__gguf_kv *kv = key_of(f, key, loc);
  double v;
  if (kv->type == SF__GGUF_BOOL || !sf__gguf_float(kv, &v))
    wrong_type(f, kv, "a number", loc);
  return v;
}

sf_str *sf_std_llm_meta_str(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, t, loc), loc);
  const sf__gguf_kv *kv = key_of(f, key, loc);
  if (kv->type != SF__GGUF_STR)
    wrong_type(f, kv, "a str", loc);
  const char *p = kv->val;
  uint64_t n;
  const char *s = sf__gguf_next_str(&p, &n);
  return sf_str_new(s, (int64_t)n);
}

sf_array *sf_std_llm_meta_strs(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, t, loc), loc);
  const sf__gguf_kv *kv = key_of(f, key, loc);
  if (kv->type != SF__GGUF_ARR || kv->elem != SF__GGUF_STR)
    wrong_type(f, kv, "an arr[str]", loc);
  sf_array *a = sf_array_new(&sf_type_str, (int64_t)kv->n, loc);
  const char *p = kv->val;
  for (uint64_t i = 0; i < kv->n; i++) {
    uint64_t n;
    const char *s = sf__gguf_next_str(&p, &n);
    ((sf_str **)a->data)[i] = sf_str_new(s, (int64_t)n);
  }
  return a;
}

sf_array *sf_std_llm_meta_ints(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, t, loc), loc);
  const sf__gguf_kv *kv = key_of(f, key, loc);
  static const uint8_t size[] = {1, 1, 2, 2, 4, 4, 0, 1, 0, 0, 8, 8, 0};
  if (kv->type != SF__GGUF_ARR || kv->elem >= SF__GGUF_NVTYPES || !size[kv->elem])
    wrong_type(f, kv, "an array of integers", loc);
  sf_array *a = sf_array_new(&sf_type_i64, (int64_t)kv->n, loc);
  for (uint64_t i = 0; i < kv->n; i++) {
    sf__gguf_kv one = {kv->key, kv->key_len, kv->elem, 0, 1, kv->val + i * size[kv->elem]};
    int64_t v;
    if (!sf__gguf_int(&one, &v))
      sf_runtime_error(loc, "llm: %s: metadata \"%.*s\"[%" PRIu64 "] does not fit in an i64",
                       f->view.name, (int)kv->key_len, kv->key, i);
    ((int64_t *)a->data)[i] = v;
  }
  return a;
}

/* ------------------------------------------------------------ tensors */

static const sf__gguf_tensor *tensor_of(const sf__gguf *g, sf_str *name, const sf_loc *loc) {
  const sf__gguf_tensor *t = sf__gguf_tensor_named(g, sf__str_data(name));
  if (!t)
    sf_runtime_error(loc, "llm: %s: no tensor \"%s\"", g->view.name, sf__str_data(name));
  return t;
}

/* The tensor as rows × cols of its type (1-D: one row; 3-D and 4-D: the
 * outer dimensions folded into rows). */
static sf__qmat mat_of(const sf__gguf *g, const sf__gguf_tensor *t, const sf_loc *loc) {
  if (!sf__q_supported(t->type))
    sf_runtime_error(loc, "llm: %s: tensor \"%.*s\" is %s, which std.llm does not read (F32, F16, "
                     "BF16, Q4_0, Q4_1, Q8_0)", g->view.name, (int)t->name_len, t->name,
                     sf__ggml_type_name(t->type));
  sf__qmat m = {t->type, t->numel / t->dims[0], t->dims[0], sf__ggml_bytes(t->type, t->dims[0]),
                t->data};
  return m;
}

static sf_tensor *dequant_rows(const sf__qmat *m, int64_t lo, int64_t hi, int32_t ndim,
                               const int64_t *shape, const sf_loc *loc) {
  sf_tensor *out = sf__t_empty(ndim, shape, loc);
  float *y = sf__t_wdata(out);
  for (int64_t r = lo; r < hi; r++)
    sf__q_dequant_row(m, r, y + (r - lo) * m->cols);
  return out;
}

sf_tensor *sf_std_llm_tensor(const void *g, const sf_type *gt, sf_str *name, const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, gt, loc), loc);
  const sf__gguf_tensor *t = tensor_of(f, name, loc);
  sf__qmat m = mat_of(f, t, loc);
  int64_t shape[4];
  for (int32_t d = 0; d < t->ndim; d++)
    shape[d] = t->dims[t->ndim - 1 - d];
  return dequant_rows(&m, 0, m.rows, t->ndim, shape, loc);
}

sf_tensor *sf_std_llm_rows(const void *g, const sf_type *gt, sf_str *name, int64_t lo, int64_t hi,
                           const sf_loc *loc) {
  const sf__gguf *f = file_of(path_of(g, gt, loc), loc);
  const sf__gguf_tensor *t = tensor_of(f, name, loc);
  sf__qmat m = mat_of(f, t, loc);
  if (lo < 0 || hi < lo || hi > m.rows)
    sf_runtime_error(loc, "llm.rows: rows %" PRId64 "..%" PRId64 " of \"%s\", which has %" PRId64,
                     lo, hi, sf__str_data(name), m.rows);
  int64_t shape[2] = {hi - lo, m.cols};
  return dequant_rows(&m, lo, hi, 2, shape, loc);
}

void sf_std_llm_weight(void *out, const sf_type *out_type, const void *g, const sf_type *gt,
                       sf_str *name, const sf_loc *loc) {
  sf_str *path = path_of(g, gt, loc);
  const sf__gguf *f = file_of(path, loc);
  const sf__gguf_tensor *t = tensor_of(f, name, loc);
  if (t->ndim != 2)
    sf_runtime_error(loc, "llm.weight: tensor \"%s\" of %s has %d dimensions, not 2",
                     sf__str_data(name), f->view.name, t->ndim);
  sf__qmat m = mat_of(f, t, loc);
  set_str(out_type, out, "path", sf__str_data(path), (size_t)sf__str_len(path), loc);
  set_str(out_type, out, "name", sf__str_data(name), (size_t)sf__str_len(name), loc);
  const char *tn = sf__ggml_type_name(t->type);
  set_str(out_type, out, "type", tn, strlen(tn), loc);
  FIELD(out_type, out, "rows", SF_I64, int64_t) = m.rows;
  FIELD(out_type, out, "cols", SF_I64, int64_t) = m.cols;
}

/* ------------------------------------------------------ on the device */

/* Each weight's bytes on each device, uploaded on first use and kept for
 * the process (a decoder reads every weight every step: 93 MB for
 * SmolLM2), as storages of ceil(bytes / 4) floats. */
#define DEV_MAX 4096
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  const void *data;
  int32_t gpu;
  sf__storage *st;
} dev_weights[DEV_MAX];
static int ndev_weights;

static uint64_t weight_on_device(const sf__qmat *m, const sf_loc *loc) {
  int32_t gpu = sf__gpu_current_device() + 1;
  pthread_mutex_lock(&dev_lock);
  for (int i = 0; i < ndev_weights; i++)
    if (dev_weights[i].data == m->data && dev_weights[i].gpu == gpu) {
      uint64_t p = (uint64_t)(uintptr_t)dev_weights[i].st->dev;
      pthread_mutex_unlock(&dev_lock);
      return p;
    }
  if (ndev_weights == DEV_MAX) {
    pthread_mutex_unlock(&dev_lock);
    sf_runtime_error(loc, "quant_matmul: more than %d weights on the GPU", DEV_MAX);
  }
  uint64_t bytes = m->row_bytes * (uint64_t)m->rows;
  sf__storage *st = sf__storage_dev_new((int64_t)((bytes + 3) / 4), loc);
  sf__dev_upload((uint64_t)(uintptr_t)st->dev, m->data, bytes, loc);
  dev_weights[ndev_weights].data = m->data;
  dev_weights[ndev_weights].gpu = gpu;
  dev_weights[ndev_weights++].st = st;
  pthread_mutex_unlock(&dev_lock);
  return (uint64_t)(uintptr_t)st->dev;
}

/* kernels/quant.cu's product for the block types; y on the device. */
static sf_tensor *quant_matmul_gpu(const sf__qmat *m, sf_tensor *xc, int32_t ndim,
                                   const int64_t *shape, const sf_loc *loc) {
  uint64_t dw = weight_on_device(m, loc), dx = sf__t_dptr(xc, loc);
  sf_tensor *y = sf__t_dempty(ndim, shape, loc);
  uint64_t dy = sf__t_dptr(y, loc);
  int block, type = (int)m->type, rows = (int)m->rows, cols = (int)m->cols;
  int n = (int)(xc->numel / m->cols);
  long long rb = (long long)m->row_bytes;
  void *fn = sf__nn_kernel("quant", "sflow_quant_matmul", &block, loc);
  void *params[] = {&type, &dw, &rb, &dx, &dy, &rows, &cols, &n};
  sf__nn_launch(fn, (int64_t)((rows + 7) / 8) * n, block, 0, params, loc);
  sf__t_dwrote(y);
  return y;
}

sf_tensor *sf_std_llm_quant_matmul(sf_tensor *x, const void *w, const sf_type *wt,
                                   const sf_loc *loc) {
  x = sf__t_arg(x, "quant_matmul", loc);
  sf_str *path = path_of(w, wt, loc);
  sf_str *name = FIELD(wt, w, "name", SF_STR, sf_str *);
  const sf__gguf *f = file_of(path, loc);
  const sf__gguf_tensor *t = tensor_of(f, name, loc);
  sf__qmat m = mat_of(f, t, loc);
  char buf[SF__SHAPE_BUF];
  if (x->ndim < 1 || x->shape[x->ndim - 1] != m.cols)
    sf_runtime_error(loc, "quant_matmul: x of shape %s against a weight of %" PRId64 " × %" PRId64
                     " (its last dimension must be %" PRId64 ")", SF__SHP(x, buf), m.rows, m.cols, m.cols);
  int64_t shape[SF__TMAX];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 1] = m.rows;
  int64_t n = x->numel / m.cols;
  sf_tensor *xc = sf__t_contig(x);
  bool blocks = m.type == SF__GGML_Q4_0 || m.type == SF__GGML_Q4_1 || m.type == SF__GGML_Q8_0;
  if (blocks && sf__nn_gpu_here(loc) && m.rows <= INT32_MAX && n <= INT32_MAX / 8) {
    sf_tensor *y = quant_matmul_gpu(&m, xc, x->ndim, shape, loc);
    sf_release(xc);
    return y;
  }
  sf_tensor *y = sf__t_empty(x->ndim, shape, loc);
  sf__q_matmul(&m, sf__t_data(xc), n, sf__t_wdata(y));
  sf_release(xc);
  return y;
}

sf_str *sf_std_llm_quant_kernel(const sf_loc *loc) {
  const char *k = sf__q_kernel();
  return sf_str_new(k, (int64_t)strlen(k));
}
