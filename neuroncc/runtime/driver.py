"""The compile driver: one function from an IR graph to something that runs.

    compile_graph(fn, target=...) = verify -> pass pipeline for the target -> build the target's executable

Both the torch front end and the CLI call this; the compile cache wraps it (same inputs, same artifact).
This is an API boundary, so it is where ``NEURONCC_DUMP`` is read: when set to a directory, each pipeline
stage's IR is written under ``$NEURONCC_DUMP/<function>-<hash>/NN-<pass>.nir``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuroncc.ir import Function, print_function, verify
from neuroncc.passes.manager import PassContext, run_pipeline
from neuroncc.passes.pipeline import default_pipeline
from neuroncc.runtime.executable import Executable, build_executable

DEFAULT_TARGET = "interp"


def compile_graph(fn: Function, *, target: str = DEFAULT_TARGET, pipeline: str | None = None,
                  options: Mapping[str, Any] | None = None) -> Executable:
    """Compile ``fn`` for ``target``.

    ``pipeline`` (or ``options["pipeline"]``, as the torch backend passes it) overrides the target's default
    pass pipeline (:data:`neuroncc.passes.pipeline.DEFAULT_PIPELINES`); ``options["verify_each"]`` runs the
    verifier after every pass.
    """
    options = options or {}
    verify(fn)
    if pipeline is None:
        pipeline = options.get("pipeline")
    if pipeline is None:
        pipeline = default_pipeline(target)
    ctx = PassContext(verify_each=bool(options.get("verify_each", False)), dump_dir=dump_dir_for(fn))
    lowered = run_pipeline(pipeline, fn, ctx)
    verify(lowered)  # once, cheaply, even when not after every pass: codegen never sees invalid IR
    return build_executable(lowered, target, options)


def dump_dir_for(fn: Function) -> Path | None:
    """``$NEURONCC_DUMP/<name>-<hash of the graph>``, or None when ``NEURONCC_DUMP`` is not set."""
    root = os.environ.get("NEURONCC_DUMP")
    if not root:
        return None
    digest = hashlib.sha256(print_function(fn, canonical=True).encode()).hexdigest()[:12]
    return Path(root) / f"{fn.name}-{digest}"
