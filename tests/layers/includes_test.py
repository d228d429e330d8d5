#!/usr/bin/env python3
"""includes_test.py — a runtime layer cannot include a header above it.

CMakeLists.txt gives each layer's objects the -iquote folders of its own
layer and of the layers it stands on (SFLOW_RT_BELOW_*, closed), and none
above.  This test compiles small probe files with the very command line
CMake uses for a real object of each layer (read from the build's
compile_commands.json) and checks both ways:

  - a core object that includes nn.h and calls sf__t_matmul fails to
    compile, saying nn.h is not found; so does one that spells it
    "nn/nn.h" (runtime/ itself is not on a layer's path);
  - the same include and call compile as an nn object (the control);
  - for every pair of layers, including the other's header compiles
    exactly when the DAG lets the first call the second.

    includes_test.py --compile-db build/compile_commands.json \\
        --layer NAME=BELOW,... ...

(one --layer per layer, as tests/layers/suite.cmake passes them from
CMake's SFLOW_RT_BELOW_* lists).  The nm test (layers_test.py) stays: it
also catches a call made through a declaration written by hand.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def layer_commands(db, layers):
    """{layer: argv} of one real object of each layer, with the output and
    the source left out."""
    out = {}
    for e in db:
        parts = os.path.normpath(e["file"]).split(os.sep)
        at = [i for i, p in enumerate(parts[:-2]) if p == "runtime"]
        layer = parts[at[-1] + 1] if at else None  # runtime/LAYER/.../file.c
        if layer not in layers or layer in out:
            continue
        argv = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        kept, skip = [], False
        for a in argv:
            if skip:
                skip = False
            elif a in ("-o", "-c"):
                skip = True
            elif a != e["file"]:
                kept.append(a)
        out[layer] = (e["directory"], kept)
    return out


def compiles(cmd, text, tmp):
    """(ok, stderr) of compiling text with a layer's command line."""
    cwd, argv = cmd
    src = os.path.join(tmp, "probe.c")
    with open(src, "w") as f:
        f.write(text)
    p = subprocess.run(argv + ["-fsyntax-only", src], cwd=cwd, capture_output=True, text=True,
                       timeout=120)
    return p.returncode == 0, p.stderr


def closure(below, layer):
    seen, todo = {layer}, list(below[layer])
    while todo:
        b = todo.pop()
        if b not in seen:
            seen.add(b)
            todo.extend(below[b])
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-db", required=True)
    ap.add_argument("--layer", action="append", default=[], help="NAME=BELOW,...")
    a = ap.parse_args()
    below = {}
    for spec in a.layer:
        name, _, deps = spec.partition("=")
        below[name] = [d for d in deps.split(",") if d]
    with open(a.compile_db) as f:
        cmds = layer_commands(json.load(f), below)
    check(set(cmds) == set(below), "a real object's command line for every layer (missing: %s)"
          % sorted(set(below) - set(cmds)))
    if failures:
        return 1
    call = ('#include "core.h"\n#include "%s"\n'
            "sf_tensor *up(sf_tensor *a, sf_tensor *b) { return sf__t_matmul(a, b, NULL); }\n")
    with tempfile.TemporaryDirectory(prefix="sflow-includes-") as tmp:
        ok, err = compiles(cmds["core"], call % "nn.h", tmp)
        check(not ok and "nn.h: No such file" in err,
              "a core object including nn.h to call sf__t_matmul does not compile: %s"
              % (err.strip().splitlines() or ["(it compiled)"])[0])
        ok, err = compiles(cmds["core"], call % "nn/nn.h", tmp)
        check(not ok and "No such file" in err,
              "nor spelt \"nn/nn.h\": %s" % (err.strip().splitlines() or ["(it compiled)"])[0])
        ok, err = compiles(cmds["nn"], call % "nn.h", tmp)
        check(ok, "the same include and call compile as an nn object%s"
              % ("" if ok else ": " + err.strip()))
        for layer in sorted(below):
            sees = closure(below, layer)
            for other in sorted(below):
                # "sched.h" not found among the layers falls back to the
                # system's <sched.h>: the guard tells the layer's apart.
                probe = ('#include "%s.h"\n#ifndef SF_%s_H\n#error not the layer\'s header\n'
                         '#endif\n' % (other, other.upper()))
                ok, err = compiles(cmds[layer], probe, tmp)
                want = other in sees
                check(ok == want, "%s includes %s.h: %s%s" % (
                    layer, other, "compiles" if ok else "not found",
                    "" if ok == want else " (the DAG says %s)" % ("it may" if want else "it may not")))
    if failures:
        print("FAIL: %d include checks (above)" % len(failures))
        return 1
    print("ok: upward includes fail to compile, downward ones compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
