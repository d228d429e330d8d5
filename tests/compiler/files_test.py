#!/usr/bin/env python3
"""files_test.py — the compiler's files call one way, and stay small.

Reads the symbols of the front end's library (libsflowfront.a: every
compiler/*.c but main.c) with nm, draws the graph "file A uses a symbol
file B defines", and fails on:

  - a cycle in that graph (printed with the symbols on each edge);
  - a call from a generic file of sema or codegen into a domain file of
    the same pass (sema_internal.h, codegen_internal.h: the generic files
    reach the domains only through the SemaDomains / CgDomains tables);
  - a hand-written compiler source over --max-lines lines.

    files_test.py --lib LIBSFLOWFRONT.a --src COMPILER_DIR [--nm NM] [--max-lines N]
"""
import argparse
import os
import subprocess
import sys

GENERIC = {
    "sema": ["sema_scope", "sema_expr", "sema_stmt"],
    "codegen": ["codegen_base", "codegen_expr", "codegen_stmt"],
}
DOMAINS = {
    "sema": ["sema_builtin", "sema_data", "sema_tensor", "sema_task"],
    "codegen": ["codegen_builtin", "codegen_data", "codegen_tensor", "codegen_task"],
}


def members(nm, lib):
    """{member stem: (defined, undefined)} of a static library."""
    out = subprocess.run([nm, "-A", lib], capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0].count(":") < 2:
            continue
        stem = parts[0].split(":")[1].split(".")[0]
        kind, name = parts[-2], parts[-1]
        d, u = res.setdefault(stem, (set(), set()))
        if kind == "U":
            u.add(name)
        elif kind in ("T", "D", "B", "R", "V", "W", "G", "S", "C"):
            d.add(name)
    return res


def find_cycle(edges):
    """One cycle of the graph as a list of nodes, or None."""
    color, stack = {}, []

    def visit(v):
        color[v] = 1
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if color.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if not color.get(w):
                c = visit(w)
                if c:
                    return c
        color[v] = 2
        stack.pop()
        return None

    for v in sorted(edges):
        if not color.get(v):
            c = visit(v)
            if c:
                return c
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--max-lines", type=int, default=1200)
    a = ap.parse_args()
    m = members(a.nm, a.lib)
    owner = {s: f for f, (d, _) in m.items() for s in d}
    edges, why = {}, {}
    for f, (_, u) in m.items():
        for s in u:
            g = owner.get(s)
            if g and g != f:
                edges.setdefault(f, set()).add(g)
                why.setdefault((f, g), set()).add(s)
    fails = 0
    for pass_, files in GENERIC.items():
        for f in files + DOMAINS[pass_]:
            if f not in m:
                print(f"files_test: {f}.c is not in {a.lib}")
                fails += 1
    cyc = find_cycle(edges)
    if cyc:
        fails += 1
        print("files_test: the compiler's files call each other in a circle:")
        for x, y in zip(cyc, cyc[1:]):
            print(f"  {x}.c -> {y}.c ({', '.join(sorted(why[(x, y)]))})")
    for pass_, files in GENERIC.items():
        for f in files:
            for g in DOMAINS[pass_]:
                if g in edges.get(f, ()):
                    fails += 1
                    print(f"files_test: generic {f}.c calls domain {g}.c directly "
                          f"({', '.join(sorted(why[(f, g)]))}); go through the {pass_} domain table")
    for name in sorted(os.listdir(a.src)):
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(a.src, name), "rb") as fh:
            n = fh.read().count(b"\n")
        if n > a.max_lines:
            fails += 1
            print(f"files_test: compiler/{name} has {n} lines, over {a.max_lines}")
    nedges = sum(len(v) for v in edges.values())
    print(f"files_test: {len(m)} files, {nedges} cross-file edges, "
          f"{'no cycle' if not cyc else 'a cycle'}; {fails} problem(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
