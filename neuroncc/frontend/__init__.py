"""The torch front end: the ``neuron`` torch.compile backend and the FX -> IR importer (imports torch).

Entry point: :func:`neuroncc.frontend.backend.neuron_backend` (registered through the
``torch_dynamo_backends`` entry point, never at import). See docs/torch-backend.md. The aten -> IR rules are in
``lowering/``; ``.pt2`` programs (``torch.export``) in ``exported.py`` and ``pt2.py``.

May import: errors, hardware, ir, passes, codegen, executors, driver, torch. Imported by: device, cli.
"""
