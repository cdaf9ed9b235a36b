"""fold-one-hot-sums: the sums it folds give the same bits (signed zeros, NaN and inf scales, targets out of
range included), and cross-entropy's gradient from torch loses its sum over the classes."""

import numpy as np
import pytest

from neuroncc.ir import interpret, parse
from neuroncc.passes import FoldOneHotSums, PassContext, run_pipeline
from neuroncc.testing.semantics import assert_pass_preserves_semantics

GRADIENT = """func @gradient(%t: tensor<6x1xi64>, %s: tensor<6x1xf32>, %x: tensor<6x9xf32>) -> (tensor<6x9xf32>) {{
  %i = iota {{dtype = i64, length = 9}} : tensor<9xi64>
  %r = reshape %i {{shape = [1, 9]}} : tensor<1x9xi64>
  %e = eq %r, %t : tensor<6x9xbool>
  %zero = full {{dtype = f32, shape = [], value = {zero}}} : tensor<f32>
  %minus = full {{dtype = f32, shape = [], value = -1.0}} : tensor<f32>
  %w = where %e, %minus, %zero : tensor<6x9xf32>
  %m = mul {scaled} : tensor<6x9xf32>
  %sum = sum %m {{dims = [1], keepdim = {keepdim}}} : tensor<{summed}xf32>
  %y = mul %x, %sum{reshaped} : tensor<6x9xf32>
  %d = sub %m, %y : tensor<6x9xf32>
  return %d
}}"""


def _gradient(zero: str, scale_first: bool, keepdim: bool):
    summed = "6x1" if keepdim else "6"
    reshaped = "" if keepdim else "_k"
    text = GRADIENT.format(zero=zero, scaled="%s, %w" if scale_first else "%w, %s", keepdim=str(keepdim).lower(),
                           summed=summed, reshaped=reshaped)
    if not keepdim:  # the row sums back as a column
        text = text.replace("  %y = mul", "  %sum_k = reshape %sum {shape = [6, 1]} : tensor<6x1xf32>\n  %y = mul")
    return parse(text)


def _inputs():
    t = np.array([[0], [8], [9], [-1], [3], [4]], dtype=np.int64)  # 9 and -1: no class matches
    s = np.array([[0.5], [-0.0], [np.inf], [np.nan], [-2.0], [0.0]], dtype=np.float32)
    x = np.linspace(-3, 3, 54, dtype=np.float32).reshape(6, 9)
    return [t, s, x]


@pytest.mark.parametrize("zero", ["0.0", "-0.0"])
@pytest.mark.parametrize("scale_first", [False, True])
@pytest.mark.parametrize("keepdim", [True, False])
def test_folded_sums_keep_every_bit(zero, scale_first, keepdim):
    fn = _gradient(zero, scale_first, keepdim)
    after = assert_pass_preserves_semantics(FoldOneHotSums(), fn, _inputs())
    assert "sum" not in [op.name for op in after.ops]
    for want, got in zip(interpret(fn, _inputs()), interpret(after, _inputs())):
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32))  # NaN payloads and zero signs too


def test_a_sum_of_only_zeros_keeps_the_sums_sign():
    fn = _gradient("-0.0", False, True)
    t, s, x = _inputs()
    t[:] = 20  # nothing matches: each row sums -0.0 * s, which is +0.0 (a sum starts from +0.0)
    s[:] = 3.0
    want, got = interpret(fn, [t, s, x])[0], interpret(FoldOneHotSums().apply(fn, PassContext()), [t, s, x])[0]
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


@pytest.mark.parametrize("classes", [11, 100])  # 11: canonicalize folds the iota to a constant
def test_cross_entropy_backward_from_torch_loses_its_class_sum(classes):
    torch = pytest.importorskip("torch")
    from torch._functorch.aot_autograd import aot_function

    from neuroncc.frontend.importer import import_graph
    from neuroncc.frontend.lowering.decompositions import decomposition_table

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm

    logits = torch.randn(4, classes, requires_grad=True)
    target = torch.tensor([1, 10, 0, 3])
    compiled = aot_function(torch.nn.functional.cross_entropy, fw_compiler=keep, bw_compiler=keep,
                            decompositions=decomposition_table())
    compiled(logits, target).backward()
    fn = import_graph(graphs[-1], "cross_entropy_backward").function
    before = run_pipeline("canonicalize", fn, PassContext())
    after = run_pipeline("canonicalize,fold-one-hot-sums", fn, PassContext())

    def class_sums(f):
        return [op for op in f.ops if op.name == "sum" and op.operands[0].type.shape == (4, classes)]

    assert len(class_sums(before)) == 1 and not class_sums(after)
