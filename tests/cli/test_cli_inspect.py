"""``neuroncc inspect`` (in-process): IR, IR after passes, kernels."""

import re

from cli_testing import run_in_process

from neuroncc.ir import parse, print_function
from neuroncc.passes.pipeline import default_pipeline


def _sections(text):
    parts = re.split(r"^// ----- (.+) -----$", text, flags=re.M)
    return dict(zip(parts[1::2], (p.strip() for p in parts[2::2])))


def test_ir_is_the_imported_graph_and_parses(good_pt2, capsys):
    result = run_in_process(capsys, "inspect", str(good_pt2))
    assert result.returncode == 0, result.stderr
    ((title, text),) = _sections(result.stdout).items()
    assert title == "IR of inference @small"
    fn = parse(text)
    assert print_function(fn).strip() == text
    assert [p.hint for p in fn.params] == ["p_linear_weight", "p_linear_bias", "b_offset", "x"]


def test_after_each_pass(good_pt2, capsys):
    result = run_in_process(capsys, "inspect", str(good_pt2), "--after", "all", "--target", "interp")
    assert result.returncode == 0, result.stderr
    sections = _sections(result.stdout)
    passes = [p.split("{")[0] for p in default_pipeline("interp").split(",")]
    assert [t.split(" after ")[1] for t in sections] == [f"{i:02d}-{p}" for i, p in enumerate(passes, 1)]
    for text in sections.values():
        parse(text)

    fused = run_in_process(capsys, "inspect", str(good_pt2), "--after", "fuse", "--target", "interp")
    ((title, text),) = _sections(fused.stdout).items()
    assert title.endswith("after 03-fuse") and " kernel " in text


def test_kernels_and_train(classifier_pt2, capsys):
    result = run_in_process(capsys, "inspect", str(classifier_pt2), "--train", "--kernels", "--ir", "--target",
                            "interp")
    assert result.returncode == 0, result.stderr
    titles = list(_sections(result.stdout))
    assert titles == ["IR of forward @classifier_forward", "IR of backward @classifier_backward",
                      "kernels of forward @classifier_forward (target interp)",
                      "kernels of backward @classifier_backward (target interp)"]
    assert re.search(r"\d+ ops -> \d+ launches: \d+ kernels", result.stdout)


def test_unavailable_views_are_one_line_errors(good_pt2, capsys):
    for flags, needle in ((["--nki"], "not available in this build"), (["--cost"], "not available"),
                          (["--after", "nosuchpass"], "no pass of that name")):
        result = run_in_process(capsys, "inspect", str(good_pt2), *flags)
        assert result.returncode == 2, flags
        assert result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr
