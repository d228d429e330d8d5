#!/usr/bin/env python3
"""Writes tests/llm/'s committed oracle files for SmolLM2-135M-Instruct
from the Python reference implementations (docs/llm.md, "Testing"):

  corpus.txt          the tokenizer corpus: Debian text files already on
                      the machine (common-licenses, fortunes) cut into
                      records, plus edge cases (Unicode letters and digits
                      of many scripts, emoji, CJK, whitespace runs, special
                      tokens in the text, contractions); records are
                      separated by the line SEP below
  corpus_ids.txt.gz   per record "index id id ...", from the `tokenizers`
                      package with the model's tokenizer
  tokenizer.json.gz   that tokenizer as tokenizers serializes it: the
                      GGUF's vocabulary and merges with SmolLM2's
                      pre-tokenizer (Digits(individual_digits) then
                      ByteLevel(add_prefix_space=false)), ByteLevel
                      decoder, the 17 control tokens as special added
                      tokens — the file std.tokenizer.bpe_load reads
  chat.json           conversations and apply_chat_template's rendering
                      (the GGUF's tokenizer.chat_template through Jinja2
                      with transformers' settings), add_generation_prompt
                      true and false, and the rendering's ids
  dequant.json, dequant_*.npy
                      sample rows of tensors of each type in the file,
                      dequantized by the gguf package's reader

  logits.json         (--logits) for the next step, the decoder: Hugging
                      Face transformers loading the same GGUF
                      (from_pretrained(dir, gguf_file=...), dequantized to
                      f32) on a few ChatML prompts: per position the top-20
                      logits and their ids, 12 greedy tokens and up to 32
                      (to the EOS, generate's default stop); and "chat":
                      "What is the capital of France?" through the file's
                      chat template (apply_chat_template,
                      add_generation_prompt=True), its greedy answer
                      (64 tokens at most, special tokens skipped).
                      --logits-only writes this file alone, the others
                      untouched.  transformers 4.57.3 takes tokenizers
                      <= 0.23.0, so the SFLOW_LLMREF_LOGITS=1 venv holds
                      tokenizers 0.22.2 and serves --logits-only alone:
                      the BPE oracle is made with 0.23.3 (the venv without
                      SFLOW_LLMREF_LOGITS), and the script refuses another.

Needs a venv with gguf, tokenizers, jinja2 and numpy
(scripts/install-benchdeps.sh --llm makes build/llmref; --logits also
torch, transformers and accelerate) and the model of
scripts/install-models.sh.

    build/llmref/bin/python scripts/gen_llm_reference.py [--model PATH] [--logits | --logits-only]
"""
import argparse
import glob
import gzip
import json
import os
import random

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "llm")
SEP = "\n=====sflow-record=====\n"
BPE_TOKENIZERS = "0.23.3"  # the ids of corpus_ids.txt.gz (install-benchdeps.sh --llm's pin)
MODEL = os.path.join(ROOT, "build", "models", "smollm2-135m-instruct",
                     "SmolLM2-135M-Instruct.Q4_1.gguf")

EDGE = [
    "", " ", "  ", "\n", "\n\n\n", "\t\t x", "a  b   c    d", "trailing spaces   ",
    "   leading", "line\r\nbreaks\rand\ttabs", "x\u00a0y\u2003z\u3000w",
    "I'm you're we've they'll she'd it's DON'T I'M 'tis '", "o'clock rock'n'roll",
    "1234567890 12,345.67 3.14159 1e-10 0x1F 007", "\u0661\u0662\u0663 \u0967\u0968 \u2460\u2461 \u00bd \u2167",
    "Hello, World! How's it going?", "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "e\u0301 n\u0303 (combining marks)", "\u0391\u03b8\u03ae\u03bd\u03b1 \u041c\u043e\u0441\u043a\u0432\u0430 \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff0c\u4f60\u597d\uff01 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0939\u093f\u0928\u094d\u0926\u0940 \u0ba4\u0bae\u0bbf\u0bb4\u0bcd",
    "emoji \U0001f600\U0001f680\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "math \u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2192 \u221a(x\u00b2) = |x|",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more<|im_end|><|im_start|>", "<|im_start|><|im_start|>",
    "<|im_start |> not special, < |im_end|> neither", "<file_sep><filename>a.py<jupyter_code>",
    "def f(x):\n    return x ** 2  # comment\n\n\nclass A:\n\tpass\n",
    "https://example.com/path?q=1&r=two#frag user@mail.org",
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& ((())) [[[]]] {{{}}}",
    "\u00ff\u0100\u0178\u2028\u2029\ufeff\ufffd", "\x7f\x01\x02 control",
    "ALLCAPS lowercase MixedCase camelCase snake_case kebab-case",
    "a" * 300, "ab " * 100, "\u00e9" * 50, "1" * 40, " " * 40 + "x",
]


def corpus():
    recs = list(EDGE)
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    for path in files:
        if os.path.isfile(path) and os.path.getsize(path) < 20000:
            recs.append(open(path, encoding="utf-8", errors="replace").read())
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(path) or not os.path.isfile(path):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        recs += [t.strip("\n") for t in text.split("\n%\n")[:12]]
    rnd = random.Random(29)
    # Random strings over a mix of scripts, digits, spaces and punctuation.
    pool = ("abcXYZ \t\n0123456789.,;:!?'\"-_()[]{}<>|/\\@#$%^&*+=~`"
            "\u00e9\u00df\u00f8\u0153\u03b1\u03b2\u0436\u044f\u05d0\u0628\u0905\u0e01"
            "\u4e00\u4e8c\u3042\u30a2\uac00\u2603\u20ac\u00a3\U0001f600\U0001f44d\u0301\u200d")
    for _ in range(200):
        recs.append("".join(rnd.choice(pool) for _ in range(rnd.randint(1, 120))))
    assert not any(SEP in r for r in recs)
    return recs


def gguf_tokenizer(reader):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    f = reader.fields

    def strs(key):
        fld = f[key]
        return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]

    tokens = strs("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strs("tokenizer.ggml.merges")]
    tt = f["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                               continuing_subword_prefix="", end_of_word_suffix=""))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] == 3])
    return tok


def chat(reader, tok):
    import jinja2
    fld = reader.fields["tokenizer.chat_template"]
    template = bytes(fld.parts[fld.data[0]]).decode("utf-8")
    # transformers' _compile_jinja_template: trim_blocks, lstrip_blocks,
    # an ImmutableSandboxedEnvironment.
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    t = env.from_string(template)
    convs = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "Write a haiku.\nAbout rain."},
         {"role": "assistant", "content": "Soft rain on the roof"},
         {"role": "user", "content": "Another, with \u00e9mojis \U0001f327"}],
        [{"role": "user", "content": ""}],
        [{"role": "tool", "content": "{\"x\": 1}"}],
    ]
    out = []
    for c in convs:
        for gen in (True, False):
            text = t.render(messages=c, add_generation_prompt=gen)
            out.append({"messages": c, "add_generation_prompt": gen, "text": text,
                        "ids": tok.encode(text).ids})
    return template, out


def dequant(reader):
    picks = {"token_embd.weight": [0, 1, 2, 100, 12345, 49151],
             "blk.0.attn_q.weight": [0, 1, 300, 575],
             "blk.0.ffn_down.weight": [0, 575],
             "blk.29.ffn_gate.weight": [0, 1535],
             "blk.0.attn_norm.weight": [0],
             "output_norm.weight": [0]}
    meta = {}
    for t in reader.tensors:
        if t.name not in picks:
            continue
        full = dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))
        rows = picks[t.name]
        arr = np.ascontiguousarray(full[rows].astype(np.float32))
        fname = "dequant_%s.npy" % t.name.replace(".", "_")
        np.save(os.path.join(OUT, fname), arr)
        meta[t.name] = {"type": t.tensor_type.name, "rows": rows, "cols": int(t.shape[0]),
                        "file": fname}
    return meta


def logits(model, tok):
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model),
                                             torch_dtype=torch.float32)
    m.eval()
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    prompts = ["The capital of France is",
               "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
               "<|im_start|>assistant\n" % system,
               "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\nWrite a haiku about rain."
               "<|im_end|>\n<|im_start|>assistant\n" % system]
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = tok.encode(p).ids
            lg = m(torch.tensor([ids])).logits[0]
            top = torch.topk(lg, 20, dim=-1)
            gen = m.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0][len(ids):]
            gen32 = m.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)[0][len(ids):]
            out.append({"text": p, "ids": ids, "top_ids": top.indices.tolist(),
                        "top_logits": [[round(float(v), 5) for v in row] for row in top.values],
                        "greedy": gen.tolist(), "greedy32": gen32.tolist()})
        # examples/chat.sflow's question through the file's own chat template
        from transformers import AutoTokenizer
        ht = AutoTokenizer.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model))
        q = "What is the capital of France?"
        text = ht.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                      tokenize=False)
        ids = tok.encode(text).ids
        gen = m.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False)[0][len(ids):]
        chat = {"question": q, "text": text, "ids": ids, "tokens": gen.tolist(),
                "answer": ht.decode(gen, skip_special_tokens=True),
                "eos": m.generation_config.eos_token_id}
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__, "prompts": out,
            "chat": chat}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--logits", action="store_true", help="also logits.json (torch, transformers)")
    ap.add_argument("--logits-only", action="store_true", help="logits.json alone")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    reader = GGUFReader(args.model)
    tok = gguf_tokenizer(reader)
    if args.logits_only:
        with open(os.path.join(OUT, "logits.json"), "w") as f:
            json.dump(logits(args.model, tok), f)
        return
    import tokenizers
    if tokenizers.__version__ != BPE_TOKENIZERS:
        raise SystemExit("gen_llm_reference: the BPE oracle is tokenizers %s's, this venv has %s "
                         "(the SFLOW_LLMREF_LOGITS=1 venv serves --logits-only alone)"
                         % (BPE_TOKENIZERS, tokenizers.__version__))
    recs = corpus()
    with open(os.path.join(OUT, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(SEP.join(recs))
    lines = []
    for i, r in enumerate(recs):
        lines.append(" ".join([str(i)] + [str(x) for x in tok.encode(r).ids]))
    with gzip.GzipFile(os.path.join(OUT, "corpus_ids.txt.gz"), "wb", mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode())
    with gzip.GzipFile(os.path.join(OUT, "tokenizer.json.gz"), "wb", mtime=0) as f:
        f.write(tok.to_str().encode())
    template, convs = chat(reader, tok)
    with open(os.path.join(OUT, "chat.json"), "w", encoding="utf-8") as f:
        json.dump({"template": template, "cases": convs}, f, ensure_ascii=False, indent=1)
    with open(os.path.join(OUT, "dequant.json"), "w") as f:
        json.dump(dequant(reader), f, indent=1)
    if args.logits:
        with open(os.path.join(OUT, "logits.json"), "w") as f:
            json.dump(logits(args.model, tok), f)
    size = sum(len(r.encode()) for r in recs)
    print("gen_llm_reference: %d records, %d bytes, %d tokens" %
          (len(recs), size, sum(len(l.split()) - 1 for l in lines)))


if __name__ == "__main__":
    main()
