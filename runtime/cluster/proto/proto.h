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

#define SF__HEARTBEAT_MS 500
#define SF__HEARTBEAT_TIMEOUT_MS 3000

/* ----------------------------------------------------------- wire.c */

/* Frame layout, all integers little-endian:
 *   u32 len      bytes after this field (header rest + payload)
 *   u8  version  SF__WIRE_VERSION
 *   u8  type     sf__ftype
 *   u16 flags    0 (reserved; a set bit is rejected)
 *   payload      len - 4 bytes, laid out per type (wire.c)
 * The decoder checks every length against the bytes present and the
 * per-type layout completely, so a frame is either fully valid or refused. */
#define SF__WIRE_VERSION 1
#define SF__FRAME_HDR 8
#define SF__FRAME_MAX ((uint32_t)1 << 30) /* payload limit: 1 GiB */
/* The largest len of a valid frame of each type (0: no such type):
 * 20 to 72 bytes for the fixed control frames, 378 for hello, 4 KB for
 * shutdown and group-done, 64 KB for log, 16 MB for print and trace,
 * 264 KB for group-setup, SF__FRAME_MAX for frames carrying values (task,
 * actor and object frames).  A header over it is refused before any of
 * the payload is read or room is made for it. */
uint32_t sf__wire_max_len(int type);

typedef enum {
  SF__F_CHALLENGE = 1, /* head -> worker: nonce */
  SF__F_AUTH,          /* worker -> head: node, nonce, HMAC */
  SF__F_AUTH_OK,       /* head -> worker: HMAC proving the head knows it too */
  SF__F_HELLO,         /* worker -> head: pid, host name, exe hash, cpus, data and
                        * object ports */
  SF__F_HEARTBEAT,     /* head -> worker: sequence, send time (answered by a clock frame) */
  SF__F_TASK_SUBMIT,   /* head -> worker: task id, function, attempt, key, args */
  SF__F_TASK_RESULT,   /* worker -> head: task id, status, value or error, output */
  SF__F_ACTOR_CREATE,  /* head -> worker: actor id, class, args */
  SF__F_ACTOR_CALL,    /* head -> worker: actor id, sequence, method, args */
  SF__F_OBJECT,        /* either way: object id, offset, total, bytes
                        * (objects.c: head->worker empty = fetch from offset,
                        * or release when offset == total) */
  SF__F_SHUTDOWN,      /* head -> worker: exit code, reason */
  SF__F_GROUP_SETUP,   /* head -> worker: ring of a group across nodes */
  SF__F_GROUP_DONE,    /* worker -> head: status, timing, message */
  SF__F_LOG,           /* worker -> head: one line for the head's stderr */
  SF__F_PRINT,         /* worker -> head: print output for the head's stdout */
  SF__F_ACTOR_RESULT,  /* worker -> head: actor id, sequence, status (0 value, 1 error,
                          2 error after the group's ring broke), value or error */
  SF__F_ACTOR_STATE,   /* worker -> head: actor id, calls, g.all epoch, state (checkpoint) */
  SF__F_ACTOR_STOP,    /* head -> worker: actor id (a group being restarted elsewhere) */
  SF__F_CLOCK,         /* worker -> head: the answer to a heartbeat: its sequence and send
                        * time echoed, and the worker's clock when it arrived */
  SF__F_TRACE,         /* worker -> head: a batch of --trace events (trace.c) */
  SF__F_COUNT
} sf__ftype;

typedef struct sf__bytes {
  const uint8_t *p; /* points into the decoded buffer (not owned) */
  uint32_t n;
} sf__bytes;

#define SF__GROUP_MAX 4096

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

typedef struct sf__frame {
  uint8_t type;
  union {
    struct { uint8_t nonce[32]; } challenge;
    struct { uint32_t node; uint8_t nonce[32]; uint8_t mac[32]; } auth;
    struct { uint8_t mac[32]; } auth_ok;
    struct {
      uint32_t pid, cpus, gpus;
      uint16_t data_port, obj_port; /* group rings; the object store (0: none) */
      sf__bytes host, data_addr; /* host name; numeric address of the data listener */
      uint8_t exe_hash[32];
    } hello;
    struct { uint64_t seq, time_ns; } heartbeat;
    struct { uint64_t seq, head_ns, worker_ns; } clock;
    struct { uint32_t count; sf__bytes events; } trace; /* count records (sf__trace_rec) */
    struct { uint64_t task; uint32_t fn, attempt; uint64_t key; sf__bytes args; } task_submit;
    struct { uint64_t task; uint8_t status; sf__bytes value, output; } task_result;
    struct { uint64_t actor; uint32_t cls; sf__bytes args; } actor_create;
    struct { uint64_t actor, seq; uint32_t method; sf__bytes args; } actor_call;
    struct { uint64_t actor, seq; uint8_t status; sf__bytes value, output; } actor_result;
    struct { uint64_t actor, calls, epoch; sf__bytes state; } actor_state;
    struct { uint64_t actor; } actor_stop;
    struct { uint64_t object, offset, total; sf__bytes data; } object;
    struct { uint32_t code; sf__bytes reason; } shutdown;
    struct {
      uint64_t group;
      uint32_t rank, size;
      /* A benchmark/selftest collective to run once the ring is up:
       * count elements of dtype, iters times (count 0: just build it). */
      uint64_t count;
      uint32_t dtype, iters;
      sf__bytes peers; /* size entries: u16 port, u8 len, len bytes of address */
    } group_setup;
    struct {
      uint64_t group;
      uint32_t rank;
      uint8_t ok;
      uint64_t elapsed_ns, bytes;
      sf__bytes message;
    } group_done;
    struct { sf__bytes line; } log; /* also SF__F_PRINT */
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
/* Encodes the start of a frame whose last byte string (the args of
 * actor-create, actor-call and task-submit, the state of actor-state, the
 * data of object) goes on for `more` bytes after what f holds: the lengths
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
