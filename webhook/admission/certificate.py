"""The serving certificate: ``tls.crt`` and ``tls.key`` from ``--cert-dir`` (and ``--client-ca``) as an
``ssl.SSLContext`` rebuilt when the files change (rule W14's settings), and the checks ``serve`` makes of them
before it starts."""
from __future__ import annotations

import logging
import os
import ssl
import threading
from pathlib import Path
from typing import Any

from policylib.constants import ANY_ADDRESS, LOOPBACK_ADDRESS

from ..certs import TLS_CERT, TLS_KEY, CertError, certificate_not_after

#: What a reload compares: inode, mtime and size of the certificate and of the key.
Signature = tuple[tuple[int, int, int], ...]
#: TLS 1.2 suites the server accepts: ECDHE key exchange and an AEAD cipher (AES-GCM, ChaCha20-Poly1305), for an
#: ECDSA or an RSA certificate: the suites Go's crypto/tls (the API server's client) prefers, none with CBC. TLS 1.3
#: has AEAD suites only, and OpenSSL sets them apart from this list.
TLS12_CIPHERS = ":".join(("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
                          "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
                          "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"))
#: ``--tls-min-version``'s values.
TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
log = logging.getLogger(__name__)
#: How many times one connection loads files that keep changing under it before it takes the context it has.
RELOAD_ATTEMPTS = 3


class ServingCertificate:
    """``tls.crt`` and ``tls.key`` (and the client CA, when given) as an ``ssl.SSLContext``, rebuilt when they change.

    Each new connection stats the files (microseconds). A set that does not
    load (mid-rotation: one file new, the other old) keeps the previous context
    and is tried again on the next connection. ``context_class`` makes the
    contexts: a gevent worker needs ``gevent.ssl.SSLContext`` (:meth:`use`), whose
    sockets wait cooperatively. ``minimum_version`` is a key of :data:`TLS_VERSIONS`;
    ``client_ca``, a PEM file of the CAs whose client certificates are verified.
    """

    def __init__(self, cert_dir: str | Path, context_class: type[ssl.SSLContext] = ssl.SSLContext,
                 minimum_version: str = "1.2", client_ca: str | Path | None = None):
        self.cert_path = Path(cert_dir) / TLS_CERT
        self.key_path = Path(cert_dir) / TLS_KEY
        self.minimum_version = minimum_version
        self.client_ca = Path(client_ca) if client_ca else None
        self.context_class = context_class
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._signature: Signature | None = None
        self.not_after: float | None = None
        self.error: str | None = None
        if self.context() is None:
            raise CertError(f"cannot load {self.cert_path} and {self.key_path}: "
                            f"{self.error or 'one of them is missing or unreadable'}")

    def use(self, context_class: type[ssl.SSLContext]) -> None:
        """Make contexts with ``context_class`` from now on, starting with the current files."""
        with self._lock:
            self.context_class, self._signature = context_class, None
        if self.context() is None or not isinstance(self._context, context_class):
            raise CertError(f"cannot load {self.cert_path} and {self.key_path}: {self.error}")

    def _files(self) -> tuple[Path, ...]:
        return (self.cert_path, self.key_path) + ((self.client_ca,) if self.client_ca else ())

    def _files_signature(self) -> Signature | None:
        try:
            return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in map(os.stat, self._files()))
        except OSError:
            return None

    def context(self) -> ssl.SSLContext | None:
        """The current context, reloaded first if the files changed. Files that change while they load (a Secret
        volume's update swapping them) are loaded again at once, up to :data:`RELOAD_ATTEMPTS` times: the connection
        that found them changed must not get the previous context, which may have expired (a renewed certificate is
        only loaded when a connection comes)."""
        for _ in range(RELOAD_ATTEMPTS):
            signature = self._files_signature()
            if signature is None or signature == self._signature:
                break
            with self._lock:
                if signature == self._signature or self._reload(signature):
                    break
        return self._context

    def _reload(self, signature: Signature) -> bool:
        """Load the files of ``signature``; False when they changed while loading (load them again)."""
        try:
            context = make_server_context(self.cert_path, self.key_path, self.context_class,
                                          minimum_version=self.minimum_version, client_ca=self.client_ca)
            not_after = certificate_not_after(self.cert_path)
        except (ssl.SSLError, OSError, ValueError) as e:
            if self._files_signature() != signature:
                return False   # one file new, the other old: swapped under the load
            self.error = f"{type(e).__name__}: {e}"
            log.warning("serving certificate not reloaded, keeping the previous one",
                        extra={"certificate": str(self.cert_path), "error": self.error})
            return True
        if self._files_signature() != signature:
            return False   # changed while loading
        self._context, self._signature, self.not_after, self.error = context, signature, not_after, None
        log.info("serving certificate loaded", extra={"certificate": str(self.cert_path), "not_after": round(not_after)})
        return True

    def status(self) -> dict[str, Any]:
        return {"loaded": self._context is not None, "certificate": str(self.cert_path),
                "notAfter": self.not_after, "error": self.error, "minVersion": self.minimum_version,
                "clientCA": str(self.client_ca) if self.client_ca else None}


def make_server_context(cert_path: Path, key_path: Path, context_class: type[ssl.SSLContext] = ssl.SSLContext, *,
                        minimum_version: str = "1.2", client_ca: Path | None = None) -> ssl.SSLContext:
    """Rule W14: server-side TLS, ``minimum_version`` or newer, TLS 1.2's AEAD suites only (:data:`TLS12_CIPHERS`),
    HTTP/1.1 by ALPN. With ``client_ca``, a client certificate is asked for and, when one is presented, verified against
    it (OpenSSL checks that it may authenticate a client: an extended key usage without ``clientAuth`` fails) or
    the handshake fails; a client without one is served, and the app decides what it may ask (the kubelet's
    probes present none)."""
    context = context_class(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[minimum_version]
    context.set_ciphers(TLS12_CIPHERS)
    context.load_cert_chain(certfile=str(cert_path), keyfile=str(key_path))
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])
    return context


LOOPBACK_HOSTS = (LOOPBACK_ADDRESS, "localhost", "::1")


def missing_certificates(cert_dir: str | Path, host: str = ANY_ADDRESS) -> str | None:
    """Why ``cert_dir`` cannot hold the serving certificate (not there, or ``tls.crt``/``tls.key``
    missing) and the command that makes them; None when both files are there."""
    import shlex
    directory = Path(cert_dir)
    command = f"python -m webhook certs --out {shlex.quote(str(cert_dir))}" + (" --local" if host in LOOPBACK_HOSTS else "")
    if not directory.exists():
        why = f"{cert_dir} does not exist"
    elif not directory.is_dir():
        why = f"{cert_dir} is not a directory"
    else:
        missing = [name for name in (TLS_CERT, TLS_KEY) if not (directory / name).is_file()]
        if not missing:
            return None
        why = f"{cert_dir} has no {' and no '.join(missing)}"
    return (f"cannot load {directory / TLS_CERT} and {directory / TLS_KEY}: {why}; "
            f"make them with: {command}")


def client_ca_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be ``--client-ca`` (missing, unreadable, no PEM certificate in it), or None."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=str(path))
    except FileNotFoundError:
        return f"--client-ca {path}: no such file"
    except ssl.SSLError:   # an OSError too: first
        return f"--client-ca {path}: holds no PEM certificate"
    except OSError as e:
        return f"--client-ca {path}: cannot be read: {e.strerror or e}"
    return None
