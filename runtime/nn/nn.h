/*
 * nn.h — the nn layer: tensors, their CPU ops, automatic differentiation
 * and std.nn's C side (docs/nn.md).  The tensor object and its hooks
 * (tensor.c), broadcasting elementwise ops and activations (elementwise.c),
 * reductions, softmax and the losses (reduce.c), matmul over the gpu
 * layer's BLAS (matmul.c), the tape and backward (autograd.c), the
 * optimizers (optim.c), params/grads and safetensors (safetensors.c), the
 * encoder layers and gradient clipping (layers.c), the device kernel
 * table and the op kinds (dev.c, kinds.h), the `sf_std_nn_*` externs of stdlib/nn.sflow (std.c), and std.train's
 * member rank and collectives (train.c).
 *
 * Key design choice: a tensor is a small header (shape, strides, offset)
 * over a reference-counted storage of f32, so reshape and transpose are
 * views; every op makes a new tensor and, when an input requires a
 * gradient, records one node (its backward rule and what it needs) that
 * the result owns.  The recorded nodes are the tape: their sequence
 * numbers order them, backward walks the ones the loss reaches newest
 * first and then releases them, and a result nobody holds frees its nodes
 * with it, so memory stays flat whether or not backward runs.
 *
 * Stands on gpu (BLAS, the pool through sched) and data (cJSON and whole
 * file views for safetensors); nothing below calls it: core reaches
 * tensors only through the hooks sf__nn_install sets (core.h).
 */
#ifndef SF_NN_H
#define SF_NN_H

#include "data.h"
#include "gpu.h"
#include "kinds.h"

/* ------------------------------------------------------------ tensor.c */

#define SF__TMAX 8 /* dimensions of a tensor, as the contract fixes (0..8) */

/* The f32 values one or more tensors view: a host copy and a device copy,
 * as sf_array keeps them (device.c; docs/nn.md, "GPU").  where says which
 * is current; host code reaches the values only through sf__t_data (read)
 * and sf__t_wdata (write), device code through sf__t_dptr and
 * sf__t_dwrote. */
typedef struct sf__storage {
  int64_t rc;    /* atomic */
  int64_t len;   /* floats */
  float *data;   /* host copy, 64-byte aligned; NULL for a storage made on
                  * the device, until the first host read */
  void *dev;     /* the device copy (a device pointer), or NULL */
  int32_t where; /* which copy is current: SF__WHERE_HOST / BOTH / DEVICE */
  int32_t gpu;   /* 1 + the device of dev; 0 when dev is NULL */
} sf__storage;

typedef struct sf__node sf__node;
struct sf_tensor {
  sf_obj hdr;                /* tag SF_OBJ_TENSOR */
  int32_t ndim;              /* 0..SF__TMAX */
  bool req;                  /* requires grad: a param, or made from one */
  int64_t numel;             /* product of shape */
  int64_t offset;            /* first element, in floats into st->data */
  int64_t shape[SF__TMAX];
  int64_t strides[SF__TMAX]; /* in floats */
  sf__storage *st;
  sf_tensor *grad;           /* a param's accumulated gradient (owned), or NULL */
  struct sf__node *node;     /* the op that made it (owned), NULL for a leaf */
};

/* The descriptor of `tensor` for arrays the runtime makes (params(m)). */
extern const sf_type sf__type_tensor;
/* Live tensors and tape nodes (atomic counters, for tests of memory). */
extern int64_t sf__tensor_live, sf__node_live;
/* Bytes of tensor storage on the host in use now, and the most there
 * were since the process started or the last sf__tensor_bytes_reset
 * (atomic counters; std.train's measured memory plan). */
extern int64_t sf__tensor_bytes, sf__tensor_bytes_peak;
void sf__tensor_bytes_reset(void);

/* A new contiguous tensor of the shape, zero-filled or not (owned).  A
 * negative dimension or more than SF__TMAX is a runtime error at loc,
 * named after `what`. */
sf_tensor *sf__t_zeros(int32_t ndim, const int64_t *shape, const sf_loc *loc);
sf_tensor *sf__t_empty(int32_t ndim, const int64_t *shape, const sf_loc *loc);
sf_tensor *sf__t_like(const sf_tensor *t); /* empty, t's shape */
sf_tensor *sf__t_full(int32_t ndim, const int64_t *shape, float v);
/* From an i64[] shape (an sflow value), checked. */
void sf__t_shape_from(sf_array *shape, const char *what, int32_t *ndim, int64_t *dims,
                      const sf_loc *loc);
/* A new header over t's storage with the given shape, strides and offset
 * (owned; no node, no grad). */
sf_tensor *sf__t_view(const sf_tensor *t, int32_t ndim, const int64_t *shape,
                      const int64_t *strides, int64_t offset);
/* t's values row-major in a contiguous tensor: t itself (retained) when it
 * already is one, else a copy.  Never records. */
sf_tensor *sf__t_contig(sf_tensor *t);
bool sf__t_is_contig(const sf_tensor *t);
/* Host access to t's values (its first element): sf__t_data reads (the
 * device copy is copied back first when it is the only current one: one
 * synchronisation, counted in d2h_syncs), sf__t_wdata writes (as a read,
 * then the host copy is the only current one).  Every CPU-side write into
 * an existing storage uses sf__t_wdata; a tensor just made by
 * sf__t_empty/zeros/like/full is a host one and may be written through
 * either.  On the CPU path both are this inline test of `where`. */
float *sf__t_host_sync(const sf_tensor *t, bool write); /* device.c */
/* A host storage without a buffer: NULL when it holds no values, else a
 * runtime error (a param std.train's shard "parameters" released; tensor.c). */
float *sf__t_released(const sf_tensor *t);
static inline float *sf__t_data(const sf_tensor *t) {
  if (__builtin_expect(t->st->where == SF__WHERE_DEVICE, 0))
    return sf__t_host_sync(t, false);
  if (__builtin_expect(!t->st->data, 0))
    return sf__t_released(t);
  return t->st->data + t->offset;
}
static inline float *sf__t_wdata(sf_tensor *t) {
  if (__builtin_expect(t->st->where != SF__WHERE_HOST, 0))
    return sf__t_host_sync(t, true);
  if (__builtin_expect(!t->st->data, 0))
    return sf__t_released(t);
  return t->st->data + t->offset;
}
/* "[2, 3]" into buf (SF__SHAPE_BUF bytes always suffice). */
#define SF__SHAPE_BUF 200
const char *sf__shape_str(int32_t ndim, const int64_t *shape, char *buf);
#define SF__SHP(t, buf) sf__shape_str((t)->ndim, (t)->shape, (buf))
/* The axis argument of an op: negative counts from the end; out of range
 * is a runtime error naming op and the shape. */
int32_t sf__t_axis(const char *op, const sf_tensor *t, int64_t axis, const sf_loc *loc);
/* Copies src's values into dst (same numel; any strides on both). */
void sf__t_copy_into(sf_tensor *dst, const sf_tensor *src);
/* The hooks core reaches tensors through (core.h), the tensor dtor, and
 * nothing else; main.c calls it before any thread. */
void sf__nn_install(void);
/* A NULL tensor argument (a field never set) is a runtime error at loc. */
sf_tensor *sf__t_arg(sf_tensor *t, const char *op, const sf_loc *loc);

/* ----------------------------------------------------------- custom.c */

/* Fills sf__ktensors (gpu.h): how a launch passes tensors to a kernel.
 * Called by sf__nn_install. */
void sf__custom_install(void);
/* nn.custom(out, inputs, backward): out's values as a new tensor whose
 * node calls the function value backward(inputs, out, grad). */
sf_tensor *sf_std_nn_custom(sf_tensor *out, sf_array *inputs, int64_t backward,
                            const sf_loc *loc);
/* nn.checkpoint(f, inputs, args): f(inputs, args) without its
 * activations on the tape, recomputed in backward. */
sf_tensor *sf_std_nn_checkpoint(int64_t f, sf_array *inputs, sf_array *args, const sf_loc *loc);
/* nn.unit_begin(ps) / nn.unit_end(ps, y): the forward of an FSDP unit
 * (train.c): its params gathered for it and freed after, again for its
 * backward, its gradients reduce-scattered as that ends; nothing when no
 * unit of std.train holds ps's params. */
void sf_std_nn_unit_begin(sf_array *ps, const sf_loc *loc);
sf_tensor *sf_std_nn_unit_end(sf_array *ps, sf_tensor *y, const sf_loc *loc);
sf_tensor *sf_std_nn_empty_like(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_zeros_like(sf_tensor *t, const sf_loc *loc);
int64_t sf_std_nn_numel(sf_tensor *t, const sf_loc *loc);
/* ------------------------------------------------------------ device.c */

/*
 * The GPU side of tensors (docs/nn.md, "GPU").  An op runs on the GPU when
 * the running call holds one (sf__nn_gpu_here); its inputs' device copies
 * come from sf__t_dptr (uploaded when the host copy is newer), its results
 * are device tensors (sf__t_dempty / sf__t_dzeros), and everything goes on
 * the legacy default stream without waiting: only a host read
 * (sf__t_data) synchronises.
 */
/* Does the running call hold a GPU (its actor's @gpus > 0, or its task's
 * device), and is the GPU ready (SFLOW_NO_GPU=1 answers no)?  Cached per
 * thread and call; the first call of a thread makes the call's device
 * current.  loc: for --require-gpu's error. */
bool sf__nn_gpu_here(const sf_loc *loc);
/* The device pointer of t's first element (storage base + offset * 4) on
 * this thread's device: a device copy is made (the host values uploaded)
 * when there is none or the host copy is newer; one on another device
 * moves through the host.  Leaves where BOTH (or DEVICE). */
uint64_t sf__t_dptr(sf_tensor *t, const sf_loc *loc);
/* t's storage was written on the device: its device copy is the only
 * current one. */
void sf__t_dwrote(sf_tensor *t);
/* A new contiguous tensor on this thread's device (no host buffer), its
 * values unset or zero (an asynchronous memset on stream 0). */
sf_tensor *sf__t_dempty(int32_t ndim, const int64_t *shape, const sf_loc *loc);
sf_tensor *sf__t_dzeros(int32_t ndim, const int64_t *shape, const sf_loc *loc);
/* Is t's only current copy on the device? */
static inline bool sf__t_on_dev(const sf_tensor *t) { return t->st->where == SF__WHERE_DEVICE; }
/* An empty tensor of t's shape where the call runs: on the device when a
 * GPU is here, else sf__t_like. */
sf_tensor *sf__t_like_here(const sf_tensor *t);
/* The CUfunction `entry` of kernels/<file>.cu ("nn", "nn_layers"), loaded
 * through the kernel cache once per device and kept in a per-process
 * table; *block: the block size the kernels are written for (256). */
void *sf__nn_kernel(const char *file, const char *entry, int *block, const sf_loc *loc);
/* Launches f over grid 1-D blocks of block threads with shmem bytes of
 * dynamic shared memory on stream 0, without waiting; counts gpu_launches.
 * grid <= 0 launches nothing. */
void sf__nn_launch(void *f, int64_t grid, int block, unsigned shmem, void **params,
                   const sf_loc *loc);
/* Blocks of `block` threads that cover n threads (at least 1). */
static inline int64_t sf__nn_grid(int64_t n, int block) { return n > 0 ? (n + block - 1) / block : 0; }

/* Device storages and the storage's host buffer (tensor.c, for device.c). */
void *sf__storage_host_alloc(int64_t len);
/* Frees a host-only storage's buffer and leaves data NULL, len kept
 * (std.train's shard "parameters"; tensor.c). */
void sf__storage_host_free(sf__storage *s);
/* bytes from host memory src to device memory dst, queued on stream 0
 * through pinned staging buffers (device.c): the host waits only when the
 * device is several uploads behind, counted in h2d_waits. */
void sf__dev_upload(uint64_t dst, const void *src, size_t bytes, const sf_loc *loc);
size_t sf__storage_bytes(int64_t len);
/* A storage of len floats on this thread's device, only there (where
 * DEVICE, data NULL). */
sf__storage *sf__storage_dev_new(int64_t len, const sf_loc *loc);
/* Frees a storage's device copy (the caching allocator keeps the block). */
void sf__storage_dev_free(sf__storage *s);
/* A tensor header over a new storage (tensor.c: shape checked, strides
 * contiguous). */
sf_tensor *sf__t_over(int32_t ndim, const int64_t *shape, sf__storage *st);
int64_t sf__t_numel_checked(int32_t ndim, const int64_t *shape, const sf_loc *loc);

/* The GPU versions of the ops (gpu_ops.c), called from each op's hook
 * after its checks: device results, nodes with device backward rules.
 * Shapes passed are the result's, already checked. */
sf_tensor *sf__gpu_reduce_to(sf_tensor *g, int32_t ndim, const int64_t *shape);
void sf__gpu_add_into(sf_tensor *dst, const sf_tensor *src);
void sf__gpu_copy_into(sf_tensor *dst, const sf_tensor *src);
/* A collective's bucket (collective.c): t's values gathered into (pack) or
 * scattered back from (unpack, t then device-current) numel contiguous
 * floats at device pointer p on this thread's device, through t's strides. */
void sf__gpu_pack(uint64_t p, sf_tensor *t, bool unpack, const sf_loc *loc);
void sf__gpu_sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                      const sf_loc *loc);
/* AdamW with the step's scalars as optim.c computes them on the host
 * (the bias corrections from the step count the i64[] keeps there). */
void sf__gpu_adamw_step(sf_array *ps, sf_array *m, sf_array *v, float step_size, float bc2_sqrt,
                        float decay, float w1, float b2, float w2, float eps, const sf_loc *loc);
/* clip_grad_norm on the device: the norm is computed and applied there
 * (no read-back); returns a 0-d device tensor of the norm (owned). */
sf_tensor *sf__gpu_clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc);
/* The same, the norm read back (clip_grad_norm's f64: one d2h sync). */
double sf__gpu_clip_grad_norm_read(sf_array *ps, double max_norm, const sf_loc *loc);
/* A device tensor of the shape filled with v (zeros: a memset). */
sf_tensor *sf__gpu_full(int32_t ndim, const int64_t *shape, float v, const sf_loc *loc);
/* A host tensor just made by a creation op, uploaded when the call holds
 * a GPU (its host copy kept: where BOTH); t itself either way. */
sf_tensor *sf__t_place(sf_tensor *t, const sf_loc *loc);

/* --------------------------------------------------------------- dev.c */

/*
 * The device kernel table (docs/nn.md, "Code layout").  Each op is defined
 * once, in its family's file (elementwise.c, reduce.c, layers.c, index.c):
 * its checks, its result's allocation, its tape record and its one
 * backward rule.  What differs between the CPU and the GPU is only the
 * kernels, and those the op reaches through this table: sf__nn_dev_here
 * chooses it once per forward call (the GPU's when the running call holds
 * one), sf__nn_dev_of once per backward rule (the device the node's
 * forward ran on).  The CPU's entries are the family files' loops
 * (sf__cpu_*), the GPU's the launchers of gpu_ops.c and gpu_layers.c
 * (sf__gpu_*) over kernels/nn.cu and kernels/nn_layers.cu.  A kernel
 * entry that may save state for the backward fills an sf__keep: what the
 * node keeps (its saved tensor, max's argmax) is each device's own, and
 * only that device's backward kernel reads it.
 */
typedef struct {
  sf_tensor *saved; /* becomes node->saved (owned) */
  int64_t *idx;     /* becomes node->idx (owned, sf_free) */
} sf__keep;

/* X(field, return type, parameters): every entry of the table, in the
 * order of the families.  tests/abi/nn_kernels checks that both tables
 * fill each one (nn_kernel_table in test_rt_nn_ops.c). */
#define SF__NN_KERNELS(X)                                                                     \
  /* allocation and copies */                                                               \
  X(empty, sf_tensor *, (int32_t ndim, const int64_t *shape, const sf_loc *loc))            \
  X(zeros, sf_tensor *, (int32_t ndim, const int64_t *shape, const sf_loc *loc))            \
  X(contig, sf_tensor *, (sf_tensor * t))                                                    \
  X(assign, void, (sf_tensor * dst, const sf_tensor *src))                                   \
  /* elementwise.c: out (contiguous, the broadcast shape) = a op b; a new                    \
   * tensor a op s (left: s op a); y = f(x) and dx = f'(x) g, x contiguous */               \
  X(binary, void, (int32_t op, sf_tensor * out, const sf_tensor *a, const sf_tensor *b,      \
                   const sf_loc *loc))                                                       \
  X(scalar, sf_tensor *, (int32_t op, const sf_tensor *a, float s, bool left,                \
                          const sf_loc *loc))                                                \
  X(unary, sf_tensor *, (int32_t kind, const sf_tensor *x, const sf_loc *loc))               \
  X(unary_bw, sf_tensor *, (int32_t kind, const sf_tensor *g, const sf_tensor *x,            \
                            const sf_tensor *y))                                             \
  /* reduce.c: over axis ax (or everything, ax < 0) into shape; softmax;                     \
   * cross-entropy over checked targets (used: the rows kept) */                             \
  X(reduce, sf_tensor *, (int32_t kind, sf_tensor * a, int32_t ax, int32_t nd,               \
                          const int64_t *shape, sf__keep *keep, const sf_loc *loc))          \
  X(reduce_bw, sf_tensor *, (const sf__node *n, sf_tensor *g))                               \
  X(argmax, sf_array *, (sf_tensor * a, int32_t ax, const sf_loc *loc))                      \
  X(softmax, sf_tensor *, (sf_tensor * a, int32_t ax, bool log, const sf_loc *loc))          \
  X(softmax_bw, sf_tensor *, (const sf__node *n, sf_tensor *g))                              \
  X(cross_entropy, sf_tensor *, (sf_tensor * logits, sf_array *targets, int64_t ignore,      \
                                 float smoothing, int64_t used, sf__keep *keep,              \
                                 const sf_loc *loc))                                         \
  X(cross_entropy_bw, sf_tensor *, (const sf__node *n, sf_tensor *g))                        \
  /* layers.c: the embedding's rows (result shape dims); layer norm (its                     \
   * three gradients into d); dropout's mask times x (index NULL: one                         \
   * stream, else a stream per row); attention's masked softmax of                            \
   * scores (B, H, T, S) and the fused attention (d: dq, dk, dv) */                           \
  X(embedding, sf_tensor *, (sf_tensor * weight, sf_array *ids, int32_t nd,                  \
                             const int64_t *dims, sf__keep *keep, const sf_loc *loc))        \
  X(embedding_bw, sf_tensor *, (const sf__node *n, sf_tensor *g))                            \
  X(layer_norm, sf_tensor *, (sf_tensor * x, sf_tensor *w, sf_tensor *b, double eps,         \
                              sf__keep *keep, const sf_loc *loc))                            \
  X(layer_norm_bw, void, (const sf__node *n, sf_tensor *g, sf_tensor **d))                   \
  X(dropout, sf_tensor *, (sf_tensor * x, double p, int64_t seed, sf_array *index,           \
                           int64_t stream, sf__keep *keep, const sf_loc *loc))               \
  X(masked_softmax, sf_tensor *, (sf_tensor * scores, sf_array *mask, float scale,           \
                                  const sf_loc *loc))                                        \
  X(masked_softmax_bw, sf_tensor *, (const sf__node *n, sf_tensor *g))                       \
  X(attention, sf_tensor *, (sf_tensor * q, sf_tensor *k, sf_tensor *v, sf_array *mask,      \
                             int64_t heads, bool causal, float scale, sf__keep *keep,        \
                             const sf_loc *loc))                                             \
  X(attention_bw, void, (const sf__node *n, sf_tensor *g, sf_tensor **d))                    \
  /* rope.c: rotary embeddings of (B, H, T, D) from position pos0 (the                        \
   * backward: the rotation by the opposite angles) */                                        \
  X(rope, sf_tensor *, (sf_tensor * x, int64_t pos0, double theta, const sf_loc *loc))      \
  X(rope_bw, sf_tensor *, (const sf__node *n, sf_tensor *g))                                 \
  /* norm.c: RMSNorm (keeps each row's rstd; d: dx, dw) */                                     \
  X(rms_norm, sf_tensor *, (sf_tensor * x, sf_tensor *w, double eps, sf__keep *keep,         \
                            const sf_loc *loc))                                              \
  X(rms_norm_bw, void, (const sf__node *n, sf_tensor *g, sf_tensor **d))                     \
  /* matmul.c: the batched product into the checked shape, Linear's x wᵀ                      \
   * and x wᵀ + b (bf16: autocast's products), and their operands'                            \
   * gradients into d (NULL where none is needed, or where dx was added                       \
   * into x's gradient in place); matmul_nt_bw's d has 3 slots: for a                         \
   * linear node the device may put b's gradient in d[2] (cuBLASLt's                          \
   * bias-gradient epilogue), else it stays NULL */                                           \
  X(matmul, sf_tensor *, (sf_tensor * a, sf_tensor *b, int32_t nd, const int64_t *shape,     \
                          bool bf16, const sf_loc *loc))                                     \
  X(matmul_bw, void, (const sf__node *n, sf_tensor *g, sf_tensor **d))                       \
  X(matmul_nt, sf_tensor *, (sf_tensor * x, sf_tensor *w, bool bf16, const sf_loc *loc))     \
  X(matmul_nt_bw, void, (const sf__node *n, sf_tensor *g, sf_tensor **d))                    \
  X(linear, sf_tensor *, (sf_tensor * x, sf_tensor *w, sf_tensor *b, bool bf16,              \
                          const sf_loc *loc))                                                \
  /* create.c, select.c: x's last two dimensions with the elements below                      \
   * (upper) or above diagonal k zeroed, contiguous; out (contiguous, the                     \
   * broadcast shape) = c != 0 ? a : b; the indices of each row's k largest                   \
   * into idx (rows x k, sorted, ties to the lower index); n draws from                       \
   * each row of probs p (rows x n, counter-based from seed) */                               \
  X(tri, sf_tensor *, (sf_tensor * x, int64_t k, bool upper, const sf_loc *loc))             \
  X(where, void, (sf_tensor * out, sf_tensor *c, sf_tensor *a, sf_tensor *b,                 \
                  const sf_loc *loc))                                                        \
  X(topk, void, (sf_tensor * x, int64_t k, int64_t *idx, const sf_loc *loc))                 \
  X(multinomial, void, (sf_tensor * p, int64_t n, uint64_t seed, int64_t *out,               \
                        const sf_loc *loc))

#define SF__NN_FIELD(name, ret, params) ret(*name) params;
typedef struct sf__nn_dev {
  const char *name; /* "cpu", "gpu" */
  bool bf16_linear; /* linear fuses its bias under autocast; else matmul_nt + add */
  SF__NN_KERNELS(SF__NN_FIELD)
} sf__nn_dev;
#undef SF__NN_FIELD
extern const sf__nn_dev sf__nn_cpu, sf__nn_gpu;
/* The table of the device a forward call runs on (sf__nn_gpu_here). */
const sf__nn_dev *sf__nn_dev_here(const sf_loc *loc);
/* Tests: this thread's forward calls use d (NULL: the choice above again),
 * so one op runs on each device in one process and the two are compared. */
void sf__nn_dev_force(const sf__nn_dev *d);
/* The table of the device node n's forward ran on; for a GPU node run
 * outside a GPU context (the loss taken to another call), the device its
 * values are on becomes this thread's first, so their pointers are valid. */
const sf__nn_dev *sf__nn_dev_of(const sf__node *n, const sf_tensor *g);
/* Each entry, declared for both devices (the families' loops and the
 * launchers). */
#define SF__NN_DECL(name, ret, params) ret sf__cpu_##name params; ret sf__gpu_##name params;
SF__NN_KERNELS(SF__NN_DECL)
#undef SF__NN_DECL

/* ------------------------------------------------------------ autocast.c */

/* std.nn's autocast switch lives in core (core.h, sf__autocast), reset
 * per task call and actor method like no_grad.  x rounded to bfloat16 and
 * back (round to nearest even; NaN stays NaN). */
static inline float sf__bf16_round(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    u |= 0x00400000u; /* a quiet NaN, as every conversion gives */
  else
    u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
/* t's values rounded to bfloat16, in a new contiguous host tensor (no
 * node). */
sf_tensor *sf__t_bf16_rounded(sf_tensor *t);
/* The CPU's bf16 products under autocast (matmul.c's kernels with bf16):
 * both operands rounded to bf16 before the f32 product (as the GPU's bf16
 * product with f32 accumulation), the backward's products likewise.
 * Shapes checked by the caller. */
sf_tensor *sf__ac_matmul(sf_tensor *a, sf_tensor *b, const sf_loc *loc);
void sf__ac_matmul_bw(const sf__node *n, sf_tensor *g, sf_tensor **d);
sf_tensor *sf__ac_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc);
void sf__ac_matmul_nt_bw(const sf__node *n, sf_tensor *g, sf_tensor **d);
void sf_std_nn_autocast(bool on, const sf_loc *loc);

/* --------------------------------------------------------- autograd.c */

/* One recorded op: its backward rule, its inputs (retained: the edges of
 * the graph), what the rule needs besides them, and the gradient that
 * reaches its output.  Owned by the tensor it made (and, during backward,
 * by the walk). */
#define SF__NIN 3 /* inputs a node may hold */
typedef void (*sf__backward_fn)(sf__node *n, sf_tensor *g); /* g: (out shape), contiguous */
struct sf__node {
  int64_t rc;              /* atomic */
  uint64_t seq;            /* creation order: every input's node is older */
  const char *op;          /* "matmul", for messages */
  sf__backward_fn backward;
  int32_t nin;
  sf_tensor *in[SF__NIN];  /* in[2]: a third input (layer norm's bias) */
  sf_tensor *saved;        /* the output's values when the rule needs them
                            * (a header without node: no cycle) */
  sf_array *targets;       /* cross_entropy's i64[] */
  int64_t *idx;            /* max: the argmax of each output element (owned) */
  int64_t i0, i1, i2;      /* op parameters (axis, ignore_index, ...) */
  float f0;                /* op parameter (a scalar, label smoothing) */
  int32_t ndim;            /* the output's shape */
  int64_t shape[SF__TMAX];
  sf_tensor *grad;         /* d loss / d output, while backward runs */
  sf_tensor **more;        /* inputs past in[] (cat and stack of n tensors; owned) */
  int32_t nmore;
  uint64_t mark;           /* the backward walk that reached it last */
  bool released;           /* backward ran through it: edges dropped */
  const sf_loc *at;        /* nn.custom: the call, for errors of its backward */
  bool gpu;                /* the forward ran on the device (its output is a
                            * device tensor): the backward's kernels do too */
};

/* sf__no_grad lives in core (core.h), so the scheduler resets it per call. */
/* Records op for out when an input requires grad (and not no_grad): the
 * node, owned by out, with a and b (b may be NULL) retained; NULL when
 * nothing is recorded.  The caller fills the node's parameters. */
sf__node *sf__record(const char *op, sf_tensor *out, sf__backward_fn bw, sf_tensor *a,
                     sf_tensor *b);
/* The same for three inputs (b and c may be NULL). */
sf__node *sf__record3(const char *op, sf_tensor *out, sf__backward_fn bw, sf_tensor *a,
                      sf_tensor *b, sf_tensor *c);
/* The same for any number of inputs, all held in node->more (in[] left
 * empty): ops over a tensor[] (cat, stack). */
sf__node *sf__record_n(const char *op, sf_tensor *out, sf__backward_fn bw, sf_tensor **ins,
                       int32_t nin);
/* Adds g (x's shape, consumed) to x's gradient: its node's while backward
 * runs, or a param's accumulated one. */
void sf__grad_add(sf_tensor *x, sf_tensor *g);
/* x's gradient as a host buffer the next contribution may be added into
 * in place (a product with beta 1, matmul.c), or NULL when x has none
 * yet (or it is shared, strided, or this call runs on the GPU): then the
 * contribution goes through sf__grad_add. */
float *sf__grad_acc_buf(sf_tensor *x);
void sf__node_unref(sf__node *n);
/* backward(loss): loss has one element and a path to a param. */
void sf__backward(sf_tensor *loss, const sf_loc *loc);
/* The same from any tensor out, g (out's shape, contiguous, borrowed) its
 * gradient: nn.checkpoint's backward inside a backward.  Nothing when out
 * requires no gradient. */
void sf__backward_from(sf_tensor *out, sf_tensor *g, const sf_loc *loc);
/* The tape's clock: every node recorded from now on has a larger seq. */
uint64_t sf__seq_now(void);
/* From a backward rule: fn(arg) runs once this backward has run every
 * node newer than seq (before the first node at or before it, or at the
 * end).  false (nothing scheduled) when no backward runs on this thread. */
bool sf__backward_after(uint64_t seq, void (*fn)(void *arg, const sf_loc *loc), void *arg);
/* The gradient of a param (created as zeros and kept when none yet; a
 * tensor that is no param gets fresh zeros). Owned. */
sf_tensor *sf__t_grad(sf_tensor *t);

/* ------------------------------------------------------ elementwise.c */

/* a op b with NumPy broadcasting, op SF_TOP_ADD..SF_TOP_DIV. */
sf_tensor *sf__t_binary(int32_t op, sf_tensor *a, sf_tensor *b, const sf_loc *loc);
sf_tensor *sf__t_scalar(int32_t op, sf_tensor *a, float s, bool left, const sf_loc *loc);
sf_tensor *sf__t_neg(sf_tensor *a, const sf_loc *loc);
/* The kinds (kinds.h) by name; an unknown kind is an internal error at
 * loc (an explicit stop, never another kind's loop). */
const char *sf__unary_name(int32_t kind);
const char *sf__binary_name(int32_t op);
const char *sf__reduce_name(int32_t kind);
int32_t sf__kind_check(const char *list, int32_t kind, int32_t lo, int32_t end, const sf_loc *loc);
/* The backward rules that need the output keep a header over its values
 * (saved, which holds no node); the others keep the input as in[0]. */
bool sf__unary_uses_output(int32_t kind);
sf_tensor *sf__t_unary(int32_t kind, sf_tensor *a, const sf_loc *loc);
/* The broadcast shape of a and b, or false. */
bool sf__broadcast_shape(int32_t na, const int64_t *sa, int32_t nb, const int64_t *sb,
                         int32_t *nd, int64_t *out);
/* g summed over the dimensions broadcasting added or stretched, to the
 * given shape (owned; g itself, retained, when nothing was). */
sf_tensor *sf__t_reduce_to(sf_tensor *g, int32_t ndim, const int64_t *shape);
/* dst = src, of one shape, any strides (the strided walk: contiguous
 * copies of transposed views). */
void sf__t_assign(sf_tensor *dst, const sf_tensor *src);
/* dst += src (same shape; dst contiguous). */
void sf__t_add_into(sf_tensor *dst, const sf_tensor *src);

/* ----------------------------------------------------------- reduce.c */

#define SF__ALL_AXES INT64_MIN
/* Over an axis (dropped from the shape) or over everything (a 0-d
 * tensor) with axis SF__ALL_AXES. */
sf_tensor *sf__t_reduce(int32_t kind, sf_tensor *a, int64_t axis, const sf_loc *loc);
sf_array *sf__t_argmax(sf_tensor *a, int64_t axis, const sf_loc *loc); /* i64[] */
sf_tensor *sf__t_softmax(sf_tensor *a, int64_t axis, bool log, const sf_loc *loc);
/* logits (N, C), targets i64[N]: the mean over rows whose target is not
 * ignore_index of -sum_c q_c log softmax(logits)_c, q the one-hot target
 * smoothed by label_smoothing (PyTorch's F.cross_entropy). */
sf_tensor *sf__t_cross_entropy(sf_tensor *logits, sf_array *targets, int64_t ignore_index,
                               float label_smoothing, const sf_loc *loc);
sf_tensor *sf__t_mse(sf_tensor *a, sf_tensor *b, const sf_loc *loc);

/* ----------------------------------------------------------- matmul.c */

/* How a (rows, cols) matrix with strides (rs, cs) goes to a BLAS product
 * (sgemm or cuBLAS): as it is (row-major, leading dimension rs) or
 * transposed (column-major, leading dimension cs); false when it is
 * neither and needs a copy. */
bool sf__mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                    int64_t *ld);
/* An operand of a product: the tensor (retained, or a contiguous copy made
 * by contig when its matrices are neither layout) and how the BLAS reads
 * each of its matrices. */
typedef struct {
  sf_tensor *t;
  bool trans;
  int64_t ld;
} sf__operand;
sf__operand sf__operand_of(sf_tensor *x, sf_tensor *(*contig)(sf_tensor *));

/* torch.matmul: 1-D·1-D a dot product, 2-D, batched over leading
 * dimensions with broadcasting. */
sf_tensor *sf__t_matmul(sf_tensor *a, sf_tensor *b, const sf_loc *loc);
/* Views: reshape (a copy first when t is not contiguous; one -1 allowed)
 * and transpose of two dimensions (strided, no copy). */
sf_tensor *sf__t_reshape(sf_tensor *t, int32_t ndim, const int64_t *shape, const sf_loc *loc);
sf_tensor *sf__t_transpose(sf_tensor *t, int64_t d0, int64_t d1, const sf_loc *loc);

/* ------------------------------------------------------------ optim.c */

/* One optimizer step over params ps (in place on their storage), state
 * tensors beside them; PyTorch's formulas (docs/nn.md, "Optimizers"). */
void sf__sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                  const sf_loc *loc);
void sf__adamw_step(sf_array *ps, sf_array *m, sf_array *v, sf_array *steps, double lr,
                    double beta1, double beta2, double eps, double wd, const sf_loc *loc);

/* ------------------------------------------------------ safetensors.c */

/* Every tensor reachable from the value of type T at m, in field order,
 * with its field path ("fc1.weight", "layers.0.bias"): fn(ctx, path, t).
 * Structs, arrays of them and tensor fields; not maps. */
typedef void (*sf__tensor_visit)(void *ctx, const char *path, sf_tensor *t);
void sf__walk_tensors(const void *m, const sf_type *T, sf__tensor_visit fn, void *ctx);
/* IEEE half and bfloat16 to f32. */
float sf__f16_to_f32(uint16_t h);
float sf__bf16_to_f32(uint16_t h);
/* f32 to IEEE half and bfloat16, rounded to nearest even; NaN stays NaN,
 * past f16's range is an infinity. */
uint16_t sf__f32_to_f16(float f);
uint16_t sf__f32_to_bf16(float f);
/* t's values rounded to the nearest bf16, as f32 (records; the gradient
 * is rounded alike, as torch's x.bfloat16().float()). */
sf_tensor *sf__t_round_bf16(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_round_bf16(sf_tensor *t, const sf_loc *loc);

/* ------------------------------------------------------------ index.c */

/* t[i] (row i, a view of shape t.shape[1..]; negative i counts from the
 * end) and t[a..b] (rows a to b-1, a view); out of range is a runtime
 * error at loc naming the index and the length.  Both record. */
sf_tensor *sf__t_row(sf_tensor *t, int64_t i, const sf_loc *loc);
sf_tensor *sf__t_rows(sf_tensor *t, int64_t from, int64_t to, const sf_loc *loc);
/* torch's select(axis, i) (a view without the axis) and narrow(axis,
 * start, length) (a view; a negative start counts from the end); both
 * record, and their errors name the index, the length and the shape. */
sf_tensor *sf__t_select(sf_tensor *t, int64_t axis, int64_t i, const sf_loc *loc);
sf_tensor *sf__t_narrow(sf_tensor *t, int64_t axis, int64_t start, int64_t length,
                        const sf_loc *loc);
/* torch.index_select(t, axis, idx) for an i64[] idx, and torch.gather(t,
 * axis, index) for an index of t's shape with any length along axis,
 * given row-major as an i64[]: copies; negative indices count from the
 * end; backward adds at the indices. */
sf_tensor *sf__t_index_select(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc);
sf_tensor *sf__t_gather(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc);
sf_tensor *sf_std_nn_select(sf_tensor *t, int64_t axis, int64_t i, const sf_loc *loc);
sf_tensor *sf_std_nn_narrow(sf_tensor *t, int64_t axis, int64_t start, int64_t length,
                            const sf_loc *loc);
sf_tensor *sf_std_nn_index_select(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc);
sf_tensor *sf_std_nn_gather(sf_tensor *t, int64_t axis, sf_array *idx, const sf_loc *loc);
/* torch.stack(ts) along a new first axis and torch.cat(ts, axis): one
 * contiguous copy, one node over every input. */
sf_tensor *sf__t_stack(sf_array *ts, const sf_loc *loc);
sf_tensor *sf__t_cat(sf_array *ts, int64_t axis, const sf_loc *loc);
sf_tensor *sf_std_nn_stack(sf_array *ts, const sf_loc *loc);
sf_tensor *sf_std_nn_cat(sf_array *ts, int64_t axis, const sf_loc *loc);

/* ----------------------------------------------------------- std.nn */

/* The C side of stdlib/nn.sflow's @extern functions (docs/language.md,
 * "Standard-library externs": tensors borrowed, owned results). */
sf_tensor *sf_std_nn_tensor(sf_array *data, sf_array *shape, const sf_loc *loc);
sf_tensor *sf_std_nn_zeros(sf_array *shape, const sf_loc *loc);
sf_tensor *sf_std_nn_ones(sf_array *shape, const sf_loc *loc);
sf_tensor *sf_std_nn_randn(sf_array *shape, int64_t seed, const sf_loc *loc);
sf_tensor *sf_std_nn_uniform(sf_array *shape, float lo, float hi, int64_t seed,
                             const sf_loc *loc);
sf_tensor *sf_std_nn_param(sf_tensor *t, const sf_loc *loc);
void sf_std_nn_backward(sf_tensor *loss, const sf_loc *loc);
sf_tensor *sf_std_nn_grad(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_relu(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_gelu(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_gelu_tanh(sf_tensor *t, const sf_loc *loc);
/* x (..., in) @ w^T for w (out, in): Linear's product, gradients in place. */
sf_tensor *sf__t_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc);
sf_tensor *sf_std_nn_matmul_nt(sf_tensor *x, sf_tensor *w, const sf_loc *loc);
/* x wᵀ + b for a bias b (out) in one product (sgemm over rows of b). */
sf_tensor *sf__t_linear(sf_tensor *x, sf_tensor *w, sf_tensor *b, const sf_loc *loc);
sf_tensor *sf_std_nn_linear_apply(sf_tensor *x, sf_tensor *w, sf_tensor *b, const sf_loc *loc);
sf_tensor *sf_std_nn_max_all(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_sigmoid(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_silu(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_tanh(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_exp(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_log(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_softmax(sf_tensor *t, int64_t axis, const sf_loc *loc);
sf_tensor *sf_std_nn_log_softmax(sf_tensor *t, int64_t axis, const sf_loc *loc);
sf_array *sf_std_nn_params(const void *m, const sf_type *T, const sf_type *T_again,
                           const sf_loc *loc);
sf_array *sf_std_nn_grads(const void *m, const sf_type *T, const sf_type *T_again,
                          const sf_loc *loc);
void sf_std_nn_no_grad(bool on, const sf_loc *loc);
sf_array *sf_std_nn_shape(sf_tensor *t, const sf_loc *loc);
float sf_std_nn_item(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_sum_all(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_sum_axis(sf_tensor *t, int64_t axis, const sf_loc *loc);
sf_tensor *sf_std_nn_mean_all(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_mean_axis(sf_tensor *t, int64_t axis, const sf_loc *loc);
sf_tensor *sf_std_nn_max_axis(sf_tensor *t, int64_t axis, const sf_loc *loc);
sf_array *sf_std_nn_argmax(sf_tensor *t, int64_t axis, const sf_loc *loc);
sf_tensor *sf_std_nn_reshape(sf_tensor *t, sf_array *shape, const sf_loc *loc);
sf_tensor *sf_std_nn_transpose(sf_tensor *t, int64_t d0, int64_t d1, const sf_loc *loc);
sf_array *sf_std_nn_data(sf_tensor *t, const sf_loc *loc);
int64_t sf_std_nn_size(sf_tensor *t, int64_t d, const sf_loc *loc);
int64_t sf_std_nn_ndim(sf_tensor *t, const sf_loc *loc);
sf_tensor *sf_std_nn_cross_entropy(sf_tensor *logits, sf_array *targets, int64_t ignore_index,
                                   float label_smoothing, const sf_loc *loc);
sf_tensor *sf_std_nn_mse(sf_tensor *a, sf_tensor *b, const sf_loc *loc);
/* nn.linear(in, out, seed): struct Linear { weight: tensor, bias: tensor }
 * with PyTorch's default init, both U(-1/sqrt(in), 1/sqrt(in)), weight
 * (out, in) drawn first. */
void sf_std_nn_linear(void *out, const sf_type *out_type, int64_t in, int64_t outf, int64_t seed,
                      const sf_loc *loc);
void sf_std_nn_sgd_step(sf_array *ps, sf_array *bufs, double lr, double momentum, double wd,
                        const sf_loc *loc);
void sf_std_nn_adamw_step(sf_array *ps, sf_array *m, sf_array *v, sf_array *steps, double lr,
                          double beta1, double beta2, double eps, double wd, const sf_loc *loc);
void sf_std_nn_zero_grad(sf_array *ps, const sf_loc *loc);
void sf_std_nn_save(const void *m, const sf_type *T, sf_str *path, sf_str *dtype,
                    const sf_type *T_again, const sf_loc *loc);
void sf_std_nn_load(const void *m, const sf_type *T, sf_str *path, bool strict,
                    const sf_type *T_again, const sf_loc *loc);
void sf_std_nn_save_tensors(sf_array *names, sf_array *ts, sf_str *path, sf_str *dtype,
                            const sf_loc *loc);
/* A safetensors file opened for pointers into its data (safetensors.c): the
 * header checked as nn.load checks it, the file mapped for the process. */
enum { SF__ST_F32 = 1, SF__ST_F16, SF__ST_BF16 };
typedef struct {
  const char *name;
  int32_t dtype;          /* SF__ST_*, 0 for a dtype std.nn does not read */
  const char *dtype_name; /* "F32", "I64", ... */
  int32_t ndim;
  int64_t shape[SF__TMAX];
  const void *data;
} sf__st_tensor;
typedef struct sf__st_file sf__st_file;
/* NULL with the reason in err when the file cannot be read or breaks the
 * format. */
sf__st_file *sf__st_open(const char *path, char *err, size_t errlen);
const sf__st_tensor *sf__st_find(const sf__st_file *f, const char *name);
void sf_std_nn_load_tensors(sf_array *names, sf_array *ts, sf_str *path, const sf_loc *loc);

/* ----------------------------------------------------------- layers.c */

/* weight (num, dim) gathered at ids (len = the product of shape): (shape..., dim). */
sf_tensor *sf__t_embedding(sf_tensor *weight, sf_array *ids, sf_array *shape, const sf_loc *loc);
/* x (..., d) normalised over its last dimension, times weight (d) plus bias (d). */
sf_tensor *sf__t_layer_norm(sf_tensor *x, sf_tensor *weight, sf_tensor *bias, double eps,
                            const sf_loc *loc);
/* Zeros with probability p, the rest scaled by 1/(1-p); x itself when
 * !training or p == 0.  seed as randn's. */
sf_tensor *sf__t_dropout(sf_tensor *x, double p, int64_t seed, bool training, const sf_loc *loc);
/* q (B, T, D), k and v (B, S, D), mask i64[B*S] (0 = padding; empty for
 * none): softmax(q kᵀ / sqrt(D/heads)) v per head, (B, T, D). */
sf_tensor *sf__t_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                           int64_t heads, const sf_loc *loc);
/* Dropout whose mask for row r (x's first axis) is drawn from (seed,
 * index[r], stream) alone: a sample's mask does not depend on the rows
 * beside it, so any split of a batch over workers gives it the same one. */
sf_tensor *sf__t_dropout_rows(sf_tensor *x, double p, int64_t seed, sf_array *index,
                              int64_t stream, bool training, const sf_loc *loc);
/* attention with dropout on the probabilities (B, H, T, S), batch row b's
 * masks drawn from (seed, index[b], stream) as dropout_rows'. */
sf_tensor *sf__t_attention_dropout(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                                   int64_t heads, double p, int64_t seed, sf_array *index,
                                   int64_t stream, bool training, const sf_loc *loc);
/* n values of [0, 1) in steps of 2^-24 from the PCG32 stream of key, as a
 * seeded nn.uniform draws them. */
void sf__uniform_key(float *d, int64_t n, uint64_t key);
/* Scales the params' gradients so their global L2 norm is at most
 * max_norm (torch's clip_grad_norm_); the norm before clipping. */
double sf__clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc);
/* The clip's two passes over n floats (layers.c): the sum of squares in
 * f64, and g *= c. */
double sf__sum_squares(const float *g, int64_t n);
void sf__scale_floats(float *g, int64_t n, float c);

/* collective.c: the buckets of the collectives over a tensor[] (docs/nn.md,
 * "Collectives over tensors"): the cap in floats (SFLOW_BUCKET_MB), and
 * the end of the bucket that starts at tensor i (its floats in *len): at
 * least one tensor, more while they fit the cap.  std.train's shards
 * (train.c) are cut in the same buckets. */
int64_t sf__bucket_floats(void);
int64_t sf__bucket_end(sf_tensor *const *ts, int64_t n, int64_t i, int64_t cap, int64_t *len);
/* reduce_scatter (sum) and all_gather of shards over a tensor[], bucket by
 * bucket: see collective.c. */
void sf__reduce_scatter_tensors(sf_array *ts, const sf_loc *loc);
void sf__all_gather_tensors(sf_array *ts, const sf_loc *loc);
sf_tensor *sf_std_nn_embedding_lookup(sf_tensor *weight, sf_array *ids, sf_array *shape,
                                      const sf_loc *loc);
sf_tensor *sf_std_nn_layer_norm_apply(sf_tensor *x, sf_tensor *weight, sf_tensor *bias,
                                      double eps, const sf_loc *loc);
sf_tensor *sf_std_nn_dropout(sf_tensor *x, double p, int64_t seed, bool training,
                             const sf_loc *loc);
sf_tensor *sf_std_nn_attention(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                               int64_t heads, bool causal, int64_t kv_heads, const sf_loc *loc);
/* attention with a causal mask (query t of T sees keys 0 .. S - T + t) and
 * grouped-query attention (k and v of kv_heads heads, each serving
 * heads / kv_heads query heads; 0: heads). */
sf_tensor *sf__t_attention_ex(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                              int64_t heads, bool causal, int64_t kv_heads, const sf_loc *loc);
sf_tensor *sf_std_nn_dropout_rows(sf_tensor *x, double p, int64_t seed, sf_array *index,
                                  int64_t stream, bool training, const sf_loc *loc);
sf_tensor *sf_std_nn_attention_dropout(sf_tensor *q, sf_tensor *k, sf_tensor *v, sf_array *mask,
                                       int64_t heads, double p, int64_t seed, sf_array *index,
                                       int64_t stream, bool training, const sf_loc *loc);
double sf_std_nn_clip_grad_norm(sf_array *ps, double max_norm, const sf_loc *loc);
sf_tensor *sf_std_nn_clip_grad_norm_tensor(sf_array *ps, double max_norm, const sf_loc *loc);

/* ------------------------------------------------------------- norm.c */

/* x (..., d) / sqrt(mean(x²) + eps) over its last dimension, times weight
 * (d): torch's F.rms_norm(x, [d], weight, eps). */
sf_tensor *sf__t_rms_norm(sf_tensor *x, sf_tensor *weight, double eps, const sf_loc *loc);
sf_tensor *sf_std_nn_rms_norm(sf_tensor *x, sf_tensor *weight, double eps, const sf_loc *loc);
/* rope.c: nn.rope(x (B, H, T, D), pos0, theta), Hugging Face Llama's rotate_half. */
sf_tensor *sf__t_rope(sf_tensor *x, int64_t pos0, double theta, const sf_loc *loc);
sf_tensor *sf_std_nn_rope(sf_tensor *x, int64_t pos0, double theta, const sf_loc *loc);

/* ------------------------------------------------- create.c, select.c */

/* torch.arange(start, end, step) (f32 values start + i step, i <
 * ceil((end - start) / step)), torch.full(shape, value), torch.tril /
 * torch.triu(x, diagonal): the last two dimensions of x, elements with
 * j - i > k (tril) or j - i < k (triu) zeroed; the gradient likewise. */
sf_tensor *sf_std_nn_arange(double start, double end, double step, const sf_loc *loc);
sf_tensor *sf_std_nn_full(sf_array *shape, double value, const sf_loc *loc);
sf_tensor *sf__t_tri(sf_tensor *x, int64_t k, bool upper, const sf_loc *loc);
sf_tensor *sf_std_nn_tril(sf_tensor *x, int64_t k, const sf_loc *loc);
sf_tensor *sf_std_nn_triu(sf_tensor *x, int64_t k, const sf_loc *loc);
/* torch.where(cond, a, b) with cond a tensor whose non-zero values are
 * true, the three broadcast together; the gradient flows to a where cond
 * holds and to b elsewhere.  masked_fill(x, mask, value): where(mask,
 * value, x), mask broadcast to x's shape. */
sf_tensor *sf__t_where(sf_tensor *c, sf_tensor *a, sf_tensor *b, const sf_loc *loc);
sf_tensor *sf_std_nn_where(sf_tensor *c, sf_tensor *a, sf_tensor *b, const sf_loc *loc);
sf_tensor *sf_std_nn_masked_fill(sf_tensor *x, sf_tensor *mask, double value, const sf_loc *loc);
/* torch.topk(x, k) along the last dimension into struct TopK { values:
 * tensor, indices: i64[] } at out: the indices row-major (rows x k,
 * largest first, ties to the lower index, NaN the largest), the values
 * gathered with them (so their gradient is gather's). */
void sf_std_nn_topk(void *out, const sf_type *out_type, sf_tensor *x, int64_t k,
                    const sf_loc *loc);
/* The indices of row x's (n values) k first elements in topk's order. */
void sf__topk_row(const float *x, int64_t n, int64_t k, int64_t *out);
/* torch.multinomial(probs, n, replacement=True): n indices per row of
 * probs (1-D or 2-D, non-negative, a positive finite sum), drawn from
 * (seed, row, draw) alone. */
sf_array *sf_std_nn_multinomial(sf_tensor *probs, int64_t n, int64_t seed, const sf_loc *loc);

/* ---------------------------------------------------------- sampling.c */

/* std.llm's sampling (stdlib/llm.sflow, "Sampling"): the next token from
 * the logits (vocab), temperature, then top-k, then top-p as Hugging Face's
 * generate, the draw from (seed, step) alone. */
int64_t sf_std_llm_sample(sf_tensor *logits, const void *s, const sf_type *s_type, int64_t step,
                          const sf_loc *loc);
/* Streaming's stop strings: the byte offset where the earliest begins in
 * text (-1: none), and how many trailing bytes could begin one. */
int64_t sf_std_llm_stop_at(sf_str *text, sf_array *stops, const sf_loc *loc);
int64_t sf_std_llm_stop_hold(sf_str *text, sf_array *stops, const sf_loc *loc);

/* ------------------------------------------------------------ train.c */

/* std.train's view of the calling member (stdlib/train.sflow): its rank
 * and its group's size (0 and 1 outside a group's method), the in-place
 * sum of tensors (bucketed) and of an f64[] over the group, and a
 * broadcast of tensors from root. */
int64_t sf_std_train_rank(const sf_loc *loc);
void sf_std_train_progress(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss,
                           double samples_per_s, const sf_loc *loc);
int64_t sf_std_train_workers(const sf_loc *loc);
void sf_std_train_observe(int64_t step, int64_t epoch, double loss, double lr, double grad_norm,
                          int64_t samples, double seconds, double samples_per_s,
                          double comm_seconds, sf_str *tensorboard_dir, const sf_loc *loc);
void sf_std_train_sum_tensors(sf_array *ts, const sf_loc *loc);
void sf_std_train_sum_f64(sf_array *xs, const sf_loc *loc);
void sf_std_train_broadcast_tensors(sf_array *ts, int64_t root, const sf_loc *loc);
/* std.train's sharded step, its collectives over tensors, the memory plan
 * and the tensor storage counters (train.c; docs/train.md, "Shards"). */
sf_array *sf_std_train_shard_init(sf_array *ps, const sf_loc *loc);
void sf_std_train_shard_reduce(sf_array *ps, sf_array *sh, sf_array *unit, const sf_loc *loc);
double sf_std_train_shard_clip(sf_array *sh, double max_norm, const sf_loc *loc);
/* shard "parameters": each piece's values copied into storage of its own
 * (the member's shard), and the whole params' buffers freed (train.c). */
sf_array *sf_std_train_shard_copy(sf_array *ps, sf_array *unit, const sf_loc *loc);
void sf_std_train_shard_release(sf_array *ps, const sf_loc *loc);
void sf_std_train_shard_gather(sf_array *ps, sf_array *sh, sf_array *unit, bool all,
                               const sf_loc *loc);
void sf_std_train_shard_fill(sf_array *ps, sf_array *sh, sf_array *unit, const sf_loc *loc);
/* shard "parameters" with units (FSDP's schedule; train.c "units"): the
 * unit of each param from train.start's lists, the State's units
 * registered for nn.unit_begin, and a micro-step's end (a member that ran
 * no backward replays the units' collectives). */
sf_array *sf_std_train_unit_ids(sf_array *ps, sf_array *units, const sf_loc *loc);
/* The units' registry holds no reference to a param: a param freed
 * leaves it (tensor.c's destructor calls this while any unit is
 * registered), and a set of units whose params are all gone is freed. */
extern int64_t sf__units_live;
void sf__units_forget(const sf_tensor *t);
void sf_std_train_shard_units(sf_array *ps, sf_array *sh, sf_array *unit, const sf_loc *loc);
void sf_std_train_shard_units_step(sf_array *ps, sf_array *unit, int64_t at, const sf_loc *loc);
/* train.save_state / load_state (train.c, "Re-sharding on load" in
 * docs/train.md): whole tensors from this member's pieces (zeros
 * elsewhere, summed over the group), the pieces cut from whole tensors,
 * values copied tensor by tensor, and a state file renamed into place with
 * its folder synced. */
sf_array *sf_std_train_shard_whole(sf_array *ps, sf_array *pieces, sf_array *unit,
                                   const sf_loc *loc);
void sf_std_train_shard_slice(sf_array *ps, sf_array *whole, sf_array *pieces, sf_array *unit,
                              const sf_loc *loc);
void sf_std_train_copy_values(sf_array *dst, sf_array *src, const sf_loc *loc);
void sf_std_train_rename_file(sf_str *from, sf_str *to, const sf_loc *loc);
void sf_std_train_reduce_scatter_tensors(sf_array *ts, const sf_loc *loc);
void sf_std_train_all_gather_tensors(sf_array *ts, const sf_loc *loc);
sf_array *sf_std_train_plan_bytes(sf_array *ps, sf_str *shard, int64_t workers, sf_array *unit,
                                  const sf_loc *loc);
sf_array *sf_std_train_memory(bool reset, const sf_loc *loc);

#endif
