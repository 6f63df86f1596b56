"""The reconciler of Deployments and gang jobs: its event handlers queue keys; its :meth:`Reconciler.reconcile`
plans one key and writes it, and returns what the generic worker (:mod:`.runtime`) does with the key next.

Event handlers run on the reflector threads and only add keys to the queue. The worker's calls own every other
piece of per-key state and recover it themselves: the rollout gate (after it takes the lead), the notices of rules
S19/S20, the writes admission undid, the jobs told that an API is not served, and the overlay of what it just
wrote. Nothing here writes to an informer's store: its reflector is its one writer.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import policylib
from policylib.plan import Write, plan
from policylib.scope import scope_fields
from policylib.shell import kube

from ..informer import Reflector, Store
from .events import EventRecorder
from .metrics import ControllerMetrics
from .notices import Notices
from .overlay import Overlay, OverlayFacts, version_of
from .rollouts import ObjectKey, Rollouts, gate_key, undone_by_admission
from .runtime import DONE, Reconciling, Result
from .scope import ScopeWatch
from .served import ServedWorkloadApi
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

#: The key that makes the worker report the scope (rule W5): queued with every key, and on its own when the
#: webhook configuration changes; no object has it.
SCOPE_KEY: ObjectKey = ("policylib.io/v1", "Scope", "", "")
#: Rule S29: after admission undid a write, the key is planned again after each of these delays (the webhook's facts
#: may lag the controller's by a moment: an HPA minimum it has not seen yet), then not until the object changes or the
#: next resync (a webhook whose config differs would undo it forever).
UNDONE_RETRY_SECONDS = (5.0, 20.0, 60.0)
#: The kinds whose pod-template writes go through the rollout gate: the spread's (rules S1, A4).
SPREAD_WRITES = frozenset({kube.DEPLOYMENTS.kind, kube.STATEFULSETS.kind})


class Reconciler(Reconciling):
    """The reconciler of Deployments and gang jobs, planned by :func:`policylib.plan.plan`.

    ``event_keys(event type, object, old)`` says which keys a watch event touches; ``reconciled`` are
    the resources whose every object is a key (a resync queues them all)."""

    name = "controller"

    def __init__(self, api: kube.Api, config: policylib.Config, *, namespace: str, webhook_configuration: str,
                 stores: dict[kube.Resource, Store], reflectors: list[Reflector], reconciled: tuple[kube.Resource, ...],
                 event_keys: Callable[[str, dict[str, Any], dict[str, Any] | None], list[ObjectKey]],
                 planners: tuple[Any, ...], metrics: ControllerMetrics, recorder: EventRecorder,
                 leading: Callable[[], bool], dry_run: bool, pod: str = ""):
        self.api, self.config, self.namespace = api, config, namespace
        self.webhook_configuration = webhook_configuration
        self.stores, self.reflectors, self.reconciled = stores, reflectors, reconciled
        self.event_keys, self.planners, self.metrics, self.recorder = event_keys, planners, metrics, recorder
        self._leading, self.dry_run = leading, dry_run
        self.queue: WorkQueue[ObjectKey] = WorkQueue(self.name, metrics=metrics.queue)
        metrics.queue_depth.set_function(self.queue.__len__)
        self.overlay: Overlay[ObjectKey] = Overlay()
        self.facts = OverlayFacts(stores, self.overlay)
        self.rollouts = Rollouts(config.controller.maxConcurrentRollouts)
        self.notices = Notices(metrics, recorder)
        #: Keys whose last write an admission webhook undid, with the resourceVersion it left (not retried
        #: until the object changes or the next resync).
        self.undone: dict[ObjectKey, str | None] = {}
        #: Rule S29: of each undone key, the retries made so far and when the next may be planned.
        self.undone_retries: dict[ObjectKey, tuple[int, float]] = {}
        #: Rules G20, G22: what the API server serves of the Workload API.
        self.served = ServedWorkloadApi(api, config, self.facts, metrics, recorder)
        #: The first sync (rule W8): every key queued on taking the lead planned once. ``to_plan`` keys
        #: were queued then, ``planned`` of them are done; /readyz reports both.
        self.first_sync = threading.Event()
        self.to_plan = 0
        self.planned = 0
        #: Resyncs and leaderships begun (counted by the run loop's thread) and the counts the worker last
        #: acted on: the worker notices a change before its next key and recovers its own state.
        self._resyncs = self._resyncs_seen = 0
        self._terms = self._terms_seen = 0
        #: Rules W5, W6: what the controller acts on.
        self.scopes = ScopeWatch(stores, namespace, webhook_configuration, pod, recorder,
                                 acting=lambda: not self.dry_run and self.leading)
        self.scope_resources = (kube.NAMESPACES, self.scopes.configurations)
        metrics.scope_closed.set_function(lambda: 1.0 if self.scope_known and self.scopes.scope().stopped else 0.0)
        metrics.scope_skipped.set_function(
            lambda: float(len(self.scopes.scope().skipped)) if self.scope_known else 0.0)

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
            scope = self.scopes.scope()
            progress["scope"] = {"acting": not scope.stopped, "source": scope.source, "notes": scope.notes()}
        return progress

    # the worker's steps (webhook.controller.runtime.Worker calls them) ---------------------
    def worked(self, key: ObjectKey) -> None:
        """Rule W8: a key of the first sync is done (the worker calls this once the key is off the queue)."""
        if self.to_plan and not self.first_sync.is_set():
            self.planned += key != SCOPE_KEY
            if not len(self.queue):
                self.first_sync.set()

    def recover(self) -> None:
        """The worker's own state after a resync or a new term, before its next key: a resync tries
        undone writes again (the configs may agree by now); a new term counts the rollouts a previous
        leader started against the cap (read from the store: the overlay was just cleared)."""
        if self._resyncs_seen != self._resyncs:
            self._resyncs_seen = self._resyncs
            self.undone.clear()
            self.undone_retries.clear()
            self.overlay.clear()
            self.served.rediscover()
        elif self.served.retry_due():
            self.served.rediscover()
        if self._terms_seen != self._terms:
            self._terms_seen = self._terms
            self.scopes.reported = None   # a new leader says again what the scope leaves out
            rolled = [obj for res in (kube.DEPLOYMENTS, kube.STATEFULSETS) if (store := self.stores.get(res))
                      for obj in store.values()]
            self.rollouts.recover(rolled)

    def reconcile(self, key: ObjectKey) -> Result:
        """Plan one object and make its writes: a failed write is retried with backoff, a conflict (fresh
        state in the overlay) or another served Workload API version planned again at once, a write
        admission undid again later (rule S29)."""
        self.recover()
        if key == SCOPE_KEY:
            if self.scope_known:
                self.scopes.report_scope()
            return DONE
        obj = self.facts.get(*key)
        if not self.observe(key, obj):
            return self.undone_wait(key)
        if obj is None or not self.scope_known:
            return DONE   # gone; or the scope is not known yet: the pass that follows the sync plans it
        self.metrics.reconciles.labels("key").inc()
        # rules W5, W6: outside the scope nothing is planned, written or noticed
        writes = plan([obj], self.config, planners=self.planners, facts=self.facts, only=self.scopes.in_scope)
        if key[1] == "Deployment":
            self.notices.notice(key, obj, writes, tell=not self.dry_run and self.leading)
        result = self.write(key, writes)
        self.metrics.rolling.set(self.rollouts.rolling())
        return result

    def write(self, key: ObjectKey, writes: list[Write]) -> Result:
        """Make a plan's writes, in order; what the worker does with the key after."""
        failed, again, later = False, False, None
        for write in writes:
            if write.error and write.kind == "Workload" and self.served.unserved() is not None:
                self.served.api_not_served(key, write)
                continue
            if write.error:
                self.metrics.errors.labels("plan").inc()
                log.warning("cannot plan", extra={"object": f"{write.kind} {write.namespace}/{write.name}",
                                                  "reasons": write.reasons})
                continue
            if write.action == "none":
                continue   # a notice only (pending, unrecorded): recorded by the notices
            outcome = self.apply(key, write)
            if outcome == "failed":
                failed = True
            elif outcome == "undone":
                later = self.retry_undone(key, write)
            elif outcome in ("conflict", "replan"):
                again = True   # fresh state in the overlay, or another served version: plan it again
                break
        if failed:
            return Result(requeue=True)
        return Result(requeue_after=0.0) if again else Result(requeue_after=later) if later is not None else DONE

    def undone_wait(self, key: ObjectKey) -> Result:
        """Rule S29: a key whose undone write is not due for a retry yet waits for it (none left: for a change)."""
        retries = self.undone_retries.get(key)
        return DONE if retries is None else Result(requeue_after=max(0.0, retries[1] - self.queue.clock()))

    def observe(self, key: ObjectKey, obj: dict[str, Any] | None) -> bool:
        """The worker's bookkeeping for one key before it plans (the one place per-key state changes):
        a Deployment or StatefulSet that finished rolling, or went, frees its slot and the deferred keys queue
        again; one that went drops its notices (rules S19, S20). False when the key is not to be planned now:
        our last write to it was undone by admission and the object has not changed since."""
        if key[1] not in SPREAD_WRITES:
            return True
        for deferred in self.rollouts.observe(key, obj):
            self.queue.add(deferred)
        if obj is None:
            self.undone.pop(key, None)
            self.undone_retries.pop(key, None)
            self.notices.set(key, {})
            return True
        if key in self.undone and self.undone[key] == version_of(obj):
            retries = self.undone_retries.get(key)
            return retries is not None and self.queue.clock() >= retries[1]   # rule S29: a retry that is due
        self.undone.pop(key, None)
        self.undone_retries.pop(key, None)
        return True

    def apply(self, key: ObjectKey, write: Write) -> str:
        """Make one write: ``written``, ``undone`` (written, and an admission webhook put the template back),
        ``deferred`` (rollout cap), ``skipped`` (not leading),
        ``conflict`` (fresh state in the overlay), ``replan`` (the served Workload API changed), ``gone``,
        ``unserved`` or ``failed``."""
        gated = gate_key(write.kind, write.namespace, write.name)
        spread = write.kind in SPREAD_WRITES
        if spread and write.rollout and not self.rollouts.admit(key, gated):
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
        target: ObjectKey = (write.api_version, write.kind, write.namespace, write.name)
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
                return self.served.native_not_found(key, write)
            return "gone"
        except Exception as e:  # noqa: BLE001 -- any failure of the write: logged, retried with backoff
            self.metrics.errors.labels("write").inc()
            log.warning("write failed", extra=dict(entry, error=str(e)[:500]))
            return "failed"
        log.info("write", extra=entry)
        self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "false").inc()
        if spread and write.rollout:
            self.rollouts.started(gated)
        undone = spread and write.rollout and isinstance(body, dict) and \
            undone_by_admission(write.patch, body)
        if undone:
            # an admission webhook put the template back (its config differs from ours, for example while a
            # config change rolls out): planning again on the watch event would write again, forever
            self.undone[key] = version_of(body)
            self.metrics.errors.labels("undone").inc()
        if isinstance(body, dict) and any((r.api_version, r.kind) == target[:2] for r in self.stores):
            self.overlay.put(target, before, body)
        self.recorder.record(write, body)
        return "undone" if undone else "written"

    def retry_undone(self, key: ObjectKey, write: Write) -> float | None:
        """Rule S29: the delay after which an undone write is planned again, the next of ``UNDONE_RETRY_SECONDS``;
        past the last, None: only once the object changes or at the next resync."""
        entry = {"kind": write.kind, "namespace": write.namespace, "object_name": write.name, "action": write.action,
                 "rollout": write.rollout, "reasons": write.reasons}
        made = self.undone_retries.get(key, (0, 0.0))[0]
        if made >= len(UNDONE_RETRY_SECONDS):
            self.undone_retries.pop(key, None)
            log.warning("write undone by admission: not retried until the object changes or the next resync "
                        "(do the webhook and the controller share one config?)", extra=entry)
            return None
        delay = UNDONE_RETRY_SECONDS[made]
        self.undone_retries[key] = (made + 1, self.queue.clock() + delay)
        log.info("write undone by admission: planned again later (the webhook's facts may lag)",
                 extra=dict(entry, retry_in_seconds=delay))
        return delay

    def _refresh(self, res: kube.Resource, target: ObjectKey, before: dict[str, Any] | None) -> str:
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
