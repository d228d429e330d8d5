/*
 * flagnames.h — the one list of the command-line flags that the runtime of
 * every compiled workflow parses itself, as X-macros.
 *
 * Key design choice: both sides include this file.  runtime/flags.c builds
 * its flag table, its enum and its --help text from SF__RUNTIME_FLAGS, and
 * compiler/sema.c rejects a workflow parameter whose flag would collide with
 * any name here.  A flag added to the runtime is therefore reserved in the
 * compiler by the same edit, hidden ones (--sflow-worker, help NULL)
 * included; tests/runtime/flags_test.py checks --help against this list.
 *
 * No includes and no declarations: only macros, so the compiler can take it
 * without the runtime's headers.
 */
#ifndef SFLOW_FLAGNAMES_H
#define SFLOW_FLAGNAMES_H

/* The most --threads accepts.  A fixed bound, not a multiple of the CPU
 * count, so a command line that works on one machine works on every one.
 * Threads beyond the CPUs only help tasks that block in ways the pool does
 * not see (a blocking system call in foreign code); 1024 is plenty for that
 * and leaves most of the scheduler's 8192 thread slots (sched.c
 * MAX_WORKERS) to the spare threads that stand in for blocked ones. */
#define SF__MAX_THREADS 1024
#define SF__STR_(x) #x
#define SF__STR(x) SF__STR_(x)

/* X(ID, name, ARG, help): ARG is NULL for a boolean flag; help NULL hides
 * the flag (internal: the head starts workers with it) from --help and from
 * "did you mean". */
#define SF__RUNTIME_FLAGS(X)                                                                  \
  X(NODES, "nodes", "FILE", "run on the hosts listed in FILE, one per line")                  \
  X(RESUME, "resume", NULL, "finish a killed run from its journal and checkpoints")           \
  X(TRACE, "trace", "FILE", "write a trace of tasks and actors to FILE")                       \
  X(METRICS_PORT, "metrics-port", "P", "serve Prometheus metrics of the run on port P")          \
  X(DASHBOARD, "dashboard", "P", "serve a live page of the run on port P")                     \
  X(METRICS_BIND, "metrics-bind", "HOST",                                                      \
    "address of --metrics-port and --dashboard (default 127.0.0.1; else a token is needed)")  \
  X(CKPT, "checkpoint-dir", "DIR", "journal and checkpoints go here (default .sflow/PROGRAM)") \
  X(PROGRESS, "progress", "auto|always|never",                                                 \
    "show a progress line (auto: when stderr is a terminal)")                                  \
  X(QUIET, "quiet", NULL, "no summary line, notices or progress line")                         \
  X(GPU, "require-gpu", NULL, "fail instead of running GPU work on the CPU")                   \
  X(THREADS, "threads", "N",                                                                  \
    "worker threads, 1 to " SF__STR(SF__MAX_THREADS) " (default: one per CPU)")               \
  X(JOURNAL, "journal", NULL, "record main's calls so --resume can finish the run "            \
                              "(default true)")                                                \
  X(SSH_USER, "ssh-user", "USER",                                                             \
    "user on the --nodes hosts (default: ssh config's User, else current user)")               \
  X(SSH_KEY, "ssh-key", "FILE",                                                                \
    "private key for SSH (default: ssh-agent, then IdentityFile or ~/.ssh/id_*)")              \
  X(KNOWN_HOSTS, "known-hosts", "FILE",                                                        \
    "host keys to trust (default UserKnownHostsFile or ~/.ssh/known_hosts)")                   \
  X(SSH_CONFIG, "ssh-config", "FILE",                                                          \
    "ssh client config, or none (default ~/.ssh/config, /etc/ssh/ssh_config)")                 \
  X(ACCEPT_NEW, "accept-new-host-keys", NULL,                                                  \
    "trust and record unknown host keys (a changed key is still refused)")                     \
  X(CONNECT_TIMEOUT, "connect-timeout", "S", "seconds to reach each host (default 10)")        \
  X(HEAD_WORK, "head-runs-work", NULL, "the head also runs tasks (default true)")               \
  X(REMOTE_CACHE, "remote-cache", "DIR",                                                       \
    "folder on the hosts for the executable (default .cache/sflow)")                           \
  X(CLUSTER_LOG, "cluster-log", NULL, "report each node's start, readiness and stop")          \
  X(WORKER, "sflow-worker", "SPEC", NULL)                                                      \
  X(WORKER_CWD, "sflow-cwd", "HEX", NULL)                                                      \
  X(WORKER_TRACE, "sflow-trace", NULL, NULL)                                                   \
  X(WORKER_METRICS, "sflow-metrics", NULL, NULL)                                               \
  X(SELFTEST, "sflow-selftest", "SPEC", NULL)

/* X(name, help): flags that stop parsing and print something (flags.c's
 * wants_info; "-h" is the short spelling of help). */
#define SF__INFO_FLAGS(X)                   \
  X("help", "show this help and exit")      \
  X("version", "show the version and exit")

#endif
