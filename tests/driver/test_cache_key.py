"""The cache key: stable under renaming, sensitive to each component alone, explained by its components."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from cache_testing import sample_function

from neuroncc.ir import DType, parse, print_function
from neuroncc.driver.cache_key import (
    BuildEnvironment,
    UncacheableRequestError,
    component_differences,
    compute_key,
)
from neuroncc.driver.compile_request import CompileRequest
from neuroncc.driver.compile import make_request

COMPONENTS = ["graph", "constants", "inputs", "target", "host", "options", "pipeline", "neuroncc_version",
              "neuroncc_source", "torch_version", "llvmlite_version", "format_version"]


def _digests(key) -> dict[str, str]:
    return {c.name: c.digest for c in key.components}


def test_components_are_named_in_a_fixed_order():
    key = compute_key(make_request(sample_function()))
    assert [c.name for c in key.components] == COMPONENTS
    assert len(key.key) == 64 and all(len(c.digest) == 64 for c in key.components)


def test_names_hints_and_function_name_do_not_change_the_key():
    named = sample_function(name="mlp", hints=True)
    anonymous = sample_function(name="graph_7", hints=False)
    assert print_function(named) != print_function(anonymous)
    assert compute_key(make_request(named)).key == compute_key(make_request(anonymous)).key


def test_reparsed_graph_has_the_same_key():
    fn = sample_function()
    from neuroncc.ir import collect_resources

    again = parse(print_function(fn), resources=collect_resources(fn))
    assert compute_key(make_request(fn)).key == compute_key(make_request(again)).key


def test_option_order_does_not_change_the_key():
    fn = sample_function()
    a = compute_key(make_request(fn, options={"a": 1, "b": [1, 2]}))
    b = compute_key(make_request(fn, options={"b": [1, 2], "a": 1}))
    assert a.key == b.key


def _environment(**changes) -> BuildEnvironment:
    return dataclasses.replace(BuildEnvironment.current(), **changes)


# variant name -> (request kwargs changed alone, environment changes, components expected to differ)
VARIANTS = {
    "graph op": (dict(fn=sample_function(activation="sigmoid")), {}, {"graph"}),
    "constant data": (dict(fn=sample_function(constant_seed=1)), {}, {"graph", "constants"}),
    "input shape": (dict(fn=sample_function(batch=2)), {}, {"graph", "inputs"}),
    "input strides": (dict(fn=sample_function(x_strides=(1, 4))), {}, {"graph", "inputs"}),
    "input dtype": (dict(fn=sample_function(dtype=DType.bf16)), {}, {"graph", "inputs", "constants"}),  # W too
    "target": (dict(target="nki-sim", pipeline="canonicalize"), {}, {"target"}),
    "options": (dict(options={"tile": 64}), {}, {"options"}),
    "pipeline": (dict(pipeline="canonicalize,fuse"), {}, {"pipeline"}),
    "neuroncc version": ({}, dict(neuroncc_version="9.9.9"), {"neuroncc_version"}),
    "neuroncc source": ({}, dict(neuroncc_source="0" * 64), {"neuroncc_source"}),
    "torch version": ({}, dict(torch_version="2.14.0"), {"torch_version"}),
    "llvmlite version": ({}, dict(llvmlite_version="0.51.0"), {"llvmlite_version"}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_component_changed_alone_changes_the_key(variant):
    request_changes, environment_changes, expected = VARIANTS[variant]
    base_fn = sample_function()
    # Explicit pipeline: a target's default pipeline differs per target, which would change two components.
    base = compute_key(make_request(base_fn, target="interp", pipeline="canonicalize"))
    fields = {"fn": base_fn, "target": "interp", "pipeline": "canonicalize", "options": None} | request_changes
    changed = compute_key(make_request(fields.pop("fn"), **fields), _environment(**environment_changes))
    assert changed.key != base.key
    assert set(component_differences(_digests(base), _digests(changed))) == expected


def test_host_component_comes_from_the_target_codec(monkeypatch):
    from neuroncc.driver import artifact

    codec = dataclasses.replace(artifact.ARTIFACT_CODECS["interp"], host_fingerprint=lambda: "some-other-cpu")
    base = compute_key(make_request(sample_function(), target="interp"))
    monkeypatch.setitem(artifact.ARTIFACT_CODECS, "interp", codec)
    changed = compute_key(make_request(sample_function(), target="interp"))
    assert component_differences(_digests(base), _digests(changed)) == ["host"]


def test_cpu_key_depends_on_the_host_cpu():
    cpu = compute_key(make_request(sample_function(), target="cpu")).component("host")
    interp = compute_key(make_request(sample_function(), target="interp")).component("host")
    assert cpu.digest != interp.digest and cpu.summary != "-"


def test_options_without_a_json_form_are_uncacheable():
    with pytest.raises(UncacheableRequestError):
        compute_key(CompileRequest(sample_function(), "interp", "", {"callback": print}))
    with pytest.raises(UncacheableRequestError):
        compute_key(CompileRequest(sample_function(), "interp", "", {"scale": float("nan")}))


def test_key_is_the_same_in_another_process(tmp_path):
    """Nothing process-specific (pids, hash seeds, paths, time) leaks into the key."""
    script = ("from cache_testing import sample_function\n"
              "from neuroncc.driver.cache_key import compute_key\n"
              "from neuroncc.driver.compile import make_request\n"
              "print(compute_key(make_request(sample_function())).key)\n")
    import os
    from pathlib import Path

    here = Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]),
               PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == compute_key(make_request(sample_function())).key


def test_an_in_tree_pipeline_is_its_own_fingerprint_without_scanning_for_plugins(monkeypatch):
    from neuroncc.errors import PipelineError
    from neuroncc.passes import pipeline as pipeline_module
    from neuroncc.driver.cache_key import pipeline_fingerprint

    scans = []
    monkeypatch.setattr(pipeline_module.metadata, "entry_points", lambda group=None: scans.append(group) or [])
    default = pipeline_module.default_pipeline("cpu")
    assert pipeline_fingerprint(default) == default
    assert scans == []
    with pytest.raises(PipelineError, match="unknown pass 'no-such-pass'"):  # the full parse names the problem
        pipeline_fingerprint("canonicalize,no-such-pass")
    assert scans == ["neuroncc.passes"]
