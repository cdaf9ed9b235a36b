"""Files of several IR test cases: ``// -----`` lines split a file into cases (``neuroncc opt --split-input-file``,
the FileCheck suites), each keeping the line numbers it has in the file."""

from __future__ import annotations

import re


def split_input(text: str) -> list[str]:
    """Split at ``// -----`` lines; each chunk is padded with newlines so its line numbers stay those of the file."""
    chunks, lines_before = [], 0
    for chunk in re.split(r"^//\s*-----\s*$", text, flags=re.MULTILINE):
        chunks.append("\n" * lines_before + chunk)
        lines_before += chunk.count("\n")
    return chunks


def has_code(text: str) -> bool:
    """Whether ``text`` holds anything but blank lines and ``//`` comments."""
    return any(line.strip() and not line.strip().startswith("//") for line in text.splitlines())
