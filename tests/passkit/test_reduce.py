"""reduce_graph: IR-level delta debugging keeps only what makes a graph fail."""

from neuroncc.ir import parse
from neuroncc.testing.reduce import cut, prune, reduce_graph, size

GRAPH = parse("""func @f(%x: tensor<4xf32>, %y: tensor<4xf32>, %unused: tensor<2xi64>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = neg %x : tensor<4xf32>
  %b = exp %a : tensor<4xf32>
  %c = tanh %y : tensor<4xf32>
  %d = sub %b, %c : tensor<4xf32>
  %e = relu %d : tensor<4xf32>
  return %e, %c
}""")


def has_sub(fn):
    return any(op.name == "sub" for op in fn.walk())


def test_reduction_keeps_the_op_that_matters_and_fresh_parameters():
    reduced = reduce_graph(GRAPH, has_sub)
    assert [op.name for op in reduced.ops] == ["sub"]
    assert len(reduced.params) == 2 and len(reduced.outputs) == 1
    assert size(reduced) == (1, 1, 2)


def test_nothing_to_reduce_when_every_edit_stops_the_failure():
    assert reduce_graph(GRAPH, lambda fn: fn == GRAPH) is GRAPH


def test_cut_turns_results_into_parameters_and_prune_drops_what_is_dead():
    d = GRAPH.ops[3]
    fn = prune(cut(GRAPH, d))
    assert [op.name for op in fn.ops] == ["tanh", "relu"]
    assert [p.type.shape for p in fn.params] == [(4,), (4,)]  # %y (for tanh) and the cut result


def test_attempts_are_bounded():
    calls = []
    reduce_graph(GRAPH, lambda fn: calls.append(fn) or False, max_attempts=3)
    assert len(calls) == 3
