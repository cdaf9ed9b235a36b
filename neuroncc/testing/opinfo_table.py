"""The OpInfo sweep's expected-status table, its summary numbers and ``docs/ops.md``.

The device sweep (neuroncc.testing.opinfo_device) has its own table, ``tests/device/opinfo_status.json``, and
the last section of ``docs/ops.md`` (:func:`device_section`).

The table (``tests/opinfo/expected_status.json``) records, for each OpInfo key and mode, one letter per
sample (see :data:`neuroncc.testing.opinfo.LETTERS`) and the first failure's reason. CI reruns a prefix of
the samples of a seeded subset of ops and fails when any letter changes, in either direction; the fix is
to re-collect (``tools/opinfo_sweep.py --collect``), which also regenerates ``docs/ops.md``.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuroncc.testing.opinfo import EAGER_FAILS, MODES, NOT_APPLICABLE, PASS, ModeResult, op_status
from neuroncc.testing.opinfo_device import DEVICE_MODES, LETTERS, device_status
from neuroncc.testing.opinfo_policy import (
    RANDOM_ALPHA, RANDOM_CALLS, RANDOM_OPS, UNINITIALIZED_OPS, metadata_only_reason,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE_PATH = REPO_ROOT / "tests" / "opinfo" / "expected_status.json"
DOCS_PATH = REPO_ROOT / "docs" / "ops.md"
RECOLLECT_HINT = "python tools/opinfo_sweep.py --collect --ops {ops}"


@dataclass
class StatusTable:
    """op key -> mode -> letters, with a note per (op, mode), and how the table was collected."""

    meta: dict[str, Any] = field(default_factory=dict)
    letters: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)

    @staticmethod
    def load(path: Path = TABLE_PATH) -> StatusTable:
        data = json.loads(Path(path).read_text())
        table = StatusTable(meta=dict(data.get("meta", {})))
        for key, entry in data["ops"].items():
            table.letters[key] = {mode: entry[mode] for mode in MODES if mode in entry}
            table.notes[key] = dict(entry.get("notes", {}))
        return table

    def save(self, path: Path = TABLE_PATH) -> None:
        """One op per line, keys sorted, so that a re-collect diffs readably."""
        lines = ["{", f'"meta": {json.dumps(self.meta, sort_keys=True)},', '"ops": {']
        keys = sorted(self.letters)
        for position, key in enumerate(keys):
            entry: dict[str, Any] = dict(self.letters[key])
            if self.notes.get(key):
                entry["notes"] = self.notes[key]
            comma = "," if position < len(keys) - 1 else ""
            lines.append(f"{json.dumps(key)}: {json.dumps(entry, sort_keys=True)}{comma}")
        lines += ["}", "}"]
        Path(path).write_text("\n".join(lines) + "\n")

    def record(self, result: ModeResult) -> None:
        self.letters.setdefault(result.key, {})[result.mode] = result.letters
        notes = self.notes.setdefault(result.key, {})
        if result.note:
            notes[result.mode] = result.note
        else:
            notes.pop(result.mode, None)

    def status(self, key: str, mode: str) -> str | None:
        letters = self.letters.get(key, {}).get(mode)
        return None if letters is None else op_status(letters)


def letter_changes(expected: str, got: str) -> list[tuple[int, str, str]]:
    """(sample index, expected letter, new letter) for every sample whose letter changed."""
    return [(i, e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]


def ci_subset(keys: Iterable[str], count: int, seed: int) -> list[str]:
    """A seeded choice of ``count`` keys (sorted), stable for a given key set and seed."""
    pool = sorted(keys)
    return sorted(random.Random(seed).sample(pool, min(count, len(pool))))


# ---- summary numbers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeSummary:
    """Counts for one mode over the whole table; ``counted`` excludes eager-fails and value-less ops."""

    mode: str
    swept: int
    eager_fails: int
    metadata_only: int
    statuses: Mapping[str, int]

    @property
    def counted(self) -> int:
        return sum(self.statuses.values())

    @property
    def pass_rate(self) -> float:
        return self.statuses.get("pass", 0) / self.counted if self.counted else 0.0


def summarize(table: StatusTable, mode: str) -> ModeSummary:
    statuses: Counter[str] = Counter()
    swept = eager_fails = metadata_only = 0
    for key, by_mode in table.letters.items():
        if mode not in by_mode:
            continue
        swept += 1
        status = op_status(by_mode[mode])
        if status in ("eager-fails", "n/a"):
            eager_fails += 1
        elif metadata_only_reason(key):
            metadata_only += 1
        else:
            statuses[status] += 1
    return ModeSummary(mode, swept, eager_fails, metadata_only, dict(statuses))


def sample_counts(letters: str) -> tuple[int, int]:
    """(passed, counted) samples."""
    counted = [x for x in letters if x not in (EAGER_FAILS, NOT_APPLICABLE)]
    return sum(x == PASS for x in counted), len(counted)


# ---- docs/ops.md ---------------------------------------------------------------------------------------


def _cell(letters: str | None) -> str:
    if letters is None:
        return ""
    status = op_status(letters)
    if status in ("eager-fails", "n/a"):
        return status
    passed, counted = sample_counts(letters)
    return f"{status} {passed}/{counted}"


def _summary_lines(table: StatusTable) -> list[str]:
    lines = ["| mode | OpInfos swept | eager backend fails | shape-only (uninitialized) | counted | pass | "
             "unsupported | mismatch | crash | pass rate |", "|---|---|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        s = summarize(table, mode)
        lines.append(
            f"| {mode} | {s.swept} | {s.eager_fails} | {s.metadata_only} | {s.counted} | {s.statuses.get('pass', 0)} | "
            f"{s.statuses.get('unsupported', 0)} | {s.statuses.get('mismatch', 0)} | {s.statuses.get('crash', 0)} | "
            f"{100 * s.pass_rate:.1f}% |"
        )
    return lines


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_ops_md(table: StatusTable) -> str:
    """The whole of ``docs/ops.md`` (generated; edit this function, not the file)."""
    meta = table.meta
    out = [
        "# Op coverage: PyTorch OpInfos through `torch.compile(backend=\"neuron\")`",
        "",
        "<!-- Generated by `python tools/opinfo_sweep.py --collect` (or `--docs`); do not edit by hand. -->",
        "",
        f"Every OpInfo in PyTorch's `op_db` that supports float32 on CPU (torch {meta.get('torch', '?')}), "
        f"each of its samples (at most {meta.get('max_samples') or 'all'} per op and mode) compiled with "
        f"`torch.compile(fn, backend=\"{meta.get('backend', 'neuron')}\", fullgraph=True, dynamic=False)` "
        f"(options {json.dumps(meta.get('options', {}))}) and compared with eager. "
        "See `docs/reliability.md` for the method.",
        "",
        "- **fwd**: float32 forward. **bwd**: float32 forward and gradients of all inputs (OpInfos with "
        "float32 autograd). **bf16**: bfloat16 forward (the elementwise/reduction set).",
        "- A cell reads `status passed/counted` samples. `pass`: every counted sample matches eager. "
        "`unsupported`: at least one sample is refused with `neuroncc.UnsupportedOpError` (and none is worse). "
        "`mismatch`: a silent wrong result. `crash`: any other exception. `eager-fails`: dynamo's own "
        "`eager` backend (fullgraph, static shapes) fails on every sample; not counted.",
        "- Samples where dynamo's `eager` backend fails are not counted for any op.",
        "",
        "## Summary",
        "",
        *_summary_lines(table),
        "",
        "Pass rate = pass / counted; counted excludes eager-fails and the shape-only ops below.",
        "",
        "## Random ops: compared by distribution",
        "",
        "neuroncc draws from its own generator (Philox 4x32-10), so values differ from eager's. These are "
        f"compiled and called {RANDOM_CALLS} times with the same seeds as eager; a sample passes when shapes "
        "and dtypes match and each output's and gradient's draws, pooled over the calls, pass a two-sample "
        f"Kolmogorov-Smirnov test against eager's (false-alarm rate {RANDOM_ALPHA:g} per result, critical "
        "value for one independent draw per call):",
        "",
        *[f"- `{key}`: {reason}" for key, reason in sorted(RANDOM_OPS.items())],
        "",
        "## Shape-only ops (uninitialized values)",
        "",
        "These are compiled and run, but only output shapes and dtypes are compared:",
        "",
        *[f"- `{key}`: {reason}" for key, reason in sorted(UNINITIALIZED_OPS.items())],
        "",
        "## Gaps: ops refused or failing, by reason",
        "",
        *_gap_lines(table),
        "",
        "## All OpInfos",
        "",
        "| op | fwd | bwd | bf16 | first failure |",
        "|---|---|---|---|---|",
    ]
    for key in sorted(table.letters):
        by_mode = table.letters[key]
        notes = table.notes.get(key, {})
        note = next((f"{m}: {notes[m]}" for m in MODES if m in notes and op_status(by_mode.get(m, "")) not in
                     ("pass", "eager-fails", "n/a")), "")
        if not note:
            note = next((f"{m}: {notes[m]}" for m in MODES if m in notes), "")
        cells = " | ".join(_cell(by_mode.get(m)) for m in MODES)
        out.append(f"| `{key}` | {cells} | {_escape(note[:160])} |")
    section = device_section()  # the device sweep's section (tools/opinfo_device_sweep.py) stays
    return "\n".join(out) + "\n" + (f"\n{section}" if section else "")


def _gap_lines(table: StatusTable) -> list[str]:
    """Non-passing (op, mode)s grouped by the first line of their failure."""
    groups: dict[str, list[str]] = {}
    for key in sorted(table.letters):
        for mode, letters in table.letters[key].items():
            if op_status(letters) in ("pass", "eager-fails", "n/a"):
                continue
            note = table.notes.get(key, {}).get(mode, "")
            reason = note.split(": ", 1)[1] if note.startswith("sample ") else note
            groups.setdefault(_reason_head(reason), []).append(f"{key} ({mode})")
    lines = []
    for reason, items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- {len(items)} x {_escape(reason)}: {', '.join(f'`{i}`' for i in items)}")
    return lines or ["- none"]


def _reason_head(reason: str) -> str:
    """The part of a failure that names its cause (exception type and the first clause of the message)."""
    head = reason.split(" | ", 1)[0]
    return head[:120]


# ---- the device sweep's table and section ------------------------------------------------------------

DEVICE_TABLE_PATH = REPO_ROOT / "tests" / "device" / "opinfo_status.json"
DEVICE_MARKER = "## On the neuron device (eager, per-op compiled)"


def device_table_path(dtype: str = "float32") -> Path:
    """The device sweep's table for ``dtype``: ``opinfo_status.json`` for float32, else ``opinfo_status_<dtype>.json``."""
    return DEVICE_TABLE_PATH if dtype == "float32" else DEVICE_TABLE_PATH.with_name(f"opinfo_status_{dtype}.json")


def device_op_statuses(table: StatusTable) -> dict[str, str]:
    """An OpInfo's status over all its modes: the worst mode's."""
    order = ["mismatch", "crash", "fallback", "device", "n/a", "eager-fails"]
    statuses = {}
    for key, modes in table.letters.items():
        found = [device_status(letters) for mode, letters in modes.items() if mode in DEVICE_MODES]
        statuses[key] = min(found, key=order.index) if found else "n/a"
    return statuses


def device_summary(table: StatusTable) -> dict[str, int]:
    counts = Counter(device_op_statuses(table).values())
    counted = counts["device"] + counts["fallback"] + counts["mismatch"] + counts["crash"]
    return {"swept": len(table.letters), "counted": counted, **{k: counts[k] for k in
            ("device", "fallback", "mismatch", "crash", "eager-fails", "n/a")}}


def device_section(table: StatusTable | None = None) -> str:
    """The markdown of the device section (empty when there is no table)."""
    if table is None:
        if not DEVICE_TABLE_PATH.exists():
            return ""
        table = StatusTable.load(DEVICE_TABLE_PATH)
    counts = device_summary(table)
    rate = 100.0 * counts["device"] / counts["counted"] if counts["counted"] else 0.0
    lines = [DEVICE_MARKER, "",
             "<!-- Generated by `python tools/opinfo_device_sweep.py --collect` (or `--docs`); do not edit by hand. -->",
             "",
             f"The same OpInfos run eagerly on `neuron` tensors (every sample, at most {table.meta.get('max_samples')} per "
             "op and mode, float32 forward and gradients) and compared with CPU eager: each aten op is compiled by "
             "neuroncc for its signature, or runs on CPU through the device's fallback. See docs/device.md.",
             "", "| OpInfos swept | counted | on the device | fall back (correct) | mismatch | crash | CPU fails | "
             "on-device rate |", "|---|---|---|---|---|---|---|---|",
             f"| {counts['swept']} | {counts['counted']} | {counts['device']} | {counts['fallback']} | "
             f"{counts['mismatch']} | {counts['crash']} | {counts['eager-fails']} | {rate:.1f}% |", "",
             "Letters: " + "; ".join(f"`{k}` {v}" for k, v in LETTERS.items()) + ".", ""]
    statuses = device_op_statuses(table)
    for status, title in (("mismatch", "Mismatches"), ("crash", "Crashes"),
                          ("fallback", "OpInfos with ops that fall back to CPU")):
        keys = sorted(k for k, s in statuses.items() if s == status)
        if not keys:
            continue
        lines += [f"### {title}", ""]
        for key in keys:
            modes = table.letters[key]
            notes = table.notes.get(key, {})
            detail = "; ".join(f"{mode} `{modes[mode]}`" + (f": {notes[mode]}" if notes.get(mode) else "")
                               for mode in DEVICE_MODES if mode in modes)
            lines.append(f"- `{key}`: {detail}")
        lines.append("")
    return "\n".join(lines)


def write_device_docs(table: StatusTable, path: Path = DOCS_PATH) -> Path:
    """Replace the device section of docs/ops.md (everything from :data:`DEVICE_MARKER` on)."""
    text = path.read_text() if path.exists() else ""
    head = text.split(DEVICE_MARKER)[0].rstrip() + "\n\n" if DEVICE_MARKER in text else text.rstrip() + "\n\n"
    path.write_text(head + device_section(table))
    return path
