"""The progress display: a step list on a terminal, plain compile lines on a log, nothing before an error."""

import io
import time

import pytest

from neuroncc.cli.progress import Progress, format_seconds


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_log_gets_plain_lines_for_logged_steps_only():
    stream = io.StringIO()
    progress = Progress(stream)
    assert not progress.interactive
    with progress.step("load model.pt2"):
        pass
    with progress.step("compile forward for cpu", log=True) as step:
        step.detail = "cache hit"
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("neuroncc: compile forward for cpu (cache hit)  ")


def test_a_failing_step_prints_nothing_on_a_log():
    stream = io.StringIO()
    with pytest.raises(ValueError), Progress(stream).step("compile", log=True):
        raise ValueError("bad")
    assert stream.getvalue() == ""


def test_terminal_shows_nested_steps_and_erases_a_failure():
    stream = Terminal()
    progress = Progress(stream)
    assert progress.interactive
    with progress.step("outer"):
        with progress.step("inner"):
            time.sleep(0.25)  # the spinner draws the innermost step
        with pytest.raises(KeyError), progress.step("failing"):
            raise KeyError("x")
    text = stream.getvalue()
    assert "inner  " in text.split("done  inner")[0]  # drawn while running
    finished = [line.split("\r\x1b[2K")[-1] for line in text.split("\n") if line]
    assert [line.split("  ")[1] for line in finished] == ["done", "done"]
    assert "done  inner" in finished[0] and "done  outer" in finished[1]
    assert "done  failing" not in text
    assert text.endswith("\n")


def test_transient_and_disabled_displays_leave_no_lines():
    for progress in (Progress(Terminal(), transient=True), Progress(Terminal(), enabled=False)):
        with progress.step("work", log=True) as step:
            pass
        assert step.seconds >= 0
        assert "\n" not in progress.stream.getvalue()


@pytest.mark.parametrize("seconds, text", [(0.0042, "4.2 ms"), (0.25, "250 ms"), (1.234, "1.23 s"),
                                           (12.34, "12.3 s")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_a_running_step_shows_its_status_beside_the_spinner():
    stream = Terminal()
    progress = Progress(stream)
    with progress.step("compile forward for cpu") as step:
        step.status = "passes 3/9: fuse done"
        time.sleep(0.35)  # a few spinner ticks
    assert "compile forward for cpu: passes 3/9: fuse done" in stream.getvalue()


def test_a_compile_reports_each_pass_then_code_generation():
    from neuroncc.driver.compile import compile_graph
    from neuroncc.ir import Builder, DType, TensorType
    from neuroncc.passes.pipeline import as_pipeline, default_pipeline

    b = Builder("f")
    x = b.param(TensorType((4, 8), DType.f32), "x")
    fn = b.build([b.op("tanh", b.op("exp", x))])
    heard: list[str] = []
    compile_graph(fn, target="interp", cache=None, on_progress=heard.append)
    names = [p.name for p in as_pipeline(default_pipeline("interp")).passes]
    assert heard == [f"passes {i}/{len(names)}: {name} done" for i, name in enumerate(names, 1)] + ["code generation"]


@pytest.mark.parametrize("done, total, elapsed, text", [
    (0, 10, 0.0, "estimating"), (5, 10, 2.0, "about 2.00 s left"), (1, 61, 2.0, "about 2.0 min left"),
    (10, 10, 9.0, "done"),
])
def test_format_eta(done, total, elapsed, text):
    from neuroncc.cli.progress import format_eta

    assert format_eta(done, total, elapsed) == text


def test_progress_bar_on_a_terminal_and_on_a_log():
    from neuroncc.cli.progress import ProgressBar

    terminal = Terminal()
    bar = ProgressBar(4, terminal)
    bar.start("a.pt2")
    bar.start("b.pt2")
    assert terminal.getvalue().endswith("running: a.pt2, b.pt2")
    bar.finish("a.pt2", "a.pt2: 1 graph")
    assert "  a.pt2: 1 graph\n" in terminal.getvalue()
    assert terminal.getvalue().rsplit("\r\x1b[2K", 1)[1].startswith("[######------------------]  1/4  ")
    bar.close()
    log = io.StringIO()
    bar = ProgressBar(2, log)
    bar.start("a.pt2")
    bar.finish("a.pt2", "a.pt2: done")
    assert log.getvalue() == "neuroncc: [1/2] a.pt2: done\n"
