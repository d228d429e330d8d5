/*
 * array.c — 1-D arrays of any element type.
 *
 * An array is a header plus a separate data block of len * elem->size bytes,
 * laid out exactly as C would lay out the elements, so generated code
 * indexes it inline and the GPU layer can later copy the block as it is.
 * Arrays are created zero-filled: zero is a valid value of every element
 * type (0, 0.0, false, NULL meaning "" or an empty array), which is what the
 * language promises for `zeros_f32(n)` and for fields before `init`.
 *
 * Arrays grow at the end (push, ABI 3): `cap` counts the elements the
 * data block has room for and doubles when a push finds it full, so n
 * pushes cost O(n) copies in all.  Only len elements are ever looked at
 * by anyone else (printing, serialization, the GPU layer), so the spare
 * room is invisible outside this file.
 */
#include <inttypes.h>
#include <string.h>

#include "core.h"

static sf_array *array_alloc(const sf_type *elem, int64_t len, const sf_loc *loc) {
  if (len < 0)
    sf_runtime_error(loc, "negative array length %" PRId64, len);
  size_t size = (size_t)elem->size;
  if (size && (uint64_t)len > (SIZE_MAX / 2) / size)
    sf_runtime_error(loc, "array of %" PRId64 " %s elements is too large", len,
                     elem->name ? elem->name : "");
  sf_array *a = sf_alloc(sizeof *a);
  *a = (sf_array){.hdr = {1, SF_OBJ_ARRAY, 0}, .len = len, .elem = elem, .cap = len};
  a->data = sf_alloc((size_t)len * size);
  return a;
}

sf_array *sf_array_new(const sf_type *elem, int64_t len, const sf_loc *loc) {
  sf_array *a = array_alloc(elem, len, loc);
  memset(a->data, 0, (size_t)len * (size_t)elem->size);
  return a;
}

sf_array *sf__array_new_uninit(const sf_type *elem, int64_t len, const sf_loc *loc) {
  return array_alloc(elem, len, loc);
}

void (*sf__par_hook)(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                     void *ctx);
int32_t (*sf__par_threads_hook)(void);

void sf__par_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                 void *ctx) {
  if (sf__par_hook)
    sf__par_hook(n, grain, fn, ctx);
  else if (n > 0)
    fn(ctx, 0, n);
}

int32_t sf__par_threads(void) { return sf__par_threads_hook ? sf__par_threads_hook() : 1; }

/* A new array holding copies of a[from, from+n), references retained. */
static sf_array *slice_copy(const sf_array *a, int64_t from, int64_t n) {
  sf_array *c = array_alloc(a->elem, n, NULL);
  size_t size = (size_t)a->elem->size;
  if (n > 0)
    memcpy(c->data, sf__array_at(a, from), (size_t)n * size);
  if (sf__type_has_refs(a->elem))
    for (int64_t i = 0; i < n; i++)
      sf_value_retain(a->elem, sf__array_at(c, i));
  return c;
}

sf_array *sf_array_split(sf_array *a, int64_t k, const sf_loc *loc) {
  if (k <= 0)
    sf_runtime_error(loc, "split: the number of chunks must be positive, got %" PRId64, k);
  /* A NULL array is an empty one; its element type is unknown, so its
   * chunks are f32[] (they are empty, the type is never observed). */
  const sf_type *elem = a ? a->elem : &sf_type_f32;
  int64_t len = a ? a->len : 0;
  sf_array *out = sf_array_new(sf__array_type(elem), k, loc);
  int64_t base = len / k, extra = len % k, from = 0;
  for (int64_t i = 0; i < k; i++) {
    int64_t n = base + (i < extra);
    sf_array *chunk = a ? slice_copy(a, from, n) : sf_array_new(elem, 0, loc);
    ((sf_array **)out->data)[i] = chunk;
    from += n;
  }
  return out;
}

/* ------------------------------------------------------------ growing */

/* The array's data, current on the host and the only copy: a device copy
 * (GPU layer) has the old length, so it goes before the host one changes. */
static void host_only(sf_array *a) {
  sf_array_host(a);
  if (a->dev)
    sf__array_dev_free(a);
  a->where = SF__WHERE_HOST;
}

static void grow(sf_array *a, int64_t need, const sf_loc *loc) {
  int64_t cap = a->cap > a->len ? a->cap : a->len;
  if (need <= cap)
    return;
  size_t size = (size_t)a->elem->size;
  int64_t ncap = cap < 4 ? 4 : cap;
  while (ncap < need)
    ncap = ncap > INT64_MAX / 2 ? need : ncap * 2;
  if (size && (uint64_t)ncap > (SIZE_MAX / 2) / size)
    sf_runtime_error(loc, "array of %" PRId64 " %s elements is too large", need,
                     a->elem->name ? a->elem->name : "");
  a->data = sf__realloc(a->data, (size_t)ncap * size);
  a->cap = ncap;
}

void sf_array_push(sf_array *a, void *value, const sf_loc *loc) {
  if (!a)
    sf_runtime_error(loc, "push on an array that was never created");
  host_only(a);
  if (a->len == INT64_MAX)
    sf_runtime_error(loc, "array is too large to grow");
  grow(a, a->len + 1, loc);
  memcpy(sf__array_at(a, a->len), value, (size_t)a->elem->size);
  a->len++;
}

void sf_array_pop(sf_array *a, void *out, const sf_loc *loc) {
  if (!a || a->len == 0)
    sf_runtime_error(loc, "pop from an empty array");
  host_only(a);
  a->len--;
  /* The reference moves to the caller: nothing to retain or release. */
  memcpy(out, sf__array_at(a, a->len), (size_t)a->elem->size);
}

/* ------------------------------------------------------ copies of parts */

sf_array *sf_array_concat(const sf_type *elem, sf_array *a, sf_array *b, const sf_loc *loc) {
  int64_t la = a ? a->len : 0, lb = b ? b->len : 0;
  if (la > INT64_MAX - lb)
    sf_runtime_error(loc, "array is too large to grow");
  sf_array *c = array_alloc(elem, la + lb, loc);
  size_t size = (size_t)elem->size;
  if (la) {
    sf_array_host(a);
    memcpy(c->data, a->data, (size_t)la * size);
  }
  if (lb) {
    sf_array_host(b);
    memcpy((char *)c->data + (size_t)la * size, b->data, (size_t)lb * size);
  }
  if (sf__type_has_refs(elem))
    for (int64_t i = 0; i < la + lb; i++)
      sf_value_retain(elem, sf__array_at(c, i));
  return c;
}

sf_array *sf_array_slice(const sf_type *elem, sf_array *a, int64_t from, int64_t to,
                         const sf_loc *loc) {
  int64_t len = a ? a->len : 0;
  if (from < 0 || to > len || from > to)
    sf_runtime_error(loc, "slice [%" PRId64 "..%" PRId64 "] out of range for length %" PRId64,
                     from, to, len);
  if (from == to)
    return sf_array_new(elem, 0, loc);
  sf_array_host(a);
  return slice_copy(a, from, to - from);
}

_Noreturn void sf_index_fail(int64_t index, int64_t len, const sf_loc *loc) {
  sf_runtime_error(loc, "index %" PRId64 " out of bounds for length %" PRId64, index, len);
}

/* ------------------------------------------------------------ device copies */

void (*sf__array_dev_free)(sf_array *a);
void (*sf__array_to_host)(sf_array *a);

void sf_array_host(sf_array *a) {
  if (a && a->dev && a->where == SF__WHERE_DEVICE && sf__array_to_host)
    sf__array_to_host(a);
}
