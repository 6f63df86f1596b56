"""Rule S28's signal, the same for each kind a reconciler counts (Deployments: :mod:`.podcost`; StatefulSets:
:mod:`.stsspread`): a gauge of the managed objects whose pods break their own spread now, and one Warning Event
``SpreadViolated`` per violation not told before. Used by the reconciler's worker thread only."""
from __future__ import annotations

from typing import Any, Callable

from prometheus_client import Gauge

from policylib.result import is_opted_out
from policylib.spread import RECORD_REPLICAS

from ..informer import Key

SPREAD_VIOLATED = "SpreadViolated"


def spread_managed(obj: dict[str, Any] | None, in_scope: Callable[[dict[str, Any]], bool]) -> bool:
    """Rule S23: an object whose spread policylib wrote (rule S15's record), in scope, not opted out."""
    if obj is None or is_opted_out(obj):
        return False
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return RECORD_REPLICAS in annotations and in_scope(obj)


class ViolationSignal:
    """The gauge and the Events of rule S28 for one kind. ``warn(obj, reason, note)`` records a Warning Event regarding
    ``obj``; ``told`` holds, per object key, the violations last told (once per state)."""

    def __init__(self, gauge: Gauge, warn: Callable[[dict[str, Any], str, str], None]):
        self.gauge, self._warn = gauge, warn
        self.told: dict[Key, frozenset[str]] = {}

    def tell(self, key: Key, obj: dict[str, Any], found: list[Any]) -> None:
        """The object's violations now (``Violation``\\ s): the gauge, and an Event for each not told before."""
        now = frozenset(v.message() for v in found)
        before = self.told.get(key, frozenset())
        if now:
            self.told[key] = now
        else:
            self.told.pop(key, None)
        self.gauge.set(len(self.told))
        for message in sorted(now - before):
            self._warn(obj, SPREAD_VIOLATED, message)

    def forget(self, key: Key) -> None:
        """The object went, or is no longer managed: out of the gauge."""
        if self.told.pop(key, None) is not None:
            self.gauge.set(len(self.told))
