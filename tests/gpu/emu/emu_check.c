/*
 * emu_check.c — the host emulator's own checks (ctest gpu_emu/self): the
 * library is dlopen'ed as gpu.c does and driven through the driver, NVRTC
 * and cuBLAS entry points alone, so that what docs/testing.md promises of
 * it holds: barriers, shared memory, atomics, PTX exit, parameters of
 * every kind unpacked by type, 3-D grids; the errors it must report (no
 * context, bad copies and frees, host pointers given to a kernel, a
 * deadlocked barrier, a trap, a write past the end of a buffer, a launch
 * on the wrong device, out of memory); NVRTC's log and its module cache;
 * cuBLAS against plain loops in every transpose, batched, bf16 and TF32;
 * its in-process NCCL over two threads on two devices.  With --async
 * (ctest gpu_emu/self_async) it checks the asynchronous mode instead
 * (SFLOW_EMU_ASYNC=1): work waits in its stream's queue until CUDA makes
 * the host wait, and runs then, in order.
 *
 *   emu_check path/to/libsflow_emu.so [--async]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int passed, failed;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (cond) {                                           \
      passed++;                                           \
    } else {                                              \
      failed++;                                           \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                \
      printf("\n");                                       \
    }                                                     \
  } while (0)

static void *lib;
static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    printf("FAIL: the emulator lacks %s\n", name);
    exit(1);
  }
  return p;
}

typedef uint64_t dptr;
static int (*cuInit)(unsigned);
static int (*cuDeviceGetCount)(int *);
static int (*cuDeviceGetAttribute)(int *, int, int);
static int (*cuDeviceGetName)(char *, int, int);
static int (*cuDevicePrimaryCtxRetain)(void **, int);
static int (*cuCtxSetCurrent)(void *);
static int (*cuMemAlloc)(dptr *, size_t);
static int (*cuMemFree)(dptr);
static int (*cuMemcpyHtoD)(dptr, const void *, size_t);
static int (*cuMemcpyDtoH)(void *, dptr, size_t);
static int (*cuMemsetD32)(dptr, unsigned, size_t);
static int (*cuMemGetInfo)(size_t *, size_t *);
static int (*cuModuleLoadData)(void **, const void *);
static int (*cuModuleGetFunction)(void **, void *, const char *);
static int (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void *, void **, void **);
static int (*cuStreamSynchronize)(void *);
static int (*nvrtcCreateProgram)(void **, const char *, const char *, int, const char *const *,
                                 const char *const *);
static int (*nvrtcCompileProgram)(void *, int, const char *const *);
static int (*nvrtcGetProgramLogSize)(void *, size_t *);
static int (*nvrtcGetProgramLog)(void *, char *);
static int (*nvrtcGetCUBINSize)(void *, size_t *);
static int (*nvrtcGetCUBIN)(void *, char *);
static int (*nvrtcDestroyProgram)(void **);

static void load(const char *path) {
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("FAIL: %s\n", dlerror());
    exit(1);
  }
#define S(v, name) *(void **)&v = sym(name)
  S(cuInit, "cuInit");
  S(cuDeviceGetCount, "cuDeviceGetCount");
  S(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  S(cuDeviceGetName, "cuDeviceGetName");
  S(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  S(cuCtxSetCurrent, "cuCtxSetCurrent");
  S(cuMemAlloc, "cuMemAlloc_v2");
  S(cuMemFree, "cuMemFree_v2");
  S(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  S(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  S(cuMemsetD32, "cuMemsetD32_v2");
  S(cuMemGetInfo, "cuMemGetInfo_v2");
  S(cuModuleLoadData, "cuModuleLoadData");
  S(cuModuleGetFunction, "cuModuleGetFunction");
  S(cuLaunchKernel, "cuLaunchKernel");
  S(cuStreamSynchronize, "cuStreamSynchronize");
  S(nvrtcCreateProgram, "nvrtcCreateProgram");
  S(nvrtcCompileProgram, "nvrtcCompileProgram");
  S(nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
  S(nvrtcGetProgramLog, "nvrtcGetProgramLog");
  S(nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
  S(nvrtcGetCUBIN, "nvrtcGetCUBIN");
  S(nvrtcDestroyProgram, "nvrtcDestroyProgram");
#undef S
}

/* Compiles src; returns the image (malloc'ed) or NULL with the log in *log. */
static char *compile(const char *src, const char *name, char **log) {
  void *p;
  nvrtcCreateProgram(&p, src, name, 0, NULL, NULL);
  const char *opts[] = {"--gpu-architecture=sm_90", "-std=c++17", "-default-device", "-DSCALE=3"};
  int rc = nvrtcCompileProgram(p, 4, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(p, &n);
  *log = malloc(n);
  nvrtcGetProgramLog(p, *log);
  char *img = NULL;
  if (rc == 0) {
    nvrtcGetCUBINSize(p, &n);
    img = malloc(n);
    nvrtcGetCUBIN(p, img);
  }
  nvrtcDestroyProgram(&p);
  return img;
}

static const char *SRC =
    "struct nd { int ndim; long long shape[4]; };\n"
    "__device__ static float twice(float x) { return 2.0f * x; }\n"
    "// A block-wide sum over a 2-D block, through shared memory.\n"
    "extern \"C\" __global__ void block_sum(const float *x, float *out) {\n"
    "  __shared__ float s[1024];\n"
    "  unsigned t = threadIdx.y * blockDim.x + threadIdx.x, n = blockDim.x * blockDim.y;\n"
    "  s[t] = x[blockIdx.x * n + t];\n"
    "  __syncthreads();\n"
    "  for (unsigned w = n / 2; w > 0; w >>= 1) {\n"
    "    if (t < w) s[t] += s[t + w];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (t == 0) out[blockIdx.x] = s[0];\n"
    "}\n"
    "extern \"C\" __global__ void count(float *c, unsigned long long *u, int *mx) {\n"
    "  atomicAdd(c, 1.0f);\n"
    "  atomicAdd(u, 2ull);\n"
    "  atomicMax(mx, (int)(blockIdx.x * blockDim.x + threadIdx.x));\n"
    "}\n"
    "// Odd threads end with PTX exit, as the compiler's failed checks do.\n"
    "extern \"C\" __global__ void evens(int *x) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i & 1) asm volatile(\"exit;\");\n"
    "  x[i] = SCALE * i;\n"
    "}\n"
    "extern \"C\" __global__ void deadlock(int *x) {\n"
    "  if (threadIdx.x == 3) return;\n"
    "  __syncthreads();\n"
    "  x[threadIdx.x] = 1;\n"
    "}\n"
    "extern \"C\" __global__ void trap(int *x) { if (threadIdx.x == 1) __trap(); x[0] = 1; }\n"
    "extern \"C\" __global__ void overrun(float *x, long long n) { x[n + threadIdx.x] = 1.0f; }\n"
    "// Parameters of every kind, and a struct by value.\n"
    "extern \"C\" __global__ void params(char c, short h, double d, nd s, long long *out) {\n"
    "  out[0] = c; out[1] = h; out[2] = (long long)(d * 4); out[3] = s.ndim;\n"
    "  out[4] = s.shape[0] + s.shape[3];\n"
    "  out[5] = (long long)twice(min(1.5f, 2)) + max(3, 4ll);\n"
    "}\n"
    "extern \"C\" __global__ void grid3(int *out) {\n"
    "  int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;\n"
    "  int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;\n"
    "  out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;\n"
    "}\n"
    "template <typename T> __global__ void templ(T *x) { x[0] = 1; }\n"
    "__device__ int counter;\n"
    "extern \"C\" __global__ void bump(int *out) { *out = ++counter; }\n"
    "#define DIV(name, T) extern \"C\" __global__ void name(long long n, T *x, T by) {\\\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] /= by; }\n"
    "DIV(div_f32, float)\n";

static int launch(void *f, unsigned g, unsigned b, void **p) {
  return cuLaunchKernel(f, g, 1, 1, b, 1, 1, 0, NULL, p, NULL);
}

static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strlen(e->d_name) > strlen(suffix) &&
        !strcmp(e->d_name + strlen(e->d_name) - strlen(suffix), suffix))
      n++;
  if (d)
    closedir(d);
  return n;
}

static void check_driver(void) {
  dptr p = 0;
  CHECK(cuMemAlloc(&p, 16) == 3, "alloc before cuInit must be CUDA_ERROR_NOT_INITIALIZED");
  CHECK(cuInit(0) == 0, "cuInit");
  int n = 0, maj = 0, min = 0;
  cuDeviceGetCount(&n);
  CHECK(n == 2, "SFLOW_EMU_DEVICES=2 gives %d devices", n);
  cuDeviceGetAttribute(&maj, 75, 0);
  cuDeviceGetAttribute(&min, 76, 0);
  CHECK(maj == 9 && min == 0, "compute capability %d.%d", maj, min);
  char name[128];
  cuDeviceGetName(name, sizeof name, 0);
  CHECK(strstr(name, "not a GPU") != NULL, "device name '%s'", name);
  CHECK(cuMemAlloc(&p, 16) == 201, "alloc without a context must be CUDA_ERROR_INVALID_CONTEXT");
  void *ctx0, *ctx1;
  cuDevicePrimaryCtxRetain(&ctx0, 0);
  cuDevicePrimaryCtxRetain(&ctx1, 1);
  cuCtxSetCurrent(ctx0);
  CHECK(cuMemAlloc(&p, 100) == 0, "alloc");
  unsigned v = 0;
  CHECK(cuMemcpyDtoH(&v, p, 4) == 0 && v == 0xffffffffu, "fresh memory reads 0xff bytes: %x", v);
  char buf[200] = {0};
  CHECK(cuMemcpyHtoD(p, buf, 101) == 1, "a copy one byte past the end must fail");
  CHECK(cuMemcpyHtoD(p + 50, buf, 50) == 0, "a copy ending at the end");
  CHECK(cuMemcpyDtoH(buf, (dptr)(uintptr_t)buf, 4) == 1, "a host pointer as a device source");
  CHECK(cuMemsetD32(p + 2, 0, 1) == 1, "a misaligned memset of 32-bit words");
  CHECK(cuMemFree(p + 4) == 1, "a free inside an allocation");
  CHECK(cuMemFree(p) == 0, "free");
  CHECK(cuMemFree(p) == 1, "a double free");
  CHECK(cuStreamSynchronize((void *)buf) == 400, "a stream that is not one");
  size_t fr = 0, tot = 0;
  cuMemGetInfo(&fr, &tot);
  CHECK(tot == (size_t)64 << 20, "SFLOW_EMU_MEM_MB=64: total %zu", tot);
  CHECK(cuMemAlloc(&p, (size_t)65 << 20) == 2, "an allocation past the memory must be out of memory");
}

static void check_kernels(void) {
  char *log;
  char *img = compile(SRC, "emu_check.cu", &log);
  CHECK(img != NULL, "the test program compiles: %s", log);
  free(log);
  if (!img)
    return;
  void *ctx0, *ctx1, *mod, *f;
  cuDevicePrimaryCtxRetain(&ctx0, 0);
  cuDevicePrimaryCtxRetain(&ctx1, 1);
  cuCtxSetCurrent(ctx0);
  CHECK(cuModuleLoadData(&mod, img) == 0, "module load");
  CHECK(cuModuleGetFunction(&f, mod, "templ") == 500, "a template kernel has no plain name");
  CHECK(cuModuleGetFunction(&f, mod, "nope") == 500, "a missing kernel");

  /* block_sum over 3 blocks of 16x8 threads */
  enum { B = 128, G = 3 };
  float x[B * G], out[G];
  double want[G] = {0};
  for (int i = 0; i < B * G; i++)
    x[i] = (float)((i * 7) % 13), want[i / B] += x[i];
  dptr dx, dout;
  cuMemAlloc(&dx, sizeof x);
  cuMemAlloc(&dout, sizeof out);
  cuMemcpyHtoD(dx, x, sizeof x);
  cuModuleGetFunction(&f, mod, "block_sum");
  void *p1[] = {&dx, &dout};
  CHECK(cuLaunchKernel(f, G, 1, 1, 16, 8, 1, 0, NULL, p1, NULL) == 0, "block_sum launch");
  cuMemcpyDtoH(out, dout, sizeof out);
  for (int i = 0; i < G; i++)
    CHECK(out[i] == (float)want[i], "block %d sum %g, want %g", i, out[i], want[i]);

  /* atomics over 5 blocks of 64 */
  dptr dc, du, dm;
  cuMemAlloc(&dc, 4);
  cuMemAlloc(&du, 8);
  cuMemAlloc(&dm, 4);
  float zero = 0;
  unsigned long long uz = 0;
  int mz = -1;
  cuMemcpyHtoD(dc, &zero, 4);
  cuMemcpyHtoD(du, &uz, 8);
  cuMemcpyHtoD(dm, &mz, 4);
  cuModuleGetFunction(&f, mod, "count");
  void *p2[] = {&dc, &du, &dm};
  CHECK(launch(f, 5, 64, p2) == 0, "count launch");
  float c;
  cuMemcpyDtoH(&c, dc, 4);
  cuMemcpyDtoH(&uz, du, 8);
  cuMemcpyDtoH(&mz, dm, 4);
  CHECK(c == 320.0f && uz == 640 && mz == 319, "atomics: %g %llu %d", c, uz, mz);

  /* PTX exit, and a -D option */
  int xs[256];
  dptr dxs;
  cuMemAlloc(&dxs, sizeof xs);
  cuMemsetD32(dxs, 7, 256);
  cuModuleGetFunction(&f, mod, "evens");
  void *p3[] = {&dxs};
  CHECK(launch(f, 2, 128, p3) == 0, "evens launch");
  cuMemcpyDtoH(xs, dxs, sizeof xs);
  int bad = 0;
  for (int i = 0; i < 256; i++)
    bad += xs[i] != ((i & 1) ? 7 : 3 * i);
  CHECK(bad == 0, "%d elements wrong after PTX exit", bad);

  /* errors */
  cuModuleGetFunction(&f, mod, "deadlock");
  CHECK(launch(f, 1, 32, p3) == 719, "a barrier some threads never reach is a launch failure");
  cuModuleGetFunction(&f, mod, "trap");
  CHECK(launch(f, 1, 4, p3) == 719, "__trap() is a launch failure");
  int host = 0;
  int *hp = &host;
  void *p4[] = {&hp};
  cuModuleGetFunction(&f, mod, "evens");
  CHECK(launch(f, 1, 2, p4) == 700, "a host pointer parameter is an illegal address");
  CHECK(launch(f, 1, 2, NULL) == 1, "no kernelParams for a kernel with parameters");
  CHECK(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, p3, NULL) == 1, "a block of 2048 threads");
  cuCtxSetCurrent(ctx1);
  CHECK(launch(f, 1, 2, p3) == 400, "a launch on a device that did not load the module");
  void *mod1;
  CHECK(cuModuleLoadData(&mod1, img) == 0, "the module loads on device 1 too");
  cuModuleGetFunction(&f, mod1, "evens");
  CHECK(launch(f, 1, 2, p3) == 700, "device 0's memory given to a kernel on device 1");
  /* A module's globals are per device: device 1's counter starts again. */
  dptr dcount1;
  cuMemAlloc(&dcount1, 4);
  void *pg[] = {&dcount1};
  cuModuleGetFunction(&f, mod1, "bump");
  launch(f, 1, 1, pg);
  int got1 = 0;
  cuMemcpyDtoH(&got1, dcount1, 4);
  cuCtxSetCurrent(ctx0);
  dptr dcount0;
  cuMemAlloc(&dcount0, 4);
  void *pg0[] = {&dcount0};
  cuModuleGetFunction(&f, mod, "bump");
  launch(f, 1, 1, pg0);
  launch(f, 1, 1, pg0);
  int got0 = 0;
  cuMemcpyDtoH(&got0, dcount0, 4);
  CHECK(got1 == 1 && got0 == 2, "module globals per device: %d on device 1, %d on device 0", got1,
        got0);

  /* parameters of every kind */
  struct {
    int ndim;
    long long shape[4];
  } s = {3, {10, 0, 0, 5}};
  char ch = -5;
  short sh = 300;
  double d = 2.25;
  long long o[6];
  dptr dov;
  cuMemAlloc(&dov, sizeof o);
  cuModuleGetFunction(&f, mod, "params");
  void *p5[] = {&ch, &sh, &d, &s, &dov};
  CHECK(launch(f, 1, 1, p5) == 0, "params launch");
  cuMemcpyDtoH(o, dov, sizeof o);
  CHECK(o[0] == -5 && o[1] == 300 && o[2] == 9 && o[3] == 3 && o[4] == 15 && o[5] == 7,
        "params: %lld %lld %lld %lld %lld %lld", o[0], o[1], o[2], o[3], o[4], o[5]);

  /* a 3-D grid of 3-D blocks */
  int g3[2 * 3 * 2 * 24];
  dptr dg3;
  cuMemAlloc(&dg3, sizeof g3);
  cuModuleGetFunction(&f, mod, "grid3");
  void *p6[] = {&dg3};
  CHECK(cuLaunchKernel(f, 2, 3, 2, 4, 3, 2, 0, NULL, p6, NULL) == 0, "grid3 launch");
  cuMemcpyDtoH(g3, dg3, sizeof g3);
  bad = 0;
  for (int i = 0; i < (int)(sizeof g3 / sizeof *g3); i++)
    bad += g3[i] != (i / 24) * 1000 + i % 24;
  CHECK(bad == 0, "%d elements of the 3-D grid wrong", bad);

  /* a kernel made by a macro */
  cuModuleGetFunction(&f, mod, "div_f32");
  float fx[4] = {2, 4, 6, 8}, by = 2;
  long long n4 = 4;
  cuMemcpyHtoD(dx, fx, sizeof fx);
  void *p7[] = {&n4, &dx, &by};
  CHECK(launch(f, 1, 256, p7) == 0, "div_f32 launch");
  cuMemcpyDtoH(fx, dx, sizeof fx);
  CHECK(fx[0] == 1 && fx[3] == 4, "div_f32: %g %g", fx[0], fx[3]);

  /* a write past the end of a buffer: the guard page, in a child */
  fflush(stdout);
  int pipefd[2];
  if (pipe(pipefd) == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipefd[1], 2);
      dptr small;
      cuMemAlloc(&small, 4096);
      long long len = 1024;
      cuModuleGetFunction(&f, mod, "overrun");
      void *p8[] = {&small, &len};
      launch(f, 1, 1024, p8);
      _exit(0);
    }
    close(pipefd[1]);
    char msg[4096] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof msg - 1 && (r = read(pipefd[0], msg + got, sizeof msg - 1 - got)) > 0)
      got += (size_t)r;
    close(pipefd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "the overrun must end in SIGSEGV (status %d)", st);
    CHECK(strstr(msg, "kernel 'overrun' crashed") && strstr(msg, "past the end of the allocation of 4096 bytes"),
          "the crash message: %s", msg);
  }
  free(img);
}

static void check_nvrtc(const char *cache) {
  char *log;
  char *img = compile("extern \"C\" __global__ void k(float *x) { x[0] = undefined_name; }\n",
                      "bad.cu", &log);
  CHECK(img == NULL, "a program with an error does not compile");
  CHECK(strstr(log, "bad.cu:1:") && strstr(log, "undefined_name") && !strstr(log, ".work-"),
        "the log names the program and the error: %s", log);
  free(log);
  free(img);
  /* The module cache: the same program is never compiled twice. */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/emu", cache);
  int before = count_files(dir, ".so");
  img = compile(SRC, "again.cu", &log);
  free(log);
  CHECK(img && count_files(dir, ".so") == before, "a program compiled before is not compiled again");
  /* A cleaned module cache: the image rebuilds its module. */
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -f %s/*.so", dir);
  CHECK(system(cmd) == 0, "rm");
  void *mod, *f;
  CHECK(img && cuModuleLoadData(&mod, img) == 0, "an image whose module was removed rebuilds it");
  CHECK(cuModuleGetFunction(&f, mod, "grid3") == 0, "and its functions load");
  free(img);
}

/* -------------------------------------------------------------- cuBLAS */

static int (*cublasCreate)(void **);
static int (*cublasSetMathMode)(void *, int);
static int (*cublasSgemm)(void *, int, int, int, int, int, const float *, const float *, int,
                          const float *, int, const float *, float *, int);
static int (*cublasDgemm)(void *, int, int, int, int, int, const double *, const double *, int,
                          const double *, int, const double *, double *, int);
static int (*cublasSgemmStridedBatched)(void *, int, int, int, int, int, const float *,
                                        const float *, int, long long, const float *, int,
                                        long long, const float *, float *, int, long long, int);
static int (*cublasGemmEx)(void *, int, int, int, int, int, const void *, const void *, int, int,
                           const void *, int, int, const void *, void *, int, int, int, int);
static int (*cublasSgemmBatched)(void *, int, int, int, int, int, const float *,
                                 const float *const *, int, const float *const *, int,
                                 const float *, float *const *, int, int);
static int (*cublasLtCreate)(void **);
static int (*cublasLtMatmulDescCreate)(void **, int, int);
static int (*cublasLtMatmulDescSetAttribute)(void *, int, const void *, size_t);
static int (*cublasLtMatrixLayoutCreate)(void **, int, uint64_t, uint64_t, int64_t);
static int (*cublasLtMatmul)(void *, void *, const void *, const void *, void *, const void *,
                             void *, const void *, const void *, void *, void *, void *,
                             const void *, void *, size_t, void *);

/* The reference: column-major, op by flag, float sums over p in order. */
static void ref(int ta, int tb, int m, int n, int k, float al, const float *A, int lda,
                const float *B, int ldb, float be, float *C, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float acc = 0;
      for (int p = 0; p < k; p++)
        acc += (ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
      C[i + j * ldc] = be == 0 ? al * acc : al * acc + be * C[i + j * ldc];
    }
}

static uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static dptr upload(const void *p, size_t n) {
  dptr d;
  cuMemAlloc(&d, n);
  cuMemcpyHtoD(d, p, n);
  return d;
}

static void check_cublas(void) {
  *(void **)&cublasCreate = sym("cublasCreate_v2");
  *(void **)&cublasSetMathMode = sym("cublasSetMathMode");
  *(void **)&cublasSgemm = sym("cublasSgemm_v2");
  *(void **)&cublasDgemm = sym("cublasDgemm_v2");
  *(void **)&cublasSgemmStridedBatched = sym("cublasSgemmStridedBatched");
  *(void **)&cublasGemmEx = sym("cublasGemmEx");
  *(void **)&cublasSgemmBatched = sym("cublasSgemmBatched");
  *(void **)&cublasLtCreate = sym("cublasLtCreate");
  *(void **)&cublasLtMatmulDescCreate = sym("cublasLtMatmulDescCreate");
  *(void **)&cublasLtMatmulDescSetAttribute = sym("cublasLtMatmulDescSetAttribute");
  *(void **)&cublasLtMatrixLayoutCreate = sym("cublasLtMatrixLayoutCreate");
  *(void **)&cublasLtMatmul = sym("cublasLtMatmul");
  void *ctx0;
  cuDevicePrimaryCtxRetain(&ctx0, 0);
  cuCtxSetCurrent(ctx0);
  void *h;
  CHECK(cublasCreate(&h) == 0, "cublasCreate");
  enum { M = 5, N = 4, K = 3, LD = 7 };
  float A[LD * LD], B[LD * LD], C[LD * LD], R[LD * LD];
  for (int i = 0; i < LD * LD; i++)
    A[i] = (float)((i * 37) % 11) / 7.0f - 0.5f, B[i] = (float)((i * 53) % 13) / 9.0f - 0.7f,
    C[i] = (float)(i % 5);
  dptr dA = upload(A, sizeof A), dB = upload(B, sizeof B), dC;
  float al = 1.5f, be = 0.5f;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      dC = upload(C, sizeof C);
      memcpy(R, C, sizeof C);
      CHECK(cublasSgemm(h, ta, tb, M, N, K, &al, (float *)dA, LD, (float *)dB, LD, &be,
                        (float *)dC, LD) == 0, "sgemm %d %d", ta, tb);
      float got[LD * LD];
      cuMemcpyDtoH(got, dC, sizeof got);
      ref(ta, tb, M, N, K, al, A, LD, B, LD, be, R, LD);
      CHECK(!memcmp(got, R, sizeof R), "sgemm %d %d differs from the loop", ta, tb);
      cuMemFree(dC);
    }
  /* beta 0 overwrites NaN */
  float nan[LD * LD];
  for (int i = 0; i < LD * LD; i++)
    nan[i] = NAN;
  dC = upload(nan, sizeof nan);
  float zero = 0;
  cublasSgemm(h, 0, 0, M, N, K, &al, (float *)dA, LD, (float *)dB, LD, &zero, (float *)dC, LD);
  float got[LD * LD];
  cuMemcpyDtoH(got, dC, sizeof got);
  CHECK(!isnan(got[0]) && isnan(got[M]), "beta 0 overwrites C within m rows only");
  /* errors */
  CHECK(cublasSgemm(h, 0, 0, M, N, K, &al, (float *)dA, M - 1, (float *)dB, LD, &be, (float *)dC,
                    LD) == 7, "lda < m is CUBLAS_STATUS_INVALID_VALUE");
  CHECK(cublasSgemm(h, 0, 0, M, N, K, &al, A, LD, (float *)dB, LD, &be, (float *)dC, LD) == 13,
        "a host matrix fails");
  /* double */
  double dAd[M * K], dBd[K * N], dCd[M * N], one = 1, dz = 0;
  for (int i = 0; i < M * K; i++)
    dAd[i] = i * 0.25;
  for (int i = 0; i < K * N; i++)
    dBd[i] = 1.0 / (i + 1);
  dptr a64 = upload(dAd, sizeof dAd), b64 = upload(dBd, sizeof dBd), c64;
  cuMemAlloc(&c64, sizeof dCd);
  CHECK(cublasDgemm(h, 0, 0, M, N, K, &one, (double *)a64, M, (double *)b64, K, &dz,
                    (double *)c64, M) == 0, "dgemm");
  cuMemcpyDtoH(dCd, c64, sizeof dCd);
  double want = 0;
  for (int p = 0; p < K; p++)
    want += dAd[2 + p * M] * dBd[p + 1 * K];
  CHECK(fabs(dCd[2 + 1 * M] - want) < 1e-15, "dgemm C[2,1] %g want %g", dCd[2 + M], want);
  /* strided batched: two products in one call */
  float A2[2 * M * K], B2[2 * K * N], C2[2 * M * N], R2[2 * M * N];
  for (int i = 0; i < 2 * M * K; i++)
    A2[i] = (float)(i % 7) - 3;
  for (int i = 0; i < 2 * K * N; i++)
    B2[i] = (float)(i % 5) * 0.5f;
  dptr a2 = upload(A2, sizeof A2), b2 = upload(B2, sizeof B2), c2;
  cuMemAlloc(&c2, sizeof C2);
  float f1 = 1;
  CHECK(cublasSgemmStridedBatched(h, 0, 0, M, N, K, &f1, (float *)a2, M, M * K, (float *)b2, K,
                                  K * N, &zero, (float *)c2, M, M * N, 2) == 0, "batched");
  cuMemcpyDtoH(C2, c2, sizeof C2);
  for (int b = 0; b < 2; b++)
    ref(0, 0, M, N, K, 1, A2 + b * M * K, M, B2 + b * K * N, K, 0, R2 + b * M * N, M);
  CHECK(!memcmp(C2, R2, sizeof R2), "strided batched differs from the loop");
  /* pointer arrays (cublasSgemmBatched): the two products in reverse order,
   * their pointers in device memory; a host pointer array fails */
  uint64_t ptr[6] = {a2 + M * K * 4, a2, b2 + K * N * 4, b2, c2, c2 + M * N * 4};
  dptr dptrs = upload(ptr, sizeof ptr);
  cuMemsetD32(c2, 0, 2 * M * N);
  CHECK(cublasSgemmBatched(h, 0, 0, M, N, K, &f1, (const float *const *)dptrs, M,
                           (const float *const *)(dptrs + 16), K, &zero,
                           (float *const *)(dptrs + 32), M, 2) == 0, "batched over pointers");
  cuMemcpyDtoH(C2, c2, sizeof C2);
  CHECK(!memcmp(C2, R2 + M * N, M * N * 4) && !memcmp(C2 + M * N, R2, M * N * 4),
        "batched over pointers: product i is A[i] B[i] into C[i]");
  CHECK(cublasSgemmBatched(h, 0, 0, M, N, K, &f1, (const float *const *)ptr, M,
                           (const float *const *)(dptrs + 16), K, &zero,
                           (float *const *)(dptrs + 32), M, 2) == 13,
        "batched over pointers: a host pointer array fails");
  /* cuBLASLt with the BIAS epilogue: C = A B + bias (one value per row) */
  {
    void *lh, *desc, *la, *lb, *lc;
    float bias[M], Rb[M * N], Cl[M * N];
    for (int i = 0; i < M; i++)
      bias[i] = 0.25f * (float)i - 0.5f;
    dptr dbias = upload(bias, sizeof bias), dcl;
    cuMemAlloc(&dcl, sizeof Cl);
    int32_t opn = 0, opt = 1;
    uint32_t epi = 4;
    void *bp = (void *)dbias;
    CHECK(cublasLtCreate(&lh) == 0 && cublasLtMatmulDescCreate(&desc, 68, 0) == 0,
          "cublasLt handle and descriptor");
    cublasLtMatmulDescSetAttribute(desc, 3, &opn, 4);
    cublasLtMatmulDescSetAttribute(desc, 4, &opt, 4);
    cublasLtMatmulDescSetAttribute(desc, 7, &epi, 4);
    cublasLtMatmulDescSetAttribute(desc, 8, &bp, sizeof bp);
    cublasLtMatrixLayoutCreate(&la, 0, M, K, LD);
    cublasLtMatrixLayoutCreate(&lb, 0, N, K, LD); /* B stored N x K, used transposed */
    cublasLtMatrixLayoutCreate(&lc, 0, M, N, M);
    CHECK(cublasLtMatmul(lh, desc, &f1, (void *)dA, la, (void *)dB, lb, &zero, (void *)dcl, lc,
                         (void *)dcl, lc, NULL, NULL, 0, NULL) == 0, "cublasLtMatmul with a bias");
    cuMemcpyDtoH(Cl, dcl, sizeof Cl);
    ref(0, 1, M, N, K, 1, A, LD, B, LD, 0, Rb, M);
    bool ok = true;
    for (int j = 0; j < N; j++)
      for (int i = 0; i < M; i++)
        ok &= Cl[i + j * M] == Rb[i + j * M] + bias[i];
    CHECK(ok, "cublasLtMatmul BIAS: the product plus bias[row], one rounding each");
    /* BGRADB: the same product, and B's sums over k (one per column) into the vector */
    uint32_t bgradb = 512;
    cublasLtMatmulDescSetAttribute(desc, 7, &bgradb, 4);
    CHECK(cublasLtMatmul(lh, desc, &f1, (void *)dA, la, (void *)dB, lb, &zero, (void *)dcl, lc,
                         (void *)dcl, lc, NULL, NULL, 0, NULL) == 0, "cublasLtMatmul BGRADB");
    float sums[N], Cg[M * N];
    cuMemcpyDtoH(sums, dbias, N * 4);
    cuMemcpyDtoH(Cg, dcl, sizeof Cg);
    ok = !memcmp(Cg, Rb, sizeof Cg);
    for (int j = 0; j < N; j++) {
      float s = 0;
      for (int p = 0; p < K; p++)
        s += B[j + p * LD]; /* op(B) = Bᵀ: op(B)[p][j] = B[j][p] */
      ok &= sums[j] == s;
    }
    CHECK(ok, "cublasLtMatmul BGRADB: the product, and op(B) summed over k per column");
    uint32_t relu = 2;
    cublasLtMatmulDescSetAttribute(desc, 7, &relu, 4);
    CHECK(cublasLtMatmul(lh, desc, &f1, (void *)dA, la, (void *)dB, lb, &zero, (void *)dcl, lc,
                         (void *)dcl, lc, NULL, NULL, 0, NULL) == 15,
          "an epilogue the emulator does not run is CUBLAS_STATUS_NOT_SUPPORTED");
  }
  /* GemmEx: bf16 inputs, f32 and bf16 outputs */
  uint16_t Ab[M * K], Bb[K * N], Cb[M * N];
  float Af[M * K], Bf[K * N], Cf[M * N], Rf[M * N];
  for (int i = 0; i < M * K; i++)
    Ab[i] = bf16(A[i] * 1.337f), Af[i] = from_bf16(Ab[i]);
  for (int i = 0; i < K * N; i++)
    Bb[i] = bf16(B[i] * 0.77f), Bf[i] = from_bf16(Bb[i]);
  dptr ab = upload(Ab, sizeof Ab), bb = upload(Bb, sizeof Bb), cf, cb;
  cuMemAlloc(&cf, sizeof Cf);
  cuMemAlloc(&cb, sizeof Cb);
  CHECK(cublasGemmEx(h, 0, 0, M, N, K, &f1, (void *)ab, 14, M, (void *)bb, 14, K, &zero,
                     (void *)cf, 0, M, 68, -1) == 0, "GemmEx bf16 -> f32");
  cuMemcpyDtoH(Cf, cf, sizeof Cf);
  ref(0, 0, M, N, K, 1, Af, M, Bf, K, 0, Rf, M);
  CHECK(!memcmp(Cf, Rf, sizeof Rf), "GemmEx bf16 differs from the loop over the bf16 values");
  CHECK(cublasGemmEx(h, 0, 0, M, N, K, &f1, (void *)ab, 14, M, (void *)bb, 14, K, &zero,
                     (void *)cb, 14, M, 68, -1) == 0, "GemmEx bf16 -> bf16");
  cuMemcpyDtoH(Cb, cb, sizeof Cb);
  bool same = true;
  for (int i = 0; i < M * N; i++)
    same &= Cb[i] == bf16(Rf[i]);
  CHECK(same, "GemmEx bf16 output is the rounded f32 result");
  CHECK(cublasGemmEx(h, 0, 0, M, N, K, &f1, (void *)ab, 14, M, (void *)bb, 14, K, &zero,
                     (void *)cf, 0, M, 0, -1) == 15, "a cudaDataType as the compute type");
  CHECK(cublasGemmEx(h, 0, 0, M, N, K, &f1, (void *)ab, 2, M, (void *)bb, 2, K, &zero,
                     (void *)cf, 0, M, 68, -1) == 15, "f16 inputs are not emulated");
  /* TF32: inputs rounded to 10 mantissa bits when the math mode asks */
  float a1[1] = {1.0f + 1.0f / 4096}, b1[1] = {1.0f}, c1;
  dptr da1 = upload(a1, 4), db1 = upload(b1, 4), dc1;
  cuMemAlloc(&dc1, 4);
  cublasSgemm(h, 0, 0, 1, 1, 1, &f1, (float *)da1, 1, (float *)db1, 1, &zero, (float *)dc1, 1);
  cuMemcpyDtoH(&c1, dc1, 4);
  CHECK(c1 == a1[0], "f32 keeps every bit: %.9g", c1);
  cublasSetMathMode(h, 3);
  cublasSgemm(h, 0, 0, 1, 1, 1, &f1, (float *)da1, 1, (float *)db1, 1, &zero, (float *)dc1, 1);
  cuMemcpyDtoH(&c1, dc1, 4);
  CHECK(c1 == 1.0f, "TF32 rounds 1 + 2^-12 to 1: %.9g", c1);
}

/* ---------------------------------------------------------------- NCCL */

typedef struct {
  unsigned char b[128];
} nid;
static int (*ncclGetUniqueId)(nid *);
static int (*ncclCommInitRankConfig)(void **, int, nid, int, void *);
static int (*ncclCommGetAsyncError)(void *, int *);
static int (*ncclAllReduce)(const void *, void *, size_t, int, int, void *, void *);
static int (*ncclBroadcast)(const void *, void *, size_t, int, int, void *, void *);
static int (*ncclAllGather)(const void *, void *, size_t, int, void *, void *);
static int (*ncclCommDestroy)(void *);
static int (*cuStreamCreate)(void **, unsigned);
static int (*cuStreamQuery)(void *);

typedef struct {
  int rank;
  nid id;
  pthread_barrier_t *bar;
  float sum[3], avg[3], bc[3], gather[6];
  int st_before, st_after, bad_rc, bad_async, host_rc, st_bad;
} rank_job;

static void *rank_main(void *p) {
  rank_job *j = p;
  void *ctx, *comm, *s;
  cuDevicePrimaryCtxRetain(&ctx, j->rank);
  cuCtxSetCurrent(ctx);
  struct { size_t size; unsigned magic, version; int blocking; } cfg = {sizeof cfg, 0xcafebeefu, 21400, 0};
  ncclCommInitRankConfig(&comm, 2, j->id, j->rank, &cfg);
  int st = 7;
  while (st == 7)
    ncclCommGetAsyncError(comm, &st);
  cuStreamCreate(&s, 1);
  float x[3] = {1.0f + j->rank, 10.0f * (j->rank + 1), -3.0f};
  dptr d, g;
  cuMemAlloc(&d, sizeof x);
  cuMemAlloc(&g, 2 * sizeof x);
  cuMemcpyHtoD(d, x, sizeof x);
  if (j->rank == 1)
    pthread_barrier_wait(j->bar); /* rank 0 has enqueued and queried */
  ncclAllReduce((void *)d, (void *)d, 3, 7, 0, comm, s);
  if (j->rank == 0) {
    j->st_before = cuStreamQuery(s); /* rank 1 has not enqueued yet */
    pthread_barrier_wait(j->bar);
  }
  while (cuStreamQuery(s) == 600)
    ;
  cuMemcpyDtoH(j->sum, d, sizeof x);
  cuMemcpyHtoD(d, x, sizeof x);
  ncclAllReduce((void *)d, (void *)d, 3, 7, 4, comm, s); /* ncclAvg */
  cuStreamSynchronize(s);
  cuMemcpyDtoH(j->avg, d, sizeof x);
  cuMemcpyHtoD(d, x, sizeof x);
  ncclBroadcast((void *)d, (void *)d, 3, 7, 1, comm, s);
  cuStreamSynchronize(s);
  cuMemcpyDtoH(j->bc, d, sizeof x);
  cuMemcpyHtoD(d, x, sizeof x);
  ncclAllGather((void *)d, (void *)g, 3, 7, comm, s);
  cuStreamSynchronize(s);
  j->st_after = cuStreamQuery(s);
  cuMemcpyDtoH(j->gather, g, 2 * sizeof x);
  if (j->rank == 1) { /* a host buffer: refused, and nothing enqueued */
    float h = 0;
    j->host_rc = ncclAllReduce(&h, &h, 1, 7, 0, comm, s);
  }
  /* the ranks disagree on the count: an error for both */
  j->bad_rc = ncclAllReduce((void *)d, (void *)d, j->rank ? 2 : 3, 7, 0, comm, s);
  pthread_barrier_wait(j->bar);
  ncclCommGetAsyncError(comm, &j->bad_async);
  j->st_bad = cuStreamQuery(s);
  pthread_barrier_wait(j->bar);
  ncclCommDestroy(comm);
  return NULL;
}

static void check_nccl(void) {
  *(void **)&ncclGetUniqueId = sym("ncclGetUniqueId");
  *(void **)&ncclCommInitRankConfig = sym("ncclCommInitRankConfig");
  *(void **)&ncclCommGetAsyncError = sym("ncclCommGetAsyncError");
  *(void **)&ncclAllReduce = sym("ncclAllReduce");
  *(void **)&ncclBroadcast = sym("ncclBroadcast");
  *(void **)&ncclAllGather = sym("ncclAllGather");
  *(void **)&ncclCommDestroy = sym("ncclCommDestroy");
  *(void **)&cuStreamCreate = sym("cuStreamCreate");
  *(void **)&cuStreamQuery = sym("cuStreamQuery");
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  rank_job j[2] = {{.rank = 0, .bar = &bar}, {.rank = 1, .bar = &bar}};
  ncclGetUniqueId(&j[0].id);
  j[1].id = j[0].id;
  pthread_t t[2];
  for (int r = 0; r < 2; r++)
    pthread_create(&t[r], NULL, rank_main, &j[r]);
  for (int r = 0; r < 2; r++)
    pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++) {
    CHECK(j[r].sum[0] == 3 && j[r].sum[1] == 30 && j[r].sum[2] == -6, "rank %d sum %g %g %g", r,
          j[r].sum[0], j[r].sum[1], j[r].sum[2]);
    CHECK(j[r].avg[0] == 1.5f && j[r].avg[1] == 15, "rank %d avg %g %g", r, j[r].avg[0], j[r].avg[1]);
    CHECK(j[r].bc[0] == 2 && j[r].bc[1] == 20, "rank %d broadcast %g %g", r, j[r].bc[0], j[r].bc[1]);
    CHECK(j[r].gather[0] == 1 && j[r].gather[3] == 2 && j[r].gather[4] == 20,
          "rank %d gather %g %g %g", r, j[r].gather[0], j[r].gather[3], j[r].gather[4]);
    CHECK(j[r].st_after == 0, "rank %d stream ready after the collectives", r);
  }
  CHECK(j[0].st_before == 600, "a stream is not ready before every rank enqueued (%d)", j[0].st_before);
  CHECK(j[1].host_rc == 1, "a host buffer is an unhandled CUDA error (%d)", j[1].host_rc);
  CHECK((j[0].bad_rc | j[1].bad_rc) == 5, "mismatched counts are invalid usage (%d %d)",
        j[0].bad_rc, j[1].bad_rc);
  CHECK(j[0].bad_async == 5 && j[1].bad_async == 5, "and both communicators report it (%d %d)",
        j[0].bad_async, j[1].bad_async);
  CHECK(j[0].st_bad == 0 && j[1].st_bad == 0, "their streams do not wait for it (%d %d)",
        j[0].st_bad, j[1].st_bad);
}

/* SFLOW_EMU_ASYNC=1: a device pointer is a host address, so what has run
 * can be seen without a copy, which would run the queue. */
static void check_async(void) {
  int (*cuStreamCreate)(void **, unsigned) = sym("cuStreamCreate");
  int (*cuMemcpyDtoD)(dptr, dptr, size_t) = sym("cuMemcpyDtoD_v2");
  int (*cuCtxSynchronize)(void) = sym("cuCtxSynchronize");
  void *ctx, *mod, *evens, *trap;
  CHECK(cuInit(0) == 0, "cuInit");
  cuDevicePrimaryCtxRetain(&ctx, 0);
  cuCtxSetCurrent(ctx);
  char *log;
  char *img = compile(SRC, "async.cu", &log);
  CHECK(img != NULL, "compile: %s", log);
  if (!img)
    return;
  cuModuleLoadData(&mod, img);
  cuModuleGetFunction(&evens, mod, "evens");
  cuModuleGetFunction(&trap, mod, "trap");
  dptr d, d2, d3;
  cuMemAlloc(&d, 64 * sizeof(int));
  cuMemAlloc(&d2, 64 * sizeof(int));
  cuMemAlloc(&d3, 64 * sizeof(int));
  int *x = (int *)(uintptr_t)d, h[64];
  /* A memset and a launch are queued; the launch's parameters are copied. */
  CHECK(cuMemsetD32(d, 0, 64) == 0, "memset");
  dptr arg = d;
  void *p[] = {&arg};
  CHECK(launch(evens, 1, 64, p) == 0, "launch");
  arg = d2; /* rewriting the argument after the launch changes nothing */
  CHECK(x[2] == -1 && x[1] == -1, "nothing ran before a wait: %d %d", x[2], x[1]);
  CHECK(cuMemcpyDtoH(h, d, sizeof h) == 0, "DtoH");
  CHECK(h[2] == 6 && h[1] == 0 && h[63] == 0, "DtoH ran the queue in order: %d %d %d", h[2], h[1],
        h[63]);
  CHECK(((int *)(uintptr_t)d2)[2] == -1, "the rewritten argument was not used");
  /* Pageable memory given to cuMemcpyHtoD is staged at the call. */
  int v[64];
  for (int i = 0; i < 64; i++)
    v[i] = 5;
  cuMemcpyHtoD(d2, v, sizeof v);
  v[0] = 7;
  CHECK(((int *)(uintptr_t)d2)[0] == -1, "the HtoD's device write is queued");
  cuMemcpyDtoH(h, d2, sizeof h);
  CHECK(h[0] == 5, "the staged bytes were copied, not the rewritten ones: %d", h[0]);
  /* A non-blocking stream's work is not waited for by the legacy stream. */
  void *nb, *bl;
  cuStreamCreate(&nb, 1);
  cuStreamCreate(&bl, 0);
  arg = d3;
  cuLaunchKernel(evens, 1, 1, 1, 64, 1, 1, 0, nb, p, NULL);
  cuMemcpyDtoH(h, d3, sizeof h);
  CHECK(h[2] == -1, "the legacy stream did not wait for the non-blocking stream: %d", h[2]);
  CHECK(cuStreamSynchronize(nb) == 0 && x[0] == 0 && ((int *)(uintptr_t)d3)[2] == 6,
        "cuStreamSynchronize ran it");
  cuMemsetD32(d3, 9, 64);
  cuLaunchKernel(evens, 1, 1, 1, 64, 1, 1, 0, bl, p, NULL);
  cuMemcpyDtoH(h, d3, sizeof h);
  CHECK(h[2] == 6 && h[1] == 9, "the legacy stream waited for the blocking stream: %d %d", h[2],
        h[1]);
  /* cuMemFree synchronises the device. */
  dptr tmp;
  cuMemAlloc(&tmp, 256);
  cuMemsetD32(d2, 4, 64);
  cuMemcpyDtoD(d, d2, 64 * sizeof(int));
  CHECK(x[0] == 0, "the DtoD is queued");
  CHECK(cuMemFree(tmp) == 0 && x[0] == 4, "cuMemFree ran the queue: %d", x[0]);
  /* A kernel's failure is the error of the next call that waits. */
  CHECK(launch(trap, 1, 4, p) == 0, "a failing launch queues");
  CHECK(cuCtxSynchronize() == 719, "its failure at cuCtxSynchronize");
  CHECK(cuCtxSynchronize() == 0, "reported once");
}

/* Asynchronous mode: freeing memory that a collective still waiting for
 * another rank uses is refused.  Rank 1 joins after rank 0 tried. */
typedef struct {
  nid id;
  int rank, free_rc, sync_rc;
  float got;
  pthread_barrier_t *bar;
} async_rank;
static void *async_rank_main(void *p) {
  async_rank *j = p;
  void *ctx, *comm, *s;
  cuDevicePrimaryCtxRetain(&ctx, j->rank);
  cuCtxSetCurrent(ctx);
  struct { size_t size; unsigned magic, version; int blocking; } cfg = {sizeof cfg, 0xcafebeefu, 21400, 0};
  ncclCommInitRankConfig(&comm, 2, j->id, j->rank, &cfg);
  int st = 7;
  while (st == 7)
    ncclCommGetAsyncError(comm, &st);
  cuStreamCreate(&s, 1);
  float x = 1.0f + j->rank;
  dptr d;
  cuMemAlloc(&d, sizeof x);
  cuMemcpyHtoD(d, &x, sizeof x);
  /* The non-blocking stream does not wait for the copy's device write
   * (queued on the legacy stream): the host waits, as nccl.c does. */
  cuStreamSynchronize(NULL);
  if (j->rank == 1)
    pthread_barrier_wait(j->bar);
  ncclAllReduce((void *)d, (void *)d, 1, 7, 0, comm, s);
  if (j->rank == 0) {
    j->free_rc = cuMemFree(d); /* rank 1 has not joined: still in use */
    pthread_barrier_wait(j->bar);
  }
  j->sync_rc = cuStreamSynchronize(s);
  cuMemcpyDtoH(&j->got, d, sizeof x);
  j->free_rc |= cuMemFree(d) << 16;
  ncclCommDestroy(comm);
  return NULL;
}
static void check_async_nccl(void) {
  *(void **)&ncclGetUniqueId = sym("ncclGetUniqueId");
  *(void **)&ncclCommInitRankConfig = sym("ncclCommInitRankConfig");
  *(void **)&ncclCommGetAsyncError = sym("ncclCommGetAsyncError");
  *(void **)&ncclAllReduce = sym("ncclAllReduce");
  *(void **)&ncclCommDestroy = sym("ncclCommDestroy");
  *(void **)&cuStreamCreate = sym("cuStreamCreate");
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  async_rank j[2] = {{.rank = 0, .bar = &bar}, {.rank = 1, .bar = &bar}};
  ncclGetUniqueId(&j[0].id);
  j[1].id = j[0].id;
  pthread_t t[2];
  for (int r = 0; r < 2; r++)
    pthread_create(&t[r], NULL, async_rank_main, &j[r]);
  for (int r = 0; r < 2; r++)
    pthread_join(t[r], NULL);
  CHECK(j[0].free_rc == 700, "cuMemFree of an unfinished collective's buffer is refused: %#x",
        j[0].free_rc);
  CHECK(j[1].free_rc == 0, "rank 1's free after its collective: %#x", j[1].free_rc);
  CHECK(j[0].sync_rc == 0 && j[1].sync_rc == 0 && j[0].got == 3 && j[1].got == 3,
        "the collective completes: %d %d %g %g", j[0].sync_rc, j[1].sync_rc, j[0].got, j[1].got);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: emu_check path/to/libsflow_emu.so\n");
    return 2;
  }
  char cache[4096];
  snprintf(cache, sizeof cache, "/tmp/sflow-emu-check-%d", (int)getpid());
  setenv("SFLOW_KERNEL_CACHE", cache, 1);
  unsetenv("SFLOW_EMU_CACHE");
  setenv("SFLOW_EMU_DEVICES", "2", 1);
  setenv("SFLOW_EMU_MEM_MB", "64", 1);
  bool async = argc > 2 && !strcmp(argv[2], "--async");
  if (async)
    setenv("SFLOW_EMU_ASYNC", "1", 1);
  else
    unsetenv("SFLOW_EMU_ASYNC");
  load(argv[1]);
  if (async) {
    check_async();
    check_async_nccl();
    printf("emu_check --async: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
  }
  check_driver();
  check_kernels();
  check_nvrtc(cache);
  check_cublas();
  check_nccl();
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
  if (system(cmd) != 0)
    printf("emu_check: could not remove %s\n", cache);
  printf("emu_check: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
