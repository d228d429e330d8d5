/*
 * launcher.c — a run whose processes a launcher started (srun, mpirun,
 * torchrun, a Kubernetes Job): which engine, this process's rank, where
 * the head (rank 0) listens, and the job's secret (docs/cluster.md,
 * "Started by a launcher").
 *
 * Key design choice: everything comes from the environment the launcher
 * gave, and the secret only from a file only this user can read or a
 * variable the job set, never from the network; a rank without one stops
 * before anything listens.  sflow's own processes carry launcher variables
 * too (a --nodes run exports torchrun's names to its processes): every
 * sflow process marks the ones it has (SFLOW_LAUNCH_MARK, a hash of their
 * values), and a program started from inside one finds the mark matching
 * and is a plain run, not a rank of a world it was never part of.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net.h"

sf__launch sf__launched;

#define MARK "SFLOW_LAUNCH_MARK"
#define SECRET_MIN 32     /* bytes of secret text, at least */
#define SECRET_MAX 4096
#define DEFAULT_PORT 29500 /* torchrun's MASTER_PORT */
/* Slurm's head port without --resv-ports: below Linux's ephemeral range
 * (32768..60999), so no outgoing connection holds it by chance; distinct
 * for jobs fewer than PORT_SPAN / 16 apart and for 16 steps of one job. */
#define PORT_BASE 20000
#define PORT_SPAN 12768

/* The launcher variables a rank's identity comes from: what the mark
 * hashes.  A launcher that starts a program from inside a run sets at
 * least one of them anew, so the hash differs and the program is a rank. */
static const char *const launch_vars[] = {
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid",
    "PMI_RANK", "PMI_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID"};

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static void fingerprint(char out[17]) {
  sf__sha256_ctx c;
  sf__sha256_init(&c);
  for (size_t i = 0; i < sizeof launch_vars / sizeof *launch_vars; i++) {
    const char *v = env(launch_vars[i]);
    if (v) {
      sf__sha256_update(&c, launch_vars[i], strlen(launch_vars[i]) + 1);
      sf__sha256_update(&c, v, strlen(v) + 1);
    }
  }
  uint8_t h[32];
  sf__sha256_final(&c, h);
  sf__hex(h, 8, out);
}

void sf__launch_mark(void) {
  char fp[17];
  fingerprint(fp);
  setenv(MARK, fp, 1);
}

/* Whether the launcher variables here are the ones an enclosing sflow
 * process had: inherited, not set for us. */
static bool inherited(void) {
  const char *m = env(MARK);
  char fp[17];
  fingerprint(fp);
  return m && !strcmp(m, fp);
}

/* The variable name as a non-negative integer into *out; 0 when absent
 * (out untouched), 1 when read, -1 with err when not a number. */
static int num(const char *name, long max, int *out, char *err, size_t errlen) {
  const char *v = env(name);
  if (!v)
    return 0;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > max || *v == '+' || *v == '-')
    return sf__net_fail(err, errlen, "%s='%.40s' in the environment is not a number from 0 to %ld",
                        name, v, max);
  *out = (int)x;
  return 1;
}

static void job_id(sf__launch *L, const char *a, const char *b) {
  snprintf(L->job, sizeof L->job, "%s%s%s", a ? a : "", a && b ? "." : "", b ? b : "");
}

/* Slurm's SLURM_TASKS_PER_NODE ("2(x3),1"): the count of node `node`. */
static int tasks_on_node(const char *spec, int node) {
  int at = 0;
  for (const char *p = spec; p && *p;) {
    char *end;
    long n = strtol(p, &end, 10), times = 1;
    if (end == p)
      return 0;
    if (!strncmp(end, "(x", 2)) {
      times = strtol(end + 2, &end, 10);
      if (*end != ')')
        return 0;
      end++;
    }
    if (node < at + times)
      return (int)n;
    at += (int)times;
    p = *end == ',' ? end + 1 : NULL;
  }
  return 0;
}

static int from_slurm(sf__launch *L, char *err, size_t errlen) {
  L->kind = SF__LAUNCH_SLURM;
  L->engine = "Slurm";
  int nodeid = 0;
  if (num("SLURM_PROCID", 1 << 20, &L->rank, err, errlen) < 0 ||
      num("SLURM_NTASKS", 1 << 20, &L->size, err, errlen) < 0 ||
      num("SLURM_LOCALID", 1 << 20, &L->local_rank, err, errlen) < 0 ||
      num("SLURM_NODEID", 1 << 20, &nodeid, err, errlen) < 0)
    return -1;
  const char *tpn = env("SLURM_STEP_TASKS_PER_NODE");
  if (!tpn)
    tpn = env("SLURM_TASKS_PER_NODE");
  L->local_size = tpn ? tasks_on_node(tpn, nodeid) : 0;
  job_id(L, env("SLURM_JOB_ID"), env("SLURM_STEP_ID"));
  if (env("MASTER_ADDR"))
    return 0; /* the user's choice wins (launch_head) */
  const char *list = env("SLURM_STEP_NODELIST");
  if (!list)
    list = env("SLURM_JOB_NODELIST");
  if (!list)
    list = env("SLURM_NODELIST");
  if (!list)
    return sf__net_fail(err, errlen, "Slurm rank %d: no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST "
                        "to find rank 0's host (or set MASTER_ADDR)", L->rank);
  char **hosts;
  char why[256];
  int n = sf__slurm_hosts(list, &hosts, why, sizeof why);
  if (n <= 0)
    return sf__net_fail(err, errlen, "Slurm's node list '%.200s': %s", list,
                        n < 0 ? why : "no host");
  snprintf(L->host, sizeof L->host, "%s", hosts[0]); /* srun's rank 0 runs on the first */
  sf__launch_hosts_free(hosts, n);
  /* srun --resv-ports gives each step ports of its own; else one derived
   * from the job and step, so two jobs sharing a host do not collide. */
  const char *resv = env("SLURM_STEP_RESV_PORTS");
  int job = 0, step = 0;
  if (resv && atoi(resv) > 0) {
    L->port = (unsigned)atoi(resv);
  } else {
    if (num("SLURM_JOB_ID", 1 << 30, &job, err, errlen) < 0)
      return -1;
    if (num("SLURM_STEP_ID", 1 << 30, &step, err, errlen) < 0)
      step = 0;
    L->port = PORT_BASE + (unsigned)(((long)job * 16 + step % 16) % PORT_SPAN);
  }
  return 0;
}

static int from_ompi(sf__launch *L, char *err, size_t errlen) {
  L->kind = SF__LAUNCH_OMPI;
  L->engine = "Open MPI";
  if (num("OMPI_COMM_WORLD_RANK", 1 << 20, &L->rank, err, errlen) < 0 ||
      num("OMPI_COMM_WORLD_SIZE", 1 << 20, &L->size, err, errlen) < 0 ||
      num("OMPI_COMM_WORLD_LOCAL_RANK", 1 << 20, &L->local_rank, err, errlen) < 0 ||
      num("OMPI_COMM_WORLD_LOCAL_SIZE", 1 << 20, &L->local_size, err, errlen) < 0)
    return -1;
  const char *j = env("OMPI_MCA_ess_base_jobid");
  job_id(L, j ? j : env("PMIX_NAMESPACE"), NULL);
  return 0;
}

static int from_pmi(sf__launch *L, char *err, size_t errlen) {
  L->kind = SF__LAUNCH_PMI;
  L->engine = "PMI";
  /* The host's share: MPICH's and Intel MPI's Hydra set MPI_LOCALRANKID
   * and MPI_LOCALNRANKS; other PMI launchers PMI_LOCAL_RANK and
   * PMI_LOCAL_SIZE. */
  int got;
  if (num("PMI_RANK", 1 << 20, &L->rank, err, errlen) < 0 ||
      num("PMI_SIZE", 1 << 20, &L->size, err, errlen) < 0 ||
      (got = num("MPI_LOCALRANKID", 1 << 20, &L->local_rank, err, errlen)) < 0 ||
      (!got && num("PMI_LOCAL_RANK", 1 << 20, &L->local_rank, err, errlen) < 0) ||
      (got = num("MPI_LOCALNRANKS", 1 << 20, &L->local_size, err, errlen)) < 0 ||
      (!got && num("PMI_LOCAL_SIZE", 1 << 20, &L->local_size, err, errlen) < 0))
    return -1;
  job_id(L, env("PMI_KVSNAME") ? env("PMI_KVSNAME") : env("PMIX_NAMESPACE"), NULL);
  return 0;
}

static int from_env(sf__launch *L, char *err, size_t errlen) {
  L->kind = SF__LAUNCH_ENV;
  L->engine = "env";
  if (num("RANK", 1 << 20, &L->rank, err, errlen) < 0 ||
      num("WORLD_SIZE", 1 << 20, &L->size, err, errlen) < 0 ||
      num("LOCAL_RANK", 1 << 20, &L->local_rank, err, errlen) < 0 ||
      num("LOCAL_WORLD_SIZE", 1 << 20, &L->local_size, err, errlen) < 0)
    return -1;
  job_id(L, env("TORCHELASTIC_RUN_ID"), NULL);
  if (!env("MASTER_ADDR"))
    return sf__net_fail(err, errlen, "RANK=%d of WORLD_SIZE=%d but no MASTER_ADDR: where rank 0 "
                        "listens (torchrun and Kubernetes set it)", L->rank, L->size);
  return 0;
}

/* Where rank 0 listens: MASTER_ADDR:MASTER_PORT when set (but the port
 * after it under torchrun, whose agent on node 0 holds MASTER_PORT for its
 * own store); Slurm's first host (from_slurm); for MPI a rendezvous file
 * next to the secret file.  SFLOW_HEAD_PORT, when set, is the port. */
static int launch_head(sf__launch *L, char *err, size_t errlen) {
  const char *ma = env("MASTER_ADDR");
  int hp = 0;
  if (num("SFLOW_HEAD_PORT", 65535, &hp, err, errlen) < 0)
    return -1;
  if (ma) {
    snprintf(L->host, sizeof L->host, "%s", ma);
    int p = DEFAULT_PORT;
    if (num("MASTER_PORT", 65535, &p, err, errlen) < 0)
      return -1;
    if (p < 1)
      return sf__net_fail(err, errlen, "MASTER_PORT=0 in the environment is not a port");
    L->port = (unsigned)p + (L->kind == SF__LAUNCH_ENV && env("TORCHELASTIC_RUN_ID") && p < 65535);
  }
  if (hp > 0)
    L->port = (unsigned)hp;
  if (L->host[0])
    return 0;
  const char *sf = env("SFLOW_SECRET_FILE");
  if (!sf)
    return sf__net_fail(err, errlen, "%s rank %d of %d: no MASTER_ADDR, and no SFLOW_SECRET_FILE "
                        "next to which rank 0 could publish its address (set either)",
                        L->engine, L->rank, L->size);
  const char *slash = strrchr(sf, '/');
  char name[128];
  snprintf(name, sizeof name, ".sflow-rendezvous-%s", L->job[0] ? L->job : "job");
  for (char *c = name; *c; c++) /* a file name, whatever the job id holds */
    if (*c == '/')
      *c = '_';
  snprintf(L->rdv, sizeof L->rdv, "%.*s%s", slash ? (int)(slash - sf + 1) : 0, sf, name);
  return 0;
}

int sf__launch_detect(int flag, bool nodes, sf__launch *L, char *err, size_t errlen) {
  *L = (sf__launch){.kind = SF__LAUNCH_NONE, .engine = ""};
  if (flag == SF__LAUNCHER_SSH || (flag == SF__LAUNCHER_AUTO && (nodes || inherited())))
    return 0;
  if (nodes)
    return sf__net_fail(err, errlen, "--nodes starts the run over SSH; it does not go with "
                        "--launcher %s", flag == SF__LAUNCHER_SLURM ? "slurm"
                        : flag == SF__LAUNCHER_MPI ? "mpi" : "env");
  int rc;
  const char *step = env("SLURM_STEP_ID");
  switch (flag) {
  case SF__LAUNCHER_SLURM:
    if (!env("SLURM_PROCID") || !env("SLURM_NTASKS"))
      return sf__net_fail(err, errlen, "--launcher slurm: no SLURM_PROCID and SLURM_NTASKS in the "
                          "environment (start it with srun)");
    rc = from_slurm(L, err, errlen);
    break;
  case SF__LAUNCHER_MPI:
    if (env("OMPI_COMM_WORLD_RANK"))
      rc = from_ompi(L, err, errlen);
    else if (env("PMI_RANK"))
      rc = from_pmi(L, err, errlen);
    else
      return sf__net_fail(err, errlen, "--launcher mpi: no OMPI_COMM_WORLD_RANK or PMI_RANK in the "
                          "environment (start it with mpirun)");
    break;
  case SF__LAUNCHER_ENV:
    if (!env("RANK") || !env("WORLD_SIZE"))
      return sf__net_fail(err, errlen, "--launcher env: no RANK and WORLD_SIZE in the environment");
    rc = from_env(L, err, errlen);
    break;
  default: /* auto: the most specific engine first (mpirun inside a Slurm job is MPI) */
    if (env("OMPI_COMM_WORLD_RANK") && env("OMPI_COMM_WORLD_SIZE"))
      rc = from_ompi(L, err, errlen);
    else if (env("PMI_RANK") && env("PMI_SIZE"))
      rc = from_pmi(L, err, errlen);
    /* A step of srun, not the batch script (step ids from 4294967290 on
     * are Slurm's batch, extern and interactive steps), which has
     * SLURM_PROCID=0 and the allocation's SLURM_NTASKS too. */
    else if (env("SLURM_PROCID") && env("SLURM_NTASKS") && step &&
             strtoul(step, NULL, 10) < 4294967290UL)
      rc = from_slurm(L, err, errlen);
    else if (env("RANK") && env("WORLD_SIZE"))
      rc = from_env(L, err, errlen);
    else
      return 0;
    if (rc == 0 && L->size == 1) { /* a world of one is a plain run */
      *L = (sf__launch){.kind = SF__LAUNCH_NONE, .engine = ""};
      return 0;
    }
  }
  if (rc)
    return -1;
  if (L->size < 1 || L->rank >= L->size)
    return sf__net_fail(err, errlen, "%s: rank %d of a world of %d", L->engine, L->rank, L->size);
  if (L->local_size < 1)
    L->local_size = 1;
  if (L->local_rank >= L->local_size)
    L->local_size = L->local_rank + 1;
  return launch_head(L, err, errlen);
}

/* ----------------------------------------------------------- secret */

static int secret_from_file(const char *path, char *buf, size_t *n, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return sf__net_fail(err, errlen, "SFLOW_SECRET_FILE %s: %s", path, strerror(errno));
  struct stat st;
  int rc = -1;
  if (fstat(fd, &st))
    sf__net_fail(err, errlen, "SFLOW_SECRET_FILE %s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    sf__net_fail(err, errlen, "SFLOW_SECRET_FILE %s is not a regular file", path);
  else if (st.st_uid != geteuid())
    sf__net_fail(err, errlen, "SFLOW_SECRET_FILE %s belongs to uid %u, not to this user (uid %u)",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
  else if (st.st_mode & 077)
    sf__net_fail(err, errlen, "SFLOW_SECRET_FILE %s can be read by others (mode %03o); "
                 "chmod 600 it", path, (unsigned)(st.st_mode & 0777));
  else {
    ssize_t k = read(fd, buf, SECRET_MAX);
    if (k < 0)
      sf__net_fail(err, errlen, "SFLOW_SECRET_FILE %s: %s", path, strerror(errno));
    else {
      *n = (size_t)k;
      rc = 0;
    }
  }
  close(fd);
  return rc;
}

int sf__launch_secret(sf__launch *L, char *err, size_t errlen) {
  char buf[SECRET_MAX + 1];
  size_t n = 0;
  const char *path = env("SFLOW_SECRET_FILE"), *var = env("SFLOW_SECRET");
  const char *from = path ? "SFLOW_SECRET_FILE" : "SFLOW_SECRET";
  if (path) {
    if (secret_from_file(path, buf, &n, err, errlen))
      return -1;
  } else if (var) {
    n = strlen(var) < SECRET_MAX ? strlen(var) : SECRET_MAX;
    memcpy(buf, var, n);
  } else {
    return sf__net_fail(err, errlen,
                        "%s started this as rank %d of %d, but there is no secret to let only "
                        "the job's processes join: set SFLOW_SECRET_FILE to a file only you can "
                        "read (e.g. umask 077; head -c 32 /dev/urandom | base64 > FILE) or "
                        "SFLOW_SECRET in the job's environment",
                        L->engine, L->rank, L->size);
  }
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
    n--;
  int rc = 0;
  if (n < SECRET_MIN) {
    rc = sf__net_fail(err, errlen, "the secret in %s%s%s is too short (%zu bytes; at least %d)",
                      from, path ? " " : "", path ? path : "", n, SECRET_MIN);
  } else {
    sf__sha256_ctx c;
    sf__sha256_init(&c);
    sf__sha256_update(&c, "sflow-launch-1", 15);
    sf__sha256_update(&c, buf, n);
    sf__sha256_final(&c, L->key);
  }
  memset(buf, 0, sizeof buf);
  /* Tasks' child processes need not see it. */
  if (var)
    unsetenv("SFLOW_SECRET");
  return rc;
}

/* ------------------------------------------------------- rendezvous */

int sf__launch_publish(const sf__launch *L, const char *addr, unsigned port, char *err,
                       size_t errlen) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", L->rdv, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return sf__net_fail(err, errlen, "cannot write the rendezvous file %s: %s", tmp,
                        strerror(errno));
  char line[128];
  int k = snprintf(line, sizeof line, "%s %u\n", addr, port);
  bool ok = sf__write_all(fd, line, (size_t)k);
  if (close(fd) || !ok || rename(tmp, L->rdv)) {
    unlink(tmp);
    return sf__net_fail(err, errlen, "cannot write the rendezvous file %s: %s", L->rdv,
                        strerror(errno));
  }
  return 0;
}

int sf__launch_lookup(const sf__launch *L, char *addr, size_t an, unsigned *port, char *err,
                      size_t errlen) {
  FILE *f = fopen(L->rdv, "re");
  if (!f)
    return errno == ENOENT ? 1
                           : sf__net_fail(err, errlen, "rendezvous file %s: %s", L->rdv,
                                          strerror(errno));
  char a[256];
  unsigned p = 0;
  int got = fscanf(f, "%255s %u", a, &p);
  fclose(f);
  if (got != 2 || !p || p > 65535)
    return 1; /* half written by hand, or about to be replaced: look again */
  snprintf(addr, an, "%s", a);
  *port = p;
  return 0;
}

/* ------------------------------------------------------------ bind */

static bool loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a) ||
         (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* Whether this machine has the address (a bind to it, port 0, works). */
static bool local_address(const struct sockaddr *sa, socklen_t sl) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  struct sockaddr_storage probe;
  memcpy(&probe, sa, sl);
  if (sa->sa_family == AF_INET6)
    ((struct sockaddr_in6 *)&probe)->sin6_port = 0;
  else
    ((struct sockaddr_in *)&probe)->sin_port = 0;
  bool ok = bind(fd, (struct sockaddr *)&probe, sl) == 0;
  close(fd);
  return ok;
}

int sf__launch_bind_addr(const sf__launch *L, const char *name, struct sockaddr_storage *ss,
                         socklen_t *sl, char *why, size_t whylen) {
  /* The hints of the workers' dial (worker_main.c, dial_head): the
   * first answer is the address a rank on this host connects to. */
  struct addrinfo hints = {.ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  int g = getaddrinfo(name, "0", &hints, &ai);
  if (g) {
    snprintf(why, whylen, "'%s' does not resolve here (%s)", name, gai_strerror(g));
    return 0;
  }
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *sl = ai->ai_addrlen;
  freeaddrinfo(ai);
  char a[64];
  sf__addr_str((struct sockaddr *)ss, *sl, a, sizeof a, NULL);
  unsigned char lit[sizeof(struct in6_addr)];
  bool numeric = inet_pton(AF_INET, name, lit) == 1 || inet_pton(AF_INET6, name, lit) == 1;
  if (!local_address((struct sockaddr *)ss, *sl)) {
    snprintf(why, whylen, "'%s' is %s, not an address of this machine", name, a);
    return 0;
  }
  /* Debian maps its own name to 127.0.1.1: a rank on another host would
   * find the name elsewhere, which a loopback listener does not answer. */
  if (loopback((struct sockaddr *)ss) && !numeric && L->local_size < L->size) {
    snprintf(why, whylen, "'%s' is %s here, a loopback address, and %d of the %d ranks run "
             "on other hosts", name, a, L->size - L->local_size, L->size);
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------- host list */

void sf__launch_hosts_free(char **hosts, int n) {
  for (int i = 0; i < n; i++)
    free(hosts[i]);
  free(hosts);
}

static int push(char ***v, int *n, int *cap, const char *s, size_t len) {
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 8;
    char **m = realloc(*v, (size_t)nc * sizeof *m);
    if (!m)
      return -1;
    *v = m;
    *cap = nc;
  }
  (*v)[*n] = strndup(s, len);
  return (*v)[(*n)++] ? 0 : -1;
}

/* One range "a-b" or "a" inside brackets, after prefix; widths are kept
 * ("01-03" is 01 02 03, as Slurm writes them). */
static int expand_range(const char *pre, size_t pl, const char *r, size_t rl, const char *suf,
                        size_t sl, char ***v, int *n, int *cap, char *err, size_t errlen) {
  char buf[64];
  if (rl >= sizeof buf)
    return sf__net_fail(err, errlen, "range '%.*s' is too long", (int)rl, r);
  memcpy(buf, r, rl);
  buf[rl] = '\0';
  char *dash = strchr(buf, '-'), *end;
  size_t width = dash ? (size_t)(dash - buf) : rl;
  if (!width || strspn(buf, "0123456789") != width ||
      (dash && (!dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1))))
    return sf__net_fail(err, errlen, "'%s' is not a number or a range a-b", buf);
  unsigned long lo = strtoul(buf, &end, 10), hi = dash ? strtoul(dash + 1, NULL, 10) : lo;
  if (hi < lo || hi - lo > 100000)
    return sf__net_fail(err, errlen, "range '%s' runs backwards or is too long", buf);
  for (unsigned long x = lo; x <= hi; x++) {
    char host[512];
    int k = snprintf(host, sizeof host, "%.*s%0*lu%.*s", (int)pl, pre, (int)width, x, (int)sl,
                     suf);
    if (k >= (int)sizeof host || push(v, n, cap, host, (size_t)k))
      return sf__net_fail(err, errlen, "host name too long or out of memory");
  }
  return 0;
}

/* One entry: "name", "pre[ranges]" or "pre[ranges]suffix" (one bracket
 * group, which is what Slurm writes for one dimension of names). */
static int expand_entry(const char *e, size_t el, char ***v, int *n, int *cap, char *err,
                        size_t errlen) {
  const char *open = memchr(e, '[', el);
  if (!open) {
    if (memchr(e, ']', el))
      return sf__net_fail(err, errlen, "']' without '[' in '%.*s'", (int)el, e);
    return push(v, n, cap, e, el) ? sf__net_fail(err, errlen, "out of memory") : 0;
  }
  const char *close = memchr(open, ']', el - (size_t)(open - e));
  if (!close)
    return sf__net_fail(err, errlen, "'[' without ']' in '%.*s'", (int)el, e);
  const char *suf = close + 1;
  size_t sl = el - (size_t)(suf - e);
  if (memchr(suf, '[', sl) || memchr(suf, ']', sl))
    return sf__net_fail(err, errlen, "more than one bracket group in '%.*s'", (int)el, e);
  /* Every piece between the brackets' commas, empty ones too (refused). */
  for (const char *r = open + 1;;) {
    const char *comma = memchr(r, ',', (size_t)(close - r));
    const char *re = comma ? comma : close;
    if (expand_range(e, (size_t)(open - e), r, (size_t)(re - r), suf, sl, v, n, cap, err, errlen))
      return -1;
    if (!comma)
      return 0;
    r = re + 1;
  }
}

int sf__slurm_hosts(const char *list, char ***hosts, char *err, size_t errlen) {
  char **v = NULL;
  int n = 0, cap = 0;
  *hosts = NULL;
  const char *p = list;
  while (*p) {
    /* An entry ends at a comma outside brackets. */
    const char *q = p;
    int depth = 0;
    while (*q && (depth || *q != ',')) {
      depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
      q++;
    }
    if (q == p || expand_entry(p, (size_t)(q - p), &v, &n, &cap, err, errlen)) {
      if (q == p)
        sf__net_fail(err, errlen, "an empty entry");
      sf__launch_hosts_free(v, n);
      return -1;
    }
    p = *q ? q + 1 : q;
    if (*q && !*p) {
      sf__launch_hosts_free(v, n);
      return sf__net_fail(err, errlen, "an empty entry");
    }
  }
  *hosts = v;
  return n;
}

/* ------------------------------------------------------------ setup */

/* This rank's CPUs: the affinity mask when the launcher bound it to
 * fewer than the machine's (srun --cpu-bind, mpirun --bind-to), else an
 * equal share of the machine among the ranks on it. */
static int cpu_share(const sf__launch *L) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  int mask = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (mask > 0 && mask < online)
    return mask;
  long share = online / (L->local_size > 0 ? L->local_size : 1);
  return share > 0 ? (int)share : 1;
}

int sf__launch_setup(char *err, size_t errlen) {
  sf__launch *L = &sf__launched;
  if (sf__launch_detect(sf__options.launcher, sf__options.nodes != NULL, L, err, errlen)) {
    /* Stale variables in a shell should not trap a plain run. */
    if (sf__options.launcher == SF__LAUNCHER_AUTO) {
      size_t k = strlen(err);
      snprintf(err + k, errlen - k, " (--launcher ssh runs without the launcher's variables)");
    }
    return -1;
  }
  if (L->kind == SF__LAUNCH_NONE)
    return 0;
  if (sf__launch_secret(L, err, errlen))
    return -1;
  if (!sf__options.threads)
    sf__options.threads = cpu_share(L);
  /* Before any thread: setenv is not safe beside a getenv. */
  char v[32];
  snprintf(v, sizeof v, "%d", L->local_rank);
  setenv("SFLOW_LOCAL_RANK", v, 1); /* gpu.c: the LOCAL_RANK-th visible device */
  if (L->kind != SF__LAUNCH_ENV) { /* torchrun's names, as a --nodes run sets them */
    snprintf(v, sizeof v, "%d", L->rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", L->size);
    setenv("WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", L->local_rank);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", L->local_size);
    setenv("LOCAL_WORLD_SIZE", v, 1);
  }
  return 0;
}
