/*
 * install.c — the cluster layer's hooks in the scheduler: task.c's placer
 * (sched.h, sf__place), through which a task call, a spawn and an actor
 * call reach other nodes without the scheduler calling up into this layer,
 * trace.c's (head/trace_head.c, worker/trace_worker.c), and the TCP-ring
 * transport of collectives (worker/group_ring.c) in collective.c's
 * registry (docs/architecture.md, "Hooks").  Each placer member stays a
 * no-op outside a --nodes run on the head (head/dispatch.c and
 * head/ractor_head.c decide).
 *
 * Key design choice: this is the one file of the layer that sees both
 * sides; the head's files and the worker's never call each other.
 */
#include "cluster.h"

void sf__cluster_install(void) {
  sf__place = (sf__placer){
      .task = sf__remote_task,
      .spawn = sf__ractor_spawn,
      .call = sf__ractor_call,
      .drop = sf__ractor_drop,
      .demand = sf__remote_demand,
      .future_gone = sf__remote_future_gone,
  };
  sf__trace_head_install();
  sf__trace_worker_install();
  sf__coll_transports[SF__COLL_RING] = &sf__coll_ring;
}
