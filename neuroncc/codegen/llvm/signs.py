"""What the code generators know about the sign of a region's values: :func:`at_most_zero`.

The math library has cheaper code for some functions on half their domain (``mathlib._exp_nonpositive``: e**x
for x <= 0); the lowerings (``elementwise.py``) ask here whether a value is always in it. The answer comes from
the region's ops alone and errs on the side of no.
"""

from __future__ import annotations

from neuroncc.ir.graph import Function, Value


def at_most_zero(region: Function, value: Value) -> bool:
    """Whether every element of ``value`` is <= 0 or NaN: a float ``x - amax(x)`` (over any dims, keepdim, so
    each element meets its own max; the max is at least every element it covers and float subtraction is
    monotone, so the difference rounds to <= 0 too; an online max, ``online.py``, covers the elements it is
    subtracted from as well)."""
    producers = region.producers()
    difference = producers.get(value)
    if difference is None or difference.name != "sub" or not value.type.dtype.is_float:
        return False
    x, subtracted = difference.operands
    maximum = producers.get(subtracted)
    return maximum is not None and maximum.name == "amax" and maximum.operands[0] is x \
        and bool(maximum.attrs["keepdim"])
