// cuda_shim.h — the CUDA C built-ins on the host, for sflow's host emulator.
//
// The emulator's NVRTC (emu.c) compiles a CUDA C program with the host C++
// compiler, with this header force-included (-include), into a shared
// object that its cuModuleLoadData dlopens.  It is a test tool: kernels run
// on the CPU, and nothing here is a GPU.
//
// Key design choice: the threads of a block are fibers on one OS thread,
// switched only at __syncthreads() and at a thread's end, and blocks run
// one after another.  So `__shared__` is plain static storage (shared by a
// block's threads, reused by the next block), an atomic is an ordinary
// read-modify-write (no fiber runs between its read and its write), and
// __syncthreads() is a real barrier: the calling fiber waits until every
// thread of its block has reached one.  Races, the memory model and warp
// behaviour are therefore NOT emulated (docs/testing.md, "the host
// emulator").
//
// Only what sflow's kernels may use is defined (the contract's list and
// what the compiler's CUDA C emits); anything else (warp shuffles, cuda_fp16,
// extern __shared__, cooperative groups) fails to compile here, loudly.
#ifndef SFLOW_EMU_CUDA_SHIM_H
#define SFLOW_EMU_CUDA_SHIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// ------------------------------------------------------------ vector types
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  operator uint3() const { return uint3{x, y, z}; }
};
#define SF_EMU_VEC2(T, N, A)                                                                    \
  struct alignas(A) N##2 { T x, y; };                                                           \
  static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define SF_EMU_VEC4(T, N, A)                                                                    \
  struct alignas(A) N##4 { T x, y, z, w; };                                                     \
  static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
SF_EMU_VEC2(float, float, 8)
SF_EMU_VEC4(float, float, 16)
SF_EMU_VEC2(int, int, 8)
SF_EMU_VEC4(int, int, 16)
SF_EMU_VEC2(unsigned, uint, 8)
SF_EMU_VEC4(unsigned, uint, 16)
SF_EMU_VEC2(double, double, 16)
SF_EMU_VEC2(long long, longlong, 16)
struct float3 { float x, y, z; };
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
#undef SF_EMU_VEC2
#undef SF_EMU_VEC4

// ------------------------------------------------------ the running thread
// One per module, filled in by the emulator before each fiber runs.
extern "C" {
struct sf_emu_state {
  uint3 threadIdx, blockIdx, blockDim, gridDim;
  void (*sync)(void);                    // __syncthreads: the barrier
  void (*exit_thread)(void);             // PTX exit: this thread ends here
  void (*fail)(const char *what);        // an unsupported construct: the launch fails
  int (*check_ptr)(const void *p, int index); // a pointer parameter: in device memory?
  unsigned long long clock;              // clock64()
};
__attribute__((visibility("hidden"))) struct sf_emu_state sf_emu_state_;
__attribute__((visibility("default"))) struct sf_emu_state *sf_emu_module_state(void) {
  return &sf_emu_state_;
}
#ifdef SF_EMU_SHIM_KEY /* the shim this module was built with (emu.c checks it at load) */
__attribute__((visibility("default"))) const char *sf_emu_shim_key(void) { return SF_EMU_SHIM_KEY; }
#endif
}

#define threadIdx (sf_emu_state_.threadIdx)
#define blockIdx (sf_emu_state_.blockIdx)
#define blockDim (sf_emu_state_.blockDim)
#define gridDim (sf_emu_state_.gridDim)
enum { warpSize = 32 };

// ------------------------------------------------------------- qualifiers
// __global__ expands to an attribute the emulator finds in the
// preprocessed text (the kernels to export); GCC ignores it.
#define __global__ __attribute__((sf_emu_global))
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__
// __restrict__ is a GCC keyword already.

static inline void __syncthreads(void) { sf_emu_state_.sync(); }
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] static inline void __trap(void) {
  sf_emu_state_.fail("__trap()");
  __builtin_unreachable();
}
static inline long long clock64(void) { return (long long)++sf_emu_state_.clock; }

// Inline PTX: only `asm volatile("exit;")` (the compiler's failed checks end
// the thread with it) has a meaning here; any other asm fails the launch.
static inline void sf_emu_asm(const char *text) {
  if (strstr(text, "exit;"))
    sf_emu_state_.exit_thread();
  sf_emu_state_.fail(text);
}
#define asm
#define __asm__
#define volatile(...) sf_emu_asm(#__VA_ARGS__)
#define __volatile__(...) sf_emu_asm(#__VA_ARGS__)

// ---------------------------------------------------------------- atomics
// No other fiber runs inside one of these, so a plain update is atomic.
#define SF_EMU_ATOMIC(name, T, expr)                                                            \
  static inline T name(T *p, T v) {                                                             \
    T old = *p;                                                                                 \
    *p = (expr);                                                                                \
    return old;                                                                                 \
  }
SF_EMU_ATOMIC(atomicAdd, int, old + v)
SF_EMU_ATOMIC(atomicAdd, unsigned, old + v)
SF_EMU_ATOMIC(atomicAdd, unsigned long long, old + v)
SF_EMU_ATOMIC(atomicAdd, float, old + v)
SF_EMU_ATOMIC(atomicAdd, double, old + v)
SF_EMU_ATOMIC(atomicSub, int, old - v)
SF_EMU_ATOMIC(atomicSub, unsigned, old - v)
SF_EMU_ATOMIC(atomicExch, int, v)
SF_EMU_ATOMIC(atomicExch, unsigned, v)
SF_EMU_ATOMIC(atomicExch, unsigned long long, v)
SF_EMU_ATOMIC(atomicExch, float, v)
SF_EMU_ATOMIC(atomicMin, int, v < old ? v : old)
SF_EMU_ATOMIC(atomicMin, unsigned, v < old ? v : old)
SF_EMU_ATOMIC(atomicMin, long long, v < old ? v : old)
SF_EMU_ATOMIC(atomicMin, unsigned long long, v < old ? v : old)
SF_EMU_ATOMIC(atomicMax, int, v > old ? v : old)
SF_EMU_ATOMIC(atomicMax, unsigned, v > old ? v : old)
SF_EMU_ATOMIC(atomicMax, long long, v > old ? v : old)
SF_EMU_ATOMIC(atomicMax, unsigned long long, v > old ? v : old)
SF_EMU_ATOMIC(atomicAnd, int, old & v)
SF_EMU_ATOMIC(atomicAnd, unsigned, old & v)
SF_EMU_ATOMIC(atomicAnd, unsigned long long, old & v)
SF_EMU_ATOMIC(atomicOr, int, old | v)
SF_EMU_ATOMIC(atomicOr, unsigned, old | v)
SF_EMU_ATOMIC(atomicOr, unsigned long long, old | v)
SF_EMU_ATOMIC(atomicXor, int, old ^ v)
SF_EMU_ATOMIC(atomicXor, unsigned, old ^ v)
SF_EMU_ATOMIC(atomicXor, unsigned long long, old ^ v)
SF_EMU_ATOMIC(atomicInc, unsigned, old >= v ? 0u : old + 1u)
SF_EMU_ATOMIC(atomicDec, unsigned, (old == 0u || old > v) ? v : old - 1u)
#undef SF_EMU_ATOMIC
#define SF_EMU_CAS(T)                                                                           \
  static inline T atomicCAS(T *p, T cmp, T v) {                                                 \
    T old = *p;                                                                                 \
    if (old == cmp)                                                                             \
      *p = v;                                                                                   \
    return old;                                                                                 \
  }
SF_EMU_CAS(int)
SF_EMU_CAS(unsigned)
SF_EMU_CAS(unsigned long long)
SF_EMU_CAS(unsigned short)
#undef SF_EMU_CAS

// ------------------------------------------------------------- bit casts
#define SF_EMU_BITCAST(name, From, To)                                                          \
  static inline To name(From x) {                                                               \
    To y;                                                                                       \
    memcpy(&y, &x, sizeof y);                                                                   \
    return y;                                                                                   \
  }
SF_EMU_BITCAST(__float_as_int, float, int)
SF_EMU_BITCAST(__float_as_uint, float, unsigned)
SF_EMU_BITCAST(__int_as_float, int, float)
SF_EMU_BITCAST(__uint_as_float, unsigned, float)
SF_EMU_BITCAST(__double_as_longlong, double, long long)
SF_EMU_BITCAST(__longlong_as_double, long long, double)
#undef SF_EMU_BITCAST
static inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
static inline int __double2loint(double x) { return (int)__double_as_longlong(x); }
static inline double __hiloint2double(int hi, int lo) {
  return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}

// -------------------------------------------------------------------- math
// The fast intrinsics are the accurate functions here (the GPU's are
// approximations: a test that passes here can still differ in low bits).
static inline float sf_emu__expf(float x) { return expf(x); }
static inline float sf_emu__exp10f(float x) { return powf(10.0f, x); }
static inline float sf_emu__logf(float x) { return logf(x); }
static inline float sf_emu__log2f(float x) { return log2f(x); }
static inline float sf_emu__log10f(float x) { return log10f(x); }
static inline float sf_emu__sinf(float x) { return sinf(x); }
static inline float sf_emu__cosf(float x) { return cosf(x); }
static inline float sf_emu__tanf(float x) { return tanf(x); }
static inline void sf_emu__sincosf(float x, float *s, float *c) { *s = sinf(x), *c = cosf(x); }
static inline float sf_emu__powf(float x, float y) { return powf(x, y); }
static inline float sf_emu__fdividef(float x, float y) { return x / y; }
static inline float sf_emu__frcp_rn(float x) { return 1.0f / x; }
static inline float sf_emu__fsqrt_rn(float x) { return sqrtf(x); }
static inline float sf_emu__fadd_rn(float x, float y) { return x + y; }
static inline float sf_emu__fsub_rn(float x, float y) { return x - y; }
static inline float sf_emu__fmul_rn(float x, float y) { return x * y; }
static inline float sf_emu__fdiv_rn(float x, float y) { return x / y; }
static inline float sf_emu__fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline double sf_emu__dadd_rn(double x, double y) { return x + y; }
static inline double sf_emu__dmul_rn(double x, double y) { return x * y; }
static inline double sf_emu__fma_rn(double x, double y, double z) { return fma(x, y, z); }
static inline float sf_emu__saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

static inline int sf_emu__float2int_rn(float x) { return (int)rintf(x); }
static inline int sf_emu__float2int_rz(float x) { return (int)x; }
static inline int sf_emu__float2int_rd(float x) { return (int)floorf(x); }
static inline int sf_emu__float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned sf_emu__float2uint_rn(float x) { return (unsigned)rintf(x); }
static inline unsigned sf_emu__float2uint_rz(float x) { return (unsigned)x; }
static inline long long sf_emu__float2ll_rn(float x) { return (long long)rintf(x); }
static inline long long sf_emu__float2ll_rz(float x) { return (long long)x; }
static inline float sf_emu__int2float_rn(int x) { return (float)x; }
static inline float sf_emu__uint2float_rn(unsigned x) { return (float)x; }
static inline float sf_emu__ll2float_rn(long long x) { return (float)x; }
static inline double sf_emu__int2double_rn(int x) { return (double)x; }
static inline int sf_emu__double2int_rn(double x) { return (int)rint(x); }
static inline int sf_emu__double2int_rz(double x) { return (int)x; }
static inline float sf_emu__double2float_rn(double x) { return (float)x; }

// glibc declares some of these names itself: the shim's are renamed.
#define __expf sf_emu__expf
#define __exp10f sf_emu__exp10f
#define __logf sf_emu__logf
#define __log2f sf_emu__log2f
#define __log10f sf_emu__log10f
#define __sinf sf_emu__sinf
#define __cosf sf_emu__cosf
#define __tanf sf_emu__tanf
#define __sincosf sf_emu__sincosf
#define __powf sf_emu__powf
#define __fdividef sf_emu__fdividef
#define __frcp_rn sf_emu__frcp_rn
#define __fsqrt_rn sf_emu__fsqrt_rn
#define __fadd_rn sf_emu__fadd_rn
#define __fsub_rn sf_emu__fsub_rn
#define __fmul_rn sf_emu__fmul_rn
#define __fdiv_rn sf_emu__fdiv_rn
#define __fmaf_rn sf_emu__fmaf_rn
#define __dadd_rn sf_emu__dadd_rn
#define __dmul_rn sf_emu__dmul_rn
#define __fma_rn sf_emu__fma_rn
#define __saturatef sf_emu__saturatef
#define __float2int_rn sf_emu__float2int_rn
#define __float2int_rz sf_emu__float2int_rz
#define __float2int_rd sf_emu__float2int_rd
#define __float2int_ru sf_emu__float2int_ru
#define __float2uint_rn sf_emu__float2uint_rn
#define __float2uint_rz sf_emu__float2uint_rz
#define __float2ll_rn sf_emu__float2ll_rn
#define __float2ll_rz sf_emu__float2ll_rz
#define __int2float_rn sf_emu__int2float_rn
#define __uint2float_rn sf_emu__uint2float_rn
#define __ll2float_rn sf_emu__ll2float_rn
#define __int2double_rn sf_emu__int2double_rn
#define __double2int_rn sf_emu__double2int_rn
#define __double2int_rz sf_emu__double2int_rz
#define __double2float_rn sf_emu__double2float_rn

// ------------------------------------------------------------ integer ops
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++, x >>= 1)
    r = (r << 1) | (x & 1u);
  return r;
}
static inline int __mul24(int x, int y) { return (int)((long long)((x << 8) >> 8) * ((y << 8) >> 8)); }
static inline unsigned __umul24(unsigned x, unsigned y) { return (x & 0xffffffu) * (y & 0xffffffu); }
static inline int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
static inline unsigned __umulhi(unsigned x, unsigned y) {
  return (unsigned)(((unsigned long long)x * y) >> 32);
}
static inline long long __mul64hi(long long x, long long y) {
  return (long long)(((__int128)x * y) >> 64);
}
static inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
  return (unsigned long long)(((unsigned __int128)x * y) >> 64);
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)((v << (s & 31)) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)(v >> (s & 31));
}

// CUDA's global min/max: any two arithmetic types, in their common type.
template <typename A, typename B> static inline auto min(A a, B b) -> decltype(a < b ? a : b) {
  return a < b ? a : b;
}
template <typename A, typename B> static inline auto max(A a, B b) -> decltype(a > b ? a : b) {
  return a > b ? a : b;
}

template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }

// ------------------------------------------------- the emulator's launcher
// sf_emu_k_<kernel>(params) calls the kernel with cuLaunchKernel's
// `void **params` unpacked by the kernel's own parameter types, and
// sf_emu_c_<kernel>(params) checks its pointer parameters once per launch;
// emu.c appends one pair per `__global__` function it finds.
template <unsigned... I> struct sf_emu_seq {};
template <unsigned N, unsigned... I> struct sf_emu_mkseq : sf_emu_mkseq<N - 1, N - 1, I...> {};
template <unsigned... I> struct sf_emu_mkseq<0, I...> {
  typedef sf_emu_seq<I...> type;
};
template <typename T> struct sf_emu_isptr { static const bool value = false; };
template <typename T> struct sf_emu_isptr<T *> { static const bool value = true; };
template <typename A, unsigned I> static inline int sf_emu_check1(void **p) {
  if constexpr (sf_emu_isptr<A>::value)
    return sf_emu_state_.check_ptr((const void *)*(A *)p[I], (int)I);
  return 0;
}
template <typename... A, unsigned... I>
static inline void sf_emu_call(void (*f)(A...), void **p, sf_emu_seq<I...>) {
  f(*(A *)p[I]...);
}
template <typename... A, unsigned... I>
static inline int sf_emu_check(void (*)(A...), void **p, sf_emu_seq<I...>) {
  if (!p && sizeof...(A) > 0)
    return -1; // parameters but no kernelParams
  return (0 + ... + sf_emu_check1<A, I>(p));
}
#define SF_EMU_KERNEL(name)                                                                     \
  extern "C" __attribute__((visibility("default"))) void sf_emu_k_##name(void **p) {            \
    sf_emu_call(&name, p, sf_emu_mkseq<sf_emu_nparams(&name)>::type());                          \
  }                                                                                             \
  extern "C" __attribute__((visibility("default"))) int sf_emu_c_##name(void **p) {             \
    return sf_emu_check(&name, p, sf_emu_mkseq<sf_emu_nparams(&name)>::type());                  \
  } \
  extern "C" __attribute__((visibility("default"))) unsigned sf_emu_s_##name(unsigned long *s) { \
    return sf_emu_sizes(&name, s);                                                               \
  }
template <typename... A> constexpr unsigned sf_emu_nparams(void (*)(A...)) {
  return sizeof...(A);
}
// The byte size of each parameter (into s when not NULL), so the
// emulator's asynchronous mode copies kernelParams at the launch.
template <typename... A> unsigned sf_emu_sizes(void (*)(A...), unsigned long *s) {
  unsigned i = 0;
  ((s ? (void)(s[i] = sizeof(A)) : (void)0, i++), ...);
  return i;
}

#endif
