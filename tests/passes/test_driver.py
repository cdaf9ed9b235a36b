"""driver.compile_graph runs the target's pipeline; NEURONCC_DUMP writes every stage."""

import numpy as np

from neuroncc.ir import parse
from neuroncc.passes import kernel_summary
from neuroncc.driver.compile import compile_graph
from neuroncc.testing import models
from neuroncc.testing.semantics import random_inputs


def test_the_default_pipeline_runs_before_the_target_builds():
    fn = models.softmax_graph(rows=4, cols=8)
    exe = compile_graph(fn, target="interp")
    assert kernel_summary(exe.function).kernel_names == ("fused_0_softmax",)
    assert "peak_bytes" in exe.function.metadata
    x = random_inputs(fn)[0]
    (out,) = exe(x)
    want = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, want / want.sum(1, keepdims=True), rtol=1e-6)


def test_pipeline_argument_and_option_override_the_default():
    fn = models.softmax_graph(rows=4, cols=8)
    # interp runs the lowered graph as it is (the cpu launcher wraps stray ops into kernels of its own).
    assert compile_graph(fn, target="interp", pipeline="canonicalize").function.ops[0].name == "amax"
    assert compile_graph(fn, target="interp", options={"verify_each": True}).function.ops[0].name == "kernel"
    assert compile_graph(fn, target="interp", options={"pipeline": ""}).function == fn  # no passes at all
    assert compile_graph(fn, target="interp", options={"pipeline": "static-shape"}).function.ops[0].name == "amax"


def test_neuroncc_dump_writes_each_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONCC_DUMP", str(tmp_path / "dump"))
    compile_graph(models.layer_norm_graph(rows=4, cols=8), target="interp")
    (stage_dir,) = (tmp_path / "dump").iterdir()
    assert stage_dir.name.startswith("layer_norm-")
    names = sorted(p.name for p in stage_dir.iterdir())
    assert names == ["00-input.nir", "01-canonicalize.nir", "02-static-shape.nir", "03-fuse.nir",
                     "04-layout.nir", "05-plan-memory.nir"]
    assert parse((stage_dir / "03-fuse.nir").read_text()).ops[0].name == "kernel"
