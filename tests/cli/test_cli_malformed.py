"""Malformed inputs through the ``neuroncc`` command, each in its own process with its own cwd and HOME.

Every case must exit 2 with exactly one line on stderr (``neuroncc: error: ...`` naming the problem), print no
traceback, and write nothing: not in the working directory, not in HOME, and no compile cache is created.
The corpus runs as children forked from a warm interpreter (``cli_forkserver.py``: real processes that do not
import torch anew for each case); a sample also runs as ``python -m neuroncc.cli`` in a fresh interpreter.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_testing import (
    ForkServer,
    corrupt_after_write,
    edit_json,
    files_under,
    process_environment,
    rewrite,
    run_process,
    set_weight_field,
    set_weight_meta,
)


def _edit_model_json(change):
    return edit_json("models/", change)


def _user_input_sizes(sizes):
    def change(program):
        program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"] = [{"as_int": s} for s in sizes]
    return change


def _add_pickled_weights(path: Path) -> None:
    with zipfile.ZipFile(path, "a") as zf:
        root = zf.namelist()[0].split("/", 1)[0]
        zf.writestr(f"{root}/data/weights/model.pt", pickle.dumps({"w": 1}))


def _write_npz_member(path: Path, name: str, header_shape: tuple[int, ...]) -> None:
    """An .npz whose array header claims ``header_shape`` (no data behind it)."""
    header = {"descr": "<f4", "fortran_order": False, "shape": header_shape}
    with zipfile.ZipFile(path, "w") as zf, zf.open(f"{name}.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, header)


class Corpus:
    """Builds each case's files in ``files`` and returns the command line (paths relative to nothing)."""

    def __init__(self, files: Path, good: Path, unsupported: dict[str, Path]):
        self.files, self.good, self.unsupported = files, good, unsupported

    def pt2(self, edit) -> str:
        return str(rewrite(self.good, self.files / "bad.pt2", edit))

    def raw(self, data: bytes, name: str = "bad.pt2") -> str:
        (self.files / name).write_bytes(data)
        return str(self.files / name)

    def corrupted(self, **how) -> str:
        path = self.files / "bad.pt2"
        path.write_bytes(self.good.read_bytes())
        corrupt_after_write(path, **how)
        return str(path)

    def npz(self, **arrays) -> str:
        path = self.files / "in.npz"
        np.savez(path, **arrays)
        return str(path)


X = np.zeros((2, 4), np.float32)

#: case -> (command line built from the corpus, text the error line must contain)
CASES = {
    # the model file
    "missing file": (lambda c: ["run", str(c.files / "nope.pt2")], "no such file"),
    "directory": (lambda c: ["compile", str(c.files)], "is a directory"),
    "empty file": (lambda c: ["run", c.raw(b"")], "not a zip"),
    "text file": (lambda c: ["inspect", c.raw(b"def forward(x): return x\n")], "not a zip"),
    "random bytes": (lambda c: ["run", c.raw(bytes(range(256)) * 40)], "not a zip"),
    "truncated half": (lambda c: ["run", c.corrupted(fraction=0.5)], ".pt2"),
    "truncated tail": (lambda c: ["compile", c.corrupted(fraction=0.98)], ".pt2"),
    "flipped bit": (lambda c: ["run", c.corrupted(flip_at=200)], "corrupt"),
    "another archive version": (lambda c: ["run", c.pt2(lambda s, d: b"7" if s == "archive_version" else d)],
                                "another torch version"),
    "another schema version": (lambda c: ["compile", c.pt2(_edit_model_json(
        lambda o: o["schema_version"].update({"major": 99})))], "another torch version"),
    "embedded pickle weight": (lambda c: ["run", c.pt2(edit_json("weights_config",
                                                                set_weight_field("use_pickle", True)))], "pickle"),
    "pickled custom object": (lambda c: ["run", c.pt2(edit_json("constants_config", lambda o: o["config"].update(
        {"obj": {"path_name": "custom_obj_0", "use_pickle": False}})))], "pickle"),
    "legacy pickled weights": (lambda c: [
        "run", str(_add_pickled_weights(Path(c.pt2(lambda s, d: d))) or c.files / "bad.pt2")], "pickle"),
    "absurd weight": (lambda c: ["compile", c.pt2(edit_json("weights_config",
                                                            set_weight_meta("sizes", [{"as_int": 10**12}])))],
                      "absurd"),
    "program json garbage": (lambda c: ["run", c.pt2(lambda s, d: b"{not json" if s.startswith("models/") else d)],
                             "malformed"),
    "no program": (lambda c: ["run", c.pt2(lambda s, d: None if s.startswith("models/") else d)],
                   "no exported program"),
    "absurd input shape": (lambda c: ["run", c.pt2(_edit_model_json(_user_input_sizes([10**6, 10**6])))],
                           "absurd"),
    "not a regular file": (lambda c: ["run", _fifo(c.files / "fifo.pt2")], "not a regular file"),
    "dangling symlink": (lambda c: ["run", _dangling(c.files / "link.pt2")], "no such file"),
    "op neuroncc cannot compile": (lambda c: ["compile", str(c.unsupported["igamma"])], "aten.igamma"),
    "dynamic shapes": (lambda c: ["compile", str(c.unsupported["dynamic"])], "compiles static shapes"),
    "AOTInductor package": (lambda c: ["run", _aoti_package(c.files / "aoti.pt2")], "is an AOTInductor package"),
    "dynamic python number input": (lambda c: ["compile", str(c.unsupported["number"]), "--train"],
                                    "'factor' is not a tensor but a dynamic Python number"),
    "no backward": (lambda c: ["compile", str(c.unsupported["no_parameters"]), "--train"], "nothing to train"),
    "cache explain bad archive": (lambda c: ["cache", "explain", c.raw(b"nope")], "not a zip"),
    # inputs for run
    "npz missing": (lambda c: ["run", str(c.good), "--inputs", str(c.files / "nope.npz")], "no such file"),
    "npz directory": (lambda c: ["run", str(c.good), "--inputs", str(c.files)], "is a directory"),
    "npz not a zip": (lambda c: ["run", str(c.good), "--inputs", c.raw(b"x = 1\n", "in.npz")], "not an .npz"),
    "npz pickled objects": (lambda c: ["run", str(c.good), "--inputs",
                                       c.npz(x=np.array([{"a": 1}, None], dtype=object))], "never unpickles"),
    "npz extra array": (lambda c: ["run", str(c.good), "--inputs", c.npz(x=X, y=X)], "'y' is not an input"),
    "npz missing array": (lambda c: ["run", str(c.good), "--inputs", c.npz(z=X)], "'z' is not an input"),
    "npz no arrays": (lambda c: ["run", str(c.good), "--inputs", c.npz()], "no array for input 'x'"),
    "npz wrong shape": (lambda c: ["run", str(c.good), "--inputs", c.npz(x=np.zeros((4, 2), np.float32))],
                        "float32[4, 2], the program's input 'x' is float32[2, 4]"),
    "npz wrong dtype": (lambda c: ["run", str(c.good), "--inputs", c.npz(x=X.astype(np.float64))], "float64"),
    "npz plain .npy": (lambda c: ["run", str(c.good), "--inputs", _npy(c.files / "in.npz")], "not an .npz"),
    "npz truncated": (lambda c: ["run", str(c.good), "--inputs", _truncated(Path(c.npz(x=X)))], "in.npz"),
    "npz absurd header": (lambda c: ["run", str(c.good), "--inputs", _absurd_npz(c.files / "in.npz")],
                          "float32[1000000000000]"),
    # flags
    "unknown target": (lambda c: ["run", str(c.good), "--target", "gpu"], "invalid choice: 'gpu'"),
    "negative repeat": (lambda c: ["run", str(c.good), "--repeat", "-1"], "--repeat"),
    "inputs and random": (lambda c: ["run", str(c.good), "--random", "--inputs", "x.npz"], "not allowed with"),
    "unknown flag": (lambda c: ["compile", str(c.good), "--fast"], "unrecognized arguments: --fast"),
    "missing model argument": (lambda c: ["inspect"], "the following arguments are required"),
    "seed not a number": (lambda c: ["run", str(c.good), "--seed", "abc"], "invalid int value"),
    "demo zero steps": (lambda c: ["demo", "--steps", "0"], "--steps"),
    "output is a file": (lambda c: ["compile", str(c.good), "-o", c.raw(b"", "taken")], "not a directory"),
    "output below a file": (lambda c: ["compile", str(c.good), "-o", c.raw(b"", "taken") + "/build"],
                            "is not a directory)"),
    "cache dir is a file": (lambda c: ["cache", "clear", "--cache-dir", c.raw(b"", "cachefile")],
                            "must be a directory"),
    "cache list of a file": (lambda c: ["cache", "list", "--cache-dir", c.raw(b"", "cachefile")],
                             "must be a directory"),
    "unknown pass": (lambda c: ["inspect", str(c.good), "--after", "nope"], "no pass of that name"),
    "unknown nki target": (lambda c: ["inspect", str(c.good), "--cost", "--nki-target", "trn9"],
                           "invalid choice: 'trn9'"),
    "unknown command": (lambda c: ["frobnicate"], "invalid choice"),
}


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def _dangling(path: Path) -> str:
    path.symlink_to(path.parent / "gone.pt2")
    return str(path)


def _aoti_package(path: Path) -> str:
    """The layout torch._inductor.aoti_compile_and_package writes (compiled code, no models/*.json)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("aoti/archive_format", "pt2")
        archive.writestr("aoti/archive_version", "0")
        archive.writestr("aoti/data/aotinductor/model/c2j54tpd.wrapper.so", b"\x7fELF")
    return str(path)


def _npy(path: Path) -> str:
    with open(path, "wb") as file:
        np.save(file, X)
    return str(path)


def _truncated(path: Path) -> str:
    path.write_bytes(path.read_bytes()[:-40])
    return str(path)


def _absurd_npz(path: Path) -> str:
    _write_npz_member(path, "x", (10**12,))
    return str(path)


class Igamma(torch.nn.Module):
    """A program through a special function neuroncc has no lowering for (the regularized lower incomplete
    gamma function; torch.export keeps it as one aten op)."""

    def forward(self, x):
        return torch.igamma(x.abs() + 1, x.abs() + 1)


class Scale(torch.nn.Module):
    def forward(self, x, factor: int):
        return x * factor


@pytest.fixture(scope="module")
def unsupported_pt2(tmp_path_factory):
    """Valid archives of programs neuroncc refuses: an op it cannot lower, dynamic sizes (refused by compile), a
    dynamic number input, training a program with nothing to differentiate."""
    directory = tmp_path_factory.mktemp("pt2")
    x = torch.randn(2, 4)
    programs = {
        "igamma": torch.export.export(Igamma(), (x,)),
        "dynamic": torch.export.export(torch.nn.Linear(4, 3), (x,), dynamic_shapes=({0: torch.export.Dim("n")},)),
        "number": torch.export.export(Scale(), (x, 3), dynamic_shapes=(None, torch.export.Dim.DYNAMIC)),
        "no_parameters": torch.export.export(torch.nn.GELU(), (x,)),
    }
    for name, program in programs.items():
        torch.export.save(program, directory / f"{name}.pt2")
    return {name: directory / f"{name}.pt2" for name in programs}


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.fixture(scope="module")
def cli_server(tmp_path_factory):
    server = ForkServer(tmp_path_factory.mktemp("forkserver"))
    yield server
    server.close()


def _check_malformed(case, runner, good_pt2, unsupported_pt2, tmp_path):
    cwd, home, files = tmp_path / "cwd", tmp_path / "home", tmp_path / "files"
    for directory in (cwd, home, files):
        directory.mkdir()
    build, needle = CASES[case]
    argv = build(Corpus(files, good_pt2, unsupported_pt2))
    result = runner(*argv, cwd=cwd, home=home, cache=tmp_path / "cache")
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("neuroncc: error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert files_under(cwd) == [] and files_under(home) == []
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_input_is_one_line_and_writes_nothing(case, cli_server, good_pt2, unsupported_pt2, tmp_path):
    _check_malformed(case, cli_server.run, good_pt2, unsupported_pt2, tmp_path)


@pytest.mark.parametrize("case", ["missing file", "embedded pickle weight", "absurd input shape",
                                  "npz pickled objects", "unknown flag"])
def test_malformed_input_in_a_fresh_interpreter(case, good_pt2, unsupported_pt2, tmp_path):
    _check_malformed(case, run_process, good_pt2, unsupported_pt2, tmp_path)


#: ``neuroncc ARGV`` in this interpreter, then whether torch was imported (the last line printed).
_IMPORTS_TORCH = """import sys
from neuroncc.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("torch" in sys.modules)
"""


@pytest.mark.parametrize("argv", [["run", "nope.pt2"], ["compile", "nope.pt2"], ["inspect", "nope.pt2"],
                                  ["run", "nope.pt2", "--inputs", "nope.npz"]])
def test_a_missing_model_is_answered_before_torch_is_imported(argv, tmp_path):
    # programs.check_readable_file: a mistyped path is answered at once, not after a second or more of imports
    child = subprocess.run([sys.executable, "-c", _IMPORTS_TORCH, *argv], cwd=tmp_path, capture_output=True,
                           text=True, env=process_environment(tmp_path, tmp_path / "cache"), timeout=120)
    assert child.stderr.startswith("neuroncc: error: nope.") and "no such file" in child.stderr, child.stderr
    assert child.stdout.splitlines()[-1] == "False"
