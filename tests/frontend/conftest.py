import pytest


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_dynamo):
    """Every test starts with no compiled frames, zeroed neuroncc counters and a fixed seed (tests/conftest.py)."""


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
