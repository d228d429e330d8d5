/*
 * fileview.c — what the data formats share: whole files as read-only
 * views, writes by path (through core's outfile.c), positions as line and
 * column, UTF-8 validation.
 *
 * Key design choice: a regular file is mapped (MAP_PRIVATE, read-only), so
 * a 1 GB CSV costs no copy and no allocation before parsing starts; the
 * parsers need a NUL after the last byte to look ahead without a bounds
 * check, which a mapping gives for free unless the size is a multiple of
 * the page size, and then the view is mapped one page longer (an
 * anonymous page placed right after the file's pages).  Pipes and other
 * files without a size are read into memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"

static bool read_fd(int fd, sf__view *v) {
  size_t len;
  char *buf = sf__read_fd(fd, &len);
  if (!buf)
    return false;
  v->data = buf;
  v->len = len;
  v->map_len = 0;
  return true;
}

/* Maps size bytes of fd with at least one zero byte after them. */
static bool map_fd(int fd, size_t size, sf__view *v) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t total = (size + 1 + page - 1) / page * page;
  /* Reserve the whole range anonymous (zeros), then map the file over its
   * start: the tail stays zero-filled. */
  char *base = mmap(NULL, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return false;
  if (mmap(base, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
    int e = errno;
    munmap(base, total);
    errno = e;
    return false;
  }
  madvise(base, size, MADV_SEQUENTIAL | MADV_WILLNEED);
  v->data = base;
  v->len = size;
  v->map_len = total;
  return true;
}

bool sf__view_open(sf__view *v, const char *path) {
  int fd;
  do
    fd = open(path, O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return false;
  struct stat st;
  bool ok;
  if (fstat(fd, &st) != 0) {
    ok = false;
  } else if (S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    ok = false;
  } else if (S_ISREG(st.st_mode) && st.st_size > 0) {
    ok = map_fd(fd, (size_t)st.st_size, v);
  } else {
    ok = read_fd(fd, v);
  }
  int e = errno;
  close(fd);
  errno = e;
  v->name = path;
  return ok;
}

void sf__view_close(sf__view *v) {
  if (!v->data)
    return;
  if (v->map_len)
    munmap((void *)v->data, v->map_len);
  else
    sf_free((void *)v->data);
  v->data = NULL;
}

const char *sf__data_path(sf_str *path, const char *what, const sf_loc *loc) {
  const char *p = sf__str_data(path);
  if (sf__str_len(path) == 0)
    sf_runtime_error(loc, "cannot %s \"\": empty path", what);
  if ((int64_t)strlen(p) != sf__str_len(path)) {
    char q[600];
    sf__quote(p, (size_t)sf__str_len(path), 512, q, sizeof q);
    sf_runtime_error(loc, "cannot %s %s: the path holds a NUL byte", what, q);
  }
  return p;
}

void sf__view_open_or_fail(sf__view *v, sf_str *path, const sf_loc *loc) {
  const char *p = sf__data_path(path, "read", loc);
  if (!sf__view_open(v, p))
    sf_runtime_error(loc, "cannot read %s: %s", p, strerror(errno));
}

void sf__write_or_fail(sf_str *path, const char *data, size_t n, void (*done)(void *), void *arg,
                       const sf_loc *loc) {
  const char *p = sf__data_path(path, "write", loc);
  char why[300];
  bool ok = sf__write_file(p, data, n, 0, why, sizeof why);
  if (done) /* before the error, which does not return */
    done(arg);
  if (!ok)
    sf_runtime_error(loc, "cannot write %s: %s", p, why);
}

void sf__line_col(const char *buf, size_t off, int64_t *line, int64_t *col) {
  int64_t l = 1;
  size_t start = 0;
  for (size_t i = 0; i < off; i++)
    if (buf[i] == '\n') {
      l++;
      start = i + 1;
    }
  *line = l;
  *col = (int64_t)(off - start) + 1;
}

size_t sf__utf8_valid_prefix(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    /* ASCII runs eight bytes at a time: the common case of CSV and JSON. */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull)
        break;
      i += 8;
    }
    if (i >= n)
      break;
    size_t bad, k = s[i] < 0x80 ? 1 : sf__utf8_seq(s + i, n - i, &bad);
    if (!k)
      return i;
    i += k;
  }
  return n;
}
