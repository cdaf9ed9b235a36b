"""The signature index: an op signature that an earlier process compiled loads its kernel without a program.

A new signature's entry (entries.py ``make_entry``) builds the op's program (a meta run, a one-op FX graph or a
trace through the decompositions, the importer; twice more when floats are lifted) and prints it, only to find
its compile-cache key; on a warm disk the kernel is then loaded, not compiled. Text generation meets a few
hundred signatures (every decoding step has a new sequence length): building programs was 1.2 s of a warm
process's 2.6 s first ``generate`` (bench_device.py ``generate``, session 29). The index skips that build:

    index key  driver.graph_entries.graph_key over the op, the signature's text (every tensor's dtype, shape,
               strides and device index, every non-float argument: signature.describe's key), the default
               dtype, how programs are built here (this module's format, entries.COMPILE_OPTIONS), then the
               target, host and versions (the neuroncc source digest among them: any change of neuroncc's code
               is another key)
    entry      a graph entry (target ``aot:cpu``, graph name ``eager:<op>``; ``neuroncc cache list`` shows it)
               whose JSON says which artifact the program compiled to and how a call binds to it (the
               Program's inputs, outputs, result tree, writes): what CompiledKernel needs, not the IR

A hit reads the entry after the full check of ``read_graph_entry`` (manifest, every file's sha256), loads the
artifact by its key after the cache's own full check (``CompileCache.load_entry``), and checks the binding
against the artifact's function (parameter count and dtypes, output numbers); anything that does not fit is a
miss, and the entry is written again from this call's program. Nothing is unpickled (JSON; the result tree by
``treespec_loads``).

Only programs that do not depend on the call's float values are indexed (``Program.lifted``, or a call without
floats): exactly the entries the device reuses for every value in memory too (a ``ByFloatValue`` signature
builds its program per value). Signatures that run on CPU are not indexed (their reason is found again).
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from typing import Any

import torch
from torch.utils._pytree import treespec_dumps, treespec_loads

from neuroncc.device.counters import COUNTS
from neuroncc.device.programs import Program
from neuroncc.driver.cache import CompileCache, cache_from_environ
from neuroncc.driver.cache_key import CacheKey
from neuroncc.driver.graph_entries import graph_key, read_graph_entry, write_graph_entry
from neuroncc.frontend.imported import ComputedOutput, UnencodableOutput, decode_output, encode_output
from neuroncc.ir import DType

log = logging.getLogger("neuroncc.device")

#: Bump when the entry's layout or the meaning of a signature's text changes (it is part of the key).
INDEX_FORMAT = 1
KIND = "eager-signature"
TARGET = "cpu"

#: executable -> the compile-cache key it was compiled or loaded under (entries.compile_kernel notes it)
ARTIFACT_KEYS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


class Unindexable(Exception):
    """A signature or program the index cannot describe faithfully: it is built as before."""


def signature_text(key: tuple[Any, ...]) -> str:
    """A stable text of a signature key (signature.describe's); raises :class:`Unindexable` for an argument
    whose text would not say everything the kernel depends on (a Generator, an object of the user's)."""
    return " ".join(_item_text(item) for item in key)


def _item_text(item: Any) -> str:
    kind = type(item)
    if kind is tuple:
        if len(item) == 4 and type(item[0]) is torch.dtype:  # a tensor: (dtype, shape, strides, device index)
            dtype, shape, stride, device = item
            return f"T({_name(dtype)},{_ints(shape)},{_ints(stride)},{int(device)})"
        return f"I{_ints(item)}"  # a list of ints
    if item is None or kind in (bool, int):
        return repr(item)
    if kind is str:
        return json.dumps(item)
    if kind is float:
        raise Unindexable("a float in a signature")  # describe() keeps floats out of keys
    if kind in (torch.dtype, torch.layout, torch.memory_format):
        return _name(item)
    if kind is torch.device:
        return f"D({item})"
    if kind is complex:
        return f"C({item.real!r},{item.imag!r})"
    name = getattr(item, "name", None)  # signature.py's markers: FLOAT, True, False, [
    if type(name) is str and kind.__module__ == "neuroncc.device.signature":
        return f"<{name}>"
    raise Unindexable(f"an argument of type {kind.__name__}")


def _name(value: Any) -> str:
    return str(value).removeprefix("torch.")


def _ints(values: Any) -> str:
    if any(type(v) is not int for v in values):
        raise Unindexable("a shape of non-ints")
    return "[" + ",".join(map(str, values)) + "]"


def _cache() -> CompileCache | None:
    cache = cache_from_environ(os.environ)
    return cache if cache is not None and cache.ensure_usable() else None


def index_key(op: Any, signature: tuple[Any, ...], compile_options: dict[str, Any], cache: CompileCache) -> CacheKey:
    """The index key of ``op``'s ``signature`` (see the module docstring); raises :class:`Unindexable`."""
    text = signature_text(signature)
    parts = [("eager_op", str(op), str(op)), ("eager_signature", text, f"{len(signature)} arguments"),
             ("default_dtype", _name(torch.get_default_dtype()), None),
             ("eager_programs", json.dumps({"format": INDEX_FORMAT, "compile": compile_options}, sort_keys=True),
              None)]
    return graph_key(parts, TARGET, cache.build_environment())


class Hit:
    """What a hit gives make_entry: the program's binding (``function`` None) and the loaded executable."""

    __slots__ = ("program", "executable")

    def __init__(self, program: Program, executable: Any):
        self.program, self.executable = program, executable


class Slot:
    """One signature's place in the index: ``lookup()`` it, and ``record()`` the program built on a miss."""

    def __init__(self, cache: CompileCache, key: CacheKey, op: Any):
        self.cache, self.key, self.op = cache, key, op
        self.replace = False  # the entry there did not fit: the one recorded replaces it

    @staticmethod
    def of(op: Any, signature: tuple[Any, ...], compile_options: dict[str, Any]) -> Slot | None:
        """The slot of ``op``'s call with ``signature``, or None (no usable cache, or a signature the index
        cannot describe)."""
        cache = _cache()
        if cache is None:
            return None
        try:
            return Slot(cache, index_key(op, signature, compile_options, cache), op)
        except Unindexable as reason:
            log.debug("neuroncc: not indexing a signature of %s: %s", op, reason)
            return None

    def lookup(self, tensors: list[torch.Tensor]) -> Hit | None:
        payload = read_graph_entry(self.cache, self.key.key, TARGET)
        if payload is None:
            return None
        try:
            hit = self._rebuild(payload, tensors)
        except (Unindexable, UnencodableOutput, KeyError, TypeError, ValueError) as problem:
            log.info("neuroncc: signature index entry %s of %s does not fit (%s); building the program",
                     self.key.key[:16], self.op, problem)
            hit = None
        if hit is None:
            self.replace = True
            COUNTS["eager_index_misfits"] += 1
            return None
        COUNTS["eager_index_hits"] += 1
        return hit

    def _rebuild(self, payload: dict[str, Any], tensors: list[torch.Tensor]) -> Hit | None:
        if payload.get("kind") != KIND or payload.get("format") != INDEX_FORMAT or payload.get("op") != str(self.op):
            raise Unindexable(f"kind {payload.get('kind')!r}, format {payload.get('format')!r}")
        artifact = payload["artifact"]
        if type(artifact) is not str:
            raise Unindexable("artifact key")
        executable = self.cache.load_entry(artifact, TARGET)
        if executable is None:  # gone from the cache (cleared, or never published): build and compile again
            return None
        inputs, writes = _int_list(payload["inputs"]), [_int_list(pair) for pair in payload["writes"]]
        if type(payload["lifted"]) is not bool or any(len(pair) != 2 for pair in writes):
            raise Unindexable("flags")
        outputs = tuple(decode_output(o) for o in payload["outputs"])
        program = Program(None, tuple(inputs), outputs, treespec_loads(payload["result_tree"]),
                          tuple((a, b) for a, b in writes), payload["lifted"])
        _check_binding(program, executable.function, tensors)
        ARTIFACT_KEYS[executable] = artifact
        return Hit(program, executable)

    def record(self, program: Program, executable: Any) -> None:
        """Index the program just built for this signature (once its executable's key is known)."""
        artifact = ARTIFACT_KEYS.get(executable)
        if artifact is None:
            return
        try:
            payload = {"kind": KIND, "format": INDEX_FORMAT, "op": str(self.op), "artifact": artifact,
                       "inputs": list(program.inputs), "outputs": [encode_output(o) for o in program.outputs],
                       "result_tree": treespec_dumps(program.result_tree),
                       "writes": [list(pair) for pair in program.writes], "lifted": program.lifted}
        except (UnencodableOutput, TypeError, NotImplementedError) as problem:  # e.g. a result tree of a type
            log.debug("neuroncc: not indexing a program of %s: %s", self.op, problem)  # treespec_dumps refuses
            return
        write_graph_entry(self.cache, self.key, graph_name=f"eager:{self.op}", target=TARGET, inputs=[],
                          options={}, payload=payload, timings={}, neuroncc_version=_version(),
                          replace=self.replace)


def _int_list(data: Any) -> list[int]:
    if type(data) is not list or any(type(v) is not int for v in data):
        raise Unindexable(f"not a list of ints: {data!r}")
    return data


#: the IR dtype a parameter has for a call tensor of each torch dtype (bf16 crosses as its bits, programs.py;
#: float64 computes as float32)
_PARAMETER_DTYPES = {torch.float32: DType.f32, torch.float64: DType.f32, torch.bfloat16: DType.i16,
                     torch.float16: DType.f16, torch.int64: DType.i64, torch.int32: DType.i32,
                     torch.int16: DType.i16, torch.int8: DType.i8, torch.uint8: DType.u8, torch.bool: DType.bool,
                     torch.complex64: DType.c64}


def _check_binding(program: Program, function: Any, tensors: list[torch.Tensor]) -> None:
    """The entry's binding fits the loaded function: one source per parameter, each call tensor of the
    parameter's dtype, every output number the function's. Raises :class:`Unindexable` if not."""
    params = function.params
    if len(program.inputs) != len(params):
        raise Unindexable(f"{len(program.inputs)} inputs for {len(params)} parameters")
    for source, param in zip(program.inputs, params):
        if source >= 0:
            if source >= len(tensors):
                raise Unindexable(f"input {source} of a call with {len(tensors)} tensors")
            wanted = _PARAMETER_DTYPES.get(tensors[source].dtype)
            if wanted is not None and param.type.dtype is not wanted:
                raise Unindexable(f"a {tensors[source].dtype} tensor for a {param.type.dtype} parameter")
        elif param.type.shape != ():
            raise Unindexable("a float for a tensor parameter")
    count = len(function.outputs)
    for output in program.outputs:
        if isinstance(output, ComputedOutput) and not 0 <= output.index < count:
            raise Unindexable(f"output {output.index} of {count}")
    for tensor, output in program.writes:
        if not (0 <= tensor < len(tensors) and 0 <= output < count):
            raise Unindexable(f"write {tensor} <- {output}")


def _version() -> str:
    import neuroncc

    return neuroncc.__version__
