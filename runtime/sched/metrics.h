/*
 * metrics.h — the run's metrics registry (metrics.c): labelled counters,
 * gauges and histograms that the scheduler, the std modules and the
 * observability layer (runtime/obs) set, read back as Prometheus text
 * and as the dashboard's JSON; plus the dashboard's history (a curve's
 * points) and its recent errors.  docs/observability.md lists every
 * family.
 *
 * Key design choice: nothing is recorded unless sf__metrics_on (set by
 * runtime/obs when --metrics-port or --dashboard is given), so a run
 * without them pays one predictable branch per call site.  Callers name
 * a family and give its labels already written (`node="0",device="1"`);
 * one mutex guards the table, which is fine for what calls it: a few
 * figures per optimizer step or sweep result, and a sampler thread a few
 * times a second.
 */
#ifndef SF_METRICS_H
#define SF_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

enum { SF__M_COUNTER, SF__M_GAUGE, SF__M_HISTOGRAM };

extern bool sf__metrics_on;

/* Declares a family once (later calls are ignored): its kind and its
 * # HELP text.  A family set before it is declared is an untyped gauge. */
void sf__metric_declare(const char *family, int kind, const char *help);
/* The kind family was declared with, or -1 if it was not. */
int sf__metric_kind(const char *family);
/* A gauge's value; a counter's total (a counter only rises: the sampler
 * copies the scheduler's own totals); labels may be "" for none. */
void sf__metric_set(const char *family, const char *labels, double v);
void sf__metric_add(const char *family, const char *labels, double v);
/* One observation of a histogram (seconds: buckets 1 ms to 60 s). */
void sf__metric_observe(const char *family, const char *labels, double v);
/* The series of a family whose labels start with prefix are dropped (a
 * node that left, say). */
void sf__metric_drop(const char *family, const char *label_prefix);

/* The dashboard's curves: point (x, y) of a named series, the last 2000
 * kept (older ones thinned to every other). */
void sf__metric_point(const char *series, double x, double y);
/* A recent error, with its location in the text; the last 32 kept. */
void sf__metric_event(const char *text);

/* Prometheus text format 0.0.4 of every family, into b. */
void sf__metrics_prom(sf__buf *b);
/* The same without # HELP lines and histograms: what a worker ships to
 * the head (cluster/metrics_ship.c). */
void sf__metrics_prom_flat(sf__buf *b);
/* Head: worker `node`'s text of sf__metrics_prom_flat, each sample kept
 * under its family with node="K" before its labels; its train loss also
 * extends the dashboard's curve. */
void sf__metrics_take_remote(int node, const char *text, size_t n);
/* {"families":{NAME:[[LABELS,VALUE],...]},"series":{NAME:[[x,y],...]},
 *  "errors":[...]}: the dashboard's view (a histogram as its count and
 * sum). */
void sf__metrics_json(sf__buf *b);

/* std.metrics' externs (stdlib/metrics.sflow): checked names and label
 * text, then the calls above; a bad one is a runtime error at loc. */
void sf_std_metrics_gauge(sf_str *name, double value, sf_str *labels, sf_str *help, const sf_loc *loc);
void sf_std_metrics_count(sf_str *name, double by, sf_str *labels, sf_str *help, const sf_loc *loc);
void sf_std_metrics_observe(sf_str *name, double seconds, sf_str *labels, sf_str *help,
                            const sf_loc *loc);
void sf_std_metrics_point(sf_str *series, double x, double y, const sf_loc *loc);

#endif
