/*
 * json.c — JSON to and from sflow values: typed, through the values' type
 * descriptors (a struct is an object with its field names), and dynamic,
 * through stdlib's `Json` struct for shapes not known in advance; JSON
 * Lines of either.
 *
 * Key design choice: parsing is cJSON's (RFC 8259, a nesting limit of
 * 1000 so hostile input cannot exhaust the stack), loaded with dlopen on
 * first use so that programs that never read JSON still need only libc on
 * a node (docs/cluster.md, "What a node needs").  The input is checked to
 * be UTF-8 without NUL bytes before cJSON sees it, since cJSON checks
 * neither.  Writing is done here, straight from the descriptors into one
 * buffer: floats in the shortest form that reads back (Python's repr), so
 * Python's json reads exactly the values written, and no tree is built.
 *
 * cJSON keeps a number only as a double, which rounds an integer of 2^53
 * or more, so after the parse every number node gets its literal text back
 * (attach_literals): an i64 field and a Json number of any size then read
 * and write back exactly.  Limit: a string's \u0000 ends it (cJSON's C
 * strings).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>

#include "data.h"

/* ------------------------------------------------------------ loading */

static struct {
  cJSON *(*parse)(const char *, size_t, const char **, cJSON_bool);
  void (*del)(cJSON *);
  char err[256];
} cj;
static pthread_once_t cj_once = PTHREAD_ONCE_INIT;

static void cj_load(void) {
  void *h = dlopen("libcjson.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(cj.err, sizeof cj.err, "JSON needs libcjson.so.1, which cannot be loaded (%s): "
             "install the libcjson1 package", dlerror());
    return;
  }
  cj.parse = (cJSON * (*)(const char *, size_t, const char **, cJSON_bool))
      dlsym(h, "cJSON_ParseWithLengthOpts");
  cj.del = (void (*)(cJSON *))dlsym(h, "cJSON_Delete");
  if (!cj.parse || !cj.del)
    snprintf(cj.err, sizeof cj.err, "libcjson.so.1 lacks cJSON_ParseWithLengthOpts "
             "(cJSON 1.7.13 or newer is needed)");
}

bool sf__cjson_load(char *err, size_t errlen) {
  pthread_once(&cj_once, cj_load);
  if (cj.parse && cj.del)
    return true;
  snprintf(err, errlen, "%s", cj.err);
  return false;
}

cJSON *sf__cjson_parse(const char *text, size_t len, const char **end) {
  return cj.parse(text, len, end, false);
}

void sf__cjson_delete(cJSON *j) {
  if (j)
    cj.del(j);
}

/* ------------------------------------------------------------ decoding */

typedef struct dec {
  const char *name;
  char *err;
  size_t errlen;
  char path[512]; /* "$.items[3].price", cut when deeper */
  size_t plen;
  /* Offsets of the Json struct's fields (dynamic decoding). */
  const sf_type *jt;
  int32_t off_kind, off_flag, off_number, off_text, off_items, off_keys;
  const sf_type *items_t, *keys_t;
} dec;

static const char *jkind(const cJSON *j) {
  switch (j->type & 0xFF) {
  case cJSON_False:
  case cJSON_True: return "a bool";
  case cJSON_NULL: return "null";
  case cJSON_Number: return "a number";
  case cJSON_String: return "a string";
  case cJSON_Array: return "an array";
  case cJSON_Object: return "an object";
  default: return "something else";
  }
}

__attribute__((format(printf, 2, 3))) static bool derr(dec *d, const char *fmt, ...) {
  int n = snprintf(d->err, d->errlen, "%s: %s: ", d->name, d->path);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < d->errlen)
    vsnprintf(d->err + n, d->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

/* Appends a path step; returns the length to restore. */
static size_t push_key(dec *d, const char *key) {
  size_t old = d->plen;
  int n = snprintf(d->path + d->plen, sizeof d->path - d->plen, ".%s", key);
  if (n > 0)
    d->plen = d->plen + (size_t)n < sizeof d->path ? d->plen + (size_t)n : sizeof d->path - 1;
  return old;
}
static size_t push_index(dec *d, int64_t i) {
  size_t old = d->plen;
  int n = snprintf(d->path + d->plen, sizeof d->path - d->plen, "[%" PRId64 "]", i);
  if (n > 0)
    d->plen = d->plen + (size_t)n < sizeof d->path ? d->plen + (size_t)n : sizeof d->path - 1;
  return old;
}
static void pop(dec *d, size_t old) {
  d->plen = old;
  d->path[old] = 0;
}

static int64_t count_children(const cJSON *j) {
  int64_t n = 0;
  for (const cJSON *c = j->child; c; c = c->next)
    n++;
  return n;
}

static sf_str *cstr(const char *s) { return sf_str_new(s ? s : "", s ? (int64_t)strlen(s) : 0); }

/* ------------------------------------------------ number literals */

/* The next number token of JSON text in [p, end), or NULL; *n its length.
 * The text has parsed, so strings close and a number is a run of its
 * characters starting with '-' or a digit. */
static const char *next_number(const char *p, const char *end, size_t *n) {
  while (p < end) {
    char c = *p;
    if (c == '"') {
      for (p++; p < end && *p != '"'; p++)
        if (*p == '\\')
          p++;
      p++;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const char *s = p;
      while (p < end && (isdigit((unsigned char)*p) || strchr("+-.eE", *p)))
        p++;
      *n = (size_t)(p - s);
      return s;
    } else if (isalpha((unsigned char)c)) {
      while (p < end && isalpha((unsigned char)*p))
        p++;
    } else {
      p++;
    }
  }
  return NULL;
}

/* Gives each number node of the tree at j (and its siblings) its literal:
 * the numbers of the text, in order, are the number nodes in pre-order.
 * The literal stays in the text: valuestring points at it (unused for a
 * number; cJSON_IsReference makes cJSON_Delete leave it alone) and
 * valueint holds its length. */
static void attach_literals(cJSON *j, const char **p, const char *end) {
  for (; j; j = j->next) {
    if ((j->type & 0xFF) == cJSON_Number) {
      size_t n = 0;
      const char *s = next_number(*p, end, &n);
      if (s && n < 400) {
        j->valuestring = (char *)s;
        j->valueint = (int)n;
        j->type |= cJSON_IsReference;
        *p = s + n;
      }
    }
    attach_literals(j->child, p, end);
  }
}

/* A number node's literal as an exact integer: 1 with *out set, 0 when it
 * is not all digits (a fraction, an exponent, no literal), -1 when it is
 * beyond i64. */
static int literal_int(const cJSON *j, int64_t *out) {
  const char *s = j->valuestring;
  int n = j->valueint;
  if (!s || n <= 0)
    return 0;
  bool neg = s[0] == '-';
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, acc = 0;
  bool over = false;
  if (n == neg)
    return 0;
  for (int i = neg; i < n; i++) {
    if (!isdigit((unsigned char)s[i]))
      return 0;
    unsigned dig = (unsigned)(s[i] - '0');
    if (acc > (limit - dig) / 10)
      over = true;
    else
      acc = acc * 10 + dig;
  }
  if (over)
    return -1;
  *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
  return 1;
}

/* One JSON value into a value of type t at out (zero-filled; written
 * owned, so on failure the caller releases whatever got written). */
static bool dec_typed(dec *d, const cJSON *j, const sf_type *t, void *out) {
  int jt = j->type & 0xFF;
  switch (t->kind) {
  case SF_BOOL:
    if (jt != cJSON_True && jt != cJSON_False)
      return derr(d, "expected bool, found %s", jkind(j));
    *(bool *)out = jt == cJSON_True;
    return true;
  case SF_I32:
  case SF_I64: {
    if (jt != cJSON_Number)
      return derr(d, "expected %s, found %s", t->kind == SF_I32 ? "i32" : "i64", jkind(j));
    int64_t iv;
    int lit = literal_int(j, &iv);
    if (lit < 0 || (lit > 0 && t->kind == SF_I32 && (iv < INT32_MIN || iv > INT32_MAX)))
      return derr(d, "%.*s is out of range for %s", j->valueint, j->valuestring,
                  t->kind == SF_I32 ? "i32" : "i64");
    if (lit > 0) {
      if (t->kind == SF_I32)
        *(int32_t *)out = (int32_t)iv;
      else
        *(int64_t *)out = iv;
      return true;
    }
    /* A fraction or exponent (3.0, 1e3): the double must be integral. */
    double v = j->valuedouble;
    char num[SF__FLOAT_BUF];
    sf__fmt_f64_repr(v, num);
    if (v != floor(v))
      return derr(d, "expected an integer, found %s", num);
    if (t->kind == SF_I32) {
      if (v < INT32_MIN || v > INT32_MAX)
        return derr(d, "%s is out of range for i32", num);
      *(int32_t *)out = (int32_t)v;
    } else {
      if (fabs(v) >= 9007199254740992.0)
        return derr(d, "%s is 2^53 or more written with a fraction or exponent, which "
                    "reads as an f64 and is not exact; write the integer's digits", num);
      *(int64_t *)out = (int64_t)v;
    }
    return true;
  }
  case SF_F32:
  case SF_F64:
    if (jt != cJSON_Number)
      return derr(d, "expected %s, found %s", t->kind == SF_F32 ? "f32" : "f64", jkind(j));
    if (t->kind == SF_F32)
      *(float *)out = (float)j->valuedouble;
    else
      *(double *)out = j->valuedouble;
    return true;
  case SF_STR:
    if (jt != cJSON_String)
      return derr(d, "expected str, found %s", jkind(j));
    *(sf_str **)out = cstr(j->valuestring);
    return true;
  case SF_ARRAY: {
    if (jt != cJSON_Array)
      return derr(d, "expected an array (%s), found %s", t->name ? t->name : "[]", jkind(j));
    sf_array *a = sf_array_new(t->elem, count_children(j), NULL);
    *(sf_array **)out = a;
    int64_t i = 0;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
      size_t old = push_index(d, i);
      if (!dec_typed(d, c, t->elem, sf__array_at(a, i)))
        return false;
      pop(d, old);
    }
    return true;
  }
  case SF_STRUCT: {
    if (jt != cJSON_Object)
      return derr(d, "expected an object (%s), found %s", t->name ? t->name : "struct",
                  jkind(j));
    for (int32_t f = 0; f < t->nfields; f++) {
      const sf_field *fd = &t->fields[f];
      const cJSON *c = j->child;
      while (c && (!c->string || strcmp(c->string, fd->name)))
        c = c->next;
      if (!c)
        return derr(d, "missing field \"%s\" (of %s)", fd->name, t->name ? t->name : "struct");
      size_t old = push_key(d, fd->name);
      if (!dec_typed(d, c, fd->type, (char *)out + fd->offset))
        return false;
      pop(d, old);
    }
    return true;
  }
  default:
    return derr(d, "a %s cannot be read from JSON", t->name ? t->name : "value of this type");
  }
}

/* The byte offset of the Json struct's field `name`; sf__field reports a
 * stdlib/runtime mismatch. */
static int32_t json_off(const sf_type *jt, const char *name, int kind, const sf_loc *loc) {
  for (int32_t i = 0; i < jt->nfields; i++)
    if (!strcmp(jt->fields[i].name, name) && jt->fields[i].type->kind == kind)
      return jt->fields[i].offset;
  char dummy[1];
  sf__field(jt, dummy, name, kind, loc); /* does not return */
  return 0;
}

/* The dynamic Json struct: kind, flag, number, text, items, keys. */
static void json_fields(dec *d, const sf_type *jt, const sf_loc *loc) {
  d->jt = jt;
  for (int32_t i = 0; i < jt->nfields; i++) {
    const sf_field *f = &jt->fields[i];
    if (!strcmp(f->name, "items"))
      d->items_t = f->type;
    if (!strcmp(f->name, "keys"))
      d->keys_t = f->type;
  }
  d->off_kind = json_off(jt, "kind", SF_STR, loc);
  d->off_flag = json_off(jt, "flag", SF_BOOL, loc);
  d->off_number = json_off(jt, "number", SF_F64, loc);
  d->off_text = json_off(jt, "text", SF_STR, loc);
  d->off_items = json_off(jt, "items", SF_ARRAY, loc);
  d->off_keys = json_off(jt, "keys", SF_ARRAY, loc);
}

static sf_str *kind_str(const char *k) { return sf_str_new(k, (int64_t)strlen(k)); }

static void dec_dynamic(dec *d, const cJSON *j, void *out) {
  char *o = out;
  int jt = j->type & 0xFF;
  const char *kind = "null";
  switch (jt) {
  case cJSON_False:
  case cJSON_True:
    kind = "bool";
    *(bool *)(o + d->off_flag) = jt == cJSON_True;
    break;
  case cJSON_Number: {
    kind = "number";
    *(double *)(o + d->off_number) = j->valuedouble;
    /* An integer an f64 does not hold keeps its digits in text, which the
     * writer puts back while number still matches them. */
    int64_t iv;
    if (fabs(j->valuedouble) >= 9007199254740992.0 && literal_int(j, &iv) != 0)
      *(sf_str **)(o + d->off_text) = sf_str_new(j->valuestring, j->valueint);
    break;
  }
  case cJSON_String:
    kind = "string";
    *(sf_str **)(o + d->off_text) = cstr(j->valuestring);
    break;
  case cJSON_Array:
  case cJSON_Object: {
    kind = jt == cJSON_Array ? "array" : "object";
    int64_t n = count_children(j), i = 0;
    sf_array *items = sf_array_new(d->items_t->elem, n, NULL);
    sf_array *keys = sf_array_new(d->keys_t->elem, jt == cJSON_Object ? n : 0, NULL);
    *(sf_array **)(o + d->off_items) = items;
    *(sf_array **)(o + d->off_keys) = keys;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
      if (jt == cJSON_Object)
        ((sf_str **)keys->data)[i] = cstr(c->string);
      dec_dynamic(d, c, sf__array_at(items, i));
    }
    break;
  }
  default:
    break;
  }
  *(sf_str **)(o + d->off_kind) = kind_str(kind);
}

/* The text checks cJSON does not make, then cJSON's parse; NULL with err
 * set on failure. */
static cJSON *parse_text(const char *text, size_t len, const char *name, int64_t line0,
                         char *err, size_t errlen) {
  if (!sf__cjson_load(err, errlen))
    return NULL;
  int64_t line, col;
  size_t ok = sf__utf8_valid_prefix(text, len);
  const char *nul = memchr(text, 0, ok);
  if (nul || ok < len) {
    size_t at = nul ? (size_t)(nul - text) : ok;
    sf__line_col(text, at, &line, &col);
    snprintf(err, errlen, "%s:%" PRId64 ":%" PRId64 ": %s (is this a JSON file?)", name,
             line + line0, col, nul ? "a NUL byte" : "invalid UTF-8");
    return NULL;
  }
  /* cJSON wants the terminating NUL inside the length to reject trailing
   * garbage; every caller's text has one. */
  const char *end = NULL;
  cJSON *j = cj.parse(text, len + 1, &end, 1);
  if (!j) {
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    sf__line_col(text, at, &line, &col);
    const char *what = at >= len ? "unexpected end of JSON (truncated?)" : "invalid JSON";
    char q[80];
    sf__quote(text + at, at < len ? (len - at < 20 ? len - at : 20) : 0, 20, q, sizeof q);
    snprintf(err, errlen, "%s:%" PRId64 ":%" PRId64 ": %s%s%s", name, line + line0, col, what,
             at < len ? " at " : "", at < len ? q : "");
    return NULL;
  }
  const char *p = text;
  attach_literals(j, &p, text + len);
  return j;
}

bool sf__json_decode(const char *text, size_t len, const char *name, const sf_type *t,
                     bool dynamic, void *out, char *err, size_t errlen) {
  cJSON *j = parse_text(text, len, name, 0, err, errlen);
  if (!j)
    return false;
  dec d = {.name = name, .err = err, .errlen = errlen, .path = "$", .plen = 1};
  bool ok = true;
  if (dynamic) {
    json_fields(&d, t, NULL);
    dec_dynamic(&d, j, out);
  } else {
    ok = dec_typed(&d, j, t, out);
    if (!ok) {
      sf_value_release(t, out);
      memset(out, 0, (size_t)t->size);
    }
  }
  cj.del(j);
  return ok;
}

void sf_std_data_from_json(void *out, const sf_type *t, sf_str *text, sf_str *name,
                           const sf_type *t_again, const sf_loc *loc) {
  (void)t_again; /* a generic extern's T, which t already is */
  char err[SF__ERROR_MAX - 128];
  if (!sf__json_decode(sf__str_data(text), (size_t)sf__str_len(text), sf__str_data(name), t,
                       false, out, err, sizeof err))
    sf_runtime_error(loc, "%s", err);
}

void sf_std_data_parse_json(void *out, const sf_type *json_type, sf_str *text, sf_str *name,
                            const sf_loc *loc) {
  char err[SF__ERROR_MAX - 128];
  json_fields(&(dec){0}, json_type, loc); /* a mismatch is reported at loc */
  if (!sf__json_decode(sf__str_data(text), (size_t)sf__str_len(text), sf__str_data(name),
                       json_type, true, out, err, sizeof err))
    sf_runtime_error(loc, "%s", err);
}

void sf_std_data_read_json(void *out, const sf_type *json_type, sf_str *path,
                           const sf_loc *loc) {
  sf__view v;
  sf__view_open_or_fail(&v, path, loc);
  char err[SF__ERROR_MAX - 128];
  json_fields(&(dec){0}, json_type, loc);
  bool ok = sf__json_decode(v.data, v.len, sf__str_data(path), json_type, true, out, err,
                            sizeof err);
  sf__view_close(&v);
  if (!ok)
    sf_runtime_error(loc, "%s", err);
}

/* JSON Lines: each non-blank line one value, into a Json of kind "array"
 * (its items are the lines' values). */
void sf_std_data_jsonl_read(void *out, const sf_type *json_type, sf_str *path,
                            const sf_loc *loc) {
  sf__view v;
  sf__view_open_or_fail(&v, path, loc);
  dec d = {.name = sf__str_data(path), .path = "$", .plen = 1};
  json_fields(&d, json_type, loc);
  char err[SF__ERROR_MAX - 128];
  /* Count lines first so the array is made once. */
  int64_t n = 0;
  for (const char *p = v.data, *e = v.data + v.len; p < e;) {
    const char *nl = memchr(p, '\n', (size_t)(e - p));
    const char *le = nl ? nl : e;
    for (const char *q = p; q < le; q++)
      if (*q != ' ' && *q != '\t' && *q != '\r') {
        n++;
        break;
      }
    p = le + 1;
  }
  sf_array *items = sf_array_new(d.items_t->elem, n, loc);
  char *o = out;
  *(sf_str **)(o + d.off_kind) = kind_str("array");
  *(sf_array **)(o + d.off_items) = items;
  *(sf_array **)(o + d.off_keys) = sf_array_new(d.keys_t->elem, 0, loc);
  int64_t i = 0, line = 0;
  sf__buf lb;
  sf__buf_init(&lb, NULL, 0);
  for (const char *p = v.data, *e = v.data + v.len; p < e; line++) {
    const char *nl = memchr(p, '\n', (size_t)(e - p));
    const char *le = nl ? nl : e;
    bool blank = true;
    for (const char *q = p; q < le && blank; q++)
      blank = *q == ' ' || *q == '\t' || *q == '\r';
    if (!blank) {
      /* cJSON needs a NUL after the text: the line is copied (reused). */
      lb.len = 0;
      sf__buf_put(&lb, p, (size_t)(le - p));
      sf__buf_put(&lb, "", 1);
      cJSON *j = parse_text(lb.data, (size_t)(le - p), sf__str_data(path), line, err, sizeof err);
      if (!j) {
        sf__buf_free(&lb);
        sf__view_close(&v);
        sf_runtime_error(loc, "%s", err);
      }
      dec_dynamic(&d, j, sf__array_at(items, i++));
      cj.del(j);
    }
    p = le + 1;
  }
  sf__buf_free(&lb);
  sf__view_close(&v);
}

/* ------------------------------------------------------------ encoding */

typedef struct enc {
  sf__buf b;
  char path[512];
  size_t plen;
  bool dynamic;
  const sf_loc *loc;
  /* Set by sf__json_encode: an error returns there with the message in
   * err instead of raising (the serve layer answers 500 for one value of a
   * batch and goes on with the others). */
  jmp_buf *jb;
  char *err;
  size_t errlen;
} enc;

_Noreturn static void eerr(enc *e, const char *what) {
  char msg[700];
  snprintf(msg, sizeof msg, "to_json: %s: %s", e->path, what);
  sf__buf_free(&e->b);
  if (e->jb) {
    snprintf(e->err, e->errlen, "%s", msg);
    longjmp(*e->jb, 1);
  }
  sf_runtime_error(e->loc, "%s", msg);
}

static size_t epush(enc *e, const char *key, int64_t index) {
  size_t old = e->plen;
  int n = key ? snprintf(e->path + old, sizeof e->path - old, ".%s", key)
              : snprintf(e->path + old, sizeof e->path - old, "[%" PRId64 "]", index);
  if (n > 0)
    e->plen = old + (size_t)n < sizeof e->path ? old + (size_t)n : sizeof e->path - 1;
  return old;
}
static void epop(enc *e, size_t old) {
  e->plen = old;
  e->path[old] = 0;
}

static void put_json_string(enc *e, const char *s, size_t n) {
  if (sf__utf8_valid_prefix(s, n) < n)
    eerr(e, "a string that is not valid UTF-8");
  sf__buf_json_str(&e->b, s, n);
}

static void put_float(enc *e, double v, bool f32) {
  if (!isfinite(v))
    eerr(e, isnan(v) ? "NaN has no JSON form" : "an infinity has no JSON form");
  char buf[SF__FLOAT_BUF];
  int n = f32 ? sf__fmt_f32_repr((float)v, buf) : sf__fmt_f64_repr(v, buf);
  sf__buf_put(&e->b, buf, (size_t)n);
}

static void enc_dynamic(enc *e, const sf_type *t, const void *p);

static void enc_typed(enc *e, const sf_type *t, const void *p) {
  char buf[32];
  switch (t->kind) {
  case SF_BOOL:
    if (*(const bool *)p)
      sf__buf_put(&e->b, "true", 4);
    else
      sf__buf_put(&e->b, "false", 5);
    return;
  case SF_I32:
    sf__buf_put(&e->b, buf, (size_t)snprintf(buf, sizeof buf, "%d", *(const int32_t *)p));
    return;
  case SF_I64:
    sf__buf_put(&e->b, buf,
                (size_t)snprintf(buf, sizeof buf, "%" PRId64, *(const int64_t *)p));
    return;
  case SF_F32: put_float(e, *(const float *)p, true); return;
  case SF_F64: put_float(e, *(const double *)p, false); return;
  case SF_STR: {
    const sf_str *s = *(sf_str *const *)p;
    put_json_string(e, sf__str_data(s), (size_t)sf__str_len(s));
    return;
  }
  case SF_ARRAY: {
    sf_array *a = *(sf_array *const *)p;
    sf__buf_put(&e->b, "[", 1);
    if (a) {
      sf_array_host(a);
      for (int64_t i = 0; i < a->len; i++) {
        if (i)
          sf__buf_put(&e->b, ", ", 2);
        size_t old = epush(e, NULL, i);
        enc_typed(e, a->elem, sf__array_at(a, i));
        epop(e, old);
      }
    }
    sf__buf_put(&e->b, "]", 1);
    return;
  }
  case SF_STRUCT:
    if (e->dynamic) {
      enc_dynamic(e, t, p);
      return;
    }
    sf__buf_put(&e->b, "{", 1);
    for (int32_t f = 0; f < t->nfields; f++) {
      if (f)
        sf__buf_put(&e->b, ", ", 2);
      put_json_string(e, t->fields[f].name, strlen(t->fields[f].name));
      sf__buf_put(&e->b, ": ", 2);
      size_t old = epush(e, t->fields[f].name, 0);
      enc_typed(e, t->fields[f].type, (const char *)p + t->fields[f].offset);
      epop(e, old);
    }
    sf__buf_put(&e->b, "}", 1);
    return;
  default:
    eerr(e, "a future, actor or group has no JSON form");
  }
}

/* Does text hold the digits of an integer that reads as x?  (A Json
 * number read from an integer beyond 2^53 keeps them there.) */
static bool exact_digits(const sf_str *text, double x) {
  int64_t n = sf__str_len(text);
  if (n == 0 || n > 400)
    return false;
  const char *s = text->data;
  for (int64_t i = s[0] == '-'; i < n; i++)
    if (!isdigit((unsigned char)s[i]))
      return false;
  return n > (s[0] == '-') && strtod(s, NULL) == x;
}

/* A Json value: written by its kind. */
static void enc_dynamic(enc *e, const sf_type *t, const void *p) {
  void *v = (void *)p;
  sf_str *kind = *(sf_str **)sf__field(t, v, "kind", SF_STR, e->loc);
  const char *k = sf__str_data(kind);
  if (!strcmp(k, "null") || !strcmp(k, "")) {
    sf__buf_put(&e->b, "null", 4);
  } else if (!strcmp(k, "bool")) {
    enc_typed(e, &sf_type_bool, sf__field(t, v, "flag", SF_BOOL, e->loc));
  } else if (!strcmp(k, "number")) {
    /* An integral number is written as an integer, so a value read from
     * JSON as 3 is written back as 3 (Python reads an int), not 3.0. */
    double x = *(double *)sf__field(t, v, "number", SF_F64, e->loc);
    sf_str *digits = *(sf_str **)sf__field(t, v, "text", SF_STR, e->loc);
    if (exact_digits(digits, x)) {
      sf__buf_put(&e->b, digits->data, (size_t)digits->len);
    } else if (x == floor(x) && fabs(x) <= 9007199254740992.0 && !(x == 0 && signbit(x))) {
      char buf[32];
      sf__buf_put(&e->b, buf, (size_t)snprintf(buf, sizeof buf, "%" PRId64, (int64_t)x));
    } else {
      put_float(e, x, false);
    }
  } else if (!strcmp(k, "string")) {
    sf_str *s = *(sf_str **)sf__field(t, v, "text", SF_STR, e->loc);
    put_json_string(e, sf__str_data(s), (size_t)sf__str_len(s));
  } else if (!strcmp(k, "array") || !strcmp(k, "object")) {
    bool obj = k[0] == 'o';
    sf_array *items = *(sf_array **)sf__field(t, v, "items", SF_ARRAY, e->loc);
    sf_array *keys = *(sf_array **)sf__field(t, v, "keys", SF_ARRAY, e->loc);
    int64_t n = items ? items->len : 0;
    if (obj && (keys ? keys->len : 0) != n)
      eerr(e, "an object's keys and items differ in length");
    sf__buf_put(&e->b, obj ? "{" : "[", 1);
    for (int64_t i = 0; i < n; i++) {
      if (i)
        sf__buf_put(&e->b, ", ", 2);
      size_t old;
      if (obj) {
        sf_str *key = ((sf_str **)keys->data)[i];
        put_json_string(e, sf__str_data(key), (size_t)sf__str_len(key));
        sf__buf_put(&e->b, ": ", 2);
        old = epush(e, sf__str_data(key), 0);
      } else {
        old = epush(e, NULL, i);
      }
      enc_dynamic(e, items->elem, sf__array_at(items, i));
      epop(e, old);
    }
    sf__buf_put(&e->b, obj ? "}" : "]", 1);
  } else {
    char msg[160];
    snprintf(msg, sizeof msg, "a Json of kind \"%.40s\" (null, bool, number, string, array, "
             "object)", k);
    eerr(e, msg);
  }
}

static sf_str *encode(const void *value, const sf_type *t, bool dynamic, const sf_loc *loc) {
  enc e = {.path = "$", .plen = 1, .dynamic = dynamic, .loc = loc};
  sf__buf_init(&e.b, NULL, 0);
  if (dynamic)
    enc_dynamic(&e, t, value);
  else
    enc_typed(&e, t, value);
  sf_str *s = sf_str_new(e.b.data ? e.b.data : "", (int64_t)e.b.len);
  sf__buf_free(&e.b);
  return s;
}

char *sf__json_encode(const void *value, const sf_type *t, size_t *len, char *err,
                      size_t errlen) {
  jmp_buf jb;
  /* volatile: read after a longjmp back here. */
  enc *volatile ep = sf_alloc(sizeof(enc));
  memset(ep, 0, sizeof *ep);
  ep->path[0] = '$';
  ep->plen = 1;
  ep->jb = &jb;
  ep->err = err;
  ep->errlen = errlen;
  sf__buf_init(&ep->b, NULL, 0);
  if (setjmp(jb)) {
    sf_free(ep); /* eerr freed the buffer */
    return NULL;
  }
  enc_typed(ep, t, value);
  sf__buf_put(&ep->b, "", 1); /* a NUL after the text, not counted */
  char *out = ep->b.data;
  *len = ep->b.len - 1;
  sf_free(ep);
  return out;
}

sf_str *sf_std_data_to_json(const void *value, const sf_type *t, const sf_type *t_again,
                            const sf_loc *loc) {
  (void)t_again; /* a generic extern's T, which t already is */
  return encode(value, t, false, loc);
}

sf_str *sf_std_data_dump_json(const void *json, const sf_type *json_type, const sf_loc *loc) {
  return encode(json, json_type, true, loc);
}

void sf_std_data_write_json(sf_str *path, const void *json, const sf_type *json_type,
                            const sf_loc *loc) {
  sf_str *s = encode(json, json_type, true, loc);
  sf__write_or_fail(path, sf__str_data(s), (size_t)sf__str_len(s), sf_release, s, loc);
}

void sf_std_data_write_jsonl(sf_str *path, sf_array *values, const sf_loc *loc) {
  /* One buffer for all lines: an error while encoding frees it. */
  enc e = {.path = "$", .plen = 1, .dynamic = true, .loc = loc};
  sf__buf_init(&e.b, NULL, 0);
  int64_t n = values ? values->len : 0;
  for (int64_t i = 0; i < n; i++) {
    size_t old = epush(&e, NULL, i);
    enc_dynamic(&e, values->elem, sf__array_at(values, i));
    epop(&e, old);
    sf__buf_put(&e.b, "\n", 1);
  }
  sf__write_or_fail(path, e.b.data ? e.b.data : "", e.b.len, (void (*)(void *))sf__buf_free, &e.b,
                    loc);
}
