/*
 * wire.c — the control plane's frames: encoding, a strict decoder, framed
 * connections with deadlines, and the HMAC challenge-response handshake.
 *
 * Key design choice: the decoder is the only code that reads bytes from the
 * network, and it is written so that any input is safe.  Every read goes
 * through one bounds-checked reader that only moves forward; a frame is
 * accepted only when its header is valid, its payload matches the layout of
 * its type exactly (no trailing bytes, counts within limits) and all nested
 * lengths fit.  Decoded byte fields point into the receive buffer (no copy,
 * no allocation), so a malformed frame can cost nothing but its bytes.
 * tests/fuzz/fuzz_wire.c drives it under ASan and UBSan.
 *
 * Every type has a largest length (sf__wire_max_len: a few bytes to a few
 * KB for control frames, SF__FRAME_MAX for those that carry values), which
 * the header alone is judged against, so nobody waits for or makes room
 * for a frame that could never be valid.  A connection reads nothing but
 * the handshake's frames (at most 72 bytes) until its peer has proved the
 * run's secret, and never more than the frame it is completing needs: a
 * stranger costs a few hundred bytes whatever it claims.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

/* The error reporting every net module shares: formats into the caller's
 * buffer and returns -1, so callers can `return sf__net_fail(...)`. */
int sf__net_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (errlen)
    vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}


static const char *const type_names[SF__F_COUNT] = {
    [SF__F_CHALLENGE] = "challenge",       [SF__F_AUTH] = "auth",
    [SF__F_AUTH_OK] = "auth-ok",           [SF__F_HELLO] = "hello",
    [SF__F_HEARTBEAT] = "heartbeat",       [SF__F_TASK_SUBMIT] = "task-submit",
    [SF__F_TASK_RESULT] = "task-result",   [SF__F_ACTOR_CREATE] = "actor-create",
    [SF__F_ACTOR_CALL] = "actor-call",     [SF__F_OBJECT] = "object",
    [SF__F_SHUTDOWN] = "shutdown",         [SF__F_GROUP_SETUP] = "group-setup",
    [SF__F_GROUP_DONE] = "group-done",     [SF__F_LOG] = "log",
    [SF__F_PRINT] = "print",               [SF__F_ACTOR_RESULT] = "actor-result",
    [SF__F_ACTOR_STATE] = "actor-state",   [SF__F_ACTOR_STOP] = "actor-stop",
    [SF__F_CLOCK] = "clock",               [SF__F_TRACE] = "trace",
    [SF__F_METRICS] = "metrics",
};

const char *sf__wire_type_name(int type) {
  return type > 0 && type < SF__F_COUNT ? type_names[type] : "unknown";
}

/* The limits of variable fields, shared by the decoder and the table. */
#define HOST_MAX 255          /* hello: host name */
#define ADDR_MAX 63           /* hello: data-plane address */
#define TEXT_MAX 4096         /* shutdown reason, group-done message */
#define LOG_MAX 65536         /* one log line */
#define PRINT_MAX (1u << 24)  /* print output of one frame */
#define METRICS_MAX (1u << 20) /* a worker's metrics text */
#define EVENTS_MAX (1u << 24) /* one trace batch */
#define PEERS_MAX (SF__GROUP_MAX * 66u) /* u16 port, u8 length, 63 bytes each */

/* len (the bytes after the length field: version, type, flags, payload)
 * of the largest valid frame of each type. */
uint32_t sf__wire_max_len(int type) {
  switch (type) {
  case SF__F_CHALLENGE: return 4 + 32;
  case SF__F_AUTH: return 4 + 4 + 32 + 32;
  case SF__F_AUTH_OK: return 4 + 32;
  case SF__F_HELLO: return 4 + 12 + 4 + 4 + HOST_MAX + 4 + ADDR_MAX + 32;
  case SF__F_HEARTBEAT: return 4 + 16;
  case SF__F_CLOCK: return 4 + 24;
  case SF__F_ACTOR_STOP: return 4 + 8;
  case SF__F_SHUTDOWN: return 4 + 4 + 4 + TEXT_MAX;
  case SF__F_GROUP_SETUP: return 4 + 32 + 4 + PEERS_MAX;
  case SF__F_GROUP_DONE: return 4 + 29 + 4 + TEXT_MAX;
  case SF__F_LOG: return 4 + 4 + LOG_MAX;
  case SF__F_PRINT: return 4 + 4 + PRINT_MAX;
  case SF__F_METRICS: return 4 + 4 + METRICS_MAX;
  case SF__F_TRACE: return 4 + 4 + 4 + EVENTS_MAX;
  case SF__F_TASK_SUBMIT:
  case SF__F_TASK_RESULT:
  case SF__F_ACTOR_CREATE:
  case SF__F_ACTOR_CALL:
  case SF__F_ACTOR_RESULT:
  case SF__F_ACTOR_STATE:
  case SF__F_OBJECT: return SF__FRAME_MAX;
  default: return 0;
  }
}

/* The frames of the handshake: all a connection reads before its peer
 * has proved the secret. */
static bool handshake_type(int type) {
  return type == SF__F_CHALLENGE || type == SF__F_AUTH || type == SF__F_AUTH_OK;
}
#define HANDSHAKE_MAX (4 + 4 + 32 + 32) /* sf__wire_max_len(SF__F_AUTH) */

/* ------------------------------------------------------------ writer */

void sf__wbuf_free(sf__wbuf *b) {
  free(b->p);
  *b = (sf__wbuf){0};
}

static bool wb_reserve(sf__wbuf *b, size_t extra) {
  if (b->n + extra <= b->cap)
    return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + extra)
    cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p)
    return false;
  b->p = p;
  b->cap = cap;
  return true;
}

static void put(sf__wbuf *b, const void *p, size_t n) {
  if (n && wb_reserve(b, n)) {
    memcpy(b->p + b->n, p, n);
    b->n += n;
  }
}
static void put_u8(sf__wbuf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(sf__wbuf *b, uint16_t v) {
  uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(b, x, 2);
}
static void put_u32(sf__wbuf *b, uint32_t v) {
  uint8_t x[4];
  for (int i = 0; i < 4; i++)
    x[i] = (uint8_t)(v >> (8 * i));
  put(b, x, 4);
}
static void put_u64(sf__wbuf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++)
    x[i] = (uint8_t)(v >> (8 * i));
  put(b, x, 8);
}
static void put_bytes(sf__wbuf *b, sf__bytes v) {
  put_u32(b, v.n);
  put(b, v.p, v.n);
}

void sf__wire_put_peer(sf__wbuf *b, const char *addr, uint16_t port) {
  size_t n = strlen(addr);
  put_u16(b, port);
  put_u8(b, (uint8_t)(n > 63 ? 63 : n));
  put(b, addr, n > 63 ? 63 : n);
}

static bool rec_field_ok(sf__bytes v, uint32_t min, uint32_t max) {
  return v.n >= min && v.n <= max && (!v.n || !memchr(v.p, 0, v.n));
}

int sf__wire_put_trace_rec(sf__wbuf *b, const sf__trace_rec *r) {
  if (!rec_field_ok(r->name, 1, SF__TRACE_NAME_MAX) || !rec_field_ok(r->cat, 1, SF__TRACE_NAME_MAX) ||
      !rec_field_ok(r->error, 0, SF__TRACE_ERROR_MAX))
    return -1;
  put_u64(b, r->ts_ns);
  put_u64(b, r->dur_ns);
  put_u32(b, r->tid);
  put_u32(b, r->attempt);
  const sf__bytes *s[3] = {&r->name, &r->cat, &r->error};
  for (int i = 0; i < 3; i++) {
    put_u16(b, (uint16_t)s[i]->n);
    put(b, s[i]->p, s[i]->n);
  }
  return 0;
}

static void put_payload(sf__wbuf *b, const sf__frame *f) {
  switch (f->type) {
  case SF__F_CHALLENGE: put(b, f->u.challenge.nonce, 32); break;
  case SF__F_AUTH:
    put_u32(b, f->u.auth.node);
    put(b, f->u.auth.nonce, 32);
    put(b, f->u.auth.mac, 32);
    break;
  case SF__F_AUTH_OK: put(b, f->u.auth_ok.mac, 32); break;
  case SF__F_HELLO:
    put_u32(b, f->u.hello.pid);
    put_u32(b, f->u.hello.cpus);
    put_u32(b, f->u.hello.gpus);
    put_u16(b, f->u.hello.data_port);
    put_u16(b, f->u.hello.obj_port);
    put_bytes(b, f->u.hello.host);
    put_bytes(b, f->u.hello.data_addr);
    put(b, f->u.hello.exe_hash, 32);
    break;
  case SF__F_HEARTBEAT:
    put_u64(b, f->u.heartbeat.seq);
    put_u64(b, f->u.heartbeat.time_ns);
    break;
  case SF__F_TASK_SUBMIT:
    put_u64(b, f->u.task_submit.task);
    put_u32(b, f->u.task_submit.fn);
    put_u32(b, f->u.task_submit.attempt);
    put_u64(b, f->u.task_submit.key); /* random streams: the call's identity */
    put_bytes(b, f->u.task_submit.args);
    break;
  case SF__F_TASK_RESULT:
    put_u64(b, f->u.task_result.task);
    put_u8(b, f->u.task_result.status);
    put_bytes(b, f->u.task_result.value);
    put_bytes(b, f->u.task_result.output);
    break;
  case SF__F_ACTOR_CREATE:
    put_u64(b, f->u.actor_create.actor);
    put_u32(b, f->u.actor_create.cls);
    put_bytes(b, f->u.actor_create.args);
    break;
  case SF__F_ACTOR_CALL:
    put_u64(b, f->u.actor_call.actor);
    put_u64(b, f->u.actor_call.seq);
    put_u32(b, f->u.actor_call.method);
    put_bytes(b, f->u.actor_call.args);
    break;
  case SF__F_ACTOR_RESULT:
    put_u64(b, f->u.actor_result.actor);
    put_u64(b, f->u.actor_result.seq);
    put_u8(b, f->u.actor_result.status);
    put_bytes(b, f->u.actor_result.value);
    put_bytes(b, f->u.actor_result.output);
    break;
  case SF__F_ACTOR_STATE:
    put_u64(b, f->u.actor_state.actor);
    put_u64(b, f->u.actor_state.calls);
    put_u64(b, f->u.actor_state.epoch);
    put_bytes(b, f->u.actor_state.state);
    break;
  case SF__F_ACTOR_STOP: put_u64(b, f->u.actor_stop.actor); break;
  case SF__F_OBJECT:
    put_u64(b, f->u.object.object);
    put_u64(b, f->u.object.offset);
    put_u64(b, f->u.object.total);
    put_bytes(b, f->u.object.data);
    break;
  case SF__F_SHUTDOWN:
    put_u32(b, f->u.shutdown.code);
    put_bytes(b, f->u.shutdown.reason);
    break;
  case SF__F_GROUP_SETUP:
    put_u64(b, f->u.group_setup.group);
    put_u32(b, f->u.group_setup.rank);
    put_u32(b, f->u.group_setup.size);
    put_u64(b, f->u.group_setup.count);
    put_u32(b, f->u.group_setup.dtype);
    put_u32(b, f->u.group_setup.iters);
    put_bytes(b, f->u.group_setup.peers);
    break;
  case SF__F_GROUP_DONE:
    put_u64(b, f->u.group_done.group);
    put_u32(b, f->u.group_done.rank);
    put_u8(b, f->u.group_done.ok);
    put_u64(b, f->u.group_done.elapsed_ns);
    put_u64(b, f->u.group_done.bytes);
    put_bytes(b, f->u.group_done.message);
    break;
  case SF__F_LOG:
  case SF__F_PRINT:
  case SF__F_METRICS: put_bytes(b, f->u.log.line); break;
  case SF__F_CLOCK:
    put_u64(b, f->u.clock.seq);
    put_u64(b, f->u.clock.head_ns);
    put_u64(b, f->u.clock.worker_ns);
    break;
  case SF__F_TRACE:
    put_u32(b, f->u.trace.count);
    put_bytes(b, f->u.trace.events);
    break;
  }
}

int sf__wire_encode(sf__wbuf *b, const sf__frame *f) {
  size_t start = b->n;
  put_u32(b, 0);
  put_u8(b, SF__WIRE_VERSION);
  put_u8(b, f->type);
  put_u16(b, 0);
  put_payload(b, f);
  if (!b->p || b->n < start + SF__FRAME_HDR || b->n - start - 4 > SF__FRAME_MAX) {
    b->n = start;
    return -1;
  }
  uint32_t len = (uint32_t)(b->n - start - 4);
  for (int i = 0; i < 4; i++)
    b->p[start + i] = (uint8_t)(len >> (8 * i));
  return 0;
}

/* Where the last byte string of a frame of this type starts in f: its
 * length is patched by sf__wire_encode_open.  NULL for other types. */
static const sf__bytes *last_bytes(const sf__frame *f) {
  switch (f->type) {
  case SF__F_ACTOR_CREATE: return &f->u.actor_create.args;
  case SF__F_ACTOR_CALL: return &f->u.actor_call.args;
  case SF__F_ACTOR_STATE: return &f->u.actor_state.state;
  case SF__F_TASK_SUBMIT: return &f->u.task_submit.args;
  case SF__F_OBJECT: return &f->u.object.data;
  default: return NULL;
  }
}

int sf__wire_encode_open(sf__wbuf *b, const sf__frame *f, size_t more) {
  const sf__bytes *tail = last_bytes(f);
  size_t start = b->n;
  if (!tail || more > SF__FRAME_MAX || sf__wire_encode(b, f))
    return -1;
  size_t len = b->n - start - 4 + more, field = (size_t)tail->n + more;
  if (len > SF__FRAME_MAX || field > UINT32_MAX) {
    b->n = start;
    return -1;
  }
  uint8_t *flen = b->p + b->n - tail->n - 4; /* the field's u32 length */
  for (int i = 0; i < 4; i++) {
    b->p[start + i] = (uint8_t)(len >> (8 * i));
    flen[i] = (uint8_t)(field >> (8 * i));
  }
  return 0;
}

sf__shared *sf__shared_wrap(uint8_t *p, size_t n) {
  sf__shared *b = malloc(sizeof *b);
  if (!b) {
    free(p);
    return NULL;
  }
  b->refs = 1;
  b->p = p;
  b->n = n;
  return b;
}

sf__shared *sf__shared_copy(const void *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  if (!q)
    return NULL;
  if (n)
    memcpy(q, p, n);
  return sf__shared_wrap(q, n);
}

sf__shared *sf__shared_ref(sf__shared *b) {
  if (b)
    b->refs++;
  return b;
}

void sf__shared_unref(sf__shared *b) {
  if (b && --b->refs == 0) {
    free(b->p);
    free(b);
  }
}

/* ------------------------------------------------------------ reader */

typedef struct rd {
  const uint8_t *p;
  size_t n, off;
  bool ok;
  const char *what; /* first field that did not fit */
} rd;

static bool take(rd *r, size_t k, const char *what) {
  if (!r->ok || r->n - r->off < k) {
    if (r->ok)
      r->what = what;
    r->ok = false;
    return false;
  }
  return true;
}
static uint64_t get_le(rd *r, int k, const char *what) {
  if (!take(r, (size_t)k, what))
    return 0;
  uint64_t v = 0;
  for (int i = 0; i < k; i++)
    v |= (uint64_t)r->p[r->off + (size_t)i] << (8 * i);
  r->off += (size_t)k;
  return v;
}
#define get_u8(r, w) ((uint8_t)get_le((r), 1, (w)))
#define get_u16(r, w) ((uint16_t)get_le((r), 2, (w)))
#define get_u32(r, w) ((uint32_t)get_le((r), 4, (w)))
#define get_u64(r, w) get_le((r), 8, (w))
static void get_raw(rd *r, uint8_t *out, size_t k, const char *what) {
  if (take(r, k, what)) {
    memcpy(out, r->p + r->off, k);
    r->off += k;
  } else {
    memset(out, 0, k);
  }
}
/* A u32-length byte field of at most max bytes. */
static sf__bytes get_bytes(rd *r, uint32_t max, const char *what) {
  sf__bytes b = {NULL, 0};
  uint32_t n = get_u32(r, what);
  if (!r->ok)
    return b;
  if (n > max) {
    r->ok = false;
    r->what = what;
    return b;
  }
  if (take(r, n, what)) {
    b.p = r->p + r->off;
    b.n = n;
    r->off += n;
  }
  return b;
}

bool sf__wire_peer(sf__bytes peers, size_t *off, char *addr, size_t addrlen, uint16_t *port) {
  rd r = {peers.p, peers.n, *off, true, NULL};
  *port = get_u16(&r, "port");
  uint8_t n = get_u8(&r, "address length");
  if (!r.ok || n == 0 || n >= addrlen || !take(&r, n, "address"))
    return false;
  memcpy(addr, r.p + r.off, n);
  addr[n] = '\0';
  for (uint8_t i = 0; i < n; i++)
    if (!addr[i])
      return false;
  *off = r.off + n;
  return *port != 0;
}

static int check_peers(sf__bytes peers, uint32_t size) {
  size_t off = 0;
  char addr[64];
  uint16_t port;
  for (uint32_t i = 0; i < size; i++)
    if (!sf__wire_peer(peers, &off, addr, sizeof addr, &port))
      return -1;
  return off == peers.n ? 0 : -1;
}

bool sf__wire_trace_rec(sf__bytes events, size_t *off, sf__trace_rec *out) {
  rd r = {events.p, events.n, *off, true, NULL};
  out->ts_ns = get_u64(&r, "start");
  out->dur_ns = get_u64(&r, "duration");
  out->tid = get_u32(&r, "thread");
  out->attempt = get_u32(&r, "attempt");
  sf__bytes *s[3] = {&out->name, &out->cat, &out->error};
  static const uint32_t lo[3] = {1, 1, 0};
  static const uint32_t hi[3] = {SF__TRACE_NAME_MAX, SF__TRACE_NAME_MAX, SF__TRACE_ERROR_MAX};
  for (int i = 0; i < 3; i++) {
    uint16_t n = get_u16(&r, "text length");
    *s[i] = (sf__bytes){NULL, 0};
    if (!r.ok || !take(&r, n, "text"))
      return false;
    *s[i] = (sf__bytes){r.p + r.off, n};
    r.off += n;
    if (!rec_field_ok(*s[i], lo[i], hi[i]))
      return false;
  }
  /* A start and a duration that overflow together are nonsense. */
  if (out->dur_ns > UINT64_MAX - out->ts_ns)
    return false;
  *off = r.off;
  return true;
}

static int check_trace(sf__bytes events, uint32_t count) {
  size_t off = 0;
  sf__trace_rec rec;
  for (uint32_t i = 0; i < count; i++)
    if (!sf__wire_trace_rec(events, &off, &rec))
      return -1;
  return off == events.n ? 0 : -1;
}

#define ARGS_MAX (SF__FRAME_MAX - 64)

static void get_payload(rd *r, sf__frame *f) {
  switch (f->type) {
  case SF__F_CHALLENGE: get_raw(r, f->u.challenge.nonce, 32, "nonce"); break;
  case SF__F_AUTH:
    f->u.auth.node = get_u32(r, "node");
    get_raw(r, f->u.auth.nonce, 32, "nonce");
    get_raw(r, f->u.auth.mac, 32, "mac");
    break;
  case SF__F_AUTH_OK: get_raw(r, f->u.auth_ok.mac, 32, "mac"); break;
  case SF__F_HELLO:
    f->u.hello.pid = get_u32(r, "pid");
    f->u.hello.cpus = get_u32(r, "cpus");
    f->u.hello.gpus = get_u32(r, "gpus");
    f->u.hello.data_port = get_u16(r, "data port");
    f->u.hello.obj_port = get_u16(r, "object port");
    f->u.hello.host = get_bytes(r, HOST_MAX, "host name");
    f->u.hello.data_addr = get_bytes(r, ADDR_MAX, "data address");
    get_raw(r, f->u.hello.exe_hash, 32, "executable hash");
    break;
  case SF__F_HEARTBEAT:
    f->u.heartbeat.seq = get_u64(r, "sequence");
    f->u.heartbeat.time_ns = get_u64(r, "time");
    break;
  case SF__F_TASK_SUBMIT:
    f->u.task_submit.task = get_u64(r, "task id");
    f->u.task_submit.fn = get_u32(r, "function");
    f->u.task_submit.attempt = get_u32(r, "attempt");
    f->u.task_submit.key = get_u64(r, "key");
    f->u.task_submit.args = get_bytes(r, ARGS_MAX, "arguments");
    break;
  case SF__F_TASK_RESULT:
    f->u.task_result.task = get_u64(r, "task id");
    f->u.task_result.status = get_u8(r, "status");
    f->u.task_result.value = get_bytes(r, ARGS_MAX, "value");
    /* Status 2 (objects.c): the value is u64 object id + u64 size;
     * status 3 (an input object could not be fetched): u64 object id and
     * the reason as text. */
    if (r->ok && (f->u.task_result.status > 3 ||
                  (f->u.task_result.status == 2 && f->u.task_result.value.n != 16) ||
                  (f->u.task_result.status == 3 && f->u.task_result.value.n < 8))) {
      r->ok = false;
      r->what = "status";
    }
    /* What the attempt printed (the head journals it); a failed attempt's
     * output does not count, so status 1 carries none. */
    f->u.task_result.output = get_bytes(r, ARGS_MAX, "output");
    if (r->ok && (f->u.task_result.status == 1 || f->u.task_result.status == 3) &&
        f->u.task_result.output.n) {
      r->ok = false;
      r->what = "output";
    }
    break;
  case SF__F_ACTOR_CREATE:
    f->u.actor_create.actor = get_u64(r, "actor id");
    f->u.actor_create.cls = get_u32(r, "class");
    f->u.actor_create.args = get_bytes(r, ARGS_MAX, "arguments");
    break;
  case SF__F_ACTOR_CALL:
    f->u.actor_call.actor = get_u64(r, "actor id");
    f->u.actor_call.seq = get_u64(r, "sequence");
    f->u.actor_call.method = get_u32(r, "method");
    f->u.actor_call.args = get_bytes(r, ARGS_MAX, "arguments");
    break;
  case SF__F_ACTOR_RESULT:
    f->u.actor_result.actor = get_u64(r, "actor id");
    f->u.actor_result.seq = get_u64(r, "sequence");
    f->u.actor_result.status = get_u8(r, "status");
    f->u.actor_result.value = get_bytes(r, ARGS_MAX, "value");
    if (r->ok && (f->u.actor_result.status > 2 || f->u.actor_result.seq == 0)) {
      r->ok = false;
      r->what = f->u.actor_result.status > 2 ? "status" : "sequence";
    }
    /* What the call printed (the head journals it), as for task results:
     * a failed call's output does not count. */
    f->u.actor_result.output = get_bytes(r, ARGS_MAX, "output");
    if (r->ok && f->u.actor_result.status && f->u.actor_result.output.n) {
      r->ok = false;
      r->what = "output";
    }
    break;
  case SF__F_ACTOR_STATE:
    f->u.actor_state.actor = get_u64(r, "actor id");
    f->u.actor_state.calls = get_u64(r, "calls");
    f->u.actor_state.epoch = get_u64(r, "epoch");
    f->u.actor_state.state = get_bytes(r, ARGS_MAX, "state");
    if (r->ok && (f->u.actor_state.calls > INT64_MAX || f->u.actor_state.epoch > f->u.actor_state.calls)) {
      r->ok = false;
      r->what = "call counts";
    }
    break;
  case SF__F_ACTOR_STOP: f->u.actor_stop.actor = get_u64(r, "actor id"); break;
  case SF__F_OBJECT:
    f->u.object.object = get_u64(r, "object id");
    f->u.object.offset = get_u64(r, "offset");
    f->u.object.total = get_u64(r, "total");
    f->u.object.data = get_bytes(r, ARGS_MAX, "data");
    if (r->ok && (f->u.object.offset > f->u.object.total ||
                  f->u.object.data.n > f->u.object.total - f->u.object.offset)) {
      r->ok = false;
      r->what = "object range";
    }
    break;
  case SF__F_SHUTDOWN:
    f->u.shutdown.code = get_u32(r, "exit code");
    f->u.shutdown.reason = get_bytes(r, TEXT_MAX, "reason");
    break;
  case SF__F_GROUP_SETUP:
    f->u.group_setup.group = get_u64(r, "group id");
    f->u.group_setup.rank = get_u32(r, "rank");
    f->u.group_setup.size = get_u32(r, "size");
    f->u.group_setup.count = get_u64(r, "count");
    f->u.group_setup.dtype = get_u32(r, "dtype");
    f->u.group_setup.iters = get_u32(r, "iterations");
    f->u.group_setup.peers = get_bytes(r, PEERS_MAX, "peers");
    if (r->ok && (f->u.group_setup.size == 0 || f->u.group_setup.size > SF__GROUP_MAX ||
                  f->u.group_setup.rank >= f->u.group_setup.size ||
                  f->u.group_setup.dtype >= SF__DT_COUNT ||
                  f->u.group_setup.count > ((uint64_t)1 << 40) ||
                  check_peers(f->u.group_setup.peers, f->u.group_setup.size))) {
      r->ok = false;
      r->what = "group layout";
    }
    break;
  case SF__F_GROUP_DONE:
    f->u.group_done.group = get_u64(r, "group id");
    f->u.group_done.rank = get_u32(r, "rank");
    f->u.group_done.ok = get_u8(r, "status");
    f->u.group_done.elapsed_ns = get_u64(r, "elapsed");
    f->u.group_done.bytes = get_u64(r, "bytes");
    f->u.group_done.message = get_bytes(r, TEXT_MAX, "message");
    break;
  case SF__F_LOG: f->u.log.line = get_bytes(r, LOG_MAX, "line"); break;
  case SF__F_PRINT: f->u.log.line = get_bytes(r, PRINT_MAX, "output"); break;
  case SF__F_METRICS: f->u.log.line = get_bytes(r, METRICS_MAX, "metrics"); break;
  case SF__F_CLOCK:
    f->u.clock.seq = get_u64(r, "sequence");
    f->u.clock.head_ns = get_u64(r, "head time");
    f->u.clock.worker_ns = get_u64(r, "worker time");
    break;
  case SF__F_TRACE:
    f->u.trace.count = get_u32(r, "event count");
    f->u.trace.events = get_bytes(r, EVENTS_MAX, "events");
    if (r->ok && (f->u.trace.count == 0 || f->u.trace.count > SF__TRACE_BATCH_MAX ||
                  check_trace(f->u.trace.events, f->u.trace.count))) {
      r->ok = false;
      r->what = "trace events";
    }
    break;
  }
}

long sf__wire_decode(const uint8_t *buf, size_t n, sf__frame *f, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  if (n < 4)
    return 0;
  uint32_t len = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 |
                 (uint32_t)buf[3] << 24;
  if (len < SF__FRAME_HDR - 4)
    return sf__net_fail(err, errlen, "malformed frame: length %u is shorter than the header", len);
  if (len > SF__FRAME_MAX)
    return sf__net_fail(err, errlen, "malformed frame: length %u exceeds the limit of %u bytes", len,
                SF__FRAME_MAX);
  if (n >= 5 && buf[4] != SF__WIRE_VERSION)
    return sf__net_fail(err, errlen, "malformed frame: protocol version %u, expected %u", buf[4],
                SF__WIRE_VERSION);
  if (n >= 6 && (buf[5] == 0 || buf[5] >= SF__F_COUNT))
    return sf__net_fail(err, errlen, "malformed frame: unknown type %u", buf[5]);
  if (n >= 6 && len > sf__wire_max_len(buf[5]))
    return sf__net_fail(err, errlen,
                        "malformed frame: a %s frame of %u bytes exceeds the limit of %u bytes "
                        "for its type",
                        sf__wire_type_name(buf[5]), len, sf__wire_max_len(buf[5]));
  if (n >= 8 && (buf[6] | buf[7]))
    return sf__net_fail(err, errlen, "malformed frame: reserved flags 0x%02x%02x set", buf[7], buf[6]);
  if (n - 4 < len)
    return 0;
  f->type = buf[5];
  rd r = {buf + SF__FRAME_HDR, len - (SF__FRAME_HDR - 4), 0, true, NULL};
  get_payload(&r, f);
  if (!r.ok)
    return sf__net_fail(err, errlen, "malformed %s frame: bad or truncated %s",
                sf__wire_type_name(f->type), r.what ? r.what : "field");
  if (r.off != r.n)
    return sf__net_fail(err, errlen, "malformed %s frame: %zu trailing bytes",
                sf__wire_type_name(f->type), r.n - r.off);
  return (long)len + 4;
}

/* -------------------------------------------------------- connections */

void sf__conn_init(sf__conn *c, int fd) { *c = (sf__conn){.fd = fd}; }

void sf__conn_close(sf__conn *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c->rx);
  *c = (sf__conn){.fd = -1};
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int wait_fd(int fd, short ev, int64_t deadline) {
  for (;;) {
    int left = deadline < 0 ? -1 : (int)(deadline - now_ms());
    if (deadline >= 0 && left <= 0)
      return 0;
    struct pollfd p = {fd, ev, 0};
    int k = poll(&p, 1, left);
    if (k < 0 && errno == EINTR)
      continue;
    return k;
  }
}

int sf__conn_send(sf__conn *c, const sf__frame *f, int timeout_ms, char *err, size_t errlen) {
  sf__wbuf b = {0};
  if (sf__wire_encode(&b, f)) {
    sf__wbuf_free(&b);
    return sf__net_fail(err, errlen, "cannot encode %s frame", sf__wire_type_name(f->type));
  }
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  size_t off = 0;
  while (off < b.n) {
    ssize_t k = send(c->fd, b.p + off, b.n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      off += (size_t)k;
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (wait_fd(c->fd, POLLOUT, deadline) > 0)
        continue;
      sf__wbuf_free(&b);
      return sf__net_fail(err, errlen, "timed out sending a %s frame", sf__wire_type_name(f->type));
    }
    sf__wbuf_free(&b);
    return sf__net_fail(err, errlen, "send failed: %s", strerror(errno));
  }
  sf__wbuf_free(&b);
  return 0;
}

/* How many bytes the frame at p takes (4 + len) once its header is there,
 * 0 before, -1 when the header is bad for this connection (the decoder or
 * sf__conn_next says why). */
static long frame_extent(const sf__conn *c, const uint8_t *p, size_t n) {
  if (n < SF__FRAME_HDR)
    return 0;
  uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
  if (p[4] != SF__WIRE_VERSION || p[5] == 0 || p[5] >= SF__F_COUNT || (p[6] | p[7]) ||
      len < SF__FRAME_HDR - 4 || len > sf__wire_max_len(p[5]) ||
      (!c->authed && !handshake_type(p[5])))
    return -1;
  return (long)len + 4;
}

/* Moves c->scan past the complete frames buffered; *want: how far the
 * buffer must reach to complete the next one (or to hold its header).
 * -1 when a header is bad. */
static int scan_frames(sf__conn *c, size_t *want) {
  for (;;) {
    long k = c->rx ? frame_extent(c, c->rx + c->scan, c->rx_n - c->scan) : 0;
    if (k < 0)
      return -1;
    if (k == 0 || c->rx_n - c->scan < (size_t)k) {
      *want = c->scan + (k ? (size_t)k : SF__FRAME_HDR);
      return 0;
    }
    c->scan += (size_t)k;
  }
}

/* Complete frames a fill leaves for the caller to take before it reads on. */
#define FILL_BATCH ((size_t)1 << 20)
/* Bytes one fill reads at most: a checkpoint frame of hundreds of MB (a
 * fine-tuned BERT's state) arriving as fast as it is read kept the head's
 * control loop inside one fill, sending no heartbeat, for seconds, so the
 * workers gave the head up.  Level-triggered poll brings the caller back. */
#define FILL_MAX ((size_t)8 << 20)

/* The buffer grows only toward frames whose headers passed their type's
 * limit, and before authentication it holds one handshake frame: what is
 * read is exactly what that frame lacks. */
int sf__conn_fill(sf__conn *c) {
  size_t got = 0;
  for (;;) {
    size_t want;
    if (scan_frames(c, &want))
      return 1; /* sf__conn_next says what is wrong */
    size_t done = c->scan - c->pending; /* complete, not yet taken */
    if (done && (!c->authed || done >= FILL_BATCH))
      return 1;
    size_t end = c->authed ? c->rx_n + 65536 : want;
    if (end > c->rx_cap) {
      size_t cap = !c->authed ? 2 * HANDSHAKE_MAX : c->rx_cap ? c->rx_cap * 2 : 131072;
      while (cap < end)
        cap *= 2;
      uint8_t *p = realloc(c->rx, cap);
      if (!p)
        return -1;
      c->rx = p;
      c->rx_cap = cap;
    }
    size_t ask = c->authed ? c->rx_cap - c->rx_n : want - c->rx_n;
    ssize_t k = recv(c->fd, c->rx + c->rx_n, ask, MSG_DONTWAIT);
    if (k > 0) {
      c->rx_n += (size_t)k;
      got += (size_t)k;
      if ((size_t)k < ask || got >= FILL_MAX)
        return 1;
      continue;
    }
    if (k == 0)
      return 0;
    if (errno == EINTR)
      continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
  }
}

int sf__conn_next(sf__conn *c, sf__frame *f, char *err, size_t errlen) {
  if (c->pending) {
    memmove(c->rx, c->rx + c->pending, c->rx_n - c->pending);
    c->rx_n -= c->pending;
    c->scan = c->scan > c->pending ? c->scan - c->pending : 0;
    c->pending = 0;
  }
  if (!c->authed && c->rx_n >= 6 && c->rx[4] == SF__WIRE_VERSION && c->rx[5] &&
      c->rx[5] < SF__F_COUNT && !handshake_type(c->rx[5])) {
    uint32_t len = (uint32_t)c->rx[0] | (uint32_t)c->rx[1] << 8 | (uint32_t)c->rx[2] << 16 |
                   (uint32_t)c->rx[3] << 24;
    return sf__net_fail(err, errlen,
                        "a %s frame of %u bytes before authentication (until then only the "
                        "handshake's frames, at most %d bytes, are read)",
                        sf__wire_type_name(c->rx[5]), len, HANDSHAKE_MAX);
  }
  long k = sf__wire_decode(c->rx, c->rx_n, f, err, errlen);
  if (k <= 0)
    return (int)k;
  c->pending = (size_t)k;
  return 1;
}

uint8_t *sf__conn_take(sf__conn *c, size_t *n) {
  size_t k = c->pending, rest = c->rx_n - k;
  *n = k;
  if (k < SF__TAKE_INPLACE) {
    uint8_t *p = malloc(k ? k : 1);
    if (p && k)
      memcpy(p, c->rx, k);
    return p; /* the next sf__conn_next drops it from rx as usual */
  }
  /* The bytes after the frame (at most a fill's worth) move instead. */
  size_t cap = 131072;
  while (cap < rest + 65536)
    cap *= 2;
  uint8_t *nrx = malloc(cap);
  if (!nrx)
    return NULL;
  memcpy(nrx, c->rx + k, rest);
  uint8_t *p = c->rx;
  uint8_t *shrunk = realloc(p, k); /* gives back the room it grew for */
  if (shrunk)
    p = shrunk;
  c->rx = nrx;
  c->rx_cap = cap;
  c->rx_n = rest;
  c->scan = c->scan > k ? c->scan - k : 0;
  c->pending = 0;
  return p;
}

int sf__conn_recv(sf__conn *c, sf__frame *f, int timeout_ms, char *err, size_t errlen) {
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  for (;;) {
    int r = sf__conn_next(c, f, err, errlen);
    if (r != 0)
      return r;
    int w = wait_fd(c->fd, POLLIN, deadline);
    if (w <= 0)
      return w == 0 ? sf__net_fail(err, errlen, "timed out waiting for the peer")
                    : sf__net_fail(err, errlen, "poll failed: %s", strerror(errno));
    int k = sf__conn_fill(c);
    if (k == 0)
      return 0;
    if (k < 0)
      return sf__net_fail(err, errlen, "receive failed: %s", strerror(errno));
  }
}

/* --------------------------------------------------------- handshake */

static void auth_mac(const uint8_t secret[SF__SECRET_LEN], const char *role,
                     const uint8_t first[32], const uint8_t second[32], uint32_t node,
                     uint8_t out[32]) {
  uint8_t msg[96];
  size_t n = strlen(role);
  memcpy(msg, role, n);
  memcpy(msg + n, first, 32);
  memcpy(msg + n + 32, second, 32);
  for (int i = 0; i < 4; i++)
    msg[n + 64 + (size_t)i] = (uint8_t)(node >> (8 * i));
  sf__hmac_sha256(secret, SF__SECRET_LEN, msg, n + 68, out);
}

int sf__auth_challenge(sf__conn *c, uint8_t nonce[32], int timeout_ms, char *err,
                       size_t errlen) {
  sf__frame f = {.type = SF__F_CHALLENGE};
  if (sf__random_bytes(f.u.challenge.nonce, 32))
    return sf__net_fail(err, errlen, "no randomness for the challenge");
  memcpy(nonce, f.u.challenge.nonce, 32);
  return sf__conn_send(c, &f, timeout_ms, err, errlen);
}

int sf__auth_answer(sf__conn *c, const sf__frame *f, const uint8_t secret[SF__SECRET_LEN],
                    const uint8_t nonce[32], uint32_t *node, int timeout_ms, char *err,
                    size_t errlen) {
  if (f->type != SF__F_AUTH)
    return sf__net_fail(err, errlen, "expected an auth frame, got %s", sf__wire_type_name(f->type));
  uint8_t want[32], nonce_w[32];
  memcpy(nonce_w, f->u.auth.nonce, 32);
  auth_mac(secret, "sflow-auth-1 worker", nonce, nonce_w, f->u.auth.node, want);
  if (!sf__ct_equal(want, f->u.auth.mac, 32))
    return sf__net_fail(err, errlen, "wrong HMAC: the peer does not know this run's secret");
  *node = f->u.auth.node;
  sf__frame ok = {.type = SF__F_AUTH_OK};
  auth_mac(secret, "sflow-auth-1 head", nonce_w, nonce, *node, ok.u.auth_ok.mac);
  if (sf__conn_send(c, &ok, timeout_ms, err, errlen))
    return -1;
  c->authed = true;
  return 0;
}

int sf__auth_head(sf__conn *c, const uint8_t secret[SF__SECRET_LEN], uint32_t *node,
                  int timeout_ms, char *err, size_t errlen) {
  uint8_t nonce[32];
  if (sf__auth_challenge(c, nonce, timeout_ms, err, errlen))
    return -1;
  sf__frame f;
  int r = sf__conn_recv(c, &f, timeout_ms, err, errlen);
  if (r == 0)
    return sf__net_fail(err, errlen, "peer closed the connection before authenticating");
  if (r < 0)
    return -1;
  return sf__auth_answer(c, &f, secret, nonce, node, timeout_ms, err, errlen);
}

int sf__auth_worker(sf__conn *c, const uint8_t secret[SF__SECRET_LEN], uint32_t node,
                    int timeout_ms, char *err, size_t errlen) {
  sf__frame f;
  int r = sf__conn_recv(c, &f, timeout_ms, err, errlen);
  if (r == 0)
    return sf__net_fail(err, errlen, "head closed the connection before the challenge");
  if (r < 0)
    return -1;
  if (f.type != SF__F_CHALLENGE)
    return sf__net_fail(err, errlen, "expected a challenge, got %s", sf__wire_type_name(f.type));
  uint8_t nonce_h[32];
  memcpy(nonce_h, f.u.challenge.nonce, 32);
  sf__frame a = {.type = SF__F_AUTH};
  a.u.auth.node = node;
  if (sf__random_bytes(a.u.auth.nonce, 32))
    return sf__net_fail(err, errlen, "no randomness for the nonce");
  uint8_t nonce_w[32];
  memcpy(nonce_w, a.u.auth.nonce, 32);
  auth_mac(secret, "sflow-auth-1 worker", nonce_h, nonce_w, node, a.u.auth.mac);
  if (sf__conn_send(c, &a, timeout_ms, err, errlen))
    return -1;
  r = sf__conn_recv(c, &f, timeout_ms, err, errlen);
  if (r == 0)
    return sf__net_fail(err, errlen, "authentication refused by the head (wrong secret?)");
  if (r < 0)
    return -1;
  uint8_t want[32];
  auth_mac(secret, "sflow-auth-1 head", nonce_w, nonce_h, node, want);
  if (f.type != SF__F_AUTH_OK || !sf__ct_equal(want, f.u.auth_ok.mac, 32))
    return sf__net_fail(err, errlen, "the head did not prove the secret");
  c->authed = true;
  return 0;
}
