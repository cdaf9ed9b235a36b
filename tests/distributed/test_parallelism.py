"""The parallelism APIs on the neuron device, 2 real processes over the ``neuron`` backend: DDP (eager and
DDP(torch.compile(m))), FSDP2, tensor parallel, DTensor, pipelining and distributed checkpointing each train
(or compute) and match one process on the full batch within 1e-5. All of them run in one pair of processes
(scenarios_training.all_apis: process start-up and kernel compiles are most of a run's cost), and one test
checks every API's report, naming each one that fails."""

from __future__ import annotations

import torch
from dist_testing import run_ranks

TOLERANCE = 1e-5


def test_every_parallelism_api_trains_like_one_process(tmp_path):
    directory = tmp_path / "checkpoint"
    reports = {"ranks": run_ranks("all_apis", 2, str(directory)), "checkpoint": str(directory)}
    checks = {"DDP": lambda: check_ddp(reports, "ddp"),
              "DDP(torch.compile)": lambda: check_ddp(reports, "ddp_compiled"),
              "FSDP2": lambda: check_fsdp2(reports), "tensor parallel": lambda: check_tensor_parallel(reports),
              "DTensor": lambda: check_dtensor(reports), "pipelining": lambda: check_pipeline(reports),
              "distributed checkpoint": lambda: check_checkpoint(reports)}
    failures = []
    for name, check in checks.items():
        try:
            check()
        except AssertionError as exc:
            failures.append(f"--- {name}: {exc}")
    assert not failures, "\n".join(failures)


def of(reports: dict, api: str) -> list[dict]:
    results = [rank[api] for rank in reports["ranks"]]
    errors = [f"rank {r}: {result['error']}" for r, result in enumerate(results) if "error" in result]
    assert not errors, "\n".join(errors)
    return results


def assert_matches_reference(result: dict) -> None:
    assert result["params"], result
    for name, values in result["params"].items():
        torch.testing.assert_close(torch.tensor(values), torch.tensor(result["reference"][name]), rtol=TOLERANCE,
                                   atol=TOLERANCE, msg=lambda m: f"{name}: {m}")


def check_ddp(reports: dict, api: str) -> None:
    results = of(reports, api)
    for result in results:
        assert_matches_reference(result)
        assert len(result["params"]) == 4
    if api == "ddp_compiled":
        assert all(r["graphs_compiled"] >= 4 for r in results)  # split at bucket boundaries: 2+ pieces, fwd + bwd


def check_fsdp2(reports: dict) -> None:
    for result in of(reports, "fsdp"):
        assert_matches_reference(result)
        assert set(result["parameter_types"].values()) == {"DTensor"} and result["local_rows"] == 8


def check_tensor_parallel(reports: dict) -> None:
    for result in of(reports, "tensor_parallel"):
        assert_matches_reference(result)
        assert result["local_rows"] == 8  # the first Linear's 16 output rows, split column-wise


def check_dtensor(reports: dict) -> None:
    for result in of(reports, "dtensor"):
        assert all(result["checks"].values()), result["checks"]
        assert result["device"] == "neuron:0"


def check_pipeline(reports: dict) -> None:
    first, last = of(reports, "pipeline")
    assert set(first["params"]) == {"0.weight", "0.bias"} and set(last["params"]) == {"2.weight", "2.bias"}
    assert_matches_reference(first)
    assert_matches_reference(last)
    assert len(last["losses"]) == 3 and last["losses"][2] < last["losses"][0]


def check_checkpoint(reports: dict) -> None:
    saved = of(reports, "checkpoint_save")
    assert saved[0]["params"] == saved[1]["params"]
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= set(saved[0]["files"])
    (loaded,) = run_ranks("checkpoint_load", 1, reports["checkpoint"])
    assert loaded["device"] == "neuron:0"
    for name, values in saved[0]["params"].items():
        torch.testing.assert_close(torch.tensor(loaded["params"][name]), torch.tensor(values), rtol=0, atol=0)
