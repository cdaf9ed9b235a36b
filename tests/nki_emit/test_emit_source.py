"""The emitted module: readable NKI 0.2+ code, deterministic, and clear refusals."""

from __future__ import annotations

import re

import pytest

from emit_helpers import F32, graph, lower
from neuroncc.codegen.nki import emit_program
from neuroncc.errors import CodegenError, UnsupportedOpError
from neuroncc.executors.nki_sim.executable import NkiUnsupportedError, load_module, nki_source
from neuroncc.ir import DType
from neuroncc.testing.models import layer_norm_graph, softmax_graph


def test_softmax_is_one_row_loop_with_a_fused_exp_and_row_sum():
    source = nki_source(softmax_graph(300, 1024))  # 4 KiB rows: one row per partition
    assert source.count("@nki.jit") == 1 and "def fused_0_softmax(x):" in source
    assert "for i in nl.affine_range(3):" in source and "rows = min(128, 300 - i * 128)" in source
    assert re.search(r"nisa\.tensor_reduce\(dst=\w+, op=nl\.maximum, data=\w+, axis=\(1,\), negate=True", source)
    assert re.search(r"nisa\.activation\(dst=\w+, op=nl\.exp, data=\w+, bias=\w+, reduce_op=nl\.add, "
                     r"reduce_res=\w+\)", source)
    assert "nl.shared_hbm" in source and "return (out,)" in source


def test_layernorm_hoists_its_weights_and_fuses_the_affine_steps():
    source = nki_source(layer_norm_graph(256, 1024))  # 4 KiB rows: one row per partition
    loop = source.index("for i in nl.affine_range(2):")
    assert source.index("nl.broadcast_to(weight_tile") < loop  # loaded once, before the row loop
    assert source.count("nisa.scalar_tensor_tensor(") == 2
    assert "op=nl.square" in source  # the variance pass: square(x - mean) with a fused row sum


def test_matmul_transposes_the_stationary_operand_on_tensor_engine():
    b, (x, w) = graph("linear", ((256, 128), F32), ((64, 128), F32))
    source = nki_source(b.build([b.op("relu", b.op("mm", x, w, transpose_b=True))]))
    assert "nisa.nc_matmul(dst=partial" in source and source.count("nisa.nc_transpose(") == 2
    assert "nl.psum" in source and "op=nl.relu" in source


def test_emission_is_deterministic_and_the_module_loads():
    fn = lower(layer_norm_graph(64, 32))
    first, second = emit_program(fn), emit_program(fn)
    assert first.source == second.source and first.plan == second.plan
    module = load_module(first.source)
    assert callable(module.fused_0_layer_norm)


def test_unsupported_ops_are_refused_naming_the_op():
    b, (x, y) = graph("angles", ((4, 4), F32), ((4, 4), F32))
    fn = b.build([b.op("atan2", x, y)])
    with pytest.raises(CodegenError, match="op 'atan2' has no NKI emission rule"):
        emit_program(lower(fn))
    with pytest.raises(NkiUnsupportedError, match="cannot compile func @angles.*'atan2'") as caught:
        nki_source(fn)
    assert isinstance(caught.value, UnsupportedOpError)


@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift"])
def test_shifts_are_refused_naming_the_op(name):
    # PyTorch defines amounts < 0 or >= the width (0, or the sign fill); NKI's left_shift/right_shift do not say
    b, (x, y) = graph("shifts", ((4, 4), DType.i32), ((4, 4), DType.i32))
    with pytest.raises(NkiUnsupportedError, match=f"'{name}'"):
        nki_source(b.build([b.op(name, x, y)]))
