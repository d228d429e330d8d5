/*
 * index.c — rows of a tensor and tensors from rows: t[i] and t[a..b]
 * (the ABI rows sf_tensor_index and sf_tensor_slice that codegen lowers
 * indexing to), and nn.stack and nn.cat, each forward with its backward
 * rule beside it.
 *
 * Key design choice: t[i] and t[a..b] are views (a new header over t's
 * storage, as reshape and transpose are), so taking a row of a batch
 * copies nothing; tensors are values, so a view can never see a write.
 * Their backward scatters the gradient into zeros of the source's shape,
 * so only the selected rows receive one.  stack and cat copy every input
 * once into one contiguous result and record one node over all of them
 * (sf__record_n), whose rule hands each input its region of the gradient.
 */
#include <inttypes.h>
#include <string.h>

#include "nn.h"

/* ------------------------------------------------------------ t[i], t[a..b] */

/* The gradient of a row or rows: zeros of the source's shape with g
 * written into the region the forward view covered (n->i0 its first
 * row; n->i1 the rows it took, or -1 for t[i], whose axis is dropped). */
static void bw_rows(sf__node *n, sf_tensor *g) {
  if (sf__nn_gpu_here(NULL))
    return sf__gpu_bw_rows(n, g);
  sf_tensor *x = n->in[0];
  sf_tensor *z = sf__t_zeros(x->ndim, x->shape, NULL);
  bool row = n->i1 < 0;
  int64_t shape[SF__TMAX];
  memcpy(shape, z->shape, sizeof shape);
  if (!row)
    shape[0] = n->i1;
  int32_t nd = row ? z->ndim - 1 : z->ndim;
  const int64_t *sh = row ? shape + 1 : shape, *st = row ? z->strides + 1 : z->strides;
  sf_tensor *v = sf__t_view(z, nd, sh, st, z->offset + n->i0 * z->strides[0]);
  sf__t_assign(v, g);
  sf_release(v);
  sf__grad_add(x, z);
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
  sf_tensor *out = sf__t_view(t, t->ndim - 1, t->shape + 1, t->strides + 1,
                              t->offset + r * t->strides[0]);
  sf__node *n = sf__record("index", out, bw_rows, t, NULL);
  if (n) {
    n->i0 = r;
    n->i1 = -1;
  }
  return out;
}

sf_tensor *sf__t_rows(sf_tensor *t, int64_t from, int64_t to, const sf_loc *loc) {
  int64_t len = rows_of(t, "tensor slice", loc);
  char sb[SF__SHAPE_BUF];
  if (from < 0 || to > len || from > to)
    sf_runtime_error(loc, "tensor slice [%" PRId64 "..%" PRId64 "] out of range for length %" PRId64
                     " (shape %s)", from, to, len, SF__SHP(t, sb));
  int64_t shape[SF__TMAX];
  memcpy(shape, t->shape, sizeof shape);
  shape[0] = to - from;
  sf_tensor *out = sf__t_view(t, t->ndim, shape, t->strides, t->offset + from * t->strides[0]);
  sf__node *n = sf__record("slice", out, bw_rows, t, NULL);
  if (n) {
    n->i0 = from;
    n->i1 = to - from;
  }
  return out;
}

sf_tensor *sf_tensor_index(sf_tensor *t, int64_t i, const sf_loc *loc) {
  return sf__t_row(t, i, loc);
}

sf_tensor *sf_tensor_slice(sf_tensor *t, int64_t from, int64_t to, const sf_loc *loc) {
  return sf__t_rows(t, from, to, loc);
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
  int64_t start = 0;
  for (int32_t k = 0; k < n->nmore; k++) {
    sf_tensor *in = n->more[k];
    sf_tensor *v = region(g, n->i1, (int32_t)n->i0, k, start, in);
    start += n->i1 ? 0 : in->shape[n->i0];
    if (!in->req) {
      sf_release(v);
      continue;
    }
    sf_tensor *c = sf__t_contig(v);
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
  if (sf__nn_gpu_here(loc))
    return sf__gpu_join(in, n, stack, axis, nd, shape, loc);
  sf_tensor *out = sf__t_empty(nd, shape, loc);
  int64_t start = 0;
  for (int64_t k = 0; k < n; k++) {
    sf_tensor *v = region(out, stack, axis, k, start, in[k]);
    start += stack ? 0 : in[k]->shape[axis];
    sf__t_assign(v, in[k]);
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
