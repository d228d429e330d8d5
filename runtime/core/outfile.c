/*
 * outfile.c — how sflow writes a file it names by path: nn.save, the data
 * writers (CSV, JSON, JSONL, .npy, bytes), std.tune's --out, --trace, actor
 * checkpoints and the GPU kernel cache all go through here.
 *
 * Key design choice: what the path names decides how it is written, as
 * the shell's `>` would write it, and nothing that is not a regular file
 * is ever replaced, chmod'ed or chown'ed (docs/runtime.md, "Files sflow
 * writes").  Decided from lstat, then stat through a symlink:
 *  - nothing, or a regular file: a new file beside it, created with
 *    O_EXCL under a hidden name of this process's own
 *    (DIR/.NAME.tmp-PID-N), fsync'ed
 *    and renamed over the path, then the folder fsync'ed; a reader never
 *    sees half a file and two writers never share a temporary file.  A
 *    replaced file keeps its mode (and, for root, its owner);
 *    Where no file may be created beside it (a read-only folder, procfs)
 *    a file we may write is truncated and written in place, as `>` does;
 *  - a symlink to a regular file: the same, over the file it resolves to,
 *    so the link stays a link;
 *  - a dangling symlink: the file is created through the link, in place;
 *  - a FIFO or a character device (`/dev/null`, a terminal): opened as it
 *    is, never truncated, and written in place; opening a FIFO waits for a
 *    reader.  A path that is the file of stdout or stderr (`/dev/stdout`,
 *    or `--out out.txt > out.txt`) is written through that descriptor,
 *    after what the program printed;
 *  - a directory, a block device or a socket: refused.
 * With SF__OUT_ATOMIC (checkpoints, the kernel cache: a torn file there
 * is damage, not output) only the rename cases are allowed; a FIFO, a
 * device, a dangling link or stdout's file is refused, naming what it is.
 * Replacing the path by rename whatever it named would turn a FIFO or a
 * link into a regular file, and, run as root, replace a device node:
 * `--out /dev/null` once left a 19 KB regular file as the machine's
 * /dev/null.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static void say(char *why, size_t n, const char *what) {
  if (why && n)
    snprintf(why, n, "%s", what);
}

/* A new file beside path, hidden and named for this process and a counter
 * (DIR/.NAME.tmp-PID-N: a listing of the folder, or a reader matching
 * names, never takes it for the file); -1 with errno set. */
static int open_temp(sf__outfile *o, const char *path, mode_t mode) {
  static _Atomic unsigned seq;
  const char *slash = strrchr(path, '/');
  int dirlen = slash ? (int)(slash - path + 1) : 0;
  for (int tries = 0; tries < 100; tries++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned k = atomic_fetch_add(&seq, 1) ^ (unsigned)ts.tv_nsec;
    int n = snprintf(o->tmp, sizeof o->tmp, "%.*s.%s.tmp-%d-%u", dirlen, path, path + dirlen,
                     (int)getpid(), k);
    if (n < 0 || (size_t)n >= sizeof o->tmp) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  return -1;
}

/* Rename mode: the bytes go to a temporary file beside path (whose folder
 * must therefore exist and be writable now). */
static bool open_renamed(sf__outfile *o, const char *path, const struct stat *old, char *why,
                         size_t n) {
  if (strlen(path) >= sizeof o->dest) {
    errno = ENAMETOOLONG;
    say(why, n, strerror(errno));
    return false;
  }
  snprintf(o->dest, sizeof o->dest, "%s", path);
  o->fd = open_temp(o, path, 0666);
  if (o->fd < 0) {
    int e = errno;
    o->tmp[0] = '\0';
    if (e == ENOENT || e == ENOTDIR)
      say(why, n, "its folder does not exist");
    else if (why && n)
      snprintf(why, n, "cannot create a file in its folder: %s", strerror(e));
    errno = e;
    return false;
  }
  if (old) { /* a replaced file keeps its mode and, where we may, its owner */
    if (fchown(o->fd, old->st_uid, old->st_gid) != 0) {
      /* not root: the new file is ours, as any file we create */
    }
    (void)fchmod(o->fd, old->st_mode & 07777);
  }
  return true;
}

/* In place: the path opened as it is, or a duplicate of fd (stdout or
 * stderr) when fd >= 0. */
static bool open_in_place(sf__outfile *o, const char *path, int fd, int flags, char *why,
                          size_t n) {
  o->tmp[0] = '\0';
  if (fd >= 0)
    fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  else
    do
      fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0666);
    while (fd < 0 && errno == EINTR);
  o->fd = fd;
  if (fd < 0)
    say(why, n, strerror(errno));
  return fd >= 0;
}

/* 1 or 2 when st is the file of stdout or stderr, else -1. */
static int std_fd_of(const struct stat *st) {
  for (int fd = 1; fd <= 2; fd++) {
    struct stat s;
    if (fstat(fd, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino)
      return fd;
  }
  return -1;
}

/* What m names, for a refusal. */
static const char *kind_of(mode_t m) {
  return S_ISDIR(m)    ? "it is a directory"
         : S_ISBLK(m)  ? "it is a block device"
         : S_ISSOCK(m) ? "it is a socket"
         : S_ISFIFO(m) ? "it is a FIFO"
         : S_ISCHR(m)  ? "it is a character device"
                       : "it is not a file, a FIFO or a character device";
}

static bool refuse(char *why, size_t n, const char *what, bool atomic) {
  if (why && n)
    snprintf(why, n, "%s%s", what, atomic ? ", and this file must be replaced whole" : "");
  errno = EINVAL;
  return false;
}

bool sf__outfile_open(sf__outfile *o, const char *path, int flags, char *why, size_t n) {
  bool atomic = flags & SF__OUT_ATOMIC;
  o->fd = -1;
  o->tmp[0] = o->dest[0] = '\0';
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOTDIR) {
      say(why, n, "a part of its folder is not a directory");
      return false;
    }
    if (errno == ENOENT)
      return open_renamed(o, path, NULL, why, n);
    say(why, n, strerror(errno));
    return false;
  }
  bool link = S_ISLNK(st.st_mode);
  if (link && stat(path, &st) != 0) {
    if (errno != ENOENT) {
      say(why, n, strerror(errno));
      return false;
    }
    if (atomic)
      return refuse(why, n, "it is a symlink to nothing", true);
    /* A dangling link: create what it points to, as `>` would. */
    return open_in_place(o, path, -1, O_CREAT | O_TRUNC, why, n);
  }
  int std = std_fd_of(&st);
  if (std >= 0)
    return atomic ? refuse(why, n, "it is the program's own output", true)
                  : open_in_place(o, path, std, 0, why, n);
  if (S_ISREG(st.st_mode)) {
    char real[PATH_MAX];
    if (link && !realpath(path, real)) {
      say(why, n, strerror(errno));
      return false;
    }
    if (open_renamed(o, link ? real : path, &st, why, n))
      return true;
    /* A file we may write in a folder that takes no new file (procfs and
     * sysfs files, a shared file in a read-only folder): in place, as `>`
     * does, where a whole replacement is not required.  Not after ENOSPC
     * and the like: truncating the old file then would lose it. */
    if (atomic || (errno != EACCES && errno != EPERM && errno != EROFS && errno != ENOENT))
      return false;
    return open_in_place(o, path, -1, O_TRUNC, why, n);
  }
  if ((S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) && !atomic)
    return open_in_place(o, path, -1, 0, why, n);
  return refuse(why, n, kind_of(st.st_mode), atomic && (S_ISFIFO(st.st_mode) ||
                                                        S_ISCHR(st.st_mode)));
}

/* A FIFO whose reader went away must fail the write with EPIPE, not end
 * the process with SIGPIPE: the signal is blocked on this thread while the
 * bytes go out (a pipe raises it on the writing thread) and a pending one
 * is taken back. */
bool sf__outfile_write(sf__outfile *o, const void *data, size_t n) {
  if (o->tmp[0])
    return sf__write_all(o->fd, data, n);
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool ok = sf__write_all(o->fd, data, n);
  int e = errno;
  struct timespec zero = {0, 0};
  (void)sigtimedwait(&pipe_set, NULL, &zero); /* signals of a kind do not queue */
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = e;
  return ok;
}

static void fsync_folder_of(const char *path) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

bool sf__outfile_commit(sf__outfile *o) {
  bool renamed = o->tmp[0] != '\0';
  bool ok = !renamed || fsync(o->fd) == 0;
  int e = errno;
  if (close(o->fd) != 0 && ok) { /* delayed write errors (NFS, a full disk) */
    ok = false;
    e = errno;
  }
  o->fd = -1;
  if (renamed && ok && rename(o->tmp, o->dest) != 0) {
    ok = false;
    e = errno;
  }
  if (renamed && !ok)
    unlink(o->tmp);
  if (renamed && ok)
    fsync_folder_of(o->dest);
  o->tmp[0] = '\0';
  errno = e;
  return ok;
}

void sf__outfile_abort(sf__outfile *o) {
  if (o->fd >= 0)
    close(o->fd);
  o->fd = -1;
  if (o->tmp[0])
    unlink(o->tmp);
  o->tmp[0] = '\0';
}

bool sf__write_file(const char *path, const void *data, size_t n, int flags, char *why,
                    size_t wn) {
  sf__outfile o;
  if (!sf__outfile_open(&o, path, flags, why, wn))
    return false;
  if (!sf__outfile_write(&o, data, n)) {
    int e = errno;
    sf__outfile_abort(&o);
    say(why, wn, strerror(e));
    errno = e;
    return false;
  }
  if (!sf__outfile_commit(&o)) {
    say(why, wn, strerror(errno));
    return false;
  }
  return true;
}
