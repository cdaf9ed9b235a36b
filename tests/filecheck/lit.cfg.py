"""lit configuration for the pass tests: one ``<pass-name>.nir`` file per pass, IR in and IR out.

``neuroncc`` in RUN lines runs ``<this python> -m neuroncc.cli`` from this checkout (no installation needed);
``filecheck`` is the one installed next to this python. Every test input is first round-tripped through
the printer and parser (see neuroncc/testing/lit_format.py).
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from neuroncc.testing.lit_format import configure  # noqa: E402

configure(config, __file__, name="neuroncc-filecheck")  # noqa: F821 (lit defines `config`)
