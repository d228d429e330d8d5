/*
 * ractor_internal.h — what the three files of remote actors share:
 * ractor_head.c (the head's handles: spawn, calls, checkpoints kept,
 * recovery), ractor_worker.c (the actors a worker runs) and group_ring.c
 * (a group member's collectives across nodes).  Nothing outside them
 * includes it.
 *
 * Key design choice: the head and the worker meet only in frames, so the
 * payload layouts below are the whole contract between ractor_head.c and
 * ractor_worker.c; the worker reaches a member's ring only through the
 * three calls at the end.
 *
 * Payloads.  actor-create: u32 class-name length, class name, u64 spawn
 * id, u32 rank, u32 size, u64 ring id (0: alone), u64 calls, u64 epochs,
 * u8 from (0: init arguments, 1: a checkpointed state), u32 length + bytes
 * (those arguments or that state), u32 length + peer list (size entries,
 * as in group-setup; empty when alone).  actor-call: u32 method-name
 * length, name, u8 flags (1: part of g.all; 2: a replay of a call whose
 * result was delivered, its print output muted), then the arguments.  Class
 * and method are named by descriptor offset plus name, checked by the
 * worker like tasks (worker_tasks.c).
 */
#ifndef SF_RACTOR_INTERNAL_H
#define SF_RACTOR_INTERNAL_H

#include <time.h>

#include "cluster.h"

static inline int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static inline int32_t value_size(const sf_type *t) {
  return t && t->kind != SF_VOID ? t->size : 0;
}

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
