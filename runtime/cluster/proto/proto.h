/*
 * proto.h — the one protocol header the head and the worker both include:
 * every frame type and its fields (described once, in SF__FRAMES; the
 * encoder and the decoder in wire.c are derived from that table), framed
 * connections, the handshake, and the few constants both sides of the
 * control plane must agree on (exit codes, the worker's first line,
 * heartbeat timing, the task-submit payload's argument forms).
 */
#ifndef SF_CLUSTER_PROTO_H
#define SF_CLUSTER_PROTO_H

#include "../net/net.h"

/* Exit code of a run that could not start or lost its nodes (sysexits'
 * EX_UNAVAILABLE), distinct from 70 (runtime error) and 2 (usage). */
#define SF__EXIT_NODES 69

/* A worker's first line on stdout: whether its executable is the one the
 * head deployed ("sflow-exe-ok HASH", or "sflow-exe-damaged HASH" and exit
 * SF__EXIT_EXE_DAMAGED, EX_DATAERR): a cached copy damaged in place is
 * copied again. */
#define SF__EXE_OK "sflow-exe-ok"
#define SF__EXE_DAMAGED "sflow-exe-damaged"
#define SF__EXIT_EXE_DAMAGED 65

/* The head's working directory goes to the workers, hex-encoded (no
 * quoting), when it is at most this long. */
#define SF__CWD_MAX 1024

/* The head sends a heartbeat every SF__HEARTBEAT_MS; either side gives the
 * other up after SF__HEARTBEAT_TIMEOUT_MS without a byte from it. */
#define SF__HEARTBEAT_MS 500
#define SF__HEARTBEAT_TIMEOUT_MS 3000

/* ------------------------------------------------- frames (wire.c) */

/* Frame layout, all integers little-endian:
 *   u32 len      bytes after this field (header rest + payload)
 *   u8  version  SF__WIRE_VERSION
 *   u8  type     sf__ftype
 *   u16 flags    0 (reserved; a set bit is rejected)
 *   payload      len - 4 bytes, laid out per type (SF__FRAMES below)
 * The decoder checks every length against the bytes present and the
 * per-type layout completely, so a frame is either fully valid or refused. */
#define SF__WIRE_VERSION 1
#define SF__FRAME_HDR 8
#define SF__FRAME_MAX ((uint32_t)1 << 30) /* payload limit: 1 GiB */
/* The largest len of a valid frame of each type (0: no such type):
 * 20 to 72 bytes for the fixed control frames, 378 for hello, 4 KB for
 * shutdown and group-done, 64 KB for log, 16 MB for print and trace,
 * 264 KB for group-setup (its fields at their limits, derived from
 * SF__FRAMES), SF__FRAME_MAX for frames carrying values (task, actor and
 * object frames).  A header over it is refused before any of the payload
 * is read or room is made for it. */
uint32_t sf__wire_max_len(int type);

/* ------------------------------------------------------- the frames
 *
 * Every frame type is described once, here: its number (its place in
 * SF__FRAMES, from 1), its name in messages, its class, and its fields in
 * the order they lie on the wire.  The class: SF__CTRL, a control frame
 * whose largest length is its fields at their limits; SF__VALUE, a frame
 * carrying values, which may be as long as SF__FRAME_MAX; SF__STREAM, one
 * of those whose last byte string may stream after the frame
 * (sf__wire_encode_open).  The sf__frame union below, the encoder, the
 * decoder and the largest length of each type (wire.c) are all derived
 * from this table, so a field added here is written, read and bounded
 * everywhere at once.  Adding, removing or reordering a field or a type
 * changes the bytes on the wire: bump SF__WIRE_VERSION with it.
 *
 * A field is F(P, KIND, name, limit, "what the decoder calls it"):
 *   U8 U16 U32 U64   a little-endian integer (limit unused)
 *   RAW              limit bytes as they are: nonces, MACs, hashes
 *   BYTES            u32 length, then that many bytes, at most limit; the
 *                    decoded sf__bytes points into the receive buffer
 *   CHECK            no bytes: the decoder calls wire.c's check_<name> on
 *                    the fields before it, which names the field it
 *                    refuses ("status"), or passes
 *
 * X(TYPE, member, "name", class, FIELDS) */
enum { SF__CTRL, SF__VALUE, SF__STREAM };
/* From the head (h->w), from a worker (w->h), or both ways. */
#define SF__FRAMES(X)                                                                             \
  X(CHALLENGE,    challenge,    "challenge",    SF__CTRL,   SF__CHALLENGE_FIELDS)     /* h->w */  \
  X(AUTH,         auth,         "auth",         SF__CTRL,   SF__AUTH_FIELDS)          /* w->h */  \
  X(AUTH_OK,      auth_ok,      "auth-ok",      SF__CTRL,   SF__AUTH_OK_FIELDS)       /* h->w */  \
  X(HELLO,        hello,        "hello",        SF__CTRL,   SF__HELLO_FIELDS)         /* w->h */  \
  X(HEARTBEAT,    heartbeat,    "heartbeat",    SF__CTRL,   SF__HEARTBEAT_FIELDS)     /* h->w */  \
  X(TASK_SUBMIT,  task_submit,  "task-submit",  SF__STREAM, SF__TASK_SUBMIT_FIELDS)   /* h->w */  \
  X(TASK_RESULT,  task_result,  "task-result",  SF__VALUE,  SF__TASK_RESULT_FIELDS)   /* w->h */  \
  X(ACTOR_CREATE, actor_create, "actor-create", SF__STREAM, SF__ACTOR_CREATE_FIELDS)  /* h->w */  \
  X(ACTOR_CALL,   actor_call,   "actor-call",   SF__STREAM, SF__ACTOR_CALL_FIELDS)    /* h->w */  \
  X(OBJECT,       object,       "object",       SF__STREAM, SF__OBJECT_FIELDS)        /* both */  \
  X(SHUTDOWN,     shutdown,     "shutdown",     SF__CTRL,   SF__SHUTDOWN_FIELDS)      /* h->w */  \
  X(GROUP_SETUP,  group_setup,  "group-setup",  SF__CTRL,   SF__GROUP_SETUP_FIELDS)   /* h->w */  \
  X(GROUP_DONE,   group_done,   "group-done",   SF__CTRL,   SF__GROUP_DONE_FIELDS)    /* w->h */  \
  X(LOG,          log,          "log",          SF__CTRL,   SF__LOG_FIELDS)           /* w->h */  \
  X(PRINT,        print,        "print",        SF__CTRL,   SF__PRINT_FIELDS)         /* w->h */  \
  X(ACTOR_RESULT, actor_result, "actor-result", SF__VALUE,  SF__ACTOR_RESULT_FIELDS)  /* w->h */  \
  X(ACTOR_STATE,  actor_state,  "actor-state",  SF__STREAM, SF__ACTOR_STATE_FIELDS)   /* w->h */  \
  X(ACTOR_STOP,   actor_stop,   "actor-stop",   SF__CTRL,   SF__ACTOR_STOP_FIELDS)    /* h->w */  \
  X(CLOCK,        clock,        "clock",        SF__CTRL,   SF__CLOCK_FIELDS)         /* w->h */  \
  X(TRACE,        trace,        "trace",        SF__CTRL,   SF__TRACE_FIELDS)         /* w->h */  \
  X(METRICS,      metrics,      "metrics",      SF__CTRL,   SF__METRICS_FIELDS)       /* w->h */

/* The limits of variable fields. */
#define SF__HOST_MAX 255                  /* hello: host name */
#define SF__ADDR_MAX 63                   /* hello: data-plane address */
#define SF__TEXT_MAX 4096                 /* shutdown reason, group-done message */
#define SF__LOG_MAX 65536                 /* one log line */
#define SF__PRINT_MAX (1u << 24)          /* print output of one frame */
#define SF__EVENTS_MAX (1u << 24)         /* one trace batch */
#define SF__METRICS_MAX (1u << 20)        /* a worker's metrics text */
#define SF__GROUP_MAX 4096
#define SF__PEERS_MAX (SF__GROUP_MAX * 66u) /* u16 port, u8 length, 63 bytes each */
#define SF__ARGS_MAX (SF__FRAME_MAX - 64) /* a value: arguments, result, state */

/* A fresh nonce the worker's MAC must cover. */
#define SF__CHALLENGE_FIELDS(F, P) F(P, RAW, nonce, 32, "nonce")
/* The worker's node, its own nonce, and HMAC(secret, "sflow-auth-1
 * worker" | head nonce | worker nonce | node) (wire.c, the handshake). */
#define SF__AUTH_FIELDS(F, P) \
  F(P, U32, node, 0, "node")   \
  F(P, RAW, nonce, 32, "nonce") \
  F(P, RAW, mac, 32, "mac")
/* The HMAC proving the head knows the secret too. */
#define SF__AUTH_OK_FIELDS(F, P) F(P, RAW, mac, 32, "mac")
/* What the worker is: its data listener for group rings and its object
 * store's port (0: none), its host name, the numeric address of the data
 * listener, and the hash of the executable it runs. */
#define SF__HELLO_FIELDS(F, P)                          \
  F(P, U32, pid, 0, "pid")                              \
  F(P, U32, cpus, 0, "cpus")                            \
  F(P, U32, gpus, 0, "gpus")                            \
  F(P, U16, data_port, 0, "data port")                  \
  F(P, U16, obj_port, 0, "object port")                 \
  F(P, BYTES, host, SF__HOST_MAX, "host name")          \
  F(P, BYTES, data_addr, SF__ADDR_MAX, "data address")  \
  F(P, RAW, exe_hash, 32, "executable hash")
/* Answered by a clock frame. */
#define SF__HEARTBEAT_FIELDS(F, P) \
  F(P, U64, seq, 0, "sequence")    \
  F(P, U64, time_ns, 0, "time")
/* One attempt of a task call; key (the call's identity) seeds its random
 * streams; args: the task-submit payload (below, "value payloads"). */
#define SF__TASK_SUBMIT_FIELDS(F, P)                \
  F(P, U64, task, 0, "task id")                     \
  F(P, U32, fn, 0, "function")                      \
  F(P, U32, attempt, 0, "attempt")                  \
  F(P, U64, key, 0, "key")                          \
  F(P, BYTES, args, SF__ARGS_MAX, "arguments")
/* Status 0 a value, 1 an error, 2 a held object (value: u64 object id +
 * u64 size), 3 an input object could not be fetched (value: u64 object id
 * + why); output: what the attempt printed (the head journals it), none
 * after a failure. */
#define SF__TASK_RESULT_FIELDS(F, P)            \
  F(P, U64, task, 0, "task id")                 \
  F(P, U8, status, 0, "status")                 \
  F(P, BYTES, value, SF__ARGS_MAX, "value")     \
  F(P, CHECK, task_status, 0, "status")         \
  F(P, BYTES, output, SF__ARGS_MAX, "output")   \
  F(P, CHECK, task_output, 0, "output")
#define SF__ACTOR_CREATE_FIELDS(F, P) \
  F(P, U64, actor, 0, "actor id")     \
  F(P, U32, cls, 0, "class")          \
  F(P, BYTES, args, SF__ARGS_MAX, "arguments")
#define SF__ACTOR_CALL_FIELDS(F, P) \
  F(P, U64, actor, 0, "actor id")   \
  F(P, U64, seq, 0, "sequence")     \
  F(P, U32, method, 0, "method")    \
  F(P, BYTES, args, SF__ARGS_MAX, "arguments")
/* Bytes [offset, offset + data.n) of an object of total bytes; from the
 * head, empty: a fetch from offset, or a release when offset == total. */
#define SF__OBJECT_FIELDS(F, P)                 \
  F(P, U64, object, 0, "object id")             \
  F(P, U64, offset, 0, "offset")                \
  F(P, U64, total, 0, "total")                  \
  F(P, BYTES, data, SF__ARGS_MAX, "data")       \
  F(P, CHECK, object_range, 0, "object range")
/* The worker's exit code and why. */
#define SF__SHUTDOWN_FIELDS(F, P) \
  F(P, U32, code, 0, "exit code") \
  F(P, BYTES, reason, SF__TEXT_MAX, "reason")
/* The ring of a group across nodes; a benchmark/selftest collective to
 * run once it is up: count elements of dtype, iters times (count 0: just
 * build it); peers: size entries of u16 port, u8 length, the address. */
#define SF__GROUP_SETUP_FIELDS(F, P)               \
  F(P, U64, group, 0, "group id")                  \
  F(P, U32, rank, 0, "rank")                       \
  F(P, U32, size, 0, "size")                       \
  F(P, U64, count, 0, "count")                     \
  F(P, U32, dtype, 0, "dtype")                     \
  F(P, U32, iters, 0, "iterations")                \
  F(P, BYTES, peers, SF__PEERS_MAX, "peers")       \
  F(P, CHECK, group_layout, 0, "group layout")
#define SF__GROUP_DONE_FIELDS(F, P)        \
  F(P, U64, group, 0, "group id")          \
  F(P, U32, rank, 0, "rank")               \
  F(P, U8, ok, 0, "status")                \
  F(P, U64, elapsed_ns, 0, "elapsed")      \
  F(P, U64, bytes, 0, "bytes")             \
  F(P, BYTES, message, SF__TEXT_MAX, "message")
/* One line for the head's stderr. */
#define SF__LOG_FIELDS(F, P) F(P, BYTES, line, SF__LOG_MAX, "line")
/* Print output for the head's stdout. */
#define SF__PRINT_FIELDS(F, P) F(P, BYTES, line, SF__PRINT_MAX, "output")
/* A worker's gauges and counters as Prometheus text, for the head's
 * --metrics-port (worker/metrics_worker.c, head/metrics_head.c). */
#define SF__METRICS_FIELDS(F, P) F(P, BYTES, text, SF__METRICS_MAX, "metrics")
/* Status 0 a value, 1 an error, 2 an error after the group's ring broke;
 * seq counts from 1; output as for task results. */
#define SF__ACTOR_RESULT_FIELDS(F, P)           \
  F(P, U64, actor, 0, "actor id")               \
  F(P, U64, seq, 0, "sequence")                 \
  F(P, U8, status, 0, "status")                 \
  F(P, BYTES, value, SF__ARGS_MAX, "value")     \
  F(P, CHECK, actor_status, 0, "status")        \
  F(P, BYTES, output, SF__ARGS_MAX, "output")   \
  F(P, CHECK, actor_output, 0, "output")
/* A checkpoint: the state after calls calls, epoch of them g.all. */
#define SF__ACTOR_STATE_FIELDS(F, P)            \
  F(P, U64, actor, 0, "actor id")               \
  F(P, U64, calls, 0, "calls")                  \
  F(P, U64, epoch, 0, "epoch")                  \
  F(P, BYTES, state, SF__ARGS_MAX, "state")     \
  F(P, CHECK, actor_counts, 0, "call counts")
/* A group being restarted elsewhere. */
#define SF__ACTOR_STOP_FIELDS(F, P) F(P, U64, actor, 0, "actor id")
/* The answer to a heartbeat: its sequence and send time echoed, and the
 * worker's clock when it arrived. */
#define SF__CLOCK_FIELDS(F, P)          \
  F(P, U64, seq, 0, "sequence")         \
  F(P, U64, head_ns, 0, "head time")    \
  F(P, U64, worker_ns, 0, "worker time")
/* A batch of --trace events: count records (sf__trace_rec) in events. */
#define SF__TRACE_FIELDS(F, P)                     \
  F(P, U32, count, 0, "event count")               \
  F(P, BYTES, events, SF__EVENTS_MAX, "events")    \
  F(P, CHECK, trace_events, 0, "trace events")

#define SF__FRAME_ENUM_(T, member, name, cls, fields) SF__F_##T,
typedef enum {
  SF__F_NONE = 0, /* no frame has type 0 */
  SF__FRAMES(SF__FRAME_ENUM_)
  SF__F_COUNT
} sf__ftype;

typedef struct sf__bytes {
  const uint8_t *p; /* points into the decoded buffer (not owned) */
  uint32_t n;
} sf__bytes;

/* One --trace event in a trace frame's records, each laid out as
 *   u64 ts_ns, u64 dur_ns  start and length on the sender's clock
 *   u32 tid, u32 attempt   the thread (trace.c's numbering) and the attempt
 *   u16 + name, u16 + cat, u16 + error   lengths and bytes (no NUL byte;
 *                          name and cat not empty, error empty when none) */
#define SF__TRACE_NAME_MAX 1024
#define SF__TRACE_ERROR_MAX 4096
#define SF__TRACE_BATCH_MAX 65536 /* records in one frame */
typedef struct sf__trace_rec {
  uint64_t ts_ns, dur_ns;
  uint32_t tid, attempt;
  sf__bytes name, cat, error;
} sf__trace_rec;

/* A decoded frame, or one to encode: f.u.<member> per SF__FRAMES. */
#define SF__FIELD_U8_(n, lim) uint8_t n;
#define SF__FIELD_U16_(n, lim) uint16_t n;
#define SF__FIELD_U32_(n, lim) uint32_t n;
#define SF__FIELD_U64_(n, lim) uint64_t n;
#define SF__FIELD_RAW_(n, lim) uint8_t n[lim];
#define SF__FIELD_BYTES_(n, lim) sf__bytes n;
#define SF__FIELD_CHECK_(n, lim)
#define SF__FIELD_DECL_(P, kind, n, lim, what) SF__FIELD_##kind##_(n, lim)
#define SF__FRAME_MEMBER_(T, member, name, cls, fields) \
  struct {                                              \
    fields(SF__FIELD_DECL_, member)                     \
  } member;
typedef struct sf__frame {
  uint8_t type;
  union {
    SF__FRAMES(SF__FRAME_MEMBER_)
  } u;
} sf__frame;

/* Appends one encoded frame to a growing buffer (see sf__wbuf). */
typedef struct sf__wbuf {
  uint8_t *p;
  size_t n, cap;
} sf__wbuf;
void sf__wbuf_free(sf__wbuf *b);
/* Encodes f (pointers in f are read, not kept).  0, or -1 when too big. */
int sf__wire_encode(sf__wbuf *b, const sf__frame *f);
/* Encodes the start of an SF__STREAM frame whose last byte string (the
 * args of actor-create, actor-call and task-submit, the state of
 * actor-state, the data of object) goes on for `more` bytes after what f
 * holds: the lengths
 * say so, and the caller sends those bytes right after.  So a value of
 * hundreds of MB goes out from where it lies, never copied into a frame
 * (sf__cluster_send_parts).  0, or -1 when too big or another type. */
int sf__wire_encode_open(sf__wbuf *b, const sf__frame *f, size_t more);

/* Decodes the frame at the start of buf.  Returns the frame's size in bytes
 * (>0) with *f filled in, 0 when buf holds only part of a frame, or -1 with
 * a message when the bytes can never be a valid frame. */
long sf__wire_decode(const uint8_t *buf, size_t n, sf__frame *f, char *err, size_t errlen);
const char *sf__wire_type_name(int type);
/* One entry of group_setup.peers, read at *off; false when malformed. */
bool sf__wire_peer(sf__bytes peers, size_t *off, char *addr, size_t addrlen, uint16_t *port);
void sf__wire_put_peer(sf__wbuf *b, const char *addr, uint16_t port);
/* One record of trace.events, read at *off; false when malformed (the
 * decoder has checked all of a frame's records already). */
bool sf__wire_trace_rec(sf__bytes events, size_t *off, sf__trace_rec *out);
/* Appends a record; -1 when a field is over its limit (nothing added). */
int sf__wire_put_trace_rec(sf__wbuf *b, const sf__trace_rec *r);

/* -------------------------------------- connections, handshake (conn.c) */

/* A framed connection: blocking helpers used by the handshake and the
 * worker, with a deadline in milliseconds (-1: none). */
typedef struct sf__conn {
  int fd;
  uint8_t *rx;
  size_t rx_n, rx_cap;
  size_t pending; /* size of the frame sf__conn_recv returned last */
  size_t scan;    /* rx[0..scan) holds complete frames with valid headers */
  bool authed;    /* the handshake passed: until then only its frames (at
                   * most 72 bytes each) are read, one at a time */
} sf__conn;
void sf__conn_init(sf__conn *c, int fd);
void sf__conn_close(sf__conn *c);
int sf__conn_send(sf__conn *c, const sf__frame *f, int timeout_ms, char *err, size_t errlen);
/* Reads until one frame is complete.  1: frame in *f (valid until the next
 * call), 0: peer closed, -1: error or timeout (message in err). */
int sf__conn_recv(sf__conn *c, sf__frame *f, int timeout_ms, char *err, size_t errlen);
/* Non-blocking: read what is there into rx.  -1 on error, 0 on EOF, 1 ok. */
int sf__conn_fill(sf__conn *c);
/* Takes one buffered frame: 1 frame (valid until the next call on c),
 * 0 none complete yet, -1 malformed (message in err). */
int sf__conn_next(sf__conn *c, sf__frame *f, char *err, size_t errlen);
/* The frame sf__conn_next returned last, as bytes the caller owns (free
 * them; *n of them; decode them again with sf__wire_decode); NULL when
 * out of memory.  A frame of SF__TAKE_INPLACE bytes or more takes c's
 * receive buffer itself and leaves c a new one with what came after it,
 * so a checkpoint of hundreds of MB is handed on without a copy; a
 * smaller one is copied.  Either way c then reads on as before. */
#define SF__TAKE_INPLACE ((size_t)1 << 20)
uint8_t *sf__conn_take(sf__conn *c, size_t *n);

/* The challenge-response handshake (both sides, over a connected socket).
 * The worker proves HMAC(secret, "sflow-auth-1 worker" | head nonce |
 * worker nonce | node) and the head answers with its own MAC, so neither
 * side ever sends the secret.  0 on success. */
int sf__auth_head(sf__conn *c, const uint8_t secret[SF__SECRET_LEN], uint32_t *node,
                  int timeout_ms, char *err, size_t errlen);
/* The head's side in two steps, for a caller that cannot wait for the
 * peer (the control thread): send the challenge (its nonce goes to
 * nonce), then check the auth frame f when it arrives and answer it.
 * Both mark c authenticated only on success. */
int sf__auth_challenge(sf__conn *c, uint8_t nonce[32], int timeout_ms, char *err,
                       size_t errlen);
int sf__auth_answer(sf__conn *c, const sf__frame *f, const uint8_t secret[SF__SECRET_LEN],
                    const uint8_t nonce[32], uint32_t *node, int timeout_ms, char *err,
                    size_t errlen);
int sf__auth_worker(sf__conn *c, const uint8_t secret[SF__SECRET_LEN], uint32_t node,
                    int timeout_ms, char *err, size_t errlen);

/* ------------------------------------------------- value payloads
 *
 * What the byte fields of task and actor frames carry: the contract
 * between head/dispatch.c and worker/worker_tasks.c, and between
 * head/ractor_head.c and worker/ractor_worker.c.
 *
 * Task-submit payload: u32 name length, name, then the arguments (the
 * SF_STRUCT d->args, serial.c; a future parameter as an SF__ARG_ form: unset,
 * its value, its failure, or a reference to a worker's object).
 * Task-result: status 0 + the serialized value, status 1 + the failure's
 * cause as text, status 2 + a reference to a large value the worker keeps
 * in its object store (u64 object id, u64 size), which the head fetches in
 * object frames only when main wants it (head/objects_head.c), or status 3 + u64
 * object id + why: an input object could not be fetched.
 *
 * Actor payloads.  actor-create: u32 class-name length, class name, u64 spawn
 * id, u32 rank, u32 size, u64 ring id (0: alone), u64 calls, u64 epochs,
 * u8 from (0: init arguments, 1: a checkpointed state), u32 length + bytes
 * (those arguments or that state), u32 length + peer list (size entries,
 * as in group-setup; empty when alone).  actor-call: u32 method-name
 * length, name, u8 flags (1: part of g.all; 2: a replay of a call whose
 * result was delivered, its print output muted), then the arguments.  Class
 * and method are named by descriptor offset plus name, checked by the
 * worker like tasks (worker/worker_tasks.c).
 */

/* A future argument in a task-submit payload. */
#define SF__ARG_NONE 0   /* a future never set */
#define SF__ARG_VALUE 1  /* the value follows (serial.c) */
#define SF__ARG_FAILED 2 /* u32 length, the failure's message */
#define SF__ARG_REF 3    /* u32 owner, u64 object id, u64 size, u16 port, u8 n, address */

/* Object frames carry a held result in chunks of SF__OBJ_CHUNK bytes; no
 * object is larger than SF__OBJ_MAX. */
#define SF__OBJ_CHUNK ((uint32_t)256 << 10)
#define SF__OBJ_MAX ((uint64_t)1 << 40)

/* The serialized size of a value of type t (0 for void). */
static inline int32_t sf__value_size(const sf_type *t) {
  return t && t->kind != SF_VOID ? t->size : 0;
}

#endif
