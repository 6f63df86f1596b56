"""JSON values as keys: membership and duplicates found through a set or a dict, in one pass.

A policy compares entries of a list (constraints, anti-affinity terms, errors) with those of another.
``x in some_list`` compares ``x`` with every entry, so a check of every entry is quadratic in the list;
:func:`json_key` makes a hashable stand-in for a JSON value, equal to another's exactly when the two
values are equal (``==``), so the same check is one set lookup per entry.
"""
from __future__ import annotations

from typing import Any


class _Unkeyable:
    """The stand-in for a value nested too deep to key: equal only to itself (never a false match)."""

    __slots__ = ()


def json_key(value: Any) -> Any:
    """A hashable value equal to ``json_key(other)`` exactly when ``value == other``: a map as the frozen set
    of its items, a list as a tuple (both tagged, so neither equals the other), anything hashable as itself.
    Numbers keep Python's equality (``1 == 1.0 == True``), as ``==`` does on the values themselves."""
    try:
        return _key(value)
    except RecursionError:
        return _Unkeyable()


def _key(value: Any) -> Any:
    if isinstance(value, dict):
        return ("{}", frozenset((k, _key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("[]", tuple(_key(v) for v in value))
    return value
