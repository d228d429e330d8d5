#!/usr/bin/env python3
"""Multi-node benchmarks against OpenMPI on the same simulated hosts.

Starts 8 sshd servers on 127.0.0.2..9 (one port shared by all, since an
OpenMPI hostfile has no per-host port), with the keys and known_hosts of
tests/cluster, then measures:

  start-up   `prog --nodes hostsN --sflow-selftest ready` (connect, host key,
             auth, deploy check, exec, HMAC handshake, shutdown) against
             `mpirun --hostfile hostsN -np N true` over the same sshd, for
             N = 1, 2, 4, 8; median of --runs runs, after one warm-up each.
  allreduce  float sums from 1 KB to 256 MB on 4 nodes: sflow's TCP ring
             (--sflow-selftest allreduce) against MPI_Allreduce
             (bench/cluster/mpi_allreduce.c) with mpirun over the same hosts.

    python3 bench/cluster/run.py --sflowc build/bin/sflowc [--runs 5] [--quick]

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
            f.write(f"{addr} slots=1\n" if mpi else f"{addr}:{port}\n")
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


def allreduce(c, port, n, sizes):
    have_mpi = shutil.which("mpirun") is not None and shutil.which("mpicc") is not None
    mpi_bin = os.path.join(c.dir, "mpi_allreduce")
    if have_mpi:
        subprocess.run(["mpicc", "-O2", os.path.join(os.path.dirname(__file__), "mpi_allreduce.c"),
                        "-o", mpi_bin], check=True)
    small = [b for b in sizes if b <= (1 << 20)]
    large = [b for b in sizes if b > (1 << 20)]
    sf, mp = {}, {}
    for group, iters in ((small, 50), (large, 3)):
        if not group:
            continue
        counts = ",".join(str(b // 4) for b in group)
        _, out = timed(c.args(hostfile=hostfile(c, n)) +
                       ["--sflow-selftest", f"allreduce:{counts}:f32:{iters + 1}"], timeout=900)
        for line in out.splitlines():
            m = re.search(r"bytes=(\d+) exact time_us=([\d.]+) algbw_MBps=([\d.]+)", line)
            if not m:
                raise RuntimeError("sflow allreduce failed: " + line)
            sf[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
        if have_mpi:
            _, out = timed(mpi_base(c, n, port) + [mpi_bin, str(iters)] + [str(b) for b in group],
                           env=mpi_env(), timeout=900)
            for line in out.splitlines():
                m = re.search(r"bytes=(\d+) time_us=([\d.]+) algbw_MBps=([\d.]+)", line)
                if m:
                    mp[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    print(f"\n## Allreduce of float sums, {n} nodes (algorithm bandwidth = bytes / time, MB/s)\n")
    print("| size | sflow ring time | sflow MB/s | MPI_Allreduce time | MPI MB/s | sflow / MPI |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in sizes:
        st, sb = sf[b]
        label = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        if b in mp:
            mt, mb = mp[b]
            print(f"| {label} | {st:.0f} us | {sb:.0f} | {mt:.0f} us | {mb:.0f} | {sb / mb:.2f} |")
        else:
            print(f"| {label} | {st:.0f} us | {sb:.0f} | - | - | - |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    a = ap.parse_args()
    if not os.path.exists(ct.SSHD):
        print("bench/cluster: needs openssh-server; skipped")
        return 0
    port = ct.free_port("127.0.0.2")
    c = ct.Cluster(a.sflowc, 8, port=port)
    try:
        print(f"# bench/cluster on {os.uname().nodename}: {os.cpu_count()} cores, "
              f"8 sshd on 127.0.0.2-9:{port}")
        startup(c, port, 2 if a.quick else a.runs, [1, 2, 4, 8])
        allreduce(c, port, 4, SIZES[:7] if a.quick else SIZES)
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
