// quant.cu — y = x · Wᵀ with W in a ggml block format (Q4_0, Q4_1, Q8_0),
// dequantized block by block as it is read: the device side of
// runtime/nn/quant.c, whose scalar sf__q_matmul_ref is the CPU reference
// (tests/llm/quant_gpu_check.c compares them and prints the difference).
//
// W is rows × cols, row r at w + r * row_bytes; x is n × cols, y n × rows,
// both row-major f32.  A block of 256 threads computes 8 outputs: 32
// threads per output (one W row against one x row), each thread taking
// the row's quantization blocks lane, lane + 32, ... and adding its
// products in that order; the 32 partial sums are folded in shared memory
// by a fixed tree, so the result does not depend on scheduling.  Grid:
// ceil(rows / 8) * n blocks, block i on rows 8 (i % groups) .. and x row
// i / groups.  Launch with blockDim.x = 256.
//
// Block layouts (ggml-common.h), 32 weights each, little-endian:
//   Q4_0  f16 d, 16 bytes of nibbles          w = (q - 8) d
//   Q4_1  f16 d, f16 m, 16 bytes of nibbles   w = q d + m
//   Q8_0  f16 d, 32 int8                      w = q d
// byte j of the nibbles holds weight j (low half) and j + 16 (high half).

__device__ float sf_q_f16(const unsigned char *p) {
  unsigned h = (unsigned)p[0] | ((unsigned)p[1] << 8);
  unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man) {
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while (!(man & 0x400u));
    u = sign | ((unsigned)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  } else {
    u = sign;
  }
  return __int_as_float((int)u);
}

// The dot product of quantization block b of a row with x's 32 values.
__device__ float sf_q_block(int type, const unsigned char *p, const float *x) {
  float s = 0.0f;
  if (type == 8) { // Q8_0
    float d = sf_q_f16(p);
    for (int j = 0; j < 32; j++)
      s += (float)(signed char)p[2 + j] * x[j];
    return s * d;
  }
  bool q41 = type == 3;
  float d = sf_q_f16(p), m = q41 ? sf_q_f16(p + 2) : -8.0f * d, xs = 0.0f;
  const unsigned char *qs = p + (q41 ? 4 : 2);
  for (int j = 0; j < 16; j++) {
    s += (float)(qs[j] & 15) * x[j] + (float)(qs[j] >> 4) * x[j + 16];
    xs += x[j] + x[j + 16];
  }
  return s * d + m * xs;
}

extern "C" __global__ void sflow_quant_matmul(int type, const unsigned char *w, long long row_bytes,
                                              const float *x, float *y, int rows, int cols, int n) {
  __shared__ float part[256];
  int groups = (rows + 7) / 8;
  int xi = blockIdx.x / groups, r = (blockIdx.x % groups) * 8 + threadIdx.x / 32;
  int lane = threadIdx.x % 32, nb = cols / 32;
  int stride = type == 8 ? 34 : type == 3 ? 20 : 18;
  float acc = 0.0f;
  if (r < rows && xi < n) {
    const unsigned char *row = w + (long long)r * row_bytes;
    const float *xr = x + (long long)xi * cols;
    for (int b = lane; b < nb; b += 32)
      acc += sf_q_block(type, row + (long long)b * stride, xr + 32 * b);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int k = 16; k > 0; k >>= 1) {
    if (lane < k)
      part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (lane == 0 && r < rows && xi < n)
    y[(long long)xi * rows + r] = part[threadIdx.x];
}

// ---------------------------------------------------------------------
// The decoder's side of the block formats (runtime/nn/gpu_llama.c): rows
// dequantized (the token embedding), and a tiled product for prefill and
// batches, where sflow_quant_matmul above would read each weight block
// again for every row of x.

// Weights j0 .. j0 + 7 (within one quantization block) of row p into
// out, as quant.c's sf__q_dequant_row computes them: q d (Q8_0), q d + m
// (Q4_1), (q - 8) d written q d + (-8 d) (Q4_0); the block's scales read
// once.
__device__ void sf_q_at8(int type, const unsigned char *p, int j0, float *out) {
  int b = j0 / 32, k0 = j0 % 32;
  if (type == 8) {
    const unsigned char *blk = p + (long long)b * 34;
    float d = sf_q_f16(blk);
    for (int k = 0; k < 8; k++)
      out[k] = (float)(signed char)blk[2 + k0 + k] * d;
    return;
  }
  bool q41 = type == 3;
  const unsigned char *blk = p + (long long)b * (q41 ? 20 : 18);
  float d = sf_q_f16(blk), m = q41 ? sf_q_f16(blk + 2) : -8.0f * d;
  const unsigned char *qs = blk + (q41 ? 4 : 2);
  for (int k = 0; k < 8; k++) {
    int j = k0 + k;
    unsigned q = j < 16 ? (qs[j] & 15u) : (qs[j - 16] >> 4);
    out[k] = (float)q * d + m;
  }
}

// y (n × cols) = rows ids[0..n) of W dequantized.  Grid: n blocks.
extern "C" __global__ void sflow_quant_rows(int type, const unsigned char *w, long long row_bytes,
                                            const int *ids, float *y, int cols, int n) {
  int i = blockIdx.x;
  if (i >= n)
    return;
  const unsigned char *row = w + (long long)ids[i] * row_bytes;
  for (int j = threadIdx.x * 8; j < cols; j += blockDim.x * 8)
    sf_q_at8(type, row, j, y + (long long)i * cols + j);
}

// y (n × rows) = x (n × cols) · Wᵀ, tiled: a block of 256 threads holds
// 64 rows of W and 16 rows of x, one quantization block (32 columns) at a
// time in shared memory, each weight dequantized once for the 16 rows of
// x; thread t computes W row t % 64 against x rows t / 64 + 4k, k < 4,
// each sum over the columns in order.  Grid: ceil(rows / 64) *
// ceil(n / 16) blocks, block i on W rows 64 (i % wt) .. and x rows
// 16 (i / wt) ..
#define SF_QT_W 64
#define SF_QT_X 16
extern "C" __global__ void sflow_quant_matmul_tiled(int type, const unsigned char *w,
                                                    long long row_bytes, const float *x, float *y,
                                                    int rows, int cols, int n) {
  __shared__ float ws[SF_QT_W][33];
  __shared__ float xs[SF_QT_X][33];
  int wt = (rows + SF_QT_W - 1) / SF_QT_W;
  int r0 = (blockIdx.x % wt) * SF_QT_W, x0 = (blockIdx.x / wt) * SF_QT_X;
  int t = threadIdx.x, wr = t % SF_QT_W, xr = t / SF_QT_W;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c0 = 0; c0 < cols; c0 += 32) {
    // 64 × 32 weights, 8 a thread; 16 × 32 x values, 2 a thread
    int lr = t / 4, lc = (t % 4) * 8;
    if (r0 + lr < rows)
      sf_q_at8(type, w + (long long)(r0 + lr) * row_bytes, c0 + lc, &ws[lr][lc]);
    for (int k = 0; k < 2; k++) {
      int e = t * 2 + k, xi = e / 32, xc = e % 32;
      xs[xi][xc] = x0 + xi < n ? x[(long long)(x0 + xi) * cols + c0 + xc] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < 4 && x0 + xr + 4 * k < n && r0 + wr < rows; k++) {
      float s = acc[k];
      for (int j = 0; j < 32; j++)
        s += ws[wr][j] * xs[xr + 4 * k][j];
      acc[k] = s;
    }
    __syncthreads();
  }
  for (int k = 0; k < 4; k++) {
    int xi = x0 + xr + 4 * k;
    if (r0 + wr < rows && xi < n)
      y[(long long)xi * rows + r0 + wr] = acc[k];
  }
}
