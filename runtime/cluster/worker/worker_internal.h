/*
 * worker_internal.h — what a worker's files share beyond worker.h: the
 * object store (objects_worker.c) that the runners (worker_tasks.c) keep
 * large results in and fetch other workers' objects through, and a
 * member's ring (group_ring.c) that the actors a worker runs
 * (ractor_worker.c) reach through three calls.  Nothing outside worker/
 * includes it.
 */
#ifndef SF_CLUSTER_WORKER_INTERNAL_H
#define SF_CLUSTER_WORKER_INTERNAL_H

#include "worker.h"

/* ------------------------------------------------- objects_worker.c */

/* The store of large results by object id. */
typedef struct wobj {
  struct wobj *next;
  uint64_t id;
  uint8_t *p;
  size_t n;
  int users;
  bool dropped;
} wobj;
/* SFLOW_OBJECT_THRESHOLD: results larger than this stay on the worker. */
size_t sf__obj_threshold(void);
bool sf__wobj_keep(uint64_t id, const void *p, size_t n);
/* The object id with a use counted (NULL: not held here); unuse ends it. */
wobj *sf__wobj_use(uint64_t id);
void sf__wobj_unuse(wobj *o);
/* SFLOW_OBJECT_SERVE_DELAY_MS (tests): a window to kill the owner in. */
void sf__obj_delay(void);
/* The bytes of object id (size bytes) from the worker at addr:port into a
 * new buffer; NULL with why[] when that fails. */
uint8_t *sf__obj_fetch(const char *addr, uint16_t port, uint64_t id, uint64_t size, char *why,
                       size_t wl);

/* ----------------------------------------------------- group_ring.c */

/* A group member's transport on a worker (group_ring.c). */
typedef struct wring wring;
/* The communicator of member rank of a group of size on ring id ring
 * (peers: every member's data listener), its links made at the first
 * collective; NULL when out of memory. */
sf__comm *sf__group_ring_comm(int64_t rank, int64_t size, uint64_t ring, const sf__peer *peers);
/* Stops the member's collectives (those waiting fail); whether they fail
 * now because a link broke. */
void sf__group_ring_stop(wring *w);
bool sf__group_ring_broken(wring *w);

#endif
