/*
 * obs.h — the observability layer (docs/observability.md): --metrics-port
 * (Prometheus text at /metrics), --dashboard (a live page and its JSON at
 * /api/state), the sampler that turns the runtime's state into metrics
 * and --trace counter tracks, and GPU counters through NVML.  Above serve
 * (libmicrohttpd, loaded by serve/mhd.c) and cluster (the nodes of a
 * --nodes run); the registry itself is sched's (sched/metrics.h), so the
 * std modules below this layer report into it.
 */
#ifndef SF_OBS_H
#define SF_OBS_H

#include "cluster.h"
#include "metrics.h"
#include "serve.h"

/* ---------------------------------------------------------- obs.c */

/* Before the run: starts the endpoints asked for (--metrics-port,
 * --dashboard) and the sampler (also for --trace's counters).  False with
 * a message (a port in use, a bad --metrics-bind, a wide bind without
 * SFLOW_METRICS_TOKEN, no libmicrohttpd): a usage error. */
bool sf__obs_start(char *err, size_t errlen);
/* At the end of the run: a last sample (the trace's counters end with
 * the run), the sampler stopped, the endpoints closed. */
void sf__obs_stop(void);

/* -------------------------------------------------------- sample.c */

/* Reads the runtime's state into the registry (and trace counters). */
void sf__obs_sample(void);
/* The families sample.c sets, declared once. */
void sf__obs_declare(void);

/* ---------------------------------------------------------- nvml.c */

/* Each GPU's utilisation, memory, power and temperature into the
 * registry (labelled device="K") and, on --trace, a device memory counter;
 * nothing at all when libnvidia-ml.so.1 or a GPU is missing. */
void sf__nvml_sample(void);

/* ----------------------------------------------------- dashboard.c */

/* The dashboard page: one HTML file with its script and styles. */
extern const char sf__dashboard_html[];

#endif
