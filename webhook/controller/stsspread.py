"""Rule S28 for StatefulSets: report the managed StatefulSets whose pods break their own spread now, as the pod
costs (:mod:`.podcost`) report Deployments. There is nothing to write: the StatefulSet controller removes its highest
ordinals and reads no ``controller.kubernetes.io/pod-deletion-cost``, so a StatefulSet's spread after a scale-in is
decided by where each ordinal was placed (docs/concepts/statefulsets.md, "Scale-down, measured").

A reconciler of the controller runtime (docs/architecture.md, "Controller runtime"), added beside the pod costs in
``run_controller`` when ``controller.spreadAwareScaleDown`` and ``statefulSets.enabled`` are on, so its worker runs
under the controller's Lease:

- its own informer of Pods, only those a StatefulSet made (label selector ``statefulset.kubernetes.io/pod-name``:
  the StatefulSet controller sets it on every pod), each cut on decode to :func:`policylib.scaledown.project_pod`;
- the Nodes as the pod costs read them (one Node watch, one store: :meth:`.PodCosts.spread_nodes`), and a Node's
  label change queues the StatefulSets with pods on it (:meth:`on_node_labels`, one of ``PodCosts.node_listeners``);
- its own queue of StatefulSet keys (``workqueue_*{name="stsspread"}``): a pod's event queues the key of the
  StatefulSet that controls it, a StatefulSet's event (``Controller.follow``) its own key;
- ``policylib_spread_violated_statefulsets`` counts the managed StatefulSets whose pods break one of their
  constraints now, and each new violation gets one Warning Event ``SpreadViolated`` on the StatefulSet;
- it tells only while the controller holds the Lease, and not in dry run. A replica that lost the Lease keeps its
  last gauge value; the chart's alert reads the gauge of the replica that leads (``policylib_controller_leader``).
"""
from __future__ import annotations

from typing import Any, Callable

from prometheus_client import CollectorRegistry, Gauge

from policylib.constants import APPS_API_VERSION
from policylib.scaledown import SpreadNodes, deployment_pods, node_of, project_pod, spread_violations
from policylib.shell import kube

from ..informer import Handler, Key, Reflector, Store
from .events import EventRecorder
from .metrics import ControllerMetrics
from .runtime import DONE, Reconciling, Result
from .violations import ViolationSignal, spread_managed
from .workqueue import WorkQueue

#: Makes a reflector of a resource into a store, calling a handler on every change (``Controller.informer``).
Informer = Callable[[kube.Resource, Handler, Store], Reflector]


def statefulset_key(pod: dict[str, Any]) -> Key | None:
    """The (namespace, name) of the StatefulSet that controls ``pod``."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "StatefulSet" and ref.get("name"):
            return meta.get("namespace") or "", str(ref["name"])
    return None


class StatefulSetSpreadMetrics:
    """Rule S28's gauge for StatefulSets, on the controller's registry."""

    def __init__(self, registry: CollectorRegistry):
        self.violated = Gauge("policylib_spread_violated_statefulsets", "Managed StatefulSets whose running pods "
                              "break one of their own topology spread constraints now.", registry=registry)


class StatefulSetSpread(Reconciling):
    """Rule S28's gauge and Events for the StatefulSets of one controller replica. ``statefulsets`` is the
    controller's StatefulSet store (its changes are delivered to :meth:`on_statefulset`); ``nodes`` gives the Nodes
    as rule S28 counts on them; the rest as :class:`.PodCosts` takes them."""

    name = "stsspread"

    def __init__(self, *, statefulsets: Store, nodes: Callable[[], SpreadNodes], informer: Informer,
                 in_scope: Callable[[dict[str, Any]], bool], ready: Callable[[], bool], leading: Callable[[], bool],
                 dry_run: bool, metrics: ControllerMetrics, recorder: EventRecorder):
        self.statefulsets, self.nodes, self.in_scope, self.ready = statefulsets, nodes, in_scope, ready
        self._leading, self.dry_run, self.recorder = leading, dry_run, recorder
        self.pods = Store({"statefulset": lambda p: [k] if (k := statefulset_key(p)) else [],
                           "node": lambda p: [node_of(p)]}, project=project_pod)
        self.reflectors = [informer(kube.STATEFULSET_PODS, self._on_pod, self.pods)]
        self.queue: WorkQueue[Key] = WorkQueue(self.name, metrics=metrics.queue)
        self.violated = StatefulSetSpreadMetrics(metrics.registry).violated
        self.signal = ViolationSignal(self.violated, lambda obj, reason, note: recorder.warn(obj, reason, note,
                                                                                          action="ScaleDown"))
        #: Per StatefulSet key: the violations last told by an Event (once per state).
        self.violations = self.signal.told

    # events -> keys (reflector threads) ----------------------------------------------------------------
    def _on_pod(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = statefulset_key(obj)
        if key:
            self.queue.add(key)

    def on_statefulset(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A StatefulSet's change (its record, its template, its deletion) counts its pods again."""
        meta = obj.get("metadata") or {}
        self.queue.add((meta.get("namespace") or "", meta.get("name") or ""))

    def on_node_labels(self, node: str) -> None:
        """A Node's labels changed (its domains): count again the StatefulSets with pods on it."""
        for pod in self.pods.by_index("node", node):
            key = statefulset_key(pod)
            if key:
                self.queue.add(key)

    def enqueue_all(self) -> None:
        for key in {k for p in self.pods.values() if (k := statefulset_key(p))}:
            self.queue.add(key)

    # one StatefulSet --------------------------------------------------------------------------------
    def managed(self, statefulset: dict[str, Any] | None) -> bool:
        """A StatefulSet whose spread policylib wrote (rule S15's record), in scope, not opted out."""
        return spread_managed(statefulset, self.in_scope)

    def reconcile(self, key: Key) -> Result:
        ns, name = key
        if not (self.synced and self.ready()):
            return DONE   # the first sync's started_leading/resync queues every StatefulSet again
        statefulset = self.statefulsets.get(ns, name)
        if not self.managed(statefulset):
            self.signal.forget(key)
            return DONE
        if self.dry_run or not self.leading:
            return DONE   # a standby tells nothing: the next leader tells every violation
        assert statefulset is not None
        obj = dict(statefulset, apiVersion=APPS_API_VERSION, kind="StatefulSet")
        pods = deployment_pods(obj, self.pods.by_index("statefulset", key))
        self.signal.tell(key, obj, spread_violations(obj, pods, self.nodes()))
        return DONE

    # the reconciler's keys ---------------------------------------------------------------------------
    def started_leading(self) -> None:
        self.enqueue_all()

    def resync(self) -> None:
        self.enqueue_all()
