/*
 * test_rt_launch.c — a launched run's plumbing (cluster/net/launcher.c):
 * Slurm's compressed host lists expanded as Slurm writes them, and every
 * malformed list refused with its reason; the engines' variables read into
 * a rank, a world of one or sflow's own inherited variables not a rank;
 * where rank 0 listens.
 */
#include "cluster.h"
#include "rt_test.h"

static char err[512];

/* The expansion of list joined by spaces, or "ERR: message". */
static const char *expand(const char *list) {
  static char out[4096];
  char **h;
  int n = sf__slurm_hosts(list, &h, err, sizeof err);
  if (n < 0) {
    snprintf(out, sizeof out, "ERR: %s", err);
    return out;
  }
  out[0] = '\0';
  for (int i = 0; i < n; i++)
    snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", h[i]);
  sf__launch_hosts_free(h, n);
  return out;
}

static void test_plain(void) {
  CHECK_STR(expand("node1"), "node1");
  CHECK_STR(expand("a,b,c"), "a b c");
  CHECK_STR(expand("gpu2.cluster.example"), "gpu2.cluster.example");
}

static void test_ranges(void) {
  CHECK_STR(expand("node[01-03,7],gpu2"), "node01 node02 node03 node7 gpu2");
  CHECK_STR(expand("n[1-3]"), "n1 n2 n3");
  CHECK_STR(expand("n[8-11]"), "n8 n9 n10 n11");
  CHECK_STR(expand("n[098-101]"), "n098 n099 n100 n101"); /* the width of the lower bound */
  CHECK_STR(expand("rack1-n[1,3]-ib"), "rack1-n1-ib rack1-n3-ib");
  CHECK_STR(expand("a[1-2],b[5],c"), "a1 a2 b5 c");
  CHECK_STR(expand("[1-2]"), "1 2");
}

static void test_errors(void) {
  CHECK_STR(expand("node[1-3"), "ERR: '[' without ']' in 'node[1-3'");
  CHECK_STR(expand("node1-3]"), "ERR: ']' without '[' in 'node1-3]'");
  CHECK_STR(expand("n[3-1]"), "ERR: range '3-1' runs backwards or is too long");
  CHECK_STR(expand("n[a-b]"), "ERR: 'a-b' is not a number or a range a-b");
  CHECK_STR(expand("n[1-]"), "ERR: '1-' is not a number or a range a-b");
  CHECK_STR(expand("n[]"), "ERR: '' is not a number or a range a-b");
  CHECK_STR(expand("n[1,]"), "ERR: '' is not a number or a range a-b");
  CHECK_STR(expand("n[1][2]"), "ERR: more than one bracket group in 'n[1][2]'");
  CHECK_STR(expand("a,,b"), "ERR: an empty entry");
  CHECK_STR(expand("a,"), "ERR: an empty entry");
  CHECK_STR(expand("n[1-1000000]"), "ERR: range '1-1000000' runs backwards or is too long");
}

/* The launcher variables this test sets; each test starts without any. */
static const char *const vars[] = {
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_RESV_PORTS", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", "PMI_KVSNAME", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "SFLOW_LAUNCH_MARK", "SFLOW_SECRET_FILE", "SFLOW_SECRET",
    "SFLOW_HEAD_PORT", "TORCHELASTIC_RUN_ID"};

static void clear(void) {
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    unsetenv(vars[i]);
}

static sf__launch L;

static void test_slurm(void) {
  clear();
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "6", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODEID", "2", 1);
  setenv("SLURM_TASKS_PER_NODE", "2(x2),2", 1);
  setenv("SLURM_STEP_NODELIST", "gpu[07-09]", 1);
  setenv("SLURM_JOB_ID", "4711", 1);
  setenv("SLURM_STEP_ID", "2", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_SLURM);
  CHECK_INT(L.rank, 3);
  CHECK_INT(L.size, 6);
  CHECK_INT(L.local_rank, 1);
  CHECK_INT(L.local_size, 2);
  CHECK_STR(L.host, "gpu07");
  CHECK_INT(L.port, 20000 + (4711 * 16 + 2) % 12768);
  CHECK_STR(L.job, "4711.2");
  setenv("SLURM_STEP_RESV_PORTS", "12001-12004", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.port, 12001);
  /* The batch script (step 4294967294) is no rank under auto. */
  setenv("SLURM_STEP_ID", "4294967294", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_NONE);
  setenv("SLURM_STEP_NODELIST", "gpu[07-", 1);
  setenv("SLURM_STEP_ID", "2", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "Slurm's node list 'gpu[07-': '[' without ']' in 'gpu[07-'");
}

static void test_mpi_and_env(void) {
  clear();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("OMPI_MCA_ess_base_jobid", "808517633", 1);
  setenv("SFLOW_SECRET_FILE", "/shared/job/secret", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_OMPI);
  CHECK_STR(L.rdv, "/shared/job/.sflow-rendezvous-808517633");
  unsetenv("SFLOW_SECRET_FILE");
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "Open MPI rank 1 of 4: no MASTER_ADDR, and no SFLOW_SECRET_FILE next to which "
                 "rank 0 could publish its address (set either)");
  setenv("MASTER_ADDR", "10.0.0.5", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_MPI, false, &L, err, sizeof err), 0);
  CHECK_STR(L.host, "10.0.0.5");
  CHECK_INT(L.port, 29500);
  CHECK_STR(L.rdv, "");
  clear();
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "RANK=2 of WORLD_SIZE=3 but no MASTER_ADDR: where rank 0 listens (torchrun and "
                 "Kubernetes set it)");
  setenv("MASTER_ADDR", "trainer-0.trainer", 1);
  setenv("MASTER_PORT", "23456", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_ENV);
  CHECK_INT(L.local_size, 1);
  CHECK_STR(L.host, "trainer-0.trainer");
  CHECK_INT(L.port, 23456);
  setenv("TORCHELASTIC_RUN_ID", "job7", 1); /* torchrun's agent holds MASTER_PORT */
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.port, 23457);
  CHECK_STR(L.job, "job7");
  setenv("SFLOW_HEAD_PORT", "24000", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.port, 24000);
  unsetenv("SFLOW_HEAD_PORT");
  unsetenv("TORCHELASTIC_RUN_ID");
  setenv("RANK", "3", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "env: rank 3 of a world of 3");
  setenv("RANK", "x", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "RANK='x' in the environment is not a number from 0 to 1048576");
  /* --nodes: ssh, and a named launcher does not go with it. */
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, true, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_NONE);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_ENV, true, &L, err, sizeof err), -1);
  CHECK_STR(err, "--nodes starts the run over SSH; it does not go with --launcher env");
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_SLURM, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "--launcher slurm: no SLURM_PROCID and SLURM_NTASKS in the environment (start "
                 "it with srun)");
}

/* MPICH's Hydra (mpiexec.hydra, 4.0): PMI_RANK, PMI_SIZE, PMI_FD,
 * MPI_LOCALRANKID and MPI_LOCALNRANKS, no job id; other PMI launchers
 * give the local rank as PMI_LOCAL_RANK and PMI_LOCAL_SIZE. */
static void test_pmi(void) {
  clear();
  setenv("PMI_RANK", "3", 1);
  setenv("PMI_SIZE", "4", 1);
  setenv("PMI_FD", "6", 1);
  setenv("MPI_LOCALRANKID", "1", 1);
  setenv("MPI_LOCALNRANKS", "2", 1);
  setenv("SFLOW_SECRET_FILE", "/shared/job/secret", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_PMI);
  CHECK_STR(L.engine, "PMI");
  CHECK_INT(L.rank, 3);
  CHECK_INT(L.size, 4);
  CHECK_INT(L.local_rank, 1);
  CHECK_INT(L.local_size, 2);
  CHECK_STR(L.rdv, "/shared/job/.sflow-rendezvous-job");
  unsetenv("MPI_LOCALRANKID");
  unsetenv("MPI_LOCALNRANKS");
  setenv("PMI_LOCAL_RANK", "0", 1);
  setenv("PMI_LOCAL_SIZE", "3", 1);
  setenv("PMI_KVSNAME", "kvs_77_0", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_MPI, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_PMI);
  CHECK_INT(L.local_rank, 0);
  CHECK_INT(L.local_size, 3);
  CHECK_STR(L.rdv, "/shared/job/.sflow-rendezvous-kvs_77_0");
  setenv("MPI_LOCALRANKID", "2", 1); /* Hydra's wins */
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_MPI, false, &L, err, sizeof err), 0);
  CHECK_INT(L.local_rank, 2);
  CHECK_INT(L.local_size, 3);
  setenv("PMI_LOCAL_SIZE", "two", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_MPI, false, &L, err, sizeof err), -1);
  CHECK_STR(err, "PMI_LOCAL_SIZE='two' in the environment is not a number from 0 to 1048576");
  /* A world of one (mpiexec -np 1) is a plain run. */
  unsetenv("PMI_LOCAL_SIZE");
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "1", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_NONE);
  unsetenv("PMI_FD");
  clear();
}

/* The mark: sflow's own variables, inherited, are no rank; set anew they are. */
static void test_mark(void) {
  clear();
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  sf__launch_mark();
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_NONE);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_ENV, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_ENV); /* named: the mark does not count */
  setenv("RANK", "0", 1);
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_ENV);
  setenv("WORLD_SIZE", "1", 1); /* a world of one: plain */
  CHECK_INT(sf__launch_detect(SF__LAUNCHER_AUTO, false, &L, err, sizeof err), 0);
  CHECK_INT(L.kind, SF__LAUNCH_NONE);
  clear();
}

/* Where rank 0 listens: the name's first address when it is this
 * machine's, else every interface, with the reason. */
static const char *bind_for(const char *name, int local_size, int size) {
  static char out[600];
  sf__launch B = {.size = size, .local_size = local_size};
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char why[512] = "";
  if (sf__launch_bind_addr(&B, name, &ss, &sl, why, sizeof why) == 1)
    sf__addr_str((struct sockaddr *)&ss, sl, out, sizeof out, NULL);
  else
    snprintf(out, sizeof out, "ANY: %s", why);
  return out;
}

static void test_bind(void) {
  CHECK_STR(bind_for("127.0.0.1", 2, 2), "127.0.0.1");
  CHECK_STR(bind_for("127.0.0.1", 1, 4), "127.0.0.1"); /* a number is the user's choice */
  CHECK_STR(bind_for("localhost", 4, 4), "127.0.0.1");
  CHECK_STR(bind_for("localhost", 1, 4), "ANY: 'localhost' is 127.0.0.1 here, a loopback "
                                         "address, and 3 of the 4 ranks run on other hosts");
  /* TEST-NET-1 (RFC 5737): no machine's address. */
  CHECK_STR(bind_for("192.0.2.7", 2, 2), "ANY: '192.0.2.7' is 192.0.2.7, not an address of "
                                         "this machine");
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"plain", test_plain},
      {"ranges", test_ranges},
      {"errors", test_errors},
      {"slurm", test_slurm},
      {"mpi_and_env", test_mpi_and_env},
      {"pmi", test_pmi},
      {"mark", test_mark},
      {"bind", test_bind},
      {NULL, NULL},
  };
  return rt_run("launch", tests, argc, argv);
}
