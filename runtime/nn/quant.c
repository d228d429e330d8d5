/*
 * quant.c — y = x · Wᵀ with W in a ggml block format (quant.h), read and
 * converted block by block, never expanded into memory.
 *
 * One dot product per (x row, W row), in a fixed order: for Q4_0, Q4_1
 * and Q8_0 each block's 32 products are summed in vector lanes, scaled by
 * the block's d and added to one of two accumulators (even and odd
 * blocks, for two independent dependency chains); Q4_1's offset m and
 * Q4_0's -8 multiply the block's sum of x, which is computed once per x
 * row (so the inner loop is the products alone).  F16, BF16 and F32 rows
 * are converted into a scratch row, then dotted.  The lanes' partial sums
 * are added left to right at the end of the row.
 *
 * The kernel is defined once (QKERNELS) for three vector widths: four
 * lanes (SSE, the x86-64 baseline), eight (compiled for AVX2 and FMA, run
 * where the CPU has both) and sixteen (AVX-512F), through GCC's vector
 * extensions, so each is the same source; tests/robust's default_no_avx
 * rule wants the wide ones in functions named *_avx2 and *_avx512.  The
 * widths sum in different orders (and the wide ones fuse multiply-adds),
 * so they agree to rounding, not bitwise: tests/unit/test_rt_quant.c
 * holds each to the scalar reference and each to itself across thread
 * counts and batch sizes.
 */
#include <stdlib.h>

#include "quant.h"
#include "simd.h"

/* ------------------------------------------------------------ scalars */

/* A block's f16 scale, inline for normal numbers (every scale a
 * quantizer writes but zero), through sf__f16_to_f32 otherwise. */
static inline float f16_at(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  uint32_t exp = (h >> 10) & 0x1f;
  if (__builtin_expect(exp == 0 || exp == 0x1f, 0))
    return sf__f16_to_f32(h);
  uint32_t u = ((uint32_t)(h & 0x8000) << 16) | ((exp + 112) << 23) | ((uint32_t)(h & 0x3ff) << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

bool sf__q_supported(uint32_t t) {
  return t == SF__GGML_F32 || t == SF__GGML_F16 || t == SF__GGML_BF16 || t == SF__GGML_Q4_0 ||
         t == SF__GGML_Q4_1 || t == SF__GGML_Q8_0;
}

void sf__q_dequant_row(const sf__qmat *w, int64_t r, float *out) {
  const uint8_t *p = (const uint8_t *)w->data + (uint64_t)r * w->row_bytes;
  int64_t n = w->cols;
  switch (w->type) {
  case SF__GGML_F32:
    memcpy(out, p, (size_t)n * 4);
    return;
  case SF__GGML_F16:
    for (int64_t j = 0; j < n; j++)
      out[j] = f16_at(p + 2 * j);
    return;
  case SF__GGML_BF16:
    for (int64_t j = 0; j < n; j++) {
      uint16_t h;
      memcpy(&h, p + 2 * j, 2);
      out[j] = sf__bf16_to_f32(h);
    }
    return;
  case SF__GGML_Q8_0:
    for (int64_t b = 0; b < n / 32; b++, p += 34) {
      float d = f16_at(p);
      for (int j = 0; j < 32; j++)
        out[32 * b + j] = (float)(int8_t)p[2 + j] * d;
    }
    return;
  case SF__GGML_Q4_0:
  case SF__GGML_Q4_1: {
    bool q41 = w->type == SF__GGML_Q4_1;
    for (int64_t b = 0; b < n / 32; b++, p += q41 ? 20 : 18) {
      float d = f16_at(p), m = q41 ? f16_at(p + 2) : -8.0f * d;
      const uint8_t *qs = p + (q41 ? 4 : 2);
      for (int j = 0; j < 16; j++) {
        out[32 * b + j] = (float)(qs[j] & 15) * d + m;
        out[32 * b + j + 16] = (float)(qs[j] >> 4) * d + m;
      }
    }
    return;
  }
  }
}

void sf__q_matmul_ref(const sf__qmat *w, const float *x, int64_t n, float *y) {
  float *row = sf_alloc((size_t)w->cols * sizeof(float));
  for (int64_t r = 0; r < w->rows; r++) {
    sf__q_dequant_row(w, r, row);
    for (int64_t i = 0; i < n; i++) {
      const float *xi = x + i * w->cols;
      float s = 0;
      for (int64_t j = 0; j < w->cols; j++)
        s += xi[j] * row[j];
      y[i * w->rows + r] = s;
    }
  }
  sf_free(row);
}

/* ------------------------------------------------------------ kernels */

/* What one product needs: W, x with its per-block sums, y. */
typedef struct {
  const sf__qmat *w;
  const float *x;   /* (n, cols) */
  const float *xs;  /* (n, cols / 32): each block's sum of x, for Q4_0/Q4_1 */
  int64_t n;
  float *y;         /* (n, rows) */
} qjob;

/* Rows [lo, hi) of W against every row of x, with vectors of L lanes of
 * type F (U8/I8: L bytes).  ATTR: the target the width is compiled for. */
#define QKERNELS(SFX, F, U8, I8, L, ATTR)                                                     \
  static ATTR float hsum_##SFX(F v) {                                                         \
    float t[L], s = 0;                                                                        \
    memcpy(t, &v, sizeof t);                                                                  \
    for (int i = 0; i < L; i++)                                                               \
      s += t[i];                                                                              \
    return s;                                                                                 \
  }                                                                                           \
  static ATTR float dot_q8_0_##SFX(const uint8_t *p, const float *x, int64_t nb) {            \
    F acc[2] = {{0}, {0}};                                                                    \
    for (int64_t b = 0; b < nb; b++, p += 34, x += 32) {                                      \
      F s = {0};                                                                              \
      for (int k = 0; k < 32; k += L) {                                                       \
        I8 q;                                                                                 \
        F xv;                                                                                 \
        memcpy(&q, p + 2 + k, L);                                                             \
        memcpy(&xv, x + k, sizeof xv);                                                        \
        s += __builtin_convertvector(q, F) * xv;                                              \
      }                                                                                       \
      acc[b & 1] += s * f16_at(p);                                                            \
    }                                                                                         \
    return hsum_##SFX(acc[0] + acc[1]);                                                       \
  }                                                                                           \
  /* Q4_0 (q41 false: w = (q - 8) d) and Q4_1 (w = q d + m). */                               \
  static ATTR float dot_q4_##SFX(const uint8_t *p, const float *x, const float *xs,           \
                                 int64_t nb, bool q41) {                                      \
    F acc[2] = {{0}, {0}};                                                                    \
    float off = 0;                                                                            \
    int stride = q41 ? 20 : 18, qoff = q41 ? 4 : 2;                                           \
    for (int64_t b = 0; b < nb; b++, p += stride, x += 32) {                                  \
      F s = {0};                                                                              \
      for (int k = 0; k < 16; k += L) {                                                       \
        U8 q;                                                                                 \
        F lo, hi;                                                                             \
        memcpy(&q, p + qoff + k, L);                                                          \
        memcpy(&lo, x + k, sizeof lo);                                                        \
        memcpy(&hi, x + 16 + k, sizeof hi);                                                   \
        s += __builtin_convertvector(q & 15, F) * lo + __builtin_convertvector(q >> 4, F) * hi; \
      }                                                                                       \
      float d = f16_at(p);                                                                    \
      acc[b & 1] += s * d;                                                                    \
      off += (q41 ? f16_at(p + 2) : -8.0f * d) * xs[b];                                       \
    }                                                                                         \
    return hsum_##SFX(acc[0] + acc[1]) + off;                                                 \
  }                                                                                           \
  static ATTR float dot_f32_##SFX(const float *w, const float *x, int64_t n) {                \
    F acc[2] = {{0}, {0}};                                                                    \
    int64_t j = 0;                                                                            \
    for (; j + L <= n; j += L) {                                                              \
      F a, b;                                                                                 \
      memcpy(&a, w + j, sizeof a);                                                            \
      memcpy(&b, x + j, sizeof b);                                                            \
      acc[(j / L) & 1] += a * b;                                                              \
    }                                                                                         \
    float s = hsum_##SFX(acc[0] + acc[1]);                                                    \
    for (; j < n; j++)                                                                        \
      s += w[j] * x[j];                                                                       \
    return s;                                                                                 \
  }                                                                                           \
  static ATTR void rows_##SFX(void *ctx, int64_t lo, int64_t hi) {                            \
    const qjob *J = ctx;                                                                      \
    const sf__qmat *w = J->w;                                                                 \
    int64_t nb = w->cols / 32;                                                                \
    float *tmp = NULL;                                                                        \
    bool blocks = w->type == SF__GGML_Q8_0 || w->type == SF__GGML_Q4_0 ||                     \
                  w->type == SF__GGML_Q4_1;                                                   \
    if (!blocks)                                                                              \
      tmp = sf_alloc((size_t)w->cols * sizeof(float));                                        \
    for (int64_t r = lo; r < hi; r++) {                                                       \
      const uint8_t *p = (const uint8_t *)w->data + (uint64_t)r * w->row_bytes;               \
      if (tmp)                                                                                \
        sf__q_dequant_row(w, r, tmp);                                                         \
      for (int64_t i = 0; i < J->n; i++) {                                                    \
        const float *xi = J->x + i * w->cols;                                                 \
        float v;                                                                              \
        if (w->type == SF__GGML_Q8_0)                                                         \
          v = dot_q8_0_##SFX(p, xi, nb);                                                      \
        else if (blocks)                                                                      \
          v = dot_q4_##SFX(p, xi, J->xs + i * nb, nb, w->type == SF__GGML_Q4_1);              \
        else                                                                                  \
          v = dot_f32_##SFX(tmp, xi, w->cols);                                                \
        J->y[i * w->rows + r] = v;                                                            \
      }                                                                                       \
    }                                                                                         \
    sf_free(tmp);                                                                             \
  }

typedef uint8_t sf__u8x4 __attribute__((vector_size(4)));
typedef int8_t sf__i8x4 __attribute__((vector_size(4)));
QKERNELS(sse, sf__f4, sf__u8x4, sf__i8x4, 4, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef uint8_t sf__u8x8 __attribute__((vector_size(8)));
typedef int8_t sf__i8x8 __attribute__((vector_size(8)));
typedef uint8_t sf__u8x16 __attribute__((vector_size(16)));
typedef int8_t sf__i8x16 __attribute__((vector_size(16)));
#define Q_AVX2 __attribute__((target("avx2,fma")))
#define Q_AVX512 __attribute__((target("avx512f")))
QKERNELS(avx2, sf__f8, sf__u8x8, sf__i8x8, 8, Q_AVX2)
QKERNELS(avx512, sf__f16, sf__u8x16, sf__i8x16, 16, Q_AVX512)
#pragma GCC diagnostic pop
#define HAVE_WIDE 1
#endif

/* ---------------------------------------------------------- dispatch */

typedef void (*rows_fn)(void *, int64_t, int64_t);

static rows_fn pick(const char **name) {
  const char *force = getenv("SFLOW_QUANT_KERNEL");
#ifdef HAVE_WIDE
  bool a512 = __builtin_cpu_supports("avx512f");
  bool a2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (force && !strcmp(force, "sse"))
    a512 = a2 = false;
  else if (force && !strcmp(force, "avx2"))
    a512 = false;
  if (a512) {
    *name = "avx512";
    return rows_avx512;
  }
  if (a2) {
    *name = "avx2";
    return rows_avx2;
  }
#endif
  (void)force;
  *name = "sse";
  return rows_sse;
}

const char *sf__q_kernel(void) {
  const char *name;
  pick(&name);
  return name;
}

/* Below this many weight bytes a product runs on the caller: waking a
 * helper costs 10-50 us on a shared VM, about what 256 KB of Q4_1 takes
 * on one core.  Chunks are at least 64 KB of weights. */
#define Q_PAR_MIN_BYTES (256 << 10)
#define Q_GRAIN_BYTES (64 << 10)

void sf__q_matmul(const sf__qmat *w, const float *x, int64_t n, float *y) {
  const char *name;
  rows_fn fn = pick(&name);
  int64_t nb = w->cols / 32;
  float *xs = NULL;
  if (w->type == SF__GGML_Q4_0 || w->type == SF__GGML_Q4_1) {
    xs = sf_alloc((size_t)(n * nb > 0 ? n * nb : 1) * sizeof(float));
    for (int64_t i = 0; i < n * nb; i++) {
      const float *b = x + i * 32;
      float s = 0;
      for (int j = 0; j < 32; j++)
        s += b[j];
      xs[i] = s;
    }
  }
  qjob J = {w, x, xs, n, y};
  uint64_t bytes = (uint64_t)w->rows * w->row_bytes * (uint64_t)(n > 0 ? n : 1);
  if (bytes >= Q_PAR_MIN_BYTES && w->rows > 1) {
    int64_t grain = (int64_t)(Q_GRAIN_BYTES / (w->row_bytes * (uint64_t)(n > 0 ? n : 1)));
    sf__parallel_for(w->rows, grain > 0 ? grain : 1, fn, &J);
  } else if (w->rows > 0) {
    fn(&J, 0, w->rows);
  }
  sf_free(xs);
}
