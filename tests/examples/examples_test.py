#!/usr/bin/env python3
"""examples_test.py — what a new user of the examples sees, case by case.

    examples_test.py --sflowc PATH CASE     run one case
    examples_test.py --list                 the case names

Cases:
  io_resolve           std.io's resolve from another folder than the source's:
                       a path found from the working directory, one found next
                       to the source (its absolute path), one found nowhere,
                       an absolute one and "" (both unchanged).
  fortunes_utf8        examples/fortunes.sflow over a folder of UTF-8 text
                       (`--only ""`, every file): typographic quotes, dashes
                       and accented letters at the ends of words are cut at
                       character boundaries, never inside a UTF-8 sequence;
                       the words keep their accents and lose their quotes.
  help_descriptions    --help of a small program: each flag's description is the
                       comment above its parameter (not one on a line shared with
                       another parameter), names dashed, both spellings accepted;
                       and every example describes every flag.
  finetune_timing_off  examples/finetune.sflow with --timing=false and
                       --log-every 1 prints no time and no samples/s, in its
                       epoch lines or in std.train's step lines.  Needs the
                       model of scripts/install-models.sh ($SFLOW_MODELS or
                       <build>/models) and Debian's fortunes package.
  gpt_sample           examples/gpt.sflow on a short run: the step losses fall
                       from about ln(vocab), two runs with one --seed sample
                       the same text (another seed another), bad flags are
                       clear errors; --checkpoint-blocks gives byte-identical
                       weights after 10 steps (the same gradients bit for bit)
                       at a lower peak of tensor memory.  Needs Debian's fortunes package.
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
failures = []


def check(cond, what, got=None):
    if not cond:
        print("FAIL " + what + ("" if got is None else "\n  got: %r" % (got,)))
        failures.append(what)
    return cond


def compile_example(sflowc, name, tmp):
    exe = os.path.join(tmp, name)
    p = subprocess.run([sflowc, os.path.join(EXAMPLES, name + ".sflow"), "-o", exe],
                       capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit("examples_test: %s.sflow does not compile:\n%s" % (name, p.stderr))
    return exe


UTF8_TEXT = """\u00abCaf\u00e9\u00bb, said the na\u00efve man \u2014 \u201creally\u201d\u2026
%
\u2018\u00dcber\u2019 is not \u00bfqu\u00e9? nor \u00e9t\u00e9.
%
"""
UTF8_WORDS = {"café": 1, "said": 1, "the": 1, "naïve": 1, "man": 1, "really": 1, "Über": 1,
              "is": 1, "not": 1, "qué": 1, "nor": 1, "été": 1}


def case_fortunes_utf8(sflowc, tmp, args):
    exe = compile_example(sflowc, "fortunes", tmp)
    data = os.path.join(tmp, "text")
    os.mkdir(data)
    with open(os.path.join(data, "utf8"), "w", encoding="utf-8") as f:
        f.write(UTF8_TEXT)
    out = os.path.join(tmp, "out")
    p = subprocess.run([exe, "--dir", data, "--only", "", "--shards", "2", "--out", out],
                       capture_output=True, text=True, timeout=120)
    if not check(p.returncode == 0, "fortunes --only \"\" over UTF-8 text exits 0",
                 (p.returncode, p.stderr[-800:])):
        return
    check("read 2 records from 1 files: utf8" in p.stdout, "it reads the two records", p.stdout)
    with open(out + ".words.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    got = {r["word"]: int(r["count"]) for r in rows} if rows and "word" in rows[0] else rows
    check(got == UTF8_WORDS, "the words keep their accents (lower() maps ASCII only) and lose their quotes and dashes", got)


def case_finetune_timing_off(sflowc, tmp, args):
    model = os.path.join(args.models, "all-minilm-l6-v2")
    if not os.path.isdir(model):
        sys.exit("examples_test: no model at %s; run `bash scripts/install-models.sh`" % model)
    exe = compile_example(sflowc, "finetune", tmp)
    p = subprocess.run([exe, "--model", model, "--workers", "2", "--categories",
                        "computers,science", "--samples", "16", "--eval-samples", "4", "--epochs",
                        "1", "--seq-len", "8", "--log-every", "1", "--timing=false"],
                       capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, "finetune --timing=false exits 0",
                 (p.returncode, p.stderr[-800:])):
        return
    steps = [l for l in p.stdout.splitlines() if l.startswith("step ")]
    check(len(steps) == 1, "--log-every 1 prints the one step's line", p.stdout)
    check("samples/s" not in p.stdout, "no samples/s anywhere with --timing=false", p.stdout)
    check(not re.search(r"\d s\b|RESULT", p.stdout), "no seconds and no RESULT line", p.stdout)
    check("epoch 1/1: 16 samples in 1 steps" in p.stdout, "the epoch line without figures",
          p.stdout)


def case_gpt_sample(sflowc, tmp, args):
    exe = compile_example(sflowc, "gpt", tmp)
    run = lambda *a: subprocess.run([exe, "--steps", "60", "--log-every", "20", "--out", "",
                                     "--sample", "80"] + list(a),
                                    capture_output=True, text=True, timeout=300)
    p = run("--seed", "3")
    if not check(p.returncode == 0, "gpt exits 0", (p.returncode, p.stderr[-800:])):
        return
    losses = [float(l.split()[3]) for l in p.stdout.splitlines() if l.startswith("step ")]
    check(len(losses) == 3 and losses[-1] < losses[0] and losses[0] < 4.6,
          "three step lines, the loss falling from below ln(99)", p.stdout)
    sample = p.stdout.split("\nsample:\n", 1)[-1]
    check(len(sample) >= 40, "a sample is printed", p.stdout)
    check(run("--seed", "3").stdout == p.stdout, "the same seed gives the same losses and text")
    check(run("--seed", "4").stdout.split("\nsample:\n", 1)[-1] != sample,
          "another seed samples another text")
    # Activation checkpointing: the same gradients bit for bit (so the
    # weights after the steps are byte-identical files), less peak memory.
    outs, peaks = [], []
    for extra in [[], ["--checkpoint-blocks"]]:
        w = os.path.join(tmp, "w%d.safetensors" % len(outs))
        q = subprocess.run([exe, "--steps", "10", "--log-every", "5", "--sample", "0", "--layers", "3",
                            "--out", w] + extra, capture_output=True, text=True, timeout=300)
        check(q.returncode == 0, "gpt %s exits 0" % extra, q.stderr[-400:])
        outs.append(open(w, "rb").read() if os.path.exists(w) else b"")
        m = re.search(r"peak tensor memory ([\d.]+) MiB", q.stdout)
        peaks.append(float(m.group(1)) if m else 0.0)
    check(outs[0] and outs[0] == outs[1], "--checkpoint-blocks: bitwise the same weights after 10 steps")
    check(0 < peaks[1] < peaks[0] * 0.9, "--checkpoint-blocks: peak tensor memory lower", peaks)
    for flags, msg in [(["--width", "30", "--heads", "4"], "--width 30 must be a positive multiple of --heads 4"),
                       (["--steps", "0"], "--steps must be at least 1"),
                       (["--data", os.path.join(tmp, "none")], "does not exist")]:
        q = subprocess.run([exe] + flags, capture_output=True, text=True, timeout=60)
        check(q.returncode != 0 and msg in q.stderr, "gpt %s is a clear error" % " ".join(flags),
              (q.returncode, q.stderr[-400:]))


HELP_PROGRAM = """workflow main(
  // who to greet: this line and the next
  // are one description
  name: str = "world",
  // the number of lines
  times: i64 = 3, loud: bool = false,
  eval_samples: i64 = 8) {
  print(name, times, loud, eval_samples)
}
"""
HELP_WANT = [
    "--name str", "who to greet: this line and the next are one description (default \"world\")",
    "--times i64", "the number of lines (default 3)",
    "--loud bool", "(default false)",  # shares a line: the comment is not its
    "--eval-samples i64", "(default 8)",
]
# serve.sflow's flags are std.serve's example, kept by its owner (issue 26).
HELP_EXEMPT = set()


def flag_lines(help_text):
    """(flag column, description) of each line of --help's "Flags:" part."""
    part = help_text.split("\nFlags:\n", 1)[1].split("\n\nRuntime flags:", 1)[0]
    rows = []
    for line in part.splitlines():
        if line.startswith("  --"):
            m = re.match(r"  (--\S+ \S+)\s+(.*)$", line)
            rows.append([m.group(1), m.group(2)])
        elif rows:
            rows[-1][1] += " " + line.strip()
    return rows


def case_help_descriptions(sflowc, tmp, args):
    src = os.path.join(tmp, "greet.sflow")
    with open(src, "w") as f:
        f.write(HELP_PROGRAM)
    exe = os.path.join(tmp, "greet")
    subprocess.run([sflowc, src, "-o", exe], check=True, timeout=120)
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    rows = flag_lines(p.stdout)
    check([x for r in rows for x in r] == HELP_WANT,
          "--help: the comment lines above a parameter on its own line, dashed names", rows)
    p = subprocess.run([exe, "--eval_samples", "2", "--eval-samples=5"], capture_output=True,
                       text=True, timeout=60)
    check(p.stdout.strip() == "world 3 false 5", "both spellings are accepted", p.stdout)
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".sflow") or name in HELP_EXEMPT or not os.path.isfile(os.path.join(EXAMPLES, name)):
            continue
        exe = compile_example(sflowc, name[:-6], tmp)
        p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
        for flag, desc in flag_lines(p.stdout):
            check(not desc.startswith("("), "%s --help describes %s" % (name, flag), desc)
            check("_" not in flag, "%s --help writes %s dashed" % (name, flag))


RESOLVE_PROGRAM = """import std.io
workflow main() {
  for p in ["here.txt", "data/next.txt", "data/nowhere.txt", "/no/such/file", "", "both.txt"] {
    print("[" + io.resolve(p) + "]")
  }
}
"""


def case_io_resolve(sflowc, tmp, args):
    src, run = os.path.join(tmp, "src"), os.path.join(tmp, "run")
    os.makedirs(os.path.join(src, "data"))
    os.makedirs(run)
    for path in [os.path.join(run, "here.txt"), os.path.join(src, "data", "next.txt"),
                 os.path.join(src, "both.txt"), os.path.join(run, "both.txt")]:
        open(path, "w").close()
    with open(os.path.join(src, "paths.sflow"), "w") as f:
        f.write(RESOLVE_PROGRAM)
    exe = os.path.join(tmp, "paths")
    subprocess.run([sflowc, os.path.join(src, "paths.sflow"), "-o", exe], check=True, timeout=120)
    p = subprocess.run([exe], capture_output=True, text=True, timeout=60, cwd=run)
    want = ["[here.txt]", "[%s/data/next.txt]" % os.path.realpath(src), "[data/nowhere.txt]",
            "[/no/such/file]", "[]", "[both.txt]"]
    check(p.returncode == 0 and p.stdout.splitlines() == want,
          "io.resolve: the working directory first, then the source's folder, else unchanged",
          (p.returncode, p.stdout, p.stderr))


CASES = {"io_resolve": case_io_resolve, "fortunes_utf8": case_fortunes_utf8, "finetune_timing_off": case_finetune_timing_off,
         "help_descriptions": case_help_descriptions, "gpt_sample": case_gpt_sample}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--models", default=None, help="default: $SFLOW_MODELS or <build>/models")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    if not a.sflowc or a.case not in CASES:
        ap.error("--sflowc and one of: " + ", ".join(CASES))
    a.sflowc = os.path.abspath(a.sflowc)
    build = os.path.dirname(os.path.dirname(a.sflowc))
    a.models = a.models or os.environ.get("SFLOW_MODELS") or os.path.join(build, "models")
    with tempfile.TemporaryDirectory() as tmp:
        CASES[a.case](a.sflowc, tmp, a)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("PASS " + a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
