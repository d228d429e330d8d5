/*
 * taskmap.c — std.data's map: a task over every element of an array, with
 * at most `in_flight` calls running at once.
 *
 * `data.map(tokenize, shards, in_flight = 4)` is the streaming step of
 * batch inference and data preparation: each element is usually a shard (a
 * file path, a range of rows) and each call loads, transforms and writes
 * it.  Key design choice: the window, not the input, bounds memory.  A
 * call is submitted only when one of the window's calls has been
 * collected, so however large the data set, no more than in_flight shards
 * are loaded at once (backpressure), and the results array is the only
 * thing that grows with it.  Calls are ordinary task calls (sf_task_call),
 * so they are journaled, retried, placed on other nodes and resumed like
 * any other; in order (`ordered`), collection follows submission and the
 * result is reproducible run after run.  Unordered, a slot is refilled as
 * soon as any call finishes, so one slow shard does not idle the others;
 * the results then come in the order the calls finished.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sched.h"

/* Shared by the caller and the completion callbacks of its pending calls
 * (which may run after the caller left on an error): counted. */
typedef struct {
  _Atomic uint32_t word; /* bit 0: a call finished since last looked; bit 1: caller sleeps */
  _Atomic int64_t refs;
} done_flag;

typedef struct {
  sf__fwaiter w;
  done_flag *flag;
} done_waiter;

static void flag_put(done_flag *f) {
  if (atomic_fetch_sub(&f->refs, 1) == 1)
    sf_free(f);
}

static void on_done(sf__fwaiter *w, bool done) {
  (void)done;
  done_waiter *dw = (done_waiter *)w;
  done_flag *f = dw->flag;
  if (atomic_fetch_or(&f->word, 1u) & 2u)
    sf__futex_wake(&f->word, 1);
  flag_put(f);
  sf_free(dw);
}

typedef struct {
  const sf_task_desc *task;
  sf_array *xs, *out;
  sf_future **win; /* in_flight slots; NULL: free */
  int64_t *idx;    /* the element each slot's call is for */
  int64_t k, next, collected;
  done_flag *flag; /* unordered only */
  const sf_loc *loc;
} map_run;

/* Submits the call for element next into slot s. */
static void submit(map_run *m, int64_t s) {
  const sf_type *args = m->task->args;
  void *blk = sf_alloc((size_t)(args->size > 0 ? args->size : 1));
  memset(blk, 0, (size_t)args->size);
  void *field = (char *)blk + args->fields[0].offset;
  memcpy(field, sf__array_at(m->xs, m->next), (size_t)m->xs->elem->size);
  sf_value_retain(m->xs->elem, field); /* the call owns its argument */
  m->win[s] = sf_task_call(m->task, blk, m->loc);
  sf_free(blk);
  m->idx[s] = m->next++;
  if (m->flag) {
    done_waiter *w = sf_alloc(sizeof *w);
    w->w.fn = on_done;
    w->flag = m->flag;
    atomic_fetch_add(&m->flag->refs, 1);
    if (!sf__future_notify(m->win[s], &w->w)) {
      /* Already finished: no callback will come. */
      atomic_fetch_or(&m->flag->word, 1u);
      atomic_fetch_sub(&m->flag->refs, 1);
      sf_free(w);
    }
  }
}

/* Releases everything the run holds, for an error. */
static void abandon(map_run *m) {
  for (int64_t s = 0; s < m->k; s++)
    if (m->win[s])
      sf_release(m->win[s]);
  sf_release(m->out);
}

/* Collects slot s's result into the next place of out (ordered: the
 * element's own place; unordered: the next in finishing order). */
static void collect(map_run *m, int64_t s) {
  char err[1024];
  int64_t at = m->flag ? m->collected : m->idx[s];
  if (!sf__future_wait_result(m->win[s], sf__array_at(m->out, at), err, sizeof err)) {
    int64_t i = m->idx[s];
    int64_t n = m->xs->len;
    char name[256];
    snprintf(name, sizeof name, "%s", m->task->name);
    if (m->flag)
      flag_put(m->flag);
    abandon(m);
    sf_free(m->win);
    sf_free(m->idx);
    sf_runtime_error(m->loc, "data.map: the call of task '%s' on element %lld of %lld failed: %s", name,
                     (long long)i, (long long)n, err);
  }
  sf_release(m->win[s]);
  m->win[s] = NULL;
  m->collected++;
}

/* A slot whose call finished, or -1. */
static int64_t finished_slot(map_run *m) {
  for (int64_t s = 0; s < m->k; s++)
    if (m->win[s] && sf__future_ready(m->win[s]))
      return s;
  return -1;
}

static int64_t any_finished(map_run *m) {
  for (;;) {
    int64_t s = finished_slot(m);
    if (s >= 0)
      return s;
    /* Clear the mark, look once more (a call that finished in between set
     * it), then sleep until a callback marks it again. */
    atomic_fetch_and(&m->flag->word, ~1u);
    if ((s = finished_slot(m)) >= 0)
      return s;
    /* Not helping: a queued call run here would hold this thread until
     * it ends, which is exactly the wait for the slowest that unordered
     * collection avoids; a spare pool thread takes this one's place. */
    atomic_fetch_or(&m->flag->word, 2u);
    sf__sched_block_begin();
    sf__sched_wait(&m->flag->word, 1u, 2u, false);
    sf__sched_block_end();
    atomic_fetch_and(&m->flag->word, ~2u);
  }
}

sf_array *sf_std_data_map(int64_t f, sf_array *xs, int64_t in_flight, bool ordered,
                          const sf_type *T, const sf_type *R, const sf_loc *loc) {
  (void)T;
  if (f <= 0 || f >= sf__nfns)
    sf_runtime_error(loc, "data.map: the function value was never assigned");
  const sf_task_desc *task = sf__fn_tasks ? sf__fn_tasks[f] : NULL;
  if (!task)
    sf_runtime_error(loc, "data.map: '%s' is a function, not a task (data.map runs each call as a task)",
                     sf__fn_names[f]);
  if (in_flight < 1)
    sf_runtime_error(loc, "data.map: in_flight must be at least 1, found %lld", (long long)in_flight);
  if (!task->args || task->args->nfields != 1 || !task->result)
    sf_runtime_error(loc, "data.map: task '%s' must take one argument and return a value", task->name);
  int64_t n = xs->len;
  sf_array_host(xs);
  map_run m = {.task = task, .xs = xs, .out = sf_array_new(R, n, loc), .loc = loc};
  m.k = in_flight < n ? in_flight : (n > 0 ? n : 1);
  m.win = sf__alloc_n((size_t)m.k, sizeof *m.win);
  memset(m.win, 0, (size_t)m.k * sizeof *m.win);
  m.idx = sf__alloc_n((size_t)m.k, sizeof *m.idx);
  if (!ordered) {
    m.flag = sf_alloc(sizeof *m.flag);
    atomic_init(&m.flag->word, 0);
    atomic_init(&m.flag->refs, 1);
  }
  for (int64_t s = 0; s < m.k && m.next < n; s++)
    submit(&m, s);
  while (m.collected < n) {
    int64_t s = ordered ? m.collected % m.k : any_finished(&m);
    collect(&m, s);
    if (m.next < n)
      submit(&m, s);
  }
  if (m.flag)
    flag_put(m.flag);
  sf_free(m.win);
  sf_free(m.idx);
  return m.out;
}
