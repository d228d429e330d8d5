#!/usr/bin/env python3
"""peer.py — bench/rl's Python side: Gymnasium's vector env and a
CleanRL-style PPO in PyTorch, each the peer of one sflow figure.

    python peer.py envsteps --envs 64 --steps 20000
    python peer.py ppo [--total-steps 500000] [--seed 1]

envsteps: gymnasium.vector.SyncVectorEnv of --envs CartPole-v1 (autoreset in
the same step, as std.rl's) stepped --steps times with uniformly random
actions; prints steps/s.

ppo: CleanRL's ppo.py for CartPole-v1 (4 envs, 128 steps, lr 2.5e-4
annealed, gamma 0.99, lambda 0.95, 4 minibatches, 4 epochs, clip 0.2, ent
0.01, vf 0.5, max grad norm 0.5, 64-64 tanh MLPs, orthogonal init, Adam eps
1e-5), with examples/cartpole.sflow's stopping rule: once the mean of the
last 20 training returns reaches 400, evaluate the greedy policy on 100
fresh episodes and stop at a mean >= 475.  Prints the steps and seconds to
solve and the overall steps/s.
"""
import argparse
import time

import gymnasium as gym
import numpy as np


def envsteps(a):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(a.envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=1)
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        envs.step(rng.integers(0, 2, size=a.envs))
    secs = time.perf_counter() - t0
    total = a.envs * a.steps
    print("gymnasium SyncVectorEnv envs %d : %d steps in %.3f s, %.0f steps/s"
          % (a.envs, total, secs, total / secs))


def ppo(a):
    import torch
    import torch.nn as nn
    from torch.distributions.categorical import Categorical
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cudnn.deterministic = True
    num_envs, num_steps, lr, gamma, lam = 4, 128, 2.5e-4, 0.99, 0.95
    minibatches, epochs, clip, ent_coef, vf_coef, max_norm = 4, 4, 0.2, 0.01, 0.5, 0.5
    batch = num_envs * num_steps
    mb_size = batch // minibatches
    iterations = a.total_steps // batch

    def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(),
                                        layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                        layer_init(nn.Linear(64, 1), std=1.0))
            self.actor = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(),
                                       layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                       layer_init(nn.Linear(64, 2), std=0.01))

        def get_value(self, x):
            return self.critic(x)

        def get_action_and_value(self, x, action=None):
            logits = self.actor(x)
            probs = Categorical(logits=logits)
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action), probs.entropy(), self.critic(x)

    def make():
        return gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    envs = gym.vector.SyncVectorEnv([make for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = Agent()
    opt = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    obs = torch.zeros((num_steps, num_envs, 4))
    actions = torch.zeros((num_steps, num_envs))
    logprobs = torch.zeros((num_steps, num_envs))
    rewards = torch.zeros((num_steps, num_envs))
    dones = torch.zeros((num_steps, num_envs))
    values = torch.zeros((num_steps, num_envs))

    def evaluate(seed):
        e = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(100)],
                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        o, _ = e.reset(seed=seed)
        ret, live = np.zeros(100), np.ones(100, dtype=bool)
        while live.any():
            with torch.no_grad():
                act = agent.actor(torch.tensor(o)).argmax(1).numpy()
            o, r, term, trunc, _ = e.step(act)
            ret += r * live
            live &= ~(term | trunc)
        return ret.mean()

    t0 = time.perf_counter()
    step = 0
    next_obs, _ = envs.reset(seed=a.seed)
    next_obs = torch.Tensor(next_obs)
    next_done = torch.zeros(num_envs)
    recent, solved, score = [], False, 0.0
    for it in range(1, iterations + 1):
        opt.param_groups[0]["lr"] = (1.0 - (it - 1.0) / iterations) * lr
        for t in range(num_steps):
            step += num_envs
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[t] = value.flatten()
            actions[t], logprobs[t] = action, logprob
            next_obs, reward, term, trunc, infos = envs.step(action.numpy())
            next_done = np.logical_or(term, trunc)
            rewards[t] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(next_done)
            # SAME_STEP autoreset puts the ended episodes' info under final_info.
            fin = infos.get("final_info", {})
            if "episode" in fin:
                for k in np.nonzero(fin["_episode"])[0]:
                    recent.append(float(fin["episode"]["r"][k]))
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            last = 0
            for t in reversed(range(num_steps)):
                if t == num_steps - 1:
                    nonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + gamma * nextvalues * nonterminal - values[t]
                advantages[t] = last = delta + gamma * lam * nonterminal * last
            returns = advantages + values
        b_obs, b_logprobs = obs.reshape((-1, 4)), logprobs.reshape(-1)
        b_actions, b_adv = actions.reshape(-1), advantages.reshape(-1)
        b_returns, b_values = returns.reshape(-1), values.reshape(-1)
        inds = np.arange(batch)
        for _ in range(epochs):
            np.random.shuffle(inds)
            for start in range(0, batch, mb_size):
                mb = inds[start:start + mb_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb], b_actions.long()[mb])
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                mb_adv = b_adv[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg = torch.max(-mb_adv * ratio,
                               -mb_adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
                newvalue = newvalue.view(-1)
                vu = (newvalue - b_returns[mb]) ** 2
                vc = b_values[mb] + torch.clamp(newvalue - b_values[mb], -clip, clip)
                v = 0.5 * torch.max(vu, (vc - b_returns[mb]) ** 2).mean()
                loss = pg - ent_coef * entropy.mean() + v * vf_coef
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), max_norm)
                opt.step()
        recent = recent[-20:]
        if len(recent) == 20 and np.mean(recent) >= a.eval_from:
            score = evaluate(1000000 + it)
            if score >= 475:
                solved = True
                break
    secs = time.perf_counter() - t0
    print("torch ppo: solved %s after %d steps (evaluation mean %.1f) in %.1f s, %.0f steps/s"
          % (solved, step, score, secs, step / secs))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("envsteps")
    e.add_argument("--envs", type=int, default=64)
    e.add_argument("--steps", type=int, default=20000)
    p = sub.add_parser("ppo")
    p.add_argument("--total-steps", type=int, default=500000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-from", type=float, default=400.0)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    a = ap.parse_args()
    envsteps(a) if a.cmd == "envsteps" else ppo(a)


if __name__ == "__main__":
    main()
