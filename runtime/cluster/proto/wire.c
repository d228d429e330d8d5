/*
 * wire.c — the control plane's frames: the encoder and the strict decoder
 * of every frame type, both derived from the one description of the
 * frames in proto.h (SF__FRAMES), and the largest length of each type.
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
 * The table SF__FRAMES expands here into one array of field descriptors
 * per type (kind, offset in sf__frame, limit, name); one loop writes a
 * frame's fields and one reads them, so no frame has code of its own but
 * the CHECK rules below, which say what a layout alone cannot (a status
 * and the value it allows, a range inside an object, a group's peers).
 *
 * Every type has a largest length (sf__wire_max_len: a few bytes to a few
 * KB for control frames, SF__FRAME_MAX for those that carry values), which
 * the header alone is judged against, so nobody waits for or makes room
 * for a frame that could never be valid (conn.c reads by it).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

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

/* ------------------------------------------------------ CHECK rules
 *
 * Each returns NULL when the fields decoded so far are consistent, else
 * the name of what is wrong (the decoder's "bad or truncated <what>"). */

static const char *check_task_status(const sf__frame *f) {
  /* Status 2 (objects): the value is u64 object id + u64 size; status 3
   * (an input object could not be fetched): u64 object id and the reason. */
  uint8_t s = f->u.task_result.status;
  uint32_t n = f->u.task_result.value.n;
  return s > 3 || (s == 2 && n != 16) || (s == 3 && n < 8) ? "status" : NULL;
}

static const char *check_task_output(const sf__frame *f) {
  /* A failed attempt's output does not count, so status 1 and 3 carry none. */
  uint8_t s = f->u.task_result.status;
  return (s == 1 || s == 3) && f->u.task_result.output.n ? "output" : NULL;
}

static const char *check_actor_status(const sf__frame *f) {
  if (f->u.actor_result.status > 2)
    return "status";
  return f->u.actor_result.seq == 0 ? "sequence" : NULL;
}

static const char *check_actor_output(const sf__frame *f) {
  return f->u.actor_result.status && f->u.actor_result.output.n ? "output" : NULL;
}

static const char *check_actor_counts(const sf__frame *f) {
  return f->u.actor_state.calls > INT64_MAX || f->u.actor_state.epoch > f->u.actor_state.calls
             ? "call counts"
             : NULL;
}

static const char *check_object_range(const sf__frame *f) {
  return f->u.object.offset > f->u.object.total ||
                 f->u.object.data.n > f->u.object.total - f->u.object.offset
             ? "object range"
             : NULL;
}

static const char *check_group_layout(const sf__frame *f) {
  uint32_t size = f->u.group_setup.size;
  return size == 0 || size > SF__GROUP_MAX || f->u.group_setup.rank >= size ||
                 f->u.group_setup.dtype >= SF__DT_COUNT ||
                 f->u.group_setup.count > ((uint64_t)1 << 40) ||
                 check_peers(f->u.group_setup.peers, size)
             ? "group layout"
             : NULL;
}

static const char *check_trace_events(const sf__frame *f) {
  uint32_t count = f->u.trace.count;
  return count == 0 || count > SF__TRACE_BATCH_MAX || check_trace(f->u.trace.events, count)
             ? "trace events"
             : NULL;
}

/* ------------------------------------------------ the frames, derived */

typedef enum { K_U8, K_U16, K_U32, K_U64, K_RAW, K_BYTES, K_CHECK } field_kind;

typedef struct field {
  field_kind kind;
  uint32_t off;     /* offsetof(sf__frame, u.<member>.<field>); 0 for CHECK */
  uint32_t lim;     /* RAW: its size; BYTES: the most bytes */
  const char *what; /* its name in the decoder's messages */
  const char *(*check)(const sf__frame *f); /* CHECK: the rule */
} field;

typedef struct frame_desc {
  const char *name;
  int cls; /* SF__CTRL, SF__VALUE or SF__STREAM */
  const field *fields;
  int n;
} frame_desc;

#define OFF_U8(P, n) offsetof(sf__frame, u.P.n)
#define OFF_U16 OFF_U8
#define OFF_U32 OFF_U8
#define OFF_U64 OFF_U8
#define OFF_RAW OFF_U8
#define OFF_BYTES OFF_U8
#define OFF_CHECK(P, n) 0
#define RULE_U8(n) NULL
#define RULE_U16 RULE_U8
#define RULE_U32 RULE_U8
#define RULE_U64 RULE_U8
#define RULE_RAW RULE_U8
#define RULE_BYTES RULE_U8
#define RULE_CHECK(n) check_##n
#define FIELD_DESC(P, k, n, lim, what) {K_##k, OFF_##k(P, n), lim, what, RULE_##k(n)},
#define FRAME_FIELDS(T, member, name, cls, fields) \
  static const field member##_fields[] = {fields(FIELD_DESC, member)};
SF__FRAMES(FRAME_FIELDS)

#define FRAME_DESC(T, member, name, cls, fields) \
  [SF__F_##T] = {name, cls, member##_fields, (int)(sizeof member##_fields / sizeof(field))},
static const frame_desc frames[SF__F_COUNT] = {SF__FRAMES(FRAME_DESC)};

static const frame_desc *desc_of(int type) {
  return type > 0 && type < SF__F_COUNT ? &frames[type] : NULL;
}

const char *sf__wire_type_name(int type) {
  const frame_desc *d = desc_of(type);
  return d ? d->name : "unknown";
}

/* len (the bytes after the length field: version, type, flags, payload)
 * of the largest valid frame of each type: SF__FRAME_MAX for a frame
 * carrying values, else its fields at their limits. */
uint32_t sf__wire_max_len(int type) {
  const frame_desc *d = desc_of(type);
  if (!d)
    return 0;
  if (d->cls != SF__CTRL)
    return SF__FRAME_MAX;
  uint64_t len = SF__FRAME_HDR - 4;
  for (int i = 0; i < d->n; i++) {
    static const uint8_t fixed[] = {[K_U8] = 1, [K_U16] = 2, [K_U32] = 4, [K_U64] = 8};
    const field *fd = &d->fields[i];
    len += fd->kind == K_RAW     ? fd->lim
           : fd->kind == K_BYTES ? 4 + (uint64_t)fd->lim
           : fd->kind == K_CHECK ? 0
                                 : fixed[fd->kind];
  }
  return (uint32_t)len; /* control frames are far below SF__FRAME_MAX */
}

/* ------------------------------------------------------------ encoder */

static void put_payload(sf__wbuf *b, const sf__frame *f) {
  const frame_desc *d = desc_of(f->type);
  for (int i = 0; d && i < d->n; i++) {
    const field *fd = &d->fields[i];
    const uint8_t *at = (const uint8_t *)f + fd->off;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    sf__bytes v;
    switch (fd->kind) {
    case K_U8: memcpy(&u8, at, 1); put_u8(b, u8); break;
    case K_U16: memcpy(&u16, at, 2); put_u16(b, u16); break;
    case K_U32: memcpy(&u32, at, 4); put_u32(b, u32); break;
    case K_U64: memcpy(&u64, at, 8); put_u64(b, u64); break;
    case K_RAW: put(b, at, fd->lim); break;
    case K_BYTES: memcpy(&v, at, sizeof v); put_bytes(b, v); break;
    case K_CHECK: break;
    }
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

/* The last byte string of an open frame type, whose length
 * sf__wire_encode_open patches; NULL for other types. */
static const sf__bytes *last_bytes(const sf__frame *f) {
  const frame_desc *d = desc_of(f->type);
  int i = d ? d->n - 1 : -1;
  while (i >= 0 && d->fields[i].kind == K_CHECK) /* rules write nothing */
    i--;
  if (!d || d->cls != SF__STREAM || i < 0 || d->fields[i].kind != K_BYTES)
    return NULL;
  return (const sf__bytes *)(const void *)((const uint8_t *)f + d->fields[i].off);
}

int sf__wire_encode_open(sf__wbuf *b, const sf__frame *f, size_t more) {
  const sf__bytes *tail = last_bytes(f);
  size_t start = b->n;
  if (!tail || more > SF__FRAME_MAX || sf__wire_encode(b, f))
    return -1;
  size_t len = b->n - start - 4 + more, flen = (size_t)tail->n + more;
  if (len > SF__FRAME_MAX || flen > UINT32_MAX) {
    b->n = start;
    return -1;
  }
  uint8_t *at = b->p + b->n - tail->n - 4; /* the field's u32 length */
  for (int i = 0; i < 4; i++) {
    b->p[start + i] = (uint8_t)(len >> (8 * i));
    at[i] = (uint8_t)(flen >> (8 * i));
  }
  return 0;
}

/* ------------------------------------------------------------ decoder */

static void get_payload(rd *r, sf__frame *f) {
  const frame_desc *d = desc_of(f->type);
  for (int i = 0; d && i < d->n && r->ok; i++) {
    const field *fd = &d->fields[i];
    uint8_t *at = (uint8_t *)f + fd->off;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    sf__bytes v;
    switch (fd->kind) {
    case K_U8: u8 = get_u8(r, fd->what); memcpy(at, &u8, 1); break;
    case K_U16: u16 = get_u16(r, fd->what); memcpy(at, &u16, 2); break;
    case K_U32: u32 = get_u32(r, fd->what); memcpy(at, &u32, 4); break;
    case K_U64: u64 = get_u64(r, fd->what); memcpy(at, &u64, 8); break;
    case K_RAW: get_raw(r, at, fd->lim, fd->what); break;
    case K_BYTES: v = get_bytes(r, fd->lim, fd->what); memcpy(at, &v, sizeof v); break;
    case K_CHECK:
      if ((r->what = fd->check(f)))
        r->ok = false;
      break;
    }
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

