/*
 * test_rt_nn.c — the nn layer (runtime/nn/), its first half: every op's
 * forward on small cases checked by hand, every op's backward against
 * central finite differences, broadcasting, the error messages (shapes
 * named), the tape released after backward (live tensors and nodes
 * counted over 10k steps), SGD/AdamW steps against PyTorch's formulas
 * worked by hand, and the pool-split products, optimizer steps, clipping
 * and attention bitwise against their serial forms.  The layers,
 * serialization, safetensors, indexing and half rounding are
 * test_rt_nn_layers.c's; the helpers both share are nn_test.h's.
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
#include "nn_test.h"
#include "simd.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_nn", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

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
   * reference loop, another library or an unmeasured kernel); sflow's
   * own GEMM (the default) splits them all. */
  bool own = strncmp(sf__blas_sgemm(), "sflow", 5) == 0; /* gemm.c splits on any CPU */
  CHECK_INT(sf__blas_splits() - splits, own || align ? calls : 0);
  /* Below 2^24 multiply-adds (two blocks of OpenBLAS's small-product
   * paths' sizes) a library's product is one call (sflow's own GEMM,
   * SFLOW_BLAS=sflow, splits from 2^21: any split has its bits). */
  float *a = calloc(128 * 256, sizeof *a), *b = calloc(256 * 256, sizeof *b);
  float *c = calloc(128 * 256, sizeof *c);
  splits = sf__blas_splits();
  sf__blas_split_blocks(2);
  sf__sgemm(false, false, 128, 256, 256, 1.0f, a, 256, b, 256, 0.0f, c, 256);
  if (!own)
    CHECK_INT(sf__blas_splits() - splits, 0);
  free(a);
  free(b);
  free(c);
  sf__blas_split_blocks(was);
}

/* sflow's own GEMM (runtime/gpu/gemm.c) gives every element the one
 * chain of fmas over k that the plain loop below makes, so its bits are
 * the same under every kernel (SFLOW_GEMM_ISA=avx512|avx2|portable: the
 * ctest runs this under each) and every split over 1, 2 and 3 threads:
 * random shapes with odd edges and padded leading dimensions, k past the
 * kernel's kc blocks, every transpose pair, alpha 1 and not, beta 0, 1
 * and 0.5 (beta 0 overwrites a NaN in C). */
static float chain_ref(bool ta, bool tb, const float *a, int64_t lda, const float *b, int64_t ldb,
                       int64_t i, int64_t j, int64_t k, float alpha, float beta, float c) {
  float acc = beta == 0.0f ? 0.0f : beta == 1.0f ? c : beta * c;
  for (int64_t p = 0; p < k; p++) {
    float x = ta ? a[p * lda + i] : a[i * lda + p];
    if (alpha != 1.0f)
      x = alpha * x;
    acc = fmaf(x, tb ? b[j * ldb + p] : b[p * ldb + j], acc);
  }
  return acc;
}

static void test_sgemm_sflow(void) {
  fprintf(stderr, "\n    kernel %s ", sf__gemm_isa());
  /* A kernel asked for by SFLOW_GEMM_ISA that this CPU cannot run falls
   * back to a narrower one: that run checks nothing new, so the test
   * says so and exits 77 (ctest: not run), never a pass. */
  const char *want = getenv("SFLOW_GEMM_ISA"), *isa = sf__gemm_isa();
  if (strncmp(isa, "sflow-", 6) == 0)
    isa += 6;
  if (want && strcmp(want, isa) != 0) {
    fprintf(stderr, "not run: SFLOW_GEMM_ISA=%s, but this CPU runs the %s kernel\n", want,
            sf__gemm_isa());
    exit(77);
  }
  for (int it = 0; it < 140; it++) {
    int64_t m = 1 + (int64_t)(frand(0, 1) * 70), n = 1 + (int64_t)(frand(0, 1) * 90);
    int64_t k = (int64_t)(frand(0, 1) * 700);
    if (it % 8 == 0) { /* big enough to split over the threads */
      m += 250;
      n += 130;
    }
    if (it >= 96 && it < 100) { /* several kc passes over a tall C: B packed whole */
      m = 150 + 37 * (it - 96);
      n = 40 + 9 * (it - 96);
      k = 1030 + it;
    }
    if (it >= 100) { /* skinny: 1-4 rows or columns (gemm.c runs them unpacked) */
      int64_t few = 1 + it % 4, many = 1 + (int64_t)(frand(0, 1) * 300) + (it % 3) * 700;
      m = it % 8 < 4 ? few : many;
      n = it % 8 < 4 ? many : few;
      k = (int64_t)(frand(0, 1) * 40) + (it % 5) * 150;
    }
    bool ta = it & 1, tb = it & 2;
    float beta = (float[]){0.0f, 1.0f, 0.5f}[it % 3], alpha = it % 5 == 4 ? -0.75f : 1.0f;
    int64_t lda = (ta ? m : k) + it % 3, ldb = (tb ? k : n) + it % 2, ldc = n + it % 4;
    int64_t na = (ta ? k : m) * lda + 1, nb = (tb ? n : k) * ldb + 1;
    float *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)nb * sizeof *b);
    float *c0 = malloc((size_t)(m * ldc) * sizeof *c0), *c = malloc((size_t)(m * ldc) * sizeof *c);
    for (int64_t i = 0; i < na; i++)
      a[i] = frand(-1.0f, 1.0f);
    for (int64_t i = 0; i < nb; i++)
      b[i] = frand(-1.0f, 1.0f);
    for (int64_t i = 0; i < m * ldc; i++)
      c0[i] = frand(-1.0f, 1.0f);
    if (beta == 0.0f)
      c0[0] = NAN;
    for (int64_t ways = 1; ways <= 3; ways++) {
      memcpy(c, c0, (size_t)(m * ldc) * sizeof *c);
      sf__gemm_sflow(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ways);
      int64_t bad = -1;
      float want = 0;
      for (int64_t i = 0; i < m && bad < 0; i++)
        for (int64_t j = 0; j < ldc && bad < 0; j++) {
          want = j < n ? chain_ref(ta, tb, a, lda, b, ldb, i, j, k, alpha, beta, c0[i * ldc + j])
                       : c0[i * ldc + j]; /* past n: untouched */
          if (memcmp(&want, &c[i * ldc + j], sizeof want))
            bad = i * ldc + j;
        }
      if (bad >= 0)
        fprintf(stderr, "\n  sgemm_sflow %lldx%lldx%lld ta %d tb %d alpha %g beta %g ways %lld: "
                "element %lld is %.9g, the chain %.9g\n", (long long)m, (long long)n,
                (long long)k, ta, tb, alpha, beta, (long long)ways, (long long)bad, c[bad], want);
      CHECK_INT(bad, -1);
    }
    free(a);
    free(b);
    free(c0);
    free(c);
  }
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
      {"sgemm_sflow", test_sgemm_sflow},
      {"attention_fused", test_attention_fused},
      {"dropout_rows_split", test_dropout_rows_split},
      {"clip_split", test_clip_split},
      {"linear_and_params", test_linear_and_params},
      {NULL, NULL},
  };
  return rt_run("nn", tests, argc, argv);
}
