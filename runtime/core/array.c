/*
 * array.c — 1-D arrays of any element type.
 *
 * An array is a header plus a separate data block of len * elem->size bytes,
 * laid out exactly as C would lay out the elements, so generated code
 * indexes it inline and the GPU layer can later copy the block as it is.
 * Arrays are created zero-filled: zero is a valid value of every element
 * type (0, 0.0, false, NULL meaning "" or an empty array), which is what the
 * language promises for `zeros_f32(n)` and for fields before `init`.
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
  *a = (sf_array){.hdr = {1, SF_OBJ_ARRAY, 0}, .len = len, .elem = elem};
  a->data = sf_alloc((size_t)len * size);
  return a;
}

sf_array *sf_array_new(const sf_type *elem, int64_t len, const sf_loc *loc) {
  sf_array *a = array_alloc(elem, len, loc);
  memset(a->data, 0, (size_t)len * (size_t)elem->size);
  return a;
}

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
