"""How a ``neuroncc`` command's process ends (neuroncc/cli/process_exit.py): fast, and nothing lost.

Every case is a real process (``python -m neuroncc.cli``, the console script's entry ``run_and_exit``), with
``PYTHONUNBUFFERED`` removed from its environment as a user's shell has it (stdout to a file or a pipe is then
block-buffered: an exit that skipped the flush would lose its end). Each checks what a later process or the
caller sees: the cache entries a command stored, its exit code and output, the temporary files it made.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import numpy as np
from cli_testing import REPO_ROOT, process_environment

from neuroncc import __version__
from neuroncc.cli import main
from neuroncc.cli.process_exit import DISABLE_VARIABLE, fast_exit_allowed

FILECHECK = REPO_ROOT / "tests" / "filecheck"

#: ``neuroncc ARGV`` on a slow disk: the cache's writer takes a second inside each entry's write (after making its
#: temporary directory), so the command's work is done long before its entries are on the disk.
SLOW_DISK = """
import threading
import tempfile
import time

make_directory = tempfile.mkdtemp


def slow_make_directory(*args, **kwargs):
    path = make_directory(*args, **kwargs)
    if threading.current_thread().name == "neuroncc-cache-writer":
        time.sleep(1.0)
    return path


tempfile.mkdtemp = slow_make_directory
from neuroncc.cli import run_and_exit

run_and_exit()
"""

#: ``neuroncc ARGV`` in a process where a library left what Python's own exit finishes: a non-daemon thread still
#: writing, an atexit handler that writes a file and prints, a TemporaryDirectory never cleaned up.
LIBRARY_EXIT_WORK = """
import atexit
import os
import tempfile
import threading
import time
from pathlib import Path

marker = Path(os.environ["EXIT_TEST_MARKER"])


def write_late():
    time.sleep(1.0)
    marker.with_suffix(".thread").write_text("written")


def at_exit():
    marker.with_suffix(".atexit").write_text("written")
    print("printed at exit")


threading.Thread(target=write_late).start()
atexit.register(at_exit)
left_open = tempfile.TemporaryDirectory(prefix="left-open-")
from neuroncc.cli import run_and_exit

run_and_exit()
"""


def _environment(tmp_path: Path, fast: bool = True, **extra: str) -> dict[str, str]:
    home, temp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    temp.mkdir(exist_ok=True)
    env = process_environment(home, tmp_path / "cache")
    env.pop("PYTHONUNBUFFERED", None)
    env.update(TMPDIR=str(temp), **{DISABLE_VARIABLE: "0" if fast else "1"}, **extra)
    return env


def _neuroncc(tmp_path: Path, *argv: str, fast: bool = True, stdout=subprocess.PIPE, python_code: str | None = None,
              **extra_env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", python_code] if python_code else [sys.executable, "-m", "neuroncc.cli"]
    return subprocess.run([*command, *argv], cwd=tmp_path, env=_environment(tmp_path, fast, **extra_env),
                          stdout=stdout, stderr=subprocess.PIPE, timeout=600)


def _left_in(directory: Path) -> list[str]:
    """What is in ``directory`` but torch's own caches (``torchinductor_USER``, kept by design)."""
    return sorted(path.name for path in directory.iterdir() if not path.name.startswith("torchinductor_"))


def test_the_entries_a_command_stored_are_complete_and_hit_by_the_next_process(good_pt2, tmp_path):
    """``run`` stores the compiled graph and, last, its program-cache entry (docs/cache.md), both on the cache's
    background writer: whole on the disk when the command has exited, and the next ``run`` compiles nothing."""
    cache = tmp_path / "cache"
    first = _neuroncc(tmp_path, "run", str(good_pt2), "--random", "-q", python_code=SLOW_DISK)
    assert first.returncode == 0, first.stderr.decode()
    assert "compiled and cached" in first.stdout.decode()
    entries = sorted(path.name for path in (cache / "entries").iterdir())
    assert len(entries) == 2  # the graph's artifact and the program's entry
    assert _left_in(cache / "tmp") == []  # no entry left half-written
    verify = _neuroncc(tmp_path, "cache", "verify", "--cache-dir", str(cache))
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
    second = _neuroncc(tmp_path, "run", str(good_pt2), "--random", "-q", python_code=SLOW_DISK)
    assert second.returncode == 0, second.stderr.decode()
    assert "loaded from the compile cache" in second.stdout.decode()
    assert sorted(path.name for path in (cache / "entries").iterdir()) == entries  # nothing new to store


def test_exit_codes_and_output_are_those_of_pythons_own_exit(good_pt2, tmp_path):
    """Success, usage errors (argparse's), typed errors; exit 1 (a check that failed) is the next test."""
    commands = {
        0: [("--version",), ("cache", "list"),
            ("opt", str(FILECHECK / "canonicalize.nir"), "-p", "canonicalize", "--split-input-file")],
        2: [("bogus",), ("compile",), ("compile", "--jobs"), ("compile", str(tmp_path / "missing.pt2")),
            ("run", str(good_pt2), "--inputs", str(tmp_path / "missing.npz"))],
    }
    for expected, argvs in commands.items():
        for argv in argvs:
            fast, slow = _neuroncc(tmp_path, *argv), _neuroncc(tmp_path, *argv, fast=False)
            assert fast.returncode == slow.returncode == expected, (argv, fast.stderr.decode())
            assert (fast.stdout, fast.stderr) == (slow.stdout, slow.stderr), argv
            assert b"Traceback" not in fast.stderr


def test_a_check_that_failed_exits_1(good_pt2, tmp_path):
    assert _neuroncc(tmp_path, "compile", str(good_pt2), "-q").returncode == 0
    (entry,) = (tmp_path / "cache" / "entries").iterdir()
    manifest = entry / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"', "'", 1))
    for fast in (True, False):
        verify = _neuroncc(tmp_path, "cache", "verify", "--cache-dir", str(tmp_path / "cache"), fast=fast)
        assert verify.returncode == 1, verify.stdout.decode() + verify.stderr.decode()


def test_output_redirected_to_a_file_is_complete(classifier_pt2, tmp_path):
    """Printed line by line (the last lines are still in stdout's buffer when the command returns), or once."""
    inspect, version = ("inspect", str(classifier_pt2), "--after", "all"), ("--version",)
    outputs = {}
    for argv in (inspect, version):
        for fast in (True, False):
            path = tmp_path / f"out-{fast}.txt"
            with open(path, "wb") as out:
                assert _neuroncc(tmp_path, *argv, fast=fast, stdout=out).returncode == 0
            outputs[argv, fast] = path.read_bytes()
        assert outputs[argv, True] == outputs[argv, False], argv
    assert len(outputs[inspect, True]) > 32 * 1024 and outputs[inspect, True].endswith(b"}\n")
    assert outputs[version, True] == f"neuroncc {__version__}\n".encode()


def test_what_libraries_leave_for_the_exit_is_done(tmp_path):
    """A non-daemon thread is joined, atexit handlers run (and what they print is flushed), a TemporaryDirectory
    never cleaned up is removed by its finalizer."""
    for fast in (True, False):
        marker = tmp_path / f"marker-{fast}"
        done = _neuroncc(tmp_path, "--version", fast=fast, python_code=LIBRARY_EXIT_WORK,
                         EXIT_TEST_MARKER=str(marker))
        assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
        assert done.stdout.decode().splitlines() == [f"neuroncc {__version__}", "printed at exit"]
        assert marker.with_suffix(".thread").read_text() == marker.with_suffix(".atexit").read_text() == "written"
        assert _left_in(tmp_path / "tmp") == []


def _into_a_closed_reader(tmp_path: Path, *argv: str, read: int, fast: bool) -> subprocess.CompletedProcess:
    """``neuroncc ARGV | head -c READ``: the reader takes ``read`` bytes (0: none, it has gone before the command
    writes), then closes the pipe."""
    reader, writer = os.pipe()
    try:
        if read == 0:
            os.close(reader)
        child = subprocess.Popen([sys.executable, "-m", "neuroncc.cli", *argv], cwd=tmp_path,
                                 env=_environment(tmp_path, fast), stdout=writer, stderr=subprocess.PIPE)
        os.close(writer)
        if read:
            with os.fdopen(reader, "rb") as pipe:
                assert len(pipe.read(read)) == read
        stderr = child.communicate(timeout=600)[1]
    except BaseException:
        child.kill()
        raise
    return subprocess.CompletedProcess(argv, child.returncode, b"", stderr)


def test_output_into_a_closed_pipe_is_no_error(tmp_path):
    """A reader that has gone is no error, as in ``cli.main``: exit 0, nothing on stderr (Python's own exit
    printed ``Exception ignored ... BrokenPipeError`` and exited 120 when the output was still buffered)."""
    big = ("opt", str(FILECHECK / "tile-llvm.nir"), "--split-input-file", "--emit", "llvm")
    for fast in (True, False):
        for argv, read in ((big, 100), (big, 0), (("--version",), 0)):
            done = _into_a_closed_reader(tmp_path, *argv, read=read, fast=fast)
            assert (done.returncode, done.stderr) == (0, b""), (argv, read, fast)


def test_no_temporary_files_are_left(good_pt2, tmp_path):
    """The cache's temporary directories (on a slow disk: still being written when the command is done) and the
    temporary files of the commands and of what they call (torch.export's loader, the linker)."""
    for argv in (("compile", str(good_pt2), "-q"), ("run", str(good_pt2), "--random", "--check", "-q",
                                                      "--save-outputs", str(tmp_path / "y.npz"))):
        done = _neuroncc(tmp_path, *argv, python_code=SLOW_DISK)
        assert done.returncode == 0, done.stderr.decode()
        assert _left_in(tmp_path / "tmp") == [], argv
        assert _left_in(tmp_path / "cache" / "tmp") == [], argv
    with np.load(tmp_path / "y.npz") as saved:
        assert len(saved.files) == 1


def test_demo_ends_with_everything_written_and_removed(tmp_path):
    done = _neuroncc(tmp_path, "demo", "--steps", "2", "-q")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().rstrip().splitlines()[-1].startswith("done in")
    assert _left_in(tmp_path / "tmp") == []  # the demo's directory and its cache


def test_main_in_a_process_returns():
    """Tests and programs call ``main``; only the console script's entry ends the process."""
    assert main(["opt", "--list-passes"]) == 0


def test_the_console_script_is_the_entry_that_exits():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["neuroncc"] == "neuroncc.cli:run_and_exit"


def test_when_the_fast_exit_is_off():
    untraced = sys.gettrace() is None and sys.getprofile() is None  # (pytest under a coverage tracer: traced)
    assert fast_exit_allowed({}) == fast_exit_allowed({DISABLE_VARIABLE: "0"}) == untraced
    assert not fast_exit_allowed({DISABLE_VARIABLE: "1"})
    previous = sys.getprofile()
    sys.setprofile(lambda *args: None)  # a profiler writes its report after the program returns
    try:
        assert not fast_exit_allowed({})
    finally:
        sys.setprofile(previous)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(fast_exit_allowed({})))
    worker.start()
    worker.join()
    assert outcome == [False]
