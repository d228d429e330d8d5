"""cases_proxy.py — hosts behind a bastion: ProxyJump and ProxyCommand in
the ssh config, through a real bastion sshd on loopback.

Node 0's sshd is the bastion (127.0.0.2), nodes 1 and 2 (127.0.0.3, .4)
the hosts behind it.  Loopback cannot hide the hosts from the head, so the
route is proved by the bastion's own log: sshd at LogLevel DEBUG1 logs each
direct-tcpip channel it opens, with its destination.
"""
import os
import pwd
import re
import shutil
import subprocess

from harness import Cluster, Skip, check, free_port
from cases_start import alias_args


class BastionCluster(Cluster):
    """Cluster whose sshd log their direct-tcpip channels (DEBUG1)."""

    def sshd_command(self, i, cfg):
        return super().sshd_command(i, cfg) + ["-o", "LogLevel=DEBUG1"]


def make_bastion_cluster(sflowc, n):
    return BastionCluster(sflowc, n)


def proxy_config(c, jump_t1, jump_t2, bastion_port=None):
    """An ssh config: bastion, and t1, t2 reached the way jump_* say."""
    me = pwd.getpwuid(os.getuid()).pw_name
    (a0, p0, _), (a1, p1, _), (a2, p2, _) = c.hosts
    cfg = os.path.join(c.dir, "proxy_config")
    with open(cfg, "w") as f:
        f.write(f"""Host bastion
  HostName {a0}
  Port {bastion_port or p0}
Host t1
  HostName {a1}
  Port {p1}
  {jump_t1}
Host t2
  HostName {a2}
  Port {p2}
  {jump_t2}
Host *
  User {me}
  IdentityFile {c.user_key}
  UserKnownHostsFile {c.known_hosts}
  StrictHostKeyChecking yes
  BatchMode yes
""")
    return cfg


def tunnels(c, i):
    """(host, port) of each direct-tcpip channel node i's sshd opened."""
    return re.findall(r"server_request_direct_tcpip: originator \S+ port \d+, target (\S+) "
                      r"port (\d+)", c.sshd_log(i))


def run_proxied(c, cfg, *extra):
    args, env = alias_args(c, "t1,t2", cfg, *extra)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)


def case_proxy_jump(c):
    """t1 through the bastion, t2 through the bastion and then t1's sshd
    (ProxyJump a,b): the run works, each host key is checked (the
    bastion's too: without its line the run stops, naming it), and the
    channels were opened by the bastion and by t1's sshd."""
    (a1, p1, _), (a2, p2, _) = c.hosts[1], c.hosts[2]
    cfg = proxy_config(c, "ProxyJump bastion", f"ProxyJump bastion,[{a1}]:{p1}")
    r = run_proxied(c, cfg, "--cluster-log")
    check(r.returncode == 0, f"exit {r.returncode}", r.stderr)
    check(r.stdout == "head says 42\n", "workflow output", r.stdout)
    check("sflow: warning" not in r.stderr, "a warning", r.stderr)
    check(re.search(r"node 1 ready: t1 ", r.stderr) and re.search(r"node 2 ready: t2 ", r.stderr),
          "both nodes ready", r.stderr)
    via_bastion = tunnels(c, 0)
    check(via_bastion.count((a1, str(p1))) == 2, "the bastion did not open t1's channels "
          "(one for t1, one for t2's second hop)", via_bastion, c.sshd_log(0))
    check(tunnels(c, 1) == [(a2, str(p2))], "t1's sshd did not open t2's channel", tunnels(c, 1))
    check(tunnels(c, 2) == [], "t2's sshd opened a channel", tunnels(c, 2))
    c.expect_no_workers()
    # Host keys are checked on every hop: the bastion's missing is refused.
    c.write_known_hosts([c.known_line(1), c.known_line(2)])
    r = run_proxied(c, cfg)
    check(r.returncode == 69, f"exit {r.returncode} without the bastion's key", r.stderr)
    check(re.search(r"t1 \(\S+ port \d+ via bastion\): jump host bastion \(\S+ port \d+\): "
                    r"unknown host key", r.stderr), "message names the bastion", r.stderr)
    c.expect_no_workers()


def case_proxy_command(c):
    """ProxyCommand with %n %h %p %r, run through /bin/sh: a script that
    records its arguments in a counter file and execs OpenSSH's own
    `ssh -W [%h]:%p bastion`; a command that fails says how it ended."""
    if not shutil.which("ssh"):
        raise Skip("needs OpenSSH's ssh (openssh-client; scripts/install-deps.sh installs it)")
    me = pwd.getpwuid(os.getuid()).pw_name
    counter = os.path.join(c.dir, "proxy_runs")
    cfg = os.path.join(c.dir, "proxy_config")
    # sh runs `exec COMMAND`, as in ssh: a sequence needs a script.
    script = os.path.join(c.dir, "proxy.sh")
    with open(script, "w") as f:
        f.write(f"""#!/bin/sh
echo "$*" >> {counter}
exec ssh -F {cfg} -W "[$2]:$3" bastion
""")
    os.chmod(script, 0o755)
    line = f"ProxyCommand {script} %n %h %p %r"
    cfg = proxy_config(c, line, line)
    r = run_proxied(c, cfg)
    check(r.returncode == 0, f"exit {r.returncode}", r.stderr)
    check(r.stdout == "head says 42\n", "workflow output", r.stdout)
    # The command ended at the end of its input, before any SIGHUP.
    check("Killed by signal" not in r.stderr, "ssh -W was killed", r.stderr)
    with open(counter) as f:
        runs = sorted(f.read().splitlines())
    (a1, p1, _), (a2, p2, _) = c.hosts[1], c.hosts[2]
    check(runs == [f"t1 {a1} {p1} {me}", f"t2 {a2} {p2} {me}"], "ProxyCommand runs", runs)
    check(sorted(tunnels(c, 0)) == sorted([(a1, str(p1)), (a2, str(p2))]),
          "the bastion did not open the channels", tunnels(c, 0))
    c.expect_no_workers()
    cfg = proxy_config(c, "ProxyCommand false", "ProxyJump bastion")
    r = run_proxied(c, cfg)
    check(r.returncode == 69 and "ProxyCommand 'false' exited with status 1" in r.stderr,
          "a failing ProxyCommand", r.stderr)
    c.expect_no_workers()


def case_proxy_unreachable(c):
    """A bastion nobody listens at, one that refuses the login, and one
    that cannot reach the host: each error names the hop that failed."""
    dead = free_port("127.0.0.2")
    cfg = proxy_config(c, "ProxyJump bastion", "ProxyJump bastion", bastion_port=dead)
    r = run_proxied(c, cfg)
    check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
    check(re.search(rf"t1 \(\S+ port \d+ via bastion\): jump host bastion \(127.0.0.2 port "
                    rf"{dead}\): cannot connect: Connection refused", r.stderr),
          "message names the unreachable bastion", r.stderr)
    # A login the bastion refuses.
    cfg = proxy_config(c, "ProxyJump bastion", "ProxyJump bastion")
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace("Host bastion\n", "Host bastion\n  User nobody-sflow-test\n"))
    r = run_proxied(c, cfg)
    check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
    check(re.search(r"t1 \(\S+ port \d+ via bastion\): jump host bastion \(\S+ port \d+\): "
                    r"authentication as nobody-sflow-test failed", r.stderr),
          "message names the bastion's refused login", r.stderr)
    (a1, p1, _) = c.hosts[1]
    gone = free_port("127.0.0.9")
    cfg = proxy_config(c, "ProxyJump bastion", "ProxyJump bastion")
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace(f"HostName {a1}\n  Port {p1}", f"HostName 127.0.0.9\n  Port {gone}"))
    r = run_proxied(c, cfg)
    check(r.returncode == 69, f"exit {r.returncode}", r.stderr)
    check(re.search(rf"jump host bastion \(\S+ port \d+\) could not open a connection to "
                    rf"127.0.0.9 port {gone}", r.stderr), "message names the refused channel",
          r.stderr)
    c.expect_no_workers()
