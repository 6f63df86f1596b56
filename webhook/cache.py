"""Cluster facts for the policies: a watch-backed HPA cache, or the object alone.

A review never makes an API call: a background thread lists every
HorizontalPodAutoscaler (``autoscaling/v2``) once, then watches for changes,
the list-then-watch pattern of client-go's reflector (a 410 Gone or any error
starts over from a fresh list). Reads take no lock: each target's bucket is
replaced, never changed in place.

Without cluster access (``make run`` on a laptop) :class:`ObjectOnlyFacts`
stands in and policies fall back to what the object says (``spec.replicas``,
the ``policylib.io/autoscaling-min-replicas`` annotation).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Iterable

from policylib.facts import ClusterFacts, hpa_target, namespace_of

from . import kube

log = logging.getLogger("webhook.cache")

OBJECT_ONLY, WATCH = "object-only", "watch"
HPA_API_VERSION = "autoscaling/v2"
WATCH_SECONDS = 300
MAX_BACKOFF = 30.0


class ObjectOnlyFacts(ClusterFacts):
    """No cluster access: no HPAs or Nodes are known, the object itself is the only fact."""

    mode = OBJECT_ONLY
    ready = True

    def __init__(self, reason: str):
        super().__init__()
        self.reason = reason

    def hpas_for(self, namespace: str, name: str) -> list[dict]:
        return []

    def status(self) -> dict:
        return {"facts": self.mode, "reason": self.reason}

    def start(self) -> "ObjectOnlyFacts":
        return self

    def stop(self) -> None:
        pass


def slim_hpa(obj: dict) -> dict:
    """The fields a policy reads of an HPA (policylib.facts, policylib.spread); the rest is dropped."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {"apiVersion": HPA_API_VERSION, "kind": "HorizontalPodAutoscaler",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
            "spec": {k: spec[k] for k in ("minReplicas", "maxReplicas", "scaleTargetRef") if k in spec}}


def _hpa_key(obj: dict) -> tuple[str, str]:
    return namespace_of(obj), (obj.get("metadata") or {}).get("name", "")


class HpaIndex:
    """HPAs by the Deployment they target, with ``hpas_for`` as in ``policylib.ClusterFacts``.

    One writer (the watch thread), any number of readers.
    """

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self._targets: dict[tuple[str, str], tuple[str, str] | None] = {}

    def __len__(self) -> int:
        return len(self._targets)

    def hpas_for(self, namespace: str, name: str) -> list[dict]:
        bucket = self._buckets.get((namespace, name))
        return list(bucket.values()) if bucket else []

    def put(self, obj: dict) -> None:
        hpa = slim_hpa(obj)
        key = _hpa_key(hpa)
        self.remove(obj)
        target = hpa_target(hpa)
        self._targets[key] = target
        if target:
            self._buckets[target] = {**self._buckets.get(target, {}), key: hpa}

    def remove(self, obj: dict) -> None:
        key = _hpa_key(obj)
        target = self._targets.pop(key, None)
        if target and target in self._buckets:
            bucket = {k: v for k, v in self._buckets[target].items() if k != key}
            if bucket:
                self._buckets[target] = bucket
            else:
                del self._buckets[target]

    def replace(self, objs: Iterable[dict]) -> None:
        """After a list: exactly ``objs``, swapped in at once."""
        fresh = HpaIndex()
        for obj in objs:
            fresh.put(obj)
        self._targets, self._buckets = fresh._targets, fresh._buckets


class HpaCache(ClusterFacts):
    """List-then-watch HPAs in a daemon thread; ``ready`` once the first list is in.

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
        self.ready = False
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hpas_for(self, namespace: str, name: str) -> list[dict]:
        return self.index.hpas_for(namespace, name)

    def status(self) -> dict:
        return {"facts": self.mode, "source": self.source, "synced": self.ready,
                "horizontalPodAutoscalers": len(self.index), "lastError": self.last_error}

    def start(self) -> "HpaCache":
        self._thread = threading.Thread(target=self._run, name="hpa-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def list_all(self) -> str:
        """List every HPA page by page into the index; returns the list's resourceVersion."""
        items, version = self.api.list(kube.HPAS)
        self.index.replace(items)
        return version

    def watch_from(self, resource_version: str) -> str | None:
        """Apply watch events until the server ends the watch; returns where to resume."""
        for kind, obj in self.api.watch(kube.HPAS, resource_version, WATCH_SECONDS):  # 410 Gone raises kube.Gone
            if kind in ("ADDED", "MODIFIED"):
                self.index.put(obj)
            elif kind == "DELETED":
                self.index.remove(obj)
            resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
            if self._stop.is_set():
                break
        return resource_version

    def _run(self) -> None:
        resource_version, backoff = None, 0.5
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self.list_all()
                    if not self.ready:
                        log.info("hpa cache synced: %d HorizontalPodAutoscalers", len(self.index))
                    self.ready = True
                resource_version = self.watch_from(resource_version)
                backoff, self.last_error = 0.5, None
            except kube.Gone:
                resource_version = None  # the resourceVersion is too old: relist now
            except Exception as e:  # noqa: BLE001 -- any failure: log, back off, resume where we were
                backoff = self._failed(e, backoff)

    def _failed(self, error: Exception, backoff: float) -> float:
        """Record and log a failure, wait ``backoff`` seconds; returns the next backoff."""
        first_line = (str(error).strip().splitlines() or [""])[0]
        self.last_error = f"{type(error).__name__}: {first_line}"[:300]
        log.warning("hpa list/watch failed, relisting in %.1fs: %s", backoff, self.last_error)
        self._stop.wait(backoff)
        return min(backoff * 2, MAX_BACKOFF)


def facts_source(mode: str = "auto", kubeconfig: str | None = None) -> ObjectOnlyFacts | HpaCache:
    """Where facts come from: ``none``; ``auto`` (in-cluster if running in a pod, else a
    kubeconfig only when one is named); ``watch`` (in-cluster or kubeconfig, required).

    The cache's thread is not started here; call ``start()`` in the serving process.
    """
    if mode == "none":
        return ObjectOnlyFacts("disabled (--facts none)")
    from kubernetes import client, config
    try:
        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)
            return HpaCache(api_client, f"kubeconfig {kubeconfig}")
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return HpaCache(client.ApiClient(configuration), "in-cluster service account")
    except (config.ConfigException, OSError, ValueError) as e:
        if mode == "watch":
            raise
        return ObjectOnlyFacts(f"no cluster access: {e}")
    if mode == "watch":
        raise config.ConfigException("--facts watch needs a pod's service account or --kubeconfig")
    return ObjectOnlyFacts("no cluster access: not running in a pod and no --kubeconfig")
