/*
 * quant.h — products with quantized weights (quant.c): a weight matrix
 * kept in one of ggml's block formats (Q4_0, Q4_1, Q8_0, F16, BF16, F32)
 * as a GGUF file stores it, multiplied with f32 activations by kernels
 * that dequantize each block as they read it, and std.llm's externs
 * (llm.c).
 *
 * The block formats (ggml-common.h), 32 weights a block, little-endian:
 *   Q4_0  f16 d, 16 bytes of nibbles          w = (q - 8) · d
 *   Q4_1  f16 d, f16 m, 16 bytes of nibbles   w = q · d + m
 *   Q8_0  f16 d, 32 int8                      w = q · d
 * where byte j of the nibbles holds weight j in its low half and weight
 * j + 16 in its high half.  F16, BF16 and F32 are one value per weight.
 *
 * Key design choice: the weight is never expanded in memory.  A decoder
 * step at batch 1 reads every weight once, so its speed is the bytes read;
 * Q4_1 is 5 bits a weight against f32's 32.  The kernels therefore stream
 * the blocks and convert in registers, one output row per weight row,
 * split over the pool by rows (each row's sum is computed in one fixed
 * order, so the bits do not depend on the thread count).
 */
#ifndef SF_NN_QUANT_H
#define SF_NN_QUANT_H

#include <stdint.h>

#include "gguf.h"
#include "nn.h"

/* A weight W of rows × cols in ggml type `type`, row r at
 * data + r * row_bytes.  In GGUF's order dims[0] = cols, dims[1] = rows,
 * so a Linear weight (out, in) of PyTorch is rows = out, cols = in. */
typedef struct {
  uint32_t type;   /* SF__GGML_* */
  int64_t rows, cols;
  uint64_t row_bytes;
  const void *data;
} sf__qmat;

/* Whether the product kernels read ggml type t. */
bool sf__q_supported(uint32_t t);
/* Row r of w as cols floats into out (the reference dequantization). */
void sf__q_dequant_row(const sf__qmat *w, int64_t r, float *out);

/* y (n × rows) = x (n × cols) · Wᵀ, row-major; n = 1 is y = W x.  The
 * fastest kernel the CPU runs (AVX-512F, AVX2 + FMA, else four-lane SSE),
 * split over the pool by rows of W.  sf__q_matmul_ref: the scalar
 * reference (each row dequantized, then an f32 dot in order). */
void sf__q_matmul(const sf__qmat *w, const float *x, int64_t n, float *y);
void sf__q_matmul_ref(const sf__qmat *w, const float *x, int64_t n, float *y);
/* Which kernel sf__q_matmul uses here ("avx512", "avx2", "sse"); for
 * tests, SFLOW_QUANT_KERNEL=sse|avx2|avx512 forces one the CPU has. */
const char *sf__q_kernel(void);

/* Integer products (the decoder's): x quantized per 32-block to int8
 * with an f32 scale (sf__qx), each block's sum of products an exact
 * int32, the float part one fixed order (quant.c, "integer products"), so
 * y is bitwise the same for every ISA path, thread count and batch size.
 * Q4_0, Q4_1 and Q8_0 weights; other types go to sf__q_matmul.
 * sf__q_matmul_q8: split over the pool by rows like sf__q_matmul.
 * sf__qx_prep / sf__q_matmul_qx: x quantized once, then any number of
 * products on the caller's thread (a split the caller makes).
 * sf__q_int_kernel: "avx512vnni", "avx2" or "scalar" (SFLOW_QUANT_KERNEL
 * =avx2 or =scalar/sse forces a narrower one). */
typedef struct sf__qx sf__qx;
sf__qx *sf__qx_prep(const float *x, int64_t n, int64_t cols);
void sf__qx_free(sf__qx *x);
void sf__q_matmul_qx(const sf__qmat *w, const sf__qx *x, float *y);
void sf__q_matmul_q8(const sf__qmat *w, const float *x, int64_t n, float *y);
const char *sf__q_int_kernel(void);

/* ------------------------------------------------------------- llm.c */

/* std.llm's externs (stdlib/llm.sflow); each names the file and the key
 * or tensor in its errors.  A Gguf or QWeight argument comes as (pointer,
 * descriptor); the file is opened once per process by path. */
void sf_std_llm_gguf_open(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc);
int64_t sf_std_llm_meta_int(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc);
double sf_std_llm_meta_float(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc);
sf_str *sf_std_llm_meta_str(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc);
sf_array *sf_std_llm_meta_strs(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc);
sf_array *sf_std_llm_meta_ints(const void *g, const sf_type *t, sf_str *key, const sf_loc *loc);
sf_tensor *sf_std_llm_tensor(const void *g, const sf_type *gt, sf_str *name, const sf_loc *loc);
sf_tensor *sf_std_llm_rows(const void *g, const sf_type *gt, sf_str *name, int64_t lo, int64_t hi,
                           const sf_loc *loc);
void sf_std_llm_weight(void *out, const sf_type *out_type, const void *g, const sf_type *gt,
                       sf_str *name, const sf_loc *loc);
sf_tensor *sf_std_llm_quant_matmul(sf_tensor *x, const void *w, const sf_type *wt,
                                   const sf_loc *loc);
sf_str *sf_std_llm_quant_kernel(const sf_loc *loc);

#endif
