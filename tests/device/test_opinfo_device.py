"""PyTorch's OpInfo samples on the neuron device against CPU: the acceptance numbers and a CI rerun.

``opinfo_status.json`` (next to this file) holds one letter per sample for every float32 OpInfo and mode, from
``python tools/opinfo_device_sweep.py --all --jobs 2 --collect`` (see neuroncc.testing.opinfo_device). The
table must show at least 90% of the counted OpInfos wholly on the device and no mismatch; CI reruns the first
samples of a seeded subset of ops and fails when any letter changes, in either direction (a regression, or a
fix the table and docs/ops.md should record).
"""

from __future__ import annotations

import functools

import pytest

from neuroncc.testing.opinfo import SweepConfig
from neuroncc.testing.opinfo_device import device_status, run_device_mode
from neuroncc.testing.opinfo_table import (
    DEVICE_TABLE_PATH,
    DOCS_PATH,
    StatusTable,
    ci_subset,
    device_op_statuses,
    device_summary,
    letter_changes,
)

CI_OPS, CI_SEED, CI_SAMPLES = 30, 0, 2

TABLE = StatusTable.load(DEVICE_TABLE_PATH)


def test_most_opinfos_run_wholly_on_the_device_and_none_mismatches():
    counts = device_summary(TABLE)
    assert counts["swept"] >= 600, counts  # the whole float32 op_db, not a hand-picked part
    assert counts["mismatch"] == 0, counts
    assert counts["device"] >= 0.9 * counts["counted"], counts


def test_docs_list_every_op_that_falls_back():
    text = DOCS_PATH.read_text(encoding="utf-8")
    missing = [key for key, status in device_op_statuses(TABLE).items()
               if status in ("fallback", "crash") and f"`{key}`" not in text]
    assert not missing, f"docs/ops.md does not list {missing}: python tools/opinfo_device_sweep.py --docs"


def _checkable(key: str) -> bool:
    return any(device_status(letters) not in ("eager-fails", "n/a") for letters in TABLE.letters[key].values())


CI_KEYS = ci_subset([k for k in TABLE.letters if _checkable(k)], CI_OPS, CI_SEED)


@functools.cache
def _opinfos():
    from neuroncc.testing.opinfo import float32_opinfos, op_key

    return {op_key(op): op for op in float32_opinfos()}


@pytest.mark.parametrize("key", CI_KEYS)
def test_device_opinfo_status_unchanged(key):
    op = _opinfos()[key]
    changes = []
    for mode, expected in sorted(TABLE.letters[key].items()):
        config = SweepConfig(backend="neuron-device", baseline=None, max_samples=CI_SAMPLES, sample_timeout_s=60.0,
                             seed=TABLE.meta.get("seed", 0))
        result = run_device_mode(op, mode, config, known=expected)
        for index, was, now in letter_changes(expected[:CI_SAMPLES], result.letters):
            changes.append(f"{mode} sample {index}: {was} -> {now} ({result.note or 'passes now'})")
    assert not changes, (f"OpInfo '{key}' changed status on the device:\n  " + "\n  ".join(changes)
                         + f"\nif intended: python tools/opinfo_device_sweep.py --collect --ops {key}")
