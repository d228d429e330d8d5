#!/usr/bin/env python3
"""The runtime flags reserved by the compiler are the flags the runtime parses.

runtime/flagnames.h is the one table of the flags a compiled workflow parses
itself; the runtime builds its table from it and sflowc refuses a workflow
parameter that would collide with one.  This test holds the three together:

  - every flag that a compiled program's --help lists under "Runtime flags"
    is in the list, and every non-hidden flag of the list is in --help;
  - every flag of the list, hidden ones included, is one the executable
    parses (a missing value or a bad one is reported, never "unknown flag");
  - for every flag of the list, a workflow parameter of that name (with '_'
    for '-') is a compile error at the parameter that names the flag.

Usage: flags_test.py --sflowc PATH"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def split_rows(body):
    """The cells of every R(...) row: top-level commas split, strings kept
    whole (commas and parentheses inside them are text)."""
    rows = []
    for m in re.finditer(r"\bR\(", body):
        cells, cur, depth, k = [], "", 1, m.end()
        while depth:
            c = body[k]
            if c == '"':
                end = k + 1
                while body[end] != '"':
                    end += 2 if body[end] == "\\" else 1
                cur += body[k:end + 1]
                k = end + 1
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            if c == "," and depth == 1:
                cells.append(cur.strip())
                cur = ""
            elif depth:
                cur += c
            k += 1
        cells.append(cur.strip())
        rows.append(cells)
    return rows


def header_flags():
    """(name, arg, hidden) of every runtime flag, then the info flags."""
    with open(os.path.join(ROOT, "runtime/flagnames.h")) as f:
        text = f.read().replace("\\\n", " ")  # join continued macro lines
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments between rows
    body = text[text.index("#define SF__RUNTIME_FLAG_ROWS"):text.index("#define SF__FLAG_ROW_NAMES")]
    # R(X, ID, name, KIND, field, default, lo, hi, valid, what, ARG, help)
    rt = []
    for row in split_rows(body):
        name, arg, help_ = row[2], row[10], row[11]
        rt.append((name.strip('"'), arg != "NULL", help_ == "NULL"))
    info = re.findall(r'X\("([^"]+)",', text[text.index("#define SF__INFO_FLAGS"):])
    return rt, info


def help_flags(exe):
    """Flag names of the 'Runtime flags:' section of --help."""
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "--help exits 0")
    section = p.stdout.split("Runtime flags:", 1)[1]
    names = set()
    for line in section.splitlines():
        names.update(re.findall(r"--([a-z][a-z0-9-]*)", line.split("  ", 2)[1] if line.startswith("  ") else ""))
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    rt, info = header_flags()
    check(len(rt) >= 20 and {"threads", "nodes", "sflow-worker"} <= {n for n, _, _ in rt},
          "flagnames.h read: %d runtime flags, info flags %s" % (len(rt), info))
    with tempfile.TemporaryDirectory(prefix="sflow-flags-") as tmp:
        src = os.path.join(tmp, "p.sflow")
        with open(src, "w") as f:
            f.write("workflow main(n: i64 = 1) { print(n) }\n")
        exe = os.path.join(tmp, "p")
        subprocess.run([a.sflowc, src, "-o", exe], check=True, timeout=120)

        shown = help_flags(exe)
        listed = {n for n, _, hidden in rt if not hidden} | set(info)
        check(shown == listed, "--help's runtime flags equal flagnames.h's visible flags "
              "(only in --help: %s; only in the list: %s)"
              % (sorted(shown - listed), sorted(listed - shown)))

        for name, takes_arg, hidden in rt:
            # A flag with an argument and none given says "missing value";
            # a boolean given a non-boolean says "invalid value".  Either
            # way the runtime knows it.
            arg = ["--" + name] if takes_arg else ["--%s=maybe" % name]
            p = subprocess.run([exe] + arg, capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            check(p.returncode == 2 and "--" + name in p.stderr and "unknown flag" not in p.stderr,
                  "the runtime parses --%s%s: %s" % (name, " (hidden)" if hidden else "",
                                                      p.stderr.strip().splitlines()[:1]))

        for name in [n for n, _, _ in rt] + info:
            param = name.replace("-", "_")
            with open(src, "w") as f:
                f.write("workflow main(k: i64 = 1, %s: bool = false) { print(k) }\n" % param)
            p = subprocess.run([a.sflowc, "--check", "--error-format=json", src],
                               capture_output=True, text=True, timeout=60)
            diags = [json.loads(l) for l in p.stderr.splitlines() if l.startswith("{")]
            ok = (p.returncode == 1 and len(diags) == 1 and diags[0]["line"] == 1
                  and diags[0]["column"] == 27 and re.search(r"runtime flag --%s(?![\w-])" % name, diags[0]["message"]))
            check(ok, "parameter '%s' is refused at 1:27 naming --%s: %s"
                  % (param, name, [d.get("message") for d in diags]))
    if failures:
        print("%d failed" % len(failures))
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
