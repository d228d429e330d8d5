/*
 * bpe_load.c — makes a std.tokenizer Bpe value (bpe.c encodes with it)
 * from the two places a byte-level BPE tokenizer is stored:
 *
 *   a GGUF file's metadata (llama.cpp's convert_hf_to_gguf writes it):
 *     tokenizer.ggml.model "gpt2", tokenizer.ggml.pre ("smollm", "gpt2"),
 *     tokenizer.ggml.tokens / merges (string arrays), token_type (i32
 *     array: 3 is a control token, matched as one id in text, 4 a
 *     user-defined one, matched too), bos/eos/padding_token_id, and
 *     tokenizer.chat_template;
 *   a Hugging Face tokenizer.json: model.type "BPE" with model.vocab and
 *     model.merges (as "a b" strings or, since tokenizers 0.20, [a, b]
 *     pairs), added_tokens, and a pre_tokenizer that is ByteLevel alone
 *     ("gpt2") or Sequence[Digits(individual_digits), ByteLevel] ("smollm").
 *
 * Key design choice: both end in the same plain value, validated here
 * field by field with errors naming the file and the key, so the encoder
 * never meets a malformed one it did not build itself.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"
#include "gguf.h"
#include "tokenizer.h"

typedef struct {
  const char *path;
  const sf_loc *loc;
  sf__gguf *g;
  cJSON *root;
  sf_str *text;
} loader;

static void load_fail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void load_fail(loader *L, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (L->g)
    sf__gguf_close(L->g);
  if (L->root)
    sf__cjson_delete(L->root);
  sf_release(L->text);
  sf_runtime_error(L->loc, "tokenizer: %s: %s", L->path, msg);
}

#define FIELD(out, t, name, kind, T) (*(T *)sf__field((t), (out), (name), (kind), loc))

static void set_str(void *out, const sf_type *t, const char *name, const char *s, size_t n,
                    const sf_loc *loc) {
  sf_str **slot = &FIELD(out, t, name, SF_STR, sf_str *);
  sf_release(*slot);
  *slot = sf_str_new(s, (int64_t)n);
}

static sf_array *set_array(void *out, const sf_type *t, const char *name, const sf_type *elem,
                           int64_t n, const sf_loc *loc) {
  sf_array **slot = &FIELD(out, t, name, SF_ARRAY, sf_array *);
  sf_release(*slot);
  *slot = sf_array_new(elem, n, loc);
  return *slot;
}

/* -------------------------------------------------------------- GGUF */

static const sf__gguf_kv *need(loader *L, const char *key, uint32_t type, uint32_t elem) {
  const sf__gguf_kv *kv = sf__gguf_find(L->g, key);
  if (!kv)
    load_fail(L, "metadata \"%s\" is missing (not a GGUF file with a tokenizer?)", key);
  if (kv->type != type || (type == SF__GGUF_ARR && kv->elem != elem))
    load_fail(L, "metadata \"%s\" is a %s%s%s, not a %s%s%s", key, sf__gguf_vtype_name(kv->type),
              kv->type == SF__GGUF_ARR ? " of " : "",
              kv->type == SF__GGUF_ARR ? sf__gguf_vtype_name(kv->elem) : "",
              sf__gguf_vtype_name(type), type == SF__GGUF_ARR ? " of " : "",
              type == SF__GGUF_ARR ? sf__gguf_vtype_name(elem) : "");
  return kv;
}

static sf_array *gguf_strings(loader *L, const sf__gguf_kv *kv) {
  sf_array *a = sf_array_new(&sf_type_str, (int64_t)kv->n, L->loc);
  const char *p = kv->val;
  for (uint64_t i = 0; i < kv->n; i++) {
    uint64_t n;
    const char *s = sf__gguf_next_str(&p, &n);
    ((sf_str **)a->data)[i] = sf_str_new(s, (int64_t)n);
  }
  return a;
}

static int64_t gguf_id(loader *L, const char *key, int64_t ntok, int64_t dflt) {
  const sf__gguf_kv *kv = sf__gguf_find(L->g, key);
  int64_t v;
  if (!kv)
    return dflt;
  if (!sf__gguf_int(kv, &v))
    load_fail(L, "metadata \"%s\" is a %s, not an integer", key, sf__gguf_vtype_name(kv->type));
  if (v < 0 || v >= ntok)
    load_fail(L, "metadata \"%s\" is %lld, not an id of the %lld tokens", key, (long long)v,
              (long long)ntok);
  return v;
}

static void str_of(loader *L, const char *key, const char **s, uint64_t *n) {
  const sf__gguf_kv *kv = need(L, key, SF__GGUF_STR, 0);
  const char *p = kv->val;
  *s = sf__gguf_next_str(&p, n);
}

void sf_std_tokenizer_bpe_from_gguf(void *out, const sf_type *out_type, sf_str *path,
                                    const sf_loc *loc) {
  sf__gguf g;
  char err[600];
  loader L = {sf__data_path(path, "read", loc), loc, NULL, NULL, NULL};
  if (!sf__gguf_open(&g, L.path, err, sizeof err))
    sf_runtime_error(loc, "tokenizer: %s", err);
  L.g = &g;
  const char *s;
  uint64_t n;
  str_of(&L, "tokenizer.ggml.model", &s, &n);
  if (n != 4 || memcmp(s, "gpt2", 4))
    load_fail(&L, "metadata \"tokenizer.ggml.model\" is \"%.*s\"; std.tokenizer reads byte-level "
              "BPE (\"gpt2\") only", (int)(n < 60 ? n : 60), s);
  const char *pre = "gpt2";
  uint64_t npre = 4;
  if (sf__gguf_find(&g, "tokenizer.ggml.pre"))
    str_of(&L, "tokenizer.ggml.pre", &pre, &npre);
  if (!(npre == 6 && !memcmp(pre, "smollm", 6)) && !(npre == 4 && !memcmp(pre, "gpt2", 4)) &&
      !(npre == 7 && !memcmp(pre, "default", 7)))
    load_fail(&L, "metadata \"tokenizer.ggml.pre\" is \"%.*s\"; std.tokenizer knows \"smollm\" "
              "and \"gpt2\"", (int)(npre < 60 ? npre : 60), pre);
  const sf__gguf_kv *tk = need(&L, "tokenizer.ggml.tokens", SF__GGUF_ARR, SF__GGUF_STR);
  const sf__gguf_kv *mk = need(&L, "tokenizer.ggml.merges", SF__GGUF_ARR, SF__GGUF_STR);
  if (tk->n == 0 || tk->n > INT32_MAX / 2)
    load_fail(&L, "metadata \"tokenizer.ggml.tokens\" holds %llu tokens", (unsigned long long)tk->n);
  int64_t ntok = (int64_t)tk->n;
  const sf__gguf_kv *tt = sf__gguf_find(&g, "tokenizer.ggml.token_type");
  if (tt && (tt->type != SF__GGUF_ARR || tt->elem != SF__GGUF_I32 || (int64_t)tt->n != ntok))
    load_fail(&L, "metadata \"tokenizer.ggml.token_type\" is not an array of %lld i32",
              (long long)ntok);
  FIELD(out, out_type, "bos_id", SF_I64, int64_t) = gguf_id(&L, "tokenizer.ggml.bos_token_id", ntok, -1);
  FIELD(out, out_type, "eos_id", SF_I64, int64_t) = gguf_id(&L, "tokenizer.ggml.eos_token_id", ntok, -1);
  FIELD(out, out_type, "pad_id", SF_I64, int64_t) = gguf_id(&L, "tokenizer.ggml.padding_token_id", ntok, -1);
  sf_array **slot = &FIELD(out, out_type, "tokens", SF_ARRAY, sf_array *);
  sf_release(*slot);
  *slot = gguf_strings(&L, tk);
  slot = &FIELD(out, out_type, "merges", SF_ARRAY, sf_array *);
  sf_release(*slot);
  *slot = gguf_strings(&L, mk);
  int64_t nsp = 0;
  for (int64_t i = 0; tt && i < ntok; i++) {
    int32_t t;
    memcpy(&t, tt->val + 4 * i, 4);
    nsp += t == 3 || t == 4;
  }
  sf_array *sp = set_array(out, out_type, "special", &sf_type_str, nsp, loc);
  sf_array *spi = set_array(out, out_type, "special_ids", &sf_type_i64, nsp, loc);
  sf_str **tokens = (*(sf_array **)sf__field(out_type, out, "tokens", SF_ARRAY, loc))->data;
  for (int64_t i = 0, k = 0; tt && i < ntok; i++) {
    int32_t t;
    memcpy(&t, tt->val + 4 * i, 4);
    if (t == 3 || t == 4) {
      sf_retain(tokens[i]);
      ((sf_str **)sp->data)[k] = tokens[i];
      ((int64_t *)spi->data)[k++] = i;
    }
  }
  set_str(out, out_type, "pre", pre, npre == 7 ? 4 : npre, loc);
  set_str(out, out_type, "source", L.path, strlen(L.path), loc);
  if (sf__gguf_find(&g, "tokenizer.chat_template")) {
    str_of(&L, "tokenizer.chat_template", &s, &n);
    set_str(out, out_type, "chat_template", s, n, loc);
  } else {
    set_str(out, out_type, "chat_template", "", 0, loc);
  }
  sf__gguf_close(&g);
}

/* --------------------------------------------------- tokenizer.json */

static int jtype(const cJSON *j) { return j ? j->type & 0xff : 0; }

static const cJSON *jget(const cJSON *obj, const char *key) {
  if (!obj || jtype(obj) != cJSON_Object)
    return NULL;
  for (const cJSON *c = obj->child; c; c = c->next)
    if (c->string && !strcmp(c->string, key))
      return c;
  return NULL;
}

static const char *jstr(loader *L, const cJSON *obj, const char *what, const char *key) {
  const cJSON *j = jget(obj, key);
  if (jtype(j) != cJSON_String)
    load_fail(L, "%s.%s is %s", what, key, j ? "not a string" : "missing");
  return j->valuestring;
}

static int64_t jcount(const cJSON *j) {
  int64_t n = 0;
  for (const cJSON *c = j ? j->child : NULL; c; c = c->next)
    n++;
  return n;
}

static bool is_type(const cJSON *j, const char *type) {
  const cJSON *t = jget(j, "type");
  return jtype(t) == cJSON_String && !strcmp(t->valuestring, type);
}

/* "gpt2" or "smollm", from the pre_tokenizer object. */
static const char *json_pre(loader *L, const cJSON *pre) {
  if (is_type(pre, "ByteLevel")) {
    const cJSON *aps = jget(pre, "add_prefix_space");
    if (jtype(aps) == cJSON_True)
      load_fail(L, "pre_tokenizer ByteLevel has add_prefix_space true, which std.tokenizer does not do");
    return "gpt2";
  }
  if (is_type(pre, "Sequence")) {
    const cJSON *ps = jget(pre, "pretokenizers");
    if (jcount(ps) == 2 && is_type(ps->child, "Digits") &&
        jtype(jget(ps->child, "individual_digits")) == cJSON_True &&
        is_type(ps->child->next, "ByteLevel") &&
        jtype(jget(ps->child->next, "add_prefix_space")) != cJSON_True)
      return "smollm";
  }
  load_fail(L, "pre_tokenizer is neither ByteLevel nor Sequence[Digits(individual_digits), "
            "ByteLevel], the two std.tokenizer reads");
}

static int64_t vocab_id(const cJSON *vocab, const char *tok) {
  const cJSON *j = jget(vocab, tok);
  return jtype(j) == cJSON_Number ? (int64_t)j->valuedouble : -1;
}

void sf_std_tokenizer_bpe_load(void *out, const sf_type *out_type, sf_str *path,
                               const sf_loc *loc) {
  loader L = {sf__data_path(path, "read", loc), loc, NULL, NULL, NULL};
  L.text = sf_read_file(path, loc);
  char err[256];
  if (!sf__cjson_load(err, sizeof err))
    load_fail(&L, "%s", err);
  const char *text = sf__str_data(L.text), *end = NULL;
  size_t len = (size_t)sf__str_len(L.text);
  L.root = sf__cjson_parse(text, len, &end);
  if (!L.root) {
    int64_t line, col;
    sf__line_col(text, end && end >= text && end <= text + len ? (size_t)(end - text) : len, &line, &col);
    load_fail(&L, "%lld:%lld: malformed JSON", (long long)line, (long long)col);
  }
  const cJSON *model = jget(L.root, "model");
  if (!model)
    load_fail(&L, "no \"model\" object (not a tokenizer.json?)");
  const char *mtype = jstr(&L, model, "model", "type");
  if (strcmp(mtype, "BPE"))
    load_fail(&L, "model.type is \"%s\"; tokenizer.bpe_load reads BPE models (tokenizer.load "
              "reads WordPiece)", mtype);
  const char *pre = json_pre(&L, jget(L.root, "pre_tokenizer"));
  const cJSON *vocab = jget(model, "vocab"), *merges = jget(model, "merges");
  if (jtype(vocab) != cJSON_Object || jcount(vocab) == 0)
    load_fail(&L, "model.vocab is not an object of token: id");
  if (jtype(merges) != cJSON_Array)
    load_fail(&L, "model.merges is not an array");
  int64_t n = jcount(vocab);
  sf_array *tv = set_array(out, out_type, "tokens", &sf_type_str, n, loc);
  sf_str **slots = tv->data;
  for (const cJSON *it = vocab->child; it; it = it->next) {
    double d = it->valuedouble;
    if (jtype(it) != cJSON_Number || d != (double)(int64_t)d || d < 0 || d >= (double)n)
      load_fail(&L, "model.vocab[\"%.40s\"] is not an id 0..%lld", it->string, (long long)n - 1);
    int64_t id = (int64_t)d;
    if (slots[id])
      load_fail(&L, "model.vocab[\"%.40s\"] = %lld: id %lld is taken twice", it->string,
                (long long)id, (long long)id);
    slots[id] = sf_str_new(it->string, (int64_t)strlen(it->string));
  }
  for (int64_t i = 0; i < n; i++)
    if (!slots[i])
      load_fail(&L, "model.vocab has no token of id %lld: the ids must be 0..%lld", (long long)i,
                (long long)n - 1);
  sf_array *mv = set_array(out, out_type, "merges", &sf_type_str, jcount(merges), loc);
  int64_t r = 0;
  for (const cJSON *m = merges->child; m; m = m->next, r++) {
    if (jtype(m) == cJSON_String) {
      ((sf_str **)mv->data)[r] = sf_str_new(m->valuestring, (int64_t)strlen(m->valuestring));
    } else if (jtype(m) == cJSON_Array && jcount(m) == 2 && jtype(m->child) == cJSON_String &&
               jtype(m->child->next) == cJSON_String) {
      size_t a = strlen(m->child->valuestring), b = strlen(m->child->next->valuestring);
      char *buf = sf_alloc(a + b + 2);
      memcpy(buf, m->child->valuestring, a);
      buf[a] = ' ';
      memcpy(buf + a + 1, m->child->next->valuestring, b);
      ((sf_str **)mv->data)[r] = sf_str_new(buf, (int64_t)(a + b + 1));
      sf_free(buf);
    } else {
      load_fail(&L, "model.merges[%lld] is neither \"a b\" nor [\"a\", \"b\"]", (long long)r);
    }
  }
  /* added tokens: every one is matched in the text (tokenizers splits
   * them out whether special or not); normalized ones are not read. */
  const cJSON *added = jget(L.root, "added_tokens");
  int64_t na = jtype(added) == cJSON_Array ? jcount(added) : 0;
  sf_array *sp = set_array(out, out_type, "special", &sf_type_str, na, loc);
  sf_array *spi = set_array(out, out_type, "special_ids", &sf_type_i64, na, loc);
  int64_t k = 0;
  for (const cJSON *a = na ? added->child : NULL; a; a = a->next, k++) {
    const char *content = jstr(&L, a, "added_tokens[]", "content");
    const cJSON *id = jget(a, "id");
    if (jtype(id) != cJSON_Number || id->valuedouble < 0 || id->valuedouble >= (double)n ||
        !slots[(int64_t)id->valuedouble] || strcmp(slots[(int64_t)id->valuedouble]->data, content))
      load_fail(&L, "added_tokens[%lld] (\"%.40s\"): its id is not the vocabulary's id of it",
                (long long)k, content);
    ((sf_str **)sp->data)[k] = sf_str_new(content, (int64_t)strlen(content));
    ((int64_t *)spi->data)[k] = (int64_t)id->valuedouble;
  }
  /* tokenizer.json names no bos/eos: ChatML's, else GPT-2's. */
  int64_t im_start = vocab_id(vocab, "<|im_start|>"), im_end = vocab_id(vocab, "<|im_end|>");
  int64_t eot = vocab_id(vocab, "<|endoftext|>");
  FIELD(out, out_type, "bos_id", SF_I64, int64_t) = im_start >= 0 ? im_start : eot;
  FIELD(out, out_type, "eos_id", SF_I64, int64_t) = im_end >= 0 ? im_end : eot;
  FIELD(out, out_type, "pad_id", SF_I64, int64_t) = im_end >= 0 ? im_end : eot;
  set_str(out, out_type, "pre", pre, strlen(pre), loc);
  set_str(out, out_type, "source", L.path, strlen(L.path), loc);
  set_str(out, out_type, "chat_template", "", 0, loc);
  sf__cjson_delete(L.root);
  sf_release(L.text);
}
