#!/usr/bin/env python3
"""peer_finetune.py — PyTorch's side of the fine-tuning benchmark of issue
17: examples/finetune.sflow's recipe in eager PyTorch on the CPU, as a plain
loop in one process or as DistributedDataParallel over gloo (loopback):

    build/peers/torch/venv/bin/python bench/train/peer_finetune.py --mode plain --threads 2
    build/peers/torch/venv/bin/python bench/train/peer_finetune.py --mode ddp --workers 2 --threads 1
    build/peers/torch/venv/bin/python bench/train/peer_finetune.py --mode fsdp --workers 2 --threads 1

FSDP (--mode fsdp): the same processes and gloo group as DDP, the model
wrapped with FSDP2's fully_shard (torch.distributed.fsdp), one unit per
BertLayer (the encoder's blocks, as std.train's blocks) and the root for
the rest (embeddings, head), on the CPU: --fsdp-reshard full (the default)
frees each unit's gathered parameters after its forward and gathers them
again for its backward (FULL_SHARD, std.train's shard "parameters");
--fsdp-reshard grad-op keeps them from the forward to the backward
(SHARD_GRAD_OP, std.train's "gradients").  The gradients are
reduce-scattered per unit as its backward ends, averaged over the ranks
as DDP's are, so the loss scaling below is the same; AdamW steps each
rank's shards (DTensors) and clip_grad_norm_ takes the global norm.

The recipe, each part as the sflow example does it: all-MiniLM-L6-v2
(transformers' BertModel from --model, no pooler) and a Linear head on the
mean-pooled last hidden state (the attention mask weights the mean) and
dropout, initialised normal with std 0.02 and bias 0, in training mode
(dropout 0.1 as config.json says); cross-entropy over the
global batch; AdamW (PyTorch's: lr --lr, betas 0.9/0.999, eps 1e-8, weight
decay 0.01) with the learning rate falling linearly to 0 over all steps,
no warm-up, gradients clipped at global norm 1.0 (std.train's defaults,
Hugging Face Trainer's too); the fortunes records of --categories, selected and shuffled
by bench/train/fortunes_split.py, which re-implements std.data's
permutation and batches and the example's stratified split, so both sides
train on the same examples in the same order; each batch tokenized in the
loop with the model's tokenizer.json, truncated to --seq-len and padded to
the longest text of the global batch (in evaluation, of the member's
batch; --pad max pads to --seq-len).

For a check of the arithmetic rather than of the speed (run.py --parity,
scripts/gen_finetune_reference.py): --init FILE starts the head from
sflow's own draw (finetune.sflow --init-out FILE), --dropout 0 switches
every dropout site off (the masks are the one thing the two sides cannot
draw alike), and --step-log FILE writes each optimizer step's loss,
learning rate and gradient norm as finetune.sflow's --metrics does; then
both sides follow one trajectory, to float rounding.

DDP: this process is rank 0 and starts ranks 1.. as copies of itself
(--rank R, a free loopback port); each takes its part of every global
batch exactly as std.data.batches cuts it, and scales its loss by its
share of the global batch so that DDP's averaged gradient is the
global-batch mean even when the parts differ in size (as std.train does).
Evaluation is sharded too and the correct counts summed (all_reduce).

Prints, from rank 0 (the shape examples/finetune.sflow prints, which
bench/train/run.py parses):

    epoch 1/3: train 12.345 s (81.0 samples/s), loss 1.2345, eval 3.210 s, accuracy 0.6420
    first step after 0.412 s with 1 workers
    RESULT finetune peer=torch workers=1 threads=2 samples=1000 epochs=3 train_s=37.0 eval_s=9.6 samples_per_s=81.0 accuracy=0.6420 peak_rss_mb=812.0

`first step` is wall time from this process's start (from /proc, so the
interpreter's own start-up counts) to the end of the first optimizer step;
train_s and eval_s are sums over epochs, samples_per_s is train samples
over train_s; peak_rss_mb is rank 0's ru_maxrss (run.py samples the sum
over all ranks itself).
"""
import argparse
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import fortunes_split  # noqa: E402


def process_age():
    """Seconds since this process started, from /proc (the kernel's clock)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return up - start_ticks / os.sysconf("SC_CLK_TCK")


def default_model():
    """all-MiniLM-L6-v2 where scripts/install-models.sh puts it ($SFLOW_MODELS
    first, then build/models)."""
    for d in (os.environ.get("SFLOW_MODELS", ""), os.path.join(ROOT, "build", "models")):
        if d and os.path.isfile(os.path.join(d, "all-minilm-l6-v2", "model.safetensors")):
            return os.path.join(d, "all-minilm-l6-v2")
    return os.path.join(ROOT, "build", "models", "all-minilm-l6-v2")


def args_of(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("plain", "ddp", "fsdp"), default="plain")
    ap.add_argument("--workers", type=int, default=0, help="ddp processes (default 2; plain: 1)")
    ap.add_argument("--fsdp-reshard", choices=("full", "grad-op"), default="full",
                    help="fsdp: free each unit's parameters after its forward (full: FULL_SHARD) "
                         "or keep them for its backward (grad-op: SHARD_GRAD_OP)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--categories", default="computers,politics,science,songs-poems,work")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--eval-samples", type=int, default=-1, help="default: --samples")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0, help="max global gradient norm (0: none; std.train clips at 1.0)")
    ap.add_argument("--pad", choices=("longest", "max"), default="longest")
    ap.add_argument("--init", default="", help="the head's initial weight and bias from this safetensors "
                    "file (finetune.sflow --init-out), instead of a torch-drawn init")
    ap.add_argument("--dropout", type=float, default=-1.0,
                    help="every dropout site's probability (default -1: config.json's)")
    ap.add_argument("--step-log", default="", help="a CSV row per optimizer step: step,epoch,loss,lr,grad_norm "
                    "(the columns of finetune.sflow --metrics)")
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.workers == 0:
        a.workers = 1 if a.mode == "plain" else 2
    if a.mode == "plain" and a.workers != 1:
        ap.error("--mode plain runs 1 worker")
    if a.eval_samples < 0:
        a.eval_samples = a.samples
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(a):
    """Ranks 1..workers-1 as copies of this process."""
    procs = []
    for r in range(1, a.workers):
        argv = [x for x in sys.argv[1:]]
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv,
                                       "--rank", str(r), "--port", str(a.port)]))
    return procs


def main():
    a = args_of()
    # Before torch loads, so that its OpenMP pool starts with this many threads.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    fsdp = a.mode == "fsdp"
    ddp = a.mode in ("ddp", "fsdp")     # a process group either way
    if ddp and a.rank == 0:
        a.port = free_port()
        children = spawn_ranks(a)
    import torch
    import torch.nn.functional as F
    from tokenizers import Tokenizer
    from transformers import BertModel
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=a.rank, world_size=a.workers)
    lead = a.rank == 0

    cats = a.categories.split(",")
    per_cat = fortunes_split.load(a.data, cats)
    train, evals = fortunes_split.select(per_cat, a.samples, a.eval_samples, a.seed)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=a.seq_len)
    # Each training text's tokens once (the sflow members do it in init),
    # for the global batch's longest row; the batches themselves are
    # tokenized in the loop, as the sflow side does.
    lens = [len(e.ids) for e in tok.encode_batch([t for t, _ in train])]
    tr_y = [y for _, y in train]
    ev_y = [y for _, y in evals]

    def tensors(data, idx, width):
        """(ids, mask) of data's texts at idx, padded to width: (B, T) each."""
        encs = tok.encode_batch([data[i][0] for i in idx])
        if a.pad == "max":
            width = a.seq_len
        width = width or max(len(e.ids) for e in encs)
        x = torch.zeros(len(idx), width, dtype=torch.long)
        m = torch.zeros(len(idx), width, dtype=torch.long)
        for r, e in enumerate(encs):
            x[r, :len(e.ids)] = torch.tensor(e.ids)
            m[r, :len(e.ids)] = torch.tensor(e.attention_mask)
        return x, m

    torch.manual_seed(a.seed)
    over = {}
    if a.dropout >= 0:
        over = dict(hidden_dropout_prob=a.dropout, attention_probs_dropout_prob=a.dropout)
    bert = BertModel.from_pretrained(a.model, add_pooling_layer=False, **over)
    head = torch.nn.Linear(bert.config.hidden_size, len(cats))
    # As BertForSequenceClassification (and finetune.sflow) initialise it.
    torch.nn.init.normal_(head.weight, std=0.02)
    torch.nn.init.zeros_(head.bias)
    if a.init:
        # sflow's own draw, so that both sides start from the same point.
        from safetensors.torch import load_file
        init = load_file(a.init)
        with torch.no_grad():
            for k in ("weight", "bias"):
                if k not in init or init[k].shape != getattr(head, k).shape:
                    sys.exit(f"peer_finetune: {a.init}: no {k} of shape {tuple(getattr(head, k).shape)}")
                getattr(head, k).copy_(init[k])
    drop = torch.nn.Dropout(bert.config.hidden_dropout_prob)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert, self.head, self.drop = bert, head, drop

        def forward(self, x, m):
            h = self.bert(input_ids=x, attention_mask=m).last_hidden_state   # (B, T, C)
            w = m.unsqueeze(-1).to(h.dtype)                                  # (B, T, 1)
            pooled = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)              # (B, C)
            return self.head(self.drop(pooled))                              # (B, classes)

    model = Classifier()
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (a.workers,))
        keep = a.fsdp_reshard == "grad-op"
        for layer in bert.encoder.layer:
            fully_shard(layer, mesh=mesh, reshard_after_forward=not keep)
        fully_shard(model, mesh=mesh, reshard_after_forward=not keep)
        net = model                     # the params are DTensor shards now: AdamW after this
    elif ddp:
        net = torch.nn.parallel.DistributedDataParallel(model)
    else:
        net = model
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay)
    steps_per_epoch = (len(train) + a.batch - 1) // a.batch
    total = steps_per_epoch * a.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (total - s) / total))

    lo, hi = fortunes_split.shard_range(len(evals), a.rank, a.workers)
    eval_idx = list(range(lo, hi))

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad():
            for b in range(0, len(eval_idx), a.batch):
                idx = eval_idx[b:b + a.batch]
                x, m = tensors(evals, idx, 0)
                pred = model(x, m).argmax(-1)
                correct += int((pred == torch.tensor([ev_y[i] for i in idx])).sum())
            if fsdp:
                # Every unit's forward all-gathers: a rank with fewer
                # batches runs the others' count (on one row, not counted).
                most = (len(evals) + a.workers - 1) // a.workers
                for _ in range((len(eval_idx) + a.batch - 1) // a.batch,
                               (most + a.batch - 1) // a.batch):
                    model(*tensors(evals, [0], 0))
        model.train()
        if ddp:
            t = torch.tensor([correct], dtype=torch.long)
            dist.all_reduce(t)
            correct = int(t)
        return correct / len(evals)

    model.train()
    step_log = open(a.step_log, "w") if a.step_log and lead else None
    if step_log:
        step_log.write("step,epoch,loss,lr,grad_norm\n")
    step_no = 0
    first_step = None
    train_s = eval_s = 0.0
    acc = 0.0
    for epoch in range(a.epochs):
        parts = fortunes_split.batches(len(train), a.batch, a.seed, epoch, a.rank, a.workers)
        order = fortunes_split.permutation(len(train), a.seed, epoch)
        if ddp:
            dist.barrier()
        t0 = time.perf_counter()
        loss_sum, loss_n = 0.0, 0
        for k, idx in enumerate(parts):
            gsize = min(a.batch, len(train) - k * a.batch)
            # Every part padded to the global batch's longest text, as the
            # sflow members do, so that shapes do not depend on the workers.
            glob = order[k * a.batch:(k + 1) * a.batch]
            x, m = tensors(train, idx, max(lens[i] for i in glob) if idx else 0)
            y = torch.tensor([tr_y[i] for i in idx])
            opt.zero_grad(set_to_none=True)
            logits = net(x, m)
            # This part's summed loss over the global batch, times the
            # workers DDP divides by: the gradient is the global mean.
            loss = F.cross_entropy(logits, y, reduction="sum") * (a.workers / gsize)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip if a.clip > 0 else float("inf"))
            if hasattr(norm, "full_tensor"):
                norm = norm.full_tensor()       # fsdp: a DTensor over the ranks' shards
            lr_now = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            part_loss = loss.detach() * (gsize / a.workers)     # this part's summed loss
            if ddp:
                dist.all_reduce(part_loss)
            loss_sum += float(part_loss)
            loss_n += gsize
            step_no += 1
            if step_log:
                step_log.write(f"{step_no},{epoch + 1},{float(part_loss) / gsize!r},{lr_now!r},{float(norm)!r}\n")
            if first_step is None:
                first_step = process_age()
                if lead:
                    print(f"first step after {first_step:.3f} s with {a.workers} workers", flush=True)
        if ddp:
            dist.barrier()
        t1 = time.perf_counter()
        acc = evaluate()
        t2 = time.perf_counter()
        train_s += t1 - t0
        eval_s += t2 - t1
        if lead:
            print(f"epoch {epoch + 1}/{a.epochs}: train {t1 - t0:.3f} s "
                  f"({len(train) / (t1 - t0):.1f} samples/s), loss {loss_sum / loss_n:.4f}, "
                  f"eval {t2 - t1:.3f} s, accuracy {acc:.4f}", flush=True)
    if step_log:
        step_log.close()
    if ddp:
        dist.destroy_process_group()
    if lead:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peer = ("fsdp" if a.fsdp_reshard == "full" else "fsdp/grad-op") if fsdp else "ddp" if ddp else "torch"
        print(f"RESULT finetune peer={peer} workers={a.workers} threads={a.threads} "
              f"samples={len(train)} epochs={a.epochs} train_s={train_s:.3f} eval_s={eval_s:.3f} "
              f"samples_per_s={len(train) * a.epochs / train_s:.1f} accuracy={acc:.4f} "
              f"peak_rss_mb={peak:.1f}", flush=True)
        print(f"INFO finetune peer={peer} torch {torch.__version__} threads {torch.get_num_threads()} "
              f"steps/epoch {steps_per_epoch} batch {a.batch} seq-len {a.seq_len} pad {a.pad} "
              f"train {len(train)} eval {len(evals)} categories {a.categories}", flush=True)
    if ddp and a.rank == 0:
        for p in children:
            if p.wait() != 0:
                sys.exit(f"peer_finetune: rank exited with {p.returncode}")


if __name__ == "__main__":
    main()
