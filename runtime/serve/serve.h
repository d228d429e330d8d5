/*
 * serve.h — the serving layer behind `import std.serve` (docs/serve.md):
 * an HTTP/1.1 server on libmicrohttpd (mhd.c loads it, http.c answers
 * connections), the routes, their versions and their replicas' bounded
 * queues with dynamic batching (route.c), Prometheus text (metrics.c), and
 * the C side of stdlib/serve.sflow's externs (std.c).  Above sched (a
 * replica's wait counts its pool thread out) and data (typed JSON).
 *
 * Key design choice: replicas pull.  A replica is an actor whose method
 * loops on serve.next / serve.reply, so no actor or method crosses into C;
 * a connection's thread decodes the body on arrival, puts the request on
 * the queue of the replica the power of two choices picks, and sleeps on
 * the request until that replica's reply wakes it.  One mutex per version
 * guards its replicas' queues; a request has its own mutex and condition.
 */
#ifndef SF_SERVE_H
#define SF_SERVE_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

#include "sched.h"
#include "data.h"

/* ------------------------------------------------------------ mhd.c */

/* Loads libmicrohttpd.so.12 once; false with a message naming the package
 * when it cannot be loaded.  The header is only for the types: programs
 * link nothing of it, so one that never serves needs no libmicrohttpd. */
bool sf__mhd_load(char *err, size_t errlen);
/* The library's functions this layer calls, set by sf__mhd_load. */
typedef struct sf__mhd_api {
  __typeof__(&MHD_start_daemon) start_daemon;
  __typeof__(&MHD_stop_daemon) stop_daemon;
  __typeof__(&MHD_quiesce_daemon) quiesce_daemon;
  __typeof__(&MHD_create_response_from_buffer) create_response_from_buffer;
  __typeof__(&MHD_create_response_from_callback) create_response_from_callback;
  __typeof__(&MHD_add_response_header) add_response_header;
  __typeof__(&MHD_queue_response) queue_response;
  __typeof__(&MHD_destroy_response) destroy_response;
  __typeof__(&MHD_lookup_connection_value) lookup_connection_value;
  __typeof__(&MHD_get_connection_info) get_connection_info;
} sf__mhd_api;
extern sf__mhd_api sf__mhd;

/* ---------------------------------------------------------- route.c */

/* Histogram buckets: request seconds, and batch sizes. */
#define SF__LAT_BUCKETS 14
#define SF__BATCH_BUCKETS 9
extern const double sf__lat_le[SF__LAT_BUCKETS];
/* The histogram bucket of a latency in seconds (SF__LAT_BUCKETS: +Inf). */
int sf__lat_bucket(double seconds);
extern const double sf__batch_le[SF__BATCH_BUCKETS];

/* One request, from its whole body to its answer.  The connection's
 * thread owns it and waits on cv; the replica's reply sets status, body
 * and done. */
typedef struct sf__sreq {
  struct sf__sreq *next; /* in a replica's queue, then its batch */
  /* Two holders: the connection's thread, and the queue and batch until
   * the answer; the last to let go frees it (sf__sreq_drop), so a
   * connection that gave up waiting (504) leaves it to a late answer. */
  _Atomic int refs;
  bool abandoned;
  void *value;           /* the decoded request, T's bytes; moved into next's array */
  void *copy;            /* while in a batch: a retained copy, to retry it elsewhere */
  int tries;             /* replicas that died holding it */
  int64_t arrived_ns;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  _Atomic bool ready; /* done, read without mu by a spinning wait (sf__spin) */
  int status;
  char *body; /* sf_alloc'ed answer */
  size_t body_len;
  /* Requests taken by serve.take (stream.c, docs/serve.md, "Continuous
   * batching"), under mu but for id and rt: */
  int64_t id;         /* > 0 once taken (written under mu too) */
  struct sf__route *rt;
  int fd;             /* the connection's socket, to notice a client gone */
  bool streaming;     /* send began an event stream: the connection answers it */
  bool finished;      /* finish: the stream ends once out is sent */
  bool cancelled;     /* the client went away (noticed once taken) */
  sf__buf out;        /* event bytes not yet handed to libmicrohttpd */
  size_t out_off;
} sf__sreq;

typedef struct sf__replica {
  sf__sreq *head, *tail; /* the queue */
  int64_t qlen;
  sf__sreq *batch; /* taken by next, not yet replied */
  int64_t batch_len;
  sf__sreq *running; /* taken by take, not yet answered or finished */
  int64_t nrunning;
  bool removed;
  bool dead; /* its loop failed holding a batch (route.c, on_replica_error) */
  pthread_cond_t cv; /* next waits here */
} sf__replica;

struct sf__server;
struct sf__route;

/* One version of a route: its replicas and their queues. */
typedef struct sf__endpoint {
  int64_t id;
  struct sf__server *srv;
  struct sf__route *route;
  char version[64];
  const sf_type *T; /* the request type */
  int64_t max_batch, qcap;
  int64_t wait_ns;
  _Atomic int64_t weight;
  pthread_mutex_t mu;
  sf__replica **reps;
  int64_t nreps, reps_cap;
  /* batch sizes, under mu */
  uint64_t batch_hist[SF__BATCH_BUCKETS + 1];
  uint64_t batch_count, batch_sum;
  uint64_t retries;       /* requests sent to another replica after a death */
  uint64_t answered;      /* requests its replicas' reply answered (serve.answered) */
  int64_t dead[64];       /* replicas that died, not yet reported by serve.dead */
  int64_t ndead;
} sf__endpoint;

/* The status codes counted per route, in this order. */
#define SF__NCODES 11
extern const int sf__codes[SF__NCODES];

/* A path and its versions; counters of its answers. */
typedef struct sf__route {
  char path[128];
  char token[256]; /* its own bearer token, in place of the server's ("": the server's) */
  size_t token_len;
  sf__endpoint *eps[16];
  _Atomic int64_t neps;
  pthread_mutex_t mu; /* the counters below */
  uint64_t codes[SF__NCODES];
  uint64_t lat_hist[SF__LAT_BUCKETS + 1];
  uint64_t lat_count;
  double lat_sum;
  /* event streams (serve.send): open now, events sent, seconds from the
   * whole body to the first event */
  int64_t streams_open;
  uint64_t events;
  uint64_t first_hist[SF__LAT_BUCKETS + 1];
  uint64_t first_count;
  double first_sum;
} sf__route;

enum { SF__RUNNING = 0, SF__DRAINING, SF__CLOSED };

/* An open TCP connection (MHD_OPTION_NOTIFY_CONNECTION), while its next
 * request's head must arrive by head_by (INT64_MAX: not waiting for one). */
typedef struct sf__sconn {
  struct sf__sconn *prev, *next;
  int fd;
  int64_t head_by;
  bool answered;  /* a request of it was answered: idle keep-alive, no 408 */
  bool lingering; /* answered 408 and half closed; read shut at head_by */
} sf__sconn;

typedef struct sf__server {
  int64_t id;
  struct MHD_Daemon *mhd;
  int listen_fd;
  char host[64];
  int port;
  char token[256];
  size_t token_len;
  int64_t max_body;
  int64_t request_timeout_ns; /* <= 0: none */
  int64_t head_timeout_ns;
  pthread_mutex_t mu; /* state, open, in_flight, routes being added */
  pthread_cond_t cv;  /* open reached 0, or state changed */
  _Atomic int state; /* written under mu; read anywhere */
  /* Requests from their whole arrival to their answer's last byte sent
   * (http.c, on_done): the stop waits for these, so none is cut off
   * mid-answer. */
  int64_t open;
  int64_t in_flight; /* route requests admitted, until answered (the gauge) */
  /* The connections, for the head deadline; the reaper thread closes
   * those past it. */
  pthread_mutex_t conns_mu;
  pthread_cond_t conns_cv;
  sf__sconn *conns;
  bool reaper_stop;
  pthread_t reaper;
  bool stopped; /* the daemon stopped (wait's work) */
  sf__route *routes[64];
  _Atomic int64_t nroutes;
  sf__route other; /* answers of no route: 404s, 401s, /metrics */
} sf__server;

/* The route of path, or NULL. */
sf__route *sf__route_find(sf__server *s, const char *path);
/* A version and then a replica for a request (weights, then the power of
 * two choices); queues it.  0 when queued, else the status to answer with
 * (503) and in *why the reason: every queue full, no replica yet, or no
 * version taking traffic. */
int sf__route_dispatch(sf__route *r, sf__sreq *q, const char **why);
/* Counts an answer of route r (NULL: the server's `other`). */
void sf__route_count(sf__server *s, sf__route *r, int status, double seconds);
/* Wakes every replica's next (the server closed). */
void sf__route_wake_all(sf__server *s);
/* The endpoint of an id, or a runtime error at loc. */
sf__endpoint *sf__endpoint_get(int64_t id, const sf_loc *loc);
sf__endpoint *sf__endpoint_new(sf__server *s, const char *path, const char *version,
                               const sf_type *T, int64_t max_batch, double wait_ms,
                               int64_t queue, int64_t weight, const char *token,
                               const sf_loc *loc);
int64_t sf__endpoint_add_replica(sf__endpoint *e);
/* Replica r's next batch; [] when stopped or removed with an empty queue,
 * or when timeout_ms > 0 passed with nothing queued. */
sf_array *sf__endpoint_next(sf__endpoint *e, int64_t r, const sf_type *T, double timeout_ms,
                            const sf_loc *loc);
/* The replicas that died since the last call (an i64[]). */
sf_array *sf__endpoint_dead(sf__endpoint *e, const sf_loc *loc);
int64_t sf__endpoint_live(sf__endpoint *e);
void sf__endpoint_reply(sf__endpoint *e, int64_t r, sf_array *answers, const sf_loc *loc);
/* The same with each answer's status (an i64[] of 200..599, NULL: 200s);
 * statuses that do not fit answer the batch 500 and are an error at loc. */
void sf__endpoint_reply_status(sf__endpoint *e, int64_t r, sf_array *answers,
                               sf_array *statuses, const sf_loc *loc);
void sf__endpoint_remove(sf__endpoint *e, int64_t r, const sf_loc *loc);
int64_t sf__endpoint_queued(sf__endpoint *e);
/* Requests the version's replicas answered with reply, dead ones' included. */
int64_t sf__endpoint_answered(sf__endpoint *e);
/* Answers a request (wakes its connection's thread, or drops the answer
 * when the connection gave up); takes body; lets go of the queue's hold. */
void sf__sreq_answer(sf__sreq *q, int status, char *body, size_t len);
/* Lets go of one hold; the last frees the request. */
void sf__sreq_drop(sf__sreq *q);
/* Replica r of e, with e->mu held; a runtime error at loc (mu let go)
 * naming serve.<what> when r was never added. */
sf__replica *sf__replica_at(sf__endpoint *e, int64_t r, const char *what, const sf_loc *loc);
/* Whether two descriptors are of the same request type. */
bool sf__same_type(const sf_type *a, const sf_type *b);
/* From take until the replica holds nothing: a runtime error unwinding
 * its loop takes it out (route.c, "Replicas that fail"). */
void sf__replica_arm(sf__endpoint *e, int64_t r);
void sf__replica_disarm(void);
/* Before a runtime error of the replica's own making (an id misused):
 * armed, so the error takes the replica out as one in its handler does. */
void sf__replica_misused(sf__endpoint *e, int64_t r);
/* Ends a request's stream with an error event (a replica died holding it);
 * lets go of the running set's hold. */
void sf__stream_abort(sf__sreq *q, const char *msg);

/* ---------------------------------------------------------- stream.c */

/* Up to max requests of replica r's queue into its running set, each with
 * an id, as J[] (J a struct { id: i64, req: T }); waits for one as long as
 * timeout_ms (< 0: until the server stops or r is removed; 0: not). */
sf_array *sf__endpoint_take(sf__endpoint *e, int64_t r, const sf_type *J, int64_t max,
                            double timeout_ms, const sf_loc *loc);
/* Answers request id of r's running set as one JSON body. */
void sf__endpoint_answer(sf__endpoint *e, int64_t r, int64_t id, const void *value,
                         const sf_type *T, int64_t status, const sf_loc *loc);
/* Appends one server-sent event to request id's stream (the first starts
 * it); false when its client is gone. */
bool sf__endpoint_send(sf__endpoint *e, int64_t r, int64_t id, const char *data, size_t len,
                       const sf_loc *loc);
/* Ends request id's stream (an empty one if nothing was sent). */
void sf__endpoint_finish(sf__endpoint *e, int64_t r, int64_t id, const sf_loc *loc);
/* Whether request id's client went away (or was answered 504). */
bool sf__endpoint_cancelled(sf__endpoint *e, int64_t r, int64_t id, const sf_loc *loc);
/* Whether the client of socket fd closed its end (nothing to read but
 * the end, or an error): how a connection notices a client gone. */
bool sf__peer_gone(int fd);
/* libmicrohttpd's reader and release of a stream's response (http.c). */
ssize_t sf__stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void sf__stream_free(void *cls);

/* Waits by spinning, up to the spin budget (SFLOW_SERVE_SPIN_US, default
 * 20 µs; 0: never), until ready(arg) holds: true when it does, false when
 * the budget ran out or as many threads as the machine has cores but one
 * spin already (then the caller sleeps as before).  A hand-off that
 * arrives within the budget then costs no sleep and no wake-up (route.c,
 * "Spinning before sleeping"). */
bool sf__spin(bool (*ready)(void *), void *arg);
/* A condition variable on CLOCK_MONOTONIC (sf__mono_ns deadlines). */
void sf__cond_init_mono(pthread_cond_t *cv);
/* An sf_alloc'ed {"error": msg} body. */
char *sf__error_body(const char *msg, size_t *len);

/* ---------------------------------------------------------- http.c */

sf__server *sf__server_start(const char *host, int64_t port, const char *token, int64_t max_body,
                             int64_t max_conn, int64_t timeout_s, double request_timeout_s,
                             double head_timeout_s, int64_t max_conn_per_ip, const sf_loc *loc);
sf__server *sf__server_get(int64_t id, const sf_loc *loc);
/* The server of an id (1, 2, ... in start order), or NULL: for --metrics-port. */
sf__server *sf__server_nth(int64_t id);
void sf__server_stop(sf__server *s);   /* starts the graceful stop */
void sf__server_wait(sf__server *s);   /* until the stop has finished */

/* -------------------------------------------------------- metrics.c */

/* The Prometheus text of server s into b. */
void sf__metrics_text(sf__server *s, sf__buf *b);

/* ------------------------------------------------------------ std.c */

/* The C side of stdlib/serve.sflow's externs (docs/language.md,
 * "Standard-library externs"): Server and Endpoint are structs of one id. */
void sf_std_serve_start(void *out, const sf_type *out_type, int64_t port, sf_str *host,
                        sf_str *token, int64_t max_body, int64_t max_connections,
                        int64_t timeout_s, double request_timeout_s, double head_timeout_s,
                        int64_t max_connections_per_ip, const sf_loc *loc);
void sf_std_serve_route(void *out, const sf_type *out_type, const void *s, const sf_type *s_type,
                        sf_str *path, int64_t max_batch, double wait_ms, int64_t queue,
                        sf_str *version, int64_t weight, sf_str *token, const sf_type *T,
                        const sf_loc *loc);
void sf_std_serve_reply_status(const void *ep, const sf_type *ep_type, int64_t replica,
                               sf_array *answers, sf_array *statuses, const sf_type *T,
                               const sf_loc *loc);
int64_t sf_std_serve_answered(const void *ep, const sf_type *ep_type, const sf_loc *loc);
sf_array *sf_std_serve_take(const void *ep, const sf_type *ep_type, int64_t replica, int64_t max,
                            double timeout_ms, const sf_type *J, const sf_loc *loc);
void sf_std_serve_answer(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                         const void *value, const sf_type *T, int64_t status, const sf_type *T_again,
                         const sf_loc *loc);
bool sf_std_serve_send(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                       sf_str *data, const sf_loc *loc);
void sf_std_serve_finish(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                         const sf_loc *loc);
bool sf_std_serve_cancelled(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                            const sf_loc *loc);
sf_str *sf_std_serve_new_token(const sf_loc *loc);
int64_t sf_std_serve_add_replica(const void *ep, const sf_type *ep_type, const sf_loc *loc);
sf_array *sf_std_serve_next(const void *ep, const sf_type *ep_type, int64_t replica,
                            double timeout_ms, const sf_type *T, const sf_loc *loc);
sf_array *sf_std_serve_dead(const void *ep, const sf_type *ep_type, const sf_loc *loc);
int64_t sf_std_serve_replicas(const void *ep, const sf_type *ep_type, const sf_loc *loc);
bool sf_std_serve_stopped(const void *s, const sf_type *s_type, const sf_loc *loc);
void sf_std_serve_reply(const void *ep, const sf_type *ep_type, int64_t replica,
                        sf_array *answers, const sf_type *T, const sf_loc *loc);
void sf_std_serve_remove_replica(const void *ep, const sf_type *ep_type, int64_t replica,
                                 const sf_loc *loc);
void sf_std_serve_set_weight(const void *ep, const sf_type *ep_type, int64_t weight,
                             const sf_loc *loc);
int64_t sf_std_serve_queue_len(const void *ep, const sf_type *ep_type, const sf_loc *loc);
int64_t sf_std_serve_port(const void *s, const sf_type *s_type, const sf_loc *loc);
sf_str *sf_std_serve_url(const void *s, const sf_type *s_type, const sf_loc *loc);
void sf_std_serve_wait(const void *s, const sf_type *s_type, const sf_loc *loc);
void sf_std_serve_stop(const void *s, const sf_type *s_type, const sf_loc *loc);

/* Whether the request carries "Authorization: Bearer TOKEN" with TOKEN
 * equal to token (len bytes; compared in constant time); true when len is
 * 0 (http.c; obs.c's endpoints use it too). */
bool sf__bearer_ok(struct MHD_Connection *c, const char *token, size_t len);

#endif
