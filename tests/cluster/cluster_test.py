#!/usr/bin/env python3
"""Multi-node tests against real sshd servers on loopback.

Each case starts its own sshd processes (one per simulated node, on
127.0.0.2, 127.0.0.3, ... with a free port each), with an ed25519 host key
per server, a user key and a private known_hosts generated for the test,
compiles a small workflow with sflowc, and runs the real executable with
--nodes.  After every case no worker process may be left.

    cluster_test.py --sflowc PATH CASE     run one case (exit 77: skipped)
    cluster_test.py --list                 the case names

Needs /usr/sbin/sshd and ssh-keygen (openssh-server, installed by
scripts/install-deps.sh).  As root, sshd runs with privilege separation in
/run/sshd, which is created when missing; as another user sshd can only log
in that same user, which is all the tests need.
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

SKIP = 77
SSHD = "/usr/sbin/sshd"
PROGRAM = """workflow main(n: i64 = 3) {
  print("head says", n * 14)
}
"""


class Fail(Exception):
    pass


def check(cond, what, *details):
    if not cond:
        raise Fail(what + "".join("\n--- " + str(d) for d in details))


def free_port(addr):
    s = socket.socket()
    s.bind((addr, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def keygen(path, passphrase=""):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "sflow-test",
                    "-f", path], check=True, stdin=subprocess.DEVNULL)


class Cluster:
    """n sshd servers; hostfile, known_hosts and user key in self.dir."""

    def __init__(self, sflowc, n, port=None):
        self.port = port  # one port on every address (OpenMPI needs that)
        self.sflowc = sflowc
        self.dir = tempfile.mkdtemp(prefix="sflow-cluster-")
        self.procs = []
        self.hosts = []
        self.cache = os.path.join(self.dir, "remote-cache")
        self.user_key = os.path.join(self.dir, "user_key")
        keygen(self.user_key)
        shutil.copy(self.user_key + ".pub", os.path.join(self.dir, "authorized_keys"))
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for i in range(n):
            self.start_sshd(i)
        self.known_hosts = os.path.join(self.dir, "known_hosts")
        self.write_known_hosts()
        self.hostfile = os.path.join(self.dir, "hosts.txt")
        with open(self.hostfile, "w") as f:
            f.write("# simulated nodes, one sshd each\n")
            for addr, port, _ in self.hosts:
                f.write(f"{addr}:{port} slots=1\n")
        src = os.path.join(self.dir, "prog.sflow")
        with open(src, "w") as f:
            f.write(PROGRAM)
        self.prog = os.path.join(self.dir, "prog")
        r = subprocess.run([sflowc, src, "-o", self.prog], capture_output=True, text=True)
        check(r.returncode == 0, "sflowc failed", r.stderr)

    def start_sshd(self, i):
        addr = f"127.0.0.{2 + i}"
        port = self.port or free_port(addr)
        key = os.path.join(self.dir, f"host{i}_key")
        keygen(key)
        cfg = os.path.join(self.dir, f"sshd{i}.conf")
        with open(cfg, "w") as f:
            f.write(f"""ListenAddress {addr}:{port}
HostKey {key}
PidFile {self.dir}/sshd{i}.pid
AuthorizedKeysFile {self.dir}/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin yes
Subsystem sftp internal-sftp
LogLevel VERBOSE
MaxStartups 200
MaxSessions 50
""")
        log = open(os.path.join(self.dir, f"sshd{i}.log"), "w")
        p = subprocess.Popen([SSHD, "-D", "-e", "-f", cfg], stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection((addr, port), timeout=1).close()
                break
            except OSError:
                if p.poll() is not None or time.time() > deadline:
                    raise Fail(f"sshd on {addr}:{port} did not start:\n" + self.sshd_log(i))
                time.sleep(0.05)
        self.hosts.append((addr, port, key))

    def sshd_log(self, i):
        with open(os.path.join(self.dir, f"sshd{i}.log")) as f:
            return f.read()

    def known_line(self, i, key=None):
        addr, port, hostkey = self.hosts[i]
        with open((key or hostkey) + ".pub") as f:
            kind, blob = f.read().split()[:2]
        return f"[{addr}]:{port} {kind} {blob}\n"

    def write_known_hosts(self, lines=None):
        with open(self.known_hosts, "w") as f:
            f.write("".join(lines if lines is not None else
                            [self.known_line(i) for i in range(len(self.hosts))]))

    def compile(self, name, source):
        src = os.path.join(self.dir, name + ".sflow")
        with open(src, "w") as f:
            f.write(source)
        exe = os.path.join(self.dir, name)
        r = subprocess.run([self.sflowc, src, "-o", exe], capture_output=True, text=True)
        check(r.returncode == 0, "sflowc failed", r.stderr)
        return exe

    def args(self, *extra, hostfile=None, prog=None):
        return [prog or self.prog, "--nodes", hostfile or self.hostfile, "--ssh-key", self.user_key,
                "--known-hosts", self.known_hosts, "--remote-cache", self.cache,
                "--connect-timeout", "5", *extra]

    def run(self, *extra, timeout=60, hostfile=None, prog=None):
        t0 = time.time()
        r = subprocess.run(self.args(*extra, hostfile=hostfile, prog=prog), capture_output=True,
                           text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        r.seconds = time.time() - t0
        return r

    def start(self, *extra, prog=None):
        return subprocess.Popen(self.args(*extra, prog=prog), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def worker_of(self, node):
        """pid of the worker process of node `node`, or None."""
        for pid in self.workers():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if cmd[cmd.index("--sflow-worker") + 1].startswith(f"{node}@"):
                return pid
        return None

    def workers(self):
        """pids of processes running an executable from this test's cache."""
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if self.cache in cmd and "--sflow-worker" in cmd:
                pids.append(int(d))
        return pids

    def expect_no_workers(self, within=15.0):
        # Workers end within a second when idle; under a loaded make test
        # (TSan and valgrind builds beside) sshd's teardown has been seen to
        # take over 5 s, so the bound leaves room without hiding a leak.
        # "None" must hold for half a second: sshd may still be starting a
        # command the head asked for just before it ended, and a worker
        # caught in that gap is not yet in /proc on the first look.
        deadline = time.time() + within
        quiet_since = None
        while time.time() < deadline:
            if self.workers():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.time()
            elif time.time() - quiet_since >= 0.5:
                break
            time.sleep(0.1)
        left = self.workers()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        check(not left, f"worker processes left behind: {left}")

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        for pid in self.workers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if os.environ.get("SFLOW_KEEP_TMP"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


_readers = {}


def read_until(stream, pattern, timeout):
    """Lines of stream until one matches pattern (or timeout).  A thread per
    stream reads lines into a queue, so buffered lines are never missed."""
    import queue
    import threading
    if stream not in _readers:
        q = queue.Queue()

        def pump():
            for line in iter(stream.readline, ""):
                q.put(line)
            q.put(None)
        threading.Thread(target=pump, daemon=True).start()
        _readers[stream] = q
    q = _readers[stream]
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            line = q.get(timeout=max(0.01, deadline - time.time()))
        except queue.Empty:
            break
        if line is None:
            q.put(None)
            break
        seen.append(line)
        if re.search(pattern, line):
            return line, seen
    raise Fail(f"no line matching {pattern!r} within {timeout} s:\n" + "".join(seen))


def drain(stream):
    """What is left of a stream read by read_until, once it has ended."""
    q = _readers.get(stream)
    if not q:
        return stream.read()
    out = []
    while True:
        line = q.get(timeout=30)
        if line is None:
            q.put(None)
            return "".join(out)
        out.append(line)


def node_pids(proc, n):
    pids = {}
    for _ in range(n):
        line, _ = read_until(proc.stdout, r"^node \d+ ", 30)
        m = re.match(r"node (\d+) \S+ pid (\d+)", line)
        pids[int(m.group(1))] = int(m.group(2))
    return pids


# ----------------------------------------------------------------- cases

def deploy(c, n):
    r = c.run("--cluster-log")
    check(r.returncode == 0, f"exit {r.returncode}", r.stderr)
    check(r.stdout == "head says 42\n", "workflow output", r.stdout)
    for k in range(1, n + 1):
        check(re.search(rf"node {k} ready: 127\.0\.0\.{k + 1}:\d+ ", r.stderr),
              f"node {k} not ready", r.stderr)
    # The simulated hosts share one file system: at least one copies, the
    # others may find that copy already in place.
    check(re.search(r"ready: .*copied", r.stderr), "nothing copied", r.stderr)
    check("all nodes stopped" in r.stderr, "no orderly stop", r.stderr)
    copies = [f for f in os.listdir(c.cache) if f.startswith("sflow-")]
    check(len(copies) == 1 and not [f for f in os.listdir(c.cache) if f.endswith(".tmp")],
          "cache content", os.listdir(c.cache))
    c.expect_no_workers()
    # Second run: the copy is found by its content hash, not sent again.
    r = c.run("--cluster-log", "--n", "1")
    check(r.returncode == 0 and r.stdout == "head says 14\n", "second run", r.stderr)
    check(len(re.findall(r"ready: .*cached", r.stderr)) == n, "copy not reused", r.stderr)
    c.expect_no_workers()


def case_deploy_2(c):
    deploy(c, 2)


def case_deploy_4(c):
    deploy(c, 4)


def case_changed_host_key(c):
    other = os.path.join(c.dir, "impostor_key")
    keygen(other)
    c.write_known_hosts([c.known_line(0), c.known_line(1, key=other)])
    for extra in ([], ["--accept-new-host-keys"]):
        r = c.run(*extra)
        addr, port, _ = c.hosts[1]
        check(r.returncode == 69, f"exit {r.returncode} (want 69)", r.stderr)
        check(re.search(rf"{re.escape(addr)}:{port}: host key has CHANGED", r.stderr),
              "message names the host and says host key", r.stderr)
        check(r.stdout == "", "workflow must not run", r.stdout)
    # Refused BEFORE authenticating: that sshd never saw a publickey attempt.
    log = c.sshd_log(1)
    check("Accepted publickey" not in log and "Failed publickey" not in log,
          "credentials were offered to the impostor", log)
    c.expect_no_workers()


def case_unknown_host_key(c):
    c.write_known_hosts([c.known_line(0)])
    r = c.run()
    addr, port, _ = c.hosts[1]
    check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
    check(re.search(rf"{re.escape(addr)}:{port}: unknown host key", r.stderr), "message",
          r.stderr)
    check("Accepted publickey" not in c.sshd_log(1), "authenticated to an unknown host")
    # Nothing is copied or started on the good host either: start-up checks
    # every host before it deploys to any.
    check("Starting session" not in c.sshd_log(0), "a session started on node 1",
          c.sshd_log(0))
    c.expect_no_workers()
    # Trust on first use records the key; later runs need no flag.
    r = c.run("--accept-new-host-keys")
    check(r.returncode == 0, f"TOFU run exit {r.returncode}", r.stderr)
    with open(c.known_hosts) as f:
        kh = f.read()
    check(f"[{addr}]:{port} ssh-ed25519" in kh, "key not recorded", kh)
    r = c.run()
    check(r.returncode == 0, "run after TOFU", r.stderr)
    c.expect_no_workers()


def case_unreachable_host(c):
    # A port nobody listens on: refused at once.  A listener that never
    # speaks SSH: bounded by --connect-timeout.
    dead = free_port("127.0.0.9")
    silent = socket.socket()
    silent.bind(("127.0.0.8", 0))
    silent.listen(8)
    hostfile = os.path.join(c.dir, "bad_hosts.txt")
    for entry, limit, text in ((f"127.0.0.9:{dead}", 3, "cannot connect"),
                               (f"127.0.0.8:{silent.getsockname()[1]}", 5 + 3, "handshake")):
        with open(hostfile, "w") as f:
            f.write(f"127.0.0.2:{c.hosts[0][1]}\n{entry}\n")
        r = c.run("--connect-timeout", "2", hostfile=hostfile, timeout=30)
        check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
        check(entry + ":" in r.stderr and text in r.stderr, "message names the host", r.stderr)
        check(r.seconds < limit, f"took {r.seconds:.1f} s (limit {limit})")
        c.expect_no_workers()
    silent.close()


def case_bad_user_key(c):
    wrong = os.path.join(c.dir, "wrong_key")
    keygen(wrong)
    enc = os.path.join(c.dir, "encrypted_key")
    keygen(enc, passphrase="secret words")
    shutil.copy(enc + ".pub", os.path.join(c.dir, "authorized_keys"))  # right key, locked
    for key in (wrong, enc):
        args = c.args()
        args[args.index("--ssh-key") + 1] = key
        t0 = time.time()
        r = subprocess.run(args, capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL, env={**os.environ, "SSH_AUTH_SOCK": ""})
        check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
        check(re.search(r"127\.0\.0\.2:\d+: public-key authentication as \S+ with", r.stderr),
              "message names host and authentication", r.stderr)
        check(time.time() - t0 < 5, f"took {time.time() - t0:.1f} s")
    c.expect_no_workers()


def case_wrong_secret(c):
    head = c.start("--cluster-log", "--sflow-selftest", "hold:60")
    try:
        line, _ = read_until(head.stderr, r"control plane listening on", 30)
        endpoint = line.split()[-1]
        node_pids(head, len(c.hosts))
        fake = subprocess.run([c.prog, "--sflow-worker", f"1@{endpoint}"],
                              input="ab" * 32 + "\n", capture_output=True, text=True, timeout=20)
        check(fake.returncode != 0, "impostor worker accepted", fake.stderr)
        check("refused" in fake.stderr or "prove" in fake.stderr, "worker message", fake.stderr)
        read_until(head.stderr, r"refused control connection from 127\.0\.0\.\d+:\d+: wrong HMAC",
                   10)
        # Garbage instead of a handshake is refused too, and the head lives on.
        s = socket.create_connection(tuple(endpoint.rsplit(":", 1)[0:1]) +
                                     (int(endpoint.rsplit(":", 1)[1]),))
        s.sendall(b"\xff" * 64)
        s.close()
        read_until(head.stderr, r"refused control connection", 10)
        check(head.poll() is None, "head died")
    finally:
        # The head is SIGKILLed: every worker must notice and exit on its own.
        head.kill()
        head.wait()
    c.expect_no_workers(within=6)


def case_allreduce_3(c):
    allreduce(c, 3)


def case_allreduce_4(c):
    allreduce(c, 4)


def allreduce(c, n):
    # Counts on both sides of each algorithm switch in runtime/ring.c for
    # 4-byte types (recursive doubling to 32 KB, halving to 128 KB for 4
    # members, the ring above); 8-byte types move them around.
    counts = "1,3,1000,8192,8193,32768,32769,65537,1000003"
    for t in ("f32", "f64", "i32", "i64"):
        r = c.run("--sflow-selftest", f"allreduce:{counts}:{t}:2", timeout=120)
        check(r.returncode == 0, f"{t}: exit {r.returncode}", r.stdout, r.stderr)
        lines = r.stdout.strip().splitlines()
        check(len(lines) == counts.count(",") + 1 and all(f"nodes={n} type={t}" in l and " exact " in l
                                      for l in lines), f"{t}: results", r.stdout, r.stderr)
    c.expect_no_workers()


def lost_case(c, sig, pattern, limit):
    head = c.start("--sflow-selftest", "hold:60")
    victim = None
    try:
        pids = node_pids(head, len(c.hosts))
        victim = pids[2]
        t0 = time.time()
        os.kill(victim, sig)
        head.wait(timeout=limit + 10)
        took = time.time() - t0
        err = drain(head.stderr)
        check(head.returncode == 69, f"head exit {head.returncode}", err)
        check(re.search(r"node 2 \(127\.0\.0\.3:\d+\) lost: " + pattern, err), "message", err)
        check(took < limit, f"detected after {took:.1f} s (limit {limit})")
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
        if victim and sig == signal.SIGSTOP:
            os.kill(victim, signal.SIGCONT)  # it must now notice the head is gone
    c.expect_no_workers(within=6)


def case_worker_sigkill(c):
    lost_case(c, signal.SIGKILL, r"(its control connection closed|its process ended)", 4)


def case_worker_sigstop(c):
    lost_case(c, signal.SIGSTOP, r"no heartbeat for 3\.\d s", 6)


def case_head_sigkill(c):
    head = c.start("--sflow-selftest", "hold:60")
    try:
        pids = node_pids(head, len(c.hosts))
        check(len(c.workers()) == len(c.hosts), "workers running", c.workers(), pids)
        # The secret is on no command line and in no environment: the only
        # 64-hex-digit string a worker shows is its executable's hash.
        for pid in pids.values():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode()
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().decode(errors="replace")
            exe_hash = re.search(r"sflow-([0-9a-f]{64})", cmd).group(1)
            check(set(re.findall(r"[0-9a-f]{64}", cmd)) == {exe_hash}, "secret in argv", cmd)
            check(not re.search(r"[0-9a-f]{64}", env), "secret in environment", env)
    finally:
        head.send_signal(signal.SIGKILL)
        head.wait()
    c.expect_no_workers(within=6)


def case_agent_and_default_keys(c):
    # ssh-agent: no --ssh-key, the key only in the agent.
    sock = os.path.join(c.dir, "agent.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 5
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": sock, "HOME": os.path.join(c.dir, "emptyhome")}
        r = subprocess.run(["ssh-add", c.user_key], env=env, capture_output=True, text=True)
        check(r.returncode == 0, "ssh-add", r.stderr)
        args = c.args()
        del args[args.index("--ssh-key"):args.index("--ssh-key") + 2]
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        check(r.returncode == 0 and r.stdout == "head says 42\n", "agent auth", r.stderr)
    finally:
        agent.kill()
        agent.wait()
    # Default key files under $HOME/.ssh, no agent.
    home = os.path.join(c.dir, "home")
    os.makedirs(os.path.join(home, ".ssh"))
    shutil.copy(c.user_key, os.path.join(home, ".ssh", "id_ed25519"))
    shutil.copy(c.user_key + ".pub", os.path.join(home, ".ssh", "id_ed25519.pub"))
    os.chmod(os.path.join(home, ".ssh", "id_ed25519"), 0o600)
    env = {**os.environ, "SSH_AUTH_SOCK": "", "HOME": home}
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    check(r.returncode == 0, "default key auth", r.stderr)
    # Nothing at all: a clear error, no prompt.
    env["HOME"] = os.path.join(c.dir, "emptyhome")
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    check(r.returncode == 69 and "no SSH credentials" in r.stderr, "no credentials", r.stderr)
    c.expect_no_workers()


def case_bad_hostfile(c):
    bad = os.path.join(c.dir, "dup.txt")
    with open(bad, "w") as f:
        f.write(f"# two\n127.0.0.2:{c.hosts[0][1]}\n\n127.0.0.2 port={c.hosts[0][1]}\n")
    r = c.run(hostfile=bad)
    check(r.returncode == 69 and f"{bad}:4: duplicate host '127.0.0.2'" in r.stderr,
          "duplicate", r.stderr)
    with open(bad, "w") as f:
        f.write("127.0.0.2 slots=two\n")
    r = c.run(hostfile=bad)
    check(r.returncode == 69 and f"{bad}:1: invalid slots 'two'" in r.stderr, "malformed",
          r.stderr)


# ------------------------------------------------------- distributed tasks

# 200 tasks whose sum is known; a busy wait (`ms` milliseconds) makes each
# take a moment so that every node gets some.
SUM_PROGRAM = """@retry(2)
task work(i: i64, ms: f64) -> i64 {
  let t0 = now()
  while now() - t0 < ms / 1000.0 { }
  return i * i + 3 * i
}
workflow main(n: i64 = 200, ms: f64 = 2.0) {
  let rs = await [work(i, ms) for i in 0..n]
  var total: i64 = 0
  for r in rs { total += r }
  print("sum of", n, "tasks:", total)
}
"""

PRINT_PROGRAM = """task hello(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.05 { }
  print("hello from task", i, "node", node_id())
  return node_id()
}
workflow main(n: i64 = 12) {
  let nodes = await [hello(i) for i in 0..n]
  print("main saw", len(nodes), "results")
}
"""

SLOW_PROGRAM = """@retry(2)
task slow(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.1 { }
  if i == 3 { print("running", i) }
  return 2 * i + 1
}
workflow main(n: i64 = 60) {
  let rs = await [slow(i) for i in 0..n]
  var total: i64 = 0
  for r in rs { total += r }
  print("total", total)
}
"""

FLAKY_PROGRAM = """@retry(2)
task flaky(i: i64) -> i64 {
  if attempt() < 2 { fail("attempt " + str(attempt()) + " fails") }
  return attempt() * 100 + node_id()
}
@retry(1)
task doomed(i: i64) -> i64 {
  fail("always")
  return i
}
workflow main(doom: bool = false) {
  let r = await flaky(7)
  print("attempt", r / 100, "remote", r % 100 > 0)
  if doom { print(await doomed(1)) }
}
"""


def case_tasks_sum_3(c):
    """200 tasks on 3 nodes (the head and 2 workers): the exact sum, the
    same as a single-node run, with work on every node."""
    exe = c.compile("sum", SUM_PROGRAM)
    want = f"sum of 200 tasks: {sum(i * i + 3 * i for i in range(200))}\n"
    local = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    check(local.returncode == 0 and local.stdout == want, "single-node run", local.stdout,
          local.stderr)
    for extra in ([], ["--head-runs-work=false"]):
        r = c.run(*extra, prog=exe, timeout=120)
        check(r.returncode == 0, f"exit {r.returncode} {extra}", r.stdout, r.stderr)
        check(r.stdout == local.stdout, f"output differs from the single-node run {extra}",
              r.stdout, r.stderr)
    c.expect_no_workers()


def case_tasks_print(c):
    """Remote print output reaches the head's stdout, prefixed by node; the
    head's own lines are not; every node ran some of the work."""
    exe = c.compile("hello", PRINT_PROGRAM)
    r = c.run(prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    check(lines[-1] == "main saw 12 results", "main's line unprefixed and last", r.stdout)
    hello = [l for l in lines if "hello from task" in l]
    check(len(hello) == 12, "one line per task", r.stdout)
    seen = set()
    for l in hello:
        m = re.fullmatch(r"(?:\[node (\d+)\] )?hello from task (\d+) node (\d+)", l)
        check(m, "line format", l)
        pre = int(m.group(1)) if m.group(1) else 0
        check(pre == int(m.group(3)), "prefix names the node that printed", l)
        seen.add(pre)
    check(seen == {0, 1, 2}, f"work on every node: {sorted(seen)}", r.stdout)
    # One node doing all the work: no prefixes.
    one = os.path.join(c.dir, "one.txt")
    with open(one, "w") as f:
        f.write(f"{c.hosts[0][0]}:{c.hosts[0][1]} slots=2\n")
    r = c.run("--head-runs-work=false", "--n", "3", prog=exe, hostfile=one, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(sorted(r.stdout.splitlines()) == sorted(
        [f"hello from task {i} node 1" for i in range(3)] + ["main saw 3 results"]),
        "one working node: unprefixed", r.stdout)
    c.expect_no_workers()


def case_tasks_worker_killed(c):
    """A worker SIGKILLed while it runs tasks: they are retried on live
    nodes and the output is the same as without the failure."""
    exe = c.compile("slow", SLOW_PROGRAM)
    want = f"total {sum(2 * i + 1 for i in range(60))}"
    head = c.start("--head-runs-work=false", prog=exe)
    try:
        read_until(head.stdout, r"running 3", 60)  # tasks are running everywhere
        victim = c.worker_of(2)
        check(victim, "node 2's worker", c.workers())
        os.kill(victim, signal.SIGKILL)
        head.wait(timeout=120)
        out = drain(head.stdout)
        err = head.stderr.read()
        check(head.returncode == 0, f"head exit {head.returncode}", out, err)
        check(out.splitlines()[-1] == want, "output", out, err)
        check(re.search(r"node 2 \(127\.0\.0\.3:\d+\) lost: ", err), "loss reported", err)
        check(re.search(r"[1-9]\d* retr", err), "retries counted", err)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers(within=6)


def case_tasks_retry_attempt(c):
    """fail() on a worker comes back as a failure and is retried per
    @retry; attempt() counts there; a spent budget fails the run with the
    usual message; with every worker gone, a clear error."""
    exe = c.compile("flaky", FLAKY_PROGRAM)
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout == "attempt 2 remote true\n", "retried to attempt 2 on a worker", r.stdout,
          r.stderr)
    r = c.run("--head-runs-work=false", "--doom", prog=exe, timeout=120)
    check(r.returncode == 70, f"exit {r.returncode}", r.stdout, r.stderr)
    check(re.search(r"task 'doomed' failed after 2 attempts: \S*flaky.sflow:8:3: fail: always",
                    r.stderr), "failure message", r.stderr)
    c.expect_no_workers()
    # The only worker dies and the head does not run work: nothing can.
    one = os.path.join(c.dir, "one.txt")
    with open(one, "w") as f:
        f.write(f"{c.hosts[0][0]}:{c.hosts[0][1]} slots=1\n")
    slow = c.compile("slow", SLOW_PROGRAM)
    head = subprocess.Popen(c.args("--head-runs-work=false", prog=slow, hostfile=one),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        read_until(head.stdout, r"running 3", 60)
        os.kill(c.worker_of(1), signal.SIGKILL)
        head.wait(timeout=60)
        err = head.stderr.read()
        check(head.returncode == 70, f"head exit {head.returncode}", err)
        check(re.search(r"no live node can take work \(node 1 lost: .*the head does not run work",
                        err), "no-capacity message", err)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers(within=6)


CASES = {
    "deploy_2": (2, case_deploy_2),
    "deploy_4": (4, case_deploy_4),
    "changed_host_key": (2, case_changed_host_key),
    "unknown_host_key": (2, case_unknown_host_key),
    "unreachable_host": (1, case_unreachable_host),
    "bad_user_key": (1, case_bad_user_key),
    "wrong_secret": (2, case_wrong_secret),
    "allreduce_3": (3, case_allreduce_3),
    "allreduce_4": (4, case_allreduce_4),
    "worker_sigkill": (3, case_worker_sigkill),
    "worker_sigstop": (3, case_worker_sigstop),
    "head_sigkill": (3, case_head_sigkill),
    "agent_and_default_keys": (2, case_agent_and_default_keys),
    "bad_hostfile": (1, case_bad_hostfile),
    "tasks_sum_3": (2, case_tasks_sum_3),
    "tasks_print": (2, case_tasks_print),
    "tasks_worker_killed": (3, case_tasks_worker_killed),
    "tasks_retry_attempt": (2, case_tasks_retry_attempt),
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
    if a.case not in CASES:
        print(f"unknown case {a.case}", file=sys.stderr)
        return 2
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        print("SKIP: needs openssh-server (/usr/sbin/sshd) and ssh-keygen "
              "(scripts/install-deps.sh installs them)")
        return SKIP
    n, fn = CASES[a.case]
    c = None
    try:
        c = Cluster(a.sflowc, n)
        fn(c)
    except Fail as e:
        print(f"FAIL {a.case}: {e}", file=sys.stderr)
        return 1
    finally:
        if c:
            c.close()
    print(f"ok {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
