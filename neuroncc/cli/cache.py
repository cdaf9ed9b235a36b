"""``neuroncc cache list | explain | verify | clear``: look into and tidy the compile cache.

    neuroncc cache list                              key, target, size, created, graph name of every entry
    neuroncc cache explain FILE.nir [--target cpu]   the cache key of a graph, component by component
    neuroncc cache explain FILE.nir --key KEY        ... and which components differ from a stored entry's
    neuroncc cache explain MODEL.pt2 [--train]       the key(s) ``neuroncc compile MODEL.pt2`` uses
    neuroncc cache explain --key KEY [--key KEY2]    a stored entry's components (or two entries compared)
    neuroncc cache verify                            check every entry's files; exit 1 listing the bad ones
    neuroncc cache clear [--older-than DAYS]         delete entries (all, or the old ones)
    ... --remote                                     the same for the remote tier ($NEURONCC_REMOTE_CACHE)

The cache directory is ``--cache-dir``, else ``$NEURONCC_CACHE_DIR``, else ``~/.cache/neuroncc``. Keys may be
abbreviated to any unique prefix of 4 or more characters.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
from pathlib import Path

import numpy as np

from neuroncc.cli.commands import COMMANDS
from neuroncc.cli.opt import read_source
from neuroncc.errors import InputError
from neuroncc.ir import parse_module
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.cache_key import component_differences, compute_key
from neuroncc.driver.compile import DEFAULT_TARGET, make_request
from neuroncc.cli import cache_remote, programs
from neuroncc.executors.interpreter_executable import InterpreterExecutable
from neuroncc.driver.artifact import read_manifest

EXIT_OK, EXIT_CHECK_FAILED = 0, 1


def human_size(size: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    if size < 1024:
        return f"{int(size)} B"
    exponent = min(int(math.log(size, 1024)), 4)
    return f"{size / 1024 ** exponent:.1f} {'KMGT'[exponent - 1]}iB"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _open_cache(args: argparse.Namespace):
    """The cache ``--cache-dir`` (else ``$NEURONCC_CACHE_DIR``) names; a path that is no directory is refused
    (``cache clear`` of a file was an internal error, ``list`` and ``verify`` found 0 entries in it)."""
    if args.cache_dir:
        root, setting = Path(args.cache_dir).expanduser(), "--cache-dir"
    else:
        root, setting = CompileCache.directory_from_environ(os.environ), "$NEURONCC_CACHE_DIR"
    if root.exists() and not root.is_dir():
        raise InputError(f"{root}: the compile cache ({setting}) must be a directory, this is a file")
    return CompileCache(root)


def _created(entry) -> str:
    if entry.manifest is None:
        stamp = datetime.datetime.fromtimestamp(entry.modified, datetime.UTC)
    else:
        try:
            stamp = datetime.datetime.fromisoformat(entry.manifest.created_at)
        except ValueError:
            return entry.manifest.created_at
    return stamp.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _print_entries(rows: list[tuple[str, str, int, str, str]], where: object) -> None:
    """``rows`` of (key, target, size, created, graph) as ``cache list`` prints them, then the total."""
    table = [("KEY", "TARGET", "SIZE", "CREATED", "GRAPH")]
    table += [(key[:16], target, human_size(size), created, graph) for key, target, size, created, graph in rows]
    if rows:
        widths = [max(len(row[i]) for row in table) for i in range(4)]
        for row in table:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])
    total = sum(row[2] for row in rows)
    print(f"{_count(len(rows), 'entry', 'entries')}, {human_size(total)} in {where}")


def run_list(args: argparse.Namespace) -> int:
    if args.remote:
        where, rows = cache_remote.list_remote()
        _print_entries(rows, where)
        return EXIT_OK
    cache = _open_cache(args)
    rows = []
    for entry in sorted(cache.list_entries(), key=lambda e: _created(e)):
        if entry.manifest is None:
            rows.append((entry.key, "?", entry.size, _created(entry), f"(damaged: {entry.problem})"))
        else:
            rows.append((entry.key, entry.manifest.target, entry.size, _created(entry), entry.manifest.graph_name))
    _print_entries(rows, cache.root)
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    if args.remote:
        where, checked, problems = cache_remote.verify_remote()
        for key, problem in problems:
            print(f"BAD {key[:16]}  {problem}")
        print(f"{_count(checked, 'entry', 'entries')} checked, {len(problems)} bad, in {where}")
        return EXIT_CHECK_FAILED if problems else EXIT_OK
    cache = _open_cache(args)
    entries = cache.list_entries()
    bad = 0
    for entry in entries:
        problem = entry.problem or cache.verify_entry(entry)
        if problem is not None:
            bad += 1
            print(f"BAD {entry.key[:16]}  {problem}")
    print(f"{_count(len(entries), 'entry', 'entries')} checked, {bad} bad, in {cache.root}")
    return EXIT_CHECK_FAILED if bad else EXIT_OK


def run_clear(args: argparse.Namespace) -> int:
    if args.older_than is not None and not (args.older_than >= 0 and math.isfinite(args.older_than)):
        raise InputError(f"--older-than must be a non-negative number of days, got {args.older_than}")
    older_than_s = None if args.older_than is None else args.older_than * 86400
    if args.remote:
        where, removed, freed = cache_remote.clear_remote(older_than_s)
    else:
        cache = _open_cache(args)
        removed, freed = cache.clear(older_than_s)
        where = cache.root
    print(f"removed {_count(removed, 'entry', 'entries')} ({human_size(freed)}) from {where}")
    return EXIT_OK


# ---- explain ---------------------------------------------------------------------------------------------

def _parse_option(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InputError(f"--option expects KEY=VALUE, got '{text}'")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value  # a bare word is a string


def _file_components(args: argparse.Namespace) -> list[tuple[str, str, dict[str, tuple[str, str]]]]:
    """(title, key, {component: (digest, summary)}) for each function of ``args.file``."""

    options = dict(_parse_option(o) for o in args.option)
    target = args.target or DEFAULT_TARGET
    if args.file.endswith(".pt2"):
        source, functions = args.file, _exported_functions(args)
    else:
        text, source = read_source(args.file)
        functions = parse_module(text, source=source, resources=_sibling_resources(args.file))
    results = []
    for fn in functions:
        key = compute_key(make_request(fn, target=target, pipeline=args.pipeline, options=options))
        results.append((f"{source} @{fn.name}, target {target}", key.key,
                        {c.name: (c.digest, c.summary) for c in key.components}))
    return results


def _exported_functions(args: argparse.Namespace) -> list:
    """The IR functions ``neuroncc compile MODEL.pt2 [--train]`` compiles (imported the same way)."""
    from neuroncc.frontend.exported import import_inference, load_program, trace_training

    with programs.one_line_warnings():
        program = load_program(args.file, args.program)
        name = programs.graph_name(args.file)
        target = args.target or DEFAULT_TARGET  # it decides how attention is traced
        if not args.train:
            return [import_inference(program, name, target).imported.function]
        graphs = trace_training(program, name, lambda kind, graph: InterpreterExecutable(graph.function), target)
    return [graphs.forward.function, graphs.backward.function]


def _sibling_resources(path: str) -> dict[str, np.ndarray]:
    """Large constants of ``FILE.nir`` live in ``FILE.npz`` beside it, when it has any."""
    if path == "-":
        return {}
    npz = Path(path).with_suffix(".npz")
    if not npz.exists():
        return {}
    try:
        with np.load(npz, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"{npz}: not a readable .npz of constants ({exc})") from None


def _stored_components(cache, prefix: str) -> tuple[str, str, dict[str, tuple[str, str]]]:
    key = cache.resolve_key(prefix)
    manifest = read_manifest(cache.entry_dir(key))
    title = f"cache entry @{manifest.graph_name}, target {manifest.target}, created {manifest.created_at}"
    return title, key, {name: (c.digest, c.summary) for name, c in manifest.key_components.items()}


def _print_components(title: str, key: str, components: dict[str, tuple[str, str]]) -> None:
    print(f"key {key}  ({title})")
    width = max(len(name) for name in components)
    for name, (digest, summary) in components.items():
        print(f"  {name.ljust(width)}  {digest[:16]}  {summary}")


def _print_comparison(left: tuple[str, str, dict], right: tuple[str, str, dict]) -> None:
    (left_title, left_key, left_parts), (right_title, right_key, right_parts) = left, right
    print(f"A: key {left_key}  ({left_title})")
    print(f"B: key {right_key}  ({right_title})")
    differing = component_differences({n: d for n, (d, _) in left_parts.items()},
                                      {n: d for n, (d, _) in right_parts.items()})
    names = list(left_parts) + [n for n in right_parts if n not in left_parts]
    width = max(len(name) for name in names)
    for name in names:
        a_digest, a_summary = left_parts.get(name, ("-" * 16, "(absent)"))
        b_digest, b_summary = right_parts.get(name, ("-" * 16, "(absent)"))
        if name in differing:
            print(f"* {name.ljust(width)}  A {a_digest[:16]}  {a_summary}")
            print(f"  {' ' * width}  B {b_digest[:16]}  {b_summary}")
        else:
            print(f"  {name.ljust(width)}    {a_digest[:16]}  {a_summary}")
    print("differs: " + ", ".join(differing) if differing else "all components equal: the keys are the same")


def run_explain(args: argparse.Namespace) -> int:
    if args.file is None and not args.key:
        raise InputError("cache explain needs a FILE.nir or MODEL.pt2, or --key KEY")
    keys = list(args.key)
    if len(keys) > (1 if args.file else 2):
        raise InputError("cache explain compares two things at most: FILE --key KEY, or --key KEY --key KEY")
    sides = _file_components(args) if args.file is not None else []
    if args.remote:
        stored = [cache_remote.stored_components(k) for k in keys]
    else:
        cache = _open_cache(args) if keys else None
        stored = [_stored_components(cache, k) for k in keys]
    if args.file is not None and stored:
        for side in sides:
            _print_comparison(side, stored[0])
    elif len(stored) == 2:
        _print_comparison(stored[0], stored[1])
    else:
        for side in sides or stored:
            _print_components(*side)
    return EXIT_OK


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help=COMMANDS["cache"].help,
                                   description="Look into and tidy neuroncc's compile cache.",
                                   epilog=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True,
                                     parser_class=type(parser))

    def command(name: str, help: str, func) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        sub.add_argument("--cache-dir", help="the cache directory (default: $NEURONCC_CACHE_DIR or ~/.cache/neuroncc)")
        sub.add_argument("--remote", action="store_true",
                         help="the remote tier ($NEURONCC_REMOTE_CACHE) instead of the local directory")
        sub.set_defaults(func=func)
        return sub

    command("list", "list cached artifacts", run_list)
    command("verify", "check every cached artifact; exit 1 if any is damaged", run_verify)
    clear = command("clear", "delete cached artifacts", run_clear)
    clear.add_argument("--older-than", type=float, metavar="DAYS", help="only entries created more than DAYS ago")
    explain = command("explain", "show a cache key's components, or which differ between two", run_explain)
    explain.add_argument("file", nargs="?", help="a .nir file (large constants in FILE.npz beside it), or a .pt2 "
                                                 "exported program")
    explain.add_argument("--program", metavar="NAME", help="for a .pt2 holding several programs: which one")
    explain.add_argument("--train", action="store_true",
                         help="for a .pt2: the forward and backward graphs (as neuroncc compile --train)")
    explain.add_argument("--target", default=None, help="the target to key for (default: the driver's default)")
    explain.add_argument("--pipeline", default=None, help="a pass pipeline overriding the target's default")
    explain.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="a compile option (VALUE read as JSON when it parses, else as a string)")
    explain.add_argument("--key", action="append", default=[], metavar="KEY",
                         help="a stored entry's key (or unique prefix); give twice to compare two entries")
