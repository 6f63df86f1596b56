"""The rollout gate (rule: at most ``controller.maxConcurrentRollouts`` Deployments the controller
rolled are rolling at once) and the check for a write an admission webhook undid. The worker owns
both: it observes every Deployment it plans, recovers the gate itself after it takes the lead, and
defers keys here until a slot frees."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from policylib.facts import namespace_of
from policylib.spread import RECORD_REPLICAS

ObjectKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name) of a Deployment or a Kubeflow job


def rollout_complete(deployment: dict[str, Any]) -> bool:
    """The Deployment controller has observed and finished its latest template.

    Same test as ``kubectl rollout status``: observedGeneration caught up and
    every replica updated and available.
    """
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
        key = (namespace_of(deployment), deployment["metadata"]["name"])
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
        gate_key = (key[2], key[3])
        with self._lock:
            if deployment is None:
                self.deferred.discard(key)
                freed = gate_key in self.gate.rolling
                self.gate.forget(gate_key)
            else:
                freed = gate_key in self.gate.rolling
                self.gate.update(deployment)
                freed = freed and gate_key not in self.gate.rolling
            if not freed:
                return []
            keys = sorted(self.deferred)
            self.deferred.clear()
            return keys

    def admit(self, key: ObjectKey, gate_key: tuple[str, str]) -> bool:
        """Whether ``key`` may start a rollout now; if not, it is deferred until a slot frees."""
        with self._lock:
            if self.gate.admit(gate_key):
                return True
            self.deferred.add(key)
            return False

    def started(self, gate_key: tuple[str, str]) -> None:
        with self._lock:
            self.gate.started(gate_key)

    def recover(self, deployments: list[dict[str, Any]]) -> None:
        """After a restart or failover, rollouts a previous leader started still count against the cap."""
        with self._lock:
            for d in deployments:
                annotations = (d.get("metadata") or {}).get("annotations") or {}
                if RECORD_REPLICAS in annotations and not rollout_complete(d):
                    self.gate.started((namespace_of(d), d["metadata"]["name"]))

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
