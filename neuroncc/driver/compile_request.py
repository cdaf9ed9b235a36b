"""What a compile through the cache takes and gives: the request, the compile function's result, what the cache
did with it, and the descriptive fields a new artifact's manifest records.

Apart from :mod:`neuroncc.driver.cache` and :mod:`neuroncc.driver.artifact`, which a graph cache hit needs for
reading entries, so that a hit (a warm start's first call, which compiles nothing) does not create these
classes (~1 ms each for a frozen dataclass on Python 3.11); the cache imports this module on its compile path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from neuroncc.driver.artifact import ComponentRecord
from neuroncc.executors.executable import Executable
from neuroncc.ir import Function


@dataclass(frozen=True, slots=True)
class CompileRequest:
    """Everything that decides what a compile produces: the (verified) input graph, target, pipeline, options."""

    function: Function
    target: str
    pipeline: str
    options: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CompileResult:
    """What a compile function returns to the cache: the executable plus what the manifest records about it."""

    executable: Executable
    stages: Mapping[str, str] = field(default_factory=dict)  # stage name -> IR text after it, in order
    timings: Mapping[str, float] = field(default_factory=dict)  # stage name -> seconds


CompileFunction = Callable[[CompileRequest], CompileResult]


@dataclass
class CacheOutcome:
    """What one :meth:`CompileCache.get_or_compile` did, filled in when the caller passes one.

    ``status``: ``hit``, ``miss`` (compiled and stored) or ``uncached``; ``key``: the cache key. With
    ``explain_miss`` set, a miss also says why: ``differing`` lists the key components in which the closest
    stored entry (``closest``: its graph name; one of the same name when there is one) differs
    (``neuroncc_source`` after editing neuroncc, ``graph`` and ``inputs`` for a new input shape, ...);
    ``closest`` is None for an empty cache.
    """

    explain_miss: bool = False
    status: str = "uncached"
    key: str | None = None
    closest: str | None = None
    differing: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ArtifactContents:
    """Everything :func:`neuroncc.driver.artifact.write_artifact` needs besides the executable: the manifest's
    descriptive fields."""

    key: str
    key_components: Mapping[str, ComponentRecord]
    target: str
    input_function: Function
    options: Mapping[str, Any]
    pipeline: str
    stages: Mapping[str, str]  # stage name -> IR text after that stage, in pipeline order
    timings: Mapping[str, float]
    neuroncc_version: str
    created_at: str


__all__ = ["ArtifactContents", "CacheOutcome", "CompileFunction", "CompileRequest", "CompileResult"]
