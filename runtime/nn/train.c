/*
 * train.c — the C side of std.train (stdlib/train.sflow, docs/train.md):
 * the member's place in its group and the collectives the library's
 * data-parallel step makes.
 *
 * Key design choice: the language lets only actor methods call the
 * collective builtins (compiler/sema.c, in_actor_method), and std.train's
 * helpers are plain functions a method calls.  The group a collective
 * runs over is the one of the actor whose method runs on the calling
 * thread (sched's sf__running_actor), so these externs simply forward to
 * the same entry points the builtins compile to: called from a member's
 * method they reduce over its group, and anywhere else they act as a
 * group of one (rank 0 of 1, a collective that changes nothing).  No
 * compiler change, and nothing here a user program can reach except
 * through std.train (and std.nn's unit marks, nn.unit_begin / unit_end,
 * whose registry is the State's units: "units" below).
 *
 * The pool's threads are shared among the members in this process by the
 * products themselves (gpu layer's gemm_split, from the members the
 * runtime placed here), not here: a member restored by --resume skips
 * init, and train.start with it.
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn.h"
#include "metrics.h"
#include "tfevents.h"

/* The families std.train sets (docs/observability.md). */
static void sf__train_metrics_declare(void) {
  sf__metric_declare("sflow_train_step", SF__M_GAUGE, "Optimizer steps taken (the last step's number).");
  sf__metric_declare("sflow_train_epoch", SF__M_GAUGE, "The epoch of the last step (1-based).");
  sf__metric_declare("sflow_train_loss", SF__M_GAUGE, "Mean loss over the last step's global samples.");
  sf__metric_declare("sflow_train_learning_rate", SF__M_GAUGE, "The learning rate the last step used.");
  sf__metric_declare("sflow_train_grad_norm", SF__M_GAUGE, "Global gradient norm of the last step, before clipping.");
  sf__metric_declare("sflow_train_samples_per_second", SF__M_GAUGE, "Global samples per second of the last step.");
  sf__metric_declare("sflow_train_step_seconds_last", SF__M_GAUGE, "Wall seconds of the last step.");
  sf__metric_declare("sflow_train_comm_seconds_last", SF__M_GAUGE, "Seconds of the last step's gradient allreduce.");
  sf__metric_declare("sflow_train_samples_total", SF__M_COUNTER, "Global samples trained on.");
  sf__metric_declare("sflow_train_step_seconds", SF__M_HISTOGRAM, "Wall seconds per optimizer step.");
  sf__metric_declare("sflow_train_comm_seconds", SF__M_HISTOGRAM, "Gradient allreduce seconds per optimizer step.");
}

int64_t sf_std_train_rank(const sf_loc *loc) {
  (void)loc;
  return sf_group_rank();
}

int64_t sf_std_train_workers(const sf_loc *loc) {
  (void)loc;
  return sf_group_size();
}

/* The progress line's training status (member 0, after each optimizer
 * step): "epoch 2/5, step 40/120, loss 0.4123, 812 samples/s, 12 s left".
 * The time left is the steps left at the rate of the steps this process
 * has taken so far (a resumed run measures its own), so the first step
 * shows none.  The members of a run on other nodes show nothing here:
 * their process draws no line. */
void sf_std_train_progress(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss,
                           double samples_per_s, const sf_loc *loc) {
  (void)loc;
  static _Atomic int64_t first_step = -1;
  static _Atomic double first_at;
  if (!sf__progress_wanted())
    return;
  struct timespec ts; /* not now(): that is journaled */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  int64_t expect = -1;
  if (atomic_compare_exchange_strong(&first_step, &expect, step))
    atomic_store(&first_at, now);
  char left[48] = "";
  int64_t done = step - atomic_load(&first_step);
  if (step >= steps)
    snprintf(left, sizeof left, ", done");
  else if (done > 0) {
    char d[24];
    sf__fmt_duration(d, sizeof d, (now - atomic_load(&first_at)) / (double)done *
                                      (double)(steps - step));
    snprintf(left, sizeof left, ", %s left", d);
  }
  char text[200];
  snprintf(text, sizeof text, "epoch %lld/%lld, step %lld/%lld, loss %.4f, %.0f samples/s%s",
           (long long)epoch, (long long)epochs, (long long)step, (long long)steps, loss,
           samples_per_s, left);
  sf__progress_status(SF__STATUS_TRAIN, text);
}

void sf_std_train_sum_tensors(sf_array *ts, const sf_loc *loc) {
  sf_allreduce_tensors(ts, false, loc);
}

void sf_std_train_sum_f64(sf_array *xs, const sf_loc *loc) { sf_allreduce_sum(xs, loc); }

void sf_std_train_broadcast_tensors(sf_array *ts, int64_t root, const sf_loc *loc) {
  sf_broadcast_tensors(ts, root, loc);
}

/* The step's figures (member 0, after each optimizer step): gauges of
 * the last step for --metrics-port, the dashboard's curves, a counter
 * track on --trace, and the TensorBoard scalars.  A TensorBoard folder
 * that cannot be written is a runtime error at the call: a run asked for
 * its curves and must not lose them silently. */
void sf_std_train_observe(int64_t step, int64_t epoch, double loss, double lr, double grad_norm,
                          int64_t samples, double seconds, double samples_per_s,
                          double comm_seconds, sf_str *tensorboard_dir, const sf_loc *loc) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, sf__train_metrics_declare);
  if (sf__metrics_on) {
    sf__metric_set("sflow_train_step", "", (double)step);
    sf__metric_set("sflow_train_epoch", "", (double)epoch);
    sf__metric_set("sflow_train_loss", "", loss);
    sf__metric_set("sflow_train_learning_rate", "", lr);
    sf__metric_set("sflow_train_grad_norm", "", grad_norm);
    sf__metric_set("sflow_train_samples_per_second", "", samples_per_s);
    sf__metric_set("sflow_train_step_seconds_last", "", seconds);
    sf__metric_set("sflow_train_comm_seconds_last", "", comm_seconds);
    sf__metric_add("sflow_train_samples_total", "", (double)samples);
    sf__metric_observe("sflow_train_step_seconds", "", seconds);
    sf__metric_observe("sflow_train_comm_seconds", "", comm_seconds);
    sf__metric_point("loss", (double)step, loss);
    sf__metric_point("samples_per_s", (double)step, samples_per_s);
  }
  sf__trace_counter("samples/s", samples_per_s);
  int64_t n = sf__str_len(tensorboard_dir);
  if (n <= 0)
    return;
  char dir[4096], err[4600];
  snprintf(dir, sizeof dir, "%.*s", (int)(n < 4095 ? n : 4095), sf__str_data(tensorboard_dir));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  static const char *tags[] = {"loss", "learning_rate", "grad_norm", "samples_per_s",
                               "step_seconds", "comm_seconds"};
  double vals[] = {loss, lr, grad_norm, samples_per_s, seconds, comm_seconds};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    if (!sf__tb_scalar(dir, tags[i], step, vals[i], wall, err, sizeof err))
      sf_runtime_error(loc, "train: %s", err);
}

/* ------------------------------------------------------------ shards
 *
 * Sharded data parallelism (ZeRO-1 and -2, docs/train.md "Shards"): the
 * params are cut in the gradient allreduce's buckets (sf__bucket_end over
 * params(m), SFLOW_BUCKET_MB) and member r of n owns the shard
 * sf__coll_shard(bucket length, r, n) of each bucket, contiguous within
 * it.  The member's shards are "pieces": for each param its shard crosses,
 * a flat view of that range of the param's own storage (no copy of the
 * values), a leaf with a gradient of its own.  AdamW runs over the pieces
 * alone, so its moments are 1/n of the model's, and it updates the
 * params' values in place.  A step: reduce_scatter of the params'
 * gradients, bucket by bucket, into the pieces' gradients (the
 * allreduce's bits, sched's reduce_scatter), the global norm from the
 * members' sums of squares, AdamW on the pieces, then all_gather of every
 * member's pieces into every member's params.  AdamW is elementwise, so a
 * value's update does not depend on the tensor it sits in: the pieces step
 * exactly as the whole params would.  After a checkpoint's restore the
 * pieces may be copies rather than views (a checkpoint keeps a view's
 * values, not its aliasing): the step copies the pieces' values into the
 * params before the all_gather, so it is right either way. */

/* A bucket buffer of room floats or more, kept per thread as
 * collective.c's. */
static sf_array *shard_bucket(int64_t room, const sf_loc *loc) {
  static _Thread_local sf_array *kept;
  if (!kept || kept->cap < room) {
    sf_release(kept);
    kept = sf_array_new(&sf_type_f32, room, loc);
  }
  return kept;
}

static sf_tensor **tensors_of(sf_array *a, int64_t *n, const char *what, const sf_loc *loc) {
  *n = a ? a->len : 0;
  sf_tensor **ts = *n ? a->data : NULL;
  for (int64_t i = 0; i < *n; i++) {
    sf__t_arg(ts[i], what, loc);
    if (!sf__t_is_contig(ts[i]))
      sf_runtime_error(loc, "%s: shards need contiguous params (param %" PRId64 " is a strided "
                       "view)", what, i);
  }
  return ts;
}

/* Runs BODY for each piece of this member's shards of the params [a, b)
 * of ts, in order: param k (of the bucket [i, j) of len floats, this
 * member's shard [lo, hi) of it), its floats [pa, pb), at [ba, bb) of the
 * bucket; p counts the pieces from p0. */
#define FOR_PIECES_IN(ts, a, b, p0, ...)                                                  \
  do {                                                                                    \
    int64_t cap_ = sf__bucket_floats(), rank_ = sf_group_rank(), size_ = sf_group_size(); \
    int64_t p = (p0);                                                                     \
    for (int64_t i = (a); i < (b);) {                                                     \
      int64_t len, j = (a) + sf__bucket_end((ts) + (a), (b) - (a), i - (a), cap_, &len);  \
      int64_t lo, hi, off = 0;                                                            \
      sf__coll_shard(len, rank_, size_, &lo, &hi);                                        \
      for (int64_t k = i; k < j; off += (ts)[k++]->numel) {                               \
        int64_t ba = lo > off ? lo : off;                                                 \
        int64_t bb = hi < off + (ts)[k]->numel ? hi : off + (ts)[k]->numel;               \
        if (bb <= ba)                                                                     \
          continue;                                                                       \
        int64_t pa = ba - off, pb = bb - off;                                             \
        (void)pa, (void)pb;                                                               \
        __VA_ARGS__;                                                                      \
        p++;                                                                              \
      }                                                                                   \
      i = j;                                                                              \
    }                                                                                     \
    (void)p;                                                                              \
  } while (0)

/* ------------------------------------------------------------ the layout
 *
 * Without units the params are one group, cut in buckets in params order.
 * With units (shard "parameters" with train.start's units: FSDP's), each
 * unit is a group of its own and the params in none (the root) another:
 * the root's params first, then unit 0's, 1's, ..., each group in params
 * order and cut in buckets of its own, so that a unit's gather and
 * reduce-scatter touch its params alone.  The pieces follow the groups.
 * `unit` is the State's: one entry per param (its unit, -1 for the root),
 * or empty (no units). */
typedef struct {
  int64_t n;      /* params */
  sf_tensor **ts; /* (n) in the layout's order */
  int64_t *idx;   /* (n) each one's index in params order */
  int64_t ng;     /* groups that have params */
  int64_t *ga;    /* (ng + 1) group g is ts[ga[g], ga[g + 1]) */
  int64_t *gu;    /* (ng) its unit, -1 for the root */
  int64_t *gp;    /* (ng + 1) its first piece; gp[ng] the member's pieces */
} layout;

static void layout_free(layout *L) {
  sf_free(L->ts);
  sf_free(L->idx);
  sf_free(L->ga);
  sf_free(L->gu);
  sf_free(L->gp);
}

static void layout_of(layout *L, sf_array *ps, sf_array *unit, const char *what,
                      const sf_loc *loc) {
  int64_t n, nu = unit ? unit->len : 0, units = 0;
  sf_tensor **ts = tensors_of(ps, &n, what, loc);
  const int64_t *u = nu ? unit->data : NULL;
  if (nu && nu != n)
    sf_runtime_error(loc, "%s: %" PRId64 " unit entries for %" PRId64 " params (the params "
                     "changed since train.start)", what, nu, n);
  for (int64_t k = 0; k < nu; k++) {
    if (u[k] < -1)
      sf_runtime_error(loc, "%s: param %" PRId64 " has unit %" PRId64, what, k, u[k]);
    if (u[k] + 1 > units)
      units = u[k] + 1;
  }
  L->n = n;
  L->ts = sf__alloc_n((size_t)(n ? n : 1), sizeof *L->ts);
  L->idx = sf__alloc_n((size_t)(n ? n : 1), sizeof *L->idx);
  L->ga = sf__alloc_n((size_t)units + 2, sizeof *L->ga);
  L->gu = sf__alloc_n((size_t)units + 1, sizeof *L->gu);
  L->gp = sf__alloc_n((size_t)units + 2, sizeof *L->gp);
  L->ng = 0;
  int64_t m = 0;
  for (int64_t g = -1; g < units; g++) {
    int64_t a = m;
    for (int64_t k = 0; k < n; k++)
      if ((nu ? u[k] : -1) == g) {
        L->idx[m] = k;
        L->ts[m++] = ts[k];
      }
    if (m > a) {
      L->ga[L->ng] = a;
      L->gu[L->ng++] = g;
    }
  }
  L->ga[L->ng] = m;
  int64_t count = 0;
  for (int64_t g = 0; g < L->ng; g++) {
    L->gp[g] = count;
    FOR_PIECES_IN(L->ts, L->ga[g], L->ga[g + 1], 0, { count++; });
  }
  L->gp[L->ng] = count;
}

/* Every piece of the layout: FOR_PIECES_IN over each group, with k an
 * index into L->ts (L->idx[k] its param). */
#define FOR_PIECES(L, ...)                                                      \
  for (int64_t g_ = 0; g_ < (L)->ng; g_++)                                      \
  FOR_PIECES_IN((L)->ts, (L)->ga[g_], (L)->ga[g_ + 1], (L)->gp[g_], __VA_ARGS__)

static sf_tensor *piece_of(sf_tensor **pcs, int64_t p, int64_t want, const sf_loc *loc) {
  sf_tensor *s = sf__t_arg(pcs[p], "train.step", loc);
  if (s->numel != want)
    sf_runtime_error(loc, "train.step: shard piece %" PRId64 " has %" PRId64 " values, not %"
                     PRId64 " (the group's size or the params changed since train.start)", p,
                     s->numel, want);
  return s;
}

static sf_tensor *piece(sf_array *sh, int64_t p, int64_t want, const sf_loc *loc) {
  return piece_of(sh->data, p, want, loc);
}

static void check_pieces(const layout *L, sf_array *sh, const char *what, const sf_loc *loc) {
  int64_t m = sh ? sh->len : 0, want = L->gp[L->ng];
  if (m != want)
    sf_runtime_error(loc, "%s: %" PRId64 " shard pieces where this member of %" PRId64 " has %"
                     PRId64 " (the group's size, the params, their units or SFLOW_BUCKET_MB "
                     "changed since train.start)", what, m, sf_group_size(), want);
}

/* This member's shards of the params, as pieces: views of the params'
 * storage. */
sf_array *sf_std_train_shard_init(sf_array *ps, const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, NULL, "train.start", loc);
  sf_array *out = sf_array_new(&sf__type_tensor, 0, loc);
  FOR_PIECES(&L, {
    int64_t shape[1] = {pb - pa}, stride[1] = {1};
    sf_tensor *v = sf__t_view(L.ts[k], 1, shape, stride, L.ts[k]->offset + pa);
    v->req = true;
    sf_array_push(out, &v, loc); /* the array takes the reference */
  });
  layout_free(&L);
  return out;
}

/* shard "parameters" (ZeRO-3): this member's shards as pieces of their
 * own (copies of the params' ranges), so that the params' whole values can
 * be freed between training calls (shard_release) and gathered again from
 * the pieces before their use (shard_gather, or a unit's nn.unit_begin). */
sf_array *sf_std_train_shard_copy(sf_array *ps, sf_array *unit, const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.start", loc);
  sf_array *out = sf_array_new(&sf__type_tensor, 0, loc);
  FOR_PIECES(&L, {
    int64_t shape[1] = {pb - pa};
    sf_tensor *v = sf__t_empty(1, shape, loc);
    memcpy(sf__t_wdata(v), sf__t_data(L.ts[k]) + pa, (size_t)(pb - pa) * sizeof(float));
    v->req = true;
    sf_array_push(out, &v, loc);
  });
  layout_free(&L);
  return out;
}

static void units_released(sf_array *ps);

/* The params' whole values and gradients freed (shard "parameters"): the
 * storages stay, with no buffer, until shard_gather gives them one.  A
 * param whose storage another tensor views (a tied weight, a view kept by
 * the model) cannot be freed: an error naming it. */
void sf_std_train_shard_release(sf_array *ps, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.step", loc);
  for (int64_t k = 0; k < n; k++) {
    sf__storage *st = ts[k]->st;
    if (st->dev)
      sf_runtime_error(loc, "train.step: shard \"parameters\" runs on the host; param %" PRId64
                       " lives on a device", k);
    if (__atomic_load_n(&st->rc, __ATOMIC_ACQUIRE) != 1 || ts[k]->offset != 0 ||
        st->len != ts[k]->numel)
      sf_runtime_error(loc, "train.step: shard \"parameters\" frees each param's storage, and "
                       "param %" PRId64 "'s is shared with another tensor (a tied weight or a "
                       "view of it)", k);
    sf_release(ts[k]->grad);
    ts[k]->grad = NULL;
    sf__storage_host_free(st);
  }
  units_released(ps);
}

/* A freed param's storage given a buffer again (its values are then
 * written by the gather). */
static void ensure_host(sf_tensor *t) {
  if (!t->st->data && !t->st->dev)
    t->st->data = sf__storage_host_alloc(t->st->len);
}

/* The gradients of the params ts[a, b) reduce-scattered, bucket by bucket,
 * into their pieces' gradients pcs[p0...] (summed over the group: the
 * allreduce_sum's values): copied there, or added to what they hold
 * (a unit's, reduced once per micro-batch). */
static void reduce_group(sf_tensor **ts, int64_t a, int64_t b, sf_tensor **pcs, int64_t p0,
                         bool add, const sf_loc *loc) {
  int64_t cap = sf__bucket_floats(), rank = sf_group_rank(), size = sf_group_size(), p = p0;
  for (int64_t i = a; i < b;) {
    int64_t len, j = a + sf__bucket_end(ts + a, b - a, i - a, cap, &len), lo, hi, off = 0;
    sf__coll_shard(len, rank, size, &lo, &hi);
    sf_tensor *g0 = sf__t_grad(ts[i]); /* a param no gradient reached gets zeros, as grads(ps) */
    sf_release(g0);                    /* the param holds it */
    sf_array view, *buf = &view;
    if (j == i + 1) { /* one tensor: reduced where it lives, as the allreduce */
      view = (sf_array){.hdr = {1, SF_OBJ_ARRAY, 0}, .len = len, .elem = &sf_type_f32,
                        .data = sf__t_wdata(g0), .cap = len};
    } else {
      buf = shard_bucket(len, loc);
      buf->len = len;
      for (int64_t k = i, o = 0; k < j; o += ts[k++]->numel) {
        sf_tensor *g = sf__t_grad(ts[k]);
        sf_release(g);
        memcpy((float *)buf->data + o, sf__t_data(g), (size_t)g->numel * sizeof(float));
      }
    }
    sf__reduce_scatter(buf, false, loc);
    const float *src = buf->data;
    for (int64_t k = i; k < j; off += ts[k++]->numel) {
      int64_t ba = lo > off ? lo : off, bb = hi < off + ts[k]->numel ? hi : off + ts[k]->numel;
      if (bb <= ba)
        continue;
      sf_tensor *s = piece_of(pcs, p++ - p0, bb - ba, loc);
      if (!s->grad)
        s->grad = sf__t_zeros(1, s->shape, loc);
      float *dst = sf__t_wdata(s->grad);
      if (add)
        for (int64_t x = 0; x < bb - ba; x++)
          dst[x] += src[ba + x];
      else
        memcpy(dst, src + ba, (size_t)(bb - ba) * sizeof(float));
    }
    i = j;
  }
}

/* Every member's pieces pcs[p0...] all-gathered into the params ts[a, b)
 * (given buffers first when freed). */
static void gather_group(sf_tensor **ts, int64_t a, int64_t b, sf_tensor **pcs, int64_t p0,
                         const sf_loc *loc) {
  int64_t cap = sf__bucket_floats(), rank = sf_group_rank(), size = sf_group_size(), p = p0;
  for (int64_t k = a; k < b; k++)
    ensure_host(ts[k]);
  for (int64_t i = a; i < b;) {
    int64_t len, j = a + sf__bucket_end(ts + a, b - a, i - a, cap, &len), lo, hi, off = 0;
    sf__coll_shard(len, rank, size, &lo, &hi);
    /* The pieces into the params (nothing to move when they are views). */
    for (int64_t k = i; k < j; off += ts[k++]->numel) {
      int64_t ba = lo > off ? lo : off, bb = hi < off + ts[k]->numel ? hi : off + ts[k]->numel;
      if (bb <= ba)
        continue;
      sf_tensor *s = piece_of(pcs, p++ - p0, bb - ba, loc);
      float *dst = sf__t_wdata(ts[k]) + (ba - off);
      const float *src = sf__t_data(s);
      if (src != dst)
        memcpy(dst, src, (size_t)(bb - ba) * sizeof(float));
    }
    if (j == i + 1) {
      sf_array view = {.hdr = {1, SF_OBJ_ARRAY, 0}, .len = len, .elem = &sf_type_f32,
                       .data = sf__t_wdata(ts[i]), .cap = len};
      sf__all_gather(&view, loc);
    } else {
      sf_array *buf = shard_bucket(len, loc);
      buf->len = len;
      for (int64_t k = i, o = 0; k < j; o += ts[k++]->numel)
        memcpy((float *)buf->data + o, sf__t_data(ts[k]), (size_t)ts[k]->numel * sizeof(float));
      sf__all_gather(buf, loc);
      for (int64_t k = i, o = 0; k < j; o += ts[k++]->numel)
        memcpy(sf__t_wdata(ts[k]), (float *)buf->data + o, (size_t)ts[k]->numel * sizeof(float));
    }
    i = j;
  }
}

/* The params' gradients reduce-scattered into the pieces' gradients
 * (summed over the group: the allreduce_sum's values).  With units, the
 * root's alone: a unit's were reduced in the backward, as it ended. */
void sf_std_train_shard_reduce(sf_array *ps, sf_array *sh, sf_array *unit, const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.step", loc);
  check_pieces(&L, sh, "train.step", loc);
  for (int64_t g = 0; g < L.ng; g++)
    if (L.gu[g] < 0)
      reduce_group(L.ts, L.ga[g], L.ga[g + 1], (sf_tensor **)sh->data + L.gp[g], L.gp[g], false,
                   loc);
  layout_free(&L);
}

/* The global gradient norm over the group's pieces, and the pieces'
 * gradients scaled as nn.clip_grad_norm scales (max_norm / (norm + 1e-6)
 * when under 1).  Each member's sum of squares goes into its own slot of
 * an f64[n] that is summed over the group (x + 0 is exact, so every member
 * gets every sum unchanged), and the sums are added in rank order: the
 * same norm on every member, the same every run. */
double sf_std_train_shard_clip(sf_array *sh, double max_norm, const sf_loc *loc) {
  int64_t m = sh ? sh->len : 0;
  sf_tensor **s = m ? sh->data : NULL;
  double ss = 0;
  for (int64_t k = 0; k < m; k++)
    if (s[k] && s[k]->grad)
      ss += sf__sum_squares(sf__t_data(s[k]->grad), s[k]->grad->numel);
  int64_t size = sf_group_size();
  sf_array *v = sf_array_new(&sf_type_f64, size, loc);
  ((double *)v->data)[sf_group_rank()] = ss;
  sf_allreduce_sum(v, loc);
  double total = 0;
  for (int64_t r = 0; r < size; r++)
    total += ((double *)v->data)[r];
  sf_release(v);
  double norm = sqrt(total), coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (int64_t k = 0; k < m; k++)
      if (s[k] && s[k]->grad)
        sf__scale_floats(sf__t_wdata(s[k]->grad), s[k]->grad->numel, (float)coef);
  return norm;
}

static void units_gathered(sf_array *ps);

/* Every member's updated pieces all-gathered into every member's params:
 * all of them (all), or with units the root's alone (a training call's:
 * a unit is gathered by nn.unit_begin when its forward needs it).  A
 * gather of all counts as a hold of every unit (until shard_release), so
 * a forward under it (an evaluation) gathers and frees nothing. */
void sf_std_train_shard_gather(sf_array *ps, sf_array *sh, sf_array *unit, bool all,
                               const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.step", loc);
  check_pieces(&L, sh, "train.step", loc);
  for (int64_t g = 0; g < L.ng; g++)
    if (all || L.gu[g] < 0)
      gather_group(L.ts, L.ga[g], L.ga[g + 1], (sf_tensor **)sh->data + L.gp[g], L.gp[g], loc);
  layout_free(&L);
  if (all)
    units_gathered(ps);
}

/* ---------------------------------------------------------------- units
 *
 * FSDP's schedule for shard "parameters" (docs/train.md, "Units"): the
 * params of a unit (a block, the embeddings) are whole only while its
 * forward or its backward runs.  A model marks a unit's forward with
 * nn.unit_begin(ps) and y = nn.unit_end(ps, y) (std.nn; nothing at all
 * when no unit holds ps's params); std.train's batches registers the
 * State's units here, keyed by their params.
 *
 *   - unit_begin all-gathers the unit from the members' pieces (a hold;
 *     the first hold gathers);
 *   - unit_end drops the hold (the last frees the values) and, when
 *     recording, puts a node over y: the first of the unit's nodes that
 *     backward reaches.  Its rule gathers the unit again, passes y's
 *     gradient on, and asks autograd (sf__backward_after) to run, once
 *     every node recorded since unit_begin has run, the post-backward
 *     step: the unit's whole gradients reduce-scattered and added into
 *     its pieces' gradients, then freed with its values.
 *
 * The nodes of the unit's forward keep the params' headers, which read
 * the values through their storage: the gather gives the storage a
 * buffer again and every header and view sees it.
 *
 * Every member must meet the same collectives in the same order.  The
 * model's forward and backward do that when every member runs them; a
 * member with no rows in a micro-batch (train.step with 0 rows) runs
 * neither, so each set of units logs its events (hold and drop in the
 * forward, in the backward) and train.step replays the last full
 * micro-step's events from where the member stopped: the same gathers and
 * reduce-scatters, with zeros for its gradients. */

enum { EV_FG, EV_FR, EV_BG, EV_BR }; /* forward hold and drop, backward hold and reduce */

typedef struct {
  int64_t a, b;   /* its params: set->ts[a, b) */
  int64_t p0;     /* its pieces: set->pcs + p0 */
  int32_t held;   /* holds: the values are whole while above 0 */
  int32_t depth;  /* nested unit_begin's */
  uint64_t s0[8]; /* their tape clocks */
  uint64_t mark;  /* units_mark's last stamp */
  bool dead;      /* a param of it was freed */
} unit_rec;

typedef struct unit_set {
  int64_t refs;   /* registry entries that point here */
  int64_t n, np, nu;
  sf_tensor **ts; /* (n) the params in the layout's order (not retained: sf__units_forget) */
  sf_tensor **pcs; /* (np) the member's pieces, retained */
  unit_rec *u;    /* (nu) */
  int32_t *ev, *script;
  int64_t nev, evcap, nscript;
  bool scripted;
} unit_set;

typedef struct {
  sf_tensor *key;
  unit_set *set;
  int64_t r;
} unit_slot;

/* Recursive: a set freed under it releases its pieces, whose destructor
 * asks the registry again (sf__units_forget). */
static pthread_mutex_t units_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static unit_slot *slots;
static int64_t nslots, used; /* used: live entries and tombstones */
int64_t sf__units_live;       /* atomic: live entries, for the fast paths */
#define TOMB ((sf_tensor *)(uintptr_t)1) /* a removed entry */

static uint64_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static unit_slot *slot_find(const sf_tensor *t) {
  if (!nslots)
    return NULL;
  for (uint64_t i = hash_ptr(t) & (uint64_t)(nslots - 1);; i = (i + 1) & (uint64_t)(nslots - 1)) {
    if (slots[i].key == t)
      return &slots[i];
    if (!slots[i].key)
      return NULL;
  }
}

/* A set dies with its last entry: its params are not retained (the
 * registry must not keep a dead model alive), its pieces are. */

static void set_unref(unit_set *s) {
  if (--s->refs > 0)
    return;
  for (int64_t k = 0; k < s->np; k++)
    sf_release(s->pcs[k]);
  sf_free(s->ts);
  sf_free(s->pcs);
  sf_free(s->u);
  free(s->ev);
  free(s->script);
  sf_free(s);
}

static void slot_put(sf_tensor *t, unit_set *set, int64_t r) {
  if (2 * (used + 1) > nslots) { /* grow: rehash every live entry */
    int64_t old = nslots;
    unit_slot *was = slots;
    nslots = nslots ? 2 * nslots : 256;
    slots = sf__alloc_n((size_t)nslots, sizeof *slots);
    memset(slots, 0, (size_t)nslots * sizeof *slots);
    used = 0;
    for (int64_t i = 0; i < old; i++)
      if (was[i].key && was[i].key != TOMB) {
        uint64_t h = hash_ptr(was[i].key) & (uint64_t)(nslots - 1);
        while (slots[h].key)
          h = (h + 1) & (uint64_t)(nslots - 1);
        slots[h] = was[i];
        used++;
      }
    sf_free(was);
  }
  unit_slot *e = slot_find(t);
  if (e) {
    set_unref(e->set);
  } else {
    uint64_t h = hash_ptr(t) & (uint64_t)(nslots - 1);
    while (slots[h].key)
      h = (h + 1) & (uint64_t)(nslots - 1);
    e = &slots[h];
    e->key = t;
    used++;
    __atomic_add_fetch(&sf__units_live, 1, __ATOMIC_RELAXED);
  }
  e->set = set;
  e->r = r;
  set->refs++;
}

void sf__units_forget(const sf_tensor *t) {
  pthread_mutex_lock(&units_mu);
  unit_slot *e = slot_find(t);
  if (e) {
    e->set->u[e->r].dead = true; /* its other params no longer gather it */
    set_unref(e->set);
    e->key = TOMB;
    e->set = NULL;
    __atomic_sub_fetch(&sf__units_live, 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&units_mu);
}

/* The unit that holds t, or NULL (the set in *set). */
static unit_rec *unit_of(const sf_tensor *t, unit_set **set) {
  pthread_mutex_lock(&units_mu);
  unit_slot *e = slot_find(t);
  unit_rec *u = e && !e->set->u[e->r].dead ? &e->set->u[e->r] : NULL;
  *set = e ? e->set : NULL;
  pthread_mutex_unlock(&units_mu);
  return u;
}

static void log_ev(unit_set *s, unit_rec *u, int32_t kind) {
  if (s->nev == s->evcap) {
    s->evcap = s->evcap ? 2 * s->evcap : 64;
    int32_t *ev = realloc(s->ev, (size_t)s->evcap * sizeof *ev);
    if (!ev)
      sf_runtime_error(NULL, "train: out of memory for the units' events");
    s->ev = ev;
  }
  s->ev[s->nev++] = (int32_t)(u - s->u) << 2 | kind;
}

static void unit_hold(unit_set *s, unit_rec *u, int32_t kind, const sf_loc *loc) {
  log_ev(s, u, kind);
  if (u->held++ == 0)
    gather_group(s->ts, u->a, u->b, s->pcs + u->p0, 0, loc);
}

static void unit_drop(unit_set *s, unit_rec *u, const sf_loc *loc) {
  if (u->held <= 0)
    sf_runtime_error(loc, "nn.unit_end: the unit of these params was not begun (nn.unit_begin "
                     "before the unit's forward, nn.unit_end after it)");
  if (--u->held == 0)
    for (int64_t k = u->a; k < u->b; k++)
      sf__storage_host_free(s->ts[k]->st);
}

/* The post-backward step: the unit's whole gradients reduce-scattered
 * into its pieces' (added: a window's micro-batches, a tied weight's two
 * uses), then freed, and the backward's hold dropped. */
static void unit_reduce(unit_set *s, unit_rec *u, const sf_loc *loc) {
  log_ev(s, u, EV_BR);
  reduce_group(s->ts, u->a, u->b, s->pcs + u->p0, 0, true, loc);
  for (int64_t k = u->a; k < u->b; k++) {
    sf_release(s->ts[k]->grad);
    s->ts[k]->grad = NULL;
  }
  unit_drop(s, u, loc);
}

/* The distinct units that hold ps's params, in order (at most cap). */
static int64_t units_in(sf_array *ps, unit_set **sets, unit_rec **us, int64_t cap,
                        const char *what, const sf_loc *loc) {
  int64_t n = ps ? ps->len : 0, m = 0;
  if (!__atomic_load_n(&sf__units_live, __ATOMIC_RELAXED))
    return 0;
  for (int64_t i = 0; i < n; i++) {
    sf_tensor *t = ((sf_tensor **)ps->data)[i];
    if (!t)
      sf_runtime_error(loc, "%s: param %" PRId64 " is unset", what, i);
    unit_set *s;
    unit_rec *u = unit_of(t, &s);
    if (!u)
      continue;
    bool seen = false;
    for (int64_t j = 0; j < m && !seen; j++)
      seen = us[j] == u;
    if (seen)
      continue;
    if (m == cap)
      sf_runtime_error(loc, "%s: the params are in more than %" PRId64 " units", what, cap);
    sets[m] = s;
    us[m++] = u;
  }
  return m;
}

enum { UNITS_MAX = 64 };

void sf_std_nn_unit_begin(sf_array *ps, const sf_loc *loc) {
  unit_set *sets[UNITS_MAX];
  unit_rec *us[UNITS_MAX];
  int64_t m = units_in(ps, sets, us, UNITS_MAX, "nn.unit_begin", loc);
  uint64_t now = sf__seq_now();
  for (int64_t j = 0; j < m; j++) {
    if (us[j]->depth == (int32_t)(sizeof us[j]->s0 / sizeof us[j]->s0[0]))
      sf_runtime_error(loc, "nn.unit_begin: a unit begun %d times without nn.unit_end",
                       us[j]->depth);
    us[j]->s0[us[j]->depth++] = now;
    unit_hold(sets[j], us[j], EV_FG, loc);
  }
}

/* The node unit_end puts over y: more[0] y, more[1..] the unit_end's
 * params, i0 the tape's clock at the earliest unit_begin. */
typedef struct {
  unit_set *set;
  unit_rec *u;
} unit_due;

static void unit_due_run(void *arg, const sf_loc *loc) {
  unit_due d = *(unit_due *)arg;
  free(arg);
  unit_reduce(d.set, d.u, loc);
}

static void unit_backward(sf__node *n, sf_tensor *g) {
  unit_set *sets[UNITS_MAX];
  unit_rec *us[UNITS_MAX];
  sf_array ps = {.hdr = {1, SF_OBJ_ARRAY, 0}, .len = n->nmore - 1, .elem = &sf__type_tensor,
                 .data = n->more + 1, .cap = n->nmore - 1};
  int64_t m = units_in(&ps, sets, us, UNITS_MAX, "backward of nn.unit_end", n->at);
  for (int64_t j = 0; j < m; j++) {
    unit_hold(sets[j], us[j], EV_BG, n->at);
    unit_due *d = malloc(sizeof *d);
    if (!d)
      sf_runtime_error(n->at, "backward: out of memory");
    *d = (unit_due){sets[j], us[j]};
    if (!sf__backward_after((uint64_t)n->i0, unit_due_run, d))
      unit_due_run(d, n->at);
  }
  sf_retain(g);
  sf__grad_add(n->more[0], g);
}

sf_tensor *sf_std_nn_unit_end(sf_array *ps, sf_tensor *y, const sf_loc *loc) {
  sf__t_arg(y, "nn.unit_end", loc);
  unit_set *sets[UNITS_MAX];
  unit_rec *us[UNITS_MAX];
  int64_t m = units_in(ps, sets, us, UNITS_MAX, "nn.unit_end", loc);
  uint64_t s0 = UINT64_MAX;
  for (int64_t j = 0; j < m; j++) {
    if (us[j]->depth == 0)
      sf_runtime_error(loc, "nn.unit_end: the unit of these params was not begun (nn.unit_begin "
                       "before the unit's forward, nn.unit_end after it)");
    uint64_t b = us[j]->s0[--us[j]->depth];
    if (b < s0)
      s0 = b;
    for (int64_t k = us[j]->a; k < us[j]->b; k++)
      if (sets[j]->ts[k]->st == y->st)
        sf_runtime_error(loc, "nn.unit_end: the unit's output is a view of its param %" PRId64
                         " (freed at the unit's end); return a computed tensor", k - us[j]->a);
    log_ev(sets[j], us[j], EV_FR);
    unit_drop(sets[j], us[j], loc);
  }
  if (!m || sf__no_grad || !y->req) {
    sf_retain(y);
    return y;
  }
  int64_t np = ps->len;
  sf_tensor **ins = sf__alloc_n((size_t)np + 1, sizeof *ins);
  ins[0] = y;
  memcpy(ins + 1, ps->data, (size_t)np * sizeof *ins);
  sf_tensor *r = sf__t_view(y, y->ndim, y->shape, y->strides, y->offset);
  sf__node *n = sf__record_n("unit", r, unit_backward, ins, (int32_t)np + 1);
  sf_free(ins);
  if (n) {
    n->i0 = (int64_t)s0;
    n->at = loc;
  }
  return r;
}

/* The State's units registered for nn.unit_begin (std.train's batches,
 * every training call: a member restored from a checkpoint has new
 * tensors).  The same params and pieces keep their set, and its log
 * starts again. */
void sf_std_train_shard_units(sf_array *ps, sf_array *sh, sf_array *unit, const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.batches", loc);
  check_pieces(&L, sh, "train.batches", loc);
  int64_t first = L.ng && L.gu[0] < 0 ? 1 : 0;
  if (first == L.ng) {
    layout_free(&L);
    return;
  }
  pthread_mutex_lock(&units_mu);
  unit_slot *e = slot_find(L.ts[L.ga[first]]);
  bool same = e && e->set->n == L.n && e->set->np == sh->len &&
              !memcmp(e->set->ts, L.ts, (size_t)L.n * sizeof *L.ts) &&
              !memcmp(e->set->pcs, sh->data, (size_t)sh->len * sizeof *e->set->pcs);
  if (same) {
    e->set->nev = 0;
    pthread_mutex_unlock(&units_mu);
    layout_free(&L);
    return;
  }
  unit_set *s = sf_alloc(sizeof *s);
  memset(s, 0, sizeof *s);
  s->n = L.n;
  s->np = sh->len;
  s->nu = L.ng - first;
  s->ts = sf__alloc_n((size_t)L.n, sizeof *s->ts);
  s->pcs = sf__alloc_n((size_t)(s->np ? s->np : 1), sizeof *s->pcs);
  s->u = sf__alloc_n((size_t)s->nu, sizeof *s->u);
  for (int64_t k = 0; k < L.n; k++) {
    s->ts[k] = L.ts[k];
  }
  for (int64_t k = 0; k < s->np; k++) {
    s->pcs[k] = ((sf_tensor **)sh->data)[k];
    sf_retain(s->pcs[k]);
  }
  s->refs = 1; /* held while registering */
  for (int64_t g = first; g < L.ng; g++) {
    unit_rec *u = &s->u[g - first];
    memset(u, 0, sizeof *u);
    u->a = L.ga[g];
    u->b = L.ga[g + 1];
    u->p0 = L.gp[g];
    for (int64_t k = u->a; k < u->b; k++)
      slot_put(L.ts[k], s, g - first);
  }
  set_unref(s);
  pthread_mutex_unlock(&units_mu);
  layout_free(&L);
}

/* The units of ps's params: held by a gather of all of them
 * (train.gather), or all freed (shard_release). */
static uint64_t mark_clock; /* atomic */

static void units_mark(sf_array *ps, bool gathered) {
  if (!__atomic_load_n(&sf__units_live, __ATOMIC_RELAXED))
    return;
  uint64_t stamp = __atomic_add_fetch(&mark_clock, 1, __ATOMIC_RELAXED);
  int64_t n = ps ? ps->len : 0;
  for (int64_t k = 0; k < n; k++) {
    unit_set *s;
    unit_rec *u = unit_of(((sf_tensor **)ps->data)[k], &s);
    if (!u || u->mark == stamp)
      continue;
    u->mark = stamp;
    if (gathered)
      u->held++;
    else
      u->held = 0;
  }
}

static void units_gathered(sf_array *ps) { units_mark(ps, true); }
static void units_released(sf_array *ps) { units_mark(ps, false); }

/* train.step's three points of a micro-step: at 0 (its start: the
 * forward's end) a member that ran no forward replays the forward's
 * events (holds and drops before the first backward one), so it meets
 * the others' gathers before the step's own collectives; at 1 (it ran
 * the backward) the log becomes the script of a micro-step; at 2 (it ran
 * none: no rows, or no items) it replays the rest of the script.  The
 * replay is the same holds, drops and reduce-scatters, with zeros for the
 * member's gradients. */
void sf_std_train_shard_units_step(sf_array *ps, sf_array *unit, int64_t at, const sf_loc *loc) {
  int64_t n = ps ? ps->len : 0, nu = unit ? unit->len : 0;
  unit_set *s = NULL;
  for (int64_t k = 0; k < n && k < nu && !s; k++)
    if (((int64_t *)unit->data)[k] >= 0)
      unit_of(((sf_tensor **)ps->data)[k], &s);
  if (!s)
    return;
  if (at == 1) {
    int32_t *sc = realloc(s->script, (size_t)(s->nev ? s->nev : 1) * sizeof *sc);
    if (!sc)
      sf_runtime_error(loc, "train.step: out of memory for the units' events");
    memcpy(sc, s->ev, (size_t)s->nev * sizeof *sc);
    s->script = sc;
    s->nscript = s->nev;
    s->scripted = true;
    s->nev = 0;
    return;
  }
  if (!s->scripted) {
    if (at == 0 && s->nev > 0)
      return; /* the first micro-step, its forward run: nothing to replay */
    /* A member that has run no micro-step yet (a global batch smaller
     * than the group leaves it none from the start) takes the units'
     * order: each unit's forward in start_units' order, their backwards
     * in reverse, the order of std.bert's and std.lm's (a unit inside
     * nn.checkpoint, or one used twice, runs other collectives: such a
     * model must give every member rows in its first micro-batch). */
    int32_t *sc = realloc(s->script, (size_t)(4 * s->nu) * sizeof *sc);
    if (!sc)
      sf_runtime_error(loc, "train.step: out of memory for the units' events");
    for (int64_t u = 0; u < s->nu; u++) {
      sc[2 * u] = (int32_t)u << 2 | EV_FG;
      sc[2 * u + 1] = (int32_t)u << 2 | EV_FR;
      sc[2 * s->nu + 2 * u] = (int32_t)(s->nu - 1 - u) << 2 | EV_BG;
      sc[2 * s->nu + 2 * u + 1] = (int32_t)(s->nu - 1 - u) << 2 | EV_BR;
    }
    s->script = sc;
    s->nscript = 4 * s->nu;
    s->scripted = true;
  }
  if (s->nev > s->nscript || memcmp(s->ev, s->script, (size_t)s->nev * sizeof *s->ev))
    sf_runtime_error(loc, "train.step: member %" PRId64 "'s units ran another sequence than in "
                     "the micro-batches before (with units every micro-batch must begin and "
                     "end the same units in the same order)", sf_group_rank());
  for (int64_t i = s->nev; i < s->nscript; i++) {
    unit_rec *u = &s->u[s->script[i] >> 2];
    int32_t kind = s->script[i] & 3;
    if (at == 0 && (kind == EV_BG || kind == EV_BR))
      return; /* the forward's events replayed */
    switch (kind) {
    case EV_FG:
    case EV_BG:
      unit_hold(s, u, kind, loc);
      break;
    case EV_FR:
      log_ev(s, u, EV_FR);
      unit_drop(s, u, loc);
      break;
    default:
      unit_reduce(s, u, loc);
      break;
    }
  }
  if (at == 2)
    s->nev = 0;
}

/* The unit of each param (-1: in none) from train.start's units: lists
 * of the params' own tensors, each in one unit at most. */
sf_array *sf_std_train_unit_ids(sf_array *ps, sf_array *units, const sf_loc *loc) {
  int64_t n = ps ? ps->len : 0, nu = units ? units->len : 0;
  sf_array *out = sf_array_new(&sf_type_i64, nu ? n : 0, loc);
  if (!nu)
    return out;
  int64_t *id = out->data;
  for (int64_t k = 0; k < n; k++)
    id[k] = -1;
  for (int64_t u = 0; u < nu; u++) {
    sf_array *l = ((sf_array **)units->data)[u];
    int64_t m = l ? l->len : 0;
    for (int64_t j = 0; j < m; j++) {
      sf_tensor *t = ((sf_tensor **)l->data)[j];
      int64_t k = 0;
      while (k < n && ((sf_tensor **)ps->data)[k] != t)
        k++;
      if (k == n) {
        sf_release(out);
        sf_runtime_error(loc, "train.start: tensor %" PRId64 " of unit %" PRId64 " is not one "
                         "of the params (a unit lists params of the model, as params(block) "
                         "gives them)", j, u);
      }
      if (id[k] >= 0 && id[k] != u) {
        int64_t was = id[k];
        sf_release(out);
        sf_runtime_error(loc, "train.start: param %" PRId64 " is in unit %" PRId64 " and in "
                         "unit %" PRId64 " (a param belongs to one unit at most)", k, was, u);
      }
      id[k] = u;
    }
  }
  return out;
}

/* The sharded collectives over tensors (for tests and users of the
 * group's buckets): see collective.c. */
void sf_std_train_reduce_scatter_tensors(sf_array *ts, const sf_loc *loc) {
  sf__reduce_scatter_tensors(ts, loc);
}
void sf_std_train_all_gather_tensors(sf_array *ts, const sf_loc *loc) {
  sf__all_gather_tensors(ts, loc);
}

/* ------------------------------------------------------- memory plan */

/* Bytes per member for the params, their gradients, AdamW's state and the
 * communication buffers, and the tensors held at three points, as [params,
 * grads, optimizer, comm, rest, backward, update], for shard "none", "optimizer",
 * "gradients" or "parameters" over a group of workers.  The shards'
 * gradients count with the gradients (1/n; their values are views of the
 * params, but copies under "parameters", whose params figure is the
 * pieces plus the whole params gathered during a training call; between
 * calls only the pieces).  comm is the largest packing bucket
 * (collective.c's and the shards', a bucket of one contiguous tensor
 * needing none; an array, not a tensor, so train.memory does not count
 * it).  rest, backward and update are the tensors held between calls, at
 * the backward's end (add the activations) and at the update: the
 * step's peak is max(backward + activations, update). */
sf_array *sf_std_train_plan_bytes(sf_array *ps, sf_str *shard, int64_t workers, sf_array *unit,
                                  const sf_loc *loc) {
  if (workers < 1)
    sf_runtime_error(loc, "train.plan: workers must be at least 1, not %" PRId64, workers);
  int64_t sl = sf__str_len(shard);
  const char *sd = sf__str_data(shard);
  int mode = sl == 4 && !memcmp(sd, "none", 4)        ? 0
             : sl == 9 && !memcmp(sd, "optimizer", 9) ? 1
             : sl == 9 && !memcmp(sd, "gradients", 9) ? 2
             : sl == 10 && !memcmp(sd, "parameters", 10) ? 3
                                                       : -1;
  if (mode < 0)
    sf_runtime_error(loc, "train.plan: shard \"%.*s\" is not none, optimizer, gradients or "
                     "parameters",
                     (int)(sl < 64 ? sl : 64), sd);
  layout L;
  layout_of(&L, ps, mode == 3 ? unit : NULL, "train.plan", loc);
  int64_t cap = sf__bucket_floats(), total = 0, comm = 0, mine = 0, root = 0, umax = 0;
  for (int64_t g = 0; g < L.ng; g++) {
    int64_t a = L.ga[g], b = L.ga[g + 1], floats = 0;
    for (int64_t i = a; i < b;) {
      int64_t len, j = a + sf__bucket_end(L.ts + a, b - a, i - a, cap, &len), lo, hi;
      floats += len;
      if (j > i + 1 && len > comm)
        comm = len;
      /* the largest shard a member gets: member n-1's is never smaller */
      sf__coll_shard(len, workers - 1, workers, &lo, &hi);
      mine += hi - lo;
      i = j;
    }
    total += floats;
    if (L.gu[g] < 0)
      root = floats;
    else if (floats > umax)
      umax = floats;
  }
  bool units = mode == 3 && L.ng && L.gu[L.ng - 1] >= 0;
  layout_free(&L);
  int64_t f = (int64_t)sizeof(float);
  int64_t params = total * f, grads = total * f, opt = 2 * total * f;
  if (mode >= 1) {
    opt = 2 * mine * f;     /* AdamW's moments of the shards (views of the params: no copy) */
    grads = mode == 1 ? (total + mine) * f /* the params' gradients and the shards' */
                      : mine * f;          /* between steps only the shards' */
  }
  if (mode == 3) /* the pieces are copies; the whole params are gathered in a training call */
    params = (total + mine) * f;
  /* The tensors held: between calls the values (the pieces alone under
   * "parameters") and AdamW's state; at the backward's end the whole
   * gradients too (every mode builds them: no backward hooks), and the
   * whole params under "parameters"; at the update the pieces' gradients
   * beside them, after the tape (the activations) is gone. */
  int64_t rest = (mode == 3 ? mine : total) * f + opt;
  int64_t back = rest + (mode == 3 ? total * f : 0) + total * f;
  int64_t upd = back + (mode >= 1 ? mine * f : 0);
  if (units) {
    /* With units only the root is whole for a call and a unit while it
     * runs: at the worst of the backward the root's values and gradients,
     * the pieces' gradients (each unit's added as its backward ends) and
     * the largest unit's values and whole gradients; at the update the
     * root's and the pieces' */
    params = (mine + root + umax) * f;
    back = rest + 2 * root * f + mine * f + 2 * umax * f;
    upd = rest + 2 * root * f + mine * f;
  }
  sf_array *out = sf_array_new(&sf_type_i64, 7, loc);
  int64_t *o = out->data;
  o[0] = params;
  o[1] = grads;
  o[2] = opt;
  o[3] = comm * f;
  o[4] = rest;
  o[5] = back;
  o[6] = upd;
  return out;
}

/* The runtime's tensor storage counters: [bytes in use now, the most in
 * use since the last call with reset (or the process's start)]. */
sf_array *sf_std_train_memory(bool reset, const sf_loc *loc) {
  sf_array *out = sf_array_new(&sf_type_i64, 2, loc);
  ((int64_t *)out->data)[0] = __atomic_load_n(&sf__tensor_bytes, __ATOMIC_RELAXED);
  ((int64_t *)out->data)[1] = __atomic_load_n(&sf__tensor_bytes_peak, __ATOMIC_RELAXED);
  if (reset)
    sf__tensor_bytes_reset();
  return out;
}

/* The params' values copied into this member's pieces (after sync's
 * broadcast; nothing to move when the pieces are views). */
void sf_std_train_shard_fill(sf_array *ps, sf_array *sh, sf_array *unit, const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.sync", loc);
  check_pieces(&L, sh, "train.sync", loc);
  FOR_PIECES(&L, {
    sf_tensor *s = piece(sh, p, pb - pa, loc);
    const float *src = sf__t_data(L.ts[k]) + pa;
    float *dst = sf__t_wdata(s);
    if (src != dst)
      memcpy(dst, src, (size_t)(pb - pa) * sizeof(float));
  });
  layout_free(&L);
}

/* ------------------------------------------------- re-sharding on load
 *
 * train.save_state writes the run's logical state: every param's whole
 * values and whole AdamW moments, whatever the group's size and shard
 * value, so train.load_state can cut it again for another group (another
 * size, another shard value).  These three move floats between the whole
 * tensors and this member's pieces, in FOR_PIECES' layout of the params
 * (their sizes only: a freed param of shard "parameters" has one). */

static void same_sizes(sf_tensor *const *ts, int64_t n, sf_array *whole, const char *what,
                       const sf_loc *loc) {
  int64_t m = whole ? whole->len : 0;
  if (m != n)
    sf_runtime_error(loc, "%s: the saved state has %" PRId64 " tensors where the model has %"
                     PRId64 " params", what, m, n);
  for (int64_t k = 0; k < n; k++) {
    sf_tensor *w = sf__t_arg(((sf_tensor **)whole->data)[k], what, loc);
    if (w->numel != ts[k]->numel)
      sf_runtime_error(loc, "%s: saved tensor %" PRId64 " has %" PRId64 " values where param %"
                       PRId64 " has %" PRId64 " (another model)", what, k, w->numel, k,
                       ts[k]->numel);
  }
}

/* Whole tensors shaped as the params, zeros but for this member's pieces'
 * values (of an array parallel to its pieces: AdamW's moments of them):
 * summed over the group, every member's pieces make the whole (x + 0 is
 * exact). */
sf_array *sf_std_train_shard_whole(sf_array *ps, sf_array *pieces, sf_array *unit,
                                   const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.save_state", loc);
  check_pieces(&L, pieces, "train.save_state", loc);
  sf_array *out = sf_array_new(&sf__type_tensor, 0, loc);
  for (int64_t k = 0; k < L.n; k++) {
    sf_tensor *p = ((sf_tensor **)ps->data)[k];
    sf_tensor *z = sf__t_zeros(p->ndim, p->shape, loc);
    sf_array_push(out, &z, loc);
  }
  sf_tensor **w = out->data;
  FOR_PIECES(&L, {
    sf_tensor *s = piece(pieces, p, pb - pa, loc);
    memcpy(sf__t_wdata(w[L.idx[k]]) + pa, sf__t_data(s), (size_t)(pb - pa) * sizeof(float));
  });
  layout_free(&L);
  return out;
}

/* This member's pieces (or an array parallel to them) filled from whole
 * tensors in the params' order: the saved state cut for this group. */
void sf_std_train_shard_slice(sf_array *ps, sf_array *whole, sf_array *pieces, sf_array *unit,
                              const sf_loc *loc) {
  layout L;
  layout_of(&L, ps, unit, "train.load_state", loc);
  same_sizes((sf_tensor **)ps->data, L.n, whole, "train.load_state", loc);
  check_pieces(&L, pieces, "train.load_state", loc);
  sf_tensor **w = whole->data;
  FOR_PIECES(&L, {
    sf_tensor *s = piece(pieces, p, pb - pa, loc);
    memcpy(sf__t_wdata(s), sf__t_data(w[L.idx[k]]) + pa, (size_t)(pb - pa) * sizeof(float));
  });
  layout_free(&L);
}

/* Each tensor of dst given the values of src's (the same sizes). */
void sf_std_train_copy_values(sf_array *dst, sf_array *src, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(dst, &n, "train.load_state", loc);
  same_sizes(ts, n, src, "train.load_state", loc);
  for (int64_t k = 0; k < n; k++) {
    sf_tensor *s = ((sf_tensor **)src->data)[k];
    memcpy(sf__t_wdata(ts[k]), sf__t_data(s), (size_t)ts[k]->numel * sizeof(float));
  }
}

/* from renamed to `to` and the folder synced: a state file is whole or
 * the previous one (a kill while writing leaves only the .tmp). */
void sf_std_train_rename_file(sf_str *from, sf_str *to, const sf_loc *loc) {
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%.*s", (int)sf__str_len(from), sf__str_data(from));
  snprintf(b, sizeof b, "%.*s", (int)sf__str_len(to), sf__str_data(to));
  int fd = open(a, O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  if (rename(a, b) != 0)
    sf_runtime_error(loc, "train.save_state: cannot rename %s to %s: %s", a, b, strerror(errno));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", b);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}
