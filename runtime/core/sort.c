/*
 * sort.c — sort(xs) and argsort(xs) over arrays of numbers and strings.
 *
 * Key design choice: one stable merge sort of element indices, with the
 * comparison picked once per call from the element kind.  argsort needs
 * stability (equal values keep their order, as numpy's kind="stable" and
 * PyTorch's stable=True), and sort then only gathers the elements in that
 * order, so the two can never disagree.  A merge sort of 8-byte indices
 * costs n log n comparisons and n extra words, whatever the input.
 *
 * Order: numbers ascending, strings bytewise (as `<` compares them); NaN
 * compares greater than every number and equal to itself, so NaNs go last
 * in their original order (numpy's placement); -0.0 and 0.0 are equal.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "core.h"

typedef int (*cmp_fn)(const void *a, const void *b);

/* Floats with NaN last: (a > b) - (a < b) with NaN made the largest. */
#define FLOAT_CMP(name, T)                                          \
  static int name(const void *pa, const void *pb) {                 \
    T a = *(const T *)pa, b = *(const T *)pb;                       \
    bool na = isnan(a), nb = isnan(b);                              \
    if (na || nb)                                                   \
      return (int)na - (int)nb;                                     \
    return (a > b) - (a < b);                                       \
  }
FLOAT_CMP(cmp_f32, float)
FLOAT_CMP(cmp_f64, double)

#define INT_CMP(name, T)                                            \
  static int name(const void *pa, const void *pb) {                 \
    T a = *(const T *)pa, b = *(const T *)pb;                       \
    return (a > b) - (a < b);                                       \
  }
INT_CMP(cmp_i32, int32_t)
INT_CMP(cmp_i64, int64_t)

static int cmp_str(const void *pa, const void *pb) {
  return sf_str_cmp(*(sf_str *const *)pa, *(sf_str *const *)pb);
}

static cmp_fn cmp_of(const sf_type *elem) {
  switch (elem->kind) {
  case SF_I32: return cmp_i32;
  case SF_I64: return cmp_i64;
  case SF_F32: return cmp_f32;
  case SF_F64: return cmp_f64;
  case SF_STR: return cmp_str;
  default: return NULL;
  }
}

/* Merges the sorted runs idx[lo, mid) and idx[mid, hi) through tmp; a tie
 * takes the left run's index first, which is what keeps the sort stable. */
static void merge(const sf_array *a, cmp_fn cmp, int64_t *idx, int64_t *tmp, int64_t lo,
                  int64_t mid, int64_t hi) {
  int64_t i = lo, j = mid, k = lo;
  while (i < mid && j < hi)
    tmp[k++] = cmp(sf__array_at(a, idx[j]), sf__array_at(a, idx[i])) < 0 ? idx[j++] : idx[i++];
  while (i < mid)
    tmp[k++] = idx[i++];
  while (j < hi)
    tmp[k++] = idx[j++];
  memcpy(idx + lo, tmp + lo, (size_t)(hi - lo) * sizeof *idx);
}

/* Bottom-up: insertion-sorted runs of 16, then merges of doubling width,
 * so the depth is bounded without recursion. */
enum { RUN = 16 };

static void sort_indices(const sf_array *a, cmp_fn cmp, int64_t *idx, int64_t *tmp, int64_t n) {
  for (int64_t lo = 0; lo < n; lo += RUN) {
    int64_t hi = lo + RUN < n ? lo + RUN : n;
    for (int64_t i = lo + 1; i < hi; i++) {
      int64_t v = idx[i], j = i;
      while (j > lo && cmp(sf__array_at(a, v), sf__array_at(a, idx[j - 1])) < 0) {
        idx[j] = idx[j - 1];
        j--;
      }
      idx[j] = v;
    }
  }
  for (int64_t w = RUN; w < n; w *= 2)
    for (int64_t lo = 0; lo + w < n; lo += 2 * w)
      merge(a, cmp, idx, tmp, lo, lo + w, lo + 2 * w < n ? lo + 2 * w : n);
}

/* The i64[] of indices that sorts a (owned). */
static sf_array *argsort(const sf_type *elem, sf_array *a, const sf_loc *loc) {
  cmp_fn cmp = cmp_of(elem);
  if (!cmp)
    sf_runtime_error(loc, "cannot sort an array of %s", elem->name ? elem->name : "values");
  int64_t n = a ? a->len : 0;
  sf_array *out = sf_array_new(&sf_type_i64, n, loc);
  if (!n)
    return out;
  sf_array_host(a);
  int64_t *idx = out->data;
  for (int64_t i = 0; i < n; i++)
    idx[i] = i;
  int64_t *tmp = sf__alloc_n((size_t)n, sizeof *tmp);
  sort_indices(a, cmp, idx, tmp, n);
  sf_free(tmp);
  return out;
}

sf_array *sf_array_argsort(const sf_type *elem, sf_array *a, const sf_loc *loc) {
  return argsort(elem, a, loc);
}

sf_array *sf_array_sort(const sf_type *elem, sf_array *a, const sf_loc *loc) {
  sf_array *order = argsort(elem, a, loc);
  int64_t n = order->len;
  sf_array *out = sf_array_new(elem, n, loc);
  size_t size = (size_t)elem->size;
  const int64_t *idx = order->data;
  for (int64_t i = 0; i < n; i++)
    memcpy(sf__array_at(out, i), sf__array_at(a, idx[i]), size);
  if (sf__type_has_refs(elem))
    for (int64_t i = 0; i < n; i++)
      sf_value_retain(elem, sf__array_at(out, i));
  sf_release(order);
  return out;
}
