#!/usr/bin/env python3
"""std.rl's PPO loss against CleanRL's in PyTorch on a fixed batch (docs/rl.md).

Reads tests/rl/ppo_loss_reference.json (scripts/gen_rl_reference.py: a
CleanRL agent's weights, a 64-row batch, and PyTorch 2.15.0's loss, its
parts and every gradient), writes an sflow program that builds the same
rl.Agent and rl.Batch from those values, calls rl.ppo_loss with rl.ppo()'s
hyperparameters (clip_vloss = true, as CleanRL and the reference have it;
rl.ppo() leaves value clipping off) and backward, and compares the loss,
pg, v, entropy, approx_kl and clipfrac and every gradient (by field path) within
|sflow - torch| <= atol + rtol |torch| (defaults 1e-6 and 1e-4: f32
arithmetic in another order).  Prints the largest difference.

Usage: ppo_loss_test.py --sflowc PATH [--reference JSON]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ORDER = ["critic", "policy"], ["fc1", "fc2", "fc3"], ["weight", "bias"]
SCALARS = ["loss", "pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac"]


def lit(xs):
    return "[" + ", ".join(repr(float(x)) for x in xs) + "]"


def linear(w, head, fc):
    weight, bias = w["%s.%s.weight" % (head, fc)], w["%s.%s.bias" % (head, fc)]
    return "nn.Linear { weight: param(tensor(%s, %s)), bias: param(tensor(%s, %s)) }" % (
        lit(weight["data"]), weight["shape"], lit(bias["data"]), bias["shape"])


def program(ref):
    w, b = ref["weights"], ref["batch"]
    mlps = {h: "rl.Mlp { %s }" % ", ".join("%s: %s" % (fc, linear(w, h, fc)) for fc in ORDER[1])
            for h in ORDER[0]}
    return "\n".join([
        "import std.nn", "import std.rl", "",
        "workflow main() {",
        "  let a = rl.Agent { critic: %s, policy: %s }" % (mlps["critic"], mlps["policy"]),
        "  let acts: i64[] = [%s]" % ", ".join(str(x) for x in b["actions"]),
        "  let mb = rl.Batch { obs_dim: 4, obs: %s, actions: acts, logprobs: %s, values: %s,"
        " advantages: %s, returns: %s, finished: zeros_f64(0) }" % (
            lit(b["obs"]), lit(b["logprobs"]), lit(b["values"]), lit(b["advantages"]),
            lit(b["returns"])),
        "  let cfg = rl.ppo(clip = %r, ent_coef = %r, vf_coef = %r, clip_vloss = true)" % (
            ref["clip"], ref["ent_coef"], ref["vf_coef"]),
        "  let l = rl.ppo_loss(a, mb, cfg)",
        "  backward(l.loss)",
        "  print(l.loss.item(), l.pg, l.v, l.entropy, l.approx_kl, l.clipfrac)",
        "  for p in params(a) { print(grad(p).data()) }",
        "}", ""])


def f32(text):
    return struct.unpack("f", struct.pack("f", float(text)))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--reference", default=os.path.join(HERE, "ppo_loss_reference.json"))
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--rl-module", help="an rl.sflow to use instead of std.rl (to check that "
                    "the test fails on a changed one)")
    a = ap.parse_args()
    ref = json.load(open(a.reference))
    with tempfile.TemporaryDirectory(prefix="sflow-ppo-") as tmp:
        src = os.path.join(tmp, "ppo.sflow")
        text = program(ref)
        if a.rl_module:
            text = text.replace("import std.rl", "import rl")
            open(os.path.join(tmp, "rl.sflow"), "w").write(open(a.rl_module).read())
        open(src, "w").write(text)
        exe = os.path.join(tmp, "ppo")
        subprocess.run([a.sflowc, src, "-o", exe], check=True)
        p = subprocess.run([exe, "--quiet"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print("FAIL the program exited %d\n%s" % (p.returncode, p.stderr))
        return 1
    lines = p.stdout.splitlines()
    got = {k: [f32(v)] for k, v in zip(SCALARS, lines[0].split())}
    want = {k: [ref[k]] for k in SCALARS}
    names = ["%s.%s.%s" % (h, fc, kind) for h in ORDER[0] for fc in ORDER[1] for kind in ORDER[2]]
    for name, line in zip(names, lines[1:]):
        got["grad " + name] = [f32(v) for v in line.strip("[]").split(", ")]
        want["grad " + name] = ref["grads"][name]
    fails, worst = 0, (0.0, "")
    for k in want:
        g, w = got.get(k, []), want[k]
        if len(g) != len(w):
            print("FAIL %s: %d values, torch %d" % (k, len(g), len(w)))
            fails += 1
            continue
        for i, (x, y) in enumerate(zip(g, w)):
            d = abs(x - y)
            if d > worst[0]:
                worst = (d, k)
            if d > a.atol + a.rtol * abs(y):
                print("FAIL %s[%d]: sflow %r, torch %r" % (k, i, x, y))
                fails += 1
                break
    print("ppo loss: sflow %s, torch %s; %d gradients; max |diff| %.3g (%s)"
          % (got["loss"][0], ref["loss"], len(names), worst[0], worst[1]))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
