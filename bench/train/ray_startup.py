#!/usr/bin/env python3
"""ray_startup.py — the start-up peer of issue 17: how long Ray Train's
TorchTrainer takes, from this process's start, to the end of the first
training step of the fine-tune with 4 CPU workers on this machine:

    build/peers/torch/venv/bin/python bench/train/ray_startup.py [--workers 4] [--steps 1]

Each worker does what examples/finetune.sflow's members do before their
first step, with the same recipe as bench/train/peer_finetune.py: loads
all-MiniLM-L6-v2 (BertModel from --model) and a Linear head, wraps it for
DDP over gloo (ray.train.torch.prepare_model), reads the fortunes of
--categories, selects and tokenizes the samples, takes its part of the
first global batch, and does one AdamW step; it reports the wall-clock time
at the end of that step (rank 0's, in a file), and this process subtracts its own
start (from /proc, so the interpreter's start-up counts, as it does for
the compiled sflow program).  ray.init is timed separately (Ray's own
start: the GCS, raylet and the worker pool), with num_cpus = workers so
that 4 one-CPU workers fit on a 2-core machine, as sflow's 4 members do.
Prints

    RESULT startup peer=ray workers=4 first_step_s=23.456 ray_init_s=4.321 fit_s=25.0
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peer_finetune import default_model, process_age  # noqa: E402


def train_loop(cfg):
    """One worker: the model, its part of the first batch, cfg["steps"] steps."""
    import sys
    sys.path.insert(0, cfg["here"])
    import torch
    import torch.nn.functional as F
    import ray.train
    import ray.train.torch
    from tokenizers import Tokenizer
    from transformers import BertModel
    from transformers.utils import logging as hf_logging
    import fortunes_split
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(cfg["threads"])
    ctx = ray.train.get_context()
    rank, workers = ctx.get_world_rank(), ctx.get_world_size()
    cats = cfg["categories"].split(",")
    train, _ = fortunes_split.select(fortunes_split.load(cfg["data"], cats), cfg["samples"],
                                     cfg["samples"], cfg["seed"])
    tok = Tokenizer.from_file(os.path.join(cfg["model"], "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=cfg["seq_len"])
    torch.manual_seed(cfg["seed"])
    bert = BertModel.from_pretrained(cfg["model"], add_pooling_layer=False)
    head = torch.nn.Linear(bert.config.hidden_size, len(cats))
    torch.nn.init.normal_(head.weight, std=0.02)
    torch.nn.init.zeros_(head.bias)
    drop = torch.nn.Dropout(bert.config.hidden_dropout_prob)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert, self.head, self.drop = bert, head, drop

        def forward(self, x, m):
            h = self.bert(input_ids=x, attention_mask=m).last_hidden_state
            w = m.unsqueeze(-1).to(h.dtype)
            return self.head(self.drop((h * w).sum(1) / w.sum(1).clamp(min=1e-9)))

    model = ray.train.torch.prepare_model(Classifier())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    parts = fortunes_split.batches(len(train), cfg["batch"], cfg["seed"], 0, rank, workers)
    order = fortunes_split.permutation(len(train), cfg["seed"], 0)
    lens = [len(e.ids) for e in tok.encode_batch([t for t, _ in train])]
    model.train()
    for k in range(cfg["steps"]):
        idx = parts[k]
        gsize = min(cfg["batch"], len(train) - k * cfg["batch"])
        encs = tok.encode_batch([train[i][0] for i in idx])
        width = max(lens[i] for i in order[k * cfg["batch"]:(k + 1) * cfg["batch"]])
        x = torch.zeros(len(idx), width, dtype=torch.long)
        m = torch.zeros(len(idx), width, dtype=torch.long)
        for r, e in enumerate(encs):
            x[r, :len(e.ids)] = torch.tensor(e.ids)
            m[r, :len(e.ids)] = torch.tensor(e.attention_mask)
        y = torch.tensor([train[i][1] for i in idx])
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, m), y, reduction="sum") * (workers / gsize)
        loss.backward()
        opt.step()
        if k == 0:
            first = time.time()
    # Ray Train 2.60's Result keeps metrics only beside a checkpoint; a file
    # in the driver's temporary folder (same machine) is simpler.
    if rank == 0:
        with open(cfg["out"], "w") as f:
            f.write(f"{first!r} {float(loss.detach())!r}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--categories", default="computers,politics,science,songs-poems,work")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    started = time.time() - process_age()          # this process's start, wall clock
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    t0 = time.perf_counter()
    ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    init_s = time.perf_counter() - t0
    cfg = dict(here=HERE, threads=a.threads, steps=a.steps, model=os.path.abspath(a.model),
               data=a.data, categories=a.categories, samples=a.samples, seq_len=a.seq_len,
               batch=a.batch, lr=a.lr, seed=a.seed)
    with tempfile.TemporaryDirectory(prefix="ray-startup-") as tmp:
        trainer = TorchTrainer(train_loop, train_loop_config=cfg,
                               scaling_config=ScalingConfig(num_workers=a.workers, use_gpu=False,
                                                            resources_per_worker={"CPU": 1}),
                               run_config=RunConfig(name="startup", storage_path=tmp))
        cfg["out"] = os.path.join(tmp, "first_step")
        t1 = time.perf_counter()
        result = trainer.fit()
        fit_s = time.perf_counter() - t1
        if result.error or not os.path.exists(cfg["out"]):
            sys.exit(f"ray_startup: the run failed: {result.error}")
        end, loss = (float(v) for v in open(cfg["out"]).read().split())
    ray.shutdown()
    first = end - started
    print(f"RESULT startup peer=ray workers={a.workers} first_step_s={first:.3f} "
          f"ray_init_s={init_s:.3f} fit_s={fit_s:.3f}", flush=True)
    print(f"INFO startup peer=ray ray {ray.__version__} workers {a.workers} threads/worker "
          f"{a.threads} steps {a.steps} loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
