"""Self-managed certificates for the webhook, made with ``cryptography``.

``ensure_certs`` writes the four files of a Kubernetes TLS Secret plus the CA
key (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``) and is safe to run
again: it keeps a valid CA and serving certificate, and renews the serving
certificate when less than a third of its lifetime is left (the rule
cert-manager uses for its default ``renewBefore``) or when its SANs are not
exactly the ones asked for.

SANs: the Service's names only (``NAME``, ``NAME.NS``, ``NAME.NS.svc``,
``NAME.NS.svc.cluster.local``); with ``local=True`` (``certs --local``,
``run-local``) also ``localhost`` and ``127.0.0.1``, for a webhook reached on
loopback. An in-cluster certificate has no use for the loopback names.

A serving certificate cannot outlive the CA that signs it: when the kept CA
expires before a serving certificate of ``days`` would, a new CA is made (and
the ``caBundle`` changes), valid for ``max(CA_DAYS, 3 * days)`` days.

The serving certificate follows what the API server's Go TLS client checks:
the host name ``NAME.NS.svc`` must be a DNS SAN (the Common Name is ignored),
extended key usage ``serverAuth``, and a chain to the ``caBundle``.
"""
from __future__ import annotations

import base64
import copy
import datetime as dt
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from policylib.constants import LOOPBACK_ADDRESS

#: A key that signs a certificate (ours are P-256; a CA read from disk may be RSA).
PrivateKey = CertificateIssuerPrivateKeyTypes
#: A certificate and its key.
Pair = tuple[x509.Certificate, PrivateKey]

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
DEFAULT_DAYS = 365
CA_DAYS = 3650
CLOCK_SKEW = dt.timedelta(minutes=5)
LOCAL_DNS = ("localhost",)
LOCAL_IPS = (LOOPBACK_ADDRESS,)


class CertError(Exception):
    """The certificate directory cannot be used; the message says why."""


@dataclass(frozen=True)
class CertState:
    """What ``ensure_certs`` did: which files it (re)wrote and the CA bundle."""

    directory: Path
    new_ca: bool
    new_serving: bool
    reason: str
    not_after: dt.datetime
    #: ``ca.crt`` was there and was replaced: the ``caBundle`` that trusts the old CA no longer works.
    replaced_ca: bool = False
    ca_not_after: dt.datetime | None = None
    #: The SANs of the serving certificate on disk now.
    sans: tuple[str, ...] = ()

    @property
    def ca_bundle(self) -> str:
        """``caBundle`` for a webhook configuration: base64 of the CA's PEM."""
        return base64.b64encode((self.directory / CA_CERT).read_bytes()).decode("ascii")


def service_dns_names(service: str, namespace: str, local: bool = False) -> list[str]:
    """The names a Service is reached by in-cluster, then (``local``) the loopback name."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local", *(LOCAL_DNS if local else ())]


def serving_ips(local: bool = False) -> list[str]:
    """The IP address SANs: loopback only, and only for a local run."""
    return list(LOCAL_IPS) if local else []


def ca_days(days: int) -> int:
    """A new CA's lifetime: ``CA_DAYS``, or three serving lifetimes when that is longer."""
    return max(CA_DAYS, days * 3)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    """ECDSA P-256: accepted by Go's crypto/tls and cheaper to handshake than RSA."""
    return ec.generate_private_key(ec.SECP256R1())


def common_name(name: str) -> str:
    """A Common Name fits X.509's 64 characters (``NAME.NS.svc`` of a long namespace does not): cut from the
    left, keeping the end. Clients check the SANs, never the Common Name."""
    return name[-64:]


def _builder(subject: str, issuer: x509.Name, key: PrivateKey, now: dt.datetime, days: int,
             lifetime: dt.timedelta | None = None) -> x509.CertificateBuilder:
    """``lifetime`` (the certificate rotator's, in seconds) overrides ``days``."""
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name(subject))]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + (lifetime if lifetime is not None else dt.timedelta(days=days))))


def make_ca(service: str, now: dt.datetime, days: int = CA_DAYS, lifetime: dt.timedelta | None = None) -> Pair:
    """A self-signed CA: basicConstraints CA:TRUE, may sign certificates only."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name(f"{service}-ca"))])
    cert = (_builder(f"{service}-ca", name, key, now, days, lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def make_serving(ca_cert: x509.Certificate, ca_key: PrivateKey, service: str, namespace: str,
                 now: dt.datetime, days: int = DEFAULT_DAYS, local: bool = False,
                 lifetime: dt.timedelta | None = None) -> Pair:
    """The serving certificate: DNS (and, ``local``, loopback) SANs, EKU serverAuth, signed by the CA."""
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in service_dns_names(service, namespace, local)]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in serving_ips(local)]
    cert = (_builder(f"{service}.{namespace}.svc", ca_cert.subject, key, now, days, lifetime)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


# --- reading what is on disk ----------------------------------------------

#: Key types a certificate here may have: what Go's crypto/tls and the API server accept
#: and ``make_ca``/``make_serving`` can sign with (SHA-256).
USABLE_CURVES = ("secp256r1", "secp384r1", "secp521r1")
MIN_RSA_BITS = 2048


def key_kind(key: Any) -> str:
    """The algorithm of a key the webhook does not use, as its class names it (``Ed25519PrivateKey`` is
    "Ed25519", ``DSAPrivateKey`` "DSA"): read off the key itself, so no deprecated algorithm's class (DSA's,
    deprecated in cryptography 51) is named, and nothing warns, unless such a key is actually loaded."""
    return type(key).__name__.removesuffix("PrivateKey")


def _public_key_der(key: Any) -> bytes:
    """The DER SubjectPublicKeyInfo of a public key: comparable for every key type."""
    return bytes(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def key_problem(key: Any, name: str) -> str | None:
    """Why the private key in file ``name`` cannot be used here, or None."""
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in USABLE_CURVES:
        return None
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= MIN_RSA_BITS:
        return None
    if isinstance(key, ec.EllipticCurvePrivateKey):
        what = f"an ECDSA {key.curve.name} key"
    elif isinstance(key, rsa.RSAPrivateKey):
        what = f"a {key.key_size}-bit RSA key"
    else:
        kind = key_kind(key)
        what = f"{'an' if kind[0] in 'AEIOUX' else 'a'} {kind} key"
    return f"{name} holds {what}, which the webhook does not use (ECDSA P-256, P-384, P-521 or RSA >= 2048)"


def _load_pair(directory: Path, cert_name: str, key_name: str, what: str) -> tuple[Pair | None, str | None]:
    """``((cert, key), None)`` from PEM files, or ``(None, why not)`` when missing, unreadable,
    a key type the webhook does not use, or not a pair."""
    unreadable = f"no readable {what} and matching key"
    try:
        cert = x509.load_pem_x509_certificate((directory / cert_name).read_bytes())
        key = serialization.load_pem_private_key((directory / key_name).read_bytes(), password=None)
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm):
        return None, unreadable
    problem = key_problem(key, key_name)
    if problem:
        return None, problem
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):  # key_problem refused the rest
        return None, unreadable
    try:
        if _public_key_der(cert.public_key()) != _public_key_der(key.public_key()):
            return None, unreadable
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None, unreadable
    return (cert, key), None


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _sans(cert: x509.Certificate) -> list[str]:
    """The certificate's DNS and IP SANs as strings."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return san.get_values_for_type(x509.DNSName) + [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]


def sans_problem(cert: x509.Certificate, service: str, namespace: str, local: bool) -> str | None:
    """Why the certificate's SANs are not exactly the ones asked for, or None."""
    have = _sans(cert)
    want = service_dns_names(service, namespace, local) + serving_ips(local)
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    if not missing and not extra:
        return None
    parts = ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has {', '.join(extra)}"] if extra else [])
    asked = "the Service's names and loopback (--local)" if local else "the Service's names only (no --local)"
    return f"the serving certificate's SANs differ from those asked for, {asked}: it {' and '.join(parts)}"


def ca_problem(pair: Pair | None, now: dt.datetime, days: int, unusable: str | None = None) -> str | None:
    """Why the CA on disk cannot be kept, or None.

    It must be a CA and outlive a serving certificate issued now. ``unusable``
    is why :func:`_load_pair` found no pair.
    """
    if pair is None:
        return unusable or "no readable CA certificate and matching key"
    cert, _ = pair
    if not _is_ca(cert):
        return "ca.crt is not a CA (basicConstraints CA:FALSE)"
    end = cert.not_valid_after_utc
    if end <= now:
        return f"the CA expired {end:%Y-%m-%d}"
    serving_end = now + dt.timedelta(days=days)
    if end < serving_end:
        return (f"the CA expires {end:%Y-%m-%d}, before a serving certificate valid for {days} days would "
                f"({serving_end:%Y-%m-%d}), and a serving certificate cannot outlive the CA that signs it")
    return None


def serving_problem(pair: Pair | None, ca_cert: x509.Certificate, service: str, namespace: str,
                    now: dt.datetime, unusable: str | None = None, local: bool = False) -> str | None:
    """Why the serving certificate on disk must be renewed, or None (``unusable``: see :func:`ca_problem`)."""
    if pair is None:
        return unusable or "no readable serving certificate and matching key"
    cert, _ = pair
    if cert.issuer != ca_cert.subject:
        return "the serving certificate was not issued by ca.crt"
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
        return "the serving certificate's signature does not verify against ca.crt"
    sans = sans_problem(cert, service, namespace, local)
    if sans:
        return sans
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now >= end - (end - start) / 3:
        return f"less than a third of the serving certificate's lifetime is left (expires {end:%Y-%m-%d})"
    return None


# --- writing ----------------------------------------------------------------

def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file and rename, so a reader sees the old or the new file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_pair(directory: Path, cert_name: str, key_name: str, cert: x509.Certificate, key: PrivateKey) -> None:
    """Key first, then certificate: a server reloading on the certificate's change sees both."""
    _write_atomic(directory / key_name, _key_pem(key), 0o600)
    _write_atomic(directory / cert_name, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def max_days(now: dt.datetime) -> int:
    """The longest ``days`` whose CA (``ca_days(days)``, from ``now``) ends by 9999-12-31."""
    last = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone.utc)
    room = (last - now).days
    return room // 3 if room >= CA_DAYS else 0


def ensure_certs(directory: str | Path, service: str, namespace: str, days: int = DEFAULT_DAYS,
                 renew: bool = False, now: dt.datetime | None = None, local: bool = False) -> CertState:
    """Make or keep the CA and serving certificate in ``directory`` (see module docstring).

    ``renew`` forces a new serving certificate from the kept CA; ``local`` adds the loopback SANs
    (``localhost``, ``127.0.0.1``). A serving certificate whose SANs are not exactly the ones asked
    for is renewed.
    """
    if days < 1:
        raise CertError(f"--days must be at least 1, got {days}")
    now = now or _now()
    longest = max_days(now)
    if days > longest:
        raise CertError(f"--days {days} is too long: the CA, which must outlive the serving certificate, is made "
                        f"for {ca_days(days)} days and would end after 9999-12-31, the last date a certificate "
                        f"can carry; at most {longest}")
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CertError(f"cannot create {directory}: {e.strerror or e}") from None
    had_ca = (directory / CA_CERT).exists()
    ca, unusable = _load_pair(directory, CA_CERT, CA_KEY, "CA certificate")
    new_ca = ca_problem(ca, now, days, unusable)
    if new_ca or ca is None:  # ca_problem names a missing CA: both mean a new one
        ca = make_ca(service, now, ca_days(days))
        write_pair(directory, CA_CERT, CA_KEY, *ca)
    serving, unusable = _load_pair(directory, TLS_CERT, TLS_KEY, "serving certificate")
    why = new_ca or ("renewal requested" if renew else None) or \
        serving_problem(serving, ca[0], service, namespace, now, unusable, local)
    if why or serving is None:  # serving_problem names a missing certificate: both mean a new one
        serving = make_serving(ca[0], ca[1], service, namespace, now, days, local)
        write_pair(directory, TLS_CERT, TLS_KEY, *serving)
    return CertState(directory, bool(new_ca), bool(why), why or "kept: CA and serving certificate are valid",
                     serving[0].not_valid_after_utc, replaced_ca=bool(new_ca) and had_ca,
                     ca_not_after=ca[0].not_valid_after_utc, sans=tuple(_sans(serving[0])))


def certificate_not_after(path: str | Path) -> float:
    """A PEM certificate's notAfter as seconds since the epoch."""
    cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    return cert.not_valid_after_utc.timestamp()


# --- the webhook configuration ----------------------------------------------

def with_ca_bundle(configuration: dict[str, Any], ca_bundle: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """The configuration with ``ca_bundle`` on every webhook's clientConfig, the names of all its webhooks and
    of those whose caBundle changed. Every entry, by name: never a count or an index of them."""
    body = copy.deepcopy(configuration)
    names, changed = [], []
    for hook in body.get("webhooks") or []:
        names.append(str(hook.get("name")))
        client = hook.setdefault("clientConfig", {})
        if client.get("caBundle") != ca_bundle:
            client["caBundle"] = ca_bundle
            changed.append(str(hook.get("name")))
    return body, names, changed


def patch_configuration(api: Any, name: str, ca_bundle: str, attempts: int = 5) -> tuple[list[str], list[str]]:
    """Put ``ca_bundle`` on every webhook of the MutatingWebhookConfiguration ``name`` (a read and an update
    at its resourceVersion, again on a conflict); returns (every webhook's name, the ones changed)."""
    from policylib.shell import kube
    res = kube.MUTATING_WEBHOOKS
    for attempt in range(attempts):
        try:
            current = api.get(res, None, name)
        except kube.NotFound:
            raise CertError(f"mutatingwebhookconfiguration {name!r} not found: apply the manifests first "
                            "(kubectl apply -k manifests/), then run this again") from None
        except kube.ApiError as e:
            raise CertError(f"cannot read mutatingwebhookconfiguration {name!r}: {e}") from None
        body, names, changed = with_ca_bundle(current, ca_bundle)
        if not names:
            raise CertError(f"mutatingwebhookconfiguration {name!r} has no webhooks to put the caBundle on")
        if not changed:
            return names, []
        try:
            api.update(res, None, name, body)
            return names, changed
        except kube.Conflict:
            if attempt == attempts - 1:
                raise CertError(f"mutatingwebhookconfiguration {name!r} kept changing while the caBundle was being "
                                f"written ({attempts} conflicts): run this again") from None
        except kube.ApiError as e:
            raise CertError(f"cannot write the caBundle of mutatingwebhookconfiguration {name!r}: {e}") from None
    raise AssertionError("unreachable")

