#!/usr/bin/env python3
"""The transformers + PEFT reference for tests/examples/lm_finetune_test.py:
the per-step losses of examples/lm_finetune.sflow's two small recipes
(LoRA, and a full fine-tune) computed by an independent implementation on
the same weights, rows, order and recipe.

Writes tests/examples/lm_finetune/reference.json (committed; the test needs
neither torch nor PEFT):
  recipes   {"lora": flags, "full": flags}: lm_finetune_test.RECIPES (the
            test refuses a reference made for other flags)
  lora, full  each optimizer step's loss as transformers computed it
  rows_lora, rows_full  the SHA-256 of the packed rows' token ids, as JSON
            (this script refuses to write when lm_finetune --rows-out
            packed other rows than its own)
  torch, transformers, peft  the versions that made it

How, per recipe: the model is transformers' LlamaForCausalLM loaded from
the GGUF file (gguf_file=, dequantized to f32 by the gguf package, as
std.llm dequantizes it), eager attention, f32.  The documents are the
entries of the recipe's fortune file (bench/train/fortunes_split.entries,
finetune.sflow's reader), tokenized by the GGUF's tokenizer without special
tokens until the rows are filled (the separator and padding the GGUF's
tokenizer.ggml.eos_token_id and padding_token_id, as the example reads
them), packed as std.lm.pack packs them (an EOS
after every document, cut every seq_len tokens, the last row padded, its
labels -100).  The order is std.data's batches (fortunes_split.batches, the
same SplitMix64 shuffle).  For LoRA, lm_finetune --init-out writes its
initial adapters as PEFT files and PeftModel.from_pretrained reads them, so
both sides start from the same A (and B = 0).  Each micro-batch's loss is
the mean next-token cross-entropy over its targets; its backward is scaled
by its rows' share of the accumulation window (std.train's rule); then
clip_grad_norm_(1.0) and torch.optim.AdamW(lr, weight_decay=0.01) at a
constant rate.

This script also runs sflow on the same recipes and prints the largest
difference it saw; a reference that already disagrees by over 1e-4 is not
written unless --force.

Run in a venv with torch, transformers, peft and gguf
(scripts/install-benchdeps.sh --llm with SFLOW_LLMREF_LOGITS=1):
  build/llmref/bin/python scripts/gen_lm_reference.py --sflowc build/bin/sflowc
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
import fortunes_split  # noqa: E402
from lm_finetune_test import GGUF, RECIPES, flag, step_losses  # noqa: E402


def gguf_int(key):
    """An integer of the GGUF's metadata, or None."""
    from gguf import GGUFReader
    f = GGUFReader(GGUF).fields.get(key)
    return None if f is None else int(f.parts[f.data[0]][0])


def rows_of(tok, text, need, seq_len, eos, pad):
    """std.lm.pack over the documents of text, tokenized until need rows fill."""
    ids, n = [], 0
    for d in fortunes_split.entries(text):
        if n >= need * seq_len:
            break
        t = tok(d, add_special_tokens=False)["input_ids"]
        ids += t + [eos]
        n += len(t) + 1
    rows, labels = [], []
    for i in range(0, len(ids), seq_len):
        r = ids[i:i + seq_len]
        k = len(r)
        rows.append(r + [pad] * (seq_len - k))
        labels.append(r + [-100] * (seq_len - k))
    return rows, labels


def train(flags, model_dir, init_dir):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.manual_seed(0)
    torch.set_num_threads(2)
    name = os.path.basename(GGUF)
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=name, torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    steps, seq_len = int(flag(flags, "--steps")), int(flag(flags, "--seq-len"))
    batch, accum = int(flag(flags, "--batch")), int(flag(flags, "--accum"))
    lr, rank = float(flag(flags, "--lr")), int(flag(flags, "--lora-rank"))
    seed = int(flag(flags, "--seed"))
    with open(flag(flags, "--data"), encoding="utf-8") as f:
        text = f.read()
    # The GGUF's own ids, as std.lm's example reads them (transformers'
    # tokenizer from this file reports another eos_token_id).
    eos = gguf_int("tokenizer.ggml.eos_token_id")
    pad = gguf_int("tokenizer.ggml.padding_token_id")
    pad = eos if pad is None else pad
    rows, labels = rows_of(tok, text, steps * batch * accum, seq_len, eos, pad)
    if rank > 0:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, init_dir, is_trainable=True)
    ps = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(ps, lr=lr, weight_decay=0.01)
    model.train()
    losses, epoch = [], 0
    while len(losses) < steps:
        mbs = fortunes_split.batches(len(rows), batch, seed, epoch)
        for w0 in range(0, len(mbs), accum):
            if len(losses) >= steps:
                break
            window = mbs[w0:w0 + accum]
            total = sum(len(b) for b in window)
            step_loss = 0.0
            for idx in window:
                x = torch.tensor([rows[i] for i in idx])
                y = torch.tensor([labels[i] for i in idx])
                z = model(input_ids=x).logits
                loss = F.cross_entropy(z[:, :-1].reshape(-1, z.shape[-1]), y[:, 1:].reshape(-1),
                                       ignore_index=-100)
                share = len(idx) / total
                (loss * share).backward()
                step_loss += loss.item() * share
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
            opt.step()
            opt.zero_grad()
            losses.append(step_loss)
        epoch += 1
    return losses, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build", "bin", "sflowc"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "examples", "lm_finetune", "reference.json"))
    ap.add_argument("--force", action="store_true", help="write even if sflow disagrees by over 1e-4")
    a = ap.parse_args()
    import peft
    import torch
    import transformers
    tmp = tempfile.mkdtemp(prefix="gen-lm-ref-")
    exe = os.path.join(tmp, "lm_finetune")
    subprocess.run([a.sflowc, os.path.join(ROOT, "examples", "lm_finetune.sflow"), "-o", exe], check=True)
    out = {"recipes": RECIPES, "torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__}
    worst = 0.0
    for kind, flags in RECIPES.items():
        init = os.path.join(tmp, "init-" + kind)
        os.makedirs(init)
        rows_txt = os.path.join(tmp, "rows-" + kind + ".txt")
        p = subprocess.run([exe, "--model", GGUF, *flags, "--init-out", init, "--rows-out", rows_txt,
                            "--timing=false"], check=True, capture_output=True, text=True, cwd=tmp)
        mine = step_losses(p.stdout)
        ref, rows = train(flags, os.path.dirname(GGUF), init)
        with open(rows_txt) as f:
            their = [[int(x) for x in line.split()] for line in f]
        if their != rows:
            sys.exit(f"gen_lm_reference: {kind}: sflow packed other rows than these ({len(their)} and "
                     f"{len(rows)} rows; the first that differs: "
                     f"{next((i for i, (a, b) in enumerate(zip(their, rows)) if a != b), min(len(their), len(rows)))})")
        sha = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
        d = max(abs(x - y) for x, y in zip(mine, ref))
        worst = max(worst, d)
        print(f"{kind}: sflow {mine}\n{kind}: torch {ref}\n{kind}: largest difference {d:.3g}")
        out[kind] = ref
        out["rows_" + kind] = sha
    if worst > 1e-4 and not a.force:
        sys.exit("gen_lm_reference: sflow and transformers disagree; not written (--force writes it)")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
