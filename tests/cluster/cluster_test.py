#!/usr/bin/env python3
"""Multi-node tests against real sshd servers on loopback or in network
namespaces.

Each case starts its own sshd processes (one per simulated node, on
127.0.0.2, 127.0.0.3, ... with a free port each), with an ed25519 host key
per server, a user key and a private known_hosts generated for the test,
compiles a small workflow with sflowc, and runs the real executable with
--nodes.  After every case no worker process may be left.  The netns_*
cases put each node's sshd in a network namespace of its own behind a veth
pair (NetnsCluster), so that a network cut is a link set down; they need
root and a working `ip netns add`, and skip (77) saying why otherwise.

    cluster_test.py --sflowc PATH CASE     run one case (exit 77: skipped)
    cluster_test.py --list                 the case names

Needs /usr/sbin/sshd and ssh-keygen (openssh-server, installed by
scripts/install-deps.sh).  As root, sshd runs with privilege separation in
/run/sshd, which is created when missing; as another user sshd can only log
in that same user, which is all the tests need.
"""
import argparse
import json
import os
import platform
import pwd
import random
import re
import shutil
import signal
import socket
import struct
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


class Skip(Exception):
    """The case cannot run on this machine; main() exits 77 with the reason."""


def check(cond, what, *details):
    if not cond:
        raise Fail(what + "".join("\n--- " + str(d) for d in details))


def free_port(addr):
    s = socket.socket()
    s.bind((addr, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def entry(addr, port):
    """A hostfile entry with an SSH port: OpenSSH's [host]:port (host:N
    would be N slots, as in MPICH)."""
    return f"[{addr}]:{port}"


def keygen(path, passphrase=""):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "sflow-test",
                    "-f", path], check=True, stdin=subprocess.DEVNULL)


class Cluster:
    """n sshd servers; hostfile, known_hosts and user key in self.dir."""

    def __init__(self, sflowc, n, port=None, sshd_extra=None):
        self.port = port  # one port on every address (OpenMPI needs that)
        self.sshd_extra = sshd_extra or {}  # node index -> more sshd_config lines
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
                f.write(f"{entry(addr, port)} slots=1\n")
        src = os.path.join(self.dir, "prog.sflow")
        with open(src, "w") as f:
            f.write(PROGRAM)
        self.prog = os.path.join(self.dir, "prog")
        r = subprocess.run([sflowc, src, "-o", self.prog], capture_output=True, text=True)
        check(r.returncode == 0, "sflowc failed", r.stderr)

    def node_addr(self, i):
        """Address and port node i's sshd listens on."""
        addr = f"127.0.0.{2 + i}"
        return addr, self.port or free_port(addr)

    def sshd_command(self, i, cfg):
        return [SSHD, "-D", "-e", "-f", cfg]

    def start_sshd(self, i):
        addr, port = self.node_addr(i)
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
""" + self.sshd_extra.get(i, ""))
        log = open(os.path.join(self.dir, f"sshd{i}.log"), "w")
        p = subprocess.Popen(self.sshd_command(i, cfg), stdout=log, stderr=log,
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

    def compile(self, name, source, *flags):
        src = os.path.join(self.dir, name + ".sflow")
        with open(src, "w") as f:
            f.write(source)
        exe = os.path.join(self.dir, name)
        r = subprocess.run([self.sflowc, *flags, src, "-o", exe], capture_output=True, text=True)
        check(r.returncode == 0, "sflowc failed", r.stderr)
        return exe

    # The SSH handshake shares --connect-timeout.  With the suite's heavy
    # cases beside it (valgrind, BERT fine-tunes) on 2 cores, sshd's key
    # exchange once took over 5 s (actors_print_resume: "SSH handshake
    # failed: API timeout expired"), so the bound is 15 s; the cases that
    # test the timeout itself pass their own.
    CONNECT_TIMEOUT = "15"

    def args(self, *extra, hostfile=None, prog=None):
        return [prog or self.prog, "--nodes", hostfile or self.hostfile, "--ssh-key", self.user_key,
                "--known-hosts", self.known_hosts, "--remote-cache", self.cache,
                "--connect-timeout", self.CONNECT_TIMEOUT, *extra]

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
            # The host check's `sh -c '...; exec "$@"' sflow env ...
            # --sflow-worker ID@...` waiting for its go is caught too
            # before it execs: its arguments are the worker's.
            if "--sflow-worker" in cmd and \
                    cmd[cmd.index("--sflow-worker") + 1].startswith(f"{node}@"):
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
        # Also after a constructor that failed half way (NetnsCluster).
        for p in getattr(self, "procs", []):
            p.kill()
            p.wait()
        if not hasattr(self, "dir"):
            return
        for pid in self.workers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if os.environ.get("SFLOW_KEEP_TMP"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def ip(*args):
    """Runs ip(8); returns (exit status, stderr)."""
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stderr.strip()


def must_ip(*args):
    rc, err = ip(*args)
    check(rc == 0, f"ip {' '.join(args)}: {err}")


class NetnsCluster(Cluster):
    """Nodes in network namespaces, for true network cuts.

    Node i is namespace sflow-PID-TAG-i with loopback up, joined to the root
    namespace (where the head runs) by a veth pair on a /30 of its own:
    10.A.B.4i+1 on the head side (sfTAGhI), 10.A.B.4i+2 inside (eth0).  Its
    sshd runs inside with `ip netns exec` on port 2222, so the head reaches
    node i only over that link and the worker can reach the head only over
    it too.  TAG is random and checked against existing namespaces and
    links, A.B against addresses and routes in use, so concurrent runs do
    not collide.  close() kills every process in the namespaces and deletes
    them and the veths, also after a constructor that failed half way.
    """

    PORT = 2222

    def __init__(self, sflowc, n):
        if os.geteuid() != 0:
            raise Skip("needs root: network namespaces and veth pairs")
        if not shutil.which("ip"):
            raise Skip("needs ip(8) (iproute2; scripts/install-deps.sh installs it)")
        check(n < 64, "at most 63 namespace nodes on one /24")
        self.netns, self.veths = [], []
        try:
            self.sweep_stale()
            self.pick_names()
            for i in range(n):
                self.add_node(i)
            super().__init__(sflowc, n)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def sweep_stale():
        """Namespaces and links that a killed run (ctest's timeout sends
        SIGKILL, so no finally ran) left behind: those whose test process
        is gone, named sflow-PID-TAG-I."""
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        for m in re.finditer(r"^sflow-(\d+)-([0-9a-f]{6})-(\d+)\b", r.stdout, re.M):
            pid, tag, i = m.groups()
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"cluster_test.py" in f.read():
                        continue  # a live run
            except OSError:
                pass
            ns = m.group(0)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)
            ip("link", "del", f"sf{tag}h{i}")
            ip("netns", "del", ns)

    def pick_names(self):
        in_use = subprocess.run("ip netns list; ip -o link; ip -o -4 addr; ip -4 route",
                                shell=True, capture_output=True, text=True).stdout
        for _ in range(100):
            tag = "%06x" % random.SystemRandom().getrandbits(24)
            a, b = random.randrange(64, 250), random.randrange(0, 256)
            if tag not in in_use and f"10.{a}.{b}." not in in_use:
                self.tag, self.net = tag, f"10.{a}.{b}"
                return
        raise Fail("no free namespace tag and subnet", in_use)

    def head_addr(self, i):
        return f"{self.net}.{4 * i + 1}"

    def node_addr(self, i):
        return f"{self.net}.{4 * i + 2}", self.PORT

    def add_node(self, i):
        ns, veth = f"sflow-{os.getpid()}-{self.tag}-{i}", f"sf{self.tag}h{i}"
        rc, err = ip("netns", "add", ns)
        if rc and i == 0 and "File exists" not in err:
            raise Skip(f"'ip netns add' failed ({err}): no CAP_SYS_ADMIN here, e.g. in a "
                       "container?")
        check(rc == 0, f"ip netns add {ns}: {err}")
        self.netns.append(ns)
        rc, err = ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        if rc and i == 0:
            raise Skip(f"cannot create a veth pair ({err})")
        check(rc == 0, f"ip link add {veth}: {err}")
        self.veths.append(veth)
        must_ip("addr", "add", f"{self.head_addr(i)}/30", "dev", veth)
        must_ip("link", "set", veth, "up")
        must_ip("-n", ns, "addr", "add", f"{self.node_addr(i)[0]}/30", "dev", "eth0")
        must_ip("-n", ns, "link", "set", "eth0", "up")
        must_ip("-n", ns, "link", "set", "lo", "up")

    def sshd_command(self, i, cfg):
        return ["ip", "netns", "exec", self.netns[i], *super().sshd_command(i, cfg)]

    def cut(self, i):
        """The network cut: node i's link goes down (both ends lose carrier)."""
        must_ip("link", "set", self.veths[i], "down")

    def ns_pids(self, i):
        r = subprocess.run(["ip", "netns", "pids", self.netns[i]], capture_output=True,
                           text=True, timeout=30)
        return [int(p) for p in r.stdout.split()]

    def ns_workers(self, i):
        """sflow worker processes inside node i's namespace."""
        return [p for p in self.ns_pids(i) if p in self.workers()]

    def close(self):
        try:
            super().close()
        finally:
            for i, ns in enumerate(self.netns):
                # A namespace lives on while a process is in it: kill them
                # all (sshd's session processes too), then delete it.
                deadline = time.time() + 10
                while time.time() < deadline:
                    pids = self.ns_pids(i)
                    if not pids:
                        break
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                    time.sleep(0.05)
            for veth in self.veths:
                ip("link", "del", veth)
            for ns in self.netns:
                rc, err = ip("netns", "del", ns)
                if rc:
                    print(f"warning: ip netns del {ns}: {err}", file=sys.stderr)
            self.netns, self.veths = [], []


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
        check(re.search(rf"node {k} ready: \[127\.0\.0\.{k + 1}\]:\d+ ", r.stderr),
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


def sha256_of(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def case_cache_damaged(c):
    """A cached executable with the right name and size but a byte changed
    is found by the worker, which hashes itself before anything else: the
    head says so, copies it again and the run succeeds (one byte in the
    section headers: the file still starts and reports its hash; the ELF
    magic: it does not start at all).  The nodes share the cache folder:
    one copies, the other starts that copy.  Then the copy is reused."""
    r = c.run()
    check(r.returncode == 0 and r.stdout == "head says 42\n", f"first run: exit {r.returncode}",
          r.stderr)
    want = sha256_of(c.prog)
    cached = os.path.join(c.cache, "sflow-" + want)
    size = os.path.getsize(cached)
    for offset, why in ((size - 3, r"its content hash differs"),
                        (0, r"it did not start: .*")):
        with open(cached, "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x55]))
        check(os.path.getsize(cached) == size and sha256_of(cached) != want, "damaged in place")
        r = c.run()
        check(r.returncode == 0 and r.stdout == "head says 42\n",
              f"damaged at {offset}: exit {r.returncode}", r.stderr)
        notes = re.findall(rf"sflow: node \d \S+: cached executable {re.escape(cached)} was "
                           rf"damaged \({why}\); copied again", r.stderr)
        check(len(notes) == 1, f"damaged at {offset}: one notice", r.stderr)
        check(sha256_of(cached) == want, "the cache holds this executable again")
        check(not [f for f in os.listdir(c.cache) if f.endswith(".tmp")], "temporary files left",
              os.listdir(c.cache))
        c.expect_no_workers()
    r = c.run("--cluster-log")
    check(r.returncode == 0 and "damaged" not in r.stderr, "third run", r.stderr)
    check(len(re.findall(r"ready: .*cached", r.stderr)) == 2, "copy not reused", r.stderr)
    c.expect_no_workers()


def slow_node_script(c, node, action):
    """Puts in the cache, under this executable's name and size, a script
    that runs action (shell) when it is node `node`'s worker and then, or
    for any other node, execs this executable; returns its bytes."""
    cached = os.path.join(c.cache, "sflow-" + sha256_of(c.prog))
    size = os.path.getsize(cached)
    script = ('#!/bin/sh\ncase "$*" in *"--sflow-worker %d@"*) %s;; esac\n'
              'exec %s "$@"\n' % (node, action, c.prog)).encode()
    script += b"#" * (size - len(script) - 1) + b"\n"
    with open(cached, "wb") as f:
        f.write(script)
    os.chmod(cached, 0o755)
    return cached, script


def case_worker_slow_at_start(c):
    """Node 2's worker takes 7 s to start (a loaded host): the head answers
    the other workers' handshakes only once every node has started, and
    they used to give up after 5 s, named as the nodes that failed.  The
    run must succeed."""
    r = c.run()
    check(r.returncode == 0, f"first run: exit {r.returncode}", r.stderr)
    slow_node_script(c, 2, "sleep 7")
    r = c.run(timeout=90)
    check(r.returncode == 0 and r.stdout == "head says 42\n", f"exit {r.returncode}", r.stderr)
    check(r.seconds >= 7, f"took {r.seconds:.1f} s: the script did not run")
    c.expect_no_workers()


def worker_signalled_at_start(c, sig, cause):
    """Node 2's worker gets sig right after exec, before it hashes itself
    (the cached file, same name and size, is a script that signals itself
    when it is node 2's and execs this executable otherwise): the start
    fails naming node 2 alone, for the cause, not a damaged executable,
    and nothing is copied again under the other nodes' feet."""
    r = c.run()
    check(r.returncode == 0 and r.stdout == "head says 42\n", f"first run: exit {r.returncode}",
          r.stderr)
    cached, script = slow_node_script(c, 2, "kill -%s $$" % sig)
    # The silence bound is the SSH timeout; 5 s leaves the handshakes room.
    r = c.run("--connect-timeout", "5", timeout=90)
    check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
    addr, port, _ = c.hosts[1]
    check(re.search(r"1 of 3 nodes failed to start:\n  \[%s\]:%d: %s\n" % (re.escape(addr), port, cause),
                    r.stderr), "the cause on node 2", r.stderr)
    for other in (c.hosts[0], c.hosts[2]):
        check(f"[{other[0]}]:{other[1]}" not in r.stderr, f"healthy {other[0]} named", r.stderr)
    check("damaged" not in r.stderr, "reported as a damaged executable", r.stderr)
    with open(cached, "rb") as f:
        check(f.read() == script, "the cached file was copied again")
    # A stopped process ignores its session's end until continued (as in
    # lost_case); then it finds no secret on its stdin and exits.
    victim = c.worker_of(2)
    if sig == "STOP" and victim:
        os.kill(victim, signal.SIGCONT)
    c.expect_no_workers()


def case_worker_killed_at_start(c):
    worker_signalled_at_start(c, "KILL", r"the worker ended early: killed by SIGKILL \(signal 9\)")


def case_worker_stopped_at_start(c):
    worker_signalled_at_start(c, "STOP", r"the worker did not answer within 5 s \(stopped, hung "
                              r"or starved of CPU\?\)")


def case_changed_host_key(c):
    other = os.path.join(c.dir, "impostor_key")
    keygen(other)
    c.write_known_hosts([c.known_line(0), c.known_line(1, key=other)])
    for extra in ([], ["--accept-new-host-keys"]):
        r = c.run(*extra)
        addr, port, _ = c.hosts[1]
        check(r.returncode == 69, f"exit {r.returncode} (want 69)", r.stderr)
        check(re.search(rf"{re.escape(entry(addr, port))}: host key has CHANGED", r.stderr),
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
    check(re.search(rf"{re.escape(entry(addr, port))}: unknown host key", r.stderr), "message",
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


def case_known_hosts_rules(c):
    """known_hosts by OpenSSH's rules, with real sshd on non-22 ports: a
    key on an @revoked line is refused (exit 69, the message names the
    file:line) though another line lists it, before any credential is
    offered; a bare `host` entry (port 22) is not accepted for [host]:PORT;
    an @cert-authority line trusts no plain key; hashed entries
    (ssh-keygen -H), wildcard patterns and comma-separated lists are."""
    addr1, port1, key1 = c.hosts[1]
    with open(key1 + ".pub") as f:
        kind, blob = f.read().split()[:2]
    good = [c.known_line(0), c.known_line(1)]
    label = re.escape(entry(addr1, port1))

    def refused(lines, pattern, what):
        c.write_known_hosts(lines)
        r = c.run()
        check(r.returncode == 69, f"{what}: exit {r.returncode} (want 69)", r.stderr)
        check(re.search(rf"{label}: {pattern}", r.stderr), f"{what}: message", r.stderr)
        check(r.stdout == "", f"{what}: the workflow must not run", r.stdout)
        c.expect_no_workers()

    log_before = len(c.sshd_log(1))
    refused(good + [f"@revoked * {kind} {blob}\n"],
            rf"host key is REVOKED \(marked @revoked at {re.escape(c.known_hosts)}:3\); "
            r"refusing to connect", "revoked")
    refused([f"@revoked {addr1} {kind} {blob}\n"] + good,
            rf"host key is REVOKED \(marked @revoked at {re.escape(c.known_hosts)}:1\)",
            "revoked first")
    log = c.sshd_log(1)[log_before:]
    check("Accepted publickey" not in log and "Failed publickey" not in log,
          "credentials were offered to a host with a revoked key", log)
    refused([c.known_line(0), f"{addr1} {kind} {blob}\n"], r"unknown host key", "port-22 entry")
    refused([c.known_line(0), f"@cert-authority * {kind} {blob}\n"], r"unknown host key",
            "cert-authority")
    # Accepted: hashed, patterns, lists.
    for what, lines in (
            ("pattern", [c.known_line(0), f"[127.0.0.?]:{port1} {kind} {blob}\n"]),
            ("list", [c.known_line(0), f"[10.9.9.9]:{port1},[{addr1}]:{port1} {kind} {blob}\n"]),
            ("negation elsewhere", [c.known_line(0),
                                    f"!*.example,[{addr1}]:{port1} {kind} {blob}\n"])):
        c.write_known_hosts(lines)
        r = c.run()
        check(r.returncode == 0 and r.stdout == "head says 42\n", f"{what}: exit {r.returncode}",
              r.stderr)
    c.write_known_hosts(good)
    subprocess.run(["ssh-keygen", "-H", "-f", c.known_hosts], check=True, capture_output=True)
    with open(c.known_hosts) as f:
        hashed = f.read()
    check(addr1 not in hashed and hashed.startswith("|1|"), "ssh-keygen -H hashed it", hashed)
    r = c.run()
    check(r.returncode == 0 and r.stdout == "head says 42\n", f"hashed: exit {r.returncode}",
          r.stderr)
    # A negated pattern that matches excludes the host.
    refused([c.known_line(0), f"[127.0.0.?]:{port1},![{addr1}]:* {kind} {blob}\n"],
            r"unknown host key", "negated")
    c.expect_no_workers()


def case_unreachable_host(c):
    # A port nobody listens on: refused at once.  A listener that never
    # speaks SSH: bounded by --connect-timeout.
    dead = free_port("127.0.0.9")
    silent = socket.socket()
    silent.bind(("127.0.0.8", 0))
    silent.listen(8)
    hostfile = os.path.join(c.dir, "bad_hosts.txt")
    for bad, limit, text in ((entry("127.0.0.9", dead), 3, "cannot connect"),
                             (entry("127.0.0.8", silent.getsockname()[1]), 5 + 3, "handshake")):
        with open(hostfile, "w") as f:
            f.write(f"{entry('127.0.0.2', c.hosts[0][1])}\n{bad}\n")
        r = c.run("--connect-timeout", "2", hostfile=hostfile, timeout=30)
        check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
        check(bad + ":" in r.stderr and text in r.stderr, "message names the host", r.stderr)
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
        check(re.search(r"\[127\.0\.0\.2\]:\d+: public-key authentication as \S+ with", r.stderr),
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


def memory_kb(pid, field):
    """VmRSS or VmHWM (peak) of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise Fail(f"no {field} for pid {pid}")


def closed_after(s, limit):
    """Reads s until the peer closes it; (bytes read, seconds it took)."""
    t0 = time.time()
    s.settimeout(limit)
    got = b""
    try:
        while True:
            k = s.recv(4096)
            if not k:
                break
            got += k
    except socket.timeout:
        raise Fail(f"still open after {limit} s")
    except ConnectionResetError:
        pass
    return got, time.time() - t0


TASK_SUBMIT = 6  # sf__ftype


def case_control_plane_preauth(c):
    """Strangers before they authenticate.  On the head's control port a
    header claiming a 1 GiB task frame, with bytes streaming after it, is
    refused from the header (the head's peak memory grows by less than
    8 MB) at once, though a silent connection came first; the silent one
    gets the 40-byte challenge and is dropped after 5 s; 100 silent
    connections at once are bounded (the oldest dropped) and the run ends
    normally, no node lost.  On a worker's object listener a silent
    connection is dropped after 5 s too, and does not hold up another."""
    head = subprocess.Popen(c.args("--cluster-log", "--sflow-selftest", "hold:20"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        line, _ = read_until(head.stderr, r"control plane listening on", 30)
        addr, port = line.split()[-1].rsplit(":", 1)
        line, _ = read_until(head.stderr, r"node 1 ready: .*objects on \S+:\d+", 30)
        oaddr, oport = re.search(r"objects on (\S+):(\d+)", line).groups()
        node_pids(head, len(c.hosts))
        hwm0 = memory_kb(head.pid, "VmHWM")
        silent = socket.create_connection((addr, int(port)))
        time.sleep(0.2)
        flood = socket.create_connection((addr, int(port)))
        fport = flood.getsockname()[1]
        t0 = time.time()
        flood.settimeout(10)
        sent = 0
        try:
            flood.sendall(struct.pack("<IBBH", 1 << 30, 1, TASK_SUBMIT, 0))
            chunk = b"\0" * (1 << 20)
            while sent < (1 << 30):
                flood.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the head closed it
        flood.close()
        line, _ = read_until(head.stderr, rf"refused control connection from [\d.]+:{fport}: ", 10)
        took = time.time() - t0
        grew = memory_kb(head.pid, "VmHWM") - hwm0
        check(grew < 8192, f"the head's peak memory grew by {grew / 1024:.1f} MB "
              f"({sent >> 20} MiB sent)", line)
        check("a task-submit frame of 1073741824 bytes before authentication" in line,
              "refused for what it claims", line)
        check(took < 1.5, f"the refusal took {took:.1f} s (held up by the silent connection?)")
        got, waited = closed_after(silent, 10)
        check(len(got) == 40, f"the challenge is 40 bytes, got {len(got)}")
        check(4.5 <= waited + 0.2 + took <= 7.5, f"silent connection dropped after {waited:.1f} s")
        print(f"1 GiB claim: refused in {took:.2f} s after {sent >> 20} MiB sent, head peak "
              f"memory +{grew} KiB; silent connection dropped after {waited + 0.2 + took:.1f} s")
        read_until(head.stderr, r"refused control connection from [\d.]+:\d+: did not "
                   r"authenticate within 5 s", 5)
        many = [socket.create_connection((addr, int(port))) for _ in range(100)]
        read_until(head.stderr, r"64 connections were authenticating at once; dropped the oldest",
                   5)
        # The object listener: a silent connection, then garbage.
        osilent = socket.create_connection((oaddr, int(oport)))
        time.sleep(0.2)
        g = socket.create_connection((oaddr, int(oport)))
        t1 = time.time()
        g.sendall(b"garbage")
        g.close()
        read_until(head.stderr, r"refused object connection from \S+: no greeting", 5)
        check(time.time() - t1 < 1.5, "the object listener was held up by a silent connection")
        got, waited = closed_after(osilent, 40)
        check(len(got) == 32 and 4 <= waited <= 7.5,
              f"silent object connection dropped after {waited:.1f} s ({len(got)} bytes)")
        head.wait(timeout=40)
        err = drain(head.stderr)
        check(head.returncode == 0, f"head exit {head.returncode}", err)
        # "node 1 (host) lost: ...", not the heartbeat summary's "a node is
        # lost after 3.0 s" (--cluster-log).
        check(not re.search(r"node \d+ \([^)]*\) lost|node \d+ was lost", err), "a node was lost", err)
        for s in many:
            s.close()
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers()


def case_allreduce_3(c):
    allreduce(c, 3)


def case_allreduce_4(c):
    allreduce(c, 4)


def allreduce(c, n):
    # Counts on both sides of each algorithm switch in runtime/cluster/ring.c for
    # 4-byte types (recursive doubling to 32 KB, halving to 4 MB for 4
    # members, the ring above; 3 members: the ring from 64 KB); 8-byte
    # types move them around.
    counts = "1,3,1000,8192,8193,32768,32769,65537,1000003,1048576,1048577"
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
        check(re.search(r"node 2 \(\[127\.0\.0\.3\]:\d+\) lost: " + pattern, err), "message", err)
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


def start_agent(c):
    """A real ssh-agent holding the test's user key, and the environment
    that points at it (with an empty HOME, so no default key is found)."""
    sock = os.path.join(c.dir, "agent.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.time() + 5
    while not os.path.exists(sock) and time.time() < deadline:
        time.sleep(0.05)
    env = {**os.environ, "SSH_AUTH_SOCK": sock, "HOME": os.path.join(c.dir, "emptyhome")}
    r = subprocess.run(["ssh-add", c.user_key], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        agent.kill()
        agent.wait()
    check(r.returncode == 0, "ssh-add", r.stderr)
    return agent, env


def case_agent_and_default_keys(c):
    # ssh-agent: no --ssh-key, the key only in the agent.
    agent, env = start_agent(c)
    try:
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
        f.write(f"# two\n{entry('127.0.0.2', c.hosts[0][1])}\n\n127.0.0.2 port={c.hosts[0][1]}\n")
    r = c.run(hostfile=bad)
    check(r.returncode == 69 and f"{bad}:4: duplicate host '127.0.0.2'" in r.stderr,
          "duplicate", r.stderr)
    with open(bad, "w") as f:
        f.write("127.0.0.2 slots=two\n")
    r = c.run(hostfile=bad)
    check(r.returncode == 69 and f"{bad}:1: invalid slots 'two'" in r.stderr, "malformed",
          r.stderr)



def alias_config(c, me):
    """An ssh config naming the simulated nodes gpu-a, gpu-b (and gpu-c, a
    dead port), the way users name their machines."""
    cfg = os.path.join(c.dir, "ssh_config")
    with open(cfg, "w") as f:
        f.write(f"""# aliases for the simulated nodes
Host gpu-a
  HostName 127.0.0.2
Host gpu-b
  HostName 127.0.0.3
  User nobody-sflow-test
Host gpu-c
  HostName 127.0.0.9
Host gpu-* !gpu-c
  Port {c.port}
  User {me}
  IdentityFile {c.dir}/no_such_key
  IdentityFile "{c.user_key}"
  UserKnownHostsFile {c.known_hosts}
  StrictHostKeyChecking yes
Host *
  Port 1
""")
    return cfg


def alias_args(c, hosts, cfg, *extra, prog=None):
    """No --ssh-key, --known-hosts, agent or ~/.ssh: only the config says how."""
    env = {**os.environ, "SSH_AUTH_SOCK": "", "HOME": os.path.join(c.dir, "emptyhome")}
    return [prog or c.prog, "--nodes", hosts, "--ssh-config", cfg, "--remote-cache", c.cache,
            "--connect-timeout", Cluster.CONNECT_TIMEOUT, *extra], env


def case_ssh_config_alias(c):
    """Hosts named by aliases of an ssh config file: HostName, Port, User
    and IdentityFile (a missing one skipped) come from it, the host keys
    are looked up under the HostName ([127.0.0.x]:port in known_hosts, not
    the alias), the hostfile's user@ beats the config's User, host:N gives
    the worker N slots, and messages name the host as written."""
    me = pwd.getpwuid(os.getuid()).pw_name
    cfg = alias_config(c, me)
    hosts = os.path.join(c.dir, "alias_hosts.txt")
    with open(hosts, "w") as f:
        f.write(f"gpu-a\n{me}@gpu-b:2\n")
    with open(c.known_hosts) as f:
        known = f.read()
    args, env = alias_args(c, hosts, cfg, "--cluster-log")
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    check(r.returncode == 0, f"exit {r.returncode}", r.stderr)
    check(r.stdout == "head says 42\n", "workflow output", r.stdout)
    for k, addr in ((1, "127.0.0.2"), (2, "127.0.0.3")):
        check(f"node {k} gpu-{'ab'[k - 1]}: {me}@{addr} port {c.port}\n" in r.stderr,
              f"node {k} resolved through the config", r.stderr)
        check(re.search(rf"node {k} ready: gpu-{'ab'[k - 1]} ", r.stderr),
              f"node {k} named as written", r.stderr)
    with open(c.known_hosts) as f:
        check(f.read() == known, "known_hosts changed (StrictHostKeyChecking yes)")
    c.expect_no_workers()
    # gpu-b:2 is 2 slots: its worker runs with --threads 2, gpu-a's with
    # the CPU count (no --threads).
    args, env = alias_args(c, hosts, cfg, "--sflow-selftest", "hold:3")
    head = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    try:
        pids = node_pids(head, 2)
        cmds = {}
        for k, pid in pids.items():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmds[k] = f.read().decode(errors="replace").split("\0")
        check("--threads" not in cmds[1], "gpu-a got --threads", cmds[1])
        check(cmds[2][cmds[2].index("--threads") + 1] == "2", "gpu-b:2 not 2 threads", cmds[2])
        head.wait(timeout=20)
        check(head.returncode == 0, f"hold exit {head.returncode}", drain(head.stderr))
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers()
    # A refused connection names the alias and where it led.
    with open(hosts, "w") as f:
        f.write("gpu-a\ngpu-c\n")
    args, env = alias_args(c, hosts, cfg)
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    check(r.returncode == 69 and "gpu-c (127.0.0.9 port 1): cannot connect" in r.stderr,
          "unreachable alias", r.stderr)
    # A malformed config line: exit 69 naming file:line, nothing started.
    with open(cfg, "a") as f:
        f.write("Host gpu-b\n  Port twenty-two\n")
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    check(r.returncode == 69 and f"{cfg}:19: invalid Port 'twenty-two'" in r.stderr,
          "malformed config", r.stderr)
    c.expect_no_workers()



def case_ssh_config_identities_only(c):
    """IdentitiesOnly yes: the agent's key is used only when an
    IdentityFile's .pub is that key (as in ssh, so a passphrase key held by
    the agent still works); otherwise it is not offered and the run fails
    naming what it tried.  Without IdentitiesOnly the agent's key is
    offered first, whatever the IdentityFiles."""
    me = pwd.getpwuid(os.getuid()).pw_name
    agent, env = start_agent(c)
    try:
        # Only the public half of the agent's key on disk; another key pair
        # that the server does not accept.
        shutil.copy(c.user_key + ".pub", os.path.join(c.dir, "in_agent.pub"))
        other = os.path.join(c.dir, "other_key")
        keygen(other)
        hosts = os.path.join(c.dir, "io_hosts.txt")
        with open(hosts, "w") as f:
            f.write("gpu-a\n")
        cfg = os.path.join(c.dir, "io_config")
        for ids, only, ok in (("in_agent", "yes", True), ("other_key", "yes", False),
                              ("other_key", "no", True)):
            with open(cfg, "w") as f:
                f.write(f"Host gpu-a\n  HostName 127.0.0.2\n  Port {c.port}\n  User {me}\n"
                        f"  IdentitiesOnly {only}\n  IdentityFile {c.dir}/{ids}\n"
                        f"  UserKnownHostsFile {c.known_hosts}\n")
            r = subprocess.run([c.prog, "--nodes", hosts, "--ssh-config", cfg, "--remote-cache",
                                c.cache, "--connect-timeout", Cluster.CONNECT_TIMEOUT], env=env,
                               capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            what = f"IdentityFile {ids}, IdentitiesOnly {only}"
            if ok:
                check(r.returncode == 0 and r.stdout == "head says 42\n", what, r.stderr)
            else:
                check(r.returncode == 69 and
                      f"authentication as {me} failed (tried ssh-agent, {other})" in r.stderr,
                      what, r.stderr)
            c.expect_no_workers()
    finally:
        agent.kill()
        agent.wait()

# Each task busy-waits 1 s and returns when it started.
BUSY_PROGRAM = """task busy(i: i64) -> f64 {
  let t0 = now()
  while now() - t0 < 1.0 { }
  return t0
}
workflow main() {
  let t = await [busy(i) for i in 0..2]
  print(t[0], t[1])
}
"""


def case_colon_slots_schedule(c):
    """host:N feeds the scheduler's slots as slots=N does: on one worker,
    two 1-second tasks run one after the other with gpu-a:1 and at once
    with gpu-a:2 (its CPU count, 2 here, would hide the difference
    without a count)."""
    me = pwd.getpwuid(os.getuid()).pw_name
    cfg = alias_config(c, me)
    exe = c.compile("busy", BUSY_PROGRAM)
    hosts = os.path.join(c.dir, "one_alias.txt")
    apart = {}
    for n in (1, 2):
        with open(hosts, "w") as f:
            f.write(f"gpu-a:{n}\n")
        args, env = alias_args(c, hosts, cfg, "--head-runs-work=false", prog=exe)
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        check(r.returncode == 0, f"gpu-a:{n}: exit {r.returncode}", r.stdout, r.stderr)
        t0, t1 = (float(v) for v in r.stdout.split())
        apart[n] = abs(t1 - t0)
    print(f"task starts apart: {apart[1]:.2f} s with gpu-a:1, {apart[2]:.2f} s with gpu-a:2")
    check(apart[1] >= 0.9, f"gpu-a:1 ran both at once ({apart[1]:.2f} s apart)")
    check(apart[2] < 0.5, f"gpu-a:2 ran them one after the other ({apart[2]:.2f} s apart)")
    c.expect_no_workers()

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

ACTOR_PROGRAM = """actor Counter {
  var total: i64 = 0
  var hist: i64[] = []
  init(start: i64) { total = start; hist = [0 for i in 0..4] }
  fn add(x: i64) -> i64 {
    total += x
    hist[x % 4] += 1
    return total
  }
  fn where() -> i64 { return node_id() }
  fn hello(i: i64) -> str { print("hello", i, "from the actor"); return "h" + str(i) }
  fn bad(x: i64) -> i64 {
    if x > 2 { fail("too big: " + str(x)) }
    return total
  }
  fn summary() -> i64[] { return [total, hist[0], hist[1], hist[2], hist[3]] }
}
workflow main(n: i64 = 50, doom: bool = false) {
  let c = spawn Counter(7)
  let fs = [c.add(i) for i in 0..n]
  let skipped = c.bad(5)
  print("last", (await fs)[n - 1])
  print(await c.hello(1))
  print(await c.bad(1))
  print(await c.summary())
  print("node", await c.where())
  if doom { print(await skipped) }
}
"""

# A checkpointed actor whose calls take a while, so a worker can be killed
# in the middle; deterministic, so a restarted run prints the same lines.
RESTART_PROGRAM = """@checkpoint(every = EVERY)
@restarts(RESTARTS)
actor Acc {
  var total: i64 = 0
  var calls: i64 = 0
  init(start: i64) { total = start }
  fn add(x: i64) -> i64 {
    let t0 = now()
    while now() - t0 < 0.03 { }
    total = total * 3 % 1000003 + x
    calls += 1
    if x == 5 || x == 12 { print("running", x) }
    if x % 10 == 0 { print("at", x, total) }
    return total
  }
  fn count() -> i64 { return calls }
}
workflow main(n: i64 = 40) {
  let a = spawn Acc(11)
  let fs = [a.add(i) for i in 0..n]
  let rs = await fs
  var s: i64 = 0
  for r in rs { s = (s * 7 + r) % 1000000007 }
  print("results", s, rs[n - 1])
  print("calls", await a.count())
}
"""

GROUP_PROGRAM = """@checkpoint(every = 1)
@restarts(2)
actor Member {
  var acc: i64[] = [0, 0, 0]
  var rounds: i64 = 0
  fn step(i: i64, slow: f64) -> i64 {
    let t0 = now()
    while now() - t0 < slow { }
    var v = [i * (group_rank() + 1), group_rank(), 1]
    allreduce_sum(v)
    acc[0] += v[0]
    acc[1] += v[1]
    acc[2] += v[2]
    rounds += 1
    if i == 3 && group_rank() == 0 { print("running", i) }
    return acc[0] * 1000 + v[2]
  }
  fn where() -> i64 { return node_id() }
  fn done() -> i64 { return rounds * 10 + group_rank() }
  fn gather() -> i64[] {
    let mine = [group_rank() * 10 + group_size(), rounds]
    barrier()
    var b = [0, 0]
    if group_rank() == 1 { b = [7, 8] }
    broadcast(b, 1)
    let all = allgather(mine)
    return [all[0], all[2], all[len(all) - 2], b[0] + b[1]]
  }
}
workflow main(n: i64 = 30, size: i64 = 3, slow: f64 = 0.0) {
  let g = spawn Member() * size
  var last: i64[] = []
  for i in 0..n {
    last = await g.all.step(i, slow)
  }
  print("sums", last)
  print("gather", await g.all.gather())
  print("len", len(g), "member 1", await g[1].done(), "any", await g.any.done() / 10)
  let nodes = await g.all.where()
  var distinct = true
  for k in 0..len(nodes) {
    for j in 0..k { if nodes[j] == nodes[k] { distinct = false } }
    if nodes[k] == 0 { distinct = false }
  }
  print("members on distinct workers", distinct)
}
"""


OBJECT_PROGRAM = """@retry(1)
task big(k: i64, n: i64) -> i64[] {
  let v = [(i * 7 + k) % 1000003 for i in 0..n]
  print("made", k)
  return v
}
workflow main(n: i64 = 300000, m: i64 = 4, lazy: bool = false) {
  if lazy {
    let unused = big(100, n)
    let x = await big(101, n)
    print("check lazy", len(x), x[n - 1])
  } else {
    let rs = await [big(k, n) for k in 0..m]
    var s: i64 = 0
    for r in rs { for x in r { s = (s * 31 + x) % 1000000007 } }
    print("check", s, len(rs[m - 1]), rs[m - 1][n - 1])
  }
}
"""


# Consumers taking future<...> arguments: the results of big stay on their
# workers and move worker to worker (or are used in place) for use/pair.
CONSUMER_PROGRAM = """@retry(1)
task big(k: i64, n: i64) -> i64[] {
  let v = [(i * 7 + k) % 1000003 for i in 0..n]
  print("made", k)
  return v
}
task use(k: i64, a: future<i64[]>) -> i64 {
  let x = await a
  var s: i64 = 0
  for v in x { s = (s * 31 + v) % 1000000007 }
  return s + k
}
task pair(a: future<i64[]>, b: future<i64[]>) -> i64 {
  let x = await a
  let y = await b
  return x[len(x) - 1] * 1000 + y[0] + len(x) + len(y)
}
task slow(s: f64) -> i64 {
  let t0 = now()
  while now() - t0 < s { }
  return 1
}
workflow main(n: i64 = 300000, m: i64 = 3, drop: bool = false) {
  if drop {
    big(99, n)
    let w = await slow(1.5)
    print("check dropped", w)
  }
  let bs = [big(k, n) for k in 0..m]
  let us = [use(k, bs[k]) for k in 0..m]
  let p = pair(bs[0], bs[m - 1])
  let r = await us
  var s: i64 = 0
  for x in r { s = (s * 7 + x) % 1000000007 }
  print("check", s, await p)
}
"""


GPU_PROGRAM = """@gpus(1)
task whole(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.15 { }
  print("span whole", i, "node", node_id(), "from", t0, "to", now())
  return i * i
}
@gpus(0.5)
task half(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.3 { }
  print("span half", i, "node", node_id(), "from", t0, "to", now())
  return 3 * i + 1
}
task plain(i: i64) -> i64 { return i + 1 }
workflow main(n: i64 = 6) {
  let a = await [whole(i) for i in 0..n]
  let b = await [half(i) for i in 0..n]
  let c = await [plain(i) for i in 0..n]
  var sa: i64 = 0
  var sb: i64 = 0
  var sc: i64 = 0
  for x in a { sa += x }
  for x in b { sb += x }
  for x in c { sc += x }
  print("sums", sa, sb, sc)
}
"""


def spans(out, kind):
    """(node, start, end) of each 'span KIND' line; times are the worker's
    own now(), comparable within one node."""
    got = []
    for l in out.splitlines():
        m = re.fullmatch(r"(?:\[node \d+\] )?span " + kind +
                         r" (\d+) node (\d+) from (\S+) to (\S+)", l)
        if m:
            got.append((int(m.group(2)), float(m.group(3)), float(m.group(4))))
    return got


def most_at_once(sp):
    ev = sorted([(s, 1) for _, s, _ in sp] + [(e, -1) for _, _, e in sp], key=lambda x: (x[0], x[1]))
    cur = top = 0
    for _, d in ev:
        cur += d
        top = max(top, cur)
    return top


def case_tasks_gpus(c):
    """@gpus tasks go to the node whose hostfile line says gpus=1, never to
    the one with gpus=0 (nor the head, which runs no work here): @gpus(1)
    one at a time, @gpus(0.5) two at a time; CPU tasks still use both.  The
    worker has no real GPU, so the work runs on its CPU with the notice."""
    exe = c.compile("gpus", GPU_PROGRAM)
    n = 6
    want = f"sums {sum(i * i for i in range(n))} {sum(3 * i + 1 for i in range(n))} " \
           f"{sum(i + 1 for i in range(n))}"
    hf = os.path.join(c.dir, "gpu_hosts.txt")
    with open(hf, "w") as f:
        f.write(f"{entry(*c.hosts[0][:2])} slots=4 gpus=1\n")
        f.write(f"{entry(*c.hosts[1][:2])} slots=4 gpus=0\n")
    r = c.run("--head-runs-work=false", prog=exe, hostfile=hf, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout.splitlines()[-1] == want, "exact results", r.stdout, r.stderr)
    whole, half = spans(r.stdout, "whole"), spans(r.stdout, "half")
    check(len(whole) == n and len(half) == n, "one line per task", r.stdout)
    check({nd for nd, _, _ in whole + half} == {1}, "every @gpus task on node 1", r.stdout)
    check(most_at_once(whole) == 1, f"@gpus(1): {most_at_once(whole)} at once", r.stdout)
    check(most_at_once(half) == 2, f"@gpus(0.5): {most_at_once(half)} at once", r.stdout)
    check("notice: no GPU found" in r.stderr and " error" not in r.stderr.lower(),
          "the worker's CPU notice, and no error", r.stderr)
    # --require-gpu reaches the workers: a host the hostfile says has a GPU
    # but that has none fails the @gpus task there, naming it.
    r = c.run("--head-runs-work=false", "--require-gpu", prog=exe, hostfile=hf, timeout=120)
    check(r.returncode == 70 and "--require-gpu is set" in r.stderr and "whole" in r.stderr,
          f"--require-gpu on a host without a GPU: exit {r.returncode}", r.stdout, r.stderr)
    # No node has a GPU (no gpus= keys, none detected): as before, @gpus
    # work runs where it is called, on the head, with the notice.
    r = c.run(prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode} (no GPUs)", r.stdout, r.stderr)
    check(r.stdout.splitlines()[-1] == want, "exact results (no GPUs)", r.stdout, r.stderr)
    check({nd for nd, _, _ in spans(r.stdout, "whole") + spans(r.stdout, "half")} == {0},
          "no GPU anywhere: @gpus tasks on the head", r.stdout)
    c.expect_no_workers()


GPU_ACTOR_PROGRAM = """@gpus(1)
actor Whole {
  var k: i64 = 0
  fn add(x: i64) -> i64 { k += x; return k }
  fn where() -> i64 { return node_id() }
}
@gpus(0.5)
actor Half {
  fn where() -> i64 { return node_id() }
}
workflow main() {
  let a = spawn Whole()
  let b = spawn Whole()
  let fs = [a.add(i) for i in 0..10]
  print("whole on", await a.where(), "and", await b.where(), "sum", (await fs)[9])
  let h = spawn Half()
  let j = spawn Half()
  print("half on", await h.where(), "and", await j.where())
}
"""


def case_actors_gpus(c):
    """An @gpus actor holds a share of a GPU for its lifetime.  Node 1 has
    gpus=1: the first @gpus(1) actor takes it, the second finds no free
    share and stays on the head, and so do the @gpus(0.5) ones.  With
    gpus=3 the two whole ones take a device each and the halves share the
    third.  Node 2 (gpus=0) never gets one."""
    exe = c.compile("gpu_actors", GPU_ACTOR_PROGRAM)
    hf = os.path.join(c.dir, "gpu_hosts.txt")
    with open(hf, "w") as f:
        f.write(f"{entry(*c.hosts[0][:2])} slots=4 gpus=1\n")
        f.write(f"{entry(*c.hosts[1][:2])} slots=4 gpus=0\n")
    r = c.run("--head-runs-work=false", prog=exe, hostfile=hf, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout.splitlines() == ["whole on 1 and 0 sum 45", "half on 0 and 0"],
          "placement by free GPU share", r.stdout, r.stderr)
    with open(hf, "w") as f:
        f.write(f"{entry(*c.hosts[0][:2])} slots=4 gpus=3\n")
        f.write(f"{entry(*c.hosts[1][:2])} slots=4 gpus=0\n")
    r = c.run("--head-runs-work=false", prog=exe, hostfile=hf, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode} (gpus=3)", r.stdout, r.stderr)
    check(r.stdout.splitlines() == ["whole on 1 and 1 sum 45", "half on 1 and 1"],
          "a device each, the halves sharing the third", r.stdout, r.stderr)
    c.expect_no_workers()


GPU_GROUP_PROGRAM = """@gpus(1)
actor Rank {
  var steps: i64 = 0
  fn step(i: i64) -> f64[] {
    var g = [f64(i) + 0.25 * f64(group_rank()), 1.0, f64(group_size())]
    allreduce_mean(g)
    var b = [0.0, 0.0]
    if group_rank() == 0 { b = [f64(i), 2.5] }
    broadcast(b, 0)
    let all = allgather([f64(group_rank())])
    steps += 1
    return [g[0], g[1], g[2], b[0] + b[1], f64(len(all)), all[len(all) - 1]]
  }
  fn where() -> i64 { return node_id() }
}
workflow main(size: i64 = 2) {
  let g = spawn Rank() * size
  for i in 0..3 { print("step", i, (await g.all.step(i))[0]) }
  let ws = await g.all.where()
  print("on", ws)
}
"""


def case_actors_gpus_group(c):
    """An @gpus group is placed on workers, each member holding a share of
    its own (placed as a lone @gpus actor is: on a device where it fits,
    ties to the node with the most free slots), or stays on the head whole
    when the shares do not all fit.  The workers here have no GPU
    (gpus= in the hostfile only), so members run on the CPU and their
    collectives take the ring; results equal a single-node run's."""
    exe = c.compile("gpu_group", GPU_GROUP_PROGRAM)
    want = single_node(exe).splitlines()
    check(want[-1] == "on [0, 0]", "single-node run", want)
    hf = os.path.join(c.dir, "gpu_group_hosts.txt")
    for gpus, size, where in (((1, 1), 2, "[1, 2]"), ((2, 0), 2, "[1, 1]"),
                              ((1, 0), 2, "[0, 0]"), ((2, 1), 3, "[1, 2, 1]")):
        with open(hf, "w") as f:
            for (addr, port, _), k in zip(c.hosts, gpus):
                f.write(f"{entry(addr, port)} slots=4 gpus={k}\n")
        r = c.run("--head-runs-work=false", "--size", str(size), prog=exe, hostfile=hf,
                  timeout=120)
        check(r.returncode == 0, f"exit {r.returncode} (gpus {gpus})", r.stdout, r.stderr)
        lines = unprefixed(r.stdout.splitlines())
        local = want if size == 2 else single_node(exe, "--size", str(size)).splitlines()
        check(lines[:-1] == local[:-1], f"results equal the single-node run (gpus {gpus})",
              r.stdout, local, r.stderr)
        check(lines[-1] == f"on {where}", f"placed on {where} (gpus {gpus})", r.stdout, r.stderr)
    c.expect_no_workers()


GPU_RETRY_PROGRAM = """@gpus(1) @retry(2)
task g(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.1 { }
  print("span g", i, "node", node_id(), "from", t0, "to", now())
  return 2 * i + 1
}
workflow main(n: i64 = 40) {
  let rs = await [g(i) for i in 0..n]
  var total: i64 = 0
  for r in rs { total += r }
  print("total", total)
}
"""


def case_tasks_gpus_node_lost(c):
    """Two nodes with gpus=1 each; node 2's worker is SIGKILLed while it
    runs an @gpus(1) task: the share it held is dropped with the node and
    its tasks are retried on node 1, still one at a time there; the total
    is exact."""
    exe = c.compile("gretry", GPU_RETRY_PROGRAM)
    want = f"total {sum(2 * i + 1 for i in range(40))}"
    hf = os.path.join(c.dir, "gpu_hosts.txt")
    with open(hf, "w") as f:
        f.write(f"{entry(*c.hosts[0][:2])} slots=2 gpus=1\n")
        f.write(f"{entry(*c.hosts[1][:2])} slots=2 gpus=1\n")
    head = subprocess.Popen(c.args("--head-runs-work=false", prog=exe, hostfile=hf),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        _, seen = read_until(head.stdout, r"\[node 2\] span g", 60)
        victim = c.worker_of(2)
        check(victim, "node 2's worker", c.workers())
        os.kill(victim, signal.SIGKILL)
        head.wait(timeout=120)
        out = "".join(seen) + drain(head.stdout)
        err = head.stderr.read()
        check(head.returncode == 0, f"head exit {head.returncode}", out, err)
        check(out.splitlines()[-1] == want, "output", out, err)
        check(re.search(r"node 2 \(\[127\.0\.0\.3\]:\d+\) lost: ", err), "loss reported", err)
        one = [sp for sp in spans(out, "g") if sp[0] == 1]
        check(one and most_at_once(one) == 1, f"node 1: {most_at_once(one)} at once", out)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers(within=6)


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


GROWN_PROGRAM = """struct Row { name: str, xs: f64[] }
// Arrays grown by push (spare room behind len) as task arguments and
// results, and as an actor's state, across nodes.
task grow(rows: Row[], words: str[], k: i64) -> Row[] {
  var out = rows[0..len(rows)]
  var xs: f64[] = []
  for i in 0..k { xs.push(f64(i) / 4.0) }
  out.push(Row { name: join("-", words) + str(k), xs: xs })
  return out
}
actor Log {
  var lines: str[] = []
  fn add(s: str) -> i64 { lines.push(s); return len(lines) }
  fn all() -> str[] { return lines }
}
workflow main(n: i64 = 8) {
  var rows: Row[] = []
  var words: str[] = []
  let log = spawn Log()
  for i in 0..n {
    words.push("w" + str(i))
    rows.push(Row { name: "r" + str(i), xs: [f64(i)] })
    let got = await grow(rows, words, i + 3)
    let last = got.pop()
    print(i, len(got), last.name, last.xs, node_id() == 0)
    await log.add(last.name)
  }
  let lines = await log.all()
  print(len(lines), lines[len(lines) - 1], sort(lines)[0])
}
"""


def case_tasks_grown_arrays(c):
    """Arrays grown by push, whose data blocks have room past their length,
    travel as task arguments and results and as a remote actor's state
    exactly as a single-node run passes them (only len elements go on the
    wire)."""
    exe = c.compile("grown", GROWN_PROGRAM)
    local = single_node(exe)
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout == local, "output differs from the single-node run", r.stdout, local)
    check("7 8 w0-w1-w2-w3-w4-w5-w6-w710 [0.0, 0.25," in local, "grown values", local)
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
        f.write(f"{entry(*c.hosts[0][:2])} slots=2\n")
    r = c.run("--head-runs-work=false", "--n", "3", prog=exe, hostfile=one, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(sorted(r.stdout.splitlines()) == sorted(
        [f"hello from task {i} node 1" for i in range(3)] + ["main saw 3 results"]),
        "one working node: unprefixed", r.stdout)
    c.expect_no_workers()


RESUME_PRINT_PROGRAM = """task hello(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.2 { }
  print("task", i, "line 1")
  print("task", i, "line 2")
  return i * i
}
workflow main(n: i64 = 24) {
  let rs = await [hello(i) for i in 0..n]
  var total: i64 = 0
  for r in rs { total += r }
  print("main total", total)
}
"""


def kill_head_after(c, exe, ckdir, pattern, count, hostfile=None):
    """Starts exe with --checkpoint-dir ckdir (the head not working),
    SIGKILLs the head once `count` lines of its stdout match pattern, and
    waits until no worker is left."""
    head = subprocess.Popen(c.args("--head-runs-work=false", "--checkpoint-dir", ckdir,
                                   prog=exe, hostfile=hostfile),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        seen = []
        for _ in range(count):
            _, got = read_until(head.stdout, pattern, 60)
            seen += got
        time.sleep(0.1)  # the journal's flusher writes every 20 ms
        check(head.poll() is None, "head still running when killed", "".join(seen))
        head.send_signal(signal.SIGKILL)
        head.wait()
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers(within=6)


def case_tasks_print_resume(c):
    """Remote tasks' output is journaled with their results: the head is
    SIGKILLed partway, and --resume (same --nodes and --checkpoint-dir)
    prints what an uninterrupted run prints.  Tasks run concurrently, so
    lines are compared as multisets with the node in the prefix left out
    (which node runs a re-run task varies); a task's two lines carry the
    same "[node K] " prefix, replayed or not, as they did when printed."""
    exe = c.compile("rprint", RESUME_PRINT_PROGRAM)
    hosts = os.path.join(c.dir, "slots2.txt")
    with open(hosts, "w") as f:
        f.writelines(f"{entry(h[0], h[1])} slots=2\n" for h in c.hosts)
    want = [f"task {i} line {k}" for i in range(24) for k in (1, 2)] + [
        f"main total {sum(i * i for i in range(24))}"]

    def check_output(out, what):
        lines = out.splitlines()
        check(lines and lines[-1] == want[-1], f"{what}: main's line last", out)
        node_of = {}
        bare = []
        for l in lines[:-1]:
            m = re.fullmatch(r"\[node ([12])\] (task (\d+) line [12])", l)
            check(m, f"{what}: a prefixed task line", l, out)
            check(node_of.setdefault(m.group(3), m.group(1)) == m.group(1),
                  f"{what}: a task's lines name one node", out)
            bare.append(m.group(2))
        check(sorted(bare + lines[-1:]) == sorted(want), f"{what}: the lines", out)

    r = c.run("--head-runs-work=false", prog=exe, hostfile=hosts, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check_output(r.stdout, "uninterrupted")
    ckdir = os.path.join(c.dir, "ck")
    # some tasks done (their second line printed)
    kill_head_after(c, exe, ckdir, r"line 2", 8, hostfile=hosts)
    r = c.run("--head-runs-work=false", "--checkpoint-dir", ckdir, "--resume", prog=exe,
              hostfile=hosts, timeout=120)
    check(r.returncode == 0, f"resume exit {r.returncode}", r.stdout, r.stderr)
    m = re.search(r"(\d+) answered from the journal", r.stderr)
    check(m and int(m.group(1)) >= 1, "some tasks answered from the journal", r.stderr)
    check_output(r.stdout, "resumed")
    c.expect_no_workers()


ACTOR_PRINT_PROGRAM = """actor Acc {
  var total: i64 = 0
  fn add(i: i64) -> i64 {
    let t0 = now()
    while now() - t0 < 0.05 { }
    total += i * i
    print("add", i, "total", total)
    return total
  }
}
workflow main(n: i64 = 30) {
  let a = spawn Acc()
  let b = spawn Acc()
  var s: i64 = 0
  for i in 0..n {
    s += await a.add(i)
    s += await b.add(i + 100)
  }
  print("main", s)
}
"""


def case_actors_print_resume(c):
    """Remote actors' output is journaled with their results: the head is
    SIGKILLed partway, and --resume prints what an uninterrupted run
    prints, in order (the calls are awaited one by one).  The journal
    answers the calls made before the kill with the lines as the head
    printed them ("[node K] " included), while the resumed actors, on
    workers again, rebuild their state: without @checkpoint by re-running
    those calls muted, with @checkpoint(every = 4) from the newest
    checkpoint plus the calls after it; the rest print live."""
    for ck in (False, True):
        src = ("@checkpoint(every = 4)\n" if ck else "") + ACTOR_PRINT_PROGRAM
        actors_print_resume(c, c.compile("aprint_ck" if ck else "aprint", src), ck)


def actors_print_resume(c, exe, ck):
    want = single_node(exe).splitlines()
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    got = r.stdout.splitlines()
    check(unprefixed(got) == want, "uninterrupted: the single-node lines", r.stdout, want)
    check(all(re.match(r"\[node [12]\] add ", l) for l in got[:-1]), "actors on workers",
          r.stdout)
    ckdir = os.path.join(c.dir, "ck" + str(ck))
    kill_head_after(c, exe, ckdir, r"add \d+ total", 16)
    r = c.run("--head-runs-work=false", "--checkpoint-dir", ckdir, "--resume", prog=exe,
              timeout=120)
    check(r.returncode == 0, f"resume exit {r.returncode} (checkpoint {ck})", r.stdout, r.stderr)
    m = re.search(r"(\d+) answered from the journal", r.stderr)
    check(m and int(m.group(1)) >= 10, "calls answered from the journal", r.stderr)
    if ck:
        check(re.search(r"2 actors restored from checkpoints", r.stderr), "restored", r.stderr)
    lines = r.stdout.splitlines()
    check(unprefixed(lines) == want, f"resumed: the uninterrupted run's lines (checkpoint {ck})",
          r.stdout, want, r.stderr)
    check(all(re.match(r"\[node [12]\] add ", l) for l in lines[:-1]),
          "every line from a worker (journaled or live)", r.stdout)
    c.expect_no_workers()


TREE_PROGRAM = """task leaf(i: i64) -> i64 { return i % 7 }
task add(a: future<i64>, b: future<i64>) -> i64 { return await a + await b }
workflow main(n: i64 = 16384) {
  var level = [leaf(i) for i in 0..n]
  while len(level) > 1 {
    level = [add(level[2 * k], level[2 * k + 1]) for k in 0..len(level) / 2]
  }
  print("sum", await level[0])
}
"""


def case_tasks_future_tree(c):
    """A reduce tree of 32767 calls, 16383 of them taking two futures, on
    2 workers: the exact sum, within 60 s.  A call waiting for future
    arguments is woken by its own arguments, and a submission does not
    walk the backlog: before, every completion rescanned all waiting
    calls and this took over 3 minutes here (about 1 s now)."""
    exe = c.compile("tree", TREE_PROGRAM)
    t0 = time.time()
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    took = time.time() - t0
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout == f"sum {sum(i % 7 for i in range(16384))}\n", "the exact sum", r.stdout)
    check(took < 60, f"took {took:.1f} s", r.stderr)
    print(f"tasks_future_tree: {took:.2f} s")
    c.expect_no_workers()


RELATIVE_PROGRAM = """import std.io
task size_of(path: str) -> i64 { return len(io.read_text(path)) * 10 }
task where() -> i64 { return node_id() }
workflow main() {
  let ns = await [size_of("data/in.txt") for i in 0..8]
  let ws = await [where() for i in 0..8]
  var on_workers = true
  for w in ws { if w == 0 { on_workers = false } }
  print("sizes", ns, "on workers", on_workers)
}
"""


def case_tasks_relative_paths(c):
    """Workers start in the head's working directory where their host has
    it (as mpirun does): a task on a worker reads data/in.txt relative to
    the folder the head was started in."""
    exe = c.compile("relpath", RELATIVE_PROGRAM)
    d = os.path.join(c.dir, "run dir 'quoted'")  # a space and quotes travel too
    os.makedirs(os.path.join(d, "data"))
    with open(os.path.join(d, "data", "in.txt"), "w") as f:
        f.write("twelve bytes")
    r = subprocess.run(c.args("--head-runs-work=false", prog=exe), capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=d)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout == f"sizes {[120] * 8} on workers true\n".replace("'", ""), "relative reads",
          r.stdout, r.stderr)
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
        check(re.search(r"node 2 \(\[127\.0\.0\.3\]:\d+\) lost: ", err), "loss reported", err)
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
        f.write(f"{entry(*c.hosts[0][:2])} slots=1\n")
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


def with_env(**kv):
    """os.environ with kv set, for the head (it forwards SFLOW_OBJECT_*)."""
    class Ctx:
        def __enter__(self):
            self.old = {k: os.environ.get(k) for k in kv}
            os.environ.update({k: str(v) for k, v in kv.items()})

        def __exit__(self, *a):
            for k, v in self.old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return Ctx()


def case_tasks_objects(c):
    """Results over the object threshold stay on the worker that made them
    and are fetched in chunks when awaited: the output equals a single-node
    run, both at the default 1 MiB threshold (2.4 MB results) and with it
    lowered to 4 KiB (8 KB results); below it, nothing is fetched as an
    object; a result never awaited is never fetched."""
    exe = c.compile("objects", OBJECT_PROGRAM)
    for args, env, objects in ((["--n", "300000"], {}, 4),
                               (["--n", "1000"], {}, 0),
                               (["--n", "1000"], {"SFLOW_OBJECT_THRESHOLD": 4096}, 4),
                               (["--n", "300000", "--lazy"], {}, 1)):
        local = [l for l in single_node(exe, *args).splitlines() if l.startswith("check")]
        with with_env(**env):
            r = c.run("--head-runs-work=false", "--cluster-log", *args, prog=exe, timeout=60)
        check(r.returncode == 0, f"exit {r.returncode} {args} {env}", r.stdout, r.stderr)
        got = [l for l in r.stdout.splitlines() if l.startswith("check")]
        check(got == local and len(got) == 1, f"output differs from single node {args} {env}",
              r.stdout, local)
        fetched = re.findall(r"object \d+ \(task 'big', (\d+) bytes\) fetched from node \d "
                             r"in (\d+) chunks?", r.stderr)
        check(len(fetched) == objects, f"{objects} objects fetched {args} {env}", r.stderr)
        if objects:
            check(re.search(rf"{objects} objects? \(\d+ bytes\) fetched", r.stderr),
                  "summary counts", r.stderr)
        if objects:
            size = int(fetched[0][0])
            check(size > 8 * int(args[1]), "object size", r.stderr)
            check(int(fetched[0][1]) == -(-size // (256 << 10)), "256 KiB chunks", r.stderr)
    c.expect_no_workers()


def case_tasks_object_owner_killed(c):
    """The worker holding a result is SIGKILLed before the head fetched it:
    the task re-runs elsewhere within its @retry budget (the output is
    exact); without a budget, the task fails naming the lost result."""
    for retry in (True, False):
        src = OBJECT_PROGRAM if retry else OBJECT_PROGRAM.replace("@retry(1)\n", "")
        exe = c.compile("owner" + ("_retry" if retry else ""), src)
        want = [l for l in single_node(exe, "--m", "1").splitlines() if l.startswith("check")]
        with with_env(SFLOW_OBJECT_SERVE_DELAY_MS=3000):
            head = c.start("--head-runs-work=false", "--cluster-log", "--m", "1", prog=exe)
        try:
            line, _ = read_until(head.stderr, r"held by node \d as object", 30)
            node = int(re.search(r"held by node (\d)", line).group(1))
            victim = c.worker_of(node)
            check(victim, f"node {node}'s worker", c.workers())
            os.kill(victim, signal.SIGKILL)
            head.wait(timeout=30)
            out = drain(head.stdout)
            err = drain(head.stderr)
            if retry:
                check(head.returncode == 0, f"head exit {head.returncode}", out, err)
                got = [l for l in out.splitlines() if l.startswith("check")]
                check(got == want, "output after the re-run", out, want)
                check(re.search(r"fetched from node \d", err), "fetched after the re-run", err)
            else:
                check(head.returncode == 70, f"head exit {head.returncode}", out, err)
                check(re.search(rf"task 'big' failed after 1 attempt: node {node} was lost: .*"
                                r"\(it held the task's result, \d+ bytes, not yet fetched\)", err),
                      "failure names the lost result", err)
        finally:
            if head.poll() is None:
                head.kill()
                head.wait()
        c.expect_no_workers(within=6)


def case_tasks_object_moves(c):
    """Tasks taking future<...> arguments run on workers: a result over the
    object threshold stays on its worker and goes from there to the
    consumer's worker (or is used in place when the consumer runs where it
    is), never through the head; the output equals a single-node run.  With
    SFLOW_OBJECT_LOCALITY=-1 consumers avoid the holder, so bytes must move
    worker to worker; by default they go where the bytes are."""
    exe = c.compile("consume", CONSUMER_PROGRAM)
    want = [l for l in single_node(exe).splitlines() if l.startswith("check")]
    for env, moved in (({"SFLOW_OBJECT_LOCALITY": -1}, True), ({}, False)):
        with with_env(**env):
            r = c.run("--head-runs-work=false", "--cluster-log", prog=exe, timeout=60)
        check(r.returncode == 0, f"exit {r.returncode} {env}", r.stdout, r.stderr)
        got = [l for l in r.stdout.splitlines() if l.startswith("check")]
        check(got == want, f"output differs from single node {env}", r.stdout, want)
        held = re.findall(r"task 'big' result \(\d+ bytes\) held by node (\d) as object (\d+)",
                          r.stderr)
        check(len(held) == 3, "3 objects held", r.stderr)
        check(not re.search(r"fetched from node", r.stderr), "no head fetch", r.stderr)
        moves = re.findall(r"object (\d+) \(task 'big', \d+ bytes\) moved from node (\d) to "
                           r"node (\d)", r.stderr)
        local = re.findall(r"object (\d+) \(task 'big', \d+ bytes\) used in place on node "
                           r"(\d)", r.stderr)
        check(len(moves) + len(local) == 5, "5 inputs (3 use, 2 pair)", r.stderr)
        check(all(a != b for _, a, b in moves), "a move is between two nodes", r.stderr)
        owner = {i: n for n, i in held}
        check(all(owner[i] == n for i, n in local), "used in place on its owner", r.stderr)
        check(all(owner[i] == a for i, a, _ in moves), "moved from its owner", r.stderr)
        if moved:
            # use: its one input is avoided; pair: one of two may be on its node.
            check(len(moves) >= 4, "inputs moved worker to worker", r.stderr)
            check(re.search(rf"{len(moves)} objects \(\d+ bytes\) moved worker to worker",
                            r.stderr), "summary counts moves", r.stderr)
        else:
            check(len(local) >= 3, "uses placed on their input's node", r.stderr)
        released = re.findall(r"object (\d+) \(task 'big', \d+ bytes\) released on node (\d)",
                              r.stderr)
        check(sorted(i for i, _ in released) == sorted(owner), "every object released",
              r.stderr)
    c.expect_no_workers()


def case_tasks_object_dropped(c):
    """A big result that main drops without awaiting is released on its
    worker as soon as it is held: before main goes on (the calls made
    after the 1.5 s wait are not even made yet), not at the end of the
    run; the run's output is unchanged."""
    exe = c.compile("consume", CONSUMER_PROGRAM)
    want = [l for l in single_node(exe, "--drop").splitlines() if l.startswith("check")]
    r = c.run("--head-runs-work=false", "--cluster-log", "--drop", prog=exe, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check([l for l in r.stdout.splitlines() if l.startswith("check")] == want,
          "output differs from single node", r.stdout, want)
    lines = r.stderr.splitlines()
    first = [i for i, l in enumerate(lines) if re.search(r"task 'big' result .* held by", l)]
    check(first, "objects held", r.stderr)
    m = re.search(r"held by node (\d) as object (\d+)", lines[first[0]])
    node, obj = m.group(1), m.group(2)
    rel = [i for i, l in enumerate(lines)
           if re.search(rf"object {obj} \(task 'big', \d+ bytes\) released on node {node}", l)]
    check(len(rel) == 1 and rel[0] < first[1], "released before the next object was made",
          r.stderr)
    check(not re.search(r"fetched from node", r.stderr), "never fetched", r.stderr)
    c.expect_no_workers()


def case_tasks_object_input_lost(c):
    """The worker holding a consumer's input is SIGKILLed before the
    consumer's worker fetched it (SFLOW_OBJECT_SERVE_DELAY_MS holds the
    answer back): with @retry on the producer it re-runs and the consumer
    runs again, its own attempts not charged, and the output is exact;
    without, the consumer fails naming the lost input, exit 70."""
    for retry in (True, False):
        src = CONSUMER_PROGRAM if retry else CONSUMER_PROGRAM.replace("@retry(1)\n", "")
        exe = c.compile("lost" + ("_retry" if retry else ""), src)
        want = [l for l in single_node(exe, "--m", "1").splitlines() if l.startswith("check")]
        with with_env(SFLOW_OBJECT_SERVE_DELAY_MS=3000, SFLOW_OBJECT_LOCALITY=-1):
            head = c.start("--head-runs-work=false", "--cluster-log", "--m", "1", prog=exe)
        try:
            line, _ = read_until(head.stderr, r"held by node \d as object", 30)
            node = int(re.search(r"held by node (\d)", line).group(1))
            time.sleep(0.5)  # the consumer is placed on the other node and asks
            victim = c.worker_of(node)
            check(victim, f"node {node}'s worker", c.workers())
            os.kill(victim, signal.SIGKILL)
            head.wait(timeout=40)
            out = drain(head.stdout)
            err = drain(head.stderr)
            check(not re.search(r"fetched from node", err), "no head fetch", err)
            if retry:
                check(head.returncode == 0, f"head exit {head.returncode}", out, err)
                got = [l for l in out.splitlines() if l.startswith("check")]
                check(got == want, "output after the re-run", out, want)
                check(re.search(r"tasks \(0 failed, 1 retry\)", err),
                      "one retry: the producer's, none of the consumers'", err)
            else:
                check(head.returncode == 70, f"head exit {head.returncode}", out, err)
                check(re.search(r"task 'use' failed after 1 attempt: \S+:\d+:\d+: task 'big' "
                                rf"failed after 1 attempt: (node {node} was lost|its result "
                                rf"\(object \d+, \d+ bytes on node {node}\) could not be "
                                r"fetched)", err), "failure names the lost input", err)
        finally:
            if head.poll() is None:
                head.kill()
                head.wait()
        c.expect_no_workers(within=6)


def case_tasks_object_wrong_secret(c):
    """A connection to a worker's object listener that does not prove the
    run secret (a wrong HMAC, or nothing at all) is refused and logged; the
    run goes on and its output is exact.  Each connection opens with a
    fresh nonce that the HMAC covers, so a greeting cannot be replayed."""
    exe = c.compile("consume", CONSUMER_PROGRAM)
    want = [l for l in single_node(exe, "--drop").splitlines() if l.startswith("check")]
    head = c.start("--head-runs-work=false", "--cluster-log", "--drop", prog=exe)
    try:
        line, _ = read_until(head.stderr, r"node 1 ready: .*objects on \S+:\d+", 30)
        addr, port = re.search(r"objects on (\S+):(\d+)", line).groups()
        def nonce_of(s):
            got = b""
            while len(got) < 32:
                k = s.recv(32 - len(got))
                check(k, "the listener sends a 32-byte nonce first", got)
                got += k
            return got

        s = socket.create_connection((addr, int(port)))
        first = nonce_of(s)
        s.sendall(b"\x01" * 8 + b"\xff" * 32)
        check(s.recv(8) == b"", "no answer to a wrong HMAC")
        s.close()
        read_until(head.stderr, r"\[node 1\] sflow worker 1: refused object connection from "
                   r"\S+: wrong HMAC", 10)
        s = socket.create_connection((addr, int(port)))
        check(nonce_of(s) != first, "a fresh nonce per connection")
        s.sendall(b"garbage")
        s.close()
        read_until(head.stderr, r"refused object connection from \S+: no greeting", 10)
        head.wait(timeout=40)
        out = drain(head.stdout)
        err = drain(head.stderr)
        check(head.returncode == 0, f"head exit {head.returncode}", out, err)
        check([l for l in out.splitlines() if l.startswith("check")] == want, "output", out, want)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers()


FAILED_INPUT_PROGRAM = """task bad(k: i64) -> i64[] {
  if k > 0 { fail("no data") }
  return [k]
}
@retry(1)
task use(a: future<i64[]>) -> i64 {
  print("use on node", node_id())
  let x = await a
  return len(x)
}
workflow main() {
  let u = use(bad(3))
  print("got", await u)
}
"""


def case_tasks_future_arg_failed(c):
    """A task whose future argument failed runs on a worker and fails there
    as it does in a single-node run: same message (the consumer's @retry
    spent awaiting the failure, the producer's cause inside), exit 70."""
    exe = c.compile("failarg", FAILED_INPUT_PROGRAM)
    local = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    check(local.returncode == 70, f"single-node exit {local.returncode}", local.stderr)
    want = [l for l in local.stderr.splitlines() if "runtime error" in l]
    r = c.run("--head-runs-work=false", "--cluster-log", prog=exe, timeout=60)
    check(r.returncode == 70, f"exit {r.returncode}", r.stdout, r.stderr)
    got = [l for l in r.stderr.splitlines() if "runtime error" in l]
    check(got == want and len(got) == 1, "the single-node message", r.stderr, want)
    where = re.findall(r"use on node (\d+)", r.stdout)
    check(len(where) == 2 and "0" not in where, "both attempts ran on workers", r.stdout)
    check(re.search(r"task 'use' failed after 2 attempts: \S+:8:11: task 'bad' failed after 1 "
                    r"attempt: \S+:2:14: fail: no data", got[0]), "message shape", got[0])
    c.expect_no_workers()


MIXED_OBJECT_PROGRAM = """@retry(1)
task big(k: i64, n: i64) -> i64[] {
  return [(i * 7 + k) % 1000003 for i in 0..n]
}
task use(k: i64, a: future<i64[]>, b: future<i64[]>) -> i64 {
  let x = await a
  let y = await b
  var s: i64 = k
  for v in x { s = (s * 31 + v) % 1000000007 }
  for v in y { s = (s * 17 + v) % 1000000007 }
  return s
}
task twice(a: future<i64[]>) -> i64[] {
  let x = await a
  return [v * 2 for v in x]
}
workflow main(n: i64 = 2000, m: i64 = 16) {
  let bs = [big(k, n) for k in 0..m]
  let ts = [twice(bs[k]) for k in 0..m]
  let us = [use(k, bs[k], ts[(k + 1) % m]) for k in 0..m]
  let direct = await bs
  let r = await us
  var s: i64 = 0
  for x in r { s = (s * 7 + x) % 1000000007 }
  var d: i64 = 0
  for a in direct { d += a[n - 1] }
  let t0 = await ts[0]
  print("check", s, d, t0[n - 1])
}
"""


def case_tasks_object_mixed(c):
    """16 producers, 16 consumers that make held results from held inputs
    (twice), 16 that take two of them (use), and main awaiting the
    producers' results too (the head fetches objects that consumers'
    payloads still name: they stay on their owners until those are done),
    on 3 workers at a 4 KiB threshold, with and without the head running
    work: the output equals a single-node run and every held object is
    released exactly once."""
    exe = c.compile("mixed", MIXED_OBJECT_PROGRAM)
    want = [l for l in single_node(exe).splitlines() if l.startswith("check")]
    for hw in ("false", "true"):
        with with_env(SFLOW_OBJECT_THRESHOLD=4096):
            r = c.run(f"--head-runs-work={hw}", "--cluster-log", prog=exe, timeout=120)
        check(r.returncode == 0, f"exit {r.returncode} head-runs-work={hw}", r.stdout, r.stderr)
        check([l for l in r.stdout.splitlines() if l.startswith("check")] == want,
              f"output differs from single node, head-runs-work={hw}", r.stdout, want)
        held = re.findall(r"held by node (\d) as object (\d+)", r.stderr)
        released = re.findall(r"object (\d+) \(task '\w+', \d+ bytes\) released on node (\d)",
                              r.stderr)
        check(sorted((o, n) for n, o in held) == sorted(released),
              f"every held object released once, head-runs-work={hw}", r.stderr)
        if hw == "false":
            check(len(held) == 32, "32 objects held", r.stderr)
            check(re.search(r"moved from node \d to node \d", r.stderr), "some moved", r.stderr)
    c.expect_no_workers()


def case_tasks_pipeline_example(c):
    """examples/pipeline.sflow on 2 workers with the object threshold at
    4 KiB: transform (which takes extract's future) runs on the workers,
    extract's results reach it there (in place or worker to worker, never
    through the head), and the output equals a single-node run."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                           "pipeline.sflow")) as f:
        exe = c.compile("pipeline", f.read())
    want = [l for l in single_node(exe).splitlines() if l.startswith(("batch", "done"))]
    with with_env(SFLOW_OBJECT_THRESHOLD=4096):
        r = c.run("--head-runs-work=false", "--cluster-log", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    got = [l for l in r.stdout.splitlines() if l.startswith(("batch", "done"))]
    check(got == want, "output differs from single node", r.stdout, "\n".join(want))
    inputs = re.findall(r"object \d+ \(task 'extract', \d+ bytes\) (moved from node \d to|used "
                        r"in place on) node \d", r.stderr)
    check(len(inputs) == 12, "every transform got its batch on a worker", r.stderr)
    check(not re.search(r"task 'extract', \d+ bytes\) fetched", r.stderr),
          "the head never fetched a batch", r.stderr)
    c.expect_no_workers()


def unprefixed(lines):
    return [re.sub(r"^\[node \d+\] ", "", l) for l in lines]


def actor_on_worker_prints(c, exe, want):
    """exe's one actor, run with --head-runs-work=false, is placed on a
    worker (the program prints "node N" from it) and the rest of its
    output equals want, the single-node run's."""
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    placed = [l for l in lines if l.startswith("node ") or "] node " in l]
    where = [int(l.split()[-1]) for l in placed]
    check(len(where) == 1 and where[0] > 0, "actor placed on a worker", r.stdout)
    check(unprefixed([l for l in lines if l not in placed]) == want,
          "output equals the single-node run", r.stdout, "\n".join(want))


def single_node(exe, *args):
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"single-node run exit {r.returncode}", r.stdout, r.stderr)
    return r.stdout


MAPS_PROGRAM = """fn weight(w: str) -> i64 { return len(w) }
fn one(w: str) -> i64 { return 1 }

task count(words: str[], f: fn(str) -> i64) -> map<str, i64> {
  var m = map<str, i64>()
  for w in words { m[w] = m.get(w, 0) + f(w) }
  return m
}

task merge(a: map<str, i64>, b: map<str, i64>) -> map<str, i64> {
  var out = map<str, i64>()
  for k in a.keys() { out[k] = a[k] }
  for k in b.keys() { out[k] = out.get(k, 0) + b[k] }
  return out
}

task pick(i: i64) -> fn(str) -> i64 {
  if i % 2 == 0 { return weight }
  return one
}

actor Tally {
  var seen = map<str, map<str, i64>>()
  fn add(name: str, m: map<str, i64>) -> i64 { seen[name] = m; return len(seen) }
  fn all() -> map<str, map<str, i64>> { return seen }
  fn where() -> i64 { return node_id() }
}

workflow main() {
  let words = ["the", "a", "river", "the", "station", "a", "the"]
  let t = spawn Tally()
  print("node", await t.where())
  var total = map<str, i64>()
  for i in 0..8 {
    let f = await pick(i)
    let m = await count([words[(i + j) % 7] for j in 0..(i % 4 + 2)], f)
    total = await merge(total, m)
    print(i, f, m, await t.add("batch" + str(i), m))
  }
  print(total)
  print(await t.all())
}
"""


def case_maps_fn_values_nodes(c):
    """Maps (nested too) and function values cross nodes: tasks on the
    workers take and return them, an actor placed on a worker keeps a map
    of maps; the output equals a single-node run's (a function value is an
    index into the executable's table, the same on every node)."""
    exe = c.compile("maps", MAPS_PROGRAM)
    local = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    check(local.returncode == 0, "single-node run", local.stdout, local.stderr)
    want = [l for l in local.stdout.splitlines() if not l.startswith("node ")]
    check(any("<fn weight>" in l for l in want) and any('{"batch0": {' in l for l in want),
          "the single-node run prints function values and nested maps", local.stdout)
    actor_on_worker_prints(c, exe, want)
    c.expect_no_workers()


NN_PROGRAM = """import std.nn

struct Mlp { fc1: nn.Linear, fc2: nn.Linear }
fn forward(m: Mlp, x: tensor) -> tensor { return nn.forward(m.fc2, relu(nn.forward(m.fc1, x))) }

// One data-parallel shard's gradients: a task on a worker.
task shard_grads(m: Mlp, x: tensor, y: i64[]) -> tensor[] {
  nn.zero_grad(params(m))
  backward(nn.cross_entropy(forward(m, x), y))
  return grads(m)
}

actor Trainer {
  var m: Mlp
  var opt: nn.AdamW
  init() {
    m = Mlp { fc1: nn.linear(6, 5, seed = 1), fc2: nn.linear(5, 3, seed = 2) }
    opt = nn.adamw(params(m), lr = 0.05)
  }
  fn step(k: i64) -> f32 {
    nn.zero_grad(params(m))
    let loss = nn.cross_entropy(forward(m, randn([8, 6], seed = k)), [(i + k) % 3 for i in 0..8])
    backward(loss)
    nn.step(opt)
    return loss.item()
  }
  fn where() -> i64 { return node_id() }
}

workflow main() {
  let m = Mlp { fc1: nn.linear(6, 5, seed = 1), fc2: nn.linear(5, 3, seed = 2) }
  let gs = [shard_grads(m, randn([4, 6], seed = s), [s % 3, 1, 2, 0]) for s in 0..4]
  for g in gs { let v = await g; print(len(v), v[0].shape(), v[0].data()[0]) }
  let t = spawn Trainer()
  print("node", await t.where())
  for k in 0..5 { print("loss", await t.step(k)) }
}
"""


def case_tensors_nodes(c):
    """Tensors cross nodes: tasks on the workers take a model struct of
    tensors and return its gradients, and an actor on a worker trains a
    model with AdamW; the output equals a single-node run's, bit for bit
    (shortest round-trip floats)."""
    exe = c.compile("nnprog", NN_PROGRAM)
    local = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    check(local.returncode == 0, "single-node run", local.stdout, local.stderr)
    want = [l for l in local.stdout.splitlines() if not l.startswith("node ")]
    check(sum(l.startswith("loss ") for l in want) == 5, "the single-node run trains", local.stdout)
    actor_on_worker_prints(c, exe, want)
    c.expect_no_workers()


def case_rl_runners_nodes(c):
    """std.rl over --nodes unchanged: examples/cartpole.sflow's runner group
    and learner placed on the 3 workers (the head runs no work) train 40
    PPO iterations and evaluate, printing exactly the single-node run's
    curve and evaluations (rollouts, weights and batches cross nodes as
    values; the random streams do not depend on the node)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "examples", "cartpole.sflow")) as f:
        exe = c.compile("cartpole", f.read())
    # --target 501 is above CartPole's best return, so all 40 iterations run
    # however soon the policy is good (since issue #26 it can be by 11).
    flags = ["--total_steps", "20480", "--timing=false", "--eval_from", "60", "--target", "501",
             "--eval_episodes", "10"]
    want = single_node(exe, *flags)
    check(want.count("iteration ") >= 8 and "evaluation at" in want,
          "the single-node run trains and evaluates", want)
    r = c.run("--head-runs-work=false", *flags, prog=exe, timeout=180)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(unprefixed(r.stdout.splitlines()) == want.splitlines(),
          "output equals the single-node run", r.stdout, want)
    c.expect_no_workers()


def case_actors_remote(c):
    """An actor spawned by main runs on a worker: node_id() there is not 0,
    its print lines arrive prefixed by that node, results are exact and the
    output equals a single-node run's; a failing method fails only that
    call (the await of it, with the usual message)."""
    exe = c.compile("act", ACTOR_PROGRAM)
    want = [l for l in single_node(exe).splitlines() if not l.startswith("node ")]
    r = c.run("--head-runs-work=false", prog=exe, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    where = [int(l.split()[1]) for l in lines if l.startswith("node ")]
    check(len(where) == 1 and where[0] > 0, "actor placed on a worker", r.stdout)
    check(f"[node {where[0]}] hello 1 from the actor" in lines,
          "the method's print forwarded, prefixed by its node", r.stdout)
    check(unprefixed([l for l in lines if not l.startswith("node ")]) == want,
          "output equals the single-node run", r.stdout, "\n".join(want))
    # The head runs work too (it has the most free slots here): same output.
    r = c.run(prog=exe, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(unprefixed([l for l in r.stdout.splitlines() if not l.startswith("node ")]) == want,
          "output with --head-runs-work", r.stdout)
    # Awaiting the call that failed on the worker: the single-node message.
    r = c.run("--head-runs-work=false", "--doom", prog=exe, timeout=60)
    check(r.returncode == 70, f"exit {r.returncode}", r.stdout, r.stderr)
    check(re.search(r"runtime error: call of 'Counter.bad' failed: \S*act.sflow:13:16: fail: "
                    r"too big: 5", r.stderr), "failure message", r.stderr)
    check(unprefixed([l for l in r.stdout.splitlines() if not l.startswith("node ")]) == want,
          "the other calls were unaffected", r.stdout)
    c.expect_no_workers()


TRACE_PROGRAM = """@retry(1)
task work(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.02 { }
  if attempt() == 0 && i == 3 { fail("flaky \\u{1} " + str(i)) }
  return node_id()
}
actor Counter {
  var n: i64 = 0
  fn add(x: i64) -> i64 { n += x; return node_id() }
}
workflow main(n: i64 = 24) {
  let rs = await [work(i) for i in 0..n]
  var line = "nodes:"
  for r in rs { line = line + " " + str(r) }
  print(line)
  let c = spawn Counter()
  var where: i64 = -1
  for i in 0..3 { where = await c.add(i) }
  print("actor on", where)
}
"""


def case_trace_nodes(c):
    """--trace in a --nodes run holds the workers' events too: pid = node,
    process names naming each host, each worker's clock aligned to the
    head's (the workers' clocks are skewed by 5 s here, which alignment
    must undo): every task slice run on a worker lies inside the head's
    dispatch span for it, within 2 ms.  The file is strict JSON."""
    exe = c.compile("traced", TRACE_PROGRAM)
    tr = os.path.join(c.dir, "trace.json")
    with with_env(SFLOW_TEST_CLOCK_SKEW_MS=5000):
        r = c.run("--trace", tr, prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    with open(tr, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    ev = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev
             if e["ph"] == "M" and e["name"] == "process_name"}
    for k in (1, 2):
        check(k in names and c.hosts[k - 1][0] in names[k],
              f"node {k} named by its host", names)
    check(0 in names and "head" in names[0], "node 0 is the head", names)
    nodes = [int(x) for x in next(l for l in r.stdout.splitlines()
                                  if "nodes:" in l).split("nodes:")[1].split()]
    xs = [e for e in ev if e["ph"] == "X" and e["cat"] == "task"]
    for k in (0, 1, 2):
        done = [e for e in xs if e["pid"] == k and "error" not in e["args"]]
        check(len(done) == nodes.count(k),
              f"node {k}: {nodes.count(k)} tasks ran there, {len(done)} slices with pid {k}",
              r.stdout)
    check(set(nodes) >= {1, 2}, "work ran on both workers", r.stdout)
    failed = [e for e in xs if "error" in e["args"]]
    check(len(failed) == 1 and "flaky \x01 3" in failed[0]["args"]["error"],
          "the failed attempt's error, control character included", failed)
    where = int(re.search(r"actor on (\d+)", r.stdout).group(1))
    calls = [e for e in ev if e["ph"] == "X" and e["cat"] == "call"]
    check(len(calls) == 3 and all(e["pid"] == where for e in calls),
          f"the actor's calls on its node {where}", calls)
    named = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    check({(e["pid"], e["tid"]) for e in xs + calls} <= named, "every track named")
    # Dispatch spans: async begin/end pairs on the head, one per attempt sent.
    begins = {e["id"]: e for e in ev if e["ph"] == "b" and e["cat"] == "dispatch"}
    ends = {e["id"]: e for e in ev if e["ph"] == "e" and e["cat"] == "dispatch"}
    check(begins and begins.keys() == ends.keys(), "dispatch spans begin and end")
    spans = [(begins[i]["args"]["node"], begins[i]["name"], begins[i]["args"]["attempt"],
              begins[i]["ts"], ends[i]["ts"]) for i in begins]
    remote = [e for e in xs if e["pid"] > 0]
    check(len(spans) == len(remote), f"{len(spans)} dispatch spans, {len(remote)} worker slices")
    # Each worker runs one task at a time (slots=1), in the order the head
    # sent them: its k-th slice belongs to the k-th span sent to it.
    tol = 2000.0  # us
    worst = -1e9
    for k in (1, 2):
        mine = sorted((s for s in spans if s[0] == k), key=lambda s: s[3])
        slices = sorted((e for e in remote if e["pid"] == k), key=lambda e: e["ts"])
        check(len(mine) == len(slices), f"node {k}: one slice per dispatch span")
        for s, e in zip(mine, slices):
            check(s[1] == e["name"] and s[2] == e["args"]["attempt"], "slices in dispatch order",
                  s, e)
            over = max(s[3] - e["ts"], e["ts"] + e["dur"] - s[4])
            worst = max(worst, over)
            check(over <= tol, f"node {k}: a worker slice outside its dispatch span by "
                  f"{over:.0f} us (clocks not aligned?): slice {e['ts']:.0f}+{e['dur']:.0f} us, "
                  f"span {s[3]:.0f}..{s[4]:.0f} us")
    print(f"trace_nodes: {len(remote)} worker slices inside their dispatch spans "
          f"(closest edge {-worst:.0f} us inside)")
    # The head not working: the actor is on a worker, its calls traced there.
    with with_env(SFLOW_TEST_CLOCK_SKEW_MS=5000):
        r = c.run("--trace", tr, "--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    with open(tr, "rb") as f:
        ev = json.loads(f.read().decode("utf-8"))["traceEvents"]
    where = int(re.search(r"actor on (\d+)", r.stdout).group(1))
    calls = [e for e in ev if e["ph"] == "X" and e["cat"] in ("call", "init")]
    check(where > 0 and len([e for e in calls if e["cat"] == "call"]) == 3 and
          all(e["pid"] == where for e in calls), f"a remote actor's calls on node {where}", calls)
    check(not [e for e in ev if e["ph"] == "X" and e["pid"] == 0 and e["cat"] == "task"],
          "no task slices on the head when it runs no work")
def case_rand_nodes(c):
    """rand_f32() in tasks (nested, retried), an actor and a group draws
    from streams derived from the seed and each call's identity, so a
    --nodes run prints the numbers a single-node run prints, whichever
    node ran each call (tests/runtime/rand.sflow; the derivation is
    checked by tests/runtime/rand_test.py)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime",
                           "rand.sflow")) as f:
        exe = c.compile("rand", f.read())
    want = single_node(exe, "--n", "6", "--threads", "1")
    check(want.count("\n") == 8, "single-node run", want)
    for extra in (["--head-runs-work=false"], []):
        r = c.run("--n", "6", *extra, prog=exe, timeout=120)
        check(r.returncode == 0, f"exit {r.returncode} {extra}", r.stdout, r.stderr)
        check(r.stdout == want, f"--nodes output differs from the single-node run {extra}",
              r.stdout, want)
    c.expect_no_workers()


def case_tune_nodes(c):
    """A std.tune sweep (ASHA over tests/tune/curves.sflow) with --nodes
    prints the configurations, decisions and table of a single-node run:
    its iterations are task calls placed like any other, and the driver's
    decisions depend only on their results (docs/tune.md)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tune",
                           "curves.sflow")) as f:
        exe = c.compile("curves", f.read())
    args = ("--samples", "12", "--max_t", "8", "--rf", "2")
    want = single_node(exe, *args)
    check(want.endswith("done\n"), "single-node run", want)
    r = c.run(*args, "--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout == want, "--nodes output differs from the single-node run", r.stdout, want)
    c.expect_no_workers()


def kill_when_running(c, exe, marker, *extra, hostfile=None):
    """Starts exe on the cluster, SIGKILLs the worker that prints marker,
    and returns (exit code, stdout, stderr, killed node).  The call that
    printed the marker is interrupted, so a restart runs it again and its
    lines appear twice: callers leave the marker's lines out."""
    head = subprocess.Popen(c.args("--head-runs-work=false", *extra, prog=exe, hostfile=hostfile),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        line, seen = read_until(head.stdout, marker, 60)
        node = int(re.match(r"\[node (\d+)\]", line).group(1)) if line.startswith("[") else 1
        victim = c.worker_of(node)
        check(victim, f"node {node}'s worker", c.workers())
        os.kill(victim, signal.SIGKILL)
        head.wait(timeout=60)
        return head.returncode, "".join(seen) + drain(head.stdout), head.stderr.read(), node
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()


def case_actor_worker_killed(c):
    """The worker running a checkpointed actor is SIGKILLed mid-run: the
    actor restarts on another worker from its checkpoint, the calls since
    are replayed, and the output equals a clean run's."""
    # every = 7: the replay includes calls whose results were delivered,
    # and their print lines must not appear twice.
    for every, mark in ((1, 5), (7, 12)):
        exe = c.compile(f"acc{every}", RESTART_PROGRAM.replace("RESTARTS", "2")
                        .replace("EVERY", str(every)))
        want = single_node(exe)
        code, out, err, node = kill_when_running(c, exe, rf"running {mark}")
        check(code == 0, f"head exit {code}", out, err)
        check([l for l in unprefixed(out.splitlines()) if not l.startswith("running")] ==
              [l for l in want.splitlines() if not l.startswith("running")],
              f"output equals the clean run (every = {every})", out, want, err)
        check(re.search(rf"actor 'Acc' lost with node {node} \(.*\); restarted on node \d+ from "
                        r"its checkpoint after call \d+ \(1 restart left\)", err),
              "restart noted", err)
        c.expect_no_workers(within=6)


def case_actor_restarts_exhausted(c):
    """Out of @restarts, or with no live worker left, the actor's pending
    calls fail with a message naming the actor and the cause: exit 70, no
    hang."""
    # every = 7, killed in call 13: the journal holds calls 8-12 that the
    # checkpoint (call 7) does not, which --resume must run again.
    exe = c.compile("acc0", RESTART_PROGRAM.replace("RESTARTS", "0").replace("EVERY", "7"))
    t0 = time.time()
    ckdir = os.path.join(c.dir, "ck")
    code, out, err, node = kill_when_running(c, exe, r"running 12", "--checkpoint-dir", ckdir)
    check(code == 70, f"head exit {code}", out, err)
    check(re.search(rf"call of 'Acc.add' failed: actor 'Acc' lost with node {node} \(.*\); no "
                    r"restarts left \(@restarts\(0\)\)", err), "budget message", err)
    check(time.time() - t0 < 30, "no hang")
    # The head wrote the worker's checkpoints where --resume looks for them.
    files = os.listdir(os.path.join(ckdir, "ckpt")) if os.path.isdir(os.path.join(ckdir, "ckpt")) else []
    check("Acc-0-0.7" in files, "checkpoint files on the head", files)
    # --resume finishes the run (the actor restored on the head from them).
    r = c.run("--head-runs-work=false", "--checkpoint-dir", ckdir, "--resume", prog=exe)
    check(r.returncode == 0, f"resume exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout.splitlines()[-2:] == single_node(exe).splitlines()[-2:], "resumed results",
          r.stdout, r.stderr)
    check(re.search(r"1 actor restored from checkpoints", r.stderr), "restored", r.stderr)
    c.expect_no_workers(within=6)
    one = os.path.join(c.dir, "one.txt")
    with open(one, "w") as f:
        f.write(f"{entry(*c.hosts[0][:2])} slots=1\n")
    exe = c.compile("acc2", RESTART_PROGRAM.replace("RESTARTS", "2").replace("EVERY", "1"))
    code, out, err, node = kill_when_running(c, exe, r"running 5", hostfile=one)
    check(code == 70, f"head exit {code}", out, err)
    check(re.search(r"call of 'Acc.add' failed: actor 'Acc' lost with node 1 \(.*\); no live node "
                    r"can take it", err), "no-live-node message", err)
    c.expect_no_workers(within=6)


# Data-parallel training across workers: a group of replicas reduces its
# gradients with allreduce_mean(grads(m)) (in place, in buckets) and steps;
# main checks the replicas stay bitwise equal and equal, to rounding (the
# ring sums in its own order), one model stepped on the summed gradient.
NN_DDP_PROGRAM = """import std.nn
struct Mlp { fc1: nn.Linear, fc2: nn.Linear }
fn forward(m: Mlp, x: tensor) -> tensor { return nn.forward(m.fc2, relu(nn.forward(m.fc1, x))) }
fn model() -> Mlp { return Mlp { fc1: nn.linear(8, 64, seed = 1), fc2: nn.linear(64, 3, seed = 2) } }
fn shard_loss(m: Mlp, k: i64, r: i64) -> tensor {
  let y = [(i * 7 + k + r) % 3 for i in 0..12]
  return nn.cross_entropy(forward(m, randn([12, 8], seed = 100 * k + r)), y)
}
fn flat(m: Mlp) -> f32[] {
  var out: f32[] = []
  for p in params(m) { out = out + p.data() }
  return out
}
actor Replica {
  var m: Mlp
  var opt: nn.SGD
  init() {
    m = model()
    opt = nn.sgd(params(m), 0.1)
  }
  fn step(k: i64) -> f32[] {
    nn.zero_grad(params(m))
    backward(shard_loss(m, k, group_rank()))
    allreduce_mean(grads(m))
    nn.step(opt)
    return flat(m)
  }
  fn where() -> i64 { return node_id() }
}
workflow main(size: i64 = 3) {
  let g = spawn Replica() * size
  let ref = model()
  let opt = nn.sgd(params(ref), 0.1 / f64(size))
  var same = true
  var close = true
  for k in 0..5 {
    let ws = await g.all.step(k)
    nn.zero_grad(params(ref))
    for r in 0..size { backward(shard_loss(ref, k, r)) }
    nn.step(opt)
    let w = flat(ref)
    for i in 0..len(w) {
      for r in 1..size { same = same && ws[r][i] == ws[0][i] }
      close = close && abs(ws[0][i] - w[i]) <= 1e-6
    }
  }
  print("replicas equal", same, "reference", close)
  let nodes = await g.all.where()
  var distinct = true
  for k in 0..len(nodes) {
    for j in 0..k { if nodes[j] == nodes[k] { distinct = false } }
    if nodes[k] == 0 { distinct = false }
  }
  print("members on distinct workers", distinct)
}
"""


def case_nn_allreduce_nodes(c):
    """A group of 3 replicas, one per worker, trains data-parallel with
    allreduce_mean(grads(m)) over the TCP ring: the replicas' weights stay
    bitwise equal and equal a single-process reference to 1e-6."""
    exe = c.compile("ddp", NN_DDP_PROGRAM)
    want = single_node(exe).splitlines()
    check(want == ["replicas equal true reference true", "members on distinct workers false"],
          "single-node run", want)
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    got = unprefixed(r.stdout.splitlines())
    check(got == ["replicas equal true reference true", "members on distinct workers true"],
          "replicas equal across workers", r.stdout, r.stderr)
    c.expect_no_workers()


def case_group_allreduce_nodes(c):
    """A group of 3 on 3 workers (one member each) runs allreduce_sum in a
    loop, barrier, broadcast and allgather through the TCP ring: exact
    results, equal to a single-node run's; g[i], len(g) work."""
    exe = c.compile("grp", GROUP_PROGRAM)
    want = single_node(exe).splitlines()
    check(want[-1] == "members on distinct workers false", "single-node run", want)
    r = c.run("--head-runs-work=false", prog=exe, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    got = unprefixed(r.stdout.splitlines())
    check(got[:-1] == want[:-1], "results equal the single-node run", r.stdout, want, r.stderr)
    check(got[-1] == "members on distinct workers true", "placed across workers", r.stdout)
    # More members than free slots on the workers: the group stays on the head.
    r = c.run("--head-runs-work=false", "--size", "4", prog=exe, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode} (size 4)", r.stdout, r.stderr)
    check(r.stdout.splitlines()[-1] == "members on distinct workers false", "kept local", r.stdout)
    check("node" not in r.stdout, "no output from workers", r.stdout)
    # Two members per worker (slots=2): the ring runs over loopback too.
    two = os.path.join(c.dir, "two.txt")
    with open(two, "w") as f:
        for addr, port, _ in c.hosts[:2]:
            f.write(f"{entry(addr, port)} slots=2\n")
    want4 = single_node(exe, "--size", "4").splitlines()
    r = c.run("--head-runs-work=false", "--size", "4", prog=exe, hostfile=two, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode} (2 per worker)", r.stdout, r.stderr)
    check(unprefixed(r.stdout.splitlines()) == want4, "2 per worker: single-node results",
          r.stdout, want4, r.stderr)
    check(re.search(r"^\[node [12]\] running 3$", r.stdout, re.M), "member 0 ran on a worker",
          r.stdout)
    c.expect_no_workers()


def case_ring_listener_preauth(c):
    """A worker's group ring listener while a group of 2 runs collectives
    across the workers: a silent connection gets the 32-byte nonce and is
    dropped after 5 s, without holding up a garbage one (refused at once)
    or the group, whose results equal a single-node run's."""
    exe = c.compile("grp", GROUP_PROGRAM)
    args = ("--size", "2", "--n", "40", "--slow", "0.25")
    want = single_node(exe, *args).splitlines()
    head = c.start("--head-runs-work=false", "--cluster-log", *args, prog=exe)
    try:
        line, _ = read_until(head.stderr, r"node 1 ready: .*pid (\d+).*objects on \S+:\d+", 30)
        pid = int(re.search(r"pid (\d+)", line).group(1))
        oaddr, oport = re.search(r"objects on (\S+):(\d+)", line).groups()
        _, before = read_until(head.stdout, r"running 3", 30)  # the ring is up
        data = [a for a in listening(pid) if not a.endswith(":" + oport)]
        check(len(data) == 1, "one data listener besides the object one", listening(pid))
        daddr, dport = data[0].rsplit(":", 1)
        silent = socket.create_connection((daddr, int(dport)))
        time.sleep(0.2)
        g = socket.create_connection((daddr, int(dport)))
        t0 = time.time()
        g.sendall(b"garbage")
        g.close()
        read_until(head.stderr, r"\[node 1\] sflow worker 1: refused a ring connection: bad "
                   r"greeting", 5)
        took = time.time() - t0
        check(took < 1.5, f"the refusal took {took:.1f} s (held up by the silent connection?)")
        got, waited = closed_after(silent, 15)
        check(len(got) == 32 and 4.3 <= waited + 0.2 + took <= 7.5,
              f"silent ring connection dropped after {waited:.1f} s ({len(got)} bytes)")
        read_until(head.stderr, r"refused a ring connection: no greeting within 5 s", 5)
        head.wait(timeout=60)
        out = "".join(before) + drain(head.stdout)
        err = drain(head.stderr)
        check(head.returncode == 0, f"head exit {head.returncode}", out, err)
        got = unprefixed(out.splitlines())
        check(got[:-1] == want[:-1], "results equal the single-node run", out, want, err)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers()


def case_group_worker_killed(c):
    """A member's worker is SIGKILLed while the group runs collectives: the
    whole group restarts on live workers from the common checkpoint, with a
    new ring, and the results equal a clean run's."""
    exe = c.compile("grp", GROUP_PROGRAM)
    want = [l for l in single_node(exe, "--slow", "0.05").splitlines()
            if not l.startswith("running")]
    code, out, err, node = kill_when_running(c, exe, r"running 3", "--slow", "0.05")
    check(code == 0, f"head exit {code}", out, err)
    got = [l for l in unprefixed(out.splitlines()) if not l.startswith("running")]
    check(got[:-1] == want[:-1], "output equals the clean run", out, want, err)
    check(got[-1] == "members on distinct workers true", "placed across workers", out)
    check(re.search(r"actor 'Member' \(a group member\) lost with node \d+ .*; the group of 3 "
                    r"restarted from its common checkpoint", err), "group restart noted", err)
    c.expect_no_workers(within=6)



def case_group_resume(c):
    """A group without restarts loses a member's node: every pending call
    fails with the cause (exit 70); the members' checkpoints, shipped to the
    head, are on its disk at a common epoch, and --resume finishes the run
    with the results of a clean one."""
    exe = c.compile("grp0", GROUP_PROGRAM.replace("@restarts(2)", "@restarts(0)")
                    .replace("every = 1", "every = 2"))
    ckdir = os.path.join(c.dir, "ck")
    code, out, err, node = kill_when_running(c, exe, r"running 3", "--slow", "0.05",
                                             "--checkpoint-dir", ckdir)
    check(code == 70, f"head exit {code}", out, err)
    check(re.search(r"call of 'Member.step' on member \d failed: actor 'Member' \(a group member\) "
                    rf"lost with node {node} .*; no restarts left for the group", err),
          "group failure message", err)
    files = sorted(os.listdir(os.path.join(ckdir, "ckpt")))
    check(all(f"Member-0-{r}.2" in files for r in range(3)), "every member's epoch-2 file",
          files)
    r = c.run("--head-runs-work=false", "--slow", "0.05", "--checkpoint-dir", ckdir, "--resume",
              prog=exe)
    check(r.returncode == 0, f"resume exit {r.returncode}", r.stdout, r.stderr)
    want = single_node(exe).splitlines()
    check(r.stdout.splitlines()[-4:-1] == want[-4:-1], "resumed results", r.stdout, want)
    check(re.search(r"3 actors restored from checkpoints", r.stderr), "restored", r.stderr)
    check(r.stdout.splitlines()[-1] == "members on distinct workers true",
          "the resumed group runs on workers again", r.stdout)
    check(re.search(r"\d+ answered from the journal", r.stderr), "answered from the journal",
          r.stderr)
    c.expect_no_workers(within=6)



# ------------------------------------------------- std.train fine-tune

FORTUNES = "/usr/share/games/fortunes"
FT_RECIPE = ["--categories", "computers,politics,science", "--samples", "32", "--eval-samples",
             "24", "--epochs", "2", "--seq-len", "16", "--batch", "16", "--lr", "2e-4",
             "--log-every", "1", "--workers", "2", "--data", FORTUNES]


def finetune_setup(c):
    """The compiled examples/finetune.sflow and its flags with the model of
    scripts/install-models.sh ($SFLOW_MODELS or <build>/models)."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(c.sflowc)))
    model = os.path.join(os.environ.get("SFLOW_MODELS") or os.path.join(build, "models"),
                         "all-minilm-l6-v2")
    check(os.path.isfile(os.path.join(model, "model.safetensors")),
          f"no model at {model}: run scripts/install-models.sh (make deps does)")
    check(os.path.isfile(os.path.join(FORTUNES, "computers")),
          "no fortunes: scripts/install-deps.sh installs the Debian package fortunes")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "examples", "finetune.sflow")) as f:
        exe = c.compile("finetune", f.read())
    return exe, FT_RECIPE + ["--model", model]


def finetune_figures(out, metrics):
    """(each epoch's accuracy, the step losses) of a run."""
    with open(metrics) as f:
        rows = list(csv_rows(f))
    return re.findall(r"accuracy (\d\.\d+)", out), [float(r["loss"]) for r in rows]


def csv_rows(f):
    import csv
    return csv.DictReader(f)


def same_training(got, want, what, *details):
    (acc, losses), (acc0, losses0) = got, want
    check(acc == acc0 and len(acc0) == 2, f"{what}: accuracies {acc} = {acc0}", *details)
    check(len(losses) == len(losses0) == 4 and
          max(abs(a - b) for a, b in zip(losses, losses0)) < 1e-5,
          f"{what}: step losses {losses} within 1e-5 of {losses0}", *details)


def case_finetune_nodes(c):
    """The small fine-tune (examples/finetune.sflow, 2 workers) over --nodes,
    one member per worker and the gradients summed over the TCP ring, gives
    the single-node run's losses (to 1e-5: the ring sums in its own order)
    and accuracies."""
    exe, args = finetune_setup(c)
    m1, m2 = os.path.join(c.dir, "one.csv"), os.path.join(c.dir, "nodes.csv")
    out = single_node(exe, *args, "--metrics", m1, "--journal=false")
    r = c.run("--head-runs-work=false", *args, "--metrics", m2, prog=exe, timeout=200)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(re.search(r"^\[node [1-9]\] step 1 epoch 1 ", r.stdout, re.M),
          "member 0 trained on a worker", r.stdout)
    same_training(finetune_figures(r.stdout, m2), finetune_figures(out, m1), "--nodes",
                  r.stdout, out)
    c.expect_no_workers(within=10)


TRAIN_PROGRAM = """import std.data
import std.nn
import std.train

struct Mlp { fc1: nn.Linear, fc2: nn.Linear }
fn forward(m: Mlp, x: tensor) -> tensor { return nn.forward(m.fc2, relu(nn.forward(m.fc1, x))) }
fn rows(px: f32[], idx: i64[]) -> tensor { return tensor(data.take_rows(px, 64, idx), [len(idx), 64]) }

@checkpoint(every = 1) @restarts(2)
actor Worker {
  var m: Mlp
  var t: train.State
  var px: f32[]
  var ys: i64[]
  init(cfg: train.Config, px0: f32[], ys0: i64[]) {
    px = px0
    ys = ys0
    m = Mlp { fc1: nn.linear(64, 32, seed = 1), fc2: nn.linear(32, 10, seed = 2) }
    t = train.start(cfg, params(m))
  }
  fn epoch(e: i64, slow: f64) -> train.Report {
    if train.rank() == 0 { print("running", e) }
    for idx in train.batches(t, e) {
      train.step(t, nn.cross_entropy(forward(m, rows(px, idx)), [ys[i] for i in idx]), len(idx))
      let t0 = now()
      while now() - t0 < slow { }
    }
    return train.report(t)
  }
  fn evaluate(test: i64[]) -> f64 {
    let idx = [test[i] for i in train.eval_part(len(test))]
    no_grad(true)
    let guess = forward(m, rows(px, idx)).argmax(1)
    no_grad(false)
    return train.accuracy(train.count_right(guess, [ys[i] for i in idx]), len(idx))
  }
  fn where() -> i64 { return node_id() }
}

workflow main(path: str, epochs: i64 = 6, slow: f64 = 0.0) {
  let t = data.read_csv(path)
  var px: f32[] = zeros_f32(t.rows * 64)
  for j in 0..64 {
    let col = data.ints(t, "p" + str(j))
    for i in 0..t.rows { px[i * 64 + j] = f32(col[i]) / 16.0 }
  }
  let ys = data.ints(t, "label")
  let test = [i for i in 600..800]
  let g = spawn Worker(train.config(600, 60, epochs, 0.01, seed = 3), px, ys) * 2
  for e in 0..epochs {
    let r = (await g.all.epoch(e, slow))[0]
    print("epoch", e + 1, "loss", r.loss)
  }
  print("accuracy", (await g.all.evaluate(test))[0])
  let nodes = await g.all.where()
  print("members on distinct workers", nodes[0] != nodes[1] && nodes[0] != 0 && nodes[1] != 0)
}
"""


def train_figures(out):
    """(the epoch losses, the accuracy line) of TRAIN_PROGRAM's output."""
    lines = unprefixed(out.splitlines())
    losses = [float(l.split()[-1]) for l in lines if l.startswith("epoch ")]
    return losses, [l for l in lines if l.startswith("accuracy")]


def case_train_worker_killed(c):
    """std.train's data-parallel MLP on the digits (a group of 2, one per
    worker, a @checkpoint every epoch): the worker of member 0 is SIGKILLed
    in epoch 3; the group restarts on the live workers from its common
    checkpoint (epoch 2), runs epoch 3 again and finishes with the epoch
    losses (to 1e-6: the ring sums in its own order) and the accuracy of a
    single-node run.  (finetune_worker_killed does the same with BERT.)"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    csv_path = os.path.join(root, "examples", "data", "digits.csv")
    exe = c.compile("train", TRAIN_PROGRAM)
    want_losses, want_acc = train_figures(single_node(exe, "--path", csv_path, "--journal=false"))
    code, out, err, node = kill_when_running(c, exe, r"running 2", "--path", csv_path,
                                             "--slow", "0.03")
    check(code == 0, f"head exit {code}", out, err)
    check(re.search(r"actor 'Worker' \(a group member\) lost with node \d+ .*; the group of 2 "
                    r"restarted from its common checkpoint", err), "group restart noted", err)
    losses, acc = train_figures(out)
    check(len(losses) == len(want_losses) == 6 and
          max(abs(a - b) for a, b in zip(losses, want_losses)) < 1e-6,
          f"epoch losses {losses} within 1e-6 of {want_losses}", out, err)
    check(acc == want_acc and len(acc) == 1, f"accuracy {acc} = {want_acc}", out)
    check("members on distinct workers true" in out, "placed across workers", out)
    c.expect_no_workers(within=6)

def case_finetune_worker_killed(c):
    """The small BERT fine-tune (examples/finetune.sflow, a group of 2 on 3
    workers, a checkpoint of about 280 MB per member after every epoch and
    its evaluation): member 0's worker is SIGKILLed in epoch 2; the group
    restarts on the live workers from the epoch-1 checkpoint and finishes
    with the single-node step losses (1e-5) and accuracies.  The head
    ships both members' states to the new workers while it keeps every
    node's heartbeats going: its --cluster-log says how long its control
    loop went without sending them, and how long each node went without
    a frame arriving, and both stay far below the 3 s limit.  (Before the
    head moved the states off its control thread, it fell silent for
    seconds on two loaded cores and the live workers left.)"""
    exe, args = finetune_setup(c)
    m1, m2 = os.path.join(c.dir, "one.csv"), os.path.join(c.dir, "killed.csv")
    out = single_node(exe, *args, "--metrics", m1, "--journal=false")
    code, got, err, node = kill_when_running(c, exe, r"step 3 epoch 2 ", *args, "--metrics", m2,
                                             "--cluster-log")
    check(code == 0, f"head exit {code}", got, err)
    check(re.search(r"actor 'Worker' \(a group member\) lost with node \d+ .*; the group of 2 "
                    r"restarted from its common checkpoint", err), "group restart noted", err)
    check(len(re.findall(r"lost with node", err)) == 1, "one node lost, no other", err)
    same_training(finetune_figures(got, m2), finetune_figures(out, m1), "restarted", got, err)
    hb = re.search(r"sflow: heartbeats: longest gap between rounds (\d+\.\d+) s", err)
    check(hb and float(hb.group(1)) < 1.5, "the head kept sending heartbeats (gap under 1.5 s)",
          err)
    gaps = [float(g) for g in re.findall(r"sflow: node \d+: longest silence (\d+\.\d+) s", err)]
    check(len(gaps) >= 2 and max(gaps) < 2.5,
          f"the live workers kept answering (silences {gaps} under 2.5 s)", err)
    took = re.search(r"actor calls in (\d+\.\d+) s", err)
    print(f"longest heartbeat gap {hb.group(1)} s, longest silences {gaps} s, run "
          f"{took.group(1) if took else '?'} s")
    c.expect_no_workers(within=10)


# ------------------------------------------------------ worker environment

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT")


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(kv.split("=", 1) for kv in f.read().decode(errors="replace").split("\0")
                    if "=" in kv)


def check_torchrun_env(head_out, pids, master_of, port):
    """Each worker's environment (from exec on, so /proc shows it) and the
    head's (the selftest prints what its getenv returns) under torchrun's
    names; master_of(k) is the head address node k dials."""
    world = str(len(pids) + 1)
    m = re.search(r"^head env (.*)$", head_out, re.M)
    check(m, "no 'head env' line", head_out)
    got = dict(kv.split("=", 1) for kv in m.group(1).split())
    want = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": master_of(1), "MASTER_PORT": str(port)}
    check(got == want, f"head environment {got} != {want}")
    envs = {}
    for k, pid in pids.items():
        env = environ_of(pid)
        want = {"RANK": str(k), "LOCAL_RANK": "0", "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": master_of(k), "MASTER_PORT": str(port)}
        got = {v: env.get(v) for v in TORCHRUN_VARS}
        check(got == want, f"node {k} (pid {pid}) environment {got} != {want}")
        envs[k] = env
    return envs


def hold_and_inspect(c, inspect, *extra, env=None, secs=4):
    """Runs the hold selftest with --cluster-log; while it holds, calls
    inspect(head pid, {node: worker pid}, stdout so far, control port)."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "MASTER_PORT"}
    head = subprocess.Popen(c.args("--cluster-log", "--sflow-selftest", f"hold:{secs}", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=env)
    try:
        pids = node_pids(head, len(c.hosts))
        line, _ = read_until(head.stdout, r"^head env ", 10)
        err_line, seen = read_until(head.stderr, r"control plane listening on", 10)
        port = int(err_line.rsplit(":", 1)[1])
        inspect(head.pid, pids, line, port)
        head.wait(timeout=secs + 15)
        err = "".join(seen) + drain(head.stderr)
        check(head.returncode == 0, f"head exit {head.returncode}", err)
        return err
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()


def case_worker_env(c):
    """Workers see RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT as under torchrun, and the head sets them
    for itself as rank 0 (over a stale RANK in its environment).  A
    CUDA_VISIBLE_DEVICES that a node's own environment sets is kept; the
    head's is neither forwarded nor changed."""
    env = {**os.environ, "RANK": "7", "CUDA_VISIBLE_DEVICES": "3", "MASTER_PORT": "29611"}

    def inspect(head_pid, pids, head_line, port):
        # The user's MASTER_PORT reaches every node; sflow's control port
        # is another one.
        check(port != 29611, "control plane on the user's MASTER_PORT")
        envs = check_torchrun_env(head_line, pids, lambda k: "127.0.0.1", 29611)
        check(envs[1].get("CUDA_VISIBLE_DEVICES") == "1", "node 1's own CUDA_VISIBLE_DEVICES",
              envs[1].get("CUDA_VISIBLE_DEVICES"))
        check("CUDA_VISIBLE_DEVICES" not in envs[2], "node 2 got a CUDA_VISIBLE_DEVICES",
              envs[2].get("CUDA_VISIBLE_DEVICES"))
        check(environ_of(head_pid).get("CUDA_VISIBLE_DEVICES") == "3", "head's own kept")

    hold_and_inspect(c, inspect, env=env)
    c.expect_no_workers()
    # A MASTER_PORT that is not a port is refused before any host is touched.
    r = subprocess.run(c.args("--sflow-selftest", "ready"), capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL,
                       env={**os.environ, "MASTER_PORT": "29x"})
    check(r.returncode == 69 and "MASTER_PORT='29x'" in r.stderr, f"exit {r.returncode}",
          r.stderr)


# ------------------------------------------------- network namespaces

CUT_PROGRAM = """@retry(2)
task slow(i: i64) -> i64 {
  let t0 = now()
  while now() - t0 < 0.1 { }
  return 2 * i + 1
}
workflow main(n: i64 = 60) {
  let rs = await [slow(i) for i in 0..n]
  var total: i64 = 0
  for r in rs { total += r }
  print("total", total)
}
"""


def listening(pid):
    """Local "addr:port" of every listening TCP socket of process pid."""
    r = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=30)
    return [line.split()[3] for line in r.stdout.splitlines() if f"pid={pid}," in line]


def case_netns_tasks(c):
    """3 nodes in namespaces, each reached over its own veth link: the head
    listens only on its side of those links, each worker dials the head
    by its own link (and sees that address as MASTER_ADDR), and 200 tasks
    give exactly the single-node output."""
    addrs = sorted(c.head_addr(i) for i in range(len(c.hosts)))

    def inspect(head_pid, pids, head_line, port):
        socks = listening(head_pid)
        check(sorted(socks) == sorted(f"{a}:{port}" for a in addrs),
              f"head listens on {socks}, want exactly {addrs} port {port}")
        # Without MASTER_PORT in the head's environment: torchrun's default.
        check_torchrun_env(head_line, pids, lambda k: c.head_addr(k - 1), 29500)

    err = hold_and_inspect(c, inspect)
    for k in range(1, len(c.hosts) + 1):
        check(re.search(rf"node {k} ready: {re.escape(entry(c.node_addr(k - 1)[0], 2222))} ", err),
              f"node {k} ready on its namespace address", err)
    exe = c.compile("sum", SUM_PROGRAM)
    local = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    check(local.returncode == 0, "single-node run", local.stderr)
    r = c.run("--head-runs-work=false", prog=exe, timeout=60)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(r.stdout == local.stdout, "output differs from the single-node run", r.stdout,
          r.stderr)
    c.expect_no_workers()


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def case_netns_link_down(c):
    """Mid-run, node 2's link goes down.  The head declares it lost within
    the heartbeat timeout (+2 s), retries its tasks on the live nodes, and
    prints what a clean run prints; node 2's worker, cut off from the head,
    ends by itself (no heartbeat from the head) within the timeout + 3 s."""
    exe = c.compile("cut", CUT_PROGRAM)
    want = f"total {sum(2 * i + 1 for i in range(60))}\n"
    victim = 1  # namespace index of node 2
    t_start = time.time()
    head = c.start("--head-runs-work=false", prog=exe)
    try:
        # Cut once node 2's worker is busy with tasks (its CPU time grows).
        deadline = time.time() + 20
        pid = None
        while time.time() < deadline:
            pid = pid or c.worker_of(2)
            if pid and cpu_seconds(pid) >= 0.15:
                break
            time.sleep(0.02)
        check(pid and cpu_seconds(pid) >= 0.15, "node 2 never ran tasks", pid)
        check(head.poll() is None, "the run ended before the cut")
        t_cut = time.time()
        c.cut(victim)
        line, _ = read_until(head.stderr, r"node 2 \(\[10\.[\d.]+\]:2222\) lost: ", 15)
        detect = time.time() - t_cut
        gone = None
        while time.time() - t_cut < 15:
            if not c.ns_workers(victim):
                gone = time.time() - t_cut
                break
            time.sleep(0.05)
        head.wait(timeout=30)
        out = head.stdout.read()
        err = drain(head.stderr)
        total = time.time() - t_start
        print(f"netns_link_down: lost after {detect:.2f} s ({line.strip()}); cut worker gone "
              f"after {gone if gone is None else round(gone, 2)} s; run {total:.1f} s")
        check(head.returncode == 0, f"head exit {head.returncode}", out, err)
        check(out == want, "output differs from a clean run", out, err)
        check(re.search(r"[1-9]\d* retr", err), "retries counted", err)
        check(detect < 3.0 + 2.0, f"loss detected after {detect:.1f} s (limit 5.0)", line)
        check(gone is not None and gone < 3.0 + 3.0,
              f"cut node's worker still running {gone or 15} s after the cut",
              c.ns_workers(victim))
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    c.expect_no_workers()


def head_unreachable(c, silent):
    """Node 2 can answer SSH but cannot reach the head: its namespace's
    routing policy lets only sshd's replies (source port 2222) out to the
    head.  Everything else there is prohibited, as by a firewall that
    rejects, or (silent) sent into a veth whose other end is down, as by
    one that drops or a cut.  The start fails naming node 2 with its
    worker's own error, at once or after the worker's 10 s connect bound;
    node 1's worker is stopped, the workflow never runs, no worker is left."""
    ns, head = c.netns[1], c.head_addr(1)
    must_ip("-n", ns, "rule", "add", "ipproto", "tcp", "sport", str(c.PORT), "lookup", "main",
            "pref", "100")
    if silent:
        must_ip("-n", ns, "link", "add", "drop0", "type", "veth", "peer", "name", "drop1")
        must_ip("-n", ns, "link", "set", "drop0", "up")
        must_ip("-n", ns, "route", "add", head, "dev", "drop0", "table", "100")
        # A fixed neighbour: no ARP, so no "host unreachable" either.
        must_ip("-n", ns, "neigh", "add", head, "lladdr", "02:00:00:00:00:01", "dev", "drop0",
                "nud", "permanent")
        must_ip("-n", ns, "rule", "add", "to", head, "lookup", "100", "pref", "200")
        why, low, high = "no answer within 10 s", 10, 10 + 5
    else:
        must_ip("-n", ns, "rule", "add", "to", head, "prohibit", "pref", "200")
        why, low, high = "Permission denied", 0, 6
    r = c.run("--cluster-log", timeout=60)
    print(f"head unreachable at start ({'silent' if silent else 'refused'}): exit "
          f"{r.returncode} after {r.seconds:.2f} s")
    check(r.returncode == 69, f"exit {r.returncode} (want 69)", r.stdout, r.stderr)
    check(r.stdout == "", "the workflow ran", r.stdout)
    node2 = re.escape(entry(c.node_addr(1)[0], c.PORT))
    check(re.search(rf"1 of 2 nodes failed to start:\n  {node2}: ", r.stderr),
          "failure names node 2 only", r.stderr)
    check(re.search(rf"\[node 2\] sflow worker 2: cannot connect to the head at "
                    rf"{re.escape(head)}:\d+: {why}", r.stderr),
          "the worker's own error is shown", r.stderr)
    check(low <= r.seconds < high, f"took {r.seconds:.1f} s (want {low} to {high})")
    c.expect_no_workers()


def case_netns_head_unreachable_at_start(c):
    head_unreachable(c, silent=False)


def case_netns_head_silent_at_start(c):
    head_unreachable(c, silent=True)


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    return set()


def cache_copies(c):
    return [f for f in os.listdir(c.cache) if "sflow-" in f] if os.path.isdir(c.cache) else []


def case_cpu_feature_missing(c):
    """An executable built for a CPU feature the hosts lack is refused on
    every host before anything is copied, naming host and feature.  The
    feature (+sse4a on Intel, +amx-tile on AMD) is one no instruction of
    the program uses, so the head itself runs it here; the hosts' real
    /proc/cpuinfo, read over SSH, says they lack it."""
    if platform.machine() != "x86_64":
        raise Skip("the feature chosen is an x86 one")
    flags = cpu_flags()
    feat = next((f for f, name in (("sse4a", "sse4a"), ("amx-tile", "amx_tile"))
                 if name not in flags), None)
    if not feat:
        raise Skip("this CPU has both sse4a and amx_tile")
    exe = c.compile("needs_" + feat.replace("-", "_"), PROGRAM, "--target-features=+" + feat)
    # The head checks its own CPU too (robust/target_self_check): told to
    # skip that, it runs the program alone and refuses the hosts.
    with with_env(SFLOW_SKIP_CPU_CHECK="1"):
        out = single_node(exe, "--n", "1")
        check(out == "head says 14\n", "the head runs it alone", out)
        r = c.run(prog=exe)
    check(r.returncode == 69, f"exit {r.returncode} (want 69)", r.stderr)
    check(r.stdout == "", "the workflow must not run", r.stdout)
    check("2 of 2 nodes failed to start" in r.stderr, "both hosts refused", r.stderr)
    flag = feat.replace("-", "_")
    for addr, port, _ in c.hosts:
        check(re.search(rf"\[{re.escape(addr)}\]:{port}: the host's CPU lacks {feat} "
                        rf"\(/proc/cpuinfo: {flag}\), which \S+ was compiled for "
                        rf"\(--target-cpu=x86-64-v2\)", r.stderr),
              f"no refusal naming {addr}:{port} and {feat}", r.stderr)
    check(not cache_copies(c), "copied before the check", cache_copies(c))
    c.expect_no_workers()
    # The default build needs only x86-64-v2, which these hosts have.
    r = c.run()
    check(r.returncode == 0 and r.stdout == "head says 42\n", "default build refused",
          r.stderr)
    c.expect_no_workers()


def mapped_libraries(pid):
    with open(f"/proc/{pid}/maps") as f:
        return {os.path.basename(line.split()[-1]) for line in f
                if len(line.split()) >= 6 and ".so" in line.split()[-1]}


def case_worker_libraries(c):
    """A worker loads no library beyond the C library: SHA-256 and HMAC
    are the runtime's own (no libcrypto) and only the head speaks SSH (no
    libssh2 on workers).  The head does map libssh2, so the check reads
    the right thing."""
    def inspect(head_pid, pids, line, port):
        head = mapped_libraries(head_pid)
        check(any(l.startswith("libssh2") for l in head), "the head maps no libssh2",
              sorted(head))
        for node, pid in pids.items():
            libs = mapped_libraries(pid)
            bad = sorted(l for l in libs if l.startswith(("libcrypto", "libssl", "libssh2")))
            check(not bad, f"worker {node} maps {bad}", sorted(libs))
    hold_and_inspect(c, inspect)
    c.expect_no_workers()


FAKE_BIN = os.path.join(tempfile.gettempdir(), f"sflow-fakebin-{os.getpid()}")


def newest_glibc(exe):
    r = subprocess.run(["objdump", "-T", exe], capture_output=True, text=True, check=True)
    vs = {tuple(int(x) for x in v.split(".")[:2])
          for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", r.stdout)}
    return "%d.%d" % max(vs)


def case_host_glibc_and_arch(c):
    """A host whose glibc is older than the newest GLIBC_x.y symbol version
    the executable needs (objdump -T), and a host of another architecture,
    are refused before anything is copied, each with its reason.  The
    hosts' sshd puts a folder first on PATH (SetEnv) whose getconf says
    glibc 2.17 (node 1) and whose uname says riscv64 (node 2): what a
    real old or foreign host answers to the check command."""
    if not shutil.which("objdump"):
        raise Skip("needs objdump (binutils)")
    try:
        for i, name, text in ((0, "getconf", "glibc 2.17"), (1, "uname", "riscv64")):
            d = f"{FAKE_BIN}-{i}"
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, name), "w") as f:
                f.write(f"#!/bin/sh\necho '{text}'\n")
            os.chmod(os.path.join(d, name), 0o755)
        r = c.run()
        check(r.returncode == 69, f"exit {r.returncode} (want 69)", r.stderr)
        check(r.stdout == "", "the workflow must not run", r.stdout)
        (a0, p0, _), (a1, p1, _) = c.hosts
        need = newest_glibc(c.prog)
        check(f"[{a0}]:{p0}: the host has glibc 2.17, prog needs glibc {need} or later" in r.stderr,
              f"no glibc refusal for node 1 (the executable needs {need})", r.stderr)
        check(f"[{a1}]:{p1}: the host is riscv64, prog is compiled for {platform.machine()}"
              in r.stderr, "no architecture refusal for node 2", r.stderr)
        check(not cache_copies(c), "copied before the check", cache_copies(c))
        c.expect_no_workers()
    finally:
        for i in range(2):
            shutil.rmtree(f"{FAKE_BIN}-{i}", ignore_errors=True)


def case_campaign_nodes_resume(c):
    """The random-kill campaign (tests/runtime/campaign_test.py) on a
    --nodes run of 2 workers: tasks print on the workers, the actors and
    the group are placed where the head puts them (the head takes some:
    each worker has one slot), and the head is SIGKILLed at random
    moments, also during its resume.  Every finished run must print the
    single-node run's lines in the same order; only the "[node K] "
    prefixes are dropped (which node runs a re-run call varies)."""
    runtime_tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "runtime")
    sys.path.insert(0, runtime_tests)
    import campaign_test as ct
    exe = os.path.join(c.dir, "campaign")
    r = subprocess.run([c.sflowc, os.path.join(runtime_tests, "campaign.sflow"), "-o", exe],
                       capture_output=True, text=True)
    check(r.returncode == 0, "sflowc failed", r.stderr)
    single = subprocess.run([exe, "--journal=false", "--n", "12"], capture_output=True)
    check(single.returncode == 0, "single-node run", single.stderr)

    def normalize(b):
        return re.sub(rb"(?m)^\[node \d+\] ", b"", b)

    camp = ct.Campaign(c.args("--n", "12", prog=exe), c.dir, fault_share=0.1,
                       normalize=normalize, after_kill=lambda: c.expect_no_workers(within=15))
    camp.reference()
    check(camp.ref == single.stdout, "the --nodes run prints the single-node lines",
          camp.ref.decode(), single.stdout.decode())
    log = []
    kills = int(os.environ.get("SFLOW_CAMPAIGN_NODES_KILLS", "6"))
    _, killed, failures = ct.campaign(camp, kills, 7, say=log.append)
    check(not failures, f"{len(failures)} failed trials of {killed} kills", *log)
    check(killed >= kills, f"only {killed} runs were killed", *log)
    print(log[-1])
    c.expect_no_workers()


CASES = {
    "cpu_feature_missing": (2, case_cpu_feature_missing),
    "worker_libraries": (2, case_worker_libraries),
    "host_glibc_and_arch": (2, case_host_glibc_and_arch,
                            lambda sflowc, n: Cluster(sflowc, n, sshd_extra={
                                i: f"SetEnv PATH={FAKE_BIN}-{i}:/usr/bin:/bin\n"
                                for i in range(2)})),
    "deploy_2": (2, case_deploy_2),
    "deploy_4": (4, case_deploy_4),
    "cache_damaged": (2, case_cache_damaged),
    "worker_killed_at_start": (3, case_worker_killed_at_start),
    "worker_stopped_at_start": (3, case_worker_stopped_at_start),
    "worker_slow_at_start": (3, case_worker_slow_at_start),
    "changed_host_key": (2, case_changed_host_key),
    "unknown_host_key": (2, case_unknown_host_key),
    "known_hosts_rules": (2, case_known_hosts_rules),
    "unreachable_host": (1, case_unreachable_host),
    "bad_user_key": (1, case_bad_user_key),
    "wrong_secret": (2, case_wrong_secret),
    "control_plane_preauth": (2, case_control_plane_preauth),
    "allreduce_3": (3, case_allreduce_3),
    "allreduce_4": (4, case_allreduce_4),
    "worker_sigkill": (3, case_worker_sigkill),
    "worker_sigstop": (3, case_worker_sigstop),
    "head_sigkill": (3, case_head_sigkill),
    "agent_and_default_keys": (2, case_agent_and_default_keys),
    "bad_hostfile": (1, case_bad_hostfile),
    "ssh_config_alias": (2, case_ssh_config_alias,
                         lambda sflowc, n: Cluster(sflowc, n, port=free_port("127.0.0.2"))),
    "ssh_config_identities_only": (1, case_ssh_config_identities_only,
                                   lambda sflowc, n: Cluster(sflowc, n,
                                                             port=free_port("127.0.0.2"))),
    "colon_slots_schedule": (1, case_colon_slots_schedule,
                             lambda sflowc, n: Cluster(sflowc, n, port=free_port("127.0.0.2"))),
    "tasks_sum_3": (2, case_tasks_sum_3),
    "tasks_grown_arrays": (2, case_tasks_grown_arrays),
    "tasks_gpus": (2, case_tasks_gpus),
    "tasks_gpus_node_lost": (2, case_tasks_gpus_node_lost),
    "tasks_print": (2, case_tasks_print),
    "tasks_print_resume": (2, case_tasks_print_resume),
    "tasks_worker_killed": (3, case_tasks_worker_killed),
    "tasks_retry_attempt": (2, case_tasks_retry_attempt),
    "tasks_objects": (2, case_tasks_objects),
    "tasks_object_owner_killed": (2, case_tasks_object_owner_killed),
    "tasks_object_moves": (2, case_tasks_object_moves),
    "tasks_object_dropped": (2, case_tasks_object_dropped),
    "tasks_object_input_lost": (2, case_tasks_object_input_lost),
    "tasks_object_wrong_secret": (2, case_tasks_object_wrong_secret),
    "tasks_pipeline_example": (2, case_tasks_pipeline_example),
    "tasks_future_arg_failed": (2, case_tasks_future_arg_failed),
    "tasks_object_mixed": (3, case_tasks_object_mixed),
    "actors_remote": (2, case_actors_remote),
    "maps_fn_values_nodes": (2, case_maps_fn_values_nodes),
    "tensors_nodes": (2, case_tensors_nodes),
    "rl_runners_nodes": (3, case_rl_runners_nodes),
    "trace_nodes": (2, case_trace_nodes),
    "rand_nodes": (2, case_rand_nodes),
    "tune_nodes": (2, case_tune_nodes),
    "actors_gpus": (2, case_actors_gpus),
    "actors_gpus_group": (2, case_actors_gpus_group),
    "actors_print_resume": (2, case_actors_print_resume),
    "tasks_future_tree": (2, case_tasks_future_tree),
    "tasks_relative_paths": (2, case_tasks_relative_paths),
    "actor_worker_killed": (3, case_actor_worker_killed),
    "actor_restarts_exhausted": (2, case_actor_restarts_exhausted),
    "group_allreduce_nodes": (3, case_group_allreduce_nodes),
    "nn_allreduce_nodes": (3, case_nn_allreduce_nodes),
    "ring_listener_preauth": (2, case_ring_listener_preauth),
    "group_worker_killed": (4, case_group_worker_killed),
    "group_resume": (3, case_group_resume),
    "finetune_nodes": (2, case_finetune_nodes),
    "train_worker_killed": (3, case_train_worker_killed),
    "finetune_worker_killed": (3, case_finetune_worker_killed),
    "campaign_nodes_resume": (2, case_campaign_nodes_resume),
    "worker_env": (2, case_worker_env,
                   lambda sflowc, n: Cluster(sflowc, n,
                                             sshd_extra={0: "SetEnv CUDA_VISIBLE_DEVICES=1\n"})),
    "netns_tasks": (3, case_netns_tasks, NetnsCluster),
    "netns_link_down": (3, case_netns_link_down, NetnsCluster),
    "netns_head_unreachable_at_start": (2, case_netns_head_unreachable_at_start, NetnsCluster),
    "netns_head_silent_at_start": (2, case_netns_head_silent_at_start, NetnsCluster),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    # SIGTERM unwinds like ^C, so the cluster's finally (namespaces, veths,
    # sshd) still runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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
    n, fn, *make = CASES[a.case]
    c = None
    try:
        c = (make[0] if make else Cluster)(a.sflowc, n)
        fn(c)
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP
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
