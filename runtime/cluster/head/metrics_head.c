/*
 * metrics_head.c — the head's part of --metrics-port and --dashboard: a
 * worker's metrics frame (worker/metrics_worker.c) goes into the head's
 * registry labelled node="K" (sched/metrics.c).
 */
#include "head.h"
#include "metrics.h"

void sf__metrics_remote(int node, const sf__frame *f) {
  sf__metrics_take_remote(node, (const char *)f->u.metrics.text.p, f->u.metrics.text.n);
}
