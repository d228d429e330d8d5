/*
 * test_rt_custom.c — runtime/nn/custom.c: how a launch hands tensors to a
 * kernel's CPU version (contiguous values, a strided view read through a
 * copy, a strided write refused, an unset tensor refused, nothing left
 * alive after the launch), and nn.custom on the tape (the backward
 * function value called with the inputs, out and the gradient; its
 * gradients added; the "no gradient" empty tensor; the count and shape
 * errors; every tensor and node freed after 1000 steps, with and without
 * backward).
 *
 * Key design choice: the function values are C functions in a table that
 * stands in for sf_program.fns, called exactly as custom.c calls generated
 * code's, so the test needs no compiler.
 */
#include <math.h>

#include "rt_test.h"

#include "nn.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_custom", "", 0, NULL, NULL,
                                    NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"c.sflow", 12, 9};

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})

/* Exact float equality (the values here are small integers) that prints
 * both values when it fails. */
#define CHECK_F(got, want) check_f((got), (want), #got, __LINE__)
static void check_f(float got, float want, const char *expr, int line) {
  if (got != want)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  %g\n    want: %g\n", __FILE__, line, expr, got, want);
  CU_assertImplementation(got == want, (unsigned)line, expr, __FILE__, "", CU_FALSE);
}

static sf_tensor *iota(int32_t nd, const int64_t *shape, bool param) {
  sf_tensor *t = sf__t_empty(nd, shape, &LOC);
  for (int64_t i = 0; i < t->numel; i++)
    sf__t_data(t)[i] = (float)i;
  t->req = param;
  return t;
}

/* ------------------------------------------------------------ launch */

/* kernel k(x: tensor, y: tensor): y[i] = 10 * x[i] + len(x), run by
 * hand as the compiler's `.range` glue would. */
typedef struct {
  void *x, *y;
} kargs;

static void k_cpu(int64_t lo, int64_t hi, void *args) {
  kargs *a = args;
  sf_array *x = a->x, *y = a->y;
  for (int64_t i = lo; i < hi; i++)
    ((float *)y->data)[i] = 10.0f * ((float *)x->data)[i] + (float)x->len;
}

static const sf_field KFIELDS[] = {{"x", 0, &sf__type_tensor}, {"y", 8, &sf__type_tensor}};
static const sf_type KARGS = {.kind = SF_STRUCT, .size = 16, .align = 8, .nfields = 2,
                              .fields = KFIELDS, .name = "k.args"};
static const sf_kernel_desc KDESC = {"k", "c.sflow", "", "sflow_k", &KARGS, k_cpu,
                                     2 /* writes y */};

static void test_launch_tensors(void) {
  int64_t live = sf__tensor_live;
  sf_tensor *x = iota(2, SHAPE(2, 3), false), *y = sf__t_zeros(2, SHAPE(2, 3), &LOC);
  kargs a = {x, y};
  sf_launch(&KDESC, 6, &a, &LOC);
  for (int i = 0; i < 6; i++)
    CHECK_F(sf__t_data(y)[i], 10.0f * (float)i + 6.0f);
  /* A transposed x is read in its own row-major order: 0 3 1 4 2 5. */
  sf_tensor *xt = sf__t_transpose(x, 0, 1, &LOC);
  a.x = xt;
  sf_launch(&KDESC, 6, &a, &LOC);
  const float want[] = {0, 30, 10, 40, 20, 50};
  for (int i = 0; i < 6; i++)
    CHECK_F(sf__t_data(y)[i], want[i] + 6.0f);
  CU_ASSERT(a.x == xt && a.y == y); /* the caller's block is left as it was */
  a.x = x;
  a.y = xt;
  EXPECT_ERROR(sf_launch(&KDESC, 6, &a, &LOC),
               "c.sflow:12:9: runtime error: launch of kernel 'k': parameter 'y' is written, but "
               "its tensor (shape [3, 2]) is a strided view; a kernel writes only contiguous "
               "tensors (make the output with nn.empty_like or nn.zeros)");
  a.y = NULL;
  EXPECT_ERROR(sf_launch(&KDESC, 6, &a, &LOC),
               "c.sflow:12:9: runtime error: launch of kernel 'k': the tensor of parameter 'y' is "
               "unset (a field or variable never assigned)");
  sf_release(xt);
  sf_release(x);
  sf_release(y);
  CHECK_INT(sf__tensor_live, live);
}

/* ---------------------------------------------------------- nn.custom */

static int calls;
static sf_tensor *seen_out;

static sf_array *grads(int64_t n) { return sf_array_new(&sf__type_tensor, n, &LOC); }
static void put(sf_array *a, int64_t i, sf_tensor *t) { ((sf_tensor **)a->data)[i] = t; }

/* x * 3 for input 0, no gradient for input 1 (an empty tensor). */
static sf_array *bw_times3(sf_array *ins, sf_tensor *out, sf_tensor *g) {
  calls++;
  seen_out = out;
  CHECK_INT(ins->len, 2);
  sf_array *r = grads(2);
  put(r, 0, sf__t_scalar(SF_TOP_MUL, g, 3.0f, false, &LOC));
  put(r, 1, sf__t_zeros(1, SHAPE(0), &LOC));
  return r;
}
static sf_array *bw_one(sf_array *ins, sf_tensor *out, sf_tensor *g) {
  (void)ins, (void)out;
  sf_array *r = grads(1);
  sf_retain(g);
  put(r, 0, g);
  return r;
}
static sf_array *bw_shape(sf_array *ins, sf_tensor *out, sf_tensor *g) {
  (void)ins, (void)out, (void)g;
  sf_array *r = grads(2);
  put(r, 0, sf__t_zeros(1, SHAPE(6), &LOC));
  put(r, 1, sf__t_zeros(1, SHAPE(0), &LOC));
  return r;
}

static const void *const FNS[] = {NULL, (const void *)bw_times3, (const void *)bw_one,
                                  (const void *)bw_shape};
static const char *const NAMES[] = {"", "times3", "one", "shape"};

static sf_array *pair(sf_tensor *a, sf_tensor *b) {
  sf_array *r = grads(2);
  sf_retain(a);
  sf_retain(b);
  put(r, 0, a);
  put(r, 1, b);
  return r;
}

static void test_custom_backward(void) {
  int64_t live = sf__tensor_live, nodes = sf__node_live;
  sf_tensor *x = iota(2, SHAPE(2, 3), true), *c = iota(1, SHAPE(3), false);
  sf_array *ins = pair(x, c);
  calls = 0;
  for (int step = 0; step < 1000; step++) {
    sf_tensor *out = sf__t_zeros(2, SHAPE(2, 3), &LOC);
    sf_tensor *r = sf_std_nn_custom(out, ins, 1, &LOC);
    CU_ASSERT(r->req && r->node && r != out && sf__t_data(r) == sf__t_data(out));
    sf_tensor *loss = sf__t_reduce(SF__R_SUM, r, SF__ALL_AXES, &LOC);
    if (step % 2 == 0) /* half the steps drop the graph without backward */
      sf__backward(loss, &LOC);
    sf_release(loss);
    sf_release(r);
    sf_release(out);
  }
  CHECK_INT(calls, 500);
  CU_ASSERT(seen_out != NULL);
  for (int i = 0; i < 6; i++)
    CHECK_F(sf__t_data(x->grad)[i], 1500.0f);
  CHECK_INT(sf__node_live, nodes);
  /* No input requires a gradient: nothing is recorded. */
  sf_tensor *out = sf__t_zeros(1, SHAPE(3), &LOC);
  sf_array *plain = pair(c, c);
  sf_tensor *r = sf_std_nn_custom(out, plain, 1, &LOC);
  CU_ASSERT(!r->req && !r->node);
  sf_release(r);
  sf_release(out);
  sf_release(plain);
  sf_release(ins);
  sf_release(x);
  sf_release(c);
  CHECK_INT(sf__tensor_live, live);
}

static void test_custom_errors(void) {
  sf_tensor *x = iota(2, SHAPE(2, 3), true), *c = iota(1, SHAPE(3), false);
  sf_array *ins = pair(x, c);
  sf_tensor *out = sf__t_zeros(2, SHAPE(2, 3), &LOC);
  sf_tensor *r = sf_std_nn_custom(out, ins, 2, &LOC);
  sf_tensor *loss = sf__t_reduce(SF__R_SUM, r, SF__ALL_AXES, &LOC);
  EXPECT_ERROR(sf__backward(loss, &LOC),
               "c.sflow:12:9: runtime error: nn.custom: backward function 'one' returned 1 "
               "gradient for 2 inputs (one per input; an empty tensor for none)");
  sf__no_grad = false; /* the error left backward's no_grad on */
  sf_release(loss);
  sf_release(r);
  r = sf_std_nn_custom(out, ins, 3, &LOC);
  loss = sf__t_reduce(SF__R_SUM, r, SF__ALL_AXES, &LOC);
  EXPECT_ERROR(sf__backward(loss, &LOC),
               "c.sflow:12:9: runtime error: nn.custom: backward function 'shape' returned a "
               "gradient of shape [6] for input 0 of shape [2, 3]");
  sf__no_grad = false;
  sf_release(loss);
  sf_release(r);
  EXPECT_ERROR(sf_std_nn_custom(NULL, ins, 1, &LOC),
               "c.sflow:12:9: runtime error: nn.custom (out): the tensor is unset (a field or "
               "variable never assigned)");
  EXPECT_ERROR(sf_std_nn_custom(out, ins, 0, &LOC),
               "c.sflow:12:9: runtime error: call of a function value that was never assigned");
  put(ins, 1, NULL);
  EXPECT_ERROR(sf_std_nn_custom(out, ins, 1, &LOC),
               "c.sflow:12:9: runtime error: nn.custom: input 1 is unset (a field or variable "
               "never assigned)");
  put(ins, 1, c);
  sf_release(out);
  sf_release(ins);
  sf_release(x);
}

int main(int argc, char **argv) {
  sf__nn_install();
  sf__fns = FNS;
  sf__fn_names = NAMES;
  sf__nfns = 4;
  static const rt_test tests[] = {
      {"launch_tensors", test_launch_tensors},
      {"custom_backward", test_custom_backward},
      {"custom_errors", test_custom_errors},
      {NULL, NULL},
  };
  return rt_run("rt_custom", tests, argc, argv);
}
