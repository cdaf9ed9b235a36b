"""Rank-side training runs of the parallelism APIs on the neuron device: each trains a small model 3 steps and
reports its final parameters next to one process's training on the full batch (eager PyTorch on CPU), or
reports a failure naming the step."""

from __future__ import annotations

from pathlib import Path

import traceback

import torch
import torch.distributed as dist

STEPS = 3
LR = 0.1
BATCH_PER_RANK = 2
IN, HIDDEN, OUT = 8, 16, 4


def device() -> torch.device:
    # torch's autograd engine runs the backward of a Python-registered device on index 0 only, so every rank
    # trains on its own process's neuron:0 (see docs/distributed.md)
    return torch.device("neuron", 0)


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT))


def data(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(world * BATCH_PER_RANK, IN, generator=generator)
    y = torch.randn(world * BATCH_PER_RANK, OUT, generator=generator)
    return x, y


def shard(t: torch.Tensor, rank: int) -> torch.Tensor:
    return t[rank * BATCH_PER_RANK:(rank + 1) * BATCH_PER_RANK]


def reference(world: int) -> dict[str, list]:
    """One process, the full batch, eager on CPU: the parameters after STEPS steps."""
    model = make_model()
    x, y = data(world)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return {name: p.detach().tolist() for name, p in model.named_parameters()}


def _full(p: torch.Tensor) -> torch.Tensor:
    full = p.full_tensor() if hasattr(p, "full_tensor") else p
    return full.detach().cpu()


def _report(model: torch.nn.Module, world: int, losses: list[float]) -> dict[str, object]:
    return {"params": {name.replace("_orig_mod.", "").replace("module.", ""): _full(p).tolist()
                       for name, p in model.named_parameters()},
            "reference": reference(world), "losses": losses}


def _train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach().cpu()))
    return losses


def ddp(rank: int, world: int, mode: str = "eager") -> dict[str, object]:
    """DistributedDataParallel over each rank's shard; ``mode`` "compiled": DDP(torch.compile(m))."""
    from torch.nn.parallel import DistributedDataParallel

    model = make_model().to(device())
    inner = torch.compile(model, backend="neuron", dynamic=False) if mode == "compiled" else model
    bucket_cap_mb = 25
    if mode == "compiled":
        # buckets of 256 bytes, so that this small model spans several and TorchDynamo's DDPOptimizer splits
        # the graph at their boundaries (its first bucket and DDP's must not exceed the others)
        dist._DEFAULT_FIRST_BUCKET_BYTES = 256
        bucket_cap_mb = 256 / 2**20
    wrapped = DistributedDataParallel(inner, bucket_cap_mb=bucket_cap_mb)
    x, y = data(world)
    losses = _train(wrapped, shard(x, rank).to(device()), shard(y, rank).to(device()))
    report = _report(model, world, losses)
    if mode == "compiled":
        import neuroncc

        report["graphs_compiled"] = neuroncc.stats()["graphs_compiled"]
    return report


def fsdp(rank: int, world: int) -> dict[str, object]:
    """FSDP2: fully_shard over init_device_mesh("neuron", (world,)), each rank its shard of the batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("neuron", (world,))
    model = make_model().to(device())
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = {name: type(p).__name__ for name, p in model.named_parameters()}
    x, y = data(world)
    losses = _train(model, shard(x, rank).to(device()), shard(y, rank).to(device()))
    return {**_report(model, world, losses), "parameter_types": sharded,
            "local_rows": int(model[0].weight.to_local().shape[0])}


def tensor_parallel(rank: int, world: int) -> dict[str, object]:
    """parallelize_module: the first Linear column-wise, the second row-wise; every rank sees the full batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("neuron", (world,))
    model = parallelize_module(make_model().to(device()), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, y = data(world)
    losses = _train(model, x.to(device()), y.to(device()))
    return {**_report(model, world, losses), "local_rows": int(model[0].weight.to_local().shape[0])}


def dtensor(rank: int, world: int) -> dict[str, object]:
    """distribute_tensor, redistribute, a sharded matmul, against the same on whole CPU tensors."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("neuron", (world,))
    generator = torch.Generator().manual_seed(2)
    a = torch.randn(4 * world, 6, generator=generator)
    b = torch.randn(6, 2 * world, generator=generator)
    da = distribute_tensor(a.to(device()), mesh, [Shard(0)])
    db = distribute_tensor(b.to(device()), mesh, [Replicate()])
    checks = {}
    checks["local shard is this rank's rows"] = torch.equal(da.to_local().cpu(), a[rank * 4:(rank + 1) * 4])
    product = da @ db
    checks["sharded matmul"] = product.placements == (Shard(0),) and torch.allclose(
        product.full_tensor().cpu(), a @ b, atol=1e-5)
    column_sharded = distribute_tensor(b.to(device()), mesh, [Shard(1)])
    checks["Shard(1) -> Replicate"] = torch.allclose(column_sharded.redistribute(mesh, [Replicate()]).to_local()
                                                     .cpu(), b)
    checks["Shard(1) -> Shard(0)"] = torch.allclose(column_sharded.redistribute(mesh, [Shard(0)]).to_local().cpu(),
                                                    b[rank * 6 // world:(rank + 1) * 6 // world]
                                                    if 6 % world == 0 else b.tensor_split(world, 0)[rank])
    inner = distribute_tensor(a.to(device()), mesh, [Shard(1)]) @ distribute_tensor(b.to(device()), mesh, [Shard(0)])
    checks["contracted-dimension matmul (Partial -> Replicate)"] = torch.allclose(
        inner.redistribute(mesh, [Replicate()]).to_local().cpu(), a @ b, atol=1e-5)
    return {"checks": checks, "device": str(da.to_local().device)}


def pipeline(rank: int, world: int) -> dict[str, object]:
    """torch.distributed.pipelining: two stages (Linear+Tanh | Linear), GPipe with 2 microbatches."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    assert world == 2
    model = make_model()
    stage_module = (torch.nn.Sequential(model[0], model[1]) if rank == 0 else torch.nn.Sequential(model[2])).to(
        device())
    stage = PipelineStage(stage_module, rank, world, device())
    schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=torch.nn.functional.mse_loss)
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=LR)
    x, y = data(world)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x.to(device()))
        else:
            step_losses: list[torch.Tensor] = []
            schedule.step(target=y.to(device()), losses=step_losses)
            losses.append(float(torch.stack([loss.detach().cpu() for loss in step_losses]).mean()))
        optimizer.step()
    names = {"0": "0", "1": "2"} if rank == 1 else {"0": "0", "1": "1"}
    params = {}
    for name, p in stage_module.named_parameters():
        layer, _, kind = name.partition(".")
        params[f"{names[layer] if rank == 0 else '2'}.{kind}"] = p.detach().cpu().tolist()
    return {"params": params, "reference": reference(world), "losses": losses}


def checkpoint_save(rank: int, world: int, directory: str) -> dict[str, object]:
    """Train FSDP2 one step, save with torch.distributed.checkpoint (each rank writes its shards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("neuron", (world,))
    model = make_model().to(device())
    fully_shard(model, mesh=mesh)
    x, y = data(world)
    _train(model, shard(x, rank).to(device()), shard(y, rank).to(device()))
    dcp.save(get_model_state_dict(model), checkpoint_id=directory)
    return {"params": {name: _full(p).tolist() for name, p in model.named_parameters()},
            "files": sorted(p.name for p in Path(directory).iterdir())}


def checkpoint_load(rank: int, world: int, directory: str) -> dict[str, object]:
    """Load the 2-rank checkpoint into one unsharded model on this process's neuron device."""
    import torch.distributed.checkpoint as dcp

    model = make_model().to(device())
    state = {name: torch.zeros_like(p) for name, p in model.state_dict().items()}
    dcp.load(state, checkpoint_id=directory)
    model.load_state_dict(state)
    return {"params": {name: p.detach().cpu().tolist() for name, p in model.named_parameters()},
            "device": str(next(model.parameters()).device)}


def all_apis(rank: int, world: int, directory: str) -> dict[str, object]:
    """Every API above in one group of processes (process start-up and the device's kernel compiles are most
    of a run's cost): each one's report, or its error. DDP(torch.compile) goes last: it changes DDP's first
    bucket size for the rest of the process."""
    runs = {"ddp": lambda: ddp(rank, world), "fsdp": lambda: fsdp(rank, world),
            "tensor_parallel": lambda: tensor_parallel(rank, world), "dtensor": lambda: dtensor(rank, world),
            "pipeline": lambda: pipeline(rank, world),
            "checkpoint_save": lambda: checkpoint_save(rank, world, directory),
            "ddp_compiled": lambda: ddp(rank, world, "compiled")}
    results: dict[str, object] = {}
    for name, run in runs.items():
        try:
            results[name] = run()
        except Exception:  # reported per API; the test names it
            results[name] = {"error": traceback.format_exc(limit=6)[-3000:]}
        dist.barrier()
    return results
