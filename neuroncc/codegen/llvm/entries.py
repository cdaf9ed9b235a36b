"""The entry points of phases, as LLVM IR text: ``{symbol}`` (each phase's) and ``neuroncc_team`` (OpenMP's).

The phase entry is fixed boilerplate around the phase's loop nest (``{symbol}.body``, built by :mod:`emit`):
writing it as text costs a fraction of building it instruction by instruction with llvmlite objects and
printing it back. The OpenMP team's entry is one function per process (:mod:`team_entry`), which calls the
phase through a pointer in its task: a copy per phase module was a fifth of every kernel's LLVM time (its O3
pipeline and code generation), for code that runs once per chunk of a parallel loop.
"""

from __future__ import annotations

from llvmlite import ir

#: Named metadata on a phase module whose loops are a graph's arithmetic bulk (the generated matrix products,
#: ``small_matmul.py``): it compiles optimized at once even where a torch.compile graph's other
#: tier-independent modules start at the quick tier (``jit.KernelCompiler``). Quick code ran the classifier's
#: training step ~3x slower (Zen 4: 13 ms against 4.5 with its products generated) until the optimized build
#: replaced it, a second or more later.
OPTIMIZE_FIRST_METADATA = "neuroncc.optimize_first"


def mark_optimize_first(module: ir.Module) -> None:
    """Ask for ``module`` to be compiled optimized from the start (:data:`OPTIMIZE_FIRST_METADATA`)."""
    module.add_named_metadata(OPTIMIZE_FIRST_METADATA)


def optimize_first(text: str) -> bool:
    """Whether the LLVM module ``text`` asks to be compiled optimized from the start."""
    return f"!{OPTIMIZE_FIRST_METADATA} =" in text

from neuroncc.codegen.llvm.scalars import I64, PTR, VOID
from neuroncc.hardware.host import target_cpu

#: fdivs flagged arcp (polynomial math, true division) may use the hardware reciprocal estimate plus one
#: Newton step: ~1 ulp, several times the throughput of vdivps. The square-root estimate stays off: with it,
#: x / sqrt(y) becomes x * rsqrt-estimate(y), whose Newton step is NaN at y = 0 and y = inf (eager: +-inf and
#: 0) and -inf for denormal y (found by the fuzzer).
RECIPROCAL_ESTIMATES = '"reciprocal-estimates"="vec-divf:1,divf:1,!vec-sqrtf,!sqrtf"'


def vector_width_attribute(vector_width: int) -> str | None:
    """The function attribute that holds the loop and SLP vectorizers to ``vector_width`` float32 lanes (the
    kernel's tile decision), or None when that is no narrower than the host's widest vectors: LLVM's own
    choice for the CPU then stands."""
    bits = vector_width * 32
    if not vector_width or bits >= target_cpu().vector_bits:
        return None
    return f'"prefer-vector-width"="{bits}"'


class FunctionText(ir.Function):
    """A function of an llvmlite module whose definition is given as LLVM IR text."""

    def __init__(self, module: ir.Module, ftype: ir.FunctionType, name: str, text: str):
        super().__init__(module, ftype, name)
        self.text = text

    def descr(self, buf: list[str]) -> None:
        buf.append(self.text)


def add_phase_entry(module: ir.Module, symbol: str, n_args: int, attributes: tuple[str, ...] = ()) -> FunctionText:
    """``void {symbol}(ptr args, i64 start, i64 end)``: loads the ``n_args`` buffer pointers from ``args`` and
    runs outer iterations [start, end) of the phase (``{symbol}.body``, which is inlined here, so it carries the
    body's string ``attributes`` too). ``noinline``: the loop nest exists once, in this function, whoever calls
    it (the launcher, or the team entry through a pointer)."""
    extra = "".join(f" {attribute}" for attribute in attributes)
    lines = [f'define void @"{symbol}"(ptr %args, i64 %start, i64 %end) {RECIPROCAL_ESTIMATES}{extra} noinline', "{",
             "entry:"]
    for slot in range(n_args):
        lines.append(f"  %slot{slot} = getelementptr ptr, ptr %args, i64 {slot}")
        lines.append(f"  %arg{slot} = load ptr, ptr %slot{slot}")
    operands = [f"ptr %arg{slot}" for slot in range(n_args)] + ["i64 %start", "i64 %end"]
    lines += [f'  call void @"{symbol}.body"({", ".join(operands)})', "  ret void", "}", ""]
    return FunctionText(module, ir.FunctionType(VOID, [PTR, I64, I64]), symbol, "\n".join(lines))


def align_phase_entry_stack(entry: FunctionText, vector_bytes: int) -> None:
    """Align the stack of the phase entry ``entry`` (:func:`add_phase_entry`; its body is inlined there) to
    ``vector_bytes`` (``alignstack``: the prologue rounds the stack pointer down, and LLVM reserves a frame
    pointer), so that each vector its loops spill has a slot of its own width and alignment, inside one line and
    one page (``CpuTarget.aligns_vector_spill_slots``)."""
    entry.text = entry.text.replace(" noinline", f" alignstack({vector_bytes}) noinline", 1)
