#!/usr/bin/env python3
"""Ray peers of bench/tasks, measured in the same run as the sflow programs.

Same protocol as the sflow programs and omp_peer.c: per benchmark a warm-up
round, then the best of --reps, printed as `RESULT name count best_seconds`.
Ray is started once (ray.init on this machine, all its CPUs) and its start-up
is not timed.  Sizes are smaller than sflow's because Ray runs a few thousand
tasks a second; run.sh compares rates (count / seconds), not times.

  tasks_pipelined   n remote calls of an empty function, then ray.get(list)
  tasks_one_by_one  n remote calls, each ray.get before the next
  actor_pipelined   n calls of an actor method, then ray.get(list)
  actor_one_by_one  n actor calls, each ray.get before the next
  chain             n tasks, each taking the previous task's ObjectRef
  allreduce_SIZE    (--allreduce) MEMBERS actors holding numpy f32 arrays; one
                    allreduce = gather the members' arrays through the object
                    store, sum them in a task, every member copies the sum
                    back (Ray's collective library needs pygloo or NCCL,
                    which are not installable here)
"""
import argparse
import os
import sys
import time


def best_of(fn, reps):
    fn()
    return min(fn() for _ in range(reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--tasks-one", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--calls-one", type=int, default=1000)
    ap.add_argument("--chain", type=int, default=1000)
    ap.add_argument("--allreduce", type=str, default="", help="comma-separated sizes")
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--iters", type=str, default="", help="comma-separated, one per size")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    import numpy as np

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", configure_logging=True)

    @ray.remote
    def noop(x):
        return x

    @ray.remote
    def step(prev):  # Ray resolves an ObjectRef argument before the call
        return prev + 1

    @ray.remote
    class Counter:
        def __init__(self):
            self.total = 0

        def add(self, x):
            self.total += x
            return self.total

        def reset(self):
            self.total = 0

    def timed(body):
        t0 = time.perf_counter()
        r = body()
        return time.perf_counter() - t0, r

    def tasks_pipelined():
        n = args.tasks
        dt, rs = timed(lambda: ray.get([noop.remote(i) for i in range(n)]))
        assert sum(rs) == n * (n - 1) // 2
        return dt

    def tasks_one_by_one():
        n = args.tasks_one
        dt, s = timed(lambda: sum(ray.get(noop.remote(i)) for i in range(n)))
        assert s == n * (n - 1) // 2
        return dt

    c = Counter.remote()

    def actor_pipelined():
        ray.get(c.reset.remote())
        n = args.calls
        dt, rs = timed(lambda: ray.get([c.add.remote(1) for _ in range(n)]))
        assert rs[0] == 1 and rs[-1] == n
        return dt

    def actor_one_by_one():
        ray.get(c.reset.remote())
        n = args.calls_one
        dt, last = timed(lambda: [ray.get(c.add.remote(1)) for _ in range(n)][-1])
        assert last == n
        return dt

    def chain():
        n = args.chain

        def body():
            f = noop.remote(0)
            for _ in range(n):
                f = step.remote(f)
            return ray.get(f)
        dt, v = timed(body)
        assert v == n
        return dt

    for name, fn, count in [("tasks_pipelined", tasks_pipelined, args.tasks),
                            ("tasks_one_by_one", tasks_one_by_one, args.tasks_one),
                            ("actor_pipelined", actor_pipelined, args.calls),
                            ("actor_one_by_one", actor_one_by_one, args.calls_one),
                            ("chain", chain, args.chain)]:
        if count > 0:
            print("RESULT %s %d %.9g" % (name, count, best_of(fn, args.reps)), flush=True)

    if args.allreduce:
        @ray.remote
        class Member:
            def __init__(self, n, rank, members):
                self.n, self.rank, self.members = n, rank, members
                self.buf = np.empty(n, np.float32)

            def refill(self):  # as in allreduce.sflow: every sum is 0
                m = self.members
                last = self.rank == m - 1 and m > 1
                self.buf.fill(-(m - 1) * m // 2 if last else self.rank + 1)

            def get(self):
                return self.buf

            def set(self, total):
                np.copyto(self.buf, total)
                return float(self.buf[-1])

        @ray.remote
        def add_all(*bufs):
            out = bufs[0].copy()
            for b in bufs[1:]:
                out += b
            return out

        sizes = [int(s) for s in args.allreduce.split(",")]
        iters = [int(s) for s in args.iters.split(",")] if args.iters else [10] * len(sizes)
        m = args.members
        for size, it in zip(sizes, iters):
            g = [Member.remote(size, r, m) for r in range(m)]

            def rnd():
                ray.get([a.refill.remote() for a in g])
                t0 = time.perf_counter()
                first = None
                for i in range(it):
                    total = add_all.remote(*[a.get.remote() for a in g])
                    r = ray.get([a.set.remote(total) for a in g])
                    if first is None:
                        first = r
                dt = time.perf_counter() - t0
                assert all(x == (0.0 if m > 1 else 1.0) for x in first), first
                return dt
            print("RESULT allreduce_%d %d %.9g" % (size, it, best_of(rnd, args.reps)), flush=True)
            for a in g:
                ray.kill(a)
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
