"""The parallelism APIs on the neuron device, 2 real processes over the ``neuron`` backend: DDP (eager and
DDP(torch.compile(m))), FSDP2, tensor parallel, DTensor, pipelining and distributed checkpointing each train
(or compute) and match one process on the full batch within 1e-5."""

from __future__ import annotations

import pytest
import torch
from dist_testing import run_ranks

TOLERANCE = 1e-5


def assert_matches_reference(result: dict) -> None:
    assert result["params"], result
    for name, values in result["params"].items():
        torch.testing.assert_close(torch.tensor(values), torch.tensor(result["reference"][name]), rtol=TOLERANCE,
                                   atol=TOLERANCE, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_ddp_trains_like_one_process_on_the_full_batch(mode):
    results = run_ranks("ddp", 2, mode)
    for result in results:
        assert_matches_reference(result)
        assert len(result["params"]) == 4
    if mode == "compiled":
        assert all(r["graphs_compiled"] >= 4 for r in results)  # split at bucket boundaries: 2+ pieces, fwd + bwd


def test_fsdp2_trains_like_one_process_on_the_full_batch():
    results = run_ranks("fsdp", 2)
    for result in results:
        assert_matches_reference(result)
        assert set(result["parameter_types"].values()) == {"DTensor"} and result["local_rows"] == 8


def test_tensor_parallel_trains_like_one_process():
    for result in run_ranks("tensor_parallel", 2):
        assert_matches_reference(result)
        assert result["local_rows"] == 8  # the first Linear's 16 output rows, split column-wise


def test_dtensor_distribute_redistribute_and_sharded_matmul():
    for result in run_ranks("dtensor", 2):
        assert all(result["checks"].values()), result["checks"]
        assert result["device"] == "neuron:0"


def test_a_two_stage_gpipe_pipeline_trains_like_one_process():
    first, last = run_ranks("pipeline", 2)
    assert set(first["params"]) == {"0.weight", "0.bias"} and set(last["params"]) == {"2.weight", "2.bias"}
    assert_matches_reference(first)
    assert_matches_reference(last)
    assert len(last["losses"]) == 3 and last["losses"][2] < last["losses"][0]


def test_a_checkpoint_saved_by_two_ranks_loads_in_one_process(tmp_path):
    directory = str(tmp_path / "checkpoint")
    saved = run_ranks("checkpoint_save", 2, directory)
    assert saved[0]["params"] == saved[1]["params"]
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= set(saved[0]["files"])
    (loaded,) = run_ranks("checkpoint_load", 1, directory)
    assert loaded["device"] == "neuron:0"
    for name, values in saved[0]["params"].items():
        torch.testing.assert_close(torch.tensor(loaded["params"][name]), torch.tensor(values), rtol=0, atol=0)
