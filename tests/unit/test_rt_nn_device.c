/*
 * test_rt_nn_device.c — the GPU side of the nn layer (runtime/nn/device.c,
 * gpu_ops.c, autocast.c).
 *
 * Everywhere: bf16 rounding (round to nearest even, NaN, infinities)
 * against a reference written from the definition, autocast's CPU
 * products and their gradients against hand-rounded products, the
 * accessors on the CPU path (no GPU context: nothing moves), and placement
 * (no GPU outside a GPU call).
 *
 * With a GPU, or under the host emulator (ctest's gpu_emu/nn_unit runs
 * this same executable with SFLOW_CUDA and friends naming it): the storage
 * states through every accessor (HOST -> BOTH on dptr, DEVICE on dwrote,
 * BOTH on a read with one d2h sync counted, HOST on a write, and a device
 * tensor's host buffer made at its first read), and ops in a GPU context
 * (as a @gpus task sees it: sf__current_gpu set) against the CPU.
 */
#include <math.h>

#include "rt_test.h"

#include "nn.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_nn_device", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"t.sflow", 3, 7};

static uint64_t rng = 88172645463325252ULL;
static float frand(float lo, float hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 11) * 0x1p-53);
}

static sf_tensor *rnd(int32_t nd, const int64_t *shape, bool param) {
  sf_tensor *t = sf__t_empty(nd, shape, &LOC);
  for (int64_t i = 0; i < t->numel; i++)
    sf__t_data(t)[i] = frand(-2, 2);
  t->req = param;
  return t;
}

/* bf16 from its definition: the f32 nearest to x whose low 16 bits are 0,
 * ties to the one whose bit 16 is 0; NaN a NaN. */
static float ref_bf16(float x) {
  if (isnan(x))
    return x;
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float fl, fh;
  memcpy(&fl, &lo, 4);
  memcpy(&fh, &hi, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) /* an infinity */
    return x;
  uint32_t rem = u & 0xffffu;
  if (rem < 0x8000u)
    return fl;
  if (rem > 0x8000u)
    return fh;
  return (lo >> 16) & 1 ? fh : fl;
}

static void test_bf16_round(void) {
  CU_ASSERT(sf__bf16_round(1.0f) == 1.0f);
  CU_ASSERT(sf__bf16_round(1.0f + 0x1p-10f) == 1.0f);
  CU_ASSERT(sf__bf16_round(1.0f + 0x1p-8f) == 1.0f);                    /* a tie: to even */
  CU_ASSERT(sf__bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);      /* a tie: to even */
  CU_ASSERT(sf__bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CU_ASSERT(sf__bf16_round(-3.0f) == -3.0f);
  CU_ASSERT(isinf(sf__bf16_round(INFINITY)) && sf__bf16_round(-INFINITY) < 0);
  CU_ASSERT(isnan(sf__bf16_round(NAN)));
  CU_ASSERT(isinf(sf__bf16_round(3.4028235e38f))); /* FLT_MAX rounds up to infinity */
  int bad = 0;
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)(rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17);
    float x;
    memcpy(&x, &u, 4);
    float a = sf__bf16_round(x), b = ref_bf16(x);
    if (!(isnan(a) && isnan(b)) && memcmp(&a, &b, 4))
      bad++;
  }
  CU_ASSERT(bad == 0);
}

/* C = round(A) round(B) by hand, in double (the sums of 7 products of
 * bf16 values are exact in double, so the f32 result must be the rounded
 * double to within one f32 ulp of accumulation order). */
static void test_autocast_cpu(void) {
  int64_t sa[] = {2, 3, 7}, sb[] = {7, 4};
  sf_tensor *a = rnd(3, sa, true), *b = rnd(2, sb, true);
  sf__autocast = true;
  sf_tensor *c = sf__t_matmul(a, b, &LOC);
  sf__autocast = false;
  CU_ASSERT_FATAL(c->ndim == 3 && c->shape[2] == 4);
  const float *ad = sf__t_data(a), *bd = sf__t_data(b), *cd = sf__t_data(c);
  double worst = 0;
  for (int64_t r = 0; r < 6; r++)
    for (int64_t j = 0; j < 4; j++) {
      double s = 0;
      for (int64_t k = 0; k < 7; k++)
        s += (double)sf__bf16_round(ad[r * 7 + k]) * sf__bf16_round(bd[k * 4 + j]);
      worst = fmax(worst, fabs(s - cd[r * 4 + j]) / fmax(1, fabs(s)));
    }
  CU_ASSERT(worst < 1e-6);
  /* The f32 product differs (the operands are not bf16 values). */
  sf_tensor *f = sf__t_matmul(a, b, &LOC);
  double diff = 0;
  for (int64_t i = 0; i < f->numel; i++)
    diff = fmax(diff, fabs(sf__t_data(f)[i] - cd[i]));
  CU_ASSERT(diff > 1e-4);
  /* Backward: dA = round(G) round(B)ᵀ with G = 1. */
  sf_tensor *loss = sf__t_reduce(SF__R_SUM, c, SF__ALL_AXES, &LOC);
  sf__backward(loss, &LOC);
  const float *ga = sf__t_data(a->grad), *gb = sf__t_data(b->grad);
  worst = 0;
  for (int64_t r = 0; r < 6; r++)
    for (int64_t k = 0; k < 7; k++) {
      double s = 0;
      for (int64_t j = 0; j < 4; j++)
        s += sf__bf16_round(bd[k * 4 + j]);
      worst = fmax(worst, fabs(s - ga[r * 7 + k]));
    }
  for (int64_t k = 0; k < 7; k++)
    for (int64_t j = 0; j < 4; j++) {
      double s = 0;
      for (int64_t r = 0; r < 6; r++)
        s += sf__bf16_round(ad[r * 7 + k]);
      worst = fmax(worst, fabs(s - gb[k * 4 + j]));
    }
  CU_ASSERT(worst < 1e-5);
  /* Linear: x (5, 7), w (3, 7), b (3). */
  int64_t sx[] = {5, 7}, sw[] = {3, 7}, sbias[] = {3};
  sf_tensor *x = rnd(2, sx, false), *w = rnd(2, sw, true), *bias = rnd(1, sbias, true);
  sf__autocast = true;
  sf_tensor *y = sf__t_linear(x, w, bias, &LOC);
  sf__autocast = false;
  const float *xd = sf__t_data(x), *wd = sf__t_data(w), *bd2 = sf__t_data(bias), *yd = sf__t_data(y);
  worst = 0;
  for (int64_t r = 0; r < 5; r++)
    for (int64_t o = 0; o < 3; o++) {
      double s = 0;
      for (int64_t k = 0; k < 7; k++)
        s += (double)sf__bf16_round(xd[r * 7 + k]) * sf__bf16_round(wd[o * 7 + k]);
      s += bd2[o];
      worst = fmax(worst, fabs(s - yd[r * 3 + o]) / fmax(1, fabs(s)));
    }
  CU_ASSERT(worst < 1e-6);
  sf_release(y);
  sf_release(x);
  sf_release(w);
  sf_release(bias);
  sf_release(loss);
  sf_release(f);
  sf_release(c);
  sf_release(a);
  sf_release(b);
}

static void test_cpu_path(void) {
  /* No GPU call: nothing is placed, no storage gets a device copy. */
  CU_ASSERT(sf__current_gpu < 0);
  CU_ASSERT(!sf__nn_gpu_here(&LOC));
  int64_t s[] = {4};
  sf_tensor *t = sf__t_empty(1, s, &LOC);
  CU_ASSERT(t->st->where == SF__WHERE_HOST && !t->st->dev);
  CU_ASSERT(sf__t_data(t) == t->st->data && sf__t_wdata(t) == t->st->data);
  CU_ASSERT(sf__t_place(t, &LOC) == t && !t->st->dev);
  sf_tensor *u = sf__t_like_here(t);
  CU_ASSERT(!u->st->dev);
  sf_release(u);
  sf_release(t);
}

/* ---------------------------------------------------- on a device */

static bool have_device(void) {
  sf__options.quiet = true;
  return sf__gpu_ready(NULL);
}

static void test_accessors(void) {
  if (!have_device()) {
    printf("(no GPU, no emulator: skipped) ");
    return;
  }
  sf__gpu_stats_t s0 = sf__gpu_stats;
  int64_t shape[] = {3};
  sf_tensor *t = sf__t_empty(1, shape, &LOC);
  float *h = sf__t_wdata(t);
  h[0] = 1, h[1] = 2, h[2] = 3;
  uint64_t p = sf__t_dptr(t, &LOC);
  CU_ASSERT(p != 0 && t->st->where == SF__WHERE_BOTH && t->st->gpu == sf__gpu_current_device() + 1);
  CU_ASSERT(sf__gpu_stats.h2d_bytes - s0.h2d_bytes == 12);
  CU_ASSERT(sf__t_dptr(t, &LOC) == p && sf__gpu_stats.h2d_bytes - s0.h2d_bytes == 12); /* once */
  /* Reading a BOTH storage: no copy. */
  CU_ASSERT(sf__t_data(t)[1] == 2 && sf__gpu_stats.d2h_syncs == s0.d2h_syncs);
  /* A view's device pointer is the storage's plus its offset. */
  sf_tensor *v = sf__t_view(t, 1, (int64_t[]){2}, (int64_t[]){1}, 1);
  CU_ASSERT(sf__t_dptr(v, &LOC) == p + 4);
  /* Written on the device: the host copy is stale until a read. */
  sf__current_gpu = 0;
  CU_ASSERT_FATAL(sf__nn_gpu_here(&LOC));
  sf_tensor *d = sf__t_scalar(SF_TOP_MUL, t, 10.0f, false, &LOC);
  CU_ASSERT(d->st->where == SF__WHERE_DEVICE && d->st->data == NULL);
  sf__gpu_assign(t, d); /* t = d on the device */
  CU_ASSERT(t->st->where == SF__WHERE_DEVICE);
  sf__current_gpu = -1;
  CU_ASSERT(sf__t_data(v)[0] == 20 && sf__t_data(t)[2] == 30);
  CU_ASSERT(sf__gpu_stats.d2h_syncs - s0.d2h_syncs == 1 && t->st->where == SF__WHERE_BOTH);
  /* A device tensor's first read makes its host buffer. */
  CU_ASSERT(sf__t_data(d)[0] == 10 && d->st->data != NULL);
  CU_ASSERT(sf__gpu_stats.d2h_syncs - s0.d2h_syncs == 2);
  /* A host write makes the host copy the only current one; the next use
   * on the device uploads it again into the same device buffer. */
  sf__t_wdata(t)[0] = 7;
  CU_ASSERT(t->st->where == SF__WHERE_HOST);
  CU_ASSERT(sf__t_dptr(t, &LOC) == p && sf__gpu_stats.h2d_bytes - s0.h2d_bytes == 24);
  sf_release(v);
  sf_release(t);
  sf_release(d);
  /* The freed blocks went to the allocator's cache. */
  sf__dalloc_stats m = sf__dev_stats();
  CU_ASSERT(m.cached > 0);
}

/* An op in a GPU context against the same op on the CPU. */
static void test_ops_on_device(void) {
  if (!have_device()) {
    printf("(no GPU, no emulator: skipped) ");
    return;
  }
  int64_t sa[] = {4, 1, 3}, sb[] = {5, 3}, sm[] = {3, 6};
  sf_tensor *a = rnd(3, sa, true), *b = rnd(2, sb, true), *m = rnd(2, sm, true);
  sf_tensor *ref[2];
  float ga[2][12];
  for (int gpu = 0; gpu < 2; gpu++) {
    sf__current_gpu = gpu ? 0 : -1;
    sf_tensor *x = sf__t_binary(SF_TOP_MUL, a, b, &LOC); /* (4, 5, 3) */
    sf_tensor *y = sf__t_unary(SF__U_GELU, x, &LOC);
    sf_tensor *z = sf__t_matmul(y, m, &LOC);              /* (4, 5, 6) */
    sf_tensor *r = sf__t_reduce(SF__R_MAX, z, 1, &LOC);
    sf_tensor *l = sf__t_reduce(SF__R_MEAN, r, SF__ALL_AXES, &LOC);
    CU_ASSERT((z->st->where == SF__WHERE_DEVICE) == (gpu == 1));
    sf__backward(l, &LOC);
    sf__current_gpu = -1;
    ref[gpu] = sf__t_contig(z);
    memcpy(ga[gpu], sf__t_data(a->grad), sizeof ga[gpu]);
    sf_release(a->grad);
    sf_release(b->grad);
    sf_release(m->grad);
    a->grad = b->grad = m->grad = NULL;
    sf_release(x);
    sf_release(y);
    sf_release(z);
    sf_release(r);
    sf_release(l);
  }
  double worst = 0;
  for (int64_t i = 0; i < ref[0]->numel; i++)
    worst = fmax(worst, fabs(sf__t_data(ref[0])[i] - sf__t_data(ref[1])[i]));
  for (int i = 0; i < 12; i++)
    worst = fmax(worst, fabs(ga[0][i] - ga[1][i]));
  printf("(largest difference %.3g) ", worst);
  CU_ASSERT(worst < 1e-5);
  sf_release(ref[0]);
  sf_release(ref[1]);
  sf_release(a);
  sf_release(b);
  sf_release(m);
}

static const rt_test tests[] = {
    {"bf16_round", test_bf16_round},
    {"autocast_cpu", test_autocast_cpu},
    {"cpu_path", test_cpu_path},
    {"accessors", test_accessors},
    {"ops_on_device", test_ops_on_device},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  sf__nn_install();
  return rt_run("rt_nn_gpu", tests, argc, argv);
}
