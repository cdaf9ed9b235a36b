"""Runs the lit/FileCheck pass tests (tests/filecheck) so the one pytest command covers them."""

import subprocess
import sys
from pathlib import Path

from neuroncc.testing.lit_format import round_trip_problem

SUITE = Path(__file__).parent / "filecheck"


def test_filecheck_suite():
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from lit.main import main; sys.exit(main())", "-v", str(SUITE)],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    assert "Failed" not in run.stdout


def test_every_pass_has_a_filecheck_file():
    from neuroncc.passes import IN_TREE_PASSES

    for cls in IN_TREE_PASSES:
        assert (SUITE / f"{cls.name}.nir").exists(), f"no tests/filecheck/{cls.name}.nir"


def test_round_trip_check_reports_unparsable_input(tmp_path):
    bad = tmp_path / "bad.nir"
    bad.write_text("// RUN: true\nfunc @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {\n  %0 = frobnicate %x\n}\n")
    assert "unknown op 'frobnicate'" in round_trip_problem(str(bad))
    bad.write_text("// NO-ROUNDTRIP\n" + bad.read_text())
    assert round_trip_problem(str(bad)) is None
