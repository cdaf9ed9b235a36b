"""`neuroncc opt`: pipelines, IR dumps on stderr, split input files, exit codes."""

from neuroncc.cli import main
from neuroncc.ir.cases import split_input

GOOD = """func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = exp %x : tensor<4xf32>
  return %0
}
"""
BAD = """func @g(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = exp %y : tensor<4xf32>
  return %0
}
"""


def test_opt_runs_a_pipeline_and_prints_dumps_on_stderr(tmp_path, capsys):
    path = tmp_path / "f.nir"
    path.write_text(GOOD)
    assert main(["opt", str(path), "-p", "fuse,tile{target=cpu}", "--print-ir-after", "fuse"]) == 0
    out, err = capsys.readouterr()
    assert 'name = "fused_0_exp", target = "cpu"' in out
    assert err.startswith("// -----// IR Dump After fuse //----- //\nfunc @f")
    assert "tile" not in err


def test_split_input_file_reports_each_error_at_its_line_and_goes_on(tmp_path, capsys):
    path = tmp_path / "two.nir"
    path.write_text(BAD + "// -----\n" + GOOD)
    assert main(["opt", str(path), "--split-input-file", "-p", "canonicalize"]) == 2
    out, err = capsys.readouterr()
    assert "func @f" in out and "func @g" not in out
    assert f"{path}:2:" in err and "use of undefined value %y" in err


def test_split_input_keeps_line_numbers():
    chunks = split_input("a\n// -----\nb\nc\n//   -----\nd\n")
    assert [c.strip() for c in chunks] == ["a", "b\nc", "d"]
    assert chunks[1].splitlines()[2] == "b" and chunks[2].splitlines()[5] == "d"  # lines 3 and 6 of the file


def test_unknown_pass_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "f.nir"
    path.write_text(GOOD)
    assert main(["opt", str(path), "-p", "fuze"]) == 2
    assert "unknown pass 'fuze'" in capsys.readouterr().err
