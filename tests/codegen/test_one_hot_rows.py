"""A map stage's one-hot compare along its rows (``one_hot_rows.py``): each row's loop runs with it false and the
element at the row's target is computed again after the loop; the results are the unsplit code's bits."""

from __future__ import annotations

import re

import numpy as np
import pytest

from neuroncc.codegen.llvm import jit, one_hot_rows
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.kernel_plan import Computed, MapStage
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType

from codegen_helpers import run_both

AVX2 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f,-avx512vl,-avx512bw,-avx512dq"
AVX512 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd"
TARGETS = {"zen3": CpuTarget("znver3", AVX2), "zen4": CpuTarget("znver4", AVX512 + ",+avx512bf16")}


def _c(b: Builder, value: float):
    return b.op("full", shape=(), dtype=DType.f32, value=value)


def _gradient(rows: int, classes: int, label_dtype: DType = DType.i64):
    """Cross-entropy's gradient as the backward graph computes it: where(iota == t, -1, 0) * s - exp(x - m) * c,
    with s and c per row (t of -100 ignored as torch does)."""
    b = Builder("gradient")
    x = b.param(TensorType((rows, classes), DType.f32), "x")
    t = b.param(TensorType((rows,), label_dtype), "t")
    s = b.param(TensorType((rows, 1), DType.f32), "s")
    m = b.param(TensorType((rows, 1), DType.f32), "m")
    t = b.op("reshape", t, shape=(rows, 1))
    kept = b.op("where", b.op("ne", t, b.op("full", shape=(), dtype=label_dtype, value=-100)), t,
                b.op("full", shape=(), dtype=label_dtype, value=0))
    iota = b.op("reshape", b.op("iota", length=classes, dtype=label_dtype), shape=(1, classes))
    hot = b.op("mul", b.op("where", b.op("eq", iota, kept), _c(b, -1.0), _c(b, 0.0)), s)
    return b.build([b.op("sub", hot, b.op("mul", b.op("exp", b.op("sub", x, m)), b.op("mul", s, _c(b, 0.5))))])


def _labels(rows: int, classes: int) -> np.ndarray:
    edges = [0, classes - 1, 16383, 16384, 16385, -100, classes, -1, -5, 2**40, 2**31 + 3, 7]
    rng = np.random.default_rng(0)
    return np.array(edges + list(rng.integers(0, classes, rows - len(edges))), np.int64)[:rows]


@pytest.mark.parametrize("rows, classes", [(24, 20000), (16, 1000), (13, 33)])
def test_rows_split_at_their_target_give_the_unsplit_bits(rows, classes, monkeypatch):
    # 20000 classes: rows in blocks of 16384 (the target in either block, or at the edges of one)
    fn = fuse_whole_function(_gradient(rows, classes))
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((rows, classes)) * 3).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    inputs = [x, _labels(rows, classes), rng.uniform(0.5, 2, (rows, 1)).astype(np.float32),
              np.full((rows, 1), 4.0, np.float32)]
    _, got = run_both(fn, inputs)
    monkeypatch.setattr(one_hot_rows, "find_one_hot", lambda *args, **kwargs: None)
    monkeypatch.setattr("neuroncc.codegen.llvm.map_stages.find_one_hot", lambda *args, **kwargs: None)
    unsplit = build_cpu_executable(fn, {"threads": 2})(*inputs)
    np.testing.assert_array_equal(got[0].view(np.int32), unsplit[0].view(np.int32))
    picked = [(r, int(t)) for r, t in enumerate(inputs[1]) if 0 <= t < classes]
    assert all(got[0][r, t] < 0 for r, t in picked[1:])  # -s - exp(...) * c: the correction was stored


def test_int32_labels_and_a_one_hot_stored_as_bool():
    rows, classes = 12, 300
    b = Builder("bool_one_hot")
    t = b.param(TensorType((rows, 1), DType.i32), "t")
    hot = b.op("eq", b.op("iota", length=classes, dtype=DType.i32), t)
    fn = fuse_whole_function(b.build([hot, b.op("where", hot, _c(b, 2.0), _c(b, 1.0))]))
    labels = np.array([0, 299, 300, -1, 150, 5, 2**31 - 1, -(2**31), 1, 2, 3, 298], np.int32).reshape(-1, 1)
    _, got = run_both(fn, [labels])
    np.testing.assert_array_equal(got[0], np.arange(classes) == labels)


def _split_of(fn) -> one_hot_rows.OneHot | None:
    layouts = [Layout.of(k, p.type) for k, p in enumerate(fn.params)]
    outputs = [Layout.of(len(layouts) + k, v.type) for k, v in enumerate(fn.outputs)]
    plan = plan_kernel(fn, layouts, outputs)
    stage = next(s for phase in plan.phases for s in phase.stages if isinstance(s, MapStage))

    def inline(value):
        access = plan.access[value]
        return access.op if isinstance(access, Computed) else None

    return one_hot_rows.find_one_hot(plan, stage, [(0, None), (0, stage.shape[-1])], inline, keeps_rows=False)


def test_only_a_one_hot_read_elementwise_at_the_rows_index_is_split():
    assert _split_of(_gradient(8, 100)) is not None
    b = Builder("two")  # two one-hots: not split
    t = b.param(TensorType((8, 1), DType.i64), "t")
    u = b.param(TensorType((8, 1), DType.i64), "u")
    iota = b.op("iota", length=100, dtype=DType.i64)
    assert _split_of(b.build([b.op("logical_or", b.op("eq", iota, t), b.op("eq", iota, u))])) is None
    b = Builder("moved")  # the one-hot read at another index too (flipped along the row): not split
    t = b.param(TensorType((8, 1), DType.i64), "t")
    hot = b.op("eq", b.op("iota", length=100, dtype=DType.i64), t)
    assert _split_of(b.build([b.op("logical_and", hot, b.op("flip", hot, dims=(1,)))])) is None
    b = Builder("shifted")  # an iota from 1: not a position
    t = b.param(TensorType((8, 1), DType.i64), "t")
    assert _split_of(b.build([b.op("eq", b.op("iota", length=100, start=1, dtype=DType.i64), t)])) is None
    b = Builder("varying")  # a target varying along the row: not a one-hot
    t = b.param(TensorType((8, 100), DType.i64), "t")
    assert _split_of(b.build([b.op("eq", b.op("iota", length=100, dtype=DType.i64), t)])) is None


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_the_rows_loop_has_no_compare(name):
    fn = _gradient(16, 1000)
    layouts = [Layout.of(k, p.type) for k, p in enumerate(fn.params)]
    outputs = [Layout.of(len(layouts) + k, v.type) for k, v in enumerate(fn.outputs)]
    texts, _ = emit_kernel(plan_kernel(fn, layouts, outputs), "k", TARGETS[name])
    body = jit.assembly(texts, TARGETS[name]).split("k_p0:")[1].split(".Lfunc_end")[0]
    register = "zmm" if TARGETS[name].vector_bits == 512 else "ymm"
    assert re.search(rf"vscalefps\s+.*{register}|vmulps\s+.*{register}", body)  # the vector loop is there
    assert not re.findall(r"vcmp\w*ps|vpcmp\w*", body), re.findall(r"vcmp\w*ps|vpcmp\w*", body)
