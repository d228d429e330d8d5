/*
 * gpu_llama.h — std.llm's decoder on the GPU (gpu_llama.c over
 * kernels/llama.cu and kernels/quant.cu): what llama.c hands it.  The
 * model is described by pointers into its mapped file (the weights in
 * their block formats, uploaded once per device and kept), a step by its
 * rows' tokens, positions and their sequences' block tables; the KV
 * cache's values live on the device only.
 */
#ifndef SF_NN_GPU_LLAMA_H
#define SF_NN_GPU_LLAMA_H

#include "quant.h"

/* One layer's weights (llama.c's layer_w). */
typedef struct {
  const float *attn_norm, *ffn_norm; /* (dim) */
  sf__qmat wq, wk, wv, wo, gate, up, down;
} sf__llama_layer;

typedef struct {
  const void *key; /* the model: names its device copies */
  int64_t layers, dim, heads, kv_heads, head_dim, ffn, vocab, rope_dim;
  double eps;
  const sf__qmat *embd, *out;
  const float *out_norm, *inv_freq; /* (dim), (rope_dim / 2) */
  const sf__llama_layer *L;         /* (layers) */
} sf__llama_desc;

/* One step: n rows, row r token ids[r] at position pos[r] of sequence
 * seq[r], whose block table is blk[seq[r]] (nblk[..] offsets in a plane,
 * in floats, as llama.c's pool gives them: slot × 16 × head_dim); the
 * logits of the last nout rows come back as a device tensor
 * (nout, vocab). */
typedef struct {
  int64_t n, nseq, nout;
  const int64_t *ids, *pos, *seq;    /* (n) */
  const int64_t *const *blk;         /* (nseq) */
  const int64_t *nblk;               /* (nseq) */
} sf__llama_step;

/* Can the GPU run this model (every product's weight Q4_0, Q4_1 or Q8_0,
 * sizes within its 32-bit indices)? */
bool sf__gpu_llama_runs(const sf__llama_desc *d);
/* The step on this thread's device; the keys and values appended to the
 * device's store. */
sf_tensor *sf__gpu_llama_forward(const sf__llama_desc *d, const sf__llama_step *s,
                                 const sf_loc *loc);

#endif
