#!/usr/bin/env python3
"""examples/lm_finetune.sflow against transformers + PEFT, and its files.

Cases:
  reference  the LoRA recipe (rank 4 on q, v and down, batch 1, two
             micro-batches per step) and the full fine-tune (batch 2) take
             the per-step losses that transformers + PEFT took on the same
             weights, rows, order and recipe, within 1e-4
             (tests/examples/lm_finetune/reference.json, made by
             scripts/gen_lm_reference.py); the LoRA run starts from the
             adapters its --init-out writes, which PEFT read there
  files      --out writes adapter_model.safetensors with PEFT's names and
             shapes and an adapter_config.json of the recipe
  decoder    tests/llm/lm_decoder.sflow: std.lm's logits against llm.forward's
             (the C fast path), batching, merge, adapter files, padding,
             which gradients a LoRA backward reaches
  memory     tests/llm/lm_memory.sflow: std.lm's forward_with checkpointing
             (all, every:2) bitwise as without over three AdamW steps with
             lower measured activations, bf16 autocast's losses within 5e-3
             of f32's; then lm_finetune --checkpoint-blocks all and 0,2 give
             the plain run's step losses in full (its --metrics file)
             bitwise, --autocast bf16 within 5e-3, --plan's activations
             fall with checkpointing and predict a later micro-batch's
             growth within 10%, and a bad spec, --plan with 2 workers or
             --autocast value a clear error
  bad        a missing --data, a --model that is no GGUF, an unknown
             --lora-targets entry: a clear error, non-zero exit
  workers_lora, workers_full
             1, 2 and 4 workers (and every --shard value) take the 1-worker
             run's step losses within 1e-6 relative, LoRA and full, on six
             packed rows of which the last is padded: the parts of a global
             batch hold different counts of targets, so weighting the
             members by rows instead of targets (train.step's items) fails
             it (5.35 against 5.28 at step 1)
  resume     --state: a LoRA run SIGKILLed in its second epoch, resumed from
             its first epoch's state at another --workers count and --shard
             value (2 optimizer -> 4 optimizer, 4 gradients; 4 parameters ->
             2 parameters, 1 none): the uninterrupted run's steps within
             1e-6 relative, bitwise when resumed as it ran (2 optimizer)

Needs SmolLM2 (scripts/install-models.sh) and the Debian package fortunes;
without them it exits 77 (skipped).
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GGUF = os.path.join(ROOT, "build", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
SCIENCE = "/usr/share/games/fortunes/science"
REFERENCE = os.path.join(ROOT, "tests", "examples", "lm_finetune", "reference.json")
COMMON = ["--data", SCIENCE, "--steps", "3", "--seq-len", "32", "--seed", "0"]
RECIPES = {
    "lora": COMMON + ["--batch", "1", "--accum", "2", "--lr", "1e-3", "--lora-rank", "4",
                      "--lora-alpha", "8", "--lora-targets", "q_proj,v_proj,down_proj"],
    "full": COMMON + ["--batch", "2", "--accum", "1", "--lr", "1e-5", "--lora-rank", "0"],
}
failures = []


def flag(flags, name):
    return flags[flags.index(name) + 1]


def step_losses(out):
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)", out, re.M)]


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def run(exe, *flags, cwd=None):
    return subprocess.run([exe, "--model", GGUF, *flags], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def case_reference(exe, tmp):
    with open(REFERENCE) as f:
        ref = json.load(f)
    check(ref["recipes"] == RECIPES, "the reference was made for these recipes (else rerun "
          "scripts/gen_lm_reference.py)")
    for kind, flags in RECIPES.items():
        t0 = time.time()
        rows = os.path.join(tmp, "rows-%s.txt" % kind)
        p = run(exe, *flags, "--rows-out", rows, "--timing=false", cwd=tmp)
        secs = time.time() - t0
        check(p.returncode == 0, "%s: exit %d %s" % (kind, p.returncode, p.stderr.strip()[-300:]))
        mine = step_losses(p.stdout)
        want = ref[kind]
        if os.path.exists(rows):
            with open(rows) as f:
                ids = [[int(x) for x in line.split()] for line in f]
            sha = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
            check(sha == ref["rows_" + kind], "%s: the %d packed rows are the reference's (SHA-256 of their ids)"
                  % (kind, len(ids)))
        print("  sflow         " + " ".join("%.6f" % x for x in mine))
        print("  transformers  " + " ".join("%.6f" % x for x in want) + "   (%.1f s)" % secs)
        check(len(mine) == len(want), "%s: %d steps, the reference %d" % (kind, len(mine), len(want)))
        if len(mine) == len(want):
            d = max(abs(a - b) for a, b in zip(mine, want))
            check(d < 1e-4, "%s: step losses within 1e-4 of transformers + PEFT (largest difference %.3g)"
                  % (kind, d))


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def case_files(exe, tmp):
    out = os.path.join(tmp, "adapter")
    os.makedirs(out)
    p = run(exe, "--data", SCIENCE, "--steps", "1", "--seq-len", "8", "--batch", "1", "--lora-rank", "2",
            "--lora-targets", "q_proj,gate_proj", "--out", out, "--timing=false", cwd=tmp)
    check(p.returncode == 0 and "saved the adapters to" in p.stdout,
          "--out: exit %d %s" % (p.returncode, p.stderr.strip()[-300:]))
    if p.returncode != 0:
        return
    h = header(os.path.join(out, "adapter_model.safetensors"))
    names = sorted(k for k in h if k != "__metadata__")
    check(len(names) == 30 * 2 * 2, "--out: 120 tensors (30 layers, 2 projections, A and B), %d" % len(names))
    a = h.get("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {})
    b = h.get("base_model.model.model.layers.29.mlp.gate_proj.lora_B.weight", {})
    check(a.get("shape") == [2, 576] and b.get("shape") == [1536, 2],
          "--out: PEFT's names and shapes (q_proj A %s, gate_proj B %s)" % (a.get("shape"), b.get("shape")))
    with open(os.path.join(out, "adapter_config.json")) as f:
        c = json.load(f)
    check(c["peft_type"] == "LORA" and c["r"] == 2 and c["lora_alpha"] == 16.0 and
          c["target_modules"] == ["q_proj", "gate_proj"],
          "--out: adapter_config.json of the recipe (%s)" % {k: c.get(k) for k in ("r", "lora_alpha", "target_modules")})


def case_bad(exe, tmp):
    notgguf = os.path.join(tmp, "x.gguf")
    with open(notgguf, "w") as f:
        f.write("not a gguf\n")
    cases = [
        ("a missing --data", ["--data", os.path.join(tmp, "nowhere")], r"--data \S*nowhere does not exist"),
        ("an unknown --lora-targets entry", ["--data", SCIENCE, "--lora-targets", "q_proj,qkv"],
         r"\"qkv\" is not a projection"),
        ("--seq-len 1", ["--data", SCIENCE, "--seq-len", "1"], r"--seq-len must be at least 2"),
    ]
    small = os.path.join(tmp, "small-bad.txt")
    with open(small, "w") as f:
        f.write(SMALL_TEXT)
    four, junk = os.path.join(tmp, "state-rank4"), os.path.join(tmp, "state-junk")
    os.makedirs(four)
    os.makedirs(junk)
    with open(os.path.join(junk, "state.bin"), "w") as f:
        f.write("not a state\n")
    tiny = ["--data", small, "--seq-len", "8", "--journal=false"]
    p = run(exe, "--steps", "1", *tiny, "--lora-rank", "4", "--state", four, cwd=tmp)
    check(p.returncode == 0 and "saved the state at step 1" in p.stdout,
          "--state: a rank-4 run saves its state (exit %d)" % p.returncode)
    cases += [
        ("--state of a run with another LoRA rank", tiny + ["--lora-rank", "2", "--state", four],
         r"train.load_state: saved tensor 0 has 2304 values where param 0 has 1152 \(another model\)"),
        ("--state holding a file io.save did not write", tiny + ["--state", junk],
         r"state.bin\S* not a file written by io.save"),
        ("--state that is no folder", tiny + ["--state", os.path.join(tmp, "nowhere")],
         r"--state \S*nowhere is not a folder"),
    ]
    for what, flags, want in cases:
        p = run(exe, "--steps", "1", *flags, cwd=tmp)
        check(p.returncode != 0 and re.search(want, p.stderr) is not None,
              "%s: exit %d, %s" % (what, p.returncode, p.stderr.strip()[-200:]))
    p = subprocess.run([exe, "--model", notgguf, "--data", SCIENCE, "--steps", "1"], capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    check(p.returncode != 0 and "x.gguf" in p.stderr, "a --model that is no GGUF: exit %d, %s"
          % (p.returncode, p.stderr.strip()[-200:]))


# Six short paragraphs packed into rows of 16 tokens: six rows, the last
# with 10 targets and 5 padding tokens where the others have 15, so every
# epoch (batch 4: a micro-batch of 4 rows, then of 2) has a step with the
# padded row, split over 2 or 4 members (4: one with no rows).
SMALL_TEXT = """The sea was calm and the boats came home before the sun went down.

A cat sat by the window and watched the rain fall on the garden all day.

Two trains left the station at noon, one going north and one going south.

The old clock in the hall struck nine, and everyone went to bed.

She planted tomatoes in spring and picked them red in late summer.

Bread rises slowly in a cold kitchen.
"""
WORKERS = {
    # (flags, [(workers, shard)]): the first is the 1-worker run the others match
    "workers_lora": (["--steps", "3", "--lora-rank", "4", "--lr", "1e-3"],
                     [(1, "none"), (2, "none"), (4, "none"), (2, "optimizer"), (4, "gradients"),
                      (4, "parameters")]),
    "workers_full": (["--steps", "2", "--lora-rank", "0", "--lr", "1e-5"],
                     [(1, "none"), (2, "gradients"), (4, "parameters")]),
}


def metrics_losses(path):
    with open(path) as f:
        return [float(line.split(",")[2]) for line in f.read().splitlines()[1:]]


def case_workers(exe, tmp, which):
    text = os.path.join(tmp, "small.txt")
    with open(text, "w") as f:
        f.write(SMALL_TEXT)
    flags, runs = WORKERS[which]
    base = None
    for workers, shard in runs:
        what = "%s: %d workers, --shard %s" % (which, workers, shard)
        m, rows = os.path.join(tmp, "m.csv"), os.path.join(tmp, "rows.txt")
        t0 = time.time()
        p = run(exe, "--data", text, "--seq-len", "16", "--batch", "4", *flags, "--workers", str(workers),
                "--shard", shard, "--metrics", m, "--rows-out", rows, "--timing=false",
                "--journal=false", cwd=tmp)
        check(p.returncode == 0, "%s: exit %d %s" % (what, p.returncode, p.stderr.strip()[-300:]))
        if p.returncode != 0:
            continue
        losses = metrics_losses(m)
        if base is None:
            with open(rows) as f:
                ids = [line.split() for line in f]
            # the pad is the eos (2) here: the last row ends in 5 of them after its own eos
            check(len(ids) == 6 and ids[-1][-6:] == ["2"] * 6 and ids[-2][-1] != "2",
                  "%s: six rows, the last padded (%s)" % (which, ids[-1] if ids else None))
            base = losses
            print("  1 worker  " + " ".join(repr(x) for x in losses) + "   (%.1f s)" % (time.time() - t0))
            continue
        d = max(abs(a - b) / abs(b) for a, b in zip(losses, base)) if len(losses) == len(base) else 1.0
        print("  %d %-10s " % (workers, shard) + " ".join(repr(x) for x in losses) +
              "   (%.1f s, largest relative difference %.2g)" % (time.time() - t0, d))
        check(len(losses) == len(base) and d < 1e-6,
              "%s: the 1-worker step losses within 1e-6 relative (%.2g)" % (what, d))


# Two epochs of 2 steps (six rows, batch 3, the padded row in each epoch);
# --state saves after each epoch.
RESUME = ["--seq-len", "16", "--batch", "3", "--steps", "4", "--lora-rank", "4", "--lr", "1e-3",
          "--timing=false", "--journal=false"]


def case_resume(exe, tmp):
    """SIGKILL in epoch 2 (after epoch 1's state was saved), then a run with
    another --workers (and --shard) resumes from the state: its steps are
    the uninterrupted run's within 1e-6 relative, bitwise at the same
    count."""
    text = os.path.join(tmp, "small.txt")
    with open(text, "w") as f:
        f.write(SMALL_TEXT)
    common = ["--model", GGUF, "--data", text, *RESUME]

    def go(workers, shard, *extra):
        m = os.path.join(tmp, "m.csv")
        p = subprocess.run([exe, *common, "--workers", str(workers), "--shard", shard, "--metrics", m, *extra],
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp)
        check(p.returncode == 0, "%d workers --shard %s %s: exit %d %s" % (workers, shard, " ".join(extra),
                                                                          p.returncode, p.stderr.strip()[-300:]))
        return p.stdout, (metrics_losses(m) if p.returncode == 0 else [])

    def killed(workers, shard, state):
        os.makedirs(state)
        p = subprocess.Popen([exe, *common, "--workers", str(workers), "--shard", shard, "--state", state],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, cwd=tmp)
        out = ""
        for line in p.stdout:
            out += line
            if line.startswith("saved the state at step 2"):
                break
        p.send_signal(signal.SIGKILL)
        rest, _ = p.communicate(timeout=60)
        out += rest
        # epoch 2's steps print when its call returns: none means the kill landed in it
        check(p.returncode == -signal.SIGKILL and "step 3 " not in out and "saved the state at step 2" in out,
              "%d workers --shard %s: SIGKILLed in epoch 2, after epoch 1's state (exit %s)"
              % (workers, shard, p.returncode))

    cases = [
        # (killed run's workers and shard, the resumed runs' [(workers, shard)])
        ((2, "optimizer"), [(2, "optimizer"), (4, "optimizer"), (4, "gradients")]),
        ((4, "parameters"), [(2, "parameters"), (1, "none")]),
    ]
    for (w0, sh0), resumes in cases:
        _, whole = go(w0, sh0)
        print("  %d --shard %-10s uninterrupted %s" % (w0, sh0, " ".join(repr(x) for x in whole)))
        state = os.path.join(tmp, "state-%d-%s" % (w0, sh0))
        killed(w0, sh0, state)
        saved = os.path.join(tmp, "saved.bin")
        shutil.copyfile(os.path.join(state, "state.bin"), saved)
        for w, sh in resumes:
            shutil.copyfile(saved, os.path.join(state, "state.bin"))
            out, got = go(w, sh, "--state", state)
            what = "killed at %d --shard %s, resumed at %d --shard %s" % (w0, sh0, w, sh)
            check(re.search(r"^resumed from \S+ at step 2 on %d workers$" % w, out, re.M) is not None,
                  "%s: resumed at step 2" % what)
            want = whole[2:]
            d = max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == len(want) == 2 else 1.0
            print("  resumed at %d --shard %-10s %s   (largest relative difference %.2g)"
                  % (w, sh, " ".join(repr(x) for x in got), d))
            if w == w0 and sh == sh0:
                check(got == want, "%s: bitwise the uninterrupted run's steps 3 and 4" % what)
            else:
                check(len(got) == 2 and d < 1e-6, "%s: steps 3 and 4 within 1e-6 of the uninterrupted "
                      "run's (%.2g)" % (what, d))


def case_decoder(sflowc, tmp):
    exe = os.path.join(tmp, "lm_decoder")
    subprocess.run([sflowc, os.path.join(ROOT, "tests", "llm", "lm_decoder.sflow"), "-o", exe], check=True)
    d = os.path.join(tmp, "decoder")
    os.makedirs(d)
    p = subprocess.run([exe, "--gguf", GGUF, "--dir", d], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    sys.stdout.write(p.stdout)
    check(p.returncode == 0 and p.stdout.count("ok ") == 7,
          "lm_decoder: exit %d, %d checks ok %s" % (p.returncode, p.stdout.count("ok "), p.stderr.strip()[-300:]))


def case_memory(sflowc, exe, tmp):
    prog = os.path.join(tmp, "lm_memory")
    subprocess.run([sflowc, os.path.join(ROOT, "tests", "llm", "lm_memory.sflow"), "-o", prog], check=True)
    p = subprocess.run([prog, "--gguf", GGUF], capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    sys.stdout.write(p.stdout)
    check(p.returncode == 0 and p.stdout.count("ok ") == 5,
          "lm_memory: exit %d, %d checks ok %s" % (p.returncode, p.stdout.count("ok "), p.stderr.strip()[-300:]))
    small = os.path.join(tmp, "small-memory.txt")
    with open(small, "w") as f:
        f.write(SMALL_TEXT)
    base = ["--data", small, "--steps", "2", "--seq-len", "16", "--batch", "2", "--lora-rank", "4",
            "--lr", "1e-3", "--journal=false"]
    losses, acts = {}, {}
    for name, extra in [("plain", []), ("all", ["--checkpoint-blocks", "all"]),
                        ("list", ["--checkpoint-blocks", "0,2"]), ("bf16", ["--autocast", "bf16"])]:
        m = os.path.join(tmp, "memory-%s.csv" % name)
        q = run(exe, *base, *extra, "--metrics", m, "--plan", cwd=tmp)
        check(q.returncode == 0, "lm_finetune %s: exit %d %s" % (extra, q.returncode, q.stderr.strip()[-200:]))
        losses[name] = metrics_losses(m) if q.returncode == 0 else []
        a = re.search(r"activations ([\d.]+) \(measured", q.stdout)
        g = re.search(r"growth: predicted ([\d.]+) MB, measured ([\d.]+) MB", q.stdout)
        acts[name] = float(a.group(1)) if a else 0.0
        check(g is not None and abs(float(g.group(1)) - float(g.group(2))) <= 0.1 * float(g.group(2)),
              "--plan %s: a later micro-batch's growth within 10%% of the plan's (%s)" % (extra, g and g.groups()))
    check(0 < acts["all"] < acts["list"] < acts["plain"],
          "--plan: the measured activations fall with checkpointing (%s)" % acts)
    check(len(losses["plain"]) == 2 and losses["all"] == losses["plain"] and losses["list"] == losses["plain"],
          "--checkpoint-blocks all and 0,2: the step losses bitwise (%s)" % losses)
    worst = max([abs(a - b) / abs(b) for a, b in zip(losses["bf16"], losses["plain"])] or [1.0])
    check(len(losses["bf16"]) == 2 and 0 < worst < 5e-3,
          "--autocast bf16: step losses within 5e-3 relative of f32's (%.2g)" % worst)
    for flags, want in [(["--checkpoint-blocks", "30"], r"checkpoint block 30 of a model with 30 blocks"),
                        (["--checkpoint-blocks", "every:0"], r"every:K needs a whole K of at least 1"),
                        (["--checkpoint-blocks", "some"], r"\"some\" is not none, all, every:K or a list"),
                        (["--autocast", "fp16"], r"--autocast must be f32 or bf16, not fp16"),
                        (["--plan", "--workers", "2"], r"--plan with --workers 2 needs --plan-activations MB")]:
        q = run(exe, *base, *flags, cwd=tmp)
        check(q.returncode != 0 and re.search(want, q.stderr) is not None,
              "%s: exit %d, %s" % (flags, q.returncode, q.stderr.strip()[-200:]))


def case_plan_workers(exe, tmp):
    """--plan at 2 workers: a full fine-tune's training growth of the
    whole process (both members' tensors) within 10% of the plan's for
    the 2 members, given the activations a 1-worker run measured, under
    --shard parameters (FSDP's units) and gradients."""
    small = os.path.join(tmp, "small-plan.txt")
    with open(small, "w") as f:
        f.write(SMALL_TEXT)
    base = ["--data", small, "--steps", "2", "--seq-len", "16", "--batch", "2", "--lora-rank", "0",
            "--lr", "1e-4", "--journal=false", "--plan"]
    q = run(exe, *base, cwd=tmp)
    a = re.search(r"activations ([\d.]+) \(measured", q.stdout)
    check(q.returncode == 0 and a is not None, "--plan, 1 worker: exit %d, %s" % (q.returncode, q.stdout[-300:]))
    for shard in ("parameters", "gradients"):
        q = run(exe, *base, "--workers", "2", "--shard", shard, "--plan-activations", a.group(1), cwd=tmp)
        sys.stdout.write(q.stdout[-400:])
        g = re.search(r"training growth, 2 workers: predicted ([\d.]+) MB, measured ([\d.]+) MB", q.stdout)
        check(q.returncode == 0 and g is not None and
              abs(float(g.group(1)) - float(g.group(2))) <= 0.1 * float(g.group(2)),
              "--plan --workers 2 --shard %s: the process's training growth within 10%% of the plan's (%s)"
              % (shard, g and g.groups()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--only", choices=("reference", "files", "bad", "decoder", "memory", "plan_workers", "example",
                                       "workers_lora", "workers_full", "resume"),
                    default=None, help="example: reference, files and bad")
    args = ap.parse_args()
    if not os.path.isfile(GGUF) or not os.path.isfile(SCIENCE):
        print("skipped: needs %s (scripts/install-models.sh) and %s (the Debian package fortunes)"
              % (GGUF, SCIENCE))
        return 77
    tmp = tempfile.mkdtemp(prefix="sflow-lm-finetune-test-")
    try:
        exe = os.path.join(tmp, "lm_finetune")
        subprocess.run([args.sflowc, os.path.join(ROOT, "examples", "lm_finetune.sflow"), "-o", exe], check=True)
        if args.only in (None, "decoder"):
            case_decoder(args.sflowc, tmp)
        if args.only in (None, "memory"):
            case_memory(args.sflowc, exe, tmp)
        if args.only in (None, "plan_workers"):
            case_plan_workers(exe, tmp)
        if args.only in (None, "bad", "example"):
            case_bad(exe, tmp)
        if args.only in (None, "files", "example"):
            case_files(exe, tmp)
        if args.only in (None, "reference", "example"):
            case_reference(exe, tmp)
        for which in WORKERS:
            if args.only in (None, which):
                case_workers(exe, tmp, which)
        if args.only in (None, "resume"):
            case_resume(exe, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
