"""The pure core of the webhook's certificates (the controller's certificate rotator, :mod:`.certrotator`;
docs/operations.md, "Certificates"): the settings, the facts read from the three objects that hold the state,
and :func:`plan`, which decides the one next step.

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
import re
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from policylib.constants import INSTALL_NAMESPACE, WEBHOOK_CA_SECRET, WEBHOOK_CONFIGURATION, WEBHOOK_SERVICE, WEBHOOK_TLS_SECRET

from ..certcheck import key_problem
from ..certmake import service_dns_names

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

def data_bytes(data: dict[str, Any], key: str) -> bytes | None:
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
    certs = load_certs(data_bytes(secret.get("data") or {}, CA_CRT))
    raw_key = data_bytes(secret.get("data") or {}, CA_KEY)
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
    previous = load_certs(data_bytes((ca_secret or {}).get("data") or {}, PREVIOUS_CA))[:1] if pair else []
    issuers = ([ca] if ca else []) + previous
    serving = load_certs(data_bytes((tls_secret or {}).get("data") or {}, TLS_CRT))[:1]
    bundle = None
    if webhook_config is not None:
        hooks = webhook_config.get("webhooks") or []
        bundles = {(h.get("clientConfig") or {}).get("caBundle") or "" for h in hooks}
        if len(bundles) == 1:
            raw = data_bytes({"b": bundles.pop()}, "b") or b""
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
