"""A process using the ``neuron`` device forks (a DataLoader's workers) while another of its threads holds one
of the device's locks, or imports a module: the child computes instead of hanging (codegen/llvm/fork_safety.py's one hook: the build
lock is held across the fork, the allocator's and the signature index's are renewed in the child). Each test
forks for real and waits for the child a bounded time (tests/fork_testing.py); the child's values are checked
against CPU eager."""

from __future__ import annotations

import textwrap

import torch
from fork_testing import fork_while_held

from neuroncc.device import build_lock, signature_index
from neuroncc.device.allocator import ALLOCATOR

from .conftest import run_python


def _new_signature_in_child(scale: float, rows: int) -> str:
    """A device op of a signature this process has not met (its kernel is built in the child), checked."""
    x = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3)
    y = (x.to("neuron") * scale).sin().sum(1).cpu()
    return str(torch.allclose(y, (x * scale).sin().sum(1), rtol=1e-5, atol=1e-5))


def test_a_child_forked_while_another_thread_builds_a_kernel_builds_its_own():
    (torch.ones(2, device="neuron") + 1).cpu()  # the device in use
    code, text = fork_while_held(build_lock.LOCK, lambda: _new_signature_in_child(1.5, 7))
    assert code is not None, "the child hung on the device's build lock, held by a thread it does not have"
    assert (code, text) == (0, "True"), text


def test_a_child_forked_while_another_thread_allocates_allocates():
    (torch.ones(2, device="neuron") + 1).cpu()
    pool = ALLOCATOR.pool(0)
    code, text = fork_while_held(pool._lock, lambda: _new_signature_in_child(0.5, 5))
    assert code is not None, "the child hung on the allocator's lock"
    assert (code, text) == (0, "True"), text
    code, text = fork_while_held(ALLOCATOR._lock, lambda: _new_signature_in_child(0.25, 6))
    assert (code, text) == (0, "True"), text


def test_a_child_forked_while_another_thread_updates_the_signature_index_looks_up_its_own():
    (torch.ones(3, device="neuron") * 2).cpu()  # the index read (a cache is configured per test)
    indexes = list(signature_index._INDEXES.values())
    assert indexes, "no signature index was read"
    code, text = fork_while_held(indexes[0].lock, lambda: _new_signature_in_child(2.5, 9))
    assert code is not None, "the child hung on the signature index's lock"
    assert (code, text) == (0, "True"), text
    code, text = fork_while_held(signature_index._INDEXES_LOCK, lambda: _new_signature_in_child(3.5, 4))
    assert (code, text) == (0, "True"), text


DATALOADER_BESIDE_THE_DEVICE = textwrap.dedent("""
    import threading
    import torch
    import neuroncc.device
    neuroncc.device.register()

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):  # CPU work, as a worker's is; it frees device tensors of its parent's
            held.clear()
            x = torch.full((4,), float(i))
            return x * x + i

    stop = threading.Event()

    held = []

    def busy():  # new signatures all the time: the build lock, the allocator, LLVM, the cache writer, imports
        n = 1
        while not stop.is_set():
            n += 1
            t = torch.randn(n % 13 + 1, n % 7 + 1, device="neuron")
            held[:] = [t, (t.exp() * (n % 5 + 0.5)).sum(0)]
            held[1].cpu()

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        for epoch in range(3):
            loader = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2,
                                                 multiprocessing_context="fork", timeout=60)
            got = torch.cat(list(loader))
            want = torch.stack([torch.full((4,), float(i)) ** 2 + i for i in range(16)])
            assert torch.equal(got, want), (got, want)
    finally:
        stop.set()
        thread.join(60)
    print("ok")
""")


def test_a_dataloader_with_forked_workers_beside_a_busy_device_never_hangs(tmp_path):
    """Three epochs of a two-worker DataLoader (forked each epoch) while another thread keeps building kernels
    for new signatures (it imports TorchDynamo and the device's modules as it goes: the first fork meets those
    imports); the workers free device tensors of their parent's. A hang fails here (the DataLoader's and the
    process's timeouts), never the suite. Session 32 saw about one run in seven hang a worker at its first
    ``__cxa_atexit`` (``torch.set_num_threads`` -> ``caffe2::pthreadpool()``) on glibc's exit-function lock, held
    at the fork by the busy thread registering an ATen static's destructor; the fork now waits until no other
    thread runs (codegen/llvm/fork_safety.py; tests/codegen/test_fork_safety.py reproduces it at will)."""
    done = run_python(DATALOADER_BESIDE_THE_DEVICE, env={"NEURONCC_CACHE_DIR": str(tmp_path / "cache")},
                      timeout=240)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-4000:]

