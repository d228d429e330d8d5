/*
 * flagnames.h — the one table of the command-line flags that the runtime of
 * every compiled workflow parses itself: one row per flag, as X-macros.
 *
 * Key design choice: a flag is one row, and everything about it follows
 * from the row, as in Redis's config.c: the field of sf__options
 * (core.h), its default, the parser of its value by kind, the bounds with
 * the message a bad value gets, its --help line (runtime/core/flags.c),
 * and its reservation in the compiler, which refuses a workflow parameter
 * whose flag would collide with any name here (compiler/sema.c, through
 * SF__RUNTIME_FLAGS).  Hidden flags (--sflow-worker, help NULL) are
 * reserved too; tests/runtime/flags_test.py checks --help against this
 * table.  Adding a flag is adding a row (HACKING.md).
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

/* R(X, ID, name, KIND, field, default, lo, hi, valid, what, ARG, help), one
 * row per flag, in --help's order:
 *   KIND    BOOL (bool; "--name" alone is true, or --name=true|false),
 *           INT (int64_t, from lo to hi: else "expected WHAT from LO to HI"),
 *           ENUM (int32_t: the index of the value in ARG, "a|b|c"),
 *           STR (const char *, pointing into argv; valid, when not NULL, is
 *           a bool (*)(const char *) of flags.c that refuses what is not
 *           WHAT);
 *   field   the member of sf__options that holds the value;
 *   default its value when the flag is not given (an ENUM's index);
 *   ARG     what --help shows after the name; NULL for a BOOL;
 *   help    the --help line; NULL hides the flag (internal: the head starts
 *           workers with it) from --help and from "did you mean".
 * A value that must not be empty is every non-BOOL one. */
#define SF__RUNTIME_FLAG_ROWS(R, X)                                                           \
  R(X, NODES, "nodes", STR, nodes, NULL, 0, 0, NULL, NULL, "FILE",                            \
    "run on the hosts listed in FILE, one per line")                                          \
  R(X, RESUME, "resume", BOOL, resume, false, 0, 0, NULL, NULL, NULL,                         \
    "finish a killed run from its journal and checkpoints")                                   \
  R(X, TRACE, "trace", STR, trace, NULL, 0, 0, NULL, NULL, "FILE",                            \
    "write a trace of tasks and actors to FILE")                                              \
  R(X, METRICS_PORT, "metrics-port", INT, metrics_port, 0, 1, 65535, NULL, "a TCP port", "P", \
    "serve Prometheus metrics of the run on port P")                                          \
  R(X, DASHBOARD, "dashboard", INT, dashboard_port, 0, 1, 65535, NULL, "a TCP port", "P",     \
    "serve a live page of the run on port P")                                                 \
  R(X, METRICS_BIND, "metrics-bind", STR, metrics_bind, NULL, 0, 0, NULL, NULL, "HOST",       \
    "address of --metrics-port and --dashboard (default 127.0.0.1; else a token is needed)")  \
  R(X, CKPT, "checkpoint-dir", STR, checkpoint_dir, NULL, 0, 0, NULL, NULL, "DIR",            \
    "journal and checkpoints go here (default .sflow/PROGRAM)")                               \
  R(X, PROGRESS, "progress", ENUM, progress, 0, 0, 0, NULL, NULL, "auto|always|never",        \
    "show a progress line (auto: when stderr is a terminal)")                                 \
  R(X, QUIET, "quiet", BOOL, quiet, false, 0, 0, NULL, NULL, NULL,                            \
    "no summary line, notices or progress line")                                              \
  R(X, GPU, "require-gpu", BOOL, require_gpu, false, 0, 0, NULL, NULL, NULL,                  \
    "fail instead of running GPU work on the CPU")                                            \
  R(X, THREADS, "threads", INT, threads, 0, 1, SF__MAX_THREADS, NULL, "a number of threads",  \
    "N", "worker threads, 1 to " SF__STR(SF__MAX_THREADS) " (default: one per CPU)")          \
  R(X, JOURNAL, "journal", BOOL, journal, true, 0, 0, NULL, NULL, NULL,                       \
    "record main's calls so --resume can finish the run (default true)")                      \
  R(X, SSH_USER, "ssh-user", STR, ssh_user, NULL, 0, 0, NULL, NULL, "USER",                   \
    "user on the --nodes hosts (default: ssh config's User, else current user)")              \
  R(X, SSH_KEY, "ssh-key", STR, ssh_key, NULL, 0, 0, NULL, NULL, "FILE",                      \
    "private key for SSH (default: ssh-agent, then IdentityFile or ~/.ssh/id_*)")             \
  R(X, KNOWN_HOSTS, "known-hosts", STR, known_hosts, NULL, 0, 0, NULL, NULL, "FILE",          \
    "host keys to trust (default UserKnownHostsFile or ~/.ssh/known_hosts)")                  \
  R(X, SSH_CONFIG, "ssh-config", STR, ssh_config, NULL, 0, 0, NULL, NULL, "FILE",             \
    "ssh client config, or none (default ~/.ssh/config, /etc/ssh/ssh_config)")                \
  R(X, ACCEPT_NEW, "accept-new-host-keys", BOOL, accept_new_host_keys, false, 0, 0, NULL,     \
    NULL, NULL, "trust and record unknown host keys (a changed key is still refused)")        \
  R(X, CONNECT_TIMEOUT, "connect-timeout", INT, connect_timeout, 10, 1, 3600, NULL, "seconds",\
    "S", "seconds to reach each host (default 10)")                                           \
  R(X, HEAD_WORK, "head-runs-work", BOOL, head_runs_work, true, 0, 0, NULL, NULL, NULL,       \
    "the head also runs tasks (default true)")                                                \
  /* The path goes into a single-quoted remote command line. */                               \
  R(X, REMOTE_CACHE, "remote-cache", STR, remote_cache, NULL, 0, 0, rt_quotable,        \
    "a folder name without quotes, backslashes or newlines", "DIR",                           \
    "folder on the hosts for the executable (default .cache/sflow)")                          \
  R(X, CLUSTER_LOG, "cluster-log", BOOL, cluster_log, false, 0, 0, NULL, NULL, NULL,          \
    "report each node's start, readiness and stop")                                           \
  R(X, LAUNCHER, "launcher", ENUM, launcher, 0, 0, 0, NULL, NULL, "auto|ssh|slurm|mpi|env",   \
    "who started the ranks (default auto: srun's, mpirun's or torchrun's variables)")         \
  /* Hidden: the head's command line for a worker (cluster/launch.c). */                      \
  R(X, WORKER, "sflow-worker", STR, worker, NULL, 0, 0, NULL, NULL, "SPEC", NULL)             \
  R(X, WORKER_CWD, "sflow-cwd", STR, worker_cwd, NULL, 0, 0, NULL, NULL, "HEX", NULL)         \
  R(X, WORKER_TRACE, "sflow-trace", BOOL, worker_trace, false, 0, 0, NULL, NULL, NULL, NULL)  \
  R(X, WORKER_METRICS, "sflow-metrics", BOOL, worker_metrics, false, 0, 0, NULL, NULL, NULL,  \
    NULL)                                                                                     \
  /* Hidden: --sflow-selftest SPEC for tests and bench (cluster/selftest.c). */               \
  R(X, SELFTEST, "sflow-selftest", STR, selftest, NULL, 0, 0, NULL, NULL, "SPEC", NULL)

/* X(ID, name, ARG, help) for every row: what the compiler reads. */
#define SF__FLAG_ROW_NAMES(X, id, name, kind, field, def, lo, hi, valid, what, arg, help) \
  X(id, name, arg, help)
#define SF__RUNTIME_FLAGS(X) SF__RUNTIME_FLAG_ROWS(SF__FLAG_ROW_NAMES, X)

/* X(name, help): flags that stop parsing and print something (flags.c's
 * wants_info; "-h" is the short spelling of help). */
#define SF__INFO_FLAGS(X)                   \
  X("help", "show this help and exit")      \
  X("version", "show the version and exit")

#endif
