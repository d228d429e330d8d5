"""cases_tasks.py — task calls across nodes: the programs the task and
actor cases share, placement by slots and GPUs, print output, resumed
runs, future trees, retries and lost workers."""
from harness import *  # noqa: F401,F403 (the cluster, checks, helpers)


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


