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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

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
