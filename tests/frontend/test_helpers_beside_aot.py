"""The front end's miss path starts the process-wide native helpers' compile before AOTAutograd traces.

The helpers (the OpenMP team entry, the native sequence interpreter: executors/cpu/helpers.py) do not depend on
the graph. Made after the forward graph's kernels, their LLVM ran beside the forward's first call, whose OpenMP
team wants both cores; started before AOTAutograd's trace, on a thread of their own, they use the core its
Python leaves idle (performance-history, session 22 first22: the forward's first call -38 ms, its wait for its
code -53 ms). Each case runs in a fresh process (the helpers are loaded once per process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent('''
    import json, threading
    import torch
    import torch._functorch.aot_autograd as aot_autograd_module
    from neuroncc.driver import compile as driver_compile
    from neuroncc.executors.cpu import deferred_code, helper_start, helpers

    events = []

    def recording(owner, name, label):
        real = getattr(owner, name)

        def call(*args, **kwargs):
            events.append([label, threading.current_thread().name])
            return real(*args, **kwargs)

        setattr(owner, name, call)

    recording(helpers, "_make", "make")
    recording(helper_start, "load_helpers_soon", "soon")
    recording(driver_compile, "run_pipeline", "passes")
    recording(aot_autograd_module, "aot_stage1_graph_capture", "aot")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 64)
    expected = model(x)
    out = torch.compile(model, backend="neuron", dynamic=False)(x)
    out.sum().backward()
    deferred_code.wait_for_pending()
    print(json.dumps({"events": events, "close": torch.allclose(out, expected, rtol=1e-5, atol=1e-5),
                      "loaded": [helpers.helper_requested(helpers.TEAM), helpers.helper_requested(helpers.SEQUENCE)]}))
''')


def test_the_helpers_compile_on_a_thread_of_their_own_started_before_aot_autograd_traces():
    out = subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    events = result["events"]
    on_main = [label for label, thread in events if thread == "MainThread"]
    assert on_main[:3] == ["soon", "aot", "passes"], events  # started before AOTAutograd traces
    made = [thread for label, thread in events if label == "make"]
    assert len(made) == 2 and "MainThread" not in made, events  # each compiled once, off the calling thread
    assert result["loaded"] == [True, True] and result["close"]
