"""The launch helpers kernel authors call (simulate_kernel, baremetal, benchmark, profile, jit options) and
the import aliases."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kernels_nki01 as k1
import kernels_nki02 as k2
import neuroncc.nki
from neuronxcc import nki
import neuronxcc.nki.language as nl


def test_baremetal_decorator_forms_return_outputs(rng):
    a = rng.standard_normal((128, 32)).astype(np.float32)
    b = rng.standard_normal((128, 32)).astype(np.float32)
    np.testing.assert_array_equal(nki.baremetal()(k1.add_masked)(a, b), a + b)
    np.testing.assert_array_equal(nki.baremetal(k1.add_masked, save_neff_name="file.neff")(a, b), a + b)


def test_benchmark_decorator_reports_latency_percentiles_like_nki(rng):
    q, k, v = ((rng.random((128, 512), dtype=np.float32) - 0.5) for _ in range(3))
    bench = nki.benchmark(warmup=5, iters=10)(k1.attention_blocked)
    result = bench(*(nki.bfloat16_array(t) for t in (q, k, v)))
    latency = bench.benchmark_result.nc_latency
    assert latency.get_latency_percentile(50) == latency.get_latency_percentile(99) == result.latency_us > 0
    with pytest.raises(AssertionError, match="percentile 42"):
        latency.get_latency_percentile(42)


def test_profile_writes_the_simulated_timeline_as_a_trace_file(tmp_path, rng):
    lhs_t = rng.standard_normal((256, 256)).astype(np.float32)
    rhs = rng.standard_normal((256, 512)).astype(np.float32)
    out = nki.profile(working_directory=str(tmp_path), save_neff_name="file.neff",
                      save_trace_name="profile.ntff", profile_nth=2)(k2.mm_tiled)(lhs_t, rhs)
    np.testing.assert_allclose(out, lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)
    trace = json.loads((tmp_path / "profile.json").read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sum(e["name"] == "nc_matmul" for e in slices) == 2 * 1 * 2
    assert {e["cat"] for e in slices} >= {"TensorE", "DMA", "VectorE"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    summary = json.loads((tmp_path / "profile_summary.json").read_text())
    assert summary["cores"][0]["latency_us"] == pytest.approx(max(e["ts"] + e["dur"] for e in slices), rel=1e-6)


def test_jit_modes_and_platform_target(rng):
    x = rng.random((128, 512), dtype=np.float32)
    simulated = nki.jit(k1.square_corner.fn, mode="simulation", platform_target="trn1")
    assert nki.benchmark(simulated)(x).profile.target == "trn1"
    with pytest.raises(AssertionError, match="mode 'gpu'"):
        nki.jit(k1.square_corner.fn, mode="gpu")


def test_import_aliases_give_the_simulator_under_aws_names():
    import nki as aliased
    import neuronxcc.nki.isa as legacy_isa

    assert aliased is neuroncc.nki and nki is neuroncc.nki
    assert legacy_isa is neuroncc.nki.isa and legacy_isa.vector_engine is legacy_isa.engine.vector


def test_import_aliases_never_shadow_a_real_installation(tmp_path):
    fake = tmp_path / "nki"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    script = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        import neuroncc.nki
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            installed = neuroncc.nki.install_import_aliases()
        import nki
        assert nki.REAL and installed == ["neuronxcc"], installed
        assert any("'nki' is installed" in str(w.message) for w in caught)
        assert neuroncc.nki.install_import_aliases(force=True) == ["nki", "neuronxcc"]
        import nki
        assert nki is neuroncc.nki
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_typing_and_compiler_hints_are_accepted_and_checked():
    import neuronxcc.nki.compiler as ncc
    import neuronxcc.nki.typing as nt

    assert isinstance(nl, object) and nt.tensor[128, 512].spec == (128, 512) and nt.mutable_tensor[4].mutable

    @nki.jit
    def bad_psum_hint():
        nl.ndarray((4, nl.par_dim(128), 1024), dtype=nl.float32,
                   buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2,)))

    with pytest.raises(AssertionError, match="exceeds one 2048-byte bank"):
        bad_psum_hint()

    @nki.jit
    def bad_sbuf_hint():
        nl.ndarray((2, nl.par_dim(128), 64 * 1024), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))

    with pytest.raises(AssertionError, match="exceed the 212992 bytes NKI leaves to kernels"):
        bad_sbuf_hint.__class__(bad_sbuf_hint.fn, target="trn2")()

    @nki.jit
    def unaligned_sbuf_hint():  # NKI's attention tutorial uses 4-byte aligned base addresses: a warning here
        nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4,
                                                                                           num_free_tiles=(2,)))

    with pytest.warns(UserWarning, match="base_addr 4 is not 64-byte aligned"):
        unaligned_sbuf_hint()
    with ncc.no_reorder():
        pass
    assert ncc.multi_buffer(2).factor == 2
