/*
 * checkpoint.c — `@checkpoint(every = k)`: an actor's state written every
 * k completed calls, and read back on --resume (and, later, when a node
 * dies and the actor restarts elsewhere).
 *
 * On a worker of a --nodes run the state is not written there: it is
 * shipped to the head (sf__checkpoint_ship, set by ractor_worker.c), which keeps
 * the newest for restarts and writes it here (sf__checkpoint_write_state),
 * so --resume finds the same files as after a single-node run.
 *
 * One file per checkpoint, `<dir>/ckpt/<Actor>-<spawn>-<rank>.<calls>`:
 *
 *   "SFC3" | u64 calls | u64 g.all epoch | journal position (u64 run id,
 *   u64 bytes, u64 records, u32 chain: sf__jpos) | u64 payload length |
 *   u32 CRC-32C of payload | u32 CRC-32C of the 60 bytes before it |
 *   payload = the state (serial.c)
 *
 * Key design choices:
 *  - Atomic: write a temporary file, fsync it, rename it into place,
 *    fsync the folder (core's outfile.c, SF__OUT_ATOMIC).  A crash at any
 *    point leaves the previous checkpoint whole; a torn temporary file is
 *    never read (its name does not match) and is removed at the next
 *    start or --resume, or at the end of a run that finished.
 *  - Only for --resume: with --journal=false no file is written.
 *  - Checked: a file whose CRCs or length are wrong is skipped on load and
 *    the next older one is used; the last three are kept for that.
 *  - Ordered with the journal: the journal is flushed and synced before a
 *    checkpoint is written, so a checkpoint never holds a call the journal
 *    does not know about, and the checkpoint records where the synced
 *    journal ended.  On --resume a checkpoint the journal does not reach
 *    (it lost records an honest crash cannot lose) or differs from is not
 *    used; an actor none of whose checkpoints the journal covers makes
 *    the resume refuse (sf__checkpoint_vet), since its calls are gone.
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

#include "durable.h"

#define KEEP 3
#define MAGIC "SFC3"
/* magic 4, calls 8, epoch 8, journal position 28, payload length 8,
 * payload CRC 4, header CRC 4 */
#define HEAD 64

/* What load() found. */
enum { CK_OK, CK_DAMAGED, CK_UNUSABLE /* whole, but not this journal's: vet said so */ };

typedef struct ckhead {
  int64_t calls, epoch;
  sf__jpos pos;
  uint64_t plen;
  uint32_t pcrc;
} ckhead;

static void put_head(sf__buf *b, const ckhead *h) {
  size_t at = b->len;
  sf__buf_put(b, MAGIC, 4);
  sf__buf_put(b, (const char *)&h->calls, 8);
  sf__buf_put(b, (const char *)&h->epoch, 8);
  sf__buf_put(b, (const char *)&h->pos.run, 8);
  sf__buf_put(b, (const char *)&h->pos.bytes, 8);
  sf__buf_put(b, (const char *)&h->pos.records, 8);
  sf__buf_put(b, (const char *)&h->pos.chain, 4);
  sf__buf_put(b, (const char *)&h->plen, 8);
  sf__buf_put(b, (const char *)&h->pcrc, 4);
  uint32_t crc = sf__crc32c(0, b->data + at, HEAD - 4);
  sf__buf_put(b, (const char *)&crc, 4);
}

/* Decodes a file's first HEAD bytes; false if the magic or the header's
 * CRC is wrong. */
static bool get_head(const unsigned char *p, ckhead *h) {
  uint32_t crc;
  memcpy(&crc, p + HEAD - 4, 4);
  if (memcmp(p, MAGIC, 4) != 0 || sf__crc32c(0, p, HEAD - 4) != crc)
    return false;
  memcpy(&h->calls, p + 4, 8);
  memcpy(&h->epoch, p + 12, 8);
  memcpy(&h->pos.run, p + 20, 8);
  memcpy(&h->pos.bytes, p + 28, 8);
  memcpy(&h->pos.records, p + 36, 8);
  memcpy(&h->pos.chain, p + 44, 4);
  memcpy(&h->plen, p + 48, 8);
  memcpy(&h->pcrc, p + 56, 4);
  return true;
}

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

static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Writes one checkpoint of a: `calls` and `epochs` in the header, the
 * serialized state [p, p+n) as the payload.  With --journal=false nothing
 * is written: only --resume reads these files, and it needs the journal
 * (a node lost in a --nodes run restarts from the head's copy in memory). */
static void write_file(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t calls,
                       int64_t epochs, const void *p, size_t n) {
  if (!sf__options.journal)
    return;
  char dir[PATH_MAX], prefix[256], path[PATH_MAX + 300];
  ckpt_dir(dir, sizeof dir);
  sf__mkdirs(dir);
  prefix_named(d, id, rank, prefix, sizeof prefix);
  snprintf(path, sizeof path, "%s/%s%" PRId64, dir, prefix, calls);

  /* Never ahead of the journal, and saying where it stood.  If the
   * journal has failed, the calls this state holds may be missing from it:
   * such a file could only mislead a --resume, so none is written. */
  ckhead h = {calls, epochs, {0}, n, sf__crc32c(0, p, n)};
  if (!sf__journal_flush(&h.pos))
    return;
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  put_head(&b, &h);
  sf__buf_put(&b, p, n);
  double t0 = sf__trace_now();
  /* Atomic (core's outfile.c): a temporary file beside the path (its
   * name never matches a checkpoint's), fsync'ed, renamed, the folder
   * fsync'ed; anything but a regular file at the path is refused. */
  sf__outfile o;
  char why[300];
  bool ok = sf__outfile_open(&o, path, SF__OUT_ATOMIC, why, sizeof why);
  if (ok && sf__fault("checkpoint-write")) {
    /* Fault test: die with half the temporary file written. */
    (void)sf__outfile_write(&o, b.data, b.len / 2);
    raise(SIGKILL);
  }
  if (ok && !sf__outfile_write(&o, b.data, b.len)) {
    snprintf(why, sizeof why, "%s", strerror(errno));
    sf__outfile_abort(&o);
    ok = false;
  } else if (ok && !sf__outfile_commit(&o)) {
    snprintf(why, sizeof why, "%s", strerror(errno));
    ok = false;
  }
  if (!ok)
    sf__notice("cannot write checkpoint %s: %s", path, why);
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

int64_t sf__fault_value(const char *point) {
  const char *spec = fault_spec;
  size_t n = strlen(point);
  if (!spec || strncmp(spec, point, n) != 0 || spec[n] != ':')
    return 0;
  return atoll(spec + n + 1);
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
 * state.  *epoch gets its g.all epoch.  On --resume a whole file the
 * journal does not cover is CK_UNUSABLE (sf__checkpoint_vet has said why). */
static int load(const sf_actor_desc *d, sf_actor *a, const char *path, int64_t calls,
                int64_t *epoch) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return CK_DAMAGED;
  struct stat st;
  int res = CK_DAMAGED;
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
    ckhead h;
    if (got == len && get_head(data, &h) && h.calls == calls && h.plen == len - HEAD &&
        sf__crc32c(0, data + HEAD, h.plen) == h.pcrc) {
      *epoch = h.epoch;
      res = CK_OK;
      if (sf__options.resume && sf__journal_covers(&h.pos) != SF__JPOS_COVERED)
        res = CK_UNUSABLE;
      if (res == CK_OK && a) {
        sf__reader r = {data + HEAD, data + HEAD + h.plen};
        void *state = sf__actor_state(a);
        if (!sf__de_value(&r, d->state, state) || r.p != r.end) {
          res = CK_DAMAGED;
          sf_value_release(d->state, state);
          memset(state, 0, (size_t)d->state->size);
        }
      }
    }
  }
  close(fd);
  sf_free(data);
  return res;
}

/* ------------------------------------------------ against the journal */

typedef struct vetted {
  char name[256]; /* the file's name */
  size_t plen;    /* its prefix "Actor-spawn-rank." */
  int64_t calls;
  int cover;      /* SF__JPOS_*, or -1: damaged (restore says so) */
  uint64_t records;
} vetted;

static int vet_cmp(const void *x, const void *y) {
  const vetted *a = x, *b = y;
  int c = a->plen == b->plen ? memcmp(a->name, b->name, a->plen) : (a->plen < b->plen ? -1 : 1);
  return c ? c : a->calls < b->calls ? 1 : a->calls > b->calls ? -1 : 0;
}

/* Reads one file's header into v; cover -1 when it is not whole. */
static void vet_one(const char *dir, vetted *v) {
  char path[PATH_MAX + 300];
  snprintf(path, sizeof path, "%s/%s", dir, v->name);
  unsigned char head[HEAD];
  ckhead h;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && read(fd, head, HEAD) == HEAD && get_head(head, &h) && h.calls == v->calls;
  if (fd >= 0)
    close(fd);
  v->cover = ok ? sf__journal_covers(&h.pos) : -1;
  v->records = ok ? h.pos.records : 0;
}

/* "Aggregator (spawn 0, rank 0)" from a file name "Aggregator-0-0.24". */
static void actor_named(const vetted *v, char *out, size_t n) {
  char pre[256];
  snprintf(pre, sizeof pre, "%.*s", (int)(v->plen - 1), v->name);
  char *rank = strrchr(pre, '-');
  char *spawn = rank ? (*rank = '\0', strrchr(pre, '-')) : NULL;
  if (spawn) {
    *spawn = '\0';
    snprintf(out, n, "%s (spawn %s, rank %s)", pre, spawn + 1, rank + 1);
  } else {
    snprintf(out, n, "%.*s", (int)(v->plen - 1), v->name);
  }
}

static void refuse(const char *journal, const char *dir, const vetted *lost, char *why,
                   size_t n) {
  char actor[300];
  actor_named(lost, actor, sizeof actor);
  if (lost->cover == SF__JPOS_BEYOND)
    snprintf(why, n,
             "the journal %s ends at record %" PRIu64 " but checkpoint %s/%s of actor %s "
             "depends on record %" PRIu64 ": the journal was truncated or damaged; "
             "refusing to resume",
             journal, sf__journal_records(), dir, lost->name, actor, lost->records);
  else
    snprintf(why, n,
             "the journal %s differs, up to record %" PRIu64 ", from the one checkpoint "
             "%s/%s of actor %s was written with: the journal was damaged or replaced; "
             "refusing to resume",
             journal, lost->records, dir, lost->name, actor);
}

/* A checkpoint that no --resume of this journal can ever use is removed,
 * with a notice: left in place it would count among the newest kept and
 * could push out the checkpoints the resumed run writes. */
static void drop_unusable(const char *dir, const vetted *v, const vetted *covered) {
  char path[PATH_MAX + 300];
  snprintf(path, sizeof path, "%s/%s", dir, v->name);
  if (v->cover == SF__JPOS_OTHER_RUN) {
    sf__notice("checkpoint %s was not written with this journal (another run's); it is removed",
               path);
  } else if (v->cover == SF__JPOS_BEYOND || v->cover == SF__JPOS_DIFFERS) {
    sf__notice("checkpoint %s depends on record %" PRIu64 " of the journal, which %s: the "
               "journal was truncated or damaged; it is removed and %s is used instead",
               path, v->records, v->cover == SF__JPOS_BEYOND ? "it no longer holds" : "differs there",
               covered ? covered->name : "an older one");
  } else {
    return;
  }
  unlink(path);
}

bool sf__checkpoint_vet(const char *journal, char *why, size_t n) {
  char dir[PATH_MAX];
  ckpt_dir(dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d)
    return true;
  size_t nv = 0, cap = 16;
  vetted *vs = sf_alloc(cap * sizeof *vs);
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *dot = strrchr(e->d_name, '.');
    if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp-")) {
      /* A write the killed run did not finish (the folder is locked:
       * no live writer owns it); never read, so not kept either. */
      char p[PATH_MAX + 300];
      struct stat st;
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (lstat(p, &st) == 0 && S_ISREG(st.st_mode))
        unlink(p);
      continue;
    }
    if (e->d_name[0] == '.' || !dot || strlen(e->d_name) >= sizeof vs->name)
      continue;
    char *end;
    errno = 0;
    long long c = strtoll(dot + 1, &end, 10);
    if (errno || *end || end == dot + 1 || c < 0)
      continue;
    if (nv == cap) {
      vetted *g = sf_alloc(2 * cap * sizeof *g);
      memcpy(g, vs, nv * sizeof *g);
      sf_free(vs);
      vs = g;
      cap *= 2;
    }
    vetted *v = &vs[nv++];
    snprintf(v->name, sizeof v->name, "%s", e->d_name);
    v->plen = (size_t)(dot + 1 - e->d_name);
    v->calls = c;
    vet_one(dir, v);
  }
  closedir(d);
  qsort(vs, nv, sizeof *vs, vet_cmp);
  /* One actor's files (newest first) at a time: first whether any actor
   * must be refused, then, only if none is, what is not used and why. */
  bool ok = true;
  for (int pass = 0; pass < 2 && ok; pass++)
    for (size_t i = 0, j; i < nv && ok; i = j) {
      for (j = i; j < nv && vs[j].plen == vs[i].plen &&
                  memcmp(vs[j].name, vs[i].name, vs[i].plen) == 0;)
        j++;
      const vetted *covered = NULL, *lost = NULL;
      for (size_t k = i; k < j; k++) {
        if (vs[k].cover == SF__JPOS_COVERED && !covered)
          covered = &vs[k];
        else if ((vs[k].cover == SF__JPOS_BEYOND || vs[k].cover == SF__JPOS_DIFFERS) && !lost)
          lost = &vs[k];
      }
      if (pass == 0 && lost && !covered) {
        /* The journal lost records an honest crash cannot lose: the
         * checkpoints prove they were synced.  Resuming would run this
         * actor's lost calls again on a state that holds them. */
        refuse(journal, dir, lost, why, n);
        ok = false;
      }
      if (pass == 1)
        for (size_t k = i; k < j; k++)
          drop_unusable(dir, &vs[k], covered);
    }
  if (ok)
    fsync_dir(dir);
  sf_free(vs);
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
      int got = load(d, NULL, path, calls[i], &e);
      if (got == CK_OK)
        epochs[ne++] = e;
      else if (got == CK_DAMAGED)
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
      if (load(d, NULL, path, calls[i], &e) != CK_OK || e != sf__actor_restore_epoch(a))
        continue;
    }
    int got = load(d, a, path, calls[i], &e);
    if (got == CK_OK) {
      sf__actor_set_calls(a, calls[i]);
      sf__actor_set_epochs(a, e);
      atomic_fetch_add_explicit(&sf__stats.restored, 1, memory_order_relaxed);
      return true;
    }
    if (!group && got == CK_DAMAGED)
      sf__notice("checkpoint %s is damaged; trying an older one", path);
  }
  return false;
}

/* Removes every checkpoint (a new run, or a finished one), and the
 * temporary files of writes a crash interrupted.  Only files and links
 * are removed: a FIFO or a device node someone made there is not ours
 * (and no checkpoint is ever written over it). */
void sf__checkpoint_clear(void) {
  char dir[PATH_MAX], p[PATH_MAX + 300];
  ckpt_dir(dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  struct stat st;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' || strstr(e->d_name, ".tmp-")) { /* outfile.c's .NAME.tmp-PID-N */
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (lstat(p, &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)))
        unlink(p);
    }
  closedir(d);
  rmdir(dir);
}
