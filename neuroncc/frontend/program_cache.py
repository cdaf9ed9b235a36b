"""The program cache: an exported program's inference graph found in the compile cache before it is decomposed.

``neuroncc run FILE.pt2`` and ``neuroncc.compile_program`` decompose the program (``run_decompositions``) and
import it to IR, and only then can the compile cache look up the imported graph: ~0.5 s of a warm run (session
31). A program entry skips that. Its key is computed from the exported program as it was loaded:

    program     the exported graph's nodes in order (op, target, arguments: ``graph_key.graph_canonical_text``)
                and every node's value metadata (dtype, shape, strides of each tensor; symbolic sizes as text)
    signature   every input and output spec (kind, name, target, a fixed value), the call's pytree specs in
                and out, the range constraints
    state       dtype, shape and strides of each parameter, buffer and constant the graph reads (their values
                are inputs of the compiled code, as in the compile cache's key)
    context     the graph's name, target, pipeline and options; the default dtype and grad mode the
                decomposition runs under

then, as every graph entry's, the target's host fingerprint, neuroncc's version and source digest (the
decomposition table, the importer and its lowering rules are neuroncc's source) and torch's version
(``driver.graph_entries.graph_key``). What a decomposition and an import make of a program is decided by those.
The entry (target ``aot:<target>``, graph name ``program:<name>`` in ``neuroncc cache list``) holds the key of the
artifact the imported graph compiled to and what calling it needs (:class:`InferenceGraph`'s fields, the imported
graph's calling convention); a hit loads that artifact and runs the program as loaded, undecomposed, whose state
and pytree specs the entry was checked against when stored (a program whose decomposition changed them is not
stored). A damaged entry, or one whose artifact is gone, is a miss with one ``CacheWarning``: the program is
decomposed and compiled as before and the entry replaced. A program the key cannot describe (a call the key
cannot name, a higher-order op) is decomposed every time.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from neuroncc.driver.cache import CompileCache
from neuroncc.driver.cache_key import CacheKey
from neuroncc.driver.graph_entries import graph_key, read_graph_entry, write_graph_entry
from neuroncc.driver.notices import CacheWarning
from neuroncc.executors.executable import Executable
from neuroncc.frontend.diagnostics import FLOAT64_WARNING, Float64Warning, uses_float64
from neuroncc.frontend.exported import InferenceGraph, ProgramInput
from neuroncc.frontend.graph_key import Uncacheable, graph_canonical_text
from neuroncc.frontend.imported import ImportedGraph, UnencodableOutput, decode_output, encode_output
from neuroncc.ir.types import contiguous_strides

log = logging.getLogger("neuroncc.frontend")

#: The program entry's payload format.
PROGRAM_FORMAT = 1
KIND = "program"


class BadProgramEntry(ValueError):
    """A program entry's payload does not decode (another format, a damaged or tampered field)."""


@dataclass(frozen=True)
class ProgramHit:
    """A program entry's answer: the inference graph (over the program as loaded) and its loaded executable."""

    graph: InferenceGraph
    executable: Executable
    artifact: str  # the compile cache key of the executable


def program_key(program: ExportedProgram, name: str, target: str, pipeline: str | None,
                options: Mapping[str, Any] | None, cache: CompileCache) -> CacheKey:
    """The program entry's key (see the module docstring); raises :class:`Uncacheable`."""
    graph_text, count = graph_canonical_text(program.graph_module)
    values = "\n".join(f"%{node.name} {_value_text(node, node.meta.get('val'))}"
                       for node in program.graph_module.graph.nodes)
    signature = program.graph_signature
    specs = [[spec.kind.name, _argument_text(spec.arg), spec.target, getattr(spec, "persistent", None)]
             for spec in signature.input_specs]
    outputs = [[spec.kind.name, _argument_text(spec.arg), spec.target] for spec in signature.output_specs]
    call = [_spec_text(program.call_spec.in_spec), _spec_text(program.call_spec.out_spec)]
    ranges = sorted(f"{symbol}:{bounds}" for symbol, bounds in program.range_constraints.items())
    tensors = {**program.constants, **program.state_dict}
    state = []
    for spec in signature.input_specs:
        if spec.target is not None and spec.kind.name != "USER_INPUT":
            tensor = tensors.get(spec.target)
            if not isinstance(tensor, torch.Tensor):
                raise Uncacheable(f"state '{spec.target}' is {type(tensor).__name__}, not a tensor")
            state.append([spec.target, str(tensor.dtype), list(tensor.shape), list(tensor.stride())])
    try:
        context = json.dumps({"name": name, "target": target, "pipeline": pipeline, "options": dict(options or {}),
                              "default_dtype": str(torch.get_default_dtype()), "grad": torch.is_grad_enabled()},
                             sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise Uncacheable(f"options the key cannot write: {exc}") from None
    parts = [
        ("program", graph_text + "\n" + values, f"{count} nodes"),
        ("signature", json.dumps([specs, outputs, call, ranges]), f"{len(specs)} inputs, {len(outputs)} outputs"),
        ("state", json.dumps(state), f"{len(state)} tensors"),
        ("context", context, f"{name} for {target}"),
    ]
    return graph_key(parts, target, cache.build_environment())


def key_for(program: ExportedProgram, name: str, target: str, pipeline: str | None,
            options: Mapping[str, Any] | None, cache: CompileCache | None) -> CacheKey | None:
    """:func:`program_key`, or None: no cache, or a program the key cannot describe (logged at INFO on
    ``neuroncc.frontend``; it is decomposed every time)."""
    if cache is None:
        return None
    try:
        return program_key(program, name, target, pipeline, options, cache)
    except Uncacheable as reason:
        log.info("neuroncc: program %s is decomposed every time: %s", name, reason)
    except Exception as exc:  # noqa: BLE001 - keying must never break a compile: the program is decomposed
        log.info("neuroncc: program %s is decomposed every time: internal error while keying it (%s: %s)", name,
                 type(exc).__name__, exc)
    return None


def _value_text(node: fx.Node, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise Uncacheable(f"node {node.name}: a {value.layout} tensor")
        return f"{value.dtype}{[str(s) for s in value.shape]}/{[str(s) for s in value.stride()]}"
    if isinstance(value, (bool, int, float, str, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"{type(value).__name__}:{value}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_value_text(node, v) for v in value) + ")"
    raise Uncacheable(f"node {node.name}: a value of type {type(value).__name__}")


def _argument_text(arg: Any) -> str:
    value = getattr(arg, "value", None)
    return f"{type(arg).__name__}:{getattr(arg, 'name', '')}:{value!r}"


def _spec_text(spec: pytree.TreeSpec | None) -> str:
    return "" if spec is None else pytree.treespec_dumps(spec)


# ---- a hit ------------------------------------------------------------------------------------------------------

def lookup(cache: CompileCache, key: CacheKey, program: ExportedProgram, target: str) -> ProgramHit | None:
    """The program entry ``key``, loaded (its executable from the compile cache), or None: no entry, or (with one
    warning) a damaged or stale one."""
    payload = read_graph_entry(cache, key.key, target)
    if payload is None:
        return None
    try:
        graph, artifact = _decode(payload, program)
        executable = cache.load_entry(artifact, target)
        if executable is None:
            raise BadProgramEntry(f"its artifact {artifact[:16]} is not in the cache")
        imported = ImportedGraph(executable.function, *graph.imported)  # (the decoded calling convention)
    except (BadProgramEntry, UnencodableOutput, KeyError, TypeError, ValueError) as exc:
        warnings.warn(f"ignoring program cache entry {key.key[:16]} ({exc}); decomposing the program",
                      CacheWarning, stacklevel=2)
        return None
    if payload["float64"]:  # as the import warns
        warnings.warn(f"program '{executable.function.name}': {FLOAT64_WARNING}", Float64Warning, stacklevel=2)
    return ProgramHit(InferenceGraph(program, imported, graph.inputs, graph.output_names, graph.buffer_mutations,
                                     graph.input_mutations), executable, artifact)


@dataclass(frozen=True)
class _Decoded:
    imported: tuple[Any, ...]  # ImportedGraph's fields after the function
    inputs: tuple[ProgramInput, ...]
    output_names: tuple[str, ...]
    buffer_mutations: tuple[tuple[int, str], ...]
    input_mutations: tuple[tuple[int, int], ...]


def _decode(payload: Mapping[str, Any], program: ExportedProgram) -> tuple[_Decoded, str]:
    if payload.get("kind") != KIND or payload.get("format") != PROGRAM_FORMAT:
        raise BadProgramEntry(f"kind {payload.get('kind')!r}, format {payload.get('format')!r}")
    artifact = _typed(payload["artifact"], str)
    imported = payload["imported"]
    convention = (tuple(_ints(imported["param_positions"])),
                  tuple(decode_output(o) for o in _typed(imported["outputs"], list)),
                  tuple(tuple(_ints(pair)) for pair in _typed(imported["mutations"], list)),
                  _typed(imported["bf16_bits"], bool), _typed(imported["rng_key"], bool))
    inputs = tuple(ProgramInput(_typed(n, str), _typed(k, str), _typed(t, str), tuple(_ints(shape)), _dtype(dtype))
                   for n, k, t, shape, dtype in _typed(payload["inputs"], list))
    _typed(payload["float64"], bool)
    tensors = {**program.constants, **program.state_dict}
    if any(spec.kind != "input" and spec.target not in tensors for spec in inputs):
        raise BadProgramEntry("it reads state the program does not have")
    return _Decoded(convention, inputs, tuple(_typed(n, str) for n in _typed(payload["output_names"], list)),
                    tuple((_typed(i, int), _typed(f, str)) for i, f in _typed(payload["buffer_mutations"], list)),
                    tuple(tuple(_ints(pair)) for pair in _typed(payload["input_mutations"], list))), artifact


def _typed(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise BadProgramEntry(f"expected {kind.__name__}, found {type(value).__name__}")
    return value


def _ints(value: Any) -> list[int]:
    if type(value) is not list or any(type(v) is not int for v in value):
        raise BadProgramEntry(f"not a list of ints: {value!r}")
    return value


def _dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, _typed(name, str), None)
    if not isinstance(dtype, torch.dtype):
        raise BadProgramEntry(f"dtype {name!r}")
    return dtype


# ---- a miss: the entry stored -----------------------------------------------------------------------------------

def store(cache: CompileCache, key: CacheKey, program: ExportedProgram, graph: InferenceGraph, artifact: str,
          target: str) -> bool:
    """Publish the entry of ``program`` (as loaded), whose decomposed and imported ``graph`` compiled to
    ``artifact``; False when the program as loaded cannot stand in for the decomposed one at a hit (its
    decomposition changed the state it reads or its pytree specs) or the entry could not be written."""
    decomposed = graph.program
    if _spec_text(decomposed.call_spec.in_spec) != _spec_text(program.call_spec.in_spec) or \
            _spec_text(decomposed.call_spec.out_spec) != _spec_text(program.call_spec.out_spec) or \
            [s.kind for s in decomposed.graph_signature.output_specs] != \
            [s.kind for s in program.graph_signature.output_specs]:
        return False
    loaded, made = ({**p.constants, **p.state_dict} for p in (program, decomposed))
    for spec in graph.inputs:
        if spec.kind != "input" and not _same_tensor(loaded.get(spec.target), made.get(spec.target)):
            return False
        if spec.dynamic:
            return False
    imported = graph.imported
    payload = {
        "kind": KIND, "format": PROGRAM_FORMAT, "artifact": artifact,
        "float64": uses_float64(decomposed.graph_module, ()),
        "imported": {"param_positions": list(imported.param_positions),
                     "outputs": [encode_output(o) for o in imported.outputs],
                     "mutations": [list(pair) for pair in imported.mutations],
                     "bf16_bits": imported.bf16_bits, "rng_key": imported.rng_key},
        "inputs": [[s.name, s.kind, s.target, list(s.shape), str(s.dtype).removeprefix("torch.")]
                   for s in graph.inputs],
        "output_names": list(graph.output_names),
        "buffer_mutations": [list(pair) for pair in graph.buffer_mutations],
        "input_mutations": [list(pair) for pair in graph.input_mutations],
    }
    inputs = [(str(s.dtype).removeprefix("torch."), list(s.shape), list(contiguous_strides(s.shape)))
              for s in graph.inputs]
    return write_graph_entry(cache, key, graph_name=f"program:{imported.function.name}", target=target,
                             inputs=inputs, options={}, payload=payload, timings={},
                             neuroncc_version=cache.build_environment().neuroncc_version, replace=True)


def _same_tensor(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and \
        a.shape == b.shape and (a is b or bool(torch.equal(a, b)))
