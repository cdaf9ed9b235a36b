"""The CPU launch plan as data: buffers, value layouts and steps of a compiled graph, and its JSON form.

``program.plan_launch`` makes a plan; an artifact stores it (``plan.json``, no pickle) beside the object code,
and loading it (``executors/cpu/launcher.py``) rebuilds the launcher without recompiling, from this module alone:
nothing here imports the planner, the kernel emitters or the passes. Value ids number the top-level values:
params, then op results.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from neuroncc.errors import ArtifactError
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir.graph import Function, print_function

PLAN_VERSION = 6  # 3: BufferSpec.supplied, kind call; 4: StepSpec.row_block; 5: in_place; 6: code_form
ALIGN = CACHE_LINE_BYTES  # buffers and arena slots start on a cache line


class BufferKind(enum.StrEnum):
    """Where a buffer's storage comes from."""

    INPUT = "input"  # a user input (index: param position)
    OUTPUT = "output"  # a fresh array returned to the caller (index: output position)
    ARENA = "arena"  # a slot of the arena every call reuses (index: byte offset)
    CONSTANT = "constant"  # a constant of the graph (index: op index)
    CALL = "call"  # a per-call intermediate (index: the id of the value it holds)


class SlotKind(enum.StrEnum):
    """What a kernel's argument slot points at."""

    VALUE = "value"  # a top-level value (ref: value id)
    SCRATCH = "scratch"  # kernel scratch in the arena (ref: byte offset)
    CONSTANT = "constant"  # a constant inside the region (ref: region op index)
    ERROR = "error"  # the kernel's error flag (ref: 0)


# The records below are named tuples, not frozen dataclasses: as immutable, and ~0.2 ms each to create where a
# frozen dataclass takes ~1 ms (Python 3.11 exec's each generated method), paid by every warm start's import
# (this module is on a graph cache hit's path). A new version of a record is ``record._replace(field=...)``.


class StepKind(enum.StrEnum):
    """What one step of a launch runs."""

    KERNEL = "kernel"  # a compiled kernel (its phases), or the interpreter where it could not compile
    EXTERN = "extern"  # an extern call (BLAS, ATen)
    VIEW_COPY = "view-copy"  # a view that must be copied into its own buffer


class BufferSpec(NamedTuple):
    """One buffer of a launch: where its storage comes from (``kind``, ``index``), its length in elements and dtype."""

    kind: BufferKind
    index: int  # input: param position; output: output position; arena: byte offset; constant: op index;
    #             call: the id of the value it holds
    extent: int  # elements of storage
    dtype: str
    supplied: bool = False  # the step computing it supplies the storage each call (executors/cpu/adopt.py)


class ValueSpec(NamedTuple):
    """A top-level value as a strided view of buffer ``buffer`` (offset and strides in elements)."""

    buffer: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


class PhaseSpec(NamedTuple):
    """One phase of a compiled kernel: its symbol, called over ``n_outer`` outer iterations; ``work`` is the
    launcher's cost estimate (``launch_cost.py``), ``serial`` a phase that must run on one thread."""

    symbol: str
    n_outer: int
    work: int
    serial: bool


class CpuSlot(NamedTuple):
    """What one argument slot of a kernel points at (``ref``'s meaning depends on ``kind``)."""

    kind: SlotKind
    ref: int  # value id | arena byte offset | region op index | 0


class ExternSpec(NamedTuple):
    """An extern call (BLAS, ATen) inside a kernel's region: its operands and results as views of the kernel's
    argument slots."""

    op_index: int  # in the region
    operands: tuple[ValueSpec, ...]  # buffer = kernel argument slot, relative to that slot's pointer
    results: tuple[ValueSpec, ...]


class FailedCheck(enum.IntEnum):
    """What a kernel stores in its error flag when a run-time check fails: the launcher's error says which kind
    when the rerun of the kernel's ops does not name the op (``executors/cpu/check_failure.py``)."""

    INDEX = 1  # a data-dependent index out of range
    ZERO_DIVISOR = 2  # an integer divisor of zero


class StepSpec(NamedTuple):
    """One step of a launch, in order: a kernel (``native``: compiled, else interpreted for ``reason``), an
    extern call or a view copy, reading value ids ``operands`` and defining ``results``."""

    kind: StepKind
    op_index: int
    operands: tuple[int, ...]
    results: tuple[int, ...]
    native: bool = False
    phases: tuple[PhaseSpec, ...] = ()
    slots: tuple[CpuSlot, ...] = ()
    extern: ExternSpec | None = None
    may_fail: bool = False
    row_block: int = 0  # extern mm/addmm and epilogue phases run blocks of this many rows (0: all at once)
    reason: str = ""  # why a kernel runs in the interpreter


@dataclass
class CpuLaunchPlan:
    """How a compiled graph runs: its buffers, values and steps, for the CPU and object code it was built for."""

    function_hash: str
    cpu: str
    features: str
    buffers: list[BufferSpec] = field(default_factory=list)
    values: list[ValueSpec] = field(default_factory=list)
    steps: list[StepSpec] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    arena_bytes: int = 0
    #: of the code file (kernels.so or kernels.a): a truncated or foreign file must never be loaded
    object_sha256: str = ""
    version: int = PLAN_VERSION
    #: (output position, param position): the output is computed in the param's buffer (the caller's memory)
    in_place: list[tuple[int, int]] = field(default_factory=list)
    #: how the kernels' code is stored: "shared-library" (kernels.so) or "objects" (kernels.a); the values of
    #: ``native_library.CodeForm``
    code_form: str = "objects"

    def to_json(self) -> str:
        return json.dumps({f.name: _plain(getattr(self, f.name)) for f in fields(self)}, indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> CpuLaunchPlan:
        try:
            data = json.loads(text)
            if data.get("version") != PLAN_VERSION:
                raise ArtifactError(f"launch plan version {data.get('version')} is not {PLAN_VERSION}")
            return CpuLaunchPlan(
                data["function_hash"], data["cpu"], data["features"],
                [BufferSpec(**{**b, "kind": BufferKind(b["kind"])}) for b in data["buffers"]],
                [_value(v) for v in data["values"]],
                [_step(s) for s in data["steps"]],
                list(data["outputs"]), data["arena_bytes"], data["object_sha256"], data["version"],
                [(int(o), int(p)) for o, p in data["in_place"]], str(data["code_form"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"malformed launch plan: {exc}") from None


def _plain(value: Any) -> Any:
    """``value`` as JSON data: a record as an object of its fields, a tuple or list as a list (the form
    ``dataclasses.asdict`` gave when the records were dataclasses: the stored plans are unchanged)."""
    if hasattr(value, "_asdict"):
        return {name: _plain(item) for name, item in zip(value._fields, value)}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def _value(data: Mapping[str, Any]) -> ValueSpec:
    return ValueSpec(data["buffer"], data["offset"], tuple(data["shape"]), tuple(data["strides"]), data["dtype"])


def _step(data: Mapping[str, Any]) -> StepSpec:
    extern = data["extern"]
    return StepSpec(
        StepKind(data["kind"]), data["op_index"], tuple(data["operands"]), tuple(data["results"]), data["native"],
        tuple(PhaseSpec(**p) for p in data["phases"]),
        tuple(CpuSlot(SlotKind(s["kind"]), s["ref"]) for s in data["slots"]),
        None if extern is None else ExternSpec(extern["op_index"], tuple(_value(v) for v in extern["operands"]),
                                               tuple(_value(v) for v in extern["results"])),
        data["may_fail"], data["row_block"], data["reason"],
    )


def function_hash(fn: Function) -> str:
    return hashlib.sha256(print_function(fn, canonical=True).encode()).hexdigest()
