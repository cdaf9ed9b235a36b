"""Helpers of the CLI tests: editing .pt2 archives record by record, running the CLI in-process or as a
process with its own cwd and HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def rewrite(src, dst, edit):
    """Copy the zip at src to dst, passing each (short name, bytes) through edit (None drops the record)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        root = zin.namelist()[0].split("/", 1)[0] + "/"
        for info in zin.infolist():
            short = info.filename[len(root):]
            data = edit(short, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename, data)
    return dst


def edit_json(name_part, change):
    def edit(short, data):
        if name_part in short:
            obj = json.loads(data)
            change(obj)
            return json.dumps(obj).encode()
        return data

    return edit


def first_weight(obj):
    return obj["config"][sorted(obj["config"])[0]]


def set_weight_field(key, value):
    def change(obj):
        first_weight(obj)[key] = value

    return change


def set_weight_meta(key, value):
    def change(obj):
        first_weight(obj)["tensor_meta"][key] = value

    return change


def flip_byte(name_part, offset=0):
    def edit(short, data):
        if name_part in short and data:
            data = bytearray(data)
            data[offset % len(data)] ^= 0x40
            return bytes(data)
        return data

    return edit


def corrupt_after_write(path, fraction=None, flip_at=None):
    data = bytearray(path.read_bytes())
    if fraction is not None:
        data = data[: int(len(data) * fraction)]
    if flip_at is not None:
        data[flip_at] ^= 0xFF
    path.write_bytes(bytes(data))


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_in_process(capsys, *argv: str) -> CliResult:
    """``neuroncc ARGV`` through ``neuroncc.cli.main`` in this process."""
    from neuroncc.cli import main

    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse exits on usage errors and --help
        code = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def process_environment(home: Path, cache: Path) -> dict[str, str]:
    """The environment of a CLI process under test: its own HOME and cache, this checkout on the path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("NEURONCC_")}
    env.update(HOME=str(home), NEURONCC_CACHE_DIR=str(cache), PYTHONPATH=str(REPO_ROOT),
               PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(home / ".cache"))
    return env


def run_process(*argv: str, cwd: Path, home: Path, cache: Path, timeout: float = 300) -> CliResult:
    """``python -m neuroncc.cli ARGV`` in a fresh process with ``cwd`` and ``HOME`` of the caller's choice."""
    child = subprocess.run([sys.executable, "-m", "neuroncc.cli", *argv], cwd=cwd, env=process_environment(home, cache),
                           capture_output=True, text=True, timeout=timeout)
    return CliResult(child.returncode, child.stdout, child.stderr)


class ForkServer:
    """Runs ``neuroncc ARGV`` as a forked child of a warm interpreter (see cli_forkserver.py)."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_forkserver.py"))],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert json.loads(self.process.stdout.readline()) == {"ready": True}

    def run(self, *argv: str, cwd: Path, home: Path, cache: Path) -> CliResult:
        out, err = self.scratch / "stdout", self.scratch / "stderr"
        request = {"argv": list(argv), "cwd": str(cwd), "env": process_environment(home, cache),
                   "stdout": str(out), "stderr": str(err)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        return CliResult(answer["returncode"], out.read_text(), err.read_text())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))
