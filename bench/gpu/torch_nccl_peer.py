#!/usr/bin/env python3
"""torch.distributed NCCL peer of nccl_check --bench: allreduce of f32
tensors from 1 KB to 256 MB between two processes, bus bandwidth as nccl-tests
defines it (2(n-1)/n of the bytes per second).  With fewer than two GPUs both
ranks use GPU 0 as two NCCL "hosts" (NCCL_HOSTID), over sockets, exactly as
nccl_check does, so the rows compare like with like.  Prints TABLE| rows;
exits 77 without torch, torch.distributed's NCCL or a GPU."""
import os, socket, sys, time
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    print("torch_nccl_peer: SKIP: no PyTorch"); sys.exit(77)
if not torch.cuda.is_available() or not dist.is_nccl_available():
    print("torch_nccl_peer: SKIP: no GPU or no NCCL in torch"); sys.exit(77)

SIZES = [1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 24, 1 << 28]

def worker(rank, port, gpus, out):
    if gpus < 2:
        os.environ["NCCL_HOSTID"] = f"sflow-torch-peer-{rank}"
    torch.cuda.set_device(rank if gpus >= 2 else 0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for b in SIZES:
        x = torch.ones(b // 4, device="cuda")
        reps = 5 if b >= 1 << 28 else 20 if b >= 1 << 24 else 100
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / reps
        if rank == 0:
            size = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
            via = "" if gpus >= 2 else " on 1 GPU via sockets"
            out.put(f"TABLE|torch.distributed allreduce f32 {size}, 2 ranks{via}|"
                    f"{b / dt / 1e9:.2f} GB/s bus ({dt * 1e6:.1f} us)|peer|-")
    dist.destroy_process_group()

if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(worker, args=(port, torch.cuda.device_count(), q), nprocs=2,
                       start_method="spawn")
    while not q.empty():
        print(q.get())
