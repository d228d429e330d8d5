#!/usr/bin/env python3
"""check_encoder.py — checks bench/nn/encoder.sflow against PyTorch once:
the same layer as bench/nn/peer.py's `encoder` (its weights and inputs),
saved in safetensors, loaded by encoder.sflow --check DIR through nn.load,
and the sflow side's output, input gradient and every parameter gradient
compared with torch's, tensor by tensor:

    build/peers/torch/venv/bin/python bench/nn/check_encoder.py [--build build]

Prints the largest absolute difference and the largest relative one
(|a - b| / max|b|, max|b| floored at 1e-2) of each tensor, and fails past 1e-3 relative.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "nn"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file, load_file
    import peer
    torch.set_num_threads(1)
    B, T, C, H, FF = 32, 128, 384, 12, 1536
    D = C // H
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    mods = {n: torch.nn.Linear(i, o) for n, (i, o) in
            dict(query=(C, C), key=(C, C), value=(C, C), output=(C, C), ffn1=(C, FF), ffn2=(FF, C)).items()}
    mods["ln1"], mods["ln2"] = torch.nn.LayerNorm(C, eps=1e-12), torch.nn.LayerNorm(C, eps=1e-12)
    with torch.no_grad():  # non-trivial LayerNorm affines, so their gradients are tested too
        for n in ("ln1", "ln2"):
            mods[n].weight.uniform_(0.5, 1.5, generator=g)
            mods[n].bias.uniform_(-0.5, 0.5, generator=g)
    x = torch.randn(B, T, C, generator=g).requires_grad_(True)
    up = torch.randn(B, T, C, generator=g)
    keep = torch.ones(B, T)
    keep[1::2, T - 32:] = 0.0
    mask = ((1.0 - keep) * torch.finfo(torch.float32).min)[:, None, None, :]
    heads = lambda t: t.view(B, T, H, D).transpose(1, 2)
    m = mods
    qh, kh, vh = heads(m["query"](x)), heads(m["key"](x)), heads(m["value"](x))
    att = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask).transpose(1, 2).reshape(B, T, C)
    h = m["ln1"](x + m["output"](att))
    out = m["ln2"](h + m["ffn2"](F.gelu(m["ffn1"](h))))
    out.backward(up)
    with tempfile.TemporaryDirectory() as d:
        save_file({f"{n}.{p}": t.detach().contiguous() for n, mod in m.items()
                   for p, t in mod.named_parameters()}, os.path.join(d, "encoder_weights.safetensors"))
        save_file({"x": x.detach().contiguous(), "up": up}, os.path.join(d, "encoder_inputs.safetensors"))
        exe = os.path.join(d, "encoder")
        subprocess.run([os.path.join(a.build, "bin", "sflowc"), os.path.join(ROOT, "bench", "nn", "encoder.sflow"),
                        "-o", exe], check=True)
        p = subprocess.run([exe, "--threads", "1", "--check", d], capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"check_encoder: encoder.sflow --check failed:\n{p.stderr}")
        print(p.stdout, end="")
        grads = load_file(os.path.join(d, "encoder_grads_sflow.safetensors"))
        outs = load_file(os.path.join(d, "encoder_out_sflow.safetensors"))
    pairs = [("output", outs["up"], out.detach()), ("grad x", outs["x"], x.grad)]
    pairs += [(f"grad {n}.{p}", grads[f"{n}.{p}"], t.grad) for n, mod in m.items() for p, t in mod.named_parameters()]
    print(f"torch loss {float((out.detach() * up).double().sum()):.6f}")
    worst = 0.0
    for name, s, t in pairs:
        diff = (s.double() - t.double()).abs().max().item()
        # key.bias's gradient is zero in exact arithmetic (softmax ignores a
        # shift along a row), noise of 1e-6 on both sides: a floor of 1e-2
        # keeps that from reading as a relative error of 1.
        rel = diff / max(t.double().abs().max().item(), 1e-2)
        worst = max(worst, rel)
        print(f"{name:<20} max|diff| {diff:.3e}  relative {rel:.3e}")
    print(f"worst relative difference {worst:.3e}")
    sys.exit(0 if worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
