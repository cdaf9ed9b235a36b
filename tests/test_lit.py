"""Runs the lit/FileCheck pass tests (tests/filecheck) so the one pytest command covers them.

Every in-tree pass must have ``tests/filecheck/<pass-name>.nir`` whose RUN lines run that pass.
"""

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from neuroncc.passes import IN_TREE_PASSES, Pass
from neuroncc.testing.lit_format import round_trip_problem

SUITE = Path(__file__).parent / "filecheck"


def filecheck_problems(passes, suite: Path) -> list[str]:
    """Passes without a ``<name>.nir`` in ``suite``, or whose file never runs them."""
    problems = []
    for cls in passes:
        path = suite / f"{cls.name}.nir"
        if not path.exists():
            problems.append(f"pass '{cls.name}' has no tests/filecheck/{cls.name}.nir")
            continue
        runs = [line for line in path.read_text().splitlines() if re.match(r"\s*//\s*RUN:", line)]
        if not any(re.search(rf"-p\s+'?[^']*\b{re.escape(cls.name)}\b", run) for run in runs):
            problems.append(f"tests/filecheck/{cls.name}.nir has no RUN line with -p ...{cls.name}...")
    return problems


def test_filecheck_suite():
    # -j 2: CI has two cores; each RUN line starts a Python process, so they overlap well.
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from lit.main import main; sys.exit(main())", "-j", "2", "-v", str(SUITE)],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    assert "Failed" not in run.stdout
    assert re.search(r"Passed\s*:\s*\d+", run.stdout), run.stdout[-2000:]


def test_every_in_tree_pass_has_a_filecheck_file():
    assert filecheck_problems(IN_TREE_PASSES, SUITE) == []


def test_a_pass_without_a_filecheck_file_is_reported(tmp_path):
    @dataclass(frozen=True)
    class Untested(Pass):
        name: ClassVar[str] = "untested"

    @dataclass(frozen=True)
    class NeverRun(Pass):
        name: ClassVar[str] = "never-run"

    (tmp_path / "never-run.nir").write_text("// RUN: neuroncc opt %s -p canonicalize | filecheck %s\n")
    assert filecheck_problems([Untested, NeverRun], tmp_path) == [
        "pass 'untested' has no tests/filecheck/untested.nir",
        "tests/filecheck/never-run.nir has no RUN line with -p ...never-run...",
    ]


def test_round_trip_check_reports_unparsable_input(tmp_path):
    bad = tmp_path / "bad.nir"
    bad.write_text("// RUN: true\nfunc @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {\n  %0 = frobnicate %x\n}\n")
    assert "unknown op 'frobnicate'" in round_trip_problem(str(bad))
    bad.write_text("// NO-ROUNDTRIP\n" + bad.read_text())
    assert round_trip_problem(str(bad)) is None


def test_round_trip_allows_unparsable_cases_that_expect_their_error(tmp_path):
    case = "func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {\n  %0 = exp %y : tensor<4xf32>\n  return %0\n}\n"
    path = tmp_path / "errors.nir"
    path.write_text(case)
    assert "use of undefined value %y" in round_trip_problem(str(path))
    path.write_text("// expected-error@+2 {{undefined}}\n" + case)
    assert round_trip_problem(str(path)) is None
