"""The controller's pod deletion costs (rules S23 to S28): keep ``controller.kubernetes.io/pod-deletion-cost``
on the pods of the Deployments policylib manages so that a scale-down removes pods of the fullest zone
first, and report the Deployments whose pods break their own spread now.

A reconciler of the controller runtime (docs/architecture.md, "Controller runtime"), added with
``Controller.add`` in ``run_controller`` when ``controller.spreadAwareScaleDown`` is on, so its worker runs under
the controller's Lease:

- its own informers (``Controller.informer``) of Pods, only the pods a Deployment made (label selector
  ``pod-template-hash``: the Deployment controller sets it on every pod, so no pod template is changed and
  nothing rolls out), each cut on decode to :func:`policylib.scaledown.project_pod` (name, owner, Node,
  phase, labels, the cost and who owns it), and of Nodes only their labels and taints;
- its own queue of Deployment keys (``workqueue_*{name="podcost"}``), worked by the generic worker: a pod's
  event queues the key of its Deployment, a Deployment's event (``Controller.follow``) its own key; it
  plans the Deployment with :func:`policylib.scaledown.cost_writes` and writes a pod only when its
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
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

import policylib
from policylib.constants import APPS_API_VERSION
from policylib.scaledown import (
    DELETION_COST,
    FIELD_MANAGER,
    SpreadNodes,
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

from ..informer import Handler, Key, Reflector, Store
from .events import EventRecorder
from .metrics import ControllerMetrics
from .overlay import Overlay
from .runtime import DONE, Reconciling, Result
from .violations import ViolationSignal, spread_managed
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

DEPLOYMENT_PODS = kube.DEPLOYMENT_PODS
MERGE_PATCH = "application/merge-patch+json"

#: Makes a reflector of a resource into a store, calling a handler on every change (``Controller.informer``).
Informer = Callable[[kube.Resource, Handler, Store], Reflector]


def project_node(node: dict[str, Any]) -> dict[str, Any]:
    """What the pod costs hold of a Node: its name, version, labels (the zone and host keys) and taints
    (a constraint's nodeTaintsPolicy)."""
    meta = node.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta},
            "spec": {"taints": (node.get("spec") or {}).get("taints") or []}}


def skew_facts(node: dict[str, Any]) -> tuple[Any, Any]:
    """What rule S28's skew reads of a Node: its labels (domains, node affinity) and taints (nodeTaintsPolicy)."""
    return (node.get("metadata") or {}).get("labels"), (node.get("spec") or {}).get("taints") or []


def pod_key_of(pod: dict[str, Any]) -> Key:
    """A pod's own (namespace, name)."""
    meta = pod.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def pod_key(pod: dict[str, Any]) -> Key | None:
    """The (namespace, name) of the Deployment whose pod ``pod`` is."""
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


class PodCosts(Reconciling):
    """The deletion costs of one controller replica. ``deployments`` is the controller's Deployment store (a
    Deployment's changes are delivered to :meth:`on_deployment`: one watch, one store); ``in_scope`` says
    whether the controller acts on an object (rules W5, W6); ``ready`` whether the controller's own stores have
    listed; ``leading`` whether it holds the Lease."""

    name = "podcost"

    def __init__(self, api: kube.Api, config: policylib.Config, *, deployments: Store, informer: Informer,
                 in_scope: Callable[[dict[str, Any]], bool], ready: Callable[[], bool], leading: Callable[[], bool],
                 dry_run: bool, metrics: ControllerMetrics, recorder: EventRecorder):
        self.api, self.deployments, self.in_scope, self.ready = api, deployments, in_scope, ready
        self._leading, self.dry_run, self.recorder = leading, dry_run, recorder
        self.zone_key = config.zoneTopologySpread.topologyKey
        self.pods = Store({"deployment": lambda p: [k] if (k := pod_key(p)) else [],
                           "node": lambda p: [node_of(p)]}, project=project_pod)
        self.nodes = Store(project=project_node)
        #: Node events that change what rule S28 reads (:func:`skew_facts`; counted on the Node reflector's thread),
        #: and the Nodes as read for rule S28 after the last of them.
        self.node_events = 0
        self._spread_nodes: tuple[int, SpreadNodes] | None = None
        #: Called with a Node's name when its labels change (another reconciler counting on these Nodes:
        #: :class:`.stsspread.StatefulSetSpread`).
        self.node_listeners: list[Callable[[str], None]] = []
        self.reflectors = [informer(DEPLOYMENT_PODS, self._on_pod, self.pods),
                           informer(kube.NODES, self._on_node, self.nodes)]
        self.queue: WorkQueue[Key] = WorkQueue(self.name, metrics=metrics.queue)
        self.metrics = PodCostMetrics(metrics.registry)
        self.writes, self.violated, self.foreign = self.metrics.writes, self.metrics.violated, self.metrics.foreign
        #: Rule S28's gauge and Events; per Deployment key the violations last told (``violations``), and the
        #: foreign managers last told by an Event (once per state).
        self.signal = ViolationSignal(self.violated, lambda obj, reason, note: self._event(obj, reason, note))
        self.violations = self.signal.told
        self.foreigners: dict[Key, frozenset[str]] = {}
        #: Pods the worker wrote that the store may not show yet (few entries: the pods written since their last
        #: watch event).
        self.written: Overlay[Key] = Overlay(project=lambda p: project_pod(dict(p, apiVersion="v1", kind="Pod")))

    # events -> keys (reflector threads) ----------------------------------------------------------------
    def _on_pod(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = pod_key(obj)
        if key:
            self.queue.add(key)

    def on_deployment(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A Deployment's change (its record, its template, its deletion) replans its pods."""
        meta = obj.get("metadata") or {}
        self.queue.add((meta.get("namespace") or "", meta.get("name") or ""))

    def _on_node(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if old is None or event_type != "MODIFIED" or skew_facts(old) != skew_facts(obj):
            self.node_events += 1
        if old is not None and event_type == "MODIFIED" and \
                (old.get("metadata") or {}).get("labels") == (obj.get("metadata") or {}).get("labels"):
            return
        name = (obj.get("metadata") or {}).get("name") or ""
        for pod in self.pods.by_index("node", name):
            key = pod_key(pod)
            if key:
                self.queue.add(key)
        for listener in self.node_listeners:
            listener(name)

    def spread_nodes(self) -> SpreadNodes:
        """The Nodes as rule S28 counts on them, read again only after a Node event."""
        seen = self.node_events
        if self._spread_nodes is None or self._spread_nodes[0] != seen:
            self._spread_nodes = (seen, SpreadNodes(self.nodes.values()))
        return self._spread_nodes[1]

    def enqueue_all(self) -> None:
        for key in {k for p in self.pods.values() if (k := pod_key(p))}:
            self.queue.add(key)

    # one Deployment ---------------------------------------------------------------------------------
    def managed(self, deployment: dict[str, Any] | None) -> bool:
        """Rule S23: a Deployment whose spread policylib wrote (S15's record), in scope, not opted out."""
        return spread_managed(deployment, self.in_scope)

    def reconcile(self, key: Key) -> Result:
        """Plan one Deployment's pods and write their costs; a refused write is retried with backoff (raised)."""
        self.write_costs(key)
        return DONE

    def write_costs(self, key: Key) -> int:
        """Plan one Deployment's pods; returns the cost writes made."""
        ns, name = key
        if not (self.synced and self.ready()):
            # Until every store has listed, Nodes (the zones) and the scope may be missing: nothing is planned.
            # Nothing is lost: the first sync's started_leading/resync queues every Deployment again.
            return 0
        deployment = self.deployments.get(ns, name)
        if not self.managed(deployment):
            self._forget(key)
            return 0
        assert deployment is not None
        self.written.prune(lambda at: self.pods.get(*at) is not None)
        pods = deployment_pods(deployment, [self.written.get(pod_key_of(p), p) or p
                                            for p in self.pods.by_index("deployment", key)])
        nodes = self.nodes.values()
        zone_of = {(n["metadata"].get("name") or ""): ((n["metadata"].get("labels") or {}).get(self.zone_key) or "")
                   for n in nodes}
        if self.dry_run or not self.leading:
            # A standby (or a dry run) neither writes nor tells: the Events' memory of what was told is the
            # leader's, so a violation that appears before a failover is told by the next leader.
            return 0
        self._tell_foreign(key, deployment, pods)
        self.signal.tell(key, deployment, spread_violations(deployment, pods, self.spread_nodes()))
        made, failed = 0, None
        for w in cost_writes(pods, zone_of):
            if not self.leading:   # the Lease can be lost between two writes (each may take seconds)
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
                self.written.put((w.namespace, w.name), self.pods.get(w.namespace, w.name), written)
            log.info("pod deletion cost written", extra={"namespace": w.namespace, "pod": w.name, "cost": w.cost})
        if failed is not None:   # the key is retried with backoff (the queue's rate limiter)
            raise failed
        return made

    def _forget(self, key: Key) -> None:
        self.signal.forget(key)
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

    def _event(self, deployment: dict[str, Any], reason: str, note: str) -> None:
        if not self.dry_run and self.leading:
            self.recorder.warn(dict(deployment, apiVersion=APPS_API_VERSION, kind="Deployment"), reason, note,
                               action="ScaleDown")

    # the reconciler's keys ---------------------------------------------------------------------------
    def started_leading(self) -> None:
        self.enqueue_all()

    def resync(self) -> None:
        self.enqueue_all()
