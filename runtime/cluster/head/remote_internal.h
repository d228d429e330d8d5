/*
 * remote_internal.h — what the head's three files of remote task calls
 * share: dispatch.c (submission, retries, future arguments, head runners
 * and node loss), placement.c (the ledger of slots and GPU shares, actor
 * placement) and objects_head.c (the head's side of the object store).
 * Nothing outside them includes it; the rest of the runtime sees their
 * sf__remote_* entry points in head.h.
 *
 * Key design choice: one ledger, `R`, under one mutex (R.mu) holds every
 * task record, the backlog, the wait list and every node's slots and GPU
 * shares, so a dispatch round, a result and a node loss each see one
 * consistent picture.  Functions named *_locked expect R.mu held; frames
 * they produce go into an outbox that the caller sends after releasing it.
 *
 * The payloads of task-submit and task-result are described in
 * proto/proto.h.
 */
#ifndef SF_REMOTE_INTERNAL_H
#define SF_REMOTE_INTERNAL_H

#include <pthread.h>

#include "head.h"

/* ------------------------------------------------- the head's ledger */

/* A held object a task's payload names: where, and whose result it is. */
typedef struct objref {
  uint64_t id, size;
  int node;
  const char *name; /* the producer's task name (static) */
} objref;

typedef struct rtask {
  struct rtask *next;  /* backlog, head-local queue or the wait list */
  struct rtask *wprev; /* the wait list is doubly linked (O(1) removal) */
  struct rtask *hnext; /* hash chain */
  struct rtask *fnext; /* chain of the future-pointer hash */
  uint64_t id;
  const sf_task_desc *d;
  sf_future *f;        /* a reference while strong (see "Ownership"), else a
                        * weak pointer cleared by sf__remote_future_gone */
  bool strong;
  void *args;          /* future arguments: the argument block (its references
                        * held) until the task record is freed; else NULL */
  bool waiting;        /* on the wait list: some future argument is not ready */
  bool front;          /* leaves the wait list for the front of the backlog */
  objref *refs;        /* held objects the current payload names (nrefs) */
  int nrefs;
  int pref;            /* node holding most of those bytes, or -1 */
  int users;           /* payloads of other tasks naming this one's held result */
  int avoid;           /* a node its held result could not be fetched from, or 0 */
  uint8_t *payload;    /* name + args, as sent */
  uint32_t n;
  int32_t attempt;
  uint64_t key;        /* the call's identity (random streams), sent with each attempt */
  int node;            /* -1: waiting in the backlog */
  sf__gpu_hold gpu;    /* @gpus: the share, and where it is taken */
  /* objects: a result held by worker `node` (slot freed), wanted by the
   * head (awaited), being fetched */
  bool held, wanted, fetching;
  int obj_chunks;
  uint8_t *obj;        /* (obj_total) bytes, obj_got of them received */
  uint64_t obj_total, obj_got;
  char *out;           /* a held result's output, as printed here (journal) */
  size_t out_n;
  double trace_t0;     /* --trace: when the submit frame was queued */
} rtask;

#define NBUCKETS 4096
#define SHARE_UNIT 1000 /* as resources.c: shares of a GPU in thousandths */
#define MAX_NODE_GPUS 64
/* A worker holds up to PIPELINE x slots tasks: `slots` running and the
 * next ones already there when they finish (no round trip between them). */
#define PIPELINE 2

/* An object the head fetched (its task record is gone) that payloads
 * still name: released on its owner when the last of them is done. */
typedef struct pin {
  struct pin *next;
  uint64_t id, size;
  int node, users;
} pin;

typedef struct sf__remote_ledger {
  pthread_mutex_t mu;
  pthread_cond_t cv;     /* head runners */
  int state;             /* 0 unknown, 1 active, -1 inactive */
  int n;                 /* nodes, head included */
  int *slots, *inflight;
  int *held;             /* slots held by actors placed there (ractor_head.c) */
  int gpu_state;         /* 0 not learned yet, 1 some node has a GPU, -1 none */
  int *gpus;             /* devices per node (at most MAX_NODE_GPUS) */
  int32_t (*gpu_used)[MAX_NODE_GPUS]; /* per node and device: thousandths taken */
  bool *alive;
  char **lost_why;
  rtask *back_head, *back_tail;
  rtask *local_head, *local_tail;
  rtask *buckets[NBUCKETS];
  rtask *fbuckets[NBUCKETS]; /* by future pointer (tasks not yet freed) */
  rtask *wait_head, *wait_tail; /* tasks waiting for future arguments */
  bool wait_dirty;           /* something may have made any of them ready */
  int32_t share_max;         /* the largest GPU share a backlog task asked for */
  struct pin *pins;          /* objects fetched by the head that payloads still name */
  char (*oaddr)[64];         /* per node: the object listener (port 0: none) */
  uint16_t *oport;
  int locality;              /* SFLOW_OBJECT_LOCALITY: 1 prefer the holder, 0 no, -1 avoid */
  uint64_t next_id;
  int runners, idle_runners;
} sf__remote_ledger;

/* The head's ledger (dispatch.c defines it); `R` in the four files. */
extern sf__remote_ledger sf__remote;
#define R sf__remote

/* Per-node frame buffers of one dispatch round. */
typedef struct outbox {
  sf__wbuf *wb;
  int n;
} outbox;

/* ------------------------------------------------------- dispatch.c */

/* Activates remote calls on the head at first use: learns the nodes,
 * starts the head runners (--head-runs-work), installs the node-loss
 * hook.  Whether this is an active --nodes run on the head. */
bool sf__remote_activate(void);
/* Task records by id and by future (those not yet freed). */
rtask *sf__rtask_find(uint64_t id);
rtask *sf__rtask_of(const sf_future *f);
void sf__rtask_unhash(rtask *t);
/* Outside R.mu: releasing futures may run sf__remote_future_gone. */
void sf__rtask_free(rtask *t);
/* Rejects t's future with "task 'x' failed after N attempts: cause". */
void sf__rtask_fail(rtask *t, const char *cause);
/* Back to waiting (future arguments) or to the backlog. */
void sf__rtask_requeue_locked(rtask *t, bool front, outbox *ob);
/* Completes (or retries) a worker node's task from its answer. */
void sf__rtask_finish(int node, rtask *t, int status, const uint8_t *p, size_t n,
                      const char *out, size_t on, bool slot);
/* Hands backlog entries to nodes with free slots; sends after R.mu. */
void sf__remote_dispatch_locked(outbox *ob);
void sf__outbox_send(outbox *ob);

/* ------------------------------------------------------ placement.c */

/* The node for backlog task t: near its inputs, else the most free. */
int sf__remote_place_near_locked(const rtask *t);
/* The node where h's share fits best (taken there), or -1. */
int sf__remote_place_gpu_locked(sf__gpu_hold *h, bool head_ok, bool actor, int need);
/* Gives h's share back to node i (once; a no-op without one). */
void sf__remote_gpu_give_locked(int i, sf__gpu_hold *h);
/* Each node's GPUs, learned at the first @gpus call: whether some has one. */
bool sf__remote_gpus_learn(void);
/* @gpus(gpus) in thousandths, clamped to what the largest node has. */
int32_t sf__remote_share_of(double gpus);

/* --------------------------------------------------- objects_head.c */

/* An object frame for node (a fetch from offset, or a release when
 * offset == total) into the outbox. */
void sf__obj_encode(outbox *ob, int node, uint64_t id, uint64_t offset, uint64_t total);
/* t's payload no longer names its objects; or node answered for t. */
void sf__refs_drop_locked(rtask *t, outbox *ob);
void sf__refs_done_locked(int node, rtask *t, outbox *ob);
/* Head, control thread: worker node holds t's result (status 2), or
 * could not fetch one of t's inputs (status 3). */
void sf__obj_start(int node, rtask *t, const sf__frame *fr);
void sf__obj_input_lost(int node, rtask *t, const sf__frame *fr);

#endif
