"""See what the compiler did to a model: ``neuroncc.evaluate(model, inputs)``, its report, and the plots.

- ``runner``: :func:`evaluate`: neuroncc against eager float32 and float64 on the same inputs (forward, or a
  training step), compile time by stage, steady-state time, recompiles over extra shapes.
- ``report``: the :class:`EvaluationReport` and its text and JSON forms; ``html``: the HTML page with plots.
- ``fallbacks``: the ops that ran on eager PyTorch, from every source that counts them.
- ``plots``: matplotlib pictures (cost breakdown per kernel, measured timeline, steady state, numeric errors).

May import: errors, hardware, ir, nki, passes, codegen, executors, driver, frontend, device (torch, in the
modules that run models; matplotlib only inside functions). Imported by: cli; ``neuroncc.evaluate`` is
``runner.evaluate``, served lazily by the top-level package.
"""

