#!/usr/bin/env python3
"""Writes examples/data/digits.csv: scikit-learn's copy of the UCI optical
recognition of handwritten digits test set (1797 8x8 images, pixels
0..16, and their digit), for examples/digits.sflow.

The data comes from the scikit-learn wheel on PyPI (downloaded with pip,
not installed: sklearn/datasets/data/digits.csv.gz inside it), written
with a header row (p0..p63, label) so std.data reads named columns.  The
output is committed; rerun this only to regenerate it:

    python3 scripts/export_digits.py [--wheel PATH]
"""
import argparse
import csv
import glob
import gzip
import io
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "examples", "data", "digits.csv")
VERSION = "1.5.2"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", help="a scikit-learn wheel already downloaded")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = a.wheel
        if not wheel:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "-q", "-d", tmp, "scikit-learn==" + VERSION], check=True)
            wheel = glob.glob(os.path.join(tmp, "scikit_learn-*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            raw = gzip.decompress(z.read("sklearn/datasets/data/digits.csv.gz")).decode()
    rows = list(csv.reader(io.StringIO(raw)))
    if len(rows) != 1797 or any(len(r) != 65 for r in rows):
        sys.exit("export_digits: unexpected shape in the wheel's digits.csv.gz")
    with open(OUT, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["p%d" % i for i in range(64)] + ["label"])
        w.writerows(rows)
    print("export_digits: %s: %d rows" % (OUT, len(rows)))


if __name__ == "__main__":
    main()
