/*
 * gpu.h — the GPU layer's internal names (prefix `sf__`): NVRTC and the
 * kernel cache, the driver API and device arrays, the BLAS back ends, the
 * library kernels and NCCL.  Above sched.h, below cluster.h
 * (docs/architecture.md, "Runtime layers"); a section per file.
 *
 * Key design choice: no CUDA header is included anywhere in the runtime.
 * The few driver, NVRTC and cuBLAS types and constants used are declared
 * here with their documented ABI values, and every library is dlopen'ed,
 * so libsflowrt.a builds the same with or without a CUDA toolkit and a
 * compiled program starts on any machine.
 */
#ifndef SF_GPU_H
#define SF_GPU_H

#include "sched.h"

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

/* ------------------------------------------------------------ libs.c */

/* dlopen's one of sonames (best first): $env's file alone when set, else
 * from $CUDA_HOME, $CUDA_PATH, the pip nvidia/NAME/lib folders of the
 * python3 on PATH, the loader's path, /usr/local/cuda/lib64, loading the
 * companions (glob patterns) of the folder first.  The file loaded goes to
 * path; NULL and the reason in why when none loads. */
void *sf__cuda_lib_open(const char *env, const char *const *sonames,
                        const char *const *companions, char *path, size_t pathn, char *why,
                        size_t whyn);
/* The NVRTC file loaded ("" before or without one). */
const char *sf__nvrtc_path(void);
/* "cuBLAS 13.0.2 from FILE", or why there is none (loads cuBLAS). */
void sf__cublas_describe(char *out, size_t n);

/* ------------------------------------------------------------- gpu.c */

typedef struct {
  uint64_t h2d_bytes, d2h_bytes;     /* array data moved over PCIe */
  uint64_t gpu_launches, cpu_launches;
  uint64_t compiles, cache_hits;     /* kernels compiled by NVRTC / loaded from the cache */
  double compile_ms, load_ms;        /* time in NVRTC / reading the cache and loading */
  uint64_t gpu_matmuls, cpu_matmuls;
  /* device->host reads of tensors (runtime/nn/device.c), and of deferred
   * kernel failure records that wait on their own (gpu.c) */
  uint64_t d2h_syncs;
  /* arrays a settle (or a full list) released unread because nothing
   * referred to them any more, and the most arrays one thread's list held
   * (gpu.c, "Arrays touched"): flat as a loop of GPU statements grows */
  uint64_t settle_dropped, pending_peak;
  /* host-to-device copies that made the host wait for the device (a
   * synchronous cuMemcpyHtoD, or a pinned staging buffer still in use),
   * and the bytes of tensors staged through pinned memory (device.c) */
  uint64_t h2d_waits, h2d_pinned;
} sf__gpu_stats_t;
extern sf__gpu_stats_t sf__gpu_stats;
/* Counters are bumped from several threads (group members launch at once). */
#define SF__GPU_STAT_ADD(field, v) __atomic_fetch_add(&sf__gpu_stats.field, (v), __ATOMIC_RELAXED)

/* Is a GPU usable?  The first call loads libcuda and picks device 0
 * ($SFLOW_DEVICE overrides, $SFLOW_NO_GPU=1 forces the CPU); without a GPU
 * it prints the one-line notice, or with --require-gpu raises a runtime
 * error at loc. */
bool sf__gpu_ready(const sf_loc *loc);
/* Installs the GPU layer's hooks in the layers below (main.c, before any
 * thread; the first sf__gpu_ready does it when main.c did not): the
 * array device-free and host-sync hooks (core.h) and the NCCL transport
 * of collectives (sched.h, sf__coll_transports). */
void sf__gpu_install(void);
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

/* How sf_launch reaches a kernel's tensor parameters (SF_TENSOR fields of
 * its argument block).  gpu stands below nn, so the nn layer fills these
 * in (runtime/nn/custom.c, from sf__nn_install); a program that launches
 * a kernel taking tensors always links the nn layer (the compiler's
 * sf__program_links_nn, codegen_task.c), even when it makes no tensor.  `on_gpu` picks
 * the path (the tensor rule: the running call holds a GPU); `begin` gives
 * the argument block the launch uses (owned): on the CPU each tensor slot
 * holds an f32[] header over the tensor's contiguous host values, on the
 * GPU a contiguous tensor whose device address `dptr` gives; `end` marks
 * what the kernel wrote and frees the block. */
/* Kernels that take tensors launch on the GPU without waiting; their
 * failure records are checked later (gpu.c, "deferred kernel checks"):
 * sf__gpu_kcheck at a point that waits anyway (waited: the device is known
 * idle, the read is not counted in d2h_syncs), call_begin/end around each
 * task call and actor method (sf__guarded), call_abandon when the call
 * failed, kcheck_exit at the end of main. */
void sf__gpu_kcheck(bool waited, const sf_loc *loc);
int32_t sf__gpu_call_begin(void);
void sf__gpu_call_end(int32_t was);
void sf__gpu_call_abandon(int32_t was);
void sf__gpu_kcheck_exit(void);
typedef struct sf__kernel_tensors {
  bool (*on_gpu)(const sf_loc *loc);
  void *(*begin)(const sf_kernel_desc *k, void *args, bool gpu, const sf_loc *loc);
  uint64_t (*dptr)(void *tensor, int64_t *numel, const sf_loc *loc);
  void (*end)(const sf_kernel_desc *k, void *blk, bool gpu);
} sf__kernel_tensors;
extern sf__kernel_tensors sf__ktensors;
/* ----------------------------------------------------------- alloc.c */

/* The caching device allocator of tensor storage (alloc.c's comment):
 * requests rounded to 512 B below 1 MiB and to 2 MiB multiples above,
 * free lists per class, out of memory -> the cache freed and one retry. */
typedef struct sf__dalloc_backend {
  int (*alloc)(void *ctx, uint64_t *p, size_t bytes); /* 0 on success, else an error code */
  int (*free)(void *ctx, uint64_t p);
  void *ctx;
} sf__dalloc_backend;
typedef struct {
  uint64_t in_use, cached, peak; /* bytes, rounded */
  uint64_t allocs;               /* backend alloc calls (cuMemAlloc) */
  uint64_t frees;                /* backend free calls (cuMemFree) */
  uint64_t reuses;               /* requests served from the cache */
  uint64_t oom_retries;          /* failed allocations retried after freeing the cache */
} sf__dalloc_stats;
typedef struct sf__dalloc sf__dalloc;
size_t sf__dalloc_round(size_t bytes);
/* cache_bound: bytes the free lists may hold (0: no bound). */
sf__dalloc *sf__dalloc_new(const sf__dalloc_backend *be, size_t cache_bound);
/* A block of at least bytes; 0 with the message in err when even a retry
 * after freeing the cache fails. */
uint64_t sf__dalloc_get(sf__dalloc *a, size_t bytes, char *err, size_t errn);
/* Back to the cache (bytes: as asked for at get). */
void sf__dalloc_put(sf__dalloc *a, uint64_t p, size_t bytes);
void sf__dalloc_trim(sf__dalloc *a); /* every cached block back to the backend */
sf__dalloc_stats sf__dalloc_stats_of(sf__dalloc *a);
void sf__dalloc_free(sf__dalloc *a);
/* The device allocators (one per device, SFLOW_GPU_CACHE_MB bounding each
 * cache): a block on this thread's device, or a runtime error at loc; its
 * return to the cache of device dev; the counters summed over devices. */
uint64_t sf__dev_alloc(size_t bytes, const sf_loc *loc);
void sf__dev_free(uint64_t p, size_t bytes, int32_t dev);
sf__dalloc_stats sf__dev_stats(void);

/* ------------------------------------------------------------ blas.c */

/* C = A (m×k) · B (k×n), row-major, on the CPU: OpenBLAS (or another
 * CBLAS) when one loads, else the reference loop. */
void sf__gemm_cpu(bool f64, const void *a, const void *b, void *c, int64_t m, int64_t k,
                  int64_t n);
/* Environment the BLAS reads when it loads (OpenBLAS's thread timeout);
 * main calls it before any thread. */
void sf__blas_env(void);
const char *sf__blas_name(void); /* "OpenBLAS", "reference" */
/* The products split over the pool (blas.c's gemm_split: blocks of C's
 * rows on the kernel's alignment, the library single-threaded in each):
 * the unit test's block count (blocks > 0 sets it, 0 restores the pool's
 * size; returns the previous), the count of products split so far, and
 * the alignment (0 where this library and kernel are never split). */
int64_t sf__blas_split_blocks(int64_t blocks);
int64_t sf__blas_splits(void);
int64_t sf__blas_split_align(void);
const char *sf__blas_core(void); /* OpenBLAS's kernel (openblas_get_corename), or "-" */
/* C = alpha op(A)·op(B) + beta C, f32, row-major with leading dimensions
 * (op: transposed when ta/tb): the nn layer's matmuls, forward and
 * backward, through the same library or the reference loop. */
void sf__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* The f32 products' implementation: "sflow-avx512", "sflow-avx2",
 * "sflow-portable" (gemm.c) or the library's name (SFLOW_BLAS). */
const char *sf__blas_sgemm(void);
/* sflow's own f32 GEMM (gemm.c), the same arguments as sf__sgemm, over
 * at most `ways` pool threads; every element one chain of fmas over k,
 * so the bits depend on neither the kernel nor the split.  Returns the
 * parts it ran in. */
int64_t sf__gemm_sflow(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc, int64_t ways);
const char *sf__gemm_isa(void); /* gemm.c's kernel: "sflow-avx2", ... */
bool sf__gemm_fast(void);       /* it has a vector kernel for this CPU */

/* The nn layer's products on the device (device pointers as integers),
 * row-major as sf__sgemm: C = alpha op(A) op(B) + beta C, on this
 * thread's device and stream 0, asynchronous.  cuBLAS is column-major, so
 * each call is the column-major Cᵀ = op(B)ᵀ op(A)ᵀ (B first).  A missing
 * cuBLAS, or one without the entry point, is a runtime error at loc. */
void sf__sgemm_dev(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, uint64_t a,
                   int64_t lda, uint64_t b, int64_t ldb, float beta, uint64_t c, int64_t ldc,
                   const sf_loc *loc);
/* batch products at strides sa, sb, sc (in elements; 0 repeats an
 * operand): cublasSgemmStridedBatched. */
void sf__sgemm_dev_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           uint64_t a, int64_t lda, int64_t sa, uint64_t b, int64_t ldb,
                           int64_t sb, float beta, uint64_t c, int64_t ldc, int64_t sc,
                           int64_t batch, const sf_loc *loc);
/* batch products whose operands are anywhere: aptrs, bptrs and cptrs are
 * device arrays of batch device pointers (u64), product i being C[i] =
 * alpha op(A[i]) op(B[i]) + beta C[i], row-major as above, one
 * cublasSgemmBatched.  For a batch that no single stride walks, as
 * attention's B·H heads (a head a column block of its batch row): the
 * arrays stay read until the product has run (stream order). */
void sf__sgemm_dev_ptrs(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        uint64_t aptrs, int64_t lda, uint64_t bptrs, int64_t ldb, float beta,
                        uint64_t cptrs, int64_t ldc, int64_t batch, const sf_loc *loc);
/* The outer * inner pointers base + (o so + i si) floats, o-major, into out
 * (a host table for sf__sgemm_dev_ptrs, uploaded by the caller). */
void sf__gemm_ptr_table(uint64_t *out, uint64_t base, int64_t outer, int64_t so, int64_t inner,
                        int64_t si);
/* C = op(A) op(B) + bias (bias: n floats, one per column of the row-major
 * m×n C), f32, as one cublasLtMatmul with the BIAS epilogue (its C and D
 * the same buffer, beta 0).  False, having queued nothing, where cuBLASLt
 * is absent (SFLOW_CUBLASLT=off, or a cuBLAS without it) or refuses the
 * shape: the caller then adds the bias itself. */
bool sf__sgemm_dev_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t a,
                        int64_t lda, uint64_t b, int64_t ldb, uint64_t bias, uint64_t c,
                        int64_t ldc, const sf_loc *loc);
/* C = op(A) op(B) with the row sums of op(A) (m floats: Σ_p op(A)[i][p])
 * into sums, one cublasLtMatmul with the BGRADB epilogue: Linear's weight
 * gradient gᵀ x and its bias gradient (g's column sums) in one call.
 * False, having queued nothing, as sf__sgemm_dev_bias. */
bool sf__sgemm_dev_bgrad(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t a,
                         int64_t lda, uint64_t b, int64_t ldb, uint64_t sums, uint64_t c,
                         int64_t ldc, const sf_loc *loc);
/* The same with A and B in bfloat16 (device buffers of uint16, converted
 * by the caller), f32 accumulation (CUBLAS_COMPUTE_32F) and an f32 C:
 * cublasGemmStridedBatchedEx (cublasGemmEx for batch 1). */
void sf__gemm_dev_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       uint64_t a, int64_t lda, int64_t sa, uint64_t b, int64_t ldb, int64_t sb,
                       float beta, uint64_t c, int64_t ldc, int64_t sc, int64_t batch,
                       const sf_loc *loc);

/* --------------------------------------------------------- kernels.c */

/* The library kernels (the .cu files of kernels/), embedded at build time. */
typedef struct {
  const char *name, *file, *text;
  size_t len;
} sf__kernel_source;
extern const sf__kernel_source sf__kernel_sources[];
const sf__kernel_source *sf__kernel_source_find(const char *name);

/* ------------------------------------------------------------ nccl.c */

/*
 * nccl.c: collectives on device arrays over NCCL, with a watchdog.
 *
 * Key design choice: NCCL has no timeout of its own (a dead peer leaves the
 * survivors waiting forever in a stream synchronize), so nothing here ever
 * blocks inside NCCL.  Communicators are non-blocking (config.blocking = 0):
 * initialisation and every collective return at once, and the caller polls
 * ncclCommGetAsyncError and the stream under a deadline
 * ($SFLOW_NCCL_TIMEOUT seconds, default 300) and under the group's own
 * "a member has failed" flag.  On an error, a timeout or a failed member the
 * communicator is aborted (ncclCommAbort) and the call reports why.
 *
 * Two users:
 *  - the NCCL transport of the collective interface (below), for a group
 *    whose members are threads of this process or processes on different
 *    machines: the unique id goes from member 0 to the others through the
 *    group's host transport (a broadcast in shared memory or over the TCP
 *    ring), then sf__nccl_comm_init and sf__nccl_run;
 *  - a process that carries the id itself (sf__nccl_comm_join with a
 *    carrier), or the rank-level calls by hand.
 *
 *    The protocol, for every member of a group of n:
 *
 *      sf__nccl_id id;
 *      if (rank == 0) sf__nccl_new_id(&id, err, sizeof err);
 *      ...carry the SF__NCCL_ID_BYTES bytes of id.bytes from member 0 to
 *         every other member over the control plane (opaque bytes)...
 *      sf__nccl_comm *nc = sf__nccl_comm_init(&id, rank, n, &watch, err, sizeof err);
 *      sf__nccl_allreduce(nc, dev_ptr, count, elem, false, &watch, err, sizeof err);
 *      ...
 *      sf__nccl_comm_free(nc, failed);
 *
 *    Every rank must make the same calls in the same order (one stream per
 *    communicator).  The id is valid for one communicator: a group that
 *    restarts makes a new one (new id, new sf__nccl_comm_init).  Each
 *    process must be on its own GPU: NCCL refuses two ranks on one device.
 */
#define SF__NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

/* Loads libnccl.so.2 once (thread-safe); $SFLOW_NCCL names another file,
 * and SFLOW_NCCL=off disables NCCL (device collectives then stage through
 * the host).  False, with the reason in err, when it cannot be used
 * (missing, or older than 2.14, which lacks non-blocking communicators). */
bool sf__nccl_load(char *err, size_t n);
/* The library's version as NCCL codes it (2.28.9 -> 22809); 0 if not loaded. */
int sf__nccl_version(void);
/* "2.28.9", or "not loaded". */
void sf__nccl_version_string(char *out, size_t n);
/* The watchdog bound of one NCCL operation, in seconds: $SFLOW_NCCL_TIMEOUT
 * (a positive number), else 300. */
double sf__nccl_timeout(void);

typedef struct {
  unsigned char bytes[SF__NCCL_ID_BYTES];
} sf__nccl_id;

/* What the watchdog polls besides NCCL itself: failed(ctx) returns true,
 * with the reason in why, once the group can no longer meet (a member
 * failed elsewhere).  failing(ctx, why), when set, is told before this
 * rank aborts its communicator, so that the other members stop waiting
 * first (an abort can wait for theirs).  Either may be NULL.
 * timeout_s <= 0 means sf__nccl_timeout(). */
typedef struct sf__nccl_watch {
  bool (*failed)(void *ctx, char *why, size_t n);
  void *ctx;
  double timeout_s;
  void (*failing)(void *ctx, const char *why);
} sf__nccl_watch;

typedef struct sf__nccl_comm sf__nccl_comm;

/* Member 0 of a group: a fresh unique id (ncclGetUniqueId). */
bool sf__nccl_new_id(sf__nccl_id *id, char *err, size_t n);
/* Rank `rank` of `n`, on the GPU current on this thread (sf__gpu_ready must
 * have succeeded here): ncclCommInitRankConfig with blocking = 0, polled
 * until ready under the watchdog.  NULL with the reason in err; no NCCL
 * state is left behind then. */
sf__nccl_comm *sf__nccl_comm_init(const sf__nccl_id *id, int rank, int n,
                                  const sf__nccl_watch *w, char *err, size_t errn);
/* Ends a communicator: finalize then destroy when it is healthy, abort
 * when `abort` is set or finalizing does not finish in time.  NULL is fine. */
void sf__nccl_comm_free(sf__nccl_comm *c, bool abort);

/* ------------------------------------------- groups across processes */

/* The id as a control-plane payload: "NCID", u64 group, u32 generation
 * (the group's restart count), then the 128 id bytes, integers
 * little-endian.  unpack refuses another group's or generation's id (a
 * stale id from before a restart would join a dead communicator). */
#define SF__NCCL_ID_WIRE (4 + 8 + 4 + SF__NCCL_ID_BYTES)
void sf__nccl_id_pack(const sf__nccl_id *id, uint64_t group, uint32_t generation,
                      uint8_t out[SF__NCCL_ID_WIRE]);
bool sf__nccl_id_unpack(const uint8_t *p, size_t n, uint64_t group, uint32_t generation,
                        sf__nccl_id *id, char *err, size_t errn);

/* How a member's process moves the packed id: member 0 calls send once
 * (to be delivered to members 1..n-1, e.g. worker -> head -> workers in
 * frames); every other member calls recv, which waits at most timeout_s
 * for it (returning false, with a reason, on timeout or when the group
 * is known to have failed).  Both return false with a message on error. */
typedef struct sf__nccl_carrier {
  bool (*send)(void *ctx, const uint8_t *p, size_t n, char *err, size_t errn);
  bool (*recv)(void *ctx, uint8_t *p, size_t n, double timeout_s, char *err, size_t errn);
  void *ctx;
} sf__nccl_carrier;

/* Member `rank` of a group of n across processes, on the GPU current on
 * this thread: makes (rank 0) or receives the id through carrier, then
 * sf__nccl_comm_init under w.  NULL with the reason in err. */
sf__nccl_comm *sf__nccl_comm_join(int rank, int n, uint64_t group, uint32_t generation,
                                  const sf__nccl_carrier *carrier, const sf__nccl_watch *w,
                                  char *err, size_t errn);

/* The collectives, in place on device buffers (device pointers as
 * integers, as sf__gpu_device_copy returns them), each waited for under
 * the watchdog.  False, with the cause in err, on an NCCL error, a timeout
 * or a failed member; the communicator is then aborted and every later call
 * on it fails at once.  elem is f32, f64, i32 or i64.  mean divides the sum
 * by n on the device (the same division as the CPU path). */
bool sf__nccl_allreduce(sf__nccl_comm *c, uint64_t buf, int64_t count, const sf_type *elem,
                        bool mean, const sf__nccl_watch *w, char *err, size_t errn);
bool sf__nccl_broadcast(sf__nccl_comm *c, uint64_t buf, int64_t count, const sf_type *elem,
                        int root, const sf__nccl_watch *w, char *err, size_t errn);
/* recv holds n * count elements: member k's send lands at k * count. */
bool sf__nccl_allgather(sf__nccl_comm *c, uint64_t send, uint64_t recv, int64_t count,
                        const sf_type *elem, const sf__nccl_watch *w, char *err, size_t errn);
/* The CUDA C of allreduce_mean's division kernels (sf_nccl_div_f32, _f64,
 * _i32, _i64), for the tests. */
extern const char sf__nccl_div_src[];
/* A one-element allreduce on the communicator's stream. */
bool sf__nccl_barrier(sf__nccl_comm *c, const sf__nccl_watch *w, char *err, size_t errn);

/* ------------------------------------------------ the NCCL transport */

/* One device collective of a group, described for sf__nccl_run. */
/* SF__DEV_SHARDS: all_gather of shards, in place (sf__coll_shard's). */
enum { SF__DEV_ALLREDUCE, SF__DEV_BROADCAST, SF__DEV_ALLGATHER, SF__DEV_SHARDS };
typedef struct sf__dev_op {
  int kind;
  const char *what;   /* "allreduce_sum", ... for messages */
  bool mean;
  int64_t root;       /* broadcast */
  sf_array *out;      /* allgather: the result, owned, set by the call */
} sf__dev_op;

/* The collective interface's device transport (sched.h,
 * sf__coll_transport), registered as sf__coll_transports[SF__COLL_NCCL]
 * by sf__gpu_install and stacked by sf__comm_new on every group's host
 * transport (shared memory, the TCP ring).  A call runs on the device when
 * every member's array is there, of one shape, on a GPU of its own, and
 * NCCL loads; otherwise the host transport runs it.  Errors are runtime
 * errors naming the collective, the group and the cause. */
extern const sf__coll_transport sf__coll_nccl;
/* Runs op on this member's array a (on the device) over nc, a
 * communicator of n ranks (the NCCL transport's step on the device).  Makes nc's GPU current.  False, with
 * the cause in err, when NCCL failed (nc is aborted then). */
bool sf__nccl_run(sf__nccl_comm *nc, sf_array *a, int64_t n, sf__dev_op *op,
                  const sf__nccl_watch *w, char *err, size_t errn, const sf_loc *loc);
#endif
