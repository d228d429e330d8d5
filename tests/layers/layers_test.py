#!/usr/bin/env python3
"""layers_test.py — the runtime's layers call only down.

The runtime is built as one static library per layer (CMakeLists.txt,
docs/architecture.md "Runtime layers").  This test reads each library's
symbols with nm and fails on any symbol a layer's object uses but does not
define that is defined by a layer it may not call: a layer may call itself
and, transitively, the layers it is declared to stand on.  A call upward
must go through a hook the lower layer owns (docs/architecture.md, "Hooks").

    layers_test.py [--nm NM] --layer NAME=BELOW,...:LIBRARY ...

(one --layer per layer, BELOW its direct lower layers, as tests/layers/
suite.cmake passes them from CMake's SFLOW_RT_BELOW_* lists).
"""
import argparse
import subprocess
import sys


def symbols(nm, lib):
    """{member: (defined set, undefined set)} of a static library."""
    out = subprocess.run([nm, "-A", lib], capture_output=True, text=True, check=True).stdout
    members = {}
    for line in out.splitlines():
        # "lib.a:member.o:0000000000000000 T name" or "lib.a:member.o:         U name"
        parts = line.split()
        if len(parts) < 2 or parts[0].count(":") < 2:
            continue
        member = parts[0].split(":")[1]
        kind, name = parts[-2], parts[-1]
        d, u = members.setdefault(member, (set(), set()))
        if kind == "U":
            u.add(name)
        elif kind in ("T", "D", "B", "R", "V", "W", "G", "S", "C"):  # global definitions
            d.add(name)
    return members


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--layer", action="append", required=True,
                    help="NAME=BELOW1,BELOW2:LIBRARY")
    args = ap.parse_args()
    below, libs, order = {}, {}, []
    for spec in args.layer:
        name, _, rest = spec.partition("=")
        deps, _, lib = rest.partition(":")
        below[name] = [d for d in deps.split(",") if d]
        libs[name] = lib
        order.append(name)
    for name, deps in below.items():
        for d in deps:
            if d not in below:
                sys.exit(f"layers_test: layer {name} stands on unknown layer {d}")

    def reach(name, seen=None):
        seen = set() if seen is None else seen
        for d in below[name]:
            if d not in seen:
                seen.add(d)
                reach(d, seen)
        return seen

    allowed = {n: reach(n) | {n} for n in order}
    syms = {n: symbols(args.nm, libs[n]) for n in order}
    where = {}  # symbol -> [(layer, member)]
    for n in order:
        for member, (d, _) in syms[n].items():
            for s in d:
                where.setdefault(s, []).append((n, member))
    bad = []
    for n in order:
        for member, (d, u) in sorted(syms[n].items()):
            for s in sorted(u):
                for (m, other) in where.get(s, []):
                    if m not in allowed[n]:
                        bad.append(f"{n}/{member} calls {s} of {m}/{other}: {n} may call only "
                                   f"{', '.join(sorted(allowed[n]))}")
    for line in bad:
        print("layers_test: upward call:", line)
    total = sum(len(u) for n in order for (_, u) in syms[n].values())
    print(f"layers_test: {len(order)} layers, {sum(len(syms[n]) for n in order)} objects, "
          f"{total} undefined references, {len(bad)} against the direction")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
