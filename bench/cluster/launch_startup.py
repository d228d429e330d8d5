#!/usr/bin/env python3
"""Start-up to the first task: a run whose ranks a launcher started
(docs/cluster.md, "Started by a launcher") against `--nodes` over the
loopback sshd servers of tests/cluster, with the same number of processes.

For N processes (rank 0 and N-1 workers) it times, from the first process
started to rank 0's exit, a program whose main awaits one task that runs on
a worker (--head-runs-work=false):

  env       N processes started by hand with torchrun's variables
  mpirun    `mpirun -np N` (Open MPI; its own start-up included)
  --nodes   rank 0 with a hostfile of N-1 loopback sshd hosts (SSH connect,
            host key, auth, host check, deploy check by hash, exec)
  srun      `srun -n N` inside the private Slurm of tests/slurm/harness.py
            (srun's request to slurmctld, slurmd's step launch included)
  Ray       Ray on Slurm, under the same private Slurm: `srun -n1 ray start
            --head --block` (the one node: `ray start` once per node), and,
            started at the same moment, the driver, which connects as soon
            as the head answers and runs one remote task; from srun's start
            to the task's result.  Ray 2.60.0 from bench/cluster/ray_setup.sh
            (--ray-python names another interpreter; without one: "-")

median of --runs runs after one warm-up each (Ray: --ray-runs).

    bash bench/cluster/ray_setup.sh      # once, needs PyPI
    python3 bench/cluster/launch_startup.py --sflowc build/bin/sflowc [--runs 7] [--sizes 2,4,5]
"""
import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "cluster"))
sys.dont_write_bytecode = True
from harness import Cluster, free_port  # noqa: E402

# tests/slurm/harness.py, whose module name is the cluster harness's too.
_spec = importlib.util.spec_from_file_location(
    "slurm_harness", os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "slurm",
                                  "harness.py"))
slurm_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slurm_harness)
RAY_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "peers", "ray-core",
                          "venv", "bin", "python")
DRIVER = """import sys, time
import ray
deadline = time.monotonic() + 120
while True:  # the head is starting beside us
    try:
        ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)

@ray.remote
def first(x):
    return x * 2

print("first task:", ray.get(first.remote(21)), "on a worker", flush=True)
"""

PROGRAM = """task first(x: i64) -> i64 { return x * 2 }
workflow main() {
  print("first task:", await first(21), "on a worker")
}
"""
SECRET = "bench-launch-secret-0123456789abcdefghijkl"


def env_run(exe, n):
    port = free_port("127.0.0.1")
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    t0 = time.monotonic()
    procs = [subprocess.Popen([exe, "--head-runs-work=false"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(base, RANK=str(k), WORLD_SIZE=str(n), LOCAL_RANK=str(k),
                                       LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), SFLOW_SECRET=SECRET))
             for k in reversed(range(n))]
    outs = [p.communicate(timeout=60) for p in procs]
    dt = time.monotonic() - t0
    assert "first task: 42" in outs[-1][0], outs[-1]
    return dt


def mpi_run(exe, n, secret):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               SFLOW_SECRET_FILE=secret)
    t0 = time.monotonic()
    r = subprocess.run(["mpirun", "--oversubscribe", "-np", str(n), "-x", "SFLOW_SECRET_FILE", exe,
                        "--head-runs-work=false"], capture_output=True, text=True, env=env,
                       timeout=60)
    dt = time.monotonic() - t0
    assert "first task: 42" in r.stdout, r.stdout + r.stderr
    return dt


def nodes_run(c, exe, n):
    hosts = os.path.join(c.dir, f"hosts{n}")
    with open(hosts, "w") as f:
        for addr, port, _ in c.hosts[:n - 1]:
            f.write(f"[{addr}]:{port}\n")
    t0 = time.monotonic()
    r = subprocess.run(c.args("--head-runs-work=false", hostfile=hosts, prog=exe),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    dt = time.monotonic() - t0
    assert "first task: 42" in r.stdout, r.stdout + r.stderr
    return dt


def srun_run(slurm, exe, n, secret):
    env = slurm.env(dict(SFLOW_SECRET_FILE=secret))
    t0 = time.monotonic()
    r = subprocess.run(["srun", "-n", str(n), exe, "--head-runs-work=false"], capture_output=True,
                       text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    dt = time.monotonic() - t0
    assert r.returncode == 0 and "first task: 42" in r.stdout, r.stdout + r.stderr
    return dt


def ray_run(slurm, py, n):
    """One Ray start-up on Slurm: the head through srun, the driver beside
    it; the head's step cancelled after (its processes are the step's)."""
    port = free_port("127.0.0.1")
    tmp = tempfile.mkdtemp(prefix="sfray", dir="/tmp")  # Ray's own: its socket paths stay short
    ray = os.path.join(os.path.dirname(py), "ray")
    env = slurm.env(dict(RAY_USAGE_STATS_ENABLED="0"))
    t0 = time.monotonic()
    head = subprocess.Popen(["srun", "-n1", "--job-name", f"rayhead{port}", ray, "start",
                             "--head", "--block", f"--port={port}", f"--num-cpus={n}",
                             "--include-dashboard=false", "--disable-usage-stats",
                             f"--temp-dir={tmp}"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        r = subprocess.run([py, "-c", DRIVER, f"127.0.0.1:{port}"], capture_output=True,
                           text=True, env=env, timeout=150, stdin=subprocess.DEVNULL)
        dt = time.monotonic() - t0
        assert "first task: 42" in r.stdout, r.stdout + r.stderr
    finally:
        subprocess.run(["scancel", "--full", "--name", f"rayhead{port}"], env=env,
                       capture_output=True, timeout=30)
        try:
            head.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.communicate()
        shutil.rmtree(tmp, ignore_errors=True)
    return dt


def median(fn, runs):
    fn()  # warm-up (the --nodes copy is deployed once, then found by hash)
    return statistics.median(fn() for _ in range(runs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sizes", default="2,4,5")
    ap.add_argument("--ray-runs", type=int, default=3)
    ap.add_argument("--ray-python", default=RAY_PYTHON)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    c = Cluster(a.sflowc, max(sizes) - 1)
    try:
        exe = c.compile("first", PROGRAM)
        secret = os.path.join(c.dir, "secret")
        with open(secret, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(secret, 0o600)
        have_mpi = shutil.which("mpirun") is not None
        have_ray = os.path.exists(a.ray_python)
        print(f"## Start-up to the first task (median of {a.runs}, Ray of {a.ray_runs}, "
              "seconds)\n")
        print("| processes | env (torchrun's variables) | `mpirun -np N` | `--nodes` (N-1 hosts) "
              "| `srun -n N` | Ray on Slurm (`ray start` + driver) |")
        print("|---:|---:|---:|---:|---:|---:|")
        with slurm_harness.Slurm(cpus=max(sizes)) as slurm:
            os.chmod(c.dir, 0o755)  # slurmd runs the steps from there
            for n in sizes:
                e = median(lambda: env_run(exe, n), a.runs)
                m = median(lambda: mpi_run(exe, n, secret), a.runs) if have_mpi else None
                s = median(lambda: nodes_run(c, exe, n), a.runs)
                sr = median(lambda: srun_run(slurm, exe, n, secret), a.runs)
                ry = (median(lambda: ray_run(slurm, a.ray_python, n), a.ray_runs)
                      if have_ray else None)
                print(f"| {n} | {e:.3f} | {f'{m:.3f}' if m else '-'} | {s:.3f} | {sr:.3f} | "
                      f"{f'{ry:.3f}' if ry else '-'} |", flush=True)
    finally:
        c.close()


if __name__ == "__main__":
    main()
