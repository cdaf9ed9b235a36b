"""Reads the code that README.md and docs/*.md show a user: the ```python blocks and the ``neuroncc`` commands.

A ```python block runs as written, in a fresh namespace, unless HTML comments on the lines right above its fence
say otherwise (stacked, one directive each; they are visible in the Markdown source, invisible when rendered):

* ``<!-- snippet: continues -->``: run in the namespace of the file's previous ```python block (its names, its
  working directory), as a reader who typed the blocks one after the other would;
* ``<!-- snippet: setup`` + code lines + ``-->``: the names the block takes as given (a ``model``, an ``x``, a
  ``loader``), made by this code first, in the block's namespace;
* ``<!-- snippet: raises NAME -->``: the block must end by raising the exception ``NAME`` (the error it shows);
* ``<!-- snippet: not-run (WHY) -->``: only compiled, never run (it needs a GPU, several processes, a
  server...); the reason in parentheses is required.

Any other ``snippet:`` comment, or one that stands above no ```python block, is an error: a typo cannot
silently skip a block. docs/writing-a-pass.md is a tutorial with its own convention (``<!-- file: PATH -->``,
``<!-- output -->``), run step by step by tests/passkit/test_tutorial.py; it is not read here.

Commands: every line of a code block (fenced or indented) that runs ``neuroncc SUBCOMMAND ...`` (after an
optional ``$ `` prompt or ``&&``), and every inline code span that starts with ``neuroncc SUBCOMMAND``, is a
:class:`Command`. The usage notation of the docs is read as usage: ``[--flag]`` is optional, ``a|b`` and
``[a | b]`` are alternatives (each is checked), ``...`` repeats, an UPPERCASE word is a placeholder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The tutorial is run by tests/passkit/test_tutorial.py; performance*.md are measurement logs, not usage.
SKIPPED = {"writing-a-pass.md", "performance.md", "performance-history.md"}

FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})```(?P<lang>[\w+-]*)\s*$")
SNIPPET_COMMENT = re.compile(r"<!--\s*snippet:\s*(?P<body>.*?)\s*-->", re.DOTALL)
#: A snippet comment starts its line (one quoted in running text, `<!-- snippet: continues -->`, is none).
LINE_SNIPPET_COMMENT = re.compile(r"^<!--\s*snippet:.*?-->", re.DOTALL | re.MULTILINE)
DIRECTIVE = re.compile(r"(?P<name>continues|setup|raises|not-run)\b(?P<rest>.*)", re.DOTALL)


def documented_files() -> list[Path]:
    """README.md and docs/*.md, whose code a user copies (not the tutorial, not the measurement logs)."""
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in SKIPPED)


@dataclass(frozen=True)
class PythonBlock:
    path: str  # relative to the repository, for messages
    line: int  # the line of the block's first code line in the Markdown file (1-based)
    source: str
    continues: bool = False
    setup: str = ""
    setup_line: int = 0  # where the setup's first code line is
    raises: str = ""
    not_run: str = ""  # the reason, when the block is only compiled

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Command:
    path: str
    line: int
    text: str  # as the docs show it (usage notation included)
    inline: bool  # an inline code span: flags are checked, positionals may be left out

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Document:
    path: str
    python: list[PythonBlock] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)


class SnippetMarkupError(ValueError):
    pass


def _directives(comments: list[tuple[int, str]], where: str) -> dict:
    found: dict = {}
    for line, body in comments:
        match = DIRECTIVE.fullmatch(body.strip())
        if match is None:
            raise SnippetMarkupError(f"{where}: unknown snippet directive <!-- snippet: {body.strip()[:40]} -->")
        name, rest = match.group("name"), match.group("rest")
        if name == "continues" and not rest.strip():
            found["continues"] = True
        elif name == "setup" and rest.strip():
            # the code starts on the line after "setup"; keep its line numbers for tracebacks
            first = rest.index("\n") + 1 if "\n" in rest else 0
            found["setup"], found["setup_line"] = rest[first:].rstrip() + "\n", line + 1
        elif name == "raises" and re.fullmatch(r"\s+[\w.]+\s*", rest):
            found["raises"] = rest.strip()
        elif name == "not-run" and re.fullmatch(r"\s*\(.+\)\s*", rest, re.DOTALL):
            found["not_run"] = rest.strip()[1:-1]
        else:
            raise SnippetMarkupError(f"{where}: malformed <!-- snippet: {name} --> ({body.strip()[:60]!r})")
    return found


def _comments_above(lines: list[str], fence: int) -> list[tuple[int, str]]:
    """The ``snippet:`` comments stacked directly above line ``fence`` (0-based): (first line 1-based, body)."""
    comments = []
    end = fence - 1
    while end >= 0 and lines[end].rstrip().endswith("-->"):
        start = end
        while start >= 0 and "<!--" not in lines[start]:
            start -= 1
        text = "\n".join(lines[start:end + 1])
        match = SNIPPET_COMMENT.fullmatch(text.strip())
        if start < 0 or match is None:
            break
        comments.append((start + 1, match.group("body")))
        end = start - 1
    return comments[::-1]


def parse_markdown(text: str, path: str) -> Document:
    """The python blocks and neuroncc commands of one Markdown file."""
    lines = text.split("\n")
    document = Document(path)
    used_comments: set[int] = set()
    index = 0
    while index < len(lines):
        opened = FENCE_OPEN.match(lines[index])
        if opened is None:
            index += 1
            continue
        close = index + 1
        while close < len(lines) and lines[close].strip() != "```":
            close += 1
        body = "\n".join(lines[index + 1:close]) + "\n"
        comments = _comments_above(lines, index)
        if opened.group("lang") == "python":
            used_comments.update(line for line, _ in comments)
            directives = _directives(comments, f"{path}:{index + 1}")
            document.python.append(PythonBlock(path, index + 2, body, **directives))
        else:
            document.commands += _block_commands(lines[index + 1:close], index + 2, path)
        index = close + 1
    for match in LINE_SNIPPET_COMMENT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if line not in used_comments:
            raise SnippetMarkupError(f"{path}:{line}: a snippet comment above no ```python block")
    document.commands += _indented_commands(lines, path) + _inline_commands(lines, path)
    document.commands.sort(key=lambda command: command.line)
    return document


COMMAND_START = re.compile(r"(?:^\s*(?:\$\s+)?|&&\s*)(?P<command>neuroncc\s+[a-z][\w-]*(?:\s.*)?)$")
#: Lines of neuroncc's own messages shown in code blocks, which start like a command but are none.
MESSAGES = ("neuroncc cannot compile ",)


def _command_text(line: str) -> str | None:
    """The ``neuroncc ...`` command on a line, without the prose or comment that follows it."""
    match = COMMAND_START.search(line)
    if match is None or match.group("command").startswith(MESSAGES):
        return None
    command = match.group("command")
    command = re.split(r"\s+#|\s{2,}(?![-\[|])", command)[0]  # "#" comments; prose after two or more spaces
    return command.strip() or None


def _block_commands(block: list[str], first_line: int, path: str) -> list[Command]:
    commands = []
    for offset, line in enumerate(block):
        text = _command_text(line)
        if text is not None and (line.lstrip().startswith(("$", "neuroncc")) or "&&" in line):
            commands.append(Command(path, first_line + offset, text, inline=False))
    return commands


def _indented_commands(lines: list[str], path: str) -> list[Command]:
    """Commands of indented code blocks (four spaces after a blank line, outside fences)."""
    commands, in_fence, in_block = [], False, False
    for number, line in enumerate(lines, 1):
        if FENCE_OPEN.match(line) or (in_fence and line.strip() == "```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        previous = lines[number - 2] if number > 1 else ""
        in_block = line.startswith("    ") and (in_block or not previous.strip())
        if in_block and line.lstrip().startswith(("neuroncc ", "$ neuroncc ")) or (in_block and "&& neuroncc" in line):
            text = _command_text(line)
            if text is not None:
                commands.append(Command(path, number, text, inline=False))
    return commands


def _inline_commands(lines: list[str], path: str) -> list[Command]:
    commands = []
    for number, line in enumerate(lines, 1):
        if line.startswith("    "):
            continue
        for match in re.finditer(r"`(neuroncc [a-z][^`]*)`", line):
            commands.append(Command(path, number, match.group(1), inline=True))
    return commands


def read_documents() -> list[Document]:
    return [parse_markdown(path.read_text(), path.relative_to(ROOT).as_posix()) for path in documented_files()]
