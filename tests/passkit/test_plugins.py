"""Out-of-tree passes through the ``neuroncc.passes`` entry-point group.

Fast tests put a hand-made distribution (a package and its ``.dist-info``) on sys.path; the last test
builds and installs the real example package with pip into a temporary directory and runs it in a fresh
process. (docs/writing-a-pass.md's test also runs that package through lit, pytest and torch.compile.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neuroncc.cli import main
from neuroncc.ir import parse
from neuroncc.passes import parse_pipeline, pass_registry, run_pipeline
from neuroncc.driver.cache_key import _plugin_source, pipeline_fingerprint

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "neuroncc-example-pass"

LABEL_PASS = '''
from dataclasses import dataclass, replace
from typing import ClassVar

from neuroncc.ir import Attrs
from neuroncc.passes import Pass


@dataclass(frozen=True)
class Label(Pass):
    """Record a label in the function's metadata."""

    name: ClassVar[str] = "label"
    text: str = "hello"

    def apply(self, fn, ctx):
        return replace(fn, metadata=Attrs({**fn.metadata, "label": self.text}))
'''

GRAPH = "func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {\n  %0 = exp %x : tensor<4xf32>\n  return %0\n}\n"


def install_fake(site: Path, package: str, source: str, entry_points: str, version: str = "1.0") -> None:
    """A package plus the dist-info pip would write for it (enough for importlib.metadata)."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(textwrap.dedent(source))
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[neuroncc.passes]\n{entry_points}\n")
    (info / "top_level.txt").write_text(f"{package}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    yield path
    for name in [m for m in sys.modules if m.split(".")[0].startswith("plug_")]:
        del sys.modules[name]


def test_a_plugin_pass_runs_in_pipelines_and_opt(site, tmp_path, capsys):
    install_fake(site, "plug_label", LABEL_PASS, "label = plug_label:Label")
    assert "label" in pass_registry().names()
    fn = run_pipeline('canonicalize,label{text="hi there"}', parse(GRAPH))
    assert fn.metadata["label"] == "hi there"
    path = tmp_path / "f.nir"
    path.write_text(GRAPH)
    assert main(["opt", str(path), "-p", "label{text=tagged}"]) == 0
    assert 'attributes {label = "tagged"}' in capsys.readouterr().out
    assert main(["opt", "--list-passes"]) == 0
    assert "label  [plug_label 1.0]\n    Record a label in the function's metadata.\n    text=hello\n" in \
        capsys.readouterr().out


@pytest.mark.parametrize("source,entry,message", [
    ("", "broken = plug_broken.missing:Pass", "pass 'broken': cannot load entry point 'plug_broken.missing:Pass'"),
    ("X = 1", "broken = plug_broken:X", "pass 'broken': entry point 'plug_broken:X' is not a Pass dataclass"),
    (LABEL_PASS, "broken = plug_broken:Label", "pass 'broken': entry point 'plug_broken:Label' defines a pass "
                                              "named 'label'"),
])
def test_a_broken_plugin_is_a_one_line_error_naming_it(site, tmp_path, capsys, source, entry, message):
    install_fake(site, "plug_broken", source, entry)
    path = tmp_path / "f.nir"
    path.write_text(GRAPH)
    assert main(["opt", str(path), "-p", "canonicalize"]) == 0  # loaded only when a pipeline names it
    capsys.readouterr()
    assert main(["opt", str(path), "-p", "broken"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"neuroncc: error: {message}") and err.count("\n") == 1
    assert main(["opt", "--list-passes"]) == 0
    assert f"broken  [plug_broken 1.0]\n    cannot load: {message}" in capsys.readouterr().out


def test_a_plugin_may_not_take_an_in_tree_name(site, tmp_path, capsys):
    install_fake(site, "plug_shadow", LABEL_PASS, "fuse = plug_shadow:Label")
    path = tmp_path / "f.nir"
    path.write_text(GRAPH)
    assert main(["opt", str(path), "-p", "canonicalize"]) == 2
    assert "entry point 'plug_shadow:Label' redefines the in-tree pass 'fuse'" in capsys.readouterr().err


def test_the_cache_key_follows_the_plugin_source(site):
    install_fake(site, "plug_label", LABEL_PASS, "label = plug_label:Label")
    assert pipeline_fingerprint("canonicalize,fuse") == "canonicalize,fuse"
    first = pipeline_fingerprint("canonicalize,label")
    assert first.startswith("canonicalize,label\nlabel: plug_label:Label plug_label 1.0 ")
    label = type(parse_pipeline("label").passes[0])
    (site / "plug_label" / "__init__.py").write_text(LABEL_PASS + "\n# edited\n")
    assert pipeline_fingerprint("canonicalize,label") == first  # cached per loaded class: same code running
    _plugin_source.cache_clear()
    assert pipeline_fingerprint("canonicalize,label") != first
    assert _plugin_source(label) != first.splitlines()[1]


@pytest.mark.slow
def test_the_example_package_installs_and_runs_in_opt(tmp_path):
    source, target = tmp_path / "neuroncc-example-pass", tmp_path / "site"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("Output", "build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    assert (target / "neuroncc_example_pass-0.1.0.dist-info" / "entry_points.txt").read_text().count("div-to-mul")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(target)])}
    graph = tmp_path / "scale.nir"
    graph.write_text("func @f(%x: tensor<4xbf16>) -> (tensor<4xbf16>) {\n"
                     "  %c = full {dtype = bf16, shape = [], value = -4.0} : tensor<bf16>\n"
                     "  %0 = div %x, %c : tensor<4xbf16>\n  return %0\n}\n")
    code = ("import sys; from neuroncc.cli import main; code = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'neuroncc opt imported torch'; sys.exit(code)")
    run = subprocess.run([sys.executable, "-c", code, "opt", str(graph), "-p", "canonicalize,div-to-mul"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "full {dtype = bf16, shape = [], value = -0.25}" in run.stdout and "mul %x" in run.stdout
