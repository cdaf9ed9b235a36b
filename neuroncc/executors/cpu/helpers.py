"""The launcher's process-wide native helpers: compiled once per process, or taken from a loaded artifact.

Two small LLVM modules serve every cpu executable of a process: the OpenMP team entry (``threads.py``) and the
native sequence interpreter (``native_sequence.py``). Compiling them at O3 costs ~25 ms of CPU, which a warm
start (executables loaded from the compile cache, nothing else compiled) paid on its first call. So an
artifact carries their code, ``runtime.json``:

    {"version": 2, "helpers": {"team": {"ir_sha256": ..., "form": "shared-library", "code": base64},
                               "sequence": {...}}}

(``form``: ``native_library.CodeForm``: the helper's own shared library, or its object file for MCJIT) and
loading an artifact *offers* them (:func:`offer`); a helper first needed afterwards loads the offered code (a
library through the dynamic loader, ~0.3 ms and no LLVM; an object through an MCJIT engine, ~1.5 ms) instead of
compiling, provided it was compiled from the very IR this process generates (its ``ir_sha256``). The artifact's files are checked against its manifest before anything is loaded, and its key
includes neuroncc's sources and the host CPU (driver/cache_key.py), so the code is this version's, built for
this machine; the IR check keeps that true for any caller. A helper missing or unusable in the file is
compiled as before: ``runtime.json`` can only save time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
from collections.abc import Callable

from typing import Any

from neuroncc.codegen.llvm.native_library import CodeForm, load_library
from neuroncc.errors import NeuronccError
from neuroncc.codegen.llvm.fork_safety import in_child, renew_in_child

RUNTIME_FILE = "runtime.json"
RUNTIME_VERSION = 2  # 2: each helper's code form (a shared library or an object file)
TEAM, SEQUENCE = "team", "sequence"  # the helpers' names (threads.py, native_sequence.py)

_LOCK = renew_in_child(threading.Lock())
#: helper name -> the lock its compile (or load) holds: a thread that needs a helper another thread is making
#: waits for that one instead of compiling it again. A torch.compile graph's first call needs the team entry
#: while the build's background thread (deferred_code.py) is compiling it: compiling it a second time took the
#: transformer block's first forward call 5-16 ms (10 ms of LLVM, then `ld`), against a wait of at most that.
_MAKING: dict[str, threading.Lock] = {}
_MODULES: dict[str, Any] = {}  # helper name -> its loaded code (jit.LoadedCode), kept mapped for the process
#: helper name -> (sha256 of its IR, its code form, the code) offered by an artifact
_OFFERED: dict[str, tuple[str, CodeForm, bytes]] = {}


def helper_module(name: str, ir: Callable[[], str]) -> Any:
    """The loaded code of helper ``name`` whose LLVM IR ``ir()`` gives: an offered object compiled from that IR,
    else compiled now (once per process: a second thread asking meanwhile waits for the first one's)."""
    module = _MODULES.get(name)
    if module is not None:
        return module
    with _LOCK:
        making = _MAKING.setdefault(name, threading.Lock())
    with making:
        module = _MODULES.get(name)
        return module if module is not None else _make(name, ir)


def helper_requested(name: str) -> bool:
    """Whether helper ``name``'s code is loaded in this process, or a thread is making it."""
    with _LOCK:
        return name in _MODULES or name in _MAKING


def _make(name: str, ir: Callable[[], str]) -> Any:
    """Helper ``name`` loaded from offered code or compiled (``helper_module``, holding its making lock)."""
    text = ir()
    with _LOCK:
        offered = _OFFERED.pop(name, None)
    module = None
    if offered is not None and offered[0] == _digest(text):
        try:
            module = _load_offered(offered[1], offered[2], text)
        except NeuronccError:
            module = None  # unusable code: compiled below
    if module is None:
        import neuroncc.codegen.llvm.jit as jit  # LLVM: only when something is compiled

        module = jit.compile_ir([text])
    with _LOCK:
        return _MODULES.setdefault(name, module)


def offer(text: str) -> None:
    """Offer the helpers of an artifact's ``runtime.json`` ``text`` to the helpers not yet loaded; anything
    malformed is ignored (those helpers are compiled when needed)."""
    try:
        data = json.loads(text)
        if data.get("version") != RUNTIME_VERSION:
            return
        found = {name: (entry["ir_sha256"], CodeForm(entry["form"]), base64.b64decode(entry["code"], validate=True))
                 for name, entry in data["helpers"].items()}
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        return
    with _LOCK:
        for name, (digest, form, code) in found.items():
            if name not in _MODULES and type(digest) is str:
                _OFFERED.setdefault(name, (digest, form, code))


def runtime_json(helpers: dict[str, Callable[[], str]]) -> str:
    """The ``runtime.json`` text of ``helpers`` (name -> IR generator), compiling any not loaded yet."""
    entries = {}
    for name, ir in helpers.items():
        module = helper_module(name, ir)
        code = module.library if module.form is CodeForm.SHARED_LIBRARY else module.objects[0]
        entries[name] = {"ir_sha256": _digest(ir()), "form": module.form.value, "code": base64.b64encode(code).decode()}
    return json.dumps({"version": RUNTIME_VERSION, "helpers": entries}, sort_keys=True) + "\n"


def wants_offers(names: tuple[str, ...] = (TEAM, SEQUENCE)) -> bool:
    """Whether some of the helpers ``names`` is still to be loaded (a loader reads ``runtime.json`` only then)."""
    return any(name not in _MODULES and name not in _OFFERED for name in names)


def _load_offered(form: CodeForm, code: bytes, text: str) -> Any:
    """Offered helper code, loaded (a library needs no LLVM; an object file needs MCJIT)."""
    if form is CodeForm.SHARED_LIBRARY:
        return load_library(code, llvm_ir=[text])
    import neuroncc.codegen.llvm.jit as jit

    return jit.load_objects([code], [text])


def _after_fork_in_child() -> None:
    # a thread of the parent's may have held a making lock when it forked: the child has no such thread
    _MAKING.clear()


in_child(_after_fork_in_child)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


__all__ = ["RUNTIME_FILE", "SEQUENCE", "TEAM", "helper_module", "helper_requested", "offer", "runtime_json",
           "wants_offers"]
