"""``neuroncc demo``'s device step: the example model trained eagerly on the ``neuron`` device.

The same tiny classifier, built from the same seed, trains a few AdamW steps on CPU and on the device side
by side (the same script, only the device string differs). Each aten op on the device is compiled by
neuroncc on first use (into the demo's own compile cache) or falls back to CPU; the step reports the losses,
the parameters' largest difference, and what ran where.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import neuroncc

#: The same tolerance the demo's compiled training uses (float32 noise over a few AdamW steps).
PARAMETER_TOLERANCE = 1e-4


def train_on_device(steps: int, seed: int, learning_rate: float, cache_dir: Path, row: Any, indent: str) -> bool:
    """Train on CPU and on ``neuron`` side by side; print the comparison; True when they agree."""
    import torch

    from neuroncc.device import register
    from neuroncc.examples.classifier import ClassifierConfig, build_example, make_batch

    register()  # torch's autoload has done it, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0
    with compile_cache_at(cache_dir):  # the device's kernels go to the demo's cache
        config = ClassifierConfig()
        before = neuroncc.stats()
        neuroncc.clear_op_tracking()
        models = {device: build_example(seed, config).to(device) for device in ("cpu", "neuron")}
        optimizers = {device: torch.optim.AdamW(m.parameters(), lr=learning_rate) for device, m in models.items()}
        generator = torch.Generator().manual_seed(seed + 1)
        row("7 device", f"the same model trained eagerly on the neuron device: model.to(\"neuron\"), "
                        f"{steps} AdamW steps")
        print(f"{indent}  step  neuron loss  cpu loss  |difference|  neuron step")
        agree = True
        for step in range(1, steps + 1):
            tokens, labels = make_batch(config, generator)
            losses, seconds = {}, 0.0
            for device, model in models.items():
                start = time.perf_counter()
                optimizers[device].zero_grad()
                loss = model(tokens.to(device), labels.to(device))
                loss.backward()
                optimizers[device].step()
                losses[device] = loss.item()
                if device == "neuron":
                    seconds = time.perf_counter() - start
            difference = abs(losses["neuron"] - losses["cpu"])
            agree &= difference <= 1e-4 * max(1.0, abs(losses["cpu"]))
            print(f"{indent}  {step:>4}  {losses['neuron']:>11.6f}  {losses['cpu']:>8.6f}  {difference:>12.2e}  "
                  f"{seconds * 1e3:>8.1f} ms")
        parameters = dict(models["cpu"].named_parameters())
        name, worst = max(((n, float((p.detach().cpu() - parameters[n].detach()).abs().max()))
                           for n, p in models["neuron"].named_parameters()), key=lambda item: item[1])
        agree &= worst <= PARAMETER_TOLERANCE
        after = neuroncc.stats()
        executed, fallbacks = neuroncc.get_executed_ops(), neuroncc.get_fallback_ops()
        print(f"{indent}max |parameter difference|: {worst:.2e} ({name}): "
              f"{'ok' if agree else 'TOO LARGE'} (tolerance {PARAMETER_TOLERANCE:g})")
        compiled = after["eager_kernels_compiled"] - before["eager_kernels_compiled"]
        loaded = after["eager_kernels_loaded"] - before["eager_kernels_loaded"]
        print(f"{indent}{len(executed)} aten ops ran on the device ({sum(executed.values())} calls): {compiled} "
              f"kernels compiled on first use, {loaded} loaded from the cache; "
              f"{len(fallbacks)} ops fell back to CPU{': ' + ', '.join(sorted(fallbacks)) if fallbacks else ''}")
        print(f"{indent}(the first step compiles each op; later steps reuse the kernels: see the step times)")
        return agree


@contextlib.contextmanager
def compile_cache_at(cache_dir: Path) -> Iterator[None]:
    """Graphs compiled inside (by the ``neuron`` device, or by ``torch.compile``'s ``neuron`` backend) go to
    ``cache_dir``, the demo's cache, not the user's."""
    previous = os.environ.get("NEURONCC_CACHE_DIR")
    os.environ["NEURONCC_CACHE_DIR"] = str(cache_dir)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("NEURONCC_CACHE_DIR", None)
        else:
            os.environ["NEURONCC_CACHE_DIR"] = previous
