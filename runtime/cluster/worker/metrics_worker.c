/*
 * metrics_worker.c — a worker's part of --metrics-port and --dashboard:
 * its figures travel to the head in metrics frames (the head's part is
 * head/metrics_head.c), so one scrape of the head answers for the whole
 * run.
 *
 * Key design choice: the frame is the worker registry's own Prometheus
 * text (gauges and counters; histograms stay on the worker), sent from
 * the worker's control loop once a second.  Text costs a few hundred
 * bytes a second per worker, needs one bytes field in the frame table,
 * and the head's parser is the one format it already writes.
 */
#include <time.h>

#include "metrics.h"
#include "worker.h"

#define SHIP_MS 1000

void sf__metrics_ship(bool now) {
  static int64_t last;
  if (!sf__options.worker_metrics)
    return;
  int64_t t = sf__mono_ns() / 1000000;
  if (!now && t - last < SHIP_MS)
    return;
  last = t;
  char storage[4096];
  sf__buf b;
  sf__buf_init(&b, storage, sizeof storage);
  sf__metrics_prom_flat(&b);
  if (b.len) {
    sf__frame f = {.type = SF__F_METRICS};
    f.u.metrics.text = (sf__bytes){(const uint8_t *)b.data, (uint32_t)b.len};
    sf__worker_send_frame(&f);
  }
  sf__buf_free(&b);
}
