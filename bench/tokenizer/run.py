#!/usr/bin/env python3
"""run.py — `make bench-tokenizer`: std.tokenizer beside the Python
`tokenizers` package on the same corpus, at 1 and 2 threads, in one run.

    python3 bench/tokenizer/run.py [--build build] [--rounds 3]

Sets up the peers first (bench/tokenizer/setup.sh: tokenizers, the
all-MiniLM-L6-v2 tokenizer.json, 13.7 MB of Debian fortunes; network once),
then runs bench/tokenizer/tokenize.sflow and peer.py bench in turn, ROUNDS
times each at 1 thread and at 2 (sflow --threads N; tokenizers with
RAYON_NUM_THREADS=N, TOKENIZERS_PARALLELISM true at 2), alternating the
sides so a change in the machine's load falls on both, and prints one
table of the best round: seconds, MB per second and the speed-up for
loading the tokenizer.json, encode() one line at a time and encode_batch()
in batches of 256 (both truncated and padded to 128), with the load
average before and after.  The two sides must count the same number of
tokens, or the run fails.
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
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    peers = os.path.join(args.build, "peers", "tokenizer")
    subprocess.run(["bash", os.path.join(ROOT, "bench/tokenizer/setup.sh"), peers], check=True)
    tj, corpus = os.path.join(peers, "tokenizer.json"), os.path.join(peers, "corpus.txt")
    load0 = os.getloadavg()[0]
    best = {}  # (side, threads) -> {case: best result}
    version = "?"

    def keep(key, res):
        b = best.setdefault(key, {})
        for case, r in res.items():
            if case not in b or r[0] < b[case][0]:
                b[case] = r

    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "tokenize")
        subprocess.run([os.path.join(args.build, "bin", "sflowc"),
                        os.path.join(ROOT, "bench/tokenizer/tokenize.sflow"), "-o", exe], check=True)
        for _ in range(args.rounds):
            for threads in (1, 2):
                keep(("sflow", threads), results(subprocess.run(
                    [exe, "--tokenizer_json", tj, "--corpus", corpus, "--threads", str(threads)],
                    capture_output=True, text=True, check=True).stdout))
                env = dict(os.environ, RAYON_NUM_THREADS=str(threads),
                           TOKENIZERS_PARALLELISM="true" if threads > 1 else "false")
                peer = subprocess.run([os.path.join(peers, "venv", "bin", "python"),
                                       os.path.join(ROOT, "bench/tokenizer/peer.py"), "bench",
                                       "--tokenizer", tj, "--corpus", corpus],
                                      capture_output=True, text=True, check=True, env=env)
                keep(("tokenizers", threads), results(peer.stdout))
                version = next((l.split()[2] for l in peer.stdout.splitlines()
                                if l.startswith("VERSION")), version)
    sf1 = best[("sflow", 1)]
    lines, nbytes = sf1["encode"][1], sf1["encode"][2]
    print(f"bench-tokenizer: {lines} lines, {nbytes / 1e6:.1f} MB of Debian fortunes "
          f"(en, de, es, cs, ru, zh), all-MiniLM-L6-v2 tokenizer.json, best of {args.rounds} "
          f"alternating rounds, load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'case':<28} {'threads':>7} {'sflow s':>9} {'tokenizers ' + version + ' s':>19} "
          f"{'sflow MB/s':>11} {'tokenizers MB/s':>16} {'speed-up':>9}")
    ok = True
    for case, label in (("load", "load tokenizer.json"), ("encode", "encode, one line at a time"),
                        ("encode_batch", "encode_batch, 256 per batch")):
        for threads in (1, 2):
            a, b = best[("sflow", threads)][case], best[("tokenizers", threads)][case]
            if case != "load" and a[3] != b[3]:
                print(f"bench-tokenizer: {case}: sflow counted {a[3]} tokens, tokenizers {b[3]}")
                ok = False
            mb = lambda r: f"{r[2] / 1e6 / r[0]:.1f}" if r[2] else "-"
            print(f"{label:<28} {threads:>7} {a[0]:>9.3f} {b[0]:>19.3f} {mb(a):>11} {mb(b):>16} "
                  f"{b[0] / a[0]:>8.1f}x")
    for threads in (1, 2):
        e, bt = best[("sflow", threads)]["encode"][0], best[("sflow", threads)]["encode_batch"][0]
        print(f"sflow at {threads} thread{'s' if threads > 1 else ''}: encode_batch takes "
              f"{bt / e:.2f}x the time of the encode loop")
    print(f"tokens (sum of attention masks): sflow {sf1['encode'][3]}, "
          f"tokenizers {best[('tokenizers', 1)]['encode'][3]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
