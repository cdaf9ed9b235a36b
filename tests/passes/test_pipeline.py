"""The pass manager: pipeline strings, typed options, the registry and its entry points, instrumentation."""

import io
import os
import time
from dataclasses import dataclass
from importlib import metadata
from typing import ClassVar

import pytest

from neuroncc.errors import PipelineError, VerifyError
from neuroncc.ir import Function, Op, Value, parse
from neuroncc.passes import (
    DEFAULT_PIPELINES, IN_TREE_PASSES, Canonicalize, Pass, PassContext, Pipeline, Tile, default_pipeline,
    parse_pipeline, pass_registry, run_pipeline,
)
from neuroncc.passes import pipeline as pipeline_module

SMALL = parse("""func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>) {
  %0 = relu %x : tensor<4x8xf32>
  %1 = exp %0 : tensor<4x8xf32>
  return %1
}
""")


def test_parse_pipeline_with_typed_options_round_trips():
    pipe = parse_pipeline("canonicalize,fuse,tile{target=trn2 tile=[128,512]}")
    assert [p.name for p in pipe.passes] == ["canonicalize", "fuse", "tile"]
    tile = pipe.passes[2]
    assert tile == Tile(target="trn2", tile=(128, 512))
    assert str(pipe) == "canonicalize,fuse,tile{target=trn2 tile=[128,512]}"
    assert parse_pipeline(str(pipe)) == pipe


def test_option_types_come_from_the_dataclass_fields():
    pipe = parse_pipeline("canonicalize{fold_limit=8 signed_zeros=false}, tile { target=cpu vector_width=16 }")
    assert pipe.passes[0] == Canonicalize(fold_limit=8, signed_zeros=False)
    assert pipe.passes[1].vector_width == 16
    assert parse_pipeline("") == Pipeline(())


@pytest.mark.parametrize("text,message", [
    ("fusee", "unknown pass 'fusee'"),
    ("tile{tiles=[1,2]}", "pass 'tile' has no option 'tiles'"),
    ("tile{target=trn9}", "must be one of cpu, trn1, trn2, trn3, got 'trn9'"),
    ("tile{tile=3}", "expects a list"),
    ("tile{tile=[a,b]}", "expects int, got 'a'"),
    ("tile{tile=[0,4]}", "tile must be two positive sizes"),
    ("canonicalize{signed_zeros=yes}", "expects true or false"),
    ("canonicalize{fold_limit=1 fold_limit=2}", "given twice"),
    ("canonicalize,", "expected a pass name, found the end"),
    ("canonicalize{fold_limit}", "expected '='"),
    ("canonicalize fuse", "expected ','"),
])
def test_pipeline_errors_name_the_problem(text, message):
    with pytest.raises(PipelineError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_pipeline(text)


def test_every_default_pipeline_parses_and_lists_in_tree_passes_only():
    names = {cls.name for cls in IN_TREE_PASSES}
    assert set(DEFAULT_PIPELINES) == {"cpu", "nki", "interp"}
    for text in DEFAULT_PIPELINES.values():
        assert {p.name for p in parse_pipeline(text).passes} <= names
    assert default_pipeline("nki-sim") == DEFAULT_PIPELINES["nki"]
    with pytest.raises(PipelineError, match="no default pipeline for target 'tpu'"):
        default_pipeline("tpu")


PLUGIN_SOURCE = '''
from dataclasses import dataclass
from typing import ClassVar
from neuroncc.passes import Pass

@dataclass(frozen=True)
class Rename(Pass):
    name: ClassVar[str] = "rename"
    to: str = "renamed"

    def apply(self, fn, ctx):
        from neuroncc.ir import Function
        return Function(self.to, fn.params, fn.ops, fn.outputs, fn.metadata)

class NotAPass:
    name = "bogus"
'''


@pytest.fixture
def plugin_entry_points(tmp_path, monkeypatch):
    (tmp_path / "fake_plugin.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = [metadata.EntryPoint("rename", "fake_plugin:Rename", "neuroncc.passes")]

    def fake_entry_points(group=None):
        return [e for e in entries if e.group == group]

    monkeypatch.setattr(pipeline_module.metadata, "entry_points", fake_entry_points)
    return entries


def test_out_of_tree_pass_from_an_entry_point(plugin_entry_points):
    pipe = parse_pipeline("canonicalize,rename{to=g}")
    assert run_pipeline(pipe, SMALL).name == "g"
    assert str(pipe) == "canonicalize,rename{to=g}"


def test_broken_entry_points_are_pipeline_errors(plugin_entry_points):
    plugin_entry_points.append(metadata.EntryPoint("bogus", "fake_plugin:NotAPass", "neuroncc.passes"))
    with pytest.raises(PipelineError, match="not a Pass dataclass"):
        parse_pipeline("bogus")
    plugin_entry_points.append(metadata.EntryPoint("other", "fake_plugin:Rename", "neuroncc.passes"))
    with pytest.raises(PipelineError, match="defines a pass named 'rename'"):
        parse_pipeline("other")
    plugin_entry_points.append(metadata.EntryPoint("missing", "no_such_module:X", "neuroncc.passes"))
    with pytest.raises(PipelineError, match="cannot load entry point"):
        parse_pipeline("missing")
    plugin_entry_points.append(metadata.EntryPoint("fuse", "fake_plugin:Rename", "neuroncc.passes"))
    with pytest.raises(PipelineError, match="redefines the in-tree pass 'fuse'"):
        parse_pipeline("canonicalize")


def _counted_scans(monkeypatch) -> list[str]:
    """Count the scans of the installed entry points (the real ones)."""
    scans, real = [], metadata.entry_points

    def counted(**kwargs):
        scans.append(kwargs.get("group"))
        return real(**kwargs)

    monkeypatch.setattr(pipeline_module.metadata, "entry_points", counted)
    return scans


def test_the_entry_points_are_scanned_once_while_sys_path_is_unchanged(monkeypatch):
    monkeypatch.setattr(pipeline_module, "SCAN_SETTLE_NS", 0)
    scans = _counted_scans(monkeypatch)
    default = pipeline_module.default_pipeline("cpu")
    for _ in range(3):
        parse_pipeline(default)
        pass_registry()
    assert scans == ["neuroncc.passes"]


def test_a_plugin_installed_after_a_scan_is_found(tmp_path, monkeypatch):
    """Into a directory already on sys.path (its mtime changes), or on a new sys.path entry."""
    site = tmp_path / "site"
    site.mkdir()
    (tmp_path / "fake_plugin.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(site))
    os.utime(site, ns=(time.time_ns() - 10**10,) * 2)
    monkeypatch.setattr(pipeline_module, "SCAN_SETTLE_NS", 0)
    scans = _counted_scans(monkeypatch)
    assert "rename" not in pass_registry().names()
    assert "rename" not in pass_registry().names() and len(scans) == 1
    info = site / "fake_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[neuroncc.passes]\nrename = fake_plugin:Rename\n")
    assert "rename" in pass_registry().names() and len(scans) == 2
    assert run_pipeline(parse_pipeline("rename{to=g}"), SMALL).name == "g"
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    pass_registry()
    assert len(scans) == 3


def test_a_scan_of_just_changed_directories_is_not_kept(monkeypatch):
    monkeypatch.setattr(pipeline_module, "SCAN_SETTLE_NS", 10**18)  # every directory "just changed"
    scans = _counted_scans(monkeypatch)
    pass_registry()
    pass_registry()
    assert len(scans) == 2


@dataclass(frozen=True)
class BreakIR(Pass):
    """Returns a function whose op reads a value defined nowhere."""

    name: ClassVar[str] = "break-ir"

    def apply(self, fn, ctx):
        stray = Value(fn.params[0].type)
        op = Op("relu", (stray,), (Value(stray.type),))
        return Function(fn.name, fn.params, (op,), op.results)


def test_verifier_runs_after_every_pass_when_asked():
    with pytest.raises(VerifyError, match="IR is invalid after pass 'break-ir'.*not defined"):
        run_pipeline([BreakIR()], SMALL, PassContext(verify_each=True))
    run_pipeline([BreakIR()], SMALL, PassContext(verify_each=False))  # not checked: the caller opted out


def test_print_ir_after_all_and_after_one_pass():
    stream = io.StringIO()
    run_pipeline("canonicalize,fuse", SMALL, PassContext(print_after_all=True, ir_stream=stream))
    text = stream.getvalue()
    assert text.count("// -----// IR Dump After ") == 2
    assert text.index("IR Dump After canonicalize") < text.index("IR Dump After fuse")
    assert "kernel" in text.split("IR Dump After fuse")[1]
    stream = io.StringIO()
    run_pipeline("canonicalize,fuse", SMALL, PassContext(print_after=frozenset({"fuse"}), ir_stream=stream))
    assert "After canonicalize" not in stream.getvalue() and "After fuse" in stream.getvalue()


def test_dump_dir_receives_every_stage(tmp_path):
    run_pipeline("canonicalize,fuse", SMALL, PassContext(dump_dir=tmp_path / "d"))
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert files == ["00-input.nir", "01-canonicalize.nir", "02-fuse.nir"]
    assert parse((tmp_path / "d" / "02-fuse.nir").read_text()).ops[0].name == "kernel"
