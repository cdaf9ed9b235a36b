"""The torch front end: the ``neuron`` torch.compile backend and the FX -> IR importer (imports torch)."""
