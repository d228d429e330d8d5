// llama.cu — std.llm's decoder on the GPU (runtime/nn/gpu_llama.c): the
// vector work of a Llama layer between its quantized products
// (kernels/quant.cu): RMSNorm, rotary embeddings on adjacent pairs, the
// KV cache's paged store, grouped-query causal attention over it, SwiGLU
// and the residual adds.  Each kernel is the device form of one loop of
// runtime/nn/llama.c, which is its CPU reference; gpu_emu/llm_decoder
// compares the two decoders' logits.
//
// Rows are tokens: row r of a step is at position pos[r] of its sequence,
// whose block table starts at tab[rowtab[r]] (slot numbers of the model's
// device KV store).  The store is block-major, [slot][2][layer][kv_head]
// [16][head_dim]: a block is one slot's every layer's keys and values, so
// the store grows by appending slots (gpu_llama.c copies it whole).
// Launch with blockDim.x = 256.

#define SF_LL_BT 16

// y = x / sqrt(mean(x²) + eps) * w for each of the rows of d (grid: one
// block a row).  The sum of squares in double, as llama.c's rms, by a
// fixed tree over the 256 threads' partial sums.
extern "C" __global__ void sf_ll_rms(const float *x, const float *w, float *y, int d, double eps) {
  __shared__ double part[256];
  const float *xr = x + (long long)blockIdx.x * d;
  double s = 0.0;
  for (int j = threadIdx.x; j < d; j += 256)
    s += (double)xr[j] * xr[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if ((int)threadIdx.x < k)
      part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  float f = (float)(1.0 / sqrt(part[0] / (double)d + eps));
  for (int j = threadIdx.x; j < d; j += 256)
    y[(long long)blockIdx.x * d + j] = w[j] * (xr[j] * f);
}

// Rotates the adjacent pairs (2i, 2i + 1), i < half, of every head of n
// rows of heads × hd by pos[r] · inv_freq[i] (one thread a pair and head).
extern "C" __global__ void sf_ll_rope(float *x, const int *pos, const float *inv_freq, int n,
                                      int heads, int hd, int half) {
  long long e = (long long)blockIdx.x * 256 + threadIdx.x;
  if (e >= (long long)n * heads * half)
    return;
  int i = (int)(e % half), h = (int)(e / half % heads), r = (int)(e / half / heads);
  float a = (float)pos[r] * inv_freq[i];
  float c = cosf(a), s = sinf(a);
  float *p = x + ((long long)r * heads + h) * hd + 2 * i;
  float x0 = p[0], x1 = p[1];
  p[0] = x0 * c - x1 * s;
  p[1] = x0 * s + x1 * c;
}

// The offset (floats) of token s's keys (v 0) or values (v 1) of kv head
// h of layer l in the store, s's block found through the table at tab.
__device__ long long sf_ll_kv_at(const int *tab, int s, int v, int l, int h, int layers, int kvh,
                                 int hd) {
  long long block = 2LL * layers * kvh * SF_LL_BT * hd;
  return (long long)tab[s / SF_LL_BT] * block +
         ((long long)(v * layers + l) * kvh + h) * SF_LL_BT * hd + (long long)(s % SF_LL_BT) * hd;
}

// Row r's keys and values (kk, vv: n × kvh × hd) into the store at its
// position (one thread a value).
extern "C" __global__ void sf_ll_kv_put(const float *kk, const float *vv, float *store,
                                        const int *pos, const int *rowtab, const int *tab, int l,
                                        int layers, int kvh, int hd, int n) {
  long long e = (long long)blockIdx.x * 256 + threadIdx.x;
  if (e >= (long long)n * kvh * hd)
    return;
  int j = (int)(e % hd), h = (int)(e / hd % kvh), r = (int)(e / hd / kvh);
  const int *t = tab + rowtab[r];
  long long src = ((long long)r * kvh + h) * hd + j;
  store[sf_ll_kv_at(t, pos[r], 0, l, h, layers, kvh, hd) + j] = kk[src];
  store[sf_ll_kv_at(t, pos[r], 1, l, h, layers, kvh, hd) + j] = vv[src];
}

// Attention of query head h of row r0 + b / heads (b: the block) over its
// sequence's keys 0 .. pos[r]: att = softmax(q · K / sqrt(hd)) · V, query
// head h reading kv head h / (heads / kvh).  Scores in sc (maxn a block),
// the max and the sum by fixed trees, the weighted values one thread a
// dimension, summed over the keys in position order as llama.c's attend.
extern "C" __global__ void sf_ll_attn(const float *q, const float *store, float *sc, float *att,
                                      const int *pos, const int *rowtab, const int *tab, int l,
                                      int layers, int heads, int kvh, int hd, float scale,
                                      int maxn, int r0) {
  __shared__ float red[256];
  int b = blockIdx.x, r = r0 + b / heads, h = b % heads, kh = h / (heads / kvh);
  int n = pos[r] + 1, t = threadIdx.x;
  const int *tb = tab + rowtab[r];
  const float *qr = q + ((long long)r * heads + h) * hd;
  float *s = sc + (long long)b * maxn;
  float mx = -__int_as_float(0x7f800000); // -inf: NVRTC has no math.h
  for (int k = t; k < n; k += 256) {
    const float *K = store + sf_ll_kv_at(tb, k, 0, l, kh, layers, kvh, hd);
    float d = 0.0f;
    for (int j = 0; j < hd; j++)
      d += qr[j] * K[j];
    float v = d * scale;
    s[k] = v;
    mx = v > mx ? v : mx;
  }
  red[t] = mx;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (t < k && red[t + k] > red[t])
      red[t] = red[t + k];
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int k = t; k < n; k += 256) {
    float e = expf(s[k] - mx);
    s[k] = e;
    sum += e;
  }
  red[t] = sum;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (t < k)
      red[t] += red[t + k];
    __syncthreads();
  }
  float inv = 1.0f / red[0];
  for (int j = t; j < hd; j += 256) {
    float o = 0.0f;
    for (int k = 0; k < n; k++)
      o += s[k] * inv * store[sf_ll_kv_at(tb, k, 1, l, kh, layers, kvh, hd) + j];
    att[((long long)r * heads + h) * hd + j] = o;
  }
}

// g = silu(g) * u over n values.
extern "C" __global__ void sf_ll_swiglu(float *g, const float *u, long long n) {
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < n) {
    float v = g[i];
    g[i] = v / (1.0f + expf(-v)) * u[i];
  }
}

// x += h over n values (the residual).
extern "C" __global__ void sf_ll_add(float *x, const float *h, long long n) {
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < n)
    x[i] += h[i];
}

// dst = src over n floats (the store copied into a larger one).
extern "C" __global__ void sf_ll_copy(float *dst, const float *src, long long n) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
    dst[i] = src[i];
}
