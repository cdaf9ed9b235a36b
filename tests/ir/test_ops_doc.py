"""docs/ir.md stays true: its op table is the registry's, and its IR and Python examples run as shown."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import pytest

from neuroncc.ir import parse, print_function

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ir.md"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_ops_doc", ROOT / "tools" / "gen_ops_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _blocks(language: str) -> list[str]:
    """The fenced code blocks of docs/ir.md whose info string is ``language`` ("" for plain fences)."""
    blocks, current, info = [], None, ""
    for line in DOC.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                if info == language:
                    blocks.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_op_table_is_generated_from_the_registry():
    text = DOC.read_text(encoding="utf-8")
    assert _generator().render(text) == text, "docs/ir.md's op table is stale: run python tools/gen_ops_doc.py"


def test_the_op_table_lists_every_op():
    from neuroncc.ir import REGISTRY

    table = _generator().ops_table()
    assert all(f"| `{name}` |" in table for name in REGISTRY.names())


IR_BLOCKS = [block for block in _blocks("") if block.lstrip().startswith(("func", "//"))]


@pytest.mark.parametrize("block", IR_BLOCKS, ids=[f"ir-example-{i}" for i in range(len(IR_BLOCKS))])
def test_ir_examples_parse_and_print_as_shown(block):
    without_comments = "".join(line for line in block.splitlines(keepends=True) if not line.startswith("//"))
    assert print_function(parse(block)) == without_comments


def test_the_builder_example_prints_the_text_example():
    builder_example = next(b for b in _blocks("python") if "Builder(" in b)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(builder_example, str(DOC), "exec"), {})
    mlp = next(b for b in IR_BLOCKS if "func @mlp" in b)
    assert printed.getvalue().strip() == "".join(l for l in mlp.splitlines(True) if not l.startswith("//")).strip()
