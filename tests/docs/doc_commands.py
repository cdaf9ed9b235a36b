"""Checks a documented ``neuroncc ...`` command against the CLI's own parser (doc_snippets.Command).

A command shown in a code block must parse as a whole (``build_parser().parse_args``) for each of its usage
alternatives; an inline one (```neuroncc run --trace```) must name a subcommand and only flags it has. Where it
is cheap the values run too: a pass pipeline (``-p``, ``--pipeline``) is parsed by the pass registry, and a pass
named by ``--after``/``--print-ir-after`` must exist.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex

from neuroncc.cli import build_parser
from neuroncc.passes.pipeline import parse_pipeline, pass_registry

PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
#: Programs a documented command may pipe into (``neuroncc opt f.nir | filecheck f.nir``).
PIPED_PROGRAMS = {"filecheck", "FileCheck", "grep", "head", "less", "tail", "jq"}


def _items(text: str) -> list[list[list[str]]]:
    """The command as items, each a list of alternatives, each a list of tokens (``[a | b]`` -> [[a], [b]])."""
    tokens = shlex.split(text.replace("[", " [ ").replace("]", " ] "))
    items: list[list[list[str]]] = []
    group: list[list[str]] | None = None
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "...":
            continue
        if token == "[":
            group = [[]]
        elif token == "]" and group is not None:
            items.append([alternative for alternative in group if alternative] or [[]])
            group = None
        elif token == "|" and group is not None:
            group.append([])
        elif token == "|":  # "list | explain | verify" (alternatives of one word) or a pipe into a program
            if index < len(tokens) and tokens[index] not in PIPED_PROGRAMS and items:
                items[-1].append([tokens[index]])
                index += 1
            else:
                break
        elif group is not None:
            group[-1].append(token)
        elif "/--" in token:  # --trace/--plot: both flags
            items.append([token.split("/")])
        else:
            items.append([[token]])
    return items


def variants(text: str) -> list[list[str]]:
    """The argument lists a usage line stands for: every optional part in, the i-th alternative of each choice."""
    items = _items(text)
    choices = [len(token.split("|")) for item in items for alternative in item for token in alternative]
    count = max([len(item) for item in items] + choices)
    return [[_choice(token, i) for item in items for token in item[min(i, len(item) - 1)]] for i in range(count)]


def _choice(token: str, i: int) -> str:
    """The i-th of a token's alternatives (``PASS|all``), the last one when it has fewer."""
    choices = token.split("|")
    return choices[min(i, len(choices) - 1)]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def _sample_value(action: argparse.Action, value: str) -> str:
    """A placeholder (N, DAYS, FILE) as a value the flag accepts; a real value as written."""
    if not PLACEHOLDER.fullmatch(value):
        return value
    if action.choices:
        return str(next(iter(action.choices)))
    return {int: "2", float: "1.5"}.get(action.type, value)


def _filled(parser: argparse.ArgumentParser, arguments: list[str]) -> list[str]:
    """``arguments`` with every placeholder value of a flag replaced by a sample the flag's type accepts."""
    filled, current = [], parser
    for index, argument in enumerate(arguments):
        flag = arguments[index - 1] if index else ""
        action = current._option_string_actions.get(flag)
        if action is not None and action.nargs != 0:
            argument = _sample_value(action, argument)
        elif not argument.startswith("-"):
            current = _subparser(current, argument) or current
        filled.append(argument)
    return filled


def _values_problem(arguments: list[str]) -> str | None:
    """Runs the cheap values: pipelines parse, named passes exist."""
    for flag, value in zip(arguments, arguments[1:]):
        if flag in ("-p", "--pipeline") and not PLACEHOLDER.fullmatch(value):
            try:
                parse_pipeline(value)
            except Exception as exc:  # noqa: BLE001  (any error is the finding)
                return f"pipeline {value!r}: {exc}"
        if flag in ("--after", "--print-ir-after") and value != "all" and not PLACEHOLDER.fullmatch(value):
            if value not in pass_registry().names():
                return f"{flag} {value}: no such pass"
    return None


def command_problem(text: str, *, inline: bool) -> str | None:
    """None if the documented command ``text`` (starting ``neuroncc``) is one the CLI accepts; else why not."""
    parser = build_parser()
    for arguments in variants(text):
        assert arguments[0] == "neuroncc", arguments
        arguments = [a.split("=", 1)[0] if inline and a.startswith("--") else a for a in arguments[1:]]
        arguments = _filled(parser, arguments)
        problem = _inline_problem(parser, arguments) if inline else _parse_problem(parser, arguments)
        problem = problem or _values_problem(arguments)
        if problem:
            return f"`neuroncc {shlex.join(arguments)}`: {problem}"
    return None


def _parse_problem(parser: argparse.ArgumentParser, arguments: list[str]) -> str | None:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(arguments)
    except SystemExit as exit_:
        if exit_.code:
            return errors.getvalue().strip() or f"exit {exit_.code}"
    return None


def _inline_problem(parser: argparse.ArgumentParser, arguments: list[str]) -> str | None:
    command = _subparser(parser, arguments[0])
    if command is None:
        return f"no subcommand {arguments[0]!r}"
    for argument in arguments[1:]:
        nested = None if argument.startswith("-") else _subparser(command, argument)
        if nested is not None:
            command = nested
        elif argument.startswith("-") and argument not in command._option_string_actions:
            return f"neuroncc {arguments[0]} has no flag {argument}"
    return None
