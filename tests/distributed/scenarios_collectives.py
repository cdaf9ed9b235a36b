"""Rank-side checks of every collective of the ``neuron`` backend on neuron tensors, each against the result
computed in one process from every rank's (deterministic) input. Each check reports "ok" or its failure, so
one run covers them all and a failure names the collective."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from neuroncc.errors import CollectiveError

N = 6


def device() -> torch.device:
    return torch.device("neuron", int(os.environ.get("LOCAL_RANK", "0")) if os.environ.get("PER_RANK_DEVICE")
                        else 0)


def value(rank: int, n: int = N, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rank ``rank``'s input, on CPU (every rank can compute every other rank's)."""
    return (torch.arange(n, dtype=torch.float64) * (rank + 1) + rank - 1.5).to(dtype)


def on(t: torch.Tensor) -> torch.Tensor:
    return t.to(device())


def same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "neuron", f"result on {actual.device}, not neuron"
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-6, atol=1e-6)


def run(rank: int, world: int) -> dict[str, str]:
    checks: dict[str, Callable[[], None]] = {}
    everyone = [value(r) for r in range(world)]
    stacked = torch.stack(everyone)

    def check(name: str):
        def register(fn: Callable[[], None]) -> Callable[[], None]:
            checks[name] = fn
            return fn
        return register

    reductions = {"SUM": stacked.sum(0), "AVG": stacked.mean(0), "MAX": stacked.max(0).values,
                  "MIN": stacked.min(0).values, "PRODUCT": stacked.prod(0)}
    for op_name, expected in reductions.items():
        def all_reduce(op_name=op_name, expected=expected):
            t = on(value(rank))
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op_name))
            same(t, expected)
        check(f"all_reduce {op_name}")(all_reduce)

    @check("all_reduce int64 SUM, async work and its future")
    def _():
        t = on(value(rank, dtype=torch.int64))
        work = dist.all_reduce(t, async_op=True)
        result = work.get_future().wait()
        assert work.wait() and result[0] is t, "the future yields the caller's tensor"
        same(t, torch.stack([value(r, dtype=torch.int64) for r in range(world)]).sum(0))

    @check("all_reduce of a non-contiguous view (staged, written back)")
    def _():
        base = on(torch.stack([value(rank), value(rank) * 2]))  # (2, N)
        view = base.t()  # (N, 2), not contiguous
        dist.all_reduce(view)
        same(base, torch.stack([stacked.sum(0), stacked.sum(0) * 2]))

    @check("all_reduce moves dense neuron tensors without staging copies")
    def _():
        pg = dist.group.WORLD
        before = pg.staging_copies
        t = on(value(rank))
        dist.all_reduce(t)
        assert pg.staging_copies == before, f"{pg.staging_copies - before} staging copies"

    @check("all_gather")
    def _():
        outputs = [on(torch.zeros(N)) for _ in range(world)]
        dist.all_gather(outputs, on(value(rank)))
        for r in range(world):
            same(outputs[r], everyone[r])

    @check("all_gather_into_tensor")
    def _():
        output = on(torch.zeros(world * N))
        dist.all_gather_into_tensor(output, on(value(rank)))
        same(output, torch.cat(everyone))

    @check("reduce_scatter")
    def _():
        inputs = [on(value(rank) + j) for j in range(world)]
        output = on(torch.zeros(N))
        dist.reduce_scatter(output, inputs)
        same(output, torch.stack([value(r) + rank for r in range(world)]).sum(0))

    for op_name in ("SUM", "AVG"):
        def reduce_scatter_tensor(op_name=op_name):
            whole = on(torch.cat([value(rank) * (j + 1) for j in range(world)]))
            output = on(torch.zeros(N))
            dist.reduce_scatter_tensor(output, whole, op=getattr(dist.ReduceOp, op_name))
            contributions = torch.stack([value(r) * (rank + 1) for r in range(world)])
            same(output, contributions.sum(0) if op_name == "SUM" else contributions.mean(0))
        check(f"reduce_scatter_tensor {op_name}")(reduce_scatter_tensor)

    @check("broadcast from the last rank")
    def _():
        t = on(value(rank))
        dist.broadcast(t, src=world - 1)
        same(t, everyone[-1])

    @check("reduce SUM to rank 0")
    def _():
        t = on(value(rank))
        dist.reduce(t, dst=0)
        if rank == 0:
            same(t, stacked.sum(0))

    @check("gather to rank 0")
    def _():
        outputs = [on(torch.zeros(N)) for _ in range(world)] if rank == 0 else None
        dist.gather(on(value(rank)), outputs, dst=0)
        if rank == 0:
            for r in range(world):
                same(outputs[r], everyone[r])

    @check("scatter from rank 0")
    def _():
        output = on(torch.zeros(N))
        dist.scatter(output, [on(value(r)) for r in range(world)] if rank == 0 else None, src=0)
        same(output, everyone[rank])

    @check("all_to_all with uneven sizes")
    def _():
        # rank r sends (r + 1) elements to each peer j, valued 10 r + j
        inputs = [on(torch.full((rank + 1,), 10.0 * rank + j)) for j in range(world)]
        outputs = [on(torch.zeros(r + 1)) for r in range(world)]
        dist.all_to_all(outputs, inputs)
        for r in range(world):
            same(outputs[r], torch.full((r + 1,), 10.0 * r + rank))

    @check("all_to_all_single with uneven splits")
    def _():
        # rank r sends j + 1 elements to rank j; so it receives rank + 1 elements from each
        input_splits = [j + 1 for j in range(world)]
        data = torch.cat([torch.full((j + 1,), 100.0 * rank + j) for j in range(world)])
        output = on(torch.zeros((rank + 1) * world))
        dist.all_to_all_single(output, on(data), [rank + 1] * world, input_splits)
        same(output, torch.cat([torch.full((rank + 1,), 100.0 * r + rank) for r in range(world)]))

    @check("barrier")
    def _():
        dist.barrier()

    @check("send/recv around the ring, isend/irecv")
    def _():
        right, left = (rank + 1) % world, (rank - 1) % world
        received = on(torch.zeros(N))
        if rank % 2 == 0:
            dist.send(on(value(rank)), right)
            dist.recv(received, left)
        else:
            dist.recv(received, left)
            dist.send(on(value(rank)), right)
        same(received, everyone[left])
        received = on(torch.zeros(N))
        works = [dist.isend(on(value(rank) * 2), right), dist.irecv(received, left)]
        for work in works:
            work.wait()
        same(received, everyone[left] * 2)

    @check("batch_isend_irecv")
    def _():
        right, left = (rank + 1) % world, (rank - 1) % world
        from_left, from_right = on(torch.zeros(N)), on(torch.zeros(N))
        ops = [dist.P2POp(dist.isend, on(value(rank)), right), dist.P2POp(dist.isend, on(value(rank) + 1), left),
               dist.P2POp(dist.irecv, from_left, left), dist.P2POp(dist.irecv, from_right, right)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        same(from_left, everyone[left])
        same(from_right, everyone[right] + 1)

    @check("coalesced all_reduce (async)")
    def _():
        tensors = [on(value(rank)), on(value(rank, n=3, dtype=torch.float32))]
        with dist._coalescing_manager(async_ops=True) as manager:
            for t in tensors:
                dist.all_reduce(t)
        manager.wait()
        same(tensors[0], stacked.sum(0))
        same(tensors[1], torch.stack([value(r, n=3) for r in range(world)]).sum(0))

    @check("coalesced all_gather_into_tensor")
    def _():
        outputs = [on(torch.zeros(world * N)), on(torch.zeros(world * 2))]
        with dist._coalescing_manager():
            dist.all_gather_into_tensor(outputs[0], on(value(rank)))
            dist.all_gather_into_tensor(outputs[1], on(value(rank, n=2)))
        same(outputs[0], torch.cat(everyone))
        same(outputs[1], torch.cat([value(r, n=2) for r in range(world)]))

    @check("functional collectives")
    def _():
        group = dist.group.WORLD
        same(fc.all_reduce(on(value(rank)), "sum", group).wait(), stacked.sum(0))
        same(fc.all_gather_tensor(on(value(rank)), 0, group).wait(), torch.cat(everyone))
        whole = on(torch.cat([value(rank) * (j + 1) for j in range(world)]))
        same(fc.reduce_scatter_tensor(whole, "sum", 0, group).wait(),
             torch.stack([value(r) * (rank + 1) for r in range(world)]).sum(0))
        same(fc.all_to_all_single(on(torch.arange(world * 2.0) + 10 * rank), [2] * world, [2] * world, group).wait(),
             torch.cat([torch.arange(2.0) + 2 * rank + 10 * r for r in range(world)]))

    @check("functional collectives inside torch.compile(backend='neuron')")
    def _():
        def step(x):
            y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
            return torch.relu(y) + 1

        compiled = torch.compile(step, backend="neuron", dynamic=False)
        same(compiled(on(value(rank))), torch.relu(stacked.sum(0) * 2) + 1)

    results = {}
    for name, fn in checks.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=4)[-1500:]
    return results


def dead_rank(rank: int, world: int, mode: str = "die") -> dict[str, object]:
    """The last rank dies ("die") or stops answering ("hang") after the group formed; the others' next
    all_reduce must fail with a clear error within the group's timeout, not hang."""
    t = on(value(rank))
    dist.all_reduce(t)  # everyone is connected
    if rank == world - 1:
        if mode == "hang":  # silent until the others have exited (the test then creates TEST_HANG_RELEASE)
            release = os.environ.get("TEST_HANG_RELEASE")
            deadline = time.monotonic() + float(os.environ["TEST_PG_TIMEOUT"]) * 3  # (at most 3 timeouts)
            while time.monotonic() < deadline and not (release and os.path.exists(release)):
                time.sleep(0.05)
        os._exit(17)
    start = time.monotonic()
    try:
        dist.all_reduce(on(value(rank)))
        dist.all_reduce(on(value(rank)))
    except CollectiveError as exc:
        return {"error": str(exc), "type": "CollectiveError", "seconds": time.monotonic() - start}
    except Exception as exc:  # noqa: BLE001  (reported, the test names it)
        return {"error": str(exc), "type": type(exc).__name__, "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


def device_map(rank: int, world: int) -> dict[str, str]:
    """``init_process_group("cpu:gloo,neuron:neuron")``: CPU and neuron tensors both reduce."""
    cpu = value(rank)
    neuron = on(value(rank))
    dist.all_reduce(cpu)
    dist.all_reduce(neuron)
    expected = torch.stack([value(r) for r in range(world)]).sum(0)
    torch.testing.assert_close(cpu, expected)
    same(neuron, expected)
    return {"backend": dist.get_backend(), "group": type(dist.group.WORLD).__name__}
