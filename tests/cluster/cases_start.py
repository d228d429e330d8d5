"""cases_start.py — start-up and shutdown: deployment, host keys and
known_hosts, SSH keys, agents and ssh_config, hostfiles, the control
plane's authentication, the self-test collectives, node loss, and the
host checks (CPU features, libraries, glibc and architecture)."""
from harness import *  # noqa: F401,F403 (the cluster, checks, helpers)


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
