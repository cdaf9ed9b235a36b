"""The pass contract and the pass manager.

A pass is a small frozen dataclass: ``name`` (a ClassVar) is its command-line name and its fields are its
options, so ``tile{target=trn2 tile=[128,512]}`` and ``Tile(target="trn2", tile=(128, 512))`` are the same
thing. ``apply(fn, ctx)`` returns a new :class:`Function` (graphs are immutable) and must leave the IR valid;
with ``ctx.verify_each`` the manager checks that after every pass.

:class:`Pipeline` runs passes in order and does the instrumentation a pass developer asks for: verify after
each pass, print the IR after some or all passes (MLIR-style headers), write every stage to a dump directory.
Nothing here reads the environment: the CLI and the compile driver fill in a :class:`PassContext`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

from neuroncc.errors import VerifyError
from neuroncc.ir import Function, print_function, verify


@dataclass(frozen=True)
class PassContext:
    """How a pipeline runs: checks and IR dumps. Passes read nothing else from their surroundings."""

    verify_each: bool = False  # run the verifier after every pass (tests and ``neuroncc opt``)
    print_after_all: bool = False  # print the IR after every pass to ``ir_stream``
    print_after: frozenset[str] = frozenset()  # print the IR after these passes (by command-line name)
    ir_stream: TextIO | None = None  # where printed IR goes (stderr for the CLI)
    dump_dir: Path | None = None  # write each stage's IR to NN-<pass>.nir in this directory
    # called after each pass with ("NN-<pass>", the IR, seconds the pass took): the driver records stages
    on_stage: Callable[[str, Function, float], None] | None = None


@dataclass(frozen=True)
class Pass:
    """Base of every pass. Subclasses are frozen dataclasses with a ``name`` ClassVar and option fields."""

    name: ClassVar[str] = ""

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        raise NotImplementedError(f"pass {type(self).__name__} does not implement apply()")

    def __str__(self) -> str:
        """The pass as it is written in a pipeline string; options at their default are left out."""
        changed = [
            f"{f.name}={format_option(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if f.default is dataclasses.MISSING or getattr(self, f.name) != f.default
        ]
        return f"{self.name}{{{' '.join(changed)}}}" if changed else self.name


def format_option(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (tuple, list, frozenset)):
        return "[" + ",".join(format_option(v) for v in value) + "]"
    return str(value)


def dump_header(pass_name: str) -> str:
    """The MLIR-style banner printed before each IR dump."""
    return f"// -----// IR Dump After {pass_name} //----- //"


@dataclass(frozen=True)
class Pipeline:
    """An ordered sequence of passes. ``str(pipeline)`` is a pipeline string that parses back to it."""

    passes: tuple[Pass, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        return ",".join(str(p) for p in self.passes)

    def run(self, fn: Function, ctx: PassContext | None = None) -> Function:
        ctx = ctx or PassContext()
        if ctx.dump_dir is not None:
            ctx.dump_dir.mkdir(parents=True, exist_ok=True)
            (ctx.dump_dir / "00-input.nir").write_text(print_function(fn), encoding="utf-8")
        for index, pass_ in enumerate(self.passes, start=1):
            start = time.perf_counter()
            fn = pass_.apply(fn, ctx)
            seconds = time.perf_counter() - start
            if not isinstance(fn, Function):
                raise TypeError(f"pass '{pass_.name}' returned {type(fn).__name__}, not a Function")
            if ctx.verify_each:
                try:
                    verify(fn)
                except VerifyError as exc:
                    raise VerifyError(f"IR is invalid after pass '{pass_}': {exc}") from None
            self._report(pass_, index, fn, ctx)
            if ctx.on_stage is not None:
                ctx.on_stage(f"{index:02d}-{pass_.name}", fn, seconds)
        return fn

    @staticmethod
    def _report(pass_: Pass, index: int, fn: Function, ctx: PassContext) -> None:
        if ctx.ir_stream is not None and (ctx.print_after_all or pass_.name in ctx.print_after):
            ctx.ir_stream.write(dump_header(pass_.name) + "\n" + print_function(fn) + "\n")
        if ctx.dump_dir is not None:
            (ctx.dump_dir / f"{index:02d}-{pass_.name}.nir").write_text(print_function(fn), encoding="utf-8")
