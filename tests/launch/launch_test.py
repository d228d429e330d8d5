#!/usr/bin/env python3
"""Runs started by a launcher (docs/cluster.md, "Started by a launcher"):
N real processes of one executable, each given its rank in the environment
as torchrun, Open MPI's mpirun or srun give it, become one sflow run.

    launch_test.py --sflowc PATH CASE     run one case (exit 77: skipped)
    launch_test.py --list                 the case names

examples/digits.sflow is the program: the N processes with `--workers N`
must train like one process with `--workers N` (losses within 1e-6, the
same lines printed), the group's members must sit on the other ranks
(--cluster-log's placement line), the metrics CSV must hold every step
once, and the ranks other than 0 print and write nothing (each runs in a
folder of its own, which must stay empty).  Open MPI's cases need mpirun
(openmpi-bin, scripts/install-deps.sh) and skip (77) without it.
`mpirun -np 2/4` of examples/finetune (MiniLM) and lm_finetune (LoRA) give
one process's step losses within 1e-6 relative (Example, which
tests/slurm/slurm_test.py's srun cases use too).  bind_master_addr: rank 0
listens only on the address its ranks dial.
"""
import argparse
import csv
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(ROOT, "examples", "digits.sflow")
CSV_PATH = os.path.join(ROOT, "examples", "data", "digits.csv")
EPOCHS = "4"
SECRET = "launch-test-secret-0123456789abcdefghijklmnop"
# Variables of the engines, cleared from every rank's environment so that
# the test's own (a CI runner under Slurm) do not leak in.
ENGINE_VARS = re.compile(r"^(SLURM_|OMPI_|PMI_|PMIX_|MPI_LOCAL|RANK$|WORLD_SIZE$|LOCAL_RANK$|"
                         r"LOCAL_WORLD_SIZE$|MASTER_ADDR$|MASTER_PORT$|SFLOW_SECRET|"
                         r"SFLOW_LAUNCH_MARK$|SFLOW_HEAD_PORT$|TORCHELASTIC)")


class Fail(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Fail(what + ("\n" + detail if detail else ""))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not ENGINE_VARS.match(k)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Digits:
    """digits compiled once per case, in a folder of its own."""

    def __init__(self, sflowc, tmp):
        self.tmp = tmp
        self.exe = os.path.join(tmp, "digits")
        r = subprocess.run([sflowc, DIGITS, "-o", self.exe], capture_output=True, text=True)
        check(r.returncode == 0, "sflowc failed", r.stderr)

    def args(self, workers, metrics, out):
        return ["--workers", str(workers), "--epochs", EPOCHS, "--path", CSV_PATH,
                "--metrics", metrics, "--out", out, "--verbose", "--threads", "2"]

    def single(self, workers):
        """The reference: one process, --workers N."""
        d = os.path.join(self.tmp, f"single{workers}")
        os.makedirs(d)
        m = os.path.join(d, "metrics.csv")
        r = subprocess.run([self.exe] + self.args(workers, m, os.path.join(d, "w.safetensors")),
                           capture_output=True, text=True, cwd=d, env=clean_env(), timeout=60)
        check(r.returncode == 0, f"single --workers {workers} failed", r.stderr)
        return r.stdout, read_metrics(m)


def read_metrics(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def rank_dirs(tmp, n, tag):
    dirs = [os.path.join(tmp, f"{tag}_rank{k}") for k in range(n)]
    for d in dirs:
        os.makedirs(d)
    return dirs


def check_like_single(name, n, ref, out0, err0, metrics_path, dirs, outs_other):
    ref_out, ref_rows = ref
    # The weights' path is the one line that differs by design.
    ref_out = re.sub(r" to \S+w\.safetensors$", " to W", ref_out, flags=re.M)
    out0 = re.sub(r" to \S+w\.safetensors$", " to W", out0, flags=re.M)
    check(out0 == ref_out, f"{name}: rank 0's output differs from one process's",
          f"--- one process:\n{ref_out}--- rank 0:\n{out0}\n--- stderr:\n{err0[-2000:]}")
    rows = read_metrics(metrics_path)
    steps = [int(r["step"]) for r in rows]
    check(len(steps) == len(set(steps)), f"{name}: duplicate rows in the metrics CSV")
    check(len(rows) == len(ref_rows), f"{name}: {len(rows)} metrics rows, one process wrote "
          f"{len(ref_rows)}")
    worst = max(abs(float(a["loss"]) - float(b["loss"])) for a, b in zip(rows, ref_rows))
    check(worst <= 1e-6, f"{name}: losses differ from one process's by {worst:g} (> 1e-6)")
    m = re.search(r"^sflow: group 'Worker' placed on nodes ([\d,]+)$", err0, re.M)
    check(m, f"{name}: no placement line for the group", err0[-2000:])
    nodes = sorted(set(int(x) for x in m.group(1).split(",")))
    check(nodes == list(range(1, n)), f"{name}: the group sits on nodes {nodes}, "
          f"not on every other rank 1..{n - 1}")
    for k, (o, d) in enumerate(zip(outs_other, dirs[1:]), start=1):
        check(o == "", f"{name}: rank {k} printed to its stdout", o)
        check(os.listdir(d) == [], f"{name}: rank {k} wrote files: {os.listdir(d)}")
    check(os.path.exists(os.path.join(dirs[0], "w.safetensors")), f"{name}: no weights saved")
    print(f"{name}: {n} ranks like one process with --workers {n}: {len(rows)} steps, "
          f"largest loss difference {worst:g}, group on nodes {m.group(1)}")


def run_env_ranks(d, n, dirs, extra_env, tag, args=None):
    """n processes started by hand with torchrun's variables; rank 0 last,
    so the others wait for it as they do under a real launcher."""
    port = free_port()
    procs = []
    metrics = os.path.join(dirs[0], "metrics.csv")
    for k in reversed(range(n)):
        env = clean_env(RANK=k, WORLD_SIZE=n, LOCAL_RANK=k, LOCAL_WORLD_SIZE=n,
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **extra_env)
        a = args if args is not None else d.args(n, metrics, os.path.join(dirs[0], "w.safetensors"))
        procs.append((k, subprocess.Popen([d.exe] + a + ["--cluster-log"], cwd=dirs[k], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True)))
    res = {}
    for k, p in procs:
        try:
            o, e = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            for _, q in procs:
                q.kill()
            raise Fail(f"{tag}: rank {k} did not finish within 90 s")
        res[k] = (p.returncode, o, e)
    return res, metrics


def case_env_digits(sflowc, tmp, n):
    d = Digits(sflowc, tmp)
    ref = d.single(n)
    dirs = rank_dirs(tmp, n, "env")
    res, metrics = run_env_ranks(d, n, dirs, {"SFLOW_SECRET": SECRET}, f"env_digits_{n}")
    for k in range(n):
        check(res[k][0] == 0, f"rank {k} exited {res[k][0]}", res[k][2][-2000:])
    check_like_single(f"env_digits_{n}", n, ref, res[0][1], res[0][2], metrics, dirs,
                      [res[k][1] for k in range(1, n)])


def secret_file(tmp, text=None, mode=0o600):
    path = os.path.join(tmp, "job.secret")
    with open(path, "w") as f:
        f.write(text if text is not None else SECRET + "\n")
    os.chmod(path, mode)
    return path


def open_mpi_mpirun():
    """Open MPI's mpirun: its own name first, since with MPICH installed
    too the alternatives may point plain `mpirun` at MPICH's Hydra."""
    mpirun = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
    if not mpirun:
        print("SKIP: no mpirun (apt-get install openmpi-bin)")
        sys.exit(77)
    return mpirun


def mpich_mpiexec():
    """MPICH's Hydra launcher (mpich, scripts/install-deps.sh)."""
    exe = shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich")
    if not exe:
        print("SKIP: no mpiexec.hydra (apt-get install mpich)")
        sys.exit(77)
    return exe


def case_mpirun_digits(sflowc, tmp, n):
    mpirun = open_mpi_mpirun()
    d = Digits(sflowc, tmp)
    ref = d.single(n)
    dirs = rank_dirs(tmp, n, "mpi")
    secret = secret_file(tmp)
    metrics = os.path.join(dirs[0], "metrics.csv")
    # Each rank in a folder of its own, so that what a rank writes shows:
    # mpirun starts rank k as `sh -c 'cd DIR_k; exec digits ...'`.
    script = os.path.join(tmp, "rank.sh")
    with open(script, "w") as f:
        f.write('#!/bin/sh\ncd "$1_rank$OMPI_COMM_WORLD_RANK" && shift && exec "$@"\n')
    os.chmod(script, 0o755)
    env = clean_env(OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1,
                    SFLOW_SECRET_FILE=secret)
    cmd = [mpirun, "--oversubscribe", "-np", str(n), "-x", "SFLOW_SECRET_FILE",
           "--output-filename", os.path.join(tmp, "mpi_out"), script, os.path.join(tmp, "mpi"),
           d.exe] + d.args(n, metrics, os.path.join(dirs[0], "w.safetensors")) + ["--cluster-log"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 0, f"mpirun -np {n} exited {r.returncode}", r.stdout + r.stderr)

    def rank_file(k, which):
        # Open MPI 4: DIR/1/rank.K/stdout
        for root, _, files in os.walk(os.path.join(tmp, "mpi_out")):
            if os.path.basename(root) == f"rank.{k}" and which in files:
                return open(os.path.join(root, which)).read()
        return ""
    left = [f for f in os.listdir(tmp) if f.startswith(".sflow-rendezvous-")]
    check(not left, f"the rendezvous file is left after the run: {left}")
    check_like_single(f"mpirun_digits_{n}", n, ref, rank_file(0, "stdout"),
                      rank_file(0, "stderr"), metrics, dirs,
                      [rank_file(k, "stdout") for k in range(1, n)])


def case_mpich_digits(sflowc, tmp, n):
    """MPICH's `mpiexec.hydra -np N`: the ranks know themselves by PMI_RANK,
    PMI_SIZE and MPI_LOCALRANKID alone (Hydra gives no job id and no
    MASTER_ADDR), so rank 0 publishes its address in the rendezvous file
    next to the secret file; the run is one process's with --workers N."""
    mpiexec = mpich_mpiexec()
    d = Digits(sflowc, tmp)
    ref = d.single(n)
    dirs = rank_dirs(tmp, n, "mpich")
    secret = secret_file(tmp)
    metrics = os.path.join(dirs[0], "metrics.csv")
    script = os.path.join(tmp, "rank.sh")
    with open(script, "w") as f:
        f.write('#!/bin/sh\ncd "$1_rank$PMI_RANK" && shift && exec "$@"\n')
    os.chmod(script, 0o755)
    out = os.path.join(tmp, "mpich_out")
    os.makedirs(out)
    env = clean_env(SFLOW_SECRET_FILE=secret)
    # Hydra passes the whole environment (-genvall); -genv names the secret
    # file all the same, as a job script would.
    cmd = [mpiexec, "-np", str(n), "-genv", "SFLOW_SECRET_FILE", secret,
           "-outfile-pattern", os.path.join(out, "stdout.%r"),
           "-errfile-pattern", os.path.join(out, "stderr.%r"), script,
           os.path.join(tmp, "mpich"), d.exe] + \
        d.args(n, metrics, os.path.join(dirs[0], "w.safetensors")) + ["--cluster-log"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    def rank_file(k, which):
        p = os.path.join(out, f"{which}.{k}")
        return open(p).read() if os.path.exists(p) else ""
    check(r.returncode == 0, f"mpiexec.hydra -np {n} exited {r.returncode}",
          r.stdout + r.stderr + "".join(rank_file(k, "stderr")[-1500:] for k in range(n)))
    err0 = rank_file(0, "stderr")
    check(re.search(r"^sflow: PMI rank 0 of %d: .*published in %s" %
                    (n, re.escape(os.path.join(tmp, ".sflow-rendezvous-job"))), err0, re.M),
          "rank 0 did not say it is PMI rank 0 and published in the rendezvous file",
          err0[-2000:])
    left = [f for f in os.listdir(tmp) if f.startswith(".sflow-rendezvous-")]
    check(not left, f"the rendezvous file is left after the run: {left}")
    check_like_single(f"mpich_digits_{n}", n, ref, rank_file(0, "stdout"), err0, metrics, dirs,
                      [rank_file(k, "stdout") for k in range(1, n)])


def case_slurm_env_2(sflowc, tmp):
    """srun's variables, set by hand (a real srun is the Slurm harness's):
    rank 0's host is the first of the step's compressed node list, and the
    port comes from the job and step ids."""
    d = Digits(sflowc, tmp)
    n = 2
    ref = d.single(n)
    dirs = rank_dirs(tmp, n, "slurm")
    job = 100000 + os.getpid() % 50000  # two runs of this test side by side: other ports
    metrics = os.path.join(dirs[0], "metrics.csv")
    procs = []
    for k in reversed(range(n)):
        env = clean_env(SLURM_PROCID=k, SLURM_NTASKS=n, SLURM_LOCALID=k, SLURM_NODEID=0,
                        SLURM_TASKS_PER_NODE="2", SLURM_STEP_NODELIST="localhost,node[02-03]",
                        SLURM_JOB_NODELIST="localhost,node[02-03]", SLURM_JOB_ID=job,
                        SLURM_STEP_ID=0, SFLOW_SECRET=SECRET)
        procs.append((k, subprocess.Popen(
            [d.exe] + d.args(n, metrics, os.path.join(dirs[0], "w.safetensors")) +
            ["--cluster-log"], cwd=dirs[k], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)))
    res = {k: p.communicate(timeout=90) + (p.returncode,) for k, p in procs}
    for k in range(n):
        check(res[k][2] == 0, f"Slurm rank {k} exited {res[k][2]}", res[k][1][-2000:])
    want_port = 20000 + (job * 16) % 12768
    # On the first host's address alone (localhost; both tasks on this node).
    check(f"Slurm rank 0 of 2: control plane listening on 127.0.0.1:{want_port}" in res[0][1],
          f"rank 0 does not listen on 127.0.0.1:{want_port} (the port derived from job {job})",
          res[0][1])
    check_like_single("slurm_env_2", n, ref, res[0][0], res[0][1], metrics, dirs, [res[1][0]])


def case_wrong_secret(sflowc, tmp):
    """A process that claims rank 1 with another secret is refused (and
    exits non-zero saying so); the real rank 1 joins after it and the run
    is exact."""
    d = Digits(sflowc, tmp)
    ref = d.single(2)
    dirs = rank_dirs(tmp, 2, "ws")
    port = free_port()
    metrics = os.path.join(dirs[0], "metrics.csv")
    base = dict(WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    head = subprocess.Popen([d.exe] + d.args(2, metrics, os.path.join(dirs[0], "w.safetensors")) +
                            ["--cluster-log"], cwd=dirs[0],
                            env=clean_env(RANK=0, SFLOW_SECRET=SECRET, **base),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    imp_dir = os.path.join(tmp, "impostor")
    os.makedirs(imp_dir)
    imp = subprocess.run([d.exe, "--workers", "2"], cwd=imp_dir, capture_output=True, text=True,
                         env=clean_env(RANK=1, SFLOW_SECRET="another-secret-" + "x" * 40, **base),
                         timeout=60)
    check(imp.returncode == 69, f"the impostor exited {imp.returncode}, not 69", imp.stderr)
    check("authentication refused by the head (wrong secret?)" in imp.stderr,
          "the impostor's message does not say it was refused", imp.stderr)
    worker = subprocess.run([d.exe] + d.args(2, metrics, os.path.join(dirs[0], "w.safetensors")),
                            cwd=dirs[1], env=clean_env(RANK=1, SFLOW_SECRET=SECRET, **base),
                            capture_output=True, text=True, timeout=90)
    out, err = head.communicate(timeout=90)
    check(head.returncode == 0 and worker.returncode == 0,
          f"rank 0 exited {head.returncode}, rank 1 {worker.returncode}", err[-2000:])
    check(re.search(r"refused control connection from 127\.0\.0\.1:\d+: wrong HMAC", err),
          "rank 0 did not log the refusal", err[-2000:])
    check_like_single("wrong_secret", 2, ref, out, err, metrics, dirs, [worker.stdout])


def refused_before_listening(d, tmp, env_extra, want, tag):
    """Rank 0 with a bad secret fails with exit 69 and the secret's message
    though its port is taken: it never got as far as listening."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        t0 = time.monotonic()
        r = subprocess.run([d.exe, "--workers", "2"], cwd=tmp, capture_output=True, text=True,
                           env=clean_env(RANK=0, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1",
                                         MASTER_PORT=port, **env_extra), timeout=30)
    finally:
        holder.close()
    check(r.returncode == 69, f"{tag}: exit {r.returncode}, not 69", r.stderr)
    check(want in r.stderr, f"{tag}: no '{want}' in the message", r.stderr)
    check("listen" not in r.stderr, f"{tag}: it tried to listen first", r.stderr)
    print(f"{tag}: exit 69 in {time.monotonic() - t0:.2f} s: {r.stderr.strip()}")


def case_secret_refused(sflowc, tmp):
    d = Digits(sflowc, tmp)
    refused_before_listening(d, tmp, {}, "there is no secret to let only the job's processes "
                             "join: set SFLOW_SECRET_FILE", "missing")
    path = secret_file(tmp, mode=0o644)
    refused_before_listening(d, tmp, {"SFLOW_SECRET_FILE": path},
                             f"SFLOW_SECRET_FILE {path} can be read by others (mode 644)",
                             "world-readable")
    os.chmod(path, 0o640)
    refused_before_listening(d, tmp, {"SFLOW_SECRET_FILE": path}, "(mode 640)", "group-readable")
    short = secret_file(tmp, "short\n")
    refused_before_listening(d, tmp, {"SFLOW_SECRET_FILE": short},
                             "is too short (5 bytes; at least 32)", "short file")
    refused_before_listening(d, tmp, {"SFLOW_SECRET": "x" * 31},
                             "the secret in SFLOW_SECRET is too short (31 bytes", "short variable")
    refused_before_listening(d, tmp, {"SFLOW_SECRET_FILE": os.path.join(tmp, "none")},
                             "No such file or directory", "no file")
    if os.geteuid() == 0:  # a file of another user's
        other = secret_file(tmp)
        os.chown(other, 65534, 65534)
        refused_before_listening(d, tmp, {"SFLOW_SECRET_FILE": other},
                                 "belongs to uid 65534, not to this user (uid 0)", "other owner")


NESTED = """workflow main() {
  print("plain run, node", node_id())
}
"""


def case_nested_not_rank(sflowc, tmp):
    """A sflow program started from inside a rank of a run (say from a
    task) inherits the run's launcher variables and its mark: it is a
    plain run, not a rank of that world.  The same variables set anew by a
    launcher (another RANK) make it a rank."""
    d = Digits(sflowc, tmp)
    dirs = rank_dirs(tmp, 2, "outer")
    res, _ = run_env_ranks(d, 2, dirs, {"SFLOW_SECRET": SECRET}, "nested",
                           args=["--sflow-selftest", "ready"])
    check(res[0][0] == 0 and res[1][0] == 0, "the outer selftest failed", res[0][2] + res[1][2])
    env_line = re.search(r"^head env (.*)$", res[0][1], re.M)
    mark = re.search(r"^head mark SFLOW_LAUNCH_MARK=(\S+)$", res[0][1], re.M)
    check(env_line and mark and mark.group(1) != "(unset)", "no head env or mark", res[0][1])
    inherited = dict(kv.split("=", 1) for kv in env_line.group(1).split())
    inherited["SFLOW_LAUNCH_MARK"] = mark.group(1)
    src = os.path.join(tmp, "nested.sflow")
    with open(src, "w") as f:
        f.write(NESTED)
    exe = os.path.join(tmp, "nested")
    r = subprocess.run([sflowc, src, "-o", exe], capture_output=True, text=True)
    check(r.returncode == 0, "sflowc nested failed", r.stderr)
    t0 = time.monotonic()
    r = subprocess.run([exe], cwd=tmp, capture_output=True, text=True, timeout=30,
                       env=clean_env(**inherited))  # no secret: a rank would fail at once
    check(r.returncode == 0 and "plain run, node 0" in r.stdout,
          f"the nested program took itself for a rank (exit {r.returncode})", r.stderr)
    print(f"nested: inherited {inherited} -> plain run in {time.monotonic() - t0:.2f} s")
    # A launcher started inside gives other values: then it is a rank.
    inherited["RANK"] = "1"
    r = subprocess.run([exe], cwd=tmp, capture_output=True, text=True, timeout=30,
                       env=clean_env(**inherited))
    check(r.returncode == 69 and "there is no secret" in r.stderr,
          f"with RANK set anew the program is not a rank (exit {r.returncode})", r.stderr)
    # --launcher ssh ignores the variables whatever they say.
    r = subprocess.run([exe, "--launcher", "ssh"], cwd=tmp, capture_output=True, text=True,
                       timeout=30, env=clean_env(**inherited))
    check(r.returncode == 0 and "plain run, node 0" in r.stdout, "--launcher ssh is a rank",
          r.stderr)
    # And a world of one is a plain run under auto.
    r = subprocess.run([exe], cwd=tmp, capture_output=True, text=True, timeout=30,
                       env=clean_env(RANK=0, WORLD_SIZE=1, MASTER_ADDR="127.0.0.1"))
    check(r.returncode == 0 and "plain run, node 0" in r.stdout, "a world of one is a rank",
          r.stderr)



def start_env_ranks(d, n, dirs, args, port):
    procs = {}
    for k in reversed(range(n)):
        env = clean_env(RANK=k, WORLD_SIZE=n, LOCAL_RANK=k, LOCAL_WORLD_SIZE=n,
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, SFLOW_SECRET=SECRET)
        procs[k] = subprocess.Popen([d.exe] + args + ["--cluster-log"], cwd=dirs[k], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return procs


def wait_rows(path, rows, procs, tag):
    """Until the metrics CSV has `rows` steps (the run is well under way)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(path) and sum(1 for _ in open(path)) > rows:
            return
        check(all(p.poll() is None for p in procs.values()), f"{tag}: a rank ended early")
        time.sleep(0.02)
    raise Fail(f"{tag}: no {rows} steps within 60 s")


LONG = "30"  # epochs: long enough to kill a rank partway


def long_args(d, n, dirs):
    a = d.args(n, os.path.join(dirs[0], "metrics.csv"), "")
    a[a.index("--epochs") + 1] = LONG
    return a


def long_single(d, n):
    dd = os.path.join(d.tmp, f"single_long{n}")
    os.makedirs(dd)
    r = subprocess.run([d.exe] + long_args(d, n, [dd]), capture_output=True, text=True, cwd=dd,
                       env=clean_env(), timeout=90)
    check(r.returncode == 0, "the single run failed", r.stderr)
    return r.stdout


def case_rank_killed(sflowc, tmp):
    """A worker rank SIGKILLed mid-training: the launcher cannot start it
    again, so the group restarts from its checkpoint on the live ranks, as
    on --nodes, and the run prints what an uninterrupted one prints."""
    d = Digits(sflowc, tmp)
    want = long_single(d, 4)
    dirs = rank_dirs(tmp, 4, "killed")
    procs = start_env_ranks(d, 4, dirs, long_args(d, 4, dirs), free_port())
    wait_rows(os.path.join(dirs[0], "metrics.csv"), 24 * 3, procs, "rank_killed")
    procs[2].kill()
    res = {k: p.communicate(timeout=90) + (p.returncode,) for k, p in procs.items()}
    out, err, rc = res[0]
    check(rc == 0, f"rank 0 exited {rc}", err[-3000:])
    check(re.search(r"^sflow: node 2 \(rank 2\) lost: ", err, re.M), "no 'node 2 lost' line",
          err[-3000:])
    m = re.search(r"the group of 4 restarted [^\n]*", err)
    check(m, "no group restart noted", err[-3000:])
    check(out == want, "the output differs from an uninterrupted run's",
          f"--- want:\n{want}--- got:\n{out}\n--- stderr:\n{err[-3000:]}")
    for k in (1, 3):
        check(res[k][2] == 0, f"rank {k} exited {res[k][2]}", res[k][1][-2000:])
    print(f"rank_killed: rank 2 SIGKILLed: '{m.group(0)}'; output exact")


def case_head_killed_resume(sflowc, tmp):
    """Rank 0 SIGKILLed mid-training: every other rank exits within a few
    seconds (its control connection closed); the job started again with
    --resume finishes from rank 0's journal and checkpoints with the
    output of an uninterrupted run."""
    d = Digits(sflowc, tmp)
    want = long_single(d, 4)
    dirs = rank_dirs(tmp, 4, "resume")
    args = long_args(d, 4, dirs)
    procs = start_env_ranks(d, 4, dirs, args, free_port())
    wait_rows(os.path.join(dirs[0], "metrics.csv"), 24 * 3, procs, "head_killed_resume")
    procs[0].kill()
    t0 = time.monotonic()
    for k in (1, 2, 3):
        try:
            procs[k].communicate(timeout=10)
        except subprocess.TimeoutExpired:
            raise Fail(f"rank {k} still runs 10 s after rank 0 was killed")
        check(procs[k].returncode == 69, f"rank {k} exited {procs[k].returncode}, not 69")
    gone = time.monotonic() - t0
    procs[0].communicate()
    procs = start_env_ranks(d, 4, dirs, args + ["--resume"], free_port())
    res = {k: p.communicate(timeout=90) + (p.returncode,) for k, p in procs.items()}
    out, err, rc = res[0]
    check(rc == 0, f"the resumed rank 0 exited {rc}", err[-3000:])
    check(out == want, "the resumed output differs from an uninterrupted run's",
          f"--- want:\n{want}--- got:\n{out}\n--- stderr:\n{err[-3000:]}")
    check(re.search(r"^sflow: group 'Worker' placed on nodes ", err, re.M),
          "the resumed group is not on the ranks", err[-2000:])
    for k in (1, 2, 3):
        check(os.listdir(dirs[k]) == [], f"rank {k} wrote {os.listdir(dirs[k])}")
    print(f"head_killed_resume: the other ranks gone {gone:.2f} s after rank 0's SIGKILL; "
          f"--resume exact")


def case_trace_2(sflowc, tmp):
    """--trace on every rank's command line: rank 0 writes the one trace,
    with rank 1's events in it as node 1; rank 1 writes nothing."""
    import json
    d = Digits(sflowc, tmp)
    dirs = rank_dirs(tmp, 2, "trace")
    args = ["--workers", "2", "--epochs", "2", "--path", CSV_PATH, "--out", "", "--threads", "2",
            "--trace", "trace.json"]
    res, _ = run_env_ranks(d, 2, dirs, {"SFLOW_SECRET": SECRET}, "trace_2", args=args)
    check(res[0][0] == 0 and res[1][0] == 0, "a rank failed", res[0][2] + res[1][2])
    check(os.listdir(dirs[1]) == [], f"rank 1 wrote {os.listdir(dirs[1])}")
    with open(os.path.join(dirs[0], "trace.json")) as f:
        t = json.load(f)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    check("node 1: rank 1" in names, f"no 'node 1: rank 1' process in the trace: {names}")
    on1 = sum(1 for e in ev if e.get("pid") == 1 and e.get("ph") != "M")
    check(on1 > 0, "no events of rank 1 in rank 0's trace")
    print(f"trace_2: rank 0's trace holds {on1} events of rank 1; rank 1 wrote nothing")


def case_pmi_rendezvous_2(sflowc, tmp):
    """MPICH/Hydra's PMI variables set by hand, no MASTER_ADDR: rank 0
    publishes its address in the rendezvous file next to the secret file.
    The file holds a stale address (a closed port, as a crashed run of the
    same job id leaves it) and rank 1 starts 1 s before rank 0: it polls,
    finds the stale address refused, and reads again until rank 0's."""
    d = Digits(sflowc, tmp)
    ref = d.single(2)
    dirs = rank_dirs(tmp, 2, "pmi")
    secret = secret_file(tmp)
    rdv = os.path.join(tmp, ".sflow-rendezvous-kvs_4242_0")
    with open(rdv, "w") as f:
        f.write(f"127.0.0.1 {free_port()}\n")
    metrics = os.path.join(dirs[0], "metrics.csv")
    procs = {}
    for k in (1, 0):
        env = clean_env(PMI_RANK=k, PMI_SIZE=2, MPI_LOCALRANKID=k, MPI_LOCALNRANKS=2,
                        PMI_KVSNAME="kvs_4242_0", SFLOW_SECRET_FILE=secret)
        procs[k] = subprocess.Popen(
            [d.exe] + d.args(2, metrics, os.path.join(dirs[0], "w.safetensors")) +
            ["--cluster-log"], cwd=dirs[k], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        if k == 1:
            time.sleep(1)
    res = {k: p.communicate(timeout=90) + (p.returncode,) for k, p in procs.items()}
    for k in (0, 1):
        check(res[k][2] == 0, f"PMI rank {k} exited {res[k][2]}", res[k][1][-2000:])
    check(f"published in {rdv}" in res[0][1], "rank 0 did not publish in the rendezvous file",
          res[0][1][-2000:])
    check(not os.path.exists(rdv), "the rendezvous file is left after the run")
    check_like_single("pmi_rendezvous_2", 2, ref, res[0][0], res[0][1], metrics, dirs,
                      [res[1][0]])


def dial(addr, port):
    """'ok' when a TCP connection to addr:port opens, else the error's name."""
    c = socket.socket()
    c.settimeout(5)
    try:
        c.connect((addr, port))
        return "ok"
    except OSError as e:
        return type(e).__name__
    finally:
        c.close()


def case_bind_master_addr(sflowc, tmp):
    """Rank 0 listens only on the address its workers dial: with
    MASTER_ADDR=127.0.0.1 another local address (127.0.0.2: Linux routes
    all of 127/8 to lo) is refused, and the run goes on exactly.  A name
    that is loopback here while ranks run on other hosts (LOCAL_WORLD_SIZE
    1 of 2) makes it listen on every interface, with a notice."""
    d = Digits(sflowc, tmp)
    ref = d.single(2)
    dirs = rank_dirs(tmp, 2, "bind")
    port = free_port()
    metrics = os.path.join(dirs[0], "metrics.csv")
    base = dict(WORLD_SIZE=2, LOCAL_WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                SFLOW_SECRET=SECRET)
    head = subprocess.Popen([d.exe] + d.args(2, metrics, os.path.join(dirs[0], "w.safetensors")) +
                            ["--cluster-log"], cwd=dirs[0],
                            env=clean_env(RANK=0, LOCAL_RANK=0, **base),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while dial("127.0.0.1", port) != "ok":
            check(head.poll() is None and time.monotonic() < deadline,
                  f"rank 0 never listened on 127.0.0.1:{port}")
            time.sleep(0.05)
        other = dial("127.0.0.2", port)
        check(other == "ConnectionRefusedError",
              f"rank 0 with MASTER_ADDR=127.0.0.1 answers on 127.0.0.2 too ({other})")
        worker = subprocess.run([d.exe] + d.args(2, metrics,
                                                 os.path.join(dirs[0], "w.safetensors")),
                                cwd=dirs[1], env=clean_env(RANK=1, LOCAL_RANK=1, **base),
                                capture_output=True, text=True, timeout=90)
        out, err = head.communicate(timeout=90)
    finally:
        head.kill()
    check(head.returncode == 0 and worker.returncode == 0,
          f"rank 0 exited {head.returncode}, rank 1 {worker.returncode}", err[-2000:])
    check(f"control plane listening on 127.0.0.1:{port}" in err,
          "rank 0 does not say it listens on 127.0.0.1", err[-2000:])
    check("every interface" not in err, "rank 0 fell back to every interface", err[-2000:])
    check_like_single("bind_master_addr", 2, ref, out, err, metrics, dirs, [worker.stdout])
    # A name: rank 0 of ranks all on this host (LOCAL_WORLD_SIZE 2 of 2)
    # listens on what it resolves to alone; with ranks elsewhere (1 of 2)
    # on every interface, saying so.
    local, _ = probe_head(d, tmp, "localhost", 2)
    check(local == "ConnectionRefusedError",
          f"rank 0 with MASTER_ADDR=localhost answers on 127.0.0.2 ({local})")
    other, err = probe_head(d, tmp, "localhost", 1)
    check(other == "ok", f"rank 0 falling back to every interface refuses 127.0.0.2 ({other})")
    want = ("'localhost' is 127.0.0.1 here, a loopback address, and 1 of the 2 ranks run on "
            "other hosts, so the control plane listens on every interface")
    check(want in err, "no notice of the fallback", err[-2000:])
    print(f"bind: 127.0.0.2 refused under MASTER_ADDR=127.0.0.1 and localhost; fallback notice: "
          f"{[line for line in err.splitlines() if 'every interface' in line][0]}")


def probe_head(d, tmp, master_addr, local_size):
    """Rank 0 of 2 alone, MASTER_ADDR master_addr: once it listens on
    127.0.0.1, what a connection to 127.0.0.2 gets ('ok' or the error's
    name), and its stderr (it is killed then)."""
    port = free_port()
    fb = tempfile.mkdtemp(dir=tmp)
    head = subprocess.Popen([d.exe] + d.args(2, os.path.join(fb, "m.csv"), os.path.join(fb, "w")) +
                            ["--cluster-log"], cwd=fb,
                            env=clean_env(RANK=0, WORLD_SIZE=2, LOCAL_WORLD_SIZE=local_size,
                                          MASTER_ADDR=master_addr, MASTER_PORT=port,
                                          SFLOW_SECRET=SECRET),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while dial("127.0.0.1", port) != "ok":
            check(head.poll() is None and time.monotonic() < deadline,
                  f"rank 0 (MASTER_ADDR={master_addr}) never listened on 127.0.0.1:{port}")
            time.sleep(0.05)
        other = dial("127.0.0.2", port)
    finally:
        head.kill()
    return other, head.communicate()[1]

FORTUNES = "/usr/share/games/fortunes"


class Example:
    """examples/finetune (MiniLM on fortune categories) or
    examples/lm_finetune (LoRA on SmolLM2, rows of which one is padded),
    compiled once, with the smallest flags that still run several steps on
    real data: what a launched run of N ranks is checked against is one
    process's run, with --workers N for finetune and one worker for
    lm_finetune (whose std.train weights the members by their targets)."""

    def __init__(self, sflowc, tmp, name):
        self.name, self.tmp = name, tmp
        self.exe = os.path.join(tmp, name)
        r = subprocess.run([sflowc, os.path.join(ROOT, "examples", name + ".sflow"), "-o",
                            self.exe], capture_output=True, text=True)
        check(r.returncode == 0, "sflowc failed", r.stderr)
        models = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(sflowc))), "models")
        # Checkpoints (finetune's: 90 MB a member) in memory when it has room.
        st = os.statvfs("/dev/shm")
        self.ck = tempfile.mkdtemp(prefix="sflow-launch-ck-", dir="/dev/shm"
                                   if st.f_bavail * st.f_frsize > 4 << 30 else tmp)
        if name == "finetune":
            model = os.path.join(models, "all-minilm-l6-v2")
            check(os.path.isfile(os.path.join(model, "model.safetensors")),
                  f"no model at {model}: run scripts/install-models.sh")
            check(os.path.isfile(os.path.join(FORTUNES, "computers")),
                  f"no {FORTUNES}/computers: scripts/install-deps.sh installs fortunes")
            # 24 samples in global batches of 8: 3 optimizer steps.
            self.flags = ["--model", model, "--data", FORTUNES, "--categories", "computers,science",
                          "--samples", "24", "--eval-samples", "8", "--epochs", "1", "--seq-len",
                          "16", "--batch", "8", "--log-every", "1", "--timing=false"]
            self.ref_workers = None
        else:
            import importlib.util
            spec = importlib.util.spec_from_file_location(
                "lm_finetune_test", os.path.join(ROOT, "tests", "examples", "lm_finetune_test.py"))
            lmt = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(lmt)
            check(os.path.isfile(lmt.GGUF),
                  f"no model at {lmt.GGUF}: run scripts/install-models.sh")
            text = os.path.join(tmp, "small.txt")
            with open(text, "w") as f:
                f.write(lmt.SMALL_TEXT)
            self.flags = ["--model", lmt.GGUF, "--data", text, "--seq-len", "16", "--batch", "4",
                          *lmt.WORKERS["workers_lora"][0], "--timing=false"]
            self.ref_workers = 1
        self.flags += ["--threads", "2", "--journal=false"]

    def args(self, n, metrics, tag):
        return self.flags + ["--workers", str(n), "--metrics", metrics,
                             "--checkpoint-dir", os.path.join(self.ck, tag)]

    def reference(self, n):
        w = self.ref_workers or n
        m = os.path.join(self.tmp, f"one{w}.csv")
        r = subprocess.run([self.exe] + self.args(w, m, f"one{w}"), capture_output=True, text=True,
                           timeout=100, cwd=self.tmp, env=clean_env())
        check(r.returncode == 0, f"{self.name}: one process with --workers {w} exited "
              f"{r.returncode}", r.stderr[-3000:])
        return read_metrics(m)

    def check_like(self, tag, n, metrics, ref):
        """rank 0's metrics: every step once, the losses within 1e-6 relative."""
        rows = read_metrics(metrics)
        steps = [int(r["step"]) for r in rows]
        check(len(steps) == len(set(steps)), f"{tag}: duplicate rows in the metrics CSV", steps)
        check(len(rows) == len(ref) and len(rows) >= 3, f"{tag}: {len(rows)} metrics rows, one "
              f"process wrote {len(ref)}")
        worst = max(abs(float(a["loss"]) - float(b["loss"])) / max(abs(float(b["loss"])), 1e-12)
                    for a, b in zip(rows, ref))
        check(worst <= 1e-6, f"{tag}: step losses differ from one process's (--workers "
              f"{self.ref_workers or n}) by {worst:g} relative (> 1e-6)",
              f"launched: {[r['loss'] for r in rows]}\none process: {[r['loss'] for r in ref]}")
        print(f"{tag}: {len(rows)} steps, largest relative loss difference {worst:g}")

    def close(self):
        shutil.rmtree(self.ck, ignore_errors=True)


def mpirun_example(sflowc, tmp, name, n):
    """`mpirun -np N` of examples/finetune or lm_finetune with --workers N:
    rank 0's metrics are one process's (Example)."""
    mpirun = open_mpi_mpirun()
    ex = Example(sflowc, tmp, name)
    try:
        ref = ex.reference(n)
        run = os.path.join(tmp, "mpi")
        os.makedirs(run)
        metrics = os.path.join(run, "metrics.csv")
        env = clean_env(OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1,
                        SFLOW_SECRET_FILE=secret_file(tmp))
        r = subprocess.run([mpirun, "--oversubscribe", "-np", str(n), "-x", "SFLOW_SECRET_FILE",
                            "--wdir", run, ex.exe] + ex.args(n, metrics, "mpi"),
                           capture_output=True, text=True, env=env, timeout=110)
        check(r.returncode == 0, f"mpirun -np {n} exited {r.returncode}",
              (r.stdout + r.stderr)[-3000:])
        ex.check_like(f"mpirun_{name}_{n}", n, metrics, ref)
    finally:
        ex.close()

CASES = {
    "env_digits_2": lambda s, t: case_env_digits(s, t, 2),
    "env_digits_4": lambda s, t: case_env_digits(s, t, 4),
    "mpirun_digits_2": lambda s, t: case_mpirun_digits(s, t, 2),
    "mpirun_digits_4": lambda s, t: case_mpirun_digits(s, t, 4),
    "mpich_digits_2": lambda s, t: case_mpich_digits(s, t, 2),
    "mpich_digits_4": lambda s, t: case_mpich_digits(s, t, 4),
    "slurm_env_2": case_slurm_env_2,
    "wrong_secret": case_wrong_secret,
    "secret_refused": case_secret_refused,
    "nested_not_rank": case_nested_not_rank,
    "rank_killed": case_rank_killed,
    "head_killed_resume": case_head_killed_resume,
    "trace_2": case_trace_2,
    "pmi_rendezvous_2": case_pmi_rendezvous_2,
    "bind_master_addr": case_bind_master_addr,
    "mpirun_finetune_2": lambda s, t: mpirun_example(s, t, "finetune", 2),
    "mpirun_finetune_4": lambda s, t: mpirun_example(s, t, "finetune", 4),
    "mpirun_lm_finetune_2": lambda s, t: mpirun_example(s, t, "lm_finetune", 2),
    "mpirun_lm_finetune_4": lambda s, t: mpirun_example(s, t, "lm_finetune", 4),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    tmp = tempfile.mkdtemp(prefix="sflow-launch-")
    try:
        CASES[a.case](a.sflowc, tmp)
    except Fail as e:
        print(f"FAIL {a.case}: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"PASS {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
