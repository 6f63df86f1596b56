"""``python -m webhook controller``: keep existing objects right (the specification's rules on
rollouts and existing Deployments, docs/specification.md; gang PodGroups).

The imperative shell around :func:`policylib.plan.plan`, built the way client-go controllers are:

- one :class:`~webhook.informer.Reflector` per resource (Deployments, HorizontalPodAutoscalers and,
  for gang method podgroup, Kubeflow jobs and PodGroups) lists, then watches from the list's
  resourceVersion, resumes from the last version seen, and lists again only on 410 Gone, with a
  DELETED event for everything that vanished in the gap; an event older than the stored object is
  ignored;
- event handlers only compute the keys an event touches and put them on a
  :class:`~webhook.informer.WorkQueue` (duplicates collapse); they write no other state. One worker
  owns the rest: it observes the object (a finished rollout frees the gate), plans one key at a
  time with the facts it needs from indexes (HPAs by target, PodGroups by owner), so the work per
  event does not grow with the cluster; a failed write is retried with capped exponential backoff;
  every ``controller.resyncSeconds`` every key is queued again;
- only the holder of a ``coordination.k8s.io/v1`` Lease writes, and it gives the Lease up on SIGTERM;
- every write is a JSON patch carrying the object's ``resourceVersion``: a concurrent change answers
  409 Conflict, the controller re-reads the object and plans it again, never clobbering;
- at most ``controller.maxConcurrentRollouts`` Deployments it rolled are rolling at once; the rest
  are deferred (:class:`Rollouts`, the worker's, behind one lock) and queued again when one finishes;
- every write is recorded as an ``events.k8s.io/v1`` Event on the object written (reason
  ``SpreadRewritten`` for a Deployment, ``PodGroupCreated``/``PodGroupUpdated`` for a PodGroup; the note
  is the write's reasons), best effort: a failed Event never fails or retries the write;
- per Deployment key the worker also keeps notices (rules S19, S20): a rewrite held for the next
  rollout (``SpreadPending``, Normal) and a Deployment stored without our record annotations
  (``AdmittedWithoutPolicy``, Warning: admitted while the webhook was unreachable), each an Event once
  per state and a gauge; a write an admission webhook undid is not retried until the object changes
  or the next resync;
- ``dryRun`` logs the plan and writes nothing (no Events either).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

import policylib
from policylib.facts import ClusterFacts, namespace_of
from policylib.plan import PLANNERS, UNRECORDED_REASON, Write, plan
from policylib.projection import project
from policylib.scope import (
    NAMESPACE_NAME_LABEL,
    WEBHOOK_CONFIGURATION,
    Scope,
    default_scope,
    scope_fields,
    scope_from_configuration,
)
from policylib.shell import kube
from policylib.spread import RECORD_REPLICAS

from .cache import hpa_targets
from .informer import Handler, Reflector, ReflectorMetrics, Store, WorkQueue

log = logging.getLogger("policylib.controller")
KUBEFLOW_KINDS = frozenset(r.kind for r in kube.KUBEFLOW_JOBS)
DEPLOYMENT = kube.DEPLOYMENTS.api_version


def is_kubeflow_kind(kind: object) -> bool:
    return kind in KUBEFLOW_KINDS


# --- leader election (pure) ------------------------------------------------------------

def micro_time(now: dt.datetime) -> str:
    """metav1.MicroTime as the API serialises it."""
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_record(lease: dict[str, Any] | None) -> tuple[Any, ...]:
    """What identifies one state of the Lease: a change means its holder is alive."""
    spec = (lease or {}).get("spec") or {}
    return spec.get("holderIdentity"), spec.get("renewTime"), ((lease or {}).get("metadata") or {}).get("resourceVersion")


def lease_decision(lease: dict[str, Any] | None, identity: str, now: float, observed_at: float) -> str:
    """What to do with the Lease, as client-go's leaderelection decides it.

    ``create`` when there is none; ``renew`` when we hold it; ``acquire`` when
    nobody holds it, or when its record has not changed for longer than
    ``leaseDurationSeconds`` since this replica first saw it (``observed_at``,
    local monotonic time: like client-go, expiry never compares another
    replica's clock with ours); otherwise ``wait``.
    """
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if holder == identity:
        return "renew"
    duration = spec.get("leaseDurationSeconds") or 15
    if not holder or observed_at + duration < now:
        return "acquire"
    return "wait"


def lease_spec(lease: dict[str, Any] | None, identity: str, now: dt.datetime, duration: int, decision: str) -> dict[str, Any]:
    """The Lease spec to write for ``decision``; ``now`` is wall-clock time for the record."""
    spec = dict((lease or {}).get("spec") or {})
    spec.update(holderIdentity=identity, leaseDurationSeconds=duration, renewTime=micro_time(now))
    if decision in ("create", "acquire"):
        spec["acquireTime"] = micro_time(now)
        spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + (1 if decision == "acquire" else 0)
    return spec


# --- events (pure) -------------------------------------------------------------------------------

REPORTING_CONTROLLER = "policylib.io/controller"
EVENT_ACTION = "Rewrite"
#: The API server's limits on an events.k8s.io/v1 Event (pkg/apis/core/validation/events.go): ``note``
#: at most 1 KiB (bytes), ``reportingInstance``, ``action`` and ``reason`` at most 128 characters.
NOTE_LIMIT = 1024
FIELD_LIMIT = 128


def event_reason(write: Write) -> str:
    """``SpreadRewritten`` for a Deployment; ``PodGroupCreated`` / ``PodGroupUpdated`` for a PodGroup."""
    if write.kind == "PodGroup":
        return "PodGroupCreated" if write.action == "create" else "PodGroupUpdated"
    if write.kind == "Workload" and write.action == "create":
        return "WorkloadCreated"
    if write.kind == "Deployment" and write.pending:
        return "SpreadPending"
    if write.kind == "Deployment":
        return "SpreadRewritten"
    return f"{write.kind}Rewritten"[:FIELD_LIMIT]


def event_note(reasons: list[str], limit: int = NOTE_LIMIT) -> str:
    """The write's reasons joined with ``; ``, cut to ``limit`` UTF-8 bytes (ending ``...`` when cut)."""
    note = "; ".join(reasons)
    data = note.encode("utf-8")
    if len(data) <= limit:
        return note
    return data[:limit - 3].decode("utf-8", "ignore") + "..."


def event_for(write: Write, written: dict[str, Any] | None, identity: str, now: dt.datetime, unique: int) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event that records ``write``, regarding the object as the write left it
    (``written``: the API's answer, which carries the uid and the new resourceVersion). ``unique`` makes
    the name unique, as client-go's ``<object name>.<hex nanoseconds>``."""
    meta = (written or {}).get("metadata") or {}
    regarding = {"apiVersion": (written or {}).get("apiVersion") or write.api_version, "kind": write.kind,
                 "name": write.name, "namespace": write.namespace, "uid": meta.get("uid"),
                 "resourceVersion": meta.get("resourceVersion")}
    suffix = f".{unique:x}"
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": write.name[:253 - len(suffix)].rstrip("-.") + suffix, "namespace": write.namespace},
        "eventTime": micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": identity[:FIELD_LIMIT],
        "action": EVENT_ACTION,
        "reason": event_reason(write),
        "type": "Normal",
        "regarding": {k: v for k, v in regarding.items() if v},
        "note": event_note(write.reasons),
    }


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


# --- rollout gate -------------------------------------------------------------------------

Key = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name) of a Deployment or a Kubeflow job


def released_spec(lease: dict[str, Any]) -> dict[str, Any]:
    """The Lease spec that gives leadership up at once, as client-go's ``ReleaseOnCancel`` writes it:
    no holder, a one-second duration."""
    spec = dict(lease.get("spec") or {})
    now = micro_time(dt.datetime.now(dt.timezone.utc))
    spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now, acquireTime=now)
    return spec


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

    Only the worker changes it (in :meth:`Controller.reconcile`; :meth:`recover` before the worker
    starts on a new leadership), and every change is one locked step, so a key is deferred and queued
    again as one decision: none is lost between the two (client-go's rule: event handlers only queue).
    """

    def __init__(self, limit: int) -> None:
        self.gate = RolloutGate(limit)
        self.deferred: set[Key] = set()
        self._lock = threading.Lock()

    def observe(self, key: Key, deployment: dict[str, Any] | None) -> list[Key]:
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

    def admit(self, key: Key, gate_key: tuple[str, str]) -> bool:
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


# --- metrics -----------------------------------------------------------------------------------

def resident_bytes() -> float:
    """This process's resident memory (``/proc/self/statm``), 0 where there is none to read."""
    import os
    try:
        with open("/proc/self/statm") as f:
            return float(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        return 0.0


def memory_limit_bytes(paths: tuple[str, ...] = ("/sys/fs/cgroup/memory.max",
                                                 "/sys/fs/cgroup/memory/memory.limit_in_bytes")) -> float:
    """The container's memory limit (cgroup v2, then v1); 0 when unlimited or unknown."""
    for path in paths:
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 2 ** 60:   # v1 writes a huge number for "no limit", v2 "max"
            return float(raw)
        return 0.0
    return 0.0


class ControllerMetrics(ReflectorMetrics):
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter("policylib_controller_reconciles",
                                  "Plans made: trigger=key for one object, resync/leader for a pass that queues every key",
                                  ["trigger"], registry=self.registry)
        self.writes = Counter("policylib_controller_writes", "Writes made (or logged in dry-run)",
                              ["kind", "action", "rollout", "dry_run"], registry=self.registry)
        self.conflicts = Counter("policylib_controller_conflicts", "409 Conflict answers, planned again on fresh state",
                                 registry=self.registry)
        self.errors = Counter("policylib_controller_errors", "Failed API calls and unplannable objects",
                              ["stage"], registry=self.registry)
        self.retries = Counter("policylib_controller_retries", "Keys queued again after a failed write (with backoff)",
                               registry=self.registry)
        self.deferred = Counter("policylib_controller_deferred_rollouts",
                                "Rollouts held back by maxConcurrentRollouts", registry=self.registry)
        self.leader = Gauge("policylib_controller_leader", "1 while this replica holds the Lease", registry=self.registry)
        self.rolling = Gauge("policylib_controller_rolling", "Deployments rolled by us still rolling",
                             registry=self.registry)
        self.queue_depth = Gauge("policylib_controller_queue_depth", "Keys waiting to be reconciled",
                                 registry=self.registry)
        self.latency = Histogram("policylib_controller_reconcile_seconds", "Time to plan and write one key",
                                 buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=self.registry)
        self.watch_restarts = Counter("policylib_controller_watch_restarts", "Watches started again (ended or failed)",
                                      ["resource"], registry=self.registry)
        self.relists = Counter("policylib_controller_relists", "Lists after 410 Gone", ["resource"],
                               registry=self.registry)
        self.pending = Gauge("policylib_controller_pending_rewrites",
                             "Deployments whose new constraints wait for their next rollout (rewrite: OnNextRollout)",
                             registry=self.registry)
        self.unrecorded = Gauge("policylib_controller_unrecorded_deployments",
                                "Managed Deployments without policylib's record annotations: admitted while the "
                                "webhook was unreachable (fail-open), or created before the install",
                                registry=self.registry)
        self.memory = Gauge("policylib_controller_memory_bytes", "Resident memory of this replica (VmRSS)",
                            registry=self.registry)
        self.memory.set_function(resident_bytes)
        self.memory_limit = Gauge("policylib_controller_memory_limit_bytes",
                                  "This replica's memory limit (its cgroup's; 0 without one)", registry=self.registry)
        self.memory_limit.set_function(memory_limit_bytes)
        self.unrecorded_seen = Counter("policylib_controller_unrecorded_detected",
                                       "Managed Deployments found without policylib's record (each once)",
                                       registry=self.registry)

    def watch_restart(self, plural: str) -> None:
        self.watch_restarts.labels(plural).inc()

    def relist(self, plural: str) -> None:
        self.relists.labels(plural).inc()


# --- what is watched, and the facts it gives ---------------------------------------------------------

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


class StoreFacts(ClusterFacts):
    """The facts a plan reads, answered from the stores' indexes (nothing is copied per event)."""

    def __init__(self, stores: dict[kube.Resource, Store]):
        super().__init__()
        self.stores = stores

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        store = self.stores.get(kube.HPAS)
        return store.by_index("target", (namespace, name)) if store else []

    def podgroup(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        for res, store in self.stores.items():
            if res.kind == "PodGroup" and res.api_version == api_version:
                return store.get(namespace, name)
        return None

    def native_gang_object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        store = self.stores.get(kube.resource_for(kube.WORKLOADS.api_version, kind))
        return store.get(namespace, name) if store else None


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


# --- the controller ------------------------------------------------------------------------------

@dataclass
class Options:
    config: policylib.Config
    namespace: str = "policylib-system"          # where the Lease lives
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{int(time.time() * 1000) % 100000}")
    dry_run: bool = False
    planners: tuple[Any, ...] = ()
    #: Rule W5: the MutatingWebhookConfiguration whose selectors say which objects the controller acts on.
    webhook_configuration: str = WEBHOOK_CONFIGURATION


class Controller:
    """One replica of the controller; :meth:`run` blocks until ``stop`` is set.

    Tests drive it without threads: :meth:`try_lead`, :meth:`resync` (list everything, queue every
    key, work the queue off) and :meth:`handle` (one watch event, then work the queue off).
    """

    def __init__(self, api: kube.Api, options: Options, clock: Callable[[], dt.datetime] | None = None):
        self.api = api
        self.options = options
        self.config = options.config
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self.metrics = ControllerMetrics()
        self.resources = watched_resources(self.config)
        #: Rules W5, W6: the webhook configuration and the Namespaces, for the scope.
        self.scope_resources = (kube.NAMESPACES, kube.webhook_configuration(options.webhook_configuration))
        self.stores: dict[kube.Resource, Store] = {res: new_store(res)
                                                   for res in self.resources + self.scope_resources}
        self.facts = StoreFacts(self.stores)
        self.reflectors = [Reflector(api, res, self.stores[res], self._handler(res), self.metrics,
                                     watch_seconds=min(self.config.controller.resyncSeconds, 300))
                           for res in self.resources + self.scope_resources]
        self.queue = WorkQueue()
        self.rollouts = Rollouts(self.config.controller.maxConcurrentRollouts)
        self.stop = threading.Event()
        self.lease_deadline = 0.0          # monotonic time until which our last renewal holds
        self.observed: tuple[Any, ...] = (None, 0.0)  # (Lease record, monotonic time first seen)
        self.lease: dict[str, Any] | None = None      # the Lease as we last wrote it
        self.planners = options.planners or PLANNERS
        #: Rules S19, S20: what each Deployment key was last noticed for (pending note, unrecorded), with
        #: its Event recorded once per state; the gauges count these.
        self.notices: dict[Key, dict[str, str]] = {}
        #: How many of ``notices`` hold each kind of notice, kept as they change (the gauges' values: a sum
        #: over every notice per key made the initial sync quadratic in the Deployments).
        self.notice_counts: dict[str, int] = {"pending": 0, "unrecorded": 0}
        #: Keys whose last write an admission webhook undid, with the resourceVersion it left (not retried
        #: until the object changes or the next resync).
        self.undone: dict[Key, str | None] = {}
        #: Why this replica cannot lead, when it knows (shown by /readyz).
        self.not_leading = ""
        #: Rule G20: the jobs (key, uid) already told by a Warning Event that the API server does not serve
        #: scheduling.k8s.io/v1alpha2 (one Event per job, not one per resync).
        self.unserved_told: set[tuple[Key, str]] = set()
        #: The first sync (rule W8): every key queued on taking the lead planned once. ``to_plan`` keys
        #: were queued then, ``planned`` of them are done; /readyz reports both.
        self.first_sync = threading.Event()
        self.to_plan = 0
        self.planned = 0
        #: Resyncs queued (counted by the resync's thread) and the count the worker last acted on.
        self._resyncs = 0
        self._resyncs_seen = 0
        #: The scope as last built, and the webhook configuration's resourceVersion it was built from.
        self._scope: tuple[str | None, Scope] | None = None

    @property
    def leading(self) -> bool:
        """We hold the Lease and our last renewal has not run out: checked before every write."""
        return time.monotonic() < self.lease_deadline

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run or self.config.controller.dryRun

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    # leader election -------------------------------------------------------------------
    def try_lead(self) -> bool:
        """One leader-election round: create, acquire, renew or wait. Returns whether we lead."""
        name = self.config.controller.leaseName
        duration = self.config.controller.leaseDurationSeconds
        started = time.monotonic()
        try:
            lease = self.api.get(kube.LEASES, self.options.namespace, name)
        except kube.NotFound:
            lease = None
        record = lease_record(lease)
        if record != self.observed[0]:
            self.observed = (record, started)
        decision = lease_decision(lease, self.options.identity, started, self.observed[1])
        if decision == "wait":
            self._set_leading(False)
            return False
        spec = lease_spec(lease, self.options.identity, self.clock(), duration, decision)
        try:
            if decision == "create":
                self.lease = self.api.create(kube.LEASES, self.options.namespace, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": self.options.namespace}, "spec": spec})
            else:  # carries metadata.resourceVersion: a racing update gets 409
                assert lease is not None  # decision "update" means a Lease was read
                self.lease = self.api.update(kube.LEASES, self.options.namespace, name, dict(lease, spec=spec))
            won = True
        except kube.Conflict:
            won = False
        except kube.NotFound:
            self.metrics.errors.labels("lease").inc()
            self.not_leading = (f"the Lease namespace {self.options.namespace} does not exist: create it, or start "
                                "the controller with --namespace of one that does")
            log.error(json.dumps({"msg": "cannot create the Lease", "namespace": self.options.namespace,
                                  "reason": self.not_leading}))
            won = False
        except kube.ApiError:
            self.metrics.errors.labels("lease").inc()
            won = False
        if won:
            self.not_leading = ""
        # the renewal holds for a little less than the lease, counted from before the round began
        self._set_leading(won, started + duration * 2 / 3)
        return won

    def release(self) -> None:
        """Give the Lease up (SIGTERM): the next replica leads at once instead of a lease duration later."""
        if not self.leading or self.lease is None:
            return
        self._set_leading(False)
        name = self.config.controller.leaseName
        try:
            self.api.update(kube.LEASES, self.options.namespace, name, dict(self.lease, spec=released_spec(self.lease)))
            log.info(json.dumps({"msg": "released the Lease", "identity": self.options.identity}))
        except kube.ApiError as e:  # someone else holds it already, or the server is gone: nothing to give up
            log.warning(json.dumps({"msg": "could not release the Lease", "error": str(e)}))

    def _set_leading(self, leading: bool, until: float = 0.0) -> None:
        was = self.leading
        if leading != was:
            log.info(json.dumps({"msg": "leader" if leading else "not leader", "identity": self.options.identity}))
        self.lease_deadline = until if leading else 0.0
        self.metrics.leader.set(1 if leading else 0)

    # events -> keys ---------------------------------------------------------------------
    def _handler(self, res: kube.Resource) -> Handler:
        return lambda event_type, obj, old: self.on_event(event_type, obj, old)

    def on_event(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """Queue the keys an event touches: the object itself, an HPA's targets (old and new), a
        PodGroup's owning job; for the scope (rule W5) every key when the webhook configuration changes,
        a Namespace's keys when its labels change. Runs on the reflector threads: it writes nothing but
        the queue."""
        kind = obj.get("kind")
        if kind == "MutatingWebhookConfiguration" and self.leading:
            # a change the scope does not read (the caBundle the certificate rotation writes) replans nothing;
            # before every list is done the leader's pass that follows plans every key (rule W8)
            if self.synced and not (event_type == "MODIFIED" and old is not None
                                    and scope_fields(old) == scope_fields(obj)):
                self.enqueue_all("scope")
        elif kind == "Namespace" and self.leading and old is not None and event_type == "MODIFIED" and \
                (old.get("metadata") or {}).get("labels") != (obj.get("metadata") or {}).get("labels"):
            self.enqueue_namespace((obj.get("metadata") or {}).get("name", ""))
        elif self.leading:
            for key in event_keys(event_type, obj, old):
                self.queue.add(key)
        self.metrics.queue_depth.set(len(self.queue))

    def enqueue_all(self, trigger: str) -> None:
        """Queue every Deployment and job (a resync), without planning inline."""
        self.metrics.reconciles.labels(trigger).inc()
        self._resyncs += 1    # the worker forgets undone writes when it sees this (observe)
        queued = 0
        for res, store in self.stores.items():
            if res.kind == "Deployment" or is_kubeflow_kind(res.kind):
                for ns, name in store.keys():  # noqa: SIM118 -- Store.keys(), not a dict's
                    self.queue.add((res.api_version, res.kind, ns, name))
                    queued += 1
        self.metrics.queue_depth.set(len(self.queue))
        if not self.first_sync.is_set() and self.synced:   # rule W8: a pass over every store, listed whole
            self.to_plan, self.planned = queued, 0
            if not queued:
                self.first_sync.set()

    def sync_progress(self) -> dict[str, Any]:
        """Rule W8: how far the first sync is: objects listed per resource, keys planned of those queued."""
        return {"firstSync": self.first_sync.is_set(), "planned": self.planned, "toPlan": self.to_plan,
                "listed": {r.res.plural: r.listed for r in self.reflectors if r.served}}

    def enqueue_namespace(self, namespace: str) -> None:
        """Queue every Deployment and job of one namespace (its labels changed: the scope may have)."""
        for res, store in self.stores.items():
            if res.kind == "Deployment" or is_kubeflow_kind(res.kind):
                for ns, name in store.keys():  # noqa: SIM118 -- Store.keys(), not a dict's
                    if ns == namespace:
                        self.queue.add((res.api_version, res.kind, ns, name))
        self.metrics.queue_depth.set(len(self.queue))

    # the scope (rules W5, W6) -------------------------------------------------------------
    @property
    def scope_synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors if r.res in self.scope_resources)

    def scope(self) -> Scope:
        """Rule W5: the scope of the installed webhook configuration, or the default selectors of
        manifests/ when there is none; never the controller's own namespace (rule W6)."""
        name = self.options.webhook_configuration
        configuration = self.stores[self.scope_resources[1]].get("", name)
        version = (configuration or {}).get("metadata", {}).get("resourceVersion") if configuration else None
        if self._scope is not None and self._scope[0] == version:
            return self._scope[1]
        if configuration is None:
            scope = default_scope(self.options.namespace, f"no MutatingWebhookConfiguration {name} is installed")
        else:
            try:
                scope = scope_from_configuration(configuration, {self.options.namespace})
            except policylib.PolicylibError as e:   # a selector the API server would refuse: act on nothing
                log.error(json.dumps({"msg": "cannot read the webhook configuration's selectors", "error": str(e)}))
                scope = Scope((), frozenset({self.options.namespace}), f"unreadable MutatingWebhookConfiguration {name}")
        log.info(json.dumps({"msg": "scope", "source": scope.source, "excluded": sorted(scope.excluded_namespaces)}))
        self._scope = (version, scope)
        return scope

    def in_scope(self, obj: dict[str, Any]) -> bool:
        """Rules W5, W6: whether the API server sends ``obj`` to the webhook (its Namespace's labels from
        the Namespace store; one not there has only its name label)."""
        ns = namespace_of(obj)
        namespace = self.stores[kube.NAMESPACES].get("", ns)
        labels = {NAMESPACE_NAME_LABEL: ns, **(((namespace or {}).get("metadata") or {}).get("labels") or {})}
        return self.scope().admits(obj, {ns: labels})

    # reconciling one key ----------------------------------------------------------------
    def _store_for(self, api_version: str, kind: str) -> Store | None:
        for res, store in self.stores.items():
            if (res.api_version, res.kind) == (api_version, kind):
                return store
        return None

    def reconcile(self, key: Key) -> list[Write]:
        """Plan one object and make its writes; returns the writes made. Requeues on failure."""
        api_version, kind, ns, name = key
        store = self._store_for(api_version, kind)
        obj = store.get(ns, name) if store else None
        if not self.observe(key, obj) or obj is None:
            self.queue.forget(key)
            return []
        if not self.scope_synced:
            return []   # the scope is not known yet: the pass that follows the sync plans it
        self.metrics.reconciles.labels("key").inc()
        made, failed = [], False
        # rules W5, W6: outside the scope nothing is planned, written or noticed
        writes = plan([obj], self.config, planners=self.planners, facts=self.facts, only=self.in_scope)
        if kind == "Deployment":
            self.notice(key, obj, writes)
        for write in writes:
            if write.error:
                self.metrics.errors.labels("plan").inc()
                log.warning(json.dumps({"msg": "cannot plan", "object": f"{write.kind} {write.namespace}/{write.name}",
                                        "reasons": write.reasons}))
                continue
            if write.action == "none":
                continue   # a notice only (pending, unrecorded): recorded by notice()
            outcome = self.apply(key, write)
            if outcome == "written":
                made.append(write)
            elif outcome == "failed":
                failed = True
            elif outcome == "conflict":
                self.queue.add(key)  # fresh state is in the store: plan it again
                break
        if failed:
            self.metrics.retries.inc()
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
        self.metrics.rolling.set(self.rollouts.rolling())
        return made

    def observe(self, key: Key, obj: dict[str, Any] | None) -> bool:
        """The worker's bookkeeping for one key before it plans (the one place per-key state changes):
        a Deployment that finished rolling, or went, frees its slot and the deferred keys queue again;
        a Deployment that went drops its notices (rules S19, S20); a resync since the last key forgets
        the writes admission undid. False when the key is not to be planned now: our last write to it
        was undone by admission and the object has not changed since."""
        if self._resyncs_seen != self._resyncs:
            self._resyncs_seen = self._resyncs
            self.undone.clear()   # a resync tries undone writes again (the configs may agree by now)
        if key[1] != "Deployment":
            return True
        for deferred in self.rollouts.observe(key, obj):
            self.queue.add(deferred)
        if obj is None:
            self.undone.pop(key, None)
            self._set_notices(key, {})
            return True
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if key in self.undone and self.undone[key] == version:
            return False
        self.undone.pop(key, None)
        return True

    def apply(self, key: Key, write: Write) -> str:
        """Make one write: ``written``, ``deferred`` (rollout cap), ``skipped`` (not leading),
        ``conflict`` (fresh state stored), ``gone`` or ``failed``."""
        gate_key = (write.namespace, write.name)
        if write.kind == "Deployment" and write.rollout and not self.rollouts.admit(key, gate_key):
            self.metrics.deferred.inc()
            return "deferred"
        entry = {"msg": "dry-run" if self.dry_run else "write", "kind": write.kind, "namespace": write.namespace,
                 "name": write.name, "action": write.action, "rollout": write.rollout, "reasons": write.reasons}
        if self.dry_run:
            log.info(json.dumps(entry))
            self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "true").inc()
            return "written"
        if not self.leading:
            return "skipped"  # the Lease ran out: another replica may lead now
        res = kube.resource_for(write.api_version, write.kind)
        try:
            if write.action == "create":
                assert write.object is not None  # a create carries the object to create
                body = self.api.create(res, write.namespace, write.object)
            else:
                guard = [{"op": "replace", "path": "/metadata/resourceVersion", "value": write.resource_version}] \
                    if write.resource_version else []
                body = self.api.patch(res, write.namespace, write.name, guard + write.patch)
        except kube.Conflict:
            if write.action == "create":
                return "gone"  # created meanwhile: the watch brings it
            self.metrics.conflicts.inc()
            return self._refresh(res, write)
        except kube.NotFound:
            if write.action == "create" and res in kube.NATIVE_GANG and not self.served(res):
                self.api_not_served(key, write)
                return "unserved"
            return "gone"
        except Exception as e:  # noqa: BLE001 -- any failure of the write: logged, retried with backoff
            self.metrics.errors.labels("write").inc()
            log.warning(json.dumps(dict(entry, msg="write failed", error=str(e)[:500])))
            return "failed"
        log.info(json.dumps(entry))
        self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "false").inc()
        if write.kind == "Deployment" and write.rollout:
            self.rollouts.started(gate_key)
        if write.kind == "Deployment" and write.rollout and isinstance(body, dict) and undone_by_admission(write.patch, body):
            # an admission webhook put the template back (its config differs from ours, for example while a
            # config change rolls out): planning again on the watch event would write again, forever
            self.undone[key] = (body.get("metadata") or {}).get("resourceVersion")
            self.metrics.errors.labels("undone").inc()
            log.warning(json.dumps(dict(entry, msg="write undone by admission: not retried until the object changes "
                                                   "or the next resync (do the webhook and the controller share "
                                                   "one config?)")))
        if res in self.stores:
            self.stores[res].apply("MODIFIED", body)
        self.record_event(write, body)
        return "written"

    def served(self, res: kube.Resource) -> bool:
        """Whether the API server serves ``res``'s group version (its discovery document answers)."""
        try:
            found = self.api.request("GET", f"/apis/{res.group}/{res.version}")
        except kube.NotFound:
            return False
        except Exception:  # noqa: BLE001 -- discovery itself failed: do not claim the API is missing
            return True
        return any(r.get("name") == res.plural for r in (found or {}).get("resources") or [] if isinstance(r, dict))

    def api_not_served(self, key: Key, write: Write) -> None:
        """Rule G20: a job of gang method workload on a cluster that does not serve
        scheduling.k8s.io/v1alpha2: an error in the log, and a Warning Event on the job naming the feature
        gates, once per job."""
        from policylib.gang.workload import API_NOT_SERVED
        api_version, kind, ns, name = key
        store = self._store_for(api_version, kind)
        job = store.get(ns, name) if store else None
        uid = ((job or {}).get("metadata") or {}).get("uid") or ""
        message = f"{kind} {ns}/{name}: no {write.kind} {write.name} made: {API_NOT_SERVED}"
        log.error(json.dumps({"msg": "API not served", "object": f"{kind} {ns}/{name}", "error": message}))
        self.metrics.errors.labels("unserved").inc()
        if (key, uid) in self.unserved_told:
            return
        self.unserved_told.add((key, uid))
        self.record_event(Write(kind, ns, name, [message], False, action="none", api_version=api_version), job,
                          reason="WorkloadAPINotServed", note=message, warning=True)

    def notice(self, key: Key, obj: dict[str, Any], writes: list[Write]) -> None:
        """Rules S19 and S20: keep the pending and unrecorded gauges, and record one Event per new state
        (``SpreadPending``, Normal, for a rewrite held for the next rollout: the metadata write that
        records it carries its own; ``AdmittedWithoutPolicy``, Warning, for a Deployment without our
        record)."""
        before = self.notices.get(key, {})
        now: dict[str, str] = {}
        for w in writes:
            if w.pending:
                now["pending"] = w.pending
            if w.unrecorded:
                now["unrecorded"] = (obj.get("metadata") or {}).get("uid", "") or "yes"
        self._set_notices(key, now)
        if "unrecorded" in now and before.get("unrecorded") != now["unrecorded"]:
            self.metrics.unrecorded_seen.inc()
        if self.dry_run or not self.leading:
            return
        for w in writes:
            if w.pending and w.action == "none" and before.get("pending") != w.pending:
                self.record_event(w, obj)
            if w.unrecorded and before.get("unrecorded") != now["unrecorded"]:
                self.record_event(w, obj, reason="AdmittedWithoutPolicy", note=UNRECORDED_REASON, warning=True)

    def _set_notices(self, key: Key, now: dict[str, str]) -> None:
        """Store ``key``'s notices and move the gauges by the change alone (constant work per key)."""
        before = self.notices.pop(key, {})
        if now:
            self.notices[key] = now
        for kind in self.notice_counts:
            self.notice_counts[kind] += (kind in now) - (kind in before)
        self.metrics.pending.set(self.notice_counts["pending"])
        self.metrics.unrecorded.set(self.notice_counts["unrecorded"])

    def record_event(self, write: Write, written: dict[str, Any] | None, reason: str | None = None,
                     note: str | None = None, warning: bool = False) -> None:
        """Record an Event on the object just written. Best effort: a failure is logged and counted
        (``errors{stage="event"}``), and never fails or retries the write."""
        try:
            event = event_for(write, written if isinstance(written, dict) else None, self.options.identity,
                              self.clock(), time.time_ns())
            if reason:
                event.update(reason=reason, note=event_note([note or reason]), type="Warning" if warning else "Normal")
            self.api.create(kube.EVENTS, write.namespace, event)
        except Exception as e:  # noqa: BLE001 -- no RBAC for events, events API away, odd answer: the write stands
            self.metrics.errors.labels("event").inc()
            log.warning(json.dumps({"msg": "could not record event", "kind": write.kind,
                                    "namespace": write.namespace, "name": write.name, "error": str(e)[:500]}))

    def _refresh(self, res: kube.Resource, write: Write) -> str:
        """After a 409: store the object as it is now, so the next plan sees it."""
        try:
            fresh = self.api.get(res, write.namespace, write.name)
        except kube.NotFound:
            return "gone"
        except Exception as e:  # noqa: BLE001
            self.metrics.errors.labels("write").inc()
            log.warning(json.dumps({"msg": "re-read after conflict failed", "error": str(e)[:500]}))
            return "failed"
        if res in self.stores:
            self.stores[res].apply("MODIFIED", fresh)
        return "conflict"

    def process_next(self, timeout: float | None = None) -> bool:
        """Reconcile the next key from the queue; False when none came within ``timeout``."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        started = time.perf_counter()
        try:
            self.reconcile(key)
        except Exception as e:  # noqa: BLE001 -- a bug or odd data must not stop the worker
            self.metrics.errors.labels("reconcile").inc()
            log.warning(json.dumps({"msg": "reconcile failed", "key": list(key), "error": str(e)[:500]}))
            self.queue.add_rate_limited(key)
        finally:
            self.queue.done(key)
            self.metrics.latency.observe(time.perf_counter() - started)
            self.metrics.queue_depth.set(len(self.queue))
            if self.to_plan and not self.first_sync.is_set():
                self.planned += 1
                if not len(self.queue):
                    self.first_sync.set()
        return True

    def drain(self) -> None:
        """Work the queue off (keys due now; backoffs still waiting stay queued)."""
        while self.process_next(timeout=0):
            pass

    # synchronous driving (tests, and the first pass) ------------------------------------
    def resync(self) -> None:
        """List every resource, queue every key, and work the queue off."""
        for reflector in self.reflectors:
            try:
                reflector.list()
            except kube.NotFound:
                reflector.served = False
                reflector.synced.set()
        self._recover_rolling()
        self.enqueue_all("resync")
        self.drain()

    def handle(self, event_type: str, obj: dict[str, Any]) -> None:
        """Apply one watch event to its store, queue what it touches, and work the queue off."""
        for res, store in self.stores.items():
            if res.api_version == obj.get("apiVersion") and res.kind == obj.get("kind"):
                applied, old = store.apply(event_type, obj)
                if applied:
                    self.on_event(event_type, obj, old)
        self.drain()

    def _recover_rolling(self) -> None:
        """After a restart or failover, rollouts a previous leader started still count against the cap."""
        store = self.stores.get(kube.DEPLOYMENTS)
        self.rollouts.recover(store.values() if store else [])

    # threads ------------------------------------------------------------------------------
    def _lease_loop(self) -> None:
        """Renew (or try to take) the Lease on its own thread, so a long reconcile never lets it lapse."""
        every = max(1.0, self.config.controller.leaseDurationSeconds / 3)
        while not self.stop.is_set():
            was_leading = self.leading
            try:
                if not self.try_lead() and was_leading:
                    log.error(json.dumps({"msg": "lost the Lease; stopping writes"}))
            except Exception as e:  # noqa: BLE001 -- the server may be away: try again next round
                self.metrics.errors.labels("lease").inc()
                log.warning(json.dumps({"msg": "lease round failed", "error": str(e)[:300]}))
            self.stop.wait(every)

    def _worker(self) -> None:
        while not self.stop.is_set():
            self.process_next(timeout=1.0)

    def run(self) -> None:
        """Lead, follow the watches, work the queue; give the Lease up when stopped."""
        threads = [threading.Thread(target=self._lease_loop, daemon=True, name="lease"),
                   threading.Thread(target=self._worker, daemon=True, name="worker")]
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
                self._recover_rolling()
                self.enqueue_all("leader")
                next_resync = now + self.config.controller.resyncSeconds
            elif self.leading and now >= next_resync:
                self.enqueue_all("resync")
                next_resync = now + self.config.controller.resyncSeconds
            was_leading = self.leading
        self.queue.shutdown()
        self.release()


# --- health and metrics endpoints --------------------------------------------------------------------

def serve_health(controller: Controller, host: str, port: int) -> ThreadingHTTPServer:
    """``/healthz`` (alive), ``/readyz``, ``/metrics``. Rule W8: ``/readyz`` answers 503 until the
    leader's first sync is done (a standby's: until it has listed), with how far it is: objects listed
    per resource, keys planned of those queued."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                code, body, ctype = 200, b"ok", "text/plain"
            elif self.path == "/readyz":
                # rule W8: a leader is ready once its first sync is done, a standby once it has listed
                ready = controller.first_sync.is_set() if controller.leading else controller.synced
                code = 200 if ready else 503
                state: dict[str, object] = {"leader": controller.leading, "synced": controller.synced,
                                            "dryRun": controller.dry_run, **controller.sync_progress()}
                if not controller.leading and controller.not_leading:
                    state["reason"] = controller.not_leading
                body = json.dumps(state).encode()
                ctype = "application/json"
            elif self.path == "/metrics":
                code, body, ctype = 200, generate_latest(controller.metrics.registry), "text/plain; version=0.0.4"
            else:
                code, body, ctype = 404, b"not found", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server


def run_controller(config_source: str | None = None, *, dry_run: bool = False, namespace: str | None = None,
                   kubeconfig: str | None = None, context: str | None = None, host: str = "0.0.0.0",
                   port: int = 8081, certificates: Any = None,
                   webhook_configuration: str = WEBHOOK_CONFIGURATION) -> int:
    """Entry point of ``python -m webhook controller``: blocks until SIGTERM or SIGINT. ``certificates``:
    a :class:`webhook.certrotator.Settings` to rotate the webhook's certificates while leading."""
    import os
    import signal

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = policylib.load_config(config_source)
    namespace = namespace or os.environ.get("POD_NAMESPACE") or "policylib-system"
    identity = os.environ.get("POD_NAME") or Options(config).identity
    api = kube.Api(kube.api_client(context, kubeconfig))
    c = Controller(api, Options(config, namespace=namespace, identity=identity, dry_run=dry_run,
                                webhook_configuration=webhook_configuration))
    server = serve_health(c, host, port)
    if certificates is not None:  # the leader keeps the webhook's certificates (webhook/certrotator.py)
        from . import certrotator
        certrotator.start(api, certificates, lambda: c.leading, c.stop, c.metrics.registry)
    from . import podcost  # rule S23: the pod deletion costs, under the same Lease
    podcost.start(api, c)
    signal.signal(signal.SIGTERM, lambda *_: c.stop.set())
    signal.signal(signal.SIGINT, lambda *_: c.stop.set())
    log.info(json.dumps({"msg": "controller started", "identity": identity, "namespace": namespace,
                         "dryRun": c.dry_run, "maxConcurrentRollouts": config.controller.maxConcurrentRollouts}))
    try:
        c.run()
    finally:
        server.shutdown()
    return 0
