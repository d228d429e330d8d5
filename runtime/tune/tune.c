/*
 * tune.c — std.tune's externs: the searcher's hash, the live table's
 * pacing and output, and the result files.
 *
 * u01 is the one design choice here: instead of a random stream that a
 * resumed sweep would have to restore, a trial's parameter j is drawn from
 * a hash of (seed, trial, j).  The searcher's whole state is then the
 * number of trials it has made, which the journal's replay rebuilds, and
 * trial 37's learning rate does not depend on how many parameters trials
 * 0..36 drew.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tune.h"

/* splitmix64's finalizer (docs/runtime.md, "Random numbers"). */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double sf_std_tune_u01(int64_t seed, int64_t trial, int64_t slot, const sf_loc *loc) {
  (void)loc;
  uint64_t k = mix64((uint64_t)seed + 0x9e3779b97f4a7c15ull);
  k = mix64(k + 0x9e3779b97f4a7c15ull * ((uint64_t)trial + 1));
  k = mix64(k + 0x9e3779b97f4a7c15ull * ((uint64_t)slot + 2));
  return (double)(k >> 11) * 0x1p-53; /* 53 bits: every double in [0, 1) a multiple of 2^-53 */
}

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Only main's thread drives a sweep, so the pacing needs no lock. */
static double last_shown = -1e30;

bool sf_std_tune_table_due(bool last, const sf_loc *loc) {
  (void)loc;
  if (sf__options.quiet)
    return false;
  double now = mono();
  if (last) {
    last_shown = now;
    return true;
  }
  static double interval = -1;
  if (interval < 0) {
    const char *e = getenv("SFLOW_TUNE_TABLE_INTERVAL");
    interval = e && *e ? atof(e) : isatty(2) ? 0.5 : 2.0;
  }
  if (now - last_shown < interval)
    return false;
  last_shown = now;
  return true;
}

void sf_std_tune_show(sf_str *text, const sf_loc *loc) {
  (void)loc;
  if (!sf__options.quiet && text->len)
    (void)sf__out_write(2, text->data, (size_t)text->len);
}

/* A trial's error as a JSON string literal, quotes included: the
 * summary's "error" field (sf__buf_json_str: control bytes escaped,
 * UTF-8 passed through, an ill-formed byte as \ufffd). */
sf_str *sf_std_tune_json_text(sf_str *text, const sf_loc *loc) {
  (void)loc;
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__buf_json_str(&b, text->data, (size_t)text->len);
  sf_str *out = sf_str_new(b.data, (int64_t)b.len);
  sf__buf_free(&b);
  return out;
}

/* A CSV field (RFC 4180): as it is when it holds no comma, quote or line
 * break, else in double quotes with its quotes doubled. */
sf_str *sf_std_tune_csv_field(sf_str *text, const sf_loc *loc) {
  (void)loc;
  if (!memchr(text->data, ',', (size_t)text->len) && !memchr(text->data, '"', (size_t)text->len) &&
      !memchr(text->data, '\n', (size_t)text->len) && !memchr(text->data, '\r', (size_t)text->len))
    return sf_str_new(text->data, text->len);
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__buf_put(&b, "\"", 1);
  for (int64_t i = 0; i < text->len; i++) {
    if (text->data[i] == '"')
      sf__buf_put(&b, "\"", 1);
    sf__buf_put(&b, text->data + i, 1);
  }
  sf__buf_put(&b, "\"", 1);
  sf_str *out = sf_str_new(b.data, (int64_t)b.len);
  sf__buf_free(&b);
  return out;
}

void sf_std_tune_io_write(sf_str *path, sf_str *text, const sf_loc *loc) {
  sf__write_or_fail(path, text->data, (size_t)text->len, NULL, NULL, loc);
}

bool sf_std_tune_progress_on(const sf_loc *loc) {
  (void)loc;
  return sf__progress_wanted();
}

/* The progress line's sweep status: trials done (stopped, terminated or
 * failed) of all, running, failed, and the best metric so far. */
void sf_std_tune_progress(int64_t done, int64_t total, int64_t running, int64_t failed,
                          double best, int64_t best_trial, const sf_loc *loc) {
  (void)loc;
  char text[200], b[64] = "";
  if (best_trial >= 0 && isfinite(best))
    snprintf(b, sizeof b, ", best %.4g (trial %lld)", best, (long long)best_trial);
  snprintf(text, sizeof text, "trials %lld/%lld done, %lld running, %lld failed%s",
           (long long)done, (long long)total, (long long)running, (long long)failed, b);
  sf__progress_status(SF__STATUS_SWEEP, text);
}

/* A sweep result's figures: trials by state and the best metric for
 * --metrics-port and the dashboard (whose table shows each trial's last
 * metric), and the trial's metric at its iteration in DIR/trial_N as a
 * TensorBoard scalar.  t < 0: counts only (a trial failed). */
void sf_std_tune_observe(int64_t t, int64_t iter, double metric, int64_t pending,
                         int64_t running, int64_t done, int64_t failed, double best,
                         int64_t best_trial, sf_str *tensorboard_dir, const sf_loc *loc) {
  static bool declared;
  if (!declared) { /* only main's thread drives a sweep */
    declared = true;
    sf__metric_declare("sflow_tune_trials", SF__M_GAUGE, "Trials of the sweep, by state.");
    sf__metric_declare("sflow_tune_best_metric", SF__M_GAUGE, "The best metric of any trial so far.");
    sf__metric_declare("sflow_tune_best_trial", SF__M_GAUGE, "The trial that reached it.");
    sf__metric_declare("sflow_tune_results_total", SF__M_COUNTER, "Results the trials reported.");
    sf__metric_declare("sflow_tune_trial_metric", SF__M_GAUGE, "Each trial's latest metric.");
    sf__metric_declare("sflow_tune_trial_iterations", SF__M_GAUGE, "Each trial's iterations done.");
  }
  if (sf__metrics_on) {
    sf__metric_set("sflow_tune_trials", "state=\"pending\"", (double)pending);
    sf__metric_set("sflow_tune_trials", "state=\"running\"", (double)running);
    sf__metric_set("sflow_tune_trials", "state=\"done\"", (double)done);
    sf__metric_set("sflow_tune_trials", "state=\"failed\"", (double)failed);
    if (best_trial >= 0) {
      sf__metric_set("sflow_tune_best_metric", "", best);
      sf__metric_set("sflow_tune_best_trial", "", (double)best_trial);
    }
    if (t >= 0) {
      char l[48];
      snprintf(l, sizeof l, "trial=\"%lld\"", (long long)t);
      sf__metric_add("sflow_tune_results_total", "", 1);
      sf__metric_set("sflow_tune_trial_metric", l, metric);
      sf__metric_set("sflow_tune_trial_iterations", l, (double)iter);
    }
  }
  int64_t n = sf__str_len(tensorboard_dir);
  if (t < 0 || n <= 0)
    return;
  char dir[4200], err[4600];
  snprintf(dir, sizeof dir, "%.*s/trial_%lld", (int)(n < 4095 ? n : 4095),
           sf__str_data(tensorboard_dir), (long long)t);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (!sf__tb_scalar(dir, "metric", iter, metric, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec,
                     err, sizeof err))
    sf_runtime_error(loc, "tune: %s", err);
}
