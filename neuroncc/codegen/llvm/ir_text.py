"""The LLVM IR text of an llvmlite module, as ``str(module)`` prints it, faster for the emitter's common
instructions.

A cold compile prints every phase module once, and llvmlite spends ~5 us per instruction doing it (a
``str.format`` per part, cached-string lookups, a metadata join even when there is none). Here the integer
and float arithmetic, branches, loads, stores, GEPs, phis and integer compares (97% of a transformer
block's kernel instructions) are printed with one f-string each; every other instruction, and everything
outside function bodies, is printed by llvmlite itself. The text is llvmlite's character for character
(``tests/codegen/test_ir_text.py`` compares them on the benchmark kernels and the generated matmuls), so the
LLVM modules, their hashes and the compile cache's keys do not change.

:func:`quick_names` speeds up the other end, building: the emitter's body functions name their values through
a scope that gives llvmlite's names with fewer Python calls (llvmlite's private ``NameScope``, subclassed: the
test compares the names with llvmlite's own).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from llvmlite.ir import instructions as llvm_instructions
from llvmlite.ir._utils import DuplicatedNameError, NameScope


def module_text(module: ir.Module) -> str:
    """``str(module)``, computed faster (see the module docstring)."""
    lines = [f'; ModuleID = "{module.name}"', f'target triple = "{module.triple}"',
             f'target datalayout = "{module.data_layout}"', ""]
    lines += [it.get_declaration() for it in module.get_identified_types().values()]
    for value in module.globals.values():
        lines.append(_function_text(value) if type(value) is ir.Function and value.blocks else str(value))
    lines += module._get_metadata_lines()
    return "\n".join(lines)


class _QuickNames(NameScope):
    """llvmlite's name scope registering the same names with fewer calls: every value the emitter builds is
    named here (an unnamed one ``.1``, ``.2``, ...), and llvmlite's ``register`` -> ``deduplicate`` ->
    ``is_used`` (twice) -> ``str.format`` chain was ~1 us of each of the ~3600 values of f2's kernels."""

    def register(self, name: str, deduplicate: bool = False) -> str:
        used = self._useset
        if name in used:
            if not deduplicate:
                raise DuplicatedNameError(name)
            counts, base = self._basenamemap, name
            while name in used:  # llvmlite's deduplicate: the base's next free number
                counts[base] += 1
                name = f"{base}.{counts[base]}"
        used.add(name)
        return name


def quick_names(function: ir.Function) -> ir.Function:
    """``function`` (just made, no blocks yet) naming its values through :class:`_QuickNames`: the same names
    as llvmlite's scope gives, so the same text."""
    scope = _QuickNames()
    scope.__dict__.update(function.scope.__dict__)  # its arguments' names are registered already
    function.scope = scope
    return function


def _function_text(function: ir.Function) -> str:
    buf: list[str] = []
    function.descr_prototype(buf)
    buf.append("{\n")
    for block in function.blocks:
        buf.append(f"{block._format_name()}:\n")
        for instruction in block.instructions:
            text = _FAST.get(type(instruction), _slow)(instruction)
            buf.append(f"  {text}\n")
    buf.append("}\n")
    return "".join(buf)


def _slow(instruction: Any) -> str:
    return str(instruction)


def _metadata(instruction: Any) -> str:
    """``_stringify_metadata(leading_comma=True)``: empty, or ", !kind !node" per entry."""
    return "".join(f", !{kind} {node.get_reference()}" for kind, node in instruction.metadata.items())


def _named(instruction: Any, text: str) -> str:
    # llvmlite strips the trailing space its descr leaves when an instruction has no metadata
    return f"{instruction.get_reference()} = {text}".rstrip()


def _plain(i: Any) -> str:  # add, mul, fadd, udiv, ...: "op flags type a, b"
    opname = " ".join([i.opname, *i.flags]) if i.flags else i.opname
    operands = ", ".join([op.get_reference() for op in i.operands])
    text = f"{opname} {i.type} {operands}{_metadata(i) if i.metadata else ''}"
    return text.rstrip() if isinstance(i.type, ir.VoidType) else _named(i, text)


def _terminator(i: Any) -> str:  # br
    operands = ", ".join([f"{op.type} {op.get_reference()}" for op in i.operands])
    return f"{i.opname} {operands}{_metadata(i) if i.metadata else ''}".rstrip()


def _compare(i: Any) -> str:
    a, c = i.operands
    flags = "".join(" " + flag for flag in i.flags)
    return _named(i, f"{i.opname}{flags} {i.op} {a.type} {a.get_reference()}, {c.get_reference()} "
                     f"{_metadata(i) if i.metadata else ''}")


def _load(i: Any) -> str:
    [pointer] = i.operands
    align = f", align {i.align}" if i.align is not None else ""
    return _named(i, f"load {i.type}, {pointer.type} {pointer.get_reference()}{align}"
                     f"{_metadata(i) if i.metadata else ''}")


def _store(i: Any) -> str:
    value, pointer = i.operands
    align = f", align {i.align}" if i.align is not None else ""
    return (f"store {value.type} {value.get_reference()}, {pointer.type} {pointer.get_reference()}{align}"
            f"{_metadata(i) if i.metadata else ''}").rstrip()


def _gep(i: Any) -> str:
    indices = ", ".join([f"{index.type} {index.get_reference()}" for index in i.indices])
    op = "getelementptr inbounds" if i.inbounds else "getelementptr"
    return _named(i, f"{op} {i.source_etype}, {i.pointer.type} {i.pointer.get_reference()}, {indices} "
                     f"{_metadata(i) if i.metadata else ''}")


def _phi(i: Any) -> str:
    incoming = ", ".join([f"[{v.get_reference()}, {b.get_reference()}]" for v, b in i.incomings])
    return _named(i, f"phi {' '.join(i.flags)} {i.type} {incoming} {_metadata(i) if i.metadata else ''}")


#: The instruction classes printed here (exact types: a subclass may print differently).
_FAST = {
    llvm_instructions.Instruction: _plain,
    llvm_instructions.Branch: _terminator,
    llvm_instructions.ConditionalBranch: _terminator,
    llvm_instructions.ICMPInstr: _compare,
    llvm_instructions.FCMPInstr: _compare,
    llvm_instructions.LoadInstr: _load,
    llvm_instructions.StoreInstr: _store,
    llvm_instructions.GEPInstr: _gep,
    llvm_instructions.PhiInstr: _phi,
}
