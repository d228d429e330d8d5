#!/usr/bin/env python3
"""sample_test.py — std.llm's sampler (runtime/nn/sampling.c) against an
independent Python form of Hugging Face's filters (temperature, then
TopKLogitsWarper, then TopPLogitsWarper) over 2000 random logits.

    sample_test.py --sflowc SFLOWC

Checks: with temperature only and with top_k only, every one of 3000
tokens equals the one this script draws with the same counter-based
uniform (splitmix64 of (seed, step), counter.h) walking the kept tokens in
the sampler's order (index order; largest first for top-k); with top_p
(alone and after top_k) every token lies in the set Hugging Face keeps
(sorted ascending, cumulative softmax <= 1 - top_p removed, the most
probable always kept), and the counts pass a chi-square against the kept
tokens' renormalized probabilities (fixed seeds: no flake).  numpy only
(build/pydeps: the script re-executes itself there, as tests/pydeps.py does).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pydeps  # noqa: E402

pydeps.ensure("sample_test", "numpy")
import numpy as np  # noqa: E402

M64 = (1 << 64) - 1
V, N = 2000, 3000
CASES = [  # temperature, top_k, top_p, seed
    (1.0, 0, 1.0, 5),
    (0.7, 0, 1.0, -9),
    (1.3, 40, 1.0, 77),
    (0.8, 0, 0.9, 123),
    (1.0, 0, 0.5, 4),
    (0.9, 100, 0.8, 31),
]


def mix(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def unit(seed, a, b):
    z = mix(mix(mix(seed & M64) ^ a) ^ b)
    return (z >> 11) * (1.0 / 9007199254740992.0)


def hf_kept(x, t, k, p):
    """The token ids Hugging Face's warpers leave finite, and their probs."""
    z = x.astype(np.float64) / t
    keep = np.ones(V, bool)
    if 0 < k < V:
        order = sorted(range(V), key=lambda i: (-x[i], i))
        keep[:] = False
        keep[order[:k]] = True
    zk = np.where(keep, z, -np.inf)
    if p < 1:
        asc = np.argsort(zk, kind="stable")
        probs = np.exp(zk[asc] - zk.max())
        probs /= probs.sum()
        cum = np.cumsum(probs)
        remove = cum <= 1 - p
        remove[-1] = False
        keep[asc[remove]] = False
    zk = np.where(keep, z, -np.inf)
    pr = np.exp(zk - zk.max())
    return keep, pr / pr.sum()


def exact(x, t, k, seed):
    """The sampler's own walk (temperature or top-k only)."""
    m = float(x.max())
    order = sorted(range(V), key=lambda i: (-x[i], i))[:k] if 0 < k < V else list(range(V))
    inv = 1.0 / t
    e = [math.exp((float(x[i]) - m) * inv) for i in order]
    s = 0.0
    for w in e:
        s += w
    out = []
    for step in range(N):
        target, acc, pick = unit(seed, step, 0) * s, 0.0, None
        for i, w in zip(order, e):
            acc += w
            if acc > target:
                pick = i
                break
        out.append(pick)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(2024)
    x = (rng.standard_normal(V) * 2.5).astype(np.float32)
    lines = ["import std.nn", "import std.llm", "", "workflow main() {",
             "  let x = tensor([" + ", ".join(repr(float(v)) for v in x) + "], [%d])" % V]
    for t, k, p, seed in CASES:
        lines.append("  let s%d = llm.Sampling { temperature: %r, top_k: %d, top_p: %r, seed: %d }"
                     % (len(lines), t, k, p, seed))
        lines.append("  var o%d = \"\"" % len(lines))
        name = "o%d" % (len(lines) - 1)
        sname = "s%d" % (len(lines) - 2)
        lines.append("  for step in 0..%d { %s = %s + str(llm.sample(x, %s, step)) + \" \" }"
                     % (N, name, name, sname))
        lines.append("  print(%s)" % name)
    lines.append("}")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "s.sflow"), os.path.join(tmp, "s")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run([args.sflowc, src, "-o", exe], check=True)
        got = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split("\n")
    for (t, k, p, seed), line in zip(CASES, got):
        toks = [int(w) for w in line.split()]
        what = "temperature %g top_k %d top_p %g seed %d" % (t, k, p, seed)
        if len(toks) != N:
            failures.append("%s: %d tokens, not %d" % (what, len(toks), N))
            continue
        if p == 1.0:
            want = exact(x, t, k, seed)
            bad = [i for i in range(N) if toks[i] != want[i]]
            print("%-42s %d of %d tokens as the Python walk" % (what, N - len(bad), N))
            if bad:
                failures.append("%s: step %d drew %d, Python %d" % (what, bad[0], toks[bad[0]],
                                                                     want[bad[0]]))
            continue
        keep, pr = hf_kept(x, t, k, p)
        outside = [v for v in toks if not keep[v]]
        counts = np.bincount(toks, minlength=V)
        exp_n = pr * N
        big = exp_n >= 5
        chi = float((((counts - exp_n) ** 2)[big] / exp_n[big]).sum())
        rest_e, rest_c = float(exp_n[~big].sum()), float(counts[~big].sum())
        df = int(big.sum())
        if rest_e > 0:
            chi += (rest_c - rest_e) ** 2 / rest_e
            df += 1
        df -= 1
        bound = df + 8 * math.sqrt(2 * max(df, 1)) + 10
        print("%-42s kept %d, drawn %d distinct, %d outside; chi2 %.1f (df %d, bound %.1f)"
              % (what, int(keep.sum()), len(set(toks)), len(outside), chi, df, bound))
        if outside:
            failures.append("%s: drew %d, which Hugging Face's filters remove" % (what, outside[0]))
        if chi > bound:
            failures.append("%s: chi-square %.1f over %.1f" % (what, chi, bound))
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
