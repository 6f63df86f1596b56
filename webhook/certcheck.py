"""Reading the certificates on disk and deciding whether each can be kept: a key type the webhook uses, a CA that
outlives a serving certificate issued now, a serving certificate signed by it with exactly the SANs asked for and
more than a third of its lifetime left."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .certmake import Pair, service_dns_names, serving_ips

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


def load_pair(directory: Path, cert_name: str, key_name: str, what: str) -> tuple[Pair | None, str | None]:
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


def san_names(cert: x509.Certificate) -> list[str]:
    """The certificate's DNS and IP SANs as strings."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return san.get_values_for_type(x509.DNSName) + [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]


def sans_problem(cert: x509.Certificate, service: str, namespace: str, local: bool) -> str | None:
    """Why the certificate's SANs are not exactly the ones asked for, or None."""
    have = san_names(cert)
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
    is why :func:`load_pair` found no pair.
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
