#!/usr/bin/env python3
"""PyTorch peers for bench/gpu/run.sh, on the same GPU as sflow's side.

    torch_peer.py                      matmul TFLOP/s on the shapes gpu_check
                                       uses and the MLP forward pass of
                                       mlp_bench.sflow, as TABLE| rows
    torch_peer.py nn mlp|encoder|matmul [--tf32] [--steps N] [--warmup N]
                                       [--attention sdpa|explicit] [--n N]
                                       [--batch B]
                                       the peer of one nn_bench.sflow run:
        RESULT gpu_<what> torch <ms> <steps or GFLOP/s> <peak MB>

The nn benchmarks are bench/nn/peer.py's on torch.cuda: mlp one training
step of the MLP 784-1024-1024-10 (ReLU), batch 256, cross-entropy, SGD lr
0.01 momentum 0.9, ending with loss.item() (as nn_bench.sflow's step);
encoder forward and backward of the MiniLM-sized encoder layer (batch 32,
128 tokens, width 384, 12 heads, FFN 1536 erf GELU, post-LayerNorm eps
1e-12, additive padding mask, every other sequence's last 32 tokens),
out.backward(up) then torch.cuda.synchronize(); matmul a @ b of two (n, n)
f32 tensors uniform in [-1, 1), `--tf32` allowing TF32 (SFLOW_ALLOW_TF32=1
on sflow's side).  The median step after --warmup untimed ones (matmul: the
mean of --steps products between two synchronizations).  Peak MB is
torch.cuda.max_memory_allocated(), counted from before the model is made,
one benchmark per process; sflow's is its allocator's dev_peak.
Exits 77 without torch or a GPU."""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_peer: SKIP: no PyTorch"); sys.exit(77)
if not torch.cuda.is_available():
    print("torch_peer: SKIP: no GPU"); sys.exit(77)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


def timed(fn, reps):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def table():
    for m in (1024, 4096, 8192):
        a = torch.rand(m, m, device=dev); b = torch.rand(m, m, device=dev)
        dt = timed(lambda: a @ b, 5 if m >= 8192 else 20)
        print(f"TABLE|torch.matmul f32 {m}x{m}x{m}|{2*m**3/dt/1e12:.1f} TFLOP/s|peer|-")
    batch, dim, hidden, classes = 4096, 1024, 4096, 1024
    x = torch.rand(batch, dim, device=dev); w1 = torch.rand(dim, hidden, device=dev)
    b1 = torch.rand(hidden, device=dev); w2 = torch.rand(hidden, classes, device=dev)
    dt = timed(lambda: torch.relu(x @ w1 + b1) @ w2, 20)
    print(f"TABLE|torch MLP forward {batch}x{dim}x{hidden}x{classes}|{dt*1e3:.3f} ms|peer|-")


def mlp():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).to(dev)
    x = torch.randn(256, 784, generator=g).to(dev)
    y = torch.randint(0, 10, (256,), generator=g).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    return step


def encoder(attention, B):
    T, C, H, FF = 128, 384, 12, 1536
    D = C // H
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    lin = lambda i, o: torch.nn.Linear(i, o).to(dev)
    q, k, v, o, f1, f2 = lin(C, C), lin(C, C), lin(C, C), lin(C, C), lin(C, FF), lin(FF, C)
    ln1 = torch.nn.LayerNorm(C, eps=1e-12).to(dev)
    ln2 = torch.nn.LayerNorm(C, eps=1e-12).to(dev)
    params = [p for m in (q, k, v, o, f1, f2, ln1, ln2) for p in m.parameters()]
    x = torch.randn(B, T, C, generator=g).to(dev).requires_grad_(True)
    up = torch.randn(B, T, C, generator=g).to(dev)
    keep = torch.ones(B, T)
    keep[1::2, T - 32:] = 0.0
    mask = ((1.0 - keep) * torch.finfo(torch.float32).min)[:, None, None, :].to(dev)

    def heads(t):
        return t.view(B, T, H, D).transpose(1, 2)

    def layer(x):
        qh, kh, vh = heads(q(x)), heads(k(x)), heads(v(x))
        if attention == "sdpa":
            a = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
        else:
            s = qh @ kh.transpose(-1, -2) / D ** 0.5 + mask
            a = torch.softmax(s, dim=-1) @ vh
        a = a.transpose(1, 2).reshape(B, T, C)
        h = ln1(x + o(a))
        return ln2(h + f2(F.gelu(f1(h))))

    def step():
        for p in params:
            p.grad = None
        x.grad = None
        layer(x).backward(up)
        torch.cuda.synchronize()
    return step


def nn_bench(a):
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    if a.what == "matmul":
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.rand(a.n, a.n, device=dev, generator=g) * 2 - 1
        y = torch.rand(a.n, a.n, device=dev, generator=g) * 2 - 1
        for _ in range(a.warmup): x @ y
        dt = timed(lambda: x @ y, a.steps or 10)
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(f"RESULT gpu_matmul torch {dt*1e3:.3f} {2*a.n**3/dt/1e9:.0f} {peak:.1f}")
        return
    step = mlp() if a.what == "mlp" else encoder(a.attention, a.batch)
    steps = a.steps or (50 if a.what == "mlp" else 20)
    for _ in range(a.warmup): step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated() / 2**20
    name = "gpu_" + a.what + ("" if a.what != "encoder" or a.attention == "sdpa" else "_explicit")
    print(f"RESULT {name} torch {statistics.median(times):.3f} {steps} {peak:.1f}")
    print(f"INFO {name} torch {torch.__version__} {torch.cuda.get_device_name()} "
          f"min {min(times):.3f} max {max(times):.3f} ms")


def main():
    if len(sys.argv) == 1:
        table(); return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=("nn",))
    ap.add_argument("what", choices=("mlp", "encoder", "matmul"))
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=32, help="the encoder's batch")
    ap.add_argument("--attention", choices=("sdpa", "explicit"), default="sdpa")
    nn_bench(ap.parse_args())


if __name__ == "__main__":
    main()
