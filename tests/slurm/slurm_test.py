#!/usr/bin/env python3
"""slurm_test.py — sflow runs under a private, real Slurm (harness.py).

    slurm_test.py --sflowc PATH CASE     run one case
    slurm_test.py --list                 the case names

srun_digits: `srun -n1` of examples/digits prints what the plain run prints;
  srun_digits_2/_4: `srun -n2/-n4` train like one process with --workers 2/4.
srun_2nodes_digits_4: `srun -N2 -n4` over two nodes, the second slurmd in a
  network namespace (harness.py, Slurm(nodes=2)), like --workers 4.
srun_lm_finetune_2/_4: `srun -n2/-n4` of the LoRA lm_finetune with
  --workers N give one worker's step losses within 1e-6 relative.
srun_finetune_2/_4: `srun -n2/-n4` of examples/finetune (MiniLM, 3 steps on
  two fortune categories) give one process's --workers N step losses within
  1e-6 relative, every step once in the metrics CSV.
sbatch_requeue_srun2: the same requeue with `srun -n2` in the script.
sbatch_requeue: an `sbatch --requeue` job running digits with a journal gets
  `scancel --signal=TERM` mid-run, exits 75, which RequeueExit=75 requeues;
  the requeued job's `--resume` prints exactly the uninterrupted output.
kill_term_resume: outside Slurm, `kill -TERM` mid-run gives exit 75 and a
  journal from which `--resume` prints the uninterrupted output.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Fail, Slurm, check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Long enough to be stopped mid-run (about 1.5 s alone; every 5 epochs a line).
DIGITS_ARGS = ["--epochs", "400", "--verbose", "--path", os.path.join(ROOT, "examples/data/digits.csv")]


def build_digits(sflowc, work):
    exe = os.path.join(work, "digits")
    r = subprocess.run([sflowc, os.path.join(ROOT, "examples/digits.sflow"), "-o", exe],
                       capture_output=True, text=True)
    check(r.returncode == 0, "sflowc failed", r.stderr)
    return exe


def plain(exe, work, *args):
    r = subprocess.run([exe, *args, "--checkpoint-dir", os.path.join(work, "plain-ckpt")],
                       capture_output=True, text=True, timeout=60, cwd=work)
    check(r.returncode == 0, f"the plain run exited {r.returncode}", r.stderr)
    return r.stdout


def wait_lines(path, n, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with open(path) as f:
                if len(f.readlines()) >= n:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise Fail(f"{what}: fewer than {n} lines in {path} after {seconds} s")


def case_srun_digits(sflowc, work):
    exe = build_digits(sflowc, work)
    want = plain(exe, work)
    with Slurm() as s:
        r = s.cmd("srun", "-n1", "--chdir", work, exe, "--checkpoint-dir",
                  os.path.join(work, "srun-ckpt"), timeout=60)
        check(r.stdout == want, "srun -n1 printed other output than the plain run",
              "srun:\n" + r.stdout, "plain:\n" + want, r.stderr)


def case_kill_term_resume(sflowc, work):
    exe = build_digits(sflowc, work)
    want = plain(exe, work, *DIGITS_ARGS)
    ckpt = os.path.join(work, "ckpt")
    cut = os.path.join(work, "cut.out")
    with open(cut, "w") as out:
        p = subprocess.Popen([exe, *DIGITS_ARGS, "--checkpoint-dir", ckpt], stdout=out,
                             stderr=subprocess.PIPE, text=True)
    # A few epochs in: well before its end, after its first records.
    time.sleep(0.4)
    p.send_signal(signal.SIGTERM)
    err = p.communicate(timeout=30)[1]
    check(p.returncode == 75, f"SIGTERM mid-run: exit {p.returncode}, not 75", err)
    check("journal synced" in err, "no notice of the synced journal", err)
    check(os.path.exists(os.path.join(ckpt, "journal")), "no journal left to resume from", err)
    r = subprocess.run([exe, *DIGITS_ARGS, "--checkpoint-dir", ckpt, "--resume"], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, f"--resume exited {r.returncode}", r.stderr)
    check(r.stdout == want, "--resume after SIGTERM printed other output than the plain run",
          r.stdout, want)
    check("answered from the journal" in r.stderr, "the resume answered nothing from the journal",
          r.stderr)


BATCH = """#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=truncate
#SBATCH --signal=B:USR1@30
# The same command on the first run and after a requeue: --resume starts
# from the beginning when there is nothing to resume.  exec: the signal
# goes to the program itself, and its exit 75 is the job's.
exec {exe} {args} --checkpoint-dir {work}/ckpt-$SLURM_JOB_ID --resume
"""


# Two ranks in one step: scancel --signal=TERM reaches both; rank 0 syncs
# and exits 75, rank 1 exits 75, and the script passes srun's status on.
BATCH_SRUN = """#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=truncate
#SBATCH --ntasks=2
srun -n2 {exe} --workers 2 {args} --checkpoint-dir {work}/ckpt-$SLURM_JOB_ID --resume
exit $?
"""


def case_sbatch_requeue(sflowc, work, ranks=1):
    exe = build_digits(sflowc, work)
    want = plain(exe, work, *DIGITS_ARGS, *(["--workers", "2"] if ranks > 1 else []))
    os.chmod(work, 0o755)
    script = os.path.join(work, "job.sh")
    with open(script, "w") as f:
        f.write((BATCH_SRUN if ranks > 1 else BATCH).format(exe=exe, args=" ".join(DIGITS_ARGS),
                                                             work=work))
    out = os.path.join(work, "job.out")
    secret = os.path.join(work, "job.secret")
    with open(secret, "w") as f:
        f.write("sbatch-requeue-secret-0123456789abcdefghij\n")
    os.chmod(secret, 0o600)
    with Slurm() as s:
        r = s.cmd("sbatch", "--parsable", "--chdir", work, "--output", out,
                  "--error", os.path.join(work, "job.err"), script,
                  env={"SFLOW_SECRET_FILE": secret})
        jobid = r.stdout.strip().split(";")[0]
        wait_lines(out, 3, 30, "the job did not start printing")
        if ranks > 1:
            s.cmd("scancel", "--signal=TERM", jobid)  # the steps: every rank
        else:
            s.cmd("scancel", "--signal=TERM", "--batch", jobid)
        # A requeued job is held back: Slurm gives it a BeginTime in the
        # future (now + about 120 s, Reason=BeginTime).  The test moves it.
        seen = []
        released = False
        deadline = time.time() + 60
        while True:
            j = s.job(jobid)
            seen.append((j.get("JobState"), j.get("Reason"), j.get("Restarts")))
            if j.get("JobState") == "PENDING" and j.get("Restarts") == "1" and not released:
                s.cmd("scontrol", "update", f"JobId={jobid}", "StartTime=now")
                released = True
            if j.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            check(time.time() < deadline, "the job did not finish in 60 s", seen[-5:], s.logs())
            time.sleep(0.2)
        check(j.get("JobState") == "COMPLETED" and j.get("ExitCode") == "0:0",
              f"job ended {j.get('JobState')} {j.get('ExitCode')}", seen[-5:], s.logs())
        check(j.get("Restarts") == "1", f"the job ran {j.get('Restarts')} restarts, not 1 requeue",
              seen)
        with open(out) as f:
            got = f.read()
        with open(os.path.join(work, "job.err")) as f:
            err = f.read()
        check("answered from the journal" in err, "the requeued run resumed nothing", err)
        check(got == want, "the requeued job printed other output than the plain run",
              "job:\n" + got, "plain:\n" + want)


def case_srun_ranks(sflowc, work, n, nodes=1):
    """srun -n N of digits is one run: rank 0 the head, the others its
    workers (the launch detection, docs/cluster.md "Started by a
    launcher"), training like one process with --workers N.  nodes=2:
    `srun -N2 -n N` over the harness's two nodes, the second in a network
    namespace: ranks N/2.. run there (checked first by their network
    namespaces) and reach rank 0 over the veth, at the first host of
    Slurm's node list 10.A.B.[1-2]."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "launch"))
    import launch_test as lt
    d = lt.Digits(sflowc, work)
    ref_out, ref_rows = d.single(n)
    secret = lt.secret_file(work)
    run = os.path.join(work, "srun")
    os.makedirs(run)
    metrics = os.path.join(run, "metrics.csv")
    spread = ["-N", str(nodes)] if nodes > 1 else []
    with Slurm(cpus=n // nodes if nodes > 1 else 4, nodes=nodes) as s:
        if nodes > 1:
            r = s.cmd("srun", *spread, "-n", str(n), "-l", "sh", "-c",
                      "echo $SLURMD_NODENAME $(readlink /proc/self/ns/net)", timeout=30)
            where = dict(line.split(": ", 1) for line in r.stdout.splitlines())
            per = n // nodes
            got = [where[str(k)].split() for k in range(n)]
            check([g[0] for g in got] == [s.addrs[k // per] for k in range(n)],
                  f"srun -N{nodes} -n{n}: the tasks are not {per} a node in order", r.stdout)
            check(got[0][1] != got[n - 1][1], "the second node's tasks share the first's network "
                  "namespace", r.stdout)
        r = subprocess.run(["srun", *spread, "-n", str(n), "--chdir", run, "--output",
                            run + "/out.%t", "--error", run + "/err.%t", d.exe,
                            *d.args(n, metrics, os.path.join(run, "w.safetensors")),
                            *(["--cluster-log"] if nodes > 1 else [])],
                           capture_output=True, text=True, timeout=80,
                           env=s.env(lt.clean_env(SFLOW_SECRET_FILE=secret)))
        outs = []
        for k in range(n):
            with open(os.path.join(run, f"out.{k}")) as f:
                outs.append(f.read())
        with open(os.path.join(run, "err.0")) as f:
            err0 = f.read()
        check(r.returncode == 0, f"srun -n{n} exited {r.returncode}", r.stderr, err0[-3000:])
        if nodes > 1:
            m = lt.re.search(r"^sflow: Slurm rank 0 of %d: control plane listening on %s:\d+$" %
                             (n, lt.re.escape(s.addrs[0])), err0, lt.re.M)
            check(m, "rank 0 does not listen on the first node's address", err0[-3000:])
            m = lt.re.search(r"^sflow: group 'Worker' placed on nodes ([\d,]+)$", err0, lt.re.M)
            check(m and sorted(set(int(x) for x in m.group(1).split(","))) == list(range(1, n)),
                  "the group is not on every other rank", err0[-3000:])
    strip = lambda t: lt.re.sub(r" to \S+w\.safetensors$", " to W", t, flags=lt.re.M)
    check(strip(outs[0]) == strip(ref_out), f"srun -n{n}: rank 0 printed other than one process "
          f"with --workers {n}", outs[0], ref_out, err0[-2000:])
    for k in range(1, n):
        check(outs[k] == "", f"srun -n{n}: rank {k} printed to its stdout", outs[k])
    rows = lt.read_metrics(metrics)
    steps = [int(x["step"]) for x in rows]
    check(len(steps) == len(set(steps)), f"srun -n{n}: duplicate rows in the metrics CSV")
    check(len(rows) == len(ref_rows), f"srun -n{n}: {len(rows)} metrics rows, not {len(ref_rows)}")
    worst = max(abs(float(a["loss"]) - float(b["loss"])) for a, b in zip(rows, ref_rows))
    check(worst <= 1e-6, f"srun -n{n}: losses differ from one process's by {worst:g}")
    print(f"srun {' '.join(spread + ['-n', str(n)])}: {len(rows)} steps, largest loss "
          f"difference {worst:g}")


def case_srun_example(sflowc, work, name, n):
    """srun -n N of examples/finetune (MiniLM) or examples/lm_finetune (LoRA
    on SmolLM2) with --workers N: rank 0's step losses are one process's
    within 1e-6 relative (launch_test.Example says which run's), every
    step once in the metrics CSV, which only rank 0 writes."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "launch"))
    import launch_test as lt
    ex = lt.Example(sflowc, work, name)
    try:
        ref = ex.reference(n)
        run = os.path.join(work, "srun")
        os.makedirs(run)
        metrics = os.path.join(run, "metrics.csv")
        secret = lt.secret_file(work)
        with Slurm() as s:
            r = subprocess.run(["srun", "-n", str(n), "--chdir", run, "--output", run + "/out.%t",
                                "--error", run + "/err.%t", ex.exe,
                                *ex.args(n, metrics, "srun")],
                               capture_output=True, text=True, timeout=110,
                               env=s.env(lt.clean_env(SFLOW_SECRET_FILE=secret)))
            with open(os.path.join(run, "err.0")) as f:
                err0 = f.read()
            check(r.returncode == 0, f"srun -n{n} exited {r.returncode}", r.stderr,
                  err0[-3000:])
        ex.check_like(f"srun_{name}_{n}", n, metrics, ref)
    finally:
        ex.close()


CASES = {
    "srun_digits": case_srun_digits,
    "sbatch_requeue": case_sbatch_requeue,
    "kill_term_resume": case_kill_term_resume,
    "sbatch_requeue_srun2": lambda sflowc, work: case_sbatch_requeue(sflowc, work, 2),
    "srun_digits_2": lambda sflowc, work: case_srun_ranks(sflowc, work, 2),
    "srun_digits_4": lambda sflowc, work: case_srun_ranks(sflowc, work, 4),
    "srun_2nodes_digits_4": lambda sflowc, work: case_srun_ranks(sflowc, work, 4, nodes=2),
    "srun_lm_finetune_2": lambda sflowc, work: case_srun_example(sflowc, work, "lm_finetune", 2),
    "srun_lm_finetune_4": lambda sflowc, work: case_srun_example(sflowc, work, "lm_finetune", 4),
    "srun_finetune_2": lambda sflowc, work: case_srun_example(sflowc, work, "finetune", 2),
    "srun_finetune_4": lambda sflowc, work: case_srun_example(sflowc, work, "finetune", 4),
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
    if a.case not in CASES or not a.sflowc:
        ap.error("--sflowc PATH CASE (one of " + ", ".join(CASES) + ")")
    work = tempfile.mkdtemp(prefix="sflow-slurmcase-")
    try:
        t0 = time.time()
        CASES[a.case](a.sflowc, work)
        print(f"{a.case}: ok in {time.time() - t0:.1f} s")
        return 0
    except Exception as e:  # harness.Fail, or launch_test.Fail from its helpers
        if type(e).__name__ != "Fail":
            raise
        print(f"{a.case}: FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
