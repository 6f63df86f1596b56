"""Rule W4: a Deployment (or StatefulSet, or LeaderWorkerSet) CREATE for which the HPA cache has no HPA reads the
namespace's HPAs from the API server once, because an HPA applied just before its Deployment (``kubectl apply`` of a
file, HPA first) may not have reached the watch yet, and the Deployment would then be stored for its own
``spec.replicas``: the stored result would depend on timing. The read overlaps with the policy
(:func:`decide_overlapped`)."""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, TypeVar

from policylib.facts import ClusterFacts, hpa_target
from policylib.spread import scaled_kind

from .hpacache import HpaCache, slim_hpa
from .hparead import CONFIRM_LIMIT
from .rawhttp import failed_read

log = logging.getLogger(__name__)
R = TypeVar("R")
#: ``result`` label values of the confirming reads' counter.
CONFIRMED_FOUND, CONFIRMED_NONE, CONFIRMED_ERROR = "found", "none", "error"


class ConfirmedHpas(ClusterFacts):
    """Rule W4: the facts of one Deployment CREATE. The cache answers when it knows an HPA for the
    Deployment; otherwise one namespaced list from the API server (a consistent read: it includes
    every HPA whose create returned before this request) confirms there is none, or finds the one
    the watch has not delivered yet. A failed read falls back to the cache's answer, counted
    and logged. ``counted(result)`` is called once per confirming read.

    :meth:`start` sends the read before the policy runs, so the API server answers it while the
    policy works (:func:`decide_overlapped`); :meth:`hpas_for` then waits for that answer."""

    def __init__(self, cache: "HpaCache", counted: Callable[[str], None],
                 runtime_counted: Callable[[str], None] = lambda result: None):
        super().__init__()
        self.cache, self.counted, self.runtime_counted = cache, counted, runtime_counted
        self.workload_api = cache.workload_api   # rule G22: the cache's discovery
        self._pending: dict[tuple[str, str], Callable[[], list[dict[str, Any]] | None]] = {}

    @property
    def ready(self) -> bool:
        return self.cache.ready

    def needs_read(self, namespace: str | None, name: object) -> bool:
        """Whether :meth:`hpas_for` of this Deployment would ask the API server."""
        return bool(namespace and isinstance(name, str) and name and not self.cache.hpas_for(namespace, name))

    def start(self, namespace: str, name: str) -> None:
        """Send the read now; its answer is collected by :meth:`hpas_for` or :meth:`found`."""
        if (namespace, name) not in self._pending:
            try:
                answer = self.cache.read.send(namespace)
            except Exception as e:  # noqa: BLE001 -- credentials or the request's making: reported as the read's failure
                answer = failed_read(e)
            # collected once, by whichever asks first (functools.cache of a call without arguments)
            self._pending[(namespace, name)] = functools.cache(lambda: self._confirm(namespace, name, answer))

    def runtime(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Rule T6: the cache's runtime, else the API server's (read once)."""
        return self.cache.runtime(kind, namespace, name, self.runtime_counted)

    def found(self, namespace: str, name: str) -> bool:
        """Whether the read :meth:`start` sent found an HPA the cache did not have (waits for it)."""
        return bool(self.hpas_for(namespace, name))

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Rule W4: the cache's HPAs for the Deployment, else the API server's."""
        cached = self.cache.hpas_for(namespace, name)
        if cached or not namespace or not name:
            return cached
        pending = self._pending.get((namespace, name))
        confirmed = pending() if pending is not None else self._confirm(namespace, name)
        return cached if confirmed is None else confirmed

    def _confirm(self, namespace: str, name: str,
                 answer: Callable[[], dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
        """The namespace's HPAs targeting the Deployment (from ``answer``, a read :meth:`start` sent, else a read
        now), or None when the read cannot tell."""
        try:
            page = answer() if answer is not None else self.cache.read(namespace)
            found = [slim_hpa(h) for h in page.get("items") or [] if hpa_target(h) == (namespace, name)]
        except Exception as e:  # noqa: BLE001 -- any failure of the read or of its answer: the cache's answer stands
            log.warning("HPA read failed, using the watch cache",
                        extra={"namespace": namespace, "deployment": name, "error": str(e)})
            self.counted(CONFIRMED_ERROR)
            return None
        if not found and (page.get("metadata") or {}).get("continue"):
            # One request only, so the read stays within its timeout: past the first page, the watch's answer.
            log.warning("HPA read: more HPAs in the namespace than one page, using the watch cache",
                        extra={"namespace": namespace, "deployment": name, "page": CONFIRM_LIMIT})
            self.counted(CONFIRMED_ERROR)
            return None
        self.counted(CONFIRMED_FOUND if found else CONFIRMED_NONE)
        return found


def decide_overlapped(decide: Callable[[Any], R], facts: ConfirmedHpas, namespace: str | None,
                      obj: dict[str, Any] | None) -> R:
    """Rule W4 without waiting for the read: for a Deployment the cache knows no HPA for, the read is
    sent, the policy decides with the cache's facts while the API server answers, and decides again
    only when the read found an HPA (rare: the HPA applied just before its Deployment). The answer is
    the one deciding with ``facts`` gives: without an HPA both see none, with one the second decision
    has it, and a failed read leaves the cache's answer."""
    name = ((obj or {}).get("metadata") or {}).get("name") if isinstance(obj, dict) else None
    kind = scaled_kind(obj)   # a Deployment, StatefulSet or LeaderWorkerSet: HPAs indexed by its kind (rules A2, E2)
    if kind is None or not isinstance(name, str) or not facts.needs_read(namespace, kind.hpa_index_name(name)):
        return decide(facts)
    assert namespace is not None  # needs_read checked it
    facts.start(namespace, kind.hpa_index_name(name))
    first = decide(facts.cache)
    return decide(facts) if facts.found(namespace, kind.hpa_index_name(name)) else first


def for_review(facts: ClusterFacts, operation: str, counted: Callable[[str], None],
               runtime_counted: Callable[[str], None] = lambda result: None) -> ClusterFacts:
    """The facts a review reads: :class:`ConfirmedHpas` over a watch cache for a CREATE (rules W4, T6),
    else ``facts`` itself."""
    if operation == "CREATE" and isinstance(facts, HpaCache):
        return ConfirmedHpas(facts, counted, runtime_counted)
    return facts
