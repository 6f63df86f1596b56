"""Cluster facts for the policies: a watch-backed HPA cache, or the object alone.

A background thread lists every HorizontalPodAutoscaler (``autoscaling/v2``)
once, then watches for changes, with the controller's
:class:`~webhook.informer.Reflector` and :class:`~webhook.informer.Store` (one
list-watch in the project: resume from the last version seen, list again on 410
Gone, stale events ignored). Reviews read that cache, with one exception (rule
W4): a Deployment CREATE for which the cache has no HPA reads the namespace's
HPAs from the API server once (:class:`ConfirmedHpas`), because an HPA applied
just before its Deployment (``kubectl apply`` of a file, HPA first) may not
have reached the watch yet, and the Deployment would then be stored for its own
``spec.replicas``: the stored result would depend on timing.

Without cluster access (``make run`` on a laptop) :class:`ObjectOnlyFacts`
stands in and policies fall back to what the object says (``spec.replicas``,
the ``policylib.io/autoscaling-min-replicas`` annotation).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Iterable, cast

from policylib.constants import AUTOSCALING_API_VERSION
from policylib.facts import ClusterFacts, hpa_target
from policylib.projection import project
from policylib.shell import kube

from .informer import Reflector, Store

log = logging.getLogger("webhook.cache")

OBJECT_ONLY, WATCH = "object-only", "watch"
HPA_API_VERSION = AUTOSCALING_API_VERSION
WATCH_SECONDS = 300
MAX_BACKOFF = 30.0
#: The confirming read's (connect, read) timeout: well inside the webhook configuration's
#: ``timeoutSeconds`` (3), so a slow API server costs a cache answer, never a failed admission.
CONFIRM_TIMEOUT = (0.5, 1.0)
#: The confirming read is one request: the first this many HPAs of the namespace.
CONFIRM_LIMIT = 500
#: ``result`` label values of the confirming reads' counter.
CONFIRMED_FOUND, CONFIRMED_NONE, CONFIRMED_ERROR = "found", "none", "error"


class ObjectOnlyFacts(ClusterFacts):
    """No cluster access: no HPAs or Nodes are known, the object itself is the only fact."""

    mode = OBJECT_ONLY
    ready = True

    def __init__(self, reason: str):
        super().__init__()
        self.reason = reason

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return []

    def status(self) -> dict[str, Any]:
        return {"facts": self.mode, "reason": self.reason}

    def start(self) -> "ObjectOnlyFacts":
        return self

    def stop(self) -> None:
        pass


def slim_hpa(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields a policy reads of an HPA (policylib.facts, policylib.spread; listed in
    :data:`policylib.projection.FIELDS`); the rest is dropped."""
    return cast("dict[str, Any]", project(dict(obj, apiVersion=HPA_API_VERSION, kind="HorizontalPodAutoscaler")))


def hpa_targets(hpa: dict[str, Any]) -> list[tuple[str, str]]:
    """The Deployment an HPA targets, as a Store index value (none when it targets something else)."""
    target = hpa_target(hpa)
    return [target] if target else []


class HpaIndex(Store):
    """HPAs by the Deployment they target, with ``hpas_for`` as in ``policylib.ClusterFacts``: an
    :class:`~webhook.informer.Store` (with its stale-event guard) that keeps only what policies read."""

    def __init__(self) -> None:
        super().__init__({"target": hpa_targets})

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.by_index("target", (namespace, name))

    def apply(self, event_type: str, obj: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        return super().apply(event_type, slim_hpa(obj))

    def replace(self, objs: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        return super().replace(slim_hpa(o) for o in objs)

    def put(self, obj: dict[str, Any]) -> None:
        self.apply("MODIFIED", obj)

    def remove(self, obj: dict[str, Any]) -> None:
        self.apply("DELETED", obj)


class HpaCache(ClusterFacts):
    """List-then-watch HPAs in a daemon thread with the controller's
    :class:`~webhook.informer.Reflector`; ``ready`` once the first list is in.

    A :class:`~policylib.ClusterFacts` whose ``hpas_for`` reads the live index;
    Nodes are not watched (the webhook's RBAC covers HPAs only), so ``nodes``
    stays empty.
    """

    mode = WATCH

    def __init__(self, api_client: Any, source: str):
        super().__init__()
        self.api = kube.Api(api_client)
        self.source = source
        self.index = HpaIndex()
        self.reflector = Reflector(self.api, kube.HPAS, self.index, lambda event_type, obj, old: None,
                                   watch_seconds=WATCH_SECONDS, max_backoff=MAX_BACKOFF)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ready(self) -> bool:
        return self.reflector.synced.is_set()

    @property
    def last_error(self) -> str | None:
        return self.reflector.last_error

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.index.hpas_for(namespace, name)

    def status(self) -> dict[str, Any]:
        return {"facts": self.mode, "source": self.source, "synced": self.ready,
                "horizontalPodAutoscalers": len(self.index), "lastError": self.last_error}

    def start(self) -> "HpaCache":
        self._thread = threading.Thread(target=self.reflector.run, args=(self._stop,), name="hpa-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


class ConfirmedHpas(ClusterFacts):
    """Rule W4: the facts of one Deployment CREATE. The cache answers when it knows an HPA for the
    Deployment; otherwise one namespaced list from the API server (a consistent read: it includes
    every HPA whose create returned before this request) confirms there is none, or finds the one
    the watch has not delivered yet. A failed read falls back to the cache's answer, counted
    and logged. ``counted(result)`` is called once per confirming read."""

    def __init__(self, cache: "HpaCache", counted: Callable[[str], None]):
        super().__init__()
        self.cache, self.counted = cache, counted

    @property
    def ready(self) -> bool:
        return self.cache.ready

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Rule W4: the cache's HPAs for the Deployment, else the API server's."""
        cached = self.cache.hpas_for(namespace, name)
        if cached or not namespace or not name:
            return cached
        try:
            page = self.cache.api.request("GET", kube.HPAS.path(namespace), query=[("limit", CONFIRM_LIMIT)],
                                          timeout=CONFIRM_TIMEOUT)
        except Exception as e:  # noqa: BLE001 -- any failure of the read: the cache's answer stands
            log.warning("HPA read for Deployment %s/%s failed, using the watch cache: %s", namespace, name, e)
            self.counted(CONFIRMED_ERROR)
            return cached
        found = [slim_hpa(h) for h in page.get("items") or [] if hpa_target(h) == (namespace, name)]
        if not found and (page.get("metadata") or {}).get("continue"):
            # One request only, so the read stays within its timeout: past the first page, the watch's answer.
            log.warning("HPA read for Deployment %s/%s: more than %d HPAs in the namespace, using the watch cache",
                        namespace, name, CONFIRM_LIMIT)
            self.counted(CONFIRMED_ERROR)
            return cached
        self.counted(CONFIRMED_FOUND if found else CONFIRMED_NONE)
        return found


def for_review(facts: Any, operation: str, counted: Callable[[str], None]) -> Any:
    """The facts a review reads: :class:`ConfirmedHpas` over a watch cache for a CREATE (rule W4),
    else ``facts`` itself."""
    if operation == "CREATE" and isinstance(facts, HpaCache):
        return ConfirmedHpas(facts, counted)
    return facts


def facts_source(mode: str = "auto", kubeconfig: str | None = None) -> ObjectOnlyFacts | HpaCache:
    """Where facts come from: ``none``; ``auto`` (in-cluster if running in a pod, else a
    kubeconfig only when one is named); ``watch`` (in-cluster or kubeconfig, required).

    The cache's thread is not started here; call ``start()`` in the serving process.
    """
    if mode == "none":
        return ObjectOnlyFacts("disabled (--facts none)")
    from kubernetes import config
    try:
        if kubeconfig:
            return HpaCache(kube.api_client(kubeconfig=kubeconfig), f"kubeconfig {kubeconfig}")
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return HpaCache(kube.in_cluster_client(), "in-cluster service account")
    except (config.ConfigException, kube.KubeconfigNotFound, OSError, ValueError) as e:
        if mode == "watch":
            raise
        return ObjectOnlyFacts(f"no cluster access: {e}")
    if mode == "watch":
        raise config.ConfigException("--facts watch needs a pod's service account or --kubeconfig")
    return ObjectOnlyFacts("no cluster access: not running in a pod and no --kubeconfig")
