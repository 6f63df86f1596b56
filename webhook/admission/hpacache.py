"""The HPAs policies read, listed then watched in a background thread; with them, Kubeflow Trainer's runtimes
(:mod:`.runtimes`, rule T6) where the cluster serves them.

The thread lists every HorizontalPodAutoscaler (``autoscaling/v2``) once, then
watches for changes, with the controller's :class:`~webhook.informer.Reflector`
and :class:`~webhook.informer.Store` (one list-watch in the project: resume from
the last version seen, list again on 410 Gone, stale events ignored). Reviews
read that cache, with one exception (rule W4, :mod:`.confirm`): a Deployment
CREATE for which the cache has no HPA reads the namespace's HPAs from the API
server once.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, cast

from policylib.constants import AUTOSCALING_API_VERSION
from policylib.facts import ClusterFacts, hpa_targets
from policylib.projection import project
from policylib.shell import kube

from ..discovery import WorkloadApiDiscovery
from ..informer import Reflector, Store
from .hparead import HpaRead
from .runtimes import RuntimeWatch

WATCH = "watch"
HPA_API_VERSION = AUTOSCALING_API_VERSION
WATCH_SECONDS = 300
MAX_BACKOFF = 30.0


def slim_hpa(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields a policy reads of an HPA (policylib.facts, policylib.spread; listed in
    :data:`policylib.projection.FIELDS`); the rest is dropped."""
    return cast("dict[str, Any]", project(dict(obj, apiVersion=HPA_API_VERSION, kind="HorizontalPodAutoscaler")))


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

    A :class:`~policylib.ClusterFacts` whose ``hpas_for`` reads the live index and whose ``runtime`` reads
    Trainer's runtimes (rule T6: watched where served, read through on a miss); Nodes are not watched (the
    webhook's RBAC covers HPAs and runtimes only), so ``nodes`` stays empty.
    """

    mode = WATCH

    def __init__(self, api_client: Any, source: str):
        super().__init__()
        self.api = kube.Api(api_client)
        self.read = HpaRead(api_client)
        self.source = source
        self.index = HpaIndex()
        self.reflector = Reflector(self.api, kube.HPAS, self.index, lambda event_type, obj, old: None,
                                   watch_seconds=WATCH_SECONDS, max_backoff=MAX_BACKOFF)
        #: Rule G22: what the API server serves of the Workload API, read again every REFRESH_SECONDS (the
        #: gang-pods entry refuses a pod whose PodGroup cannot be made, rule G23).
        self.discovery = WorkloadApiDiscovery(self.api, self._workload_api_changed)
        #: Rule T6: Kubeflow Trainer's runtimes, what a TrainJob's gang is computed from.
        self.runtimes_watch = RuntimeWatch(self.api, self.read, WATCH_SECONDS, MAX_BACKOFF)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._discovery_thread: threading.Thread | None = None
        self._runtimes_thread: threading.Thread | None = None

    def _workload_api_changed(self, api: Any) -> None:
        self.workload_api = api

    @property
    def ready(self) -> bool:
        """The HPAs are listed, the served Workload API versions were asked for once (rule G22), and so was whether
        Trainer's runtimes are served (rule T6). The runtimes' list is not waited for: a TrainJob whose runtime the
        watch does not hold yet reads it through, so a runtime list that fails (or is forbidden) never takes
        admission down for every other kind; the status says why it fails."""
        return (self.reflector.synced.is_set() and self.discovery.attempted.is_set()
                and self.runtimes_watch.attempted.is_set())

    @property
    def last_error(self) -> str | None:
        return self.reflector.last_error

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.index.hpas_for(namespace, name)

    def runtime(self, kind: str, namespace: str, name: str,
                counted: Callable[[str], None] = lambda result: None) -> dict[str, Any] | None:
        """Rule T6: the runtime from the watch, else read once from the API server (``counted`` with the read's
        result)."""
        return self.runtimes_watch.runtime(kind, namespace, name, counted)

    def status(self) -> dict[str, Any]:
        return {"facts": self.mode, "source": self.source, "synced": self.ready,
                "horizontalPodAutoscalers": len(self.index), "lastError": self.last_error,
                "workloadApi": self.discovery.status(), "trainerRuntimes": self.runtimes_watch.status()}

    def start(self) -> "HpaCache":
        self._thread = threading.Thread(target=self.reflector.run, args=(self._stop,), name="hpa-watch", daemon=True)
        self._thread.start()
        self._discovery_thread = threading.Thread(target=self.discovery.run, args=(self._stop,),
                                                  name="workload-api-discovery", daemon=True)
        self._discovery_thread.start()
        self._runtimes_thread = threading.Thread(target=self.runtimes_watch.run, args=(self._stop,),
                                                 name="trainer-runtime-discovery", daemon=True)
        self._runtimes_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
