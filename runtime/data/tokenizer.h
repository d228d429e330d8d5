/*
 * tokenizer.h — the WordPiece tokenizer behind std.tokenizer (wordpiece.c)
 * and its Unicode tables (unicode_tables.c, generated).  Part of the data
 * layer, which stands on core only.
 *
 * Key design choice: the sflow value `tokenizer.Tokenizer` holds everything
 * a tokenizer is (the vocabulary as str[], the special ids, the normalizer's
 * flags), so it travels to tasks, nodes and checkpoints like any struct.
 * What is expensive to rebuild, the hash index of the vocabulary, lives in
 * a per-process cache keyed by the vocabulary array (wordpiece.c, "The
 * index cache"), so repeated encodes of one Tokenizer build it once.
 *
 * The sf_std_tokenizer_* functions are the `@extern` functions of
 * stdlib/tokenizer.sflow; their parameters follow the @extern contract
 * (docs/runtime.md): a struct result is written through (out, out_type),
 * a struct argument comes as (pointer, descriptor), references are
 * borrowed, arrays and strings returned are owned.
 */
#ifndef SF_TOKENIZER_H
#define SF_TOKENIZER_H

#include <stdint.h>

#include "core.h"

/* ------------------------------------------------------ wordpiece.c */

/* tokenizer.load(path) -> Tokenizer: reads a Hugging Face tokenizer.json
 * with a WordPiece model, a BertNormalizer (or none), a BertPreTokenizer
 * and a BERT-shaped post-processor.  Anything else, malformed JSON (named
 * file:line:column) or a vocabulary that is not the ids 0..n-1 is a runtime
 * error at loc. */
void sf_std_tokenizer_load(void *out, const sf_type *out_type, sf_str *path,
                           const sf_loc *loc);
/* tokenizer.encode(tok, text, max_length) -> Encoding: [CLS] text [SEP],
 * truncated to max_length tokens and padded to it (max_length 0: neither).
 * Invalid UTF-8 in text is a runtime error naming the byte offset. */
void sf_std_tokenizer_encode(void *out, const sf_type *out_type, const void *tok,
                             const sf_type *tok_type, sf_str *text, int64_t max_length,
                             const sf_loc *loc);
/* tokenizer.encode_pair(tok, a, b, max_length) -> Encoding:
 * [CLS] a [SEP] b [SEP], type ids 0 then 1, truncated longest first. */
void sf_std_tokenizer_encode_pair(void *out, const sf_type *out_type, const void *tok,
                                  const sf_type *tok_type, sf_str *a, sf_str *b,
                                  int64_t max_length, const sf_loc *loc);
/* tokenizer.encode_batch(tok, texts, max_length, pad_to_longest) -> Batch:
 * rows × cols i64 matrices (row-major), cols = max_length, or the longest
 * row when pad_to_longest or max_length is 0. */
void sf_std_tokenizer_encode_batch(void *out, const sf_type *out_type, const void *tok,
                                   const sf_type *tok_type, sf_array *texts,
                                   int64_t max_length, bool pad_to_longest,
                                   const sf_loc *loc);
/* tokenizer.decode(tok, ids) -> str: the WordPiece decoder of tokenizers
 * (special tokens skipped, "##" joined, its clean-up of spaces). Owned. */
sf_str *sf_std_tokenizer_decode(const void *tok, const sf_type *tok_type, sf_array *ids,
                                const sf_loc *loc);

/* The normalizer and pre-tokenizer alone, for the fuzz target
 * (tests/fuzz/fuzz_tokenizer.c): the words of text as each would reach
 * the WordPiece model, each followed by the byte 0xFF (which UTF-8 never
 * uses, while a word may hold NUL when clean_text is off), into out (at most cap
 * bytes, a word that does not fit is cut).  Returns the bytes written, or
 * -1 - offset at the first byte of invalid UTF-8.  flags: SF__TOK_* . */
enum { SF__TOK_CLEAN = 1, SF__TOK_CHINESE = 2, SF__TOK_STRIP = 4, SF__TOK_LOWER = 8 };
int64_t sf__tok_pretokenize(const char *text, int64_t len, int32_t flags, char *out,
                            int64_t cap);

/* ------------------------------------------------ bpe.c, bpe_load.c */

/* std.tokenizer's byte-level BPE (docs/tokenizer.md, "Byte-level BPE").
 * tokenizer.bpe_from_gguf(path) -> Bpe: the tokenizer.ggml.* metadata of a
 * GGUF file; tokenizer.bpe_load(path) -> Bpe: a Hugging Face
 * tokenizer.json with a BPE model.  A file that is not one, or a field of
 * the wrong type, is a runtime error naming the file and the key. */
void sf_std_tokenizer_bpe_from_gguf(void *out, const sf_type *out_type, sf_str *path,
                                    const sf_loc *loc);
void sf_std_tokenizer_bpe_load(void *out, const sf_type *out_type, sf_str *path,
                               const sf_loc *loc);
/* tokenizer.bpe_encode(tok, text) -> i64[]: special tokens in the text as
 * single ids, no BOS added.  Invalid UTF-8 is a runtime error. */
sf_array *sf_std_tokenizer_bpe_encode(const void *tok, const sf_type *tok_type, sf_str *text,
                                      const sf_loc *loc);
/* tokenizer.bpe_decode(tok, ids, skip_special) -> str: the bytes of the
 * ids' tokens, invalid UTF-8 as U+FFFD; an id outside the vocabulary is a
 * runtime error. */
sf_str *sf_std_tokenizer_bpe_decode(const void *tok, const sf_type *tok_type, sf_array *ids,
                                    bool skip_special, const sf_loc *loc);
/* bpe_tables.c (scripts/gen_bpe_tables.py): sorted [first, last] ranges
 * of \p{L}, \p{N} and White_Space. */
extern const int32_t sf__bpe_letter_count, sf__bpe_number_count, sf__bpe_space_count;
extern const uint32_t sf__bpe_letter_ranges[][2], sf__bpe_number_ranges[][2],
    sf__bpe_space_ranges[][2];

/* -------------------------------------------------- unicode_tables.c */

/* Character classes of the BERT normalizer and pre-tokenizer, from
 * scripts/gen_unicode_tables.py (its header says what each bit means and
 * where the table follows tokenizers rather than unicodedata). */
enum {
  SF__UC_DROP = 1,   /* removed by clean_text */
  SF__UC_WS = 2,     /* whitespace: ends a word */
  SF__UC_PUNCT = 4,  /* a word of its own */
  SF__UC_MN = 8,     /* removed by strip_accents */
  SF__UC_DECOMP = 16, /* has a canonical decomposition in sf__uc_decomp */
  SF__UC_LOWER = 32, /* lower-cases through sf__uc_lower */
};
extern const uint8_t sf__uc_stage1[0x1100];
/* The blocks, each class stored as the byte 0x40 + class (a string). */
extern const char sf__uc_stage2[];
static inline uint8_t sf__uc_flags(uint32_t cp) {
  return cp < 0x110000
             ? (uint8_t)(sf__uc_stage2[sf__uc_stage1[cp >> 8] * 256 + (cp & 255)] - 0x40)
             : 0;
}
/* Sorted keys; vals[i] is (offset into pool << 3) | length. */
extern const int32_t sf__uc_decomp_count, sf__uc_lower_count;
extern const uint32_t sf__uc_decomp_keys[], sf__uc_decomp_vals[], sf__uc_decomp_pool[];
extern const uint32_t sf__uc_lower_keys[], sf__uc_lower_vals[], sf__uc_lower_pool[];

#endif
