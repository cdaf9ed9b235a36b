"""The torch front end: the ``neuron`` torch.compile backend and the FX -> IR importer (imports torch).

Entry point: :func:`neuroncc.frontend.backend.neuron_backend` (registered through the
``torch_dynamo_backends`` entry point, never at import). See docs/torch-backend.md.
"""
