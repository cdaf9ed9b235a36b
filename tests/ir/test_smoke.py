import numpy as np

from neuroncc.ir import Builder, DType, TensorType, interpret, parse, print_function


def test_build_print_parse_interpret():
    b = Builder("f")
    x = b.param(TensorType((4, 8), DType.f32), "x")
    w = b.param(TensorType((8, 3), DType.f32), "w")
    y = b.op("relu", b.op("mm", x, w))
    fn = b.build([b.op("sum", y, dims=(1,))])
    text = print_function(fn)
    assert parse(text) == fn
    xs = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    ws = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
    (out,) = interpret(fn, [xs, ws])
    np.testing.assert_allclose(out, np.maximum(xs @ ws, 0).sum(1), rtol=1e-5)
