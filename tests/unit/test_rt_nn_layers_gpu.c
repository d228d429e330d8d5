/*
 * test_rt_nn_layers_gpu.c — the layers' GPU paths (runtime/nn/gpu_layers.c over
 * kernels/nn_layers.cu) against their CPU forms, op by op: the forward
 * output and the gradients its backward rule gives for one fixed upstream
 * gradient, each printed as its largest difference over the reference's
 * largest magnitude and held to docs/nn.md's tolerance ("GPU": 1e-5 for
 * softmax, cross-entropy and layer norm, 1e-6 for embedding's scatter,
 * exact for dropout's masks, cat/stack and argmax).
 *
 * The GPU ops run through their public entries with the GPU's kernel
 * table forced (ON_GPU, sf__nn_dev_force) on a thread where
 * sf__gpu_ready succeeded, the CPU ones through their public entries on
 * the main thread, which holds no GPU; backward rules are run on their own
 * (node->backward with a host gradient), so each check isolates one op.
 * Runs on a GPU or under the host emulator (ctest gpu_emu/nn_layers_unit);
 * without either it exits 77 (not run).
 */
#include <math.h>

#include "rt_test.h"

#include "nn.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_nn_layers_gpu", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"t.sflow", 3, 7};

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})
/* e with the GPU's kernel table (its forward; the node it records keeps
 * the device for the backward). */
#define ON_GPU(e)                                                              \
  ({                                                                           \
    sf__nn_dev_force(&sf__nn_gpu);                                             \
    __typeof__(e) r_ = (e);                                                    \
    sf__nn_dev_force(NULL);                                                    \
    r_;                                                                        \
  })

static uint64_t rng = 88172645463325252ULL;
static float frand(float lo, float hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 11) * 0x1p-53);
}

static sf_tensor *rnd(int32_t nd, const int64_t *shape, float lo, float hi) {
  sf_tensor *t = sf__t_empty(nd, shape, &LOC);
  for (int64_t i = 0; i < t->numel; i++)
    sf__t_wdata(t)[i] = frand(lo, hi);
  return t;
}

/* A param (a leaf that requires grad) holding t's values: one for the CPU
 * run, one for the GPU run, so the two gradients land apart. */
static sf_tensor *param_of(sf_tensor *t) {
  sf_tensor *p = sf__t_empty(t->ndim, t->shape, &LOC);
  sf__t_copy_into(p, t);
  p->req = true;
  return p;
}

static sf_array *i64s(int64_t n, const int64_t *v) {
  sf_array *a = sf_array_new(&sf_type_i64, n, &LOC);
  memcpy(a->data, v, (size_t)n * sizeof(int64_t));
  return a;
}

/* Runs out's backward rule alone with upstream gradient g (borrowed). */
static void run_backward(sf_tensor *out, sf_tensor *g) {
  CU_ASSERT_FATAL(out->node != NULL);
  sf__no_grad = true;
  out->node->backward(out->node, g);
  sf__no_grad = false;
}

/* Device-to-host reads so far: a GPU op and its backward rule must add
 * none (only argmax reads back, by design). */
static uint64_t syncs(void) { return __atomic_load_n(&sf__gpu_stats.d2h_syncs, __ATOMIC_RELAXED); }

/* max |got - want| / max |want| (the absolute difference when want is 0),
 * printed; got is read back from the device. */
static double check(const char *what, sf_tensor *got, sf_tensor *want, double tol) {
  CU_ASSERT_FATAL(got != NULL && want != NULL);
  CU_ASSERT_FATAL(got->numel == want->numel);
  sf_tensor *gc = sf__t_contig(got), *wc = sf__t_contig(want);
  const float *a = sf__t_data(gc), *b = sf__t_data(wc);
  double d = 0, m = 0;
  for (int64_t i = 0; i < want->numel; i++) {
    double e = fabs((double)a[i] - b[i]);
    d = e > d || isnan(e) ? e : d;
    m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
  }
  double rel = m > 0 ? d / m : d;
  printf("\n    %-36s max rel diff %.3g (tolerance %g)", what, rel, tol);
  CU_ASSERT(rel <= tol);
  sf_release(gc);
  sf_release(wc);
  return rel;
}

/* ------------------------------------------------------------ softmax */

static void softmax_case(const char *what, int32_t nd, const int64_t *shape, int32_t ax, bool log) {
  sf_tensor *x = rnd(nd, shape, -4, 4), *xc = param_of(x), *xg = param_of(x);
  sf_tensor *g = rnd(nd, shape, -1, 1);
  sf_tensor *yc = sf__t_softmax(xc, ax, log, &LOC);
  run_backward(yc, g);
  uint64_t s0 = syncs();
  sf_tensor *yg = ON_GPU(sf__t_softmax(xg, ax, log, &LOC));
  run_backward(yg, g);
  CU_ASSERT(syncs() == s0);
  CU_ASSERT(sf__t_on_dev(yg) && sf__t_on_dev(xg->grad));
  char name[96];
  snprintf(name, sizeof name, "%s forward", what);
  check(name, yg, yc, 1e-5);
  snprintf(name, sizeof name, "%s backward", what);
  check(name, xg->grad, xc->grad, 1e-5);
  sf_tensor *ts[] = {x, xc, xg, yc, yg, g};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
}

static void test_softmax(void) {
  softmax_case("softmax (5, 300) axis 1", 2, SHAPE(5, 300), 1, false);
  softmax_case("softmax (3, 7, 4) axis 1", 3, SHAPE(3, 7, 4), 1, false);
  softmax_case("log_softmax (5, 300) axis 1", 2, SHAPE(5, 300), 1, true);
  softmax_case("log_softmax (3, 7, 4) axis 0", 3, SHAPE(3, 7, 4), 0, true);
  softmax_case("softmax (4, 1000) axis 1", 2, SHAPE(4, 1000), 1, false);
}

/* ------------------------------------------------------ cross-entropy */

static void ce_case(const char *what, float smoothing) {
  sf_tensor *x = rnd(2, SHAPE(6, 300), -3, 3), *xc = param_of(x), *xg = param_of(x);
  sf_array *tg = i64s(6, (int64_t[]){0, 299, -100, 4, 1, 2});
  sf_tensor *g = sf__t_full(0, NULL, 2.5f);
  sf_tensor *lc = sf__t_cross_entropy(xc, tg, -100, smoothing, &LOC);
  run_backward(lc, g);
  uint64_t s0 = syncs();
  sf_tensor *lg = ON_GPU(sf__t_cross_entropy(xg, tg, -100, smoothing, &LOC));
  run_backward(lg, g);
  CU_ASSERT(syncs() == s0); /* the loss and the count of kept rows stay on the device */
  CU_ASSERT(sf__t_on_dev(lg));
  char name[96];
  snprintf(name, sizeof name, "%s forward", what);
  check(name, lg, lc, 1e-5);
  snprintf(name, sizeof name, "%s backward", what);
  check(name, xg->grad, xc->grad, 1e-5);
  sf_tensor *ts[] = {x, xc, xg, lc, lg, g};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
  sf_release(tg);
}

static void test_cross_entropy(void) {
  ce_case("cross_entropy", 0.0f);
  ce_case("cross_entropy smoothing 0.1", 0.1f);
  /* Every row ignored: nan, as torch and the CPU. */
  sf_tensor *x = rnd(2, SHAPE(2, 3), -1, 1);
  sf_array *tg = i64s(2, (int64_t[]){-100, -100});
  sf_tensor *l = ON_GPU(sf__t_cross_entropy(x, tg, -100, 0.0f, &LOC));
  CU_ASSERT(isnan(sf__t_data(l)[0]));
  sf_release(l);
  sf_release(x);
  sf_release(tg);
}

/* --------------------------------------------------------- layer norm */

static void test_layer_norm(void) {
  sf_tensor *x = rnd(3, SHAPE(4, 6, 300), -2, 3), *w = rnd(1, SHAPE(300), -1, 1);
  sf_tensor *b = rnd(1, SHAPE(300), -1, 1);
  sf_tensor *xc = param_of(x), *wc = param_of(w), *bc = param_of(b);
  sf_tensor *xg = param_of(x), *wg = param_of(w), *bg = param_of(b);
  sf_tensor *g = rnd(3, SHAPE(4, 6, 300), -1, 1);
  sf_tensor *yc = sf__t_layer_norm(xc, wc, bc, 1e-5, &LOC);
  run_backward(yc, g);
  uint64_t s0 = syncs();
  sf_tensor *yg = ON_GPU(sf__t_layer_norm(xg, wg, bg, 1e-5, &LOC));
  run_backward(yg, g);
  CU_ASSERT(syncs() == s0);
  check("layer_norm (4, 6, 300) forward", yg, yc, 1e-5);
  check("layer_norm dx", xg->grad, xc->grad, 1e-5);
  check("layer_norm dweight", wg->grad, wc->grad, 1e-5);
  check("layer_norm dbias", bg->grad, bc->grad, 1e-5);
  sf_tensor *ts[] = {x, w, b, xc, wc, bc, xg, wg, bg, yc, yg, g};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
}

/* ------------------------------------------------------------ RMSNorm */

static void test_rms_norm(void) {
  sf_tensor *x = rnd(3, SHAPE(4, 6, 300), -2, 3), *w = rnd(1, SHAPE(300), -1, 1);
  sf_tensor *xc = param_of(x), *wc = param_of(w), *xg = param_of(x), *wg = param_of(w);
  sf_tensor *g = rnd(3, SHAPE(4, 6, 300), -1, 1);
  sf_tensor *yc = sf__t_rms_norm(xc, wc, 1e-5, &LOC);
  run_backward(yc, g);
  uint64_t s0 = syncs();
  sf_tensor *yg = ON_GPU(sf__t_rms_norm(xg, wg, 1e-5, &LOC));
  run_backward(yg, g);
  CU_ASSERT(syncs() == s0);
  CU_ASSERT(sf__t_on_dev(yg) && sf__t_on_dev(xg->grad));
  check("rms_norm (4, 6, 300) forward", yg, yc, 1e-5);
  check("rms_norm dx", xg->grad, xc->grad, 1e-5);
  check("rms_norm dweight", wg->grad, wc->grad, 1e-5);
  sf_tensor *ts[] = {x, w, xc, wc, xg, wg, yc, yg, g};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
}

/* Rotary embeddings (rope.c) from position 5, and SiLU (a unary kind). */
static void test_rope(void) {
  sf_tensor *x = rnd(4, SHAPE(2, 3, 7, 64), -2, 2);
  sf_tensor *xc = param_of(x), *xg = param_of(x), *g = rnd(4, SHAPE(2, 3, 7, 64), -1, 1);
  sf_tensor *yc = sf__t_rope(xc, 5, 100000.0, &LOC);
  run_backward(yc, g);
  uint64_t s0 = syncs();
  sf_tensor *yg = ON_GPU(sf__t_rope(xg, 5, 100000.0, &LOC));
  run_backward(yg, g);
  CU_ASSERT(syncs() == s0);
  CU_ASSERT(sf__t_on_dev(yg) && sf__t_on_dev(xg->grad));
  check("rope (2, 3, 7, 64) forward", yg, yc, 1e-5);
  check("rope dx", xg->grad, xc->grad, 1e-5);
  sf_tensor *s = rnd(2, SHAPE(9, 33), -4, 4), *sc = param_of(s), *sg = param_of(s);
  sf_tensor *gs = rnd(2, SHAPE(9, 33), -1, 1);
  sf_tensor *zc = sf__t_unary(SF__U_SILU, sc, &LOC);
  run_backward(zc, gs);
  sf_tensor *zg = ON_GPU(sf__t_unary(SF__U_SILU, sg, &LOC));
  run_backward(zg, gs);
  check("silu forward", zg, zc, 1e-5);
  check("silu dx", sg->grad, sc->grad, 1e-5);
  sf_tensor *ts[] = {x, xc, xg, g, yc, yg, s, sc, sg, gs, zc, zg};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
}

/* ---------------------------------------------------------- embedding */

static void test_embedding(void) {
  sf_tensor *w = rnd(2, SHAPE(9, 40), -1, 1), *wc = param_of(w), *wg = param_of(w);
  sf_array *ids = i64s(8, (int64_t[]){1, 3, 1, 8, 0, 3, 1, 1});
  sf_array *shape = i64s(2, (int64_t[]){2, 4});
  sf_tensor *g = rnd(3, SHAPE(2, 4, 40), -1, 1);
  sf_tensor *yc = sf__t_embedding(wc, ids, shape, &LOC);
  run_backward(yc, g);
  uint64_t s0 = syncs();
  sf_tensor *yg = ON_GPU(sf__t_embedding(wg, ids, shape, &LOC));
  run_backward(yg, g);
  CU_ASSERT(syncs() == s0);
  check("embedding forward", yg, yc, 0);
  check("embedding backward (atomicAdd)", wg->grad, wc->grad, 1e-6);
  sf_tensor *ts[] = {w, wc, wg, yc, yg, g};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
  sf_release(ids);
  sf_release(shape);
}

/* ------------------------------------------------------------ dropout */

/* The mask identity: the GPU's output and saved mask are the CPU's, bit
 * for bit, for a whole-tensor mask and for per-row ones. */
static void test_dropout(void) {
  sf_tensor *x = rnd(2, SHAPE(8, 500), -1, 1), *xc = param_of(x), *xg = param_of(x);
  double ps[] = {0.1, 0.3, 0.5, 1.0};
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
    sf_tensor *yc = sf__t_dropout(xc, ps[i], 52, true, &LOC);
    uint64_t s0 = syncs();
    sf_tensor *yg = ON_GPU(sf__t_dropout(xg, ps[i], 52, true, &LOC));
    CU_ASSERT(syncs() == s0);
    char name[64];
    snprintf(name, sizeof name, "dropout p=%g output", ps[i]);
    check(name, yg, yc, 0);
    snprintf(name, sizeof name, "dropout p=%g mask", ps[i]);
    check(name, yg->node->saved, yc->node->saved, 0);
    sf_release(yc);
    sf_release(yg);
  }
  /* seed -1: one key from the call's random stream, the same draw on both
   * paths (the stream put back between them). */
  sf__rng at = sf__rng_cur;
  sf_tensor *rc = sf__t_dropout(xc, 0.5, -1, true, &LOC);
  sf__rng after = sf__rng_cur;
  sf__rng_cur = at;
  sf_tensor *rg = ON_GPU(sf__t_dropout(xg, 0.5, -1, true, &LOC));
  CU_ASSERT(memcmp(&after, &sf__rng_cur, sizeof after) == 0);
  check("dropout seed -1 output", rg, rc, 0);
  sf_release(rc);
  sf_release(rg);
  sf_array *index = i64s(8, (int64_t[]){5, 2, 9, 0, 5, 1000000007, 3, 4});
  sf_tensor *yc = sf__t_dropout_rows(xc, 0.25, 62, index, 3, true, &LOC);
  sf_tensor *yg = ON_GPU(sf__t_dropout_rows(xg, 0.25, 62, index, 3, true, &LOC));
  check("dropout_rows output", yg, yc, 0);
  check("dropout_rows mask", yg->node->saved, yc->node->saved, 0);
  sf_tensor *ts[] = {x, xc, xg, yc, yg};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
  sf_release(index);
}

/* ---------------------------------------------------------- attention */

/* The fused node (no dropout): q (3, 5, 8), k and v (3, 7, 8), two heads,
 * a mask with a gap, one with a padded tail and a fully padded batch row
 * (zeros, as torch).  The CPU's gradients come from a full backward of
 * sum(y * w), the GPU rule gets w as its upstream gradient. */
static void test_attention(void) {
  sf_tensor *x[3] = {rnd(3, SHAPE(3, 5, 8), -1, 1), rnd(3, SHAPE(3, 7, 8), -1, 1),
                     rnd(3, SHAPE(3, 7, 8), -1, 1)};
  sf_tensor *c[3], *g[3];
  for (int i = 0; i < 3; i++) {
    c[i] = param_of(x[i]);
    g[i] = param_of(x[i]);
  }
  sf_array *mask = i64s(21, (int64_t[]){1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0});
  sf_tensor *w = rnd(3, SHAPE(3, 5, 8), -1, 1);
  sf_tensor *yc = sf__t_attention(c[0], c[1], c[2], mask, 2, &LOC);
  sf_tensor *prod = sf__t_binary(SF_TOP_MUL, yc, w, &LOC);
  sf_tensor *loss = sf__t_reduce(SF__R_SUM, prod, SF__ALL_AXES, &LOC);
  sf__backward(loss, &LOC);
  uint64_t s0 = syncs();
  sf_tensor *yg = ON_GPU(sf__t_attention(g[0], g[1], g[2], mask, 2, &LOC));
  CU_ASSERT_FATAL(yg->node && !strcmp(yg->node->op, "attention") && yg->node->in[2] == g[2]);
  run_backward(yg, w);
  CU_ASSERT(syncs() == s0);
  check("attention (fused) forward", yg, yc, 1e-4);
  check("attention dq", g[0]->grad, c[0]->grad, 1e-4);
  check("attention dk", g[1]->grad, c[1]->grad, 1e-4);
  check("attention dv", g[2]->grad, c[2]->grad, 1e-4);
  sf_tensor *ts[] = {x[0], x[1], x[2], c[0], c[1], c[2], g[0], g[1], g[2], w, yc, prod, loss, yg};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
  sf_release(mask);
}

/* Causal attention: 5 queries at the end of 7 keys with a mask, 4 heads;
 * then grouped-query (4 query heads on 2 key/value heads, k and v of width
 * 4: repeat_kv's recorded copies, then the fused node, whose one level of
 * backward gives dq here; dk and dv reach k and v through index_select's
 * rule, which the CPU test run/nn/attention_causal checks). */
static void test_attention_causal(void) {
  sf_array *mask = i64s(21, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1,
                                        1, 1, 1, 1, 1, 0, 0});
  sf_tensor *w = rnd(3, SHAPE(3, 5, 8), -1, 1);
  for (int gqa = 0; gqa < 2; gqa++) {
    int64_t kw = gqa ? 4 : 8, kvh = gqa ? 2 : 4;
    sf_tensor *x[3] = {rnd(3, SHAPE(3, 5, 8), -1, 1), rnd(3, SHAPE(3, 7, kw), -1, 1),
                       rnd(3, SHAPE(3, 7, kw), -1, 1)};
    sf_tensor *c[3], *g[3];
    for (int i = 0; i < 3; i++) {
      c[i] = param_of(x[i]);
      g[i] = param_of(x[i]);
    }
    sf_tensor *yc = sf__t_attention_ex(c[0], c[1], c[2], mask, 4, true, kvh, &LOC);
    run_backward(yc, w);
    sf_tensor *yg = ON_GPU(sf__t_attention_ex(g[0], g[1], g[2], mask, 4, true, kvh, &LOC));
    run_backward(yg, w);
    check(gqa ? "attention causal GQA forward" : "attention causal forward", yg, yc, 1e-4);
    check(gqa ? "attention causal GQA dq" : "attention causal dq", g[0]->grad, c[0]->grad, 1e-4);
    if (!gqa) {
      check("attention causal dk", g[1]->grad, c[1]->grad, 1e-4);
      check("attention causal dv", g[2]->grad, c[2]->grad, 1e-4);
    }
    sf_tensor *ts[] = {x[0], x[1], x[2], c[0], c[1], c[2], g[0], g[1], g[2], yc, yg};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
      sf_release(ts[i]);
  }
  sf_release(w);
  sf_release(mask);
}

/* ---------------------------------------------------------- cat, stack */

static void join_case(const char *what, bool stack, int64_t axis) {
  sf_tensor *a = rnd(2, SHAPE(2, 3), -1, 1), *b = rnd(2, SHAPE(stack ? 2 : 4, 3), -1, 1);
  sf_tensor *c0 = rnd(2, SHAPE(3, 2), -1, 1);
  if (!stack && axis == 1) {
    sf_release(b);
    b = rnd(2, SHAPE(2, 5), -1, 1);
  }
  sf_tensor *ac = param_of(a), *bc = param_of(b), *cc = param_of(c0);
  sf_tensor *ag = param_of(a), *bg = param_of(b), *cg = param_of(c0);
  /* The third input is a transposed (strided) view of a param. */
  sf_tensor *ct = sf__t_transpose(cc, 0, 1, &LOC), *gt = sf__t_transpose(cg, 0, 1, &LOC);
  sf_tensor *inc[] = {ac, bc, ct}, *ing[] = {ag, bg, gt};
  sf_array *tc = sf_array_new(&sf__type_tensor, 3, &LOC);
  sf_array *tg = sf_array_new(&sf__type_tensor, 3, &LOC);
  for (int i = 0; i < 3; i++) {
    ((sf_tensor **)tc->data)[i] = inc[i];
    sf_retain(inc[i]);
    ((sf_tensor **)tg->data)[i] = ing[i];
    sf_retain(ing[i]);
  }
  sf_tensor *yc = stack ? sf__t_stack(tc, &LOC) : sf__t_cat(tc, axis, &LOC);
  int64_t shape[SF__TMAX];
  memcpy(shape, yc->shape, sizeof shape);
  sf_tensor *yg = ON_GPU(stack ? sf__t_stack(tg, &LOC) : sf__t_cat(tg, axis, &LOC));
  char name[64];
  snprintf(name, sizeof name, "%s forward", what);
  check(name, yg, yc, 0);
  sf_tensor *g = rnd(yc->ndim, yc->shape, -1, 1);
  run_backward(yc, g);
  run_backward(yg, g);
  /* A view's gradient reaches its node; the transpose's rule is the
   * CPU's, so compare what the join handed each input. */
  snprintf(name, sizeof name, "%s backward", what);
  check(name, ag->grad, ac->grad, 0);
  check(name, bg->grad, bc->grad, 0);
  check(name, gt->node->grad, ct->node->grad, 0);
  sf_tensor *ts[] = {a, b, c0, ac, bc, cc, ag, bg, cg, ct, gt, yc, yg, g};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
  sf_release(tc);
  sf_release(tg);
}

static void test_join(void) {
  join_case("cat axis 0", false, 0);
  join_case("cat axis 1", false, 1);
  join_case("stack", true, 0);
}

/* ------------------------------------------------------ t[i], t[a..b] */

/* The views' forward is shared; their backward rule on the device
 * (index.c's one rule, over the GPU's table for a node made there). */
static void test_rows(void) {
  for (int k = 0; k < 2; k++) {
    sf_tensor *x = rnd(3, SHAPE(5, 4, 3), -1, 1), *xc = param_of(x), *xg = param_of(x);
    sf_tensor *yc = k ? sf__t_rows(xc, 1, 4, &LOC) : sf__t_row(xc, 2, &LOC);
    sf_tensor *yg = ON_GPU(k ? sf__t_rows(xg, 1, 4, &LOC) : sf__t_row(xg, 2, &LOC));
    sf_tensor *g = rnd(yc->ndim, yc->shape, -1, 1);
    run_backward(yc, g);
    uint64_t s0 = syncs();
    yg->node->backward(yg->node, g);
    CU_ASSERT(syncs() == s0);
    CU_ASSERT(sf__t_on_dev(xg->grad));
    check(k ? "x[1..4] backward" : "x[2] backward", xg->grad, xc->grad, 0);
    sf_tensor *ts[] = {x, xc, xg, yc, yg, g};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
      sf_release(ts[i]);
  }
}

/* ------------------------------------------------------------- argmax */

static void test_argmax(void) {
  float v[] = {1, 3, 3, 2, 0, 0, 0, 0, 5, -1, 5, 7, NAN, 1, NAN, 9};
  sf_tensor *x = sf__t_empty(2, SHAPE(4, 4), &LOC);
  memcpy(sf__t_wdata(x), v, sizeof v);
  sf_tensor *big = rnd(2, SHAPE(3, 700), -1, 1);
  sf_tensor *xs[] = {x, x, big, big};
  int32_t axes[] = {1, 0, 1, 0};
  for (int i = 0; i < 4; i++) {
    sf_array *c = sf__t_argmax(xs[i], axes[i], &LOC), *g = sf__gpu_argmax(xs[i], axes[i], &LOC);
    CU_ASSERT_FATAL(c->len == g->len);
    bool same = memcmp(c->data, g->data, (size_t)c->len * sizeof(int64_t)) == 0;
    printf("\n    argmax case %d: %s", i, same ? "same indices" : "indices differ");
    CU_ASSERT(same);
    sf_release(c);
    sf_release(g);
  }
  sf_release(x);
  sf_release(big);
}

/* ------------------------------------------- masks and selection (select.c) */

/* tril/triu of a transposed (strided) view, forward and backward: masks,
 * so the devices agree exactly. */
static void test_tri(void) {
  sf_tensor *x = rnd(3, SHAPE(3, 7, 5), -2, 2), *g = rnd(3, SHAPE(3, 5, 7), -1, 1);
  for (int upper = 0; upper < 2; upper++)
    for (int64_t k = -2; k <= 3; k += 5) {
      sf_tensor *xc = param_of(x), *xg = param_of(x);
      sf_tensor *tc = sf__t_transpose(xc, 1, 2, &LOC), *tg = sf__t_transpose(xg, 1, 2, &LOC);
      sf_tensor *yc = sf__t_tri(tc, k, upper, &LOC);
      run_backward(yc, g);
      uint64_t s0 = syncs();
      sf_tensor *yg = ON_GPU(sf__t_tri(tg, k, upper, &LOC));
      run_backward(yg, g);
      CU_ASSERT(syncs() == s0);
      CU_ASSERT(sf__t_on_dev(yg));
      check(upper ? "triu of a transposed view" : "tril of a transposed view", yg, yc, 0);
      check(upper ? "triu backward" : "tril backward", tg->node->grad, tc->node->grad, 0);
      sf_tensor *ts[] = {xc, xg, tc, tg, yc, yg};
      for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        sf_release(ts[i]);
    }
  sf_release(x);
  sf_release(g);
}

/* where over three broadcast shapes and masked_fill, forward and both
 * gradients. */
static void test_where(void) {
  sf_tensor *c = rnd(3, SHAPE(2, 1, 5), -1, 1), *a = rnd(2, SHAPE(3, 5), -3, 3),
            *b = rnd(3, SHAPE(2, 3, 1), -3, 3), *g = rnd(3, SHAPE(2, 3, 5), -1, 1);
  float *cd = sf__t_wdata(c);
  for (int64_t i = 0; i < c->numel; i++)
    cd[i] = cd[i] > 0 ? 1.0f : 0.0f;
  sf_tensor *ac = param_of(a), *bc = param_of(b), *ag = param_of(a), *bg = param_of(b);
  sf_tensor *yc = sf__t_where(c, ac, bc, &LOC);
  run_backward(yc, g);
  sf_tensor *yg = ON_GPU(sf__t_where(c, ag, bg, &LOC));
  CU_ASSERT(sf__t_on_dev(yg));
  run_backward(yg, g);
  check("where (2,1,5) (3,5) (2,3,1) forward", yg, yc, 0);
  check("where da", ag->grad, ac->grad, 1e-6);
  check("where db", bg->grad, bc->grad, 1e-6);
  sf_tensor *m = rnd(2, SHAPE(3, 1), -1, 1);
  for (int64_t i = 0; i < 3; i++)
    sf__t_wdata(m)[i] = sf__t_data(m)[i] > 0 ? 1.0f : 0.0f;
  sf_tensor *fc = sf_std_nn_masked_fill(ac, m, -7.0, &LOC);
  sf_tensor *fg = ON_GPU(sf_std_nn_masked_fill(ag, m, -7.0, &LOC));
  check("masked_fill forward", fg, fc, 0);
  sf_tensor *ts[] = {c, a, b, g, ac, bc, ag, bg, yc, yg, fc, fg, m};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
    sf_release(ts[i]);
}

/* topk's indices (ties and a NaN included) and multinomial's draws: the
 * CPU's exactly. */
static void test_topk_multinomial(void) {
  sf_tensor *x = rnd(2, SHAPE(6, 700), -3, 3);
  float *xd = sf__t_wdata(x);
  for (int64_t j = 0; j < 700; j += 7)
    xd[j] = 1.5f; /* row 0: 100 ties at 1.5 */
  xd[700 + 123] = NAN;
  int64_t kc[6 * 40], kg[6 * 40];
  sf__cpu_topk(x, 40, kc, &LOC);
  sf__gpu_topk(x, 40, kg, &LOC);
  CU_ASSERT(memcmp(kc, kg, sizeof kc) == 0);
  CU_ASSERT(kc[40] == 123); /* the NaN first */
  bool sorted = true;
  for (int i = 1; i < 40; i++)
    sorted = sorted && (xd[kc[i - 1]] > xd[kc[i]] || (xd[kc[i - 1]] == xd[kc[i]] && kc[i - 1] < kc[i]));
  CU_ASSERT(sorted);
  sf_tensor *p = rnd(2, SHAPE(3, 500), 0, 1);
  sf__t_wdata(p)[17] = 0;
  int64_t mc[3 * 64], mg[3 * 64];
  sf__cpu_multinomial(p, 64, 99, mc, &LOC);
  sf__gpu_multinomial(p, 64, 99, mg, &LOC);
  CU_ASSERT(memcmp(mc, mg, sizeof mc) == 0);
  printf("\n    topk (6, 700) k 40, multinomial (3, 500) x 64: indices equal");
  sf_release(x);
  sf_release(p);
}

int main(int argc, char **argv) {
  sf__nn_install();
  if (!sf__gpu_ready(NULL)) {
    fprintf(stderr, "test_rt_nn_layers_gpu: no GPU (%s): not run\n", sf__gpu_unavailable_reason());
    return 77;
  }
  static const rt_test tests[] = {
      {"softmax", test_softmax},
      {"cross_entropy", test_cross_entropy},
      {"layer_norm", test_layer_norm},
      {"rms_norm", test_rms_norm},
      {"rope", test_rope},
      {"embedding", test_embedding},
      {"dropout", test_dropout},
      {"attention", test_attention},
      {"attention_causal", test_attention_causal},
      {"join", test_join},
      {"rows", test_rows},
      {"argmax", test_argmax},
      {"tri", test_tri},
      {"where", test_where},
      {"topk_multinomial", test_topk_multinomial},
      {NULL, NULL},
  };
  return rt_run("nn_gpu", tests, argc, argv);
}
