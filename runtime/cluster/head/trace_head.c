/*
 * trace_head.c — the head's part of `--trace` (trace.c keeps the events
 * and writes the file): the workers' trace frames become events of the
 * trace, each node named as in the hostfile and its events put on the
 * head's clock with the offsets control.c estimates (a worker's part is
 * worker/trace_worker.c).
 */
#include "head.h"

void sf__trace_remote(int node, const sf__frame *f) {
  size_t off = 0;
  sf__trace_rec r;
  for (uint32_t i = 0; i < f->u.trace.count; i++) {
    if (!sf__wire_trace_rec(f->u.trace.events, &off, &r))
      break; /* the decoder checked every record: cannot happen */
    sf__trace_text name = {(const char *)r.name.p, r.name.n};
    sf__trace_text cat = {(const char *)r.cat.p, r.cat.n};
    sf__trace_text error = {(const char *)r.error.p, r.error.n};
    sf__trace_remote_event(node, &name, &cat, &error, r.ts_ns, r.dur_ns, (int32_t)r.tid,
                           (int32_t)r.attempt);
  }
}

static const char *node_host(int k) {
  sf__node_info info;
  if (!sf__cluster_node(k, &info))
    return NULL;
  return info.host ? info.host : "?";
}

static bool node_clock(int k, int64_t *offset_ns) {
  uint64_t rtt;
  return sf__cluster_clock(k, offset_ns, &rtt);
}

void sf__trace_head_install(void) {
  sf__trace_cluster.nodes = sf__cluster_nodes;
  sf__trace_cluster.host = node_host;
  sf__trace_cluster.clock = node_clock;
}
