// nn.cu — the core tensor kernels of std.nn on the GPU (runtime/nn/gpu_ops.c
// launches them; docs/nn.md, "GPU"): fill, strided elementwise ops with
// NumPy broadcasting, the activations and their gradients, reductions
// (sum, mean, max, sum of squares) over any set of axes, strided copies,
// the bf16 conversion of autocast's operands, Linear's bias rows, the SGD
// and AdamW updates and clip_grad_norm's factor.
//
// Rules every kernel here keeps (the contract of issue 16), so that it
// compiles with NVRTC and with the host emulator (tests/gpu/emu): 1-D grids
// and blocks of SF_NB = 256 threads, `.x` only; static __shared__ arrays of
// SF_NB; __syncthreads; atomicAdd on float; the float math functions; the
// integer types int, long long, unsigned, unsigned long long; no warp
// shuffles, no cuda_fp16.h / cuda_bf16.h, no extern __shared__.
//
// Elementwise kernels are grid-stride loops over the flat index of the
// result; strided operands come with a struct of shape and strides (in
// floats), the host having merged the dimensions that every operand steps
// through as one (so the common cases have one or two dimensions).
// Reductions run one block (or, for few long outputs, several blocks and a
// second pass) per output value, a shared-memory tree over the block's 256
// threads, accumulating in float.

#include "kinds.h"

#define SF_NB 256
#define SF_ND 8

// Up to three operands over one index space (operand 0: the result).
struct sf_nd {
  int ndim, pad;
  long long shape[SF_ND];
  long long st0[SF_ND], st1[SF_ND], st2[SF_ND];
};

// A reduction: every output (the kept dimensions, row-major) sums over the
// reduced dimensions; parts > 1 splits each output's range over parts
// blocks (a first pass into partial values).
struct sf_red {
  int nk, nr;
  long long kshape[SF_ND], kst[SF_ND];
  long long rshape[SF_ND], rst[SF_ND];
  long long nout, nred, parts;
};

__device__ long long sf_off1(const sf_nd &d, long long i, long long *o1, long long *o2) {
  long long a = 0, b = 0, c = 0;
  for (int k = d.ndim - 1; k >= 0; k--) {
    long long s = d.shape[k];
    long long q = i / s;
    long long r = i - q * s;
    i = q;
    a += r * d.st0[k];
    b += r * d.st1[k];
    c += r * d.st2[k];
  }
  *o1 = b;
  *o2 = c;
  return a;
}

#define SF_LOOP(i, n)                                                                 \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);      \
       i += (long long)gridDim.x * blockDim.x)

// The binary ops, one device function each; kinds.h lists them.
__device__ float sf_b_add(float x, float y) { return x + y; }
__device__ float sf_b_sub(float x, float y) { return x - y; }
__device__ float sf_b_mul(float x, float y) { return x * y; }
__device__ float sf_b_div(float x, float y) { return x / y; }

// The host checks every kind before a launch (nn.h's sf__kind_check), so
// the default is unreachable; it traps rather than compute another kind.
__device__ float sf_apply(int op, float x, float y) {
  switch (op) {
#define SF_X(K, name, v) case SF__B_##K: return sf_b_##name(x, y);
    SF_NN_BINARY_KINDS(SF_X)
#undef SF_X
  }
  __trap();
  return 0.0f;
}

extern "C" __global__ void sf_nn_fill(float *y, long long n, float v) {
  SF_LOOP(i, n) y[i] = v;
}

// o = a op b over the broadcast index space (op: 0 + 1 - 2 * 3 /).
extern "C" __global__ void sf_nn_binary(float *o, const float *a, const float *b, long long n,
                                        int op, sf_nd d) {
  SF_LOOP(i, n) {
    long long ia, ib;
    long long io = sf_off1(d, i, &ia, &ib);
    o[io] = sf_apply(op, a[ia], b[ib]);
  }
}

// The same for contiguous operands of one shape.
extern "C" __global__ void sf_nn_binary_flat(float *o, const float *a, const float *b,
                                             long long n, int op) {
  SF_LOOP(i, n) o[i] = sf_apply(op, a[i], b[i]);
}

// o = a op s (left: s op a), a strided.
extern "C" __global__ void sf_nn_scalar(float *o, const float *a, long long n, int op, float s,
                                        int left, sf_nd d) {
  SF_LOOP(i, n) {
    long long ia, unused;
    long long io = sf_off1(d, i, &ia, &unused);
    float x = a[ia];
    o[io] = left ? sf_apply(op, s, x) : sf_apply(op, x, s);
  }
}

// dst = src (acc: dst += src), both strided over one shape.
extern "C" __global__ void sf_nn_copy(float *dst, const float *src, long long n, int acc,
                                      sf_nd d) {
  SF_LOOP(i, n) {
    long long is, unused;
    long long io = sf_off1(d, i, &is, &unused);
    if (acc)
      dst[io] += src[is];
    else
      dst[io] = src[is];
  }
}

// ------------------------------------------------------------ activations

#define SF_INV_SQRT2 0.70710678118654752440f
#define SF_INV_SQRT_2PI 0.39894228040143267794f
#define SF_GELU_K 0.79788456080286535588f

// Each activation (kinds.h's SF_NN_UNARY_KINDS) is two device functions:
// sf_u_<name>(x) and its gradient sf_ub_<name>(g, x, y), y the output.  A
// kind without them does not compile.
__device__ float sf_u_relu(float v) { return v > 0.0f ? v : 0.0f; }
__device__ float sf_ub_relu(float g, float x, float y) { return x > 0.0f ? g : 0.0f; }
__device__ float sf_u_gelu(float v) { return 0.5f * v * (1.0f + erff(v * SF_INV_SQRT2)); }
__device__ float sf_ub_gelu(float g, float v, float y) {
  float cdf = 0.5f * (1.0f + erff(v * SF_INV_SQRT2));
  float pdf = SF_INV_SQRT_2PI * expf(-0.5f * v * v);
  return g * (cdf + v * pdf);
}
__device__ float sf_u_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ float sf_ub_sigmoid(float g, float x, float y) { return g * y * (1.0f - y); }
__device__ float sf_u_silu(float v) { return v / (1.0f + expf(-v)); }
__device__ float sf_ub_silu(float g, float x, float y) {
  float s = 1.0f / (1.0f + expf(-x));
  return g * (s * (1.0f + x * (1.0f - s)));
}
__device__ float sf_u_tanh(float v) { return tanhf(v); }
__device__ float sf_ub_tanh(float g, float x, float y) { return g * (1.0f - y * y); }
__device__ float sf_u_exp(float v) { return expf(v); }
__device__ float sf_ub_exp(float g, float x, float y) { return g * y; }
__device__ float sf_u_log(float v) { return logf(v); }
__device__ float sf_ub_log(float g, float x, float y) { return g / x; }
__device__ float sf_u_gelu_tanh(float v) {
  return 0.5f * v * (1.0f + tanhf(SF_GELU_K * (v + 0.044715f * v * v * v)));
}
__device__ float sf_ub_gelu_tanh(float g, float v, float y) {
  float v2 = v * v;
  float t = tanhf(SF_GELU_K * (v + 0.044715f * v2 * v));
  float du = SF_GELU_K * (1.0f + 3.0f * 0.044715f * v2);
  return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
}

extern "C" __global__ void sf_nn_unary(float *y, const float *x, long long n, int kind) {
  SF_LOOP(i, n) {
    float v = x[i], r;
    switch (kind) {
#define SF_X(K, name, out) case SF__U_##K: r = sf_u_##name(v); break;
      SF_NN_UNARY_KINDS(SF_X)
#undef SF_X
    default: __trap(); // the host checked the kind: unreachable
    }
    y[i] = r;
  }
}

// dx from g and the input x or the output y (the rule's own), contiguous;
// y is NULL for the kinds whose rule reads the input.
extern "C" __global__ void sf_nn_unary_bw(float *dx, const float *g, const float *x,
                                          const float *y, long long n, int kind) {
  SF_LOOP(i, n) {
    float gi = g[i], r;
    switch (kind) {
#define SF_X(K, name, out) case SF__U_##K: r = sf_ub_##name(gi, x[i], out ? y[i] : 0.0f); break;
      SF_NN_UNARY_KINDS(SF_X)
#undef SF_X
    default: __trap();
    }
    dx[i] = r;
  }
}

// ------------------------------------------------------------- reductions

#define SF_NOIDX 0x7fffffffffffffffll

__device__ long long sf_red_off(int n, const long long *shape, const long long *st,
                                long long i) {
  long long off = 0;
  for (int k = n - 1; k >= 0; k--) {
    long long s = shape[k];
    long long q = i / s;
    off += (i - q * s) * st[k];
    i = q;
  }
  return off;
}

// Is (v, iv) the one a max keeps over (w, iw)?  NaN wins (it propagates,
// as torch's max), then the larger, then the first index.
__device__ bool sf_max_wins(float v, long long iv, float w, long long iw) {
  bool vn = v != v, wn = w != w;
  if (vn || wn)
    return vn && (!wn || iv < iw);
  return v > w || (v == w && iv < iw);
}

// Block b: output b / parts, part b % parts of its reduced range.  y gets
// the sum (divided by div: mean's n, else 1), the sum of squares, or the
// max and in yi its index in the reduced range (xi, when given, maps a
// first pass's partial positions to the original indices).
extern "C" __global__ void sf_nn_reduce(float *y, long long *yi, const float *x,
                                        const long long *xi, int kind, float div, sf_red r) {
  __shared__ float sv[SF_NB];
  __shared__ long long si[SF_NB];
  long long out = blockIdx.x / r.parts, part = blockIdx.x % r.parts;
  long long per = (r.nred + r.parts - 1) / r.parts;
  long long lo = part * per, hi = lo + per < r.nred ? lo + per : r.nred;
  long long base = sf_red_off(r.nk, r.kshape, r.kst, out);
  unsigned t = threadIdx.x;
  // A thread with no value holds (-inf, SF_NOIDX), which never wins.
  float acc = kind == SF__R_MAX ? -__int_as_float(0x7f800000) : 0.0f; // NVRTC has no math.h
  long long at = SF_NOIDX;
  for (long long j = lo + t; j < hi; j += blockDim.x) {
    long long off = base + sf_red_off(r.nr, r.rshape, r.rst, j);
    float v = x[off];
    if (kind == SF__R_MAX) {
      long long ij = xi ? xi[off] : j;
      if (sf_max_wins(v, ij, acc, at)) {
        acc = v;
        at = ij;
      }
    } else if (kind == SF__R_SUMSQ) {
      acc += v * v;
    } else {
      acc += v;
    }
  }
  sv[t] = acc;
  si[t] = at;
  __syncthreads();
  for (unsigned s = SF_NB / 2; s > 0; s >>= 1) {
    if (t < s) {
      if (kind == SF__R_MAX) {
        if (sf_max_wins(sv[t + s], si[t + s], sv[t], si[t])) {
          sv[t] = sv[t + s];
          si[t] = si[t + s];
        }
      } else {
        sv[t] += sv[t + s];
      }
    }
    __syncthreads();
  }
  if (t == 0) {
    y[blockIdx.x] = kind == SF__R_MEAN ? sv[0] / div : sv[0];
    if (yi)
      yi[blockIdx.x] = si[0];
  }
}

// The reduction's gradient spread back over (outer, n, inner): dx[o, i, j]
// = g[o, j] * scale (sum, mean).
extern "C" __global__ void sf_nn_spread(float *dx, const float *g, long long outer, long long n,
                                        long long inner, float scale) {
  long long total = outer * n * inner;
  SF_LOOP(k, total) {
    long long j = k % inner, o = k / (n * inner);
    dx[k] = g[o * inner + j] * scale;
  }
}

// max's gradient: g to the index each output took (dx zeroed first).
extern "C" __global__ void sf_nn_scatter_max(float *dx, const float *g, const long long *idx,
                                             long long outer, long long n, long long inner) {
  long long total = outer * inner;
  SF_LOOP(k, total) {
    long long o = k / inner, j = k - o * inner;
    dx[(o * n + idx[k]) * inner + j] = g[k];
  }
}

// ------------------------------------------------------------------ products

// x to bfloat16 (round to nearest even; NaN stays a quiet NaN), as bits.
__device__ unsigned short sf_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((u | 0x00400000u) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

extern "C" __global__ void sf_nn_to_bf16(unsigned short *y, const float *x, long long n) {
  SF_LOOP(i, n) y[i] = sf_to_bf16(x[i]);
}

// Linear's output rows start as the bias (the product adds into them).
extern "C" __global__ void sf_nn_bias_rows(float *y, const float *b, long long rows,
                                           long long out) {
  long long total = rows * out;
  SF_LOOP(i, total) y[i] = b[i % out];
}

// ---------------------------------------------------------------- optimizers

// SGD (optim.c's per-value operations): d = g (+ wd w); with momentum
// buf = mom buf + d, d = buf; w -= lr d.
extern "C" __global__ void sf_nn_sgd(float *w, float *buf, const float *g, long long n, float lr,
                                     float wd, float mom, int has_wd, int has_mom) {
  SF_LOOP(i, n) {
    float d = g[i];
    if (has_wd)
      d += wd * w[i];
    if (has_mom) {
      buf[i] = mom * buf[i] + d;
      d = buf[i];
    }
    w[i] -= lr * d;
  }
}

// AdamW (optim.c's operations in its order): w *= decay; m += w1 (g - m);
// v = b2 v + w2 g g; w -= step (m / (sqrt(v) / bc2 + eps)).
extern "C" __global__ void sf_nn_adamw(float *w, float *m, float *v, const float *g, long long n,
                                       float decay, float w1, float b2, float w2, float step,
                                       float bc2, float eps) {
  SF_LOOP(i, n) {
    float gi = g[i];
    float wi = w[i] * decay;
    float mi = m[i] + w1 * (gi - m[i]);
    float vi = b2 * v[i] + w2 * gi * gi;
    float denom = sqrtf(vi) / bc2 + eps;
    w[i] = wi - step * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

// clip_grad_norm: ss holds each param's sum of squares (np values); one
// block adds them in order, and out[0] = the norm, out[1] = the factor
// min(max_norm / (norm + 1e-6), 1).
extern "C" __global__ void sf_nn_clip_coef(float *out, const float *ss, long long np,
                                           float max_norm) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  float s = 0.0f;
  for (long long i = 0; i < np; i++)
    s += ss[i];
  float norm = sqrtf(s), c = max_norm / (norm + 1e-6f);
  out[0] = norm;
  out[1] = c < 1.0f ? c : 1.0f;
}

// g *= coef[1] (left as it is when the factor is 1).
extern "C" __global__ void sf_nn_scale_by(float *g, long long n, const float *coef) {
  float c = coef[1];
  if (c >= 1.0f)
    return;
  SF_LOOP(i, n) g[i] *= c;
}
