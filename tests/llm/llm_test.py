#!/usr/bin/env python3
"""llm_test.py — std.llm and std.tokenizer's BPE on SmolLM2-135M-Instruct
against the committed oracle files of scripts/gen_llm_reference.py.

    llm_test.py --sflowc SFLOWC --case CASE [--models DIR]

Cases:
  bpe_gguf   the ids of every record of tests/llm/corpus.txt, from the
             tokenizer read out of the GGUF's metadata, equal those of the
             Python `tokenizers` package (corpus_ids.txt.gz); every record
             decodes back to itself
  bpe_json   the same from tokenizer.json (tokenizer.json.gz, as tokenizers
             serializes the model's tokenizer)
  chat       tokenizer.chat_ml renders each conversation of chat.json as
             the model's Jinja template does, and its ids are tokenizers'
  gguf       the file's hyperparameters and tensor census, sample rows of
             tensors of each type dequantized bitwise as the gguf package's
             reader dequantizes them, quant_matmul against the f32 product
             and bitwise the same at --threads 1 and 2
  gpu_emu    quant_matmul in a @gpus(1) actor under the host emulator:
             kernels/quant.cu on SmolLM2's weights within 1e-5 of the CPU
             product, each weight uploaded once
  decoder    llm.forward (runtime/nn/llama.c) against transformers (logits.json):
             the logits of every prompt position within 1e-3 of transformers'
             relative to the position's largest (the top-20 entries), a
             decode step on the cache equal to the prefill's last row, the
             greedy tokens identical (12, and 32 or to the EOS), at --threads 1
             and bitwise the same at 2
  chat_answer  examples/chat.sflow's answer to logits.json's chat question,
             as transformers' greedy generate gives it (when the oracle has it),
             and its --logits-out array against the prefill's
  paged      the paged KV cache bitwise the contiguous one (prefill, decode,
             truncate, forward_batch), blocks in use at each point and back
             to 0, a full pool or a bound below the blocks in use named
  safetensors  a Hugging Face folder made from the GGUF by
             scripts/gguf_to_hf.sflow (F32 and F16) opened by llm.llama_open:
             logits and greedy tokens against the GGUF's, tokenizer.json's
             ids; bad folders (config keys, architecture, a missing tensor, a
             wrong shape, a dtype) named
  bad        bad input: a truncated GGUF, a foreign file, a tensor of an
             unknown quantization, a missing key, a tokenizer.json that is
             not BPE, an id outside the vocabulary: each a runtime error
             naming the file and the field, exit 70 (a runtime error), no crash
Needs the model of scripts/install-models.sh (in $SFLOW_MODELS or
<build>/models) and numpy (build/pydeps).
"""
import argparse
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEP = "\n=====sflow-record=====\n"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
        if detail:
            print("  " + detail[:2000])


def build(sflowc, name, tmp):
    exe = os.path.join(tmp, name)
    subprocess.run([sflowc, os.path.join(HERE, name + ".sflow"), "-o", exe], check=True)
    return exe


def parse_ids(line):
    return line.replace("[", " ").replace("]", " ").replace(",", " ").split()


def case_bpe(exe_dir, sflowc, model, source):
    exe = build(sflowc, "bpe_corpus", exe_dir)
    path = model
    if source == "json":
        path = os.path.join(exe_dir, "tokenizer.json")
        with gzip.open(os.path.join(HERE, "tokenizer.json.gz")) as f, open(path, "wb") as o:
            shutil.copyfileobj(f, o)
    p = subprocess.run([exe, "--source", source, "--path", path, "--corpus",
                        os.path.join(HERE, "corpus.txt"), "--sep", SEP],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "bpe_corpus runs (%s)" % source, p.stderr)
    got = p.stdout.split("\n")
    want = gzip.open(os.path.join(HERE, "corpus_ids.txt.gz")).read().decode().strip("\n").split("\n")
    records = open(os.path.join(HERE, "corpus.txt"), encoding="utf-8", newline="").read().split(SEP)
    bad, tokens = [], 0
    for g, w in zip(got, want):
        tokens += len(w.split()) - 1
        if parse_ids(g) != w.split():
            bad.append((w, g))
    detail = ""
    if bad:
        i = int(bad[0][0].split()[0])
        detail = "record %d %r\n  tokenizers: %s\n  sflow:      %s" % (
            i, records[i][:200], bad[0][0][:300], bad[0][1][:300])
    check(not bad and len(got) >= len(want),
          "%s: %d records, %d tokens, ids identical to tokenizers' (%d differ)" %
          (source, len(want), tokens, len(bad)), detail)
    last = [l for l in got if l.startswith("decoded")]
    check(last == ["decoded %d of %d" % (len(want), len(want))],
          "%s: every record decodes back to itself (%s)" % (source, last))


def case_chat(exe_dir, sflowc, model):
    exe = build(sflowc, "chat", exe_dir)
    ref = json.load(open(os.path.join(HERE, "chat.json"), encoding="utf-8"))
    us, rs, gs = "\x1f", "\x1e", "\x1d"
    text = gs.join(rs.join(["1" if c["add_generation_prompt"] else "0"] +
                           [m["role"] + us + m["content"] for m in c["messages"]])
                   for c in ref["cases"])
    cases = os.path.join(exe_dir, "cases.txt")
    with open(cases, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    out = os.path.join(exe_dir, "rendered")
    os.makedirs(out)
    p = subprocess.run([exe, "--cases", cases, "--gguf", model, "--out", out, "--us", us,
                        "--rs", rs, "--gs", gs], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "chat runs", p.stderr)
    ids = {}
    for line in p.stdout.split("\n"):
        if line and line[0].isdigit():
            k, rest = line.split(" ", 1)
            ids[int(k)] = parse_ids(rest)
    for i, c in enumerate(ref["cases"]):
        got = open(os.path.join(out, "%d.txt" % i), encoding="utf-8", newline="").read()
        check(got == c["text"], "chat %d (%d messages, generation prompt %s): the template's text"
              % (i, len(c["messages"]), c["add_generation_prompt"]),
              "want %r\n  got  %r" % (c["text"], got))
        check(ids.get(i) == [str(x) for x in c["ids"]], "chat %d: tokenizers' ids" % i,
              "want %s\n  got  %s" % (c["ids"], ids.get(i)))


def case_gguf(exe_dir, sflowc, model):
    sys.path.insert(0, os.path.dirname(HERE))
    import pydeps
    pydeps.ensure("llm_test", "numpy")
    import numpy as np
    exe = build(sflowc, "gguf_read", exe_dir)
    meta = json.load(open(os.path.join(HERE, "dequant.json")))
    rows = os.path.join(exe_dir, "rows.txt")
    with open(rows, "w") as f:
        for name, m in meta.items():
            f.write(name + " " + " ".join(str(r) for r in m["rows"]) + "\n")
    out = os.path.join(exe_dir, "rows")
    os.makedirs(out)
    p = subprocess.run([exe, "--path", model, "--rows", rows, "--out", out, "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "gguf_read runs", p.stderr)
    lines = p.stdout.split("\n")
    expect = [
        "version 3 alignment 32 keys 33 tensors 272",
        "arch llama layers 30 width 576 heads 9 kv_heads 3 ffn 1536 rope_base 100000.0 vocab 49152",
        "token_types 49152 has_bos true",
        "types Q4_1 210 Q8_0 1 F32 61 embd token_embd.weight Q8_0 [49152, 576]",
    ]
    for e in expect:
        check(e in lines, "prints: " + e, p.stdout[:1500])
    for name, m in meta.items():
        got = np.load(os.path.join(out, name + ".npy"))
        want = np.load(os.path.join(HERE, m["file"]))
        same = got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        check(same, "%s (%s) rows %s dequantized bitwise as gguf's reader" % (name, m["type"], m["rows"]),
              "max |diff| %s" % (np.abs(got - want).max() if got.shape == want.shape else got.shape))
    out2 = os.path.join(exe_dir, "rows2")
    os.makedirs(out2)
    p2 = subprocess.run([exe, "--path", model, "--rows", rows, "--out", out2, "--threads", "2"],
                        capture_output=True, text=True, timeout=300)
    ys = sorted(f for f in os.listdir(out) if f.startswith("y_"))
    same = p2.returncode == 0 and len(ys) == 5 and all(
        open(os.path.join(out, f), "rb").read() == open(os.path.join(out2, f), "rb").read() for f in ys)
    check(same, "quant_matmul's 5 products bitwise the same at --threads 1 and 2", p2.stderr)
    products = [l for l in lines if l.startswith("matmul ")]
    check(len(products) == 5 and all(l.endswith("max_diff true") for l in products),
          "quant_matmul within 1e-3 of the dequantized f32 product for 5 weights", "\n".join(products))


def run_bad(exe, what, path, name, want):
    args = [exe, "--what", what, "--path", path] + (["--name", name] if name else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    ok = p.returncode == 70 and want in p.stderr and "internal" not in p.stderr
    check(ok, "%s %s: exit %d, says %r" % (what, os.path.basename(path), p.returncode, want),
          p.stderr.strip())


def case_bad(exe_dir, sflowc, model):
    exe = build(sflowc, "bad", exe_dir)
    data = open(model, "rb").read()
    trunc = os.path.join(exe_dir, "truncated.gguf")
    with open(trunc, "wb") as f:
        f.write(data[:len(data) // 2])
    run_bad(exe, "gguf", trunc, "", "lie outside the file")
    head = os.path.join(exe_dir, "header.gguf")
    with open(head, "wb") as f:
        f.write(data[:100000])
    run_bad(exe, "gguf", head, "", "runs past the end of the file")
    run_bad(exe, "bpe_gguf", head, "", "header.gguf: metadata")
    foreign = os.path.join(exe_dir, "model.safetensors")
    with open(foreign, "wb") as f:
        f.write(struct.pack("<Q", 2) + b"{}")
    run_bad(exe, "gguf", foreign, "", "model.safetensors: magic: the file does not start with \"GGUF\"")
    run_bad(exe, "gguf", os.path.join(exe_dir, "missing.gguf"), "", "missing.gguf: cannot read it")
    # token_embd.weight's type id (the first tensor info) changed to Q5_0,
    # a quantization std.llm does not read, and to 99, none at all.
    name = b"token_embd.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name) + 4 + 16
    for tid, want, what in ((6, "is Q5_0, which std.llm does not read", "weight"),
                            (99, "unknown ggml type id 99", "gguf")):
        bad = bytearray(data)
        bad[at:at + 4] = struct.pack("<I", tid)
        path = os.path.join(exe_dir, "type%d.gguf" % tid)
        with open(path, "wb") as f:
            f.write(bad)
        run_bad(exe, what, path, "token_embd.weight", want)
    run_bad(exe, "meta_int", model, "general.name", "metadata \"general.name\" is a str, not an integer")
    run_bad(exe, "meta_int", model, "llama.nope", "no metadata key \"llama.nope\"")
    run_bad(exe, "weight", model, "blk.0.attn_norm.weight", "has 1 dimensions, not 2")
    run_bad(exe, "encode", model, "", "id 49152 (at 0) is not in the vocabulary (0..49151)")
    wp = os.path.join(exe_dir, "wordpiece.json")
    with open(wp, "w") as f:
        json.dump({"model": {"type": "WordPiece", "vocab": {"a": 0}}}, f)
    run_bad(exe, "bpe_json", wp, "", "model.type is \"WordPiece\"")
    broken = os.path.join(exe_dir, "broken.json")
    with open(broken, "w") as f:
        f.write('{"model": {"type": "BPE",\n  "vocab": {"a": 0,}}}')
    run_bad(exe, "bpe_json", broken, "", "broken.json: 2:")
    run_bad(exe, "llama", foreign, "", "model.safetensors: magic")
    run_bad(exe, "llama", os.path.join(exe_dir, "type6.gguf"), "", "is Q5_0, which std.llm does not read")
    run_bad(exe, "forward_long", model, "", "2 tokens after the 3 the cache holds exceed its capacity of 4")
    run_bad(exe, "forward_id", model, "", "ids[1] = 49152 is not a token id (0 to 49151)")
    run_bad(exe, "kv_free", model, "", "no KV cache 1 in this process")


def load_logits():
    return json.load(open(os.path.join(HERE, "logits.json")))


def case_batch(exe_dir, sflowc, model):
    """llm.forward_batch: rows bitwise forward's alone, at 1 and 2 threads,
    n = 1, 2, 5 at different lengths, regrouped; bad batches named."""
    exe = build(sflowc, "batch", exe_dir)
    for threads in ("1", "2"):
        p = subprocess.run([exe, "--gguf", model, "--threads", threads], capture_output=True,
                           text=True, timeout=600)
        check(p.returncode == 0, "batch runs at --threads " + threads, p.stderr)
        for n in (1, 2, 5):
            check("batch %d bitwise true" % n in p.stdout,
                  "forward_batch of %d sequences: every row bitwise forward's (threads %s)"
                  % (n, threads), p.stdout)
        for n in (2, 5):
            check("regrouped %d true" % n in p.stdout,
                  "a batch regrouped from %d: rows still forward's" % n, p.stdout)
    other = os.path.join(exe_dir, "other.gguf")
    os.symlink(model, other)
    for what, want in (("len", "1 caches but 2 ids"),
                       ("same", "caches[0] and caches[1] are the same cache"),
                       ("full", "caches[0] is full (4 tokens, its capacity)"),
                       ("model", "caches[1] was made for " + other),
                       ("empty", "no sequences (caches is empty)")):
        p = subprocess.run([exe, "--gguf", model, "--what", what, "--other", other],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 70 and "llm.forward_batch: " + want in p.stderr,
              "forward_batch %s: exit %d, says %r" % (what, p.returncode, want), p.stderr.strip())


def case_paged(exe_dir, sflowc, model):
    """The paged KV cache: logits bitwise the contiguous cache's (prefill,
    decode across block boundaries, truncate then prefill, forward_batch,
    a batch of both kinds), the pool's blocks in use at each point (back to
    0 once every cache is freed), and a full pool a runtime error naming it."""
    exe = build(sflowc, "paged", exe_dir)
    p = subprocess.run([exe, "--gguf", model, "--threads", "2"], capture_output=True, text=True,
                       timeout=600)
    check(p.returncode == 0, "paged runs", p.stderr)
    for name in ("prefill", "decode", "truncated", "batch", "mixed"):
        check(name + " bitwise true" in p.stdout,
              "paged cache: %s logits bitwise the contiguous cache's" % name, p.stdout)
    # blocks of 16 tokens: 37 tokens hold 3, 67 hold 5, 10 hold 1, 33 hold 3;
    # the batch's caches of 36, 37 and 53 tokens hold 3 + 3 + 4
    for when, n in (("empty", 0), ("at 37", 3), ("at 67", 5), ("at 10", 1), ("at 33", 3),
                    ("batch", 10)):
        check("blocks %s %d\n" % (when, n) in p.stdout,
              "blocks in use %s: %d" % (when, n), p.stdout)
    check("blocks freed 0 peak 10 allocated 10" in p.stdout,
          "every block back in the pool once the caches are freed; freed blocks reused "
          "(10 made for a peak of 10)", p.stdout)
    for what, want in (
            ("exhaust", "llm.forward: 1 more KV block of 16 tokens needed, but 3 of the pool's "
                        "bound of 3 are in use"),
            ("batch_exhaust", "llm.forward_batch: 1 more KV block of 16 tokens needed, but 4 of "
                              "the pool's bound of 4 are in use"),
            ("bound", "llm.kv_pool: a bound of 2 blocks (0: none, else at least the 3 in use)")):
        p = subprocess.run([exe, "--gguf", model, "--what", what], capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 70 and want in p.stderr and "no error" not in p.stdout,
              "%s: exit %d, says %r" % (what, p.returncode, want), p.stderr.strip())


def write_safetensors(path, tensors):
    """tensors: [(name, numpy array or (dtype name, shape, raw bytes))] as a
    safetensors file (the format's header, data in order, 8-byte aligned)."""
    import numpy as np
    head, blobs, at = {}, [], 0
    for name, t in tensors:
        if isinstance(t, tuple):
            dt, shape, raw = t
        else:
            dt, shape, raw = {np.dtype("float32"): "F32", np.dtype("float16"): "F16"}[t.dtype], \
                list(t.shape), t.tobytes()
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(head).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def tiny_llama(folder, config=None, drop=(), reshape=None, int_embed=False):
    """A 1-layer Llama of width 8 (2 heads, 1 key/value head) of random
    weights in transformers' layout: the folder for the bad-input checks."""
    import numpy as np
    rng = np.random.default_rng(0)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
           "vocab_size": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": True}
    cfg.update(config or {})
    cfg = {k: v for k, v in cfg.items() if v != "DROP"}
    shapes = [("model.embed_tokens.weight", [32, 8]), ("model.norm.weight", [8])]
    p = "model.layers.0."
    shapes += [(p + "input_layernorm.weight", [8]), (p + "post_attention_layernorm.weight", [8]),
               (p + "self_attn.q_proj.weight", [8, 8]), (p + "self_attn.k_proj.weight", [4, 8]),
               (p + "self_attn.v_proj.weight", [4, 8]), (p + "self_attn.o_proj.weight", [8, 8]),
               (p + "mlp.gate_proj.weight", [16, 8]), (p + "mlp.up_proj.weight", [16, 8]),
               (p + "mlp.down_proj.weight", [8, 16])]
    ts = []
    for name, shape in shapes:
        if name in drop:
            continue
        if reshape and name == reshape[0]:
            shape = reshape[1]
        a = rng.standard_normal(shape).astype(np.float32)
        if int_embed and name == "model.embed_tokens.weight":
            ts.append((name, ("I32", shape, a.astype(np.int32).tobytes())))
        else:
            ts.append((name, a))
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_safetensors(os.path.join(folder, "model.safetensors"), ts)


def case_safetensors(exe_dir, sflowc, model):
    """A Hugging Face folder (config.json + model.safetensors +
    tokenizer.json) made from the GGUF by scripts/gguf_to_hf.sflow (the only
    pretrained Llama installed is the GGUF): its logits against the GGUF's,
    F32 within 1e-5 (prefill bitwise: both dequantize to the same f32) and
    F16 within 1e-2 of each position's largest, greedy tokens equal; bad
    folders named."""
    sys.path.insert(0, os.path.dirname(HERE))
    import pydeps
    pydeps.ensure("llm_test", "numpy")
    conv = os.path.join(exe_dir, "gguf_to_hf")
    subprocess.run([sflowc, os.path.join(ROOT, "scripts", "gguf_to_hf.sflow"), "-o", conv], check=True)
    exe = build(sflowc, "safetensors", exe_dir)
    with gzip.open(os.path.join(HERE, "tokenizer.json.gz"), "rb") as f:
        tok = f.read()
    for dtype, tol in (("f32", 1e-5), ("f16", 1e-2)):
        hf = os.path.join(exe_dir, "hf-" + dtype)
        os.makedirs(hf)
        p = subprocess.run([conv, "--gguf", model, "--out", hf, "--dtype", dtype],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0 and "272 tensors" in p.stdout, "gguf_to_hf --dtype " + dtype,
              p.stderr)
        with open(os.path.join(hf, "tokenizer.json"), "wb") as f:
            f.write(tok)
        p = subprocess.run([exe, "--gguf", model, "--hf", hf], capture_output=True, text=True,
                           timeout=600)
        check(p.returncode == 0, "safetensors runs (%s)" % dtype, p.stderr)
        lines = p.stdout.splitlines()
        check("hf llama 30 576 9 3 64 1536 49152 8192 100000.0 true true" in lines,
              "%s: config.json read as the GGUF's hyperparameters" % dtype, p.stdout[:300])
        for n in range(3):
            rel = [float(l.split()[2]) for l in lines if l.startswith("rel %d " % n)]
            step = [float(l.split()[2]) for l in lines if l.startswith("step %d " % n)]
            check("ids %d equal true" % n in lines, "prompt %d: tokenizer.json's ids are the GGUF's" % n)
            check(rel and rel[0] <= tol and step and step[0] <= tol,
                  "%s prompt %d: logits of every position within %g of the GGUF's (%s), a decode "
                  "step's too (%s)" % (dtype, n, tol, rel, step))
            if dtype == "f32":
                check(rel and rel[0] == 0.0, "f32 prompt %d: the prefill bitwise the GGUF's" % n)
            check(any(l.startswith("greedy %d equal true" % n) for l in lines),
                  "%s prompt %d: greedy tokens equal the GGUF's" % (dtype, n), p.stdout)
        check("batch bitwise true" in lines, "%s: forward_batch rows bitwise forward's" % dtype)
        if dtype == "f32":
            chat = os.path.join(exe_dir, "chat")
            subprocess.run([sflowc, os.path.join(ROOT, "examples", "chat.sflow"), "-o", chat],
                           check=True)
            q = "What is the capital of France?"
            a = subprocess.run([chat, "--model", hf, "--prompt", q], capture_output=True, text=True,
                               timeout=300)
            b = subprocess.run([chat, "--model", model, "--prompt", q], capture_output=True,
                               text=True, timeout=300)
            check(a.returncode == 0 and a.stdout == b.stdout and "Paris" in a.stdout,
                  "examples/chat.sflow --model FOLDER answers as with the GGUF: %r" % a.stdout,
                  a.stderr)
        if dtype == "f16":
            shutil.rmtree(hf)
    good = os.path.join(exe_dir, "tiny")
    tiny_llama(good)
    p = subprocess.run([exe, "--gguf", model, "--hf", good, "--what", "open"], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0 and "no error 1" in p.stdout, "a tiny random Llama folder opens", p.stderr)
    f32 = os.path.join(exe_dir, "hf-f32")
    bad = [
        ("no_config", dict(), "a model folder needs config.json"),
        ("no_key", dict(config={"num_hidden_layers": "DROP"}), 'config.json: no key "num_hidden_layers"'),
        ("arch", dict(config={"model_type": "mistral"}), 'model_type "mistral", not "llama"'),
        ("arch2", dict(config={"architectures": ["GPT2LMHeadModel"]}),
         'architectures holds "GPT2LMHeadModel", not "LlamaForCausalLM"'),
        ("scaling", dict(config={"rope_scaling": {"type": "linear", "factor": 2.0}}), '"rope_scaling" is set'),
        ("not_int", dict(config={"hidden_size": 8.5}), '"hidden_size" is not a positive integer'),
        ("missing", dict(drop=("model.layers.0.mlp.up_proj.weight",)),
         'model.safetensors: no tensor "model.layers.0.mlp.up_proj.weight"'),
        ("shape", dict(reshape=("model.layers.0.self_attn.k_proj.weight", [8, 8])),
         'tensor "model.layers.0.self_attn.k_proj.weight" has shape [8, 8], not [4, 8]'),
        ("dtype", dict(int_embed=True), 'tensor "model.embed_tokens.weight" is I32; std.llm reads F32, F16 and BF16'),
        ("untied", dict(config={"tie_word_embeddings": False}), 'no tensor "lm_head.weight"'),
    ]
    for name, kw, want in bad:
        d = os.path.join(exe_dir, "bad-" + name)
        tiny_llama(d, **kw)
        if name == "no_config":
            os.unlink(os.path.join(d, "config.json"))
        p = subprocess.run([exe, "--gguf", model, "--hf", d, "--what", "open"], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 70 and "llm.llama_open: " in p.stderr and want in p.stderr,
              "bad folder %s: exit %d, says %r" % (name, p.returncode, want), p.stderr.strip())
    shutil.rmtree(f32)


def case_decoder(exe_dir, sflowc, model):
    sys.path.insert(0, os.path.dirname(HERE))
    import pydeps
    pydeps.ensure("llm_test", "numpy")
    import numpy as np
    exe = build(sflowc, "decoder", exe_dir)
    ref = load_logits()
    prompts = os.path.join(exe_dir, "prompts.txt")
    with open(prompts, "w") as f:
        for p in ref["prompts"]:
            f.write(" ".join(str(i) for i in p["ids"]) + "\n")
    outs = {}
    for threads in ("1", "2"):
        out = os.path.join(exe_dir, "out" + threads)
        os.makedirs(out)
        p = subprocess.run([exe, "--gguf", model, "--prompts", prompts, "--out", out,
                            "--threads", threads], capture_output=True, text=True, timeout=600)
        check(p.returncode == 0, "decoder runs at --threads " + threads, p.stderr)
        outs[threads] = (out, p.stdout.split("\n"))
    out, lines = outs["1"]
    check("llama 30 576 9 3 64 1536 49152 8192 100000.0 true" in lines,
          "llama_open: the file's hyperparameters", "\n".join(lines[:2]))
    for n, pr in enumerate(ref["prompts"]):
        got = np.load(os.path.join(out, "%d.npy" % n))
        ok = got.shape == (len(pr["ids"]), 49152)
        worst = 0.0
        if ok:
            for t, (ids, vals) in enumerate(zip(pr["top_ids"], pr["top_logits"])):
                want = np.array(vals)
                d = np.abs(got[t, ids] - want).max() / np.abs(want).max()
                worst = max(worst, d)
        check(ok and worst <= 1e-3, "prompt %d: logits of its %d positions within 1e-3 of "
              "transformers' (relative; worst %.2e)" % (n, len(pr["ids"]), worst), str(got.shape))
        check("step %d len %d rel_diff_below_1e-5 true" % (n, len(pr["ids"])) in lines,
              "prompt %d: its last token as a decode step on the cache gives the prefill's logits" % n,
              "\n".join(l for l in lines if l.startswith("step")))
        want = "%d %s" % (n, json.dumps(pr["greedy"]))
        got_line = [l for l in lines if l.startswith("%d [" % n)]
        check(got_line and parse_ids(got_line[0])[1:] == [str(i) for i in pr["greedy"]],
              "prompt %d: the 12 greedy tokens are transformers'" % n,
              "got %s want %s" % (got_line, want))
        if "greedy32" in pr:
            g32 = [l for l in lines if l.startswith("g32 %d [" % n)]
            check(g32 and parse_ids(g32[0])[2:] == [str(i) for i in pr["greedy32"]],
                  "prompt %d: the greedy continuation of up to 32 tokens (to the EOS) is "
                  "transformers' (%d tokens)" % (n, len(pr["greedy32"])),
                  "got %s want %s" % (g32, pr["greedy32"]))
    out2, lines2 = outs["2"]
    same = lines == lines2 and all(
        open(os.path.join(out, f), "rb").read() == open(os.path.join(out2, f), "rb").read()
        for f in os.listdir(out))
    check(same, "the same logits, bitwise, and tokens at --threads 2")


def case_chat_answer(exe_dir, sflowc, model):
    sys.path.insert(0, os.path.dirname(HERE))
    import pydeps
    pydeps.ensure("llm_test", "numpy")
    import numpy as np
    exe = os.path.join(exe_dir, "chat")
    subprocess.run([sflowc, os.path.join(ROOT, "examples", "chat.sflow"), "-o", exe], check=True)
    ref = load_logits()
    chat = ref.get("chat")
    question = chat["question"] if chat else "What is 2+2?"
    lg = os.path.join(exe_dir, "l.npy")
    p = subprocess.run([exe, "--model", model, "--prompt", question, "--max-tokens", "64",
                        "--logits-out", lg], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "chat runs", p.stderr)
    if chat and p.returncode == 0:
        check(np.load(lg).shape == (len(chat["ids"]), 49152),
              "the templated question is transformers' apply_chat_template rendering's %d tokens"
              % len(chat["ids"]), str(np.load(lg).shape))
    if chat:
        check(p.stdout.rstrip("\n") == chat["answer"], "chat answers %r as transformers does: %r"
              % (question, chat["answer"]), "got %r" % p.stdout)
    # logits.json's second prompt is this template around "What is 2+2?"
    pr = ref["prompts"][1]
    p2 = subprocess.run([exe, "--model", model, "--prompt", "What is 2+2?", "--max-tokens", "1",
                         "--logits-out", lg], capture_output=True, text=True, timeout=300)
    got = np.load(lg) if p2.returncode == 0 else np.zeros((0, 0))
    ok = got.shape == (len(pr["ids"]), 49152) and all(
        int(np.argmax(got[t])) == ids[0] for t, ids in enumerate(pr["top_ids"]))
    check(ok, "chat --logits-out: [T, vocab] for the templated prompt, each row's argmax "
          "transformers'", "%s %s" % (got.shape, p2.stderr))
    # Sampled: the same seed the same text, run after run; another seed
    # (at a temperature where the top two tokens trade places) other text.
    sampled = {}
    for seed in ("1", "1", "2", "3"):
        p4 = subprocess.run([exe, "--model", model, "--prompt", "Write a haiku about rain.",
                             "--max-tokens", "24", "--temperature", "1.0", "--top-k", "50",
                             "--top-p", "0.95", "--seed", seed],
                            capture_output=True, text=True, timeout=300)
        check(p4.returncode == 0, "chat --temperature 1 --seed %s runs" % seed, p4.stderr)
        sampled.setdefault(seed, []).append(p4.stdout)
    check(sampled["1"][0] == sampled["1"][1] and sampled["1"][0].strip(),
          "chat --seed 1 twice: the same sampled text", repr(sampled["1"]))
    check(len({sampled["1"][0], sampled["2"][0], sampled["3"][0]}) > 1,
          "chat --seed 1, 2, 3: not all the same text", repr(sampled))
    for args, want in ((["--max-tokens", "0"], "--max-tokens is 0 (at least 1)"),
                       (["--temperature", "-0.5"], "--temperature is -0.5"),
                       (["--top-p", "0"], "--top-p is 0"),
                       (["--top-k", "-1"], "--top-k is -1")):
        p3 = subprocess.run([exe, "--model", model, "--prompt", "hi"] + args,
                            capture_output=True, text=True, timeout=60)
        check(p3.returncode != 0 and want in p3.stderr and "internal" not in p3.stderr,
              "chat %s: says %r" % (" ".join(args), want), p3.stderr.strip())


def case_gpu_emu(exe_dir, sflowc, model):
    """quant_matmul in a @gpus(1) actor under the host emulator (the
    environment is the suite's): kernels/quant.cu against the CPU path,
    and each weight uploaded once."""
    if "SFLOW_CUDA" not in os.environ:
        sys.exit("llm_test gpu_emu: run under the host emulator (ctest sets SFLOW_CUDA)")
    exe = build(sflowc, "quant_actor", exe_dir)
    p = subprocess.run([exe, "--path", model], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SFLOW_GPU_STATS="1"))
    check(p.returncode == 0, "quant_actor runs", p.stderr)
    lines = [l for l in p.stdout.split("\n") if l.startswith("device ")]
    check(len(lines) == 3 and all("rel_diff_below_1e-5 true" in l for l in lines),
          "Q4_1 and Q8_0 products on the device within 1e-5 of the CPU's", "\n".join(lines))
    stats = dict(kv.split("=") for l in p.stderr.split("\n") if l.startswith("sflow-gpu-stats:")
                 for kv in l.split()[1:])
    # The three weights once (207360 + 552960 + 30081024 bytes) and the
    # three x's (2 rows each of 576, 1536, 576 floats): no weight twice.
    want = 207360 + 552960 + 30081024 + 4 * 2 * (576 + 1536 + 576)
    check(stats.get("h2d_bytes") == str(want) and int(stats.get("gpu_launches", "0")) >= 6,
          "each weight uploaded once (h2d_bytes %s, want %d), kernels launched (%s)"
          % (stats.get("h2d_bytes"), want, stats.get("gpu_launches")), p.stderr[-800:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--case", required=True, choices=["bpe_gguf", "bpe_json", "chat", "gguf", "bad", "gpu_emu", "decoder", "chat_answer", "batch", "paged", "safetensors"])
    ap.add_argument("--models", default=None, help="default: $SFLOW_MODELS or <build>/models")
    args = ap.parse_args()
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(args.sflowc)))
    models = args.models or os.environ.get("SFLOW_MODELS") or os.path.join(build_dir, "models")
    model = os.path.join(models, "smollm2-135m-instruct", GGUF)
    if not os.path.isfile(model):
        sys.exit("llm_test: no model at %s; run `bash scripts/install-models.sh` "
                 "(make deps does)" % model)
    with tempfile.TemporaryDirectory(prefix="sflow-llm-") as tmp:
        if args.case.startswith("bpe_"):
            case_bpe(tmp, args.sflowc, model, args.case[4:])
        else:
            globals()["case_" + args.case](tmp, args.sflowc, model)
    if failures:
        sys.exit("llm_test %s: %d check(s) failed" % (args.case, len(failures)))
    print("llm_test %s: all checks passed" % args.case)


if __name__ == "__main__":
    main()
