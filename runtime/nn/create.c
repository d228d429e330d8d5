/*
 * create.c — std.nn's tensors made from numbers and its triangular masks
 * (docs/nn.md, "Masks and selection"): nn.arange(start, end, step),
 * nn.full(shape, value), nn.tril(x, k) and nn.triu(x, k), PyTorch's; the
 * tri op's checks, its one backward rule and its CPU kernel, the GPU's in
 * gpu_select.c.
 *
 * Key design choice: arange and full are made on the host and placed
 * where the call runs (sf__t_place), as zeros and ones are; tril and triu
 * are one op, tri, whose gradient is the same mask over the upstream
 * gradient, so one kernel per device serves the forward and the backward.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn.h"

sf_tensor *sf_std_nn_arange(double start, double end, double step, const sf_loc *loc) {
  if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
    sf_runtime_error(loc, "arange: start %g, end %g and step %g must be finite and step non-zero",
                     start, end, step);
  if ((step > 0 && end < start) || (step < 0 && end > start))
    sf_runtime_error(loc, "arange: end %g is on the wrong side of start %g for step %g", end,
                     start, step);
  double len = ceil((end - start) / step);
  if (len > (double)INT64_MAX / 8)
    sf_runtime_error(loc, "arange: %g elements are too many", len);
  int64_t n = (int64_t)len;
  sf_tensor *t = sf__t_empty(1, &n, loc);
  float *d = sf__t_data(t);
  for (int64_t i = 0; i < n; i++)
    d[i] = (float)(start + (double)i * step);
  return sf__t_place(t, loc);
}

sf_tensor *sf_std_nn_full(sf_array *shape, double value, const sf_loc *loc) {
  int32_t nd;
  int64_t dims[SF__TMAX];
  sf__t_shape_from(shape, "full", &nd, dims, loc);
  sf__t_numel_checked(nd, dims, loc);
  if (sf__nn_gpu_here(loc))
    return sf__gpu_full(nd, dims, (float)value, loc);
  return sf__t_full(nd, dims, (float)value);
}

/* Element i of a tensor of x's shape, row-major, read through x's strides. */
static int64_t offset_of(const sf_tensor *x, int64_t i) {
  int64_t off = 0;
  for (int32_t a = x->ndim - 1; a >= 0; a--) {
    off += (i % x->shape[a]) * x->strides[a];
    i /= x->shape[a];
  }
  return off;
}

sf_tensor *sf__cpu_tri(sf_tensor *x, int64_t k, bool upper, const sf_loc *loc) {
  sf_tensor *out = sf__t_empty(x->ndim, x->shape, loc);
  const float *xd = sf__t_data(x);
  float *o = sf__t_data(out);
  int64_t cols = x->shape[x->ndim - 1], rows = x->shape[x->ndim - 2];
  bool contig = sf__t_is_contig(x);
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t c = i % cols, r = (i / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    o[i] = keep ? xd[contig ? i : offset_of(x, i)] : 0.0f;
  }
  return out;
}

static void bw_tri(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->tri(g, n->i0, n->i1 != 0, NULL));
}

sf_tensor *sf__t_tri(sf_tensor *x, int64_t k, bool upper, const sf_loc *loc) {
  const char *op = upper ? "triu" : "tril";
  sf__t_arg(x, op, loc);
  if (x->ndim < 2) {
    char sx[SF__SHAPE_BUF];
    sf_runtime_error(loc, "%s: the input must have at least 2 dimensions, not shape %s", op,
                     SF__SHP(x, sx));
  }
  sf_tensor *out = sf__nn_dev_here(loc)->tri(x, k, upper, loc);
  sf__node *n = sf__record(op, out, bw_tri, x, NULL);
  if (n) {
    n->i0 = k;
    n->i1 = upper;
  }
  return out;
}

sf_tensor *sf_std_nn_tril(sf_tensor *x, int64_t k, const sf_loc *loc) {
  return sf__t_tri(x, k, false, loc);
}

sf_tensor *sf_std_nn_triu(sf_tensor *x, int64_t k, const sf_loc *loc) {
  return sf__t_tri(x, k, true, loc);
}
