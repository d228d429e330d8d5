#!/usr/bin/env python3
"""robust.py — adversarial inputs for the sflowc front end.

Each case writes one hostile source file and runs `sflowc --check` on it
with a 20 s limit.  The compiler must answer with a diagnostic (exit 1) or
accept the file (exit 0): never crash (101 or a signal), never hang, never
print nothing on exit 1.  With --valgrind the case also runs under
valgrind, which must report no "definitely lost" bytes.  Cases whose work
is linear (LINEAR_SECONDS) must also answer within a few CPU seconds
(not wall-clock: a loaded machine stretches that), which catches a
quadratic pass.  --special-inputs checks paths that are not
source files (devices, folders, FIFOs, oversized files); --codegen-statements
compiles and runs 50k statements at -O0 within a CPU-time bound.

usage: robust.py --sflowc PATH CASE [--valgrind]
       robust.py --sflowc PATH --special-inputs | --codegen-statements
       robust.py --list
"""
import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

MB = 1 << 20


def nested_parens():
    n = 100_000
    return b"workflow main() {\n  let x = " + b"(" * n + b"1" + b")" * n + b"\n  print(x)\n}\n"


def deep_blocks():
    n = 100_000
    return b"workflow main() {\n" + b"if true {\n" * n + b"print(1)\n" + b"}\n" * n + b"}\n"


def blocks_at_limit():
    # Just under the bracket limit: every later pass recurses this deep.
    n = 250
    return (b"workflow main() {\n  var x = 0\n" + b"while x < 1 {\n" * n + b"x += 1\n" +
            b"}\n" * n + b"}\n")


def long_binary_chain():
    # No brackets, but a left-leaning tree 100k levels deep.
    return b"workflow main() {\n  let x = 1" + b" + 1" * 100_000 + b"\n  print(x)\n}\n"


def long_unary_chain():
    return b"workflow main() {\n  let x = " + b"-" * 100_000 + b"1\n  print(x)\n}\n"


def long_not_chain():
    return b"workflow main() {\n  let x = " + b"!" * 100_000 + b"true\n  print(x)\n}\n"


def long_field_chain():
    return b"workflow main() {\n  let x = a" + b".b" * 100_000 + b"\n}\n"


def long_call_chain():
    return b"workflow main() {\n  f" + b"()" * 100_000 + b"\n}\n"


def huge_identifier():
    return b"workflow main() {\n  let " + b"a" * (10 * MB) + b" = 1\n}\n"


def huge_string():
    return b'workflow main() {\n  let s = "' + b"x" * (10 * MB) + b'"\n  print(s)\n}\n'


def huge_number():
    return b"workflow main() {\n  let x = " + b"9" * (10 * MB) + b"\n}\n"


def huge_comment_line():
    return b"// " + b"c" * (10 * MB) + b"\nworkflow main() {\n  print(1)\n}\n"


def nul_bytes():
    return b"workflow\0 main() {\n  let s = \"a\0b\"\0\n\0\0\0 print(s)\n}\n" + b"\0" * 1000


def invalid_utf8():
    return (b"workflow main() {\n  let s = \"\xff\xfe\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\"\n"
            b"  let \xe2\x82 = 1\n  // \xff in a comment\n  print(s)\n}\n\xff\xfe\xfd")


def random_bytes():
    return random.Random(1).randbytes(10 * MB)


def random_tokens():
    # Valid tokens in a random order: the parser's error recovery at work.
    toks = ["fn", "task", "actor", "workflow", "struct", "let", "var", "if", "else", "while",
            "for", "in", "return", "await", "spawn", "launch", "import", "x", "y", "1", "2.5",
            '"s"', "(", ")", "[", "]", "{", "}", ",", ".", ":", "=", "+", "*", "->", "..",
            "@", "\n"]
    r = random.Random(2)
    return " ".join(r.choice(toks) for _ in range(1_000_000)).encode()


def many_statements():
    body = "".join(f"  x += {i % 10}\n" for i in range(100_000))
    return f"workflow main() {{\n  var x = 0\n{body}  print(x)\n}}\n".encode()


def many_statements_small():
    body = "".join(f"  x += {i % 10}\n  y = y + f64(x) * 0.5\n" for i in range(5_000))
    return f"workflow main() {{\n  var x = 0\n  var y = 0.0\n{body}  print(x, y)\n}}\n".encode()


def many_errors():
    return b"workflow main() {\n" + b"  let = = $\n" * 100_000 + b"}\n"


def many_items():
    fns = "".join(f"fn f{i}(a: i64) -> i64 {{ return a + {i} }}\n" for i in range(50_000))
    return (fns + "workflow main() {\n  print(f49999(1))\n}\n").encode()


def many_args():
    args = ", ".join(str(i) for i in range(100_000))
    return f"workflow main() {{\n  print({args})\n}}\n".encode()


def many_array_elems():
    elems = ", ".join(str(i) for i in range(200_000))
    return f"workflow main() {{\n  let a = [{elems}]\n  print(len(a))\n}}\n".encode()


def many_params():
    params = ", ".join(f"p{i}: i64" for i in range(50_000))
    return f"fn f({params}) {{ }}\nworkflow main() {{ }}\n".encode()


def unterminated_everything():
    return b'workflow main() {\n  let s = "abc\n  f(1, [2, {3\n  /* never closed'


def empty():
    return b""


def blank_lines():
    # The lexer once rescanned the following newlines for every newline.
    return b"workflow main() {\n" + b"\n" * 200_000 + b"  print(1)\n}\n"


def comment_lines():
    return b"workflow main() {\n" + b"  // a comment\n" * 200_000 + b"  print(1)\n}\n"


# Cases whose work is linear in the input: a bound far below the generic
# 20 s limit catches a quadratic pass (each took 15 s before it was fixed).
# The bounds are CPU seconds (cpu_seconds), not wall-clock: under a
# parallel ctest on 2 cores sflowc gets a fraction of a core, and 1.2 s of
# CPU took 16 s of wall clock; a quadratic pass costs its CPU anyway.
LINEAR_SECONDS = {"blank_lines": 4, "comment_lines": 4}


def cpu_seconds():
    """The user + system CPU time of every child process waited for so far
    (grandchildren that sflowc waited for included: the linker)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def codegen_statements(sflowc):
    """50k statements in one block compiled at -O0 and run: code generation
    once walked every later statement for each one (118 s); now linear."""
    n = 50_000
    src = ("workflow main() {\n  var x = 0\n" +
           "".join("  x += %d\n" % (i % 7) for i in range(n)) + "  print(x)\n}\n")
    want = sum(i % 7 for i in range(n))
    with tempfile.TemporaryDirectory() as d:
        path, exe = os.path.join(d, "many.sflow"), os.path.join(d, "many")
        with open(path, "w") as f:
            f.write(src)
        t0, c0 = time.monotonic(), cpu_seconds()
        try:
            # The wall-clock limit only ends a hang: the bound below is CPU time.
            p = subprocess.run([sflowc, "-O0", path, "-o", exe], capture_output=True, timeout=300)
        except subprocess.TimeoutExpired:
            print("FAIL codegen_statements: no executable within 300 s")
            return 1
        took, wall = cpu_seconds() - c0, time.monotonic() - t0
        if p.returncode != 0:
            print("FAIL codegen_statements: exit %d\n%s" % (p.returncode, p.stderr.decode()[:600]))
            return 1
        out = subprocess.run([exe], capture_output=True, timeout=30).stdout.decode().strip()
        if out != str(want):
            print("FAIL codegen_statements: printed %r, want %d" % (out, want))
            return 1
        if took > 10:
            print("FAIL codegen_statements: took %.1f s of CPU (%.1f s wall), over its linear-time "
                  "bound of 10 CPU seconds" % (took, wall))
            return 1
        print("ok codegen_statements: %d statements compiled at -O0 in %.2f CPU seconds "
              "(%.2f s wall)" % (n, took, wall))
        return 0


def special_inputs(sflowc):
    """Paths that are not regular source files: a clear error, exit 1, at
    once (no internal error, no hang on a FIFO, no reading /dev/zero forever)."""
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "pipe.sflow")
        os.mkfifo(fifo)
        big = os.path.join(d, "big.sflow")
        with open(big, "wb") as f:
            f.truncate(65 << 20)  # sparse: 65 MiB of NULs, over the 64 MiB bound
        cases = [("/dev/zero", "is a character device, not a regular file"),
                 ("/dev/urandom", "is a character device, not a regular file"),
                 (d, "is a directory"),
                 (fifo, "is a FIFO, not a regular file"),
                 (big, "is larger than the 64 MiB a source file may have"),
                 (os.path.join(d, "missing.sflow"), "No such file or directory")]
        for path, want in cases:
            try:
                p = subprocess.run([sflowc, "--check", path], capture_output=True, timeout=10)
            except subprocess.TimeoutExpired:
                print(f"FAIL {path}: no answer within 10 s")
                failures += 1
                continue
            err = p.stderr.decode(errors="replace")
            line = f"sflowc: error: cannot read '{path}': {want}"
            if p.returncode != 1 or line not in err:
                print(f"FAIL {path}: exit {p.returncode}, wanted exit 1 and\n  {line}\ngot\n{err[:400]}")
                failures += 1
            else:
                print(f"ok {path}: {want}")
    return 1 if failures else 0


CASES = {f.__name__: f for f in [
    nested_parens, deep_blocks, blocks_at_limit, long_binary_chain, long_unary_chain,
    long_not_chain, long_field_chain, long_call_chain, huge_identifier, huge_string,
    huge_number, huge_comment_line, nul_bytes, invalid_utf8, random_bytes, random_tokens,
    many_statements, many_statements_small, many_errors, many_items, many_args,
    many_array_elems, many_params, unterminated_everything, empty, blank_lines, comment_lines]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--valgrind", action="store_true")
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--special-inputs", action="store_true",
                    help="check devices, folders, FIFOs and oversized files as inputs")
    ap.add_argument("--codegen-statements", action="store_true",
                    help="compile and run 50k statements at -O0 within a time bound")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.special_inputs:
        return special_inputs(a.sflowc)
    if a.codegen_statements:
        return codegen_statements(a.sflowc)
    if a.list:
        print("\n".join(CASES))
        return 0
    if a.case not in CASES or not a.sflowc:
        ap.error("need --sflowc and a CASE (see --list)")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, a.case + ".sflow")
        with open(path, "wb") as f:
            f.write(CASES[a.case]())
        cmd = [a.sflowc, "--check", path]
        timeout = a.timeout
        bound = LINEAR_SECONDS.get(a.case) if not a.valgrind else None
        if a.valgrind:
            cmd = ["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite",
                   "--error-exitcode=99", "-q"] + cmd
            timeout *= 6
        t0, c0 = time.monotonic(), cpu_seconds()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"FAIL {a.case}: no answer within {timeout:.0f} s")
            return 1
        took, wall = cpu_seconds() - c0, time.monotonic() - t0
        if bound and took > bound:
            print(f"FAIL {a.case}: took {took:.1f} s of CPU ({wall:.1f} s wall), over its "
                  f"linear-time bound of {bound} CPU seconds")
            return 1
        err = p.stderr.decode(errors="replace")
        head = err[:600] + ("..." if len(err) > 600 else "")
        if p.returncode not in (0, 1):
            print(f"FAIL {a.case}: exit code {p.returncode}\n{head}")
            return 1
        if p.returncode == 1 and "error" not in err:
            print(f"FAIL {a.case}: exit 1 without a diagnostic\n{head}")
            return 1
        if a.valgrind and "definitely lost" in err:
            print(f"FAIL {a.case}: valgrind reports a leak\n{head}")
            return 1
        first = err.splitlines()[0][:160] if err else "(no diagnostics)"
        print(f"ok {a.case}: exit {p.returncode}: {first}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
