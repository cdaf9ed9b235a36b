"""Import aliases, so a kernel file written for AWS's NKI runs unchanged: ``import nki`` (NKI 0.2+) and, on
request, ``import neuronxcc.nki`` (NKI 0.1) both give ``neuroncc.nki``.

``install_import_aliases()`` is opt-in and never shadows a real installation: when the real ``nki`` (or
``neuronxcc``) package is importable it is left alone and a ``RuntimeWarning`` says so; pass ``force=True``
to alias anyway (the real package stays installed, just not imported by that name in this process).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings

# Modules of neuroncc.nki that NKI kernels import by name, relative to the package.
SUBMODULES = ("language", "isa", "typing", "compiler", "compiler.sbuf", "compiler.psum")


def _real_installation(name: str) -> bool:
    existing = sys.modules.get(name)
    if existing is not None:
        return not getattr(existing, "__neuroncc_alias__", False)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    # A folder named like the package without an __init__ (say, tests/nki) is an implicit namespace package:
    # not an installation of AWS's package.
    return spec is not None and spec.origin not in (None, "namespace")


def _alias(prefix: str) -> None:
    package = importlib.import_module("neuroncc.nki")
    sys.modules[prefix] = package
    for sub in SUBMODULES:
        sys.modules[f"{prefix}.{sub}"] = importlib.import_module(f"neuroncc.nki.{sub}")


def install_import_aliases(legacy: bool = True, force: bool = False) -> list[str]:
    """Make ``import nki`` (and, with ``legacy``, ``import neuronxcc.nki`` / ``from neuronxcc import nki``)
    import ``neuroncc.nki``. Returns the top-level names aliased; a name whose real package is installed is
    skipped with a warning unless ``force``."""
    installed = []
    targets = [("nki", "nki")] + ([("neuronxcc", "neuronxcc.nki")] if legacy else [])
    for top, prefix in targets:
        if _real_installation(top) and not force:
            warnings.warn(f"'{top}' is installed; neuroncc.nki.install_import_aliases leaves it alone "
                          f"(pass force=True to use the simulator under that name)", RuntimeWarning, stacklevel=2)
            continue
        if top == "neuronxcc":
            shell = types.ModuleType("neuronxcc", "neuroncc's stand-in for the Neuron compiler package: only nki")
            shell.__neuroncc_alias__ = True  # type: ignore[attr-defined]
            shell.__path__ = []  # a package, so `import neuronxcc.nki` resolves through sys.modules
            sys.modules["neuronxcc"] = shell
            _alias(prefix)
            shell.nki = sys.modules[prefix]  # type: ignore[attr-defined]
        else:
            _alias(prefix)
        installed.append(top)
    return installed


def uninstall_import_aliases() -> None:
    """Remove the aliases ``install_import_aliases`` made (real packages are untouched)."""
    for name in list(sys.modules):
        root = name.split(".")[0]
        if root not in ("nki", "neuronxcc"):
            continue
        module = sys.modules[name]
        if getattr(module, "__neuroncc_alias__", False) or module.__name__.startswith("neuroncc."):
            del sys.modules[name]
