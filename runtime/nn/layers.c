/*
 * layers.c — what a transformer encoder needs beyond the elementwise,
 * reduction and product ops: Embedding (a gather of rows, a scatter-add
 * back), LayerNorm (fused forward and backward over the last dimension),
 * seeded dropout (a mask for the whole tensor, or one per sample from the
 * sample's index), multi-head scaled dot-product attention with a key
 * padding mask (and dropout on its probabilities), and global-norm
 * gradient clipping; each forward with its
 * backward rule beside it (docs/nn.md, "Layers").
 *
 * Key design choice: the ops whose backward is cheap to fuse and easy to
 * get wrong when composed (layer norm's three-term input gradient, the
 * masked softmax's rows with no key left) are single nodes here, and so is
 * attention without dropout: one pass per (batch row, head) doing its
 * products on q, k and v in place, its softmax in cache, and writing its
 * head's columns of the output, bitwise the values of the composition of
 * reshape, transpose, batched `@` and the fused masked softmax (which
 * attention with dropout still uses; see attention_fused for why).
 * Statistics (mean, variance, the clipping norm) are accumulated in f64;
 * layer norm's row sums and the softmax backward's row dots run four rows
 * side by side, a row per vector lane, each row's adds in the scalar
 * order, so vectors change no value.
 * Row loops (layer norm, the masked softmax, both directions) are split
 * over the pool by rows above simd.h's threshold; layer norm's dw and db
 * are summed in a fixed number of row blocks, so no value depends on the
 * thread count.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "simd.h"

/* fn over the rows [0, rows) of a (rows, width) block, split over the pool
 * when the block is large enough to pay (simd.h's thresholds, counted in
 * values), in chunks of about SF__PAR_GRAIN values.  Each row's result
 * depends on that row alone, so the split changes no value. */
static void over_rows(int64_t rows, int64_t width, void (*fn)(void *, int64_t, int64_t), void *ctx) {
  if (rows * width >= SF__PAR_MIN) {
    int64_t grain = SF__PAR_GRAIN / (width ? width : 1);
    sf__parallel_for(rows, grain > 0 ? grain : 1, fn, ctx);
  } else if (rows > 0) {
    fn(ctx, 0, rows);
  }
}

static int64_t prod(int32_t nd, const int64_t *shape) {
  int64_t n = 1;
  for (int32_t i = 0; i < nd; i++)
    n *= shape[i];
  return n;
}

/* ---------------------------------------------------------- embedding */

/* dW: the upstream rows added into the rows the ids picked. */
sf_tensor *sf__cpu_embedding_bw(const sf__node *n, sf_tensor *g) {
  sf_tensor *w = n->in[0];
  int64_t dim = w->shape[1], count = n->targets->len;
  const int64_t *ids = n->targets->data;
  sf_tensor *dw = sf__t_zeros(2, w->shape, NULL);
  const float *gd = sf__t_data(g);
  float *d = sf__t_data(dw);
  for (int64_t i = 0; i < count; i++)
    for (int64_t j = 0; j < dim; j++)
      d[ids[i] * dim + j] += gd[i * dim + j];
  return dw;
}

static void bw_embedding(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->embedding_bw(n, g));
}

sf_tensor *sf__cpu_embedding(sf_tensor *weight, sf_array *ids, int32_t nd, const int64_t *dims,
                             sf__keep *keep, const sf_loc *loc) {
  (void)keep;
  int64_t count = ids ? ids->len : 0, dim = weight->shape[1];
  const int64_t *id = count ? ids->data : NULL;
  sf_tensor *w = sf__t_contig(weight), *out = sf__t_empty(nd, dims, loc);
  const float *wd = sf__t_data(w);
  float *o = sf__t_data(out);
  for (int64_t i = 0; i < count; i++)
    memcpy(o + i * dim, wd + id[i] * dim, (size_t)dim * sizeof(float));
  sf_release(w);
  return out;
}

sf_tensor *sf__t_embedding(sf_tensor *weight, sf_array *ids, sf_array *shape, const sf_loc *loc) {
  char sb[SF__SHAPE_BUF];
  sf__t_arg(weight, "embedding", loc);
  if (weight->ndim != 2)
    sf_runtime_error(loc, "embedding: the weight must be (num_embeddings, embedding_dim), not "
                     "shape %s", SF__SHP(weight, sb));
  int32_t nd;
  int64_t dims[SF__TMAX];
  sf__t_shape_from(shape, "embedding", &nd, dims, loc);
  int64_t count = ids ? ids->len : 0, num = weight->shape[0], dim = weight->shape[1];
  if (nd == SF__TMAX)
    sf_runtime_error(loc, "embedding: ids of shape %s leave no room for the embedding "
                     "dimension (at most %d dimensions)", sf__shape_str(nd, dims, sb), SF__TMAX);
  if (prod(nd, dims) != count)
    sf_runtime_error(loc, "embedding: %" PRId64 " ids do not fill shape %s", count,
                     sf__shape_str(nd, dims, sb));
  const int64_t *id = count ? ids->data : NULL;
  for (int64_t i = 0; i < count; i++)
    if (id[i] < 0 || id[i] >= num)
      sf_runtime_error(loc, "embedding: id %" PRId64 " (position %" PRId64 ") is out of range "
                       "for %" PRId64 " embeddings (weight shape %s)", id[i], i, num,
                       SF__SHP(weight, sb));
  dims[nd++] = dim;
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->embedding(weight, ids, nd, dims, &keep, loc);
  sf__node *n = sf__record("embedding", out, bw_embedding, weight, NULL);
  if (n) {
    n->targets = ids;
    sf_retain(ids);
    n->saved = keep.saved;
  } else {
    sf_release(keep.saved);
  }
  return out;
}

/* ---------------------------------------------------------- layer norm */

/* Per row of x (rows, d): y = (x - mean) rstd w + b, with the row's mean
 * and rstd = 1/sqrt(var + eps) (biased variance, as torch) into stats
 * (rows, 2). */
typedef struct {
  const float *x, *w, *b, *g, *st;
  float *y, *stats, *part; /* part: (blocks, 2, d) partial dw, db of the backward */
  int64_t rows, d, blocks;
  double eps;
} ln_ctx;

/* Four f64 lanes (two SSE registers on the baseline; inline only).  The
 * row sums below are serial chains in f64, which a scalar loop runs at one
 * add per add latency (4 cycles): 384 values a row, twice, was most of
 * layer norm's time.  Four rows at once, a row per lane, run four chains
 * side by side, each value the same add in the same order as the scalar
 * loop, so the sums are bitwise the scalar ones. */
typedef double sf__d4 __attribute__((vector_size(32)));
#define LN_ROWS 4
/* Inlined into both the baseline and the AVX2 wrappers below. */
#define LN_INLINE static inline __attribute__((always_inline))
/* Inline only, so no call passes one (GCC reports the ABI note at the
 * file's end, hence for the whole file). */
#pragma GCC diagnostic ignored "-Wpsabi"

LN_INLINE sf__d4 ln_col(const float *const *xr, int64_t j) {
  return (sf__d4){xr[0][j], xr[1][j], xr[2][j], xr[3][j]};
}

LN_INLINE sf__d4 ln_widen(sf__f4 v) { return __builtin_convertvector(v, sf__d4); }

/* y[j] = (float)((x[j] - mean) rstd) w[j] + b[j] along one row, four
 * values at a time (each the scalar expression). */
LN_INLINE void ln_write_row(const float *xr, const float *w, const float *b, float *yr,
                            int64_t d, double mean, double rstd) {
  int64_t j = 0;
  sf__d4 vm = {mean, mean, mean, mean}, vr = {rstd, rstd, rstd, rstd};
  for (; j + SF__V <= d; j += SF__V) {
    sf__f4 t = __builtin_convertvector((ln_widen(sf__ld4(xr + j)) - vm) * vr, sf__f4);
    sf__st4(yr + j, t * sf__ld4(w + j) + sf__ld4(b + j));
  }
  for (; j < d; j++)
    yr[j] = (float)((xr[j] - mean) * rstd) * w[j] + b[j];
}

LN_INLINE void layer_norm_rows(void *vc, int64_t lo, int64_t hi) {
  ln_ctx *c = vc;
  const float *x = c->x, *w = c->w, *b = c->b;
  float *y = c->y, *stats = c->stats;
  int64_t d = c->d;
  double eps = c->eps;
  int64_t r = lo;
  for (; r + LN_ROWS <= hi && d > 0; r += LN_ROWS) {
    const float *xr[LN_ROWS] = {x + r * d, x + (r + 1) * d, x + (r + 2) * d, x + (r + 3) * d};
    sf__d4 s = {0, 0, 0, 0}, ss = {0, 0, 0, 0};
    for (int64_t j = 0; j < d; j++)
      s += ln_col(xr, j);
    sf__d4 mean = s / (double)d;
    for (int64_t j = 0; j < d; j++) {
      sf__d4 t = ln_col(xr, j) - mean;
      ss += t * t;
    }
    for (int l = 0; l < LN_ROWS; l++) {
      double rstd = 1.0 / sqrt(ss[l] / (double)d + eps);
      stats[2 * (r + l)] = (float)mean[l];
      stats[2 * (r + l) + 1] = (float)rstd;
      ln_write_row(xr[l], w, b, y + (r + l) * d, d, mean[l], rstd);
    }
  }
  for (; r < hi; r++) {
    const float *xr = x + r * d;
    double s = 0, ss = 0;
    for (int64_t j = 0; j < d; j++)
      s += xr[j];
    double mean = d ? s / (double)d : 0;
    for (int64_t j = 0; j < d; j++)
      ss += (xr[j] - mean) * (xr[j] - mean);
    double rstd = 1.0 / sqrt((d ? ss / (double)d : 0) + eps);
    stats[2 * r] = (float)mean;
    stats[2 * r + 1] = (float)rstd;
    ln_write_row(xr, w, b, y + r * d, d, mean, rstd);
  }
}

/* dx[j] = (float)(rstd (ĝ - sg - x̂ sgx)) along one row, four at a time. */
LN_INLINE void ln_dx_row(const float *xr, const float *gr, const float *w, float *dr,
                         int64_t d, double mean, double rstd, double sg, double sgx) {
  int64_t j = 0;
  sf__d4 vm = {mean, mean, mean, mean}, vr = {rstd, rstd, rstd, rstd};
  sf__d4 vg = {sg, sg, sg, sg}, vgx = {sgx, sgx, sgx, sgx};
  for (; j + SF__V <= d; j += SF__V) {
    sf__d4 xh = (ln_widen(sf__ld4(xr + j)) - vm) * vr;
    sf__d4 gh = ln_widen(sf__ld4(gr + j)) * ln_widen(sf__ld4(w + j));
    sf__st4(dr + j, __builtin_convertvector(vr * (gh - vg - xh * vgx), sf__f4));
  }
  for (; j < d; j++) {
    double xh = (xr[j] - mean) * rstd, gh = (double)gr[j] * w[j];
    dr[j] = (float)(rstd * (gh - sg - xh * sgx));
  }
}

/* Rows lo..hi of the input gradient dx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂)),
 * the sums four rows at a time as in the forward. */
LN_INLINE void layer_norm_dx_rows(void *vc, int64_t lo, int64_t hi) {
  ln_ctx *c = vc;
  int64_t d = c->d;
  const float *w = c->w;
  int64_t r = lo;
  for (; r + LN_ROWS <= hi && d > 0; r += LN_ROWS) {
    const float *xr[LN_ROWS], *gr[LN_ROWS];
    sf__d4 mean, rstd, sg = {0, 0, 0, 0}, sgx = {0, 0, 0, 0};
    for (int l = 0; l < LN_ROWS; l++) {
      xr[l] = c->x + (r + l) * d;
      gr[l] = c->g + (r + l) * d;
      mean[l] = c->st[2 * (r + l)];
      rstd[l] = c->st[2 * (r + l) + 1];
    }
    for (int64_t j = 0; j < d; j++) {
      sf__d4 xh = (ln_col(xr, j) - mean) * rstd, gh = ln_col(gr, j) * (double)w[j];
      sg += gh;
      sgx += gh * xh;
    }
    sg /= (double)d;
    sgx /= (double)d;
    for (int l = 0; l < LN_ROWS; l++)
      ln_dx_row(xr[l], gr[l], w, c->y + (r + l) * d, d, mean[l], rstd[l], sg[l], sgx[l]);
  }
  for (; r < hi; r++) {
    const float *xr = c->x + r * d, *gr = c->g + r * d;
    double mean = c->st[2 * r], rstd = c->st[2 * r + 1], sg = 0, sgx = 0;
    for (int64_t j = 0; j < d; j++) {
      double xh = (xr[j] - mean) * rstd, gh = (double)gr[j] * w[j];
      sg += gh;
      sgx += gh * xh;
    }
    sg /= (double)d;
    sgx /= (double)d;
    ln_dx_row(xr, gr, w, c->y + r * d, d, mean, rstd, sg, sgx);
  }
}

/* The two row loops as they are (SSE: each f64 vector two registers) and
 * compiled for AVX2 (one), chosen by the CPU; no FMA either way, so the
 * same bits. */
static void layer_norm_chunk(void *vc, int64_t lo, int64_t hi) { layer_norm_rows(vc, lo, hi); }
static void bw_layer_norm_dx(void *vc, int64_t lo, int64_t hi) { layer_norm_dx_rows(vc, lo, hi); }
#ifdef SF__AVX2
static SF__AVX2 void layer_norm_chunk_avx2(void *vc, int64_t lo, int64_t hi) {
  layer_norm_rows(vc, lo, hi);
}
static SF__AVX2 void bw_layer_norm_dx_avx2(void *vc, int64_t lo, int64_t hi) {
  layer_norm_dx_rows(vc, lo, hi);
}
#define LN_FWD (sf__have_avx2() ? layer_norm_chunk_avx2 : layer_norm_chunk)
#define LN_DX (sf__have_avx2() ? bw_layer_norm_dx_avx2 : bw_layer_norm_dx)
#else
#define LN_FWD layer_norm_chunk
#define LN_DX bw_layer_norm_dx
#endif

/* Blocks lo..hi of the rows' partial dw = Σ g x̂ and db = Σ g, each block a
 * fixed range of rows: the block count depends on the shape alone, so the
 * sums are the same for every thread count (bitwise, as resume needs). */
static void bw_layer_norm_dwdb(void *vc, int64_t lo, int64_t hi) {
  ln_ctx *c = vc;
  int64_t d = c->d, per = (c->rows + c->blocks - 1) / c->blocks;
  for (int64_t blk = lo; blk < hi; blk++) {
    float *pw = c->part + blk * 2 * d, *pb = pw + d;
    int64_t r1 = (blk + 1) * per < c->rows ? (blk + 1) * per : c->rows;
    for (int64_t r = blk * per; r < r1; r++) {
      const float *xr = c->x + r * d, *gr = c->g + r * d;
      float mean = c->st[2 * r], rstd = c->st[2 * r + 1];
      sf__f4 vm = sf__splat4(mean), vr = sf__splat4(rstd);
      int64_t j = 0;
      for (; j + SF__V <= d; j += SF__V) { /* each value the scalar expression */
        sf__f4 gv = sf__ld4(gr + j);
        sf__st4(pw + j, sf__ld4(pw + j) + gv * ((sf__ld4(xr + j) - vm) * vr));
        sf__st4(pb + j, sf__ld4(pb + j) + gv);
      }
      for (; j < d; j++) {
        pw[j] += gr[j] * ((xr[j] - mean) * rstd);
        pb[j] += gr[j];
      }
    }
  }
}

/* With x̂ = (x - mean) rstd and ĝ = g w: dx = rstd (ĝ - mean(ĝ) - x̂
 * mean(ĝ x̂)), dw = Σ_rows g x̂, db = Σ_rows g. */
void sf__cpu_layer_norm_bw(const sf__node *n, sf_tensor *g, sf_tensor **grads) {
  sf_tensor *x = sf__t_contig(n->in[0]), *w = sf__t_contig(n->in[1]);
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0;
  sf_tensor *dx = sf__t_like(x), *dw = sf__t_zeros(1, &d, NULL), *db = sf__t_zeros(1, &d, NULL);
  ln_ctx c = {.x = sf__t_data(x), .w = sf__t_data(w), .g = sf__t_data(g),
              .st = sf__t_data(n->saved), .y = sf__t_data(dx), .rows = rows, .d = d};
  over_rows(rows, d, LN_DX, &c);
  c.blocks = rows < 16 ? (rows ? rows : 1) : 16;
  int64_t ps[2] = {c.blocks, 2 * d};
  sf_tensor *part = sf__t_zeros(2, ps, NULL);
  c.part = sf__t_data(part);
  if (rows * d >= SF__PAR_MIN)
    sf__parallel_for(c.blocks, 1, bw_layer_norm_dwdb, &c);
  else
    bw_layer_norm_dwdb(&c, 0, c.blocks);
  float *dwd = sf__t_data(dw), *dbd = sf__t_data(db);
  for (int64_t blk = 0; blk < c.blocks; blk++)
    for (int64_t j = 0; j < d; j++) {
      dwd[j] += c.part[blk * 2 * d + j];
      dbd[j] += c.part[blk * 2 * d + d + j];
    }
  sf_release(part);
  sf_release(x);
  sf_release(w);
  grads[0] = dx;
  grads[1] = dw;
  grads[2] = db;
}

static void bw_layer_norm(sf__node *n, sf_tensor *g) {
  sf_tensor *d[3];
  sf__nn_dev_of(n, g)->layer_norm_bw(n, g, d);
  for (int i = 0; i < 3; i++)
    sf__grad_add(n->in[i], d[i]);
}

sf_tensor *sf__cpu_layer_norm(sf_tensor *x, sf_tensor *weight, sf_tensor *bias, double eps,
                              sf__keep *keep, const sf_loc *loc) {
  int64_t d = x->shape[x->ndim - 1];
  sf_tensor *xc = sf__t_contig(x), *wc = sf__t_contig(weight), *bc = sf__t_contig(bias);
  int64_t rows = d ? x->numel / d : 0, ss[2] = {rows, 2};
  sf_tensor *out = sf__t_like(xc), *stats = sf__t_empty(2, ss, loc);
  ln_ctx c = {.x = sf__t_data(xc), .w = sf__t_data(wc), .b = sf__t_data(bc),
              .y = sf__t_data(out), .stats = sf__t_data(stats), .rows = rows, .d = d, .eps = eps};
  over_rows(rows, d, LN_FWD, &c);
  sf_release(xc);
  sf_release(wc);
  sf_release(bc);
  keep->saved = stats;
  return out;
}

sf_tensor *sf__t_layer_norm(sf_tensor *x, sf_tensor *weight, sf_tensor *bias, double eps,
                            const sf_loc *loc) {
  char sx[SF__SHAPE_BUF], sw[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  sf__t_arg(x, "layer_norm", loc);
  sf__t_arg(weight, "layer_norm", loc);
  sf__t_arg(bias, "layer_norm", loc);
  if (x->ndim == 0)
    sf_runtime_error(loc, "layer_norm: the input must have a last dimension to normalise, not "
                     "shape []");
  int64_t d = x->shape[x->ndim - 1];
  if (weight->ndim != 1 || weight->shape[0] != d || bias->ndim != 1 || bias->shape[0] != d)
    sf_runtime_error(loc, "layer_norm: weight %s and bias %s must both be [%" PRId64
                     "], the last dimension of the input %s", SF__SHP(weight, sw),
                     SF__SHP(bias, sb), d, SF__SHP(x, sx));
  if (!(eps > 0))
    sf_runtime_error(loc, "layer_norm: eps must be positive, not %g", eps);
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->layer_norm(x, weight, bias, eps, &keep, loc);
  sf__node *n = sf__record3("layer_norm", out, bw_layer_norm, x, weight, bias);
  if (n)
    n->saved = keep.saved;
  else
    sf_release(keep.saved);
  return out;
}

/* ------------------------------------------------------------ dropout */

static void bw_dropout(sf__node *n, sf_tensor *g) {
  sf__nn_dev_of(n, g); /* a GPU node's device current: the product runs there */
  sf_tensor *dx = sf__t_binary(SF_TOP_MUL, g, n->saved, NULL);
  sf__grad_add(n->in[0], dx);
}

static sf_tensor *apply_mask(sf_tensor *x, sf_tensor *mask, double p, const sf_loc *loc);
static sf_tensor *row_mask(sf_tensor *x, int64_t seed, sf_array *index, int64_t stream);

/* x times the mask, one dropout node holding it (each device's own). */
static sf_tensor *dropout_rec(sf_tensor *x, double p, int64_t seed, sf_array *index,
                              int64_t stream, const sf_loc *loc) {
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->dropout(x, p, seed, index, stream, &keep, loc);
  sf__node *n = sf__record("dropout", out, bw_dropout, x, NULL);
  if (n)
    n->saved = keep.saved;
  else
    sf_release(keep.saved);
  return out;
}

sf_tensor *sf__cpu_dropout(sf_tensor *x, double p, int64_t seed, sf_array *index, int64_t stream,
                           sf__keep *keep, const sf_loc *loc) {
  sf_tensor *mask;
  if (index) {
    mask = row_mask(x, seed, index, stream);
  } else {
    /* The mask from a uniform draw of x's shape: kept where u >= p, so a
     * seed gives the same mask on every run, and each kept value is
     * scaled by 1/(1 - p) as torch does, so the expectation is unchanged. */
    sf_array *shape = sf_array_new(&sf_type_i64, x->ndim, loc);
    memcpy(shape->data, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    mask = sf_std_nn_uniform(shape, 0.0f, 1.0f, seed, loc);
    sf_release(shape);
  }
  keep->saved = mask;
  return apply_mask(x, mask, p, loc);
}

sf_tensor *sf__t_dropout(sf_tensor *x, double p, int64_t seed, bool training, const sf_loc *loc) {
  sf__t_arg(x, "dropout", loc);
  if (!(p >= 0.0 && p <= 1.0))
    sf_runtime_error(loc, "dropout: p must be in [0, 1], not %g", p);
  if (!training || p == 0.0) { /* the identity: x itself, its graph kept (as torch) */
    sf_retain(x);
    return x;
  }
  return dropout_rec(x, p, seed, NULL, 0, loc);
}

/* x times the mask made from mask's uniform draws (in place: kept where
 * u >= p, scaled by 1/(1 - p)). */
typedef struct {
  float *m;
  double p;
  float keep;
} keep_ctx;

static void keep_chunk(void *vc, int64_t lo, int64_t hi) {
  const keep_ctx *c = vc;
  for (int64_t i = lo; i < hi; i++)
    c->m[i] = c->p < 1.0 && (double)c->m[i] >= c->p ? c->keep : 0.0f;
}

static sf_tensor *apply_mask(sf_tensor *x, sf_tensor *mask, double p, const sf_loc *loc) {
  /* Each value is its own draw's test: split over the pool, no value moves. */
  keep_ctx kc = {sf__t_data(mask), p, p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f};
  sf__t_run_chunks(mask->numel, keep_chunk, &kc);
  bool saved = sf__no_grad;
  sf__no_grad = true; /* the product is this op's node, not mul's */
  sf_tensor *out = sf__t_binary(SF_TOP_MUL, x, mask, loc);
  sf__no_grad = saved;
  return out;
}

/* Per-sample masks.  Row r's key is a mix of the seed, index[r] and the
 * stream (a model numbers its dropout sites as streams), so the values
 * drawn for a row are the same whether it sits in a batch of 1 or of 64,
 * first or last: what data-parallel training needs for 1, 2 and 4 workers
 * to compute one loss curve. */
static void check_rows(const char *op, sf_tensor *x, double p, int64_t seed, sf_array *index,
                       const sf_loc *loc) {
  char sx[SF__SHAPE_BUF];
  if (!(p >= 0.0 && p <= 1.0))
    sf_runtime_error(loc, "%s: p must be in [0, 1], not %g", op, p);
  if (seed < 0)
    sf_runtime_error(loc, "%s: seed must be >= 0, not %" PRId64, op, seed);
  int64_t n = index ? index->len : 0;
  if (x->ndim < 1 || n != x->shape[0])
    sf_runtime_error(loc, "%s: index has %" PRId64 " entries, but the tensor %s needs one per "
                     "row of its first axis", op, n, SF__SHP(x, sx));
}

/* Each row's draws come from its own key, so rows are made on any thread
 * in any order with the same values: split over the pool by rows (the
 * masks were a serial pass on the caller, 2.7% of a fine-tuning step at
 * one thread and all of it on main at two). */
typedef struct {
  float *m;
  const int64_t *ix;
  uint64_t base, stream;
  int64_t per;
} rows_ctx;

static void row_mask_chunk(void *vc, int64_t lo, int64_t hi) {
  const rows_ctx *c = vc;
  for (int64_t r = lo; r < hi; r++) {
    uint64_t key = sf__rng_mix(sf__rng_mix(c->base, (uint64_t)c->ix[r]), c->stream);
    sf__uniform_key(c->m + r * c->per, c->per, key);
  }
}

static sf_tensor *row_mask(sf_tensor *x, int64_t seed, sf_array *index, int64_t stream) {
  sf_tensor *mask = sf__t_like(x);
  int64_t rows = x->shape[0], per = rows ? x->numel / rows : 0;
  rows_ctx c = {sf__t_data(mask), index->data, sf__rng_mix((uint64_t)seed, 0x6472) /* "dr" */,
                (uint64_t)stream, per};
  over_rows(rows, per, row_mask_chunk, &c);
  return mask;
}

sf_tensor *sf__t_dropout_rows(sf_tensor *x, double p, int64_t seed, sf_array *index,
                              int64_t stream, bool training, const sf_loc *loc) {
  sf__t_arg(x, "dropout_rows", loc);
  check_rows("dropout_rows", x, p, seed, index, loc);
  if (!training || p == 0.0) {
    sf_retain(x);
    return x;
  }
  return dropout_rec(x, p, seed, index, stream, loc);
}

/* ---------------------------------------------------------- attention */

/* Softmax over the last axis of scores (B, H, T, S) times scale, keys
 * whose mask entry (B, S) is 0 left out (probability 0); a row with no
 * key left is all zeros, as torch's scaled_dot_product_attention gives
 * for a fully padded row. */
typedef struct {
  const float *x, *g;
  float *y;
  const int64_t *mask;
  const int64_t *prefix; /* per batch row: its keys are 0..prefix-1 (right padding), or -1 */
  int64_t per_batch, s;
  float scale;
} sm_ctx;

/* The keys of a batch row, when they are a prefix (the usual right
 * padding): their count; else -1. */
static int64_t key_prefix(const int64_t *m, int64_t s) {
  int64_t n = 0;
  while (n < s && m[n])
    n++;
  for (int64_t j = n; j < s; j++)
    if (m[j])
      return -1;
  return n;
}

#ifdef SF__AVX2
/* y[j] = exp(y[j] - mx) eight at a time while 8 are left, the sums added
 * into acc four by four in softmax_row's order (so the row's bits do not
 * depend on the CPU); returns where it stopped. */
static SF__AVX2 int64_t exp_rows_avx2(float *yr, int64_t n, float mx, sf__f4 *acc) {
  int64_t j = 0;
  sf__f4 a = *acc;
  for (; j + 8 <= n; j += 8) {
    sf__f8 v;
    memcpy(&v, yr + j, sizeof v);
    v = sf__exp8(v - mx);
    memcpy(yr + j, &v, sizeof v);
    a += sf__ld4(yr + j);
    a += sf__ld4(yr + j + 4);
  }
  *acc = a;
  return j;
}

/* exp_rows_avx2 sixteen at a time where the CPU has AVX-512F, the sums
 * still added four by four in order (the same bits). */
static SF__AVX512 int64_t exp_rows_avx512(float *yr, int64_t n, float mx, sf__f4 *acc) {
  int64_t j = 0;
  sf__f4 a = *acc;
  for (; j + 16 <= n; j += 16) {
    sf__f16 v;
    memcpy(&v, yr + j, sizeof v);
    v = sf__exp16(v - mx);
    memcpy(yr + j, &v, sizeof v);
    a += sf__ld4(yr + j);
    a += sf__ld4(yr + j + 4);
    a += sf__ld4(yr + j + 8);
    a += sf__ld4(yr + j + 12);
  }
  *acc = a;
  return j;
}
#endif

/* y[0..n) = softmax(x[0..n) * scale), keys with m[j] == 0 (m may be
 * NULL) at probability 0, four lanes at a time (simd.h's exp; the tail
 * padded with -inf, which is 0 after exp); a row with no key left is
 * zeros.  The sums go lane by lane, then across, in a fixed order. */
static void softmax_row(const float *xr, float *yr, const int64_t *m, int64_t n, float scale) {
  float mx = -INFINITY;
  int64_t k = 0;
  if (!m) { /* no mask (the keys a prefix): four lanes; the maximum is exact in any order */
    sf__f4 vs = sf__splat4(scale), vm = sf__splat4(-INFINITY);
    for (; k + SF__V <= n; k += SF__V) {
      sf__f4 v = sf__ld4(xr + k) * vs;
      sf__st4(yr + k, v);
      sf__i4 gt = v > vm;
      vm = (sf__f4)(((sf__i4)v & gt) | ((sf__i4)vm & ~gt));
    }
    for (int l = 0; l < SF__V; l++)
      mx = vm[l] > mx ? vm[l] : mx;
  }
  for (int64_t j = k; j < n; j++) {
    yr[j] = (!m || m[j]) ? xr[j] * scale : -INFINITY;
    mx = yr[j] > mx ? yr[j] : mx;
  }
  if (mx == -INFINITY) { /* no key left: zeros, as torch */
    memset(yr, 0, (size_t)n * sizeof(float));
    return;
  }
  sf__f4 vmx = sf__splat4(mx), acc = sf__splat4(0.0f);
  int64_t j = 0;
#ifdef SF__AVX2
  if (sf__have_avx512())
    j = exp_rows_avx512(yr, n, mx, &acc);
  else if (sf__have_avx2())
    j = exp_rows_avx2(yr, n, mx, &acc);
#endif
  for (; j + SF__V <= n; j += SF__V) {
    sf__f4 e = sf__exp4(sf__ld4(yr + j) - vmx);
    sf__st4(yr + j, e);
    acc += e;
  }
  if (j < n) {
    float t[SF__V] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    memcpy(t, yr + j, sizeof(float) * (size_t)(n - j));
    sf__f4 e = sf__exp4(sf__ld4(t) - vmx);
    sf__st4(t, e);
    memcpy(yr + j, t, sizeof(float) * (size_t)(n - j));
    acc += e;
  }
  float inv = 1.0f / ((acc[0] + acc[1]) + (acc[2] + acc[3]));
  sf__f4 vinv = sf__splat4(inv);
  for (j = 0; j + SF__V <= n; j += SF__V)
    sf__st4(yr + j, sf__ld4(yr + j) * vinv);
  for (; j < n; j++)
    yr[j] *= inv;
}

/* One row of batch row b's scores (xr may be yr: in place). */
static void masked_softmax_row(const sm_ctx *c, const float *xr, float *yr, int64_t b) {
  int64_t s = c->s;
  const int64_t *mr = c->mask ? c->mask + b * s : NULL;
  int64_t n = c->prefix ? c->prefix[b] : -1;
  if (n >= 0) { /* right padding: only the keys there are, the rest zeros */
    softmax_row(xr, yr, NULL, n, c->scale);
    memset(yr + n, 0, (size_t)(s - n) * sizeof(float));
  } else {
    softmax_row(xr, yr, mr, s, c->scale);
  }
}

static void masked_softmax_chunk(void *vc, int64_t lo, int64_t hi) {
  sm_ctx *c = vc;
  int64_t s = c->s;
  for (int64_t r = lo; r < hi; r++)
    masked_softmax_row(c, c->x + r * s, c->y + r * s, r / c->per_batch);
}

/* dx = scale y (g - dot) over one row of s, dot = Σ g y; masked keys have
 * y = 0 and get 0.  Four lanes, each value the scalar expression (d may be
 * g: each vector is read before it is written). */
static void softmax_bw_apply(const float *yr, const float *gr, float *d, int64_t s, float scale,
                             float dot) {
  sf__f4 vs = sf__splat4(scale), vd = sf__splat4(dot);
  int64_t j = 0;
  for (; j + SF__V <= s; j += SF__V)
    sf__st4(d + j, vs * sf__ld4(yr + j) * (sf__ld4(gr + j) - vd));
  for (; j < s; j++)
    d[j] = scale * yr[j] * (gr[j] - dot);
}

/* softmax_bw_apply over rows [0, n) of s (y, g and d each with row stride
 * s; d may be g).  The dot is a serial float chain per row, one add per
 * add latency: four rows run side by side, a row per lane, each its adds
 * in the scalar order, so the dots are bitwise the one-row loop's. */
static void softmax_bw_rows(const float *y, const float *g, float *d, int64_t n, int64_t s,
                            float scale) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    const float *y0 = y + r * s, *y1 = y0 + s, *y2 = y1 + s, *y3 = y2 + s;
    const float *g0 = g + r * s, *g1 = g0 + s, *g2 = g1 + s, *g3 = g2 + s;
    sf__f4 dot = sf__splat4(0.0f);
    for (int64_t j = 0; j < s; j++)
      dot += (sf__f4){g0[j], g1[j], g2[j], g3[j]} * (sf__f4){y0[j], y1[j], y2[j], y3[j]};
    for (int l = 0; l < 4; l++)
      softmax_bw_apply(y + (r + l) * s, g + (r + l) * s, d + (r + l) * s, s, scale, dot[l]);
  }
  for (; r < n; r++) {
    const float *yr = y + r * s, *gr = g + r * s;
    float dot = 0;
    for (int64_t j = 0; j < s; j++)
      dot += gr[j] * yr[j];
    softmax_bw_apply(yr, gr, d + r * s, s, scale, dot);
  }
}

static void bw_masked_softmax_chunk(void *vc, int64_t lo, int64_t hi) {
  sm_ctx *c = vc;
  int64_t s = c->s;
  softmax_bw_rows(c->x + lo * s, c->g + lo * s, c->y + lo * s, hi - lo, s, c->scale);
}

sf_tensor *sf__cpu_masked_softmax_bw(const sf__node *n, sf_tensor *g) {
  sf_tensor *y = n->saved;
  int64_t s = y->shape[y->ndim - 1], rows = s ? y->numel / s : 0;
  sf_tensor *dx = sf__t_like(y);
  sm_ctx c = {.x = sf__t_data(y), .g = sf__t_data(g), .y = sf__t_data(dx), .s = s,
              .scale = (float)n->f0};
  over_rows(rows, s, bw_masked_softmax_chunk, &c);
  return dx;
}

static void bw_masked_softmax(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->masked_softmax_bw(n, g));
}

sf_tensor *sf__cpu_masked_softmax(sf_tensor *scores, sf_array *mask, float scale,
                                  const sf_loc *loc) {
  (void)loc;
  sf_tensor *x = sf__t_contig(scores), *out = sf__t_like(x);
  int64_t s = x->shape[3], batch = x->shape[0];
  int64_t *prefix = NULL;
  if (mask) {
    prefix = sf__alloc_n((size_t)(batch ? batch : 1), sizeof *prefix);
    for (int64_t b = 0; b < batch; b++)
      prefix[b] = key_prefix((const int64_t *)mask->data + b * s, s);
  }
  sm_ctx c = {.x = sf__t_data(x), .y = sf__t_data(out), .mask = mask ? mask->data : NULL,
              .prefix = prefix, .per_batch = x->shape[1] * x->shape[2], .s = s, .scale = scale};
  over_rows(s ? x->numel / s : 0, s, masked_softmax_chunk, &c);
  free(prefix);
  sf_release(x);
  return out;
}

/* softmax(scores * scale) over the keys the mask keeps: one "attention"
 * node. */
static sf_tensor *masked_softmax(sf_tensor *scores, sf_array *mask, float scale,
                                 const sf_loc *loc) {
  sf_tensor *out = sf__nn_dev_here(loc)->masked_softmax(scores, mask, scale, loc);
  sf__node *n = sf__record("attention", out, bw_masked_softmax, scores, NULL);
  if (n) {
    n->f0 = scale;
    n->saved = sf__t_view(out, out->ndim, out->shape, out->strides, out->offset);
  }
  return out;
}

/* (B, L, D) -> (B, H, L, D/H): a reshape view and a strided transpose. */
static sf_tensor *split_heads(sf_tensor *t, int64_t heads, const sf_loc *loc) {
  int64_t shape[4] = {t->shape[0], t->shape[1], heads, t->shape[2] / heads};
  sf_tensor *r = sf__t_reshape(t, 4, shape, loc), *h = sf__t_transpose(r, 1, 2, loc);
  sf_release(r);
  return h;
}

static void check_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                            int64_t heads, const sf_loc *loc) {
  char sq[SF__SHAPE_BUF], sk[SF__SHAPE_BUF], sv[SF__SHAPE_BUF];
  bool ok = q->ndim == 3 && k->ndim == 3 && v->ndim == 3 && k->shape[0] == q->shape[0] &&
            v->shape[0] == q->shape[0] && k->shape[2] == q->shape[2] &&
            v->shape[2] == q->shape[2] && v->shape[1] == k->shape[1];
  if (!ok)
    sf_runtime_error(loc, "attention: q %s, k %s and v %s must be (B, T, D), (B, S, D) and "
                     "(B, S, D)", SF__SHP(q, sq), SF__SHP(k, sk), SF__SHP(v, sv));
  if (heads <= 0 || q->shape[2] % heads)
    sf_runtime_error(loc, "attention: %" PRId64 " heads do not divide the width %" PRId64
                     " of q %s", heads, q->shape[2], SF__SHP(q, sq));
  int64_t want = k->shape[0] * k->shape[1], len = mask ? mask->len : 0;
  if (len && len != want)
    sf_runtime_error(loc, "attention: the mask has %" PRId64 " entries, but keys %s need %"
                     PRId64 " (B * S, one per key; [] for none)", len, SF__SHP(k, sk), want);
}

/* The composition; with drop > 0 the probabilities go through
 * dropout_rows first (batch row b's masks from (seed, index[b], stream)),
 * as Hugging Face's BertSelfAttention drops attention_probs.  Without
 * dropout the fused path below computes the same values. */
static sf_tensor *attention_composed(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                                     int64_t heads, float scale, double drop, int64_t seed,
                                     sf_array *index, int64_t stream, const sf_loc *loc) {
  sf_tensor *qh = split_heads(q, heads, loc), *kh = split_heads(k, heads, loc);
  sf_tensor *vh = split_heads(v, heads, loc), *kt = sf__t_transpose(kh, 2, 3, loc);
  sf_tensor *scores = sf__t_matmul(qh, kt, loc);              /* (B, H, T, S) */
  sf_tensor *p = masked_softmax(scores, mask, scale, loc);
  if (drop > 0.0) {
    sf_tensor *pd = dropout_rec(p, drop, seed, index, stream, loc);
    sf_release(p);
    p = pd;
  }
  sf_tensor *o = sf__t_matmul(p, vh, loc);                    /* (B, H, T, D/H) */
  sf_tensor *ot = sf__t_transpose(o, 1, 2, loc);              /* (B, T, H, D/H) */
  sf_tensor *out = sf__t_reshape(ot, 3, q->shape, loc);       /* (B, T, D) */
  sf_tensor *tmp[] = {qh, kh, vh, kt, scores, p, o, ot};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
    sf_release(tmp[i]);
  return out;
}

/* Fused attention without dropout: one node for the whole op, one pass
 * per (batch row, head) on the pool.  The composition above spent an
 * encoder step's time outside its products: the split-heads copies of the
 * output and of dq, dk and dv (a memmove pass of (B, T, D) each), the
 * (B, H, T, S) scores, probabilities, their gradient and the softmax's
 * input gradient as four tensors of 25 MB each in MiniLM's layer (page
 * faults, and every pass over them out of cache), and a softmax pass over
 * all of them between the product stacks.  Here each (b, h) does its
 * products on q, k and v in place (their head is a column block of
 * (B, T, D): leading dimension D, no copy), its softmax on its own T × S
 * block while it is in cache, and writes its head's columns of the output
 * (and of dq, dk, dv); only the probabilities are kept, for the backward.
 *
 * Each product is the same sf__sgemm call the composition makes (same
 * shape, transposes and operand order; only the leading dimensions of
 * the head blocks differ, which moves where values are read and written,
 * not how they are summed), the softmax rows are the same functions, and
 * dk, which the composition gets as dkᵀ = qᵀ ds, is computed that way and
 * transposed from a scratch block, so the values are bitwise the
 * composition's (unit test attention_fused, and SFLOW_NN_ATTENTION=
 * composed runs the old path for comparison).  The gradients are added
 * in the composition's order (v, k, q), which matters when they are one
 * tensor. */
typedef struct {
  const float *q, *k, *v, *g; /* (B, T, D), (B, S, D), (B, S, D); g: d out */
  float *p;                   /* (B, H, T, S) probabilities, or NULL: scratch */
  float *o, *dq, *dk, *dv;
  sm_ctx sm;                  /* mask, prefix, s, scale for the rows */
  int64_t heads, t, s, dh, d;
  bool causal;                /* query r sees keys 0 .. s - t + r */
} att_ctx;

/* A causal row: masked_softmax_row over the first lim keys, zeros after
 * (the backward needs nothing more: masked keys have p = 0, so ds = 0). */
static void causal_row(const sm_ctx *c, const float *xr, float *yr, int64_t b, int64_t lim) {
  int64_t s = c->s;
  lim = lim < 0 ? 0 : lim > s ? s : lim;
  const int64_t *mr = c->mask ? c->mask + b * s : NULL;
  int64_t n = c->prefix ? c->prefix[b] : -1;
  if (n >= 0 || !mr) {
    n = n >= 0 && n < lim ? n : lim;
    softmax_row(xr, yr, NULL, n, c->scale);
    memset(yr + n, 0, (size_t)(s - n) * sizeof(float));
  } else {
    softmax_row(xr, yr, mr, lim, c->scale);
    memset(yr + lim, 0, (size_t)(s - lim) * sizeof(float));
  }
}

static void att_fwd_chunk(void *vc, int64_t lo, int64_t hi) {
  const att_ctx *c = vc;
  int64_t t = c->t, s = c->s, dh = c->dh, d = c->d;
  float *scratch = c->p ? NULL : sf__alloc_n((size_t)(t * s), sizeof(float));
  for (int64_t bh = lo; bh < hi; bh++) {
    int64_t b = bh / c->heads, h = bh % c->heads;
    const float *qb = c->q + b * t * d + h * dh, *kb = c->k + b * s * d + h * dh,
                *vb = c->v + b * s * d + h * dh;
    float *pb = c->p ? c->p + bh * t * s : scratch;
    sf__sgemm(false, true, t, s, dh, 1.0f, qb, d, kb, d, 0.0f, pb, s);
    for (int64_t r = 0; r < t; r++) {
      if (c->causal)
        causal_row(&c->sm, pb + r * s, pb + r * s, b, s - t + r + 1);
      else
        masked_softmax_row(&c->sm, pb + r * s, pb + r * s, b);
    }
    sf__sgemm(false, false, t, dh, s, 1.0f, pb, s, vb, d, 0.0f, c->o + b * t * d + h * dh, d);
  }
  free(scratch);
}

static void att_bwd_chunk(void *vc, int64_t lo, int64_t hi) {
  const att_ctx *c = vc;
  int64_t t = c->t, s = c->s, dh = c->dh, d = c->d;
  float *dp = sf__alloc_n((size_t)(t * s + dh * s), sizeof(float)), *dkt = dp + t * s;
  for (int64_t bh = lo; bh < hi; bh++) {
    int64_t b = bh / c->heads, h = bh % c->heads, col = h * dh;
    const float *qb = c->q + b * t * d + col, *kb = c->k + b * s * d + col,
                *vb = c->v + b * s * d + col, *gb = c->g + b * t * d + col;
    const float *pb = c->p + bh * t * s;
    /* o = p v: dp = g vᵀ, dv = pᵀ g */
    sf__sgemm(false, true, t, s, dh, 1.0f, gb, d, vb, d, 0.0f, dp, s);
    sf__sgemm(true, false, s, dh, t, 1.0f, pb, s, gb, d, 0.0f, c->dv + b * s * d + col, d);
    /* the softmax: ds in dp's place */
    softmax_bw_rows(pb, dp, dp, t, s, c->sm.scale);
    /* scores = q kᵀ: dq = ds k, dkᵀ = qᵀ ds */
    sf__sgemm(false, false, t, dh, s, 1.0f, dp, s, kb, d, 0.0f, c->dq + b * t * d + col, d);
    sf__sgemm(true, false, dh, s, t, 1.0f, qb, d, dp, s, 0.0f, dkt, s);
    float *dkb = c->dk + b * s * d + col;
    for (int64_t j = 0; j < s; j++)
      for (int64_t e = 0; e < dh; e++)
        dkb[j * d + e] = dkt[e * s + j];
  }
  free(dp);
}

/* (batch rows · heads) items over the pool: each is tens of microseconds
 * of products, so one item per chunk is grain enough. */
static void att_over_heads(att_ctx *c, int64_t batch, void (*fn)(void *, int64_t, int64_t)) {
  int64_t items = batch * c->heads;
  if (items * c->t * c->s >= SF__PAR_MIN)
    sf__parallel_for(items, 1, fn, c);
  else
    fn(c, 0, items);
}

/* The right-padding prefix of each batch row's keys (masked_softmax's). */
static int64_t *att_prefix(sf_array *mask, int64_t batch, int64_t s) {
  if (!mask)
    return NULL;
  int64_t *prefix = sf__alloc_n((size_t)(batch ? batch : 1), sizeof *prefix);
  for (int64_t b = 0; b < batch; b++)
    prefix[b] = key_prefix((const int64_t *)mask->data + b * s, s);
  return prefix;
}

void sf__cpu_attention_bw(const sf__node *n, sf_tensor *g, sf_tensor **grads) {
  sf_tensor *q = sf__t_contig(n->in[0]), *k = sf__t_contig(n->in[1]), *v = sf__t_contig(n->in[2]);
  int64_t batch = q->shape[0], t = q->shape[1], s = k->shape[1], d = q->shape[2];
  sf_tensor *dq = sf__t_like(q), *dk = sf__t_like(k), *dv = sf__t_like(v);
  att_ctx c = {.q = sf__t_data(q), .k = sf__t_data(k), .v = sf__t_data(v), .g = sf__t_data(g),
               .p = sf__t_data(n->saved), .dq = sf__t_data(dq), .dk = sf__t_data(dk),
               .dv = sf__t_data(dv), .sm = {.s = s, .scale = n->f0}, .heads = n->i0, .t = t,
               .s = s, .dh = d / n->i0, .d = d};
  att_over_heads(&c, batch, att_bwd_chunk);
  sf_release(q);
  sf_release(k);
  sf_release(v);
  grads[0] = dq;
  grads[1] = dk;
  grads[2] = dv;
}

/* The gradients added in the composition's order (v, k, q), which
 * matters when they are one tensor. */
static void bw_attention(sf__node *n, sf_tensor *g) {
  sf_tensor *d[3];
  sf__nn_dev_of(n, g)->attention_bw(n, g, d);
  for (int i = 2; i >= 0; i--)
    sf__grad_add(n->in[i], d[i]);
}

sf_tensor *sf__cpu_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                             int64_t heads, bool causal, float scale, sf__keep *keep,
                             const sf_loc *loc) {
  sf_tensor *qc = sf__t_contig(q), *kc = sf__t_contig(k), *vc = sf__t_contig(v);
  int64_t batch = q->shape[0], t = q->shape[1], s = k->shape[1], d = q->shape[2];
  bool rec = !sf__no_grad && (q->req || k->req || v->req);
  sf_tensor *p = rec ? sf__t_empty(4, (int64_t[]){batch, heads, t, s}, loc) : NULL;
  sf_tensor *out = sf__t_empty(3, q->shape, loc);
  int64_t *prefix = att_prefix(mask, batch, s);
  att_ctx c = {.q = sf__t_data(qc), .k = sf__t_data(kc), .v = sf__t_data(vc),
               .p = p ? sf__t_data(p) : NULL, .o = sf__t_data(out),
               .sm = {.mask = mask ? mask->data : NULL, .prefix = prefix, .s = s, .scale = scale},
               .heads = heads, .t = t, .s = s, .dh = d / heads, .d = d, .causal = causal};
  att_over_heads(&c, batch, att_fwd_chunk);
  free(prefix);
  sf_release(qc);
  sf_release(kc);
  sf_release(vc);
  keep->saved = p;
  return out;
}

static sf_tensor *attention_fused(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                                  int64_t heads, bool causal, float scale, const sf_loc *loc) {
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->attention(q, k, v, mask, heads, causal, scale, &keep, loc);
  sf_tensor *p = keep.saved;
  sf__node *n = sf__record3("attention", out, bw_attention, q, k, v);
  if (n) {
    n->f0 = scale;
    n->i0 = heads;
    n->i1 = causal;
    n->saved = p;
  } else {
    sf_release(p);
  }
  return out;
}

/* SFLOW_NN_ATTENTION=composed: the composition even without dropout, to
 * compare the two paths (read at each call: a getenv per op is nothing
 * beside its products, and a test can switch within one process). */
static bool attention_composed_asked(void) {
  const char *e = getenv("SFLOW_NN_ATTENTION");
  return e && strcmp(e, "composed") == 0;
}

/* Grouped-query attention's keys or values (B, S, kv_heads · dh) with
 * each head repeated for its heads / kv_heads query heads, (B, S, heads ·
 * dh), as transformers' repeat_kv: a reshape and an index_select, so the
 * gradient of each copy is summed back by index_select's rule. */
static sf_tensor *repeat_kv(sf_tensor *t, int64_t heads, int64_t kv_heads, const sf_loc *loc) {
  int64_t dh = t->shape[2] / kv_heads, group = heads / kv_heads;
  int64_t s4[4] = {t->shape[0], t->shape[1], kv_heads, dh};
  sf_tensor *r = sf__t_reshape(t, 4, s4, loc);
  sf_array *idx = sf_array_new(&sf_type_i64, heads, loc);
  for (int64_t h = 0; h < heads; h++)
    ((int64_t *)idx->data)[h] = h / group;
  sf_tensor *e = sf__t_index_select(r, 2, idx, loc);
  int64_t s3[3] = {t->shape[0], t->shape[1], heads * dh};
  sf_tensor *out = sf__t_reshape(e, 3, s3, loc);
  sf_release(idx);
  sf_release(r);
  sf_release(e);
  return out;
}

static sf_tensor *attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                            int64_t heads, bool causal, int64_t kv_heads, double drop,
                            int64_t seed, sf_array *index, int64_t stream, const sf_loc *loc) {
  sf__t_arg(q, "attention", loc);
  sf__t_arg(k, "attention", loc);
  sf__t_arg(v, "attention", loc);
  if (kv_heads && kv_heads != heads) {
    char sq[SF__SHAPE_BUF], sk[SF__SHAPE_BUF], sv[SF__SHAPE_BUF];
    bool ok = kv_heads > 0 && heads > 0 && heads % kv_heads == 0 && q->ndim == 3 &&
              k->ndim == 3 && v->ndim == 3 && q->shape[2] % heads == 0 &&
              k->shape[2] == q->shape[2] / heads * kv_heads && v->shape[2] == k->shape[2];
    if (!ok)
      sf_runtime_error(loc, "attention: %" PRId64 " key/value heads for %" PRId64 " query heads: "
                       "q %s, k %s and v %s must be (B, T, heads · d), (B, S, kv_heads · d) and "
                       "(B, S, kv_heads · d), kv_heads dividing heads", kv_heads, heads,
                       SF__SHP(q, sq), SF__SHP(k, sk), SF__SHP(v, sv));
    sf_tensor *ke = repeat_kv(k, heads, kv_heads, loc), *ve = repeat_kv(v, heads, kv_heads, loc);
    sf_tensor *out = attention(q, ke, ve, mask, heads, causal, 0, drop, seed, index, stream, loc);
    sf_release(ke);
    sf_release(ve);
    return out;
  }
  check_attention(q, k, v, mask, heads, loc);
  if (causal && k->shape[1] < q->shape[1])
    sf_runtime_error(loc, "attention: causal with %" PRId64 " queries and %" PRId64 " keys (a "
                     "query's position is S - T + t, so S must be at least T)", q->shape[1],
                     k->shape[1]);
  if (mask && !mask->len)
    mask = NULL;
  float scale = (float)(1.0 / sqrt((double)(q->shape[2] / heads)));
  if (!causal && (drop > 0.0 || q->numel == 0 || k->numel == 0 || attention_composed_asked()))
    return attention_composed(q, k, v, mask, heads, scale, drop, seed, index, stream, loc);
  if (causal && drop > 0.0)
    sf_runtime_error(loc, "attention_dropout: no causal option (dropout runs the composition)");
  return attention_fused(q, k, v, mask, heads, causal, scale, loc);
}

sf_tensor *sf__t_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                           int64_t heads, const sf_loc *loc) {
  return attention(q, k, v, mask, heads, false, 0, 0.0, 0, NULL, 0, loc);
}

sf_tensor *sf__t_attention_ex(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                              int64_t heads, bool causal, int64_t kv_heads, const sf_loc *loc) {
  return attention(q, k, v, mask, heads, causal, kv_heads, 0.0, 0, NULL, 0, loc);
}

sf_tensor *sf__t_attention_dropout(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                                   int64_t heads, double p, int64_t seed, sf_array *index,
                                   int64_t stream, bool training, const sf_loc *loc) {
  sf__t_arg(q, "attention_dropout", loc);
  check_rows("attention_dropout", q, p, seed, index, loc);
  return attention(q, k, v, mask, heads, false, 0, training ? p : 0.0, seed, index, stream, loc);
}

/* --------------------------------------------------------- clipping */

/* Σ g² over n floats in f64, in eight independent lanes (four SSE2
 * vectors of two doubles): one running sum was a chain of dependent
 * scalar adds, which made the norm of a 22M-param model's gradients cost
 * about as much as its AdamW step; the lanes run in parallel, every value
 * still squared and added in f64, and the same on every run. */
typedef float sf__f2 __attribute__((vector_size(8)));
typedef double sf__d2 __attribute__((vector_size(16)));

double sf__sum_squares(const float *g, int64_t n) {
  sf__d2 s0 = {0, 0}, s1 = {0, 0}, s2 = {0, 0}, s3 = {0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    sf__f2 f[4];
    memcpy(f, g + j, sizeof f);
    sf__d2 x0 = __builtin_convertvector(f[0], sf__d2), x1 = __builtin_convertvector(f[1], sf__d2);
    sf__d2 x2 = __builtin_convertvector(f[2], sf__d2), x3 = __builtin_convertvector(f[3], sf__d2);
    s0 += x0 * x0;
    s1 += x1 * x1;
    s2 += x2 * x2;
    s3 += x3 * x3;
  }
  sf__d2 t = (s0 + s1) + (s2 + s3);
  double ss = t[0] + t[1];
  for (; j < n; j++)
    ss += (double)g[j] * g[j];
  return ss;
}

/* g *= c in f32, as torch's g.mul_(clip_coef) does, four lanes at a time. */
void sf__scale_floats(float *g, int64_t n, float c) {
  int64_t j = 0;
  for (; j + SF__V <= n; j += SF__V)
    sf__st4(g + j, sf__ld4(g + j) * sf__splat4(c));
  for (; j < n; j++)
    g[j] *= c;
}

/* The clip's two passes, a param at a time: each param's sum of squares
 * (into ss[i]) or its scaling is the same computation on whichever
 * thread, and the sums are added in param order afterwards, so the norm
 * is bitwise the serial loop's at any thread count.  On one thread this
 * was 2% of a fine-tuning step at --threads 2 (22.7M values). */
typedef struct {
  sf_tensor **p;
  double *ss;
  float coef;
} clip_job;

static void clip_sums(void *ctx, int64_t lo, int64_t hi) {
  const clip_job *c = ctx;
  for (int64_t i = lo; i < hi; i++) {
    const sf_tensor *g = c->p[i] ? c->p[i]->grad : NULL;
    c->ss[i] = g ? sf__sum_squares(sf__t_data(g), g->numel) : 0;
  }
}

static void clip_scale(void *ctx, int64_t lo, int64_t hi) {
  const clip_job *c = ctx;
  for (int64_t i = lo; i < hi; i++)
    if (c->p[i] && c->p[i]->grad)
      sf__scale_floats(sf__t_wdata(c->p[i]->grad), c->p[i]->grad->numel, c->coef);
}

double sf__clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc) {
  if (!(max_norm >= 0))
    sf_runtime_error(loc, "clip_grad_norm: max_norm must be >= 0, not %g", max_norm);
  if (sf__nn_gpu_here(loc))
    return sf__gpu_clip_grad_norm_read(ps, max_norm, loc);
  int64_t n = ps ? ps->len : 0, total = 0;
  sf_tensor **p = n ? ps->data : NULL;
  for (int64_t i = 0; i < n; i++)
    if (p[i] && p[i]->grad)
      total += p[i]->grad->numel;
  bool split = n > 1 && total >= SF__PAR_MIN;
  clip_job c = {p, sf__alloc_n((size_t)(n ? n : 1), sizeof(double)), 1.0f};
  if (split)
    sf__parallel_for(n, 1, clip_sums, &c);
  else
    clip_sums(&c, 0, n);
  double ss = 0;
  for (int64_t i = 0; i < n; i++)
    if (p[i] && p[i]->grad)
      ss += c.ss[i];
  free(c.ss);
  double norm = sqrt(ss), coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) { /* torch multiplies by min(coef, 1): 1 changes nothing */
    c.coef = (float)coef;
    if (split)
      sf__parallel_for(n, 1, clip_scale, &c);
    else
      clip_scale(&c, 0, n);
  }
  return norm;
}

/* ---------------------------------------------------------- std.nn */

sf_tensor *sf_std_nn_embedding_lookup(sf_tensor *weight, sf_array *ids, sf_array *shape,
                                      const sf_loc *loc) {
  return sf__t_embedding(weight, ids, shape, loc);
}
sf_tensor *sf_std_nn_layer_norm_apply(sf_tensor *x, sf_tensor *weight, sf_tensor *bias,
                                      double eps, const sf_loc *loc) {
  return sf__t_layer_norm(x, weight, bias, eps, loc);
}
sf_tensor *sf_std_nn_dropout(sf_tensor *x, double p, int64_t seed, bool training,
                             const sf_loc *loc) {
  return sf__t_dropout(x, p, seed, training, loc);
}
sf_tensor *sf_std_nn_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                               int64_t heads, bool causal, int64_t kv_heads, const sf_loc *loc) {
  return sf__t_attention_ex(q, k, v, mask, heads, causal, kv_heads, loc);
}
sf_tensor *sf_std_nn_dropout_rows(sf_tensor *x, double p, int64_t seed, sf_array *index,
                                  int64_t stream, bool training, const sf_loc *loc) {
  return sf__t_dropout_rows(x, p, seed, index, stream, training, loc);
}
sf_tensor *sf_std_nn_attention_dropout(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                                       int64_t heads, double p, int64_t seed, sf_array *index,
                                       int64_t stream, bool training, const sf_loc *loc) {
  return sf__t_attention_dropout(q, k, v, mask, heads, p, seed, index, stream, training, loc);
}
double sf_std_nn_clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc) {
  return sf__clip_grad_norm(ps, max_norm, loc);
}
sf_tensor *sf_std_nn_clip_grad_norm_tensor(sf_array *ps, double max_norm, const sf_loc *loc) {
  if (sf__nn_gpu_here(loc) && max_norm >= 0)
    return sf__gpu_clip_grad_norm(ps, max_norm, loc);
  return sf__t_full(0, NULL, (float)sf__clip_grad_norm(ps, max_norm, loc));
}
