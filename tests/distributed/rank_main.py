"""One rank of a multi-process test: ``python rank_main.py SCENARIO [ARGS...]`` with torchrun's variables set
(see dist_testing.py). Initializes the ``neuron`` process group (30 s timeout), runs the scenario, prints its
JSON-able result on the last line of stdout."""

from __future__ import annotations

import atexit
import datetime
import importlib
import json
import os
import sys
import threading

import torch
import torch.distributed as dist

import neuroncc.device
import neuroncc.distributed

neuroncc.device.register()  # torch's autoload normally does it; explicit so the tests run without it too
neuroncc.distributed.register()

#: scenario name -> module:function
SCENARIOS = {
    "collectives": "scenarios_collectives:run",
    "low_precision": "scenarios_low_precision:run",
    "dead_rank": "scenarios_collectives:dead_rank",
    "device_map": "scenarios_collectives:device_map",
    "ddp": "scenarios_training:ddp",
    "fsdp": "scenarios_training:fsdp",
    "tensor_parallel": "scenarios_training:tensor_parallel",
    "dtensor": "scenarios_training:dtensor",
    "pipeline": "scenarios_training:pipeline",
    "checkpoint_save": "scenarios_training:checkpoint_save",
    "checkpoint_load": "scenarios_training:checkpoint_load",
    "all_apis": "scenarios_training:all_apis",
    "checkpoint_resume": "scenarios_checkpoint:run",
    "checkpoint_save_for_one": "scenarios_checkpoint:save_for_one",
    "checkpoint_load_in_one": "scenarios_checkpoint:load_in_one",
}


def main() -> int:
    scenario, *args = sys.argv[1:]
    module_name, _, function_name = SCENARIOS[scenario].partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    backend = os.environ.get("NEURONCC_TEST_BACKEND", "neuron")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(os.environ.get("TEST_PG_TIMEOUT",
                                                                                             "30"))))
    try:
        result = function(dist.get_rank(), dist.get_world_size(), *args)
    finally:
        dist.destroy_process_group()
    print(json.dumps(result))
    return 0


def exit_without_finalizing(code: int) -> None:
    """End as the interpreter would (the non-daemon threads joined, the atexit handlers run, the output flushed)
    but without its finalization, ~1 s of module teardown after importing torch and TorchDynamo, per rank (as
    tests/warm_python.py's children end). A rank whose scenario raised ends the ordinary way."""
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_finalizing(main())
