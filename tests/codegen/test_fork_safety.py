"""A process forked while another thread is inside LLVM (or holds a lock around LLVM's calls, or any lock of
neuroncc's) gives its child free locks: the child's calls run instead of hanging forever
(codegen/llvm/fork_safety.py; the device's locks: tests/device/test_fork_safety_device.py).

Session 31: a DataLoader worker forked while the quick-first optimizer compiled hung in its first steps (the
garbage collector finalizing an llvmlite object took llvmlite's lock, held by a thread the child does not have),
and with it a whole CI run. Each test forks for real and waits for the child a bounded time.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import sys
import threading
import time

import llvmlite.binding as llvm
import pytest
from fork_testing import fork_and_wait, fork_while_held

from neuroncc.codegen.llvm import fork_safety, jit

def test_a_child_forked_while_another_thread_is_inside_llvm_calls_llvm():
    jit.host_target()  # llvmlite's bindings loaded, as in any process that compiled
    from llvmlite.binding import ffi

    code, text = fork_while_held(ffi.lib._lock, llvm.get_process_triple)
    assert code is not None, "the child hung on llvmlite's lock, held by a thread it does not have"
    assert (code, text) == (0, llvm.get_process_triple())


def test_a_child_forked_while_another_thread_holds_the_jit_lock_compiles():
    def compile_in_child() -> int:
        module = jit.compile_ir(["define i32 @seven() {\n  ret i32 7\n}\n"])
        return len(module.objects)

    code, text = fork_while_held(jit._LOCK, compile_in_child)
    assert code is not None, "the child hung on the jit's lock, held by a thread it does not have"
    assert (code, text) == (0, "1")


def test_the_hook_finds_llvmlites_lock():
    # the hook reads a private attribute of llvmlite: an llvmlite that renames it fails here, not in a hang
    jit.host_target()
    lock = fork_safety.llvm_lock()
    assert lock is not None and lock.acquire(timeout=5)
    lock.release()


class _Recorded:
    """A lock that records when the fork hook takes it."""

    def __init__(self, name: str, taken: list[str]):
        self.name, self.taken, self._lock = name, taken, threading.Lock()

    def acquire(self) -> bool:
        self.taken.append(self.name)
        return self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


@pytest.fixture
def registrations():
    """The hook's registrations as they were before the test (a test's own are removed after it)."""
    holds, children = list(fork_safety._HOLDS), list(fork_safety._CHILD)
    yield
    fork_safety._HOLDS[:], fork_safety._CHILD[:] = holds, children


def test_the_hook_takes_the_held_locks_in_rank_order_and_releases_them(registrations):
    taken: list[str] = []
    for name, rank in [("queue", fork_safety.QUEUES), ("build", fork_safety.DEVICE_BUILD),
                       ("compile", fork_safety.DYNAMO_COMPILE), ("jit", fork_safety.JIT)]:
        fork_safety.hold_across_fork(_Recorded(name, taken), rank)
    code, text = fork_and_wait(lambda: "child")
    assert (code, text) == (0, "child")
    assert taken == ["compile", "build", "jit", "queue"]
    assert not fork_safety._HELD


def test_a_lock_that_keeps_changing_never_leaves_the_fork_holding_nothing(registrations):
    # a registration whose lock is another each time it is asked (a module loaded again and again while the hook
    # takes its locks): the hook tries TAKE_ATTEMPTS times, then the fork goes ahead holding the steady locks
    taken: list[str] = []
    fork_safety.hold_across_fork(_Recorded("steady", taken), fork_safety.JIT)
    fork_safety.hold_across_fork(lambda: _Recorded("changing", taken), fork_safety.QUEUES)
    fork_safety._before_fork()
    try:
        names = [getattr(lock, "name", None) for lock in fork_safety._HELD]  # (beside the process's own locks)
        assert "steady" in names and "changing" in names
        assert taken.count("steady") == fork_safety.TAKE_ATTEMPTS
    finally:
        fork_safety._release()
    assert not fork_safety._HELD


def test_a_renewed_lock_is_free_in_the_child_and_held_in_the_parent_until_its_holder_leaves():
    lock = fork_safety.renew_in_child(threading.Lock())
    code, text = fork_while_held(lock, lambda: lock.acquire(timeout=5))
    assert code is not None and (code, text) == (0, "True"), text
    assert lock.acquire(timeout=10)  # the parent's holder left
    lock.release()


def test_a_child_forked_while_a_thread_compiles_with_torchdynamo_takes_its_lock():
    importlib.import_module("torch._dynamo.convert_frame")  # TorchDynamo loaded, as in a compiling process
    lock = fork_safety.dynamo_compile_lock()
    assert lock is sys.modules["torch._dynamo.convert_frame"].compile_lock
    code, text = fork_while_held(lock, lambda: lock.acquire(timeout=5))
    assert code is not None and (code, text) == (0, "True"), "the child inherited TorchDynamo's lock held"


def test_a_child_forked_after_the_thread_pool_ran_runs_its_loops_on_new_workers():
    from neuroncc.executors.cpu.threads import PARALLEL_MIN_WORK, get_pool

    pool = get_pool(2)
    seen: list[tuple[int, int]] = []

    def loop() -> int:
        del seen[:]
        pool.parallel_for(lambda args, start, end: seen.append((start, end)), 0, 8, PARALLEL_MIN_WORK)
        return sum(end - start for start, end in seen)

    assert loop() == 8 and pool._workers  # its worker threads started (the child has none of them)
    code, text = fork_and_wait(loop)
    assert code is not None, "the child waited for a worker thread it does not have"
    assert (code, text) == (0, "8")
    code, text = fork_while_held(pool._lock, loop)  # and while another thread ran a region
    assert (code, text) == (0, "8"), text


def test_the_cache_writers_queue_is_held_across_a_fork_and_the_child_writes_its_own():
    from neuroncc.driver.publisher import PUBLISHER

    written: list[str] = []

    def child() -> str:
        read, write = os.pipe()
        os.close(read)
        PUBLISHER.submit(("fork-test", "k" * 16), lambda: written.append("child"), write)
        PUBLISHER.flush()
        return ",".join(written)

    code, text = fork_while_held(PUBLISHER._lock, child)
    assert (code, text) == (0, "child"), text


def test_a_child_forked_while_another_thread_imports_a_module_imports_it_whole(tmp_path, monkeypatch):
    """A module imported on another thread when the process forks: the fork waits for the import, so the child
    has the whole module (not a half-run body in sys.modules behind an import lock nobody releases)."""
    (tmp_path / "slow_module_for_fork.py").write_text("import time\ntime.sleep(0.5)\nDONE = 'whole'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = threading.Event()

    def import_it() -> None:
        started.set()
        importlib.import_module("slow_module_for_fork")

    importer = threading.Thread(target=import_it)
    importer.start()
    assert started.wait(10)
    for _ in range(5000):  # until its body runs
        if "slow_module_for_fork" in sys.modules:
            break
        time.sleep(0.001)
    try:
        code, text = fork_and_wait(lambda: importlib.import_module("slow_module_for_fork").DONE)
    finally:
        importer.join(10)
        sys.modules.pop("slow_module_for_fork", None)
    assert code is not None, "the child hung importing a module another thread of its parent was importing"
    assert (code, text) == (0, "whole"), text



def test_a_child_forked_while_another_thread_calls_a_compiled_graph_calls_it():
    """An executable's arena lock (held for a whole call) and its binding lock are renewed in the child: a call
    another thread was making at the fork does not stop the child's own calls of that executable."""
    import numpy as np

    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.executors.cpu.launcher import build_cpu_executable
    from neuroncc.testing.models import layer_norm_graph

    built = build_cpu_executable(fuse_whole_function(layer_norm_graph(8, 64)), {})
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in ((8, 64), (64,), (64,))]
    want = [array.copy() for array in built(*inputs)]

    def call_in_child() -> bool:
        return all(np.array_equal(got, expected) for got, expected in zip(built(*inputs), want, strict=True))

    for lock in (built._lock, built._bind_lock):
        code, text = fork_while_held(lock, call_in_child)
        assert code is not None, "the child hung on an executable's lock, held by a thread it does not have"
        assert (code, text) == (0, "True"), text

@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's exit-function lock")
def test_a_child_forked_while_another_thread_is_inside_the_c_librarys_exit_function_list_registers_its_own():
    """glibc's exit-function lock (``__exit_funcs_lock``, taken by ``__cxa_atexit``: the registration a C++
    function-local static with a destructor makes at its first use) is no lock a hook can take, and glibc's fork
    does not renew it: a child forked while another thread is inside hangs at its first such registration (session
    33: a DataLoader worker, in ``torch.set_num_threads`` -> ``caffe2::pthreadpool()``, beside a thread whose ATen
    calls made their first registrations). The fork waits until no other thread runs. Here a thread is inside that
    lock most of its time (``__cxa_finalize`` of a handle nothing was registered with scans the whole list under
    it, 20000 entries long); without the wait about 4 forks in 10 hung a child (11 in 100 with 2000 entries)."""
    libc = ctypes.CDLL(None)
    free = ctypes.cast(libc.free, ctypes.c_void_p)
    for _ in range(20000):
        libc.__cxa_atexit(free, None, None)  # free(NULL) at exit: nothing
    handle, stop = ctypes.c_int(0), threading.Event()

    def scan() -> None:
        while not stop.is_set():
            libc.__cxa_finalize(ctypes.byref(handle))

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    interval = sys.getswitchinterval()
    try:
        for _ in range(20):
            code, text = fork_and_wait(lambda: (libc.__cxa_atexit(free, None, None), sys.getswitchinterval())[1])
            assert code is not None, "the child hung on glibc's exit-function lock, held by a thread it does not have"
            assert (code, text) == (0, str(interval)), text  # the switch interval the wait lengthened, given back
            assert fork_safety.LAST_QUIET_WAIT["quiet"]
            assert sys.getswitchinterval() == interval
    finally:
        stop.set()
        scanner.join(10)
