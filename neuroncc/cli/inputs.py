"""Inputs for ``neuroncc run``: read from an .npz (checked against the program's inputs) or drawn at random.

An .npz is read member by member with ``zipfile`` and ``numpy.lib.format``: each array's header (dtype, shape)
is checked against the program's input *before* its data is read, object arrays (pickles) are refused, and
every problem is one :class:`InputError` naming the file, the array and what the program expects.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from neuroncc.cli.programs import check_readable_file
from neuroncc.errors import InputError
from neuroncc.frontend.exported import MAX_INPUT_BYTES, ProgramInput, check_input_sizes, program_inputs

#: The numpy dtype an .npz array must have for each torch dtype (bfloat16 arrives as float32).
NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64), torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(np.float32), torch.int64: np.dtype(np.int64), torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16), torch.int8: np.dtype(np.int8), torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_), torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}

#: Random integer inputs are drawn from [0, RANDOM_INT_HIGH): valid indices for any table or class count.
RANDOM_INT_HIGH = 2


def read_npz_inputs(path: str, expected: Sequence[ProgramInput]) -> dict[str, torch.Tensor]:
    """The arrays of ``path`` as tensors by input name; names, dtypes and shapes must match ``expected``."""
    check_readable_file(path, "an .npz file (numpy.savez)")
    file = Path(path)
    names = ", ".join(spec.target for spec in expected) or "(none)"
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a zip archive"
        raise InputError(f"{path}: not an .npz file ({reason}; write inputs with numpy.savez)") from None
    with archive:
        members = {}
        for info in archive.infolist():
            if not info.filename.endswith(".npy") or "/" in info.filename:
                raise InputError(f"{path}: member '{info.filename[:60]}' is not an array (.npy); not an .npz file")
            members[info.filename[:-4]] = info
        by_name = {spec.target: spec for spec in expected}
        unexpected = [name for name in members if name not in by_name]
        if unexpected:
            raise InputError(f"{path}: array '{unexpected[0]}' is not an input of the program (its inputs: {names})")
        missing = [name for name in by_name if name not in members]
        if missing:
            raise InputError(f"{path}: no array for input '{missing[0]}' (the program's inputs: {names})")
        return {name: _read_member(path, archive, members[name], by_name[name]) for name in by_name}


def _read_member(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, spec: ProgramInput) -> torch.Tensor:
    where = f"{path}: array '{spec.target}'"
    want_dtype = NUMPY_DTYPES.get(spec.dtype)
    if want_dtype is None:
        raise InputError(f"{where}: the program's input has dtype {spec.dtype}, which .npz files cannot hold")
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
            if dtype.hasobject:
                raise InputError(f"{where} holds Python objects (a pickle); neuroncc never unpickles")
            if dtype != want_dtype or not spec.fits(shape):
                bounds = "".join(f", {dim.describe()}" for dim in spec.dynamic)
                raise InputError(f"{where} is {_describe(dtype, shape)}, the program's input '{spec.target}' is "
                                 f"{_describe(want_dtype, spec.shape, spec)}{bounds}")
            if math.prod(shape) * dtype.itemsize > MAX_INPUT_BYTES:
                raise InputError(f"{where} is absurdly large ({_describe(dtype, shape)})")
        with archive.open(info) as member:  # checked: now read it (read_array parses the header again)
            array = np.lib.format.read_array(member, allow_pickle=False)
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError) as exc:
        raise InputError(f"{where} is unreadable ({' '.join(str(exc).split())[:120]})") from None
    if fortran:
        array = np.ascontiguousarray(array)
    tensor = torch.from_numpy(np.array(array, copy=True))
    return tensor.to(spec.dtype) if tensor.dtype != spec.dtype else tensor


def random_inputs(expected: Sequence[ProgramInput], seed: int, where: str) -> dict[str, torch.Tensor]:
    """One random tensor per input, shaped and typed as the graph says (sizes checked before allocating)."""
    check_input_sizes(expected, where)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for spec in expected:
        if spec.dtype.is_floating_point:
            tensors[spec.target] = torch.randn(spec.shape, generator=generator).to(spec.dtype)
        elif spec.dtype.is_complex:
            tensors[spec.target] = torch.randn(spec.shape, generator=generator, dtype=spec.dtype)
        elif spec.dtype is torch.bool:
            tensors[spec.target] = torch.randint(0, 2, spec.shape, generator=generator).bool()
        else:
            tensors[spec.target] = torch.randint(0, RANDOM_INT_HIGH, spec.shape, generator=generator,
                                                 dtype=spec.dtype)
    return tensors


def _describe(dtype: np.dtype, shape: Sequence[int], spec: ProgramInput | None = None) -> str:
    sizes = [str(size) for size in shape]
    for dim in spec.dynamic if spec is not None else ():
        sizes[dim.dim] = dim.symbol
    return f"{dtype}[{', '.join(sizes)}]"


def user_inputs(program, npz_path: str | None, seed: int, where: str) -> tuple[list[ProgramInput], list[torch.Tensor]]:
    """The program's user inputs (not its parameters or buffers) and one tensor for each, in order: read from
    ``npz_path`` when given, else drawn at random from ``seed``. A dynamic size (``torch.export.Dim``) takes the
    array's size, within the dim's bounds, or at random the exported example's size."""
    expected = [spec for spec in program_inputs(program, dynamic=True) if spec.kind == "input"]
    tensors = read_npz_inputs(npz_path, expected) if npz_path is not None else random_inputs(expected, seed, where)
    return expected, [tensors[spec.target] for spec in expected]
