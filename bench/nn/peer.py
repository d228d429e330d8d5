#!/usr/bin/env python3
"""peer.py — PyTorch eager on the CPU for the two std.nn benchmarks of
issue 16, one benchmark and one thread count per process (so that the peak
RSS is that benchmark's):

    build/peers/torch/venv/bin/python bench/nn/peer.py mlp --threads 1
    build/peers/torch/venv/bin/python bench/nn/peer.py encoder --threads 2 [--attention explicit]

mlp      one training step of an MLP 784-1024-1024-10 (ReLU), batch 256:
         zero_grad, forward, cross-entropy, backward, SGD (lr 0.01,
         momentum 0.9).  Weights as nn.Linear's default init, seed 0.
encoder  forward and backward of one MiniLM-sized BERT encoder layer: batch
         32, 128 tokens, width 384, 12 heads of 32, feed-forward 1536 with
         the erf GELU, post-LayerNorm (eps 1e-12) after each residual, an
         additive padding mask (every other sequence has its last 32 tokens
         padded), no dropout; backward from a fixed upstream gradient into
         every parameter and the input.  --attention sdpa (the default)
         uses F.scaled_dot_product_attention, the path PyTorch's own
         layers take; explicit spells out softmax(QK^T/sqrt(d) + mask) V,
         as BERT's eager attention does.

Each run does --warmup untimed steps, then --steps timed ones, and prints

    RESULT <bench> torch <threads> <median ms per step> <peak RSS MB> <RSS MB before the first step>
    INFO ...  (torch version, min/max ms, what the step is)

An sflow implementation prints the same RESULT line with `sflow` in the
second field, so bench/nn/run.py can put the two side by side.  Peak RSS
is the process's (ru_maxrss), torch's own libraries included; the last
field, the RSS once the model and data are made, separates that base from
what the steps add.
"""
import argparse
import os
import resource
import statistics
import sys
import time


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def mlp(torch, F):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    x = torch.randn(256, 784, generator=g)                 # (B, 784)
    y = torch.randint(0, 10, (256,), generator=g)          # (B,)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, "MLP 784-1024-1024-10 ReLU, batch 256, cross-entropy, SGD lr 0.01 momentum 0.9"


def encoder(torch, F, attention):
    B, T, C, H, FF = 32, 128, 384, 12, 1536
    D = C // H
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    lin = lambda i, o: torch.nn.Linear(i, o)
    q, k, v, o, f1, f2 = lin(C, C), lin(C, C), lin(C, C), lin(C, C), lin(C, FF), lin(FF, C)
    ln1, ln2 = torch.nn.LayerNorm(C, eps=1e-12), torch.nn.LayerNorm(C, eps=1e-12)
    params = [p for m in (q, k, v, o, f1, f2, ln1, ln2) for p in m.parameters()]
    x = torch.randn(B, T, C, generator=g).requires_grad_(True)   # (B, T, C)
    up = torch.randn(B, T, C, generator=g)                       # upstream gradient
    keep = torch.ones(B, T)
    keep[1::2, T - 32:] = 0.0                                    # padded tokens
    mask = ((1.0 - keep) * torch.finfo(torch.float32).min)[:, None, None, :]  # (B, 1, 1, T)

    def heads(t):  # (B, T, C) -> (B, H, T, D)
        return t.view(B, T, H, D).transpose(1, 2)

    def layer(x):
        qh, kh, vh = heads(q(x)), heads(k(x)), heads(v(x))
        if attention == "sdpa":
            a = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
        else:
            s = qh @ kh.transpose(-1, -2) / D ** 0.5 + mask        # (B, H, T, T)
            a = torch.softmax(s, dim=-1) @ vh                       # (B, H, T, D)
        a = a.transpose(1, 2).reshape(B, T, C)
        h = ln1(x + o(a))
        return ln2(h + f2(F.gelu(f1(h))))

    def step():
        for p in params:
            p.grad = None
        x.grad = None
        out = layer(x)
        out.backward(up)
        return out
    return step, (f"encoder layer B {B} T {T} C {C} H {H} FF {FF} GELU(erf) post-LN, padding mask, "
                  f"attention {attention}, forward+backward")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", choices=("mlp", "encoder"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default 30 mlp, 10 encoder)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--attention", choices=("sdpa", "explicit"), default="sdpa")
    a = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) != str(a.threads):
            sys.exit(f"peer.py: run with {var}={a.threads} (bench/nn/run.py does), so the libraries "
                     f"start no more threads than torch.set_num_threads({a.threads}) uses")
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.bench == "mlp":
        step, what = mlp(torch, F)
        name, steps = "nn_mlp_train_step", a.steps or 30
    else:
        step, what = encoder(torch, F, a.attention)
        name = "nn_encoder_fwd_bwd" + ("" if a.attention == "sdpa" else "_explicit")
        steps = a.steps or 10
    base = rss_mb()
    for _ in range(a.warmup):
        step()
    times, c0, w0 = [], time.process_time(), time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    # CPU time over wall time near the thread count means the threads ran;
    # well under it, the machine was busy and the figure is too slow.
    busy = (time.process_time() - c0) / (time.perf_counter() - w0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"RESULT {name} torch {a.threads} {statistics.median(times):.2f} {peak:.1f} {base:.1f}")
    print(f"INFO {name} torch {torch.__version__} threads {torch.get_num_threads()} steps {steps} "
          f"min {min(times):.2f} max {max(times):.2f} ms, cpu/wall {busy:.2f}; {what}")


if __name__ == "__main__":
    main()
