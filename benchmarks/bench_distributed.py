"""torch.distributed on the neuron device: 2 real processes on loopback (medians of interleaved repetitions).

    PYTHONPATH=. python benchmarks/bench_distributed.py [--only allreduce|ddp|coldstart] [--repeat 15]

- allreduce: all_reduce bandwidth of the ``neuron`` backend on neuron tensors vs gloo on CPU tensors, by size
  (algorithm bandwidth = bytes / time; goal: neuron >= 90% of gloo, since both move the same host bytes).
- ddp: one training step of a 2-rank DDP(torch.compile(model, backend="neuron")) on the neuron device vs a
  2-rank eager CPU DDP over gloo, same model and batch.
- coldstart: time to the first compiled step of a fresh process (an empty local cache) with a warm remote
  cache (a real redis-server on loopback, filled by another process) vs compiling everything.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret-0123456789abcdef0123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> list[dict]:
    """Run this script's rank worker on ``world`` processes; each rank's JSON result."""
    port = free_port()
    processes = []
    for rank in range(world):
        environment = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo",
                           OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **(env or {}))
        processes.append(subprocess.Popen([sys.executable, __file__, "--worker", *args], env=environment,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=timeout)
        if process.returncode != 0:
            for p in processes:
                p.kill()
            raise SystemExit(f"a rank failed:\n{stderr[-3000:]}")
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


# ---- rank side -------------------------------------------------------------------------------------------


def _init(backend: str) -> None:
    import torch.distributed as dist

    import neuroncc.device
    import neuroncc.distributed

    neuroncc.device.register()
    neuroncc.distributed.register()
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))


def worker_allreduce(repeat: int) -> dict:
    """Interleaved: for each size, alternately the neuron group on neuron tensors and a gloo group on CPU."""
    import torch
    import torch.distributed as dist

    _init("neuron")
    gloo = dist.new_group(backend="gloo")
    neuron = dist.group.WORLD
    results = {}
    for size in (1 << 16, 1 << 20, 1 << 22, 1 << 24):  # bytes
        elements = size // 4
        cpu = torch.ones(elements)
        dev = torch.ones(elements, device="neuron")
        times: dict[str, list[float]] = {"neuron": [], "gloo": []}
        for which, tensor, group in (("neuron", dev, neuron), ("gloo", cpu, gloo)):  # warm up
            dist.all_reduce(tensor, group=group)
        for _ in range(repeat):
            for which, tensor, group in (("neuron", dev, neuron), ("gloo", cpu, gloo)):
                dist.barrier(group=gloo)
                start = time.perf_counter()
                dist.all_reduce(tensor, group=group)
                times[which].append(time.perf_counter() - start)
        results[str(size)] = {k: statistics.median(v) for k, v in times.items()}
    dist.destroy_process_group()
    return results


def _model(width: int):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width),
                               torch.nn.LayerNorm(width), torch.nn.Linear(width, width))


def worker_ddp(repeat: int, mode: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    width, batch = 256, 32
    if mode == "neuron-compiled":
        _init("neuron")
        device = torch.device("neuron", 0)
        model = _model(width).to(device)
        wrapped = DistributedDataParallel(torch.compile(model, backend="neuron", dynamic=False))
    else:
        _init("gloo")
        device = torch.device("cpu")
        model = _model(width)
        wrapped = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    x = torch.randn(batch, width).to(device)
    y = torch.randn(batch, width).to(device)

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(wrapped(x), y).backward()
        optimizer.step()

    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    for _ in range(3):
        step()
    times = []
    for _ in range(repeat):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    return {"first_step": first, "step": statistics.median(times)}


def worker_coldstart(_: int) -> dict:
    """One process (world 1): the first DDP+compile step, the cache the environment names."""
    import torch

    import neuroncc

    _init("neuron")
    from torch.nn.parallel import DistributedDataParallel

    start = time.perf_counter()
    model = _model(128).to("neuron")
    wrapped = DistributedDataParallel(torch.compile(model, backend="neuron", dynamic=False))
    x = torch.randn(16, 128).to("neuron")
    wrapped(x).sum().backward()
    seconds = time.perf_counter() - start
    stats = neuroncc.stats()
    return {"seconds": seconds, "cache_hits": stats["cache_hits"], "cache_misses": stats["cache_misses"]}


# ---- the benchmark -----------------------------------------------------------------------------------------


def bench_allreduce(repeat: int) -> None:
    (result, _) = launch(2, "allreduce", str(repeat))
    print("all_reduce, 2 ranks: algorithm bandwidth (bytes / median time)")
    print(f"  {'size':>10}  {'gloo (CPU)':>12}  {'neuron':>12}  neuron/gloo")
    for size, times in result.items():
        gloo_bw, neuron_bw = int(size) / times["gloo"] / 1e6, int(size) / times["neuron"] / 1e6
        print(f"  {int(size) // 1024:>8} KiB  {gloo_bw:>8.0f} MB/s  {neuron_bw:>8.0f} MB/s  {neuron_bw / gloo_bw:6.0%}")


def bench_ddp(repeat: int) -> None:
    rows = {}
    for mode in ("cpu-eager", "neuron-compiled", "cpu-eager", "neuron-compiled"):  # interleaved twice
        results = launch(2, "ddp", str(repeat), mode)
        rows.setdefault(mode, []).append(max(r["step"] for r in results))
        rows.setdefault(mode + " first", []).append(max(r["first_step"] for r in results))
    cpu, neuron = statistics.median(rows["cpu-eager"]), statistics.median(rows["neuron-compiled"])
    print("DDP training step, 2 ranks, MLP 256-1024-256 + LayerNorm, batch 32 per rank")
    print(f"  CPU eager DDP (gloo)                 {cpu * 1000:8.2f} ms")
    print(f"  neuron DDP(torch.compile) (neuron)   {neuron * 1000:8.2f} ms   ({cpu / neuron:.2f}x)")
    print(f"  first step (compiles): CPU {statistics.median(rows['cpu-eager first']):.2f} s, neuron "
          f"{statistics.median(rows['neuron-compiled first']):.2f} s")


def bench_coldstart(repeat: int) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("coldstart needs redis-server (apt-get install -y redis-server)")
    scratch = Path(tempfile.mkdtemp(prefix="bench-dist-"))
    port = free_port()
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                               "no", "--dir", str(scratch)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        remote = {"NEURONCC_REMOTE_CACHE": f"redis://127.0.0.1:{port}/0", "NEURONCC_REMOTE_CACHE_KEY": SECRET}
        launch(1, "coldstart", "0", env={"NEURONCC_CACHE_DIR": str(scratch / "warmup"), **remote})  # fills redis
        warm, cold, hits = [], [], []
        for index in range(max(repeat // 5, 2)):
            (warm_run,) = launch(1, "coldstart", "0", env={"NEURONCC_CACHE_DIR": str(scratch / f"w{index}"),
                                                            **remote})
            warm.append(warm_run["seconds"])
            hits.append((warm_run["cache_hits"], warm_run["cache_misses"]))
            cold.append(launch(1, "coldstart", "0", env={"NEURONCC_CACHE_DIR": str(scratch / f"c{index}")}
                               )[0]["seconds"])
        print("first DDP+compile step of a new rank (empty local cache), incl. device op kernels")
        print(f"  compiling everything        {statistics.median(cold):6.2f} s")
        print(f"  warm remote cache (Redis)   {statistics.median(warm):6.2f} s   "
              f"({statistics.median(cold) / statistics.median(warm):.1f}x faster; cache hits/misses {hits[0]})")
    finally:
        server.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, repeat, *rest = sys.argv[2:]
        function = {"allreduce": worker_allreduce, "ddp": worker_ddp, "coldstart": worker_coldstart}[kind]
        print(json.dumps(function(int(repeat), *rest)))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["allreduce", "ddp", "coldstart"])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    for name, bench in (("allreduce", bench_allreduce), ("ddp", bench_ddp), ("coldstart", bench_coldstart)):
        if args.only in (None, name):
            bench(args.repeat)


if __name__ == "__main__":
    main()
