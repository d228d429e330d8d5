/*
 * serial.c — values to bytes and back, for checkpoints, the journal and
 * the network.
 *
 * Key design choice: one serializer driven by the type descriptors the
 * compiler emits for every task's arguments and result and every actor's
 * state, instead of one generated function per type.  The compiler
 * guarantees a descriptor for each of them, so "the compiler generates the
 * serializers" holds in the form that keeps the executable small and the
 * format in one place.  Arrays of numbers travel as one block of bytes.
 *
 * Format (little-endian, as every supported host): bool 1 byte, i32/f32 4,
 * i64/f64 8; str = u64 length + bytes; array = u64 length + elements
 * (numeric: raw); struct = its fields in order; map = u64 count + (key,
 * value) pairs in insertion order; a function value = its i64 index into
 * the executable's table (the same in every process running it); a tensor
 * = one byte, 0 for none or 1 followed by the nn layer's bytes for it (its
 * hooks, core.h).  Futures, actor handles and
 * groups have no value outside the process: they are written as a marker
 * and read back as empty (documented; a checkpointed actor that holds
 * handles gets them back unset).
 *
 * The reader checks every length against the bytes left before it
 * allocates, so a corrupt or hostile input fails cleanly.
 */
#include <string.h>

#include "core.h"

void (*sf__tensor_ser)(sf__buf *b, const void *tensor);
bool (*sf__tensor_de)(sf__reader *r, void **out);

void sf__ser_u64(sf__buf *b, uint64_t v) { sf__buf_put(b, (const char *)&v, 8); }

bool sf__de_u64(sf__reader *r, uint64_t *v) {
  if (r->end - r->p < 8)
    return false;
  memcpy(v, r->p, 8);
  r->p += 8;
  return true;
}

static bool is_raw(const sf_type *t) {
  return t->kind == SF_BOOL || t->kind == SF_I32 || t->kind == SF_I64 || t->kind == SF_F32 ||
         t->kind == SF_F64;
}

/* Tensors keep their sharing within one value: an optimizer's params are
 * the model's own tensors, so an actor holding both must get both back as
 * one set of objects from a checkpoint, not as two copies (its steps would
 * then update tensors the model no longer holds).  Each top-level
 * sf__ser_value / sf__de_value call numbers the tensors in the order met;
 * a tensor met again is written as marker 2 and its number.  Other
 * objects are written by value each time they are met, as before. */
static _Thread_local struct {
  int depth;
  int64_t n, cap;
  void **objs;
} shared;

static int64_t shared_find(const void *x) {
  for (int64_t i = 0; i < shared.n; i++)
    if (shared.objs[i] == x)
      return i;
  return -1;
}

static void shared_add(void *x) {
  if (shared.n == shared.cap) {
    shared.cap = shared.cap ? shared.cap * 2 : 16;
    shared.objs = sf__realloc(shared.objs, (size_t)shared.cap * sizeof *shared.objs);
  }
  shared.objs[shared.n++] = x;
}

static void ser_rec(sf__buf *b, const sf_type *t, const void *p);
static bool de_rec(sf__reader *r, const sf_type *t, void *p);

static bool has_tensor(const sf_type *t, int depth) {
  if (!t || depth > 32)
    return false;
  switch (t->kind) {
  case SF_TENSOR: return true;
  case SF_ARRAY: return has_tensor(t->elem, depth + 1);
  case SF_MAP: return has_tensor(t->elem, depth + 1);
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      if (has_tensor(t->fields[i].type, depth + 1))
        return true;
    return false;
  default: return false;
  }
}

bool sf__tensor_made;

void sf__value_detach(const sf_type *t, void *p) {
  if (!__atomic_load_n(&sf__tensor_made, __ATOMIC_RELAXED) || !has_tensor(t, 0) || !sf__tensor_ser)
    return;
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__ser_value(&b, t, p);
  sf_value_release(t, p);
  memset(p, 0, (size_t)t->size);
  sf__reader r = {(const unsigned char *)b.data, (const unsigned char *)b.data + b.len};
  if (!sf__de_value(&r, t, p))
    sf_runtime_error(NULL, "internal error: a value with tensors did not read back");
  sf__buf_free(&b);
}

void sf__ser_value(sf__buf *b, const sf_type *t, const void *p) {
  if (shared.depth++ == 0)
    shared.n = 0;
  ser_rec(b, t, p);
  shared.depth--;
}

bool sf__de_value(sf__reader *r, const sf_type *t, void *p) {
  if (shared.depth++ == 0)
    shared.n = 0;
  bool ok = de_rec(r, t, p);
  shared.depth--;
  return ok;
}

static void ser_rec(sf__buf *b, const sf_type *t, const void *p) {
  switch (t->kind) {
  case SF_VOID:
    return;
  case SF_BOOL: case SF_I32: case SF_I64: case SF_F32: case SF_F64:
    sf__buf_put(b, p, (size_t)t->size);
    return;
  case SF_STR: {
    const sf_str *s = *(sf_str *const *)p;
    uint64_t n = (uint64_t)sf__str_len(s);
    sf__ser_u64(b, n);
    sf__buf_put(b, sf__str_data(s), n);
    return;
  }
  case SF_ARRAY: {
    const sf_array *a = *(sf_array *const *)p;
    if (a)
      sf_array_host((sf_array *)a);
    uint64_t n = a ? (uint64_t)a->len : 0;
    sf__ser_u64(b, n);
    if (!n)
      return;
    if (is_raw(t->elem))
      sf__buf_put(b, a->data, n * (uint64_t)t->elem->size);
    else
      for (uint64_t i = 0; i < n; i++)
        ser_rec(b, t->elem, sf__array_at(a, (int64_t)i));
    return;
  }
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      ser_rec(b, t->fields[i].type, (const char *)p + t->fields[i].offset);
    return;
  case SF_MAP: {
    const sf_map *m = *(sf_map *const *)p;
    sf__ser_u64(b, (uint64_t)sf_map_len((sf_map *)m));
    int64_t pos = 0;
    const void *k;
    void *v;
    while (sf__map_next(m, &pos, &k, &v)) {
      ser_rec(b, t->fields[0].type, k);
      ser_rec(b, t->elem, v);
    }
    return;
  }
  case SF_FN:
    sf__buf_put(b, p, 8);
    return;
  case SF_TENSOR: {
    const void *x = *(void *const *)p;
    if (!x) {
      sf__buf_put(b, "\0", 1);
      return;
    }
    int64_t seen = shared_find(x);
    if (seen >= 0) { /* the same tensor again: a back-reference */
      sf__buf_put(b, "\2", 1);
      sf__ser_u64(b, (uint64_t)seen);
      return;
    }
    shared_add((void *)x);
    sf__buf_put(b, "\1", 1);
    sf__tensor_ser(b, x); /* a tensor exists only once the nn layer installed its hooks */
    return;
  }
  default: /* future, actor, group: a marker */
    sf__buf_put(b, "\0", 1);
    return;
  }
}

/* A map: the pairs are inserted in the order written, so the order comes
 * back.  Each pair takes at least two bytes, which bounds the count before
 * anything is allocated; a key written twice is malformed. */
static bool de_map(sf__reader *r, const sf_type *t, void *p) {
  uint64_t n;
  if (!sf__de_u64(r, &n) || n > (uint64_t)(r->end - r->p) / 2)
    return false;
  sf_map *m = sf_map_new(t);
  *(sf_map **)p = m;
  const sf_type *kt = t->fields[0].type;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t key = 0; /* an sf_str * or the integer */
    if (!de_rec(r, kt, &key))
      return false;
    int64_t before = sf_map_len(m);
    void *slot = sf_map_put(m, &key, NULL);
    sf_value_release(kt, &key); /* the map retained its own */
    if (sf_map_len(m) == before || !de_rec(r, t->elem, slot))
      return false;
  }
  return true;
}

/* Reads into p, which holds zeroes; on failure whatever was read is
 * released again by the caller's sf_value_release on the whole value. */
static bool de_rec(sf__reader *r, const sf_type *t, void *p) {
  switch (t->kind) {
  case SF_VOID:
    return true;
  case SF_BOOL: case SF_I32: case SF_I64: case SF_F32: case SF_F64:
    if (r->end - r->p < t->size)
      return false;
    memcpy(p, r->p, (size_t)t->size);
    r->p += t->size;
    return t->kind != SF_BOOL || *(unsigned char *)p <= 1;
  case SF_STR: {
    uint64_t n;
    if (!sf__de_u64(r, &n) || n > (uint64_t)(r->end - r->p))
      return false;
    *(sf_str **)p = n ? sf_str_new((const char *)r->p, (int64_t)n) : NULL;
    r->p += n;
    return true;
  }
  case SF_ARRAY: {
    uint64_t n;
    if (!sf__de_u64(r, &n))
      return false;
    /* Every element takes at least one byte (raw ones their size). */
    uint64_t min = is_raw(t->elem) ? (uint64_t)t->elem->size : 1;
    if (t->elem->kind == SF_STRUCT && t->elem->nfields == 0)
      min = 0;
    if (min && n > (uint64_t)(r->end - r->p) / min)
      return false;
    if (n > (uint64_t)INT64_MAX / 64)
      return false;
    sf_array *a = sf_array_new(t->elem, (int64_t)n, NULL);
    *(sf_array **)p = a;
    if (is_raw(t->elem)) {
      memcpy(a->data, r->p, n * (uint64_t)t->elem->size);
      r->p += n * (uint64_t)t->elem->size;
      if (t->elem->kind == SF_BOOL)
        for (uint64_t i = 0; i < n; i++)
          if (((unsigned char *)a->data)[i] > 1)
            return false;
      return true;
    }
    for (uint64_t i = 0; i < n; i++)
      if (!de_rec(r, t->elem, sf__array_at(a, (int64_t)i)))
        return false;
    return true;
  }
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      if (!de_rec(r, t->fields[i].type, (char *)p + t->fields[i].offset))
        return false;
    return true;
  case SF_MAP:
    return de_map(r, t, p);
  case SF_FN: {
    int64_t ix;
    if (r->end - r->p < 8)
      return false;
    memcpy(&ix, r->p, 8);
    r->p += 8;
    if (ix < 0 || (ix > 0 && ix >= sf__nfns))
      return false;
    *(int64_t *)p = ix;
    return true;
  }
  case SF_TENSOR: {
    if (r->p >= r->end || *r->p > 2)
      return false;
    unsigned char mark = *r->p++;
    if (mark == 0)
      return true; /* p holds NULL already */
    if (mark == 2) {
      uint64_t ix;
      if (!sf__de_u64(r, &ix) || ix >= (uint64_t)shared.n)
        return false;
      sf_retain(shared.objs[ix]);
      *(void **)p = shared.objs[ix];
      return true;
    }
    if (!sf__tensor_de || !sf__tensor_de(r, (void **)p))
      return false;
    shared_add(*(void **)p);
    return true;
  }
  default:
    if (r->p >= r->end || *r->p != 0)
      return false;
    r->p++;
    return true;
  }
}

/* CRC-32C (Castagnoli), bitwise with a 256-entry table: journal records
 * and checkpoints are checked with it. */
static uint32_t crc_table[256];

__attribute__((constructor)) static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[i] = c;
  }
}

#if defined(__x86_64__)
/* The same CRC with SSE 4.2's crc32 instruction, 8 bytes at a time. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p,
                                                            size_t n) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  while (n--)
    c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
static int have_hw = -1;
#endif

uint32_t sf__crc32c(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
#if defined(__x86_64__)
  if (have_hw < 0)
    have_hw = __builtin_cpu_supports("sse4.2");
  if (have_hw)
    return crc32c_hw(crc, p, n);
#endif
  crc = ~crc;
  while (n--)
    crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}
