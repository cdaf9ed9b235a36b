"""Reads docs/writing-a-pass.md into steps, so a test can follow the tutorial exactly as written.

Each fenced code block is one step, marked by the HTML comment on the line before it:

* ``<!-- file: PATH -->``: write the block to PATH (relative to the tutorial's working directory);
* no comment, language ``sh``: run the block with bash (``set -e``) in the working directory;
* ``<!-- output -->``: the output the previous ``sh`` block must show: each line, in order, must match a
  line of the output, where ``...`` matches any text (and a line that is only ``...`` matches any lines).

Any other block is an error, so no code in the tutorial goes untested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```\n", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*(?P<kind>file|output)\s*:?\s*(?P<arg>[^>]*?)\s*-->\s*$")


@dataclass(frozen=True)
class Step:
    kind: str  # "file", "run" or "output"
    text: str
    path: str = ""
    line: int = 0  # where the block starts in the markdown (for error messages)


def read_steps(markdown: str) -> list[Step]:
    steps = []
    for fence in FENCE.finditer(markdown):
        line = markdown.count("\n", 0, fence.start()) + 1
        before = markdown[:fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        body = fence.group("body")
        if marker and marker.group("kind") == "file":
            steps.append(Step("file", body, marker.group("arg"), line))
        elif marker and marker.group("kind") == "output":
            steps.append(Step("output", body, line=line))
        elif fence.group("lang") == "sh":
            steps.append(Step("run", body, line=line))
        else:
            raise ValueError(f"writing-a-pass.md:{line}: a code block that is neither a file, a command nor "
                             "an expected output (mark it with <!-- file: PATH --> or <!-- output -->)")
    return steps


def output_problem(expected: str, actual: str) -> str | None:
    """None if ``actual`` shows the lines of ``expected`` in order (``...`` is a wildcard)."""
    lines = actual.splitlines()
    position = 0
    for want in expected.splitlines():
        if want.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + r"\s*$")
        while position < len(lines) and not pattern.match(lines[position]):
            position += 1
        if position == len(lines):
            return f"expected a line matching {want!r} (in order) in:\n{actual}"
        position += 1
    return None


def example_files(package: Path) -> dict[str, str]:
    """The example package's files that the tutorial writes (by path relative to the working directory)."""
    ignored = {"README.md"}
    return {
        f"{package.name}/{path.relative_to(package).as_posix()}": path.read_text()
        for path in sorted(package.rglob("*"))
        if path.is_file() and path.name not in ignored
        and not {"Output", "__pycache__", ".hypothesis", "build"} & set(path.relative_to(package).parts)
        and not any(part.endswith(".egg-info") for part in path.parts)
    }
