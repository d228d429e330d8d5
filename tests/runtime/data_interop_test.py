#!/usr/bin/env python3
"""data_interop_test.py — std.data's formats against their Python peers.

Both directions, with values drawn fresh from a printed seed:
  * sflow writes CSV, JSON, JSON Lines, .npy (f32, f64, i32, i64, u8, a
    0-d array, a 3-d shape) and raw bytes; Python's csv, json and numpy
    read them back and must find exactly the values written (floats bit
    for bit: both sides print the shortest round-trip form).
  * Python's csv, json and numpy write the same kinds of files; the sflow
    program reads them and prints what it read, which must equal what
    Python wrote.

numpy comes from scripts/install-pydeps.sh's virtual environment
(build/pydeps or $SFLOW_PYDEPS); the test re-executes itself there when
the running Python lacks numpy, and fails saying so when it is missing.

    data_interop_test.py --sflowc build/bin/sflowc [--seed N]
"""
import argparse
import csv
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pydeps  # noqa: E402

pydeps.ensure("data_interop_test", "numpy")
import numpy as np  # noqa: E402

WRITER = r'''
import std.data

workflow main(xs: str = "", n: i64 = 0) {
  // The values come in as one string of Python reprs, so both sides hold
  // exactly the same numbers.
  let t = data.parse_csv(xs, header = false)
  let f = t.columns[0].floats
  let ints = [i64(x * 1000.0) for x in f]
  let names = ["plain", "with, comma", "with \"quote\"", "two\nlines", "café", ""]
  let words = [names[i % 6] for i in 0..n]
  data.write_csv("out.csv", data.table([data.f64_column("x", f), data.i64_column("k", ints),
                                        data.str_column("w", words),
                                        data.f32_column("y", [f32(x) for x in f])]))
  let items = [data.json_object(["x", "w", "ok"], [data.json_number(f[i]), data.json_string(words[i]),
                                                   data.json_bool(i % 2 == 0)]) for i in 0..n]
  data.write_json("out.json", data.json_array(items))
  data.write_jsonl("out.jsonl", items)
  data.write_npy("f64.npy", f, [n])
  data.write_npy("f32.npy", [f32(x) for x in f], [n])
  data.write_npy("i64.npy", ints, [n])
  data.write_npy("i32.npy", [i32(k % 100000) for k in ints], [1, n])
  data.write_npy_u8("u8.npy", [i32(i % 256) for i in 0..n], [n])
  data.write_npy("d3.npy", [f64(i) for i in 0..24], [2, 3, 4])
  let scalar: i64[] = []
  data.write_npy("d0.npy", [f[0]], scalar)
  data.write_bytes("out.bin", [i32(i % 256) for i in 0..n])
}
'''

READER = r'''
import std.data

workflow main() {
  let t = data.read_csv("in.csv")
  print(t.rows, data.names(t))
  for c in t.columns { print(c.name, c.kind) }
  for x in data.floats(t, "x") { print("x", x) }
  for k in data.ints(t, "k") { print("k", k) }
  for w in data.texts(t, "w") { print("w", data.dump_json(data.json_string(w))) }
  let j = data.read_json("in.json")
  for it in j.items { print("j", data.dump_json(it)) }
  for it in data.read_jsonl("in.jsonl") { print("l", data.dump_json(it)) }
  let a = data.read_npy_f64("f64.npy")
  print("f64", a.shape, a.data)
  let b = data.read_npy_f32("f32.npy")
  print("f32", b.shape, b.data)
  let c = data.read_npy_i64("i64.npy")
  print("i64", c.shape, c.data)
  let d = data.read_npy_i32("i32.npy")
  print("i32", d.shape, d.data)
  let e = data.read_npy_i32("u8.npy")
  print("u8", e.shape, e.data)
  print("bytes", data.read_bytes("in.bin"))
}
'''


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit("data_interop_test: %s failed (%d):\n%s%s" % (cmd[0], p.returncode, p.stdout,
                                                               p.stderr))
    return p.stdout


def check(cond, what):
    if not cond:
        sys.exit("data_interop_test: FAIL: " + what)


def sflow_to_python(sflowc, tmp, rng):
    n = 50
    xs = [rng.uniform(-1e3, 1e3) for _ in range(n - 3)] + [0.1, -0.0, 1e-300]
    words = ["plain", "with, comma", 'with "quote"', "two\nlines", "café", ""]
    src = os.path.join(tmp, "writer.sflow")
    open(src, "w").write(WRITER)
    run([sflowc, src, "-o", os.path.join(tmp, "writer")], tmp)
    run([os.path.join(tmp, "writer"), "--xs", "\n".join(repr(x) for x in xs), "--n", str(n),
         "--quiet"], tmp)
    ints = [int(x * 1000.0) for x in xs]
    # CSV through Python's csv module.
    with open(os.path.join(tmp, "out.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    check(rows[0] == ["x", "k", "w", "y"], "csv header %r" % rows[0])
    check(len(rows) == n + 1, "csv has %d rows" % (len(rows) - 1))
    for i, r in enumerate(rows[1:]):
        check(float(r[0]) == xs[i] and math.copysign(1, float(r[0])) == math.copysign(1, xs[i]),
              "csv x[%d] %r != %r" % (i, r[0], xs[i]))
        check(int(r[1]) == ints[i], "csv k[%d] %r != %r" % (i, r[1], ints[i]))
        check(r[2] == words[i % 6], "csv w[%d] %r != %r" % (i, r[2], words[i % 6]))
        check(np.float32(r[3]) == np.float32(xs[i]), "csv y[%d] %r" % (i, r[3]))
    # JSON and JSON Lines through Python's json module.
    want = [{"x": xs[i], "w": words[i % 6], "ok": i % 2 == 0} for i in range(n)]
    got = json.load(open(os.path.join(tmp, "out.json"), encoding="utf-8"))
    check(got == want, "json differs: %r" % got[:2])
    lines = open(os.path.join(tmp, "out.jsonl"), encoding="utf-8").read().splitlines()
    check([json.loads(l) for l in lines] == want, "jsonl differs")
    # .npy through numpy.load.
    a = np.load(os.path.join(tmp, "f64.npy"))
    check(a.dtype == np.float64 and a.shape == (n,) and a.tobytes() == np.array(xs).tobytes(),
          "f64.npy %r" % a[:3])
    a = np.load(os.path.join(tmp, "f32.npy"))
    check(a.dtype == np.float32 and (a == np.array(xs, dtype=np.float32)).all(), "f32.npy")
    a = np.load(os.path.join(tmp, "i64.npy"))
    check(a.dtype == np.int64 and a.tolist() == ints, "i64.npy")
    a = np.load(os.path.join(tmp, "i32.npy"))
    check(a.dtype == np.int32 and a.shape == (1, n) and a[0].tolist() ==
          [int(math.fmod(k, 100000)) for k in ints], "i32.npy %r" % a)
    a = np.load(os.path.join(tmp, "u8.npy"))
    check(a.dtype == np.uint8 and a.tolist() == [i % 256 for i in range(n)], "u8.npy")
    a = np.load(os.path.join(tmp, "d3.npy"))
    check(a.shape == (2, 3, 4) and a.tolist() == np.arange(24.0).reshape(2, 3, 4).tolist(),
          "d3.npy")
    a = np.load(os.path.join(tmp, "d0.npy"))
    check(a.shape == () and float(a) == xs[0], "d0.npy %r" % a)
    check(open(os.path.join(tmp, "out.bin"), "rb").read() == bytes(i % 256 for i in range(n)),
          "out.bin")
    print("ok: sflow -> Python: csv, json, jsonl, npy (f64 f32 i64 i32 u8, 3-d, 0-d), bytes")


def fmt_f(x):
    """What sflow's print writes for an f64: Python's repr."""
    return repr(float(x))


def python_to_sflow(sflowc, tmp, rng):
    n = 20
    xs = [rng.uniform(-1e6, 1e6) for _ in range(n)]
    ks = [rng.randrange(-2**62, 2**62) for _ in range(n)]
    ws = [rng.choice(["a", "b,c", 'q"q', "x\ny", "é", " sp "]) for _ in range(n)]
    with open(os.path.join(tmp, "in.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)  # CRLF line ends, minimal quoting
        w.writerow(["x", "k", "w"])
        for row in zip(xs, ks, ws):
            w.writerow(row)
    objs = [{"x": xs[i], "k": i, "w": ws[i], "n": None, "l": [True, False]} for i in range(n)]
    json.dump(objs, open(os.path.join(tmp, "in.json"), "w"))
    with open(os.path.join(tmp, "in.jsonl"), "w") as f:
        for o in objs:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    np.save(os.path.join(tmp, "f64.npy"), np.array(xs).reshape(4, 5))
    f32 = np.array(xs, dtype=np.float32)
    np.save(os.path.join(tmp, "f32.npy"), f32)
    np.save(os.path.join(tmp, "i64.npy"), np.array(ks, dtype=np.int64))
    np.save(os.path.join(tmp, "i32.npy"), np.array(ks, dtype=np.int64).astype(np.int32))
    u8 = np.array([rng.randrange(256) for _ in range(n)], dtype=np.uint8)
    np.save(os.path.join(tmp, "u8.npy"), u8)
    raw = bytes(rng.randrange(256) for _ in range(n))
    open(os.path.join(tmp, "in.bin"), "wb").write(raw)
    src = os.path.join(tmp, "reader.sflow")
    open(src, "w").write(READER)
    run([sflowc, src, "-o", os.path.join(tmp, "reader")], tmp)
    got = run([os.path.join(tmp, "reader"), "--quiet"], tmp).splitlines()

    def dumps(o):
        """sflow's dump_json: integral numbers as integers."""
        if isinstance(o, float) and o == int(o) and abs(o) <= 2**53:
            return str(int(o))
        if isinstance(o, dict):
            return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + dumps(v)
                                   for k, v in o.items()) + "}"
        if isinstance(o, list):
            return "[" + ", ".join(dumps(v) for v in o) + "]"
        return json.dumps(o, ensure_ascii=False)

    want = ["%d [\"x\", \"k\", \"w\"]" % n, "x f64", "k i64", "w str"]
    want += ["x " + fmt_f(x) for x in xs] + ["k %d" % k for k in ks]
    want += ["w " + json.dumps(w, ensure_ascii=False) for w in ws]
    want += ["j " + dumps(o) for o in objs] + ["l " + dumps(o) for o in objs]
    want.append("f64 [4, 5] [" + ", ".join(fmt_f(x) for x in xs) + "]")
    f32s = []
    for v in f32:  # the shortest text that reads back as the f32
        for d in range(1, 10):
            s = "%.*g" % (d, v)
            if np.float32(s) == v:
                break
        f32s.append(fmt_f(float(s)))
    want.append("f32 [%d] [%s]" % (n, ", ".join(f32s)))
    want.append("i64 [%d] [%s]" % (n, ", ".join(str(k) for k in ks)))
    want.append("i32 [%d] [%s]" % (n, ", ".join(str(int(k)) for k in
                                               np.array(ks, dtype=np.int64).astype(np.int32))))
    want.append("u8 [%d] [%s]" % (n, ", ".join(str(int(v)) for v in u8)))
    want.append("bytes [%s]" % ", ".join(str(b) for b in raw))
    for i, (g, w) in enumerate(zip(got, want)):
        check(g == w, "line %d of the reader's output:\n  got:  %s\n  want: %s" % (i + 1, g, w))
    check(len(got) == len(want), "the reader printed %d lines, want %d" % (len(got), len(want)))
    print("ok: Python -> sflow: csv, json, jsonl, npy (f64 2-d, f32, i64, i32, u8), bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    print("data_interop_test: seed %d (--seed %d repeats it); numpy %s" % (seed, seed,
                                                                           np.__version__))
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="sflow-data-") as tmp:
        sflow_to_python(os.path.abspath(a.sflowc), tmp, rng)
        python_to_sflow(os.path.abspath(a.sflowc), tmp, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
