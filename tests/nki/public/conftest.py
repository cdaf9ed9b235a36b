"""The public-style kernel tests import AWS's module names (``import nki``, ``import neuronxcc.nki``) and get
neuroncc's simulator through ``neuroncc.nki.install_import_aliases()``: the kernel files need no edit."""

from __future__ import annotations

import neuroncc.nki

# Installed at collection, before the kernel modules of this folder are imported. No real `nki` / `neuronxcc`
# is installed here; if one were, install_import_aliases would leave it alone (test_public_aliases checks).
neuroncc.nki.install_import_aliases(legacy=True)
