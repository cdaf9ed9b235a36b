"""Computed tables kept between processes (``codegen/llvm/table_files.py``): a bf16 table made once is read back by
a later process from the compile cache's ``tables/`` directory instead of being made again (~30-45 ms of a cold
compile per table on Zen 3), and only when it is whole; a directory that cannot be written keeps nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_bf16_tables import EVERY_INPUT, _unary_graph

from neuroncc.codegen.llvm import bf16_tables, jit, table_files
from neuroncc.driver.cache import TABLES_DIR, CompileCache
from neuroncc.driver.compile import compile_uncached, make_request
from neuroncc.driver.process_cache import CacheStats
from neuroncc.hardware.host import CpuTarget, compiling_for, host_cpu
from neuroncc.hardware.named_cpu import llvm_cpu_features, missing_features
from neuroncc.testing.choices import choose

SIZE = 2 * bf16_tables.ENTRIES


@pytest.fixture
def new_process(monkeypatch):
    """A process that has made no table yet and keeps none (what :func:`table_files.keep_in` sets is undone)."""
    monkeypatch.setattr(bf16_tables, "_TABLES", {})
    monkeypatch.setattr(bf16_tables, "_CONSTANTS", {})
    monkeypatch.setattr(table_files, "_DIRECTORY", [])
    choose(monkeypatch, looks_up_bf16_unary_math=True)


def _count_makes(monkeypatch) -> list[str]:
    made: list[str] = []
    real = bf16_tables._made

    def counted(maker: str, cpu: CpuTarget) -> bytes:
        made.append(maker)
        return real(maker, cpu)

    monkeypatch.setattr(bf16_tables, "_made", counted)
    return made


def _next_process(monkeypatch) -> None:
    monkeypatch.setattr(bf16_tables, "_TABLES", {})
    monkeypatch.setattr(bf16_tables, "_CONSTANTS", {})


def test_a_kept_table_is_read_back_instead_of_made(new_process, monkeypatch, tmp_path):
    table_files.keep_in(tmp_path)
    made = _count_makes(monkeypatch)
    first = bf16_tables.lookup_table("sigmoid", False, host_cpu())
    assert len(made) == 1 and len(list(tmp_path.iterdir())) == 1
    _next_process(monkeypatch)
    assert bf16_tables.lookup_table("sigmoid", False, host_cpu()) == first and len(made) == 1
    # another function, or the same one rounded with its NaN case, is another table
    bf16_tables.lookup_table("sigmoid", True, host_cpu())
    bf16_tables.lookup_table("tanh", False, host_cpu())
    assert len(made) == 3 and len(list(tmp_path.iterdir())) == 3


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-1])


def _flip_a_bit(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def _wrong_magic(path):
    data = path.read_bytes()
    path.write_bytes(b"X" + data[1:])


@pytest.mark.parametrize("damage", [_truncate, _flip_a_bit, _wrong_magic])
def test_a_damaged_table_is_made_again_and_rewritten(new_process, monkeypatch, tmp_path, damage):
    table_files.keep_in(tmp_path)
    made = _count_makes(monkeypatch)
    good = bf16_tables.lookup_table("exp", False, host_cpu())
    (kept,) = tmp_path.iterdir()
    damage(kept)
    _next_process(monkeypatch)
    assert bf16_tables.lookup_table("exp", False, host_cpu()) == good and len(made) == 2
    assert table_files.load(kept.name, SIZE) == good  # whole again


def test_nothing_is_kept_without_a_directory_or_where_it_cannot_be_written(new_process, monkeypatch, tmp_path):
    made = _count_makes(monkeypatch)
    bf16_tables.lookup_table("erf", False, host_cpu())
    _next_process(monkeypatch)
    bf16_tables.lookup_table("erf", False, host_cpu())
    assert len(made) == 2 and table_files.load("0" * 64, SIZE) is None
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    table_files.keep_in(blocked / "tables")
    _next_process(monkeypatch)
    bf16_tables.lookup_table("erf", False, host_cpu())  # no error: the table is only not kept
    assert len(made) == 3


def test_the_name_changes_with_what_made_the_table(monkeypatch):
    maker = bf16_tables._maker_module("gelu", False, host_cpu())
    name = bf16_tables._kept_name(maker, host_cpu())
    assert name == bf16_tables._kept_name(maker, host_cpu())
    assert name != bf16_tables._kept_name(bf16_tables._maker_module("gelu", True, host_cpu()), host_cpu())
    other = CpuTarget("znver3" if host_cpu().name == "znver4" else "znver4", host_cpu().features)  # (not the host's)
    assert name != bf16_tables._kept_name(bf16_tables._maker_module("gelu", False, other), other)
    monkeypatch.setattr(bf16_tables.llvmlite, "__version__", "0.0.0")
    assert name != bf16_tables._kept_name(maker, host_cpu())


def test_a_compile_through_the_cache_keeps_its_tables_for_the_next_process(new_process, monkeypatch, tmp_path):
    # the cache's compile path says where; a second process's compile of another graph reads the table back and
    # its kernel gives the same bits; a full clear deletes the tables
    cache = CompileCache(tmp_path / "cache", stats=CacheStats())
    made = _count_makes(monkeypatch)
    first = cache.get_or_compile(make_request(_unary_graph("sigmoid", {}), target="cpu"), compile_uncached)
    tables = tmp_path / "cache" / TABLES_DIR
    assert len(made) == 1 and len(list(tables.iterdir())) == 1
    assert oct(os.stat(tables).st_mode & 0o777) == "0o700"
    _next_process(monkeypatch)
    other = make_request(_unary_graph("sigmoid", {}), target="cpu", options={"threads": 1})  # another key
    second = CompileCache(tmp_path / "cache", stats=CacheStats()).get_or_compile(other, compile_uncached)
    assert len(made) == 1
    np.testing.assert_array_equal(second(EVERY_INPUT)[0], first(EVERY_INPUT)[0])
    removed, freed = cache.clear()
    assert removed == 2 and freed > SIZE and list(tables.iterdir()) == []


def test_making_a_table_compiles_once_per_process(new_process, monkeypatch):
    calls = []
    real = jit.compile_ir
    monkeypatch.setattr(jit, "compile_ir", lambda *a, **k: calls.append(1) or real(*a, **k))
    bf16_tables.lookup_table("log", False, host_cpu())
    bf16_tables.lookup_table("log", False, host_cpu())
    assert len(calls) == 1


def test_a_table_is_made_by_its_own_targets_code_whatever_the_process_compiles_for(new_process):
    # a polynomial's last bits follow the machine code LLVM makes of it for a CPU: AVX2's table made by an AVX-512
    # machine is not AVX2's kernels' own (a later build took one of each from the memo, session 36)
    host = host_cpu()
    if not host.has("avx512f"):
        pytest.skip("needs a host whose own code is not AVX2's")
    avx2 = CpuTarget("znver3", llvm_cpu_features("znver3", host.features))
    if missing_features(avx2.features, host.features):
        pytest.skip("the host cannot run znver3's code")
    assert bf16_tables.maker_cpu(avx2) is avx2 and bf16_tables.maker_cpu(host) is host
    maker = bf16_tables._maker_module("gelu", False, avx2)
    own, by_host = bf16_tables._made(maker, avx2), bf16_tables._made(maker, host)
    assert own != by_host, "the premise: the two machines' gelu tables differ"
    with compiling_for(None):  # the process compiles for the host (its thread's machine is AVX-512's)
        assert bf16_tables.lookup_table("gelu", False, avx2) == own
    with compiling_for("znver3"):
        bf16_tables._TABLES.clear()
        assert bf16_tables.lookup_table("gelu", False, avx2) == own
    # a CPU this host cannot run is made by the host's code (only emitted for, never run)
    beyond = CpuTarget("znver5", avx2.features + ",+avx512vp2intersect")
    if "avx512vp2intersect" not in host.features:
        assert bf16_tables.maker_cpu(beyond) is host
