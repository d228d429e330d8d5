/*
 * stream.c — request-level answers for continuous batching: serve.take
 * moves requests from a replica's queue into its running set, each with
 * an id, and serve.answer, serve.send (server-sent events), serve.finish
 * and serve.cancelled address one of them by id, in any order.
 *
 * Key design choice: a request taken by take is held by the replica's
 * running set (one hold) and by its connection's thread (the other), as
 * next's batches are; the first send turns the answer into an event
 * stream: the connection's thread, woken from its wait, queues a
 * libmicrohttpd response whose reader (sf__stream_read, on that same
 * thread: thread per connection) sleeps on the request's condition until
 * an event, the finish or the client's going away.  So a stream is a
 * byte buffer under the request's mutex, written by the replica, drained
 * by the connection; the response's release passes the connection's hold
 * on, so whichever of the replica and the connection lets go last frees it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include <poll.h>

#include "serve.h"

/* Ids over every endpoint of the process: an id names one request. */
static _Atomic int64_t next_id = 1;

/* ------------------------------------------------------------ helpers */

/* Request id of replica r's running set, with e->mu held; a runtime error
 * naming the id when r holds no such request. */
static sf__sreq *held(sf__endpoint *e, int64_t r, int64_t id, const char *what, bool unlink,
                      const sf_loc *loc) {
  sf__replica *p = sf__replica_at(e, r, what, loc);
  sf__sreq *prev = NULL, *q = p->running;
  while (q && q->id != id) {
    prev = q;
    q = q->next;
  }
  if (!q) {
    pthread_mutex_unlock(&e->mu);
    sf__replica_misused(e, r);
    if (id <= 0 || id >= atomic_load(&next_id))
      sf_runtime_error(loc, "serve.%s: no request %" PRId64 " was ever taken (ids come from "
                       "serve.take)", what, id);
    sf_runtime_error(loc, "serve.%s: request %" PRId64 " is not held by replica %" PRId64
                     " of %s (%s): it was already answered or finished, or another replica "
                     "took it", what, id, r, e->route->path, e->version);
  }
  if (unlink) {
    if (prev)
      prev->next = q->next;
    else
      p->running = q->next;
    q->next = NULL;
    p->nrunning--;
    e->answered++;
  }
  return q;
}

/* After a request left the running set: the error hook is disarmed when
 * the replica holds nothing more. */
static void left(sf__endpoint *e, int64_t r) {
  bool none = e->reps[r]->nrunning == 0;
  pthread_mutex_unlock(&e->mu);
  if (none)
    sf__replica_disarm();
}

static void drop_copy(sf__endpoint *e, sf__sreq *q) {
  if (q->copy) {
    sf_value_release(e->T, q->copy);
    sf_free(q->copy);
    q->copy = NULL;
  }
}

/* With q->mu held: the answer becomes an event stream (counted open on
 * its route until the response is released, sf__stream_free). */
static void begin_stream(sf__sreq *q) {
  if (q->streaming)
    return;
  q->streaming = true;
  sf__route *rt = q->rt;
  double first = (double)(sf__mono_ns() - q->arrived_ns) * 1e-9;
  pthread_mutex_lock(&rt->mu);
  rt->streams_open++;
  rt->first_hist[sf__lat_bucket(first)]++;
  rt->first_count++;
  rt->first_sum += first;
  pthread_mutex_unlock(&rt->mu);
}

/* One event's bytes: each line of data as a "data: " line, then a blank
 * line (the SSE format: a newline in data would end the field). */
static void put_event(sf__buf *b, const char *data, size_t len) {
  for (size_t i = 0;;) {
    size_t j = i;
    while (j < len && data[j] != '\n')
      j++;
    size_t n = j - i;
    if (n && data[i + n - 1] == '\r')
      n--;
    sf__buf_put(b, "data: ", 6);
    sf__buf_put(b, data + i, n);
    sf__buf_put(b, "\n", 1);
    if (j >= len)
      break;
    i = j + 1;
  }
  sf__buf_put(b, "\n", 1);
}

/* ---------------------------------------------------------------- take */

/* The offsets of J's fields id (i64) and req (the route's type); J must
 * have these two and no other. */
static void job_fields(sf__endpoint *e, const sf_type *J, int32_t *id_off, int32_t *req_off,
                       const sf_loc *loc) {
  *id_off = *req_off = -1;
  if (J->kind == SF_STRUCT && J->nfields == 2)
    for (int32_t i = 0; i < 2; i++) {
      const sf_field *f = &J->fields[i];
      if (!strcmp(f->name, "id") && f->type->kind == SF_I64)
        *id_off = f->offset;
      else if (!strcmp(f->name, "req") && sf__same_type(f->type, e->T))
        *req_off = f->offset;
    }
  if (*id_off < 0 || *req_off < 0)
    sf_runtime_error(loc, "serve.take: %s must be a struct of two fields, id: i64 and req: %s "
                     "(the request type of %s (%s))", J->name ? J->name : "the type", e->T->name,
                     e->route->path, e->version);
}

sf_array *sf__endpoint_take(sf__endpoint *e, int64_t r, const sf_type *J, int64_t max,
                            double timeout_ms, const sf_loc *loc) {
  int32_t id_off, req_off;
  job_fields(e, J, &id_off, &req_off, loc);
  if (max < 0)
    sf_runtime_error(loc, "serve.take: max %" PRId64 " is negative", max);
  pthread_mutex_lock(&e->mu);
  sf__replica *p = sf__replica_at(e, r, "take", loc);
  bool blocked = false;
  int64_t give_up = timeout_ms > 0 ? sf__mono_ns() + (int64_t)(timeout_ms * 1e6)
                    : timeout_ms == 0 ? 0 : INT64_MAX;
  /* Nothing to take (an empty queue, or max 0): wait; with max 0 only
   * for a timeout_ms > 0, which paces a loop at its capacity. */
  if (max == 0 && give_up == INT64_MAX)
    give_up = 0;
  while (max == 0 || p->qlen == 0) {
    if (e->srv->state == SF__CLOSED || p->removed || sf__mono_ns() >= give_up)
      break;
    if (!blocked) {
      sf__sched_block_begin();
      blocked = true;
    }
    if (give_up == INT64_MAX) {
      pthread_cond_wait(&p->cv, &e->mu);
    } else {
      struct timespec ts = {.tv_sec = give_up / 1000000000, .tv_nsec = give_up % 1000000000};
      pthread_cond_timedwait(&p->cv, &e->mu, &ts);
    }
  }
  int64_t n = p->qlen < max ? p->qlen : max;
  sf__sreq *first = p->head;
  for (int64_t i = 0; i < n; i++) {
    sf__sreq *q = p->head;
    p->head = q->next;
    pthread_mutex_lock(&q->mu);
    q->id = atomic_fetch_add(&next_id, 1);
    pthread_cond_signal(&q->cv); /* its connection now watches for the client leaving */
    pthread_mutex_unlock(&q->mu);
  }
  if (!p->head)
    p->tail = NULL;
  __atomic_store_n(&p->qlen, p->qlen - n, __ATOMIC_RELAXED);
  /* The taken ones, in arrival order, go to the front of the running set. */
  sf__sreq *last = NULL;
  for (sf__sreq *q = first; n && q != p->head; q = q->next)
    last = q;
  if (last)
    last->next = p->running;
  if (n) {
    p->running = first;
    p->nrunning += n;
    int b = 0;
    while (b < SF__BATCH_BUCKETS && (double)n > sf__batch_le[b])
      b++;
    e->batch_hist[b]++;
    e->batch_count++;
    e->batch_sum += (uint64_t)n;
  }
  bool holds = p->nrunning > 0;
  pthread_mutex_unlock(&e->mu);
  if (blocked)
    sf__sched_block_end();
  const sf_type *T = e->T;
  sf_array *a = sf_array_new(J, n, loc);
  int64_t i = 0;
  for (sf__sreq *q = first; i < n; q = q->next, i++) {
    char *job = sf__array_at(a, i);
    *(int64_t *)(job + id_off) = q->id;
    memcpy(job + req_off, q->value, (size_t)T->size);
    q->copy = q->value; /* to retry it elsewhere if this replica dies first */
    sf_value_retain(T, q->copy);
    q->value = NULL;
  }
  if (holds)
    sf__replica_arm(e, r);
  return a;
}

/* --------------------------------------------------------------- answers */

void sf__endpoint_answer(sf__endpoint *e, int64_t r, int64_t id, const void *value,
                         const sf_type *T, int64_t status, const sf_loc *loc) {
  pthread_mutex_lock(&e->mu);
  sf__sreq *q = held(e, r, id, "answer", false, loc);
  pthread_mutex_lock(&q->mu);
  bool streaming = q->streaming;
  pthread_mutex_unlock(&q->mu);
  if (streaming) {
    pthread_mutex_unlock(&e->mu);
    sf__replica_misused(e, r);
    sf_runtime_error(loc, "serve.answer: request %" PRId64 " is a stream (serve.send began it): "
                     "end it with serve.finish", id);
  }
  held(e, r, id, "answer", true, loc);
  left(e, r);
  drop_copy(e, q);
  if (status < 200 || status > 599) {
    char msg[120];
    snprintf(msg, sizeof msg, "the handler gave status %" PRId64 ", not in 200..599", status);
    size_t n;
    sf__sreq_answer(q, 500, sf__error_body(msg, &n), n);
    sf__replica_misused(e, r);
    sf_runtime_error(loc, "serve.answer: request %" PRId64 ": status %" PRId64
                     " is not in 200..599 (answered 500)", id, status);
  }
  char err[600];
  size_t len;
  char *body = sf__json_encode(value, T, &len, err, sizeof err);
  if (!body)
    body = sf__error_body(err, &len), status = 500;
  sf__sreq_answer(q, (int)status, body, len);
}

bool sf__endpoint_send(sf__endpoint *e, int64_t r, int64_t id, const char *data, size_t len,
                       const sf_loc *loc) {
  pthread_mutex_lock(&e->mu);
  sf__sreq *q = held(e, r, id, "send", false, loc);
  pthread_mutex_lock(&q->mu);
  bool gone = q->cancelled || q->abandoned;
  if (!gone) {
    begin_stream(q);
    put_event(&q->out, data, len);
    pthread_cond_signal(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  pthread_mutex_unlock(&e->mu);
  if (gone)
    return false;
  drop_copy(e, q); /* bytes are out: no retry elsewhere */
  pthread_mutex_lock(&q->rt->mu);
  q->rt->events++;
  pthread_mutex_unlock(&q->rt->mu);
  return true;
}

void sf__endpoint_finish(sf__endpoint *e, int64_t r, int64_t id, const sf_loc *loc) {
  pthread_mutex_lock(&e->mu);
  sf__sreq *q = held(e, r, id, "finish", true, loc);
  left(e, r);
  drop_copy(e, q);
  pthread_mutex_lock(&q->mu);
  if (!q->abandoned && !q->cancelled)
    begin_stream(q); /* nothing sent: an empty stream */
  q->finished = true;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  sf__sreq_drop(q);
}

bool sf__endpoint_cancelled(sf__endpoint *e, int64_t r, int64_t id, const sf_loc *loc) {
  pthread_mutex_lock(&e->mu);
  sf__sreq *q = held(e, r, id, "cancelled", false, loc);
  pthread_mutex_lock(&q->mu);
  bool gone = q->cancelled || q->abandoned;
  pthread_mutex_unlock(&q->mu);
  pthread_mutex_unlock(&e->mu);
  return gone;
}

void sf__stream_abort(sf__sreq *q, const char *msg) {
  pthread_mutex_lock(&q->mu);
  size_t n;
  char *body = sf__error_body(msg, &n);
  sf__buf_put(&q->out, "event: error\n", 13);
  put_event(&q->out, body, n && body[n - 1] == '\n' ? n - 1 : n);
  sf_free(body);
  q->finished = true;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  sf__sreq_drop(q);
}

/* ------------------------------------------------- the connection's side */

bool sf__peer_gone(int fd) {
  if (fd < 0)
    return false;
  struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0)
    return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
    return true;
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

ssize_t sf__stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  sf__sreq *q = cls;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->out.len > q->out_off) {
      size_t n = q->out.len - q->out_off;
      if (n > max)
        n = max;
      memcpy(buf, q->out.data + q->out_off, n);
      q->out_off += n;
      if (q->out_off == q->out.len)
        q->out.len = q->out_off = 0;
      pthread_mutex_unlock(&q->mu);
      return (ssize_t)n;
    }
    if (q->finished) {
      pthread_mutex_unlock(&q->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (q->cancelled) {
      pthread_mutex_unlock(&q->mu);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    /* libmicrohttpd only learns of a closed connection by writing to it,
     * so between events the reader looks every 100 ms itself. */
    int64_t at = sf__mono_ns() + 100000000;
    struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
    pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    if (q->out.len == q->out_off && !q->finished && sf__peer_gone(q->fd))
      q->cancelled = true;
  }
}

void sf__stream_free(void *cls) {
  sf__sreq *q = cls;
  pthread_mutex_lock(&q->mu);
  if (!q->finished || q->out.len > q->out_off)
    q->cancelled = true; /* cut off before its end: the replica's send says so */
  pthread_mutex_unlock(&q->mu);
  pthread_mutex_lock(&q->rt->mu);
  q->rt->streams_open--;
  pthread_mutex_unlock(&q->rt->mu);
  sf__sreq_drop(q);
}
