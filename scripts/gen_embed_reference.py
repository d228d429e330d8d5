#!/usr/bin/env python3
"""Reference sentence embeddings for tests/examples/embed_test.py, from PyTorch.

Writes, into tests/examples/embed/ (committed; the test needs no PyTorch):
  sentences.txt  the input: fortune cookies from Debian's `fortunes` package
                 (/usr/share/games/fortunes), each record's lines joined by
                 one space, a few from each of several files, and one long
                 record that the 256-token limit truncates;
  reference.npy  float32 [n, 384]: all-MiniLM-L6-v2's sentence embeddings,
                 as sentence-transformers computes them (BertModel's last
                 hidden state, mean over the attention mask with the count
                 clamped to 1e-9, F.normalize p=2 dim=1), max length 256;
  ids.npy        int32 [n, 256]: the token ids of each sentence from the
                 model's tokenizer.json (tokenizers), padded with [PAD] = 0,
                 so the test also checks std.tokenizer's ids.

sentence-transformers itself is not installed in the peer environment; this
script does exactly what its Transformer + Pooling(mean) + Normalize modules
do for this model (modules.json, 1_Pooling/config.json: mean pooling only).

Run with the PyTorch peer (transformers, tokenizers, torch, numpy):
  build/peers/torch/venv/bin/python scripts/gen_embed_reference.py \\
      --model build/models/all-minilm-l6-v2
With --keep-sentences it reuses the committed sentences.txt instead of
picking them again (to regenerate the vectors alone).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "examples", "embed")
FILES = ["computers", "science", "literature", "wisdom", "people", "songs-poems", "work", "politics"]
PER_FILE = 6
MAX_LEN = 256


def records(path):
    """A fortune file's records (text between '%' lines), whitespace-joined."""
    with open(path, encoding="utf-8", errors="strict") as f:
        text = f.read()
    out = []
    for r in text.split("\n%\n"):
        t = " ".join(r.split())
        if t and t != "%":
            out.append(t)
    return out


def pick(fortunes, tok):
    chosen = []
    longest = None
    for name in FILES:
        rs = records(os.path.join(fortunes, name))
        # Evenly spaced records of 40 to 400 bytes, deterministic.
        mid = [r for r in rs if 40 <= len(r) <= 400]
        step = max(1, len(mid) // PER_FILE)
        chosen += mid[::step][:PER_FILE]
        for r in rs:
            n = len(tok(r)["input_ids"])
            if n > MAX_LEN + 40 and (longest is None or len(r) < len(longest)):
                longest = r
    if longest is None:
        sys.exit("gen_embed_reference: no record over %d tokens in %s" % (MAX_LEN, FILES))
    return chosen + [longest]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "models", "all-minilm-l6-v2"))
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--keep-sentences", action="store_true")
    args = ap.parse_args()

    import numpy as np
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "sentences.txt")
    if args.keep_sentences:
        with open(path, encoding="utf-8") as f:
            sentences = [l.rstrip("\n") for l in f if l.strip()]
    else:
        sentences = pick(args.fortunes, tok)
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in sentences))

    model = AutoModel.from_pretrained(args.model, dtype=torch.float32).eval()
    b = tok(sentences, padding="max_length", truncation=True, max_length=MAX_LEN, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                  token_type_ids=b["token_type_ids"]).last_hidden_state
    m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
    pooled = (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
    emb = torch.nn.functional.normalize(pooled, p=2, dim=1)

    np.save(os.path.join(OUT, "reference.npy"), emb.numpy().astype(np.float32))
    np.save(os.path.join(OUT, "ids.npy"), b["input_ids"].numpy().astype(np.int32))
    lens = b["attention_mask"].sum(1).tolist()
    print("gen_embed_reference: %d sentences (tokens %d..%d, %d truncated to %d), "
          "torch %s, transformers %s -> %s" % (len(sentences), min(lens), max(lens),
                                               sum(1 for n in lens if n == MAX_LEN), MAX_LEN,
                                               torch.__version__, transformers.__version__, OUT))


if __name__ == "__main__":
    main()
