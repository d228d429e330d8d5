/*
 * tfevents.c — TensorBoard event files (tfevents.h).
 *
 * Key design choices:
 *  - Protocol buffers by hand: an Event is wall_time (field 1, double),
 *    step (2, int64), then file_version (3, string) or summary (5, a
 *    Summary message of one Value: tag 1 string, simple_value 2 float).
 *    Five fields do not justify a protobuf dependency.
 *  - One open file per folder, kept for the process (std.tune writes one
 *    folder per trial, std.train one per run): a table of 64, under a
 *    mutex; the 65th folder closes the oldest file.
 *  - Every record is written with one fwrite and flushed, so a reader
 *    polling the file never sees half a record after a flush, and a run
 *    killed mid-training leaves every step before the kill readable.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "tfevents.h"

/* TFRecord's mask: a CRC of data that holds CRCs stays well distributed. */
uint32_t sf__crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* --------------------------------------------------------- protobuf */

typedef struct pb {
  unsigned char b[512];
  size_t n;
} pb;

static void pb_varint(pb *p, uint64_t v) {
  while (v >= 0x80 && p->n < sizeof p->b) {
    p->b[p->n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  if (p->n < sizeof p->b)
    p->b[p->n++] = (unsigned char)v;
}

static void pb_bytes(pb *p, const void *s, size_t n) {
  if (p->n + n > sizeof p->b)
    n = sizeof p->b - p->n;
  memcpy(p->b + p->n, s, n);
  p->n += n;
}

static void pb_key(pb *p, int field, int wire) { pb_varint(p, (uint64_t)field << 3 | (uint64_t)wire); }

/* little-endian fixed-width values, as protobuf and TFRecord write them */
static void le_bytes(unsigned char *out, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    out[i] = (unsigned char)(v >> (8 * i));
}

static void pb_double(pb *p, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  unsigned char b[8];
  le_bytes(b, u, 8);
  pb_key(p, field, 1);
  pb_bytes(p, b, 8);
}

static void pb_float(pb *p, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  unsigned char b[4];
  le_bytes(b, u, 4);
  pb_key(p, field, 5);
  pb_bytes(p, b, 4);
}

static void pb_string(pb *p, int field, const void *s, size_t n) {
  pb_key(p, field, 2);
  pb_varint(p, n);
  pb_bytes(p, s, n);
}

/* Event{wall_time, step, file_version} or Event{wall_time, step,
 * summary{value{tag, simple_value}}}. */
static void event(pb *e, double wall, int64_t step, const char *version, const char *tag,
                  double value) {
  e->n = 0;
  pb_double(e, 1, wall);
  if (step) {
    pb_key(e, 2, 0);
    pb_varint(e, (uint64_t)step);
  }
  if (version) {
    pb_string(e, 3, version, strlen(version));
    return;
  }
  pb v = {.n = 0}, s = {.n = 0};
  pb_string(&v, 1, tag, strlen(tag) > 200 ? 200 : strlen(tag));
  pb_float(&v, 2, (float)value);
  pb_string(&s, 1, v.b, v.n);
  pb_string(e, 5, s.b, s.n);
}

/* ---------------------------------------------------------- records */

static bool put_record(FILE *f, const pb *e) {
  unsigned char rec[sizeof e->b + 16], len[8];
  le_bytes(len, e->n, 8);
  memcpy(rec, len, 8);
  le_bytes(rec + 8, sf__crc32c_mask(sf__crc32c(0, len, 8)), 4);
  memcpy(rec + 12, e->b, e->n);
  le_bytes(rec + 12 + e->n, sf__crc32c_mask(sf__crc32c(0, e->b, e->n)), 4);
  return fwrite(rec, 1, e->n + 16, f) == e->n + 16 && fflush(f) == 0;
}

#define MAX_OPEN 64

typedef struct tbfile {
  char *dir;
  char *path;
  FILE *f;
  int64_t used; /* the call count when last written: the oldest goes first */
} tbfile;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tbfile files[MAX_OPEN];
static int64_t calls;

/* mkdir -p of dir. */
static bool make_dir(const char *dir) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return false;
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      if (mkdir(p, 0777) && errno != EEXIST)
        return false;
      *s = '/';
    }
  return !mkdir(p, 0777) || errno == EEXIST;
}

static void close_file(tbfile *t) {
  if (t->f)
    fclose(t->f);
  free(t->dir);
  free(t->path);
  memset(t, 0, sizeof *t);
}

/* The open file of dir, made with its first record; under mu. */
static tbfile *file_of(const char *dir, double wall, char *err, size_t errlen) {
  tbfile *free_slot = NULL, *oldest = &files[0];
  for (int i = 0; i < MAX_OPEN; i++) {
    if (files[i].dir && !strcmp(files[i].dir, dir))
      return &files[i];
    if (!files[i].dir && !free_slot)
      free_slot = &files[i];
    if (files[i].used < oldest->used)
      oldest = &files[i];
  }
  tbfile *t = free_slot ? free_slot : oldest;
  close_file(t);
  char host[256] = "localhost", path[4400];
  gethostname(host, sizeof host - 1);
  snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s.%d.sflow", dir, (long long)wall,
           host, (int)getpid());
  if (!make_dir(dir)) {
    snprintf(err, errlen, "cannot make the TensorBoard folder %s: %s", dir, strerror(errno));
    return NULL;
  }
  FILE *f = fopen(path, "ab");
  pb e;
  event(&e, wall, 0, "brain.Event:2", NULL, 0);
  if (!f || !put_record(f, &e)) {
    snprintf(err, errlen, "cannot write the TensorBoard file %s: %s", path, strerror(errno));
    if (f)
      fclose(f);
    return NULL;
  }
  t->dir = strdup(dir);
  t->path = strdup(path);
  t->f = f;
  return t;
}

bool sf__tb_scalar(const char *dir, const char *tag, int64_t step, double value,
                   double wall_time, char *err, size_t errlen) {
  pthread_mutex_lock(&mu);
  tbfile *t = file_of(dir, wall_time, err, errlen);
  bool ok = t != NULL;
  if (t) {
    t->used = ++calls;
    pb e;
    event(&e, wall_time, step, NULL, tag, value);
    if (!put_record(t->f, &e)) {
      snprintf(err, errlen, "cannot write the TensorBoard file %s: %s", t->path, strerror(errno));
      close_file(t);
      ok = false;
    }
  }
  pthread_mutex_unlock(&mu);
  return ok;
}

void sf__tb_close_all(void) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_OPEN; i++)
    close_file(&files[i]);
  pthread_mutex_unlock(&mu);
}
