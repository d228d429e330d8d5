/*
 * main.c — the `main` of every compiled workflow.
 *
 * Generated code defines only sf_program_desc; the linker takes this file's
 * main from libsflowrt.a because the C start-up code asks for `main`.  Key
 * design choice: this file holds main and nothing else, so a unit test that
 * defines its own main links the rest of the runtime without pulling this
 * member out of the archive (the flag parser it drives lives in flags.c).
 *
 * Exit codes: 0 success (also --help, --version), 2 usage error (bad flags),
 * 70 runtime error (error.c), 69 a --nodes run that could not start or lost
 * a node (launch.c), or a machine whose CPU lacks a feature the file was
 * compiled for (hostcheck.c), 101 internal error (a binary built against a
 * different runtime ABI).
 *
 * The same executable is the head or, started by the head over SSH with the
 * hidden --sflow-worker flag, a worker (worker_main.c); the head runs
 * `workflow main` after all workers are ready (its task calls are placed
 * across the nodes by dispatch.c), and stops them when it returns.
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "nn.h"
#include "obs.h"

#define EXIT_INTERNAL 101

/* Also runs when a runtime error ends the run with exit(70): the trace and
 * the journal are written either way. */
static void at_exit(void) {
  sf__journal_end(false); /* no-op after a successful end */
  sf__obs_stop();          /* its last sample goes into the trace */
  sf__run_end();
  sf__trace_write();
}

int main(int argc, char **argv) {
  /* Arrays of 8 MiB and more are mapped, and unmapped when freed, always.
   * glibc's default threshold rises after the first such free, and then
   * each thread's arena keeps the freed blocks: 16 pool threads that each
   * once held a 16 MiB shard kept 256 MiB resident, where the program
   * never had more than 32 MiB live (tests/run/data/map_backpressure). */
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
  /* Each layer's hooks in the layers below it, before any thread: the
   * lower layers never call up (docs/architecture.md, "Hooks"). */
  sf__sched_install();
  sf__durable_install();
  sf__gpu_install();
  sf__blas_env();
  sf__cluster_install();
  sf__nn_install();
  const sf_program *prog = &sf_program_desc;
  const char *name = prog->name && *prog->name ? prog->name : "program";
  if (prog->abi_version != SF_ABI_VERSION) {
    fprintf(stderr, "%s: internal error: compiled for runtime ABI %d, linked with ABI %d\n",
            name, (int)prog->abi_version, SF_ABI_VERSION);
    return EXIT_INTERNAL;
  }
  sf__nfns = prog->nfns;
  sf__fn_names = prog->fn_names;
  sf__fn_tasks = prog->fn_tasks;
  sf__fns = prog->fns;
  sf__source_dir = prog->source_dir;
  sf_value *args = sf__alloc_n((size_t)prog->nparams + 1, sizeof *args);
  char err[4096];
  int r = sf__parse_flags(prog, argc, argv, args, err, sizeof err);
  if (r != SF__FLAGS_OK) {
    sf_free(args);
    if (r == SF__FLAGS_HELP)
      sf__usage(prog, stdout);
    else if (r == SF__FLAGS_VERSION)
      sf__version(prog, stdout);
    else
      fprintf(stderr, "%s: error: %s\nRun '%s --help' to see the flags.\n", name, err,
              argc > 0 && argv[0] ? argv[0] : name);
    return r == SF__FLAGS_ERROR ? SF__EXIT_USAGE : 0;
  }
  /* A worker's host was checked by the head before it was deployed. */
  if (!sf__options.worker && sf__host_check_self(err, sizeof err)) {
    fprintf(stderr, "%s: error: %s\n", name, err);
    sf__flags_release(prog, args);
    sf_free(args);
    return SF__EXIT_NODES;
  }
  /* Started by a launcher (srun, mpirun, torchrun): rank 0 is the head of
   * the run, the other ranks its workers (docs/cluster.md, "Started by a
   * launcher").  The secret is read here, before anything listens. */
  if (!sf__options.worker && sf__launch_setup(err, sizeof err)) {
    fprintf(stderr, "%s: error: %s\n", name, err);
    sf__flags_release(prog, args);
    sf_free(args);
    return SF__EXIT_NODES;
  }
  sf__launch_mark(); /* a program a task of ours starts is not a rank */
  if (sf__launched.kind != SF__LAUNCH_NONE && sf__launched.rank > 0) {
    sf__flags_release(prog, args); /* the workflow's arguments come from rank 0 */
    sf_free(args);
    /* The flags a --nodes head would give its worker (launch.c,
     * worker_args): every rank has the same command line, but the trace,
     * the metrics ports, the journal's --resume and the progress line
     * are rank 0's; a worker ships its events and figures there. */
    sf__options.worker_trace = sf__options.trace != NULL;
    sf__options.worker_metrics = sf__options.metrics_port || sf__options.dashboard_port;
    sf__options.trace = NULL;
    sf__options.metrics_port = sf__options.dashboard_port = 0;
    sf__options.resume = false;
    sf__options.progress = SF__PROGRESS_NEVER;
    if (!sf__obs_start(err, sizeof err))
      fprintf(stderr, "%s: notice: %s\n", name, err);
    int rc = sf__worker_launched();
    sf__obs_stop();
    fflush(stdout);
    return rc;
  }
  if (sf__options.worker) {
    sf__flags_release(prog, args);
    sf_free(args);
    if (!sf__obs_start(err, sizeof err)) /* its figures for the head's --metrics-port */
      fprintf(stderr, "%s: notice: %s\n", name, err);
    int rc = sf__worker_main(sf__options.worker);
    sf__obs_stop();
    return rc;
  }
  /* The trace path first: a bad one is a usage error found before any
   * node is started over SSH, not after. */
  if (sf__options.trace && !sf__trace_open(err, sizeof err)) {
    fprintf(stderr, "%s: error: %s\n", name, err);
    sf__flags_release(prog, args);
    sf_free(args);
    return SF__EXIT_USAGE;
  }
  /* The metrics ports too: one in use is found before any node starts. */
  if (!sf__obs_start(err, sizeof err)) {
    fprintf(stderr, "%s: error: %s\n", name, err);
    sf__trace_discard();
    sf__flags_release(prog, args);
    sf_free(args);
    return SF__EXIT_USAGE;
  }
  if (sf__cluster_start(err, sizeof err)) {
    fprintf(stderr, "%s: error: %s\n", name, err);
    sf__trace_discard();
    sf__flags_release(prog, args);
    sf_free(args);
    return SF__EXIT_NODES;
  }
  if (sf__options.selftest) {
    int rc = sf__cluster_selftest(sf__options.selftest);
    sf__cluster_stop();
    sf__trace_discard();
    sf__flags_release(prog, args);
    sf_free(args);
    fflush(stdout);
    return rc;
  }
  sf__run_begin(prog);
  sf__journal_begin(prog, args);
  atexit(at_exit);
  prog->main_fn(args);
  sf__gpu_kcheck_exit(); /* main's own kernel launches that nothing waited for */
  sf__journal_end(true);
  sf__cluster_stop();
  sf__flags_release(prog, args);
  sf_free(args);
  fflush(stdout);
  return 0;
}
