"""LLVM's quick tier first, optimized code from the background (codegen/llvm/jit.py Tier, executors/cpu/tiers.py).

A ``quick_first`` build runs quick-tier code until its optimized build is done; both must compute the same bits,
and what is saved (the compile cache's artifact) is the optimized code.
"""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm import division, jit
from neuroncc.errors import InputError
from neuroncc.codegen.llvm.entries import optimize_first
from neuroncc.executors.cpu import tiers

from neuroncc.executors.cpu.launcher import CODE_FILES, build_cpu_executable, load_cpu_executable, stored_code
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline
from neuroncc.testing.choices import choose

SHAPE = (37, 129)  # odd sizes: vector bodies and scalar remainders both run


def _graph(name, build, shape=SHAPE, inputs=1):
    b = Builder(name)
    params = [b.param(TensorType(shape, DType.f32), f"x{i}") for i in range(inputs)]
    return run_pipeline(default_pipeline("cpu"), b.build([build(b, *params)]))


#: graphs whose kernels carry no fast-math flag but ``contract`` (polynomial math: fused multiply-adds)
TIER_INDEPENDENT = {
    "exp": lambda: _graph("exp", lambda b, x: b.op("exp", x)),
    "sigmoid": lambda: _graph("sigmoid", lambda b, x: b.op("sigmoid", x)),
    "log": lambda: _graph("log", lambda b, x: b.op("log", b.op("abs", x))),
    "sin": lambda: _graph("sin", lambda b, x: b.op("sin", x)),
    "silu": lambda: _graph("silu", lambda b, x: b.op("mul", x, b.op("sigmoid", x))),
    "where_max_sqrt": lambda: _graph("wms", lambda b, x, y: b.op(
        "where", b.op("gt", x, y), b.op("maximum", x, y), b.op("sqrt", b.op("abs", y))), inputs=2),
    "pow_mul_add": lambda: _graph("pma", lambda b, x, y: b.op("add", b.op("mul", b.op("mul", x, x), x), y), inputs=2),
}


def _special_inputs(rng, count):
    """Normal values with the special ones mixed in: infinities, NaN, signed zeros, denormals, large values."""
    arrays = []
    for _ in range(count):
        x = (rng.standard_normal(SHAPE) * 4).astype(np.float32)
        flat = x.reshape(-1)
        specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 88.5, -104.0, 1e30], np.float32)
        flat[rng.choice(flat.size, 200, replace=False)] = np.resize(specials, 200)
        arrays.append(x)
    return arrays


def _bits(arrays):
    return [np.ascontiguousarray(a).view(np.uint8) for a in arrays]


@pytest.mark.parametrize("name", sorted(TIER_INDEPENDENT))
def test_quick_code_computes_the_optimized_codes_bits(rng, name):
    fn = TIER_INDEPENDENT[name]()
    quick = build_cpu_executable(fn, {"quick_first": True})
    assert quick.optimized is not None, "this graph's kernels are tier independent: it starts at the quick tier"
    optimized = quick.optimized.result(timeout=120)
    assert optimized.optimized is None and optimized.module.objects != quick.module.objects  # other code
    args = _special_inputs(rng, len(fn.params))
    for got, want in zip(_bits(quick(*args)), _bits(optimized(*args))):
        np.testing.assert_array_equal(got, want)


def test_kernels_with_tier_dependent_flags_are_optimized_at_once():
    """A sum (``reassoc``: the vectorizer reorders it) and tanh (``ninf``/``arcp``) start optimized."""
    for fn in (_graph("sum", lambda b, x: b.op("sum", x, dims=(1,))), _graph("tanh", lambda b, x: b.op("tanh", x))):
        exe = build_cpu_executable(fn, {"quick_first": True})
        assert exe.optimized is None and exe.final() is exe
        assert not all(jit.tier_independent(text) for text in exe.module.llvm_ir)


def test_large_work_is_optimized_at_once():
    """Past QUICK_MAX_WORK the slower code would cost more than the compile it saves."""
    rows = tiers.QUICK_MAX_WORK // 256 + 1
    exe = build_cpu_executable(_graph("big", lambda b, x: b.op("exp", x), shape=(rows, 256)), {"quick_first": True})
    assert exe.optimized is None
    assert tiers.plan_work(exe.plan) > tiers.QUICK_MAX_WORK


def test_without_the_option_a_build_is_optimized(rng):
    exe = build_cpu_executable(TIER_INDEPENDENT["exp"]())
    assert exe.optimized is None
    with pytest.raises(InputError, match="quick_first"):
        build_cpu_executable(TIER_INDEPENDENT["exp"](), {"quick_first": "yes"})


def test_saving_a_quick_executable_saves_the_optimized_code(rng, tmp_path):
    fn = TIER_INDEPENDENT["sigmoid"]()
    quick = build_cpu_executable(fn, {"quick_first": True})
    quick.save(tmp_path)  # waits for the optimized build
    optimized = quick.optimized.result()
    assert quick.final() is optimized
    assert (tmp_path / CODE_FILES[optimized.module.form]).read_bytes() == stored_code(optimized.module)
    loaded = load_cpu_executable(tmp_path, fn)  # its checksum is the optimized code's
    assert stored_code(loaded.module) == stored_code(optimized.module) != stored_code(quick.module)
    args = _special_inputs(rng, 1)
    np.testing.assert_array_equal(_bits(loaded(*args))[0], _bits(quick(*args))[0])


def test_tier_independence_reads_instruction_flags_only():
    assert jit.tier_independent('%"a" = fmul contract float %"x", %"y"\n')
    assert not jit.tier_independent('%"a" = fadd reassoc contract float %"x", %"y"\n')
    assert not jit.tier_independent('%"m" = call nnan nsz float @"llvm.maxnum.f32"(float %"x", float %"y")\n')
    assert not jit.tier_independent('%"q" = fdiv arcp float %"x", %"y"\n')
    # names and string attributes that spell a flag are not flags
    assert jit.tier_independent('define void @"fast reassoc"() "x"="nnan arcp" {\n  ret void\n}\n')


def test_the_optimizer_thread_runs_jobs_in_order_and_reports_errors():
    order = []
    first = tiers.OPTIMIZER.submit(lambda: order.append(1) or "one")
    failing = tiers.OPTIMIZER.submit(lambda: 1 / 0)
    last = tiers.OPTIMIZER.submit(lambda: order.append(3) or "three")
    tiers.OPTIMIZER.wait()
    assert (first.result(), last.result(), order) == ("one", "three", [1, 3])
    assert isinstance(failing.exception(), ZeroDivisionError)
    assert tiers.OPTIMIZER.pending() == 0


def _row_divisor():
    b = Builder("row_divisor")
    x = b.param(TensorType(SHAPE, DType.f32), "x")
    y = b.param(TensorType((SHAPE[0], 1), DType.f32), "y")
    return run_pipeline(default_pipeline("cpu"), b.build([b.op("div", x, y)]))


def test_why_arcp_is_tier_dependent(rng, monkeypatch):
    """x / y with y broadcast along rows, with ``arcp`` (every division before session 45; since then only a
    divisor the kernel reduced, softmax's sum, whose ``reassoc`` makes its module tier dependent anyway): O3 hoists
    y's reciprocal out of the row loop and multiplies, the quick tier divides each element: other bits. So a
    module with ``arcp`` never starts quick."""
    monkeypatch.setattr(division, "multiplies_by_the_reciprocal", lambda region, op: True)
    fn = _row_divisor()
    assert build_cpu_executable(fn, {"quick_first": True}).optimized is None
    monkeypatch.setattr(jit, "tier_independent", lambda text: True)  # what a quick start would compute
    quick = build_cpu_executable(fn, {"quick_first": True})
    optimized = quick.optimized.result(timeout=120)
    args = [_special_inputs(rng, 1)[0], (rng.standard_normal((SHAPE[0], 1)) * 3).astype(np.float32)]
    assert (_bits(quick(*args))[0] != _bits(optimized(*args))[0]).any()


def test_true_division_by_a_broadcast_divisor_starts_quick_with_the_same_bits(rng):
    """Without ``arcp`` (``codegen/llvm/division.py``) both tiers divide each element: IEEE's quotient."""
    quick = build_cpu_executable(_row_divisor(), {"quick_first": True})
    assert quick.optimized is not None  # (it started quick)
    optimized = quick.optimized.result(timeout=120)
    x, y = _special_inputs(rng, 1)[0], (rng.standard_normal((SHAPE[0], 1)) * 3).astype(np.float32)
    y[:3] = [[0.0], [np.inf], [np.nan]]
    with np.errstate(all="ignore"):
        want = x / y
    for executable in (quick, optimized):
        assert np.array_equal(_bits(executable(x, y))[0], want.view(np.uint8))


# ---- quick_first="modules": torch.compile's graphs decide per module -------------------------------------------

def _exp_then(last: str):
    """Two kernels: exp (tier independent) feeding a matmul, then ``last`` of the product (a row sum:
    ``reassoc``, tier dependent; sigmoid: tier independent). exp's result lives in the arena."""
    b = Builder("exp_" + last)
    x = b.param(TensorType(SHAPE, DType.f32), "x")
    y = b.param(TensorType((SHAPE[1], 16), DType.f32), "y")
    product = b.op("mm", b.op("exp", x), y)
    result = b.op("sum", product, dims=(1,)) if last == "sum" else b.op(last, product)
    return run_pipeline(default_pipeline("cpu"), b.build([result]))


def _exp_then_sum():
    return _exp_then("sum")


def _exp_sum_inputs(rng):
    return [_special_inputs(rng, 1)[0], rng.standard_normal((SHAPE[1], 16)).astype(np.float32)]


def test_modules_mode_starts_only_the_tier_independent_modules_quick(rng):
    fn = _exp_then_sum()
    optimized_only = build_cpu_executable(fn)
    quick = build_cpu_executable(fn, {"quick_first": "modules"})
    assert quick.optimized is not None, "the exp kernel is tier independent"
    quick.bind_code()  # a graph build's code is finished in the background (deferred_code.py)
    texts = quick.module.llvm_ir
    independent = [jit.tier_independent(t) and not optimize_first(t) for t in texts]
    assert any(independent) and not all(independent), "one module of each kind"
    for text, same, obj, ref in zip(texts, independent, quick.module.objects, optimized_only.module.objects):
        assert (obj == ref) != same, "the tier dependent module is optimized at once, the other is quick code"
    optimized = quick.optimized.result(timeout=120)
    assert optimized.module.objects == optimized_only.module.objects  # reoptimize: the optimized build's code
    args = _exp_sum_inputs(rng)
    np.testing.assert_array_equal(_bits(quick(*args))[0], _bits(optimized(*args))[0])


def test_modules_mode_compiles_generated_products_optimized_at_once(monkeypatch):
    """A generated matrix product is tier independent (explicit FMAs, no fast-math flags) but the graph's
    arithmetic bulk: it asks to be optimized first (entries.optimize_first) and is, beside a quick exp."""
    choose(monkeypatch, small_mm_max_macs=1 << 25)
    b = Builder("exp_mm_sigmoid")
    x = b.param(TensorType((48, 129), DType.f32), "x")  # 48 rows: items of 16 (SHAPE's 37 stay on MKL)
    y = b.param(TensorType((129, 16), DType.f32), "y")
    fn = run_pipeline(default_pipeline("cpu"), b.build([b.op("sigmoid", b.op("mm", b.op("exp", x), y))]))
    optimized_only = build_cpu_executable(fn)
    quick = build_cpu_executable(fn, {"quick_first": "modules"})
    quick.bind_code()  # a torch.compile-style build finishes its code in the background (deferred_code.py)
    products = [n for n, text in enumerate(quick.module.llvm_ir) if optimize_first(text)]
    assert products and all(jit.tier_independent(quick.module.llvm_ir[n]) for n in products)
    for n in products:
        assert quick.module.objects[n] == optimized_only.module.objects[n]
    assert any(q != o for q, o in zip(quick.module.objects, optimized_only.module.objects)), "exp starts quick"


def test_modules_mode_ignores_the_work_limit_and_has_nothing_to_follow_without_quick_modules():
    rows = tiers.QUICK_MAX_WORK // 256 + 1
    big = build_cpu_executable(_graph("big", lambda b, x: b.op("exp", x), shape=(rows, 256)),
                               {"quick_first": "modules"})
    assert big.optimized is not None
    summed = build_cpu_executable(_graph("sum", lambda b, x: b.op("sum", x, dims=(1,))), {"quick_first": "modules"})
    assert summed.optimized is None and summed.final() is summed


def test_modules_mode_saves_the_optimized_code(tmp_path):
    fn = _exp_then_sum()
    quick = build_cpu_executable(fn, {"quick_first": "modules"})
    quick.save(tmp_path)
    optimized = quick.optimized.result().module
    assert (tmp_path / CODE_FILES[optimized.form]).read_bytes() == stored_code(optimized)


def test_reoptimize_compiles_only_the_quick_objects_again():
    texts = build_cpu_executable(_exp_then_sum()).module.llvm_ir
    tiers_ = [jit.Tier.QUICK if jit.tier_independent(t) and not optimize_first(t) else jit.Tier.OPTIMIZED
              for t in texts]
    quick = jit.compile_ir(texts, tier=jit.Tier.QUICK)
    mixed = jit.reoptimize(quick, tiers_)
    optimized = jit.compile_ir(texts)
    for tier, before, after, want in zip(tiers_, quick.objects, mixed.objects, optimized.objects):
        assert after == (want if tier is jit.Tier.QUICK else before)
    assert jit.reoptimize(optimized, [jit.Tier.OPTIMIZED] * len(texts)) is optimized


def test_a_quiet_period_delays_the_optimizer_and_a_shorter_one_never_shortens_it():
    import time

    started = []
    submitted = time.monotonic()
    first = tiers.OPTIMIZER.submit(lambda: started.append(time.monotonic()), quiet=0.4)
    second = tiers.OPTIMIZER.submit(lambda: started.append(time.monotonic()), quiet=0.0)
    first.result(timeout=30), second.result(timeout=30)
    assert min(started) - submitted >= 0.39


def test_waiting_for_the_builds_or_exiting_ends_the_quiet_period():
    """Whoever waits for the optimizer (``wait``) or an exiting interpreter would only sleep through a quiet
    period: no burst of first calls can follow. A process that queued a build with 60 s of quiet exits at once
    (it slept the whole period before, as every fresh process of the test suite that compiled a graph did)."""
    import subprocess
    import sys
    import time

    started = []
    submitted = time.monotonic()
    job = tiers.OPTIMIZER.submit(lambda: started.append(time.monotonic()), quiet=60.0)
    tiers.OPTIMIZER.wait()
    assert job.done() and started[0] - submitted < 10
    child = ("import sys, time; from neuroncc.executors.cpu import tiers; "
             "tiers.OPTIMIZER.submit(lambda: sys.stdout.write('built'), quiet=60.0); time.sleep(0.2)")
    begun = time.monotonic()
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "built", "")
    assert time.monotonic() - begun < 30


@pytest.mark.parametrize("mode", [True, "modules"])
def test_the_optimized_build_shares_the_quick_executables_arena_and_lock(rng, mode):
    """Its pages are touched already, and the process keeps one arena per graph, not two; one lock, so a call
    of the quick code still under way and the first call of the optimized code never overlap in it."""
    quick = build_cpu_executable(_exp_then("sigmoid" if mode is True else "sum"), {"quick_first": mode})
    optimized = quick.optimized.result(timeout=120)
    assert quick.plan.arena_bytes > 0
    assert optimized._arena.ctypes.data == quick._arena.ctypes.data and optimized._lock is quick._lock
    args = _exp_sum_inputs(rng)
    np.testing.assert_array_equal(_bits(quick(*args))[0], _bits(optimized(*args))[0])
