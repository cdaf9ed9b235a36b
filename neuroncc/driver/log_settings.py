"""``NEURONCC_LOG``: neuroncc's log lines on stderr without TORCH_LOGS (the CLI, the torch backend, ``compile_graph``).

Its own module, apart from the compile records (``records.py``) that the log lines print, so that the torch
backend, which reads the setting on every graph it is handed, does not import the records on a graph cache hit
(which compiles nothing and makes no record; tests/frontend/test_warm_imports.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from neuroncc.errors import InputError

#: ``NEURONCC_LOG``: where the CLI (and the torch backend) send neuroncc's log lines without TORCH_LOGS.
LOG_VARIABLE = "NEURONCC_LOG"
_LEVELS = {"info": logging.INFO, "debug": logging.DEBUG, "warning": logging.WARNING}


def configure_log_from_environ(environ: Mapping[str, str]) -> None:
    """``NEURONCC_LOG=info|debug``: neuroncc's loggers at that level, printed on stderr (once per process; a
    handler the user or TORCH_LOGS already attached to the ``neuroncc`` logger is left alone)."""
    setting = environ.get(LOG_VARIABLE, "").strip().lower()
    if not setting:
        return
    level = _LEVELS.get(setting)
    if level is None:
        raise InputError(f"{LOG_VARIABLE}={setting!r}: expected one of {', '.join(_LEVELS)}")
    logger = logging.getLogger("neuroncc")
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
