"""``python -m webhook controller``: keep existing objects right (the specification's rules on
rollouts and existing Deployments, docs/specification.md; gang PodGroups).

The imperative shell around :func:`policylib.plan.plan`, in client-go's parts (docs/architecture.md,
"The controller"):

- :mod:`webhook.informer`: one ``Reflector`` per watched resource lists, then watches into its
  ``Store`` (its one writer), resumes from the last version seen and lists again only on 410 Gone;
- :mod:`webhook.workqueue`: the keyed ``WorkQueue`` with client-go's default rate limiter and metrics;
- :mod:`.leaderelection`: only the holder of a ``coordination.k8s.io/v1`` Lease writes, and it gives
  the Lease up on SIGTERM;
- :mod:`.events`: every write is recorded as an ``events.k8s.io/v1`` Event, best effort;
- :mod:`.reconciler`: event handlers queue keys; one worker plans and writes them (guarded JSON
  patches: a 409 re-reads and plans again), owns every piece of per-key state (the rollout gate of
  :mod:`.rollouts`, the notices of rules S19/S20, what it just wrote) and recovers it itself;
- :mod:`.health`: ``/healthz``, ``/readyz`` (rule W8), ``/metrics``;
- this module wires them: :class:`Controller` runs the election, the reflectors and every
  :class:`Component`'s worker (the reconciler is the first; another is added with
  :meth:`Controller.add`), all under the one Lease. ``dryRun`` logs the plans and writes nothing.
"""
from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from prometheus_client import CollectorRegistry

import policylib
from policylib.constants import ANY_ADDRESS, CONTROLLER_PORT, INSTALL_NAMESPACE, WEBHOOK_CONFIGURATION
from policylib.facts import hpa_targets, namespace_of
from policylib.plan import PLANNERS
from policylib.projection import project
from policylib.shell import kube

from ..informer import Handler, Reflector, Store
from .events import EventRecorder
from .health import serve_health
from .leaderelection import LeaderElector
from .metrics import ControllerMetrics
from .reconciler import Reconciler
from .rollouts import Key

log = logging.getLogger(__name__)
KUBEFLOW_KINDS = frozenset(r.kind for r in kube.KUBEFLOW_JOBS)
DEPLOYMENT = kube.DEPLOYMENTS.api_version


def is_kubeflow_kind(kind: object) -> bool:
    return kind in KUBEFLOW_KINDS


# --- what is watched, and the keys an event touches (pure) -------------------------------------------

def watched_resources(config: policylib.Config) -> tuple[Any, ...]:
    """Deployments and HPAs always; Kubeflow jobs and PodGroups only for gang method podgroup
    (most clusters serve neither, and there is nothing to write for them otherwise)."""
    base = (kube.DEPLOYMENTS, kube.HPAS)
    podgroups = config.gang.enabled and config.gang.method == "podgroup"
    if config.gang.enabled and config.gang.method == "workload":   # rule G19: Kubernetes' own Workload, PodGroup
        return base + kube.KUBEFLOW_JOBS + kube.NATIVE_GANG
    if podgroups and config.gang.scheduler == "volcano":   # rule G21
        return base + kube.KUBEFLOW_JOBS + (kube.VOLCANO_PODGROUPS,)
    return base + kube.KUBEFLOW_JOBS + kube.PODGROUPS if podgroups else base


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
    return Store(project=project)


def event_keys(event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[Key]:
    """The keys one watch event touches (pure): a Deployment's own key (a deletion too: the worker
    forgets it), an HPA's targets before and after, a PodGroup's owning job, a Kubeflow job."""
    kind, ns, name = obj.get("kind"), namespace_of(obj), (obj.get("metadata") or {}).get("name", "")
    if kind == "Deployment":
        return [(DEPLOYMENT, "Deployment", ns, name)]
    if kind == "HorizontalPodAutoscaler":
        return [(DEPLOYMENT, "Deployment", *t) for hpa in (obj, old) for t in hpa_targets(hpa or {})]
    if kind in ("PodGroup", "Workload"):
        return controller_owners(obj) + controller_owners(old or {})
    if is_kubeflow_kind(kind) and event_type != "DELETED":
        return [(str(obj.get("apiVersion")), str(kind), ns, name)]
    return []


def reconciled_resources(resources: tuple[kube.Resource, ...]) -> tuple[kube.Resource, ...]:
    """The watched resources whose every object is a key of the reconciler: Deployments and Kubeflow jobs."""
    return tuple(r for r in resources if r.kind == "Deployment" or is_kubeflow_kind(r.kind))


def chain(first: Handler, then: Handler) -> Handler:
    def handle(event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        first(event_type, obj, old)
        then(event_type, obj, old)
    return handle


# --- the controller ------------------------------------------------------------------------------

class Component(Protocol):
    """A worker the controller runs under its Lease, beside the reconciler: its reflectors are started
    with the controller's and count toward ``synced``; its worker thread calls :meth:`process_next`
    until the controller stops. The run loop calls :meth:`started_leading` when this replica takes the
    lead (queue every key; the worker recovers its own state before its next key) and :meth:`resync`
    every ``controller.resyncSeconds`` while it leads, and :meth:`shutdown` when it stops. It writes
    only while ``Controller.leading``."""

    name: str
    reflectors: list[Reflector]

    def started_leading(self) -> None: ...

    def resync(self) -> None: ...

    def process_next(self, timeout: float | None = None) -> bool: ...

    def shutdown(self) -> None:
        """The controller stops: hand out no more keys (a worker waiting in ``process_next`` returns)."""


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
    """One replica of the controller: the election, the informers, the reconciler and any added
    :class:`Component`; :meth:`run` blocks until ``stop`` is set."""

    def __init__(self, api: kube.Api, options: Options, clock: Callable[[], dt.datetime] | None = None):
        self.api = api
        self.options = options
        self.config = options.config
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self.metrics = ControllerMetrics()
        self.stop = threading.Event()
        self.elector = LeaderElector(api, options.namespace, self.config.controller.leaseName, options.identity,
                                     self.config.controller.leaseDurationSeconds, self.metrics, self.clock)
        self.recorder = EventRecorder(api, options.identity, self.metrics, self.clock)
        self.resources = watched_resources(self.config)
        #: Rules W5, W6: the webhook configuration and the Namespaces, for the scope.
        scope_resources = (kube.NAMESPACES, kube.webhook_configuration(options.webhook_configuration))
        self.stores: dict[kube.Resource, Store] = {res: new_store(res) for res in self.resources + scope_resources}
        self.reconciler = Reconciler(
            api, self.config, namespace=options.namespace, webhook_configuration=options.webhook_configuration,
            stores=self.stores, reflectors=[], reconciled=reconciled_resources(self.resources),
            event_keys=event_keys, planners=options.planners or PLANNERS, metrics=self.metrics,
            recorder=self.recorder, leading=lambda: self.leading, dry_run=self.dry_run, pod=options.pod)
        self.reconciler.reflectors.extend(self.informer(res, self.reconciler.on_event)
                                          for res in self.resources + scope_resources)
        self.components: list[Component] = [self.reconciler]

    def informer(self, res: kube.Resource, handler: Handler, store: Store | None = None) -> Reflector:
        """A reflector of ``res`` into ``store`` (by default the controller's store for ``res``), calling
        ``handler`` on every change; it reports to the controller's metrics."""
        store = store if store is not None else self.stores[res]
        return Reflector(self.api, res, store, handler, self.metrics,
                         watch_seconds=min(self.config.controller.resyncSeconds, 300))

    def follow(self, res: kube.Resource, handler: Handler) -> None:
        """Call ``handler`` too on every change of ``res`` that the controller's own informer sees (a component
        that reads the controller's store of ``res`` and must hear of its changes: one watch, one store)."""
        for r in self.reconciler.reflectors:
            if r.res == res:
                r.handler = chain(r.handler, handler)

    def add(self, component: Component) -> None:
        """Run ``component`` beside the reconciler, under the same Lease (before :meth:`run`)."""
        self.components.append(component)

    @property
    def reflectors(self) -> list[Reflector]:
        return [r for c in self.components for r in c.reflectors]

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

    def _work(self, component: Component) -> None:
        while not self.stop.is_set():
            component.process_next(timeout=1.0)

    def run(self) -> None:
        """Lead, follow the watches, run the workers; give the Lease up when stopped."""
        lease = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True, name="lease")
        threads = [lease]
        threads += [threading.Thread(target=self._work, args=(c,), daemon=True, name=f"worker-{c.name}")
                    for c in self.components]
        threads += [threading.Thread(target=r.run, args=(self.stop,), daemon=True, name=f"watch-{r.res.plural}")
                    for r in self.reflectors]
        for t in threads:
            t.start()
        was_leading, next_resync = False, 0.0
        while not self.stop.wait(0.5):
            if not self.synced:
                continue
            now = time.monotonic()
            if self.leading and not was_leading:
                for c in self.components:
                    c.started_leading()
                next_resync = now + self.config.controller.resyncSeconds
            elif self.leading and now >= next_resync:
                for c in self.components:
                    c.resync()
                next_resync = now + self.config.controller.resyncSeconds
            was_leading = self.leading
        for c in self.components:
            c.shutdown()
        # The round in flight ends first (client-go releases from the loop that renews, once it has ended): a
        # renewal committed after the release would make the release a 409 and keep the Lease held, and a round
        # that read the released Lease would take it back. A round still unanswered at its renewal's deadline
        # could not keep this replica leading anyway: it is not waited for longer.
        lease.join(timeout=self.elector.stop_wait)
        self.elector.release()


def run_controller(config_source: str | None = None, *, dry_run: bool = False, namespace: str | None = None,
                   kubeconfig: str | None = None, context: str | None = None, host: str = ANY_ADDRESS,
                   port: int = CONTROLLER_PORT, certificates: Any = None,
                   webhook_configuration: str = WEBHOOK_CONFIGURATION) -> int:
    """Entry point of ``python -m webhook controller``: blocks until SIGTERM or SIGINT. ``certificates``:
    a :class:`webhook.certrotator.Settings` to rotate the webhook's certificates while leading."""
    import os
    import signal

    config = policylib.load_config(config_source)
    namespace = namespace or os.environ.get("POD_NAMESPACE") or INSTALL_NAMESPACE
    identity = os.environ.get("POD_NAME") or Options(config).identity
    api = kube.Api(kube.api_client(context, kubeconfig))
    c = Controller(api, Options(config, namespace=namespace, identity=identity, dry_run=dry_run,
                                webhook_configuration=webhook_configuration, pod=os.environ.get("POD_NAME", "")))
    server = serve_health(c, host, port)
    if certificates is not None:  # the leader keeps the webhook's certificates (webhook/certrotator.py)
        from .. import certrotator
        certrotator.start(api, certificates, lambda: c.leading, c.stop, c.metrics.registry)
    if config.controller.spreadAwareScaleDown:   # rule S23: the pod deletion costs, under the same Lease
        from ..podcost import PodCosts
        c.add(PodCosts(c))
    signal.signal(signal.SIGTERM, lambda *_: c.stop.set())
    signal.signal(signal.SIGINT, lambda *_: c.stop.set())
    log.info("controller started", extra={"identity": identity, "namespace": namespace, "dry_run": c.dry_run,
                                            "max_concurrent_rollouts": config.controller.maxConcurrentRollouts})
    try:
        c.run()
    finally:
        server.shutdown()
    return 0
