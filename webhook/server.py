"""gunicorn run from Python: gevent workers over TLS, certificates reloaded from disk.

What it sets and why (facts measured on this kind of machine are in
docs/figures.md, "Reliability"):

- gunicorn's stock **gevent worker** (:class:`TLSGeventWorker` subclasses it
  through its public methods only): each connection is a greenlet, so idle,
  slow or stalled clients cost memory, never a thread; at most
  ``--max-connections`` per worker (gunicorn's ``worker_connections``). A
  worker that holds that many closes the connection that has waited longest
  without a request for each new one (:class:`Connections`), so connections
  that say nothing cannot lock new clients out; logged and counted in
  ``policylib_webhook_connection_limit_reached_total``.
- TLS 1.2 with AEAD suites only (:data:`TLS12_CIPHERS`), or TLS 1.3 only
  (``--tls-min-version``); ECDSA or RSA certificate from ``--cert-dir``
  (``tls.crt``/``tls.key``). The worker does the handshake itself with the
  context :class:`ServingCertificate` holds, which is rebuilt when either file
  changes (a Secret volume's update, ``webhook certs``), so each new
  connection gets the current certificate without a restart while open ones
  finish on theirs. With ``--client-ca`` the context asks for a client
  certificate and verifies one against that CA (the API server presents one
  when its AdmissionConfiguration says so); the app answers reviews only on
  connections that presented one (:class:`ClientCertificates`).
- deadlines (:data:`CLIENT_DEADLINE`, 2 s): a TLS handshake from the moment
  the client connects, a request from its first byte (headers and body), an
  answer's write; a new connection's first request must begin within
  ``--first-request-timeout`` (5 s) of its handshake. A connection short of
  one is closed (counted in ``policylib_webhook_slow_clients_total``); a body
  that does not arrive in time gets 408 first.
- keep-alive 120 s, longer than Go's 90 s idle-connection timeout, so the API
  server, not us, closes idle connections and never races our close. The API
  server reuses its connections (``policylib_webhook_tls_handshakes_total``
  counts new ones: a few per thousands of reviews) and asks for HTTP/1.1 from a
  webhook behind a Service, so the server offers HTTP/1.1 only.
- each TLS step of a connection (handshake, read, write) runs non-blocking and starts with the worker thread's
  OpenSSL error queue empty (:func:`tls_step`): every connection of a worker shares that one queue, and a step that
  failed on one (a client that reset while its handshake or answer was written) must not fail another's
  (rule W16).
- an answer's head and body go out in one TLS write (one record, one wake-up
  of the client) instead of gunicorn's two (docs/performance.md).
- gunicorn does not terminate TLS here, so it is told twice over that the
  connection is TLS: each request's scheme is ``https`` (``wsgi.url_scheme``),
  and ``sendfile`` is off (gunicorn's setting, and :meth:`DeadlineSocket.sendfile`
  writes through TLS whatever gunicorn decides): a file answer can never go to
  the client's socket unencrypted or ahead of its head.
- no control socket (it needs a writable ``$HOME`` or ``$XDG_RUNTIME_DIR``);
  SIGTERM stops accepting, answers each kept-alive connection's next request
  with ``Connection: close`` (an idle one is closed after
  :data:`SHUTDOWN_IDLE_SECONDS`), and drains in-flight requests for up to
  ``--graceful-timeout`` seconds.
- Prometheus multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` is set (and
  emptied) before any worker starts; a dead worker's live gauges are dropped.
  A directory ``serve`` made itself is removed by the master alone, at its
  exit: a worker's exit (a SIGTERM, a timeout's abort) unwinds ``serve`` in
  the worker too, and must leave it to the next worker.
- gunicorn's start-up line names its listener ``http://`` (it does not do the
  TLS); :class:`TLSListenerLine`, a filter on gunicorn's logger for its own
  messages (``gunicorn.error``), makes it ``https://``.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import importlib.util
import itertools
import logging
import os
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, TypeVar

import gevent
import gevent.local
import gevent.monkey
import gevent.socket
import gevent.ssl
from gunicorn.app.base import BaseApplication
from gunicorn.http.errors import NoMoreData
from gunicorn.workers.ggevent import GeventWorker

from policylib.constants import ANY_ADDRESS, LOOPBACK_ADDRESS, WEBHOOK_NAME, WEBHOOK_PORT

from .certs import TLS_CERT, TLS_KEY, CertError, certificate_not_after

if TYPE_CHECKING:
    from flask import Flask

    import policylib

    from .metrics import Metrics

W = TypeVar("W")
#: What a reload compares: inode, mtime and size of the certificate and of the key.
Signature = tuple[tuple[int, int, int], ...]

#: A client has this long for its TLS handshake (from the moment it connects), for each request
#: (from its first byte to its last) and for taking each answer: a connection short of one is
#: closed. Well under the API server's 3 s ``timeoutSeconds``, far over what a working client needs.
CLIENT_DEADLINE = 2.0
#: A new connection's first request must begin this long after its handshake at most (``--first-request-timeout``).
#: A client of ours sends its request at once; the API server's HTTP client sometimes keeps a connection it dialled
#: for a request another connection served, and dials again when it needs one.
FIRST_REQUEST_SECONDS = 5.0
#: Between requests on a kept-alive connection.
KEEPALIVE_SECONDS = 120
#: How often an idle keep-alive connection checks whether its worker is shutting down.
IDLE_CHECK_SECONDS = 0.5
#: After SIGTERM an idle keep-alive connection waits this long for one last request (answered with
#: ``Connection: close``) before it is closed. The API server keeps sending reviews on the connections it holds
#: to a pod whose endpoint it has dropped; closing one at once races a review written to it, which the API
#: server's HTTP client does not resend (a POST): that review fails (rule W9). Within ``--graceful-timeout``,
#: and with the preStop delay within terminationGracePeriodSeconds.
SHUTDOWN_IDLE_SECONDS = 10.0
#: gunicorn's ``worker_connections``: open connections one worker holds at most (it stops
#: accepting while it holds that many; the others, and the kernel's backlog, take the rest).
MAX_CONNECTIONS = 1000
#: An answer's writes are gathered up to this many bytes, then written (an answer is usually a few KiB).
HOLD_BYTES = 256 * 1024
#: A worker at its connection limit logs it at most once per this many seconds (with the count since the last line).
LIMIT_LOG_SECONDS = 10.0
#: TLS 1.2 suites the server accepts: ECDHE key exchange and an AEAD cipher (AES-GCM, ChaCha20-Poly1305), for an
#: ECDSA or an RSA certificate: the suites Go's crypto/tls (the API server's client) prefers, none with CBC. TLS 1.3
#: has AEAD suites only, and OpenSSL sets them apart from this list.
TLS12_CIPHERS = ":".join(("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
                          "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
                          "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"))
#: ``--tls-min-version``'s values.
TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
log = logging.getLogger(__name__)


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
        """The current context, reloaded first if the files changed."""
        signature = self._files_signature()
        if signature is not None and signature != self._signature:
            with self._lock:
                if signature != self._signature:
                    self._reload(signature)
        return self._context

    def _reload(self, signature: Signature) -> None:
        try:
            context = make_server_context(self.cert_path, self.key_path, self.context_class,
                                          minimum_version=self.minimum_version, client_ca=self.client_ca)
            not_after = certificate_not_after(self.cert_path)
        except (ssl.SSLError, OSError, ValueError) as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("serving certificate not reloaded, keeping the previous one",
                        extra={"certificate": str(self.cert_path), "error": self.error})
            return
        if self._files_signature() != signature:
            return  # changed while loading: load again on the next connection
        self._context, self._signature, self.not_after, self.error = context, signature, not_after, None
        log.info("serving certificate loaded", extra={"certificate": str(self.cert_path), "not_after": round(not_after)})

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


def _openssl_clear_error() -> Callable[[], None] | None:
    """OpenSSL's ``ERR_clear_error``, from the very libcrypto the ``ssl`` module runs on (looked up through the
    ``_ssl`` extension's own dependencies, or the interpreter's where ``_ssl`` is built in), or None where it cannot
    be reached or is not that library (its version differs from ``ssl.OPENSSL_VERSION_NUMBER``)."""
    spec = importlib.util.find_spec("_ssl")
    origin = spec.origin if spec is not None and spec.origin and os.path.isfile(spec.origin) else None
    try:
        library = ctypes.CDLL(origin)
        clear, version = library.ERR_clear_error, library.OpenSSL_version_num
    except (OSError, AttributeError):
        return None
    version.argtypes, version.restype = [], ctypes.c_ulong
    if version() != ssl.OPENSSL_VERSION_NUMBER:
        return None
    clear.argtypes, clear.restype = [], None
    return clear


#: OpenSSL's ``ERR_clear_error`` (None where the server cannot reach it: it then logs so once per worker).
OPENSSL_CLEAR_ERROR = _openssl_clear_error()


def clear_tls_errors() -> None:
    """Rule W16: empty the calling thread's OpenSSL error queue.

    OpenSSL keeps one error queue per thread, and a gevent worker serves every connection on one thread. Since
    OpenSSL 3.2 a TLS write that fails in the socket (the client reset the connection) leaves its system error on that
    queue, and Python's ``ssl`` module raises it (``BrokenPipeError``, ``ConnectionResetError``) without emptying the
    queue. OpenSSL's "would block" on any connection of that thread, until the queue is emptied, then reads as that
    error: a healthy connection whose request body, or handshake, has not all arrived fails with the other one's error.
    OpenSSL asks for an empty queue before each TLS step; :func:`tls_step` empties it before each of ours."""
    if OPENSSL_CLEAR_ERROR is not None:
        OPENSSL_CLEAR_ERROR()


def tls_step(sock: ssl.SSLSocket, step: Callable[[], W], deadline: float) -> W:
    """Rule W16: ``step`` (one TLS handshake, read or write of ``sock``) until it completes, each attempt made
    non-blocking right after :func:`clear_tls_errors` (nothing runs between the two), the greenlet waiting between
    attempts for the socket as OpenSSL asks; ``TimeoutError`` once the monotonic ``deadline`` passes. A step that fails
    empties the queue too, so its error is not left for the next step of another connection, or the worker's other TLS
    clients (the Kubernetes API's)."""
    sock.settimeout(0.0)
    while True:
        clear_tls_errors()
        try:
            return step()
        except ssl.SSLWantReadError:
            wait = gevent.socket.wait_read
        except ssl.SSLWantWriteError:
            wait = gevent.socket.wait_write
        except BaseException:
            clear_tls_errors()
            raise
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the TLS peer was not ready in time")
        wait(sock.fileno(), timeout=remaining)


class ClientTooSlow(NoMoreData, TimeoutError):  # type: ignore[misc]  # gunicorn has no type hints
    """A client did not send its request within :data:`CLIENT_DEADLINE` (raised by :class:`DeadlineSocket`).

    A :class:`~gunicorn.http.errors.NoMoreData`, so gunicorn drops the
    connection quietly; a ``TimeoutError``, so the app answers 408 when it
    happens while the body is read.
    """

    def __str__(self) -> str:
        return f"client did not send its request within {CLIENT_DEADLINE:g} s"


class DeadlineSocket:
    """A served TLS connection as gunicorn's parser and response see it: reads and writes by deadline.

    Between requests (``deadline`` None) a read waits for the next request's
    first bytes up to the keep-alive timeout (the first request: up to the
    worker's ``first_request_timeout``), giving up early when the worker shuts
    down or :class:`Connections` closes the connection; from those bytes on,
    every read of that request (headers and body) ends by one deadline
    :data:`CLIENT_DEADLINE` later, however the client spreads its bytes. :meth:`TLSGeventWorker.handle_request` sets ``deadline``
    back to None once the answer is written. Everything else is the socket's.
    """

    def __init__(self, sock: ssl.SSLSocket, worker: "TLSGeventWorker", connection: "Connection"):
        self.sock = sock
        self.worker = worker
        self.connection = connection
        self.deadline: float | None = None
        self.too_slow = False
        self.holding = False
        self._held: list[bytes] = []
        self._held_bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def recv(self, size: int) -> bytes:
        if self.deadline is None:
            if not self._request_begins():
                return b""  # keep-alive timeout, shutdown or closed to make room: gunicorn closes quietly
            self.connection.busy()
            self.deadline = time.monotonic() + CLIENT_DEADLINE
        if self.deadline <= time.monotonic():
            raise self._give_up()
        try:
            return tls_step(self.sock, lambda: self.sock.recv(size), self.deadline)
        except TimeoutError:
            raise self._give_up() from None

    def _request_begins(self) -> bool:
        """Whether bytes arrive before the keep-alive timeout (a first request: before the worker's
        ``first_request_timeout``, else the connection is counted as a slow client); once the worker shuts down,
        within :data:`SHUTDOWN_IDLE_SECONDS` (that last request is answered with ``Connection: close``: rule W9);
        never once :class:`Connections` has closed the connection to make room."""
        first = self.connection.stage == FIRST_REQUEST
        idle_until = time.monotonic() + (self.worker.first_request_timeout if first else KEEPALIVE_SECONDS)
        shutting_down = False
        while not self.connection.evicted:
            if self.sock.pending():
                return True
            if not shutting_down and not self.worker.alive:
                shutting_down = True
                idle_until = min(idle_until, time.monotonic() + SHUTDOWN_IDLE_SECONDS)
            remaining = idle_until - time.monotonic()
            if remaining <= 0:
                if first and not shutting_down:
                    self.worker.client_too_slow(FIRST_REQUEST)
                return False
            try:
                gevent.socket.wait_read(self.sock.fileno(), timeout=min(IDLE_CHECK_SECONDS, remaining))
                return not self.connection.evicted
            except TimeoutError:
                continue
        return False

    def _give_up(self) -> ClientTooSlow:
        if not self.too_slow:
            self.too_slow = True
            self.worker.client_too_slow("request")
        return ClientTooSlow()

    def send(self, data: bytes) -> int:
        return self._write(data)

    def sendfile(self, file: IO[bytes], offset: int = 0, count: int | None = None) -> int:
        """A file's bytes written through TLS and :meth:`sendall` (after a head :meth:`hold` gathered),
        never by ``sendfile(2)``, which would put them on the socket unencrypted, or ahead of the head."""
        file.seek(offset)
        sent = 0
        while count is None or sent < count:
            chunk = file.read(HOLD_BYTES if count is None else min(HOLD_BYTES, count - sent))
            if not chunk:
                break
            self.sendall(chunk)
            sent += len(chunk)
        return sent

    def sendall(self, data: bytes) -> None:
        """While an answer is written (``holding``), its pieces are gathered and go out together at
        :meth:`release` (or once :data:`HOLD_BYTES` are held): gunicorn writes the head and the body
        separately, and each TLS write on loopback wakes the client up once more."""
        if not self.holding:
            self._write_all(data)
            return
        self._held.append(bytes(data))
        self._held_bytes += len(data)
        if self._held_bytes >= HOLD_BYTES:
            self.release()

    def hold(self) -> None:
        """Gather :meth:`sendall`'s writes until :meth:`release`."""
        self.holding = True

    def release(self) -> None:
        """Write what :meth:`sendall` gathered, in one TLS write."""
        if self._held:
            data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held, self._held_bytes = [], 0
            self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._write(view):]

    def _write(self, data: bytes | memoryview) -> int:
        """One TLS write (all of ``data``: Python's ``ssl`` has OpenSSL write all or nothing) by :func:`tls_step`.
        A write the client does not take within :data:`CLIENT_DEADLINE` ends the connection (logged as a broken pipe,
        which gunicorn treats as the client gone, not as a server error)."""
        try:
            return tls_step(self.sock, lambda: self.sock.write(data), time.monotonic() + CLIENT_DEADLINE)
        except TimeoutError:
            raise BrokenPipeError(errno.EPIPE, f"client did not take the answer within {CLIENT_DEADLINE:g} s") from None


#: At its limit, a worker looks at this many of the longest-waiting connections of a queue for one to close.
EVICTION_SCAN = 16
#: ``select.select`` as the standard library has it (gevent's yields to its loop).
_select = gevent.monkey.get_original("select", "select")

#: A connection's stages as :class:`Connections` sees them (the label values of the limit metric, with ``none``).
HANDSHAKE, FIRST_REQUEST, BUSY, KEEP_ALIVE = "handshake", "first-request", "busy", "keep-alive"


class Connection:
    """One client connection of a worker: its socket (the TLS one once wrapped), its stage, and whether
    :class:`Connections` closed it to make room."""

    __slots__ = ("sock", "stage", "evicted", "_owner")

    def __init__(self, sock: socket.socket, owner: "Connections"):
        self.sock = sock
        self.stage = HANDSHAKE
        self.evicted = False
        self._owner = owner

    def waiting(self, stage: str) -> None:
        """Waiting for the client: for its first request (``FIRST_REQUEST``) or, kept alive, its next one."""
        self._owner.waiting(self, stage)

    def busy(self) -> None:
        """A request has begun: the connection is not closed to make room until it has been answered."""
        self._owner.busy(self)

    def has_input(self) -> bool:
        """Bytes have arrived that its greenlet has not read yet: a request is beginning (TLS may hold some already
        decrypted). Checked without waiting, with the unpatched ``select``: this must not yield."""
        pending = getattr(self.sock, "pending", None)
        if pending is not None and pending():
            return True
        fd = self.sock.fileno()
        return fd >= 0 and bool(_select([fd], [], [], 0)[0])

    def evict(self) -> None:
        """Shut the connection down under the greenlet that serves it, which then wakes (end of file) and closes
        it: through a duplicate of its descriptor, so neither its TLS state nor its socket object is touched."""
        self.evicted = True
        fd = self.sock.fileno()
        if fd < 0:
            return  # already closed
        with socket.fromfd(fd, self.sock.family, self.sock.type) as duplicate, contextlib.suppress(OSError):
            duplicate.shutdown(socket.SHUT_RDWR)  # OSError: the client is gone already


class Connections:
    """Rule W12: a worker's open connections, and its limit (gunicorn's ``worker_connections``, ``--max-connections``).

    gevent's server stops accepting while the worker holds ``limit`` connections. Left at that, connections
    that say nothing (a TLS handshake never finished, no first request) would lock every new client out until
    their deadlines pass, and open again. So the connection that reaches the limit closes the one that has waited
    longest without a request: among those that never sent one first (by arrival), else among the kept-alive
    idle ones (by when they went idle); a connection in the middle of a request, or whose request's first bytes
    have arrived, is never closed. ``reached``
    is told the stage of the connection closed (``"none"`` when every other one is busy with a request).
    Everything runs on the worker's one event-loop thread: no lock.
    """

    def __init__(self, limit: int, reached: Callable[[str], None]):
        self.limit = limit
        self.open = 0
        self._reached = reached
        self._fresh: OrderedDict[Connection, None] = OrderedDict()   # no request yet, by arrival
        self._idle: OrderedDict[Connection, None] = OrderedDict()    # kept alive, by when they went idle

    def opened(self, sock: socket.socket) -> Connection:
        self.open += 1
        if self.open >= self.limit:
            victim = self._longest_waiting()
            self._reached(victim.stage if victim is not None else "none")
            if victim is not None:
                victim.evict()
        connection = Connection(sock, self)
        self._fresh[connection] = None
        return connection

    def _longest_waiting(self) -> Connection | None:
        """The connection to close: the first of the oldest :data:`EVICTION_SCAN` in each queue that has no input
        waiting (one whose request is arriving becomes busy as soon as its greenlet runs: closing it would lose the
        request)."""
        for waiting in (self._fresh, self._idle):
            for connection in itertools.islice(waiting, EVICTION_SCAN):
                if not connection.has_input():
                    del waiting[connection]
                    return connection
        return None

    def waiting(self, connection: Connection, stage: str) -> None:
        connection.stage = stage
        if connection.evicted:
            return
        if stage == KEEP_ALIVE:
            self._idle[connection] = None
        else:
            self._fresh.setdefault(connection, None)

    def busy(self, connection: Connection) -> None:
        connection.stage = BUSY
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)

    def closed(self, connection: Connection) -> None:
        self.open -= 1
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)


#: Per connection (each is a greenlet of its worker, and its requests are answered in it): whether it presented
#: a client certificate that the client CA verified.
_connection = gevent.local.local()


class ClientCertificates:
    """What the app knows of its callers' certificates (a :class:`webhook.protocols.Callers`): with ``--client-ca``
    (``required``) reviews are answered only on connections whose client certificate the CA verified."""

    def __init__(self, required: bool):
        self.required = required

    def verified(self, environ: dict[str, Any]) -> bool:
        return bool(getattr(_connection, "verified", False))


def served_over_tls(req: Any) -> None:
    """A parsed gunicorn request arrived over our TLS: its scheme (``wsgi.url_scheme``) is ``https``. gunicorn
    only knows that when it terminates TLS itself (its ``certfile``), which here the worker does; a client's
    ``X-Forwarded-Proto`` cannot say otherwise."""
    req.scheme = "https"


class TLSGeventWorker(GeventWorker):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn's gevent worker, doing the TLS handshake itself by a deadline and with the
    current certificate, then serving the connection through :class:`DeadlineSocket`.

    Only public methods of gunicorn's worker are extended: ``init_process``
    (contexts whose sockets wait cooperatively, the connection limit), ``handle``
    (the handshake, the connection's place among the worker's :class:`Connections`) and
    ``handle_request`` (the end of a request's deadline).
    """

    def init_process(self) -> None:
        """Contexts from gevent's ``SSLContext`` (its sockets wait cooperatively), the connection limit, then
        gunicorn's start (monkey patching, the app) and loop."""
        self.app.certificate.use(gevent.ssl.SSLContext)
        self.first_request_timeout = float(self.app.options.first_request_timeout)
        self.connections = Connections(self.cfg.worker_connections, self.connection_limit_reached)
        self._limit_times, self._limit_logged = 0, -LIMIT_LOG_SECONDS
        if OPENSSL_CLEAR_ERROR is None:
            log.warning("OpenSSL's ERR_clear_error cannot be reached from Python's ssl module: a connection whose TLS "
                        "write fails may fail the next TLS step of another connection of this worker (rule W16)",
                        extra={"openssl": ssl.OPENSSL_VERSION, "worker": os.getpid()})
        super().init_process()

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        connection = self.connections.opened(client)
        self._count_open(1)
        try:
            tls = self._handshake(client, addr, connection)
            if tls is not None:
                _connection.verified = bool(tls.getpeercert())
                connection.waiting(FIRST_REQUEST)
                super().handle(listener, DeadlineSocket(tls, self, connection), addr)
        finally:
            self.connections.closed(connection)
            self._count_open(-1)

    def _handshake(self, client: socket.socket, addr: Any, connection: Connection) -> ssl.SSLSocket | None:
        """The client's TLS handshake, finished within :data:`CLIENT_DEADLINE` of connecting, or None
        (the connection closed)."""
        sock: socket.socket = client
        deadline = time.monotonic() + CLIENT_DEADLINE
        timer = gevent.Timeout(CLIENT_DEADLINE)
        timer.start()
        try:
            context: ssl.SSLContext | None = self.app.certificate.context()
            if context is None:
                raise ValueError("no serving certificate loaded")
            gevent.socket.wait_read(client.fileno())  # no TLS state for a client that has sent nothing yet
            if connection.evicted:
                raise ValueError("closed to make room for a new connection")
            tls = context.wrap_socket(client, server_side=True, do_handshake_on_connect=False)
            sock = connection.sock = tls
            tls_step(tls, tls.do_handshake, deadline)
            self._count_handshake(tls)
            return tls
        except gevent.Timeout as e:
            if e is not timer:
                raise
            self.client_too_slow("handshake")
        except TimeoutError:
            self.client_too_slow("handshake")
        except (ssl.SSLError, OSError, ValueError) as e:
            log.debug("TLS handshake failed", extra={"peer": str(addr), "error": str(e)})
        finally:
            timer.close()
        sock.close()  # the TLS socket owns the connection once made
        return None

    def handle_request(self, listener_name: Any, req: Any, sock: DeadlineSocket, addr: Any) -> Any:
        """gunicorn's, over TLS (:func:`served_over_tls`), with the answer's writes gathered into one
        (:meth:`DeadlineSocket.sendall`)."""
        served_over_tls(req)
        sock.hold()
        try:
            return super().handle_request(listener_name, req, sock, addr)
        finally:
            sock.holding = False
            sock.deadline = None  # answered: the keep-alive timeout applies until the next request
            sock.connection.waiting(KEEP_ALIVE)
            sock.release()

    def _metrics(self) -> Metrics | None:
        metrics: Metrics | None = getattr(getattr(self, "wsgi", None), "extensions", {}).get("policylib", {}).get("metrics")
        return metrics

    def _count_handshake(self, sock: ssl.SSLSocket) -> None:
        metrics = self._metrics()
        if metrics is not None:
            metrics.tls_handshakes.labels(sock.selected_alpn_protocol() or "none").inc()

    def client_too_slow(self, stage: str) -> None:
        deadline = self.first_request_timeout if stage == FIRST_REQUEST else CLIENT_DEADLINE
        log.debug("closing a connection: the client is too slow", extra={"stage": stage, "deadline_s": deadline})
        metrics = self._metrics()
        if metrics is not None:
            metrics.slow_clients.labels(stage).inc()

    def _count_open(self, change: int) -> None:
        metrics = self._metrics()
        if metrics is not None:
            metrics.open_connections.inc(change)

    def connection_limit_reached(self, closed: str) -> None:
        """A connection arrived while the worker held its limit; ``closed``: the stage of the connection closed to
        make room. Counted each time; logged at most every :data:`LIMIT_LOG_SECONDS`, with the count since."""
        metrics = self._metrics()
        if metrics is not None:
            metrics.connection_limit.labels(closed).inc()
        self._limit_times += 1
        now = time.monotonic()
        if now - self._limit_logged >= LIMIT_LOG_SECONDS:
            log.warning("connection limit reached: each new connection closes the one waiting longest without a "
                        "request", extra={"limit": self.cfg.worker_connections, "times": self._limit_times,
                                          "closed": closed, "worker": os.getpid()})
            self._limit_times, self._limit_logged = 0, now


@dataclass(frozen=True)
class ServeOptions:
    """``webhook serve``'s settings."""

    cert_dir: str
    config: str | None = None
    host: str = ANY_ADDRESS
    port: int = WEBHOOK_PORT
    workers: int = 2
    threads: int = 4  # accepted for compatibility; a gevent worker serves each connection in a greenlet
    max_connections: int = MAX_CONNECTIONS
    first_request_timeout: float = FIRST_REQUEST_SECONDS
    #: A key of :data:`TLS_VERSIONS`.
    tls_min_version: str = "1.2"
    #: PEM file of the CAs whose client certificates the server verifies; reviews then need one.
    client_ca: str | None = None
    graceful_timeout: int = 20
    facts: str = "auto"
    kubeconfig: str | None = None
    log_level: str = "info"
    #: SO_REUSEPORT: several ``webhook serve`` processes on one address, the kernel spreading connections.
    reuse_port: bool = False


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def prepare_metrics_dir() -> str:
    """An empty directory for multiprocess metrics: ``PROMETHEUS_MULTIPROC_DIR`` or a new one."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    else:
        directory = tempfile.mkdtemp(prefix="policylib-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory


class LineBuffer:
    """Review log lines gathered in memory and written together every ``interval`` seconds.

    One write per batch instead of a locked, flushed write per review (about
    50 us each under load). A daemon thread flushes; ``close`` (at exit) flushes
    what is left, so a drained worker loses no line.
    """

    def __init__(self, stream: IO[str] | None = None, interval: float = 0.2):
        self.stream = stream or sys.stdout
        self.interval = interval
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._flush_periodically, name="review-log", daemon=True).start()
        atexit.register(self.close)

    def write(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # stdout closed: nothing better to do with a log line

    def _flush_periodically(self) -> None:
        while not self._closed.wait(self.interval):
            self.flush()

    def close(self) -> None:
        self._closed.set()
        self.flush()


def configure_logging(level: str) -> None:
    """The webhook's own messages on stderr, as JSON lines (webhook/logs.py)."""
    from .logs import configure
    configure(level)


class WebhookServer(BaseApplication):  # type: ignore[misc]  # gunicorn has no type hints
    """A gunicorn application serving :func:`webhook.create_app` with these options."""

    def __init__(self, options: ServeOptions, policy_config: policylib.Config, certificate: ServingCertificate,
                 facts: Any):
        self.options = options
        self.policy_config = policy_config
        self.certificate = certificate
        self.facts = facts
        super().__init__()

    def load_config(self) -> None:
        o = self.options
        settings = {
            "bind": [bind_address(o.host, o.port)],
            "workers": o.workers,
            "worker_class": "webhook.server.TLSGeventWorker",
            "worker_connections": o.max_connections,
            "keepalive": KEEPALIVE_SECONDS,
            "graceful_timeout": o.graceful_timeout,
            "timeout": 30,
            "control_socket_disable": True,
            "sendfile": False,  # gunicorn does not terminate the TLS: see DeadlineSocket.sendfile
            "reuse_port": o.reuse_port,
            "http_protocols": "h1",
            "proc_name": WEBHOOK_NAME,
            "accesslog": None,
            "errorlog": "-",
            "loglevel": o.log_level,
            "child_exit": self._child_exit,
            "on_starting": self._on_starting,
            "when_ready": self._when_ready,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        """In each worker: logging, the facts watch, and the app; review lines go to stdout."""
        from .app import create_app
        configure_logging(self.options.log_level)
        return create_app(self.policy_config, facts=self.facts.start(), tls=self.certificate,
                          review_log=LineBuffer(sys.stdout).write,
                          callers=ClientCertificates(required=self.options.client_ca is not None))

    def _on_starting(self, server: Any) -> None:
        """Before gunicorn names its listeners: its line says https (:class:`TLSListenerLine`), through its logger's
        ``error_log`` (the standard ``gunicorn.error`` logger)."""
        server.log.error_log.addFilter(TLSListenerLine())


    def _when_ready(self, server: Any) -> None:
        """What serves the TLS, with which certificate, versions and client CA."""
        client_ca = f", client certificates verified by {self.options.client_ca}" if self.options.client_ca else ""
        server.log.info("Serving https://%s (TLS %s or newer by %s.TLSGeventWorker, certificate %s%s)",
                        bind_address(self.options.host, self.options.port), self.options.tls_min_version, __name__,
                        self.certificate.cert_path, client_ca)

    def _child_exit(self, server: Any, worker: Any) -> None:
        """In the master: drop the dead worker's live metrics."""
        from .metrics import worker_exited
        worker_exited(worker.pid)


class TLSListenerLine(logging.Filter):
    """gunicorn's "Listening at: http://..." with ``https://``: gunicorn names a listener's scheme after its own TLS
    settings (``certfile``), which stay unset because the worker does the TLS (:class:`TLSGeventWorker`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Listening at:") and isinstance(record.args, tuple) and record.args:
            record.args = (str(record.args[0]).replace("http://", "https://"), *record.args[1:])
        return True


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


def serve(options: ServeOptions) -> None:
    """Check config, certificates and facts source, then run gunicorn until stopped."""
    import policylib

    from .cache import facts_source
    policy_config = policylib.load_config(options.config)
    missing = missing_certificates(options.cert_dir, options.host)
    if missing:
        raise CertError(missing)
    if options.client_ca is not None:
        problem = client_ca_problem(options.client_ca)
        if problem:
            raise CertError(problem)
    certificate = ServingCertificate(options.cert_dir, minimum_version=options.tls_min_version,
                                     client_ca=options.client_ca)
    facts = facts_source(options.facts, options.kubeconfig)
    created = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    metrics_dir = prepare_metrics_dir()
    master = os.getpid()
    try:
        WebhookServer(options, policy_config, certificate, facts).run()
    finally:
        # gunicorn forks the workers inside run(): a worker's exit unwinds to here in the worker too, and the
        # directory is every worker's until the master exits.
        if created and os.getpid() == master:
            shutil.rmtree(metrics_dir, ignore_errors=True)
