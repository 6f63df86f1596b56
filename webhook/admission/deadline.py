"""A served TLS connection as gunicorn's parser and response see it: each read and write by a deadline."""
from __future__ import annotations

import errno
import socket
import ssl
import time
from typing import IO, Any, Protocol

import gevent.socket
from gunicorn.http.errors import NoMoreData

from .connections import FIRST_REQUEST, Connection
from .tlsqueue import tls_step


class ServingWorker(Protocol):
    """What a :class:`DeadlineSocket` asks of the worker serving it (:class:`~.worker.TLSGeventWorker`)."""

    alive: bool
    first_request_timeout: float

    def client_too_slow(self, stage: str) -> None: ...

#: A client has this long for its TLS handshake (from the moment it connects), for each request
#: (from its first byte to its last) and for taking each answer: a connection short of one is
#: closed. Well under the API server's 3 s ``timeoutSeconds``, far over what a working client needs.
CLIENT_DEADLINE = 2.0
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
#: An answer's writes are gathered up to this many bytes, then written (an answer is usually a few KiB).
HOLD_BYTES = 256 * 1024
#: A connection closed with a request's bytes unread after an answer reads and drops what its client still sends
#: for up to this long (rule W17)...
LINGER_SECONDS = CLIENT_DEADLINE
#: ... and at most this many bytes: more than the rest of the largest review the API server sends (an UPDATE of a
#: 3 MiB object over a 3 MiB old one), few enough that a client streaming on costs the worker little.
LINGER_BYTES = 8 * 2**20
#: What a lingering close reads at a time.
LINGER_CHUNK = 64 * 1024


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
    :data:`CLIENT_DEADLINE` later, however the client spreads its bytes.
    :meth:`~.worker.TLSGeventWorker.handle_request` sets ``deadline`` back to None once the answer is
    written. Everything else is the socket's.
    """

    def __init__(self, sock: ssl.SSLSocket, worker: ServingWorker, connection: "Connection"):
        self.sock = sock
        self.worker = worker
        self.connection = connection
        self.deadline: float | None = None
        self.answered = False
        self.idle_closed = False
        self.too_slow = False
        self.holding = False
        self._held: list[bytes] = []
        self._held_bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def recv(self, size: int) -> bytes:
        if self.deadline is None:
            if not self._request_begins():
                self.idle_closed = True
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

    def not_the_clients_time(self, seconds: float) -> None:
        """The request's deadline moves by ``seconds`` the server spent not reading it (a review waiting for room
        among its worker's bodies, rule W11): the client's 2 s are for sending, not for the server's queue."""
        if self.deadline is not None:
            self.deadline += seconds

    def _give_up(self) -> ClientTooSlow:
        if not self.too_slow:
            self.too_slow = True
            self.worker.client_too_slow("request")
        return ClientTooSlow()

    def close(self) -> None:
        """Rule W17: a connection closed after it has answered a request is closed in stages
        (:func:`close_in_stages`): its client may still be sending that request's body, or the next request's;
        one closed while idle (the keep-alive timeout, the worker's shutdown, closed to make room) or that never
        answered at once."""
        if self.answered and not self.idle_closed and not self.connection.evicted:
            close_in_stages(self.sock, LINGER_SECONDS, LINGER_BYTES)
        else:
            self.sock.close()

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


def close_in_stages(sock: socket.socket, seconds: float, most: int) -> None:
    """Rule W17 (RFC 9112 section 9.6): shut the connection's write side (the client reads the answer, then the
    end), read and drop what the client still sends until it closes, ``seconds`` have passed with nothing waiting,
    or ``most`` bytes are dropped; then close.

    A socket closed with bytes unread makes the kernel reset the connection: a client still writing its request
    (one that writes the whole body before it reads, or a Go client whose reading and writing race) then fails
    with a reset instead of reading the answer that was sent. The dropped bytes are read as they arrive, TLS
    records undecrypted (the TLS socket reads its raw socket once its write side is shut); what is already waiting
    when the time is up is still read, so a worker whose loop was busy past the time does not reset a client that
    kept sending."""
    try:
        sock.shutdown(socket.SHUT_WR)
        until = time.monotonic() + seconds
        dropped = 0
        while dropped < most:
            sock.settimeout(max(0.0, until - time.monotonic()))
            chunk = sock.recv(min(LINGER_CHUNK, most - dropped))
            if not chunk:
                break
            dropped += len(chunk)
    except OSError:
        pass  # the time is up (a timeout), nothing waits (a non-blocking read) or the client reset: close now
    finally:
        sock.close()
