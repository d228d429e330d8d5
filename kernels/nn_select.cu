// nn_select.cu — the device side of std.nn's masks and selections
// (runtime/nn/gpu_select.c launches them; the CPU forms are in
// runtime/nn/create.c and select.c): tril/triu, where, topk's indices and
// multinomial's draws.
//
// Key design choice: the host emulator's subset only (1-D grids, blocks of
// 256, static __shared__ arrays of 256, __syncthreads), as nn_layers.cu.
// where and tri read their inputs through strides (a broadcast dimension
// has stride 0), so no input is copied first.  topk is a block per row and
// k rounds, each round the best element that the previous round's winner
// beats — (value, index) ordered as the CPU orders them, NaN the largest
// and ties to the lower index — so the result is the CPU's exactly.
// multinomial is a thread per draw over its row in order, in double, with
// the draw's uniform from counter.h: the CPU's bits.

#include "counter.h"

#define SF_NB 256 // threads per block in every launch of this file

// Mirrors gpu_select.c's nd_desc: the result's shape and, per operand, its
// strides (in floats) and where its first element is.
struct sf_nns_nd {
  int ndim, pad;
  long long shape[8];
  long long st[3][8];
};

// Operand j's element of output element i (row-major over shape).
__device__ static long long sf_nns_off(const sf_nns_nd *d, int j, long long i) {
  long long off = 0;
  for (int a = d->ndim - 1; a >= 0; a--) {
    long long n = d->shape[a];
    off += (i % n) * d->st[j][a];
    i /= n;
  }
  return off;
}

extern "C" __global__ void sf_nns_where(const float *c, const float *a, const float *b, float *out,
                                        long long n, sf_nns_nd d) {
  long long i = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (i >= n)
    return;
  out[i] = c[sf_nns_off(&d, 0, i)] != 0.0f ? a[sf_nns_off(&d, 1, i)] : b[sf_nns_off(&d, 2, i)];
}

// tril (upper 0) / triu (upper 1) over the last two dimensions.
extern "C" __global__ void sf_nns_tri(const float *x, float *out, long long n, long long k,
                                      int upper, sf_nns_nd d) {
  long long i = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (i >= n)
    return;
  long long cols = d.shape[d.ndim - 1], rows = d.shape[d.ndim - 2];
  long long c = i % cols, r = (i / cols) % rows;
  bool keep = upper ? c - r >= k : c - r <= k;
  out[i] = keep ? x[sf_nns_off(&d, 0, i)] : 0.0f;
}

__device__ static bool sf_nns_isnan(float v) { return v != v; }

// (v, i) comes before (bv, bi) in topk's order: NaN the largest, then
// larger values, ties to the lower index.
__device__ static bool sf_nns_before(float v, long long i, float bv, long long bi) {
  bool vn = sf_nns_isnan(v), bn = sf_nns_isnan(bv);
  if (vn != bn)
    return vn;
  if (!vn && v != bv)
    return v > bv;
  return i < bi;
}

extern "C" __global__ void sf_nns_topk(const float *x, long long *idx, long long rows, long long n,
                                       long long k) {
  __shared__ float sv[SF_NB];
  __shared__ long long si[SF_NB];
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * n;
  float pv = 0.0f;
  long long pi = -1; // the previous round's winner; -1: none yet
  for (long long t = 0; t < k; t++) {
    long long bi = -1;
    float bv = 0.0f;
    for (long long i = threadIdx.x; i < n; i += SF_NB) {
      float v = xr[i];
      if (pi >= 0 && !sf_nns_before(pv, pi, v, i))
        continue; // taken in an earlier round
      if (bi < 0 || sf_nns_before(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (unsigned w = SF_NB / 2; w > 0; w >>= 1) {
      if (threadIdx.x < w) {
        long long oi = si[threadIdx.x + w];
        if (oi >= 0 && (si[threadIdx.x] < 0 ||
                        sf_nns_before(sv[threadIdx.x + w], oi, sv[threadIdx.x], si[threadIdx.x]))) {
          sv[threadIdx.x] = sv[threadIdx.x + w];
          si[threadIdx.x] = oi;
        }
      }
      __syncthreads();
    }
    pv = sv[0];
    pi = si[0];
    if (threadIdx.x == 0)
      idx[r * k + t] = pi;
    __syncthreads();
  }
}

// Draw j of row r: the first index whose running sum passes u * total.
extern "C" __global__ void sf_nns_multinomial(const float *p, long long *out, long long rows,
                                              long long c, long long n, unsigned long long seed) {
  long long t = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (t >= rows * n)
    return;
  long long r = t / n, j = t % n;
  const float *pr = p + r * c;
  double total = 0.0;
  for (long long i = 0; i < c; i++)
    total += (double)pr[i];
  double target = sf_ctr_unit(seed, (unsigned long long)r, (unsigned long long)j) * total,
         acc = 0.0;
  long long pick = -1, last = 0;
  for (long long i = 0; i < c; i++) {
    if (pr[i] > 0.0f)
      last = i;
    acc += (double)pr[i];
    if (acc > target) {
      pick = i;
      break;
    }
  }
  out[t] = pick >= 0 ? pick : last;
}
