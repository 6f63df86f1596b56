"""The controller's pod deletion costs (rules S23 to S28): keep ``controller.kubernetes.io/pod-deletion-cost``
on the pods of the Deployments policylib manages so that a scale-down removes pods of the fullest zone
first, and report the Deployments whose pods break their own spread now.

A :class:`webhook.controller.Component` (docs/architecture.md, "The controller"), added with
``Controller.add`` in ``run_controller`` when ``controller.spreadAwareScaleDown`` is on, so it runs under the
controller's Lease:

- its own informers (``Controller.informer``) of Pods, only the pods a Deployment made (label selector
  ``pod-template-hash``: the Deployment controller sets it on every pod, so no pod template is changed and
  nothing rolls out), each cut on decode to :func:`policylib.scaledown.project_pod` (name, owner, Node,
  phase, labels, the cost and who owns it), and of Nodes only their labels and taints;
- its own :class:`webhook.workqueue.WorkQueue` of Deployment keys (``workqueue_*{name="podcost"}``): a pod's
  event queues the key of its Deployment, a Deployment's event (``Controller.follow``) its own key; the
  worker plans the Deployment with :func:`policylib.scaledown.cost_writes` and writes a pod only when its
  cost must change, as a JSON merge patch with ``fieldManager=policylib-scaledown`` carrying the pod's
  resourceVersion and uid (409: the watch brings the pod as it is and the key is planned again);
- a cost another field manager owns is never written; the Deployment gets one Warning Event
  ``DeletionCostOwnedElsewhere`` naming them;
- ``policylib_spread_violated_deployments`` counts the managed Deployments whose pods break one of their
  constraints now, and each new violation gets one Warning Event ``SpreadViolated``;
- it writes only while the controller holds the Lease, and not in dry run.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from policylib.constants import APPS_API_VERSION, EVENTS_API_VERSION
from policylib.result import is_opted_out
from policylib.scaledown import (
    DELETION_COST,
    FIELD_MANAGER,
    cost_owner,
    cost_writes,
    deployment_name,
    deployment_pods,
    foreign_cost,
    node_of,
    project_pod,
    spread_violations,
)
from policylib.shell import kube
from policylib.spread import RECORD_REPLICAS

from .controller.events import FIELD_LIMIT, REPORTING_CONTROLLER, event_note
from .controller.leaderelection import micro_time
from .informer import Store
from .workqueue import WorkQueue

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger(__name__)

DEPLOYMENT_PODS = kube.DEPLOYMENT_PODS
MERGE_PATCH = "application/merge-patch+json"
Key = tuple[str, str]
#: Failures in a row after which a key waits for the next resync (as the reconciler's).
MAX_RETRIES = 15


def project_node(node: dict[str, Any]) -> dict[str, Any]:
    """What the pod costs hold of a Node: its name, version, labels (the zone and host keys) and taints
    (a constraint's nodeTaintsPolicy)."""
    meta = node.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta},
            "spec": {"taints": (node.get("spec") or {}).get("taints") or []}}


def pod_key(pod: dict[str, Any]) -> Key | None:
    name = deployment_name(pod)
    return ((pod.get("metadata") or {}).get("namespace") or "", name) if name else None


class PodCostMetrics:
    """The pod costs' metrics, on the controller's registry."""

    def __init__(self, registry: CollectorRegistry):
        self.writes = Counter("policylib_pod_cost_writes", "Pod deletion cost writes, by result.", ["result"],
                              registry=registry)
        self.violated = Gauge("policylib_spread_violated_deployments", "Managed Deployments whose running pods "
                              "break one of their own topology spread constraints now.", registry=registry)
        self.foreign = Gauge("policylib_pod_cost_foreign_deployments", "Managed Deployments with pods whose "
                             "deletion cost another field manager owns (left alone).", registry=registry)


class PodCosts:
    """The deletion costs of one controller replica, a :class:`webhook.controller.Component` of ``controller``
    (whose Lease, Deployment store, scope, metrics and identity it uses)."""

    name = "podcost"

    def __init__(self, controller: Controller):
        self.c = controller
        self.api = controller.api
        self.zone_key = controller.config.zoneTopologySpread.topologyKey
        self.pods = Store({"deployment": lambda p: [k] if (k := pod_key(p)) else [],
                           "node": lambda p: [node_of(p)]}, project=project_pod)
        self.nodes = Store(project=project_node)
        self.reflectors = [controller.informer(DEPLOYMENT_PODS, self._on_pod, self.pods),
                           controller.informer(kube.NODES, self._on_node, self.nodes)]
        self.queue: WorkQueue[Key] = WorkQueue(self.name, metrics=controller.metrics.queue)
        self.metrics = PodCostMetrics(controller.metrics.registry)
        self.writes, self.violated, self.foreign = self.metrics.writes, self.metrics.violated, self.metrics.foreign
        #: Per Deployment key: the violations and the foreign managers last told by an Event (once per state).
        self.violations: dict[Key, frozenset[str]] = {}
        self.foreigners: dict[Key, frozenset[str]] = {}
        #: Pods the worker wrote that the store may not show yet: (namespace, name) -> (the resourceVersion
        #: written over, the pod as written). Only the worker reads and writes it; an entry goes when the store
        #: moves on or the pod is gone (few entries: the pods written since their last watch event).
        self.written: dict[Key, tuple[str | None, dict[str, Any]]] = {}
        controller.follow(kube.DEPLOYMENTS, self._on_deployment)

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    # events -> keys (reflector threads) ----------------------------------------------------------------
    def _on_pod(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = pod_key(obj)
        if key:
            self.queue.add(key)

    def _on_deployment(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A Deployment's change (its record, its template, its deletion) replans its pods."""
        meta = obj.get("metadata") or {}
        self.queue.add((meta.get("namespace") or "", meta.get("name") or ""))

    def _on_node(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if old is not None and event_type == "MODIFIED" and \
                (old.get("metadata") or {}).get("labels") == (obj.get("metadata") or {}).get("labels"):
            return
        for pod in self.pods.by_index("node", (obj.get("metadata") or {}).get("name") or ""):
            key = pod_key(pod)
            if key:
                self.queue.add(key)

    def enqueue_all(self) -> None:
        for key in {k for p in self.pods.values() if (k := pod_key(p))}:
            self.queue.add(key)

    # one Deployment ---------------------------------------------------------------------------------
    def managed(self, deployment: dict[str, Any] | None) -> bool:
        """Rule S23: a Deployment whose spread policylib wrote (S15's record), in scope, not opted out."""
        if deployment is None or is_opted_out(deployment):
            return False
        annotations = (deployment.get("metadata") or {}).get("annotations") or {}
        return RECORD_REPLICAS in annotations and self.c.reconciler.in_scope(deployment)

    def reconcile(self, key: Key) -> int:
        """Plan one Deployment's pods; returns the cost writes made."""
        ns, name = key
        if not (self.synced and self.c.synced):
            # Until every store has listed, Nodes (the zones) and the scope may be missing: nothing is planned.
            # Nothing is lost: the first sync's started_leading/resync queues every Deployment again.
            return 0
        deployment = self.c.stores[kube.DEPLOYMENTS].get(ns, name)
        if not self.managed(deployment):
            self._forget(key)
            return 0
        assert deployment is not None
        for gone in [at for at in self.written if self.pods.get(*at) is None]:
            del self.written[gone]
        pods = deployment_pods(deployment, [self._as_written(p) for p in self.pods.by_index("deployment", key)])
        nodes = self.nodes.values()
        zone_of = {(n["metadata"].get("name") or ""): ((n["metadata"].get("labels") or {}).get(self.zone_key) or "")
                   for n in nodes}
        if self.c.dry_run or not self.c.leading:
            # A standby (or a dry run) neither writes nor tells: the Events' memory of what was told is the
            # leader's, so a violation that appears before a failover is told by the next leader.
            return 0
        self._tell_foreign(key, deployment, pods)
        self._tell_violations(key, deployment, spread_violations(deployment, pods, nodes))
        made, failed = 0, None
        for w in cost_writes(pods, zone_of):
            if not self.c.leading:   # the Lease can be lost between two writes (each may take seconds)
                break
            try:
                written = self.api.request("PATCH", kube.PODS.path(w.namespace, w.name),
                                           query=[("fieldManager", FIELD_MANAGER)], body=w.patch(),
                                           content_type=MERGE_PATCH)
            except (kube.Conflict, kube.NotFound):   # the watch brings the pod as it is now; plan it again then
                self.writes.labels("conflict").inc()
                continue
            except kube.ApiError as e:   # one pod refused (an admission policy, a 422): the others still get theirs
                self.writes.labels("failed").inc()
                failed = e
                continue
            self.writes.labels("written").inc()
            made += 1
            if isinstance(written, dict):   # until the watch brings it, plan on the pod as written
                stored = self.pods.get(w.namespace, w.name)
                self.written[(w.namespace, w.name)] = ((stored or {}).get("metadata", {}).get("resourceVersion"),
                                                       project_pod(dict(written, apiVersion="v1", kind="Pod")))
            log.info("pod deletion cost written", extra={"namespace": w.namespace, "pod": w.name, "cost": w.cost})
        if failed is not None:   # the key is retried with backoff (the queue's rate limiter)
            raise failed
        return made

    def _as_written(self, pod: dict[str, Any]) -> dict[str, Any]:
        """``pod`` as the worker last wrote it while the store still holds the version written over (as the
        reconciler's ``Overlay``: the informer's store has one writer, its reflector); once the store moves
        on, the store's."""
        meta = pod.get("metadata") or {}
        at = (meta.get("namespace") or "", meta.get("name") or "")
        entry = self.written.get(at)
        if entry is None:
            return pod
        if entry[0] == meta.get("resourceVersion"):
            return entry[1]
        del self.written[at]
        return pod

    def _forget(self, key: Key) -> None:
        if self.violations.pop(key, None) is not None:
            self.violated.set(len(self.violations))
        if self.foreigners.pop(key, None) is not None:
            self.foreign.set(len(self.foreigners))

    def _tell_foreign(self, key: Key, deployment: dict[str, Any], pods: list[Any]) -> None:
        """Rule S25: one Warning Event per new set of other managers owning costs of the Deployment's pods."""
        managers = frozenset(cost_owner(p) or "(unknown)" for p in pods if foreign_cost(p))
        before = self.foreigners.get(key)
        if managers:
            self.foreigners[key] = managers
        else:
            self.foreigners.pop(key, None)
        self.foreign.set(len(self.foreigners))
        if managers and managers != before:
            count = sum(1 for p in pods if foreign_cost(p))
            self._event(deployment, "DeletionCostOwnedElsewhere",
                        f"{count} pod(s) carry a {DELETION_COST} set by {', '.join(sorted(managers))}; policylib "
                        "leaves their cost alone, so a scale-down may not keep the zone spread")

    def _tell_violations(self, key: Key, deployment: dict[str, Any], found: list[Any]) -> None:
        """Rule S28: the gauge, and one Warning Event ``SpreadViolated`` per violation not told before."""
        now = frozenset(v.message() for v in found)
        before = self.violations.get(key, frozenset())
        if now:
            self.violations[key] = now
        else:
            self.violations.pop(key, None)
        self.violated.set(len(self.violations))
        for message in sorted(now - before):
            self._event(deployment, "SpreadViolated", message)

    def _event(self, deployment: dict[str, Any], reason: str, note: str) -> None:
        if self.c.dry_run or not self.c.leading:
            return
        meta = deployment.get("metadata") or {}
        suffix = f".{time.time_ns():x}"
        event = {"apiVersion": EVENTS_API_VERSION, "kind": "Event",
                 "metadata": {"name": str(meta.get("name"))[:253 - len(suffix)].rstrip("-.") + suffix,
                              "namespace": meta.get("namespace")},
                 "eventTime": micro_time(self.c.clock()),
                 "reportingController": REPORTING_CONTROLLER,
                 "reportingInstance": self.c.options.identity[:FIELD_LIMIT], "action": "ScaleDown", "reason": reason,
                 "type": "Warning", "note": event_note([note]),
                 "regarding": {k: v for k, v in {"apiVersion": APPS_API_VERSION, "kind": "Deployment", "name": meta.get("name"),
                                                 "namespace": meta.get("namespace"), "uid": meta.get("uid")}.items()
                               if v}}
        try:
            self.api.create(kube.EVENTS, str(meta.get("namespace")), event)
        except Exception as e:  # noqa: BLE001 -- best effort, as the controller's other Events
            self.c.metrics.errors.labels("event").inc()
            log.warning("could not record event", extra={"reason": reason, "error": str(e)[:300]})

    # the Component ----------------------------------------------------------------------------------
    def started_leading(self) -> None:
        self.enqueue_all()

    def resync(self) -> None:
        self.enqueue_all()

    def shutdown(self) -> None:
        self.queue.shutdown()

    def process_next(self, timeout: float | None = None) -> bool:
        """Plan the next Deployment's pods; False when no key came within ``timeout``."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        try:
            self.reconcile(key)
            self.queue.forget(key)
        except Exception as e:  # noqa: BLE001 -- odd data must not stop the worker
            self.c.metrics.errors.labels("podcost").inc()
            log.warning("pod cost reconcile failed", extra={"key": list(key), "error": str(e)[:300]})
            if self.queue.retries(key) < MAX_RETRIES:
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
        finally:
            self.queue.done(key)
        return True
