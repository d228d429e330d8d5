#!/usr/bin/env python3
"""gen_rl_reference.py — the committed references std.rl's tests compare with.

    build/peers/torch/venv/bin/python scripts/gen_rl_reference.py [--only dynamics|ppo] [--out DIR]

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

The files are deterministic: running the script twice gives the same bytes
(ctest rl/references_regen checks the committed ones against a fresh run).
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
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["dynamics", "ppo"])
    ap.add_argument("--out", help="folder to write to (default tests/rl)")
    a = ap.parse_args()
    global OUT
    if a.out:
        OUT = os.path.abspath(a.out)
    if a.only in (None, "dynamics"):
        dynamics()
    if a.only in (None, "ppo"):
        ppo_reference()


def ppo_reference():
    """CleanRL ppo.py's Agent (layer_init: orthogonal, biases 0) from a fixed
    torch seed, and a fixed batch of 64 rows: observations, actions, old
    log-probabilities and values that differ from the agent's own by noise
    (so ratios leave [0.8, 1.2] and the value clip acts), advantages and
    returns.  Records CleanRL's loss on it — normalised advantages, the
    clipped surrogate, the clipped value loss, the entropy bonus, with
    clip 0.2, ent 0.01, vf 0.5 — its parts, approx_kl, clipfrac, and every
    parameter's gradient.  Parameter names are the sflow field paths
    (critic.fc1.weight for CleanRL's critic.0.weight)."""
    import torch
    import torch.nn as tnn
    torch.manual_seed(20)

    def layer_init(layer, std=math.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer

    def mlp(outs, std):
        return tnn.Sequential(layer_init(tnn.Linear(4, 64)), tnn.Tanh(),
                              layer_init(tnn.Linear(64, 64)), tnn.Tanh(),
                              layer_init(tnn.Linear(64, outs), std=std))
    critic, actor = mlp(1, 1.0), mlp(2, 0.01)
    # A trained policy is far from uniform: scale the policy head up so the
    # batch's probabilities, ratios and entropy are not all near their
    # starting values.
    with torch.no_grad():
        actor[4].weight.mul_(100.0)
    m = 64
    g = torch.Generator().manual_seed(21)
    obs = torch.randn(m, 4, generator=g) * torch.tensor([1.0, 1.0, 0.1, 1.0])
    actions = torch.randint(0, 2, (m,), generator=g)
    with torch.no_grad():
        logits = actor(obs)
        own = torch.distributions.Categorical(logits=logits).log_prob(actions)
        own_v = critic(obs).flatten()
    logprobs = own + 0.3 * torch.randn(m, generator=g)
    values = own_v + 0.5 * torch.randn(m, generator=g)
    advantages = torch.randn(m, generator=g) * 2.0 + 0.3
    returns = advantages + values

    clip, ent_coef, vf_coef = 0.2, 0.01, 0.5
    logits = actor(obs)
    probs = torch.distributions.Categorical(logits=logits)
    newlogprob, entropy = probs.log_prob(actions), probs.entropy()
    newvalue = critic(obs).view(-1)
    logratio = newlogprob - logprobs
    ratio = logratio.exp()
    approx_kl = ((ratio - 1) - logratio).mean()
    clipfrac = ((ratio - 1.0).abs() > clip).float().mean()
    mb_adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss1 = -mb_adv * ratio
    pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - clip, 1 + clip)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    v_loss_unclipped = (newvalue - returns) ** 2
    v_clipped = values + torch.clamp(newvalue - values, -clip, clip)
    v_loss_clipped = (v_clipped - returns) ** 2
    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    entropy_loss = entropy.mean()
    loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
    loss.backward()

    names = {"0": "fc1", "2": "fc2", "4": "fc3"}
    weights, grads = {}, {}
    for head, net in (("critic", critic), ("policy", actor)):
        for name, p in net.named_parameters():
            idx, kind = name.split(".")
            key = "%s.%s.%s" % (head, names[idx], kind)
            weights[key] = {"shape": list(p.shape), "data": fl(p.detach())}
            grads[key] = fl(p.grad)
    ref = {"torch": torch.__version__, "clip": clip, "ent_coef": ent_coef, "vf_coef": vf_coef,
           "weights": weights,
           "batch": {"obs": fl(obs), "actions": [int(a) for a in actions],
                     "logprobs": fl(logprobs), "values": fl(values),
                     "advantages": fl(advantages), "returns": fl(returns)},
           "loss": loss.item(), "pg_loss": pg_loss.item(), "v_loss": v_loss.item(),
           "entropy": entropy_loss.item(), "approx_kl": approx_kl.item(),
           "clipfrac": clipfrac.item(), "grads": grads}
    write("ppo_loss_reference.json", ref)
    print("ppo: loss %.6f pg %.6f v %.6f entropy %.6f clipfrac %.3f"
          % tuple(ref[k] for k in ("loss", "pg_loss", "v_loss", "entropy", "clipfrac")))


def fl(t):
    """A tensor's values as a flat list of the f32 values (exact in JSON)."""
    return [float(v) for v in t.detach().reshape(-1).tolist()]


if __name__ == "__main__":
    main()
