/*
 * sample.c — the runtime's state as metrics: the scheduler's counters,
 * the process's memory and CPU time, the nodes of a --nodes run, the GPU
 * caching allocator; and the same figures as --trace counter tracks.
 *
 * Key design choice: the scheduler already keeps run-wide totals for the
 * progress line (progress.c's per-thread counters, sf__stats), so the
 * sampler only copies them, a few times a second; nothing is counted
 * twice on a task's path.  Counters are set to the scheduler's totals
 * (sf__metric_set on a counter family), which only rise.
 */
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "obs.h"

typedef struct fam {
  const char *name;
  int kind;
  const char *help;
} fam;

static const fam families[] = {
    {"sflow_build_info", SF__M_GAUGE, "sflow's version and runtime ABI (value 1)."},
    {"sflow_uptime_seconds", SF__M_GAUGE, "Seconds since the run started."},
    {"sflow_tasks_submitted_total", SF__M_COUNTER, "Task calls submitted."},
    {"sflow_tasks_running", SF__M_GAUGE, "Task attempts running now."},
    {"sflow_tasks_done_total", SF__M_COUNTER, "Task calls finished with a value."},
    {"sflow_tasks_failed_total", SF__M_COUNTER, "Task calls failed after their last attempt."},
    {"sflow_task_retries_total", SF__M_COUNTER, "Task attempts retried (@retry)."},
    {"sflow_tasks_queued", SF__M_GAUGE, "Task calls submitted and not yet started."},
    {"sflow_actors", SF__M_GAUGE, "Actors spawned."},
    {"sflow_actor_calls_total", SF__M_COUNTER, "Actor method calls made."},
    {"sflow_actor_calls_done_total", SF__M_COUNTER, "Actor method calls finished."},
    {"sflow_actor_calls_queued", SF__M_GAUGE, "Actor method calls made and not yet finished."},
    {"sflow_threads_waiting", SF__M_GAUGE, "Pool threads blocked in await."},
    {"sflow_pool_threads", SF__M_GAUGE, "Worker threads of the pool."},
    {"sflow_objects_fetched_total", SF__M_COUNTER, "Large results fetched from other nodes."},
    {"sflow_object_bytes_total", SF__M_COUNTER, "Bytes of those results."},
    {"sflow_checkpoints_total", SF__M_COUNTER, "Actor checkpoints written."},
    {"sflow_process_resident_memory_bytes", SF__M_GAUGE, "Resident memory of the process."},
    {"sflow_process_cpu_seconds_total", SF__M_COUNTER, "User and system CPU seconds."},
    {"sflow_node_up", SF__M_GAUGE, "1 while a node of the run is alive, by node and host."},
    {"sflow_node_heartbeat_rtt_seconds", SF__M_GAUGE,
     "Round trip of the best heartbeat to a worker (clock estimate)."},
    {"sflow_node_heartbeat_gap_seconds", SF__M_GAUGE,
     "Seconds since a worker last sent a byte (it is lost after 3)."},
    {"sflow_node_heartbeat_gap_max_seconds", SF__M_GAUGE,
     "The longest such silence of a worker so far."},
    {"sflow_collective_calls_total", SF__M_COUNTER, "Collective calls, by operation."},
    {"sflow_collective_bytes_total", SF__M_COUNTER, "Bytes a member brought to collectives."},
    {"sflow_collective_seconds_total", SF__M_COUNTER, "Seconds in collective calls."},
    {"sflow_gpu_alloc_in_use_bytes", SF__M_GAUGE, "Bytes of the caching allocator in use."},
    {"sflow_gpu_alloc_cached_bytes", SF__M_GAUGE, "Bytes the caching allocator holds free."},
    {"sflow_gpu_alloc_peak_bytes", SF__M_GAUGE, "Most bytes the caching allocator had in use."},
    {"sflow_gpu_utilization_ratio", SF__M_GAUGE, "GPU busy share of the last sample period (NVML)."},
    {"sflow_gpu_memory_used_bytes", SF__M_GAUGE, "Device memory used (NVML)."},
    {"sflow_gpu_memory_total_bytes", SF__M_GAUGE, "Device memory in all (NVML)."},
    {"sflow_gpu_power_watts", SF__M_GAUGE, "Board power draw (NVML)."},
    {"sflow_gpu_temperature_celsius", SF__M_GAUGE, "GPU temperature (NVML)."},
};

static double start_s;

static double mono_s(void) { return (double)sf__mono_ns() * 1e-9; }

void sf__obs_declare(void) {
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
    sf__metric_declare(families[i].name, families[i].kind, families[i].help);
  start_s = mono_s();
}

/* Resident bytes from /proc/self/statm (getrusage has only the peak). */
static double rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

static double cpu_seconds(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u))
    return 0;
  return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
         (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static void nodes(void) {
  int n = sf__cluster_nodes();
  for (int k = 0; k < n; k++) {
    sf__node_info ni;
    if (!sf__cluster_node(k, &ni))
      continue;
    char l[200];
    snprintf(l, sizeof l, "node=\"%d\",host=\"%.120s\"", k, ni.host ? ni.host : "");
    for (char *p = l + 12; *p; p++) /* a host name with a quote would end the label */
      if (*p == '\\' || *p == '\n')
        *p = '_';
    sf__metric_set("sflow_node_up", l, k == 0 || ni.alive ? 1 : 0);
    int64_t off;
    uint64_t rtt;
    snprintf(l, sizeof l, "node=\"%d\"", k);
    if (k > 0 && sf__cluster_clock(k, &off, &rtt))
      sf__metric_set("sflow_node_heartbeat_rtt_seconds", l, (double)rtt * 1e-9);
    double gap, gap_max;
    if (k > 0 && sf__cluster_silence(k, &gap, &gap_max)) {
      sf__metric_set("sflow_node_heartbeat_gap_seconds", l, gap);
      sf__metric_set("sflow_node_heartbeat_gap_max_seconds", l, gap_max);
    }
  }
}

void sf__obs_sample(void) {
  sf__counters c;
  sf__counters_sum(&c);
  double rss = rss_bytes();
  int64_t failed = atomic_load(&sf__stats.tasks_failed);
  int64_t queued = c.tasks - c.tasks_done - failed - (c.started - c.finished);
  if (queued < 0)
    queued = 0;
  if (sf__trace_on) {
    sf__trace_counter("tasks queued", (double)queued);
    sf__trace_counter("actor calls queued", (double)(c.calls - c.calls_done));
    sf__trace_counter("RSS bytes", rss);
  }
  if (sf__gpu_devices() > 0) {
    sf__dalloc_stats g = sf__dev_stats();
    sf__metric_set("sflow_gpu_alloc_in_use_bytes", "", (double)g.in_use);
    sf__metric_set("sflow_gpu_alloc_cached_bytes", "", (double)g.cached);
    sf__metric_set("sflow_gpu_alloc_peak_bytes", "", (double)g.peak);
    sf__trace_counter("device memory in use bytes", (double)g.in_use);
    sf__nvml_sample();
  }
  if (!sf__metrics_on)
    return;
  char l[96];
  snprintf(l, sizeof l, "version=\"%s\",abi=\"%d\"", SF__VERSION, SF_ABI_VERSION);
  sf__metric_set("sflow_build_info", l, 1);
  sf__metric_set("sflow_uptime_seconds", "", mono_s() - start_s);
  sf__metric_set("sflow_tasks_submitted_total", "", (double)c.tasks);
  sf__metric_set("sflow_tasks_running", "", (double)(c.started - c.finished));
  sf__metric_set("sflow_tasks_done_total", "", (double)c.tasks_done);
  sf__metric_set("sflow_tasks_failed_total", "", (double)failed);
  sf__metric_set("sflow_task_retries_total", "", (double)atomic_load(&sf__stats.retries));
  sf__metric_set("sflow_tasks_queued", "", (double)queued);
  sf__metric_set("sflow_actors", "", (double)atomic_load(&sf__stats.actors));
  sf__metric_set("sflow_actor_calls_total", "", (double)c.calls);
  sf__metric_set("sflow_actor_calls_done_total", "", (double)c.calls_done);
  sf__metric_set("sflow_actor_calls_queued", "", (double)(c.calls - c.calls_done));
  sf__metric_set("sflow_threads_waiting", "", (double)atomic_load(&sf__stats.waiting));
  sf__metric_set("sflow_pool_threads", "", (double)sf__pool_size());
  sf__metric_set("sflow_objects_fetched_total", "",
                 (double)atomic_load(&sf__stats.objects_fetched));
  sf__metric_set("sflow_object_bytes_total", "", (double)atomic_load(&sf__stats.object_bytes));
  sf__metric_set("sflow_checkpoints_total", "", (double)atomic_load(&sf__stats.checkpoints));
  /* A worker's figures get their node="K" on the head. */
  bool worker = sf__options.worker || sf__launched.rank > 0; /* --nodes or launched */
  const char *self = worker ? "" : "node=\"0\"";
  sf__metric_set("sflow_process_resident_memory_bytes", self, rss);
  sf__metric_set("sflow_process_cpu_seconds_total", self, cpu_seconds());
  if (!worker)
    nodes();
}
