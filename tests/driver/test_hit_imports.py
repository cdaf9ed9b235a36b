"""What a warm start imports: a process whose programs all load from the compile cache never fuses, so it does not
import what only a compile needs (session 31 nir31: networkx, imported with the passes, was ~0.1 s of a warm
eager first step)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_passes_and_the_device_s_compile_path_import_networkx_only_to_fuse():
    code = ("import sys\n"
            "import neuroncc.driver.compile, neuroncc.passes, neuroncc.device.fused_optimizers\n"
            "print('networkx' in sys.modules)\n"
            "from neuroncc.passes.fusion_groups import FusionPlanner\n"
            "from cache_testing import sample_function\n"  # any graph: the planner imports networkx when it runs
            "FusionPlanner(sample_function())\n"
            "print('networkx' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"], out.stdout
