/*
 * obs.c — the endpoints of --metrics-port and --dashboard, and the
 * sampler thread behind them and --trace's counter tracks.
 *
 * Key design choices:
 *  - Each port is a libmicrohttpd daemon of its own with one internal
 *    thread (a scrape is a few kilobytes built in memory): GET /metrics
 *    is the Prometheus text, GET /api/state the dashboard's JSON, GET /
 *    the page.  Both ports answer all three, so one flag is enough for
 *    either use.
 *  - The address is 127.0.0.1 unless --metrics-bind says otherwise; any
 *    other address needs a bearer token from SFLOW_METRICS_TOKEN (an
 *    environment variable, not a flag: a command line is visible to every
 *    user of the host), checked in constant time as std.serve does.
 *  - The registry is read under its own lock; before each answer the
 *    sampler's figures are refreshed, so a scrape never shows a figure
 *    older than the scrape.  The sampler thread runs every 250 ms for the
 *    dashboard and the trace; it takes the same lock as a scrape, so the
 *    two never interleave a sample.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <unistd.h>

#include "obs.h"

#define SAMPLE_MS 250

static struct MHD_Daemon *daemons[2];
static int listen_fds[2] = {-1, -1};
static char token[256];
static size_t token_len;
static pthread_t sampler;
static bool sampler_running;
static pthread_mutex_t sample_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t stop_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cv = PTHREAD_COND_INITIALIZER;
static bool stopping;

static void sample_now(void) {
  pthread_mutex_lock(&sample_mu);
  sf__obs_sample();
  pthread_mutex_unlock(&sample_mu);
}

/* ------------------------------------------------------------ answers */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               const char *body, size_t n) {
  struct MHD_Response *r =
      sf__mhd.create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  sf__mhd.add_response_header(r, "Content-Type", type);
  sf__mhd.add_response_header(r, "Cache-Control", "no-store");
  if (status == 401)
    sf__mhd.add_response_header(r, "WWW-Authenticate", "Bearer");
  enum MHD_Result ok = sf__mhd.queue_response(c, status, r);
  sf__mhd.destroy_response(r);
  return ok;
}

static bool token_ok(struct MHD_Connection *c) { return sf__bearer_ok(c, token, token_len); }

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **state) {
  (void)cls, (void)version, (void)upload_data;
  static int first_call;
  if (!*state) { /* the head only: no body is read */
    *state = &first_call;
    return MHD_YES;
  }
  *upload_size = 0;
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    static const char m[] = "only GET is answered here\n";
    return respond(c, 405, "text/plain", m, sizeof m - 1);
  }
  if (!token_ok(c)) {
    static const char m[] = "a bearer token is required (SFLOW_METRICS_TOKEN)\n";
    return respond(c, 401, "text/plain", m, sizeof m - 1);
  }
  if (!strcmp(url, "/") || !strcmp(url, "/index.html"))
    return respond(c, 200, "text/html; charset=utf-8", sf__dashboard_html,
                   strlen(sf__dashboard_html));
  bool prom = !strcmp(url, "/metrics"), json = !strcmp(url, "/api/state");
  if (!prom && !json) {
    static const char m[] = "not found: /metrics, /api/state and / are served here\n";
    return respond(c, 404, "text/plain", m, sizeof m - 1);
  }
  sample_now();
  char storage[4096];
  sf__buf b;
  sf__buf_init(&b, storage, sizeof storage);
  if (prom) {
    sf__metrics_prom(&b);
    /* std.serve's families, of the first server (a second's would repeat
     * the family names; each server's own /metrics has its own). */
    sf__server *s = sf__server_nth(1);
    if (s)
      sf__metrics_text(s, &b);
  } else
    sf__metrics_json(&b);
  enum MHD_Result ok =
      respond(c, 200, prom ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
              b.data, b.len);
  sf__buf_free(&b);
  return ok;
}

/* ------------------------------------------------------------ start */

static bool loopback(const struct in_addr *a) { return (ntohl(a->s_addr) >> 24) == 127; }

static bool listen_on(const char *host, int64_t port, int *fd, char *err, size_t errlen) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    snprintf(err, errlen, "--metrics-bind \"%.64s\" is not an IPv4 address (127.0.0.1, "
             "0.0.0.0, ...)", host);
    return false;
  }
  if (!loopback(&a.sin_addr) && !token_len) {
    snprintf(err, errlen, "--metrics-bind %s reaches beyond this host: set SFLOW_METRICS_TOKEN "
             "to the bearer token that scrapes must bring", host);
    return false;
  }
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(*fd, (struct sockaddr *)&a, sizeof a) || listen(*fd, 64)) {
    snprintf(err, errlen, "cannot listen on %s:%lld: %s", host, (long long)port,
             strerror(errno));
    if (*fd >= 0)
      close(*fd);
    *fd = -1;
    return false;
  }
  return true;
}

static void *sampler_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&stop_mu);
  while (!stopping) {
    pthread_mutex_unlock(&stop_mu);
    sample_now();
    pthread_mutex_lock(&stop_mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += SAMPLE_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    if (!stopping)
      pthread_cond_timedwait(&stop_cv, &stop_mu, &ts);
  }
  pthread_mutex_unlock(&stop_mu);
  return NULL;
}

bool sf__obs_start(char *err, size_t errlen) {
  int64_t ports[2] = {sf__options.metrics_port, sf__options.dashboard_port};
  bool serve = ports[0] || ports[1];
  /* A worker of such a run samples for the head (cluster/metrics_ship.c). */
  bool worker = (sf__options.worker || sf__launched.rank > 0) && sf__options.worker_metrics;
  if (!serve && !sf__trace_on && !worker)
    return true;
  if (worker)
    sf__metrics_on = true;
  if (ports[0] && ports[0] == ports[1]) {
    snprintf(err, errlen, "--metrics-port and --dashboard are both %lld: one port serves both "
             "(/metrics and /), so give one of them", (long long)ports[0]);
    return false;
  }
  if (serve) {
    const char *t = getenv("SFLOW_METRICS_TOKEN");
    if (t && strlen(t) >= sizeof token) {
      snprintf(err, errlen, "SFLOW_METRICS_TOKEN is longer than 255 bytes");
      return false;
    }
    snprintf(token, sizeof token, "%s", t ? t : "");
    token_len = strlen(token);
    if (!sf__mhd_load(err, errlen))
      return false;
    sf__metrics_on = true;
  }
  sf__obs_declare();
  const char *host = sf__options.metrics_bind ? sf__options.metrics_bind : "127.0.0.1";
  for (int i = 0; i < 2; i++) {
    if (!ports[i])
      continue;
    if (!listen_on(host, ports[i], &listen_fds[i], err, errlen))
      goto fail;
    daemons[i] = sf__mhd.start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL,
                                      NULL, &on_request, NULL, MHD_OPTION_LISTEN_SOCKET,
                                      listen_fds[i], MHD_OPTION_CONNECTION_LIMIT, 64u,
                                      MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!daemons[i]) {
      snprintf(err, errlen, "libmicrohttpd did not start on %s:%lld", host, (long long)ports[i]);
      goto fail;
    }
  }
  sample_now();
  if (pthread_create(&sampler, NULL, sampler_main, NULL)) {
    snprintf(err, errlen, "cannot start the metrics sampler: %s", strerror(errno));
    goto fail;
  }
  sampler_running = true;
  return true;
fail:
  sf__obs_stop();
  return false;
}

void sf__obs_stop(void) {
  if (sampler_running) {
    pthread_mutex_lock(&stop_mu);
    stopping = true;
    pthread_cond_signal(&stop_cv);
    pthread_mutex_unlock(&stop_mu);
    pthread_join(sampler, NULL);
    sampler_running = false;
    sample_now(); /* the trace's counters and a last scrape see the end */
  }
  for (int i = 0; i < 2; i++) {
    if (daemons[i])
      sf__mhd.stop_daemon(daemons[i]);
    daemons[i] = NULL;
    if (listen_fds[i] >= 0)
      close(listen_fds[i]);
    listen_fds[i] = -1;
  }
}
