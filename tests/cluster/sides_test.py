#!/usr/bin/env python3
"""sides_test.py — the cluster layer's sides call in one direction.

runtime/cluster/ is four sides (docs/cluster.md, "Source layout"):

    net/  <-  proto/  <-  head/
                     <-  worker/

net/ (hosts, SSH, crypto, the TCP ring) calls nothing else of the layer;
proto/ (the frames and connections) calls net/; head/ and worker/ call
proto/ and net/ but never each other.  install.c, at the top, is the one
file that sees both sides.  This test fails on

  * a symbol an object of one side uses that an object of a side it may
    not call defines (nm over the layer's objects), and
  * an #include of a side's header from a side that may not call it, or
    of the umbrella cluster.h from inside a side (the sources).

    sides_test.py --nm NM --src runtime/cluster OBJECT...
"""
import argparse
import os
import re
import subprocess
import sys

# Each side and the sides it may call (itself included).
ALLOWED = {
    "net": {"net"},
    "proto": {"net", "proto"},
    "head": {"net", "proto", "head"},
    "worker": {"net", "proto", "worker"},
    "top": {"net", "proto", "head", "worker", "top"},
}


def side_of(path, root_name="cluster"):
    """The side of a source or object path: the folder under
    runtime/cluster/, or "top" for a file directly in it."""
    parts = os.path.normpath(path).split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == root_name and i + 1 < len(parts) and parts[i - 1] == "runtime":
            rest = parts[i + 1:]
            return rest[0] if len(rest) > 1 else "top"
    return None


def symbols(nm, obj):
    out = subprocess.run([nm, obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWGSC":
            defined.add(parts[2])
    return defined, undefined


def short(path):
    """runtime/cluster/<side>/<file>.c for an object path."""
    parts = os.path.normpath(path).split(os.sep)
    i = len(parts) - 1 - parts[::-1].index("cluster")
    return "/".join(parts[i + 1:]).removesuffix(".o")


def check_symbols(nm, objects):
    problems = []
    owner = {}
    table = {}
    for obj in objects:
        side = side_of(obj)
        if side not in ALLOWED:
            problems.append(f"{obj}: not under a side of runtime/cluster/")
            continue
        d, u = symbols(nm, obj)
        table[obj] = (side, u)
        for name in d:
            owner[name] = obj
    for obj, (side, used) in sorted(table.items()):
        for name in sorted(used):
            other = owner.get(name)
            if other is None or other == obj:
                continue
            to = side_of(other)
            if to not in ALLOWED[side]:
                problems.append(
                    f"{short(obj)} ({side}) uses {name} of {short(other)} ({to}): "
                    f"{side} may call only {', '.join(sorted(ALLOWED[side]))}")
    return problems, {table[o][0] for o in table}


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def check_includes(src):
    problems = []
    root = os.path.abspath(src)
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            side = rel.split(os.sep)[0] if os.sep in rel else "top"
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                line = text.count("\n", 0, m.start()) + 1
                # Resolved as the compiler does: beside the file, then
                # runtime/cluster (-iquote); other layers' headers are not ours.
                cands = [os.path.normpath(os.path.join(dirpath, inc)),
                         os.path.normpath(os.path.join(root, inc))]
                target = next((c for c in cands if os.path.exists(c)), None)
                if target is None or not target.startswith(root + os.sep):
                    continue
                trel = os.path.relpath(target, root)
                to = trel.split(os.sep)[0] if os.sep in trel else "top"
                if side != "top" and to == "top":
                    problems.append(f"{rel}:{line}: includes {trel}, the layer's umbrella header; "
                                    f"a side includes its own header")
                elif to not in ALLOWED[side]:
                    problems.append(f"{rel}:{line}: includes {trel} ({to}): "
                                    f"{side} may include only {', '.join(sorted(ALLOWED[side]))}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--src", required=True, help="runtime/cluster")
    ap.add_argument("objects", nargs="+")
    args = ap.parse_args()
    objects = [o for o in args.objects if o.endswith(".o")]
    problems, seen = check_symbols(args.nm, objects)
    missing = set(ALLOWED) - seen
    if missing:
        problems.append(f"no objects of side(s) {', '.join(sorted(missing))} among "
                        f"{len(objects)} objects: is the source glob right?")
    problems += check_includes(args.src)
    for p in problems:
        print("sides_test:", p)
    if problems:
        print(f"sides_test: {len(problems)} call(s) or include(s) against the direction")
        return 1
    print(f"sides_test: {len(objects)} objects and their sources call one way: "
          "net <- proto <- head, worker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
