"""The rollout gate (rule: at most ``controller.maxConcurrentRollouts`` Deployments and StatefulSets the
controller rolled are rolling at once) and the check for a write an admission webhook undid. The worker owns
both: it observes every Deployment and StatefulSet it plans, recovers the gate itself after it takes the lead,
and defers keys here until a slot frees. A gate key is ``(namespace, name)`` for a Deployment and
``(namespace, StatefulSet/name)`` for a StatefulSet (:func:`gate_key`)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from policylib.facts import namespace_of, scale_target_name
from policylib.spread import RECORD_REPLICAS

ObjectKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name) of a Deployment or a Kubeflow job


def gate_key(kind: str, namespace: str, name: str) -> tuple[str, str]:
    """The rollout gate's key of a Deployment's or a StatefulSet's rollout."""
    return namespace, scale_target_name(kind, name)


def statefulset_rollout_complete(statefulset: dict[str, Any]) -> bool:
    """The StatefulSet controller has observed and finished its latest template (rule A4).

    Same test as ``kubectl rollout status`` of a StatefulSet: observedGeneration caught up, every replica
    ready, and then every replica at or above the partition updated, or with no partition the current revision
    the update revision (``Recreate`` too: every pod re-created). ``OnDelete`` never rolls by itself: nothing to
    wait for.
    """
    meta, spec, status = (statefulset.get("metadata") or {}, statefulset.get("spec") or {},
                          statefulset.get("status") or {})
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type") == "OnDelete":
        return True
    observed = status.get("observedGeneration", 0)
    if not observed or meta.get("generation", 0) > observed:
        return False
    replicas = spec.get("replicas", 1)
    if status.get("readyReplicas", 0) < replicas:
        return False
    partition = (strategy.get("rollingUpdate") or {}).get("partition")
    if isinstance(partition, int) and partition > 0:
        return bool(status.get("updatedReplicas", 0) >= replicas - partition)
    return bool(status.get("updateRevision") == status.get("currentRevision"))


def rollout_complete(deployment: dict[str, Any]) -> bool:
    """The Deployment controller has observed and finished its latest template (a StatefulSet:
    :func:`statefulset_rollout_complete`).

    Same test as ``kubectl rollout status``: observedGeneration caught up and
    every replica updated and available.
    """
    if deployment.get("kind") == "StatefulSet":
        return statefulset_rollout_complete(deployment)
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    replicas = spec.get("replicas", 1)
    return bool(status.get("observedGeneration", 0) >= meta.get("generation", 0)
            and status.get("updatedReplicas", 0) >= replicas
            and status.get("availableReplicas", 0) >= replicas
            and status.get("replicas", 0) <= replicas)


@dataclass
class RolloutGate:
    """At most ``limit`` Deployments rolled by us are rolling at once."""

    limit: int
    rolling: set[Any] = field(default_factory=set)

    def update(self, deployment: dict[str, Any]) -> None:
        key = gate_key(str(deployment.get("kind") or "Deployment"), namespace_of(deployment), deployment["metadata"]["name"])
        if key in self.rolling and rollout_complete(deployment):
            self.rolling.discard(key)

    def forget(self, key: tuple[Any, ...]) -> None:
        self.rolling.discard(key)

    def admit(self, key: tuple[Any, ...]) -> bool:
        return key in self.rolling or len(self.rolling) < self.limit

    def started(self, key: tuple[Any, ...]) -> None:
        self.rolling.add(key)


class Rollouts:
    """The rollout gate and the keys it holds back, as one piece of state with one lock.

    Only the worker changes it (in :meth:`~webhook.controller.reconciler.Reconciler.reconcile`, and
    :meth:`recover` from the worker's own ``Reconciler.recover`` before its first key of a new term),
    and every change is one locked step, so a key is deferred and queued again as one decision: none is
    lost between the two (client-go's rule: event handlers only queue; the lock keeps the rule cheap to
    keep if a second worker is ever added).
    """

    def __init__(self, limit: int) -> None:
        self.gate = RolloutGate(limit)
        self.deferred: set[ObjectKey] = set()
        self._lock = threading.Lock()

    def observe(self, key: ObjectKey, deployment: dict[str, Any] | None) -> list[ObjectKey]:
        """The worker saw ``deployment`` (None: deleted) for ``key``: returns the deferred keys to queue
        again when that freed a slot."""
        gated = gate_key(key[1], key[2], key[3])
        with self._lock:
            if deployment is None:
                self.deferred.discard(key)
                freed = gated in self.gate.rolling
                self.gate.forget(gated)
            else:
                freed = gated in self.gate.rolling
                self.gate.update(deployment)
                freed = freed and gated not in self.gate.rolling
            if not freed:
                return []
            keys = sorted(self.deferred)
            self.deferred.clear()
            return keys

    def admit(self, key: ObjectKey, gated: tuple[str, str]) -> bool:
        """Whether ``key`` may start a rollout now; if not, it is deferred until a slot frees."""
        with self._lock:
            if self.gate.admit(gated):
                return True
            self.deferred.add(key)
            return False

    def started(self, gated: tuple[str, str]) -> None:
        with self._lock:
            self.gate.started(gated)

    def recover(self, deployments: list[dict[str, Any]]) -> None:
        """After a restart or failover, rollouts a previous leader started still count against the cap."""
        with self._lock:
            for d in deployments:
                annotations = (d.get("metadata") or {}).get("annotations") or {}
                if RECORD_REPLICAS in annotations and not rollout_complete(d):
                    self.gate.started(gate_key(str(d.get("kind") or "Deployment"), namespace_of(d), d["metadata"]["name"]))

    def rolling(self) -> int:
        with self._lock:
            return len(self.gate.rolling)


# --- writes undone by admission (pure) -------------------------------------------------------------

_MISSING = object()


def _at(obj: object, pointer: str) -> object:
    """The value at an RFC 6901 pointer, or ``_MISSING``."""
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, dict) and token in obj:
            obj = obj[token]
        elif isinstance(obj, list) and token.isdigit() and int(token) < len(obj):
            obj = obj[int(token)]
        else:
            return _MISSING
    return obj


def undone_by_admission(patch: list[dict[str, Any]], written: dict[str, Any]) -> bool:
    """Whether the object the API server stored lacks a pod-template change our patch made: a mutating
    webhook (another config of policylib's, or another webhook) put it back."""
    for op in patch:
        if not str(op.get("path", "")).startswith("/spec/template"):
            continue
        value = _at(written, op["path"])
        if op.get("op") in ("add", "replace") and value != op.get("value"):
            return True
        if op.get("op") == "remove" and value is not _MISSING:
            return True
    return False
