/*
 * gemm.c — sflow's own f32 product on the CPU (issue 34).
 *
 * C = alpha op(A)·op(B) + beta C, row-major with leading dimensions, op a
 * transpose when ta/tb is set, as sf__sgemm (blas.c) takes it.  Packed
 * panels of A (MR rows) and B (NR columns), cache blocks of kc × nc of B
 * and mc × kc of A, and a register-blocked microkernel per instruction
 * set, chosen at run time from the CPU's features: AVX-512 (12 × 32),
 * AVX2 with FMA (6 × 16), and a portable one (4 × 8) on fmaf.
 *
 * Key design choice: every element of C is one sequential chain of fused
 * multiply-adds over k, in the order p = 0, 1, ..., k-1, starting from 0
 * (beta 0), from C (beta 1) or from beta·C rounded once (other betas),
 * each term alpha·op(A)[i][p] (rounded once when alpha is not 1) times
 * op(B)[p][j].  The kernels vectorise only across C's rows and columns,
 * never across k, and the accumulators are f32, so a kc block that
 * stores C and the next one that loads it continue the chain exactly.
 * So the AVX-512, AVX2 and portable kernels give the same bits, and so
 * does any split of C over threads (by tiles of rows or columns): the
 * result depends on the operands alone, not on the machine, the thread
 * count or the blocking (tests/unit/test_rt_nn.c, sgemm_sflow).
 *
 * SFLOW_GEMM_ISA=avx512|avx2|portable forces a kernel (the unit test
 * runs each; a kernel the CPU lacks falls back to the best it has).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>

#include "gpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEMM_X86 1
#endif

typedef void (*micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                         bool load);

typedef struct {
  const char *name;
  int mr, nr;
  int64_t kc, mc, nc; /* mc a multiple of mr, nc of nr */
  micro_fn micro;
} gemm_kernel;

/* ------------------------------------------------------------ kernels
 *
 * Each computes one full MR × NR tile of C (ldc apart) from kc steps of
 * a packed A panel (MR values a step) and a packed B panel (NR values a
 * step): acc = load ? C : 0, then acc = fma(a[p][r], b[p][j], acc) for
 * p in order, then C = acc. */

static void micro_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                           bool load) {
  enum { MR = 4, NR = 8 };
  float acc[MR][NR];
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++)
      acc[r][j] = load ? c[r * ldc + j] : 0.0f;
  for (int64_t p = 0; p < kc; p++, a += MR, b += NR)
    for (int r = 0; r < MR; r++)
      for (int j = 0; j < NR; j++)
        acc[r][j] = fmaf(a[r], b[j], acc[r][j]);
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++)
      c[r * ldc + j] = acc[r][j];
}

#ifdef GEMM_X86
__attribute__((target("avx2,fma"))) static void micro_avx2(int64_t kc, const float *a,
                                                           const float *b, float *c,
                                                           int64_t ldc, bool load) {
#define ROW(r) __m256 c##r##0, c##r##1;
  ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
#define INIT(r)                                                              \
  c##r##0 = load ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();       \
  c##r##1 = load ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  INIT(0) INIT(1) INIT(2) INIT(3) INIT(4) INIT(5)
#undef INIT
  for (int64_t p = 0; p < kc; p++, a += 6, b += 16) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), x;
#define STEP(r)                                                              \
  x = _mm256_broadcast_ss(a + r);                                            \
  c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                 \
  c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5)
#undef STEP
  }
#define STORE(r)                                                             \
  _mm256_storeu_ps(c + r * ldc, c##r##0);                                    \
  _mm256_storeu_ps(c + r * ldc + 8, c##r##1);
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
#undef STORE
}

__attribute__((target("avx512f"))) static void micro_avx512(int64_t kc, const float *a,
                                                            const float *b, float *c,
                                                            int64_t ldc, bool load) {
#define ROW(r) __m512 c##r##0, c##r##1;
  ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7) ROW(8) ROW(9) ROW(10) ROW(11)
#undef ROW
#define INIT(r)                                                              \
  c##r##0 = load ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();       \
  c##r##1 = load ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
  INIT(0) INIT(1) INIT(2) INIT(3) INIT(4) INIT(5) INIT(6) INIT(7) INIT(8) INIT(9) INIT(10)
  INIT(11)
#undef INIT
  for (int64_t p = 0; p < kc; p++, a += 12, b += 32) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), x;
#define STEP(r)                                                              \
  x = _mm512_set1_ps(a[r]);                                                  \
  c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0);                                 \
  c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);
    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10)
    STEP(11)
#undef STEP
  }
#define STORE(r)                                                             \
  _mm512_storeu_ps(c + r * ldc, c##r##0);                                    \
  _mm512_storeu_ps(c + r * ldc + 16, c##r##1);
  STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7) STORE(8) STORE(9)
  STORE(10) STORE(11)
#undef STORE
}
#endif

/* Blocking: B's kc × NR panel near L1 (32 KB for AVX2 at kc 512, for
 * AVX-512 at kc 256), A's mc × kc block in L2, B's kc × nc block in L3.
 * AVX2's 512 × 96 was the fastest of 256×144, 512×96, 512×144 and
 * 768×72 on the encoder's shapes (Zen 4 without AVX-512, 2026-12-02);
 * AVX-512's are untuned (no such CPU measured yet). */
static const gemm_kernel k_portable = {"sflow-portable", 4, 8, 256, 128, 2048, micro_portable};
#ifdef GEMM_X86
static const gemm_kernel k_avx2 = {"sflow-avx2", 6, 16, 512, 96, 4080, micro_avx2};
static const gemm_kernel k_avx512 = {"sflow-avx512", 12, 32, 256, 144, 4096, micro_avx512};
#endif

static const gemm_kernel *kernel_best(void) {
#ifdef GEMM_X86
  __builtin_cpu_init();
  bool has512 = __builtin_cpu_supports("avx512f");
  bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const char *e = getenv("SFLOW_GEMM_ISA");
  if (e && strcmp(e, "portable") == 0)
    return &k_portable;
  if (e && strcmp(e, "avx2") == 0 && has2)
    return &k_avx2;
  if (has512 && !(e && strcmp(e, "avx2") == 0))
    return &k_avx512;
  if (has2)
    return &k_avx2;
#endif
  return &k_portable;
}

static const gemm_kernel *K;
static pthread_once_t k_once = PTHREAD_ONCE_INIT;
static void k_init(void) { K = kernel_best(); }

const char *sf__gemm_isa(void) {
  pthread_once(&k_once, k_init);
  return K->name;
}

bool sf__gemm_fast(void) {
  pthread_once(&k_once, k_init);
  return K != &k_portable;
}

#ifdef GEMM_X86
/* An 8 × 8 block transposed in registers: t[u][x] = b[x * ld + u]. */
__attribute__((target("avx2,fma"))) static inline void tr8(const float *b, int64_t ld,
                                                          __m256 t[8]) {
  __m256 r0 = _mm256_loadu_ps(b), r1 = _mm256_loadu_ps(b + ld), r2 = _mm256_loadu_ps(b + 2 * ld),
         r3 = _mm256_loadu_ps(b + 3 * ld), r4 = _mm256_loadu_ps(b + 4 * ld),
         r5 = _mm256_loadu_ps(b + 5 * ld), r6 = _mm256_loadu_ps(b + 6 * ld),
         r7 = _mm256_loadu_ps(b + 7 * ld);
  __m256 u0 = _mm256_unpacklo_ps(r0, r1), u1 = _mm256_unpackhi_ps(r0, r1),
         u2 = _mm256_unpacklo_ps(r2, r3), u3 = _mm256_unpackhi_ps(r2, r3),
         u4 = _mm256_unpacklo_ps(r4, r5), u5 = _mm256_unpackhi_ps(r4, r5),
         u6 = _mm256_unpacklo_ps(r6, r7), u7 = _mm256_unpackhi_ps(r6, r7);
  __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xee),
         v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xee),
         v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xee),
         v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xee);
  t[0] = _mm256_permute2f128_ps(v0, v4, 0x20);
  t[1] = _mm256_permute2f128_ps(v1, v5, 0x20);
  t[2] = _mm256_permute2f128_ps(v2, v6, 0x20);
  t[3] = _mm256_permute2f128_ps(v3, v7, 0x20);
  t[4] = _mm256_permute2f128_ps(v0, v4, 0x31);
  t[5] = _mm256_permute2f128_ps(v1, v5, 0x31);
  t[6] = _mm256_permute2f128_ps(v2, v6, 0x31);
  t[7] = _mm256_permute2f128_ps(v3, v7, 0x31);
}

/* A panel of op(B) = Bᵀ (tb): w ≤ nr (16 or 32) of B's rows from b, kc
 * steps, nr values a step (past w zero), whole groups of 8 rows read as
 * 8 × 8 blocks transposed in registers rather than one value at a time
 * (a copy: the bits are the scalar loop's). */
__attribute__((target("avx2,fma"))) static void pack_bt_avx2(const float *b, int64_t ldb, int nr,
                                                            int64_t w, int64_t kc, float *out) {
  int64_t w8 = w / 8 * 8, p = 0;
  for (; p + 8 <= kc; p += 8)
    for (int64_t x = 0; x < w8; x += 8) {
      __m256 t[8];
      tr8(b + x * ldb + p, ldb, t);
      for (int u = 0; u < 8; u++)
        _mm256_storeu_ps(out + (p + u) * nr + x, t[u]);
    }
  for (int64_t q = 0; q < kc; q++)
    for (int64_t x = q < p ? w8 : 0; x < nr; x++)
      out[q * nr + x] = x < w ? b[x * ldb + q] : 0.0f;
}
#endif

/* ------------------------------------------------------------ packing */

typedef struct {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *a, *b;
  float *c;
  int64_t parts, per; /* the split: parts of per rows (by_rows) or columns */
  bool by_rows;
} gemm_job;

/* One panel of op(A): h ≤ mr rows from i (op(A)'s row) and kc steps
 * from p0, mr values a step, rows past h zero, alpha applied (one
 * rounding, as the chain's term requires).  Inlined with mr a constant,
 * so the full panels' copies are a few vector moves a step. */
static inline __attribute__((always_inline)) void pack_a_panel(const gemm_job *j, int mr,
                                                               int64_t i, int64_t h, int64_t p0,
                                                               int64_t kc, float *out) {
  float alpha = j->alpha;
  if (j->ta) {
    /* op(A)'s rows are A's columns: a step's mr values lie together. */
    const float *src = j->a + p0 * j->lda + i;
    for (int64_t p = 0; p < kc; p++, src += j->lda, out += mr) {
      if (h == mr && alpha == 1.0f) {
        memcpy(out, src, (size_t)mr * sizeof(float));
        continue;
      }
      int64_t r = 0;
      for (; r < h; r++)
        out[r] = alpha * src[r];
      for (; r < mr; r++)
        out[r] = 0.0f;
    }
    return;
  }
  /* Rows of A, read side by side a step at a time. */
  const float *row[12];
  for (int64_t r = 0; r < mr; r++)
    row[r] = j->a + (i + (r < h ? r : 0)) * j->lda + p0;
  for (int64_t p = 0; p < kc; p++, out += mr) {
    if (h == mr && alpha == 1.0f) {
      for (int r = 0; r < mr; r++)
        out[r] = row[r][p];
      continue;
    }
    for (int64_t r = 0; r < mr; r++)
      out[r] = r < h ? alpha * row[r][p] : 0.0f;
  }
}

/* op(A)[i0.., p0..] rows × kc into panels of mr rows. */
static void pack_a(const gemm_job *j, int mr, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                   float *out) {
  for (int64_t r0 = 0; r0 < rows; r0 += mr, out += mr * kc) {
    int64_t h = rows - r0 < mr ? rows - r0 : mr;
    switch (mr) {
    case 4: pack_a_panel(j, 4, i0 + r0, h, p0, kc, out); break;
    case 6: pack_a_panel(j, 6, i0 + r0, h, p0, kc, out); break;
    default: pack_a_panel(j, 12, i0 + r0, h, p0, kc, out); break;
    }
  }
}

/* One panel of op(B): kc steps from p0, w ≤ nr columns from c, nr
 * values a step, columns past w zero. */
static inline __attribute__((always_inline)) void pack_b_panel(const gemm_job *j, int nr,
                                                               int64_t p0, int64_t kc, int64_t c,
                                                               int64_t w, float *out) {
  if (!j->tb) {
    const float *src = j->b + p0 * j->ldb + c;
    for (int64_t p = 0; p < kc; p++, src += j->ldb, out += nr) {
      if (w == nr) {
        memcpy(out, src, (size_t)nr * sizeof(float));
        continue;
      }
      int64_t x = 0;
      for (; x < w; x++)
        out[x] = src[x];
      for (; x < nr; x++)
        out[x] = 0.0f;
    }
    return;
  }
  /* op(B)'s columns are B's rows: read side by side a step at a time
   * (for a vector kernel: 8 × 8 blocks transposed). */
#ifdef GEMM_X86
  if (nr >= 16) {
    pack_bt_avx2(j->b + c * j->ldb + p0, j->ldb, nr, w, kc, out);
    return;
  }
#endif
  const float *col[32];
  for (int64_t x = 0; x < nr; x++)
    col[x] = j->b + (c + (x < w ? x : 0)) * j->ldb + p0;
  for (int64_t p = 0; p < kc; p++, out += nr) {
    if (w == nr) {
      for (int x = 0; x < nr; x++)
        out[x] = col[x][p];
      continue;
    }
    for (int64_t x = 0; x < nr; x++)
      out[x] = x < w ? col[x][p] : 0.0f;
  }
}

/* op(B)[p0.., j0..] kc × cols into panels of nr columns. */
static void pack_b(const gemm_job *j, int nr, int64_t p0, int64_t kc, int64_t j0, int64_t cols,
                   float *out) {
  for (int64_t c0 = 0; c0 < cols; c0 += nr, out += nr * kc) {
    int64_t w = cols - c0 < nr ? cols - c0 : nr;
    switch (nr) {
    case 8: pack_b_panel(j, 8, p0, kc, j0 + c0, w, out); break;
    case 16: pack_b_panel(j, 16, p0, kc, j0 + c0, w, out); break;
    default: pack_b_panel(j, 32, p0, kc, j0 + c0, w, out); break;
    }
  }
}

/* --------------------------------------------------------- the blocks */

/* The tiles of one mc × nc block of C at ct from packed pa (mc × kc)
 * and pb (kc × nc): load says whether C's values start the chains. */
static void gemm_block(const gemm_kernel *kn, int64_t kc, int64_t mc, int64_t nc,
                       const float *pa, const float *pb, float *ct0, int64_t ldc, bool load) {
  int mr = kn->mr, nr = kn->nr;
  float edge[12 * 32]; /* the largest MR × NR */
  for (int64_t jr = 0; jr < nc; jr += nr) {
    int64_t w = nc - jr < nr ? nc - jr : nr;
    const float *bp = pb + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += mr) {
      int64_t h = mc - ir < mr ? mc - ir : mr;
      const float *ap = pa + ir * kc;
      float *ct = ct0 + ir * ldc + jr;
      if (h == mr && w == nr) {
        kn->micro(kc, ap, bp, ct, ldc, load);
        continue;
      }
      /* An edge tile: through a full one, only C's part kept. */
      if (load)
        for (int64_t r = 0; r < h; r++)
          memcpy(edge + r * nr, ct + r * ldc, (size_t)w * sizeof(float));
      kn->micro(kc, ap, bp, edge, nr, load);
      for (int64_t r = 0; r < h; r++)
        memcpy(ct + r * ldc, edge + r * nr, (size_t)w * sizeof(float));
    }
  }
}

/* This thread's packing buffers, grown as needed and kept. */
static _Thread_local float *buf_a, *buf_b;
static _Thread_local size_t cap_a, cap_b;

static float *grow(float **buf, size_t *cap, size_t n) {
  if (n > *cap) {
    free(*buf);
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    *buf = aligned_alloc(64, bytes);
    if (!*buf) {
      *cap = 0;
      return NULL;
    }
    *cap = n;
  }
  return *buf;
}

/* ------------------------------------------------------ skinny products
 *
 * A product with fewer rows than a panel (a gemv, an RL policy's few
 * rows) or fewer columns (a 2-way head) wastes most of each MR × NR tile
 * and spends longer packing than multiplying.  Such a product is run
 * unpacked: the small side's SK ≤ 4 lines are copied once (alpha applied
 * as the packed path applies it), and the long side is read in place,
 * 8 or 16 of its lines a vector, as ymm accumulators; where a vector's
 * values lie along k (a transposed operand) an 8 × 8 block is transposed
 * in registers first.  Each element is still its one chain of fmas over
 * p in order from the same start, so the bits are the packed path's.
 *
 * In the terms below the product is C'[r][x] = chain over p of
 * S[r][p] · L[p][x] (the terms' order in an fma does not change its
 * result): for few rows S = alpha·op(A), L = op(B) and C' = C; for few
 * columns S = op(B)ᵀ, L = alpha·op(A)ᵀ and C' = Cᵀ. */
#define SKINNY 4 /* the most lines of the small side run unpacked, in one pass
                  * over L (5-16 measured no faster than packed: the
                  * transposes cost as much) */

typedef struct {
  int64_t sk, k, nx;         /* S is sk × k (copied), L k × nx */
  const float *s;            /* S, row r at s + r * k */
  const float *l;            /* L[p][x] at l + p * lp + x * lx */
  int64_t lp, lx;            /* one of them 1 */
  float scale;               /* L's values times this first (alpha; 1: not) */
  float *c;                  /* C'[r][x] at c + r * cr + x * cx */
  int64_t cr, cx;
  bool load;                 /* the chains start from C' */
} skinny_job;

#ifdef GEMM_X86
__attribute__((target("avx2,fma"))) static inline __m256 sk_lvec(const skinny_job *q, int64_t p,
                                                                int64_t x) {
  __m256 v = _mm256_loadu_ps(q->l + p * q->lp + x); /* lx == 1 */
  return q->scale == 1.0f ? v : _mm256_mul_ps(_mm256_set1_ps(q->scale), v);
}

/* L's values at p..p+8 for x..x+8 when they lie along p (lp == 1):
 * eight of L's lines transposed, so that t[u] holds L[p+u][x..]. */
__attribute__((target("avx2,fma"))) static inline void sk_ltrans(const skinny_job *q, int64_t p,
                                                                int64_t x, __m256 t[8]) {
  tr8(q->l + x * q->lx + p, q->lx, t);
  if (q->scale != 1.0f)
    for (int u = 0; u < 8; u++)
      t[u] = _mm256_mul_ps(_mm256_set1_ps(q->scale), t[u]);
}

/* C'[r][x..x+8] as a vector (contiguous when cx == 1). */
__attribute__((target("avx2,fma"))) static inline __m256 sk_cget(const skinny_job *q, int64_t r,
                                                                int64_t x) {
  const float *c = q->c + r * q->cr + x * q->cx;
  if (!q->load)
    return _mm256_setzero_ps();
  if (q->cx == 1)
    return _mm256_loadu_ps(c);
  float t[8];
  for (int u = 0; u < 8; u++)
    t[u] = c[u * q->cx];
  return _mm256_loadu_ps(t);
}

__attribute__((target("avx2,fma"))) static inline void sk_cput(const skinny_job *q, int64_t r,
                                                              int64_t x, __m256 v) {
  float *c = q->c + r * q->cr + x * q->cx;
  if (q->cx == 1) {
    _mm256_storeu_ps(c, v);
    return;
  }
  float t[8];
  _mm256_storeu_ps(t, v);
  for (int u = 0; u < 8; u++)
    c[u * q->cx] = t[u];
}

/* NB blocks of 8 of L's lines from x, SK lines of S (constants when
 * inlined, so the accumulators stay in registers). */
static inline __attribute__((always_inline, target("avx2,fma"))) void
sk_block(const skinny_job *q, int SK, int NB, int64_t x) {
  __m256 acc[SKINNY][2];
  for (int r = 0; r < SK; r++)
    for (int b = 0; b < NB; b++)
      acc[r][b] = sk_cget(q, r, x + 8 * b);
  int64_t p = 0;
  if (q->lp != 1) {
    for (; p < q->k; p++)
      for (int b = 0; b < NB; b++) {
        __m256 l = sk_lvec(q, p, x + 8 * b);
        for (int r = 0; r < SK; r++)
          acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(q->s[r * q->k + p]), l, acc[r][b]);
      }
  } else {
    __m256 t[2][8];
    for (; p + 8 <= q->k; p += 8) {
      for (int b = 0; b < NB; b++)
        sk_ltrans(q, p, x + 8 * b, t[b]);
      for (int u = 0; u < 8; u++)
        for (int b = 0; b < NB; b++)
          for (int r = 0; r < SK; r++)
            acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(q->s[r * q->k + p + u]), t[b][u],
                                        acc[r][b]);
    }
    for (; p < q->k; p++)
      for (int b = 0; b < NB; b++) {
        float g[8];
        for (int u = 0; u < 8; u++)
          g[u] = q->l[p + (x + 8 * b + u) * q->lx];
        __m256 l = _mm256_loadu_ps(g);
        if (q->scale != 1.0f)
          l = _mm256_mul_ps(_mm256_set1_ps(q->scale), l);
        for (int r = 0; r < SK; r++)
          acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(q->s[r * q->k + p]), l, acc[r][b]);
      }
  }
  for (int r = 0; r < SK; r++)
    for (int b = 0; b < NB; b++)
      sk_cput(q, r, x + 8 * b, acc[r][b]);
}

static inline __attribute__((always_inline, target("avx2,fma"))) void
sk_lines(const skinny_job *q, int SK) {
  int64_t x = 0;
  for (; x + 16 <= q->nx; x += 16)
    sk_block(q, SK, 2, x);
  for (; x + 8 <= q->nx; x += 8)
    sk_block(q, SK, 1, x);
  for (; x < q->nx; x++) /* the last few lines: one chain each */
    for (int r = 0; r < SK; r++) {
      float *c = q->c + r * q->cr + x * q->cx;
      float acc = q->load ? *c : 0.0f;
      for (int64_t p = 0; p < q->k; p++) {
        float l = q->l[p * q->lp + x * q->lx];
        if (q->scale != 1.0f)
          l = q->scale * l;
        acc = __builtin_fmaf(q->s[r * q->k + p], l, acc);
      }
      *c = acc;
    }
}

__attribute__((target("avx2,fma"))) static void skinny_avx2(const skinny_job *q) {
  switch (q->sk) {
  case 1: sk_lines(q, 1); break;
  case 2: sk_lines(q, 2); break;
  case 3: sk_lines(q, 3); break;
  default: sk_lines(q, 4); break;
  }
}
#endif

/* C[i0..i0+m, j0..j0+n) of the job unpacked, when one side has at most
 * SKINNY lines and the CPU has AVX2 with FMA; false: the packed path. */
static bool gemm_skinny(const gemm_job *j, int64_t i0, int64_t m, int64_t j0, int64_t n) {
#ifdef GEMM_X86
  if (K == &k_portable || (m > SKINNY && n > SKINNY))
    return false; /* the portable kernel runs every product packed */
  bool rows = m <= n ? m <= SKINNY : n > SKINNY;
  int64_t sk = rows ? m : n, k = j->k;
  float *s = grow(&buf_a, &cap_a, (size_t)(sk * k));
  if (!s)
    return false;
  skinny_job q = {.sk = sk, .k = k, .nx = rows ? n : m, .s = s, .c = j->c + i0 * j->ldc + j0,
                  .load = j->beta != 0.0f};
  if (rows) { /* S = alpha·op(A) (rounded once, as packing does), L = op(B) */
    for (int64_t r = 0; r < sk; r++)
      for (int64_t p = 0; p < k; p++) {
        float v = j->ta ? j->a[p * j->lda + i0 + r] : j->a[(i0 + r) * j->lda + p];
        s[r * k + p] = j->alpha == 1.0f ? v : j->alpha * v;
      }
    q.scale = 1.0f;
    q.l = j->tb ? j->b + j0 * j->ldb : j->b + j0;
    q.lp = j->tb ? 1 : j->ldb;
    q.lx = j->tb ? j->ldb : 1;
    q.cr = j->ldc;
    q.cx = 1;
  } else { /* S = op(B)ᵀ, L = alpha·op(A)ᵀ, C' = Cᵀ */
    for (int64_t r = 0; r < sk; r++)
      for (int64_t p = 0; p < k; p++)
        s[r * k + p] = j->tb ? j->b[(j0 + r) * j->ldb + p] : j->b[p * j->ldb + j0 + r];
    q.scale = j->alpha;
    q.l = j->ta ? j->a + i0 : j->a + i0 * j->lda;
    q.lp = j->ta ? j->lda : 1;
    q.lx = j->ta ? 1 : j->lda;
    q.cr = 1;
    q.cx = j->ldc;
  }
  skinny_avx2(&q);
  return true;
#else
  (void)j, (void)i0, (void)m, (void)j0, (void)n;
  return false;
#endif
}

/* Packed B of a column block may take this many floats (4 MiB) when
 * all of k is packed at once (below). */
#define GEMM_B_WHOLE (1 << 20)

/* C[i0..i0+m, j0..j0+n) of the job, on this thread.
 *
 * The usual order (B's kc × nc block packed, then every mc block of A
 * against it) passes over the whole of C once per kc block; when k
 * needs several passes and C is tall, that is C through memory k / kc
 * times (a 4096 × 384 C is 6 MB).  So where B's column block packed
 * for all of k fits GEMM_B_WHOLE, it is packed once and each mc block
 * of C runs all its kc passes while it is in L2.  Either order runs
 * every element's chain over p in the same order, so the bits are the
 * same. */
static void gemm_region(const gemm_job *j, int64_t i0, int64_t m, int64_t j0, int64_t n) {
  const gemm_kernel *kn = K;
  int mr = kn->mr, nr = kn->nr;
  int64_t kc_max = j->k < kn->kc ? j->k : kn->kc;
  int64_t mc_max = (m < kn->mc ? (m + mr - 1) / mr * mr : kn->mc);
  int64_t nc_max = (n < kn->nc ? (n + nr - 1) / nr * nr : kn->nc);
  bool whole = j->k > kn->kc && m > kn->mc && j->k * nc_max <= GEMM_B_WHOLE;
  int64_t ldc = j->ldc;
  if (j->beta != 0.0f && j->beta != 1.0f)
    for (int64_t i = 0; i < m; i++)
      for (int64_t c = 0; c < n; c++) {
        float *x = j->c + (i0 + i) * ldc + j0 + c;
        *x = j->beta * *x;
      }
  if (gemm_skinny(j, i0, m, j0, n))
    return;
  float *pa = grow(&buf_a, &cap_a, (size_t)(mc_max * kc_max));
  float *pb = grow(&buf_b, &cap_b, (size_t)(nc_max * (whole ? j->k : kc_max)));
  if (!pa || !pb)
    sf_runtime_error(NULL, "matmul: out of memory packing a %lld×%lld×%lld product",
                     (long long)j->m, (long long)j->n, (long long)j->k);
  for (int64_t jc = 0; jc < n; jc += kn->nc) {
    int64_t nc = n - jc < kn->nc ? n - jc : kn->nc;
    if (whole) {
      /* B's block pc starts at pb + pc * nc_max: each kc block packed
       * as the usual order packs it. */
      for (int64_t pc = 0; pc < j->k; pc += kn->kc) {
        int64_t kc = j->k - pc < kn->kc ? j->k - pc : kn->kc;
        pack_b(j, nr, pc, kc, j0 + jc, nc, pb + pc * nc_max);
      }
      for (int64_t ic = 0; ic < m; ic += kn->mc) {
        int64_t mc = m - ic < kn->mc ? m - ic : kn->mc;
        for (int64_t pc = 0; pc < j->k; pc += kn->kc) {
          int64_t kc = j->k - pc < kn->kc ? j->k - pc : kn->kc;
          pack_a(j, mr, i0 + ic, mc, pc, kc, pa);
          gemm_block(kn, kc, mc, nc, pa, pb + pc * nc_max, j->c + (i0 + ic) * ldc + j0 + jc,
                     ldc, pc > 0 || j->beta != 0.0f);
        }
      }
      continue;
    }
    for (int64_t pc = 0; pc < j->k; pc += kn->kc) {
      int64_t kc = j->k - pc < kn->kc ? j->k - pc : kn->kc;
      pack_b(j, nr, pc, kc, j0 + jc, nc, pb);
      for (int64_t ic = 0; ic < m; ic += kn->mc) {
        int64_t mc = m - ic < kn->mc ? m - ic : kn->mc;
        pack_a(j, mr, i0 + ic, mc, pc, kc, pa);
        gemm_block(kn, kc, mc, nc, pa, pb, j->c + (i0 + ic) * ldc + j0 + jc, ldc,
                   pc > 0 || j->beta != 0.0f);
      }
    }
  }
}

static void gemm_parts(void *ctx, int64_t lo, int64_t hi) {
  const gemm_job *j = ctx;
  for (int64_t t = lo; t < hi; t++) {
    int64_t total = j->by_rows ? j->m : j->n, s = t * j->per;
    int64_t len = total - s < j->per ? total - s : j->per;
    if (len <= 0)
      continue;
    if (j->by_rows)
      gemm_region(j, s, len, 0, j->n);
    else
      gemm_region(j, 0, j->m, s, len);
  }
}

/* Products under this many multiply-adds are one thread's: a part of
 * fewer than 2^20 spends as long waking a thread as multiplying. */
#define GEMM_PART_MNK (1 << 20)

int64_t sf__gemm_sflow(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc, int64_t ways) {
  pthread_once(&k_once, k_init);
  if (m <= 0 || n <= 0)
    return 1;
  if (k <= 0) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t x = 0; x < n; x++)
        c[i * ldc + x] = beta == 0.0f ? 0.0f : beta == 1.0f ? c[i * ldc + x] : beta * c[i * ldc + x];
    return 1;
  }
  gemm_job j = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
  int64_t work = m * n * k;
  if (ways > work / GEMM_PART_MNK)
    ways = work / GEMM_PART_MNK;
  /* Each part packs all of the operand it does not split: by rows every
   * thread packs the whole of B (k × n), by columns the whole of A
   * (m × k).  So C is cut along its longer side, where that side has two
   * panels for every part (else the other); whichever, every element is
   * its same chain.  (Rows first, as before, cost a 256-row MLP step at
   * 2 threads 22%: each thread packed all of a 1024-wide weight.) */
  bool rows_fill = m >= ways * 2 * K->mr, cols_fill = n >= ways * 2 * K->nr;
  j.by_rows = m >= n ? rows_fill || !cols_fill : !cols_fill && rows_fill;
  int64_t unit = j.by_rows ? K->mr : K->nr, total = j.by_rows ? m : n;
  if (ways > (total + unit - 1) / unit)
    ways = (total + unit - 1) / unit;
  if (ways <= 1) {
    gemm_region(&j, 0, m, 0, n);
    return 1;
  }
  j.per = ((total + ways - 1) / ways + unit - 1) / unit * unit;
  j.parts = (total + j.per - 1) / j.per;
  sf__parallel_for(j.parts, 1, gemm_parts, &j);
  return j.parts;
}
