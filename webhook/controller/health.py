"""The controller's health server: ``/healthz`` (alive), ``/readyz`` (rule W8) and ``/metrics``.

A thread per connection (``http.server``), bounded so that no client can hold the port: a request must arrive
whole within :data:`REQUEST_SECONDS` of its connection (however its bytes are spread), each write of the answer
has as long, and at most :data:`MAX_CONNECTIONS` connections are served at once; past that, a new connection
closes the oldest one still sending its request (the kubelet's probes and Prometheus send theirs at once).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest

#: Seconds a client has, from its connection, to send its whole request; and for each write of the answer.
REQUEST_SECONDS = 5.0
#: Connections served at once (a thread each).
MAX_CONNECTIONS = 32
#: The server at its connection limit logs it at most once per this many seconds.
LIMIT_LOG_SECONDS = 10.0
log = logging.getLogger(__name__)


class Health(Protocol):
    """What the health server reads of a controller."""

    @property
    def leading(self) -> bool: ...

    @property
    def synced(self) -> bool: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    @property
    def not_leading(self) -> str: ...

    @property
    def registry(self) -> CollectorRegistry: ...

    def sync_progress(self) -> dict[str, Any]: ...


class DeadlineReader(io.RawIOBase):
    """A connection's reads, all ending by one deadline: a client sending a byte now and then gets no more time."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no whole request within {REQUEST_SECONDS:g} s")
        self.sock.settimeout(remaining)
        return self.sock.recv_into(buffer)


class HealthServer(ThreadingHTTPServer):
    """``http.server`` with at most :data:`MAX_CONNECTIONS` connections, making room by closing the oldest one
    still sending its request."""

    daemon_threads = True
    block_on_close = False
    #: The listen backlog (socketserver's 5 would drop a burst's connection attempts, each retried a second later).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._reading: OrderedDict[socket.socket, None] = OrderedDict()
        self._limit_times, self._limit_logged = 0, -LIMIT_LOG_SECONDS

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._make_room()
            if not self._slots.acquire(timeout=REQUEST_SECONDS):
                self.shutdown_request(request)
                return
        with self._lock:
            self._reading[request] = None
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.request_done(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.request_done(request)

    def request_read(self, request: socket.socket) -> None:
        """The request is in: the connection is no longer one to close to make room."""
        with self._lock:
            self._reading.pop(request, None)

    def request_done(self, request: socket.socket) -> None:
        self.request_read(request)
        self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone or closed to make room mid-answer: debug, not socketserver's traceback on stderr."""
        log.debug("health request not answered", exc_info=True, extra={"peer": str(client_address)})

    def _make_room(self) -> None:
        """Shut down the oldest connection still sending its request: its thread reads the end and finishes."""
        with self._lock:
            oldest = self._reading.popitem(last=False)[0] if self._reading else None
        self._limit_times += 1
        now = time.monotonic()
        if now - self._limit_logged >= LIMIT_LOG_SECONDS:
            log.warning("health server at its connection limit: a new connection closes the oldest one still "
                        "sending its request", extra={"limit": MAX_CONNECTIONS, "times": self._limit_times})
            self._limit_times, self._limit_logged = 0, now
        if oldest is not None:
            with contextlib.suppress(OSError):
                oldest.shutdown(socket.SHUT_RDWR)


def serve_health(controller: Health, host: str, port: int) -> HealthServer:
    """``/healthz`` (alive), ``/readyz``, ``/metrics``. Rule W8: ``/readyz`` answers 503 until the
    leader's first sync is done (a standby's: until it has listed), with how far it is: objects listed
    per resource, keys planned of those queued."""
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_SECONDS   # each write of the answer (the reads: DeadlineReader)
        server: HealthServer

        def setup(self) -> None:
            super().setup()
            self.rfile = io.BufferedReader(DeadlineReader(self.connection, time.monotonic() + REQUEST_SECONDS))

        def do_GET(self) -> None:
            self.server.request_read(self.connection)
            self.connection.settimeout(REQUEST_SECONDS)
            if self.path == "/healthz":
                code, body, ctype = 200, b"ok", "text/plain"
            elif self.path == "/readyz":
                code = 200 if controller.ready else 503
                state: dict[str, object] = {"leader": controller.leading, "synced": controller.synced,
                                            "dryRun": controller.dry_run, **controller.sync_progress()}
                if not controller.leading and controller.not_leading:
                    state["reason"] = controller.not_leading
                body = json.dumps(state).encode()
                ctype = "application/json"
            elif self.path == "/metrics":
                code, body, ctype = 200, generate_latest(controller.registry), "text/plain; version=0.0.4"
            else:
                code, body, ctype = 404, b"not found", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HealthServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server
