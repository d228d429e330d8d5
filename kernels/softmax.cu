// softmax.cu — softmax over each row of a row-major rows×cols f32 matrix.
//
// One block per row: a max reduction (for stability), a sum of exp(x - max),
// then each element divided by the sum.  CPU reference: sf__ref_softmax_rows
// in runtime/kernels.c.  Launch with blockDim.x a power of two <= 1024 and
// gridDim.x = rows.

__device__ static float block_reduce(float v, bool is_max) {
  __shared__ float s[1024];
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      s[threadIdx.x] = is_max ? fmaxf(s[threadIdx.x], s[threadIdx.x + w])
                              : s[threadIdx.x] + s[threadIdx.x + w];
    __syncthreads();
  }
  float r = s[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void sflow_softmax_rows_f32(const float *x, float *y, long long rows,
                                                  long long cols) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * cols;
  float *yr = y + r * cols;
  float m = -__int_as_float(0x7f800000); // -inf (NVRTC has no math.h)
  for (long long c = threadIdx.x; c < cols; c += blockDim.x)
    m = fmaxf(m, xr[c]);
  m = block_reduce(m, true);
  float sum = 0.0f;
  for (long long c = threadIdx.x; c < cols; c += blockDim.x)
    sum += expf(xr[c] - m);
  sum = block_reduce(sum, false);
  for (long long c = threadIdx.x; c < cols; c += blockDim.x)
    yr[c] = expf(xr[c] - m) / sum;
}
