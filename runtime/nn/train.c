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
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "nn.h"

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
