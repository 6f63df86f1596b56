"""Kubernetes resource quantities (``4``, ``500m``, ``32Gi``, ``1e3``) as exact decimals.

The API's own grammar (k8s.io/apimachinery ``resource.Quantity``): a signed decimal number and an
optional binary suffix (Ki … Ei), decimal suffix (n, u, m, k, M, G, T, P, E) or exponent (e3, E-2).
The ``kubernetes`` client has a parser too, but importing it costs the CLI half a second.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[KMGTPE]i)|[numkMGTPE]?|[eE][+-]?[0-9]+)")


def parse_quantity(value: Any) -> Decimal:
    """``value`` (a string, or a number as YAML gives it) as a Decimal; ValueError names a bad one."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value).strip()
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a quantity (like 8, 500m, 64Gi)")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
        if suffix in _BINARY:
            return base * _BINARY[suffix]
        if suffix[:1] in ("e", "E"):
            return base * (Decimal(10) ** int(suffix[1:]))
        return base * _DECIMAL[suffix]
    except (InvalidOperation, KeyError):
        raise ValueError(f"{text!r} is not a quantity (like 8, 500m, 64Gi)") from None


def whole_units(value: Any) -> bool:
    """A quantity that is a whole number above zero, as ``Quantity.Value()*1000 == MilliValue()`` tests
    it (both round up)."""
    try:
        q = parse_quantity(value)
    except ValueError:
        return False
    return math.ceil(q) > 0 and math.ceil(q) * 1000 == math.ceil(q * 1000)
