"""``nki.language`` for neuroncc's simulator (``import neuroncc.nki.language as nl``)."""

from neuroncc.runtime.nki.language import *  # noqa: F403 - this module is the public re-export
from neuroncc.runtime.nki.language import __all__  # noqa: F401
