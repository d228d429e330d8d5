#!/usr/bin/env python3
"""A GGUF of SmolLM2-135M's shapes with random weights, for bench/gpu/run.sh's
decoder rows: the real model (98 MB) cannot travel to the device (the
prepared tree is bounded at 48 MiB), so the run writes this one there.
Same metadata as SmolLM2-135M-Instruct (30 layers, width 576, 9 heads, 3 KV
heads, feed-forward 1536, vocabulary 49,152, RoPE base 100,000, tied
embeddings), the same types (Q4_1 products, Q8_0 embedding, F32 norms),
so the same bytes move per token; no tokenizer (the bench feeds ids).
Standard library only; about 2 s.

Usage: llm_gguf.py OUT.gguf [--layers N] [--vocab V]
"""
import argparse, random, struct

ALIGN = 32


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    # 4 u32, 6 f32, 8 string
    body = {4: lambda v: struct.pack("<I", v), 6: lambda v: struct.pack("<f", v), 8: s}[typ](val)
    return s(key) + struct.pack("<I", typ) + body


def pool(rng, block, count):
    """count random blocks of a type: small f16 scales, random quants."""
    out = bytearray()
    for _ in range(count):
        d = struct.pack("<e", rng.uniform(0.002, 0.02))
        if block == 20:   # Q4_1: d, m, 16 bytes of nibbles
            out += d + struct.pack("<e", rng.uniform(-0.16, -0.02)) + rng.randbytes(16)
        else:             # Q8_0: d, 32 int8
            out += d + rng.randbytes(32)
    return bytes(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--vocab", type=int, default=49152, help="smaller for the emulator's rehearsal")
    a = ap.parse_args()
    rng = random.Random(7)
    L, d, ffn, V, heads, kvh = a.layers, 576, 1536, a.vocab, 9, 3
    kvd = d // heads * kvh
    meta = [kv("general.architecture", 8, "llama"), kv("llama.block_count", 4, L),
            kv("llama.embedding_length", 4, d), kv("llama.attention.head_count", 4, heads),
            kv("llama.attention.head_count_kv", 4, kvh), kv("llama.feed_forward_length", 4, ffn),
            kv("llama.context_length", 4, 8192), kv("llama.rope.freq_base", 6, 100000.0),
            kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5)]
    tensors = [("token_embd.weight", 8, V, d), ("output_norm.weight", 0, 1, d)]
    for l in range(L):
        tensors += [(f"blk.{l}.attn_norm.weight", 0, 1, d), (f"blk.{l}.ffn_norm.weight", 0, 1, d),
                    (f"blk.{l}.attn_q.weight", 3, d, d), (f"blk.{l}.attn_k.weight", 3, kvd, d),
                    (f"blk.{l}.attn_v.weight", 3, kvd, d), (f"blk.{l}.attn_output.weight", 3, d, d),
                    (f"blk.{l}.ffn_gate.weight", 3, ffn, d), (f"blk.{l}.ffn_up.weight", 3, ffn, d),
                    (f"blk.{l}.ffn_down.weight", 3, d, ffn)]
    pools = {3: pool(rng, 20, 4099), 8: pool(rng, 34, 4099)}
    infos, blobs, off = [], [], 0
    for i, (name, typ, rows, cols) in enumerate(tensors):
        if typ == 0:
            data = struct.pack("<%df" % cols, *[1.0] * cols)
        else:
            blk = 20 if typ == 3 else 34
            n = rows * cols // 32 * blk
            p = pools[typ]
            start = (i * 977 % 4099) * blk   # each tensor its own rotation of the pool
            rot = p[start:] + p[:start]
            data = (rot * (n // len(rot) + 1))[:n]
        dims = [cols] if rows == 1 and typ == 0 else [cols, rows]
        infos.append(s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
                     + struct.pack("<IQ", typ, off))
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(a.out, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    print(f"llm_gguf: {a.out}: {len(tensors)} tensors, {L} layers, {len(head) + off} bytes")


if __name__ == "__main__":
    main()
