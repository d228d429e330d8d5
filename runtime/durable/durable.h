/*
 * durable.h — the durability layer's internal names (prefix `sf__`): the
 * journal behind --resume (journal.c) and actor checkpoints
 * (checkpoint.c).  Above sched.h, below cluster.h (docs/architecture.md,
 * "Runtime layers"; the format and the rules in docs/runtime.md,
 * "Durable resume").
 */
#ifndef SF_DURABLE_H
#define SF_DURABLE_H

#include "sched.h"

/* --------------------------------------------------------- journal.c */


int64_t sf__journal_next(void);  /* sequence number of main's next call, or -1 */
int64_t sf__spawn_id(void);      /* main's spawn counter (-1 off main) */
sf_future *sf__journal_task_replay(int64_t seq, const sf_task_desc *d, const sf_loc *loc);
/* out[0..n): the lines the call printed (its capture, or as the head
 * printed another node's). */
void sf__journal_task_done(int64_t seq, const sf_task_desc *d, void *res, const char *out,
                           size_t n);
int sf__journal_call_mode(sf_actor *a, int64_t seq);
void sf__journal_call_result(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res);
void sf__journal_call_done(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res,
                           const char *out, size_t n);
int64_t sf__journal_route_any(int64_t seq, sf_actor **members, int64_t n, int64_t best);
/* now() (clock) or a random draw on main: replayed or recorded */
double sf__journal_value(double live, bool clock);
void sf__journal_begin(const sf_program *prog, sf_value *args);
/* Installs durability's hooks (main.c, before any thread): task.c's
 * sf__durable (journal and checkpoints) and the core's value tap of now()
 * and random draws (sf__journal_value). */
void sf__durable_install(void);
void sf__journal_end(bool success);
/* Where the journal stood when a checkpoint was written: the checkpoint
 * depends on every record before that point (docs/runtime.md, "Durable
 * resume"). */
typedef struct sf__jpos {
  uint64_t run;     /* the journal's run id, from its header (0: no journal) */
  uint64_t bytes;   /* its length then, header included (0: nothing yet) */
  uint64_t records; /* records before that point */
  uint32_t chain;   /* CRC-32C chained over the header and each record's frame */
} sf__jpos;
/* Synchronous, before a checkpoint: writes and syncs the journal and says
 * where it ends.  False if the journal has failed (the records the
 * checkpoint would hold are lost): then no checkpoint file is written. */
bool sf__journal_flush(sf__jpos *pos);
/* --resume: whether the loaded journal holds what pos depends on. */
enum { SF__JPOS_COVERED, SF__JPOS_OTHER_RUN, SF__JPOS_BEYOND, SF__JPOS_DIFFERS };
int sf__journal_covers(const sf__jpos *pos);
uint64_t sf__journal_records(void); /* records the loaded journal holds */
int sf__mkdirs(const char *path); /* mkdir -p; 0 on success */

/* ------------------------------------------------------ checkpoint.c */

/* --resume, before anything runs: every checkpoint checked against the
 * loaded journal.  False, with why[], when an actor has checkpoints but
 * the journal covers none of them (the journal lost synced records). */
bool sf__checkpoint_vet(const char *journal, char *why, size_t n);
bool sf__checkpoint_restore(sf_actor *a);
void sf__checkpoint_maybe(sf_actor *a, bool after_all);
/* Groups restore as a whole, at the newest g.all epoch every member has a
 * valid checkpoint for (planned once, at spawn, on --resume). */
void sf__checkpoint_plan_group(const sf_actor_desc *d, int64_t id, int64_t n);
int64_t sf__checkpoint_group_epoch(const sf_actor_desc *d, int64_t id);
void sf__checkpoint_clear(void);
/* Worker (ractor_worker.c): when set, checkpoints go to this hook instead of a
 * file; [p, p+n) is the serialized state, valid during the call. */
extern void (*sf__checkpoint_ship)(sf_actor *a, int64_t calls, int64_t epochs, const void *p,
                                   size_t n);
/* Head: writes a checkpoint a worker shipped, as the actor (d, spawn id,
 * rank) would have written it on one node. */
void sf__checkpoint_write_state(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t calls,
                                int64_t epochs, const void *p, size_t n);
void sf__checkpoint_finish(void); /* a successful end: clear, and write no more */
bool sf__fault(const char *point); /* SFLOW_FAULT fault injection, tests only */
int64_t sf__fault_value(const char *point); /* SFLOW_FAULT=point:N's N, else 0 */


#endif
