#!/usr/bin/env python3
"""The compiler's table of runtime entry points agrees with runtime/sflow.h.

compiler/rtabi.h lists every runtime function generated code calls, with the
LLVM signature codegen declares it with (one letter per type, return first:
v b i l f d p).  A row that disagrees with the runtime's prototype compiles
and links, and then passes arguments in the wrong registers.  This test:

  - reads the rows through the C preprocessor, and each row's prototype from
    runtime/sflow.h (preprocessed);
  - writes a C file that asserts, with _Static_assert, for every row: the
    prototype's type is the one this test read (so the reading is checked
    by the compiler), each parameter and the result are of the row's letter
    (_Generic over the real types: bool, int32_t, int64_t, float, double,
    any pointer), RTA_ARRAY exactly when it returns sf_array *; and compiles
    it with the C compiler that builds sflow;
  - checks RTA_NORETURN against _Noreturn and that no row is variadic;
  - checks codegen's side: every row is called (RT(sf_x, ...) or RT0(sf_x)),
    every called name is a row, and every other "sf_..." name the compiler
    emits names something sflow.h declares, and never a function (those go
    through the table).

Usage: rtabi_test.py [--cc CC]"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTABI = os.path.join(ROOT, "compiler", "rtabi.h")
SFLOW_H = os.path.join(ROOT, "runtime", "sflow.h")
failures = []


def check(cond, what):
    if not cond:
        print("FAIL " + what)
        failures.append(what)
    return cond


def preprocess(cc, text):
    """text run through cc -E -P, with compiler/ and runtime/ on the path."""
    p = subprocess.run([cc, "-E", "-P", "-x", "c", "-I", os.path.join(ROOT, "compiler"),
                        "-I", os.path.join(ROOT, "runtime"), "-"],
                       input=text, capture_output=True, text=True)
    if p.returncode:
        sys.exit("rtabi_test: %s -E failed:\n%s" % (cc, p.stderr))
    return p.stdout


def rows(cc):
    """(name, signature, attribute text) of every row of rtabi.h."""
    out = preprocess(cc, '#include "rtabi.h"\n#define ROW(n, s, a) @@ n s a @@\n'
                         "SF_RUNTIME_ENTRY_POINTS(ROW)\n")
    found = re.findall(r'@@\s*(\w+)\s+"([a-z]*)"\s+([^@]*?)\s*@@', out)
    if not found:
        sys.exit("rtabi_test: no rows in compiler/rtabi.h")
    return found


def strip_name(param):
    """The type of one parameter declaration: 'const sf_loc *loc' -> 'const sf_loc *'."""
    words = {"void", "bool", "_Bool", "char", "short", "int", "long", "float", "double",
             "signed", "unsigned", "const", "volatile", "struct", "union", "enum"}
    m = re.match(r"^(.*?[\s*])([A-Za-z_]\w*)$", param.strip())
    if m and m.group(2) not in words and m.group(1).strip():
        return m.group(1).strip()
    return param.strip()


def prototype(header, name):
    """(return type text, [parameter type texts], declaration text) or None."""
    m = re.search(r"(?:^|[;}])\s*([^;{}()]*?)\b%s\s*\(([^()]*)\)\s*;" % re.escape(name), header)
    if not m:
        return None
    ret, params = " ".join(m.group(1).split()), " ".join(m.group(2).split())
    plist = [] if params in ("", "void") else [strip_name(p) for p in params.split(",")]
    return ret, plist, m.group(0)


CLASS = ("#define SIG_CLASS(T) _Generic((T){0}, _Bool: 'b', int32_t: 'i', int64_t: 'l', "
         "float: 'f', double: 'd', default: (__builtin_classify_type((T){0}) == 5 ? 'p' : '?'))\n")


def c_checks(header, table):
    """The C file of static assertions, one block per row."""
    out = ["#include <stdbool.h>\n#include <stdint.h>\n#include \"sflow.h\"\n", CLASS]
    for name, sig, attrs in table:
        proto = prototype(header, name)
        if not check(proto is not None, "%s: a row of compiler/rtabi.h that runtime/sflow.h "
                                        "does not declare as a function" % name):
            continue
        ret, params, decl = proto
        noreturn = "_Noreturn" in ret.split()
        if "RTA_NORETURN" in attrs:
            check(noreturn, "%s: RTA_NORETURN in compiler/rtabi.h, but runtime/sflow.h does "
                            "not declare it _Noreturn" % name)
        else:
            check(not noreturn, "%s: _Noreturn in runtime/sflow.h, but its row in "
                                "compiler/rtabi.h lacks RTA_NORETURN" % name)
        check("..." not in params, "%s: variadic in runtime/sflow.h; codegen declares "
                                   "fixed arguments" % name)
        ret = " ".join(w for w in ret.split() if w not in ("_Noreturn", "extern"))
        where = "runtime/sflow.h has `%s`" % " ".join(decl.lstrip(";}").split())
        out.append("/* %s \"%s\" */\n" % (name, sig))
        out.append('_Static_assert(__builtin_types_compatible_p(__typeof__(%s), %s(%s)), '
                   '"%s: rtabi_test.py misread its prototype");\n'
                   % (name, ret, ", ".join(params) or "void", name))
        if len(params) != len(sig) - 1:
            out.append('_Static_assert(0, "%s: %d parameters in runtime/sflow.h, %d in its row '
                       '%s of compiler/rtabi.h; %s");\n'
                       % (name, len(params), len(sig) - 1, sig, where))
            continue
        if ret == "void" or sig[0] == "v":
            out.append('_Static_assert(%d, "%s: the result is %s in runtime/sflow.h, but its '
                       'row %s of compiler/rtabi.h says %s; %s");\n'
                       % ((ret == "void") == (sig[0] == "v"), name, ret, sig, sig[0], where))
        else:
            out.append('_Static_assert(SIG_CLASS(%s) == \'%s\', "%s: the result is %s in '
                       'runtime/sflow.h, but its row %s of compiler/rtabi.h says %s; %s");\n'
                       % (ret, sig[0], name, ret, sig, sig[0], where))
        for i, (t, letter) in enumerate(zip(params, sig[1:])):
            out.append('_Static_assert(SIG_CLASS(%s) == \'%s\', "%s: parameter %d is %s in '
                       'runtime/sflow.h, but its row %s of compiler/rtabi.h says %s; %s");\n'
                       % (t, letter, name, i + 1, t, sig, letter, where))
        if ret != "void":
            array = "RTA_ARRAY" in attrs
            out.append('_Static_assert(__builtin_types_compatible_p(%s, sf_array *) == %d, '
                       '"%s: %s");\n'
                       % (ret, array, name,
                          "RTA_ARRAY in compiler/rtabi.h, but runtime/sflow.h returns %s" % ret
                          if array else "runtime/sflow.h returns sf_array *, but its row in "
                          "compiler/rtabi.h lacks RTA_ARRAY"))
    return "".join(out)


def compile_checks(cc, source):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rtabi_check.c")
        with open(path, "w") as f:
            f.write(source)
        p = subprocess.run([cc, "-std=gnu11", "-fsyntax-only", "-I", os.path.join(ROOT, "runtime"),
                            path], capture_output=True, text=True)
        errors = [l for l in p.stderr.splitlines() if "error" in l]
        for e in errors:
            print("  " + e.split("error: ", 1)[-1])
        check(p.returncode == 0, "the C compiler rejects %d assertion(s) of compiler/rtabi.h "
                                 "against runtime/sflow.h (above)" % max(len(errors), 1))


def compiler_side(header, table):
    names = {r[0] for r in table}
    called, literals = set(), {}
    for fn in sorted(os.listdir(os.path.join(ROOT, "compiler"))):
        if not fn.endswith(".c"):
            continue
        text = open(os.path.join(ROOT, "compiler", fn)).read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        called |= set(re.findall(r"\bRT0?\(\s*(sf_\w+)", text))
        called |= set(re.findall(r"\brt\(\s*RT_(sf_\w+)", text))  # named, not called
        # cudagen.c writes CUDA C whose sf_ helpers are its own prelude's.
        if fn != "cudagen.c":
            for lit in re.findall(r'"(sf_\w+)"', text):
                literals.setdefault(lit, fn)
    for n in sorted(called - names):
        check(False, "%s: called by codegen but not a row of compiler/rtabi.h" % n)
    for n in sorted(names - called):
        check(False, "%s: a row of compiler/rtabi.h that codegen never calls; drop it" % n)
    for lit, fn in sorted(literals.items()):
        declared = re.search(r"\b%s\b" % re.escape(lit), header)
        check(declared is not None, "compiler/%s names \"%s\", which runtime/sflow.h does not "
                                    "declare" % (fn, lit))
        if declared and re.search(r"\b%s\s*\(" % re.escape(lit), header):
            check(False, "compiler/%s declares the runtime function \"%s\" by hand; call it "
                         "through a row of compiler/rtabi.h" % (fn, lit))
    return len(called), len(literals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    a = ap.parse_args()
    table = rows(a.cc)
    header = preprocess(a.cc, '#include "sflow.h"\n')
    compile_checks(a.cc, c_checks(header, table))
    ncalled, nlit = compiler_side(header, table)
    if failures:
        print("rtabi_test: %d failure(s)" % len(failures))
        return 1
    print("ok: %d rows of compiler/rtabi.h match runtime/sflow.h; codegen calls %d of them "
          "and names %d other sflow.h declarations" % (len(table), ncalled, nlit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
