/*
 * test_rt_serve.c — the serve layer's queues without HTTP (runtime/serve/
 * route.c): the power of two choices by load, bounded queues, batches cut
 * at max_batch and held for wait_ms, weighted versions, removed replicas,
 * a replica whose loop fails (its batch and queue sent to the other, the
 * death reported), answers encoded per request (a NaN answered 500),
 * take's running set answered by id (events, finish, misused ids, a death
 * with requests running), and the error body's escaping.
 *
 * Key design choice: a server is built by hand (no daemon, no socket), so
 * each property is checked on exact queue contents instead of through the
 * timing of real connections; tests/runtime/serve_test.py does the rest.
 */
#include <math.h>

#include "rt_test.h"

#include "serve.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_serve", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"t.sflow", 3, 7};
static const char *why; /* sf__route_dispatch's reason for a 503 */

/* got holds want; both printed when it does not. */
#define CHECK_STR_HAS(got, want)                                                             \
  do {                                                                                       \
    const char *got_ = (got);                                                                \
    bool has_ = got_ && strstr(got_, (want));                                                \
    if (!has_)                                                                               \
      fprintf(stderr, "\n  %s:%d: %s\n    got:  %s\n    want: ...%s...\n", __FILE__, __LINE__, \
              #got, got_ ? got_ : "(null)", (want));                                         \
    CU_ASSERT(has_);                                                                         \
  } while (0)

static sf__server *new_server(void) {
  sf__server *s = sf_alloc(sizeof *s);
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_mutex_init(&s->other.mu, NULL);
  return s;
}

/* A request whose decoded value is the i64 v. */
static sf__sreq *req(int64_t v) {
  sf__sreq *q = sf_alloc(sizeof *q);
  memset(q, 0, sizeof *q);
  q->value = sf_alloc(sizeof(int64_t));
  *(int64_t *)q->value = v;
  q->arrived_ns = sf__mono_ns();
  atomic_store(&q->refs, 2); /* the test's hold, and the queue's */
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  return q;
}

static int64_t qlen(sf__endpoint *e, int64_t r) {
  pthread_mutex_lock(&e->mu);
  int64_t n = e->reps[r]->qlen;
  pthread_mutex_unlock(&e->mu);
  return n;
}

/* With two replicas both choices are always the two: each request goes to
 * the one with fewer queued, so ten requests split five and five. */
static void test_two_choices(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 10, 10.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__endpoint_add_replica(e);
  for (int i = 0; i < 10; i++)
    CU_ASSERT_EQUAL(sf__route_dispatch(e->route, req(i), &why), 0);
  CHECK_INT(qlen(e, 0), 5);
  CHECK_INT(qlen(e, 1), 5);
  CHECK_INT(sf__endpoint_queued(e), 10);
}

/* One replica, a queue of 2: the third request is refused with 503. */
static void test_bounded_queue(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 10, 10.0, 2, 100, "", &LOC);
  CHECK_INT(sf__route_dispatch(e->route, req(0), &why), 503); /* no replica yet */
  CHECK_STR_HAS(why, "no replica of this version is ready yet");
  sf__endpoint_add_replica(e);
  CHECK_INT(sf__route_dispatch(e->route, req(1), &why), 0);
  CHECK_INT(sf__route_dispatch(e->route, req(2), &why), 0);
  CHECK_INT(sf__route_dispatch(e->route, req(3), &why), 503);
  CHECK_STR_HAS(why, "every queue of the replicas chosen is full");
  CHECK_INT(qlen(e, 0), 2);
}

/* Seven queued, max_batch 3: batches of 3, 3, then the last one alone
 * once wait_ms (30) has passed since it arrived. */
static void test_batches(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 3, 30.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  for (int i = 0; i < 7; i++)
    sf__route_dispatch(e->route, req(i), &why);
  int64_t want[] = {3, 3, 1};
  int64_t next_v = 0;
  for (int b = 0; b < 3; b++) {
    int64_t t0 = sf__mono_ns();
    sf_array *a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
    int64_t took = sf__mono_ns() - t0;
    CHECK_INT(a->len, want[b]);
    for (int64_t i = 0; i < a->len; i++)
      CHECK_INT(((int64_t *)a->data)[i], next_v++); /* arrival order */
    if (b < 2) {
      CU_ASSERT(took < 25000000); /* a full batch goes at once */
    } else {
      CU_ASSERT(took >= 25000000); /* the last waited for company */
    }
    sf__endpoint_reply(e, 0, a, &LOC);
    sf_release(a);
  }
  CHECK_INT(e->batch_count, 3);
  CHECK_INT(e->batch_sum, 7);
}

/* An empty queue and a timeout: [] after about timeout_ms. */
static void test_next_timeout(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 3, 5.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  int64_t t0 = sf__mono_ns();
  sf_array *a = sf__endpoint_next(e, 0, &sf_type_i64, 20.0, &LOC);
  CHECK_INT(a->len, 0);
  CU_ASSERT(sf__mono_ns() - t0 >= 19000000);
  sf_release(a);
}

/* Weights 90 and 10: about a tenth of 2000 requests go to v2. */
static void test_weights(void) {
  sf__server *s = new_server();
  sf__endpoint *a = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 10, 10.0, 100000, 90, "", &LOC);
  sf__endpoint *b = sf__endpoint_new(s, "/p", "v2", &sf_type_i64, 10, 10.0, 100000, 10, "", &LOC);
  sf__endpoint_add_replica(a);
  sf__endpoint_add_replica(b);
  for (int i = 0; i < 2000; i++)
    sf__route_dispatch(a->route, req(i), &why);
  int64_t nb = qlen(b, 0);
  if (nb < 120 || nb > 280)
    fprintf(stderr, "\n  v2 took %lld of 2000 at weight 10 of 100\n", (long long)nb);
  CU_ASSERT(nb >= 120 && nb <= 280);
  CHECK_INT(qlen(a, 0) + nb, 2000);
  atomic_store(&a->weight, 0); /* serve.set_weight(v1, 0) */
  for (int i = 0; i < 100; i++)
    sf__route_dispatch(a->route, req(i), &why);
  CHECK_INT(qlen(b, 0), nb + 100);
  EXPECT_ERROR(sf__endpoint_new(s, "/p", "v3", &sf_type_f64, 10, 10.0, 64, 1, "", &LOC),
               "t.sflow:3:7: runtime error: serve.route: /p takes i64 (version v1), so every "
               "version must; not f64");
}

/* A route's token is its first version's: a later version may repeat it
 * or give none, not name another; a route without one takes none later. */
static void test_route_token(void) {
  sf__server *s = new_server();
  sf__endpoint *a = sf__endpoint_new(s, "/admin", "v1", &sf_type_i64, 1, 0.0, 4, 100, "k3y", &LOC);
  CHECK_STR(a->route->token, "k3y");
  CHECK_INT(a->route->token_len, 3);
  sf__endpoint_new(s, "/admin", "v2", &sf_type_i64, 1, 0.0, 4, 100, "", &LOC);
  sf__endpoint_new(s, "/admin", "v3", &sf_type_i64, 1, 0.0, 4, 100, "k3y", &LOC);
  EXPECT_ERROR(sf__endpoint_new(s, "/admin", "v4", &sf_type_i64, 1, 0.0, 4, 100, "other", &LOC),
               "t.sflow:3:7: runtime error: serve.route: /admin has another token; every version "
               "must give the same or none");
  sf__endpoint *p = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 1, 0.0, 4, 100, "", &LOC);
  CHECK_INT(p->route->token_len, 0);
  EXPECT_ERROR(sf__endpoint_new(s, "/p", "v2", &sf_type_i64, 1, 0.0, 4, 100, "k3y", &LOC),
               "t.sflow:3:7: runtime error: serve.route: /p has no token; every version must "
               "give the same or none");
}

/* A removed replica gets nothing new; its next gives [] once its queue is
 * empty. */
static void test_removed(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 10, 0.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__endpoint_add_replica(e);
  sf__route_dispatch(e->route, req(1), &why);
  sf__route_dispatch(e->route, req(2), &why);
  sf__endpoint_remove(e, 0, &LOC);
  CHECK_INT(sf__endpoint_live(e), 1);
  for (int i = 0; i < 6; i++)
    sf__route_dispatch(e->route, req(i), &why);
  CHECK_INT(qlen(e, 0), 1);
  CHECK_INT(qlen(e, 1), 7);
  sf_array *a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
  CHECK_INT(a->len, 1);
  sf__endpoint_reply(e, 0, a, &LOC);
  sf_release(a);
  a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
  CHECK_INT(a->len, 0);
  sf_release(a);
}

/* The replica's loop fails after next: its batch and its queue go to the
 * other replica, the death is reported once. */
static void test_replica_dies(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 2, 0.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__endpoint_add_replica(e);
  for (int i = 0; i < 6; i++)
    sf__route_dispatch(e->route, req(i), &why); /* 3 and 3 */
  jmp_buf jb;
  sf__error_jmp = &jb; /* as the actor's message runner sets it */
  if (setjmp(jb) == 0) {
    sf_array *a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
    CHECK_INT(a->len, 2);
    sf_release(a);
    sf_runtime_error(&LOC, "index out of range"); /* the handler fails */
  }
  sf__error_jmp = NULL;
  CHECK_INT(sf__endpoint_live(e), 1);
  CHECK_INT(qlen(e, 1), 6); /* its own 3, the batch of 2, the 1 queued */
  CHECK_INT(e->retries, 3);
  sf_array *d = sf__endpoint_dead(e, &LOC);
  CHECK_INT(d->len, 1);
  CHECK_INT(((int64_t *)d->data)[0], 0);
  sf_release(d);
  d = sf__endpoint_dead(e, &LOC);
  CHECK_INT(d->len, 0);
  sf_release(d);
  /* The retried requests keep their values. */
  int64_t sum = 0;
  for (int k = 0; k < 3; k++) {
    sf_array *a = sf__endpoint_next(e, 1, &sf_type_i64, -1, &LOC);
    for (int64_t i = 0; i < a->len; i++)
      sum += ((int64_t *)a->data)[i];
    sf__endpoint_reply(e, 1, a, &LOC);
    sf_release(a);
  }
  CHECK_INT(sum, 0 + 1 + 2 + 3 + 4 + 5);
  /* An error in a nested attempt (another jump target) is not a death. */
  sf__route_dispatch(e->route, req(9), &why);
  jmp_buf outer, inner;
  sf__error_jmp = &outer;
  if (setjmp(outer) == 0) {
    sf_array *a = sf__endpoint_next(e, 1, &sf_type_i64, -1, &LOC);
    sf__error_jmp = &inner;
    if (setjmp(inner) == 0)
      sf_runtime_error(&LOC, "a task's failure, caught by its attempt");
    sf__error_jmp = &outer;
    sf__endpoint_reply(e, 1, a, &LOC);
    sf_release(a);
  }
  sf__error_jmp = NULL;
  CHECK_INT(sf__endpoint_live(e), 1);
}

/* Each answer is encoded alone: a NaN is a 500 naming its path, the
 * others of the batch are 200. */
static void test_answers(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 3, 0.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__sreq *q[3];
  for (int i = 0; i < 3; i++)
    sf__route_dispatch(e->route, q[i] = req(i), &why);
  sf_array *a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
  sf_array *ans = sf_array_new(&sf_type_f64, 3, &LOC);
  ((double *)ans->data)[0] = 1.5;
  ((double *)ans->data)[1] = NAN;
  ((double *)ans->data)[2] = 3;
  sf__endpoint_reply(e, 0, ans, &LOC);
  CHECK_INT(q[0]->status, 200);
  CHECK_STR(q[0]->body, "1.5");
  CHECK_INT(q[1]->status, 500);
  CHECK_STR(q[1]->body, "{\"error\": \"to_json: $: NaN has no JSON form\"}\n");
  CHECK_INT(q[2]->status, 200);
  CHECK_STR(q[2]->body, "3.0");
  sf_release(a);
  /* Another number of answers: the batch answered 500, and an error. */
  sf__route_dispatch(e->route, q[0] = req(7), &why);
  a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
  EXPECT_ERROR(sf__endpoint_reply(e, 0, ans, &LOC),
               "t.sflow:3:7: runtime error: serve.reply: /p (v1, replica 0): the handler gave 3 "
               "answers for a batch of 1");
  CHECK_INT(q[0]->status, 500);
  sf_release(a);
  sf_release(ans);
}

/* reply_status: each answer with its status; statuses that do not fit
 * (another count, a status outside 200..599) answer the batch 500 and are
 * an error; answered counts what replies answered. */
static void test_reply_status(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/p", "v1", &sf_type_i64, 2, 0.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__sreq *q[2];
  for (int i = 0; i < 2; i++)
    sf__route_dispatch(e->route, q[i] = req(i), &why);
  sf_array *a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
  sf_array *ans = sf_array_new(&sf_type_i64, 2, &LOC);
  sf_array *st = sf_array_new(&sf_type_i64, 2, &LOC);
  ((int64_t *)st->data)[0] = 400;
  ((int64_t *)st->data)[1] = 200;
  sf__endpoint_reply_status(e, 0, ans, st, &LOC);
  CHECK_INT(q[0]->status, 400);
  CHECK_INT(q[1]->status, 200);
  CHECK_INT(sf__endpoint_answered(e), 2);
  sf_release(a);
  ((int64_t *)st->data)[0] = 99;
  for (int i = 0; i < 2; i++)
    sf__route_dispatch(e->route, q[i] = req(i), &why);
  a = sf__endpoint_next(e, 0, &sf_type_i64, -1, &LOC);
  EXPECT_ERROR(sf__endpoint_reply_status(e, 0, ans, st, &LOC),
               "t.sflow:3:7: runtime error: serve.reply: /p (v1, replica 0): status 99 (answer 0) "
               "is not in 200..599");
  CHECK_INT(q[0]->status, 500);
  CHECK_INT(q[1]->status, 500);
  CHECK_INT(sf__endpoint_answered(e), 2);
  sf_release(a);
  sf_release(st);
  sf_release(ans);
}

/* take's element type: struct Job { id: i64, req: i64 } for a route of i64. */
static const sf_field job_fields[2] = {{"id", 0, &sf_type_i64}, {"req", 8, &sf_type_i64}};
static const sf_type job_type = {SF_STRUCT, 16, 8, 2, NULL, job_fields, "Job"};

static int64_t job_id(sf_array *a, int64_t i) { return ((int64_t *)a->data)[2 * i]; }
static int64_t job_req(sf_array *a, int64_t i) { return ((int64_t *)a->data)[2 * i + 1]; }

/* take: up to max of the queue into the running set in arrival order,
 * with increasing ids, counted in the load; answers by id in any order;
 * send's event bytes (a line of data per line); finish; misused ids are
 * errors naming them and take the replica out. */
static void test_take(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/g", "v1", &sf_type_i64, 10, 10.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__sreq *q[3];
  for (int i = 0; i < 3; i++) {
    sf__route_dispatch(e->route, q[i] = req(10 + i), &why);
    q[i]->rt = e->route;
  }
  sf_array *a = sf__endpoint_take(e, 0, &job_type, 2, 0.0, &LOC);
  CHECK_INT(a->len, 2);
  CHECK_INT(job_req(a, 0), 10);
  CHECK_INT(job_req(a, 1), 11);
  int64_t id0 = job_id(a, 0), id1 = job_id(a, 1);
  CU_ASSERT(id0 > 0 && id1 == id0 + 1);
  CHECK_INT(qlen(e, 0), 1);
  CHECK_INT(sf__endpoint_queued(e), 3); /* 1 queued, 2 running */
  sf_release(a);
  /* The later one first. */
  int64_t v = 5;
  sf__endpoint_answer(e, 0, id1, &v, &sf_type_i64, 201, &LOC);
  CU_ASSERT(q[1]->done);
  CHECK_INT(q[1]->status, 201);
  CHECK_STR(q[1]->body, "5");
  CU_ASSERT(!q[0]->done);
  CU_ASSERT(sf__endpoint_send(e, 0, id0, "a\nb", 3, &LOC));
  CU_ASSERT(sf__endpoint_send(e, 0, id0, "[DONE]", 6, &LOC));
  CU_ASSERT(q[0]->streaming && !q[0]->finished);
  CHECK_INT((int64_t)q[0]->out.len, 31);
  CU_ASSERT(!memcmp(q[0]->out.data, "data: a\ndata: b\n\ndata: [DONE]\n\n", 31));
  CHECK_INT(e->route->events, 2);
  CHECK_INT(e->route->streams_open, 1);
  CHECK_INT(e->route->first_count, 1);
  CU_ASSERT(!sf__endpoint_cancelled(e, 0, id0, &LOC));
  sf__endpoint_finish(e, 0, id0, &LOC);
  CU_ASSERT(q[0]->finished);
  CHECK_INT(sf__endpoint_answered(e), 2);
  CHECK_INT(sf__endpoint_queued(e), 1);
  /* A gone client: send is false and drops the event. */
  a = sf__endpoint_take(e, 0, &job_type, 5, 0.0, &LOC);
  CHECK_INT(a->len, 1);
  int64_t id2 = job_id(a, 0);
  sf_release(a);
  q[2]->cancelled = true;
  CU_ASSERT(!sf__endpoint_send(e, 0, id2, "x", 1, &LOC));
  CU_ASSERT(sf__endpoint_cancelled(e, 0, id2, &LOC));
  CHECK_INT((int64_t)q[2]->out.len, 0);
  sf__endpoint_finish(e, 0, id2, &LOC);
  /* Nothing queued, max 0 or timeout 0: [] at once. */
  a = sf__endpoint_take(e, 0, &job_type, 0, 0.0, &LOC);
  CHECK_INT(a->len, 0);
  sf_release(a);
  /* Misuse: each an error naming the id. */
  char want[300];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: serve.answer: request %" PRId64
           " is not held by replica 0 of /g (v1): it was already answered or finished, or "
           "another replica took it", id1);
  EXPECT_ERROR(sf__endpoint_answer(e, 0, id1, &v, &sf_type_i64, 200, &LOC), want);
  EXPECT_ERROR(sf__endpoint_send(e, 0, 999999, "x", 1, &LOC),
               "t.sflow:3:7: runtime error: serve.send: no request 999999 was ever taken (ids "
               "come from serve.take)");
  EXPECT_ERROR(sf__endpoint_take(e, 0, &sf_type_i64, 1, 0.0, &LOC),
               "t.sflow:3:7: runtime error: serve.take: i64 must be a struct of two fields, id: "
               "i64 and req: i64 (the request type of /g (v1))");
  /* The misused id's error took the replica out (its loop unwinds). */
  CHECK_INT(sf__endpoint_live(e), 0);
  sf__error_handler = NULL;
}

/* answer on a stream is an error; a replica dying with requests running:
 * the one that sent nothing goes to the other replica, the stream ends
 * with an error event. */
static void test_take_dies(void) {
  sf__server *s = new_server();
  sf__endpoint *e = sf__endpoint_new(s, "/g", "v1", &sf_type_i64, 10, 10.0, 64, 100, "", &LOC);
  sf__endpoint_add_replica(e);
  sf__sreq *q[2];
  for (int i = 0; i < 2; i++) {
    sf__route_dispatch(e->route, q[i] = req(20 + i), &why);
    q[i]->rt = e->route;
  }
  jmp_buf jb;
  sf__error_jmp = &jb;
  int64_t id0 = 0;
  if (setjmp(jb) == 0) {
    sf_array *a = sf__endpoint_take(e, 0, &job_type, 2, 0.0, &LOC);
    CHECK_INT(a->len, 2);
    id0 = job_id(a, 0);
    sf_release(a);
    sf__endpoint_add_replica(e); /* the one the retry goes to */
    CU_ASSERT(sf__endpoint_send(e, 0, id0, "t", 1, &LOC));
    int64_t v = 1;
    sf__endpoint_answer(e, 0, id0, &v, &sf_type_i64, 200, &LOC); /* a stream: an error */
    CU_FAIL("no error from answer on a stream");
  }
  sf__error_jmp = NULL;
  char want[200];
  snprintf(want, sizeof want, "t.sflow:3:7: runtime error: serve.answer: request %" PRId64
           " is a stream (serve.send began it): end it with serve.finish", id0);
  CHECK_STR(sf__error_message, want);
  CHECK_INT(sf__endpoint_live(e), 1);
  CU_ASSERT(q[0]->finished);
  CHECK_STR_HAS(q[0]->out.data, "data: t\n\nevent: error\ndata: {\"error\": ");
  CHECK_INT(qlen(e, 1), 1); /* the other, retried */
  sf_array *a = sf__endpoint_take(e, 1, &job_type, 2, 0.0, &LOC);
  CHECK_INT(a->len, 1);
  CHECK_INT(job_req(a, 0), 21);
  sf_release(a);
}

static void test_error_body(void) {
  size_t n;
  char *b = sf__error_body("a \"quote\", a \\ and a\nline, \x01, caf\xc3\xa9, \xff", &n);
  CHECK_STR(b, "{\"error\": \"a \\\"quote\\\", a \\\\ and a\\nline, \\u0001, caf\xc3\xa9, "
               "\\ufffd\"}\n");
  CHECK_INT((int64_t)n, (int64_t)strlen(b));
  sf_free(b);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"two_choices", test_two_choices},
      {"bounded_queue", test_bounded_queue},
      {"batches", test_batches},
      {"next_timeout", test_next_timeout},
      {"weights", test_weights},
      {"route_token", test_route_token},
      {"removed", test_removed},
      {"replica_dies", test_replica_dies},
      {"answers", test_answers},
      {"reply_status", test_reply_status},
      {"take", test_take},
      {"take_dies", test_take_dies},
      {"error_body", test_error_body},
      {NULL, NULL},
  };
  return rt_run("rt_serve", tests, argc, argv);
}
