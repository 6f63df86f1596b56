"""The reconciler: the event handlers that queue keys, and the one worker that plans and writes them.

Event handlers run on the reflector threads and only add keys to the :class:`~webhook.workqueue.WorkQueue`.
The worker (:meth:`Reconciler.process_next`) owns every other piece of per-key state and recovers it
itself: the rollout gate (after it takes the lead), the notices of rules S19/S20, the writes admission
undid, the jobs told that an API is not served, and the :class:`Overlay` of what it just wrote.
Nothing here writes to an informer's store: its reflector is its one writer.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable

import policylib
from policylib.facts import ClusterFacts, namespace_of
from policylib.gang.workload import workload_api_for
from policylib.plan import UNRECORDED_REASON, Write, plan
from policylib.projection import project
from policylib.scope import NAMESPACE_NAME_LABEL, Scope, closed_scope, scope_fields, scope_from_configuration
from policylib.shell import kube
from policylib.workload_api import WorkloadApi

from ..discovery import WorkloadApiDiscovery
from ..informer import Reflector, Store
from ..workqueue import WorkQueue
from .events import EventRecorder
from .metrics import ControllerMetrics
from .rollouts import Key, Rollouts, undone_by_admission

log = logging.getLogger(__name__)

#: A key that failed this many times in a row is dropped with an error in the log (client-go's
#: ``maxRetries`` pattern); the next resync queues it again. With the per-key backoff (50 ms doubling
#: to 60 s) that is about ten minutes of trying.
MAX_RETRIES = 15
#: The key that makes the worker report the scope (rule W5): queued with every key, and on its own when the
#: webhook configuration changes; no object has it.
SCOPE_KEY: Key = ("policylib.io/v1", "Scope", "", "")
#: Rule G22: while the served Workload API versions are not known (every read failed), how often a key's plan
#: tries to read them again.
DISCOVERY_RETRY_SECONDS = 10.0
#: Rule S29: after admission undid a write, the key is planned again after each of these delays (the webhook's facts
#: may lag the controller's by a moment: an HPA minimum it has not seen yet), then not until the object changes or the
#: next resync (a webhook whose config differs would undo it forever).
UNDONE_RETRY_SECONDS = (5.0, 20.0, 60.0)


def version_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


class Overlay:
    """What the worker wrote (or re-read after a 409) that the informer's store may not show yet, by
    (apiVersion, kind, namespace, name). An entry is read instead of the stored object only while the
    store still holds the version it was written over; once the store moves on (our write came back
    through the watch, or a newer change did) the entry is dropped, and a resync drops them all (a
    plan on a store that is still behind costs one 409: every write is guarded). Only equality of
    resourceVersions is used: the API calls them opaque. The worker alone reads and writes it (as
    client-go's ``MutationCache``, without its integer comparison)."""

    def __init__(self) -> None:
        self._entries: dict[Key, tuple[str | None, dict[str, Any]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: Key, stored: dict[str, Any] | None, obj: dict[str, Any]) -> None:
        """``obj`` is newer than ``stored``, what the store holds now (None: nothing)."""
        self._entries[key] = (version_of(stored), project(obj))

    def clear(self) -> None:
        self._entries.clear()

    def get(self, key: Key, stored: dict[str, Any] | None) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        if entry is None:
            return stored
        if version_of(stored) == entry[0]:
            return entry[1]
        del self._entries[key]
        return stored


class OverlayFacts(ClusterFacts):
    """The facts a plan reads, from the stores' indexes (nothing is copied per event) seen through
    the overlay."""

    def __init__(self, stores: dict[kube.Resource, Store], overlay: Overlay):
        super().__init__()
        self.stores, self.overlay = stores, overlay
        self._by_kind = {(r.api_version, r.kind): s for r, s in stores.items()}

    def stored(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as its informer's store holds it."""
        store = self._by_kind.get((api_version, kind))
        return store.get(namespace, name) if store else None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the worker knows it: the overlay's while the store has not caught up."""
        return self.overlay.get((api_version, kind, namespace, name), self.stored(api_version, kind, namespace, name))

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        store = self.stores.get(kube.HPAS)
        return store.by_index("target", (namespace, name)) if store else []

    def podgroup(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(api_version, "PodGroup", namespace, name)

    def native_gang_object(self, kind: str, namespace: str, name: str,
                           api_version: str | None = None) -> dict[str, Any] | None:
        versions = [api_version] if api_version else [r.api_version for r in kube.NATIVE_GANG if r.kind == kind]
        return next((found for v in versions if (found := self.get(v, kind, namespace, name)) is not None), None)


class Reconciler:
    """The controller's built-in worker: Deployments and gang jobs, planned by :func:`policylib.plan.plan`.

    ``event_keys(event type, object, old)`` says which keys a watch event touches; ``reconciled`` are
    the resources whose every object is a key (a resync queues them all)."""

    name = "controller"

    def __init__(self, api: kube.Api, config: policylib.Config, *, namespace: str, webhook_configuration: str,
                 stores: dict[kube.Resource, Store], reflectors: list[Reflector], reconciled: tuple[kube.Resource, ...],
                 event_keys: Callable[[str, dict[str, Any], dict[str, Any] | None], list[Key]],
                 planners: tuple[Any, ...], metrics: ControllerMetrics, recorder: EventRecorder,
                 leading: Callable[[], bool], dry_run: bool, pod: str = ""):
        self.api, self.config, self.namespace = api, config, namespace
        self.webhook_configuration = webhook_configuration
        self.stores, self.reflectors, self.reconciled = stores, reflectors, reconciled
        self.event_keys, self.planners, self.metrics, self.recorder = event_keys, planners, metrics, recorder
        self._leading, self.dry_run = leading, dry_run
        self.queue: WorkQueue[Key] = WorkQueue(self.name, metrics=metrics.queue)
        metrics.queue_depth.set_function(self.queue.__len__)
        self.overlay = Overlay()
        self.facts = OverlayFacts(stores, self.overlay)
        self.rollouts = Rollouts(config.controller.maxConcurrentRollouts)
        #: Rules S19, S20: what each Deployment key was last noticed for (pending note, unrecorded), with
        #: its Event recorded once per state; the gauges count these.
        self.notices: dict[Key, dict[str, str]] = {}
        #: How many of ``notices`` hold each kind of notice, kept as they change (the gauges' values: a sum
        #: over every notice per key made the initial sync quadratic in the Deployments).
        self.notice_counts: dict[str, int] = {"pending": 0, "unrecorded": 0}
        #: Keys whose last write an admission webhook undid, with the resourceVersion it left (not retried
        #: until the object changes or the next resync).
        self.undone: dict[Key, str | None] = {}
        #: Rule S29: of each undone key, the retries made so far and when the next may be planned.
        self.undone_retries: dict[Key, tuple[int, float]] = {}
        #: Rule G20: the jobs (key, uid) already told by a Warning Event that the API server serves no Workload
        #: API version policylib writes (one Event per job, not one per resync).
        self.unserved_told: set[tuple[Key, str]] = set()
        #: Rule G22: what the API server serves of the Workload API (gang method workload only), read before the
        #: first plan, on every resync and on a NotFound from a create of a Workload or PodGroup.
        self.discovery = WorkloadApiDiscovery(api) if config.gang.enabled and config.gang.method == "workload" \
            else None
        self._discovery_tried: float | None = None
        #: The first sync (rule W8): every key queued on taking the lead planned once. ``to_plan`` keys
        #: were queued then, ``planned`` of them are done; /readyz reports both.
        self.first_sync = threading.Event()
        self.to_plan = 0
        self.planned = 0
        #: Resyncs and leaderships begun (counted by the run loop's thread) and the counts the worker last
        #: acted on: the worker notices a change before its next key and recovers its own state.
        self._resyncs = self._resyncs_seen = 0
        self._terms = self._terms_seen = 0
        #: The scope as last built, and the webhook configuration's resourceVersion it was built from.
        self._scope: tuple[str | None, Scope] | None = None
        self.scope_resources = (kube.NAMESPACES, kube.webhook_configuration(webhook_configuration))
        #: Rule W5: what the worker last reported of the scope this term (its notes), and the controller's own
        #: Pod, whose Deployment gets the Events that say so.
        self._reported: tuple[str, ...] | None = None
        self.pod = pod
        #: The worker, /readyz and the gauges read the scope from their own threads: it is built (and logged) once
        #: per version of the configuration.
        self._scope_lock = threading.Lock()
        metrics.scope_closed.set_function(lambda: 1.0 if self.scope_known and self.scope().stopped else 0.0)
        metrics.scope_skipped.set_function(lambda: float(len(self.scope().skipped)) if self.scope_known else 0.0)

    @property
    def leading(self) -> bool:
        return self._leading()

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    @property
    def scope_known(self) -> bool:
        """The webhook configuration and the Namespaces are listed (rule W5: until then nothing is planned)."""
        return all(r.synced.is_set() for r in self.reflectors if r.res in self.scope_resources)

    # events -> keys (the reflector threads) -----------------------------------------------
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
            for key in self.event_keys(event_type, obj, old):
                self.queue.add(key)

    def started_leading(self) -> None:
        """This replica took the lead (the run loop): the worker recovers the rollout gate before its next
        key, and every key is queued."""
        self._terms += 1
        self.enqueue_all("leader")

    def resync(self) -> None:
        """Every ``controller.resyncSeconds`` (the run loop): queue every key again."""
        self.enqueue_all("resync")

    def shutdown(self) -> None:
        self.queue.shutdown()

    def enqueue_all(self, trigger: str) -> None:
        """Queue every Deployment and job, without planning inline."""
        self.metrics.reconciles.labels(trigger).inc()
        self._resyncs += 1    # the worker forgets undone writes when it sees this (observe)
        queued = 0
        for res in self.reconciled:
            for ns, name in self.stores[res].keys():  # noqa: SIM118 -- Store.keys(), not a dict's
                self.queue.add((res.api_version, res.kind, ns, name))
                queued += 1
        self.queue.add(SCOPE_KEY)   # rule W5: the worker says what the scope leaves out (not a planned key)
        if not self.first_sync.is_set() and self.synced:   # rule W8: a pass over every store, listed whole
            self.to_plan, self.planned = queued, 0
            if not queued:
                self.first_sync.set()

    def enqueue_namespace(self, namespace: str) -> None:
        """Queue every Deployment and job of one namespace (its labels changed: the scope may have)."""
        for res in self.reconciled:
            for ns, name in self.stores[res].keys():  # noqa: SIM118 -- Store.keys(), not a dict's
                if ns == namespace:
                    self.queue.add((res.api_version, res.kind, ns, name))

    def sync_progress(self) -> dict[str, Any]:
        """Rule W8: how far the first sync is: objects listed per resource, keys planned of those queued; and
        (rule W5) whether the scope acts on anything, and what it leaves out and why."""
        progress: dict[str, Any] = {"firstSync": self.first_sync.is_set(), "planned": self.planned,
                                    "toPlan": self.to_plan,
                                    "listed": {r.res.plural: r.listed for r in self.reflectors if r.served}}
        if self.scope_known:
            scope = self.scope()
            progress["scope"] = {"acting": not scope.stopped, "source": scope.source, "notes": scope.notes()}
        return progress

    # the worker --------------------------------------------------------------------------
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
            log.warning("reconcile failed", extra={"key": list(key), "error": str(e)[:500]})
            self.retry(key)
        finally:
            self.queue.done(key)
            self.metrics.latency.observe(time.perf_counter() - started)
            if self.to_plan and not self.first_sync.is_set():
                self.planned += key != SCOPE_KEY
                if not len(self.queue):
                    self.first_sync.set()
        return True

    def retry(self, key: Key) -> None:
        """Queue ``key`` again after its backoff, or give it up after :data:`MAX_RETRIES` failures in a row."""
        if self.queue.retries(key) < MAX_RETRIES:
            self.metrics.retries.inc()
            self.queue.add_rate_limited(key)
            return
        self.queue.forget(key)
        self.metrics.gave_up.inc()
        log.error("gave up on key until the next resync", extra={"key": list(key), "retries": MAX_RETRIES})

    def recover(self) -> None:
        """The worker's own state after a resync or a new term, before its next key: a resync tries
        undone writes again (the configs may agree by now); a new term counts the rollouts a previous
        leader started against the cap (read from the store: the overlay was just cleared)."""
        if self._resyncs_seen != self._resyncs:
            self._resyncs_seen = self._resyncs
            self.undone.clear()
            self.undone_retries.clear()
            self.overlay.clear()
            self.rediscover()
        elif self.discovery is not None and self.discovery.known is None and (
                self._discovery_tried is None or time.monotonic() - self._discovery_tried >= DISCOVERY_RETRY_SECONDS):
            self.rediscover()
        if self._terms_seen != self._terms:
            self._terms_seen = self._terms
            self._reported = None   # a new leader says again what the scope leaves out
            store = self.stores.get(kube.DEPLOYMENTS)
            self.rollouts.recover(store.values() if store else [])

    def rediscover(self) -> WorkloadApi | None:
        """Rule G22: read the served Workload API versions again (the worker's own state: the facts it plans
        with); what is known after."""
        if self.discovery is None:
            return None
        self._discovery_tried = time.monotonic()
        self.facts.workload_api = self.discovery.read()
        return self.facts.workload_api

    def reconcile(self, key: Key) -> list[Write]:
        """Plan one object and make its writes; returns the writes made. Requeues on failure."""
        self.recover()
        if key == SCOPE_KEY:
            self.queue.forget(key)
            if self.scope_known:
                self.report_scope()
            return []
        obj = self.facts.get(*key)
        if not self.observe(key, obj) or obj is None:
            self.queue.forget(key)
            return []
        if not self.scope_known:
            return []   # the scope is not known yet: the pass that follows the sync plans it
        self.metrics.reconciles.labels("key").inc()
        made, failed = [], False
        # rules W5, W6: outside the scope nothing is planned, written or noticed
        writes = plan([obj], self.config, planners=self.planners, facts=self.facts, only=self.in_scope)
        if key[1] == "Deployment":
            self.notice(key, obj, writes)
        for write in writes:
            if write.error and write.kind == "Workload" and self.unserved() is not None:
                self.api_not_served(key, write)
                continue
            if write.error:
                self.metrics.errors.labels("plan").inc()
                log.warning("cannot plan", extra={"object": f"{write.kind} {write.namespace}/{write.name}",
                                                  "reasons": write.reasons})
                continue
            if write.action == "none":
                continue   # a notice only (pending, unrecorded): recorded by notice()
            outcome = self.apply(key, write)
            if outcome == "written":
                made.append(write)
            elif outcome == "failed":
                failed = True
            elif outcome in ("conflict", "replan"):
                self.queue.add(key)  # fresh state in the overlay, or another served version: plan it again
                break
        if failed:
            self.retry(key)
        else:
            self.queue.forget(key)
        self.metrics.rolling.set(self.rollouts.rolling())
        return made

    def observe(self, key: Key, obj: dict[str, Any] | None) -> bool:
        """The worker's bookkeeping for one key before it plans (the one place per-key state changes):
        a Deployment that finished rolling, or went, frees its slot and the deferred keys queue again;
        a Deployment that went drops its notices (rules S19, S20). False when the key is not to be
        planned now: our last write to it was undone by admission and the object has not changed since."""
        if key[1] != "Deployment":
            return True
        for deferred in self.rollouts.observe(key, obj):
            self.queue.add(deferred)
        if obj is None:
            self.undone.pop(key, None)
            self.undone_retries.pop(key, None)
            self._set_notices(key, {})
            return True
        if key in self.undone and self.undone[key] == version_of(obj):
            retries = self.undone_retries.get(key)
            return retries is not None and self.queue.clock() >= retries[1]   # rule S29: a retry that is due
        self.undone.pop(key, None)
        self.undone_retries.pop(key, None)
        return True

    def apply(self, key: Key, write: Write) -> str:
        """Make one write: ``written``, ``deferred`` (rollout cap), ``skipped`` (not leading),
        ``conflict`` (fresh state in the overlay), ``replan`` (the served Workload API changed), ``gone``,
        ``unserved`` or ``failed``."""
        gate_key = (write.namespace, write.name)
        if write.kind == "Deployment" and write.rollout and not self.rollouts.admit(key, gate_key):
            self.metrics.deferred.inc()
            return "deferred"
        entry = {"kind": write.kind, "namespace": write.namespace, "object_name": write.name, "action": write.action,
                 "rollout": write.rollout, "reasons": write.reasons}
        if self.dry_run:
            log.info("dry-run", extra=entry)
            self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "true").inc()
            return "written"
        if not self.leading:
            return "skipped"  # the Lease ran out: another replica may lead now
        res = kube.resource_for(write.api_version, write.kind)
        target: Key = (write.api_version, write.kind, write.namespace, write.name)
        before = self.facts.stored(*target)
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
            return self._refresh(res, target, before)
        except kube.NotFound:
            if write.action == "create" and res in kube.NATIVE_GANG:
                return self.native_not_found(key, write)
            return "gone"
        except Exception as e:  # noqa: BLE001 -- any failure of the write: logged, retried with backoff
            self.metrics.errors.labels("write").inc()
            log.warning("write failed", extra=dict(entry, error=str(e)[:500]))
            return "failed"
        log.info("write", extra=entry)
        self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "false").inc()
        if write.kind == "Deployment" and write.rollout:
            self.rollouts.started(gate_key)
        if write.kind == "Deployment" and write.rollout and isinstance(body, dict) and undone_by_admission(write.patch, body):
            # an admission webhook put the template back (its config differs from ours, for example while a
            # config change rolls out): planning again on the watch event would write again, forever
            self.undone[key] = version_of(body)
            self.metrics.errors.labels("undone").inc()
            self.retry_undone(key, entry)
        if isinstance(body, dict) and any((r.api_version, r.kind) == target[:2] for r in self.stores):
            self.overlay.put(target, before, body)
        self.recorder.record(write, body)
        return "written"

    def retry_undone(self, key: Key, entry: dict[str, Any]) -> None:
        """Rule S29: plan an undone write again after the next of ``UNDONE_RETRY_SECONDS``; past the last, only
        once the object changes or at the next resync."""
        made = self.undone_retries.get(key, (0, 0.0))[0]
        if made >= len(UNDONE_RETRY_SECONDS):
            self.undone_retries.pop(key, None)
            log.warning("write undone by admission: not retried until the object changes or the next resync "
                        "(do the webhook and the controller share one config?)", extra=entry)
            return
        delay = UNDONE_RETRY_SECONDS[made]
        self.undone_retries[key] = (made + 1, self.queue.clock() + delay)
        self.queue.add_after(key, delay)
        log.info("write undone by admission: planned again later (the webhook's facts may lag)",
                 extra=dict(entry, retry_in_seconds=delay))

    def _refresh(self, res: kube.Resource, target: Key, before: dict[str, Any] | None) -> str:
        """After a 409: read the object as it is now into the overlay, so the next plan sees it."""
        try:
            fresh = self.api.get(res, target[2], target[3])
        except kube.NotFound:
            return "gone"
        except Exception as e:  # noqa: BLE001
            self.metrics.errors.labels("write").inc()
            log.warning("re-read after conflict failed", extra={"error": str(e)[:500]})
            return "failed"
        if res in self.stores:
            self.overlay.put(target, before, fresh)
        return "conflict"

    def native_not_found(self, key: Key, write: Write) -> str:
        """Rules G20, G22: a create of a Workload or PodGroup answered NotFound: the served versions are read
        again (an upgrade may have changed them); ``replan`` when another version is served now, ``unserved``
        (with the job's Warning Event) when none policylib writes is, ``gone`` otherwise (the namespace went)."""
        self.rediscover()
        api = self.unserved()
        if api is not None:
            self.api_not_served(key, write)
            return "unserved"
        now = workload_api_for(self.config.gang, self.facts)
        return "replan" if now.api_version != write.api_version else "gone"

    def unserved(self) -> WorkloadApi | None:
        """The Workload API as discovered, when it is known that the cluster serves no version policylib writes."""
        if self.discovery is None or self.facts.workload_api is None:
            return None
        api = workload_api_for(self.config.gang, self.facts)
        return api if api.version is None else None

    def api_not_served(self, key: Key, write: Write) -> None:
        """Rule G20: a job of gang method workload on a cluster that serves no Workload API version policylib
        writes (rule G22): an error in the log, and a Warning Event on the job naming what to enable (the flags
        of the cluster's minor), once per job."""
        api_version, kind, ns, name = key
        job = self.facts.get(*key)
        uid = ((job or {}).get("metadata") or {}).get("uid") or ""
        found = self.unserved()
        missing = found.missing() if found is not None else workload_api_for(self.config.gang, self.facts).missing()
        message = f"{kind} {ns}/{name}: no Workload {write.name} made: {missing}"
        log.error("API not served", extra={"object": f"{kind} {ns}/{name}", "error": message})
        self.metrics.errors.labels("unserved").inc()
        if (key, uid) in self.unserved_told:
            return
        self.unserved_told.add((key, uid))
        self.recorder.record(Write(kind, ns, name, [message], False, action="none", api_version=api_version), job,
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
                self.recorder.record(w, obj)
            if w.unrecorded and before.get("unrecorded") != now["unrecorded"]:
                self.recorder.record(w, obj, reason="AdmittedWithoutPolicy", note=UNRECORDED_REASON, warning=True)

    def _set_notices(self, key: Key, now: dict[str, str]) -> None:
        """Store ``key``'s notices and move the gauges by the change alone (constant work per key)."""
        before = self.notices.pop(key, {})
        if now:
            self.notices[key] = now
        for kind in self.notice_counts:
            self.notice_counts[kind] += (kind in now) - (kind in before)
        self.metrics.pending.set(self.notice_counts["pending"])
        self.metrics.unrecorded.set(self.notice_counts["unrecorded"])

    # the scope (rules W5, W6) -------------------------------------------------------------
    def scope(self) -> Scope:
        """Rule W5: the scope of the installed webhook configuration; closed (nothing in it) when there is
        none or its selectors are ones the API server would refuse; never the controller's own namespace
        (rule W6). Logged when it changes: a warning when it leaves anything out."""
        with self._scope_lock:
            return self._build_scope()

    def _build_scope(self) -> Scope:
        name = self.webhook_configuration
        configuration = self.stores[self.scope_resources[1]].get("", name)
        version = version_of(configuration) if configuration else None
        cached = self._scope
        if cached is not None and cached[0] == version:
            return cached[1]
        if configuration is None:
            scope = closed_scope(f"no MutatingWebhookConfiguration {name} is installed", {self.namespace})
        else:
            try:
                scope = scope_from_configuration(configuration, {self.namespace})
            except policylib.PolicylibError as e:   # a selector the API server would refuse: act on nothing
                scope = closed_scope(f"MutatingWebhookConfiguration {name} cannot be read: {e}", {self.namespace})
        notes = scope.notes()
        log.log(logging.WARNING if notes else logging.INFO, "scope",
                extra={"source": scope.source, "excluded": sorted(scope.excluded_namespaces),
                       "acting": not scope.stopped, "notes": notes})
        self._scope = (version, scope)
        return scope

    def report_scope(self) -> None:
        """Rules W5, W10, the worker's step for :data:`SCOPE_KEY`: when what the scope leaves out changes (and once
        per term when it leaves anything out), one Event on the controller's own Deployment: Warning
        ``ScopeClosed`` naming why, Normal ``ScopeRestored`` when nothing is left out again. The log line
        and the gauges (``policylib_controller_scope_closed``, ``_scope_skipped_webhooks``) say it on every
        replica; /readyz too (:meth:`sync_progress`)."""
        notes = tuple(self.scope().notes())
        before, self._reported = self._reported, notes
        if notes == before or (before is None and not notes) or self.dry_run or not self.leading:
            return
        own = self.own_deployment()
        if own is None:
            log.info("no Event for the scope: the controller's own Deployment is not known",
                     extra={"pod": self.pod, "namespace": self.namespace})
            return
        meta = own.get("metadata") or {}
        write = Write("Deployment", self.namespace, str(meta.get("name")), list(notes), False, action="none",
                      api_version=kube.DEPLOYMENTS.api_version)
        if notes:
            self.recorder.record(write, own, reason="ScopeClosed", note="; ".join(notes), warning=True)
        else:
            self.recorder.record(write, own, reason="ScopeRestored",
                                 note=f"acting on the objects {self.scope().source} sends to the webhook")

    def own_deployment(self) -> dict[str, Any] | None:
        """The Deployment of the controller's own Pod, from the Deployment store: its Pod is named
        ``<Deployment>-<ReplicaSet hash>-<5 characters>`` (the ReplicaSet and Pod names the Deployment and
        ReplicaSet controllers generate); None when no Deployment of its namespace fits."""
        store = self.stores.get(kube.DEPLOYMENTS)
        if not self.pod or store is None:
            return None
        names = [name for ns, name in store.keys()  # noqa: SIM118 -- Store.keys(), not a dict's
                 if ns == self.namespace and re.fullmatch(re.escape(name) + r"-[a-z0-9]+-[a-z0-9]{5}", self.pod)]
        return store.get(self.namespace, max(names, key=len)) if names else None

    def in_scope(self, obj: dict[str, Any]) -> bool:
        """Rules W5, W6: whether the API server sends ``obj`` to the webhook (its Namespace's labels from
        the Namespace store; one not there has only its name label)."""
        ns = namespace_of(obj)
        namespace = self.stores[kube.NAMESPACES].get("", ns)
        labels = {NAMESPACE_NAME_LABEL: ns, **(((namespace or {}).get("metadata") or {}).get("labels") or {})}
        return self.scope().admits(obj, {ns: labels})
