#!/usr/bin/env python3
"""check_fixtures.py — an implementation's answers against PyTorch's, case by
case, for the fixtures of tests/nn/fixtures/ (scripts/gen_nn_fixtures.py).

    python3 tests/nn/check_fixtures.py --runner 'CMD' [FIXTURE.json ...]
        [--case NAME] [--rtol R --atol A] [--verbose]

The runner is any command: it is run once per fixture file, through the
shell, with `{fixture}` in CMD replaced by the fixture's absolute path and
`{op}` by its op (the path is appended when CMD names neither).  It prints
one JSON object per line, one per case it answers: `{"case": NAME, ...}`,
the rest shaped as the case's `expect` (for an op: `"output"` and `"grads"`;
tensors as `{"shape": [...], "data": [...]}`).  Every key of `expect` must be
there; extra keys are ignored; lines that are not JSON objects fail the file.

Numbers compare as |got - want| <= atol + rtol * |want|, with the fixture's
tolerance unless --rtol/--atol are given; a tolerance of 0 and 0 (the
safetensors fixture) means bit-exact, the sign of zero included.  Shapes,
integers and strings compare exactly.  A failed case prints where it
differs (`grads.b[4]: want 0.5, got 0.5625`) and the largest difference.

Needs only Python; no PyTorch.  The last line is `N passed, N failed`; the
exit status is 1 when any case failed or the runner could not be run.
"""
import argparse
import glob
import json
import math
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")


def is_tensor(o):
    return isinstance(o, dict) and "shape" in o and "data" in o


class Diff:
    """The differences found in one case, the first few kept for the report."""

    def __init__(self, rtol, atol):
        self.rtol, self.atol, self.msgs, self.count, self.worst = rtol, atol, [], 0, 0.0

    def add(self, msg):
        self.count += 1
        if len(self.msgs) < 5:
            self.msgs.append(msg)

    def number(self, path, want, got):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return self.add(f"{path}: want the number {want!r}, got {json.dumps(got)}")
        if isinstance(want, int):  # integers (argmax, i64 tensors): exact
            if got != want:
                self.add(f"{path}: want {want}, got {got!r}")
            return
        w, g = float(want), float(got)
        if self.rtol == 0 and self.atol == 0:
            same = (w == g and math.copysign(1, w) == math.copysign(1, g)) or (math.isnan(w) and math.isnan(g))
            if not same:
                self.add(f"{path}: want exactly {w!r}, got {g!r}")
            return
        d = abs(g - w)
        if not (d <= self.atol + self.rtol * abs(w)):  # a NaN fails here too
            self.worst = max(self.worst, d) if not math.isnan(d) else math.inf
            self.add(f"{path}: want {w!r}, got {g!r} (diff {d:.3g})")


def compare(want, got, path, diff):
    """Walks `want`; every part of it must be in `got`."""
    if is_tensor(want):
        if not is_tensor(got):
            return diff.add(f"{path}: want a tensor of shape {want['shape']}, got {json.dumps(got)[:80]}")
        if list(got["shape"]) != list(want["shape"]):
            return diff.add(f"{path}: want shape {want['shape']}, got {got['shape']}")
        if len(got["data"]) != len(want["data"]):
            return diff.add(f"{path}: shape {want['shape']} wants {len(want['data'])} values, got {len(got['data'])}")
        for i, (w, g) in enumerate(zip(want["data"], got["data"])):
            diff.number(f"{path}[{i}]", w, g)
    elif isinstance(want, dict):
        if not isinstance(got, dict):
            return diff.add(f"{path}: want an object, got {json.dumps(got)[:80]}")
        for k, w in want.items():
            sub = f"{path}.{k}" if path else k
            if k not in got:
                diff.add(f"{sub}: missing")
            else:
                compare(w, got[k], sub, diff)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return diff.add(f"{path}: want a list of {len(want)}, got {json.dumps(got)[:80]}")
        for i, (w, g) in enumerate(zip(want, got)):
            compare(w, g, f"{path}[{i}]", diff)
    elif isinstance(want, (int, float)) and not isinstance(want, bool):
        diff.number(path, want, got)
    elif want != got:
        diff.add(f"{path}: want {json.dumps(want)}, got {json.dumps(got)[:80]}")


def run_runner(cmd, path, op, timeout):
    """The runner's answers for one fixture: {case: result}, or an error."""
    if "{fixture}" in cmd or "{op}" in cmd:
        line = cmd.replace("{fixture}", shlex.quote(path)).replace("{op}", shlex.quote(op))
    else:
        line = f"{cmd} {shlex.quote(path)}"
    try:
        p = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"runner took more than {timeout} s: {line}"
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return None, f"runner exited {p.returncode}: {line}" + "".join("\n    " + t for t in tail)
    answers = {}
    for n, text in enumerate(p.stdout.splitlines(), 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as e:
            return None, f"runner output line {n} is not JSON ({e}): {text[:100]}"
        if not isinstance(obj, dict) or not isinstance(obj.get("case"), str):
            return None, f"runner output line {n} is not an object with a \"case\" name: {text[:100]}"
        answers[obj["case"]] = obj
    return answers, None


def check_file(path, args):
    """(passed, failed) for one fixture file, each failure printed."""
    with open(path) as f:
        doc = json.load(f)
    op, tol = doc["op"], doc.get("tolerance", {})
    cases = [c for c in doc["cases"] if not args.case or c["name"] in args.case]
    if not cases:
        return 0, 0
    answers, err = run_runner(args.runner, path, op, args.timeout)
    if err:
        print(f"FAIL {op}: {err}")
        return 0, len(cases)
    passed = failed = 0
    for c in cases:
        rtol = args.rtol if args.rtol is not None else c.get("tolerance", tol).get("rtol", 1e-5)
        atol = args.atol if args.atol is not None else c.get("tolerance", tol).get("atol", 1e-6)
        name = f"{op}/{c['name']}"
        if c["name"] not in answers:
            print(f"FAIL {name}: the runner printed no line for this case")
            failed += 1
            continue
        diff = Diff(rtol, atol)
        compare(c["expect"], answers[c["name"]], "", diff)
        if diff.count:
            failed += 1
            worst = f", largest difference {diff.worst:.3g}" if diff.worst else ""
            print(f"FAIL {name}: {diff.count} value(s) differ (rtol {rtol:g}, atol {atol:g}{worst})"
                  + "".join("\n    " + m for m in diff.msgs))
        else:
            passed += 1
            if args.verbose:
                print(f"ok   {name}")
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", required=True, help="command printing a fixture's answers as JSON lines")
    ap.add_argument("fixtures", nargs="*", help="fixture files (default: every tests/nn/fixtures/*.json)")
    ap.add_argument("--case", action="append", help="only this case name (repeatable)")
    ap.add_argument("--rtol", type=float, help="relative tolerance instead of the fixture's")
    ap.add_argument("--atol", type=float, help="absolute tolerance instead of the fixture's")
    ap.add_argument("--timeout", type=float, default=120, help="seconds for one runner call (default 120)")
    ap.add_argument("--verbose", action="store_true", help="print passing cases too")
    args = ap.parse_args()
    files = [os.path.abspath(f) for f in args.fixtures] or sorted(glob.glob(os.path.join(FIXTURES, "*.json")))
    if not files:
        sys.exit(f"check_fixtures: no fixtures in {FIXTURES}")
    passed = failed = 0
    for path in files:
        try:
            p, f = check_file(path, args)
        except (OSError, ValueError, KeyError) as e:
            print(f"FAIL {path}: not a readable fixture ({e})")
            p, f = 0, 1
        passed, failed = passed + p, failed + f
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
