"""Which ops ran on eager PyTorch during an evaluation, from every source that counts them.

The sources: the front end's fallback mode (``torch.compile(..., options={"fallback": "cpu"})``: the ops left
outside the compiled partitions, counted per graph node when compiled and per call when run, with the user's
source line of each node), and every counter source added to ``neuroncc.stats`` (the ``neuron`` device's CPU
fallbacks, counted per call). :class:`FallbackSnapshot` reads every source before and after the evaluation and
reports the difference, so an evaluation never resets the process-wide counters others read.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuroncc.evaluation.report import FallbackOp
from neuroncc.frontend import stats
from neuroncc.frontend.profiling import FALLBACK_CALLS


@dataclass(frozen=True)
class FallbackSnapshot:
    graph_nodes: dict[str, int]
    graph_calls: dict[str, int]
    source_calls: dict[str, dict[str, int]]  # source name -> op -> calls

    @staticmethod
    def take() -> FallbackSnapshot:
        by_source = stats.fallback_ops_by_source()
        nodes = by_source.pop("graph")
        return FallbackSnapshot(nodes, dict(FALLBACK_CALLS.calls), by_source)

    def since(self) -> list[FallbackOp]:
        """The fallback ops counted after this snapshot was taken, most called first."""
        now = FallbackSnapshot.take()
        sites = stats.get_fallback_sites()
        found = []
        for op in sorted(set(now.graph_nodes) | set(now.graph_calls)):
            nodes = now.graph_nodes.get(op, 0) - self.graph_nodes.get(op, 0)
            calls = now.graph_calls.get(op, 0) - self.graph_calls.get(op, 0)
            if nodes or calls:
                found.append(FallbackOp(op, nodes, calls, tuple(sites.get(op, ())), "graph"))
        for source, calls_now in now.source_calls.items():
            before = self.source_calls.get(source, {})
            for op, count in sorted(calls_now.items()):
                if count - before.get(op, 0) > 0:
                    found.append(FallbackOp(op, 0, count - before.get(op, 0), (), source))
        return sorted(found, key=lambda f: (-f.calls, f.op))
