/*
 * optim.c — the optimizers' steps (SGD with momentum, AdamW) and
 * zero_grad, in place on the params' storage.
 *
 * Key design choice: PyTorch's formulas operation for operation (its
 * single-tensor "for-loop" implementations), so a step here and a step in
 * PyTorch from the same state agree to rounding: SGD's weight decay is
 * added to the gradient and its momentum buffer starts as the first
 * gradient (b = μ b + g from zeros gives the same); AdamW decays the
 * weight first (p *= 1 - lr wd, decoupled), keeps m by lerp and v by
 * β2 v + (1 - β2) g², and divides by sqrt(v) / sqrt(1 - β2^t) + eps with
 * step size lr / (1 - β1^t).  Scalars are f64 like Python's floats; the
 * values f32.  The state lives in tensors (and the step count in an i64[])
 * that the sflow structs hold, so an actor checkpoints them with the model.
 */
#include <inttypes.h>
#include <math.h>

#include "nn.h"
#include "simd.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

static sf_tensor *elem(sf_array *a, int64_t i) { return ((sf_tensor **)a->data)[i]; }

static void check_state(const char *opt, sf_array *ps, sf_array *st, const char *what,
                        const sf_loc *loc) {
  int64_t np = ps ? ps->len : 0, ns = st ? st->len : 0;
  if (np != ns)
    sf_runtime_error(loc, "%s.step: %" PRId64 " params but %" PRId64 " %s tensors (the "
                     "optimizer was made for other params)", opt, np, ns, what);
  for (int64_t i = 0; i < np; i++) {
    sf_tensor *p = sf__t_arg(elem(ps, i), opt, loc), *s = sf__t_arg(elem(st, i), opt, loc);
    if (p->numel != s->numel || !sf__t_is_contig(p) || !sf__t_is_contig(s)) {
      char a[SF__SHAPE_BUF], b[SF__SHAPE_BUF];
      sf_runtime_error(loc, "%s.step: param %" PRId64 " of shape %s has %s state of shape %s "
                       "(both must be contiguous and of one size)", opt, i, SF__SHP(p, a), what,
                       SF__SHP(s, b));
    }
  }
}

/* One SGD update over a range of one param: d = g (+ wd w); with
 * momentum b = μ b + d and d = b; then w -= lr d.  Fused into a single
 * pass over p, grad and buffer (PyTorch's for-loop form makes three), in
 * vectors of eight with the same per-value operations as the scalar tail,
 * and split over the pool for the large params. */
typedef struct {
  float *w, *buf;
  const float *g;
  float lr, wd, mom;
} sgd_job;

static void sgd_chunk(void *ctx, int64_t lo, int64_t hi) {
  const sgd_job *j = ctx;
  float *restrict w = j->w, *restrict buf = j->buf;
  const float *restrict g = j->g;
  bool has_wd = j->wd != 0, has_mom = j->mom != 0;
  sf__f4 vlr = sf__splat4(j->lr), vwd = sf__splat4(j->wd), vmom = sf__splat4(j->mom);
  int64_t i = lo;
  for (; i + SF__V <= hi; i += SF__V) {
    sf__f4 d = sf__ld4(g + i), x = sf__ld4(w + i);
    if (has_wd)
      d += vwd * x;
    if (has_mom) {
      d = vmom * sf__ld4(buf + i) + d;
      sf__st4(buf + i, d);
    }
    sf__st4(w + i, x - vlr * d);
  }
  for (; i < hi; i++) {
    float d = g[i];
    if (has_wd)
      d += j->wd * w[i];
    if (has_mom) {
      buf[i] = j->mom * buf[i] + d;
      d = buf[i];
    }
    w[i] -= j->lr * d;
  }
}

void sf__sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                  const sf_loc *loc) {
  check_state("sgd", ps, bufs, "momentum", loc);
  if (sf__nn_gpu_here(loc))
    return sf__gpu_sgd_step(ps, bufs, lr, momentum, wd, loc);
  for (int64_t i = 0; ps && i < ps->len; i++) {
    sf_tensor *p = elem(ps, i);
    if (!p->grad)
      continue; /* no gradient reached it: torch skips it too */
    sgd_job j = {.w = sf__t_wdata(p), .buf = sf__t_wdata(elem(bufs, i)),
                 .g = sf__t_data(p->grad), .lr = (float)lr, .wd = (float)wd,
                 .mom = (float)momentum};
    sf__t_run_chunks(p->numel, sgd_chunk, &j);
  }
}

/* One AdamW update over a range of one param, PyTorch's operations in
 * PyTorch's order: w *= 1 - lr wd; m += (1 - β1)(g - m); v = β2 v +
 * (1 - β2) g g; w -= step_size m / (sqrt(v) / sqrt(bc2) + eps).  In vectors
 * of four with the scalar tail's per-value operations (the square root and
 * the divisions are IEEE's in both, so the lanes are bitwise the tail's),
 * and split over the pool for the large params: a MiniLM fine-tune steps
 * 22.7M values, one pass over four arrays that was 6.5% of a one-thread
 * step as a scalar loop and ran on one thread whatever --threads said. */
typedef struct {
  float *w, *m, *v;
  const float *g;
  float decay, w1, b2, w2, step_size, bc2_sqrt, eps;
} adamw_job;

static inline sf__f4 sqrt4(sf__f4 x) {
#if defined(__SSE__)
  return (sf__f4)_mm_sqrt_ps((__m128)x);
#else
  return (sf__f4){sqrtf(x[0]), sqrtf(x[1]), sqrtf(x[2]), sqrtf(x[3])};
#endif
}

static void adamw_chunk(void *ctx, int64_t lo, int64_t hi) {
  const adamw_job *j = ctx;
  float *restrict w = j->w, *restrict mm = j->m, *restrict vv = j->v;
  const float *restrict g = j->g;
  sf__f4 decay = sf__splat4(j->decay), w1 = sf__splat4(j->w1), b2 = sf__splat4(j->b2),
         w2 = sf__splat4(j->w2), step = sf__splat4(j->step_size),
         bc2 = sf__splat4(j->bc2_sqrt), eps = sf__splat4(j->eps);
  int64_t i = lo;
  for (; i + SF__V <= hi; i += SF__V) {
    sf__f4 gi = sf__ld4(g + i), wi = sf__ld4(w + i) * decay, mi = sf__ld4(mm + i);
    mi += w1 * (gi - mi);
    sf__f4 vi = b2 * sf__ld4(vv + i) + w2 * gi * gi;
    sf__f4 denom = sqrt4(vi) / bc2 + eps;
    sf__st4(w + i, wi - step * (mi / denom));
    sf__st4(mm + i, mi);
    sf__st4(vv + i, vi);
  }
  for (; i < hi; i++) {
    w[i] *= j->decay;
    mm[i] += j->w1 * (g[i] - mm[i]);
    vv[i] = j->b2 * vv[i] + j->w2 * g[i] * g[i];
    float denom = sqrtf(vv[i]) / j->bc2_sqrt + j->eps;
    w[i] -= j->step_size * (mm[i] / denom);
  }
}

void sf__adamw_step(sf_array *ps, sf_array *m, sf_array *v, sf_array *steps, double lr,
                    double beta1, double beta2, double eps, double wd, const sf_loc *loc) {
  check_state("adamw", ps, m, "first-moment", loc);
  check_state("adamw", ps, v, "second-moment", loc);
  if (!steps || steps->len != 1)
    sf_runtime_error(loc, "adamw.step: the step count must be an i64[] of one element");
  int64_t t = ++((int64_t *)steps->data)[0];
  double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
  adamw_job j = {.step_size = (float)(lr / bc1), .bc2_sqrt = (float)sqrt(bc2),
                 .decay = (float)(1.0 - lr * wd), .w1 = (float)(1.0 - beta1),
                 .b2 = (float)beta2, .w2 = (float)(1.0 - beta2), .eps = (float)eps};
  if (sf__nn_gpu_here(loc))
    return sf__gpu_adamw_step(ps, m, v, j.step_size, j.bc2_sqrt, j.decay, j.w1, j.b2, j.w2,
                              j.eps, loc);
  for (int64_t i = 0; ps && i < ps->len; i++) {
    sf_tensor *p = elem(ps, i);
    if (!p->grad)
      continue;
    j.w = sf__t_wdata(p);
    j.m = sf__t_wdata(elem(m, i));
    j.v = sf__t_wdata(elem(v, i));
    j.g = sf__t_data(p->grad);
    sf__t_run_chunks(p->numel, adamw_chunk, &j);
  }
}
