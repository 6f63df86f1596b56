"""Where a review's cluster facts come from: a watch-backed HPA cache (:mod:`.hpacache`), or the object alone.

Without cluster access (``make run`` on a laptop) :class:`ObjectOnlyFacts`
stands in and policies fall back to what the object says (``spec.replicas``,
the ``policylib.io/autoscaling-min-replicas`` annotation).
"""
from __future__ import annotations

import os
from typing import Any

from policylib.facts import ClusterFacts
from policylib.shell import kube

from .hpacache import HpaCache

OBJECT_ONLY = "object-only"


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
