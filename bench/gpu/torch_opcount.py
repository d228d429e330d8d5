#!/usr/bin/env python3
"""PyTorch's device operations per step, for tests/gpu/opcount.py's bound
(tests/gpu/torch_opcounts.json), on a GPU machine:

    torch_opcount.py                       prints the counts as TABLE| rows
    torch_opcount.py --write FILE          and rewrites FILE's counts
                                           (method "profiler")

The steps are bench/gpu/nn_bench.sflow's, written as bench/gpu/torch_peer.py
writes them: the MLP step (784-1024-1024-10 ReLU, batch 256, cross-entropy,
SGD lr 0.01 momentum 0.9 on its default foreach path, zero_grad to None,
loss.item()) and the encoder layer (batch 32, 128 tokens, width 384, 12
heads, FFN 1536 erf GELU, post-LayerNorm, the additive padding mask made
before the step, F.scaled_dot_product_attention, loss = sum(layer(x) * up),
backward, loss.item()).  After 3 warm-up steps torch.profiler (CUDA
activity) records 4 steps; every CUDA kernel, memcpy and memset event is
one operation, divided by 4.  (The emulator counts a cuBLAS call once; the
profiler counts the kernels it launches, one or two: this side's count is
if anything the higher.)  Exits 77 without torch or a GPU."""
import argparse
import json
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
except ImportError:
    print("torch_opcount: SKIP: no PyTorch"); sys.exit(77)
if not torch.cuda.is_available():
    print("torch_opcount: SKIP: no GPU"); sys.exit(77)
dev = "cuda"
STEPS = 4


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).to(dev)
    x = torch.randn(256, 784, device=dev)
    y = (torch.arange(256, device=dev) % 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    return step


def encoder(B=32):
    T, C, H, FF = 128, 384, 12, 1536
    D = C // H
    torch.manual_seed(0)
    lin = lambda i, o: torch.nn.Linear(i, o).to(dev)
    q, k, v, o, f1, f2 = lin(C, C), lin(C, C), lin(C, C), lin(C, C), lin(C, FF), lin(FF, C)
    ln1 = torch.nn.LayerNorm(C, eps=1e-12).to(dev)
    ln2 = torch.nn.LayerNorm(C, eps=1e-12).to(dev)
    params = [p for m in (q, k, v, o, f1, f2, ln1, ln2) for p in m.parameters()]
    x = torch.randn(B, T, C, device=dev).requires_grad_(True)
    up = torch.randn(B, T, C, device=dev)
    keep = torch.ones(B, T)
    keep[1::2, T - 32:] = 0.0
    mask = ((1.0 - keep) * torch.finfo(torch.float32).min)[:, None, None, :].to(dev)

    def heads(t):
        return t.view(B, T, H, D).transpose(1, 2)

    def step():
        for p in params:
            p.grad = None
        x.grad = None
        a = F.scaled_dot_product_attention(heads(q(x)), heads(k(x)), heads(v(x)), attn_mask=mask)
        h = ln1(x + o(a.transpose(1, 2).reshape(B, T, C)))
        loss = (ln2(h + f2(F.gelu(f1(h)))) * up).sum()
        loss.backward()
        loss.item()
    return step


def count(step):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    kinds = {"kernels": 0, "copies": 0, "sets": 0}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n = e.name.lower()
        kinds["copies" if "memcpy" in n else "sets" if "memset" in n else "kernels"] += 1
    per = {k: v / STEPS for k, v in kinds.items()}
    per["ops"] = sum(per.values())
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", help="the counts file to rewrite (tests/gpu/torch_opcounts.json)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    got = {"mlp": count(mlp()), "encoder": count(encoder())}
    for what, c in got.items():
        print(f"TABLE|torch device ops per {what} step (profiler)|{c['ops']:g}|"
              f"kernels {c['kernels']:g}, copies {c['copies']:g}, memsets {c['sets']:g}|"
              f"sflow <= 1.5x (gpu_emu/opcount, tests/gpu/torch_opcounts.json)")
    if a.write:
        d = json.load(open(a.write))
        d["method"] = "profiler"
        d["method_note"] = (f"torch {torch.__version__} on {torch.cuda.get_device_name()}: "
                            "bench/gpu/torch_opcount.py, torch.profiler's CUDA events per step")
        for what, c in got.items():
            d[what] = {"ops": round(c["ops"]), "kernels": c["kernels"], "copies": c["copies"],
                       "sets": c["sets"]}
        with open(a.write, "w") as f:
            json.dump(d, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
