"""The kill-and-resume check that maps_resume_test.py and nn_resume_test.py
share: compile a program, run it once with --journal=false (the
reference), then SIGKILL runs after a number of printed lines and resume
them; every resume must print exactly the reference output, and from
`restored_from` lines on the actor must come back from a checkpoint (its
state read back from bytes), not from init.  The reference must end with
"done"."""
import difflib
import os
import signal
import subprocess
import tempfile


def run(exe, ckdir, extra=(), kill_after_lines=None):
    """Runs the program; with kill_after_lines, SIGKILLs it once that many
    lines are out.  Returns (rc, stdout, stderr)."""
    cmd = [exe, "--checkpoint-dir", ckdir] + list(extra)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    if kill_after_lines is not None:
        for _ in range(kill_after_lines):
            line = p.stdout.readline()
            if not line:
                break
            out += line
        p.send_signal(signal.SIGKILL)
    rest, err = p.communicate(timeout=120)
    return p.returncode, (out + rest).decode(), err.decode()


def check(sflowc, source, kills, restored_from):
    """0 when every kill point resumes to the reference output, else 1."""
    failures = 0
    name = os.path.splitext(os.path.basename(source))[0]
    with tempfile.TemporaryDirectory(prefix="sflow-%s-" % name) as tmp:
        exe = os.path.join(tmp, name)
        subprocess.run([sflowc, source, "-o", exe], check=True)
        rc, ref, err = run(exe, os.path.join(tmp, "ref"), ["--journal=false"])
        if rc != 0 or not ref.endswith("done\n"):
            print("FAIL reference run exited %d\n%s" % (rc, err))
            return 1
        for k in kills:
            ck = os.path.join(tmp, "kill-%d" % k)
            rc, part, _ = run(exe, ck, kill_after_lines=k)
            if rc == 0:
                print("FAIL kill-after-%d: the run finished before it was killed" % k)
                failures += 1
                continue
            rc, out, err = run(exe, ck, ["--resume"])
            if rc != 0 or out != ref:
                diff = "".join(difflib.unified_diff(ref.splitlines(True), out.splitlines(True),
                                                    "uninterrupted", "resumed", n=1))
                print("FAIL kill-after-%d: resume exited %d\n%s%s" % (k, rc, diff[:3000], err))
                failures += 1
                continue
            if k >= restored_from and " 1 actor restored" not in err:
                print("FAIL kill-after-%d: the actor was not restored from a checkpoint:\n%s"
                      % (k, err))
                failures += 1
                continue
            print("PASS kill-after-%d (%d of %d lines before the kill)"
                  % (k, part.count("\n"), ref.count("\n")))
    return 1 if failures else 0
