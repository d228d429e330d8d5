/*
 * custom.c — user ops: kernels that take tensors, and nn.custom, which
 * records a user op and its backward function on the tape.
 *
 * A kernel parameter of type tensor is, inside the kernel, the f32[] of
 * the tensor's elements in row-major order (docs/language.md "Kernels").
 * sf_launch (gpu.c) reaches those parameters through sf__ktensors, which
 * sf__custom_install fills in: on the CPU each tensor slot of the argument
 * block is replaced by an f32[] header over the tensor's host values (no
 * copy), on the GPU the launch passes the device address of its first
 * element and its numel, exactly the (pointer, length) pair an f32[]
 * parameter gets, so cudagen.c's CUDA C is the same for both.  On the
 * GPU the launch does not wait: the tensors held for it are released at
 * once (stream order keeps their blocks until the kernel ran, alloc.c),
 * and a failed check is raised later (gpu.c, "deferred kernel checks").
 *
 * Key design choice: a kernel reads any tensor but writes only contiguous
 * ones.  A strided view that the kernel only reads is made contiguous for
 * the launch (one copy, freed after it); one that it writes (the compiler
 * sets the parameter's bit in sf_kernel_desc.writes) is a runtime error
 * naming the kernel and the parameter, because writing into a copy and
 * copying back would silently scatter into storage other views share.
 * Outputs are tensors the caller made (nn.empty_like, zeros), contiguous.
 *
 * nn.custom(out, inputs, backward): a new header over out's values whose
 * node (sf__record_n) holds the inputs and a header over out; backward
 * runs the sflow function value through sf_program.fns, with the inputs,
 * out and the gradient of out, and adds each gradient it returns to its
 * input, after checking the count and the shapes against the nn.custom
 * call's line.  It runs under no_grad (as every backward rule), so the
 * kernels it launches record nothing, and the tape releases the node, its
 * inputs and the saved output like any other op's.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "nn.h"

/* ------------------------------------------------ kernels' tensors */

/* The argument block of one launch: a copy of the caller's, then the
 * tensors it holds for the launch (each retained: the caller's, or the
 * contiguous copy of a strided one), then (CPU) the f32[] headers. */
typedef struct {
  int32_t nt;          /* tensor parameters */
  int32_t size;        /* bytes of the argument block */
  int32_t *field;      /* (nt) their field index in k->args */
  sf_tensor **held;    /* (nt) */
  sf_array *views;     /* (nt) CPU: the headers the slots point at */
  char blk[];          /* the argument block (8-aligned: starts at 32) */
} launch_blk;

static launch_blk *blk_of(void *blk) {
  return (launch_blk *)((char *)blk - offsetof(launch_blk, blk));
}

static bool writes_param(const sf_kernel_desc *k, int32_t i) {
  return i >= 64 || (k->writes >> i & 1);
}

/* The errors come first, before anything is held, so that a failed
 * launch (a task that @retry runs again) leaks nothing. */
static int32_t kt_check(const sf_kernel_desc *k, void *args, const sf_loc *loc) {
  const sf_type *at = k->args;
  char sb[SF__SHAPE_BUF];
  int32_t nt = 0;
  for (int32_t i = 0; i < at->nfields; i++) {
    const sf_field *f = &at->fields[i];
    if (f->type->kind != SF_TENSOR)
      continue;
    nt++;
    sf_tensor *t = *(sf_tensor **)((char *)args + f->offset);
    if (!t)
      sf_runtime_error(loc, "launch of kernel '%s': the tensor of parameter '%s' is unset (a "
                       "field or variable never assigned)", k->name, f->name);
    if (writes_param(k, i) && !sf__t_is_contig(t))
      sf_runtime_error(loc, "launch of kernel '%s': parameter '%s' is written, but its tensor "
                       "(shape %s) is a strided view; a kernel writes only contiguous tensors "
                       "(make the output with nn.empty_like or nn.zeros)", k->name, f->name,
                       SF__SHP(t, sb));
  }
  return nt;
}

static void *kt_begin(const sf_kernel_desc *k, void *args, bool gpu, const sf_loc *loc) {
  const sf_type *at = k->args;
  int32_t nt = kt_check(k, args, loc);
  launch_blk *b = sf_alloc(sizeof *b + (size_t)at->size);
  b->nt = nt;
  b->size = at->size;
  b->field = sf__alloc_n((size_t)nt, sizeof *b->field);
  b->held = sf__alloc_n((size_t)nt, sizeof *b->held);
  b->views = gpu ? NULL : sf__alloc_n((size_t)nt, sizeof *b->views);
  memcpy(b->blk, args, (size_t)at->size);
  for (int32_t i = 0, j = 0; i < at->nfields; i++) {
    const sf_field *f = &at->fields[i];
    if (f->type->kind != SF_TENSOR)
      continue;
    void **slot = (void **)(b->blk + f->offset);
    b->field[j] = i;
    b->held[j] = sf__t_contig(*slot); /* the tensor itself, retained, when contiguous */
    if (gpu) {
      *slot = b->held[j];
    } else {
      sf_tensor *h = b->held[j];
      b->views[j] = (sf_array){.hdr = {1, SF_OBJ_ARRAY, 0}, .len = h->numel,
                               .elem = &sf_type_f32,
                               .data = writes_param(k, i) ? sf__t_wdata(h) : sf__t_data(h),
                               .cap = h->numel};
      *slot = &b->views[j];
    }
    j++;
  }
  return b->blk;
}

static uint64_t kt_dptr(void *tensor, int64_t *numel, const sf_loc *loc) {
  sf_tensor *t = tensor;
  *numel = t->numel;
  return t->numel ? sf__t_dptr(t, loc) : 0;
}

static void kt_end(const sf_kernel_desc *k, void *blk, bool gpu) {
  launch_blk *b = blk_of(blk);
  for (int32_t j = 0; j < b->nt; j++) {
    if (gpu && writes_param(k, b->field[j]))
      sf__t_dwrote(b->held[j]);
    sf_release(b->held[j]);
  }
  sf_free(b->field);
  sf_free(b->held);
  if (b->views)
    sf_free(b->views);
  sf_free(b);
}

void sf__custom_install(void) {
  sf__ktensors = (sf__kernel_tensors){sf__nn_gpu_here, kt_begin, kt_dptr, kt_end};
}

/* --------------------------------------------------------- nn.custom */

/* backward(inputs, out, grad) -> one gradient per input, as generated
 * code calls a value of type fn(tensor[], tensor, tensor) -> tensor[]:
 * arguments borrowed, the result owned. */
typedef sf_array *(*custom_bw_fn)(sf_array *inputs, sf_tensor *out, sf_tensor *grad);

static const char *fn_name(int64_t f) {
  return f > 0 && f < sf__nfns && sf__fn_names ? sf__fn_names[f] : "?";
}

/* The node's rule: n->more the inputs, n->saved a header over out, n->i0
 * the function value, n->at the nn.custom call. */
static void custom_backward(sf__node *n, sf_tensor *g) {
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  const sf_loc *loc = n->at;
  sf_array *ins = sf_array_new(&sf__type_tensor, n->nmore, loc);
  for (int32_t i = 0; i < n->nmore; i++) {
    sf_retain(n->more[i]);
    ((sf_tensor **)ins->data)[i] = n->more[i];
  }
  custom_bw_fn fn = (custom_bw_fn)sf__fns[n->i0];
  sf_array *gs = fn(ins, n->saved, g);
  sf_release(ins);
  int64_t ng = gs ? gs->len : 0;
  if (ng != n->nmore) {
    sf_release(gs);
    sf_runtime_error(loc, "nn.custom: backward function '%s' returned %" PRId64 " gradient%s "
                     "for %d input%s (one per input; an empty tensor for none)",
                     fn_name(n->i0), ng, ng == 1 ? "" : "s", n->nmore, n->nmore == 1 ? "" : "s");
  }
  for (int32_t i = 0; i < n->nmore; i++) {
    sf_tensor *x = n->more[i], *gi = ((sf_tensor **)gs->data)[i];
    if (!gi) {
      sf_release(gs);
      sf_runtime_error(loc, "nn.custom: backward function '%s' returned an unset gradient for "
                       "input %d", fn_name(n->i0), i);
    }
    if (gi->numel == 0 && x->numel != 0)
      continue; /* "no gradient" */
    bool same = gi->ndim == x->ndim &&
                !memcmp(gi->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (!same) {
      SF__SHP(gi, sa);
      sf_release(gs);
      sf_runtime_error(loc, "nn.custom: backward function '%s' returned a gradient of shape %s "
                       "for input %d of shape %s", fn_name(n->i0), sa, i, SF__SHP(x, sb));
    }
    if (x->req) {
      sf_retain(gi);
      sf__grad_add(x, gi);
    }
  }
  sf_release(gs);
}

sf_tensor *sf_std_nn_custom(sf_tensor *out, sf_array *inputs, int64_t backward,
                            const sf_loc *loc) {
  sf__t_arg(out, "nn.custom (out)", loc);
  int32_t nin = inputs ? (int32_t)inputs->len : 0;
  sf_tensor **ins = nin ? (sf_tensor **)inputs->data : NULL;
  for (int32_t i = 0; i < nin; i++)
    if (!ins[i])
      sf_runtime_error(loc, "nn.custom: input %d is unset (a field or variable never assigned)", i);
  if (backward <= 0 || backward >= sf__nfns)
    sf_fn_unset(loc);
  /* A fresh header: out's own history (if any) is not followed, as the
   * forward of a torch.autograd.Function is not. */
  sf_tensor *r = sf__t_view(out, out->ndim, out->shape, out->strides, out->offset);
  sf__node *n = nin ? sf__record_n("custom", r, custom_backward, ins, nin) : NULL;
  if (n) {
    n->saved = sf__t_view(out, out->ndim, out->shape, out->strides, out->offset);
    n->i0 = backward;
    n->at = loc;
  }
  return r;
}

/* ----------------------------------------------------- nn.checkpoint */

/* f(inputs, args) -> its output, as generated code calls a value of type
 * fn(tensor[], f64[]) -> tensor: arguments borrowed, the result owned. */
typedef sf_tensor *(*ckpt_fn)(sf_array *inputs, sf_array *args);

/* What the recompute must see as the forward did: the random stream
 * (dropout with seed -1 draws the same mask) and the autocast switch.
 * Kept in node->idx (malloc'ed, freed with the node). */
typedef struct {
  sf__rng rng;
  bool autocast;
} ckpt_state;

static sf_tensor *ckpt_call(int64_t f, sf_array *ins, sf_array *args, const sf_loc *loc,
                            const char *when) {
  sf_tensor *y = ((ckpt_fn)sf__fns[f])(ins, args);
  if (!y)
    sf_runtime_error(loc, "nn.checkpoint: function '%s' returned an unset tensor (%s)",
                     fn_name(f), when);
  return y;
}

/* The node's rule: n->more the inputs, n->targets a copy of args, n->i0
 * the function value, n->idx the forward's ckpt_state, n->shape the
 * forward's output shape, n->at the nn.checkpoint call.  The function
 * runs again with recording on, over fresh leaves for the inputs that
 * have a history (a leaf, a param or a plain tensor, is used as it is, so
 * a weight's gradient is added to it directly), and a backward inside
 * this backward takes g through that recomputed tape alone. */
static void ckpt_backward(sf__node *n, sf_tensor *g) {
  char sa[SF__SHAPE_BUF], sb[SF__SHAPE_BUF];
  const sf_loc *loc = n->at;
  const ckpt_state *st = (const ckpt_state *)n->idx;
  sf_array *ins = sf_array_new(&sf__type_tensor, n->nmore, loc);
  sf_tensor **leaf = ins->data;
  for (int32_t i = 0; i < n->nmore; i++) {
    sf_tensor *x = n->more[i];
    if (x->node) {
      leaf[i] = sf__t_view(x, x->ndim, x->shape, x->strides, x->offset);
      leaf[i]->req = true;
    } else {
      sf_retain(x);
      leaf[i] = x;
    }
  }
  sf__rng rng = sf__rng_cur;
  bool autocast = sf__autocast;
  int32_t depth = sf__nn_ckpt_depth;
  sf__rng_cur = st->rng;
  sf__autocast = st->autocast;
  sf__nn_ckpt_depth = 0;
  sf__no_grad = false;
  sf_tensor *y = ckpt_call(n->i0, ins, n->targets, loc, "in the recompute of backward");
  sf__no_grad = true; /* the outer backward's rules record nothing */
  sf__rng_cur = rng;
  sf__autocast = autocast;
  sf__nn_ckpt_depth = depth;
  if (y->ndim != n->ndim || memcmp(y->shape, n->shape, sizeof(int64_t) * (size_t)n->ndim)) {
    sf__shape_str(n->ndim, n->shape, sb);
    SF__SHP(y, sa);
    sf_release(y);
    sf_release(ins);
    sf_runtime_error(loc, "nn.checkpoint: function '%s' gave shape %s in the recompute of "
                     "backward but %s in the forward (it must compute the same thing both "
                     "times)", fn_name(n->i0), sa, sb);
  }
  sf__backward_from(y, g, loc);
  sf_release(y);
  for (int32_t i = 0; i < n->nmore; i++) {
    sf_tensor *x = n->more[i];
    if (x->node && leaf[i]->grad) {
      sf_retain(leaf[i]->grad);
      sf__grad_add(x, leaf[i]->grad);
    }
  }
  sf_release(ins);
}

sf_tensor *sf_std_nn_checkpoint(int64_t f, sf_array *inputs, sf_array *args, const sf_loc *loc) {
  if (f <= 0 || f >= sf__nfns)
    sf_fn_unset(loc);
  int32_t nin = inputs ? (int32_t)inputs->len : 0;
  sf_tensor **ins = nin ? (sf_tensor **)inputs->data : NULL;
  bool req = false;
  for (int32_t i = 0; i < nin; i++) {
    if (!ins[i])
      sf_runtime_error(loc, "nn.checkpoint: input %d is unset (a field or variable never "
                       "assigned)", i);
    req = req || ins[i]->req;
  }
  if (!req || sf__no_grad) /* nothing to record: a plain call */
    return ckpt_call(f, inputs, args, loc, "in the forward");
  ckpt_state *st = malloc(sizeof *st);
  if (!st)
    sf_runtime_error(loc, "nn.checkpoint: out of memory");
  st->rng = sf__rng_cur;
  st->autocast = sf__autocast;
  /* A copy of args, whose caller may change the array later. */
  int64_t na = args ? args->len : 0;
  sf_array *a = sf_array_new(&sf_type_f64, na, loc);
  if (na)
    memcpy(a->data, args->data, sizeof(double) * (size_t)na);
  sf__nn_ckpt_depth++;
  sf__no_grad = true;
  sf_tensor *y = ((ckpt_fn)sf__fns[f])(inputs, a);
  sf__nn_ckpt_depth--;
  sf__no_grad = false; /* recording was on (checked above) */
  sf__autocast = st->autocast; /* f's own switches end with it */
  if (!y) {
    free(st);
    sf_release(a);
    sf_runtime_error(loc, "nn.checkpoint: function '%s' returned an unset tensor (in the "
                     "forward)", fn_name(f));
  }
  /* A fresh header: the output's own history (none, under no_grad) is not
   * followed; its values are what the node's output holds. */
  sf_tensor *r = sf__t_view(y, y->ndim, y->shape, y->strides, y->offset);
  sf_release(y);
  sf__node *n = sf__record_n("checkpoint", r, ckpt_backward, ins, nin);
  n->i0 = f;
  n->targets = a;
  n->idx = (int64_t *)st;
  n->at = loc;
  return r;
}

/* ------------------------------------------------------ outputs */

/* Made where the running call's tensors live (the tensor rule), so that a
 * custom op's output on a GPU is never uploaded before its kernel writes. */
sf_tensor *sf_std_nn_empty_like(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "empty_like", loc);
  if (sf__nn_gpu_here(loc))
    return sf__t_dempty(t->ndim, t->shape, loc);
  return sf__t_empty(t->ndim, t->shape, loc);
}

int64_t sf_std_nn_numel(sf_tensor *t, const sf_loc *loc) {
  return sf__t_arg(t, "numel", loc)->numel;
}

sf_tensor *sf_std_nn_zeros_like(sf_tensor *t, const sf_loc *loc) {
  sf__t_arg(t, "zeros_like", loc);
  if (sf__nn_gpu_here(loc))
    return sf__t_dzeros(t->ndim, t->shape, loc);
  return sf__t_zeros(t->ndim, t->shape, loc);
}
