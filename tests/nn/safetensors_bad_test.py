#!/usr/bin/env python3
"""nn.load refuses what the safetensors format forbids, naming the file and
why, and loads what it allows (docs/nn.md, "Saving and loading").

Each case is a small file made here by hand (8-byte little-endian header
length, JSON header, data), beside a good one; tests/nn/safetensors_load.sflow
loads it into a struct {a: (2, 3), b: (4,)} of F32.  A refused file must
exit non-zero with "nn.load: FILE" and the reason in the message, and print
no values; an allowed one must print the values the file holds.  The rules
are the reference library's (huggingface/safetensors, its validation of a
header): a header length within the file and at most 100,000,000; a UTF-8
JSON object from the header's first byte, then only whitespace padding;
__metadata__ an object of strings; a name once; every dtype one the format
defines; each tensor's bytes its dtype's size times its shape; the tensors,
in order of their offsets, tiling the data from byte 0 to the file's end
with no gap, no overlap and nothing after.

Usage: safetensors_bad_test.py --sflowc PATH"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []

A = list(range(1, 7))   # a: (2, 3)
B = [7.0, 8.0, 9.0, 10.0]  # b: (4,)
GOOD_OUT = "a [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]\nb [7.0, 8.0, 9.0, 10.0]\n"


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def entries(a=(0, 24), b=(24, 40), adt="F32", ashape=(2, 3)):
    return {"__metadata__": {"format": "pt"},
            "a": {"dtype": adt, "shape": list(ashape), "data_offsets": list(a)},
            "b": {"dtype": "F32", "shape": [4], "data_offsets": list(b)}}


def header(obj=None, raw=None, pad=True):
    h = raw if raw is not None else json.dumps(obj if obj is not None else entries(),
                                               separators=(",", ":")).encode()
    if pad:
        h += b" " * (-(len(h)) % 8)
    return h


def data(values=None):
    return struct.pack("<10f", *(values or A + B))


def file(h, d=None, length=None):
    return struct.pack("<Q", len(h) if length is None else length) + h + (data() if d is None else d)


def cases():
    """(name, bytes, None for a good file or the words the refusal must hold)."""
    good = header()
    yield "good, space-padded", file(good), None
    yield "good, no padding", file(header(pad=False)), None
    yield "good, padded with a newline and spaces (JSON whitespace)", \
        file(header(raw=json.dumps(entries()).encode() + b"\n   ", pad=False)), None
    yield "good, tensors listed out of offset order", \
        file(header({"b": entries()["b"], "a": entries()["a"]})), None
    yield "good, an extra I64 tensor (strict = false)", \
        file(header(dict(entries(), ids={"dtype": "I64", "shape": [1], "data_offsets": [40, 48]})),
             data() + struct.pack("<q", 5)), "strict"
    # The file: the header length one byte short.  The header loses
    # a padding space, so the JSON still parses, and every tensor would
    # read its bytes shifted by one: NaN and +-1e38, exit 0.
    yield "header length one byte short", file(good, length=len(good) - 1), \
        ["the tensors' data ends at byte 40 of the 41 data bytes", "1 byte after it",
         "header length, %d, is wrong" % (len(good) - 1)]
    yield "header length one byte long", file(good, length=len(good) + 1), \
        ["the header holds bytes after its JSON object (at byte %d" % (8 + len(good))]
    yield "header length past the file", file(good, length=10 ** 6), \
        ["is not a safetensors file (header length 1000000"]
    yield "header length over the format's limit", b"", None  # a sparse file: made in main
    yield "overlapping data_offsets", file(header(entries(a=(0, 24), b=(20, 36))), data()[:36]), \
        ["the data of \"b\" (offsets 20..36) overlaps that of \"a\" (offsets 0..24)"]
    yield "the same offsets twice", file(header(dict(entries(), b={"dtype": "F32", "shape": [2, 3],
                                                                  "data_offsets": [0, 24]})),
                                        data()[:24]), ["overlaps that of"]
    yield "a gap between tensors", file(header(entries(b=(28, 44))), data() + b"\0" * 4), \
        ["the data of \"b\" starts at byte 28 but the tensor before it ends at byte 24",
         "4 bytes belong to no tensor"]
    yield "data not starting at 0", file(header(entries(a=(8, 32), b=(32, 48))), b"\0" * 8 + data()), \
        ["the data of \"a\" starts at byte 8 but the data starts at byte 0"]
    yield "trailing bytes", file(good, data() + b"junk"), \
        ["the tensors' data ends at byte 40 of the 44 data bytes", "4 bytes after it"]
    yield "offsets past the data", file(header(entries(b=(24, 48)))), \
        ["the data of \"b\" (offsets 24..48) does not fit F32 [4] within the 40 data bytes"]
    yield "byte length not dtype size times shape", file(header(entries(adt="F16"))), \
        ["the data of \"a\" (offsets 0..24) does not fit F16 [2, 3]"]
    yield "a dtype the format does not define", file(header(entries(adt="F31"))), \
        ["\"a\" has dtype \"F31\", which the safetensors format does not define"]
    yield "garbage after the JSON object", file(header(raw=json.dumps(entries()).encode() + b" x")), \
        ["the header holds bytes after its JSON object", "only space padding may follow it"]
    yield "a header that does not start with {", file(header(raw=b" " + json.dumps(entries()).encode())), \
        ["the header does not start with '{'"]
    yield "a header that is not UTF-8", \
        file(header(raw=json.dumps(entries()).encode()[:-1] + b",\"\xff\":{}}")), \
        ["the header is not valid UTF-8"]
    yield "__metadata__ not of strings", \
        file(header(dict(entries(), __metadata__={"format": "pt", "epoch": 3}))), \
        ["\"__metadata__\" is not an object of strings"]
    yield "a name twice", \
        file(header(raw=json.dumps(entries()).encode()[:-1] + b"," +
                    json.dumps({"b": entries()["b"]}).encode()[1:])), \
        ["the header names \"b\" twice"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sflow-st-bad-") as tmp:
        exe = os.path.join(tmp, "load")
        subprocess.run([a.sflowc, os.path.join(HERE, "safetensors_load.sflow"), "-o", exe], check=True)
        for k, (name, blob, want) in enumerate(cases()):
            path = os.path.join(tmp, "case%d.safetensors" % k)
            if name == "header length over the format's limit":
                # A sparse file: the length field says 100,000,001 and the
                # file is that long, but the header is never read.
                with open(path, "wb") as f:
                    f.write(struct.pack("<Q", 100000001) + b"{")
                    f.truncate(8 + 100000001 + 40)
                want = ["the header length 100000001 is over the format's limit of 100000000 bytes"]
            else:
                with open(path, "wb") as f:
                    f.write(blob)
            args = [exe, "--path", path, "--quiet"]
            if want == "strict":
                args += ["--strict=false"]
            p = subprocess.run(args, capture_output=True, encoding="utf-8", errors="replace", timeout=60)
            if want is None or want == "strict":
                check(p.returncode == 0 and p.stdout == GOOD_OUT,
                      "%s: loads its values: %d %r %r" % (name, p.returncode, p.stdout, p.stderr[-300:]))
                continue
            msg = p.stderr
            named = "nn.load: %s" % path in msg
            check(p.returncode != 0 and p.stdout == "" and named and all(w in msg for w in want),
                  "%s: refused, naming the file and why: %d %r" % (name, p.returncode, msg[-400:]))
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
