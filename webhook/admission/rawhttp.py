"""A minimal HTTP/1.1 client on kept-alive sockets: a ``GET`` written whole in one write, its answer parsed by
httptools (llhttp, the parser Node.js uses). Rule W4's read (:mod:`.hparead`) uses it: ``bench/bench_hpa_read.py``
measures it against urllib3 (the Kubernetes client's transport) and ``http.client`` for that read."""
from __future__ import annotations

import http.client
import socket
import threading
from typing import Callable, NoReturn

import httptools

#: Kept-alive connections held for the read at most (one per concurrent read up to this; extras are closed).
MAX_IDLE = 16
#: Bytes asked of the socket per read of an answer.
RECV_BYTES = 65536
#: Characters a header value must not hold: it would end the header (request splitting).
UNSAFE_HEADER_CHARS = ("\r", "\n", "\0")


class _Answer:
    """httptools' callbacks for one answer: its status, body, whether the server keeps the connection (read
    when the headers are in: llhttp resets it once the message is complete) and whether it is complete. An
    interim answer (1xx) is skipped; a body with neither a length nor chunks ends when the server closes."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.status = 0
        self.started = self.headers_done = self.delimited = self.keep_alive = self.complete = False

    def on_message_begin(self) -> None:
        self.started, self.headers_done, self.delimited, self.body = True, False, False, []

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.status, self.keep_alive = self.parser.get_status_code(), self.parser.should_keep_alive()

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_message_complete(self) -> None:
        self.complete = not 100 <= self.status < 200

    def closed(self) -> bool:
        """The server closed the connection: whether that ends this answer (a body delimited by the close)."""
        if self.headers_done and not self.delimited and not self.complete and self.status >= 200:
            self.complete, self.keep_alive = True, False
        return self.complete


class KeptConnection:
    """One kept-alive HTTP/1.1 connection to the API server: a request written whole in one write, its answer
    parsed by httptools (llhttp, the parser Node.js uses; chunked and length-delimited bodies alike)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, request: bytes) -> None:
        self.sock.sendall(request)

    def answer(self) -> tuple[int, bytes, bool]:
        """The status, body and whether the server keeps the connection open; ``RemoteDisconnected`` when
        the server closed it before answering (a kept-alive connection it had closed meanwhile),
        ``IncompleteRead`` when it closed it mid-answer, ``httptools.HttpParserError`` for a malformed one."""
        answer = _Answer()
        while not answer.complete:
            data = self.sock.recv(RECV_BYTES)
            if not data:
                if not answer.started:
                    raise http.client.RemoteDisconnected("the API server closed the connection without an answer")
                if answer.closed():
                    break
                raise http.client.IncompleteRead(b"".join(answer.body))
            answer.parser.feed_data(data)
        return answer.status, b"".join(answer.body), answer.keep_alive

    def close(self) -> None:
        self.sock.close()


def request_bytes(host: str, path: str, headers: dict[str, str]) -> bytes:
    """A ``GET`` of ``path`` as HTTP/1.1 bytes; a header value that could end its line is refused."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}"]
    for key, value in headers.items():
        if any(c in key or c in value for c in UNSAFE_HEADER_CHARS):
            raise ValueError(f"header {key!r} holds a line break or NUL: refused")
        lines.append(f"{key}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def failed_read(error: Exception) -> Callable[[], NoReturn]:
    """What waits for a read that could not be sent: it raises the error when the answer is asked for."""
    def answer() -> NoReturn:
        raise error
    return answer


class KeptConnections:
    """Kept-alive connections to one server, made by ``connect``: one per concurrent request, reused, at most
    :data:`MAX_IDLE` kept while idle (``idle``)."""

    def __init__(self, connect: Callable[[], KeptConnection], max_idle: int = MAX_IDLE):
        self.connect = connect
        self.max_idle = max_idle
        self.idle: list[KeptConnection] = []
        self._lock = threading.Lock()

    def send(self, request: bytes) -> Callable[[], tuple[int, bytes]]:
        """Put ``request`` on the wire now; returns what waits for its answer's status and body. No thread or
        greenlet: the answer simply waits on the connection (a connection whose answer is never collected is never
        reused)."""
        with self._lock:
            idle = self.idle.pop() if self.idle else None
        try:
            conn, reused = self._send(idle, request)
        except OSError as e:
            return failed_read(e)
        return lambda: self._answer(conn, reused, request)

    def _send(self, conn: KeptConnection | None, request: bytes) -> tuple[KeptConnection, bool]:
        """The request on an idle kept-alive connection, or a new one; a reused connection the server closed
        meanwhile is tried once more on a new one (a GET changes nothing). Returns the connection and whether
        it was reused."""
        for attempt in (0, 1):
            reused = conn is not None
            if conn is None:
                conn = self.connect()
            try:
                conn.send(request)
                return conn, reused
            except (ConnectionResetError, BrokenPipeError):
                conn.close()
                conn = None
                if reused and attempt == 0:
                    continue
                raise
            except OSError:
                conn.close()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(self, conn: KeptConnection, reused: bool, request: bytes) -> tuple[int, bytes]:
        """The status and body of the answer to the request :meth:`_send` put on ``conn``; the connection goes
        back to the idle ones unless the server closes it. A reused connection the server had closed before the
        request reached it is asked again on a new one, once: never after a timeout (the review's own deadline,
        the webhook's timeoutSeconds, has no room for it)."""
        try:
            status, raw, keep_alive = conn.answer()
        except (ConnectionResetError, BrokenPipeError):   # RemoteDisconnected is a ConnectionResetError
            conn.close()
            if not reused:
                raise
            conn, _ = self._send(None, request)
            return self._answer(conn, False, request)
        except (OSError, http.client.HTTPException, httptools.HttpParserError):
            conn.close()
            raise
        if keep_alive:
            self._keep(conn)
        else:
            conn.close()
        return status, raw

    def _keep(self, conn: KeptConnection) -> None:
        """Back to the idle ones, or closed when :data:`MAX_IDLE` are idle already."""
        with self._lock:
            keep = len(self.idle) < self.max_idle
            if keep:
                self.idle.append(conn)
        if not keep:
            conn.close()
