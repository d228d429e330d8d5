/*
 * collective.c — allreduce_sum, allreduce_mean, broadcast, reduce_scatter
 * and all_gather (of shards) over a tensor or a tensor[] (`allreduce_mean(grads(m))`), inside the methods
 * of a group's actors (docs/nn.md, "Collectives over tensors").
 *
 * Key design choices:
 *  - In place: each tensor's values are replaced by the group's sum, mean
 *    or the root's values, where they live.  grads(m) gives the params'
 *    live gradient tensors (sf__t_grad), so `allreduce_mean(grads(m))`
 *    then `nn.step(opt)` steps every replica with the averaged gradient,
 *    the data-parallel step; nothing has to be copied back.
 *  - Bucketed as PyTorch DDP: the tensors are packed in order into f32
 *    buckets of up to SFLOW_BUCKET_MB megabytes (25 by default, DDP's
 *    bucket_cap_mb), a tensor never split (one larger than the cap is a
 *    bucket of its own); each bucket is one call of the group's
 *    collective (sched's sf_allreduce_* on a plain f32[]), then unpacked.
 *    A model of a hundred small tensors costs one or two transport calls,
 *    not a hundred barriers or ring rounds.  Packing also makes aliasing
 *    harmless: a tensor listed twice (tied weights) is read before any is
 *    written.
 *  - The scheduler's collectives are the whole transport: this layer
 *    stands on sched (through gpu), so it calls the group's entry points
 *    on ordinary arrays and every transport (shared memory, the TCP ring,
 *    NCCL stacked on either) serves tensors with no hook and no new
 *    transport op.
 *  - Device tensors stay on the device: in a call that holds a GPU, over
 *    tensors whose only current copy is there, each bucket is a device
 *    array packed and unpacked by a copy kernel (sf__gpu_pack), which the
 *    NCCL transport reduces in place (device_bucket below); no tensor is
 *    read back.  A transport that stages the call through the host
 *    (SFLOW_NCCL=off, members sharing a GPU) copies the bucket array, and
 *    the result is uploaded once and unpacked the same way.
 *  - Every member must bring tensors of the same sizes in the same order
 *    (replicas' grads do): the transports check each bucket's length
 *    across members and fail every member with both lengths.
 */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* The bucket cap in floats: SFLOW_BUCKET_MB (a positive number of
 * megabytes, 10^6 bytes as DDP counts), 25 when unset or malformed. */
int64_t sf__bucket_floats(void) {
  static _Atomic int64_t cached;
  int64_t n = atomic_load_explicit(&cached, memory_order_relaxed);
  if (n)
    return n;
  double mb = 25.0;
  const char *e = getenv("SFLOW_BUCKET_MB");
  if (e && *e) {
    char *end;
    double v = strtod(e, &end);
    if (!*end && v > 0 && isfinite(v))
      mb = v;
  }
  n = (int64_t)(mb * 1e6 / sizeof(float));
  if (n < 1)
    n = 1;
  atomic_store_explicit(&cached, n, memory_order_relaxed);
  return n;
}

/* Which collective a call over tensors is. */
enum { T_SUM, T_MEAN, T_BCAST, T_RS, T_AG };

static const char *op_name(int op) {
  static const char *names[] = {"allreduce_sum", "allreduce_mean", "broadcast", "reduce_scatter",
                                "all_gather"};
  return names[op];
}

int64_t sf__bucket_end(sf_tensor *const *ts, int64_t n, int64_t i, int64_t cap, int64_t *len) {
  int64_t j = i, l = 0;
  while (j < n && (j == i || l + ts[j]->numel <= cap))
    l += ts[j++]->numel;
  *len = l;
  return j;
}

/* ts[i], checked: an unset tensor (a field never assigned) is an error. */
static sf_tensor *nth(sf_tensor *const *ts, int64_t i, int op, const sf_loc *loc) {
  return sf__t_arg(ts[i], op_name(op), loc);
}

static void pack(float *dst, sf_tensor *t) {
  if (sf__t_is_contig(t)) {
    memcpy(dst, sf__t_data(t), (size_t)t->numel * sizeof(float));
    return;
  }
  sf_tensor *c = sf__t_contig(t);
  memcpy(dst, sf__t_data(c), (size_t)t->numel * sizeof(float));
  sf_release(c);
}

static void unpack(sf_tensor *t, const float *src) {
  if (sf__t_is_contig(t)) {
    memcpy(sf__t_wdata(t), src, (size_t)t->numel * sizeof(float));
    return;
  }
  sf_tensor *c = sf__t_like(t); /* a strided view: its own layout, through a copy */
  memcpy(sf__t_data(c), src, (size_t)t->numel * sizeof(float));
  sf__t_copy_into(t, c);
  sf_release(c);
}

/* The bucket's one call of the group's collective. */
static void run_bucket(sf_array *b, int op, int64_t root, const sf_loc *loc) {
  if (op == T_BCAST)
    sf_broadcast(b, root, loc);
  else if (op == T_RS)
    sf__reduce_scatter(b, false, loc);
  else if (op == T_AG)
    sf__all_gather(b, loc);
  else if (op == T_MEAN)
    sf_allreduce_mean(b, loc);
  else
    sf_allreduce_sum(b, loc);
}

/* A bucket of room floats or more: the calling thread keeps its largest
 * (at most the cap, or the largest tensor), so a training loop's every
 * step does not map and fault in a fresh 25 MB (that alone made a 1M-param
 * allreduce_mean twice as slow as one of a flat f32[]).  The transports
 * never keep the array past the call. */
static sf_array *bucket(int64_t room, const sf_loc *loc) {
  static _Thread_local sf_array *kept;
  if (!kept || kept->cap < room) {
    sf_release(kept);
    kept = sf_array_new(&sf_type_f32, room, loc);
  }
  return kept;
}

/* ------------------------------------------------------ device buckets */

/* Does this member's call pack on the device?  When the running call holds
 * a GPU and some tensor's only current copy is there (gradients after a
 * backward on the device, params after a device step): the bucket is then
 * a device array, which the group's NCCL transport reduces in place.
 * Members need not agree: a group where one brings a host bucket stages
 * that call through the host (nccl.c's offer and meet). */
static bool on_device(sf_tensor *const *ts, int64_t n, const sf_loc *loc) {
  if (!sf__nn_gpu_here(loc))
    return false;
  for (int64_t i = 0; i < n; i++)
    if (sf__t_on_dev(ts[i]))
      return true;
  return false;
}

/* A bucket array whose host copy holds nothing worth copying back: the
 * GPU layer's settle (which it joined when NCCL wrote it) then only
 * releases it, and a later device_alloc on another device frees its old
 * buffer without reading it. */
static void scratch(sf_array *b) {
  if (b)
    b->where = SF__WHERE_HOST;
}

/* The device bucket of room floats or more, on this thread's device: as
 * bucket() kept per thread, one per device slot (a pool thread may serve
 * members on several GPUs).  Its device buffer comes from cuMemAlloc as
 * any sf_array's (gpu.c); its host buffer is where a host transport
 * stages the call. */
#define DEV_SLOTS 16
static sf_array *dev_bucket(int64_t room, const sf_loc *loc) {
  static _Thread_local sf_array *kept[DEV_SLOTS];
  int32_t d = sf__gpu_current_device();
  sf_array **k = &kept[(d < 0 ? 0 : d) % DEV_SLOTS];
  if (!*k || (*k)->cap < room) {
    scratch(*k);
    sf_release(*k);
    *k = sf_array_new(&sf_type_f32, room, loc);
  }
  sf_array *b = *k;
  b->len = b->cap; /* the device buffer is made for the whole capacity */
  sf__gpu_device_alloc(b, loc);
  return b;
}

/* One bucket ts[i..j) of len floats through the group on the device:
 * packed by a copy kernel per tensor (strided ones gathered), reduced in
 * place by NCCL (allreduce_mean divides on the device), scattered back,
 * the tensors left device-current.  No tensor is read back.  When the
 * group's transport stages the call through the host instead
 * (SFLOW_NCCL=off, members sharing a GPU, a member with a host bucket),
 * it copies the bucket to the host and leaves the result there; it is
 * uploaded once and scattered the same way. */
static void device_bucket(sf_tensor *const *ts, int64_t i, int64_t j, int64_t len, int64_t room,
                          int op, int64_t root, const sf_loc *loc) {
  sf_array *b = dev_bucket(room, loc);
  uint64_t base = (uint64_t)(uintptr_t)b->dev;
  int64_t off = 0;
  for (int64_t k = i; k < j; off += ts[k++]->numel)
    sf__gpu_pack(base + (uint64_t)off * sizeof(float), ts[k], false, loc);
  b->len = len;
  b->where = SF__WHERE_DEVICE;
  /* The packing kernels are queued on stream 0 and NCCL runs on a stream
   * of its own that does not wait for it: the device finishes them first
   * (a wait, no read back). */
  sf__gpu_sync(loc);
  run_bucket(b, op, root, loc);
  if (b->where != SF__WHERE_DEVICE) /* staged through the host: the result is there */
    sf__gpu_device_copy(b, loc);
  off = 0;
  for (int64_t k = i; k < j; off += ts[k++]->numel)
    sf__gpu_pack(base + (uint64_t)off * sizeof(float), ts[k], true, loc);
  scratch(b);
}

/* The tensors ts[0..n) in buckets, in order.  A group of one changes
 * nothing (after the checks sched's entry points make: broadcast's root). */
static void tensors_collective(sf_tensor *const *ts, int64_t n, int op, int64_t root,
                               const sf_loc *loc) {
  int64_t cap = sf__bucket_floats(), total = 0;
  for (int64_t i = 0; i < n; i++)
    total += nth(ts, i, op, loc)->numel;
  if (sf_group_size() <= 1) {
    if (op == T_BCAST)
      sf_broadcast(NULL, root, loc); /* the root's range check */
    return;
  }
  /* The packing bucket: big enough for the cap, or for a strided tensor
   * over it; a contiguous tensor alone in its bucket needs none (below). */
  int64_t room = total < cap ? total : cap;
  for (int64_t i = 0; i < n; i++)
    if (ts[i]->numel > room && !sf__t_is_contig(ts[i]))
      room = ts[i]->numel;
  sf_array *b = NULL;
  bool dev = on_device(ts, n, loc);
  if (dev) /* every bucket is packed, a tensor over the cap alone */
    for (int64_t i = 0; i < n; i++)
      if (ts[i]->numel > room)
        room = ts[i]->numel;
  for (int64_t i = 0; i < n || (n == 0 && i == 0);) {
    /* [i, j): the tensors of this bucket; at least one, so a tensor over
     * the cap goes alone.  No tensors at all is one empty call, so the
     * members still meet (and a member bringing some fails with both). */
    int64_t len, j = sf__bucket_end(ts, n, i, cap, &len);
    if (dev) {
      device_bucket(ts, i, j, len, room, op, root, loc);
      i = j;
      continue;
    }
    if (j == i + 1 && sf__t_is_contig(ts[i])) {
      /* A bucket of one contiguous tensor is reduced where it lives: an
       * f32[] header over the tensor's own values, on this stack (the
       * transports never keep the array past the call).  That skips the
       * two copies and the bucket of that size, which for BERT's word
       * embeddings' gradient (47 MB, over the cap) were a pack, an unpack
       * and, on each pool thread's first step, a 47 MB bucket to fault in
       * (issue 17's start-up).  The sums are the same, in the same order. */
      sf_array view = {.hdr = {1, SF_OBJ_ARRAY, 0}, .len = len, .elem = &sf_type_f32,
                       .data = sf__t_wdata(ts[i]), .cap = len};
      run_bucket(&view, op, root, loc);
      i = j;
      continue;
    }
    if (!b)
      b = bucket(room, loc);
    float *buf = b->data;
    int64_t off = 0;
    for (int64_t k = i; k < j; off += ts[k++]->numel)
      pack(buf + off, ts[k]);
    b->len = len;
    run_bucket(b, op, root, loc);
    off = 0;
    for (int64_t k = i; k < j; off += ts[k++]->numel)
      unpack(ts[k], buf + off);
    if (j == i)
      break;
    i = j;
  }
}

static void one(sf_tensor *t, int op, int64_t root, const sf_loc *loc) {
  sf_tensor *ts[1] = {sf__t_arg(t, op_name(op), loc)};
  tensors_collective(ts, 1, op, root, loc);
}

static void many(sf_array *a, int op, int64_t root, const sf_loc *loc) {
  tensors_collective(a ? (sf_tensor *const *)a->data : NULL, a ? a->len : 0, op, root, loc);
}

void sf_allreduce_tensor(sf_tensor *t, bool mean, const sf_loc *loc) {
  one(t, mean ? T_MEAN : T_SUM, 0, loc);
}

void sf_allreduce_tensors(sf_array *ts, bool mean, const sf_loc *loc) {
  many(ts, mean ? T_MEAN : T_SUM, 0, loc);
}

/* The sharded collectives over tensors, in the allreduce's buckets:
 * reduce_scatter leaves the group's sum in this member's shard of every
 * bucket (sf__coll_shard of the bucket's length, over the tensors packed
 * in order), bitwise the allreduce_sum's values there, the rest of the
 * values unspecified; all_gather fills every member's tensors from every
 * member's shards.  reduce_scatter then all_gather is allreduce_sum. */
void sf__reduce_scatter_tensors(sf_array *ts, const sf_loc *loc) { many(ts, T_RS, 0, loc); }
void sf__all_gather_tensors(sf_array *ts, const sf_loc *loc) { many(ts, T_AG, 0, loc); }

void sf_broadcast_tensor(sf_tensor *t, int64_t root, const sf_loc *loc) {
  one(t, T_BCAST, root, loc);
}

void sf_broadcast_tensors(sf_array *ts, int64_t root, const sf_loc *loc) {
  many(ts, T_BCAST, root, loc);
}
