"""``neuroncc.testing.choices``: a test's override of a CPU decision reaches every target and refuses names
the target does not have (a renamed decision must not leave a test overriding nothing)."""

import pytest

from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose, choose_by

ZEN4 = CpuTarget("znver4", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq")
AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f")


def test_a_choice_reaches_every_target(monkeypatch):
    choose(monkeypatch, small_mm_max_macs=7, caches_variance_deviations=False)
    assert ZEN4.small_mm_max_macs == AVX2.small_mm_max_macs == 7
    assert not ZEN4.caches_variance_deviations and not AVX2.caches_variance_deviations


def test_a_rule_reads_the_target(monkeypatch):
    choose_by(monkeypatch, small_mm_max_macs=lambda target: target.vector_bits)
    assert (ZEN4.small_mm_max_macs, AVX2.small_mm_max_macs) == (512, 256)


def test_a_misspelt_or_non_decision_name_fails_naming_it(monkeypatch):
    before = ZEN4.small_mm_max_macs
    with pytest.raises(AttributeError, match="small_mm_max_mac'"):
        choose(monkeypatch, small_mm_max_macs=0, small_mm_max_mac=0)
    assert ZEN4.small_mm_max_macs == before  # nothing chosen when one name is wrong
    with pytest.raises(TypeError, match="streams_outputs"):
        choose(monkeypatch, streams_outputs=True)
