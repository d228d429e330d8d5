/*
 * elementwise.c — broadcasting + - * /, tensor op scalar, negation, and
 * the activations (relu, gelu, sigmoid, tanh, exp, log), each forward
 * with its backward rule beside it.
 *
 * Key design choice: one strided walk serves every elementwise op.  The
 * operands' strides are broadcast to the result's shape (a stride of 0
 * repeats a value), dimensions that are contiguous in every operand are
 * merged, and the walk hands the innermost run to a loop specialised for
 * unit and zero strides, which the compiler vectorises; so `x + b` with a
 * bias row is one pass of long rows and a contiguous `a * b` is one flat
 * loop.  Results of 128K values or more are split over the pool
 * (sf__t_run_chunks in simd.h), each thread taking a range of the flat
 * index.  relu and its backward, the MLP's hot pair, are explicit
 * vectors (simd.h): branch-free, where the scalar compare mispredicted.
 */
#include <math.h>
#include <string.h>

#include "nn.h"
#include "simd.h"


/* ------------------------------------------------------------- walks */

/* Up to three operands over one index space (shape); operand 0 is what
 * the op writes. */
typedef struct walk {
  int32_t nd, nops;
  int64_t shape[SF__TMAX];
  int64_t st[3][SF__TMAX];
  float *p[3];
  int32_t op;   /* for the row function */
  float s;      /* a scalar operand */
  void (*row)(const struct walk *w, int64_t n, float *const *p, const int64_t *inner);
} walk;

/* Drops dimensions of size 1 and merges each dimension into the next one
 * when every operand steps through both as one. */
static void walk_coalesce(walk *w) {
  int32_t nd = 0;
  for (int32_t i = 0; i < w->nd; i++) {
    if (w->shape[i] == 1)
      continue;
    if (nd > 0) {
      bool merge = true;
      for (int32_t k = 0; k < w->nops; k++)
        merge &= w->st[k][nd - 1] == w->st[k][i] * w->shape[i];
      if (merge) {
        w->shape[nd - 1] *= w->shape[i];
        for (int32_t k = 0; k < w->nops; k++)
          w->st[k][nd - 1] = w->st[k][i];
        continue;
      }
    }
    w->shape[nd] = w->shape[i];
    for (int32_t k = 0; k < w->nops; k++)
      w->st[k][nd] = w->st[k][i];
    nd++;
  }
  if (nd == 0) { /* one value */
    w->shape[0] = 1;
    for (int32_t k = 0; k < w->nops; k++)
      w->st[k][0] = 0;
    nd = 1;
  }
  w->nd = nd;
}

/* Runs the row function over flat positions [lo, hi) of the index space. */
static void walk_range(const walk *w, int64_t lo, int64_t hi) {
  int32_t nd = w->nd, last = nd - 1;
  int64_t idx[SF__TMAX];
  int64_t r = lo;
  for (int32_t i = last; i >= 0; i--) {
    idx[i] = r % w->shape[i];
    r /= w->shape[i];
  }
  int64_t inner[3];
  for (int32_t k = 0; k < w->nops; k++)
    inner[k] = w->st[k][last];
  int64_t pos = lo;
  while (pos < hi) {
    float *p[3];
    for (int32_t k = 0; k < w->nops; k++) {
      int64_t off = 0;
      for (int32_t i = 0; i < nd; i++)
        off += idx[i] * w->st[k][i];
      p[k] = w->p[k] + off;
    }
    int64_t n = w->shape[last] - idx[last];
    if (n > hi - pos)
      n = hi - pos;
    w->row(w, n, p, inner);
    pos += n;
    idx[last] += n;
    for (int32_t i = last; i > 0 && idx[i] == w->shape[i]; i--) {
      idx[i] = 0;
      idx[i - 1]++;
    }
  }
}

static void walk_chunk(void *ctx, int64_t lo, int64_t hi) { walk_range(ctx, lo, hi); }

static void walk_run(walk *w, int64_t total, bool parallel) {
  walk_coalesce(w);
  if (total <= 0)
    return;
  if (parallel)
    sf__t_run_chunks(total, walk_chunk, w);
  else
    walk_range(w, 0, total);
}

/* Strides of t broadcast to an nd-dimensional shape (right-aligned). */
static void bcast_strides(const sf_tensor *t, int32_t nd, const int64_t *shape, int64_t *st) {
  int32_t lead = nd - t->ndim;
  for (int32_t i = 0; i < nd; i++) {
    int32_t j = i - lead;
    st[i] = j < 0 || t->shape[j] == 1 ? 0 : t->strides[j];
    (void)shape;
  }
}

bool sf__broadcast_shape(int32_t na, const int64_t *sa, int32_t nb, const int64_t *sb,
                         int32_t *nd, int64_t *out) {
  int32_t n = na > nb ? na : nb;
  for (int32_t i = 0; i < n; i++) {
    int32_t ia = i - (n - na), ib = i - (n - nb);
    int64_t x = ia < 0 ? 1 : sa[ia], y = ib < 0 ? 1 : sb[ib];
    if (x != y && x != 1 && y != 1)
      return false;
    out[i] = x == 1 ? y : x;
  }
  *nd = n;
  return true;
}

/* ----------------------------------------------------- binary rows */

/* One row of o = a op b, specialised on the strides (1 or 0) so each
 * case is a plain loop the compiler vectorises. */
#define ROW_CASES(EXPR)                                                       \
  if (sa == 1 && sb == 1)                                                    \
    for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; o[i] = EXPR; } \
  else if (sa == 1 && sb == 0) {                                             \
    float y = b[0];                                                          \
    for (int64_t i = 0; i < n; i++) { float x = a[i]; o[i] = EXPR; }         \
  } else if (sa == 0 && sb == 1) {                                           \
    float x = a[0];                                                          \
    for (int64_t i = 0; i < n; i++) { float y = b[i]; o[i] = EXPR; }         \
  } else                                                                     \
    for (int64_t i = 0; i < n; i++) { float x = a[i * sa], y = b[i * sb]; o[i * so] = EXPR; }

static void row_binary(const walk *w, int64_t n, float *const *p, const int64_t *inner) {
  float *o = p[0];
  const float *a = p[1], *b = p[2];
  /* The output is contiguous: its inner stride is 1, or 0 for a single
   * value (n == 1), so the unit-stride cases may index o by i. */
  int64_t so = inner[0], sa = inner[1], sb = inner[2];
  switch (w->op) {
  case SF_TOP_ADD: ROW_CASES(x + y) break;
  case SF_TOP_SUB: ROW_CASES(x - y) break;
  case SF_TOP_MUL: ROW_CASES(x * y) break;
  case SF_TOP_DIV: ROW_CASES(x / y) break; /* the op was checked: no other */
  }
}

/* out = a op b, out contiguous of the broadcast shape. */
void sf__cpu_binary(int32_t op, sf_tensor *out, const sf_tensor *a, const sf_tensor *b,
                    const sf_loc *loc) {
  (void)loc;
  walk w = {.nd = out->ndim, .nops = 3, .op = op, .row = row_binary};
  memcpy(w.shape, out->shape, sizeof w.shape);
  memcpy(w.st[0], out->strides, sizeof w.st[0]);
  bcast_strides(a, out->ndim, out->shape, w.st[1]);
  bcast_strides(b, out->ndim, out->shape, w.st[2]);
  w.p[0] = sf__t_data(out);
  w.p[1] = sf__t_data(a);
  w.p[2] = sf__t_data(b);
  walk_run(&w, out->numel, true);
}

/* d(a op b): each input's share, summed back to its own shape. */
static void bw_binary(sf__node *n, sf_tensor *g) {
  sf__nn_dev_of(n, g); /* a GPU node's device current: the ops below run there */
  sf_tensor *a = n->in[0], *b = n->in[1];
  int32_t op = (int32_t)n->i0;
  sf_tensor *ga = NULL, *gb = NULL;
  switch (op) {
  case SF_TOP_ADD:
    ga = a->req ? (sf_retain(g), g) : NULL;
    gb = b->req ? (sf_retain(g), g) : NULL;
    break;
  case SF_TOP_SUB:
    ga = a->req ? (sf_retain(g), g) : NULL;
    gb = b->req ? sf__t_neg(g, NULL) : NULL;
    break;
  case SF_TOP_MUL:
    ga = a->req ? sf__t_binary(SF_TOP_MUL, g, b, NULL) : NULL;
    gb = b->req ? sf__t_binary(SF_TOP_MUL, g, a, NULL) : NULL;
    break;
  case SF_TOP_DIV: { /* a / b: g / b, and -g a / b^2 = -(g / b) (a / b) */
    sf_tensor *gdb = sf__t_binary(SF_TOP_DIV, g, b, NULL);
    if (b->req) {
      sf_tensor *q = sf__t_binary(SF_TOP_DIV, a, b, NULL);
      sf_tensor *m = sf__t_binary(SF_TOP_MUL, gdb, q, NULL);
      gb = sf__t_neg(m, NULL);
      sf_release(q);
      sf_release(m);
    }
    if (a->req)
      ga = gdb;
    else
      sf_release(gdb);
    break;
  }
  }
  if (ga) {
    sf__grad_add(a, sf__t_reduce_to(ga, a->ndim, a->shape));
    sf_release(ga);
  }
  if (gb) {
    sf__grad_add(b, sf__t_reduce_to(gb, b->ndim, b->shape));
    sf_release(gb);
  }
}

sf_tensor *sf__t_binary(int32_t op, sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  const char *name = sf__binary_name(op);
  sf__t_arg(a, name, loc);
  sf__t_arg(b, name, loc);
  int32_t nd;
  int64_t shape[SF__TMAX];
  if (!sf__broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) {
    char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "%s: shapes %s and %s do not broadcast", name, SF__SHP(a, sa),
                     SF__SHP(b, sb));
  }
  const sf__nn_dev *D = sf__nn_dev_here(loc);
  sf_tensor *out = D->empty(nd, shape, loc);
  D->binary(op, out, a, b, loc);
  sf__node *n = sf__record(name, out, bw_binary, a, b);
  if (n)
    n->i0 = op;
  return out;
}

/* ------------------------------------------------------ with a scalar */

static void row_scalar(const walk *w, int64_t n, float *const *p, const int64_t *inner) {
  float *o = p[0];
  const float *a = p[1];
  int64_t sa = inner[1];
  float s = w->s;
  bool left = w->op < 0;
  switch (left ? -w->op : w->op) {
  case SF_TOP_ADD:
    for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] + s;
    break;
  case SF_TOP_SUB:
    if (left) for (int64_t i = 0; i < n; i++) o[i] = s - a[i * sa];
    else for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] - s;
    break;
  case SF_TOP_MUL:
    for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * s;
    break;
  case SF_TOP_DIV:
    if (left) for (int64_t i = 0; i < n; i++) o[i] = s / a[i * sa];
    else for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] / s;
    break;
  }
}

sf_tensor *sf__cpu_scalar(int32_t op, const sf_tensor *a, float s, bool left,
                          const sf_loc *loc) {
  (void)loc;
  sf_tensor *out = sf__t_like(a);
  walk w = {.nd = a->ndim, .nops = 2, .op = left ? -op : op, .s = s, .row = row_scalar};
  memcpy(w.shape, a->shape, sizeof w.shape);
  memcpy(w.st[0], out->strides, sizeof w.st[0]);
  memcpy(w.st[1], a->strides, sizeof w.st[1]);
  w.p[0] = sf__t_data(out);
  w.p[1] = sf__t_data(a);
  walk_run(&w, out->numel, true);
  return out;
}

static void bw_scalar(sf__node *n, sf_tensor *g) {
  const sf__nn_dev *D = sf__nn_dev_of(n, g);
  sf_tensor *a = n->in[0];
  bool left = n->i1 != 0;
  float s = n->f0;
  sf_tensor *ga;
  switch ((int32_t)n->i0) {
  case SF_TOP_ADD: ga = (sf_retain(g), g); break;
  case SF_TOP_SUB: ga = left ? D->scalar(SF_TOP_MUL, g, -1.0f, false, NULL) : (sf_retain(g), g); break;
  case SF_TOP_MUL: ga = D->scalar(SF_TOP_MUL, g, s, false, NULL); break;
  default: /* SF_TOP_DIV: the op was checked */
    if (!left)
      ga = D->scalar(SF_TOP_DIV, g, s, false, NULL);
    else { /* d(s / a) = -s / a^2 */
      sf_tensor *a2 = sf__t_binary(SF_TOP_MUL, a, a, NULL);
      sf_tensor *q = sf__t_binary(SF_TOP_DIV, g, a2, NULL);
      ga = D->scalar(SF_TOP_MUL, q, -s, false, NULL);
      sf_release(a2);
      sf_release(q);
    }
    break;
  }
  sf__grad_add(a, ga);
}

sf_tensor *sf__t_scalar(int32_t op, sf_tensor *a, float s, bool left, const sf_loc *loc) {
  sf__t_arg(a, sf__binary_name(op), loc);
  if (op < SF_TOP_ADD || op > SF_TOP_DIV)
    sf_runtime_error(loc, "internal error: tensor-scalar op %d", (int)op);
  sf_tensor *out = sf__nn_dev_here(loc)->scalar(op, a, s, left, loc);
  sf__node *n = sf__record(sf__binary_name(op), out, bw_scalar, a, NULL);
  if (n) {
    n->i0 = op;
    n->i1 = left;
    n->f0 = s;
  }
  return out;
}

static void bw_neg(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->scalar(SF_TOP_MUL, g, -1.0f, false, NULL));
}

sf_tensor *sf__t_neg(sf_tensor *a, const sf_loc *loc) {
  sf__t_arg(a, "neg", loc);
  sf_tensor *out = sf__nn_dev_here(loc)->scalar(SF_TOP_MUL, a, -1.0f, false, loc);
  sf__record("neg", out, bw_neg, a, NULL);
  return out;
}

/* ------------------------------------------------ gradient plumbing */

static void row_acc(const walk *w, int64_t n, float *const *p, const int64_t *inner) {
  float *o = p[0];
  const float *g = p[1];
  int64_t so = inner[0], sg = inner[1];
  if (so == 0) { /* summing along the row */
    float acc = 0;
    for (int64_t i = 0; i < n; i++)
      acc += g[i * sg];
    o[0] += acc;
  } else if (so == 1 && sg == 1)
    for (int64_t i = 0; i < n; i++)
      o[i] += g[i];
  else
    for (int64_t i = 0; i < n; i++)
      o[i * so] += g[i * sg];
}

/* o[j] += g[r][j] over rows r in order, for the columns of blocks
 * [lo, hi); a block is 16 floats, one cache line of o, so two threads
 * never write one line.  A full block's 16 sums stay in registers over
 * all the rows (the same additions in the same order as o[j] += g[j]
 * row by row). */
#define ACC_BLOCK 16
typedef struct {
  float *o;
  const float *g;
  int64_t rows, cols, gs;
} acc_cols;

/* Two blocks' 32 sums in eight vector registers, one add each per row:
 * written as a float[16] the compiler kept the sums on the stack, a load
 * and a store per vector and row (a bias gradient of the encoder layer
 * took 2.3% of its step).  Each column's additions are the same, in the
 * same order. */
static void acc_cols_pair(float *o, const float *g, int64_t rows, int64_t gs) {
  /* Named, not an array: GCC -O2 kept an array of them in memory too. */
  sf__f4 a0 = sf__ld4(o), a1 = sf__ld4(o + 4), a2 = sf__ld4(o + 8), a3 = sf__ld4(o + 12);
  sf__f4 a4 = sf__ld4(o + 16), a5 = sf__ld4(o + 20), a6 = sf__ld4(o + 24), a7 = sf__ld4(o + 28);
  for (int64_t r = 0; r < rows; r++, g += gs) {
    a0 += sf__ld4(g);
    a1 += sf__ld4(g + 4);
    a2 += sf__ld4(g + 8);
    a3 += sf__ld4(g + 12);
    a4 += sf__ld4(g + 16);
    a5 += sf__ld4(g + 20);
    a6 += sf__ld4(g + 24);
    a7 += sf__ld4(g + 28);
  }
  sf__st4(o, a0);
  sf__st4(o + 4, a1);
  sf__st4(o + 8, a2);
  sf__st4(o + 12, a3);
  sf__st4(o + 16, a4);
  sf__st4(o + 20, a5);
  sf__st4(o + 24, a6);
  sf__st4(o + 28, a7);
}

static void acc_cols_chunk(void *ctx, int64_t lo, int64_t hi) {
  const acc_cols *c = ctx;
  int64_t c0 = lo * ACC_BLOCK, c1 = hi * ACC_BLOCK < c->cols ? hi * ACC_BLOCK : c->cols;
  float *o = c->o;
  int64_t j = c0;
  for (; j + 2 * ACC_BLOCK <= c1; j += 2 * ACC_BLOCK)
    acc_cols_pair(o + j, c->g + j, c->rows, c->gs);
  for (; j + ACC_BLOCK <= c1; j += ACC_BLOCK) {
    float acc[ACC_BLOCK];
    memcpy(acc, o + j, sizeof acc);
    const float *g = c->g + j;
    for (int64_t r = 0; r < c->rows; r++, g += c->gs)
      for (int k = 0; k < ACC_BLOCK; k++)
        acc[k] += g[k];
    memcpy(o + j, acc, sizeof acc);
  }
  for (int64_t r = 0; j < c1 && r < c->rows; r++) {
    const float *g = c->g + r * c->gs;
    for (int64_t k = j; k < c1; k++)
      o[k] += g[k];
  }
}

sf_tensor *sf__t_reduce_to(sf_tensor *g, int32_t ndim, const int64_t *shape) {
  if (sf__nn_gpu_here(NULL))
    return sf__gpu_reduce_to(g, ndim, shape);
  bool same = g->ndim == ndim;
  for (int32_t i = 0; same && i < ndim; i++)
    same = g->shape[i] == shape[i];
  if (same) {
    sf_retain(g);
    return g;
  }
  sf_tensor *out = sf__t_zeros(ndim, shape, NULL);
  walk w = {.nd = g->ndim, .nops = 2, .row = row_acc};
  memcpy(w.shape, g->shape, sizeof w.shape);
  bcast_strides(out, g->ndim, g->shape, w.st[0]);
  memcpy(w.st[1], g->strides, sizeof w.st[1]);
  w.p[0] = sf__t_data(out);
  w.p[1] = sf__t_data(g);
  walk_coalesce(&w);
  /* Several positions add into one value, so the flat index may not be
   * split.  The common case, a bias gradient ((rows, cols) summed to
   * (cols), both contiguous in cols), splits over the columns instead:
   * each thread owns whole output values and adds their rows in the same
   * order as the serial loop, so the sums are bitwise the same at any
   * thread count.  Serial, it was 2% of an encoder step on one thread
   * while the other waited. */
  if (w.nd == 2 && w.st[0][0] == 0 && w.st[0][1] == 1 && w.st[1][1] == 1 &&
      g->numel >= SF__PAR_MIN && w.shape[1] >= 2 * ACC_BLOCK) {
    acc_cols c = {w.p[0], w.p[1], w.shape[0], w.shape[1], w.st[1][0]};
    sf__parallel_for((c.cols + ACC_BLOCK - 1) / ACC_BLOCK, 1, acc_cols_chunk, &c);
  } else if (g->numel > 0) {
    walk_range(&w, 0, g->numel);
  }
  return out;
}

static void row_copy(const walk *w, int64_t n, float *const *p, const int64_t *inner) {
  float *o = p[0];
  const float *s = p[1];
  int64_t so = inner[0], ss = inner[1];
  if (so == 1 && ss == 1)
    memcpy(o, s, (size_t)n * sizeof(float));
  else
    for (int64_t i = 0; i < n; i++)
      o[i * so] = s[i * ss];
}

/* row applied over dst and src, both of dst's shape, any strides. */
static void walk_into(sf_tensor *dst, const sf_tensor *src,
                      void (*row)(const walk *, int64_t, float *const *, const int64_t *)) {
  walk w = {.nd = dst->ndim, .nops = 2, .row = row};
  memcpy(w.shape, dst->shape, sizeof w.shape);
  memcpy(w.st[0], dst->strides, sizeof w.st[0]);
  memcpy(w.st[1], src->strides, sizeof w.st[1]);
  w.p[0] = sf__t_wdata(dst);
  w.p[1] = sf__t_data(src);
  walk_run(&w, dst->numel, true);
}

void sf__t_assign(sf_tensor *dst, const sf_tensor *src) {
  if (sf__nn_gpu_here(NULL))
    return sf__gpu_assign(dst, src);
  walk_into(dst, src, row_copy);
}

void sf__t_add_into(sf_tensor *dst, const sf_tensor *src) {
  if (sf__nn_gpu_here(NULL))
    return sf__gpu_add_into(dst, src);
  walk_into(dst, src, row_acc);
}

/* ------------------------------------------------------- activations */

typedef struct {
  int32_t kind;
  const float *x;
  float *y;
} unary_job;

#define INV_SQRT_2PI 0.39894228040143267794f
#define GELU_K 0.79788456080286535588f /* sqrt(2 / pi) */

/* y = max(x, 0) as the scalar rule writes it (NaN and -0 give +0). */
static void relu_range(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  int64_t i = lo;
  sf__f4 zero = sf__splat4(0.0f);
  for (; i + SF__V <= hi; i += SF__V) {
    sf__f4 v = sf__ld4(x + i);
    sf__st4(y + i, sf__select4(v > zero, v));
  }
  for (; i < hi; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* d = g where x > 0, else +0. */
static void relu_bw_range(const float *restrict g, const float *restrict x, float *restrict d,
                          int64_t lo, int64_t hi) {
  int64_t i = lo;
  sf__f4 zero = sf__splat4(0.0f);
  for (; i + SF__V <= hi; i += SF__V)
    sf__st4(d + i, sf__select4(sf__ld4(x + i) > zero, sf__ld4(g + i)));
  for (; i < hi; i++) d[i] = x[i] > 0.0f ? g[i] : 0.0f;
}

/* The erf GELU, x Φ(x) (BERT's, PyTorch's default), four lanes at a time
 * through simd.h's Φ; the tail goes through the same vector code, padded,
 * so a value's result does not depend on where in the tensor it sits. */
static void gelu_range(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  int64_t i = lo;
  for (; i + SF__V <= hi; i += SF__V) {
    sf__f4 v = sf__ld4(x + i);
    sf__st4(y + i, v * sf__phi4(v));
  }
  if (i < hi) {
    float in[SF__V] = {0}, out[SF__V];
    memcpy(in, x + i, sizeof(float) * (size_t)(hi - i));
    sf__f4 v = sf__ld4(in);
    sf__st4(out, v * sf__phi4(v));
    memcpy(y + i, out, sizeof(float) * (size_t)(hi - i));
  }
}

#ifdef SF__AVX2
/* gelu_range eight lanes at a time where the CPU has AVX2 (the same bits:
 * simd.h), the last up to 7 values through the four-lane loop. */
static SF__AVX2 void gelu_range_avx2(const float *restrict x, float *restrict y, int64_t lo,
                                 int64_t hi) {
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    sf__f8 v;
    memcpy(&v, x + i, sizeof v);
    v = v * sf__phi8(v);
    memcpy(y + i, &v, sizeof v);
  }
  gelu_range(x, y, i, hi);
}
#endif

/* Its gradient, g (Φ(x) + x φ(x)). */
static inline sf__f4 gelu_bw4(sf__f4 g, sf__f4 v) {
  sf__f4 pdf = sf__splat4(INV_SQRT_2PI) * sf__exp4(sf__splat4(-0.5f) * v * v);
  return g * (sf__phi4(v) + v * pdf);
}

static void gelu_bw_range(const float *restrict g, const float *restrict x, float *restrict d,
                          int64_t lo, int64_t hi) {
  int64_t i = lo;
  for (; i + SF__V <= hi; i += SF__V)
    sf__st4(d + i, gelu_bw4(sf__ld4(g + i), sf__ld4(x + i)));
  if (i < hi) {
    float gi[SF__V] = {0}, xi[SF__V] = {0}, out[SF__V];
    memcpy(gi, g + i, sizeof(float) * (size_t)(hi - i));
    memcpy(xi, x + i, sizeof(float) * (size_t)(hi - i));
    sf__st4(out, gelu_bw4(sf__ld4(gi), sf__ld4(xi)));
    memcpy(d + i, out, sizeof(float) * (size_t)(hi - i));
  }
}

#ifdef SF__AVX2
static SF__AVX2 void gelu_bw_range_avx2(const float *restrict g, const float *restrict x,
                                    float *restrict d, int64_t lo, int64_t hi) {
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    sf__f8 gv, v;
    memcpy(&gv, g + i, sizeof gv);
    memcpy(&v, x + i, sizeof v);
    sf__f8 pdf = INV_SQRT_2PI * sf__exp8(-0.5f * v * v);
    gv = gv * (sf__phi8(v) + v * pdf);
    memcpy(d + i, &gv, sizeof gv);
  }
  gelu_bw_range(g, x, d, i, hi);
}

/* Both sixteen lanes at a time where the CPU has AVX-512F (the same bits
 * again: simd.h), two vectors per iteration, the last up to 31 values
 * through the four-lane loops.  GELU's Φ is one long dependent chain per
 * vector (a division, an exp and a degree-9 polynomial; the backward a
 * second exp): with one vector an iteration it ran at 2.0 ns a value on
 * this VM's Xeon, with two independent ones interleaved at 1.3 (a
 * standalone loop over 6.3M values; four gave 1.24). */
static SF__AVX512 void gelu_range_avx512(const float *restrict x, float *restrict y, int64_t lo,
                                         int64_t hi) {
  int64_t i = lo;
  for (; i + 32 <= hi; i += 32) {
    sf__f16 v, w;
    memcpy(&v, x + i, sizeof v);
    memcpy(&w, x + i + 16, sizeof w);
    v = v * sf__phi16(v);
    w = w * sf__phi16(w);
    memcpy(y + i, &v, sizeof v);
    memcpy(y + i + 16, &w, sizeof w);
  }
  gelu_range(x, y, i, hi);
}

static SF__AVX512 inline sf__f16 gelu_bw16(sf__f16 g, sf__f16 v) {
  sf__f16 pdf = INV_SQRT_2PI * sf__exp16(-0.5f * v * v);
  return g * (sf__phi16(v) + v * pdf);
}

static SF__AVX512 void gelu_bw_range_avx512(const float *restrict g, const float *restrict x,
                                            float *restrict d, int64_t lo, int64_t hi) {
  int64_t i = lo;
  for (; i + 32 <= hi; i += 32) {
    sf__f16 g0, g1, v0, v1;
    memcpy(&g0, g + i, sizeof g0);
    memcpy(&g1, g + i + 16, sizeof g1);
    memcpy(&v0, x + i, sizeof v0);
    memcpy(&v1, x + i + 16, sizeof v1);
    g0 = gelu_bw16(g0, v0);
    g1 = gelu_bw16(g1, v1);
    memcpy(d + i, &g0, sizeof g0);
    memcpy(d + i + 16, &g1, sizeof g1);
  }
  gelu_bw_range(g, x, d, i, hi);
}

#define GELU(x, y, lo, hi)                                                               \
  (sf__have_avx512()  ? gelu_range_avx512(x, y, lo, hi)                                  \
   : sf__have_avx2() ? gelu_range_avx2(x, y, lo, hi)                                     \
                     : gelu_range(x, y, lo, hi))
#define GELU_BW(g, x, d, lo, hi)                                                         \
  (sf__have_avx512()  ? gelu_bw_range_avx512(g, x, d, lo, hi)                            \
   : sf__have_avx2() ? gelu_bw_range_avx2(g, x, d, lo, hi)                               \
                     : gelu_bw_range(g, x, d, lo, hi))
#else
#define GELU gelu_range
#define GELU_BW gelu_bw_range
#endif

/* Each activation (kinds.h's SF_NN_UNARY_KINDS) is two range loops here,
 * unary_<name> and unary_bw_<name>, found through the tables below: a
 * kind without them does not compile. */
typedef void (*unary_range_fn)(const float *restrict x, float *restrict y, int64_t lo, int64_t hi);
typedef void (*unary_bw_range_fn)(const float *restrict g, const float *restrict x,
                                  const float *restrict y, float *restrict d, int64_t lo,
                                  int64_t hi);

static void unary_relu(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  relu_range(x, y, lo, hi);
}
static void unary_gelu(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  GELU(x, y, lo, hi);
}
/* The tanh form (GPT-2, torch's approximate="tanh"). */
static void unary_gelu_tanh(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++)
    y[i] = 0.5f * x[i] * (1.0f + tanhf(GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}
static void unary_sigmoid(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
}
/* x sigmoid(x) (SiLU, Llama's and SwiGLU's activation, torch's F.silu) */
static void unary_silu(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}
static void unary_tanh(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) y[i] = tanhf(x[i]);
}
static void unary_exp(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) y[i] = expf(x[i]);
}
static void unary_log(const float *restrict x, float *restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) y[i] = logf(x[i]);
}

/* The gradient of each activation from g and the input x or output y,
 * contiguous and of one shape. */
static void unary_bw_relu(const float *restrict g, const float *restrict x,
                          const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  relu_bw_range(g, x, d, lo, hi);
}
static void unary_bw_gelu(const float *restrict g, const float *restrict x,
                          const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  GELU_BW(g, x, d, lo, hi);
}
/* d/dx of 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3) */
static void unary_bw_gelu_tanh(const float *restrict g, const float *restrict x,
                               const float *restrict y, float *restrict d, int64_t lo,
                               int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    float x2 = x[i] * x[i];
    float t = tanhf(GELU_K * (x[i] + 0.044715f * x2 * x[i]));
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x2);
    d[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * x[i] * (1.0f - t * t) * du);
  }
}
static void unary_bw_sigmoid(const float *restrict g, const float *restrict x,
                             const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) d[i] = g[i] * y[i] * (1.0f - y[i]);
}
/* d/dx of x s(x) = s (1 + x (1 - s)) */
static void unary_bw_silu(const float *restrict g, const float *restrict x,
                          const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    float s = 1.0f / (1.0f + expf(-x[i]));
    d[i] = g[i] * (s * (1.0f + x[i] * (1.0f - s)));
  }
}
static void unary_bw_tanh(const float *restrict g, const float *restrict x,
                          const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) d[i] = g[i] * (1.0f - y[i] * y[i]);
}
static void unary_bw_exp(const float *restrict g, const float *restrict x,
                         const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) d[i] = g[i] * y[i];
}
static void unary_bw_log(const float *restrict g, const float *restrict x,
                         const float *restrict y, float *restrict d, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) d[i] = g[i] / x[i];
}

#define UNARY_FWD(K, name, out) [SF__U_##K] = unary_##name,
#define UNARY_BW(K, name, out) [SF__U_##K] = unary_bw_##name,
static const unary_range_fn unary_fwd[SF__U_COUNT] = {SF_NN_UNARY_KINDS(UNARY_FWD)};
static const unary_bw_range_fn unary_bwd[SF__U_COUNT] = {SF_NN_UNARY_KINDS(UNARY_BW)};

static void unary_chunk(void *ctx, int64_t lo, int64_t hi) {
  const unary_job *j = ctx;
  unary_fwd[j->kind](j->x, j->y, lo, hi);
}

typedef struct {
  int32_t kind;
  const float *g, *x, *y;
  float *dx;
} unary_bw_job;

static void unary_bw_chunk(void *ctx, int64_t lo, int64_t hi) {
  const unary_bw_job *j = ctx;
  unary_bwd[j->kind](j->g, j->x, j->y, j->dx, lo, hi);
}

sf_tensor *sf__cpu_unary(int32_t kind, const sf_tensor *x, const sf_loc *loc) {
  (void)loc;
  sf_tensor *out = sf__t_like(x);
  unary_job j = {.kind = kind, .x = sf__t_data(x), .y = sf__t_data(out)};
  sf__t_run_chunks(out->numel, unary_chunk, &j);
  return out;
}

sf_tensor *sf__cpu_unary_bw(int32_t kind, const sf_tensor *g, const sf_tensor *x,
                            const sf_tensor *y) {
  sf_tensor *dx = sf__t_like(x);
  unary_bw_job j = {.kind = kind, .g = sf__t_data(g), .x = sf__t_data(x),
                    .y = y ? sf__t_data(y) : NULL, .dx = sf__t_data(dx)};
  sf__t_run_chunks(dx->numel, unary_bw_chunk, &j);
  return dx;
}

static void bw_unary(sf__node *n, sf_tensor *g) {
  const sf__nn_dev *D = sf__nn_dev_of(n, g);
  sf_tensor *x = D->contig(n->in[0]);
  sf_tensor *dx = D->unary_bw((int32_t)n->i0, g, x, n->saved);
  sf_release(x);
  sf__grad_add(n->in[0], dx);
}

sf_tensor *sf__t_unary(int32_t kind, sf_tensor *a, const sf_loc *loc) {
  sf__t_arg(a, sf__unary_name(kind), loc);
  const sf__nn_dev *D = sf__nn_dev_here(loc);
  sf_tensor *x = D->contig(a);
  sf_tensor *out = D->unary(kind, x, loc);
  sf_release(x);
  sf__node *n = sf__record(sf__unary_name(kind), out, bw_unary, a, NULL);
  if (n) {
    n->i0 = kind;
    if (sf__unary_uses_output(kind))
      n->saved = sf__t_view(out, out->ndim, out->shape, out->strides, out->offset);
  }
  return out;
}
