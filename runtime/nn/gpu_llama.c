/*
 * gpu_llama.c — std.llm's decoder on the GPU: llama.c's forward (prefill,
 * decode, a batch of sequences) as launches of kernels/quant.cu (the
 * products, dequantizing Q4_0/Q4_1/Q8_0 blocks as they read them) and
 * kernels/llama.cu (RMSNorm, RoPE, the KV store, attention, SwiGLU), when
 * the call holds a GPU (llama.c asks sf__nn_gpu_here, as every std.nn op
 * does).
 *
 * Key design choice: the weights stay in their block formats in device
 * memory (uploaded once per device on the model's first step there, 93 MB
 * for SmolLM2 rather than 540 MB of f32), and the KV cache lives only on
 * the device, in a store indexed by the very slots of llama.c's host pool:
 * the pool's accounting (llm.kv_pool's bound, kv_blocks, truncate and
 * free) is the host's as it is, and only the values are elsewhere.  A
 * step uploads its token ids, positions and block tables (one small copy)
 * and launches; nothing is read back but the logits the caller reads.
 * Decode's products (n < 4 rows) are sflow_quant_matmul, a GEMV of 32
 * threads per output; prefill's and larger batches' the tiled kernel,
 * each weight block dequantized once for 16 rows of x.
 *
 * Steps of one model on one device take its lock for their launches (the
 * store may grow: a larger one, the old copied in, all on stream 0), so
 * two actors sharing a GPU and a model queue their steps in turn.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_llama.h"

#define DEVS_MAX 64
#define KV_BT 16

typedef struct {
  const void *key;
  int32_t gpu;          /* 1 + the device */
  pthread_mutex_t lock;
  uint64_t *w;          /* (layers × 7) the products' weights */
  uint64_t *norm;       /* (layers × 2) */
  uint64_t embd, out, out_norm, inv_freq;
  uint64_t store;       /* the KV store, slots × block floats */
  int64_t slots;
} dev_model;

static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_model *devs[DEVS_MAX];
static int ndevs;

static bool blocks_type(uint32_t t) {
  return t == SF__GGML_Q4_0 || t == SF__GGML_Q4_1 || t == SF__GGML_Q8_0;
}

bool sf__gpu_llama_runs(const sf__llama_desc *d) {
  if (!blocks_type(d->embd->type) || !blocks_type(d->out->type) || d->vocab > INT32_MAX / 2 ||
      d->ffn > INT32_MAX / 2 || d->rope_dim % 2)
    return false;
  for (int64_t l = 0; l < d->layers; l++) {
    const sf__qmat *w[] = {&d->L[l].wq, &d->L[l].wk, &d->L[l].wv, &d->L[l].wo,
                           &d->L[l].gate, &d->L[l].up, &d->L[l].down};
    for (int i = 0; i < 7; i++)
      if (!blocks_type(w[i]->type))
        return false;
  }
  return true;
}

static uint64_t upload(const void *p, size_t bytes, const sf_loc *loc) {
  uint64_t d = sf__dev_alloc(bytes, loc);
  sf__dev_upload(d, p, bytes, loc);
  return d;
}

static uint64_t upload_w(const sf__qmat *m, const sf_loc *loc) {
  return upload(m->data, (size_t)(m->row_bytes * (uint64_t)m->rows), loc);
}

/* The model's copies on this thread's device, made on its first step. */
static dev_model *dev_model_of(const sf__llama_desc *d, const sf_loc *loc) {
  int32_t gpu = sf__gpu_current_device() + 1;
  pthread_mutex_lock(&devs_lock);
  for (int i = 0; i < ndevs; i++)
    if (devs[i]->key == d->key && devs[i]->gpu == gpu) {
      dev_model *m = devs[i];
      pthread_mutex_unlock(&devs_lock);
      return m;
    }
  if (ndevs == DEVS_MAX) {
    pthread_mutex_unlock(&devs_lock);
    sf_runtime_error(loc, "llm.forward: more than %d models on GPUs in one process", DEVS_MAX);
  }
  dev_model *m = sf_alloc(sizeof *m);
  memset(m, 0, sizeof *m);
  m->key = d->key;
  m->gpu = gpu;
  pthread_mutex_init(&m->lock, NULL);
  m->w = sf_alloc(sizeof(uint64_t) * (size_t)(7 * d->layers));
  m->norm = sf_alloc(sizeof(uint64_t) * (size_t)(2 * d->layers));
  size_t nb = sizeof(float) * (size_t)d->dim;
  for (int64_t l = 0; l < d->layers; l++) {
    const sf__llama_layer *L = &d->L[l];
    const sf__qmat *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
    for (int i = 0; i < 7; i++)
      m->w[7 * l + i] = upload_w(w[i], loc);
    m->norm[2 * l] = upload(L->attn_norm, nb, loc);
    m->norm[2 * l + 1] = upload(L->ffn_norm, nb, loc);
  }
  m->embd = upload_w(d->embd, loc);
  m->out = d->out->data == d->embd->data ? m->embd : upload_w(d->out, loc);
  m->out_norm = upload(d->out_norm, nb, loc);
  m->inv_freq = upload(d->inv_freq, sizeof(float) * (size_t)(d->rope_dim / 2), loc);
  devs[ndevs++] = m;
  pthread_mutex_unlock(&devs_lock);
  return m;
}

static size_t block_floats(const sf__llama_desc *d) {
  return 2 * (size_t)(d->layers * d->kv_heads * KV_BT * d->head_dim);
}

static void launch(const char *file, const char *entry, int64_t grid, void **params,
                   const sf_loc *loc) {
  int block;
  void *fn = sf__nn_kernel(file, entry, &block, loc);
  sf__nn_launch(fn, grid, block, 0, params, loc);
}

/* The store holds at least `slots` slots: a larger one (twice, at least),
 * the old one copied in; the caller holds m's lock. */
static void store_grow(dev_model *m, const sf__llama_desc *d, int64_t slots, const sf_loc *loc) {
  if (slots <= m->slots)
    return;
  int64_t want = m->slots * 2 > slots ? m->slots * 2 : slots;
  if (want < 64)
    want = 64;
  size_t bf = block_floats(d);
  uint64_t s = sf__dev_alloc(sizeof(float) * bf * (size_t)want, loc);
  if (m->slots) {
    long long n = (long long)(bf * (size_t)m->slots);
    void *p[] = {&s, &m->store, &n};
    int64_t grid = sf__nn_grid(n, 256);
    launch("llama", "sf_ll_copy", grid < 65536 ? grid : 65536, p, loc);
    sf__dev_free(m->store, sizeof(float) * bf * (size_t)m->slots, m->gpu - 1);
  }
  m->store = s;
  m->slots = want;
}

/* y (n × w.rows) = x (n × w.cols) · Wᵀ on the device. */
static void product(const sf__qmat *w, uint64_t dw, uint64_t x, int64_t n, uint64_t y,
                    const sf_loc *loc) {
  int type = (int)w->type, rows = (int)w->rows, cols = (int)w->cols, nn = (int)n;
  long long rb = (long long)w->row_bytes;
  void *p[] = {&type, &dw, &rb, &x, &y, &rows, &cols, &nn};
  if (n < 4)
    launch("quant", "sflow_quant_matmul", (int64_t)((rows + 7) / 8) * n, p, loc);
  else
    launch("quant", "sflow_quant_matmul_tiled",
           (int64_t)((rows + 63) / 64) * ((n + 15) / 16), p, loc);
}

static void rms(uint64_t x, uint64_t w, uint64_t y, int64_t n, const sf__llama_desc *d,
                const sf_loc *loc) {
  int dim = (int)d->dim;
  double eps = d->eps;
  void *p[] = {&x, &w, &y, &dim, &eps};
  launch("llama", "sf_ll_rms", n, p, loc);
}

static void elementwise(const char *entry, uint64_t a, uint64_t b, int64_t n, const sf_loc *loc) {
  long long nn = n;
  void *p[] = {&a, &b, &nn};
  launch("llama", entry, sf__nn_grid(n, 256), p, loc);
}

/* The device buffers of one step, carved from one allocation. */
typedef struct {
  uint64_t x, h, q, att, kk, vv, g, u, sc, ints;
  uint64_t ids, pos, rowtab, tab;
  size_t bytes;
  uint64_t base;
} step_bufs;

sf_tensor *sf__gpu_llama_forward(const sf__llama_desc *d, const sf__llama_step *s,
                                 const sf_loc *loc) {
  dev_model *m = dev_model_of(d, loc);
  int64_t n = s->n, dim = d->dim, hd = d->head_dim, kvd = d->kv_heads * hd;
  int64_t span = (int64_t)KV_BT * hd, tabn = 0, maxn = 1, maxslot = -1;
  for (int64_t i = 0; i < s->nseq; i++) {
    tabn += s->nblk[i];
    for (int64_t b = 0; b < s->nblk[i]; b++)
      if (s->blk[i][b] / span > maxslot)
        maxslot = s->blk[i][b] / span;
  }
  for (int64_t r = 0; r < n; r++)
    if (s->pos[r] + 1 > maxn)
      maxn = s->pos[r] + 1;
  /* the host side of the step's integers: ids, pos, rowtab (n each), the tables */
  int32_t *ints = sf_alloc(sizeof(int32_t) * (size_t)(3 * n + tabn));
  int64_t *start = sf_alloc(sizeof(int64_t) * (size_t)s->nseq), at = 3 * n;
  for (int64_t i = 0; i < s->nseq; i++) {
    start[i] = at - 3 * n;
    for (int64_t b = 0; b < s->nblk[i]; b++)
      ints[at++] = (int32_t)(s->blk[i][b] / span);
  }
  for (int64_t r = 0; r < n; r++) {
    ints[r] = (int32_t)s->ids[r];
    ints[n + r] = (int32_t)s->pos[r];
    ints[2 * n + r] = (int32_t)start[s->seq[r]];
  }
  sf_free(start);
  /* attention's scores: rows in chunks of at most 2^24 floats */
  int64_t chunk = ((int64_t)1 << 24) / (d->heads * maxn);
  chunk = chunk < 1 ? 1 : chunk > n ? n : chunk;
  size_t f = sizeof(float), N = (size_t)n;
  size_t off[10], sizes[10] = {N * dim * f, N * dim * f, N * dim * f, N * dim * f, N * kvd * f,
                               N * kvd * f, N * d->ffn * f, N * d->ffn * f,
                               (size_t)(chunk * d->heads * maxn) * f,
                               sizeof(int32_t) * (size_t)(3 * n + tabn)};
  size_t total = 0;
  for (int i = 0; i < 10; i++) {
    off[i] = total;
    total += (sizes[i] + 255) / 256 * 256;
  }
  pthread_mutex_lock(&m->lock);
  store_grow(m, d, maxslot + 1, loc);
  uint64_t base = sf__dev_alloc(total, loc);
  uint64_t x = base + off[0], h = base + off[1], q = base + off[2], att = base + off[3];
  uint64_t kk = base + off[4], vv = base + off[5], g = base + off[6], u = base + off[7];
  uint64_t sc = base + off[8], di = base + off[9];
  sf__dev_upload(di, ints, sizes[9], loc);
  sf_free(ints);
  uint64_t dids = di, dpos = di + 4 * (uint64_t)n, drow = di + 8 * (uint64_t)n,
           dtab = di + 12 * (uint64_t)n;
  {
    int type = (int)d->embd->type, cols = (int)dim, nn = (int)n;
    long long rb = (long long)d->embd->row_bytes;
    void *p[] = {&type, &m->embd, &rb, &dids, &x, &cols, &nn};
    launch("quant", "sflow_quant_rows", n, p, loc);
  }
  int nn = (int)n, heads = (int)d->heads, kvh = (int)d->kv_heads, hdi = (int)hd,
      half = (int)(d->rope_dim / 2), layers = (int)d->layers, maxi = (int)maxn;
  float scale = (float)(1.0 / sqrt((double)hd));
  for (int l = 0; l < layers; l++) {
    const sf__llama_layer *L = &d->L[l];
    uint64_t *w = m->w + 7 * l;
    rms(x, m->norm[2 * l], h, n, d, loc);
    product(&L->wq, w[0], h, n, q, loc);
    product(&L->wk, w[1], h, n, kk, loc);
    product(&L->wv, w[2], h, n, vv, loc);
    void *rq[] = {&q, &dpos, &m->inv_freq, &nn, &heads, &hdi, &half};
    launch("llama", "sf_ll_rope", sf__nn_grid(n * heads * half, 256), rq, loc);
    void *rk[] = {&kk, &dpos, &m->inv_freq, &nn, &kvh, &hdi, &half};
    launch("llama", "sf_ll_rope", sf__nn_grid(n * kvh * half, 256), rk, loc);
    void *kp[] = {&kk, &vv, &m->store, &dpos, &drow, &dtab, &l, &layers, &kvh, &hdi, &nn};
    launch("llama", "sf_ll_kv_put", sf__nn_grid(n * kvd, 256), kp, loc);
    for (int r0 = 0; r0 < n; r0 += (int)chunk) {
      int64_t rows = n - r0 < chunk ? n - r0 : chunk;
      void *ap[] = {&q, &m->store, &sc, &att, &dpos, &drow, &dtab, &l, &layers, &heads, &kvh,
                    &hdi, &scale, &maxi, &r0};
      launch("llama", "sf_ll_attn", rows * heads, ap, loc);
    }
    product(&L->wo, w[3], att, n, h, loc);
    elementwise("sf_ll_add", x, h, n * dim, loc);
    rms(x, m->norm[2 * l + 1], h, n, d, loc);
    product(&L->gate, w[4], h, n, g, loc);
    product(&L->up, w[5], h, n, u, loc);
    elementwise("sf_ll_swiglu", g, u, n * d->ffn, loc);
    product(&L->down, w[6], g, n, h, loc);
    elementwise("sf_ll_add", x, h, n * dim, loc);
  }
  int64_t no = s->nout;
  rms(x + (uint64_t)((n - no) * dim) * f, m->out_norm, h, no, d, loc);
  int64_t shape[2] = {no, d->vocab};
  sf_tensor *y = sf__t_dempty(2, shape, loc);
  product(d->out, m->out, h, no, sf__t_dptr(y, loc), loc);
  sf__t_dwrote(y);
  sf__dev_free(base, total, m->gpu - 1);
  pthread_mutex_unlock(&m->lock);
  return y;
}
