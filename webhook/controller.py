"""``python -m webhook controller``: keep existing objects right (seed 000 "Pod rollouts",
"Existing deployments"; gang PodGroups).

The imperative shell around :func:`policylib.plan.plan`:

- lists and watches Deployments, HorizontalPodAutoscalers, Kubeflow jobs and
  PodGroups, with a full resync every ``controller.resyncSeconds``;
- only the holder of a ``coordination.k8s.io/v1`` Lease writes (leader
  election, so two replicas never race);
- every write is a JSON patch carrying the object's ``resourceVersion``, so a
  concurrent change answers 409 Conflict; the controller then re-reads the
  object, re-plans and retries, and never clobbers;
- at most ``controller.maxConcurrentRollouts`` Deployments it rolled are
  rolling at once; the rest wait for the next pass;
- ``dryRun`` logs the plan and writes nothing.

The decisions (lease, rollout gate) are pure functions tested on their own;
the I/O is tested against recorded API responses (no API server runs in CI).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

import policylib
from policylib import kube
from policylib.facts import ClusterFacts, is_fact, namespace_of
from policylib.spread import RECORD_REPLICAS
from policylib.plan import Write, plan

log = logging.getLogger("policylib.controller")
LEASE_API = "/apis/coordination.k8s.io/v1"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


# --- leader election (pure) ------------------------------------------------------------

def _parse_time(value: str | None) -> dt.datetime | None:
    """RFC 3339 (metav1.Time or MicroTime) to an aware datetime; None when absent or unreadable."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def micro_time(now: dt.datetime) -> str:
    """metav1.MicroTime as the API serialises it."""
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_record(lease: dict | None) -> tuple:
    """What identifies one state of the Lease: a change means its holder is alive."""
    spec = (lease or {}).get("spec") or {}
    return spec.get("holderIdentity"), spec.get("renewTime"), ((lease or {}).get("metadata") or {}).get("resourceVersion")


def lease_decision(lease: dict | None, identity: str, now: float, observed_at: float) -> str:
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


def lease_spec(lease: dict | None, identity: str, now: dt.datetime, duration: int, decision: str) -> dict:
    """The Lease spec to write for ``decision``; ``now`` is wall-clock time for the record."""
    spec = dict((lease or {}).get("spec") or {})
    spec.update(holderIdentity=identity, leaseDurationSeconds=duration, renewTime=micro_time(now))
    if decision in ("create", "acquire"):
        spec["acquireTime"] = micro_time(now)
        spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + (1 if decision == "acquire" else 0)
    return spec


# --- rollout gate (pure) -----------------------------------------------------------------

def rollout_complete(deployment: dict) -> bool:
    """The Deployment controller has observed and finished its latest template.

    Same test as ``kubectl rollout status``: observedGeneration caught up and
    every replica updated and available.
    """
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    replicas = spec.get("replicas", 1)
    return (status.get("observedGeneration", 0) >= meta.get("generation", 0)
            and status.get("updatedReplicas", 0) >= replicas
            and status.get("availableReplicas", 0) >= replicas
            and status.get("replicas", 0) <= replicas)


@dataclass
class RolloutGate:
    """At most ``limit`` Deployments rolled by us are rolling at once."""

    limit: int
    rolling: set = field(default_factory=set)

    def update(self, deployment: dict) -> None:
        key = (namespace_of(deployment), deployment["metadata"]["name"])
        if key in self.rolling and rollout_complete(deployment):
            self.rolling.discard(key)

    def forget(self, key: tuple) -> None:
        self.rolling.discard(key)

    def admit(self, key: tuple) -> bool:
        return key in self.rolling or len(self.rolling) < self.limit

    def started(self, key: tuple) -> None:
        self.rolling.add(key)


# --- metrics -----------------------------------------------------------------------------------

class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter("policylib_controller_reconciles", "Plan passes", ["trigger"], registry=self.registry)
        self.writes = Counter("policylib_controller_writes", "Writes made (or logged in dry-run)",
                              ["kind", "action", "rollout", "dry_run"], registry=self.registry)
        self.conflicts = Counter("policylib_controller_conflicts", "409 Conflict answers, retried on fresh state",
                                 registry=self.registry)
        self.errors = Counter("policylib_controller_errors", "Failed API calls and unplannable objects",
                              ["stage"], registry=self.registry)
        self.deferred = Counter("policylib_controller_deferred_rollouts",
                                "Rollouts held back by maxConcurrentRollouts", registry=self.registry)
        self.leader = Gauge("policylib_controller_leader", "1 while this replica holds the Lease", registry=self.registry)
        self.rolling = Gauge("policylib_controller_rolling", "Deployments rolled by us still rolling",
                             registry=self.registry)


# --- the store of cluster objects -----------------------------------------------------------

def watched_resources(config: policylib.Config) -> tuple:
    """Deployments and HPAs always; Kubeflow jobs and PodGroups only for gang method podgroup
    (most clusters serve neither, and there is nothing to write for them otherwise)."""
    base = (kube.DEPLOYMENTS, kube.HPAS)
    return base + kube.KUBEFLOW_JOBS + kube.PODGROUPS if config.gang.method == "podgroup" else base


def object_key(obj: dict) -> tuple:
    meta = obj.get("metadata") or {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace") or "", meta.get("name")


class Store:
    """The last seen state of every watched object, and the facts (HPAs, PodGroups) they give."""

    def __init__(self) -> None:
        self.objects: dict[tuple, dict] = {}
        self._facts: ClusterFacts | None = None

    def replace(self, objs: Iterable[dict]) -> None:
        self.objects = {object_key(o): o for o in objs}
        self._facts = None

    def apply(self, event_type: str, obj: dict) -> None:
        key = object_key(obj)
        if event_type == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        if is_fact(obj):
            self._facts = None

    def values(self) -> list[dict]:
        return list(self.objects.values())

    @property
    def facts(self) -> ClusterFacts:
        if self._facts is None:
            self._facts = ClusterFacts.from_objects(o for o in self.objects.values() if is_fact(o))
        return self._facts


def _same_object(kind: str, namespace: str, name: str) -> Callable[[dict], bool]:
    return lambda o: o.get("kind") == kind and namespace_of(o) == namespace and (o.get("metadata") or {}).get("name") == name


def affected(obj: dict) -> Callable[[dict], bool]:
    """Which objects to re-plan after an event on ``obj``."""
    from policylib.facts import hpa_target, is_hpa
    if is_hpa(obj):
        target = hpa_target(obj)
        if target is None:
            return lambda o: False
        return _same_object("Deployment", *target)
    if obj.get("kind") == "PodGroup":
        owners = [(r.get("kind"), r.get("name")) for r in (obj.get("metadata") or {}).get("ownerReferences") or []]
        ns = namespace_of(obj)
        return lambda o: (o.get("kind"), (o.get("metadata") or {}).get("name")) in owners and namespace_of(o) == ns
    return _same_object(obj.get("kind"), namespace_of(obj), (obj.get("metadata") or {}).get("name"))


# --- the controller ------------------------------------------------------------------------------

@dataclass
class Options:
    config: policylib.Config
    namespace: str = "policylib-system"          # where the Lease lives
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{int(time.time() * 1000) % 100000}")
    dry_run: bool = False
    planners: tuple = ()


class Controller:
    """One replica of the controller; :meth:`run` blocks until ``stop`` is set."""

    def __init__(self, api, options: Options, clock: Callable[[], dt.datetime] | None = None):
        self.api = api
        self.options = options
        self.config = options.config
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        self.store = Store()
        self.gate = RolloutGate(self.config.controller.maxConcurrentRollouts)
        self.metrics = ControllerMetrics()
        self.events: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.lease_deadline = 0.0          # monotonic time until which our last renewal holds
        self.observed: tuple = (None, 0.0)  # (Lease record, monotonic time first seen)
        self.synced = False
        self.resources = watched_resources(self.config)
        self.resource_versions: dict[str, str] = {}
        from policylib.cli import PLANNERS
        self.planners = options.planners or PLANNERS

    @property
    def leading(self) -> bool:
        """We hold the Lease and our last renewal has not run out: checked before every write."""
        return time.monotonic() < self.lease_deadline

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run or self.config.controller.dryRun

    # leader election -------------------------------------------------------------------
    def _lease_path(self, name: str | None = None) -> str:
        base = f"{LEASE_API}/namespaces/{self.options.namespace}/leases"
        return f"{base}/{name}" if name else base

    def try_lead(self) -> bool:
        """One leader-election round: create, acquire, renew or wait. Returns whether we lead."""
        name = self.config.controller.leaseName
        duration = self.config.controller.leaseDurationSeconds
        started = time.monotonic()
        lease = kube.get_json(self.api, self._lease_path(name))
        record = lease_record(lease)
        if record != self.observed[0]:
            self.observed = (record, started)
        decision = lease_decision(lease, self.options.identity, started, self.observed[1])
        if decision == "wait":
            self._set_leading(False)
            return False
        spec = lease_spec(lease, self.options.identity, self.clock(), duration, decision)
        if decision == "create":
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": self.options.namespace}, "spec": spec}
            status, _ = kube.request(self.api, "POST", self._lease_path(), body=body, content_type="application/json")
        else:
            body = dict(lease, spec=spec)  # carries metadata.resourceVersion: a racing update gets 409
            status, _ = kube.request(self.api, "PUT", self._lease_path(name), body=body,
                                     content_type="application/json")
        won = 200 <= status < 300
        if not won and status != 409:
            self.metrics.errors.labels("lease").inc()
        # the renewal holds for a little less than the lease, counted from before the round began
        self._set_leading(won, started + duration * 2 / 3)
        return won

    def _set_leading(self, leading: bool, until: float = 0.0) -> None:
        if leading != self.leading:
            log.info(json.dumps({"msg": "leader" if leading else "not leader", "identity": self.options.identity}))
        self.lease_deadline = until if leading else 0.0
        self.metrics.leader.set(1 if leading else 0)

    # reading ---------------------------------------------------------------------------
    def resync(self) -> None:
        """List everything again (watches may have missed events) and plan a full pass."""
        objs: list[dict] = []
        for res in self.resources:
            for page in kube.list_objects(self.api, res):
                objs += page
        self.store.replace(objs)
        for obj in objs:
            if obj.get("kind") == "Deployment":
                self.gate.update(obj)
                # after a restart or failover, rollouts a previous leader started still count
                if RECORD_REPLICAS in ((obj.get("metadata") or {}).get("annotations") or {}) \
                        and not rollout_complete(obj):
                    self.gate.started((namespace_of(obj), obj["metadata"]["name"]))
        self.synced = True
        self.reconcile("resync")

    # writing ---------------------------------------------------------------------------
    def reconcile(self, trigger: str, only: Callable[[dict], bool] | None = None) -> list[Write]:
        """Plan over the store (or the objects ``only`` accepts) and apply what the gate
        admits. Returns the writes made."""
        self.metrics.reconciles.labels(trigger).inc()
        made = []
        for write in plan(self.store.values(), self.config, planners=self.planners, facts=self.store.facts,
                          only=only):
            if write.error:
                self.metrics.errors.labels("plan").inc()
                log.warning(json.dumps({"msg": "cannot plan", "object": f"{write.kind} {write.namespace}/{write.name}",
                                        "reasons": write.reasons}))
                continue
            if self.apply(write):
                made.append(write)
        self.metrics.rolling.set(len(self.gate.rolling))
        return made

    def apply(self, write: Write, attempts: int = 3) -> bool:
        key = (write.namespace, write.name)
        if write.kind == "Deployment" and write.rollout and not self.gate.admit(key):
            self.metrics.deferred.inc()
            return False
        entry = {"msg": "dry-run" if self.dry_run else "write", "kind": write.kind, "namespace": write.namespace,
                 "name": write.name, "action": write.action, "rollout": write.rollout, "reasons": write.reasons}
        if not self.dry_run and not self.leading:
            return False  # the Lease ran out mid-pass: another replica may lead now
        if self.dry_run:
            log.info(json.dumps(entry))
            self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "true").inc()
            return True
        for _ in range(attempts):
            status, body = self._send(write)
            if 200 <= status < 300:
                log.info(json.dumps(entry))
                self.metrics.writes.labels(write.kind, write.action, str(write.rollout).lower(), "false").inc()
                if write.kind == "Deployment" and write.rollout:
                    self.gate.started(key)
                if isinstance(body, dict) and body.get("metadata"):
                    body.setdefault("apiVersion", write.api_version)
                    body.setdefault("kind", write.kind)
                    self.store.apply("MODIFIED", body)
                return True
            if status == 409 and write.action == "patch":
                self.metrics.conflicts.inc()
                write = self._replan(write)
                if write is None:  # fresh state needs nothing: someone else fixed it
                    return False
                continue
            if status == 409 and write.action == "create":
                return False  # created meanwhile: the watch will bring it
            self.metrics.errors.labels("write").inc()
            log.warning(json.dumps(dict(entry, msg="write failed", status=status,
                                        message=(body or {}).get("message") if isinstance(body, dict) else body)))
            return False
        return False

    def _resource_path(self, write: Write, name: str | None = None) -> str:
        group_version = write.api_version
        plural = {"Deployment": "deployments", "PodGroup": "podgroups"}.get(write.kind, write.kind.lower() + "s")
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        path = f"{base}/namespaces/{write.namespace}/{plural}"
        return f"{path}/{name}" if name else path

    def _send(self, write: Write) -> tuple[int, dict]:
        if write.action == "create":
            return kube.request(self.api, "POST", self._resource_path(write), body=write.object,
                                content_type="application/json")
        guard = []
        if write.resource_version:
            guard = [{"op": "replace", "path": "/metadata/resourceVersion", "value": write.resource_version}]
        return kube.request(self.api, "PATCH", self._resource_path(write, write.name), body=guard + write.patch,
                            content_type=JSON_PATCH)

    def _replan(self, write: Write) -> Write | None:
        """Re-read the object after a conflict and plan it again on fresh state."""
        fresh = kube.get_json(self.api, self._resource_path(write, write.name))
        if fresh is None:
            return None
        fresh.setdefault("apiVersion", write.api_version)
        fresh.setdefault("kind", write.kind)
        self.store.apply("MODIFIED", fresh)
        for w in plan(self.store.values(), self.config, planners=self.planners, facts=self.store.facts,
                      only=affected(fresh)):
            if (w.kind, w.namespace, w.name) == (write.kind, write.namespace, write.name) and not w.error:
                return w
        return None

    # watching --------------------------------------------------------------------------
    def watch(self, res: kube.Resource, resource_version: str | None, timeout: int) -> str | None:
        """Stream one watch of ``res`` into the event queue; returns the last resourceVersion
        (None when the API said the version is too old: 410 Gone, resync needed)."""
        query = [("watch", "1"), ("timeoutSeconds", str(timeout)), ("allowWatchBookmarks", "true")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        method, url, headers, body, post = self.api.param_serialize(
            "GET", kube._path(res, None), query_params=query, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"])
        resp = self.api.call_api(method, url, header_params=headers, _request_timeout=timeout + 10)
        if resp.status == 404:
            return resource_version
        if resp.status == 410:
            return None
        buffer = b""
        for chunk in resp.response.stream(4096):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return None if obj.get("code") == 410 else resource_version
                resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
                if event.get("type") != "BOOKMARK":
                    obj.setdefault("apiVersion", res.api_version)
                    obj.setdefault("kind", res.kind)
                    self.events.put((event["type"], obj))
        return resource_version

    def handle(self, event_type: str, obj: dict) -> list[Write]:
        """Apply one watch event to the store and re-plan just what it touches.

        A Deployment event re-plans that Deployment; an HPA event its target;
        a PodGroup or Kubeflow job event that job (its PodGroup's owner).
        A change to a rolling Deployment's status may free the rollout gate,
        which lets held-back rollouts go: those are re-planned too.
        """
        self.store.apply(event_type, obj)
        freed = False
        if obj.get("kind") == "Deployment":
            before = len(self.gate.rolling)
            if event_type == "DELETED":
                self.gate.forget((namespace_of(obj), obj["metadata"]["name"]))
            else:
                self.gate.update(obj)
            freed = len(self.gate.rolling) < before
        if not self.leading or event_type == "DELETED" and obj.get("kind") == "Deployment":
            return []
        return self.reconcile("event", only=None if freed else affected(obj))

    def _watch_loop(self, res: kube.Resource) -> None:
        rv = None
        timeout = min(self.config.controller.resyncSeconds, 300)
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                rv = self.watch(res, rv, timeout)
            except Exception as e:  # network: back off and watch again
                self.metrics.errors.labels("watch").inc()
                log.warning(json.dumps({"msg": "watch failed", "resource": res.plural, "error": str(e)}))
                rv = None
            if time.monotonic() - started < 1:
                # an answer at once (404: not served, 410, errors) must not become a hot loop
                self.stop.wait(min(self.config.controller.resyncSeconds, 30))

    def _lease_loop(self) -> None:
        """Renew (or try to take) the Lease on its own thread, so a long pass never lets it lapse."""
        every = max(1.0, self.config.controller.leaseDurationSeconds / 3)
        while not self.stop.is_set():
            was_leading = self.leading
            try:
                if not self.try_lead() and was_leading:
                    log.error(json.dumps({"msg": "lost the Lease; stopping writes"}))
            except Exception as e:
                self.metrics.errors.labels("lease").inc()
                log.warning(json.dumps({"msg": "lease round failed", "error": str(e)}))
            self.stop.wait(every)

    def run(self) -> None:
        """Lead, resync, then consume watch events until stopped."""
        threading.Thread(target=self._lease_loop, daemon=True, name="lease").start()
        for res in self.resources:
            threading.Thread(target=self._watch_loop, args=(res,), daemon=True, name=f"watch-{res.plural}").start()
        next_resync = 0.0
        was_leading = False
        while not self.stop.is_set():
            now = time.monotonic()
            if self.leading and (now >= next_resync or not was_leading):
                try:
                    self.resync()
                except Exception as e:
                    self.metrics.errors.labels("resync").inc()
                    log.warning(json.dumps({"msg": "resync failed", "error": str(e)}))
                next_resync = now + self.config.controller.resyncSeconds
            was_leading = self.leading
            try:
                event_type, obj = self.events.get(timeout=1.0)
            except queue.Empty:
                continue
            try:
                self.handle(event_type, obj)
            except Exception as e:
                self.metrics.errors.labels("reconcile").inc()
                log.warning(json.dumps({"msg": "reconcile failed", "error": str(e)}))


# --- health and metrics endpoints --------------------------------------------------------------------

def serve_health(controller: Controller, host: str, port: int) -> ThreadingHTTPServer:
    """``/healthz`` (alive), ``/readyz`` (listed once, or standing by), ``/metrics``."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/healthz":
                code, body, ctype = 200, b"ok", "text/plain"
            elif self.path == "/readyz":
                ready = controller.synced or not controller.leading
                code = 200 if ready else 503
                body = json.dumps({"leader": controller.leading, "synced": controller.synced,
                                   "dryRun": controller.dry_run}).encode()
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

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server


def run_controller(config_source=None, *, dry_run: bool = False, namespace: str | None = None,
                   kubeconfig: str | None = None, context: str | None = None, host: str = "0.0.0.0",
                   port: int = 8081) -> int:
    """Entry point of ``python -m webhook controller``: blocks until SIGTERM or SIGINT."""
    import os
    import signal

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = policylib.load_config(config_source)
    namespace = namespace or os.environ.get("POD_NAMESPACE") or "policylib-system"
    identity = os.environ.get("POD_NAME") or Options(config).identity
    api = kube.api_client(context, kubeconfig)
    c = Controller(api, Options(config, namespace=namespace, identity=identity, dry_run=dry_run))
    server = serve_health(c, host, port)
    signal.signal(signal.SIGTERM, lambda *_: c.stop.set())
    signal.signal(signal.SIGINT, lambda *_: c.stop.set())
    log.info(json.dumps({"msg": "controller started", "identity": identity, "namespace": namespace,
                         "dryRun": c.dry_run, "maxConcurrentRollouts": config.controller.maxConcurrentRollouts}))
    try:
        c.run()
    finally:
        server.shutdown()
    return 0
