"""cases_actors.py — traces, random streams and std.tune across nodes;
actors and groups on workers (killed, restarts exhausted, collectives,
the ring listener's authentication, resumed); std.train fine-tuning and
training across nodes with a worker killed."""
from harness import *  # noqa: F401,F403 (the cluster, checks, helpers)
from cases_tasks import GROUP_PROGRAM, RESTART_PROGRAM


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
    dispatch span for it, within 2 ms plus half the round trip of the
    heartbeat the head's offset came from (the offset's error bound: a
    loaded machine's round trips have put slices 1.9 ms out).  The file is
    strict JSON."""
    exe = c.compile("traced", TRACE_PROGRAM)
    tr = os.path.join(c.dir, "trace.json")
    with with_env(SFLOW_TEST_CLOCK_SKEW_MS=5000):
        r = c.run("--trace", tr, "--cluster-log", prog=exe, timeout=120)
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
    # sent them: its k-th slice belongs to the k-th span sent to it.  The
    # offset is from the heartbeat with the smallest round trip, at most
    # the one --cluster-log notes after the first 8: off by at most half.
    rtt = {int(k): float(ms) * 1000.0 for k, ms in re.findall(
        r"node (\d+) clock offset [-+][\d.]+ ms \(round trip ([\d.]+) ms\)", r.stderr)}
    check(set(rtt) == {1, 2}, "--cluster-log notes both workers' clock offsets", r.stderr)
    worst = -1e9
    for k in (1, 2):
        tol = 2000.0 + rtt.get(k, 0.0) / 2  # us
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
                  f"span {s[3]:.0f}..{s[4]:.0f} us, allowed {tol:.0f} us)")
    print(f"trace_nodes: {len(remote)} worker slices inside their dispatch spans "
          f"(closest edge {-worst:.0f} us inside; heartbeat round trips "
          f"{', '.join('%.0f us' % rtt[k] for k in sorted(rtt))})")
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


SHARD_PROGRAM = """import std.nn
import std.train
fn draw(sizes: i64[], r: i64) -> tensor[] {
  var out: tensor[] = []
  for k in 0..len(sizes) {
    out.push(randn([sizes[k]], seed = 100 * k + r) * f32(pow(10.0, f64((k + r) % 4))))
  }
  return out
}
fn flat(ts: tensor[]) -> f32[] {
  var out: f32[] = []
  for t in ts { out = out + t.data() }
  return out
}
struct Mlp { fc1: nn.Linear, fc2: nn.Linear }
// fc1 a unit of "units" (shard parameters with train.start_units), fc2 in the root
fn forward(m: Mlp, x: tensor) -> tensor {
  nn.unit_begin(params(m.fc1))
  let h = nn.unit_end(params(m.fc1), relu(nn.forward(m.fc1, x)))
  return nn.forward(m.fc2, h)
}
fn model() -> Mlp { return Mlp { fc1: nn.linear(4, 16, seed = 1), fc2: nn.linear(16, 3, seed = 2) } }
actor M {
  var m: Mlp
  var t: train.State
  init(shard: str) {
    m = model()
    var s = shard
    var units: tensor[][] = []
    if shard == "units" {
      s = "parameters"
      units = [params(m.fc1)]
    }
    t = train.start_units(train.config(40, 10, 2, 0.05, clip = 100.0, shard = s), params(m), units)
  }
  fn check(sizes: i64[]) -> bool {
    let r = train.rank()
    let n = train.workers()
    let a = draw(sizes, r)
    let b = [tensor(x.data(), shape(x)) for x in a]
    allreduce_sum(a)
    train.reduce_scatter_tensors(b)
    let fa = flat(a)
    let fb = flat(b)
    var ok = true
    for i in len(fa) * r / n..len(fa) * (r + 1) / n { ok = ok && fa[i] == fb[i] }
    train.all_gather_tensors(b)
    let fg = flat(b)
    for i in 0..len(fa) { ok = ok && fa[i] == fg[i] }
    return ok
  }
  fn epoch(e: i64) -> f64[] {
    var out: f64[] = []
    for idx in train.batches(t, e) {
      let x = randn([len(idx), 4], seed = 7 + idx[0])
      train.step(t, nn.cross_entropy(forward(m, x), [i % 3 for i in idx]), len(idx))
    }
    for s in train.report(t).steps { out.push(s.loss) }
    return out
  }
  fn weights() -> f32[] {
    train.gather(t)
    var out: f32[] = []
    for p in params(m) { out = out + p.data() }
    train.release(t)
    return out
  }
  fn where() -> i64 { return node_id() }
}
workflow main(size: i64 = 3) {
  var ws: f32[][] = []
  for shard in ["none", "optimizer", "gradients", "parameters", "units"] {
    let g = spawn M(shard) * size
    if shard == "none" {
      let a = await g.all.check([7, 1, 13, 5])
      let b = await g.all.check([9])
      var ok = true
      for k in 0..size { ok = ok && a[k] && b[k] }
      print("shards and gathers equal the allreduce", ok)
    }
    for e in 0..2 { let l = await g.all.epoch(e) }
    let w = await g.all.weights()
    var same = true
    for k in 1..size { for i in 0..len(w[0]) { same = same && w[k][i] == w[0][i] } }
    ws.push(w[0])
    var ref = true
    var off = 0.0
    for i in 0..len(w[0]) {
      ref = ref && w[0][i] == ws[0][i]
      off = max(off, f64(abs(w[0][i] - ws[0][i])))
    }
    if shard == "units" {
      // a unit's gradients reduced in its own buckets: another order of the sums
      print(shard, "replicas equal", same, "weights within 1e-6 of none's", off < 1e-6)
    } else {
      print(shard, "replicas equal", same, "weights bitwise none's", ref)
    }
    if shard == "gradients" {
      let nodes = await g.all.where()
      var distinct = true
      for k in 0..len(nodes) {
        for j in 0..k { if nodes[j] == nodes[k] { distinct = false } }
        if nodes[k] == 0 { distinct = false }
      }
      print("members on distinct workers", distinct)
    }
  }
}
"""


def case_shard_nodes(c):
    """std.train's sharded collectives and sharded step over the TCP ring:
    a group of 3, one member per worker: reduce_scatter_tensors leaves the
    allreduce_sum's bits in each member's shard and all_gather_tensors then
    gives every member the whole sum (uneven sizes); shard = optimizer,
    gradients and parameters train to bitwise the weights of shard = none,
    as on one node, and parameters with a unit (FSDP's schedule: the unit's
    gathers and reduce-scatters inside the forward and backward) within
    1e-6 of them."""
    exe = c.compile("shard", SHARD_PROGRAM)
    want = ["shards and gathers equal the allreduce true",
            "none replicas equal true weights bitwise none's true",
            "optimizer replicas equal true weights bitwise none's true",
            "gradients replicas equal true weights bitwise none's true",
            "members on distinct workers %s",
            "parameters replicas equal true weights bitwise none's true",
            "units replicas equal true weights within 1e-6 of none's true"]
    got = single_node(exe).splitlines()
    check(got == [w.replace("%s", "false") for w in want], "single-node run", got)
    r = c.run("--head-runs-work=false", prog=exe, timeout=120)
    check(r.returncode == 0, f"exit {r.returncode}", r.stdout, r.stderr)
    check(unprefixed(r.stdout.splitlines()) == [w.replace("%s", "true") for w in want],
          "over the ring: the same", r.stdout, r.stderr)
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



def resume_group(c, exe, ckdir):
    """--resume of a killed GROUP_PROGRAM run: exit 0, a clean run's sums,
    gather and len lines, the three members restored; returns the run."""
    r = c.run("--head-runs-work=false", "--slow", "0.05", "--checkpoint-dir", ckdir, "--resume",
              prog=exe)
    check(r.returncode == 0, f"resume exit {r.returncode}", r.stdout, r.stderr)
    want = single_node(exe).splitlines()
    check(r.stdout.splitlines()[-4:-1] == want[-4:-1], "resumed results", r.stdout, want)
    check(re.search(r"3 actors restored from checkpoints", r.stderr), "restored", r.stderr)
    return r


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
    r = resume_group(c, exe, ckdir)
    check(r.stdout.splitlines()[-1] == "members on distinct workers true",
          "the resumed group runs on workers again", r.stdout)
    check(re.search(r"\d+ answered from the journal", r.stderr), "answered from the journal",
          r.stderr)
    c.expect_no_workers(within=6)



def case_group_resume_slow_disk(c):
    """As group_resume, with the head's checkpoint writes held up 300 ms
    each (SFLOW_FAULT=head-checkpoint-slow:300: a slow disk) and a
    checkpoint after every call, so the members' newer checkpoints
    arrive while older ones still wait to be written.  The folder must
    still hold, for every member, the newest epoch the member furthest
    behind shipped (a member's waiting epoch was once replaced by its
    next, leaving the group no common epoch), and --resume finishes with
    a clean run's results."""
    # Member 0 prints the marker after call 4's allreduce and then stays in
    # the call for 2 s: the others ship epoch 4 (when the head still takes
    # it before it exits), member 0 (its node killed at the marker) never
    # does, so the group's common epoch is 3.
    marked = 'if i == 3 && group_rank() == 0 { print("running", i) }'
    check(marked in GROUP_PROGRAM, "GROUP_PROGRAM prints its marker as this case expects")
    exe = c.compile("grp1", GROUP_PROGRAM.replace("@restarts(2)", "@restarts(0)").replace(
        marked, 'if i == 3 && group_rank() == 0 {\n      print("running", i)\n'
        '      let t1 = now()\n      while now() - t1 < 2.0 { }\n    }'))
    ckdir = os.path.join(c.dir, "ck")
    os.environ["SFLOW_FAULT"] = "head-checkpoint-slow:300"
    try:
        code, out, err, node = kill_when_running(c, exe, r"running 3", "--slow", "0.05",
                                                 "--checkpoint-dir", ckdir)
    finally:
        del os.environ["SFLOW_FAULT"]
    check(code == 70, f"head exit {code}", out, err)
    files = sorted(os.listdir(os.path.join(ckdir, "ckpt")))
    mine = [[int(f.rsplit(".", 1)[1]) for f in files if f.startswith(f"Member-0-{r}.")]
            for r in range(3)]
    check(all(mine), "every member has a checkpoint", files)
    behind = min(max(e) for e in mine)
    check(all(behind in e for e in mine),
          f"every member's file at epoch {behind}, the newest of the member furthest behind",
          files)
    resume_group(c, exe, ckdir)
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


def case_lm_finetune_nodes(c):
    """examples/lm_finetune.sflow (LoRA) with 2 members, one per worker,
    over the TCP ring, --shard none and parameters: on rows of which one
    is padded the step losses are the single-node 1-worker run's within
    1e-6 relative (std.train weighting the members by their targets,
    train.step's items; by rows they differ by 1e-2)."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "lm_finetune_test", os.path.join(root, "tests", "examples", "lm_finetune_test.py"))
    lmt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lmt)
    if not os.path.isfile(lmt.GGUF):
        raise Skip(f"no model at {lmt.GGUF}: run scripts/install-models.sh (make deps does)")
    text = os.path.join(c.dir, "small.txt")
    with open(text, "w") as f:
        f.write(lmt.SMALL_TEXT)
    with open(os.path.join(root, "examples", "lm_finetune.sflow")) as f:
        exe = c.compile("lm_finetune", f.read())
    flags, _ = lmt.WORKERS["workers_lora"]
    args = ["--model", lmt.GGUF, "--data", text, "--seq-len", "16", "--batch", "4", *flags,
            "--timing=false"]
    one = os.path.join(c.dir, "one.csv")
    single_node(exe, *args, "--metrics", one, "--journal=false")
    base = lmt.metrics_losses(one)
    for shard in ("none", "parameters"):
        m = os.path.join(c.dir, f"nodes-{shard}.csv")
        r = c.run("--head-runs-work=false", *args, "--workers", "2", "--shard", shard, "--metrics", m,
                  prog=exe, timeout=200)
        check(r.returncode == 0, f"--shard {shard}: exit {r.returncode}", r.stdout, r.stderr)
        got = lmt.metrics_losses(m)
        d = max(abs(a - b) / abs(b) for a, b in zip(got, base)) if len(got) == len(base) else 1.0
        print(f"  --shard {shard} over the ring: {got} (1 worker {base}; largest relative "
              f"difference {d:.2g})")
        check(len(got) == len(base) and d < 1e-6,
              f"--shard {shard}: over the ring the 1-worker step losses within 1e-6 ({d:.2g})",
              got, base, r.stderr)
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
