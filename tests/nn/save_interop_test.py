#!/usr/bin/env python3
"""Files nn.save writes are read by Python as the safetensors format says.

Compiles and runs tests/run/nn/safetensors_hf.sflow's model through a small
program that loads the Hugging Face fixture (written by the safetensors
package: F32, F16, BF16) and saves it again, then reads sflow's file with
check_safetensors.read (Python alone, holding the file to the format:
header length, JSON header, 8-byte alignment, offsets that tile the data)
and checks every name, shape and value against the fixture's expected
contents, exactly (values converted to f32 are stored as F32).

Usage: save_interop_test.py --sflowc PATH
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_safetensors  # noqa: E402

PROGRAM = open(os.path.join(HERE, "..", "run", "nn", "safetensors_hf.sflow")).read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    want = json.load(open(os.path.join(HERE, "fixtures", "safetensors.json")))["cases"][0]["expect"]
    with tempfile.TemporaryDirectory(prefix="sflow-st-") as tmp:
        out = os.path.join(tmp, "saved.safetensors")
        src = PROGRAM.split("workflow main()")[0] + '''workflow main() {
  let m = blank()
  nn.load(m, "%s")
  nn.save(m, "%s")
}
''' % (os.path.join(HERE, "fixtures", "hf_small.safetensors"), out)
        path = os.path.join(tmp, "save.sflow")
        open(path, "w").write(src)
        exe = os.path.join(tmp, "save")
        subprocess.run([a.sflowc, path, "-o", exe], check=True)
        subprocess.run([exe, "--quiet"], check=True)
        got = check_safetensors.read(out)
    tensors = got["tensors"] if isinstance(got, dict) and "tensors" in got else got
    failures = []
    for name, w in want["tensors"].items():
        g = tensors.get(name)
        if g is None:
            failures.append("%s: missing from sflow's file" % name)
            continue
        gt = g["tensor"] if "tensor" in g else g
        if gt["shape"] != w["tensor"]["shape"]:
            failures.append("%s: shape %s, want %s" % (name, gt["shape"], w["tensor"]["shape"]))
        elif [float(x) for x in gt["data"]] != [float(x) for x in w["tensor"]["data"]]:
            failures.append("%s: values differ: %s vs %s" % (name, gt["data"][:4], w["tensor"]["data"][:4]))
    extra = set(tensors) - set(want["tensors"])
    if extra:
        failures.append("extra names: %s" % sorted(extra))
    for f in failures:
        print("FAIL " + f)
    print("%d tensors checked, %d failures" % (len(want["tensors"]), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
