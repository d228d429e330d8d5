#!/usr/bin/env python3
"""`sflowc fmt` over every tracked .sflow file of the tree, and its command line.

For each file that lexes: formatting twice gives what formatting once gives;
and the formatted text means the same program.  For a file the formatter
changes, that is checked by compiling both versions (--emit=llvm -O0, the
formatted one in a copy of its folder so that its imports resolve) and
comparing the IR with source positions taken out (the runtime's %sf_loc
line/column records and the file's path, which formatting may legitimately
move); a file that does not compile on its own (a std module, an error
test) is compared by its --emit=parse tree instead, positions taken out.
Files that do not lex must be refused with a message and left alone.
The count of files that are not in the canonical layout is printed (the
tree is not reformatted by the tests).

    fmt_test.py SFLOWC
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SFLOWC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/bin/sflowc"))
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL", what)


def fmt(data):
    r = subprocess.run([SFLOWC, "fmt", "-"], input=data, capture_output=True)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


LOC = re.compile(rb"(%sf_loc \{ [^}]*?), i32 -?\d+, i32 -?\d+ \}")
AT = re.compile(rb" @\d+:\d+")
ARRAY = re.compile(rb"\[\d+ x i8\]")


def meaning(path, folder):
    """The program's IR, or its parse tree, with positions taken out; the
    kind of comparison it is.  The IR names the source's folder (for data
    files next to it), which differs for the copy: that string, and the
    lengths of byte arrays with it, are taken out too."""
    r = subprocess.run([SFLOWC, "--emit=llvm", "-O0", "-o", "-", path], capture_output=True, cwd=folder)
    if r.returncode == 0:
        ir = LOC.sub(rb"\1, LOC }", r.stdout)
        ir = ir.replace(path.encode(), b"FILE").replace(os.path.abspath(folder).encode(), b"DIR")
        return "ir", ARRAY.sub(b"[N x i8]", ir)
    r = subprocess.run([SFLOWC, "--emit=parse", path], capture_output=True, cwd=folder)
    return "parse", AT.sub(b"", r.stdout) + b"rc=%d" % r.returncode


def tree_files():
    out = subprocess.run(["git", "ls-files", "*.sflow"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    return sorted(out)


def tree():
    """The tree copied, formatted in place by one `sflowc fmt` run, then
    checked by a second with --check (which must list nothing)."""
    files = tree_files()
    check(len(files) > 100, "the tree has .sflow files (%d)" % len(files))
    tmp = tempfile.mkdtemp(prefix="sflow-fmt-")
    mirror = os.path.join(tmp, "tree")
    for rel in files:
        os.makedirs(os.path.join(mirror, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(mirror, rel))
    # The tree's own check first: what it lists is what the run rewrites.
    r = subprocess.run([SFLOWC, "fmt", "--check"] + files, cwd=ROOT, capture_output=True)
    listed = r.stdout.decode().split()
    r = subprocess.run([SFLOWC, "fmt"] + files, cwd=mirror, capture_output=True)
    err = r.stderr.decode(errors="replace")
    refused = [l.split("'")[1] for l in err.split("\n") if "was not formatted" in l]
    check(r.returncode == (1 if refused else 0), "fmt over the tree: exit %d" % r.returncode)
    r = subprocess.run([SFLOWC, "fmt", "--check"] + [f for f in files if f not in refused], cwd=mirror,
                       capture_output=True)
    again = r.stdout.decode().split()
    check(r.returncode == 0 and again == [], "formatting is idempotent: a second run changes nothing, got %r" % again)
    changed = []
    for rel in files:
        a = open(os.path.join(ROOT, rel), "rb").read()
        b = open(os.path.join(mirror, rel), "rb").read()
        if rel in refused:
            check(a == b, "%s: refused and left alone" % rel)
        elif a != b:
            changed.append(rel)
    check(sorted(listed) == changed, "fmt --check lists exactly the files fmt changes: %r vs %r" % (listed, changed))
    kinds = {"ir": 0, "parse": 0}
    for rel in changed:
        kind, before = meaning(os.path.basename(rel), os.path.join(ROOT, os.path.dirname(rel)))
        kind2, after = meaning(os.path.basename(rel), os.path.join(mirror, os.path.dirname(rel)))
        kinds[kind] += 1
        check(kind == kind2 and before == after, "%s: the same %s before and after formatting" % (rel, kind))
    shutil.rmtree(tmp)
    print("tree: %d files, %d refused (do not lex), %d not in the canonical layout "
          "(%d compared by IR, %d by parse tree)" % (len(files), len(refused), len(changed), kinds["ir"],
                                                     kinds["parse"]))


def layout():
    """What the canonical layout is, on small inputs."""
    cases = [
        ("fn f(a:i64,b :i64)->i64{\nreturn a+b\n}\n", "fn f(a: i64, b: i64) -> i64 {\n  return a + b\n}\n"),
        ("workflow main(){\n\n\n\nlet x=-1\n    print( x )\n}\n\n\n", "workflow main() {\n\n  let x = -1\n  print(x)\n}\n"),
        # Comments stay: after code with their gap, on their own lines indented.
        ("fn f() {\n      // why\n  let y = [1,2]   // a pair\n}\n",
         "fn f() {\n  // why\n  let y = [1, 2]   // a pair\n}\n"),
        # Generic types and type arguments keep no spaces; comparisons get them.
        ("fn g(m:map<str,i64>)->bool{ return len(m.keys())<3 }\n",
         "fn g(m: map<str, i64>) -> bool { return len(m.keys()) < 3 }\n"),
        # Annotations stick to their names; @ as matmul is an operator.
        ("@gpus(1)  @retry( 2 )\ntask t(a:tensor,b:tensor)->tensor{ return a@b }\n",
         "@gpus(1) @retry(2)\ntask t(a: tensor, b: tensor) -> tensor { return a @ b }\n"),
        # A continuation inside brackets lines up after the opener.
        ("fn h() {\n  print(1,\n 2)\n  let s = Point {x: 1.0,\ny: 2.0}\n}\n",
         "fn h() {\n  print(1,\n        2)\n  let s = Point { x: 1.0,\n                  y: 2.0 }\n}\n"),
        # A bracket that ends its line indents the next one level; its closer goes back.
        ("fn k() {\nlet xs = [\n1,\n2,\n]\n}\n", "fn k() {\n  let xs = [\n    1,\n    2,\n  ]\n}\n"),
        ("", ""),
    ]
    # The snippet Vim's indent script is tested with (tests/editors/vim_test.py):
    # the formatter and the indent script agree on it.
    sys.path.insert(0, os.path.join(ROOT, "tests", "editors"))
    import vim_test
    cases.append(("\n".join(vim_test.UNINDENTED) + "\n", "\n".join(vim_test.INDENTED) + "\n"))
    for src, want in cases:
        rc, got, err = fmt(src.encode())
        check(rc == 0 and got.decode() == want, "layout of %r:\n got %r\nwant %r %s" % (src, got.decode(), want, err))


def command_line():
    tmp = tempfile.mkdtemp(prefix="sflow-fmt-cli-")
    good = os.path.join(tmp, "good.sflow")
    messy = os.path.join(tmp, "messy.sflow")
    bad = os.path.join(tmp, "bad.sflow")
    open(good, "w").write("fn f() -> i64 { return 1 }\n")
    open(messy, "w").write("fn f()->i64{ return 1 }\n")
    open(bad, "w").write('fn f() {\n  let s = "open\n}\n')
    r = subprocess.run([SFLOWC, "fmt", "--check", good, messy], capture_output=True, text=True)
    check(r.returncode == 1 and r.stdout == messy + "\n", "--check lists the messy file only: %r" % r.stdout)
    check(open(messy).read() == "fn f()->i64{ return 1 }\n", "--check writes nothing")
    r = subprocess.run([SFLOWC, "fmt", "--check", good], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout == "", "--check of a formatted file: exit 0, silent")
    os.chmod(messy, 0o640)
    r = subprocess.run([SFLOWC, "fmt", messy], capture_output=True, text=True)
    check(r.returncode == 0 and open(messy).read() == "fn f() -> i64 { return 1 }\n", "fmt rewrites the file")
    check(os.stat(messy).st_mode & 0o777 == 0o640, "... keeping its permissions")
    r = subprocess.run([SFLOWC, "fmt", bad], capture_output=True, text=True)
    check(r.returncode == 1 and "bad.sflow:2:11: error: unterminated string literal" in r.stderr
          and "was not formatted" in r.stderr, "a file that does not lex: its error and exit 1: %r" % r.stderr)
    check(open(bad).read() == 'fn f() {\n  let s = "open\n}\n', "... and the file is left alone")
    r = subprocess.run([SFLOWC, "fmt", os.path.join(tmp, "missing.sflow")], capture_output=True, text=True)
    check(r.returncode == 1 and "cannot read" in r.stderr, "a missing file: %r" % r.stderr)
    r = subprocess.run([SFLOWC, "fmt"], capture_output=True, text=True)
    check(r.returncode == 2 and "no input files" in r.stderr, "no files: usage, exit 2")
    r = subprocess.run([SFLOWC, "fmt", "--wat", good], capture_output=True, text=True)
    check(r.returncode == 2 and "unknown option '--wat'" in r.stderr, "an unknown option: exit 2")
    leftovers = [n for n in os.listdir(tmp) if n.endswith(".fmt-tmp")]
    check(not leftovers, "no temporary files left: %r" % leftovers)
    shutil.rmtree(tmp)


def main():
    layout()
    command_line()
    tree()
    print("%d passed, %d failed" % (checks - len(failures), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
