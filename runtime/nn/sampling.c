/*
 * sampling.c — std.llm's sampler (stdlib/llm.sflow, "Sampling"; docs/llm.md):
 * the next token from one position's logits, as Hugging Face's generate
 * filters them — temperature, then top-k, then top-p — and one draw.
 *
 * Key design choice: stateless.  The draw for token `step` is counter.h's
 * uniform of (seed, step), never a stream's state, so a seeded request
 * gives the same text every time, on any replica, whatever ran before it.
 * The filters never sort the vocabulary in full unless they must: top-k
 * keeps its k through a heap (select.c's topk order: larger first, ties to
 * the lower index), and top-p takes the most probable 64, 256, 1024, ...
 * tokens in order until their mass reaches top_p.  Probabilities are in
 * double, exp(z - max) over the tokens the earlier filters kept.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


#include "counter.h"
#include "nn.h"

/* The first index of the largest logit. */
static int64_t greedy(const float *x, int64_t v) {
  int64_t b = 0;
  for (int64_t i = 1; i < v; i++)
    if (x[i] > x[b])
      b = i;
  return b;
}

/* (ord[i], e[i]) comes before (ord[j], e[j]): the larger logit, ties to
 * the lower index (select.c's topk order; no NaN reaches here). */
static inline bool first(const float *x, int64_t i, int64_t j) {
  return x[i] > x[j] || (x[i] == x[j] && i < j);
}

static inline void swap2(int64_t *ord, double *e, int64_t a, int64_t b) {
  int64_t t = ord[a];
  ord[a] = ord[b];
  ord[b] = t;
  double u = e[a];
  e[a] = e[b];
  e[b] = u;
}

/* Top-p over the n tokens ord[] with weights e[] (any order): rearranges
 * them so the kept ones come first and returns how many.  Kept: the
 * fewest most probable tokens whose mass reaches need (each token whose
 * mass before it, in order, is < top_p — Hugging Face's rule), at least
 * one.  A quickselect on mass: partition around a pivot, keep the better
 * side whole when it does not reach need, else look inside it; O(n)
 * expected, and only runs of 16 or fewer are sorted. */
static int64_t top_p_keep(const float *x, int64_t *ord, double *e, int64_t n, double need) {
  int64_t lo = 0, hi = n;
  double have = 0;
  while (hi - lo > 16) {
    int64_t mid = lo + (hi - lo) / 2;
    /* median of three to hi - 1 */
    if (first(x, ord[mid], ord[lo]))
      swap2(ord, e, mid, lo);
    if (first(x, ord[hi - 1], ord[lo]))
      swap2(ord, e, hi - 1, lo);
    if (first(x, ord[mid], ord[hi - 1]))
      swap2(ord, e, mid, hi - 1);
    int64_t piv = ord[hi - 1], k = lo;
    double mass = 0;
    for (int64_t i = lo; i < hi - 1; i++)
      if (first(x, ord[i], piv)) {
        mass += e[i];
        swap2(ord, e, i, k++);
      }
    swap2(ord, e, k, hi - 1); /* the pivot after the better side */
    if (have + mass >= need && k > lo) {
      hi = k; /* the kept ones are all on the better side */
    } else {
      have += mass + e[k];
      if (have >= need)
        return k + 1;
      lo = k + 1;
    }
  }
  for (int64_t i = lo + 1; i < hi; i++) /* insertion sort of the last run */
    for (int64_t j = i; j > lo && first(x, ord[j], ord[j - 1]); j--)
      swap2(ord, e, j, j - 1);
  for (int64_t i = lo; i < hi; i++) {
    have += e[i];
    if (have >= need || i + 1 == n)
      return i + 1;
  }
  return hi > 0 ? hi : 1;
}

int64_t sf_std_llm_sample(sf_tensor *logits, const void *sv, const sf_type *st, int64_t step,
                          const sf_loc *loc) {
  void *sm = (void *)sv; /* sf__field reads through a mutable base */
  double temperature = *(double *)sf__field(st, sm, "temperature", SF_F64, loc);
  int64_t top_k = *(int64_t *)sf__field(st, sm, "top_k", SF_I64, loc);
  double top_p = *(double *)sf__field(st, sm, "top_p", SF_F64, loc);
  int64_t seed = *(int64_t *)sf__field(st, sm, "seed", SF_I64, loc);
  sf__t_arg(logits, "sample", loc);
  if (!(temperature >= 0) || isinf(temperature))
    sf_runtime_error(loc, "sample: Sampling.temperature must be >= 0 (0: greedy), not %g",
                     temperature);
  if (top_k < 0)
    sf_runtime_error(loc, "sample: Sampling.top_k must be >= 0 (0: off), not %" PRId64, top_k);
  if (!(top_p > 0 && top_p <= 1))
    sf_runtime_error(loc, "sample: Sampling.top_p must be in (0, 1] (1: off), not %g", top_p);
  if (step < 0)
    sf_runtime_error(loc, "sample: step must be >= 0, not %" PRId64, step);
  int64_t v = logits->numel;
  char sl[SF__SHAPE_BUF];
  if (v == 0 || logits->shape[logits->ndim > 0 ? logits->ndim - 1 : 0] != v)
    sf_runtime_error(loc, "sample: logits must be one position's (vocab) values, not shape %s",
                     SF__SHP(logits, sl));
  sf_tensor *lc = sf__t_contig(logits);
  const float *x = sf__t_data(lc); /* on a GPU: the one read-back of the step */
  for (int64_t i = 0; i < v; i++)
    if (isnan(x[i]) || x[i] == INFINITY) {
      double bad = x[i];
      sf_release(lc);
      sf_runtime_error(loc, "sample: logits[%" PRId64 "] is %g", i, bad);
    }
  if (temperature == 0 || top_k == 1) {
    int64_t t = greedy(x, v);
    sf_release(lc);
    return t;
  }
  /* The kept tokens, in order (by logit when a filter ordered them). */
  int64_t kept = top_k > 0 && top_k < v ? top_k : v;
  int64_t *ord = malloc(sizeof(int64_t) * (size_t)v);
  double *e = malloc(sizeof(double) * (size_t)v);
  if (!ord || !e)
    sf_runtime_error(loc, "sample: out of memory for %" PRId64 " logits", v);
  bool ordered = kept < v;
  if (ordered)
    sf__topk_row(x, v, kept, ord);
  else
    for (int64_t i = 0; i < v; i++)
      ord[i] = i;
  double m = x[greedy(x, v)], s = 0, inv_t = 1.0 / temperature;
  if (m == -INFINITY) {
    free(ord);
    free(e);
    sf_release(lc);
    sf_runtime_error(loc, "sample: every logit is -inf");
  }
  for (int64_t r = 0; r < kept; r++)
    s += e[r] = exp(((double)x[ord[r]] - m) * inv_t);
  if (top_p < 1)
    kept = top_p_keep(x, ord, e, kept, top_p * s);
  s = 0;
  for (int64_t r = 0; r < kept; r++)
    s += e[r];
  double target = sf_ctr_unit((uint64_t)seed, (uint64_t)step, 0) * s, acc = 0;
  int64_t pick = -1, last = ord[0];
  for (int64_t r = 0; r < kept; r++) {
    if (e[r] > 0)
      last = ord[r];
    acc += e[r];
    if (acc > target) {
      pick = ord[r];
      break;
    }
  }
  free(ord);
  free(e);
  sf_release(lc);
  return pick >= 0 ? pick : last;
}

/* ------------------------------------------------------ stop strings */

static sf_str *stop_of(sf_array *stops, int64_t i) { return ((sf_str **)stops->data)[i]; }

int64_t sf_std_llm_stop_at(sf_str *text, sf_array *stops, const sf_loc *loc) {
  (void)loc;
  int64_t best = -1, n = stops ? stops->len : 0;
  for (int64_t i = 0; i < n; i++) {
    sf_str *s = stop_of(stops, i);
    if (!s || s->len == 0 || s->len > text->len)
      continue;
    int64_t end = best < 0 ? text->len - s->len : best - 1; /* only an earlier one matters */
    for (int64_t at = 0; at <= end; at++)
      if (!memcmp(text->data + at, s->data, (size_t)s->len)) {
        best = at;
        break;
      }
  }
  return best;
}

int64_t sf_std_llm_stop_hold(sf_str *text, sf_array *stops, const sf_loc *loc) {
  (void)loc;
  int64_t hold = 0, n = stops ? stops->len : 0;
  for (int64_t i = 0; i < n; i++) {
    sf_str *s = stop_of(stops, i);
    if (!s)
      continue;
    int64_t m = s->len - 1 < text->len ? s->len - 1 : text->len;
    for (; m > hold; m--)
      if (!memcmp(text->data + text->len - m, s->data, (size_t)m)) {
        hold = m;
        break;
      }
  }
  return hold;
}
