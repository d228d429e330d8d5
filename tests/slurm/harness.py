#!/usr/bin/env python3
"""harness.py — a private, real Slurm on this host for the tests
(slurm_test.py runs the cases).

Slurm() makes a temp dir holding a fresh munge key, a munged on its own
socket (slurm.conf points at it with AuthInfo=socket=...), and a
slurm.conf with private ports, state, spool, pid and log files in that
dir; it starts `slurmctld -D` and `slurmd -D` (one node, `localhost`,
with 4 CPUs whatever the machine has: SlurmdParameters=config_overrides)
and waits until `sinfo` shows the node idle (about a second).  close()
kills every daemon it started, whatever happened; use it as a context
manager.  Anything that keeps Slurm from starting is a Fail with the
daemons' logs, never a skip: the packages come from
scripts/install-deps.sh (munge slurmctld slurmd slurm-client).

The daemons run as root (SlurmUser=root): slurmd must start jobs as
their user.  Without root the case fails saying so.

Slurm(nodes=2) is two nodes: a network namespace sflow-slurm-PID-TAG
that the harness makes, joined to the root namespace by a veth pair on a
/30 of its own (10.A.B.1 in the root namespace, on sfsTAG; 10.A.B.2
inside, on eth0), and a second slurmd inside it (`nsenter
--net=/run/netns/NS slurmd -N 10.A.B.2`).  The nodes are named by their addresses (NodeName=10.A.B.1
and 10.A.B.2, NodeAddr the same), so Slurm's node list is 10.A.B.[1-2]
and a rank on node 2 reaches rank 0 on node 1 only over the veth; the
controller is SlurmctldHost=localhost(10.A.B.1), reachable from both.
Each slurmd has its own spool, pid and log file (%n).  TAG is random and
A.B checked against the addresses and routes in use; namespaces a killed
run left behind (its test process gone) are swept first; close() kills
every process in the namespace and deletes it and the veth, also after a
start that failed half way.
"""
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time


class Fail(Exception):
    pass


def check(cond, what, *details):
    if not cond:
        raise Fail(what + "".join("\n--- " + str(d) for d in details))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


DAEMONS = ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"]
NS_RE = re.compile(r"^sflow-slurm-(\d+)-([0-9a-f]{6})\b", re.M)


def ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    return r.returncode, r.stderr.strip()


def must_ip(*args):
    rc, err = ip(*args)
    check(rc == 0, f"ip {' '.join(args)}: {err}")


def ns_pids(ns):
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in r.stdout.split()]


def kill_ns(ns):
    """Every process in the namespace killed (a namespace lives on while
    one is in it), within 10 s."""
    deadline = time.time() + 10
    while time.time() < deadline:
        pids = ns_pids(ns)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def sweep_stale():
    """Namespaces and veths a killed run (ctest's timeout is a SIGKILL:
    no close()) left behind: those whose test process is gone."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for m in NS_RE.finditer(r.stdout):
        pid, tag = m.groups()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"slurm_test.py" in f.read():
                    continue  # a live run
        except OSError:
            pass
        kill_ns(m.group(0))
        ip("link", "del", f"sfs{tag}")
        ip("netns", "del", m.group(0))


class Slurm:
    def __init__(self, cpus=4, nodes=1):
        missing = [d for d in DAEMONS + ["/usr/bin/sinfo", "/usr/bin/sbatch"] if not os.path.exists(d)]
        check(not missing, "Slurm is not installed (scripts/install-deps.sh installs munge slurmctld "
              "slurmd slurm-client): missing " + ", ".join(missing))
        check(os.geteuid() == 0, "the private Slurm needs root (slurmd starts jobs as their user)")
        check(nodes in (1, 2), "one node, or two (the second in a network namespace)")
        self.procs = []
        self.nodes = nodes
        self.netns = self.veth = None
        self.dir = tempfile.mkdtemp(prefix="sflow-slurm-")
        try:
            if nodes == 2:
                self.make_netns()
            self.start(cpus)
        except BaseException:
            self.close()
            raise

    def make_netns(self):
        check(shutil.which("ip"), "no ip(8) (iproute2; scripts/install-deps.sh installs it)")
        sweep_stale()
        in_use = subprocess.run("ip netns list; ip -o link; ip -o -4 addr; ip -4 route",
                                shell=True, capture_output=True, text=True).stdout
        for _ in range(100):
            tag = "%06x" % random.SystemRandom().getrandbits(24)
            a, b = random.randrange(64, 250), random.randrange(0, 256)
            if tag not in in_use and f"10.{a}.{b}." not in in_use:
                break
        else:
            raise Fail("no free namespace tag and subnet", in_use)
        ns, veth = f"sflow-slurm-{os.getpid()}-{tag}", f"sfs{tag}"
        self.addrs = [f"10.{a}.{b}.1", f"10.{a}.{b}.2"]
        must_ip("netns", "add", ns)
        self.netns = ns
        must_ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.veth = veth
        must_ip("addr", "add", f"{self.addrs[0]}/30", "dev", veth)
        must_ip("link", "set", veth, "up")
        must_ip("-n", ns, "addr", "add", f"{self.addrs[1]}/30", "dev", "eth0")
        must_ip("-n", ns, "link", "set", "eth0", "up")
        must_ip("-n", ns, "link", "set", "lo", "up")

    def path(self, name):
        return os.path.join(self.dir, name)

    def daemon(self, name, argv):
        log = open(self.path(name + ".out"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=self.env())
        p.name = name
        self.procs.append(p)
        return p

    def logs(self):
        out = []
        names = ["munged.out", "munged.log", "slurmctld.out", "slurmctld.log", "slurmd.out",
                 "slurmd.log"]
        if self.nodes == 2:
            names[4:] = [f"{n}{x}" for n in ("slurmd", "slurmd2") for x in (".out", "")] + \
                [f"slurmd-{a}.log" for a in self.addrs]
        for name in names:
            try:
                with open(self.path(name)) as f:
                    out.append(f"{name}:\n" + "".join(f.readlines()[-15:]))
            except OSError:
                pass
        return "\n".join(out)

    def start(self, cpus):
        os.chmod(self.dir, 0o755)  # jobs' users read the conf; munged wants no group/other write
        key = self.path("munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o400)
        self.sock = self.path("munge.sock")
        # --force: munged refuses a socket dir in /tmp (sticky, world-writable parents) otherwise.
        self.daemon("munged", ["/usr/sbin/munged", "-F", "--force", "--socket", self.sock,
                               "--key-file", key, "--log-file", self.path("munged.log"),
                               "--pid-file", self.path("munged.pid"),
                               "--seed-file", self.path("munged.seed")])
        self.wait(lambda: os.path.exists(self.sock), 10, "munged did not create its socket")
        os.makedirs(self.path("state"))
        if self.nodes == 2:
            for a in self.addrs:
                os.makedirs(self.path(f"spool-{a}"))
            n = "-%n"
            ctld = f"localhost({self.addrs[0]})"
            names = ",".join(self.addrs)
            node_lines = "".join(f"NodeName={a} NodeAddr={a} CPUs={cpus} RealMemory=1000 "
                                 "State=UNKNOWN\n" for a in self.addrs)
        else:
            os.makedirs(self.path("spool"))
            n, ctld, names = "", "localhost", "localhost"
            node_lines = f"NodeName=localhost CPUs={cpus} RealMemory=1000 State=UNKNOWN\n"
        self.conf = self.path("slurm.conf")
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=sflowtest
SlurmctldHost={ctld}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.sock}
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool" + n)}
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd" + n + ".pid")}
SlurmctldLogFile={self.path("slurmctld.log")}
SlurmdLogFile={self.path("slurmd" + n + ".log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
RequeueExit=75
SlurmdParameters=config_overrides
{node_lines}PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        self.daemon("slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", self.conf])
        if self.nodes == 2:
            self.daemon("slurmd", ["/usr/sbin/slurmd", "-D", "-f", self.conf, "-N", self.addrs[0]])
            # nsenter, not `ip netns exec`: that one mounts a sysfs of the
            # namespace's over /sys, without the cgroup file system slurmd
            # needs; only the network namespace differs here.
            self.daemon("slurmd2", ["nsenter", f"--net=/run/netns/{self.netns}",
                                    "/usr/sbin/slurmd", "-D", "-f", self.conf, "-N",
                                    self.addrs[1]])
        else:
            self.daemon("slurmd", ["/usr/sbin/slurmd", "-D", "-f", self.conf, "-N", "localhost"])
        self.wait(self.idle, 30, "the nodes did not come up idle in sinfo")

    def env(self, extra=None):
        e = dict(os.environ, SLURM_CONF=self.path("slurm.conf"))
        e.update(extra or {})
        return e

    def cmd(self, *argv, timeout=30, check_rc=True, env=None):
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                           env=self.env(env), stdin=subprocess.DEVNULL)
        if check_rc:
            check(r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}", r.stdout, r.stderr,
                  self.logs())
        return r

    def idle(self):
        r = self.cmd("sinfo", "-h", "-N", "-o", "%T", check_rc=False)
        return r.returncode == 0 and r.stdout.split() == ["idle"] * self.nodes

    def wait(self, cond, seconds, what):
        deadline = time.time() + seconds
        while not cond():
            for p in self.procs:
                check(p.poll() is None, f"{p.name} exited {p.returncode}: {what}", self.logs())
            check(time.time() < deadline, what + f" within {seconds} s", self.logs())
            time.sleep(0.1)

    def job(self, jobid):
        """scontrol show job's fields, as a dict."""
        r = self.cmd("scontrol", "-o", "show", "job", str(jobid))
        fields = {}
        for word in r.stdout.split():
            k, _, v = word.partition("=")
            fields.setdefault(k, v)
        return fields

    def close(self):
        """Kill every daemon, even after a failure; never leave one behind.
        The jobs go first, through this private Slurm itself (only it
        knows their processes)."""
        if all(p.poll() is None for p in self.procs) and len(self.procs) == 2 + self.nodes:
            subprocess.run(["scancel", "--full", "--signal=KILL", "--partition=test"],
                           env=self.env(), capture_output=True, timeout=10)
            deadline = time.time() + 5
            while time.time() < deadline:
                r = subprocess.run(["squeue", "-h"], env=self.env(), capture_output=True, text=True,
                                   timeout=10)
                if r.returncode != 0 or not r.stdout.strip():
                    break
                time.sleep(0.1)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 5
        for p in reversed(self.procs):
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            if self.netns:  # slurmd's steps in it too
                kill_ns(self.netns)
        finally:
            if self.veth:  # deleting one end deletes both
                ip("link", "del", self.veth)
            if self.netns:
                ip("netns", "del", self.netns)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
