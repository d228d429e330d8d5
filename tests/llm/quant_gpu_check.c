/*
 * quant_gpu_check.c — kernels/quant.cu's sflow_quant_matmul against the
 * CPU reference (runtime/nn/quant.c's sf__q_matmul_ref) for Q4_0, Q4_1
 * and Q8_0 on the model's shapes, batch 1 and 3, printing the largest
 * difference relative to sum |x| |w| of each output.  On a GPU (llm/quant_gpu)
 * or under the host emulator (llm/quant_gpu_emu); exits 77 with neither.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "quant_gpu_check", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(next() >> 8) / 16777216.0f; }

/* A normal f16 near v (truncated), enough for random scales. */
static uint16_t f16(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  int32_t e = (int32_t)((u >> 23) & 0xff) - 112;
  return (uint16_t)(((u >> 16) & 0x8000) | (e > 0 ? ((uint32_t)e << 10) | ((u >> 13) & 0x3ff) : 0));
}

typedef int (*alloc_fn)(uint64_t *, size_t);
typedef int (*h2d_fn)(uint64_t, const void *, size_t);
typedef int (*d2h_fn)(void *, uint64_t, size_t);
typedef int (*free_fn)(uint64_t);

int main(void) {
  setenv("SFLOW_KERNEL_CACHE", "/tmp/sflow-quant-gpu-cache", 0);
  if (!sf__gpu_ready(NULL)) {
    fprintf(stderr, "quant_gpu_check: SKIP: no GPU (%s)\n", sf__gpu_unavailable_reason());
    return 77;
  }
  alloc_fn alloc = (alloc_fn)sf__cuda_sym("cuMemAlloc_v2");
  h2d_fn h2d = (h2d_fn)sf__cuda_sym("cuMemcpyHtoD_v2");
  d2h_fn d2h = (d2h_fn)sf__cuda_sym("cuMemcpyDtoH_v2");
  free_fn dfree = (free_fn)sf__cuda_sym("cuMemFree_v2");
  int block;
  void *fn = sf__nn_kernel("quant", "sflow_quant_matmul", &block, NULL);
  static const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {192, 576}, {1000, 64}};
  static const uint32_t types[] = {SF__GGML_Q4_1, SF__GGML_Q8_0, SF__GGML_Q4_0};
  int failures = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t ti = 0; ti < 3; ti++) {
      uint32_t type = types[ti];
      int rows = (int)shapes[s][0], cols = (int)shapes[s][1], n = s % 2 ? 3 : 1;
      long long rb = (long long)sf__ggml_bytes(type, cols);
      uint8_t *w = malloc((size_t)(rb * rows)), *q = w;
      for (int r = 0; r < rows; r++)
        for (int b = 0; b < cols / 32; b++) {
          uint16_t d = f16(frand(0.001f, 0.05f)), m = f16(frand(-0.4f, 0.0f));
          memcpy(q, &d, 2), q += 2;
          if (type == SF__GGML_Q4_1)
            memcpy(q, &m, 2), q += 2;
          for (int j = 0; j < (type == SF__GGML_Q8_0 ? 32 : 16); j++)
            *q++ = (uint8_t)next();
        }
      float *x = malloc(sizeof(float) * (size_t)(n * cols)), *ref = malloc(sizeof(float) * (size_t)(n * rows));
      float *y = malloc(sizeof(float) * (size_t)(n * rows)), *row = malloc(sizeof(float) * (size_t)cols);
      for (int i = 0; i < n * cols; i++)
        x[i] = frand(-2, 2);
      sf__qmat W = {type, rows, cols, (uint64_t)rb, w};
      sf__q_matmul_ref(&W, x, n, ref);
      uint64_t dw, dx, dy;
      if (alloc(&dw, (size_t)(rb * rows)) || alloc(&dx, sizeof(float) * (size_t)(n * cols)) ||
          alloc(&dy, sizeof(float) * (size_t)(n * rows)) || h2d(dw, w, (size_t)(rb * rows)) ||
          h2d(dx, x, sizeof(float) * (size_t)(n * cols))) {
        fprintf(stderr, "quant_gpu_check: a device allocation or copy failed\n");
        return 1;
      }
      int itype = (int)type;
      void *params[] = {&itype, &dw, &rb, &dx, &dy, &rows, &cols, &n};
      sf__nn_launch(fn, (int64_t)((rows + 7) / 8) * n, block, 0, params, NULL);
      if (d2h(y, dy, sizeof(float) * (size_t)(n * rows))) {
        fprintf(stderr, "quant_gpu_check: reading the result back failed\n");
        return 1;
      }
      double worst = 0;
      for (int r = 0; r < rows; r++) {
        sf__q_dequant_row(&W, r, row);
        for (int i = 0; i < n; i++) {
          double scale = 0;
          for (int j = 0; j < cols; j++)
            scale += fabs((double)x[i * cols + j] * row[j]);
          double e = fabs((double)y[i * rows + r] - ref[i * rows + r]) / (scale + 1e-30);
          worst = e > worst || e != e ? e : worst;
        }
      }
      bool ok = worst < 1e-5;
      failures += !ok;
      printf("%s quant_matmul %s %dx%d batch %d: max |gpu - cpu| / sum|xw| = %.2e\n", ok ? "ok  " : "FAIL",
             sf__ggml_type_name(type), rows, cols, n, worst);
      dfree(dw), dfree(dx), dfree(dy);
      free(w), free(x), free(ref), free(y), free(row);
    }
  printf("quant_gpu_check: %d failed\n", failures);
  return failures ? 1 : 0;
}
