/*
 * trace_worker.c — a worker's part of `--trace` (trace.c keeps the
 * events and writes the file): its events travel to the head in trace
 * frames (proto/wire.c); the head's part is head/trace_head.c.
 *
 * Key design choice: a worker does not keep its events.  It encodes each
 * one into a small pending batch that leaves for the head just before the
 * result of the task or call it belongs to, from the worker's control
 * loop at least every 250 ms, and when the head shuts the worker down
 * (sf__trace_ship), so its memory for tracing stays bounded (a batch is
 * sent at BATCH_MAX bytes) and a worker killed mid-run loses only the
 * events of the work it was doing.
 */
#include <pthread.h>
#include <string.h>

#include "worker.h"

#define BATCH_MAX (64u << 10)

static struct {
  pthread_mutex_t mu;
  sf__wbuf b;     /* encoded records, SF__TRACE_REC layout (wire.c) */
  uint32_t count;
} WB = {.mu = PTHREAD_MUTEX_INITIALIZER};

void sf__trace_ship(void) {
  if (!__atomic_load_n(&WB.count, __ATOMIC_RELAXED))
    return;
  pthread_mutex_lock(&WB.mu);
  sf__wbuf b = WB.b;
  uint32_t count = WB.count;
  WB.b = (sf__wbuf){0};
  __atomic_store_n(&WB.count, 0, __ATOMIC_RELAXED); /* read unlocked above */
  pthread_mutex_unlock(&WB.mu);
  if (count) {
    sf__frame f = {.type = SF__F_TRACE};
    f.u.trace.count = count;
    f.u.trace.events = (sf__bytes){b.p, (uint32_t)b.n};
    sf__worker_send_frame(&f);
  }
  sf__wbuf_free(&b);
}

static void worker_event(const char *name, const char *cat, uint64_t ts_ns, uint64_t dur_ns,
                         int32_t tid, int32_t attempt, const char *error) {
  sf__trace_rec r = {.ts_ns = ts_ns, .dur_ns = dur_ns, .tid = (uint32_t)tid,
                     .attempt = (uint32_t)attempt};
  r.name = (sf__bytes){(const uint8_t *)name, (uint32_t)strnlen(name, SF__TRACE_NAME_MAX)};
  r.cat = (sf__bytes){(const uint8_t *)cat, (uint32_t)strnlen(cat, SF__TRACE_NAME_MAX)};
  if (error)
    r.error = (sf__bytes){(const uint8_t *)error, (uint32_t)strnlen(error, SF__TRACE_ERROR_MAX)};
  pthread_mutex_lock(&WB.mu);
  bool full = false;
  if (WB.count < SF__TRACE_BATCH_MAX && sf__wire_put_trace_rec(&WB.b, &r) == 0) {
    __atomic_store_n(&WB.count, WB.count + 1, __ATOMIC_RELAXED);
    full = WB.count == SF__TRACE_BATCH_MAX || WB.b.n >= BATCH_MAX;
  }
  pthread_mutex_unlock(&WB.mu);
  if (full)
    sf__trace_ship();
}

void sf__trace_worker_install(void) { sf__trace_cluster.worker_event = worker_event; }
