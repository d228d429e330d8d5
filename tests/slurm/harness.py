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
"""
import os
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


class Slurm:
    def __init__(self, cpus=4):
        missing = [d for d in DAEMONS + ["/usr/bin/sinfo", "/usr/bin/sbatch"] if not os.path.exists(d)]
        check(not missing, "Slurm is not installed (scripts/install-deps.sh installs munge slurmctld "
              "slurmd slurm-client): missing " + ", ".join(missing))
        check(os.geteuid() == 0, "the private Slurm needs root (slurmd starts jobs as their user)")
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="sflow-slurm-")
        try:
            self.start(cpus)
        except BaseException:
            self.close()
            raise

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
        for name in ["munged.out", "munged.log", "slurmctld.out", "slurmctld.log", "slurmd.out",
                     "slurmd.log"]:
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
        for d in ["state", "spool"]:
            os.makedirs(self.path(d))
        self.conf = self.path("slurm.conf")
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=sflowtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.sock}
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool")}
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd.pid")}
SlurmctldLogFile={self.path("slurmctld.log")}
SlurmdLogFile={self.path("slurmd.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
RequeueExit=75
SlurmdParameters=config_overrides
NodeName=localhost CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        self.daemon("slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", self.conf])
        self.daemon("slurmd", ["/usr/sbin/slurmd", "-D", "-f", self.conf, "-N", "localhost"])
        self.wait(self.idle, 30, "the node did not come up idle in sinfo")

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
        r = self.cmd("sinfo", "-h", "-o", "%T", check_rc=False)
        return r.returncode == 0 and r.stdout.strip() == "idle"

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
        if all(p.poll() is None for p in self.procs) and len(self.procs) == 3:
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
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
