/*
 * bpe.c — std.tokenizer's byte-level BPE (GPT-2's scheme, as Llama-family
 * models from SmolLM2 to Llama 3 use it), loaded from a GGUF file's
 * tokenizer.ggml.* metadata or from a Hugging Face tokenizer.json, with
 * the ids the Python `tokenizers` package gives (tests/llm checks a corpus
 * against it).
 *
 * The pipeline of tokenizers' BPE model under its pre-tokenizers:
 *   1. special tokens (the control tokens: <|im_start|>, <|endoftext|> ...)
 *      are cut out of the text where they occur, each one id;
 *   2. for "smollm" (SmolLM's Digits(individual_digits) pre-tokenizer),
 *      every \p{N} character becomes a piece of its own;
 *   3. each piece is split by GPT-2's pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      matched here by hand (words()), no regex library;
 *   4. each word's bytes start as the ids of their one-byte tokens (GPT-2's
 *      byte-to-unicode table names them) and the adjacent pair of lowest
 *      merge rank is merged, leftmost first, until no pair has a rank.
 * Decoding maps each token back through the table to bytes; bytes that
 * are not UTF-8 become U+FFFD, as tokenizers' ByteLevel decoder does.
 *
 * Key design choice: the sflow value `tokenizer.Bpe` holds the vocabulary
 * and the merges as strings (a plain value, sent to tasks and nodes like
 * any struct); the index that makes encoding fast — vocabulary and merge
 * hash tables over ids — is built once per process per vocabulary array
 * and cached ("The index cache"), as wordpiece.c does for WordPiece.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"
#include "gguf.h"
#include "tokenizer.h"

/* ---------------------------------------------------- byte to unicode */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 are U+0100 onwards in byte order. */
static uint32_t byte_cp(int b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
    return (uint32_t)b;
  int n = 0;
  for (int c = 0; c < b; c++)
    n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174);
  return 256 + (uint32_t)n;
}

static int put_utf8(uint32_t cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 63));
    out[2] = (char)(0x80 | (cp & 63));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 63));
  out[2] = (char)(0x80 | ((cp >> 6) & 63));
  out[3] = (char)(0x80 | (cp & 63));
  return 4;
}

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when it is not
 * one; *cp its code point. */
static int utf8_at(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (!len || (size_t)len > n)
    return 0;
  uint32_t v = c & (0xFF >> (len + 1));
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    v = v << 6 | (s[i] & 63);
  }
  if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
    return 0;
  *cp = v;
  return len;
}

/* ---------------------------------------------------- character classes */

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

static bool in_ranges(uint32_t cp, const uint32_t (*r)[2], int32_t n) {
  int32_t lo = 0, hi = n - 1;
  while (lo <= hi) {
    int32_t mid = (lo + hi) / 2;
    if (cp < r[mid][0])
      hi = mid - 1;
    else if (cp > r[mid][1])
      lo = mid + 1;
    else
      return true;
  }
  return false;
}

static int cls_of(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp | 32) >= 'a' && (cp | 32) <= 'z')
      return C_LETTER;
    if (cp >= '0' && cp <= '9')
      return C_NUMBER;
    if (cp == ' ' || (cp >= 9 && cp <= 13))
      return C_SPACE;
    return C_OTHER;
  }
  if (in_ranges(cp, sf__bpe_letter_ranges, sf__bpe_letter_count))
    return C_LETTER;
  if (in_ranges(cp, sf__bpe_number_ranges, sf__bpe_number_count))
    return C_NUMBER;
  if (in_ranges(cp, sf__bpe_space_ranges, sf__bpe_space_count))
    return C_SPACE;
  return C_OTHER;
}

/* ------------------------------------------------------------- index */

typedef struct {
  uint64_t key; /* (left << 32 | right) + 1; 0: empty */
  int32_t rank, id;
} merge_slot;

typedef struct bpe_index {
  sf_array *tokens;   /* the key, retained */
  int32_t ntok;
  /* vocabulary: open addressing over ids by token bytes */
  int32_t *vslots;
  uint64_t vmask;
  int32_t byte_id[256];
  merge_slot *mslots;
  uint64_t mmask;
  /* special tokens, matched in the text */
  int32_t nspecial;
  const char **sp;
  int32_t *splen, *spid;
  uint8_t first[256]; /* first bytes of special tokens */
  bool *is_special;   /* by id */
  bool digits;        /* the "smollm" pre-tokenizer */
  /* each id's bytes, for decode */
  char *dec;
  uint32_t *dec_off;
} bpe_index;

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static sf_str *tok_at(const bpe_index *x, int32_t id) { return ((sf_str **)x->tokens->data)[id]; }

static int32_t vocab_find(const bpe_index *x, const char *s, size_t n) {
  for (uint64_t i = fnv(s, n) & x->vmask;; i = (i + 1) & x->vmask) {
    int32_t id = x->vslots[i];
    if (id < 0)
      return -1;
    sf_str *t = tok_at(x, id);
    if ((size_t)t->len == n && !memcmp(t->data, s, n))
      return id;
  }
}

static uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

static const merge_slot *merge_find(const bpe_index *x, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  for (uint64_t i = mix(key) & x->mmask;; i = (i + 1) & x->mmask) {
    const merge_slot *s = &x->mslots[i];
    if (s->key == key || !s->key)
      return s->key ? s : NULL;
  }
}

static uint64_t table_size(int64_t n) {
  uint64_t c = 16;
  while (c < (uint64_t)n * 2)
    c *= 2;
  return c;
}

static void index_free(bpe_index *x) {
  if (!x)
    return;
  sf_release(x->tokens);
  sf_free(x->vslots), sf_free(x->mslots), sf_free(x->sp), sf_free(x->splen), sf_free(x->spid);
  sf_free(x->is_special), sf_free(x->dec), sf_free(x->dec_off), sf_free(x);
}

/* The fields of a Bpe value the index reads. */
typedef struct {
  sf_array *tokens, *merges, *special, *special_ids;
  sf_str *pre;
} bpe_view;

static void view_of(bpe_view *v, const void *tok, const sf_type *t, const sf_loc *loc) {
  void *p = (void *)tok;
  v->tokens = *(sf_array **)sf__field(t, p, "tokens", SF_ARRAY, loc);
  v->merges = *(sf_array **)sf__field(t, p, "merges", SF_ARRAY, loc);
  v->special = *(sf_array **)sf__field(t, p, "special", SF_ARRAY, loc);
  v->special_ids = *(sf_array **)sf__field(t, p, "special_ids", SF_ARRAY, loc);
  v->pre = *(sf_str **)sf__field(t, p, "pre", SF_STR, loc);
  if (!v->tokens || !v->merges || !v->special || !v->special_ids || v->tokens->len == 0)
    sf_runtime_error(loc, "tokenizer: a Bpe with no tokens (make one with bpe_load or bpe_from_gguf)");
}

/* Builds the index, or NULL with err set (a merge of tokens not in the
 * vocabulary, a missing byte token, a special id out of range). */
static bpe_index *index_build(const bpe_view *v, char *err, size_t errlen) {
  bpe_index *x = sf_alloc(sizeof *x);
  memset(x, 0, sizeof *x);
  sf_retain(v->tokens);
  x->tokens = v->tokens;
  if (v->tokens->len > INT32_MAX / 2) {
    snprintf(err, errlen, "%lld tokens is too many", (long long)v->tokens->len);
    index_free(x);
    return NULL;
  }
  x->ntok = (int32_t)v->tokens->len;
  x->digits = !strcmp(sf__str_data(v->pre), "smollm");
  uint64_t vc = table_size(x->ntok);
  x->vmask = vc - 1;
  x->vslots = sf_alloc(vc * sizeof *x->vslots);
  memset(x->vslots, 0xff, vc * sizeof *x->vslots);
  size_t dec_bytes = 0;
  for (int32_t id = 0; id < x->ntok; id++) {
    sf_str *t = tok_at(x, id);
    if (!t) {
      snprintf(err, errlen, "token %d is missing", id);
      index_free(x);
      return NULL;
    }
    dec_bytes += (size_t)t->len;
    uint64_t i = fnv(t->data, (size_t)t->len) & x->vmask;
    while (x->vslots[i] >= 0 && (tok_at(x, x->vslots[i])->len != t->len ||
                                 memcmp(tok_at(x, x->vslots[i])->data, t->data, (size_t)t->len)))
      i = (i + 1) & x->vmask;
    if (x->vslots[i] < 0)
      x->vslots[i] = id; /* a duplicate keeps its first id */
  }
  /* A byte without a token of its own is dropped from the words it is
   * in (the neighbours may merge across it), as tokenizers' BPE does
   * without an unk_token: SmolLM2 lacks 21 of the control bytes.  A
   * vocabulary without most bytes is not byte-level at all. */
  int have = 0;
  for (int b = 0; b < 256; b++) {
    char u[4];
    int n = put_utf8(byte_cp(b), u);
    x->byte_id[b] = vocab_find(x, u, (size_t)n);
    have += x->byte_id[b] >= 0;
  }
  if (have < 128 || x->byte_id['a'] < 0 || x->byte_id[' '] < 0) {
    snprintf(err, errlen, "the vocabulary has tokens for %d of the 256 bytes, or none for \"a\" or the space: "
             "not a byte-level BPE", have);
    index_free(x);
    return NULL;
  }
  /* Each id's bytes: its characters mapped back through the byte table
   * (a character outside it, as in a special token, stands for its own
   * UTF-8). */
  int32_t back[324];
  memset(back, 0xff, sizeof back);
  for (int b = 0; b < 256; b++)
    back[byte_cp(b)] = b;
  x->dec = sf_alloc(dec_bytes + 1);
  x->dec_off = sf_alloc(((size_t)x->ntok + 1) * sizeof *x->dec_off);
  size_t at = 0;
  for (int32_t id = 0; id < x->ntok; id++) {
    sf_str *t = tok_at(x, id);
    x->dec_off[id] = (uint32_t)at;
    for (int64_t i = 0; i < t->len;) {
      uint32_t cp;
      int n = utf8_at((const unsigned char *)t->data + i, (size_t)(t->len - i), &cp);
      if (n && cp < 324 && back[cp] >= 0) {
        x->dec[at++] = (char)back[cp];
      } else {
        n = n ? n : 1;
        memcpy(x->dec + at, t->data + i, (size_t)n);
        at += (size_t)n;
      }
      i += n;
    }
  }
  x->dec_off[x->ntok] = (uint32_t)at;
  /* merges: "left right" by rank */
  uint64_t mc = table_size(v->merges->len);
  x->mmask = mc - 1;
  x->mslots = sf_alloc(mc * sizeof *x->mslots);
  memset(x->mslots, 0, mc * sizeof *x->mslots);
  char *cat = NULL;
  size_t cat_cap = 0;
  for (int64_t r = 0; r < v->merges->len; r++) {
    sf_str *m = ((sf_str **)v->merges->data)[r];
    const char *s = sf__str_data(m), *sp = memchr(s, ' ', (size_t)sf__str_len(m));
    int32_t a = sp ? vocab_find(x, s, (size_t)(sp - s)) : -1;
    int32_t b = sp ? vocab_find(x, sp + 1, (size_t)(sf__str_len(m) - (sp + 1 - s))) : -1;
    size_t n = (size_t)sf__str_len(m) - 1;
    if (n + 1 > cat_cap)
      cat = sf__realloc(cat, cat_cap = n + 64);
    int32_t ab = -1;
    if (sp) {
      memcpy(cat, s, (size_t)(sp - s));
      memcpy(cat + (sp - s), sp + 1, n - (size_t)(sp - s));
      ab = vocab_find(x, cat, n);
    }
    if (a < 0 || b < 0 || ab < 0) {
      snprintf(err, errlen, "merge %lld \"%.60s\": %s", (long long)r, s,
               !sp ? "not two tokens separated by a space" : "a token of it, or of the pair joined, is not in the vocabulary");
      sf_free(cat);
      index_free(x);
      return NULL;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint64_t i = mix(key) & x->mmask;
    while (x->mslots[i].key && x->mslots[i].key != key)
      i = (i + 1) & x->mmask;
    if (!x->mslots[i].key) /* a repeated pair keeps its first rank */
      x->mslots[i] = (merge_slot){key, (int32_t)r, ab};
  }
  sf_free(cat);
  /* special tokens */
  int64_t ns = v->special->len < v->special_ids->len ? v->special->len : v->special_ids->len;
  x->nspecial = (int32_t)ns;
  x->sp = sf_alloc((size_t)(ns + 1) * sizeof *x->sp);
  x->splen = sf_alloc((size_t)(ns + 1) * sizeof *x->splen);
  x->spid = sf_alloc((size_t)(ns + 1) * sizeof *x->spid);
  x->is_special = sf_alloc((size_t)x->ntok);
  memset(x->is_special, 0, (size_t)x->ntok);
  for (int64_t i = 0; i < ns; i++) {
    sf_str *s = ((sf_str **)v->special->data)[i];
    int64_t id = ((int64_t *)v->special_ids->data)[i];
    if (id < 0 || id >= x->ntok || sf__str_len(s) == 0) {
      snprintf(err, errlen, "special token %lld (\"%.40s\", id %lld): %s", (long long)i,
               sf__str_data(s), (long long)id, sf__str_len(s) ? "the id is not in the vocabulary" : "empty");
      index_free(x);
      return NULL;
    }
    x->sp[i] = s->data;
    x->splen[i] = (int32_t)s->len;
    x->spid[i] = (int32_t)id;
    x->first[(unsigned char)s->data[0]] = 1;
    x->is_special[id] = true;
  }
  return x;
}

/* ---------------------------------------------------- the index cache */

/* Indexes by token array, at most CACHE_MAX, kept for the process (each
 * retains its array, so no other array can take its address).  Past that
 * an index is built for the call and freed after it. */
#define CACHE_MAX 16
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static bpe_index *cache[CACHE_MAX];
static int ncache;

static bpe_index *index_for(const bpe_view *v, bool *temporary, const sf_loc *loc) {
  *temporary = false;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < ncache; i++)
    if (cache[i]->tokens == v->tokens) {
      bpe_index *x = cache[i];
      pthread_mutex_unlock(&cache_lock);
      return x;
    }
  char err[300];
  bpe_index *x = index_build(v, err, sizeof err);
  if (!x) {
    pthread_mutex_unlock(&cache_lock);
    sf_runtime_error(loc, "tokenizer: a Bpe that cannot encode: %s", err);
  }
  if (ncache < CACHE_MAX)
    cache[ncache++] = x;
  else
    *temporary = true;
  pthread_mutex_unlock(&cache_lock);
  return x;
}

/* ------------------------------------------------------------ encode */

typedef struct {
  int32_t *ids;
  size_t n, cap;
  int32_t *sym;   /* one word's symbols */
  int32_t *rank;  /* rank of (sym[i], sym[i+1]) */
  size_t wcap;
} out_buf;

static void push_id(out_buf *o, int32_t id) {
  if (o->n == o->cap) {
    o->cap = o->cap ? o->cap * 2 : 256;
    o->ids = sf__realloc(o->ids, o->cap * sizeof *o->ids);
  }
  o->ids[o->n++] = id;
}

static int32_t pair_rank(const bpe_index *x, int32_t a, int32_t b, int32_t *merged) {
  const merge_slot *s = merge_find(x, a, b);
  if (!s)
    return INT32_MAX;
  if (merged)
    *merged = s->id;
  return s->rank;
}

/* One word's bytes through the merges, its ids appended to o. */
static void bpe_word(const bpe_index *x, const unsigned char *s, size_t n, out_buf *o) {
  if (n == 0)
    return;
  if (n > o->wcap) {
    o->wcap = n * 2;
    o->sym = sf__realloc(o->sym, o->wcap * sizeof *o->sym);
    o->rank = sf__realloc(o->rank, o->wcap * sizeof *o->rank);
  }
  int32_t *sym = o->sym, *rank = o->rank;
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (x->byte_id[s[i]] >= 0)
      sym[m++] = x->byte_id[s[i]];
  for (size_t i = 0; i + 1 < m; i++)
    rank[i] = pair_rank(x, sym[i], sym[i + 1], NULL);
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; i++)
      if (rank[i] < rank[best])
        best = i;
    if (rank[best] == INT32_MAX)
      break;
    int32_t merged = 0;
    pair_rank(x, sym[best], sym[best + 1], &merged);
    sym[best] = merged;
    memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
    if (m >= best + 3)
      memmove(rank + best + 1, rank + best + 2, (m - best - 3) * sizeof *rank);
    m--;
    if (best + 1 < m)
      rank[best] = pair_rank(x, sym[best], sym[best + 1], NULL);
    if (best > 0)
      rank[best - 1] = pair_rank(x, sym[best - 1], sym[best], NULL);
  }
  for (size_t i = 0; i < m; i++)
    push_id(o, sym[i]);
}

typedef struct {
  const unsigned char *s;
  size_t n;
} text;

static int cls_at(text t, size_t i, size_t end, int *len) {
  uint32_t cp;
  *len = utf8_at(t.s + i, end - i, &cp);
  return cls_of(cp);
}

/* The end of the run of class c that starts at i. */
static size_t run_of(text t, size_t i, size_t end, int c) {
  while (i < end) {
    int len;
    if (cls_at(t, i, end, &len) != c)
      break;
    i += (size_t)len;
  }
  return i;
}

/* GPT-2's pattern over the piece [i, end): each match through bpe_word. */
static void words(const bpe_index *x, text t, size_t i, size_t end, out_buf *o) {
  while (i < end) {
    const unsigned char *p = t.s + i;
    size_t left = end - i, j;
    int len, c = cls_at(t, i, end, &len);
    if (p[0] == '\'' && left >= 2 &&
        (p[1] == 's' || p[1] == 't' || p[1] == 'm' || p[1] == 'd')) {
      j = i + 2;
    } else if (p[0] == '\'' && left >= 3 &&
               ((p[1] == 'r' && p[2] == 'e') || (p[1] == 'v' && p[2] == 'e') ||
                (p[1] == 'l' && p[2] == 'l'))) {
      j = i + 3;
    } else if (p[0] == ' ' && left >= 2 && cls_at(t, i + 1, end, &len) != C_SPACE) {
      j = run_of(t, i + 1, end, cls_at(t, i + 1, end, &len));
    } else if (c != C_SPACE) {
      j = run_of(t, i, end, c);
    } else {
      /* \s+(?!\S), else \s+: a run of whitespace followed by the end
       * entirely; followed by a character, all but its last (when the
       * run is longer than one). */
      j = run_of(t, i, end, C_SPACE);
      if (j < end) {
        size_t last = j - 1;
        while ((t.s[last] & 0xC0) == 0x80)
          last--;
        if (last > i)
          j = last;
      }
    }
    bpe_word(x, p, j - i, o);
    i = j;
  }
}

/* One stretch of text between special tokens. */
static void encode_plain(const bpe_index *x, text t, size_t i, size_t end, out_buf *o) {
  if (!x->digits) {
    words(x, t, i, end, o);
    return;
  }
  size_t start = i;
  while (i < end) {
    int len, c = cls_at(t, i, end, &len);
    if (c == C_NUMBER) {
      words(x, t, start, i, o);
      words(x, t, i, i + (size_t)len, o);
      start = i + (size_t)len;
    }
    i += (size_t)len;
  }
  words(x, t, start, end, o);
}

static void encode(const bpe_index *x, text t, out_buf *o) {
  size_t start = 0;
  for (size_t i = 0; i < t.n;) {
    if (x->first[t.s[i]]) {
      int32_t best = -1, blen = 0;
      for (int32_t k = 0; k < x->nspecial; k++)
        if ((size_t)x->splen[k] <= t.n - i && x->splen[k] > blen && !memcmp(t.s + i, x->sp[k], (size_t)x->splen[k]))
          best = k, blen = x->splen[k];
      if (best >= 0) {
        encode_plain(x, t, start, i, o);
        push_id(o, x->spid[best]);
        i += (size_t)blen;
        start = i;
        continue;
      }
    }
    i++;
  }
  encode_plain(x, t, start, t.n, o);
}

static _Thread_local out_buf tls;

sf_array *sf_std_tokenizer_bpe_encode(const void *tok, const sf_type *tok_type, sf_str *s,
                                      const sf_loc *loc) {
  bpe_view v;
  view_of(&v, tok, tok_type, loc);
  size_t n = (size_t)sf__str_len(s), ok = sf__utf8_valid_prefix(sf__str_data(s), n);
  if (ok < n)
    sf_runtime_error(loc, "tokenizer.bpe_encode: the text is not UTF-8 (byte %zu)", ok);
  bool temporary;
  bpe_index *x = index_for(&v, &temporary, loc);
  tls.n = 0;
  encode(x, (text){(const unsigned char *)sf__str_data(s), n}, &tls);
  sf_array *a = sf_array_new(&sf_type_i64, (int64_t)tls.n, loc);
  for (size_t i = 0; i < tls.n; i++)
    ((int64_t *)a->data)[i] = tls.ids[i];
  if (temporary)
    index_free(x);
  return a;
}

/* ------------------------------------------------------------ decode */

/* Appends bytes to buf as UTF-8, each maximal invalid part one U+FFFD
 * (Rust's String::from_utf8_lossy, which tokenizers' decoder uses). */
static size_t lossy(const unsigned char *s, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int len = utf8_at(s + i, n - i, &cp);
    if (len) {
      memcpy(out + o, s + i, (size_t)len);
      o += (size_t)len;
      i += (size_t)len;
      continue;
    }
    /* The longest prefix of a valid sequence, at least one byte. */
    size_t k = 1;
    unsigned c = s[i];
    int want = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
    if (want > 1 && i + 1 < n) {
      unsigned lo = 0x80, hi = 0xBF, c1 = s[i + 1];
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
      if (c1 >= lo && c1 <= hi) {
        k = 2;
        while ((int)k < want && i + k < n && (s[i + k] & 0xC0) == 0x80)
          k++;
      }
    }
    memcpy(out + o, "\xEF\xBF\xBD", 3);
    o += 3;
    i += k;
  }
  return o;
}

sf_str *sf_std_tokenizer_bpe_decode(const void *tok, const sf_type *tok_type, sf_array *ids,
                                    bool skip_special, const sf_loc *loc) {
  bpe_view v;
  view_of(&v, tok, tok_type, loc);
  bool temporary;
  bpe_index *x = index_for(&v, &temporary, loc);
  size_t bytes = 0;
  int64_t n = ids ? ids->len : 0;
  const int64_t *id = ids ? ids->data : NULL;
  for (int64_t i = 0; i < n; i++) {
    if (id[i] < 0 || id[i] >= x->ntok) {
      int64_t bad = id[i], nt = x->ntok;
      if (temporary)
        index_free(x);
      sf_runtime_error(loc, "tokenizer.bpe_decode: id %lld (at %lld) is not in the vocabulary (0..%lld)",
                       (long long)bad, (long long)i, (long long)nt - 1);
    }
    bytes += x->dec_off[id[i] + 1] - x->dec_off[id[i]];
  }
  unsigned char *raw = sf_alloc(bytes + 1);
  size_t at = 0;
  for (int64_t i = 0; i < n; i++) {
    if (skip_special && x->is_special[id[i]])
      continue;
    uint32_t a = x->dec_off[id[i]], b = x->dec_off[id[i] + 1];
    memcpy(raw + at, x->dec + a, b - a);
    at += b - a;
  }
  char *out = sf_alloc(at * 3 + 1);
  size_t len = lossy(raw, at, out);
  sf_str *s = sf_str_new(out, (int64_t)len);
  sf_free(raw);
  sf_free(out);
  if (temporary)
    index_free(x);
  return s;
}
