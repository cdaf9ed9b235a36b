"""Test support shared by the test suites and tools.

IR level (numpy only): random graph strategies (``graphs``), model graphs (``models``), semantic checks
(``semantics``), lit support. Torch level: the OpInfo sweep (``opinfo``) and the differential fuzzer (``fuzz``),
which drive ``torch.compile``. Nothing in the compiler imports this package.
"""
