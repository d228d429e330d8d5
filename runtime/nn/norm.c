/*
 * norm.c — RMSNorm, nn.rms_norm(x, weight, eps) (docs/nn.md, "RMSNorm"):
 * x (..., d) times rstd = 1/sqrt(mean(x²) + eps) over its last dimension,
 * times weight (d), as torch's F.rms_norm; its forward, its one backward
 * rule and its CPU kernels, the GPU's in gpu_layers.c.
 *
 * Key design choice: the op written through the device table only (the
 * worked example of HACKING.md, "Adding an op"): the forward keeps each
 * row's rstd (rows) for the backward, in the device's own tensor; the CPU
 * loops accumulate each row's sums in double and split rows over the
 * pool, the weight's gradient as fixed blocks of rows summed in block
 * order, so every thread count gives the same bits.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn.h"
#include "simd.h"

typedef struct {
  const float *x, *w, *g, *rstd;
  float *y, *st, *dx, *part; /* part: (blocks, d) partial sums of g x̂ */
  int64_t rows, d, per;
  double eps;
} rms_ctx;

static void rows_over(rms_ctx *c, int64_t n, void (*fn)(void *, int64_t, int64_t)) {
  if (n * c->d >= SF__PAR_MIN) {
    int64_t grain = SF__PAR_GRAIN / (c->d ? c->d : 1);
    sf__parallel_for(n, grain > 0 ? grain : 1, fn, c);
  } else if (n > 0) {
    fn(c, 0, n);
  }
}

static void rms_fwd_rows(void *vc, int64_t lo, int64_t hi) {
  const rms_ctx *c = vc;
  int64_t d = c->d;
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = c->x + r * d;
    double ss = 0;
    for (int64_t j = 0; j < d; j++)
      ss += (double)xr[j] * xr[j];
    float rstd = (float)(1.0 / sqrt(ss / (double)d + c->eps));
    c->st[r] = rstd;
    for (int64_t j = 0; j < d; j++)
      c->y[r * d + j] = (xr[j] * rstd) * c->w[j];
  }
}

/* dx = rstd (ĝ - x̂ mean(ĝ x̂)), x̂ = x rstd, ĝ = g w. */
static void rms_dx_rows(void *vc, int64_t lo, int64_t hi) {
  const rms_ctx *c = vc;
  int64_t d = c->d;
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = c->x + r * d, *gr = c->g + r * d;
    float rstd = c->rstd[r];
    double s = 0;
    for (int64_t j = 0; j < d; j++)
      s += (double)(gr[j] * c->w[j]) * (xr[j] * rstd);
    float m = (float)(s / (double)d);
    for (int64_t j = 0; j < d; j++) {
      float xh = xr[j] * rstd;
      c->dx[r * d + j] = rstd * (gr[j] * c->w[j] - xh * m);
    }
  }
}

/* Block b's partial dw: Σ g x̂ over its rows. */
static void rms_dw_blocks(void *vc, int64_t lo, int64_t hi) {
  const rms_ctx *c = vc;
  int64_t d = c->d;
  for (int64_t b = lo; b < hi; b++) {
    float *p = c->part + b * d;
    int64_t r1 = (b + 1) * c->per < c->rows ? (b + 1) * c->per : c->rows;
    for (int64_t r = b * c->per; r < r1; r++)
      for (int64_t j = 0; j < d; j++)
        p[j] += c->g[r * d + j] * (c->x[r * d + j] * c->rstd[r]);
  }
}

sf_tensor *sf__cpu_rms_norm(sf_tensor *x, sf_tensor *w, double eps, sf__keep *keep,
                            const sf_loc *loc) {
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0, one = rows ? rows : 1;
  sf_tensor *xc = sf__t_contig(x), *wc = sf__t_contig(w);
  sf_tensor *out = sf__t_like(xc), *st = sf__t_empty(1, &one, loc);
  rms_ctx c = {.x = sf__t_data(xc), .w = sf__t_data(wc), .y = sf__t_data(out),
               .st = sf__t_data(st), .rows = rows, .d = d, .eps = eps};
  rows_over(&c, rows, rms_fwd_rows);
  sf_release(xc);
  sf_release(wc);
  keep->saved = st;
  return out;
}

void sf__cpu_rms_norm_bw(const sf__node *n, sf_tensor *g, sf_tensor **grads) {
  sf_tensor *x = sf__t_contig(n->in[0]), *w = sf__t_contig(n->in[1]);
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0;
  sf_tensor *dx = sf__t_like(x), *dw = sf__t_zeros(1, &d, NULL);
  int64_t blocks = rows < 16 ? (rows ? rows : 1) : 16, ps[2] = {blocks, d};
  sf_tensor *part = sf__t_zeros(2, ps, NULL);
  rms_ctx c = {.x = sf__t_data(x), .w = sf__t_data(w), .g = sf__t_data(g),
               .rstd = sf__t_data(n->saved), .dx = sf__t_data(dx), .part = sf__t_data(part),
               .rows = rows, .d = d, .per = (rows + blocks - 1) / blocks};
  rows_over(&c, rows, rms_dx_rows);
  if (rows * d >= SF__PAR_MIN)
    sf__parallel_for(blocks, 1, rms_dw_blocks, &c);
  else
    rms_dw_blocks(&c, 0, blocks);
  float *dwd = sf__t_data(dw);
  for (int64_t b = 0; b < blocks; b++)
    for (int64_t j = 0; j < d; j++)
      dwd[j] += c.part[b * d + j];
  sf_release(part);
  sf_release(x);
  sf_release(w);
  grads[0] = dx;
  grads[1] = dw;
}

static void bw_rms_norm(sf__node *n, sf_tensor *g) {
  sf_tensor *d[2];
  sf__nn_dev_of(n, g)->rms_norm_bw(n, g, d);
  sf__grad_add(n->in[0], d[0]);
  sf__grad_add(n->in[1], d[1]);
}

sf_tensor *sf__t_rms_norm(sf_tensor *x, sf_tensor *weight, double eps, const sf_loc *loc) {
  char sx[SF__SHAPE_BUF], sw[SF__SHAPE_BUF];
  sf__t_arg(x, "rms_norm", loc);
  sf__t_arg(weight, "rms_norm", loc);
  if (x->ndim == 0)
    sf_runtime_error(loc, "rms_norm: the input must have a last dimension to normalise, not "
                     "shape []");
  int64_t d = x->shape[x->ndim - 1];
  if (weight->ndim != 1 || weight->shape[0] != d)
    sf_runtime_error(loc, "rms_norm: weight %s must be [%" PRId64 "], the last dimension of the "
                     "input %s", SF__SHP(weight, sw), d, SF__SHP(x, sx));
  if (!(eps > 0))
    sf_runtime_error(loc, "rms_norm: eps must be positive, not %g", eps);
  sf__keep keep = {0};
  sf_tensor *out = sf__nn_dev_here(loc)->rms_norm(x, weight, eps, &keep, loc);
  sf__node *n = sf__record("rms_norm", out, bw_rms_norm, x, weight);
  if (n)
    n->saved = keep.saved;
  else
    sf_release(keep.saved);
  return out;
}

sf_tensor *sf_std_nn_rms_norm(sf_tensor *x, sf_tensor *weight, double eps, const sf_loc *loc) {
  return sf__t_rms_norm(x, weight, eps, loc);
}
