#!/usr/bin/env python3
"""PyTorch peers for bench/gpu/run.sh: matmul TFLOP/s on the shapes
gpu_check uses, a device-to-device copy, and the MLP forward pass of
mlp_bench.sflow.  Prints TABLE| rows; exits 77 without torch or a GPU."""
import sys, time
try:
    import torch
except ImportError:
    print("torch_peer: SKIP: no PyTorch"); sys.exit(77)
if not torch.cuda.is_available():
    print("torch_peer: SKIP: no GPU"); sys.exit(77)
torch.backends.cuda.matmul.allow_tf32 = False

def timed(fn, reps):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps

for m in (1024, 4096, 8192):
    a = torch.rand(m, m, device="cuda"); b = torch.rand(m, m, device="cuda")
    dt = timed(lambda: a @ b, 5 if m >= 8192 else 20)
    print(f"TABLE|torch.matmul f32 {m}x{m}x{m}|{2*m**3/dt/1e12:.1f} TFLOP/s|peer|-")
batch, dim, hidden, classes = 4096, 1024, 4096, 1024
x = torch.rand(batch, dim, device="cuda"); w1 = torch.rand(dim, hidden, device="cuda")
b1 = torch.rand(hidden, device="cuda"); w2 = torch.rand(hidden, classes, device="cuda")
dt = timed(lambda: torch.relu(x @ w1 + b1) @ w2, 20)
print(f"TABLE|torch MLP forward {batch}x{dim}x{hidden}x{classes}|{dt*1e3:.3f} ms|peer|-")
