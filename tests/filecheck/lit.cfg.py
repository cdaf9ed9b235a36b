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

from neuroncc.testing.lit_format import RoundTripShTest  # noqa: E402

config.name = "neuroncc-filecheck"
config.test_format = RoundTripShTest(execute_external=False)
config.suffixes = [".nir"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.test_source_root, "Output")
config.excludes = ["Output"]

config.environment["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
config.environment["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
# Only the word `neuroncc` used as a command: never inside a path, nor the module name it becomes.
config.substitutions.append((r"(?<![\w/.\-])neuroncc(?![\w/.\-])", f'"{sys.executable}" -m neuroncc.cli'))
