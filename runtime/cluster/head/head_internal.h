/*
 * head_internal.h — what the head's three files of a multi-node run
 * share: launch.c (start-up and shutdown, the node table), control.c (the
 * control thread) and selftest.c (--sflow-selftest and its group bench).
 * Nothing else includes it; worker_main.c is the other side of the wire.
 *
 * Key design choice: one table, `H`, under one mutex (H.mu) holds every
 * node's connection, SSH session and what it reported.  During start-up
 * the start-up threads own one node each; after it the control thread
 * owns every socket and session, and other threads only queue frames
 * (sf__head_send_frame, sf__cluster_send) and wake it.
 */
#ifndef SF_HEAD_INTERNAL_H
#define SF_HEAD_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <time.h>

#include "head.h"

#define MAX_LISTEN 16
/* Connections to the control plane that have not authenticated yet: at
 * most this many at once (control.c drops each after PREAUTH_TIMEOUT_MS). */
#define PREAUTH_MAX 64

/* A piece of a node's outgoing bytes: frames copied in (b), or bytes
 * sent from where they lie inside a blob (a checkpoint's state). */
typedef struct oseg {
  struct oseg *next;
  sf__wbuf b;         /* copied frames, when blob is NULL */
  sf__shared *blob;     /* else p[0..n) lies in it */
  const uint8_t *p;
  size_t n;
  size_t off;         /* bytes of this piece already written */
} oseg;

typedef struct node {
  const sf__host *host;
  sf__ssh_target target; /* where and how to connect (sshconfig.c) */
  char label[300];    /* the host as written ("gpu1", "[127.0.0.2]:2222") */
  sf__ssh *ssh;
  sf__conn conn;      /* control connection; fd -1 until authenticated */
  oseg *out, *out_tail; /* bytes not yet written, in order (control.c) */
  bool ready, alive, lost;
  bool ssh_open;
  uint32_t pid, cpus, gpus;
  char data_addr[64];
  uint16_t data_port, obj_port; /* group rings; the object store (objects_head.c) */
  char hostname[256];
  int64_t last_rx;
  int64_t quiet_max;  /* the longest it went without a byte arriving (ms) */
  /* Clock alignment (sf__cluster_clock): the best sample so far. */
  int64_t clock_off;
  uint64_t clock_rtt;
  int clock_n;
  bool copied;
  int64_t connect_ms;        /* phase 1: TCP + handshake + authentication */
  int64_t check_ms;          /* phase 2: listener, start of the command, host check */
  char path[1200];           /* the executable's copy on the host */
  char cmd[4096 + 512];      /* the host check, then the worker (check_host) */
  double start_s;     /* seconds from the run's start to HELLO */
  char error[768];    /* start-up failure */
  char listen_addr[64];
  /* the current group operation */
  bool group_done, group_ok;
  uint64_t group_ns;
  char group_msg[256];
} node;

/* A connection to the control plane before it has authenticated and
 * said hello.  The control thread reads greeters without blocking, beside
 * the nodes, so one that says nothing holds up neither the accept loop
 * nor anyone else; until the handshake passes its connection reads only
 * handshake frames (wire.c), so a stranger costs a few hundred bytes
 * whatever length it claims. */
typedef struct greeter {
  sf__conn conn;
  int64_t deadline;
  uint8_t nonce[32];  /* the challenge sent */
  uint32_t node;      /* the node it proved to be, 0 before the auth frame */
  char who[96];       /* peer address, for messages */
} greeter;

typedef struct sf__head {
  bool started;
  /* A run whose ranks a launcher started (net/launcher.c): no SSH, the
   * nodes are ranks 1..size-1 dialling in; NULL for --nodes. */
  const sf__launch *launch;
  sf__hostlist hosts;
  node *nodes; /* nodes[i] is node id i + 1 */
  int n;
  uint8_t secret[SF__SECRET_LEN];
  uint8_t exe_hash[SF__HASH_LEN];
  char exe_hex[2 * SF__HASH_LEN + 1];
  char exe_path[PATH_MAX];
  char cwd_arg[2 * SF__CWD_MAX + 16]; /* " --sflow-cwd HEX", or "" */
  sf__ssh_opts ssh;
  int listen_fd[MAX_LISTEN];
  char listen_addr[MAX_LISTEN][64];
  int nlisten;
  greeter greet[PREAUTH_MAX]; /* conn.fd -1: a free slot */
  uint16_t port;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  _Atomic bool thread_running; /* set before the control thread starts */
  bool stopping;
  int wake[2];
  sf__node_lost_fn lost_fn;
  int lost_count;
  uint64_t group_seq;
  int64_t t0;
  int64_t hb_gap_max; /* the longest between two heartbeat rounds (ms) */
  unsigned master_port; /* MASTER_PORT for the users' own rendezvous */
} sf__head;

/* The head's node table (launch.c defines it); `H` in the three files. */
extern sf__head sf__head_table;
#define H sf__head_table

static inline bool logging(void) { return sf__options.cluster_log; }

/* control.c */
/* One round of the control loop: heartbeats, reads, writes, greeters,
 * lost nodes; the caller holds H.mu. */
void sf__head_control_round(int timeout_ms, int64_t *next_hb);
void *sf__head_control_thread(void *arg);
/* Copies what nd's SSH channel printed to stderr ("[node K] ..."). */
void sf__head_pump_ssh(node *nd);
/* Frames go through nd->out, in order with the task frames of dispatch.c;
 * written at once on the control thread, else left to it. */
void sf__head_send_frame(node *nd, const sf__frame *f);
/* Wakes the control thread from its poll. */
void sf__head_wake(void);
/* Drops what nd has not written yet. */
void sf__head_out_clear(node *nd);
/* --cluster-log: the longest gap between heartbeat rounds and each node's
 * longest silence, against the 3 s limit. */
void sf__head_note_silences(void);

#endif
