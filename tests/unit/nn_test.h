/*
 * nn_test.h — what the nn layer's unit tests share (test_rt_nn.c,
 * test_rt_nn_layers.c): tensors by hand and at random, value and shape
 * checks that print the largest difference, the finite-difference
 * gradient check, and the Linear/Model structs of the serialization tests.
 * Each test file is one program that includes this once.
 */
#ifndef SF_NN_TEST_H
#define SF_NN_TEST_H

#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-const-variable"

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


static sf_array *i64s(int64_t n, const int64_t *v) {
  sf_array *a = sf_array_new(&sf_type_i64, n, &LOC);
  memcpy(a->data, v, (size_t)n * 8);
  return a;
}

static void release_all(sf_tensor **in, int n) {
  for (int i = 0; i < n; i++)
    sf_release(in[i]);
}

static sf_array *one_param(sf_tensor *p) {
  sf_array *a = sf_array_new(&sf__type_tensor, 1, &LOC);
  ((sf_tensor **)a->data)[0] = p;
  sf_retain(p);
  return a;
}

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

#endif
