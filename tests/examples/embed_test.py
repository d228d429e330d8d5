#!/usr/bin/env python3
"""examples/embed.sflow against PyTorch, and std.bert's errors (issue 17).

Compiles examples/embed.sflow, runs it on tests/examples/embed/sentences.txt
(49 Debian fortunes, one truncated at 256 tokens) with the pretrained
all-MiniLM-L6-v2 that scripts/install-models.sh installs, and checks the
.npy it writes against reference.npy, which scripts/gen_embed_reference.py
made with transformers' BertModel (mean pooling, L2 normalisation):

  - shape [49, 384], dtype <f4, every row of norm 1 (within 1e-5);
  - cosine >= 0.9999 per sentence (the issue's bar), and the largest
    absolute difference is printed;
  - the comparison can fail: the same vectors against the reference rows
    shifted by one, or not normalised (pooled vectors scaled per row), must
    fall below the bar, so a wrong embedding cannot pass unnoticed;
  - the token ids std.tokenizer gives each sentence (tests/examples/embed/
    ids.sflow) equal the ids Python's tokenizers gave (ids.npy);
  - 1 shard and 2 shards write the same bytes (the order of the rows does
    not depend on how the sentences were dealt out).

Then each bad input is a clear message and a non-zero exit: a missing model
folder, a config.json that is not a BERT's, a safetensors file of another
model (wrong names, and wrong shapes), --seq-len over
max_position_embeddings, an input without sentences.

The model is found at $SFLOW_MODELS/all-minilm-l6-v2 or
<build>/models/all-minilm-l6-v2 (make deps installs it); without it the
test fails, naming scripts/install-models.sh.  No numpy: .npy files are
read with struct.

Usage: embed_test.py --sflowc PATH [--models DIR]
"""
import argparse
import ast
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "examples", "embed")
BAR = 0.9999
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def read_npy(path):
    """(shape, dtype descr, values) of a C-order .npy file."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        raise ValueError("%s is not a .npy file" % path)
    major = raw[6]
    if major == 1:
        hlen = struct.unpack("<H", raw[8:10])[0]
        start = 10
    else:
        hlen = struct.unpack("<I", raw[8:12])[0]
        start = 12
    header = ast.literal_eval(raw[start:start + hlen].decode("latin1"))
    shape = tuple(header["shape"])
    descr = header["descr"]
    n = 1
    for d in shape:
        n *= d
    code = {"<f4": "f", "<i4": "i", "<i8": "q", "<f8": "d"}[descr]
    body = raw[start + hlen:]
    values = struct.unpack("<%d%s" % (n, code), body[:n * struct.calcsize(code)])
    return shape, descr, values


def write_safetensors(path, tensors):
    """A safetensors file of F32 zeros: {name: shape}."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))


def rows(shape, values):
    w = shape[1]
    return [values[i * w:(i + 1) * w] for i in range(shape[0])]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    return dot / (na * nb) if na and nb else 0.0


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def compile_to(sflowc, src, exe):
    code, out, err = run([sflowc, src, "-o", exe])
    if code != 0:
        sys.exit("embed_test: %s does not compile:\n%s%s" % (src, out, err))


def expect_error(what, cmd, pattern):
    code, out, err = run(cmd)
    ok = code != 0 and re.search(pattern, err) is not None
    check(ok, "%s: exit %d, message /%s/" % (what, code, pattern))
    if not ok:
        print("  stdout: %s\n  stderr: %s" % (out[-500:], err[-1500:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--models", default=None, help="default: $SFLOW_MODELS or <build>/models")
    args = ap.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.sflowc)))
    models = args.models or os.environ.get("SFLOW_MODELS") or os.path.join(build, "models")
    model = os.path.join(models, "all-minilm-l6-v2")
    if not os.path.isfile(os.path.join(model, "model.safetensors")):
        sys.exit("embed_test: no model at %s; run `bash scripts/install-models.sh` "
                 "(make deps does) or set SFLOW_MODELS" % model)

    tmp = tempfile.mkdtemp(prefix="sflow-embed-test-")
    try:
        exe = os.path.join(tmp, "embed")
        compile_to(args.sflowc, os.path.join(ROOT, "examples", "embed.sflow"), exe)
        sentences = os.path.join(DATA, "sentences.txt")
        out2 = os.path.join(tmp, "emb2.npy")
        code, out, err = run([exe, "--model", model, "--input", sentences, "--output", out2,
                              "--shards", "2", "--threads", "2"])
        check(code == 0, "embed.sflow runs (exit %d)" % code)
        if code != 0:
            print(err[-3000:])
            return
        print("  " + out.strip().replace("\n", "\n  "))
        m = re.search(r"^RESULT embed sentences=(\d+) seconds=([\d.]+) sentences_per_s=([\d.]+)$", out, re.M)
        check(m is not None and m.group(1) == "49", "prints the RESULT line for 49 sentences")

        shape, descr, vals = read_npy(out2)
        rshape, _, rvals = read_npy(os.path.join(DATA, "reference.npy"))
        check(shape == (49, 384) and descr == "<f4", "output is [49, 384] <f4 (got %s %s)" % (shape, descr))
        got, ref = rows(shape, vals), rows(rshape, rvals)
        norms = [math.sqrt(sum(x * x for x in r)) for r in got]
        check(all(abs(n - 1.0) < 1e-5 for n in norms),
              "every row has norm 1 (min %.7f, max %.7f)" % (min(norms), max(norms)))
        cos = [cosine(a, b) for a, b in zip(got, ref)]
        diff = max(abs(x - y) for a, b in zip(got, ref) for x, y in zip(a, b))
        worst = min(range(len(cos)), key=lambda i: cos[i])
        check(min(cos) >= BAR, "cosine with PyTorch >= %g for every sentence (min %.8f at sentence %d, "
              "max |difference| %.3g)" % (BAR, cos[worst], worst + 1, diff))

        # The bar discriminates: shifted rows, and vectors left unnormalised
        # (each row scaled, as pooling without normalize gives), fail it.
        shifted = [cosine(a, b) for a, b in zip(got, ref[1:] + ref[:1])]
        check(min(shifted) < BAR, "rows shifted by one fail the bar (min cosine %.4f)" % min(shifted))
        raw = [[x * (1.0 + 0.1 * (i % 7)) for x in r] for i, r in enumerate(got)]
        absdiff = max(abs(x - y) for a, b in zip(raw, ref) for x, y in zip(a, b))
        check(absdiff > 1e-3 and not all(abs(math.sqrt(sum(x * x for x in r)) - 1) < 1e-5 for r in raw),
              "unnormalised vectors fail the norm check")

        # One shard: the same bytes.
        out1 = os.path.join(tmp, "emb1.npy")
        code, _, err = run([exe, "--model", model, "--input", sentences, "--output", out1,
                            "--shards", "1", "--batch", "8", "--timing=false"])
        same = code == 0 and open(out1, "rb").read() == open(out2, "rb").read()
        if not same and code == 0:
            _, _, v1 = read_npy(out1)
            d = max(abs(x - y) for x, y in zip(v1, vals))
            same = d <= 1e-6
            print("  1 shard, batch 8 vs 2 shards, batch 32: max |difference| %.3g" % d)
        check(same, "1 shard / batch 8 gives the 2-shard result (to 1e-6)")

        # Token ids against tokenizers'.
        ids_exe = os.path.join(tmp, "ids")
        compile_to(args.sflowc, os.path.join(DATA, "ids.sflow"), ids_exe)
        ids_out = os.path.join(tmp, "ids.npy")
        code, _, err = run([ids_exe, "--tokenizer_json", os.path.join(model, "tokenizer.json"),
                            "--input", sentences, "--output", ids_out])
        ishape, _, ivals = read_npy(ids_out) if code == 0 else ((), "", ())
        rishape, _, rivals = read_npy(os.path.join(DATA, "ids.npy"))
        bad = [i for i in range(min(len(ivals), len(rivals))) if ivals[i] != rivals[i]]
        check(code == 0 and ishape == rishape and not bad,
              "token ids equal tokenizers' (%s, %d of %d differ)" % (ishape, len(bad), len(rivals)))

        # Bad input.
        base = [exe, "--input", sentences, "--output", os.path.join(tmp, "bad.npy")]
        expect_error("missing model folder", base + ["--model", os.path.join(tmp, "nowhere")],
                     r"bert: the model folder .*nowhere does not exist")
        fake = os.path.join(tmp, "gpt2")
        os.makedirs(fake)
        with open(os.path.join(fake, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "n_embd": 768, "n_layer": 12}, f)
        expect_error("config.json of another kind of model", base + ["--model", fake],
                     r'gpt2/config\.json describes a "gpt2" model, not a BERT')
        # A BERT folder whose weights are another model's: GPT-2's names.
        gpt = os.path.join(tmp, "gptweights")
        os.makedirs(gpt)
        for name in ("config.json", "tokenizer.json"):
            shutil.copy(os.path.join(model, name), gpt)
        write_safetensors(os.path.join(gpt, "model.safetensors"),
                          {"wte.weight": [4, 3], "wpe.weight": [2, 3], "h.0.attn.c_attn.weight": [3, 9]})
        expect_error("safetensors of another model (names)", base + ["--model", gpt],
                     r'nn\.load: .*gptweights/model\.safetensors has no tensor "embeddings\.word_embeddings\.weight"'
                     r" \(the struct's embeddings\.word_embeddings\.weight, shape \[30522, 384\]\)")
        # A small model's file with BERT's names and other shapes (the nn
        # fixtures' hf_small.safetensors).
        other = os.path.join(tmp, "other")
        os.makedirs(other)
        for name in ("config.json", "tokenizer.json"):
            shutil.copy(os.path.join(model, name), other)
        shutil.copy(os.path.join(ROOT, "tests", "nn", "fixtures", "hf_small.safetensors"),
                    os.path.join(other, "model.safetensors"))
        expect_error("safetensors of a smaller BERT (shapes)", base + ["--model", other],
                     r'nn\.load: .*other/model\.safetensors: "embeddings\.word_embeddings\.weight" has shape '
                     r"\[6, 4\] in the file, but the struct's is \[30522, 384\]")
        # The right names, other sizes: a config of 768 wide with MiniLM's file.
        wide = os.path.join(tmp, "wide")
        os.makedirs(wide)
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        cfg["hidden_size"] = 768
        with open(os.path.join(wide, "config.json"), "w") as f:
            json.dump(cfg, f)
        shutil.copy(os.path.join(model, "tokenizer.json"), wide)
        os.symlink(os.path.join(model, "model.safetensors"), os.path.join(wide, "model.safetensors"))
        expect_error("safetensors of another model (shapes)", base + ["--model", wide],
                     r'nn\.load: .*wide/model\.safetensors: "embeddings\.word_embeddings\.weight" has shape '
                     r"\[30522, 384\] in the file, but the struct's is \[30522, 768\]")
        expect_error("--seq-len over max_position_embeddings", base + ["--model", model, "--seq-len", "600"],
                     r"a sequence length of 600 is over the model's max_position_embeddings 512")
        empty = os.path.join(tmp, "empty.txt")
        with open(empty, "w") as f:
            f.write("\n  \n")
        expect_error("input without sentences", [exe, "--model", model, "--input", empty, "--output",
                                                 os.path.join(tmp, "e.npy")], r"empty\.txt has no sentences")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit("embed_test: %d check(s) failed: %s" % (len(failures), "; ".join(failures)))
    print("embed_test: all checks passed")


if __name__ == "__main__":
    main()
