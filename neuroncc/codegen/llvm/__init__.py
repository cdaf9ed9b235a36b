"""Native CPU code through LLVM (llvmlite): kernel regions -> loop nests -> vectorized machine code.

    schedule.plan_kernel(region, param layouts, output layouts) -> KernelPlan  (stages and phases, refined
                                                                           by refine.py, transpose.py)
    emit.emit_kernel(plan, symbol) -> (LLVM IR per phase, phase symbols)   (+ per-op tables)
    jit.compile_ir([texts]) -> JitModule (object code, symbol addresses)   (O3, host CPU, MCJIT)

A plan is data (``kernel_plan.py``): each phase is one loop shape of a tagged union (``RowLoop``,
``BlockedMap``, ``TransposedMap``, ``SplitColumns``, ...); the planner is a flat sequence of named steps that
each return a new plan, and the emitter dispatches once on the shape. Per-op lowerings are tables:
``elementwise.ELEMENTWISE``, ``access.ACCESS`` (movement, indexing, creation) and ``reductions.COMBINERS``;
they and the stage emitters see the emitter through ``context.EmitContext``. The launch planner
(``program.py``) decides layouts and buffers, into a launch plan (``launch_plan.py``: data and its JSON); the
launcher (``neuroncc.executors.cpu.launcher``) runs the phases across threads.

This package imports none of its modules: loading an artifact (``launch_plan``, ``native_library``, ``jit``)
imports neither the planner and the emitters nor the layouts of view ops (``views``, which a graph cache hit
does not use: tests/frontend/test_warm_imports.py); import each from its module.

May import: errors, hardware, ir, passes, llvmlite.
"""
