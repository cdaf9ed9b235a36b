"""Testing tools for neuroncc: the OpInfo sweep, the differential fuzzer, random IR graphs.

These modules import torch (the fuzzer and the sweep drive ``torch.compile``); nothing in the compiler
imports them.
"""
