"""``ProcessGroupNeuron``: torch.distributed's ``neuron`` backend. gloo moves the bytes; this class hands it
the neuron tensors' host memory (``host.Staging``) and finishes what gloo does not do (AVG, PRODUCT-free
gaps: list all-to-all, coalesced tensor collectives).

It is a Python ``ProcessGroup`` (torch's PyProcessGroup trampoline), so torch's own C++ callers reach it too:
DistributedDataParallel's reducer, functional collectives (``torch.distributed._functional_collectives``, what
``torch.compile`` traces), the coalescing manager. CPU tensors pass straight through, so one group serves
``init_process_group("neuron")`` and ``"cpu:gloo,neuron:neuron"`` alike (torch keeps a Python group as the
whole group: it takes the CPU tensors as well).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)
from torch.distributed import ReduceOp

from neuroncc.distributed import ddp, fsdp
from neuroncc.device.registration import DEVICE_NAME
from neuroncc.distributed.host import Staging
from neuroncc.distributed.work import NeuronWork, completed, explain

#: The backend's name is the device's (``init_process_group("neuron")``, ``"cpu:gloo,neuron:neuron"``).
BACKEND_NAME = DEVICE_NAME

_AVG = ReduceOp.AVG
_PREMUL_SUM = ReduceOp.PREMUL_SUM
_SUPPORTED_OPS = {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT, ReduceOp.BAND,
                  ReduceOp.BOR, ReduceOp.BXOR, _PREMUL_SUM}


def _reduce_op(opts: Any) -> tuple[Any, float | torch.Tensor | None]:
    """The options' reduce op as a ``ReduceOp.RedOpType`` (options hold a ``ReduceOp`` wrapping one), and
    PREMUL_SUM's factor (None for every other op)."""
    op = getattr(opts, "reduceOp", ReduceOp.SUM)
    kind = getattr(op, "op", op)
    return kind, op.factor if kind == _PREMUL_SUM else None


class ProcessGroupNeuron(dist.ProcessGroup):
    """One rank's view of a group of ``size`` processes; ``store`` is the group's rendezvous store."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._rank, self._size, self._timeout = rank, size, timeout
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("neuron-gloo/", store), rank, size, timeout)
        self._group_name, self._group_desc = "", ""
        self.staging_copies = 0  # copies made for tensors gloo could not take in place (observability)

    # ---- identity -----------------------------------------------------------------------------------------

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return BACKEND_NAME

    def rank(self) -> int:
        return self._rank

    # a Python group keeps its own name (torch's base class asks a C++ backend, which it does not have)
    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def size(self) -> int:
        return self._size

    @property
    def _device_types(self) -> list[torch.device]:
        """The devices whose tensors the group takes: CPU's and the device's. torch fills this list (its C++
        property) only for groups it assembles from backends; a Python group it keeps whole has none, and
        torch.distributed's Python code reads it: ``dcp.async_save`` refuses a group without ``cpu``,
        ``set_model_state_dict(..., broadcast_from_rank0=True)`` indexes it (an IndexError on an empty list),
        object collectives pick ``cpu`` from it as they did from the empty list."""
        return [torch.device("cpu"), torch.device(DEVICE_NAME)]

    @property
    def name_for_errors(self) -> str:
        return f"neuron process group (rank {self._rank} of {self._size})"

    def __repr__(self) -> str:
        return f"ProcessGroupNeuron(rank={self._rank}, size={self._size})"

    # ---- the common path ----------------------------------------------------------------------------------

    def _run(self, what: str, staging: Staging, result: list[torch.Tensor],
             launch: Callable[[], dist.Work | Sequence[dist.Work]]) -> NeuronWork:
        """Launch gloo's work(s) on the staged host tensors; the NeuronWork finishing them."""
        self.staging_copies += staging.copies
        try:
            works = launch()
        except RuntimeError as exc:  # gloo refuses synchronously (a closed connection, bad arguments)
            raise explain(what, self.name_for_errors, exc, self._timeout) from None
        works = [works] if isinstance(works, dist.Work) else list(works)
        return NeuronWork(works, staging.finish, result, what, self.name_for_errors, self._timeout)

    def _staging_for(self, reduce_op: tuple[Any, float | torch.Tensor | None]) -> tuple[Staging, Any]:
        """The staging of a reducing collective and the op gloo runs: AVG runs as SUM, then a division;
        PREMUL_SUM (NCCL's; FSDP2's ``set_gradient_divide_factor``) as SUM of the inputs times its factor
        (gloo has neither)."""
        op, factor = reduce_op
        if op not in _SUPPORTED_OPS:
            raise ValueError(f"{self.name_for_errors}: reduce op {op} is not supported (use SUM, AVG, MAX, MIN, "
                             "PRODUCT, PREMUL_SUM or a bitwise op)")
        if op == _AVG:
            return Staging(divisor=self._size), ReduceOp.SUM
        if op == _PREMUL_SUM:
            return Staging(factor=factor), ReduceOp.SUM
        return Staging(), op

    # ---- all-reduce ---------------------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = opts or AllreduceOptions()
        staging, op = self._staging_for(_reduce_op(opts))
        hosts = staging.reduced_in_place(tensors)
        gloo_opts = AllreduceOptions()
        gloo_opts.reduceOp = op
        gloo_opts.timeout = opts.timeout
        return self._run("all_reduce", staging, tensors, lambda: self._gloo.allreduce(hosts, gloo_opts))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = opts or AllreduceCoalescedOptions()
        staging, op = self._staging_for(_reduce_op(opts))
        hosts = staging.reduced_in_place(tensors)
        gloo_opts = AllreduceCoalescedOptions()
        gloo_opts.reduceOp = op
        if len({t.dtype for t in hosts}) == 1:
            launch = lambda: self._gloo.allreduce_coalesced(hosts, gloo_opts)  # noqa: E731
        else:  # gloo coalesces one dtype only
            launch = lambda: [self._gloo.allreduce([h], self._allreduce_opts(op)) for h in hosts]  # noqa: E731
        return self._run("all_reduce (coalesced)", staging, tensors, launch)

    @staticmethod
    def _allreduce_opts(op: Any) -> Any:
        opts = AllreduceOptions()
        opts.reduceOp = op
        return opts

    # ---- reduce, broadcast --------------------------------------------------------------------------------

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = opts or ReduceOptions()
        staging, op = self._staging_for(_reduce_op(opts))
        if self._rank != opts.rootRank:
            staging.divisor = 1
        hosts = staging.reduced_in_place(tensors)
        gloo_opts = ReduceOptions()
        gloo_opts.reduceOp, gloo_opts.rootRank, gloo_opts.rootTensor = op, opts.rootRank, opts.rootTensor
        return self._run("reduce", staging, tensors, lambda: self._gloo.reduce(hosts, gloo_opts))

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = opts or BroadcastOptions()
        staging = Staging()
        hosts = staging.hosts(tensors, output=True)
        return self._run("broadcast", staging, tensors, lambda: self._gloo.broadcast(hosts, opts))

    # ---- all-gather ---------------------------------------------------------------------------------------

    def _into_output_lists(self, name: str, collective: Callable[..., Any], output_lists: list[list[torch.Tensor]],
                           inputs: list[torch.Tensor], opts: Any) -> NeuronWork:
        """A collective from a list of inputs into lists of outputs (all-gather, gather): gloo's
        ``collective(host_outputs, host_inputs, opts)`` on host copies of both."""
        staging = Staging()
        host_inputs = staging.hosts(inputs, output=False)
        host_outputs = [staging.hosts(outputs, output=True) for outputs in output_lists]
        return self._run(name, staging, [t for ts in output_lists for t in ts],
                         lambda: collective(host_outputs, host_inputs, opts))

    def allgather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> NeuronWork:
        return self._into_output_lists("all_gather", self._gloo.allgather, output_lists, inputs,
                                       opts or AllgatherOptions())

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> NeuronWork:
        staging = Staging()
        host_input, host_output = staging.host(input, output=False), staging.host(output, output=True)
        return self._run("all_gather_into_tensor", staging, [output],
                         lambda: self._gloo._allgather_base(host_output, host_input,
                                                            opts or AllgatherOptions()))

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> NeuronWork:
        return self._into_output_lists("all_gather (coalesced)", self._gloo.allgather_coalesced, output_lists,
                                       inputs, opts or AllgatherOptions())

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> NeuronWork:
        staging = Staging()
        pairs = [(staging.host(o, output=True), staging.host(i, output=False)) for o, i in zip(outputs, inputs)]
        return self._run("all_gather_into_tensor (coalesced)", staging, list(outputs),
                         lambda: [self._gloo._allgather_base(o, i, AllgatherOptions()) for o, i in pairs])

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # ---- reduce-scatter -----------------------------------------------------------------------------------

    def _reduce_scatter_staging(self, opts: Any) -> tuple[Staging, Any]:
        """The staging for a reduce-scatter's reduction and the gloo options that perform it."""
        staging, op = self._staging_for(_reduce_op(opts or ReduceScatterOptions()))
        gloo_opts = ReduceScatterOptions()
        gloo_opts.reduceOp = op
        return staging, gloo_opts

    def reduce_scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                       opts: Any = None) -> NeuronWork:
        staging, gloo_opts = self._reduce_scatter_staging(opts)
        host_outputs = staging.hosts(outputs, output=True)
        host_inputs = [[staging.reduced(t) for t in inputs] for inputs in input_lists]
        return self._run("reduce_scatter", staging, list(outputs),
                         lambda: self._gloo.reduce_scatter(host_outputs, host_inputs, gloo_opts))

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> NeuronWork:
        staging, gloo_opts = self._reduce_scatter_staging(opts)
        host_output, host_input = staging.host(output, output=True), staging.reduced(input)
        return self._run("reduce_scatter_tensor", staging, [output],
                         lambda: self._gloo._reduce_scatter_base(host_output, host_input, gloo_opts))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> NeuronWork:
        staging, gloo_opts = self._reduce_scatter_staging(opts)
        pairs = [(staging.host(o, output=True), staging.reduced(i)) for o, i in zip(outputs, inputs)]
        return self._run("reduce_scatter_tensor (coalesced)", staging, list(outputs),
                         lambda: [self._gloo._reduce_scatter_base(o, i, gloo_opts) for o, i in pairs])

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ---- gather, scatter ----------------------------------------------------------------------------------

    def gather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any = None) -> NeuronWork:
        return self._into_output_lists("gather", self._gloo.gather, output_lists, inputs, opts or GatherOptions())

    def scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                opts: Any = None) -> NeuronWork:
        staging = Staging()
        host_outputs = staging.hosts(outputs, output=True)
        host_inputs = [staging.hosts(inputs, output=False) for inputs in input_lists]
        return self._run("scatter", staging, list(outputs),
                         lambda: self._gloo.scatter(host_outputs, host_inputs, opts or ScatterOptions()))

    # ---- all-to-all ---------------------------------------------------------------------------------------

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                          input_splits: list[int], opts: Any = None) -> NeuronWork:
        staging = Staging()
        host_output, host_input = staging.host(output, output=True), staging.host(input, output=False)
        return self._run("all_to_all_single", staging, [output],
                         lambda: self._gloo.alltoall_base(host_output, host_input, list(output_splits),
                                                          list(input_splits), opts or AllToAllOptions()))

    alltoall_base = all_to_all_single

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        """A list all-to-all as one ``all_to_all_single`` over the concatenated rows (gloo has no list form):
        one copy in, one copy out per tensor."""
        staging = Staging()
        flat_in = torch.cat([staging.host(t, output=False).reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=outputs[0].dtype)
        host_outputs = [staging.host(t, output=True) for t in outputs]
        finish = staging.finish

        def unpack() -> None:
            offset = 0
            for host in host_outputs:
                host.copy_(flat_out[offset:offset + host.numel()].view(host.shape))
                offset += host.numel()
            finish()

        staging.finish = unpack  # type: ignore[method-assign]
        staging.copies += len(inputs) + len(outputs)
        return self._run("all_to_all", staging, list(outputs),
                         lambda: self._gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs],
                                                          [t.numel() for t in inputs], AllToAllOptions()))

    # ---- barrier, point to point --------------------------------------------------------------------------

    def barrier(self, opts: Any = None) -> NeuronWork:
        return self._run("barrier", Staging(), [], lambda: self._gloo.barrier(opts or BarrierOptions()))

    def monitored_barrier(self, timeout: timedelta | None = None, wait_all_ranks: bool = False) -> None:
        self._gloo.monitored_barrier(timeout or self._timeout, wait_all_ranks)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> NeuronWork:
        staging = Staging()
        hosts = staging.hosts(tensors, output=False)
        return self._run(f"send to rank {dst}", staging, tensors, lambda: self._gloo.send(hosts, dst, tag))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> NeuronWork:
        staging = Staging()
        hosts = staging.hosts(tensors, output=True)
        return self._run(f"recv from rank {src}", staging, tensors, lambda: self._gloo.recv(hosts, src, tag))

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> NeuronWork:
        staging = Staging()
        hosts = staging.hosts(tensors, output=True)
        work = self._run("recv from any rank", staging, tensors, lambda: self._gloo.recv_anysource(hosts, tag))
        inner = work._works[0]
        work._source_rank = inner._source_rank  # type: ignore[attr-defined]  (dist.recv(src=None) asks)
        return work

    # ---- coalescing ---------------------------------------------------------------------------------------
    # torch's coalescing manager collects same-kind collectives and calls the *_coalesced methods above; a
    # block with nothing collected (point-to-point ops, which run as they are issued) ends with nothing to wait.

    def start_coalescing(self, device: torch.device) -> None:
        pass

    def end_coalescing(self, device: torch.device) -> NeuronWork:
        return completed([], "coalesced operations", self.name_for_errors)

    def shutdown(self) -> None:
        self._gloo.shutdown()

    def abort(self) -> None:
        self._gloo.abort()


def create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> ProcessGroupNeuron:
    """The creator ``Backend.register_backend`` calls for ``init_process_group("neuron")`` / ``new_group``."""
    fsdp.install()  # FSDP2 and DDP run over neuron groups: fit them to the device before they can be used
    ddp.install(ProcessGroupNeuron)
    return ProcessGroupNeuron(store, rank, size, timeout)
