/*
 * gpu_layers.c — the GPU kernels of std.nn's layers (docs/nn.md, "GPU"),
 * the GPU's entries of the device kernel table (nn.h, "dev.c"): softmax
 * and log-softmax over any axis, cross-entropy, layer norm, embedding, the
 * dropouts' masks, attention's masked softmax and the fused attention,
 * argmax, each forward and its gradient, over the kernels of
 * kernels/nn_layers.cu.  The ops (reduce.c, layers.c, index.c) check
 * their arguments, reach these through the table when the running call
 * holds a GPU, and record their one node, so both devices share every
 * check, message and backward rule.
 *
 * Key design choice: what an entry keeps for the backward (sf__keep) is
 * the device's own — layer norm's row statistics, the ids and targets
 * already uploaded, the dropout mask — and only its backward entry reads
 * it; attention without dropout is one fused kernel sequence as on the
 * CPU (layers.c's attention_fused), its products strided-batched cuBLAS
 * calls straight on the heads' column blocks, and the composed ops
 * (attention with dropout, mse, cat, stack, narrow's backward) are
 * written once in their family files over table entries.  Nothing here
 * reads the device back except argmax, whose result is an i64[] by
 * design: integer inputs (targets, ids, masks) are host arrays the checks
 * already read, queued to the device beside the kernels, and
 * cross-entropy's count of kept rows comes from those host targets.  The
 * dropout masks are the CPU's bit for bit: the CPU draws them from a PCG32
 * stream per mask (or per row), and the device evaluates element k of that
 * stream by jumping k steps ahead (nn_layers.cu), from start states the
 * host computes exactly as std.c seeds its streams.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

#define NB 256 /* the block size every kernel of nn_layers.cu is written for */

static void *kern(const char *entry, const sf_loc *loc) {
  int block;
  return sf__nn_kernel("nn_layers", entry, &block, loc);
}

static void launch(const char *entry, int64_t grid, void **params, const sf_loc *loc) {
  if (grid > 0)
    sf__nn_launch(kern(entry, loc), grid, NB, 0, params, loc);
}

static int64_t blocks_for(int64_t n) { return n > 0 ? (n + NB - 1) / NB : 0; }

/* The (outer, n, inner) split of t's shape around axis (reduce.c's). */
static void split(const sf_tensor *t, int32_t ax, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int32_t i = 0; i < ax; i++)
    *outer *= t->shape[i];
  for (int32_t i = ax + 1; i < t->ndim; i++)
    *inner *= t->shape[i];
  *n = t->shape[ax];
}

/* Mirrors struct sf_nnl_nd of nn_layers.cu. */
typedef struct {
  int32_t ndim, pad;
  int64_t shape[SF__TMAX], src_st[SF__TMAX], dst_st[SF__TMAX];
} nd_desc;

/* dst = src over shape, both device pointers to first elements with their
 * own strides. */
static void copy_nd(uint64_t src, const int64_t *src_st, uint64_t dst, const int64_t *dst_st,
                    int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  nd_desc d = {.ndim = ndim};
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) {
    d.shape[i] = shape[i];
    d.src_st[i] = src_st[i];
    d.dst_st[i] = dst_st[i];
    n *= shape[i];
  }
  void *params[] = {&src, &dst, &n, &d};
  launch("sf_nnl_copy_nd", blocks_for(n), params, loc);
}

/* t's values in a contiguous device tensor: t itself (retained) when it is
 * one, else a strided copy made on the device. */
static sf_tensor *dcontig(sf_tensor *t, const sf_loc *loc) {
  if (sf__t_is_contig(t)) {
    sf_retain(t);
    return t;
  }
  sf_tensor *c = sf__t_dempty(t->ndim, t->shape, loc);
  copy_nd(sf__t_dptr(t, loc), t->strides, sf__t_dptr(c, loc), c->strides, t->ndim, t->shape, loc);
  sf__t_dwrote(c);
  return c;
}

/* cuMemcpyHtoDAsync_v2, looked up once (NULL when the driver lacks it). */
typedef int (*htod_async_fn)(uint64_t dst, const void *src, size_t n, void *stream);
static htod_async_fn htod_async(void) {
  static htod_async_fn f; /* atomic: every thread finds the same entry */
  static int looked;
  if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
    htod_async_fn g;
    *(void **)&g = sf__cuda_sym("cuMemcpyHtoDAsync_v2");
    __atomic_store_n(&f, g, __ATOMIC_RELAXED);
    __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&f, __ATOMIC_RELAXED);
}

/* n 64-bit words on the device, in a tensor of 2n floats (the bits are
 * never read as floats): the targets, ids and masks the kernels index
 * with, and the dropout streams' states.  The copy is queued on stream 0
 * through pinned memory (sf__dev_upload: from pageable memory, even
 * cuMemcpyHtoDAsync may wait for the kernels queued before it, and the
 * synchronous cuMemcpyHtoD does: once per op, every step).  The
 * tensor's device block goes back to the caching allocator when it is
 * released, which stream order makes safe for the kernels already queued. */
static sf_tensor *upload_words(const void *v, int64_t n, const sf_loc *loc) {
  int64_t len = 2 * (n > 0 ? n : 1);
  htod_async_fn f = htod_async();
  if (!f) { /* an older driver: through the host copy and sf__t_dptr */
    sf_tensor *t = sf__t_empty(1, &len, loc);
    if (n > 0)
      memcpy(sf__t_wdata(t), v, (size_t)n * sizeof(uint64_t));
    sf__t_dptr(t, loc);
    return t;
  }
  sf_tensor *t = sf__t_dempty(1, &len, loc);
  if (n > 0) /* through pinned memory: from pageable memory the copy may wait */
    sf__dev_upload(sf__t_dptr(t, loc), v, (size_t)n * sizeof(uint64_t), loc);
  return t;
}

static uint64_t dptr(sf_tensor *t, const sf_loc *loc) { return sf__t_dptr(t, loc); }

/* ------------------------------------------------------------ softmax */

sf_tensor *sf__gpu_softmax_bw(const sf__node *nd, sf_tensor *g) {
  sf_tensor *x = nd->in[0];
  int32_t log = nd->i1 != 0;
  int64_t outer, n, inner;
  split(x, (int32_t)nd->i0, &outer, &n, &inner);
  sf_tensor *dx = sf__t_dempty(x->ndim, x->shape, NULL);
  uint64_t py = dptr(nd->saved, NULL), pg = dptr(g, NULL), pd = dptr(dx, NULL);
  if (inner == 1) {
    void *params[] = {&py, &pg, &pd, &outer, &n, &log};
    launch("sf_nnl_softmax_bw_last", n ? outer : 0, params, NULL);
  } else {
    void *params[] = {&py, &pg, &pd, &outer, &n, &inner, &log};
    launch("sf_nnl_softmax_bw_inner", n ? blocks_for(outer * inner) : 0, params, NULL);
  }
  sf__t_dwrote(dx);
  return dx;
}

sf_tensor *sf__gpu_softmax(sf_tensor *a, int32_t ax, bool log, const sf_loc *loc) {
  int64_t outer, n, inner;
  split(a, ax, &outer, &n, &inner);
  sf_tensor *x = dcontig(a, loc), *out = sf__t_dempty(x->ndim, x->shape, loc);
  uint64_t px = dptr(x, loc), py = dptr(out, loc);
  int32_t lg = log;
  if (inner == 1) { /* the last axis (or one followed by 1s): a block per row */
    void *params[] = {&px, &py, &outer, &n, &lg};
    launch("sf_nnl_softmax_last", n ? outer : 0, params, loc);
  } else {
    void *params[] = {&px, &py, &outer, &n, &inner, &lg};
    launch("sf_nnl_softmax_inner", n ? blocks_for(outer * inner) : 0, params, loc);
  }
  sf__t_dwrote(out);
  sf_release(x);
  return out;
}

/* ------------------------------------------------------------- argmax */

sf_array *sf__gpu_argmax(sf_tensor *a, int32_t ax, const sf_loc *loc) {
  int64_t outer, n, inner;
  split(a, ax, &outer, &n, &inner);
  int64_t count = outer * inner, words = 2 * (count > 0 ? count : 1);
  sf_tensor *x = dcontig(a, loc), *idx = sf__t_dempty(1, &words, loc);
  uint64_t px = dptr(x, loc), pi = dptr(idx, loc);
  if (inner == 1) {
    void *params[] = {&px, &pi, &outer, &n};
    launch("sf_nnl_argmax_last", outer, params, loc);
  } else {
    void *params[] = {&px, &pi, &outer, &n, &inner};
    launch("sf_nnl_argmax_inner", blocks_for(count), params, loc);
  }
  sf__t_dwrote(idx);
  sf_array *r = sf_array_new(&sf_type_i64, count, loc);
  if (count)
    memcpy(r->data, sf__t_data(idx), (size_t)count * sizeof(int64_t)); /* the read-back */
  sf_release(idx);
  sf_release(x);
  return r;
}

/* ------------------------------------------------------ cross-entropy */

/* d loss / d logits = g (softmax - q) / used on the rows kept; the node's
 * saved tensor holds the targets already on the device. */
sf_tensor *sf__gpu_cross_entropy_bw(const sf__node *nd, sf_tensor *g) {
  sf_tensor *x = dcontig(nd->in[0], NULL);
  int64_t rows = x->shape[0], classes = x->shape[1], ignore = nd->i0, used = nd->i1;
  float eps = nd->f0;
  sf_tensor *dx = sf__t_dempty(2, x->shape, NULL);
  uint64_t px = dptr(x, NULL), pt = dptr(nd->saved, NULL), pg = dptr(g, NULL),
           pd = dptr(dx, NULL);
  void *params[] = {&px, &pt, &pg, &pd, &rows, &classes, &ignore, &eps, &used};
  launch("sf_nnl_ce_bw", rows, params, NULL);
  sf__t_dwrote(dx);
  sf_release(x);
  return dx;
}

sf_tensor *sf__gpu_cross_entropy(sf_tensor *logits, sf_array *targets, int64_t ignore_index,
                                 float label_smoothing, int64_t used, sf__keep *keep,
                                 const sf_loc *loc) {
  sf_tensor *x = dcontig(logits, loc);
  int64_t rows = x->shape[0], classes = x->shape[1], one = rows > 0 ? rows : 1;
  sf_tensor *tg = upload_words(rows ? targets->data : NULL, rows, loc);
  sf_tensor *loss = sf__t_dempty(1, &one, loc), *out = sf__t_dempty(0, NULL, loc);
  uint64_t px = dptr(x, loc), pt = dptr(tg, loc), pl = dptr(loss, loc), po = dptr(out, loc);
  float eps = label_smoothing;
  void *p1[] = {&px, &pt, &pl, &rows, &classes, &ignore_index, &eps};
  launch("sf_nnl_ce_rows", rows, p1, loc);
  void *p2[] = {&pl, &po, &rows, &used};
  launch("sf_nnl_ce_total", 1, p2, loc); /* also for no rows: 0 / 0, nan as torch */
  sf__t_dwrote(out);
  sf_release(loss);
  sf_release(x);
  keep->saved = tg;
  return out;
}

/* --------------------------------------------------------- layer norm */

/* The rows of layer norm's dw/db split into at most this many fixed blocks
 * (partial sums, then one sum per column): enough threads to fill the
 * device for a (B*T, d) activation, and a split that depends on the shape
 * alone. */
#define LN_BLOCKS 256

void sf__gpu_layer_norm_bw(const sf__node *n, sf_tensor *g, sf_tensor **grads) {
  sf_tensor *x = dcontig(n->in[0], NULL), *w = dcontig(n->in[1], NULL);
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0;
  sf_tensor *dx = sf__t_dempty(x->ndim, x->shape, NULL);
  sf_tensor *dw, *db;
  if (rows == 0) {
    dw = sf__t_dzeros(1, &d, NULL);
    db = sf__t_dzeros(1, &d, NULL);
  } else {
    dw = sf__t_dempty(1, &d, NULL);
    db = sf__t_dempty(1, &d, NULL);
    int64_t nblk = rows < LN_BLOCKS ? rows : LN_BLOCKS, per = (rows + nblk - 1) / nblk;
    int64_t ps[2] = {nblk, 2 * d};
    sf_tensor *part = sf__t_dempty(2, ps, NULL);
    uint64_t px = dptr(x, NULL), pw = dptr(w, NULL), pg = dptr(g, NULL),
             pst = dptr(n->saved, NULL), pdx = dptr(dx, NULL), pp = dptr(part, NULL),
             pdw = dptr(dw, NULL), pdb = dptr(db, NULL);
    void *p1[] = {&px, &pw, &pg, &pst, &pdx, &rows, &d};
    launch("sf_nnl_ln_bw_dx", rows, p1, NULL);
    void *p2[] = {&px, &pg, &pst, &pp, &rows, &d, &per, &nblk};
    launch("sf_nnl_ln_bw_part", blocks_for(nblk * d), p2, NULL);
    void *p3[] = {&pp, &pdw, &pdb, &d, &nblk};
    launch("sf_nnl_ln_bw_sum", blocks_for(d), p3, NULL);
    sf__t_dwrote(dx);
    sf__t_dwrote(dw);
    sf__t_dwrote(db);
    sf_release(part);
  }
  sf_release(x);
  sf_release(w);
  grads[0] = dx;
  grads[1] = dw;
  grads[2] = db;
}

sf_tensor *sf__gpu_layer_norm(sf_tensor *x, sf_tensor *weight, sf_tensor *bias, double eps,
                              sf__keep *keep, const sf_loc *loc) {
  sf_tensor *xc = dcontig(x, loc), *wc = dcontig(weight, loc), *bc = dcontig(bias, loc);
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0, ss[2] = {rows, 2};
  sf_tensor *out = sf__t_dempty(xc->ndim, xc->shape, loc), *stats = sf__t_dempty(2, ss, loc);
  uint64_t px = dptr(xc, loc), pw = dptr(wc, loc), pb = dptr(bc, loc), py = dptr(out, loc),
           pst = dptr(stats, loc);
  float e = (float)eps;
  void *params[] = {&px, &pw, &pb, &py, &pst, &rows, &d, &e};
  launch("sf_nnl_ln_fwd", rows, params, loc);
  sf__t_dwrote(out);
  sf__t_dwrote(stats);
  sf_release(xc);
  sf_release(wc);
  sf_release(bc);
  keep->saved = stats;
  return out;
}

/* ------------------------------------------------------------ RMSNorm */

sf_tensor *sf__gpu_rms_norm(sf_tensor *x, sf_tensor *weight, double eps, sf__keep *keep,
                            const sf_loc *loc) {
  sf_tensor *xc = dcontig(x, loc), *wc = dcontig(weight, loc);
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0, one = rows ? rows : 1;
  sf_tensor *out = sf__t_dempty(xc->ndim, xc->shape, loc), *st = sf__t_dempty(1, &one, loc);
  uint64_t px = dptr(xc, loc), pw = dptr(wc, loc), py = dptr(out, loc), ps = dptr(st, loc);
  float e = (float)eps;
  void *params[] = {&px, &pw, &py, &ps, &rows, &d, &e};
  launch("sf_nnl_rms_fwd", rows, params, loc);
  sf__t_dwrote(out);
  sf__t_dwrote(st);
  sf_release(xc);
  sf_release(wc);
  keep->saved = st;
  return out;
}

/* rope.c's rotation: a thread per (row, pair), sign -1 for the backward. */
static sf_tensor *gpu_rope(sf_tensor *x, int64_t pos0, double theta, float sign, const sf_loc *loc) {
  sf_tensor *xc = dcontig(x, loc);
  sf_tensor *out = sf__t_dempty(xc->ndim, xc->shape, loc);
  long long D = x->shape[3], T = x->shape[2], rows = D ? x->numel / D : 0, p0 = pos0;
  long long n = rows * (D / 2);
  uint64_t px = dptr(xc, loc), py = dptr(out, loc);
  float th = (float)theta;
  void *params[] = {&px, &py, &n, &T, &D, &p0, &th, &sign};
  launch("sf_nnl_rope", blocks_for(n), params, loc);
  sf__t_dwrote(out);
  sf_release(xc);
  return out;
}

sf_tensor *sf__gpu_rope(sf_tensor *x, int64_t pos0, double theta, const sf_loc *loc) {
  return gpu_rope(x, pos0, theta, 1.0f, loc);
}

sf_tensor *sf__gpu_rope_bw(const sf__node *n, sf_tensor *g) {
  double theta;
  memcpy(&theta, &n->i1, sizeof theta);
  return gpu_rope(g, n->i0, theta, -1.0f, NULL);
}

void sf__gpu_rms_norm_bw(const sf__node *n, sf_tensor *g, sf_tensor **grads) {
  sf_tensor *x = dcontig(n->in[0], NULL), *w = dcontig(n->in[1], NULL);
  int64_t d = x->shape[x->ndim - 1], rows = d ? x->numel / d : 0;
  sf_tensor *dx = sf__t_dempty(x->ndim, x->shape, NULL);
  sf_tensor *dw = rows ? sf__t_dempty(1, &d, NULL) : sf__t_dzeros(1, &d, NULL);
  if (rows) {
    uint64_t px = dptr(x, NULL), pw = dptr(w, NULL), pg = dptr(g, NULL),
             ps = dptr(n->saved, NULL), pdx = dptr(dx, NULL), pdw = dptr(dw, NULL);
    void *p1[] = {&px, &pw, &pg, &ps, &pdx, &rows, &d};
    launch("sf_nnl_rms_bw_dx", rows, p1, NULL);
    void *p2[] = {&px, &pg, &ps, &pdw, &rows, &d};
    launch("sf_nnl_rms_bw_dw", blocks_for(d), p2, NULL);
    sf__t_dwrote(dx);
    sf__t_dwrote(dw);
  }
  sf_release(x);
  sf_release(w);
  grads[0] = dx;
  grads[1] = dw;
}

/* ---------------------------------------------------------- embedding */

/* dW: the upstream rows added into the rows the ids picked (atomicAdd: a
 * repeated id sums in the device's order). */
sf_tensor *sf__gpu_embedding_bw(const sf__node *n, sf_tensor *g) {
  sf_tensor *w = n->in[0];
  int64_t dim = w->shape[1], count = n->targets->len;
  sf_tensor *dw = sf__t_dzeros(2, w->shape, NULL);
  uint64_t pg = dptr(g, NULL), pi = dptr(n->saved, NULL), pd = dptr(dw, NULL);
  void *params[] = {&pg, &pi, &pd, &count, &dim};
  launch("sf_nnl_scatter_add", blocks_for(count * dim), params, NULL);
  sf__t_dwrote(dw);
  return dw;
}

sf_tensor *sf__gpu_embedding(sf_tensor *weight, sf_array *ids, int32_t nd, const int64_t *dims,
                             sf__keep *keep, const sf_loc *loc) {
  int64_t count = ids ? ids->len : 0, dim = weight->shape[1];
  sf_tensor *w = dcontig(weight, loc), *out = sf__t_dempty(nd, dims, loc);
  sf_tensor *it = upload_words(count ? ids->data : NULL, count, loc);
  uint64_t pw = dptr(w, loc), pi = dptr(it, loc), po = dptr(out, loc);
  void *params[] = {&pw, &pi, &po, &count, &dim};
  launch("sf_nnl_gather", blocks_for(count * dim), params, loc);
  sf__t_dwrote(out);
  sf_release(w);
  keep->saved = it;
  return out;
}

/* ------------------------------------------------------------ dropout */

#define PCG_MULT 6364136223846793005ULL

/* The start state and increment of std.c's PCG32 stream of key
 * (pcg32_srandom_r(key, key): two steps from state 0), i.e. the state the
 * first draw is made from. */
static void stream_start(uint64_t key, uint64_t *st) {
  uint64_t inc = (key << 1u) | 1u, s = inc; /* the first step from 0 */
  s += key;
  s = s * PCG_MULT + inc;
  st[0] = s;
  st[1] = inc;
}


/* x times the mask (keep = 1/(1-p) where the draw u >= p, else 0) drawn
 * from rows streams of x->numel / rows values each (states: rows pairs);
 * the mask kept for the backward, as layers.c's apply_mask. */
static sf_tensor *masked(sf_tensor *x, double p, const uint64_t *states, int64_t rows,
                         sf__keep *kept, const sf_loc *loc) {
  sf_tensor *xc = dcontig(x, loc), *mask = sf__t_dempty(x->ndim, x->shape, loc);
  sf_tensor *out = sf__t_dempty(x->ndim, x->shape, loc);
  sf_tensor *st = upload_words(states, 2 * rows, loc);
  int64_t n = x->numel, per = rows ? n / rows : 0;
  if (per == 0)
    per = 1;
  /* u = k 2^-24 with k an integer, so u >= p exactly when k >= ceil(p 2^24):
   * the CPU's f64 comparison as an integer one. */
  uint64_t thr = (uint64_t)ceil(p * 16777216.0);
  float keep = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
  uint64_t px = dptr(xc, loc), pm = dptr(mask, loc), py = dptr(out, loc), ps = dptr(st, loc);
  void *params[] = {&px, &pm, &py, &ps, &n, &per, &thr, &keep};
  launch("sf_nnl_dropout", blocks_for(n), params, loc);
  sf__t_dwrote(mask);
  sf__t_dwrote(out);
  sf_release(st);
  sf_release(xc);
  kept->saved = mask;
  return out;
}

/* Row r's stream: the key layers.c's row_mask mixes from (seed, index[r],
 * stream). */
static uint64_t *row_states(int64_t rows, int64_t seed, sf_array *index, int64_t stream) {
  uint64_t *st = sf__alloc_n((size_t)(rows > 0 ? 2 * rows : 1), sizeof *st);
  const int64_t *ix = rows ? index->data : NULL;
  uint64_t base = sf__rng_mix((uint64_t)seed, 0x6472); /* "dr" */
  for (int64_t r = 0; r < rows; r++)
    stream_start(sf__rng_mix(sf__rng_mix(base, (uint64_t)ix[r]), (uint64_t)stream), st + 2 * r);
  return st;
}

static sf_tensor *dropout_one(sf_tensor *x, double p, int64_t seed, sf__keep *keep,
                              const sf_loc *loc) {
  /* nn.uniform(x.shape, 0, 1, seed)'s stream (std.c's stream_of): one key
   * from the call's random stream for seed -1, as the CPU draws it. */
  if (seed < -1)
    sf_runtime_error(loc, "uniform: seed must be -1 (the call's random stream) or >= 0, not %"
                     PRId64, seed);
  uint64_t key = seed == -1 ? (uint64_t)sf_rand_int(INT64_MIN, INT64_MAX, loc)
                            : sf__rng_mix((uint64_t)seed, 0x6e6e); /* "nn" */
  uint64_t st[2];
  stream_start(key, st);
  return masked(x, p, st, 1, keep, loc);
}

sf_tensor *sf__gpu_dropout(sf_tensor *x, double p, int64_t seed, sf_array *index, int64_t stream,
                           sf__keep *keep, const sf_loc *loc) {
  if (!index)
    return dropout_one(x, p, seed, keep, loc);
  int64_t rows = x->shape[0];
  uint64_t *st = row_states(rows, seed, index, stream);
  sf_tensor *out = masked(x, p, st, rows, keep, loc);
  sf_free(st);
  return out;
}

/* ---------------------------------------------------------- attention */

/* dx = scale y (g - Σ g y) per row of (B, H, T, S). */
sf_tensor *sf__gpu_masked_softmax_bw(const sf__node *n, sf_tensor *g) {
  sf_tensor *y = n->saved;
  int64_t s = y->shape[y->ndim - 1], rows = s ? y->numel / s : 0;
  sf_tensor *dx = sf__t_dempty(y->ndim, y->shape, NULL);
  float scale = n->f0;
  uint64_t py = dptr(y, NULL), pg = dptr(g, NULL), pd = dptr(dx, NULL);
  void *params[] = {&py, &pg, &pd, &rows, &s, &scale};
  launch("sf_nnl_attn_softmax_bw", rows, params, NULL);
  sf__t_dwrote(dx);
  return dx;
}

/* p = softmax(x * scale) over rows of s keys, the keys the mask (B * S,
 * or NULL) drops at 0; x may be p (in place: each thread reads only the
 * keys it writes). */
/* causal: row r is query r % t, which sees keys 0 .. s - t + r % t. */
static void attn_softmax(uint64_t px, uint64_t py, int64_t rows, int64_t s, int64_t per_batch,
                         float scale, sf_array *mask, int64_t t, bool causal, const sf_loc *loc) {
  sf_tensor *mt = mask ? upload_words(mask->data, mask->len, loc) : NULL;
  uint64_t pm = mt ? dptr(mt, loc) : px;
  int32_t has_mask = mt != NULL, is_causal = causal;
  long long tt = t > 0 ? t : 1;
  void *params[] = {&px, &py, &pm, &has_mask, &rows, &s, &per_batch, &scale, &tt, &is_causal};
  launch("sf_nnl_attn_softmax", rows, params, loc);
  sf_release(mt);
}

/* softmax(scores * scale) over the keys the mask keeps. */
sf_tensor *sf__gpu_masked_softmax(sf_tensor *scores, sf_array *mask, float scale,
                                  const sf_loc *loc) {
  sf_tensor *x = dcontig(scores, loc), *out = sf__t_dempty(x->ndim, x->shape, loc);
  int64_t s = x->shape[3], rows = s ? x->numel / s : 0, per_batch = x->shape[1] * x->shape[2];
  attn_softmax(dptr(x, loc), dptr(out, loc), rows, s, per_batch, scale, mask, 1, false, loc);
  sf__t_dwrote(out);
  sf_release(x);
  return out;
}

/* The fused attention (layers.c's attention_fused: one "attention" node
 * over q, k and v holding the probabilities (B, H, T, S)), on the device:
 * a head of q (B, T, D) is a column block (leading dimension D), so each
 * batch row's heads are one strided-batched product (stride D/H between
 * heads) straight on q, k, v and the output, without the composition's
 * split-heads copies; the masked softmax runs in place on the scores. */
typedef struct {
  int64_t b, t, s, d, h, dh;
} att_dims;

static att_dims att_of(const sf_tensor *q, const sf_tensor *k, int64_t heads) {
  att_dims a = {q->shape[0], q->shape[1], k->shape[1], q->shape[2], heads, q->shape[2] / heads};
  return a;
}

/* Every (batch row, head) pair's product of one kind is one
 * cublasSgemmBatched over B·H pointers (no single stride walks both a
 * batch row, T·D floats, and a head, D/H columns).  An operand: its first
 * pointer, the floats between batch rows and between heads. */
typedef struct {
  uint64_t p;
  int64_t row, head;
} att_opnd;

/* Product j's three pointer arrays (A, B, C: B·H words each) into tab. */
static void heads_table(uint64_t *tab, int64_t j, att_dims a, att_opnd A, att_opnd B,
                        att_opnd C) {
  int64_t bh = a.b * a.h;
  const att_opnd *o[3] = {&A, &B, &C};
  for (int i = 0; i < 3; i++)
    sf__gemm_ptr_table(tab + (3 * j + i) * bh, o[i]->p, a.b, o[i]->row, a.h, o[i]->head);
}

/* C = op(A) op(B) for every head, with product j's arrays of the uploaded
 * table pt. */
static void heads_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t pt, int64_t j,
                       int64_t lda, int64_t ldb, int64_t ldc, att_dims a, const sf_loc *loc) {
  uint64_t bh = (uint64_t)(a.b * a.h), at = pt + 3u * (uint64_t)j * bh * 8u;
  sf__sgemm_dev_ptrs(ta, tb, m, n, k, 1.0f, at, lda, at + bh * 8u, ldb, 0.0f, at + 2u * bh * 8u,
                     ldc, (int64_t)bh, loc);
}

/* With ds the softmax's input gradient: dv = pᵀ g, dq = ds k, dk = dsᵀ q per
 * head, added in the CPU's order (v, k, q). */
void sf__gpu_attention_bw(const sf__node *n, sf_tensor *g, sf_tensor **grads) {
  sf_tensor *q = dcontig(n->in[0], NULL), *k = dcontig(n->in[1], NULL);
  sf_tensor *v = dcontig(n->in[2], NULL);
  att_dims a = att_of(q, k, n->i0);
  int64_t ts = a.t * a.s, ps[4] = {a.b, a.h, a.t, a.s};
  sf_tensor *dq = sf__t_dempty(3, q->shape, NULL), *dk = sf__t_dempty(3, k->shape, NULL);
  sf_tensor *dv = sf__t_dempty(3, v->shape, NULL), *dp = sf__t_dempty(4, ps, NULL);
  uint64_t pq = dptr(q, NULL), pk = dptr(k, NULL), pv = dptr(v, NULL), pg = dptr(g, NULL),
           pp = dptr(n->saved, NULL), pdp = dptr(dp, NULL), pdq = dptr(dq, NULL),
           pdk = dptr(dk, NULL), pdv = dptr(dv, NULL);
  int64_t bt = a.t * a.d, bs = a.s * a.d, bp = a.h * ts, bh = a.b * a.h;
  uint64_t *tab = sf_alloc((size_t)(12 * bh) * sizeof *tab);
  /* o = p v: dp = g vᵀ, dv = pᵀ g; scores = q kᵀ: dq = ds k, dk = dsᵀ q */
  att_opnd og = {pg, bt, a.dh}, oq = {pq, bt, a.dh}, ok = {pk, bs, a.dh}, ov = {pv, bs, a.dh},
           op = {pp, bp, ts}, ods = {pdp, bp, ts}, odq = {pdq, bt, a.dh},
           odk = {pdk, bs, a.dh}, odv = {pdv, bs, a.dh};
  heads_table(tab, 0, a, og, ov, ods);
  heads_table(tab, 1, a, op, og, odv);
  heads_table(tab, 2, a, ods, ok, odq);
  heads_table(tab, 3, a, ods, oq, odk);
  sf_tensor *tt = upload_words(tab, 12 * bh, NULL);
  sf_free(tab);
  uint64_t pt = dptr(tt, NULL);
  heads_gemm(false, true, a.t, a.s, a.dh, pt, 0, a.d, a.d, a.s, a, NULL);
  heads_gemm(true, false, a.s, a.dh, a.t, pt, 1, a.s, a.d, a.d, a, NULL);
  int64_t rows = a.b * a.h * a.t;
  float scale = n->f0;
  void *params[] = {&pp, &pdp, &pdp, &rows, &a.s, &scale}; /* ds in dp's place */
  launch("sf_nnl_attn_softmax_bw", rows, params, NULL);
  heads_gemm(false, false, a.t, a.dh, a.s, pt, 2, a.s, a.d, a.d, a, NULL);
  heads_gemm(true, false, a.s, a.dh, a.t, pt, 3, a.s, a.d, a.d, a, NULL);
  sf_release(tt);
  sf__t_dwrote(dq);
  sf__t_dwrote(dk);
  sf__t_dwrote(dv);
  sf_release(dp);
  sf_release(q);
  sf_release(k);
  sf_release(v);
  grads[0] = dq;
  grads[1] = dk;
  grads[2] = dv;
}

sf_tensor *sf__gpu_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                             int64_t heads, bool causal, float scale, sf__keep *keep,
                             const sf_loc *loc) {
  sf_tensor *qc = dcontig(q, loc), *kc = dcontig(k, loc), *vc = dcontig(v, loc);
  att_dims a = att_of(q, k, heads);
  int64_t ts = a.t * a.s, ps[4] = {a.b, a.h, a.t, a.s};
  sf_tensor *p = sf__t_dempty(4, ps, loc), *out = sf__t_dempty(3, q->shape, loc);
  uint64_t pq = dptr(qc, loc), pk = dptr(kc, loc), pv = dptr(vc, loc), pp = dptr(p, loc),
           po = dptr(out, loc);
  int64_t bt = a.t * a.d, bs = a.s * a.d, bp = a.h * ts, bh = a.b * a.h;
  uint64_t *tab = sf_alloc((size_t)(6 * bh) * sizeof *tab);
  /* scores = q kᵀ; o = p v, into the head's columns */
  att_opnd oq = {pq, bt, a.dh}, ok = {pk, bs, a.dh}, ov = {pv, bs, a.dh}, op = {pp, bp, ts},
           oo = {po, bt, a.dh};
  heads_table(tab, 0, a, oq, ok, op);
  heads_table(tab, 1, a, op, ov, oo);
  sf_tensor *tt = upload_words(tab, 6 * bh, loc);
  sf_free(tab);
  uint64_t pt = dptr(tt, loc);
  heads_gemm(false, true, a.t, a.s, a.dh, pt, 0, a.d, a.d, a.s, a, loc);
  attn_softmax(pp, pp, a.b * a.h * a.t, a.s, a.h * a.t, scale, mask, a.t, causal, loc);
  heads_gemm(false, false, a.t, a.dh, a.s, pt, 1, a.s, a.d, a.d, a, loc);
  sf_release(tt);
  sf__t_dwrote(p);
  sf__t_dwrote(out);
  sf_release(qc);
  sf_release(kc);
  sf_release(vc);
  keep->saved = p;
  return out;
}
