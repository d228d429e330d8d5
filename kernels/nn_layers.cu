// nn_layers.cu — the device side of std.nn's layers (runtime/nn/gpu_layers.c
// launches them; the CPU forms are in runtime/nn/reduce.c, layers.c and
// index.c): softmax and log-softmax over any axis, the attention's masked
// softmax, cross-entropy, layer norm, embedding's gather and scatter, the
// dropout masks, argmax and the strided copy behind cat and stack.
//
// Key design choice: every kernel is plain CUDA C that the host emulator
// (tests/gpu/emu) also compiles, so only the contract's subset is used:
// 1-D grids and blocks, static __shared__ arrays of 256 (every launch uses
// blocks of 256 threads), __syncthreads, atomicAdd(float *, float) and the
// float math functions.  A row op is one block per row with a shared-memory
// tree over the block's 256 partials (accumulated in float, in an order
// fixed by the shape, so a run repeats bitwise); an op over a non-last axis
// is one thread per (outer, inner) column walking the axis.  The dropout
// masks are bitwise the CPU's: the CPU draws element k of a mask as the
// k-th output of a PCG32 stream, and PCG32's state after k steps is an
// affine map of its start state, so each thread jumps straight to its
// element (O(log k) multiplies) instead of walking the stream.

#define SF_NB 256 // threads per block in every launch of this file

__device__ static float sf_neg_inf() {
  union {
    unsigned u;
    float f;
  } c;
  c.u = 0xff800000u;
  return c.f;
}

__device__ static bool sf_isnan(float v) { return v != v; }

// The tree over the block's 256 values: the sum or the maximum (NaN
// ignored, as the CPU's `x > m ? x : m`), the same value in every thread.
__device__ static float sf_block_sum(float v) {
  __shared__ float s[SF_NB];
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = SF_NB / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      s[threadIdx.x] = s[threadIdx.x] + s[threadIdx.x + w];
    __syncthreads();
  }
  float r = s[0];
  __syncthreads();
  return r;
}

__device__ static float sf_block_max(float v) {
  __shared__ float s[SF_NB];
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = SF_NB / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      float b = s[threadIdx.x + w];
      s[threadIdx.x] = b > s[threadIdx.x] ? b : s[threadIdx.x];
    }
    __syncthreads();
  }
  float r = s[0];
  __syncthreads();
  return r;
}

// ------------------------------------------------------------- softmax

// Rows of n along the last axis, one block each: y = softmax(x) or
// log_softmax(x) (log != 0), the CPU's formulas: the row's maximum (0 for
// a row of -inf) subtracted before exp, log-softmax as (x - max) - log s.
extern "C" __global__ void sf_nnl_softmax_last(const float *x, float *y, long long rows,
                                               long long n, int log) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * n;
  float *yr = y + r * n;
  float m = sf_neg_inf();
  for (long long i = threadIdx.x; i < n; i += SF_NB)
    m = xr[i] > m ? xr[i] : m;
  m = sf_block_max(m);
  if (m == sf_neg_inf())
    m = 0.0f;
  float s = 0.0f;
  for (long long i = threadIdx.x; i < n; i += SF_NB)
    s += expf(xr[i] - m);
  s = sf_block_sum(s);
  if (log) {
    float ls = logf(s);
    for (long long i = threadIdx.x; i < n; i += SF_NB)
      yr[i] = (xr[i] - m) - ls;
  } else {
    float inv = 1.0f / s;
    for (long long i = threadIdx.x; i < n; i += SF_NB)
      yr[i] = expf(xr[i] - m) * inv;
  }
}

// The same over a middle axis of an (outer, n, inner) block: one thread per
// (o, j) column, walking its n values inner apart.
extern "C" __global__ void sf_nnl_softmax_inner(const float *x, float *y, long long outer,
                                                long long n, long long inner, int log) {
  long long c = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (c >= outer * inner)
    return;
  long long base = (c / inner) * n * inner + c % inner;
  float m = sf_neg_inf();
  for (long long i = 0; i < n; i++)
    m = x[base + i * inner] > m ? x[base + i * inner] : m;
  if (m == sf_neg_inf())
    m = 0.0f;
  float s = 0.0f;
  for (long long i = 0; i < n; i++)
    s += expf(x[base + i * inner] - m);
  if (log) {
    float ls = logf(s);
    for (long long i = 0; i < n; i++)
      y[base + i * inner] = (x[base + i * inner] - m) - ls;
  } else {
    float inv = 1.0f / s;
    for (long long i = 0; i < n; i++)
      y[base + i * inner] = expf(x[base + i * inner] - m) * inv;
  }
}

// Backward from the saved output y: softmax dx = y (g - Σ g y),
// log_softmax dx = g - exp(y) Σ g.
extern "C" __global__ void sf_nnl_softmax_bw_last(const float *y, const float *g, float *dx,
                                                  long long rows, long long n, int log) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *yr = y + r * n, *gr = g + r * n;
  float *d = dx + r * n;
  float s = 0.0f;
  for (long long i = threadIdx.x; i < n; i += SF_NB)
    s += log ? gr[i] : gr[i] * yr[i];
  s = sf_block_sum(s);
  for (long long i = threadIdx.x; i < n; i += SF_NB)
    d[i] = log ? gr[i] - expf(yr[i]) * s : yr[i] * (gr[i] - s);
}

extern "C" __global__ void sf_nnl_softmax_bw_inner(const float *y, const float *g, float *dx,
                                                   long long outer, long long n,
                                                   long long inner, int log) {
  long long c = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (c >= outer * inner)
    return;
  long long base = (c / inner) * n * inner + c % inner;
  float s = 0.0f;
  for (long long i = 0; i < n; i++) {
    long long k = base + i * inner;
    s += log ? g[k] : g[k] * y[k];
  }
  for (long long i = 0; i < n; i++) {
    long long k = base + i * inner;
    dx[k] = log ? g[k] - expf(y[k]) * s : y[k] * (g[k] - s);
  }
}

// Attention's softmax over rows of s keys (scores (B, H, T, S) flattened,
// per_batch = H * T rows per batch row): softmax(x * scale) with the keys
// whose mask entry (B, S) is 0 at probability 0; a row with no key left is
// zeros, as the CPU and torch give.  Without a mask (has_mask 0) mask is
// any valid device pointer, never read.  causal: row r is query r % t,
// which sees keys 0 .. s - t + r % t only.
extern "C" __global__ void sf_nnl_attn_softmax(const float *x, float *y, const long long *mask,
                                               int has_mask, long long rows, long long s,
                                               long long per_batch, float scale, long long t,
                                               int causal) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * s;
  float *yr = y + r * s;
  const long long *mr = has_mask ? mask + (r / per_batch) * s : 0;
  long long lim = causal ? s - t + r % t + 1 : s;
  float m = sf_neg_inf();
  for (long long j = threadIdx.x; j < s; j += SF_NB) {
    float v = ((!mr || mr[j]) && j < lim) ? xr[j] * scale : sf_neg_inf();
    m = v > m ? v : m;
  }
  m = sf_block_max(m);
  if (m == sf_neg_inf()) {
    for (long long j = threadIdx.x; j < s; j += SF_NB)
      yr[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (long long j = threadIdx.x; j < s; j += SF_NB)
    if ((!mr || mr[j]) && j < lim)
      sum += expf(xr[j] * scale - m);
  sum = sf_block_sum(sum);
  float inv = 1.0f / sum;
  for (long long j = threadIdx.x; j < s; j += SF_NB)
    yr[j] = ((!mr || mr[j]) && j < lim) ? expf(xr[j] * scale - m) * inv : 0.0f;
}

// dx = scale y (g - Σ g y) per row; masked keys have y = 0 and get 0.
extern "C" __global__ void sf_nnl_attn_softmax_bw(const float *y, const float *g, float *dx,
                                                  long long rows, long long s, float scale) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *yr = y + r * s, *gr = g + r * s;
  float *d = dx + r * s;
  float dot = 0.0f;
  for (long long j = threadIdx.x; j < s; j += SF_NB)
    dot += gr[j] * yr[j];
  dot = sf_block_sum(dot);
  for (long long j = threadIdx.x; j < s; j += SF_NB)
    d[j] = scale * yr[j] * (gr[j] - dot);
}

// -------------------------------------------------------- cross-entropy

// Per row of logits (rows, C): (1 - eps) nll + eps (lse - mean x) into
// loss[r], 0 for a row whose target is ignore.
extern "C" __global__ void sf_nnl_ce_rows(const float *x, const long long *tg, float *loss,
                                          long long rows, long long c, long long ignore,
                                          float eps) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  long long t = tg[r];
  if (t == ignore) {
    if (threadIdx.x == 0)
      loss[r] = 0.0f;
    return;
  }
  const float *xr = x + r * c;
  float m = sf_neg_inf();
  for (long long i = threadIdx.x; i < c; i += SF_NB)
    m = xr[i] > m ? xr[i] : m;
  m = sf_block_max(m);
  float s = 0.0f, sum = 0.0f;
  for (long long i = threadIdx.x; i < c; i += SF_NB) {
    s += expf(xr[i] - m);
    sum += xr[i];
  }
  s = sf_block_sum(s);
  sum = sf_block_sum(sum);
  if (threadIdx.x == 0) {
    float lse = m + logf(s);
    float nll = lse - xr[t], smooth = lse - sum / (float)c;
    loss[r] = (1.0f - eps) * nll + eps * smooth;
  }
}

// out[0] = Σ loss / used in one block (used = 0 gives nan, as torch).
// used is counted on the host from the targets the host checked, so the
// loss needs no read-back.
extern "C" __global__ void sf_nnl_ce_total(const float *loss, float *out, long long rows,
                                           long long used) {
  float s = 0.0f;
  for (long long i = threadIdx.x; i < rows; i += SF_NB)
    s += loss[i];
  s = sf_block_sum(s);
  if (threadIdx.x == 0)
    out[0] = s / (float)used;
}

// d logits = g[0] (softmax - q) / used on rows kept, 0 on ignored rows; q
// the one-hot target smoothed by eps.
extern "C" __global__ void sf_nnl_ce_bw(const float *x, const long long *tg, const float *g,
                                        float *dx, long long rows, long long c, long long ignore,
                                        float eps, long long used) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * c;
  float *d = dx + r * c;
  long long t = tg[r];
  if (t == ignore) {
    for (long long i = threadIdx.x; i < c; i += SF_NB)
      d[i] = 0.0f;
    return;
  }
  float m = sf_neg_inf();
  for (long long i = threadIdx.x; i < c; i += SF_NB)
    m = xr[i] > m ? xr[i] : m;
  m = sf_block_max(m);
  if (m == sf_neg_inf())
    m = 0.0f;
  float s = 0.0f;
  for (long long i = threadIdx.x; i < c; i += SF_NB)
    s += expf(xr[i] - m);
  s = sf_block_sum(s);
  float inv = 1.0f / s, scale = g[0] / (float)used;
  for (long long i = threadIdx.x; i < c; i += SF_NB) {
    float q = eps / (float)c + (i == t ? 1.0f - eps : 0.0f);
    d[i] = (expf(xr[i] - m) * inv - q) * scale;
  }
}

// ----------------------------------------------------------- layer norm

// Per row of x (rows, d): y = (x - mean) rstd w + b, rstd = 1/sqrt(var +
// eps) with the biased variance (two passes, as the CPU), and (mean, rstd)
// into stats (rows, 2).
extern "C" __global__ void sf_nnl_ln_fwd(const float *x, const float *w, const float *b,
                                         float *y, float *stats, long long rows, long long d,
                                         float eps) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * d;
  float s = 0.0f;
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    s += xr[j];
  float mean = sf_block_sum(s) / (float)d;
  float ss = 0.0f;
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    ss += (xr[j] - mean) * (xr[j] - mean);
  float rstd = 1.0f / sqrtf(sf_block_sum(ss) / (float)d + eps);
  if (threadIdx.x == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    y[r * d + j] = ((xr[j] - mean) * rstd) * w[j] + b[j];
}

// Rotary embeddings (runtime/nn/rope.c): a thread per (row, pair i) of
// (B·H·T, D), row r at position pos0 + r % T; sign -1 rotates back (the
// backward).  The angle in f32 as the CPU's.
extern "C" __global__ void sf_nnl_rope(const float *x, float *y, long long n, long long T,
                                       long long D, long long pos0, float theta, float sign) {
  long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n)
    return;
  long long half = D / 2, r = k / half, i = k % half;
  float pos = (float)(pos0 + r % T);
  float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D);
  float a = pos * inv, co = cosf(a), si = sign * sinf(a);
  const float *xr = x + r * D;
  float x0 = xr[i], x1 = xr[i + half];
  y[r * D + i] = x0 * co - x1 * si;
  y[r * D + i + half] = x1 * co + x0 * si;
}

// RMSNorm (runtime/nn/norm.c): a block per row, y = x rstd w with
// rstd = 1/sqrt(mean(x²) + eps) kept per row.
extern "C" __global__ void sf_nnl_rms_fwd(const float *x, const float *w, float *y, float *rstd,
                                          long long rows, long long d, float eps) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * d;
  float ss = 0.0f;
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    ss += xr[j] * xr[j];
  float rs = 1.0f / sqrtf(sf_block_sum(ss) / (float)d + eps);
  if (threadIdx.x == 0)
    rstd[r] = rs;
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    y[r * d + j] = (xr[j] * rs) * w[j];
}

// dx = rstd (ĝ - x̂ mean(ĝ x̂)), x̂ = x rstd, ĝ = g w: a block per row.
extern "C" __global__ void sf_nnl_rms_bw_dx(const float *x, const float *w, const float *g,
                                            const float *rstd, float *dx, long long rows,
                                            long long d) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * d, *gr = g + r * d;
  float rs = rstd[r], s = 0.0f;
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    s += (gr[j] * w[j]) * (xr[j] * rs);
  float m = sf_block_sum(s) / (float)d;
  for (long long j = threadIdx.x; j < d; j += SF_NB)
    dx[r * d + j] = rs * (gr[j] * w[j] - (xr[j] * rs) * m);
}

// dw[j] = Σ_rows g x̂: a thread per column, the rows in order.
extern "C" __global__ void sf_nnl_rms_bw_dw(const float *x, const float *g, const float *rstd,
                                            float *dw, long long rows, long long d) {
  long long j = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (j >= d)
    return;
  float s = 0.0f;
  for (long long r = 0; r < rows; r++)
    s += g[r * d + j] * (x[r * d + j] * rstd[r]);
  dw[j] = s;
}

// dx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂)) with x̂ = (x - mean) rstd, ĝ = g w.
extern "C" __global__ void sf_nnl_ln_bw_dx(const float *x, const float *w, const float *g,
                                           const float *stats, float *dx, long long rows,
                                           long long d) {
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * d, *gr = g + r * d;
  float mean = stats[2 * r], rstd = stats[2 * r + 1], sg = 0.0f, sgx = 0.0f;
  for (long long j = threadIdx.x; j < d; j += SF_NB) {
    float xh = (xr[j] - mean) * rstd, gh = gr[j] * w[j];
    sg += gh;
    sgx += gh * xh;
  }
  sg = sf_block_sum(sg) / (float)d;
  sgx = sf_block_sum(sgx) / (float)d;
  for (long long j = threadIdx.x; j < d; j += SF_NB) {
    float xh = (xr[j] - mean) * rstd, gh = gr[j] * w[j];
    dx[r * d + j] = rstd * (gh - sg - xh * sgx);
  }
}

// Partial dw = Σ g x̂ and db = Σ g over block blk's rows [blk per, (blk+1)
// per), one thread per (blk, column): part (nblk, 2, d).  A fixed split of
// the rows, so the sums do not depend on scheduling.
extern "C" __global__ void sf_nnl_ln_bw_part(const float *x, const float *g, const float *stats,
                                             float *part, long long rows, long long d,
                                             long long per, long long nblk) {
  long long c = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (c >= nblk * d)
    return;
  long long blk = c / d, j = c % d, r1 = (blk + 1) * per < rows ? (blk + 1) * per : rows;
  float pw = 0.0f, pb = 0.0f;
  for (long long r = blk * per; r < r1; r++) {
    float gv = g[r * d + j];
    pw += gv * ((x[r * d + j] - stats[2 * r]) * stats[2 * r + 1]);
    pb += gv;
  }
  part[blk * 2 * d + j] = pw;
  part[blk * 2 * d + d + j] = pb;
}

extern "C" __global__ void sf_nnl_ln_bw_sum(const float *part, float *dw, float *db, long long d,
                                            long long nblk) {
  long long j = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (j >= d)
    return;
  float sw = 0.0f, sb = 0.0f;
  for (long long k = 0; k < nblk; k++) {
    sw += part[k * 2 * d + j];
    sb += part[k * 2 * d + d + j];
  }
  dw[j] = sw;
  db[j] = sb;
}

// ------------------------------------------------------------ embedding

// out (count, dim) = w's rows at ids; ids were range-checked on the host.
extern "C" __global__ void sf_nnl_gather(const float *w, const long long *ids, float *out,
                                         long long count, long long dim) {
  long long i = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (i >= count * dim)
    return;
  out[i] = w[ids[i / dim] * dim + i % dim];
}

// dw (zeroed) += g's rows at ids: a repeated id adds from several threads,
// hence atomicAdd (the order of those adds is the device's).
extern "C" __global__ void sf_nnl_scatter_add(const float *g, const long long *ids, float *dw,
                                              long long count, long long dim) {
  long long i = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (i >= count * dim)
    return;
  atomicAdd(&dw[ids[i / dim] * dim + i % dim], g[i]);
}

// --------------------------------------------------------------- dropout

#define SF_PCG_MULT 6364136223846793005ULL

// PCG32's state after k steps from state with increment inc (Brown's
// jump-ahead: the affine map of 2^b steps squared bit by bit).
__device__ static unsigned long long sf_pcg_jump(unsigned long long state,
                                                 unsigned long long inc, unsigned long long k) {
  unsigned long long am = 1ULL, ap = 0ULL, cm = SF_PCG_MULT, cp = inc;
  while (k) {
    if (k & 1ULL) {
      am *= cm;
      ap = ap * cm + cp;
    }
    cp = (cm + 1ULL) * cp;
    cm *= cm;
    k >>= 1;
  }
  return am * state + ap;
}

// The output of PCG32 (XSH RR) from a state, as runtime/nn/std.c's.
__device__ static unsigned sf_pcg_out(unsigned long long old) {
  unsigned x = (unsigned)(((old >> 18u) ^ old) >> 27u);
  unsigned rot = (unsigned)(old >> 59u);
  return (x >> rot) | (x << ((0u - rot) & 31u));
}

// mask[i] = keep where the draw u_i >= p, else 0, and y = x * mask, over n
// values in rows of per: row r's draws are the stream whose start state
// and increment are st[2r], st[2r+1] (one row for a whole-tensor mask).
// u = (out >> 8) 2^-24, so u >= p is (out >> 8) >= thr with thr = ceil(p
// 2^24), computed on the host: the same decision as the CPU's, bit for bit.
extern "C" __global__ void sf_nnl_dropout(const float *x, float *mask, float *y,
                                          const unsigned long long *st, long long n,
                                          long long per, unsigned long long thr, float keep) {
  long long i = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (i >= n)
    return;
  long long r = i / per;
  unsigned long long s = sf_pcg_jump(st[2 * r], st[2 * r + 1], (unsigned long long)(i - r * per));
  float m = (unsigned long long)(sf_pcg_out(s) >> 8) >= thr ? keep : 0.0f;
  mask[i] = m;
  y[i] = x[i] * m;
}

// ---------------------------------------------------------------- argmax

// The first index of the maximum (a NaN counts as the largest, the first
// one wins), as the CPU's reduce_block: true when (v, i) beats (bv, bi).
__device__ static bool sf_beats(float v, long long i, float bv, long long bi) {
  if (sf_isnan(bv))
    return sf_isnan(v) && i < bi;
  if (sf_isnan(v))
    return true;
  return v > bv || (v == bv && i < bi);
}

extern "C" __global__ void sf_nnl_argmax_last(const float *x, long long *idx, long long rows,
                                              long long n) {
  __shared__ float sv[SF_NB];
  __shared__ long long si[SF_NB];
  long long r = blockIdx.x;
  if (r >= rows)
    return;
  const float *xr = x + r * n;
  float bv = sf_neg_inf();
  long long bi = n; // none yet: any element beats it
  for (long long i = threadIdx.x; i < n; i += SF_NB)
    if (bi == n || sf_beats(xr[i], i, bv, bi)) {
      bv = xr[i];
      bi = i;
    }
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (unsigned w = SF_NB / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      long long oi = si[threadIdx.x + w];
      if (oi < n && (si[threadIdx.x] == n || sf_beats(sv[threadIdx.x + w], oi, sv[threadIdx.x],
                                                      si[threadIdx.x]))) {
        sv[threadIdx.x] = sv[threadIdx.x + w];
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    idx[r] = si[0];
}

extern "C" __global__ void sf_nnl_argmax_inner(const float *x, long long *idx, long long outer,
                                               long long n, long long inner) {
  long long c = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (c >= outer * inner)
    return;
  long long base = (c / inner) * n * inner + c % inner, bi = 0;
  float bv = x[base];
  for (long long i = 1; i < n; i++) {
    float v = x[base + i * inner];
    if (v > bv || (sf_isnan(v) && !sf_isnan(bv))) {
      bv = v;
      bi = i;
    }
  }
  idx[c] = bi;
}

// ------------------------------------------------------------ nd copy

// Shapes and strides (in floats) of a strided copy, mirrored in
// gpu_layers.c.
struct sf_nnl_nd {
  int ndim;
  long long shape[8];
  long long src_st[8];
  long long dst_st[8];
};

// dst = src element by element over n = Π shape values, both addressed by
// their own strides (a view into cat's result, a transposed input, ...).
extern "C" __global__ void sf_nnl_copy_nd(const float *src, float *dst, long long n,
                                          struct sf_nnl_nd nd) {
  long long i = (long long)blockIdx.x * SF_NB + threadIdx.x;
  if (i >= n)
    return;
  long long rest = i, so = 0, dof = 0;
  for (int k = nd.ndim - 1; k >= 0; k--) {
    long long c = rest % nd.shape[k];
    rest /= nd.shape[k];
    so += c * nd.src_st[k];
    dof += c * nd.dst_st[k];
  }
  dst[dof] = src[so];
}
