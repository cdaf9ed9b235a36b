"""One process of the portable-cache tests (test_cache_artifacts.py): ``save FILE`` compiles a training step and
writes ``torch.compiler.save_cache_artifacts()``'s bytes to FILE; ``load FILE`` calls
``torch.compiler.load_cache_artifacts()`` with them first, then compiles and runs the same step. Prints one JSON
line: neuroncc's cache counters, the compile cache's entries, how far the results are from eager, and the
error ``load_cache_artifacts`` raised (if it did)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import torch  # the torch.backends entry point registers neuroncc's artifact type here

import neuroncc
from neuroncc.driver.process_cache import CACHE_STATS


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


def largest_difference(eager: list[torch.Tensor], compiled: list[torch.Tensor]) -> float:
    """The largest |compiled - eager| over the tensors; NaN when any is NaN (builtin max() is order-dependent with
    NaN: max(0.0, nan) is 0.0, and a NaN gradient after a finite loss passed the tests' ``< 1e-5``)."""
    differences = [float((a - b).abs().max()) for a, b in zip(eager, compiled, strict=True)]
    return math.nan if any(math.isnan(d) for d in differences) else max(differences, default=0.0)


def _step(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    loss = model(x).square().mean()
    loss.backward()
    return [loss.detach(), *(p.grad for p in model.parameters())]


def main(mode: str, path: Path) -> dict:
    report: dict = {}
    if mode == "load":
        try:
            info = torch.compiler.load_cache_artifacts(path.read_bytes())
            report["loaded"] = sorted(info.artifacts.get("neuroncc", [])) if info is not None else None
        except Exception as error:  # noqa: BLE001 - reported to the test, which checks its type
            report["error"] = [type(error).__name__, str(error)]
            report["entries"] = _entries()
            return report
    x = torch.randn(6, 8)
    eager = _step(_model(), x)
    compiled_model = _model()
    compiled = _step(torch.compile(compiled_model, backend="neuron"), x)
    report["max_difference"] = largest_difference(eager, compiled)
    counters = CACHE_STATS.snapshot()
    report["compiles"] = int(counters["compiles"])
    report["stats"] = {name: neuroncc.stats()[name] for name in ("cache_hits", "cache_misses", "graphs_compiled",
                                                             "aot_autograd_runs", "graph_cache_hits",
                                                             "graph_cache_stores")}
    report["entries"] = _entries()
    if mode == "save":
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            report["saved"] = []
        else:
            data, info = saved
            path.write_bytes(data)
            report["saved"] = sorted(info.artifacts.get("neuroncc", []))
        # the cache's writer publishes entries in the background; saving waited for every one it exports
        report["entries"] = _entries()
    return report


def _entries() -> list[str]:
    entries = Path(os.environ["NEURONCC_CACHE_DIR"]) / "entries"
    return sorted(p.name for p in entries.iterdir()) if entries.exists() else []


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
