/*
 * http.c — the HTTP side of std.serve: the listening socket, libmicrohttpd
 * in thread-per-connection mode, what each request is answered
 * (docs/serve.md, "What a client sees"), and the graceful stop on SIGTERM.
 *
 * Key design choice: a connection's thread carries its request through:
 * it reads the body (refusing it at max_body), decodes it into the
 * route's type, queues it and sleeps until the replica's reply wakes it.
 * The stop is a state under the server's mutex, checked and counted there
 * together with the request's admission, so no request is admitted after
 * the count of those in flight is seen to reach zero.
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

/* Constant time in the token's length, so the answer's timing does not
 * tell how much of a guess was right. */
static bool token_ok(sf__server *s, struct MHD_Connection *c) {
  if (!s->token_len)
    return true;
  const char *a = sf__mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!a || strncasecmp(a, "Bearer ", 7))
    return false;
  a += 7;
  size_t n = strlen(a);
  unsigned char d = n != s->token_len;
  for (size_t i = 0; i < s->token_len; i++)
    d |= (unsigned char)(s->token[i] ^ (i < n ? a[i] : 0));
  return d == 0;
}

/* ----------------------------------------------------------- requests */

typedef struct conn {
  sf__buf body;
  bool too_big;
} conn;

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
  conn *k = *con_cls;
  if (k) {
    sf__buf_free(&k->body);
    sf_free(k);
    *con_cls = NULL;
  }
}

/* Admits a request to the server's count of those in flight, or false
 * when the server is stopping. */
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
  if (--s->in_flight == 0 && s->state == SF__DRAINING) {
    s->state = SF__CLOSED;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    sf__route_wake_all(s);
    return;
  }
  pthread_mutex_unlock(&s->mu);
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
  if (!sf__json_decode(k->body.data, k->body.len - 1, "<body>", T, false, value, err, sizeof err)) {
    sf_free(value);
    return respond_error(s, rt, c, 400, err, NULL, NULL, false, t0);
  }
  sf__sreq *q = sf_alloc(sizeof *q);
  memset(q, 0, sizeof *q);
  q->value = value;
  q->arrived_ns = sf__mono_ns();
  atomic_store(&q->refs, 2); /* this thread, and the queue until the answer */
  pthread_mutex_init(&q->mu, NULL);
  sf__cond_init_mono(&q->cv);
  int busy = sf__route_dispatch(rt, q);
  if (busy) {
    sf_value_release(T, value);
    sf_free(value);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    sf_free(q);
    return respond_error(s, rt, c, busy, "every queue of the replicas chosen is full; retry later",
                         "Retry-After", "1", false, t0);
  }
  int64_t until = s->request_timeout_ns > 0 ? q->arrived_ns + s->request_timeout_ns : INT64_MAX;
  pthread_mutex_lock(&q->mu);
  while (!q->done) {
    if (until == INT64_MAX) {
      pthread_cond_wait(&q->cv, &q->mu);
    } else if (sf__mono_ns() >= until) {
      q->abandoned = true; /* a late answer is dropped (sf__sreq_answer) */
      break;
    } else {
      struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
      pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
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
    /* The headers are in: refuse a declared body over the limit before
     * reading it (libmicrohttpd closes the connection after). */
    k = sf_alloc(sizeof *k);
    memset(k, 0, sizeof *k);
    sf__buf_init(&k->body, NULL, 0);
    *con_cls = k;
    const char *cl = sf__mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoll(cl, NULL, 10) > s->max_body) {
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
    if (!token_ok(s, c))
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
  if (!token_ok(s, c))
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
                             const sf_loc *loc) {
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
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
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
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)timeout_s, MHD_OPTION_NOTIFY_COMPLETED, &on_done, NULL, MHD_OPTION_END);
  if (!s->mhd) {
    close(s->listen_fd);
    sf_free(s);
    sf_runtime_error(loc, "serve.start: libmicrohttpd did not start on %s:%" PRId64, host, port);
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
  bool closed = s->in_flight == 0;
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
  if (stop)
    sf__mhd.stop_daemon(s->mhd);
  if (pool)
    sf__sched_block_end();
}
