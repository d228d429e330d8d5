/*
 * index.c — parts of a tensor and tensors from parts: t[i] and t[a..b]
 * (the ABI rows sf_tensor_index and sf_tensor_slice that codegen lowers
 * indexing to), select and narrow along any axis, index_select and
 * gather (std.nn's copies by an i64[] of indices), and nn.stack and
 * nn.cat, each forward with its backward rule beside it.
 *
 * Key design choice: t[i], t[a..b], select and narrow are views (a new
 * header over t's storage, as reshape and transpose are), so taking a row
 * of a batch copies nothing; tensors are values, so a view can never see
 * a write.  Their backward scatters the gradient into zeros of the
 * source's shape, so only the selected elements receive one.
 * index_select and gather copy (their indices may repeat); their backward
 * adds the gradient back at the indices, so a repeated index accumulates.
 * stack and cat copy every input once into one contiguous result and
 * record one node over all of them (sf__record_n), whose rule hands each
 * input its region of the gradient.
 */
#include <inttypes.h>
#include <string.h>

#include "nn.h"

/* ------------------------------------- t[i], t[a..b], select, narrow */

/* A view of t along axis: len entries from start, or (len < 0) the one
 * entry start with the axis dropped.  The bounds are the caller's. */
static sf_tensor *narrow_view(const sf_tensor *t, int32_t axis, int64_t start, int64_t len) {
  int64_t shape[SF__TMAX], strides[SF__TMAX];
  int32_t nd = 0;
  for (int32_t d = 0; d < t->ndim; d++) {
    if (d == axis && len < 0)
      continue;
    shape[nd] = d == axis ? len : t->shape[d];
    strides[nd++] = t->strides[d];
  }
  return sf__t_view(t, nd, shape, strides, t->offset + start * t->strides[axis]);
}

/* The gradient of a select or narrow (t[i] and t[a..b] are both along
 * axis 0): zeros of the source's shape with g written into the region the
 * forward view covered (n->i2 the axis, n->i0 its first index, n->i1 the
 * length taken or -1 for a select, whose axis is dropped). */
static void bw_narrow(sf__node *n, sf_tensor *g) {
  const sf__nn_dev *D = sf__nn_dev_of(n, g);
  sf_tensor *x = n->in[0];
  sf_tensor *z = D->zeros(x->ndim, x->shape, NULL);
  sf_tensor *v = narrow_view(z, (int32_t)n->i2, n->i0, n->i1);
  D->assign(v, g);
  sf_release(v);
  sf__grad_add(x, z);
}

/* The checked view, recorded. */
static sf_tensor *narrow_rec(const char *op, sf_tensor *t, int32_t axis, int64_t start,
                             int64_t len) {
  sf_tensor *out = narrow_view(t, axis, start, len);
  sf__node *n = sf__record(op, out, bw_narrow, t, NULL);
  if (n) {
    n->i0 = start;
    n->i1 = len;
    n->i2 = axis;
  }
  return out;
}

/* The first-axis length of t, refusing a 0-d tensor (it has no rows). */
static int64_t rows_of(sf_tensor *t, const char *what, const sf_loc *loc) {
  sf__t_arg(t, what, loc);
  if (t->ndim == 0)
    sf_runtime_error(loc, "%s: a 0-d tensor has no rows to index (use item() for its value)",
                     what);
  return t->shape[0];
}

sf_tensor *sf__t_row(sf_tensor *t, int64_t i, const sf_loc *loc) {
  int64_t len = rows_of(t, "tensor index", loc), r = i < 0 ? i + len : i;
  char sb[SF__SHAPE_BUF];
  if (r < 0 || r >= len)
    sf_runtime_error(loc, "tensor index %" PRId64 " out of bounds for length %" PRId64
                     " (shape %s)", i, len, SF__SHP(t, sb));
  return narrow_rec("index", t, 0, r, -1);
}

sf_tensor *sf__t_rows(sf_tensor *t, int64_t from, int64_t to, const sf_loc *loc) {
  int64_t len = rows_of(t, "tensor slice", loc);
  char sb[SF__SHAPE_BUF];
  if (from < 0 || to > len || from > to)
    sf_runtime_error(loc, "tensor slice [%" PRId64 "..%" PRId64 "] out of range for length %" PRId64
                     " (shape %s)", from, to, len, SF__SHP(t, sb));
  return narrow_rec("slice", t, 0, from, to - from);
}

sf_tensor *sf_tensor_index(sf_tensor *t, int64_t i, const sf_loc *loc) {
  return sf__t_row(t, i, loc);
}

sf_tensor *sf_tensor_slice(sf_tensor *t, int64_t from, int64_t to, const sf_loc *loc) {
  return sf__t_rows(t, from, to, loc);
}

sf_tensor *sf__t_select(sf_tensor *t, int64_t axis, int64_t i, const sf_loc *loc) {
  sf__t_arg(t, "select", loc);
  int32_t ax = sf__t_axis("select", t, axis, loc);
  int64_t len = t->shape[ax], r = i < 0 ? i + len : i;
  char sb[SF__SHAPE_BUF];
  if (r < 0 || r >= len)
    sf_runtime_error(loc, "select: index %" PRId64 " out of bounds for length %" PRId64
                     " along axis %d (shape %s)", i, len, (int)ax, SF__SHP(t, sb));
  return narrow_rec("select", t, ax, r, -1);
}

sf_tensor *sf__t_narrow(sf_tensor *t, int64_t axis, int64_t start, int64_t length,
                        const sf_loc *loc) {
  sf__t_arg(t, "narrow", loc);
  int32_t ax = sf__t_axis("narrow", t, axis, loc);
  int64_t len = t->shape[ax], s = start < 0 ? start + len : start;
  char sb[SF__SHAPE_BUF];
  if (s < 0 || s > len || length < 0 || length > len - s)
    sf_runtime_error(loc, "narrow: start %" PRId64 " and length %" PRId64 " do not fit length %"
                     PRId64 " along axis %d (shape %s)", start, length, len, (int)ax,
                     SF__SHP(t, sb));
  return narrow_rec("narrow", t, ax, s, length);
}

/* ------------------------------------------- index_select and gather */

/* t seen as (outer, len, inner) around axis, the result as (outer, k,
 * inner): out[o, j, i] = t[o, ix(o, j, i), i], where ix is idx[j] for
 * index_select and idx[(o k + j) inner + i] for gather (per = true).
 * Backward scatters the gradient back the same way, adding, so an index
 * given twice receives both gradients. */
typedef struct {
  int64_t outer, len, inner, k;
} gather_dims;

static gather_dims dims_of(const sf_tensor *t, int32_t axis, int64_t k) {
  gather_dims d = {1, t->shape[axis], 1, k};
  for (int32_t i = 0; i < axis; i++)
    d.outer *= t->shape[i];
  for (int32_t i = axis + 1; i < t->ndim; i++)
    d.inner *= t->shape[i];
  return d;
}

static void bw_gather(sf__node *n, sf_tensor *g) {
  sf_tensor *x = n->in[0];
  sf_tensor *z = sf__t_zeros(x->ndim, x->shape, NULL);
  gather_dims d = dims_of(x, (int32_t)n->i0, g->shape[n->i0]);
  const float *gs = sf__t_data(g);
  float *zs = sf__t_data(z);
  const int64_t *ix = n->idx;
  for (int64_t o = 0; o < d.outer; o++)
    for (int64_t j = 0; j < d.k; j++) {
      const float *src = gs + (o * d.k + j) * d.inner;
      if (!n->i1) {
        float *dst = zs + (o * d.len + ix[j]) * d.inner;
        for (int64_t i = 0; i < d.inner; i++)
          dst[i] += src[i];
      } else {
        const int64_t *row = ix + (o * d.k + j) * d.inner;
        for (int64_t i = 0; i < d.inner; i++)
          zs[(o * d.len + row[i]) * d.inner + i] += src[i];
      }
    }
  sf__grad_add(x, z);
}

/* The indices checked against the axis's length (negative ones counted
 * from the end) into an owned copy. */
static int64_t *checked_indices(const char *op, const sf_tensor *t, int32_t axis, sf_array *idx,
                                const sf_loc *loc) {
  int64_t n = idx ? idx->len : 0, len = t->shape[axis];
  int64_t *out = sf__alloc_n((size_t)(n ? n : 1), sizeof *out);
  if (n)
    sf_array_host(idx);
  const int64_t *v = n ? idx->data : NULL;
  for (int64_t j = 0; j < n; j++) {
    int64_t r = v[j] < 0 ? v[j] + len : v[j];
    if (r < 0 || r >= len) {
      char sb[SF__SHAPE_BUF];
      sf_free(out);
      sf_runtime_error(loc, "%s: index %" PRId64 " (entry %" PRId64 " of idx) out of bounds for "
                       "length %" PRId64 " along axis %d (shape %s)", op, v[j], j, len,
                       (int)axis, SF__SHP(t, sb));
    }
    out[j] = r;
  }
  return out;
}

static sf_tensor *gather_op(const char *op, sf_tensor *t, int64_t axis_arg, sf_array *idx,
                            bool per, const sf_loc *loc) {
  sf__t_arg(t, op, loc);
  int32_t axis = sf__t_axis(op, t, axis_arg, loc);
  int64_t n = idx ? idx->len : 0, rest = 1; /* the other dimensions' product */
  for (int32_t i = 0; i < t->ndim; i++)
    rest *= i == axis ? 1 : t->shape[i];
  int64_t k = per ? (rest ? n / rest : 0) : n;
  char sb[SF__SHAPE_BUF];
  if (per && (rest ? n % rest : n)) {
    int64_t shape[SF__TMAX];
    memcpy(shape, t->shape, sizeof shape);
    shape[axis] = 1;
    char sk[SF__SHAPE_BUF];
    sf_runtime_error(loc, "gather: idx has %" PRId64 " entries, not a multiple of %" PRId64
                     ": along axis %d of shape %s it holds a row-major index of shape %s with "
                     "any length k in place of the 1", n, rest, (int)axis, SF__SHP(t, sb),
                     sf__shape_str(t->ndim, shape, sk));
  }
  int64_t *ix = checked_indices(op, t, axis, idx, loc);
  int64_t shape[SF__TMAX];
  memcpy(shape, t->shape, sizeof shape);
  shape[axis] = k;
  sf_tensor *x = sf__t_contig(t);
  sf_tensor *out = sf__t_empty(t->ndim, shape, loc);
  gather_dims d = dims_of(t, axis, k);
  const float *xs = sf__t_data(x);
  float *os = sf__t_data(out);
  for (int64_t o = 0; o < d.outer; o++)
    for (int64_t j = 0; j < d.k; j++) {
      float *dst = os + (o * d.k + j) * d.inner;
      if (!per) {
        memcpy(dst, xs + (o * d.len + ix[j]) * d.inner, (size_t)d.inner * sizeof(float));
      } else {
        const int64_t *row = ix + (o * d.k + j) * d.inner;
        for (int64_t i = 0; i < d.inner; i++)
          dst[i] = xs[(o * d.len + row[i]) * d.inner + i];
      }
    }
  sf_release(x);
  sf__node *nd = sf__record(op, out, bw_gather, t, NULL);
  if (nd) {
    nd->i0 = axis;
    nd->i1 = per;
    nd->idx = ix;
  } else
    sf_free(ix);
  return out;
}

sf_tensor *sf__t_index_select(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc) {
  return gather_op("index_select", t, axis, idx, false, loc);
}

sf_tensor *sf__t_gather(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc) {
  return gather_op("gather", t, axis, idx, true, loc);
}

sf_tensor *sf_std_nn_select(sf_tensor *t, int64_t axis, int64_t i, const sf_loc *loc) {
  return sf__t_select(t, axis, i, loc);
}
sf_tensor *sf_std_nn_narrow(sf_tensor *t, int64_t axis, int64_t start, int64_t length,
                            const sf_loc *loc) {
  return sf__t_narrow(t, axis, start, length, loc);
}
sf_tensor *sf_std_nn_index_select(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc) {
  return sf__t_index_select(t, axis, idx, loc);
}
sf_tensor *sf_std_nn_gather(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc) {
  return sf__t_gather(t, axis, idx, loc);
}

/* ----------------------------------------------------------- stack, cat */

/* The region of input k in a stack or cat result r (any tensor of the
 * result's shape and strides: the result itself, or its gradient): for a
 * stack r[k], for a cat r narrowed along axis to the input's extent
 * starting at start. */
static sf_tensor *region(const sf_tensor *r, bool stack, int32_t axis, int64_t k, int64_t start,
                         const sf_tensor *in) {
  if (stack)
    return sf__t_view(r, r->ndim - 1, r->shape + 1, r->strides + 1,
                      r->offset + k * r->strides[0]);
  return sf__t_view(r, r->ndim, in->shape, r->strides, r->offset + start * r->strides[axis]);
}

/* Each input's gradient is its region of g, made contiguous.  n->i0 is
 * the axis, n->i1 1 for a stack. */
static void bw_join(sf__node *n, sf_tensor *g) {
  const sf__nn_dev *D = sf__nn_dev_of(n, g);
  int64_t start = 0;
  for (int32_t k = 0; k < n->nmore; k++) {
    sf_tensor *in = n->more[k];
    sf_tensor *v = region(g, n->i1, (int32_t)n->i0, k, start, in);
    start += n->i1 ? 0 : in->shape[n->i0];
    if (!in->req) {
      sf_release(v);
      continue;
    }
    sf_tensor *c = D->contig(v);
    sf_release(v);
    sf__grad_add(in, c);
  }
}

/* stack (a new first axis) or cat along axis: every input checked
 * against the first (naming the index of the one that differs), one
 * result, one node. */
static sf_tensor *join(sf_array *ts, bool stack, int64_t axis_arg, const sf_loc *loc) {
  const char *op = stack ? "stack" : "cat";
  int64_t n = ts ? ts->len : 0;
  if (n == 0)
    sf_runtime_error(loc, "%s: needs at least one tensor, got an empty array", op);
  if (n > INT32_MAX)
    sf_runtime_error(loc, "%s: too many tensors (%" PRId64 ")", op, n);
  sf_array_host(ts);
  sf_tensor **in = ts->data;
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  sf_tensor *t0 = sf__t_arg(in[0], op, loc);
  if (stack && t0->ndim == SF__TMAX)
    sf_runtime_error(loc, "stack: a tensor has at most %d dimensions, and the tensors of shape %s "
                     "already have %d", SF__TMAX, SF__SHP(t0, sa), SF__TMAX);
  int32_t axis = 0;
  if (!stack) {
    if (t0->ndim == 0)
      sf_runtime_error(loc, "cat: cannot concatenate 0-d tensors (stack them instead)");
    axis = sf__t_axis("cat", t0, axis_arg, loc);
  }
  int64_t total = 0;
  for (int64_t k = 0; k < n; k++) {
    sf_tensor *t = sf__t_arg(in[k], op, loc);
    bool same = t->ndim == t0->ndim;
    for (int32_t d = 0; same && d < t->ndim; d++)
      same = t->shape[d] == t0->shape[d] || (!stack && d == axis);
    if (!same)
      sf_runtime_error(loc, stack ? "stack: tensor %" PRId64 " has shape %s, but tensor 0 has %s "
                                    "(stack needs one shape)"
                                  : "cat: tensor %" PRId64 " has shape %s, but tensor 0 has %s "
                                    "(cat needs the same shape except along axis %d)",
                       k, SF__SHP(t, sa), SF__SHP(t0, sb), (int)axis);
    total += stack ? 1 : t->shape[axis];
  }
  int64_t shape[SF__TMAX];
  int32_t nd = stack ? t0->ndim + 1 : t0->ndim;
  if (stack) {
    shape[0] = n;
    memcpy(shape + 1, t0->shape, sizeof(int64_t) * (size_t)t0->ndim);
  } else {
    memcpy(shape, t0->shape, sizeof(int64_t) * (size_t)nd);
    shape[axis] = total;
  }
  const sf__nn_dev *D = sf__nn_dev_here(loc);
  sf_tensor *out = D->empty(nd, shape, loc);
  int64_t start = 0;
  for (int64_t k = 0; k < n; k++) {
    sf_tensor *v = region(out, stack, axis, k, start, in[k]);
    start += stack ? 0 : in[k]->shape[axis];
    if (in[k]->numel)
      D->assign(v, in[k]);
    sf_release(v);
  }
  sf__node *nd_ = sf__record_n(op, out, bw_join, in, (int32_t)n);
  if (nd_) {
    nd_->i0 = axis;
    nd_->i1 = stack;
  }
  return out;
}

sf_tensor *sf__t_stack(sf_array *ts, const sf_loc *loc) { return join(ts, true, 0, loc); }
sf_tensor *sf__t_cat(sf_array *ts, int64_t axis, const sf_loc *loc) {
  return join(ts, false, axis, loc);
}
sf_tensor *sf_std_nn_stack(sf_array *ts, const sf_loc *loc) { return sf__t_stack(ts, loc); }
sf_tensor *sf_std_nn_cat(sf_array *ts, int64_t axis, const sf_loc *loc) {
  return sf__t_cat(ts, axis, loc);
}
