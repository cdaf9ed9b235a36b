"""``torchrun --nproc-per-node 2 examples/train_distributed.py``: the launcher users run, the example they
copy (the device and the ``neuron`` backend found through torch's autoload, no test scaffolding)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from dist_testing import ROOT, free_port


def test_torchrun_trains_the_example_transformer_with_ddp():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "PYTEST_XDIST", "RANK",
                                                                       "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(free_port()), str(ROOT / "examples" / "train_distributed.py"), "--steps", "3"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert lines[0] == "DDP on 2 ranks, device neuron, process group neuron"
    losses = [float(m.group(1)) for m in map(re.compile(r"step \d+  loss ([0-9.]+)").match, lines) if m]
    assert len(losses) == 3 and all(0 < loss < 10 for loss in losses)
    assert lines[-1] == "ranks agree on the parameters: True"
