"""cases_env.py — what a worker's environment holds (torchrun's
variables), network namespaces (cuts, links down, an unreachable or
silent head), and a tune campaign resumed across nodes."""
from harness import *  # noqa: F401,F403 (the cluster, checks, helpers)
from cases_tasks import SUM_PROGRAM


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
    # The bound runs from node 2's worker start, which --cluster-log
    # times (ssh, check, deploy, exec): under a loaded parallel ctest the
    # start alone has taken seconds, which the worker's 10 s connect bound
    # does not include.
    started = re.search(r"node 2 .*worker started \(ssh ([\d.]+) s, check ([\d.]+) s, "
                        r"deploy ([\d.]+) s, exec ([\d.]+) s\)", r.stderr)
    start = sum(float(x) for x in started.groups()) if started else 0.0
    print(f"head unreachable at start ({'silent' if silent else 'refused'}): exit "
          f"{r.returncode} after {r.seconds:.2f} s, {r.seconds - start:.2f} s after node 2's "
          f"worker started ({start:.2f} s)")
    check(r.returncode == 69, f"exit {r.returncode} (want 69)", r.stdout, r.stderr)
    check(r.stdout == "", "the workflow ran", r.stdout)
    node2 = re.escape(entry(c.node_addr(1)[0], c.PORT))
    check(re.search(rf"1 of 2 nodes failed to start:\n  {node2}: ", r.stderr),
          "failure names node 2 only", r.stderr)
    check(re.search(rf"\[node 2\] sflow worker 2: cannot connect to the head at "
                    rf"{re.escape(head)}:\d+: {why}", r.stderr),
          "the worker's own error is shown", r.stderr)
    check(started is not None, "--cluster-log times node 2's worker start", r.stderr)
    # At least the bound in all (the worker's clock starts before the head
    # has timed its start), and less than high after that start.
    check(low <= r.seconds and r.seconds - start < high,
          f"took {r.seconds:.1f} s in all (want at least {low}), {r.seconds - start:.1f} s after "
          f"node 2's worker started (want under {high})")
    c.expect_no_workers()


def case_netns_head_unreachable_at_start(c):
    head_unreachable(c, silent=False)


def case_netns_head_silent_at_start(c):
    head_unreachable(c, silent=True)


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


def case_head_sigterm_resume(c):
    """A --nodes head stopped by SIGTERM mid-run (what scancel or a batch
    system's time limit sends): it syncs its journal and exits 75, its
    workers on the hosts end too (their stdin closes), and --resume then
    prints exactly the single-node run's lines."""
    runtime_tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "runtime")
    exe = os.path.join(c.dir, "campaign")
    r = subprocess.run([c.sflowc, os.path.join(runtime_tests, "campaign.sflow"), "-o", exe],
                       capture_output=True, text=True)
    check(r.returncode == 0, "sflowc failed", r.stderr)
    args = ("--n", "12", "--spin-n", "50000000")  # 7-8 s: the signal comes mid-run
    single = subprocess.run([exe, "--journal=false", *args], capture_output=True, text=True)
    check(single.returncode == 0, "single-node run", single.stderr)
    ck = os.path.join(c.dir, "ck-sigterm")
    out_path, err_path = os.path.join(c.dir, "sigterm.out"), os.path.join(c.dir, "sigterm.err")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        head = subprocess.Popen(c.args("--checkpoint-dir", ck, *args, prog=exe), stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        check(head.poll() is None, "the run was still going after 1.5 s", open(err_path).read())
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=30)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    err = open(err_path).read()
    check(head.returncode == 75, f"SIGTERM: exit {head.returncode}, want 75", err)
    check("journal synced" in err, "SIGTERM says the journal was synced", err)
    c.expect_no_workers()
    r = c.run("--checkpoint-dir", ck, *args, "--resume", prog=exe, timeout=120)
    check(r.returncode == 0, f"--resume: exit {r.returncode}", r.stderr)
    got = re.sub(r"(?m)^\[node \d+\] ", "", r.stdout)
    check(got == single.stdout, "--resume prints the single-node run's lines", got, single.stdout)
    c.expect_no_workers()
