"""`neuroncc opt` for pass developers: --verify-diagnostics, located errors, split input, stdin, -o, no torch."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuroncc.cli import main
from neuroncc.cli.diagnostics import Diagnostic, SourceIndex, check_expected, expected_errors, locate
from neuroncc.errors import InputError, PassError, VerifyError

ROOT = Path(__file__).resolve().parents[2]

HUGE = """func @huge(%x: tensor<4x1xf32>) -> (tensor<4x100000xf32>) {
  // expected-error@+1 {{%big has a dimension of size 100000}}
  %big = expand %x {shape = [4, 100000]} : tensor<4x100000xf32>
  return %big
}
"""
FINE = """func @fine(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = exp %x : tensor<4xf32>
  return %0
}
"""


def opt(tmp_path, text, *args):
    path = tmp_path / "input.nir"
    path.write_text(text)
    return main(["opt", str(path), *args]), path


def test_matching_diagnostics_exit_0_and_print_the_other_cases(tmp_path, capsys):
    code, _ = opt(tmp_path, FINE + "// -----\n" + HUGE, "-p", "static-shape{max_dim=1000}", "--split-input-file",
                  "--verify-diagnostics")
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out == FINE


def test_a_wrong_message_or_line_is_reported_with_exit_1(tmp_path, capsys):
    text = HUGE.replace("size 100000", "size 99").replace("@+1", "@+1", 1)
    code, path = opt(tmp_path, text, "-p", "static-shape{max_dim=1000}", "--verify-diagnostics")
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err[0] == (f"neuroncc: error: {path}:2: expected error on line 3 was not produced: {{{{%big has a "
                      "dimension of size 99}} (line 3 got: static-shape: func @huge: op 'expand': %big has a "
                      "dimension of size 100000 (more than 1000); is a size unresolved?)")
    assert err[1].startswith(f"neuroncc: error: {path}:3:3: unexpected error: static-shape: func @huge")
    code, path = opt(tmp_path, HUGE.replace("@+1", "@+2"), "-p", "static-shape{max_dim=1000}",
                     "--verify-diagnostics")
    assert code == 1 and "expected error on line 4 was not produced" in capsys.readouterr().err


def test_an_expected_error_that_does_not_happen_is_reported(tmp_path, capsys):
    code, path = opt(tmp_path, HUGE, "-p", "static-shape", "--verify-diagnostics")
    assert code == 1
    assert capsys.readouterr().err == (f"neuroncc: error: {path}:2: expected error on line 3 was not produced: "
                                       "{{%big has a dimension of size 100000}}\n")


def test_errors_without_the_flag_are_one_line_each_at_their_line(tmp_path, capsys):
    code, path = opt(tmp_path, HUGE + "// -----\n" + HUGE.replace("@huge", "@again"), "-p",
                     "static-shape{max_dim=1000}", "--split-input-file")
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 2
    assert err[0].startswith(f"neuroncc: error: {path}:3:3: static-shape: func @huge: op 'expand': %big")
    assert err[1].startswith(f"neuroncc: error: {path}:9:3: static-shape: func @again: op 'expand': %big")
    code, path = opt(tmp_path, HUGE, "-p", "static-shape{max_dim=1000}")
    assert code == 2 and capsys.readouterr().err.startswith(f"neuroncc: error: {path}:3:3: static-shape:")


def test_annotation_forms(tmp_path):
    text = "\n".join([
        "a  // expected-error {{same line}}",
        "// expected-error@+2 {{two below}}",
        "b",
        "c",
        "// expected-error@-3 {{three above}}",
        "// expected-error@1 {{absolute}}",
    ])
    found = expected_errors(text, "t.nir")
    assert [(e.line, e.annotation_line, e.text) for e in found] == [
        (1, 1, "same line"), (4, 2, "two below"), (2, 5, "three above"), (1, 6, "absolute")]
    for bad, message in [("// expected-error@+9 {{x}}", "points outside the file"),
                         ("// expected-error @+1 oops", "needs the message text in {{...}}"),
                         ("// expected-warning {{x}}", "expected-warning is not supported"),
                         ("// expected-error@x {{y}}", "cannot read the line offset '@x'")]:
        with pytest.raises(InputError, match=message.replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")):
            expected_errors(bad + "\n", "t.nir")


def test_check_expected_matches_each_diagnostic_once():
    want = expected_errors("x // expected-error {{boom}}\n// expected-error@-1 {{boom}}\n", "t.nir")
    problems = check_expected(want, [Diagnostic(1, 3, "boom!")], "t.nir")
    assert problems == ["t.nir:2: expected error on line 1 was not produced: {{boom}}"]


@pytest.mark.parametrize("message,where", [
    ("static-shape: func @g: op 'exp': %e has 10 elements", (7, 3)),  # the value's definition
    ("tile{target=trn2}: kernel 'k0': tile too big", (8, 3)),  # the kernel with that name
    ("my-pass: func @g: op 'relu': refused", (9, 5)),  # the one op of that name in the function
    ("my-pass: func @g: op 'exp' appears twice", (6, 1)),  # ambiguous op: the function
    ("my-pass: refused %x", (1, 9)),  # a parameter (first function that has it)
    ("something else entirely", (1, 1)),  # nothing named: the first function
])
def test_pass_errors_are_located_by_what_they_name(message, where):
    text = "\n".join([
        "func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {",
        "  %e = exp %x : tensor<4xf32>",
        "  return %e",
        "}",
        "",
        "func @g(%y: tensor<4xf32>) -> (tensor<4xf32>) {",
        "  %e = exp %y : tensor<4xf32>",
        '  %k = kernel %e {name = "k0"} : tensor<4xf32> region(%p: tensor<4xf32>) {',
        "    %r = relu %p : tensor<4xf32>",
        "    %s = exp %r : tensor<4xf32>",
        "    return %s",
        "  }",
        "  return %k",
        "}",
    ])
    diagnostic = locate(PassError(message), text, "t.nir")
    assert (diagnostic.line, diagnostic.column) == where and diagnostic.message == message


def test_located_verifier_errors_keep_their_location():
    diagnostic = locate(VerifyError("t.nir:4:7: func @f: bad\nsecond line"), "", "t.nir")
    assert diagnostic == Diagnostic(4, 7, "func @f: bad; second line")


def test_source_index_reads_region_parameters_and_results():
    index = SourceIndex("func @f(%a: tensor<f32>) -> (tensor<f32>) {\n"
                        "  %k, %l = kernel %a : tensor<f32>, tensor<f32> region(%p: tensor<f32>) {\n")
    assert index.locate("%p is odd") == (2, 56) and index.locate("%l!") == (2, 3)
    assert index.locate("%a") == (1, 9)


def test_stdin_output_file_and_empty_cases(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(("// only a comment\n// -----\n" + FINE).encode())))
    out = tmp_path / "out.nir"
    assert main(["opt", "-", "--split-input-file", "-o", str(out)]) == 0
    assert out.read_text() == FINE and capsys.readouterr().out == ""


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    assert main(["opt"]) == 2
    assert capsys.readouterr().err == "neuroncc: error: opt: give a .nir file, or - to read stdin\n"
    assert main(["opt", str(tmp_path / "missing.nir")]) == 2
    assert "missing.nir: no such file" in capsys.readouterr().err
    code, _ = opt(tmp_path, FINE, "-o", str(tmp_path / "no" / "such" / "dir.nir"))
    assert code == 2 and "cannot write" in capsys.readouterr().err


def test_print_ir_after_a_pass_goes_to_stderr(tmp_path, capsys):
    code, _ = opt(tmp_path, FINE, "-p", "canonicalize,fuse", "--print-ir-after", "canonicalize")
    out, err = capsys.readouterr()
    assert code == 0 and "kernel" in out
    assert err.startswith("// -----// IR Dump After canonicalize //----- //\nfunc @fine") and "kernel" not in err


def test_opt_does_not_import_torch(tmp_path):
    path = tmp_path / "f.nir"
    path.write_text(FINE)
    code = ("import sys; from neuroncc.cli import main; code = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'neuroncc opt imported torch'; sys.exit(code)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["opt", str(path), "-p", "canonicalize,static-shape,fuse,layout,tile,plan-memory"],
                 ["opt", "--list-passes"]):
        run = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
