"""Runs one Markdown file's ```python blocks in this process, in order: ``python snippet_runner.py BLOCKS RESULTS``.

BLOCKS is a JSON list of blocks (doc_snippets.PythonBlock's fields); RESULTS gets one JSON object per block:
``{"where": "docs/x.md:12", "ok": true, "seconds": 1.2}`` or ``{"where": ..., "ok": false, "error": TRACEBACK}``.
Each block is compiled with its Markdown file's name and line numbers, so a traceback points into the docs. A
failed block does not stop the others (each is its own finding); one that continues it fails too, likely.
The repository's examples/ are importable, as from a checkout.
"""

from __future__ import annotations

import builtins
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _code(source: str, path: str, line: int):
    return compile("\n" * (line - 1) + source, path, "exec")


def _exception_type(name: str, namespace: dict) -> type:
    if "." not in name:
        return namespace.get(name) or getattr(builtins, name)
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def _run(block: dict, namespace: dict) -> None:
    if block["setup"]:
        exec(_code(block["setup"], block["path"], block["setup_line"]), namespace)
    code = _code(block["source"], block["path"], block["line"])
    if not block["raises"]:
        exec(code, namespace)
        return
    expected = _exception_type(block["raises"], namespace)
    try:
        exec(code, namespace)
    except expected:
        return
    raise AssertionError(f"the block was to raise {block['raises']} (<!-- snippet: raises -->) but returned")


def main(blocks_path: str, results_path: str) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    results, namespace = [], {}
    for block in json.loads(Path(blocks_path).read_text()):
        if not block["continues"]:
            namespace = {"__name__": "__main__", "__builtins__": builtins}
        where = f"{block['path']}:{block['line']}"
        start = time.perf_counter()
        try:
            _run(block, namespace)
            results.append({"where": where, "ok": True, "seconds": round(time.perf_counter() - start, 2)})
        except BaseException:  # noqa: B036  (SystemExit from a block is a failure too)
            results.append({"where": where, "ok": False, "error": traceback.format_exc(limit=-6)})
        Path(results_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
