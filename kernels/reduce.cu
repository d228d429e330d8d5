// reduce.cu — sum and max of f32/f64 arrays.
//
// Two passes, deterministic for a given grid: each block folds a
// grid-stride slice into one partial (tree reduction in shared memory),
// then the same kernel folds the partials with one block.  The CPU
// references are in runtime/kernels.c (sf__ref_sum_*, sf__ref_max_*).
// Launch with blockDim.x a power of two <= 1024.

template <typename T> struct SumOp {
  __device__ static T id() { return (T)0; }
  __device__ static T op(T a, T b) { return a + b; }
};
template <typename T> struct MaxOp {
  __device__ static T id() { return (T)-__int_as_float(0x7f800000); }
  __device__ static T op(T a, T b) { return a > b ? a : b; }
};

template <typename T, typename Op>
__device__ void reduce_block(const T *x, long long n, T *partial) {
  __shared__ T s[1024];
  T acc = Op::id();
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    acc = Op::op(acc, x[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      s[threadIdx.x] = Op::op(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0)
    partial[blockIdx.x] = s[0];
}

extern "C" __global__ void sflow_sum_f32(const float *x, long long n, float *partial) {
  reduce_block<float, SumOp<float> >(x, n, partial);
}
extern "C" __global__ void sflow_sum_f64(const double *x, long long n, double *partial) {
  reduce_block<double, SumOp<double> >(x, n, partial);
}
extern "C" __global__ void sflow_max_f32(const float *x, long long n, float *partial) {
  reduce_block<float, MaxOp<float> >(x, n, partial);
}
extern "C" __global__ void sflow_max_f64(const double *x, long long n, double *partial) {
  reduce_block<double, MaxOp<double> >(x, n, partial);
}
