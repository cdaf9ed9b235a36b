"""Checkpointing and resuming training across 2 real processes on the neuron device (scenarios_checkpoint.py):
FSDP2 (float32 and a bf16 MixedPrecisionPolicy) and tensor-parallel DTensor parameters through
torch.distributed.checkpoint (``dcp.save``/``dcp.load``, ``dcp.async_save``) with
``get_state_dict``/``set_state_dict``, and a full state dict gathered to rank 0 (``cpu_offload``), saved with
torch.save and restored with ``broadcast_from_rank0``. Each resumed run equals the uninterrupted one bitwise, as
the same run on CPU tensors over gloo does in the same processes, and the device's parameters are CPU's within
float32 rounding. One launch runs them all; a second, of one process, resumes a 2-rank checkpoint."""

from __future__ import annotations

import torch
from dist_testing import run_ranks


def test_resumed_training_equals_uninterrupted_training_like_on_cpu(tmp_path):
    results = run_ranks("checkpoint_resume", 2, str(tmp_path))
    failures = {f"rank {rank}: {name}": outcome for rank, checks in enumerate(results)
                for name, outcome in checks.items() if outcome != "ok"}
    assert not failures, "\n".join(f"--- {name}\n{outcome}" for name, outcome in failures.items())
    assert len(results[0]) == 5


def test_a_two_rank_checkpoint_resumes_in_one_process(tmp_path):
    """Model, AdamW state and LR scheduler saved by 2 FSDP2 ranks; one process loads them into an unsharded
    model and trains on on the whole batch, as far as the 2 ranks went on their halves (within 1e-5)."""
    directory = str(tmp_path / "checkpoint")
    ranks = run_ranks("checkpoint_save_for_one", 2, directory)
    (one,) = run_ranks("checkpoint_load_in_one", 1, directory)
    assert one["moment_device"] == "neuron:0" and one["lr"] == ranks[0]["lr"]
    for name, values in ranks[0]["params"].items():
        torch.testing.assert_close(torch.tensor(one["params"][name]), torch.tensor(values), rtol=1e-5, atol=1e-5)
