#!/usr/bin/env python3
"""bench/llm: std.llm's quantized products and std.tokenizer's BPE.

    python3 bench/llm/run.py [--build build] [--models DIR]

  - bench/llm/quant.sflow at --threads 1 and 2: y = W x at batch 1 for
    each of SmolLM2-135M's product shapes with its own Q4_1 / Q8_0
    weights (microseconds, GB/s of weights, GFLOP/s), and the decode
    tokens/s that the products alone allow;
  - bench/llm/decode.sflow at --threads 1 and 2: the decoder (llm.forward)
    at batch 1, prefill tokens/s of a 128-token prompt and decode tokens/s
    of 64 greedy steps on the KV cache, best of 3;
  - bench/llm/bpe.sflow against the Python tokenizers package (the venv
    scripts/install-benchdeps.sh --llm makes, build/llmref), both
    encoding tests/llm/corpus.txt record by record on one thread.
Timings on a shared machine are noisy: run it alone, more than once.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEP = "\n=====sflow-record=====\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default=None)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    models = args.models or os.environ.get("SFLOW_MODELS") or os.path.join(args.build, "models")
    model = os.path.join(models, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
    corpus = os.path.join(ROOT, "tests", "llm", "corpus.txt")
    sflowc = os.path.join(args.build, "bin", "sflowc")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("quant", "decode", "bpe"):
            subprocess.run([sflowc, os.path.join(ROOT, "bench", "llm", name + ".sflow"), "-o",
                            os.path.join(tmp, name)], check=True)
        for t in (1, 2):
            print("== quant_matmul, --threads %d" % t, flush=True)
            subprocess.run([os.path.join(tmp, "quant"), "--path", model, "--threads", str(t)], check=True)
        for t in (1, 2):
            print("== decoder (llm.forward), batch 1, --threads %d" % t, flush=True)
            subprocess.run([os.path.join(tmp, "decode"), "--path", model, "--threads", str(t)],
                           check=True)
        print("== BPE encode, one thread, %s" % os.path.relpath(corpus, ROOT), flush=True)
        subprocess.run([os.path.join(tmp, "bpe"), "--path", model, "--corpus", corpus, "--sep", SEP,
                        "--reps", str(args.reps), "--threads", "1"], check=True)
    py = os.path.join(ROOT, "build", "llmref", "bin", "python")
    if not os.path.exists(py):
        print("RESULT tokenizers n/a (run scripts/install-benchdeps.sh --llm)")
        return
    peer = r'''
import gzip, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_str(gzip.open(sys.argv[1]).read().decode())
recs = open(sys.argv[2], encoding="utf-8", newline="").read().split(sys.argv[3])
reps = int(sys.argv[4])
tok.encode(recs[0])
n = 0
t0 = time.perf_counter()
for _ in range(reps):
    for r in recs:
        n += len(tok.encode(r).ids)
s = time.perf_counter() - t0
b = sum(len(r.encode()) for r in recs) * reps
print("RESULT tokenizers %.2f MB/s %.3f Mtokens/s" % (b / s / 1e6, n / s / 1e6))
'''
    subprocess.run([py, "-c", peer, os.path.join(ROOT, "tests", "llm", "tokenizer.json.gz"), corpus,
                    SEP, str(args.reps)], check=True, env=dict(os.environ, RAYON_NUM_THREADS="1",
                                                               TOKENIZERS_PARALLELISM="false"))


if __name__ == "__main__":
    main()
