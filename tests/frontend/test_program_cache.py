"""The program cache (neuroncc/frontend/program_cache.py): a warm ``neuroncc run`` / ``neuroncc.compile_program``
finds an exported program's compiled graph before decomposing it; a changed program misses, new weights are run
from the program as loaded, and a damaged entry is a miss with one warning."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
from torch.export import ExportedProgram

import neuroncc
from neuroncc.driver.cache import cache_from_environ
from neuroncc.driver.graph_entries import PAYLOAD_NAME
from neuroncc.driver.notices import CacheWarning
from neuroncc.driver.publisher import PUBLISHER
from neuroncc.frontend import program_cache


class _Net(torch.nn.Module):
    def __init__(self, activation=torch.relu):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
        self.register_buffer("shift", torch.linspace(-1, 1, 4))
        self.activation = activation

    def forward(self, x):
        return torch.softmax(self.l2(self.activation(self.l1(x))) + self.shift, -1)


def _save(path: Path, module: torch.nn.Module, seed: int = 0, shape=(8, 16)) -> Path:
    torch.manual_seed(seed)
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter)
    torch.export.save(torch.export.export(module.eval(), (torch.randn(*shape),)), path)
    return path


@pytest.fixture
def decompositions(monkeypatch):
    """The programs decomposed from now on (a list the test reads)."""
    decomposed: list[ExportedProgram] = []
    original = ExportedProgram.run_decompositions

    def counting(self, *args, **kwargs):
        decomposed.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counting)
    return decomposed


def _eager(path: Path, x: torch.Tensor) -> torch.Tensor:
    return torch.export.load(path).module()(x)


def test_compile_program_hits_without_decomposing_and_runs_the_weights_it_is_given(tmp_path, decompositions):
    first = _save(tmp_path / "net.pt2", _Net(), seed=0)
    x = torch.randn(8, 16)
    served = neuroncc.compile_program(first)
    assert served.cache == "miss" and len(decompositions) == 1
    torch.testing.assert_close(served(x), _eager(first, x))
    # the same program exported with other weights: the same entry; the weights are the program's as loaded
    (tmp_path / "other").mkdir()
    reweighted = _save(tmp_path / "other" / "net.pt2", _Net(), seed=5)
    again = neuroncc.compile_program(reweighted)
    assert again.cache == "hit" and len(decompositions) == 1
    torch.testing.assert_close(again(x), _eager(reweighted, x))
    assert not torch.allclose(_eager(reweighted, x), _eager(first, x))


@pytest.mark.parametrize("change", ["op", "shape"])
def test_a_changed_program_misses(tmp_path, decompositions, change):
    path = _save(tmp_path / "net.pt2", _Net())
    neuroncc.compile_program(path)
    assert len(decompositions) == 1
    changed = _save(path, _Net(torch.tanh)) if change == "op" else _save(path, _Net(), shape=(4, 16))
    served = neuroncc.compile_program(changed)
    assert served.cache == "miss" and len(decompositions) == 2
    x = torch.randn(8 if change == "op" else 4, 16)
    torch.testing.assert_close(served(x), _eager(changed, x))
    assert neuroncc.compile_program(changed).cache == "hit" and len(decompositions) == 2


def test_another_target_or_pipeline_is_another_entry(tmp_path, decompositions):
    path = _save(tmp_path / "net.pt2", _Net())
    neuroncc.compile_program(path)
    interp = neuroncc.compile_program(path, target="interp")
    assert interp.cache == "miss" and len(decompositions) == 2
    piped = neuroncc.compile_program(path, pipeline="canonicalize,static-shape")
    assert len(decompositions) == 3
    x = torch.randn(8, 16)
    torch.testing.assert_close(piped(x), _eager(path, x))


def test_a_damaged_entry_is_a_miss_with_one_warning(tmp_path, decompositions):
    path = _save(tmp_path / "net.pt2", _Net())
    neuroncc.compile_program(path)
    cache = cache_from_environ(os.environ)
    key = program_cache.key_for(torch.export.load(path), "net", "cpu", None, None, cache)
    assert key is not None
    PUBLISHER.wait((cache.root, key.key))
    payload = cache.entries_dir / key.key / PAYLOAD_NAME
    payload.write_bytes(payload.read_bytes().replace(b'"artifact"', b'"artefact"'))
    with pytest.warns(CacheWarning):
        served = neuroncc.compile_program(path)
    assert len(decompositions) == 2
    x = torch.randn(8, 16)
    torch.testing.assert_close(served(x), _eager(path, x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert neuroncc.compile_program(path).cache == "hit"  # replaced by the miss's entry
    assert len(decompositions) == 2
