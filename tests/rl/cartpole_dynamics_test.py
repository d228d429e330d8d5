#!/usr/bin/env python3
"""std.rl's CartPole-v1 steps as Gymnasium's does (docs/rl.md, "CartPole-v1").

Reads tests/rl/cartpole_reference.json (scripts/gen_rl_reference.py ran
Gymnasium 1.2.2 from committed start states with committed actions), writes
one sflow program that puts rl.cartpole(1) in each start state and takes the
same actions, runs it, and compares every step: the observation the step
reached (final_obs, which is Gymnasium's obs also on the last step) within
--tol (default 1e-6, f32 precision for values below 4), the reward, terminated
and truncated exactly, and the episode's length.  Prints the largest
difference and how many values were bit-equal.

Usage: cartpole_dynamics_test.py --sflowc PATH [--reference JSON] [--tol T]
"""
import argparse
import json
import struct
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def f32(text):
    """The f32 that sflow printed as its shortest round-trip text."""
    return struct.unpack("f", struct.pack("f", float(text)))[0]


def program(cases):
    out = ["import std.rl", ""]
    for c, case in enumerate(cases):
        acts = ", ".join(str(s["action"]) for s in case["steps"])
        out.append("fn case%d() {" % c)
        out.append("  var env = rl.cartpole(1)")
        out.append("  rl.set_state(env, 0, [%s])" % ", ".join(case["start"]))
        out.append("  let acts: i64[] = [%s]" % acts)
        out.append("  for a in acts {")
        out.append("    let s = rl.step(env, a)")
        out.append("    print(%d, s.final_obs, s.reward[0], s.terminated[0], s.truncated[0])" % c)
        out.append("  }")
        out.append("}")
    out.append("workflow main() {")
    out += ["  case%d()" % c for c in range(len(cases))]
    out.append("}")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--reference", default=os.path.join(HERE, "cartpole_reference.json"))
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args()
    ref = json.load(open(a.reference))
    cases = ref["cases"]
    with tempfile.TemporaryDirectory(prefix="sflow-rl-") as tmp:
        src = os.path.join(tmp, "dyn.sflow")
        open(src, "w").write(program(cases))
        exe = os.path.join(tmp, "dyn")
        subprocess.run([a.sflowc, src, "-o", exe], check=True)
        p = subprocess.run([exe, "--quiet"], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            print("FAIL the program exited %d\n%s" % (p.returncode, p.stderr))
            return 1
    got = {}
    for line in p.stdout.splitlines():
        c, rest = line.split(" ", 1)
        obs, tail = rest[1:].split("] ")
        r, term, trunc = tail.split()
        got.setdefault(int(c), []).append(([f32(v) for v in obs.split(", ")], float(r),
                                           term == "true", trunc == "true"))
    fails, worst, equal, total = 0, 0.0, 0, 0
    for c, case in enumerate(cases):
        mine = got.get(c, [])
        if len(mine) != len(case["steps"]):
            print("FAIL case %d: %d steps, Gymnasium %d" % (c, len(mine), len(case["steps"])))
            fails += 1
            continue
        for k, (s, (obs, r, term, trunc)) in enumerate(zip(case["steps"], mine)):
            d = max(abs(x - y) for x, y in zip(obs, s["obs"]))
            worst = max(worst, d)
            equal += sum(1 for x, y in zip(obs, s["obs"]) if x == y)
            total += 4
            flags = (r, term, trunc) == (s["reward"], s["terminated"], s["truncated"])
            if d > a.tol or not flags:
                print("FAIL case %d step %d: sflow %s %s %s %s, Gymnasium %s %s %s %s"
                      % (c, k, obs, r, term, trunc, s["obs"], s["reward"], s["terminated"],
                         s["truncated"]))
                fails += 1
                break
    print("cartpole dynamics: %d cases, %d steps, max |obs diff| %.3g, %d of %d values bit-equal"
          % (len(cases), total // 4, worst, equal, total))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
