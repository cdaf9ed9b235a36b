"""``neuroncc opt`` on good and bad input, through a real subprocess: exit codes, one-line errors, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOOD = """func @f(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
  %0 = relu %x : tensor<2x3xf32>
  return %0
}
"""


def opt(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NEURONCC_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", "neuroncc.cli", "opt", *args], input=stdin, capture_output=True,
                          env=env, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("neuroncc: error: "), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in stderr
    return stderr


def test_opt_prints_a_valid_file(tmp_path):
    path = tmp_path / "good.nir"
    path.write_text(GOOD)
    result = opt(str(path))
    assert result.returncode == 0 and result.stdout.decode() == GOOD and not result.stderr


def test_opt_reads_stdin():
    result = opt("-", stdin=GOOD.encode())
    assert result.returncode == 0 and result.stdout.decode() == GOOD


def test_invalid_utf8_on_stdin_is_an_input_error():
    # was: UnicodeDecodeError -> "internal error", exit 3
    assert_one_line_error(opt("-", stdin=b"\xff\xfe func"), "<stdin>: not UTF-8 text")


# ---- malformed input, through a real process ------------------------------------------------------------

from .malformed import MALFORMED  # noqa: E402 - the corpus is shared with test_parse_errors.py


@pytest.mark.parametrize("name, text, kind, location, fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_opt_exits_2_with_one_line_on_malformed_input(tmp_path, name, text, kind, location, fragment):
    path = tmp_path / "bad.nir"
    path.write_text(text, encoding="utf-8")
    result = opt(str(path))
    stderr = assert_one_line_error(result, fragment)
    assert result.stdout == b""
    if location:
        assert f"{path}:{location}: " in stderr


@pytest.mark.parametrize("setup, fragment", [
    (lambda d: d / "missing.nir", "missing.nir: no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "latin1.nir").write_bytes(b"// caf\xe9\n") and d / "latin1.nir", "not a UTF-8 text file"),
])
def test_opt_refuses_unusable_files(tmp_path, setup, fragment):
    assert_one_line_error(opt(str(setup(tmp_path))), fragment)
