/*
 * tensor.c — the tensor object: a header of shape, strides and offset over
 * a reference-counted f32 storage; creation, views, contiguous copies, and
 * the hooks through which core frees, serializes, reads back and prints
 * tensors (sf__nn_install).
 *
 * Key design choice: views share the storage, never the header, so the
 * header can carry what belongs to one tensor (its gradient, the node that
 * made it) while reshape and transpose cost no copy.  Storage is 64-byte
 * aligned so the elementwise loops vectorise on whole cache lines.
 *
 * Serialized form (serial.c's SF_TENSOR): u64 ndim (UINT64_MAX for an
 * unset tensor), ndim u64 dimensions, then the values as raw f32 in
 * row-major order.  Only values travel: a tensor read back is a fresh
 * leaf with no gradient and no graph.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

const sf_type sf__type_tensor = {.kind = SF_TENSOR, .size = 8, .align = 8, .name = "tensor"};
int64_t sf__tensor_live, sf__node_live;
int64_t sf__tensor_bytes, sf__tensor_bytes_peak;

/* A host buffer of bytes came (+) or went (-): the counters in use and
 * their peak. */
static void count_bytes(int64_t bytes) {
  int64_t now = __atomic_add_fetch(&sf__tensor_bytes, bytes, __ATOMIC_RELAXED);
  int64_t peak = __atomic_load_n(&sf__tensor_bytes_peak, __ATOMIC_RELAXED);
  while (now > peak && !__atomic_compare_exchange_n(&sf__tensor_bytes_peak, &peak, now, true,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

void sf__tensor_bytes_reset(void) {
  __atomic_store_n(&sf__tensor_bytes_peak, __atomic_load_n(&sf__tensor_bytes, __ATOMIC_RELAXED),
                   __ATOMIC_RELAXED);
}

/* ----------------------------------------------------------- storage */

/* Recently freed large buffers, kept for the next tensor of the same byte
 * size.  A training step frees and makes the same activations and
 * gradients (1-4 MB each in the MLP benchmark) every step; glibc hands
 * such blocks back to the kernel when they end the heap (its trim
 * threshold is 128 KB) and the next step faults every page in again,
 * zeroed by the kernel: 6% of the step, more than the SGD update.  The
 * cache is small and bounded (CACHE_SLOTS buffers, CACHE_BYTES in all),
 * so memory stays flat, and shared by all threads behind one mutex: a
 * step makes a few dozen large tensors, and a buffer is often freed on
 * another thread than the one that made it (a task's result). */
#define CACHE_MIN (64 << 10)   /* smaller blocks stay in malloc's own bins */
#define CACHE_SLOTS 64
/* Bytes kept in all: an encoder layer's activations are 25 MB each
 * (batch 32 x 128 tokens x 1536), so a 16 MiB bound faulted them in every
 * step (12% of it).  The bound is what a step's freed-and-remade buffers
 * need, not a growth: a buffer waits only until the next tensor of its
 * size, and the oldest goes first. */
#define CACHE_BYTES ((size_t)512 << 20)
static struct {
  pthread_mutex_t mu;
  int32_t n;
  size_t bytes;
  struct { void *p; size_t bytes; } slot[CACHE_SLOTS];
} C = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *buffer_alloc(size_t bytes) {
  if (bytes >= CACHE_MIN) {
    void *p = NULL;
    pthread_mutex_lock(&C.mu);
    for (int32_t i = C.n - 1; i >= 0; i--) /* the most recent first: warm in cache */
      if (C.slot[i].bytes == bytes) {
        p = C.slot[i].p;
        C.bytes -= bytes;
        C.slot[i] = C.slot[--C.n];
        break;
      }
    pthread_mutex_unlock(&C.mu);
    if (p) {
      count_bytes((int64_t)bytes);
      return p;
    }
  }
  void *p = aligned_alloc(64, bytes);
  if (p)
    count_bytes((int64_t)bytes);
  return p;
}

static void buffer_free(void *p, size_t bytes) {
  count_bytes(-(int64_t)bytes);
  if (bytes >= CACHE_MIN && bytes <= CACHE_BYTES) {
    void *evict = NULL;
    pthread_mutex_lock(&C.mu);
    /* The oldest goes when the cache is full: shapes no longer in use
     * age out, and the next step's buffers take their place. */
    while (C.n > 0 && (C.n == CACHE_SLOTS || C.bytes + bytes > CACHE_BYTES)) {
      free(evict);
      evict = C.slot[0].p;
      C.bytes -= C.slot[0].bytes;
      memmove(C.slot, C.slot + 1, (size_t)--C.n * sizeof C.slot[0]);
    }
    C.slot[C.n].p = p;
    C.slot[C.n].bytes = bytes;
    C.n++;
    C.bytes += bytes;
    pthread_mutex_unlock(&C.mu);
    free(evict);
    return;
  }
  free(p);
}

static size_t storage_bytes(int64_t len) {
  return ((size_t)(len > 0 ? len : 1) * sizeof(float) + 63) & ~(size_t)63;
}
size_t sf__storage_bytes(int64_t len) { return storage_bytes(len); }

/* A storage's host buffer, made at its first host read when it was made
 * on the device (device.c). */
void *sf__storage_host_alloc(int64_t len) {
  void *p = buffer_alloc(storage_bytes(len));
  if (!p)
    sf_runtime_error(NULL, "out of memory (a tensor of %" PRId64 " values)", len);
  return p;
}

/* Frees a host storage's buffer, keeping the storage (its len): std.train's
 * shard "parameters" frees the whole params between training calls and
 * sf__storage_host_alloc gives them a buffer again before their use. */
void sf__storage_host_free(sf__storage *s) {
  if (s->data && !s->dev) {
    buffer_free(s->data, storage_bytes(s->len));
    s->data = NULL;
  }
}

float *sf__t_released(const sf_tensor *t) {
  if (t->st->len == 0)
    return NULL;
  char shape[SF__SHAPE_BUF];
  sf_runtime_error(NULL, "a tensor of shape %s was read while released: std.train's shard "
                   "\"parameters\" keeps only each member's shard of a param between training "
                   "calls; bracket a use outside train.batches with train.gather(t) and "
                   "train.release(t) (docs/train.md, \"Shards\")", SF__SHP(t, shape));
}

static sf__storage *storage_new(int64_t len, bool zero) {
  sf__storage *s = sf_alloc(sizeof *s);
  size_t bytes = storage_bytes(len);
  s->data = buffer_alloc(bytes);
  if (!s->data)
    sf_runtime_error(NULL, "out of memory (a tensor of %" PRId64 " values)", len);
  if (zero)
    memset(s->data, 0, bytes);
  s->rc = 1;
  s->len = len;
  s->dev = NULL;
  s->where = SF__WHERE_HOST;
  s->gpu = 0;
  return s;
}

static void storage_release(sf__storage *s) {
  if (s && __atomic_sub_fetch(&s->rc, 1, __ATOMIC_ACQ_REL) == 0) {
    if (s->dev)
      sf__storage_dev_free(s);
    if (s->data)
      buffer_free(s->data, storage_bytes(s->len));
    sf_free(s);
  }
}

/* ------------------------------------------------------------ shapes */

const char *sf__shape_str(int32_t ndim, const int64_t *shape, char *buf) {
  size_t n = 0;
  buf[n++] = '[';
  for (int32_t i = 0; i < ndim; i++)
    n += (size_t)snprintf(buf + n, SF__SHAPE_BUF - n, "%s%" PRId64, i ? ", " : "", shape[i]);
  buf[n++] = ']';
  buf[n] = '\0';
  return buf;
}

static int64_t checked_numel(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  char sb[SF__SHAPE_BUF];
  if (ndim < 0 || ndim > SF__TMAX)
    sf_runtime_error(loc, "a tensor has at most %d dimensions, not %d", SF__TMAX, (int)ndim);
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      sf_runtime_error(loc, "tensor shape %s has a negative dimension",
                       sf__shape_str(ndim, shape, sb));
    if (shape[i] && n > INT64_MAX / 4 / shape[i])
      sf_runtime_error(loc, "tensor shape %s is too large", sf__shape_str(ndim, shape, sb));
    n *= shape[i];
  }
  return n;
}

static void contig_strides(int32_t ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
}

int32_t sf__t_axis(const char *op, const sf_tensor *t, int64_t axis, const sf_loc *loc) {
  int64_t a = axis < 0 ? axis + t->ndim : axis;
  if (a < 0 || a >= t->ndim) {
    char sb[SF__SHAPE_BUF];
    sf_runtime_error(loc, "%s: axis %" PRId64 " is out of range for a tensor of shape %s", op,
                     axis, SF__SHP(t, sb));
  }
  return (int32_t)a;
}

void sf__t_shape_from(sf_array *shape, const char *what, int32_t *ndim, int64_t *dims,
                      const sf_loc *loc) {
  int64_t n = shape ? shape->len : 0;
  if (n > SF__TMAX)
    sf_runtime_error(loc, "%s: a tensor has at most %d dimensions, not %" PRId64, what, SF__TMAX,
                     n);
  for (int64_t i = 0; i < n; i++)
    dims[i] = ((int64_t *)shape->data)[i];
  *ndim = (int32_t)n;
}

/* ----------------------------------------------------------- tensors */

static sf_tensor *header_new(int32_t ndim, const int64_t *shape) {
  sf_tensor *t = sf_alloc(sizeof *t);
  memset(t, 0, sizeof *t);
  t->hdr.rc = 1;
  t->hdr.tag = SF_OBJ_TENSOR;
  t->ndim = ndim;
  t->numel = 1;
  for (int32_t i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->numel *= shape[i];
  }
  __atomic_fetch_add(&sf__tensor_live, 1, __ATOMIC_RELAXED);
  if (!__atomic_load_n(&sf__tensor_made, __ATOMIC_RELAXED))
    __atomic_store_n(&sf__tensor_made, true, __ATOMIC_RELAXED);
  return t;
}

static sf_tensor *tensor_new(int32_t ndim, const int64_t *shape, bool zero, const sf_loc *loc) {
  int64_t n = checked_numel(ndim, shape, loc);
  sf_tensor *t = header_new(ndim, shape);
  contig_strides(ndim, shape, t->strides);
  t->st = storage_new(n, zero);
  return t;
}

/* A header over st (a new storage of the shape's numel, device.c's). */
sf_tensor *sf__t_over(int32_t ndim, const int64_t *shape, sf__storage *st) {
  sf_tensor *t = header_new(ndim, shape);
  contig_strides(ndim, shape, t->strides);
  t->st = st;
  return t;
}

/* The shape's numel, checked as every new tensor's (device.c). */
int64_t sf__t_numel_checked(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return checked_numel(ndim, shape, loc);
}

sf_tensor *sf__t_zeros(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return tensor_new(ndim, shape, true, loc);
}

sf_tensor *sf__t_empty(int32_t ndim, const int64_t *shape, const sf_loc *loc) {
  return tensor_new(ndim, shape, false, loc);
}

sf_tensor *sf__t_like(const sf_tensor *t) { return tensor_new(t->ndim, t->shape, false, NULL); }

sf_tensor *sf__t_full(int32_t ndim, const int64_t *shape, float v) {
  sf_tensor *t = tensor_new(ndim, shape, false, NULL);
  float *d = t->st->data;
  for (int64_t i = 0; i < t->numel; i++)
    d[i] = v;
  return t;
}

sf_tensor *sf__t_view(const sf_tensor *t, int32_t ndim, const int64_t *shape,
                      const int64_t *strides, int64_t offset) {
  sf_tensor *v = header_new(ndim, shape);
  memcpy(v->strides, strides, sizeof(int64_t) * (size_t)ndim);
  v->offset = offset;
  v->st = t->st;
  __atomic_fetch_add(&t->st->rc, 1, __ATOMIC_RELAXED);
  return v;
}

bool sf__t_is_contig(const sf_tensor *t) {
  int64_t s = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s)
      return false;
    s *= t->shape[i];
  }
  return true;
}

/* Visits src row by row (the last dimension) in row-major order. */
void sf__t_copy_into(sf_tensor *dst, const sf_tensor *src) {
  if (sf__nn_gpu_here(NULL))
    return sf__gpu_copy_into(dst, src);
  if (sf__t_is_contig(dst) && sf__t_is_contig(src)) {
    memcpy(sf__t_wdata(dst), sf__t_data(src), (size_t)src->numel * sizeof(float));
    return;
  }
  /* A general walk over src's index space; dst is addressed through its
   * own strides at the same row-major position. */
  int32_t nd = src->ndim;
  int64_t idx[SF__TMAX] = {0};
  const float *s = sf__t_data(src);
  float *d = sf__t_wdata(dst);
  /* dst may have another shape of the same numel (a reshape's copy):
   * walk dst's index space alongside. */
  int64_t jdx[SF__TMAX] = {0};
  for (int64_t k = 0; k < src->numel; k++) {
    int64_t so = 0, doff = 0;
    for (int32_t i = 0; i < nd; i++)
      so += idx[i] * src->strides[i];
    for (int32_t i = 0; i < dst->ndim; i++)
      doff += jdx[i] * dst->strides[i];
    d[doff] = s[so];
    for (int32_t i = nd - 1; i >= 0 && ++idx[i] == src->shape[i]; i--)
      idx[i] = 0;
    for (int32_t i = dst->ndim - 1; i >= 0 && ++jdx[i] == dst->shape[i]; i--)
      jdx[i] = 0;
  }
}

sf_tensor *sf__t_contig(sf_tensor *t) {
  if (sf__t_is_contig(t)) {
    sf_retain(t);
    return t;
  }
  sf_tensor *c = sf__t_like_here(t);
  sf__t_assign(c, t);
  return c;
}

sf_tensor *sf__t_arg(sf_tensor *t, const char *op, const sf_loc *loc) {
  if (!t)
    sf_runtime_error(loc, "%s: the tensor is unset (a field or variable never assigned)", op);
  return t;
}

static void tensor_dtor(sf_obj *o) {
  sf_tensor *t = (sf_tensor *)o;
  if (__builtin_expect(__atomic_load_n(&sf__units_live, __ATOMIC_RELAXED) != 0, 0))
    sf__units_forget(t); /* a param of std.train's units (train.c) */
  storage_release(t->st);
  sf_release(t->grad);
  if (t->node)
    sf__node_unref(t->node);
  __atomic_fetch_sub(&sf__tensor_live, 1, __ATOMIC_RELAXED);
  sf_free(t);
}

/* --------------------------------------------------------- the hooks */

static void tensor_ser(sf__buf *b, const void *p) {
  sf_tensor *t = (sf_tensor *)p;
  if (!t) {
    sf__ser_u64(b, UINT64_MAX);
    return;
  }
  sf__ser_u64(b, (uint64_t)t->ndim);
  for (int32_t i = 0; i < t->ndim; i++)
    sf__ser_u64(b, (uint64_t)t->shape[i]);
  /* Whether it is a param (a leaf that requires grad): a model restored
   * from a checkpoint must go on training.  Its gradient is not kept: it
   * is rebuilt by the next backward, as after zero_grad. */
  sf__ser_u64(b, t->req && !t->node ? 1 : 0);
  if (!t->st->data && !t->st->dev) { /* a param freed by std.train's shard "parameters": zeros */
    size_t bytes = (size_t)t->numel * sizeof(float);
    char zero[4096] = {0};
    for (size_t k = 0; k < bytes; k += sizeof zero)
      sf__buf_put(b, zero, bytes - k < sizeof zero ? bytes - k : sizeof zero);
    return;
  }
  sf_tensor *c = sf__t_contig(t);
  sf__buf_put(b, (const char *)sf__t_data(c), (size_t)c->numel * sizeof(float));
  sf_release(c);
}

/* Checks every size against the bytes left before allocating. */
static bool tensor_de(sf__reader *r, void **out) {
  uint64_t nd;
  *out = NULL;
  if (!sf__de_u64(r, &nd))
    return false;
  if (nd == UINT64_MAX)
    return true;
  if (nd > SF__TMAX)
    return false;
  int64_t shape[SF__TMAX];
  uint64_t n = 1;
  /* A dimension may exceed the bytes left when another is 0 ([0, 10^6]
   * has no values), so only the product is bounded by them. */
  for (uint64_t i = 0; i < nd; i++) {
    uint64_t d;
    if (!sf__de_u64(r, &d) || d > (uint64_t)INT64_MAX / 8)
      return false;
    shape[i] = (int64_t)d;
    if (n && d > (uint64_t)(r->end - r->p) / n)
      return false;
    n *= d;
  }
  uint64_t flags;
  if (!sf__de_u64(r, &flags) || flags > 1)
    return false;
  if (n > (uint64_t)(r->end - r->p) / sizeof(float))
    return false;
  sf_tensor *t = sf__t_empty((int32_t)nd, shape, NULL);
  t->req = flags == 1;
  memcpy(t->st->data, r->p, n * sizeof(float));
  r->p += n * sizeof(float);
  *out = t;
  return true;
}

/* NumPy's summary: past 1000 values, the first and last 3 of each axis. */
#define SUMMARY_AT 1000
#define EDGE 3

static void format_axis(sf__buf *b, const sf_tensor *t, int32_t ax, int64_t off, bool summary) {
  if (ax == t->ndim) {
    char num[SF__FLOAT_BUF];
    int n = sf__fmt_f32_repr(sf__t_data(t)[off - t->offset], num);
    sf__buf_put(b, num, (size_t)n);
    return;
  }
  sf__buf_put(b, "[", 1);
  int64_t len = t->shape[ax];
  for (int64_t i = 0; i < len; i++) {
    if (i > 0)
      sf__buf_put(b, ", ", 2);
    if (summary && len > 2 * EDGE && i == EDGE) {
      sf__buf_put(b, "..., ", 5);
      i = len - EDGE;
    }
    format_axis(b, t, ax + 1, off + i * t->strides[ax], summary);
  }
  sf__buf_put(b, "]", 1);
}

static void tensor_format(sf__buf *b, const void *p) {
  const sf_tensor *t = p;
  if (!t) {
    sf__buf_put(b, "tensor(unset)", 13);
    return;
  }
  sf__buf_put(b, "tensor(", 7);
  format_axis(b, t, 0, t->offset, t->numel > SUMMARY_AT);
  sf__buf_put(b, ")", 1);
}

void sf__nn_install(void) {
  sf__obj_dtor[SF_OBJ_TENSOR] = tensor_dtor;
  sf__tensor_ser = tensor_ser;
  sf__tensor_de = tensor_de;
  sf__tensor_format = tensor_format;
  sf__custom_install(); /* kernels that take tensors (custom.c) */
}
