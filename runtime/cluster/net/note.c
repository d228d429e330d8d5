/*
 * note.c — a line on stderr for the user, from either side: on the head it
 * goes out clear of the progress line (sched's sf__out_write), on a worker
 * it reaches the head through the SSH channel's stderr.  Apart from net.c
 * because the frame decoder's fuzzer links net.c without the scheduler.
 */
#include <stdarg.h>
#include <stdio.h>

#include "net.h"

/* A line on stderr (on the head: clear of the progress line). */
void sf__cluster_note(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (k < 0)
    return;
  if ((size_t)k > sizeof line - 2)
    k = (int)sizeof line - 2;
  line[k++] = '\n';
  sf__out_write(2, line, (size_t)k); /* on the head: clear of the progress line */
}
