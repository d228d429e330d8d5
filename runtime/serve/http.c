/*
 * http.c — the HTTP side of std.serve: the listening socket, libmicrohttpd
 * in thread-per-connection mode, what each request is answered
 * (docs/serve.md, "What a client sees"), and the graceful stop on SIGTERM.
 *
 * Key design choice: a connection's thread carries its request through:
 * it reads the body (refusing it at max_body), decodes it into the
 * route's type, queues it and sleeps until the replica's reply wakes it.
 * The stop is a state under the server's mutex, checked and counted there
 * together with the requests open (from their whole arrival to their
 * answer's last byte), so the daemon stops only after every answer was
 * sent.  A connection's next head has a deadline (slowloris), and each
 * client address a share of the connections.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <unistd.h>

#include "serve.h"

static pthread_mutex_t servers_mu = PTHREAD_MUTEX_INITIALIZER;
static sf__server *servers[16];
static int64_t nservers;

sf__server *sf__server_get(int64_t id, const sf_loc *loc) {
  pthread_mutex_lock(&servers_mu);
  sf__server *s = id >= 1 && id <= nservers ? servers[id - 1] : NULL;
  pthread_mutex_unlock(&servers_mu);
  if (!s)
    sf_runtime_error(loc, "serve: no server %" PRId64 " (a Server comes from serve.start)", id);
  return s;
}

sf__server *sf__server_nth(int64_t id) {
  pthread_mutex_lock(&servers_mu);
  sf__server *s = id >= 1 && id <= nservers ? servers[id - 1] : NULL;
  pthread_mutex_unlock(&servers_mu);
  return s;
}

/* ------------------------------------------------------------ answers */

static enum MHD_Result respond(struct MHD_Connection *c, int status, const char *body, size_t len,
                               const char *ctype, const char *h, const char *v, bool close) {
  struct MHD_Response *r =
      sf__mhd.create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  sf__mhd.add_response_header(r, "Content-Type", ctype);
  if (h)
    sf__mhd.add_response_header(r, h, v);
  if (close)
    sf__mhd.add_response_header(r, "Connection", "close");
  enum MHD_Result ok = sf__mhd.queue_response(c, (unsigned)status, r);
  sf__mhd.destroy_response(r);
  return ok;
}

static enum MHD_Result respond_error(sf__server *s, sf__route *rt, struct MHD_Connection *c,
                                     int status, const char *msg, const char *h, const char *v,
                                     bool close, int64_t t0) {
  size_t n;
  char *body = sf__error_body(msg, &n);
  enum MHD_Result ok = respond(c, status, body, n, "application/json", h, v, close);
  sf_free(body);
  sf__route_count(s, rt, status, (double)(sf__mono_ns() - t0) * 1e-9);
  return ok;
}

/* The route's own token when it has one, else the server's.  Constant
 * time in the token's length, so the answer's timing does not tell how
 * much of a guess was right. */
static bool token_ok(sf__server *s, sf__route *rt, struct MHD_Connection *c) {
  const char *token = rt && rt->token_len ? rt->token : s->token;
  size_t len = rt && rt->token_len ? rt->token_len : s->token_len;
  return sf__bearer_ok(c, token, len);
}

bool sf__bearer_ok(struct MHD_Connection *c, const char *token, size_t len) {
  if (!len)
    return true;
  const char *a = sf__mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!a || strncasecmp(a, "Bearer ", 7))
    return false;
  a += 7;
  size_t n = strlen(a);
  unsigned char d = n != len;
  for (size_t i = 0; i < len; i++)
    d |= (unsigned char)(token[i] ^ (i < n ? a[i] : 0));
  return d == 0;
}

/* --------------------------------------------------- the head deadline */

/* A client that sends its request's head a byte at a time (slowloris)
 * resets libmicrohttpd's idle timeout with every byte, so that timeout
 * alone lets a few hundred such clients hold every connection for ever.
 * Each connection therefore has a deadline for its next request's head:
 * head_timeout_s after it opened or after its previous answer was sent;
 * the head's arrival (on_request's first call) lifts it.  The reaper
 * thread answers a connection past it 408 and shuts its sending side
 * down; a linger later it shuts the reading side too, which ends
 * libmicrohttpd's read on it and so the connection.  The linger is what
 * lets the client read the 408: a byte it trickles into a socket already
 * closed draws a reset, and a reset makes the client's kernel drop the
 * answer it has not read yet.  A head that completes in the linger is
 * not served.  One that
 * was answered before is closed without a 408: it may be an idle
 * keep-alive connection, whose client could take an unasked-for answer
 * for that of a request it sends at the same moment. */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  sf__server *s = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fd =
        sf__mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    sf__sconn *k = sf_alloc(sizeof *k);
    memset(k, 0, sizeof *k);
    k->fd = fd ? fd->connect_fd : -1;
    k->head_by = sf__mono_ns() + s->head_timeout_ns;
    pthread_mutex_lock(&s->conns_mu);
    k->next = s->conns;
    if (s->conns)
      s->conns->prev = k;
    s->conns = k;
    pthread_mutex_unlock(&s->conns_mu);
    *socket_context = k;
    return;
  }
  sf__sconn *k = *socket_context;
  if (!k)
    return;
  /* Called before libmicrohttpd closes the socket, so the reaper, which
   * shuts sockets down under conns_mu, never touches a closed one. */
  pthread_mutex_lock(&s->conns_mu);
  if (k->prev)
    k->prev->next = k->next;
  else
    s->conns = k->next;
  if (k->next)
    k->next->prev = k->prev;
  pthread_mutex_unlock(&s->conns_mu);
  sf_free(k);
  *socket_context = NULL;
}

/* The deadline of c's next head: now + head_timeout_s, or none.  True
 * when c was answered 408 already (it lingers), and nothing changes. */
static bool head_deadline(sf__server *s, struct MHD_Connection *c, bool waiting) {
  const union MHD_ConnectionInfo *i =
      sf__mhd.get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  sf__sconn *k = i ? i->socket_context : NULL;
  if (!k)
    return false;
  pthread_mutex_lock(&s->conns_mu);
  bool lingering = k->lingering;
  if (!lingering) {
    k->head_by = waiting ? sf__mono_ns() + s->head_timeout_ns : INT64_MAX;
    k->answered |= waiting;
  }
  pthread_mutex_unlock(&s->conns_mu);
  return lingering;
}

/* How long a connection answered 408 keeps reading before it is shut. */
#define LINGER_NS 500000000LL

static void *reaper_main(void *arg) {
  sf__server *s = arg;
  char msg[160], answer[400];
  snprintf(msg, sizeof msg, "the request's head did not arrive within %g s (head_timeout_s)",
           (double)s->head_timeout_ns * 1e-9);
  size_t blen;
  char *body = sf__error_body(msg, &blen);
  int n = snprintf(answer, sizeof answer, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", blen, body);
  sf_free(body);
  pthread_mutex_lock(&s->conns_mu);
  while (!s->reaper_stop) {
    int64_t now = sf__mono_ns(), soonest = now + s->head_timeout_ns;
    for (sf__sconn *k = s->conns; k; k = k->next) {
      if (k->head_by <= now) {
        k->head_by = INT64_MAX; /* once */
        if (k->fd >= 0) {
          /* Nothing of this request was answered, so the 408 cannot
           * interleave with libmicrohttpd's own writes. */
          if (!k->answered && !k->lingering) {
            ssize_t w = send(k->fd, answer, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)w;
            sf__route_count(s, NULL, 408, (double)s->head_timeout_ns * 1e-9);
            shutdown(k->fd, SHUT_WR);
            k->lingering = true;
            k->head_by = now + LINGER_NS;
            if (k->head_by < soonest)
              soonest = k->head_by;
          } else {
            shutdown(k->fd, SHUT_RDWR);
          }
        }
      } else if (k->head_by < soonest) {
        soonest = k->head_by;
      }
    }
    /* A new deadline is never sooner than soonest (each is now + the
     * same timeout, and a linger starts here), so no one needs to wake
     * this wait early. */
    struct timespec ts = {.tv_sec = soonest / 1000000000, .tv_nsec = soonest % 1000000000};
    pthread_cond_timedwait(&s->conns_cv, &s->conns_mu, &ts);
  }
  pthread_mutex_unlock(&s->conns_mu);
  return NULL;
}

/* ----------------------------------------------------------- requests */

typedef struct conn {
  sf__buf body;
  bool too_big;
  bool opened; /* counted in the server's open requests (open_begin) */
} conn;

/* A request is open from its whole arrival (or an answer to it before
 * then, a 413) until libmicrohttpd has sent the last byte of its answer
 * (or given up on the connection): on_done.  The stop waits for the open
 * count to reach zero, not for the answers to be queued, since a queued
 * answer is only written after on_request returns, and stopping the
 * daemon then would cut it off.  A request still arriving is not open, so
 * a client trickling its body cannot hold the stop up. */
static void open_begin(sf__server *s, conn *k) {
  if (k->opened)
    return;
  k->opened = true;
  pthread_mutex_lock(&s->mu);
  s->open++;
  pthread_mutex_unlock(&s->mu);
}

static void open_end(sf__server *s) {
  pthread_mutex_lock(&s->mu);
  if (--s->open == 0 && s->state == SF__DRAINING) {
    s->state = SF__CLOSED;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    sf__route_wake_all(s);
    return;
  }
  pthread_mutex_unlock(&s->mu);
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
  sf__server *s = cls;
  conn *k = *con_cls;
  if (!k)
    return;
  bool opened = k->opened;
  sf__buf_free(&k->body);
  sf_free(k);
  *con_cls = NULL;
  /* A keep-alive connection now waits for its next request's head. */
  if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    head_deadline(s, c, true);
  if (opened)
    open_end(s);
}

/* Admits a route's request to the gauge of those in flight, or false when
 * the server is stopping. */
static bool admit(sf__server *s) {
  pthread_mutex_lock(&s->mu);
  bool ok = s->state == SF__RUNNING;
  if (ok)
    s->in_flight++;
  pthread_mutex_unlock(&s->mu);
  return ok;
}

static void leave(sf__server *s) {
  pthread_mutex_lock(&s->mu);
  s->in_flight--;
  pthread_mutex_unlock(&s->mu);
}

/* Whether T is std.data's Json (its name and six fields): a route of it
 * takes any JSON body, decoded as data.parse_json does, so a handler reads
 * optional fields (OpenAI's clients leave out every field not set). */
static bool dynamic_json(const sf_type *T) {
  static const struct {
    const char *name;
    int kind;
  } want[6] = {{"kind", SF_STR},  {"flag", SF_BOOL},  {"number", SF_F64},
               {"text", SF_STR},  {"items", SF_ARRAY}, {"keys", SF_ARRAY}};
  if (T->kind != SF_STRUCT || !T->name || strcmp(T->name, "Json") || T->nfields != 6)
    return false;
  for (int i = 0; i < 6; i++) {
    bool found = false;
    for (int32_t k = 0; k < 6; k++)
      found |= !strcmp(T->fields[k].name, want[i].name) && T->fields[k].type->kind == want[i].kind;
    if (!found)
      return false;
  }
  return true;
}

static bool answered(void *q) {
  return atomic_load_explicit(&((sf__sreq *)q)->ready, memory_order_acquire);
}

/* A route's request with its whole body: decoded, queued, answered. */
static enum MHD_Result serve_route(sf__server *s, sf__route *rt, struct MHD_Connection *c,
                                   conn *k, int64_t t0) {
  if (k->too_big) {
    char msg[96];
    snprintf(msg, sizeof msg, "the body is over %" PRId64 " bytes", s->max_body);
    return respond_error(s, rt, c, 413, msg, NULL, NULL, true, t0);
  }
  sf__buf_put(&k->body, "", 1); /* the NUL cJSON's parse wants after the text */
  sf__endpoint *e0 = rt->eps[0];
  const sf_type *T = e0->T;
  void *value = sf_alloc((size_t)T->size);
  memset(value, 0, (size_t)T->size);
  char err[600];
  if (!sf__json_decode(k->body.data, k->body.len - 1, "<body>", T, dynamic_json(T), value, err,
                       sizeof err)) {
    sf_free(value);
    return respond_error(s, rt, c, 400, err, NULL, NULL, false, t0);
  }
  sf__sreq *q = sf_alloc(sizeof *q);
  memset(q, 0, sizeof *q);
  q->value = value;
  q->arrived_ns = sf__mono_ns();
  q->rt = rt;
  const union MHD_ConnectionInfo *fd =
      sf__mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  q->fd = fd ? fd->connect_fd : -1;
  sf__buf_init(&q->out, NULL, 0);
  atomic_store(&q->refs, 2); /* this thread, and the queue until the answer */
  pthread_mutex_init(&q->mu, NULL);
  sf__cond_init_mono(&q->cv);
  const char *why = NULL;
  int busy = sf__route_dispatch(rt, q, &why);
  if (busy) {
    sf_value_release(T, value);
    sf_free(value);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    sf_free(q);
    return respond_error(s, rt, c, busy, why, "Retry-After", "1", false, t0);
  }
  int64_t until = s->request_timeout_ns > 0 ? q->arrived_ns + s->request_timeout_ns : INT64_MAX;
  /* A short spin first: a replica that is idle or quick answers within it,
   * and this thread then neither sleeps nor needs waking (route.c). */
  sf__spin(answered, q);
  pthread_mutex_lock(&q->mu);
  /* Until the answer, or the first event of a stream (serve.send): the
   * timeout bounds the time to the first byte, not a stream's length.
   * Once serve.take has it (an id), the client's leaving is looked for
   * every 100 ms, so serve.cancelled tells the replica to drop it; the
   * replica's finish then releases this thread with nothing to send. */
  while (!q->done && !q->streaming && !q->finished) {
    int64_t now = sf__mono_ns();
    if (now >= until) {
      q->abandoned = true; /* a late answer is dropped (sf__sreq_answer) */
      break;
    }
    int64_t at = until;
    if (q->id > 0 && !q->cancelled && now + 100000000 < at)
      at = now + 100000000;
    if (at == INT64_MAX) {
      pthread_cond_wait(&q->cv, &q->mu);
    } else {
      struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
      if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT && q->id > 0 &&
          !q->cancelled && sf__peer_gone(q->fd))
        q->cancelled = true;
    }
  }
  if (q->finished && !q->streaming && !q->done) {
    /* Finished with nothing sent after its client left: nobody to answer. */
    pthread_mutex_unlock(&q->mu);
    sf__sreq_drop(q);
    sf__route_count(s, rt, 499, (double)(sf__mono_ns() - t0) * 1e-9);
    return MHD_NO;
  }
  if (q->streaming && !q->done) {
    pthread_mutex_unlock(&q->mu);
    /* This thread's hold passes to the response (sf__stream_free). */
    struct MHD_Response *resp = sf__mhd.create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16384, sf__stream_read, q, sf__stream_free);
    if (!resp) {
      sf__stream_free(q);
      return MHD_NO;
    }
    sf__mhd.add_response_header(resp, "Content-Type", "text/event-stream");
    sf__mhd.add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ok = sf__mhd.queue_response(c, 200, resp);
    sf__mhd.destroy_response(resp);
    sf__route_count(s, rt, 200, (double)(sf__mono_ns() - t0) * 1e-9);
    return ok;
  }
  int status = q->done ? q->status : 504;
  char *body = q->body;
  size_t len = q->body_len;
  q->body = NULL;
  pthread_mutex_unlock(&q->mu);
  sf__sreq_drop(q);
  if (!body) {
    char msg[120];
    snprintf(msg, sizeof msg, "no answer within %g s (request_timeout_s)", (double)s->request_timeout_ns * 1e-9);
    body = sf__error_body(msg, &len);
  }
  enum MHD_Result ok = respond(c, status, body, len, "application/json", NULL, NULL, false);
  sf_free(body);
  sf__route_count(s, rt, status, (double)(sf__mono_ns() - t0) * 1e-9);
  return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  sf__server *s = cls;
  conn *k = *con_cls;
  if (!k) {
    /* A head that completes after its 408 is not served. */
    if (head_deadline(s, c, false))
      return MHD_NO;
    /* The headers are in: refuse a declared body over the limit before
     * reading it (libmicrohttpd closes the connection after). */
    k = sf_alloc(sizeof *k);
    memset(k, 0, sizeof *k);
    sf__buf_init(&k->body, NULL, 0);
    *con_cls = k;
    const char *cl = sf__mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoll(cl, NULL, 10) > s->max_body) {
      open_begin(s, k);
      char msg[96];
      snprintf(msg, sizeof msg, "the body is over %" PRId64 " bytes", s->max_body);
      return respond_error(s, sf__route_find(s, url), c, 413, msg, NULL, NULL, true,
                           sf__mono_ns());
    }
    return MHD_YES;
  }
  if (*upload_data_size) {
    if (!k->too_big && (int64_t)(k->body.len + *upload_data_size) <= s->max_body)
      sf__buf_put(&k->body, upload_data, *upload_data_size);
    else
      k->too_big = true;
    *upload_data_size = 0;
    return MHD_YES;
  }
  open_begin(s, k); /* the whole request is in; open until on_done */
  int64_t t0 = sf__mono_ns();
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  if (!strcmp(url, "/healthz") || !strcmp(url, "/metrics")) {
    if (!get)
      return respond_error(s, NULL, c, 405, "use GET", "Allow", "GET, HEAD", false, t0);
    if (url[1] == 'h') {
      bool up = s->state == SF__RUNNING;
      return respond(c, up ? 200 : 503, up ? "ok\n" : "stopping\n", up ? 3 : 9, "text/plain", NULL,
                     NULL, !up);
    }
    if (!token_ok(s, NULL, c))
      return respond_error(s, NULL, c, 401, "a bearer token is required", "WWW-Authenticate",
                           "Bearer", false, t0);
    sf__buf b;
    sf__buf_init(&b, NULL, 0);
    sf__metrics_text(s, &b);
    enum MHD_Result ok = respond(c, 200, b.data ? b.data : "", b.len,
                                 "text/plain; version=0.0.4; charset=utf-8", NULL, NULL, false);
    sf__buf_free(&b);
    return ok;
  }
  sf__route *rt = sf__route_find(s, url);
  if (!token_ok(s, rt, c))
    return respond_error(s, rt, c, 401, "a bearer token is required", "WWW-Authenticate", "Bearer",
                         false, t0);
  if (!rt)
    return respond_error(s, NULL, c, 404, "no such route", NULL, NULL, false, t0);
  if (strcmp(method, "POST"))
    return respond_error(s, rt, c, 405, "use POST", "Allow", "POST", false, t0);
  if (!admit(s))
    return respond_error(s, rt, c, 503, "the server is stopping", NULL, NULL, true, t0);
  enum MHD_Result ok = serve_route(s, rt, c, k, t0);
  leave(s);
  return ok;
}

/* -------------------------------------------------------------- start */

/* SIGTERM and SIGINT start every server's graceful stop: the handler
 * only writes a byte, a thread does the work. */
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  char b = (char)sig;
  ssize_t w = write(sig_pipe[1], &b, 1);
  (void)w;
}

static void *signal_thread(void *arg) {
  char b;
  for (;;) {
    ssize_t n = read(sig_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return NULL;
    pthread_mutex_lock(&servers_mu);
    int64_t ns = nservers;
    pthread_mutex_unlock(&servers_mu);
    for (int64_t i = 0; i < ns; i++)
      sf__server_stop(servers[i]);
  }
}

static void install_signals(void) {
  if (pipe(sig_pipe))
    return;
  fcntl(sig_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(sig_pipe[1], F_SETFD, FD_CLOEXEC);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &a, signal_thread, NULL);
  pthread_attr_destroy(&a);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

static int listen_on(const char *host, int64_t port, int *bound, char *err, size_t errlen) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (!strcmp(host, "localhost"))
    host = "127.0.0.1";
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    snprintf(err, errlen, "host \"%.64s\" is not an IPv4 address (127.0.0.1, 0.0.0.0, ...)", host);
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1024)) {
    snprintf(err, errlen, "cannot listen on %s:%" PRId64 ": %s", host, port, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &len);
  *bound = ntohs(a.sin_port);
  return fd;
}

sf__server *sf__server_start(const char *host, int64_t port, const char *token, int64_t max_body,
                             int64_t max_conn, int64_t timeout_s, double request_timeout_s,
                             double head_timeout_s, int64_t max_conn_per_ip, const sf_loc *loc) {
  char err[400];
  if (!sf__mhd_load(err, sizeof err))
    sf_runtime_error(loc, "serve.start: %s", err);
  if (port < 0 || port > 65535)
    sf_runtime_error(loc, "serve.start: port %" PRId64 " is not in 0..65535", port);
  if (max_body < 0 || max_conn < 1 || max_conn > 100000 || timeout_s < 1 || timeout_s > 86400)
    sf_runtime_error(loc, "serve.start: max_body >= 0, max_connections in 1..100000 and timeout_s "
                     "in 1..86400 are needed");
  if (!(request_timeout_s >= 0 && request_timeout_s <= 86400))
    sf_runtime_error(loc, "serve.start: request_timeout_s %g is not in 0..86400", request_timeout_s);
  if (!(head_timeout_s >= 0.1 && head_timeout_s <= 86400))
    sf_runtime_error(loc, "serve.start: head_timeout_s %g is not in 0.1..86400", head_timeout_s);
  if (max_conn_per_ip < 1)
    sf_runtime_error(loc, "serve.start: max_connections_per_ip %" PRId64 " is not at least 1",
                     max_conn_per_ip);
  if (max_conn_per_ip > max_conn)
    max_conn_per_ip = max_conn; /* one address may take them all, no more */
  if (strlen(token) >= sizeof(((sf__server *)0)->token))
    sf_runtime_error(loc, "serve.start: the token is longer than 255 bytes");
  if (strlen(host) >= sizeof(((sf__server *)0)->host))
    sf_runtime_error(loc, "serve.start: host \"%.64s...\" is too long", host);
  pthread_mutex_lock(&servers_mu);
  if (nservers == 16) {
    pthread_mutex_unlock(&servers_mu);
    sf_runtime_error(loc, "serve.start: more than 16 servers");
  }
  if (!nservers)
    install_signals();
  pthread_mutex_unlock(&servers_mu);
  sf__server *s = sf_alloc(sizeof *s);
  memset(s, 0, sizeof *s);
  snprintf(s->host, sizeof s->host, "%s", host);
  snprintf(s->token, sizeof s->token, "%s", token);
  s->token_len = strlen(token);
  s->max_body = max_body;
  s->request_timeout_ns = (int64_t)(request_timeout_s * 1e9);
  s->head_timeout_ns = (int64_t)(head_timeout_s * 1e9);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_mutex_init(&s->conns_mu, NULL);
  sf__cond_init_mono(&s->conns_cv);
  pthread_mutex_init(&s->other.mu, NULL);
  snprintf(s->other.path, sizeof s->other.path, "other");
  s->listen_fd = listen_on(host, port, &s->port, err, sizeof err);
  if (s->listen_fd < 0) {
    sf_free(s);
    sf_runtime_error(loc, "serve.start: %s", err);
  }
  s->mhd = sf__mhd.start_daemon(
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC,
      0, NULL, NULL, &on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)max_conn_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout_s,
      MHD_OPTION_NOTIFY_COMPLETED, &on_done, s, MHD_OPTION_NOTIFY_CONNECTION, &on_connection, s,
      MHD_OPTION_END);
  if (!s->mhd) {
    close(s->listen_fd);
    sf_free(s);
    sf_runtime_error(loc, "serve.start: libmicrohttpd did not start on %s:%" PRId64, host, port);
  }
  if (pthread_create(&s->reaper, NULL, reaper_main, s)) {
    sf__mhd.stop_daemon(s->mhd);
    close(s->listen_fd);
    sf_free(s);
    sf_runtime_error(loc, "serve.start: cannot start the head-deadline thread: %s", strerror(errno));
  }
  pthread_mutex_lock(&servers_mu);
  servers[nservers++] = s;
  s->id = nservers;
  pthread_mutex_unlock(&servers_mu);
  return s;
}

/* --------------------------------------------------------------- stop */

void sf__server_stop(sf__server *s) {
  pthread_mutex_lock(&s->mu);
  if (s->state != SF__RUNNING) {
    pthread_mutex_unlock(&s->mu);
    return;
  }
  s->state = SF__DRAINING;
  /* No new connections: the listening socket is ours to close. */
  int fd = sf__mhd.quiesce_daemon(s->mhd);
  if (fd >= 0)
    close(fd);
  bool closed = s->open == 0;
  if (closed)
    s->state = SF__CLOSED;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (closed)
    sf__route_wake_all(s);
}

void sf__server_wait(sf__server *s) {
  bool pool = sf__sched_in_pool();
  if (pool)
    sf__sched_block_begin();
  pthread_mutex_lock(&s->mu);
  while (s->state != SF__CLOSED)
    pthread_cond_wait(&s->cv, &s->mu);
  bool stop = !s->stopped;
  s->stopped = true;
  pthread_mutex_unlock(&s->mu);
  /* Every request is answered; this closes the idle keep-alive
   * connections and ends their threads. */
  if (stop) {
    sf__mhd.stop_daemon(s->mhd);
    pthread_mutex_lock(&s->conns_mu);
    s->reaper_stop = true;
    pthread_cond_signal(&s->conns_cv);
    pthread_mutex_unlock(&s->conns_mu);
    pthread_join(s->reaper, NULL);
  }
  if (pool)
    sf__sched_block_end();
}
