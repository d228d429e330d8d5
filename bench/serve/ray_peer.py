#!/usr/bin/env python3
"""ray_peer.py — Ray Serve serving what examples/serve.sflow serves, for
bench/serve/run.py: the same digits MLP (weights read from the safetensors
file the sflow program saved, so both answer the same logits), behind the
same JSON, on 127.0.0.1:PORT.

  POST /noop      {"n": 5}            -> {"n": 5}
  POST /predict   {"pixels": [64]}    -> {"label", "logits", "error"}, @serve.batch(10, 10 ms)
  POST /predict1  the same, one request per call (batching off)

Each deployment has --replicas replicas, each with one torch thread (as
each sflow replica computes on one thread).  Prints "ready" once every
route answers, then serves until SIGTERM or SIGINT.

  ray_peer.py --weights W.safetensors --port 8001 [--replicas 2]
"""
import argparse
import json
import signal
import struct
import sys
import time
import urllib.request

import numpy as np
import ray
import torch
from ray import serve
from starlette.requests import Request


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for k, t in head.items():
        if k != "__metadata__":
            a, b = t["data_offsets"]
            out[k] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy())
    return out


class Model:
    def __init__(self, weights):
        torch.set_num_threads(1)
        w = load(weights)
        self.w1, self.b1, self.w2, self.b2 = w["fc1.weight"], w["fc1.bias"], w["fc2.weight"], w["fc2.bias"]

    def forward(self, rows):
        with torch.no_grad():
            x = torch.tensor(rows, dtype=torch.float32) / 16.0
            logits = torch.relu(x @ self.w1.T + self.b1) @ self.w2.T + self.b2
            best = logits.argmax(1).tolist()
            return [{"label": best[i], "logits": logits[i].tolist(), "error": ""} for i in range(len(rows))]


@serve.deployment
class Noop:
    async def __call__(self, req: Request):
        body = await req.json()
        return {"n": body["n"]}


@serve.deployment
class Batched(Model):
    @serve.batch(max_batch_size=10, batch_wait_timeout_s=0.01)
    async def predict(self, rows):
        return self.forward(rows)

    async def __call__(self, req: Request):
        body = await req.json()
        return await self.predict(body["pixels"])


@serve.deployment
class Single(Model):
    async def __call__(self, req: Request):
        body = await req.json()
        return self.forward([body["pixels"]])[0]


def post(port, path, body):
    r = urllib.request.urlopen(urllib.request.Request(
        "http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}), timeout=10)
    return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    ray.init(num_cpus=2 * args.replicas + 2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    n = args.replicas
    serve.run(Noop.options(num_replicas=n).bind(), name="noop", route_prefix="/noop")
    serve.run(Batched.options(num_replicas=n).bind(args.weights), name="predict", route_prefix="/predict")
    serve.run(Single.options(num_replicas=n).bind(args.weights), name="predict1", route_prefix="/predict1")
    px = [0] * 64
    deadline = time.time() + 120
    while True:
        try:
            post(args.port, "/noop", {"n": 1})
            post(args.port, "/predict", {"pixels": px})
            post(args.port, "/predict1", {"pixels": px})
            break
        except Exception:
            if time.time() > deadline:
                sys.exit("ray_peer: the routes did not answer within 120 s")
            time.sleep(0.5)
    print("ready", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    while not stop:
        time.sleep(0.2)
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
