"""docs/writing-a-pass.md can't rot: its code is the example package, and its steps run as written.

The steps run in a temporary directory with the tutorial's commands on PATH: ``neuroncc`` (this checkout),
``python``, ``lit``, ``filecheck``, ``pytest`` (this interpreter's), and a stand-in ``pip`` that installs
into a temporary ``--target`` directory on PYTHONPATH instead of the shared environment. The pip install
builds a real wheel and its dist-info registers the pass through the ``neuroncc.passes`` entry point, so
this test also covers an out-of-tree pass in ``neuroncc opt -p`` and in ``torch.compile``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tutorial import example_files, output_problem, read_steps

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "writing-a-pass.md"
EXAMPLE = ROOT / "examples" / "neuroncc-example-pass"

PIP_STAND_IN = """#!/bin/sh
# The tutorial's `pip install [-e] DIR`, installed into $TUTORIAL_SITE (never the shared environment).
[ "$1" = install ] || { echo "pip stand-in: only 'pip install' is supported" >&2; exit 2; }
shift
args=""
for arg in "$@"; do [ "$arg" = "-e" ] || args="$args $arg"; done
exec "{python}" -m pip install -q --no-deps --no-build-isolation --no-index --target "$TUTORIAL_SITE" $args
"""


def test_tutorial_code_is_the_example_package():
    written = {step.path: step.text for step in read_steps(TUTORIAL.read_text()) if step.kind == "file"}
    shipped = example_files(EXAMPLE)
    assert sorted(shipped) == sorted(p for p in written if p.startswith(f"{EXAMPLE.name}/"))
    for path, text in shipped.items():
        assert written[path] == text, f"{path} differs between docs/writing-a-pass.md and examples/"


def test_every_code_block_is_a_step():
    steps = read_steps(TUTORIAL.read_text())
    assert {"file", "run", "output"} <= {s.kind for s in steps}
    for previous, step in zip(steps, steps[1:]):
        if step.kind == "output":
            assert previous.kind == "run", f"writing-a-pass.md:{step.line}: output that follows no command"


def tool(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.slow
def test_tutorial_steps_run_as_written(tmp_path):
    work, site, tools = tmp_path / "work", tmp_path / "site", tmp_path / "bin"
    for directory in (work, site, tools):
        directory.mkdir()
    python = sys.executable
    tool(tools, "neuroncc", f'#!/bin/sh\nexec "{python}" -m neuroncc.cli "$@"\n')
    tool(tools, "python", f'#!/bin/sh\nexec "{python}" "$@"\n')
    tool(tools, "pip", PIP_STAND_IN.replace("{python}", python))
    env = {
        "PATH": os.pathsep.join([str(tools), str(Path(python).parent), "/usr/bin", "/bin"]),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]),
        "TUTORIAL_SITE": str(site),
        "HOME": str(tmp_path),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "NEURONCC_CACHE_DIR": str(tmp_path / "cache"),
        "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis"),
    }
    output = None
    for step in read_steps(TUTORIAL.read_text()):
        where = f"docs/writing-a-pass.md:{step.line}"
        if step.kind == "file":
            path = work / step.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(step.text)
        elif step.kind == "run":
            run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step.text], cwd=work, env=env,
                                 capture_output=True, text=True, timeout=600)
            output = run.stdout + run.stderr
            assert run.returncode == 0, f"{where}: `{step.text.strip()}` failed ({run.returncode}):\n{output}"
        else:
            problem = output_problem(step.text, output)
            assert problem is None, f"{where}: {problem}"
