"""What a snapshot holds of the objects it keeps: each string once and, shared, each equal part once."""
from __future__ import annotations

import sys
from typing import Any


class Interner:
    """Copies of decoded JSON in which every string (key or value) is interned, and (``share``) every mapping or
    list equal to one copied before, value for value and type for type, is that one: the same label value,
    quantity or scheduler name in 50,000 objects is held once, and with ``share`` so is the same container
    ``resources``, port list, pod template spec or status. What ``check --cluster`` keeps of realistic
    Deployments is mostly such parts; what ``plan --cluster`` keeps has few, and sharing them would cost it more
    CPU than it saves memory (docs/figures.md, "check --cluster within 300 MiB"). The table holds one hash per
    part kept and goes with the interner."""

    def __init__(self, share: bool = True) -> None:
        self.share = share
        self.held: dict[int, Any] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return sys.intern(value)
        if isinstance(value, dict):
            value = {sys.intern(k) if isinstance(k, str) else k: self(v) for k, v in value.items()}
        elif isinstance(value, list):
            value = [self(v) for v in value]
        else:
            return value
        if not self.share:
            return value
        key = _shape(value)
        found = self.held.setdefault(hash(key), value)
        return found if found is not value and _shape(found) == key else value


def _shape(value: dict[str, Any] | list[Any]) -> tuple[Any, ...]:
    """What makes two copied mappings or lists the same: their keys in order and, per item, the copied part
    itself (already held once: the same object) or the scalar with its type (``1``, ``1.0`` and ``True``
    compare equal in Python but not in JSON)."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return (type(value), *((k, id(v)) if isinstance(v, (dict, list)) else (k, type(v), v) for k, v in items))
