"""fortunes_split.py — the data of examples/finetune.sflow, in Python, for
its PyTorch peers (bench/train/peer_finetune.py, ray_startup.py): the
records of each category's fortune file, the train and eval selection, and
the shuffled batches of every epoch, each the same as the sflow side's.

The orders come from std.data's permutation (runtime/data/batch.c), written
out again here bit for bit — SplitMix64 seeded by mixing seed and epoch, a
Fisher-Yates shuffle with Lemire's unbiased bounded draw — so that the
peers train on the same examples in the same order as sflow, not merely on
examples of the same kind.  The entry reader and the stratified split
follow examples/finetune.sflow's entries() and split(); a change there must
be made here too.
"""
import os

M64 = (1 << 64) - 1


def _splitmix(state):
    """(new state, value) of one SplitMix64 step."""
    s = (state + 0x9E3779B97F4A7C15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return s, z ^ (z >> 31)


def permutation(n, seed, epoch):
    """std.data.permutation(n, seed, epoch): a shuffled order of 0..n-1."""
    p = list(range(n))
    _, a = _splitmix(seed & M64)
    _, b = _splitmix((epoch & M64) ^ 0x5851F42D4C957F2D)
    s = a ^ b
    for i in range(n - 1, 0, -1):
        bound = i + 1
        s, r = _splitmix(s)
        m = r * bound
        lo = m & M64
        if lo < bound:
            t = ((1 << 64) - bound) % bound
            while lo < t:
                s, r = _splitmix(s)
                m = r * bound
                lo = m & M64
        j = m >> 64
        p[i], p[j] = p[j], p[i]
    return p


def shard_range(n, rank, workers):
    """std.data.shard_range: near-equal parts, the first n % workers one longer."""
    base, extra = divmod(n, workers)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def batches(n, batch_size, seed, epoch, rank=0, workers=1, drop_last=False):
    """std.data.batches: worker rank's part of each global batch of one epoch."""
    perm = permutation(n, seed, epoch)
    nb = n // batch_size if drop_last else (n + batch_size - 1) // batch_size
    out = []
    for b in range(nb):
        g = perm[b * batch_size:(b + 1) * batch_size]
        lo, hi = shard_range(len(g), rank, workers)
        out.append(g[lo:hi])
    return out


def entries(text):
    """The entries of a fortune file as finetune.sflow's entries() reads
    them: the text between lines holding only "%" (around spaces allowed),
    stripped, empty ones dropped."""
    out, cur = [], ""
    for line in text.split("\n"):
        if line.strip() == "%":
            if cur.strip():
                out.append(cur.strip())
            cur = ""
        else:
            cur += line + "\n"
    if cur.strip():
        out.append(cur.strip())
    return out


def load(data_dir, categories):
    """[(entries of category c) for c in categories]; a clear error for a
    missing or empty category."""
    out = []
    for c in categories:
        path = os.path.join(data_dir, c)
        if not os.path.isfile(path):
            raise SystemExit(f"fortunes: category \"{c}\": no file {path}")
        with open(path, encoding="utf-8") as f:
            es = entries(f.read())
        if not es:
            raise SystemExit(f"fortunes: category \"{c}\" ({path}) has no entries")
        out.append(es)
    return out


def select(per_category, samples, eval_samples, seed):
    """(train, eval), lists of (text, label), as finetune.sflow's split():
    stratified, category c giving shard_range(samples, c, k) of the train
    and shard_range(eval_samples, c, k) of the eval samples, drawn from its
    own shuffle permutation(n_c, seed, c), train first, eval after; both
    in category order."""
    k = len(per_category)
    train, evals = [], []
    for c, es in enumerate(per_category):
        lo, hi = shard_range(samples, c, k)
        elo, ehi = shard_range(eval_samples, c, k)
        nt, ne = hi - lo, ehi - elo
        if nt + ne > len(es):
            raise SystemExit(f"fortunes: category {c} has {len(es)} entries, fewer than the "
                             f"{nt} train + {ne} eval samples it must give")
        p = permutation(len(es), seed, c)
        train += [(es[p[i]], c) for i in range(nt)]
        evals += [(es[p[i]], c) for i in range(nt, nt + ne)]
    return train, evals
