"""Kernel object code as one shared library, loaded by the platform's dynamic loader (no LLVM at load time).

A compiled graph's phases are object files (:mod:`neuroncc.codegen.llvm.jit` compiles one per phase). Where a
linker is available when they are compiled, they are position-independent (small code model, RIP-relative
constant-pool loads, no GOT: the kernels call nothing but ``memmove``) and ``ld -shared`` links them into one
library, which ``dlopen`` loads (``ld`` started with a copy of the environment, and once more after a transient
failure to start: :func:`_run_linker`). A process that loads a cached artifact then maps machine code without
importing llvmlite or initializing LLVM (~25-30 ms of a warm start). Where no linker is found, or linking or loading a
library fails here, the objects are compiled with static relocations and the large code model instead and loaded
into an MCJIT engine (the :class:`CodeForm` ``OBJECTS``): :func:`code_form` is the one place that decides, and the
launch plan records the form an artifact holds (``CpuLaunchPlan.code_form``).

Loading: the library's bytes, already checked against the artifact's recorded sha256 by the caller, are written
to an anonymous memory file (``memfd_create``) sealed against any further change, which the dynamic loader opens
as ``/proc/self/fd/N`` spelled in a way never used before in the process (:func:`_memory_file_name`: ``.``
components between ``/proc/self`` and ``fd`` spell a counter in binary, ``/proc/self/./fd/N``,
``/proc/self/.//fd/N``, ...). Nobody can swap or edit the code between the check and ``dlopen``, and a
``noexec`` temporary directory does not matter (the code is mapped from the memory file). The name must be new
because the loader returns an already-loaded library for a name it has seen without opening anything, and
descriptor numbers are reused once closed; the loader compares names as text, so a new spelling of the same path
is a new name. Where memory files cannot be made or mapped executable (no ``memfd_create``; ``vm.memfd_noexec``;
no ``/proc``), the bytes go to a new file (``O_EXCL``, mode 0600) at a new name (a counter) in the process's
private directory (``mkdtemp``: mode 0700, made on the first such load, :class:`_LinkDirectory`). The file is
removed and the memory file closed right after: the mapping keeps its inode alive (so the loader, which also
identifies libraries by device and inode, can never mistake a later library for it). The directory stays, empty,
for the process's life and is removed at exit (one left by a killed process is removed by the next process that
loads a library). It is made once because a fresh directory per load cost more than the rest of the load: mkdtemp
and rmdir took 0.9-2.3 ms a load on this machine's ext4 (session 27, devgen27). Until session 30 the memory file
was opened through a symbolic link in that directory: its creation and removal cost 0.2-0.37 ms a load on the
same ext4 (20-50 us when measured in session 27), and a warm process of the eager device loads one library per
new op signature (cload30). A library is never unloaded (ctypes never calls ``dlclose``); :class:`LibraryModule`
holds its handle for the executables that use it.
"""

from __future__ import annotations

import atexit
import ctypes
import enum
import errno
import fcntl
import itertools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from neuroncc.codegen.llvm.ar_archive import write_archive
from neuroncc.codegen.llvm.fork_safety import in_child, renew_in_child
from neuroncc.errors import ArtifactError, SharedLibraryWarning

_log = logging.getLogger("neuroncc.codegen")


class CodeForm(enum.Enum):
    """How a compiled graph's object code is stored and loaded."""

    SHARED_LIBRARY = "shared-library"  # position-independent objects linked into one .so, loaded by dlopen
    OBJECTS = "objects"  # static, large-code-model objects (an ar archive), loaded by LLVM's MCJIT


#: The linker's command line for a library of position-independent objects (the objects follow). ``-Bsymbolic``:
#: the library's own symbols bind inside it; no build id and no executable stack: reproducible, and what the
#: objects ask for.
LINK_FLAGS = ("-shared", "-Bsymbolic", "--build-id=none", "-z", "noexecstack", "-z", "now")

_LOCK = renew_in_child(threading.Lock())
_BROKEN: list[str] = []  # why shared libraries do not work in this process (linking or loading failed once)


def linker() -> str | None:
    """The path of ``ld`` on ``PATH``, or None."""
    return shutil.which("ld")


def code_form(stored: bool = True) -> CodeForm:
    """The form this process compiles kernels in: a shared library when a linker is found and no library has
    failed to link or load here yet, else objects for MCJIT. The one decision (see the module docstring).

    ``stored=False``: code no artifact will hold (the quick tier's stand-in while the optimized build is made,
    ``executors/cpu/tiers.py``) is loaded into MCJIT, as objects: LLVM is loaded anyway in the process that
    compiled it, and linking (~3.5 ms a library) would cost as much as compiling a quick module."""
    if not stored or _BROKEN or linker() is None:
        return CodeForm.OBJECTS
    return CodeForm.SHARED_LIBRARY


def give_up(reason: str) -> None:
    """Record that linking or loading a library failed here: :func:`code_form` says ``OBJECTS`` from now on.

    Never silently: one :class:`~neuroncc.errors.SharedLibraryWarning` naming ``reason`` (the linker's command
    and stderr, or the loader's error and file), a warning on the ``neuroncc.codegen`` logger (``NEURONCC_LOG``,
    ``TORCH_LOGS=neuroncc``), and the reason kept for :func:`given_up` (``neuroncc.evaluate``'s report lists it).
    Until session 32 the process went on silently, and two test processes of session 31 that gave up left no
    trace of which link or load failed."""
    with _LOCK:
        _BROKEN.append(reason)
    message = f"neuroncc: {reason}; this process compiles kernels as objects for MCJIT from now on"
    _log.warning("%s", message)
    warnings.warn(message, SharedLibraryWarning, stacklevel=2)


def given_up() -> tuple[str, ...]:
    """Why this process gave the shared-library form up (empty: it has not), in order."""
    with _LOCK:
        return tuple(_BROKEN)


@dataclass
class LibraryModule:
    """Machine code loaded from a shared library: symbol addresses stay valid for the process (a library is never
    unloaded; holding this keeps the handle with the code that uses it).

    ``library`` is the library's bytes (what an artifact stores), ``objects`` the position-independent object
    files it was linked from (empty when loaded from an artifact), ``llvm_ir`` the unoptimized modules they were
    compiled from (for inspection and the artifact's ``kernels.ll``)."""

    library: bytes
    handle: ctypes.CDLL
    objects: list[bytes] = field(default_factory=list)
    llvm_ir: list[str] = field(default_factory=list)
    form: CodeForm = CodeForm.SHARED_LIBRARY

    def address(self, symbol: str) -> int:
        try:
            function = self.handle[symbol]
        except AttributeError:
            raise ArtifactError(f"symbol '{symbol}' is missing from the kernel library") from None
        return ctypes.cast(function, ctypes.c_void_p).value or 0


def link(objects: list[bytes]) -> bytes:
    """``objects`` (position-independent) linked into one shared library; OSError when that fails.

    The objects go to the linker as one ``ar`` archive taken whole (``--whole-archive``: every member, in
    order, the same library as the objects named one by one): one file written instead of one per object,
    and only the linker's stderr read. Each system call here releases the GIL and has to take it back, which
    costs up to the switch interval while another thread runs Python (a compile's link runs beside
    AOTAutograd: ``jit._load`` shortens the interval meanwhile); the forward's six objects of the transformer
    step linked and loaded beside a Python loop: 154 ms (one file each, 5 ms interval) -> 94 (the archive)
    -> 23 (the archive and the 0.5 ms interval), against ~6 ms of ``ld`` alone (Zen 3, session 21)."""
    command = linker()
    if command is None:
        raise OSError("no linker (ld) on PATH")
    with tempfile.TemporaryDirectory(prefix="neuroncc-link-") as directory:
        archive = Path(directory) / "kernels.a"
        _write_private(archive, write_archive(objects))
        output = Path(directory) / "kernels.so"
        done = _run_linker([command, *LINK_FLAGS, "-o", str(output), "--whole-archive", str(archive)])
        if done.returncode != 0:
            raise OSError(f"`{' '.join(done.args)}` exited with "
                          f"{done.returncode}: {done.stderr.decode(errors='replace').strip()[:2000]}")
        return output.read_bytes()


#: ``errno`` of a spawn that failed before the linker ran, saying nothing about the linker: worth one more try.
_TRANSIENT_SPAWN_ERRORS = frozenset({errno.EFAULT, errno.EAGAIN, errno.ENOMEM})


def _run_linker(arguments: list[str]) -> subprocess.CompletedProcess:
    """``ld`` run with ``arguments``, given a copy of the environment (:func:`environment_copy`), never the live one.

    ``subprocess`` starts the child with ``vfork``: until it execs, the child shares the parent's memory while the
    parent's other threads run on. Without ``env=`` the child's exec reads the process's live ``environ`` array,
    and a thread adding a variable meanwhile (``os.environ[...] = ...``, pytest's ``monkeypatch.setenv``: the
    tests' autouse fixtures do it for every test, beside the builds earlier tests left linking in the
    background) makes ``setenv`` move that array and free the old one, whose first entries ``free`` overwrites
    with its own pointers (one removing a variable shifts the entries between the kernel's count of them and its
    copy): exec then fails with EFAULT (``OSError: [Errno 14] Bad address: '/usr/bin/ld'``;
    sessions 36-37, one test worker in every suite run). With ``env=`` the arguments and the environment are
    built by the calling thread, which ``vfork`` stops until the exec, so no other thread can change what the
    exec reads. A spawn that still fails for a transient reason (EAGAIN, ENOMEM, EFAULT) runs once more before the
    failure reaches ``jit._load`` (which gives the shared form up for the rest of the process)."""
    def run() -> subprocess.CompletedProcess:
        return subprocess.run(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
                              env=environment_copy())

    try:
        return run()
    except OSError as exc:
        if exc.errno not in _TRANSIENT_SPAWN_ERRORS:
            raise
        _log.info("neuroncc: starting the linker failed (%s: %s); trying once more", type(exc).__name__, exc)
    return run()


def environment_copy(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``environ`` for a child's ``env=``, taken while other threads may change it (a variable removed
    between listing the names and reading its value: copied again)."""
    while True:
        try:
            return dict(environ)
        except (KeyError, RuntimeError):
            continue


def load_library(library: bytes, objects: list[bytes] | None = None,
                 llvm_ir: list[str] | None = None) -> LibraryModule:
    """Load ``library`` (bytes the caller has checked) through a sealed memory file, else a private file;
    ArtifactError naming both failures if neither loads."""
    try:
        handle = _load_from_memory(library)
    except OSError as memory_error:
        try:
            handle = _load_from_private_file(library)
        except OSError as file_error:
            raise ArtifactError(f"cannot load the kernel library: {file_error} (and from a memory file: "
                                f"{memory_error})") from None
    return LibraryModule(library, handle, list(objects or []), list(llvm_ir or []))


#: ``MFD_EXEC`` (Linux 6.3): ask for an executable memory file where ``vm.memfd_noexec=1`` makes them
#: non-executable by default; older kernels refuse the flag (EINVAL) and their memory files are executable.
_MFD_EXEC = getattr(os, "MFD_EXEC", 0x0010)


def _load_from_memory(library: bytes) -> ctypes.CDLL:
    """``dlopen`` of ``library`` written to a memory file sealed against writes; OSError if this system cannot.

    The loader opens it as ``/proc/self/fd/N`` spelled as never before in the process (:func:`_memory_file_name`):
    the dynamic loader takes a name it has loaded before for that library without opening anything, and
    descriptor numbers are reused once closed, so ``/proc/self/fd/N`` itself would hand a later library the
    first one's code."""
    if not hasattr(os, "memfd_create") or not hasattr(fcntl, "F_ADD_SEALS"):
        raise OSError("memory files are not available here")
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        fd = os.memfd_create("neuroncc-kernels", flags | _MFD_EXEC)
    except OSError:
        fd = os.memfd_create("neuroncc-kernels", flags)
    try:
        _write_all(fd, library)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE)
        return ctypes.CDLL(_memory_file_name(fd, next(_MEMORY_LOADS)), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    finally:
        os.close(fd)  # the mapping keeps the memory file alive


#: loads through a memory file in this process (a forked child goes on counting from its parent's number, which
#: its own loader has not seen either); ``next`` on it is atomic under the GIL
_MEMORY_LOADS = itertools.count(1)


def _memory_file_name(fd: int, number: int) -> str:
    """``/proc/self/fd/<fd>``, spelled differently for every ``number`` (>= 1): after ``/proc/self``, one ``.``
    component per binary digit 1 of ``number`` and an empty one (``//``) per digit 0. The kernel resolves every
    spelling to the descriptor; the dynamic loader, which compares the names it has loaded as text, sees a new
    one. ~40 characters for a million loads."""
    return "/proc/self/" + "".join("./" if digit == "1" else "/" for digit in f"{number:b}") + f"fd/{fd}"


def _load_from_private_file(library: bytes) -> ctypes.CDLL:
    return _load_through_private_name(lambda path: _write_private(path, library))


def _load_through_private_name(make: Callable[[Path], None]) -> ctypes.CDLL:
    """``dlopen`` of the file ``make`` creates at a new name in the process's private directory (removed after):
    where memory files do not work."""
    path = _LINKS.new_name(make)
    try:
        return ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


class _LinkDirectory:
    """The process's private directory (mode 0700) where the loader opens each library at a name never used
    before: ``<tmp>/neuroncc-so-<pid>-<random>/<n>.so``. Made on the first load and again in a forked child (its
    own, by pid) or when someone deleted it; removed at exit. Empty directories of dead processes (a kill skips
    the removal at exit) are removed when a process makes its own."""

    PREFIX = "neuroncc-so-"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._directory: Path | None = None
        self._pid = -1
        self._count = 0

    def new_name(self, make: Callable[[Path], None]) -> Path:
        """A new path in the directory, after ``make(path)`` created the file or link there."""
        with self._lock:
            for attempt in (0, 1):
                if self._directory is None or self._pid != os.getpid() or attempt:
                    self._make_directory()
                self._count += 1
                path = self._directory / f"{self._count}.so"  # type: ignore[operator]
                try:
                    make(path)
                    return path
                except FileNotFoundError:  # the directory was deleted under us: make another, once
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    def _make_directory(self) -> None:
        pid = os.getpid()
        temp = tempfile.gettempdir()
        _remove_empty_directories_of_dead_processes(temp, self.PREFIX)
        self._directory = Path(tempfile.mkdtemp(prefix=f"{self.PREFIX}{pid}-", dir=temp))  # mode 0700, new
        self._pid, self._count = pid, 0
        atexit.register(_remove_if_empty, self._directory, pid)

    def directory(self) -> Path | None:
        """This process's directory, if it has made one (tests)."""
        return self._directory if self._pid == os.getpid() else None

    def forget_in_child(self) -> None:
        """In a forked child: a fresh lock (another thread of the parent may have held it at the fork, and that
        thread is not in the child) and no directory (the child makes its own)."""
        self._lock = threading.Lock()
        self._directory, self._pid, self._count = None, -1, 0


def _remove_if_empty(directory: Path, pid: int) -> None:
    if os.getpid() == pid:  # a forked child's exit leaves its parent's directory alone
        try:
            os.rmdir(directory)
        except OSError:
            pass


def _remove_empty_directories_of_dead_processes(temp: str, prefix: str) -> None:
    """rmdir (which refuses a non-empty directory) every ``<prefix><pid>-*`` whose process is gone."""
    try:
        names = os.listdir(temp)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix):].partition("-")[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            os.rmdir(os.path.join(temp, name))
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


_LINKS = _LinkDirectory()
in_child(lambda: _LINKS.forget_in_child())


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


__all__ = ["CodeForm", "LibraryModule", "code_form", "give_up", "given_up", "link", "linker", "load_library"]
