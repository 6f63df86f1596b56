"""The webhook's certificates, managed by the controller's leader (the Helm chart's default,
``certificates.mode: self``; docs/operations.md, "Certificates"): :class:`Rotator` is the thin shell around
:func:`.certplan.plan`. It reads the three objects, asks the plan, makes the step, and repeats until the plan
says wait; it is a reconciler of the controller runtime with one key, so its worker runs on the leader only
and comes back when the plan's wait ends.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import logging
from typing import Any, Callable

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from prometheus_client import CollectorRegistry, Counter, Gauge

from policylib.constants import CONTROLLER_NAME, WEBHOOK_NAME
from policylib.shell import kube
from policylib.shell.kube import MUTATING_WEBHOOKS

from ..certmake import make_ca, make_serving
from .certplan import (
    CA_CRT,
    CA_KEY,
    ISSUED_AT,
    PREVIOUS_CA,
    TLS_CRT,
    TLS_KEY,
    TRUSTED_SINCE,
    Settings,
    Step,
    ca_pair,
    data_bytes,
    load_certs,
    observe,
    plan,
    rfc3339,
)
from .runtime import Result
from .workqueue import QueueMetrics, WorkQueue

log = logging.getLogger(__name__)

#: The rotator's one key.
CERTIFICATES = "certificates"
#: At most this long between two rounds (a certificate changed by hand is seen within it), and the wait after
#: a failed round.
POLL_SECONDS = 30.0
RETRY_SECONDS = 1.0

SECRETS = kube.Resource("", "v1", "secrets", "Secret")

# --- the shell ----------------------------------------------------------------------------------

def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: Any) -> bytes:
    pem: bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    return pem


def _enc(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Rotator:
    """Reads the three objects, makes :func:`plan`'s steps, and reports in ``registry`` (optional: a
    ``prometheus_client`` registry to register its gauges and counter in); ``queue_metrics``: the controller's
    work queue metrics, for its queue of one key."""

    name = "certificates"

    def __init__(self, api: kube.Api, settings: Settings, registry: Any = None, clock: Callable[[], float] | None = None,
                 queue_metrics: QueueMetrics | None = None, poll: float = POLL_SECONDS):
        registry = registry if registry is not None else CollectorRegistry()
        self.api, self.settings, self.poll = api, settings, poll
        self.queue: WorkQueue[str] = WorkQueue(self.name, metrics=queue_metrics)
        self.reflectors: list[Any] = []   # it reads its three objects when it runs: no informer
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc).timestamp())
        self.steps = Counter("policylib_controller_certificate_steps", "Certificate rotator steps made, by action",
                             ["action"], registry=registry)
        self.not_after = Gauge("policylib_controller_certificate_not_after_seconds",
                               "notAfter of the certificates the rotator manages, by certificate (ca, serving)",
                               ["certificate"], registry=registry)
        self.failures = Counter("policylib_controller_certificate_errors", "Failed certificate rotator rounds",
                                registry=registry)

    # reading --------------------------------------------------------------------------------
    def _get(self, res: kube.Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get(res, namespace, name)
        except kube.NotFound:
            return None

    def read(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
        s = self.settings
        return (self._get(SECRETS, s.namespace, s.ca_secret), self._get(SECRETS, s.namespace, s.tls_secret),
                self._get(MUTATING_WEBHOOKS, None, s.webhook_configuration))

    # one round ------------------------------------------------------------------------------
    def reconcile_steps(self, max_steps: int = 10) -> Step:
        """Make steps until the plan says wait (at most ``max_steps``); returns the last plan."""
        step = Step("wait", "not run")
        for _ in range(max_steps):
            ca_secret, tls_secret, config = self.read()
            state = observe(ca_secret, tls_secret, config)
            now = self.clock()
            if state.ca:
                self.not_after.labels("ca").set(state.ca.not_after)
            if state.serving:
                self.not_after.labels("serving").set(state.serving.not_after)
            step = plan(state, self.settings, now)
            if step.action == "wait":
                return step
            log.info("certificates", extra={"action": step.action, "reason": step.reason})
            self.make(step, ca_secret, tls_secret, config, now)
            self.steps.labels(step.action).inc()
        return step

    def make(self, step: Step, ca_secret: Any, tls_secret: Any, config: Any, now: float) -> None:
        s = self.settings
        when = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        if step.action in ("create-ca", "rotate-ca"):
            cert, key = make_ca(f"{s.service}@{int(now)}", when, lifetime=dt.timedelta(seconds=s.ca_seconds))
            data = {CA_CRT: _enc(_pem(cert)), CA_KEY: _enc(_key_pem(key))}
            if step.action == "rotate-ca":
                data[PREVIOUS_CA] = (ca_secret.get("data") or {})[CA_CRT]
            self._put_secret(ca_secret, s.ca_secret, "Opaque", data, {})
        elif step.action == "write-bundle":
            pair, _ = ca_pair(ca_secret)
            previous = load_certs(data_bytes(ca_secret.get("data") or {}, PREVIOUS_CA))
            trusted = [pair[0]] + [c for c in previous if c.not_valid_after_utc.timestamp() > now]
            bundle = _enc(b"".join(_pem(c) for c in trusted))
            body = json.loads(json.dumps(config))
            for hook in body.get("webhooks") or []:
                hook.setdefault("clientConfig", {})["caBundle"] = bundle
            self.api.update(MUTATING_WEBHOOKS, None, s.webhook_configuration, body)
        elif step.action == "mark-trusted":
            self._annotate(ca_secret, {TRUSTED_SINCE: rfc3339(now)})
        elif step.action == "issue-serving":
            (ca_cert, ca_key), _ = ca_pair(ca_secret)
            lifetime = min(s.serving_seconds, int(ca_cert.not_valid_after_utc.timestamp() - now))
            cert, key = make_serving(ca_cert, ca_key, s.service, s.namespace, when,
                                     lifetime=dt.timedelta(seconds=lifetime))
            data = {TLS_CRT: _enc(_pem(cert)), TLS_KEY: _enc(_key_pem(key)), CA_CRT: _enc(_pem(ca_cert))}
            self._put_secret(tls_secret, s.tls_secret, "kubernetes.io/tls", data, {ISSUED_AT: rfc3339(now)})
        elif step.action == "drop-previous":
            data = {k: v for k, v in (ca_secret.get("data") or {}).items() if k != PREVIOUS_CA}
            since = ((ca_secret.get("metadata") or {}).get("annotations") or {}).get(TRUSTED_SINCE)
            self._put_secret(ca_secret, s.ca_secret, "Opaque", data, {TRUSTED_SINCE: since} if since else {})

    def _put_secret(self, current: dict[str, Any] | None, name: str, type_: str, data: dict[str, Any],
                    annotations: dict[str, Any]) -> None:
        s = self.settings
        if current is None:
            body = {"apiVersion": "v1", "kind": "Secret", "type": type_, "data": data,
                    "metadata": {"name": name, "namespace": s.namespace, "annotations": annotations,
                                 "labels": {"app.kubernetes.io/name": WEBHOOK_NAME,
                                            "app.kubernetes.io/managed-by": CONTROLLER_NAME}}}
            self.api.create(SECRETS, s.namespace, body)
            return
        body = json.loads(json.dumps(current))
        meta = body.setdefault("metadata", {})
        kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in (TRUSTED_SINCE, ISSUED_AT)}
        meta["annotations"] = {**kept, **annotations}
        body["data"] = data
        if body.get("type") != type_:   # type is immutable: a Secret of another type is replaced
            self.api.request("DELETE", SECRETS.path(s.namespace, name))
            body = {k: v for k, v in body.items() if k != "metadata"} | {
                "metadata": {"name": name, "namespace": s.namespace, "annotations": meta["annotations"],
                             "labels": meta.get("labels") or {}}, "type": type_}
            self.api.create(SECRETS, s.namespace, body)
            return
        self.api.update(SECRETS, s.namespace, name, body)

    def _annotate(self, secret: dict[str, Any], annotations: dict[str, Any]) -> None:
        body = json.loads(json.dumps(secret))
        meta = body.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        self.api.update(SECRETS, self.settings.namespace, meta["name"], body)

    # the reconciler: one key, worked on the leader only --------------------------------------------
    def started_leading(self) -> None:
        self.queue.add(CERTIFICATES)

    def resync(self) -> None:
        self.queue.add(CERTIFICATES)

    def reconcile(self, key: str) -> Result:
        """One round; the key comes back at the plan's wake time (at most ``poll`` seconds later), or a second
        after a failed round (conflicts, the API away: the next round reads afresh)."""
        try:
            step = self.reconcile_steps()
        except Exception as e:  # noqa: BLE001 -- any failure of the round: counted, logged, tried again
            self.failures.inc()
            log.warning("certificate round failed", extra={"error": str(e)[:500]})
            return Result(requeue_after=RETRY_SECONDS)
        if step.wake_at is None:
            return Result(requeue_after=RETRY_SECONDS)
        return Result(requeue_after=min(self.poll, max(0.2, step.wake_at - self.clock())))
