"""LLVM plumbing: one target machine for the host, the O3 pipeline, object emission and loading.

Compilation always goes through object files: a :class:`KernelCompiler` verifies and optimizes each module
(one per kernel phase) and emits its object code once; the objects are linked into one shared library and loaded
by the dynamic loader, or, where the process has no linker, loaded into one MCJIT engine (the code form:
:mod:`neuroncc.codegen.llvm.native_library` decides). Loading a saved artifact is the same second half (the
library through ``native_library.load_library``, which needs no LLVM; objects through :func:`load_objects`), so
a cached executable runs exactly the code that was tested, without recompiling.

Kernels compile in parallel, on worker threads that each own an LLVM context, a target machine and a pass
builder. llvmlite wraps every LLVM C-API call in one process-wide lock (its global context is shared), which
would serialize the workers; the two calls that take the time (running the O3 pipeline, emitting object code)
only touch the worker's own context and target machine, so they are made through the unlocked ctypes function
behind llvmlite's wrapper. Everything else (parsing, verifying, linking) keeps the lock. ctypes releases the
GIL during those calls, so workers also run while the launch planner emits the next kernel's IR in Python.

Two tiers (:class:`Tier`): ``OPTIMIZED`` (the O3 pipeline with the vectorizers, O3 code generation: the code
every artifact holds) and ``QUICK`` (no IR optimization beyond always-inline, code generation at O0 through
SelectionDAG with the fast register allocator: ~6x cheaper to make, several times slower to run). For a module
without fast-math flags other than ``contract`` (:func:`tier_independent`) both tiers compute bitwise the same
results: every other instruction is IEEE-exact whatever the optimizer does, and ``contract`` takes effect in
instruction selection (fused multiply-adds), which both tiers run through SelectionDAG. That is why the process
turns LLVM's FastISel off (``-fast-isel=false``, set once at initialization): FastISel would select a ``contract``
multiply and add as two instructions. Only O0 code generation uses FastISel, so the optimized tier is unchanged.
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import queue
import re
import subprocess
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm
from llvmlite.binding import ffi

from neuroncc.codegen.llvm import fork_safety, vector_variants
from neuroncc.codegen.llvm.entries import optimize_first
from neuroncc.codegen.llvm.native_library import CodeForm, LibraryModule, code_form, give_up, link, load_library
from neuroncc.codegen.llvm.object_memo import ObjectMemo
from neuroncc.errors import ArtifactError, CodegenError, NeuronccError
from neuroncc.hardware.host import CpuTarget
from neuroncc.hardware.host import target_cpu as _host

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}
fork_safety.hold_across_fork(_LOCK)  # it guards LLVM's initialization: a child must not inherit it held


def _initialize() -> None:
    if "target" not in _STATE:
        llvm.initialize_native_target()  # llvm.initialize() raises in llvmlite >= 0.45
        llvm.initialize_native_asmprinter()
        llvm.set_option("neuroncc", "-fast-isel=false")  # the quick tier selects as the optimized one (see above)
        _STATE["target"] = llvm.Target.from_triple(llvm.get_process_triple())


class Tier(enum.Enum):
    """How much LLVM does to a module: (IR pipeline speed level, code generation level); see the docstring."""

    OPTIMIZED = (3, 3)
    QUICK = (0, 0)

    @property
    def ir_level(self) -> int:
        return self.value[0]

    @property
    def codegen_level(self) -> int:
        return self.value[1]


#: quoted names and strings (``@"k0_p0.body"``, attribute values): never flags
_QUOTED = re.compile(r'"[^"]*"')
#: a fast-math flag other than ``contract``, the one both tiers honour alike (in instruction selection)
_TIER_DEPENDENT_FLAG = re.compile(r"(?<= )(?:reassoc|nnan|ninf|nsz|arcp|afn|fast)(?= )")


def tier_independent(text: str) -> bool:
    """Whether LLVM module ``text`` computes bitwise the same results at every :class:`Tier`: it carries no
    fast-math flag but ``contract``. ``reassoc`` lets the vectorizer reorder a sum, ``nnan``/``ninf``/``nsz``
    let the optimizer assume values away, ``arcp``/``afn`` let it rewrite divisions and math calls: what the
    O3 pipeline then makes differs from what the quick tier makes."""
    return _TIER_DEPENDENT_FLAG.search(_QUOTED.sub('""', text)) is None


def host_cpu() -> tuple[str, str]:
    """The name and feature string of the CPU code is compiled for (part of the artifact's identity: code is
    CPU-specific): the host's, or the one ``NEURONCC_CPU`` names (``hardware.host.target_cpu``)."""
    host = _host()
    return host.name, host.features


def host_target() -> CpuTarget:
    """The CPU the code generator compiles for, as it sees it: the host's, or the one ``NEURONCC_CPU`` names
    (:func:`neuroncc.hardware.host.target_cpu`)."""
    return _host()


def target_machine(target: CpuTarget | None = None, tier: Tier = Tier.OPTIMIZED,
                   form: CodeForm = CodeForm.OBJECTS) -> llvm.TargetMachine:
    """A fresh target machine for ``target`` (default: the host CPU with all of its features), generating code
    at ``tier``'s level (O3 by default), with the vector width the target says (``CpuTarget.machine_features``),
    for code ``form``: position-independent code (small code model) for a shared library, else MCJIT's form below.

    Fresh per use: an MCJIT engine takes ownership of the target machine it is created with, and a compile
    worker must not share one with another thread.

    The large code model: MCJIT maps each object's code and data sections wherever the OS gives it room, and
    the small model's 32-bit PC-relative references between them cannot reach past 2 GB. In a big process (a
    test worker at the end of the suite) one did not, and LLVM aborted the process in
    ``RuntimeDyldELF::resolveX86_64Relocation`` (``isInt<32>(RealOffset)``). The large model addresses with
    64 bits; its extra cost is in loading a constant's address, which the loops hoist. Static relocations with
    it (absolute 64-bit addresses, which RuntimeDyld fills in when it loads an object, from the cache too):
    MCJIT ran the large model's position-independent code (GOT-relative forms) into crashes.

    A shared library keeps its sections together (the linker lays them out), so the small model's PC-relative
    references always reach: constants load RIP-relative, with no address to materialize, and nothing goes
    through a GOT (the kernels define everything they use but ``memmove``, which they call through the PLT).
    """
    with _LOCK:
        _initialize()
    target = target or host_target()
    reloc, model = ("pic", "small") if form is CodeForm.SHARED_LIBRARY else ("static", "large")
    machine = _STATE["target"].create_target_machine(  # type: ignore[attr-defined]
        cpu=target.name, features=target.machine_features, opt=tier.codegen_level, reloc=reloc, codemodel=model)
    _MACHINE_IDENTITIES[machine] = (target.name, target.machine_features, tier, form)
    return machine


def _unlocked(name: str) -> Any:
    """The ctypes function behind llvmlite's locked wrapper of C-API function ``name`` (the wrapper itself if
    this llvmlite has no such attribute: still correct, only serialized)."""
    wrapper = getattr(ffi.lib, name)
    return getattr(wrapper, "_cfn", wrapper)


@dataclass
class JitModule:
    """Machine code loaded by MCJIT: symbol addresses stay valid while this object (its engine) is alive.

    ``objects`` are the object files loaded and ``llvm_ir`` the unoptimized LLVM IR modules they were compiled
    from, one per kernel phase (the IR for inspection and the artifact's ``kernels.ll``)."""

    engine: llvm.ExecutionEngine
    objects: list[bytes]
    llvm_ir: list[str] = field(default_factory=list)
    form: CodeForm = CodeForm.OBJECTS

    def address(self, symbol: str) -> int:
        address = self.engine.get_function_address(symbol)
        if not address:
            raise ArtifactError(f"symbol '{symbol}' is missing from the compiled kernel object")
        return address


def _parse(text: str, context: Any = None) -> llvm.ModuleRef:
    try:
        module = llvm.parse_assembly(text, context)
        module.verify()
    except RuntimeError as exc:
        raise CodegenError(f"generated LLVM IR does not verify: {exc}") from None
    return module


def parse_and_link(ir_texts: list[str]) -> llvm.ModuleRef:
    """Parse and verify each module (one per kernel phase), then link them into one (global context)."""
    with _LOCK:
        _initialize()
    modules = [_parse(text) for text in ir_texts] or [llvm.parse_assembly("")]
    linked = modules[0]
    for module in modules[1:]:
        linked.link_in(module)
    return linked


@dataclass(frozen=True)
class _MachineSetup:
    """What every module compiled by one target machine is given: its triple and data layout, and the pipeline's
    tuning options at a tier (the pass builder copies them). Made once per machine and tier: each llvmlite call
    gives up the GIL and waits to take it back, up to the switch interval while the planner runs Python (session
    24 order24: a worker's ~45 calls a module stretched the transformer step's backward modules ~1.8x)."""

    triple: str
    data_layout: str
    tuning: Any


#: per target machine (each owned by one thread) and tier: its :class:`_MachineSetup`
_SETUPS: weakref.WeakKeyDictionary[Any, dict[Tier, _MachineSetup]] = weakref.WeakKeyDictionary()


def _machine_setup(tm: llvm.TargetMachine, tier: Tier) -> _MachineSetup:
    by_tier = _SETUPS.get(tm)
    if by_tier is None:
        by_tier = _SETUPS[tm] = {}
    setup = by_tier.get(tier)
    if setup is None:
        tuning = llvm.create_pipeline_tuning_options(speed_level=tier.ir_level)
        if tier is Tier.OPTIMIZED:
            tuning.loop_vectorization = True
            tuning.slp_vectorization = True
            tuning.loop_unrolling = False
            tuning.loop_interleaving = True
        setup = by_tier[tier] = _MachineSetup(tm.triple, str(tm.target_data), tuning)
    return setup


def _run_o3(module: llvm.ModuleRef, tm: llvm.TargetMachine, tier: Tier = Tier.OPTIMIZED, context: Any = None,
            variants_possible: bool = True) -> None:
    """O3 for the host CPU with the loop and SLP vectorizers (loop unrolling off: the vectorizer interleaves);
    at the quick tier, the O0 pipeline (always-inline only). ``variants_possible``: False when the module's text
    names no vector variant (:func:`_inline_vector_variants` has nothing to do)."""
    setup = _machine_setup(tm, tier)
    module.triple = setup.triple
    module.data_layout = setup.data_layout
    builder = llvm.create_pass_builder(tm, setup.tuning)  # one per module: its analysis managers key on module address
    _unlocked("LLVMPY_RunNewModulePassManager")(builder.getModulePassManager(), module, builder)
    if variants_possible:
        _inline_vector_variants(module, tm, tier, context)


def names_vector_variants(text: str) -> bool:
    """Whether LLVM module ``text`` names a vector variant or a scalar function defined after O3: only then can
    :func:`_inline_vector_variants` find one in the module (O3 makes no functions of those names), so a module
    that does not skips its walks over the module's functions (~7 llvmlite calls a quick module, 30-40 an
    optimized one, each a wait for the GIL beside the planner)."""
    return any(symbol in text for symbol in (*vector_variants.SYMBOLS, *vector_variants.DEFINED_AFTER_O3))


def _inline_vector_variants(module: llvm.ModuleRef, tm: llvm.TargetMachine, tier: Tier, context: Any) -> None:
    """Inline the vector variants the loop vectorizer called (``vector_variants.py``: explicit vector code for a
    scalar call, alwaysinline, which O3 inlines only before the vectorizer), and the scalar functions declared
    beside them, their definitions linked in here (at either tier: a declaration must be resolved)."""
    declared = [fn.name for fn in module.functions if fn.is_declaration and fn.name in vector_variants.DEFINED_AFTER_O3]
    if not declared and (tier is not Tier.OPTIMIZED
                         or not any(fn.name.startswith(vector_variants.SYMBOLS) for fn in module.functions)):
        return
    for name in declared:
        text = f'target triple = "{module.triple}"\ntarget datalayout = "{module.data_layout}"\n'
        module.link_in(_parse(text + vector_variants.DEFINED_AFTER_O3[name], context))
    passes = llvm.create_new_module_pass_manager()
    passes.add_always_inliner_pass()
    if declared:
        passes.add_global_dead_code_eliminate_pass()  # the linked definitions, inlined
    builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    _unlocked("LLVMPY_RunNewModulePassManager")(passes, module, builder)


def _emit_object(tm: llvm.TargetMachine, module: llvm.ModuleRef) -> bytes:
    """``tm.emit_object(module)`` without llvmlite's process-wide lock (see the module docstring)."""
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, module, 1, error)
        if not buffer:
            raise CodegenError(f"LLVM cannot emit object code: {error}")
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def optimize(ir_texts: list[str], target: CpuTarget | None = None) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse, verify, link and optimize the modules as one for ``target`` (default: the host; tests and
    :func:`assembly`), in the process's code form (the code a build of them would run)."""
    module = parse_and_link(ir_texts)
    tm = target_machine(target, form=code_form())
    _run_o3(module, tm)
    return module, tm


def assembly(ir_texts: list[str], target: CpuTarget | None = None) -> str:
    """The optimized modules' assembly for ``target`` (default: the host). Tests check it for vector
    registers, and read the code another CPU would get (a ``CpuTarget`` of that CPU's name and features)."""
    module, tm = optimize(ir_texts, target)
    return tm.emit_assembly(module)


#: The process's object code by (module text digest, tier, machine identity): ``object_memo.py``.
OBJECT_MEMO = ObjectMemo()
#: What each machine :func:`target_machine` made emits for: (CPU name, machine features, tier, code form).
_MACHINE_IDENTITIES: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def _compile_module(text: str, context: Any, tm: llvm.TargetMachine, tier: Tier) -> bytes:
    """One module's object code: parsed and verified in ``context``, optimized and emitted at ``tier``; the
    bytes compiled before in this process for the same text, tier and machine where the memo has them
    (``object_memo.py``; a test that replaces this function replaces the memo with it)."""
    identity = _MACHINE_IDENTITIES.get(tm)
    if identity is None:  # a machine made some other way: compiled as ever
        return _llvm_compile(text, context, tm, tier)
    key = (hashlib.sha256(text.encode()).digest(), tier, identity)
    code = OBJECT_MEMO.get(key)
    if code is None:
        code = _llvm_compile(text, context, tm, tier)
        OBJECT_MEMO.put(key, code)
    return code


def _llvm_compile(text: str, context: Any, tm: llvm.TargetMachine, tier: Tier) -> bytes:
    """LLVM's object code for one module: parsed and verified in ``context``, optimized and emitted at ``tier``."""
    module = _parse(text, context)
    try:
        _run_o3(module, tm, tier, context, variants_possible=names_vector_variants(text))
        return _emit_object(tm, module)
    finally:
        module.close()


#: per thread: its target machine per tier (a target machine is reusable for any number of modules, by one
#: thread at a time)
_MACHINES = threading.local()


def _thread_machine(tier: Tier, form: CodeForm, target: CpuTarget | None = None) -> llvm.TargetMachine:
    """This thread's target machine for ``target`` (default: the CPU the process compiles for, which
    ``hardware.host.compiling_for`` may switch between builds), ``tier`` and ``form``."""
    target = target or host_target()
    machines = getattr(_MACHINES, "by_key", None)
    if machines is None:
        machines = _MACHINES.by_key = {}
    key = (tier, form, target.name, target.machine_features)
    if key not in machines:
        machines[key] = target_machine(target, tier=tier, form=form)
    return machines[key]


#: Inbox priorities: optimized modules first (see KernelCompiler), then quick ones, then the workers' stop.
_OPTIMIZED_FIRST, _QUICK_NEXT, _STOP = 0, 1, 2


class _Worker(threading.Thread):
    """Takes (priority, index, module text, tier) from the shared inbox until a stop, compiling each in its own
    LLVM context, for code ``form``."""

    def __init__(self, inbox: queue.PriorityQueue, objects: dict[int, bytes], form: CodeForm) -> None:
        super().__init__(name="neuroncc-llvm", daemon=True)
        self.inbox, self.objects, self.form = inbox, objects, form
        self.error: BaseException | None = None

    def run(self) -> None:
        context = None
        machines: dict[Tier, llvm.TargetMachine] = {}
        while (task := self.inbox.get())[0] != _STOP:
            if self.error is not None:
                continue  # keep draining: the producer queues until finish()
            try:
                _, index, text, tier = task
                if context is None:
                    context = llvm.create_context()
                if tier not in machines:
                    machines[tier] = target_machine(tier=tier, form=self.form)
                self.objects[index] = _compile_module(text, context, machines[tier], tier)
            except BaseException as exc:  # re-raised on the compiling thread by KernelCompiler.finish
                self.error = exc


#: Python's GIL switch interval while compile workers run beside the generating thread (seconds; default 5 ms)
WORKER_SWITCH_INTERVAL = 0.0005


class _ShortSwitchInterval:
    """The process's GIL switch interval, shortened while any :class:`KernelCompiler` has workers running and while
    a library is linked and loaded (:func:`_load`).

    A worker needs the GIL for each of the ~25 llvmlite calls a module takes (parse, verify, triple, pipeline
    options, ...) between the two long calls that release it. The planner thread beside it runs Python without
    pause, so each time the worker asks for the GIL it can wait out the whole interval: up to 5 ms a call (four
    O3 compiles of the transformer step's LayerNorm backward beside a Python loop: 0.44 s, against 0.36 s
    alone). At 0.5 ms those waits are a tenth; the planner gives up the GIL only when a worker asks for it.
    Counted, so overlapping compiles on several threads restore the interval once, when the last one ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved = 0.0

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, WORKER_SWITCH_INTERVAL))
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                sys.setswitchinterval(self._saved)


_SWITCH_INTERVAL = _ShortSwitchInterval()


class KernelCompiler:
    """Compiles kernel modules while they are being generated: ``submit(text)`` each, then ``finish()``.

    Up to ``workers`` threads take modules from one queue as they become free; every module becomes one
    object file, and the objects are kept in submission order, so the result does not depend on the number
    of workers or on which worker compiled what. A worker takes the optimized modules queued before the
    quick ones: an optimized module costs ~25x a quick one (the transformer step's LayerNorm backward: 90 ms
    against 2-7 ms), so it is the one the compile ends up waiting for, unless it starts as early as it can.
    ``tier``: how much LLVM optimizes (:class:`Tier`).
    ``quick_when_independent``: a module that computes the same bits at every tier (:func:`tier_independent`)
    compiles at the quick tier instead, unless it asks to be optimized first (``entries.optimize_first``: the
    generated matrix products); ``tiers`` records each module's (:func:`reoptimize` makes the
    optimized objects of the quick ones later). ``form``: the code form (default: the process's,
    ``native_library.code_form``).
    """

    def __init__(self, workers: int = 1, tier: Tier = Tier.OPTIMIZED, quick_when_independent: bool = False,
                 form: CodeForm | None = None):
        with _LOCK:
            _initialize()
        self.tier = tier
        self.form = form or code_form()
        self.quick_when_independent = quick_when_independent
        self.max_workers = max(int(workers), 1)
        self.workers: list[_Worker] = []
        self.inbox: queue.PriorityQueue = queue.PriorityQueue()
        self.objects: dict[int, bytes] = {}
        self.texts: list[str] = []
        self.tiers: list[Tier] = []
        self._submitted: list[int] = []  # per position of ``texts``: its submission's number (:meth:`follow`)
        self._short_switches = False  # whether this compiler holds _SWITCH_INTERVAL (from its first worker on)

    def submit(self, text: str) -> None:
        if len(self.workers) < min(self.max_workers, len(self.texts) + 1):
            if not self._short_switches:
                _SWITCH_INTERVAL.acquire()
                self._short_switches = True
            worker = _Worker(self.inbox, self.objects, self.form)
            worker.start()
            self.workers.append(worker)
        quick = self.quick_when_independent and tier_independent(text) and not optimize_first(text)
        tier = Tier.QUICK if quick else self.tier
        self.inbox.put((_QUICK_NEXT if tier is Tier.QUICK else _OPTIMIZED_FIRST, len(self.texts), text, tier))
        self._submitted.append(len(self.texts))
        self.texts.append(text)
        self.tiers.append(tier)

    def follow(self, order: list[str]) -> None:
        """Keep the modules (``texts``, ``tiers`` and the loaded objects) in ``order``, a permutation of the texts
        submitted (the launch planner submits the optimized tier's first and lists them in the plan's order),
        so the code loaded is the same whatever the order they were submitted in. After the last submit."""
        place = {text: number for number, text in enumerate(self.texts)}
        numbers = [place.get(text, -1) for text in order]
        if sorted(numbers) != list(range(len(self.texts))):
            raise CodegenError("the order given is not the modules submitted")
        self._submitted = [self._submitted[n] for n in numbers]
        self.texts, self.tiers = list(order), [self.tiers[n] for n in numbers]

    def close(self) -> None:
        """Stop the workers (after the modules already queued); no effect after the first call."""
        running = [worker for worker in self.workers if worker.is_alive()]
        for number, _ in enumerate(running):  # after every module queued (the highest priority number); distinct
            self.inbox.put((_STOP, number, "", self.tier))  # numbers: a heap never compares the tiers
        for worker in running:
            worker.join()
        if self._short_switches:
            self._short_switches = False
            _SWITCH_INTERVAL.release()

    def finish(self) -> LoadedCode | None:
        """Wait for the workers and load their objects; None when nothing was submitted."""
        self.close()
        for worker in self.workers:
            if worker.error is not None:
                if isinstance(worker.error, CodegenError):
                    raise worker.error
                raise CodegenError(f"LLVM compilation failed: {worker.error}") from worker.error
        if not self.texts:
            return None
        return _load([self.objects[n] for n in self._submitted], self.texts, self.tiers, self.form)


def compile_ir(ir_texts: list[str], workers: int = 1, tier: Tier = Tier.OPTIMIZED,
               form: CodeForm | None = None, target: CpuTarget | None = None) -> LoadedCode:
    """Verify, optimize (at ``tier``), emit object code (in code ``form``, default: the process's) and load it.
    ``target``: compile for that CPU (the host must run its code) instead of the process's, on the calling
    thread. Raises CodegenError on invalid IR.

    One module, or one worker, compiles on the calling thread: starting and joining a worker thread costs
    more than a quick-tier module's compile on a busy machine."""
    form = form or code_form()
    if workers <= 1 or len(ir_texts) == 1 or target is not None:
        with _LOCK:
            _initialize()
        if not ir_texts:
            raise CodegenError("no LLVM modules to compile")
        tiers = [tier] * len(ir_texts)
        return _load(_compile_all(ir_texts, tiers, form, target), ir_texts, tiers, form, target)
    compiler = KernelCompiler(workers, tier, form=form)
    for text in ir_texts:
        compiler.submit(text)
    module = compiler.finish()
    if module is None:
        raise CodegenError("no LLVM modules to compile")
    return module


def reoptimize(module: LoadedCode, tiers: list[Tier]) -> LoadedCode:
    """``module`` with every object that ``tiers`` says was compiled at the quick tier compiled again at the
    optimized one (on the calling thread), the others reused: the code an optimized build of the same modules
    makes, since a module's object code depends only on its text, its tier and its code form."""
    if not any(tier is Tier.QUICK for tier in tiers):
        return module
    with _LOCK:
        _initialize()
    context, tm = llvm.create_context(), _thread_machine(Tier.OPTIMIZED, module.form)
    objects = [_compile_module(text, context, tm, Tier.OPTIMIZED) if tier is Tier.QUICK else obj
               for obj, text, tier in zip(module.objects, module.llvm_ir, tiers)]
    return _load(objects, module.llvm_ir, [Tier.OPTIMIZED] * len(objects), module.form)


#: Code loaded from a shared library or by MCJIT: ``address(symbol)``, ``objects``, ``llvm_ir``, ``form``.
LoadedCode = LibraryModule | JitModule


def _compile_all(texts: list[str], tiers: list[Tier], form: CodeForm,
                 target: CpuTarget | None = None) -> list[bytes]:
    """Each module's object code in ``form`` for ``target`` (default: the process's CPU), compiled on the calling
    thread (a fresh context: its uniqued types go with it)."""
    context = llvm.create_context()
    return [_compile_module(text, context, _thread_machine(tier, form, target), tier)
            for text, tier in zip(texts, tiers)]


def _load(objects: list[bytes], texts: list[str], tiers: list[Tier], form: CodeForm,
          target: CpuTarget | None = None) -> LoadedCode:
    """Load freshly compiled ``objects`` (compiled for ``target``, default: the process's CPU): linked into a
    library and loaded by the dynamic loader in the shared form. When that fails (the linker refuses, or the library cannot be mapped: a ``noexec`` temporary
    directory), the process gives the shared form up (``native_library.give_up``) and these modules compile
    again, as objects for MCJIT, at their ``tiers``.

    The link and the load are a few dozen short system calls, each of which gives up the GIL and waits to take it
    back: beside a thread running Python (a torch.compile graph's build finishes beside AOTAutograd's tail), up
    to the whole switch interval each. So the interval is short meanwhile (``native_library.link``'s numbers;
    the transformer step's first forward call waited ~19 ms less for its code, 6/6 cold runs)."""
    if form is CodeForm.SHARED_LIBRARY:
        _SWITCH_INTERVAL.acquire()
        step = f"linking {len(objects)} kernel object(s) into a library"
        try:
            library = link(objects)
            step = "loading the kernel library"
            return load_library(library, objects, texts)
        except (OSError, subprocess.SubprocessError, NeuronccError) as exc:
            give_up(f"{step} failed: {type(exc).__name__}: {exc}")
        finally:
            _SWITCH_INTERVAL.release()
        objects = _compile_all(texts, tiers, CodeForm.OBJECTS, target)
    return load_objects(objects, texts)


def load_objects(objects: list[bytes], llvm_ir: list[str] | None = None) -> JitModule:
    """Load object code produced by a :class:`KernelCompiler` (or read from an artifact) into a new engine."""
    with _LOCK:
        _initialize()
    tm = target_machine(form=CodeForm.OBJECTS)
    empty = llvm.parse_assembly("")
    empty.triple = tm.triple
    empty.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(empty, tm)
    for object_code in objects:
        try:
            engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
        except Exception as exc:  # llvmlite reports a broken object as a generic error
            raise ArtifactError(f"cannot load kernel object code: {exc}") from None
    engine.finalize_object()
    return JitModule(engine, list(objects), list(llvm_ir or []))
