"""Shrinks a failing fuzz program and writes it out as a ready regression test.

Shrinking is greedy and deterministic: try a simpler candidate, keep it when it still fails the same way
(:func:`same_failure`), repeat until nothing simpler fails or the budget of checks is spent. Candidates, in
order: keep one output; delete a statement (its uses read one of its operands of the same type, or a fresh
input of its type); halve or unit an input dimension; drop the planted NaN/inf values; check forward only.
Every candidate is re-typed on meta tensors first, so invalid ones cost nothing.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from neuroncc.testing.fuzz import Finding, Input, Program, Stmt, check_program, infer_spec, rename_operand
from neuroncc.testing.fuzz_ops import OPS_BY_NAME, Spec

_MAX_NUMEL = 1 << 16


def same_failure(a: Finding, b: Finding) -> bool:
    """Both mismatches, or both crashes with the same exception type."""
    if a.status != b.status:
        return False
    return a.status != "crash" or a.detail.split(":", 1)[0] == b.detail.split(":", 1)[0]


def retype(program: Program) -> Program | None:
    """``program`` with every statement's type re-inferred; None if torch rejects a statement."""
    values = {i.name: i.spec for i in program.inputs}
    stmts = []
    for stmt in program.stmts:
        spec = infer_spec(stmt.op, dict(stmt.fields), values, _MAX_NUMEL)
        if spec is None:
            return None
        stmts.append(replace(stmt, spec=spec))
        values[stmt.name] = spec
    return replace(program, stmts=tuple(stmts))


def prune(program: Program) -> Program:
    """Drop statements no output depends on and inputs nothing reads."""
    live = set(program.outputs)
    kept: list[Stmt] = []
    for stmt in reversed(program.stmts):
        if stmt.name in live:
            kept.append(stmt)
            live.update(stmt.operands())
    randoms = tuple(r for r in program.randoms if r.name in live)
    live.update(r.source for r in randoms)
    inputs = tuple(i for i in program.inputs if i.name in live)
    return replace(program, inputs=inputs, stmts=tuple(reversed(kept)), randoms=randoms)


def _rename_uses(program: Program, old: str, new: str) -> Program:
    def fix(stmt: Stmt) -> Stmt:
        keys = OPS_BY_NAME[stmt.op].operands
        fields = tuple((k, new if k in keys and v == old else v) for k, v in stmt.fields)
        return replace(stmt, fields=fields)

    return replace(program, stmts=tuple(fix(s) for s in program.stmts if s.name != old),
                   outputs=tuple(dict.fromkeys(new if o == old else o for o in program.outputs)))


def _fresh_name(program: Program) -> str:
    taken = {i.name for i in program.inputs}
    return next(f"x{n}" for n in range(len(taken) + 1) if f"x{n}" not in taken)


def _candidates(program: Program, backward: bool) -> Iterator[tuple[Program, bool]]:
    if len(program.outputs) > 1:
        for output in program.outputs:
            yield replace(program, outputs=(output,)), backward
    for position, random_stmt in enumerate(program.randoms):  # the failure without a random statement?
        derandomized = replace(program, randoms=program.randoms[:position] + program.randoms[position + 1:])
        yield replace(derandomized, stmts=tuple(rename_operand(s, random_stmt.name, random_stmt.source)
                                                for s in program.stmts)), backward
    values = {i.name: i.spec for i in program.inputs} | {s.name: s.spec for s in program.stmts}
    for stmt in reversed(program.stmts):
        same_type = [o for o in dict.fromkeys(stmt.operands()) if values[o] == stmt.spec]
        for operand in same_type:
            yield _rename_uses(program, stmt.name, operand), backward
        fresh = _fresh_name(program)
        with_input = replace(program, inputs=program.inputs + (Input(fresh, replace(stmt.spec, high=None)),))
        if stmt.spec.dtype == "int64":
            with_input = replace(with_input, inputs=with_input.inputs[:-1] + (Input(fresh, Spec(stmt.spec.shape, "int64", 5)),))
        yield _rename_uses(with_input, stmt.name, fresh), backward
    for position, item in enumerate(program.inputs):
        for dim, size in enumerate(item.spec.shape):
            for smaller in dict.fromkeys((1, size // 2)):
                if 1 <= smaller < size:
                    shape = item.spec.shape[:dim] + (smaller,) + item.spec.shape[dim + 1:]
                    inputs = list(program.inputs)
                    inputs[position] = Input(item.name, replace(item.spec, shape=shape))
                    yield replace(program, inputs=tuple(inputs)), backward
    if program.specials:
        yield replace(program, specials=False), backward
    if backward:
        yield program, False


def shrink(program: Program, finding: Finding, *, backend: str = "neuron", backward: bool = True,
           budget: int = 150, check: Callable[[Program, str, bool], Finding] | None = None) -> tuple[Program, bool]:
    """The smallest variant of ``program`` found that fails like ``finding``; also whether it needs backward."""
    def default_check(candidate: Program, target: str, with_backward: bool) -> Finding:
        return check_program(candidate, (target,), backend=backend, backward=with_backward)[0]

    check = check or default_check
    checks = 0
    improved = True
    while improved and checks < budget:
        improved = False
        for candidate, with_backward in _candidates(program, backward):
            candidate = retype(prune(candidate)) if candidate.stmts else None
            if candidate is None or not candidate.stmts:
                continue
            checks += 1
            if same_failure(check(candidate, finding.target, with_backward), finding):
                program, backward, improved = candidate, with_backward, True
                break
            if checks >= budget:
                break
    return program, backward


def regression_test_source(program: Program, finding: Finding, *, backward: bool, backend: str, origin: str,
                           test_name: str) -> str:
    """A self-contained pytest file that fails while the bug is there."""
    inputs = ", ".join(f"Spec({i.spec.shape!r}, {i.spec.dtype!r}, {i.spec.high!r})" for i in program.inputs)
    detail = finding.detail.replace('"""', "'''")
    return (
        f'"""Fuzzer regression: {finding.status} on target {finding.target} ({finding.phase}).\n\n'
        f"{textwrap.fill(detail, 100)}\n\nFound by {origin}.\n\"\"\"\n\n"
        "import torch  # noqa: F401 (used by the program)\nimport torch.nn.functional as F  # noqa: F401\n\n"
        "from neuroncc.testing.fuzz import Spec, check_regression\n\n"
        f"INPUTS = [{inputs}]\n\n\n"
        f"{program.source()}\n\n"
        f"def {test_name}():\n"
        f"    check_regression(program, INPUTS, data_seed={program.data_seed}, specials={program.specials}, "
        f"target={finding.target!r}, backward={backward}, backend={backend!r}"
        f"{f', draws={len(program.randoms)}' if program.randoms else ''})\n"
    )


def write_regression(directory: Path, program: Program, finding: Finding, *, backward: bool, backend: str,
                     seed: int, index: int, signature: str | None = None) -> Path:
    """Write the test; ``signature`` (target, kind of failure, ops) names the file so duplicates overwrite."""
    target = finding.target.replace("-", "_")
    name = f"test_fuzz_{target}_{finding.status}_{signature}" if signature else f"test_fuzz_s{seed}_p{index}_{target}"
    origin = f"`python tools/fuzz.py --seed {seed}` (program {index}), shrunk"
    path = Path(directory) / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(regression_test_source(program, finding, backward=backward, backend=backend, origin=origin,
                                           test_name=name))
    return path
