/*
 * gpu_ops.c — the GPU kernels of the core tensor ops (docs/nn.md, "GPU"),
 * the GPU's entries of the device kernel table (nn.h, "dev.c"):
 * broadcasting + - * /, tensor op scalar, the activations and their
 * gradients, reductions and their spread back, reduce_to, strided copies,
 * matmul (cuBLAS, batched, bf16 under autocast), Linear's products and
 * their gradients, and the SGD, AdamW and clip_grad_norm steps.
 *
 * The ops themselves (their checks, their nodes and their one backward
 * rule each) live in their family files (elementwise.c, reduce.c,
 * matmul.c); this file only launches.  Results are device tensors
 * (sf__t_dempty); inputs come through sf__t_dptr (a host input is uploaded
 * once and keeps its device copy); kernels (kernels/nn.cu) and cuBLAS go on
 * stream 0 and nothing here waits for them: no function in this file reads
 * a value back, except clip_grad_norm's f64 result, which its caller asked
 * for.
 *
 * Key design choice: an entry does what its CPU twin does, formula for
 * formula, on the device; where a rule is written with the public ops
 * (sf__t_binary, sf__t_reduce_to, ...) those dispatch to the device in the
 * same GPU context, so only what needs a kernel of its own is here.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn.h"

#define NB 256
#define MAX_GRID 65535 /* the elementwise kernels are grid-stride loops */

/* Mirrors of kernels/nn.cu's structs. */
typedef struct {
  int32_t ndim, pad;
  int64_t shape[SF__TMAX];
  int64_t st[3][SF__TMAX];
} gnd;
typedef struct {
  int32_t nk, nr;
  int64_t kshape[SF__TMAX], kst[SF__TMAX];
  int64_t rshape[SF__TMAX], rst[SF__TMAX];
  int64_t nout, nred, parts;
} gred;

static void *kern(const char *entry, const sf_loc *loc) {
  int block;
  return sf__nn_kernel("nn", entry, &block, loc);
}

/* entry over n threads' worth of a grid-stride loop. */
static void launch_n(const char *entry, int64_t n, void **params, const sf_loc *loc) {
  if (n <= 0)
    return;
  int64_t grid = sf__nn_grid(n, NB);
  sf__nn_launch(kern(entry, loc), grid < MAX_GRID ? grid : MAX_GRID, NB, 0, params, loc);
}

static uint64_t dp(const sf_tensor *t, const sf_loc *loc) { return sf__t_dptr((sf_tensor *)t, loc); }


/* --------------------------------------------------------- index spaces */

/* Drops size-1 dimensions and merges a dimension into the one before when
 * every operand steps through both as one (elementwise.c's walk_coalesce). */
static void coalesce(int32_t *ndim, int64_t *shape, int nops, int64_t st[][SF__TMAX]) {
  int32_t nd = 0;
  for (int32_t i = 0; i < *ndim; i++) {
    if (shape[i] == 1)
      continue;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k < nops; k++)
        merge &= st[k][nd - 1] == st[k][i] * shape[i];
      if (merge) {
        shape[nd - 1] *= shape[i];
        for (int k = 0; k < nops; k++)
          st[k][nd - 1] = st[k][i];
        continue;
      }
    }
    shape[nd] = shape[i];
    for (int k = 0; k < nops; k++)
      st[k][nd] = st[k][i];
    nd++;
  }
  *ndim = nd;
}

static void contig_strides(int32_t ndim, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    st[i] = s;
    s *= shape[i];
  }
}

/* t's strides broadcast to an nd-dimensional shape (right-aligned). */
static void bcast_strides(const sf_tensor *t, int32_t nd, int64_t *st) {
  int32_t lead = nd - t->ndim;
  for (int32_t i = 0; i < nd; i++) {
    int32_t j = i - lead;
    st[i] = j < 0 || t->shape[j] == 1 ? 0 : t->strides[j];
  }
}

/* ------------------------------------------------------------ filling */

static void fill(uint64_t p, int64_t n, float v, const sf_loc *loc) {
  void *args[] = {&p, &n, &v};
  launch_n("sf_nn_fill", n, args, loc);
}

sf_tensor *sf__gpu_full(int32_t ndim, const int64_t *shape, float v, const sf_loc *loc) {
  sf_tensor *t = sf__t_dempty(ndim, shape, loc);
  fill(dp(t, loc), t->numel, v, loc);
  sf__t_dwrote(t);
  return t;
}

/* -------------------------------------------------------------- copies */

/* dst (=|+=) src, one shape, any strides on both. */
static void copy_op(sf_tensor *dst, const sf_tensor *src, int acc, const sf_loc *loc) {
  if (dst->numel == 0)
    return;
  gnd d = {.ndim = dst->ndim};
  memcpy(d.shape, dst->shape, sizeof d.shape);
  memcpy(d.st[0], dst->strides, sizeof d.st[0]);
  memcpy(d.st[1], src->strides, sizeof d.st[1]);
  coalesce(&d.ndim, d.shape, 2, d.st);
  uint64_t ps = dp(src, loc), pd = dp(dst, loc);
  int64_t n = dst->numel;
  void *args[] = {&pd, &ps, &n, &acc, &d};
  launch_n("sf_nn_copy", n, args, loc);
  sf__t_dwrote(dst);
}

void sf__gpu_assign(sf_tensor *dst, const sf_tensor *src) { copy_op(dst, src, 0, NULL); }
void sf__gpu_add_into(sf_tensor *dst, const sf_tensor *src) { copy_op(dst, src, 1, NULL); }

sf_tensor *sf__gpu_contig(sf_tensor *t) {
  if (sf__t_is_contig(t)) {
    sf_retain(t);
    return t;
  }
  sf_tensor *c = sf__t_dempty(t->ndim, t->shape, NULL);
  copy_op(c, t, 0, NULL);
  return c;
}

void sf__gpu_pack(uint64_t p, sf_tensor *t, bool unpack, const sf_loc *loc) {
  if (t->numel == 0)
    return;
  gnd d = {.ndim = t->ndim};
  memcpy(d.shape, t->shape, sizeof d.shape);
  int64_t flat[SF__TMAX];
  contig_strides(t->ndim, t->shape, flat);
  memcpy(d.st[unpack ? 1 : 0], flat, sizeof flat);
  memcpy(d.st[unpack ? 0 : 1], t->strides, sizeof d.st[0]);
  coalesce(&d.ndim, d.shape, 2, d.st);
  uint64_t pt = dp(t, loc);
  uint64_t pd = unpack ? pt : p, ps = unpack ? p : pt;
  int64_t n = t->numel;
  int acc = 0;
  void *args[] = {&pd, &ps, &n, &acc, &d};
  launch_n("sf_nn_copy", n, args, loc);
  if (unpack)
    sf__t_dwrote(t);
}

/* A view of t with another shape of its numel, row-major over t's values
 * (t contiguous). */
static sf_tensor *reshaped(const sf_tensor *t, int32_t ndim, const int64_t *shape) {
  int64_t st[SF__TMAX];
  contig_strides(ndim, shape, st);
  return sf__t_view(t, ndim, shape, st, t->offset);
}

void sf__gpu_copy_into(sf_tensor *dst, const sf_tensor *src) {
  bool same = dst->ndim == src->ndim;
  for (int32_t i = 0; same && i < dst->ndim; i++)
    same = dst->shape[i] == src->shape[i];
  if (same) {
    copy_op(dst, src, 0, NULL);
    return;
  }
  if (sf__t_is_contig(dst)) { /* dst seen with src's shape */
    sf_tensor *v = reshaped(dst, src->ndim, src->shape);
    copy_op(v, src, 0, NULL);
    sf_release(v);
    return;
  }
  sf_tensor *c = sf__gpu_contig((sf_tensor *)src);
  sf_tensor *v = reshaped(c, dst->ndim, dst->shape);
  copy_op(dst, v, 0, NULL);
  sf_release(v);
  sf_release(c);
}

/* ---------------------------------------------------------- elementwise */

/* out (contiguous, of the broadcast shape) = a op b. */
void sf__gpu_binary(int32_t op, sf_tensor *out, const sf_tensor *a, const sf_tensor *b,
                    const sf_loc *loc) {
  int64_t n = out->numel;
  if (n == 0)
    return;
  uint64_t pa = dp(a, loc), pb = dp(b, loc), po = dp(out, loc);
  bool flat = a->numel == n && b->numel == n && sf__t_is_contig(a) && sf__t_is_contig(b);
  if (flat) {
    void *args[] = {&po, &pa, &pb, &n, &op};
    launch_n("sf_nn_binary_flat", n, args, loc);
  } else {
    gnd d = {.ndim = out->ndim};
    memcpy(d.shape, out->shape, sizeof d.shape);
    memcpy(d.st[0], out->strides, sizeof d.st[0]);
    bcast_strides(a, out->ndim, d.st[1]);
    bcast_strides(b, out->ndim, d.st[2]);
    coalesce(&d.ndim, d.shape, 3, d.st);
    void *args[] = {&po, &pa, &pb, &n, &op, &d};
    launch_n("sf_nn_binary", n, args, loc);
  }
  sf__t_dwrote(out);
}

/* out = a op s (left: s op a), a new device tensor of a's shape. */
sf_tensor *sf__gpu_scalar(int32_t op, const sf_tensor *a, float s, bool left,
                          const sf_loc *loc) {
  sf_tensor *out = sf__t_dempty(a->ndim, a->shape, loc);
  int64_t n = out->numel;
  if (n) {
    gnd d = {.ndim = a->ndim};
    memcpy(d.shape, a->shape, sizeof d.shape);
    memcpy(d.st[0], out->strides, sizeof d.st[0]);
    memcpy(d.st[1], a->strides, sizeof d.st[1]);
    coalesce(&d.ndim, d.shape, 2, d.st);
    uint64_t pa = dp(a, loc), po = dp(out, loc);
    int32_t l = left;
    void *args[] = {&po, &pa, &n, &op, &s, &l, &d};
    launch_n("sf_nn_scalar", n, args, loc);
  }
  sf__t_dwrote(out);
  return out;
}

/* ---------------------------------------------------------- activations */

/* dx = f'(x) g (y: the output, for the kinds whose rule reads it). */
sf_tensor *sf__gpu_unary_bw(int32_t kind, const sf_tensor *g, const sf_tensor *x,
                            const sf_tensor *y) {
  sf_tensor *gc = sf__gpu_contig((sf_tensor *)g);
  sf_tensor *dx = sf__t_dempty(x->ndim, x->shape, NULL);
  int64_t len = dx->numel;
  if (len) {
    uint64_t pd = dp(dx, NULL), pg = dp(gc, NULL), px = dp(x, NULL);
    uint64_t py = y ? dp(y, NULL) : 0;
    void *args[] = {&pd, &pg, &px, &py, &len, &kind};
    launch_n("sf_nn_unary_bw", len, args, NULL);
  }
  sf__t_dwrote(dx);
  sf_release(gc);
  return dx;
}

/* y = f(x), x contiguous. */
sf_tensor *sf__gpu_unary(int32_t kind, const sf_tensor *x, const sf_loc *loc) {
  sf_tensor *out = sf__t_dempty(x->ndim, x->shape, loc);
  int64_t len = out->numel;
  if (len) {
    uint64_t py = dp(out, loc), px = dp(x, loc);
    void *args[] = {&py, &px, &len, &kind};
    launch_n("sf_nn_unary", len, args, loc);
  }
  sf__t_dwrote(out);
  return out;
}

/* ----------------------------------------------------------- reductions */

/* Past this many values per output, and with few outputs, a reduction
 * runs in two passes (partial values, then their reduction), so that one
 * block does not walk millions of values alone. */
#define SPLIT_MIN 65536
#define SPLIT_PER 16384

/* y (r.nout floats; yi: r.nout indices for max, or 0) = the reduction of
 * x over r.  div: mean's count. */
static void run_reduce(int32_t kind, float div, uint64_t y, uint64_t yi, uint64_t x, gred r,
                       const sf_loc *loc) {
  if (r.nout == 0)
    return;
  void *f = kern("sf_nn_reduce", loc);
  uint64_t none = 0;
  if (r.nred >= SPLIT_MIN && r.nout < 512) {
    int64_t parts = (r.nred + SPLIT_PER - 1) / SPLIT_PER;
    if (parts > 1024)
      parts = 1024;
    int64_t np = r.nout * parts;
    int32_t dev = sf__gpu_current_device();
    uint64_t pv = sf__dev_alloc((size_t)np * sizeof(float), loc);
    uint64_t pi = kind == SF__R_MAX ? sf__dev_alloc((size_t)np * 8, loc) : 0;
    r.parts = parts;
    int32_t k1 = kind == SF__R_MEAN ? SF__R_SUM : kind;
    float one = 1.0f;
    void *a1[] = {&pv, &pi, &x, &none, &k1, &one, &r};
    sf__nn_launch(f, np, NB, 0, a1, loc);
    gred r2 = {.nk = 1, .nr = 1, .kshape = {r.nout}, .kst = {parts}, .rshape = {parts},
               .rst = {1}, .nout = r.nout, .nred = parts, .parts = 1};
    int32_t k2 = kind == SF__R_SUMSQ ? SF__R_SUM : kind;
    void *a2[] = {&y, &yi, &pv, &pi, &k2, &div, &r2};
    sf__nn_launch(f, r.nout, NB, 0, a2, loc);
    /* Freed to the cache at once: stream order keeps the block until the
     * second pass has read it. */
    sf__dev_free(pv, (size_t)np * sizeof(float), dev);
    if (pi)
      sf__dev_free(pi, (size_t)np * 8, dev);
    return;
  }
  r.parts = 1;
  void *args[] = {&y, &yi, &x, &none, &kind, &div, &r};
  sf__nn_launch(f, r.nout, NB, 0, args, loc);
}

/* The reduction of t: dimensions in keep[] kept (in order), the others
 * reduced, both coalesced.  nout/nred filled. */
static gred reduction_of(const sf_tensor *t, const bool *keep) {
  gred r = {0};
  int64_t st[1][SF__TMAX];
  int32_t nk = 0, nr = 0;
  for (int32_t i = 0; i < t->ndim; i++)
    if (keep[i]) {
      r.kshape[nk] = t->shape[i];
      r.kst[nk++] = t->strides[i];
    } else {
      r.rshape[nr] = t->shape[i];
      r.rst[nr++] = t->strides[i];
    }
  r.nout = 1;
  r.nred = 1;
  for (int32_t i = 0; i < nk; i++)
    r.nout *= r.kshape[i];
  for (int32_t i = 0; i < nr; i++)
    r.nred *= r.rshape[i];
  memcpy(st[0], r.kst, sizeof st[0]);
  coalesce(&nk, r.kshape, 1, st);
  memcpy(r.kst, st[0], sizeof st[0]);
  memcpy(st[0], r.rst, sizeof st[0]);
  coalesce(&nr, r.rshape, 1, st);
  memcpy(r.rst, st[0], sizeof st[0]);
  r.nk = nk;
  r.nr = nr;
  return r;
}

static void split(const sf_tensor *t, int32_t ax, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int32_t i = 0; i < ax; i++)
    *outer *= t->shape[i];
  for (int32_t i = ax + 1; i < t->ndim; i++)
    *inner *= t->shape[i];
  *n = t->shape[ax];
}

/* The gradient spread back over the reduced axis (or everything: i1 < 0);
 * max's indices are saved as a device buffer of i64 in n->saved. */
sf_tensor *sf__gpu_reduce_bw(const sf__node *n, sf_tensor *g) {
  sf_tensor *x = n->in[0];
  int32_t kind = (int32_t)n->i0;
  int64_t outer = 1, len = x->numel, inner = 1;
  if (n->i1 >= 0)
    split(x, (int32_t)n->i1, &outer, &len, &inner);
  sf_tensor *gc = sf__gpu_contig(g);
  sf_tensor *dx;
  if (kind == SF__R_MAX) {
    dx = sf__t_dzeros(x->ndim, x->shape, NULL);
    int64_t total = outer * inner;
    if (total) {
      uint64_t pd = dp(dx, NULL), pg = dp(gc, NULL), pi = dp(n->saved, NULL);
      void *args[] = {&pd, &pg, &pi, &outer, &len, &inner};
      launch_n("sf_nn_scatter_max", total, args, NULL);
    }
  } else {
    dx = sf__t_dempty(x->ndim, x->shape, NULL);
    float scale = kind == SF__R_MEAN ? 1.0f / (float)len : 1.0f;
    if (dx->numel) {
      uint64_t pd = dp(dx, NULL), pg = dp(gc, NULL);
      void *args[] = {&pd, &pg, &outer, &len, &inner, &scale};
      launch_n("sf_nn_spread", dx->numel, args, NULL);
    }
  }
  sf__t_dwrote(dx);
  sf_release(gc);
  return dx;
}

sf_tensor *sf__gpu_reduce(int32_t kind, sf_tensor *a, int32_t ax, int32_t nd,
                          const int64_t *shape, sf__keep *keep_, const sf_loc *loc) {
  bool keep[SF__TMAX] = {false};
  for (int32_t i = 0; i < a->ndim; i++)
    keep[i] = ax >= 0 && i != ax;
  gred r = reduction_of(a, keep);
  sf_tensor *out = sf__t_dempty(nd, shape, loc);
  sf_tensor *idx = NULL; /* max: the reduced position of each output, as i64 */
  if (kind == SF__R_MAX)
    idx = sf__t_dempty(1, (int64_t[]){2 * (out->numel ? out->numel : 1)}, loc);
  if (out->numel) {
    float div = (float)r.nred;
    run_reduce(kind, div, dp(out, loc), idx ? dp(idx, loc) : 0, dp(a, loc), r, loc);
  }
  sf__t_dwrote(out);
  if (idx)
    sf__t_dwrote(idx);
  keep_->saved = idx;
  return out;
}

sf_tensor *sf__gpu_reduce_to(sf_tensor *g, int32_t ndim, const int64_t *shape) {
  bool same = g->ndim == ndim;
  for (int32_t i = 0; same && i < ndim; i++)
    same = g->shape[i] == shape[i];
  if (same) {
    sf_retain(g);
    return g;
  }
  /* Kept: g's dimensions that the target has at full size; reduced: the
   * leading ones it lacks and those it has as 1. */
  bool keep[SF__TMAX];
  int32_t lead = g->ndim - ndim;
  for (int32_t i = 0; i < g->ndim; i++)
    keep[i] = i >= lead && shape[i - lead] != 1;
  gred r = reduction_of(g, keep);
  sf_tensor *out = sf__t_dempty(ndim, shape, NULL);
  if (out->numel)
    run_reduce(SF__R_SUM, 1.0f, dp(out, NULL), 0, dp(g, NULL), r, NULL);
  sf__t_dwrote(out);
  return out;
}

/* ------------------------------------------------------------- products */

typedef sf__operand operand; /* .t owned */

static operand operand_of(sf_tensor *x) { return sf__operand_of(x, sf__gpu_contig); }

/* The bf16 copy of the floats [p, p + span) (autocast's operands): a
 * device block of span uint16 values in the same layout (owned: give it
 * back with bf16_free). */
typedef struct {
  uint64_t p;
  size_t bytes;
  int32_t dev;
} dblock;

static dblock to_bf16(uint64_t p, int64_t span, const sf_loc *loc) {
  dblock b = {0, (size_t)(span > 0 ? span : 1) * 2, sf__gpu_current_device()};
  b.p = sf__dev_alloc(b.bytes, loc);
  void *args[] = {&b.p, &p, &span};
  launch_n("sf_nn_to_bf16", span, args, loc);
  return b;
}

static void block_free(dblock b) { sf__dev_free(b.p, b.bytes, b.dev); }

/* One element past the last an operand's products read: over its batch
 * strides and the matrix (rows, cols) at (rs, cs). */
static int64_t span_of(int32_t nb, const int64_t *bshape, const int64_t *bst, int64_t rows,
                       int64_t cols, int64_t rs, int64_t cs) {
  int64_t s = 1;
  for (int32_t i = 0; i < nb; i++)
    s += (bshape[i] - 1) * bst[i];
  if (rows && cols)
    s += (rows - 1) * rs + (cols - 1) * cs;
  return s;
}

/* C (rows m, n; row-major, leading dimension ldc) = op(A) op(B), through
 * sgemm or, when bf16, GemmEx on bf16 copies; batch of products at
 * strides.  k == 0 leaves zeros (beta 0). */
static void gemm(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t a,
                 int64_t lda, int64_t sa, int64_t spana, uint64_t b, int64_t ldb, int64_t sb,
                 int64_t spanb, float beta, uint64_t c, int64_t ldc, int64_t sc, int64_t batch,
                 const sf_loc *loc) {
  if (m == 0 || n == 0 || batch == 0)
    return;
  if (k == 0) {
    if (beta == 0.0f)
      fill(c, (batch - 1) * sc + (m - 1) * ldc + n, 0.0f, loc);
    return;
  }
  if (bf16) {
    dblock ba = to_bf16(a, spana, loc), bb = to_bf16(b, spanb, loc);
    sf__gemm_dev_bf16(ta, tb, m, n, k, 1.0f, ba.p, lda, sa, bb.p, ldb, sb, beta, c, ldc, sc,
                      batch, loc);
    block_free(ba); /* stream order keeps them until the product has read them */
    block_free(bb);
    return;
  }
  sf__sgemm_dev_batched(ta, tb, m, n, k, 1.0f, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch,
                        loc);
}

/* c (batch..., m, n), contiguous = a (..., m, k) · b (..., k, n), their
 * batch dimensions broadcast to c's: the batch dimensions coalesced, the
 * last one strided-batched, any before it a loop. */
static void bmm_into(sf_tensor *c, sf_tensor *a, sf_tensor *b, bool bf16, const sf_loc *loc) {
  int32_t nd = c->ndim, nb = nd - 2;
  int64_t m = c->shape[nd - 2], n = c->shape[nd - 1], k = a->shape[a->ndim - 1];
  if (c->numel == 0) {
    sf__t_dwrote(c);
    return;
  }
  operand oa = operand_of(a), ob = operand_of(b);
  int64_t bshape[SF__TMAX], st[3][SF__TMAX];
  for (int32_t i = 0; i < nb; i++) {
    int32_t ia = i - (nb - (a->ndim - 2)), ib = i - (nb - (b->ndim - 2));
    bshape[i] = c->shape[i];
    st[0][i] = c->strides[i];
    st[1][i] = ia < 0 || oa.t->shape[ia] == 1 ? 0 : oa.t->strides[ia];
    st[2][i] = ib < 0 || ob.t->shape[ib] == 1 ? 0 : ob.t->strides[ib];
  }
  int32_t nbc = nb;
  coalesce(&nbc, bshape, 3, st);
  int32_t ad = oa.t->ndim, bd = ob.t->ndim;
  int64_t spana = span_of(nbc, bshape, st[1], m, k, oa.t->strides[ad - 2], oa.t->strides[ad - 1]);
  int64_t spanb = span_of(nbc, bshape, st[2], k, n, ob.t->strides[bd - 2], ob.t->strides[bd - 1]);
  uint64_t pa = dp(oa.t, loc), pb = dp(ob.t, loc), pc = dp(c, loc);
  int64_t last = nbc ? bshape[nbc - 1] : 1, outer = 1;
  for (int32_t i = 0; i + 1 < nbc; i++)
    outer *= bshape[i];
  int64_t sa = nbc ? st[1][nbc - 1] : 0, sb = nbc ? st[2][nbc - 1] : 0,
          sc = nbc ? st[0][nbc - 1] : m * n;
  dblock ba = {0}, bb = {0};
  if (bf16) { /* one conversion of everything the products read */
    ba = to_bf16(pa, spana, loc);
    bb = to_bf16(pb, spanb, loc);
  }
  for (int64_t o = 0; o < outer; o++) {
    int64_t r = o, offa = 0, offb = 0, offc = 0;
    for (int32_t i = nbc - 2; i >= 0; i--) {
      int64_t x = r % bshape[i];
      r /= bshape[i];
      offa += x * st[1][i];
      offb += x * st[2][i];
      offc += x * st[0][i];
    }
    if (k == 0) {
      fill(pc + (uint64_t)offc * 4, last * m * n, 0.0f, loc);
    } else if (bf16) {
      sf__gemm_dev_bf16(oa.trans, ob.trans, m, n, k, 1.0f, ba.p + (uint64_t)offa * 2, oa.ld, sa,
                        bb.p + (uint64_t)offb * 2, ob.ld, sb, 0.0f, pc + (uint64_t)offc * 4,
                        n > 1 ? n : 1, sc, last, loc);
    } else {
      sf__sgemm_dev_batched(oa.trans, ob.trans, m, n, k, 1.0f, pa + (uint64_t)offa * 4, oa.ld,
                            sa, pb + (uint64_t)offb * 4, ob.ld, sb, 0.0f,
                            pc + (uint64_t)offc * 4, n > 1 ? n : 1, sc, last, loc);
    }
  }
  if (bf16) {
    block_free(ba);
    block_free(bb);
  }
  sf__t_dwrote(c);
  sf_release(oa.t);
  sf_release(ob.t);
}

static sf_tensor *bmm_raw(sf_tensor *a, sf_tensor *b, bool bf16) {
  int32_t nd;
  int64_t shape[SF__TMAX];
  sf__broadcast_shape(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &nd, shape);
  shape[nd] = a->shape[a->ndim - 2];
  shape[nd + 1] = b->shape[b->ndim - 1];
  sf_tensor *c = sf__t_dempty(nd + 2, shape, NULL);
  bmm_into(c, a, b, bf16, NULL);
  return c;
}

static sf_tensor *last2_t(sf_tensor *x) { return sf__t_transpose(x, x->ndim - 2, x->ndim - 1, NULL); }

/* dA = G · Bᵀ, dB = Aᵀ · G, each summed over the batch dimensions its
 * operand was broadcast along; bf16 products when the forward's was. */
void sf__gpu_matmul_bw(const sf__node *n, sf_tensor *g, sf_tensor **d) {
  sf_tensor *a = n->in[0], *b = n->in[1];
  bool bf16 = n->i0 != 0;
  d[0] = d[1] = NULL;
  if (a->req) {
    sf_tensor *bt = last2_t(b);
    d[0] = bmm_raw(g, bt, bf16);
    sf_release(bt);
  }
  if (b->req) {
    sf_tensor *at = last2_t(a);
    d[1] = bmm_raw(at, g, bf16);
    sf_release(at);
  }
}

sf_tensor *sf__gpu_matmul(sf_tensor *a, sf_tensor *b, int32_t nd, const int64_t *shape, bool bf16,
                          const sf_loc *loc) {
  sf_tensor *c = sf__t_dempty(nd, shape, loc);
  bmm_into(c, a, b, bf16, loc);
  return c;
}

/* Linear's products over x (rows, in) and w (out, in), both contiguous;
 * for Linear (a third input, its (out) bias, needing its gradient) the
 * bias gradient too, into d[2], in the weight gradient's cuBLASLt call
 * where it can be (else d[2] stays NULL and the rule reduces g). */
void sf__gpu_matmul_nt_bw(const sf__node *n, sf_tensor *g, sf_tensor **d) {
  sf_tensor *bias = n->nin == 3 && n->in[2]->req ? n->in[2] : NULL;
  sf_tensor *x = n->in[0], *w = n->in[1];
  d[0] = d[1] = NULL;
  bool bf16 = n->i0 != 0;
  int64_t out = w->shape[0], in = w->shape[1], rows = out ? g->numel / out : 0;
  sf_tensor *gc = sf__gpu_contig(g);
  uint64_t pg = dp(gc, NULL);
  if (x->req) {
    sf_tensor *wc = sf__gpu_contig(w);
    sf_tensor *gx = sf__t_dempty(x->ndim, x->shape, NULL);
    gemm(bf16, false, false, rows, in, out, pg, out, 0, rows * out, dp(wc, NULL), in, 0,
         out * in, 0.0f, dp(gx, NULL), in, 0, 1, NULL);
    sf__t_dwrote(gx);
    sf_release(wc);
    d[0] = gx;
  }
  if (w->req) {
    sf_tensor *xc = sf__gpu_contig(x);
    sf_tensor *gw = sf__t_dempty(2, w->shape, NULL), *gb = NULL;
    if (bias && !bf16 && rows > 0 && in > 0) {
      gb = sf__t_dempty(bias->ndim, bias->shape, NULL);
      if (!sf__sgemm_dev_bgrad(true, false, out, in, rows, pg, out, dp(xc, NULL), in,
                               dp(gb, NULL), dp(gw, NULL), in, NULL)) {
        sf_release(gb);
        gb = NULL;
      }
    }
    if (!gb)
      gemm(bf16, true, false, out, in, rows, pg, out, 0, rows * out, dp(xc, NULL), in, 0,
           rows * in, 0.0f, dp(gw, NULL), in, 0, 1, NULL);
    sf__t_dwrote(gw);
    sf_release(xc);
    d[1] = gw;
    if (gb) {
      sf__t_dwrote(gb);
      d[2] = gb;
    }
  }
  sf_release(gc);
}

/* y (..., out) = x wᵀ (+ the bias rows already in y when beta is 1). */
static void linear_product(sf_tensor *y, sf_tensor *x, sf_tensor *w, float beta, bool bf16,
                           const sf_loc *loc) {
  int64_t out = w->shape[0], in = w->shape[1], rows = in ? x->numel / in : 0;
  if (!rows || !out)
    return;
  sf_tensor *xc = sf__gpu_contig(x), *wc = sf__gpu_contig(w);
  if (in) {
    gemm(bf16, false, true, rows, out, in, dp(xc, loc), in, 0, rows * in, dp(wc, loc), in, 0,
         out * in, beta, dp(y, loc), out, 0, 1, loc);
  } else if (beta == 0.0f) {
    fill(dp(y, loc), rows * out, 0.0f, loc);
  }
  sf_release(xc);
  sf_release(wc);
}

static void out_shape(const sf_tensor *x, const sf_tensor *w, int64_t *shape) {
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 1] = w->shape[0];
}

sf_tensor *sf__gpu_matmul_nt(sf_tensor *x, sf_tensor *w, bool bf16, const sf_loc *loc) {
  int64_t shape[SF__TMAX];
  out_shape(x, w, shape);
  sf_tensor *y = sf__t_dempty(x->ndim, shape, loc);
  linear_product(y, x, w, 0.0f, bf16, loc);
  sf__t_dwrote(y);
  return y;
}

sf_tensor *sf__gpu_linear(sf_tensor *x, sf_tensor *w, sf_tensor *b, bool bf16,
                          const sf_loc *loc) {
  int64_t shape[SF__TMAX];
  out_shape(x, w, shape);
  sf_tensor *y = sf__t_dempty(x->ndim, shape, loc);
  int64_t out = w->shape[0], rows = out ? y->numel / out : 0;
  sf_tensor *bc = sf__gpu_contig(b);
  bool fused = false;
  int64_t in = w->shape[1];
  if (!bf16 && y->numel && in) { /* one cuBLASLt call with the bias epilogue */
    sf_tensor *xc = sf__gpu_contig(x), *wc = sf__gpu_contig(w);
    fused = sf__sgemm_dev_bias(false, true, rows, out, in, dp(xc, loc), in, dp(wc, loc), in,
                               dp(bc, loc), dp(y, loc), out, loc);
    sf_release(xc);
    sf_release(wc);
  }
  if (!fused && y->numel) {
    uint64_t py = dp(y, loc), pb = dp(bc, loc);
    void *args[] = {&py, &pb, &rows, &out};
    launch_n("sf_nn_bias_rows", y->numel, args, loc);
  }
  if (!fused)
    linear_product(y, x, w, 1.0f, bf16, loc);
  sf__t_dwrote(y);
  sf_release(bc);
  return y;
}

/* ----------------------------------------------------------- optimizers */

static sf_tensor *elem(sf_array *a, int64_t i) { return ((sf_tensor **)a->data)[i]; }

/* The optimizers' tensor list (kernels/optim.cu's sf_opt_entry): every
 * param with a gradient and values, its state (s1: SGD's buffer or AdamW's
 * m; s2: AdamW's v) and where its values start in one index space,
 * uploaded to the device with one copy, so that a step over every param is
 * one launch.  Returns the tensor holding the list (NULL when no param has
 * anything to update) and sets *nt and *total. */
typedef struct {
  uint64_t w, m, v, g;
  int64_t start;
} opt_entry;

static sf_tensor *opt_list(sf_array *ps, sf_array *s1, sf_array *s2, int32_t *nt,
                           int64_t *total, const sf_loc *loc) {
  int64_t n = ps ? ps->len : 0, k = 0, at = 0;
  if (n > INT32_MAX)
    sf_runtime_error(loc, "GPU: an optimizer over %" PRId64 " params is too many for one "
                     "launch", n);
  opt_entry *e = sf_alloc((size_t)(n ? n : 1) * sizeof *e);
  for (int64_t i = 0; i < n; i++) {
    sf_tensor *p = elem(ps, i);
    if (!p->grad || !p->numel)
      continue;
    e[k] = (opt_entry){dp(p, loc), s1 ? dp(elem(s1, i), loc) : 0, s2 ? dp(elem(s2, i), loc) : 0,
                       dp(p->grad, loc), at};
    at += p->numel;
    k++;
  }
  sf_tensor *t = NULL;
  if (k > 0) {
    int64_t words = 2 * k * (int64_t)(sizeof *e / 8); /* floats of the tensor that holds it */
    t = sf__t_dempty(1, &words, loc);
    sf__dev_upload(dp(t, loc), e, (size_t)k * sizeof *e, loc);
  }
  sf_free(e);
  *nt = (int32_t)k;
  *total = at;
  return t;
}

/* Marks what a step wrote. */
static void opt_wrote(sf_array *ps, sf_array *s1, sf_array *s2) {
  for (int64_t i = 0; ps && i < ps->len; i++) {
    sf_tensor *p = elem(ps, i);
    if (!p->grad || !p->numel)
      continue;
    sf__t_dwrote(p);
    if (s1)
      sf__t_dwrote(elem(s1, i));
    if (s2)
      sf__t_dwrote(elem(s2, i));
  }
}

/* One launch over the list: the _i32 entry when every index fits 31 bits. */
static void opt_launch(const char *entry, sf_tensor *list, int32_t nt, int64_t total,
                       void **rest, int nrest, const sf_loc *loc) {
  uint64_t pl = dp(list, loc);
  int32_t total32 = (int32_t)total;
  bool small = total <= INT32_MAX;
  void *args[12] = {&pl, &nt, small ? (void *)&total32 : (void *)&total};
  for (int i = 0; i < nrest; i++)
    args[3 + i] = rest[i];
  char name[64];
  snprintf(name, sizeof name, "%s%s", entry, small ? "_i32" : "");
  int block;
  void *f = sf__nn_kernel("optim", name, &block, loc);
  int64_t grid = sf__nn_grid(total, NB);
  sf__nn_launch(f, grid < MAX_GRID ? grid : MAX_GRID, NB, 0, args, loc);
}

void sf__gpu_sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                      const sf_loc *loc) {
  float flr = (float)lr, fwd = (float)wd, fmom = (float)momentum;
  int32_t has_wd = wd != 0, has_mom = momentum != 0, nt;
  int64_t total;
  sf_tensor *list = opt_list(ps, has_mom ? bufs : NULL, NULL, &nt, &total, loc);
  if (!list)
    return;
  void *rest[] = {&flr, &fwd, &fmom, &has_wd, &has_mom};
  opt_launch("sf_opt_sgd_multi", list, nt, total, rest, 5, loc);
  opt_wrote(ps, has_mom ? bufs : NULL, NULL);
  sf_release(list);
}

void sf__gpu_adamw_step(sf_array *ps, sf_array *m, sf_array *v, float step_size, float bc2_sqrt,
                        float decay, float w1, float b2, float w2, float eps, const sf_loc *loc) {
  int32_t nt;
  int64_t total;
  sf_tensor *list = opt_list(ps, m, v, &nt, &total, loc);
  if (!list)
    return;
  void *rest[] = {&decay, &w1, &b2, &w2, &step_size, &bc2_sqrt, &eps};
  opt_launch("sf_opt_adamw_multi", list, nt, total, rest, 7, loc);
  opt_wrote(ps, m, v);
  sf_release(list);
}

sf_tensor *sf__gpu_clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc) {
  int64_t n = ps ? ps->len : 0;
  sf_tensor **p = n ? ps->data : NULL;
  sf_tensor *ss = sf__t_dzeros(1, (int64_t[]){n ? n : 1}, loc);
  uint64_t pss = dp(ss, loc);
  for (int64_t i = 0; i < n; i++) {
    sf_tensor *g = p[i] ? p[i]->grad : NULL;
    if (!g || !g->numel)
      continue;
    bool keep[SF__TMAX] = {false};
    run_reduce(SF__R_SUMSQ, 1.0f, pss + (uint64_t)i * 4, 0, dp(g, loc), reduction_of(g, keep), loc);
  }
  sf__t_dwrote(ss);
  sf_tensor *out = sf__t_dempty(1, (int64_t[]){2}, loc);
  uint64_t po = dp(out, loc);
  float mx = (float)max_norm;
  void *args[] = {&po, &pss, &n, &mx};
  sf__nn_launch(kern("sf_nn_clip_coef", loc), 1, 1, 0, args, loc);
  sf__t_dwrote(out);
  for (int64_t i = 0; i < n; i++) {
    sf_tensor *g = p[i] ? p[i]->grad : NULL;
    if (!g || !g->numel)
      continue;
    if (!sf__t_is_contig(g)) { /* a gradient is contiguous; made so if not */
      sf_tensor *c = sf__gpu_contig(g);
      sf_release(p[i]->grad);
      p[i]->grad = g = c;
    }
    int64_t len = g->numel;
    uint64_t pg = dp(g, loc);
    void *a2[] = {&pg, &len, &po};
    launch_n("sf_nn_scale_by", len, a2, loc);
    sf__t_dwrote(g);
  }
  sf_release(ss);
  sf_tensor *norm = sf__t_view(out, 0, NULL, NULL, out->offset);
  sf_release(out);
  return norm;
}

double sf__gpu_clip_grad_norm_read(sf_array *ps, double max_norm, const sf_loc *loc) {
  sf_tensor *t = sf__gpu_clip_grad_norm(ps, max_norm, loc);
  double v = sf__t_data(t)[0]; /* the f64 the caller asked for: one read back */
  sf_release(t);
  return v;
}
