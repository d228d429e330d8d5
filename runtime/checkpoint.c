/*
 * checkpoint.c — `@checkpoint(every = k)`: an actor's state written every
 * k completed calls, and read back on --resume (and, later, when a node
 * dies and the actor restarts elsewhere).
 *
 * On a worker of a --nodes run the state is not written there: it is
 * shipped to the head (sf__checkpoint_ship, set by ractor.c), which keeps
 * the newest for restarts and writes it here (sf__checkpoint_write_state),
 * so --resume finds the same files as after a single-node run.
 *
 * One file per checkpoint, `<dir>/ckpt/<Actor>-<spawn>-<rank>.<calls>`:
 *
 *   "SFC2" | u64 calls | u64 g.all epoch | u64 payload length |
 *   u32 CRC-32C of payload | payload = the state (serial.c)
 *
 * Key design choices:
 *  - Atomic: write a temporary file, fsync it, rename it into place,
 *    fsync the folder.  A crash at any point leaves the previous
 *    checkpoint whole; a torn temporary file is never read (its name does
 *    not match) and is removed at the next start.
 *  - Checked: a file whose CRC or length is wrong is skipped on load and
 *    the next older one is used; the last three are kept for that.
 *  - Ordered with the journal: the journal is flushed and synced before a
 *    checkpoint is written, so a checkpoint never holds a call the journal
 *    does not know about.
 *  - Written on the actor's own thread between two calls, when its state
 *    is quiet: no locks and no copy of the state.
 *  - Groups checkpoint as a whole: a member writes after every k-th call
 *    it received through g.all (its "epoch"), which every member receives
 *    in the same order, so all members have checkpoints at the same
 *    epochs.  On --resume the group restores at the newest epoch for which
 *    every member has a valid file; the calls after it are re-run by all
 *    members together, so their collectives meet again.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define KEEP 3
#define MAGIC "SFC2"
#define HEAD 32 /* magic 4, calls 8, epoch 8, payload length 8, CRC 4 */

const char *sf__checkpoint_dir(void);

static void ckpt_dir(char *out, size_t n) { snprintf(out, n, "%s/ckpt", sf__checkpoint_dir()); }

/* "Counter-0-2." : the prefix of one actor's files. */
static void prefix_named(const sf_actor_desc *d, int64_t id, int64_t rank, char *out, size_t n) {
  snprintf(out, n, "%s-%" PRId64 "-%" PRId64 ".", d->name, id, rank);
}

static void prefix_of(sf_actor *a, char *out, size_t n) {
  prefix_named(sf__actor_desc(a), sf__actor_id(a), sf__actor_rank(a), out, n);
}

/* Calls count of a file name with the given prefix, or -1. */
static int64_t calls_of(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  if (strncmp(name, prefix, n) != 0)
    return -1;
  char *end;
  errno = 0;
  long long v = strtoll(name + n, &end, 10);
  if (errno || *end || end == name + n || v < 0)
    return -1;
  return v;
}

static int desc_cmp(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? 1 : a > b ? -1 : 0;
}

/* The checkpoints named prefix<calls>, newest first (up to max). */
static int list_named(const char *prefix, int64_t *calls, int max) {
  char dir[PATH_MAX];
  ckpt_dir(dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  size_t n = 0, cap = 16;
  int64_t *all = sf_alloc(cap * sizeof *all);
  struct dirent *e;
  while ((e = readdir(d))) {
    int64_t c = calls_of(e->d_name, prefix);
    if (c < 0)
      continue;
    if (n == cap) {
      int64_t *g = sf_alloc(2 * cap * sizeof *g);
      memcpy(g, all, n * sizeof *g);
      sf_free(all);
      all = g;
      cap *= 2;
    }
    all[n++] = c;
  }
  closedir(d);
  qsort(all, n, sizeof *all, desc_cmp);
  int k = n < (size_t)max ? (int)n : max;
  memcpy(calls, all, (size_t)k * sizeof *calls);
  sf_free(all);
  return k;
}

/* The checkpoints of a, newest first (up to max); returns how many. */
static int list(sf_actor *a, int64_t *calls, int max) {
  char prefix[256];
  prefix_of(a, prefix, sizeof prefix);
  return list_named(prefix, calls, max);
}

static bool write_all_fd(int fd, const void *p, size_t n) { return sf__write_all(fd, p, n); }

static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Writes one checkpoint of a: `calls` and `epochs` in the header, the
 * serialized state [p, p+n) as the payload. */
static void write_file(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t calls,
                       int64_t epochs, const void *p, size_t n) {
  char dir[PATH_MAX], prefix[256], path[PATH_MAX + 300], tmp[PATH_MAX + 340];
  ckpt_dir(dir, sizeof dir);
  sf__mkdirs(dir);
  prefix_named(d, id, rank, prefix, sizeof prefix);
  snprintf(path, sizeof path, "%s/%s%" PRId64, dir, prefix, calls);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%s%" PRId64 "-%d", dir, prefix, calls, (int)getpid());

  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__buf_put(&b, MAGIC, 4);
  sf__ser_u64(&b, (uint64_t)calls);
  sf__ser_u64(&b, (uint64_t)epochs);
  uint64_t len = n;
  sf__buf_put(&b, (const char *)&len, 8);
  uint32_t crc = sf__crc32c(0, p, n);
  sf__buf_put(&b, (const char *)&crc, 4);
  sf__buf_put(&b, p, n);

  sf__journal_flush(); /* never ahead of the journal */
  double t0 = sf__trace_now();
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0 && sf__fault("checkpoint-write")) {
    /* Fault test: die with half the temporary file written. */
    (void)write_all_fd(fd, b.data, b.len / 2);
    raise(SIGKILL);
  }
  bool ok = fd >= 0 && write_all_fd(fd, b.data, b.len) && fsync(fd) == 0;
  if (fd >= 0)
    ok = close(fd) == 0 && ok;
  ok = ok && rename(tmp, path) == 0;
  if (ok)
    fsync_dir(dir);
  else {
    unlink(tmp);
    sf__notice("cannot write checkpoint %s: %s", path, strerror(errno));
  }
  sf__trace_event(d->name, "checkpoint", t0, 0, ok ? NULL : "write failed");
  sf__buf_free(&b);
  if (!ok)
    return;
  atomic_fetch_add_explicit(&sf__stats.checkpoints, 1, memory_order_relaxed);
  /* Keep the newest `keep` (@checkpoint(keep = K), default KEEP). */
  int keep = d->checkpoint_keep > 0 ? d->checkpoint_keep : KEEP;
  if (keep > 64)
    keep = 64;
  int64_t old[64 + 1];
  int nold = list_named(prefix, old, keep < 64 ? keep + 1 : 65);
  for (int i = keep; i < nold; i++) {
    snprintf(path, sizeof path, "%s/%s%" PRId64, dir, prefix, old[i]);
    unlink(path);
  }
}

static void write_checkpoint(sf_actor *a) {
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__ser_value(&b, sf__actor_desc(a)->state, sf__actor_state(a));
  if (sf__checkpoint_ship) /* a worker: the head keeps (and writes) it */
    sf__checkpoint_ship(a, sf__actor_calls(a), sf__actor_epochs(a), b.data, b.len);
  else
    write_file(sf__actor_desc(a), sf__actor_id(a), sf__actor_rank(a), sf__actor_calls(a),
               sf__actor_epochs(a), b.data, b.len);
  sf__buf_free(&b);
}

/* SFLOW_FAULT=point:N makes the N-th arrival at `point` kill the process
 * (fault tests only: checkpoint-write, journal-write). */
static const char *fault_spec;
__attribute__((constructor)) static void fault_init(void) { fault_spec = getenv("SFLOW_FAULT"); }

bool sf__fault(const char *point) {
  static _Atomic int64_t count;
  const char *spec = fault_spec;
  size_t n = strlen(point);
  if (!spec || strncmp(spec, point, n) != 0 || spec[n] != ':')
    return false;
  return atomic_fetch_add(&count, 1) + 1 == atoll(spec + n + 1);
}

static bool in_group(sf_actor *a) { return sf__actor_comm(a) != NULL; }

/* The end of a successful run removes the checkpoints while actors may
 * still be writing one (the caller already has the call's result): the
 * removal takes this lock for writing and marks the run finished, writers
 * take it for reading and write nothing after that. */
static pthread_rwlock_t end_lock = PTHREAD_RWLOCK_INITIALIZER;
static bool finished;

void sf__checkpoint_finish(void) {
  pthread_rwlock_wrlock(&end_lock);
  finished = true;
  sf__checkpoint_clear();
  pthread_rwlock_unlock(&end_lock);
}

void (*sf__checkpoint_ship)(sf_actor *a, int64_t calls, int64_t epochs, const void *p,
                           size_t n);

void sf__checkpoint_write_state(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t calls,
                                int64_t epochs, const void *p, size_t n) {
  pthread_rwlock_rdlock(&end_lock);
  if (!finished)
    write_file(d, id, rank, calls, epochs, p, n);
  pthread_rwlock_unlock(&end_lock);
}

void sf__checkpoint_maybe(sf_actor *a, bool after_all) {
  const sf_actor_desc *d = sf__actor_desc(a);
  if (d->checkpoint_every <= 0 || sf__actor_id(a) < 0)
    return;
  if (in_group(a) ? after_all && sf__actor_epochs(a) % d->checkpoint_every == 0
                  : sf__actor_calls(a) % d->checkpoint_every == 0) {
    pthread_rwlock_rdlock(&end_lock);
    if (!finished)
      write_checkpoint(a);
    pthread_rwlock_unlock(&end_lock);
  }
}

/* Checks one checkpoint file and, with a, reads it into a's (zeroed)
 * state.  *epoch gets its g.all epoch. */
static bool load(const sf_actor_desc *d, sf_actor *a, const char *path, int64_t calls,
                 int64_t *epoch) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  struct stat st;
  bool ok = false;
  unsigned char *data = NULL;
  if (fstat(fd, &st) == 0 && st.st_size >= HEAD) {
    size_t len = (size_t)st.st_size;
    data = sf_alloc(len);
    size_t got = 0;
    while (got < len) {
      ssize_t n = read(fd, data + got, len - got);
      if (n <= 0)
        break;
      got += (size_t)n;
    }
    uint64_t c, e, plen;
    uint32_t crc;
    if (got == len && memcmp(data, MAGIC, 4) == 0) {
      memcpy(&c, data + 4, 8);
      memcpy(&e, data + 12, 8);
      memcpy(&plen, data + 20, 8);
      memcpy(&crc, data + 28, 4);
      if ((int64_t)c == calls && plen == len - HEAD && sf__crc32c(0, data + HEAD, plen) == crc) {
        *epoch = (int64_t)e;
        ok = true;
        if (a) {
          sf__reader r = {data + HEAD, data + HEAD + plen};
          void *state = sf__actor_state(a);
          ok = sf__de_value(&r, d->state, state) && r.p == r.end;
          if (!ok) {
            sf_value_release(d->state, state);
            memset(state, 0, (size_t)d->state->size);
          }
        }
      }
    }
  }
  close(fd);
  sf_free(data);
  return ok;
}

/* -------------------------------------------------- group restore plan */

typedef struct plan {
  const sf_actor_desc *d;
  int64_t id, epoch;
} plan;
static plan *plans;
static size_t nplans;

static int list_named(const char *prefix, int64_t *calls, int max);

void sf__checkpoint_plan_group(const sf_actor_desc *d, int64_t id, int64_t n) {
  if (!sf__options.resume || id < 0 || d->checkpoint_every <= 0)
    return;
  char dir[PATH_MAX], prefix[256], path[PATH_MAX + 300];
  ckpt_dir(dir, sizeof dir);
  /* Epochs every member has a valid file for: intersect member by member. */
  int64_t common[KEEP + 8];
  int ncommon = -1;
  for (int64_t r = 0; r < n && ncommon != 0; r++) {
    snprintf(prefix, sizeof prefix, "%s-%" PRId64 "-%" PRId64 ".", d->name, id, r);
    int64_t calls[KEEP + 8], epochs[KEEP + 8];
    int k = list_named(prefix, calls, KEEP + 8), ne = 0;
    for (int i = 0; i < k; i++) {
      snprintf(path, sizeof path, "%s/%s%" PRId64, dir, prefix, calls[i]);
      int64_t e;
      if (load(d, NULL, path, calls[i], &e))
        epochs[ne++] = e;
      else
        sf__notice("checkpoint %s is damaged; trying an older one", path);
    }
    if (ncommon < 0) {
      memcpy(common, epochs, (size_t)ne * sizeof *common);
      ncommon = ne;
      continue;
    }
    int kept = 0;
    for (int i = 0; i < ncommon; i++)
      for (int j = 0; j < ne; j++)
        if (common[i] == epochs[j]) {
          common[kept++] = common[i];
          break;
        }
    ncommon = kept;
  }
  int64_t best = -1;
  for (int i = 0; i < ncommon; i++)
    if (common[i] > best)
      best = common[i];
  plan *g = sf_alloc((nplans + 1) * sizeof *g);
  if (nplans)
    memcpy(g, plans, nplans * sizeof *g);
  sf_free(plans);
  plans = g;
  plans[nplans++] = (plan){d, id, best};
}

int64_t sf__checkpoint_group_epoch(const sf_actor_desc *d, int64_t id) {
  for (size_t i = 0; i < nplans; i++)
    if (plans[i].d == d && plans[i].id == id)
      return plans[i].epoch;
  return -1;
}

bool sf__checkpoint_restore(sf_actor *a) {
  const sf_actor_desc *d = sf__actor_desc(a);
  if (!sf__options.resume || sf__actor_id(a) < 0 || d->checkpoint_every <= 0)
    return false;
  bool group = in_group(a);
  if (group && sf__actor_restore_epoch(a) < 0)
    return false; /* no epoch common to all members: start from init */
  char dir[PATH_MAX], prefix[256], path[PATH_MAX + 300];
  ckpt_dir(dir, sizeof dir);
  prefix_of(a, prefix, sizeof prefix);
  int64_t calls[KEEP + 8];
  int n = list(a, calls, KEEP + 8);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s%" PRId64, dir, prefix, calls[i]);
    int64_t e = -1;
    if (group) { /* the planned epoch's file, checked already */
      if (!load(d, NULL, path, calls[i], &e) || e != sf__actor_restore_epoch(a))
        continue;
    }
    if (load(d, a, path, calls[i], &e)) {
      sf__actor_set_calls(a, calls[i]);
      sf__actor_set_epochs(a, e);
      atomic_fetch_add_explicit(&sf__stats.restored, 1, memory_order_relaxed);
      return true;
    }
    if (!group)
      sf__notice("checkpoint %s is damaged; trying an older one", path);
  }
  return false;
}

/* Removes every checkpoint (a new run, or a finished one). */
void sf__checkpoint_clear(void) {
  char dir[PATH_MAX], p[PATH_MAX + 300];
  ckpt_dir(dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' || strncmp(e->d_name, ".tmp-", 5) == 0) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}
