"""``python -m webhook controller``: keep existing objects right (the specification's rules on
rollouts and existing Deployments, docs/specification.md; gang PodGroups).

The imperative shell around :func:`policylib.plan.plan`, in client-go's and controller-runtime's parts
(docs/architecture.md, "The controller" and "Controller runtime"):

- :mod:`webhook.informer`: one ``Reflector`` per watched resource lists, then watches into its
  ``Store`` (its one writer), resumes from the last version seen and lists again only on 410 Gone;
- :mod:`.workqueue`: the keyed ``WorkQueue`` with client-go's default rate limiter and metrics;
- :mod:`.leaderelection`: only the holder of a ``coordination.k8s.io/v1`` Lease writes, and it gives
  the Lease up on SIGTERM;
- :mod:`.runtime`: the manager that runs every component (the reflectors always, the workers while
  leading) and the one generic worker that owns each queue's retries, requeues and metrics;
- :mod:`.events` and :mod:`.overlay`: the one Event recorder and the one overlay every reconciler uses;
- :mod:`.reconciler`: event handlers queue keys; :meth:`~.reconciler.Reconciler.reconcile` plans and writes
  one (guarded JSON patches: a 409 re-reads and plans again), owns every piece of per-key state (the rollout
  gate of :mod:`.rollouts`, the notices of rules S19/S20, what it just wrote) and recovers it itself;
  :mod:`.podcost` and :mod:`.certrotator` are the other reconcilers;
- :mod:`.health`: ``/healthz``, ``/readyz`` (rule W8), ``/metrics``;
- this module wires them: :class:`Controller` adds each reconciler once (:meth:`Controller.add`), all
  under the one Lease. ``dryRun`` logs the plans and writes nothing.
"""
from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Histogram

import policylib
from policylib.constants import ANY_ADDRESS, CONTROLLER_PORT, INSTALL_NAMESPACE, WEBHOOK_CONFIGURATION
from policylib.facts import CLUSTER_TRAINING_RUNTIME, hpa_targets, namespace_of, scale_target_of
from policylib.plan import PLANNERS
from policylib.projection import project
from policylib.shell import kube

from ..informer import Handler, Reflector, Store
from .certrotator import Rotator
from .events import EventRecorder
from .health import serve_health
from .leaderelection import LeaderElector
from .metrics import ControllerMetrics
from .podcost import PodCosts
from .reconciler import Reconciler
from .rollouts import ObjectKey
from .runtime import KeyReconciler, Manager, Task, Worker
from .stsspread import StatefulSetSpread

log = logging.getLogger(__name__)
GANG_KINDS = frozenset(r.kind for r in kube.GANG_JOBS)
RUNTIME_KINDS = frozenset(r.kind for r in kube.TRAINING_RUNTIMES)
DEPLOYMENT = kube.DEPLOYMENTS.api_version
#: The kinds the spread writes, all ``apps/v1`` (rules S1, A4): their keys are ``(apps/v1, kind, namespace, name)``.
SPREAD_KINDS = frozenset({kube.DEPLOYMENTS.kind, kube.STATEFULSETS.kind})


def is_gang_kind(kind: object) -> bool:
    """A kind whose gangs the controller keeps: a Kubeflow job, a JobSet or a TrainJob."""
    return kind in GANG_KINDS


def trainjob_runtime(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rule T7: the runtime a TrainJob names, as ``(kind, namespace, name)`` (namespace ``""`` for a
    ClusterTrainingRuntime, Trainer's default kind): the TrainJob store's index, which a runtime's event reads."""
    ref = (obj.get("spec") or {}).get("runtimeRef")
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        return []
    kind = ref.get("kind") or CLUSTER_TRAINING_RUNTIME
    return [(str(kind), "" if kind == CLUSTER_TRAINING_RUNTIME else namespace_of(obj), ref["name"])]


def runtime_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """A runtime's own ``(kind, namespace, name)``, as :func:`trainjob_runtime` names it."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    return kind, "" if kind == CLUSTER_TRAINING_RUNTIME else str(meta.get("namespace") or ""), str(meta.get("name"))


# --- what is watched, and the keys an event touches (pure) -------------------------------------------

def watched_resources(config: policylib.Config) -> tuple[Any, ...]:
    """Deployments and HPAs always, StatefulSets unless ``statefulSets.enabled`` is false (rule A4); Kubeflow
    jobs, JobSets, TrainJobs with Trainer's runtimes (rule T7) and PodGroups only for gang method podgroup (most
    clusters serve neither, and there is nothing to write for them otherwise), and with Kubernetes' own Workload and
    PodGroup for method workload."""
    base = (kube.DEPLOYMENTS, kube.HPAS) + ((kube.STATEFULSETS,) if config.statefulSets.enabled else ())
    jobs = kube.GANG_JOBS + kube.TRAINING_RUNTIMES
    podgroups = config.gang.enabled and config.gang.method == "podgroup"
    if config.gang.enabled and config.gang.method == "workload":   # rule G19: Kubernetes' own Workload, PodGroup
        return base + jobs + kube.NATIVE_GANG
    if podgroups and config.gang.scheduler == "volcano":   # rule G21
        return base + jobs + (kube.VOLCANO_PODGROUPS,)
    return base + jobs + kube.PODGROUPS if podgroups else base


def controller_owners(obj: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(apiVersion, kind, namespace, name) of the object's controller owner: its key, and its index value."""
    ns = namespace_of(obj)
    return [(r["apiVersion"], r["kind"], ns, r["name"])
            for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")
            and all(isinstance(r.get(k), str) for k in ("apiVersion", "kind", "name"))]


def new_store(res: kube.Resource) -> Store:
    """The store of one watched resource, holding only what the planners read (rule W7)."""
    if res == kube.HPAS:
        return Store({"target": hpa_targets}, project=project)
    if res.kind in ("PodGroup", "Workload"):
        return Store({"owner": controller_owners}, project=project)
    if res == kube.TRAINJOBS:   # rule T7: a runtime's change replans the TrainJobs that name it
        return Store({"runtime": trainjob_runtime}, project=project)
    return Store(project=project)


def event_keys(event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[ObjectKey]:
    """The keys one watch event touches (pure): a Deployment's or a StatefulSet's own key (a deletion too: the
    worker forgets it), an HPA's targets before and after (a Deployment or a StatefulSet), a PodGroup's owning
    job, a Kubeflow job or a JobSet."""
    kind, ns, name = obj.get("kind"), namespace_of(obj), (obj.get("metadata") or {}).get("name", "")
    if kind in SPREAD_KINDS:
        return [(DEPLOYMENT, str(kind), ns, name)]
    if kind == "HorizontalPodAutoscaler":
        keys: list[ObjectKey] = []
        for hpa in (obj, old):
            for target_ns, target in hpa_targets(hpa or {}):
                target_kind, target_name = scale_target_of(target)
                keys.append((DEPLOYMENT, target_kind, target_ns, target_name))
        return keys
    if kind in ("PodGroup", "Workload"):
        return controller_owners(obj) + controller_owners(old or {})
    if is_gang_kind(kind) and event_type != "DELETED":
        return [(str(obj.get("apiVersion")), str(kind), ns, name)]
    return []


def runtime_event_keys(trainjobs: Store | None) -> Callable[[str, dict[str, Any], dict[str, Any] | None],
                                                             list[ObjectKey]]:
    """:func:`event_keys`, and for a Trainer runtime's event the TrainJobs that name it (rule T7: read from the
    TrainJob store's index; a TrainJob admitted before the controller's watch brought its runtime gets its PodGroup
    once it does)."""
    def keys(event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[ObjectKey]:
        if obj.get("kind") not in RUNTIME_KINDS or obj.get("apiVersion") != kube.TRAINJOBS.api_version:
            return event_keys(event_type, obj, old)
        if trainjobs is None or event_type == "DELETED":
            return []
        return [(kube.TRAINJOBS.api_version, kube.TRAINJOBS.kind, namespace_of(j), j["metadata"]["name"])
                for j in trainjobs.by_index("runtime", runtime_key(obj))]
    return keys


def reconciled_resources(resources: tuple[kube.Resource, ...]) -> tuple[kube.Resource, ...]:
    """The watched resources whose every object is a key of the reconciler: Deployments, StatefulSets, Kubeflow
    jobs, JobSets and TrainJobs."""
    return tuple(r for r in resources if r.kind in SPREAD_KINDS or is_gang_kind(r.kind))


def chain(first: Handler, then: Handler) -> Handler:
    def handle(event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        first(event_type, obj, old)
        then(event_type, obj, old)
    return handle


# --- the controller ------------------------------------------------------------------------------

@dataclass
class Options:
    config: policylib.Config
    namespace: str = INSTALL_NAMESPACE          # where the Lease lives
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{int(time.time() * 1000) % 100000}")
    dry_run: bool = False
    planners: tuple[Any, ...] = ()
    #: Rule W5: the MutatingWebhookConfiguration whose selectors say which objects the controller acts on.
    webhook_configuration: str = WEBHOOK_CONFIGURATION
    #: The controller's own Pod (``$POD_NAME``): its Deployment gets the Events about the scope (rule W5).
    pod: str = ""


class Controller:
    """One replica of the controller: the election, the informers, the reconciler of Deployments and gang jobs
    and any reconciler added with :meth:`add`, each with its generic :class:`~.runtime.Worker`, run by one
    :class:`~.runtime.Manager`; :meth:`run` blocks until ``stop`` is set."""

    def __init__(self, api: kube.Api, options: Options, clock: Callable[[], dt.datetime] | None = None):
        self.api = api
        self.options = options
        self.config = options.config
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self.metrics = ControllerMetrics()
        self.stop = threading.Event()
        self.elector = LeaderElector(api, options.namespace, self.config.controller.leaseName, options.identity,
                                     self.config.controller.leaseDurationSeconds, self.metrics, self.clock)
        self.manager = Manager(self.elector, self.stop)
        self.recorder = EventRecorder(api, options.identity, self.metrics, self.clock)
        self.resources = watched_resources(self.config)
        #: Rules W5, W6: the webhook configuration and the Namespaces, for the scope.
        scope_resources = (kube.NAMESPACES, kube.webhook_configuration(options.webhook_configuration))
        self.stores: dict[kube.Resource, Store] = {res: new_store(res) for res in self.resources + scope_resources}
        self.reconciler = Reconciler(
            api, self.config, namespace=options.namespace, webhook_configuration=options.webhook_configuration,
            stores=self.stores, reflectors=[], reconciled=reconciled_resources(self.resources),
            event_keys=runtime_event_keys(self.stores.get(kube.TRAINJOBS)), planners=options.planners or PLANNERS,
            metrics=self.metrics, recorder=self.recorder, leading=lambda: self.leading, dry_run=self.dry_run, pod=options.pod)
        self.reconciler.reflectors.extend(self.informer(res, self.reconciler.on_event)
                                          for res in self.resources + scope_resources)
        self.workers: list[Worker[Any]] = []
        self.worker = self.add(self.reconciler, latency=self.metrics.latency, after=self.reconciler.worked)

    def informer(self, res: kube.Resource, handler: Handler, store: Store | None = None) -> Reflector:
        """A reflector of ``res`` into ``store`` (by default the controller's store for ``res``), calling
        ``handler`` on every change; it reports to the controller's metrics."""
        store = store if store is not None else self.stores[res]
        return Reflector(self.api, res, store, handler, self.metrics,
                         watch_seconds=min(self.config.controller.resyncSeconds, 300))

    def follow(self, res: kube.Resource, handler: Handler) -> None:
        """Call ``handler`` too on every change of ``res`` that the controller's own informer sees (a reconciler
        that reads the controller's store of ``res`` and must hear of its changes: one watch, one store)."""
        for r in self.reconciler.reflectors:
            if r.res == res:
                r.handler = chain(r.handler, handler)

    def add(self, reconciler: KeyReconciler[Any], *, synced: bool = True, error_stage: str = "reconcile",
            latency: Histogram | None = None, after: Callable[[Any], None] | None = None) -> Worker[Any]:
        """Run ``reconciler`` under the Lease with a worker of its own, its reflectors from start to stop (before
        :meth:`run`). ``synced``: its worker starts once every reflector of the controller has listed (the
        certificates, which read their objects themselves, need not wait)."""
        for r in reconciler.reflectors:
            self.manager.add(Task(f"watch-{r.res.plural}", r.run))
        worker = Worker(reconciler, self.metrics, resync_seconds=self.config.controller.resyncSeconds,
                        sources=(lambda: self.reflectors) if synced else list, error_stage=error_stage,
                        latency=latency, after=after)
        self.workers.append(worker)
        self.manager.add(worker)
        return worker

    @property
    def reflectors(self) -> list[Reflector]:
        return [r for w in self.workers for r in w.reconciler.reflectors]

    @property
    def leading(self) -> bool:
        """We hold the Lease and our last renewal has not run out: checked before every write."""
        return self.elector.leading

    @property
    def not_leading(self) -> str:
        return self.elector.not_leading

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run or self.config.controller.dryRun

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    @property
    def ready(self) -> bool:
        """Rule W8: a leader is ready once its first sync is done, a standby once it has listed."""
        return self.reconciler.first_sync.is_set() if self.leading else self.synced

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def sync_progress(self) -> dict[str, Any]:
        return self.reconciler.sync_progress()

    def pod_costs(self) -> PodCosts:
        """Rule S23: the pod deletion costs, reading the controller's Deployment store and scope."""
        costs = PodCosts(self.api, self.config, deployments=self.stores[kube.DEPLOYMENTS], informer=self.informer,
                         in_scope=self.reconciler.scopes.in_scope, ready=lambda: self.synced,
                         leading=lambda: self.leading, dry_run=self.dry_run, metrics=self.metrics,
                         recorder=self.recorder)
        self.follow(kube.DEPLOYMENTS, costs.on_deployment)
        return costs

    def statefulset_spread(self, costs: PodCosts) -> StatefulSetSpread:
        """Rule S28 for StatefulSets: the controller's StatefulSet store and scope, the Nodes as ``costs`` read them."""
        spread = StatefulSetSpread(statefulsets=self.stores[kube.STATEFULSETS], nodes=costs.spread_nodes,
                                   informer=self.informer, in_scope=self.reconciler.scopes.in_scope,
                                   ready=lambda: self.synced, leading=lambda: self.leading, dry_run=self.dry_run,
                                   metrics=self.metrics, recorder=self.recorder)
        self.follow(kube.STATEFULSETS, spread.on_statefulset)
        costs.node_listeners.append(spread.on_node_labels)
        return spread

    def run(self) -> None:
        """Lead, follow the watches, run the workers while leading; give the Lease up when stopped."""
        self.manager.run()


def run_controller(config_source: str | None = None, *, dry_run: bool = False, namespace: str | None = None,
                   kubeconfig: str | None = None, context: str | None = None, host: str = ANY_ADDRESS,
                   port: int = CONTROLLER_PORT, certificates: Any = None,
                   webhook_configuration: str = WEBHOOK_CONFIGURATION) -> int:
    """Entry point of ``python -m webhook controller``: blocks until SIGTERM or SIGINT. ``certificates``:
    a :class:`webhook.controller.certplan.Settings` to rotate the webhook's certificates while leading."""
    import os
    import signal

    config = policylib.load_config(config_source)
    namespace = namespace or os.environ.get("POD_NAMESPACE") or INSTALL_NAMESPACE
    identity = os.environ.get("POD_NAME") or Options(config).identity
    api = kube.Api(kube.api_client(context, kubeconfig))
    c = Controller(api, Options(config, namespace=namespace, identity=identity, dry_run=dry_run,
                                webhook_configuration=webhook_configuration, pod=os.environ.get("POD_NAME", "")))
    server = serve_health(c, host, port)
    if certificates is not None:  # the leader keeps the webhook's certificates (webhook/controller/certrotator.py)
        c.add(Rotator(api, certificates, c.metrics.registry, queue_metrics=c.metrics.queue), synced=False)
    if config.controller.spreadAwareScaleDown:   # rule S23: the pod deletion costs, under the same Lease
        costs = c.pod_costs()
        c.add(costs, error_stage="podcost")
        if config.statefulSets.enabled:   # rule S28 for StatefulSets, on the Nodes the pod costs read
            c.add(c.statefulset_spread(costs), error_stage="stsspread")
    signal.signal(signal.SIGTERM, lambda *_: c.stop.set())
    signal.signal(signal.SIGINT, lambda *_: c.stop.set())
    log.info("controller started", extra={"identity": identity, "namespace": namespace, "dry_run": c.dry_run,
                                            "max_concurrent_rollouts": config.controller.maxConcurrentRollouts})
    try:
        c.run()
    finally:
        server.shutdown()
    return 0
