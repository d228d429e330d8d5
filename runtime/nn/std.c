/*
 * std.c — the tensor operators generated code calls (sf_tensor_binop,
 * _scalar, _neg: sflow.h, ABI 4) and the C side of stdlib/nn.sflow's
 * @extern functions: making tensors (from data, zeros, ones, seeded
 * normal and uniform draws), param/grad/backward/no_grad, the ops by
 * name, the accessors, nn.linear's initialisation and the optimizer
 * steps.
 *
 * Key design choice: a seeded draw (`randn(shape, seed = 7)`) uses a PCG32
 * stream of its own made from the seed, the same on every run, thread and
 * node; an unseeded one takes one 64-bit key from the calling task's
 * random stream (core's, journaled on main) and draws from a stream made
 * from it, so a million-value randn journals one value, not a million,
 * and still differs from call to call as rand_f32 does.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn.h"

/* ------------------------------------------------- the ABI entries */

sf_tensor *sf_tensor_binop(int32_t op, sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  if (op == SF_TOP_MATMUL)
    return sf__t_matmul(a, b, loc);
  if (op < SF_TOP_ADD || op > SF_TOP_DIV)
    sf_runtime_error(loc, "internal error: tensor operator %d", (int)op);
  return sf__t_binary(op, a, b, loc);
}

sf_tensor *sf_tensor_scalar(int32_t op, sf_tensor *a, float s, bool scalar_left,
                            const sf_loc *loc) {
  return sf__t_scalar(op, a, s, scalar_left, loc);
}

sf_tensor *sf_tensor_neg(sf_tensor *a, const sf_loc *loc) { return sf__t_neg(a, loc); }

/* ------------------------------------------------------ random draws */

typedef struct {
  uint64_t state, inc;
} pcg32;

static uint32_t pcg_next(pcg32 *r) {
  uint64_t old = r->state;
  r->state = old * 6364136223846793005ULL + r->inc;
  uint32_t x = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  uint32_t rot = (uint32_t)(old >> 59u);
  return (x >> rot) | (x << ((-rot) & 31));
}

/* The PCG32 stream of a 64-bit key (pcg32_srandom_r(key, key)). */
static pcg32 stream_key(uint64_t key) {
  pcg32 r = {0, (key << 1u) | 1u};
  pcg_next(&r);
  r.state += key;
  pcg_next(&r);
  return r;
}

/* The stream of a seed (>= 0) or, for -1, of a key from the call's. */
static pcg32 stream_of(int64_t seed, const char *what, const sf_loc *loc) {
  if (seed < -1)
    sf_runtime_error(loc, "%s: seed must be -1 (the call's random stream) or >= 0, not %" PRId64,
                     what, seed);
  uint64_t key = seed == -1 ? (uint64_t)sf_rand_int(INT64_MIN, INT64_MAX, loc)
                            : sf__rng_mix((uint64_t)seed, 0x6e6e); /* "nn" */
  return stream_key(key);
}

/* [0, 1) in steps of 2^-24, exact in f32. */
static float unit(pcg32 *r) { return (float)(pcg_next(r) >> 8) * 0x1p-24f; }

void sf__uniform_key(float *d, int64_t n, uint64_t key) {
  pcg32 r = stream_key(key);
  for (int64_t i = 0; i < n; i++)
    d[i] = unit(&r);
}

static sf_tensor *new_of(sf_array *shape, const char *what, const sf_loc *loc) {
  int32_t nd;
  int64_t dims[SF__TMAX];
  sf__t_shape_from(shape, what, &nd, dims, loc);
  return sf__t_empty(nd, dims, loc);
}

sf_tensor *sf_std_nn_randn(sf_array *shape, int64_t seed, const sf_loc *loc) {
  sf_tensor *t = new_of(shape, "randn", loc);
  pcg32 r = stream_of(seed, "randn", loc);
  float *d = sf__t_data(t);
  for (int64_t i = 0; i < t->numel; i += 2) { /* Box-Muller: two values per pair of draws */
    double u1 = ((double)(pcg_next(&r) >> 8) + 1.0) * 0x1p-24, u2 = unit(&r);
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    d[i] = (float)(rad * cos(th));
    if (i + 1 < t->numel)
      d[i + 1] = (float)(rad * sin(th));
  }
  return sf__t_place(t, loc);
}

sf_tensor *sf_std_nn_uniform(sf_array *shape, float lo, float hi, int64_t seed,
                             const sf_loc *loc) {
  sf_tensor *t = new_of(shape, "uniform", loc);
  pcg32 r = stream_of(seed, "uniform", loc);
  float *d = sf__t_data(t);
  for (int64_t i = 0; i < t->numel; i++)
    d[i] = lo + (hi - lo) * unit(&r);
  return sf__t_place(t, loc);
}

/* ------------------------------------------------------- making them */

sf_tensor *sf_std_nn_tensor(sf_array *data, sf_array *shape, const sf_loc *loc) {
  sf_tensor *t = new_of(shape, "tensor", loc);
  int64_t n = data ? data->len : 0;
  if (n != t->numel) {
    char sb[SF__SHAPE_BUF];
    int64_t numel = t->numel;
    SF__SHP(t, sb);
    sf_release(t);
    sf_runtime_error(loc, "tensor: %" PRId64 " values do not fill shape %s (%" PRId64
                     " elements)", n, sb, numel);
  }
  if (n)
    memcpy(sf__t_data(t), data->data, (size_t)n * sizeof(float));
  return sf__t_place(t, loc);
}

sf_tensor *sf_std_nn_zeros(sf_array *shape, const sf_loc *loc) {
  int32_t nd;
  int64_t dims[SF__TMAX];
  sf__t_shape_from(shape, "zeros", &nd, dims, loc);
  if (sf__nn_gpu_here(loc))
    return sf__t_dzeros(nd, dims, loc);
  return sf__t_zeros(nd, dims, loc);
}

sf_tensor *sf_std_nn_ones(sf_array *shape, const sf_loc *loc) {
  sf_tensor *t = new_of(shape, "ones", loc);
  float *d = sf__t_data(t);
  for (int64_t i = 0; i < t->numel; i++)
    d[i] = 1.0f;
  return sf__t_place(t, loc);
}

/* A new leaf over t's values (a contiguous copy first when t is a
 * strided view: the optimizers update params as flat arrays). */
sf_tensor *sf_std_nn_param(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "param", loc);
  sf_tensor *c = sf__t_contig(t);
  sf_tensor *p = sf__t_view(c, c->ndim, c->shape, c->strides, c->offset);
  sf_release(c);
  p->req = true;
  return p;
}

/* ------------------------------------------------------------ autograd */

void sf_std_nn_backward(sf_tensor *loss, const sf_loc *loc) { sf__backward(loss, loc); }

sf_tensor *sf_std_nn_grad(sf_tensor *t, const sf_loc *loc) {
  return sf__t_grad(sf__t_arg(t, "grad", loc));
}

/* Inside a checkpointed function's forward (nn.checkpoint) recording
 * stays off whatever the function asks: its recompute records. */
void sf_std_nn_no_grad(bool on, const sf_loc *loc) { sf__no_grad = on || sf__nn_ckpt_depth > 0; }

void sf_std_nn_zero_grad(sf_array *ps, const sf_loc *loc) {
  for (int64_t i = 0; ps && i < ps->len; i++) {
    sf_tensor *p = ((sf_tensor **)ps->data)[i];
    if (p) {
      sf_release(p->grad);
      p->grad = NULL;
    }
  }
}

/* ----------------------------------------------------------- the ops */

sf_tensor *sf_std_nn_relu(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_RELU, t, loc); }
sf_tensor *sf_std_nn_gelu(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_GELU, t, loc); }
sf_tensor *sf_std_nn_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc) {
  return sf__t_matmul_nt(x, w, loc);
}
sf_tensor *sf_std_nn_gelu_tanh(sf_tensor *t, const sf_loc *loc) {
  return sf__t_unary(SF__U_GELU_TANH, t, loc);
}
sf_tensor *sf_std_nn_sigmoid(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_SIGMOID, t, loc); }
sf_tensor *sf_std_nn_silu(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_SILU, t, loc); }
sf_tensor *sf_std_nn_tanh(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_TANH, t, loc); }
sf_tensor *sf_std_nn_exp(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_EXP, t, loc); }
sf_tensor *sf_std_nn_log(sf_tensor *t, const sf_loc *loc) { return sf__t_unary(SF__U_LOG, t, loc); }

sf_tensor *sf_std_nn_softmax(sf_tensor *t, int64_t axis, const sf_loc *loc) {
  return sf__t_softmax(t, axis, false, loc);
}
sf_tensor *sf_std_nn_log_softmax(sf_tensor *t, int64_t axis, const sf_loc *loc) {
  return sf__t_softmax(t, axis, true, loc);
}
sf_tensor *sf_std_nn_sum_all(sf_tensor *t, const sf_loc *loc) {
  return sf__t_reduce(SF__R_SUM, t, SF__ALL_AXES, loc);
}
sf_tensor *sf_std_nn_sum_axis(sf_tensor *t, int64_t axis, const sf_loc *loc) {
  return sf__t_reduce(SF__R_SUM, t, axis, loc);
}
sf_tensor *sf_std_nn_mean_all(sf_tensor *t, const sf_loc *loc) {
  return sf__t_reduce(SF__R_MEAN, t, SF__ALL_AXES, loc);
}
sf_tensor *sf_std_nn_mean_axis(sf_tensor *t, int64_t axis, const sf_loc *loc) {
  return sf__t_reduce(SF__R_MEAN, t, axis, loc);
}
sf_tensor *sf_std_nn_max_all(sf_tensor *t, const sf_loc *loc) {
  return sf__t_reduce(SF__R_MAX, t, SF__ALL_AXES, loc);
}
sf_tensor *sf_std_nn_max_axis(sf_tensor *t, int64_t axis, const sf_loc *loc) {
  return sf__t_reduce(SF__R_MAX, t, axis, loc);
}
sf_array *sf_std_nn_argmax(sf_tensor *t, int64_t axis, const sf_loc *loc) {
  return sf__t_argmax(t, axis, loc);
}
sf_tensor *sf_std_nn_reshape(sf_tensor *t, sf_array *shape, const sf_loc *loc) {
  int32_t nd;
  int64_t dims[SF__TMAX];
  sf__t_shape_from(shape, "reshape", &nd, dims, loc);
  return sf__t_reshape(t, nd, dims, loc);
}
sf_tensor *sf_std_nn_transpose(sf_tensor *t, int64_t d0, int64_t d1, const sf_loc *loc) {
  return sf__t_transpose(t, d0, d1, loc);
}
sf_tensor *sf_std_nn_cross_entropy(sf_tensor *logits, sf_array *targets, int64_t ignore_index,
                                   float label_smoothing, const sf_loc *loc) {
  return sf__t_cross_entropy(logits, targets, ignore_index, label_smoothing, loc);
}
sf_tensor *sf_std_nn_mse(sf_tensor *a, sf_tensor *b, const sf_loc *loc) { return sf__t_mse(a, b, loc); }

/* --------------------------------------------------------- accessors */

sf_array *sf_std_nn_shape(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "shape", loc);
  sf_array *a = sf_array_new(&sf_type_i64, t->ndim, loc);
  memcpy(a->data, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return a;
}

float sf_std_nn_item(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "item", loc);
  if (t->numel != 1) {
    char sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "item: the tensor has %" PRId64 " elements (shape %s); item() needs "
                     "exactly one", t->numel, SF__SHP(t, sb));
  }
  return sf__t_data(t)[0];
}

sf_array *sf_std_nn_data(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "data", loc);
  sf_array *a = sf_array_new(&sf_type_f32, t->numel, loc);
  sf_tensor *c = sf__t_contig(t);
  if (t->numel)
    memcpy(a->data, sf__t_data(c), (size_t)t->numel * sizeof(float));
  sf_release(c);
  return a;
}

int64_t sf_std_nn_size(sf_tensor *t, int64_t d, const sf_loc *loc) {
  sf__t_arg(t, "size", loc);
  return t->shape[sf__t_axis("size", t, d, loc)];
}

int64_t sf_std_nn_ndim(sf_tensor *t, const sf_loc *loc) { return sf__t_arg(t, "ndim", loc)->ndim; }

/* ------------------------------------------------------ layers, steps */

void sf_std_nn_linear(void *out, const sf_type *out_type, int64_t in, int64_t outf, int64_t seed,
                      const sf_loc *loc) {
  if (in < 0 || outf < 0)
    sf_runtime_error(loc, "linear: sizes must not be negative (in %" PRId64 ", out %" PRId64 ")",
                     in, outf);
  sf_tensor **w = sf__field(out_type, out, "weight", SF_TENSOR, loc);
  sf_tensor **b = sf__field(out_type, out, "bias", SF_TENSOR, loc);
  float bound = in > 0 ? (float)(1.0 / sqrt((double)in)) : 0.0f;
  pcg32 r = stream_of(seed, "linear", loc);
  int64_t ws[2] = {outf, in}, bs[1] = {outf};
  sf_tensor *wt = sf__t_empty(2, ws, loc), *bt = sf__t_empty(1, bs, loc);
  float *wd = sf__t_data(wt), *bd = sf__t_data(bt);
  for (int64_t i = 0; i < wt->numel; i++)
    wd[i] = -bound + 2.0f * bound * unit(&r);
  for (int64_t i = 0; i < bt->numel; i++)
    bd[i] = -bound + 2.0f * bound * unit(&r);
  wt->req = bt->req = true;
  *w = sf__t_place(wt, loc);
  *b = sf__t_place(bt, loc);
}

void sf_std_nn_sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                        const sf_loc *loc) {
  sf__sgd_step(ps, bufs, lr, momentum, wd, loc);
}

void sf_std_nn_adamw_step(sf_array *ps, sf_array *m, sf_array *v, sf_array *steps, double lr,
                          double beta1, double beta2, double eps, double wd, const sf_loc *loc) {
  sf__adamw_step(ps, m, v, steps, lr, beta1, beta2, eps, wd, loc);
}
