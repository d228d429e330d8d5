/*
 * emu_blas.c — the emulator's cuBLAS: products as plain loops, in order
 * (f32 accumulators for the 32F compute types), every matrix checked to be
 * device memory of the handle's device.
 */
#include "emu.h"

/* =============================================================== cuBLAS */

enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum { CUBLAS_TF32_TENSOR_OP_MATH = 3 };

typedef struct Blas {
  uint32_t magic;
  int dev;
  int math;
  int ptr_mode;
  void *stream;
} Blas;
#define BLAS_MAGIC 0x424c4153u

API int cublasCreate_v2(Blas **out) {
  if (!G.inited || !cur_ctx) {
    say("cublasCreate: no CUDA context is current on this thread");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  Blas *b = calloc(1, sizeof *b);
  if (!b)
    return CUBLAS_STATUS_ALLOC_FAILED;
  b->magic = BLAS_MAGIC;
  b->dev = cur_ctx->dev;
  *out = b;
  return CUBLAS_STATUS_SUCCESS;
}
static bool valid_blas(const Blas *b) { return b && b->magic == BLAS_MAGIC; }
API int cublasDestroy_v2(Blas *b) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  b->magic = 0;
  free(b);
  return CUBLAS_STATUS_SUCCESS;
}
/* MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL: 99.0.0, as its NVRTC says 99.0. */
API int cublasGetProperty(int type, int *v) {
  if (type < 0 || type > 2 || !v)
    return CUBLAS_STATUS_INVALID_VALUE;
  *v = type == 0 ? 99 : 0;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetVersion_v2(Blas *b, int *v) {
  (void)b;
  *v = 990000;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetMathMode(Blas *b, int mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode < 0 || mode > 3)
    return CUBLAS_STATUS_INVALID_VALUE;
  b->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetMathMode(Blas *b, int *mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = b->math;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetPointerMode_v2(Blas *b, int mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  b->ptr_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetPointerMode_v2(Blas *b, int *mode) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = b->ptr_mode;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetStream_v2(Blas *b, void *s) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_stream(s))
    return CUBLAS_STATUS_INVALID_VALUE;
  b->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasGetStream_v2(Blas *b, void **s) {
  if (!valid_blas(b))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *s = b->stream;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasSetWorkspace_v2(Blas *b, void *ws, size_t n) {
  (void)ws, (void)n;
  return valid_blas(b) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
API const char *cublasGetStatusString(int s) {
  switch (s) {
  case 0: return "the operation completed successfully";
  case 1: return "the library was not initialized";
  case 3: return "the resource allocation failed";
  case 7: return "an invalid numeric value was used as an argument";
  case 13: return "the GPU program failed to execute";
  case 15: return "the functionality requested is not supported";
  default: return "unknown error";
  }
}
API const char *cublasGetStatusName(int s) {
  switch (s) {
  case 0: return "CUBLAS_STATUS_SUCCESS";
  case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
  case 7: return "CUBLAS_STATUS_INVALID_VALUE";
  case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

static float round_tf32(float f) { /* 10 mantissa bits, to nearest (ties away), as cvt.rna */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u)
    u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&f, &u, 4);
  return f;
}

static size_t tsize(int t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }

/* The extent in bytes of a column-major rows×cols matrix with leading
 * dimension ld. */
static size_t extent(int rows, int cols, long long ld, int t) {
  if (rows <= 0 || cols <= 0)
    return 0;
  return ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * tsize(t);
}

/* Is [p, p + n) device memory of the handle's device?  Else loud. */
static bool blas_mem(const Blas *h, const char *fn, const char *what, const void *p, size_t n) {
  if (n == 0)
    return true;
  pthread_mutex_lock(&M.mu);
  Alloc *a = find_range((uintptr_t)p, n);
  bool ok = a && (a->kind != MEM_DEVICE || a->dev == h->dev);
  char why[200] = "";
  if (!ok) {
    if (a)
      snprintf(why, sizeof why, "memory of device %d, but the handle is device %d's", a->dev, h->dev);
    else
      describe((uintptr_t)p, why, sizeof why);
  }
  pthread_mutex_unlock(&M.mu);
  if (!ok)
    say("%s: matrix %s (%p, %zu bytes) is not in device memory: %s", fn, what, p, n, why);
  return ok;
}

typedef struct {
  const char *fn;
  int ta, tb, m, n, k;
  const void *A, *B;
  void *C;
  long long lda, ldb, ldc, sa, sb, sc;
  int batch;
  int atype, btype, ctype;
  bool f64, tf32, in_bf16; /* in_bf16: 32F inputs rounded to bf16 (FAST_16BF) */
  /* cublasSgemmBatched: device arrays of each product's A, B, C (read when
   * the product runs); NULL for the strided forms */
  const void *const *Ap, *const *Bp, *const *Cp;
  const float *bias; /* cublasLtMatmul's BIAS epilogue: one value per row of C */
  float *bgrad;      /* its BGRADB epilogue: Σ_p op(B)[p][j] for each column j of C */
} Gemm;

/* Product b's A (0), B (1) or C (2): from the pointer arrays, else at its
 * stride from the first. */
static char *operand(const Gemm *g, int which, int b) {
  const void *const *arr = which == 0 ? g->Ap : which == 1 ? g->Bp : g->Cp;
  if (arr)
    return (char *)arr[b];
  const void *base = which == 0 ? g->A : which == 1 ? g->B : g->C;
  long long st = which == 0 ? g->sa : which == 1 ? g->sb : g->sc;
  int t = which == 0 ? g->atype : which == 1 ? g->btype : g->ctype;
  return (char *)base + (size_t)b * (size_t)st * tsize(t);
}

static float load_f(const void *p, int t, size_t i) {
  return t == CUDA_R_32F ? ((const float *)p)[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}

/* C = alpha op(A) op(B) + beta C, column-major, each element a sum over
 * p = 0..k-1 in order (float accumulators for the 32F compute types);
 * beta == 0 overwrites C. */
static int gemm_run(const Blas *h, const Gemm *g, const void *alpha, const void *beta) {
  if (!valid_blas(h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!cur_ctx || cur_ctx->dev != h->dev) {
    say("%s: the handle belongs to device %d, but %s is current", g->fn, h->dev,
        cur_ctx ? "another device" : "no context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if ((g->ta != 0 && g->ta != 1) || (g->tb != 0 && g->tb != 1) || g->m < 0 || g->n < 0 ||
      g->k < 0 || g->batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  int ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  if (g->lda < (ar > 1 ? ar : 1) || g->ldb < (br > 1 ? br : 1) || g->ldc < (g->m > 1 ? g->m : 1)) {
    say("%s: a leading dimension is too small (lda %lld for %d rows, ldb %lld for %d, ldc %lld "
        "for %d)",
        g->fn, g->lda, ar, g->ldb, br, g->ldc, g->m);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g->m == 0 || g->n == 0 || g->batch == 0)
    return CUBLAS_STATUS_SUCCESS;
  if (g->Ap && (!blas_mem(h, g->fn, "A's pointer array", g->Ap, (size_t)g->batch * 8) ||
                !blas_mem(h, g->fn, "B's pointer array", g->Bp, (size_t)g->batch * 8) ||
                !blas_mem(h, g->fn, "C's pointer array", g->Cp, (size_t)g->batch * 8)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if ((g->bias && !blas_mem(h, g->fn, "the bias", g->bias, (size_t)g->m * 4)) ||
      (g->bgrad && !blas_mem(h, g->fn, "the bias gradient", g->bgrad, (size_t)g->n * 4)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  for (int b = 0; b < g->batch; b++) {
    const char *A = operand(g, 0, b), *B = operand(g, 1, b);
    char *C = operand(g, 2, b);
    if ((g->k > 0 && (!blas_mem(h, g->fn, "A", A, extent(ar, ac, g->lda, g->atype)) ||
                      !blas_mem(h, g->fn, "B", B, extent(br, bc, g->ldb, g->btype)))) ||
        !blas_mem(h, g->fn, "C", C, extent(g->m, g->n, g->ldc, g->ctype)))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  int m = g->m, n = g->n, k = g->k;
  if (g->f64) {
    double al = *(const double *)alpha, be = *(const double *)beta;
    double *acc = malloc((size_t)m * sizeof *acc);
    for (int b = 0; b < g->batch; b++) {
      const double *A = (const double *)operand(g, 0, b), *B = (const double *)operand(g, 1, b);
      double *C = (double *)operand(g, 2, b);
      for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++)
          acc[i] = 0;
        for (int p = 0; p < k; p++) {
          double bv = g->tb ? B[j + (size_t)p * g->ldb] : B[p + (size_t)j * g->ldb];
          for (int i = 0; i < m; i++)
            acc[i] += (g->ta ? A[p + (size_t)i * g->lda] : A[i + (size_t)p * g->lda]) * bv;
        }
        for (int i = 0; i < m; i++) {
          double *c = &C[i + (size_t)j * g->ldc];
          *c = be == 0 ? al * acc[i] : al * acc[i] + be * *c;
        }
      }
    }
    free(acc);
    return CUBLAS_STATUS_SUCCESS;
  }
  float al = *(const float *)alpha, be = *(const float *)beta;
  float *acc = malloc((size_t)m * sizeof *acc);
  /* op(A) as floats, k rows of m (p-major), rounded as the compute type says. */
  float *a = malloc((size_t)m * (size_t)(k ? k : 1) * sizeof *a);
  float *bcol = malloc((size_t)(k ? k : 1) * sizeof *bcol);
  if (!acc || !a || !bcol) {
    free(acc), free(a), free(bcol);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  for (int b = 0; b < g->batch; b++) {
    const char *A = operand(g, 0, b), *B = operand(g, 1, b);
    char *C = operand(g, 2, b);
    for (int p = 0; p < k; p++)
      for (int i = 0; i < m; i++) {
        float v = load_f(A, g->atype, g->ta ? p + (size_t)i * g->lda : i + (size_t)p * g->lda);
        if (g->tf32)
          v = round_tf32(v);
        else if (g->in_bf16)
          v = bf16_to_f32(f32_to_bf16(v));
        a[(size_t)p * m + i] = v;
      }
    for (int j = 0; j < n; j++) {
      if (g->bgrad) { /* over B's own values, in order */
        float s = 0.0f;
        for (int p = 0; p < k; p++)
          s += load_f(B, g->btype, g->tb ? j + (size_t)p * g->ldb : p + (size_t)j * g->ldb);
        g->bgrad[j] = s;
      }
      for (int p = 0; p < k; p++) {
        float v = load_f(B, g->btype, g->tb ? j + (size_t)p * g->ldb : p + (size_t)j * g->ldb);
        if (g->tf32)
          v = round_tf32(v);
        else if (g->in_bf16)
          v = bf16_to_f32(f32_to_bf16(v));
        bcol[p] = v;
      }
      for (int i = 0; i < m; i++)
        acc[i] = 0.0f;
      for (int p = 0; p < k; p++) {
        const float *ap = a + (size_t)p * m;
        float bv = bcol[p];
        for (int i = 0; i < m; i++)
          acc[i] += ap[i] * bv;
      }
      for (int i = 0; i < m; i++) {
        size_t ci = i + (size_t)j * g->ldc;
        float old = be == 0.0f ? 0.0f : load_f(C, g->ctype, ci);
        float v = be == 0.0f ? al * acc[i] : al * acc[i] + be * old;
        if (g->bias)
          v += g->bias[i];
        if (g->ctype == CUDA_R_32F)
          ((float *)C)[ci] = v;
        else
          ((uint16_t *)C)[ci] = f32_to_bf16(v);
      }
    }
  }
  free(acc), free(a), free(bcol);
  return CUBLAS_STATUS_SUCCESS;
}

/* A product queued on the handle's stream (asynchronous mode): its scalars
 * copied now when they are host values (CUBLAS_POINTER_MODE_HOST), its
 * matrices checked when it runs; a failure then is the stream's error. */
typedef struct {
  const Blas *h;
  Gemm g;
  double alpha[2], beta[2]; /* the host scalars' bytes */
  bool host_scalars;
  const void *dalpha, *dbeta;
} GemmW;
static CUresult gemm_work(void *arg) {
  GemmW *w = arg;
  int rc = w->host_scalars ? gemm_run(w->h, &w->g, w->alpha, w->beta)
                           : gemm_run(w->h, &w->g, w->dalpha, w->dbeta);
  if (rc != CUBLAS_STATUS_SUCCESS)
    say("%s (queued on a stream): cuBLAS status %d when it ran", w->g.fn, rc);
  return rc == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}
static int gemm_call(const Blas *h, const Gemm *g, const void *alpha, const void *beta) {
  emu_count(EMU_BLAS, g->fn);
  if (!G.async)
    return gemm_run(h, g, alpha, beta);
  if (!valid_blas(h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!cur_ctx || cur_ctx->dev != h->dev) {
    say("%s: the handle belongs to device %d, but %s is current", g->fn, h->dev,
        cur_ctx ? "another device" : "no context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  GemmW *w = calloc(1, sizeof *w);
  if (!w)
    return CUBLAS_STATUS_ALLOC_FAILED;
  w->h = h;
  w->g = *g;
  w->host_scalars = h->ptr_mode == 0;
  if (w->host_scalars) {
    size_t sz = g->f64 ? sizeof(double) : sizeof(float);
    memcpy(w->alpha, alpha, sz);
    memcpy(w->beta, beta, sz);
  } else {
    w->dalpha = alpha, w->dbeta = beta;
  }
  q_push(h->stream, gemm_work, w);
  return CUBLAS_STATUS_SUCCESS;
}

API int cublasSgemm_v2(Blas *h, int ta, int tb, int m, int n, int k, const float *alpha,
                       const float *A, int lda, const float *B, int ldb, const float *beta,
                       float *C, int ldc) {
  Gemm g = {"cublasSgemm", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, 1,
            CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, false, false, false,
            NULL, NULL, NULL, NULL, NULL};
  g.tf32 = valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return gemm_call(h, &g, alpha, beta);
}
API int cublasDgemm_v2(Blas *h, int ta, int tb, int m, int n, int k, const double *alpha,
                       const double *A, int lda, const double *B, int ldb, const double *beta,
                       double *C, int ldc) {
  Gemm g = {"cublasDgemm", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, 1,
            CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, true, false, false,
            NULL, NULL, NULL, NULL, NULL};
  return gemm_call(h, &g, alpha, beta);
}
API int cublasSgemmStridedBatched(Blas *h, int ta, int tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, long long sa,
                                  const float *B, int ldb, long long sb, const float *beta,
                                  float *C, int ldc, long long sc, int batch) {
  Gemm g = {"cublasSgemmStridedBatched", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, sa, sb, sc,
            batch, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, false, false, false,
            NULL, NULL, NULL, NULL, NULL};
  g.tf32 = valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return gemm_call(h, &g, alpha, beta);
}
API int cublasSgemmBatched(Blas *h, int ta, int tb, int m, int n, int k, const float *alpha,
                          const float *const A[], int lda, const float *const B[], int ldb,
                          const float *beta, float *const C[], int ldc, int batch) {
  Gemm g = {"cublasSgemmBatched", ta, tb, m, n, k, NULL, NULL, NULL, lda, ldb, ldc, 0, 0, 0,
            batch, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, false, false, false,
            (const void *const *)A, (const void *const *)B, (const void *const *)C, NULL, NULL};
  g.tf32 = valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return gemm_call(h, &g, alpha, beta);
}
API int cublasDgemmStridedBatched(Blas *h, int ta, int tb, int m, int n, int k,
                                  const double *alpha, const double *A, int lda, long long sa,
                                  const double *B, int ldb, long long sb, const double *beta,
                                  double *C, int ldc, long long sc, int batch) {
  Gemm g = {"cublasDgemmStridedBatched", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, sa, sb, sc,
            batch, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, true, false, false,
            NULL, NULL, NULL, NULL, NULL};
  return gemm_call(h, &g, alpha, beta);
}

/* The type combinations of cublasGemmEx that the emulator runs: 32F/16BF
 * inputs with a 32F compute type (C 32F, or 16BF with 16BF inputs), and
 * all-64F. */
static int gemm_ex_setup(const Blas *h, Gemm *g, int compute) {
  bool c32 = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
             compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  bool c64 = compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC;
  if (c64 && g->atype == CUDA_R_64F && g->btype == CUDA_R_64F && g->ctype == CUDA_R_64F) {
    g->f64 = true;
    return CUBLAS_STATUS_SUCCESS;
  }
  bool ok = c32 && g->atype == g->btype &&
            ((g->atype == CUDA_R_32F && g->ctype == CUDA_R_32F) ||
             (g->atype == CUDA_R_16BF && (g->ctype == CUDA_R_32F || g->ctype == CUDA_R_16BF)));
  if (!ok) {
    say("%s: types A %d, B %d, C %d with compute type %d are not supported by the emulator", g->fn,
        g->atype, g->btype, g->ctype, compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (g->atype == CUDA_R_32F) {
    g->tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
              (compute == CUBLAS_COMPUTE_32F && valid_blas(h) && h->math == CUBLAS_TF32_TENSOR_OP_MATH);
    g->in_bf16 = compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  return CUBLAS_STATUS_SUCCESS;
}

API int cublasGemmEx(Blas *h, int ta, int tb, int m, int n, int k, const void *alpha,
                     const void *A, int atype, int lda, const void *B, int btype, int ldb,
                     const void *beta, void *C, int ctype, int ldc, int compute, int algo) {
  (void)algo;
  Gemm g = {"cublasGemmEx", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, 1,
            atype, btype, ctype, false, false, false, NULL, NULL, NULL, NULL, NULL};
  int rc = gemm_ex_setup(h, &g, compute);
  return rc ? rc : gemm_call(h, &g, alpha, beta);
}
API int cublasGemmStridedBatchedEx(Blas *h, int ta, int tb, int m, int n, int k,
                                   const void *alpha, const void *A, int atype, int lda,
                                   long long sa, const void *B, int btype, int ldb, long long sb,
                                   const void *beta, void *C, int ctype, int ldc, long long sc,
                                   int batch, int compute, int algo) {
  (void)algo;
  Gemm g = {"cublasGemmStridedBatchedEx", ta, tb, m, n, k, A, B, C, lda, ldb, ldc, sa, sb, sc,
            batch, atype, btype, ctype, false, false, false, NULL, NULL, NULL, NULL, NULL};
  int rc = gemm_ex_setup(h, &g, compute);
  return rc ? rc : gemm_call(h, &g, alpha, beta);
}


/* ============================================================== cuBLASLt
 *
 * The part of cuBLASLt the runtime uses (blas.c's sf__sgemm_dev_bias):
 * column-major f32 layouts, the DEFAULT, BIAS and BGRADB epilogues, C and D the
 * same matrix, the algorithm chosen by the library (algo NULL).  Anything
 * else is refused loudly with CUBLAS_STATUS_NOT_SUPPORTED, so the runtime
 * falls back to its two-step path and a test sees why. */
enum { LT_DESC_MAGIC = 0x4c544453, LT_LAYOUT_MAGIC = 0x4c544c59 };
typedef struct {
  uint32_t magic;
  int compute, scale, ta, tb;
  uint32_t epilogue;
  const float *bias;
} LtDesc;
typedef struct {
  uint32_t magic;
  int type;
  uint64_t rows, cols;
  int64_t ld;
} LtLayout;

API int cublasLtCreate(Blas **out) { return cublasCreate_v2(out); }
API int cublasLtDestroy(Blas *h) { return cublasDestroy_v2(h); }
API int cublasLtMatmulDescCreate(LtDesc **out, int compute, int scale) {
  LtDesc *d = calloc(1, sizeof *d);
  if (!d)
    return CUBLAS_STATUS_ALLOC_FAILED;
  *d = (LtDesc){LT_DESC_MAGIC, compute, scale, 0, 0, 1, NULL};
  *out = d;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasLtMatmulDescDestroy(LtDesc *d) {
  if (!d || d->magic != LT_DESC_MAGIC)
    return CUBLAS_STATUS_INVALID_VALUE;
  d->magic = 0;
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasLtMatmulDescSetAttribute(LtDesc *d, int attr, const void *buf, size_t n) {
  if (!d || d->magic != LT_DESC_MAGIC || !buf)
    return CUBLAS_STATUS_INVALID_VALUE;
  if ((attr == 3 || attr == 4) && n == 4)
    memcpy(attr == 3 ? &d->ta : &d->tb, buf, 4);
  else if (attr == 7 && n == 4)
    memcpy(&d->epilogue, buf, 4);
  else if (attr == 8 && n == sizeof(void *))
    memcpy(&d->bias, buf, sizeof(void *));
  else {
    say("cublasLtMatmulDescSetAttribute: attribute %d (%zu bytes) is not supported by the "
        "emulator", attr, n);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasLtMatrixLayoutCreate(LtLayout **out, int type, uint64_t rows, uint64_t cols,
                                   int64_t ld) {
  LtLayout *l = calloc(1, sizeof *l);
  if (!l)
    return CUBLAS_STATUS_ALLOC_FAILED;
  *l = (LtLayout){LT_LAYOUT_MAGIC, type, rows, cols, ld};
  *out = l;
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasLtMatrixLayoutDestroy(LtLayout *l) {
  if (!l || l->magic != LT_LAYOUT_MAGIC)
    return CUBLAS_STATUS_INVALID_VALUE;
  l->magic = 0;
  free(l);
  return CUBLAS_STATUS_SUCCESS;
}
API int cublasLtMatmul(Blas *h, LtDesc *d, const void *alpha, const void *A, LtLayout *la,
                       const void *B, LtLayout *lb, const void *beta, const void *C, LtLayout *lc,
                       void *D, LtLayout *ld, const void *algo, void *ws, size_t wsn,
                       void *stream) {
  (void)ws, (void)wsn;
  const char *fn = "cublasLtMatmul";
  if (!valid_blas(h))
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || d->magic != LT_DESC_MAGIC || !la || la->magic != LT_LAYOUT_MAGIC || !lb ||
      lb->magic != LT_LAYOUT_MAGIC || !lc || lc->magic != LT_LAYOUT_MAGIC || !ld ||
      ld->magic != LT_LAYOUT_MAGIC)
    return CUBLAS_STATUS_INVALID_VALUE;
  bool tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if ((d->compute != CUBLAS_COMPUTE_32F && !tf32) || d->scale != CUDA_R_32F ||
      la->type != CUDA_R_32F || lb->type != CUDA_R_32F || lc->type != CUDA_R_32F ||
      ld->type != CUDA_R_32F || (d->epilogue != 1 && d->epilogue != 4 && d->epilogue != 512) ||
      algo ||
      C != D || lc->rows != ld->rows || lc->cols != ld->cols || lc->ld != ld->ld) {
    say("%s: only f32 column-major products with the DEFAULT, BIAS or BGRADB epilogue, "
        "C == D and algo NULL are emulated (compute %d, epilogue %u)", fn, d->compute, d->epilogue);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (d->epilogue != 1 && !d->bias) {
    say("%s: the %s epilogue without a bias pointer", fn, d->epilogue == 4 ? "BIAS" : "BGRADB");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  uint64_t m = ld->rows, n = ld->cols, k = d->ta ? la->rows : la->cols;
  uint64_t am = d->ta ? la->cols : la->rows, bk = d->tb ? lb->cols : lb->rows,
           bn = d->tb ? lb->rows : lb->cols;
  if (am != m || bk != k || bn != n || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    say("%s: the layouts do not make a product (A %llux%llu, B %llux%llu, D %llux%llu)", fn,
        (unsigned long long)la->rows, (unsigned long long)la->cols,
        (unsigned long long)lb->rows, (unsigned long long)lb->cols, (unsigned long long)m,
        (unsigned long long)n);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Gemm g = {fn, d->ta, d->tb, (int)m, (int)n, (int)k, A, B, D, la->ld, lb->ld, ld->ld, 0, 0, 0, 1,
            CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, false, tf32, false, NULL, NULL, NULL,
            d->epilogue == 4 ? d->bias : NULL, d->epilogue == 512 ? (float *)d->bias : NULL};
  void *saved = h->stream;
  h->stream = stream; /* the call's stream (a handle's calls run one at a time) */
  int rc = gemm_call(h, &g, alpha, beta);
  h->stream = saved;
  return rc;
}
