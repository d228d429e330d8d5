#!/usr/bin/env python3
"""Task throughput across nodes: bench/cluster/tasks.sflow on 1 machine
(no --nodes), then with --nodes on 1, 2 and 4 simulated nodes (sshd on
127.0.0.2..5, keys and known_hosts of tests/cluster), the head only
placing work (--head-runs-work=false) so N is the number of nodes running
tasks, and also with the head working.  Three loads: empty tasks (what the
placement, frames and serializer cost per task), tasks that are busy
for 1 ms, and a reduce tree (bench/cluster/tree.sflow: 16384 leaves and
16383 calls taking two futures each, what waiting for future arguments
costs).  Median of --runs runs; the program times its own map with
now(), so start-up is not counted.

    python3 bench/cluster/tasks.py --sflowc build/bin/sflowc [--runs 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "cluster"))
import cluster_test as ct  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def rate(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}:\n{r.stderr[-2000:]}")
    m = re.search(r"(?:tasks|tree) (\d+) sum (\d+) seconds (\S+) per_second (\S+)", r.stdout)
    return float(m.group(4)), int(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    c = ct.Cluster(a.sflowc, 4)
    try:
        with open(os.path.join(HERE, "tasks.sflow")) as f:
            exe = c.compile("tasks", f.read())
        with open(os.path.join(HERE, "tree.sflow")) as f:
            tree = c.compile("tree", f.read())
        files = {}
        for n in (1, 2, 4):
            files[n] = os.path.join(c.dir, f"hosts{n}")
            with open(files[n], "w") as f:
                for addr, port, _ in c.hosts[:n]:
                    f.write(f"[{addr}]:{port}\n")
        loads = [("empty tasks", ["--n", "20000", "--us", "0"], exe),
                 ("1 ms tasks", ["--n", "2000", "--us", "1000"], exe),
                 ("reduce tree (future args)", ["--n", "16384"], tree)]
        print(f"{os.cpu_count()} CPUs; median of {a.runs} runs; tasks/s")
        print(f"| nodes | {' | '.join(l for l, _, _ in loads)} |")
        print(f"| --- | {' | '.join('---' for _ in loads)} |")
        setups = [("1 machine, no --nodes", None, [])]
        for n in (1, 2, 4):
            setups.append((f"{n} worker node{'s' if n > 1 else ''}", files[n],
                           ["--head-runs-work=false"]))
        setups.append(("head + 2 worker nodes", files[2], []))
        for name, hosts, extra in setups:
            cells = []
            for _, load, prog in loads:
                rates, sums = [], set()
                for _ in range(a.runs):
                    cmd = [prog, "--quiet", *load, *extra]
                    if hosts:
                        cmd = c.args(*load, *extra, "--quiet", prog=prog, hostfile=hosts)
                    r, s = rate(cmd)
                    rates.append(r)
                    sums.add(s)
                if len(sums) != 1:
                    raise RuntimeError(f"{name}: sums differ: {sums}")
                cells.append(f"{statistics.median(rates):,.0f}")
            print(f"| {name} | {' | '.join(cells)} |", flush=True)
        c.expect_no_workers()
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
