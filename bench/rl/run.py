#!/usr/bin/env python3
"""run.py — issue 20's RL benchmarks, sflow beside Python on this machine,
in one run:

    python3 bench/rl/run.py [--build build] [--peers DIR] [--threads N]

1. Environment steps/s: bench/rl/envsteps.sflow (std.rl's CartPole-v1 in
   runner actors, random actions) beside Gymnasium's SyncVectorEnv
   (bench/rl/peer.py envsteps), for 4 environments (2 runners of 2 in
   sflow, CleanRL's count) and 64 (2 runners of 32).
2. Wall time to solve CartPole-v1: examples/cartpole.sflow beside a
   CleanRL-style PPO in PyTorch (peer.py ppo), the same hyperparameters,
   the same stopping rule (greedy evaluation on 100 episodes once the last
   20 training returns average 400; solved at a mean >= 475), seed 1.

Sets up the peer first (bench/rl/setup.sh: PyTorch and Gymnasium in
build/peers/torch, or --peers; network once).  Both sides get --threads
(sflow's --threads, OMP_NUM_THREADS and torch.set_num_threads for torch).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "bench", "rl")


def sh(cmd, env=None, tail=20):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("bench/rl: %s failed (%d)\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    sys.stdout.write("".join(p.stdout.splitlines(True)[-tail:]))
    return p.stdout


def num(pattern, text):
    return float(re.search(pattern, text).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--peers", default=None)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    peers = a.peers or os.path.join(a.build, "peers", "torch")
    subprocess.run(["bash", os.path.join(HERE, "setup.sh"), peers], check=True)
    py = os.path.join(peers, "venv", "bin", "python")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    sflowc = os.path.join(a.build, "bin", "sflowc")
    thr = ["--threads", str(a.threads), "--quiet"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sflow-bench-rl-") as tmp:
        steps = os.path.join(tmp, "envsteps")
        cart = os.path.join(tmp, "cartpole")
        sh([sflowc, os.path.join(HERE, "envsteps.sflow"), "-o", steps])
        sh([sflowc, os.path.join(ROOT, "examples", "cartpole.sflow"), "-o", cart])
        for envs, per in ((4, 2), (64, 32)):
            s = sh([steps, "--runners", "2", "--envs", str(per), "--steps",
                    str(4000000 // envs)] + thr)
            g = sh([py, os.path.join(HERE, "peer.py"), "envsteps", "--envs", str(envs),
                    "--steps", str(100000 // envs)], env)
            rs, rg = num(r"([0-9]+) steps/s", s), num(r"([0-9.]+) steps/s", g)
            rows.append(("env steps/s, %d envs" % envs, "%.0f" % rs, "%.0f" % rg,
                         "%.0fx" % (rs / rg)))
        s = sh([cart, "--journal=false"] + thr, tail=4)
        g = sh([py, os.path.join(HERE, "peer.py"), "ppo", "--threads", str(a.threads)], env)
        ss, gs = num(r"; ([0-9.]+) s", s), num(r" in ([0-9.]+) s", g)
        rows.append(("seconds to solve CartPole-v1", "%.1f" % ss, "%.1f" % gs, "%.1fx" % (gs / ss)))
        rows.append(("steps to solve", "%d" % num(r"solved after ([0-9]+) steps", s)
                     if "solved after" in s else "-", "%d" % num(r"after ([0-9]+) steps", g), ""))
    print()
    print("| %-30s | %12s | %12s | %8s |" % ("figure", "sflow", "python", "sflow is"))
    print("|%s|%s|%s|%s|" % ("-" * 32, "-" * 14, "-" * 14, "-" * 10))
    for r in rows:
        print("| %-30s | %12s | %12s | %8s |" % r)


if __name__ == "__main__":
    main()
