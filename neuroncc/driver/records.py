"""What one compile did, as data and as one log line: :class:`CompileRecord`.

``compile_graph`` makes a record for every graph it compiles or loads, logs its :meth:`~CompileRecord.line`
on the ``neuroncc.driver`` logger at INFO (``TORCH_LOGS=neuroncc``, ``NEURONCC_LOG=info``) and hands it to its
``on_compiled`` callback (the front end keeps them for ``neuroncc.evaluate``)::

    neuroncc: compiled @g0_1_forward for cpu: 80 ops -> 12 launches (7 kernels, 4 extern calls, 1 interpreted);
      cache miss (closest stored entry differs in: inputs); passes 41.2 ms (fuse 18.0 ms, tile 9.1 ms, ...),
      codegen 231 ms, cache 12.0 ms; 290 ms in all
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neuroncc.driver.compile_request import CacheOutcome, CompileRequest
from neuroncc.ir import Category

#: The stage name compile_uncached gives code generation (building the target's executable).
BUILD_STAGE = "build"


@dataclass(frozen=True)
class CompileRecord:
    """One compile: the graph, what it became, whether the cache had it, and where the time went."""

    function: str
    target: str
    ops: int  # ops of the imported graph (before the pipeline)
    launches: Mapping[str, int]  # kind -> count: kernels, extern calls, interpreted kernels
    cache: str  # "hit", "miss" (compiled, stored) or "uncached"
    key: str | None
    differing: tuple[str, ...] | None  # on a miss: the key components the closest stored entry differs in
    closest: str | None  # that entry's graph name
    pass_seconds: Mapping[str, float] = field(default_factory=dict)  # pass name -> seconds (compiled here only)
    codegen_seconds: float = 0.0
    seconds: float = 0.0  # the whole compile_graph call

    @property
    def passes_total(self) -> float:
        return sum(self.pass_seconds.values())

    @property
    def cache_seconds(self) -> float:
        """Time not spent in passes or code generation: key, lookup, load or publish (and verification)."""
        return max(self.seconds - self.passes_total - self.codegen_seconds, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "target": self.target, "ops": self.ops, "launches": dict(self.launches),
                "cache": self.cache, "key": self.key,
                "differing": list(self.differing) if self.differing is not None else None, "closest": self.closest,
                "pass_seconds": dict(self.pass_seconds), "codegen_seconds": self.codegen_seconds,
                "cache_seconds": self.cache_seconds, "seconds": self.seconds}

    def line(self) -> str:
        launches = ", ".join(f"{count} {kind.removesuffix('s') if count == 1 else kind}"
                             for kind, count in self.launches.items() if count)
        cache = {"hit": "cache hit", "miss": "cache miss", "uncached": "not cached"}[self.cache]
        if self.cache == "miss" and self.differing is not None:
            cache += (f" (closest stored entry, @{self.closest}, differs in: {', '.join(self.differing)})"
                      if self.closest else " (no stored entry of this target to compare)")
        times = []
        if self.pass_seconds:
            slowest = sorted(self.pass_seconds.items(), key=lambda item: -item[1])[:3]
            times.append(f"passes {_ms(self.passes_total)} ("
                         + ", ".join(f"{_pass_name(name)} {_ms(seconds)}" for name, seconds in slowest)
                         + (", ..." if len(self.pass_seconds) > 3 else "") + ")")
        if self.codegen_seconds:
            times.append(f"codegen {_ms(self.codegen_seconds)}")
        times.append(f"cache {_ms(self.cache_seconds)}")
        return (f"neuroncc: compiled @{self.function} for {self.target}: {self.ops} ops -> {launches or 'no launches'}; "
                f"{cache}; {', '.join(times)}; {_ms(self.seconds)} in all")


def _pass_name(stage: str) -> str:
    """``03-fuse`` (the pass manager's stage name) -> ``fuse``."""
    number, _, name = stage.partition("-")
    return name if number.isdigit() and name else stage


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def launch_counts(executable: Any) -> dict[str, int]:
    """Kernels, extern calls and interpreted kernels of an executable, from what it reports in ``stats``."""
    stats: Mapping[str, Any] = getattr(executable, "stats", None) or {}
    if "native_kernels" in stats or "interpreted_kernels" in stats:
        return {"kernels": int(stats.get("native_kernels", 0)), "extern calls": int(stats.get("extern_calls", 0)),
                "interpreted": int(stats.get("interpreted_kernels", 0))}
    if "kernels" in stats:
        return {"kernels": int(stats["kernels"]), "host steps": int(stats.get("host_steps", 0))}
    function = getattr(executable, "function", None)
    kernels = sum(op.opdef.category is Category.KERNEL for op in function.ops) if function is not None else 0
    return {"kernels": kernels}


def make_record(request: CompileRequest, executable: Any, outcome: CacheOutcome, timings: Mapping[str, float],
                seconds: float) -> CompileRecord:
    """The record of one ``compile_graph`` call; ``timings`` are the stages that ran here (empty on a hit)."""
    passes = {name: value for name, value in timings.items() if name != BUILD_STAGE}
    return CompileRecord(request.function.name, request.target, len(request.function.ops), launch_counts(executable),
                         outcome.status, outcome.key, outcome.differing, outcome.closest, passes, timings.get(BUILD_STAGE, 0.0),
                         seconds)

