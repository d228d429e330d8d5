#!/usr/bin/env python3
"""run.py — `make bench-tokenizer`: std.tokenizer beside the Python
`tokenizers` package on the same corpus, single-threaded, in one run.

    python3 bench/tokenizer/run.py [--build build]

Sets up the peers first (bench/tokenizer/setup.sh: tokenizers, the
all-MiniLM-L6-v2 tokenizer.json, 13.7 MB of Debian fortunes; network once),
then runs bench/tokenizer/tokenize.sflow and peer.py bench, each once, and
prints one table: seconds, lines per second and MB per second for loading
the tokenizer.json, encode() one line at a time and encode_batch() in
batches of 256 (both truncated and padded to 128).  tokenizers runs with
RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false.  The two sides must
count the same number of tokens, or the run fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def results(text):
    out = {}
    for line in text.splitlines():
        p = line.split()
        if p and p[0] == "RESULT":
            out[p[1]] = (float(p[2]), int(p[3]), int(p[4]), int(p[5]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    peers = os.path.join(args.build, "peers", "tokenizer")
    subprocess.run(["bash", os.path.join(ROOT, "bench/tokenizer/setup.sh"), peers], check=True)
    tj, corpus = os.path.join(peers, "tokenizer.json"), os.path.join(peers, "corpus.txt")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "tokenize")
        subprocess.run([os.path.join(args.build, "bin", "sflowc"),
                        os.path.join(ROOT, "bench/tokenizer/tokenize.sflow"), "-o", exe], check=True)
        sf = results(subprocess.run([exe, "--tokenizer_json", tj, "--corpus", corpus],
                                    capture_output=True, text=True, check=True).stdout)
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    peer = subprocess.run([os.path.join(peers, "venv", "bin", "python"),
                           os.path.join(ROOT, "bench/tokenizer/peer.py"), "bench", "--tokenizer", tj,
                           "--corpus", corpus], capture_output=True, text=True, check=True, env=env)
    hf = results(peer.stdout)
    version = next((l.split()[2] for l in peer.stdout.splitlines() if l.startswith("VERSION")), "?")
    lines, nbytes = sf["encode"][1], sf["encode"][2]
    print(f"bench-tokenizer: {lines} lines, {nbytes / 1e6:.1f} MB of Debian fortunes "
          f"(en, de, es, cs, ru, zh), all-MiniLM-L6-v2 tokenizer.json, one thread, one run")
    print(f"{'case':<28} {'sflow s':>9} {'tokenizers ' + version + ' s':>19} {'sflow MB/s':>11} "
          f"{'tokenizers MB/s':>16} {'speed-up':>9}")
    ok = True
    for case, label in (("load", "load tokenizer.json"), ("encode", "encode, one line at a time"),
                        ("encode_batch", "encode_batch, 256 per batch")):
        a, b = sf[case], hf[case]
        if case != "load" and a[3] != b[3]:
            print(f"bench-tokenizer: {case}: sflow counted {a[3]} tokens, tokenizers {b[3]}")
            ok = False
        mb = lambda r: f"{r[2] / 1e6 / r[0]:.1f}" if r[2] else "-"
        print(f"{label:<28} {a[0]:>9.3f} {b[0]:>19.3f} {mb(a):>11} {mb(b):>16} {b[0] / a[0]:>8.1f}x")
    print(f"tokens (sum of attention masks): sflow {sf['encode'][3]}, tokenizers {hf['encode'][3]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
