"""Computed tables kept between processes: the compile cache's ``tables/`` directory.

A bf16 table (``bf16_tables.py``) is made by compiling a small module and running it over every input: ~30-45 ms
of a cold compile per table on Zen 3, on the first call's critical path (a bf16 MLP with gelu and sigmoid: +0.11 s
of its first call). Its bytes depend only on what made them (the maker module's text, the target it was emitted
for, the host that ran it and the LLVM that compiled it), so a process that compiles through a compile cache keeps
each table it makes in the cache's directory under the digest of those, and a later process compiling another
graph reads it back instead (~0.2 ms). Where the directory is: :func:`keep_in`, called by the compile cache before
it compiles (``driver/cache.py``), so a process without a cache, or with the cache disabled, keeps nothing.

A file is ``MAGIC``, the sha256 of the table, the table: a file of another size, or whose bytes do not hash to its
header (a write cut short, a disk error), is not used, and the table is made (and written) again. Writes go to a
temporary file renamed into place, so a reader sees a whole file or none. Tables are data the kernels read, never
code; the directory is the compile cache's, which refuses a directory others can write into.

Standard library only: the compile cache imports this on its compile path without importing LLVM.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path

from neuroncc.codegen.llvm.fork_safety import renew_in_child

#: The first bytes of a table file (and its format's version).
MAGIC = b"neuroncc-table-1\n"
_DIGEST_BYTES = hashlib.sha256().digest_size

_LOCK = renew_in_child(threading.Lock())
_DIRECTORY: list[Path] = []  # where this process keeps tables: the last compile cache it compiled through


def keep_in(directory: Path | None) -> None:
    """Keep the tables this process makes in ``directory`` (made on the first write inside its existing parent), or nowhere (None)."""
    with _LOCK:
        _DIRECTORY[:] = [] if directory is None else [Path(directory)]


def directory() -> Path | None:
    """Where tables are kept now, if anywhere."""
    with _LOCK:
        return _DIRECTORY[0] if _DIRECTORY else None


def load(name: str, size: int) -> bytes | None:
    """The table kept as ``name`` if it is whole (``size`` bytes that hash to its header), else None."""
    where = directory()
    if where is None:
        return None
    try:
        data = (where / name).read_bytes()
    except OSError:
        return None
    header = len(MAGIC) + _DIGEST_BYTES
    if len(data) != header + size or not data.startswith(MAGIC):
        return None
    table = data[header:]
    return table if hashlib.sha256(table).digest() == data[len(MAGIC):header] else None


def save(name: str, table: bytes) -> None:
    """Keep ``table`` as ``name``; a directory that cannot be written keeps nothing (the table is made again)."""
    where = directory()
    if where is None:
        return
    try:
        where.mkdir(mode=0o700, exist_ok=True)  # (in the cache directory, which the cache made)
        descriptor, temporary = tempfile.mkstemp(dir=where, prefix=f".{name[:16]}.")
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(MAGIC + hashlib.sha256(table).digest() + table)
            os.replace(temporary, where / name)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        return
