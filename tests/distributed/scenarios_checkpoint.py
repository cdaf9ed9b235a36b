"""Rank-side checkpoint-and-resume runs on the neuron device, each against the same run on CPU tensors over a gloo
group of the same processes: train a small model 2 steps, checkpoint (torch.distributed.checkpoint, or a full state
dict gathered to rank 0), restore into a fresh model and optimizer, train 2 more; the resumed run must equal the
uninterrupted one bitwise (as it does on CPU) and the device's parameters CPU's within float32 rounding. Each check
reports "ok" or its failure, so one launch covers them all. ``save_for_one`` / ``load_in_one`` resume a 2-rank
FSDP2 checkpoint (model and optimizer) in a single process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, get_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict, set_state_dict)
from torch.distributed.device_mesh import DeviceMesh

from scenario_checks import run_checks

LR, BATCH_PER_RANK = 1e-2, 2
IN, HIDDEN, OUT = 7, 13, 3  # no multiple of the world size: FSDP2 pads the shards
NEURON, CPU = torch.device("neuron", 0), torch.device("cpu")
#: A run's steps before the checkpoint and after it.
BEFORE, AFTER = 2, 2
TOLERANCE = 1e-5


def make_model(device: torch.device, hidden: int = HIDDEN) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, OUT)).to(device)


def batches(rank: int, device: torch.device, sharded: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """BEFORE + AFTER batches: this rank's rows of each (data parallel), or all of them (tensor parallel)."""
    generator = torch.Generator().manual_seed(1)
    mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK) if sharded else slice(None)
    out = []
    for _ in range(BEFORE + AFTER):
        x, y = torch.randn(2 * BATCH_PER_RANK, IN, generator=generator), torch.randn(2 * BATCH_PER_RANK, OUT,
                                                                                   generator=generator)
        out.append((x[mine].to(device), y[mine].to(device)))
    return out


class Run:
    """A model, its optimizer and LR scheduler; ``train`` records each step's loss."""

    def __init__(self, model: torch.nn.Module, optimizer: str):
        self.model = model
        self.optimizer = (torch.optim.AdamW(model.parameters(), lr=LR) if optimizer == "adamw" else
                          torch.optim.SGD(model.parameters(), lr=10 * LR, momentum=0.9))
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, 1, gamma=0.7)
        self.losses: list[float] = []

    def train(self, data: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for x, y in data:
            self.optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(self.model(x).float(), y)
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
            self.losses.append(loss.item())

    def parameters(self) -> dict[str, torch.Tensor]:
        return {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu()
                for name, p in self.model.named_parameters()}


def fsdp2(mp_policy=None) -> Callable[[torch.device, dist.ProcessGroup], torch.nn.Module]:
    from torch.distributed.fsdp import fully_shard

    def build(device, group):
        mesh = DeviceMesh.from_group(group, device.type)
        model = make_model(device)
        for module in (model[0], model[2], model):
            fully_shard(module, mesh=mesh, **({"mp_policy": mp_policy} if mp_policy else {}))
        return model
    return build


def tensor_parallel(device: torch.device, group: dist.ProcessGroup) -> torch.nn.Module:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = DeviceMesh.from_group(group, device.type)
    # a hidden size the world size divides (DTensor shards 13 rows unevenly, and the row-wise Linear's shard of
    # its input columns would not match)
    return parallelize_module(make_model(device, HIDDEN + 1), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


# ---- the ways of checkpointing: save(run, directory, group), restore(run, directory, group) --------------------


def dcp_save(run: Run, directory: str, group: dist.ProcessGroup) -> None:
    model, optimizer = get_state_dict(run.model, run.optimizer)
    dcp.save({"model": model, "optim": optimizer, "scheduler": run.scheduler.state_dict()}, checkpoint_id=directory,
             process_group=group)


def dcp_restore(run: Run, directory: str, group: dist.ProcessGroup) -> None:
    model, optimizer = get_state_dict(run.model, run.optimizer)
    state = {"model": model, "optim": optimizer, "scheduler": run.scheduler.state_dict()}
    dcp.load(state, checkpoint_id=directory, process_group=group)
    set_state_dict(run.model, run.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    run.scheduler.load_state_dict(state["scheduler"])


def dcp_async_save(run: Run, directory: str, group: dist.ProcessGroup) -> None:
    """dcp.async_save on the default group (the neuron group on the device): torch asks it for a CPU backend."""
    model, optimizer = get_state_dict(run.model, run.optimizer)
    state = {"model": model, "optim": optimizer, "scheduler": run.scheduler.state_dict()}
    dcp.async_save(state, checkpoint_id=directory, process_group=None if group is dist.group.WORLD else group
                   ).result()


FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
FROM_RANK0 = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)


def full_save(run: Run, directory: str, group: dist.ProcessGroup) -> None:
    """The users' single-file checkpoint: full state dicts on rank 0's CPU, torch.save by rank 0."""
    model = get_model_state_dict(run.model, options=FULL)
    optimizer = get_optimizer_state_dict(run.model, run.optimizer, options=FULL)
    if dist.get_rank() == 0:
        assert model and all(type(t) is torch.Tensor and t.device == CPU for t in model.values()), model
        Path(directory).mkdir(parents=True, exist_ok=True)
        torch.save({"model": model, "optim": optimizer, "scheduler": run.scheduler.state_dict()},
                   f"{directory}/full.pt")
    else:
        assert model == {} and optimizer == {}, (model, optimizer)  # cpu_offload keeps them on rank 0 only
    dist.barrier(group)


def full_restore(run: Run, directory: str, group: dist.ProcessGroup) -> None:
    """Rank 0 reads the file; set_*_state_dict(broadcast_from_rank0=True) hands every rank its shards."""
    state = (torch.load(f"{directory}/full.pt", weights_only=True) if dist.get_rank() == 0 else
             {"model": {}, "optim": {}, "scheduler": None})
    set_model_state_dict(run.model, state["model"], options=FROM_RANK0)
    set_optimizer_state_dict(run.model, run.optimizer, state["optim"], options=FROM_RANK0)
    scheduler = [state["scheduler"]]
    dist.broadcast_object_list(scheduler, src=0, group=group)
    run.scheduler.load_state_dict(scheduler[0])


def resumed_equals_uninterrupted(build, optimizer, save, restore, directory, rank, device, group,
                                 sharded=True) -> dict[str, torch.Tensor]:
    data = batches(rank, device, sharded)
    whole = Run(build(device, group), optimizer)
    whole.train(data)
    first = Run(build(device, group), optimizer)
    first.train(data[:BEFORE])
    save(first, directory, group)
    del first
    second = Run(build(device, group), optimizer)
    restore(second, directory, group)
    second.train(data[BEFORE:])
    assert second.losses == whole.losses[BEFORE:], (device, second.losses, whole.losses)
    expected, got = whole.parameters(), second.parameters()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=lambda m: f"{device} {name}: {m}")
    return got


def checks(rank: int, world: int, directory: str, gloo: dist.ProcessGroup) -> dict[str, Callable[[], None]]:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    runs = {
        "FSDP2 + AdamW + StepLR, dcp.save/dcp.load": (fsdp2(), "adamw", dcp_save, dcp_restore, True),
        "FSDP2 bf16 MixedPrecisionPolicy + SGD momentum, dcp": (fsdp2(bf16), "sgd", dcp_save, dcp_restore, True),
        "FSDP2, full state dict on rank 0 (cpu_offload), broadcast_from_rank0": (fsdp2(), "adamw", full_save,
                                                                                 full_restore, True),
        "FSDP2, dcp.async_save": (fsdp2(), "adamw", dcp_async_save, dcp_restore, True),
        "tensor parallel (DTensor parameters) + Adam, dcp": (tensor_parallel, "adamw", dcp_save, dcp_restore, False),
    }
    out = {}
    for index, (name, (build, optimizer, save, restore, sharded)) in enumerate(runs.items()):
        def check(index=index, build=build, optimizer=optimizer, save=save, restore=restore, sharded=sharded):
            expected = resumed_equals_uninterrupted(build, optimizer, save, restore, f"{directory}/{index}-cpu",
                                                    rank, CPU, gloo, sharded)
            dist.barrier()
            got = resumed_equals_uninterrupted(build, optimizer, save, restore, f"{directory}/{index}-neuron",
                                               rank, NEURON, dist.group.WORLD, sharded)
            for key in expected:
                torch.testing.assert_close(got[key], expected[key], rtol=TOLERANCE, atol=TOLERANCE)
        out[name] = check
    return out


def run(rank: int, world: int, directory: str) -> dict[str, str]:
    gloo = dist.new_group(backend="gloo")
    return run_checks(checks(rank, world, directory, gloo))


# ---- a 2-rank checkpoint resumed by one process -------------------------------------------------------------


def save_for_one(rank: int, world: int, directory: str) -> dict[str, object]:
    """FSDP2 + AdamW on 2 ranks: BEFORE steps, dcp.save (model, optimizer, scheduler), then AFTER more steps on
    each rank's half of the batch: the parameters one process on the whole batch should reach."""
    data = batches(rank, NEURON)
    run_ = Run(fsdp2()(NEURON, dist.group.WORLD), "adamw")
    run_.train(data[:BEFORE])
    dcp_save(run_, directory, dist.group.WORLD)
    run_.train(data[BEFORE:])
    return {"params": {name: p.tolist() for name, p in run_.parameters().items()},
            "lr": run_.optimizer.param_groups[0]["lr"]}


def load_in_one(rank: int, world: int, directory: str) -> dict[str, object]:
    """The 2-rank checkpoint into one process's unsharded model and optimizer, then AFTER steps on the whole
    batch."""
    assert world == 1
    full = [(torch.cat([x0, x1]), torch.cat([y0, y1]))
            for (x0, y0), (x1, y1) in zip(batches(0, NEURON), batches(1, NEURON))]
    run_ = Run(make_model(NEURON), "adamw")
    dcp_restore(run_, directory, dist.group.WORLD)
    state = run_.optimizer.state[run_.optimizer.param_groups[0]["params"][0]]
    run_.train(full[BEFORE:])
    return {"params": {name: p.tolist() for name, p in run_.parameters().items()},
            "moment_device": str(state["exp_avg"].device), "lr": run_.optimizer.param_groups[0]["lr"]}
