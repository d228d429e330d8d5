/*
 * task.c — tasks, actors, groups and futures: the simple, synchronous
 * version.
 *
 * Calling a task runs it at once on the caller's thread and returns a
 * future that already holds the result; an actor's method runs at once on
 * the caller's thread, one at a time by construction.  Key design choice:
 * generated code reaches all of this only through the descriptors and
 * entry points of sflow.h (thunks plus argument blocks whose ownership is
 * moved in), so a later thread-pool or distributed scheduler replaces this
 * file's internals without any change to the compiler.
 *
 * Collectives need members that run concurrently; until the scheduler
 * lands they work for a group of one (or an actor spawned alone) and are a
 * runtime error otherwise.
 */
#include <inttypes.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------ futures */

struct sf_future {
  sf_obj hdr;
  const sf_type *type; /* NULL: no value */
  int64_t pad;         /* keeps value 16-byte aligned */
  _Alignas(16) unsigned char value[];
};

struct sf_actor {
  sf_obj hdr;
  const sf_actor_desc *desc;
  int64_t rank, size;
  void *state; /* desc->state->size bytes */
};

struct sf_group {
  sf_obj hdr;
  const sf_actor_desc *desc;
  int64_t n;
  int64_t next; /* round robin for g.any */
  sf_actor **members;
};

/* The actor whose method (or init) runs on this thread, for group_rank(). */
static _Thread_local sf_actor *current_actor;

static int32_t type_size(const sf_type *t) { return t ? t->size : 0; }

static void future_dtor(sf_obj *o) {
  sf_future *f = (sf_future *)o;
  if (f->type)
    sf_value_release(f->type, f->value);
  sf_free(f);
}

static void actor_dtor(sf_obj *o) {
  sf_actor *a = (sf_actor *)o;
  sf_value_release(a->desc->state, a->state);
  sf_free(a->state);
  sf_free(a);
}

static void group_dtor(sf_obj *o) {
  sf_group *g = (sf_group *)o;
  for (int64_t i = 0; i < g->n; i++)
    sf_release(g->members[i]);
  sf_free(g->members);
  sf_free(g);
}

__attribute__((constructor)) static void task_init(void) {
  sf__obj_dtor[SF_OBJ_FUTURE] = future_dtor;
  sf__obj_dtor[SF_OBJ_ACTOR] = actor_dtor;
  sf__obj_dtor[SF_OBJ_GROUP] = group_dtor;
}

static sf_future *future_new(const sf_type *t) {
  sf_future *f = sf_alloc(sizeof *f + (size_t)type_size(t));
  f->hdr = (sf_obj){1, SF_OBJ_FUTURE, 0};
  f->type = t && t->kind != SF_VOID ? t : NULL;
  if (f->type)
    memset(f->value, 0, (size_t)t->size);
  return f;
}

sf_future *sf_future_done(const sf_type *t, void *value) {
  sf_future *f = future_new(t);
  if (f->type && value)
    memcpy(f->value, value, (size_t)t->size);
  return f;
}

void sf_future_get(sf_future *f, void *out, const sf_loc *loc) {
  if (!f)
    sf_runtime_error(loc, "await on a future that was never set");
  if (!f->type || !out)
    return;
  memcpy(out, f->value, (size_t)f->type->size);
  sf_value_retain(f->type, out);
}

sf_array *sf_future_get_all(sf_array *futures, const sf_type *t, const sf_loc *loc) {
  int64_t n = futures ? futures->len : 0;
  sf_array *out = sf_array_new(t, n, loc);
  for (int64_t i = 0; i < n; i++)
    sf_future_get(((sf_future **)futures->data)[i], sf__array_at(out, i), loc);
  return out;
}

/* -------------------------------------------------------------- tasks */

/* A result buffer on the stack for small results, the heap for big ones. */
#define SMALL_RESULT 256

sf_future *sf_task_call(const sf_task_desc *d, void *args, const sf_loc *loc) {
  (void)loc;
  int32_t size = type_size(d->result);
  _Alignas(16) unsigned char small[SMALL_RESULT];
  void *res = size <= SMALL_RESULT ? small : sf_alloc((size_t)size);
  memset(res, 0, (size_t)size);
  sf_actor *saved = current_actor;
  current_actor = NULL; /* a task is not inside any actor */
  d->thunk(args, res);
  current_actor = saved;
  sf_value_release(d->args, args);
  sf_future *f = sf_future_done(d->result, res);
  if (res != small)
    sf_free(res);
  return f;
}

/* ------------------------------------------------------------- actors */

/* Runs method m on actor a with args (borrowed), result into res. */
static void run_method(sf_actor *a, const sf_method_desc *m, void *args, void *res) {
  sf_actor *saved = current_actor;
  current_actor = a;
  m->thunk(a->state, args, res);
  current_actor = saved;
}

static sf_actor *actor_new(const sf_actor_desc *d, int64_t rank, int64_t size, void *args) {
  sf_actor *a = sf_alloc(sizeof *a);
  *a = (sf_actor){.hdr = {1, SF_OBJ_ACTOR, 0}, .desc = d, .rank = rank, .size = size};
  a->state = sf_alloc((size_t)type_size(d->state));
  memset(a->state, 0, (size_t)type_size(d->state));
  if (d->init)
    run_method(a, d->init, args, NULL);
  return a;
}

sf_actor *sf_actor_spawn(const sf_actor_desc *d, void *args, const sf_loc *loc) {
  (void)loc;
  sf_actor *a = actor_new(d, 0, 1, args);
  sf_value_release(d->init ? d->init->args : NULL, args);
  return a;
}

sf_group *sf_group_spawn(const sf_actor_desc *d, int64_t n, void *args, const sf_loc *loc) {
  if (n < 0)
    sf_runtime_error(loc, "spawn: group size must not be negative, got %" PRId64, n);
  sf_group *g = sf_alloc(sizeof *g);
  *g = (sf_group){.hdr = {1, SF_OBJ_GROUP, 0}, .desc = d, .n = n};
  g->members = sf__alloc_n((size_t)(n ? n : 1), sizeof *g->members);
  for (int64_t i = 0; i < n; i++)
    g->members[i] = actor_new(d, i, n, args);
  sf_value_release(d->init ? d->init->args : NULL, args);
  return g;
}

/* One call into a method, the result wrapped in a future. */
static sf_future *call_one(sf_actor *a, const sf_method_desc *m, void *args) {
  int32_t size = type_size(m->result);
  _Alignas(16) unsigned char small[SMALL_RESULT];
  void *res = size <= SMALL_RESULT ? small : sf_alloc((size_t)size);
  memset(res, 0, (size_t)size);
  run_method(a, m, args, res);
  sf_future *f = sf_future_done(m->result, res);
  if (res != small)
    sf_free(res);
  return f;
}

sf_future *sf_actor_call(sf_actor *a, const sf_method_desc *m, void *args, const sf_loc *loc) {
  if (!a)
    sf_runtime_error(loc, "call of '%s' on an actor that was never spawned", m->name);
  sf_future *f = call_one(a, m, args);
  sf_value_release(m->args, args);
  return f;
}

sf_future *sf_group_call_all(sf_group *g, const sf_method_desc *m, void *args,
                             const sf_loc *loc) {
  if (!g)
    sf_runtime_error(loc, "call of '%s' on a group that was never spawned", m->name);
  sf_future *f;
  if (m->result && m->result->kind != SF_VOID) {
    sf_array *out = sf_array_new(m->result, g->n, loc);
    for (int64_t i = 0; i < g->n; i++)
      run_method(g->members[i], m, args, sf__array_at(out, i));
    f = sf_future_done(sf__array_type(m->result), &out);
  } else {
    for (int64_t i = 0; i < g->n; i++)
      run_method(g->members[i], m, args, NULL);
    f = sf_future_done(NULL, NULL);
  }
  sf_value_release(m->args, args);
  return f;
}

sf_future *sf_group_call_any(sf_group *g, const sf_method_desc *m, void *args,
                             const sf_loc *loc) {
  if (!g || g->n == 0)
    sf_runtime_error(loc, "call of '%s' on an empty group", m->name);
  int64_t i = __atomic_fetch_add(&g->next, 1, __ATOMIC_RELAXED) % g->n;
  sf_future *f = call_one(g->members[i], m, args);
  sf_value_release(m->args, args);
  return f;
}

sf_future *sf_group_call_one(sf_group *g, int64_t i, const sf_method_desc *m, void *args,
                             const sf_loc *loc) {
  int64_t n = g ? g->n : 0;
  if ((uint64_t)i >= (uint64_t)n) {
    sf_value_release(m->args, args);
    sf_index_fail(i, n, loc);
  }
  sf_future *f = call_one(g->members[i], m, args);
  sf_value_release(m->args, args);
  return f;
}

/* -------------------------------------------------------- collectives */

int64_t sf_group_rank(void) { return current_actor ? current_actor->rank : 0; }
int64_t sf_group_size(void) { return current_actor ? current_actor->size : 1; }

static void need_single(const char *what, const sf_loc *loc) {
  if (sf_group_size() > 1)
    sf_runtime_error(loc, "%s over a group of %" PRId64
                     " is not supported before the task runtime lands", what, sf_group_size());
}

/* With one member a sum, a mean and a broadcast leave the array as it is. */
void sf_allreduce_sum(sf_array *a, const sf_loc *loc) { (void)a; need_single("allreduce_sum", loc); }
void sf_allreduce_mean(sf_array *a, const sf_loc *loc) { (void)a; need_single("allreduce_mean", loc); }

void sf_broadcast(sf_array *a, int64_t root, const sf_loc *loc) {
  (void)a;
  need_single("broadcast", loc);
  if (root != 0)
    sf_runtime_error(loc, "broadcast: root %" PRId64 " is not a member of a group of 1", root);
}

sf_array *sf_allgather(sf_array *a, const sf_loc *loc) {
  need_single("allgather", loc);
  /* The gather of one member is a copy of its array. */
  const sf_type *elem = a ? a->elem : &sf_type_f32;
  int64_t n = a ? a->len : 0;
  sf_array *out = sf_array_new(elem, n, loc);
  if (n) {
    memcpy(out->data, a->data, (size_t)n * (size_t)elem->size);
    if (sf__type_has_refs(elem))
      for (int64_t i = 0; i < n; i++)
        sf_value_retain(elem, sf__array_at(out, i));
  }
  return out;
}

void sf_barrier(const sf_loc *loc) { need_single("barrier", loc); }
