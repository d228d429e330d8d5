/*
 * objects_head.c — the object store of a --nodes run: large task results kept
 * by the worker that computed them, fetched by the head only when main
 * wants them, and by other workers directly from the owner.
 *
 * Key design choice: a large result never moves until someone wants its
 * bytes, and the head's task record (dispatch.c) decides how long the
 * worker keeps it: the object is released when that record goes (or,
 * while calls still name it, when the last of them is done).
 *
 * A worker keeps a result whose serialized form is over the threshold
 * (SFLOW_OBJECT_THRESHOLD bytes, default 1 MiB) in its object store and
 * answers with status 2: u64 object id (the task id) and u64 size.  The
 * head frees the task's slot at once and leaves the future pending; when
 * the value is first wanted (future.c: an await, or a task parked on it) it
 * asks the owner for the bytes (an empty object frame at offset 0),
 * receives them in order in object
 * frames of SF__OBJ_CHUNK bytes, materializes the value exactly as the inline
 * path would (same bytes, same decoder), and releases the object (an
 * empty object frame with offset == total).  Chunks arrive over the one
 * control connection, so they must come in order: any other offset, a
 * different total, or an empty chunk fails the attempt as a malformed
 * result (retried per @retry).  A lost owner re-runs the task while its
 * @retry budget lasts (lineage: the task record still holds its
 * arguments), else the task fails naming the lost result.  Other workers
 * fetch objects directly from the owner ("worker to worker objects").
 *
 * Ownership (objects).  A task record holds a reference to its future
 * (strong) while it waits, runs, or its held result is wanted or being
 * fetched; once the result is held and nothing awaits it, the record keeps
 * a weak pointer (strong = false), so main dropping its last reference
 * runs the future's destructor, which (FUT_HELD set) calls
 * sf__remote_future_gone: the record is freed and its owner releases the
 * object.  A call with future arguments keeps its argument block, and so a
 * reference to each future, until its record is freed: while a consumer
 * waits or runs, the future of each input (and so the input's record and
 * object) lives.  A held record keeps its own argument block too (lineage:
 * it can be re-run).  Anything that must turn a weak pointer strong does so
 * only while a reference is known to exist (the caller's in
 * sf__remote_demand, a consumer's argument block), or with
 * sf__future_try_retain, which fails once the count reached 0.  Besides,
 * `users` counts the payloads that name a held object; an object the head
 * fetched while payloads still name it is pinned (R.pins) and released on
 * its owner when the last of them is done.
 *
 * Failures (objects).  A lost owner re-runs its held results that can
 * still be wanted (lineage, within their @retry) or fails them naming the
 * loss.  A consumer whose fetch fails answers status 3: it waits again
 * without spending an attempt, avoiding that node, while the producer
 * re-runs (avoiding it too) or fails; a failed input reaches the consumer
 * as a failed future, so it fails as a local call awaiting it would.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote_internal.h"


/* ============================================================== head */

void sf__obj_encode(outbox *ob, int node, uint64_t id, uint64_t offset, uint64_t total) {
  if (node < 1 || node >= R.n || !R.alive[node])
    return;
  if (!ob->wb && !(ob->wb = calloc((size_t)R.n, sizeof *ob->wb)))
    return;
  sf__frame f = {.type = SF__F_OBJECT};
  f.u.object.object = id;
  f.u.object.offset = offset;
  f.u.object.total = total;
  sf__wire_encode(&ob->wb[node], &f);
}

static void obj_release_locked(outbox *ob, int node, uint64_t id, uint64_t size, const char *name) {
  sf__obj_encode(ob, node, id, size, size);
  if (sf__options.cluster_log)
    sf__notice("object %llu (task '%s', %llu bytes) released on node %d", (unsigned long long)id,
               name ? name : "?", (unsigned long long)size, node);
}

/* t's payload no longer names its objects (it ended, or is rebuilt). */
void sf__refs_drop_locked(rtask *t, outbox *ob) {
  for (int i = 0; i < t->nrefs; i++) {
    const objref *r = &t->refs[i];
    rtask *p = sf__rtask_find(r->id);
    if (p && p->held && p->node == r->node && p->obj_total == r->size) {
      p->users--;
      continue;
    }
    for (pin **pp = &R.pins; *pp; pp = &(*pp)->next)
      if ((*pp)->id == r->id && (*pp)->node == r->node) {
        pin *q = *pp;
        if (--q->users == 0) {
          *pp = q->next;
          obj_release_locked(ob, q->node, q->id, q->size, r->name);
          free(q);
        }
        break;
      }
  }
  free(t->refs);
  t->refs = NULL;
  t->nrefs = 0;
  t->pref = -1;
}

/* Worker node answered for t: its inputs were fetched (or used in place). */
void sf__refs_done_locked(int node, rtask *t, outbox *ob) {
  for (int i = 0; i < t->nrefs; i++) {
    const objref *r = &t->refs[i];
    if (r->node != node) {
      atomic_fetch_add(&sf__stats.objects_moved, 1);
      atomic_fetch_add(&sf__stats.moved_bytes, (int64_t)r->size);
    }
    if (!sf__options.cluster_log)
      continue;
    if (r->node == node)
      sf__notice("object %llu (task '%s', %llu bytes) used in place on node %d",
                 (unsigned long long)r->id, r->name, (unsigned long long)r->size, node);
    else
      sf__notice("object %llu (task '%s', %llu bytes) moved from node %d to node %d",
                 (unsigned long long)r->id, r->name, (unsigned long long)r->size, r->node, node);
  }
  sf__refs_drop_locked(t, ob);
}

static void obj_send(int node, uint64_t id, uint64_t offset, uint64_t total) {
  sf__frame f = {.type = SF__F_OBJECT};
  f.u.object.object = id;
  f.u.object.offset = offset;
  f.u.object.total = total;
  sf__wbuf b = {0};
  sf__wire_encode(&b, &f);
  if (b.n)
    (void)sf__cluster_send(node, b.p, b.n); /* a lost node: its hook requeues */
  sf__wbuf_free(&b);
}

void sf__obj_start(int node, rtask *t, const sf__frame *fr) {
  uint64_t id, total;
  memcpy(&id, fr->u.task_result.value.p, 8); /* 16 bytes: wire.c checked */
  memcpy(&total, fr->u.task_result.value.p + 8, 8);
  if (id != t->id || total == 0 || total > SF__OBJ_MAX) {
    char cause[128];
    snprintf(cause, sizeof cause, "node %d sent a bad object reference (%llu bytes)", node,
             (unsigned long long)total);
    sf__rtask_finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, true);
    return;
  }
  char *out = NULL; /* kept until the value is fetched */
  size_t on = fr->u.task_result.output.n;
  if (on && (out = malloc(on)))
    memcpy(out, fr->u.task_result.output.p, on);
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  R.inflight[node]--; /* the worker is done with it: its slot is free */
  sf__refs_done_locked(node, t, &ob);
  sf__remote_gpu_give_locked(t->node, &t->gpu);
  t->held = true;
  R.wait_dirty = true; /* calls waiting on it may go now */
  t->users = 0;
  free(t->out);
  t->out = out;
  t->out_n = out ? on : 0;
  t->obj_total = total;
  t->obj_got = 0;
  t->obj_chunks = 0;
  pthread_mutex_unlock(&R.mu);
  if (sf__options.cluster_log)
    sf__notice("task '%s' result (%llu bytes) held by node %d as object %llu", t->d->name,
               (unsigned long long)total, node, (unsigned long long)id);
  /* Wanted already (main awaits it, or a re-run of a wanted one): fetch
   * now; else sf__remote_demand does when it is.  Not wanted: the record
   * keeps only a weak pointer, so that main dropping its last reference
   * lets the object go (sf__remote_future_gone).  Calls waiting for it as
   * an argument may go now. */
  sf_future *f = t->f;
  bool wanted = sf__future_held(f);
  pthread_mutex_lock(&R.mu);
  bool go = (wanted || t->wanted) && !t->fetching;
  t->fetching |= go;
  bool weak = !t->fetching && t->strong;
  if (weak)
    t->strong = false;
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  if (go)
    obj_send(node, id, 0, total); /* fetch it all */
  if (weak)
    sf_release(f); /* t may be gone after this */
}

/* Node answered that an input object of t could not be fetched (its
 * owner lost, or not holding it): t goes back to waiting, its attempt
 * not charged; the object's task re-runs within its @retry (lineage),
 * or fails naming the lost object, and then t runs with that failure as
 * its argument (it fails as a local call awaiting a failed future does). */
void sf__obj_input_lost(int node, rtask *t, const sf__frame *fr) {
  uint64_t id;
  memcpy(&id, fr->u.task_result.value.p, 8); /* at least 8 bytes: wire.c checked */
  char why[300];
  snprintf(why, sizeof why, "%.*s", (int)(fr->u.task_result.value.n - 8),
           (const char *)fr->u.task_result.value.p + 8);
  outbox ob = {0};
  rtask *failed = NULL;
  char cause[700] = "";
  pthread_mutex_lock(&R.mu);
  int owner = -1;
  for (int i = 0; i < t->nrefs; i++)
    if (t->refs[i].id == id)
      owner = t->refs[i].node;
  if (owner < 0) { /* not an input of t's: an ordinary failure, charged */
    pthread_mutex_unlock(&R.mu);
    snprintf(cause, sizeof cause, "node %d reported object %llu lost, which is not an input",
             node, (unsigned long long)id);
    sf__rtask_finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, true);
    return;
  }
  rtask *p = sf__rtask_find(id);
  R.inflight[node]--;
  sf__remote_gpu_give_locked(t->node, &t->gpu);
  sf__rtask_requeue_locked(t, true, &ob); /* not an attempt of t's */
  t->avoid = owner;
  if (p && p->held && p->node == owner) {
    /* Lost there: forget it (release it should the owner still run). */
    sf__obj_encode(&ob, owner, id, p->obj_total, p->obj_total);
    p->held = p->fetching = false;
    p->users = 0;
    p->obj_chunks = -1;
    if (!p->strong) { /* t's argument block holds a reference */
      sf_retain(p->f);
      p->strong = true;
    }
    snprintf(cause, sizeof cause,
             "its result (object %llu, %llu bytes on node %d) could not be fetched by node %d: %s",
             (unsigned long long)id, (unsigned long long)p->obj_total, owner, node, why);
    if (sf__options.cluster_log)
      sf__notice("object %llu (task '%s') lost on node %d (node %d asked for it: %s)%s",
                 (unsigned long long)id, p->d->name, owner, node, why,
                 p->attempt < p->d->retry ? "; re-running the task" : "");
    if (p->attempt < p->d->retry) {
      p->attempt++;
      p->avoid = owner;
      atomic_fetch_add(&sf__stats.retries, 1);
      sf__rtask_requeue_locked(p, true, &ob);
    } else {
      sf__rtask_unhash(p);
      sf__refs_drop_locked(p, &ob);
      p->node = -1;
      failed = p;
    }
  }
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  if (failed)
    sf__rtask_fail(failed, cause); /* t, waiting on it, is told */
}

void sf__remote_demand(sf_future *f) {
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? sf__rtask_of(f) : NULL;
  if (t && !t->strong) { /* the caller holds a reference */
    sf_retain(f);
    t->strong = true;
  }
  bool go = t && t->held && !t->fetching;
  int node = t ? t->node : 0;
  uint64_t id = t ? t->id : 0, total = t ? t->obj_total : 0;
  if (t) { /* not held now (a re-run): sf__obj_start fetches when it is */
    t->wanted = true;
    t->fetching |= go;
  }
  pthread_mutex_unlock(&R.mu);
  if (go)
    obj_send(node, id, 0, total);
}

void sf__remote_on_object(int node, const sf__frame *fr) {
  uint64_t id = fr->u.object.object;
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? sf__rtask_find(id) : NULL;
  if (!t || !t->fetching || t->node != node) {
    pthread_mutex_unlock(&R.mu);
    sf__notice("node %d sent a chunk of unknown object %llu (ignored)", node,
               (unsigned long long)id);
    return;
  }
  const sf__bytes *d = &fr->u.object.data;
  const char *bad = NULL;
  if (!fr->u.object.total)
    bad = "no longer holds";
  else if (fr->u.object.total != t->obj_total || fr->u.object.offset != t->obj_got || !d->n)
    bad = "sent a malformed chunk of";
  else if (!t->obj && !(t->obj = malloc(t->obj_total)))
    bad = "sent more than the head has memory for:";
  if (!bad) {
    memcpy(t->obj + t->obj_got, d->p, d->n); /* wire.c: offset + n <= total */
    t->obj_got += d->n;
    t->obj_chunks++;
  }
  bool done = bad || t->obj_got == t->obj_total;
  pin *q = NULL;
  if (done && !bad && t->users > 0 && (q = malloc(sizeof *q))) {
    /* Payloads of calls not yet done name it: released when they are. */
    *q = (pin){R.pins, id, t->obj_total, node, t->users};
    R.pins = q;
  }
  pthread_mutex_unlock(&R.mu);
  if (!done)
    return;
  if (!q) {
    obj_send(node, id, t->obj_total, t->obj_total); /* release */
    if (sf__options.cluster_log && !bad)
      sf__notice("object %llu (task '%s', %llu bytes) released on node %d", (unsigned long long)id,
                 t->d->name, (unsigned long long)t->obj_total, node);
  }
  if (bad) {
    char cause[160];
    snprintf(cause, sizeof cause, "node %d %s object %llu", node, bad, (unsigned long long)id);
    sf__rtask_finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, false);
    return;
  }
  if (sf__options.cluster_log)
    sf__notice("object %llu (task '%s', %llu bytes) fetched from node %d in %d %s",
               (unsigned long long)id, t->d->name, (unsigned long long)t->obj_total, node,
               t->obj_chunks, sf__plural(t->obj_chunks, "chunk", "chunks"));
  atomic_fetch_add(&sf__stats.objects_fetched, 1);
  atomic_fetch_add(&sf__stats.object_bytes, t->obj_total);
  sf__rtask_finish(node, t, 0, t->obj, t->obj_total, t->out, t->out_n, false);
}

/* The last reference to held future f went (future.c, its destructor): no
 * call here can want the value any more, and no call waiting or running
 * names it (they hold references to f), so its owner drops it. */
void sf__remote_future_gone(sf_future *f) {
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? sf__rtask_of(f) : NULL;
  if (t && (t->strong || !t->held))
    t = NULL; /* not this record's (it holds a reference while it is not held) */
  if (t) {
    sf__rtask_unhash(t);
    if (t->users > 0) { /* not expected: payloads hold f; kept for them */
      pin *q = malloc(sizeof *q);
      if (q) {
        *q = (pin){R.pins, t->id, t->obj_total, t->node, t->users};
        R.pins = q;
      }
    } else {
      obj_release_locked(&ob, t->node, t->id, t->obj_total, t->d->name);
    }
    sf__refs_drop_locked(t, &ob);
  }
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  if (t)
    sf__rtask_free(t); /* weak: f is not released again */
}
