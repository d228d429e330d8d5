/*
 * util.c — the compiler's arena, growable buffers, the source table and
 * internal-error reporting.
 *
 * The arena is a chain of large blocks; every front-end object is carved
 * from it and the whole chain is released once at the end of compilation
 * (or between language-server requests), so no pass ever frees a node.
 */
#include "sflowc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct Block Block;
struct Block {
  Block *next;
  size_t used, cap;
  _Alignas(16) char data[];
};

static Block *arena_head;

void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!arena_head || arena_head->used + n > arena_head->cap) {
    size_t cap = n > (1 << 20) ? n : (1 << 20);
    Block *b = malloc(sizeof(Block) + cap);
    if (!b)
      ice("out of memory (arena block of %zu bytes)", cap);
    b->next = arena_head;
    b->used = 0;
    b->cap = cap;
    arena_head = b;
  }
  void *p = arena_head->data + arena_head->used;
  arena_head->used += n;
  memset(p, 0, n);
  return p;
}

char *arena_strndup(const char *s, size_t n) {
  char *p = arena_alloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(const char *s) { return arena_strndup(s, strlen(s)); }

char *arena_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

void arena_free_all(void) {
  while (arena_head) {
    Block *next = arena_head->next;
    free(arena_head);
    arena_head = next;
  }
}

/* ------------------------------------------------------------------ Buf */

static void buf_reserve(Buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap)
    return;
  size_t cap = b->cap ? b->cap * 2 : 256;
  while (cap < b->len + extra + 1)
    cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p)
    ice("out of memory (buffer of %zu bytes)", cap);
  b->data = p;
  b->cap = cap;
}

void buf_putn(Buf *b, const char *s, size_t n) {
  buf_reserve(b, n);
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}

void buf_putc(Buf *b, char c) { buf_putn(b, &c, 1); }
void buf_puts(Buf *b, const char *s) { buf_putn(b, s, strlen(s)); }

void buf_printf(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  buf_reserve(b, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void buf_free(Buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* -------------------------------------------------------------- sources */

static Source *sources;
static int nsources, capsources;

int src_add(const char *path, const char *text, size_t len, const char *modname) {
  if (nsources == capsources) {
    capsources = capsources ? capsources * 2 : 8;
    sources = realloc(sources, sizeof(Source) * (size_t)capsources);
    if (!sources)
      ice("out of memory");
  }
  char *copy = arena_alloc(len + 1);
  memcpy(copy, text, len);
  sources[nsources] = (Source){arena_strdup(path), copy, len, arena_strdup(modname)};
  return nsources++;
}

Source *src_get(int id) {
  if (id < 0 || id >= nsources)
    return NULL;
  return &sources[id];
}

int src_count(void) { return nsources; }

/* Forgets every source; their text lives in the arena, so call this with
 * arena_free_all (the language server does between analyses). */
void src_reset(void) { nsources = 0; }

char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  Buf b = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    buf_putn(&b, chunk, n);
  int err = ferror(f);
  fclose(f);
  if (err) {
    buf_free(&b);
    errno = EIO;
    return NULL;
  }
  if (!b.data)
    buf_putn(&b, "", 0);
  *len = b.len;
  return b.data;
}

_Noreturn void ice_at(const char *cfile, int cline, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "sflowc: internal compiler error at %s:%d: ", cfile, cline);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nplease report this bug with the source that triggered it\n");
  exit(101);
}
