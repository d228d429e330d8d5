#!/usr/bin/env python3
"""Every @extern function of the standard library agrees with its C side.

A std module's `@extern fn name(params) -> T` makes codegen call the C
function sf_std_<module>_<name> with a fixed C form of each sflow type
(docs/language.md, "Standard-library externs").  A declaration that
disagrees with the runtime's prototype compiles and links, and then passes
arguments in the wrong registers; one with no C function at all fails only
when a program that calls it is linked.  This test reads every @extern in
stdlib/*.sflow, writes the prototype the compiler's rules give it, and
compiles that against the runtime's layer headers with the C compiler that
builds sflow: a function that no header declares, or whose declared type
differs, is an error there.

Usage: extern_test.py [--cc CC]"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALARS = {"bool": "bool", "i32": "int32_t", "i64": "int64_t", "f32": "float", "f64": "double",
           "str": "sf_str *"}
EXTERN = re.compile(r"@extern\s+fn\s+(\w+)\s*\(([^)]*)\)\s*(?:->\s*([\w.\[\]]+))?")
STRUCT = re.compile(r"^struct\s+(\w+)", re.M)


def c_type(t, structs, where):
    t = t.strip()
    if t.endswith("[]"):
        return "sf_array *"
    if t in SCALARS:
        return SCALARS[t]
    if t in structs:
        return "struct"
    sys.exit("extern_test: %s: type '%s' has no C form this test knows" % (where, t))


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def prototypes():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "stdlib", "*.sflow"))):
        module = os.path.splitext(os.path.basename(path))[0]
        text = strip_comments(open(path, encoding="utf-8").read())
        structs = set(STRUCT.findall(text))
        for m in EXTERN.finditer(text):
            name, params, ret = m.group(1), m.group(2), m.group(3)
            where = "stdlib/%s.sflow: %s" % (module, name)
            cs = []
            rc = "void"
            if ret:
                r = c_type(ret, structs, where)
                if r == "struct":
                    cs += ["void *", "const sf_type *"]
                else:
                    rc = r
            for p in filter(None, (x.strip() for x in params.split(","))):
                pt = p.split(":", 1)[1].split("=", 1)[0]
                c = c_type(pt, structs, where)
                cs += ["const void *", "const sf_type *"] if c == "struct" else [c]
            cs.append("const sf_loc *")
            out.append((where, "sf_std_%s_%s" % (module, name), rc, cs))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default="cc")
    args = ap.parse_args()
    protos = prototypes()
    if not protos:
        sys.exit("extern_test: no @extern function found in stdlib/ (the reader is broken)")
    # The layer headers, not a layer's private *_internal.h: an extern's C
    # side is declared where the layer says what it offers.
    headers = sorted(h for h in glob.glob(os.path.join(ROOT, "runtime", "*", "*.h"))
                     if not h.endswith("_internal.h"))
    src = ["#include <stdbool.h>", "#include <stdint.h>", '#include "sflow.h"']
    src += ['#include "%s"' % h for h in headers]
    for i, (where, name, rc, cs) in enumerate(protos):
        # Taking the address first fails when no header declares the
        # function (an undeclared identifier); the prototype after it fails
        # when the declared type differs (conflicting types).
        src.append("/* %s */" % where)
        src.append("static void *const used_%d = (void *)&%s;" % (i, name))
        src.append("%s %s(%s);" % (rc, name, ", ".join(cs)))
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write("\n".join(src) + "\n")
        cfile = f.name
    try:
        incs = ["-I", os.path.join(ROOT, "runtime")]
        for d in sorted(glob.glob(os.path.join(ROOT, "runtime", "*", ""))):
            incs += ["-iquote", d]
        p = subprocess.run([args.cc, "-std=gnu11", "-fsyntax-only", "-Wno-unused-variable"] + incs +
                           [cfile], capture_output=True, text=True)
    finally:
        os.unlink(cfile)
    for where, name, rc, cs in protos:
        print("%-44s %s %s(%s)" % (where, rc, name, ", ".join(cs)))
    if p.returncode != 0:
        print(p.stderr)
        print("FAIL: a std @extern function disagrees with the runtime's headers (above)")
        return 1
    print("ok: %d @extern functions match their C prototypes" % len(protos))
    return 0


if __name__ == "__main__":
    sys.exit(main())
