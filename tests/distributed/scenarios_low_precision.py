"""Rank-side checks of bf16 and float16 on the neuron device across processes, each against the same thing on
CPU tensors over a gloo group of the same processes (PyTorch's own path): every collective on bf16/float16
tensors (dense, non-contiguous, sizes that are no multiple of the world size), DTensor ops on bf16 shards, and
3 training steps of FSDP2 with a MixedPrecisionPolicy (also under torch.compile), FSDP2 and DDP on a bf16
model (with clip_grad_norm_), DDP with the bf16/fp16 gradient-compression hooks, DDP(torch.compile(m)) of
a bf16 model, and DDP and FSDP2 under torch.autocast("neuron") against torch.autocast("cpu"). Each check reports "ok" or its failure, so one launch covers them all."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from scenario_checks import run_checks
from scenarios_collectives import value

LOW = (torch.bfloat16, torch.float16)
STEPS, LR, BATCH_PER_RANK = 3, 0.1, 2
IN, HIDDEN, OUT = 7, 13, 3  # no multiple of the world size: FSDP2 pads the shards, DTensor splits unevenly
NEURON, CPU = torch.device("neuron", 0), torch.device("cpu")


def identical(neuron: list[torch.Tensor], cpu: list[torch.Tensor]) -> None:
    """gloo moves and reduces the same bytes for both: the results are bitwise the same."""
    assert len(neuron) == len(cpu)
    for got, expected in zip(neuron, cpu):
        assert got.device.type == "neuron" and got.dtype == expected.dtype, (got.device, got.dtype, expected.dtype)
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def collective_checks(rank: int, world: int, gloo: dist.ProcessGroup) -> dict[str, Callable[[], None]]:
    """Each collective as fn(device, group, dtype, dense) -> result tensors; run on neuron over the neuron
    group and on CPU over gloo (which takes dense tensors only: its run of a non-contiguous case is dense)."""
    def data(n: int, dtype: torch.dtype, device: torch.device, dense: bool, scale: float = 1.0) -> torch.Tensor:
        rows = torch.stack([value(rank, n) * scale, value(rank, n) * 3 * scale]).to(dtype).to(device)  # (2, n)
        return rows.t().contiguous() if dense else rows.t()  # (n, 2): a transposed view is not contiguous

    def zeros(n: int, dtype: torch.dtype, device: torch.device, dense: bool) -> torch.Tensor:
        """An (n, 2) output: dense, or the transposed view of a (2, n) tensor."""
        return torch.zeros(n, 2, dtype=dtype, device=device) if dense else torch.zeros(
            2, n, dtype=dtype, device=device).t()

    def all_reduce(op):
        def run(device, group, dtype, dense):
            t = data(7, dtype, device, dense)
            dist.all_reduce(t, op=op, group=group)
            return [t]
        return run

    def reduce_scatter_tensor(op):
        def run(device, group, dtype, dense):
            whole = torch.cat([data(5, dtype, device, True, j + 1) for j in range(world)])
            output = zeros(5, dtype, device, dense)
            dist.reduce_scatter_tensor(output, whole, op=op, group=group)
            return [output]
        return run

    def premultiplied_sum(collective):
        """PREMUL_SUM (NCCL's; FSDP2's set_gradient_divide_factor): gloo refuses it, so its CPU reference is
        gloo's SUM of inputs multiplied by the factor first (one rounding to the dtype, as the backend does)."""
        factor = 1 / 3  # not a power of two: the product rounds
        def run(device, group, dtype, dense):
            if device.type == "neuron":
                return collective(device, group, dtype, dense, dist._make_nccl_premul_sum(factor), 1.0)
            return collective(device, group, dtype, dense, dist.ReduceOp.SUM, factor)
        return run

    def all_reduce_premultiplied(device, group, dtype, dense, op, factor):
        t = data(7, dtype, device, dense)
        if factor != 1.0:
            t.mul_(factor)
        dist.all_reduce(t, op=op, group=group)
        return [t]

    def reduce_scatter_premultiplied(device, group, dtype, dense, op, factor):
        whole = torch.cat([data(5, dtype, device, True, j + 1) for j in range(world)])
        before = whole.clone()
        output = zeros(5, dtype, device, dense)
        dist.reduce_scatter_tensor(output, whole * factor if factor != 1.0 else whole, op=op, group=group)
        assert torch.equal(whole.cpu(), before.cpu()), "the input changed"
        return [output]

    def all_gather_into_tensor(device, group, dtype, dense):
        output = zeros(world * 5, dtype, device, dense)
        dist.all_gather_into_tensor(output, data(5, dtype, device, dense), group=group)
        return [output]

    def all_gather(device, group, dtype, dense):
        outputs = [zeros(5, dtype, device, dense) for _ in range(world)]
        dist.all_gather(outputs, data(5, dtype, device, dense), group=group)
        return outputs

    def reduce_scatter(device, group, dtype, dense):
        output = zeros(5, dtype, device, dense)
        dist.reduce_scatter(output, [data(5, dtype, device, dense, j + 1) for j in range(world)], group=group)
        return [output]

    def broadcast(device, group, dtype, dense):
        t = data(7, dtype, device, dense)
        dist.broadcast(t, src=world - 1, group=group)
        return [t]

    def all_to_all_single(device, group, dtype, dense):
        # rank r sends j + 1 rows to rank j (uneven splits), so it receives rank + 1 rows from each
        rows = sum(j + 1 for j in range(world))
        source = (torch.arange(rows * 2.0).reshape(2, rows) + 100 * rank + 0.3).to(dtype).to(device).t()
        output = zeros((rank + 1) * world, dtype, device, dense)
        dist.all_to_all_single(output, source if not dense else source.contiguous(), [rank + 1] * world,
                               [j + 1 for j in range(world)], group=group)
        return [output]

    def send_recv(device, group, dtype, dense):
        right, left = (rank + 1) % world, (rank - 1) % world
        received = zeros(7, dtype, device, dense)
        works = [dist.isend(data(7, dtype, device, dense), right, group=group),
                 dist.irecv(received, left, group=group)]
        for work in works:
            work.wait()
        return [received]

    cases = {f"all_reduce {op}": all_reduce(getattr(dist.ReduceOp, op)) for op in ("SUM", "AVG", "MAX")}
    cases.update({f"reduce_scatter_tensor {op}": reduce_scatter_tensor(getattr(dist.ReduceOp, op))
                  for op in ("SUM", "AVG")})
    cases.update({"all_reduce PREMUL_SUM": premultiplied_sum(all_reduce_premultiplied),
                  "reduce_scatter_tensor PREMUL_SUM": premultiplied_sum(reduce_scatter_premultiplied)})
    cases.update({"all_gather_into_tensor": all_gather_into_tensor, "all_gather": all_gather,
                  "reduce_scatter": reduce_scatter, "broadcast": broadcast,
                  "all_to_all_single (uneven splits)": all_to_all_single, "isend/irecv": send_recv})
    checks = {}
    for name, case in cases.items():
        for dtype in LOW:
            for dense in (True, False):
                def check(case=case, dtype=dtype, dense=dense):
                    identical(case(NEURON, dist.group.WORLD, dtype, dense), case(CPU, gloo, dtype, True))
                checks[f"{name} {str(dtype).removeprefix('torch.')}{'' if dense else ' non-contiguous'}"] = check
    return checks


def dtensor_check(rank: int, world: int, gloo: dist.ProcessGroup) -> Callable[[], None]:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def ops(device: torch.device, group: dist.ProcessGroup) -> list[torch.Tensor]:
        mesh = DeviceMesh.from_group(group, device.type)
        generator = torch.Generator().manual_seed(2)
        a = torch.randn(5, 6, generator=generator).bfloat16().to(device)  # 5 rows over the ranks: uneven
        b = torch.randn(6, 3, generator=generator).bfloat16().to(device)
        rows = distribute_tensor(a, mesh, [Shard(0)])
        contracted = distribute_tensor(a, mesh, [Shard(1)]) @ distribute_tensor(b, mesh, [Shard(0)])  # Partial
        results = [rows.to_local(), rows.full_tensor(), (rows @ distribute_tensor(b, mesh, [Replicate()])).full_tensor(),
                   contracted.redistribute(mesh, [Replicate()]).to_local(),
                   distribute_tensor(a, mesh, [Shard(1)]).redistribute(mesh, [Shard(0)]).to_local(),
                   rows.sum().full_tensor(), rows.abs().amax().full_tensor(),
                   torch.softmax(rows, -1).full_tensor(), torch.linalg.vector_norm(rows).full_tensor(),
                   distribute_tensor(a.half(), mesh, [Shard(0)]).mean(0).full_tensor()]
        assert all(r.dtype in LOW for r in results), [r.dtype for r in results]
        return results

    return lambda: identical(ops(NEURON, dist.group.WORLD), ops(CPU, gloo))


# ---- training ----------------------------------------------------------------------------------------------


def make_model(dtype: torch.dtype | None, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT))
    return model.to(dtype or torch.float32).to(device)


def batch(rank: int, world: int, dtype: torch.dtype | None, device: torch.device) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(world * BATCH_PER_RANK, IN, generator=generator)
    y = torch.randn(world * BATCH_PER_RANK, OUT, generator=generator)
    mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
    return x[mine].to(dtype or torch.float32).to(device), y[mine].to(device)


def train(model: torch.nn.Module, parameters: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
          clip: float | None = None, autocast: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """STEPS SGD steps (the loss in float32, as mixed-precision training computes it; the forward under
    ``torch.autocast(x's device type, autocast)`` if given); the full parameters and the gradient norms
    clip_grad_norm_ returned, on CPU."""
    optimizer = torch.optim.SGD(parameters.parameters(), lr=LR)
    norms = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        with torch.autocast(x.device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            output = model(x)
            assert autocast is None or output.dtype == autocast, (x.device, output.dtype)  # the Linear's autocast
            loss = torch.nn.functional.mse_loss(output.float(), y)
        loss.backward()
        if clip is not None:
            norms.append(torch.nn.utils.clip_grad_norm_(parameters.parameters(), clip))
        optimizer.step()
    full = {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
            for name, p in parameters.named_parameters()}
    if norms:
        full["gradient norms"] = torch.stack([n.full_tensor() if hasattr(n, "full_tensor") else n
                                              for n in norms]).cpu()
    return full


def fsdp(mp_policy=None, dtype=None, clip=None, compiled=False, divide_factor=None, autocast=None):
    from torch.distributed.fsdp import fully_shard

    def run(rank, world, device, group):
        mesh = DeviceMesh.from_group(group, device.type)
        model = make_model(dtype, device)
        options = {"mp_policy": mp_policy} if mp_policy else {}
        for layer in (model[0], model[2], model):
            fully_shard(layer, mesh=mesh, **options)
            if divide_factor is not None:
                # FSDP2 reduces with PREMUL_SUM(1 / factor); gloo has none, so on CPU: SUM, then a division
                # (the same numbers for a power of two)
                layer.set_gradient_divide_factor(divide_factor)
                layer.set_force_sum_reduction_for_comms(device.type == "cpu")
        called = torch.compile(model, backend="neuron" if device.type == "neuron" else "eager",
                               dynamic=False) if compiled else model
        return train(called, model, *batch(rank, world, dtype, device), clip, autocast)
    return run


def ddp(dtype=None, hook=None, compiled=False, autocast=None):
    from torch.nn.parallel import DistributedDataParallel

    def run(rank, world, device, group):
        model = make_model(dtype, device)
        inner = torch.compile(model, backend="neuron" if device.type == "neuron" else "eager",
                              dynamic=False) if compiled else model
        wrapped = DistributedDataParallel(inner, process_group=group)
        if hook is not None:
            wrapped.register_comm_hook(None, hook(device))
        return train(wrapped, model, *batch(rank, world, dtype, device), autocast=autocast)
    return run


def bf16_compress(device: torch.device):
    """DDP's bf16_compress_hook; on CPU (where DDP refuses it by name: it wants CUDA and NCCL) the same code
    under another name, for the reference."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def same_on_cpu(state, bucket):
        return default_hooks._compress_hook(torch.bfloat16, state, bucket)

    return default_hooks.bf16_compress_hook if device.type == "neuron" else same_on_cpu


def bf16_compress_wrapper(device: torch.device):
    """``bf16_compress_wrapper(allreduce_hook)``, the other hook DDP refuses by name off CUDA (on CPU: renamed)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook = default_hooks.bf16_compress_wrapper(default_hooks.allreduce_hook)

    def same_on_cpu(state, bucket):
        return hook(state, bucket)

    return hook if device.type == "neuron" else same_on_cpu


def fp16_compress(device: torch.device):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.fp16_compress_hook


def close(neuron: dict[str, torch.Tensor], cpu: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
    """Parameters of float32 master copies within float32 rounding; bf16 parameters within one bf16 rounding
    per step of the largest parameter's scale: the device rounds SGD's ``p.add_(g, alpha=-lr)`` once (the fp32
    result), eager CPU twice (``alpha * g``, then the sum), one bf16 ulp apart at most per step."""
    assert neuron.keys() == cpu.keys(), (neuron.keys(), cpu.keys())
    eps = torch.finfo(dtype).eps
    scale = max(float(t.abs().max()) for t in cpu.values())
    for name in cpu:
        assert neuron[name].dtype == cpu[name].dtype, (name, neuron[name].dtype, cpu[name].dtype)
        torch.testing.assert_close(neuron[name].float(), cpu[name].float(), rtol=STEPS * eps,
                                   atol=STEPS * eps * scale, msg=lambda m, name=name: f"{name}: {m}")


def training_checks(rank: int, world: int, gloo: dist.ProcessGroup) -> dict[str, Callable[[], None]]:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    runs = {  # name: (run, the dtype whose rounding bounds the difference of the final parameters)
        "FSDP2 MixedPrecisionPolicy(param bf16, reduce fp32)": (
            fsdp(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32)), f32),
        "FSDP2 MixedPrecisionPolicy(param bf16, reduce bf16, output fp32)": (
            fsdp(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=f32)), f32),
        "FSDP2 MixedPrecisionPolicy(param float16, reduce float16)": (
            fsdp(MixedPrecisionPolicy(param_dtype=f16, reduce_dtype=f16)), f32),
        "FSDP2 MixedPrecisionPolicy(param bf16, reduce bf16), set_gradient_divide_factor": (
            fsdp(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16), divide_factor=4.0), f32),
        "FSDP2 MixedPrecisionPolicy(param bf16), torch.compile": (
            fsdp(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32), compiled=True), f32),
        "FSDP2 on a bf16 model, clip_grad_norm_": (fsdp(dtype=bf16, clip=0.05), bf16),
        "DDP on a bf16 model": (ddp(dtype=bf16), bf16),
        "DDP bf16_compress_hook": (ddp(hook=bf16_compress), f32),
        "DDP bf16_compress_wrapper(allreduce_hook)": (ddp(hook=bf16_compress_wrapper), f32),
        "DDP fp16_compress_hook": (ddp(hook=fp16_compress), f32),
        "DDP(torch.compile(m)) of a bf16 model": (ddp(dtype=bf16, compiled=True), bf16),
        # torch.autocast("neuron") against torch.autocast("cpu"): the same op lists, products in bf16
        "DDP under torch.autocast(bf16)": (ddp(autocast=bf16), bf16),
        "FSDP2 under torch.autocast(bf16)": (fsdp(autocast=bf16), bf16),
        "DDP under torch.autocast(float16)": (ddp(autocast=f16), f16),
    }
    checks = {}
    for name, (run, dtype) in runs.items():
        def check(run=run, dtype=dtype):
            expected = run(rank, world, CPU, gloo)
            dist.barrier()
            close(run(rank, world, NEURON, dist.group.WORLD), expected, dtype)
        checks[name] = check
    return checks


def run(rank: int, world: int) -> dict[str, str]:
    gloo = dist.new_group(backend="gloo")
    checks = {**collective_checks(rank, world, gloo), "DTensor ops on bf16 shards": dtensor_check(rank, world, gloo),
              **training_checks(rank, world, gloo)}
    return run_checks(checks)
