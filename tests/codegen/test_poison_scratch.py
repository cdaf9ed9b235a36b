"""The checking build (``NEURONCC_POISON_SCRATCH``, ``codegen/llvm/poison.py``): every stack buffer a kernel reads
back is NaN until a pass stores it (once a call), and each row cache again before its producer stage runs for each
row, so that a read before a write fails on every run. The setting is part of the target's fingerprint (an
artifact's identity, the compile cache's key); the normal build never calls its hooks (its IR is the IR of before
it); the fault session 37 mended (a one-pass variance's write stage loading a deviation row cache no
pass stored) reads NaN on every call in the checking build; and every row kind, in float32 and on bf16 bits, with a
variance's one pass on and off, on odd and whole shapes, gives the interpreter's values in the checking build.

``pytest --poison-scratch`` (or ``NEURONCC_POISON_SCRATCH=1``) runs any test with the checking build."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import assert_matches
from poison_rows import ROWS, VARIANCES, inputs, llvm_ir
from test_pairs import layernorm_graph
from test_one_pass_variance import FALLBACK, FLOAT32_PRODUCTS, _widened, residual_layernorm_of_products

from neuroncc.codegen.llvm import emit, poison
from neuroncc.driver import artifact
from neuroncc.driver.compile import compile_graph
from neuroncc.errors import InputError
from neuroncc.hardware import host, scratch_poison
from neuroncc.hardware.scratch_poison import POISON_VARIABLE, poisoning_scratch
from neuroncc.ir import DType, interpret
from neuroncc.testing.choices import choose


def _one_pass(monkeypatch, on: bool) -> None:
    choose(monkeypatch, takes_the_variance_in_one_pass=on)


def test_the_setting_is_in_the_targets_fingerprint(monkeypatch):
    plain = host.HostCpu(name="znver4", features="+avx2", triple="x86_64-unknown-linux-gnu")
    poisoned = host.HostCpu(name="znver4", features="+avx2", triple="x86_64-unknown-linux-gnu", poisons_scratch=True)
    assert "poisoned-scratch" in poisoned.fingerprint and "poison" not in plain.fingerprint
    monkeypatch.setattr(host, "_HOST", [plain])
    monkeypatch.setattr(host, "_NAMED", [""])
    with poisoning_scratch(False):
        assert host.target_cpu() == plain
    with poisoning_scratch(True):
        assert host.target_cpu().poisons_scratch and host.target_cpu().fingerprint == poisoned.fingerprint
    assert POISON_VARIABLE == "NEURONCC_POISON_SCRATCH"


@pytest.mark.parametrize("text, on", [("1", True), (" Yes", True), ("on", True), ("", False), ("0", False),
                                      ("off", False), ("False", False)])


def test_the_settings_words(monkeypatch, text, on):
    monkeypatch.setattr(scratch_poison, "_SETTING", [])
    assert scratch_poison.poisons_scratch({POISON_VARIABLE: text}) is on


@pytest.mark.parametrize("text", ["2", "flase", "poison"])
def test_a_setting_that_is_no_word_is_a_typed_error_naming_it(monkeypatch, text):
    monkeypatch.setattr(scratch_poison, "_SETTING", [])
    with pytest.raises(InputError, match=f"NEURONCC_POISON_SCRATCH={text!r}: not a setting"):
        scratch_poison.poisons_scratch({POISON_VARIABLE: text})
    assert scratch_poison._SETTING == []  # (nothing settled: a corrected environment is read next time)


def test_the_cache_keys_host_component_names_the_checking_build():
    # (what ``driver.cache_key`` hashes as the "host" component of a cpu artifact: another key, so a poisoned
    # build is never found by an unpoisoned lookup, nor the reverse)
    with poisoning_scratch(False):
        plain = artifact._host_cpu_fingerprint()
    with poisoning_scratch(True):
        poisoned = artifact._host_cpu_fingerprint()
    assert poisoned == plain + " poisoned-scratch"


@pytest.mark.parametrize("cpu", ["znver4", "znver3"])
@pytest.mark.parametrize("kind", sorted(ROWS))
def test_the_normal_build_emits_nothing_of_the_checking_build(monkeypatch, kind, cpu):
    # the checking build's IR comes only through its two hooks; the normal build never calls them, so its IR is
    # what it would be without them (when this was built, 14 row kinds x 2 shapes x Zen 4 / Zen 3 digests were
    # checked equal to main's before it: session 37 poison37)
    def never(*args, **kwargs):
        raise AssertionError("the normal build called the checking build's fill")

    monkeypatch.setattr(emit, "poison_entry", never)
    monkeypatch.setattr(emit, "poison_row", never)
    with poisoning_scratch(False):
        for rows, cols in ((16, 1024), (5, 77)):
            assert poison.FILL not in llvm_ir(kind, rows, cols, cpu)


@pytest.mark.parametrize("cpu", ["znver4", "znver3"])
def test_the_checking_build_fills_its_buffers_and_row_caches(cpu):
    with poisoning_scratch(True):
        text = llvm_ir("layernorm_bf16", 16, 1024, cpu)
    assert poison.FILL in text and f"i32 {poison.WORD_F32})" in text
    with poisoning_scratch(False):
        assert poison.FILL not in llvm_ir("layernorm_bf16", 16, 1024, cpu)


@pytest.mark.parametrize("kind, cpu", [("layernorm_bf16", "znver4"), ("layernorm_bf16", "znver3"),
                                       ("softmax", "znver4"), ("softmax_bf16", "znver3")])


def test_each_row_fills_its_row_caches_again_before_their_stage(kind, cpu, monkeypatch):
    # (not only once a call: a stage reading a cache its producer did not store for this row would read the
    # previous row's values, a stale read, which only a fill per row turns into NaN; Zen 4's bf16 LayerNorm with
    # its deviation pass, whose caches these are: its variance from its mean pass's squares has none)
    choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
    with poisoning_scratch(True):
        text = llvm_ir(kind, 16, 1024, cpu)
    rows = text.split("\nstart:", 1)[1].split("\n}", 1)[0]  # (the phase function's code after its entry block)
    assert f"@{poison.FILL}" in rows or f'@"{poison.FILL}"' in rows


def test_a_row_cache_left_from_the_previous_row_reads_nan(rng, monkeypatch):
    # a stale read: the deviation row cache stored only at the thread's first row (a fault put in), every later
    # row's write stage loading that row's x - mean. On identical rows those are the right values: the normal build
    # gives the interpreter's values, and so would a fill once a call; the fill before each row's producer stage
    # gives NaN from the second row on
    choose(monkeypatch, caches_variance_deviations=True)
    # (the deviation pass: the variance from its mean pass's squares pinned off)
    choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
    original, stored = emit.KernelEmitter.deviation_computed, []

    def first_row_only(self, variance, idx, deviation):
        stored.append(variance)
        with self.fresh_values(), self.b.if_then(self.b.icmp_signed("==", self.ir_index(idx[0]), self._range[0])):
            original(self, variance, idx, deviation)

    monkeypatch.setattr(emit.KernelEmitter, "deviation_computed", first_row_only)
    fn = layernorm_graph(6, 1024)
    x, w, bias = inputs(fn, rng)
    x = np.tile(x[:1], (6, 1))
    want = _widened(interpret(fn, [x, w, bias])[0])
    with poisoning_scratch(False):
        normal = compile_graph(fn, target="cpu", options={"threads": 1}, cache=None)
    assert stored  # (the kernel caches the deviations)
    np.testing.assert_allclose(_widened(normal(x, w, bias)[0]), want, rtol=2 ** -7, atol=1e-6)
    with poisoning_scratch(True):
        poisoned = _widened(compile_graph(fn, target="cpu", options={"threads": 1}, cache=None)(x, w, bias)[0])
    np.testing.assert_allclose(poisoned[0], want[0], rtol=2 ** -7, atol=1e-6)
    assert np.isnan(poisoned[1:]).all()


def test_the_patterns_are_nans_of_each_width():
    assert np.isnan(np.array([poison.WORD_F32], np.uint32).view(np.float32)).all()
    assert np.isnan(np.array([poison.WORD_F64 * (1 << 32 | 1)], np.uint64).view(np.float64)).all()
    assert np.isnan(np.array([poison.WORD_F16], np.uint32).view(np.float16)).all()
    assert np.isnan(_widened(np.array([poison.WORD_BF16], np.uint32).view(np.uint16))).all()


@pytest.mark.parametrize("tokens, cols", [(8, 32), (5, 48)])
def test_a_deviation_cache_no_pass_stores_reads_nan_on_every_call(tokens, cols, rng, monkeypatch):
    # session 37's fault put back: the deviation row cache planned for a variance that takes its one pass (no
    # deviation pass stores it); its write stage read uninitialized stack, garbage that differed run to run
    # (10^19-10^36, or within the tolerances by chance); the checking build reads the poison: NaN, every call
    fn = residual_layernorm_of_products(2, tokens, cols)
    words = inputs(fn, rng)
    choose(monkeypatch, caches_variance_deviations=True)
    _one_pass(monkeypatch, True)
    monkeypatch.setattr(emit, "takes_one_pass", lambda *args: False)  # (the mend's filter undone)
    with poisoning_scratch(True):
        exe = compile_graph(fn, target="cpu", pipeline=FLOAT32_PRODUCTS, cache=None)
    assert any(FALLBACK in text for text in exe.module.llvm_ir)  # (the one pass taken)
    for _ in range(3):
        y, _, _, first = exe(*words)
        assert np.isnan(_widened(y)).all() and np.isnan(_widened(first)).all()

ELEMENTWISE = ("affine_bf16", "gelu_sigmoid", "gelu_sigmoid_bf16")
SHAPES = [(5, 1000), (3, 77), (17, 1024), (2, 4100)]
CASES = [(kind, shape, one_pass) for kind in ROWS for shape in SHAPES
         for one_pass in ((True, False) if kind in VARIANCES else (None,))]


@pytest.mark.parametrize("kind, shape, one_pass", CASES,
                         ids=[f"{k}-{r}x{c}-{'' if o is None else ('one' if o else 'two')}" for k, (r, c), o in CASES])


def test_every_row_kind_in_the_checking_build_gives_the_interpreters_values(kind, shape, one_pass, rng, monkeypatch):
    rows, cols = shape
    if kind == "residual_layernorm":  # (two sequences of rows tokens; its products' weights cols x cols)
        rows, cols = min(rows, 16), min(cols, 96)
    if one_pass is not None:
        _one_pass(monkeypatch, one_pass)
    fn = ROWS[kind](rows, cols)
    arrays = inputs(fn, rng)
    with poisoning_scratch(True):  # (through the pipeline: the fused row kernels)
        exe = compile_graph(fn, target="cpu", options={"threads": 2}, cache=None)
    assert exe.stats["interpreted_kernels"] == 0, exe.stats["interpreted_reasons"]
    if kind not in ELEMENTWISE:  # (their loops keep no buffer)
        assert any(poison.FILL in text for text in exe.module.llvm_ir)
    want = interpret(fn, arrays)
    for _ in range(2):
        for position, (actual, expected, value) in enumerate(zip(exe(*arrays), want, fn.outputs)):
            if value.type.dtype is DType.i16:  # (bf16 bits: compared as bf16 values)
                actual, expected = _widened(actual), _widened(expected)
                np.testing.assert_allclose(actual, expected, rtol=2 ** -6, atol=1e-5, err_msg=f"output #{position}")
            elif kind == "softmax_backward":
                _within_the_summation_bound(actual, *arrays)
            else:
                assert_matches(actual, expected, value.type.dtype, f"output #{position}")


def _within_the_summation_bound(actual: np.ndarray, grad: np.ndarray, y: np.ndarray) -> None:
    """y * (grad - sum(grad * y)) within the worst-case error of any float32 summation order of the row's n products
    (Higham's gamma_n times sum |grad y|) and its two roundings after, of the float64 result: its sum's order differs
    by vector width (8 lanes on AVX2, 16 on AVX-512) and from the interpreter's, so no elementwise tolerance fits
    every host while a poisoned read (NaN, or garbage) fails it."""
    g, w = grad.astype(np.float64), y.astype(np.float64)
    n = g.shape[-1] + 2
    unit = np.finfo(np.float32).eps / 2
    gamma = n * unit / (1 - n * unit)
    exact = w * (g - (g * w).sum(-1, keepdims=True))
    bound = np.abs(w) * gamma * (np.abs(g * w).sum(-1, keepdims=True) + np.abs(g))
    error = np.abs(actual.astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(np.nan_to_num(error - bound, nan=np.inf)), error.shape)
    assert np.all(error <= bound), f"error {error[worst]:.3g} above the float32 summation bound {bound[worst]:.3g} " \
                                   f"at {worst}"

