"""The test suite's memo of LLVM object code (neuroncc/testing/object_memo.py): a module compiled again in the
same process is the object code LLVM made for it the first time, byte for byte, and only for the same text,
tier and machine."""

from __future__ import annotations

import dataclasses
import os

import pytest

from neuroncc.codegen.llvm import jit
from neuroncc.errors import CodegenError
from neuroncc.testing import object_memo

MODULE = """define float @f(float %x) {
  %y = fmul contract float %x, %x
  ret float %y
}
"""

pytestmark = pytest.mark.skipif(os.environ.get("NEURONCC_TEST_OBJECT_MEMO") == "0", reason="memo turned off")


def _compile(text, tier=jit.Tier.OPTIMIZED, target=None):
    return jit._compile_module(text, None, jit.target_machine(target, tier), tier)


def test_the_test_processes_compile_each_module_once():
    memo = object_memo.MEMO
    assert memo is not None  # installed by tests/conftest.py
    text = MODULE.replace("@f", f"@f_{id(memo)}")  # a module no other test compiled
    hits, misses = memo.hits, memo.misses
    first = _compile(text)
    assert (memo.hits, memo.misses) == (hits, misses + 1)
    assert _compile(text) == first and (memo.hits, memo.misses) == (hits + 1, misses + 1)


def test_a_remembered_object_is_what_llvm_makes_again():
    text = MODULE.replace("@f", "@f_again")
    _compile(text)
    remembered = _compile(text)
    # a fresh compile, around the memo: LLVM's object code for the same input is the same bytes
    assert object_memo.ORIGINAL_COMPILE(text, None, jit.target_machine(), jit.Tier.OPTIMIZED) == remembered


def test_another_tier_or_machine_is_another_entry():
    memo = object_memo.MEMO
    text = MODULE.replace("@f", "@f_other")
    _compile(text)
    misses = memo.misses
    _compile(text, jit.Tier.QUICK)
    _compile(text, target=dataclasses.replace(jit.host_target(), name="x86-64", features=""))
    assert memo.misses == misses + 2


def test_a_module_that_fails_is_never_remembered():
    memo = object_memo.MEMO
    broken = "define float @g(float %x) {\n  ret float %undefined_value\n}\n"
    misses = memo.misses
    for _ in range(2):
        with pytest.raises(CodegenError):
            _compile(broken)
    assert memo.misses == misses + 2
