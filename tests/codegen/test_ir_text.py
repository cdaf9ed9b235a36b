"""``ir_text.module_text`` prints llvmlite modules exactly as ``str(module)`` does (the kernel modules' text is
the compile cache's and the hash tests' input), ``quick_names`` names values as llvmlite does, and the emitter's
index arithmetic builds each term once."""

from __future__ import annotations

import pytest
from llvmlite import ir

from neuroncc.codegen.llvm import emit
from neuroncc.codegen.llvm.affine import Affine, Var
from neuroncc.codegen.llvm.indexing import IndexArithmetic
from neuroncc.codegen.llvm.ir_text import module_text, quick_names
from neuroncc.codegen.llvm.kernel_names import name_by_content
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import fuse_whole_function, wrap_remaining_ops
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import default_pipeline, run_pipeline
from neuroncc.testing.models import layer_norm_graph, softmax_graph

F32, I64 = ir.FloatType(), ir.IntType(64)


def _every_fast_kind() -> ir.Module:
    """One instruction of each kind ``ir_text`` prints itself, with and without flags, alignment and metadata,
    and a few it leaves to llvmlite."""
    module = ir.Module(name="kinds")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), I64, ir.VectorType(F32, 8)]), "f")
    ptr, n, vec = fn.args
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("body"), fn.append_basic_block("x y")
    b = ir.IRBuilder(entry)
    b.branch(body)
    b.position_at_end(body)
    i = b.phi(I64, name="i")
    i.add_incoming(ir.Constant(I64, 0), entry)
    fast = b.phi(F32, flags=("fast",))
    fast.add_incoming(ir.Constant(F32, 1.5), entry)
    scaled = b.mul(i, ir.Constant(I64, 3), flags=("nsw", "nuw"))
    total = b.add(scaled, n)
    q = b.udiv(total, ir.Constant(I64, 4), flags=("exact",))
    address = b.gep(ptr, [q], inbounds=True, source_etype=F32)
    plain_address = b.gep(ptr, [q, ir.Constant(I64, 1)], source_etype=ir.ArrayType(F32, 4))
    x = b.load(address, typ=F32)
    y = b.load(plain_address, typ=ir.VectorType(F32, 8))
    y.align = 32
    y.set_metadata("nontemporal", module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
    z = b.fadd(x, fast, flags=("fast",))
    b.fmul(y, vec)
    b.fcmp_ordered("<", z, x)
    b.fcmp_unordered("!=", z, x, flags=("nnan",))
    store = b.store(z, address)
    store.align = 4
    nt = b.store(y, plain_address)
    nt.set_metadata("nontemporal", module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
    b.sitofp(q, F32)
    b.select(b.icmp_signed("<", i, n), i, n)
    following = b.add(i, ir.Constant(I64, 1), flags=("nsw",))
    i.add_incoming(following, body)
    fast.add_incoming(z, body)
    branch = b.cbranch(b.icmp_unsigned(">=", following, n), done, body)
    branch.set_weights([1, 99])
    b.position_at_end(done)
    b.fence("seq_cst")
    b.ret_void()
    ir.Function(module, ir.FunctionType(F32, [F32]), "llvm.fabs.f32")
    return module


def test_every_fast_kind_prints_as_llvmlite_prints_it():
    module = _every_fast_kind()
    assert module_text(module) == str(module)


def _cpu_functions():
    return {"softmax": softmax_graph(64, 96), "layernorm": layer_norm_graph(64, 96)}


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
@pytest.mark.parametrize("how", ["whole", "pipeline"])
def test_kernel_modules_print_as_llvmlite_prints_them(monkeypatch, name, how):
    modules: list[ir.Module] = []
    emitted = emit.KernelEmitter.emit

    def keep(self):
        phases = emitted(self)
        modules.extend(module for _, module in phases)
        return phases

    monkeypatch.setattr(emit.KernelEmitter, "emit", keep)
    fn = _cpu_functions()[name]
    lowered = fuse_whole_function(fn) if how == "whole" else run_pipeline(default_pipeline("cpu"), fn, PassContext())
    _, texts = plan_launch(wrap_remaining_ops(lowered), "cpu", "features")
    # (the planner names each module's functions by its text afterwards: kernel_names.py)
    assert modules and texts[-len(modules):] == [name_by_content(str(module), module.name)[0] for module in modules]


class _Indices(IndexArithmetic):
    def __init__(self, b: ir.IRBuilder):
        self.b, self.memo, self._constants = b, [{}], {}
        self._reset_indexing()


def test_index_terms_and_partial_sums_are_built_once():
    module = ir.Module(name="terms")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    indices = _Indices(b)
    a, c = (Var(arg, serial) for serial, arg in enumerate(fn.args, 1))
    whole = indices.materialize(Affine(((a, 512), (c, 16)), 7))  # a*512, c*16, their sum, + 7
    assert indices.materialize(Affine(((a, 512), (c, 16)))) is whole.operands[0]
    assert indices.materialize(Affine(((a, 512),))) is whole.operands[0].operands[0]
    indices.materialize(Affine(((a, 512), (c, 16)), 8))  # one more add
    assert [i.opname for i in b.block.instructions] == ["mul", "mul", "add", "add", "add"]


def _named_values(quick: bool) -> ir.Module:
    """Blocks and values named as the emitter and llvmlite's own helpers name them: unnamed (``.1``, ...),
    repeated names, and a given name that a deduplicated one took already."""
    module = ir.Module(name="names")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64]), "f")
    if quick:
        quick_names(fn)
    a, n = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for _ in range(3):
        loop = fn.append_basic_block("loop")
        b.branch(loop)
        b.position_at_end(loop)
        x = b.add(b.mul(a, n), n, name="x")
        b.add(x, b.add(x, ir.Constant(I64, 1)), name="x.1")
        b.add(x, n, name="")
    with b.if_then(b.icmp_signed("<", a, n)):
        b.add(a, n)
    b.ret_void()
    return module


def test_quick_names_name_values_as_llvmlite_does():
    assert str(_named_values(quick=True)) == str(_named_values(quick=False))
    scope = quick_names(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "g")).scope
    scope.register("x")
    with pytest.raises(NameError):  # a name given twice without deduplication, as llvmlite raises
        scope.register("x")


def test_the_emitter_names_its_values_through_quick_names_and_keys_forms_by_their_fields(monkeypatch):
    """The emitter's per-value costs that its output does not see: its body functions name values with
    ``quick_names``' scope, and its memo keys an index form by its terms and constant (hashed in C), not by
    the form (a Python-level dataclass hash per memo scope looked in)."""
    emitters: list[emit.KernelEmitter] = []
    keys: set[tuple] = set()
    emitted, materialize = emit.KernelEmitter.emit, IndexArithmetic.materialize

    def keep(self):
        emitters.append(self)
        return emitted(self)

    def spy(self, form):
        value = materialize(self, form)
        keys.update(key for scope in self.memo for key in scope if isinstance(key, tuple) and key[0] == "affine")
        return value

    monkeypatch.setattr(emit.KernelEmitter, "emit", keep)
    monkeypatch.setattr(IndexArithmetic, "materialize", spy)
    lowered = run_pipeline(default_pipeline("cpu"), layer_norm_graph(64, 96), PassContext())
    plan_launch(wrap_remaining_ops(lowered), "cpu", "features")
    assert emitters and keys
    for emitter in emitters:
        body = next(f for f in emitter.module.functions if f.name.endswith(".body"))
        assert type(body.scope).__name__ == "_QuickNames"
    assert not any(isinstance(part, Affine) for key in keys for part in key)
