/*
 * test_rt_flags.c — command-line flags of a compiled workflow: values,
 * defaults, the runtime's own flags, every error message, "did you mean",
 * --help, and the exit codes of the real main (run in a child process).
 */
#include <sys/wait.h>

/* The runtime's main, renamed so this file can have its own. */
#define main sf__runtime_main
#include "main.c"
#undef main

#include "rt_test.h"

static sf_str path_default = {{-1, SF_OBJ_STR, 0}, 15, "data/digits.csv"};

static const sf_param params[] = {
    {"workers", SF_I64, 1, {.i64 = 2}, "2", "replicas that train at once"},
    {"path", SF_STR, 1, {.s = &path_default}, "\"data/digits.csv\"", NULL},
    {"lr", SF_F64, 1, {.f64 = 0.1}, "0.1", NULL},
    {"scale", SF_F32, 1, {.f32 = 1.5f}, NULL, NULL},
    {"verbose", SF_BOOL, 1, {.b = false}, "false", NULL},
    {"steps", SF_I32, 1, {.i32 = 10}, "10", NULL},
    {"name", SF_STR, 0, {0}, NULL, "the run's name, shown in every line of its log; a long description "
                                   "wraps at the words to keep the lines of --help short"},
    {"eval_samples", SF_I64, 1, {.i64 = 8}, "8", ""},
};

enum { WORKERS, PATH, LR, SCALE, VERBOSE, STEPS, NAME, EVAL_SAMPLES, NPARAMS };

static int main_calls;
static void workflow_main(sf_value *args) {
  main_calls++;
  sf_print_begin();
  sf_print_i64(args[WORKERS].i64);
  sf_print_str(args[NAME].s);
  sf_print_end();
}

const sf_program sf_program_desc = {SF_ABI_VERSION, "train", "train.sflow", NPARAMS, params,
                                    workflow_main, NULL, NULL, 0, NULL, NULL, NULL, ""};

static sf_value args[NPARAMS];
static char err[512];

/* Parses a NULL-terminated argument list (argv[0] is added). */
static int parse_v(const char *const *a) {
  char *argv[32] = {"train"};
  int argc = 1;
  while (*a && argc < 31)
    argv[argc++] = (char *)*a++;
  return sf__parse_flags(&sf_program_desc, argc, argv, args, err, sizeof err);
}
#define PARSE(...) parse_v((const char *const[]){__VA_ARGS__, NULL})

/* A parse that must fail with exactly want. */
#define EXPECT_FLAG_ERROR(want, ...)                      \
  do {                                                    \
    CHECK_INT(PARSE(__VA_ARGS__), SF__FLAGS_ERROR);       \
    CHECK_STR(err, (want));                               \
  } while (0)

static void test_defaults(void) {
  CHECK_INT(PARSE("--name", "x"), SF__FLAGS_OK);
  CHECK_INT(args[WORKERS].i64, 2);
  CHECK_STR(sf__str_data(args[PATH].s), "data/digits.csv");
  CU_ASSERT(args[LR].f64 == 0.1);
  CU_ASSERT(args[SCALE].f32 == 1.5f);
  CU_ASSERT(args[VERBOSE].b == false);
  CHECK_INT(args[STEPS].i32, 10);
  CHECK_STR(sf__str_data(args[NAME].s), "x");
  CU_ASSERT(sf__options.nodes == NULL && !sf__options.resume && sf__options.threads == 0);
  sf__flags_release(&sf_program_desc, args);
}

static void test_forms(void) {
  CHECK_INT(PARSE("--workers", "4", "--path=a.csv", "--lr=3", "--scale", "-0.25", "--verbose",
                  "--steps=0x10", "--name=", "--workers=1_000"),
            SF__FLAGS_OK);
  CHECK_INT(args[WORKERS].i64, 1000); /* the last one wins */
  CHECK_STR(sf__str_data(args[PATH].s), "a.csv");
  CU_ASSERT(args[LR].f64 == 3.0); /* an integer is accepted for f64 */
  CU_ASSERT(args[SCALE].f32 == -0.25f);
  CU_ASSERT(args[VERBOSE].b == true);
  CHECK_INT(args[STEPS].i32, 16);
  CHECK_STR(sf__str_data(args[NAME].s), "");
  sf__flags_release(&sf_program_desc, args);

  CHECK_INT(PARSE("--name", "n", "--verbose=false", "--"), SF__FLAGS_OK);
  CU_ASSERT(args[VERBOSE].b == false);
  sf__flags_release(&sf_program_desc, args);

  /* A value may start with one dash: a negative number. */
  CHECK_INT(PARSE("--name", "-x", "--workers", "-3"), SF__FLAGS_OK);
  CHECK_INT(args[WORKERS].i64, -3);
  CHECK_STR(sf__str_data(args[NAME].s), "-x");
  sf__flags_release(&sf_program_desc, args);
}

static void test_runtime_flags(void) {
  CHECK_INT(PARSE("--name", "n", "--nodes", "hosts.txt", "--resume", "--trace=t.json",
                  "--checkpoint-dir", "ck", "--progress=never", "--quiet", "--require-gpu",
                  "--threads", "8"),
            SF__FLAGS_OK);
  CHECK_STR(sf__options.nodes, "hosts.txt");
  CHECK_STR(sf__options.trace, "t.json");
  CHECK_STR(sf__options.checkpoint_dir, "ck");
  CU_ASSERT(sf__options.resume && sf__options.quiet && sf__options.require_gpu);
  CHECK_INT(sf__options.progress, SF__PROGRESS_NEVER);
  CHECK_INT(sf__options.threads, 8);
  sf__flags_release(&sf_program_desc, args);
  CHECK_INT(PARSE("--name", "n", "--progress", "always", "--quiet=false"), SF__FLAGS_OK);
  CHECK_INT(sf__options.progress, SF__PROGRESS_ALWAYS);
  CU_ASSERT(!sf__options.quiet && sf__options.nodes == NULL); /* reset per parse */
  sf__flags_release(&sf_program_desc, args);
}

static void test_cluster_flags(void) {
  CHECK_INT(PARSE("--name", "x"), SF__FLAGS_OK);
  CU_ASSERT(sf__options.head_runs_work && sf__options.connect_timeout == 10);
  CU_ASSERT(!sf__options.accept_new_host_keys && !sf__options.cluster_log);
  sf__flags_release(&sf_program_desc, args);
  CHECK_INT(PARSE("--name", "x", "--nodes", "h.txt", "--ssh-user", "bob", "--ssh-key", "k",
                  "--known-hosts", "kh", "--accept-new-host-keys", "--connect-timeout", "3",
                  "--head-runs-work=false", "--remote-cache", "/tmp/c", "--cluster-log",
                  "--ssh-config", "cfg"),
            SF__FLAGS_OK);
  CHECK_STR(sf__options.ssh_config, "cfg");
  CHECK_STR(sf__options.ssh_user, "bob");
  CHECK_STR(sf__options.ssh_key, "k");
  CHECK_STR(sf__options.known_hosts, "kh");
  CHECK_STR(sf__options.remote_cache, "/tmp/c");
  CU_ASSERT(sf__options.accept_new_host_keys && sf__options.cluster_log);
  CU_ASSERT(!sf__options.head_runs_work);
  CHECK_INT(sf__options.connect_timeout, 3);
  sf__flags_release(&sf_program_desc, args);
  EXPECT_FLAG_ERROR("invalid value '0' for --connect-timeout: expected seconds from 1 to 3600",
                    "--name", "x", "--connect-timeout", "0");
  EXPECT_FLAG_ERROR("invalid value 'a'b' for --remote-cache: expected a folder name without "
                    "quotes, backslashes or newlines",
                    "--name", "x", "--remote-cache", "a'b");
  EXPECT_FLAG_ERROR("invalid value 'maybe' for --head-runs-work: expected bool (true or false)",
                    "--name", "x", "--head-runs-work=maybe");
  /* A worker gets its arguments from the head: no required flags. */
  CHECK_INT(PARSE("--sflow-worker", "1@127.0.0.1:9"), SF__FLAGS_OK);
  CHECK_STR(sf__options.worker, "1@127.0.0.1:9");
  sf__flags_release(&sf_program_desc, args);
  /* Hidden flags are never suggested. */
  EXPECT_FLAG_ERROR("unknown flag '--sflow-workr'", "--name", "x", "--sflow-workr", "1");
  EXPECT_FLAG_ERROR("unknown flag '--ssh-usr' (did you mean '--ssh-user'?)", "--name", "x",
                    "--ssh-usr", "u");
}

/* Every row of flagnames.h's table, read the way flags.c reads it, so a
 * row added later is tested here too: its default, and values at and past
 * its bounds, by kind. */
typedef struct {
  const char *name, *kind, *arg;
  size_t off;
  long long def, lo, hi;
} flag_row;
#define ROW(x, id, name, kind, field, def, lo, hi, valid, what, arg, help) \
  {name, #kind, arg, offsetof(sf__options_t, field), (long long)(intptr_t)(def), lo, hi},
static const flag_row flag_rows[] = {SF__RUNTIME_FLAG_ROWS(ROW, _)};
#undef ROW

static long long field_value(const flag_row *r) {
  const char *at = (const char *)&sf__options + r->off;
  if (!strcmp(r->kind, "BOOL")) return *(const bool *)at;
  if (!strcmp(r->kind, "INT")) return *(const int64_t *)at;
  if (!strcmp(r->kind, "ENUM")) return *(const int32_t *)at;
  return (long long)(intptr_t)*(const char *const *)at;
}

/* --NAME=VALUE alone (with the required --name). */
static int parse_one(const flag_row *r, const char *value) {
  static char arg[128];
  snprintf(arg, sizeof arg, "--%s=%s", r->name, value);
  return PARSE("--name", "x", arg);
}

static void test_every_row(void) {
  char v[64];
  CU_ASSERT(sizeof flag_rows / sizeof flag_rows[0] >= 20);
  for (size_t i = 0; i < sizeof flag_rows / sizeof flag_rows[0]; i++) {
    const flag_row *r = &flag_rows[i];
    CHECK_INT(PARSE("--name", "x"), SF__FLAGS_OK);
    CHECK_INT(field_value(r), r->def);
    if (!strcmp(r->kind, "BOOL")) {
      CHECK_INT(PARSE("--name", "x", (snprintf(v, sizeof v, "--%s", r->name), v)), SF__FLAGS_OK);
      CHECK_INT(field_value(r), 1);
      CHECK_INT(parse_one(r, "false"), SF__FLAGS_OK);
      CHECK_INT(field_value(r), 0);
      CHECK_INT(parse_one(r, "maybe"), SF__FLAGS_ERROR);
    } else if (!strcmp(r->kind, "INT")) {
      snprintf(v, sizeof v, "%lld", r->lo);
      CHECK_INT(parse_one(r, v), SF__FLAGS_OK);
      CHECK_INT(field_value(r), r->lo);
      snprintf(v, sizeof v, "%lld", r->hi);
      CHECK_INT(parse_one(r, v), SF__FLAGS_OK);
      CHECK_INT(field_value(r), r->hi);
      char want[128];
      snprintf(want, sizeof want, "from %lld to %lld", r->lo, r->hi);
      snprintf(v, sizeof v, "%lld", r->lo - 1);
      CHECK_INT(parse_one(r, v), SF__FLAGS_ERROR);
      CU_ASSERT(strstr(err, want) != NULL);
      snprintf(v, sizeof v, "%lld", r->hi + 1);
      CHECK_INT(parse_one(r, v), SF__FLAGS_ERROR);
      CU_ASSERT(strstr(err, want) != NULL);
    } else if (!strcmp(r->kind, "ENUM")) {
      int k = 0;
      for (const char *p = r->arg; *p; k++) {
        size_t n = strcspn(p, "|");
        snprintf(v, sizeof v, "%.*s", (int)n, p);
        CHECK_INT(parse_one(r, v), SF__FLAGS_OK);
        CHECK_INT(field_value(r), k);
        p += n + (p[n] == '|');
      }
      CHECK_INT(parse_one(r, "none-of-them"), SF__FLAGS_ERROR);
    } else {
      CHECK_INT(parse_one(r, "some/value"), SF__FLAGS_OK);
      CHECK_STR((const char *)(intptr_t)field_value(r), "some/value");
    }
    /* An empty value is no value: "expected bool", or "expected ARG". */
    CHECK_INT(parse_one(r, ""), SF__FLAGS_ERROR);
  }
}

static void test_value_errors(void) {
  EXPECT_FLAG_ERROR("invalid value 'abc' for --workers: expected i64", "--name", "n", "--workers",
                    "abc");
  EXPECT_FLAG_ERROR("invalid value '2.5' for --workers: expected i64", "--name", "n",
                    "--workers=2.5");
  EXPECT_FLAG_ERROR("invalid value ' 4' for --workers: expected i64", "--name", "n",
                    "--workers= 4");
  EXPECT_FLAG_ERROR("invalid value '3000000000' for --steps: out of range for i32", "--name", "n",
                    "--steps", "3000000000");
  EXPECT_FLAG_ERROR("invalid value '99999999999999999999' for --workers: out of range for i64",
                    "--name", "n", "--workers=99999999999999999999");
  EXPECT_FLAG_ERROR("invalid value 'fast' for --lr: expected f64", "--name", "n", "--lr", "fast");
  EXPECT_FLAG_ERROR("invalid value 'yes' for --verbose: expected bool", "--name", "n",
                    "--verbose=yes");
  EXPECT_FLAG_ERROR("invalid value 'x' for --progress: expected auto, always or never", "--name",
                    "n", "--progress=x");
  EXPECT_FLAG_ERROR("invalid value '0' for --threads: expected a number of threads from 1 to 1024",
                    "--name", "n", "--threads", "0");
  EXPECT_FLAG_ERROR("invalid value '1025' for --threads: expected a number of threads from 1 to "
                    "1024", "--name", "n", "--threads", "1025");
  EXPECT_FLAG_ERROR("invalid value '' for --trace: expected FILE", "--name", "n", "--trace=");
  EXPECT_FLAG_ERROR("invalid value '' for --workers: expected i64", "--name", "n", "--workers=");
}

static void test_missing(void) {
  EXPECT_FLAG_ERROR("missing value for --workers", "--name", "n", "--workers");
  EXPECT_FLAG_ERROR("missing value for --workers", "--workers", "--name", "n");
  EXPECT_FLAG_ERROR("missing value for --nodes", "--name", "n", "--nodes");
  EXPECT_FLAG_ERROR("missing required flag --name", "--workers", "3");
  /* Strings set before an error are released (valgrind checks this). */
  EXPECT_FLAG_ERROR("missing required flag --name", "--path", "p");
}

static void test_unknown(void) {
  EXPECT_FLAG_ERROR("unknown flag '--wrkers' (did you mean '--workers'?)", "--wrkers", "3");
  EXPECT_FLAG_ERROR("unknown flag '--wokrers=3' (did you mean '--workers'?)", "--wokrers=3");
  EXPECT_FLAG_ERROR("unknown flag '--thread' (did you mean '--threads'?)", "--thread", "2");
  EXPECT_FLAG_ERROR("unknown flag '--hlep' (did you mean '--help'?)", "--hlep");
  EXPECT_FLAG_ERROR("unknown flag '--banana'", "--banana");
  /* (len+2)/3: two edits are too many for a three-letter name. */
  EXPECT_FLAG_ERROR("unknown flag '--lrr' (did you mean '--lr'?)", "--lrr", "1");
  EXPECT_FLAG_ERROR("unknown flag '--xyz'", "--xyz", "1");
  EXPECT_FLAG_ERROR("unknown flag '-workers' (did you mean '--workers'?)", "-workers", "3");
  EXPECT_FLAG_ERROR("unknown flag '-x'", "-x");
  EXPECT_FLAG_ERROR("unknown flag '--=3'", "--=3");
}

static void test_positional(void) {
  EXPECT_FLAG_ERROR("unexpected argument 'data.csv' (a workflow takes only --flags)", "data.csv");
  EXPECT_FLAG_ERROR("unexpected argument 'false' (write --verbose=false)", "--name", "n",
                    "--verbose", "false");
  EXPECT_FLAG_ERROR("unexpected argument 'x' (a workflow takes only --flags)", "--name", "n", "--",
                    "x");
  EXPECT_FLAG_ERROR("unexpected argument '-' (a workflow takes only --flags)", "-");
}

/* A parameter with '_' in its name is written with '-' in messages and
 * suggestions, as --help shows it, and either spelling is accepted. */
static void test_dashed_names(void) {
  CHECK_INT(PARSE("--name", "n", "--eval_samples", "3"), SF__FLAGS_OK);
  CHECK_INT(args[EVAL_SAMPLES].i64, 3);
  sf__flags_release(&sf_program_desc, args);
  CHECK_INT(PARSE("--name", "n", "--eval-samples=4"), SF__FLAGS_OK);
  CHECK_INT(args[EVAL_SAMPLES].i64, 4);
  sf__flags_release(&sf_program_desc, args);
  EXPECT_FLAG_ERROR("invalid value 'x' for --eval-samples: expected i64", "--name", "n",
                    "--eval_samples", "x");
  EXPECT_FLAG_ERROR("missing value for --eval_samples", "--name", "n", "--eval_samples");
  EXPECT_FLAG_ERROR("unknown flag '--eval-sampels' (did you mean '--eval-samples'?)",
                    "--eval-sampels", "3");
  EXPECT_FLAG_ERROR("unknown flag '--eval_sampels' (did you mean '--eval-samples'?)",
                    "--eval_sampels", "3");
  EXPECT_FLAG_ERROR("unknown flag '--checkpoint_dirs' (did you mean '--checkpoint-dir'?)",
                    "--checkpoint_dirs", "d");
}

static void test_help_version(void) {
  CHECK_INT(PARSE("--help"), SF__FLAGS_HELP);
  CHECK_INT(PARSE("--wrkers", "-h"), SF__FLAGS_HELP);
  CHECK_INT(PARSE("--version"), SF__FLAGS_VERSION);
  CHECK_INT(PARSE("--", "--help"), SF__FLAGS_ERROR);
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  sf__usage(&sf_program_desc, f);
  fclose(f);
  const char *want =
      "usage: train [flags]\n"
      "\n"
      "Flags:\n"
      "  --workers i64                      replicas that train at once (default 2)\n"
      "  --path str                         (default \"data/digits.csv\")\n"
      "  --lr f64                           (default 0.1)\n"
      "  --scale f32                        (default 1.5)\n"
      "  --verbose bool                     (default false)\n"
      "  --steps i32                        (default 10)\n"
      "  --name str                         the run's name, shown in every line of its log; a "
      "long\n"
      "                                     description wraps at the words to keep the lines "
      "of --help\n"
      "                                     short (required)\n"
      "  --eval-samples i64                 (default 8)\n"
      "\n"
      "Runtime flags:\n"
      "  --nodes FILE                       run on the hosts listed in FILE, one per line\n"
      "  --resume                           finish a killed run from its journal and "
      "checkpoints\n"
      "  --trace FILE                       write a trace of tasks and actors to FILE\n"
      "  --metrics-port P                   serve Prometheus metrics of the run on port P\n"
      "  --dashboard P                      serve a live page of the run on port P\n"
      "  --metrics-bind HOST                address of --metrics-port and --dashboard (default "
      "127.0.0.1; else a token is needed)\n"
      "  --checkpoint-dir DIR               journal and checkpoints go here (default "
      ".sflow/PROGRAM)\n"
      "  --progress=auto|always|never       show a progress line (auto: when stderr is a "
      "terminal)\n"
      "  --quiet                            no summary line, notices or progress line\n"
      "  --require-gpu                      fail instead of running GPU work on the CPU\n"
      "  --threads N                        worker threads, 1 to 1024 (default: one per CPU)\n"
      "  --journal                          record main's calls so --resume can finish the run "
      "(default true)\n"
      "  --ssh-user USER                    user on the --nodes hosts (default: ssh config's "
      "User, else current user)\n"
      "  --ssh-key FILE                     private key for SSH (default: ssh-agent, then "
      "IdentityFile or ~/.ssh/id_*)\n"
      "  --known-hosts FILE                 host keys to trust (default UserKnownHostsFile or "
      "~/.ssh/known_hosts)\n"
      "  --ssh-config FILE                  ssh client config, or none (default ~/.ssh/config, "
      "/etc/ssh/ssh_config)\n"
      "  --accept-new-host-keys             trust and record unknown host keys (a changed key "
      "is still refused)\n"
      "  --connect-timeout S                seconds to reach each host (default 10)\n"
      "  --head-runs-work                   the head also runs tasks (default true)\n"
      "  --remote-cache DIR                 folder on the hosts for the executable (default "
      ".cache/sflow)\n"
      "  --cluster-log                      report each node's start, readiness and stop\n"
      "  --launcher=auto|ssh|slurm|mpi|env  who started the ranks (default auto: srun's, "
      "mpirun's or torchrun's variables)\n"
      "  -h, --help                         show this help and exit\n"
      "  --version                          show the version and exit\n";
  CHECK_STR(text, want);
  free(text);
}

static void test_edit_distance(void) {
  CHECK_INT(sf__edit_distance("workers", "workers"), 0);
  CHECK_INT(sf__edit_distance("wrkers", "workers"), 1);
  CHECK_INT(sf__edit_distance("wokrers", "workers"), 1);
  CHECK_INT(sf__edit_distance("", "abc"), 3);
  CHECK_INT(sf__edit_distance("kitten", "sitting"), 3);
}

/* Runs the real main in a child; returns its exit code, output in out/errout. */
static int run_main(const char *const *a, char **out, char **errout) {
  char *argv[16] = {"./train"};
  int argc = 1;
  while (*a && argc < 15)
    argv[argc++] = (char *)*a++;
  rt_capture co = rt_capture_begin(1), ce = rt_capture_begin(2);
  pid_t pid = fork();
  if (pid == 0)
    exit(sf__runtime_main(argc, argv));
  int status = 0;
  waitpid(pid, &status, 0);
  *errout = rt_capture_end(ce);
  *out = rt_capture_end(co);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
#define RUN_MAIN(out, err, ...) run_main((const char *const[]){__VA_ARGS__, NULL}, out, err)

static void test_main_exit_codes(void) {
  char *out, *errout;
  CHECK_INT(RUN_MAIN(&out, &errout, "--name", "bob", "--workers=3"), 0);
  CHECK_STR(out, "3 bob\n");
  CHECK_STR(errout, "");
  free(out), free(errout);

  CHECK_INT(RUN_MAIN(&out, &errout, "--wrkers", "3"), 2);
  CHECK_STR(out, "");
  CHECK_STR(errout, "train: error: unknown flag '--wrkers' (did you mean '--workers'?)\n"
                    "Run './train --help' to see the flags.\n");
  free(out), free(errout);

  CHECK_INT(RUN_MAIN(&out, &errout, "--help"), 0);
  CU_ASSERT(strncmp(out, "usage: train [flags]\n", 21) == 0);
  free(out), free(errout);

  CHECK_INT(RUN_MAIN(&out, &errout, "--version"), 0);
  CHECK_STR(out, "train (sflow " SF__VERSION ", runtime ABI 5)\n");
  free(out), free(errout);
  CHECK_INT(main_calls, 0); /* only the children ran the workflow */
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"defaults", test_defaults},
      {"forms", test_forms},
      {"runtime_flags", test_runtime_flags},
      {"cluster_flags", test_cluster_flags},
      {"value_errors", test_value_errors},
      {"missing", test_missing},
      {"unknown", test_unknown},
      {"positional", test_positional},
      {"dashed_names", test_dashed_names},
      {"every_row", test_every_row},
      {"help_version", test_help_version},
      {"edit_distance", test_edit_distance},
      {"main_exit_codes", test_main_exit_codes},
      {NULL, NULL},
  };
  return rt_run("rt_flags", tests, argc, argv);
}
