"""Fusion legality and grouping on the dataflow graph (networkx), independent of how kernels are built.

Ops fall into kinds (:func:`op_kind`): *views* and *constants* are free and are re-materialized inside each
kernel that reads them, so they never join a group; *matmuls*, *opaque* ops (existing kernels, extern calls,
views that change the element type) and *barriers* (data-dependent writes) are anchors; everything else is *compute*. The group graph has one node
per group and an edge wherever a group reads what another computes (looking through views).

Grouping is greedy in program order:

1. a compute op joins the group of a compute producer when their iteration domains are compatible (the
   smaller number of elements divides the larger: a reduction's output feeding a broadcast back over its
   input, a bias over a matrix) and contracting the two groups leaves the graph acyclic;
2. a matmul absorbs each consumer group made only of elementwise ops and copies over at most its output's
   size (its epilogue: bias, activation, residual add, a relayout copy), under the same acyclicity condition;
   a group holds at most one matmul;
3. compute groups without a matmul that stream the same input (at least as large as their domains) merge
   when their domains are compatible and neither depends on the other, so the input is read once;
4. (horizontal) elementwise groups that read only the function's parameters and constants (sources of the
   group graph: nothing can depend on a path into them) merge when they iterate over the same shape, up to
   :data:`HORIZONTAL_MAX_OPS` ops per kernel: an optimizer step's per-parameter update chains become one
   kernel per parameter shape instead of one per parameter, as a fused multi-tensor kernel does in eager.

Acyclicity: contracting producer group ``a`` into consumer group ``b`` makes a cycle exactly when some other
path leads from ``a`` to ``b``; merging two groups with no path between them never does. The search for a
path is bounded by program order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from neuroncc.ir import REGISTRY, Category, Function, Op, Trait, Value

VIEW, CONSTANT, MATMUL, OPAQUE, BARRIER, COMPUTE = "view", "constant", "matmul", "opaque", "barrier", "compute"

#: The largest kernel horizontal fusion builds (ops in its region): bounds the size of one generated loop body.
HORIZONTAL_MAX_OPS = 500  # a policy bound on the loop body, not a hardware number


def op_kind(op: Op) -> str:
    if op.has(Trait.STRIDED_VIEW):
        return VIEW
    if op.has(Trait.REINTERPRET):
        return OPAQUE  # stays at the top level: kernels read f32 pairs, never c64
    category = REGISTRY.get(op.name).category
    if category is Category.CONSTANT:
        return CONSTANT
    if category is Category.MATMUL:
        return MATMUL
    if category in (Category.KERNEL, Category.EXTERN) or op.regions:
        return OPAQUE
    return BARRIER if op.has(Trait.INDEXED_WRITE) else COMPUTE  # data-dependent writes: a kernel of their own


def is_epilogue_op(op: Op) -> bool:
    """Ops a matmul kernel may apply to its output while it is hot: elementwise maps and copies."""
    return op.has(Trait.POINTWISE)


def domain_size(op: Op) -> int:
    """The number of points an op iterates over: its largest operand or result (for gathers, which read a
    few rows of a possibly huge table, the result and the indices)."""
    values = op.operands + op.results
    if REGISTRY.get(op.name).category is Category.INDEX and not op.has(Trait.INDEXED_WRITE):
        values = op.operands[1:] + op.results
    return max((v.type.numel for v in values), default=1)


def _horizontal_member(group: Group) -> bool:
    """A group horizontal fusion may merge: elementwise ops and copies only (no matmul, reduction, scatter)."""
    return all(op_kind(op) == COMPUTE and is_epilogue_op(op) for op in group.ops)


def _domain_shape(group: Group) -> tuple[int, ...]:
    """The shape a group iterates over: its largest result's (the first of that size)."""
    largest = max((r.type for op in group.ops for r in op.results), key=lambda t: t.numel)
    return largest.shape


def domains_compatible(a: int, b: int) -> bool:
    small, large = min(a, b), max(a, b)
    return small == 0 or large % small == 0


@dataclass
class Group:
    """Ops that will become one kernel (or one anchor op left at the top level)."""

    gid: int  # the position of the op the group started from (its key in the group graph)
    ops: list[Op] = field(default_factory=list)
    domain: int = 0

    @property
    def matmul(self) -> Op | None:
        return next((op for op in self.ops if op_kind(op) == MATMUL), None)

    @property
    def is_kernel(self) -> bool:
        """A group becomes a kernel unless it is one anchor op kept as it is."""
        return any(op_kind(op) in (COMPUTE, BARRIER) for op in self.ops)


class FusionPlanner:
    """Partition the non-free ops of ``fn`` into groups (see the module docstring)."""

    def __init__(self, fn: Function, *, epilogues: bool = True, horizontal: bool = True):
        # imported by the first fusion, not with the passes: a process whose programs all load from the compile
        # cache imports the passes (a compile's key names its pipeline) but never fuses, and networkx's import
        # (with its scan of installed entry points) was ~0.1 s of a warm start's first step (session 31 nir31)
        import networkx as nx

        self.nx = nx
        self.fn = fn
        self.position = {op: i for i, op in enumerate(fn.ops)}
        self.producers = fn.producers()
        self.nodes = [op for op in fn.ops if op_kind(op) not in (VIEW, CONSTANT)]
        self.group_of: dict[Op, int] = {}
        self.groups: dict[int, Group] = {}
        self.graph = nx.DiGraph()
        for op in self.nodes:
            gid = self.position[op]
            self.group_of[op] = gid
            self.groups[gid] = Group(gid, [op], domain_size(op))
            self.graph.add_node(gid, first=gid, last=gid)
        for op in self.nodes:
            for producer in self.producer_nodes(op):
                self.graph.add_edge(self.group_of[producer], self.group_of[op])
        self._fuse_compute()
        if epilogues:
            self._fuse_epilogues()
        self._fuse_siblings()
        if horizontal:
            self._fuse_horizontal()

    # ---- the dataflow graph seen through views ------------------------------------------------------

    def root_producer(self, value: Value) -> Op | None:
        """The node computing ``value`` (looking through views); None for parameters and constants."""
        op = self.producers.get(value)
        while op is not None and op_kind(op) == VIEW:
            op = self.producers.get(op.operands[0])
        return op if op is not None and op_kind(op) != CONSTANT else None

    def root_value(self, value: Value) -> Value:
        """The value ``value`` is a view of (itself when it is not a view)."""
        while (op := self.producers.get(value)) is not None and op_kind(op) == VIEW:
            value = op.operands[0]
        return value

    def producer_nodes(self, op: Op) -> list[Op]:
        found: list[Op] = []
        for value in op.operands:
            producer = self.root_producer(value)
            if producer is not None and producer not in found:
                found.append(producer)
        return found

    # ---- legality ----------------------------------------------------------------------------------

    def _has_other_path(self, source: int, target: int) -> bool:
        """Is there a path source -> ... -> target other than the direct edge?"""
        return self._reaches([s for s in self.graph.successors(source) if s != target], target)

    def _reaches(self, starts: list[int], target: int) -> bool:
        """Is ``target`` reachable from any of ``starts`` (a start equal to the target counts)?"""
        horizon = self.graph.nodes[target]["last"]
        stack = list(starts)
        seen = set(stack)
        while stack:
            node = stack.pop()
            if node == target:
                return True
            if self.graph.nodes[node]["first"] > horizon:
                continue  # starts after target ends: cannot lead back into it
            for succ in self.graph.successors(node):
                if succ not in seen:
                    seen.add(succ)
                    stack.append(succ)
        return False

    def _merge(self, keep: int, other: int) -> None:
        group, gone = self.groups[keep], self.groups.pop(other)
        group.ops = sorted(group.ops + gone.ops, key=self.position.__getitem__)
        group.domain = max(group.domain, gone.domain)
        for op in gone.ops:
            self.group_of[op] = keep
        first = min(self.graph.nodes[keep]["first"], self.graph.nodes[other]["first"])
        last = max(self.graph.nodes[keep]["last"], self.graph.nodes[other]["last"])
        self.nx.contracted_nodes(self.graph, keep, other, self_loops=False, copy=False)
        self.graph.nodes[keep].pop("contraction", None)
        self.graph.nodes[keep].update(first=first, last=last)

    def _try_merge(self, producer: int, consumer: int) -> bool:
        if producer == consumer or self._has_other_path(producer, consumer):
            return False
        self._merge(consumer, producer)
        return True

    # ---- the three greedy sweeps --------------------------------------------------------------------

    def _fuse_compute(self) -> None:
        for op in self.nodes:
            if op_kind(op) != COMPUTE:
                continue
            for producer in self.producer_nodes(op):
                if op_kind(producer) != COMPUTE:
                    continue
                mine, theirs = self.group_of[op], self.group_of[producer]
                if mine != theirs and domains_compatible(self.groups[mine].domain, self.groups[theirs].domain):
                    self._try_merge(theirs, mine)

    def _fuse_epilogues(self) -> None:
        users = self.fn.users()
        for op in self.nodes:
            if op_kind(op) != MATMUL or len(op.results) != 1:
                continue
            for consumer in self._consumer_nodes(op.result, users):
                group = self.groups[self.group_of[consumer]]
                epilogue = (group.matmul is None and all(is_epilogue_op(o) for o in group.ops)
                            and group.domain <= op.result.type.numel)
                if epilogue:
                    self._try_merge(self.group_of[op], group.gid)

    def _fuse_siblings(self) -> None:
        readers: dict[Value, list[Op]] = {}
        for op in self.nodes:
            if op_kind(op) == COMPUTE:
                for value in op.operands:
                    readers.setdefault(self.root_value(value), []).append(op)
        for value, ops in readers.items():
            for reader in ops[1:]:
                first, other = self.group_of[ops[0]], self.group_of[reader]
                a, b = self.groups[first], self.groups[other]
                if first == other or a.matmul is not None or b.matmul is not None:
                    continue
                if not domains_compatible(a.domain, b.domain) or value.type.numel < max(a.domain, b.domain):
                    continue
                if not self._reaches([first], other) and not self._reaches([other], first):
                    self._merge(first, other)

    def _fuse_horizontal(self) -> None:
        """Merge source groups of elementwise ops iterating over one shape (sweep 4 of the module docstring)."""
        open_groups: dict[tuple[int, ...], list[int]] = {}  # domain shape -> groups still taking members
        for gid in sorted(self.groups):
            group = self.groups.get(gid)
            if group is None or self.graph.in_degree(gid) or not _horizontal_member(group):
                continue
            shape = _domain_shape(group)
            candidates = open_groups.setdefault(shape, [])
            target = next((c for c in candidates
                           if len(self.groups[c].ops) + len(group.ops) <= HORIZONTAL_MAX_OPS), None)
            if target is None:
                candidates.append(gid)
            else:
                self._merge(target, gid)

    def _consumer_nodes(self, value: Value, users) -> list[Op]:
        found: list[Op] = []
        stack = [value]
        while stack:
            for user, _ in users.get(stack.pop(), []):
                if op_kind(user) == VIEW:
                    stack.append(user.result)
                elif user not in found:
                    found.append(user)
        return sorted(found, key=self.position.__getitem__)

    # ---- results -----------------------------------------------------------------------------------

    def ordered_groups(self) -> Sequence[Group]:
        """Groups in a topological order of the group graph, earliest first op first."""
        if not self.nx.is_directed_acyclic_graph(self.graph):
            raise AssertionError("fusion produced a cyclic group graph")
        order = self.nx.lexicographical_topological_sort(self.graph, key=lambda gid: self.graph.nodes[gid]["first"])
        return [self.groups[gid] for gid in order]
