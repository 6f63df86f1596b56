"""Self-managed certificates for the webhook: the directory ``certs`` and ``run-local`` keep, made by
:mod:`webhook.certmake` and judged by :mod:`webhook.certcheck`.

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
import datetime as dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from .certcheck import ca_problem, load_pair, san_names, serving_problem
from .certmake import CA_DAYS, DEFAULT_DAYS, PrivateKey, ca_days, make_ca, make_serving

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"


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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


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
    ca, unusable = load_pair(directory, CA_CERT, CA_KEY, "CA certificate")
    new_ca = ca_problem(ca, now, days, unusable)
    if new_ca or ca is None:  # ca_problem names a missing CA: both mean a new one
        ca = make_ca(service, now, ca_days(days))
        write_pair(directory, CA_CERT, CA_KEY, *ca)
    serving, unusable = load_pair(directory, TLS_CERT, TLS_KEY, "serving certificate")
    why = new_ca or ("renewal requested" if renew else None) or \
        serving_problem(serving, ca[0], service, namespace, now, unusable, local)
    if why or serving is None:  # serving_problem names a missing certificate: both mean a new one
        serving = make_serving(ca[0], ca[1], service, namespace, now, days, local)
        write_pair(directory, TLS_CERT, TLS_KEY, *serving)
    return CertState(directory, bool(new_ca), bool(why), why or "kept: CA and serving certificate are valid",
                     serving[0].not_valid_after_utc, replaced_ca=bool(new_ca) and had_ca,
                     ca_not_after=ca[0].not_valid_after_utc, sans=tuple(san_names(serving[0])))


def certificate_not_after(path: str | Path) -> float:
    """A PEM certificate's notAfter as seconds since the epoch."""
    cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    return cert.not_valid_after_utc.timestamp()
