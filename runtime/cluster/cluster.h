/*
 * cluster.h — the cluster layer's internal names (prefix `sf__`):
 * hosts, crypto, SSH launch, wire frames, the control plane and the TCP
 * ring collective.  Generated code never sees this header.
 *
 * Key design choice: every module below is usable on its own and reports
 * through a return code plus an error buffer (`char *err, size_t errlen`),
 * never by exiting, so unit tests drive each one directly and the head can
 * print one clear line per failed host.  Only the head's start-up (launch.c)
 * and the worker's main (worker_main.c) decide exit codes.
 *
 * Files, in the order a run meets them:
 *   hostfile.c  --nodes FILE or host1,host2 -> sf__hostlist
 *   sshconfig.c ~/.ssh/config: each host -> sf__ssh_target (where, who, keys)
 *   knownhosts.c which known_hosts lines name a host; trusted, unknown,
 *               changed or revoked (OpenSSH's rules, markers and ports)
 *   hostcheck.c whether a host can run this executable: architecture,
 *               glibc version, CPU features
 *   crypto.c    file hashing and HMAC-SHA256 on sha256.c (no libcrypto), random
 *   ssh.c       libssh2 (loaded with dlopen): connect, host key, auth, SFTP
 *               deployment, exec of the worker with the secret on stdin
 *   wire.c      length-prefixed binary frames; the decoder is fuzzed
 *   launch.c    the head's parallel start-up, shutdown and node table
 *   control.c   the head's control-plane thread: heartbeats, node loss,
 *               greeters, worker output
 *   selftest.c  --sflow-selftest and the group bench across workers
 *   worker_main.c the worker process: connect back, prove, serve the head
 *   ring.c      TCP collectives: allreduce by recursive doubling, halving
 *               and doubling, or the pipelined ring, chosen by size; the
 *               greeters that match data-plane connections to members
 *   dispatch.c  the head's task calls across nodes: submission, retries,
 *               future arguments, head runners, node loss (remote_internal.h
 *               is what the next three share with it)
 *   placement.c the ledger of slots and GPU shares; where tasks and actors go
 *   objects.c   the object store of large results: head, worker, and
 *               worker to worker
 *   worker_tasks.c the worker's runner threads; descriptor checks
 *   ractor_head.c  actors and groups on other nodes, the head's handles
 *               (ractor_internal.h is what the next two share with it)
 *   ractor_worker.c the actors a worker holds
 *   group_ring.c a group member's collectives across nodes (TCP ring, NCCL)
 */
#ifndef SF_CLUSTER_H
#define SF_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "durable.h" /* the layers below: durable, gpu, sched, core */
#include "gpu.h"

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

/* Formats an error into err (errlen bytes) and returns -1 (wire.c). */
__attribute__((format(printf, 3, 4))) int sf__net_fail(char *err, size_t errlen,
                                                       const char *fmt, ...);

/* ------------------------------------------------------- hostfile.c */

/* One host entry as written; sshconfig.c turns it into where to connect. */
typedef struct sf__host {
  char *name;   /* name, ssh_config alias or address as written, without the
                 * user, brackets, port or slots (owned) */
  char *user;   /* user@ before the name, or NULL (owned) */
  int port;     /* [host]:PORT or port=PORT; 0 when not given */
  int slots;    /* host:N or slots=N, or -1: the host's CPU count */
  int gpus;     /* gpus=N, or -1: detect on the host */
  int line;     /* 1-based line in the hostfile; 0 for --nodes a,b */
} sf__host;

typedef struct sf__hostlist {
  sf__host *hosts; /* owned */
  int n;
  char *source;    /* the file name, or "--nodes" (owned) */
} sf__hostlist;

/* Parses hostfile text.  `fname` names the file in errors
 * ("hosts.txt:3: duplicate host 'a' (first on line 1)").  0 on success. */
int sf__hostfile_parse(const char *text, size_t len, const char *fname, sf__hostlist *out,
                       char *err, size_t errlen);
/* Parses a comma-separated list "a,b:2,user@c,[d]:2222" (mpirun -H). */
int sf__hostlist_parse(const char *list, sf__hostlist *out, char *err, size_t errlen);
/* --nodes ARG: a readable file is a hostfile; otherwise, when ARG looks like
 * a host list (no '/'), a list; else an error naming the file. */
int sf__hosts_from_arg(const char *arg, sf__hostlist *out, char *err, size_t errlen);
void sf__hostlist_free(sf__hostlist *l);

/* --------------------------------------------------------- crypto.c */

#define SF__SECRET_LEN 32 /* 256-bit per-run secret */
#define SF__HASH_LEN 32

/* SHA-256 of a file's content (sha256.c); 0, or -1 with a message. */
int sf__sha256_file(const char *path, uint8_t out[SF__HASH_LEN], char *err, size_t errlen);
void sf__hmac_sha256(const uint8_t *key, size_t klen, const void *msg, size_t n,
                     uint8_t out[SF__HASH_LEN]);
/* Kernel randomness (getrandom); 0 on success. */
int sf__random_bytes(void *buf, size_t n);
/* Constant-time comparison: the time does not depend on where a and b differ. */
bool sf__ct_equal(const void *a, const void *b, size_t n);
/* Lower-case hex of n bytes into out (2n+1 bytes); parse is the inverse. */
void sf__hex(const uint8_t *in, size_t n, char *out);
bool sf__unhex(const char *in, uint8_t *out, size_t n);

/* ------------------------------------------------------- hostcheck.c */

/* POSIX sh commands whose output sf__host_check reads (arch, glibc, CPU);
 * no single quote in them, so they can stand inside sh -c '...'. */
extern const char sf__host_probe_cmd[];
/* Reads what the executable at exe_path needs (its newest GLIBC_x.y);
 * once, before the start-up threads. */
void sf__host_requirements(const char *exe_path);
/* 0 when a host whose probe printed out can run this executable; else -1
 * with "label: the host's CPU lacks avx2 ..." in err. */
int sf__host_check(const char *label, const char *out, char *err, size_t errlen);
/* The same check against the machine this process runs on, before any
 * generated code runs (a -march=native file copied by hand to an older
 * machine must say what it lacks, not die of SIGILL); 0 when it can run.
 * SFLOW_SKIP_CPU_CHECK=1 skips it. */
int sf__host_check_self(char *err, size_t errlen);

/* ------------------------------------------------------------ ssh.c */

/* The flags; sshconfig.c combines them with each host's config. */
typedef struct sf__ssh_opts {
  const char *user;         /* --ssh-user; NULL: the config's User, else the current user */
  const char *key;          /* --ssh-key; NULL: agent, then IdentityFile or ~/.ssh/id_* */
  const char *known_hosts;  /* --known-hosts; NULL: UserKnownHostsFile or ~/.ssh/known_hosts */
  bool accept_new;          /* trust on first use (a changed key is still refused) */
  int timeout_s;            /* connect + handshake + auth bound, per host */
  const char *remote_cache; /* folder on the host for executables */
} sf__ssh_opts;

typedef struct sf__ssh sf__ssh;

/* ------------------------------------------------------ sshconfig.c */

#define SF__SSH_IDS_MAX 16 /* IdentityFile lines used per host */
#define SF__SSH_KH_MAX 8   /* UserKnownHostsFile files per host */
#define SF__SSH_PATH 1024

/* Where and how to reach one host: its hostfile entry, the flags and the
 * ssh config together (sshconfig.c says which wins). */
typedef struct sf__ssh_target {
  char name[300];   /* the host as written: "gpu1", "[127.0.0.2]:2222" */
  char label[600];  /* for connect errors, with where it resolved to when
                     * that differs: "gpu1 (127.0.0.3 port 2201)" */
  char host[256];   /* what is connected to: HostName, or the name */
  int port;
  char user[256];
  char key_host[256]; /* known_hosts lookup: HostKeyAlias, else host ... */
  int key_port;       /* ... with this port; -1 for an alias (no [..]:port) */
  char ids[SF__SSH_IDS_MAX][SF__SSH_PATH]; /* private keys to try, in order */
  int nids;
  bool ids_from_flag;  /* ids[0] is --ssh-key: only it, no agent */
  bool identities_only; /* IdentitiesOnly: agent keys only when in ids */
  char known[SF__SSH_KH_MAX][SF__SSH_PATH]; /* known_hosts files; new keys go to [0] */
  int nknown;
  bool accept_new;     /* record an unknown key (a changed one is still refused) */
  char warning[600];   /* one line for the user (ProxyJump ignored ...), or "" */
} sf__ssh_target;

typedef struct sf__sshcfg sf__sshcfg;

/* Reads the ssh client configuration: path NULL: ~/.ssh/config then
 * /etc/ssh/ssh_config (either may be missing); "none": nothing; else only
 * that file (ssh -F).  Errors name file:line.  0 on success. */
int sf__sshcfg_load(const char *path, sf__sshcfg **out, char *err, size_t errlen);
/* The same from text (tests); Include is relative to ~/.ssh. */
int sf__sshcfg_parse(const char *text, size_t len, const char *fname, sf__sshcfg **out,
                     char *err, size_t errlen);
/* Warnings of the load (skipped Match blocks), one per line; "" if none. */
const char *sf__sshcfg_warnings(const sf__sshcfg *c);
/* Resolves one host (c may be NULL: no config).  0, or -1 naming file:line
 * (an unknown %-token in IdentityFile). */
int sf__sshcfg_resolve(const sf__sshcfg *c, const sf__host *h, const sf__ssh_opts *o,
                       sf__ssh_target *t, char *err, size_t errlen);
void sf__sshcfg_free(sf__sshcfg *c);

/* ----------------------------------------------------- knownhosts.c */

/* What known_hosts says of a key, in order of precedence: a revoked key
 * is refused even where another line lists it; a listed key is accepted
 * even where the host has another key of its type. */
typedef enum {
  SF__KH_NOTFOUND = 0, /* no line of this key type for the host */
  SF__KH_MISMATCH,     /* the host has another key of this type: changed */
  SF__KH_MATCH,
  SF__KH_REVOKED,      /* on an @revoked line */
} sf__kh_status;

typedef struct sf__kh_result {
  sf__kh_status status;
  char where[SF__SSH_PATH + 16]; /* FILE:LINE of the line that decided it */
  char types[256];               /* key types listed for the host, "ssh-ed25519,..." */
} sf__kh_result;

/* The name a host is looked up under: "host" on port 22 (or port -1, a
 * HostKeyAlias), "[host]:port" otherwise. */
void sf__kh_name(const char *host, int port, char *out, size_t n);
/* Checks key (the server's blob; NULL: only collect types) against the
 * known_hosts text of file fname for name, updating r (start from a
 * zeroed result; several files add up). */
void sf__kh_check(const char *text, size_t len, const char *fname, const char *name,
                  const uint8_t *key, size_t keylen, sf__kh_result *r);
/* The same for a file; a missing file holds nothing.  0, or -1 with err. */
int sf__kh_check_file(const char *path, const char *name, const uint8_t *key, size_t keylen,
                      sf__kh_result *r, char *err, size_t errlen);
/* The known_hosts line recording key for name ("name type base64\n"). */
int sf__kh_line(const char *name, const uint8_t *key, size_t keylen, char *out, size_t n);
void sf__hmac_sha1(const uint8_t *key, size_t klen, const void *msg, size_t n, uint8_t out[20]);
long sf__base64_decode(const char *in, size_t n, uint8_t *out, size_t cap);
void sf__base64_encode(const uint8_t *in, size_t n, char *out);

/* Loads libssh2 on first use; false with a message when it is missing. */
bool sf__ssh_load(char *err, size_t errlen);
/* TCP connect (bounded by timeout_s), SSH handshake, host key check against
 * known_hosts BEFORE any authentication, then public-key or agent auth.
 * Errors start with t->label: "gpu1 (127.0.0.3 port 2201): host key ...". */
int sf__ssh_connect(const sf__ssh_target *t, const sf__ssh_opts *o, sf__ssh **out, char *err,
                    size_t errlen);
/* The local address of the SSH connection: where the worker connects back. */
int sf__ssh_local_addr(sf__ssh *s, struct sockaddr_storage *addr, socklen_t *len);
/* Makes sure remote_cache/sflow-<hash> holds this executable (SFTP copy to
 * a temporary name and rename when missing); its path goes to path. */
int sf__ssh_deploy(sf__ssh *s, const char *local_path, const char *hash_hex,
                   const char *remote_dir, char *path, size_t pathlen, bool *copied, char *err,
                   size_t errlen);
/* Starts cmd on a new channel (the session still blocking), closing the
 * previous command's channel first. */
int sf__ssh_start(sf__ssh *s, const char *cmd, char *err, size_t errlen);
/* Reads the command's stdout into out until a line that starts with
 * marker (what: "the host check", for messages); an error when it ends
 * first (with what it said on stderr, and the signal that killed it or
 * its exit status) or says more than outlen - 1 bytes.  out keeps what
 * was read.  0; SF__SSH_ENDED when the command ended first (the signal
 * that killed it in sf__ssh_signal); SF__SSH_SILENT
 * when it said nothing more within the session timeout (stopped, or
 * hung); -1 on any other failure. */
enum { SF__SSH_ENDED = -2, SF__SSH_SILENT = -3 };
int sf__ssh_read_until(sf__ssh *s, const char *marker, const char *what, char *out,
                       size_t outlen, char *err, size_t errlen);
/* The signal that ended the last command read_until saw end ("KILL",
 * "SEGV"), or "". */
const char *sf__ssh_signal(const sf__ssh *s);
/* Writes stdin_data to the command's stdin, which stays open (the worker
 * takes its end-of-file as "the head is gone"). */
int sf__ssh_send(sf__ssh *s, const void *stdin_data, size_t n, char *err, size_t errlen);
/* From here on only the control thread touches the session, polling. */
void sf__ssh_detach(sf__ssh *s);
/* Removes a file on the host (SFTP); 0, or -1 with err. */
int sf__ssh_unlink(sf__ssh *s, const char *path, char *err, size_t errlen);
/* Non-blocking: copies what the remote command wrote to fd, each line
 * prefixed.  Returns 1 while the channel is open, 0 once it closed. */
int sf__ssh_pump(sf__ssh *s, int fd, const char *prefix);
int sf__ssh_socket(sf__ssh *s);
/* Closes the channel (bounded wait) and the session; s is freed.  abrupt:
 * drop the TCP connection first (a lost node that will never answer). */
void sf__ssh_close(sf__ssh *s, bool abrupt);

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
  SF__F_METRICS,       /* worker -> head: its figures as Prometheus text (metrics_ship.c) */
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
    struct { sf__bytes line; } log; /* also SF__F_PRINT, SF__F_METRICS */
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

/* Bytes shared by reference count: a checkpoint's state held by the head
 * (its list of checkpoints, the file writer, a node's send queue at
 * once), so that none of them copies hundreds of MB.  Any thread may take
 * and drop references; the last drop frees the bytes. */
typedef struct sf__shared {
  _Atomic long refs;
  uint8_t *p; /* malloc'd */
  size_t n;
} sf__shared;
/* Takes p (malloc'd, n bytes) into a blob with one reference; NULL when
 * out of memory (p freed). */
sf__shared *sf__shared_wrap(uint8_t *p, size_t n);
/* A blob holding a copy of p[0..n); NULL when out of memory. */
sf__shared *sf__shared_copy(const void *p, size_t n);
sf__shared *sf__shared_ref(sf__shared *b); /* b, with one more reference */
void sf__shared_unref(sf__shared *b);    /* NULL: nothing */
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

/* ----------------------------------------------------------- ring.c */

/* The collective interface the scheduler calls for a group whose members
 * sit on different nodes.  A communicator is built once per group (and
 * rebuilt when a group restarts); operations are collective: every member
 * calls the same ones in the same order.  Results are bitwise identical on
 * every member: each element is reduced in one fixed order, and the same
 * size always takes the same algorithm (rd_max, halving_max). */
typedef enum { SF__DT_F32 = 0, SF__DT_F64, SF__DT_I32, SF__DT_I64, SF__DT_COUNT } sf__dtype;
typedef enum { SF__OP_SUM = 0, SF__OP_MAX, SF__OP_MIN } sf__redop;
size_t sf__dtype_size(sf__dtype t);

/* Links beyond the ring: the recursive-doubling partners (rank xor 2^k
 * after folding a non-power-of-two group) that are not ring neighbours,
 * at most log2(SF__GROUP_MAX). */
#define SF__RING_LINKS 12

/* Allreduce algorithm by message size in bytes (measured on 3 and 4
 * members with bench/cluster/ring_algos.c, docs/performance.md):
 * recursive doubling up to SF__RING_RD_MAX, then in a group whose size is
 * a power of two recursive halving and doubling (Rabenseifner) up to
 * SF__RING_HALVING_MAX (its 2 log2 p hops beat the ring's 2(p-1) until
 * the buffer no longer fits in cache), the pipelined ring above.
 * Elsewhere the fold moves the whole buffer twice more, and the ring wins
 * from 64 KB. */
#define SF__RING_RD_MAX ((size_t)32 << 10)
#define SF__RING_HALVING_MAX ((size_t)4 << 20)

typedef struct sf__ring {
  int rank, size;
  int prev_fd, next_fd; /* receive from rank-1, send to rank+1 */
  int timeout_ms;       /* no progress for this long: error, not a hang */
  size_t segment;       /* the reduction window: bytes per receive that is
                         * reduced (64 KB, measured: docs/performance.md) */
  void *scratch;
  size_t scratch_n;
  size_t rd_max;        /* allreduce up to this many bytes: recursive doubling */
  size_t halving_max;   /* up to this many: halving and doubling; above: ring */
  int nlinks;
  struct { int rank, fd; } links[SF__RING_LINKS]; /* partners off the ring */
} sf__ring;

/* A data-plane listener bound to addr (numeric), port chosen by the kernel. */
int sf__ring_listen(const char *addr, uint16_t *port, char *err, size_t errlen);
/* Connects member rank to its neighbours and its recursive-doubling
 * partners: dials peers[rank+1] and the higher partners, accepts rank-1
 * and the lower partners on listen_fd; every link proves the secret with
 * HMAC. */
typedef struct sf__peer { char addr[64]; uint16_t port; } sf__peer;
/* A non-blocking TCP connect to p, bounded by deadline (CLOCK_MONOTONIC
 * ms): the socket (still non-blocking), or -1 with err set. */
int sf__ring_dial(const sf__peer *p, int64_t deadline, char *err, size_t errlen);
int sf__ring_connect(sf__ring *r, uint64_t group, int rank, int size, const sf__peer *peers,
                     int listen_fd, const uint8_t secret[SF__SECRET_LEN], int timeout_ms,
                     char *err, size_t errlen);

/* Greeters: the connections a data-plane listener has accepted but not yet
 * matched to a member.  Each must send one greeting of SF__GREETING_LEN
 * bytes (u64 ring or group id and u32 rank, little-endian, then a 32-byte
 * HMAC the owner checks) within timeout_ms.  They are read side by side as
 * bytes arrive, so a stranger that connects and says nothing holds up no
 * member's link, and nothing past the greeting is read before the check.
 * Used by sf__ring_connect (the self-test's ring) and by group_ring.c's
 * acceptor thread (actor groups over --nodes); each owns its greeting's
 * MAC, its refusal messages and which member a link is for. */
#define SF__GREETING_LEN 44
#define SF__GREET_NONCE 32
#define SF__GREET_TIMEOUT_MS 5000
#define SF__GREET_SLOTS_MAX 32
typedef struct sf__greeter {
  int fd; /* -1: a free slot */
  int64_t deadline;
  uint8_t nonce[SF__GREET_NONCE]; /* sent on accept when the owner asks */
  uint8_t got[SF__GREETING_LEN];
  size_t n;
} sf__greeter;
typedef struct sf__greeters {
  int slots;      /* connections greeted at once; the oldest goes for a new one */
  int timeout_ms; /* each connection's time to send its greeting */
  bool nonce;     /* open each connection with a fresh nonce for the MAC */
  /* Whether g's complete greeting (id and rank decoded) proves the secret;
   * a refusal says why itself, as the owner reports. */
  bool (*check)(void *ctx, const sf__greeter *g, uint64_t id, uint32_t rank);
  /* A connection dropped before its greeting was checked (timeout, closed,
   * crowded out, no nonce sent), with why; NULL: dropped silently. */
  void (*drop)(void *ctx, const char *why);
  void *ctx;
  sf__greeter g[SF__GREET_SLOTS_MAX];
} sf__greeters;
/* Empty greeters with up to `slots` (at most SF__GREET_SLOTS_MAX)
 * connections at once, each given SF__GREET_TIMEOUT_MS (s->timeout_ms may
 * be changed after). */
void sf__greeters_init(sf__greeters *s, int slots, bool nonce,
                       bool (*check)(void *ctx, const sf__greeter *g, uint64_t id,
                                     uint32_t rank),
                       void (*drop)(void *ctx, const char *why), void *ctx);
/* Accepts connections on listen_fd and reads their greetings until one
 * passes check: its socket (non-blocking), its id and rank in *id and
 * *rank; -1 once deadline (CLOCK_MONOTONIC ms) passes.  Connections still
 * greeting stay in s for the next call. */
int sf__greet_accept(sf__greeters *s, int listen_fd, int64_t deadline, uint64_t *id,
                     uint32_t *rank);
void sf__greeters_close(sf__greeters *s);
/* Builds a ring over already-connected sockets (tests, local transports);
 * sf__ring_link adds the link to one partner off the ring.  Without all
 * partner links allreduce uses the ring algorithm at every size. */
void sf__ring_init(sf__ring *r, int rank, int size, int prev_fd, int next_fd);
void sf__ring_link(sf__ring *r, int peer, int fd);
/* Whether members a and b exchange data directly in recursive doubling or
 * halving but are not ring neighbours (so need a link of their own). */
bool sf__ring_needs_link(int size, int a, int b);
int sf__ring_allreduce(sf__ring *r, void *buf, size_t count, sf__dtype t, sf__redop op,
                       char *err, size_t errlen);
int sf__ring_broadcast(sf__ring *r, void *buf, size_t bytes, int root, char *err,
                       size_t errlen);
int sf__ring_barrier(sf__ring *r, char *err, size_t errlen);
void sf__ring_close(sf__ring *r);

/* -------------------- launch.c, control.c, selftest.c, worker_main.c */

/* The head's working directory goes to the workers, hex-encoded (no
 * quoting), when it is at most this long. */
#define SF__CWD_MAX 1024

/* A line on stderr (on the head: clear of the progress line; launch.c). */
__attribute__((format(printf, 1, 2))) void sf__cluster_note(const char *fmt, ...);
/* Numeric "addr" and port of a socket address (port may be NULL). */
void sf__addr_str(const struct sockaddr *sa, socklen_t sl, char *host, size_t hn,
                  uint16_t *port);

/* Per-node view for the scheduler (index 0 is the head). */
typedef struct sf__node_info {
  int id;
  const char *host; /* as written in the hostfile ("localhost" for the head) */
  int slots, gpus;  /* from the hostfile, else what the worker reported */
  int pid;          /* worker process id on its host */
  bool alive;
} sf__node_info;

/* Called on the control-plane thread when a node is lost (process died,
 * connection closed, or no heartbeat for SF__HEARTBEAT_TIMEOUT_MS). */
typedef void (*sf__node_lost_fn)(int node, const char *why);

#define SF__HEARTBEAT_MS 500
#define SF__HEARTBEAT_TIMEOUT_MS 3000

/* ---------------------------------------------------------- launch.c */

/* Head: with --nodes, connects, deploys and starts every worker and waits
 * until all have authenticated.  0 when there is nothing to do or all are
 * ready; else -1 with err (every started worker already stopped). */
int sf__cluster_start(char *err, size_t errlen);
/* Head: shutdown frame to every worker, then waits (bounded) for them to
 * close their connections and ends the SSH sessions.  Idempotent. */
void sf__cluster_stop(void);
int sf__cluster_nodes(void); /* 1 + number of workers; 1 without --nodes */
bool sf__cluster_node(int id, sf__node_info *out);
void sf__cluster_on_node_lost(sf__node_lost_fn fn);
/* Head: the data-plane address a worker reported (for actor group rings),
 * and the port of its object store's listener on the same address. */
bool sf__cluster_data_addr(int node, char *addr, size_t n, uint16_t *port);
bool sf__cluster_obj_addr(int node, char *addr, size_t n, uint16_t *port);

/* --------------------------------------------------------- control.c */

/* Head: the best estimate of worker `node`'s clock minus the head's
 * (trace.c's clock, ns), and the round trip of the heartbeat it came from;
 * false (offset 0) before any answer.  NTP's rule: offset = t1 - (t0+t2)/2
 * for a heartbeat sent at t0, seen by the worker at t1 and answered at t2,
 * from the sample with the smallest t2 - t0, so the error is at most half
 * that round trip. */
bool sf__cluster_clock(int node, int64_t *offset_ns, uint64_t *rtt_ns);
/* Head: seconds since worker `node` last sent a byte, and the longest such
 * silence so far (--metrics-port's heartbeat gaps); false when it is not
 * a live worker. */
bool sf__cluster_silence(int node, double *now_s, double *max_s);
/* Head: queues encoded frames (whole frames, in order) for worker `node`;
 * the control thread writes them without blocking, so callers never wait
 * on a slow peer.  -1 when the node is not a live worker. */
int sf__cluster_send(int node, const void *bytes, size_t n);
/* One piece of what sf__cluster_send_parts queues: n bytes at p, copied
 * into the queue when blob is NULL, else sent from where they lie (inside
 * blob, which the queue holds a reference to until they are written). */
typedef struct sf__part {
  const void *p;
  size_t n;
  sf__shared *blob;
} sf__part;
/* Queues parts[0..k) for worker `node` as one run of bytes (nothing from
 * another thread in between), like sf__cluster_send; only the copied
 * parts cost a copy, under the lock the control thread needs.  -1 when
 * the node is not a live worker (nothing queued). */
int sf__cluster_send_parts(int node, const sf__part *parts, int k);

/* -------------------------------------------------------- selftest.c */

/* A group collective across workers (ring over their data listeners):
 * members are node ids >= 1 in ring order.  Used by --sflow-selftest;
 * count 0 only builds and tears down the ring. */
typedef struct sf__group_result {
  bool ok;
  double seconds; /* slowest member, per iteration */
  char message[256];
} sf__group_result;
int sf__cluster_group_bench(const int *members, int n, uint64_t count, sf__dtype t, int iters,
                            sf__group_result *res, char *err, size_t errlen);
/* --sflow-selftest SPEC on the head instead of workflow main (tests and
 * bench/cluster): "ready", "hold:SECONDS", "allreduce:COUNT:TYPE:ITERS". */
int sf__cluster_selftest(const char *spec);

/* ----------------------------------------------------- worker_main.c */

/* Worker: the whole life of a worker process (--sflow-worker SPEC).
 * Returns the process exit code. */
int sf__worker_main(const char *spec);
/* Worker: its data-plane listener (-1: none) and the run's secret. */
int sf__worker_data_fd(void);
const uint8_t *sf__worker_secret(void);
/* Worker: sends a frame to the head (thread-safe; concurrent senders are
 * combined into one write). */
void sf__worker_send_frame(const sf__frame *f);
/* Worker: sends frames the caller encoded into b (a checkpoint, encoded
 * on the actor's thread, outside the lock every sender takes), in order
 * with the others; b is taken (emptied). */
void sf__worker_send_encoded(sf__wbuf *b);

/* -------------------------------------------------------- dispatch.c */

/* Placement across nodes: true when another node takes this task call.
 * args stays owned by the caller (copy what is needed); f is completed
 * later with sf__future_resolve / sf__future_reject; key (the call's
 * identity) goes with every attempt. */
bool sf__remote_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq, uint64_t key);
/* Head, on the control thread (control.c, H.mu not held): a task result or
 * print output from worker `node`. */
struct sf__frame;
void sf__remote_on_result(int node, const struct sf__frame *f);
void sf__remote_on_print(int node, const char *s, size_t n);
/* Whether values of type t can travel (no futures, actors or groups). */
bool sf__remote_portable(const sf_type *t);
/* Appends to b what the head printed for output s[0..n) of node (with the
 * "[node K] " prefix when more than one node runs work). */
void sf__remote_printed_as(int node, const char *s, size_t n, sf__buf *b);

/* ------------------------------------------------------- placement.c */

/* A GPU share placed with an actor or task: share in thousandths of one
 * GPU (<= 1000) or whole GPUs * 1000, 0 for none; while held, taken on
 * device dev of its node (a share) or on the devices in mask (whole). */
typedef struct sf__gpu_hold {
  int32_t share, dev;
  uint64_t mask;
  bool held;
} sf__gpu_hold;
/* The share @gpus(gpus) takes in this run, 0 when no node has a GPU (the
 * work then stays on the head, as in a single-node run). */
int32_t sf__remote_gpu_share(double gpus);
/* Placement for actors (ractor_head.c): a live node with `need` free slots,
 * the most free first, workers before the head on a tie (the head only
 * when head_ok); its slots are held until sf__remote_unplace.  With a GPU
 * share (gpu->share), the best fit among nodes where it is free, held
 * with the slots.  -1: none. */
int sf__remote_place(int need, sf__gpu_hold *gpu, bool head_ok, const bool *exclude);
void sf__remote_unplace(int node, int need, sf__gpu_hold *gpu);
bool sf__remote_active(void); /* a --nodes run on the head */
const char *sf__remote_lost_why(int node); /* NULL while alive */

/* --------------------------------------------------------- objects.c */

/* An object frame: on the head from the worker that holds a large
 * result, on a worker from the head (a fetch request or a release). */
void sf__remote_on_object(int node, const struct sf__frame *f);
void sf__remote_worker_object(const struct sf__frame *f);
/* Head: future.c asks for the value of a held future (sf__future_held) when
 * it is first wanted, and tells when a held future's last reference goes
 * (nothing here can want the value any more: the worker may drop it). */
void sf__remote_demand(sf_future *f);
void sf__remote_future_gone(sf_future *f);
/* Worker: serves the object store to other workers on listener fd
 * (a thread). */
void sf__remote_objects_listen(int fd);

/* ---------------------------------------------------- worker_tasks.c */

/* Worker: a task-submit frame from the head (validated, queued, run on
 * runner threads; results go back with sf__worker_send_frame). */
void sf__remote_worker_start(void);
void sf__remote_worker_submit(const struct sf__frame *f);
/* The task descriptor at offset off from &sf_program_desc, when that lies
 * in this executable and is a descriptor named name[0..nl); else NULL with
 * a message.  A peer's number is never followed further than that. */
const sf_task_desc *sf__remote_find_task(uint32_t off, const uint8_t *name, uint32_t nl,
                                         char *err, size_t errlen);
typedef struct sf__comm sf__comm;
/* The descriptor at offset off whose name is name[0..nl), checked like a
 * task's (same rules, as an sf_method_desc or sf_actor_desc). */
const sf_method_desc *sf__remote_find_method(uint32_t off, const uint8_t *name, uint32_t nl,
                                             char *err, size_t errlen);
const sf_actor_desc *sf__remote_find_class(uint32_t off, const uint8_t *name, uint32_t nl,
                                           char *err, size_t errlen);

/* ----------------------------------------------------- group_ring.c */

/* The TCP-ring transport of group collectives (sched.h,
 * sf__coll_transport), registered by sf__cluster_install as
 * sf__coll_transports[SF__COLL_RING].  Its init's arg: member rank of the
 * group on ring id ring, peers[k] member k's data listener. */
typedef struct sf__ring_group_arg {
  int64_t rank;
  uint64_t ring;
  const sf__peer *peers;
} sf__ring_group_arg;
extern const sf__coll_transport sf__coll_ring;

/* ----------------------------------------------------- ractor_head.c */

/* Head: places a spawn on workers when it can: one actor
 * (n 1) or a gang of n members; true when it did (args consumed). */
bool sf__ractor_spawn(sf_actor **members, int64_t n, void *args);
/* Head: a call to an actor on a worker; args consumed. */
void sf__ractor_call(struct sf__ractor *r, const sf_method_desc *md, void *args, bool all,
                     const sf__sink *sink);
void sf__ractor_drop(struct sf__ractor *r); /* the handle is gone */
void sf__ractor_node_lost(int node, const char *why);
void sf__ractor_on_frame(int node, const struct sf__frame *f); /* control thread */
/* An actor-state frame f whose state lies inside bytes, which the head
 * keeps a reference to instead of copying (control thread). */
void sf__ractor_on_state(int node, const struct sf__frame *f, sf__shared *bytes);

/* --------------------------------------------------- ractor_worker.c */

/* Worker: the actor frame c's sf__conn_next just returned, taken from c
 * (sf__conn_take: in place when large) and handled on the actor-frame
 * thread, in the order of arrival, so that decoding a restarted member's
 * state of hundreds of MB never keeps the control loop from the head's
 * heartbeats. */
void sf__ractor_worker_take(sf__conn *c);

/* --------------------------------------------------------- install.c */

/* Installs task.c's placer and trace.c's cluster hooks (install.c; main.c,
 * before any thread). */
void sf__cluster_install(void);

/* ------------------------------------------------------ trace_ship.c */

/* Worker: sends the pending events to the head now (before a result, from
 * the control loop, at shutdown); nothing when there are none. */
void sf__trace_ship(void);
/* Head, control thread: a trace frame from worker `node`. */
struct sf__frame;
void sf__trace_remote(int node, const struct sf__frame *f);
void sf__trace_ship_install(void);

/* ---------------------------------------------------- metrics_ship.c */

/* Worker of a run with --metrics-port or --dashboard on the head
 * (--sflow-metrics): sends its figures at most once a second (now: at
 * once, the last before shutdown). */
void sf__metrics_ship(bool now);
/* Head, control thread: a metrics frame from worker `node`. */
void sf__metrics_remote(int node, const struct sf__frame *f);

#endif
