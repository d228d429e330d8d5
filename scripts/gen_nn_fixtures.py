#!/usr/bin/env python3
"""gen_nn_fixtures.py — PyTorch's answers for every std.nn op, committed as
small JSON files in tests/nn/fixtures/ so that the tests need no PyTorch.

    python3 scripts/gen_nn_fixtures.py [--out DIR]   # any Python: see below
    build/peers/torch/venv/bin/python scripts/gen_nn_fixtures.py [--out DIR]
    build/peers/torch/venv/bin/python scripts/gen_nn_fixtures.py --check
    build/peers/torch/venv/bin/python scripts/gen_nn_fixtures.py --runner FIXTURE
    build/peers/torch/venv/bin/python scripts/gen_nn_fixtures.py --read-safetensors FILE

Each fixture file holds one op (or one procedure: an optimizer trajectory, an
MLP training step, a safetensors file) and a list of cases.  A case names its
inputs (fixed values, never torch's random numbers, so any implementation
builds the same inputs from the file), the expression in sflow and in torch,
a fixed upstream gradient `upstream` of the output's shape, and `expect`: the
forward output and the gradient of each float input of
`loss = (output * upstream).sum()`.  tests/nn/check_fixtures.py compares an
implementation's answers with `expect`; tests/nn/README.md has the format.

The key choice: references are computed in float64 from the float32 inputs
and stored rounded to float32 (written exactly, as the float64 repr of the
f32 value, so f32 and f64 parsers read the same number), so they are the
nearest f32 to the exact answer, do not depend on torch's f32 kernels, thread
count or summation order, and come out byte-identical on every run
(`--check` regenerates into a temporary folder and compares bytes).
`--runner FIXTURE` is the other side: torch in float32, fed from the
fixture's own inputs, printing its answers as check_fixtures.py reads them;
that they pass shows the tolerances suit an f32 implementation.
Run by a Python without torch, the script runs bench/nn/setup.sh (PyTorch
into build/peers/torch; network once) and runs itself again in that venv.
`--read-safetensors FILE` prints a file (one sflow's nn.save wrote, say) as
the safetensors package reads it, in tests/nn/check_safetensors.py's JSON.
"""
import argparse
import filecmp
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_PY = os.path.join(ROOT, "build", "peers", "torch", "venv", "bin", "python")

try:
    import numpy as np
    import safetensors
    import torch
    import torch.nn.functional as F
except ImportError:
    # Run by a Python without torch: set up the peer (bench/nn/setup.sh,
    # network once) and run again in its venv.
    if os.environ.get("SFLOW_NN_PEER_EXEC"):
        raise
    subprocess.run(["bash", os.path.join(ROOT, "bench", "nn", "setup.sh")], check=True)
    os.environ["SFLOW_NN_PEER_EXEC"] = "1"
    os.execv(PEER_PY, [PEER_PY, os.path.abspath(__file__), *sys.argv[1:]])
DEFAULT_OUT = os.path.join(ROOT, "tests", "nn", "fixtures")

# Tolerance of a comparison: |got - want| <= atol + rtol * |want|.  An f32
# implementation of these small cases lands within a few ulps (1e-7
# relative); the margin covers longer f32 reductions and fused kernels.
TOL_OP = {"rtol": 1e-5, "atol": 1e-6}
TOL_TRAIN = {"rtol": 1e-4, "atol": 1e-5}


# ---------------------------------------------------------------- values

class T:
    """A tensor in a fixture: shape, row-major flat data, dtype f32 or i64."""

    def __init__(self, shape, data, dtype="f32"):
        self.shape, self.data, self.dtype = list(shape), list(data), dtype
        assert math.prod(self.shape) == len(self.data), (shape, len(data))

    @staticmethod
    def of(t):
        a = t.detach().cpu().numpy()
        if a.dtype.kind in "iu":
            return T(a.shape, [int(v) for v in a.ravel()], "i64")
        return T(a.shape, [float(v) for v in a.astype(np.float32).ravel()])

    def torch(self, dtype):
        if self.dtype == "i64":
            return torch.tensor(self.data, dtype=torch.int64).reshape(self.shape)
        return torch.tensor(self.data, dtype=dtype).reshape(self.shape)


class Lcg:
    """A 64-bit linear congruential stream (Knuth's MMIX constants): the
    fixed inputs, reproducible from the seed without torch or numpy."""

    def __init__(self, seed):
        self.x = (seed * 2654435761 + 1) % 2**64

    def next(self):
        self.x = (6364136223846793005 * self.x + 1442695040888963407) % 2**64
        return self.x >> 33


def vals(shape, seed, lo=-2.0, hi=2.0, step=1 / 64, avoid_zero=False):
    """Multiples of `step` in [lo, hi]: exact in f32, f16 and bf16 alike."""
    r, n, out = Lcg(seed), math.prod(shape), []
    k_lo, k_hi = round(lo / step), round(hi / step)
    while len(out) < n:
        k = k_lo + r.next() % (k_hi - k_lo + 1)
        if avoid_zero and k == 0:
            continue
        out.append(k * step)
    return T(shape, out)


def distinct(shape, seed, step=0.125):
    """Distinct values (no ties for max/argmax), centred on zero."""
    r, n = Lcg(seed), math.prod(shape)
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = r.next() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return T(shape, [(p - n // 2) * step + step / 2 for p in perm])


def magnitudes(shape, seed, lo=0.5, hi=2.0):
    """Values of magnitude in [lo, hi], either sign: safe denominators."""
    m = vals(shape, seed, lo, hi)
    s = vals(shape, seed + 1000, -1, 1, step=1, avoid_zero=True)
    return T(shape, [a * b for a, b in zip(m.data, s.data)])


def ints(data):
    return T([len(data)], data, "i64")


# ---------------------------------------------------------------- op cases

def case(name, sflow, expr, inputs, seed, note=None):
    c = {"name": name, "sflow": sflow, "torch": expr, "inputs": inputs, "seed": seed}
    if note:
        c["note"] = note
    return c


def binary_cases(op, sym, seed):
    shapes = [("same_shape", [2, 3], [2, 3]), ("broadcast_row", [2, 3], [3]),
              ("broadcast_col", [2, 3], [2, 1]), ("broadcast_both", [3, 1], [1, 4]),
              ("broadcast_rank", [2, 3, 4], [3, 1]), ("zero_dim", [], [2, 3])]
    out = []
    for i, (name, sa, sb) in enumerate(shapes):
        a = vals(sa, seed + 10 * i)
        b = magnitudes(sb, seed + 10 * i + 1) if op == "div" else vals(sb, seed + 10 * i + 1)
        out.append(case(name, f"a {sym} b", f"a {sym} b", {"a": a, "b": b}, seed + 10 * i))
    return out


def scalar_cases(seed):
    out = []
    for i, (sym, s) in enumerate((("+", 1.5), ("-", 1.5), ("*", -0.75), ("/", 2.5))):
        for left in (False, True):
            a = magnitudes([2, 3], seed + i) if (sym == "/" and left) else vals([2, 3], seed + i)
            e = f"{s} {sym} a" if left else f"a {sym} {s}"
            name = {"+": "add", "-": "sub", "*": "mul", "/": "div"}[sym] + ("_left" if left else "_right")
            out.append(case(name, e, e, {"a": a}, seed + i))
    return out


def op_cases():
    """(op, [case]) for every op of the std.nn contract (tensor-abi.md)."""
    ops = []
    for k, (op, sym) in enumerate((("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/"))):
        ops.append((op, binary_cases(op, sym, 100 * (k + 1))))
    ops.append(("scalar", scalar_cases(500)))
    ops.append(("neg", [case("2d", "-a", "-a", {"a": vals([2, 3], 600)}, 600),
                        case("zero_dim", "-a", "-a", {"a": vals([], 601)}, 601)]))
    mm = [("dot_1d_1d", [5], [5]), ("mat_2d_2d", [3, 4], [4, 2]), ("vec_1d_2d", [4], [4, 3]),
          ("mat_2d_1d", [3, 4], [4]), ("batched_3d_2d", [2, 3, 4], [4, 5]),
          ("batched_3d_3d", [2, 3, 4], [2, 4, 2]), ("batched_broadcast", [2, 1, 3, 4], [3, 4, 2]),
          ("vec_1d_3d", [4], [2, 4, 3])]
    ops.append(("matmul", [case(n, "a @ b", "a @ b", {"a": vals(sa, 700 + i), "b": vals(sb, 750 + i)},
                                700 + i) for i, (n, sa, sb) in enumerate(mm)] +
                [case("transposed_operand", "a @ b.transpose(0, 1)", "a @ b.transpose(0, 1)",
                      {"a": vals([3, 4], 790), "b": vals([2, 4], 791)}, 790,
                      "b is a strided view: products must not assume contiguous operands")]))
    x3 = lambda s: distinct([2, 3, 4], s)
    for op in ("sum", "mean"):
        base = 800 if op == "sum" else 850
        ops.append((op, [case("all", f"x.{op}()", f"x.{op}()", {"x": vals([2, 3], base)}, base),
                         case("axis0", f"x.{op}(0)", f"x.{op}(0)", {"x": vals([2, 3], base + 1)}, base + 1),
                         case("axis1", f"x.{op}(1)", f"x.{op}(1)", {"x": vals([2, 3], base + 2)}, base + 2),
                         case("axis_neg1_3d", f"x.{op}(-1)", f"x.{op}(-1)", {"x": vals([2, 3, 4], base + 3)}, base + 3),
                         case("axis1_3d", f"x.{op}(1)", f"x.{op}(1)", {"x": vals([2, 3, 4], base + 4)}, base + 4)]))
    ops.append(("max", [case("axis0", "x.max(0)", "x.max(0).values", {"x": distinct([3, 4], 900)}, 900),
                        case("axis1", "x.max(1)", "x.max(1).values", {"x": distinct([3, 4], 901)}, 901),
                        case("axis_neg1_3d", "x.max(-1)", "x.max(-1).values", {"x": x3(902)}, 902),
                        case("all", "x.max()", "x.max()", {"x": distinct([3, 4], 903)}, 903,
                             "max over all elements: not in the slice-1 contract (max(t, axis) only)")]))
    ops.append(("argmax", [case("axis0", "x.argmax(0)", "x.argmax(0)", {"x": distinct([3, 4], 950)}, 950),
                           case("axis1", "x.argmax(1)", "x.argmax(1)", {"x": distinct([3, 4], 951)}, 951),
                           case("axis_neg1", "x.argmax(-1)", "x.argmax(-1)", {"x": distinct([4, 5], 952)}, 952)]))
    unary = [("relu", "relu(x)", "torch.relu(x)"), ("gelu", "gelu(x)", "F.gelu(x)"),
             ("gelu_tanh", "nn.gelu_tanh(x)", "F.gelu(x, approximate='tanh')"),
             ("sigmoid", "sigmoid(x)", "torch.sigmoid(x)"), ("tanh", "tanh(x)", "torch.tanh(x)"),
             ("exp", "exp(x)", "torch.exp(x)"), ("log", "log(x)", "torch.log(x)"),
             ("silu", "nn.silu(x)", "F.silu(x)")]
    for k, (op, sf, te) in enumerate(unary):
        seed = 1000 + 10 * k
        if op == "log":
            x = vals([2, 5], seed, 0.25, 4.0)
        elif op == "relu":
            x = vals([2, 5], seed)
            x.data[3] = 0.0   # PyTorch's relu'(0) is 0
        else:
            x = vals([2, 5], seed, -3.0, 3.0)
        note = {"relu": "x holds an exact 0.0: PyTorch's gradient there is 0",
                "gelu": "the erf form (BERT's)",
                "gelu_tanh": "the tanh form; not in the slice-1 contract, named here nn.gelu_tanh"}.get(op)
        ops.append((op, [case("2d", sf, te, {"x": x}, seed, note)]))
    for op, te in (("softmax", "torch.softmax"), ("log_softmax", "torch.log_softmax")):
        seed = 1100 if op == "softmax" else 1150
        big = vals([2, 4], seed + 3)
        big.data = [v + 1000.0 for v in big.data]
        ops.append((op, [case("axis1", f"{op}(x, 1)", f"{te}(x, 1)", {"x": vals([3, 4], seed)}, seed),
                         case("axis0", f"{op}(x, 0)", f"{te}(x, 0)", {"x": vals([3, 4], seed + 1)}, seed + 1),
                         case("axis_neg1_3d", f"{op}(x, -1)", f"{te}(x, -1)", {"x": vals([2, 3, 4], seed + 2)}, seed + 2),
                         case("large_logits", f"{op}(x, 1)", f"{te}(x, 1)", {"x": big}, seed + 3,
                              "logits near 1000: exp overflows f32 unless the row max is subtracted")]))
    ce = []
    for k, (name, tg, kw, note) in enumerate((
            ("plain", [0, 2, 1, 3, 3], "", None),
            ("ignore_index_default", [0, -100, 1, -100, 2], "", "rows with target -100 count in neither sum nor mean"),
            ("ignore_index_2", [2, 0, 2, 1, 3], ", ignore_index = 2", None),
            ("label_smoothing", [0, 2, 1, 3, 3], ", label_smoothing = 0.1", None),
            ("ignore_and_smoothing", [1, -100, 3, 0, -100], ", label_smoothing = 0.2", None))):
        seed = 1200 + k
        sflow = f"nn.cross_entropy(logits, targets{kw})"
        te = f"F.cross_entropy(logits, targets{kw.replace(' = ', '=')})"
        ce.append(case(name, sflow, te, {"logits": vals([5, 4], seed, -3.0, 3.0), "targets": ints(tg)}, seed, note))
    big = vals([3, 4], 1210)
    big.data = [v + 1000.0 for v in big.data]
    ce.append(case("large_logits", "nn.cross_entropy(logits, targets)", "F.cross_entropy(logits, targets)",
                   {"logits": big, "targets": ints([3, 0, 1])}, 1210))
    ops.append(("cross_entropy", ce))
    ops.append(("mse", [case("2d", "nn.mse(a, b)", "F.mse_loss(a, b)", {"a": vals([3, 4], 1300), "b": vals([3, 4], 1301)}, 1300),
                        case("1d", "nn.mse(a, b)", "F.mse_loss(a, b)", {"a": vals([5], 1302), "b": vals([5], 1303)}, 1302)]))
    ops.append(("reshape", [case("3d_to_2d", "x.reshape([4, 6])", "x.reshape([4, 6])", {"x": vals([2, 3, 4], 1400)}, 1400),
                            case("infer_dim", "x.reshape([-1, 2])", "x.reshape([-1, 2])", {"x": vals([2, 3, 4], 1401)}, 1401),
                            case("to_1d", "x.reshape([-1])", "x.reshape([-1])", {"x": vals([3, 2], 1402)}, 1402),
                            case("of_transpose", "x.transpose(0, 1).reshape([-1])", "x.transpose(0, 1).reshape([-1])",
                                 {"x": vals([2, 3], 1403)}, 1403, "the reshape of a strided view must copy in logical order")]))
    ops.append(("transpose", [case("2d", "x.transpose(0, 1)", "x.transpose(0, 1)", {"x": vals([2, 3], 1500)}, 1500),
                              case("3d_0_2", "x.transpose(0, 2)", "x.transpose(0, 2)", {"x": vals([2, 3, 4], 1501)}, 1501),
                              case("3d_neg", "x.transpose(-1, -2)", "x.transpose(-1, -2)", {"x": vals([2, 3, 4], 1502)}, 1502)]))
    lin = []
    for k, (name, xs) in enumerate((("2d", [4, 3]), ("3d", [2, 4, 3]), ("1d", [3]))):
        seed = 1600 + 10 * k
        lin.append(case(name, "nn.forward(nn.Linear { weight: weight, bias: bias }, x)",
                        "F.linear(x, weight, bias)",
                        {"x": vals(xs, seed), "weight": vals([2, 3], seed + 1, -1, 1),
                         "bias": vals([2], seed + 2, -1, 1)}, seed,
                        "weight is (out, in) as PyTorch's: x @ weight^T + bias"))
    ops.append(("linear", lin))
    ops.extend(layer_cases())
    ops.extend(index_cases())
    return ops


def index_cases():
    """Rows (t[i], t[a..b], t[i, j, a..b]), select and narrow along any
    axis, index_select and gather (repeated indices: their gradients add),
    cat and stack, and round_bf16.  The sflow and torch spellings differ
    only where the surfaces do: a..b is a:b, and index arrays are i64[]
    (gather's row-major, of the index tensor's shape)."""
    ops = []
    x = lambda s, seed: vals(s, seed)
    ops.append(("index", [
        case("row", "x[1]", "x[1]", {"x": x([3, 4], 4000)}, 4000),
        case("row_negative", "x[-1]", "x[-1]", {"x": x([3, 2, 2], 4001)}, 4001),
        case("row_of_1d", "x[2]", "x[2]", {"x": x([4], 4002)}, 4002, "a 1-D tensor's row is 0-d"),
        case("rows", "x[1..3]", "x[1:3]", {"x": x([4, 3], 4003)}, 4003),
        case("rows_empty", "x[2..2]", "x[2:2]", {"x": x([4, 3], 4004)}, 4004, "no rows: a zero gradient"),
        case("row_of_transpose", "x.transpose(0, 1)[2]", "x.transpose(0, 1)[2]", {"x": x([3, 4], 4005)}, 4005,
             "a row of a strided view is a column of x"),
        case("multi_index", "x[1, -1]", "x[1, -1]", {"x": x([2, 3, 4], 4006)}, 4006),
        case("multi_index_range", "x[-1, 0, 1..3]", "x[-1, 0, 1:3]", {"x": x([2, 3, 4], 4007)}, 4007,
             "t[i, j, a..b] is t[i][j][a..b]")]))
    ops.append(("select", [
        case("axis1", "x.select(1, 2)", "x.select(1, 2)", {"x": x([2, 3, 4], 4100)}, 4100),
        case("axis_neg1_index_neg", "x.select(-1, -1)", "x.select(-1, -1)", {"x": x([2, 3, 4], 4101)}, 4101),
        case("of_transpose", "x.transpose(0, 1).select(1, 0)", "x.transpose(0, 1).select(1, 0)",
             {"x": x([3, 4], 4102)}, 4102, "a strided view: the gradient lands in x's rows"),
        case("twice", "x.select(2, 1).select(0, 1)", "x.select(2, 1).select(0, 1)", {"x": x([2, 3, 4], 4103)}, 4103)]))
    ops.append(("narrow", [
        case("axis1", "x.narrow(1, 1, 2)", "x.narrow(1, 1, 2)", {"x": x([2, 4, 3], 4200)}, 4200),
        case("axis_neg1", "x.narrow(-1, 0, 1)", "x.narrow(-1, 0, 1)", {"x": x([3, 4], 4201)}, 4201),
        case("start_neg", "x.narrow(0, -2, 2)", "x.narrow(0, -2, 2)", {"x": x([4, 3], 4202)}, 4202,
             "a negative start counts from the end, as torch's"),
        case("of_transpose", "x.transpose(0, 1).narrow(1, 1, 2)", "x.transpose(0, 1).narrow(1, 1, 2)",
             {"x": x([4, 3], 4203)}, 4203)]))
    ops.append(("index_select", [
        case("axis0", "nn.index_select(x, 0, idx)", "torch.index_select(x, 0, idx)",
             {"x": x([4, 3], 4300), "idx": ints([3, 0, 2])}, 4300),
        case("axis1_repeated", "nn.index_select(x, 1, idx)", "torch.index_select(x, 1, idx)",
             {"x": x([2, 3, 2], 4301), "idx": ints([2, 0, 2, 2])}, 4301,
             "index 2 three times: its gradient is the sum of three upstream slices"),
        case("axis_neg1", "nn.index_select(x, -1, idx)", "torch.index_select(x, -1, idx)",
             {"x": x([3, 4], 4302), "idx": ints([1])}, 4302),
        case("of_transpose", "nn.index_select(x.transpose(0, 1), 0, idx)",
             "torch.index_select(x.transpose(0, 1), 0, idx)",
             {"x": x([3, 4], 4303), "idx": ints([3, 3, 0])}, 4303)]))
    ops.append(("gather", [
        case("axis1_pick", "nn.gather(x, 1, idx)", "torch.gather(x, 1, idx)",
             {"x": x([4, 5], 4400), "idx": T([4, 1], [3, 0, 4, 3], "i64")}, 4400,
             "one entry per row, as picking each row's target"),
        case("axis0_repeated", "nn.gather(x, 0, idx)", "torch.gather(x, 0, idx)",
             {"x": x([3, 2], 4401), "idx": T([4, 2], [2, 0, 2, 2, 1, 0, 0, 0], "i64")}, 4401),
        case("axis_neg1_3d", "nn.gather(x, -1, idx)", "torch.gather(x, -1, idx)",
             {"x": x([2, 2, 3], 4402), "idx": T([2, 2, 2], [0, 2, 1, 1, 2, 2, 0, 1], "i64")}, 4402)]))
    ops.append(("cat", [
        case("axis0", "nn.cat([a, b])", "torch.cat([a, b])", {"a": x([2, 3], 4500), "b": x([1, 3], 4501)}, 4500),
        case("axis1", "nn.cat([a, b], 1)", "torch.cat([a, b], 1)", {"a": x([2, 3], 4502), "b": x([2, 1], 4503)}, 4502),
        case("repeated_neg_axis", "nn.cat([a, b, a], -1)", "torch.cat([a, b, a], -1)",
             {"a": x([2, 2, 2], 4504), "b": x([2, 2, 3], 4505)}, 4504, "a twice: the sum of both regions"),
        case("of_rows", "nn.cat([a[1..2], a.transpose(0, 1)[0..2]])", "torch.cat([a[1:2], a.transpose(0, 1)[0:2]])",
             {"a": x([3, 3], 4506)}, 4506, "views of one input, one strided")]))
    ops.append(("stack", [
        case("two", "nn.stack([a, b])", "torch.stack([a, b])", {"a": x([2, 3], 4600), "b": x([2, 3], 4601)}, 4600),
        case("rows_repeated", "nn.stack([a[1], b, a[1], a[0]])", "torch.stack([a[1], b, a[1], a[0]])",
             {"a": x([2, 3], 4602), "b": x([3], 4603)}, 4602),
        case("of_0d", "nn.stack([a[0], a[2]])", "torch.stack([a[0], a[2]])", {"a": x([3], 4604)}, 4604)]))
    r = T([2, 4], [float(np.float32(v)) for v in (0.1, 1.0 / 3.0, 1.00390625, 1.01171875, -1.00390625,
                                                   3.0e38, 1e-40, -2.5)])
    ops.append(("round_bf16", [
        case("ties_and_tiny", "nn.round_bf16(x)", "x.bfloat16().to(x.dtype)", {"x": r}, 4700,
             "1.00390625 and 1.01171875 are ties (to even: 1.0 and 1.015625), 3e38 stays finite, "
             "1e-40 is an f32 subnormal")]))
    return ops


def mha(q, k, v, mask, heads):
    """std.nn's attention in torch: heads split from D, scaled_dot_product_attention
    with the (B, S) 0/1 mask as a boolean key-padding mask, heads merged."""
    b, t, d = q.shape
    split = lambda x: x.reshape(x.shape[0], x.shape[1], heads, d // heads).transpose(1, 2)
    keep = mask.bool().reshape(b, 1, 1, k.shape[1])
    o = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=keep)
    return o.transpose(1, 2).reshape(b, t, d)


def mha_causal(q, k, v, heads, kv_heads):
    """std.nn's attention(..., causal = true, kv_heads): query t of T sees keys
    0 .. S - T + t (bottom-right aligned), k and v repeated per query head as
    transformers' repeat_kv."""
    b, t, d = q.shape
    s, dh = k.shape[1], d // heads
    split = lambda x, h: x.reshape(x.shape[0], x.shape[1], h, dh).transpose(1, 2)
    kh = split(k, kv_heads).repeat_interleave(heads // kv_heads, dim=1)
    vh = split(v, kv_heads).repeat_interleave(heads // kv_heads, dim=1)
    keep = torch.arange(s).reshape(1, s) <= (torch.arange(t).reshape(t, 1) + (s - t))
    o = F.scaled_dot_product_attention(split(q, heads), kh, vh, attn_mask=keep)
    return o.transpose(1, 2).reshape(b, t, d)


def rope_hf(x, pos0, theta):
    """std.nn's rope on (B, H, T, D): transformers' Llama rotary embedding
    (inv_freq over arange(0, D, 2) / D, cat(freqs, freqs), rotate_half)."""
    d, t = x.shape[-1], x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    freqs = torch.outer(torch.arange(pos0, pos0 + t, dtype=x.dtype), inv)
    emb = torch.cat([freqs, freqs], -1)
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * emb.cos() + rot * emb.sin()


def op_env():
    return {"torch": torch, "F": F, "mha": mha, "mha_causal": mha_causal, "rope_hf": rope_hf}


def layer_cases():
    """Embedding, LayerNorm, dropout (only where it is deterministic: p = 0
    and training = false; its statistics are test_rt_nn's) and attention."""
    ops = []
    emb = "nn.forward(nn.Embedding { weight: weight }, ids%s)"
    ops.append(("embedding", [
        case("ids_2d", emb % ", [2, 3]", "F.embedding(ids, weight)",
             {"ids": T([2, 3], [1, 4, 1, 0, 3, 1], "i64"), "weight": vals([5, 3], 3000)}, 3000,
             "id 1 three times: its gradient row is the sum of three upstream rows"),
        case("ids_1d", emb % "", "F.embedding(ids, weight)",
             {"ids": ints([2, 0, 2, 5]), "weight": vals([6, 4], 3010)}, 3010)]))
    lnorm = "nn.forward(nn.LayerNorm { weight: weight, bias: bias, eps: %s }, x)"
    ln = []
    for k, (name, xs, eps) in enumerate((("2d", [3, 5], "1e-5"), ("3d", [2, 3, 4], "1e-5"),
                                         ("eps_0.1", [2, 6], "0.1"))):
        seed = 3100 + 10 * k
        d = xs[-1]
        ln.append(case(name, lnorm % eps, f"F.layer_norm(x, [{d}], weight, bias, {eps})",
                       {"x": vals(xs, seed), "weight": vals([d], seed + 1, 0.5, 1.5),
                        "bias": vals([d], seed + 2, -1, 1)}, seed,
                       "biased variance over the last dimension, as torch"))
    ops.append(("layer_norm", ln))
    ops.append(("dropout", [
        case("p_0", "nn.dropout(x, 0.0, 3)", "F.dropout(x, 0.0)", {"x": vals([3, 4], 3200)}, 3200,
             "p = 0 is the identity; random masks are checked by their statistics in test_rt_nn"),
        case("eval", "nn.dropout(x, 0.5, 3, training = false)", "F.dropout(x, 0.5, training=False)",
             {"x": vals([3, 4], 3201)}, 3201)]))
    att = []
    for k, (name, b, t, s, d, heads, mask, note) in enumerate((
            ("self_no_padding", 2, 3, 3, 4, 2, [1] * 6, None),
            ("self_padded", 2, 4, 4, 6, 2, [1, 1, 1, 0, 1, 1, 0, 0], "padded keys get no weight"),
            ("cross_3_heads", 2, 2, 3, 6, 3, [1, 0, 1, 1, 1, 1], "T != S: queries over other keys"),
            ("one_head_all_padded_row", 2, 3, 3, 4, 1, [0, 0, 0, 1, 1, 0],
             "batch 0 is all padding: torch gives zeros there (and zero gradients)"))):
        seed = 3300 + 10 * k
        att.append(case(name, f"nn.attention(q, k, v, mask, {heads})", f"mha(q, k, v, mask, {heads})",
                        {"q": vals([b, t, d], seed, -1, 1), "k": vals([b, s, d], seed + 1, -1, 1),
                         "v": vals([b, s, d], seed + 2, -1, 1), "mask": T([b, s], mask, "i64")}, seed, note))
    ops.append(("attention", att))
    causal = []
    for k, (name, b, t, s, d, heads, kvh, note) in enumerate((
            ("self_causal", 2, 4, 4, 6, 2, 2, None),
            ("after_cache_gqa", 1, 2, 5, 8, 4, 2, "T < S: the queries are the last T positions; 2 key/value heads"),
            ("one_kv_head", 2, 3, 3, 6, 3, 1, "multi-query: every head on one key/value head"))):
        seed = 3400 + 10 * k
        kd = d // heads * kvh
        causal.append(case(name, f"nn.attention(q, k, v, [], {heads}, causal = true, kv_heads = {kvh})",
                           f"mha_causal(q, k, v, {heads}, {kvh})",
                           {"q": vals([b, t, d], seed, -1, 1), "k": vals([b, s, kd], seed + 1, -1, 1),
                            "v": vals([b, s, kd], seed + 2, -1, 1)}, seed, note))
    ops.append(("attention_causal", causal))
    ops.append(("rope", [case("from_0", "nn.rope(x, 0, 10000.0)", "rope_hf(x, 0, 10000.0)",
                              {"x": vals([1, 2, 3, 4], 3500, -2, 2)}, 3500),
                         case("from_5_llama_theta", "nn.rope(x, 5, 100000.0)", "rope_hf(x, 5, 100000.0)",
                              {"x": vals([2, 1, 3, 8], 3510, -2, 2)}, 3510,
                              "SmolLM2's rope_theta; positions 5..7 as a decode step after a cache")]))
    return ops


def run_case(c, dtype):
    """Forward and backward of one op case in `dtype`; the answers as Ts."""
    env = op_env()
    leaves = {}
    for k, t in c["inputs"].items():
        v = t.torch(dtype)
        if t.dtype == "f32":
            v.requires_grad_(True)
            leaves[k] = v
        env[k] = v
    out = eval(c["torch"], env)  # the fixture's own committed expression
    result = {"output": T.of(out)}
    if out.dtype.is_floating_point:
        up = c["upstream"].torch(dtype)
        (out * up).sum().backward()
        result["grads"] = {k: T.of(v.grad) for k, v in leaves.items()}
    return result


def fill_op(c):
    """The upstream gradient and the float64 reference answers of a case."""
    env = op_env()
    env.update({k: t.torch(torch.float64) for k, t in c["inputs"].items()})
    out = eval(c["torch"], env)
    if out.dtype.is_floating_point:
        c["upstream"] = vals(list(out.shape), c["seed"] + 77, -1, 1, step=1 / 16, avoid_zero=True)
    c["expect"] = run_case(c, torch.float64)
    del c["seed"]  # the inputs themselves are in the file
    return c


# ---------------------------------------------------------------- procedures

def sgd_cases():
    out = []
    for k, (name, lr, mom, wd) in enumerate((("momentum", 0.1, 0.9, 0.0), ("momentum_weight_decay", 0.1, 0.9, 0.01),
                                             ("plain", 0.05, 0.0, 0.0))):
        seed = 2000 + 10 * k
        out.append({"name": name, "sflow": f"nn.sgd([p], lr = {lr}, momentum = {mom}, weight_decay = {wd})",
                    "torch": f"torch.optim.SGD([p], lr={lr}, momentum={mom}, weight_decay={wd})",
                    "inputs": {"p": vals([2, 3], seed), "g": [vals([2, 3], seed + 1 + s, -1, 1) for s in range(3)]},
                    "attrs": {"lr": lr, "momentum": mom, "weight_decay": wd},
                    "note": "step t: nn.zero_grad([p]); backward((p * g[t]).sum()) sets grad(p) = g[t]; nn.step(opt)"})
    return out


def adamw_cases():
    out = []
    for k, (name, lr, b1, b2, eps, wd) in enumerate((("lr_0.01", 0.01, 0.9, 0.999, 1e-8, 0.01),
                                                     ("defaults", 0.001, 0.9, 0.999, 1e-8, 0.01),
                                                     ("betas_0.8_0.95", 0.01, 0.8, 0.95, 1e-6, 0.1))):
        seed = 2100 + 10 * k
        out.append({"name": name, "sflow": f"nn.adamw([p], lr = {lr}, beta1 = {b1}, beta2 = {b2}, eps = {eps}, weight_decay = {wd})",
                    "torch": f"torch.optim.AdamW([p], lr={lr}, betas=({b1}, {b2}), eps={eps}, weight_decay={wd})",
                    "inputs": {"p": vals([2, 3], seed), "g": [vals([2, 3], seed + 1 + s, -1, 1) for s in range(3)]},
                    "attrs": {"lr": lr, "beta1": b1, "beta2": b2, "eps": eps, "weight_decay": wd},
                    "note": "decoupled decay p -= lr*wd*p, then Adam with bias correction; step t as in sgd.json"})
    return out


def run_optimizer(op, c, dtype):
    p = c["inputs"]["p"].torch(dtype).requires_grad_(True)
    opt = eval(c["torch"], {"torch": torch, "p": p})
    steps = []
    for g in c["inputs"]["g"]:
        p.grad = g.torch(dtype)
        opt.step()
        st = opt.state[p]
        row = {"p": T.of(p)}
        if op == "sgd" and c["attrs"]["momentum"] != 0.0:
            row["momentum_buffer"] = T.of(st["momentum_buffer"])
        if op == "adamw":
            row["exp_avg"], row["exp_avg_sq"] = T.of(st["exp_avg"]), T.of(st["exp_avg_sq"])
        steps.append(row)
    return {"steps": steps}


def clip_cases():
    out = []
    for k, (name, mx) in enumerate((("clips", 1.0), ("below_max", 100.0))):
        seed = 2400 + 10 * k
        out.append({"name": name, "sflow": f"nn.clip_grad_norm([p0, p1], {mx})",
                    "torch": f"torch.nn.utils.clip_grad_norm_([p0, p1], {mx})",
                    "inputs": {"p": [vals([2, 3], seed), vals([4], seed + 1)],
                               "g": [vals([2, 3], seed + 2), vals([4], seed + 3)]},
                    "attrs": {"max_norm": mx},
                    "note": "grad(p[i]) = g[i]; norm is the global L2 norm before clipping, grads after"})
    return out


def run_clip(c, dtype):
    ps = [p.torch(dtype).requires_grad_(True) for p in c["inputs"]["p"]]
    for p, g in zip(ps, c["inputs"]["g"]):
        p.grad = g.torch(dtype)
    norm = torch.nn.utils.clip_grad_norm_(ps, c["attrs"]["max_norm"])
    return {"norm": T.of(norm), "grads": [T.of(p.grad) for p in ps]}


def hf_linear(warmup, total):
    return lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup))


def hf_cosine(warmup, total):
    def f(s):
        if s < warmup:
            return s / max(1, warmup)
        progress = (s - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    return f


def schedule_cases():
    return [{"name": n, "sflow": f"0.1 * nn.{fn}(step, {w}, {t})", "torch": te,
             "attrs": {"lr": 0.1, "warmup": w, "total": t, "steps": steps}, "note": note}
            for n, fn, w, t, steps, te, note in (
                ("warmup_linear", "warmup_linear", 3, 10, 12, "LambdaLR(SGD(lr=0.1), hf_linear(3, 10))",
                 "Hugging Face's get_linear_schedule_with_warmup; past total the rate stays 0"),
                ("warmup_cosine", "warmup_cosine", 3, 10, 12, "LambdaLR(SGD(lr=0.1), hf_cosine(3, 10))",
                 "Hugging Face's get_cosine_schedule_with_warmup (half a cosine)"),
                ("cosine_annealing", "warmup_cosine", 0, 8, 9, "CosineAnnealingLR(SGD(lr=0.1), T_max=8)",
                 "with warmup 0 the cosine is torch's own CosineAnnealingLR to eta_min 0"))]


def run_schedule(c, dtype):
    """The optimizer's lr before each of `steps` steps (scheduler.step() after each)."""
    a = c["attrs"]
    p = torch.zeros(1, dtype=dtype, requires_grad=True)
    opt = torch.optim.SGD([p], lr=a["lr"])
    if c["name"] == "cosine_annealing":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a["total"])
    else:
        f = (hf_linear if c["name"] == "warmup_linear" else hf_cosine)(a["warmup"], a["total"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, f)
    lrs = []
    for _ in range(a["steps"]):
        lrs.append(float(opt.param_groups[0]["lr"]))
        p.grad = torch.zeros_like(p)
        opt.step()
        sched.step()
    return {"lrs": T([len(lrs)], lrs)}


MLP_NAMES = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def mlp_cases():
    return [{"name": "two_steps", "sflow": "fc2(relu(fc1(x))), nn.cross_entropy, nn.sgd(params(m), lr = 0.1, momentum = 0.9)",
             "torch": "F.linear(torch.relu(F.linear(x, fc1.weight, fc1.bias)), fc2.weight, fc2.bias)",
             "inputs": {"x": vals([6, 4], 2200), "targets": ints([0, 2, 1, 2, 0, 1]),
                        "fc1.weight": vals([5, 4], 2201, -0.5, 0.5), "fc1.bias": vals([5], 2202, -0.5, 0.5),
                        "fc2.weight": vals([3, 5], 2203, -0.5, 0.5), "fc2.bias": vals([3], 2204, -0.5, 0.5)},
             "attrs": {"lr": 0.1, "momentum": 0.9, "steps": 2},
             "note": "struct Mlp { fc1: nn.Linear, fc2: nn.Linear }, params in field order; each step: zero_grad, "
                     "loss = cross_entropy(forward), backward, step; steps[0] is the one-step check; "
                     "loss_after is the loss of the updated weights"}]


def run_mlp(c, dtype):
    inp = c["inputs"]
    ps = {n: inp[n].torch(dtype).requires_grad_(True) for n in MLP_NAMES}
    x, y = inp["x"].torch(dtype), inp["targets"].torch(dtype)
    fwd = lambda: F.linear(torch.relu(F.linear(x, ps["fc1.weight"], ps["fc1.bias"])), ps["fc2.weight"], ps["fc2.bias"])
    opt = torch.optim.SGD(list(ps.values()), lr=c["attrs"]["lr"], momentum=c["attrs"]["momentum"])
    steps = []
    for _ in range(c["attrs"]["steps"]):
        opt.zero_grad()
        loss = F.cross_entropy(fwd(), y)
        loss.backward()
        grads = {n: T.of(p.grad) for n, p in ps.items()}
        opt.step()
        with torch.no_grad():
            after = F.cross_entropy(fwd(), y)
        steps.append({"loss": T.of(loss), "grads": grads, "params": {n: T.of(p) for n, p in ps.items()},
                      "loss_after": T.of(after)})
    return {"steps": steps}


# The safetensors file: Hugging Face names, every loadable dtype, values
# chosen where conversion goes wrong (f16 subnormals and its largest value,
# bf16 rounding of 0.1 and a huge magnitude, -0.0).
ST_FILE = "hf_small.safetensors"
ST_META = {"format": "pt", "sflow_fixture": "hf_small"}


def st_tensors():
    q = vals([4, 4], 2300, -1, 1)
    q.data[5] = -0.0
    return [("encoder.layer.0.attention.self.query.weight", "F32", q),
            ("encoder.layer.0.attention.self.query.bias", "F32", T([4], [0.1, -0.2, 1e-30, 3.4e38])),
            ("encoder.layer.0.attention.output.dense.weight", "F16", vals([3, 4], 2301, -2, 2)),
            ("encoder.layer.0.attention.output.LayerNorm.weight", "F16",
             T([5], [1.0, 65504.0, 2.0 ** -24, 6.1e-05, -0.333])),
            ("embeddings.word_embeddings.weight", "BF16", vals([6, 4], 2302, -4, 4)),
            ("embeddings.LayerNorm.bias", "BF16", T([3], [0.1, -1e30, 1.0 / 3.0]))]


TDT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def write_safetensors(path):
    from safetensors.torch import save_file
    os.umask(0o022)
    tensors = {n: t.torch(torch.float64).to(TDT[d]) for n, d, t in st_tensors()}
    # The package writes __metadata__ from a Rust HashMap, so its key order
    # changes from run to run; keep the first write whose order is sorted,
    # which makes the file byte-identical on every run.
    want = json.dumps(dict(sorted(ST_META.items())), separators=(",", ":")).encode()
    for _ in range(200):
        save_file(tensors, path, metadata=ST_META)
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if want in f.read(n):
                return
    sys.exit(f"gen_nn_fixtures: safetensors never wrote {want!r} in order")


# The half-precision file: f32 values ("src", F32) and torch's conversions
# of them ("bf16", BF16 and "f16", F16: `src.to(dtype)` from float32, round
# to nearest even), for tests/nn/save_halves_test.py, which holds nn.save's
# dtype = "bf16" / "f16" to torch's bytes and nn.load's reading of them to
# the values.  Specials (signed zeros and infinities, NaN, f16's largest
# value and the ties around it, its subnormals and the half-way points
# below them, bf16 ties) and 2000 random bit patterns whose exponents span
# f16's subnormals to past its range.
HALF_FILE = "halves.safetensors"


def half_sources():
    import struct
    f = lambda bits: struct.unpack("<f", struct.pack("<I", bits))[0]
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, f(0xffc00000), f(0x7f800001), 65504.0, 65519.99,
               65520.0, -65520.0, 70000.0, 2.0 ** -24, 2.0 ** -25, f(0x33000001), 3 * 2.0 ** -26,
               2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.00390625,
               1.01171875, -1.00390625, f(0x7f7fffff), f(0x7f7f7fff), f(0x7f7f8000), f(0x00000001),
               f(0x00800000), 0.1, 1.0 / 3.0, -2.5, 3.0e38]
    r, out = Lcg(4800), []
    for _ in range(2000):
        sign, exp, man = r.next() & 1, 127 - 30 + r.next() % 48, r.next() & 0x7fffff
        out.append(f((sign << 31) | (exp << 23) | man))
    return special + out


def write_halves(path):
    from safetensors.torch import save_file
    os.umask(0o022)
    src = torch.tensor(half_sources(), dtype=torch.float32)
    save_file({"src": src, "bf16": src.to(torch.bfloat16), "f16": src.to(torch.float16)}, path)


def safetensors_cases():
    return [{"name": "hf_small", "inputs": {"path": ST_FILE},
             "sflow": "nn.load(m, path) of a struct whose field paths are these names; or the reader alone",
             "torch": "safetensors.torch.load_file(path)",
             "note": "values are the stored ones converted to f32 exactly; the header is padded with spaces "
                     "to a multiple of 8; tensors are laid out F32 first, then by name"}]


def read_safetensors(path):
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        meta = f.metadata()
        tensors = {}
        for n in sorted(f.keys()):
            t = f.get_tensor(n)
            tensors[n] = {"dtype": {v: k for k, v in TDT.items()}[t.dtype], "tensor": T.of(t.to(torch.float32))}
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    offsets = {k: v["data_offsets"] for k, v in header.items() if k != "__metadata__"}
    return {"metadata": dict(sorted(meta.items())), "tensors": tensors, "header_length": n, "data_offsets": dict(sorted(offsets.items()))}


# ---------------------------------------------------------------- writing

def fmt_float(v):
    """The f32 value written exactly: Python's repr of it as a float64.  An
    f32's shortest decimal ('1001.4219' for 1001.421875) would be read by a
    float64 parser as another number; this one reads back as the same value
    whether parsed as f32 or f64."""
    f = np.float32(v)
    if not np.isfinite(f):
        raise ValueError(f"non-finite value {v} in a fixture")
    s = repr(float(f))
    assert np.float32(float(s)) == f and float(s) == float(f), (v, s)
    return s


def enc(o, ind=0):
    pad, pad1 = " " * ind, " " * (ind + 2)
    if isinstance(o, T):
        d = ", ".join(str(int(v)) if o.dtype == "i64" else fmt_float(v) for v in o.data)
        kind = ', "dtype": "i64"' if o.dtype == "i64" else ""
        return f'{{"shape": {json.dumps(o.shape)}{kind}, "data": [{d}]}}'
    if isinstance(o, dict):
        if not o:
            return "{}"
        items = [f"{pad1}{json.dumps(k)}: {enc(v, ind + 2)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, (list, tuple)):
        if not any(isinstance(v, (dict, list, T)) for v in o):
            return json.dumps(list(o))
        return "[\n" + ",\n".join(pad1 + enc(v, ind + 2) for v in o) + "\n" + pad + "]"
    if isinstance(o, float):
        return json.dumps(o)
    return json.dumps(o)


def write_fixture(out, op, cases, tol, extra=None, how="computed in float64, stored as float32"):
    doc = {"op": op,
           "about": "generated by scripts/gen_nn_fixtures.py from torch " + torch.__version__.split("+")[0]
                    + f" ({how}); do not edit, rerun the script (tests/nn/README.md)",
           "tolerance": tol}
    doc.update(extra or {})
    doc["cases"] = cases
    with open(os.path.join(out, op + ".json"), "w") as f:
        f.write(enc(doc) + "\n")


def generate(out):
    os.makedirs(out, exist_ok=True)
    for op, cases in op_cases():
        for c in cases:
            fill_op(c)
        write_fixture(out, op, cases, TOL_OP, {"loss": "(output * upstream).sum(); grads are d loss / d input"})
    for op, cases in (("sgd", sgd_cases()), ("adamw", adamw_cases())):
        for c in cases:
            c["expect"] = run_optimizer(op, c, torch.float64)
        write_fixture(out, op, cases, TOL_TRAIN)
    for op, cases, run in (("clip_grad_norm", clip_cases(), run_clip), ("lr_schedule", schedule_cases(), run_schedule)):
        for c in cases:
            c["expect"] = run(c, torch.float64)
        write_fixture(out, op, cases, TOL_OP)
    cases = mlp_cases()
    for c in cases:
        c["expect"] = run_mlp(c, torch.float64)
    write_fixture(out, "mlp_step", cases, TOL_TRAIN)
    write_safetensors(os.path.join(out, ST_FILE))
    write_halves(os.path.join(out, HALF_FILE))
    cases = safetensors_cases()
    for c in cases:
        c["expect"] = read_safetensors(os.path.join(out, ST_FILE))
    write_fixture(out, "safetensors", cases, {"rtol": 0.0, "atol": 0.0},
                  how=f"the file written and read back by safetensors {safetensors.__version__}; exact")


# ---------------------------------------------------------------- runner

def parse_t(o):
    if isinstance(o, dict) and "shape" in o and "data" in o:
        return T(o["shape"], o["data"], o.get("dtype", "f32"))
    if isinstance(o, dict):
        return {k: parse_t(v) for k, v in o.items()}
    if isinstance(o, list):
        return [parse_t(v) for v in o]
    return o


def runner(path):
    """Answers of torch in float32 for every case of a fixture, one JSON line
    each, in check_fixtures.py's runner format."""
    doc = json.load(open(path))
    op = doc["op"]
    for c in doc["cases"]:
        c["inputs"] = parse_t(c.get("inputs", {}))
        if "upstream" in c:
            c["upstream"] = parse_t(c["upstream"])
        if op in ("sgd", "adamw"):
            r = run_optimizer(op, c, torch.float32)
        elif op == "mlp_step":
            r = run_mlp(c, torch.float32)
        elif op == "clip_grad_norm":
            r = run_clip(c, torch.float32)
        elif op == "lr_schedule":
            r = run_schedule(c, torch.float32)
        elif op == "safetensors":
            r = read_safetensors(os.path.join(os.path.dirname(path), c["inputs"]["path"]))
        else:
            r = run_case(c, torch.float32)
        print(enc(dict({"case": c["name"]}, **r)).replace("\n", " "))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="folder of the fixtures (default tests/nn/fixtures)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temporary folder; fail on any byte changed")
    ap.add_argument("--runner", metavar="FIXTURE", help="print torch-f32 answers for FIXTURE (check_fixtures.py runner)")
    ap.add_argument("--read-safetensors", metavar="FILE",
                    help="print FILE as the safetensors package reads it (the JSON of tests/nn/check_safetensors.py)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.runner:
        runner(a.runner)
        return
    if a.read_safetensors:
        print(enc(read_safetensors(a.read_safetensors)))
        return
    if not a.check:
        generate(a.out)
        names = sorted(os.listdir(a.out))
        print(f"gen_nn_fixtures: {len(names)} files, "
              f"{sum(os.path.getsize(os.path.join(a.out, n)) for n in names)} bytes in {a.out}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        new, old = sorted(os.listdir(tmp)), sorted(os.listdir(a.out))
        bad = [n for n in sorted(set(new) | set(old))
               if n not in new or n not in old or not filecmp.cmp(os.path.join(tmp, n), os.path.join(a.out, n), False)]
        if bad:
            sys.exit(f"gen_nn_fixtures: differ from a fresh run: {', '.join(bad)}")
        print(f"gen_nn_fixtures: {len(new)} files equal to a fresh run")


if __name__ == "__main__":
    main()
