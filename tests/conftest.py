import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):
    parser.addoption("--poison-scratch", action="store_true", default=False,
                     help="compile the checking build: kernels' scratch buffers NaN until written "
                          "(NEURONCC_POISON_SCRATCH=1, docs/reliability.md)")


def pytest_configure(config):
    """Under pytest-xdist, each worker's OpenMP team gets its share of the cores, not all of them.

    ATen and neuroncc's kernels run on torch's OpenMP team, which defaults to one thread per core. Two workers
    on two cores thus ran two 2-thread teams, whose spinning barriers take turns on the cores (the zoo's
    training tests: 118 -> 107 s with one thread per worker, 2 cores). Set before any test module imports torch
    (libgomp reads it once); subprocesses the tests start inherit it. Tests of the thread split choose their
    thread counts explicitly (``torch.set_num_threads``, the ``threads`` option), so they still run 2 threads.
    An explicit OMP_NUM_THREADS wins."""
    if config.getoption("--poison-scratch", False):  # (before any compile; xdist's workers inherit it)
        os.environ["NEURONCC_POISON_SCRATCH"] = "1"
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        os.environ["OMP_NUM_THREADS"] = str(max(cores // workers, 1))
    # Each LLVM module compiles once per test process (the product's object memo, codegen/llvm/object_memo.py,
    # with room for a whole test run's modules: the same bytes LLVM makes again); NEURONCC_TEST_OBJECT_MEMO=0
    # compiles every module every time.
    from neuroncc.codegen.llvm import jit

    jit.OBJECT_MEMO.resize(0 if os.environ.get("NEURONCC_TEST_OBJECT_MEMO", "1") == "0" else TEST_MEMO_BYTES)


def pytest_collection_modifyitems(config, items):
    """Under ``--poison-scratch`` the tests that pin the normal build's code (``normal_build``) are skipped."""
    if config.getoption("--poison-scratch", False):
        skip = pytest.mark.skip(reason="pins the normal build's code; --poison-scratch compiles the checking build")
        for item in items:
            if item.get_closest_marker("normal_build") is not None:
                item.add_marker(skip)


#: The object memo's capacity in a test process (the product's default keeps 64 MiB).
TEST_MEMO_BYTES = 256 << 20


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own compile cache so tests never see each other's artifacts."""
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "neuroncc-cache"))


@pytest.fixture(autouse=True)
def _environment_restored():
    """A test's changes to ``os.environ`` end with it. Libraries write there too (transformers' ``generate`` sets
    ``TOKENIZERS_PARALLELISM`` when it compiles a step): left behind, every later test of the worker that starts a
    child through the warm interpreter (``warm_python``) found its environment changed and failed."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def fresh_dynamo():
    """No compiled frames, zeroed neuroncc counters and a fixed seed at the start; no compiled frames left after.
    The front-end folders' conftests make it autouse (a local ``_fresh_dynamo`` asking for it)."""
    import torch

    import neuroncc

    torch._dynamo.reset()
    neuroncc.reset_stats()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


@pytest.fixture
def compiled_graphs(monkeypatch):
    """The CompiledGraph of every graph the backend compiles, by kind (forward, backward, inference; the last
    of each kind)."""
    from neuroncc.frontend import aot_compile

    graphs = {}
    compile_aten_graph = aot_compile.compile_aten_graph

    def recording(gm, name, options, *args, **kwargs):
        graphs[name.rsplit("_", 1)[-1]] = compiled = compile_aten_graph(gm, name, options, *args, **kwargs)
        return compiled

    monkeypatch.setattr(aot_compile, "compile_aten_graph", recording)
    return graphs


@pytest.fixture
def layout_copies(monkeypatch):
    """The graph outputs the torch front end copies into eager's strides: (shape, strides, eager's strides)."""
    from neuroncc.frontend import convert

    copies = []
    with_strides = convert.with_strides

    def counting(tensor, stride):
        result = with_strides(tensor, stride)
        if result.data_ptr() != tensor.data_ptr():
            copies.append((tuple(tensor.shape), tensor.stride(), stride))
        return result

    monkeypatch.setattr(convert, "with_strides", counting)
    return copies


@pytest.fixture(scope="session")
def warm_python():
    """Fresh processes forked from an interpreter that has imported torch (tests/warm_python.py): one server per
    test process, started on first use."""
    from warm_python import WarmPython

    server = WarmPython()
    yield server
    server.close()
