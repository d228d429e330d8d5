#!/usr/bin/env python3
"""harness.py — what every multi-node case stands on (cluster_test.py runs
them): real sshd servers on loopback or in network namespaces.

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

The cases are in cases_*.py by topic; cluster_test.py's CASES names them.

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
                           text=True, errors="backslashreplace",
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


# ------------------------------------------------ helpers the cases share

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


def single_node(exe, *args):
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"single-node run exit {r.returncode}", r.stdout, r.stderr)
    return r.stdout


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


def unprefixed(lines):
    return [re.sub(r"^\[node \d+\] ", "", l) for l in lines]


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


def listening(pid):
    """Local "addr:port" of every listening TCP socket of process pid."""
    r = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=30)
    return [line.split()[3] for line in r.stdout.splitlines() if f"pid={pid}," in line]


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
