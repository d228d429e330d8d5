/*
 * selftest.c — --sflow-selftest SPEC on the head instead of workflow
 * main (tests and bench/cluster): "ready" prints the nodes, "hold:S"
 * waits S seconds unless a node is lost, and "allreduce:COUNT:TYPE:ITERS"
 * times the TCP ring's allreduce across the workers (sf__cluster_group_bench;
 * the workers' side is group_job in worker_main.c).
 *
 * Key design choice: the head only sets the group up (group-setup frames)
 * and collects each member's group-done; the timed calls run between the
 * workers over a ring of their own, so the figure, the slowest member's,
 * is the collective's and not the control plane's.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "head_internal.h"

/* ---------------------------------------------------------- group bench */

int sf__cluster_group_bench(const int *members, int n, uint64_t count, sf__dtype t, int iters,
                            sf__group_result *res, char *err, size_t errlen) {
  *res = (sf__group_result){0};
  if (n < 1 || n > SF__GROUP_MAX) {
    snprintf(err, errlen, "a group needs 1 to %d members", SF__GROUP_MAX);
    return -1;
  }
  pthread_mutex_lock(&H.mu);
  for (int i = 0; i < n; i++)
    if (members[i] < 1 || members[i] > H.n || !H.nodes[members[i] - 1].alive) {
      pthread_mutex_unlock(&H.mu);
      snprintf(err, errlen, "group member node %d is not a live worker", members[i]);
      return -1;
    }
  uint64_t group = ++H.group_seq;
  sf__wbuf peers = {0};
  for (int i = 0; i < n; i++) {
    node *nd = &H.nodes[members[i] - 1];
    sf__wire_put_peer(&peers, nd->data_addr, nd->data_port);
    nd->group_done = false;
  }
  for (int i = 0; i < n; i++) {
    sf__frame f = {.type = SF__F_GROUP_SETUP};
    f.u.group_setup.group = group;
    f.u.group_setup.rank = (uint32_t)i;
    f.u.group_setup.size = (uint32_t)n;
    f.u.group_setup.count = count;
    f.u.group_setup.dtype = (uint32_t)t;
    f.u.group_setup.iters = (uint32_t)(iters < 1 ? 1 : iters);
    f.u.group_setup.peers = (sf__bytes){peers.p, (uint32_t)peers.n};
    sf__head_send_frame(&H.nodes[members[i] - 1], &f);
  }
  sf__wbuf_free(&peers);
  sf__head_wake();
  for (;;) {
    int done = 0, dead = 0;
    for (int i = 0; i < n; i++) {
      node *nd = &H.nodes[members[i] - 1];
      done += nd->group_done;
      dead += !nd->alive && !nd->group_done;
    }
    if (done == n || dead)
      break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&H.cv, &H.mu, &ts);
  }
  res->ok = true;
  uint64_t worst = 0;
  for (int i = 0; i < n; i++) {
    node *nd = &H.nodes[members[i] - 1];
    if (!nd->group_done || !nd->group_ok) {
      if (res->ok)
        snprintf(res->message, sizeof res->message, "node %d: %.200s", members[i],
                 nd->group_done ? nd->group_msg : "lost during the collective");
      res->ok = false;
    }
    if (nd->group_ns > worst)
      worst = nd->group_ns;
  }
  pthread_mutex_unlock(&H.mu);
  int timed = iters > 1 ? iters - 1 : 1;
  res->seconds = (double)worst / 1e9 / timed;
  return 0;
}

/* -------------------------------------------------------------- selftest */

static int parse_dtype(const char *s, sf__dtype *t) {
  static const char *const names[] = {"f32", "f64", "i32", "i64"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) {
      *t = (sf__dtype)i;
      return 0;
    }
  return -1;
}

static int selftest_allreduce(const char *spec) {
  char counts[512], type[16] = "f32";
  int iters = 3;
  if (sscanf(spec, "allreduce:%511[^:]:%15[^:]:%d", counts, type, &iters) < 1) {
    sf__cluster_note("sflow: bad selftest '%s'", spec);
    return SF__EXIT_USAGE;
  }
  sf__dtype t;
  if (parse_dtype(type, &t)) {
    sf__cluster_note("sflow: bad selftest type '%s'", type);
    return SF__EXIT_USAGE;
  }
  int members[SF__GROUP_MAX], n = H.n < SF__GROUP_MAX ? H.n : SF__GROUP_MAX;
  for (int i = 0; i < n; i++)
    members[i] = i + 1;
  int rc = 0;
  for (char *tok = strtok(counts, ","); tok; tok = strtok(NULL, ",")) {
    uint64_t count = strtoull(tok, NULL, 10);
    sf__group_result res;
    char err[256];
    if (sf__cluster_group_bench(members, n, count, t, iters, &res, err, sizeof err)) {
      sf__cluster_note("sflow: allreduce: %s", err);
      return SF__EXIT_NODES;
    }
    double bytes = (double)count * (double)sf__dtype_size(t);
    double algbw = res.seconds > 0 ? bytes / res.seconds / 1e6 : 0;
    printf("allreduce nodes=%d type=%s count=%llu bytes=%.0f %s time_us=%.1f algbw_MBps=%.1f "
           "busbw_MBps=%.1f%s%s\n",
           n, type, (unsigned long long)count, bytes, res.ok ? "exact" : "FAILED",
           res.seconds * 1e6, algbw, algbw * 2.0 * (n - 1) / n, res.ok ? "" : " ",
           res.ok ? "" : res.message);
    fflush(stdout);
    if (!res.ok)
      rc = SF__EXIT_NODES;
  }
  return rc;
}

/* The nodes, their workers' pids, and the head's torchrun variables as
 * getenv sees them: a test reads a worker's in /proc/PID/environ, but the
 * head sets its own with setenv, which /proc does not show. */
static void print_ready(void) {
  printf("%d %s ready\n", H.n, sf__plural(H.n, "node", "nodes"));
  for (int i = 0; i < H.n; i++)
    printf("node %d %s pid %u\n", i + 1, H.nodes[i].label, H.nodes[i].pid);
  static const char *const names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT"};
  printf("head env");
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    printf(" %s=%s", names[i], getenv(names[i]) ? getenv(names[i]) : "(unset)");
  printf("\n");
  /* What a program started from here inherits to tell it is not a rank
   * (net/launcher.c); tests/launch starts one with it. */
  const char *mark = getenv("SFLOW_LAUNCH_MARK");
  printf("head mark SFLOW_LAUNCH_MARK=%s\n", mark ? mark : "(unset)");
  fflush(stdout);
}

int sf__cluster_selftest(const char *spec) {
  if (!H.started) {
    sf__cluster_note("sflow: --sflow-selftest needs --nodes or a launcher");
    return SF__EXIT_USAGE;
  }
  if (!strcmp(spec, "ready")) {
    print_ready();
    return 0;
  }
  double secs;
  if (sscanf(spec, "hold:%lf", &secs) == 1) {
    print_ready();
    int64_t end = sf__now_ms() + (int64_t)(secs * 1000);
    pthread_mutex_lock(&H.mu);
    while (sf__now_ms() < end && H.lost_count == 0) {
      sf__cond_wait_ns(&H.cv, &H.mu, 100000000);
    }
    int lost = H.lost_count;
    pthread_mutex_unlock(&H.mu);
    return lost ? SF__EXIT_NODES : 0;
  }
  if (!strncmp(spec, "allreduce:", 10))
    return selftest_allreduce(spec);
  sf__cluster_note("sflow: unknown selftest '%s' (ready, hold:S, allreduce:COUNTS:TYPE:ITERS)",
                   spec);
  return SF__EXIT_USAGE;
}

