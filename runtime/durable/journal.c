/*
 * journal.c — durable resume: `./prog --resume` continues a run that
 * crashed or was killed.
 *
 * The journal records what `workflow main` received from the outside
 * world, in the order it asked: the result of every task it called, the
 * result of every actor call it made (per member for group calls, with the
 * member that answered g.any), and every value of now() and rand_f32() it
 * read, plus the lines those tasks and calls printed.  On --resume, main
 * runs again from its start: a call whose result is in the journal is
 * answered from it without running, and everything after the last
 * recorded call runs live.  Actors are rebuilt from their latest
 * checkpoint (checkpoint.c) and the calls recorded after it, re-run with
 * their output muted (the journal holds their output and results).
 *
 * The guarantee: with a deterministic main (the same flags and the same
 * decisions given the same results), a resumed run prints exactly what an
 * uninterrupted run prints and runs each recorded call at most once more
 * in total than zero times — recorded tasks not at all.  Calls made by
 * tasks or actors (not by main) are not recorded: they run again as part
 * of whatever made them.
 *
 * Key design choices:
 *  - Records are appended to an in-memory buffer and written by a flusher
 *    thread every 20 ms (or sooner when a megabyte is waiting), so a
 *    million tasks cost a memcpy each, not a system call each.  A
 *    checkpoint first flushes and fdatasyncs the journal and records where
 *    it then ended (sf__jpos: length, record count, and a CRC chained over
 *    the header and every record's frame), so no checkpoint is ever ahead
 *    of the journal, and --resume can tell a journal that lost synced
 *    records from one a crash cut short.
 *  - A record holds exactly the lines its own call printed: each thread
 *    has a stack of sinks, one per journaled call running on it, and a
 *    line goes to the top one only.  The file holds the records in the
 *    order they were appended across threads (tickets, merged by the
 *    flusher), so what a kill leaves is always a causally closed prefix.
 *  - Every record is framed as length + CRC-32C + payload, and the header
 *    has its own CRC.  On load, a bad record with no valid record after it
 *    is a torn end (a crash mid-write): it is cut off the file before new
 *    records are appended, unless a checkpoint depends on it.  A bad
 *    record followed by valid ones is damage, and a journal shorter than
 *    what every checkpoint of an actor depends on has lost synced records:
 *    both are refused, never resumed from (sf__checkpoint_vet).
 *  - The journal lives in --checkpoint-dir (default `.sflow/<program>/`
 *    under the working directory), is created at the first record (a run
 *    that calls nothing writes nothing), is locked with flock so two runs
 *    never share one, and is removed when the run ends successfully:
 *    there is nothing left to resume.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"

#define MAGIC "SFJ3"
#define OLD_MAGIC "SFJ2" /* before the header had a CRC and a run id */
/* magic 4 | u64 run id | u32 CRC-32C of the flags | u32 CRC-32C of the
 * 16 bytes before it */
#define HEADER_LEN 20
#define MIN_PAYLOAD 8 /* kind and seven one-byte varints */
#define FLUSH_NS 20000000LL
#define FLUSH_BYTES (1u << 20)

enum { R_TASK = 1, R_CALL = 2, R_VALUE = 3 };

typedef struct rec {
  int32_t kind;
  int64_t seq, spawn, rank, index;
  const char *name;
  uint32_t name_len;
  const unsigned char *value, *out;
  uint64_t value_len, out_len;
  uint64_t end;   /* file offset just past the record */
  uint32_t chain; /* the journal's chain up to and including it */
} rec;

static struct {
  _Atomic bool enabled; /* this run journals (read by every thread) */
  _Atomic bool opened;  /* the files exist and are ours */
  _Atomic bool failed;  /* gave up (could not write): the run goes on without */
  bool replay;   /* --resume: records loaded */
  bool need_header; /* --resume of a journal torn inside its header */
  pthread_t main_thread;
  const sf_program *prog;
  uint32_t args_crc;
  uint64_t run_id; /* in the header: binds checkpoints to this journal */
  char dir[PATH_MAX];
  int fd, lock_fd;

  /* What the file holds, under J.lock: where a checkpoint stands. */
  uint64_t written, nwritten;
  uint32_t chain;

  /* the loaded journal's header (replay) */
  bool have_header;
  uint32_t header_chain;

  /* loaded records (replay) */
  unsigned char *data;
  size_t data_len;
  rec *recs;
  size_t nrecs;
  int32_t *table; /* open addressing: index into recs, -1 empty */
  size_t table_mask;
  double *values;
  size_t nvalues, next_value;

  /* main's counters */
  int64_t seq, spawns;

  /* the writer */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  sf__buf pending;
  bool flusher_started, stop;
  pthread_t flusher;
} J = {.fd = -1, .lock_fd = -1,
       .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

extern _Thread_local int sf__task_depth;

static bool main_level(void) {
  return sf__task_depth == 0 && pthread_equal(pthread_self(), J.main_thread) && J.enabled;
}

const char *sf__checkpoint_dir(void) { return J.dir; }


static void emit_output(const rec *r) {
  if (r->out_len && !sf__capture_muted())
    (void)sf__out_write(1, (const char *)r->out, r->out_len);
}

/* ------------------------------------------------------------- files */

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fatal(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  sf__progress_clear();
  fprintf(stderr, "%s: error: %s\n", J.prog && J.prog->name ? J.prog->name : "sflow", buf);
  fflush(stdout);
  _exit(SF__EXIT_USAGE);
}

int sf__mkdirs(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void path_in(char *out, size_t n, const char *name) {
  if (snprintf(out, n, "%s/%s", J.dir, name) >= (int)n)
    out[0] = '\0';
}

/* Takes the folder's lock; false if another live run holds it. */
static bool lock_dir(void) {
  char p[PATH_MAX];
  path_in(p, sizeof p, "lock");
  J.lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (J.lock_fd < 0)
    return false;
  if (flock(J.lock_fd, LOCK_EX | LOCK_NB) != 0) {
    close(J.lock_fd);
    J.lock_fd = -1;
    return false;
  }
  return true;
}

static void header_bytes(unsigned char h[HEADER_LEN]) {
  memcpy(h, MAGIC, 4);
  memcpy(h + 4, &J.run_id, 8);
  memcpy(h + 12, &J.args_crc, 4);
  uint32_t crc = sf__crc32c(0, h, 16);
  memcpy(h + 16, &crc, 4);
}

static void header(sf__buf *b) {
  unsigned char h[HEADER_LEN];
  header_bytes(h);
  sf__buf_put(b, (const char *)h, HEADER_LEN);
}

/* A run id no other run shares (in practice): a checkpoint left by
 * another run is then never taken for one of this journal's. */
static uint64_t new_run_id(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &v, sizeof v) != (ssize_t)sizeof v)
      v = 0;
    close(fd);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  v ^= (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40;
  return v ? v : 1; /* 0 means "no journal" in a checkpoint */
}

/* Opens the journal for appending (fresh, or after the loaded records). */
static bool open_locked(void) {
  if (J.opened || J.failed)
    return J.opened;
  if (!J.replay) {
    if (sf__mkdirs(J.dir) != 0 || !lock_dir()) {
      J.failed = true;
      sf__notice("cannot use %s for the journal (%s): this run cannot be resumed", J.dir,
                 errno ? strerror(errno) : "used by another run");
      return false;
    }
    sf__checkpoint_clear();
    /* The old run's checkpoints are gone for good before this run's
     * records exist: after a power loss they must not reappear beside the
     * new journal (a --resume would only remove them as another run's,
     * with a notice, but a clean folder needs none). */
    int dfd = open(J.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }
  char p[PATH_MAX];
  path_in(p, sizeof p, "journal");
  J.fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | (J.replay ? O_APPEND : O_TRUNC), 0644);
  if (J.fd < 0) {
    J.failed = true;
    if (J.replay) /* the loaded journal is still whole */
      sf__notice("cannot append to %s (%s): this run journals nothing more, and --resume "
                 "continues from its last complete record", p, strerror(errno));
    else
      sf__notice("cannot write %s (%s): this run cannot be resumed", p, strerror(errno));
    return false;
  }
  if (!J.replay || J.need_header)
    header(&J.pending);
  J.opened = true;
  return true;
}

/* After a failed write or sync (a full disk): what the file still holds
 * is a prefix of whole records, perhaps with a torn one after them, which
 * --resume cuts off; every checkpoint written so far depends only on that
 * prefix.  So the run can be resumed from its last complete record, and
 * the notice says so, and what is no longer kept. */
static void lost_notice(const char *what, int err) {
  char p[PATH_MAX];
  path_in(p, sizeof p, "journal");
  sf__notice("%s the journal %s failed (%s): it keeps the records written whole before it "
             "(at least %llu); this run journals and checkpoints nothing more, and --resume "
             "continues from the last complete record",
             what, p, strerror(err), (unsigned long long)J.nwritten);
}

/* Each thread appends records to its own buffer under its own (nearly
 * never contended) lock; the flusher swaps the buffers out and writes them.
 * Records are keyed, not ordered, except R_VALUE, which only main writes,
 * in order, to its own buffer.
 *
 * The file must still hold them in an order that respects causality: a
 * kill (or a torn write) keeps a prefix of the file, and a prefix that
 * kept a consumer's record but not its producer's would replay the
 * consumer's lines at once while the producer runs again live and prints
 * later.  So every record takes a ticket from one counter as it is
 * appended (a record appended after another, on any thread, has the
 * larger ticket), the flusher takes every buffer at one instant (all
 * their locks held together), and writes the batch merged by ticket: the
 * file is in ticket order, and any prefix of it holds every record
 * appended before any record it holds.  In memory a record is preceded by
 * its ticket (8 bytes), which never reaches the file. */
typedef struct jbuf {
  struct jbuf *next;
  pthread_mutex_t lock;
  sf__buf b;
  sf__buf spare; /* the buffer last written out, emptied, for reuse: a
                  * fresh one each flush would grow by doubling (copies,
                  * page faults) all over again */
  size_t at;     /* the flusher's merge position in its batch */
  bool asked;    /* past FLUSH_BYTES and the flusher told once: each later
                  * append signalling again was a futex wake per record
                  * while the flusher waited for a core */
} jbuf;

/* The counter has its cache line to itself: beside `merged`, whose length
 * the flusher writes once per record it merges, every append also paid
 * for the flusher's writes. */
static struct {
  _Alignas(64) _Atomic uint64_t next;
  char pad[64 - sizeof(uint64_t)];
} tickets;
static sf__buf merged; /* the flusher's output, kept for reuse (J.lock) */

static jbuf *jbufs; /* every thread's, linked under J.lock */
static _Thread_local jbuf *my_jbuf;

static jbuf *mine(void) {
  if (!my_jbuf) {
    jbuf *j = sf_alloc(sizeof *j);
    *j = (jbuf){0}; /* `asked` and `at` are read before anything sets them */
    pthread_mutex_init(&j->lock, NULL);
    sf__buf_init(&j->b, NULL, 0);
    sf__buf_init(&j->spare, NULL, 0);
    /* Room for what the flusher takes at once (malloc maps a block this
     * large lazily: a thread that journals little touches a page or two).
     * Grown from nothing by doubling, a burst of tiny tasks copied and
     * faulted its buffer in again at every step: 9% of a cold round. */
    sf__buf_grow(&j->b, 2 * FLUSH_BYTES);
    pthread_mutex_lock(&J.lock);
    j->next = jbufs;
    jbufs = j;
    pthread_mutex_unlock(&J.lock);
    my_jbuf = j;
  }
  return my_jbuf;
}

/* Writes out (the header, or whole records) at the end of the file and
 * moves J's position past it.  After a failed write nothing more is
 * written: a torn record may only ever be the last thing in the file. */
static void write_out(sf__buf *out, bool records) {
  if (!out->len || J.failed)
    return;
  if (records && sf__fault("journal-write")) {
    /* Fault test: die with the last record torn. */
    (void)sf__write_all(J.fd, out->data, out->len > 16 ? out->len - 7 : out->len / 2);
    raise(SIGKILL);
  }
  bool ok = sf__write_all(J.fd, out->data, out->len);
  if (!ok) {
    J.failed = true;
    lost_notice("writing", errno);
    return;
  }
  if (!records) {
    J.chain = sf__crc32c(0, out->data, out->len);
    J.written = out->len;
    return;
  }
  for (size_t at = 0; at + 8 <= out->len;) { /* whole records only: append's frames */
    uint32_t n;
    memcpy(&n, out->data + at, 4);
    J.chain = sf__crc32c(J.chain, out->data + at, 8);
    J.nwritten++;
    at += 8 + (size_t)n;
  }
  J.written += out->len;
}

/* The ticket of the next record of j's batch (UINT64_MAX past its end).
 * The batch (j->spare between a swap and the write) is the flusher's. */
static uint64_t head_ticket(const jbuf *j) {
  uint64_t t = UINT64_MAX;
  if (j->at < j->spare.len)
    memcpy(&t, j->spare.data + j->at, 8);
  return t;
}

/* Moves the next record of j's batch to `merged`, without its ticket. */
static void move_record(jbuf *j) {
  uint32_t len;
  memcpy(&len, j->spare.data + j->at + 8, 4);
  sf__buf_put(&merged, j->spare.data + j->at + 8, 8 + (size_t)len);
  j->at += 16 + (size_t)len;
}

/* Called with J.lock held; writes everything appended so far. */
static void write_pending_locked(void) {
  if (J.fd < 0)
    return;
  write_out(&J.pending, false); /* the header */
  sf__buf_free(&J.pending);
  /* The spares become the appenders' buffers: with the room mine() gives. */
  for (jbuf *j = jbufs; j; j = j->next)
    sf__buf_grow(&j->spare, 2 * FLUSH_BYTES);
  /* One instant for all buffers (appenders hold only their own lock, so
   * taking them all in list order cannot deadlock). */
  for (jbuf *j = jbufs; j; j = j->next)
    pthread_mutex_lock(&j->lock);
  for (jbuf *j = jbufs; j; j = j->next) {
    sf__buf batch = j->b;
    j->b = j->spare;
    j->b.len = 0;
    j->spare = batch;
    j->at = 0;
    j->asked = false;
  }
  for (jbuf *j = jbufs; j; j = j->next)
    pthread_mutex_unlock(&j->lock);
  /* Merge by ticket: take records from the buffer with the smallest head
   * as long as they stay below every other buffer's head. */
  merged.len = 0;
  size_t total = 0;
  for (jbuf *j = jbufs; j; j = j->next)
    total += j->spare.len;
  sf__buf_grow(&merged, total); /* at once, not by doubling */
  for (;;) {
    jbuf *best = NULL;
    uint64_t bt = UINT64_MAX, second = UINT64_MAX;
    for (jbuf *j = jbufs; j; j = j->next) {
      uint64_t t = head_ticket(j);
      if (t < bt) {
        second = bt;
        bt = t;
        best = j;
      } else if (t < second) {
        second = t;
      }
    }
    if (!best)
      break;
    do
      move_record(best);
    while (head_ticket(best) < second);
  }
  write_out(&merged, true);
  if (merged.cap > 4 * FLUSH_BYTES)
    sf__buf_free(&merged);
  for (jbuf *j = jbufs; j; j = j->next) {
    j->spare.len = 0; /* emptied, for the next swap */
    if (j->spare.cap > 4 * FLUSH_BYTES)
      sf__buf_free(&j->spare);
  }
}

static void *flusher_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&J.lock);
  while (!J.stop) {
    sf__cond_wait_ns(&J.cond, &J.lock, FLUSH_NS);
    write_pending_locked();
  }
  pthread_mutex_unlock(&J.lock);
  return NULL;
}

/* Writes v at p (room for 10 bytes); returns the bytes written. */
static size_t varint_at(char *p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

static void put_varint(sf__buf *b, uint64_t v) {
  sf__buf_grow(b, 10);
  b->len += varint_at(b->data + b->len, v);
}

static bool get_varint(sf__reader *r, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r->p >= r->end)
      return false;
    unsigned char c = *r->p++;
    x |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static int64_t unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* Appends one record to this thread's buffer: u32 payload length, u32
 * CRC-32C, then kind, seq, spawn, rank, index (zigzag varints), the name,
 * the value and the captured output (each varint length + bytes). */
static void append(int32_t kind, int64_t seq, int64_t spawn, int64_t rank, int64_t index,
                   const char *name, const sf_type *t, const void *value, const sf__buf *out) {
  if (!atomic_load_explicit(&J.opened, memory_order_acquire)) {
    pthread_mutex_lock(&J.lock);
    bool ok = open_locked();
    if (ok && !J.flusher_started) {
      J.flusher_started = true;
      pthread_create(&J.flusher, NULL, flusher_main, NULL);
    }
    pthread_mutex_unlock(&J.lock);
    if (!ok)
      return;
  }
  jbuf *j = mine();
  pthread_mutex_lock(&j->lock);
  sf__buf *b = &j->b;
  size_t start = b->len;
  size_t nl = name ? strlen(name) : 0;
  /* The fixed part in one go: ticket, frame (patched below), kind, four
   * varints, the name's length and the name. */
  sf__buf_grow(b, 16 + 1 + 5 * 10 + nl);
  uint64_t ticket = atomic_fetch_add_explicit(&tickets.next, 1, memory_order_relaxed);
  memcpy(b->data + start, &ticket, 8);
  start += 8;
  char *p = b->data + start + 8;
  *p++ = (char)(unsigned char)kind;
  p += varint_at(p, zigzag(seq));
  p += varint_at(p, zigzag(spawn));
  p += varint_at(p, zigzag(rank));
  p += varint_at(p, zigzag(index));
  p += varint_at(p, nl);
  if (nl)
    memcpy(p, name, nl);
  b->len = (size_t)(p - b->data) + nl;
  if (t && value) {
    /* The value's length goes before it.  Scalars have a known size; other
     * values are serialized first and moved up past their length. */
    size_t at = b->len;
    if (t->kind == SF_BOOL || t->kind == SF_I32 || t->kind == SF_I64 || t->kind == SF_F32 ||
        t->kind == SF_F64) {
      sf__buf_grow(b, 1 + (size_t)t->size);
      b->data[b->len++] = (char)t->size;
      sf__ser_value(b, t, value);
    } else {
      sf__ser_value(b, t, value);
      size_t vl = b->len - at;
      char lenbuf[10];
      size_t ln = varint_at(lenbuf, vl);
      sf__buf_grow(b, ln);
      memmove(b->data + at + ln, b->data + at, vl);
      memcpy(b->data + at, lenbuf, ln);
      b->len += ln;
    }
  } else {
    put_varint(b, 0);
  }
  size_t ol = out ? out->len : 0;
  put_varint(b, ol);
  if (ol)
    sf__buf_put(b, out->data, ol);
  uint32_t frame[2] = {(uint32_t)(b->len - start - 8), 0};
  frame[1] = sf__crc32c(0, b->data + start + 8, frame[0]);
  memcpy(b->data + start, frame, 8);
  bool big = b->len > FLUSH_BYTES && !j->asked;
  if (big)
    j->asked = true;
  pthread_mutex_unlock(&j->lock);
  if (big)
    pthread_cond_signal(&J.cond);
}

bool sf__journal_flush(sf__jpos *pos) {
  *pos = (sf__jpos){0};
  if (!J.run_id) /* --journal=false: a checkpoint no --resume can use */
    return true;
  pthread_mutex_lock(&J.lock);
  if (J.enabled)
    write_pending_locked();
  /* After the sync the file holds at least J.written bytes whatever
   * happens next, so a checkpoint that says so never claims more than an
   * honest crash leaves.  (After the run's end the file is synced and
   * closed, and J's position is final.) */
  bool ok = !J.failed && (J.fd < 0 || fdatasync(J.fd) == 0);
  if (!ok && !J.failed) {
    J.failed = true;
    lost_notice("syncing", errno);
  }
  *pos = (sf__jpos){J.run_id, J.written, J.nwritten, J.chain};
  pthread_mutex_unlock(&J.lock);
  return ok;
}

/* ------------------------------------------------------------ loading */

static uint64_t key_hash(int32_t kind, int64_t seq, int64_t spawn, int64_t rank) {
  uint64_t h = (uint64_t)kind * 0x9E3779B97F4A7C15ull;
  h ^= (uint64_t)seq + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= (uint64_t)spawn + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= (uint64_t)rank + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static const rec *find(int32_t kind, int64_t seq, int64_t spawn, int64_t rank) {
  if (!J.table)
    return NULL;
  for (size_t i = key_hash(kind, seq, spawn, rank) & J.table_mask;; i = (i + 1) & J.table_mask) {
    int32_t k = J.table[i];
    if (k < 0)
      return NULL;
    const rec *r = &J.recs[k];
    if (r->kind == kind && r->seq == seq && r->spawn == spawn && r->rank == rank)
      return r;
  }
}

/* The call record of seq for any member (g.any routing). */
static const rec *find_any_member(int64_t seq, int64_t n) {
  for (size_t i = 0; i < J.nrecs; i++) /* rare: only g.any on replay */
    if (J.recs[i].kind == R_CALL && J.recs[i].seq == seq && J.recs[i].rank < n)
      return &J.recs[i];
  return NULL;
}

static bool parse(sf__reader *r, rec *out) {
  if (r->p >= r->end)
    return false;
  unsigned char k = *r->p++;
  uint64_t seq, spawn, rank, index, nl, vl, ol;
  if (!get_varint(r, &seq) || !get_varint(r, &spawn) || !get_varint(r, &rank) ||
      !get_varint(r, &index) || !get_varint(r, &nl) || nl > (uint64_t)(r->end - r->p))
    return false;
  out->name = (const char *)r->p;
  out->name_len = (uint32_t)nl;
  r->p += nl;
  if (!get_varint(r, &vl) || vl > (uint64_t)(r->end - r->p))
    return false;
  out->value = r->p;
  out->value_len = vl;
  r->p += vl;
  if (!get_varint(r, &ol) || ol > (uint64_t)(r->end - r->p))
    return false;
  out->out = r->p;
  out->out_len = ol;
  r->p += ol;
  out->kind = k;
  out->seq = unzigzag(seq);
  out->spawn = unzigzag(spawn);
  out->rank = unzigzag(rank);
  out->index = unzigzag(index);
  return r->p == r->end && (k == R_TASK || k == R_CALL || k == R_VALUE);
}

/* The record whose frame starts at data[at, len), checked, into *out; its
 * end offset and chain are not set. */
static bool record_at(const unsigned char *data, size_t at, size_t len, rec *out) {
  if (at + 8 > len)
    return false;
  uint32_t frame[2];
  memcpy(frame, data + at, 8);
  if (frame[0] < MIN_PAYLOAD || frame[0] > len - at - 8)
    return false;
  /* The structure first (a few bytes), then the CRC (the whole payload):
   * the search for a valid record after a bad one tries every offset. */
  sf__reader r = {data + at + 8, data + at + 8 + frame[0]};
  return parse(&r, out) && sf__crc32c(0, data + at + 8, frame[0]) == frame[1];
}

/* The offset of the first whole, checksummed record that starts after
 * `from`, or 0.  A crash tears only the end of the journal: after a torn
 * record there is nothing valid, so one found here means damage.  (A
 * record's payload could contain the bytes of another journal's record;
 * only a program that prints or returns journal bytes makes one.) */
static size_t valid_record_after(size_t from, size_t len) {
  rec rc;
  for (size_t at = from + 1; at + 8 + MIN_PAYLOAD <= len; at++)
    if (record_at(J.data, at, len, &rc))
      return at;
  return 0;
}

static void add_rec(const rec *rc, size_t *cap) {
  if (J.nrecs == *cap) {
    *cap = *cap ? 2 * *cap : 1024;
    rec *g = sf_alloc(*cap * sizeof *g);
    if (J.nrecs)
      memcpy(g, J.recs, J.nrecs * sizeof *g);
    sf_free(J.recs);
    J.recs = g;
  }
  J.recs[J.nrecs++] = *rc;
}

/* Checks the header: the magic, its own CRC, then the flags.  Refuses
 * (fatal) with what is wrong. */
static void check_header(const char *p) {
  const unsigned char *h = J.data;
  if (memcmp(h, MAGIC, 4) != 0) {
    int same = 0;
    for (int i = 0; i < 4; i++)
      same += h[i] == (unsigned char)MAGIC[i];
    if (same < 3)
      fatal("--resume: %s is not an sflow journal (it does not start with %s)", p, MAGIC);
    fatal("--resume: the journal header of %s is damaged (its magic number is wrong); "
          "refusing to resume",
          p);
  }
  uint32_t crc, args;
  memcpy(&crc, h + 16, 4);
  if (sf__crc32c(0, h, 16) != crc)
    fatal("--resume: the journal header of %s is damaged (its checksum does not match); "
          "refusing to resume",
          p);
  memcpy(&args, h + 12, 4);
  if (args != J.args_crc)
    fatal("--resume: the flags differ from those of the run in %s; resume with the same flags",
          J.dir);
  memcpy(&J.run_id, h + 4, 8);
  J.have_header = true;
  J.header_chain = sf__crc32c(0, h, HEADER_LEN);
}

static void build_index(void) {
  size_t tsize = 16;
  while (tsize < J.nrecs * 2)
    tsize *= 2;
  J.table = sf_alloc(tsize * sizeof *J.table);
  for (size_t i = 0; i < tsize; i++)
    J.table[i] = -1;
  J.table_mask = tsize - 1;
  J.values = sf_alloc((J.nrecs + 1) * sizeof *J.values);
  for (size_t k = 0; k < J.nrecs; k++) {
    rec *r = &J.recs[k];
    if (r->kind == R_VALUE) {
      if (r->value_len == 8)
        memcpy(&J.values[J.nvalues++], r->value, 8);
      continue;
    }
    size_t i = key_hash(r->kind, r->seq, r->spawn, r->rank) & J.table_mask;
    while (J.table[i] >= 0)
      i = (i + 1) & J.table_mask;
    J.table[i] = (int32_t)k;
  }
}

/* Reads the journal and decides, before anything runs and before the file
 * is touched: a torn end is repaired (cut off) when no checkpoint depends
 * on it; damage in the header or the middle, or a journal that lost what a
 * checkpoint depends on, is refused with what is wrong. */
static void load(void) {
  char p[PATH_MAX];
  path_in(p, sizeof p, "journal");
  int fd = open(p, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    fatal("--resume: there is no unfinished run to resume in %s (%s)", J.dir, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0)
    fatal("--resume: cannot read %s: %s", p, strerror(errno));
  size_t len = (size_t)st.st_size;
  J.data = sf_alloc(len + 1);
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, J.data + got, len - got);
    if (n <= 0)
      fatal("--resume: cannot read %s: %s", p, n < 0 ? strerror(errno) : "short read");
    got += (size_t)n;
  }
  J.data_len = len;
  size_t at = 0, cap = 0;
  if (len < HEADER_LEN && memcmp(J.data, MAGIC, len < 4 ? len : 4) == 0) {
    /* Killed before or while writing the header: nothing was recorded,
     * which the checkpoints must agree with (sf__checkpoint_vet). */
    J.need_header = true;
  } else {
    if (len >= 4 && memcmp(J.data, OLD_MAGIC, 4) == 0)
      fatal("--resume: %s was written by an older sflow (journal format %s, now %s) and "
            "cannot be resumed by this one; run without --resume to start over",
            p, OLD_MAGIC, MAGIC);
    if (len < HEADER_LEN)
      fatal("--resume: %s is not an sflow journal (%zu bytes, shorter than a header)", p, len);
    check_header(p);
    at = HEADER_LEN;
    uint32_t chain = J.header_chain;
    rec rc;
    while (record_at(J.data, at, len, &rc)) {
      uint32_t n;
      memcpy(&n, J.data + at, 4);
      chain = sf__crc32c(chain, J.data + at, 8);
      at += 8 + (size_t)n;
      rc.end = at;
      rc.chain = chain;
      add_rec(&rc, &cap);
    }
    if (at < len) {
      size_t next = valid_record_after(at, len);
      if (next)
        fatal("--resume: the journal %s is damaged: record %zu (at byte %zu) is corrupt but "
              "valid records follow it (at byte %zu); a crash only tears the end of a journal, "
              "so refusing to resume",
              p, J.nrecs + 1, at, next);
    }
  }
  char why[1024];
  if (!sf__checkpoint_vet(p, why, sizeof why))
    fatal("--resume: %s", why);
  if (at < len) {
    sf__notice("the journal ends in a torn or corrupt record (its last %zu bytes, from a write "
               "that a kill or a full disk cut short); they are dropped",
               len - at);
    /* Synced before anything is appended: a power loss must not bring
     * the torn bytes back between the records and the new ones, where
     * they would be damage in the middle. */
    if (ftruncate(fd, (off_t)at) != 0 || fdatasync(fd) != 0)
      fatal("--resume: cannot repair %s: %s", p, strerror(errno));
  }
  close(fd);
  /* Appending goes on from here, with the chain where the journal now
   * ends, so the resumed run's checkpoints extend this one's positions. */
  J.written = at;
  J.nwritten = J.nrecs;
  J.chain = J.nrecs ? J.recs[J.nrecs - 1].chain : J.header_chain;
  if (J.need_header)
    J.run_id = new_run_id();
  build_index();
}

/* --resume: whether the loaded journal holds what a checkpoint written at
 * pos depends on. */
int sf__journal_covers(const sf__jpos *pos) {
  if (!J.have_header) /* empty, or torn inside its header: holds nothing */
    return pos->bytes ? SF__JPOS_BEYOND : SF__JPOS_OTHER_RUN;
  if (pos->run != J.run_id)
    return SF__JPOS_OTHER_RUN;
  if (pos->bytes == 0)
    return SF__JPOS_COVERED; /* written before the first record */
  if (pos->records > J.nrecs)
    return SF__JPOS_BEYOND;
  uint64_t end = pos->records ? J.recs[pos->records - 1].end : HEADER_LEN;
  uint32_t chain = pos->records ? J.recs[pos->records - 1].chain : J.header_chain;
  return end == pos->bytes && chain == pos->chain ? SF__JPOS_COVERED : SF__JPOS_DIFFERS;
}

uint64_t sf__journal_records(void) { return J.nrecs; }

/* ------------------------------------------------------ the run's ends */

/* ------------------------------------------------------ stop signals */

/* SIGTERM (scancel, a time limit's warning, `kill`) and SIGUSR1
 * (`sbatch --signal=USR1@60`) end a journaled run as a checkpoint: the
 * journal is flushed and synced and the run exits 75 (EX_TEMPFAIL), which
 * a batch script or Slurm's RequeueExit=75 turns into a requeue whose
 * `--resume` finishes the run (docs/runtime.md, "Stop signals").  What the
 * file holds at any moment is a causally closed prefix, so any moment is
 * a consistent point.  The handler only writes a byte to a pipe: the
 * flush takes locks, so it runs on a thread of its own.  std.serve
 * installs its own SIGTERM handler when a server starts (its graceful
 * stop), which replaces this one. */
#define EX_TEMPFAIL 75
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
  unsigned char b = (unsigned char)sig;
  ssize_t n = write(stop_pipe[1], &b, 1);
  (void)n;
}

static void *stopper_main(void *arg) {
  (void)arg;
  unsigned char sig;
  while (read(stop_pipe[0], &sig, 1) != 1) {
    if (errno != EINTR)
      return NULL;
  }
  sf__jpos pos;
  bool ok = sf__journal_flush(&pos);
  sf__notice("%s: %s; exiting %d so the run can be requeued and finished with --resume",
             strsignal(sig), ok ? "journal synced" : "the journal could not be synced",
             EX_TEMPFAIL);
  fflush(stderr);
  _exit(ok ? EX_TEMPFAIL : 1);
}

static void install_stop_signals(void) {
  if (pipe2(stop_pipe, O_CLOEXEC) != 0)
    return;
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &a, stopper_main, NULL);
  pthread_attr_destroy(&a);
  if (rc != 0)
    return;
  struct sigaction sa = {0};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
}

void sf__journal_begin(const sf_program *prog, sf_value *args) {
  J.prog = prog;
  J.main_thread = pthread_self();
  J.enabled = sf__options.journal;
  sf__capture_on = J.enabled; /* before any thread: print.c keeps lines */
  if (sf__options.checkpoint_dir)
    snprintf(J.dir, sizeof J.dir, "%s", sf__options.checkpoint_dir);
  else
    snprintf(J.dir, sizeof J.dir, ".sflow/%s", prog->name && *prog->name ? prog->name : "run");
  /* The flags the run started with: a resumed run must use the same. */
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  for (int i = 0; i < prog->nparams; i++) {
    const sf_type *t = prog->params[i].kind == SF_BOOL ? &sf_type_bool
                       : prog->params[i].kind == SF_I32 ? &sf_type_i32
                       : prog->params[i].kind == SF_I64 ? &sf_type_i64
                       : prog->params[i].kind == SF_F32 ? &sf_type_f32
                       : prog->params[i].kind == SF_F64 ? &sf_type_f64
                                                        : &sf_type_str;
    sf__ser_value(&b, t, &args[i]);
  }
  J.args_crc = sf__crc32c(0, b.data, b.len);
  sf__buf_free(&b);
  if (J.enabled) {
    J.run_id = new_run_id(); /* a resumed run keeps the journal's (load) */
    install_stop_signals();
  }
  if (!sf__options.resume)
    return;
  if (!J.enabled)
    fatal("--resume needs the journal (drop --journal=false)");
  char jp[PATH_MAX];
  path_in(jp, sizeof jp, "journal");
  if (access(jp, F_OK) != 0) {
    /* Nothing was journaled (killed before the first call was recorded),
     * or the run had finished and removed its journal when it was killed.
     * Either way the only output that cannot lie is the program's own from
     * its start; a restart script must not have to tell this from an error. */
    sf__notice("--resume: no unfinished run in %s; running the program from the start", J.dir);
    sf__options.resume = false;
    return;
  }
  if (!lock_dir())
    fatal("--resume: %s is in use by another run, or cannot be opened", J.dir);
  J.replay = true;
  load();
}

void sf__journal_end(bool success) {
  if (!J.enabled)
    return;
  pthread_mutex_lock(&J.lock);
  J.stop = true;
  pthread_cond_broadcast(&J.cond);
  bool joined = J.flusher_started;
  J.flusher_started = false;
  pthread_mutex_unlock(&J.lock);
  if (joined)
    pthread_join(J.flusher, NULL);
  pthread_mutex_lock(&J.lock);
  write_pending_locked();
  if (J.fd >= 0) {
    fdatasync(J.fd);
    close(J.fd);
    J.fd = -1;
  }
  /* A resumed run that appended nothing never opened the journal for
   * writing, yet it finished the run the journal describes: it must go
   * as after any finished run, or every later --resume replays it. */
  bool clean = success && (J.opened || J.replay);
  J.enabled = false;
  sf__capture_on = false;
  pthread_mutex_unlock(&J.lock);
  if (clean) {
    /* Finished: nothing is left to resume.  Outside J.lock: an actor may
     * be inside a checkpoint write, which flushes the journal first. */
    char p[PATH_MAX];
    path_in(p, sizeof p, "journal");
    unlink(p);
    sf__checkpoint_finish();
    path_in(p, sizeof p, "lock");
    unlink(p);
    rmdir(J.dir);
    if (!sf__options.checkpoint_dir)
      rmdir(".sflow"); /* the default parent, when no other run uses it */
  }
}

/* -------------------------------------------------------- main's calls */

int64_t sf__journal_next(void) { return main_level() ? J.seq++ : -1; }

int64_t sf__spawn_id(void) {
  if (sf__task_depth != 0 || !pthread_equal(pthread_self(), J.main_thread))
    return -1;
  return J.spawns++;
}

static void same_path(const rec *r, int32_t kind, const char *name, int64_t seq) {
  if (r->kind != kind || r->name_len != strlen(name) || memcmp(r->name, name, r->name_len))
    fatal("--resume: the workflow took another path than the journaled run at call %lld "
          "(the journal has '%.*s', the run now calls '%s'); resuming needs a "
          "deterministic workflow main",
          (long long)seq, (int)r->name_len, r->name, name);
}

sf_future *sf__journal_task_replay(int64_t seq, const sf_task_desc *d, const sf_loc *loc) {
  if (!J.replay)
    return NULL;
  const rec *r = find(R_TASK, seq, -1, -1);
  if (!r)
    return NULL;
  same_path(r, R_TASK, d->name, seq);
  int32_t size = d->result && d->result->kind != SF_VOID ? d->result->size : 0;
  _Alignas(16) unsigned char small[256];
  void *v = size <= (int32_t)sizeof small ? small : sf_alloc((size_t)size);
  memset(v, 0, (size_t)size);
  sf__reader rd = {r->value, r->value + r->value_len};
  if (size && !sf__de_value(&rd, d->result, v))
    fatal("--resume: the journaled result of call %lld ('%s') does not decode", (long long)seq,
          d->name);
  emit_output(r);
  (void)loc;
  sf_future *f = sf_future_done(size ? d->result : NULL, v);
  if (v != small)
    sf_free(v);
  atomic_fetch_add_explicit(&sf__stats.replayed, 1, memory_order_relaxed);
  return f;
}

/* The output is the call's own lines (sf__capture_out), or those another
 * node printed for it as the head printed them. */
void sf__journal_task_done(int64_t seq, const sf_task_desc *d, void *res, const char *out,
                           size_t n) {
  if (!J.enabled || J.failed)
    return;
  sf__buf v = {.data = (char *)out, .len = n, .cap = n}; /* append only reads it */
  append(R_TASK, seq, -1, -1, 0, d->name, d->result, res, n ? &v : NULL);
}

int sf__journal_call_mode(sf_actor *a, int64_t seq) {
  if (!J.replay || seq < 0)
    return SF__REPLAY_LIVE;
  const rec *r = find(R_CALL, seq, sf__actor_id(a), sf__actor_rank(a));
  if (!r)
    return SF__REPLAY_LIVE;
  /* Calls the restored checkpoint already holds are not run again (the
   * index is the actor's call count after the call). */
  return r->index <= sf__actor_restored(a) ? SF__REPLAY_SKIP : SF__REPLAY_RERUN;
}

void sf__journal_call_result(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res) {
  const rec *r = find(R_CALL, seq, sf__actor_id(a), sf__actor_rank(a));
  if (!r)
    return;
  same_path(r, R_CALL, m->name, seq);
  const sf_type *t = m->result && m->result->kind != SF_VOID ? m->result : NULL;
  if (t) {
    sf_value_release(t, res);
    memset(res, 0, (size_t)t->size);
    sf__reader rd = {r->value, r->value + r->value_len};
    if (!sf__de_value(&rd, t, res))
      fatal("--resume: the journaled result of call %lld ('%s') does not decode",
            (long long)seq, m->name);
  }
  emit_output(r);
  atomic_fetch_add_explicit(&sf__stats.replayed, 1, memory_order_relaxed);
}

/* An actor call's result with what it printed: its own captured lines, or
 * a remote actor's as the head printed them (ractor_head.c). */
void sf__journal_call_done(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res,
                           const char *out, size_t n) {
  if (!J.enabled || J.failed || sf__actor_id(a) < 0)
    return;
  sf__buf v = {.data = (char *)out, .len = n, .cap = n}; /* append only reads it */
  append(R_CALL, seq, sf__actor_id(a), sf__actor_rank(a), sf__actor_calls(a), m->name,
         m->result && m->result->kind != SF_VOID ? m->result : NULL, res, n ? &v : NULL);
}

int64_t sf__journal_route_any(int64_t seq, sf_actor **members, int64_t n, int64_t best) {
  if (!J.replay || seq < 0 || n <= 0)
    return best;
  const rec *r = find_any_member(seq, n);
  if (r && r->spawn == sf__actor_id(members[0]))
    return r->rank;
  return best;
}

/* A resumed run's clock started at 0 when it did, while the values it
 * replays are the killed run's readings: a live now() read after them,
 * taken as is, could come out before the last replayed one, and an
 * elapsed time measured across the end of the replay (t1 replayed, t2
 * live) negative.  So main's clock goes on from each replayed value: a
 * live reading is shifted by (last replayed value - this run's clock when
 * main read it), and journaled shifted, so that a resume of the resumed
 * run replays the same, monotonic, sequence.  Main thread only. */
static double clock_shift;

double sf__journal_value(double live, bool clock) {
  if (!main_level())
    return live;
  if (J.replay && J.next_value < J.nvalues) {
    double v = J.values[J.next_value++];
    if (clock)
      clock_shift = v - live;
    return v;
  }
  if (clock)
    live += clock_shift;
  if (!J.failed)
    append(R_VALUE, -1, -1, -1, 0, NULL, &sf_type_f64, &live, NULL);
  return live;
}

/* --------------------------------------------------------- the hooks */

void sf__durable_install(void) {
  sf__value_tap = sf__journal_value;
  sf__durable = (sf__durable_hooks){
      .next = sf__journal_next,
      .spawn_id = sf__spawn_id,
      .task_replay = sf__journal_task_replay,
      .task_done = sf__journal_task_done,
      .call_mode = sf__journal_call_mode,
      .call_result = sf__journal_call_result,
      .call_done = sf__journal_call_done,
      .route_any = sf__journal_route_any,
      .restore = sf__checkpoint_restore,
      .checkpoint = sf__checkpoint_maybe,
      .plan_group = sf__checkpoint_plan_group,
      .group_epoch = sf__checkpoint_group_epoch,
  };
}
