#!/usr/bin/env python3
"""One definition per op (issue 28): the sources of runtime/nn and the
kernel files of kernels/ define every backward rule, op kind and kind list
once, and every kind and device-table entry has its CPU and its GPU kernel.

Checks, each printing what it found when it fails:
  1. no backward rule (a `bw_*` function, the third argument of
     sf__record*) is defined twice, in one file or across files;
  2. each (op name, rule) pair is recorded at one place only, and no
     device file (gpu_ops.c, gpu_layers.c) records a node at all: devices
     supply kernels, the family files record;
  3. the kind lists (SF_NN_*_KINDS) and the kind enums are defined in
     runtime/nn/kinds.h alone: no other file of runtime/nn or kernels/
     writes an enum of kinds, and every kernel file that switches on a
     kind includes kinds.h;
  4. every entry of the device table (SF__NN_KERNELS in nn.h) has a
     `sf__cpu_<entry>` and a `sf__gpu_<entry>` definition;
  5. every kind has its CPU loops and its GPU device functions: unary
     `unary_<name>`/`unary_bw_<name>` (elementwise.c) and
     `sf_u_<name>`/`sf_ub_<name>` (kernels/nn.cu), binary `sf_b_<name>`;
  6. no switch over a kind in kernels/*.cu has a `default:` that computes
     (only one that traps).

Usage: nn_ops_test.py [--root DIR]   (DIR defaults to the repository)
"""
import argparse, collections, glob, os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEVICE_FILES = {"gpu_ops.c", "gpu_layers.c"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def read(path):
    with open(path, encoding="utf-8") as f:
        return strip_comments(f.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=ROOT)
    root = ap.parse_args().root
    nn_dir = os.path.join(root, "runtime", "nn")
    cfiles = sorted(glob.glob(os.path.join(nn_dir, "*.c")))
    hfiles = sorted(glob.glob(os.path.join(nn_dir, "*.h")))
    cufiles = sorted(glob.glob(os.path.join(root, "kernels", "*.cu")))
    src = {p: read(p) for p in cfiles + hfiles + cufiles}
    rel = lambda p: os.path.relpath(p, root)
    errors = []

    # 1. backward rules defined once.
    rule_def = re.compile(r"^\s*(?:static\s+)?void\s+(\w*bw_\w+)\s*\(\s*sf__node\s*\*\s*\w+\s*,"
                          r"\s*sf_tensor\s*\*\s*\w+\s*\)\s*\{", re.M)
    defs = collections.defaultdict(list)
    for p in cfiles:
        for m in rule_def.finditer(src[p]):
            defs[m.group(1)].append(rel(p))
    for name, where in sorted(defs.items()):
        if len(where) > 1:
            errors.append(f"backward rule {name} is defined {len(where)} times: {', '.join(where)}")

    # 2. each recorded (op, rule) once; devices record nothing.
    rec = re.compile(r"sf__record(?:3|_n)?\(\s*([^,]+?)\s*,\s*\w+\s*,\s*(\w+)\s*,")
    sites = collections.defaultdict(list)
    for p in cfiles:
        if os.path.basename(p) == "autograd.c":  # the recorder itself
            continue
        for m in rec.finditer(src[p]):
            line = src[p].count("\n", 0, m.start()) + 1
            if os.path.basename(p) in DEVICE_FILES:
                errors.append(f"{rel(p)}:{line}: a device file records a node ({m.group(2)}); "
                              "the op's family file records, devices supply kernels")
            sites[(m.group(1), m.group(2))].append(f"{rel(p)}:{line}")
    for (op, rule), where in sorted(sites.items()):
        if len(where) > 1:
            errors.append(f"op {op} with rule {rule} is recorded at {len(where)} places: "
                          f"{', '.join(where)}")

    # 3. kinds in kinds.h alone.
    kinds_h = os.path.join(nn_dir, "kinds.h")
    if kinds_h not in src:
        errors.append("runtime/nn/kinds.h is missing")
    lists = {}
    if kinds_h in src:
        for m in re.finditer(r"#define\s+(SF_NN_\w+_KINDS)\(X\)((?:[^\n]*\\\n)*[^\n]*)", src[kinds_h]):
            lists[m.group(1)] = re.findall(r"X\((\w+),\s*(\w+)", m.group(2))
    for want in ("SF_NN_BINARY_KINDS", "SF_NN_UNARY_KINDS", "SF_NN_REDUCE_KINDS"):
        if want not in lists:
            errors.append(f"kinds.h does not define {want}")
    # The kinds kinds.h lists, and those it was written for (so a tree
    # without it is still checked for enums of them).
    kind_names = {k for l in lists.values() for k, _ in l} | {
        "RELU", "GELU", "SIGMOID", "TANH", "EXP", "LOG", "GELU_TANH", "SUM", "MEAN", "MAX", "SUMSQ"}
    for p, text in src.items():
        if p == kinds_h:
            continue
        for m in re.finditer(r"#define\s+(SF_NN_\w+_KINDS)\b", text):
            errors.append(f"{rel(p)}: defines the kind list {m.group(1)} again (kinds.h has it)")
        for m in re.finditer(r"\benum\s*\w*\s*\{([^}]*)\}", text):
            names = re.findall(r"\b(?:SF_+)?(?:[RUB]_+)?([A-Z][A-Z0-9_]*)\b\s*(?:=|,|$)", m.group(1))
            hit = sorted(set(names) & kind_names)
            if len(hit) >= 2:
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{rel(p)}:{line}: an enum of op kinds ({', '.join(hit)}) outside "
                              "kinds.h")
    for p in cufiles:
        if re.search(r"switch\s*\(\s*(kind|op)\s*\)", src[p]) and '#include "kinds.h"' not in src[p]:
            errors.append(f"{rel(p)}: switches on a kind without including kinds.h")

    # 4. the device table: both devices fill every entry.
    nn_h = src.get(os.path.join(nn_dir, "nn.h"), "")
    raw_nn_h = open(os.path.join(nn_dir, "nn.h"), encoding="utf-8").read()
    m = re.search(r"#define SF__NN_KERNELS\(X\)((?:[^\n]*\\\n)*[^\n]*)", raw_nn_h)
    entries = re.findall(r"\bX\((\w+),", strip_comments(m.group(1))) if m else []
    if not entries:
        errors.append("nn.h: no SF__NN_KERNELS list of device-table entries")
    alltext = "\n".join(src[p] for p in cfiles)
    for e in entries:
        for dev in ("cpu", "gpu"):
            if not re.search(rf"^[\w \*]*\bsf__{dev}_{e}\s*\([^;{{]*\)\s*\{{", alltext, re.M):
                errors.append(f"device-table entry {e} has no {dev.upper()} kernel "
                              f"(no definition of sf__{dev}_{e} in runtime/nn)")

    # 5. every kind has its loops and device functions.
    ew = src.get(os.path.join(nn_dir, "elementwise.c"), "")
    nncu = src.get(os.path.join(root, "kernels", "nn.cu"), "")
    for _, name in lists.get("SF_NN_UNARY_KINDS", []):
        for fn, where, text in ((f"unary_{name}", "runtime/nn/elementwise.c", ew),
                                (f"unary_bw_{name}", "runtime/nn/elementwise.c", ew),
                                (f"sf_u_{name}", "kernels/nn.cu", nncu),
                                (f"sf_ub_{name}", "kernels/nn.cu", nncu)):
            if not re.search(rf"\b{fn}\s*\([^;]*\)\s*\{{", text):
                errors.append(f"unary kind {name}: no {fn} in {where}")
    for _, name in lists.get("SF_NN_BINARY_KINDS", []):
        if not re.search(rf"\bsf_b_{name}\s*\(", nncu):
            errors.append(f"binary kind {name}: no sf_b_{name} in kernels/nn.cu")

    # 6. no computing default in a kernel's kind switch.
    for p in cufiles:
        text = src[p]
        for m in re.finditer(r"switch\s*\(\s*(kind|op)\s*\)\s*\{", text):
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end():i]
            d = re.search(r"default\s*:(.*)", body, re.S)
            if d and not d.group(1).lstrip().startswith("__trap()"):
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{rel(p)}:{line}: switch ({m.group(1)}) has a default that "
                              "computes; an unknown kind must trap")

    nrules = len(defs)
    print(f"nn_ops: {nrules} backward rules in {len(cfiles)} files, {len(sites)} recorded ops, "
          f"{len(entries)} device-table entries, "
          f"{sum(len(l) for l in lists.values())} kinds in {len(lists)} lists")
    for e in errors:
        print("FAIL", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
