#!/usr/bin/env python3
"""commands_test.py — the commands a new user copies run as written.

The shell commands of README.md's blocks that compile an example, and of
the header of every file in examples/ (the comment lines indented three
spaces, `//   sflowc examples/hello.sflow -o hello && ./hello ...`), are
read from those files, not copied here, and run one after the other in
bash, each of which must exit 0:

  readme         README.md's blocks, from the repository root;
  headers_root   every example's header, from the repository root, as
                 written;
  headers_examples  the same from examples/: `sflowc NAME.sflow`, and each
                 argument that names a path from the root written from
                 examples/ (`examples/data/corpus` as `data/corpus`,
                 `build/models/...` as `../build/models/...`), which is
                 what docs/examples.md tells a user there to type.

"The repository root" is a scratch folder laid out as one: `build` is a
link to the build folder, `scripts` to scripts/, and `examples` a folder
of links to each file of examples/, so the executables the commands write
land in the scratch folder, never in the source tree.  `sflowc` is on
PATH (the headers write it bare).  What a command may not do here is
changed, each change named in the log, and nothing else:

  - a port (`--port 8000`, `localhost:8000`) becomes a free one, and a
    server started in the foreground runs in the background; the test
    waits for /healthz before the next command (a user waits for the
    "listening" line), and stops it with SIGTERM at the end of its block
    unless the block does, requiring exit 0 either way;
  - finetune's commands get the small recipe appended (later flags win):
    two categories, 8 + 4 samples, 1 epoch, 8 tokens; a `--nodes` run
    (it needs SSH hosts) is not run, and said so;
  - /tmp/NAME becomes a path in the scratch folder.

    commands_test.py --sflowc PATH CASE
    commands_test.py --list
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
SMALL_FINETUNE = (" --categories computers,science --samples 8 --eval-samples 4 --epochs 1"
                  " --seq-len 8")
failures = []


def check(cond, what, got=None):
    if not cond:
        print("FAIL " + what + ("" if got is None else "\n  got: %s" % (got,)))
        failures.append(what)
    return cond


# ------------------------------------------------------------ reading

def readme_blocks():
    """The README's fenced blocks that compile an example: lists of lines."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    out = [[l for l in b.splitlines() if l.strip()] for b in blocks
           if re.search(r"sflowc examples/\w+\.sflow", b)]
    return out


def header_commands(path):
    """The command lines of an example's header: its first run of comment
    lines indented three spaces, before the first line that is not a comment."""
    cmds = []
    for line in open(path, encoding="utf-8"):
        if not line.startswith("//"):
            break
        m = re.match(r"^//   (\S.*)$", line.rstrip("\n"))
        if m:
            cmds.append(m.group(1))
        elif cmds:
            break
    return cmds


# ----------------------------------------------------------- adapting

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def from_examples(cmd):
    """cmd as a user in examples/ types it: paths from the root rewritten."""
    words = cmd.split(" ")
    out = []
    for w in words:
        if w.startswith("examples/"):
            w = w[len("examples/"):]
        elif w.startswith("build/") or w.startswith("scripts/"):
            w = "../" + w
        out.append(w)
    return " ".join(out)


def adapt(cmds, tmp, where):
    """The block as the test runs it: a bash script, and the notes on what
    was changed.  Returns (script, notes, servers)."""
    port = free_port()
    notes, lines = [], []
    servers = 0
    for c in cmds:
        orig = c
        if where == "examples":
            c = from_examples(c)
        c = re.sub(r"(?<![\w.])/tmp/", tmp + "/scratch-", c)
        if "8000" in c:
            c = c.replace("--port 8000", "--port %d" % port).replace("localhost:8000",
                                                                     "localhost:%d" % port)
        if re.search(r"\./finetune\b", c):
            if "--nodes" in c:
                notes.append("not run (needs SSH hosts): " + orig)
                continue
            c = re.sub(r"(\./finetune\b[^#&]*?)(\s*#.*)?$", lambda m: m.group(1) + SMALL_FINETUNE, c)
        if re.search(r"\./\w+\b[^#]*--port\b", c):
            # A server (an executable given --port: ./serve, ./llm_serve).
            # `sflowc ... && ./serve ...`: the compile first, then the
            # server alone in the background, so that %1 is the server.
            if " && " in c:
                first, c = c.rsplit(" && ", 1)
                lines.append(first)
            c = c.rstrip()
            bg = c.endswith("&") or re.search(r"&\s*#", c)
            if not bg:
                c = re.sub(r"(\s*#.*)?$", "", c) + " &"
                notes.append("in the background: " + orig)
            servers += 1
            lines.append(c)
            lines.append("wait_port %d" % port)
            continue
        if c != orig:
            notes.append("ran %r as %r" % (orig, c))
        lines.append(c)
    # A server the block did not stop is stopped here, and must exit 0.
    tail = ""
    if servers and not any(re.match(r"kill\b.*%1", l) for l in lines):
        tail = "kill -TERM %1\n"
    if servers:
        tail += 'wait %1; rc=$?; [ "$rc" = 0 ] || { echo "server exited $rc" >&2; exit 1; }\n'
    script = PRELUDE + "\n".join("run_line %s" % sh_quote(l) if not l.startswith("wait_port")
                                 and not re.search(r"&\s*(#.*)?$", l) else l for l in lines)
    return script + "\n" + tail, notes


PRELUDE = r"""set -u
run_line() {
  echo "+ $1" >&2
  eval "$1"
  local rc=$?
  if [ $rc != 0 ]; then echo "command failed with exit $rc: $1" >&2; exit 1; fi
}
wait_port() {
  for i in $(seq 1 600); do
    if curl -s -o /dev/null "localhost:$1/healthz"; then return 0; fi
    if ! kill -0 %1 2>/dev/null; then echo "the server exited before it listened" >&2; exit 1; fi
    sleep 0.1
  done
  echo "no server on port $1 after 60 s" >&2; exit 1
}
"""


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


# -------------------------------------------------------------- running

def make_root(tmp, build):
    """A scratch folder laid out as the repository root (see the docstring)."""
    root = os.path.join(tmp, "root")
    os.makedirs(os.path.join(root, "examples"))
    os.symlink(build, os.path.join(root, "build"))
    os.symlink(os.path.join(ROOT, "scripts"), os.path.join(root, "scripts"))
    os.symlink(os.path.join(ROOT, "tests"), os.path.join(root, "tests"))
    for name in os.listdir(EXAMPLES):
        os.symlink(os.path.join(EXAMPLES, name), os.path.join(root, "examples", name))
    return root


def run_block(name, cmds, cwd, tmp, where, sflowc):
    script, notes = adapt(cmds, tmp, where)
    for n in notes:
        print("  note: " + n)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sflowc) + os.pathsep + env.get("PATH", "")
    t0 = time.time()
    # Its own session, so that whatever a failed block leaves running (a
    # server) is killed with it and never holds the output pipes open.
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += "\n(killed after 300 s)"
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    print("%-32s exit %d in %.1f s" % (name, p.returncode, time.time() - t0))
    check(p.returncode == 0, "%s: every command exits 0" % name,
          "\n--- stderr (tail):\n%s\n--- stdout (tail):\n%s" % (p.stderr[-3000:], p.stdout[-1500:]))
    return p


def case_readme(sflowc, tmp, root):
    blocks = readme_blocks()
    check(len(blocks) >= 2, "README.md has blocks that compile examples", len(blocks))
    for i, b in enumerate(blocks):
        p = run_block("README block %d (%s)" % (i + 1, b[0][:40]), b, root, tmp, "root", sflowc)
        # The serve block says what the answers hold; its first answers them.
        if any("./serve" in l for l in b) and p.returncode == 0:
            check('"label": 0' in p.stdout, "README serve block: /predict answers label 0",
                  p.stdout[-500:])
            check(re.search(r"^ok$", p.stdout, re.M), "README serve block: /healthz says ok",
                  p.stdout[-500:])


def all_headers():
    out = []
    for name in sorted(os.listdir(EXAMPLES)):
        if name.endswith(".sflow") and os.path.isfile(os.path.join(EXAMPLES, name)):
            cmds = header_commands(os.path.join(EXAMPLES, name))
            check(any(c.startswith("sflowc examples/" + name) for c in cmds),
                  "%s's header compiles it (sflowc examples/%s ...)" % (name, name), cmds)
            out.append((name, cmds))
    return out


def case_headers(sflowc, tmp, root, where):
    cwd = root if where == "root" else os.path.join(root, "examples")
    for name, cmds in all_headers():
        run_block("%s from %s" % (name, "the root" if where == "root" else "examples/"), cmds, cwd,
                  tmp, where, sflowc)


CASES = {
    "readme": case_readme,
    "headers_root": lambda s, t, r: case_headers(s, t, r, "root"),
    "headers_examples": lambda s, t, r: case_headers(s, t, r, "examples"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    if not a.sflowc or a.case not in CASES:
        ap.error("--sflowc and one of: " + ", ".join(CASES))
    if not shutil.which("curl"):
        sys.exit("commands_test: curl is missing (scripts/install-deps.sh installs it)")
    sflowc = os.path.abspath(a.sflowc)
    build = os.path.dirname(os.path.dirname(sflowc))
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(tmp, build)
        CASES[a.case](sflowc, tmp, root)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("PASS " + a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
