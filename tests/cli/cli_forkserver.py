"""A warm ``neuroncc`` command for the CLI tests: imports torch and neuroncc once, then forks per request.

Started as ``python cli_forkserver.py`` by :class:`cli_testing.ForkServer`. Each request is one JSON line on
stdin (``argv``, ``cwd``, ``env``, ``stdout``, ``stderr``: file paths); the server forks a child that changes
to ``cwd``, takes ``env`` as its whole environment, points file descriptors 1 and 2 at the two files and runs
``python -m neuroncc.cli ARGV`` (``runpy``, exactly as the command does: it ends the process itself, unless
``NEURONCC_DISABLE_FAST_EXIT=1``; then the child ends as the interpreter would). The server answers with one
JSON line holding the child's exit status. The child is a real process (its own exit code, stderr, working
directory and environment); only the imports are shared, which saves the 2-3 s of CPU a fresh interpreter
spends importing torch, per case.
"""

import atexit
import json
import os
import runpy
import sys
import threading

import torch  # noqa: F401  (the point of the server: imported once)

import neuroncc.cli.compile  # noqa: F401
import neuroncc.cli.demo  # noqa: F401
import neuroncc.cli.inspect  # noqa: F401
import neuroncc.cli.run  # noqa: F401
import neuroncc.frontend.exported  # noqa: F401
from torch._export.serde import serialize  # noqa: F401  (the .pt2 loader's heaviest import)


def serve_one(request: dict) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(target, fd)
                os.close(target)
            sys.argv = ["neuroncc", *request["argv"]]
            runpy.run_module("neuroncc.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what an uncaught exception does in `python -m`: traceback, exit 1
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # the interpreter's ending: non-daemon threads (the cache's writer), then atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps({"returncode": serve_one(json.loads(line))}), flush=True)


if __name__ == "__main__":
    main()
