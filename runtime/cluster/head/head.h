/*
 * head.h — the head's side of a multi-node run: start-up and shutdown
 * (launch.c), the control thread (control.c), --sflow-selftest
 * (selftest.c), task calls across nodes (dispatch.c, placement.c,
 * objects_head.c), actors on workers (ractor_head.c) and the head's part
 * of --trace (trace_head.c).  Nothing in worker/ includes it.
 */
#ifndef SF_CLUSTER_HEAD_H
#define SF_CLUSTER_HEAD_H

#include "../proto/proto.h"

/* Per-node view for the scheduler (index 0 is the head). */
typedef struct sf__node_info {
  int id;
  const char *host; /* as written in the hostfile ("localhost" for the head) */
  int slots, gpus;  /* from the hostfile, else what the worker reported */
  int pid;          /* worker process id on its host */
  bool alive;
} sf__node_info;

/* Called on the control-plane thread when a node is lost (process died,
 * connection closed, or no heartbeat for SF__HEARTBEAT_TIMEOUT_MS). */
typedef void (*sf__node_lost_fn)(int node, const char *why);

/* ---------------------------------------------------------- launch.c */

/* Head: with --nodes, connects, deploys and starts every worker and waits
 * until all have authenticated.  0 when there is nothing to do or all are
 * ready; else -1 with err (every started worker already stopped). */
int sf__cluster_start(char *err, size_t errlen);
/* Head: shutdown frame to every worker, then waits (bounded) for them to
 * close their connections and ends the SSH sessions.  Idempotent. */
void sf__cluster_stop(void);
int sf__cluster_nodes(void); /* 1 + number of workers; 1 without --nodes */
bool sf__cluster_node(int id, sf__node_info *out);
void sf__cluster_on_node_lost(sf__node_lost_fn fn);
/* Head: the data-plane address a worker reported (for actor group rings),
 * and the port of its object store's listener on the same address. */
bool sf__cluster_data_addr(int node, char *addr, size_t n, uint16_t *port);
bool sf__cluster_obj_addr(int node, char *addr, size_t n, uint16_t *port);

/* --------------------------------------------------------- control.c */

/* Head: the best estimate of worker `node`'s clock minus the head's
 * (trace.c's clock, ns), and the round trip of the heartbeat it came from;
 * false (offset 0) before any answer.  NTP's rule: offset = t1 - (t0+t2)/2
 * for a heartbeat sent at t0, seen by the worker at t1 and answered at t2,
 * from the sample with the smallest t2 - t0, so the error is at most half
 * that round trip. */
bool sf__cluster_clock(int node, int64_t *offset_ns, uint64_t *rtt_ns);
/* Head: seconds since worker `node` last sent a byte, and the longest such
 * silence so far (--metrics-port's heartbeat gaps); false when it is not
 * a live worker. */
bool sf__cluster_silence(int node, double *now_s, double *max_s);
/* Head: queues encoded frames (whole frames, in order) for worker `node`;
 * the control thread writes them without blocking, so callers never wait
 * on a slow peer.  -1 when the node is not a live worker. */
int sf__cluster_send(int node, const void *bytes, size_t n);
/* One piece of what sf__cluster_send_parts queues: n bytes at p, copied
 * into the queue when blob is NULL, else sent from where they lie (inside
 * blob, which the queue holds a reference to until they are written). */
typedef struct sf__part {
  const void *p;
  size_t n;
  sf__shared *blob;
} sf__part;
/* Queues parts[0..k) for worker `node` as one run of bytes (nothing from
 * another thread in between), like sf__cluster_send; only the copied
 * parts cost a copy, under the lock the control thread needs.  -1 when
 * the node is not a live worker (nothing queued). */
int sf__cluster_send_parts(int node, const sf__part *parts, int k);

/* -------------------------------------------------------- selftest.c */

/* A group collective across workers (ring over their data listeners):
 * members are node ids >= 1 in ring order.  Used by --sflow-selftest;
 * count 0 only builds and tears down the ring. */
typedef struct sf__group_result {
  bool ok;
  double seconds; /* slowest member, per iteration */
  char message[256];
} sf__group_result;
int sf__cluster_group_bench(const int *members, int n, uint64_t count, sf__dtype t, int iters,
                            sf__group_result *res, char *err, size_t errlen);
/* --sflow-selftest SPEC on the head instead of workflow main (tests and
 * bench/cluster): "ready", "hold:SECONDS", "allreduce:COUNT:TYPE:ITERS". */
int sf__cluster_selftest(const char *spec);

/* -------------------------------------------------------- dispatch.c */

/* Placement across nodes: true when another node takes this task call.
 * args stays owned by the caller (copy what is needed); f is completed
 * later with sf__future_resolve / sf__future_reject; key (the call's
 * identity) goes with every attempt. */
bool sf__remote_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq, uint64_t key);
/* Head, on the control thread (control.c, H.mu not held): a task result or
 * print output from worker `node`. */
struct sf__frame;
void sf__remote_on_result(int node, const struct sf__frame *f);
void sf__remote_on_print(int node, const char *s, size_t n);
/* Whether values of type t can travel (no futures, actors or groups). */
bool sf__remote_portable(const sf_type *t);
/* Appends to b what the head printed for output s[0..n) of node (with the
 * "[node K] " prefix when more than one node runs work). */
void sf__remote_printed_as(int node, const char *s, size_t n, sf__buf *b);

/* ------------------------------------------------------- placement.c */

/* A GPU share placed with an actor or task: share in thousandths of one
 * GPU (<= 1000) or whole GPUs * 1000, 0 for none; while held, taken on
 * device dev of its node (a share) or on the devices in mask (whole). */
typedef struct sf__gpu_hold {
  int32_t share, dev;
  uint64_t mask;
  bool held;
} sf__gpu_hold;
/* The share @gpus(gpus) takes in this run, 0 when no node has a GPU (the
 * work then stays on the head, as in a single-node run). */
int32_t sf__remote_gpu_share(double gpus);
/* Placement for actors (ractor_head.c): a live node with `need` free slots,
 * the most free first, workers before the head on a tie (the head only
 * when head_ok); its slots are held until sf__remote_unplace.  With a GPU
 * share (gpu->share), the best fit among nodes where it is free, held
 * with the slots.  -1: none. */
int sf__remote_place(int need, sf__gpu_hold *gpu, bool head_ok, const bool *exclude);
void sf__remote_unplace(int node, int need, sf__gpu_hold *gpu);
bool sf__remote_active(void); /* a --nodes run on the head */
const char *sf__remote_lost_why(int node); /* NULL while alive */

/* ---------------------------------------------------- objects_head.c */

/* An object frame from the worker that holds a large result. */
void sf__remote_on_object(int node, const struct sf__frame *f);
/* Head: future.c asks for the value of a held future (sf__future_held) when
 * it is first wanted, and tells when a held future's last reference goes
 * (nothing here can want the value any more: the worker may drop it). */
void sf__remote_demand(sf_future *f);
void sf__remote_future_gone(sf_future *f);

/* ----------------------------------------------------- ractor_head.c */

/* Head: places a spawn on workers when it can: one actor
 * (n 1) or a gang of n members; true when it did (args consumed). */
bool sf__ractor_spawn(sf_actor **members, int64_t n, void *args);
/* Head: a call to an actor on a worker; args consumed. */
void sf__ractor_call(struct sf__ractor *r, const sf_method_desc *md, void *args, bool all,
                     const sf__sink *sink);
void sf__ractor_drop(struct sf__ractor *r); /* the handle is gone */
void sf__ractor_node_lost(int node, const char *why);
void sf__ractor_on_frame(int node, const struct sf__frame *f); /* control thread */
/* An actor-state frame f whose state lies inside bytes, which the head
 * keeps a reference to instead of copying (control thread). */
void sf__ractor_on_state(int node, const struct sf__frame *f, sf__shared *bytes);

/* ------------------------------------------------------ trace_head.c */

/* Head, control thread: a trace frame from worker `node`. */
void sf__trace_remote(int node, const struct sf__frame *f);
/* trace.c's hooks that name the nodes and align their clocks. */
void sf__trace_head_install(void);

/* ---------------------------------------------------- metrics_head.c */

/* Head, control thread: a metrics frame from worker `node`. */
void sf__metrics_remote(int node, const struct sf__frame *f);

#endif
