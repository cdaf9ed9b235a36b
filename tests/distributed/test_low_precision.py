"""bf16 and float16 across 2 real processes on the neuron device, against the same on CPU tensors over gloo in
the same processes: every collective (bitwise the same), DTensor ops on bf16 shards, and FSDP2 mixed
precision (also compiled), FSDP2 and DDP of bf16 models, DDP's bf16/fp16 compression hooks and
DDP(torch.compile) of a bf16 model and DDP/FSDP2 under
torch.autocast training 3 steps (scenarios_low_precision.py). One launch runs them all;
the test names every check that fails."""

from __future__ import annotations

from dist_testing import run_ranks


def test_low_precision_collectives_and_training_match_cpu_over_gloo():
    results = run_ranks("low_precision", 2)
    failures = {f"rank {rank}: {name}": outcome for rank, checks in enumerate(results)
                for name, outcome in checks.items() if outcome != "ok"}
    assert not failures, "\n".join(f"--- {name}\n{outcome}" for name, outcome in failures.items())
    assert len(results[0]) == 13 * 4 + 1 + 14  # every collective x {bf16, float16} x {dense, not}, DTensor, training
