/*
 * bench/llm/qprod.c — the decoder's products alone: quant.c's f32 kernels
 * (sf__q_matmul) against its integer ones (sf__q_matmul_q8) on SmolLM2's
 * shapes, Q4_1 and Q8_0, x of n rows; process CPU time per product (so a
 * loaded machine slows both alike), best of --reps, alternating.
 *
 *   cc -O2 -std=gnu11 -iquote runtime/nn -iquote runtime/data -iquote runtime/sched \
 *      -iquote runtime/core -iquote build/gen/runtime_root bench/llm/qprod.c \
 *      build/lib/layers/libsflowrt_{nn,gpu,sched,data,core}.a -lm -ldl -lpthread -o qprod
 *   ./qprod [n ...]          # prints one line per (type, shape, n)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  static const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
  static const uint32_t types[] = {SF__GGML_Q4_1, SF__GGML_Q8_0};
  int ns[8] = {1, 16}, nn = 2;
  if (argc > 1) {
    nn = 0;
    for (int i = 1; i < argc && nn < 8; i++)
      ns[nn++] = atoi(argv[i]);
  }
  printf("integer kernel: %s, f32 kernel: %s\n", sf__q_int_kernel(), sf__q_kernel());
  srand(1);
  for (size_t t = 0; t < 2; t++)
    for (size_t s = 0; s < 4; s++)
      for (int k = 0; k < nn; k++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = ns[k];
        uint64_t rb = sf__ggml_bytes(types[t], cols);
        uint8_t *w = malloc(rb * (uint64_t)rows);
        for (uint64_t i = 0; i < rb * (uint64_t)rows; i++)
          w[i] = (uint8_t)rand();
        int bs = types[t] == SF__GGML_Q8_0 ? 34 : 20;
        for (uint64_t i = 0; i < rb * (uint64_t)rows; i += (uint64_t)bs) /* sane scales */
          w[i] = 0x00, w[i + 1] = 0x20, w[i + 2] = types[t] == SF__GGML_Q8_0 ? w[i + 2] : 0x00,
          w[i + 3] = types[t] == SF__GGML_Q8_0 ? w[i + 3] : 0xa0;
        sf__qmat m = {types[t], rows, cols, rb, w};
        float *x = malloc(sizeof(float) * (size_t)(n * cols)), *y = malloc(sizeof(float) * (size_t)(n * rows));
        for (int64_t i = 0; i < n * cols; i++)
          x[i] = (float)rand() / RAND_MAX - 0.5f;
        int reps = (int)(2e7 / (double)(rows * cols * n)) + 1;
        double best[2] = {1e30, 1e30};
        for (int round = 0; round < 6; round++)
          for (int v = 0; v < 2; v++) {
            double t0 = cpu_s();
            for (int r = 0; r < reps; r++)
              (v ? sf__q_matmul_q8 : sf__q_matmul)(&m, x, n, y);
            double e = (cpu_s() - t0) / reps;
            best[v] = e < best[v] ? e : best[v];
          }
        printf("%s %5lldx%-5lld n=%-3d f32 %8.1f us  q8 %8.1f us  f32/q8 %.2fx\n",
               sf__ggml_type_name(types[t]), (long long)rows, (long long)cols, (int)n,
               best[0] * 1e6, best[1] * 1e6, best[0] / best[1]);
        free(w), free(x), free(y);
      }
  return 0;
}
