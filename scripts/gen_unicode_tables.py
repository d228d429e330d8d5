#!/usr/bin/env python3
"""gen_unicode_tables.py — writes runtime/data/unicode_tables.c, the
character tables of the BERT normalizer and pre-tokenizer (std.tokenizer).

    python3 scripts/gen_unicode_tables.py [--out runtime/data/unicode_tables.c]

Run it with a Python that can import `tokenizers` (build/peers/tokenizer/venv/
bin/python after bench/tokenizer/setup.sh) to fold in the places where the
Hugging Face crates disagree with this Python's unicodedata; without it the
tables are unicodedata's alone and the generator says so.

Why a committed C table and not one built at build time: the build must
not depend on which Unicode version the build machine's Python ships, and
the ids a model was trained with depend on the exact tables, so they change
only when someone reruns this script on purpose and the diff shows it.

What the tables hold, per code point (the Rust code in `tokenizers` is
src/normalizers/bert.rs and src/pre_tokenizers/bert.rs):
  DROP   removed by clean_text: U+0000, U+FFFD, categories Cc, Cf, Co
         except tab, LF and CR (which are whitespace);
  WS     Rust's char::is_whitespace (the White_Space property);
  PUNCT  isolated by the pre-tokenizer: ASCII punctuation and categories P*;
  MN     removed by strip_accents after NFD (category Mn);
  DECOMP has a canonical decomposition (NFD, full; Hangul is computed);
  LOWER  lower-cases to something else (one to three code points).
The base is Python's unicodedata.  `tokenizers` 0.23 takes categories from
the unicode_categories crate (an older Unicode: marks and format characters
added since are not Mn/Cf to it) and lower-casing from Rust's std (a newer
Unicode than Python 3.11's 14.0), so, with the peer importable, every code
point is also run through the peer's own components and the table follows
the peer where they differ; the count of such overrides is written in the
generated file's header.
"""
import argparse
import sys
import unicodedata

DROP, WS, PUNCT, MN, DECOMP, LOWER = 1, 2, 4, 8, 16, 32
# Rust's White_Space property (char::is_whitespace); tab, LF, CR included.
WHITE_SPACE = ({0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F,
                0x205F, 0x3000} | set(range(0x2000, 0x200B)))
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def chars():
    for cp in range(0x110000):
        if not 0xD800 <= cp < 0xE000:
            yield cp


def base_tables():
    flags, decomp, lower = {}, {}, {}
    for cp in chars():
        c = chr(cp)
        cat = unicodedata.category(c)
        f = 0
        if cp in (0, 0xFFFD) or (c not in "\t\n\r" and cat in ("Cc", "Cf", "Co")):
            f |= DROP
        if cp in WHITE_SPACE:
            f |= WS
        if (cp < 0x80 and c.isprintable() and not c.isalnum() and c != " ") or cat[0] == "P":
            f |= PUNCT
        if cat == "Mn":
            f |= MN
        d = unicodedata.normalize("NFD", c)
        if d != c and not HANGUL_FIRST <= cp <= HANGUL_LAST:
            decomp[cp] = [ord(x) for x in d]
        lo = c.lower()
        if lo != c:
            lower[cp] = [ord(x) for x in lo]
        flags[cp] = f
    return flags, decomp, lower


def apply_peer(flags, decomp, lower):
    """Follows the peer's own components where they differ; returns the
    number of code points changed, or None without the peer."""
    try:
        import tokenizers
        from tokenizers import normalizers, pre_tokenizers
    except ImportError:
        return None
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    nfd, low = normalizers.NFD(), normalizers.Lowercase()
    pre = pre_tokenizers.BertPreTokenizer()
    changed = set()
    for cp in chars():
        c = chr(cp)
        f = flags[cp]
        # clean_text on "a" c "b": removed, a space, or kept.
        out = clean.normalize_str("a" + c + "b")
        g = f & ~(DROP | WS)
        if out == "ab":
            g |= DROP
        elif out == "a b" and c != " ":
            g |= WS
        elif c == " ":
            g |= WS
        # Pre-tokenizer on "a" c "b": whitespace drops c, punctuation isolates it.
        pieces = [p for p, _ in pre.pre_tokenize_str("a" + c + "b")]
        g &= ~PUNCT
        if pieces == ["a", c, "b"]:
            g |= PUNCT
        if pieces == ["a", "b"]:
            g |= WS
        d = nfd.normalize_str(c)
        want_d = [ord(x) for x in d] if d != c else None
        if not HANGUL_FIRST <= cp <= HANGUL_LAST and decomp.get(cp) != want_d:
            if want_d:
                decomp[cp] = want_d
            else:
                decomp.pop(cp, None)
            changed.add(cp)
        if d == c:  # Mn matters only for characters that NFD leaves alone
            g &= ~MN
            if strip.normalize_str("a" + c) == "a":
                g |= MN
        lo = low.normalize_str(c)
        want_l = [ord(x) for x in lo] if lo != c else None
        if lower.get(cp) != want_l:
            if want_l:
                lower[cp] = want_l
            else:
                lower.pop(cp, None)
            changed.add(cp)
        if g != f:
            flags[cp] = g
            changed.add(cp)
    return len(changed), tokenizers.__version__


def emit(out, flags, decomp, lower, peer):
    for cp in decomp:
        flags[cp] |= DECOMP
    for cp in lower:
        flags[cp] |= LOWER
    # Two stages: 256-code-point blocks, identical blocks stored once.
    blocks, index = {}, []
    for hi in range(0x1100):
        blk = tuple(flags.get((hi << 8) | lo, 0) for lo in range(256))
        index.append(blocks.setdefault(blk, len(blocks)))
    assert len(blocks) < 256

    def mapping(name, table):
        keys = sorted(table)
        pool, vals = [], []
        for k in keys:
            v = table[k]
            assert 1 <= len(v) <= 7
            vals.append((len(pool) << 3) | len(v))
            pool.extend(v)
        lines = [f"const int32_t sf__uc_{name}_count = {len(keys)};",
                 f"const uint32_t sf__uc_{name}_keys[] = {{"]
        lines += wrap(f"0x{k:x}" for k in keys)
        lines += ["};", f"const uint32_t sf__uc_{name}_vals[] = {{"]
        lines += wrap(str(v) for v in vals)
        lines += ["};", f"const uint32_t sf__uc_{name}_pool[] = {{"]
        lines += wrap(f"0x{p:x}" for p in pool)
        lines += ["};"]
        return lines

    src = peer_line = ("tables of Python's unicodedata alone (tokenizers was not importable)"
                       if peer is None else
                       f"{peer[0]} code points follow tokenizers {peer[1]} where it differs")
    lines = [
        "/*",
        " * unicode_tables.c — GENERATED by scripts/gen_unicode_tables.py; do not edit.",
        " * The BERT normalizer's and pre-tokenizer's character classes (see",
        " * tokenizer.h, \"unicode_tables.c\", and the generator's header for why",
        " * this file is committed).",
        f" * Unicode {unicodedata.unidata_version} (Python {sys.version.split()[0]}); {src}.",
        " */",
        "#include \"tokenizer.h\"",
        "",
        f"const uint8_t sf__uc_stage1[0x1100] = {{",
    ]
    lines += wrap(str(i) for i in index)
    # The blocks as one string literal, each class as the byte 0x40 + class
    # (classes are below 64), a quarter of the size of a list of numbers.
    lines += ["};", f"const char sf__uc_stage2[{len(blocks)} * 256 + 1] ="]
    for blk in sorted(blocks, key=blocks.get):
        for half in (blk[:128], blk[128:]):
            text = "".join(chr(0x40 + v) for v in half).replace("\\", "\\\\")
            lines.append(f'  "{text}"')
    lines[-1] += ";"
    lines += mapping("decomp", decomp)
    lines += mapping("lower", lower)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"gen_unicode_tables: {out}: {len(blocks)} blocks, {len(decomp)} decompositions, "
          f"{len(lower)} lower-case mappings; {peer_line}", file=sys.stderr)


def wrap(items, width=96):
    lines, cur = [], " "
    for it in items:
        if len(cur) + len(it) + 2 > width:
            lines.append(cur)
            cur = " "
        cur += " " + it + ","
    if cur.strip():
        lines.append(cur)
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="runtime/data/unicode_tables.c")
    args = ap.parse_args()
    flags, decomp, lower = base_tables()
    peer = apply_peer(flags, decomp, lower)
    emit(args.out, flags, decomp, lower, peer)


if __name__ == "__main__":
    main()
