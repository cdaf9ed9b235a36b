"""The ``neuron`` process group backend on 2 and 4 real processes over gloo on loopback: every collective on
neuron tensors against the result computed in one process; a dead or stuck rank makes the others fail with a
clear error within the group's timeout; the device-map form ``"cpu:gloo,neuron:neuron"``."""

from __future__ import annotations

import json
import time

import pytest
from dist_testing import finish, run_ranks, start_ranks


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_matches_the_single_process_result(world):
    results = run_ranks("collectives", world)
    failures = {f"rank {rank}: {name}": outcome for rank, checks in enumerate(results)
                for name, outcome in checks.items() if outcome != "ok"}
    assert not failures, "\n".join(f"{name}\n{outcome}" for name, outcome in failures.items())
    assert len(results[0]) >= 25  # every collective was checked


@pytest.mark.parametrize("mode", ["die", "hang"])
def test_a_rank_that_dies_or_hangs_fails_the_others_clearly_within_the_timeout(mode, tmp_path):
    timeout_s = 4.0
    start = time.monotonic()
    # a hanging rank stays silent until every other rank has exited, then ends (not 3 timeouts later)
    release = tmp_path / "release-the-hanging-rank"
    *others, last = start_ranks("dead_rank", 2, mode,
                                extra_env={"TEST_PG_TIMEOUT": str(timeout_s), "TEST_HANG_RELEASE": str(release)})
    try:
        outputs = finish(others, 180)
    finally:
        release.touch()
    outputs += finish([last], 180 - (time.monotonic() - start))
    *survivors, (dead_code, _, _) = outputs
    assert dead_code == 17
    for code, stdout, stderr in survivors:
        assert code == 0, stderr[-2000:]
        report = json.loads(stdout.strip().splitlines()[-1])
        assert report["type"] == "CollectiveError", report
        assert report["error"].startswith("neuron process group (rank ") and "all_reduce failed" in report["error"]
        if mode == "die":
            assert "closed its connection" in report["error"] and report["seconds"] < timeout_s
        else:
            assert "timeout" in report["error"] and report["seconds"] < timeout_s * 2 + 5
    assert time.monotonic() - start < 150


def test_the_device_map_form_reduces_cpu_and_neuron_tensors():
    results = run_ranks("device_map", 2, extra_env={"NEURONCC_TEST_BACKEND": "cpu:gloo,neuron:neuron"})
    assert results == [{"backend": "cpu:gloo,neuron:neuron", "group": "ProcessGroupNeuron"}] * 2
