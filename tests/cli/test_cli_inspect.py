"""``neuroncc inspect`` (in-process): IR, IR after passes, kernels, NKI kernels and their cost."""

import re

import pytest
import torch
from cli_testing import run_in_process

from neuroncc.ir import parse, print_function
from neuroncc.passes.pipeline import default_pipeline
from neuroncc.executors.nki_sim.costs import ENGINES


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


def test_unknown_pass_is_a_one_line_error(good_pt2, capsys):
    result = run_in_process(capsys, "inspect", str(good_pt2), "--after", "nosuchpass")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no pass of that name" in result.stderr, result.stderr


def test_nki_prints_the_generated_kernels(good_pt2, capsys):
    result = run_in_process(capsys, "inspect", str(good_pt2), "--nki")
    assert result.returncode == 0, result.stderr
    ((title, source),) = _sections(result.stdout).items()  # --nki alone: no IR section
    assert title == "NKI kernels of inference @small (nki-target trn2)"
    assert "import neuroncc.nki as nki" in source and "for func @small (target trn2)" in source
    kernels = re.findall(r"^@nki\.jit\ndef (\w+)\(", source, re.M)
    assert kernels and any("relu" in name or name.startswith("fused") for name in kernels), kernels
    compile(source, "<inspect --nki>", "exec")  # the printed module is valid Python as shown


def _cost_rows(text):
    """{kernel: (latency us, bound, {engine: percent})} from a cost table, and its total."""
    lines = text.splitlines()
    engines = lines[1].split()[4:9]
    rows, total = {}, None
    for line in lines[3:]:
        fields = line.split()
        if fields[0] == "total":
            total = float(fields[1])
        elif fields[1] != "host":
            rows[fields[0]] = (float(fields[1]), fields[2],
                               dict(zip(engines, (float(f.rstrip("%")) for f in fields[3:8]))))
    return rows, total


def test_cost_table_per_kernel_on_each_nki_target(good_pt2, capsys):
    totals = {}
    for target in ("trn2", "trn1"):
        result = run_in_process(capsys, "inspect", str(good_pt2), "--cost", "--nki-target", target)
        assert result.returncode == 0, result.stderr
        ((title, table),) = _sections(result.stdout).items()
        assert title == f"NKI cost of inference @small (nki-target {target})"
        assert table.startswith(f"NKI cost-model estimate for func @small on {target}")
        assert table.splitlines()[1].split()[:3] == ["kernel", "latency", "us"]
        rows, totals[target] = _cost_rows(table)
        assert rows, table
        for name, (latency, bound, usage) in rows.items():
            # the busiest engine when it is busy at least half the time (DMA-bound, or a compute engine), else
            # "latency" (fixed instruction and DMA latencies dominate small kernels)
            assert latency > 0 and bound in ("latency", *ENGINES), (name, bound)
            assert set(usage) == set(ENGINES)
            assert all(0 <= p <= 100 for p in usage.values()) and usage["DMA"] > 0
        assert totals[target] == pytest.approx(sum(r[0] for r in rows.values()), abs=0.02 * len(rows))
    assert totals["trn1"] != totals["trn2"]  # the target changes the estimate


def test_nki_and_cost_of_the_training_graphs(classifier_pt2, capsys):
    result = run_in_process(capsys, "inspect", str(classifier_pt2), "--train", "--nki", "--cost")
    assert result.returncode == 0, result.stderr
    sections = _sections(result.stdout)
    assert list(sections) == [f"NKI {view} of {kind} @classifier_{kind} (nki-target trn2)"
                              for kind in ("forward", "backward") for view in ("kernels", "cost")]
    for kind in ("forward", "backward"):
        emitted = set(re.findall(r"^def (\w+)\(", sections[f"NKI kernels of {kind} @classifier_{kind} "
                                                        "(nki-target trn2)"], re.M))
        rows, _ = _cost_rows(sections[f"NKI cost of {kind} @classifier_{kind} (nki-target trn2)"])
        assert set(rows) == emitted  # one row per emitted kernel
        assert any(bound == "DMA" for _, bound, _ in rows.values())


class _TransposedConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.ConvTranspose2d(2, 2, 3)

    def forward(self, x):
        return self.conv(x)


@pytest.fixture(scope="module")
def transposed_conv_pt2(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("pt2") / "convt.pt2"
    torch.export.save(torch.export.export(_TransposedConv(), (torch.randn(1, 2, 5, 5),)), path)
    return path


@pytest.mark.parametrize("flag", ["--nki", "--cost"])
def test_an_op_the_emitter_cannot_do_is_a_one_line_error(transposed_conv_pt2, flag, capsys):
    result = run_in_process(capsys, "inspect", str(transposed_conv_pt2), flag)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "cannot compile func @convt" in result.stderr and "transposed convolution" in result.stderr
    assert result.stdout == ""  # nothing half-printed


def test_kernels_on_the_cpu_target_name_the_cpu_the_code_is_for(good_pt2, capsys):
    from neuroncc.hardware.host import target_cpu

    result = run_in_process(capsys, "inspect", str(good_pt2), "--kernels", "--target", "cpu")
    assert result.returncode == 0, result.stderr
    cpu = target_cpu()
    (title,) = _sections(result.stdout)
    assert title.startswith("kernels of inference @small (target cpu, code for ")
    assert f"code for {cpu.name} " in title and f"{cpu.vector_bits}-bit vectors" in title
