"""Fresh Python processes for the tests, without paying for the torch import in each one.

The tests of what a *new process* does (the graph cache's second process, a cache artifact loaded on a fresh
machine, the disk cache read by a process that did not compile) run a script in a child process: state in
memory (compiled graphs, kernels, counters, TorchDynamo's caches) cannot leak from the test into the child. A
fresh interpreter spends ~2-4 s of CPU on ``import torch`` and TorchDynamo, often half of such a test.

``WarmPython`` keeps one server interpreter per test process that has imported torch and TorchDynamo, and has
done nothing else (no neuroncc, no compile, no parallel region: libgomp's team is started in no one's parent).
Each :meth:`WarmPython.run` forks a child of it, which becomes what ``python SCRIPT ARGS`` would be: its own
working directory, environment, argv, ``sys.path[0]`` and ``__main__``, stdin from /dev/null, stdout and stderr
to files; it imports neuroncc itself and ends as an interpreter does (non-daemon threads joined, then the
``atexit`` handlers, so the cache's writer thread publishes before the exit). Its exit status, stdout and stderr
are returned as ``subprocess.run`` returns them.

``import torch`` ends by loading the device extensions (``torch.backends`` entry points: neuroncc's device
registration). The server imports torch with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, so neuroncc is not in it;
each child loads the extensions itself, under its own environment, with the function torch's import calls
(unless the child's environment turns autoload off). Only the imports are shared, so a child may differ from
the server's environment only in the variables that nothing reads before that (``CHILD_VARIABLES``:
``NEURONCC_*``, ``TORCH_DEVICE_BACKEND_AUTOLOAD``, ...). :meth:`WarmPython.run` refuses any other difference
(``TORCH_LOGS``, ``OMP_NUM_THREADS``, ``PYTHONPATH``, ...) with a ValueError: such a test needs a real process
(``subprocess.run``).

Run as a script, this file is the server: one JSON request a line on stdin, answered with ``{"pid": N}`` when
the child is forked and ``{"returncode": N}`` when it has exited.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

#: torch's switch for loading the device extensions at the end of ``import torch``.
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
#: The only variables whose values may differ between the server and a child, all read after the fork: pytest
#: names the running test in PYTEST_CURRENT_TEST, which nothing below the test reads; Inductor's cache_dir()
#: writes its default into TORCHINDUCTOR_CACHE_DIR in the test process (TorchDynamo compiles call it) and reads
#: it on each call, never at import.
CHILD_VARIABLES = ("NEURONCC_", AUTOLOAD, "PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR")


def _shared_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not k.startswith(CHILD_VARIABLES)}


class WarmPython:
    """A server interpreter (torch and TorchDynamo imported) that forks a fresh process per :meth:`run`.

    Forked children share their server's string hash seed, where two new interpreters would draw two: a test
    that compares two processes (one writes the cache, the other reads it) runs the second on :attr:`other`, a
    second server with another seed, so a key or a file that depends on the order of a set of strings differs
    between the two as it would between two new interpreters."""

    def __init__(self, environ: Mapping[str, str] | None = None, *, not_seed: str | None = None):
        self.environ = _shared_environment(environ if environ is not None else os.environ)
        # a fixed PYTHONHASHSEED of the caller holds for every new interpreter too; otherwise each server draws one
        self.hash_seed = self.environ.get("PYTHONHASHSEED", "random")
        if self.hash_seed == "random":
            self.hash_seed = str(random.choice([seed for seed in range(1, 1 << 16) if str(seed) != not_seed]))
        self._other: WarmPython | None = None
        self.scratch = Path(tempfile.mkdtemp(prefix="warm-python-"))
        server_environ = {**self.environ, AUTOLOAD: "0", "PYTHONHASHSEED": self.hash_seed}
        self.process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=server_environ)
        self._unread = b""  # the answers are read from the pipe's descriptor: no buffer hides one from select
        if self._answer(None) != {"ready": True}:
            raise RuntimeError(f"the warm Python server did not start (exit {self.process.wait()})")

    @property
    def other(self) -> WarmPython:
        """The server with another string hash seed (started on first use; its ``other`` is this one)."""
        if self._other is None:
            self._other = WarmPython(self.environ, not_seed=self.hash_seed)
            self._other._other = self
        return self._other

    def run(self, command: Sequence[str], *, env: Mapping[str, str], cwd: str | os.PathLike[str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """``subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)`` for a
        command ``[sys.executable, SCRIPT, ARGS...]`` or ``[sys.executable, "-c", CODE, ARGS...]``."""
        if len(command) < 2 or command[0] != sys.executable:
            raise ValueError(f"not a command of this interpreter: {command!r}")
        differs = sorted(k for k in set(self.environ) | set(_shared_environment(env))
                         if self.environ.get(k) != env.get(k))
        if differs:
            raise ValueError(f"the child's environment differs from the warm server's in {differs}: variables read "
                             f"at interpreter or torch start need a real process (subprocess.run)")
        out, err = self.scratch / "stdout", self.scratch / "stderr"
        request = {"argv": list(command[1:]), "cwd": str(cwd if cwd is not None else os.getcwd()), "env": dict(env),
                   "stdout": str(out), "stderr": str(err)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = self._answer(None)["pid"]
        try:
            code = self._answer(timeout)["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._answer(None)
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(list(command), code, out.read_text(), err.read_text())

    def _answer(self, timeout: float | None) -> dict:
        """The server's next JSON line, waiting at most ``timeout`` seconds for it (None: as long as it takes)."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self._unread:
            if timeout is not None and not select.select([fd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("warm python child", timeout)
            data = os.read(fd, 65536)
            if not data:
                raise RuntimeError(f"the warm Python server exited ({self.process.wait()})")
            self._unread += data
        line, self._unread = self._unread.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        for server in (self, self._other):
            if server is not None and server.process.poll() is None:
                server.process.stdin.close()
                server.process.wait(timeout=60)
                for path in server.scratch.iterdir():
                    path.unlink()
                server.scratch.rmdir()


def _become_child(request: dict) -> int:
    """In the forked child: become ``python ARGV`` as the request says and run it; its exit status."""
    import atexit
    import runpy
    import threading
    import traceback
    import types

    import torch

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        target = os.open(path, flags, 0o600)
        os.dup2(target, fd)
        os.close(target)
    argv = request["argv"]
    try:
        if torch._is_device_backend_autoload_enabled():  # the end of `import torch`, as this child's environment says
            torch._import_device_backends()
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # what an uncaught exception does in `python SCRIPT`: traceback, exit 1
        traceback.print_exc()
        code = 1
    # the interpreter's own ending (Py_FinalizeEx): wait for the non-daemon threads, then the atexit handlers
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve() -> None:
    import torch  # noqa: F401  (the point of the server: imported once)
    import torch._dynamo  # noqa: F401

    if any(name == "neuroncc" or name.startswith("neuroncc.") for name in sys.modules):
        raise RuntimeError("neuroncc was imported with torch: the children would share its state")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _become_child(request)
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
