/*
 * reduce.c — reductions (sum, mean, max over an axis or everything;
 * argmax), softmax and log-softmax over an axis, and the losses
 * (cross-entropy fused with its log-softmax, MSE), each forward with its
 * backward rule beside it.
 *
 * Key design choice: every axis op sees its input as a contiguous
 * (outer, n, inner) block, n the reduced axis, so one loop nest serves
 * every axis: the innermost loop runs over `inner` (contiguous, vectorised)
 * or, when the axis is the last one, over the row itself.  Softmax
 * subtracts the row's maximum before exp (no overflow) and log-softmax is
 * x - max - log(sum exp(x - max)), never log of a rounded-to-zero
 * probability; cross-entropy works from that log-sum-exp directly and its
 * gradient is (softmax - target distribution) / rows, one fused pass.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn.h"

/* The (outer, n, inner) split of t's shape around axis. */
static void split(const sf_tensor *t, int32_t ax, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int32_t i = 0; i < ax; i++)
    *outer *= t->shape[i];
  for (int32_t i = ax + 1; i < t->ndim; i++)
    *inner *= t->shape[i];
  *n = t->shape[ax];
}

/* ------------------------------------------------------- reductions */

/* The reduction over (outer, n, inner) into y (outer, inner); for max
 * also the index of each maximum (the first, as torch) into idx. */
static void reduce_block(int32_t kind, const float *x, float *y, int64_t *idx, int64_t outer,
                         int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; o++) {
    const float *xo = x + o * n * inner;
    float *yo = y + o * inner;
    if (kind == SF__R_MAX) {
      int64_t *io = idx + o * inner;
      for (int64_t j = 0; j < inner; j++) {
        yo[j] = n ? xo[j] : -INFINITY;
        io[j] = 0;
      }
      for (int64_t i = 1; i < n; i++)
        for (int64_t j = 0; j < inner; j++) {
          float v = xo[i * inner + j];
          if (v > yo[j] || (isnan(v) && !isnan(yo[j]))) { /* NaN propagates, as in torch */
            yo[j] = v;
            io[j] = i;
          }
        }
      continue;
    }
    if (inner == 1) { /* a contiguous row: accumulate in double */
      double acc = 0;
      for (int64_t i = 0; i < n; i++)
        acc += xo[i];
      yo[0] = (float)(kind == SF__R_MEAN ? acc / (double)n : acc);
      continue;
    }
    memset(yo, 0, (size_t)inner * sizeof(float));
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < inner; j++)
        yo[j] += xo[i * inner + j];
    if (kind == SF__R_MEAN)
      for (int64_t j = 0; j < inner; j++)
        yo[j] /= (float)n;
  }
}

/* The gradient spread back over the reduced axis. */
sf_tensor *sf__cpu_reduce_bw(const sf__node *n, sf_tensor *g) {
  sf_tensor *x = n->in[0];
  int32_t kind = (int32_t)n->i0;
  int64_t outer = 1, len = x->numel, inner = 1;
  if (n->i1 >= 0)
    split(x, (int32_t)n->i1, &outer, &len, &inner);
  sf_tensor *dx = kind == SF__R_MAX ? sf__t_zeros(x->ndim, x->shape, NULL) : sf__t_like(x);
  const float *gd = sf__t_data(g);
  float *d = sf__t_data(dx);
  float scale = kind == SF__R_MEAN ? 1.0f / (float)len : 1.0f;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      float v = gd[o * inner + j] * scale;
      if (kind == SF__R_MAX)
        d[(o * len + n->idx[o * inner + j]) * inner + j] = v;
      else
        for (int64_t i = 0; i < len; i++)
          d[(o * len + i) * inner + j] = v;
    }
  return dx;
}

static void bw_reduce(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->reduce_bw(n, g));
}

sf_tensor *sf__cpu_reduce(int32_t kind, sf_tensor *a, int32_t ax, int32_t nd,
                          const int64_t *shape, sf__keep *keep, const sf_loc *loc) {
  int64_t outer = 1, n = a->numel, inner = 1;
  if (ax >= 0)
    split(a, ax, &outer, &n, &inner);
  sf_tensor *x = sf__t_contig(a);
  sf_tensor *out = sf__t_empty(nd, shape, loc);
  int64_t *idx = kind == SF__R_MAX ? sf__alloc_n((size_t)(outer * inner), sizeof *idx) : NULL;
  reduce_block(kind, sf__t_data(x), sf__t_data(out), idx, outer, n, inner);
  sf_release(x);
  keep->idx = idx;
  return out;
}

sf_tensor *sf__t_reduce(int32_t kind, sf_tensor *a, int64_t axis, const sf_loc *loc) {
  if (kind != SF__R_SUM && kind != SF__R_MEAN && kind != SF__R_MAX)
    sf_runtime_error(loc, "internal error: reduction kind %d", (int)kind);
  const char *name = sf__reduce_name(kind);
  sf__t_arg(a, name, loc);
  bool all = axis == SF__ALL_AXES;
  int32_t ax = all ? -1 : sf__t_axis(name, a, axis, loc);
  int64_t outer = 1, n = a->numel, inner = 1;
  int32_t nd = 0;
  int64_t shape[SF__TMAX];
  if (!all) {
    split(a, ax, &outer, &n, &inner);
    for (int32_t i = 0; i < a->ndim; i++)
      if (i != ax)
        shape[nd++] = a->shape[i];
  }
  if (kind == SF__R_MAX && n == 0) {
    char sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "max: the reduced axis of shape %s is empty", SF__SHP(a, sb));
  }
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->reduce(kind, a, ax, nd, shape, &keep, loc);
  sf__node *node = sf__record(name, out, bw_reduce, a, NULL);
  if (node) {
    node->i0 = kind;
    node->i1 = ax;
    node->idx = keep.idx;
    node->saved = keep.saved;
  } else {
    sf_free(keep.idx);
    sf_release(keep.saved);
  }
  return out;
}

sf_array *sf__t_argmax(sf_tensor *a, int64_t axis, const sf_loc *loc) {
  sf__t_arg(a, "argmax", loc);
  int32_t ax = sf__t_axis("argmax", a, axis, loc);
  int64_t outer, n, inner;
  split(a, ax, &outer, &n, &inner);
  if (n == 0) {
    char sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "argmax: the reduced axis of shape %s is empty", SF__SHP(a, sb));
  }
  return sf__nn_dev_here(loc)->argmax(a, ax, loc);
}

sf_array *sf__cpu_argmax(sf_tensor *a, int32_t ax, const sf_loc *loc) {
  int64_t outer, n, inner;
  split(a, ax, &outer, &n, &inner);
  sf_tensor *x = sf__t_contig(a);
  float *y = sf__alloc_n((size_t)(outer * inner), sizeof *y);
  sf_array *r = sf_array_new(&sf_type_i64, outer * inner, loc);
  reduce_block(SF__R_MAX, sf__t_data(x), y, r->data, outer, n, inner);
  sf_free(y);
  sf_release(x);
  return r;
}

/* ---------------------------------------------------------- softmax */

/* Row k of the (outer, n, inner) block, as a base and a stride. */
static void softmax_rows(const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                         bool log) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      const float *xr = x + o * n * inner + j;
      float *yr = y + o * n * inner + j;
      float m = -INFINITY;
      for (int64_t i = 0; i < n; i++)
        m = xr[i * inner] > m ? xr[i * inner] : m;
      if (m == -INFINITY)
        m = 0; /* a row of -inf: exp gives zeros, the sum 0, as torch (nan) */
      double s = 0;
      for (int64_t i = 0; i < n; i++) {
        float e = expf(xr[i * inner] - m);
        if (!log)
          yr[i * inner] = e;
        s += e;
      }
      if (log) { /* (x - max) - log s: x - (max + log s) would round at max's scale */
        float ls = logf((float)s);
        for (int64_t i = 0; i < n; i++)
          yr[i * inner] = (xr[i * inner] - m) - ls;
      } else {
        float inv = (float)(1.0 / s);
        for (int64_t i = 0; i < n; i++)
          yr[i * inner] *= inv;
      }
    }
}

/* softmax: dx = y (g - sum g y); log_softmax: dx = g - softmax sum g. */
sf_tensor *sf__cpu_softmax_bw(const sf__node *nd, sf_tensor *g) {
  sf_tensor *x = nd->in[0];
  bool log = nd->i1 != 0;
  int64_t outer, n, inner;
  split(x, (int32_t)nd->i0, &outer, &n, &inner);
  sf_tensor *dx = sf__t_like(x);
  const float *y = sf__t_data(nd->saved), *gd = sf__t_data(g);
  float *d = sf__t_data(dx);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      int64_t base = o * n * inner + j;
      double s = 0;
      for (int64_t i = 0; i < n; i++)
        s += log ? gd[base + i * inner] : gd[base + i * inner] * y[base + i * inner];
      for (int64_t i = 0; i < n; i++) {
        int64_t k = base + i * inner;
        d[k] = log ? gd[k] - expf(y[k]) * (float)s : y[k] * (gd[k] - (float)s);
      }
    }
  return dx;
}

static void bw_softmax(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->softmax_bw(n, g));
}

sf_tensor *sf__cpu_softmax(sf_tensor *a, int32_t ax, bool log, const sf_loc *loc) {
  (void)loc;
  int64_t outer, n, inner;
  split(a, ax, &outer, &n, &inner);
  sf_tensor *x = sf__t_contig(a);
  sf_tensor *out = sf__t_like(x);
  softmax_rows(sf__t_data(x), sf__t_data(out), outer, n, inner, log);
  sf_release(x);
  return out;
}

sf_tensor *sf__t_softmax(sf_tensor *a, int64_t axis, bool log, const sf_loc *loc) {
  const char *name = log ? "log_softmax" : "softmax";
  sf__t_arg(a, name, loc);
  int32_t ax = sf__t_axis(name, a, axis, loc);
  sf_tensor *out = sf__nn_dev_here(loc)->softmax(a, ax, log, loc);
  sf__node *nd = sf__record(name, out, bw_softmax, a, NULL);
  if (nd) {
    nd->i0 = ax;
    nd->i1 = log;
    nd->saved = sf__t_view(out, out->ndim, out->shape, out->strides, out->offset);
  }
  return out;
}

/* ------------------------------------------------------------ losses */

/* Checks the targets against logits (N, C): the count of rows used. */
static int64_t check_targets(const sf_tensor *x, sf_array *targets, int64_t ignore,
                             const sf_loc *loc) {
  char sb[SF__SHAPE_BUF];
  if (x->ndim != 2)
    sf_runtime_error(loc, "cross_entropy: logits must be (N, C), not shape %s", SF__SHP(x, sb));
  int64_t rows = x->shape[0], classes = x->shape[1], len = targets ? targets->len : 0;
  if (len != rows)
    sf_runtime_error(loc, "cross_entropy: %" PRId64 " targets for %" PRId64
                     " rows (logits shape %s)", len, rows, SF__SHP(x, sb));
  int64_t used = 0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = ((int64_t *)targets->data)[r];
    if (t == ignore)
      continue;
    if (t < 0 || t >= classes)
      sf_runtime_error(loc, "cross_entropy: target %" PRId64 " (row %" PRId64
                       ") is out of range for %" PRId64 " classes", t, r, classes);
    used++;
  }
  return used;
}

/* d loss / d logits = g (softmax - q) / used on the rows used. */
sf_tensor *sf__cpu_cross_entropy_bw(const sf__node *nd, sf_tensor *g) {
  sf_tensor *x = sf__t_contig(nd->in[0]);
  int64_t rows = x->shape[0], classes = x->shape[1], used = nd->i1;
  const int64_t *tg = nd->targets->data;
  float eps = nd->f0, scale = sf__t_data(g)[0] / (float)used;
  sf_tensor *dx = sf__t_zeros(2, x->shape, NULL);
  const float *xd = sf__t_data(x);
  float *d = sf__t_data(dx);
  for (int64_t r = 0; r < rows; r++) {
    if (tg[r] == nd->i0)
      continue;
    softmax_rows(xd + r * classes, d + r * classes, 1, classes, 1, false);
    for (int64_t c = 0; c < classes; c++) {
      float q = eps / (float)classes + (c == tg[r] ? 1.0f - eps : 0.0f);
      d[r * classes + c] = (d[r * classes + c] - q) * scale;
    }
  }
  sf_release(x);
  return dx;
}

static void bw_cross_entropy(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->cross_entropy_bw(n, g));
}

sf_tensor *sf__t_cross_entropy(sf_tensor *logits, sf_array *targets, int64_t ignore_index,
                               float label_smoothing, const sf_loc *loc) {
  sf__t_arg(logits, "cross_entropy", loc);
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
    sf_runtime_error(loc, "cross_entropy: label_smoothing must be in [0, 1], not %g",
                     (double)label_smoothing);
  int64_t used = check_targets(logits, targets, ignore_index, loc);
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->cross_entropy(logits, targets, ignore_index,
                                                        label_smoothing, used, &keep, loc);
  sf__node *nd = sf__record("cross_entropy", out, bw_cross_entropy, logits, NULL);
  if (nd) {
    nd->i0 = ignore_index;
    nd->i1 = used;
    nd->f0 = label_smoothing;
    nd->targets = targets;
    sf_retain(targets);
    nd->saved = keep.saved;
  } else {
    sf_release(keep.saved);
  }
  return out;
}

sf_tensor *sf__cpu_cross_entropy(sf_tensor *logits, sf_array *targets, int64_t ignore_index,
                                 float label_smoothing, int64_t used, sf__keep *keep,
                                 const sf_loc *loc) {
  (void)keep;
  sf_tensor *x = sf__t_contig(logits);
  int64_t rows = x->shape[0], classes = x->shape[1];
  const int64_t *tg = targets ? targets->data : NULL;
  const float *xd = sf__t_data(x);
  double total = 0;
  for (int64_t r = 0; r < rows; r++) {
    if (tg[r] == ignore_index)
      continue;
    const float *row = xd + r * classes;
    float m = -INFINITY;
    double sum = 0, s = 0;
    for (int64_t c = 0; c < classes; c++)
      m = row[c] > m ? row[c] : m;
    for (int64_t c = 0; c < classes; c++) {
      s += expf(row[c] - m);
      sum += row[c];
    }
    double lse = (double)m + log(s);
    double nll = lse - row[tg[r]], smooth = classes ? lse - sum / (double)classes : 0;
    total += (1.0 - label_smoothing) * nll + label_smoothing * smooth;
  }
  sf_release(x);
  sf_tensor *out = sf__t_empty(0, NULL, loc);
  sf__t_data(out)[0] = (float)(total / (double)used); /* no row used: nan, as torch */
  return out;
}

sf_tensor *sf__t_mse(sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  sf__t_arg(a, "mse", loc);
  sf__t_arg(b, "mse", loc);
  bool same = a->ndim == b->ndim;
  for (int32_t i = 0; same && i < a->ndim; i++)
    same = a->shape[i] == b->shape[i];
  if (!same) {
    char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "mse: shapes %s and %s differ", SF__SHP(a, sa), SF__SHP(b, sb));
  }
  sf_tensor *d = sf__t_binary(SF_TOP_SUB, a, b, loc);
  sf_tensor *d2 = sf__t_binary(SF_TOP_MUL, d, d, loc);
  sf_tensor *m = sf__t_reduce(SF__R_MEAN, d2, SF__ALL_AXES, loc);
  sf_release(d);
  sf_release(d2);
  return m;
}
