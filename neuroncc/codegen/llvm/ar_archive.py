"""The object files of a compiled graph as one standard ``ar`` archive (``kernels.a`` in an artifact, and the
linker's one input file, ``native_library.link``).

Every kernel phase compiles to an object file of its own (they compile in parallel); storing them as a
System V / GNU ``ar`` archive keeps an artifact at one file of machine code that the usual tools read
(``ar t kernels.a``, ``objdump -d kernels.a``). Only what neuroncc writes is read back: short member names,
no symbol table; anything else is an :class:`~neuroncc.errors.ArtifactError`.
"""

from __future__ import annotations

from neuroncc.errors import ArtifactError

MAGIC = b"!<arch>\n"
HEADER_BYTES = 60


def write_archive(members: list[bytes]) -> bytes:
    """An archive of ``members``, named ``0.o``, ``1.o``, ... in order (timestamps zero: reproducible)."""
    parts = [MAGIC]
    for number, data in enumerate(members):
        name = f"{number}.o/".encode()
        if len(name) > 16:
            raise ValueError(f"too many archive members ({number})")
        header = (name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"644".ljust(8)
                  + str(len(data)).encode().ljust(10) + b"`\n")
        parts += [header, data, b"\n" if len(data) % 2 else b""]
    return b"".join(parts)


def read_archive(blob: bytes, source: str = "archive") -> list[bytes]:
    """The members of an archive written by :func:`write_archive`, in order."""
    if not blob.startswith(MAGIC):
        raise ArtifactError(f"{source} is not an ar archive")
    members, position = [], len(MAGIC)
    while position < len(blob):
        header = blob[position:position + HEADER_BYTES]
        if len(header) < HEADER_BYTES or header[58:60] != b"`\n":
            raise ArtifactError(f"{source}: truncated or corrupt member header at byte {position}")
        name = header[:16].rstrip()
        if name != f"{len(members)}.o/".encode():
            raise ArtifactError(f"{source}: unexpected member {name!r} at byte {position}")
        try:
            size = int(header[48:58])
        except ValueError:
            raise ArtifactError(f"{source}: bad member size at byte {position}") from None
        start = position + HEADER_BYTES
        if size < 0 or start + size > len(blob):
            raise ArtifactError(f"{source}: member {name.decode()} runs past the end of the file")
        members.append(blob[start:start + size])
        position = start + size + size % 2
    return members


def split_modules(text: str) -> list[str]:
    """kernels.ll back into its modules (each starts with its "; ModuleID" line)."""
    modules, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("; ModuleID") and current:
            modules.append("".join(current))
            current = []
        current.append(line)
    if current:
        modules.append("".join(current))
    return modules
