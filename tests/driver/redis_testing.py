"""A real ``redis-server`` for the remote cache tests: started on a free 127.0.0.1 port, stopped afterwards.

The README's test set-up installs it (Debian: ``apt-get install -y redis-server``); without it the remote tier's
tests fail saying so, rather than skipping silently.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=5)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted by the kernel, nothing answers (a hung server)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    """A fresh, empty, non-persistent server; killed (and waited for) on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (the README's test set-up installs it: "
                    "apt-get install -y redis-server)")
    directory.mkdir(parents=True, exist_ok=True)
    for _attempt in range(3):  # another process may take the free port before the server binds it
        port = free_port()
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(directory), "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = RedisServer(process, port, directory)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None and not _answers_ping(port):
            time.sleep(0.02)
        if process.poll() is None and _answers_ping(port):
            try:
                yield server
            finally:
                with contextlib.suppress(ProcessLookupError):
                    server.resume()
                server.kill()
            return
        server.kill()
    pytest.fail("redis-server did not start on a free 127.0.0.1 port")
