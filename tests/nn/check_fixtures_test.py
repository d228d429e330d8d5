#!/usr/bin/env python3
"""check_fixtures_test.py — proves tests/nn/check_fixtures.py tells right
answers from wrong ones, with tests/nn/replay_runner.py as the runner: the
fixtures' own values pass, every file; one value moved past the tolerance
fails the case it is in (and only that case) in every file, naming the
place; a move inside the tolerance passes; a flipped sign of zero fails the
exact safetensors fixture; a missing case, a missing key, a wrong shape, a
NaN, an integer off by one, a runner that crashes or prints non-JSON all
fail with a message saying so.  tests/nn/check_safetensors.py (Python
alone) reads the fixture's safetensors file exactly as the safetensors
package did, and refuses each breach of the format with its rule.

    python3 tests/nn/check_fixtures_test.py [--torch build/peers/torch]

With --torch (the folder bench/nn/setup.sh made) also: the committed fixtures
equal a fresh run of scripts/gen_nn_fixtures.py byte for byte, and torch in
float32 (the generator's --runner) passes the checker, which shows the
tolerances suit an f32 implementation.  Without it, or when the folder is
missing, those two are reported as skipped, not passed; --torch-only runs
just those two and exits 77 when they are skipped (ctest's "not run").
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(HERE, "check_fixtures.py")
REPLAY = f"{shlex.quote(sys.executable)} {shlex.quote(os.path.join(HERE, 'replay_runner.py'))}"
FIXTURES = sorted(glob.glob(os.path.join(HERE, "fixtures", "*.json")))
results = {"passed": 0, "failed": 0, "skipped": 0}


def check(runner, files, *extra):
    p = subprocess.run([sys.executable, CHECK, "--runner", runner, *extra, *files],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def expect(name, ok, out):
    if ok:
        results["passed"] += 1
        print(f"ok   {name}")
    else:
        results["failed"] += 1
        print(f"FAIL {name}\n" + "".join("    " + l + "\n" for l in out.splitlines()[-12:]))


def n_cases(files):
    return sum(len(json.load(open(f))["cases"]) for f in files)


def first_number(expect_obj, path=""):
    """The path and value of the first number of an `expect` (its first
    tensor's [0])."""
    if isinstance(expect_obj, dict) and "data" in expect_obj and "shape" in expect_obj:
        return (f"{path}[0]", expect_obj["data"][0]) if expect_obj["data"] else None
    if isinstance(expect_obj, dict):
        items = expect_obj.items()
    elif isinstance(expect_obj, list):
        items = ((f"[{i}]", v) for i, v in enumerate(expect_obj))
    else:
        return None
    for k, v in items:
        sub = path + k if k.startswith("[") else (f"{path}.{k}" if path else k)
        r = first_number(v, sub)
        if r:
            return r
    return None


def test_replay_passes():
    rc, out = check(REPLAY, FIXTURES)
    want = f"{n_cases(FIXTURES)} passed, 0 failed"
    expect(f"replay: all {len(FIXTURES)} fixtures, {want}", rc == 0 and out.strip().endswith(want), out)


def test_perturb_each_file():
    for f in FIXTURES:
        doc = json.load(open(f))
        c = doc["cases"][0]
        path, v = first_number(c["expect"])
        tol = c.get("tolerance", doc["tolerance"])
        if isinstance(v, int):
            delta = 1  # an index: any change is wrong
        else:  # ten times the tolerance; for the exact fixture, one part in a million
            delta = 10 * (tol["atol"] + tol["rtol"] * abs(v)) or abs(v) * 1e-6 or 1e-30
        spec = shlex.quote(f"{c['name']}:{path}:{delta!r}")
        rc, out = check(f"{REPLAY} --perturb {spec}", [f])
        want = f"{len(doc['cases']) - 1} passed, 1 failed"
        expect(f"perturb {doc['op']}/{c['name']} {path} by {delta:.2g}: fails there only",
               rc == 1 and want in out and f"FAIL {doc['op']}/{c['name']}" in out and path in out, out)


def test_within_tolerance():
    f = os.path.join(HERE, "fixtures", "matmul.json")
    doc = json.load(open(f))
    c = doc["cases"][1]
    v = c["expect"]["output"]["data"][0]
    delta = 0.5 * (doc["tolerance"]["atol"] + doc["tolerance"]["rtol"] * abs(v))
    rc, out = check(f"{REPLAY} --perturb {c['name']}:output[0]:{delta!r}", [f])
    expect("a move of half the tolerance passes", rc == 0, out)
    rc, out = check(f"{REPLAY} --perturb {c['name']}:output[0]:{delta!r}", [f], "--rtol", "0", "--atol", "1e-12")
    expect("... and fails under --rtol 0 --atol 1e-12", rc == 1 and "output[0]" in out, out)


def test_damage():
    mm = os.path.join(HERE, "fixtures", "matmul.json")
    am = os.path.join(HERE, "fixtures", "argmax.json")
    st = os.path.join(HERE, "fixtures", "safetensors.json")
    cases = [
        ("a dropped case", f"{REPLAY} --drop mat_2d_2d", mm, "printed no line"),
        ("a missing key", f"{REPLAY} --drop-key mat_2d_2d:grads", mm, "grads: missing"),
        ("a wrong shape", f"{REPLAY} --set 'mat_2d_2d:output.shape:[2, 3]'", mm, "want shape [3, 2], got [2, 3]"),
        ("a NaN", f"{REPLAY} --set mat_2d_2d:grads.b[1]:NaN", mm, "grads.b[1]"),
        ("an argmax off by one", f"{REPLAY} --perturb axis1:output[0]:1", am, "output[0]: want"),
        ("an argmax as a float", f"{REPLAY} --perturb axis1:output[0]:0.5", am, "output[0]: want"),
        ("-0.0 read as 0.0 (exact fixture)",
         f"{REPLAY} --set 'hf_small:tensors.encoder.layer.0.attention.self.query.weight.tensor[5]:0.0'",
         st, "want exactly -0.0, got 0.0"),
        ("a string changed", f"{REPLAY} --set 'hf_small:tensors.embeddings.LayerNorm.bias.dtype:\"F16\"'",
         st, 'want "BF16"'),
        ("a runner that fails", f"{REPLAY} --exit 3", mm, "runner exited 3"),
        ("a runner printing non-JSON", f"{REPLAY} --garbage", mm, "is not JSON"),
        ("a runner that is not there", "/nonexistent/runner", mm, "runner exited 127"),
    ]
    for name, runner, f, msg in cases:
        rc, out = check(runner, [f])
        expect(f"{name}: fails, saying {msg!r}", rc == 1 and msg in out, out)


def craft(path, header, data, pad=True):
    """A safetensors file from a header object and data bytes."""
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def test_safetensors_reader():
    st = os.path.join(HERE, "fixtures", "safetensors.json")
    reader = os.path.join(HERE, "check_safetensors.py")
    rc, out = check(f"{shlex.quote(sys.executable)} {shlex.quote(reader)} --runner", [st])
    expect("check_safetensors.py (Python alone) reads hf_small.safetensors exactly as the safetensors package",
           rc == 0 and "1 passed, 0 failed" in out, out)
    good = os.path.join(HERE, "fixtures", "hf_small.safetensors")
    p = subprocess.run([sys.executable, reader, good, "--expect", st], capture_output=True, text=True)
    expect("... and --expect the fixture passes", p.returncode == 0, p.stdout + p.stderr)
    blob = open(good, "rb").read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    f32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        bad = []
        def add(name, msg, **kw):
            bad.append((name, os.path.join(tmp, name.replace(" ", "_") + ".safetensors"), msg, kw))
        add("truncated to 4 bytes", "shorter than the 8-byte header length", raw=blob[:4])
        add("a header past the end", "runs past the end", raw=(10**6).to_bytes(8, "little") + blob[8:])
        add("the data not 8-byte aligned", "8-byte aligned", header={"a": f32}, data=b"\0" * 8, pad=False)
        add("a header that is not JSON", "not UTF-8 JSON", raw=(8).to_bytes(8, "little") + b"{nope!! " + b"\0" * 8)
        add("an unknown dtype", "unknown dtype 'F8'", header={"a": dict(f32, dtype="F8")}, data=b"\0" * 8)
        add("offsets of the wrong size", "hold 4 bytes; F32 [2] needs 8",
            header={"a": dict(f32, data_offsets=[0, 4])}, data=b"\0" * 4)
        add("a gap between tensors", "starts at 12, but the tensors before it end at 8 (a gap)",
            header={"a": f32, "b": dict(f32, data_offsets=[12, 20])}, data=b"\0" * 20)
        add("overlapping tensors", "(an overlap)",
            header={"a": f32, "b": dict(f32, data_offsets=[4, 12])}, data=b"\0" * 12)
        add("data left over", "cover 8 bytes of data, the file holds 16", header={"a": f32}, data=b"\0" * 16)
        add("metadata that is not strings", "__metadata__ must be an object of strings",
            header={"__metadata__": {"n": 1}, "a": f32}, data=b"\0" * 8)
        changed = bytearray(blob)
        changed[8 + n] ^= 0x01  # the first byte of the first tensor
        add("one bit of data changed", "1 difference(s)", raw=bytes(changed), expect=True)
        for name, path, msg, kw in bad:
            if "raw" in kw:
                open(path, "wb").write(kw["raw"])
            else:
                craft(path, kw["header"], kw["data"], kw.get("pad", True))
            cmd = [sys.executable, reader, path] + (["--expect", st] if kw.get("expect") else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            out = p.stdout + p.stderr
            expect(f"safetensors {name}: exit 1, saying {msg!r}", p.returncode == 1 and msg in out, out)


def test_torch(peers):
    py = os.path.join(peers, "venv", "bin", "python")
    if not os.access(py, os.X_OK):
        results["skipped"] += 2
        print(f"skip fixtures against a fresh run and torch-f32: no {py} (bash bench/nn/setup.sh)")
        return
    gen = os.path.join(ROOT, "scripts", "gen_nn_fixtures.py")
    p = subprocess.run([py, gen, "--check"], capture_output=True, text=True)
    expect("the committed fixtures equal a fresh run of gen_nn_fixtures.py", p.returncode == 0, p.stdout + p.stderr)
    rc, out = check(f"{shlex.quote(py)} {shlex.quote(gen)} --runner", FIXTURES)
    expect(f"torch in float32 passes every fixture ({out.strip().splitlines()[-1]})", rc == 0, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", help="the PyTorch peers folder (bench/nn/setup.sh), for the two torch checks")
    ap.add_argument("--torch-only", action="store_true",
                    help="only the two torch checks; exit 77 (skipped) when --torch names no venv")
    a = ap.parse_args()
    if a.torch_only:
        test_torch(a.torch or os.path.join(ROOT, "build", "peers", "torch"))
        print(f"{results['passed']} passed, {results['failed']} failed"
              + (f", {results['skipped']} skipped" if results["skipped"] else ""))
        sys.exit(1 if results["failed"] else 77 if results["skipped"] else 0)
    test_replay_passes()
    test_perturb_each_file()
    test_within_tolerance()
    test_damage()
    test_safetensors_reader()
    if a.torch:
        test_torch(a.torch)
    line = f"{results['passed']} passed, {results['failed']} failed"
    print(line + (f", {results['skipped']} skipped" if results["skipped"] else ""))
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
