#!/usr/bin/env python3
"""peer.py — the Python `tokenizers` side of std.tokenizer's corpus test and
benchmark (run with the interpreter of bench/tokenizer/setup.sh's venv).

    peer.py expect --tokenizer T --corpus C --out F
        writes what tokenizers gives for the corpus, in the exact lines
        tests/runtime/tokenizer_corpus.sflow prints (see cases() there):
          L i [ids]                      every line alone, no truncation
          P i [ids] [type ids]           lines i and i+1 as a pair, every 7th
                                         i, truncated longest-first to 32 and
                                         padded to 32
          B k rows cols [ids] [mask]     lines 50k..50k+49 as one batch,
                                         truncated to 48, padded to the
                                         longest (k even) or to 48 (k odd),
                                         k < 8
          D i text                       decode of line i's ids, every 13th i
    peer.py sweep --out F
        writes every code point but surrogates, LF and CR, 32 to a line, each
        as "a" c "b " and then the 32 side by side: the corpus that checks
        the normalizer's tables (runtime/data/unicode_tables.c) for every
        character, not only those the fortunes happen to use
    peer.py bench --tokenizer T --corpus C
        times tokenizers on every line, single-threaded: encode() one string
        at a time and encode_batch() in batches of 256, both truncated and
        padded to 128 (as the file's own truncation and padding say), and
        prints RESULT lines for bench/tokenizer/run.py.

Lines are the corpus split as sflow's io.read_lines splits it: at "\\n", a
"\\r" before it dropped, no empty last line after a final newline.
"""
import argparse
import os
import sys
import time


def lines_of(path):
    text = open(path, "rb").read().decode("utf-8")
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def arr(xs):
    return "[" + ", ".join(str(x) for x in xs) + "]"


def expect(args):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    lines = lines_of(args.corpus)
    out = []
    tok.no_truncation()
    tok.no_padding()
    encs = tok.encode_batch(lines)
    for i, e in enumerate(encs):
        out.append(f"L {i} {arr(e.ids)}")
    tok.enable_truncation(32)
    tok.enable_padding(length=32)
    for i in range(0, len(lines) - 1, 7):
        e = tok.encode(lines[i], lines[i + 1])
        out.append(f"P {i} {arr(e.ids)} {arr(e.type_ids)}")
    tok.enable_truncation(48)
    for k in range(8):
        chunk = lines[50 * k:50 * k + 50]
        if not chunk:
            break
        if k % 2 == 0:
            tok.enable_padding()
        else:
            tok.enable_padding(length=48)
        es = tok.encode_batch(chunk)
        cols = len(es[0].ids)
        ids = [x for e in es for x in e.ids]
        mask = [x for e in es for x in e.attention_mask]
        out.append(f"B {k} {len(es)} {cols} {arr(ids)} {arr(mask)}")
    for i in range(0, len(lines), 13):
        out.append(f"D {i} {tok.decode(encs[i].ids)}")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"peer.py: {args.out}: {len(lines)} lines, {sum(len(e.ids) for e in encs)} ids",
          file=sys.stderr)


def sweep(args):
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and c not in (10, 13)]
    out = []
    for i in range(0, len(cps), 32):
        part = [chr(c) for c in cps[i:i + 32]]
        out.append("".join("a" + c + "b " for c in part) + "".join(part))
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")


def bench(args):
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import tokenizers
    from tokenizers import Tokenizer
    t = time.perf_counter()
    tok = Tokenizer.from_file(args.tokenizer)
    print(f"RESULT load {time.perf_counter() - t:.4f} 1 0 {tok.get_vocab_size()}")
    tok.enable_truncation(128)
    tok.enable_padding(length=128)
    lines = lines_of(args.corpus)
    nbytes = sum(len(s.encode()) for s in lines)
    t = time.perf_counter()
    tokens = 0
    for s in lines:
        tokens += sum(tok.encode(s).attention_mask)
    dt = time.perf_counter() - t
    print(f"RESULT encode {dt:.4f} {len(lines)} {nbytes} {tokens}")
    t = time.perf_counter()
    tokens = 0
    for i in range(0, len(lines), 256):
        for e in tok.encode_batch(lines[i:i + 256]):
            tokens += sum(e.attention_mask)
    dt = time.perf_counter() - t
    print(f"RESULT encode_batch {dt:.4f} {len(lines)} {nbytes} {tokens}")
    print(f"VERSION tokenizers {tokenizers.__version__}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["expect", "sweep", "bench"])
    ap.add_argument("--tokenizer")
    ap.add_argument("--corpus")
    ap.add_argument("--out")
    args = ap.parse_args()
    {"expect": expect, "sweep": sweep, "bench": bench}[args.mode](args)


if __name__ == "__main__":
    main()
