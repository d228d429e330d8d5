/*
 * metrics.c — /metrics in the Prometheus text format, version 0.0.4:
 * requests by route and code, request seconds and batch sizes as
 * histograms, event streams open, events sent and seconds to the first,
 * queue lengths per replica, replicas, weights, in flight.
 *
 * Key design choice: the numbers are read under the same mutexes that
 * guard them (a route's counters, a version's queues), one at a time, so a
 * scrape never stops traffic for longer than one copy; label values are
 * route paths and versions, which route.c restricts to characters that
 * need no escaping.
 */
#include "serve.h"

static void le_text(double le, char *buf, size_t n) { snprintf(buf, n, "%g", le); }

static void route_lines(sf__buf *b, sf__route *r, int part) {
  pthread_mutex_lock(&r->mu);
  if (part == 0) {
    for (int i = 0; i < SF__NCODES; i++)
      if (r->codes[i]) {
        char code[16];
        if (sf__codes[i])
          snprintf(code, sizeof code, "%d", sf__codes[i]);
        else
          snprintf(code, sizeof code, "other");
        sf__buf_printf(b, "sflow_serve_requests_total{route=\"%s\",code=\"%s\"} %llu\n", r->path, code,
            (unsigned long long)r->codes[i]);
      }
  } else if (part == 2) {
    sf__buf_printf(b, "sflow_serve_streams_open{route=\"%s\"} %lld\n", r->path,
        (long long)r->streams_open);
  } else if (part == 3) {
    sf__buf_printf(b, "sflow_serve_stream_events_total{route=\"%s\"} %llu\n", r->path,
        (unsigned long long)r->events);
  } else if (part == 4) {
    uint64_t cum = 0;
    for (int i = 0; i <= SF__LAT_BUCKETS; i++) {
      cum += r->first_hist[i];
      char le[32] = "+Inf";
      if (i < SF__LAT_BUCKETS)
        le_text(sf__lat_le[i], le, sizeof le);
      sf__buf_printf(b, "sflow_serve_stream_first_event_seconds_bucket{route=\"%s\",le=\"%s\"} %llu\n",
          r->path, le, (unsigned long long)cum);
    }
    char sum[SF__FLOAT_BUF];
    sf__fmt_f64_repr(r->first_sum, sum);
    sf__buf_printf(b, "sflow_serve_stream_first_event_seconds_sum{route=\"%s\"} %s\n", r->path, sum);
    sf__buf_printf(b, "sflow_serve_stream_first_event_seconds_count{route=\"%s\"} %llu\n", r->path,
        (unsigned long long)r->first_count);
  } else {
    uint64_t cum = 0;
    for (int i = 0; i <= SF__LAT_BUCKETS; i++) {
      cum += r->lat_hist[i];
      char le[32] = "+Inf";
      if (i < SF__LAT_BUCKETS)
        le_text(sf__lat_le[i], le, sizeof le);
      sf__buf_printf(b, "sflow_serve_request_seconds_bucket{route=\"%s\",le=\"%s\"} %llu\n", r->path, le,
          (unsigned long long)cum);
    }
    char sum[SF__FLOAT_BUF]; /* the shortest text that reads back, as Prometheus' Go writes */
    sf__fmt_f64_repr(r->lat_sum, sum);
    sf__buf_printf(b, "sflow_serve_request_seconds_sum{route=\"%s\"} %s\n", r->path, sum);
    sf__buf_printf(b, "sflow_serve_request_seconds_count{route=\"%s\"} %llu\n", r->path,
        (unsigned long long)r->lat_count);
  }
  pthread_mutex_unlock(&r->mu);
}

static void endpoint_lines(sf__buf *b, sf__endpoint *e, int part) {
  const char *path = e->route->path, *v = e->version;
  pthread_mutex_lock(&e->mu);
  switch (part) {
  case 0:
    for (int64_t i = 0; i < e->nreps; i++)
      sf__buf_printf(b, "sflow_serve_queue_length{route=\"%s\",version=\"%s\",replica=\"%lld\"} %lld\n", path,
          v, (long long)i, (long long)e->reps[i]->qlen);
    break;
  case 1: {
    uint64_t cum = 0;
    for (int i = 0; i <= SF__BATCH_BUCKETS; i++) {
      cum += e->batch_hist[i];
      char le[32] = "+Inf";
      if (i < SF__BATCH_BUCKETS)
        le_text(sf__batch_le[i], le, sizeof le);
      sf__buf_printf(b, "sflow_serve_batch_size_bucket{route=\"%s\",version=\"%s\",le=\"%s\"} %llu\n", path, v,
          le, (unsigned long long)cum);
    }
    sf__buf_printf(b, "sflow_serve_batch_size_sum{route=\"%s\",version=\"%s\"} %llu\n", path, v,
        (unsigned long long)e->batch_sum);
    sf__buf_printf(b, "sflow_serve_batch_size_count{route=\"%s\",version=\"%s\"} %llu\n", path, v,
        (unsigned long long)e->batch_count);
    break;
  }
  case 2: {
    int64_t live = 0;
    for (int64_t i = 0; i < e->nreps; i++)
      live += !e->reps[i]->removed;
    sf__buf_printf(b, "sflow_serve_replicas{route=\"%s\",version=\"%s\"} %lld\n", path, v, (long long)live);
    break;
  }
  case 3:
    sf__buf_printf(b, "sflow_serve_weight{route=\"%s\",version=\"%s\"} %lld\n", path, v,
        (long long)atomic_load(&e->weight));
    break;
  case 4:
    sf__buf_printf(b, "sflow_serve_retries_total{route=\"%s\",version=\"%s\"} %llu\n", path, v,
        (unsigned long long)e->retries);
    break;
  }
  pthread_mutex_unlock(&e->mu);
}

static void each_endpoint(sf__server *s, sf__buf *b, int part) {
  int64_t n = atomic_load(&s->nroutes);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < atomic_load(&s->routes[i]->neps); j++)
      endpoint_lines(b, s->routes[i]->eps[j], part);
}

void sf__metrics_text(sf__server *s, sf__buf *b) {
  int64_t n = atomic_load(&s->nroutes);
  sf__buf_printf(b, "# HELP sflow_serve_requests_total Requests answered, by route and status code.\n"
         "# TYPE sflow_serve_requests_total counter\n");
  for (int64_t i = 0; i < n; i++)
    route_lines(b, s->routes[i], 0);
  route_lines(b, &s->other, 0);
  sf__buf_printf(b, "# HELP sflow_serve_request_seconds Seconds from a request's whole body to its answer.\n"
         "# TYPE sflow_serve_request_seconds histogram\n");
  for (int64_t i = 0; i < n; i++)
    route_lines(b, s->routes[i], 1);
  sf__buf_printf(b, "# HELP sflow_serve_streams_open Event streams (serve.send) being sent.\n"
         "# TYPE sflow_serve_streams_open gauge\n");
  for (int64_t i = 0; i < n; i++)
    route_lines(b, s->routes[i], 2);
  sf__buf_printf(b, "# HELP sflow_serve_stream_events_total Server-sent events sent (serve.send).\n"
         "# TYPE sflow_serve_stream_events_total counter\n");
  for (int64_t i = 0; i < n; i++)
    route_lines(b, s->routes[i], 3);
  sf__buf_printf(b, "# HELP sflow_serve_stream_first_event_seconds Seconds from a request's whole body to its stream's first event.\n"
         "# TYPE sflow_serve_stream_first_event_seconds histogram\n");
  for (int64_t i = 0; i < n; i++)
    route_lines(b, s->routes[i], 4);
  sf__buf_printf(b, "# HELP sflow_serve_queue_length Requests waiting in a replica's queue.\n"
         "# TYPE sflow_serve_queue_length gauge\n");
  each_endpoint(s, b, 0);
  sf__buf_printf(b, "# HELP sflow_serve_batch_size Requests per batch handed to a replica.\n"
         "# TYPE sflow_serve_batch_size histogram\n");
  each_endpoint(s, b, 1);
  sf__buf_printf(b, "# HELP sflow_serve_replicas Replicas taking requests, per version.\n"
         "# TYPE sflow_serve_replicas gauge\n");
  each_endpoint(s, b, 2);
  sf__buf_printf(b, "# HELP sflow_serve_weight A version's weight in its route's traffic.\n"
         "# TYPE sflow_serve_weight gauge\n");
  each_endpoint(s, b, 3);
  sf__buf_printf(b, "# HELP sflow_serve_retries_total Requests sent to another replica after theirs failed.\n"
         "# TYPE sflow_serve_retries_total counter\n");
  each_endpoint(s, b, 4);
  pthread_mutex_lock(&s->mu);
  int64_t fl = s->in_flight;
  pthread_mutex_unlock(&s->mu);
  sf__buf_printf(b, "# HELP sflow_serve_in_flight Requests being decoded, queued or computed.\n"
         "# TYPE sflow_serve_in_flight gauge\n"
         "sflow_serve_in_flight %lld\n", (long long)fl);
}
