#!/usr/bin/env python3
"""Multi-node benchmarks against OpenMPI on the same simulated hosts.

Starts 8 sshd servers on 127.0.0.2..9 (one port shared by all, since an
OpenMPI hostfile has no per-host port), with the keys and known_hosts of
tests/cluster, then measures:

  start-up   `prog --nodes hostsN --sflow-selftest ready` (connect, host key,
             auth, deploy check, exec, HMAC handshake, shutdown) against
             `mpirun --hostfile hostsN -np N true` over the same sshd, for
             N = 1, 2, 4, 8; median of --runs runs, after one warm-up each.
  allreduce  float sums from 1 KB to 256 MB on 4 nodes: sflow's TCP
             collectives (--sflow-selftest allreduce) against MPI_Allreduce
             (bench/cluster/mpi_allreduce.c) with mpirun over the same hosts,
             interleaved in --repeat rounds; median per size and the spread.

    python3 bench/cluster/run.py --sflowc build/bin/sflowc [--runs 5] [--quick]
        [--only startup|allreduce] [--repeat 3] [--nodes 4] [--sizes B,B,...]
        [--before OLD_SFLOWC] [--no-mpi] [--mpi-no-barrier]

--before compiles the same program with another sflowc (an older build) and
times its allreduce in the same rounds, for before/after tables.
Both sides start every timed call from a barrier (sflow's selftest in
runtime/cluster/worker_main.c, group_job, and bench/cluster/mpi_allreduce.c);
--mpi-no-barrier drops MPI's, for comparisons with older sflow builds,
whose selftest had none.

Needs openssh-server, and openmpi-bin + libopenmpi-dev for the peer
(installed here by `apt-get install openmpi-bin libopenmpi-dev`; when mpirun
is missing only sflow's figures are printed).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "cluster"))
import cluster_test as ct  # noqa: E402


def hostfile(c, n, mpi=False):
    path = os.path.join(c.dir, f"hosts{n}{'.mpi' if mpi else ''}")
    with open(path, "w") as f:
        for addr, port, _ in c.hosts[:n]:
            f.write(f"{addr} slots=1\n" if mpi else f"[{addr}]:{port}\n")
    return path


def timed(cmd, env=None, timeout=300):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    dt = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}... exit {r.returncode}:\n{r.stderr[-2000:]}")
    return dt, r.stdout


def mpi_base(c, n, port):
    ssh = (f"ssh -p {port} -i {c.user_key} -o UserKnownHostsFile={c.known_hosts} "
           f"-o StrictHostKeyChecking=yes -o BatchMode=yes")
    return ["mpirun", "--allow-run-as-root", "--hostfile", hostfile(c, n, mpi=True),
            "-np", str(n), "--map-by", "node", "--mca", "plm_rsh_agent", ssh,
            "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
            "--mca", "oob_tcp_if_include", "lo", "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "mpi_yield_when_idle", "1"]


def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def kill_orphans(tag):
    """SIGKILL the orted daemons a hung mpirun left, found by this run's
    unique folder on their command line (never by name alone)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if "orted" in cmd and tag in cmd:
            try:
                os.kill(int(d), 9)
            except OSError:
                pass


def mpi_startup(c, n, port, runs):
    """Median mpirun start-up, or None when it hangs (OpenMPI sometimes
    never returns when many daemons start at once on one machine)."""
    mp = mpi_base(c, n, port) + ["true"]
    times = []
    try:
        timed(mp, env=mpi_env(), timeout=60)
        for _ in range(runs):
            times.append(timed(mp, env=mpi_env(), timeout=60)[0])
    except subprocess.TimeoutExpired:
        kill_orphans(c.dir)
        return None, len(times)
    return statistics.median(times), len(times)


def startup(c, port, runs, sizes):
    have_mpi = shutil.which("mpirun") is not None
    print("\n## Start-up (median of %d runs, seconds)\n" % runs)
    print("| nodes | sflow `--nodes` | OpenMPI `mpirun --hostfile` | sflow / mpirun |")
    print("|---:|---:|---:|---:|")
    rows = []
    for n in sizes:
        sf = c.args(hostfile=hostfile(c, n)) + ["--sflow-selftest", "ready"]
        timed(sf)  # warm-up: the executable is copied once, then found by hash
        s = statistics.median(timed(sf)[0] for _ in range(runs))
        m, done = mpi_startup(c, n, port, runs) if have_mpi else (None, 0)
        rows.append((n, s, m))
        if m:
            print(f"| {n} | {s:.3f} | {m:.3f} | {s / m:.2f} |", flush=True)
        elif have_mpi:
            print(f"| {n} | {s:.3f} | hung (> 60 s, after {done} good runs) | - |", flush=True)
        else:
            print(f"| {n} | {s:.3f} | - | - |", flush=True)
    return rows


SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20,
         256 << 20]


def sflow_allreduce(c, prog, n, group, iters):
    """{bytes: (time_us, MB/s)} of one `--sflow-selftest allreduce` run."""
    counts = ",".join(str(b // 4) for b in group)
    _, out = timed(c.args(hostfile=hostfile(c, n), prog=prog) +
                   ["--sflow-selftest", f"allreduce:{counts}:f32:{iters + 1}"], timeout=900)
    res = {}
    for line in out.splitlines():
        m = re.search(r"bytes=(\d+) exact time_us=([\d.]+) algbw_MBps=([\d.]+)", line)
        if not m:
            raise RuntimeError("sflow allreduce failed: " + line)
        res[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return res


def mpi_allreduce(c, port, n, mpi_bin, group, iters, no_barrier=False):
    env = mpi_env()
    env["MPI_ALLREDUCE_NO_BARRIER"] = "1" if no_barrier else "0"
    _, out = timed(mpi_base(c, n, port) + ["-x", "MPI_ALLREDUCE_NO_BARRIER", mpi_bin, str(iters)] +
                   [str(b) for b in group], env=env, timeout=900)
    res = {}
    for line in out.splitlines():
        m = re.search(r"bytes=(\d+) time_us=([\d.]+) algbw_MBps=([\d.]+)", line)
        if m:
            res[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return res


def fmt_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.0f} us"


def allreduce(c, port, n, sizes, repeat, before=None, no_mpi=False, mpi_no_barrier=False):
    """Each round runs every tool once (before, sflow, MPI, interleaved so
    that a burst of load hits all of them); the table shows each tool's
    median time per size over the rounds, and the spread (max/min) of
    sflow's and MPI's times so the noise is visible."""
    have_mpi = shutil.which("mpirun") is not None and shutil.which("mpicc") is not None \
        and not no_mpi
    mpi_bin = os.path.join(c.dir, "mpi_allreduce")
    if have_mpi:
        subprocess.run(["mpicc", "-O2", os.path.join(os.path.dirname(__file__), "mpi_allreduce.c"),
                        "-o", mpi_bin], check=True)
    before_prog = None
    if before:
        before_prog = os.path.join(c.dir, "prog_before")
        subprocess.run([before, os.path.join(c.dir, "prog.sflow"), "-o", before_prog], check=True)
    small = [b for b in sizes if b <= (1 << 20)]
    large = [b for b in sizes if b > (1 << 20)]
    runs = {"sflow": {}, "mpi": {}, "before": {}}
    for r in range(repeat):
        for group, iters in ((small, 50), (large, 3)):
            if not group:
                continue
            todo = [("before", lambda: sflow_allreduce(c, before_prog, n, group, iters))] \
                if before else []
            todo.append(("sflow", lambda: sflow_allreduce(c, None, n, group, iters)))
            if have_mpi:
                todo.append(("mpi", lambda: mpi_allreduce(c, port, n, mpi_bin, group, iters,
                                                          mpi_no_barrier)))
            for name, fn in todo[r % len(todo):] + todo[:r % len(todo)]:
                for b, v in fn().items():
                    runs[name].setdefault(b, []).append(v[0])
    med = {k: {b: statistics.median(v) for b, v in d.items()} for k, d in runs.items()}

    def spread(name, b):
        v = runs[name].get(b)
        return f"{max(v) / min(v):.2f}" if v and len(v) > 1 else "-"

    print(f"\n## Allreduce of float sums, {n} nodes, median of {repeat} rounds "
          "(MB/s = bytes / time; spread = slowest / fastest round)\n")
    head = "| size |" + (" before |" if before else "") + \
        " sflow | sflow MB/s | spread | MPI_Allreduce | MPI MB/s | spread | sflow / MPI |"
    print(head)
    print("|" + "---:|" * (head.count("|") - 1))
    for b in sizes:
        st = med["sflow"][b]
        label = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        row = f"| {label} |" + (f" {fmt_time(med['before'][b])} |" if before else "")
        row += f" {fmt_time(st)} | {b / st:.0f} | {spread('sflow', b)} |"
        if b in med["mpi"]:
            mt = med["mpi"][b]
            row += f" {fmt_time(mt)} | {b / mt:.0f} | {spread('mpi', b)} | {mt / st:.2f} |"
        else:
            row += " - | - | - | - |"
        print(row)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    ap.add_argument("--only", choices=["startup", "allreduce"], help="one of the two benchmarks")
    ap.add_argument("--repeat", type=int, default=3, help="allreduce rounds (median taken)")
    ap.add_argument("--nodes", type=int, default=4, help="allreduce group size (1 to 8)")
    ap.add_argument("--sizes", help="allreduce sizes in bytes, comma-separated")
    ap.add_argument("--before", help="another sflowc (an older build), timed in the same rounds")
    ap.add_argument("--no-mpi", action="store_true", help="sflow only (with --before: A/B runs)")
    ap.add_argument("--mpi-no-barrier", action="store_true",
                    help="time MPI without a barrier before each call (as older selftests did)")
    a = ap.parse_args()
    if not os.path.exists(ct.SSHD):
        print("bench/cluster: needs openssh-server; skipped")
        return 0
    port = ct.free_port("127.0.0.2")
    c = ct.Cluster(a.sflowc, 8, port=port)
    try:
        print(f"# bench/cluster on {os.uname().nodename}: {os.cpu_count()} cores, "
              f"8 sshd on 127.0.0.2-9:{port}")
        if a.only != "allreduce":
            startup(c, port, 2 if a.quick else a.runs, [1, 2, 4, 8])
        if a.only != "startup":
            sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else \
                SIZES[:7] if a.quick else SIZES
            allreduce(c, port, a.nodes, sizes, 1 if a.quick else a.repeat, a.before,
                      a.no_mpi, a.mpi_no_barrier)
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
