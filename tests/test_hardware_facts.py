"""Each hardware number is defined once, in ``neuroncc/hardware``; the passes, code generators and simulator
import it. The source of ``passes/``, ``codegen/`` and ``nki/`` is scanned (with ``ast``, so comments and
docstrings may still say "128 partitions") for literals of the facts distinctive enough to find: the
partition count, the moving-tile / PSUM-bank width, SBUF and PSUM sizes, engine clocks, DMA bandwidths,
and cache-line alignments.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import neuroncc.nki as nki
import neuroncc.nki.language as nl
from neuroncc.hardware.host import CACHE_LINE_BYTES, HostCpu, host_cpu
from neuroncc.hardware.neuron import NEURON_CORES
from neuroncc.hardware.neuron import dma_efficiency

ROOT = Path(__file__).resolve().parents[1] / "neuroncc"
SCANNED = ("passes", "codegen", "nki")
#: Files that may spell hardware numbers, and why.
ALLOWED = {
    "nki/kernels.py": "reference kernels, written as a kernel author writes them (tile_rows=128, ...)",
    "nki/calibration.py": "the calibration cases' problem shapes",
}
KIB = 1024
#: int literals: partitions (also GEMM M and K), the moving tile and PSUM bank in fp32, SBUF bytes (16 KiB of
#: PSUM is left out: 16384 is also a CPU policy number)
FACT_INTS = {128, 512} | {n * KIB for n in (192, 224, 256)}
#: the factors of ``n * 1024`` / ``n * KIB`` spellings of the SBUF and PSUM sizes
KIB_FACTORS = {16, 192, 224, 256}
#: float literals: engine clocks (GHz), DMA bandwidths (GB/s), the fixed DMA cost (us), the semaphore (ns).
FACT_FLOATS = {2.8, 2.4, 1.12, 0.96, 1.4, 1.2, 272.0, 368.0, 528.0, 1.3, 60.0}


def _stray_facts(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in FACT_INTS:
            found.append(f"{node.lineno}: {node.value}")
        elif isinstance(node, ast.Constant) and type(node.value) is float and node.value in FACT_FLOATS:
            found.append(f"{node.lineno}: {node.value}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            sides = (node.left, node.right)
            if any(isinstance(s, ast.Constant) and s.value in KIB_FACTORS for s in sides) and any(
                    (isinstance(s, ast.Constant) and s.value == KIB) or (isinstance(s, ast.Name) and s.id == "KIB")
                    for s in sides):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg == "align" and isinstance(node.value, ast.Constant):
            found.append(f"{node.lineno}: align={node.value.value} (a cache line: CACHE_LINE_BYTES)")
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "align"
                                                  for t in node.targets) and isinstance(node.value, ast.Constant):
            found.append(f"{node.lineno}: .align = {node.value.value} (a cache line: CACHE_LINE_BYTES)")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and \
                isinstance(node.right, ast.Constant) and node.right.value == CACHE_LINE_BYTES:
            found.append(f"{node.lineno}: % {CACHE_LINE_BYTES} (a cache line: CACHE_LINE_BYTES)")
    return found


def _scanned_files() -> list[Path]:
    return [path for package in SCANNED for path in sorted((ROOT / package).rglob("*.py"))
            if path.relative_to(ROOT).as_posix() not in ALLOWED]


@pytest.mark.parametrize("path", _scanned_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_hardware_number_outside_the_hardware_package(path):
    assert _stray_facts(path) == [], f"import these from neuroncc.hardware instead ({path.relative_to(ROOT)})"


def test_the_scan_finds_stray_facts(tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text("P = 128\nSBUF = 224 * 1024\nclock = 0.96\nx.align = 64\nif n % 64: pass\n")
    assert len(_stray_facts(stray)) == 5


def test_the_simulator_reads_the_same_facts():
    assert nki.TARGETS is NEURON_CORES and nki.Target is type(NEURON_CORES["trn2"])
    assert nki.TARGET_ENV_VAR == "NEURON_PLATFORM_TARGET_OVERRIDE"
    core = NEURON_CORES["trn2"]
    assert (nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax) == \
        (core.partitions, core.stationary_free, core.moving_free)
    assert (nl.tile_size.psum_fmax, nl.tile_size.psum_num_banks) == (core.psum_free_fp32, core.psum_banks)
    assert [NEURON_CORES[t].sbuf_partition_bytes for t in ("trn1", "trn2", "trn3")] == [192 * KIB, 224 * KIB,
                                                                                         256 * KIB]
    assert dma_efficiency(4096) == 1.0 and dma_efficiency(2048) == 0.75 and dma_efficiency(16) == dma_efficiency(64)


def test_host_cpu_as_llvm_sees_it():
    host = host_cpu()
    assert host is host_cpu()  # read once
    assert host.name and host.cores >= 1 and host.f32_lanes * 32 == host.vector_bits
    assert host.fingerprint == (f"{host.triple} {host.name} {host.features} llc={host.last_level_cache_bytes} "
                                f"streams>={host.stream_footprint_bytes}")
    widths = {"+avx,+avx2,-avx512f": 256, "+avx,+avx512f": 512, "+sse2,-avx": 128, "+neon": 128}
    for features, bits in widths.items():
        assert HostCpu(name="cpu", features=features, triple="t", cores=2).vector_bits == bits


def test_the_last_level_cache_size_is_read_from_sysfs(tmp_path):
    from neuroncc.hardware.host import last_level_cache_bytes

    for index, (kind, size) in enumerate([("Data", "48K"), ("Instruction", "32K"), ("Unified", "2048K"),
                                          ("Unified", "491520K")]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "type").write_text(kind + "\n")
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 491520 * 1024
    assert last_level_cache_bytes(tmp_path / "absent") == 0  # the OS does not say: unknown


def test_outputs_are_streamed_only_when_the_kernels_data_fills_a_quarter_of_the_last_level_cache():
    mb = 1 << 20
    assert HostCpu(name="cpu", features="", last_level_cache_bytes=32 * mb).streams_outputs(33 * mb)
    assert not HostCpu(name="cpu", features="", last_level_cache_bytes=480 * mb).streams_outputs(64 * mb)
    assert HostCpu(name="cpu", features="", last_level_cache_bytes=480 * mb).streams_outputs(128 * mb)
    assert HostCpu(name="cpu", features="").streams_outputs(1)  # unknown size: the emitter's threshold decides


def test_a_last_level_cache_larger_than_the_cores_keep_counts_as_what_they_keep():
    """A VM reports its host's whole L3 (480 MiB for 2 cores): past 16 MiB a core, the cores bound the footprint
    from which outputs stream (session 32: 64 MiB kernels 0.70-0.79x the time streamed there, 8-16 MiB ones
    1.01-1.48x)."""
    mb = 1 << 20
    vm = HostCpu(name="cpu", features="", last_level_cache_bytes=480 * mb, cores=2)
    assert vm.stream_footprint_bytes == 32 * mb
    assert vm.streams_outputs(32 * mb) and vm.streams_outputs(64 * mb) and not vm.streams_outputs(16 * mb)
    assert not dataclasses.replace(vm, cores=8).streams_outputs(64 * mb)  # a quarter of the L3 is less: 120 MiB
    # Zen 3 and Zen 4 (32 MB L3, 2 cores): a quarter, 8 MiB, as before; on one core too
    for cores in (1, 2, 0):
        zen = HostCpu(name="znver3", features="", last_level_cache_bytes=32 * mb, cores=cores)
        assert zen.stream_footprint_bytes == 8 * mb
    assert HostCpu(name="cpu", features="", cores=2).stream_footprint_bytes == 0  # unknown size: always


def test_onednn_takes_products_from_64m_multiply_adds_with_avx512_and_only_big_weights_without():
    avx512 = HostCpu(name="znver4", features="+avx2,+fma,+avx512f")
    avx2 = HostCpu(name="znver3", features="+avx2,+fma,-avx512f")
    assert avx512.onednn_takes(1024, 256, 256) and not avx512.onednn_takes(1024, 256, 255)
    assert avx512.onednn_takes(2048, 2048, 512) and avx512.onednn_takes(256, 1024, 4096)
    # the small classifier's products (issue #18) stay on MKL: oneDNN's fixed cost per call is most of them
    assert not avx512.onednn_takes(512, 64, 192) and not avx512.onednn_takes(512, 128, 64)
    # AVX2 (hardware/host.py): MKL below 512M multiply-adds, and on the transformer block's 1-4 MB weights
    assert not avx2.onednn_takes(2048, 2048, 512) and not avx2.onednn_takes(2048, 512, 2048)
    assert avx2.onednn_takes(256, 1024, 4096) and avx2.onednn_takes(256, 4096, 1024)  # the MLP's 16 MB weights
    assert not avx2.onednn_takes(64, 1024, 4096)  # 16 MB, but 268M multiply-adds



def test_small_products_are_generated_code_with_avx2_and_avx512():
    avx512 = HostCpu(name="znver4", features="+avx2,+fma,+avx512f")
    avx2 = HostCpu(name="znver3", features="+avx2,+fma,-avx512f")
    # the small classifier's products (issue #18; 2.1M-6.3M multiply-adds) are register tiles on AVX-512,
    # below oneDNN's bound, and on AVX2 in 2 x 6 tiles, below the 33.6M weight gradients MKL runs faster there
    assert avx512.small_mm_max_macs == 1 << 25 and not avx512.onednn_takes(1, 1, avx512.small_mm_max_macs)
    assert 512 * 64 * 192 <= avx2.small_mm_max_macs < 256 * 1024 * 128
    assert (avx512.matmul_tile_vectors, avx2.matmul_tile_vectors) == (0, 2)
