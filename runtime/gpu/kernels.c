/*
 * kernels.c — the library kernels of kernels/: lookup of their embedded
 * CUDA C, a CPU reference for each, and the GPU drivers the tests and the
 * benchmarks call.
 *
 * Key design choice: the references are the plain loops a reader checks by
 * eye (sums accumulate in double), and every GPU kernel is tested against
 * them with the max difference printed (tests/gpu/), as llm.c does.
 */
#include <math.h>
#include <string.h>

#include "gpu.h"

const sf__kernel_source *sf__kernel_source_find(const char *name) {
  for (const sf__kernel_source *k = sf__kernel_sources; k->name; k++)
    if (!strcmp(k->name, name))
      return k;
  return NULL;
}

/* ------------------------------------------------------- references */

double sf__ref_sum_f32(const float *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += x[i];
  return s;
}

double sf__ref_max_f32(const float *x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    m = x[i] > m ? x[i] : m;
  return m;
}

void sf__ref_softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; c++)
      m = xr[c] > m ? xr[c] : m;
    double s = 0;
    for (int64_t c = 0; c < cols; c++)
      s += exp((double)xr[c] - m);
    for (int64_t c = 0; c < cols; c++)
      yr[c] = (float)(exp((double)xr[c] - m) / s);
  }
}

/* op: "add" "sub" "mul" "div" (a, b -> c); "relu" "exp" "tanh" (a -> c). */
bool sf__ref_elementwise(const char *op, const float *a, const float *b, float *c, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (!strcmp(op, "add")) c[i] = a[i] + b[i];
    else if (!strcmp(op, "sub")) c[i] = a[i] - b[i];
    else if (!strcmp(op, "mul")) c[i] = a[i] * b[i];
    else if (!strcmp(op, "div")) c[i] = a[i] / b[i];
    else if (!strcmp(op, "relu")) c[i] = a[i] > 0 ? a[i] : 0;
    else if (!strcmp(op, "exp")) c[i] = expf(a[i]);
    else if (!strcmp(op, "tanh")) c[i] = tanhf(a[i]);
    else return false;
  }
  return true;
}

/* ------------------------------------------------------ GPU drivers */

static void *lib_fn(const char *file, const char *entry, int *block) {
  const sf__kernel_source *k = sf__kernel_source_find(file);
  if (!k)
    sf_runtime_error(NULL, "library kernel file '%s' is not embedded", file);
  return sf__gpu_function(k->text, entry, block, NULL);
}

/* Sum or max of an f32 array on the GPU (after sf__gpu_ready). */
double sf__gpu_reduce_f32(sf_array *x, bool max) {
  int block;
  void *f = lib_fn("reduce", max ? "sflow_max_f32" : "sflow_sum_f32", &block);
  if (block > 1024)
    block = 1024;
  for (int b = 1024; b; b >>= 1) /* a power of two, for the tree */
    if (b <= block) {
      block = b;
      break;
    }
  int64_t n = x->len, grid = (n + block - 1) / block;
  if (grid > 1024)
    grid = 1024;
  if (grid < 1)
    grid = 1;
  sf_array *part = sf_array_new(&sf_type_f32, grid, NULL);
  sf_array *out = sf_array_new(&sf_type_f32, 1, NULL);
  uint64_t px = sf__gpu_device_copy(x, NULL), pp = sf__gpu_device_alloc(part, NULL),
           po = sf__gpu_device_alloc(out, NULL);
  void *p1[] = {&px, &n, &pp};
  sf__gpu_launch(f, block, grid * block, p1, NULL);
  int64_t g = grid;
  void *p2[] = {&pp, &g, &po};
  sf__gpu_launch(f, block, block, p2, NULL);
  sf__gpu_device_wrote(out);
  sf_gpu_settle();
  double r = ((float *)out->data)[0];
  sf_release(part);
  sf_release(out);
  return r;
}

/* y = softmax over the rows of x (rows×cols), on the GPU. */
void sf__gpu_softmax_rows(sf_array *x, sf_array *y, int64_t rows, int64_t cols) {
  int block;
  void *f = lib_fn("softmax", "sflow_softmax_rows_f32", &block);
  block = block >= 256 ? 256 : block >= 128 ? 128 : 64;
  uint64_t px = sf__gpu_device_copy(x, NULL), py = sf__gpu_device_alloc(y, NULL);
  void *p[] = {&px, &py, &rows, &cols};
  sf__gpu_launch(f, block, rows * block, p, NULL);
  sf__gpu_device_wrote(y);
}

/* c = op(a, b) (b unused for unary ops), on the GPU. */
void sf__gpu_elementwise(const char *op, sf_array *a, sf_array *b, sf_array *c) {
  char entry[64];
  snprintf(entry, sizeof entry, "sflow_%s_f32", op);
  int block;
  void *f = lib_fn("elementwise", entry, &block);
  int64_t n = a->len;
  uint64_t pa = sf__gpu_device_copy(a, NULL), pc = sf__gpu_device_alloc(c, NULL);
  uint64_t pb = b ? sf__gpu_device_copy(b, NULL) : 0;
  void *binary[] = {&pa, &pb, &pc, &n}, *unary[] = {&pa, &pc, &n};
  sf__gpu_launch(f, block, n, b ? binary : unary, NULL);
  sf__gpu_device_wrote(c);
}
