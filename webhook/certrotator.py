"""The webhook's certificates, managed by the controller's leader (the Helm chart's default,
``certificates.mode: self``; docs/operations.md, "Certificates").

Three objects hold the state, nothing else does:

- the CA Secret (``policylib-webhook-ca``): ``ca.crt``/``ca.key``, the current CA; during a CA
  rotation also ``previous-ca.crt``; annotation ``policylib.io/ca-trusted-since``, when the webhook
  configuration's ``caBundle`` was first seen holding the current CA;
- the serving Secret (``policylib-webhook-tls``, ``kubernetes.io/tls``): ``tls.crt``/``tls.key`` and
  ``ca.crt``, mounted by the webhook pods (which reload per connection); annotation
  ``policylib.io/issued-at``;
- the MutatingWebhookConfiguration's ``caBundle`` (every webhook of it): the CAs the API server trusts.

:func:`plan` is the pure core: given those (as :class:`Cert` facts), the time and the settings, it
decides one next step. :class:`Rotator` is the thin shell: it reads the objects, asks :func:`plan`,
makes the step, and repeats until the plan says wait. The controller runs it on the leader only.

No window where the API server and the webhook disagree:

- a serving certificate renewed from the same CA needs no bundle change;
- a new CA is first *added* to the bundle next to the old one; the serving certificate is issued from
  it only ``propagationSeconds`` after the bundle was seen trusting it (the API server re-reads webhook
  configurations within moments); the old CA leaves the bundle only ``propagationSeconds`` after the new
  serving certificate was written (the kubelet updates a Secret volume within its sync period plus its
  cache TTL, about a minute each by default; the webhook reloads on the next connection).
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from policylib.constants import (
    CONTROLLER_NAME,
    INSTALL_NAMESPACE,
    WEBHOOK_CA_SECRET,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_NAME,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)
from policylib.shell import kube
from policylib.shell.kube import MUTATING_WEBHOOKS

from .certs import key_problem, make_ca, make_serving, service_dns_names

log = logging.getLogger(__name__)

SECRETS = kube.Resource("", "v1", "secrets", "Secret")
TRUSTED_SINCE = "policylib.io/ca-trusted-since"
ISSUED_AT = "policylib.io/issued-at"
CA_CRT, CA_KEY, PREVIOUS_CA = "ca.crt", "ca.key", "previous-ca.crt"
TLS_CRT, TLS_KEY = "tls.crt", "tls.key"
#: Renew when less than this fraction of the lifetime is left (cert-manager's default renewBefore rule).
RENEW_FRACTION = 1 / 3


# --- settings ---------------------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """``90s``, ``10m``, ``8760h``, ``365d`` -> seconds; anything else is a ValueError naming it."""
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"invalid duration {text!r}: want a positive whole number followed by s, m, h or d "
                         "(e.g. 8760h)")
    return int(m.group(1)) * _UNIT[m.group(2)]


@dataclass(frozen=True)
class Settings:
    """Where the certificates live and how long they last (the controller's ``--certificates-*`` flags)."""

    namespace: str = INSTALL_NAMESPACE
    service: str = WEBHOOK_SERVICE
    webhook_configuration: str = WEBHOOK_CONFIGURATION
    ca_secret: str = WEBHOOK_CA_SECRET
    tls_secret: str = WEBHOOK_TLS_SECRET
    ca_seconds: int = 5 * 365 * 86400
    serving_seconds: int = 365 * 86400
    propagation_seconds: int = 180

    def problems(self) -> list[str]:
        """What makes these settings unusable (all at once)."""
        out = []
        if self.serving_seconds * 3 > self.ca_seconds:
            out.append(f"certificates: the CA lifetime ({self.ca_seconds}s) must be at least three serving "
                       f"lifetimes ({3 * self.serving_seconds}s): a CA is renewed when a third of its lifetime "
                       "is left, and must still outlive every serving certificate it signed")
        if self.propagation_seconds * 3 > self.serving_seconds:
            out.append(f"certificates: the propagation delay ({self.propagation_seconds}s) must be at most a third "
                       f"of the serving lifetime ({self.serving_seconds}s)")
        return out

    @property
    def dns_names(self) -> tuple[str, ...]:
        return tuple(service_dns_names(self.service, self.namespace))


# --- the facts a plan needs ---------------------------------------------------------------------

@dataclass(frozen=True)
class Cert:
    """One certificate as the plan sees it. ``issuer``: fingerprint of the CA (current or previous)
    whose key signed it, or None when neither did."""

    fingerprint: str
    not_after: float
    is_ca: bool = False
    issuer: str | None = None
    sans: tuple[str, ...] = ()


@dataclass(frozen=True)
class State:
    ca: Cert | None = None
    previous_ca: Cert | None = None
    trusted_since: float | None = None
    serving: Cert | None = None
    issued_at: float | None = None
    #: Fingerprints in the caBundle; None while the webhook configuration does not exist.
    bundle: tuple[str, ...] | None = None
    why_no_ca: str = "no CA Secret"


@dataclass(frozen=True)
class Step:
    """One thing to do now (``action``), or ``wait`` until ``wake_at``; ``reason`` says why."""

    action: str
    reason: str
    wake_at: float | None = None


ACTIONS = ("create-ca", "rotate-ca", "write-bundle", "mark-trusted", "issue-serving", "drop-previous", "wait")


def desired_bundle(state: State, now: float) -> tuple[str, ...]:
    """The current CA, then the previous one while it is still valid."""
    out: tuple[str, ...] = (state.ca.fingerprint,) if state.ca else ()
    if state.previous_ca and state.previous_ca.not_after > now:
        out += (state.previous_ca.fingerprint,)
    return out


def serving_problem(state: State, settings: Settings, now: float) -> str | None:
    """Why the serving certificate must be (re)issued, or None."""
    s, ca = state.serving, state.ca
    assert ca is not None
    if s is None:
        return "no serving certificate"
    if s.not_after <= now:
        return "the serving certificate has expired"
    if s.issuer != ca.fingerprint:
        return "the serving certificate was not issued by the current CA"
    if tuple(sorted(s.sans)) != tuple(sorted(settings.dns_names)):
        return "the serving certificate's SANs are not the Service's names"
    if now >= s.not_after - settings.serving_seconds * RENEW_FRACTION:
        return "less than a third of the serving certificate's lifetime is left"
    if s.not_after > ca.not_after:
        return "the serving certificate outlives its CA"
    return None


def plan(state: State, settings: Settings, now: float) -> Step:
    """The next step towards: a valid CA trusted by the bundle, a serving certificate from it that is
    not due for renewal, and no old CA left in the bundle once every replica can serve the new one."""
    ca = state.ca
    if ca is None or not ca.is_ca or ca.not_after <= now:
        why = state.why_no_ca if ca is None else ("the CA has expired" if ca.not_after <= now else "ca.crt is not a CA")
        return Step("create-ca", why)
    if state.bundle is None:
        return Step("wait", f"webhook configuration {settings.webhook_configuration} not found", now + 5)
    want = desired_bundle(state, now)
    if tuple(state.bundle) != want:
        return Step("write-bundle", "the caBundle differs from the CAs to trust")
    if state.trusted_since is None:
        return Step("mark-trusted", "the caBundle trusts the current CA")
    problem = serving_problem(state, settings, now)
    if problem:
        s = state.serving
        served_by_previous = (s is not None and s.not_after > now and state.previous_ca is not None
                              and s.issuer == state.previous_ca.fingerprint)
        ready_at = state.trusted_since + settings.propagation_seconds
        if served_by_previous and now < ready_at:
            return Step("wait", f"{problem}; waiting until the API server has seen the new CA in the caBundle",
                        ready_at)
        return Step("issue-serving", problem)
    if state.previous_ca is not None:
        # No issued-at annotation: the certificate was not written by a rotation in progress.
        done_at = (state.issued_at or 0.0) + settings.propagation_seconds
        if now < done_at:
            return Step("wait", "the previous CA stays trusted until every replica serves the new certificate",
                        done_at)
        return Step("drop-previous", "every replica serves a certificate from the current CA")
    ca_renew_at = ca.not_after - settings.ca_seconds * RENEW_FRACTION
    if now >= ca_renew_at:
        return Step("rotate-ca", "less than a third of the CA's lifetime is left")
    serving_renew_at = state.serving.not_after - settings.serving_seconds * RENEW_FRACTION if state.serving else now
    return Step("wait", "certificates are valid", min(ca_renew_at, serving_renew_at))


# --- reading the objects (PEM -> facts) ---------------------------------------------------------

def _b64(data: dict[str, Any], key: str) -> bytes | None:
    value = (data or {}).get(key)
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value)
    except ValueError:
        return None


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def load_certs(pem: bytes | None) -> list[x509.Certificate]:
    if not pem:
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _sans(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        return tuple(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                     .get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        return ()


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
        return False


def cert_fact(cert: x509.Certificate, issuers: list[x509.Certificate]) -> Cert:
    issuer = next((fingerprint(c) for c in issuers if _signed_by(cert, c)), None)
    return Cert(fingerprint(cert), cert.not_valid_after_utc.timestamp(), _is_ca(cert), issuer, _sans(cert))


def _time(annotations: dict[str, Any], key: str) -> float | None:
    value = (annotations or {}).get(key)
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() if value else None
    except ValueError:
        return None


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ca_pair(secret: dict[str, Any] | None) -> Any:
    """(certificate, key) of the CA Secret, or (None, why not)."""
    if secret is None:
        return None, "no CA Secret"
    certs = load_certs(_b64(secret.get("data") or {}, CA_CRT))
    raw_key = _b64(secret.get("data") or {}, CA_KEY)
    try:
        key = serialization.load_pem_private_key(raw_key or b"", password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if len(certs) != 1 or key is None:
        return None, "the CA Secret holds no readable ca.crt and ca.key"
    problem = key_problem(key, CA_KEY)
    if problem:
        return None, problem
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if certs[0].public_key().public_bytes(serialization.Encoding.DER, pub) != \
            key.public_key().public_bytes(serialization.Encoding.DER, pub):
        return None, "the CA Secret's ca.crt and ca.key are not a pair"
    return (certs[0], key), None


def observe(ca_secret: dict[str, Any] | None, tls_secret: dict[str, Any] | None, webhook_config: dict[str, Any] | None) -> State:
    """The :class:`State` of the three objects (any may be None: not there)."""
    pair, why = ca_pair(ca_secret)
    ca = pair[0] if pair else None
    previous = load_certs(_b64((ca_secret or {}).get("data") or {}, PREVIOUS_CA))[:1] if pair else []
    issuers = ([ca] if ca else []) + previous
    serving = load_certs(_b64((tls_secret or {}).get("data") or {}, TLS_CRT))[:1]
    bundle = None
    if webhook_config is not None:
        hooks = webhook_config.get("webhooks") or []
        bundles = {(h.get("clientConfig") or {}).get("caBundle") or "" for h in hooks}
        if len(bundles) == 1:
            raw = _b64({"b": bundles.pop()}, "b") or b""
            bundle = tuple(fingerprint(c) for c in load_certs(raw))
        else:   # no webhooks, or webhooks that disagree: a bundle none of them has, so it is written again
            bundle = ("mixed",)
    return State(ca=cert_fact(ca, [ca]) if ca else None,
                 previous_ca=cert_fact(previous[0], previous) if previous else None,
                 trusted_since=_time(((ca_secret or {}).get("metadata") or {}).get("annotations") or {}, TRUSTED_SINCE)
                 if pair else None,
                 serving=cert_fact(serving[0], issuers) if serving else None,
                 issued_at=_time(((tls_secret or {}).get("metadata") or {}).get("annotations") or {}, ISSUED_AT),
                 bundle=bundle, why_no_ca=why or "")


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
    """Reads the three objects, makes :func:`plan`'s steps, and reports in ``metrics`` (optional: a
    ``prometheus_client`` registry to register its gauges and counter in)."""

    def __init__(self, api: kube.Api, settings: Settings, registry: Any = None, clock: Callable[[], float] | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge
        registry = registry if registry is not None else CollectorRegistry()
        self.api, self.settings = api, settings
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
    def reconcile(self, max_steps: int = 10) -> Step:
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
            previous = load_certs(_b64(ca_secret.get("data") or {}, PREVIOUS_CA))
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

    # the loop -------------------------------------------------------------------------------
    def run(self, leading: Callable[[], bool], stop: threading.Event, poll: float = 30.0) -> None:
        """While ``leading()``: a round, then sleep until the plan's wake time (at most ``poll``)."""
        while not stop.is_set():
            delay = 1.0
            if leading():
                try:
                    step = self.reconcile()
                    if step.wake_at is not None:
                        delay = min(poll, max(0.2, step.wake_at - self.clock()))
                except Exception as e:  # noqa: BLE001 -- conflicts, the API away: next round reads afresh
                    self.failures.inc()
                    log.warning("certificate round failed", extra={"error": str(e)[:500]})
            stop.wait(delay)


def start(api: kube.Api, settings: Settings, leading: Callable[[], bool], stop: threading.Event,
          registry: Any = None) -> Rotator:
    """The controller's hook: a :class:`Rotator` on its own thread, writing only while ``leading()``."""
    rotator = Rotator(api, settings, registry)
    threading.Thread(target=rotator.run, args=(leading, stop), daemon=True, name="certificates").start()
    return rotator


