"""See what the compiler did to a model: ``neuroncc.evaluate(model, inputs)`` and its report, and the plots.

- ``plots``: matplotlib pictures (cost breakdown per kernel, measured timeline, steady state, numeric errors).

May import: errors, hardware, ir, nki, passes, codegen, executors, driver, frontend, device (and torch;
matplotlib only inside functions). Imported by: cli.
"""
