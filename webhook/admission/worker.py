"""gunicorn's stock gevent worker, extended through its public methods: the TLS handshake by a deadline with the
current certificate, the connection limit (:mod:`.connections`), each connection served through a
:class:`~.deadline.DeadlineSocket`."""
from __future__ import annotations

import logging
import os
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any

import gevent
import gevent.local
import gevent.socket
import gevent.ssl
from gunicorn.workers.ggevent import GeventWorker

from .connections import FIRST_REQUEST, KEEP_ALIVE, Connection, Connections
from .deadline import CLIENT_DEADLINE, DeadlineSocket
from .tlsqueue import OPENSSL_CLEAR_ERROR, tls_step

if TYPE_CHECKING:
    from .metrics import Metrics

#: A worker at its connection limit logs it at most once per this many seconds (with the count since the last line).
LIMIT_LOG_SECONDS = 10.0
log = logging.getLogger(__name__)

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
            sock.answered = True
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
