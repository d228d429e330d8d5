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
           "str": "sf_str *", "tensor": "sf_tensor *"}
EXTERN = re.compile(r"@extern\s+fn\s+(\w+)\s*")
STRUCT = re.compile(r"^struct\s+(\w+)", re.M)


def c_type(t, structs, where, tparams=()):
    t = t.strip()
    if t in tparams:
        return "struct"  # a generic one's T travels as a struct does
    if t.startswith("fn(") or t.startswith("(fn("):
        return "int64_t"  # a function value: an index into sf_program.fn_names
    if t.endswith("[]"):
        return "sf_array *"
    if t.startswith("map<"):
        return "sf_map *"
    if t in SCALARS:
        return SCALARS[t]
    if t in structs:
        return "struct"
    sys.exit("extern_test: %s: type '%s' has no C form this test knows" % (where, t))


def split_params(params):
    """The parameters at top-level commas (map<K, V> has one inside)."""
    out, depth, cur, quoted, escaped = [], 0, "", False, False
    for ch in params:
        # A default may be a string holding a comma (sep: str = ",").
        if quoted:
            quoted = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
            cur += ch
            continue
        quoted = ch == '"'
        depth += (ch in "<(") - (ch == ")" or (ch == ">" and not cur.endswith("-")))
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [x.strip() for x in out + [cur] if x.strip()]


def parse_decl(text, m):
    """NAME, its type parameters, its parameter text and its result type
    (or None) of the @extern declaration that m's match starts."""
    name, i = m.group(1), m.end()
    tparams = ()
    if text[i] == "<":
        j = text.index(">", i)
        tparams = tuple(x.strip() for x in text[i + 1:j].split(","))
        i = j + 1
    i = text.index("(", i)
    depth, j = 0, i
    while True:
        depth += (text[j] == "(") - (text[j] == ")")
        if depth == 0:
            break
        j += 1
    params = text[i + 1:j]
    rest = text[j + 1:].split("\n", 1)[0].strip()
    ret = rest[2:].strip() if rest.startswith("->") else None
    return name, tparams, params, ret


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def prototypes():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "stdlib", "*.sflow"))):
        module = os.path.splitext(os.path.basename(path))[0]
        text = strip_comments(open(path, encoding="utf-8").read())
        structs = set(STRUCT.findall(text))
        for m in EXTERN.finditer(text):
            name, tparams, params, ret = parse_decl(text, m)
            where = "stdlib/%s.sflow: %s" % (module, name)
            cs = []
            rc = "void"
            if ret:
                r = c_type(ret, structs, where, tparams)
                if r == "struct":
                    cs += ["void *", "const sf_type *"]
                else:
                    rc = r
            for p in split_params(params):
                pt = p.split(":", 1)[1].split("=", 1)[0]
                c = c_type(pt, structs, where, tparams)
                cs += ["const void *", "const sf_type *"] if c == "struct" else [c]
            cs += ["const sf_type *"] * len(tparams)  # what each type parameter stands for
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
