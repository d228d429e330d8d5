/*
 * llama.c — std.llm's decoder: a Llama-architecture model (SmolLM2, Llama
 * 2/3, ...) read from a GGUF file, its KV caches, and its forward pass:
 * prefill of a prompt, then decode token by token reusing the cache.
 *
 * One layer, as Hugging Face's LlamaDecoderLayer computes it:
 *   h = x + Wo · attn(rope(Wq · rms(x)), rope(Wk · rms(x)), Wv · rms(x))
 *   y = h + Wdown · (silu(Wgate · rms(h)) * (Wup · rms(h)))
 * with causal grouped-query attention (query head i reads key/value head
 * i / (heads / kv_heads)), then rms and the LM head (output.weight, or the
 * token embedding when tied).
 *
 * Key design choice: a C fast path rather than the model written in std.nn
 * ops.  A decode step at batch 1 is 211 quantized GEMVs and some vector
 * work per token; through the tensor API each of the ~20 ops a layer would
 * allocate a tensor and record nothing (inference), costing more than the
 * work itself at width 576.  Here every buffer a step needs lives in the
 * cache (grown once, for the longest chunk seen), the weights are read in
 * their block format straight from the mapped file by quant.c's kernels
 * (sf__q_matmul, split over the pool by rows), and nothing is dequantized
 * ahead.  The std.nn ops (rope, causal and grouped-query attention, silu)
 * compute the same layer with gradients for training.
 *
 * RoPE: llama.cpp's converter permutes the rows of Wq and Wk within each
 * head so that the pairs rotated together are adjacent (x[2i], x[2i+1]);
 * transformers un-permutes them on loading and rotates halves (x[i],
 * x[i + d/2]).  The two agree exactly: q·k is the same sum in another
 * order of the head's dimensions.  This file reads the file's rows as they
 * are, so it rotates adjacent pairs, with frequency theta^(-2i/d).
 *
 * A model and a cache are plain values on the sflow side (a path, an id);
 * the loaded model is process-wide by path, a cache's memory is the
 * process's until kv_free.  Cache ids are of this process only.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "gpu_llama.h"
#include "llama.h"
#include "simd.h"

/* ---------------------------------------------------------- the model */

typedef sf__llama_layer layer_w; /* gpu_llama.h: the GPU decoder reads it too */

/* A model's pool of KV blocks: at most bound in use (0: no bound), in
 * `slots` slots of address space reserved at its first cache ("the
 * caches", below). */
typedef struct {
  pthread_mutex_t lock;
  int64_t bound, in_use, allocated, peak;
  float *base;     /* the planes, NULL until reserved */
  int64_t slots;
  int64_t *heap;   /* slots given back, a min-heap: the lowest is reused first */
  int64_t nheap;
} kv_pool;

typedef struct {
  char *path;
  const sf__gguf *g;
  char arch[64];
  int64_t layers, dim, heads, kv_heads, head_dim, ffn, vocab, context, rope_dim;
  double theta, eps;
  bool tied;
  sf__qmat embd, out;
  const float *out_norm;
  float *inv_freq; /* rope_dim / 2 */
  layer_w *L;
  kv_pool pool;    /* the KV blocks of this model's caches (below, "the caches") */
} model;

#define MODELS_MAX 16
static pthread_mutex_t models_lock = PTHREAD_MUTEX_INITIALIZER;
static model *models[MODELS_MAX];
static int nmodels;

#define FIELD(t, base, name, kind, T) (*(T *)sf__field((t), (void *)(base), (name), (kind), loc))

static const sf__gguf *open_file(const char *p, const sf_loc *loc) {
  sf__gguf *g = sf_alloc(sizeof *g);
  char err[700];
  if (!sf__gguf_open(g, p, err, sizeof err)) {
    sf_free(g);
    sf_runtime_error(loc, "llm.llama_open: %s", err);
  }
  return g;
}

static const sf__gguf_kv *kv_at(const sf__gguf *g, const char *arch, const char *key) {
  char k[160];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  return sf__gguf_find(g, k);
}

static int64_t meta_i(const sf__gguf *g, const char *arch, const char *key, int64_t dflt,
                      const sf_loc *loc) {
  const sf__gguf_kv *kv = kv_at(g, arch, key);
  int64_t v;
  if (!kv) {
    if (dflt >= 0)
      return dflt;
    sf_runtime_error(loc, "llm.llama_open: %s: no metadata key \"%s.%s\"", g->view.name, arch, key);
  }
  if (!sf__gguf_int(kv, &v) || v <= 0 || v > (1 << 24))
    sf_runtime_error(loc, "llm.llama_open: %s: metadata \"%s.%s\" is not a positive integer",
                     g->view.name, arch, key);
  return v;
}

static double meta_f(const sf__gguf *g, const char *arch, const char *key, double dflt,
                     const sf_loc *loc) {
  const sf__gguf_kv *kv = kv_at(g, arch, key);
  double v;
  if (!kv) {
    if (dflt > 0)
      return dflt;
    sf_runtime_error(loc, "llm.llama_open: %s: no metadata key \"%s.%s\"", g->view.name, arch, key);
  }
  if (kv->type == SF__GGUF_BOOL || !sf__gguf_float(kv, &v) || !(v > 0))
    sf_runtime_error(loc, "llm.llama_open: %s: metadata \"%s.%s\" is not a positive number",
                     g->view.name, arch, key);
  return v;
}

/* The weight name of the file, rows × cols checked. */
static sf__qmat weight_of(const sf__gguf *g, const char *name, int64_t rows, int64_t cols,
                          const sf_loc *loc) {
  const sf__gguf_tensor *t = sf__gguf_tensor_named(g, name);
  if (!t)
    sf_runtime_error(loc, "llm.llama_open: %s: no tensor \"%s\"", g->view.name, name);
  if (!sf__q_supported(t->type))
    sf_runtime_error(loc, "llm.llama_open: %s: tensor \"%s\" is %s, which std.llm does not read "
                     "(F32, F16, BF16, Q4_0, Q4_1, Q8_0)", g->view.name, name,
                     sf__ggml_type_name(t->type));
  int64_t r = t->ndim == 2 ? t->dims[1] : 1;
  if (t->ndim > 2 || t->dims[0] != cols || (rows > 0 && r != rows))
    sf_runtime_error(loc, "llm.llama_open: %s: tensor \"%s\" is %" PRId64 " × %" PRId64
                     ", not %" PRId64 " × %" PRId64, g->view.name, name, r, t->dims[0],
                     rows > 0 ? rows : r, cols);
  if ((t->type == SF__GGML_Q4_0 || t->type == SF__GGML_Q4_1 || t->type == SF__GGML_Q8_0) &&
      cols % 32)
    sf_runtime_error(loc, "llm.llama_open: %s: tensor \"%s\" has %" PRId64 " columns, not a "
                     "multiple of 32", g->view.name, name, cols);
  sf__qmat m = {t->type, r, cols, sf__ggml_bytes(t->type, cols), t->data};
  return m;
}

static const float *norm_of(const sf__gguf *g, const char *name, int64_t n, const sf_loc *loc) {
  const sf__gguf_tensor *t = sf__gguf_tensor_named(g, name);
  if (!t)
    sf_runtime_error(loc, "llm.llama_open: %s: no tensor \"%s\"", g->view.name, name);
  if (t->type != SF__GGML_F32 || t->ndim != 1 || t->dims[0] != n)
    sf_runtime_error(loc, "llm.llama_open: %s: tensor \"%s\" is not an F32 vector of %" PRId64,
                     g->view.name, name, n);
  return (const float *)t->data;
}

static void inv_freq_of(model *m) {
  m->inv_freq = sf_alloc(sizeof(float) * (size_t)(m->rope_dim / 2));
  for (int64_t i = 0; i < m->rope_dim / 2; i++)
    m->inv_freq[i] = (float)(1.0 / pow(m->theta, (double)(2 * i) / (double)m->rope_dim));
}

static void load_hf(model *m, const char *dir, const sf_loc *loc);

static model *load(const char *p, const sf_loc *loc) {
  model *m = sf_alloc(sizeof *m);
  memset(m, 0, sizeof *m);
  m->path = strdup(p);
  pthread_mutex_init(&m->pool.lock, NULL);
  struct stat sb;
  if (!stat(p, &sb) && S_ISDIR(sb.st_mode)) {
    load_hf(m, p, loc);
    inv_freq_of(m);
    return m;
  }
  const sf__gguf *g = open_file(p, loc);
  m->g = g;
  const sf__gguf_kv *a = sf__gguf_find(g, "general.architecture");
  if (!a || a->type != SF__GGUF_STR)
    sf_runtime_error(loc, "llm.llama_open: %s: no metadata key \"general.architecture\" (a str)",
                     g->view.name);
  const char *ap = a->val;
  uint64_t an;
  const char *as = sf__gguf_next_str(&ap, &an);
  if (an >= sizeof m->arch)
    an = sizeof m->arch - 1;
  memcpy(m->arch, as, an);
  if (strcmp(m->arch, "llama"))
    sf_runtime_error(loc, "llm.llama_open: %s: architecture \"%s\", not \"llama\"", g->view.name,
                     m->arch);
  const char *A = m->arch;
  m->layers = meta_i(g, A, "block_count", -1, loc);
  m->dim = meta_i(g, A, "embedding_length", -1, loc);
  m->heads = meta_i(g, A, "attention.head_count", -1, loc);
  m->kv_heads = meta_i(g, A, "attention.head_count_kv", m->heads, loc);
  m->ffn = meta_i(g, A, "feed_forward_length", -1, loc);
  m->context = meta_i(g, A, "context_length", -1, loc);
  m->theta = meta_f(g, A, "rope.freq_base", 10000.0, loc);
  m->eps = meta_f(g, A, "attention.layer_norm_rms_epsilon", -1, loc);
  if (m->dim % m->heads || m->heads % m->kv_heads)
    sf_runtime_error(loc, "llm.llama_open: %s: width %" PRId64 " over %" PRId64 " heads and %" PRId64
                     " key/value heads does not divide", g->view.name, m->dim, m->heads, m->kv_heads);
  m->head_dim = m->dim / m->heads;
  m->rope_dim = meta_i(g, A, "rope.dimension_count", m->head_dim, loc);
  if (m->rope_dim > m->head_dim || m->rope_dim % 2)
    sf_runtime_error(loc, "llm.llama_open: %s: rope.dimension_count %" PRId64 " for heads of %" PRId64,
                     g->view.name, m->rope_dim, m->head_dim);
  m->embd = weight_of(g, "token_embd.weight", 0, m->dim, loc);
  m->vocab = m->embd.rows;
  m->tied = !sf__gguf_tensor_named(g, "output.weight");
  m->out = m->tied ? m->embd : weight_of(g, "output.weight", m->vocab, m->dim, loc);
  m->out_norm = norm_of(g, "output_norm.weight", m->dim, loc);
  inv_freq_of(m);
  m->L = sf_alloc(sizeof(layer_w) * (size_t)m->layers);
  int64_t kvd = m->kv_heads * m->head_dim;
  for (int64_t l = 0; l < m->layers; l++) {
    char n[96];
    layer_w *w = &m->L[l];
#define W(field, suffix, r, c)                                   \
  snprintf(n, sizeof n, "blk.%" PRId64 "." suffix, l);           \
  w->field = weight_of(g, n, r, c, loc)
    W(wq, "attn_q.weight", m->dim, m->dim);
    W(wk, "attn_k.weight", kvd, m->dim);
    W(wv, "attn_v.weight", kvd, m->dim);
    W(wo, "attn_output.weight", m->dim, m->dim);
    W(gate, "ffn_gate.weight", m->ffn, m->dim);
    W(up, "ffn_up.weight", m->ffn, m->dim);
    W(down, "ffn_down.weight", m->dim, m->ffn);
#undef W
    snprintf(n, sizeof n, "blk.%" PRId64 ".attn_norm.weight", l);
    w->attn_norm = norm_of(g, n, m->dim, loc);
    snprintf(n, sizeof n, "blk.%" PRId64 ".ffn_norm.weight", l);
    w->ffn_norm = norm_of(g, n, m->dim, loc);
  }
  return m;
}

/* ----------------------------------------- Hugging Face checkpoints */

/* A folder as transformers saves a LlamaForCausalLM: config.json (the
 * hyperparameters) and model.safetensors (the weights, F32, F16 or BF16,
 * PyTorch's names and [out, in] rows).  The weights are read where they
 * lie in the mapped file, as a GGUF's are, but for Wq and Wk: transformers
 * keeps them in the rotate-half order and this file's RoPE rotates
 * adjacent pairs, so each is copied once with llama.cpp's permutation
 * (within each head, row j · d/2 + i becomes row 2i + j), which makes the
 * model exactly the one its GGUF conversion gives. */
typedef struct {
  const char *dir, *cfg_path, *st_path;
  const cJSON *cfg;
  const sf__st_file *st;
} hf_src;

static const cJSON *cfg_get(const hf_src *h, const char *key) {
  for (const cJSON *c = h->cfg->child; c; c = c->next)
    if (c->string && !strcmp(c->string, key))
      return (c->type & 0xff) == cJSON_NULL ? NULL : c;
  return NULL;
}

/* An integer key (dflt when absent and dflt >= 0, else an error). */
static int64_t cfg_int(const hf_src *h, const char *key, int64_t dflt, const sf_loc *loc) {
  const cJSON *c = cfg_get(h, key);
  if (!c) {
    if (dflt >= 0)
      return dflt;
    sf_runtime_error(loc, "llm.llama_open: %s: no key \"%s\"", h->cfg_path, key);
  }
  double v = c->valuedouble;
  if ((c->type & 0xff) != cJSON_Number || v != (double)(int64_t)v || v <= 0 || v > (1 << 24))
    sf_runtime_error(loc, "llm.llama_open: %s: \"%s\" is not a positive integer", h->cfg_path, key);
  return (int64_t)v;
}

static double cfg_num(const hf_src *h, const char *key, double dflt, const sf_loc *loc) {
  const cJSON *c = cfg_get(h, key);
  if (!c) {
    if (dflt > 0)
      return dflt;
    sf_runtime_error(loc, "llm.llama_open: %s: no key \"%s\"", h->cfg_path, key);
  }
  if ((c->type & 0xff) != cJSON_Number || !(c->valuedouble > 0))
    sf_runtime_error(loc, "llm.llama_open: %s: \"%s\" is not a positive number", h->cfg_path, key);
  return c->valuedouble;
}

static bool cfg_bool(const hf_src *h, const char *key, bool dflt, const sf_loc *loc) {
  const cJSON *c = cfg_get(h, key);
  if (!c)
    return dflt;
  int t = c->type & 0xff;
  if (t != cJSON_True && t != cJSON_False)
    sf_runtime_error(loc, "llm.llama_open: %s: \"%s\" is not a boolean", h->cfg_path, key);
  return t == cJSON_True;
}

/* A string key, or NULL when absent. */
static const char *cfg_str(const hf_src *h, const char *key, const sf_loc *loc) {
  const cJSON *c = cfg_get(h, key);
  if (c && (c->type & 0xff) != cJSON_String)
    sf_runtime_error(loc, "llm.llama_open: %s: \"%s\" is not a string", h->cfg_path, key);
  return c ? c->valuestring : NULL;
}

/* Only a plain Llama: its model_type, its architectures, SiLU, no biases,
 * no RoPE scaling; anything else is named rather than run wrong. */
static void cfg_check_arch(const hf_src *h, const sf_loc *loc) {
  const char *mt = cfg_str(h, "model_type", loc);
  const cJSON *ar = cfg_get(h, "architectures");
  if (!mt && !ar)
    sf_runtime_error(loc, "llm.llama_open: %s: no key \"model_type\" (nor \"architectures\")",
                     h->cfg_path);
  if (mt && strcmp(mt, "llama"))
    sf_runtime_error(loc, "llm.llama_open: %s: model_type \"%s\", not \"llama\" (std.llm runs "
                     "Llama-architecture decoders)", h->cfg_path, mt);
  for (const cJSON *c = ar && (ar->type & 0xff) == cJSON_Array ? ar->child : NULL; c; c = c->next)
    if ((c->type & 0xff) != cJSON_String || strcmp(c->valuestring, "LlamaForCausalLM"))
      sf_runtime_error(loc, "llm.llama_open: %s: architectures holds \"%s\", not "
                       "\"LlamaForCausalLM\"", h->cfg_path,
                       (c->type & 0xff) == cJSON_String ? c->valuestring : "(not a string)");
  const char *act = cfg_str(h, "hidden_act", loc);
  if (act && strcmp(act, "silu"))
    sf_runtime_error(loc, "llm.llama_open: %s: hidden_act \"%s\", not \"silu\"", h->cfg_path, act);
  if (cfg_get(h, "rope_scaling"))
    sf_runtime_error(loc, "llm.llama_open: %s: \"rope_scaling\" is set; std.llm reads only "
                     "unscaled RoPE (rope_scaling null)", h->cfg_path);
  if (cfg_bool(h, "attention_bias", false, loc) || cfg_bool(h, "mlp_bias", false, loc))
    sf_runtime_error(loc, "llm.llama_open: %s: attention_bias or mlp_bias is true; std.llm's "
                     "Llama has no biases", h->cfg_path);
}

/* The checkpoint's tensor name, checked: F32, F16 or BF16 of shape
 * [rows, cols] (cols 0: a vector of rows). */
static const sf__st_tensor *st_tensor(const hf_src *h, const char *name, int64_t rows,
                                      int64_t cols, const sf_loc *loc) {
  const sf__st_tensor *t = sf__st_find(h->st, name);
  if (!t)
    sf_runtime_error(loc, "llm.llama_open: %s: no tensor \"%s\"", h->st_path, name);
  if (!t->dtype)
    sf_runtime_error(loc, "llm.llama_open: %s: tensor \"%s\" is %s; std.llm reads F32, F16 and "
                     "BF16 checkpoints", h->st_path, name, t->dtype_name);
  bool ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols
                 : t->ndim == 1 && t->shape[0] == rows;
  if (!ok) {
    char got[SF__SHAPE_BUF], want[64];
    if (cols)
      snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", rows, cols);
    else
      snprintf(want, sizeof want, "[%" PRId64 "]", rows);
    sf_runtime_error(loc, "llm.llama_open: %s: tensor \"%s\" has shape %s, not %s", h->st_path,
                     name, sf__shape_str(t->ndim, t->shape, got), want);
  }
  return t;
}

static uint32_t st_ggml_type(const sf__st_tensor *t) {
  return t->dtype == SF__ST_F32 ? SF__GGML_F32 : t->dtype == SF__ST_F16 ? SF__GGML_F16
                                                                         : SF__GGML_BF16;
}

/* A weight where it lies, or with heads > 0 copied in llama.cpp's
 * adjacent-pair order (above). */
static sf__qmat st_weight(const hf_src *h, const char *name, int64_t rows, int64_t cols,
                          int64_t heads, const sf_loc *loc) {
  const sf__st_tensor *t = st_tensor(h, name, rows, cols, loc);
  uint32_t ty = st_ggml_type(t);
  sf__qmat m = {ty, rows, cols, sf__ggml_bytes(ty, cols), t->data};
  if (heads > 0) {
    int64_t d = rows / heads, half = d / 2;
    char *p = sf_alloc((size_t)(m.row_bytes * (uint64_t)rows));
    for (int64_t hh = 0; hh < heads; hh++)
      for (int64_t i = 0; i < half; i++)
        for (int64_t j = 0; j < 2; j++)
          memcpy(p + (uint64_t)(hh * d + 2 * i + j) * m.row_bytes,
                 (const char *)t->data + (uint64_t)(hh * d + j * half + i) * m.row_bytes,
                 m.row_bytes);
    m.data = p;
  }
  return m;
}

/* A norm's weight as f32 (any of the three dtypes). */
static const float *st_norm(const hf_src *h, const char *name, int64_t n, const sf_loc *loc) {
  const sf__st_tensor *t = st_tensor(h, name, n, 0, loc);
  sf__qmat v = {st_ggml_type(t), 1, n, sf__ggml_bytes(st_ggml_type(t), n), t->data};
  float *out = sf_alloc(sizeof(float) * (size_t)n);
  sf__q_dequant_row(&v, 0, out);
  return out;
}

static void load_hf(model *m, const char *dir, const sf_loc *loc) {
  hf_src h = {dir, NULL, NULL, NULL, NULL};
  size_t n = strlen(dir) + 32;
  char *cp = sf_alloc(n), *sp = sf_alloc(n);
  snprintf(cp, n, "%s/config.json", dir);
  snprintf(sp, n, "%s/model.safetensors", dir);
  h.cfg_path = cp;
  h.st_path = sp;
  sf__view v;
  if (!sf__view_open(&v, cp))
    sf_runtime_error(loc, "llm.llama_open: %s: a model folder needs config.json (cannot read %s: "
                     "%s)", dir, cp, strerror(errno));
  char err[800];
  if (!sf__cjson_load(err, sizeof err))
    sf_runtime_error(loc, "llm.llama_open: %s: %s", cp, err);
  const char *end = NULL;
  cJSON *cfg = sf__cjson_parse(v.data, v.len, &end);
  if (!cfg || (cfg->type & 0xff) != cJSON_Object)
    sf_runtime_error(loc, "llm.llama_open: %s: not a JSON object (bad JSON at byte %td)", cp,
                     end ? end - v.data : (ptrdiff_t)0);
  h.cfg = cfg; /* kept: the model is the process's */
  cfg_check_arch(&h, loc);
  struct stat sb;
  char *ip = sf_alloc(n + 16);
  snprintf(ip, n + 16, "%s/model.safetensors.index.json", dir);
  if (stat(sp, &sb) && !stat(ip, &sb))
    sf_runtime_error(loc, "llm.llama_open: %s: a sharded checkpoint (model.safetensors.index.json); "
                     "std.llm reads one model.safetensors", dir);
  sf_free(ip);
  sf__st_file *st = sf__st_open(sp, err, sizeof err);
  if (!st)
    sf_runtime_error(loc, "llm.llama_open: %s", err);
  h.st = st;
  snprintf(m->arch, sizeof m->arch, "llama");
  m->layers = cfg_int(&h, "num_hidden_layers", -1, loc);
  m->dim = cfg_int(&h, "hidden_size", -1, loc);
  m->heads = cfg_int(&h, "num_attention_heads", -1, loc);
  m->kv_heads = cfg_int(&h, "num_key_value_heads", m->heads, loc);
  m->ffn = cfg_int(&h, "intermediate_size", -1, loc);
  m->context = cfg_int(&h, "max_position_embeddings", -1, loc);
  m->vocab = cfg_int(&h, "vocab_size", -1, loc);
  m->theta = cfg_num(&h, "rope_theta", 10000.0, loc);
  m->eps = cfg_num(&h, "rms_norm_eps", -1, loc);
  if (m->dim % m->heads || m->heads % m->kv_heads || (m->dim / m->heads) % 2)
    sf_runtime_error(loc, "llm.llama_open: %s: hidden_size %" PRId64 " over %" PRId64 " heads and %"
                     PRId64 " key/value heads does not divide (into even heads)", cp, m->dim,
                     m->heads, m->kv_heads);
  m->head_dim = m->dim / m->heads;
  if (cfg_int(&h, "head_dim", m->head_dim, loc) != m->head_dim)
    sf_runtime_error(loc, "llm.llama_open: %s: head_dim %" PRId64 " is not hidden_size / "
                     "num_attention_heads (%" PRId64 ")", cp, cfg_int(&h, "head_dim", 0, loc),
                     m->head_dim);
  m->rope_dim = m->head_dim;
  m->embd = st_weight(&h, "model.embed_tokens.weight", m->vocab, m->dim, 0, loc);
  m->tied = cfg_bool(&h, "tie_word_embeddings", false, loc);
  m->out = m->tied ? m->embd : st_weight(&h, "lm_head.weight", m->vocab, m->dim, 0, loc);
  m->out_norm = st_norm(&h, "model.norm.weight", m->dim, loc);
  m->L = sf_alloc(sizeof(layer_w) * (size_t)m->layers);
  int64_t kvd = m->kv_heads * m->head_dim;
  for (int64_t l = 0; l < m->layers; l++) {
    char nm[128];
    layer_w *w = &m->L[l];
#define W(field, suffix, r, c, hh)                                        \
  snprintf(nm, sizeof nm, "model.layers.%" PRId64 "." suffix, l);        \
  w->field = st_weight(&h, nm, r, c, hh, loc)
    W(wq, "self_attn.q_proj.weight", m->dim, m->dim, m->heads);
    W(wk, "self_attn.k_proj.weight", kvd, m->dim, m->kv_heads);
    W(wv, "self_attn.v_proj.weight", kvd, m->dim, 0);
    W(wo, "self_attn.o_proj.weight", m->dim, m->dim, 0);
    W(gate, "mlp.gate_proj.weight", m->ffn, m->dim, 0);
    W(up, "mlp.up_proj.weight", m->ffn, m->dim, 0);
    W(down, "mlp.down_proj.weight", m->dim, m->ffn, 0);
#undef W
    snprintf(nm, sizeof nm, "model.layers.%" PRId64 ".input_layernorm.weight", l);
    w->attn_norm = st_norm(&h, nm, m->dim, loc);
    snprintf(nm, sizeof nm, "model.layers.%" PRId64 ".post_attention_layernorm.weight", l);
    w->ffn_norm = st_norm(&h, nm, m->dim, loc);
  }
}

static model *model_of_path(const char *p, const sf_loc *loc) {
  pthread_mutex_lock(&models_lock);
  for (int i = 0; i < nmodels; i++)
    if (!strcmp(models[i]->path, p)) {
      model *m = models[i];
      pthread_mutex_unlock(&models_lock);
      return m;
    }
  if (nmodels == MODELS_MAX) {
    pthread_mutex_unlock(&models_lock);
    sf_runtime_error(loc, "llm.llama_open: %s: more than %d models open in one process", p,
                     MODELS_MAX);
  }
  pthread_mutex_unlock(&models_lock);
  model *m = load(p, loc); /* errors leave the table as it was */
  pthread_mutex_lock(&models_lock);
  models[nmodels++] = m;
  pthread_mutex_unlock(&models_lock);
  return m;
}

static model *model_of(const void *v, const sf_type *t, const sf_loc *loc) {
  sf_str *path = FIELD(t, v, "path", SF_STR, sf_str *);
  return model_of_path(sf__data_path(path, "read", loc), loc);
}

void sf_std_llm_llama_open(void *out, const sf_type *ot, sf_str *path, const sf_loc *loc) {
  const char *p = sf__data_path(path, "read", loc);
  model *m = model_of_path(p, loc);
  sf_str **slot = &FIELD(ot, out, "path", SF_STR, sf_str *);
  sf_release(*slot);
  *slot = sf_str_new(sf__str_data(path), sf__str_len(path));
  slot = &FIELD(ot, out, "arch", SF_STR, sf_str *);
  sf_release(*slot);
  *slot = sf_str_new(m->arch, (int64_t)strlen(m->arch));
  FIELD(ot, out, "layers", SF_I64, int64_t) = m->layers;
  FIELD(ot, out, "dim", SF_I64, int64_t) = m->dim;
  FIELD(ot, out, "heads", SF_I64, int64_t) = m->heads;
  FIELD(ot, out, "kv_heads", SF_I64, int64_t) = m->kv_heads;
  FIELD(ot, out, "head_dim", SF_I64, int64_t) = m->head_dim;
  FIELD(ot, out, "ffn", SF_I64, int64_t) = m->ffn;
  FIELD(ot, out, "vocab", SF_I64, int64_t) = m->vocab;
  FIELD(ot, out, "context", SF_I64, int64_t) = m->context;
  FIELD(ot, out, "rope_theta", SF_F64, double) = m->theta;
  FIELD(ot, out, "rms_eps", SF_F64, double) = m->eps;
  FIELD(ot, out, "tied", SF_BOOL, bool) = m->tied;
}

/* ---------------------------------------------------------- the caches */

/* The KV cache is paged (vLLM's PagedAttention): the keys and values of a
 * sequence live in blocks of KV_BLOCK tokens taken from the model's pool
 * as the sequence grows, listed in its block table, and given back when it
 * is truncated or freed, so the blocks held follow the tokens held rather
 * than each sequence's capacity.
 *
 * Key design choice: the pool is planes, not a heap of blocks.  It is one
 * reservation of address space (mmap, MAP_NORESERVE: a page costs memory
 * only once written) laid out [2][layer][kv_head][slot][KV_BLOCK][head_dim]
 * (vLLM's per-layer KV tensors), and a block is a slot index: its keys of
 * one layer and head are 16 rows of a plane.  Blocks allocated one by one
 * put each (layer, head)'s 16 keys on their own page, 737 KB apart, and a
 * decode at 1024 tokens ran 25-35% slower than over one contiguous array
 * (page walks, no next-page prefetch); in planes, a sequence's blocks
 * taken in order are adjacent slots, the old contiguous layout, and the
 * lowest free slot is always reused first so they mostly are.  A
 * contiguous cache (the layout before paging, kept as the reference the
 * tests compare against) is the same addressing with its own planes of
 * `capacity` tokens and one block.  Attention reads the keys in position
 * order whatever the blocks, so the bits are the contiguous cache's. */
#define KV_BLOCK 16
#define KV_SLOTS 32768 /* slots reserved when no bound is set first: 512K tokens */

typedef struct {
  model *m;
  int64_t cap, len;
  int64_t bt;      /* tokens per block: KV_BLOCK, or cap for a contiguous cache */
  bool pooled;     /* blocks from m's pool (not a contiguous cache) */
  float *base;     /* the planes: the pool's, or the cache's own */
  size_t plane;    /* floats from one plane to the next */
  int64_t *blk;    /* the block table: each block's offset in a plane (floats),
                      nblk of them, room for cap / bt rounded up */
  int64_t nblk;
  int32_t on;      /* where its values are: 0 none yet, 1 this process's memory,
                      2 + g GPU g's KV store (gpu_llama.c) */
  int64_t tmax;    /* the scratch below holds tmax tokens */
  float *x, *h, *q, *kk, *vv, *att, *g, *u;
} cache;

/* The floats of one block of bt tokens (every plane's part of it). */
static size_t block_floats(const model *m, int64_t bt) {
  return 2 * (size_t)(m->layers * m->kv_heads * bt * m->head_dim);
}

/* Token s's keys (v = 0) or values (v = 1) of kv head h of layer l. */
static inline float *kv_row(const cache *k, int64_t l, int64_t h, int64_t s, int v) {
  const model *m = k->m;
  int64_t b = s / k->bt, o = s % k->bt;
  size_t plane = (size_t)((v * m->layers + l) * m->kv_heads + h);
  return k->base + plane * k->plane + (size_t)k->blk[b] + (size_t)(o * m->head_dim);
}

/* The pool's address space, reserved once (its bound's slots, or
 * KV_SLOTS); the caller holds the lock. */
static bool pool_reserve(model *m, char *err, size_t errlen) {
  kv_pool *p = &m->pool;
  if (p->base)
    return true;
  int64_t slots = p->bound > 0 ? p->bound : KV_SLOTS;
  size_t bytes = block_floats(m, KV_BLOCK) * sizeof(float) * (size_t)slots;
  void *a = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  /* Without a bound, where the address space is limited (ulimit -v, or
   * overcommit 2, which ignores MAP_NORESERVE), take what there is, down
   * to one whole context: the pool's bound is then what was reserved. */
  int64_t least = (m->context + KV_BLOCK - 1) / KV_BLOCK;
  while (a == MAP_FAILED && p->bound <= 0 && slots / 2 >= least) {
    slots /= 2;
    bytes = block_floats(m, KV_BLOCK) * sizeof(float) * (size_t)slots;
    a = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
  }
  if (a == MAP_FAILED) {
    snprintf(err, errlen, "cannot reserve %zu bytes of address space for %" PRId64 " KV blocks: %s",
             bytes, slots, strerror(errno));
    return false;
  }
  p->base = a;
  p->slots = slots;
  p->heap = sf_alloc(sizeof(int64_t) * (size_t)slots);
  return true;
}

static void heap_push(kv_pool *p, int64_t v) {
  int64_t i = p->nheap++;
  while (i > 0 && p->heap[(i - 1) / 2] > v) {
    p->heap[i] = p->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  p->heap[i] = v;
}

static int64_t heap_pop(kv_pool *p) {
  int64_t top = p->heap[0], v = p->heap[--p->nheap], i = 0;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= p->nheap)
      break;
    if (c + 1 < p->nheap && p->heap[c + 1] < p->heap[c])
      c++;
    if (p->heap[c] >= v)
      break;
    p->heap[i] = p->heap[c];
    i = c;
  }
  if (p->nheap)
    p->heap[i] = v;
  return top;
}

/* n blocks from m's pool into out (their offsets in a plane), all or none:
 * false (nothing taken) when the bound, or the slots reserved, leave fewer
 * than n free.  Freed slots are reused lowest first, before new ones, so
 * the pool's memory is its high-water mark of blocks in use. */
static bool pool_take(model *m, int64_t n, int64_t *out) {
  kv_pool *p = &m->pool;
  pthread_mutex_lock(&p->lock);
  int64_t most = p->bound > 0 ? p->bound : p->slots;
  if (p->in_use + n > most) {
    pthread_mutex_unlock(&p->lock);
    return false;
  }
  for (int64_t i = 0; i < n; i++)
    out[i] = (p->nheap ? heap_pop(p) : p->allocated++) * KV_BLOCK * m->head_dim;
  p->in_use += n;
  if (p->in_use > p->peak)
    p->peak = p->in_use;
  pthread_mutex_unlock(&p->lock);
  return true;
}

static void pool_give(model *m, const int64_t *blocks, int64_t n) {
  kv_pool *p = &m->pool;
  pthread_mutex_lock(&p->lock);
  for (int64_t i = 0; i < n; i++)
    heap_push(p, blocks[i] / (KV_BLOCK * m->head_dim));
  p->in_use -= n;
  pthread_mutex_unlock(&p->lock);
}

/* The blocks cache k lacks to hold len tokens. */
static int64_t blocks_short(const cache *k, int64_t len) {
  int64_t want = (len + k->bt - 1) / k->bt;
  return want > k->nblk ? want - k->nblk : 0;
}

/* The pool is out of blocks: the error of fn, naming the pool's figures. */
static void pool_full(model *m, const char *fn, int64_t need, const sf_loc *loc) {
  pthread_mutex_lock(&m->pool.lock);
  int64_t used = m->pool.in_use, bound = m->pool.bound > 0 ? m->pool.bound : m->pool.slots;
  pthread_mutex_unlock(&m->pool.lock);
  sf_runtime_error(loc, "llm.%s: %" PRId64 " more KV block%s of %d tokens needed, but %" PRId64
                   " of the pool's bound of %" PRId64 " are in use (llm.kv_pool sets the bound; "
                   "nothing was appended)", fn, need, need == 1 ? "" : "s", KV_BLOCK, used, bound);
}

/* Takes the blocks k lacks to hold len tokens (checked to be available). */
static void blocks_grow(cache *k, int64_t len, const char *fn, const sf_loc *loc) {
  int64_t need = blocks_short(k, len);
  if (need && !pool_take(k->m, need, k->blk + k->nblk))
    pool_full(k->m, fn, need, loc);
  k->nblk += need;
}

#define CACHES_MAX 4096
static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
static cache *caches[CACHES_MAX];

static cache *cache_of(const void *c, const sf_type *ct, const char *fn, const sf_loc *loc) {
  int64_t id = FIELD(ct, c, "id", SF_I64, int64_t);
  pthread_mutex_lock(&caches_lock);
  cache *k = id >= 1 && id <= CACHES_MAX ? caches[id - 1] : NULL;
  pthread_mutex_unlock(&caches_lock);
  if (!k)
    sf_runtime_error(loc, "llm.%s: no KV cache %" PRId64 " in this process (freed, or made by "
                     "another process)", fn, id);
  return k;
}

static void cache_release(cache *k) {
  if (k->pooled)
    pool_give(k->m, k->blk, k->nblk);
  else
    sf_free(k->base);
  sf_free(k->blk);
  sf_free(k);
}

void sf_std_llm_kv_cache(void *out, const sf_type *ot, const void *mv, const sf_type *mt,
                         int64_t capacity, bool contiguous, const sf_loc *loc) {
  model *m = model_of(mv, mt, loc);
  if (capacity == 0)
    capacity = m->context;
  if (capacity < 1 || capacity > m->context)
    sf_runtime_error(loc, "llm.kv_cache: capacity %" PRId64 " (from 1 to the model's context, %"
                     PRId64 ")", capacity, m->context);
  cache *k = sf_alloc(sizeof *k);
  memset(k, 0, sizeof *k);
  k->m = m;
  k->cap = capacity;
  k->pooled = !contiguous;
  k->bt = contiguous ? capacity : KV_BLOCK;
  k->blk = sf_alloc(sizeof(int64_t) * (size_t)((capacity + k->bt - 1) / k->bt));
  if (contiguous) {
    k->base = sf_alloc(block_floats(m, capacity) * sizeof(float));
    k->plane = (size_t)(capacity * m->head_dim);
    k->blk[0] = 0;
    k->nblk = 1;
  } else {
    char err[200];
    pthread_mutex_lock(&m->pool.lock);
    bool ok = pool_reserve(m, err, sizeof err);
    pthread_mutex_unlock(&m->pool.lock);
    if (!ok) {
      sf_free(k->blk);
      sf_free(k);
      sf_runtime_error(loc, "llm.kv_cache: %s", err);
    }
    k->base = m->pool.base;
    k->plane = (size_t)(m->pool.slots * KV_BLOCK * m->head_dim);
  }
  pthread_mutex_lock(&caches_lock);
  int64_t id = 0;
  for (int i = 0; i < CACHES_MAX && !id; i++)
    if (!caches[i]) {
      caches[i] = k;
      id = i + 1;
    }
  pthread_mutex_unlock(&caches_lock);
  if (!id) {
    cache_release(k);
    sf_runtime_error(loc, "llm.kv_cache: more than %d KV caches live in one process", CACHES_MAX);
  }
  FIELD(ot, out, "id", SF_I64, int64_t) = id;
  FIELD(ot, out, "capacity", SF_I64, int64_t) = capacity;
}

int64_t sf_std_llm_kv_len(const void *c, const sf_type *ct, const sf_loc *loc) {
  return cache_of(c, ct, "kv_len", loc)->len;
}

void sf_std_llm_kv_truncate(const void *c, const sf_type *ct, int64_t n, const sf_loc *loc) {
  cache *k = cache_of(c, ct, "kv_truncate", loc);
  if (n < 0 || n > k->len)
    sf_runtime_error(loc, "llm.kv_truncate: %" PRId64 " tokens of a cache holding %" PRId64, n,
                     k->len);
  k->len = n;
  int64_t keep = (n + k->bt - 1) / k->bt;
  if (k->pooled && keep < k->nblk) {
    pool_give(k->m, k->blk + keep, k->nblk - keep);
    k->nblk = keep;
  }
}

static void scratch_free(cache *k) {
  float **b[] = {&k->x, &k->h, &k->q, &k->kk, &k->vv, &k->att, &k->g, &k->u};
  for (size_t i = 0; i < sizeof b / sizeof *b; i++) {
    sf_free(*b[i]);
    *b[i] = NULL;
  }
}

void sf_std_llm_kv_free(const void *c, const sf_type *ct, const sf_loc *loc) {
  cache *k = cache_of(c, ct, "kv_free", loc);
  int64_t id = FIELD(ct, c, "id", SF_I64, int64_t);
  pthread_mutex_lock(&caches_lock);
  caches[id - 1] = NULL;
  pthread_mutex_unlock(&caches_lock);
  scratch_free(k);
  cache_release(k);
}

void sf_std_llm_kv_pool(const void *mv, const sf_type *mt, int64_t blocks, const sf_loc *loc) {
  model *m = model_of(mv, mt, loc);
  kv_pool *p = &m->pool;
  pthread_mutex_lock(&p->lock);
  int64_t used = p->in_use, slots = p->slots;
  bool ok = blocks == 0 || (blocks > 0 && blocks >= used);
  bool fits = !p->base || blocks <= slots;
  if (ok && fits)
    p->bound = blocks;
  pthread_mutex_unlock(&p->lock);
  if (!ok)
    sf_runtime_error(loc, "llm.kv_pool: a bound of %" PRId64 " blocks (0: none, else at least the "
                     "%" PRId64 " in use)", blocks, used);
  if (!fits)
    sf_runtime_error(loc, "llm.kv_pool: a bound of %" PRId64 " blocks, but the pool reserved %"
                     PRId64 " when its first cache was made (set the bound before)", blocks, slots);
}

void sf_std_llm_kv_blocks(void *out, const sf_type *ot, const void *mv, const sf_type *mt,
                          const sf_loc *loc) {
  model *m = model_of(mv, mt, loc);
  kv_pool *p = &m->pool;
  pthread_mutex_lock(&p->lock);
  int64_t f[] = {KV_BLOCK, p->in_use, p->bound, p->allocated, p->peak};
  pthread_mutex_unlock(&p->lock);
  const char *names[] = {"block_tokens", "in_use", "bound", "allocated", "peak"};
  for (int i = 0; i < 5; i++)
    FIELD(ot, out, names[i], SF_I64, int64_t) = f[i];
  FIELD(ot, out, "block_bytes", SF_I64, int64_t) = (int64_t)(block_floats(m, KV_BLOCK) * sizeof(float));
}

static void scratch(cache *k, int64_t T) {
  if (T <= k->tmax)
    return;
  scratch_free(k);
  model *m = k->m;
  size_t t = (size_t)T, kvd = (size_t)(m->kv_heads * m->head_dim);
  k->x = sf_alloc(t * (size_t)m->dim * sizeof(float));
  k->h = sf_alloc(t * (size_t)m->dim * sizeof(float));
  k->q = sf_alloc(t * (size_t)m->dim * sizeof(float));
  k->att = sf_alloc(t * (size_t)m->dim * sizeof(float));
  k->kk = sf_alloc(t * kvd * sizeof(float));
  k->vv = sf_alloc(t * kvd * sizeof(float));
  k->g = sf_alloc(t * (size_t)m->ffn * sizeof(float));
  k->u = sf_alloc(t * (size_t)m->ffn * sizeof(float));
  k->tmax = T;
}

/* ---------------------------------------------------------- products */

/* A prefill's product, y (n × rows) = x (n × cols) · Wᵀ for n of 4 and
 * more: each row of W dequantized once into f32 (the cost shared by the n
 * rows of x), then dotted with four rows of x at a time, so each vector of
 * W loaded serves four products.  sf__q_matmul's kernels convert every
 * block again for every row of x, which makes a prefill of 128 tokens
 * compute-bound on the conversions (4× slower here).  Split over the pool
 * by rows of W; each product is one fixed order of operations, so the bits
 * do not depend on the thread count. */
typedef struct {
  const sf__qmat *w;
  const float *x;
  int64_t n;
  float *y;
} pjob;

#define PREFILL(SFX, F, L, ATTR)                                                       \
  static ATTR float hsum_##SFX(F a) {                                                  \
    float s = 0;                                                                       \
    for (int k = 0; k < L; k++)                                                        \
      s += a[k];                                                                       \
    return s;                                                                          \
  }                                                                                    \
  static ATTR void pf_##SFX(void *ctx, int64_t lo, int64_t hi) {                       \
    const pjob *J = ctx;                                                               \
    const sf__qmat *w = J->w;                                                          \
    int64_t c = w->cols, n = J->n, rows = w->rows;                                     \
    float *wr = sf_alloc(sizeof(float) * (size_t)c);                                   \
    for (int64_t r = lo; r < hi; r++) {                                                \
      sf__q_dequant_row(w, r, wr);                                                     \
      int64_t i = 0;                                                                   \
      for (; i + 4 <= n; i += 4) {                                                     \
        const float *x0 = J->x + i * c, *x1 = x0 + c, *x2 = x1 + c, *x3 = x2 + c;     \
        F a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, v, u;                                \
        int64_t j = 0;                                                                 \
        for (; j + L <= c; j += L) {                                                   \
          memcpy(&v, wr + j, sizeof v);                                                \
          memcpy(&u, x0 + j, sizeof u);                                                \
          a0 += v * u;                                                                 \
          memcpy(&u, x1 + j, sizeof u);                                                \
          a1 += v * u;                                                                 \
          memcpy(&u, x2 + j, sizeof u);                                                \
          a2 += v * u;                                                                 \
          memcpy(&u, x3 + j, sizeof u);                                                \
          a3 += v * u;                                                                 \
        }                                                                              \
        float s0 = hsum_##SFX(a0), s1 = hsum_##SFX(a1), s2 = hsum_##SFX(a2),           \
              s3 = hsum_##SFX(a3);                                                     \
        for (; j < c; j++) {                                                           \
          s0 += wr[j] * x0[j];                                                         \
          s1 += wr[j] * x1[j];                                                         \
          s2 += wr[j] * x2[j];                                                         \
          s3 += wr[j] * x3[j];                                                         \
        }                                                                              \
        J->y[i * rows + r] = s0;                                                       \
        J->y[(i + 1) * rows + r] = s1;                                                 \
        J->y[(i + 2) * rows + r] = s2;                                                 \
        J->y[(i + 3) * rows + r] = s3;                                                 \
      }                                                                                \
      for (; i < n; i++) {                                                             \
        const float *x0 = J->x + i * c;                                                \
        F a0 = {0}, v, u;                                                              \
        int64_t j = 0;                                                                 \
        for (; j + L <= c; j += L) {                                                   \
          memcpy(&v, wr + j, sizeof v);                                                \
          memcpy(&u, x0 + j, sizeof u);                                                \
          a0 += v * u;                                                                 \
        }                                                                              \
        float s0 = hsum_##SFX(a0);                                                     \
        for (; j < c; j++)                                                             \
          s0 += wr[j] * x0[j];                                                         \
        J->y[i * rows + r] = s0;                                                       \
      }                                                                                \
    }                                                                                  \
    sf_free(wr);                                                                       \
  }

PREFILL(sse, sf__f4, 4, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
PREFILL(avx2, sf__f8, 8, __attribute__((target("avx2,fma"))))
PREFILL(avx512, sf__f16, 16, __attribute__((target("avx512f"))))
#pragma GCC diagnostic pop
#define PF_WIDE 1
#endif

typedef void (*pf_fn)(void *, int64_t, int64_t);

static pf_fn pf_pick(void) {
#ifdef PF_WIDE
  /* the kernel sf__q_matmul chose (SFLOW_QUANT_KERNEL forces both) */
  const char *k = sf__q_kernel();
  if (!strcmp(k, "avx512"))
    return pf_avx512;
  if (!strcmp(k, "avx2"))
    return pf_avx2;
#endif
  return pf_sse;
}

/* Decode's products: quant.c's f32 kernels (each block converted to
 * floats), or with SFLOW_LLM_ACT=q8 its integer products (x quantized per
 * block to 8 bits, as llama.cpp does).  Both compute each row in one order
 * whatever the batch, so forward_batch's row i is forward's bits.  q8 is
 * not the default: a decode step's logits move by up to 8.8e-2 of the
 * largest from the f32 products', and tests/llm decoder's greedy
 * continuations leave transformers' (docs/llm.md). */
static bool act_f32(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("SFLOW_LLM_ACT");
    v = !(e && !strcmp(e, "q8"));
  }
  return v;
}

static void dec_product(const sf__qmat *w, const float *x, int64_t n, float *y) {
  if (act_f32())
    sf__q_matmul(w, x, n, y);
  else
    sf__q_matmul_q8(w, x, n, y);
}

/* y = x · Wᵀ for n rows of x: the prefill product above from 4 rows on,
 * else the decode products (each block read once). */
static void product(const sf__qmat *w, const float *x, int64_t n, float *y) {
  if (n < 4) {
    dec_product(w, x, n, y);
    return;
  }
  pjob J = {w, x, n, y};
  int64_t grain = (int64_t)((1 << 20) / (w->cols * n));
  sf__parallel_for(w->rows, grain > 4 ? grain : 4, pf_pick(), &J);
}

/* Decode's products that share their input (Wq, Wk, Wv; Wgate, Wup) as
 * one split over the pool: their rows side by side, each chunk of rows
 * through sf__q_matmul on that part of its weight.  Apart, each of
 * SmolLM2's 576 × 576 products is below quant.c's bound for splitting and
 * runs on one thread; together they split, and a layer waits for the pool
 * four times instead of seven.  Each row's sum is the one sf__q_matmul
 * computes, so the bits are its. */
typedef struct {
  const sf__qmat *w[3];
  float *y[3];
  int nw;
  const float *x;
  const sf__qx *qx; /* x quantized once for the chunks (NULL: f32 products) */
} fjob;

static void fused_rows(void *ctx, int64_t lo, int64_t hi) {
  const fjob *J = ctx;
  int64_t base = 0;
  for (int i = 0; i < J->nw && lo < hi; i++) {
    const sf__qmat *w = J->w[i];
    int64_t a = lo - base, b = hi - base;
    if (a < w->rows && b > 0) {
      a = a > 0 ? a : 0;
      b = b < w->rows ? b : w->rows;
      sf__qmat sub = *w;
      sub.rows = b - a;
      sub.data = (const char *)w->data + (uint64_t)a * w->row_bytes;
      if (J->qx)
        sf__q_matmul_qx(&sub, J->qx, J->y[i] + a);
      else
        sf__q_matmul(&sub, J->x, 1, J->y[i] + a);
    }
    base += w->rows;
  }
}

static void products(int nw, const sf__qmat *const *w, const float *x, int64_t n, float **y) {
  if (n != 1 || sf__pool_size() < 2) {
    for (int i = 0; i < nw; i++)
      product(w[i], x, n, y[i]);
    return;
  }
  fjob J = {{0}, {0}, nw, x, act_f32() ? NULL : sf__qx_prep(x, 1, w[0]->cols)};
  int64_t rows = 0;
  for (int i = 0; i < nw; i++) {
    J.w[i] = w[i];
    J.y[i] = y[i];
    rows += w[i]->rows;
  }
  int64_t grain = (int64_t)((64 << 10) / w[0]->row_bytes);
  sf__parallel_for(rows, grain > 1 ? grain : 1, fused_rows, &J);
  sf__qx_free((sf__qx *)J.qx);
}

/* ---------------------------------------------------------- the layers */

/* y = x / sqrt(mean(x²) + eps) * w, each of n rows of d. */
static void rms(const float *x, const float *w, int64_t n, int64_t d, double eps, float *y) {
  for (int64_t r = 0; r < n; r++) {
    const float *xr = x + r * d;
    double s = 0;
    for (int64_t j = 0; j < d; j++)
      s += (double)xr[j] * xr[j];
    float f = (float)(1.0 / sqrt(s / (double)d + eps));
    for (int64_t j = 0; j < d; j++)
      y[r * d + j] = w[j] * (xr[j] * f);
  }
}

/* Rotates adjacent pairs of the first rope_dim values of each head of n
 * rows (heads × head_dim), row r at position pos0 + r. */
static void rope(const model *m, float *x, int64_t n, int64_t heads, int64_t pos0) {
  int64_t hd = m->head_dim, half = m->rope_dim / 2;
  for (int64_t r = 0; r < n; r++)
    for (int64_t i = 0; i < half; i++) {
      float a = (float)(pos0 + r) * m->inv_freq[i];
      float c = cosf(a), s = sinf(a);
      for (int64_t h = 0; h < heads; h++) {
        float *p = x + (r * heads + h) * hd + 2 * i;
        float x0 = p[0], x1 = p[1];
        p[0] = x0 * c - x1 * s;
        p[1] = x0 * s + x1 * c;
      }
    }
}

typedef struct {
  const model *m;
  const cache *k;
  int64_t layer, T, pos0;
} attn_job;

/* One query head q against the first n keys and values of kv head kvh of
 * layer l of cache k: o (head_dim) = softmax(q · K / sqrt(hd)) · V, sc a
 * scratch of n.  The one order of operations of prefill, decode and a
 * batch's rows, so their bits agree; the keys are read block by block in
 * position order, so a paged cache gives a contiguous one's bits. */
static void attend(const model *m, const cache *k, int64_t l, int64_t kvh, const float *q,
                   int64_t n, float *sc, float *o) {
  int64_t hd = m->head_dim, bt = k->bt;
  float scale = (float)(1.0 / sqrt((double)hd));
  float mx = -INFINITY;
  for (int64_t b0 = 0; b0 < n; b0 += bt) {
    const float *K = kv_row(k, l, kvh, b0, 0);
    int64_t e = n - b0 < bt ? n - b0 : bt;
    for (int64_t t = 0; t < e; t++) {
      const float *ks = K + t * hd;
      sf__f4 a = {0}, b = {0};
      int64_t j = 0;
      for (; j + 8 <= hd; j += 8) {
        a += sf__ld4(q + j) * sf__ld4(ks + j);
        b += sf__ld4(q + j + 4) * sf__ld4(ks + j + 4);
      }
      a += b;
      float d = (a[0] + a[1]) + (a[2] + a[3]);
      for (; j < hd; j++)
        d += q[j] * ks[j];
      float v = d * scale;
      sc[b0 + t] = v;
      if (v > mx)
        mx = v;
    }
  }
  float sum = 0;
  for (int64_t s = 0; s < n; s++) {
    sc[s] = expf(sc[s] - mx);
    sum += sc[s];
  }
  for (int64_t j = 0; j < hd; j++)
    o[j] = 0;
  float inv = 1.0f / sum;
  for (int64_t b0 = 0; b0 < n; b0 += bt) {
    const float *V = kv_row(k, l, kvh, b0, 1);
    int64_t e = n - b0 < bt ? n - b0 : bt;
    for (int64_t t = 0; t < e; t++) {
      float p = sc[b0 + t] * inv;
      const float *vs = V + t * hd;
      int64_t j = 0;
      for (; j + 4 <= hd; j += 4) {
        sf__f4 acc = sf__ld4(o + j) + sf__ld4(vs + j) * p;
        memcpy(o + j, &acc, sizeof acc);
      }
      for (; j < hd; j++)
        o[j] += p * vs[j];
    }
  }
}

/* Tasks (t, h) of [lo, hi): query t's head h against keys 0 .. pos0 + t. */
static void attn_rows(void *ctx, int64_t lo, int64_t hi) {
  const attn_job *J = ctx;
  const model *m = J->m;
  const cache *k = J->k;
  int64_t hd = m->head_dim, group = m->heads / m->kv_heads;
  float *sc = sf_alloc(sizeof(float) * (size_t)(J->pos0 + J->T));
  for (int64_t task = lo; task < hi; task++) {
    int64_t t = task / m->heads, h = task % m->heads;
    attend(m, k, J->layer, h / group, k->q + (t * m->heads + h) * hd, J->pos0 + t + 1, sc,
           k->att + (t * m->heads + h) * hd);
  }
  sf_free(sc);
}

static void layer(model *m, cache *k, int64_t l, int64_t T, int64_t pos0) {
  const layer_w *w = &m->L[l];
  int64_t d = m->dim, hd = m->head_dim, kvd = m->kv_heads * hd;
  rms(k->x, w->attn_norm, T, d, m->eps, k->h);
  const sf__qmat *qkv[] = {&w->wq, &w->wk, &w->wv};
  float *qkv_y[] = {k->q, k->kk, k->vv};
  products(3, qkv, k->h, T, qkv_y);
  rope(m, k->q, T, m->heads, pos0);
  rope(m, k->kk, T, m->kv_heads, pos0);
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < m->kv_heads; h++) {
      memcpy(kv_row(k, l, h, pos0 + t, 0), k->kk + t * kvd + h * hd, sizeof(float) * (size_t)hd);
      memcpy(kv_row(k, l, h, pos0 + t, 1), k->vv + t * kvd + h * hd, sizeof(float) * (size_t)hd);
    }
  attn_job J = {m, k, l, T, pos0};
  int64_t tasks = T * m->heads;
  /* a task is about 2 · (pos0 + t) · head_dim multiply-adds */
  if (tasks > 1 && (pos0 + T) * T * m->heads * hd >= (1 << 18))
    sf__parallel_for(tasks, 1, attn_rows, &J);
  else
    attn_rows(&J, 0, tasks);
  product(&w->wo, k->att, T, k->h);
  for (int64_t i = 0; i < T * d; i++)
    k->x[i] += k->h[i];
  rms(k->x, w->ffn_norm, T, d, m->eps, k->h);
  const sf__qmat *gu[] = {&w->gate, &w->up};
  float *gu_y[] = {k->g, k->u};
  products(2, gu, k->h, T, gu_y);
  for (int64_t i = 0; i < T * m->ffn; i++) {
    float g = k->g[i];
    k->g[i] = g / (1.0f + expf(-g)) * k->u[i];
  }
  product(&w->down, k->g, T, k->h);
  for (int64_t i = 0; i < T * d; i++)
    k->x[i] += k->h[i];
}

/* ------------------------------------------------------ on the device */

static sf__llama_desc desc_of(const model *m) {
  sf__llama_desc D = {m, m->layers, m->dim, m->heads, m->kv_heads, m->head_dim, m->ffn, m->vocab,
                      m->rope_dim, m->eps, &m->embd, &m->out, m->out_norm, m->inv_freq, m->L};
  return D;
}

/* Does this step of the n caches run on the GPU (gpu_llama.c)?  When the
 * call holds one, the model's products all read block formats and the
 * caches are paged (a contiguous cache, the tests' reference layout,
 * stays on the CPU).  A cache's values live where its first token was
 * run until it is emptied: a step elsewhere is a runtime error. */
static bool on_gpu(model *m, cache **c, int64_t n, const char *fn, const sf_loc *loc) {
  bool gpu = sf__nn_gpu_here(loc);
  for (int64_t i = 0; i < n && gpu; i++)
    gpu = c[i]->pooled;
  if (gpu) {
    sf__llama_desc D = desc_of(m);
    gpu = sf__gpu_llama_runs(&D);
  }
  int32_t on = gpu ? 2 + sf__gpu_current_device() : 1;
  for (int64_t i = 0; i < n; i++)
    if (c[i]->len && c[i]->on != on) {
      char was[32], now[32];
      snprintf(was, sizeof was, c[i]->on > 1 ? "GPU %d's memory" : "host memory", c[i]->on - 2);
      snprintf(now, sizeof now, on > 1 ? "GPU %d" : "the CPU", on - 2);
      sf_runtime_error(loc, "llm.%s: the KV cache's %" PRId64 " tokens are in %s, but this call "
                       "runs on %s (a cache stays where its first token ran until "
                       "kv_truncate(c, 0))", fn, c[i]->len, was, now);
    }
  for (int64_t i = 0; i < n; i++)
    c[i]->on = on;
  return gpu;
}

sf_tensor *sf_std_llm_forward(const void *mv, const sf_type *mt, const void *c, const sf_type *ct,
                              sf_array *ids, bool all, const sf_loc *loc) {
  model *m = model_of(mv, mt, loc);
  cache *k = cache_of(c, ct, "forward", loc);
  if (k->m != m)
    sf_runtime_error(loc, "llm.forward: the KV cache was made for %s, not %s", k->m->path, m->path);
  int64_t T = ids ? ids->len : 0;
  if (T < 1)
    sf_runtime_error(loc, "llm.forward: no tokens (ids is empty)");
  if (k->len + T > k->cap)
    sf_runtime_error(loc, "llm.forward: %" PRId64 " tokens after the %" PRId64 " the cache holds "
                     "exceed its capacity of %" PRId64 " (the model's context is %" PRId64 ")", T,
                     k->len, k->cap, m->context);
  const int64_t *id = ids->data;
  for (int64_t t = 0; t < T; t++)
    if (id[t] < 0 || id[t] >= m->vocab)
      sf_runtime_error(loc, "llm.forward: ids[%" PRId64 "] = %" PRId64 " is not a token id (0 to %"
                       PRId64 ")", t, id[t], m->vocab - 1);
  if (on_gpu(m, &k, 1, "forward", loc)) {
    blocks_grow(k, k->len + T, "forward", loc);
    int64_t *pos = sf_alloc(sizeof(int64_t) * (size_t)T), *seq = sf_alloc(sizeof(int64_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++)
      pos[t] = k->len + t, seq[t] = 0;
    const int64_t *blk = k->blk;
    sf__llama_desc D = desc_of(m);
    sf__llama_step S = {T, 1, all ? T : 1, id, pos, seq, &blk, &k->nblk};
    sf_tensor *y = sf__gpu_llama_forward(&D, &S, loc);
    sf_free(pos);
    sf_free(seq);
    k->len += T;
    return y;
  }
  blocks_grow(k, k->len + T, "forward", loc);
  scratch(k, T);
  for (int64_t t = 0; t < T; t++)
    sf__q_dequant_row(&m->embd, id[t], k->x + t * m->dim);
  int64_t pos0 = k->len;
  for (int64_t l = 0; l < m->layers; l++)
    layer(m, k, l, T, pos0);
  k->len += T;
  int64_t n = all ? T : 1;
  const float *last = k->x + (T - n) * m->dim;
  rms(last, m->out_norm, n, m->dim, m->eps, k->h);
  int64_t shape[2] = {n, m->vocab};
  sf_tensor *y = sf__t_empty(2, shape, loc);
  product(&m->out, k->h, n, sf__t_wdata(y));
  return y;
}

/* ---------------------------------------------------------- a batch */

/* One decode step of n sequences: token ids[i] at position len(caches[i])
 * of caches[i].  The products run once over the n rows, through
 * sf__q_matmul (not the prefill kernel of product, whose sums for n >= 4
 * are in another order): each row of W is read once for the n rows of x
 * and dotted with each by the kernel decode uses, so row i's bits are
 * forward(m, caches[i], [ids[i]])'s whatever n and the thread count.
 * Attention, RoPE and the norms run per row against the row's own cache.
 * The scratch is the batch's, allocated per call (a step's cost is the
 * weights, not these few hundred KB). */
/* The blocks the n caches lack for one more token each, taken from the
 * pool at once: all or none, so a pool too small fails before any cache
 * changes. */
static void batch_blocks(model *m, cache **c, int64_t n, const sf_loc *loc) {
  int64_t need = 0;
  for (int64_t i = 0; i < n; i++)
    need += c[i]->pooled ? blocks_short(c[i], c[i]->len + 1) : 0;
  if (!need)
    return;
  int64_t *got = sf_alloc(sizeof(int64_t) * (size_t)need);
  if (!pool_take(m, need, got)) {
    sf_free(got);
    pool_full(m, "forward_batch", need, loc);
  }
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++)
    if (c[i]->pooled && blocks_short(c[i], c[i]->len + 1))
      c[i]->blk[c[i]->nblk++] = got[j++];
  sf_free(got);
}

typedef struct {
  const model *m;
  cache **c;
  const int64_t *pos;
  int64_t n, layer, maxn;
  const float *q;
  float *att;
} battn_job;

static void battn_rows(void *ctx, int64_t lo, int64_t hi) {
  const battn_job *J = ctx;
  const model *m = J->m;
  int64_t hd = m->head_dim, group = m->heads / m->kv_heads;
  float *sc = sf_alloc(sizeof(float) * (size_t)J->maxn);
  for (int64_t task = lo; task < hi; task++) {
    int64_t i = task / m->heads, h = task % m->heads;
    attend(m, J->c[i], J->layer, h / group, J->q + (i * m->heads + h) * hd, J->pos[i] + 1, sc,
           J->att + (i * m->heads + h) * hd);
  }
  sf_free(sc);
}

sf_tensor *sf_std_llm_forward_batch(const void *mv, const sf_type *mt, sf_array *cs, sf_array *ids,
                                    const sf_loc *loc) {
  model *m = model_of(mv, mt, loc);
  int64_t n = cs ? cs->len : 0;
  if (n < 1)
    sf_runtime_error(loc, "llm.forward_batch: no sequences (caches is empty)");
  if (!ids || ids->len != n)
    sf_runtime_error(loc, "llm.forward_batch: %" PRId64 " caches but %" PRId64 " ids (one token "
                     "per sequence)", n, ids ? ids->len : 0);
  const int64_t *id = ids->data;
  cache **c = sf_alloc(sizeof(cache *) * (size_t)n);
  int64_t *pos = sf_alloc(sizeof(int64_t) * (size_t)n);
  int64_t maxn = 1, work = 0;
  for (int64_t i = 0; i < n; i++) {
    c[i] = cache_of(sf__array_at(cs, i), cs->elem, "forward_batch", loc);
    if (c[i]->m != m)
      sf_runtime_error(loc, "llm.forward_batch: caches[%" PRId64 "] was made for %s, not %s", i,
                       c[i]->m->path, m->path);
    for (int64_t j = 0; j < i; j++)
      if (c[j] == c[i])
        sf_runtime_error(loc, "llm.forward_batch: caches[%" PRId64 "] and caches[%" PRId64 "] are "
                         "the same cache", j, i);
    if (c[i]->len + 1 > c[i]->cap)
      sf_runtime_error(loc, "llm.forward_batch: caches[%" PRId64 "] is full (%" PRId64 " tokens, "
                       "its capacity)", i, c[i]->cap);
    if (id[i] < 0 || id[i] >= m->vocab)
      sf_runtime_error(loc, "llm.forward_batch: ids[%" PRId64 "] = %" PRId64 " is not a token id "
                       "(0 to %" PRId64 ")", i, id[i], m->vocab - 1);
    pos[i] = c[i]->len;
    if (pos[i] + 1 > maxn)
      maxn = pos[i] + 1;
    work += (pos[i] + 1) * m->heads * m->head_dim;
  }
  if (on_gpu(m, c, n, "forward_batch", loc)) {
    batch_blocks(m, c, n, loc);
    int64_t *seq = sf_alloc(sizeof(int64_t) * (size_t)n), *nb = sf_alloc(sizeof(int64_t) * (size_t)n);
    const int64_t **blk = sf_alloc(sizeof(int64_t *) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
      seq[i] = i, nb[i] = c[i]->nblk, blk[i] = c[i]->blk;
    sf__llama_desc D = desc_of(m);
    sf__llama_step S = {n, n, n, id, pos, seq, blk, nb};
    sf_tensor *y = sf__gpu_llama_forward(&D, &S, loc);
    for (int64_t i = 0; i < n; i++)
      c[i]->len++;
    sf_free(seq), sf_free(nb), sf_free(blk), sf_free(c), sf_free(pos);
    return y;
  }
  batch_blocks(m, c, n, loc);
  int64_t d = m->dim, hd = m->head_dim, kvd = m->kv_heads * hd;
  size_t N = (size_t)n;
  float *x = sf_alloc(N * (size_t)d * sizeof(float)), *h = sf_alloc(N * (size_t)d * sizeof(float));
  float *q = sf_alloc(N * (size_t)d * sizeof(float)), *att = sf_alloc(N * (size_t)d * sizeof(float));
  float *kk = sf_alloc(N * (size_t)kvd * sizeof(float)), *vv = sf_alloc(N * (size_t)kvd * sizeof(float));
  float *g = sf_alloc(N * (size_t)m->ffn * sizeof(float)), *u = sf_alloc(N * (size_t)m->ffn * sizeof(float));
  for (int64_t i = 0; i < n; i++)
    sf__q_dequant_row(&m->embd, id[i], x + i * d);
  for (int64_t l = 0; l < m->layers; l++) {
    const layer_w *w = &m->L[l];
    rms(x, w->attn_norm, n, d, m->eps, h);
    dec_product(&w->wq, h, n, q);
    dec_product(&w->wk, h, n, kk);
    dec_product(&w->wv, h, n, vv);
    for (int64_t i = 0; i < n; i++) {
      rope(m, q + i * d, 1, m->heads, pos[i]);
      rope(m, kk + i * kvd, 1, m->kv_heads, pos[i]);
      for (int64_t k = 0; k < m->kv_heads; k++) {
        memcpy(kv_row(c[i], l, k, pos[i], 0), kk + i * kvd + k * hd, sizeof(float) * (size_t)hd);
        memcpy(kv_row(c[i], l, k, pos[i], 1), vv + i * kvd + k * hd, sizeof(float) * (size_t)hd);
      }
    }
    battn_job J = {m, c, pos, n, l, maxn, q, att};
    int64_t tasks = n * m->heads;
    if (work >= (1 << 18))
      sf__parallel_for(tasks, 1, battn_rows, &J);
    else
      battn_rows(&J, 0, tasks);
    dec_product(&w->wo, att, n, h);
    for (int64_t i = 0; i < n * d; i++)
      x[i] += h[i];
    rms(x, w->ffn_norm, n, d, m->eps, h);
    dec_product(&w->gate, h, n, g);
    dec_product(&w->up, h, n, u);
    for (int64_t i = 0; i < n * m->ffn; i++) {
      float gi = g[i];
      g[i] = gi / (1.0f + expf(-gi)) * u[i];
    }
    dec_product(&w->down, g, n, h);
    for (int64_t i = 0; i < n * d; i++)
      x[i] += h[i];
  }
  for (int64_t i = 0; i < n; i++)
    c[i]->len++;
  rms(x, m->out_norm, n, d, m->eps, h);
  int64_t shape[2] = {n, m->vocab};
  sf_tensor *y = sf__t_empty(2, shape, loc);
  dec_product(&m->out, h, n, sf__t_wdata(y));
  float *bufs[] = {x, h, q, att, kk, vv, g, u};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    sf_free(bufs[i]);
  sf_free(c);
  sf_free(pos);
  return y;
}

int64_t sf_std_llm_argmax(sf_tensor *logits, const sf_loc *loc) {
  logits = sf__t_arg(logits, "argmax", loc);
  if (logits->numel < 1 || logits->ndim < 1)
    sf_runtime_error(loc, "llm.argmax: an empty tensor");
  int64_t v = logits->shape[logits->ndim - 1];
  sf_tensor *c = sf__t_contig(logits);
  const float *p = sf__t_data(c) + (c->numel - v);
  int64_t best = 0;
  for (int64_t i = 1; i < v; i++)
    if (p[i] > p[best])
      best = i;
  sf_release(c);
  return best;
}
