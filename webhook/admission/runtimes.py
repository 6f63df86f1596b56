"""Rule T6: Kubeflow Trainer's runtimes for the admission server's facts, listed then watched, and read once from the
API server when a TrainJob names one the watch has not brought.

A TrainJob's gang is computed from its runtime (rule T1): the admission server watches
``trainer.kubeflow.org/v1alpha1`` TrainingRuntimes (namespaced) and ClusterTrainingRuntimes with the controller's
:class:`~webhook.informer.Reflector` and :class:`~webhook.informer.Store`, each object projected as the planners'
(rule W7: ``metadata.managedFields`` and kubectl's last-applied copy dropped). It starts them only once discovery says
the cluster serves both resources, and asks again every :data:`REFRESH_SECONDS` until it does: a cluster without
Trainer lists and watches nothing, and the webhook is ready exactly as without this watch.

A runtime created just before its TrainJob (``kubectl apply`` of one file) may not have reached the watch: a review
whose runtime the cache does not hold reads it from the API server once, one ``GET`` with the HPA read's short
timeout (rule W4's :class:`~.hparead.HpaRead` connection); not found, or a failed read, leaves it unknown, and the
policy then writes nothing and says so (rule T3), the TrainJob admitted.
"""
from __future__ import annotations

import logging
import threading
import urllib.parse
from typing import Any, Callable, cast

from policylib.facts import CLUSTER_TRAINING_RUNTIME
from policylib.projection import project
from policylib.shell import kube

from ..informer import Reflector, Store
from .hparead import HpaRead

log = logging.getLogger(__name__)

#: How often discovery asks again whether the cluster serves Trainer's runtimes, until it does.
REFRESH_SECONDS = 30.0
#: The (connect, read) timeout of each discovery request.
DISCOVERY_TIMEOUT = (2.0, 5.0)
#: ``result`` label values of the read-through counter.
READ_FOUND, READ_NONE, READ_ERROR = "found", "none", "error"


def served_runtime_resources(api: kube.Api) -> tuple[kube.Resource, ...]:
    """Which of Trainer's runtime resources the API server serves now (its discovery document of
    ``trainer.kubeflow.org/v1alpha1``; a group not served is none)."""
    res = kube.TRAINJOBS   # the runtimes' group and version
    try:
        found = api.request("GET", f"/apis/{res.group}/{res.version}", timeout=DISCOVERY_TIMEOUT) or {}
    except kube.NotFound:
        return ()
    names = {r.get("name") for r in found.get("resources") or [] if isinstance(r, dict)}
    return tuple(r for r in kube.TRAINING_RUNTIMES if r.plural in names)


#: Each runtime kind's resource.
RUNTIME_RESOURCES = {res.kind: res for res in kube.TRAINING_RUNTIMES}


def runtime_path(kind: str, namespace: str, name: str) -> str:
    """The API path of the runtime ``kind`` ``name`` (a TrainingRuntime in ``namespace``), each part quoted."""
    return RUNTIME_RESOURCES[kind].path(urllib.parse.quote(namespace, safe=""), urllib.parse.quote(name, safe=""))


class RuntimeWatch:
    """The runtimes of the cluster, by kind, namespace (``""`` for a ClusterTrainingRuntime) and name; the watch
    starts once discovery finds the resources served (:meth:`run`, in its own thread)."""

    def __init__(self, api: kube.Api, read: HpaRead, watch_seconds: int, max_backoff: float):
        self.api, self.read = api, read
        self.watch_seconds, self.max_backoff = watch_seconds, max_backoff
        self.stores = {res.kind: Store(project=project) for res in kube.TRAINING_RUNTIMES}
        self.reflectors: list[Reflector] = []
        self.served: tuple[kube.Resource, ...] | None = None
        self.discovery_error: str | None = None
        #: Set once discovery has been asked, whatever its answer (the webhook is ready once it has asked).
        self.attempted = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def ready(self) -> bool:
        """Discovery asked once, and every runtime resource it found served listed."""
        return self.attempted.is_set() and all(r.synced.is_set() for r in self.reflectors)

    def discover(self) -> None:
        """Ask whether the runtimes are served; keep the last answer when the request fails (logged)."""
        try:
            self.served = served_runtime_resources(self.api)
            self.discovery_error = None
        except Exception as e:  # noqa: BLE001 -- the network or the server: asked again later, said in the status
            self.discovery_error = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]
            log.warning("trainer runtime discovery failed", extra={"error": self.discovery_error})

    def run(self, stop: threading.Event, every: float = REFRESH_SECONDS) -> None:
        """Discovery now and every ``every`` seconds until the runtimes are served; then their reflectors run in
        threads of their own until ``stop`` is set (a resource removed later is looked for again by its
        reflector). ``attempted`` is set once the first answer is acted on (the watches started), so readiness
        never counts a served resource before its reflector exists."""
        while not stop.is_set():
            self.discover()
            if self.served:
                self.start_watches(stop)
                self.attempted.set()
                return
            self.attempted.set()
            stop.wait(every)

    def start_watches(self, stop: threading.Event) -> None:
        assert self.served is not None
        for res in self.served:
            reflector = Reflector(self.api, res, self.stores[res.kind], lambda event_type, obj, old: None,
                                  watch_seconds=self.watch_seconds, max_backoff=self.max_backoff)
            self.reflectors.append(reflector)
            thread = threading.Thread(target=reflector.run, args=(stop,), name=f"{res.plural}-watch", daemon=True)
            self._threads.append(thread)
            thread.start()

    def cached(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        store = self.stores.get(kind)
        return store.get("" if kind == CLUSTER_TRAINING_RUNTIME else namespace, name) if store else None

    def runtime(self, kind: str, namespace: str, name: str,
                counted: Callable[[str], None] = lambda result: None) -> dict[str, Any] | None:
        """Rule T6: the runtime from the watch; one the watch does not hold read once from the API server (a
        consistent read: it sees a runtime whose create returned before this review began). None when it is not
        found or the read fails (logged, counted)."""
        cached = self.cached(kind, namespace, name)
        if cached is not None or kind not in self.stores or not name:
            return cached
        try:
            found = self.read.get_path(runtime_path(kind, namespace, name))
        except kube.NotFound:
            counted(READ_NONE)
            return None
        except Exception as e:  # noqa: BLE001 -- any failure of the read: the runtime stays unknown (rule T3)
            log.warning("runtime read failed", extra={"runtime": f"{kind} {namespace}/{name}", "error": str(e)[:300]})
            counted(READ_ERROR)
            return None
        counted(READ_FOUND)
        return cast("dict[str, Any]", project(kube.typed(RUNTIME_RESOURCES[kind], found)))

    def status(self) -> dict[str, Any]:
        served = None if self.served is None else [r.plural for r in self.served]
        return {"served": served, "watched": [r.res.plural for r in self.reflectors if r.served],
                "synced": all(r.synced.is_set() for r in self.reflectors),
                **{f"{kind[0].lower()}{kind[1:]}s": len(store) for kind, store in self.stores.items()},
                "lastError": self.discovery_error or next((r.last_error for r in self.reflectors if r.last_error),
                                                          None)}
