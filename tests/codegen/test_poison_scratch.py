"""The checking build (``NEURONCC_POISON_SCRATCH``, ``codegen/llvm/poison.py``): every stack buffer a kernel reads
back is NaN until a pass stores it (once a call), and each row cache again before its producer stage runs for each
row, so that a read before a write fails on every run. The setting is part of the target's fingerprint (an
artifact's identity, the compile cache's key); the normal build's IR is the IR of before it (pinned by digest, on
Zen 4 and Zen 3); the fault session 37 mended (a one-pass variance's write stage loading a deviation row cache no
pass stored) reads NaN on every call in the checking build; and every row kind, in float32 and on bf16 bits, with a
variance's one pass on and off, on odd and whole shapes, gives the interpreter's values in the checking build.

``pytest --poison-scratch`` (or ``NEURONCC_POISON_SCRATCH=1``) runs any test with the checking build."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import assert_matches
from poison_rows import ROWS, VARIANCES, digest, inputs, llvm_ir
from test_pairs import layernorm_graph
from test_one_pass_variance import FALLBACK, _widened, residual_layernorm_of_products

from neuroncc.codegen.llvm import emit, poison
from neuroncc.driver import artifact
from neuroncc.driver.compile import compile_graph
from neuroncc.hardware import host
from neuroncc.hardware.host import CpuTarget
from neuroncc.hardware.scratch_poison import POISON_VARIABLE, poisoning_scratch
from neuroncc.ir import DType, interpret

#: The normal build's IR of each row kind (kind, rows, cols, cpu), as on main before the checking build (3cd75ba).
NORMAL_IR = {
    ('softmax', 16, 1024, 'znver4'): '0cfa200337bae1ff',
    ('softmax', 5, 77, 'znver4'): '56e8fd8c06f269cf',
    ('softmax_bf16', 16, 1024, 'znver4'): 'c3be8b02db10d9bd',
    ('softmax_bf16', 5, 77, 'znver4'): '850236af8ff8be4c',
    ('softmax_backward', 16, 1024, 'znver4'): '17363341650cab3c',
    ('softmax_backward', 5, 77, 'znver4'): '61b48d48b7d8f29b',
    ('layernorm', 16, 1024, 'znver4'): 'a681d479824b4a35',
    ('layernorm', 5, 77, 'znver4'): '375b5a884a580c34',
    ('layernorm_bf16', 16, 1024, 'znver4'): '9d2fabc5b59e3d07',
    ('layernorm_bf16', 5, 77, 'znver4'): 'd17d5ec56effac24',
    ('layernorm_backward', 16, 1024, 'znver4'): 'ad21296d6f980202',
    ('layernorm_backward', 5, 77, 'znver4'): '611271dc1e249657',
    ('rmsnorm', 16, 1024, 'znver4'): 'daa52f26b3014425',
    ('rmsnorm', 5, 77, 'znver4'): '638756b179ac31ca',
    ('rmsnorm_bf16', 16, 1024, 'znver4'): '2af23701296629c9',
    ('rmsnorm_bf16', 5, 77, 'znver4'): '28afd9c457a12bac',
    ('log_softmax', 16, 1024, 'znver4'): '5be7e587d73df846',
    ('log_softmax', 5, 77, 'znver4'): 'fc25b74b24c909b9',
    ('exp_times_row_scale', 16, 1024, 'znver4'): 'e582cfb280c37e35',
    ('exp_times_row_scale', 5, 77, 'znver4'): '2715812bcd10df00',
    ('affine_bf16', 16, 1024, 'znver4'): 'd5cf119fe9a929cc',
    ('affine_bf16', 5, 77, 'znver4'): '9985bdb719f8f893',
    ('gelu_sigmoid', 16, 1024, 'znver4'): '3a239b1da792fd0c',
    ('gelu_sigmoid', 5, 77, 'znver4'): '9a971733d3b96fe8',
    ('gelu_sigmoid_bf16', 16, 1024, 'znver4'): '8c05a4ad283cb3f9',
    ('gelu_sigmoid_bf16', 5, 77, 'znver4'): '9a5a2bdaaf407333',
    ('residual_layernorm', 16, 1024, 'znver4'): 'b7c006ec10338bc1',
    ('residual_layernorm', 5, 77, 'znver4'): 'ff4669530234bf06',
    ('softmax', 16, 1024, 'znver3'): '550dd55c3265833d',
    ('softmax', 5, 77, 'znver3'): '23ee2fb84192f458',
    ('softmax_bf16', 16, 1024, 'znver3'): '3193aa6dbc21066a',
    ('softmax_bf16', 5, 77, 'znver3'): 'b8e9313d1f0db876',
    ('softmax_backward', 16, 1024, 'znver3'): '17363341650cab3c',
    ('softmax_backward', 5, 77, 'znver3'): '61b48d48b7d8f29b',
    ('layernorm', 16, 1024, 'znver3'): '1b799eef9ab429d8',
    ('layernorm', 5, 77, 'znver3'): '40b0f0b1e8adc02d',
    ('layernorm_bf16', 16, 1024, 'znver3'): '169e39d87eb709d7',
    ('layernorm_bf16', 5, 77, 'znver3'): '312bf374f9a56b50',
    ('layernorm_backward', 16, 1024, 'znver3'): 'ab34e782d50adb52',
    ('layernorm_backward', 5, 77, 'znver3'): 'fa9b703dda0ad47c',
    ('rmsnorm', 16, 1024, 'znver3'): 'daa52f26b3014425',
    ('rmsnorm', 5, 77, 'znver3'): '638756b179ac31ca',
    ('rmsnorm_bf16', 16, 1024, 'znver3'): 'f689fac154066152',
    ('rmsnorm_bf16', 5, 77, 'znver3'): 'a188102dbd723f0c',
    ('log_softmax', 16, 1024, 'znver3'): '3ba8acac628d1317',
    ('log_softmax', 5, 77, 'znver3'): 'e311c4eb720e6449',
    ('exp_times_row_scale', 16, 1024, 'znver3'): 'f1bd5f743ed1d6e1',
    ('exp_times_row_scale', 5, 77, 'znver3'): '34fdc01c07811300',
    ('affine_bf16', 16, 1024, 'znver3'): '81f48ad842d9ab51',
    ('affine_bf16', 5, 77, 'znver3'): '49fdf1b4d24b876b',
    ('gelu_sigmoid', 16, 1024, 'znver3'): 'f9023c878becc235',
    ('gelu_sigmoid', 5, 77, 'znver3'): '25f6ad5fc6cb58c6',
    ('gelu_sigmoid_bf16', 16, 1024, 'znver3'): '1708d632ba5ee97d',
    ('gelu_sigmoid_bf16', 5, 77, 'znver3'): '7baae50089a64bd8',
    ('residual_layernorm', 16, 1024, 'znver3'): '73b88b315ccd2a71',
    ('residual_layernorm', 5, 77, 'znver3'): '3454be8e288eb2ac',
}

def _one_pass(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(CpuTarget, "takes_the_variance_in_one_pass", property(lambda self: on))

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

def test_the_cache_keys_host_component_names_the_checking_build():
    # (what ``driver.cache_key`` hashes as the "host" component of a cpu artifact: another key, so a poisoned
    # build is never found by an unpoisoned lookup, nor the reverse)
    with poisoning_scratch(False):
        plain = artifact._host_cpu_fingerprint()
    with poisoning_scratch(True):
        poisoned = artifact._host_cpu_fingerprint()
    assert poisoned == plain + " poisoned-scratch"


@pytest.mark.parametrize("kind, rows, cols, cpu", sorted(NORMAL_IR))
def test_the_normal_build_emits_the_ir_of_before(kind, rows, cols, cpu):
    with poisoning_scratch(False):
        assert digest(llvm_ir(kind, rows, cols, cpu)) == NORMAL_IR[kind, rows, cols, cpu]

@pytest.mark.parametrize("cpu", ["znver4", "znver3"])
def test_the_checking_build_fills_its_buffers_and_row_caches(cpu):
    with poisoning_scratch(True):
        text = llvm_ir("layernorm_bf16", 16, 1024, cpu)
    assert poison.FILL in text and f"i32 {poison.WORD_F32})" in text
    with poisoning_scratch(False):
        assert poison.FILL not in llvm_ir("layernorm_bf16", 16, 1024, cpu)

@pytest.mark.parametrize("kind, cpu", [("layernorm_bf16", "znver4"), ("layernorm_bf16", "znver3"),
                                       ("softmax", "znver4"), ("softmax_bf16", "znver3")])
def test_each_row_fills_its_row_caches_again_before_their_stage(kind, cpu):
    # (not only once a call: a stage reading a cache its producer did not store for this row would read the
    # previous row's values, a stale read, which only a fill per row turns into NaN)
    with poisoning_scratch(True):
        text = llvm_ir(kind, 16, 1024, cpu)
    rows = text.split("\nstart:", 1)[1].split("\n}", 1)[0]  # (the phase function's code after its entry block)
    assert f"@{poison.FILL}" in rows or f'@"{poison.FILL}"' in rows


def test_a_row_cache_left_from_the_previous_row_reads_nan(rng, monkeypatch):
    # a stale read: the deviation row cache stored only at the thread's first row (a fault put in), every later
    # row's write stage loading that row's x - mean. On identical rows those are the right values: the normal build
    # gives the interpreter's values, and so would a fill once a call; the fill before each row's producer stage
    # gives NaN from the second row on
    monkeypatch.setattr(CpuTarget, "caches_variance_deviations", property(lambda self: True))
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
    monkeypatch.setattr(CpuTarget, "caches_variance_deviations", property(lambda self: True))
    _one_pass(monkeypatch, True)
    monkeypatch.setattr(emit, "takes_one_pass", lambda *args: False)  # (the mend's filter undone)
    with poisoning_scratch(True):
        exe = compile_graph(fn, target="cpu", cache=None)
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
            else:
                assert_matches(actual, expected, value.type.dtype, f"output #{position}")

