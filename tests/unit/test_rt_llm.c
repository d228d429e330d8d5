/*
 * test_rt_llm.c — the GGUF reader (runtime/data/gguf.c) and the quantized
 * products (runtime/nn/quant.c).
 *
 * GGUF images are built here byte by byte (a small writer below), so every
 * field can be made wrong on purpose: each bad file must be refused with a
 * message naming the field, and every truncation of a good file must be
 * refused without reading past its end.  The products are checked against
 * the scalar reference (dequantize the row, then an f32 dot) for each
 * kernel width the CPU has, on the model's shapes, printing the largest
 * difference.
 */
#include <math.h>

#include "gguf.h"
#include "quant.h"
#include "rt_test.h"

/* ------------------------------------------------------ GGUF writer */

typedef struct {
  char *b;
  size_t n, cap;
} buf;

static void put(buf *w, const void *p, size_t n) {
  if (w->n + n > w->cap) {
    w->cap = (w->n + n) * 2 + 64;
    w->b = realloc(w->b, w->cap);
  }
  memcpy(w->b + w->n, p, n);
  w->n += n;
}
static void put32(buf *w, uint32_t v) { put(w, &v, 4); }
static void put64(buf *w, uint64_t v) { put(w, &v, 8); }
static void putstr(buf *w, const char *s) {
  put64(w, strlen(s));
  put(w, s, strlen(s));
}

/* A file with one key of each scalar type, a string, two arrays and two
 * tensors: "w" (Q8_0, 64 × 2) and "n" (F32, 4). */
static buf good_file(uint32_t version) {
  buf w = {0};
  put(&w, "GGUF", 4);
  put32(&w, version);
  put64(&w, 2); /* tensors */
  put64(&w, 6); /* keys */
  putstr(&w, "a.u32");
  put32(&w, SF__GGUF_U32);
  put32(&w, 576);
  putstr(&w, "a.f32");
  put32(&w, SF__GGUF_F32);
  float f = 1e-5f;
  put(&w, &f, 4);
  putstr(&w, "a.str");
  put32(&w, SF__GGUF_STR);
  putstr(&w, "llama");
  putstr(&w, "a.strs");
  put32(&w, SF__GGUF_ARR);
  put32(&w, SF__GGUF_STR);
  put64(&w, 3);
  putstr(&w, "x");
  putstr(&w, "");
  putstr(&w, "\xc4\xa0t");
  putstr(&w, "a.i32s");
  put32(&w, SF__GGUF_ARR);
  put32(&w, SF__GGUF_I32);
  put64(&w, 2);
  put32(&w, (uint32_t)-3);
  put32(&w, 7);
  putstr(&w, "a.bool");
  put32(&w, SF__GGUF_BOOL);
  put(&w, "\1", 1);
  /* tensor infos */
  putstr(&w, "w");
  put32(&w, 2);
  put64(&w, 64);
  put64(&w, 2);
  put32(&w, SF__GGML_Q8_0);
  put64(&w, 0);
  putstr(&w, "n");
  put32(&w, 1);
  put64(&w, 4);
  put32(&w, SF__GGML_F32);
  put64(&w, 160); /* 4 Q8_0 blocks = 136 bytes, padded to 160 */
  while (w.n % 32)
    put(&w, "", 1);
  for (int b = 0; b < 4; b++) {
    uint16_t d = 0x3c00; /* 1.0 */
    put(&w, &d, 2);
    for (int j = 0; j < 32; j++) {
      int8_t q = (int8_t)(b * 32 + j - 64);
      put(&w, &q, 1);
    }
  }
  while ((w.n - 0) % 32)
    put(&w, "", 1);
  float n[4] = {1, 2, 3, 4};
  put(&w, n, sizeof n);
  return w;
}

static void test_gguf_reads(void) {
  for (uint32_t v = 2; v <= 3; v++) {
    buf w = good_file(v);
    sf__gguf g;
    char err[512] = "";
    CU_ASSERT_TRUE_FATAL(sf__gguf_parse(&g, w.b, w.n, err, sizeof err));
    CHECK_INT(g.version, v);
    CHECK_INT(g.nkv, 6);
    CHECK_INT(g.ntensors, 2);
    int64_t i;
    double d;
    CU_ASSERT_TRUE(sf__gguf_int(sf__gguf_find(&g, "a.u32"), &i));
    CHECK_INT(i, 576);
    CU_ASSERT_TRUE(sf__gguf_float(sf__gguf_find(&g, "a.f32"), &d));
    CU_ASSERT(d == (double)1e-5f);
    CU_ASSERT_TRUE(sf__gguf_int(sf__gguf_find(&g, "a.bool"), &i));
    CHECK_INT(i, 1);
    CU_ASSERT_FALSE(sf__gguf_int(sf__gguf_find(&g, "a.str"), &i));
    const sf__gguf_kv *s = sf__gguf_find(&g, "a.strs");
    CU_ASSERT_FATAL(s && s->type == SF__GGUF_ARR && s->elem == SF__GGUF_STR && s->n == 3);
    const char *p = s->val;
    uint64_t len;
    const char *x = sf__gguf_next_str(&p, &len);
    CU_ASSERT(len == 1 && x[0] == 'x');
    sf__gguf_next_str(&p, &len);
    CHECK_INT((int64_t)len, 0);
    x = sf__gguf_next_str(&p, &len);
    CU_ASSERT(len == 3 && !memcmp(x, "\xc4\xa0t", 3));
    const sf__gguf_kv *a = sf__gguf_find(&g, "a.i32s");
    int32_t iv[2];
    memcpy(iv, a->val, 8);
    CU_ASSERT(iv[0] == -3 && iv[1] == 7);
    CU_ASSERT(sf__gguf_find(&g, "nope") == NULL);
    const sf__gguf_tensor *t = sf__gguf_tensor_named(&g, "w");
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT(t->type == SF__GGML_Q8_0 && t->dims[0] == 64 && t->dims[1] == 2 && t->bytes == 136);
    const sf__gguf_tensor *nt = sf__gguf_tensor_named(&g, "n");
    CU_ASSERT_FATAL(nt != NULL);
    float nv[4];
    memcpy(nv, nt->data, sizeof nv);
    CU_ASSERT(nv[0] == 1 && nv[3] == 4);
    /* The Q8_0 rows dequantize to q · 1.0: row 1 holds -64 + 64 .. */
    sf__qmat m = {t->type, 2, 64, 68, t->data};
    float row[64];
    sf__q_dequant_row(&m, 1, row);
    CU_ASSERT(row[0] == 0.0f && row[63] == 63.0f);
    sf__gguf_close(&g);
    free(w.b);
  }
}

/* Every prefix of a good file is refused, each with a message. */
static void test_gguf_truncated(void) {
  buf w = good_file(3);
  int refused = 0;
  for (size_t n = 0; n < w.n; n++) {
    char *copy = malloc(n ? n : 1); /* exactly n bytes: ASan sees any overread */
    memcpy(copy, w.b, n);
    sf__gguf g;
    char err[512] = "";
    bool ok = sf__gguf_parse(&g, copy, n, err, sizeof err);
    if (ok) {
      fprintf(stderr, "\n  a prefix of %zu of %zu bytes was accepted\n", n, w.n);
      sf__gguf_close(&g);
    } else {
      refused += err[0] != '\0';
    }
    free(copy);
  }
  CHECK_INT(refused, (int64_t)w.n);
  free(w.b);
}

/* Patches 4 or 8 bytes of a good file at off and expects an error that
 * contains want. */
static void expect_bad(size_t off, const void *patch, size_t n, const char *want) {
  buf w = good_file(3);
  memcpy(w.b + off, patch, n);
  sf__gguf g;
  char err[512] = "";
  bool ok = sf__gguf_parse(&g, w.b, w.n, err, sizeof err);
  CU_ASSERT_FALSE(ok);
  if (ok)
    sf__gguf_close(&g);
  if (!strstr(err, want)) {
    fprintf(stderr, "\n  error \"%s\" does not say \"%s\"\n", err, want);
    CU_FAIL("wrong message");
  }
  free(w.b);
}

static size_t find_n(const buf *w, const char *s, size_t n) {
  for (size_t i = 0; i + n <= w->n; i++)
    if (!memcmp(w->b + i, s, n))
      return i;
  CU_FAIL("pattern not in the file");
  return 0;
}
static size_t find(const buf *w, const char *s) { return find_n(w, s, strlen(s)); }

static void test_gguf_errors(void) {
  uint32_t v1 = 1, v9 = 9, t99 = 99, t4 = 4, nd5 = 5;
  uint64_t big = UINT64_C(1) << 62, far = 1 << 20, odd = 8;
  expect_bad(0, "GGML", 4, "magic: the file does not start with \"GGUF\"");
  expect_bad(4, &v1, 4, "version: 1 (sflow reads GGUF versions 2 and 3)");
  expect_bad(4, &v9, 4, "version: 9");
  expect_bad(8, &big, 8, "tensor_count: 4611686018427387904 tensors cannot fit");
  expect_bad(16, &big, 8, "metadata_kv_count");
  buf w = good_file(3);
  size_t key = find(&w, "a.u32") + 5;           /* its value type */
  size_t arr = find(&w, "a.i32s") + 6 + 8;      /* its length */
  size_t tw = find_n(&w, "\1\0\0\0\0\0\0\0w", 9) + 9; /* tensor "w": n_dims */
  free(w.b);
  expect_bad(key, &t99, 4, "metadata \"a.u32\" at offset");
  expect_bad(key, &t99, 4, "unknown value type 99");
  expect_bad(arr, &big, 8, "metadata \"a.i32s\": an array of 4611686018427387904 i32 runs past the end");
  expect_bad(tw, &nd5, 4, "tensor \"w\": n_dims is 5 (1..4)");
  expect_bad(tw + 4, &big, 8, "tensor \"w\": dims[1] = 2 (zero, or the product overflows)");
  expect_bad(tw + 12, &big, 8, "tensor \"w\": dims[1] = 4611686018427387904 (zero, or the product overflows)");
  expect_bad(tw + 20, &t99, 4, "tensor \"w\": unknown ggml type id 99");
  expect_bad(tw + 20, &t4, 4, "tensor \"w\": unknown ggml type id 4");
  expect_bad(tw + 24, &far, 8, "tensor \"w\": its 136 bytes at data offset 1048576 lie outside the file");
  expect_bad(tw + 24, &odd, 8, "tensor \"w\": offset 8 is not a multiple of the alignment 32");
  uint64_t d63 = 63;
  expect_bad(tw + 4, &d63, 8, "tensor \"w\": a row of 63 is not a whole number of Q8_0 blocks (32)");
}

static void test_gguf_open_errors(void) {
  sf__gguf g;
  char err[512];
  CU_ASSERT_FALSE(sf__gguf_open(&g, "/nonexistent/x.gguf", err, sizeof err));
  CHECK_STR(err, "/nonexistent/x.gguf: cannot read it: No such file or directory");
  char path[] = "/tmp/sflow-gguf-XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  CU_ASSERT(write(fd, "PK\3\4 a zip", 10) == 10);
  close(fd);
  CU_ASSERT_FALSE(sf__gguf_open(&g, path, err, sizeof err));
  CU_ASSERT(strstr(err, path) == err && strstr(err, "not a GGUF file"));
  unlink(path);
}

/* ------------------------------------------------------ products */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(next() >> 8) / 16777216.0f; }

/* f32 to f16 bits, round to nearest even (normal range only, for tests). */
static uint16_t to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffff;
  if (exp <= 0)
    return (uint16_t)sign;
  uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    h++;
  return (uint16_t)h;
}

/* rows × cols random weights of type t (cols a multiple of 32). */
static uint8_t *random_weight(uint32_t t, int64_t rows, int64_t cols, uint64_t *row_bytes) {
  *row_bytes = sf__ggml_bytes(t, cols);
  uint8_t *p = malloc(*row_bytes * (uint64_t)rows), *q = p;
  for (int64_t r = 0; r < rows; r++) {
    if (t == SF__GGML_F32 || t == SF__GGML_F16 || t == SF__GGML_BF16) {
      for (int64_t j = 0; j < cols; j++) {
        float v = frand(-1, 1);
        if (t == SF__GGML_F32) {
          memcpy(q, &v, 4);
          q += 4;
        } else {
          uint32_t u;
          memcpy(&u, &v, 4);
          uint16_t h = t == SF__GGML_F16 ? to_f16(v) : (uint16_t)(u >> 16);
          memcpy(q, &h, 2);
          q += 2;
        }
      }
      continue;
    }
    for (int64_t b = 0; b < cols / 32; b++) {
      uint16_t d = to_f16(frand(0.001f, 0.05f)), m = to_f16(frand(-0.4f, 0.0f));
      memcpy(q, &d, 2);
      q += 2;
      if (t == SF__GGML_Q4_1) {
        memcpy(q, &m, 2);
        q += 2;
      }
      int nq = t == SF__GGML_Q8_0 ? 32 : 16;
      for (int j = 0; j < nq; j++)
        *q++ = (uint8_t)next();
    }
  }
  return p;
}

static void test_f16(void) {
  CU_ASSERT(sf__f16_to_f32(0x3c00) == 1.0f);
  CU_ASSERT(sf__f16_to_f32(0xc000) == -2.0f);
  CU_ASSERT(sf__f16_to_f32(0x7bff) == 65504.0f);
  CU_ASSERT(sf__f16_to_f32(0x0001) == ldexpf(1, -24)); /* smallest subnormal */
  CU_ASSERT(sf__f16_to_f32(0x03ff) == ldexpf(1023, -24));
  CU_ASSERT(isinf(sf__f16_to_f32(0x7c00)) && isnan(sf__f16_to_f32(0x7e00)));
  CU_ASSERT(signbit(sf__f16_to_f32(0x8000)));
  /* Every normal f16 survives f16 -> f32 -> f16. */
  int bad = 0;
  for (uint32_t h = 0x0400; h < 0x7c00; h++)
    bad += to_f16(sf__f16_to_f32((uint16_t)h)) != h;
  CHECK_INT(bad, 0);
}

/* Each kernel the CPU has, each type, the model's shapes, batch 1 and 3:
 * within 1e-5 of the reference relative to sum |x| |w| of the row, and a
 * batch of 3 bitwise three batches of 1. */
static void test_quant_products(void) {
  static const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {192, 576}, {4096, 576}};
  static const uint32_t types[] = {SF__GGML_Q4_1, SF__GGML_Q8_0, SF__GGML_Q4_0, SF__GGML_F16,
                                   SF__GGML_BF16, SF__GGML_F32};
  static const char *const kernels[] = {"sse", "avx2", "avx512"};
  for (int k = 0; k < 3; k++) {
    setenv("SFLOW_QUANT_KERNEL", kernels[k], 1);
    if (strcmp(sf__q_kernel(), kernels[k]))
      continue; /* the CPU lacks it */
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = 3;
        uint64_t rb;
        uint8_t *wd = random_weight(types[ti], rows, cols, &rb);
        sf__qmat w = {types[ti], rows, cols, rb, wd};
        float *x = malloc(sizeof(float) * (size_t)(n * cols));
        float *ref = malloc(sizeof(float) * (size_t)(n * rows)), *y = malloc(sizeof(float) * (size_t)(n * rows));
        float *y1 = malloc(sizeof(float) * (size_t)rows), *row = malloc(sizeof(float) * (size_t)cols);
        for (int64_t i = 0; i < n * cols; i++)
          x[i] = frand(-2, 2);
        sf__q_matmul_ref(&w, x, n, ref);
        sf__q_matmul(&w, x, n, y);
        double worst = 0;
        for (int64_t r = 0; r < rows; r++) {
          sf__q_dequant_row(&w, r, row);
          for (int64_t i = 0; i < n; i++) {
            double scale = 0;
            for (int64_t j = 0; j < cols; j++)
              scale += fabs((double)x[i * cols + j] * row[j]);
            double e = fabs((double)y[i * rows + r] - ref[i * rows + r]) / (scale + 1e-30);
            worst = e > worst ? e : worst;
          }
        }
        int same = 1;
        for (int64_t i = 0; i < n; i++) {
          sf__q_matmul(&w, x + i * cols, 1, y1);
          same &= !memcmp(y1, y + i * rows, sizeof(float) * (size_t)rows);
        }
        fprintf(stderr, "\n    %s %s %lldx%lld: max |y - ref| / sum|xw| = %.2e%s", kernels[k],
                sf__ggml_type_name(types[ti]), (long long)rows, (long long)cols, worst,
                same ? "" : " (batch 3 differs from 3 × batch 1)");
        CU_ASSERT(worst < 1e-5);
        CU_ASSERT(same);
        free(wd), free(x), free(ref), free(y), free(y1), free(row);
      }
  }
  unsetenv("SFLOW_QUANT_KERNEL");
  fprintf(stderr, "\n  ");
}

/* The integer products' documented arithmetic, written again here from
 * quant.h / quant.c's comment: x per 32-block to int8 (scale amax / 127,
 * round to nearest even), each block's exact int32 sum, then t = isum ·
 * (dw · dx) + mw · xs into lane b mod 4, lanes added (a0 + a1) + (a2 + a3).
 * volatile stores keep each operation a separate IEEE one. */
static float q8_spec(const sf__qmat *w, int64_t r, const float *x) {
  int64_t nb = w->cols / 32;
  int stride = w->type == SF__GGML_Q8_0 ? 34 : w->type == SF__GGML_Q4_1 ? 20 : 18;
  const uint8_t *p = (const uint8_t *)w->data + (uint64_t)r * w->row_bytes;
  volatile float a[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < nb; b++, p += stride) {
    const float *xb = x + 32 * b;
    float amax = 0, xs = 0;
    for (int j = 0; j < 32; j++) {
      amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
      volatile float t = xs + xb[j];
      xs = t;
    }
    float id = amax > 0 ? 127.0f / amax : 0.0f;
    volatile float dx = amax / 127.0f;
    int32_t isum = 0;
    for (int j = 0; j < 32; j++) {
      volatile float v = xb[j] * id;
      int q = (int)rintf(v); /* ties to even in the default mode */
      int wq = w->type == SF__GGML_Q8_0 ? (int8_t)p[2 + j]
               : j < 16 ? p[stride - 16 + j] & 15 : p[stride - 32 + j] >> 4;
      isum += q * wq;
    }
    float dw = sf__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    volatile float dd = dw * dx;
    volatile float t = (float)isum * dd;
    if (w->type != SF__GGML_Q8_0) {
      float mw = w->type == SF__GGML_Q4_1 ? sf__f16_to_f32((uint16_t)(p[2] | p[3] << 8)) : -8.0f * dw;
      volatile float o = mw * xs;
      t = t + o;
    }
    a[b & 3] = a[b & 3] + t;
  }
  volatile float l = a[0] + a[1], h = a[2] + a[3];
  return l + h;
}

/* Integer products (sf__q_matmul_q8): every ISA path the CPU has gives
 * the spec's bits above, so bitwise each other; a batch of 3 bitwise three
 * batches of 1; prepared x (sf__q_matmul_qx) over rows split at odd places
 * (as a pool of any size splits them) the same bits; and within 1e-2 of
 * the f32 reference relative to Σ|x||w| (8-bit x; printed). */
static void test_quant_int_products(void) {
  static const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {192, 576}, {64, 96}};
  static const uint32_t types[] = {SF__GGML_Q4_1, SF__GGML_Q8_0, SF__GGML_Q4_0};
  static const char *const kernels[] = {"scalar", "avx2", "avx512vnni"};
  static const char *const force[] = {"scalar", "avx2", "avx512"};
  int ran = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = 3;
      uint64_t rb;
      uint8_t *wd = random_weight(types[ti], rows, cols, &rb);
      sf__qmat w = {types[ti], rows, cols, rb, wd};
      float *x = malloc(sizeof(float) * (size_t)(n * cols));
      float *ref = malloc(sizeof(float) * (size_t)(n * rows)), *y = malloc(sizeof(float) * (size_t)(n * rows));
      float *spec = malloc(sizeof(float) * (size_t)(n * rows)), *y1 = malloc(sizeof(float) * (size_t)rows);
      float *row = malloc(sizeof(float) * (size_t)cols);
      for (int64_t i = 0; i < n * cols; i++)
        x[i] = frand(-2, 2);
      for (int64_t j = 0; j < 32; j++)
        x[j] = 0; /* an all-zero block: scale 0 */
      x[40] = 0.5f, x[41] = -0.5f; /* exact ties after scaling by 127/amax are rare; these are not ties */
      for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++)
          spec[i * rows + r] = q8_spec(&w, r, x + i * cols);
      sf__q_matmul_ref(&w, x, n, ref);
      for (int k = 0; k < 3; k++) {
        setenv("SFLOW_QUANT_KERNEL", force[k], 1);
        if (strcmp(sf__q_int_kernel(), kernels[k]))
          continue; /* the CPU lacks it */
        ran |= 1 << k;
        sf__q_matmul_q8(&w, x, n, y);
        int as_spec = !memcmp(y, spec, sizeof(float) * (size_t)(n * rows));
        int same = 1;
        for (int64_t i = 0; i < n; i++) {
          sf__q_matmul_q8(&w, x + i * cols, 1, y1);
          same &= !memcmp(y1, y + i * rows, sizeof(float) * (size_t)rows);
        }
        /* prepared once, rows in chunks of 1, 7, 13, ... */
        sf__qx *qx = sf__qx_prep(x, 1, cols);
        for (int64_t lo = 0, c = 1; lo < rows; lo += c, c += 6) {
          sf__qmat sub = w;
          sub.rows = lo + c <= rows ? c : rows - lo;
          sub.data = wd + (uint64_t)lo * rb;
          sf__q_matmul_qx(&sub, qx, y1 + lo);
        }
        sf__qx_free(qx);
        int split = !memcmp(y1, y, sizeof(float) * (size_t)rows);
        double worst = 0;
        for (int64_t r = 0; r < rows; r++) {
          sf__q_dequant_row(&w, r, row);
          for (int64_t i = 0; i < n; i++) {
            double scale = 0;
            for (int64_t j = 0; j < cols; j++)
              scale += fabs((double)x[i * cols + j] * row[j]);
            double e = fabs((double)y[i * rows + r] - ref[i * rows + r]) / (scale + 1e-30);
            worst = e > worst ? e : worst;
          }
        }
        fprintf(stderr, "\n    q8 %s %s %lldx%lld: max |y - ref| / sum|xw| = %.2e%s%s%s", kernels[k],
                sf__ggml_type_name(types[ti]), (long long)rows, (long long)cols, worst,
                as_spec ? "" : " (not the spec's bits)", same ? "" : " (batch 3 differs)",
                split ? "" : " (split rows differ)");
        CU_ASSERT(as_spec);
        CU_ASSERT(same);
        CU_ASSERT(split);
        CU_ASSERT(worst < 1e-2);
      }
      free(wd), free(x), free(ref), free(y), free(spec), free(y1), free(row);
    }
  unsetenv("SFLOW_QUANT_KERNEL");
  CU_ASSERT(ran & 1); /* the portable path runs everywhere */
  fprintf(stderr, "\n    integer paths run here: %s%s%s\n  ", ran & 1 ? "scalar " : "",
          ran & 2 ? "avx2 " : "", ran & 4 ? "avx512vnni" : "");
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"gguf_reads", test_gguf_reads},
      {"gguf_truncated", test_gguf_truncated},
      {"gguf_errors", test_gguf_errors},
      {"gguf_open_errors", test_gguf_open_errors},
      {"f16", test_f16},
      {"quant_products", test_quant_products},
      {"quant_int_products", test_quant_int_products},
      {NULL, NULL},
  };
  return rt_run("rt_llm", tests, argc, argv);
}
