/*
 * map.c — map<K, V>: a hash table that keeps insertion order.
 *
 * Key design choice: the layout of CPython's compact dict.  Entries live in
 * one array in the order they were inserted ({hash, key, value}, a fixed
 * stride), and a separate power-of-two index of int32 slots, probed
 * linearly, points into it.  Iteration (keys(), values(), printing,
 * serialization) walks the entry array, so it is in insertion order for
 * free, and removal only marks an entry dead (hash 0) and its index slot a
 * tombstone, so the order of the rest stays.  The hash of every entry is
 * stored, so growing the table re-indexes without hashing a string again:
 * a string key is hashed once per insert and once per lookup, and no
 * lookup allocates.
 *
 * Keys are str, i64, i32 or bool (the compiler refuses the rest), stored in
 * an 8-byte slot: the sf_str pointer (retained) or the integer, zero padded.
 * Values are stored as their type's bytes (value descriptor size), so a
 * slot pointer can be handed to generated code, which loads and stores
 * through it like a struct field.  A slot pointer stays valid until the
 * next insertion into the same map.
 */
#include <inttypes.h>
#include <string.h>

#include "core.h"

enum { SLOT_EMPTY = -1, SLOT_DEAD = -2 };
#define KEY_OFF 8   /* entry: u64 hash, 8-byte key, value */
#define VAL_OFF 16

/* ---------------------------------------------------------- hashing */

static inline uint64_t mix(uint64_t a, uint64_t b) {
  __uint128_t r = (__uint128_t)a * b;
  return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t rd64(const char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static inline uint64_t rd32(const char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* A multiply-fold hash over 16-byte blocks (the construction of wyhash):
 * every input bit reaches every output bit through the 128-bit products,
 * and a word costs one multiplication. */
static uint64_t hash_bytes(const char *p, size_t n) {
  const uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull,
                 k2 = 0x8ebc6af09c88c6e3ull;
  uint64_t seed = k2 ^ (uint64_t)n;
  size_t left = n;
  while (left > 16) {
    seed = mix(rd64(p) ^ k0, rd64(p + 8) ^ seed);
    p += 16;
    left -= 16;
  }
  uint64_t a, b;
  if (left >= 8) { /* 8..16: two words, overlapping */
    a = rd64(p);
    b = rd64(p + left - 8);
  } else if (left >= 4) {
    a = rd32(p);
    b = rd32(p + left - 4);
  } else if (left > 0) {
    const unsigned char *u = (const unsigned char *)p;
    a = ((uint64_t)u[0] << 16) | ((uint64_t)u[left >> 1] << 8) | u[left - 1];
    b = 0;
  } else {
    a = b = 0;
  }
  return mix(k1 ^ (uint64_t)n, mix(a ^ k0, b ^ seed));
}

/* The splitmix64 finaliser: integer keys that differ in one bit land far
 * apart, so sequential ids do not cluster under linear probing. */
static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static const sf_type *key_type(const sf_map *m) { return m->type->fields[0].type; }
static const sf_type *val_type(const sf_map *m) { return m->type->elem; }

/* The 8-byte key slot of a key given as its value's bytes. */
static uint64_t key_bits(const sf_map *m, const void *key) {
  uint64_t k = 0;
  memcpy(&k, key, (size_t)key_type(m)->size);
  return k;
}

/* Never 0: a hash of 0 marks a removed entry. */
static uint64_t hash_key(const sf_map *m, uint64_t k) {
  uint64_t h;
  if (key_type(m)->kind == SF_STR) {
    const sf_str *s = (const sf_str *)(uintptr_t)k;
    h = hash_bytes(sf__str_data(s), (size_t)sf__str_len(s));
  } else {
    h = hash_u64(k);
  }
  return h ? h : 1;
}

static bool key_eq(const sf_map *m, uint64_t a, uint64_t b) {
  if (a == b)
    return true;
  if (key_type(m)->kind != SF_STR)
    return false;
  const sf_str *x = (const sf_str *)(uintptr_t)a, *y = (const sf_str *)(uintptr_t)b;
  int64_t n = sf__str_len(x);
  return n == sf__str_len(y) && memcmp(sf__str_data(x), sf__str_data(y), (size_t)n) == 0;
}

/* ---------------------------------------------------------- entries */

static char *entry(const sf_map *m, int64_t i) { return m->entries + i * (int64_t)m->stride; }
static uint64_t entry_hash(const char *e) { return *(const uint64_t *)e; }
static uint64_t entry_key(const char *e) { return *(const uint64_t *)(e + KEY_OFF); }
static void *entry_val(char *e) { return e + VAL_OFF; }

sf_map *sf_map_new(const sf_type *map_type) {
  sf_map *m = sf_alloc(sizeof *m);
  int32_t vsize = map_type->elem->size;
  *m = (sf_map){.hdr = {1, SF_OBJ_MAP, 0}, .type = map_type,
                .stride = (int32_t)(VAL_OFF + ((vsize + 7) & ~7))};
  return m;
}

int64_t sf_map_len(sf_map *m) { return m ? m->len : 0; }

/* Finds key k of hash h: its entry index, or -1 with *slot the index slot
 * an insertion would take (the first tombstone met, else the empty end). */
static int64_t find(const sf_map *m, uint64_t h, uint64_t k, uint64_t *slot) {
  if (!m->index) {
    *slot = 0;
    return -1;
  }
  uint64_t i = h & m->mask, first_dead = UINT64_MAX;
  for (;;) {
    int32_t ix = m->index[i];
    if (ix == SLOT_EMPTY) {
      *slot = first_dead != UINT64_MAX ? first_dead : i;
      return -1;
    }
    if (ix == SLOT_DEAD) {
      if (first_dead == UINT64_MAX)
        first_dead = i;
    } else {
      const char *e = entry(m, ix);
      if (entry_hash(e) == h && key_eq(m, entry_key(e), k))
        return ix;
    }
    i = (i + 1) & m->mask;
  }
}

/* Rebuilds the index for room for cap entries, dropping removed entries
 * from the entry array first (so the order of the live ones stays). */
static void rebuild(sf_map *m, int64_t cap) {
  if (cap > INT32_MAX / 2)
    sf_runtime_error(NULL, "map of more than %d entries", INT32_MAX / 2);
  int64_t live = 0;
  for (int64_t i = 0; i < m->used; i++) {
    char *e = entry(m, i);
    if (!entry_hash(e))
      continue;
    if (live != i)
      memcpy(entry(m, live), e, (size_t)m->stride);
    live++;
  }
  m->used = live;
  if (cap != m->cap) {
    m->entries = sf__realloc(m->entries, (size_t)cap * (size_t)m->stride);
    m->cap = cap;
  }
  uint64_t size = 8;
  while (size < (uint64_t)cap * 2)
    size *= 2;
  sf_free(m->index);
  m->index = sf__alloc_n(size, sizeof(int32_t));
  memset(m->index, 0xff, size * sizeof(int32_t)); /* SLOT_EMPTY */
  m->mask = size - 1;
  for (int64_t i = 0; i < m->used; i++) {
    uint64_t j = entry_hash(entry(m, i)) & m->mask;
    while (m->index[j] != SLOT_EMPTY)
      j = (j + 1) & m->mask;
    m->index[j] = (int32_t)i;
  }
}

/* Appends a new entry for key k (not present) and returns its value slot,
 * zero-filled; the key's reference is retained. */
static void *insert(sf_map *m, uint64_t h, uint64_t k, uint64_t slot) {
  if (m->used == m->cap) {
    /* Many removed entries: compact in place; else double. */
    int64_t cap = m->len * 2 < m->cap ? m->cap : (m->cap ? m->cap * 2 : 8);
    rebuild(m, cap);
    find(m, h, k, &slot);
  }
  int64_t ix = m->used++;
  char *e = entry(m, ix);
  memcpy(e, &h, 8);
  memcpy(e + KEY_OFF, &k, 8);
  memset(e + VAL_OFF, 0, (size_t)(m->stride - VAL_OFF));
  if (key_type(m)->kind == SF_STR)
    sf_retain((void *)(uintptr_t)k);
  m->index[slot] = (int32_t)ix;
  m->len++;
  return entry_val(e);
}

/* "the key "the"" / "the key 42", for errors. */
static void describe_key(const sf_map *m, uint64_t k, char *buf, size_t n) {
  const sf_type *kt = key_type(m);
  switch (kt->kind) {
  case SF_STR: {
    const sf_str *s = (const sf_str *)(uintptr_t)k;
    sf__quote(sf__str_data(s), (size_t)sf__str_len(s), 60, buf, n);
    return;
  }
  case SF_BOOL: snprintf(buf, n, "%s", (k & 0xff) ? "true" : "false"); return;
  case SF_I32: snprintf(buf, n, "%" PRId32, (int32_t)(uint32_t)k); return;
  default: snprintf(buf, n, "%" PRId64, (int64_t)k); return;
  }
}

void *sf_map_at(sf_map *m, const void *key, const sf_loc *loc) {
  if (m) {
    uint64_t k = key_bits(m, key), slot;
    int64_t ix = find(m, hash_key(m, k), k, &slot);
    if (ix >= 0)
      return entry_val(entry(m, ix));
    char kb[96];
    describe_key(m, k, kb, sizeof kb);
    sf_runtime_error(loc, "key %s not found in %s", kb, m->type->name ? m->type->name : "map");
  }
  sf_runtime_error(loc, "key not found in an empty map");
}

void *sf_map_put(sf_map *m, const void *key, const sf_loc *loc) {
  if (!m)
    sf_runtime_error(loc, "assignment into a map that was never made");
  uint64_t k = key_bits(m, key), slot;
  uint64_t h = hash_key(m, k);
  int64_t ix = find(m, h, k, &slot);
  if (ix >= 0)
    return entry_val(entry(m, ix));
  return insert(m, h, k, slot);
}

const void *sf_map_get(sf_map *m, const void *key, const void *dflt) {
  if (!m)
    return dflt;
  uint64_t k = key_bits(m, key), slot;
  int64_t ix = find(m, hash_key(m, k), k, &slot);
  return ix >= 0 ? entry_val(entry(m, ix)) : dflt;
}

bool sf_map_has(sf_map *m, const void *key) {
  if (!m)
    return false;
  uint64_t k = key_bits(m, key), slot;
  return find(m, hash_key(m, k), k, &slot) >= 0;
}

bool sf_map_remove(sf_map *m, const void *key) {
  if (!m || !m->len)
    return false;
  uint64_t k = key_bits(m, key);
  uint64_t h = hash_key(m, k);
  uint64_t i = h & m->mask;
  for (;; i = (i + 1) & m->mask) {
    int32_t ix = m->index[i];
    if (ix == SLOT_EMPTY)
      return false;
    if (ix == SLOT_DEAD)
      continue;
    char *e = entry(m, ix);
    if (entry_hash(e) != h || !key_eq(m, entry_key(e), k))
      continue;
    m->index[i] = SLOT_DEAD;
    memset(e, 0, 8); /* hash 0: removed */
    if (key_type(m)->kind == SF_STR)
      sf_release((void *)(uintptr_t)entry_key(e));
    sf_value_release(val_type(m), entry_val(e));
    /* The entry stays counted in `used` until the next rebuild: every
     * tombstone of the index then has its dead entry, so the index never
     * fills up with tombstones (it has twice the entries' room). */
    m->len--;
    return true;
  }
}

/* The keys or values in insertion order, as a new array (references
 * retained). */
static sf_array *column(sf_map *m, bool keys) {
  const sf_type *t = keys ? key_type(m) : val_type(m);
  sf_array *a = sf_array_new(t, m->len, NULL);
  bool refs = sf__type_has_refs(t);
  int64_t j = 0;
  for (int64_t i = 0; i < m->used; i++) {
    char *e = entry(m, i);
    if (!entry_hash(e))
      continue;
    void *dst = sf__array_at(a, j++);
    memcpy(dst, keys ? e + KEY_OFF : entry_val(e), (size_t)t->size);
    if (refs)
      sf_value_retain(t, dst);
  }
  return a;
}

sf_array *sf_map_keys(sf_map *m, const sf_loc *loc) {
  if (!m)
    sf_runtime_error(loc, "keys() of a map that was never made");
  return column(m, true);
}

sf_array *sf_map_values(sf_map *m, const sf_loc *loc) {
  if (!m)
    sf_runtime_error(loc, "values() of a map that was never made");
  return column(m, false);
}

/* ---------------------------------------------------------- internals */

bool sf__map_next(const sf_map *m, int64_t *pos, const void **key, void **val) {
  for (; m && *pos < m->used; (*pos)++) {
    char *e = entry(m, *pos);
    if (!entry_hash(e))
      continue;
    *key = e + KEY_OFF;
    *val = entry_val(e);
    (*pos)++;
    return true;
  }
  return false;
}

void sf__map_destroy(sf_map *m) {
  const sf_type *vt = val_type(m);
  bool kref = key_type(m)->kind == SF_STR, vref = sf__type_has_refs(vt);
  for (int64_t i = 0; (kref || vref) && i < m->used; i++) {
    char *e = entry(m, i);
    if (!entry_hash(e))
      continue;
    if (kref)
      sf_release((void *)(uintptr_t)entry_key(e));
    if (vref)
      sf_value_release(vt, entry_val(e));
  }
  sf_free(m->entries);
  sf_free(m->index);
  sf_free(m);
}
