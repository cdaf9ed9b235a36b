from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import assert_pass_preserves_semantics

from neuroncc_example_pass import DivToMul


def test_div_to_mul_preserves_semantics():
    # focus=["div"]: about one op in four divides, by parameters, powers of two and other constants
    assert assert_pass_preserves_semantics(DivToMul(), graphs(focus=["div"])) >= 500
