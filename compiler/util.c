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
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Block Block;
struct Block {
  Block *next;
  size_t used, cap;
  size_t mapped; /* bytes mapped with mmap, or 0 when the block came from calloc */
  _Alignas(16) char data[];
};

static Block *arena_head;
static size_t arena_next = 1 << 20; /* size of the next block; doubles to 32 MiB */

/* Blocks come straight from mmap: the kernel hands out zeroed pages, so
 * arena_alloc never clears memory, and blocks of 4 MiB and more are
 * 2 MiB-aligned and marked for transparent huge pages.  On a 100k-line
 * program page faults were a third of `sflowc --check` before this.  Under
 * a sanitizer blocks come from calloc instead, because LeakSanitizer does
 * not look for pointers inside private mappings. */
#if defined(__SANITIZE_ADDRESS__)
#define ARENA_MMAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_MMAP 0
#endif
#endif
#ifndef ARENA_MMAP
#define ARENA_MMAP 1
#endif

#define HUGE_PAGE ((size_t)2 << 20)

static Block *block_new(size_t need) {
  size_t cap = need > arena_next ? need : arena_next;
  if (arena_next < ((size_t)32 << 20))
    arena_next *= 2;
  Block *b = NULL;
#if ARENA_MMAP
  size_t total = (sizeof(Block) + cap + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
  char *p = mmap(NULL, total + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    /* Trim to a 2 MiB boundary so the kernel can back it with huge pages. */
    char *start = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > p)
      munmap(p, (size_t)(start - p));
    if (start + total < p + total + HUGE_PAGE)
      munmap(start + total, (size_t)(p + total + HUGE_PAGE - (start + total)));
#ifdef MADV_HUGEPAGE
    if (total >= 2 * HUGE_PAGE)
      madvise(start, total, MADV_HUGEPAGE);
#endif
    b = (Block *)start;
    b->mapped = total;
    cap = total - sizeof(Block);
  }
#endif
  if (!b) {
    b = calloc(1, sizeof(Block) + cap);
    if (!b)
      ice("out of memory (arena block of %zu bytes)", cap);
    b->mapped = 0;
  }
  b->used = 0;
  b->cap = cap;
  return b;
}

/* Memory from a block is zero: fresh pages from mmap or calloc, never
 * reused before arena_free_all. */
void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!arena_head || arena_head->used + n > arena_head->cap) {
    Block *b = block_new(n);
    b->next = arena_head;
    arena_head = b;
  }
  void *p = arena_head->data + arena_head->used;
  arena_head->used += n;
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
#if ARENA_MMAP
    if (arena_head->mapped)
      munmap(arena_head, arena_head->mapped);
    else
#endif
      free(arena_head);
    arena_head = next;
  }
  arena_next = 1 << 20;
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

/* The largest source file: offsets in a Loc are ints, and a bound keeps
 * `sflowc /dev/zero`-like mistakes from eating the machine's memory. */
#define SOURCE_MAX ((size_t)64 << 20)

/* What a path that cannot be compiled is, in words; NULL for a regular file. */
static const char *not_regular(mode_t m) {
  if (S_ISREG(m))
    return NULL;
  if (S_ISDIR(m))
    return "is a directory";
  if (S_ISCHR(m))
    return "is a character device, not a regular file";
  if (S_ISBLK(m))
    return "is a block device, not a regular file";
  if (S_ISFIFO(m))
    return "is a FIFO, not a regular file";
  if (S_ISSOCK(m))
    return "is a socket, not a regular file";
  return "is not a regular file";
}

char *read_file(const char *path, size_t *len, char *why, size_t whylen) {
  /* O_NONBLOCK so that opening a FIFO without a writer cannot hang; the
   * check below refuses it before anything is read. */
  errno = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  const char *bad = NULL;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(why, whylen, "%s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  if ((bad = not_regular(st.st_mode)) != NULL || (size_t)st.st_size > SOURCE_MAX) {
    snprintf(why, whylen, "%s", bad ? bad : "is larger than the 64 MiB a source file may have");
    close(fd);
    errno = EINVAL;
    return NULL;
  }
  Buf b = {0};
  char chunk[65536];
  ssize_t n;
  while ((n = read(fd, chunk, sizeof chunk)) > 0) {
    buf_putn(&b, chunk, (size_t)n);
    if (b.len > SOURCE_MAX) { /* the file grew while it was read */
      n = 0;
      snprintf(why, whylen, "is larger than the 64 MiB a source file may have");
      break;
    }
  }
  if (n < 0)
    snprintf(why, whylen, "%s", strerror(errno));
  close(fd);
  if (n < 0 || b.len > SOURCE_MAX) {
    buf_free(&b);
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
