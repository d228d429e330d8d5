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
 * through std.train.
 *
 * The pool's threads are shared among the members in this process by the
 * products themselves (gpu layer's gemm_split, from the members the
 * runtime placed here), not here: a member restored by --resume skips
 * init, and train.start with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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

/* Runs BODY for each piece of this member's shards, in order: param k
 * (of the bucket [i, j) of len floats, this member's shard [lo, hi) of
 * it), its floats [pa, pb), at [ba, bb) of the bucket; p counts the
 * pieces. */
#define FOR_PIECES(ts, n, ...)                                                             \
  do {                                                                                    \
    int64_t cap_ = sf__bucket_floats(), rank_ = sf_group_rank(), size_ = sf_group_size(); \
    int64_t p = 0;                                                                        \
    for (int64_t i = 0; i < (n);) {                                                       \
      int64_t len, j = sf__bucket_end((ts), (n), i, cap_, &len), lo, hi, off = 0;         \
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

static int64_t piece_count(sf_tensor *const *ts, int64_t n) {
  int64_t count = 0;
  FOR_PIECES(ts, n, { count++; });
  return count;
}

static sf_tensor *piece(sf_array *sh, int64_t p, int64_t want, const sf_loc *loc) {
  sf_tensor *s = sf__t_arg(((sf_tensor **)sh->data)[p], "train.step", loc);
  if (s->numel != want)
    sf_runtime_error(loc, "train.step: shard piece %" PRId64 " has %" PRId64 " values, not %"
                     PRId64 " (the group's size or the params changed since train.start)", p,
                     s->numel, want);
  return s;
}

static void check_pieces(sf_tensor *const *ts, int64_t n, sf_array *sh, const char *what,
                         const sf_loc *loc) {
  int64_t m = sh ? sh->len : 0, want = piece_count(ts, n);
  if (m != want)
    sf_runtime_error(loc, "%s: %" PRId64 " shard pieces where this member of %" PRId64 " has %"
                     PRId64 " (the group's size, the params or SFLOW_BUCKET_MB changed since "
                     "train.start)", what, m, sf_group_size(), want);
}

/* This member's shards of the params, as pieces: views of the params'
 * storage. */
sf_array *sf_std_train_shard_init(sf_array *ps, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.start", loc);
  sf_array *out = sf_array_new(&sf__type_tensor, 0, loc);
  FOR_PIECES(ts, n, {
    int64_t shape[1] = {pb - pa}, stride[1] = {1};
    sf_tensor *v = sf__t_view(ts[k], 1, shape, stride, ts[k]->offset + pa);
    v->req = true;
    sf_array_push(out, &v, loc); /* the array takes the reference */
  });
  return out;
}

/* shard "parameters" (ZeRO-3): this member's shards as pieces of their
 * own (copies of the params' ranges), so that the params' whole values can
 * be freed between training calls (shard_release) and gathered again from
 * the pieces before their use (shard_gather). */
sf_array *sf_std_train_shard_copy(sf_array *ps, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.start", loc);
  sf_array *out = sf_array_new(&sf__type_tensor, 0, loc);
  FOR_PIECES(ts, n, {
    int64_t shape[1] = {pb - pa};
    sf_tensor *v = sf__t_empty(1, shape, loc);
    memcpy(sf__t_wdata(v), sf__t_data(ts[k]) + pa, (size_t)(pb - pa) * sizeof(float));
    v->req = true;
    sf_array_push(out, &v, loc);
  });
  return out;
}

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
}

/* A freed param's storage given a buffer again (its values are then
 * written by shard_gather). */
static void ensure_host(sf_tensor *t) {
  if (!t->st->data && !t->st->dev)
    t->st->data = sf__storage_host_alloc(t->st->len);
}

/* The params' gradients reduce-scattered into the pieces' gradients
 * (summed over the group: the allreduce_sum's values). */
void sf_std_train_shard_reduce(sf_array *ps, sf_array *sh, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.step", loc);
  check_pieces(ts, n, sh, "train.step", loc);
  int64_t cap = sf__bucket_floats();
  for (int64_t i = 0, p = 0, rank = sf_group_rank(), size = sf_group_size(); i < n;) {
    int64_t len, j = sf__bucket_end(ts, n, i, cap, &len), lo, hi, off = 0;
    sf__coll_shard(len, rank, size, &lo, &hi);
    float *buf;
    sf_tensor *g0 = sf__t_grad(ts[i]); /* a param no gradient reached gets zeros, as grads(ps) */
    sf_release(g0);                    /* the param holds it */
    sf_array view, *b = &view;
    if (j == i + 1) { /* one tensor: reduced where it lives, as the allreduce */
      view = (sf_array){.hdr = {1, SF_OBJ_ARRAY, 0}, .len = len, .elem = &sf_type_f32,
                        .data = sf__t_wdata(g0), .cap = len};
    } else {
      b = shard_bucket(len, loc);
      b->len = len;
      for (int64_t k = i, o = 0; k < j; o += ts[k++]->numel) {
        sf_tensor *g = sf__t_grad(ts[k]);
        sf_release(g);
        memcpy((float *)b->data + o, sf__t_data(g), (size_t)g->numel * sizeof(float));
      }
    }
    sf__reduce_scatter(b, false, loc);
    buf = b->data;
    for (int64_t k = i; k < j; off += ts[k++]->numel) {
      int64_t ba = lo > off ? lo : off, bb = hi < off + ts[k]->numel ? hi : off + ts[k]->numel;
      if (bb <= ba)
        continue;
      sf_tensor *s = piece(sh, p++, bb - ba, loc);
      if (!s->grad)
        s->grad = sf__t_zeros(1, s->shape, loc);
      memcpy(sf__t_wdata(s->grad), buf + ba, (size_t)(bb - ba) * sizeof(float));
    }
    i = j;
  }
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

/* Every member's updated pieces all-gathered into every member's params. */
void sf_std_train_shard_gather(sf_array *ps, sf_array *sh, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.step", loc);
  check_pieces(ts, n, sh, "train.step", loc);
  int64_t cap = sf__bucket_floats();
  for (int64_t k = 0; k < n; k++)
    ensure_host(ts[k]);
  for (int64_t i = 0, p = 0, rank = sf_group_rank(), size = sf_group_size(); i < n;) {
    int64_t len, j = sf__bucket_end(ts, n, i, cap, &len), lo, hi, off = 0;
    sf__coll_shard(len, rank, size, &lo, &hi);
    /* The pieces into the params (nothing to move when they are views). */
    for (int64_t k = i; k < j; off += ts[k++]->numel) {
      int64_t ba = lo > off ? lo : off, bb = hi < off + ts[k]->numel ? hi : off + ts[k]->numel;
      if (bb <= ba)
        continue;
      sf_tensor *s = piece(sh, p++, bb - ba, loc);
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
      sf_array *b = shard_bucket(len, loc);
      b->len = len;
      for (int64_t k = i, o = 0; k < j; o += ts[k++]->numel)
        memcpy((float *)b->data + o, sf__t_data(ts[k]), (size_t)ts[k]->numel * sizeof(float));
      sf__all_gather(b, loc);
      for (int64_t k = i, o = 0; k < j; o += ts[k++]->numel)
        memcpy(sf__t_wdata(ts[k]), (float *)b->data + o, (size_t)ts[k]->numel * sizeof(float));
    }
    i = j;
  }
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
sf_array *sf_std_train_plan_bytes(sf_array *ps, sf_str *shard, int64_t workers,
                                  const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.plan", loc);
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
  int64_t cap = sf__bucket_floats(), total = 0, comm = 0, mine = 0;
  for (int64_t i = 0; i < n;) {
    int64_t len, j = sf__bucket_end(ts, n, i, cap, &len), lo, hi;
    total += len;
    if (j > i + 1 && len > comm)
      comm = len;
    /* the largest shard a member gets: member n-1's is never smaller */
    sf__coll_shard(len, workers - 1, workers, &lo, &hi);
    mine += hi - lo;
    i = j;
  }
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
void sf_std_train_shard_fill(sf_array *ps, sf_array *sh, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.sync", loc);
  check_pieces(ts, n, sh, "train.sync", loc);
  FOR_PIECES(ts, n, {
    sf_tensor *s = piece(sh, p, pb - pa, loc);
    const float *src = sf__t_data(ts[k]) + pa;
    float *dst = sf__t_wdata(s);
    if (src != dst)
      memcpy(dst, src, (size_t)(pb - pa) * sizeof(float));
  });
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
sf_array *sf_std_train_shard_whole(sf_array *ps, sf_array *pieces, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.save_state", loc);
  check_pieces(ts, n, pieces, "train.save_state", loc);
  sf_array *out = sf_array_new(&sf__type_tensor, 0, loc);
  for (int64_t k = 0; k < n; k++) {
    sf_tensor *z = sf__t_zeros(ts[k]->ndim, ts[k]->shape, loc);
    sf_array_push(out, &z, loc);
  }
  sf_tensor **w = out->data;
  FOR_PIECES(ts, n, {
    sf_tensor *s = piece(pieces, p, pb - pa, loc);
    memcpy(sf__t_wdata(w[k]) + pa, sf__t_data(s), (size_t)(pb - pa) * sizeof(float));
  });
  return out;
}

/* This member's pieces (or an array parallel to them) filled from whole
 * tensors in the params' order: the saved state cut for this group. */
void sf_std_train_shard_slice(sf_array *ps, sf_array *whole, sf_array *pieces, const sf_loc *loc) {
  int64_t n;
  sf_tensor **ts = tensors_of(ps, &n, "train.load_state", loc);
  same_sizes(ts, n, whole, "train.load_state", loc);
  check_pieces(ts, n, pieces, "train.load_state", loc);
  sf_tensor **w = whole->data;
  FOR_PIECES(ts, n, {
    sf_tensor *s = piece(pieces, p, pb - pa, loc);
    memcpy(sf__t_wdata(s), sf__t_data(w[k]) + pa, (size_t)(pb - pa) * sizeof(float));
  });
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
