"""A dependency-aware list schedule of a trace: when each instruction starts and finishes.

Model of one NeuronCore:

- TensorE, VectorE, ScalarE and GpSimdE each run one instruction at a time, in parallel with each
  other. An instruction takes the first idle gap of its engine that starts at or after its inputs are
  ready and is long enough for it; it may fill a gap left before instructions that come later in
  program order. That is the reordering NKI's compiler does when it schedules independent loop
  iterations (the hardware then runs each engine's stream in order).
- DMAs go to ``Target.dma_queues`` queues; a transfer takes the queue that frees up first. All queues
  share the core's DMA bandwidth, modelled as one fluid pipe: a transfer's bytes flow through the
  earliest free bandwidth at or after its start (later transfers can fill gaps left earlier), then the
  fixed per-transfer cost passes before it completes. Many transfers in flight hide that fixed cost.
- An instruction starts when its engine (queue) is free and its inputs are ready: after every earlier
  instruction whose region of the same tile overlaps its own as read-after-write, write-after-read or
  write-after-write, plus a semaphore hand-off (``Target.sync_ns``) when that producer ran on another
  engine.
- Reusing memory is a dependency too: a tile placed on bytes a released tile used waits for that tile's
  last access (``Allocate`` offsets in the trace). So a kernel that reuses one buffer serialises its
  load and compute, and one that alternates two buffers overlaps them.

Dependencies are tracked per tile as the latest finish time of each region read and written; a write
drops the entries its region contains, since anything that would wait on them waits on the write.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from neuroncc.nki import trace as tr
from neuroncc.nki.cost_model import instruction_cost
from neuroncc.nki.target import Target
from neuroncc.nki.trace import Engine

Region = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Timing:
    """When one instruction ran (ns from kernel start)."""

    index: int
    engine: Engine
    start_ns: float
    finish_ns: float
    queue: int = 0  # the DMA queue a transfer took (DMA instructions only)


@dataclass(slots=True)
class Schedule:
    """The schedule of a whole trace and what it adds up to."""

    timings: list[Timing] = field(default_factory=list)
    makespan_ns: float = 0.0
    busy_ns: dict[Engine, float] = field(default_factory=lambda: {e: 0.0 for e in Engine})
    counts: dict[Engine, int] = field(default_factory=lambda: {e: 0 for e in Engine})
    dma_bytes: int = 0
    tensor_flops: int = 0
    elements: int = 0
    peak_sbuf_bytes: int = 0
    peak_psum_bytes: int = 0


def _overlap(a_layout: tuple[int, ...], a: Region, b_layout: tuple[int, ...], b: Region) -> bool:
    if a_layout != b_layout:
        return True  # views through different reshapes: assume they touch the same bytes
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b))


def _contains(outer: Region, inner: Region) -> bool:
    return all(lo_o <= lo_i and hi_i <= hi_o for (lo_o, hi_o), (lo_i, hi_i) in zip(outer, inner))


class _Tile:
    """Per-tile dependency state: the latest finish time of each region read and written so far."""

    __slots__ = ("fence", "last_use", "reads", "writes", "buffer", "offset", "size")

    def __init__(self, event: tr.Allocate, fence: float):
        self.fence = fence  # last access to the bytes this tile reuses
        self.last_use = fence
        self.reads: dict[tuple[tuple[int, ...], Region], tuple[float, Engine]] = {}
        self.writes: dict[tuple[tuple[int, ...], Region], tuple[float, Engine]] = {}
        self.buffer, self.offset, self.size = event.buffer, event.offset, event.size

    def ready_time(self, operand: tr.Operand, engine: Engine, sync_ns: float) -> float:
        ready = self.fence
        tables = (self.writes, self.reads) if operand.writes else (self.writes,)
        for table in tables:
            for (layout, region), (finish, producer) in table.items():
                if finish + sync_ns > ready and _overlap(layout, region, operand.layout, operand.region):
                    ready = max(ready, finish + (sync_ns if producer is not engine else 0.0))
        return ready

    def record(self, operand: tr.Operand, finish: float, engine: Engine) -> None:
        key = (operand.layout, operand.region)
        self.last_use = max(self.last_use, finish)
        if operand.writes:
            # Everything inside this write's region now happens-before it: forget those entries.
            for table in (self.writes, self.reads):
                covered = [k for k, (f, _) in table.items()
                           if k[0] == operand.layout and f <= finish and _contains(operand.region, k[1])]
                for k in covered:
                    del table[k]
            self.writes[key] = (finish, engine)
        else:
            previous = self.reads.get(key)
            if previous is None or previous[0] <= finish:
                self.reads[key] = (finish, engine)


class _Timeline:
    """Busy intervals of one resource; new work may fill idle gaps left before later work.

    Engines use it non-splittably: an instruction takes the first idle gap long enough for it at or
    after its ready time. The DMA bandwidth uses it splittably (a fluid): a transfer's bytes flow
    through whatever idle bandwidth there is from its start.
    """

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []

    def reserve(self, earliest: float, amount: float, splittable: bool) -> tuple[float, float]:
        """Occupy ``amount`` ns from ``earliest`` on; return (start, end) of the occupied span."""
        t, remaining = earliest, amount
        i = bisect.bisect_right(self._ends, t)
        pieces: list[tuple[float, float]] = []
        while remaining > 1e-9:
            if i < len(self._starts) and self._starts[i] <= t:  # inside a busy interval: skip past it
                t = self._ends[i]
                i += 1
                continue
            gap_end = self._starts[i] if i < len(self._starts) else float("inf")
            if not splittable and gap_end - t < remaining:  # too short for the whole instruction
                t = gap_end
                continue
            used = min(remaining, gap_end - t)
            pieces.append((t, t + used))
            remaining -= used
            t += used
        for start, end in pieces:
            self._insert(start, end)
        return (pieces[0][0], t) if pieces else (earliest, earliest)

    def _insert(self, start: float, end: float) -> None:
        i = bisect.bisect_left(self._starts, start)
        if i > 0 and self._ends[i - 1] >= start:  # merge with the interval before
            i -= 1
            start = self._starts[i]
            end = max(end, self._ends[i])
            del self._starts[i], self._ends[i]
        while i < len(self._starts) and self._starts[i] <= end:  # and with those it now touches
            end = max(end, self._ends[i])
            del self._starts[i], self._ends[i]
        self._starts.insert(i, start)
        self._ends.insert(i, end)

    def forget_before(self, time: float) -> None:
        """Nothing will be placed before ``time`` any more; drop the history before it."""
        keep = bisect.bisect_right(self._ends, time)
        if keep > 64:
            del self._starts[:keep], self._ends[:keep]


def schedule(events: list[tr.Event] | tuple[tr.Event, ...], target: Target) -> Schedule:
    """Schedule a trace on ``target`` (see the module docstring for the model)."""
    result = Schedule()
    tiles: dict[int, _Tile] = {}
    released: dict[str, list[tuple[int, int, float]]] = {"sbuf": [], "psum": []}  # (lo, hi, last use)
    live = {"sbuf": 0, "psum": 0}
    engines = {e: _Timeline() for e in Engine if e is not Engine.DMA}
    queue_free = [0.0] * target.dma_queues
    bandwidth = _Timeline()
    fixed_ns = target.dma_fixed_us * 1000.0

    for event in events:
        if isinstance(event, tr.Allocate):
            fence = 0.0
            if event.buffer in released:
                lo, hi = event.offset, event.offset + event.size
                reused = released[event.buffer]
                fence = max((t for a, b, t in reused if a < hi and lo < b), default=0.0)
                released[event.buffer] = [(a, b, t) for a, b, t in reused if not (lo <= a and b <= hi)]
                live[event.buffer] += event.size
                result.peak_sbuf_bytes = max(result.peak_sbuf_bytes, live["sbuf"])
                result.peak_psum_bytes = max(result.peak_psum_bytes, live["psum"])
            tiles[event.tile] = _Tile(event, fence)
            continue
        if isinstance(event, tr.Release):
            tile = tiles.pop(event.tile, None)
            if tile is not None and tile.buffer in released:
                released[tile.buffer].append((tile.offset, tile.offset + tile.size, tile.last_use))
                live[tile.buffer] -= tile.size
            continue

        cost = instruction_cost(event, target)
        unit = event.engine
        ready = 0.0
        for operand in event.operands:
            ready = max(ready, tiles[operand.tile].ready_time(operand, unit, target.sync_ns))
        queue = 0
        if unit is Engine.DMA:
            queue = min(range(len(queue_free)), key=queue_free.__getitem__)
            start = max(ready, queue_free[queue])
            finish = bandwidth.reserve(start, cost.ns, splittable=True)[1] + fixed_ns
            queue_free[queue] = finish
            bandwidth.forget_before(min(queue_free))
        else:
            start, finish = engines[unit].reserve(ready, cost.ns, splittable=False)
        for operand in event.operands:
            tiles[operand.tile].record(operand, finish, unit)

        result.timings.append(Timing(event.index, unit, start, finish, queue))
        result.makespan_ns = max(result.makespan_ns, finish)
        result.busy_ns[unit] += cost.ns
        result.counts[unit] += 1
        result.dma_bytes += cost.dma_bytes
        result.tensor_flops += cost.flops
        result.elements += cost.elements
    return result
