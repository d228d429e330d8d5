// optim.cu — the optimizers' steps over every param in one launch
// (runtime/nn/gpu_ops.c's sf__gpu_sgd_step and sf__gpu_adamw_step): the
// params come as a tensor list in device memory, one entry per param with a
// gradient, and the grid-stride loop runs over all their values as one
// index space (param k's values at [start_k, start_k+1)), so a step is one
// launch whatever the model's size.  Each value's arithmetic is nn.cu's
// sf_nn_sgd / sf_nn_adamw, operation for operation (optim.c's order), so
// results are those of the per-param kernels bit for bit.
//
// nn.cu's rules hold here: 1-D grids and blocks, `.x` only, no warp
// shuffles.  When every index fits in 31 bits the _i32 entry points walk
// 32-bit indices (cheaper address arithmetic; the host picks them).

// One param: its values, optimizer state (buf for SGD; m and v for AdamW),
// gradient, and where its values start in the list's index space.
struct sf_opt_entry {
  float *w, *m, *v;
  const float *g;
  long long start;
};

// The entry holding flat index i (entries sorted by start, start_0 = 0).
template <typename I>
__device__ int sf_opt_find(const sf_opt_entry *t, int nt, I i) {
  int lo = 0, hi = nt - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if ((I)t[mid].start <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <typename I>
__device__ void sf_opt_sgd(const sf_opt_entry *t, int nt, I total, float lr, float wd,
                           float mom, int has_wd, int has_mom) {
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total;
       i += (I)gridDim.x * (I)blockDim.x) {
    const sf_opt_entry &e = t[sf_opt_find(t, nt, i)];
    I j = i - (I)e.start;
    float d = e.g[j];
    if (has_wd)
      d += wd * e.w[j];
    if (has_mom) {
      e.m[j] = mom * e.m[j] + d;
      d = e.m[j];
    }
    e.w[j] -= lr * d;
  }
}

template <typename I>
__device__ void sf_opt_adamw(const sf_opt_entry *t, int nt, I total, float decay, float w1,
                             float b2, float w2, float step, float bc2, float eps) {
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total;
       i += (I)gridDim.x * (I)blockDim.x) {
    const sf_opt_entry &e = t[sf_opt_find(t, nt, i)];
    I j = i - (I)e.start;
    float gi = e.g[j];
    float wi = e.w[j] * decay;
    float mi = e.m[j] + w1 * (gi - e.m[j]);
    float vi = b2 * e.v[j] + w2 * gi * gi;
    float denom = sqrtf(vi) / bc2 + eps;
    e.w[j] = wi - step * (mi / denom);
    e.m[j] = mi;
    e.v[j] = vi;
  }
}

extern "C" __global__ void sf_opt_sgd_multi(const sf_opt_entry *t, int nt, long long total,
                                            float lr, float wd, float mom, int has_wd,
                                            int has_mom) {
  sf_opt_sgd<long long>(t, nt, total, lr, wd, mom, has_wd, has_mom);
}
extern "C" __global__ void sf_opt_sgd_multi_i32(const sf_opt_entry *t, int nt, int total,
                                                float lr, float wd, float mom, int has_wd,
                                                int has_mom) {
  sf_opt_sgd<int>(t, nt, total, lr, wd, mom, has_wd, has_mom);
}
extern "C" __global__ void sf_opt_adamw_multi(const sf_opt_entry *t, int nt, long long total,
                                              float decay, float w1, float b2, float w2,
                                              float step, float bc2, float eps) {
  sf_opt_adamw<long long>(t, nt, total, decay, w1, b2, w2, step, bc2, eps);
}
extern "C" __global__ void sf_opt_adamw_multi_i32(const sf_opt_entry *t, int nt, int total,
                                                  float decay, float w1, float b2, float w2,
                                                  float step, float bc2, float eps) {
  sf_opt_adamw<int>(t, nt, total, decay, w1, b2, w2, step, bc2, eps);
}
