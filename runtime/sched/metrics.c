/*
 * metrics.c — the run's metrics registry (metrics.h): families of
 * labelled series, the dashboard's curves and its recent errors.
 *
 * Key design choices:
 *  - A family is a name, a kind, a help line and its series; a series is
 *    its label text and a value (a histogram: bucket counts, sum, count).
 *    Families and series are found by name with a linear scan: a run has
 *    a few dozen families of a few series each, and the callers are
 *    per-step, not per-element.
 *  - Fixed bounds (families, series per family, points per curve) keep
 *    memory bounded in a run of any length; a series past the bound is
 *    dropped, not the run.
 *  - Values are written with the shortest text that reads back
 *    (sf__fmt_f64_repr), so a loss read back from Prometheus equals the
 *    one in the metrics CSV, which uses the same form.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

bool sf__metrics_on;

#define MAX_FAMILIES 128
#define MAX_SERIES 512
#define MAX_CURVES 16
#define MAX_POINTS 2000
#define MAX_ERRORS 32
#define NBUCKETS 12

static const double bucket_le[NBUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                           0.25,  0.5,   1,    2.5,   10,   60};

typedef struct series {
  char *labels;
  double v;                      /* gauge, counter */
  uint64_t hist[NBUCKETS + 1];   /* histogram: per bucket, +Inf last */
  uint64_t count;
  double sum;
} series;

typedef struct family {
  char name[96];
  char help[200];
  int kind;
  bool declared;
  series *s;
  int n, cap;
} family;

typedef struct curve {
  char name[48];
  double (*pt)[2];
  int n;
  int stride; /* only every stride-th point is kept, once thinned */
  int64_t seen;
} curve;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static family fams[MAX_FAMILIES];
static int nfams;
static curve curves[MAX_CURVES];
static int ncurves;
static char *errors[MAX_ERRORS];
static int64_t nerrors; /* ever recorded; the last MAX_ERRORS kept */

/* ------------------------------------------------------------ table */

static family *family_of(const char *name, bool make) {
  for (int i = 0; i < nfams; i++)
    if (!strcmp(fams[i].name, name))
      return &fams[i];
  if (!make || nfams == MAX_FAMILIES)
    return NULL;
  family *f = &fams[nfams++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->kind = SF__M_GAUGE;
  return f;
}

static series *series_of(family *f, const char *labels) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->s[i].labels, labels))
      return &f->s[i];
  if (f->n == MAX_SERIES)
    return NULL;
  if (f->n == f->cap) {
    int cap = f->cap ? f->cap * 2 : 4;
    series *s = realloc(f->s, (size_t)cap * sizeof *s);
    if (!s)
      return NULL;
    f->s = s;
    f->cap = cap;
  }
  char *l = strdup(labels);
  if (!l)
    return NULL;
  series *s = &f->s[f->n++];
  memset(s, 0, sizeof *s);
  s->labels = l;
  return s;
}

void sf__metric_declare(const char *name, int kind, const char *help) {
  pthread_mutex_lock(&mu);
  family *f = family_of(name, true);
  if (f && !f->declared) {
    f->declared = true;
    f->kind = kind;
    snprintf(f->help, sizeof f->help, "%s", help);
  }
  pthread_mutex_unlock(&mu);
}

int sf__metric_kind(const char *name) {
  pthread_mutex_lock(&mu);
  family *f = family_of(name, false);
  int kind = f && f->declared ? f->kind : -1;
  pthread_mutex_unlock(&mu);
  return kind;
}

static void update(const char *name, const char *labels, double v, int how) {
  if (!sf__metrics_on)
    return;
  pthread_mutex_lock(&mu);
  family *f = family_of(name, true);
  series *s = f ? series_of(f, labels ? labels : "") : NULL;
  if (s) {
    if (how == 0)
      s->v = v;
    else if (how == 1)
      s->v += v;
    else {
      int b = 0;
      while (b < NBUCKETS && !(v <= bucket_le[b]))
        b++;
      s->hist[b]++;
      s->count++;
      s->sum += v;
    }
  }
  pthread_mutex_unlock(&mu);
}

void sf__metric_set(const char *f, const char *l, double v) { update(f, l, v, 0); }
void sf__metric_add(const char *f, const char *l, double v) { update(f, l, v, 1); }
void sf__metric_observe(const char *f, const char *l, double v) { update(f, l, v, 2); }

void sf__metric_drop(const char *name, const char *prefix) {
  pthread_mutex_lock(&mu);
  family *f = family_of(name, false);
  size_t n = strlen(prefix);
  for (int i = 0; f && i < f->n;) {
    if (!strncmp(f->s[i].labels, prefix, n)) {
      free(f->s[i].labels);
      f->s[i] = f->s[--f->n];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&mu);
}

/* ----------------------------------------------------- curves, errors */

/* A full curve keeps every other point and from then on takes only every
 * stride-th, so it spans the whole run at a resolution that halves as
 * the run doubles. */
void sf__metric_point(const char *name, double x, double y) {
  if (!sf__metrics_on)
    return;
  pthread_mutex_lock(&mu);
  curve *c = NULL;
  for (int i = 0; i < ncurves && !c; i++)
    if (!strcmp(curves[i].name, name))
      c = &curves[i];
  if (!c && ncurves < MAX_CURVES) {
    c = &curves[ncurves];
    c->pt = malloc(MAX_POINTS * sizeof *c->pt);
    if (c->pt) {
      ncurves++;
      snprintf(c->name, sizeof c->name, "%s", name);
      c->stride = 1;
    } else {
      c = NULL;
    }
  }
  if (c && c->seen++ % c->stride == 0) {
    if (c->n == MAX_POINTS) {
      for (int i = 0; i < MAX_POINTS / 2; i++)
        memcpy(c->pt[i], c->pt[2 * i], sizeof c->pt[i]);
      c->n = MAX_POINTS / 2;
      c->stride *= 2;
    }
    c->pt[c->n][0] = x;
    c->pt[c->n][1] = y;
    c->n++;
  }
  pthread_mutex_unlock(&mu);
}

void sf__metric_event(const char *text) {
  if (!sf__metrics_on)
    return;
  char *t = strdup(text);
  if (!t)
    return;
  pthread_mutex_lock(&mu);
  char **slot = &errors[nerrors++ % MAX_ERRORS];
  free(*slot);
  *slot = t;
  pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------ output */

/* Prometheus' number text: NaN, +Inf, -Inf, else the shortest repr. */
static void num(sf__buf *b, double v) {
  char t[SF__FLOAT_BUF];
  if (isnan(v))
    snprintf(t, sizeof t, "NaN");
  else if (isinf(v))
    snprintf(t, sizeof t, "%sInf", v > 0 ? "+" : "-");
  else
    sf__fmt_f64_repr(v, t);
  sf__buf_put(b, t, strlen(t));
}

static void sample(sf__buf *b, const char *name, const char *suffix, const char *labels,
                   const char *extra, double v) {
  sf__buf_printf(b, "%s%s", name, suffix);
  if (*labels || *extra)
    sf__buf_printf(b, "{%s%s%s}", labels, *labels && *extra ? "," : "", extra);
  sf__buf_put(b, " ", 1);
  num(b, v);
  sf__buf_put(b, "\n", 1);
}

static const char *kind_text(int k) {
  return k == SF__M_COUNTER ? "counter" : k == SF__M_HISTOGRAM ? "histogram" : "gauge";
}

static void prom(sf__buf *b, bool flat) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nfams; i++) {
    family *f = &fams[i];
    if (!f->n || (flat && f->kind == SF__M_HISTOGRAM))
      continue; /* declared, never set: absent (a GPU family without a GPU) */
    if (f->declared && !flat)
      sf__buf_printf(b, "# HELP %s %s\n", f->name, f->help);
    sf__buf_printf(b, "# TYPE %s %s\n", f->name, kind_text(f->kind));
    for (int j = 0; j < f->n; j++) {
      series *s = &f->s[j];
      if (f->kind != SF__M_HISTOGRAM) {
        sample(b, f->name, "", s->labels, "", s->v);
        continue;
      }
      uint64_t cum = 0;
      for (int k = 0; k <= NBUCKETS; k++) {
        char le[48] = "le=\"+Inf\"";
        if (k < NBUCKETS)
          snprintf(le, sizeof le, "le=\"%g\"", bucket_le[k]);
        cum += s->hist[k];
        sample(b, f->name, "_bucket", s->labels, le, (double)cum);
      }
      sample(b, f->name, "_sum", s->labels, "", s->sum);
      sample(b, f->name, "_count", s->labels, "", (double)s->count);
    }
  }
  pthread_mutex_unlock(&mu);
}

void sf__metrics_prom(sf__buf *b) { prom(b, false); }
void sf__metrics_prom_flat(sf__buf *b) { prom(b, true); }

/* ------------------------------------------------ other nodes' figures */

/* One line of a worker's text: "# TYPE name kind" or "name{labels} value"
 * (labels as this file writes them: no '}' inside a value, which every
 * label value here is free of). Under mu. */
static void remote_line(int node, const char *p, size_t n, double *step, double *last_step) {
  char line[1024];
  if (n >= sizeof line)
    return;
  memcpy(line, p, n);
  line[n] = '\0';
  char name[96], kind[16];
  if (sscanf(line, "# TYPE %95s %15s", name, kind) == 2) {
    family *f = family_of(name, true);
    if (f && !f->declared)
      f->kind = !strcmp(kind, "counter") ? SF__M_COUNTER : SF__M_GAUGE;
    return;
  }
  if (line[0] == '#')
    return;
  size_t k = strcspn(line, "{ ");
  if (k == 0 || k >= sizeof name)
    return;
  memcpy(name, line, k);
  name[k] = '\0';
  const char *labels = "", *rest = line + k;
  if (*rest == '{') {
    char *close = strchr(line + k, '}');
    if (!close)
      return;
    *close = '\0';
    labels = line + k + 1;
    rest = close + 1;
  }
  char *end;
  double v = strtod(rest, &end);
  if (end == rest)
    return;
  char l[600];
  snprintf(l, sizeof l, "node=\"%d\"%s%s", node, *labels ? "," : "", labels);
  family *f = family_of(name, true);
  series *s = f ? series_of(f, l) : NULL;
  if (s)
    s->v = v;
  if (!strcmp(name, "sflow_train_step"))
    *step = v;
  /* The curves: one point per shipped step (the step's family comes
   * first in the text, loss and samples/s after it). */
  bool loss = !strcmp(name, "sflow_train_loss");
  if ((loss || !strcmp(name, "sflow_train_samples_per_second")) && *step > *last_step) {
    pthread_mutex_unlock(&mu); /* sf__metric_point takes it */
    sf__metric_point(loss ? "loss" : "samples_per_s", *step, v);
    pthread_mutex_lock(&mu);
  }
}

void sf__metrics_take_remote(int node, const char *text, size_t n) {
  static double last_step[256];
  if (!sf__metrics_on || node < 1 || node >= 256)
    return;
  double step = 0;
  pthread_mutex_lock(&mu);
  for (size_t at = 0; at < n;) {
    const char *nl = memchr(text + at, '\n', n - at);
    size_t len = nl ? (size_t)(nl - (text + at)) : n - at;
    remote_line(node, text + at, len, &step, &last_step[node]);
    at += len + 1;
  }
  if (step > last_step[node])
    last_step[node] = step;
  pthread_mutex_unlock(&mu);
}

/* s as a JSON string (labels carry quotes; errors any text). */
static void jstr(sf__buf *b, const char *s) { sf__buf_json_str(b, s, strlen(s)); }

/* JSON has no NaN or infinity: null in their place. */
static void jnum(sf__buf *b, double v) {
  if (!isfinite(v))
    sf__buf_put(b, "null", 4);
  else
    num(b, v);
}

void sf__metrics_json(sf__buf *b) {
  pthread_mutex_lock(&mu);
  sf__buf_put(b, "{\"families\":{", 13);
  bool first = true;
  for (int i = 0; i < nfams; i++) {
    family *f = &fams[i];
    if (!f->n)
      continue;
    sf__buf_printf(b, "%s\"%s\":[", first ? "" : ",", f->name);
    first = false;
    for (int j = 0; j < f->n; j++) {
      series *s = &f->s[j];
      sf__buf_put(b, j ? ",[" : "[", j ? 2 : 1);
      jstr(b, s->labels);
      sf__buf_put(b, ",", 1);
      if (f->kind == SF__M_HISTOGRAM) {
        sf__buf_printf(b, "%llu,", (unsigned long long)s->count);
        jnum(b, s->sum);
      } else {
        jnum(b, s->v);
      }
      sf__buf_put(b, "]", 1);
    }
    sf__buf_put(b, "]", 1);
  }
  sf__buf_put(b, "},\"series\":{", 12);
  for (int i = 0; i < ncurves; i++) {
    curve *c = &curves[i];
    sf__buf_printf(b, "%s\"%s\":[", i ? "," : "", c->name);
    for (int k = 0; k < c->n; k++) {
      sf__buf_put(b, k ? ",[" : "[", k ? 2 : 1);
      jnum(b, c->pt[k][0]);
      sf__buf_put(b, ",", 1);
      jnum(b, c->pt[k][1]);
      sf__buf_put(b, "]", 1);
    }
    sf__buf_put(b, "]", 1);
  }
  sf__buf_put(b, "},\"errors\":[", 12);
  int64_t lo = nerrors > MAX_ERRORS ? nerrors - MAX_ERRORS : 0;
  for (int64_t k = lo; k < nerrors; k++) {
    if (k > lo)
      sf__buf_put(b, ",", 1);
    jstr(b, errors[k % MAX_ERRORS]);
  }
  sf__buf_printf(b, "],\"errors_total\":%lld}", (long long)nerrors);
  pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------- std.metrics' externs */

/* stdlib/metrics.sflow: a program's own families.  The name and label
 * text are checked on every call, with the flags or without, so a bad
 * one fails the same way in every run. */

static bool name_ok(const char *s, bool colon) {
  if (!*s)
    return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
    if (!letter && !(p > s && c >= '0' && c <= '9'))
      return false;
  }
  return true;
}

/* `k="v",k2="v2"` with \\, \" and \n the only escapes; where it goes
 * wrong into *why. */
static bool labels_ok(const char *s, const char **why) {
  const char *p = s;
  while (*p) {
    const char *k = p;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
           (p > k && *p >= '0' && *p <= '9'))
      p++;
    if (p == k) {
      *why = "a label name ([a-zA-Z_][a-zA-Z0-9_]*)";
      return false;
    }
    if (p - k >= 2 && k[0] == '_' && k[1] == '_') {
      *why = "a label name not starting with __ (Prometheus keeps those)";
      return false;
    }
    if (*p++ != '=' || *p++ != '"') {
      *why = "=\" after the label name";
      return false;
    }
    while (*p && *p != '"') {
      if (*p == '\n') {
        *why = "a value without a raw newline (write \\n)";
        return false;
      }
      if (*p == '\\') {
        p++;
        if (*p != '\\' && *p != '"' && *p != 'n') {
          *why = "an escape \\\\, \\\" or \\n in the value";
          return false;
        }
      }
      p++;
    }
    if (*p++ != '"') {
      *why = "a closing \" of the value";
      return false;
    }
    if (*p == ',' && p[1])
      p++;
    else if (*p) {
      *why = ", between labels";
      return false;
    }
  }
  return true;
}

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

static void std_update(const char *fn, int kind, sf_str *name, sf_str *labels, sf_str *help,
                       double v, const sf_loc *loc) {
  const char *n = name->data, *l = labels->data, *why = NULL;
  if ((size_t)name->len != strlen(n) || !name_ok(n, true) || (size_t)name->len >= sizeof fams[0].name)
    sf_runtime_error(loc, "metrics.%s: \"%s\" is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, under %zu "
                     "bytes)", fn, n, sizeof fams[0].name);
  if (!strncmp(n, "sflow_", 6))
    sf_runtime_error(loc, "metrics.%s: \"%s\": names starting with sflow_ are the runtime's", fn, n);
  if ((size_t)labels->len != strlen(l) || !labels_ok(l, &why))
    sf_runtime_error(loc, "metrics.%s: the labels of %s, '%s', are not Prometheus label text: expected %s",
                     fn, n, l, why ? why : "no NUL byte");
  if (isnan(v) && kind != SF__M_GAUGE)
    sf_runtime_error(loc, "metrics.%s: %s by NaN", fn, n);
  if (kind == SF__M_COUNTER && v < 0)
    sf_runtime_error(loc, "metrics.count: %s by %g: a counter only rises (use metrics.gauge)", n, v);
  int was = sf__metric_kind(n);
  if (was < 0) {
    sf__metric_declare(n, kind, help->len ? help->data : n);
    was = sf__metric_kind(n);
  }
  if (was >= 0 && was != kind)
    sf_runtime_error(loc, "metrics.%s: %s is a %s (its first use), not a %s", fn, n, kind_names[was],
                     kind_names[kind]);
  if (kind == SF__M_GAUGE)
    sf__metric_set(n, l, v);
  else if (kind == SF__M_COUNTER)
    sf__metric_add(n, l, v);
  else
    sf__metric_observe(n, l, v);
}

void sf_std_metrics_gauge(sf_str *name, double v, sf_str *labels, sf_str *help, const sf_loc *loc) {
  std_update("gauge", SF__M_GAUGE, name, labels, help, v, loc);
}

void sf_std_metrics_count(sf_str *name, double by, sf_str *labels, sf_str *help, const sf_loc *loc) {
  std_update("count", SF__M_COUNTER, name, labels, help, by, loc);
}

void sf_std_metrics_observe(sf_str *name, double s, sf_str *labels, sf_str *help, const sf_loc *loc) {
  std_update("observe", SF__M_HISTOGRAM, name, labels, help, s, loc);
}

void sf_std_metrics_point(sf_str *series, double x, double y, const sf_loc *loc) {
  if (!series->len || (size_t)series->len >= sizeof curves[0].name || (size_t)series->len != strlen(series->data))
    sf_runtime_error(loc, "metrics.point: the series name '%s' is empty, has a NUL byte or is %zu bytes or "
                     "more", series->data, sizeof curves[0].name);
  sf__metric_point(series->data, x, y);
}
