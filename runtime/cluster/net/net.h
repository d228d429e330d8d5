/*
 * net.h — the cluster layer's plumbing: hostfiles, ssh_config, known_hosts,
 * host checks, crypto, SSH (libssh2), the TCP ring and its greeters, and
 * the small helpers every side shares (errors, notes, addresses, shared
 * blobs).  It knows nothing of frames, the head or the worker: proto/
 * stands on it, and head/ and worker/ on proto/ (docs/cluster.md, "Source
 * layout"; tests/cluster/sides_test.py checks the direction).
 */
#ifndef SF_CLUSTER_NET_H
#define SF_CLUSTER_NET_H


#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "durable.h" /* the layers below: durable, gpu, sched, core */
#include "gpu.h"

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

/* ------------------------------------------------------- launcher.c */

/* --launcher's values, in the order of its row's "auto|ssh|slurm|mpi|env"
 * (flagnames.h). */
typedef enum {
  SF__LAUNCHER_AUTO = 0,
  SF__LAUNCHER_SSH,
  SF__LAUNCHER_SLURM,
  SF__LAUNCHER_MPI,
  SF__LAUNCHER_ENV
} sf__launcher_flag;

/* Which engine started this process as one rank of a run
 * (docs/cluster.md, "Started by a launcher"). */
typedef enum {
  SF__LAUNCH_NONE = 0, /* a plain run, or the head of a --nodes run */
  SF__LAUNCH_SLURM,    /* srun: SLURM_PROCID, SLURM_NTASKS, ... */
  SF__LAUNCH_OMPI,     /* Open MPI's mpirun: OMPI_COMM_WORLD_* */
  SF__LAUNCH_PMI,      /* MPICH/Hydra and other PMI launchers: PMI_RANK, PMI_SIZE */
  SF__LAUNCH_ENV       /* torchrun, Kubernetes: RANK, WORLD_SIZE, MASTER_ADDR */
} sf__launch_kind;

/* This process's place in a launched run: rank 0 is the head, ranks
 * 1..size-1 its workers (node id = rank).  The head is at host:port, or,
 * when rdv is set (MPI without MASTER_ADDR), at what rank 0 publishes in
 * the rendezvous file rdv. */
typedef struct sf__launch {
  sf__launch_kind kind;
  const char *engine; /* "Slurm", "Open MPI", "PMI", "env" for messages */
  int rank, size, local_rank, local_size;
  char host[256];     /* the head's address or name; "" with rdv */
  unsigned port;
  char rdv[1100];     /* rendezvous file, or "" */
  char job[96];       /* the job's id where the engine gives one */
  uint8_t key[SF__SECRET_LEN]; /* SHA-256 of the job's secret (sf__launch_secret) */
} sf__launch;

/* The process's launch: kind SF__LAUNCH_NONE unless sf__launch_detect found one. */
extern sf__launch sf__launched;

/* Reads the launcher's variables for --launcher `flag` (nodes: --nodes was
 * given, which means ssh unless a launcher is named).  0 with L filled
 * (kind NONE: not launched, or a world of one in auto), -1 with err. */
int sf__launch_detect(int flag, bool nodes, sf__launch *L, char *err, size_t errlen);
/* The job's secret, from SFLOW_SECRET_FILE (owned by this user, readable
 * by nobody else) or SFLOW_SECRET, at least 32 bytes, into L->key.  -1
 * with err when missing or unsafe: nothing may listen before this. */
int sf__launch_secret(sf__launch *L, char *err, size_t errlen);
/* Sets SFLOW_LAUNCH_MARK to a hash of the launcher variables in the
 * environment now, so that a sflow program started from inside this
 * process (a task's sh) finds them inherited and is not a rank; called
 * again whenever sflow itself changes them. */
void sf__launch_mark(void);
/* main.c, before any thread: sf__launch_detect for --launcher, then the
 * secret, this rank's CPU share (--threads when not given), its GPU
 * (SFLOW_LOCAL_RANK for gpu.c) and torchrun's names for Slurm and MPI
 * ranks.  -1 with err: the run must not start (exit 69). */
int sf__launch_setup(char *err, size_t errlen);
/* Slurm's compressed host list ("node[01-03,7],gpu2") expanded in order:
 * the number of hosts, with *hosts an array of malloc'ed names
 * (sf__launch_hosts_free), or -1 with err. */
int sf__slurm_hosts(const char *list, char ***hosts, char *err, size_t errlen);
void sf__launch_hosts_free(char **hosts, int n);
/* Rendezvous file (rdv mode): rank 0 writes "ADDR PORT\n" there (mode
 * 0600, renamed into place); the others read it, 1 while it is not there
 * yet. */
int sf__launch_publish(const sf__launch *L, const char *addr, unsigned port, char *err,
                       size_t errlen);
int sf__launch_lookup(const sf__launch *L, char *addr, size_t an, unsigned *port, char *err,
                      size_t errlen);

/* Where rank 0 listens (head/launch.c): the first address `name` (the
 * head's host as the workers are told it) resolves to, as a worker dials
 * it.  1 with *ss (port 0): only there.  0 with why: every interface,
 * since the name does not resolve, is not an address of this machine
 * (a Kubernetes Service), or is loopback here while ranks run elsewhere. */
int sf__launch_bind_addr(const sf__launch *L, const char *name, struct sockaddr_storage *ss,
                         socklen_t *sl, char *why, size_t whylen);

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
  char warning[600];   /* one line for the user (more IdentityFiles than used), or "" */
  /* How the connection gets there, as ssh (ProxyJump, ProxyCommand): at
   * most one of the two is set.  jump is the host before this one, itself
   * resolved (its own jump before it, for a chain); the command has its
   * %-tokens expanded, for /bin/sh -c. */
  struct sf__ssh_target *jump; /* owned: sf__ssh_target_free */
  char proxy_command[2048];
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
/* Frees what a resolved target owns (its jump hosts), not t itself. */
void sf__ssh_target_free(sf__ssh_target *t);

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


/* A line on stderr (on the head: clear of the progress line; note.c). */
__attribute__((format(printf, 1, 2))) void sf__cluster_note(const char *fmt, ...);
/* Numeric "addr" and port of a socket address (port may be NULL). */
void sf__addr_str(const struct sockaddr *sa, socklen_t sl, char *host, size_t hn,
                  uint16_t *port);

/* CLOCK_MONOTONIC in milliseconds: deadlines and timeouts. */
static inline int64_t sf__now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

#endif
