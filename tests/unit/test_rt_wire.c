/*
 * test_rt_wire.c — control-plane frames and the handshake: every frame type
 * round-trips; truncated, oversized, unknown, trailing-byte and
 * inconsistent frames are refused with a message; trace batches and clock
 * answers keep every field and refuse bad records; the HMAC handshake
 * accepts the right secret and refuses a wrong one on both sides; SHA-256
 * and HMAC-SHA256 match published test vectors; a frame sent in pieces
 * (sf__wire_encode_open) is the frame encoded whole, and a large frame is
 * taken from its connection in place (sf__conn_take) with the frames
 * behind it still read.
 */
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>

#include "cluster.h"
#include "rt_test.h"

static char err[256];

static long decode(const sf__wbuf *b, sf__frame *f) {
  return sf__wire_decode(b->p, b->n, f, err, sizeof err);
}

static sf__bytes text(const char *s) { return (sf__bytes){(const uint8_t *)s, (uint32_t)strlen(s)}; }

static void test_roundtrip_all_types(void) {
  static const uint8_t blob[] = {1, 2, 3, 4, 5};
  sf__bytes bytes = {blob, sizeof blob};
  sf__wbuf recs = {0};
  sf__trace_rec rec = {.ts_ns = 5, .dur_ns = 6, .name = text("t"), .cat = text("task")};
  sf__wire_put_trace_rec(&recs, &rec);
  sf__wbuf peers = {0};
  sf__wire_put_peer(&peers, "10.0.0.1", 4000);
  sf__wire_put_peer(&peers, "::1", 4001);
  for (int t = 1; t < SF__F_COUNT; t++) {
    sf__frame f;
    memset(&f, 0, sizeof f);
    f.type = (uint8_t)t;
    switch (t) {
    case SF__F_HELLO:
      f.u.hello.pid = 77;
      f.u.hello.host = bytes;
      f.u.hello.data_addr = bytes;
      f.u.hello.data_port = 9;
      f.u.hello.obj_port = 11;
      break;
    case SF__F_TASK_SUBMIT:
      f.u.task_submit.task = 1ull << 40;
      f.u.task_submit.key = 0xfedcba9876543210ull;
      f.u.task_submit.args = bytes;
      break;
    case SF__F_TASK_RESULT: f.u.task_result.status = 1; f.u.task_result.value = bytes; break;
    case SF__F_ACTOR_CALL: f.u.actor_call.seq = 5; f.u.actor_call.args = bytes; break;
    case SF__F_ACTOR_RESULT:
      f.u.actor_result.actor = 3;
      f.u.actor_result.seq = 7;
      f.u.actor_result.status = 1;
      f.u.actor_result.value = bytes;
      break;
    case SF__F_ACTOR_STATE:
      f.u.actor_state.calls = 9;
      f.u.actor_state.epoch = 4;
      f.u.actor_state.state = bytes;
      break;
    case SF__F_ACTOR_STOP: f.u.actor_stop.actor = 1ull << 33; break;
    case SF__F_OBJECT: f.u.object.total = 10; f.u.object.offset = 5; f.u.object.data = bytes; break;
    case SF__F_GROUP_SETUP:
      f.u.group_setup.size = 2;
      f.u.group_setup.rank = 1;
      f.u.group_setup.count = 100;
      f.u.group_setup.peers = (sf__bytes){peers.p, (uint32_t)peers.n};
      break;
    case SF__F_LOG: f.u.log.line = bytes; break;
    case SF__F_CLOCK: f.u.clock.worker_ns = 3; break;
    case SF__F_TRACE: f.u.trace.count = 1; f.u.trace.events = (sf__bytes){recs.p, (uint32_t)recs.n}; break;
    default: break;
    }
    sf__wbuf b = {0};
    CHECK_INT(sf__wire_encode(&b, &f), 0);
    sf__frame g;
    CHECK_INT(decode(&b, &g), (long)b.n);
    CHECK_INT(g.type, t);
    if (t == SF__F_HELLO) { /* both listeners' ports travel */
      CHECK_INT(g.u.hello.data_port, 9);
      CHECK_INT(g.u.hello.obj_port, 11);
    }
    if (t == SF__F_TASK_SUBMIT) /* the call's identity: its random streams */
      CU_ASSERT(g.u.task_submit.key == 0xfedcba9876543210ull);
    /* Every strict prefix is "need more", never an error or a frame. */
    for (size_t k = 0; k < b.n; k++)
      CHECK_INT(sf__wire_decode(b.p, k, &g, err, sizeof err), 0);
    /* Re-encoding the decoded frame gives the same bytes. */
    sf__frame h;
    decode(&b, &h);
    sf__wbuf b2 = {0};
    sf__wire_encode(&b2, &h);
    CU_ASSERT(b2.n == b.n && memcmp(b2.p, b.p, b.n) == 0);
    sf__wbuf_free(&b);
    sf__wbuf_free(&b2);
  }
  sf__wbuf_free(&peers);
  sf__wbuf_free(&recs);
}

static void expect_bad(const uint8_t *p, size_t n, const char *want);

/* A clock answer keeps its three times (the head's offset estimate reads
 * them, control.c). */
static void test_clock(void) {
  sf__frame f = {.type = SF__F_CLOCK}, g;
  f.u.clock.seq = 9;
  f.u.clock.head_ns = 0x1122334455667788ull;
  f.u.clock.worker_ns = 0x8877665544332211ull;
  sf__wbuf b = {0};
  sf__wire_encode(&b, &f);
  CHECK_INT(b.n, 8 + 24);
  CHECK_INT(decode(&b, &g), (long)b.n);
  CU_ASSERT(g.u.clock.seq == 9 && g.u.clock.head_ns == 0x1122334455667788ull &&
            g.u.clock.worker_ns == 0x8877665544332211ull);
  b.p[0]--; /* one byte short of its layout */
  expect_bad(b.p, b.n - 1, "malformed clock frame: bad or truncated worker time");
  sf__wbuf_free(&b);
}

/* A trace batch: records round-trip with every field; a count that does
 * not match the records, an empty or NUL-holding name, an over-long
 * field, or a start + duration that overflow are refused. */
static void test_trace_batch(void) {
  sf__wbuf recs = {0};
  sf__trace_rec r1 = {.ts_ns = 1000, .dur_ns = 250, .tid = 3, .attempt = 1,
                      .name = text("flaky"), .cat = text("task"), .error = text("bad \xff")};
  sf__trace_rec r2 = {.ts_ns = 2000, .dur_ns = 0, .tid = 100000, .name = text("Counter.add"),
                      .cat = text("call")};
  CHECK_INT(sf__wire_put_trace_rec(&recs, &r1), 0);
  CHECK_INT(sf__wire_put_trace_rec(&recs, &r2), 0);
  sf__frame f = {.type = SF__F_TRACE}, g;
  f.u.trace.count = 2;
  f.u.trace.events = (sf__bytes){recs.p, (uint32_t)recs.n};
  sf__wbuf b = {0};
  sf__wire_encode(&b, &f);
  CHECK_INT(decode(&b, &g), (long)b.n);
  CHECK_INT(g.u.trace.count, 2);
  size_t off = 0;
  sf__trace_rec x;
  CU_ASSERT_FATAL(sf__wire_trace_rec(g.u.trace.events, &off, &x));
  CU_ASSERT(x.ts_ns == 1000 && x.dur_ns == 250 && x.tid == 3 && x.attempt == 1);
  CU_ASSERT(x.name.n == 5 && !memcmp(x.name.p, "flaky", 5));
  CU_ASSERT(x.error.n == 5 && !memcmp(x.error.p, "bad \xff", 5));
  CU_ASSERT_FATAL(sf__wire_trace_rec(g.u.trace.events, &off, &x));
  CU_ASSERT(x.tid == 100000 && x.error.n == 0 && x.cat.n == 4);
  CHECK_INT(off, g.u.trace.events.n);
  CU_ASSERT(!sf__wire_trace_rec(g.u.trace.events, &off, &x)); /* nothing left */
  /* Count 3 for two records, 1 for two (trailing bytes), and 0. */
  for (uint32_t count = 0; count <= 3; count += count == 0 ? 1 : 2) {
    b.n = 0;
    f.u.trace.count = count;
    sf__wire_encode(&b, &f);
    expect_bad(b.p, b.n, "malformed trace frame: bad or truncated trace events");
  }
  /* A name with a NUL byte, an empty name: refused by the encoder too. */
  sf__trace_rec bad = r2;
  bad.name = (sf__bytes){(const uint8_t *)"a\0b", 3};
  size_t before = recs.n;
  CHECK_INT(sf__wire_put_trace_rec(&recs, &bad), -1);
  bad.name = text("");
  CHECK_INT(sf__wire_put_trace_rec(&recs, &bad), -1);
  static char longname[SF__TRACE_NAME_MAX + 2];
  memset(longname, 'n', sizeof longname - 1);
  bad.name = text(longname);
  CHECK_INT(sf__wire_put_trace_rec(&recs, &bad), -1);
  CHECK_INT(recs.n, before);
  /* ... and by the decoder: patch r2's name ("Counter.add") to hold a NUL. */
  size_t name_at = recs.n - (2 + 0) - (2 + 4) - 11;
  recs.p[name_at + 3] = 0;
  b.n = 0;
  f.u.trace.count = 2;
  f.u.trace.events = (sf__bytes){recs.p, (uint32_t)recs.n};
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed trace frame: bad or truncated trace events");
  recs.p[name_at + 3] = 'n';
  /* A duration that runs past the end of time. */
  sf__wbuf o = {0};
  sf__trace_rec over = r2;
  over.ts_ns = UINT64_MAX - 5;
  over.dur_ns = 10;
  sf__wire_put_trace_rec(&o, &over);
  f.u.trace.count = 1;
  f.u.trace.events = (sf__bytes){o.p, (uint32_t)o.n};
  b.n = 0;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed trace frame: bad or truncated trace events");
  sf__wbuf_free(&o);
  sf__wbuf_free(&b);
  sf__wbuf_free(&recs);
}

static void test_fields(void) {
  sf__frame f = {.type = SF__F_HEARTBEAT}, g;
  f.u.heartbeat.seq = 0x0102030405060708ull;
  f.u.heartbeat.time_ns = 42;
  sf__wbuf b = {0};
  sf__wire_encode(&b, &f);
  CHECK_INT(b.n, 8 + 16);
  CHECK_INT(b.p[0], 20); /* length excludes its own 4 bytes */
  CHECK_INT(b.p[8], 0x08); /* little-endian */
  decode(&b, &g);
  CU_ASSERT(g.u.heartbeat.seq == 0x0102030405060708ull);
  CHECK_INT(g.u.heartbeat.time_ns, 42);
  sf__wbuf_free(&b);
}

static void expect_bad(const uint8_t *p, size_t n, const char *want) {
  sf__frame f;
  err[0] = '\0';
  CHECK_INT(sf__wire_decode(p, n, &f, err, sizeof err), -1);
  CHECK_STR(err, want);
}

static void test_malformed(void) {
  static const uint8_t short_len[] = {3, 0, 0, 0, 1, 5, 0, 0};
  expect_bad(short_len, sizeof short_len, "malformed frame: length 3 is shorter than the header");
  static const uint8_t huge[] = {0xff, 0xff, 0xff, 0x7f};
  expect_bad(huge, sizeof huge,
             "malformed frame: length 2147483647 exceeds the limit of 1073741824 bytes");
  static const uint8_t version[] = {20, 0, 0, 0, 2};
  expect_bad(version, sizeof version, "malformed frame: protocol version 2, expected 1");
  static const uint8_t type0[] = {20, 0, 0, 0, 1, 0};
  expect_bad(type0, sizeof type0, "malformed frame: unknown type 0");
  static const uint8_t type99[] = {20, 0, 0, 0, 1, 99};
  expect_bad(type99, sizeof type99, "malformed frame: unknown type 99");
  static const uint8_t flags[] = {20, 0, 0, 0, 1, 5, 1, 0};
  expect_bad(flags, sizeof flags, "malformed frame: reserved flags 0x0001 set");
  /* A heartbeat with 15 instead of 16 payload bytes. */
  uint8_t hb[8 + 16] = {19, 0, 0, 0, 1, SF__F_HEARTBEAT, 0, 0};
  expect_bad(hb, 8 + 15, "malformed heartbeat frame: bad or truncated time");
  /* ... and with one byte too many: over the type's bound, judged from
   * the header. */
  hb[0] = 21;
  uint8_t hb2[8 + 17] = {0};
  memcpy(hb2, hb, sizeof hb);
  expect_bad(hb2, sizeof hb2,
             "malformed frame: a heartbeat frame of 21 bytes exceeds the limit of 20 bytes for "
             "its type");
  /* A log line followed by a stray byte, within the type's bound. */
  uint8_t lg[8 + 4 + 2 + 1] = {4 + 4 + 2 + 1, 0, 0, 0, 1, SF__F_LOG, 0, 0, 2, 0, 0, 0, 'h', 'i', 9};
  expect_bad(lg, sizeof lg, "malformed log frame: 1 trailing bytes");
}

static void test_inner_lengths(void) {
  /* A log line whose u32 length claims more than the frame holds. */
  uint8_t lg[8 + 4 + 2] = {10, 0, 0, 0, 1, SF__F_LOG, 0, 0, 100, 0, 0, 0, 'h', 'i'};
  expect_bad(lg, sizeof lg, "malformed log frame: bad or truncated line");
  /* An object slice past its total. */
  sf__frame f = {.type = SF__F_OBJECT};
  static const uint8_t d[4] = {0};
  f.u.object.total = 6;
  f.u.object.offset = 4;
  f.u.object.data = (sf__bytes){d, 4};
  sf__wbuf b = {0};
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed object frame: bad or truncated object range");
  sf__wbuf_free(&b);
  /* A group whose rank is not below its size, and one whose peer list is short. */
  sf__wbuf peers = {0};
  sf__wire_put_peer(&peers, "127.0.0.1", 1);
  f = (sf__frame){.type = SF__F_GROUP_SETUP};
  f.u.group_setup.size = 1;
  f.u.group_setup.rank = 1;
  f.u.group_setup.peers = (sf__bytes){peers.p, (uint32_t)peers.n};
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed group-setup frame: bad or truncated group layout");
  b.n = 0;
  f.u.group_setup.size = 2;
  f.u.group_setup.rank = 0;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed group-setup frame: bad or truncated group layout");
  b.n = 0;
  f.u.group_setup.size = 1;
  f.u.group_setup.dtype = 9;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed group-setup frame: bad or truncated group layout");
  sf__wbuf_free(&b);
  sf__wbuf_free(&peers);
  /* A result status other than 0 (ok) or 1 (error). */
  f = (sf__frame){.type = SF__F_TASK_RESULT};
  f.u.task_result.status = 7;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed task-result frame: bad or truncated status");
  b.n = 0;
  /* Status 2 (an object reference, objects.c) carries exactly 16 bytes. */
  static const uint8_t ref[16] = {1};
  f.u.task_result.status = 2;
  f.u.task_result.value = (sf__bytes){ref, 15};
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed task-result frame: bad or truncated status");
  b.n = 0;
  f.u.task_result.value = (sf__bytes){ref, 16};
  sf__wire_encode(&b, &f);
  sf__frame g;
  char err[256];
  CHECK_INT(sf__wire_decode(b.p, b.n, &g, err, sizeof err), (long)b.n);
  CHECK_INT(g.u.task_result.status, 2);
  CHECK_INT(g.u.task_result.value.n, 16);
  CHECK_INT(g.u.task_result.output.n, 0);
  b.n = 0;
  /* Status 3 (an input object could not be fetched): object id + reason,
   * at least the 8 bytes of the id, and no output. */
  f.u.task_result.status = 3;
  f.u.task_result.value = (sf__bytes){ref, 7};
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed task-result frame: bad or truncated status");
  b.n = 0;
  f.u.task_result.value = (sf__bytes){ref, 12};
  sf__wire_encode(&b, &f);
  CHECK_INT(sf__wire_decode(b.p, b.n, &g, err, sizeof err), (long)b.n);
  CHECK_INT(g.u.task_result.status, 3);
  CHECK_INT(g.u.task_result.value.n, 12);
  b.n = 0;
  /* A value's output (what the attempt printed, dispatch.c) travels with it;
   * a failure carries none. */
  static const uint8_t said[] = "one\ntwo\n";
  f.u.task_result.status = 0;
  f.u.task_result.value = (sf__bytes){ref, 3};
  f.u.task_result.output = (sf__bytes){said, 8};
  sf__wire_encode(&b, &f);
  CHECK_INT(sf__wire_decode(b.p, b.n, &g, err, sizeof err), (long)b.n);
  CHECK_INT(g.u.task_result.value.n, 3);
  CHECK_INT(g.u.task_result.output.n, 8);
  CHECK_INT(memcmp(g.u.task_result.output.p, said, 8), 0);
  b.n = 0;
  f.u.task_result.status = 2;
  f.u.task_result.value = (sf__bytes){ref, 16};
  sf__wire_encode(&b, &f);
  CHECK_INT(sf__wire_decode(b.p, b.n, &g, err, sizeof err), (long)b.n);
  CHECK_INT(g.u.task_result.output.n, 8);
  b.n = 0;
  f.u.task_result.status = 1;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed task-result frame: bad or truncated output");
  b.n = 0;
  f.u.task_result.output = (sf__bytes){NULL, 0};
  /* Actor results: status 0, 1 or 2, and sequence numbers start at 1. */
  f = (sf__frame){.type = SF__F_ACTOR_RESULT};
  f.u.actor_result.seq = 1;
  f.u.actor_result.status = 3;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed actor-result frame: bad or truncated status");
  b.n = 0;
  f.u.actor_result.seq = 0;
  f.u.actor_result.status = 0;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed actor-result frame: bad or truncated sequence");
  b.n = 0;
  /* A call's output travels with its value (ractor_head.c journals it), never
   * with a failure. */
  static const char printed[] = "x 1\n";
  f.u.actor_result.seq = 4;
  f.u.actor_result.output = (sf__bytes){(const uint8_t *)printed, 4};
  sf__wire_encode(&b, &f);
  CHECK_INT(sf__wire_decode(b.p, b.n, &g, err, sizeof err), (long)b.n);
  CHECK_INT(g.u.actor_result.output.n, 4);
  CHECK_INT(memcmp(g.u.actor_result.output.p, printed, 4), 0);
  b.n = 0;
  f.u.actor_result.status = 1;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed actor-result frame: bad or truncated output");
  b.n = 0;
  /* A checkpoint cannot count more g.all epochs than calls. */
  f = (sf__frame){.type = SF__F_ACTOR_STATE};
  f.u.actor_state.calls = 2;
  f.u.actor_state.epoch = 3;
  sf__wire_encode(&b, &f);
  expect_bad(b.p, b.n, "malformed actor-state frame: bad or truncated call counts");
  b.n = 0;
  /* An actor-state whose state length runs past the frame. */
  f.u.actor_state.epoch = 1;
  static const uint8_t st[3] = {1, 2, 3};
  f.u.actor_state.state = (sf__bytes){st, 3};
  sf__wire_encode(&b, &f);
  b.p[b.n - 7] = 9; /* the u32 length: 9 instead of 3 */
  expect_bad(b.p, b.n, "malformed actor-state frame: bad or truncated state");
  sf__wbuf_free(&b);
}

static void test_two_frames_in_one_buffer(void) {
  sf__wbuf b = {0};
  sf__frame f = {.type = SF__F_SHUTDOWN}, g;
  f.u.shutdown.code = 3;
  sf__wire_encode(&b, &f);
  size_t first = b.n;
  f.u.shutdown.code = 4;
  sf__wire_encode(&b, &f);
  CHECK_INT(decode(&b, &g), (long)first);
  CHECK_INT(g.u.shutdown.code, 3);
  CHECK_INT(sf__wire_decode(b.p + first, b.n - first, &g, err, sizeof err), (long)first);
  CHECK_INT(g.u.shutdown.code, 4);
  sf__wbuf_free(&b);
}

/* A frame whose last byte string follows its start (the head sends a
 * checkpoint's state from where it lies) has the bytes of the whole one. */
static void test_encode_open(void) {
  static const uint8_t args[] = "name, ids, then the state and the peers";
  int types[] = {SF__F_ACTOR_CREATE, SF__F_ACTOR_CALL, SF__F_ACTOR_STATE, SF__F_TASK_SUBMIT,
                 SF__F_OBJECT};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    sf__frame f = {.type = (uint8_t)types[t]};
    sf__bytes whole = {args, sizeof args}, start = {args, 9};
    f.u.actor_create.actor = 5; /* the other fields stay 0: the layouts differ */
    sf__bytes *last = types[t] == SF__F_ACTOR_CREATE  ? &f.u.actor_create.args
                      : types[t] == SF__F_ACTOR_CALL  ? &f.u.actor_call.args
                      : types[t] == SF__F_ACTOR_STATE ? &f.u.actor_state.state
                      : types[t] == SF__F_TASK_SUBMIT ? &f.u.task_submit.args
                                                      : &f.u.object.data;
    *last = whole;
    sf__wbuf a = {0}, b = {0};
    CHECK_INT(sf__wire_encode(&a, &f), 0);
    *last = start;
    CHECK_INT(sf__wire_encode_open(&b, &f, sizeof args - 9), 0);
    CHECK_INT(b.n, a.n - (sizeof args - 9));
    CU_ASSERT(b.n <= a.n && !memcmp(a.p, b.p, b.n));
    sf__wbuf_free(&a);
    sf__wbuf_free(&b);
  }
  sf__frame hb = {.type = SF__F_HEARTBEAT};
  sf__wbuf c = {0};
  CHECK_INT(sf__wire_encode_open(&c, &hb, 1), -1); /* no byte string last */
  CHECK_INT(c.n, 0);
  sf__wbuf_free(&c);
}

typedef struct pushed {
  int fd;
  sf__wbuf b;
} pushed;

static void *push_main(void *arg) {
  pushed *p = arg;
  (void)sf__write_all(p->fd, (const char *)p->b.p, p->b.n);
  return NULL;
}

/* A 3 MB checkpoint frame with heartbeats before and after it: the big
 * one is taken in place (the connection's buffer, shrunk to it) and the
 * frames behind it are read on; a small one is copied. */
static void test_conn_take(void) {
  int sv[2];
  CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  size_t big = (size_t)3 << 20;
  uint8_t *state = malloc(big);
  for (size_t i = 0; i < big; i++)
    state[i] = (uint8_t)(i * 7 + 1);
  pushed p = {sv[1], {0}};
  sf__frame hb = {.type = SF__F_HEARTBEAT}, st = {.type = SF__F_ACTOR_STATE};
  hb.u.heartbeat.seq = 1;
  sf__wire_encode(&p.b, &hb);
  st.u.actor_state.actor = 9;
  st.u.actor_state.calls = st.u.actor_state.epoch = 4;
  st.u.actor_state.state = (sf__bytes){state, (uint32_t)big};
  sf__wire_encode(&p.b, &st);
  hb.u.heartbeat.seq = 2;
  sf__wire_encode(&p.b, &hb);
  pthread_t t;
  pthread_create(&t, NULL, push_main, &p);
  sf__conn c;
  sf__conn_init(&c, sv[0]);
  c.authed = true;
  sf__frame f;
  CHECK_INT(sf__conn_recv(&c, &f, 3000, err, sizeof err), 1);
  CHECK_INT(f.type, SF__F_HEARTBEAT);
  size_t n = 0;
  uint8_t *small = sf__conn_take(&c, &n); /* copied: c keeps its buffer */
  CU_ASSERT_FATAL(small != NULL);
  CU_ASSERT(small != c.rx && n == SF__FRAME_HDR + 16);
  free(small);
  CHECK_INT(sf__conn_recv(&c, &f, 3000, err, sizeof err), 1);
  CHECK_INT(f.type, SF__F_ACTOR_STATE);
  const uint8_t *rx = c.rx;
  uint8_t *mine = sf__conn_take(&c, &n);
  CU_ASSERT_FATAL(mine != NULL);
  CU_ASSERT(c.rx != rx && c.pending == 0); /* c moved to a new buffer */
  sf__frame g;
  CHECK_INT(sf__wire_decode(mine, n, &g, err, sizeof err), (long)n);
  CHECK_INT(g.u.actor_state.state.n, big);
  CU_ASSERT(!memcmp(g.u.actor_state.state.p, state, big));
  CHECK_INT(sf__conn_recv(&c, &f, 3000, err, sizeof err), 1);
  CHECK_INT(f.type, SF__F_HEARTBEAT);
  CHECK_INT(f.u.heartbeat.seq, 2);
  pthread_join(t, NULL);
  free(mine);
  free(state);
  sf__wbuf_free(&p.b);
  sf__conn_close(&c);
  close(sv[1]);
}

/* ----------------------------------------------------------- crypto */

static void hex_of(const uint8_t *b, size_t n, char *out) { sf__hex(b, n, out); }

/* Bytes of a hex string (the RFC writes keys and data in hex). */
static size_t unhex_str(const char *hex, uint8_t *out) {
  size_t n = strlen(hex) / 2;
  CU_ASSERT_FATAL(sf__unhex(hex, out, n));
  return n;
}

static void test_sha256_hmac_vectors(void) {
  char path[] = "/tmp/sflow_sha_XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT(write(fd, "abc", 3) == 3);
  close(fd);
  uint8_t h[32];
  char hex[65];
  CHECK_INT(sf__sha256_file(path, h, err, sizeof err), 0);
  sf__hex(h, 32, hex);
  CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  unlink(path);
  uint8_t back[32];
  CU_ASSERT(sf__unhex(hex, back, 32) && memcmp(back, h, 32) == 0);
  CU_ASSERT(!sf__unhex("zz", back, 1));
  CU_ASSERT(sf__ct_equal("abc", "abc", 3));
  CU_ASSERT(!sf__ct_equal("abc", "abd", 3));
  CHECK_INT(sf__sha256_file("/no/such/file", h, err, sizeof err), -1);
  CHECK_STR(err, "cannot open /no/such/file: No such file or directory");
}

/* RFC 4231, section 4: HMAC-SHA-256 of test cases 1-4, 6 and 7 (case 5
 * is truncated output, which sflow never uses).  Cases 6 and 7 have a
 * 131-byte key, longer than the block, which is hashed first. */
static void test_hmac_rfc4231(void) {
  static const struct {
    const char *key, *data, *mac; /* hex */
  } v[] = {
      {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
       "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
       "dddddddddddddddddd",
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"0102030405060708090a0b0c0d0e0f10111213141516171819",
       "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
       "cdcdcdcdcdcdcdcdcdcd",
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {NULL, "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579"
             "202d2048617368204b6579204669727374",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {NULL, "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c"
             "6f636b2d73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d"
             "73697a6520646174612e20546865206b6579206e6565647320746f20626520686173686564"
             "206265666f7265206265696e6720757365642062792074686520484d414320616c676f7269"
             "74686d2e",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    uint8_t key[131], data[256], mac[32];
    size_t klen = sizeof key;
    if (v[i].key)
      klen = unhex_str(v[i].key, key);
    else
      memset(key, 0xaa, sizeof key);
    size_t n = unhex_str(v[i].data, data);
    sf__hmac_sha256(key, klen, data, n, mac);
    char hex[65];
    hex_of(mac, 32, hex);
    CHECK_STR(hex, v[i].mac);
  }
}

/* Streamed in pieces of every size from 1 to 130 bytes, a message hashes
 * as it does in one call (the partial-block path of sf__sha256_update);
 * the FIPS "a" x 1,000,000 vector checks the result. */
static void test_sha256_streamed(void) {
  static uint8_t million[1000000];
  memset(million, 'a', sizeof million);
  for (size_t piece = 1; piece <= 130; piece++) {
    sf__sha256_ctx c;
    sf__sha256_init(&c);
    for (size_t off = 0; off < sizeof million; off += piece)
      sf__sha256_update(&c, million + off,
                        sizeof million - off < piece ? sizeof million - off : piece);
    uint8_t h[32];
    char hex[65];
    sf__sha256_final(&c, h);
    hex_of(h, 32, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  /* Every length across the padding boundary (55, 56, 63, 64 bytes ...)
   * agrees between the one-shot and the streamed forms. */
  for (size_t n = 0; n < 200; n++) {
    uint8_t one[32], two[32];
    sf__sha256(million, n, one);
    sf__sha256_ctx c;
    sf__sha256_init(&c);
    sf__sha256_update(&c, million, n / 2);
    sf__sha256_update(&c, million + n / 2, n - n / 2);
    sf__sha256_final(&c, two);
    CU_ASSERT(memcmp(one, two, 32) == 0);
  }
}

/* -------------------------------------------------------- handshake */

typedef struct side {
  int fd;
  uint8_t secret[32];
  uint32_t node;
  int rc;
  char err[256];
  bool keep;    /* keep the connection open in conn afterwards */
  sf__conn conn;
} side;

static void *head_side(void *arg) {
  side *s = arg;
  sf__conn c;
  sf__conn_init(&c, s->fd);
  s->rc = sf__auth_head(&c, s->secret, &s->node, 2000, s->err, sizeof s->err);
  if (s->keep)
    s->conn = c;
  else
    sf__conn_close(&c);
  return NULL;
}

static sf__frame sent_frame;
static sf__conn *sent_conn;

static void *send_main(void *arg) {
  (void)arg;
  char e[128];
  sf__conn_send(sent_conn, &sent_frame, 3000, e, sizeof e);
  return NULL;
}

static void handshake(const uint8_t *head_secret, const uint8_t *worker_secret, side *h,
                      side *w) {
  int sv[2];
  CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  *h = (side){sv[0], {0}, 0, 0, "", false, {0}};
  *w = (side){sv[1], {0}, 7, 0, "", false, {0}};
  memcpy(h->secret, head_secret, 32);
  memcpy(w->secret, worker_secret, 32);
  pthread_t t;
  pthread_create(&t, NULL, head_side, h);
  sf__conn c;
  sf__conn_init(&c, w->fd);
  w->rc = sf__auth_worker(&c, w->secret, w->node, 2000, w->err, sizeof w->err);
  pthread_join(t, NULL);
  sf__conn_close(&c);
}

static void test_auth_right_secret(void) {
  uint8_t s[32];
  sf__random_bytes(s, 32);
  side h, w;
  handshake(s, s, &h, &w);
  CHECK_INT(h.rc, 0);
  CHECK_INT(w.rc, 0);
  CHECK_INT(h.node, 7);
}

static void test_auth_wrong_secret(void) {
  uint8_t s[32], t[32];
  sf__random_bytes(s, 32);
  memcpy(t, s, 32);
  t[31] ^= 1;
  side h, w;
  handshake(s, t, &h, &w);
  CHECK_INT(h.rc, -1);
  CHECK_STR(h.err, "wrong HMAC: the peer does not know this run's secret");
  CHECK_INT(w.rc, -1);
  CHECK_STR(w.err, "authentication refused by the head (wrong secret?)");
}

static void test_auth_garbage(void) {
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  side h = {sv[0], {0}, 0, 0, "", false, {0}};
  pthread_t t;
  pthread_create(&t, NULL, head_side, &h);
  uint8_t junk[64];
  memset(junk, 0xff, sizeof junk);
  CU_ASSERT(write(sv[1], junk, sizeof junk) == sizeof junk);
  pthread_join(t, NULL);
  CHECK_INT(h.rc, -1);
  CHECK_STR(h.err, "malformed frame: length 4294967295 exceeds the limit of 1073741824 bytes");
  close(sv[1]);
}

/* ------------------------------------------------- per-type bounds */

/* A header (8 bytes, nothing after it) claiming len for type. */
static void header(uint8_t h[8], uint32_t len, int type) {
  for (int i = 0; i < 4; i++)
    h[i] = (uint8_t)(len >> (8 * i));
  h[4] = SF__WIRE_VERSION;
  h[5] = (uint8_t)type;
  h[6] = h[7] = 0;
}

/* Every type has a bound on its length, judged from the header alone:
 * one byte over it is refused before any of the payload is there (a
 * reader never waits for, or makes room for, more). */
static void test_type_bounds(void) {
  static const struct { int type; uint32_t max; } bounds[] = {
      {SF__F_CHALLENGE, 36},          {SF__F_AUTH, 72},
      {SF__F_AUTH_OK, 36},            {SF__F_HELLO, 378},
      {SF__F_HEARTBEAT, 20},          {SF__F_CLOCK, 28},
      {SF__F_ACTOR_STOP, 12},         {SF__F_SHUTDOWN, 4108},
      {SF__F_GROUP_DONE, 4133},       {SF__F_LOG, 65544},
      {SF__F_PRINT, (1u << 24) + 8},  {SF__F_TRACE, (1u << 24) + 12},
      {SF__F_METRICS, (1u << 20) + 8},
      {SF__F_GROUP_SETUP, 40 + SF__GROUP_MAX * 66},
  };
  for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++) {
    uint8_t h[8];
    sf__frame f;
    header(h, bounds[i].max, bounds[i].type);
    CHECK_INT(sf__wire_decode(h, sizeof h, &f, err, sizeof err), 0); /* at the bound: wait */
    header(h, bounds[i].max + 1, bounds[i].type);
    CHECK_INT(sf__wire_decode(h, sizeof h, &f, err, sizeof err), -1);
    char want[200];
    snprintf(want, sizeof want,
             "malformed frame: a %s frame of %u bytes exceeds the limit of %u bytes for its type",
             sf__wire_type_name(bounds[i].type), bounds[i].max + 1, bounds[i].max);
    CHECK_STR(err, want);
    CHECK_INT(sf__wire_max_len(bounds[i].type), bounds[i].max);
  }
  /* Frames that carry values keep the general limit. */
  static const int data[] = {SF__F_TASK_SUBMIT, SF__F_TASK_RESULT, SF__F_ACTOR_CREATE,
                             SF__F_ACTOR_CALL, SF__F_ACTOR_RESULT, SF__F_ACTOR_STATE,
                             SF__F_OBJECT};
  for (size_t i = 0; i < sizeof data / sizeof *data; i++)
    CHECK_INT(sf__wire_max_len(data[i]), SF__FRAME_MAX);
  /* The bounds are exact: the largest frames of a few types decode. */
  char host[255], reason[4096];
  memset(host, 'h', sizeof host);
  memset(reason, 'r', sizeof reason);
  sf__frame f = {.type = SF__F_HELLO};
  f.u.hello.host = (sf__bytes){(const uint8_t *)host, 255};
  f.u.hello.data_addr = (sf__bytes){(const uint8_t *)host, 63};
  sf__wbuf b = {0};
  CHECK_INT(sf__wire_encode(&b, &f), 0);
  CHECK_INT((long)b.n, 4 + 378);
  sf__frame g;
  CHECK_INT(decode(&b, &g), (long)b.n);
  b.n = 0;
  f = (sf__frame){.type = SF__F_SHUTDOWN};
  f.u.shutdown.reason = (sf__bytes){(const uint8_t *)reason, 4096};
  CHECK_INT(sf__wire_encode(&b, &f), 0);
  CHECK_INT((long)b.n, 4 + 4108);
  CHECK_INT(decode(&b, &g), (long)b.n);
  sf__wbuf_free(&b);
}

/* A peer that has not authenticated claims a 1 GiB task frame and keeps
 * sending: the reader refuses it from the header, at once, having made
 * room for no more than a handshake frame. */
typedef struct flood {
  int fd;
  size_t sent;
} flood;

static void *flood_main(void *arg) {
  flood *fl = arg;
  static uint8_t chunk[1 << 16];
  header(chunk, 1u << 30, SF__F_TASK_SUBMIT);
  for (int i = 0; i < 256; i++) { /* 16 MiB, or until the reader closes */
    ssize_t k = send(fl->fd, chunk, sizeof chunk, MSG_NOSIGNAL);
    if (k <= 0)
      break;
    fl->sent += (size_t)k;
    memset(chunk, 0, 8);
  }
  return NULL;
}

static int64_t ms_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void test_preauth_bounded(void) {
  int sv[2];
  CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  flood fl = {sv[1], 0};
  pthread_t t;
  pthread_create(&t, NULL, flood_main, &fl);
  sf__conn c;
  sf__conn_init(&c, sv[0]);
  sf__frame f;
  int64_t t0 = ms_now();
  CHECK_INT(sf__conn_recv(&c, &f, 3000, err, sizeof err), -1);
  CU_ASSERT(ms_now() - t0 < 1000);
  CHECK_STR(err, "a task-submit frame of 1073741824 bytes before authentication (until then "
                 "only the handshake's frames, at most 72 bytes, are read)");
  CU_ASSERT(c.rx_cap <= 256);
  sf__conn_close(&c); /* the flood's next send fails */
  pthread_join(t, NULL);
  close(sv[1]);
}

/* After the handshake the same connection takes frames of every type. */
static void test_after_auth_unbounded(void) {
  int sv[2];
  CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  side h = {sv[0], {0}, 0, 0, "", false, {0}};
  sf__random_bytes(h.secret, 32);
  h.keep = true;
  pthread_t t;
  pthread_create(&t, NULL, head_side, &h);
  sf__conn c;
  sf__conn_init(&c, sv[1]);
  CHECK_INT(sf__auth_worker(&c, h.secret, 3, 2000, err, sizeof err), 0);
  pthread_join(t, NULL);
  CHECK_INT(h.rc, 0);
  static uint8_t args[1 << 20];
  memset(args, 7, sizeof args);
  sf__frame f = {.type = SF__F_TASK_SUBMIT};
  f.u.task_submit.args = (sf__bytes){args, sizeof args};
  pthread_t s;
  sent_frame = f;
  sent_conn = &c;
  pthread_create(&s, NULL, send_main, NULL);
  sf__frame g;
  CHECK_INT(sf__conn_recv(&h.conn, &g, 3000, err, sizeof err), 1);
  pthread_join(s, NULL);
  CHECK_INT(g.type, SF__F_TASK_SUBMIT);
  CHECK_INT(g.u.task_submit.args.n, sizeof args);
  sf__conn_close(&h.conn);
  sf__conn_close(&c);
}

/* One frame of every type with a distinct value in every field, as the
 * hand-written encoder before SF__FRAMES wrote it: the table-derived codec
 * must decode each as its type, find each field where it was (the dump
 * names them), and write it back byte for byte, so the format on the wire
 * is the one SF__WIRE_VERSION 1 always had.  A type added to SF__FRAMES
 * without a frame here fails, as does a field moved, resized or changed
 * without a new version. */
/* The fields of f by name, in table order ("pid=7 cpus=4 host=6B ..."):
 * integers in decimal, a RAW field by its first byte, BYTES by length. */
static void add_field(char *out, size_t n, size_t *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_field(char *out, size_t n, size_t *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (*k < n) {
    int w = vsnprintf(out + *k, n - *k, fmt, ap);
    *k += w > 0 ? (size_t)w : 0;
  }
  va_end(ap);
}
static void dump_fields(const sf__frame *f, char *out, size_t n) {
  size_t k = 0;
  out[0] = '\0';
#define DUMP_INT(P, nm) add_field(out, n, &k, " " #nm "=%llu", (unsigned long long)f->u.P.nm);
#define DUMP_U8 DUMP_INT
#define DUMP_U16 DUMP_INT
#define DUMP_U32 DUMP_INT
#define DUMP_U64 DUMP_INT
#define DUMP_RAW(P, nm) add_field(out, n, &k, " " #nm "=%02x..", f->u.P.nm[0]);
#define DUMP_BYTES(P, nm) add_field(out, n, &k, " " #nm "=%uB", f->u.P.nm.n);
#define DUMP_CHECK(P, nm)
#define DUMP_FIELD(P, kind, nm, lim, what) DUMP_##kind(P, nm)
#define DUMP_FRAME(T, member, name, cls, fields) \
  case SF__F_##T: fields(DUMP_FIELD, member) break;
  switch (f->type) {
    SF__FRAMES(DUMP_FRAME)
  default: break;
  }
}

static void test_wire_bytes_unchanged(void) {
  static const struct {
    const char *name, *hex, *fields;
  } frames[] = {
      {"challenge",
       "24000000010100000c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c"
       "0c0c0c0c",
       "nonce=0c.."},
      {"auth",
       "4800000001020000d1070000181818181818181818181818181818181818181818181818"
       "181818181818181819191919191919191919191919191919191919191919191919191919"
       "19191919",
       "node=2001 nonce=18.. mac=19.."},
      {"auth-ok",
       "240000000103000022222222222222222222222222222222222222222222222222222222"
       "22222222",
       "mac=22.."},
      {"hello",
       "4d00000001040000a10f0000a20f0000a30f0000a40fa50f06000000686f73742d340b00"
       "0000646174615f616464722d343434343434343434343434343434343434343434343434"
       "343434343434343434",
       "pid=4001 cpus=4002 gpus=4003 data_port=4004 obj_port=4005 host=6B data_addr=11B exe_hash=34.."},
      {"heartbeat",
       "1400000001050000db6e152a010000001eb1242a01000000",
       "seq=5001015003 time_ns=5002015006"},
      {"task-submit",
       "26000000010600009344b0650100000072170000731700005c0bde650100000006000000"
       "617267732d36",
       "task=6001018003 fn=6002 attempt=6003 key=6004018012 args=6B"},
      {"task-result",
       "1c000000010700004b1a4ba101000000010700000076616c75652d3700000000",
       "task=7001021003 status=1 value=7B output=0B"},
      {"actor-create",
       "1a0000000108000003f0e5dc01000000421f000006000000617267732d38",
       "actor=8001024003 cls=8002 args=6B"},
      {"actor-call",
       "2200000001090000bbc5801802000000fe079018020000002b2300000600000061726773"
       "2d39",
       "actor=9001027003 seq=9002027006 method=9003 args=6B"},
      {"object",
       "27000000010a0000739b1b54020000000300000000000000640000000000000007000000"
       "646174612d3130",
       "object=10001030003 offset=3 total=100 data=7B"},
      {"shutdown",
       "15000000010b0000f92a000009000000726561736f6e2d3131",
       "code=11001 reason=9B"},
      {"group-setup",
       "40000000010c0000e34651cb020000000100000002000000090300000000000003000000"
       "e62e0000180000003930093132372e302e302e323a30093132372e302e302e33",
       "group=12001036003 rank=1 size=2 count=777 dtype=3 iters=12006 peers=24B"},
      {"group-done",
       "2f000000010d00009b1cec0603000000ca3200000164e3190703000000a7252907030000"
       "000a0000006d6573736167652d3133",
       "group=13001039003 rank=13002 ok=1 elapsed_ns=13004039012 bytes=13005039015 message=10B"},
      {"log",
       "0f000000010e0000070000006c696e652d3134",
       "line=7B"},
      {"print",
       "0f000000010f0000070000006c696e652d3135",
       "line=7B"},
      {"actor-result",
       "2500000001100000c39dbcb9030000000900000000000000010800000076616c75652d31"
       "3600000000",
       "actor=16001048003 seq=9 status=1 value=8B output=0B"},
      {"actor-state",
       "28000000011100007b7357f5030000002800000000000000070000000000000008000000"
       "73746174652d3137",
       "actor=17001051003 calls=40 epoch=7 state=8B"},
      {"actor-stop",
       "0c000000011200003349f23004000000",
       "actor=18001054003"},
      {"clock",
       "1c00000001130000eb1e8d6c040000002e619c6c0400000071a3ab6c04000000",
       "seq=19001057003 head_ns=19002057006 worker_ns=19003057009"},
      {"trace",
       "320000000114000001000000260000000500000000000000060000000000000007000000"
       "010000000400776f726b04007461736b0000",
       "count=1 events=38B"},
      {"metrics",
       "0f0000000115000007000000746578742d3231",
       "text=7B"},
  };
  bool seen[SF__F_COUNT] = {false};
  for (size_t i = 0; i < sizeof frames / sizeof *frames; i++) {
    size_t n = strlen(frames[i].hex) / 2;
    uint8_t *p = malloc(n);
    char *again = malloc(2 * n + 1), fields[600];
    CU_ASSERT_FATAL(p != NULL && again != NULL);
    for (size_t k = 0; k < n; k++)
      sscanf(frames[i].hex + 2 * k, "%2hhx", &p[k]);
    sf__frame f;
    CHECK_INT(sf__wire_decode(p, n, &f, err, sizeof err), (long)n);
    CHECK_STR(sf__wire_type_name(f.type), frames[i].name);
    dump_fields(&f, fields, sizeof fields);
    CHECK_STR(fields + (fields[0] == ' '), frames[i].fields);
    sf__wbuf b = {0};
    CHECK_INT(sf__wire_encode(&b, &f), 0);
    CHECK_INT(b.n, n);
    for (size_t k = 0; k < b.n && k < n; k++)
      snprintf(again + 2 * k, 3, "%02x", b.p[k]);
    again[2 * (b.n < n ? b.n : n)] = '\0';
    CHECK_STR(again, frames[i].hex);
    sf__wbuf_free(&b);
    if (f.type > 0 && f.type < SF__F_COUNT)
      seen[f.type] = true;
    free(again);
    free(p);
  }
  for (int t = 1; t < SF__F_COUNT; t++)
    CHECK_STR(seen[t] ? sf__wire_type_name(t) : "missing", sf__wire_type_name(t));
  CHECK_INT(SF__WIRE_VERSION, 1);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"wire_bytes_unchanged", test_wire_bytes_unchanged},
      {"roundtrip_all_types", test_roundtrip_all_types},
      {"fields", test_fields},
      {"clock", test_clock},
      {"trace_batch", test_trace_batch},
      {"malformed", test_malformed},
      {"inner_lengths", test_inner_lengths},
      {"two_frames_in_one_buffer", test_two_frames_in_one_buffer},
      {"encode_open", test_encode_open},
      {"conn_take", test_conn_take},
      {"sha256_hmac_vectors", test_sha256_hmac_vectors},
      {"hmac_rfc4231", test_hmac_rfc4231},
      {"sha256_streamed", test_sha256_streamed},
      {"auth_right_secret", test_auth_right_secret},
      {"auth_wrong_secret", test_auth_wrong_secret},
      {"auth_garbage", test_auth_garbage},
      {"type_bounds", test_type_bounds},
      {"preauth_bounded", test_preauth_bounded},
      {"after_auth_unbounded", test_after_auth_unbounded},
      {NULL, NULL},
  };
  return rt_run("wire", tests, argc, argv);
}
