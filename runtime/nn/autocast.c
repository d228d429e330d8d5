/*
 * autocast.c — nn.autocast(on) on the CPU: matmul and Linear in bfloat16
 * with f32 accumulation, as the GPU runs them (docs/nn.md, "GPU").
 *
 * While the switch is on (per thread like no_grad, and reset by the
 * scheduler at every task call and actor method), `@`, nn.forward of a
 * Linear and matmul_nt round both operands to bf16 (round to nearest
 * even) and multiply the rounded values in f32 with the CPU's sgemm.  On
 * the GPU the same ops convert their operands to bf16 on the device and
 * multiply with cuBLAS's bf16 products accumulating in f32
 * (gpu_ops.c), so a CPU run and a GPU run of one program agree to the
 * rounding of the f32 sums.  The backward's products are bf16 too (both
 * operands rounded: the gradient and the saved operand), as PyTorch's
 * autocast gives; the gradients themselves are f32.
 *
 * Key design choice: these are the CPU's bf16 kernels of matmul.c's
 * device table entries (bf16 set): the rounded operands are ordinary
 * tensors and the products the ordinary ops, run with the switch off and
 * no tape; matmul.c's one node over the original operands (i0 = 1) calls
 * the bf16 backward here.  So shapes,
 * broadcasting and the error messages are exactly matmul's.
 */
#include "nn.h"

void sf_std_nn_autocast(bool on, const sf_loc *loc) {
  (void)loc;
  sf__autocast = on;
}

sf_tensor *sf__t_bf16_rounded(sf_tensor *t) {
  sf_tensor *c = sf__t_contig(t);
  sf_tensor *r = sf__t_like(c);
  const float *s = sf__t_data(c);
  float *d = sf__t_data(r);
  for (int64_t i = 0; i < c->numel; i++)
    d[i] = sf__bf16_round(s[i]);
  sf_release(c);
  return r;
}

/* Runs the ordinary ops in f32 without a tape, then puts the switches back. */
typedef struct {
  bool no_grad, autocast;
} switches;
static switches plain(void) {
  switches s = {sf__no_grad, sf__autocast};
  sf__no_grad = true;
  sf__autocast = false;
  return s;
}
static void restore(switches s) {
  sf__no_grad = s.no_grad;
  sf__autocast = s.autocast;
}

static sf_tensor *last2_t(sf_tensor *x) { return sf__t_transpose(x, x->ndim - 2, x->ndim - 1, NULL); }

/* matmul's gradients with bf16 products: dA = G · Bᵀ, dB = Aᵀ · G (the
 * rule, matmul.c's, sums them over broadcast dimensions and adds them). */
void sf__ac_matmul_bw(const sf__node *n, sf_tensor *g, sf_tensor **d) {
  sf_tensor *a = n->in[0], *b = n->in[1];
  d[0] = d[1] = NULL;
  switches s = plain();
  sf_tensor *gr = sf__t_bf16_rounded(g);
  if (a->req) {
    sf_tensor *br = sf__t_bf16_rounded(b), *bt = last2_t(br);
    d[0] = sf__t_matmul(gr, bt, NULL);
    sf_release(bt);
    sf_release(br);
  }
  if (b->req) {
    sf_tensor *ar = sf__t_bf16_rounded(a), *at = last2_t(ar);
    d[1] = sf__t_matmul(at, gr, NULL);
    sf_release(at);
    sf_release(ar);
  }
  sf_release(gr);
  restore(s);
}

sf_tensor *sf__ac_matmul(sf_tensor *a, sf_tensor *b, const sf_loc *loc) {
  sf_tensor *ar = sf__t_bf16_rounded(a), *br = sf__t_bf16_rounded(b);
  switches s = plain();
  sf_tensor *c = sf__t_matmul(ar, br, loc);
  restore(s);
  sf_release(ar);
  sf_release(br);
  return c;
}

/* Linear's gradients with bf16 products: dx = G W, dW = Gᵀ X (rows folded). */
void sf__ac_matmul_nt_bw(const sf__node *n, sf_tensor *g, sf_tensor **d) {
  sf_tensor *x = n->in[0], *w = n->in[1];
  int64_t out = w->shape[0], in = w->shape[1], rows = out ? g->numel / out : 0;
  d[0] = d[1] = NULL;
  switches s = plain();
  sf_tensor *gr = sf__t_bf16_rounded(g);
  if (x->req) {
    sf_tensor *wr = sf__t_bf16_rounded(w);
    d[0] = sf__t_matmul(gr, wr, NULL);
    sf_release(wr);
  }
  if (w->req) {
    sf_tensor *xr = sf__t_bf16_rounded(x);
    sf_tensor *g2 = sf__t_reshape(gr, 2, (int64_t[]){rows, out}, NULL);
    sf_tensor *x2 = sf__t_reshape(xr, 2, (int64_t[]){rows, in}, NULL);
    sf_tensor *gt = last2_t(g2);
    d[1] = sf__t_matmul(gt, x2, NULL);
    sf_release(gt);
    sf_release(g2);
    sf_release(x2);
    sf_release(xr);
  }
  sf_release(gr);
  restore(s);
}

sf_tensor *sf__ac_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc) {
  sf_tensor *xr = sf__t_bf16_rounded(x), *wr = sf__t_bf16_rounded(w);
  switches s = plain();
  sf_tensor *y = sf__t_matmul_nt(xr, wr, loc);
  restore(s);
  sf_release(xr);
  sf_release(wr);
  return y;
}
