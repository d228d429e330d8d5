// elementwise.cu — the elementwise operations the standard library needs,
// over f32 arrays of n elements: one thread per element, grid-stride so any
// grid covers any n.  CPU references: sf__ref_elementwise in
// runtime/kernels.c, selected by the same operation names.

#define SFLOW_FOR_EACH(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)

// c = a + b, a - b, a * b, a / b
extern "C" __global__ void sflow_add_f32(const float *a, const float *b, float *c, long long n) {
  SFLOW_FOR_EACH(i, n) c[i] = a[i] + b[i];
}
extern "C" __global__ void sflow_sub_f32(const float *a, const float *b, float *c, long long n) {
  SFLOW_FOR_EACH(i, n) c[i] = a[i] - b[i];
}
extern "C" __global__ void sflow_mul_f32(const float *a, const float *b, float *c, long long n) {
  SFLOW_FOR_EACH(i, n) c[i] = a[i] * b[i];
}
extern "C" __global__ void sflow_div_f32(const float *a, const float *b, float *c, long long n) {
  SFLOW_FOR_EACH(i, n) c[i] = a[i] / b[i];
}
// y = alpha * x + y
extern "C" __global__ void sflow_axpy_f32(float alpha, const float *x, float *y, long long n) {
  SFLOW_FOR_EACH(i, n) y[i] = alpha * x[i] + y[i];
}
// y = f(x) for the activations
extern "C" __global__ void sflow_relu_f32(const float *x, float *y, long long n) {
  SFLOW_FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
extern "C" __global__ void sflow_exp_f32(const float *x, float *y, long long n) {
  SFLOW_FOR_EACH(i, n) y[i] = expf(x[i]);
}
extern "C" __global__ void sflow_tanh_f32(const float *x, float *y, long long n) {
  SFLOW_FOR_EACH(i, n) y[i] = tanhf(x[i]);
}
// y = x + bias[i % cols]: a bias added to every row of a rows×cols matrix
extern "C" __global__ void sflow_add_bias_f32(const float *x, const float *bias, float *y,
                                              long long n, long long cols) {
  SFLOW_FOR_EACH(i, n) y[i] = x[i] + bias[i % cols];
}
