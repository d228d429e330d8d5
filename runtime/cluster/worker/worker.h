/*
 * worker.h — a worker process: its life (worker_main.c), its runner
 * threads (worker_tasks.c), its object store (objects_worker.c), the
 * actors it holds (ractor_worker.c) and their groups' ring (group_ring.c),
 * and its trace batches (trace_worker.c).  Nothing in head/ includes it.
 */
#ifndef SF_CLUSTER_WORKER_H
#define SF_CLUSTER_WORKER_H

#include "../proto/proto.h"

/* ----------------------------------------------------- worker_main.c */

/* Worker: the whole life of a worker process (--sflow-worker SPEC).
 * Returns the process exit code. */
int sf__worker_main(const char *spec);
/* Worker: rank K > 0 of a run a launcher started (sf__launched): dials
 * rank 0 (retrying while it is not listening yet), then as above. */
int sf__worker_launched(void);
/* Worker: its data-plane listener (-1: none) and the run's secret. */
int sf__worker_data_fd(void);
const uint8_t *sf__worker_secret(void);
/* Worker: sends a frame to the head (thread-safe; concurrent senders are
 * combined into one write). */
void sf__worker_send_frame(const sf__frame *f);
/* Worker: sends frames the caller encoded into b (a checkpoint, encoded
 * on the actor's thread, outside the lock every sender takes), in order
 * with the others; b is taken (emptied). */
void sf__worker_send_encoded(sf__wbuf *b);

/* ---------------------------------------------------- worker_tasks.c */

/* Worker: a task-submit frame from the head (validated, queued, run on
 * runner threads; results go back with sf__worker_send_frame). */
void sf__remote_worker_start(void);
void sf__remote_worker_submit(const struct sf__frame *f);
/* The task descriptor at offset off from &sf_program_desc, when that lies
 * in this executable and is a descriptor named name[0..nl); else NULL with
 * a message.  A peer's number is never followed further than that. */
const sf_task_desc *sf__remote_find_task(uint32_t off, const uint8_t *name, uint32_t nl,
                                         char *err, size_t errlen);
typedef struct sf__comm sf__comm;
/* The descriptor at offset off whose name is name[0..nl), checked like a
 * task's (same rules, as an sf_method_desc or sf_actor_desc). */
const sf_method_desc *sf__remote_find_method(uint32_t off, const uint8_t *name, uint32_t nl,
                                             char *err, size_t errlen);
const sf_actor_desc *sf__remote_find_class(uint32_t off, const uint8_t *name, uint32_t nl,
                                           char *err, size_t errlen);

/* ----------------------------------------------------- group_ring.c */

/* The TCP-ring transport of group collectives (sched.h,
 * sf__coll_transport), registered by sf__cluster_install as
 * sf__coll_transports[SF__COLL_RING].  Its init's arg: member rank of the
 * group on ring id ring, peers[k] member k's data listener. */
typedef struct sf__ring_group_arg {
  int64_t rank;
  uint64_t ring;
  const sf__peer *peers;
} sf__ring_group_arg;
extern const sf__coll_transport sf__coll_ring;

/* --------------------------------------------------- ractor_worker.c */

/* Worker: the actor frame c's sf__conn_next just returned, taken from c
 * (sf__conn_take: in place when large) and handled on the actor-frame
 * thread, in the order of arrival, so that decoding a restarted member's
 * state of hundreds of MB never keeps the control loop from the head's
 * heartbeats. */
void sf__ractor_worker_take(sf__conn *c);


/* -------------------------------------------------- objects_worker.c */

/* An object frame from the head: a fetch request or a release. */
void sf__remote_worker_object(const struct sf__frame *f);
/* Serves the object store to other workers on listener fd (a thread). */
void sf__remote_objects_listen(int fd);

/* ---------------------------------------------------- trace_worker.c */

/* Sends the pending events to the head now (before a result, from the
 * control loop, at shutdown); nothing when there are none. */
void sf__trace_ship(void);
/* trace.c's hook that batches a worker's events for the head. */
void sf__trace_worker_install(void);

/* -------------------------------------------------- metrics_worker.c */

/* Worker of a run with --metrics-port or --dashboard on the head
 * (--sflow-metrics): sends its figures at most once a second (now: at
 * once, the last before shutdown). */
void sf__metrics_ship(bool now);

#endif
