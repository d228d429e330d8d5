#!/usr/bin/env python3
"""ray_peer.py — bench/tune's peer: the same sweeps with Ray Tune 2.60.0
(function trainable, FIFO, one result per trial), and a plain Python loop
over the same objective.  Prints RESULT lines as overhead.sflow does:

    RESULT <bench> <side> <trials> <seconds>

    python ray_peer.py --trials 1000 --ms 0 --concurrent 1

Ray's defaults, or with --reuse-actors (its setting for many short
trials).  The clock covers Tuner.fit() only (ray.init before it is not counted: that
is Ray's start-up, not the sweep's).  The objective spins for ms
milliseconds (a busy loop, as overhead.sflow's), then returns (x - 0.5)^2.
"""
import argparse
import os
import tempfile
import time


def spin(ms):
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--ms", type=float, default=0.0)
    ap.add_argument("--concurrent", type=int, default=1)
    ap.add_argument("--bench", default="tune")
    ap.add_argument("--reuse-actors", action="store_true",
                    help="TuneConfig(reuse_actors=True): one worker actor for every trial")
    a = ap.parse_args()

    import random
    rng = random.Random(0)
    xs = [rng.random() for _ in range(a.trials)]
    t0 = time.perf_counter()
    best = float("inf")
    for x in xs:
        spin(a.ms)
        best = min(best, (x - 0.5) ** 2)
    print("RESULT %s python_loop %d %.6f" % (a.bench, a.trials, time.perf_counter() - t0), flush=True)

    import ray
    from ray import tune

    def objective(config):
        spin(config["ms"])
        return {"score": (config["x"] - 0.5) ** 2}

    ray.init(num_cpus=max(2, a.concurrent), include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    with tempfile.TemporaryDirectory(prefix="ray-tune-bench-") as tmp:
        tuner = tune.Tuner(
            objective,
            param_space={"x": tune.uniform(0.0, 1.0), "ms": a.ms},
            tune_config=tune.TuneConfig(num_samples=a.trials, max_concurrent_trials=a.concurrent,
                                        metric="score", mode="min", reuse_actors=a.reuse_actors),
            run_config=tune.RunConfig(storage_path=tmp, verbose=0))
        t0 = time.perf_counter()
        res = tuner.fit()
        dt = time.perf_counter() - t0
        assert len(res) == a.trials, len(res)
    print("RESULT %s %s %d %.6f" % (a.bench, "ray_tune_reuse" if a.reuse_actors else "ray_tune", a.trials, dt),
          flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
