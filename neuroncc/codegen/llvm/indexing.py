"""Index arithmetic and loops of the kernel emitter (a mixin of :class:`~neuroncc.codegen.llvm.emit.KernelEmitter`).

Indices are Python ints (which fold) or i64 IR values. Beside each IR index the emitter keeps its affine form
(:mod:`affine`), so that ``div``/``rem`` by a constant fold to affine arithmetic when the loop counters allow
it, and emits ``udiv``/``urem`` only on what does not fold (usually loop-invariant).

Loops with a static trip count are *logical loops*: one is emitted as a nest of factor loops when its index is
divided somewhere at a multiple of an inner factor (a reshape that splits the dim: ``c`` over 1536 used as
``(c // 512, c % 512)`` runs as ``c0`` over 3 and ``c1`` over 512), and a small outer factor is unrolled when
it indexes a constant bool mask (a one-hot ``where`` then reads only its piece). The phase's parallel loop is
cut into digits computed once per iteration, and a digit that indexes such a mask is switched on. Where to cut
and what to unroll is learned while emitting: a division that does not fold, or a mask read at a small
counter, records a *wish* keyed by the loop's position in the phase, and the emitter re-emits the phase with
its wishes granted (at most ``ROUNDS`` times). Every fold is exact whatever the loop structure, so wishes only
affect speed.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.affine import Affine, Var, fold_divmod, split_wishes
from neuroncc.codegen.llvm.launch_plan import FailedCheck
from neuroncc.codegen.llvm.scalars import I1, I32, I64

#: Index comparisons folded when both sides are Python ints.
_COMPARISONS = {"<": operator.lt, ">=": operator.ge, "==": operator.eq}
#: Emissions of one phase at most (each grants the wishes of the previous one; a reshape chain that splits a
#: dim twice, 1536 -> 3 x 512 -> 3 x 8 x 64, needs three).
ROUNDS = 4
#: Loops of at most this many iterations that index a constant bool mask are unrolled ...
UNROLL_MAX = 4
#: ... while the unrolled copies of one phase's body stay at most this many.
UNROLL_PRODUCT_MAX = 8


class IndexArithmetic:
    """Index arithmetic, affine forms and (factored, unrolled) loops; see the module docstring."""

    b: ir.IRBuilder
    memo: list[dict]  # scopes of values generated so far (index -> IR value), innermost last

    @contextmanager
    def fresh_values(self) -> Iterator[None]:
        """A scope whose generated values are not reused after it (a loop body, one side of a branch)."""
        self.memo.append({})
        try:
            yield
        finally:
            self.memo.pop()

    def _reset_indexing(self) -> None:
        """Per emission of a phase: forget forms and loop positions (granted wishes stay)."""
        self._forms: dict[int, tuple[ir.Value, Affine]] = {}
        self._serial = 0
        self._frames: list[list[Any]] = [[("phase",), 0]]  # [loop key, children so far] of the open loop bodies
        self._active: list[Var] = []  # counters of the open IR loops, innermost last
        self._ir_loops = 0  # IR loops emitted so far (a loop whose body adds none is innermost)
        self._parallel_keys: set[Any] = set()  # keys of the phase's parallel loop
        self.wishes: set[tuple[str, Any, int]] = set()

    def _reset_wishes(self) -> None:
        """Per phase: no loop is cut or unrolled until a wish asks for it."""
        self.cuts: dict[Any, set[int]] = {}
        self.unrolled: set[tuple[Any, int]] = set()
        self.unroll_extents: dict[tuple[Any, int], int] = {}

    def grant_wishes(self) -> bool:
        """Apply this emission's wishes to the next; False when there is nothing new (the emission stands)."""
        changed = False
        for kind, key, amount in sorted(self.wishes, key=repr):
            if kind == "cut" and amount not in self.cuts.get(key, set()):
                self.cuts.setdefault(key, set()).add(amount)
                changed = True
            elif kind == "unroll" and (key, amount) not in self.unrolled:
                # copies multiply only along one nest: sibling loops (a map and a column sum of one row) do not
                copies = math.prod(self.unroll_extents[u] for u in self.unrolled if _nested(u[0], key))
                if copies * self.unroll_extents[(key, amount)] <= UNROLL_PRODUCT_MAX:
                    self.unrolled.add((key, amount))
                    changed = True
        return changed

    # ---- forms --------------------------------------------------------------------------------------------

    def _new_var(self, value: Any, **bounds: Any) -> Var:
        self._serial += 1
        return Var(value, self._serial, **bounds)

    def memoized(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """What was generated for ``key`` in the current memo scope or an enclosing one, else ``make()``,
        remembered in the current scope (so code on one side of a branch is not reused after it)."""
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        value = make()
        self.memo[-1][key] = value
        return value

    def form(self, i: Any) -> Affine:
        """The affine form of index ``i`` (an opaque var for an IR value computed elsewhere)."""
        if isinstance(i, int):
            return Affine((), i)
        if isinstance(i, ir.Constant):
            return Affine((), int(i.constant))
        known = self._forms.get(id(i))
        if known is not None and known[0] is i:
            return known[1]
        form = Affine.of(self._new_var(i))
        self._forms[id(i)] = (i, form)
        return form

    def _register(self, value: ir.Value, form: Affine) -> ir.Value:
        self._forms[id(value)] = (value, form)
        return value

    def materialize(self, form: Affine) -> Any:
        """An index with ``form``: an int, a var's own value, or mul/add instructions (shared in scope)."""
        if not form.terms:
            return form.const
        if form.const == 0 and len(form.terms) == 1 and form.terms[0][1] == 1:
            return form.terms[0][0].value
        # the form's fields, not the form: a tuple of vars (identity-hashed) and ints hashes in C, where the
        # dataclass's __hash__ is a Python call for every memo scope looked in (~7000 a compile of f2)
        key = ("affine", form.terms, form.const)
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        # Built as ((t1 + t2) + t3) + const, each term and each partial sum itself a memoized form: indices of
        # one loop body share their terms (x*512 in both an input's and an output's offset) instead of
        # repeating the mul/add instructions (LLVM would merge them, but building and printing them is the
        # emitter's cost).
        if form.const:
            total = self.b.add(self.materialize(Affine(form.terms)), self.ir_index(form.const), flags=("nsw",))
        elif len(form.terms) > 1:
            total = self.b.add(self.materialize(Affine(form.terms[:-1])), self.materialize(Affine(form.terms[-1:])),
                               flags=("nsw",))
        else:
            var, coef = form.terms[0]
            total = self.b.mul(var.value, self.ir_index(coef), flags=("nsw",))
        self.memo[-1][key] = total
        return self._register(total, form)

    # ---- index arithmetic (folds Python ints and affine forms) ---------------------------------------------

    def ir_index(self, i: Any) -> ir.Value:
        if isinstance(i, int):
            if i not in self._constants:
                self._constants[i] = ir.Constant(I64, i)
            return self._constants[i]
        return i

    def add(self, a: Any, c: Any) -> Any:
        if isinstance(a, int) and isinstance(c, int):
            return a + c
        return self.materialize(self.form(a) + self.form(c))

    def sub(self, a: Any, c: Any) -> Any:
        if isinstance(a, int) and isinstance(c, int):
            return a - c
        return self.materialize(self.form(a) - self.form(c))

    def mul(self, a: Any, n: int) -> Any:
        if isinstance(a, int):
            return a * n
        return self.materialize(self.form(a).scale(n))

    def div(self, a: Any, n: int) -> Any:
        """Floor division of a non-negative index by a positive constant."""
        if isinstance(a, int):
            return a // n
        return a if n == 1 else self._divmod(a, n, want_quotient=True)

    def rem(self, a: Any, n: int) -> Any:
        if isinstance(a, int):
            return a % n
        return 0 if n == 1 else self._divmod(a, n, want_quotient=False)

    def _divmod(self, a: Any, n: int, want_quotient: bool) -> Any:
        x = self.form(a)
        fold = fold_divmod(x, n) if n > 0 else None
        if fold is None:  # a possibly negative index (never divided in practice): plain unsigned division
            return self._opaque_divmod(self.ir_index(a), n, 1, want_quotient)
        high = fold.high
        # Cutting a static loop makes the division fold per element: wished now. Cutting the parallel loop
        # only moves a per-iteration division into its digits, so it is wished only if the result turns out
        # to index a constant mask (the digit may then be switched on, see ``wish_unrolled``).
        deferred = []
        for key, cut in split_wishes(high, n):
            if key in self._parallel_keys:
                deferred.append(("cut", key, cut))
            else:
                self.wishes.add(("cut", key, cut))
        if not high.terms:
            part: Any = high.const // n if want_quotient else high.const % n
            extra = Affine((), part)
        else:
            value = self._opaque_divmod(self.ir_index(self.materialize(high)), n, high.alignment, want_quotient,
                                        tuple(deferred))
            extra = self.form(value)
        result = (fold.quotient if want_quotient else fold.low) + extra
        return self.materialize(result)

    def _opaque_divmod(self, value: ir.Value, n: int, alignment: int, want_quotient: bool,
                       origin: tuple = ()) -> Any:
        """udiv/urem of an IR index known to be a multiple of ``alignment`` (shared in scope)."""
        if n <= 0:  # a zero-size dim's stride: never executed
            return self.b.udiv(value, self.ir_index(n)) if want_quotient else self.b.urem(value, self.ir_index(n))
        if not want_quotient and alignment % n == 0:
            return 0
        key = ("udiv" if want_quotient else "urem", id(value), n)
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        m = math.gcd(alignment, n)
        dividend = self.form(value)  # kept with the result: x // n * n + x % n is x again (affine._recombine)
        if want_quotient:
            exact = ("exact",) if alignment % n == 0 else ()
            result = self.b.udiv(value, self.ir_index(n), flags=exact)
            self._register(result, Affine.of(self._new_var(result, lo=0, align=alignment // n if exact else 1,
                                                           origin=origin, divided=(dividend, n, True, bool(exact)))))
        else:  # a multiple of m below n
            result = self.b.urem(value, self.ir_index(n))
            self._register(result, Affine.of(self._new_var(result, lo=0, hi=n - m, align=m, origin=origin,
                                                           divided=(dividend, n, False, False))))
        self.memo[-1][key] = result
        return result

    def block_range(self, index: Any, block: int, n: int) -> tuple[Any, Any]:
        """[lo, hi) of block ``index`` of a dim of ``n`` elements in blocks of ``block``. An exact block end
        keeps the block's length static when the blocks divide the dim (see :meth:`loop`)."""
        lo = self.mul(index, block)
        return lo, self.add(lo, block) if n % block == 0 else self.min(self.add(lo, block), n)

    def digits(self, flat: Any, counts: tuple[int, ...]) -> list[Any]:
        """The indices of the flat (row-major) position ``flat`` in a grid of ``counts``."""
        outer: list[Any] = [0] * len(counts)
        remaining: Any = flat
        for d in range(len(counts) - 1, -1, -1):
            outer[d] = self.rem(remaining, counts[d]) if d else remaining
            remaining = self.div(remaining, counts[d])
        return outer

    def min(self, a: Any, c: Any) -> Any:
        if isinstance(a, int) and isinstance(c, int):
            return min(a, c)
        a, c = self.ir_index(a), self.ir_index(c)
        return self.b.select(self.b.icmp_signed("<", a, c), a, c)

    def _compare(self, predicate: str, a: Any, c: Any) -> ir.Value:
        if isinstance(a, int) and isinstance(c, int):
            return ir.Constant(I1, int(_COMPARISONS[predicate](a, c)))
        return self.b.icmp_signed(predicate, self.ir_index(a), self.ir_index(c))

    def lt(self, a: Any, c: Any) -> ir.Value:
        return self._compare("<", a, c)

    def ge(self, a: Any, c: Any) -> ir.Value:
        return self._compare(">=", a, c)

    def eq(self, a: Any, c: Any) -> ir.Value:
        return self._compare("==", a, c)

    def clamp(self, a: Any, lo: int, hi: int | None) -> Any:
        if isinstance(a, int):
            return max(lo, a) if hi is None else min(max(lo, a), hi)
        b = self.b
        out = b.select(b.icmp_signed("<", a, self.ir_index(lo)), self.ir_index(lo), a)
        if hi is not None:
            out = b.select(b.icmp_signed(">", out, self.ir_index(hi)), self.ir_index(hi), out)
        return out

    def checked_index(self, raw: ir.Value, size: int) -> ir.Value:
        """A data-dependent index: negative counts from the end; out of range sets the error flag, clamps."""
        b = self.b
        wrapped = b.select(b.icmp_signed("<", raw, ir.Constant(I64, 0)), b.add(raw, ir.Constant(I64, size)), raw)
        bad = b.or_(b.icmp_signed("<", wrapped, ir.Constant(I64, 0)),
                    b.icmp_signed(">=", wrapped, ir.Constant(I64, size)))
        self.fail_if(bad, FailedCheck.INDEX)
        return self.clamp(wrapped, 0, max(size - 1, 0))

    def fail_if(self, condition: ir.Value, check: FailedCheck) -> None:
        """Where ``condition`` holds, set the kernel's error flag to ``check`` (the launcher raises after the
        kernel): one store on an unlikely branch."""
        with self.b.if_then(condition, likely=False):
            self.b.store(ir.Constant(I32, int(check)), self.ptrs[self.plan.error_slot])

    # ---- loops ---------------------------------------------------------------------------------------------

    def _ir_loop(self, lo: Any, hi: Any, body: Any) -> ir.Value:
        """for i in [lo, hi): body(i) as IR, with a fresh memo scope for values computed inside."""
        b = self.b
        lo, hi = self.ir_index(lo), self.ir_index(hi)
        pre = b.block
        head = b.append_basic_block("loop")
        inner = b.append_basic_block("body")
        done = b.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", i, hi), inner, done)
        b.position_at_end(inner)
        blocks, loops = len(b.function.blocks), self._ir_loops
        with self.fresh_values():
            body(i)
        i.add_incoming(b.add(i, ir.Constant(I64, 1), flags=("nsw",)), b.block)
        latch = b.branch(head)
        if self._ir_loops == loops:  # innermost
            self.innermost_loop_emitted(latch, [inner] + b.function.blocks[blocks:])
        self._ir_loops += 1
        b.position_at_end(done)
        return i

    def innermost_loop_emitted(self, latch: ir.Instruction, blocks: list[ir.Block]) -> None:
        """An innermost loop was emitted: its back-edge branch ``latch`` and its body's ``blocks`` (the emitter's
        loop hints: ``loop_hints.py``)."""

    def _static_extent(self, lo: Any, hi: Any) -> int | None:
        if isinstance(lo, int) and isinstance(hi, int):
            return hi - lo
        difference = self.form(hi) - self.form(lo)
        return None if difference.terms else difference.const

    def _open_loop(self, body: Any) -> tuple[Any, Any]:
        """The key of a new logical loop (its position among its parent body's loops, which unrolled copies
        of the parent share) and ``body`` wrapped to open a frame for the loops inside it."""
        parent = self._frames[-1]
        key = (parent[0], parent[1])
        parent[1] += 1

        def enter(i: Any) -> None:
            self._frames.append([key, 0])
            body(i)
            self._frames.pop()

        return key, enter

    def _factors(self, key: Any, extent: int) -> list[tuple[int, int]]:
        """(stride, size) of the loop's factors, outermost first: its granted cuts that form a divisor chain."""
        strides = [1]
        for cut in sorted(self.cuts.get(key, ())):
            if extent % cut == 0 and 1 < cut < extent and cut % strides[-1] == 0:
                strides.append(cut)
        sizes = [(strides[k + 1] if k + 1 < len(strides) else extent) // s for k, s in enumerate(strides)]
        return list(reversed(list(zip(strides, sizes))))

    def loop(self, lo: Any, hi: Any, body: Any) -> None:
        """for i in [lo, hi): body(i). A loop with a static trip count runs as its factor loops (cut where
        wished), the wished small outer factors unrolled; its counter's form is known to the arithmetic."""
        key, enter = self._open_loop(body)
        extent = self._static_extent(lo, hi)
        if extent is None or extent < 2:
            self._ir_loop(lo, hi, enter)
            return
        base = self.form(lo)
        factors = self._factors(key, extent)

        def level(k: int, index: Affine) -> None:
            if k == len(factors):
                enter(self.materialize(index))
                return
            stride, size = factors[k]
            if (key, stride) in self.unrolled:
                for j in range(size):
                    with self.fresh_values():
                        level(k + 1, index + Affine((), j * stride))
                return

            def counter(i: ir.Value) -> None:
                var = self._new_var(i, lo=0, hi=size - 1, key=key, stride=stride, extent=size)
                self._register(i, Affine.of(var))
                self._active.append(var)
                level(k + 1, index + Affine.of(var).scale(stride))
                self._active.pop()

            self._ir_loop(0, size, counter)

        level(0, base)

    def outer_loop(self, start: ir.Value, end: ir.Value, extent: int, body: Any) -> None:
        """The phase's parallel loop over [start, end) of its ``extent`` outer iterations. Its counter is
        known to lie in [0, extent): where it is divided, its digits are computed once per iteration (the
        counter is cut like a static loop), and a wished small digit is unrolled by a switch on its value,
        each case emitting ``body`` with that digit a constant (a column block's piece of a one-hot mask)."""
        key, enter = self._open_loop(body)
        self._parallel_keys.add(key)
        if extent < 2:
            self._ir_loop(start, end, enter)
            return

        def iteration(flat: ir.Value) -> None:
            digits: list[tuple[Var, int]] = []
            for k, (stride, size) in enumerate(self._factors(key, extent)):
                digit = self.b.udiv(flat, self.ir_index(stride)) if stride > 1 else flat
                if k > 0:  # below the outermost digit
                    digit = self.b.urem(digit, self.ir_index(size))
                var = self._new_var(digit, lo=0, hi=size - 1, key=key, stride=stride, extent=size)
                self._register(digit, Affine.of(var))
                digits.append((var, stride))
            switched = [var for var, stride in digits if (key, stride) in self.unrolled]

            def versioned(fixed: dict[Var, int]) -> None:
                form = Affine()
                for var, stride in digits:
                    form = form + (Affine((), fixed[var]) if var in fixed else Affine.of(var)).scale(stride)
                self._register(flat, form)
                enter(flat)

            self._switch(switched, {}, versioned)

        self._ir_loop(start, end, iteration)

    def _switch(self, digits: list[Var], fixed: dict[Var, int], body: Any) -> None:
        """body(fixed) once per combination of the digits' values (IR: a switch per digit)."""
        if not digits:
            body(fixed)
            return
        var, rest = digits[0], digits[1:]
        size = var.extent
        b = self.b
        done = b.append_basic_block("switched")
        cases = [b.append_basic_block(f"case{j}") for j in range(size)]
        switch = b.switch(var.value, cases[-1])  # the digit is below size: the last value is the default
        for j, case in enumerate(cases):
            if j + 1 < size:
                switch.add_case(ir.Constant(I64, j), case)
            b.position_at_end(case)
            with self.fresh_values():
                self._switch(rest, {**fixed, var: j}, body)
            b.branch(done)
        b.position_at_end(done)

    def wish_unrolled(self, offset: Affine) -> None:
        """A constant mask is read at ``offset``: wish small outer loop counters in it unrolled (the read then
        folds to a constant per copy, and a ``where`` on it to one of its operands), never the innermost open
        loop (that one vectorizes); a division result in it wishes the cut that makes it a counter."""
        for var, _ in offset.terms:
            self.wishes.update(var.origin)
            if var.key is not None and var.extent <= UNROLL_MAX and self._active and var is not self._active[-1]:
                self.wishes.add(("unroll", var.key, var.stride))
                self.unroll_extents[(var.key, var.stride)] = var.extent

    def nest(self, ranges: list[tuple[Any, Any]], body: Any, prefix: list | None = None) -> None:
        """Nested loops over ``ranges`` (outermost first; ``(i, None)`` is a fixed index); body gets the index."""
        prefix = list(prefix or [])
        if not ranges:
            body(prefix)
            return
        (lo, hi), rest = ranges[0], ranges[1:]
        if hi is None:  # a fixed index (an outer dim of the phase)
            self.nest(rest, body, prefix + [lo])
            return
        if isinstance(lo, int) and isinstance(hi, int) and hi - lo == 1:
            self.nest(rest, body, prefix + [lo])  # a size-1 dim needs no loop
            return
        self.loop(lo, hi, lambda i: self.nest(rest, body, prefix + [i]))


def _nested(a: Any, b: Any) -> bool:
    """Whether loop keys ``a`` and ``b`` are one loop or one lies inside the other (a key is (parent key,
    position in the parent's body); the phase's frame is ("phase",))."""
    return a == b or _inside(a, b) or _inside(b, a)


def _inside(inner: Any, outer: Any) -> bool:
    while len(inner) == 2:
        inner = inner[0]
        if inner == outer:
            return True
    return False
