"""compile_aten_graph runs with Python's cyclic GC paused, collects the young generations at the end and restarts
the clock of the next full collection."""

from __future__ import annotations

import gc
import weakref

import pytest

from neuroncc.frontend.aten_compiler import cyclic_gc_paused, imports_gc_paused


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_the_gc_is_paused_inside_and_young_cycles_are_freed_at_the_end():
    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the cyclic GC frees it
        alive = weakref.ref(a)
        del a, b
        assert alive() is not None
    assert gc.isenabled()
    assert alive() is None


def test_the_gc_comes_back_after_an_error():
    with pytest.raises(ValueError), cyclic_gc_paused():
        raise ValueError("compile failed")
    assert gc.isenabled()


def test_a_caller_that_disabled_the_gc_keeps_it_disabled():
    gc.disable()
    try:
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_survives_the_compile_moves_to_the_oldest_generation():
    with cyclic_gc_paused():
        survivor = Node()  # a tracked object made by the compile and kept by its caller
    assert any(o is survivor for o in gc.get_objects(generation=2))
    assert gc.get_freeze_count() == 0  # nothing stays frozen


def test_the_full_collection_clock_restarts():
    for _ in range(3):
        gc.collect(1)  # each counts toward the next full collection
    assert gc.get_count()[2] >= 3
    with cyclic_gc_paused():
        pass
    assert gc.get_count()[2] == 0


def test_objects_the_process_froze_stay_frozen():
    frozen = Node()
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with cyclic_gc_paused():
            Node()
        # not unfrozen (that would empty the permanent generation); the count is not compared exactly: a frozen
        # object that dies meanwhile (refcounting, e.g. on another thread of the test process) leaves it
        assert gc.get_freeze_count() > count // 2
        assert not any(o is frozen for generation in range(3) for o in gc.get_objects(generation=generation))
    finally:
        gc.unfreeze()


def test_no_young_garbage_cycle_is_aged():
    gc.collect()
    older = Node()
    older.other = Node()
    older.other.other = older  # a cycle made before the compile, garbage by its end
    gc.collect(0)  # in the middle generation now: a young collection of the first generation alone keeps it
    alive = weakref.ref(older)
    del older
    with cyclic_gc_paused():
        pass
    assert alive() is None


def test_what_an_import_pause_made_moves_to_the_oldest_generation_without_a_collection():
    # a collection would count the import's objects toward the next full collection's trigger: a second full
    # collection (~0.3 s) fell inside the transformer step's first call (performance-history, session 22 first22)
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with imports_gc_paused():
            assert not gc.isenabled()
            survivor = Node()  # a module's object: lives on
    finally:
        gc.callbacks.remove(count)
    assert gc.isenabled() and collections == []
    assert any(o is survivor for o in gc.get_objects(generation=2))
    assert gc.get_count()[2] == 0 and gc.get_freeze_count() == 0


def test_an_import_pause_leaves_a_disabled_gc_and_frozen_objects_as_they_are():
    gc.disable()
    try:
        with imports_gc_paused():
            Node()
        assert not gc.isenabled()
    finally:
        gc.enable()
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with imports_gc_paused():
            Node()
        assert gc.get_freeze_count() > count // 2  # not unfrozen
    finally:
        gc.unfreeze()
