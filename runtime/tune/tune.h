/*
 * tune.h — the C side of stdlib/tune.sflow (std.tune, docs/tune.md).
 *
 * The searcher and the schedulers are sflow code; what lives here is what
 * sflow cannot say or should not pay for per call: a stateless hash that
 * makes every random hyperparameter a function of (seed, trial, slot), so
 * a sweep is the same on every run and after --resume with no searcher
 * state to save; the live table's rate limit and its write to stderr
 * around the progress line; and the result files, replaced whole.
 */
#ifndef SF_TUNE_H
#define SF_TUNE_H

#include "sched.h"
#include "data.h"
#include "metrics.h"
#include "tfevents.h"

double sf_std_tune_u01(int64_t seed, int64_t trial, int64_t slot, const sf_loc *loc);
bool sf_std_tune_table_due(bool last, const sf_loc *loc);
void sf_std_tune_show(sf_str *text, const sf_loc *loc);
bool sf_std_tune_progress_on(const sf_loc *loc);
void sf_std_tune_progress(int64_t done, int64_t total, int64_t running, int64_t failed,
                          double best, int64_t best_trial, const sf_loc *loc);
sf_str *sf_std_tune_json_text(sf_str *text, const sf_loc *loc);
sf_str *sf_std_tune_csv_field(sf_str *text, const sf_loc *loc);
void sf_std_tune_io_write(sf_str *path, sf_str *text, const sf_loc *loc);
void sf_std_tune_observe(int64_t t, int64_t iter, double metric, int64_t pending,
                         int64_t running, int64_t done, int64_t failed, double best,
                         int64_t best_trial, sf_str *tensorboard_dir, const sf_loc *loc);

#endif
