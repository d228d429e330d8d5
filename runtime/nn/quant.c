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
 * The integer products (below, "integer products") name their AVX-512
 * VNNI code *_vnni_avx512 for the same rule.
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
#include <math.h>
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

/* ------------------------------------------------ integer products */

/*
 * sf__q_matmul_q8: x quantized per 32-block to 8 bits (llama.cpp's Q8_1
 * scheme, with an f32 scale), then integer dot products against the
 * weight's integer blocks.  A block's sum of 32 products is an int32 and
 * exact in every path; the float part is one fixed sequence of IEEE
 * operations (fold, below), so the bits are the same whatever the ISA
 * (AVX-512 VNNI's vpdpbusd, AVX2's vpmaddubsw/vpmaddwd, portable C), the
 * thread count and the batch size.
 *
 * The x side, per 32-block b of a row: amax = max |x_j|, dx = amax / 127,
 * q_j = x_j · 127 / amax rounded to nearest even (0 where amax is 0), and xs = the sum
 * of the x_j in order (f32).  The weight side: Q4_0 and Q4_1 nibbles
 * unpacked to bytes 0..15 (weight j at byte j), Q8_0 bytes as they are.
 */

/* x's blocks, quantized once and read by every weight row. */
struct sf__qx {
  int64_t n, cols, nb;
  const float *x; /* the f32 rows, for types without integer blocks */
  int8_t *q;      /* n × cols */
  float *d, *s;   /* n × nb: each block's scale dx and sum of x */
};

/* Q_BAR(v): v is opaque to the compiler from here, so a product before it
 * is never fused with an addition after it (GCC contracts a * b + c into
 * a fused multiply-add where the target has one, at -std=gnu11). */
#if defined(__x86_64__) || defined(__i386__)
#define Q_BAR(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__)
#define Q_BAR(v) __asm__("" : "+w"(v))
#else
#define Q_BAR(v)                                                                        \
  do {                                                                                  \
    volatile __typeof__(v) q_bar_ = (v);                                                \
    (v) = q_bar_;                                                                       \
  } while (0)
#endif

sf__qx *sf__qx_prep(const float *x, int64_t n, int64_t cols) {
  sf__qx *p = sf_alloc(sizeof *p);
  int64_t nb = cols / 32;
  p->n = n, p->cols = cols, p->nb = nb, p->x = x;
  p->q = sf_alloc((size_t)(n * cols > 0 ? n * cols : 1));
  p->d = sf_alloc(sizeof(float) * (size_t)(n * nb > 0 ? n * nb : 1));
  p->s = sf_alloc(sizeof(float) * (size_t)(n * nb > 0 ? n * nb : 1));
  for (int64_t i = 0; i < n; i++)
    for (int64_t b = 0; b < nb; b++) {
      const float *xb = x + i * cols + 32 * b;
      int8_t *q = p->q + i * cols + 32 * b;
      float amax = 0, s = 0;
      for (int j = 0; j < 32; j++) {
        float a = fabsf(xb[j]);
        amax = a > amax ? a : amax;
        s += xb[j];
      }
      float id = amax > 0 ? 127.0f / amax : 0.0f;
      /* round to nearest, ties to even, by 1.5 · 2^23 (|x · id| <= 127) */
      for (int j = 0; j < 32; j++) {
        float v = xb[j] * id;
        Q_BAR(v);
        q[j] = (int8_t)(int)((v + 12582912.0f) - 12582912.0f);
      }
      p->d[i * nb + b] = amax / 127.0f;
      p->s[i * nb + b] = s;
    }
  return p;
}

void sf__qx_free(sf__qx *p) {
  if (!p)
    return;
  sf_free(p->q), sf_free(p->d), sf_free(p->s), sf_free(p);
}

/* The float part of one output, the same in every path: block b's term
 * t = isum · (dw · dx) + mw · xs (mw: Q4_1's m, Q4_0's -8 dw, Q8_0 none)
 * added to lane b mod 4 of four accumulators, which are then added
 * (a0 + a1) + (a2 + a3).  Never contracted into fused multiply-adds. */
static float fold(const uint8_t *p, uint32_t type, const int32_t *isum, const float *dx,
                  const float *xs, int64_t nb) {
  float a[4] = {0, 0, 0, 0};
  int stride = type == SF__GGML_Q8_0 ? 34 : type == SF__GGML_Q4_1 ? 20 : 18;
  for (int64_t b = 0; b < nb; b++, p += stride) {
    float dw = f16_at(p), dd = dw * dx[b], t = (float)isum[b] * dd;
    Q_BAR(t);
    if (type != SF__GGML_Q8_0) {
      float o = (type == SF__GGML_Q4_1 ? f16_at(p + 2) : -8.0f * dw) * xs[b];
      Q_BAR(o);
      t = t + o;
    }
    a[b & 3] = a[b & 3] + t;
  }
  return (a[0] + a[1]) + (a[2] + a[3]);
}

/* Q4_0/Q4_1 row: nb blocks' nibbles into bytes, weight 32b + j at out[32b + j]. */
static void unpack_q4(const uint8_t *p, int stride, int qoff, int64_t nb, uint8_t *out) {
  for (int64_t b = 0; b < nb; b++, p += stride, out += 32) {
    const uint8_t *qs = p + qoff;
#if defined(__SSE2__)
    __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
    _mm_storeu_si128((__m128i *)out, _mm_and_si128(v, m));
    _mm_storeu_si128((__m128i *)(out + 16), _mm_and_si128(_mm_srli_epi16(v, 4), m));
#else
    for (int j = 0; j < 16; j++) {
      out[j] = qs[j] & 15;
      out[j + 16] = qs[j] >> 4;
    }
#endif
  }
}

/* The integer sums of one weight row against one x row, each ISA:
 * isum_u8: unsigned weight bytes (unpacked nibbles, 32 a block, packed);
 * isum_s8: Q8_0's blocks as stored (34 bytes: f16 d, 32 int8). */
static void isum_u8_scalar(const uint8_t *w, const int8_t *x, int64_t nb, int32_t *out) {
  for (int64_t b = 0; b < nb; b++, w += 32, x += 32) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++)
      s += (int32_t)w[j] * x[j];
    out[b] = s;
  }
}
static void isum_s8_scalar(const uint8_t *p, const int8_t *x, int64_t nb, int32_t *out) {
  for (int64_t b = 0; b < nb; b++, p += 34, x += 32) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++)
      s += (int32_t)(int8_t)p[2 + j] * x[j];
    out[b] = s;
  }
}

#ifdef HAVE_WIDE
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#define Q_VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
/* Four blocks' vectors of eight int32 partial sums to their four totals. */
static inline Q_AVX2 __m128i hsum4_avx2(__m256i a, __m256i b, __m256i c, __m256i d) {
  __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}
static inline Q_AVX2 int32_t hsum1_avx2(__m256i a) {
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  return _mm_cvtsi128_si32(t);
}
static inline Q_AVX2 __m256i dot_u8_avx2(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}
static inline Q_VNNI __m256i dot_u8_vnni_avx512(__m256i w, __m256i x) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
}
/* Signed × signed as |w| × (x with w's sign), the unsigned × signed the
 * instructions take (|w| <= 128, so no pair saturates 16 bits). */
#define ISUM_WIDE(SFX, ATTR)                                                            \
  static ATTR void isum_u8_##SFX(const uint8_t *w, const int8_t *x, int64_t nb,          \
                                 int32_t *out) {                                         \
    int64_t b = 0;                                                                       \
    for (; b + 4 <= nb; b += 4, w += 128, x += 128) {                                    \
      __m256i s[4];                                                                      \
      for (int k = 0; k < 4; k++)                                                        \
        s[k] = dot_u8_##SFX(_mm256_loadu_si256((const __m256i *)(w + 32 * k)),           \
                            _mm256_loadu_si256((const __m256i *)(x + 32 * k)));          \
      _mm_storeu_si128((__m128i *)(out + b), hsum4_avx2(s[0], s[1], s[2], s[3]));        \
    }                                                                                    \
    for (; b < nb; b++, w += 32, x += 32)                                                \
      out[b] = hsum1_avx2(dot_u8_##SFX(_mm256_loadu_si256((const __m256i *)w),           \
                                       _mm256_loadu_si256((const __m256i *)x)));         \
  }                                                                                      \
  static inline ATTR __m256i dot_s8_##SFX(const uint8_t *q, const int8_t *x) {           \
    __m256i w = _mm256_loadu_si256((const __m256i *)q);                                  \
    __m256i v = _mm256_loadu_si256((const __m256i *)x);                                  \
    return dot_u8_##SFX(_mm256_abs_epi8(w), _mm256_sign_epi8(v, w));                     \
  }                                                                                      \
  static ATTR void isum_s8_##SFX(const uint8_t *p, const int8_t *x, int64_t nb,          \
                                 int32_t *out) {                                         \
    int64_t b = 0;                                                                       \
    for (; b + 4 <= nb; b += 4, p += 136, x += 128) {                                    \
      __m256i s[4];                                                                      \
      for (int k = 0; k < 4; k++)                                                        \
        s[k] = dot_s8_##SFX(p + 34 * k + 2, x + 32 * k);                                 \
      _mm_storeu_si128((__m128i *)(out + b), hsum4_avx2(s[0], s[1], s[2], s[3]));        \
    }                                                                                    \
    for (; b < nb; b++, p += 34, x += 32)                                                \
      out[b] = hsum1_avx2(dot_s8_##SFX(p + 2, x));                                       \
  }
/* One output: the integer sums four blocks at a time, each four then
 * folded in four lanes as fold() does (F16C converts f16 exactly, as
 * f16_at does); at the row's end the missing lanes add +0, which leaves a
 * lane (never -0: it starts at +0) as it is.  KIND 0 Q4_0, 1 Q4_1, 2 Q8_0
 * (constant in each instantiation). */
#define IDOT_WIDE(SFX, ATTR)                                                            \
  static inline __attribute__((always_inline)) ATTR __m256i bdot_##SFX(                 \
      const uint8_t *pb, const int8_t *x, int kind) {                                    \
    if (kind == 2)                                                                       \
      return dot_s8_##SFX(pb + 2, x);                                                    \
    __m128i v = _mm_loadu_si128((const __m128i *)(pb + (kind ? 4 : 2)));                 \
    __m128i m = _mm_set1_epi8(15);                                                       \
    __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m),                 \
                                 _mm_and_si128(v, m));                                   \
    return dot_u8_##SFX(w, _mm256_loadu_si256((const __m256i *)x));                      \
  }                                                                                      \
  static inline __attribute__((always_inline)) ATTR __m128 fold4_##SFX(                 \
      __m128 acc, __m128i is, __m128 dw, __m128 mw, __m128 dx, __m128 xs, int kind) {    \
    __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(is), _mm_mul_ps(dw, dx));                      \
    Q_BAR(t);                                                                            \
    if (kind != 2) {                                                                     \
      __m128 o = _mm_mul_ps(kind == 1 ? mw : _mm_mul_ps(_mm_set1_ps(-8.0f), dw), xs);    \
      Q_BAR(o);                                                                          \
      t = _mm_add_ps(t, o);                                                              \
    }                                                                                    \
    return _mm_add_ps(acc, t);                                                           \
  }                                                                                      \
  static inline __attribute__((always_inline)) ATTR float idotk_##SFX(                  \
      const uint8_t *p, const int8_t *x, const float *dx, const float *xs, int64_t nb,   \
      const int stride, const int kind) {                                                \
    __m128 acc = _mm_setzero_ps();                                                       \
    int64_t b = 0;                                                                       \
    for (; b + 4 <= nb; b += 4, p += 4 * stride, x += 128) {                             \
      __m128i is = hsum4_avx2(bdot_##SFX(p, x, kind), bdot_##SFX(p + stride, x + 32, kind), \
                              bdot_##SFX(p + 2 * stride, x + 64, kind),                  \
                              bdot_##SFX(p + 3 * stride, x + 96, kind));                 \
      __m128 dw, mw = _mm_setzero_ps();                                                  \
      if (kind == 1) {                                                                   \
        uint32_t h[4];                                                                   \
        for (int k = 0; k < 4; k++)                                                      \
          memcpy(&h[k], p + k * stride, 4);                                              \
        __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));                 \
        __m128 lo = _mm256_castps256_ps128(f), hi = _mm256_extractf128_ps(f, 1);         \
        dw = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));                            \
        mw = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));                            \
      } else {                                                                           \
        uint16_t h[4];                                                                   \
        for (int k = 0; k < 4; k++)                                                      \
          memcpy(&h[k], p + k * stride, 2);                                              \
        dw = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)h));                          \
      }                                                                                  \
      acc = fold4_##SFX(acc, is, dw, mw, _mm_loadu_ps(dx + b), _mm_loadu_ps(xs + b), kind); \
    }                                                                                    \
    if (b < nb) {                                                                        \
      __m256i s[4];                                                                      \
      uint16_t dh[4] = {0}, mh[4] = {0};                                                 \
      float dxv[4] = {0}, xsv[4] = {0};                                                  \
      for (int k = 0; k < 4; k++) {                                                      \
        s[k] = _mm256_setzero_si256();                                                   \
        if (b + k < nb) {                                                                \
          s[k] = bdot_##SFX(p + k * stride, x + 32 * k, kind);                           \
          memcpy(&dh[k], p + k * stride, 2);                                             \
          if (kind == 1)                                                                 \
            memcpy(&mh[k], p + k * stride + 2, 2);                                       \
          dxv[k] = dx[b + k], xsv[k] = xs[b + k];                                        \
        }                                                                                \
      }                                                                                  \
      acc = fold4_##SFX(acc, hsum4_avx2(s[0], s[1], s[2], s[3]),                         \
                        _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)dh)),              \
                        _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)mh)),              \
                        _mm_loadu_ps(dxv), _mm_loadu_ps(xsv), kind);                     \
    }                                                                                    \
    float a[4];                                                                          \
    _mm_storeu_ps(a, acc);                                                               \
    return (a[0] + a[1]) + (a[2] + a[3]);                                                \
  }                                                                                      \
  static ATTR float idot_##SFX(const uint8_t *p, const uint8_t *u, const int8_t *x,      \
                               const float *dx, const float *xs, int64_t nb, int stride, \
                               int kind) {                                               \
    (void)u;                                                                             \
    if (kind == 2)                                                                       \
      return idotk_##SFX(p, x, dx, xs, nb, 34, 2);                                       \
    if (kind == 1)                                                                       \
      return idotk_##SFX(p, x, dx, xs, nb, 20, 1);                                       \
    return idotk_##SFX(p, x, dx, xs, nb, 18, 0);                                         \
  }
#define Q_AVX2F __attribute__((target("avx2,fma,f16c")))
#define Q_VNNIF __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
ISUM_WIDE(avx2, Q_AVX2)
ISUM_WIDE(vnni_avx512, Q_VNNI)
IDOT_WIDE(avx2, Q_AVX2F)
IDOT_WIDE(vnni_avx512, Q_VNNIF)
#pragma GCC diagnostic pop
#endif

typedef void (*isum_fn)(const uint8_t *, const int8_t *, int64_t, int32_t *);
/* kind: 0 Q4_0, 1 Q4_1, 2 Q8_0; u: the unpacked nibbles (Q4 only) */
typedef float (*idot_fn)(const uint8_t *p, const uint8_t *u, const int8_t *x, const float *dx,
                         const float *xs, int64_t nb, int stride, int kind);
typedef struct {
  const char *name;
  isum_fn u8, s8;
  idot_fn dot; /* NULL: isum then fold */
} ikernel;

static ikernel ipick(void) {
  const char *force = getenv("SFLOW_QUANT_KERNEL");
  bool scalar = force && (!strcmp(force, "sse") || !strcmp(force, "scalar"));
  bool no512 = force && !strcmp(force, "avx2");
#ifdef HAVE_WIDE
  if (!scalar && !no512 && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx2"))
    return (ikernel){"avx512vnni", isum_u8_vnni_avx512, isum_s8_vnni_avx512, idot_vnni_avx512};
  if (!scalar && __builtin_cpu_supports("avx2"))
    return (ikernel){"avx2", isum_u8_avx2, isum_s8_avx2, idot_avx2};
#endif
  (void)scalar, (void)no512;
  return (ikernel){"scalar", isum_u8_scalar, isum_s8_scalar, NULL};
}

const char *sf__q_int_kernel(void) { return ipick().name; }

static bool int_blocks(uint32_t t) {
  return t == SF__GGML_Q4_0 || t == SF__GGML_Q4_1 || t == SF__GGML_Q8_0;
}

/* Rows [lo, hi) of W against every row of x: each weight row read (and
 * its nibbles unpacked) once, then dotted with the n rows of x in turn,
 * each by the one-row sequence. */
typedef struct {
  const sf__qmat *w;
  const sf__qx *x;
  float *y;
  ikernel k;
} ijob;

static void irows(void *ctx, int64_t lo, int64_t hi) {
  const ijob *J = ctx;
  const sf__qmat *w = J->w;
  const sf__qx *x = J->x;
  int64_t nb = w->cols / 32;
  bool q8 = w->type == SF__GGML_Q8_0, q41 = w->type == SF__GGML_Q4_1;
  uint8_t *u = q8 || J->k.dot ? NULL : sf_alloc((size_t)(nb > 0 ? nb : 1) * 32);
  int32_t *is = sf_alloc(sizeof(int32_t) * (size_t)(nb > 0 ? nb : 1));
  for (int64_t r = lo; r < hi; r++) {
    const uint8_t *p = (const uint8_t *)w->data + (uint64_t)r * w->row_bytes;
    if (u)
      unpack_q4(p, q41 ? 20 : 18, q41 ? 4 : 2, nb, u);
    int stride = q8 ? 34 : q41 ? 20 : 18, kind = q8 ? 2 : q41 ? 1 : 0;
    for (int64_t i = 0; i < x->n; i++) {
      const int8_t *xq = x->q + i * x->cols;
      if (J->k.dot) {
        J->y[i * w->rows + r] = J->k.dot(p, u, xq, x->d + i * nb, x->s + i * nb, nb, stride, kind);
        continue;
      }
      if (q8)
        J->k.s8(p, xq, nb, is);
      else
        J->k.u8(u, xq, nb, is);
      J->y[i * w->rows + r] = fold(p, w->type, is, x->d + i * nb, x->s + i * nb, nb);
    }
  }
  sf_free(u), sf_free(is);
}

void sf__q_matmul_qx(const sf__qmat *w, const sf__qx *x, float *y) {
  if (!int_blocks(w->type)) {
    /* F16, BF16, F32: the f32 kernels (only one row range: the caller splits) */
    const char *name;
    rows_fn fn = pick(&name);
    float *xs = NULL;
    qjob J = {w, x->x, xs, x->n, y};
    if (w->rows > 0)
      fn(&J, 0, w->rows);
    return;
  }
  ijob J = {w, x, y, ipick()};
  if (w->rows > 0)
    irows(&J, 0, w->rows);
}

void sf__q_matmul_q8(const sf__qmat *w, const float *x, int64_t n, float *y) {
  if (!int_blocks(w->type)) {
    sf__q_matmul(w, x, n, y);
    return;
  }
  sf__qx *qx = sf__qx_prep(x, n, w->cols);
  ijob J = {w, qx, y, ipick()};
  uint64_t bytes = (uint64_t)w->rows * w->row_bytes * (uint64_t)(n > 0 ? n : 1);
  if (bytes >= Q_PAR_MIN_BYTES && w->rows > 1) {
    int64_t grain = (int64_t)(Q_GRAIN_BYTES / (w->row_bytes * (uint64_t)(n > 0 ? n : 1)));
    sf__parallel_for(w->rows, grain > 0 ? grain : 1, irows, &J);
  } else if (w->rows > 0) {
    irows(&J, 0, w->rows);
  }
  sf__qx_free(qx);
}
