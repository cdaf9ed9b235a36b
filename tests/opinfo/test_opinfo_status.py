"""PyTorch's OpInfo samples through torch.compile(backend="neuron"): statuses must match the table.

``expected_status.json`` holds one letter per sample (P pass, U UnsupportedOpError, M mismatch, C crash,
T timeout, E dynamo's own eager backend fails, - nothing to check) for every float32 OpInfo and mode. CI reruns
the first samples of a seeded subset of ops and fails when any letter changes, in either direction: a
regression, or a fix that the table (and docs/ops.md) should record. Re-collect with the command in the
failure message. The whole sweep: ``python tools/opinfo_sweep.py --all --jobs 2``.
"""

import functools

import pytest

from neuroncc.testing.opinfo import MODES, SweepConfig, op_status, run_mode
from neuroncc.testing.opinfo_policy import metadata_only_reason, random_reason
from neuroncc.testing.opinfo_table import (
    DOCS_PATH,
    RECOLLECT_HINT,
    TABLE_PATH,
    StatusTable,
    ci_subset,
    letter_changes,
    render_ops_md,
    summarize,
)

CI_OPS, CI_SEED = 45, 0  # a seeded subset (CI time: ~2.3 s an op on 2 cores)
CI_SAMPLES = {"fwd": 3, "bwd": 2, "bf16": 2}  # the first samples of each mode

TABLE = StatusTable.load(TABLE_PATH)



def _checkable(key: str) -> bool:
    """Ops with at least one sample that is not neuroncc-independent (eager-fails or n/a)."""
    return any(op_status(letters) not in ("eager-fails", "n/a") for letters in TABLE.letters[key].values())


CI_KEYS = ci_subset([k for k in TABLE.letters if _checkable(k)], CI_OPS, CI_SEED)


@functools.cache
def _opinfos():
    from neuroncc.testing.opinfo import float32_opinfos, op_key

    return {op_key(op): op for op in float32_opinfos()}


@pytest.mark.parametrize("key", CI_KEYS)
def test_opinfo_status_unchanged(key):
    op = _opinfos()[key]
    changes = []
    for mode, expected in sorted(TABLE.letters[key].items()):
        limit = CI_SAMPLES[mode]
        config = SweepConfig(baseline=None, max_samples=limit, sample_timeout_s=60.0, seed=TABLE.meta.get("seed", 0))
        result = run_mode(op, mode, config, known=expected)
        for index, was, now in letter_changes(expected[:limit], result.letters):
            changes.append(f"{mode} sample {index}: {was} -> {now} ({result.note or 'passes now'})")
    assert not changes, (
        f"OpInfo '{key}' changed status:\n  " + "\n  ".join(changes)
        + "\nIf this is intended (a fix, or a new refusal), re-collect the table and docs/ops.md:\n  "
        + RECOLLECT_HINT.format(ops=key)
    )


def test_table_covers_every_float32_opinfo():
    from neuroncc.testing.opinfo import modes_for

    opinfos = _opinfos()
    assert sorted(TABLE.letters) == sorted(opinfos), "re-collect: python tools/opinfo_sweep.py --all --collect"
    for key, op in opinfos.items():
        assert tuple(m for m in MODES if m in TABLE.letters[key]) == modes_for(op), key


def test_docs_ops_md_is_generated_from_the_table():
    assert DOCS_PATH.read_text() == render_ops_md(TABLE), "regenerate: python tools/opinfo_sweep.py --docs"


def test_no_silent_mismatches():
    mismatches = {(k, m): TABLE.notes.get(k, {}).get(m, "") for k, by_mode in TABLE.letters.items()
                  for m, letters in by_mode.items() if "M" in letters}
    assert not mismatches, f"silent wrong results: {mismatches}"


def test_everything_else_is_refused_cleanly():
    crashes = {(k, m): TABLE.notes.get(k, {}).get(m, "") for k, by_mode in TABLE.letters.items()
               for m, letters in by_mode.items() if set(letters) & {"C", "T"}}
    assert not crashes, f"crashes instead of UnsupportedOpError: {crashes}"


def test_forward_pass_rate_at_least_80_percent():
    summary = summarize(TABLE, "fwd")
    assert summary.counted > 300
    assert summary.pass_rate >= 0.80, f"{summary.statuses} ({100 * summary.pass_rate:.1f}% pass)"


def test_shape_only_list_names_real_opinfos():
    from neuroncc.testing.opinfo_policy import RANDOM_OPS, UNINITIALIZED_OPS

    names = set(_opinfos()) | {key.split(":", 1)[0] for key in _opinfos()}
    assert set(RANDOM_OPS) <= names, f"not float32 OpInfos: {sorted(set(RANDOM_OPS) - names)}"
    assert set(UNINITIALIZED_OPS) <= names, f"not float32 OpInfos: {sorted(set(UNINITIALIZED_OPS) - names)}"
    assert all(random_reason(key) and not metadata_only_reason(key) for key in RANDOM_OPS)
