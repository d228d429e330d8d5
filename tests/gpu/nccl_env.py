#!/usr/bin/env python3
"""The environment nccl_check gives its two ranks (nccl_check --rank-env
MODE GPUS), checked without a GPU: a caller's SFLOW_NCCL_TIMEOUT reaches
the exact-results and bandwidth runs (bench/gpu/run.sh bounds the NCCL
watchdog so), a bound below the pair's limit stands in when none is set,
the failure checks get their own short one, and both ranks talk over the
loopback without InfiniBand unless the caller names other settings.

Usage: nccl_env.py NCCL_CHECK
"""
import os, subprocess, sys

exe = sys.argv[1]
fails = []


def env_of(mode, gpus, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NCCL_") and k != "SFLOW_NCCL_TIMEOUT"}
    env.update(extra)
    out = subprocess.run([exe, "--rank-env", mode, str(gpus)], capture_output=True, text=True,
                         env=env, timeout=30, check=True).stdout
    return dict(l.split("=", 1) for l in out.splitlines() if "=" in l)


def want(got, key, value, what):
    ok = got.get(key) == value
    print(("ok   " if ok else "FAIL ") + f"{what}: {key}={got.get(key)} (want {value})")
    if not ok:
        fails.append(what)


e = env_of("check", 1, SFLOW_NCCL_TIMEOUT="7")
want(e, "SFLOW_NCCL_TIMEOUT", "7", "check keeps the caller's watchdog bound")
want(e, "NCCL_SOCKET_IFNAME", "lo", "check: sockets over the loopback")
want(e, "NCCL_IB_DISABLE", "1", "check: no InfiniBand")
want(e, "NCCL_HOSTID", "sflow-nccl-check-0", "check on 1 GPU: a host id per rank")
e = env_of("bench", 2)
want(e, "SFLOW_NCCL_TIMEOUT", "290", "bench without a bound: under the pair's 300 s limit")
want(e, "SFLOW_DEVICE", "0", "bench on 2 GPUs: rank 0 on GPU 0")
e = env_of("die", 1, SFLOW_NCCL_TIMEOUT="7", NCCL_SOCKET_IFNAME="eth0")
want(e, "SFLOW_NCCL_TIMEOUT", "5", "die: the failure checks' own bound")
want(e, "NCCL_SOCKET_IFNAME", "eth0", "die: the caller's interface is kept")
sys.exit(f"nccl_env: {len(fails)} check(s) failed" if fails else 0)
