/*
 * std.c — the C side of stdlib/serve.sflow's @extern functions: argument
 * checks and the handles (Server and Endpoint are structs of one id, an
 * index into http.c's and route.c's tables), then the layer's own calls.
 *
 * Key design choice: a handle is a plain number, not an object, so a
 * Server or an Endpoint is an ordinary value that goes into actor
 * methods' arguments, structs and arrays without reference counting; the
 * tables live as long as the process, as the servers do.
 */
#include <errno.h>
#include <unistd.h>

#include "serve.h"

static int64_t handle_id(const void *h, const sf_type *t, const sf_loc *loc) {
  return *(int64_t *)sf__field(t, (void *)h, "id", SF_I64, loc);
}

static sf__server *server(const void *s, const sf_type *t, const sf_loc *loc) {
  return sf__server_get(handle_id(s, t, loc), loc);
}

static sf__endpoint *endpoint(const void *e, const sf_type *t, const sf_loc *loc) {
  return sf__endpoint_get(handle_id(e, t, loc), loc);
}

void sf_std_serve_start(void *out, const sf_type *out_type, int64_t port, sf_str *host,
                        sf_str *token, int64_t max_body, int64_t max_connections,
                        int64_t timeout_s, double request_timeout_s, double head_timeout_s,
                        int64_t max_connections_per_ip, const sf_loc *loc) {
  sf__server *s = sf__server_start(sf__str_data(host), port, sf__str_data(token), max_body,
                                   max_connections, timeout_s, request_timeout_s, head_timeout_s,
                                   max_connections_per_ip, loc);
  *(int64_t *)sf__field(out_type, out, "id", SF_I64, loc) = s->id;
}

void sf_std_serve_route(void *out, const sf_type *out_type, const void *s, const sf_type *s_type,
                        sf_str *path, int64_t max_batch, double wait_ms, int64_t queue,
                        sf_str *version, int64_t weight, sf_str *token, const sf_type *T,
                        const sf_loc *loc) {
  sf__endpoint *e = sf__endpoint_new(server(s, s_type, loc), sf__str_data(path),
                                     sf__str_data(version), T, max_batch, wait_ms, queue, weight,
                                     sf__str_data(token), loc);
  *(int64_t *)sf__field(out_type, out, "id", SF_I64, loc) = e->id;
}

int64_t sf_std_serve_add_replica(const void *ep, const sf_type *ep_type, const sf_loc *loc) {
  return sf__endpoint_add_replica(endpoint(ep, ep_type, loc));
}

sf_array *sf_std_serve_next(const void *ep, const sf_type *ep_type, int64_t replica,
                            double timeout_ms, const sf_type *T, const sf_loc *loc) {
  return sf__endpoint_next(endpoint(ep, ep_type, loc), replica, T, timeout_ms, loc);
}

sf_array *sf_std_serve_dead(const void *ep, const sf_type *ep_type, const sf_loc *loc) {
  return sf__endpoint_dead(endpoint(ep, ep_type, loc), loc);
}

int64_t sf_std_serve_replicas(const void *ep, const sf_type *ep_type, const sf_loc *loc) {
  return sf__endpoint_live(endpoint(ep, ep_type, loc));
}

bool sf_std_serve_stopped(const void *s, const sf_type *s_type, const sf_loc *loc) {
  sf__server *v = server(s, s_type, loc);
  pthread_mutex_lock(&v->mu);
  bool closed = v->state == SF__CLOSED;
  pthread_mutex_unlock(&v->mu);
  return closed;
}

void sf_std_serve_reply(const void *ep, const sf_type *ep_type, int64_t replica,
                        sf_array *answers, const sf_type *T, const sf_loc *loc) {
  sf__endpoint_reply(endpoint(ep, ep_type, loc), replica, answers, loc);
}

void sf_std_serve_reply_status(const void *ep, const sf_type *ep_type, int64_t replica,
                               sf_array *answers, sf_array *statuses, const sf_type *T,
                               const sf_loc *loc) {
  sf__endpoint_reply_status(endpoint(ep, ep_type, loc), replica, answers, statuses, loc);
}

void sf_std_serve_remove_replica(const void *ep, const sf_type *ep_type, int64_t replica,
                                 const sf_loc *loc) {
  sf__endpoint_remove(endpoint(ep, ep_type, loc), replica, loc);
}

void sf_std_serve_set_weight(const void *ep, const sf_type *ep_type, int64_t weight,
                             const sf_loc *loc) {
  if (weight < 0)
    sf_runtime_error(loc, "serve.set_weight: weight %" PRId64 " is negative", weight);
  atomic_store(&endpoint(ep, ep_type, loc)->weight, weight);
}

sf_array *sf_std_serve_take(const void *ep, const sf_type *ep_type, int64_t replica, int64_t max,
                            double timeout_ms, const sf_type *J, const sf_loc *loc) {
  return sf__endpoint_take(endpoint(ep, ep_type, loc), replica, J, max, timeout_ms, loc);
}

void sf_std_serve_answer(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                         const void *value, const sf_type *T, int64_t status, const sf_type *T_again,
                         const sf_loc *loc) {
  sf__endpoint_answer(endpoint(ep, ep_type, loc), replica, id, value, T, status, loc);
}

bool sf_std_serve_send(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                       sf_str *data, const sf_loc *loc) {
  return sf__endpoint_send(endpoint(ep, ep_type, loc), replica, id, sf__str_data(data),
                           (size_t)sf__str_len(data), loc);
}

void sf_std_serve_finish(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                         const sf_loc *loc) {
  sf__endpoint_finish(endpoint(ep, ep_type, loc), replica, id, loc);
}

bool sf_std_serve_cancelled(const void *ep, const sf_type *ep_type, int64_t replica, int64_t id,
                            const sf_loc *loc) {
  return sf__endpoint_cancelled(endpoint(ep, ep_type, loc), replica, id, loc);
}

int64_t sf_std_serve_answered(const void *ep, const sf_type *ep_type, const sf_loc *loc) {
  return sf__endpoint_answered(endpoint(ep, ep_type, loc));
}

/* 128 bits from the OS as 32 hex digits: a token nobody can guess. */
sf_str *sf_std_serve_new_token(const sf_loc *loc) {
  unsigned char raw[16];
  if (getentropy(raw, sizeof raw))
    sf_runtime_error(loc, "serve.new_token: getentropy: %s", strerror(errno));
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  return sf_str_new(hex, 32);
}

int64_t sf_std_serve_queue_len(const void *ep, const sf_type *ep_type, const sf_loc *loc) {
  return sf__endpoint_queued(endpoint(ep, ep_type, loc));
}

int64_t sf_std_serve_port(const void *s, const sf_type *s_type, const sf_loc *loc) {
  return server(s, s_type, loc)->port;
}

sf_str *sf_std_serve_url(const void *s, const sf_type *s_type, const sf_loc *loc) {
  sf__server *v = server(s, s_type, loc);
  char buf[128];
  int n = snprintf(buf, sizeof buf, "http://%s:%d", v->host, v->port);
  return sf_str_new(buf, n);
}

void sf_std_serve_wait(const void *s, const sf_type *s_type, const sf_loc *loc) {
  sf__server_wait(server(s, s_type, loc));
}

void sf_std_serve_stop(const void *s, const sf_type *s_type, const sf_loc *loc) {
  sf__server_stop(server(s, s_type, loc));
}
