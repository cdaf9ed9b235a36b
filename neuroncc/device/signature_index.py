"""The signature index: an op signature that an earlier process compiled loads its kernel without a program.

A new signature's entry (entries.py ``make_entry``) builds the op's program (a meta run, a one-op FX graph or a
trace through the decompositions, the importer; twice more when floats are lifted) and prints it, only to find
its compile-cache key; on a warm disk the kernel is then loaded, not compiled. Text generation meets a few
hundred signatures (every decoding step has a new sequence length): building programs was 1.1 s of a warm
process's 2.1 s first ``generate`` (bench_device.py ``generate``, session 29). The index skips that build:

    the index  one graph entry per cache directory and build environment (driver.graph_entries; target
               ``aot:cpu``, graph name ``eager:signature-index``; its key covers the target, host and versions,
               the neuroncc source digest among them: any change of neuroncc's code is another index), whose
               JSON lists signatures with what each compiled to
    a record   named by the op, the default dtype and the signature's text (every tensor's dtype, shape,
               strides and device index, every non-float argument: signature.describe's key): the artifact's
               compile-cache key and how a call binds to it (the Program's inputs, outputs, result tree,
               writes): what CompiledKernel needs, not the IR

A process reads the index once, at its first new signature, after the full check of ``read_graph_entry``
(manifest, every file's sha256). A hit loads the artifact by its key after the cache's own full check
(``CompileCache.load_entry``) and checks the binding against the artifact's function (parameter count and
dtypes, output numbers); anything that does not fit is a miss, and the record is written again from this
call's program. Nothing is unpickled (JSON; the result tree by ``treespec_loads``).

New records are added to the entry in batches (every :data:`FLUSH_EVERY`, and at exit) on the cache's writer
thread, each batch merged with what other processes added meanwhile, under the entry's lock; the index keeps
the newest :data:`CAPACITY` records. A process that does not exit normally loses its last batch (those
signatures build their programs again next time: the index is an optimization, never a source of truth).

Programs that do not depend on the call's float values (``Program.lifted``, or a call without floats) are indexed
by their signature: exactly the entries the device reuses for every value in memory too. A ``ByFloatValue``
signature's programs (built per value: ``torch.ones`` and ``torch.zeros``'s ``fill_``) are indexed by the
signature and the values (:meth:`Slot.of_values`, since session 45). Guarded programs and signatures that run on
CPU are not indexed (their guards and reasons are found again).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
from typing import Any

import torch
from torch.utils._pytree import tree_structure, treespec_dumps, treespec_loads

from neuroncc.device.counters import COUNTS
from neuroncc.device.kernel_compile import ARTIFACT_KEYS, COMPILE_OPTIONS
from neuroncc.device.programs import Program
from neuroncc.device.stand_ins import well_formed
from neuroncc.driver.cache import CACHE_DIR_VARIABLE, DISABLE_VARIABLE, CompileCache, cache_from_environ
from neuroncc.driver.graph_entries import graph_key, read_graph_entry, update_graph_entry
from neuroncc.driver.publisher import PUBLISHER
from neuroncc.frontend.imported import ComputedOutput, UnencodableOutput, decode_output, encode_output
from neuroncc.ir import DType
from neuroncc.codegen.llvm.fork_safety import renew_in_child

log = logging.getLogger("neuroncc.device")

#: Bump when the entry's layout or the meaning of a record's name changes (it is part of the key).
INDEX_FORMAT = 1
KIND = "eager-signature-index"
TARGET = "cpu"
#: Signatures recorded before a batch is written to the index entry.
FLUSH_EVERY = 64
#: Records the index keeps (the newest): a generate of a few thousand tokens meets that many signatures.
CAPACITY = 20_000

#: the result tree of an op returning one tensor (most ops), as written
_LEAF = treespec_dumps(tree_structure(0))



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




def record_name(op: Any, signature: tuple[Any, ...]) -> str:
    """The record's name of ``op``'s call with ``signature``; raises :class:`Unindexable`."""
    return f"{op} {_name(torch.get_default_dtype())} {signature_text(signature)}"


def program_name(kind: str, describes: str, tensors: list[torch.Tensor], count: int) -> str:
    """The record's name of a program the device builds for no one aten call (a routed optimizer step,
    ``clip_grad_norm_``'s parts, a fused or donated foreach op's program): its ``kind``, what else it depends on
    (``describes``: its variant), every tensor's dtype, shape and strides and its count of lifted floats. A
    step over a model's few hundred tensors makes a long text: the name carries its digest."""
    text = " ".join((describes, str(count), *(f"T({_name(t.dtype)},{_ints(t.shape)},{_ints(t.stride())})"
                                             for t in tensors)))
    return f"{kind} {_name(torch.get_default_dtype())} sha256:{hashlib.sha256(text.encode()).hexdigest()}"


def _cache() -> CompileCache | None:
    cache = cache_from_environ(os.environ)
    return cache if cache is not None and cache.ensure_usable() else None


#: (``$NEURONCC_CACHE_DIR``, ``$NEURONCC_DISABLE_CACHE``) -> the index of the cache they name (None: no usable
#: cache): opening the cache for every new signature cost ~0.1 ms of it
_BY_SETTING: dict[tuple[str | None, str | None], _Index | None] = {}


def _current_index() -> _Index | None:
    setting = (os.environ.get(CACHE_DIR_VARIABLE), os.environ.get(DISABLE_VARIABLE))
    if setting not in _BY_SETTING:
        cache = _cache()
        _BY_SETTING[setting] = _index_of(cache) if cache is not None else None
    return _BY_SETTING[setting]


def _records_of(payload: Any) -> dict[str, Any]:
    """An index payload's records by name ({} for anything else)."""
    if payload is None or payload.get("kind") != KIND or payload.get("format") != INDEX_FORMAT or \
            type(payload.get("records")) is not list:
        return {}
    return {item[0]: item[1] for item in payload["records"]
            if type(item) is list and len(item) == 2 and type(item[0]) is str}


class _Index:
    """This process's copy of one cache directory's index entry, and its records not yet written there."""

    def __init__(self, cache: CompileCache):
        self.cache = cache
        options = json.dumps({"format": INDEX_FORMAT, "compile": COMPILE_OPTIONS}, sort_keys=True)
        self.key = graph_key([("eager_index", options, None)], TARGET, cache.build_environment())
        self.records = _records_of(read_graph_entry(cache, self.key.key, TARGET))
        self.pending: dict[str, Any] = {}
        self.lock = renew_in_child(threading.Lock())

    def add(self, name: str, record: dict[str, Any]) -> None:
        with self.lock:
            self.records[name] = record
            self.pending[name] = record
            full = len(self.pending) >= FLUSH_EVERY
        if full:
            self.flush()

    def flush(self, at_exit: bool = False) -> None:
        """Write the pending records into the index entry, merged with it under its lock. While an earlier
        batch is still queued on the cache's writer (behind the artifacts it publishes) they wait for the next
        batch: waiting for the writer here would make the op that compiled wait for every write before it.
        ``at_exit``: written now, and waited for (the writer would not finish it after the atexit handlers)."""
        where = (self.cache.root, self.key.key)
        with self.lock:
            if not at_exit and PUBLISHER.pending(where):
                return
            pending, self.pending = self.pending, {}
        if not pending:
            return

        def merged(current: Any) -> dict[str, Any]:
            records = _records_of(current)
            for name, record in pending.items():
                records.pop(name, None)  # to the end: the newest
                records[name] = record
            kept = list(records.items())[-CAPACITY:]
            return {"kind": KIND, "format": INDEX_FORMAT, "records": [[name, record] for name, record in kept]}

        update_graph_entry(self.cache, self.key, graph_name="eager:signature-index", target=TARGET, update=merged,
                           neuroncc_version=self.cache.build_environment().neuroncc_version)
        if at_exit:
            PUBLISHER.wait(where)


#: cache directory -> its index, read at the process's first new signature
_INDEXES: dict[Any, _Index] = {}
_INDEXES_LOCK = renew_in_child(threading.Lock())


def _index_of(cache: CompileCache) -> _Index:
    with _INDEXES_LOCK:
        index = _INDEXES.get(cache.root)
        if index is None:
            if not _INDEXES:
                atexit.register(flush_all)
            index = _INDEXES[cache.root] = _Index(cache)
        return index


def flush_all() -> None:
    """Write every index's pending records (at exit)."""
    for index in list(_INDEXES.values()):
        if index.cache.root.is_dir():  # a temporary cache removed before exit has nowhere to keep them
            index.flush(at_exit=True)


class Hit:
    """What a hit gives make_entry: the program's binding (``function`` None) and the loaded executable."""

    __slots__ = ("program", "executable")

    def __init__(self, program: Program, executable: Any):
        self.program, self.executable = program, executable


class Slot:
    """One signature's place in the index: ``lookup()`` it, and ``record()`` the program built on a miss."""

    def __init__(self, index: _Index, name: str, op: Any):
        self.index, self.name, self.op = index, name, op

    @staticmethod
    def of(op: Any, signature: tuple[Any, ...]) -> Slot | None:
        """The slot of ``op``'s call with ``signature``, or None (no usable cache, or a signature the index
        cannot describe)."""
        try:
            name = record_name(op, signature)
        except Unindexable as reason:
            log.debug("neuroncc: not indexing a signature of %s: %s", op, reason)
            return None
        return Slot.named(name, op)

    @staticmethod
    def of_values(op: Any, signature: tuple[Any, ...], floats: list[float]) -> Slot | None:
        """The slot of ``op``'s call with ``signature`` and these float values, for a program built with them
        as constants (``entries.ByFloatValue``: ``fill_``'s value, ``arange``'s bounds); None as :meth:`of`.
        ``repr`` tells every float apart (-0.0 from 0.0, each NaN text the same: one kernel serves them)."""
        try:
            name = f"{record_name(op, signature)} = {' '.join(map(repr, floats))}"
        except Unindexable as reason:
            log.debug("neuroncc: not indexing a signature of %s: %s", op, reason)
            return None
        return Slot.named(name, op)

    @staticmethod
    def named(name: str, op: Any) -> Slot | None:
        """The slot of the record ``name`` (:func:`record_name`, :func:`program_name`), or None (no usable
        cache)."""
        index = _current_index()
        return Slot(index, name, op) if index is not None else None

    def lookup(self, tensors: list[torch.Tensor]) -> Hit | None:
        record = self.index.records.get(self.name)
        if record is None:
            return None
        try:
            hit = self._rebuild(record, tensors)
        except (Unindexable, UnencodableOutput, KeyError, TypeError, ValueError) as problem:
            log.info("neuroncc: a signature index record of %s does not fit (%s); building the program", self.op,
                     problem)
            hit = None
        if hit is None:
            COUNTS["eager_index_misfits"] += 1
            return None
        COUNTS["eager_index_hits"] += 1
        return hit

    def _rebuild(self, record: Any, tensors: list[torch.Tensor]) -> Hit | None:
        if type(record) is not dict:
            raise Unindexable("a record that is not an object")
        artifact = record["artifact"]
        if type(artifact) is not str:
            raise Unindexable("artifact key")
        executable = self.index.cache.load_entry(artifact, TARGET)
        if executable is None:  # gone from the cache (cleared, or never published): build and compile again
            return None
        inputs, writes = _int_list(record["inputs"]), [_int_list(pair) for pair in record["writes"]]
        if type(record["lifted"]) is not bool or any(len(pair) != 2 for pair in writes):
            raise Unindexable("flags")
        outputs = tuple(decode_output(o) for o in record["outputs"])
        derived = record.get("derived", [])
        if type(derived) is not list or not all(well_formed(expression) for expression in derived):
            raise Unindexable("derived floats")
        program = Program(None, tuple(inputs), outputs, treespec_loads(record["result_tree"]),
                          tuple((a, b) for a, b in writes), record["lifted"], derived=tuple(derived))
        _check_binding(program, executable.function, tensors)
        ARTIFACT_KEYS[executable] = artifact
        return Hit(program, executable)

    def record(self, program: Program, executable: Any) -> None:
        """Index the program just built for this signature (if its executable's key is known)."""
        artifact = ARTIFACT_KEYS.get(executable)
        if artifact is None:
            return
        try:
            record = {"artifact": artifact, "inputs": list(program.inputs),
                      "outputs": [encode_output(o) for o in program.outputs],
                      "result_tree": _LEAF if program.result_tree.is_leaf() else treespec_dumps(program.result_tree),
                      "writes": [list(pair) for pair in program.writes], "lifted": program.lifted}
            if program.derived:  # (the index is strict JSON: an infinite constant in one is not indexed)
                record["derived"] = json.loads(json.dumps(list(program.derived), allow_nan=False))
        except (UnencodableOutput, TypeError, ValueError, NotImplementedError) as problem:  # a result tree
            log.debug("neuroncc: not indexing a program of %s: %s", self.op, problem)  # treespec_dumps cannot write
            return
        self.index.add(self.name, record)


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
