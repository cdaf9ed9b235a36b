"""Test support shared by the test suites, the tools and out-of-tree pass packages.

    from neuroncc.testing import graphs, assert_pass_preserves_semantics

    @given(graphs())
    def test_my_pass_keeps_semantics(fn):
        assert_pass_preserves_semantics("my-pass", fn)

IR level (numpy only, importing this package does not load torch): random graph strategies (``graphs``,
growing from ``graph_state`` with the families of ``graph_families``), semantic checks (``semantics``), model
graphs (``models``), graph reduction (``reduce``), the lit/FileCheck format (``lit_format``), statistical checks of
random draws (``distributions``: moments, Kolmogorov-Smirnov, chi-square). Torch level
(imported on their own): the OpInfo sweep (``opinfo*``) and the differential fuzzer (``fuzz*``), which drive
``torch.compile``. Nothing in the compiler imports this package.

May import: everything in neuroncc (it sits above every layer).
"""

from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import (
    PassSemanticsError, assert_pass_preserves_semantics, assert_same_results, check_pass_on, random_inputs,
)

__all__ = ["PassSemanticsError", "assert_pass_preserves_semantics", "assert_same_results", "check_pass_on",
           "graphs", "random_inputs"]
