/*
 * test_rt_nn.c — the nn layer (runtime/nn/): every op's forward on small
 * cases checked by hand, every op's backward against central finite
 * differences, broadcasting, the error messages (shapes named), the tape
 * released after backward (live tensors and nodes counted over 10k
 * steps), printing and serialization through core's hooks, safetensors
 * (a round trip, the bytes of the format, a hand-made F16/BF16 file, the
 * strict errors), SGD/AdamW steps against PyTorch's formulas worked by
 * hand, the encoder layers (Embedding, LayerNorm, dropout, attention,
 * gradient clipping), indexing (rows, select, narrow, index_select,
 * gather, stack, cat), and f32 to f16/bf16 rounding (every half value,
 * nn.save's dtype, round_bf16).
 *
 * Gradient checks: the loss is sum(op(inputs) * W) for fixed random W, so
 * every output element's gradient counts; the forward runs in f32 (the
 * layer has no other path), the differences (L(x+h) - L(x-h)) / 2h are
 * taken in f64 with h = 1e-2, and analytic and numeric gradients must
 * agree within 5e-3 absolute plus 5e-3 relative.  Each check prints its
 * largest difference.
 */
#include <math.h>
#include <stddef.h>

#include "rt_test.h"

#include "nn.h"
#include "simd.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_nn", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"t.sflow", 3, 7};

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* ------------------------------------------------------------ helpers */

static sf_tensor *mk(int32_t nd, const int64_t *shape, const float *v) {
  sf_tensor *t = sf__t_empty(nd, shape, &LOC);
  if (v)
    memcpy(sf__t_data(t), v, (size_t)t->numel * sizeof(float));
  return t;
}

static uint64_t rng = 88172645463325252ULL;
static float frand(float lo, float hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 11) * 0x1p-53);
}

/* A random tensor, a param when asked; values kept away from 0 by `gap`
 * (relu's and log's kinks). */
static sf_tensor *rnd(int32_t nd, const int64_t *shape, float lo, float hi, bool param) {
  sf_tensor *t = mk(nd, shape, NULL);
  for (int64_t i = 0; i < t->numel; i++)
    sf__t_data(t)[i] = frand(lo, hi);
  t->req = param;
  return t;
}

static void check_vals(const char *what, sf_tensor *t, const float *want, int64_t n, float tol) {
  bool ok = t->numel == n;
  sf_tensor *c = sf__t_contig(t);
  for (int64_t i = 0; ok && i < n; i++)
    if (!(fabsf(sf__t_data(c)[i] - want[i]) <= tol)) {
      fprintf(stderr, "\n  %s[%ld]: got %.9g want %.9g\n", what, (long)i, sf__t_data(c)[i],
              want[i]);
      ok = false;
    }
  if (t->numel != n)
    fprintf(stderr, "\n  %s: %ld values, want %ld\n", what, (long)t->numel, (long)n);
  sf_release(c);
  CU_ASSERT(ok);
}

static void check_shape(sf_tensor *t, int32_t nd, const int64_t *shape) {
  char a[SF__SHAPE_BUF], b[SF__SHAPE_BUF];
  CHECK_STR(SF__SHP(t, a), sf__shape_str(nd, shape, b));
}

/* ----------------------------------------------------- finite differences */

typedef sf_tensor *(*fwd_fn)(sf_tensor **in, void *ctx);

static sf_tensor *weighted_loss(fwd_fn f, sf_tensor **in, void *ctx, sf_tensor *w) {
  sf_tensor *y = f(in, ctx);
  sf_tensor *yw = sf__t_binary(SF_TOP_MUL, y, w, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, yw, SF__ALL_AXES, &LOC);
  sf_release(y);
  sf_release(yw);
  return l;
}

static void gradcheck(const char *name, fwd_fn f, void *ctx, int nin, sf_tensor **in) {
  sf_tensor *y0 = f(in, ctx);
  sf_tensor *w = rnd(y0->ndim, y0->shape, -1.0f, 1.0f, false);
  sf_release(y0);
  for (int i = 0; i < nin; i++) {
    sf_release(in[i]->grad);
    in[i]->grad = NULL;
  }
  sf_tensor *loss = weighted_loss(f, in, ctx, w);
  sf__backward(loss, &LOC);
  sf_release(loss);
  double worst = 0;
  bool ok = true;
  const double h = 1e-2;
  sf__no_grad = true;
  for (int i = 0; i < nin; i++) {
    if (!in[i]->req)
      continue;
    float *x = sf__t_data(in[i]);
    for (int64_t j = 0; j < in[i]->numel; j++) {
      float keep = x[j];
      x[j] = (float)(keep + h);
      sf_tensor *lp = weighted_loss(f, in, ctx, w);
      x[j] = (float)(keep - h);
      sf_tensor *lm = weighted_loss(f, in, ctx, w);
      x[j] = keep;
      double num = ((double)sf__t_data(lp)[0] - (double)sf__t_data(lm)[0]) / (2 * h);
      double ana = in[i]->grad ? sf__t_data(in[i]->grad)[j] : 0.0;
      double d = fabs(num - ana);
      worst = d > worst ? d : worst;
      if (d > 5e-3 + 5e-3 * fabs(num)) {
        if (ok)
          fprintf(stderr, "\n  %s: input %d [%ld]: analytic %.6g numeric %.6g\n", name, i,
                  (long)j, ana, num);
        ok = false;
      }
      sf_release(lp);
      sf_release(lm);
    }
  }
  sf__no_grad = false;
  printf("\n    gradcheck %-28s max |analytic - numeric| = %.2e ", name, worst);
  sf_release(w);
  CU_ASSERT(ok);
}

/* ------------------------------------------------------- forward cases */

static void test_broadcast_forward(void) {
  sf_tensor *a = mk(2, SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
  sf_tensor *b = mk(1, SHAPE(3), (float[]){10, 20, 30});
  sf_tensor *c = sf__t_binary(SF_TOP_ADD, a, b, &LOC);
  check_shape(c, 2, SHAPE(2, 3));
  check_vals("a+b", c, (float[]){11, 22, 33, 14, 25, 36}, 6, 0);
  sf_tensor *col = mk(2, SHAPE(2, 1), (float[]){2, 3});
  sf_tensor *row = mk(2, SHAPE(1, 3), (float[]){1, 2, 4});
  sf_tensor *p = sf__t_binary(SF_TOP_MUL, col, row, &LOC); /* an outer product */
  check_vals("col*row", p, (float[]){2, 4, 8, 3, 6, 12}, 6, 0);
  sf_tensor *d = sf__t_binary(SF_TOP_DIV, a, col, &LOC);
  check_vals("a/col", d, (float[]){0.5f, 1, 1.5f, 4.0f / 3, 5.0f / 3, 2}, 6, 1e-6f);
  sf_tensor *s = sf__t_binary(SF_TOP_SUB, b, a, &LOC);
  check_vals("b-a", s, (float[]){9, 18, 27, 6, 15, 24}, 6, 0);
  /* A transposed (strided) operand. */
  sf_tensor *at = sf__t_transpose(a, 0, 1, &LOC);
  sf_tensor *e = sf__t_binary(SF_TOP_ADD, at, at, &LOC);
  check_vals("aT+aT", e, (float[]){2, 8, 4, 10, 6, 12}, 6, 0);
  /* With scalars on either side, and negation. */
  sf_tensor *s1 = sf__t_scalar(SF_TOP_SUB, a, 1.0f, true, &LOC);
  check_vals("1-a", s1, (float[]){0, -1, -2, -3, -4, -5}, 6, 0);
  sf_tensor *s2 = sf__t_scalar(SF_TOP_DIV, a, 2.0f, false, &LOC);
  check_vals("a/2", s2, (float[]){0.5f, 1, 1.5f, 2, 2.5f, 3}, 6, 0);
  sf_tensor *s3 = sf__t_scalar(SF_TOP_DIV, a, 6.0f, true, &LOC);
  check_vals("6/a", s3, (float[]){6, 3, 2, 1.5f, 1.2f, 1}, 6, 1e-6f);
  sf_tensor *n = sf__t_neg(b, &LOC);
  check_vals("-b", n, (float[]){-10, -20, -30}, 3, 0);
  /* A large one goes over the pool: same values. */
  sf_tensor *big = rnd(2, SHAPE(512, 300), -1, 1, false);
  sf_tensor *bias = rnd(1, SHAPE(300), -1, 1, false);
  sf_tensor *sum = sf__t_binary(SF_TOP_ADD, big, bias, &LOC);
  bool same = true;
  for (int64_t i = 0; i < big->numel; i++)
    same &= sf__t_data(sum)[i] == sf__t_data(big)[i] + sf__t_data(bias)[i % 300];
  CU_ASSERT(same);
  sf_tensor *all[] = {a, b, c, col, row, p, d, s, at, e, s1, s2, s3, n, big, bias, sum};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

static void test_matmul_forward(void) {
  sf_tensor *a = mk(2, SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
  sf_tensor *b = mk(2, SHAPE(3, 2), (float[]){7, 8, 9, 10, 11, 12});
  sf_tensor *c = sf__t_matmul(a, b, &LOC);
  check_shape(c, 2, SHAPE(2, 2));
  check_vals("a@b", c, (float[]){58, 64, 139, 154}, 4, 0);
  sf_tensor *v = mk(1, SHAPE(3), (float[]){1, 0, -1});
  sf_tensor *dot = sf__t_matmul(v, v, &LOC);
  check_shape(dot, 0, NULL);
  check_vals("v@v", dot, (float[]){2}, 1, 0);
  sf_tensor *av = sf__t_matmul(a, v, &LOC);
  check_shape(av, 1, SHAPE(2));
  check_vals("a@v", av, (float[]){-2, -2}, 2, 0);
  sf_tensor *w = mk(1, SHAPE(2), (float[]){1, 1});
  sf_tensor *wa = sf__t_matmul(w, a, &LOC);
  check_vals("w@a", wa, (float[]){5, 7, 9}, 3, 0);
  /* A transposed view goes to sgemm without a copy: aᵀ·a. */
  sf_tensor *at = sf__t_transpose(a, 0, 1, &LOC);
  sf_tensor *ata = sf__t_matmul(at, a, &LOC);
  check_vals("aT@a", ata, (float[]){17, 22, 27, 22, 29, 36, 27, 36, 45}, 9, 0);
  /* Batched with broadcasting: (2, 1, 2, 3) @ (3, 3, 2) -> (2, 3, 2, 2). */
  sf_tensor *x = rnd(4, SHAPE(2, 1, 2, 3), -1, 1, false);
  sf_tensor *y = rnd(3, SHAPE(3, 3, 2), -1, 1, false);
  sf_tensor *z = sf__t_matmul(x, y, &LOC);
  check_shape(z, 4, SHAPE(2, 3, 2, 2));
  float *xd = sf__t_data(x), *yd = sf__t_data(y), *zd = sf__t_data(z);
  bool ok = true;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int r = 0; r < 2; r++)
        for (int q = 0; q < 2; q++) {
          double s = 0;
          for (int k = 0; k < 3; k++)
            s += xd[i * 6 + r * 3 + k] * yd[j * 6 + k * 2 + q];
          ok &= fabs(zd[((i * 3 + j) * 2 + r) * 2 + q] - s) < 1e-5;
        }
  CU_ASSERT(ok);
  /* A stack times a matrix folds into one product: (2, 2, 3) @ (3, 2). */
  sf_tensor *st = sf__t_reshape(a, 3, SHAPE(2, 1, 3), &LOC);
  sf_tensor *sb = sf__t_matmul(st, b, &LOC);
  check_shape(sb, 3, SHAPE(2, 1, 2));
  check_vals("stack@b", sb, (float[]){58, 64, 139, 154}, 4, 0);
  sf_tensor *all[] = {a, b, c, v, dot, av, w, wa, at, ata, x, y, z, st, sb};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

static void test_reduce_forward(void) {
  sf_tensor *a = mk(2, SHAPE(2, 3), (float[]){1, 5, 3, 4, 2, 6});
  sf_tensor *s0 = sf__t_reduce(SF__R_SUM, a, 0, &LOC);
  check_vals("sum0", s0, (float[]){5, 7, 9}, 3, 0);
  sf_tensor *s1 = sf__t_reduce(SF__R_SUM, a, -1, &LOC);
  check_vals("sum-1", s1, (float[]){9, 12}, 2, 0);
  sf_tensor *sa = sf__t_reduce(SF__R_SUM, a, SF__ALL_AXES, &LOC);
  check_shape(sa, 0, NULL);
  check_vals("sum", sa, (float[]){21}, 1, 0);
  sf_tensor *m1 = sf__t_reduce(SF__R_MEAN, a, 1, &LOC);
  check_vals("mean1", m1, (float[]){3, 4}, 2, 0);
  sf_tensor *ma = sf__t_reduce(SF__R_MEAN, a, SF__ALL_AXES, &LOC);
  check_vals("mean", ma, (float[]){3.5f}, 1, 0);
  sf_tensor *x0 = sf__t_reduce(SF__R_MAX, a, 0, &LOC);
  check_vals("max0", x0, (float[]){4, 5, 6}, 3, 0);
  sf_tensor *x1 = sf__t_reduce(SF__R_MAX, a, 1, &LOC);
  check_vals("max1", x1, (float[]){5, 6}, 2, 0);
  sf_array *am = sf__t_argmax(a, 1, &LOC);
  CHECK_INT(am->len, 2);
  CHECK_INT(((int64_t *)am->data)[0], 1);
  CHECK_INT(((int64_t *)am->data)[1], 2);
  sf_array *am0 = sf__t_argmax(a, 0, &LOC);
  CHECK_INT(((int64_t *)am0->data)[0], 1);
  CHECK_INT(((int64_t *)am0->data)[1], 0);
  CHECK_INT(((int64_t *)am0->data)[2], 1);
  sf_tensor *all[] = {a, s0, s1, sa, m1, ma, x0, x1};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(am);
  sf_release(am0);
}

static void test_activations_forward(void) {
  sf_tensor *x = mk(1, SHAPE(4), (float[]){-1, 0, 0.5f, 1});
  struct {
    int32_t kind;
    float want[4];
  } cases[] = {
      {SF__U_RELU, {0, 0, 0.5f, 1}},
      {SF__U_GELU, {-0.158655254f, 0, 0.345731384f, 0.841344746f}},
      {SF__U_SIGMOID, {0.268941421f, 0.5f, 0.622459331f, 0.731058579f}},
      {SF__U_TANH, {-0.761594156f, 0, 0.462117157f, 0.761594156f}},
      {SF__U_EXP, {0.367879441f, 1, 1.648721271f, 2.718281828f}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sf_tensor *y = sf__t_unary(cases[i].kind, x, &LOC);
    check_vals("activation", y, cases[i].want, 4, 1e-6f);
    sf_release(y);
  }
  sf_tensor *p = mk(1, SHAPE(3), (float[]){1, 2.718281828f, 0.5f});
  sf_tensor *l = sf__t_unary(SF__U_LOG, p, &LOC);
  check_vals("log", l, (float[]){0, 1, -0.693147181f}, 3, 1e-6f);
  sf_tensor *r = mk(2, SHAPE(2, 3), (float[]){1, 2, 3, 1000, 1000, 1000});
  sf_tensor *sm = sf__t_softmax(r, 1, false, &LOC);
  check_vals("softmax", sm, (float[]){0.0900305732f, 0.244728471f, 0.665240956f, 1.0f / 3,
                                      1.0f / 3, 1.0f / 3}, 6, 1e-6f);
  sf_tensor *ls = sf__t_softmax(r, 1, true, &LOC); /* no overflow at 1000 */
  check_vals("log_softmax", ls, (float[]){-2.40760596f, -1.40760596f, -0.40760596f,
                                          -1.09861229f, -1.09861229f, -1.09861229f}, 6, 1e-5f);
  sf_tensor *s0 = sf__t_softmax(r, 0, false, &LOC);
  check_vals("softmax0", s0, (float[]){0, 0, 0, 1, 1, 1}, 6, 1e-6f);
  sf_tensor *all[] = {x, p, l, r, sm, ls, s0};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

static sf_array *i64s(int64_t n, const int64_t *v) {
  sf_array *a = sf_array_new(&sf_type_i64, n, &LOC);
  memcpy(a->data, v, (size_t)n * 8);
  return a;
}

static void test_losses_forward(void) {
  sf_tensor *x = mk(2, SHAPE(2, 3), (float[]){1, 2, 3, 1, 1, 1});
  sf_array *t = i64s(2, (int64_t[]){2, 0});
  /* row 0: logsumexp 3.40760596 - 3; row 1: log 3. */
  sf_tensor *ce = sf__t_cross_entropy(x, t, -100, 0.0f, &LOC);
  check_shape(ce, 0, NULL);
  check_vals("ce", ce, (float[]){0.753109133f}, 1, 1e-6f);
  /* Smoothing 0.1: row 0 0.9 * 0.40760596 + 0.1 * (3.40760596 - 2). */
  sf_tensor *cs = sf__t_cross_entropy(x, t, -100, 0.1f, &LOC);
  check_vals("ce smoothed", cs, (float[]){0.803109133f}, 1, 1e-6f);
  /* Row 1 ignored: the mean is over row 0 alone. */
  sf_tensor *ci = sf__t_cross_entropy(x, t, 0, 0.0f, &LOC);
  check_vals("ce ignore", ci, (float[]){0.40760596f}, 1, 1e-6f);
  sf_tensor *y = mk(2, SHAPE(2, 3), (float[]){0, 2, 3, 1, 3, -1});
  sf_tensor *ms = sf__t_mse(x, y, &LOC);
  check_vals("mse", ms, (float[]){(1 + 0 + 0 + 0 + 4 + 4) / 6.0f}, 1, 1e-6f);
  sf_tensor *all[] = {x, ce, cs, ci, y, ms};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(t);
}

static void test_views(void) {
  sf_tensor *a = mk(2, SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
  sf_tensor *r = sf__t_reshape(a, 2, SHAPE(3, -1), &LOC);
  check_shape(r, 2, SHAPE(3, 2));
  CU_ASSERT(r->st == a->st); /* a view */
  sf_tensor *t = sf__t_transpose(a, 0, 1, &LOC);
  check_shape(t, 2, SHAPE(3, 2));
  CU_ASSERT(t->st == a->st && !sf__t_is_contig(t));
  check_vals("transpose", t, (float[]){1, 4, 2, 5, 3, 6}, 6, 0);
  sf_tensor *rt = sf__t_reshape(t, 1, SHAPE(6), &LOC); /* strided: copied */
  CU_ASSERT(rt->st != a->st);
  check_vals("reshape(transpose)", rt, (float[]){1, 4, 2, 5, 3, 6}, 6, 0);
  sf_array *d = sf_std_nn_data(t, &LOC);
  CU_ASSERT(d->len == 6 && ((float *)d->data)[1] == 4);
  CHECK_INT(sf_std_nn_size(a, -1, &LOC), 3);
  CHECK_INT(sf_std_nn_ndim(a, &LOC), 2);
  sf_array *sh = sf_std_nn_shape(t, &LOC);
  CU_ASSERT(sh->len == 2 && ((int64_t *)sh->data)[0] == 3);
  sf_tensor *all[] = {a, r, t, rt};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(d);
  sf_release(sh);
}

/* ------------------------------------------------------ backward cases */

static sf_tensor *f_binary(sf_tensor **in, void *ctx) {
  return sf__t_binary(*(int32_t *)ctx, in[0], in[1], &LOC);
}
typedef struct {
  int32_t op;
  bool left;
  float s;
} scalar_ctx;
static sf_tensor *f_scalar(sf_tensor **in, void *ctx) {
  scalar_ctx *c = ctx;
  return sf__t_scalar(c->op, in[0], c->s, c->left, &LOC);
}
static sf_tensor *f_neg(sf_tensor **in, void *ctx) { return sf__t_neg(in[0], &LOC); }
static sf_tensor *f_matmul(sf_tensor **in, void *ctx) { return sf__t_matmul(in[0], in[1], &LOC); }
/* Linear: x @ wᵀ + b, the transposed weight passed to sgemm as it is. */
static sf_tensor *f_linear(sf_tensor **in, void *ctx) {
  sf_tensor *wt = sf__t_transpose(in[1], 0, 1, &LOC);
  sf_tensor *h = sf__t_matmul(in[0], wt, &LOC);
  sf_tensor *y = sf__t_binary(SF_TOP_ADD, h, in[2], &LOC);
  sf_release(wt);
  sf_release(h);
  return y;
}
static sf_tensor *f_unary(sf_tensor **in, void *ctx) {
  return sf__t_unary(*(int32_t *)ctx, in[0], &LOC);
}
typedef struct {
  int32_t kind;
  int64_t axis;
} axis_ctx;
static sf_tensor *f_reduce(sf_tensor **in, void *ctx) {
  axis_ctx *c = ctx;
  return sf__t_reduce(c->kind, in[0], c->axis, &LOC);
}
static sf_tensor *f_softmax(sf_tensor **in, void *ctx) {
  axis_ctx *c = ctx;
  return sf__t_softmax(in[0], c->axis, c->kind != 0, &LOC);
}
typedef struct {
  sf_array *targets;
  int64_t ignore;
  float smooth;
} ce_ctx;
static sf_tensor *f_ce(sf_tensor **in, void *ctx) {
  ce_ctx *c = ctx;
  return sf__t_cross_entropy(in[0], c->targets, c->ignore, c->smooth, &LOC);
}
static sf_tensor *f_mse(sf_tensor **in, void *ctx) { return sf__t_mse(in[0], in[1], &LOC); }
static sf_tensor *f_views(sf_tensor **in, void *ctx) {
  sf_tensor *t = sf__t_transpose(in[0], 0, 2, &LOC);          /* (4, 3, 2) */
  sf_tensor *r = sf__t_reshape(t, 2, SHAPE(6, -1), &LOC);      /* copied: (6, 4) */
  sf_tensor *y = sf__t_binary(SF_TOP_MUL, r, r, &LOC);
  sf_release(t);
  sf_release(r);
  return y;
}

static void release_all(sf_tensor **in, int n) {
  for (int i = 0; i < n; i++)
    sf_release(in[i]);
}

static void test_grad_binary(void) {
  static const char *names[] = {"", "add", "sub", "mul", "div"};
  /* Same shape, a row broadcast, and both sides stretched. */
  for (int32_t op = SF_TOP_ADD; op <= SF_TOP_DIV; op++) {
    sf_tensor *in[2] = {rnd(2, SHAPE(2, 3), 0.5f, 2, true), rnd(2, SHAPE(2, 3), 0.5f, 2, true)};
    char label[64];
    snprintf(label, sizeof label, "%s", names[op]);
    gradcheck(label, f_binary, &op, 2, in);
    release_all(in, 2);
    sf_tensor *bc[2] = {rnd(3, SHAPE(2, 1, 3), 0.5f, 2, true), rnd(2, SHAPE(4, 1), 0.5f, 2, true)};
    snprintf(label, sizeof label, "%s broadcast", names[op]);
    gradcheck(label, f_binary, &op, 2, bc);
    release_all(bc, 2);
  }
}

static void test_grad_scalar(void) {
  for (int32_t op = SF_TOP_ADD; op <= SF_TOP_DIV; op++)
    for (int left = 0; left < 2; left++) {
      scalar_ctx c = {op, left, 1.7f};
      sf_tensor *in[1] = {rnd(2, SHAPE(3, 2), 0.5f, 2, true)};
      char label[64];
      snprintf(label, sizeof label, "scalar op %d%s", (int)op, left ? " (left)" : "");
      gradcheck(label, f_scalar, &c, 1, in);
      release_all(in, 1);
    }
  sf_tensor *in[1] = {rnd(1, SHAPE(5), -1, 1, true)};
  gradcheck("neg", f_neg, NULL, 1, in);
  release_all(in, 1);
}

static void test_grad_matmul(void) {
  struct {
    const char *name;
    int32_t na, nb;
    int64_t sa[4], sb[4];
  } cases[] = {
      {"matmul 2-D", 2, 2, {3, 4}, {4, 2}},
      {"matmul dot", 1, 1, {4}, {4}},
      {"matmul vec@mat", 1, 2, {3}, {3, 2}},
      {"matmul mat@vec", 2, 1, {2, 3}, {3}},
      {"matmul batched", 3, 3, {2, 2, 3}, {2, 3, 2}},
      {"matmul broadcast", 4, 3, {2, 1, 2, 3}, {3, 3, 2}},
      {"matmul stack@mat", 3, 2, {2, 3, 4}, {4, 2}},
      {"matmul mat@stack", 2, 3, {2, 3}, {2, 3, 2}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sf_tensor *in[2] = {rnd(cases[i].na, cases[i].sa, -1, 1, true),
                        rnd(cases[i].nb, cases[i].sb, -1, 1, true)};
    gradcheck(cases[i].name, f_matmul, NULL, 2, in);
    release_all(in, 2);
  }
  sf_tensor *in[3] = {rnd(3, SHAPE(2, 3, 4), -1, 1, true), rnd(2, SHAPE(5, 4), -1, 1, true),
                      rnd(1, SHAPE(5), -1, 1, true)};
  gradcheck("linear x@wT+b", f_linear, NULL, 3, in);
  release_all(in, 3);
}

static void test_grad_unary(void) {
  static const char *names[] = {"relu", "gelu", "sigmoid", "tanh", "exp", "log"};
  for (int32_t k = SF__U_RELU; k <= SF__U_LOG; k++) {
    sf_tensor *in[1] = {rnd(2, SHAPE(3, 4), 0.1f, 2, true)};
    if (k != SF__U_LOG) /* both signs, away from relu's kink */
      for (int64_t j = 0; j < in[0]->numel; j += 2)
        sf__t_data(in[0])[j] = -sf__t_data(in[0])[j];
    gradcheck(names[k], f_unary, &k, 1, in);
    release_all(in, 1);
  }
}

static void test_grad_reduce(void) {
  static const char *names[] = {"sum", "mean", "max"};
  for (int32_t k = SF__R_SUM; k <= SF__R_MAX; k++) {
    int64_t axes[] = {0, 1, -1, SF__ALL_AXES};
    for (size_t a = 0; a < 4; a++) {
      axis_ctx c = {k, axes[a]};
      sf_tensor *in[1] = {rnd(3, SHAPE(3, 4, 2), -2, 2, true)};
      char label[64];
      snprintf(label, sizeof label, "%s axis %s", names[k],
               axes[a] == SF__ALL_AXES ? "all" : axes[a] == 0 ? "0" : axes[a] == 1 ? "1" : "-1");
      gradcheck(label, f_reduce, &c, 1, in);
      release_all(in, 1);
    }
  }
  for (int log = 0; log < 2; log++)
    for (int64_t axis = 0; axis < 2; axis++) {
      axis_ctx c = {log, axis};
      sf_tensor *in[1] = {rnd(2, SHAPE(3, 4), -2, 2, true)};
      char label[64];
      snprintf(label, sizeof label, "%s axis %d", log ? "log_softmax" : "softmax", (int)axis);
      gradcheck(label, f_softmax, &c, 1, in);
      release_all(in, 1);
    }
}

static void test_grad_losses(void) {
  sf_array *t = i64s(4, (int64_t[]){2, 0, 4, 1});
  ce_ctx cases[] = {{t, -100, 0.0f}, {t, -100, 0.2f}, {t, 4, 0.1f}};
  const char *names[] = {"cross_entropy", "cross_entropy smoothed", "cross_entropy ignore"};
  for (size_t i = 0; i < 3; i++) {
    sf_tensor *in[1] = {rnd(2, SHAPE(4, 5), -2, 2, true)};
    gradcheck(names[i], f_ce, &cases[i], 1, in);
    release_all(in, 1);
  }
  sf_release(t);
  sf_tensor *in[2] = {rnd(2, SHAPE(3, 2), -1, 1, true), rnd(2, SHAPE(3, 2), -1, 1, true)};
  gradcheck("mse", f_mse, NULL, 2, in);
  release_all(in, 2);
  sf_tensor *v[1] = {rnd(3, SHAPE(2, 3, 4), -1, 1, true)};
  gradcheck("transpose+reshape", f_views, NULL, 1, v);
  release_all(v, 1);
}

/* A gradient reaching one param by two paths adds up, and accumulates
 * over backward calls until zero_grad. */
static void test_grad_accumulates(void) {
  sf_tensor *w = mk(1, SHAPE(2), (float[]){1, 2});
  w->req = true;
  for (int step = 1; step <= 2; step++) {
    sf_tensor *a = sf__t_binary(SF_TOP_MUL, w, w, &LOC); /* w² */
    sf_tensor *b = sf__t_binary(SF_TOP_ADD, a, w, &LOC); /* + w */
    sf_tensor *l = sf__t_reduce(SF__R_SUM, b, SF__ALL_AXES, &LOC);
    sf__backward(l, &LOC);
    /* d/dw (w² + w) = 2w + 1 = [3, 5], per step */
    check_vals("accumulated", w->grad, (float[]){3.0f * step, 5.0f * step}, 2, 0);
    sf_release(a);
    sf_release(b);
    sf_release(l);
  }
  sf_array *ps = sf_array_new(&sf__type_tensor, 1, &LOC);
  ((sf_tensor **)ps->data)[0] = w;
  sf_retain(w);
  sf_std_nn_zero_grad(ps, &LOC);
  CU_ASSERT(w->grad == NULL);
  sf_tensor *g = sf_std_nn_grad(w, &LOC); /* zeros, and kept */
  check_vals("after zero_grad", g, (float[]){0, 0}, 2, 0);
  CU_ASSERT(w->grad == g);
  sf_release(g);
  sf_release(ps);
  sf_release(w);
}

/* --------------------------------------------------------------- errors */

static void test_errors(void) {
  sf_tensor *a = mk(2, SHAPE(2, 3), NULL), *b = mk(2, SHAPE(4, 4), NULL), *c = mk(1, SHAPE(4), NULL);
  EXPECT_ERROR(sf_tensor_binop(SF_TOP_MATMUL, a, b, &LOC),
               "t.sflow:3:7: runtime error: matmul: shapes [2, 3] and [4, 4] do not fit (3 != 4)");
  EXPECT_ERROR(sf_tensor_binop(SF_TOP_ADD, a, c, &LOC),
               "t.sflow:3:7: runtime error: add: shapes [2, 3] and [4] do not broadcast");
  sf_tensor *x = mk(3, SHAPE(2, 2, 3), NULL), *y = mk(3, SHAPE(3, 3, 2), NULL);
  EXPECT_ERROR(sf_tensor_binop(SF_TOP_MATMUL, x, y, &LOC),
               "t.sflow:3:7: runtime error: matmul: shapes [2, 2, 3] and [3, 3, 2] do not "
               "broadcast (batch dimensions)");
  EXPECT_ERROR(sf__t_reduce(SF__R_SUM, a, 2, &LOC),
               "t.sflow:3:7: runtime error: sum: axis 2 is out of range for a tensor of shape [2, 3]");
  EXPECT_ERROR(sf__t_reshape(a, 2, SHAPE(4, 2), &LOC),
               "t.sflow:3:7: runtime error: reshape: a tensor of shape [2, 3] (6 values) cannot "
               "be viewed as [4, 2]");
  EXPECT_ERROR(sf_std_nn_item(a, &LOC),
               "t.sflow:3:7: runtime error: item: the tensor has 6 elements (shape [2, 3]); "
               "item() needs exactly one");
  sf_array *d = sf_array_new(&sf_type_f32, 5, &LOC), *sh = i64s(2, (int64_t[]){2, 3});
  EXPECT_ERROR(sf_std_nn_tensor(d, sh, &LOC),
               "t.sflow:3:7: runtime error: tensor: 5 values do not fill shape [2, 3] (6 elements)");
  sf_array *t3 = i64s(3, (int64_t[]){0, 1, 7});
  sf_tensor *lg = mk(2, SHAPE(3, 5), NULL);
  EXPECT_ERROR(sf__t_cross_entropy(lg, t3, -100, 0, &LOC),
               "t.sflow:3:7: runtime error: cross_entropy: target 7 (row 2) is out of range for "
               "5 classes");
  EXPECT_ERROR(sf__t_cross_entropy(a, t3, -100, 0, &LOC),
               "t.sflow:3:7: runtime error: cross_entropy: 3 targets for 2 rows (logits shape [2, 3])");
  /* backward without a path to a param, of a non-scalar, and twice. */
  sf_tensor *s = sf__t_reduce(SF__R_SUM, a, SF__ALL_AXES, &LOC);
  EXPECT_ERROR(sf__backward(s, &LOC),
               "t.sflow:3:7: runtime error: backward: the loss (shape []) has no path to a "
               "param: it was made from no param, or under no_grad(true)");
  a->req = true;
  sf_tensor *m = sf__t_binary(SF_TOP_MUL, a, a, &LOC);
  EXPECT_ERROR(sf__backward(m, &LOC),
               "t.sflow:3:7: runtime error: backward: the loss must have one element, but its "
               "shape is [2, 3] (reduce it first, e.g. with mean or sum)");
  sf_tensor *l = sf__t_reduce(SF__R_MEAN, m, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  EXPECT_ERROR(sf__backward(l, &LOC),
               "t.sflow:3:7: runtime error: backward: the graph through a mean result was "
               "already released by an earlier backward (backward frees the tape; compute the "
               "loss again)");
  /* no_grad: nothing is recorded. */
  sf__no_grad = true;
  sf_tensor *q = sf__t_binary(SF_TOP_MUL, a, a, &LOC);
  sf__no_grad = false;
  CU_ASSERT(!q->req && !q->node);
  EXPECT_ERROR(sf_tensor_neg(NULL, &LOC),
               "t.sflow:3:7: runtime error: neg: the tensor is unset (a field or variable never "
               "assigned)");
  sf_tensor *all[] = {a, b, c, x, y, lg, s, m, l, q};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(d);
  sf_release(sh);
  sf_release(t3);
}

/* ------------------------------------------------------------- memory */

/* 10k training steps of a tiny model: after each the live tensors and
 * nodes are what they were after the first, so the tape and every
 * intermediate gradient went with backward.  Then 1k forward passes
 * without backward: nothing accumulates either. */
static void test_tape_released(void) {
  sf_tensor *w = rnd(2, SHAPE(4, 3), -1, 1, true), *b = rnd(1, SHAPE(3), -1, 1, true);
  sf_tensor *x = rnd(2, SHAPE(5, 4), -1, 1, false);
  sf_array *y = i64s(5, (int64_t[]){0, 1, 2, 1, 0});
  sf_array *ps = sf_array_new(&sf__type_tensor, 2, &LOC);
  ((sf_tensor **)ps->data)[0] = w;
  ((sf_tensor **)ps->data)[1] = b;
  sf_retain(w);
  sf_retain(b);
  sf_array *m = sf_array_new(&sf__type_tensor, 2, &LOC), *v = sf_array_new(&sf__type_tensor, 2, &LOC);
  for (int i = 0; i < 2; i++) {
    sf_tensor *p = ((sf_tensor **)ps->data)[i];
    ((sf_tensor **)m->data)[i] = sf__t_zeros(p->ndim, p->shape, &LOC);
    ((sf_tensor **)v->data)[i] = sf__t_zeros(p->ndim, p->shape, &LOC);
  }
  sf_array *steps = i64s(1, (int64_t[]){0});
  int64_t live_tensors = 0, live_nodes = 0;
  float first = 0, last = 0;
  for (int step = 0; step < 10000; step++) {
    sf_tensor *h = sf__t_matmul(x, w, &LOC);
    sf_tensor *hb = sf__t_binary(SF_TOP_ADD, h, b, &LOC);
    sf_tensor *a = sf__t_unary(SF__U_TANH, hb, &LOC);
    sf_tensor *loss = sf__t_cross_entropy(a, y, -100, 0.0f, &LOC);
    sf__backward(loss, &LOC);
    sf__adamw_step(ps, m, v, steps, 0.01, 0.9, 0.999, 1e-8, 0.01, &LOC);
    sf_std_nn_zero_grad(ps, &LOC);
    last = sf__t_data(loss)[0];
    if (step == 0)
      first = last;
    sf_release(h);
    sf_release(hb);
    sf_release(a);
    sf_release(loss);
    if (step == 0) {
      live_tensors = sf__tensor_live;
      live_nodes = sf__node_live;
    } else if (sf__tensor_live != live_tensors || sf__node_live != live_nodes) {
      fprintf(stderr, "\n  step %d: %ld tensors %ld nodes live, after step 0 %ld %ld\n", step,
              (long)sf__tensor_live, (long)sf__node_live, (long)live_tensors, (long)live_nodes);
      CU_FAIL("memory grew");
      break;
    }
  }
  CHECK_INT(sf__node_live, 0);
  CU_ASSERT(last < first); /* it trained */
  printf("\n    10k steps: loss %.4f -> %.4f, %ld tensors and %ld nodes live throughout ", first,
         last, (long)live_tensors, (long)sf__node_live);
  for (int i = 0; i < 1000; i++) {
    sf_tensor *h = sf__t_matmul(x, w, &LOC);
    sf_tensor *s = sf__t_reduce(SF__R_SUM, h, SF__ALL_AXES, &LOC);
    sf_release(h);
    sf_release(s);
  }
  CHECK_INT(sf__tensor_live, live_tensors);
  CHECK_INT(sf__node_live, 0);
  sf_release(w);
  sf_release(b);
  sf_release(x);
  sf_release(y);
  sf_release(ps);
  sf_release(m);
  sf_release(v);
  sf_release(steps);
}

/* --------------------------------------------------- optimizers by hand */

static sf_array *one_param(sf_tensor *p) {
  sf_array *a = sf_array_new(&sf__type_tensor, 1, &LOC);
  ((sf_tensor **)a->data)[0] = p;
  sf_retain(p);
  return a;
}

static void test_sgd(void) {
  /* lr 0.1, momentum 0.9, weight_decay 0.1, g = 0.5 each step:
   * d = 0.5 + 0.1 * 1 = 0.6, buf 0.6, p = 1 - 0.06 = 0.94;
   * d = 0.5 + 0.094 = 0.594, buf 0.54 + 0.594 = 1.134, p = 0.94 - 0.1134 = 0.8266. */
  sf_tensor *p = mk(1, SHAPE(1), (float[]){1.0f});
  p->req = true;
  sf_array *ps = one_param(p), *bufs = sf_array_new(&sf__type_tensor, 1, &LOC);
  ((sf_tensor **)bufs->data)[0] = sf__t_zeros(1, SHAPE(1), &LOC);
  float want[] = {0.94f, 0.8266f};
  for (int s = 0; s < 2; s++) {
    p->grad = mk(1, SHAPE(1), (float[]){0.5f});
    sf__sgd_step(ps, bufs, 0.1, 0.9, 0.1, &LOC);
    check_vals("sgd", p, &want[s], 1, 1e-6f);
    sf_release(p->grad);
    p->grad = NULL;
  }
  /* Plain SGD: p -= lr g. */
  p->grad = mk(1, SHAPE(1), (float[]){2.0f});
  sf__sgd_step(ps, bufs, 0.5, 0, 0, &LOC);
  check_vals("sgd plain", p, (float[]){0.8266f - 1.0f}, 1, 1e-6f);
  sf_release(ps);
  sf_release(bufs);
  sf_release(p);
}

static void test_adamw(void) {
  /* p = [1, -2], g = [0.5, 0.25], lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01.
   * Step 1: p *= 0.999; m = 0.1 g; v = 0.001 g²; step size 0.1 / 0.1 = 1;
   *   denom = sqrt(v) / sqrt(0.001) = |g|; p -= m / |g| = 0.1 -> [0.899, -2.098].
   * Step 2: p *= 0.999 -> [0.898101, -2.095902]; m = [0.095, 0.0475];
   *   v = [0.00049975, 0.0001249375]; bias corrections 0.19 and 0.001999;
   *   v / 0.001999 = [0.25, 0.0625]; 0.1 / 0.19 * m / sqrt(.) = 0.1 -> [0.798101, -2.195902]. */
  sf_tensor *p = mk(1, SHAPE(2), (float[]){1.0f, -2.0f});
  p->req = true;
  sf_array *ps = one_param(p), *m = sf_array_new(&sf__type_tensor, 1, &LOC),
           *v = sf_array_new(&sf__type_tensor, 1, &LOC), *steps = i64s(1, (int64_t[]){0});
  ((sf_tensor **)m->data)[0] = sf__t_zeros(1, SHAPE(2), &LOC);
  ((sf_tensor **)v->data)[0] = sf__t_zeros(1, SHAPE(2), &LOC);
  float want[2][2] = {{0.899f, -2.098f}, {0.798101f, -2.195902f}};
  for (int s = 0; s < 2; s++) {
    p->grad = mk(1, SHAPE(2), (float[]){0.5f, 0.25f});
    sf__adamw_step(ps, m, v, steps, 0.1, 0.9, 0.999, 1e-8, 0.01, &LOC);
    check_vals("adamw", p, want[s], 2, 2e-6f);
    sf_release(p->grad);
    p->grad = NULL;
  }
  CHECK_INT(((int64_t *)steps->data)[0], 2);
  check_vals("adamw m", ((sf_tensor **)m->data)[0], (float[]){0.095f, 0.0475f}, 2, 1e-7f);
  check_vals("adamw v", ((sf_tensor **)v->data)[0], (float[]){0.00049975f, 0.0001249375f}, 2,
             1e-9f);
  /* A param no gradient reached is left alone. */
  sf__adamw_step(ps, m, v, steps, 0.1, 0.9, 0.999, 1e-8, 0.01, &LOC);
  check_vals("adamw no grad", p, want[1], 2, 2e-6f);
  sf_array *short_state = sf_array_new(&sf__type_tensor, 0, &LOC);
  EXPECT_ERROR(sf__adamw_step(ps, short_state, v, steps, 0.1, 0.9, 0.999, 1e-8, 0.01, &LOC),
               "t.sflow:3:7: runtime error: adamw.step: 1 params but 0 first-moment tensors "
               "(the optimizer was made for other params)");
  sf_release(short_state);
  sf_release(ps);
  sf_release(m);
  sf_release(v);
  sf_release(steps);
  sf_release(p);
}

/* ------------------------------------------- structs, print, serialize */

typedef struct {
  sf_tensor *weight, *bias;
} linear_c;
static const sf_field linear_fields[] = {{"weight", 0, &sf__type_tensor},
                                         {"bias", 8, &sf__type_tensor}};
static const sf_type linear_type = {SF_STRUCT, 16, 8, 2, NULL, linear_fields, "Linear"};
static const sf_type linear_arr = {SF_ARRAY, 8, 8, 0, &linear_type, NULL, "Linear[]"};
typedef struct {
  linear_c fc1;
  int64_t steps;
  sf_array *blocks; /* Linear[] */
  linear_c fc2;
} model_c;
static const sf_field model_fields[] = {{"fc1", 0, &linear_type},
                                        {"steps", 16, &sf_type_i64},
                                        {"blocks", 24, &linear_arr},
                                        {"fc2", 32, &linear_type}};
static const sf_type model_type = {SF_STRUCT, 48, 8, 4, NULL, model_fields, "Model"};

static void model_init(model_c *m, int64_t seed) {
  memset(m, 0, sizeof *m);
  sf_std_nn_linear(&m->fc1, &linear_type, 3, 4, seed, &LOC);
  sf_std_nn_linear(&m->fc2, &linear_type, 4, 2, seed + 1, &LOC);
  m->blocks = sf_array_new(&linear_type, 1, &LOC);
  sf_std_nn_linear(m->blocks->data, &linear_type, 2, 2, seed + 2, &LOC);
}

/* The vectorised AdamW step, split over the pool, gives bitwise what the
 * scalar per-value loop gives, on a param large enough to be split
 * (over SF__PAR_MIN values) whose size is no multiple of four (a scalar
 * tail in the last chunk), over three steps. */
static void test_adamw_split(void) {
  enum { N = (1 << 17) * 2 + 7 };
  sf_tensor *p = mk(1, SHAPE(N), NULL);
  p->req = true;
  float *w = sf__t_data(p), *rw = malloc(N * sizeof *rw), *rm = calloc(N, sizeof *rm),
        *rv = calloc(N, sizeof *rv), *g = malloc(N * sizeof *g);
  for (int64_t i = 0; i < N; i++)
    rw[i] = w[i] = frand(-1.0f, 1.0f);
  sf_array *ps = one_param(p), *m = sf_array_new(&sf__type_tensor, 1, &LOC),
           *v = sf_array_new(&sf__type_tensor, 1, &LOC), *steps = i64s(1, (int64_t[]){0});
  ((sf_tensor **)m->data)[0] = sf__t_zeros(1, SHAPE(N), &LOC);
  ((sf_tensor **)v->data)[0] = sf__t_zeros(1, SHAPE(N), &LOC);
  double lr = 5e-5, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  for (int t = 1; t <= 3; t++) {
    for (int64_t i = 0; i < N; i++)
      g[i] = frand(-0.5f, 0.5f);
    p->grad = mk(1, SHAPE(N), g);
    sf__adamw_step(ps, m, v, steps, lr, b1, b2, eps, wd, &LOC);
    sf_release(p->grad);
    p->grad = NULL;
    /* The reference: PyTorch's single-tensor AdamW, value by value. */
    float step = (float)(lr / (1.0 - pow(b1, t))), bc2 = (float)sqrt(1.0 - pow(b2, t));
    float decay = (float)(1.0 - lr * wd), w1 = (float)(1.0 - b1), fb2 = (float)b2,
          w2 = (float)(1.0 - b2), feps = (float)eps;
    for (int64_t i = 0; i < N; i++) {
      rw[i] *= decay;
      rm[i] += w1 * (g[i] - rm[i]);
      rv[i] = fb2 * rv[i] + w2 * g[i] * g[i];
      rw[i] -= step * (rm[i] / (sqrtf(rv[i]) / bc2 + feps));
    }
  }
  int64_t bad = -1;
  const float *gm = sf__t_data(((sf_tensor **)m->data)[0]), *gv = sf__t_data(((sf_tensor **)v->data)[0]);
  for (int64_t i = 0; i < N && bad < 0; i++)
    if (memcmp(&w[i], &rw[i], sizeof *w) || memcmp(&gm[i], &rm[i], sizeof *w) ||
        memcmp(&gv[i], &rv[i], sizeof *w))
      bad = i;
  if (bad >= 0)
    fprintf(stderr, "adamw_split: value %lld: w %.9g want %.9g, m %.9g want %.9g, v %.9g want %.9g\n",
            (long long)bad, w[bad], rw[bad], gm[bad], rm[bad], gv[bad], rv[bad]);
  CHECK_INT(bad, -1);
  free(rw);
  free(rm);
  free(rv);
  free(g);
  sf_release(ps);
  sf_release(m);
  sf_release(v);
  sf_release(steps);
  sf_release(p);
}

/* A bias gradient big enough to split over the pool (reduce_to of
 * (4, 256, 392) to (392): 392 columns, 24 blocks of 16 and a tail of 8)
 * is bitwise the serial sum, rows added in order, value by value. */
static void test_bias_grad_split(void) {
  enum { B = 4, T = 256, C = 392 };
  float *g = malloc(B * T * C * sizeof *g);
  for (int64_t i = 0; i < B * T * C; i++)
    g[i] = frand(-1.0f, 1.0f);
  sf_tensor *gt = mk(3, SHAPE(B, T, C), g);
  sf_tensor *s = sf__t_reduce_to(gt, 1, SHAPE(C));
  check_shape(s, 1, SHAPE(C));
  int64_t bad = -1;
  for (int64_t j = 0; j < C && bad < 0; j++) {
    float want = 0;
    for (int64_t r = 0; r < B * T; r++)
      want += g[r * C + j];
    if (memcmp(&sf__t_data(s)[j], &want, sizeof want))
      bad = j;
  }
  if (bad >= 0)
    fprintf(stderr, "bias_grad_split: column %lld: %.9g\n", (long long)bad, sf__t_data(s)[bad]);
  CHECK_INT(bad, -1);
  sf_release(s);
  sf_release(gt);
  free(g);
}

/* One attention forward and backward: the output and the gradients of
 * the three inputs (q, k, v may be one tensor), copied out. */
static void attention_run(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask, int64_t heads,
                          sf_tensor *w, float **out) {
  sf_tensor *in[3] = {q, k, v};
  for (int i = 0; i < 3; i++) {
    sf_release(in[i]->grad);
    in[i]->grad = NULL;
  }
  sf_tensor *o = sf__t_attention(q, k, v, mask, heads, &LOC);
  sf_tensor *ow = sf__t_binary(SF_TOP_MUL, o, w, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, ow, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  out[0] = malloc((size_t)o->numel * sizeof(float));
  memcpy(out[0], sf__t_data(o), (size_t)o->numel * sizeof(float));
  for (int i = 0; i < 3; i++) {
    out[1 + i] = malloc((size_t)in[i]->numel * sizeof(float));
    memcpy(out[1 + i], sf__t_data(in[i]->grad), (size_t)in[i]->numel * sizeof(float));
  }
  sf_release(l);
  sf_release(ow);
  sf_release(o);
}

/* The fused attention (one node, a pass per batch row and head on the
 * pool) against the composition of reshape, transpose, `@` and the
 * masked softmax it replaced (SFLOW_NN_ATTENTION=composed): the output
 * and every input's gradient bitwise equal, for self attention big
 * enough to split over the pool with a right-padded, a holed and an
 * unpadded batch row, cross attention (T != S, dk through its
 * transpose), and q = k = v one tensor (the gradients added in the
 * composition's order). */
static void test_attention_fused(void) {
  struct { int64_t b, t, s, d, heads; bool same; } cases[] = {
      {3, 128, 128, 128, 4, false}, {2, 96, 128, 64, 2, false}, {3, 128, 128, 128, 4, true}};
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    int64_t B = cases[ci].b, T = cases[ci].t, S = cases[ci].s, D = cases[ci].d;
    sf_tensor *q = rnd(3, SHAPE(B, T, D), -2, 2, true);
    sf_tensor *k = cases[ci].same ? q : rnd(3, SHAPE(B, S, D), -2, 2, true);
    sf_tensor *v = cases[ci].same ? q : rnd(3, SHAPE(B, S, D), -2, 2, true);
    sf_tensor *w = rnd(3, SHAPE(B, T, D), -1, 1, false);
    int64_t *m = malloc((size_t)(B * S) * sizeof *m);
    for (int64_t i = 0; i < B * S; i++) {
      int64_t b = i / S, j = i % S;
      m[i] = b == 1 ? j < S - 37 : b == 2 ? j % 5 != 3 : 1;
    }
    sf_array *mask = i64s(B * S, m);
    float *fused[4], *comp[4];
    unsetenv("SFLOW_NN_ATTENTION");
    attention_run(q, k, v, mask, cases[ci].heads, w, fused);
    setenv("SFLOW_NN_ATTENTION", "composed", 1);
    attention_run(q, k, v, mask, cases[ci].heads, w, comp);
    unsetenv("SFLOW_NN_ATTENTION");
    static const char *what[] = {"out", "dq", "dk", "dv"};
    int64_t sizes[4] = {q->numel, q->numel, k->numel, v->numel};
    for (int i = 0; i < 4; i++) {
      int64_t bad = -1;
      for (int64_t j = 0; j < sizes[i] && bad < 0; j++)
        if (memcmp(&fused[i][j], &comp[i][j], sizeof(float)))
          bad = j;
      if (bad >= 0)
        fprintf(stderr, "\n  attention_fused case %zu %s[%lld]: %.9g composed %.9g\n", ci,
                what[i], (long long)bad, fused[i][bad], comp[i][bad]);
      CHECK_INT(bad, -1);
      free(fused[i]);
      free(comp[i]);
    }
    free(m);
    sf_release(mask);
    sf_release(w);
    if (!cases[ci].same) {
      sf_release(k);
      sf_release(v);
    }
    sf_release(q);
  }
}

/* dropout_rows on a tensor big enough to split over the pool (64 rows of
 * 4096: the masks by rows, the keep test by chunks) is bitwise the serial
 * formula: each row's draws from its own key, kept where u >= p and
 * scaled by 1/(1-p). */
static void test_dropout_rows_split(void) {
  enum { R = 64, C = 4096 };
  const double p = 0.25;
  sf_tensor *x = rnd(2, SHAPE(R, C), -1, 1, false);
  int64_t ix[R];
  for (int64_t r = 0; r < R; r++)
    ix[r] = 1000 + 7 * r;
  sf_array *index = i64s(R, ix);
  sf_tensor *y = sf__t_dropout_rows(x, p, 11, index, 3, true, &LOC);
  float *u = malloc((size_t)C * sizeof *u), keep = (float)(1.0 / (1.0 - p));
  uint64_t base = sf__rng_mix(11, 0x6472);
  int64_t bad = -1;
  for (int64_t r = 0; r < R && bad < 0; r++) {
    sf__uniform_key(u, C, sf__rng_mix(sf__rng_mix(base, (uint64_t)ix[r]), 3));
    for (int64_t j = 0; j < C && bad < 0; j++) {
      float want = sf__t_data(x)[r * C + j] * ((double)u[j] >= p ? keep : 0.0f);
      if (memcmp(&sf__t_data(y)[r * C + j], &want, sizeof want))
        bad = r * C + j;
    }
  }
  if (bad >= 0)
    fprintf(stderr, "\n  dropout_rows_split: value %lld: %.9g\n", (long long)bad,
            sf__t_data(y)[bad]);
  CHECK_INT(bad, -1);
  free(u);
  sf_release(y);
  sf_release(index);
  sf_release(x);
}

/* A stack of small products split over the pool (attention's per-head
 * shapes, b broadcast along the heads) is bitwise one sf__sgemm call per
 * matrix, made in order on this thread. */
static void test_bmm_split(void) {
  enum { B = 4, H = 12, M = 64, K = 32, N = 64 };
  sf_tensor *a = mk(4, SHAPE(B, H, M, K), NULL), *b = mk(4, SHAPE(B, 1, K, N), NULL);
  for (int64_t i = 0; i < a->numel; i++)
    sf__t_data(a)[i] = frand(-1.0f, 1.0f);
  for (int64_t i = 0; i < b->numel; i++)
    sf__t_data(b)[i] = frand(-1.0f, 1.0f);
  sf_tensor *c = sf__t_matmul(a, b, &LOC);
  check_shape(c, 4, SHAPE(B, H, M, N));
  float *want = malloc((size_t)B * H * M * N * sizeof *want);
  for (int64_t p = 0; p < B * H; p++)
    sf__sgemm(false, false, M, N, K, 1.0f, sf__t_data(a) + p * M * K, K,
              sf__t_data(b) + (p / H) * K * N, N, 0.0f, want + p * M * N, N);
  int64_t bad = -1;
  for (int64_t i = 0; i < c->numel && bad < 0; i++)
    if (memcmp(&sf__t_data(c)[i], &want[i], sizeof *want))
      bad = i;
  if (bad >= 0)
    fprintf(stderr, "bmm_split: value %lld: %.9g want %.9g\n", (long long)bad, sf__t_data(c)[bad],
            want[bad]);
  CHECK_INT(bad, -1);
  free(want);
  sf_release(c);
  sf_release(a);
  sf_release(b);
}

/* A product big enough to split over the pool (blas.c's gemm_split:
 * blocks of C's rows on the kernel's alignment, the library
 * single-threaded in each) is bitwise the one unsplit call, for every
 * transpose pair, beta 0 and 1, the encoder's shapes and odd ones, wide
 * ones (m < n) included, in 2 and 3 blocks; the resume and fixture tests
 * compare bits, so this is what lets --threads and a --resume change
 * nothing.  Under OPENBLAS_CORETYPE=X it checks kernel X
 * (tests/unit/blas_cores_test.py runs it under each); a kernel the split
 * is not measured on must not be split at all. */
static void test_sgemm_split(void) {
  static const int64_t shapes[][3] = {{2048, 384, 384}, {384, 384, 2048}, {384, 1536, 512},
                                      {1000, 333, 517}, {200, 1024, 300}, {256, 1024, 784},
                                      {4099, 96, 64}};
  int64_t was = sf__blas_split_blocks(1), splits = sf__blas_splits();
  int64_t align = sf__blas_split_align();
  fprintf(stderr, "\n    %s kernel %s: row blocks on multiples of %lld (0: never split) ",
          sf__blas_name(), sf__blas_core(), (long long)align);
  int64_t calls = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int t = 0; t < 8; t++) {
      bool ta = t & 1, tb = t & 2;
      float beta = t & 4 ? 1.0f : 0.0f;
      int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      int64_t lda = ta ? m : k, ldb = tb ? k : n;
      float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
      float *one = malloc((size_t)(m * n) * sizeof *one), *split = malloc((size_t)(m * n) * sizeof *split);
      for (int64_t i = 0; i < m * k; i++)
        a[i] = frand(-1.0f, 1.0f);
      for (int64_t i = 0; i < k * n; i++)
        b[i] = frand(-1.0f, 1.0f);
      for (int64_t i = 0; i < m * n; i++)
        one[i] = split[i] = frand(-1.0f, 1.0f);
      sf__blas_split_blocks(1);
      sf__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, one, n);
      sf__blas_split_blocks(2 + (int64_t)(s % 2));
      sf__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, split, n);
      calls++;
      int64_t bad = -1;
      for (int64_t i = 0; i < m * n && bad < 0; i++)
        if (memcmp(&one[i], &split[i], sizeof *one))
          bad = i;
      if (bad >= 0)
        fprintf(stderr, "\n  sgemm_split %lldx%lldx%lld ta %d tb %d beta %g: value %lld (row %lld): "
                "%.9g unsplit %.9g\n", (long long)m, (long long)n, (long long)k, ta, tb, beta,
                (long long)bad, (long long)(bad / n), split[bad], one[bad]);
      CHECK_INT(bad, -1);
      free(a);
      free(b);
      free(one);
      free(split);
    }
  /* Every one of these was split where the kernel is measured (every
   * block at least 2^23 multiply-adds and 48 rows), none elsewhere (the
   * reference loop, another library or an unmeasured kernel). */
  CHECK_INT(sf__blas_splits() - splits, align ? calls : 0);
  /* Below 2^24 multiply-adds (two blocks of OpenBLAS's small-product
   * paths' sizes) a product is one call. */
  float *a = calloc(128 * 256, sizeof *a), *b = calloc(256 * 256, sizeof *b);
  float *c = calloc(128 * 256, sizeof *c);
  splits = sf__blas_splits();
  sf__blas_split_blocks(2);
  sf__sgemm(false, false, 128, 256, 256, 1.0f, a, 256, b, 256, 0.0f, c, 256);
  CHECK_INT(sf__blas_splits() - splits, 0);
  free(a);
  free(b);
  free(c);
  sf__blas_split_blocks(was);
}

/* Clipping a parameter list big enough to split over the pool gives
 * bitwise the serial norm (each param's sum of squares in eight f64
 * lanes, then the params added in order) and the serial scaling. */
static double ref_sum_squares(const float *g, int64_t n) {
  double a[8] = {0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; l++)
      a[l] += (double)g[j + l] * g[j + l];
  double ss = ((a[0] + a[2]) + (a[4] + a[6])) + ((a[1] + a[3]) + (a[5] + a[7]));
  for (; j < n; j++)
    ss += (double)g[j] * g[j];
  return ss;
}

static void test_clip_split(void) {
  enum { NP = 5 };
  const int64_t sizes[NP] = {200000, 3, 70001, 17, 100000};
  sf_array *ps = sf_array_new(&sf__type_tensor, NP, &LOC);
  float *want[NP];
  double ss = 0;
  for (int i = 0; i < NP; i++) {
    sf_tensor *t = mk(1, SHAPE(sizes[i]), NULL);
    t->req = true;
    t->grad = mk(1, SHAPE(sizes[i]), NULL);
    want[i] = malloc((size_t)sizes[i] * sizeof(float));
    for (int64_t j = 0; j < sizes[i]; j++)
      want[i][j] = sf__t_data(t->grad)[j] = frand(-0.5f, 0.5f);
    ss += ref_sum_squares(want[i], sizes[i]);
    ((sf_tensor **)ps->data)[i] = t;
  }
  ps->len = NP;
  double norm = sf__clip_grad_norm(ps, 1.0, &LOC), rn = sqrt(ss);
  CU_ASSERT(memcmp(&norm, &rn, sizeof norm) == 0);
  float coef = (float)(1.0 / (rn + 1e-6));
  int64_t bad = -1;
  for (int i = 0; i < NP; i++) {
    const float *g = sf__t_data(((sf_tensor **)ps->data)[i]->grad);
    for (int64_t j = 0; j < sizes[i] && bad < 0; j++) {
      float w = want[i][j] * coef;
      if (memcmp(&g[j], &w, sizeof w))
        bad = j;
    }
    free(want[i]);
  }
  if (bad >= 0 || norm != rn)
    fprintf(stderr, "clip_split: norm %.17g want %.17g, first bad value %lld\n", norm, rn,
            (long long)bad);
  CHECK_INT(bad, -1);
  sf_release(ps);
}

static void test_linear_and_params(void) {
  model_c m, m2;
  model_init(&m, 1);
  model_init(&m2, 1);
  check_shape(m.fc1.weight, 2, SHAPE(4, 3));
  check_shape(m.fc1.bias, 1, SHAPE(4));
  CU_ASSERT(m.fc1.weight->req && m.fc1.bias->req);
  bool in_bound = true, same = true;
  for (int64_t i = 0; i < 12; i++) {
    float x = sf__t_data(m.fc1.weight)[i];
    in_bound &= fabsf(x) <= 1.0f / sqrtf(3.0f);
    same &= x == sf__t_data(m2.fc1.weight)[i];
  }
  CU_ASSERT(in_bound && same); /* U(-1/sqrt(in), 1/sqrt(in)), the same for one seed */
  CU_ASSERT(sf__t_data(m.fc1.weight)[0] != sf__t_data(m.fc2.weight)[0]);
  sf_array *ps = sf_std_nn_params(&m, &model_type, &model_type, &LOC);
  CHECK_INT(ps->len, 6);
  sf_tensor **p = ps->data;
  CU_ASSERT(p[0] == m.fc1.weight && p[1] == m.fc1.bias && p[4] == m.fc2.weight &&
            p[2] == ((linear_c *)m.blocks->data)->weight);
  sf_array *gs = sf_std_nn_grads(&m, &model_type, &model_type, &LOC);
  CHECK_INT(gs->len, 6);
  CU_ASSERT(((sf_tensor **)gs->data)[0] == m.fc1.weight->grad); /* made and kept */
  sf_release(ps);
  sf_release(gs);
  sf_value_release(&model_type, &m);
  sf_value_release(&model_type, &m2);
}

static void test_print_and_serialize(void) {
  sf_tensor *a = mk(2, SHAPE(2, 2), (float[]){1, 2, 3, 4.5f});
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__format_value(&b, &sf__type_tensor, &a, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor([[1.0, 2.0], [3.0, 4.5]])");
  sf__buf_free(&b);
  sf_tensor *z = mk(0, NULL, (float[]){3});
  sf__format_value(&b, &sf__type_tensor, &z, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor(3.0)");
  sf__buf_free(&b);
  sf_tensor *big = mk(1, SHAPE(2000), NULL);
  for (int i = 0; i < 2000; i++)
    sf__t_data(big)[i] = (float)i;
  sf__format_value(&b, &sf__type_tensor, &big, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor([0.0, 1.0, 2.0, ..., 1997.0, 1998.0, 1999.0])");
  sf__buf_free(&b);
  sf_tensor *at = sf__t_transpose(a, 0, 1, &LOC);
  sf__format_value(&b, &sf__type_tensor, &at, false);
  sf__buf_put(&b, "", 1);
  CHECK_STR(b.data, "tensor([[1.0, 3.0], [2.0, 4.5]])");
  sf__buf_free(&b);
  /* A struct with a transposed view and an unset tensor, through core's
   * serializer: the values come back contiguous, the unset one unset. */
  linear_c l = {at, NULL}, back = {0};
  sf__ser_value(&b, &linear_type, &l);
  sf__reader r = {(const unsigned char *)b.data, (const unsigned char *)b.data + b.len};
  CU_ASSERT(sf__de_value(&r, &linear_type, &back));
  CU_ASSERT(r.p == r.end && back.bias == NULL && back.weight && !back.weight->req);
  check_vals("read back", back.weight, (float[]){1, 3, 2, 4.5f}, 4, 0);
  /* Cut short anywhere: refused, nothing leaked. */
  int64_t live = sf__tensor_live;
  for (size_t cut = 0; cut < b.len; cut++) {
    linear_c bad = {0};
    sf__reader rc = {(const unsigned char *)b.data, (const unsigned char *)b.data + cut};
    CU_ASSERT(!sf__de_value(&rc, &linear_type, &bad));
    sf_value_release(&linear_type, &bad);
  }
  CHECK_INT(sf__tensor_live, live);
  sf__buf_free(&b);
  /* An empty tensor whose other dimension is larger than the bytes. */
  sf_tensor *e = mk(2, SHAPE(0, 1000000), NULL), *eb = NULL;
  sf__ser_value(&b, &sf__type_tensor, &e);
  sf__reader re = {(const unsigned char *)b.data, (const unsigned char *)b.data + b.len};
  CU_ASSERT(sf__de_value(&re, &sf__type_tensor, &eb) && eb && eb->numel == 0);
  if (eb)
    check_shape(eb, 2, SHAPE(0, 1000000));
  sf_release(e);
  sf_release(eb);
  sf__buf_free(&b);
  sf_value_release(&linear_type, &back);
  sf_tensor *all[] = {a, z, big, at};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

/* -------------------------------------------------------- safetensors */

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(*n + 1);
  if (fread(buf, 1, *n, f) != *n)
    *n = 0;
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static void write_all(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

static void test_safetensors_round_trip(void) {
  char path[] = "/tmp/sflow_nn_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  sf_str *ps = sf_str_new(path, (int64_t)strlen(path));
  model_c m, m2;
  model_init(&m, 5);
  model_init(&m2, 9);
  sf_str *f32 = sf_str_new("f32", 3);
  sf_std_nn_save(&m, &model_type, ps, f32, &model_type, &LOC);
  sf_release(f32);
  size_t n = 0;
  char *bytes = read_all(path, &n);
  uint64_t hl = 0;
  memcpy(&hl, bytes, 8);
  CU_ASSERT((8 + hl) % 8 == 0);
  char *header = strndup(bytes + 8, hl);
  const char *start = "{\"__metadata__\":{\"format\":\"pt\"},\"fc1.weight\":{\"dtype\":"
                      "\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]},\"fc1.bias\":";
  CU_ASSERT(strncmp(header, start, strlen(start)) == 0);
  CU_ASSERT(strstr(header, "\"blocks.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2]") != NULL);
  CU_ASSERT(strstr(header, "\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
                           "[120,128]}") != NULL);
  /* 12 + 4 + 4 + 2 + 8 + 2 floats of data after the header. */
  CHECK_INT(n, 8 + hl + 4 * (12 + 4 + 4 + 2 + 8 + 2));
  CU_ASSERT(memcmp(bytes + 8 + hl, sf__t_data(m.fc1.weight), 48) == 0);
  free(header);
  free(bytes);
  sf_std_nn_load(&m2, &model_type, ps, true, &model_type, &LOC);
  sf_array *a = sf_std_nn_params(&m, &model_type, &model_type, &LOC);
  sf_array *b = sf_std_nn_params(&m2, &model_type, &model_type, &LOC);
  bool same = a->len == b->len;
  for (int64_t i = 0; same && i < a->len; i++) {
    sf_tensor *x = ((sf_tensor **)a->data)[i], *y = ((sf_tensor **)b->data)[i];
    same = x->numel == y->numel && x != y &&
           memcmp(sf__t_data(x), sf__t_data(y), (size_t)x->numel * 4) == 0;
  }
  CU_ASSERT(same); /* bitwise */
  sf_release(a);
  sf_release(b);
  /* Into a struct that lacks a name of the file: an error when strict;
   * a struct with a name the file lacks, or another shape, always. */
  linear_c l = {0};
  sf_std_nn_linear(&l, &linear_type, 3, 4, 1, &LOC);
  char want[1024];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s has no tensor \"weight\" "
           "(the struct's weight, shape [4, 3])", path);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC), want);
  typedef struct {
    linear_c fc1;
  } half_c;
  static const sf_field half_fields[] = {{"fc1", 0, &linear_type}};
  static const sf_type half_type = {SF_STRUCT, 16, 8, 1, NULL, half_fields, "Half"};
  half_c h = {l};
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s has a tensor "
           "\"blocks.0.weight\" that the struct lacks (strict = false ignores it)", path);
  EXPECT_ERROR(sf_std_nn_load(&h, &half_type, ps, true, &half_type, &LOC), want);
  sf_std_nn_load(&h, &half_type, ps, false, &half_type, &LOC);
  CU_ASSERT(memcmp(sf__t_data(h.fc1.bias), sf__t_data(m.fc1.bias), 16) == 0);
  linear_c wrong = {0};
  sf_std_nn_linear(&wrong, &linear_type, 4, 3, 1, &LOC);
  half_c hw = {wrong};
  float before = sf__t_data(wrong.bias)[0];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s: \"fc1.weight\" has shape "
           "[4, 3] in the file, but the struct's is [3, 4]", path);
  EXPECT_ERROR(sf_std_nn_load(&hw, &half_type, ps, false, &half_type, &LOC), want);
  CU_ASSERT(sf__t_data(wrong.bias)[0] == before); /* nothing copied */
  sf_value_release(&linear_type, &l);
  sf_value_release(&linear_type, &wrong);
  sf_value_release(&model_type, &m);
  sf_value_release(&model_type, &m2);
  sf_release(ps);
  unlink(path);
}

/* A file written by hand as another writer would: F16 and BF16 values,
 * an I64 buffer the struct does not have, metadata, no padding. */
static void test_safetensors_halves(void) {
  const char *hdr = "{\"weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                    "\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
                    "\"bias\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
                    "\"position_ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[12,20]}}";
  uint64_t hl = strlen(hdr);
  /* F16: 1.0, -2.5, 65504 (the largest), 2^-24 (the smallest subnormal);
   * BF16: 1.0, 3.140625. */
  uint16_t halves[6] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x3F80, 0x4049};
  int64_t pos = 7;
  size_t n = 8 + hl + 12 + 8;
  char *file = calloc(1, n);
  memcpy(file, &hl, 8);
  memcpy(file + 8, hdr, hl);
  memcpy(file + 8 + hl, halves, 12);
  memcpy(file + 8 + hl + 12, &pos, 8);
  char path[] = "/tmp/sflow_nn_XXXXXX";
  close(mkstemp(path));
  write_all(path, file, n);
  sf_str *ps = sf_str_new(path, (int64_t)strlen(path));
  linear_c l = {mk(2, SHAPE(2, 2), NULL), mk(1, SHAPE(2), NULL)};
  char want[1024];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s has a tensor "
           "\"position_ids\" that the struct lacks (strict = false ignores it)", path);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, true, &linear_type, &LOC), want);
  sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC);
  check_vals("f16", l.weight, (float[]){1.0f, -2.5f, 65504.0f, 0x1p-24f}, 4, 0);
  check_vals("bf16", l.bias, (float[]){1.0f, 3.140625f}, 2, 0);
  /* Offsets past the data, and a file too short for its header. */
  memcpy(file + 8 + strlen("{\"weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,"),
         "9", 1);
  write_all(path, file, n);
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s: the data of \"weight\" "
           "(offsets 0..9) does not fit F16 [2, 2] within the 20 data bytes", path);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC), want);
  write_all(path, file, 20);
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: nn.load: %s is not a safetensors "
           "file (header length %lu for a file of 20 bytes)", path, (unsigned long)hl);
  EXPECT_ERROR(sf_std_nn_load(&l, &linear_type, ps, false, &linear_type, &LOC), want);
  CU_ASSERT(sf__f16_to_f32(0x7C00) == INFINITY && isnan(sf__f16_to_f32(0x7E00)));
  CU_ASSERT(sf__f16_to_f32(0x8000) == 0.0f && signbit(sf__f16_to_f32(0x8000)));
  CU_ASSERT(sf__f16_to_f32(0x0200) == 0x1p-15f && sf__f16_to_f32(0x0400) == 0x1p-14f);
  free(file);
  sf_value_release(&linear_type, &l);
  sf_release(ps);
  unlink(path);
}

static void test_randn(void) {
  sf_array *sh = i64s(1, (int64_t[]){10000});
  sf_tensor *a = sf_std_nn_randn(sh, 7, &LOC), *b = sf_std_nn_randn(sh, 7, &LOC),
            *c = sf_std_nn_randn(sh, 8, &LOC);
  CU_ASSERT(memcmp(sf__t_data(a), sf__t_data(b), 40000) == 0);
  CU_ASSERT(memcmp(sf__t_data(a), sf__t_data(c), 40000) != 0);
  double s = 0, s2 = 0;
  for (int i = 0; i < 10000; i++) {
    s += sf__t_data(a)[i];
    s2 += sf__t_data(a)[i] * sf__t_data(a)[i];
  }
  double mean = s / 10000, var = s2 / 10000 - mean * mean;
  CU_ASSERT(fabs(mean) < 0.05 && fabs(var - 1) < 0.05);
  sf_tensor *u1 = sf_std_nn_randn(sh, -1, &LOC), *u2 = sf_std_nn_randn(sh, -1, &LOC);
  CU_ASSERT(memcmp(sf__t_data(u1), sf__t_data(u2), 40000) != 0); /* the call's stream moves */
  sf_release(sh);
  sf_tensor *all[] = {a, b, c, u1, u2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
}

/* ------------------------------------------------------------- layers */

typedef struct {
  sf_array *ids, *shape, *mask;
  int64_t heads;
  double p;
} layer_ctx;
static sf_tensor *f_embedding(sf_tensor **in, void *ctx) {
  layer_ctx *c = ctx;
  return sf__t_embedding(in[0], c->ids, c->shape, &LOC);
}
static sf_tensor *f_layer_norm(sf_tensor **in, void *ctx) {
  return sf__t_layer_norm(in[0], in[1], in[2], 1e-5, &LOC);
}
static sf_tensor *f_dropout(sf_tensor **in, void *ctx) {
  return sf__t_dropout(in[0], ((layer_ctx *)ctx)->p, 11, true, &LOC);
}
static sf_tensor *f_attention(sf_tensor **in, void *ctx) {
  layer_ctx *c = ctx;
  return sf__t_attention(in[0], in[1], in[2], c->mask, c->heads, &LOC);
}

/* Every layer's backward against finite differences: Embedding with a
 * repeated id (the scatter adds), LayerNorm's three inputs, dropout's
 * fixed mask, attention self and cross, with padding and a fully padded
 * batch row. */
static void test_grad_layers(void) {
  layer_ctx e = {.ids = i64s(6, (int64_t[]){1, 4, 1, 0, 3, 1}), .shape = i64s(2, (int64_t[]){2, 3})};
  sf_tensor *w[1] = {rnd(2, SHAPE(5, 3), -1, 1, true)};
  gradcheck("embedding (repeated ids)", f_embedding, &e, 1, w);
  release_all(w, 1);
  sf_tensor *ln[3] = {rnd(3, SHAPE(2, 3, 5), -2, 2, true), rnd(1, SHAPE(5), 0.5f, 1.5f, true),
                      rnd(1, SHAPE(5), -1, 1, true)};
  gradcheck("layer_norm", f_layer_norm, NULL, 3, ln);
  release_all(ln, 3);
  layer_ctx d = {.p = 0.4};
  sf_tensor *x[1] = {rnd(2, SHAPE(4, 5), -1, 1, true)};
  gradcheck("dropout p=0.4", f_dropout, &d, 1, x);
  release_all(x, 1);
  layer_ctx a = {.mask = i64s(8, (int64_t[]){1, 1, 1, 0, 1, 0, 0, 1}), .heads = 2};
  sf_tensor *q[3] = {rnd(3, SHAPE(2, 4, 6), -1, 1, true), rnd(3, SHAPE(2, 4, 6), -1, 1, true),
                     rnd(3, SHAPE(2, 4, 6), -1, 1, true)};
  gradcheck("attention 2 heads, padded", f_attention, &a, 3, q);
  release_all(q, 3);
  layer_ctx c = {.mask = i64s(6, (int64_t[]){0, 0, 0, 1, 1, 0}), .heads = 3};
  sf_tensor *qc[3] = {rnd(3, SHAPE(2, 2, 6), -1, 1, true), rnd(3, SHAPE(2, 3, 6), -1, 1, true),
                      rnd(3, SHAPE(2, 3, 6), -1, 1, true)};
  gradcheck("attention cross, all-pad row", f_attention, &c, 3, qc);
  release_all(qc, 3);
  sf_array *arrs[] = {e.ids, e.shape, a.mask, c.mask};
  for (size_t i = 0; i < 4; i++)
    sf_release(arrs[i]);
}

/* Layer norm runs its row sums four rows at a time, a row per vector
 * lane, and the rest of the rows one by one: each row's output and input
 * gradient equal, bit for bit, that row normalised alone (one row: the
 * single-row loop), for 7 rows of 37 (a group of four, three left over, a
 * tail of 1 in the four-wide loops along the row). */
static void test_layer_norm_rows(void) {
  int64_t rows = 7, d = 37;
  sf_tensor *x = rnd(2, SHAPE(rows, d), -3, 3, true), *w = rnd(1, SHAPE(d), 0.5f, 1.5f, true);
  sf_tensor *b = rnd(1, SHAPE(d), -1, 1, true), *up = rnd(2, SHAPE(rows, d), -1, 1, false);
  sf_tensor *y = sf__t_layer_norm(x, w, b, 1e-5, &LOC);
  sf_tensor *yu = sf__t_binary(SF_TOP_MUL, y, up, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, yu, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  int64_t ydiff = 0, gdiff = 0;
  for (int64_t r = 0; r < rows; r++) {
    sf_tensor *xr = mk(2, SHAPE(1, d), sf__t_data(x) + r * d);
    sf_tensor *ur = mk(2, SHAPE(1, d), sf__t_data(up) + r * d);
    xr->req = true;
    sf_tensor *yr = sf__t_layer_norm(xr, w, b, 1e-5, &LOC);
    sf_tensor *yur = sf__t_binary(SF_TOP_MUL, yr, ur, &LOC);
    sf_tensor *lr = sf__t_reduce(SF__R_SUM, yur, SF__ALL_AXES, &LOC);
    sf__backward(lr, &LOC);
    ydiff += memcmp(sf__t_data(yr), sf__t_data(y) + r * d, (size_t)d * sizeof(float)) != 0;
    gdiff += memcmp(sf__t_data(xr->grad), sf__t_data(x->grad) + r * d,
                    (size_t)d * sizeof(float)) != 0;
    sf_tensor *rel[] = {xr, ur, yr, yur, lr};
    for (size_t i = 0; i < 5; i++)
      sf_release(rel[i]);
  }
  printf("\n    rows differing from the row alone: output %ld, input gradient %ld ", (long)ydiff,
         (long)gdiff);
  CU_ASSERT(ydiff == 0);
  CU_ASSERT(gdiff == 0);
  sf_tensor *rel[] = {x, w, b, up, y, yu, l};
  for (size_t i = 0; i < 7; i++)
    sf_release(rel[i]);
}

/* Forward values by hand, dropout's statistics and seeds, clipping, and
 * every layer's errors. */
static void test_layers_forward(void) {
  sf_tensor *w = mk(2, SHAPE(3, 2), (float[]){0, 1, 10, 11, 20, 21});
  sf_array *ids = i64s(4, (int64_t[]){2, 0, 2, 1}), *sh = i64s(2, (int64_t[]){2, 2});
  sf_tensor *e = sf__t_embedding(w, ids, sh, &LOC);
  check_shape(e, 3, SHAPE(2, 2, 2));
  check_vals("embedding", e, (float[]){20, 21, 0, 1, 20, 21, 10, 11}, 8, 0);
  sf_array *bad = i64s(2, (int64_t[]){1, 3}), *sh2 = i64s(1, (int64_t[]){2});
  EXPECT_ERROR(sf__t_embedding(w, bad, sh2, &LOC),
               "t.sflow:3:7: runtime error: embedding: id 3 (position 1) is out of range for 3 "
               "embeddings (weight shape [3, 2])");
  EXPECT_ERROR(sf__t_embedding(w, ids, sh2, &LOC),
               "t.sflow:3:7: runtime error: embedding: 4 ids do not fill shape [2]");
  /* LayerNorm of [1, 2, 3, 4]: mean 2.5, biased variance 1.25. */
  sf_tensor *x = mk(2, SHAPE(1, 4), (float[]){1, 2, 3, 4});
  sf_tensor *g = mk(1, SHAPE(4), (float[]){1, 2, 1, 1}), *b = mk(1, SHAPE(4), (float[]){0, 0, 0, 1});
  sf_tensor *y = sf__t_layer_norm(x, g, b, 1e-5, &LOC);
  float r = (float)(1 / sqrt(1.25 + 1e-5));
  check_vals("layer_norm", y, (float[]){-1.5f * r, -1.0f * r, 0.5f * r, 1.5f * r + 1}, 4, 1e-6f);
  EXPECT_ERROR(sf__t_layer_norm(x, b, sf__t_empty(1, SHAPE(3), &LOC), 1e-5, &LOC),
               "t.sflow:3:7: runtime error: layer_norm: weight [4] and bias [3] must both be "
               "[4], the last dimension of the input [1, 4]");
  /* Dropout: the same mask for a seed, another for another seed, about
   * p zeroed, the rest scaled by 1/(1-p); identity when off. */
  sf_tensor *ones = sf__t_full(1, SHAPE(100000), 1.0f);
  sf_tensor *d1 = sf__t_dropout(ones, 0.25, 5, true, &LOC), *d2 = sf__t_dropout(ones, 0.25, 5, true, &LOC);
  sf_tensor *d3 = sf__t_dropout(ones, 0.25, 6, true, &LOC);
  CU_ASSERT(memcmp(sf__t_data(d1), sf__t_data(d2), 400000) == 0);
  CU_ASSERT(memcmp(sf__t_data(d1), sf__t_data(d3), 400000) != 0);
  int64_t zeros = 0, other = 0;
  for (int64_t i = 0; i < 100000; i++) {
    float v = sf__t_data(d1)[i];
    zeros += v == 0.0f;
    other += v != 0.0f && v != (float)(1 / 0.75);
  }
  printf("\n    dropout p=0.25: %.4f of 100000 zeroed ", zeros / 1e5);
  CU_ASSERT(fabs(zeros / 1e5 - 0.25) < 0.01 && other == 0);
  sf_tensor *id0 = sf__t_dropout(ones, 0.0, 5, true, &LOC), *id1 = sf__t_dropout(ones, 0.5, 5, false, &LOC);
  CU_ASSERT(id0 == ones && id1 == ones);
  EXPECT_ERROR(sf__t_dropout(ones, 1.5, 5, true, &LOC),
               "t.sflow:3:7: runtime error: dropout: p must be in [0, 1], not 1.5");
  /* Attention: one head, one query over two keys of which the second is
   * padding: the output is the first value exactly. */
  sf_tensor *q = mk(3, SHAPE(1, 1, 2), (float[]){1, 0});
  sf_tensor *k = mk(3, SHAPE(1, 2, 2), (float[]){1, 0, 5, 5});
  sf_tensor *v = mk(3, SHAPE(1, 2, 2), (float[]){3, 4, 100, 100});
  sf_array *m = i64s(2, (int64_t[]){1, 0}), *none = i64s(0, NULL), *m3 = i64s(3, (int64_t[]){1, 1, 1});
  sf_tensor *o = sf__t_attention(q, k, v, m, 1, &LOC);
  check_vals("attention padded", o, (float[]){3, 4}, 2, 1e-6f);
  /* Unmasked: softmax([1, 5] / sqrt 2) weights. */
  sf_tensor *o2 = sf__t_attention(q, k, v, none, 1, &LOC);
  double p1 = 1 / (1 + exp(4 / sqrt(2.0)));
  check_vals("attention", o2, (float[]){(float)(3 * p1 + 100 * (1 - p1)), (float)(4 * p1 + 100 * (1 - p1))}, 2, 1e-4f);
  EXPECT_ERROR(sf__t_attention(q, k, v, m, 3, &LOC),
               "t.sflow:3:7: runtime error: attention: 3 heads do not divide the width 2 of q [1, 1, 2]");
  EXPECT_ERROR(sf__t_attention(q, k, v, m3, 1, &LOC),
               "t.sflow:3:7: runtime error: attention: the mask has 3 entries, but keys [1, 2, 2] "
               "need 2 (B * S, one per key; [] for none)");
  EXPECT_ERROR(sf__t_attention(q, k, x, m, 1, &LOC),
               "t.sflow:3:7: runtime error: attention: q [1, 1, 2], k [1, 2, 2] and v [1, 4] must "
               "be (B, T, D), (B, S, D) and (B, S, D)");
  /* Clipping: gradients 3 and 4 (norm 5) to norm 1; a large max_norm
   * leaves them alone. */
  sf_tensor *p0 = mk(1, SHAPE(1), (float[]){0}), *p1t = mk(1, SHAPE(1), (float[]){0});
  p0->req = p1t->req = true;
  p0->grad = mk(1, SHAPE(1), (float[]){3});
  p1t->grad = mk(1, SHAPE(1), (float[]){4});
  sf_array *ps = sf_array_new(&sf__type_tensor, 2, &LOC);
  ((sf_tensor **)ps->data)[0] = p0;
  ((sf_tensor **)ps->data)[1] = p1t;
  CU_ASSERT(fabs(sf__clip_grad_norm(ps, 10.0, &LOC) - 5.0) < 1e-12);
  CU_ASSERT(sf__t_data(p0->grad)[0] == 3.0f);
  CU_ASSERT(fabs(sf__clip_grad_norm(ps, 1.0, &LOC) - 5.0) < 1e-12);
  check_vals("clipped", p0->grad, (float[]){0.6f}, 1, 1e-6f);
  check_vals("clipped", p1t->grad, (float[]){0.8f}, 1, 1e-6f);
  sf_release(ps); /* releases p0 and p1t */
  sf_tensor *all[] = {w, e, x, g, b, y, ones, d1, d2, d3, id0, id1, q, k, v, o, o2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_array *arrs[] = {ids, sh, bad, sh2, m, none, m3};
  for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++)
    sf_release(arrs[i]);
}

/* ------------------------------------------- per-sample dropout, vectors */

typedef struct {
  sf_array *index, *mask;
  int64_t heads, stream;
  double p;
} rows_ctx;
static sf_tensor *f_dropout_rows(sf_tensor **in, void *ctx) {
  rows_ctx *c = ctx;
  return sf__t_dropout_rows(in[0], c->p, 3, c->index, c->stream, true, &LOC);
}
static sf_tensor *f_attention_dropout(sf_tensor **in, void *ctx) {
  rows_ctx *c = ctx;
  return sf__t_attention_dropout(in[0], in[1], in[2], c->mask, c->heads, c->p, 3, c->index,
                                 c->stream, true, &LOC);
}

/* Row r of x (rows, n) alone, as a (1, n) tensor (a copy). */
static sf_tensor *row_of(sf_tensor *x, int64_t r) {
  int64_t n = x->numel / x->shape[0];
  sf_tensor *t = mk(2, SHAPE(1, n), sf__t_data(x) + r * n);
  return t;
}

#ifdef SF__AVX2
/* Whether exp8 and phi8 of x[0..8) differ in any bit from exp4 and phi4. */
static SF__AVX2 int avx2_differs(const float *x) {
  sf__f8 v;
  memcpy(&v, x, sizeof v);
  sf__f8 e = sf__exp8(-0.5f * v * v), p = sf__phi8(v);
  float e8[8], p8[8];
  memcpy(e8, &e, sizeof e8);
  memcpy(p8, &p, sizeof p8);
  for (int h = 0; h < 2; h++) {
    sf__f4 v4 = sf__ld4(x + 4 * h), e4 = sf__exp4(-0.5f * v4 * v4), p4 = sf__phi4(v4);
    if (memcmp(&e4, e8 + 4 * h, sizeof e4) || memcmp(&p4, p8 + 4 * h, sizeof p4))
      return 1;
  }
  return 0;
}

/* The same for exp16 and phi16 (AVX-512F) of x[0..16). */
static SF__AVX512 int avx512_differs(const float *x) {
  sf__f16 v;
  memcpy(&v, x, sizeof v);
  sf__f16 e = sf__exp16(-0.5f * v * v), p = sf__phi16(v);
  float e16[16], p16[16];
  memcpy(e16, &e, sizeof e16);
  memcpy(p16, &p, sizeof p16);
  for (int h = 0; h < 4; h++) {
    sf__f4 v4 = sf__ld4(x + 4 * h), e4 = sf__exp4(-0.5f * v4 * v4), p4 = sf__phi4(v4);
    if (memcmp(&e4, e16 + 4 * h, sizeof e4) || memcmp(&p4, p16 + 4 * h, sizeof p4))
      return 1;
  }
  return 0;
}
#endif

/* dropout_rows and attention_dropout: finite differences; a row's mask is
 * the same alone as in a batch (what makes 1, 2 and 4 workers agree) and
 * follows (seed, index, stream); errors.  Then simd.h's exp and normal CDF
 * against libm's, and the masked softmax's right-padding path against the
 * general one. */
static void test_dropout_rows(void) {
  rows_ctx d = {.index = i64s(4, (int64_t[]){7, 3, 7, 100}), .p = 0.4, .stream = 2};
  sf_tensor *x[1] = {rnd(2, SHAPE(4, 5), -1, 1, true)};
  gradcheck("dropout_rows p=0.4", f_dropout_rows, &d, 1, x);
  release_all(x, 1);
  rows_ctx a = {.index = i64s(2, (int64_t[]){41, 5}), .mask = i64s(8, (int64_t[]){1, 1, 1, 0, 1, 0, 0, 1}),
                .heads = 2, .p = 0.3, .stream = 1};
  sf_tensor *q[3] = {rnd(3, SHAPE(2, 4, 6), -1, 1, true), rnd(3, SHAPE(2, 4, 6), -1, 1, true),
                     rnd(3, SHAPE(2, 4, 6), -1, 1, true)};
  gradcheck("attention_dropout p=0.3", f_attention_dropout, &a, 3, q);

  /* Batch independence: each row's values equal the row run alone. */
  sf_tensor *ones = sf__t_full(2, SHAPE(4, 64), 1.0f);
  sf_tensor *all = sf__t_dropout_rows(ones, 0.5, 9, d.index, 0, true, &LOC);
  bool same = true;
  for (int64_t r = 0; r < 4; r++) {
    sf_tensor *one = row_of(ones, r);
    sf_array *ix = i64s(1, (int64_t[]){((int64_t *)d.index->data)[r]});
    sf_tensor *alone = sf__t_dropout_rows(one, 0.5, 9, ix, 0, true, &LOC);
    same = same && memcmp(sf__t_data(alone), sf__t_data(all) + r * 64, 64 * sizeof(float)) == 0;
    sf_release(alone);
    sf_release(one);
    sf_release(ix);
  }
  CU_ASSERT(same);
  const float *m = sf__t_data(all);
  CU_ASSERT(memcmp(m, m + 2 * 64, 64 * sizeof(float)) == 0); /* index 7 twice: one mask */
  CU_ASSERT(memcmp(m, m + 64, 64 * sizeof(float)) != 0);     /* 7 and 3 differ */
  sf_tensor *s1 = sf__t_dropout_rows(ones, 0.5, 9, d.index, 1, true, &LOC);
  sf_tensor *s2 = sf__t_dropout_rows(ones, 0.5, 10, d.index, 0, true, &LOC);
  CU_ASSERT(memcmp(m, sf__t_data(s1), 64 * sizeof(float)) != 0); /* another stream */
  CU_ASSERT(memcmp(m, sf__t_data(s2), 64 * sizeof(float)) != 0); /* another seed */
  sf_tensor *off = sf__t_dropout_rows(ones, 0.5, 9, d.index, 0, false, &LOC);
  CU_ASSERT(off == ones);
  /* attention_dropout: batch row 1 alone gives batch row 1's output. */
  sf__no_grad = true;
  sf_tensor *o = sf__t_attention_dropout(q[0], q[1], q[2], a.mask, 2, 0.3, 3, a.index, 1, true, &LOC);
  sf_tensor *q1 = sf__t_row(q[0], 1, &LOC), *k1 = sf__t_row(q[1], 1, &LOC), *v1 = sf__t_row(q[2], 1, &LOC);
  sf_tensor *q1r = sf__t_reshape(q1, 3, SHAPE(1, 4, 6), &LOC), *k1r = sf__t_reshape(k1, 3, SHAPE(1, 4, 6), &LOC);
  sf_tensor *v1r = sf__t_reshape(v1, 3, SHAPE(1, 4, 6), &LOC);
  sf_array *m1 = i64s(4, (int64_t[]){1, 0, 0, 1}), *i1 = i64s(1, (int64_t[]){5});
  sf_tensor *o1 = sf__t_attention_dropout(q1r, k1r, v1r, m1, 2, 0.3, 3, i1, 1, true, &LOC);
  check_vals("attention_dropout row alone", o1, sf__t_data(o) + 24, 24, 1e-6f);
  sf_tensor *plain = sf__t_attention(q[0], q[1], q[2], a.mask, 2, &LOC);
  sf_tensor *ev = sf__t_attention_dropout(q[0], q[1], q[2], a.mask, 2, 0.3, 3, a.index, 1, false, &LOC);
  check_vals("attention_dropout off", ev, sf__t_data(plain), 48, 0);
  sf__no_grad = false;
  EXPECT_ERROR(sf__t_dropout_rows(ones, 0.5, 9, a.index, 0, true, &LOC),
               "t.sflow:3:7: runtime error: dropout_rows: index has 2 entries, but the tensor "
               "[4, 64] needs one per row of its first axis");
  EXPECT_ERROR(sf__t_dropout_rows(ones, 0.5, -1, d.index, 0, true, &LOC),
               "t.sflow:3:7: runtime error: dropout_rows: seed must be >= 0, not -1");
  EXPECT_ERROR(sf__t_attention_dropout(q[0], q[1], q[2], a.mask, 2, 0.3, 3, d.index, 1, true, &LOC),
               "t.sflow:3:7: runtime error: attention_dropout: index has 4 entries, but the "
               "tensor [2, 4, 6] needs one per row of its first axis");
  sf_tensor *rel[] = {ones, all, s1, s2, off, o, q1, k1, v1, q1r, k1r, v1r, o1, plain, ev};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
    sf_release(rel[i]);
  release_all(q, 3);
  sf_release(m1);
  sf_release(i1);

  /* simd.h: exp within 2 ulp of libm on [-87, 0], 0 below and for -inf,
   * NaN kept; Φ within 5e-6 relative of erfc's on [-6, 8]. */
  double worst_ulp = 0, worst_rel = 0;
  for (float v = -87.0f; v <= 0.0f; v += 0.00071f) {
    double e = exp((double)v);
    float ef = (float)e, ulp = nextafterf(ef, INFINITY) - ef;
    double u = fabs(sf__exp4(sf__splat4(v))[0] - e) / ulp;
    worst_ulp = u > worst_ulp ? u : worst_ulp;
  }
  sf__f4 edge = sf__exp4((sf__f4){-INFINITY, -90.0f, NAN, 0.0f});
  CU_ASSERT(edge[0] == 0.0f && edge[1] == 0.0f && isnan(edge[2]) && edge[3] == 1.0f);
  for (float v = -6.0f; v <= 8.0f; v += 0.00031f) {
    double want = 0.5 * erfc(-(double)v / sqrt(2.0));
    double r = fabs(sf__phi4(sf__splat4(v))[0] - want) / want;
    worst_rel = r > worst_rel ? r : worst_rel;
  }
  printf("\n    simd exp: max %.2f ulp; normal CDF: max relative error %.2e ", worst_ulp, worst_rel);
  CU_ASSERT(worst_ulp <= 2.0);
  CU_ASSERT(worst_rel <= 5e-6);
  /* The eight-lane versions (AVX2) give the four-lane bits, and so does the
   * GELU op whichever it dispatches to. */
  int64_t nsweep = 4000, diff8 = 0, diff16 = 0;
  sf_tensor *sx = mk(1, SHAPE(4003), NULL);
  for (int64_t i = 0; i < 4003; i++)
    sf__t_data(sx)[i] = -12.0f + 0.005f * (float)i;
#ifdef SF__AVX2
  if (sf__have_avx2())
    for (int64_t i = 0; i < nsweep; i += 8)
      diff8 += avx2_differs(sf__t_data(sx) + i);
  if (sf__have_avx512())
    for (int64_t i = 0; i < nsweep; i += 16)
      diff16 += avx512_differs(sf__t_data(sx) + i);
  printf("\n    avx512 %s: %ld of %ld blocks differ from 4 lanes ",
         sf__have_avx512() ? "present" : "absent", (long)diff16, (long)(nsweep / 16));
#endif
  CU_ASSERT(diff8 == 0);
  CU_ASSERT(diff16 == 0);
  /* GELU's backward, whichever width it dispatches to, is the four-lane
   * g (Φ(x) + x φ(x)) bit for bit (the tail of 3 included). */
  {
    sf_tensor *gxs = mk(1, SHAPE(4003), sf__t_data(sx));
    gxs->req = true;
    sf_tensor *gys = sf__t_unary(SF__U_GELU, gxs, &LOC);
    sf_tensor *gl = sf__t_reduce(SF__R_SUM, gys, SF__ALL_AXES, &LOC);
    sf__backward(gl, &LOC);
    int64_t diffb = 0;
    for (int64_t i = 0; i + 4 <= 4000; i += 4) {
      sf__f4 v = sf__ld4(sf__t_data(sx) + i);
      sf__f4 pdf = sf__splat4(0.39894228040143267794f) * sf__exp4(sf__splat4(-0.5f) * v * v);
      sf__f4 want = sf__splat4(1.0f) * (sf__phi4(v) + v * pdf);
      diffb += memcmp(&want, sf__t_data(gxs->grad) + i, sizeof want) != 0;
    }
    CU_ASSERT(diffb == 0);
    sf_release(gl);
    sf_release(gys);
    sf_release(gxs);
  }
  sf_tensor *sg = sf__t_unary(SF__U_GELU, sx, &LOC);
  int64_t diffg = 0;
  for (int64_t i = 0; i + 4 <= 4003; i += 4) {
    sf__f4 v = sf__ld4(sf__t_data(sx) + i), y4 = v * sf__phi4(v);
    diffg += memcmp(&y4, sf__t_data(sg) + i, sizeof y4) != 0;
  }
  printf("\n    avx2 %s: %ld of %ld blocks differ from 4 lanes; gelu op: %ld ",
         sf__have_avx2() ? "present" : "absent", (long)diff8, (long)(nsweep / 8), (long)diffg);
  CU_ASSERT(diffg == 0);
  sf_release(sx);
  sf_release(sg);
  /* gelu through the vector path, tails included (7 values). */
  sf_tensor *gx = mk(1, SHAPE(7), (float[]){-5, -1, -0.1f, 0, 0.5f, 2, 10});
  sf_tensor *gy = sf__t_unary(SF__U_GELU, gx, &LOC);
  float gw[7];
  for (int i = 0; i < 7; i++) {
    double xv = sf__t_data(gx)[i];
    gw[i] = (float)(xv * 0.5 * erfc(-xv / sqrt(2.0)));
  }
  check_vals("gelu", gy, gw, 7, 2e-7f);
  CU_ASSERT(fabsf(sf__t_data(gy)[0] - gw[0]) <= 1e-5f * fabsf(gw[0])); /* the tail, relatively */

  /* Masked softmax: right padding (the prefix path) and a scattered mask
   * (the general one) both equal attention over the kept keys alone. */
  sf_tensor *aq = rnd(3, SHAPE(1, 3, 4), -1, 1, false), *ak = rnd(3, SHAPE(1, 7, 4), -1, 1, false);
  sf_tensor *av = rnd(3, SHAPE(1, 7, 4), -1, 1, false);
  sf_array *pre = i64s(7, (int64_t[]){1, 1, 1, 1, 1, 0, 0});
  sf_array *sc = i64s(7, (int64_t[]){0, 1, 0, 1, 1, 0, 1});
  sf_tensor *kp = sf__t_rows(sf__t_reshape(ak, 2, SHAPE(7, 4), &LOC), 0, 5, &LOC);
  sf_tensor *vp = sf__t_rows(sf__t_reshape(av, 2, SHAPE(7, 4), &LOC), 0, 5, &LOC);
  float ks[16], vs[16];
  int64_t kept[4] = {1, 3, 4, 6};
  for (int i = 0; i < 4; i++) {
    memcpy(ks + 4 * i, sf__t_data(ak) + 4 * kept[i], 4 * sizeof(float));
    memcpy(vs + 4 * i, sf__t_data(av) + 4 * kept[i], 4 * sizeof(float));
  }
  sf_tensor *kpr = sf__t_reshape(kp, 3, SHAPE(1, 5, 4), &LOC), *vpr = sf__t_reshape(vp, 3, SHAPE(1, 5, 4), &LOC);
  sf_tensor *ksr = mk(3, SHAPE(1, 4, 4), ks), *vsr = mk(3, SHAPE(1, 4, 4), vs);
  sf_array *none = i64s(0, NULL);
  sf_tensor *op = sf__t_attention(aq, ak, av, pre, 2, &LOC), *wp = sf__t_attention(aq, kpr, vpr, none, 2, &LOC);
  sf_tensor *os = sf__t_attention(aq, ak, av, sc, 2, &LOC), *ws = sf__t_attention(aq, ksr, vsr, none, 2, &LOC);
  check_vals("softmax right padding", op, sf__t_data(wp), 12, 1e-6f);
  check_vals("softmax scattered mask", os, sf__t_data(ws), 12, 1e-6f);
  sf_tensor *rel2[] = {gx, gy, aq, ak, av, kp, vp, kpr, vpr, ksr, vsr, op, wp, os, ws};
  for (size_t i = 0; i < sizeof rel2 / sizeof *rel2; i++)
    sf_release(rel2[i]);
  sf_array *arrs[] = {d.index, a.index, a.mask, pre, sc, none};
  for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++)
    sf_release(arrs[i]);
}

static sf_tensor *f_linear_fused(sf_tensor **in, void *ctx) {
  (void)ctx;
  return sf__t_linear(in[0], in[1], in[2], &LOC);
}

/* The bias-in-the-product Linear: finite differences for x, w and b (x 3-D,
 * so the bias gradient sums over two axes), the values of the composed
 * x wᵀ + b, and a bias of another shape going the composed way. */
static void test_linear_fused(void) {
  sf_tensor *in[3] = {rnd(3, SHAPE(2, 3, 4), -1, 1, true), rnd(2, SHAPE(5, 4), -1, 1, true),
                      rnd(1, SHAPE(5), -1, 1, true)};
  gradcheck("linear (bias in the product)", f_linear_fused, NULL, 3, in);
  sf__no_grad = true;
  sf_tensor *y = sf__t_linear(in[0], in[1], in[2], &LOC);
  sf_tensor *h = sf__t_matmul_nt(in[0], in[1], &LOC), *want = sf__t_binary(SF_TOP_ADD, h, in[2], &LOC);
  check_shape(y, 3, SHAPE(2, 3, 5));
  check_vals("linear fused", y, sf__t_data(want), 30, 1e-6f);
  sf_tensor *b2 = rnd(2, SHAPE(3, 5), -1, 1, false);
  sf_tensor *y2 = sf__t_linear(in[0], in[1], b2, &LOC), *want2 = sf__t_binary(SF_TOP_ADD, h, b2, &LOC);
  check_vals("linear, (3, 5) bias", y2, sf__t_data(want2), 30, 0);
  sf__no_grad = false;
  EXPECT_ERROR(sf__t_linear(in[2], in[1], in[2], &LOC),
               "t.sflow:3:7: runtime error: linear: input of shape [5] does not fit a weight of "
               "shape [5, 4] (the weight is (out, in), the input (..., in))");
  sf_tensor *rel[] = {y, h, want, b2, y2, want2};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
    sf_release(rel[i]);
  release_all(in, 3);
}

/* A Linear's input gradient adds into the gradient the input already
 * has (sgemm with beta 1, no zeroing and no add pass): x feeds two
 * products, and its gradient is bitwise the two products into zeros
 * added, for out up to the library's k block (as here). */
static void test_grad_acc_product(void) {
  enum { R = 64, IN = 48, O1 = 32, O2 = 40 };
  sf_tensor *x = rnd(2, SHAPE(R, IN), -1, 1, true), *w1 = rnd(2, SHAPE(O1, IN), -1, 1, false);
  sf_tensor *w2 = rnd(2, SHAPE(O2, IN), -1, 1, false), *u1 = rnd(2, SHAPE(R, O1), -1, 1, false);
  sf_tensor *u2 = rnd(2, SHAPE(R, O2), -1, 1, false);
  sf_tensor *y1 = sf__t_matmul_nt(x, w1, &LOC), *y2 = sf__t_matmul_nt(x, w2, &LOC);
  sf_tensor *p1 = sf__t_binary(SF_TOP_MUL, y1, u1, &LOC), *p2 = sf__t_binary(SF_TOP_MUL, y2, u2, &LOC);
  sf_tensor *s1 = sf__t_reduce(SF__R_SUM, p1, SF__ALL_AXES, &LOC);
  sf_tensor *s2 = sf__t_reduce(SF__R_SUM, p2, SF__ALL_AXES, &LOC);
  sf_tensor *l = sf__t_binary(SF_TOP_ADD, s1, s2, &LOC);
  sf__backward(l, &LOC);
  float *g1 = malloc(R * IN * sizeof *g1), *g2 = malloc(R * IN * sizeof *g2);
  sf__sgemm(false, false, R, IN, O1, 1.0f, sf__t_data(u1), O1, sf__t_data(w1), IN, 0.0f, g1, IN);
  sf__sgemm(false, false, R, IN, O2, 1.0f, sf__t_data(u2), O2, sf__t_data(w2), IN, 0.0f, g2, IN);
  int64_t bad = -1;
  for (int64_t i = 0; i < R * IN && bad < 0; i++) {
    float want = g2[i] + g1[i];
    if (memcmp(&sf__t_data(x->grad)[i], &want, sizeof want))
      bad = i;
  }
  if (bad >= 0)
    fprintf(stderr, "\n  grad_acc_product: value %lld: %.9g want %.9g\n", (long long)bad,
            sf__t_data(x->grad)[bad], g2[bad] + g1[bad]);
  CHECK_INT(bad, -1);
  free(g1);
  free(g2);
  sf_tensor *rel[] = {x, w1, w2, u1, u2, y1, y2, p1, p2, s1, s2, l};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++)
    sf_release(rel[i]);
}

/* ------------------------------------------------------ rows, stack, cat */

static sf_array *tensors(int n, sf_tensor **ts) {
  sf_array *a = sf_array_new(&sf__type_tensor, n, &LOC);
  for (int i = 0; i < n; i++) {
    sf_retain(ts[i]);
    ((sf_tensor **)a->data)[i] = ts[i];
  }
  return a;
}

/* (x * x)[-2] and the rows 1..3 of xᵀ: the gradient only in the rows taken. */
static sf_tensor *f_rows(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *sq = sf__t_binary(SF_TOP_MUL, in[0], in[0], &LOC);
  sf_tensor *r = sf__t_row(sq, -2, &LOC);
  sf_tensor *t = sf__t_transpose(in[0], 0, 1, &LOC);
  sf_tensor *s = sf__t_rows(t, 1, 3, &LOC); /* (2, 4) */
  sf_tensor *s0 = sf__t_row(s, 1, &LOC);    /* (4) */
  sf_tensor *out = sf__t_binary(SF_TOP_MUL, r, s0, &LOC);
  sf_tensor *all[] = {sq, r, t, s, s0};
  for (size_t i = 0; i < 5; i++)
    sf_release(all[i]);
  return out;
}

/* stack([a[1], b * b, a[0]]) and cat([a, b, a], axis 0 or 1). */
static sf_tensor *f_stack(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *a1 = sf__t_row(in[0], 1, &LOC), *a0 = sf__t_row(in[0], 0, &LOC);
  sf_tensor *bb = sf__t_binary(SF_TOP_MUL, in[1], in[1], &LOC);
  sf_array *ts = tensors(3, (sf_tensor *[]){a1, bb, a0});
  sf_tensor *out = sf__t_stack(ts, &LOC);
  sf_release(ts);
  sf_release(a1);
  sf_release(a0);
  sf_release(bb);
  return out;
}

static sf_tensor *f_cat(sf_tensor **in, void *ctx) {
  sf_tensor *bb = sf__t_binary(SF_TOP_MUL, in[1], in[1], &LOC);
  sf_array *ts = tensors(3, (sf_tensor *[]){in[0], bb, in[0]});
  sf_tensor *out = sf__t_cat(ts, *(int64_t *)ctx, &LOC);
  sf_release(ts);
  sf_release(bb);
  return out;
}

/* Row views, stack and cat: forward values, finite-difference gradients
 * (through strided views and repeated inputs), and their errors. */
static void test_index_stack_cat(void) {
  sf_tensor *x = mk(2, SHAPE(3, 2), (float[]){1, 2, 3, 4, 5, 6});
  sf_tensor *r = sf__t_row(x, -1, &LOC), *s = sf__t_rows(x, 1, 3, &LOC);
  check_shape(r, 1, SHAPE(2));
  check_vals("x[-1]", r, (float[]){5, 6}, 2, 0);
  check_shape(s, 2, SHAPE(2, 2));
  check_vals("x[1..3]", s, (float[]){3, 4, 5, 6}, 4, 0);
  CU_ASSERT(r->st == x->st && s->st == x->st); /* views, no copy */
  sf_tensor *e = sf__t_rows(x, 2, 2, &LOC);
  check_shape(e, 2, SHAPE(0, 2));
  sf_tensor *z = sf__t_row(r, 0, &LOC);
  check_shape(z, 0, NULL);
  check_vals("x[-1][0]", z, (float[]){5}, 1, 0);
  EXPECT_ERROR(sf__t_row(x, 3, &LOC), "t.sflow:3:7: runtime error: tensor index 3 out of bounds "
                                       "for length 3 (shape [3, 2])");
  EXPECT_ERROR(sf__t_row(x, -4, &LOC), "t.sflow:3:7: runtime error: tensor index -4 out of "
                                        "bounds for length 3 (shape [3, 2])");
  EXPECT_ERROR(sf__t_rows(x, 2, 1, &LOC), "t.sflow:3:7: runtime error: tensor slice [2..1] out "
                                           "of range for length 3 (shape [3, 2])");
  EXPECT_ERROR(sf__t_row(z, 0, &LOC), "t.sflow:3:7: runtime error: tensor index: a 0-d tensor "
                                       "has no rows to index (use item() for its value)");
  sf_array *none = sf_array_new(&sf__type_tensor, 0, &LOC);
  EXPECT_ERROR(sf__t_stack(none, &LOC),
               "t.sflow:3:7: runtime error: stack: needs at least one tensor, got an empty array");
  sf_array *bad = tensors(2, (sf_tensor *[]){x, r});
  EXPECT_ERROR(sf__t_cat(bad, 0, &LOC),
               "t.sflow:3:7: runtime error: cat: tensor 1 has shape [2], but tensor 0 has [3, 2] "
               "(cat needs the same shape except along axis 0)");
  EXPECT_ERROR(sf__t_cat(bad, 2, &LOC), "t.sflow:3:7: runtime error: cat: axis 2 is out of range for a tensor of shape [3, 2]");
  sf_array *two = tensors(2, (sf_tensor *[]){x, s});
  sf_tensor *c = sf__t_cat(two, 0, &LOC);
  check_vals("cat", c, (float[]){1, 2, 3, 4, 5, 6, 3, 4, 5, 6}, 10, 0);
  sf_tensor *xs[1] = {rnd(2, SHAPE(4, 4), -1, 1, true)};
  gradcheck("rows of x*x and of x^T", f_rows, NULL, 1, xs);
  release_all(xs, 1);
  sf_tensor *ab[2] = {rnd(2, SHAPE(2, 3), -1, 1, true), rnd(1, SHAPE(3), -1, 1, true)};
  gradcheck("stack of rows", f_stack, NULL, 2, ab);
  release_all(ab, 2);
  int64_t ax0 = 0, ax1 = -1;
  sf_tensor *cd[2] = {rnd(2, SHAPE(2, 2), -1, 1, true), rnd(2, SHAPE(2, 3), -1, 1, true)};
  gradcheck("cat axis -1, repeated input", f_cat, &ax1, 2, cd);
  release_all(cd, 2);
  sf_tensor *ce[2] = {rnd(2, SHAPE(2, 3), -1, 1, true), rnd(2, SHAPE(1, 3), -1, 1, false)};
  gradcheck("cat axis 0, one constant", f_cat, &ax0, 2, ce);
  release_all(ce, 2);
  sf_tensor *all[] = {x, r, s, e, z, c};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(none);
  sf_release(bad);
  sf_release(two);
}

/* -------------------------------------- select, narrow, index_select */

/* select(x*x, 1, -1) times narrow(xᵀ, 0, -3, 2)'s select 1 along axis 1:
 * views along inner axes of contiguous and strided tensors. */
static sf_tensor *f_select_narrow(sf_tensor **in, void *ctx) {
  (void)ctx;
  sf_tensor *sq = sf__t_binary(SF_TOP_MUL, in[0], in[0], &LOC); /* (4, 3) */
  sf_tensor *a = sf__t_select(sq, 1, -1, &LOC);                  /* (4) */
  sf_tensor *t = sf__t_transpose(in[0], 0, 1, &LOC);             /* (3, 4) */
  sf_tensor *n = sf__t_narrow(t, -1, -3, 2, &LOC);               /* (3, 2) */
  sf_tensor *b = sf__t_select(n, 1, 1, &LOC);                    /* (3) */
  sf_tensor *c = sf__t_narrow(in[0], 1, 1, 2, &LOC);             /* (4, 2) */
  sf_tensor *c0 = sf__t_narrow(c, 1, 0, 1, &LOC);               /* (4, 1) */
  sf_tensor *ab = sf__t_binary(SF_TOP_MUL, a, c0, &LOC);          /* (4, 4) */
  sf_tensor *s = sf__t_reduce(SF__R_SUM, b, SF__ALL_AXES, &LOC);
  sf_tensor *out = sf__t_binary(SF_TOP_ADD, ab, s, &LOC);
  sf_tensor *all[] = {sq, a, t, n, b, c, c0, ab, s};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  return out;
}

typedef struct {
  int64_t axis;
  int64_t n;
  const int64_t *idx;
  bool gather;
} gather_ctx;

static sf_tensor *f_gather(sf_tensor **in, void *ctx) {
  gather_ctx *g = ctx;
  sf_array *ix = i64s(g->n, g->idx);
  sf_tensor *sq = sf__t_binary(SF_TOP_MUL, in[0], in[0], &LOC);
  sf_tensor *out = g->gather ? sf__t_gather(sq, g->axis, ix, &LOC)
                             : sf__t_index_select(sq, g->axis, ix, &LOC);
  sf_release(sq);
  sf_release(ix);
  return out;
}

static void test_select_narrow_gather(void) {
  sf_tensor *x = mk(3, SHAPE(2, 3, 2), (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  sf_tensor *a = sf__t_select(x, 1, -1, &LOC), *b = sf__t_narrow(x, 2, 1, 1, &LOC);
  check_shape(a, 2, SHAPE(2, 2));
  check_vals("select(x, 1, -1)", a, (float[]){4, 5, 10, 11}, 4, 0);
  check_shape(b, 3, SHAPE(2, 3, 1));
  check_vals("narrow(x, 2, 1, 1)", b, (float[]){1, 3, 5, 7, 9, 11}, 6, 0);
  CU_ASSERT(a->st == x->st && b->st == x->st); /* views */
  sf_tensor *c = sf__t_narrow(x, -2, -2, 2, &LOC);
  check_vals("narrow(x, -2, -2, 2)", c, (float[]){2, 3, 4, 5, 8, 9, 10, 11}, 8, 0);
  sf_tensor *e = sf__t_narrow(x, 1, 3, 0, &LOC);
  check_shape(e, 3, SHAPE(2, 0, 2));
  sf_array *ix = i64s(4, (int64_t[]){2, 0, -1, 2});
  sf_tensor *is = sf__t_index_select(x, 1, ix, &LOC);
  check_shape(is, 3, SHAPE(2, 4, 2));
  check_vals("index_select", is, (float[]){4, 5, 0, 1, 4, 5, 4, 5, 10, 11, 6, 7, 10, 11, 10, 11},
             16, 0);
  CU_ASSERT(is->st != x->st);
  /* gather along axis 2 with k = 1: one entry per (i, j), as picking a
   * target's log-probability. */
  sf_array *gx = i64s(6, (int64_t[]){1, 0, 0, 1, -1, 0});
  sf_tensor *ga = sf__t_gather(x, 2, gx, &LOC);
  check_shape(ga, 3, SHAPE(2, 3, 1));
  check_vals("gather", ga, (float[]){1, 2, 4, 7, 9, 10}, 6, 0);
  sf_array *none = i64s(0, NULL);
  sf_tensor *z = sf__t_index_select(x, 0, none, &LOC);
  check_shape(z, 3, SHAPE(0, 3, 2));
  EXPECT_ERROR(sf__t_select(x, 1, 3, &LOC), "t.sflow:3:7: runtime error: select: index 3 out of "
                                            "bounds for length 3 along axis 1 (shape [2, 3, 2])");
  EXPECT_ERROR(sf__t_select(x, 3, 0, &LOC), "t.sflow:3:7: runtime error: select: axis 3 is out of "
                                            "range for a tensor of shape [2, 3, 2]");
  EXPECT_ERROR(sf__t_narrow(x, 1, 2, 2, &LOC), "t.sflow:3:7: runtime error: narrow: start 2 and "
                                               "length 2 do not fit length 3 along axis 1 (shape "
                                               "[2, 3, 2])");
  EXPECT_ERROR(sf__t_narrow(x, 0, -3, 1, &LOC), "t.sflow:3:7: runtime error: narrow: start -3 and "
                                                "length 1 do not fit length 2 along axis 0 (shape "
                                                "[2, 3, 2])");
  sf_array *bad = i64s(3, (int64_t[]){0, 1, -4});
  EXPECT_ERROR(sf__t_index_select(x, 1, bad, &LOC),
               "t.sflow:3:7: runtime error: index_select: index -4 (entry 2 of idx) out of bounds "
               "for length 3 along axis 1 (shape [2, 3, 2])");
  EXPECT_ERROR(sf__t_gather(x, 1, bad, &LOC),
               "t.sflow:3:7: runtime error: gather: idx has 3 entries, not a multiple of 4: along "
               "axis 1 of shape [2, 3, 2] it holds a row-major index of shape [2, 1, 2] with any "
               "length k in place of the 1");
  sf_tensor *s0 = sf__t_select(a, 0, 0, &LOC), *s00 = sf__t_select(s0, 0, 0, &LOC);
  EXPECT_ERROR(sf__t_select(s00, 0, 0, &LOC), "t.sflow:3:7: runtime error: select: axis 0 is out "
                                              "of range for a tensor of shape []");
  /* Finite differences through inner axes, strided views, and repeated
   * indices (their gradients add). */
  sf_tensor *xs[1] = {rnd(2, SHAPE(4, 3), -1, 1, true)};
  gradcheck("select and narrow, inner axes", f_select_narrow, NULL, 1, xs);
  release_all(xs, 1);
  const int64_t rep[] = {2, 0, 2, -1, 1};
  gather_ctx g1 = {1, 5, rep, false};
  sf_tensor *ys[1] = {rnd(3, SHAPE(2, 3, 2), -1, 1, true)};
  gradcheck("index_select axis 1, repeated", f_gather, &g1, 1, ys);
  gather_ctx g0 = {0, 3, (int64_t[]){1, 1, 0}, false};
  gradcheck("index_select axis 0, repeated", f_gather, &g0, 1, ys);
  const int64_t gi[] = {0, 2, 2, 1, 1, 1, 0, 0, 2, 2, -3, 1, 2, 0, 0, 1, 1, 1, 2, 0, 0, 2, 1, 0};
  gather_ctx g2 = {1, 24, gi, true}; /* an index of shape (2, 6, 2) into (2, 3, 2) */
  gradcheck("gather axis 1, k = 6", f_gather, &g2, 1, ys);
  release_all(ys, 1);
  /* Only the selected elements get a gradient. */
  sf_tensor *p = rnd(2, SHAPE(2, 3), -1, 1, true);
  sf_tensor *q = sf__t_select(p, 1, 1, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, q, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  check_vals("grad of select(p, 1, 1)", p->grad, (float[]){0, 1, 0, 0, 1, 0}, 6, 0);
  sf_tensor *all[] = {x, a, b, c, e, is, ga, z, s0, s00, p, q, l};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    sf_release(all[i]);
  sf_release(ix);
  sf_release(gx);
  sf_release(none);
  sf_release(bad);
}

/* ------------------------------------------------ f16 / bf16 rounding */

static float bits_f(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* Every half value converts back to itself; every midpoint between two
 * neighbours goes to the even one, a hair above or below it to the nearer
 * one; the edge cases PyTorch 2.15 gives (its bit patterns). */
static void test_half_rounding(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    bool f16nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    bool bfnan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (!f16nan && sf__f32_to_f16(sf__f16_to_f32((uint16_t)h)) != h)
      bad++;
    if (!bfnan && sf__f32_to_bf16(sf__bf16_to_f32((uint16_t)h)) != h)
      bad++;
    if (f16nan && !isnan(sf__f16_to_f32(sf__f32_to_f16(sf__f16_to_f32((uint16_t)h)))))
      bad++;
    if (bfnan && !isnan(sf__bf16_to_f32(sf__f32_to_bf16(sf__bf16_to_f32((uint16_t)h)))))
      bad++;
    /* Midpoints of h and h + 1 among positive finite values. */
    if (h < 0x7bff) {
      double lo = sf__f16_to_f32((uint16_t)h), hi = sf__f16_to_f32((uint16_t)(h + 1));
      float mid = (float)((lo + hi) / 2); /* exact in f32 */
      uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
      uint32_t mb;
      memcpy(&mb, &mid, 4);
      if (sf__f32_to_f16(mid) != even || sf__f32_to_f16(bits_f(mb + 1)) != h + 1 ||
          sf__f32_to_f16(bits_f(mb - 1)) != h)
        bad++;
    }
    if (h < 0x7f7f) {
      uint32_t mb = (h << 16) | 0x8000u;
      uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
      if (sf__f32_to_bf16(bits_f(mb)) != even || sf__f32_to_bf16(bits_f(mb + 1)) != h + 1 ||
          sf__f32_to_bf16(bits_f(mb - 1)) != h)
        bad++;
    }
  }
  CHECK_INT(bad, 0);
  /* torch.tensor([...]).to(torch.float16 / torch.bfloat16).view(torch.int16) */
  const float v[] = {70000.0f, 65520.0f, 65519.99f, 3.4e38f, 1e-8f, 0x1p-25f, 0x1p-25f * 1.0001f};
  const uint16_t f16[] = {0x7c00, 0x7c00, 0x7bff, 0x7c00, 0x0000, 0x0000, 0x0001};
  const uint16_t bf16[] = {18313, 18304, 18304, 32640, 12844, 13056, 13056};
  for (int i = 0; i < 7; i++) {
    CHECK_INT(sf__f32_to_f16(v[i]), f16[i]);
    CHECK_INT(sf__f32_to_bf16(v[i]), bf16[i]);
    CHECK_INT(sf__f32_to_f16(-v[i]), f16[i] | 0x8000);
  }
  CU_ASSERT(isnan(sf__f16_to_f32(sf__f32_to_f16(NAN))) && isnan(sf__bf16_to_f32(sf__f32_to_bf16(-NAN))));
  CU_ASSERT(isnan(sf__bf16_to_f32(sf__f32_to_bf16(bits_f(0x7f800001u))))); /* payload below bf16's */
  CU_ASSERT(isnan(sf__f16_to_f32(sf__f32_to_f16(bits_f(0x7f800001u)))));
  CHECK_INT(sf__f32_to_bf16(INFINITY), 0x7f80);
  CHECK_INT(sf__f32_to_f16(-INFINITY), 0xfc00);
  CHECK_INT(sf__f32_to_bf16(bits_f(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds up: inf */
  /* round_bf16: the values, and the gradient rounded as torch's
   * x.bfloat16().float() (an upstream of 1.0079 arrives as 1.0078125). */
  sf_tensor *x = mk(1, SHAPE(3), (float[]){1.00390625f, 1.01171875f, 0.1f});
  x->req = true;
  sf_tensor *r = sf__t_round_bf16(x, &LOC);
  check_vals("round_bf16", r, (float[]){1.0f, 1.015625f, 0.10009765625f}, 3, 0);
  sf_tensor *w = mk(1, SHAPE(3), (float[]){1.0079f, 3.0f, -2.0f});
  sf_tensor *rw = sf__t_binary(SF_TOP_MUL, r, w, &LOC);
  sf_tensor *l = sf__t_reduce(SF__R_SUM, rw, SF__ALL_AXES, &LOC);
  sf__backward(l, &LOC);
  check_vals("grad of round_bf16", x->grad, (float[]){1.0078125f, 3.0f, -2.0f}, 3, 0);
  sf_tensor *all[] = {x, r, w, rw, l};
  for (size_t i = 0; i < 5; i++)
    sf_release(all[i]);
}

/* nn.save with dtype bf16 and f16: the header names the dtype, the data
 * is 2 bytes a value, and nn.load brings back the rounded values; a dtype
 * we do not write is an error naming it. */
static void test_safetensors_save_halves(void) {
  char path[] = "/tmp/sflow_nn_XXXXXX";
  close(mkstemp(path));
  sf_str *ps = sf_str_new(path, (int64_t)strlen(path));
  linear_c l = {mk(2, SHAPE(2, 2), (float[]){0.1f, -70000.0f, 1e-6f, NAN}),
                mk(1, SHAPE(2), (float[]){65519.0f, -0.0f})};
  linear_c back = {mk(2, SHAPE(2, 2), NULL), mk(1, SHAPE(2), NULL)};
  const char *names[] = {"bf16", "F16", "BF16", "f16"};
  for (int k = 0; k < 4; k++) {
    bool bf = names[k][0] == 'b' || names[k][0] == 'B';
    sf_str *dt = sf_str_new(names[k], (int64_t)strlen(names[k]));
    sf_std_nn_save(&l, &linear_type, ps, dt, &linear_type, &LOC);
    sf_release(dt);
    size_t n = 0;
    char *bytes = read_all(path, &n);
    uint64_t hl = 0;
    memcpy(&hl, bytes, 8);
    char want[200];
    snprintf(want, sizeof want, "\"weight\":{\"dtype\":\"%s\",\"shape\":[2,2],\"data_offsets\":[0,8]}",
             bf ? "BF16" : "F16");
    CU_ASSERT(strstr(bytes + 8, want) != NULL);
    CHECK_INT(n, 8 + hl + 12);
    uint16_t h0;
    memcpy(&h0, bytes + 8 + hl, 2);
    CHECK_INT(h0, bf ? 0x3dcd : 0x2e66); /* 0.1 */
    free(bytes);
    sf_std_nn_load(&back, &linear_type, ps, true, &linear_type, &LOC);
    const float *w = sf__t_data(back.weight), *b = sf__t_data(back.bias);
    if (bf) {
      CU_ASSERT(w[0] == 0.10009765625f && w[1] == -70144.0f && w[2] == 9.98377799987793e-07f);
      CU_ASSERT(b[0] == 65536.0f);
    } else {
      CU_ASSERT(w[0] == 0.0999755859375f && w[1] == -INFINITY && w[2] == 1.0132789611816406e-06f);
      CU_ASSERT(b[0] == 65504.0f);
    }
    CU_ASSERT(isnan(w[3]) && b[1] == 0.0f && signbit(b[1]));
  }
  sf_str *dt = sf_str_new("fp8", 3);
  EXPECT_ERROR(sf_std_nn_save(&l, &linear_type, ps, dt, &linear_type, &LOC),
               "t.sflow:3:7: runtime error: nn.save: dtype \"fp8\" is not one of \"f32\", "
               "\"bf16\", \"f16\"");
  sf_release(dt);
  sf_value_release(&linear_type, &l);
  sf_value_release(&linear_type, &back);
  sf_release(ps);
  unlink(path);
}

int main(int argc, char **argv) {
  sf__nn_install();
  static const rt_test tests[] = {
      {"broadcast_forward", test_broadcast_forward},
      {"matmul_forward", test_matmul_forward},
      {"reduce_forward", test_reduce_forward},
      {"activations_forward", test_activations_forward},
      {"losses_forward", test_losses_forward},
      {"views", test_views},
      {"grad_binary", test_grad_binary},
      {"grad_scalar", test_grad_scalar},
      {"grad_matmul", test_grad_matmul},
      {"grad_unary", test_grad_unary},
      {"grad_reduce", test_grad_reduce},
      {"grad_losses", test_grad_losses},
      {"grad_accumulates", test_grad_accumulates},
      {"errors", test_errors},
      {"tape_released", test_tape_released},
      {"sgd", test_sgd},
      {"adamw", test_adamw},
      {"adamw_split", test_adamw_split},
      {"bias_grad_split", test_bias_grad_split},
      {"bmm_split", test_bmm_split},
      {"sgemm_split", test_sgemm_split},
      {"attention_fused", test_attention_fused},
      {"dropout_rows_split", test_dropout_rows_split},
      {"clip_split", test_clip_split},
      {"linear_and_params", test_linear_and_params},
      {"print_and_serialize", test_print_and_serialize},
      {"safetensors_round_trip", test_safetensors_round_trip},
      {"safetensors_halves", test_safetensors_halves},
      {"randn", test_randn},
      {"layers_forward", test_layers_forward},
      {"grad_layers", test_grad_layers},
      {"index_stack_cat", test_index_stack_cat},
      {"select_narrow_gather", test_select_narrow_gather},
      {"half_rounding", test_half_rounding},
      {"safetensors_save_halves", test_safetensors_save_halves},
      {"dropout_rows", test_dropout_rows},
      {"linear_fused", test_linear_fused},
      {"grad_acc_product", test_grad_acc_product},
      {"layer_norm_rows", test_layer_norm_rows},
      {NULL, NULL},
  };
  return rt_run("nn", tests, argc, argv);
}
