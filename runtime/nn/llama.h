/*
 * llama.h — std.llm's decoder (llama.c): a Llama-architecture model read
 * from a GGUF file and run with its weights in their block formats, and
 * its KV caches.  stdlib/llm.sflow, section "The decoder", binds these.
 */
#ifndef SF_NN_LLAMA_H
#define SF_NN_LLAMA_H

#include "quant.h"

/* llama_open(path) -> Llama: the hyperparameters of the file's metadata. */
void sf_std_llm_llama_open(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc);
/* kv_cache(m, capacity, contiguous) -> KvCache: an empty cache of capacity
 * tokens, paged from m's pool of KV blocks (or one contiguous block). */
void sf_std_llm_kv_cache(void *out, const sf_type *out_type, const void *m, const sf_type *mt,
                         int64_t capacity, bool contiguous, const sf_loc *loc);
/* kv_pool(m, blocks): the bound on m's KV blocks in use (0: none);
 * kv_blocks(m) -> KvBlocks: the pool's figures. */
void sf_std_llm_kv_pool(const void *m, const sf_type *mt, int64_t blocks, const sf_loc *loc);
void sf_std_llm_kv_blocks(void *out, const sf_type *out_type, const void *m, const sf_type *mt,
                          const sf_loc *loc);
/* Tokens a cache holds; truncate keeps the first n; free releases it. */
int64_t sf_std_llm_kv_len(const void *c, const sf_type *ct, const sf_loc *loc);
void sf_std_llm_kv_truncate(const void *c, const sf_type *ct, int64_t n, const sf_loc *loc);
void sf_std_llm_kv_free(const void *c, const sf_type *ct, const sf_loc *loc);
/* forward(m, c, ids, all) -> tensor: ids appended to the cache, the logits
 * of every new position (all) or of the last, (T or 1, vocab). */
sf_tensor *sf_std_llm_forward(const void *m, const sf_type *mt, const void *c, const sf_type *ct,
                              sf_array *ids, bool all, const sf_loc *loc);
/* argmax(logits) -> i64: the index of the largest value of the last row
 * (the first of equal ones, as torch.argmax). */
sf_tensor *sf_std_llm_forward_batch(const void *m, const sf_type *mt, sf_array *caches,
                                    sf_array *ids, const sf_loc *loc);
int64_t sf_std_llm_argmax(sf_tensor *logits, const sf_loc *loc);

#endif
