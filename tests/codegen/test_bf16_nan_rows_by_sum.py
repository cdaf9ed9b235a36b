"""bf16 softmax's max pass on Zen 4 without its NaN flag and without storing the row it widens
(``CpuTarget.finds_bf16_row_nans_by_the_sum``, ``CpuTarget.widens_bf16_rows_again_in_the_exp_pass``; session 34
bfsoft34): the max loop is its loads, widenings and maxima only, the exp loop widens the words again, a row whose sum
is NaN runs its max pass again with the flag (``codegen/llvm/nan_rows.py``). The same bits for NaN rows of every
kind. Float32 softmax on Zen 4, bf16 LayerNorm and Intel's AVX-512 cores keep their code."""

from __future__ import annotations

import re

import numpy as np
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_nan_rows_by_sum import _nan_rows
from test_pairs import AVX2, _softmax_bits, layernorm_graph, to_bits
from test_widened_exp_rows import ROW_BUFFER, _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose, choose_by

BLOCK = re.compile(r"\n\.LBB\d+_\d+:")
PROPERTIES = ("finds_bf16_row_nans_by_the_sum", "widens_bf16_rows_again_in_the_exp_pass")


def _main_code(monkeypatch) -> None:
    """Both decisions off: the code before them."""
    choose(monkeypatch, **dict.fromkeys(PROPERTIES, False))


def _max_loops(asm: str) -> list[str]:
    """The loop blocks taking a row's maxima (``vmaxps`` without the exp's FMAs): the max pass, and with
    ``finds_bf16_row_nans_by_the_sum`` its rerun with the flag where a row's sum is NaN."""
    return [block for block in BLOCK.split(asm)
            if "vmaxps" in block and "vfmsub" not in block and "jne" in block and "vmovntdq" not in block]


def _lean(block: str) -> bool:
    """Whether a max loop has no NaN flag (``vpmaxud``) and stores nothing (no widened row): loads, widenings and
    maxima only."""
    stores = [line for line in block.splitlines() if line.strip().startswith("vmov") and "(" in line.split(",")[-1]]
    return "vpmaxud" not in block and not stores


def _exp_loops(asm: str) -> list[str]:
    """The exp pass's loop blocks (with ``finds_bf16_row_nans_by_the_sum`` its rerun's too)."""
    return [block for block in BLOCK.split(asm) if "vscalefps" in block and "jne" in block]


def test_zen4_takes_both_and_other_cpus_keep_their_decisions():
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert zen4.finds_bf16_row_nans_by_the_sum and zen4.widens_bf16_rows_again_in_the_exp_pass
    assert zen4.reruns_the_exp_pass_only_for_another_max and not zen4.finds_row_nans_by_the_sum
    assert not intel.finds_bf16_row_nans_by_the_sum and not intel.widens_bf16_rows_again_in_the_exp_pass
    assert zen3.finds_bf16_row_nans_by_the_sum and not zen3.widens_bf16_rows_again_in_the_exp_pass


def test_zen4_bf16_max_loop_without_flag_and_stores(monkeypatch):
    zen4 = CpuTarget("znver4", ZEN4)
    softmax = _softmax_bits(2201, 1024)  # (4 MiB out: streamed, the write delayed)
    ir_text, asm = _assembly(softmax, zen4)
    assert _lean(_max_loops(asm)[0])  # (the max pass; its rerun keeps the flag)
    assert all("vpslld" in block for block in _exp_loops(asm))  # (the exp loop widens the words again)
    assert "fcmp uno" in ir_text  # (a NaN sum reruns the max pass)
    _main_code(monkeypatch)
    main_ir, main_asm = _assembly(softmax, zen4)
    assert not any(_lean(block) for block in _max_loops(main_asm)) 
    assert not any("vpslld" in block for block in _exp_loops(main_asm))
    assert len(ROW_BUFFER.findall(main_ir)) == len(ROW_BUFFER.findall(ir_text)) + 1  # (the widened row's)


def test_zen4_float32_softmax_and_bf16_layernorm_as_before(monkeypatch):
    # (float32 softmax's own flagless next-row max, session 36, is ``test_next_row_max_nans_by_sum.py``'s: off here)
    choose(monkeypatch, finds_next_row_max_nans_by_the_sum=False)
    zen4, intel = CpuTarget("znver4", ZEN4), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    functions = (_softmax(1030, 1024), layernorm_graph(64, 1024))
    code = [_assembly(fn, zen4) for fn in functions] + [_assembly(_softmax_bits(2201, 1024), intel)]
    assert all("vpmaxud" in block for block in _max_loops(code[0][1]))  # (float32 softmax keeps its NaN flag)
    _main_code(monkeypatch)
    assert [_assembly(fn, zen4) for fn in functions] + [_assembly(_softmax_bits(2201, 1024), intel)] == code


def test_bf16_nan_rows_give_the_same_bits(rng, monkeypatch):
    x = to_bits(np.resize(_nan_rows(rng, 1033), (2201, 1024)))
    fn = fuse_whole_function(_softmax_bits(2201, 1024))
    results = []
    for on in (True, False):
        for name in PROPERTIES:
            value = getattr(CpuTarget, name)
            choose_by(monkeypatch, **{name: lambda target, v=value, on=on: on and v.fget(target)})
        for threads in (1, 2):
            (out,) = build_cpu_executable(fn, {"threads": threads})(x)
            results.append(np.asarray(out).view(np.uint16).copy())
        monkeypatch.undo()
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
