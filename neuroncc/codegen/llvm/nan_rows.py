"""Softmax's row max without its NaN bookkeeping, the row's NaNs found by its sum instead (AVX2:
``CpuTarget.finds_row_nans_by_the_sum``).

A float amax keeps, beside its running max, the largest magnitude bits it has seen (``reductions._extreme``): two
integer instructions per vector that say whether the row holds a NaN, whose max is then NaN. In a softmax-like row
loop (a max pass, then the sum of row-cached exp(x - max) carrying the previous row's delayed write) a NaN in the row
makes every exponential it enters NaN, so the row's sum is NaN too. So the max pass runs without the magnitudes
(:data:`AMAX_WITHOUT_NAN_FLAG`), and where the row's sum is NaN (a NaN in the row, or a sum that is NaN for other
reasons: -inf - -inf) the max pass runs once more as it always ran, with the magnitudes, and where that max differs
in bits from the flagless one the exp pass too, without the prefetches and the delayed write the first exp pass
carried: the same max, exponentials and sum, bit for bit. A row without NaN has the same max either way (the same
vmaxps), so the same everything: a wholly -inf row (fully masked attention) runs its exp pass once
(``CpuTarget.reruns_the_exp_pass_only_for_another_max``, session 28; before it both passes ran twice).

May import: the code generator's modules below ``emit``.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.kernel_plan import ReduceStage, RowLoop
from neuroncc.codegen.llvm.reductions import COMBINERS

AMAX = COMBINERS["amax"]


def _max_only(b, dtype, accs, x, pos):
    updated = AMAX.update(b, dtype, accs, x, pos)
    return [updated[0], accs[1]] if dtype.is_float else updated


#: amax without the magnitude bits beside its running max (they stay at their start: no NaN seen)
AMAX_WITHOUT_NAN_FLAG = replace(AMAX, update=_max_only)


def finds_nans_by_the_sum(em: Any, phase: RowLoop) -> bool:
    """Whether ``phase`` is a row loop whose float max pass (stage 0) the sum of exponentials (stage 1, the carrier of
    a delayed write) follows, and the target finds its rows' NaNs by that sum."""
    if not em.target.finds_row_nans_by_the_sum or em._carrier != 1 or em._delayed is None:
        return False
    first, carrier = phase.stages[0], phase.stages[1]
    return isinstance(first, ReduceStage) and COMBINERS.get(first.op.name) is AMAX \
        and first.op.operands[0].type.dtype.is_float and isinstance(carrier, ReduceStage) \
        and COMBINERS[carrier.op.name].float_sum and not COMBINERS[carrier.op.name].two_pass


@contextlib.contextmanager
def max_without_nan_flag(em: Any):
    """Reductions emitted inside take amax as :data:`AMAX_WITHOUT_NAN_FLAG`."""
    saved, em.flagless_amax = em.flagless_amax, True
    try:
        yield
    finally:
        em.flagless_amax = saved


def redo_nan_row(em: Any, phase: RowLoop, outer: list[Any], depth: int, emit_stage) -> None:
    """Where the row's sum (stage 1's result) is NaN: stage 0 once more as it is emitted without this module, and
    where its max differs in bits from the flagless one (a NaN in the row the flagless max did not take), stage 1
    once more too, both without the carried prefetches and delayed write (``emit_stage(number)`` emits one).

    A row whose sum is NaN without a NaN in it (all -inf: fully masked attention rows; +inf in it) has the same max
    both ways, so the same exponentials and sum: its exp pass is not run again (session 28: such a row cost ~2.4x a
    plain row with both passes run twice)."""
    carrier, first = phase.stages[1], phase.stages[0]
    index = list(outer[:depth]) + [0] * (len(carrier.shape) - depth)
    max_index = list(outer[:depth]) + [0] * (len(first.shape) - depth)
    total = em.load(carrier.target, index)
    with em.fresh_values(), em.b.if_then(em.b.fcmp_unordered("uno", total, total), likely=False):
        saved = em._ahead, em._after_group
        em._ahead, em._after_group = (), None
        try:
            if not em.target.reruns_the_exp_pass_only_for_another_max:
                for number in (0, 1):
                    em._stage_number, em._filled = number, set()
                    emit_stage(number)
                return

            def redo() -> None:
                flagless = _bits(em.b, em.load(first.target, max_index))
                em._stage_number, em._filled = 0, set()
                emit_stage(0)
                flagged = _bits(em.b, em.load(first.target, max_index))
                with em.b.if_then(em.b.icmp_unsigned("!=", flagged, flagless), likely=False):
                    em._stage_number, em._filled = 1, set()
                    emit_stage(1)

            _outlined(em, redo) if em.target.calls_the_nan_row_redo_as_a_function else redo()
        finally:
            em._ahead, em._after_group = saved


def _bits(b, value):
    """A float's bits as an integer of its width (NaN payloads compared too)."""
    return b.bitcast(value, ir.IntType(64 if isinstance(value.type, ir.DoubleType) else 32))

def _outlined(em: Any, body) -> None:
    """``body()``'s code emitted into a function of its own and called here (``CpuTarget.calls_the_nan_row_redo_as_a_
    function``): ``noinline``, its arguments the values of the calling function its code uses (found after it is
    emitted; the caller's stack slots only it uses move into it), called with ``preserve_allcc`` (it saves every
    register it uses but r11: the call clobbers no vector register). So the caller's register allocation does not
    see its loops: inline, the redo's loops moved LLVM's allocation of softmax's hot exp loop (session 28
    softmax28); called so, the hot loop's instructions are those of the code without the redo but for the names of
    its registers (session 28 smredo28).

    The function is built without the ``vzeroupper`` tuning (its ``target-features``: the target's and
    ``-vzeroupper``): LLVM's x86 backend puts a ``vzeroupper`` before every return of a function that used ymm
    registers, also after a ``preserve_allcc`` function's epilogue has restored the caller's ymm registers, whose
    upper halves it then zeroes: lanes 4-7 of every vector the caller kept in a register across the call (the exp
    loop's constants) went wrong, so the rows after a row whose sum was NaN got wrong bits (session 28 smredo28's
    outlined form; found by session 29 smexp29). The caller's own return keeps its ``vzeroupper``."""
    caller = em.b
    outer = caller.function
    function = ir.Function(em.module, ir.FunctionType(ir.VoidType(), []),
                           em.module.get_unique_name(f"{outer.name}.nan_row"))
    function.linkage = "internal"
    function.calling_convention = "preserve_allcc"
    for attribute in outer.attributes:
        set.add(function.attributes, attribute)  # (string attributes: the set underneath, as ``emit`` adds them)
    function.attributes.add("noinline")
    features = ",".join(part for part in (em.target.machine_features, "-vzeroupper") if part)
    set.add(function.attributes, f'"target-features"="{features}"')  # (see above: no vzeroupper before its ret)
    entry = function.append_basic_block("entry")
    em.b = ir.IRBuilder(function.append_basic_block("start"))
    try:
        body()
        em.b.ret_void()
    finally:
        em.b = caller
    used = _outside_values(function)
    kept = _operands_used_in(outer)
    slots = [value for value in used if isinstance(value, ir.AllocaInstr) and id(value) not in kept]
    for slot in slots:  # (the caller's stack slots only the redo uses: its accumulators)
        slot.parent.instructions.remove(slot)
        slot.parent = entry
        slot.name = "slot"  # (a name of this function's scope)
        entry.instructions.append(slot)
    ir.IRBuilder(entry).branch(function.blocks[1])
    used = [value for value in used if not any(value is slot for slot in slots)]
    function.ftype = ir.FunctionType(ir.VoidType(), [value.type for value in used])
    function.type = function.ftype.as_pointer()
    function.args = tuple(ir.Argument(function, value.type) for value in used)
    replaced = {id(value): argument for value, argument in zip(used, function.args)}
    for value, argument in zip(used, function.args):
        if isinstance(value, ir.Argument):  # (the caller's buffer arguments keep their noalias and alignment)
            for attribute in value.attributes:
                argument.add_attribute(attribute)
            argument.attributes.align = value.attributes.align
    for block in function.blocks:
        for instruction in block.instructions:
            _replace_operands(instruction, replaced)
    caller.call(function, used)


def _operands(instruction: Any) -> list[Any]:
    """The values ``instruction`` uses (a GEP keeps its own beside its operands)."""
    if isinstance(instruction, ir.PhiInstr):
        return [value for value, _ in instruction.incomings]
    if isinstance(instruction, ir.GEPInstr):
        return [instruction.pointer, *instruction.indices]
    return list(instruction.operands)


def _replace_operands(instruction: Any, replaced: dict[int, Any]) -> None:
    def new(value):
        return replaced.get(id(value), value)

    if isinstance(instruction, ir.PhiInstr):
        instruction.incomings = [(new(value), block) for value, block in instruction.incomings]
    elif isinstance(instruction, ir.GEPInstr):
        instruction.pointer, instruction.indices = new(instruction.pointer), [new(i) for i in instruction.indices]
    assert not isinstance(instruction, (ir.ExtractValue, ir.InsertValue))
    instruction.operands = type(instruction.operands)(new(value) for value in instruction.operands)
    instruction._clear_string_cache()


def _operands_used_in(function: ir.Function) -> set[int]:
    return {id(value) for block in function.blocks for instruction in block.instructions
            for value in _operands(instruction)}


def _outside_values(function: ir.Function) -> list[ir.Value]:
    """The arguments and instructions of other functions that ``function``'s instructions use, in first use order."""
    used: dict[int, ir.Value] = {}
    for block in function.blocks:
        for instruction in block.instructions:
            for value in _operands(instruction):
                outside = isinstance(value, ir.Argument) and value.parent is not function or \
                    isinstance(value, ir.Instruction) and value.parent.parent is not function
                if outside:
                    used.setdefault(id(value), value)
    return list(used.values())
