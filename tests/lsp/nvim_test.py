#!/usr/bin/env python3
"""Neovim's built-in LSP client (Neovim 0.7.2 from Debian, headless) against
`sflowc --lsp`: it completes `nn.` to Linear, shows the signature of
`nn.attention(`, hovers a std function's doc, goes to its definition (the
read-only std copy), lists references, renames a struct field across two
files and formats a file.  nvim_client.lua does the editing and writes its
results as JSON; this script sets up a copy of tests/lsp/project and checks.

    nvim_test.py SFLOWC [--nvim PROGRAM]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL", what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sflowc")
    ap.add_argument("--nvim", default="nvim")
    args = ap.parse_args()
    if not shutil.which(args.nvim):
        print("nvim not found: scripts/install-deps.sh installs neovim")
        sys.exit(1)
    tmp = tempfile.mkdtemp(prefix="sflow-nvim-")
    project = os.path.join(tmp, "project")
    shutil.copytree(os.path.join(HERE, "project"), project)
    with open(os.path.join(project, "messy.sflow"), "w") as f:
        f.write("fn f(a:i64,b :i64)->i64{\nreturn a+b\n}\nworkflow main(){print(f(1,-2))}\n")
    out = os.path.join(tmp, "out.json")
    env = dict(os.environ, SFLOWC=os.path.abspath(args.sflowc), PROJECT=project, OUT=out,
               XDG_CACHE_HOME=os.path.join(tmp, "cache"), XDG_CONFIG_HOME=os.path.join(tmp, "config"),
               XDG_DATA_HOME=os.path.join(tmp, "data"), XDG_STATE_HOME=os.path.join(tmp, "state"))
    cmd = [args.nvim, "--headless", "--clean", "-n", "-i", "NONE",
           "-c", "luafile " + os.path.join(HERE, "nvim_client.lua")]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        print("FAIL nvim did not finish in 120 s")
        sys.exit(1)
    if not os.path.exists(out):
        print("FAIL nvim wrote no results; rc %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(1)
    res = json.load(open(out))
    for name, v in res.items():
        if isinstance(v, dict) and "error" in v:
            print("step %s: %s" % (name, v["error"]))

    start = res.get("start", {})
    check(start.get("ready") is True, "the client started and initialized: %r" % start)
    check(start.get("diagnostics") == 0, "no diagnostics on the project: %r" % start)
    words = res.get("completion", {}).get("words", [])
    check(words == ["Linear"], "completion of nn.Li through the client gives Linear, got %r" % words)
    sig = "\n".join(res.get("signature", {}).get("lines", []))
    check("fn attention(q: tensor, k: tensor, v: tensor" in sig and "scaled dot-product" in sig,
          "signature help of nn.attention(: %r" % sig[:200])
    check(res.get("signature", {}).get("active") == 1, "second parameter active")
    hov = "\n".join(res.get("hover", {}).get("lines", []))
    check("fn zeros(shape: i64[]) -> tensor" in hov and "Zeros, and ones, of the shape." in hov,
          "hover on zeros shows its doc: %r" % hov)
    d = res.get("definition", {})
    check(d.get("file", "").endswith("/sflow/std/0.1.0/nn.sflow") and os.path.exists(d.get("file", "")),
          "definition of zeros opens the std copy: %r" % d)
    files = res.get("references", {}).get("files", [])
    check(sorted(files) == ["main.sflow"] * 3 + ["shapes.sflow"] * 3, "references in the quickfix list: %r" % files)
    ren = res.get("rename", {})
    main_text, shapes_text = "\n".join(ren.get("main", [])), "\n".join(ren.get("shapes", []))
    check("p.px * scale" in main_text and "p.px," in main_text and "{ px: 3.0" in main_text,
          "rename edited main.sflow: %r" % main_text)
    check("  px: f64" in shapes_text and "p.px * p.px" in shapes_text and ".x" not in shapes_text,
          "rename edited shapes.sflow (loaded by the client): %r" % shapes_text)
    fmt = res.get("format", {}).get("lines", [])
    want = ["fn f(a: i64, b: i64) -> i64 {", "  return a + b", "}", "workflow main() { print(f(1, -2)) }"]
    check(fmt == want, "formatting through the client: %r" % fmt)
    shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (checks - len(failures), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
