#!/usr/bin/env python3
"""csv_chunks_test.py — std.data's CSV reader in chunks over the pool gives
exactly what it gives on one thread (runtime/data/csv.c, "reading in
chunks").

Each case is a random CSV of 1.5 to 3 MB (past the 1 MiB the chunked
reader starts at), drawn from a printed seed: quoted fields with
separators, doubled quotes and line ends inside (some holding whole lines
that look like records, so that cuts fall inside them), CRLF and LF line
ends, blank lines, empty fields, integers that turn a column f64 late,
bools, a "-0", a column that turns str in one chunk only.  The program
reads it with --threads 1 and --threads 4 and writes the table back with
write_csv; the two files and the printed kinds must be byte for byte the
same, and the same as the table Python's csv module reads (texts, row
count).  Bad files (a bad value, a short row, a long row, an unclosed
quote, put in the first, a middle or the last chunk) must fail on both
with the same message, naming the line Python counts.

    csv_chunks_test.py --sflowc build/bin/sflowc [--seed N]
"""
import argparse
import csv
import io
import os
import random
import subprocess
import sys
import tempfile

PROGRAM = r'''
import std.data

workflow main(path: str, out: str, types: str = "") {
  var t = data.Table { rows: 0, columns: [] }
  if types == "" { t = data.read_csv(path) } else { t = data.read_csv_as(path, types.split(",")) }
  print("rows", t.rows, "kinds", [c.kind for c in t.columns])
  data.write_csv(out, t)
}
'''

WORDS = ["plain", "with, comma", 'say ""hi""', "two\nlines", "café", "", "x\r\ny", "北京"]


def quoted(s):
    return '"' + s + '"'


def text_field(rng):
    r = rng.random()
    if r < 0.05:  # lines that look like records: a cut may fall in them
        # Whole records, the last of three fields: read from a cut inside,
        # the closing quote ends a third field and the rest of the record
        # completes the row, so only the cut's check can tell.
        lines = ["%d,%d,x,True,%d" % (rng.randrange(99), rng.randrange(99), rng.randrange(9))
                 for _ in range(rng.randrange(5, 60))]
        return quoted("\n".join(lines + ["%d,0.5,w" % rng.randrange(99)]))
    if r < 0.4:
        return quoted(rng.choice(WORDS))
    return rng.choice(["abc", "z", "q r", "", "True"])


def make(rng, rows, kind):
    """The records (lists of fields, quoted as written) of about rows rows,
    its columns chosen by kind, with a header first; None is a blank line."""
    recs = [["id", "x", "text", "flag", "late"]]
    late_row = rng.randrange(rows // 2, rows)
    for r in range(rows):
        x = repr(rng.uniform(-1e3, 1e3)) if rng.random() < 0.9 else rng.choice(["", "1e300", "-0.0", "7"])
        late = str(rng.randrange(-1000, 1000))
        if kind == "late_float" and r == late_row:
            late = "2.5"
        if kind == "late_str" and r == late_row:
            late = "oops"
        if kind == "neg_zero" and r in (late_row, late_row // 3):
            late = "0.5" if r == late_row // 3 else "-0"  # -0.0 on one thread
        flag = rng.choice(["True", "false", "TRUE"])
        recs.append([str(r), x, text_field(rng), flag, late])
        if rng.random() < 0.01:
            recs.append(None)
    return recs


def join(rng, recs):
    """The text, and the line each record starts on (Python's count: 1 +
    the line feeds before it)."""
    parts, starts, line = [], [], 1
    for rec in recs:
        starts.append(line)
        t = ",".join(rec) if rec is not None else ""
        t += "\r\n" if rng.random() < 0.3 else "\n"
        line += t.count("\n")
        parts.append(t)
    return "".join(parts), starts


def python_rows(text):
    return [row for row in csv.reader(io.StringIO(text, newline="")) if row]


def run(exe, path, out, threads, types):
    args = [exe, "--path", path, "--out", out, "--threads", str(threads), "--quiet"]
    if types:
        args += ["--types", types]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def check_same(exe, tmp, name, text, types, failures):
    path = os.path.join(tmp, name + ".csv")
    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write(text)
    res = {}
    for threads in (1, 4):
        out = os.path.join(tmp, "%s.t%d.out" % (name, threads))
        p = run(exe, path, out, threads, types)
        body = open(out, "rb").read() if p.returncode == 0 else b""
        res[threads] = (p.returncode, p.stdout, p.stderr.replace(exe, "EXE"), body)
    if res[1] != res[4]:
        failures.append("%s: --threads 1 and --threads 4 differ:\n  %r\n  %r" % (
            name, res[1][:3], res[4][:3]))
    return res[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = ap.parse_args()
    print("csv_chunks_test: seed", args.seed)
    rng = random.Random(args.seed)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "read.sflow"), os.path.join(tmp, "read")
        open(src, "w").write(PROGRAM)
        subprocess.run([args.sflowc, src, "-o", exe], check=True)
        for kind, want_late in (("plain", "i64"), ("late_float", "f64"), ("late_str", "str"),
                                ("neg_zero", "f64")):
            for types in ("", "i64,f64,str,bool,str"):
                text, _ = join(rng, make(rng, rng.randrange(25000, 45000), kind))
                name = "%s_%s" % (kind, "typed" if types else "inferred")
                rc, out, err, body = check_same(exe, tmp, name, text, types, failures)
                if rc != 0:
                    failures.append("%s: failed: %s" % (name, err.strip()))
                    continue
                want = python_rows(text)
                got = python_rows(body.decode("utf-8"))
                kinds = out.split("kinds", 1)[1].strip()
                want_kinds = ('["i64", "f64", "str", "bool", "%s"]' % want_late if not types
                              else '["i64", "f64", "str", "bool", "str"]')
                if kinds != want_kinds:
                    failures.append("%s: kinds %s, expected %s" % (name, kinds, want_kinds))
                if len(got) != len(want) or [r[2] for r in got] != [r[2] for r in want]:
                    failures.append("%s: %d rows read back, Python's csv reads %d (or the texts "
                                    "differ)" % (name, len(got), len(want)))
        # Bad files: the error wherever it falls, the same on both, at Python's line.
        for where in (0.02, 0.5, 0.97):
            for bad in ("value", "short", "long", "unclosed"):
                recs = make(rng, 30000, "plain")
                at = max(1, int(len(recs) * where))
                while recs[at] is None:
                    at += 1
                cells = recs[at]
                cells[2] = "plain"  # the error on the line the record starts on
                if bad == "value":
                    cells[0] = "7x"
                elif bad == "short":
                    del cells[3:]
                elif bad == "long":
                    cells.append("9")
                else:
                    cells[2] = '"never closed'
                    recs = recs[:at + 1] + [["1", "2", "3", "True", "4"]] * 3  # nothing closes it
                text, starts = join(rng, recs)
                line = starts[at]
                name = "bad_%s_%d" % (bad, int(where * 100))
                rc, out, err, body = check_same(exe, tmp, name, text, "i64,f64,str,bool,i64",
                                                failures)
                if rc == 0:
                    failures.append("%s: read without an error" % name)
                elif ("%s.csv:%d:" % (name, line)) not in err and (
                        bad != "unclosed" or "opens at line %d," % line not in err):
                    failures.append("%s: the message does not name line %d: %s" % (
                        name, line, err.strip()))
    for f in failures:
        print("FAIL", f)
    print("csv_chunks_test: %d failure(s), seed %d" % (len(failures), args.seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
