/*
 * io.c — the file builtins behind std.io: read_file, write_file,
 * append_file, file_exists, read_lines; and its @extern functions stat,
 * list_dir, resolve and the generic save<T> and load<T>.
 *
 * Files are read and written whole with plain POSIX calls, retrying on
 * EINTR and short transfers; a replacing write goes through outfile.c's
 * rule (a regular file replaced whole, a FIFO or a device in place).  Key design choice: every failure is a runtime
 * error that names the operation, the path and the system's reason
 * (`cannot read "x.txt": No such file or directory`), because in a long
 * training run a wrong path must be obvious from the one line it prints.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

_Noreturn static void io_fail(const char *what, sf_str *path, int err, const sf_loc *loc) {
  char q[600];
  sf__quote(sf__str_data(path), (size_t)sf__str_len(path), 512, q, sizeof q);
  sf_runtime_error(loc, "cannot %s %s: %s", what, q, strerror(err));
}

/* The path as a C string; a NUL byte inside it would silently name a
 * different file, so it is refused. */
static const char *c_path(const char *what, sf_str *path, const sf_loc *loc) {
  const char *p = sf__str_data(path);
  if ((int64_t)strlen(p) != sf__str_len(path) || sf__str_len(path) == 0)
    io_fail(what, path, sf__str_len(path) ? EINVAL : ENOENT, loc);
  return p;
}

char *sf__read_fd(int fd, size_t *out_len) {
  size_t cap = 4096, len = 0;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    cap = (size_t)st.st_size + 1; /* +1 so the final read sees EOF at once */
  char *buf = sf_alloc(cap + 1);
  for (;;) {
    if (len == cap) {
      cap *= 2;
      buf = sf__realloc(buf, cap + 1);
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = errno;
      sf_free(buf);
      errno = e;
      return NULL;
    }
    if (r == 0)
      break;
    len += (size_t)r;
  }
  buf[len] = '\0';
  *out_len = len;
  return buf;
}

/* Reads all of fd into a new string; returns NULL with errno set on error. */
static sf_str *read_all(int fd) {
  size_t len;
  char *buf = sf__read_fd(fd, &len);
  if (!buf)
    return NULL;
  sf_str *s = sf_str_new(buf, (int64_t)len);
  sf_free(buf);
  return s;
}

sf_str *sf_read_file(sf_str *path, const sf_loc *loc) {
  const char *p = c_path("read", path, loc);
  int fd;
  do
    fd = open(p, O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    io_fail("read", path, errno, loc);
  sf_str *s = read_all(fd);
  int e = errno;
  close(fd);
  if (!s)
    io_fail("read", path, e, loc);
  return s;
}

/* Replacing goes through sf__write_file (outfile.c: a regular file
 * replaced whole, a FIFO or a char device written in place, anything else
 * refused).  Appending opens the path as `>>` does, but never writes to a
 * block device, a directory or a socket. */
void sf_write_file(sf_str *path, sf_str *text, const sf_loc *loc) {
  const char *p = c_path("write", path, loc);
  char why[300], q[600];
  if (!sf__write_file(p, sf__str_data(text), (size_t)sf__str_len(text), 0, why, sizeof why)) {
    sf__quote(sf__str_data(path), (size_t)sf__str_len(path), 512, q, sizeof q);
    sf_runtime_error(loc, "cannot write %s: %s", q, why);
  }
}

void sf_append_file(sf_str *path, sf_str *text, const sf_loc *loc) {
  const char *what = "append to";
  const char *p = c_path(what, path, loc);
  int fd;
  do
    fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND | O_NOCTTY, 0666);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    io_fail(what, path, errno, loc);
  struct stat st;
  if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) &&
      !S_ISCHR(st.st_mode)) {
    close(fd);
    char q[600];
    sf__quote(sf__str_data(path), (size_t)sf__str_len(path), 512, q, sizeof q);
    sf_runtime_error(loc, "cannot append to %s: it is %s", q,
                     S_ISBLK(st.st_mode) ? "a block device" : "not a file, a FIFO or a device");
  }
  bool ok = sf__write_all(fd, sf__str_data(text), (size_t)sf__str_len(text));
  int e = errno;
  /* close() reports delayed write errors (NFS, full disk): check it too. */
  if (close(fd) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok)
    io_fail(what, path, e ? e : EIO, loc);
}

bool sf_file_exists(sf_str *path) {
  const char *p = sf__str_data(path);
  if ((int64_t)strlen(p) != sf__str_len(path) || !*p)
    return false;
  struct stat st;
  return stat(p, &st) == 0;
}

/* Number of lines: a final line without '\n' counts, an empty tail after
 * the last '\n' does not. */
static int64_t count_lines(const char *d, int64_t n) {
  int64_t lines = 0;
  for (const char *c = d; (c = memchr(c, '\n', (size_t)(d + n - c))); c++)
    lines++;
  return lines + (n > 0 && d[n - 1] != '\n');
}

sf_array *sf_read_lines(sf_str *path, const sf_loc *loc) {
  sf_str *text = sf_read_file(path, loc);
  const char *d = sf__str_data(text);
  int64_t n = sf__str_len(text);
  sf_array *a = sf_array_new(&sf_type_str, count_lines(d, n), loc);
  sf_str **out = a->data;
  const char *c = d, *end = d + n;
  for (int64_t i = 0; i < a->len; i++) {
    const char *nl = memchr(c, '\n', (size_t)(end - c));
    const char *e = nl ? nl : end;
    int64_t len = e - c;
    if (len > 0 && c[len - 1] == '\r')
      len--;
    out[i] = sf_str_new(c, len);
    c = e + 1;
  }
  sf_release(text);
  return a;
}

/* io.stat(path) -> FileInfo { size: i64, is_dir: bool, modified: f64 }. */
void sf_std_io_stat(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc) {
  const char *p = c_path("stat", path, loc);
  struct stat st;
  if (stat(p, &st) != 0)
    io_fail("stat", path, errno, loc);
  *(int64_t *)sf__field(out_type, out, "size", SF_I64, loc) = (int64_t)st.st_size;
  *(bool *)sf__field(out_type, out, "is_dir", SF_BOOL, loc) = S_ISDIR(st.st_mode);
  *(double *)sf__field(out_type, out, "modified", SF_F64, loc) =
      (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
}

const char *sf__source_dir;

/* io.resolve(path) -> str: path itself when it names a file or folder from
 * the working directory (or is absolute); else, for a relative path, the
 * same path under the folder of the program's source file when it exists
 * there, so an example's "data/digits.csv" is found from the folder it was
 * compiled in as from examples/; else path unchanged, so whatever reads it
 * next fails naming it as the user wrote it (or says what it likes: a
 * program may check io.exists itself). */
sf_str *sf_std_io_resolve(sf_str *path, const sf_loc *loc) {
  if (sf__str_len(path) == 0) { /* "" is "none" to many flags: kept */
    sf_retain(path);
    return path;
  }
  const char *p = c_path("find", path, loc);
  const char *dir = sf__source_dir ? sf__source_dir : "";
  if (access(p, F_OK) == 0 || p[0] == '/' || !*dir) {
    sf_retain(path);
    return path;
  }
  size_t n = strlen(dir) + 1 + strlen(p);
  char *full = sf_alloc(n + 1);
  snprintf(full, n + 1, "%s/%s", dir, p);
  bool there = access(full, F_OK) == 0;
  sf_str *r = there ? sf_str_new(full, (int64_t)n) : path;
  if (!there)
    sf_retain(path);
  sf_free(full);
  return r;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* io.list_dir(path) -> str[]: the entries' names, sorted bytewise, without
 * "." and "..", so a program that walks a data folder sees the same order
 * on every node whatever the file system returns. */
sf_array *sf_std_io_list_dir(sf_str *path, const sf_loc *loc) {
  const char *p = c_path("list", path, loc);
  DIR *d = opendir(p);
  if (!d)
    io_fail("list", path, errno, loc);
  size_t n = 0, cap = 16;
  char **names = sf__alloc_n(cap, sizeof *names);
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    if (n == cap) {
      names = sf__realloc(names, 2 * cap * sizeof *names);
      cap *= 2;
    }
    size_t len = strlen(e->d_name);
    names[n] = sf_alloc(len + 1);
    memcpy(names[n++], e->d_name, len + 1);
  }
  int err = errno;
  closedir(d);
  if (err) {
    for (size_t i = 0; i < n; i++)
      sf_free(names[i]);
    sf_free(names);
    io_fail("list", path, err, loc);
  }
  qsort(names, n, sizeof *names, name_cmp);
  sf_array *a = sf_array_new(&sf_type_str, (int64_t)n, loc);
  sf_str **items = a->data;
  for (size_t i = 0; i < n; i++) {
    items[i] = sf_str_new(names[i], (int64_t)strlen(names[i]));
    sf_free(names[i]);
  }
  sf_free(names);
  return a;
}

/* ------------------------------------------------------- save and load */

#define VALUE_MAGIC "sflow value 1\n"

void sf_std_io_save(sf_str *path, const void *value, const sf_type *T, const sf_type *T_again, const sf_loc *loc) {
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  const char *name = T->name ? T->name : "?";
  sf__buf_put(&b, VALUE_MAGIC, strlen(VALUE_MAGIC));
  sf__buf_put(&b, name, strlen(name));
  sf__buf_put(&b, "\n", 1);
  sf__ser_value(&b, T, value);
  sf_str *bytes = sf_str_new(b.data, (int64_t)b.len);
  sf__buf_free(&b);
  sf_write_file(path, bytes, loc);
  sf_release(bytes);
}

/* The value read back must be of the type it was saved as: the header's
 * name is compared first (so a wrong T is named, not misread), then the
 * bytes must be exactly one value of T. */
void sf_std_io_load(void *out, const sf_type *T, sf_str *path, const sf_type *T_again, const sf_loc *loc) {
  sf_str *s = sf_read_file(path, loc);
  const char *p = sf__str_data(s), *end = p + sf__str_len(s);
  const char *name = T->name ? T->name : "?";
  size_t ml = strlen(VALUE_MAGIC), nl = strlen(name);
  char q[600];
  sf__quote(sf__str_data(path), (size_t)sf__str_len(path), 512, q, sizeof q);
  if ((size_t)(end - p) < ml || memcmp(p, VALUE_MAGIC, ml) != 0) {
    sf_release(s);
    sf_runtime_error(loc, "cannot load %s: not a file written by io.save", q);
  }
  p += ml;
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  if (!eol || (size_t)(eol - p) != nl || memcmp(p, name, nl) != 0) {
    char was[200];
    int wl = eol ? (int)(eol - p < 190 ? eol - p : 190) : 0;
    snprintf(was, sizeof was, "%.*s", wl, p);
    sf_release(s);
    sf_runtime_error(loc, "cannot load %s as %s: it holds a %s", q, name, eol ? was : "damaged header");
  }
  sf__reader r = {(const unsigned char *)eol + 1, (const unsigned char *)end};
  bool ok = sf__de_value(&r, T, out) && r.p == r.end;
  sf_release(s);
  if (!ok) {
    sf_value_release(T, out);
    memset(out, 0, (size_t)T->size);
    sf_runtime_error(loc, "cannot load %s: the file is damaged (not one %s)", q, name);
  }
}
