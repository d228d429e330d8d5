/*
 * gpu_internal.h — the GPU layer's internal surface (prefix `sf__`):
 * NVRTC and the kernel cache, the driver API
 * and device arrays, and the BLAS back ends.  One small header for the one
 * concern, beside internal.h.
 *
 * Key design choice: no CUDA header is included anywhere in the runtime.
 * The few driver, NVRTC and cuBLAS types and constants used are declared
 * here with their documented ABI values, and every library is dlopen'ed,
 * so libsflowrt.a builds the same with or without a CUDA toolkit and a
 * compiled program starts on any machine.
 */
#ifndef SF_GPU_INTERNAL_H
#define SF_GPU_INTERNAL_H

#include "internal.h"

/* ----------------------------------------------------------- nvrtc.c */

typedef struct {
  void *data;
  size_t len;
} sf__blob;
void sf__blob_free(sf__blob *b);

/* Loads NVRTC once (thread-safe).  False, with the reason in err, when it
 * cannot be found; SFLOW_NVRTC names the library explicitly. */
bool sf__nvrtc_load(char *err, size_t n);
/* major * 1000 + minor * 10, as CUDA_VERSION; 0 when not loaded. */
int sf__nvrtc_version(void);
/* Compiles one CUDA C program to a CUBIN for arch ("sm_90").  On failure
 * returns false and sets *log (malloc'ed: NVRTC's log or the reason). */
bool sf__nvrtc_compile(const char *src, const char *name, const char *arch, sf__blob *out,
                       char **log);
/* The same through the on-disk cache (sf__kernel_cache_dir()): a valid
 * entry is read back, a missing or corrupt one is compiled and written
 * atomically (temporary file, then rename), so concurrent processes share
 * it safely.  *hit says which happened. */
bool sf__kernel_image(const char *src, const char *name, const char *arch, sf__blob *out,
                      bool *hit, char **log);
/* $SFLOW_KERNEL_CACHE, else $XDG_CACHE_HOME/sflow/kernels, else
 * ~/.cache/sflow/kernels. */
const char *sf__kernel_cache_dir(void);
/* The hex cache key of a program for arch (source, target, options and the
 * NVRTC version). */
void sf__kernel_cache_key(const char *src, const char *arch, char out[65]);

/* ------------------------------------------------------------- gpu.c */

/* Which copy of an array is current (sf_array.where). */
enum { SF__WHERE_HOST = 0, SF__WHERE_BOTH = 1, SF__WHERE_DEVICE = 2 };

typedef struct {
  uint64_t h2d_bytes, d2h_bytes;     /* array data moved over PCIe */
  uint64_t gpu_launches, cpu_launches;
  uint64_t compiles, cache_hits;     /* kernels compiled by NVRTC / loaded from the cache */
  double compile_ms, load_ms;        /* time in NVRTC / reading the cache and loading */
  uint64_t gpu_matmuls, cpu_matmuls;
} sf__gpu_stats_t;
extern sf__gpu_stats_t sf__gpu_stats;
/* Counters are bumped from several threads (group members launch at once). */
#define SF__GPU_STAT_ADD(field, v) __atomic_fetch_add(&sf__gpu_stats.field, (v), __ATOMIC_RELAXED)

/* Is a GPU usable?  The first call loads libcuda and picks device 0
 * ($SFLOW_DEVICE overrides, $SFLOW_NO_GPU=1 forces the CPU); without a GPU
 * it prints the one-line notice, or with --require-gpu raises a runtime
 * error at loc. */
bool sf__gpu_ready(const sf_loc *loc);
const char *sf__gpu_arch(void); /* "sm_90", of this thread's device */
/* The device this thread works on: SFLOW_DEVICE, or a group member's own
 * (see gpu.c), as set by the last sf__gpu_ready on the thread. */
int32_t sf__gpu_current_device(void);
/* Makes device k (one that holds an array already) this thread's device. */
void sf__gpu_use_device(int32_t k);
const char *sf__gpu_unavailable_reason(void);
/* The device copy of a, made current (copied over when the host copy is
 * newer).  A device pointer as an integer; 0 for an empty array. */
uint64_t sf__gpu_device_copy(sf_array *a, const sf_loc *loc);
/* A fresh device buffer for a, without copying (a is about to be written
 * whole on the device). */
uint64_t sf__gpu_device_alloc(sf_array *a, const sf_loc *loc);
/* Marks a's device copy as the only current one, and remembers a until the
 * next sf_gpu_settle on this thread. */
void sf__gpu_device_wrote(sf_array *a);
void sf__gpu_touch(sf_array *a);
void sf__gpu_array_free(sf_array *a);
/* The ordinal of the GPU that holds a's device copy (nccl.c: NCCL needs
 * one GPU per member). */
int32_t sf__gpu_array_device(const sf_array *a);
/* Reports a failed driver call: "what: the driver's message". */
_Noreturn void sf__cuda_fail(const char *what, int rc, const sf_loc *loc);
void sf__gpu_sync(const sf_loc *loc);
/* A driver entry point by name (after sf__gpu_ready), for blas.c and the
 * GPU tests. */
void *sf__cuda_sym(const char *name);
/* Loads the module of a CUDA C program through the cache and returns its
 * function `entry` (a CUfunction) and the block size the occupancy API
 * suggests. */
void *sf__gpu_function(const char *src, const char *entry, int *block, const sf_loc *loc);
/* Launches f over n threads in 1-D blocks with the given parameter
 * pointers, and waits. */
void sf__gpu_launch(void *f, int block, int64_t n, void **params, const sf_loc *loc);

/* ------------------------------------------------------------ blas.c */

/* C = A (m×k) · B (k×n), row-major, on the CPU: OpenBLAS (or another
 * CBLAS) when one loads, else the reference loop. */
void sf__gemm_cpu(bool f64, const void *a, const void *b, void *c, int64_t m, int64_t k,
                  int64_t n);
const char *sf__blas_name(void); /* "OpenBLAS", "reference" */

/* --------------------------------------------------------- kernels.c */

/* The library kernels (the .cu files of kernels/), embedded at build time. */
typedef struct {
  const char *name, *file, *text;
  size_t len;
} sf__kernel_source;
extern const sf__kernel_source sf__kernel_sources[];
const sf__kernel_source *sf__kernel_source_find(const char *name);

#endif
