/*
 * select.c — std.nn's choices between tensors and of their elements
 * (docs/nn.md, "Masks and selection"): nn.where(cond, a, b),
 * nn.masked_fill(x, mask, value), topk's indices and nn.multinomial,
 * PyTorch's; their checks, where's one backward rule and the CPU kernels,
 * the GPU's in gpu_select.c.
 *
 * Key design choice: a condition is an f32 tensor whose non-zero values
 * are true (tensors hold f32 only), broadcast with a and b as the binary
 * ops broadcast; masked_fill is where(mask, value, x) with value a 0-d
 * tensor, and where's gradient is where again (the upstream gradient on
 * one side, zero on the other), so one kernel per device serves every
 * direction.  topk returns its indices as an i64[] and std.nn gathers the
 * values with them, so the values' gradient is gather's.  multinomial
 * draws with replacement, draw j of row r from counter.h's (seed, r, j)
 * alone: any device, any thread count, the same indices.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "counter.h"
#include "nn.h"

/* ------------------------------------------------------------- where */

/* Operand t's strides over the result shape (right-aligned; 0 where t is
 * broadcast). */
static void strides_over(int32_t nd, const sf_tensor *t, int64_t *st) {
  for (int32_t a = 0; a < nd; a++) {
    int32_t ta = a - (nd - t->ndim);
    st[a] = ta < 0 || t->shape[ta] == 1 ? 0 : t->strides[ta];
  }
}

void sf__cpu_where(sf_tensor *out, sf_tensor *c, sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  (void)loc;
  int32_t nd = out->ndim;
  int64_t st[3][SF__TMAX];
  strides_over(nd, c, st[0]);
  strides_over(nd, a, st[1]);
  strides_over(nd, b, st[2]);
  const float *pc = sf__t_data(c), *pa = sf__t_data(a), *pb = sf__t_data(b);
  float *o = sf__t_data(out);
  for (int64_t i = 0; i < out->numel; i++) {
    int64_t oc = 0, oa = 0, ob = 0, r = i;
    for (int32_t d = nd - 1; d >= 0; d--) {
      int64_t j = r % out->shape[d];
      r /= out->shape[d];
      oc += j * st[0][d];
      oa += j * st[1][d];
      ob += j * st[2][d];
    }
    o[i] = pc[oc] != 0.0f ? pa[oa] : pb[ob];
  }
}

/* d a = where(c, g, 0) and d b = where(c, 0, g), each summed to its shape. */
static void bw_where(sf__node *n, sf_tensor *g) {
  const sf__nn_dev *D = sf__nn_dev_of(n, g);
  sf_tensor *a = n->in[0], *b = n->in[1], *c = n->in[2];
  sf_tensor *zero = D->zeros(0, NULL, NULL);
  for (int side = 0; side < 2; side++) {
    sf_tensor *x = side ? b : a;
    if (!x->req)
      continue;
    sf_tensor *gx = D->empty(g->ndim, g->shape, NULL);
    D->where(gx, c, side ? zero : g, side ? g : zero, NULL);
    sf__grad_add(x, sf__t_reduce_to(gx, x->ndim, x->shape));
    sf_release(gx);
  }
  sf_release(zero);
}

sf_tensor *sf__t_where(sf_tensor *c, sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  sf__t_arg(c, "where", loc);
  sf__t_arg(a, "where", loc);
  sf__t_arg(b, "where", loc);
  int32_t n1, nd;
  int64_t s1[SF__TMAX], shape[SF__TMAX];
  if (!sf__broadcast_shape(c->ndim, c->shape, a->ndim, a->shape, &n1, s1) ||
      !sf__broadcast_shape(n1, s1, b->ndim, b->shape, &nd, shape)) {
    char sc[SF__SHAPE_BUF], sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "where: shapes %s (cond), %s and %s do not broadcast", SF__SHP(c, sc),
                     SF__SHP(a, sa), SF__SHP(b, sb));
  }
  const sf__nn_dev *D = sf__nn_dev_here(loc);
  sf_tensor *out = D->empty(nd, shape, loc);
  D->where(out, c, a, b, loc);
  sf__record3("where", out, bw_where, a, b, c);
  return out;
}

sf_tensor *sf_std_nn_where(sf_tensor *c, sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  return sf__t_where(c, a, b, loc);
}

sf_tensor *sf_std_nn_masked_fill(sf_tensor *x, sf_tensor *mask, double value, const sf_loc *loc) {
  sf__t_arg(x, "masked_fill", loc);
  sf__t_arg(mask, "masked_fill", loc);
  int32_t nd;
  int64_t shape[SF__TMAX];
  bool fits = sf__broadcast_shape(mask->ndim, mask->shape, x->ndim, x->shape, &nd, shape) &&
              nd == x->ndim && !memcmp(shape, x->shape, sizeof(int64_t) * (size_t)nd);
  if (!fits) {
    char sm[SF__SHAPE_BUF], sx[SF__SHAPE_BUF];
    sf_runtime_error(loc, "masked_fill: mask %s does not broadcast to the input's shape %s",
                     SF__SHP(mask, sm), SF__SHP(x, sx));
  }
  sf_tensor *v = sf__nn_gpu_here(loc) ? sf__gpu_full(0, NULL, (float)value, loc)
                                      : sf__t_full(0, NULL, (float)value);
  sf_tensor *out = sf__t_where(mask, v, x, loc);
  sf_release(v);
  return out;
}

/* -------------------------------------------------------------- topk */

/* (v, i) comes before (w, j) in topk's order: NaN the largest (as torch),
 * then larger values, ties to the lower index. */
static inline bool before(float v, int64_t i, float w, int64_t j) {
  bool vn = isnan(v), wn = isnan(w);
  if (vn != wn)
    return vn;
  if (!vn && v != w)
    return v > w;
  return i < j;
}

/* The heap of the k best so far, its root the last of them in order. */
static void sift_down(const float *x, int64_t *h, int64_t k, int64_t at) {
  for (;;) {
    int64_t l = 2 * at + 1, r = l + 1, m = at;
    if (l < k && before(x[h[m]], h[m], x[h[l]], h[l]))
      m = l;
    if (r < k && before(x[h[m]], h[m], x[h[r]], h[r]))
      m = r;
    if (m == at)
      return;
    int64_t t = h[at];
    h[at] = h[m];
    h[m] = t;
    at = m;
  }
}

void sf__topk_row(const float *x, int64_t n, int64_t k, int64_t *out) {
  if (k == 0)
    return;
  int64_t *h = out; /* the heap lives in the result */
  for (int64_t i = 0; i < k; i++)
    h[i] = i;
  for (int64_t i = k / 2 - 1; i >= 0; i--)
    sift_down(x, h, k, i);
  for (int64_t i = k; i < n; i++)
    if (before(x[i], i, x[h[0]], h[0])) {
      h[0] = i;
      sift_down(x, h, k, 0);
    }
  for (int64_t m = k - 1; m > 0; m--) { /* heapsort: the last in order to the end */
    int64_t t = h[0];
    h[0] = h[m];
    h[m] = t;
    sift_down(x, h, m, 0);
  }
}

void sf__cpu_topk(sf_tensor *x, int64_t k, int64_t *idx, const sf_loc *loc) {
  (void)loc;
  sf_tensor *xc = sf__t_contig(x);
  int64_t n = x->ndim ? x->shape[x->ndim - 1] : 1, rows = n ? x->numel / n : 0;
  const float *d = sf__t_data(xc);
  for (int64_t r = 0; r < rows; r++)
    sf__topk_row(d + r * n, n, k, idx + r * k);
  sf_release(xc);
}

void sf_std_nn_topk(void *out, const sf_type *out_type, sf_tensor *x, int64_t k,
                    const sf_loc *loc) {
  sf__t_arg(x, "topk", loc);
  char sx[SF__SHAPE_BUF];
  if (x->ndim == 0)
    sf_runtime_error(loc, "topk: the input must have a last dimension, not shape []");
  int64_t n = x->shape[x->ndim - 1];
  if (k < 0 || k > n)
    sf_runtime_error(loc, "topk: k = %" PRId64 " is out of range [0, %" PRId64 "] for shape %s",
                     k, n, SF__SHP(x, sx));
  int64_t rows = n ? x->numel / n : 0;
  sf_array *r = sf_array_new(&sf_type_i64, rows * k, loc);
  if (rows * k > 0)
    sf__nn_dev_here(loc)->topk(x, k, (int64_t *)r->data, loc);
  sf_tensor **values = sf__field(out_type, out, "values", SF_TENSOR, loc);
  sf_array **indices = sf__field(out_type, out, "indices", SF_ARRAY, loc);
  *values = sf__t_gather(x, -1, r, loc);
  *indices = r;
}

/* ------------------------------------------------------- multinomial */

void sf__cpu_multinomial(sf_tensor *p, int64_t n, uint64_t seed, int64_t *out,
                         const sf_loc *loc) {
  (void)loc;
  sf_tensor *pc = sf__t_contig(p);
  int64_t c = p->shape[p->ndim - 1], rows = p->numel / c;
  const float *d = sf__t_data(pc);
  for (int64_t r = 0; r < rows; r++) {
    const float *pr = d + r * c;
    double total = 0;
    for (int64_t i = 0; i < c; i++)
      total += (double)pr[i];
    for (int64_t j = 0; j < n; j++) {
      double target = sf_ctr_unit(seed, (uint64_t)r, (uint64_t)j) * total, acc = 0;
      int64_t pick = -1, last = 0;
      for (int64_t i = 0; i < c; i++) {
        if (pr[i] > 0.0f)
          last = i;
        acc += (double)pr[i];
        if (acc > target) {
          pick = i;
          break;
        }
      }
      out[r * n + j] = pick >= 0 ? pick : last;
    }
  }
  sf_release(pc);
}

sf_array *sf_std_nn_multinomial(sf_tensor *probs, int64_t n, int64_t seed, const sf_loc *loc) {
  sf__t_arg(probs, "multinomial", loc);
  char sp[SF__SHAPE_BUF];
  if (probs->ndim < 1 || probs->ndim > 2 || probs->shape[probs->ndim - 1] == 0)
    sf_runtime_error(loc, "multinomial: probs must be 1-D or 2-D with at least one category, not "
                     "shape %s", SF__SHP(probs, sp));
  if (n < 0)
    sf_runtime_error(loc, "multinomial: the number of samples must be >= 0, not %" PRId64, n);
  int64_t c = probs->shape[probs->ndim - 1], rows = probs->numel / c;
  sf_tensor *pc = sf__t_contig(probs);
  const float *d = sf__t_data(pc); /* the checks read the values (on a GPU: one read-back) */
  for (int64_t r = 0; r < rows; r++) {
    double total = 0;
    for (int64_t i = 0; i < c; i++) {
      float v = d[r * c + i];
      if (!(v >= 0) || isinf(v)) {
        sf_release(pc);
        sf_runtime_error(loc, "multinomial: probs[%" PRId64 ", %" PRId64 "] = %g; every "
                         "probability must be finite and >= 0", r, i, (double)v);
      }
      total += v;
    }
    if (!(total > 0) || isinf(total)) {
      sf_release(pc);
      sf_runtime_error(loc, "multinomial: row %" PRId64 " of probs sums to %g; it must be "
                       "positive and finite", r, total);
    }
  }
  sf_release(pc);
  sf_array *out = sf_array_new(&sf_type_i64, rows * n, loc);
  if (rows * n > 0)
    sf__nn_dev_here(loc)->multinomial(probs, n, (uint64_t)seed, (int64_t *)out->data, loc);
  return out;
}
