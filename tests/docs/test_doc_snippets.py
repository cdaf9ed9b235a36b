"""The code README.md and docs/*.md show works: every ```python block runs, every ``neuroncc`` command parses.

The blocks of one Markdown file run in one fresh process (forked from the warm interpreter, tests/warm_python.py),
in order, in a temporary working directory with its own compile cache: tests/docs/snippet_runner.py. The
markup that joins, sets up or skips a block is read by tests/docs/doc_snippets.py (its docstring is the
convention; README.md, "Writing the docs", says it for contributors).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
from neuroncc.cli import main
from doc_commands import command_problem, variants
from doc_snippets import SnippetMarkupError, parse_markdown, read_documents

RUNNER = Path(__file__).with_name("snippet_runner.py")
DOCUMENTS = read_documents()
RUN_BY_FILE = {d.path: d.python for d in DOCUMENTS if any(not block.not_run for block in d.python)}


def run_blocks(blocks, warm_python, directory: Path) -> list[dict]:
    """Runs the blocks (not-run ones left out) in one child process in ``directory``; the per-block results."""
    work = directory / "work"
    work.mkdir()
    blocks_file, results_file = directory / "blocks.json", directory / "results.json"
    blocks_file.write_text(json.dumps([dataclasses.asdict(b) for b in blocks if not b.not_run]))
    done = warm_python.run([sys.executable, str(RUNNER), str(blocks_file), str(results_file)],
                           env=dict(os.environ), cwd=work, timeout=240)
    results = json.loads(results_file.read_text()) if results_file.exists() else []
    if done.returncode != 0 or len(results) != sum(not b.not_run for b in blocks):
        pytest.fail(f"the snippet runner died (exit {done.returncode}) after {len(results)} blocks:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return results


@pytest.mark.parametrize("path", sorted(RUN_BY_FILE))
def test_python_blocks_run(path, warm_python, tmp_path):
    results = run_blocks(RUN_BY_FILE[path], warm_python, tmp_path)
    failures = [f"{r['where']}:\n{r['error']}" for r in results if not r["ok"]]
    assert not failures, "documented code that does not run:\n\n" + "\n\n".join(failures)
    print({r["where"]: r["seconds"] for r in results})


def test_not_run_blocks_compile():
    documents = DOCUMENTS + [parse_markdown(SYNTHETIC, "page.md")]
    blocks = [block for document in documents for block in document.python if block.not_run]
    assert blocks
    for block in blocks:
        compile("\n" * (block.line - 1) + block.source, block.path, "exec")
        assert block.not_run.strip(), f"{block.where}: a not-run block says why"


COMMANDS = [command for document in DOCUMENTS for command in document.commands]


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where}" for c in COMMANDS])
def test_documented_commands_parse(command):
    problem = command_problem(command.text, inline=command.inline)
    assert problem is None, f"{command.where}: {problem}"


def _readme_ir() -> str:
    """The IR README.md shows under "The IR, for pass developers" (the file its `neuroncc opt f.nir` reads)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## The IR, for pass developers", 1)[1]
    return section.split("```\n", 2)[1]


#: The documented `neuroncc opt` runs on a named .nir file (no placeholders): cheap, so they run for real.
OPT_RUNS = [c for c in COMMANDS
            if not c.inline and c.text.split()[1] == "opt" and re.search(r" (f|model)\.nir", c.text)]


@pytest.mark.parametrize("command", OPT_RUNS, ids=[f"{c.where}" for c in OPT_RUNS])
def test_documented_opt_commands_run(command, tmp_path, monkeypatch, capsys):
    for name in ("f.nir", "model.nir"):
        (tmp_path / name).write_text(_readme_ir())
    monkeypatch.chdir(tmp_path)
    for arguments in variants(command.text):
        assert main(arguments[1:]) == 0, f"{command.where}: {capsys.readouterr().err}"
        assert capsys.readouterr().out.strip(), f"{command.where}: printed nothing"


def test_every_document_is_read():
    """The docs hold code: if the extractor found none, it is broken, not the docs."""
    assert sum(len(d.python) for d in DOCUMENTS) >= 25
    assert sum(not c.inline for c in COMMANDS) >= 30 and sum(c.inline for c in COMMANDS) >= 40
    assert len(OPT_RUNS) >= 5 and "func @f" in _readme_ir()


# --- the extractor and the checks catch what they are for -------------------------------------------------

SYNTHETIC = textwrap.dedent("""\
    # A page

    ```python
    import math
    radius = 2.0
    ```

    <!-- snippet: continues -->
    ```python
    area = math.pi * radius ** 2
    ```

    <!-- snippet: setup
    import math
    -->
    <!-- snippet: raises ValueError -->
    ```python
    math.sqrt(-1)
    ```

    ```python
    import math
    print(math.squareroot(2))      # a wrong API name
    ```

    <!-- snippet: not-run (needs a GPU) -->
    ```python
    torch.cuda.synchronize()
    ```

        neuroncc run model.pt2 --random --check    prose after two spaces
        neuroncc compile model.pt2 --jobz 4

    Also `neuroncc inspect model.pt2 --kernels` and `neuroncc run --tracing`.
    """)


def test_extractor_reads_the_convention():
    document = parse_markdown(SYNTHETIC, "page.md")
    first, second, third, wrong, skipped = document.python
    assert (first.line, first.continues, second.line, second.continues) == (4, False, 10, True)
    assert (third.setup, third.setup_line, third.raises, third.line) == ("import math\n", 14, "ValueError", 18)
    assert skipped.not_run == "needs a GPU" and wrong.line == 22
    assert [(c.line, c.inline) for c in document.commands] == [(31, False), (32, False), (34, True), (34, True)]
    assert document.commands[0].text == "neuroncc run model.pt2 --random --check"


def test_a_broken_snippet_fails(warm_python, tmp_path):
    results = run_blocks(parse_markdown(SYNTHETIC, "page.md").python, warm_python, tmp_path)
    assert [r["ok"] for r in results] == [True, True, True, False]
    assert "page.md\", line 23" in results[3]["error"] and "squareroot" in results[3]["error"]


def test_a_broken_command_fails():
    commands = parse_markdown(SYNTHETIC, "page.md").commands
    assert [command_problem(c.text, inline=c.inline) is None for c in commands] == [True, False, True, False]
    assert "--jobz" in command_problem(commands[1].text, inline=False)
    assert "--tracing" in command_problem(commands[3].text, inline=True)
    assert command_problem("neuroncc opt f.nir -p 'fuse,no-such-pass'", inline=False) is not None
    assert command_problem("neuroncc inspect m.pt2 --after fusee", inline=False) is not None


def test_usage_notation():
    assert variants("neuroncc run M.pt2 [--inputs X.npz | --random] [--check]") == [
        ["neuroncc", "run", "M.pt2", "--inputs", "X.npz", "--check"],
        ["neuroncc", "run", "M.pt2", "--random", "--check"]]
    assert variants("neuroncc cache list | explain") == [["neuroncc", "cache", "list"],
                                                         ["neuroncc", "cache", "explain"]]
    assert variants("neuroncc opt f.nir --emit llvm|nki | filecheck f.nir") == [
        ["neuroncc", "opt", "f.nir", "--emit", "llvm"], ["neuroncc", "opt", "f.nir", "--emit", "nki"]]


@pytest.mark.parametrize("markup", ["<!-- snippet: continue -->", "<!-- snippet: not-run -->",
                                    "<!-- snippet: raises -->"])
def test_malformed_markup_is_an_error(markup):
    with pytest.raises(SnippetMarkupError):
        parse_markdown(f"{markup}\n```python\npass\n```\n", "page.md")
    with pytest.raises(SnippetMarkupError):  # a marker above no python block
        parse_markdown("<!-- snippet: continues -->\n\ntext\n", "page.md")
