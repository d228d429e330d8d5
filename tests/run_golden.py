#!/usr/bin/env python3
"""Golden and run tests for sflowc: one behaviour per small .sflow file.

Expectations live in the test file itself (wren/Go style):

  // expect error:COL: REGEX        an error on this line at column COL
  // expect error at L:C: REGEX     an error at another place (e.g. end of file)
  // expect warning:COL: REGEX      likewise for warnings (notes: `note`)
  // expect: TEXT                   (run tests) one line of the program's stdout
  // expect~REL: TEXT               (run tests) a line whose numbers may differ
                                    from TEXT's by REL relative (the words and
                                    the count of numbers exactly): for figures
                                    that hold only to rounding under another
                                    BLAS kernel (OPENBLAS_CORETYPE)
  // expect runtime error: REGEX    (run tests) stderr matches, exit code 70
  // args: --flag value ...         (run tests) command-line arguments, split as
                                   a POSIX shell would ("a b" is one argument)
  // exit: N                        (run tests) the expected exit code
  // module: WHO                    the file is a module that other tests
                                    import (WHO says which): it is only
                                    checked (`--check`, no error), never run
  // max-rss-mb: N                  (run tests) the program's peak resident
                                    memory must stay under N MiB (stress tests;
                                    the figure includes ~15 MiB that the child
                                    holds from Python before exec)
  // max-seconds: N                  (run tests) the program's CPU time (user +
                                    sys, so a busy machine does not inflate
                                    it) must stay under N seconds (tests of
                                    an algorithm's complexity)
  // golden: ast tokens parse llvm cuda stderr
                                    compare `sflowc --emit=KIND` (or the human
                                    diagnostics, for stderr) with NAME.KIND.golden
                                    (llvm: -O0 IR, normalized by normalize_llvm)

Every error the compiler reports must be expected, and every expected one
must be reported at exactly that line and column.  A file with no
expectation must pass `--check` with no error.  UPDATE_GOLDEN=1 rewrites
.golden files; a golden file that is declared but missing fails.

Usage: run_golden.py --sflowc PATH [--dir DIR] [--run] [FILE_OR_NAME ...]
"""
import argparse
import difflib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECT_DIAG = re.compile(r"//\s*expect (error|warning|note)(?::(\d+)| at (\d+):(\d+)):\s?(.*)$")
EXPECT_OUT = re.compile(r"//\s*expect:\s?(.*)$")
EXPECT_APPROX = re.compile(r"//\s*expect~([0-9.eE+-]+):\s?(.*)$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
EXPECT_RT = re.compile(r"//\s*expect runtime error:\s?(.*)$")
ARGS = re.compile(r"//\s*args:\s?(.*)$")
EXIT = re.compile(r"//\s*exit:\s*(\d+)")
MODULE = re.compile(r"//\s*module:")
MAX_RSS = re.compile(r"//\s*max-rss-mb:\s*(\d+)")
MAX_SECONDS = re.compile(r"//\s*max-seconds:\s*(\d+(?:\.\d+)?)")
GOLDEN = re.compile(r"//\s*golden:\s*(.*)$")
# Seconds per compile or run; sanitizer builds (scripts/tsan.sh) run
# programs 5-15x slower and raise it with SFLOW_TEST_TIMEOUT.
TIMEOUT = int(os.environ.get("SFLOW_TEST_TIMEOUT", "60"))


_PTR_TYPES = [
    re.compile(r"\b(?:i\d+|half|float|double|void|ptr)\*"),   # i8*, double*, ptr* (from i8**)
    re.compile(r"%[\w.$-]+\*"),                             # %sf_array*
    re.compile(r"\[\d+ x (?:[^\[\]])*?\]\*"),             # [6 x i8]*
    re.compile(r"\{[^{}]*\}\*"),                            # { i64, ptr }*
    re.compile(r"\b(?:i\d+|float|double|void|ptr) \([^()]*\)\*"),  # void (ptr)*
]


def _opaque_pointers(line):
    """Spells every typed pointer (LLVM 14) as the opaque `ptr` of LLVM 15+."""
    while True:
        before = line
        for rx in _PTR_TYPES:
            line = rx.sub("ptr", line)
        if line == before:
            return line


def normalize_llvm(text):
    """Keeps the function definitions of a module in a form that does not
    depend on the LLVM version: typed pointers become `ptr`, and what opaque
    pointers make disappear (pointer bitcasts, zero GEPs of constant
    strings) is removed; comments, attributes, metadata and the module
    header are dropped; unnamed values are renumbered in order of first
    appearance."""
    out = []
    infn = False
    for line in text.splitlines():
        if line.startswith("define "):
            infn, alias, names = True, {}, {}
        if not infn:
            continue
        line = re.sub(r"\s*;.*$", "", line)            # comments: preds, Function Attrs
        line = re.sub(r" #\d+", "", line)              # attribute groups
        line = re.sub(r",\s*![\w.]+ !\d+", "", line)   # !dbg, !tbaa, !prof attachments
        line = _opaque_pointers(line)
        line = re.sub(r"getelementptr inbounds \(\[\d+ x i8\], ptr (@[\w.]+), i32 0, i32 0\)",
                      r"\1", line)
        line = re.sub(r"bitcast \(ptr (@[\w.]+) to ptr\)", r"\1", line)
        m = re.match(r"\s*(%[\w.]+) = (?:bitcast|addrspacecast) ptr (%[\w.]+|@[\w.]+) to ptr$", line)
        if m:                                            # gone with opaque pointers
            alias[m.group(1)] = alias.get(m.group(2), m.group(2))
            continue
        line = re.sub(r"%[\w.]+", lambda v: alias.get(v.group(0), v.group(0)), line)

        def renumber(v):
            names.setdefault(v.group(1), "%" + str(len(names)))
            return names[v.group(1)]
        line = re.sub(r"(?<![\w.])(%\d+)\b", renumber, line)
        if line.strip():
            out.append(line.rstrip())
        if line.startswith("}"):
            infn = False
            out.append("")
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


class Result:
    def __init__(self):
        self.failures = []

    def fail(self, msg):
        self.failures.append(msg)


def parse_expectations(path):
    exp = {"diags": [], "out": [], "rt": None, "args": [], "exit": None, "golden": [],
           "max_rss_mb": None, "max_seconds": None, "module": False}
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "replace").split("\n")
    for i, line in enumerate(lines, 1):
        m = EXPECT_DIAG.search(line)
        if m:
            kind, col, l2, c2, rx = m.groups()
            if col:
                exp["diags"].append((kind, i, int(col), rx.strip()))
            else:
                exp["diags"].append((kind, int(l2), int(c2), rx.strip()))
            continue
        m = EXPECT_RT.search(line)
        if m:
            exp["rt"] = m.group(1).strip()
            continue
        m = EXPECT_OUT.search(line)
        if m:
            exp["out"].append(m.group(1))
            continue
        m = EXPECT_APPROX.search(line)
        if m:
            exp["out"].append((m.group(2), float(m.group(1))))
            continue
        m = ARGS.search(line)
        if m:
            exp["args"] = shlex.split(m.group(1))
            continue
        m = EXIT.search(line)
        if m:
            exp["exit"] = int(m.group(1))
            continue
        if MODULE.search(line):
            exp["module"] = True
            continue
        m = MAX_RSS.search(line)
        if m:
            exp["max_rss_mb"] = int(m.group(1))
            continue
        m = MAX_SECONDS.search(line)
        if m:
            exp["max_seconds"] = float(m.group(1))
            continue
        m = GOLDEN.search(line)
        if m:
            exp["golden"] += m.group(1).split()
    return exp


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=TIMEOUT, **kw)


def check_diagnostics(sflowc, path, exp, res):
    p = run([sflowc, "--check", "--error-format=json", path])
    actual = []
    for line in p.stderr.decode("utf-8", "replace").splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            res.fail("non-JSON output on stderr: %r" % line)
            continue
        actual.append(d)
    if p.returncode not in (0, 1):
        res.fail("sflowc exited with %d (crash or internal error)\n%s" % (p.returncode, p.stderr.decode()))
    wanted = exp["diags"]
    want_err = any(k == "error" for k, *_ in wanted)
    if want_err and p.returncode != 1:
        res.fail("expected exit code 1, got %d" % p.returncode)
    if not want_err and p.returncode != 0:
        res.fail("expected a clean compile, got exit code %d" % p.returncode)
    used = set()
    for kind, line, col, rx in wanted:
        hit = None
        for i, d in enumerate(actual):
            if i in used or d.get("severity") != kind:
                continue
            if d.get("line") == line and d.get("column") == col and re.search(rx, d.get("message", "")):
                hit = i
                break
        if hit is None:
            near = [f"{d['line']}:{d['column']}: {d['severity']}: {d['message']}" for d in actual]
            res.fail("missing %s at %d:%d matching /%s/; reported:\n  %s" %
                     (kind, line, col, rx, "\n  ".join(near) or "(nothing)"))
        else:
            used.add(hit)
    for i, d in enumerate(actual):
        if i in used or d.get("severity") == "note":
            continue
        if d.get("severity") == "warning" and not any(k == "warning" for k, *_ in wanted):
            continue
        res.fail("unexpected %s at %d:%d: %s" % (d["severity"], d["line"], d["column"], d["message"]))


def check_golden(sflowc, path, kind, res):
    golden = re.sub(r"\.sflow$", "", path) + "." + kind + ".golden"
    if kind == "stderr":
        p = run([sflowc, "--check", "--color=never", path])
        got = p.stderr.decode("utf-8", "replace")
        got = got.replace(os.path.dirname(path) + "/", "")
    else:
        # IR goldens are of unoptimised code: -O2 output changes with LLVM.
        opt = ["-O0"] if kind == "llvm" else []
        p = run([sflowc, "--emit=" + kind] + opt + ["-o", "-", path])
        got = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0:
            res.fail("--emit=%s failed (%d):\n%s" % (kind, p.returncode, p.stderr.decode()))
            return
        if kind == "llvm":
            got = normalize_llvm(got)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        with open(golden, "w") as f:
            f.write(got)
        return
    if not os.path.exists(golden):
        res.fail("missing golden file %s (run with UPDATE_GOLDEN=1 to create it)" % os.path.relpath(golden, ROOT))
        return
    with open(golden) as f:
        want = f.read()
    if want != got:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            os.path.basename(golden), "actual"))
        res.fail("output differs from %s:\n%s" % (os.path.relpath(golden, ROOT), diff))


class Measured:
    def __init__(self, returncode, stdout, stderr, maxrss_kb, cpu_s):
        self.returncode, self.stdout, self.stderr, self.maxrss_kb = returncode, stdout, stderr, maxrss_kb
        self.cpu_s = cpu_s


def run_measured(cmd, cwd):
    """Runs cmd like subprocess.run, and also reads its own peak RSS and CPU
    time (wait4's rusage, which covers that one process and nothing else).
    None on timeout."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=cwd)
        deadline = time.monotonic() + TIMEOUT
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9  # reaped here: keep Popen from waiting again
                return None
            time.sleep(0.01)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return Measured(p.returncode, fo.read(), fe.read(), ru.ru_maxrss, ru.ru_utime + ru.ru_stime)


def check_run(sflowc, path, exp, res, tmp):
    exe = os.path.join(tmp, os.path.basename(path)[:-6])
    p = run([sflowc, "-O2", path, "-o", exe])
    if p.returncode != 0:
        res.fail("compile failed (%d):\n%s" % (p.returncode, p.stderr.decode()))
        return
    # Journals and checkpoints go to the scratch folder, never the source tree.
    if not any(a.startswith("--checkpoint-dir") for a in exp["args"]):
        exp["args"] = exp["args"] + ["--checkpoint-dir", os.path.join(tmp, "ckpt")]
    if exp["max_rss_mb"] is not None or exp["max_seconds"] is not None:
        q = run_measured([exe] + exp["args"], os.path.dirname(path))
        if q is None:
            res.fail("program did not finish in %d s" % TIMEOUT)
            return
        # SFLOW_RSS_SCALE and SFLOW_TIME_SCALE loosen the limits for
        # instrumented runs (TSan's shadow memory is several times the
        # program's own, and it runs 5-15x slower).
        if exp["max_rss_mb"] is not None and \
                q.maxrss_kb > exp["max_rss_mb"] * 1024 * float(os.environ.get("SFLOW_RSS_SCALE", "1")):
            res.fail("peak resident memory %.1f MiB, over the limit of %d MiB" %
                     (q.maxrss_kb / 1024.0, exp["max_rss_mb"]))
        if exp["max_seconds"] is not None and \
                q.cpu_s > exp["max_seconds"] * float(os.environ.get("SFLOW_TIME_SCALE", "1")):
            res.fail("CPU time %.2f s, over the limit of %g s" % (q.cpu_s, exp["max_seconds"]))
    else:
        try:
            q = subprocess.run([exe] + exp["args"], capture_output=True, timeout=TIMEOUT,
                               cwd=os.path.dirname(path), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            res.fail("program did not finish in %d s" % TIMEOUT)
            return
    out = q.stdout.decode("utf-8", "replace")
    err = q.stderr.decode("utf-8", "replace")
    want_code = exp["exit"] if exp["exit"] is not None else (70 if exp["rt"] else 0)
    if q.returncode != want_code:
        res.fail("exit code %d, expected %d\nstderr:\n%s" % (q.returncode, want_code, err))
    if exp["rt"] and not re.search(exp["rt"], err):
        res.fail("stderr does not match /%s/:\n%s" % (exp["rt"], err))
    got = out.split("\n")
    if got and got[-1] == "":
        got.pop()
    if len(got) != len(exp["out"]) or not all(line_matches(e, g) for e, g in zip(exp["out"], got)):
        want = [e if isinstance(e, str) else e[0] for e in exp["out"]]
        diff = "".join(difflib.unified_diff([l + "\n" for l in want], [l + "\n" for l in got],
                                            "expected", "actual"))
        res.fail("stdout differs:\n" + diff)


def line_matches(want, got):
    """An `expect:` line matches exactly; an `expect~REL:` line (a
    (text, rel) pair) when the words between its numbers are the same and
    each number is within rel of the expected one, relative to it."""
    if isinstance(want, str):
        return want == got
    text, rel = want
    if NUMBER.split(text) != NUMBER.split(got):
        return False
    wn, gn = NUMBER.findall(text), NUMBER.findall(got)
    return len(wn) == len(gn) and all(
        abs(float(g) - float(w)) <= rel * max(abs(float(w)), 1e-30) for w, g in zip(wn, gn))


def run_one(sflowc, path, run_mode, tmp):
    res = Result()
    exp = parse_expectations(path)
    try:
        if (run_mode or exp["out"] or exp["rt"]) and not exp["module"]:
            if exp["diags"]:
                check_diagnostics(sflowc, path, exp, res)
            else:
                check_run(sflowc, path, exp, res, tmp)
        else:
            check_diagnostics(sflowc, path, exp, res)
        for kind in exp["golden"]:
            check_golden(sflowc, path, kind, res)
    except subprocess.TimeoutExpired as e:
        res.fail("timed out: %s" % " ".join(e.cmd))
    return res


def collect(args):
    files = []
    if args.tests:
        for t in args.tests:
            if os.path.exists(t):
                files.append(os.path.abspath(t))
                continue
            # a bare name: search both suites
            for base in ("tests/golden", "tests/run"):
                for dp, _, fs in os.walk(os.path.join(ROOT, base)):
                    for f in fs:
                        if f == t or f == t + ".sflow" or os.path.join(dp, f).endswith("/" + t + ".sflow"):
                            files.append(os.path.join(dp, f))
            if not files:
                sys.exit("run_golden: no test named %s" % t)
        return files
    dirs = [args.dir] if args.dir else [os.path.join(ROOT, "tests/golden"), os.path.join(ROOT, "tests/run")]
    for d in dirs:
        for dp, _, fs in os.walk(d):
            files += [os.path.join(dp, f) for f in fs if f.endswith(".sflow")]
    return sorted(files)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build/bin/sflowc"))
    ap.add_argument("--dir")
    ap.add_argument("--run", action="store_true", help="compile and run every test")
    ap.add_argument("tests", nargs="*")
    args = ap.parse_args()
    files = collect(args)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            run_mode = args.run or "/tests/run/" in path
            res = run_one(args.sflowc, path, run_mode, tmp)
            name = os.path.relpath(path, ROOT)
            if res.failures:
                failed += 1
                print("FAIL %s" % name)
                for f in res.failures:
                    print("  " + f.replace("\n", "\n  "))
            else:
                passed += 1
                print("PASS %s" % name)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or not files else 0)


if __name__ == "__main__":
    main()
