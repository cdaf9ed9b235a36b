"""``torch.compile(model, backend="neuron")`` on neuron tensors: inputs read in place, outputs in device memory.

The ``neuron`` TorchDynamo backend (the ``torch_dynamo_backends`` entry point) is the front end's
``neuron_backend``; when the graph's tensors are on the neuron device, it is given :data:`NEURON` as its host
device, and each compiled graph call goes through :meth:`NeuronDevice.run`: the executable reads the inputs'
memory, writes new outputs into memory from the device's allocator (no copy when its layout is the wanted
one), and input mutations (BatchNorm's running statistics) are written back. Pieces that run on eager ATen
(``options={"fallback": "cpu"}``) run as the device's eager ops. A graph that draws random numbers (dropout,
``rand``...) takes its per-call Philox key from the device's generator (``neuroncc.device.generators``), as the
device's eager random ops do, so ``torch.manual_seed`` makes compiled runs on the device reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from neuroncc.device import generators
from neuroncc.frontend import backend as frontend_backend
from neuroncc.frontend.imported import ComputedOutput, draw_key

if TYPE_CHECKING:
    from neuroncc.device.kernels import Binding


class NeuronDevice:
    """The front end's :class:`~neuroncc.frontend.boundary.HostDevice` for neuron tensors."""

    device_type = "neuron"

    def run(self, compiled: Any, args: list[Any]) -> list[Any]:
        binding = compiled.__dict__.get("_neuron_binding")
        if binding is None or binding.executable is not compiled.executable:
            # made at the first call, and again whenever the graph has changed executables since: its optimized
            # build taken over the quick code (executors/cpu/tiers.py), another thread count, an arena shared
            binding = compiled._neuron_binding = _binding(compiled, args)
        graph = compiled.graph
        values = [args[p] for p in graph.param_positions]
        index = next((a.get_device() for a in args if isinstance(a, torch.Tensor) and a.get_device() >= 0), 0)
        if graph.rng_key:  # the last parameter: a fresh key from the device's generator
            values.append(draw_key(generators.generator(index)))
        targets = {output: args[position] for position, output in graph.mutations}
        made = binding(values, index, targets)
        return compiled.graph_outputs(args, lambda output, _: made[output.index])


def _binding(compiled: Any, args: list[Any]) -> Binding:
    # imported here: the device's eager-op machinery (kernels, programs, the fallback) costs ~15 ms to import,
    # which torch.compile on CPU tensors (this module is the backend's entry point) would pay on a warm start
    from neuroncc.device.kernels import Binding

    graph = compiled.graph
    inputs: list[Any] = [args[p].dtype for p in graph.param_positions]
    if graph.rng_key:
        inputs.append("float")  # a Python scalar (the random key) made into the parameter's 0-dim i64 buffer
    results = {o.index: (o.spec.shape, o.spec.stride, o.spec.dtype) for o, _ in compiled.outputs
               if isinstance(o, ComputedOutput)}
    writes = {output: (tuple(args[position].shape), tuple(args[position].stride()), args[position].dtype)
              for position, output in graph.mutations}
    return Binding(compiled.executable, inputs, results, writes)


NEURON = NeuronDevice()


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The ``neuron`` torch.compile backend: the front end's, told about the device when the graph's tensors
    are on it."""
    on_device = any(isinstance(t, torch.Tensor) and t.device.type == NEURON.device_type for t in example_inputs)
    if on_device:
        from neuroncc.device.registration import register

        register()
        kwargs["device"] = NEURON
    return frontend_backend.neuron_backend(gm, example_inputs, **kwargs)
