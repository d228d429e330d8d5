/*
 * quant.c — y = x · Wᵀ with W in a ggml block format (quant.h), read and
 * converted block by block, never expanded into memory.
 *
 * One dot product per (x row, W row), in a fixed order: for Q4_0, Q4_1
 * and Q8_0 each block's 32 products are summed in vector lanes, scaled by
 * the block's d and added to one of two accumulators (even and odd
 * blocks, for two independent dependency chains); Q4_1's offset m and
 * Q4_0's -8 d multiply the block's sum of x, which is computed once per x
 * row (so the inner loop is the products alone), into two scalar sums
 * (even and odd blocks) likewise.  F16, BF16 and F32 rows
 * are converted into a scratch row, then dotted.  The lanes' partial sums
 * are added left to right at the end of the row.
 *
 * The kernel is defined once (QKERNELS) for three vector widths: four
 * lanes (SSE2, the x86-64 baseline), eight (compiled for AVX2 and FMA, run
 * where the CPU has both) and sixteen (AVX-512F), through GCC's vector
 * extensions; only the widening of a block's bytes to floats is written
 * per width with intrinsics (GCC turns __builtin_convertvector of bytes
 * into one extract per lane).  tests/robust's default_no_avx rule wants
 * the wide code in functions named *_avx2 and *_avx512.  The
 * widths sum in different orders (and the wide ones fuse multiply-adds),
 * so they agree to rounding, not bitwise: tests/unit/test_rt_quant.c
 * holds each to the scalar reference and each to itself across thread
 * counts and batch sizes.
 */
#include <immintrin.h>
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
 * type F and that width's block helpers (blk_q8_SFX, blk_q4_SFX).  ATTR:
 * the target the width is compiled for. */
#define QKERNELS(SFX, F, L, ATTR)                                                     \
  static ATTR float hsum_##SFX(F v) {                                                         \
    float t[L], s = 0;                                                                        \
    memcpy(t, &v, sizeof t);                                                                  \
    for (int i = 0; i < L; i++)                                                               \
      s += t[i];                                                                              \
    return s;                                                                                 \
  }                                                                                           \
  static inline __attribute__((always_inline)) ATTR float dot_q4k_##SFX(                      \
      const uint8_t *p, const float *x, const float *xs, int64_t nb, int stride, int qoff,    \
      int q41) {                                                                              \
    F acc0 = {0}, acc1 = {0};                                                                 \
    float off0 = 0, off1 = 0;                                                                 \
    int64_t b = 0;                                                                            \
    for (; b + 2 <= nb; b += 2, p += 2 * stride, x += 64) {                                   \
      float d0 = f16_##SFX(p), d1 = f16_##SFX(p + stride);                                    \
      acc0 += blk_q4_##SFX(p + qoff, x) * d0;                                                 \
      acc1 += blk_q4_##SFX(p + stride + qoff, x + 32) * d1;                                   \
      off0 += (q41 ? f16_##SFX(p + 2) : -8.0f * d0) * xs[b];                                  \
      off1 += (q41 ? f16_##SFX(p + stride + 2) : -8.0f * d1) * xs[b + 1];                     \
    }                                                                                         \
    if (b < nb) {                                                                             \
      float d0 = f16_##SFX(p);                                                                \
      acc0 += blk_q4_##SFX(p + qoff, x) * d0;                                                 \
      off0 += (q41 ? f16_##SFX(p + 2) : -8.0f * d0) * xs[b];                                  \
    }                                                                                         \
    return hsum_##SFX(acc0 + acc1) + (off0 + off1);                                           \
  }                                                                                           \
  /* Two blocks a step, even ones into acc0, odd into acc1, so the two                        \
   * chains of multiply-adds overlap. */                                                      \
  static ATTR float dot_q8_0_##SFX(const uint8_t *p, const float *x, int64_t nb) {            \
    F acc0 = {0}, acc1 = {0};                                                                 \
    int64_t b = 0;                                                                            \
    for (; b + 2 <= nb; b += 2, p += 68, x += 64) {                                           \
      acc0 += blk_q8_##SFX(p + 2, x) * f16_##SFX(p);                                          \
      acc1 += blk_q8_##SFX(p + 36, x + 32) * f16_##SFX(p + 34);                               \
    }                                                                                         \
    if (b < nb)                                                                               \
      acc0 += blk_q8_##SFX(p + 2, x) * f16_##SFX(p);                                          \
    return hsum_##SFX(acc0 + acc1);                                                           \
  }                                                                                           \
  /* Q4_0 (Q41 0: w = (q - 8) d) and Q4_1 (Q41 1: w = q d + m), the                           \
   * offsets times each block's sum of x in two scalar chains. */                             \
  static ATTR float dot_q4_##SFX(const uint8_t *p, const float *x, const float *xs,           \
                                 int64_t nb, bool q41) {                                      \
    return q41 ? dot_q4k_##SFX(p, x, xs, nb, 20, 4, 1) : dot_q4k_##SFX(p, x, xs, nb, 18, 2, 0); \
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

/* The block helpers of each width: the 32 products of one block summed
 * into a vector of lanes (not yet scaled by d).  blk_q8: 32 int8 against
 * x[0..32); blk_q4: 16 bytes of nibbles, low halves against x[0..16),
 * high halves against x[16..32).  Integers widen to 32 bits and convert
 * to float exactly, so every width sums the same products. */

/* SSE2, the baseline: bytes widen by unpacking against zero (or, signed,
 * against their sign). */
static inline sf__f4 cvt4_u8(__m128i v) { /* the low 4 bytes */
  __m128i z = _mm_setzero_si128();
  return (sf__f4)_mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(v, z), z));
}
static inline sf__f4 cvt4_i8(__m128i v) {
  __m128i w = _mm_unpacklo_epi8(v, v), d = _mm_unpacklo_epi16(w, w);
  return (sf__f4)_mm_cvtepi32_ps(_mm_srai_epi32(d, 24));
}
static inline sf__f4 blk_q8_sse(const uint8_t *q, const float *x) {
  sf__f4 s = {0};
  for (int k = 0; k < 32; k += 4) {
    uint32_t b;
    memcpy(&b, q + k, 4);
    s += cvt4_i8(_mm_cvtsi32_si128((int)b)) * sf__ld4(x + k);
  }
  return s;
}
static inline sf__f4 blk_q4_sse(const uint8_t *qs, const float *x) {
  sf__f4 s = {0};
  __m128i m = _mm_set1_epi8(15);
  for (int k = 0; k < 16; k += 4) {
    uint32_t b;
    memcpy(&b, qs + k, 4);
    __m128i v = _mm_cvtsi32_si128((int)b);
    s += cvt4_u8(_mm_and_si128(v, m)) * sf__ld4(x + k) +
         cvt4_u8(_mm_and_si128(_mm_srli_epi16(v, 4), m)) * sf__ld4(x + 16 + k);
  }
  return s;
}
static inline float f16_sse(const uint8_t *p) { return f16_at(p); }
QKERNELS(sse, sf__f4, 4, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
/* The wide kernels convert the scales with F16C's vcvtph2ps, which
 * every CPU with AVX2 or AVX-512F has (checked at dispatch all the same). */
#define Q_AVX2 __attribute__((target("avx2,fma,f16c")))
#define Q_AVX512 __attribute__((target("avx512f,f16c")))
static inline Q_AVX2 float f16_avx2(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
static inline Q_AVX512 float f16_avx512(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
static inline Q_AVX2 sf__f8 blk_q8_avx2(const uint8_t *q, const float *x) {
  __m256 s = _mm256_setzero_ps();
  for (int k = 0; k < 32; k += 8) {
    __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + k))));
    s = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + k), s);
  }
  return (sf__f8)s;
}
static inline Q_AVX2 sf__f8 blk_q4_avx2(const uint8_t *qs, const float *x) {
  __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
  __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), _mm256_loadu_ps(x));
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))),
                      _mm256_loadu_ps(x + 8), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), _mm256_loadu_ps(x + 16), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))),
                      _mm256_loadu_ps(x + 24), s);
  return (sf__f8)s;
}
static inline Q_AVX512 sf__f16 blk_q8_avx512(const uint8_t *q, const float *x) {
  __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
  __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16))));
  return (sf__f16)_mm512_fmadd_ps(b, _mm512_loadu_ps(x + 16), _mm512_mul_ps(a, _mm512_loadu_ps(x)));
}
static inline Q_AVX512 sf__f16 blk_q4_avx512(const uint8_t *qs, const float *x) {
  __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
  __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, m)));
  __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), m)));
  return (sf__f16)_mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x)));
}
QKERNELS(avx2, sf__f8, 8, Q_AVX2)
QKERNELS(avx512, sf__f16, 16, Q_AVX512)
#pragma GCC diagnostic pop
#define HAVE_WIDE 1
#endif

/* ---------------------------------------------------------- dispatch */

typedef void (*rows_fn)(void *, int64_t, int64_t);

static rows_fn pick(const char **name) {
  const char *force = getenv("SFLOW_QUANT_KERNEL");
#ifdef HAVE_WIDE
  bool f16c = __builtin_cpu_supports("f16c");
  bool a512 = __builtin_cpu_supports("avx512f") && f16c;
  bool a2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
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
