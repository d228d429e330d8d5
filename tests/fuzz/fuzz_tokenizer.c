/*
 * fuzz_tokenizer.c — libFuzzer target for std.tokenizer's normalizer,
 * pre-tokenizer and WordPiece matcher (runtime/data/wordpiece.c), which
 * read whatever text a program hands them.
 *
 * The first input byte picks the normalizer's flags (clean text, CJK,
 * strip accents, lower-case); the rest is the text.  Invalid UTF-8 must be
 * refused with the offset of a byte that really starts no character;
 * valid text must come out as non-empty words of valid UTF-8 with no
 * whitespace in them (and no ASCII capital when lower-casing), and its
 * encoding through a small vocabulary must be [CLS] ids [SEP] with every
 * id in the vocabulary, padded and masked consistently.  The Tokenizer and
 * Encoding descriptors are written here by hand, laid out as
 * stdlib/tokenizer.sflow's structs (the runtime finds fields by name).
 * Built by scripts/fuzz.sh (FUZZ_TARGET=tokenizer).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

typedef struct {
  sf_str *path;
  sf_array *vocab;
  int64_t unk_id, cls_id, sep_id, pad_id;
  sf_str *prefix;
  int64_t max_word_chars;
  bool clean_text, chinese_chars, strip_accents, lowercase;
  sf_array *special, *special_ids;
} tok_value;

typedef struct {
  sf_array *ids, *type_ids, *attention_mask;
} enc_value;

static const sf_type str_array = {SF_ARRAY, 8, 8, 0, &sf_type_str, NULL, "str[]"};
static const sf_type i64_array = {SF_ARRAY, 8, 8, 0, &sf_type_i64, NULL, "i64[]"};
#define F(s, name, t) {#name, (int32_t)offsetof(s, name), t}
static const sf_field tok_fields[] = {
    F(tok_value, path, &sf_type_str),        F(tok_value, vocab, &str_array),
    F(tok_value, unk_id, &sf_type_i64),      F(tok_value, cls_id, &sf_type_i64),
    F(tok_value, sep_id, &sf_type_i64),      F(tok_value, pad_id, &sf_type_i64),
    F(tok_value, prefix, &sf_type_str),      F(tok_value, max_word_chars, &sf_type_i64),
    F(tok_value, clean_text, &sf_type_bool), F(tok_value, chinese_chars, &sf_type_bool),
    F(tok_value, strip_accents, &sf_type_bool), F(tok_value, lowercase, &sf_type_bool),
    F(tok_value, special, &str_array),       F(tok_value, special_ids, &i64_array),
};
static const sf_field enc_fields[] = {
    F(enc_value, ids, &i64_array), F(enc_value, type_ids, &i64_array),
    F(enc_value, attention_mask, &i64_array)};
static const sf_type tok_type = {SF_STRUCT, sizeof(tok_value), 8,
                                 sizeof tok_fields / sizeof tok_fields[0], NULL, tok_fields,
                                 "Tokenizer"};
static const sf_type enc_type = {SF_STRUCT, sizeof(enc_value), 8, 3, NULL, enc_fields,
                                 "Encoding"};

static const char *const vocab[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##a", "##b", "ab", "é", "##é",
    "北", ",", ".", "!", "the", "##s", "i̇", "ß", "##ß", "ſ", "д", "##д"};
#define NV ((int64_t)(sizeof vocab / sizeof vocab[0]))

static tok_value tok;

static void init(void) {
  tok.vocab = sf_array_new(&sf_type_str, NV, NULL);
  for (int64_t i = 0; i < NV; i++)
    ((sf_str **)tok.vocab->data)[i] = sf_str_new(vocab[i], (int64_t)strlen(vocab[i]));
  tok.unk_id = 1, tok.cls_id = 2, tok.sep_id = 3, tok.pad_id = 0;
  tok.prefix = sf_str_new("##", 2);
  tok.max_word_chars = 16;
  tok.special = sf_array_new(&sf_type_str, 2, NULL);
  tok.special_ids = sf_array_new(&sf_type_i64, 2, NULL);
  ((sf_str **)tok.special->data)[0] = sf_str_new("[MASK]", 6);
  ((sf_str **)tok.special->data)[1] = sf_str_new("[CLS]", 5);
  ((int64_t *)tok.special_ids->data)[0] = 4;
  ((int64_t *)tok.special_ids->data)[1] = 2;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t c = s[i];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || i + len > n)
      return false;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (size_t j = 1; j < len; j++) {
      if ((s[i + j] & 0xC0) != 0x80)
        return false;
      v = (v << 6) | (s[i + j] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
      return false;
    i += len;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char out[1 << 17];
  if (!tok.vocab)
    init();
  if (size == 0 || size > 8192)
    return 0;
  int32_t flags = data[0] & 15;
  const char *text = (const char *)data + 1;
  int64_t n = (int64_t)size - 1;
  int64_t r = sf__tok_pretokenize(text, n, flags, out, sizeof out);
  bool ok = valid_utf8((const uint8_t *)text, (size_t)n);
  if (r < 0) {
    int64_t at = -1 - r;
    /* refused: the text is invalid, and valid up to the offset named */
    if (ok || at >= n || !valid_utf8((const uint8_t *)text, (size_t)at))
      abort();
    return 0;
  }
  if (!ok)
    abort(); /* invalid UTF-8 accepted */
  for (int64_t i = 0; i < r;) {
    const char *end = memchr(out + i, 0xFF, (size_t)(r - i));
    if (!end)
      abort(); /* every word ends with 0xFF */
    size_t len = (size_t)(end - (out + i));
    if (len == 0 || !valid_utf8((const uint8_t *)out + i, len))
      abort();
    for (size_t k = 0; k < len; k++) {
      char c = out[i + k];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
        abort();
      if ((flags & SF__TOK_LOWER) && c >= 'A' && c <= 'Z')
        abort();
    }
    i += (int64_t)len + 1;
  }
  tok.clean_text = flags & SF__TOK_CLEAN, tok.chinese_chars = flags & SF__TOK_CHINESE;
  tok.strip_accents = flags & SF__TOK_STRIP, tok.lowercase = flags & SF__TOK_LOWER;
  sf_str *s = sf_str_new(text, n);
  for (int64_t max_length = 0; max_length <= 8; max_length += 8) {
    enc_value e = {0};
    sf_std_tokenizer_encode(&e, &enc_type, &tok, &tok_type, s, max_length, NULL);
    int64_t len = e.ids->len;
    if (len < 2 || e.type_ids->len != len || e.attention_mask->len != len ||
        (max_length && len != max_length))
      abort();
    int64_t *ids = e.ids->data, *mask = e.attention_mask->data;
    if (ids[0] != 2)
      abort();
    int64_t used = 0;
    for (int64_t i = 0; i < len; i++) {
      if (ids[i] < 0 || ids[i] >= NV || (mask[i] != 0 && mask[i] != 1) ||
          (i && mask[i] > mask[i - 1]))
        abort();
      used += mask[i];
    }
    if (ids[used - 1] != 3)
      abort();
    sf_release(e.ids);
    sf_release(e.type_ids);
    sf_release(e.attention_mask);
  }
  sf_release(s);
  return 0;
}
