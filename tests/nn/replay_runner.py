#!/usr/bin/env python3
"""replay_runner.py — a runner for check_fixtures.py that answers with the
fixture's own expected values, optionally damaged, so that the checker can
be shown to pass what is right and to catch what is not.

    python3 tests/nn/replay_runner.py FIXTURE [--perturb CASE:PATH:DELTA]
        [--set CASE:PATH:JSON] [--drop CASE] [--drop-key CASE:KEY]
        [--garbage] [--exit N]

PATH is the checker's own notation, `grads.b[4]`, `steps[1].p[0]`,
`output.shape`: `[i]` indexes a tensor's data or a list.  --perturb adds
DELTA to one number, --set replaces what PATH names with a JSON value,
--drop leaves a case out, --drop-key leaves out one key of a case's answer,
--garbage prints a line that is not JSON, --exit ends with status N.
"""
import argparse
import json
import sys


def walk(obj, path):
    """The container and key/index that PATH names inside obj.  Keys may
    hold dots (`tensors.encoder.layer.0.attention.self.query.weight`): at
    each object the longest key that PATH continues with is taken."""
    rest = path
    while True:
        if rest.startswith("["):
            end = rest.index("]")
            k, rest = int(rest[1:end]), rest[end + 1:]
            if isinstance(obj, dict) and "data" in obj:  # a tensor: index its data
                obj = obj["data"]
        else:
            keys = [k for k in obj if rest.startswith(k) and rest[len(k):len(k) + 1] in ("", ".", "[")]
            if not keys:
                raise KeyError(f"{path!r}: nothing named {rest!r}")
            k = max(keys, key=len)
            rest = rest[len(k):]
        if not rest:
            return obj, k
        obj = obj[k]
        rest = rest[1:] if rest.startswith(".") else rest


def split3(spec):
    case, path, rest = spec.split(":", 2)
    return case, path, rest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("--perturb", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--drop-key", action="append", default=[])
    ap.add_argument("--garbage", action="store_true")
    ap.add_argument("--exit", type=int, default=0)
    a = ap.parse_args()
    doc = json.load(open(a.fixture))
    answers = {c["name"]: dict(c["expect"]) for c in doc["cases"]}
    for spec in a.perturb:
        case, path, delta = split3(spec)
        box, k = walk(answers[case], path)
        box[k] = box[k] + float(delta)
    for spec in a.set:
        case, path, value = split3(spec)
        box, k = walk(answers[case], path)
        box[k] = json.loads(value)
    for spec in a.drop_key:
        case, key = spec.split(":", 1)
        del answers[case][key]
    if a.garbage:
        print("tensor([[1.0, 2.0]])")
    for name, ans in answers.items():
        if name not in a.drop:
            print(json.dumps(dict({"case": name}, **ans)))
    sys.exit(a.exit)


if __name__ == "__main__":
    main()
