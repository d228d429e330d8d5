#!/usr/bin/env python3
"""sflow_runner.py — std.nn's answers to a PyTorch fixture, for check_fixtures.py.

    python3 tests/nn/sflow_runner.py --sflowc build/bin/sflowc FIXTURE

Writes one sflow program for the fixture (one function per case: the
inputs as params built from the fixture's values, the case's `sflow`
expression, and for float outputs backward((output * upstream).sum())),
compiles and runs it, and passes its output through: one JSON line per case
({"case", "output", "grads"}), as check_fixtures.py wants.  The optimizer
fixtures (sgd, adamw) step a param by the fixture's gradients and answer
with the param and the optimizer state after each step; mlp_step answers
with the loss, the gradients and the parameters of a Linear-relu-Linear
model after each SGD-with-momentum step; clip_grad_norm with the norm and
the clipped gradients; lr_schedule with the rate of each step.  Values are printed through
std.data's to_json (f32 as their shortest round-trip text), which the
checker reads as float64 within the fixture's tolerance.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HEADER = '''import std.nn
import std.data

fn jt(t: tensor) -> str {
  return "{\\"shape\\": " + data.to_json(t.shape()) + ", \\"data\\": " + data.to_json(t.data()) + "}"
}
fn ji(xs: i64[]) -> str {
  return "{\\"shape\\": [" + str(len(xs)) + "], \\"dtype\\": \\"i64\\", \\"data\\": " + data.to_json(xs) + "}"
}
fn js(s: str) -> str { return data.to_json(s) }
'''


def flit(xs):
    return "[" + ", ".join(repr(float(x)) for x in xs) + "]"


def tensor_lit(t):
    data = t["data"]
    if not data:
        return "zeros(%s)" % json.dumps(t["shape"])
    return "tensor(%s, %s)" % (flit(data), json.dumps(t["shape"]))


def op_case(i, c):
    lines = ["fn case_%d() {" % i]
    floats = []
    for name, t in c["inputs"].items():
        if t.get("dtype") == "i64":
            lines.append("  let %s: i64[] = %s" % (name, json.dumps(t["data"])))
        else:
            lines.append("  let %s = param(%s)" % (name, tensor_lit(t)))
            floats.append(name)
    lines.append("  let output = %s" % c["sflow"])
    if c["expect"]["output"].get("dtype") == "i64":
        lines.append('  print("{\\"case\\": " + js(%s) + ", \\"output\\": " + ji(output) + "}")'
                     % json.dumps(c["name"]))
    else:
        lines.append("  backward((output * %s).sum())" % tensor_lit(c["upstream"]))
        grads = " + \", \" + ".join('"\\"%s\\": " + jt(grad(%s))' % (n, n) for n in floats
                                    if n in c["expect"].get("grads", {}))
        lines.append('  print("{\\"case\\": " + js(%s) + ", \\"output\\": " + jt(output) + '
                     '", \\"grads\\": {" + %s + "}}")' % (json.dumps(c["name"]), grads or '""'))
    lines.append("}")
    return "\n".join(lines)


def opt_case(i, c, kind):
    """p stepped by the fixture's gradients; the state after each step."""
    p = c["inputs"]["p"]
    gs = c["inputs"]["g"]
    gs = gs if isinstance(gs, list) else [gs]
    lines = ["fn case_%d() {" % i, "  let p = param(%s)" % tensor_lit(p)]
    lines.append("  var opt = %s" % c["sflow"])
    lines.append('  var steps = ""')
    for k, g in enumerate(gs):
        lines.append("  nn.zero_grad([p])")
        lines.append("  backward((p * %s).sum())" % tensor_lit(g))
        lines.append("  nn.step(opt)")
        state = '", \\"p\\": " + jt(p)'
        if kind == "sgd":
            state += ' + ", \\"momentum_buffer\\": " + jt(opt.bufs[0])'
        else:
            state += ' + ", \\"exp_avg\\": " + jt(opt.m[0]) + ", \\"exp_avg_sq\\": " + jt(opt.v[0])'
        sep = '", "' if k else '""'
        lines.append('  steps = steps + %s + "{\\"step\\": %d" + %s + "}"' % (sep, k + 1, state))
    lines.append('  print("{\\"case\\": " + js(%s) + ", \\"steps\\": [" + steps + "]}")' % json.dumps(c["name"]))
    lines.append("}")
    return "\n".join(lines)


def clip_case(i, c):
    """grad(p[j]) = g[j] by one backward; the norm clip_grad_norm returns
    and the gradients after it."""
    ps, gs = c["inputs"]["p"], c["inputs"]["g"]
    lines = ["fn case_%d() {" % i]
    lines += ["  let p%d = param(%s)" % (j, tensor_lit(p)) for j, p in enumerate(ps)]
    lines.append("  backward(%s)" % " + ".join("(p%d * %s).sum()" % (j, tensor_lit(g)) for j, g in enumerate(gs)))
    lines.append("  let norm = nn.clip_grad_norm([%s], %r)" % (", ".join("p%d" % j for j in range(len(ps))),
                                                            c["attrs"]["max_norm"]))
    grads = ' + ", " + '.join("jt(grad(p%d))" % j for j in range(len(ps)))
    lines.append('  print("{\\"case\\": " + js(%s) + ", \\"norm\\": {\\"shape\\": [], \\"data\\": " + '
                 'data.to_json([norm]) + "}, \\"grads\\": [" + %s + "]}")' % (json.dumps(c["name"]), grads))
    lines.append("}")
    return "\n".join(lines)


def schedule_case(i, c):
    """The case's sflow expression of `step` for steps 0..steps-1."""
    lines = ["fn case_%d() {" % i, "  var lrs: f64[] = []",
             "  for step in 0..%d { lrs.push(%s) }" % (c["attrs"]["steps"], c["sflow"]),
             '  print("{\\"case\\": " + js(%s) + ", \\"lrs\\": {\\"shape\\": [" + str(len(lrs)) + "], \\"data\\": " + data.to_json(lrs) + "}}")' % json.dumps(c["name"]),
             "}"]
    return "\n".join(lines)


MLP_PRELUDE = """struct Mlp { fc1: nn.Linear, fc2: nn.Linear }
fn forward(m: Mlp, x: tensor) -> tensor { return nn.forward(m.fc2, relu(nn.forward(m.fc1, x))) }
"""

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def mlp_case(i, c):
    """The fixture's Mlp stepped by SGD with momentum: per step the loss,
    the gradients and the parameters by field path, and the loss after."""
    inp = c["inputs"]
    lines = ["fn case_%d() {" % i,
             "  let x = %s" % tensor_lit(inp["x"]),
             "  let targets: i64[] = %s" % json.dumps(inp["targets"]["data"]),
             "  let m = Mlp { fc1: nn.Linear { weight: param(%s), bias: param(%s) }, "
             "fc2: nn.Linear { weight: param(%s), bias: param(%s) } }"
             % tuple(tensor_lit(inp[n]) for n in NAMES),
             "  var opt = nn.sgd(params(m), lr = %r, momentum = %r)" % (c["attrs"]["lr"], c["attrs"]["momentum"]),
             '  var steps = ""']
    for k in range(c["attrs"]["steps"]):
        lines += ["  nn.zero_grad(params(m))",
                  "  let loss_%d = nn.cross_entropy(forward(m, x), targets)" % k,
                  "  backward(loss_%d)" % k,
                  "  let g_%d = grads(m)" % k,
                  "  let gs_%d = [jt(g) for g in g_%d]" % (k, k),
                  "  nn.step(opt)",
                  "  let ps_%d = [jt(p) for p in params(m)]" % k,
                  "  let after_%d = nn.cross_entropy(forward(m, x), targets)" % k]
        grads = " + \", \" + ".join('"\\"%s\\": " + gs_%d[%d]' % (n, k, j) for j, n in enumerate(NAMES))
        ps = " + \", \" + ".join('"\\"%s\\": " + ps_%d[%d]' % (n, k, j) for j, n in enumerate(NAMES))
        sep = '", "' if k else '""'
        lines.append('  steps = steps + %s + "{\\"loss\\": " + jt(loss_%d) + ", \\"grads\\": {" + %s + '
                     '"}, \\"params\\": {" + %s + "}, \\"loss_after\\": " + jt(after_%d) + "}"'
                     % (sep, k, grads, ps, k))
    lines.append('  print("{\\"case\\": " + js(%s) + ", \\"steps\\": [" + steps + "]}")' % json.dumps(c["name"]))
    lines.append("}")
    return "\n".join(lines)


def program(doc):
    op = doc["op"]
    cases = []
    for i, c in enumerate(doc["cases"]):
        if op == "mlp_step":
            cases.append(mlp_case(i, c))
        elif op in ("sgd", "adamw"):
            cases.append(opt_case(i, c, op))
        elif op == "clip_grad_norm":
            cases.append(clip_case(i, c))
        elif op == "lr_schedule":
            cases.append(schedule_case(i, c))
        else:
            cases.append(op_case(i, c))
    main = "workflow main() {\n" + "\n".join("  case_%d()" % i for i in range(len(doc["cases"]))) + "\n}\n"
    return HEADER + (MLP_PRELUDE if op == "mlp_step" else "") + "\n" + "\n\n".join(cases) + "\n\n" + main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--keep", help="also write the generated program here")
    ap.add_argument("fixture")
    a = ap.parse_args()
    doc = json.load(open(a.fixture))
    src = program(doc)
    if a.keep:
        open(a.keep, "w").write(src)
    with tempfile.TemporaryDirectory(prefix="sflow-nnfix-") as tmp:
        path = os.path.join(tmp, "%s.sflow" % doc["op"])
        open(path, "w").write(src)
        exe = os.path.join(tmp, "prog")
        c = subprocess.run([a.sflowc, path, "-o", exe], capture_output=True, text=True)
        if c.returncode != 0:
            sys.stderr.write(c.stderr)
            return 2
        r = subprocess.run([exe, "--quiet"], capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
