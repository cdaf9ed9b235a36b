"""Kernels linked into one shared library and loaded by the dynamic loader (codegen/llvm/native_library.py), and
the fallback to object files for MCJIT where no library can be made or loaded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from codegen_helpers import background_builds_finished, many_kernels

from neuroncc.codegen.llvm import jit, native_library
from neuroncc.codegen.llvm.native_library import CodeForm, LibraryModule
from neuroncc.errors import ArtifactError, SharedLibraryWarning
from neuroncc.executors.cpu import code_files
from neuroncc.executors.cpu.launcher import build_cpu_executable, load_cpu_executable, stored_code
from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline

needs_linker = pytest.mark.skipif(native_library.linker() is None, reason="no linker (ld) on PATH")


def softmax_graph():
    b = Builder("softmax")
    x = b.param(TensorType((8, 64), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return run_pipeline(default_pipeline("cpu"), b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))]))


@pytest.fixture
def private_tempdir(monkeypatch, tmp_path):
    """This test's own temporary directory: another test worker's (or process's) build links and loads in the
    shared one at the same moment, so a count of leftovers there is not this test's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _leftover_libraries() -> set[str]:
    """Files and directories a link or load left in the temporary directory (the process's loader directory
    stays for its life: counted by what is in it)."""
    temp = tempfile.gettempdir()
    found = set()
    for name in os.listdir(temp):
        if name.startswith("neuroncc-link-"):
            found.add(name)
        elif name.startswith("neuroncc-so-"):
            found.update(f"{name}/{inner}" for inner in os.listdir(os.path.join(temp, name)))
    return found


@pytest.fixture
def fresh_link_directory(monkeypatch):
    """A loader directory of this test's own (made on its first load, in the test's temporary directory)."""
    monkeypatch.setattr(native_library, "_LINKS", native_library._LinkDirectory())
    return native_library._LINKS


@needs_linker
def test_a_build_links_one_library_and_loads_it_leaving_no_file(rng, private_tempdir, fresh_link_directory):
    before = _leftover_libraries()
    exe = build_cpu_executable(softmax_graph(), {})
    assert isinstance(exe.module, LibraryModule) and exe.plan.code_form == "shared-library"
    assert exe.module.library.startswith(b"\x7fELF")
    assert _leftover_libraries() == before  # linked in a private directory (removed), loaded from a link (removed)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], interpret(exe.function, [x])[0], rtol=1e-5, atol=1e-6)


@pytest.fixture
def no_memory_files(monkeypatch):
    """Loads as where memory files do not work (no memfd_create, vm.memfd_noexec): through a private file."""

    def refuse(library):
        raise OSError("memory files are not available here (test)")

    monkeypatch.setattr(native_library, "_load_from_memory", refuse)


@needs_linker
def test_loads_from_memory_files_write_nothing_and_each_runs_its_own_code(rng, private_tempdir,
                                                                          fresh_link_directory):
    """A load opens its memory file as /proc/self/fd/N spelled anew each time (native_library's docstring): no
    file, link or directory is made (a link and its removal in the private directory cost 0.2-0.37 ms a load on
    this machine's ext4: session 30 cload30), and libraries loaded one after the other through the same
    descriptor number each run their own code."""
    first_exe, second_exe = build_cpu_executable(softmax_graph(), {}), build_cpu_executable(many_kernels(), {})
    first, second = first_exe.module.library, second_exe.module.library
    names = []
    real_cdll = native_library.ctypes.CDLL

    def recording(name, *args, **kwargs):
        names.append(name)
        return real_cdll(name, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native_library.ctypes, "CDLL", recording)
        loaded = [native_library.load_library(library) for library in (first, second, first)]
    assert len(set(names)) == 3 and all(name.startswith("/proc/self/") for name in names)
    assert fresh_link_directory.directory() is None and not list(private_tempdir.iterdir())
    assert len({module.handle._handle for module in loaded}) == 3  # three loads, three libraries
    x = rng.standard_normal((8, 64)).astype(np.float32)
    again = load_cpu_executable_from(first_exe, loaded[2])
    np.testing.assert_array_equal(again(x)[0], first_exe(x)[0])


def load_cpu_executable_from(exe, module):
    """``exe`` rebound to the kernels of ``module`` (another load of the same library)."""
    from neuroncc.executors.cpu.launcher import CpuExecutable

    return CpuExecutable(exe.function, exe.plan, module, exe.threads)


def test_memory_file_names_differ_for_every_load_and_stay_short():
    names = {native_library._memory_file_name(3, n) for n in range(1, 5000)}
    assert len(names) == 4999 and all(name.endswith("fd/3") and name.startswith("/proc/self/") for name in names)
    assert len(native_library._memory_file_name(3, 2**20)) < 60


@needs_linker
def test_loads_share_one_private_directory_at_new_names(private_tempdir, fresh_link_directory, no_memory_files):
    """Where memory files do not work, a fresh directory per load cost more than the rest of a cache hit's load
    (native_library's docstring): the process makes one, mode 0700, and writes each library there at a name
    never used before (the dynamic loader hands back a library it has loaded under a name without opening
    anything): two different libraries loaded one after the other each run their own code."""
    first = build_cpu_executable(softmax_graph(), {}).module.library
    second = build_cpu_executable(many_kernels(), {}).module.library
    names = []
    make = native_library._LinkDirectory.new_name

    def recording(self, create):
        path = make(self, create)
        names.append(path)
        return path

    directories = lambda: [p for p in private_tempdir.iterdir() if p.name.startswith("neuroncc-so-")]  # noqa: E731
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native_library._LinkDirectory, "new_name", recording)
        loaded = [native_library.load_library(library) for library in (first, second, first)]
    [directory] = directories()
    assert directory == fresh_link_directory.directory() and directory.stat().st_mode & 0o777 == 0o700
    assert len(set(names)) == 3 and {p.parent for p in names} == {directory} and not list(directory.iterdir())
    assert len({module.handle._handle for module in loaded}) == 3  # three loads, three libraries
    directory.rmdir()  # deleted under the process: the next load makes another
    native_library.load_library(first)
    assert len(directories()) == 1 and directories()[0] != directory


@needs_linker
def test_a_child_forked_while_another_thread_loads_a_library_loads_its_own(fresh_link_directory, no_memory_files):
    """A fork while a thread of the parent holds the directory's lock (a background build loading its library):
    the child, which has no such thread, takes a fresh lock and makes a directory of its own."""
    library = build_cpu_executable(softmax_graph(), {}).module.library
    parents = fresh_link_directory.directory()
    assert parents is not None
    with native_library._LINKS._lock:
        pid = os.fork()
        if pid == 0:  # the child: an alarm ends it if the load waits for the parent's lock
            code = 1
            try:
                signal.alarm(5)
                native_library.load_library(library)
                code = 0 if native_library._LINKS.directory() not in (None, parents) else 2
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@needs_linker
def test_the_loader_directory_is_removed_at_exit_and_a_dead_processes_one_by_the_next(tmp_path):
    script = ("import os, sys; from neuroncc.codegen.llvm import native_library as n; from neuroncc.executors.cpu"
              ".launcher import build_cpu_executable; from neuroncc.ir import Builder, DType, TensorType; "
              "b = Builder('f'); x = b.param(TensorType((4,), DType.f32), 'x'); "
              "build_cpu_executable(b.build([b.op('exp', x)]), {}); "
              "print(n._LINKS.directory()); sys.stdout.flush(); os._exit(0) if sys.argv[1] == 'kill' else None")
    script = script.replace("b = Builder", "n._load_from_memory = n._load_from_private_file; b = Builder", 1)  # as
    # where memory files do not work: the private directory is used
    env = dict(os.environ, TMPDIR=str(tmp_path))
    run = lambda how: subprocess.run([sys.executable, "-c", script, how], env=env, capture_output=True,  # noqa: E731
                                     text=True, check=True).stdout.strip()
    killed = Path(run("kill"))
    assert killed.parent == tmp_path and killed.is_dir()  # os._exit: no exit handlers ran
    exited = Path(run("exit"))
    assert exited.parent == tmp_path and not exited.exists() and not killed.exists()


@needs_linker
def test_position_independent_kernels_use_no_global_offset_table():
    """The small code model's constants load RIP-relative; nothing in the kernels goes through a GOT (which
    would add a load to every constant's use in a hot loop)."""
    exe = build_cpu_executable(softmax_graph(), {})
    text = jit.assembly(exe.module.llvm_ir)
    assert "(%rip)" in text and "GOTPCREL" not in text and "movabs" not in text


def test_without_a_linker_kernels_are_objects_for_mcjit(monkeypatch, rng, tmp_path):
    background_builds_finished()
    monkeypatch.setattr(native_library, "linker", lambda: None)
    assert native_library.code_form() is CodeForm.OBJECTS
    exe = build_cpu_executable(softmax_graph(), {})
    assert isinstance(exe.module, jit.JitModule) and exe.plan.code_form == "objects"
    exe.save(tmp_path)
    assert (tmp_path / "kernels.a").exists() and not (tmp_path / "kernels.so").exists()
    loaded = load_cpu_executable(tmp_path, exe.function)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x)[0], exe(x)[0])


@needs_linker
def test_a_failing_link_falls_back_to_objects_for_the_rest_of_the_process(monkeypatch, rng):
    background_builds_finished()
    monkeypatch.setattr(native_library, "_BROKEN", [])
    monkeypatch.setattr(native_library, "linker", lambda: "/bin/false")
    with pytest.warns(SharedLibraryWarning, match="/bin/false"):
        exe = build_cpu_executable(softmax_graph(), {})
    assert isinstance(exe.module, jit.JitModule) and exe.plan.code_form == "objects"
    assert native_library._BROKEN and "`/bin/false -shared" in native_library._BROKEN[0]
    monkeypatch.setattr(native_library, "linker", lambda: "/usr/bin/ld")
    assert native_library.code_form() is CodeForm.OBJECTS  # decided once a library failed
    x = rng.standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], interpret(exe.function, [x])[0], rtol=1e-5, atol=1e-6)


@needs_linker
def test_the_objects_reach_the_linker_as_one_archive_and_link_as_if_named_one_by_one(monkeypatch, tmp_path):
    """One input file (each file written costs GIL hand-offs beside a thread running Python: link's docstring),
    and the same library, byte for byte, as the objects given to the linker one by one."""
    objects = build_cpu_executable(many_kernels(), {}).module.objects
    assert len(objects) >= 2
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        return subprocess.run(command, **kwargs)

    monkeypatch.setattr(native_library, "subprocess",
                        SimpleNamespace(run=run, DEVNULL=subprocess.DEVNULL, PIPE=subprocess.PIPE))
    library = native_library.link(objects)
    [command] = commands
    inputs = [argument for argument in command if argument.endswith((".o", ".a"))]
    assert len(inputs) == 1 and inputs[0].endswith(".a") and command[-2:] == ["--whole-archive", inputs[0]]
    names = []
    for number, data in enumerate(objects):
        names.append(tmp_path / f"{number}.o")
        names[-1].write_bytes(data)
    one_by_one = tmp_path / "one_by_one.so"
    subprocess.run([native_library.linker(), *native_library.LINK_FLAGS, "-o", str(one_by_one), *map(str, names)],
                   check=True, capture_output=True)
    assert library == one_by_one.read_bytes()


@needs_linker
def test_a_library_is_linked_and_loaded_at_the_short_switch_interval(monkeypatch):
    """Beside a thread running Python each of the link's system calls can wait out the GIL's whole switch
    interval (jit._load's docstring): both steps run at the compile workers' short interval, restored after."""
    texts = build_cpu_executable(softmax_graph(), {}).module.llvm_ir
    seen = []
    link, load_library = jit.link, jit.load_library

    def linking(objects):
        seen.append(sys.getswitchinterval())
        return link(objects)

    def loading(*args):
        seen.append(sys.getswitchinterval())
        return load_library(*args)

    monkeypatch.setattr(jit, "link", linking)
    monkeypatch.setattr(jit, "load_library", loading)
    before = sys.getswitchinterval()
    assert isinstance(jit.compile_ir(texts), LibraryModule)
    assert len(seen) == 2 and max(seen) <= jit.WORKER_SWITCH_INTERVAL < before
    assert sys.getswitchinterval() == before


def test_a_library_that_does_not_load_is_an_artifact_error():
    with pytest.raises(ArtifactError, match="cannot load the kernel library"):
        native_library.load_library(b"\x7fELF not really")


@needs_linker
def test_a_missing_symbol_is_an_artifact_error():
    module = build_cpu_executable(softmax_graph(), {}).module
    with pytest.raises(ArtifactError, match="missing"):
        module.address("no_such_phase")


@needs_linker
def test_the_quick_tier_stand_in_is_objects_and_the_optimized_code_a_library():
    b = Builder("sig")
    x = b.param(TensorType((4, 8), DType.f32), "x")
    fn = run_pipeline(default_pipeline("cpu"), b.build([b.op("sigmoid", x)]))
    quick = build_cpu_executable(fn, {"quick_first": True})
    assert quick.optimized is not None, "a small tier-independent kernel starts at the quick tier"
    assert quick.module.form is CodeForm.OBJECTS  # never stored: no link
    assert quick.optimized.result().module.form is CodeForm.SHARED_LIBRARY


WARM_CHILD = """
import json, sys
from pathlib import Path
import numpy as np
from neuroncc.driver.artifact import read_graph
from neuroncc.executors.cpu.launcher import load_cpu_executable
exe = load_cpu_executable(sys.argv[1], read_graph(Path(sys.argv[1])), {"threads": 2})
out = exe(np.ones((8, 64), np.float32))[0]  # a native sequence: the helpers are loaded too
print(json.dumps({"llvm": sorted(m for m in sys.modules if m.startswith("llvmlite")),
                  "module": type(exe.module).__name__, "sum": float(out.sum())}))
"""


@needs_linker
def test_a_fresh_process_loads_an_artifact_and_its_helpers_without_llvm(tmp_path):
    from neuroncc.driver.artifact import write_graph

    exe = build_cpu_executable(softmax_graph(), {"threads": 2})
    exe.save(tmp_path)
    write_graph(exe.function, tmp_path)
    done = subprocess.run([sys.executable, "-c", WARM_CHILD, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr[-2000:]
    report = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert report["llvm"] == [] and report["module"] == "LibraryModule"
    assert report["sum"] == pytest.approx(8.0, rel=1e-5)  # each softmax row sums to one


@needs_linker
def test_a_corrupt_library_is_refused_before_it_is_loaded(tmp_path, monkeypatch):
    exe = build_cpu_executable(softmax_graph(), {})
    exe.save(tmp_path)
    library = (tmp_path / "kernels.so").read_bytes()
    (tmp_path / "kernels.so").write_bytes(library[:-1] + bytes([library[-1] ^ 1]))
    monkeypatch.setattr(code_files, "load_library", lambda *a, **k: pytest.fail("loaded unchecked bytes"))
    with pytest.raises(ArtifactError, match="corrupt"):
        load_cpu_executable(tmp_path, exe.function)
    assert stored_code(exe.module) == library
    assert Path(tmp_path / "kernels.so").stat().st_size == len(library)


def _which_library(number: int) -> bytes:
    """A one-function library whose ``which()`` returns ``number``: libraries that differ only in their code."""
    text = f"define i32 @which() {{\n  ret i32 {number}\n}}\n"
    return jit.compile_ir([text], form=CodeForm.SHARED_LIBRARY).library


def _which(module: LibraryModule) -> int:
    import ctypes

    return ctypes.CFUNCTYPE(ctypes.c_int)(module.address("which"))()


@needs_linker
def test_each_loaded_library_runs_its_own_code(private_tempdir):
    """The dynamic loader hands back an already-loaded library for a name it has seen (without opening the
    file), and descriptor numbers are reused: every load must go through a name never used before."""
    libraries = [_which_library(number) for number in (1, 2, 3)]
    before = _leftover_libraries()
    assert [_which(native_library.load_library(library)) for library in libraries * 2] == [1, 2, 3] * 2
    assert _leftover_libraries() == before


@needs_linker
def test_without_memory_files_a_library_loads_from_a_private_file(monkeypatch, private_tempdir):
    def refuse(*args):
        raise OSError("memfd_create refused")

    monkeypatch.setattr(os, "memfd_create", refuse)
    before = _leftover_libraries()
    assert [_which(native_library.load_library(_which_library(n))) for n in (4, 5)] == [4, 5]
    assert _leftover_libraries() == before
    with pytest.raises(ArtifactError, match="memfd_create refused"):  # both ways named when neither loads
        native_library.load_library(b"\x7fELF not really")


NOEXEC_CHILD = """
import json, sys, tempfile
import numpy as np
from neuroncc.codegen.llvm import native_library
from neuroncc.executors.cpu.launcher import build_cpu_executable, load_cpu_executable
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline
b = Builder("sig")
x = b.param(TensorType((4, 8), DType.f32), "x")
fn = run_pipeline(default_pipeline("cpu"), b.build([b.op("sigmoid", x)]))
exe = build_cpu_executable(fn, {})
exe.save(sys.argv[1])
loaded = load_cpu_executable(sys.argv[1], exe.function)
print(json.dumps({"tmp": tempfile.gettempdir(), "broken": native_library._BROKEN,
                  "forms": [exe.plan.code_form, type(loaded.module).__name__],
                  "out": float(loaded(np.zeros((4, 8), np.float32))[0].sum())}))
"""


def _noexec_mount_works() -> bool:
    probe = "d=$(mktemp -d) && mount -t tmpfs -o noexec tmpfs \"$d\" && grep -q \" $d .*noexec\" /proc/mounts"
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@needs_linker
def test_a_noexec_temporary_directory_still_loads_shared_libraries(tmp_path):
    """Hardened hosts mount /tmp ``noexec``: a library mapped from a file there fails to load (and the process
    would fall back to MCJIT, importing LLVM on every warm start); from a memory file it loads."""
    if not _noexec_mount_works():
        pytest.skip("no user namespace here to mount a noexec tmpfs in")
    noexec = tmp_path / "noexec-tmp"
    noexec.mkdir()
    script = (f'mount -t tmpfs -o noexec tmpfs "{noexec}" && TMPDIR="{noexec}" '
              f'exec "{sys.executable}" -c "$0" "{tmp_path / "artifact"}"')
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script, NOEXEC_CHILD], capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr[-2000:]
    report = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert report["tmp"] == str(noexec)
    assert report["broken"] == [] and report["forms"] == ["shared-library", "LibraryModule"]
    assert report["out"] == pytest.approx(16.0)  # sigmoid(0) = 0.5, 32 elements
