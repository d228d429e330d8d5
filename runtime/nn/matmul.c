/*
 * matmul.c — `@` as torch.matmul, and the views reshape and transpose,
 * each forward with its backward rule beside it.
 *
 * Key design choice: every product is one call of the gpu layer's sgemm
 * (runtime/gpu/blas.c: OpenBLAS when it loads, a big product split over
 * the pool in blocks of C, else the reference loop), and a strided operand goes to it as it is when its
 * last two dimensions are row-major or column-major (a transposed view:
 * Linear's weightᵀ, the backward pass's Aᵀ), so no copy is made for them.
 * The torch.matmul cases reduce to one core op: a 1-D operand is reshaped
 * to a matrix and back, and a stack of matrices times one matrix folds
 * the stack into the rows ((B, T, C) @ (C, D) is one (B·T, C) @ (C, D)
 * product, and so is its weight gradient); those reshapes are recorded
 * ops, so the backward of every case is the core op's.
 */
#include <inttypes.h>
#include <string.h>

#include "nn.h"
#include "simd.h"

/* ------------------------------------------------------------- views */

/* transpose's rule: the gradient transposed back (made contiguous, as
 * every gradient the tape holds is). */
static void bw_transpose(sf__node *n, sf_tensor *g) {
  sf_tensor *t = sf__t_transpose(g, n->i0, n->i1, NULL);
  sf_tensor *c = sf__t_contig(t);
  sf_release(t);
  sf__grad_add(n->in[0], c);
}

/* reshape's rule: g has the result's shape and is contiguous, so a view
 * of it with the input's shape is the input's gradient. */
static void bw_reshape(sf__node *n, sf_tensor *g) {
  sf_tensor *x = n->in[0];
  int64_t st[SF__TMAX], s = 1;
  for (int32_t i = x->ndim - 1; i >= 0; i--) {
    st[i] = s;
    s *= x->shape[i];
  }
  sf__grad_add(x, sf__t_view(g, x->ndim, x->shape, st, g->offset));
}

sf_tensor *sf__t_reshape(sf_tensor *t, int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  sf__t_arg(t, "reshape", loc);
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  int64_t dims[SF__TMAX], known = 1;
  int32_t free_dim = -1;
  if (ndim > SF__TMAX)
    sf_runtime_error(loc, "reshape: a tensor has at most %d dimensions, not %d", SF__TMAX,
                     (int)ndim);
  for (int32_t i = 0; i < ndim; i++) {
    dims[i] = shape[i];
    if (shape[i] == -1) {
      if (free_dim >= 0)
        sf_runtime_error(loc, "reshape: only one dimension of %s may be -1",
                         sf__shape_str(ndim, shape, sb));
      free_dim = i;
    } else if (shape[i] < 0)
      sf_runtime_error(loc, "reshape: shape %s has a negative dimension",
                       sf__shape_str(ndim, shape, sb));
    else
      known *= shape[i];
  }
  if (free_dim >= 0) {
    if (known == 0 || t->numel % known)
      sf_runtime_error(loc, "reshape: a tensor of shape %s cannot be viewed as %s", SF__SHP(t, sa),
                       sf__shape_str(ndim, shape, sb));
    dims[free_dim] = t->numel / known;
    known = t->numel;
  }
  if (known != t->numel)
    sf_runtime_error(loc, "reshape: a tensor of shape %s (%" PRId64 " values) cannot be viewed "
                     "as %s", SF__SHP(t, sa), t->numel, sf__shape_str(ndim, shape, sb));
  sf_tensor *c = sf__t_contig(t);
  int64_t st[SF__TMAX], s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    st[i] = s;
    s *= dims[i];
  }
  sf_tensor *out = sf__t_view(c, ndim, dims, st, c->offset);
  sf_release(c);
  sf__record("reshape", out, bw_reshape, t, NULL);
  return out;
}

sf_tensor *sf__t_transpose(sf_tensor *t, int64_t d0, int64_t d1, const sf_loc *loc) {
  sf__t_arg(t, "transpose", loc);
  int32_t a = sf__t_axis("transpose", t, d0, loc), b = sf__t_axis("transpose", t, d1, loc);
  int64_t shape[SF__TMAX], st[SF__TMAX];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(st, t->strides, sizeof st);
  shape[a] = t->shape[b];
  shape[b] = t->shape[a];
  st[a] = t->strides[b];
  st[b] = t->strides[a];
  sf_tensor *out = sf__t_view(t, t->ndim, shape, st, t->offset);
  sf__node *n = sf__record("transpose", out, bw_transpose, t, NULL);
  if (n) {
    n->i0 = a;
    n->i1 = b;
  }
  return out;
}

/* ------------------------------------------------------------ matmul */

/* How a (rows, cols) matrix with strides (rs, cs) goes to sgemm: as it
 * is (row-major, leading dimension rs) or transposed (column-major,
 * leading dimension cs); false when it is neither and needs a copy. */
bool sf__mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                    int64_t *ld) {
  int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= c1)) {
    *trans = false;
    *ld = rows == 1 ? c1 : rs;
    return true;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= r1)) {
    *trans = true;
    *ld = cols == 1 ? r1 : cs;
    return true;
  }
  return false;
}

/* An operand of the core product: the tensor (a copy when its matrices
 * are neither layout), and how sgemm reads each of its matrices. */
typedef sf__operand operand;

sf__operand sf__operand_of(sf_tensor *x, sf_tensor *(*contig)(sf_tensor *)) {
  int32_t nd = x->ndim;
  operand o = {.t = x};
  if (sf__mat_layout(x->shape[nd - 2], x->shape[nd - 1], x->strides[nd - 2], x->strides[nd - 1],
                     &o.trans, &o.ld)) {
    sf_retain(x);
    return o;
  }
  o.t = contig(x);
  o.trans = false;
  o.ld = x->shape[nd - 1] > 1 ? x->shape[nd - 1] : 1;
  return o;
}

static operand operand_of(sf_tensor *x) { return sf__operand_of(x, sf__t_contig); }

/* One stack of products: c's matrix p is a's · b's at the batch offsets
 * of p's index (the strides broadcast, 0 along a repeated operand). */
typedef struct {
  int32_t nb;
  int64_t m, n, k;
  const int64_t *shape, *sa, *sb;
  operand oa, ob;
  const float *ad, *bd;
  float *cd;
} bmm_job;

static void bmm_range(void *ctx, int64_t lo, int64_t hi) {
  const bmm_job *j = ctx;
  int64_t idx[SF__TMAX] = {0}, r = lo, m = j->m, n = j->n;
  for (int32_t i = j->nb - 1; i >= 0; i--) {
    idx[i] = r % j->shape[i];
    r /= j->shape[i];
  }
  for (int64_t p = lo; p < hi; p++) {
    int64_t offa = 0, offb = 0;
    for (int32_t i = 0; i < j->nb; i++) {
      offa += idx[i] * j->sa[i];
      offb += idx[i] * j->sb[i];
    }
    if (j->k == 0)
      memset(j->cd + p * m * n, 0, (size_t)(m * n) * sizeof(float));
    else
      sf__sgemm(j->oa.trans, j->ob.trans, m, n, j->k, 1.0f, j->ad + offa, j->oa.ld, j->bd + offb,
                j->ob.ld, 0.0f, j->cd + p * m * n, n > 1 ? n : 1);
    for (int32_t i = j->nb - 1; i >= 0 && ++idx[i] == j->shape[i]; i--)
      idx[i] = 0;
  }
}

/* Products up to this size (m·n·k) are split over the pool a stack at a
 * time: OpenBLAS runs them on one thread anyway (its small-matrix
 * kernels), so attention's per-head products ran on the caller while the
 * other threads waited (4.6% of an encoder step at --threads 2).  Each
 * product is the same call on whichever thread, so no value changes.
 * Bigger ones are split by sf__sgemm itself (blocks of C's rows or
 * columns over the pool, blas.c). */
#define BMM_SPLIT_MNK (1 << 20)

/* c (batch..., m, n), contiguous = a (..., m, k) · b (..., k, n), both at
 * least 2-D, their batch dimensions broadcast to c's. */
static void bmm_into(sf_tensor *c, sf_tensor *a, sf_tensor *b) {
  int32_t nd = c->ndim, nb = nd - 2;
  int64_t m = c->shape[nd - 2], n = c->shape[nd - 1], k = a->shape[a->ndim - 1];
  operand oa = operand_of(a), ob = operand_of(b);
  int64_t sa[SF__TMAX] = {0}, sb[SF__TMAX] = {0};
  for (int32_t i = 0; i < nb; i++) {
    int32_t ia = i - (nb - (a->ndim - 2)), ib = i - (nb - (b->ndim - 2));
    sa[i] = ia < 0 || oa.t->shape[ia] == 1 ? 0 : oa.t->strides[ia];
    sb[i] = ib < 0 || ob.t->shape[ib] == 1 ? 0 : ob.t->strides[ib];
  }
  int64_t batches = 1;
  for (int32_t i = 0; i < nb; i++)
    batches *= c->shape[i];
  bmm_job j = {.nb = nb, .m = m, .n = n, .k = k, .shape = c->shape, .sa = sa, .sb = sb,
               .oa = oa, .ob = ob, .ad = sf__t_data(oa.t), .bd = sf__t_data(ob.t),
               .cd = sf__t_data(c)};
  if (batches > 1 && m * n * k <= BMM_SPLIT_MNK && batches * m * n >= SF__PAR_MIN) {
    int64_t grain = SF__PAR_GRAIN / (m * n > 0 ? m * n : 1);
    sf__parallel_for(batches, grain > 0 ? grain : 1, bmm_range, &j);
  } else {
    bmm_range(&j, 0, batches);
  }
  sf_release(oa.t);
  sf_release(ob.t);
}

/* The batch shape of a · b and the result's shape, or false. */
static bool bmm_shape(const sf_tensor *a, const sf_tensor *b, int32_t *nd, int64_t *shape) {
  if (!sf__broadcast_shape(a->ndim - 2, a->shape, b->ndim - 2, b->shape, nd, shape))
    return false;
  shape[*nd] = a->shape[a->ndim - 2];
  shape[*nd + 1] = b->shape[b->ndim - 1];
  *nd += 2;
  return true;
}

static sf_tensor *bmm_raw(sf_tensor *a, sf_tensor *b) {
  int32_t nd;
  int64_t shape[SF__TMAX];
  bmm_shape(a, b, &nd, shape);
  sf_tensor *c = sf__t_empty(nd, shape, NULL);
  bmm_into(c, a, b);
  return c;
}

static sf_tensor *last2_t(sf_tensor *x) {
  return sf__t_transpose(x, x->ndim - 2, x->ndim - 1, NULL);
}

/* dA = G · Bᵀ, dB = Aᵀ · G (d[0], d[1]; NULL for an operand that needs
 * none), before the sum over the batch dimensions it was broadcast along;
 * bf16 products when the forward's were (autocast.c). */
void sf__cpu_matmul_bw(const sf__node *n, sf_tensor *g, sf_tensor **d) {
  if (n->i0) {
    sf__ac_matmul_bw(n, g, d);
    return;
  }
  sf_tensor *a = n->in[0], *b = n->in[1];
  d[0] = d[1] = NULL;
  if (a->req) {
    sf_tensor *bt = last2_t(b);
    d[0] = bmm_raw(g, bt);
    sf_release(bt);
  }
  if (b->req) {
    sf_tensor *at = last2_t(a);
    d[1] = bmm_raw(at, g);
    sf_release(at);
  }
}

sf_tensor *sf__cpu_matmul(sf_tensor *a, sf_tensor *b, int32_t nd, const int64_t *shape, bool bf16,
                          const sf_loc *loc) {
  if (bf16)
    return sf__ac_matmul(a, b, loc);
  sf_tensor *c = sf__t_empty(nd, shape, loc);
  bmm_into(c, a, b);
  return c;
}

/* matmul's one rule, over the device's products. */
static void bw_matmul(sf__node *n, sf_tensor *g) {
  sf_tensor *d[2];
  sf__nn_dev_of(n, g)->matmul_bw(n, g, d);
  for (int i = 0; i < 2; i++)
    if (d[i]) {
      sf__grad_add(n->in[i], sf__t_reduce_to(d[i], n->in[i]->ndim, n->in[i]->shape));
      sf_release(d[i]);
    }
}

static _Noreturn void no_fit(const sf_tensor *a, const sf_tensor *b, int64_t ka, int64_t kb,
                             const sf_loc *loc) {
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  sf_runtime_error(loc, "matmul: shapes %s and %s do not fit (%" PRId64 " != %" PRId64 ")",
                   SF__SHP(a, sa), SF__SHP(b, sb), ka, kb);
}

sf_tensor *sf__t_matmul(sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  sf__t_arg(a, "matmul", loc);
  sf__t_arg(b, "matmul", loc);
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  if (a->ndim == 0 || b->ndim == 0)
    sf_runtime_error(loc, "matmul: both operands need at least one dimension (shapes %s and %s)",
                     SF__SHP(a, sa), SF__SHP(b, sb));
  int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
  if (ka != kb)
    no_fit(a, b, ka, kb, loc);
  if (a->ndim == 1 || b->ndim == 1) { /* a row or a column, then drop it again */
    int64_t s2[SF__TMAX];
    sf_tensor *a2 = a, *b2 = b;
    if (a->ndim == 1)
      a2 = sf__t_reshape(a, 2, (int64_t[]){1, ka}, loc);
    if (b->ndim == 1)
      b2 = sf__t_reshape(b, 2, (int64_t[]){kb, 1}, loc);
    sf_tensor *c2 = sf__t_matmul(a2, b2, loc);
    int32_t nd = 0;
    for (int32_t i = 0; i < c2->ndim; i++) {
      if ((a->ndim == 1 && i == c2->ndim - 2) || (b->ndim == 1 && i == c2->ndim - 1))
        continue;
      s2[nd++] = c2->shape[i];
    }
    sf_tensor *c = sf__t_reshape(c2, nd, s2, loc);
    if (a2 != a)
      sf_release(a2);
    if (b2 != b)
      sf_release(b2);
    sf_release(c2);
    return c;
  }
  if (a->ndim > 2 && b->ndim == 2) { /* fold the stack into the rows */
    int64_t s2[SF__TMAX];
    int64_t rows = 1;
    for (int32_t i = 0; i < a->ndim - 1; i++)
      rows *= a->shape[i];
    sf_tensor *a2 = sf__t_reshape(a, 2, (int64_t[]){rows, ka}, loc);
    sf_tensor *c2 = sf__t_matmul(a2, b, loc);
    memcpy(s2, a->shape, sizeof s2);
    s2[a->ndim - 1] = b->shape[1];
    sf_tensor *c = sf__t_reshape(c2, a->ndim, s2, loc);
    sf_release(a2);
    sf_release(c2);
    return c;
  }
  int32_t nd;
  int64_t shape[SF__TMAX];
  if (!bmm_shape(a, b, &nd, shape))
    sf_runtime_error(loc, "matmul: shapes %s and %s do not broadcast (batch dimensions)",
                     SF__SHP(a, sa), SF__SHP(b, sb));
  bool bf16 = sf__autocast;
  sf_tensor *c = sf__nn_dev_here(loc)->matmul(a, b, nd, shape, bf16, loc);
  sf__node *n = sf__record("matmul", c, bw_matmul, a, b);
  if (n)
    n->i0 = bf16;
  return c;
}

/* ------------------------------------------------- x @ W^T (Linear) */

/* nn.forward of a Linear: x (..., in) times the weight (out, in) as stored,
 * transposed inside the product (sgemm's transB) rather than through a
 * transpose view.  The gradients then come out in the tensors' own layout:
 * dx = g W and dW = g^T x, both contiguous, where x @ transpose(W) gave dW
 * as a transposed view that accumulating had to copy element by element
 * (a quarter of an MLP step). */
void sf__cpu_matmul_nt_bw(const sf__node *n, sf_tensor *g, sf_tensor **d) {
  if (n->i0) {
    sf__ac_matmul_nt_bw(n, g, d);
    return;
  }
  d[0] = d[1] = NULL;
  sf_tensor *x = n->in[0], *w = n->in[1];
  int64_t out = w->shape[0], in = w->shape[1], rows = g->numel / out;
  sf_tensor *gc = sf__t_contig(g);
  /* dx adds into x's gradient when it has one (beta 1: no zeroing of a
   * fresh buffer and no add pass after it).  OpenBLAS adds each k block's
   * sums into C, so for out up to its k block (384 on this machine's
   * OpenBLAS 0.3.21) this is bitwise a product into zeros plus the add
   * (unit test grad_acc_product); for a larger out the gradient's old
   * value joins the sum before the later k blocks, another rounding of
   * the same sum, the same in every run. */
  float *acc = x->req ? sf__grad_acc_buf(x) : NULL;
  if (acc) {
    sf__sgemm(false, false, rows, in, out, 1.0f, sf__t_data(gc), out, sf__t_data(w), in, 1.0f,
              acc, in);
  } else if (x->req) {
    sf_tensor *gx = sf__t_empty(x->ndim, x->shape, NULL);
    sf__sgemm(false, false, rows, in, out, 1.0f, sf__t_data(gc), out, sf__t_data(w), in, 0.0f,
              sf__t_data(gx), in);
    d[0] = gx;
  }
  if (w->req) {
    sf_tensor *xc = sf__t_contig(x);
    sf_tensor *gw = sf__t_empty(2, w->shape, NULL);
    sf__sgemm(true, false, out, in, rows, 1.0f, sf__t_data(gc), out, sf__t_data(xc), in, 0.0f,
              sf__t_data(gw), in);
    sf_release(xc);
    d[1] = gw;
  }
  sf_release(gc);
}

/* Linear's one rule: dx (when the device did not add it into x's gradient
 * in place) and dW from the device's products. */
static void bw_matmul_nt(sf__node *n, sf_tensor *g) {
  sf_tensor *d[3] = {NULL, NULL, NULL};
  sf__nn_dev_of(n, g)->matmul_nt_bw(n, g, d);
  for (int i = 0; i < 2; i++)
    if (d[i])
      sf__grad_add(n->in[i], d[i]);
}

sf_tensor *sf__cpu_matmul_nt(sf_tensor *x, sf_tensor *w, bool bf16, const sf_loc *loc) {
  if (bf16)
    return sf__ac_matmul_nt(x, w, loc);
  int64_t out = w->shape[0], in = w->shape[1];
  int64_t rows = in ? x->numel / in : 0;
  int64_t shape[SF__TMAX];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 1] = out;
  sf_tensor *xc = sf__t_contig(x), *wc = sf__t_contig(w);
  sf_tensor *y = sf__t_empty(x->ndim, shape, loc);
  if (rows && out)
    sf__sgemm(false, true, rows, out, in, 1.0f, sf__t_data(xc), in, sf__t_data(wc), in, 0.0f,
              sf__t_data(y), out);
  sf_release(xc);
  sf_release(wc);
  return y;
}

sf_tensor *sf__t_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc) {
  sf__t_arg(x, "linear", loc);
  sf__t_arg(w, "linear", loc);
  char sx[SF__SHAPE_BUF], sw[SF__SHAPE_BUF];
  if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    sf_runtime_error(loc, "linear: input of shape %s does not fit a weight of shape %s "
                     "(the weight is (out, in), the input (..., in))", SF__SHP(x, sx), SF__SHP(w, sw));
  bool bf16 = sf__autocast;
  sf_tensor *y = sf__nn_dev_here(loc)->matmul_nt(x, w, bf16, loc);
  sf__node *n = sf__record("linear", y, bw_matmul_nt, x, w);
  if (n)
    n->i0 = bf16;
  return y;
}

/* Linear with its bias in the product: y starts as the bias in every row
 * and sgemm adds x wᵀ to it (beta 1), so the bias costs no pass of its own
 * and the output no zeroing pass (OpenBLAS clears C for beta 0): about a
 * tenth of an encoder's forward pass went to those two (docs/nn.md).  The
 * backward is matmul_nt's for x and w, and for b the sum of g over its
 * rows, as `matmul_nt(x, w) + b` gives.  A bias that is not (out) goes the
 * composed way. */
static void bw_linear(sf__node *n, sf_tensor *g) {
  sf_tensor *d[3] = {NULL, NULL, NULL}; /* d[2]: b's, where the device's product gave it */
  sf__nn_dev_of(n, g)->matmul_nt_bw(n, g, d);
  for (int i = 0; i < 2; i++)
    if (d[i])
      sf__grad_add(n->in[i], d[i]);
  sf_tensor *b = n->in[2];
  if (b->req)
    sf__grad_add(b, d[2] ? d[2] : sf__t_reduce_to(g, 1, b->shape));
}

/* Linear's output starts as the bias in every row (the product adds into
 * it).  Split over the pool by rows like every other pass of that size:
 * on one thread this copy (and the first touch of the output's pages)
 * stood beside a two-thread product, 0.8% of an encoder step. */
typedef struct {
  float *y;
  const float *b;
  int64_t out;
} bias_fill;

static void bias_rows(void *ctx, int64_t lo, int64_t hi) {
  const bias_fill *f = ctx;
  for (int64_t r = lo; r < hi; r++)
    memcpy(f->y + r * f->out, f->b, sizeof(float) * (size_t)f->out);
}

sf_tensor *sf__t_linear(sf_tensor *x, sf_tensor *w, sf_tensor *b, const sf_loc *loc) {
  sf__t_arg(b, "linear", loc);
  sf__t_arg(w, "linear", loc);
  if (b->ndim != 1 || w->ndim != 2 || b->shape[0] != w->shape[0]) {
    sf_tensor *h = sf__t_matmul_nt(x, w, loc), *y = sf__t_binary(SF_TOP_ADD, h, b, loc);
    sf_release(h);
    return y;
  }
  sf__t_arg(x, "linear", loc);
  char sx[SF__SHAPE_BUF], sw[SF__SHAPE_BUF];
  if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    sf_runtime_error(loc, "linear: input of shape %s does not fit a weight of shape %s "
                     "(the weight is (out, in), the input (..., in))", SF__SHP(x, sx), SF__SHP(w, sw));
  const sf__nn_dev *D = sf__nn_dev_here(loc);
  bool bf16 = sf__autocast;
  if (bf16 && !D->bf16_linear) { /* the bias added after the bf16 product */
    sf_tensor *h = sf__t_matmul_nt(x, w, loc), *y = sf__t_binary(SF_TOP_ADD, h, b, loc);
    sf_release(h);
    return y;
  }
  sf_tensor *y = D->linear(x, w, b, bf16, loc);
  sf__node *n = sf__record3("linear", y, bw_linear, x, w, b);
  if (n)
    n->i0 = bf16;
  return y;
}

sf_tensor *sf__cpu_linear(sf_tensor *x, sf_tensor *w, sf_tensor *b, bool bf16,
                          const sf_loc *loc) {
  (void)bf16; /* false: the CPU composes a bf16 linear (bf16_linear) */
  int64_t out = w->shape[0], in = w->shape[1];
  int64_t rows = in ? x->numel / in : 0;
  int64_t shape[SF__TMAX];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 1] = out;
  sf_tensor *xc = sf__t_contig(x), *wc = sf__t_contig(w), *bc = sf__t_contig(b);
  sf_tensor *y = sf__t_empty(x->ndim, shape, loc);
  float *yd = sf__t_data(y);
  const float *bd = sf__t_data(bc);
  bias_fill f = {yd, bd, out};
  if (rows * out >= SF__PAR_MIN) {
    int64_t grain = SF__PAR_GRAIN / (out ? out : 1);
    sf__parallel_for(rows, grain > 0 ? grain : 1, bias_rows, &f);
  } else {
    bias_rows(&f, 0, rows);
  }
  if (rows && out && in)
    sf__sgemm(false, true, rows, out, in, 1.0f, sf__t_data(xc), in, sf__t_data(wc), in, 1.0f, yd, out);
  sf_release(xc);
  sf_release(wc);
  sf_release(bc);
  return y;
}

sf_tensor *sf_std_nn_linear_apply(sf_tensor *x, sf_tensor *w, sf_tensor *b, const sf_loc *loc) {
  return sf__t_linear(x, w, b, loc);
}
