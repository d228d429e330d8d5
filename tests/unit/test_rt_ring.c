/*
 * test_rt_ring.c — the TCP collectives, with one thread per member over
 * socket pairs and over real TCP (sf__ring_connect with HMAC greetings):
 * allreduce by each of its three algorithms (recursive doubling, halving
 * and doubling, ring) and by size around both thresholds, for every type
 * and operation, sizes that do not divide by the group, every group size
 * from 1 to 6, results compared exactly with a serial reference and
 * bitwise across members, also for floats whose sum depends on the order
 * and for max over -0.0 and +0.0; broadcast; barrier; a dead member gives
 * an error, not a hang.  The ring runs its 2(n-1) steps as one stream,
 * sends bounded by receives: checked with socket buffers of a few KB, so
 * that sends stall and steps interleave, with elements cut across
 * receives, and with a member that dies in the middle of the stream;
 * broadcast forwards bytes as they arrive, checked the same way.  The
 * greeters both TCP rings accept links through (sf__greet_accept): a
 * valid greeting after a stranger that closes early, one with a wrong
 * MAC and one that stays silent; silence dropped after its time, the
 * oldest dropped when every slot is taken, -1 at the deadline; a ring
 * set up past strangers on a listener, and one whose member never comes.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <math.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "rt_test.h"

#define MAXN 6

/* Which allreduce algorithm a check forces (through the thresholds). */
enum { AUTO, RD, HALVING, RING };

static void force(sf__ring *r, int algo) {
  if (algo == RD)
    r->rd_max = SIZE_MAX;
  else if (algo == HALVING)
    r->rd_max = 0, r->halving_max = SIZE_MAX;
  else if (algo == RING)
    r->rd_max = r->halving_max = 0;
}

typedef struct member {
  sf__ring ring;
  double *buf;
  size_t count;
  sf__dtype t;
  sf__redop op;
  int rc;
  char err[256];
  int mode; /* 0 allreduce, 1 broadcast, 2 barrier */
  int root;
} member;

static void *run_member(void *arg) {
  member *m = arg;
  if (m->mode == 0)
    m->rc = sf__ring_allreduce(&m->ring, m->buf, m->count, m->t, m->op, m->err, sizeof m->err);
  else if (m->mode == 1)
    m->rc = sf__ring_broadcast(&m->ring, m->buf, m->count * sf__dtype_size(m->t), m->root,
                               m->err, sizeof m->err);
  else
    m->rc = sf__ring_barrier(&m->ring, m->err, sizeof m->err);
  return NULL;
}

/* When set, make_ring gives every socket buffers of a few KB, so a
 * ring's sends stall on its successor's receives and the stream's bound
 * (send no byte before it is received and reduced) decides the order. */
static bool tiny_buffers;

static void shrink(int fd) {
  int small = 2048;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
}

/* Members 0..n-1 joined in a ring by socket pairs (i sends to i+1), plus
 * a pair for every two partners off the ring. */
static void make_ring(member *m, int n, size_t segment) {
  int fds[MAXN][2];
  for (int i = 0; i < n; i++)
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, fds[i]) == 0);
  for (int i = 0; i < n && tiny_buffers; i++) {
    shrink(fds[i][0]);
    shrink(fds[i][1]);
  }
  for (int i = 0; i < n; i++) {
    int prev = (i + n - 1) % n;
    sf__ring_init(&m[i].ring, i, n, n > 1 ? fds[prev][1] : -1, n > 1 ? fds[i][0] : -1);
    m[i].ring.segment = segment;
    m[i].ring.timeout_ms = 5000;
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (sf__ring_needs_link(n, i, j)) {
        int pair[2];
        CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
        sf__ring_link(&m[i].ring, j, pair[0]);
        sf__ring_link(&m[j].ring, i, pair[1]);
      }
  if (n == 1) {
    close(fds[0][0]);
    close(fds[0][1]);
  }
}

static void run_all(member *m, int n) {
  pthread_t t[MAXN];
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, run_member, &m[i]);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
}

/* Value of element k on member r: small integers, so every sum is exact
 * and the comparison with the serial reference can be ==. */
static double val(int r, size_t k) { return (double)((r * 7 + (int)(k % 13)) % 11) - 5.0; }

static void store(void *buf, sf__dtype t, size_t k, double v) {
  switch (t) {
  case SF__DT_F32: ((float *)buf)[k] = (float)v; break;
  case SF__DT_F64: ((double *)buf)[k] = v; break;
  case SF__DT_I32: ((int32_t *)buf)[k] = (int32_t)v; break;
  default: ((int64_t *)buf)[k] = (int64_t)v; break;
  }
}

static double load(const void *buf, sf__dtype t, size_t k) {
  switch (t) {
  case SF__DT_F32: return ((const float *)buf)[k];
  case SF__DT_F64: return ((const double *)buf)[k];
  case SF__DT_I32: return ((const int32_t *)buf)[k];
  default: return (double)((const int64_t *)buf)[k];
  }
}

static int check_algo(int n, size_t count, sf__dtype t, sf__redop op, size_t segment, int algo) {
  member m[MAXN];
  memset(m, 0, sizeof m);
  make_ring(m, n, segment);
  for (int i = 0; i < n; i++) {
    force(&m[i].ring, algo);
    m[i].buf = calloc(count + 1, 8);
    m[i].count = count;
    m[i].t = t;
    m[i].op = op;
    for (size_t k = 0; k < count; k++)
      store(m[i].buf, t, k, val(i, k));
  }
  run_all(m, n);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (m[i].rc) {
      fprintf(stderr, "\n  member %d: %s\n", i, m[i].err);
      bad++;
    }
    for (size_t k = 0; k < count && !bad; k++) {
      double want = val(0, k);
      for (int r = 1; r < n; r++) {
        double v = val(r, k);
        want = op == SF__OP_SUM ? want + v : op == SF__OP_MAX ? (v > want ? v : want)
                                                              : (v < want ? v : want);
      }
      if (load(m[i].buf, t, k) != want) {
        fprintf(stderr, "\n  n=%d count=%zu type=%d op=%d algo=%d member %d element %zu: "
                "got %g want %g\n", n, count, (int)t, (int)op, algo, i, k,
                load(m[i].buf, t, k), want);
        bad++;
      }
    }
    /* Bitwise identical on every member. */
    if (!bad && i > 0 && memcmp(m[i].buf, m[0].buf, count * sf__dtype_size(t)))
      bad++;
  }
  for (int i = 0; i < n; i++) {
    sf__ring_close(&m[i].ring);
    free(m[i].buf);
  }
  return bad;
}

static int check_allreduce(int n, size_t count, sf__dtype t, sf__redop op, size_t segment) {
  return check_algo(n, count, t, op, segment, AUTO);
}

static void test_allreduce_sizes(void) {
  static const size_t counts[] = {0, 1, 2, 3, 5, 7, 64, 1000, 4099, 100003};
  for (int n = 1; n <= 5; n++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      CHECK_INT(check_allreduce(n, counts[c], SF__DT_F64, SF__OP_SUM, 4096), 0);
}

static void test_allreduce_types_ops(void) {
  for (int t = 0; t < SF__DT_COUNT; t++)
    for (int op = 0; op < 3; op++)
      CHECK_INT(check_allreduce(4, 9999, (sf__dtype)t, (sf__redop)op, 1000), 0);
}

static void test_allreduce_odd_segments(void) {
  /* Segments that split elements: reduction waits for whole elements. */
  CHECK_INT(check_allreduce(3, 5001, SF__DT_F64, SF__OP_SUM, 13), 0);
  CHECK_INT(check_allreduce(3, 5001, SF__DT_F32, SF__OP_SUM, 7), 0);
}

static void test_allreduce_large(void) {
  CHECK_INT(check_allreduce(4, 3 << 20, SF__DT_F32, SF__OP_SUM, 256 << 10), 0);
}

static void test_allreduce_each_algorithm(void) {
  /* Each algorithm at every size, small and odd counts included (halving
   * falls back to the ring below one element per member). */
  static const size_t counts[] = {1, 2, 3, 5, 7, 64, 1000, 4099, 30001};
  for (int algo = RD; algo <= RING; algo++)
    for (int n = 1; n <= MAXN; n++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        CHECK_INT(check_algo(n, counts[c], SF__DT_F64, SF__OP_SUM, 4096, algo), 0);
  for (int algo = RD; algo <= RING; algo++)
    for (int t = 0; t < SF__DT_COUNT; t++)
      for (int op = 0; op < 3; op++) {
        CHECK_INT(check_algo(3, 999, (sf__dtype)t, (sf__redop)op, 1000, algo), 0);
        CHECK_INT(check_algo(6, 1001, (sf__dtype)t, (sf__redop)op, 1000, algo), 0);
      }
}

static void test_allreduce_thresholds(void) {
  /* One element below, at and above each switch, by the default
   * thresholds, for a power of two and odd groups (which skip halving). */
  static const size_t at[] = {SF__RING_RD_MAX, SF__RING_HALVING_MAX};
  for (int n = 3; n <= 5; n++)
    for (int i = 0; i < 2; i++)
      for (long d = -1; d <= 1; d++) {
        CHECK_INT(check_allreduce(n, at[i] / 4 + (size_t)d, SF__DT_F32, SF__OP_SUM, 256 << 10), 0);
        CHECK_INT(check_allreduce(n, at[i] / 8 + (size_t)d, SF__DT_I64, SF__OP_MAX, 256 << 10), 0);
      }
}

/* Floats whose sum depends on the order: member r holds +-2^24 scaled
 * values and small odd ones, so float additions round differently in
 * different orders.  Every member must end with the same bits, for each
 * algorithm and by size around the thresholds. */
static float rounding_val(int r, size_t k) {
  float big = (float)(1 << 24) * (float)(1 + (k + (size_t)r) % 3);
  switch ((r + (int)(k % 5)) % 4) {
  case 0: return big;
  case 1: return 1.0f + (float)(k % 7) * 0.375f;
  case 2: return -big;
  default: return 3.0f / (float)(1 + k % 11);
  }
}

static int check_rounding(int n, size_t count, int algo, size_t *sensitive) {
  member m[MAXN];
  memset(m, 0, sizeof m);
  make_ring(m, n, 4096);
  for (int i = 0; i < n; i++) {
    force(&m[i].ring, algo);
    m[i].buf = calloc(count + 1, 4);
    m[i].count = count;
    m[i].t = SF__DT_F32;
    for (size_t k = 0; k < count; k++)
      ((float *)m[i].buf)[k] = rounding_val(i, k);
  }
  run_all(m, n);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (m[i].rc) {
      fprintf(stderr, "\n  member %d: %s\n", i, m[i].err);
      bad++;
    }
    for (size_t k = 0; !bad && i > 0 && k < count; k++)
      if (memcmp(&((float *)m[i].buf)[k], &((float *)m[0].buf)[k], 4)) {
        fprintf(stderr, "\n  n=%d count=%zu algo=%d element %zu: member %d has %.9g, member 0 "
                "%.9g\n", n, count, algo, k, i, ((float *)m[i].buf)[k],
                ((float *)m[0].buf)[k]);
        bad++;
      }
  }
  /* The data must really be order-sensitive: count elements whose serial
   * sum and reversed serial sum differ. */
  for (size_t k = 0; k < count; k++) {
    float fwd = 0, back = 0;
    for (int r = 0; r < n; r++) {
      fwd += rounding_val(r, k);
      back += rounding_val(n - 1 - r, k);
    }
    *sensitive += fwd != back;
  }
  for (int i = 0; i < n; i++) {
    sf__ring_close(&m[i].ring);
    free(m[i].buf);
  }
  return bad;
}

static void test_allreduce_rounding_identical(void) {
  size_t sensitive = 0;
  for (int n = 2; n <= MAXN; n++) {
    for (int algo = RD; algo <= RING; algo++)
      CHECK_INT(check_rounding(n, 5003, algo, &sensitive), 0);
    static const size_t at[] = {SF__RING_RD_MAX / 4, SF__RING_HALVING_MAX / 4};
    for (int i = 0; i < 2; i++)
      for (long d = -1; d <= 1; d++)
        CHECK_INT(check_rounding(n, at[i] + (size_t)d, AUTO, &sensitive), 0);
  }
  CU_ASSERT(sensitive > 1000);
}

static void test_allreduce_signed_zero(void) {
  /* max(-0.0, +0.0) keeps whichever operand comes first, so members that
   * reduce the same pair must agree on the order (recursive doubling);
   * so does max with a NaN. */
  for (int n = 2; n <= MAXN; n++)
    for (int algo = RD; algo <= RING; algo++)
      for (int op = SF__OP_MAX; op <= SF__OP_MIN; op++) {
        member m[MAXN];
        memset(m, 0, sizeof m);
        make_ring(m, n, 4096);
        /* An odd count, so vectorized reductions run their scalar tail
         * too; every seventh element is a NaN on one member, which max
         * and min keep or drop by operand order as they do zeros. */
        size_t count = 67;
        for (int i = 0; i < n; i++) {
          force(&m[i].ring, algo);
          m[i].buf = calloc(count, 8);
          m[i].count = count;
          m[i].t = SF__DT_F64;
          m[i].op = (sf__redop)op;
          for (size_t k = 0; k < count; k++)
            m[i].buf[k] = k % 7 == 3 && (size_t)i == k % (size_t)n ? NAN
                          : (i + k) % 2 ? 0.0 : -0.0;
        }
        run_all(m, n);
        for (int i = 0; i < n; i++) {
          CHECK_INT(m[i].rc, 0);
          CHECK_INT(memcmp(m[i].buf, m[0].buf, count * 8) != 0, 0);
        }
        for (int i = 0; i < n; i++) {
          sf__ring_close(&m[i].ring);
          free(m[i].buf);
        }
      }
}

static void test_broadcast(void) {
  /* Every root of every group size, also with 2 KB socket buffers (each
   * member forwards bytes as they arrive, so sends stall). */
  for (int cfg = 0; cfg < 10; cfg++) {
    int tiny = cfg / 5, n = cfg % 5 + 1;
    for (int root = 0; root < n; root++) {
      member m[MAXN];
      memset(m, 0, sizeof m);
      tiny_buffers = tiny;
      make_ring(m, n, 1000);
      tiny_buffers = false;
      size_t count = 12345;
      for (int i = 0; i < n; i++) {
        m[i].buf = calloc(count, 8);
        m[i].count = count;
        m[i].t = SF__DT_F64;
        m[i].mode = 1;
        m[i].root = root;
        for (size_t k = 0; k < count; k++)
          m[i].buf[k] = i == root ? (double)k * 3 : -1;
      }
      run_all(m, n);
      for (int i = 0; i < n; i++) {
        CHECK_INT(m[i].rc, 0);
        int wrong = 0;
        for (size_t k = 0; k < count; k++)
          wrong += m[i].buf[k] != (double)k * 3;
        CHECK_INT(wrong, 0);
        sf__ring_close(&m[i].ring);
        free(m[i].buf);
      }
    }
  }
}

static void test_barrier(void) {
  member m[MAXN];
  memset(m, 0, sizeof m);
  make_ring(m, 5, 4096);
  for (int i = 0; i < 5; i++)
    m[i].mode = 2;
  run_all(m, 5);
  for (int i = 0; i < 5; i++) {
    CHECK_INT(m[i].rc, 0);
    sf__ring_close(&m[i].ring);
  }
}

static void test_dead_peer_is_an_error(void) {
  /* Member 2 of 3 never takes part: the others time out with a message. */
  member m[3];
  memset(m, 0, sizeof m);
  make_ring(m, 3, 4096);
  for (int i = 0; i < 3; i++) {
    m[i].buf = calloc(100000, 8);
    m[i].count = 100000;
    m[i].t = SF__DT_F64;
    m[i].ring.timeout_ms = 300;
  }
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, run_member, &m[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  CHECK_INT(m[0].rc, -1);
  CU_ASSERT(strstr(m[0].err, "no progress for 300 ms") != NULL);
  /* Closing the silent member's sockets turns it into a clean "closed". */
  for (int i = 0; i < 3; i++) {
    sf__ring_close(&m[i].ring);
    free(m[i].buf);
  }
}


/* ------------------------------------------------- the ring's stream */

static void test_ring_stream_sizes(void) {
  /* Counts below, at and just above the group size (empty chunks), odd
   * counts whose chunks differ in length, and one long enough for many
   * segments per chunk; segments of 5 bytes cut elements across
   * receives and sends. */
  tiny_buffers = true;
  for (int n = 2; n <= MAXN; n++) {
    const size_t counts[] = {1, 2, 3, (size_t)n - 1, (size_t)n, (size_t)n + 1, 997, 65537};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      CHECK_INT(check_algo(n, counts[c], SF__DT_F64, SF__OP_SUM, 4096, RING), 0);
      if (counts[c] < 1000)
        CHECK_INT(check_algo(n, counts[c], SF__DT_F32, SF__OP_SUM, 5, RING), 0);
    }
  }
  tiny_buffers = false;
}

static void test_ring_stream_types_ops(void) {
  /* Every type and operation, segments of 3 bytes (no element arrives
   * whole), counts above and below the group size. */
  tiny_buffers = true;
  for (int t = 0; t < SF__DT_COUNT; t++)
    for (int op = 0; op < 3; op++)
      for (int n = 2; n <= 5; n++) {
        CHECK_INT(check_algo(n, 1001, (sf__dtype)t, (sf__redop)op, 3, RING), 0);
        CHECK_INT(check_algo(n, 3, (sf__dtype)t, (sf__redop)op, 3, RING), 0);
      }
  tiny_buffers = false;
}

static void test_ring_stream_rounding_identical(void) {
  /* Order-sensitive floats with stalled sends: still the same bits on
   * every member. */
  size_t sensitive = 0;
  tiny_buffers = true;
  for (int n = 2; n <= MAXN; n++)
    CHECK_INT(check_rounding(n, 40009, RING, &sensitive), 0);
  tiny_buffers = false;
  CU_ASSERT(sensitive > 1000);
}

/* Member 2 of 3 takes part for a while, then dies: it forwards nothing of
 * what it receives, sends its successor a few KB of its stream and closes
 * its sockets. */
static void *die_mid_stream(void *arg) {
  member *m = arg;
  static uint8_t buf[16384];
  fcntl(m->ring.prev_fd, F_SETFL, 0);
  fcntl(m->ring.next_fd, F_SETFL, 0);
  for (size_t got = 0; got < sizeof buf;) {
    ssize_t k = recv(m->ring.prev_fd, buf, sizeof buf - got, 0);
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  memset(buf, 0, sizeof buf);
  if (send(m->ring.next_fd, buf, sizeof buf, MSG_NOSIGNAL) < 0)
    perror("die_mid_stream");
  sf__ring_close(&m->ring);
  return NULL;
}

static int64_t elapsed_ms(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void test_ring_stream_peer_dies(void) {
  /* The others fail at once, naming the dead member, well before their
   * 20 s timeout. */
  member m[3];
  memset(m, 0, sizeof m);
  make_ring(m, 3, 4096);
  for (int i = 0; i < 3; i++) {
    force(&m[i].ring, RING);
    m[i].buf = calloc(300000, 8);
    m[i].count = 300000;
    m[i].t = SF__DT_F64;
    m[i].ring.timeout_ms = 20000;
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t t[3];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, run_member, &m[i]);
  pthread_create(&t[2], NULL, die_mid_stream, &m[2]);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  int64_t ms = elapsed_ms(&t0);
  if (ms >= 10000)
    fprintf(stderr, "\n  the others took %lld ms to fail\n", (long long)ms);
  CU_ASSERT(ms < 10000);
  CHECK_INT(m[0].rc, -1);
  CHECK_STR(m[0].err, "ring rank 0: rank 2 closed the connection");
  CHECK_INT(m[1].rc, -1);
  CU_ASSERT(strncmp(m[1].err, "ring rank 1: sending to rank 2 failed", 37) == 0);
  if (strncmp(m[1].err, "ring rank 1: sending to rank 2 failed", 37))
    fprintf(stderr, "\n  member 1: %s\n", m[1].err);
  for (int i = 0; i < 3; i++) {
    sf__ring_close(&m[i].ring);
    free(m[i].buf);
  }
}

/* ------------------------------------------------------- over real TCP */

/* One count per algorithm by the default thresholds (f64; halving only
 * for 2 and 4 members). */
static const size_t tcp_counts[] = {100, SF__RING_HALVING_MAX / 8 - 5, SF__RING_HALVING_MAX / 8 + 3};
#define TCP_COUNTS (sizeof tcp_counts / sizeof tcp_counts[0])

typedef struct tcp_member {
  int rank, n, listen_fd;
  sf__peer *peers;
  uint8_t secret[32];
  member m;
  int wrong[TCP_COUNTS];
} tcp_member;

static void *tcp_run(void *arg) {
  tcp_member *tm = arg;
  tm->m.rc = sf__ring_connect(&tm->m.ring, 99, tm->rank, tm->n, tm->peers, tm->listen_fd,
                              tm->secret, 5000, tm->m.err, sizeof tm->m.err);
  for (size_t c = 0; c < TCP_COUNTS && tm->m.rc == 0; c++) {
    tm->m.count = tcp_counts[c];
    for (size_t k = 0; k < tm->m.count; k++)
      tm->m.buf[k] = val(tm->rank, k);
    run_member(&tm->m);
    for (size_t k = 0; k < tm->m.count && tm->m.rc == 0; k++) {
      double want = 0;
      for (int r = 0; r < tm->n; r++)
        want += val(r, k);
      tm->wrong[c] += tm->m.buf[k] != want;
    }
  }
  return NULL;
}

/* n members connect over TCP on 127.0.0.1 (ring and partner links, HMAC
 * greetings) and allreduce once by each algorithm. */
static void tcp_allreduce(int n) {
  tcp_member tm[MAXN];
  sf__peer peers[MAXN];
  char lerr[256];
  memset(tm, 0, sizeof tm);
  uint8_t secret[32];
  sf__random_bytes(secret, 32);
  for (int i = 0; i < n; i++) {
    uint16_t port;
    tm[i].listen_fd = sf__ring_listen("127.0.0.1", &port, lerr, sizeof lerr);
    CU_ASSERT_FATAL(tm[i].listen_fd >= 0);
    snprintf(peers[i].addr, sizeof peers[i].addr, "127.0.0.1");
    peers[i].port = port;
  }
  for (int i = 0; i < n; i++) {
    tm[i].rank = i;
    tm[i].n = n;
    tm[i].peers = peers;
    memcpy(tm[i].secret, secret, 32);
    tm[i].m.buf = calloc(tcp_counts[TCP_COUNTS - 1], 8);
    tm[i].m.t = SF__DT_F64;
  }
  pthread_t t[MAXN];
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, tcp_run, &tm[i]);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < n; i++) {
    if (tm[i].m.rc)
      fprintf(stderr, "\n  n=%d member %d: %s\n", n, i, tm[i].m.err);
    CHECK_INT(tm[i].m.rc, 0);
    for (size_t c = 0; c < TCP_COUNTS; c++)
      CHECK_INT(tm[i].wrong[c], 0);
    /* Partner links off the ring: 4 members need 0-2 and 1-3. */
    if (n == 4)
      CHECK_INT(tm[i].m.ring.nlinks, 1);
    sf__ring_close(&tm[i].m.ring);
    close(tm[i].listen_fd);
    free(tm[i].m.buf);
  }
}

static void test_tcp_ring_with_hmac(void) {
  for (int n = 2; n <= MAXN; n++)
    tcp_allreduce(n);
}

/* ---------------------------------------------------------- greeters */

static const uint8_t greet_key[32] = {7};

/* The test's greeting: HMAC(key, nonce | id | rank) after id and rank. */
static void test_greeting(const uint8_t nonce[SF__GREET_NONCE], uint64_t id, uint32_t rank,
                          uint8_t out[SF__GREETING_LEN]) {
  uint8_t msg[SF__GREET_NONCE + 12];
  memcpy(msg, nonce, SF__GREET_NONCE);
  for (int i = 0; i < 8; i++)
    msg[SF__GREET_NONCE + i] = out[i] = (uint8_t)(id >> (8 * i));
  for (int i = 0; i < 4; i++)
    msg[SF__GREET_NONCE + 8 + i] = out[8 + i] = (uint8_t)(rank >> (8 * i));
  sf__hmac_sha256(greet_key, sizeof greet_key, msg, sizeof msg, out + 12);
}

typedef struct {
  char drops[8][96];
  int ndrops, refused;
} greet_log;

static bool greet_check(void *ctx, const sf__greeter *g, uint64_t id, uint32_t rank) {
  greet_log *l = ctx;
  uint8_t want[SF__GREETING_LEN];
  test_greeting(g->nonce, id, rank, want);
  if (!memcmp(want + 12, g->got + 12, 32))
    return true;
  l->refused++;
  return false;
}

static void greet_drop(void *ctx, const char *why) {
  greet_log *l = ctx;
  if (l->ndrops < 8)
    snprintf(l->drops[l->ndrops++], sizeof l->drops[0], "%s", why);
}

static bool dropped(const greet_log *l, const char *why) {
  for (int i = 0; i < l->ndrops; i++)
    if (!strcmp(l->drops[i], why))
      return true;
  return false;
}

static int dial_local(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CU_ASSERT_FATAL(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  return fd;
}

/* A client that reads the nonce and sends a greeting (MAC spoiled when
 * bad); the socket stays open. */
static int greet_as(uint16_t port, uint64_t id, uint32_t rank, bool bad) {
  int fd = dial_local(port);
  uint8_t nonce[SF__GREET_NONCE], hello[SF__GREETING_LEN];
  CU_ASSERT_FATAL(recv(fd, nonce, sizeof nonce, MSG_WAITALL) == (ssize_t)sizeof nonce);
  test_greeting(nonce, id, rank, hello);
  if (bad)
    hello[20] ^= 1;
  CU_ASSERT_FATAL(send(fd, hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello);
  return fd;
}

typedef struct {
  uint16_t port;
  int bad_fd, good_fd;
} greet_client;

static void *greet_clients(void *arg) {
  greet_client *c = arg;
  c->bad_fd = greet_as(c->port, 7, 3, true);
  c->good_fd = greet_as(c->port, 7, 3, false);
  return NULL;
}

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void test_greeters(void) {
  char err[256];
  uint16_t port;
  int lfd = sf__ring_listen("127.0.0.1", &port, err, sizeof err);
  CU_ASSERT_FATAL(lfd >= 0);
  greet_log log = {.ndrops = 0};
  sf__greeters gs;
  sf__greeters_init(&gs, 4, true, greet_check, greet_drop, &log);
  gs.timeout_ms = 1000;
  /* A stranger that stays silent, one that sends a little and closes,
   * then (from a thread: each waits for its nonce) a wrong MAC and a
   * valid greeting. */
  int silent = dial_local(port);
  int early = dial_local(port);
  CU_ASSERT(send(early, "garbage", 7, MSG_NOSIGNAL) == 7);
  close(early);
  greet_client c = {port, -1, -1};
  pthread_t th;
  pthread_create(&th, NULL, greet_clients, &c);
  uint64_t id = 0;
  uint32_t rank = 0;
  int64_t t0 = mono_ms();
  int fd = sf__greet_accept(&gs, lfd, t0 + 5000, &id, &rank);
  pthread_join(th, NULL);
  CU_ASSERT(fd >= 0);
  CU_ASSERT(id == 7 && rank == 3);
  CU_ASSERT(mono_ms() - t0 < 900); /* not held up by the silent stranger */
  CHECK_INT(log.refused, 1);
  CU_ASSERT(dropped(&log, "bad greeting (closed before it was complete)"));
  /* Nothing more comes: the silent one goes after its second, and the
   * call ends at its deadline. */
  t0 = mono_ms();
  CHECK_INT(sf__greet_accept(&gs, lfd, t0 + 1500, &id, &rank), -1);
  int64_t took = mono_ms() - t0;
  CU_ASSERT(took >= 1490 && took < 3000);
  CU_ASSERT(dropped(&log, "no greeting within 1 s"));
  uint8_t nb[SF__GREET_NONCE + 1];
  CHECK_INT((int)recv(silent, nb, SF__GREET_NONCE, MSG_WAITALL), SF__GREET_NONCE); /* nonce */
  CHECK_INT((int)recv(silent, nb, 1, 0), 0); /* then closed */
  /* Every slot taken: a new connection crowds out the oldest. */
  sf__greeters_close(&gs);
  sf__greeters_init(&gs, 1, false, greet_check, greet_drop, &log);
  int a1 = dial_local(port), a2 = dial_local(port);
  CHECK_INT(sf__greet_accept(&gs, lfd, mono_ms() + 300, &id, &rank), -1);
  CU_ASSERT(dropped(&log, "too many connections greeting at once; dropped the oldest"));
  sf__greeters_close(&gs);
  for (int f = 0; f < 5; f++) {
    int x[] = {fd, c.bad_fd, c.good_fd, silent, a1};
    close(x[f]);
  }
  close(a2);
  close(lfd);
}

/* sf__ring_connect through its greeters: strangers on a member's listener
 * (silent, garbage then closed, 44 bytes with a wrong MAC) cost the ring
 * nothing, and a member that never connects is an error naming it at the
 * timeout. */
static void test_tcp_ring_strangers(void) {
  tcp_member tm[2];
  sf__peer peers[2];
  char lerr[256];
  memset(tm, 0, sizeof tm);
  for (int i = 0; i < 2; i++) {
    uint16_t port;
    tm[i].listen_fd = sf__ring_listen("127.0.0.1", &port, lerr, sizeof lerr);
    CU_ASSERT_FATAL(tm[i].listen_fd >= 0);
    snprintf(peers[i].addr, sizeof peers[i].addr, "127.0.0.1");
    peers[i].port = port;
    tm[i].rank = i;
    tm[i].n = 2;
    tm[i].peers = peers;
    tm[i].m.buf = calloc(tcp_counts[TCP_COUNTS - 1], 8);
    tm[i].m.t = SF__DT_F64;
  }
  int silent = dial_local(peers[1].port), early = dial_local(peers[1].port);
  int forged = dial_local(peers[1].port);
  uint8_t junk[SF__GREETING_LEN] = {99}; /* group 99, rank 0, no MAC */
  CU_ASSERT(send(early, "garbage", 7, MSG_NOSIGNAL) == 7);
  close(early);
  CU_ASSERT(send(forged, junk, sizeof junk, MSG_NOSIGNAL) == (ssize_t)sizeof junk);
  int64_t t0 = mono_ms();
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, tcp_run, &tm[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (tm[i].m.rc)
      fprintf(stderr, "\n  member %d: %s\n", i, tm[i].m.err);
    CHECK_INT(tm[i].m.rc, 0);
    for (size_t c = 0; c < TCP_COUNTS; c++)
      CHECK_INT(tm[i].wrong[c], 0);
    sf__ring_close(&tm[i].m.ring);
  }
  CU_ASSERT(mono_ms() - t0 < 4000); /* not held up by the silent one (5 s) */
  uint8_t b;
  CHECK_INT((int)recv(forged, &b, 1, 0), 0); /* refused: closed */
  close(silent);
  close(forged);
  /* Member 1 never comes: member 0 dials it (its backlog answers) and
   * waits for it to connect back. */
  uint8_t secret[32] = {0};
  sf__ring r;
  char err[256] = "";
  t0 = mono_ms();
  CHECK_INT(sf__ring_connect(&r, 5, 0, 2, peers, tm[0].listen_fd, secret, 400, err, sizeof err),
            -1);
  CHECK_STR(err, "ring member 1 did not connect within 400 ms");
  CU_ASSERT(mono_ms() - t0 >= 390);
  for (int i = 0; i < 2; i++) {
    close(tm[i].listen_fd);
    free(tm[i].m.buf);
  }
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"allreduce_sizes", test_allreduce_sizes},
      {"allreduce_types_ops", test_allreduce_types_ops},
      {"allreduce_odd_segments", test_allreduce_odd_segments},
      {"allreduce_large", test_allreduce_large},
      {"allreduce_each_algorithm", test_allreduce_each_algorithm},
      {"allreduce_thresholds", test_allreduce_thresholds},
      {"allreduce_rounding_identical", test_allreduce_rounding_identical},
      {"allreduce_signed_zero", test_allreduce_signed_zero},
      {"broadcast", test_broadcast},
      {"barrier", test_barrier},
      {"dead_peer_is_an_error", test_dead_peer_is_an_error},
      {"ring_stream_sizes", test_ring_stream_sizes},
      {"ring_stream_types_ops", test_ring_stream_types_ops},
      {"ring_stream_rounding_identical", test_ring_stream_rounding_identical},
      {"ring_stream_peer_dies", test_ring_stream_peer_dies},
      {"tcp_ring_with_hmac", test_tcp_ring_with_hmac},
      {"greeters", test_greeters},
      {"tcp_ring_strangers", test_tcp_ring_strangers},
      {NULL, NULL},
  };
  return rt_run("ring", tests, argc, argv);
}
