/*
 * net.c — the helpers every side of the cluster layer shares: errors into
 * the caller's buffer, numeric socket addresses, and byte blobs shared by
 * reference count (note.c has the notes on stderr).  Nothing here needs
 * more than libc, so the frame decoder's fuzzer links it alone.
 *
 * Key design choice: they live at the bottom (net/) so that the head and
 * the worker never call each other for them; before the split a worker
 * reached into the head's launch.c for its notes and addresses.
 */
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

/* The error reporting every net module shares: formats into the caller's
 * buffer and returns -1, so callers can `return sf__net_fail(...)`. */
int sf__net_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (errlen)
    vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* Numeric "addr" and port of a socket address. */
void sf__addr_str(const struct sockaddr *sa, socklen_t sl, char *host, size_t hn, uint16_t *port) {
  char serv[16] = "0";
  if (getnameinfo(sa, sl, host, (socklen_t)hn, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV))
    snprintf(host, hn, "?");
  if (port)
    *port = (uint16_t)atoi(serv);
}

sf__shared *sf__shared_wrap(uint8_t *p, size_t n) {
  sf__shared *b = malloc(sizeof *b);
  if (!b) {
    free(p);
    return NULL;
  }
  b->refs = 1;
  b->p = p;
  b->n = n;
  return b;
}

sf__shared *sf__shared_copy(const void *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  if (!q)
    return NULL;
  if (n)
    memcpy(q, p, n);
  return sf__shared_wrap(q, n);
}

sf__shared *sf__shared_ref(sf__shared *b) {
  if (b)
    b->refs++;
  return b;
}

void sf__shared_unref(sf__shared *b) {
  if (b && --b->refs == 0) {
    free(b->p);
    free(b);
  }
}
