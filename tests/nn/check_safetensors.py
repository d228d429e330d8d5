#!/usr/bin/env python3
"""check_safetensors.py — reads a safetensors file with Python alone (no
torch, no safetensors package), holding it to the format, so that files
sflow's nn.save writes can be checked where PyTorch is not installed:

    python3 tests/nn/check_safetensors.py FILE                 # format; prints the contents as JSON
    python3 tests/nn/check_safetensors.py FILE --expect E.json # and compares them with E, exactly
    python3 tests/nn/check_safetensors.py --runner FIXTURE     # check_fixtures.py runner

The format, as the safetensors package writes and reads it: an 8-byte
little-endian header length N; N bytes of a UTF-8 JSON object (trailing
spaces allowed), with 8 + N a multiple of 8 (the package's writer pads
the header so; its reader does not insist, this checker of writers does);
then the data.  Each entry but
`__metadata__` (an object of strings) has a dtype, a shape of non-negative
integers and data_offsets [begin, end) into the data, end - begin the
shape's element count times the dtype's size; the tensors tile the data
from 0 to its end without gaps or overlaps.  Any breach is an error naming
the file, the entry and the rule, exit 1.

The contents print as the `expect` of tests/nn/fixtures/safetensors.json:
metadata, each tensor's dtype and values converted to f32 exactly (F32,
F16, BF16; F64 and integer dtypes print as read), the header length and the
data offsets.  --expect E compares with E's object (or with E's first
case's `expect` when E is a fixture) bit for bit, -0.0 included; keys E
does not have are not compared.  As a runner it does the same for every
case of a safetensors fixture, so tests/nn/check_fixtures_test.py shows this
reader agrees with the safetensors package on its own file.
"""
import argparse
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_fixtures  # noqa: E402  (compare and Diff)

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
         "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
UNPACK = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b",
          "U64": "Q", "U32": "I", "U16": "H", "U8": "B", "BOOL": "?"}
MAX_HEADER = 100 * 2**20  # the safetensors package's own bound


class Bad(Exception):
    pass


def values(dtype, raw):
    n = len(raw) // SIZES[dtype]
    if dtype == "BF16":  # the top half of an f32: widen by 16 zero bits
        halves = struct.unpack(f"<{n}H", raw)
        return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(h << 16 for h in halves))))
    v = struct.unpack(f"<{n}{UNPACK[dtype]}", raw)
    return [float(x) for x in v] if dtype[0] == "F" else [int(x) for x in v]


def read(path):
    """The file's contents as the fixture's `expect`, or Bad naming the rule."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise Bad(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(blob[:8], "little")
    if n > MAX_HEADER or 8 + n > len(blob):
        raise Bad(f"{path}: header length {n} runs past the end of the {len(blob)}-byte file")
    if (8 + n) % 8:
        raise Bad(f"{path}: header length {n}: the data must start 8-byte aligned (8 + {n} is not a multiple of 8)")
    try:
        text = blob[8:8 + n].decode("utf-8")
        header = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise Bad(f"{path}: the header is not UTF-8 JSON ({e})")
    if not isinstance(header, dict) or not text.startswith("{") or text.rstrip(" ") != text.rstrip():
        raise Bad(f"{path}: the header must be one JSON object, padded with spaces only")
    data = blob[8 + n:]
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise Bad(f"{path}: __metadata__ must be an object of strings, not {json.dumps(meta)[:60]}")
    spans, tensors = [], {}
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise Bad(f"{path}: {name}: an entry has exactly dtype, shape and data_offsets, not {json.dumps(e)[:80]}")
        dt, shape, off = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in SIZES:
            raise Bad(f"{path}: {name}: unknown dtype {dt!r}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise Bad(f"{path}: {name}: shape {shape!r} is not a list of non-negative integers")
        if not (isinstance(off, list) and len(off) == 2 and all(isinstance(o, int) for o in off) and 0 <= off[0] <= off[1]):
            raise Bad(f"{path}: {name}: data_offsets {off!r} are not [begin, end] with begin <= end")
        want = math.prod(shape) * SIZES[dt]
        if off[1] - off[0] != want:
            raise Bad(f"{path}: {name}: data_offsets {off} hold {off[1] - off[0]} bytes; {dt} {shape} needs {want}")
        spans.append((off[0], off[1], name))
        raw = data[off[0]:off[1]]
        tensors[name] = {"dtype": dt, "tensor": {"shape": shape, "data": values(dt, raw) if len(raw) == want else []}}
    at = 0
    for b, e, name in sorted(spans):
        if b != at:
            raise Bad(f"{path}: {name}: starts at {b}, but the tensors before it end at {at} "
                      f"({'a gap' if b > at else 'an overlap'})")
        at = e
    if at != len(data):
        raise Bad(f"{path}: the tensors cover {at} bytes of data, the file holds {len(data)}")
    out = {"metadata": dict(sorted(meta.items())) if meta is not None else None,
           "tensors": dict(sorted(tensors.items())), "header_length": n,
           "data_offsets": {k: header[k]["data_offsets"] for k in sorted(header)}}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--expect", help="JSON of the expected contents (or a safetensors fixture)")
    ap.add_argument("--runner", metavar="FIXTURE", help="answer a safetensors fixture's cases (check_fixtures.py)")
    a = ap.parse_args()
    try:
        if a.runner:
            doc = json.load(open(a.runner))
            for c in doc["cases"]:
                got = read(os.path.join(os.path.dirname(os.path.abspath(a.runner)), c["inputs"]["path"]))
                print(json.dumps(dict({"case": c["name"]}, **got)))
            return
        if not a.file:
            ap.error("give a FILE or --runner FIXTURE")
        got = read(a.file)
    except Bad as e:
        sys.exit(f"check_safetensors: {e}")
    except OSError as e:
        sys.exit(f"check_safetensors: {e}")
    if not a.expect:
        print(json.dumps(got, indent=1))
        return
    want = json.load(open(a.expect))
    if "cases" in want:
        want = want["cases"][0]["expect"]
    diff = check_fixtures.Diff(0.0, 0.0)
    check_fixtures.compare(want, got, "", diff)
    if diff.count:
        sys.exit(f"check_safetensors: {a.file}: {diff.count} difference(s) from {a.expect}"
                 + "".join("\n    " + m for m in diff.msgs))
    print(f"check_safetensors: {a.file}: {len(got['tensors'])} tensors as {a.expect} says")


if __name__ == "__main__":
    main()
