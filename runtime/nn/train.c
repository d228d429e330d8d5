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
#include "nn.h"

int64_t sf_std_train_rank(const sf_loc *loc) {
  (void)loc;
  return sf_group_rank();
}

int64_t sf_std_train_workers(const sf_loc *loc) {
  (void)loc;
  return sf_group_size();
}

void sf_std_train_sum_tensors(sf_array *ts, const sf_loc *loc) {
  sf_allreduce_tensors(ts, false, loc);
}

void sf_std_train_sum_f64(sf_array *xs, const sf_loc *loc) { sf_allreduce_sum(xs, loc); }

void sf_std_train_broadcast_tensors(sf_array *ts, int64_t root, const sf_loc *loc) {
  sf_broadcast_tensors(ts, root, loc);
}
