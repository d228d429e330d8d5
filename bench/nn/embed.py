#!/usr/bin/env python3
"""embed.py — sentence-embedding throughput of examples/embed.sflow beside
PyTorch (transformers' BertModel) on the same sentences, threads and
batches, in one run:

    python3 bench/nn/embed.py [--build build] [--python PY] [--threads 1,2]
                              [--sentences 512] [--batch 32] [--repeat 2]

The sentences are the first --sentences fortune cookies of 40 to 400 bytes
from Debian's fortunes package (/usr/share/games/fortunes: computers,
science, literature, ...), one per line, whitespace-joined.  Both sides do
the same work: sort by length, batches of --batch padded to their longest,
at most 256 tokens, all-MiniLM-L6-v2 (build/models, scripts/install-
models.sh), mean pooling, L2 normalisation, no gradients.  The torch side
(this file run as `--peer` under --python: transformers, torch, numpy;
bench/train/setup.sh's build/peers/torch has them) runs with
torch.set_num_threads(T) and OMP/MKL_NUM_THREADS=T; its clock starts after
the model is loaded.  The sflow side is the compiled example run with
--threads T --shards S (S = T: one task per core, each loading the model;
its clock includes that load), so the comparison is conservative for
sflow.  Prints each side's RESULT line, the fastest of --repeat processes,
one table of sentences/s and sflow's speed as a multiple of torch's, the CPU
seconds of each (torch: process_time over its timed loop; sflow: the whole
process, start-up and model loads included — steadier than wall time on a
loaded machine), and the smallest cosine between the two sides' vectors.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = ["computers", "science", "literature", "wisdom", "people", "songs-poems", "work", "politics",
         "linux", "humorists", "definitions", "miscellaneous"]


def sentences(fortunes, n):
    out = []
    for name in FILES:
        path = os.path.join(fortunes, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for r in f.read().split("\n%\n"):
                t = " ".join(r.split())
                if 40 <= len(t) <= 400 and t != "%":
                    out.append(t)
                    if len(out) == n:
                        return out
    return out


def peer(args):
    """The torch side, in its own process."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model, dtype=torch.float32).eval()
    with open(args.input, encoding="utf-8") as f:
        texts = [l.rstrip("\n") for l in f if l.strip()]
    emb = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    t0, c0 = time.perf_counter(), time.process_time()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    with torch.inference_mode():
        for lo in range(0, len(texts), args.batch):
            idx = order[lo:lo + args.batch]
            b = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=256,
                    return_tensors="pt")
            h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = torch.nn.functional.normalize((h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9), p=2, dim=1)
            emb[idx] = e.numpy()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.save(args.output, emb)
    print("RESULT embed sentences=%d seconds=%.3f sentences_per_s=%.1f" % (len(texts), dt, len(texts) / dt))
    print("CPU %.3f" % cpu)


def result(text):
    for line in text.splitlines():
        if line.startswith("RESULT embed"):
            kv = dict(p.split("=") for p in line.split()[2:])
            return float(kv["seconds"]), float(kv["sentences_per_s"])
    return None


def fastest(cmd, env, what, repeat):
    """(seconds, sentences/s, CPU seconds) of the fastest of repeat runs.
    CPU seconds: the peer's own process_time over its timed loop, or, for
    sflow, the whole process's user + system time (wait4; start-up and the
    model loads included), steadier than wall time on a loaded machine."""
    best = None
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out, err, code = p.stdout, p.stderr, p.returncode
        if code != 0:
            sys.exit("bench-embed: %s failed (%d):\n%s" % (what, code, err[-2000:]))
        r = result(out)
        cpu = [float(l.split()[1]) for l in out.splitlines() if l.startswith("CPU ")]
        cpu = cpu[0] if cpu else (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print("  %-18s %s  cpu %.2f s" % (what, [l for l in out.splitlines() if l.startswith("RESULT")][0], cpu),
              flush=True)
        if best is None or r[0] < best[0]:
            best = (r[0], r[1], cpu)
    return best


def min_cosine(a_path, b_path, python):
    code = ("import numpy as np,sys; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]);"
            "print(float(((a*b).sum(1)/np.linalg.norm(a,axis=1)/np.linalg.norm(b,axis=1)).min()))")
    p = subprocess.run([python, "-c", code, a_path, b_path], capture_output=True, text=True)
    return p.stdout.strip() or p.stderr.strip()[-200:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=os.path.join(ROOT, "build", "peers", "torch", "venv", "bin", "python"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sentences", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.model = args.model or os.path.join(os.environ.get("SFLOW_MODELS") or os.path.join(args.build, "models"),
                                            "all-minilm-l6-v2")
    if args.peer:
        args.threads = int(args.threads)
        return peer(args)
    if not os.path.exists(args.python):
        sys.exit("bench-embed: no peer Python at %s (bash bench/train/setup.sh makes build/peers/torch; "
                 "or pass --python)" % args.python)
    if not os.path.exists(os.path.join(args.model, "model.safetensors")):
        sys.exit("bench-embed: no model at %s (bash scripts/install-models.sh)" % args.model)
    tmp = tempfile.mkdtemp(prefix="sflow-bench-embed-")
    texts = sentences(args.fortunes, args.sentences)
    inp = os.path.join(tmp, "sentences.txt")
    with open(inp, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts))
    exe = os.path.join(tmp, "embed")
    subprocess.run([os.path.join(args.build, "bin", "sflowc"), os.path.join(ROOT, "examples", "embed.sflow"),
                    "-o", exe], check=True)
    print("bench-embed: %d sentences from %s, batch %d, load average %s" %
          (len(texts), args.fortunes, args.batch, " ".join(open("/proc/loadavg").read().split()[:3])))
    rows = []
    for t in [int(x) for x in args.threads.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t))
        so, to = os.path.join(tmp, "sflow%d.npy" % t), os.path.join(tmp, "torch%d.npy" % t)
        s = fastest([exe, "--model", args.model, "--input", inp, "--output", so, "--batch", str(args.batch),
                     "--shards", str(t), "--threads", str(t)], env, "sflow threads=%d" % t, args.repeat)
        p = fastest([args.python, os.path.abspath(__file__), "--peer", "--model", args.model, "--input", inp,
                     "--output", to, "--batch", str(args.batch), "--threads", str(t)], env,
                    "torch threads=%d" % t, args.repeat)
        rows.append((t, s, p, min_cosine(so, to, args.python)))
    print()
    print("| threads | sflow sentences/s | torch sentences/s | sflow speed | sflow CPU s | torch CPU s | min cosine |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for t, s, p, c in rows:
        print("| %d | %.1f | %.1f | %.2fx | %.2f | %.2f | %s |" % (t, s[1], p[1], s[1] / p[1], s[2], p[2], c))


if __name__ == "__main__":
    main()
