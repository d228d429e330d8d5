/*
 * autograd.c — the tape: recording an op's node, accumulating gradients,
 * and backward.
 *
 * Key design choice (micrograd's, with PyTorch's lifetimes): each op that
 * has an input requiring a gradient records a node owned by its result,
 * holding the inputs it needs.  Nodes carry a sequence number from one
 * counter, so an input's node is always older than its consumer's: the
 * tape of a loss is the set of nodes it reaches, and newest-first is a
 * reverse topological order.  backward collects that set, runs each
 * node's rule once with the gradient its output received, and then
 * releases the whole set (inputs, saved values, gradients), so a training
 * loop's memory is flat however many steps run; a result that nobody
 * holds frees its nodes too, so a forward pass without backward leaks
 * nothing either.  The no_grad switch is per thread (a task call or an
 * actor method runs on one thread).
 *
 * Backward rules never record (no_grad is set while they run): a
 * gradient of a gradient is out of scope, as in PyTorch without
 * create_graph.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

static uint64_t seq_counter; /* atomic */
static uint64_t walk_counter; /* atomic */

sf__node *sf__record(const char *op, sf_tensor *out, sf__backward_fn bw, sf_tensor *a,
                     sf_tensor *b) {
  return sf__record3(op, out, bw, a, b, NULL);
}

sf__node *sf__record3(const char *op, sf_tensor *out, sf__backward_fn bw, sf_tensor *a,
                      sf_tensor *b, sf_tensor *c) {
  if (sf__no_grad || !((a && a->req) || (b && b->req) || (c && c->req)))
    return NULL;
  sf__node *n = sf_alloc(sizeof *n);
  memset(n, 0, sizeof *n);
  n->rc = 1;
  n->seq = __atomic_add_fetch(&seq_counter, 1, __ATOMIC_RELAXED);
  n->op = op;
  n->backward = bw;
  n->in[0] = a;
  n->in[1] = b;
  n->in[2] = c;
  n->nin = c ? 3 : b ? 2 : 1;
  sf_retain(a);
  sf_retain(b);
  sf_retain(c);
  n->ndim = out->ndim;
  memcpy(n->shape, out->shape, sizeof n->shape);
  /* A device op's result is device-only when recorded, and a view made
   * in a GPU call is the device's too: its backward's kernels run there
   * (sf__nn_dev_of). */
  n->gpu = out->st->where == SF__WHERE_DEVICE || sf__nn_dev_here(NULL) == &sf__nn_gpu;
  out->node = n;
  out->req = true;
  __atomic_fetch_add(&sf__node_live, 1, __ATOMIC_RELAXED);
  return n;
}

sf__node *sf__record_n(const char *op, sf_tensor *out, sf__backward_fn bw, sf_tensor **ins,
                       int32_t nin) {
  int32_t k = 0;
  while (k < nin && !ins[k]->req)
    k++;
  /* Recorded through one input that requires a gradient, so the node's
   * fields are filled as every other's (NULL under no_grad or when none
   * does); the inputs then move to more[]. */
  sf__node *n = k < nin ? sf__record3(op, out, bw, ins[k], NULL, NULL) : NULL;
  if (!n)
    return NULL;
  sf_release(n->in[0]);
  n->in[0] = NULL;
  n->nin = 0;
  n->more = sf_alloc((size_t)nin * sizeof *n->more);
  for (int32_t i = 0; i < nin; i++) {
    n->more[i] = ins[i];
    sf_retain(ins[i]);
  }
  n->nmore = nin;
  return n;
}

/* Drops what the node holds: after backward, or when it is freed. */
static void node_release_edges(sf__node *n) {
  for (int32_t i = 0; i < SF__NIN; i++) {
    sf_release(n->in[i]);
    n->in[i] = NULL;
  }
  for (int32_t i = 0; i < n->nmore; i++)
    sf_release(n->more[i]);
  if (n->more)
    sf_free(n->more);
  n->more = NULL;
  n->nmore = 0;
  sf_release(n->saved);
  sf_release(n->targets);
  sf_release(n->grad);
  n->saved = NULL;
  n->targets = NULL;
  n->grad = NULL;
  free(n->idx);
  n->idx = NULL;
  n->released = true;
}

void sf__node_unref(sf__node *n) {
  if (n && __atomic_sub_fetch(&n->rc, 1, __ATOMIC_ACQ_REL) == 0) {
    node_release_edges(n);
    __atomic_fetch_sub(&sf__node_live, 1, __ATOMIC_RELAXED);
    sf_free(n);
  }
}

/* A gradient buffer the accumulation may add into: owned by nobody else. */
static sf_tensor *own_grad(sf_tensor *g) {
  if (__atomic_load_n(&g->hdr.rc, __ATOMIC_RELAXED) == 1 &&
      __atomic_load_n(&g->st->rc, __ATOMIC_RELAXED) == 1 && g->offset == 0 && sf__t_is_contig(g) &&
      !g->node)
    return g;
  sf_tensor *c = sf__t_like_here(g);
  sf__t_assign(c, g);
  sf_release(g);
  return c;
}

void sf__grad_add(sf_tensor *x, sf_tensor *g) {
  if (!x || !x->req) {
    sf_release(g);
    return;
  }
  sf_tensor **slot = x->node ? &x->node->grad : &x->grad;
  if (!*slot) {
    *slot = own_grad(g);
    return;
  }
  sf__t_add_into(*slot, g);
  sf_release(g);
}

/* The slot sf__grad_add would add into, when a producer can add there
 * itself: a product into zeros plus an add pass was two passes over an
 * activation's gradient (6 MB for each of the encoder layer's q, k, v
 * inputs and its FFN's) where sgemm's beta 1 is none.  own_grad made the
 * slot private, contiguous and unshared; it is checked again because a
 * leaf's grad(t) may have handed it out since. */
float *sf__grad_acc_buf(sf_tensor *x) {
  if (!x || !x->req || sf__nn_gpu_here(NULL))
    return NULL;
  sf_tensor *s = x->node ? x->node->grad : x->grad;
  if (!s || s->numel != x->numel || s->offset != 0 || !sf__t_is_contig(s) ||
      __atomic_load_n(&s->hdr.rc, __ATOMIC_RELAXED) != 1 ||
      __atomic_load_n(&s->st->rc, __ATOMIC_RELAXED) != 1)
    return NULL;
  return sf__t_wdata(s);
}

/* ---------------------------------------------------- after-hooks
 *
 * A rule may ask for a function to run once the backward it runs in has
 * passed a point of the tape: before the first node recorded at or before
 * seq (sf__seq_now when the point was made), or at the end.  std.train's
 * units (train.c) use it to reduce-scatter a unit's gradients as soon as
 * every node of the unit has run: its nodes are exactly those recorded
 * after its forward began.  The hooks of one backward sit above its base
 * in a per-thread stack, so a backward inside a rule (nn.checkpoint's)
 * has its own, and newest-first order makes the stack's top the next one
 * due (the points of a backward's hooks nest, as the calls that made
 * them). */
typedef struct {
  uint64_t seq;
  void (*fn)(void *arg, const sf_loc *loc);
  void *arg;
} bw_hook;

static _Thread_local bw_hook *hooks;
static _Thread_local int64_t nhooks, hooks_cap, hooks_base = -1;

uint64_t sf__seq_now(void) { return __atomic_load_n(&seq_counter, __ATOMIC_RELAXED); }

bool sf__backward_after(uint64_t seq, void (*fn)(void *arg, const sf_loc *loc), void *arg) {
  if (hooks_base < 0)
    return false; /* no backward runs on this thread */
  if (nhooks == hooks_cap) {
    hooks_cap = hooks_cap ? 2 * hooks_cap : 16;
    hooks = sf__realloc(hooks, (size_t)hooks_cap * sizeof *hooks);
  }
  hooks[nhooks++] = (bw_hook){seq, fn, arg};
  return true;
}

/* Runs the hooks due before a node of seq `before` (all of them: 0). */
static void run_hooks(int64_t base, uint64_t before, const sf_loc *loc) {
  while (nhooks > base && hooks[nhooks - 1].seq >= before) {
    bw_hook h = hooks[--nhooks];
    h.fn(h.arg, loc);
  }
}

static int newest_first(const void *a, const void *b) {
  uint64_t x = (*(sf__node *const *)a)->seq, y = (*(sf__node *const *)b)->seq;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The nodes loss reaches, each retained once, in *out (sf_alloc'ed). */
static int64_t collect(sf__node *root, sf__node ***out, const sf_loc *loc) {
  uint64_t walk = __atomic_add_fetch(&walk_counter, 1, __ATOMIC_RELAXED);
  int64_t n = 0, cap = 64, sp = 0, scap = 64;
  sf__node **nodes = sf_alloc((size_t)cap * sizeof *nodes);
  sf__node **stack = sf_alloc((size_t)scap * sizeof *stack);
  stack[sp++] = root;
  root->mark = walk;
  while (sp) {
    sf__node *x = stack[--sp];
    if (x->released) {
      sf_free(nodes);
      sf_free(stack);
      sf_runtime_error(loc, "backward: the graph through a %s result was already released by "
                       "an earlier backward (backward frees the tape; compute the loss again)",
                       x->op);
    }
    if (n == cap)
      nodes = sf__realloc(nodes, (size_t)(cap *= 2) * sizeof *nodes);
    nodes[n++] = x;
    for (int32_t i = 0; i < SF__NIN + x->nmore; i++) {
      sf_tensor *in = i < SF__NIN ? x->in[i] : x->more[i - SF__NIN];
      if (!in || !in->node || in->node->mark == walk)
        continue;
      in->node->mark = walk;
      if (sp == scap)
        stack = sf__realloc(stack, (size_t)(scap *= 2) * sizeof *stack);
      stack[sp++] = in->node;
    }
  }
  sf_free(stack);
  for (int64_t i = 0; i < n; i++)
    __atomic_fetch_add(&nodes[i]->rc, 1, __ATOMIC_RELAXED);
  *out = nodes;
  return n;
}

/* Runs the tape out reaches with seed (out's shape, borrowed) as out's
 * gradient: every node once, newest first, then releases them all. */
static void run_backward(sf_tensor *out, sf_tensor *seed, const sf_loc *loc) {
  if (!out->node) { /* out is a param itself */
    sf_retain(seed);
    sf__grad_add(out, seed);
    return;
  }
  sf__node **nodes;
  int64_t n = collect(out->node, &nodes, loc);
  qsort(nodes, (size_t)n, sizeof *nodes, newest_first);
  bool saved = sf__no_grad;
  sf__no_grad = true;
  sf_retain(seed);
  sf_release(out->node->grad);
  out->node->grad = seed;
  /* This backward's hooks: above the stack's height now (a backward an
   * error abandoned left its own below: never run, never in the way). */
  int64_t outer = hooks_base, base = nhooks;
  hooks_base = base;
  for (int64_t i = 0; i < n; i++) {
    sf__node *x = nodes[i];
    if (nhooks > base)
      run_hooks(base, x->seq, loc);
    sf_tensor *g = x->grad;
    x->grad = NULL;
    if (g)
      x->backward(x, g); /* g is borrowed by the rule */
    sf_release(g);
  }
  run_hooks(base, 0, loc);
  hooks_base = outer;
  sf__no_grad = saved;
  /* Every node is still held by the walk, so releasing one's inputs frees
   * at most their headers: no deep recursion, and no node freed under us. */
  for (int64_t i = 0; i < n; i++)
    node_release_edges(nodes[i]);
  for (int64_t i = 0; i < n; i++)
    sf__node_unref(nodes[i]);
  sf_free(nodes);
}

void sf__backward(sf_tensor *loss, const sf_loc *loc) {
  char sb[SF__SHAPE_BUF];
  sf__t_arg(loss, "backward", loc);
  if (loss->numel != 1)
    sf_runtime_error(loc, "backward: the loss must have one element, but its shape is %s "
                     "(reduce it first, e.g. with mean or sum)", SF__SHP(loss, sb));
  if (!loss->req)
    sf_runtime_error(loc, "backward: the loss (shape %s) has no path to a param: it was made "
                     "from no param, or under no_grad(true)", SF__SHP(loss, sb));
  sf_tensor *one = sf__nn_gpu_here(loc) ? sf__gpu_full(loss->ndim, loss->shape, 1.0f, loc)
                                        : sf__t_full(loss->ndim, loss->shape, 1.0f);
  run_backward(loss, one, loc);
  sf_release(one);
}

void sf__backward_from(sf_tensor *out, sf_tensor *g, const sf_loc *loc) {
  if (out->req)
    run_backward(out, g, loc);
}

sf_tensor *sf__t_grad(sf_tensor *t) {
  if (t->req && !t->node) {
    if (!t->grad)
      t->grad = sf__t_zeros(t->ndim, t->shape, NULL);
    sf_retain(t->grad);
    return t->grad;
  }
  return sf__t_zeros(t->ndim, t->shape, NULL);
}
