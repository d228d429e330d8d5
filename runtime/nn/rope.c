/*
 * rope.c — rotary position embeddings, nn.rope(x, pos0, theta) (docs/nn.md,
 * "Rotary embeddings"): x (B, H, T, D), position pos0 + t for row t, each
 * pair (x[i], x[i + D/2]) rotated by the angle (pos0 + t) · theta^(-2i/D),
 * as Hugging Face's Llama applies it (rotate_half); its forward, its one
 * backward rule and its CPU kernel, the GPU's in gpu_layers.c.
 *
 * Key design choice: one kernel for both directions.  The rotation is
 * orthogonal, so the gradient is the rotation by the opposite angle: the
 * backward runs the forward's kernel with sign -1 on the upstream gradient,
 * and nothing is saved.  The angle is computed in f32 as transformers does
 * (inv_freq in f32, times the position, then cos and sin), so a model
 * written with nn.rope gives transformers' values.
 *
 * GGUF files of llama.cpp hold Wq and Wk with the rows of each head
 * permuted so that rotated pairs are adjacent; transformers un-permutes
 * them on loading.  nn.rope is transformers' convention: a model built on
 * it from a GGUF file un-permutes those rows first (std.llm's fast path,
 * llama.c, rotates adjacent pairs on the file's rows instead).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn.h"
#include "simd.h"

typedef struct {
  const float *x;
  float *y;
  int64_t T, D, pos0;
  float theta, sign;
} rope_ctx;

/* Rows [lo, hi) of (B·H·T, D): row r at position pos0 + r % T. */
static void rope_rows(void *vc, int64_t lo, int64_t hi) {
  const rope_ctx *c = vc;
  int64_t half = c->D / 2;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = c->x + r * c->D;
    float *y = c->y + r * c->D;
    float pos = (float)(c->pos0 + r % c->T);
    for (int64_t i = 0; i < half; i++) {
      float inv = 1.0f / powf(c->theta, (float)(2 * i) / (float)c->D);
      float a = pos * inv, co = cosf(a), si = c->sign * sinf(a);
      float x0 = x[i], x1 = x[i + half];
      y[i] = x0 * co - x1 * si;
      y[i + half] = x1 * co + x0 * si;
    }
  }
}

static sf_tensor *rope_apply(sf_tensor *x, int64_t pos0, double theta, float sign) {
  sf_tensor *xc = sf__t_contig(x), *y = sf__t_like(xc);
  int64_t D = x->shape[3], rows = D ? x->numel / D : 0;
  rope_ctx c = {sf__t_data(xc), sf__t_wdata(y), x->shape[2], D, pos0, (float)theta, sign};
  if (rows * D >= SF__PAR_MIN) {
    int64_t grain = SF__PAR_GRAIN / (D ? D : 1);
    sf__parallel_for(rows, grain > 0 ? grain : 1, rope_rows, &c);
  } else if (rows > 0) {
    rope_rows(&c, 0, rows);
  }
  sf_release(xc);
  return y;
}

static double theta_of(const sf__node *n) {
  double t;
  memcpy(&t, &n->i1, sizeof t);
  return t;
}

sf_tensor *sf__cpu_rope(sf_tensor *x, int64_t pos0, double theta, const sf_loc *loc) {
  (void)loc;
  return rope_apply(x, pos0, theta, 1.0f);
}

sf_tensor *sf__cpu_rope_bw(const sf__node *n, sf_tensor *g) {
  return rope_apply(g, n->i0, theta_of(n), -1.0f);
}

static void bw_rope(sf__node *n, sf_tensor *g) {
  sf__grad_add(n->in[0], sf__nn_dev_of(n, g)->rope_bw(n, g));
}

sf_tensor *sf__t_rope(sf_tensor *x, int64_t pos0, double theta, const sf_loc *loc) {
  char sx[SF__SHAPE_BUF];
  sf__t_arg(x, "rope", loc);
  if (x->ndim != 4 || x->shape[3] % 2)
    sf_runtime_error(loc, "rope: x %s must be (B, H, T, D) with D even", SF__SHP(x, sx));
  if (pos0 < 0)
    sf_runtime_error(loc, "rope: pos0 must be 0 or more, not %" PRId64, pos0);
  if (!(theta > 1))
    sf_runtime_error(loc, "rope: theta must be more than 1, not %g", theta);
  sf_tensor *out = sf__nn_dev_here(loc)->rope(x, pos0, theta, loc);
  sf__node *n = sf__record("rope", out, bw_rope, x, NULL);
  if (n) {
    n->i0 = pos0;
    memcpy(&n->i1, &theta, sizeof theta);
  }
  return out;
}

sf_tensor *sf_std_nn_rope(sf_tensor *x, int64_t pos0, double theta, const sf_loc *loc) {
  return sf__t_rope(x, pos0, theta, loc);
}
