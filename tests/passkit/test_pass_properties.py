"""Every in-tree pass keeps what random graphs compute: >= 500 generated graphs per pass, bit for bit.

The graphs are small (at most 8 ops, dims up to 4) and mix dtypes, broadcasts, reductions, views, matmuls,
indexing, scatters, multi-result ops, size-0 dims and 0-d tensors (neuroncc.testing.random_graphs). Passes that
act on fused kernels run after ``fuse``. The whole file takes about a minute on one core.
"""

import pytest

from neuroncc.passes import IN_TREE_PASSES
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import PROPERTY_SETTINGS, assert_pass_preserves_semantics

#: The pipelines that exercise each in-tree pass (a pass missing here fails test_every_pass_is_covered).
PIPELINES = {
    "canonicalize": ["canonicalize"],
    "fold-one-hot-sums": ["fold-one-hot-sums", "canonicalize,fold-one-hot-sums"],
    "static-shape": ["static-shape"],
    "fuse": ["fuse"],
    "layout": ["layout", "fuse,layout{target=trn2}"],
    "tile": ["fuse,layout{target=cpu},tile{target=cpu}", "fuse,layout{target=trn2},tile{target=trn2}"],
    "plan-memory": ["fuse,plan-memory"],
    "lower-complex": ["lower-complex", "lower-complex{fft=dft},fuse"],
    "bf16-product-words": ["bf16-product-words", "bf16-product-words,fuse,layout{target=cpu}"],
}
CASES = [(name, pipeline) for name, pipelines in PIPELINES.items() for pipeline in pipelines]


def test_every_pass_is_covered():
    assert sorted(PIPELINES) == sorted(cls.name for cls in IN_TREE_PASSES)


@pytest.mark.parametrize("pass_name,pipeline", CASES, ids=[pipeline for _, pipeline in CASES])
def test_pass_preserves_semantics_on_random_graphs(pass_name, pipeline):
    checked = assert_pass_preserves_semantics(pipeline, graphs(max_ops=8), settings=PROPERTY_SETTINGS)
    assert checked >= 500
