"""The cost model: per-instruction formulas, the schedule, calibration against published numbers."""

from __future__ import annotations

import numpy as np
import pytest

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl
from neuroncc.nki import kernels
from neuroncc.nki.cost_model import dma_efficiency, instruction_cost
from neuroncc.nki.target import TARGETS
from neuroncc.nki.trace import Engine, instructions

TRN1, TRN2, TRN3 = TARGETS["trn1"], TARGETS["trn2"], TARGETS["trn3"]


def spec(*shape, dtype=nl.float32):
    return nki.TensorSpec.of(shape, dtype)


def _costs(kernel, *args, target="trn2"):
    """(op, cycles, ns) of every instruction of a cost-only launch."""
    events = nki.trace_kernel(nki.jit(kernel), *args, target=target)
    return [(i.op, instruction_cost(i, TARGETS[target])) for i in instructions(events)]


# --------------------------------------------------------------------------------- formulas
@pytest.mark.parametrize("dtype, m, n, cycles", [
    (nl.bfloat16, 128, 512, 512),   # max(min(64, M), N)
    (nl.bfloat16, 128, 32, 64),     # a short moving tile still pays the stationary load
    (nl.bfloat16, 16, 32, 32),
    (nl.float32, 128, 512, 2048),   # x4 for fp32 operands
])
def test_matmul_cycles(dtype, m, n, cycles):
    def kernel():
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, nl.ndarray((128, m), dtype=dtype), nl.ndarray((128, n), dtype=dtype))

    ((op, cost),) = _costs(kernel, target="trn1")
    assert op == "nc_matmul" and cost.cycles == cycles and cost.engine is Engine.TENSOR
    assert cost.ns == pytest.approx(cycles / 2.8)
    assert cost.flops == 2 * 128 * m * n


def test_vector_and_scalar_formulas_scale_with_generation_lanes():
    def kernel():
        a = nl.ndarray((128, 1024), dtype=nl.float32)
        b = nl.ndarray((128, 1024), dtype=nl.float32)
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        narrow = nl.ndarray((128, 1024), dtype=nl.bfloat16)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)         # 2N
        nisa.tensor_tensor(dst=a, data1=a, data2=acc, op=nl.add)       # N: one input streams from PSUM
        nisa.tensor_scalar(dst=a, data=b, op0=nl.multiply, operand0=2.0)  # N
        nisa.tensor_scalar(dst=narrow, data=narrow, op0=nl.add, operand0=1.0)  # N, 16-bit lanes
        nisa.activation(dst=a, op=nl.exp, data=b)                      # N on ScalarE
        nisa.activation(dst=a, op=nl.exp, data=b, reduce_res=nl.ndarray((128, 1), dtype=nl.float32))  # N + 64
        nisa.tensor_reduce(dst=nl.ndarray((128, 1), dtype=nl.float32), op=nl.add, data=narrow, axis=1)
        nisa.iota(dst=nl.ndarray((128, 100), dtype=nl.int32), pattern=[[1, 100]])  # 150 + N
        nisa.memset(dst=nl.ndarray((128, 8), dtype=nl.float32), value=0.0)  # MIN_II floor

    trn1 = [cost.cycles for _, cost in _costs(kernel, target="trn1")]
    trn2 = [cost.cycles for _, cost in _costs(kernel, target="trn2")]
    assert trn1 == [2048, 1024, 1024, 1024, 1024, 1088, 1024, 250, 64]
    # NC-v3 VectorE streams 2 fp32 (4 bf16) elements per partition per cycle; ScalarE is unchanged.
    assert trn2 == [1024, 512, 512, 256, 1024, 1088, 256, 250, 64]


def test_transpose_cycles_on_tensor_engine():
    def kernel():
        nisa.nc_transpose(dst=nl.ndarray((32, 128), dtype=nl.float32, buffer=nl.psum),
                          data=nl.ndarray((128, 32), dtype=nl.float32))

    ((_, cost),) = _costs(kernel)
    assert cost.cycles == max(128, min(64, 32)) and cost.engine is Engine.TENSOR


@pytest.mark.parametrize("chunk, efficiency", [(8192, 1.0), (4096, 1.0), (3072, 0.875), (2048, 0.75),
                                               (1024, 0.375), (16, 0.75 * 64 / 2048)])
def test_dma_efficiency_curve(chunk, efficiency):
    assert dma_efficiency(chunk) == pytest.approx(efficiency)


def test_dma_cost_uses_the_shortest_contiguous_run():
    def kernel(x):
        tile = nl.ndarray((128, 512), dtype=nl.float32)
        nisa.dma_copy(dst=tile, src=x[:, 0:512])     # 2 KiB rows out of 8 KiB rows
        nisa.dma_copy(dst=tile[:, 0:128], src=x[:, 0:128])

    (_, wide), (_, narrow) = _costs(kernel, spec(128, 2048))
    assert wide.dma_bytes == 128 * 512 * 4
    assert wide.ns == pytest.approx(wide.dma_bytes / (368.0 * 0.75))
    assert narrow.ns == pytest.approx(narrow.dma_bytes / (368.0 * dma_efficiency(512)))


# --------------------------------------------------------------------------------- scheduling
def test_latency_grows_with_problem_size():
    softmax = [nki.benchmark(kernels.softmax, execute=False)(spec(rows, 1024)).latency_us
               for rows in (256, 1024, 4096)]
    assert softmax[0] < softmax[1] < softmax[2]
    assert softmax[2] == pytest.approx(4 * softmax[1], rel=0.15)  # DMA-bound: linear in bytes
    matmul = [nki.benchmark(kernels.matmul_tiled, execute=False)(spec(k, 128, dtype=nl.bfloat16),
                                                                  spec(k, 512, dtype=nl.bfloat16)).latency_us
              for k in (128, 512, 2048)]
    assert matmul[0] < matmul[1] < matmul[2]


def test_blocked_bf16_matmul_reaches_85_percent_of_tensor_engine_peak_on_trn2():
    # AWS's matmul tutorial problem: [4096, 8192] x [8192, 8192] in bf16 (lhsT is [K, M] = [8192, 4096]).
    result = nki.benchmark(kernels.matmul_blocked, target="trn2", execute=False)(
        spec(8192, 4096, dtype=nl.bfloat16), spec(8192, 8192, dtype=nl.bfloat16))
    profile = result.profile
    assert profile.tensor_flops == 2 * 4096 * 8192 * 8192
    assert profile.bound == "TensorE"
    assert profile.tensor_peak_fraction >= 0.85
    assert result.outputs.shape == (4096, 8192)


def test_naive_tiled_matmul_is_far_from_peak():
    # The tutorial's first kernel reloads both operands for every tile and reaches ~11% of peak on trn1.
    profile = nki.benchmark(kernels.matmul_tiled, target="trn1", execute=False)(
        spec(2048, 2048, dtype=nl.bfloat16), spec(2048, 2048, dtype=nl.bfloat16)).profile
    assert profile.bound == "DMA"
    assert 0.03 < profile.tensor_peak_fraction < 0.2


@pytest.mark.parametrize("name, make_args", [
    ("softmax", lambda: (spec(4096, 1024),)),
    ("layernorm", lambda: (spec(4096, 1024), spec(1024), spec(1024))),
    ("rmsnorm", lambda: (spec(4096, 1024), spec(1024))),
])
def test_normalisation_kernels_are_within_1_3x_of_dma_bound_on_trn2(name, make_args):
    profile = nki.benchmark(getattr(kernels, name), target="trn2", execute=False)(*make_args()).profile
    assert profile.bound == "DMA"
    assert profile.dma_bytes >= 2 * 4096 * 1024 * 4
    assert profile.latency_us <= 1.3 * profile.dma_bound_us


def test_bf16_softmax_needs_4kib_per_partition_transfers_to_approach_dma_bound():
    x = spec(4096, 1024, dtype=nl.bfloat16)
    one_row = nki.benchmark(kernels.softmax, target="trn2", execute=False)(x).profile
    two_rows = nki.benchmark(kernels.softmax, target="trn2", execute=False)(x, rows_per_partition=2).profile
    assert one_row.latency_us > 1.3 * one_row.dma_bound_us  # 2 KiB rows: 75% of DMA bandwidth
    assert two_rows.latency_us <= 1.3 * two_rows.dma_bound_us


def _scale_rows(single_buffer):
    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        if single_buffer:
            tile = nl.ndarray((128, cols), dtype=x.dtype)
            result = nl.ndarray((128, cols), dtype=x.dtype)
        for t in range(rows // 128):
            if not single_buffer:
                tile = nl.ndarray((128, cols), dtype=x.dtype)
                result = nl.ndarray((128, cols), dtype=x.dtype)
            nisa.dma_copy(dst=tile, src=x[t * 128:(t + 1) * 128])
            nisa.activation(dst=result, op=nl.exp, data=tile)
            nisa.dma_copy(dst=out[t * 128:(t + 1) * 128], src=result)
        return out
    return kernel


def test_loads_overlap_compute_only_when_buffers_rotate():
    x = spec(4096, 2048)
    single = nki.benchmark(_scale_rows(single_buffer=True), execute=False)(x).profile
    rotating = nki.benchmark(_scale_rows(single_buffer=False), execute=False)(x).profile
    assert rotating.latency_us <= 1.15 * rotating.dma_bound_us
    # One buffer: each load waits for the previous tile's compute and store (write-after-read).
    assert single.latency_us > 1.5 * rotating.latency_us
    # Same work either way.
    assert single.dma_bytes == rotating.dma_bytes and single.elementwise_ops == rotating.elementwise_ops


def test_reusing_the_bytes_of_a_dead_tile_waits_for_its_last_access():
    # Each iteration's two tiles take 192 KiB of trn2's 224 KiB, so every iteration must reuse the bytes
    # of the previous one: rotating buffers cannot help and loads wait for the previous compute.
    x = spec(1024, 24 * 1024)
    crowded = nki.benchmark(_scale_rows(single_buffer=False), execute=False)(x).profile
    assert crowded.peak_sbuf_bytes_per_partition == 2 * 96 * 1024
    assert crowded.latency_us > 1.25 * crowded.dma_bound_us  # load, compute and store serialise


def test_cross_engine_dependencies_pay_a_semaphore_hand_off():
    def chain(engine):
        def kernel():
            a = nl.ndarray((128, 64), dtype=nl.float32)
            nisa.memset(dst=a, value=1.0)
            nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=1.0, engine=engine)
        return kernel

    same = nki.benchmark(nki.jit(chain(nisa.engine.vector)), execute=False)().profile
    other = nki.benchmark(nki.jit(chain(nisa.engine.scalar)), execute=False)().profile
    vector_ns, scalar_ns = 64 / 0.96, 64 / 1.2
    assert same.latency_us * 1000 == pytest.approx(2 * vector_ns)
    assert other.latency_us * 1000 == pytest.approx(vector_ns + TRN2.sync_ns + scalar_ns)


def test_generations_order_sensibly():
    x = spec(4096, 1024)
    dma_bound = [nki.benchmark(kernels.softmax, target=t, execute=False)(x).latency_us for t in TARGETS]
    assert dma_bound[0] > dma_bound[1] > dma_bound[2]  # 272 < 368 < 528 GB/s
    a, b = spec(2048, 2048, dtype=nl.bfloat16), spec(2048, 2048, dtype=nl.bfloat16)
    tensor_bound = {t: nki.benchmark(kernels.matmul_blocked, target=t, execute=False)(
        a, b, tiles_m=8, tiles_n=2, tiles_k=8).profile for t in TARGETS}
    assert tensor_bound["trn2"].bound == "TensorE"
    # trn1's TensorE clocks higher (2.8 vs 2.4 GHz); trn2 and trn3 share TensorE numbers.
    assert tensor_bound["trn1"].latency_us < tensor_bound["trn2"].latency_us
    assert tensor_bound["trn3"].latency_us == pytest.approx(tensor_bound["trn2"].latency_us, rel=0.05)
    assert TRN1.tensor_peak_flops_bf16 == pytest.approx(91.75e12, rel=1e-3)
    assert TRN2.tensor_peak_flops_bf16 == pytest.approx(78.64e12, rel=1e-3)


# --------------------------------------------------------------------------------- API and report
def test_benchmark_executes_and_reports(rng):
    x = rng.standard_normal((256, 512)).astype(np.float32)
    result = nki.benchmark(kernels.softmax, target="trn1")(x)
    np.testing.assert_array_equal(result.outputs, nki.simulate(kernels.softmax)(x))
    assert result.latency_us == result.profile.latency_us > 0
    text = result.report()
    for label in ("trn1", "latency", "bound: DMA", "TensorE", "VectorE", "ScalarE", "GpSimdE", "DMA-bound time"):
        assert label in text
    usage = {u.engine: u for u in result.profile.engines}
    assert usage["VectorE"].instructions == 2 * 3 and usage["DMA"].instructions == 4
    assert all(0 <= u.utilisation <= 1 for u in usage.values())


def test_simulate_can_return_the_profile_and_cost_only_returns_specs(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    outputs, profile = nki.simulate(kernels.softmax, profile=True)(x)
    assert outputs.shape == (128, 64) and profile.target == "trn2"
    spec_out = nki.benchmark(kernels.softmax, execute=False)(x).outputs
    assert spec_out == nki.TensorSpec.of((128, 64), nl.float32)
    with pytest.raises(nki.NKISimulationError, match=r"placeholder \[128, 64\] float32 with no values"):
        nki.simulate(kernels.softmax)(spec(128, 64))


def test_target_comes_from_the_environment_unless_given(monkeypatch):
    x = spec(128, 64)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    assert nki.benchmark(kernels.softmax, execute=False)(x).profile.target == "trn1"
    assert nki.benchmark(kernels.softmax, target="trn3", execute=False)(x).profile.target == "trn3"
    bench = nki.benchmark(kernels.softmax, execute=False)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    assert bench(x).profile.target == "trn1", "the environment is read once, when the API is called"
