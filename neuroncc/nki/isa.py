"""``nki.isa`` for neuroncc's simulator (``import neuroncc.nki.isa as nisa``)."""

from neuroncc.runtime.nki.isa import *  # noqa: F403 - this module is the public re-export
from neuroncc.runtime.nki.isa import __all__  # noqa: F401
