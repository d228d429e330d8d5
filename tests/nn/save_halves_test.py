#!/usr/bin/env python3
"""nn.save's dtype = "bf16" / "f16" and nn.load of BF16 / F16, held to PyTorch.

fixtures/halves.safetensors is written by torch (scripts/gen_nn_fixtures.py):
2032 float32 values as "src" (signed zeros and infinities, NaN, f16's
largest value and the ties around it, its subnormals and the half-way
points below them, bf16 ties, random bit patterns from f16's subnormals to
past its range) and torch's `src.to(torch.bfloat16)` and
`src.to(torch.float16)` as "bf16" and "f16".  One sflow program loads src,
saves it with dtype "bf16" and "f16", loads torch's BF16 and F16 tensors
(saving them as F32), and saves nn.round_bf16(src).  Checked, with Python
alone (tests/nn/check_safetensors.py holds each file to the format):

- sflow's BF16 and F16 bytes equal torch's, value for value (a NaN need
  only be a NaN: torch writes its bf16 NaN as 0xffff, sflow keeps the
  sign and makes it quiet);
- the F32 values nn.load read from torch's BF16 and F16 are exactly the
  halves' values (the bits of a BF16 widened, the F16 through struct 'e');
- round_bf16(src) is exactly torch's bf16 values, as f32.

With --torch PY (the PyTorch venv's Python, build/peers/torch) it also has
safetensors.torch.load_file read sflow's BF16 and F16 files and compares
them with torch's own conversion: the other direction, through the
package; it exits 77 (skipped) when that Python is missing.

Usage: save_halves_test.py --sflowc PATH [--torch PY]
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_safetensors  # noqa: E402

FILE = os.path.join(HERE, "fixtures", "halves.safetensors")

PROGRAM = '''import std.nn

struct Src { src: tensor }
struct B { bf16: tensor }
struct F { f16: tensor }

workflow main() {
  let n = %d
  let s = Src { src: zeros([n]) }
  nn.load(s, "%s", strict = false)
  nn.save(s, "%s/bf16.safetensors", dtype = "bf16")
  nn.save(s, "%s/f16.safetensors", dtype = "F16")
  let b = B { bf16: zeros([n]) }
  nn.load(b, "%s", strict = false)
  nn.save(b, "%s/bf16_read.safetensors")
  let f = F { f16: zeros([n]) }
  nn.load(f, "%s", strict = false)
  nn.save(f, "%s/f16_read.safetensors")
  nn.save(Src { src: nn.round_bf16(s.src) }, "%s/rounded.safetensors")
}
'''

TORCH_SIDE = '''
import sys, torch
from safetensors.torch import load_file
ref = load_file(sys.argv[1])
bad = 0
for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
    got = load_file(sys.argv[2] + "/" + name + ".safetensors")["src"]
    want = ref["src"].to(dt)
    assert got.dtype == dt, (name, got.dtype)
    g, w = got.float(), want.float()
    same = (g == w) | (g.isnan() & w.isnan())
    bad += int((~same).sum())
    print("torch reads sflow's %s: %d of %d values equal torch's conversion" % (name, int(same.sum()), same.numel()))
sys.exit(1 if bad else 0)
'''


def raw(path, name):
    """The bytes and dtype of tensor `name` (the file held to the format first)."""
    check_safetensors.read(path)
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    e = json.loads(blob[8:8 + n])[name]
    b, end = e["data_offsets"]
    return e["dtype"], blob[8 + n + b:8 + n + end]


def halves(dtype, data):
    """16-bit patterns and their values as f32 (Python floats)."""
    hs = struct.unpack("<%dH" % (len(data) // 2), data)
    if dtype == "BF16":
        vals = struct.unpack("<%df" % len(hs), struct.pack("<%dI" % len(hs), *(h << 16 for h in hs)))
    else:
        vals = struct.unpack("<%de" % len(hs), data)
    return hs, list(vals)


def is_nan_half(dtype, h):
    return (h & 0x7f80) == 0x7f80 and h & 0x7f if dtype == "BF16" else (h & 0x7c00) == 0x7c00 and h & 0x3ff


def same_f32(a, b):
    """Equal as f32 bit patterns, or both NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<f", a) == struct.pack("<f", b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--torch", help="the PyTorch venv's python, to read sflow's files with safetensors.torch")
    a = ap.parse_args()
    if a.torch and not os.path.exists(a.torch):
        print("skipped: no PyTorch at %s (bench/nn/setup.sh makes it)" % a.torch)
        return 77
    _, src_raw = raw(FILE, "src")
    n = len(src_raw) // 4
    src = struct.unpack("<%df" % n, src_raw)
    failures = []
    with tempfile.TemporaryDirectory(prefix="sflow-halves-") as tmp:
        path = os.path.join(tmp, "halves.sflow")
        with open(path, "w") as f:
            f.write(PROGRAM % ((n, FILE) + (tmp,) * 2 + (FILE, tmp) + (FILE, tmp, tmp)))
        exe = os.path.join(tmp, "halves")
        subprocess.run([a.sflowc, path, "-o", exe], check=True)
        subprocess.run([exe, "--quiet"], check=True)
        for name, dtype in (("bf16", "BF16"), ("f16", "F16")):
            tdt, tdata = raw(FILE, name)
            sdt, sdata = raw(os.path.join(tmp, name + ".safetensors"), "src")
            if sdt != dtype or tdt != dtype:
                failures.append("%s: dtype %s in sflow's file, %s in torch's (want %s)" % (name, sdt, tdt, dtype))
                continue
            th, tv = halves(dtype, tdata)
            sh, _ = halves(dtype, sdata)
            bad = [i for i in range(n) if th[i] != sh[i] and not (is_nan_half(dtype, th[i]) and is_nan_half(dtype, sh[i]))]
            for i in bad[:5]:
                failures.append("%s: src[%d] = %r: sflow wrote 0x%04x, torch 0x%04x" % (name, i, src[i], sh[i], th[i]))
            print("nn.save dtype %s: %d of %d values the bits torch writes" % (name, n - len(bad), n))
            rdt, rdata = raw(os.path.join(tmp, name + "_read.safetensors"), name)
            got = struct.unpack("<%df" % n, rdata)
            bad = [i for i in range(n) if rdt != "F32" or not same_f32(got[i], tv[i])]
            for i in bad[:5]:
                failures.append("nn.load of torch's %s[%d] (0x%04x): %r, want %r" % (name, i, th[i], got[i], tv[i]))
            print("nn.load of torch's %s: %d of %d values exact" % (dtype, n - len(bad), n))
            if name == "bf16":
                _, rr = raw(os.path.join(tmp, "rounded.safetensors"), "src")
                got = struct.unpack("<%df" % n, rr)
                bad = [i for i in range(n) if not same_f32(got[i], tv[i])]
                for i in bad[:5]:
                    failures.append("round_bf16(%r) = %r, torch's bf16 %r" % (src[i], got[i], tv[i]))
                print("nn.round_bf16: %d of %d values torch's bf16" % (n - len(bad), n))
        if a.torch:
            r = subprocess.run([a.torch, "-c", TORCH_SIDE, FILE, tmp])
            if r.returncode:
                failures.append("safetensors.torch read sflow's files with other values")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
