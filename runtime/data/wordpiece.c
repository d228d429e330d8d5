/*
 * wordpiece.c — std.tokenizer: a BERT WordPiece tokenizer that reads a
 * Hugging Face tokenizer.json and gives the ids the Python `tokenizers`
 * package gives, id for id (tests/runtime/tokenizer_test.py checks a whole
 * corpus against it).
 *
 * The pipeline is the one of tokenizers' BertNormalizer, BertPreTokenizer,
 * WordPiece model and BERT post-processor, fused into one pass over the
 * text: each code point is cleaned, CJK-isolated, accent-stripped (NFD,
 * marks dropped) and lower-cased as it is read (unicode_tables.c), and the
 * normalized characters are cut into words on whitespace and punctuation as
 * they come; then each word is matched greedily, longest piece first,
 * against the vocabulary.
 *
 * Key design choice: speed without allocation in the hot path.  Words and
 * ids go into per-thread scratch buffers that are reused across calls,
 * ASCII letters and digits take a path without table lookups, and the
 * vocabulary is two open-addressing hash tables (whole tokens, and pieces
 * after "##" keyed without the prefix) whose FNV-1a hash is computed once
 * per start position for every candidate length.  The index is built once
 * per vocabulary array and kept in a per-process cache (see "The index
 * cache"), so a Tokenizer value stays a plain serializable struct.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "tokenizer.h"

/* ---------------------------------------------------------- scratch */

/* Per-thread buffers, grown as needed and never freed (a pool thread
 * tokenizes many texts; this keeps malloc out of every call). */
typedef struct {
  uint32_t off, len;   /* bytes of the word in scratch.text */
  uint32_t nchars;     /* code points, for max_input_chars_per_word */
  int32_t special;     /* id of a special token matched in the raw text, or -1 */
} word;

typedef struct {
  char *text;           /* normalized words, back to back */
  size_t text_len, text_cap;
  word *words;
  size_t nwords, words_cap;
  int32_t *ids;         /* wordpiece ids of one text */
  size_t nids, ids_cap;
  int32_t *ids2;        /* the second text of a pair */
  size_t ids2_cap;
  uint64_t *hash;       /* running hashes of one start position */
  size_t hash_cap;
} scratch;

static _Thread_local scratch tls;

static void grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return;
  size_t n = *cap ? *cap : 64;
  while (n < need)
    n *= 2;
  *p = sf__realloc(*p, n * elem);
  *cap = n;
}

/* ------------------------------------------------------------ UTF-8 */

/* Decodes the code point at s[*i] (i < n) and advances *i; returns -1 on
 * invalid UTF-8 (overlong forms, surrogates and values past U+10FFFF
 * included), as Python's strict decoder would refuse it. */
static int32_t utf8_next(const unsigned char *s, int64_t n, int64_t *i) {
  int64_t k = *i;
  uint32_t c = s[k];
  if (c < 0x80) {
    *i = k + 1;
    return (int32_t)c;
  }
  int len;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) {
    len = 2, min = 0x80, c &= 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, min = 0x800, c &= 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, c &= 0x07;
  } else {
    return -1;
  }
  if (k + len > n)
    return -1;
  for (int j = 1; j < len; j++) {
    if ((s[k + j] & 0xC0) != 0x80)
      return -1;
    c = (c << 6) | (s[k + j] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c < 0xE000))
    return -1;
  *i = k + len;
  return (int32_t)c;
}

static int utf8_put(char *out, uint32_t c) {
  if (c < 0x80) {
    out[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    out[0] = (char)(0xC0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = (char)(0xE0 | (c >> 12));
    out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (c >> 18));
  out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
  out[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

/* ---------------------------------------------------------- Unicode */

/* The table entry of cp in a sorted mapping, copied to out; its length. */
static int uc_map(uint32_t cp, int32_t count, const uint32_t *keys, const uint32_t *vals,
                  const uint32_t *pool, uint32_t *out) {
  int32_t lo = 0, hi = count - 1;
  while (lo <= hi) {
    int32_t mid = (lo + hi) / 2;
    if (keys[mid] == cp) {
      uint32_t v = vals[mid], n = v & 7;
      memcpy(out, pool + (v >> 3), n * sizeof *out);
      return (int)n;
    }
    if (keys[mid] < cp)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  out[0] = cp;
  return 1;
}

/* NFD of one code point (at most 4 code points); Hangul syllables by the
 * Unicode algorithm, the rest from the table. */
static int uc_nfd(uint32_t cp, uint8_t f, uint32_t *out) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) {
    uint32_t s = cp - 0xAC00, t = s % 28;
    out[0] = 0x1100 + s / (21 * 28);
    out[1] = 0x1161 + (s % (21 * 28)) / 28;
    if (!t)
      return 2;
    out[2] = 0x11A7 + t;
    return 3;
  }
  if (!(f & SF__UC_DECOMP)) {
    out[0] = cp;
    return 1;
  }
  return uc_map(cp, sf__uc_decomp_count, sf__uc_decomp_keys, sf__uc_decomp_vals,
                sf__uc_decomp_pool, out);
}

/* The ranges tokenizers' BertNormalizer calls Chinese characters. */
static bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---------------------------------------------- normalize + pre-tokenize */

typedef struct {
  int32_t flags;               /* SF__TOK_* */
  const char *const *special;  /* special tokens matched in the raw text */
  const int64_t *special_len;
  const int32_t *special_id;
  int32_t nspecial;
  uint8_t special_first[32];   /* bit set of their first bytes */
} pretok_cfg;

static void word_end(scratch *s) {
  word *w = &s->words[s->nwords];
  if (s->text_len > w->off) {
    w->len = (uint32_t)(s->text_len - w->off);
    s->nwords++;
    grow((void **)&s->words, &s->words_cap, s->nwords + 1, sizeof(word));
  }
  s->words[s->nwords] = (word){(uint32_t)s->text_len, 0, 0, -1};
}

static inline void word_put(scratch *s, uint32_t cp) {
  grow((void **)&s->text, &s->text_cap, s->text_len + 4, 1);
  s->text_len += (size_t)utf8_put(s->text + s->text_len, cp);
  s->words[s->nwords].nchars++;
}

/* One normalized code point reaching the pre-tokenizer. */
static void pretok_char(scratch *s, uint32_t cp, uint8_t f) {
  if (f & SF__UC_WS) {
    word_end(s);
  } else if (f & SF__UC_PUNCT) {
    word_end(s);
    word_put(s, cp);
    word_end(s);
  } else {
    word_put(s, cp);
  }
}

/* A non-ASCII code point (or an ASCII one off the fast path) through the
 * normalizer, in tokenizers' order: clean, CJK, strip accents, lower. */
static void normalize_char(scratch *s, int32_t flags, uint32_t cp) {
  uint8_t f = sf__uc_flags(cp);
  if ((flags & SF__TOK_CLEAN) && (f & SF__UC_DROP))
    return;
  if (f & SF__UC_WS) {
    word_end(s); /* clean_text makes it a space; the pre-tokenizer splits either way */
    return;
  }
  bool cjk = (flags & SF__TOK_CHINESE) && is_cjk(cp);
  if (cjk)
    word_end(s);
  uint32_t d[4];
  int nd = 1;
  d[0] = cp;
  if (flags & SF__TOK_STRIP)
    nd = uc_nfd(cp, f, d);
  for (int i = 0; i < nd; i++) {
    uint8_t g = d[i] == cp ? f : sf__uc_flags(d[i]); /* singletons decompose too */
    if ((flags & SF__TOK_STRIP) && (g & SF__UC_MN))
      continue;
    if ((flags & SF__TOK_LOWER) && (g & SF__UC_LOWER)) {
      uint32_t lo[8];
      int nl = uc_map(d[i], sf__uc_lower_count, sf__uc_lower_keys, sf__uc_lower_vals,
                      sf__uc_lower_pool, lo);
      for (int j = 0; j < nl; j++)
        pretok_char(s, lo[j], sf__uc_flags(lo[j]));
    } else {
      pretok_char(s, d[i], g);
    }
  }
  if (cjk)
    word_end(s);
}

/* The longest special token at t[i], or -1. */
static int32_t special_at(const pretok_cfg *c, const char *t, int64_t n, int64_t i) {
  unsigned char b = (unsigned char)t[i];
  if (!(c->special_first[b >> 3] & (1u << (b & 7))))
    return -1;
  int32_t best = -1;
  for (int32_t k = 0; k < c->nspecial; k++) {
    int64_t l = c->special_len[k];
    if (l && l <= n - i && memcmp(t + i, c->special[k], (size_t)l) == 0 &&
        (best < 0 || l > c->special_len[best]))
      best = k;
  }
  return best;
}

/* Fills s->words with the words of text; returns -1 - offset of the first
 * invalid UTF-8 byte, or 0. */
static int64_t pretokenize(scratch *s, const pretok_cfg *c, const char *text, int64_t n) {
  const unsigned char *u = (const unsigned char *)text;
  int32_t flags = c->flags;
  bool lower = flags & SF__TOK_LOWER;
  s->text_len = 0;
  s->nwords = 0;
  grow((void **)&s->words, &s->words_cap, 1, sizeof(word));
  s->words[0] = (word){0, 0, 0, -1};
  int64_t i = 0;
  while (i < n) {
    unsigned char b = u[i];
    if (c->nspecial && (c->special_first[b >> 3] & (1u << (b & 7)))) {
      int32_t k = special_at(c, text, n, i);
      if (k >= 0) {
        word_end(s);
        s->words[s->nwords].special = c->special_id[k];
        s->nwords++;
        grow((void **)&s->words, &s->words_cap, s->nwords + 1, sizeof(word));
        s->words[s->nwords] = (word){(uint32_t)s->text_len, 0, 0, -1};
        i += c->special_len[k];
        continue;
      }
    }
    /* The fast path: ASCII letters and digits are copied (lower-cased). */
    if ((b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')) {
      grow((void **)&s->text, &s->text_cap, s->text_len + 1, 1);
      s->text[s->text_len++] = (char)b;
      s->words[s->nwords].nchars++;
      i++;
      continue;
    }
    if (b >= 'A' && b <= 'Z') {
      grow((void **)&s->text, &s->text_cap, s->text_len + 1, 1);
      s->text[s->text_len++] = (char)(lower ? b + 32 : b);
      s->words[s->nwords].nchars++;
      i++;
      continue;
    }
    if (b == ' ') {
      word_end(s);
      i++;
      continue;
    }
    int64_t at = i;
    int32_t cp = utf8_next(u, n, &i);
    if (cp < 0)
      return -1 - at;
    normalize_char(s, flags, (uint32_t)cp);
  }
  word_end(s);
  return 0;
}

int64_t sf__tok_pretokenize(const char *text, int64_t len, int32_t flags, char *out,
                            int64_t cap) {
  pretok_cfg c = {.flags = flags};
  scratch *s = &tls;
  int64_t r = pretokenize(s, &c, text, len);
  if (r < 0)
    return r;
  int64_t n = 0;
  for (size_t k = 0; k < s->nwords && n < cap; k++) {
    int64_t l = s->words[k].len;
    if (l > cap - n - 1)
      l = cap - n - 1;
    memcpy(out + n, s->text + s->words[k].off, (size_t)l);
    n += l;
    out[n++] = (char)0xFF;
  }
  return n;
}

/* --------------------------------------------------------- the index */

/* FNV-1a, 64 bits: a running hash, so one pass over a word's bytes gives
 * the hash of every prefix of it. */
#define FNV_BASIS 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

typedef struct {
  uint32_t tag; /* high half of the hash */
  int32_t id;   /* -1: empty */
} slot;

typedef struct {
  slot *slots;
  uint64_t mask;
  uint32_t skip;   /* bytes of the key not in the table's key (the prefix) */
  uint32_t maxlen; /* longest key, bytes */
} table;

typedef struct tok_index {
  atomic_int_fast64_t refs;
  sf_array *vocab;  /* the cache key, retained */
  int64_t n;
  char *bytes;      /* every token, back to back */
  uint32_t *off, *len;
  table whole;      /* tokens by their whole text (a word's first piece) */
  table cont;       /* tokens that start with the prefix, by the rest */
  struct tok_index *next;
} tok_index;

static uint64_t fnv(const char *p, size_t n) {
  uint64_t h = FNV_BASIS;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * FNV_PRIME;
  return h;
}

static inline uint64_t slot_of(uint64_t h) { return h ^ (h >> 29); }

static void table_init(table *t, int64_t n, uint32_t skip) {
  uint64_t size = 16;
  while (size < (uint64_t)n * 2)
    size *= 2;
  t->slots = sf__alloc_n(size, sizeof(slot));
  for (uint64_t i = 0; i < size; i++)
    t->slots[i].id = -1;
  t->mask = size - 1;
  t->skip = skip;
  t->maxlen = 0;
}

static void table_add(table *t, const tok_index *x, int32_t id) {
  const char *key = x->bytes + x->off[id] + t->skip;
  uint32_t klen = x->len[id] - t->skip;
  uint64_t h = fnv(key, klen);
  uint64_t i = slot_of(h) & t->mask;
  while (t->slots[i].id >= 0) {
    int32_t o = t->slots[i].id;
    if (x->len[o] - t->skip == klen && !memcmp(x->bytes + x->off[o] + t->skip, key, klen))
      return; /* a duplicate token: the first id wins, as a JSON object's does */
    i = (i + 1) & t->mask;
  }
  t->slots[i] = (slot){(uint32_t)(h >> 32), id};
  if (klen > t->maxlen)
    t->maxlen = klen;
}

static inline int32_t table_find(const table *t, const tok_index *x, uint64_t h,
                                 const char *key, uint32_t klen) {
  uint64_t i = slot_of(h) & t->mask;
  uint32_t tag = (uint32_t)(h >> 32);
  for (;;) {
    slot sl = t->slots[i];
    if (sl.id < 0)
      return -1;
    if (sl.tag == tag && x->len[sl.id] - t->skip == klen &&
        !memcmp(x->bytes + x->off[sl.id] + t->skip, key, klen))
      return sl.id;
    i = (i + 1) & t->mask;
  }
}

static tok_index *index_build(sf_array *vocab, sf_str *prefix) {
  tok_index *x = sf_alloc(sizeof *x);
  memset(x, 0, sizeof *x);
  atomic_init(&x->refs, 1);
  x->n = vocab ? vocab->len : 0;
  sf_array_host(vocab);
  size_t total = 0;
  for (int64_t i = 0; i < x->n; i++)
    total += (size_t)sf__str_len(((sf_str **)vocab->data)[i]);
  x->bytes = sf_alloc(total + 1);
  x->off = sf__alloc_n((size_t)x->n + 1, sizeof(uint32_t));
  x->len = sf__alloc_n((size_t)x->n + 1, sizeof(uint32_t));
  size_t at = 0;
  for (int64_t i = 0; i < x->n; i++) {
    sf_str *s = ((sf_str **)vocab->data)[i];
    x->off[i] = (uint32_t)at;
    x->len[i] = (uint32_t)sf__str_len(s);
    memcpy(x->bytes + at, sf__str_data(s), x->len[i]);
    at += x->len[i];
  }
  const char *p = sf__str_data(prefix);
  uint32_t plen = (uint32_t)sf__str_len(prefix);
  table_init(&x->whole, x->n, 0);
  table_init(&x->cont, x->n, plen);
  for (int64_t i = 0; i < x->n; i++) {
    table_add(&x->whole, x, (int32_t)i);
    if (x->len[i] >= plen && !memcmp(x->bytes + x->off[i], p, plen))
      table_add(&x->cont, x, (int32_t)i);
  }
  sf_retain(vocab);
  x->vocab = vocab;
  return x;
}

static void index_unref(tok_index *x) {
  if (!x || atomic_fetch_sub(&x->refs, 1) != 1)
    return;
  sf_release(x->vocab);
  sf_free(x->whole.slots);
  sf_free(x->cont.slots);
  sf_free(x->bytes);
  sf_free(x->off);
  sf_free(x->len);
  sf_free(x);
}

/* ---------------------------------------------------- the index cache */

/* Indexes by vocabulary array, most recently used first, at most
 * CACHE_MAX (each retains its array, so no other array can take its
 * address while it is cached).  Each thread also keeps the index it used
 * last, with a reference of its own, so a loop of encodes takes no lock.
 * The index is a copy of the vocabulary as it was when first used: a
 * Tokenizer's vocab is meant to be read, and changing its elements later
 * does not change the ids in this process (docs/data.md says so). */
#define CACHE_MAX 8
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static tok_index *cache_head;
static _Thread_local tok_index *tls_index;

static tok_index *index_for(sf_array *vocab, sf_str *prefix) {
  tok_index *x = tls_index;
  if (x && x->vocab == vocab)
    return x;
  pthread_mutex_lock(&cache_lock);
  tok_index **pp = &cache_head, *found = NULL;
  int count = 0;
  for (; *pp; pp = &(*pp)->next, count++) {
    if ((*pp)->vocab == vocab) {
      found = *pp;
      *pp = found->next; /* moved to the front below */
      break;
    }
  }
  if (!found) {
    pthread_mutex_unlock(&cache_lock);
    /* Built outside the lock: 30k tokens take a millisecond or two. */
    tok_index *fresh = index_build(vocab, prefix);
    pthread_mutex_lock(&cache_lock);
    for (pp = &cache_head; *pp; pp = &(*pp)->next)
      if ((*pp)->vocab == vocab)
        break;
    if (*pp) { /* another thread built it meanwhile */
      found = *pp;
      *pp = found->next;
      index_unref(fresh);
    } else {
      found = fresh;
    }
  }
  found->next = cache_head;
  cache_head = found;
  /* Evict past CACHE_MAX: the cache's reference goes; users keep theirs. */
  count = 0;
  for (pp = &cache_head; *pp; count++) {
    if (count >= CACHE_MAX) {
      tok_index *old = *pp;
      *pp = old->next;
      index_unref(old);
    } else {
      pp = &(*pp)->next;
    }
  }
  atomic_fetch_add(&found->refs, 1);
  pthread_mutex_unlock(&cache_lock);
  index_unref(tls_index);
  tls_index = found;
  return found;
}

/* -------------------------------------------------------- WordPiece */

/* Greedy longest-match-first over one word, as tokenizers' WordPiece: a
 * word longer than max_chars, or with a piece not in the vocabulary, is one
 * [UNK]. */
static void wordpiece(scratch *s, const tok_index *x, const char *w, uint32_t n,
                      uint32_t nchars, int64_t max_chars, int32_t unk, int32_t **ids,
                      size_t *nids, size_t *cap) {
  size_t first = *nids;
  if ((int64_t)nchars > max_chars)
    goto unknown;
  uint32_t start = 0;
  while (start < n) {
    const table *t = start ? &x->cont : &x->whole;
    uint32_t lim = n - start < t->maxlen ? n - start : t->maxlen;
    grow((void **)&s->hash, &s->hash_cap, (size_t)lim + 1, sizeof(uint64_t));
    uint64_t h = FNV_BASIS;
    for (uint32_t k = 0; k < lim; k++) {
      h = (h ^ (unsigned char)w[start + k]) * FNV_PRIME;
      s->hash[k + 1] = h;
    }
    uint32_t end = start + lim;
    int32_t id = -1;
    while (end > start) {
      /* end must be a character boundary */
      if (end < n && ((unsigned char)w[end] & 0xC0) == 0x80) {
        end--;
        continue;
      }
      id = table_find(t, x, s->hash[end - start], w + start, end - start);
      if (id >= 0)
        break;
      end--;
    }
    if (id < 0)
      goto unknown;
    grow((void **)ids, cap, *nids + 1, sizeof(int32_t));
    (*ids)[(*nids)++] = id;
    start = end;
  }
  return;
unknown:
  *nids = first;
  grow((void **)ids, cap, *nids + 1, sizeof(int32_t));
  (*ids)[(*nids)++] = unk;
}

/* ------------------------------------------------- the Tokenizer value */

/* The fields of tokenizer.Tokenizer (stdlib/tokenizer.sflow), found by
 * name in its descriptor once per thread and descriptor. */
typedef struct {
  const sf_type *type;
  int32_t vocab, unk_id, cls_id, sep_id, pad_id, prefix, max_word_chars;
  int32_t clean_text, chinese_chars, strip_accents, lowercase, special, special_ids, path;
} tok_layout;

typedef struct {
  sf_array *vocab;
  int32_t unk, cls, sep, pad;
  sf_str *prefix, *path;
  int64_t max_chars;
  pretok_cfg cfg;
} tok_view;

static const sf_field *field_named(const sf_type *t, const char *name, const sf_loc *loc) {
  for (int32_t i = 0; i < t->nfields; i++)
    if (!strcmp(t->fields[i].name, name))
      return &t->fields[i];
  sf_runtime_error(loc, "internal error: std.tokenizer: type %s has no field '%s' (%s:%d)",
                   t->name ? t->name : "?", name, __FILE__, __LINE__);
}

/* The offset of a field, checked to be of the kind the C side reads. */
static int32_t off_of(const sf_type *t, const char *name, int kind, const sf_loc *loc) {
  const sf_field *f = field_named(t, name, loc);
  if (f->type->kind != kind)
    sf_runtime_error(loc, "internal error: std.tokenizer: field '%s' of %s is not of the kind "
                     "the runtime reads (%s:%d)", name, t->name ? t->name : "?", __FILE__, __LINE__);
  return f->offset;
}

static const tok_layout *layout_of(const sf_type *t, const sf_loc *loc) {
  static _Thread_local tok_layout l;
  if (l.type == t)
    return &l;
  l.vocab = off_of(t, "vocab", SF_ARRAY, loc);
  l.unk_id = off_of(t, "unk_id", SF_I64, loc);
  l.cls_id = off_of(t, "cls_id", SF_I64, loc);
  l.sep_id = off_of(t, "sep_id", SF_I64, loc);
  l.pad_id = off_of(t, "pad_id", SF_I64, loc);
  l.prefix = off_of(t, "prefix", SF_STR, loc);
  l.max_word_chars = off_of(t, "max_word_chars", SF_I64, loc);
  l.clean_text = off_of(t, "clean_text", SF_BOOL, loc);
  l.chinese_chars = off_of(t, "chinese_chars", SF_BOOL, loc);
  l.strip_accents = off_of(t, "strip_accents", SF_BOOL, loc);
  l.lowercase = off_of(t, "lowercase", SF_BOOL, loc);
  l.special = off_of(t, "special", SF_ARRAY, loc);
  l.special_ids = off_of(t, "special_ids", SF_ARRAY, loc);
  l.path = off_of(t, "path", SF_STR, loc);
  l.type = t;
  return &l;
}

#define AT(p, off, T) (*(T *)((const char *)(p) + (off)))

/* An id read from the value, checked against the vocabulary (a Tokenizer
 * built by hand, or changed, must not index out of it). */
static int32_t checked_id(int64_t id, int64_t n, const char *what, const sf_loc *loc) {
  if (id < 0 || id >= n)
    sf_runtime_error(loc, "tokenizer: %s %lld is not an id of the vocabulary (0..%lld)", what,
                     (long long)id, (long long)n - 1);
  return (int32_t)id;
}

static void view_of(tok_view *v, const void *tok, const sf_type *t, const sf_loc *loc) {
  const tok_layout *l = layout_of(t, loc);
  v->vocab = AT(tok, l->vocab, sf_array *);
  int64_t n = v->vocab ? v->vocab->len : 0;
  if (n == 0)
    sf_runtime_error(loc, "tokenizer: the Tokenizer has no vocabulary (use tokenizer.load)");
  v->unk = checked_id(AT(tok, l->unk_id, int64_t), n, "unk_id", loc);
  v->cls = checked_id(AT(tok, l->cls_id, int64_t), n, "cls_id", loc);
  v->sep = checked_id(AT(tok, l->sep_id, int64_t), n, "sep_id", loc);
  v->pad = checked_id(AT(tok, l->pad_id, int64_t), n, "pad_id", loc);
  v->prefix = AT(tok, l->prefix, sf_str *);
  v->path = AT(tok, l->path, sf_str *);
  v->max_chars = AT(tok, l->max_word_chars, int64_t);
  int32_t f = 0;
  f |= AT(tok, l->clean_text, bool) ? SF__TOK_CLEAN : 0;
  f |= AT(tok, l->chinese_chars, bool) ? SF__TOK_CHINESE : 0;
  f |= AT(tok, l->strip_accents, bool) ? SF__TOK_STRIP : 0;
  f |= AT(tok, l->lowercase, bool) ? SF__TOK_LOWER : 0;
  memset(&v->cfg, 0, sizeof v->cfg);
  v->cfg.flags = f;
  sf_array *sp = AT(tok, l->special, sf_array *), *spi = AT(tok, l->special_ids, sf_array *);
  int64_t ns = sp ? sp->len : 0;
  if ((spi ? spi->len : 0) != ns)
    sf_runtime_error(loc, "tokenizer: special has %lld tokens but special_ids %lld",
                     (long long)ns, (long long)(spi ? spi->len : 0));
  /* Few special tokens (five for BERT): a small fixed table. */
  enum { MAXSP = 64 };
  static _Thread_local const char *sp_text[MAXSP];
  static _Thread_local int64_t sp_len[MAXSP];
  static _Thread_local int32_t sp_id[MAXSP];
  if (ns > MAXSP)
    sf_runtime_error(loc, "tokenizer: %lld special tokens; at most %d are supported",
                     (long long)ns, MAXSP);
  for (int64_t i = 0; i < ns; i++) {
    sf_str *s = ((sf_str **)sp->data)[i];
    sp_text[i] = sf__str_data(s);
    sp_len[i] = sf__str_len(s);
    sp_id[i] = checked_id(((int64_t *)spi->data)[i], n, "a special id", loc);
    if (sp_len[i]) {
      unsigned char b = (unsigned char)sp_text[i][0];
      v->cfg.special_first[b >> 3] |= (uint8_t)(1u << (b & 7));
    }
  }
  v->cfg.special = sp_text;
  v->cfg.special_len = sp_len;
  v->cfg.special_id = sp_id;
  v->cfg.nspecial = (int32_t)ns;
}

/* The wordpiece ids of one text (no [CLS]/[SEP]) into *ids. */
static void tokenize(const tok_view *v, const tok_index *x, sf_str *text, int32_t **ids,
                     size_t *nids, size_t *cap, const char *what, const sf_loc *loc) {
  scratch *s = &tls;
  int64_t r = pretokenize(s, &v->cfg, sf__str_data(text), sf__str_len(text));
  if (r < 0)
    sf_runtime_error(loc, "%s: invalid UTF-8 at byte %lld of the text", what,
                     (long long)(-1 - r));
  *nids = 0;
  for (size_t k = 0; k < s->nwords; k++) {
    const word *w = &s->words[k];
    if (w->special >= 0) {
      grow((void **)ids, cap, *nids + 1, sizeof(int32_t));
      (*ids)[(*nids)++] = w->special;
      continue;
    }
    wordpiece(s, x, s->text + w->off, w->len, w->nchars, v->max_chars, v->unk, ids, nids,
              cap);
  }
}

/* --------------------------------------------------------- results */

static sf_array *i64_array(const sf_type *field_type, int64_t n, const sf_loc *loc) {
  return sf_array_new(field_type->elem, n, loc);
}

/* Writes [CLS] a [SEP] (b [SEP]) into ids/types/mask rows of width cols,
 * padding the rest. */
static void fill_row(const tok_view *v, const int32_t *a, size_t na, const int32_t *b,
                     size_t nb, bool pair, int64_t cols, int64_t *ids, int64_t *types,
                     int64_t *mask) {
  int64_t k = 0;
  ids[k] = v->cls, types[k] = 0, mask[k++] = 1;
  for (size_t i = 0; i < na; i++)
    ids[k] = a[i], types[k] = 0, mask[k++] = 1;
  ids[k] = v->sep, types[k] = 0, mask[k++] = 1;
  if (pair) {
    for (size_t i = 0; i < nb; i++)
      ids[k] = b[i], types[k] = 1, mask[k++] = 1;
    ids[k] = v->sep, types[k] = 1, mask[k++] = 1;
  }
  for (; k < cols; k++)
    ids[k] = v->pad, types[k] = 0, mask[k] = 0;
}

static void write_encoding(void *out, const sf_type *out_type, const tok_view *v,
                           const int32_t *a, size_t na, const int32_t *b, size_t nb, bool pair,
                           int64_t max_length, const sf_loc *loc) {
  const sf_field *fi = field_named(out_type, "ids", loc);
  const sf_field *ft = field_named(out_type, "type_ids", loc);
  const sf_field *fm = field_named(out_type, "attention_mask", loc);
  int64_t used = (int64_t)(na + nb) + (pair ? 3 : 2);
  int64_t cols = max_length > 0 ? max_length : used;
  sf_array *ids = i64_array(fi->type, cols, loc), *types = i64_array(ft->type, cols, loc),
           *mask = i64_array(fm->type, cols, loc);
  fill_row(v, a, na, b, nb, pair, cols, ids->data, types->data, mask->data);
  AT(out, fi->offset, sf_array *) = ids;
  AT(out, ft->offset, sf_array *) = types;
  AT(out, fm->offset, sf_array *) = mask;
}

static void check_max_length(int64_t max_length, int64_t min, const char *what,
                             const sf_loc *loc) {
  if (max_length != 0 && max_length < min)
    sf_runtime_error(loc, "%s: max_length %lld leaves no room for the text (at least %lld, "
                     "or 0 for no limit)", what, (long long)max_length, (long long)min);
}

void sf_std_tokenizer_encode(void *out, const sf_type *out_type, const void *tok,
                             const sf_type *tok_type, sf_str *text, int64_t max_length,
                             const sf_loc *loc) {
  check_max_length(max_length, 2, "tokenizer.encode", loc);
  tok_view v;
  view_of(&v, tok, tok_type, loc);
  tok_index *x = index_for(v.vocab, v.prefix);
  scratch *s = &tls;
  tokenize(&v, x, text, &s->ids, &s->nids, &s->ids_cap, "tokenizer.encode", loc);
  size_t n = s->nids;
  if (max_length > 0 && (int64_t)n > max_length - 2)
    n = (size_t)(max_length - 2);
  write_encoding(out, out_type, &v, s->ids, n, NULL, 0, false, max_length, loc);
}

/* tokenizers' LongestFirst truncation of a pair to room ids. */
static void truncate_pair(size_t *n1, size_t *n2, size_t room) {
  if (*n1 + *n2 <= room)
    return;
  bool swap = *n1 > *n2;
  size_t a = swap ? *n2 : *n1, b = swap ? *n1 : *n2; /* a is the shorter */
  if (a > room)
    b = a;
  else
    b = a > room - a ? a : room - a;
  if (a + b > room) {
    a = room / 2;
    b = a + room % 2;
  }
  *n1 = swap ? b : a;
  *n2 = swap ? a : b;
}

void sf_std_tokenizer_encode_pair(void *out, const sf_type *out_type, const void *tok,
                                  const sf_type *tok_type, sf_str *a, sf_str *b,
                                  int64_t max_length, const sf_loc *loc) {
  check_max_length(max_length, 3, "tokenizer.encode_pair", loc);
  tok_view v;
  view_of(&v, tok, tok_type, loc);
  tok_index *x = index_for(v.vocab, v.prefix);
  scratch *s = &tls;
  size_t n2 = 0;
  tokenize(&v, x, b, &s->ids2, &n2, &s->ids2_cap, "tokenizer.encode_pair", loc);
  tokenize(&v, x, a, &s->ids, &s->nids, &s->ids_cap, "tokenizer.encode_pair", loc);
  size_t n1 = s->nids;
  if (max_length > 0)
    truncate_pair(&n1, &n2, (size_t)(max_length - 3));
  write_encoding(out, out_type, &v, s->ids, n1, s->ids2, n2, true, max_length, loc);
}

/* encode_batch: the rows go in chunks over the pool (sf__par_for), each
 * chunk tokenizing its rows with its thread's own scratch, so the ids do
 * not depend on which thread ran which chunk.  With a fixed width
 * (max_length, not pad_to_longest) a chunk writes its rows into the
 * result as it goes; else it keeps their ids back to back in its buffer
 * until the longest row is known, and a second pass writes them. */
enum { BATCH_CHUNKS = 16, BATCH_PAR_BYTES = 4 << 10 };

typedef struct batch_job {
  const tok_view *v;
  tok_index *x;
  sf_str **texts;
  int64_t rows, step, max_length, cols; /* cols 0: not known yet */
  int64_t *ids, *types, *mask;          /* rows x cols, once cols is known */
  int32_t **buf;                        /* chunk k's ids (the caller's, reused) */
  size_t *cap, *len;                    /* len[r]: row r's ids, truncated */
  const sf_loc *loc;
} batch_job;

/* The caller thread's chunk buffers, kept from batch to batch. */
static _Thread_local int32_t *batch_buf[BATCH_CHUNKS];
static _Thread_local size_t batch_cap[BATCH_CHUNKS];

static void batch_row_ids(batch_job *b, int64_t r) {
  scratch *s = &tls; /* this thread's */
  tokenize(b->v, b->x, b->texts[r], &s->ids, &s->nids, &s->ids_cap, "tokenizer.encode_batch",
           b->loc);
  size_t n = s->nids;
  if (b->max_length > 0 && (int64_t)n > b->max_length - 2)
    n = (size_t)(b->max_length - 2);
  b->len[r] = n;
}

static void batch_fill(const batch_job *b, int64_t r, const int32_t *a) {
  int64_t c = b->cols;
  fill_row(b->v, a, b->len[r], NULL, 0, false, c, b->ids + r * c, b->types + r * c,
           b->mask + r * c);
}

static void batch_tokenize(void *ctx, int64_t lo, int64_t hi) {
  batch_job *b = ctx;
  for (int64_t k = lo; k < hi; k++) {
    int64_t r0 = k * b->step, r1 = r0 + b->step < b->rows ? r0 + b->step : b->rows;
    size_t used = 0;
    for (int64_t r = r0; r < r1; r++) {
      batch_row_ids(b, r);
      if (b->cols) {
        batch_fill(b, r, tls.ids);
        continue;
      }
      grow((void **)&b->buf[k], &b->cap[k], used + b->len[r], sizeof(int32_t));
      memcpy(b->buf[k] + used, tls.ids, b->len[r] * sizeof(int32_t));
      used += b->len[r];
    }
  }
}

static void batch_write(void *ctx, int64_t lo, int64_t hi) {
  batch_job *b = ctx;
  for (int64_t k = lo; k < hi; k++) {
    int64_t r0 = k * b->step, r1 = r0 + b->step < b->rows ? r0 + b->step : b->rows;
    const int32_t *a = b->buf[k];
    for (int64_t r = r0; r < r1; r++) {
      batch_fill(b, r, a);
      a += b->len[r];
    }
  }
}

/* The caller thread's last result arrays, one reference each: when the
 * program has let go of them (the cache's is the only reference left, so
 * no other thread can reach them) the next batch of the same size writes
 * into them.  A fresh 256 x 128 batch is three 256 KiB blocks, which
 * malloc maps and unmaps (or trims) each time: page faults on every
 * element, twice as costly as the tokenizing (docs/performance.md). */
static _Thread_local sf_array *batch_cache[3];

static sf_array *batch_array(int slot, const sf_type *field_type, int64_t n, const sf_loc *loc) {
  sf_array *a = batch_cache[slot];
  if (a && __atomic_load_n(&a->hdr.rc, __ATOMIC_ACQUIRE) == 1 && a->elem == field_type->elem &&
      !a->dev && a->cap >= n && a->cap <= 2 * n + 1024) {
    a->len = n;
    a->where = SF__WHERE_HOST;
    return a; /* batch_keep adds the result's reference */
  }
  return sf__array_new_uninit(field_type->elem, n, loc);
}

static void batch_keep(int slot, sf_array *a) {
  sf_retain(a); /* the result's reference, or the cache's of a fresh one */
  if (batch_cache[slot] != a) {
    sf_release(batch_cache[slot]);
    batch_cache[slot] = a;
  }
}

void sf_std_tokenizer_encode_batch(void *out, const sf_type *out_type, const void *tok,
                                   const sf_type *tok_type, sf_array *texts,
                                   int64_t max_length, bool pad_to_longest,
                                   const sf_loc *loc) {
  check_max_length(max_length, 2, "tokenizer.encode_batch", loc);
  tok_view v;
  view_of(&v, tok, tok_type, loc);
  int64_t rows = texts ? texts->len : 0;
  if (rows)
    sf_array_host(texts);
  batch_job b = {.v = &v, .x = index_for(v.vocab, v.prefix),
                 .texts = rows ? (sf_str **)texts->data : NULL, .rows = rows,
                 .max_length = max_length, .buf = batch_buf, .cap = batch_cap, .loc = loc};
  b.len = sf__alloc_n((size_t)rows + 1, sizeof(size_t));
  const sf_field *fi = field_named(out_type, "ids", loc);
  const sf_field *ft = field_named(out_type, "type_ids", loc);
  const sf_field *fm = field_named(out_type, "attention_mask", loc);
  const sf_field *fr = field_named(out_type, "rows", loc);
  const sf_field *fc = field_named(out_type, "cols", loc);
  sf_array *ids = NULL, *types = NULL, *mask = NULL;
  if (max_length > 0 && !pad_to_longest) {
    if (rows && max_length > INT64_MAX / rows)
      sf_runtime_error(loc, "tokenizer.encode_batch: %lld rows of %lld ids is too large",
                       (long long)rows, (long long)max_length);
    b.cols = max_length;
    ids = batch_array(0, fi->type, rows * b.cols, loc);
    types = batch_array(1, ft->type, rows * b.cols, loc);
    mask = batch_array(2, fm->type, rows * b.cols, loc);
    b.ids = ids->data, b.types = types->data, b.mask = mask->data;
  }
  /* Over the pool only when there is enough text to pay for the hand-off. */
  int64_t bytes = 0;
  for (int64_t r = 0; r < rows && bytes < BATCH_PAR_BYTES; r++)
    bytes += sf__str_len(b.texts[r]);
  bool par = rows > 1 && bytes >= BATCH_PAR_BYTES && sf__par_threads() > 1;
  int64_t nchunks = par ? (rows < BATCH_CHUNKS ? rows : BATCH_CHUNKS) : 1;
  b.step = rows ? (rows + nchunks - 1) / nchunks : 1;
  nchunks = rows ? (rows + b.step - 1) / b.step : 0;
  if (par)
    sf__par_for(nchunks, 1, batch_tokenize, &b);
  else
    batch_tokenize(&b, 0, nchunks);
  if (!b.cols) {
    int64_t longest = 0;
    for (int64_t r = 0; r < rows; r++)
      if ((int64_t)b.len[r] + 2 > longest)
        longest = (int64_t)b.len[r] + 2;
    b.cols = max_length > 0 && !pad_to_longest ? max_length : longest;
    if (rows && b.cols > INT64_MAX / rows)
      sf_runtime_error(loc, "tokenizer.encode_batch: %lld rows of %lld ids is too large",
                       (long long)rows, (long long)b.cols);
    ids = batch_array(0, fi->type, rows * b.cols, loc);
    types = batch_array(1, ft->type, rows * b.cols, loc);
    mask = batch_array(2, fm->type, rows * b.cols, loc);
    b.ids = ids->data, b.types = types->data, b.mask = mask->data;
    if (par)
      sf__par_for(nchunks, 1, batch_write, &b);
    else
      batch_write(&b, 0, nchunks);
  }
  sf_free(b.len);
  batch_keep(0, ids);
  batch_keep(1, types);
  batch_keep(2, mask);
  AT(out, fi->offset, sf_array *) = ids;
  AT(out, ft->offset, sf_array *) = types;
  AT(out, fm->offset, sf_array *) = mask;
  AT(out, fr->offset, int64_t) = rows;
  AT(out, fc->offset, int64_t) = b.cols;
}

/* ----------------------------------------------------------- decode */

/* tokenizers' WordPiece decoder clean-up, applied to each token as it
 * does (after the joining space is put in front). */
static void cleanup_put(sf__buf *b, const char *t, size_t n) {
  static const struct { const char *from, *to; } rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  char buf[256];
  if (n >= sizeof buf) { /* no vocabulary token is this long; put it as it is */
    sf__buf_put(b, t, n);
    return;
  }
  memcpy(buf, t, n);
  for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
    size_t fl = strlen(rules[r].from), tl = strlen(rules[r].to);
    for (size_t i = 0; i + fl <= n;) {
      if (!memcmp(buf + i, rules[r].from, fl)) {
        memmove(buf + i + tl, buf + i + fl, n - i - fl);
        memcpy(buf + i, rules[r].to, tl);
        n = n - fl + tl;
        i += tl;
      } else {
        i++;
      }
    }
  }
  sf__buf_put(b, buf, n);
}

sf_str *sf_std_tokenizer_decode(const void *tok, const sf_type *tok_type, sf_array *ids,
                                const sf_loc *loc) {
  tok_view v;
  view_of(&v, tok, tok_type, loc);
  int64_t nv = v.vocab->len, n = ids ? ids->len : 0;
  if (n)
    sf_array_host(ids);
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  const char *p = sf__str_data(v.prefix);
  size_t plen = (size_t)sf__str_len(v.prefix);
  int64_t out = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t id = ((int64_t *)ids->data)[i];
    if (id < 0 || id >= nv) {
      sf__buf_free(&b);
      sf_runtime_error(loc, "tokenizer.decode: ids[%lld] = %lld is not an id of the "
                       "vocabulary (0..%lld)", (long long)i, (long long)id, (long long)nv - 1);
    }
    bool special = false;
    for (int32_t k = 0; k < v.cfg.nspecial; k++)
      special |= v.cfg.special_id[k] == id;
    if (special)
      continue;
    sf_str *t = ((sf_str **)v.vocab->data)[id];
    const char *d = sf__str_data(t);
    size_t dl = (size_t)sf__str_len(t);
    char tmp[260];
    size_t tl = 0;
    if (out && dl >= plen && !memcmp(d, p, plen)) {
      d += plen, dl -= plen;
    } else if (out) {
      tmp[tl++] = ' ';
    }
    if (dl + tl < sizeof tmp) {
      memcpy(tmp + tl, d, dl);
      cleanup_put(&b, tmp, tl + dl);
    } else {
      sf__buf_put(&b, tmp, tl);
      sf__buf_put(&b, d, dl);
    }
    out++;
  }
  sf_str *r = sf_str_new(b.data, (int64_t)b.len);
  sf__buf_free(&b);
  return r;
}

/* ------------------------------------------------------------- load */

/* cJSON is the data layer's, loaded with dlopen (json.c), so only its
 * parser and destructor are called; the tree is walked here through the
 * struct's public fields. */
static bool j_is(const cJSON *j, int type) { return j && (j->type & 0xFF) == type; }
static bool j_string(const cJSON *j) { return j_is(j, cJSON_String); }
static bool j_number(const cJSON *j) { return j_is(j, cJSON_Number); }
static bool j_object(const cJSON *j) { return j_is(j, cJSON_Object); }
static bool j_array(const cJSON *j) { return j_is(j, cJSON_Array); }
static bool j_null(const cJSON *j) { return j_is(j, cJSON_NULL); }
static bool j_bool(const cJSON *j) { return j_is(j, cJSON_True) || j_is(j, cJSON_False); }

/* The member of object o named k (the first, as cJSON's own lookup), or NULL. */
static const cJSON *j_get(const cJSON *o, const char *k) {
  if (!j_object(o) && !j_array(o))
    return NULL;
  for (const cJSON *c = o->child; c; c = c->next)
    if (c->string && !strcmp(c->string, k))
      return c;
  return NULL;
}

static int j_size(const cJSON *a) {
  int n = 0;
  if (a && (j_array(a) || j_object(a)))
    for (const cJSON *c = a->child; c; c = c->next)
      n++;
  return n;
}

static const cJSON *j_at(const cJSON *a, int i) {
  if (!a || !(j_array(a) || j_object(a)))
    return NULL;
  const cJSON *c = a->child;
  while (c && i-- > 0)
    c = c->next;
  return c;
}

typedef struct {
  const char *path;
  const sf_loc *loc;
  cJSON *root;
  sf_str *text;
} loader;

_Noreturn static void load_fail(loader *L, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sf__cjson_delete(L->root);
  sf_release(L->text);
  char path[256];
  snprintf(path, sizeof path, "%s", L->path);
  sf_runtime_error(L->loc, "tokenizer.load: %s: %s", path, msg);
}

static cJSON *member(loader *L, const cJSON *obj, const char *where, const char *name) {
  const cJSON *m = j_get(obj, name);
  if (!m)
    load_fail(L, "%s has no \"%s\"", where, name);
  return (cJSON *)m;
}

static const char *string_member(loader *L, const cJSON *obj, const char *where,
                                 const char *name) {
  const cJSON *m = member(L, obj, where, name);
  if (!j_string(m))
    load_fail(L, "%s.%s is not a string", where, name);
  return m->valuestring;
}

static bool bool_member(loader *L, const cJSON *obj, const char *where, const char *name,
                        bool dflt) {
  const cJSON *m = j_get(obj, name);
  if (!m || j_null(m))
    return dflt;
  if (!j_bool(m))
    load_fail(L, "%s.%s is not true or false", where, name);
  return j_is(m, cJSON_True);
}

static int64_t whole_number(loader *L, const cJSON *m, const char *what) {
  if (!j_number(m) || m->valuedouble != (double)(int64_t)m->valuedouble ||
      m->valuedouble < 0 || m->valuedouble > 2147483647.0)
    load_fail(L, "%s is not a whole number from 0", what);
  return (int64_t)m->valuedouble;
}

static void set_field(void *out, const sf_type *t, const char *name, const void *v, size_t n,
                      const sf_loc *loc) {
  memcpy((char *)out + field_named(t, name, loc)->offset, v, n);
}

/* The id of a token the model names (unk_token, a special token). */
static int64_t token_id(loader *L, const cJSON *vocab, const char *tok, const char *what) {
  const cJSON *m = j_get(vocab, tok);
  if (!m)
    load_fail(L, "%s \"%s\" is not in model.vocab", what, tok);
  return whole_number(L, m, what);
}

/* The normalizer: BertNormalizer or none. */
static void load_normalizer(loader *L, void *out, const sf_type *t) {
  const cJSON *n = j_get(L->root, "normalizer");
  bool clean = false, chinese = false, strip = false, lower = false;
  if (n && !j_null(n)) {
    const char *type = string_member(L, n, "normalizer", "type");
    if (strcmp(type, "BertNormalizer"))
      load_fail(L, "normalizer.type is \"%s\"; std.tokenizer reads BertNormalizer only", type);
    clean = bool_member(L, n, "normalizer", "clean_text", true);
    chinese = bool_member(L, n, "normalizer", "handle_chinese_chars", true);
    lower = bool_member(L, n, "normalizer", "lowercase", true);
    /* strip_accents null means "as lowercase", as in tokenizers */
    strip = bool_member(L, n, "normalizer", "strip_accents", lower);
  }
  set_field(out, t, "clean_text", &clean, 1, L->loc);
  set_field(out, t, "chinese_chars", &chinese, 1, L->loc);
  set_field(out, t, "strip_accents", &strip, 1, L->loc);
  set_field(out, t, "lowercase", &lower, 1, L->loc);
}

/* The post-processor must put [CLS] before and [SEP] after (pairs:
 * [CLS] A [SEP] B [SEP], B's type id 1): TemplateProcessing of that shape
 * or BertProcessing.  Returns the two token texts. */
static void load_post(loader *L, const char **cls, const char **sep) {
  const cJSON *p = member(L, L->root, "the file", "post_processor");
  if (j_null(p))
    load_fail(L, "post_processor is null; std.tokenizer needs [CLS] A [SEP]");
  const char *type = string_member(L, p, "post_processor", "type");
  if (!strcmp(type, "BertProcessing")) {
    const cJSON *c = member(L, p, "post_processor", "cls"), *s = member(L, p, "post_processor", "sep");
    if (!j_string(j_at(c, 0)) || !j_string(j_at(s, 0)))
      load_fail(L, "post_processor.cls and .sep must be [token, id]");
    *cls = j_at(c, 0)->valuestring;
    *sep = j_at(s, 0)->valuestring;
    return;
  }
  if (strcmp(type, "TemplateProcessing"))
    load_fail(L, "post_processor.type is \"%s\"; std.tokenizer reads TemplateProcessing and "
              "BertProcessing", type);
  const cJSON *single = member(L, p, "post_processor", "single");
  const cJSON *pair = j_get(p, "pair");
  /* single: [Special cls 0, Sequence A 0, Special sep 0] */
  const char *names[5] = {0};
  int types[5] = {0};
  const cJSON *parts[2] = {single, pair};
  int want[2] = {3, 5};
  for (int w = 0; w < 2; w++) {
    if (!parts[w] || j_null(parts[w]))
      continue;
    if (!j_array(parts[w]) || j_size(parts[w]) != want[w])
      goto shape;
    for (int i = 0; i < want[w]; i++) {
      const cJSON *it = j_at(parts[w], i);
      bool is_seq = i == 1 || i == 3;
      const cJSON *o = j_get(it, is_seq ? "Sequence" : "SpecialToken");
      const cJSON *id = j_get(o, "id");
      const cJSON *ty = j_get(o, "type_id");
      if (!j_string(id) || !j_number(ty))
        goto shape;
      if (is_seq && strcmp(id->valuestring, i == 1 ? "A" : "B"))
        goto shape;
      if (w == 0 || !is_seq) {
        if (w == 0)
          names[i] = id->valuestring;
        else if ((i == 0 && strcmp(id->valuestring, names[0])) ||
                 (i > 0 && strcmp(id->valuestring, names[2])))
          goto shape;
      }
      types[i] = ty->valueint;
    }
    if (w == 0 ? (types[0] || types[1] || types[2])
               : (types[0] || types[1] || types[2] || types[3] != 1 || types[4] != 1))
      goto shape;
  }
  if (!names[0])
    goto shape;
  *cls = names[0];
  *sep = names[2];
  return;
shape:
  load_fail(L, "post_processor is not BERT's [CLS] A [SEP] (pair: [CLS] A [SEP] B:1 [SEP]:1)");
}

/* added_tokens: those matched in the raw text before normalization. */
static void load_added(loader *L, void *out, int64_t nvocab,
                       const sf_field *fs, const sf_field *fsi) {
  const cJSON *a = j_get(L->root, "added_tokens");
  int n = a && j_array(a) ? j_size(a) : 0;
  sf_array *texts = sf_array_new(fs->type->elem, n, L->loc);
  sf_array *ids = sf_array_new(fsi->type->elem, n, L->loc);
  AT(out, fs->offset, sf_array *) = texts; /* owned by out from here */
  AT(out, fsi->offset, sf_array *) = ids;
  for (int i = 0; i < n; i++) {
    const cJSON *it = j_at(a, i);
    char where[48];
    snprintf(where, sizeof where, "added_tokens[%d]", i);
    const char *content = string_member(L, it, where, "content");
    int64_t id = whole_number(L, member(L, it, where, "id"), where);
    if (id >= nvocab)
      load_fail(L, "%s.id %lld is past the vocabulary (%lld tokens)", where, (long long)id,
                (long long)nvocab);
    if (bool_member(L, it, where, "normalized", false) ||
        bool_member(L, it, where, "single_word", false) ||
        bool_member(L, it, where, "lstrip", false) || bool_member(L, it, where, "rstrip", false))
      load_fail(L, "%s (\"%s\") is normalized, single_word, lstrip or rstrip; std.tokenizer "
                "matches added tokens only as written", where, content);
    ((sf_str **)texts->data)[i] = sf_str_new(content, (int64_t)strlen(content));
    ((int64_t *)ids->data)[i] = id;
  }
}

/* line:column (1-based, column in bytes) of offset in text. */
static void line_col(const char *text, size_t off, int *line, int *col) {
  *line = 1, *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n')
      (*line)++, *col = 1;
    else
      (*col)++;
  }
}

void sf_std_tokenizer_load(void *out, const sf_type *out_type, sf_str *path,
                           const sf_loc *loc) {
  layout_of(out_type, loc); /* the fields are of the kinds written below */
  loader L = {sf__str_data(path), loc, NULL, NULL};
  L.text = sf_read_file(path, loc);
  const char *text = sf__str_data(L.text), *end = NULL;
  size_t len = (size_t)sf__str_len(L.text);
  char err[256];
  if (!sf__cjson_load(err, sizeof err))
    load_fail(&L, "%s", err);
  L.root = sf__cjson_parse(text, len, &end);
  if (!L.root) {
    int line, col;
    line_col(text, end && end >= text && end <= text + len ? (size_t)(end - text) : len, &line,
             &col);
    load_fail(&L, "%d:%d: malformed JSON", line, col);
  }
  if (!j_object(L.root))
    load_fail(&L, "the top level is not a JSON object");
  const cJSON *model = member(&L, L.root, "the file", "model");
  const char *mtype = string_member(&L, model, "model", "type");
  if (strcmp(mtype, "WordPiece"))
    load_fail(&L, "model.type is \"%s\"; std.tokenizer reads WordPiece models only", mtype);
  const cJSON *pre = j_get(L.root, "pre_tokenizer");
  if (!pre || !j_object(pre) ||
      strcmp(string_member(&L, pre, "pre_tokenizer", "type"), "BertPreTokenizer"))
    load_fail(&L, "pre_tokenizer is not BertPreTokenizer, the only one std.tokenizer reads");
  const cJSON *vocab = member(&L, model, "model", "vocab");
  if (!j_object(vocab))
    load_fail(&L, "model.vocab is not an object of token: id");
  int64_t n = j_size(vocab);
  if (n == 0)
    load_fail(&L, "model.vocab is empty");
  const sf_field *fv = field_named(out_type, "vocab", loc);
  sf_array *v = sf_array_new(fv->type->elem, n, loc);
  AT(out, fv->offset, sf_array *) = v; /* owned by out: a later failure frees it with out */
  sf_str **slots = v->data;
  for (const cJSON *it = vocab->child; it; it = it->next) {
    char what[96];
    snprintf(what, sizeof what, "model.vocab[\"%.40s\"]", it->string);
    int64_t id = whole_number(&L, it, what);
    if (id >= n)
      load_fail(&L, "%s = %lld: the ids must be 0..%lld, one per token", what, (long long)id,
                (long long)n - 1);
    if (slots[id])
      load_fail(&L, "%s = %lld: id %lld is taken twice", what, (long long)id, (long long)id);
    slots[id] = sf_str_new(it->string, (int64_t)strlen(it->string));
  }
  int64_t unk = token_id(&L, vocab, string_member(&L, model, "model", "unk_token"), "model.unk_token");
  const cJSON *pm = j_get(model, "continuing_subword_prefix");
  const char *prefix = pm && j_string(pm) ? pm->valuestring : "##";
  const cJSON *mc = j_get(model, "max_input_chars_per_word");
  int64_t max_chars = mc ? whole_number(&L, mc, "model.max_input_chars_per_word") : 100;
  const char *cls, *sep;
  load_post(&L, &cls, &sep);
  int64_t cls_id = token_id(&L, vocab, cls, "the post-processor's first token");
  int64_t sep_id = token_id(&L, vocab, sep, "the post-processor's separator");
  /* The padding token: the file's padding.pad_token, else [PAD], else 0. */
  int64_t pad_id = 0;
  const cJSON *pad = j_get(L.root, "padding");
  const cJSON *pt = pad ? j_get(pad, "pad_id") : NULL;
  if (pt && j_number(pt))
    pad_id = whole_number(&L, pt, "padding.pad_id");
  else if (j_get(vocab, "[PAD]"))
    pad_id = token_id(&L, vocab, "[PAD]", "[PAD]");
  if (pad_id >= n)
    load_fail(&L, "padding.pad_id %lld is past the vocabulary", (long long)pad_id);
  load_normalizer(&L, out, out_type);
  load_added(&L, out, n, field_named(out_type, "special", loc),
             field_named(out_type, "special_ids", loc));
  set_field(out, out_type, "unk_id", &unk, 8, loc);
  set_field(out, out_type, "cls_id", &cls_id, 8, loc);
  set_field(out, out_type, "sep_id", &sep_id, 8, loc);
  set_field(out, out_type, "pad_id", &pad_id, 8, loc);
  set_field(out, out_type, "max_word_chars", &max_chars, 8, loc);
  sf_str *ps = sf_str_new(prefix, (int64_t)strlen(prefix));
  set_field(out, out_type, "prefix", &ps, sizeof ps, loc);
  sf_retain(path);
  set_field(out, out_type, "path", &path, sizeof path, loc);
  sf__cjson_delete(L.root);
  sf_release(L.text);
}
