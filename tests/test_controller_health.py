"""The controller's health port cannot be held by slow clients: a request has one deadline, and the connections
served at once are bounded (webhook/controller/health.py)."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from webhook.controller.health import MAX_CONNECTIONS, REQUEST_SECONDS, serve_health

pytestmark = pytest.mark.timeout(120)


class Ready:
    """What the health server reads of a controller: a ready leader."""

    leading = synced = ready = True
    dry_run = False
    not_leading = ""
    registry = CollectorRegistry()

    def sync_progress(self) -> dict:
        return {"firstSync": True}


@pytest.fixture
def health():
    server = serve_health(Ready(), "127.0.0.1", 0)
    yield server.server_address
    server.shutdown()
    server.server_close()


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (after at most an answer) within the socket's timeout."""
    try:
        while sock.recv(1024):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_300_one_byte_connections_hold_at_most_the_bound_of_threads_and_a_probe_is_answered(health):
    """Each connection sends one byte of its request line and nothing more (as a tenant's pod can): the server
    runs at most MAX_CONNECTIONS threads for them, a probe on a new connection is answered, and every one of them is
    closed by the server by its deadline."""
    host, port = health
    baseline = threading.active_count()
    held, peak = [], 0
    try:
        for _ in range(300):
            sock = socket.create_connection((host, port), timeout=10)
            sock.sendall(b"G")
            held.append(sock)
            peak = max(peak, threading.active_count() - baseline)
        assert peak <= MAX_CONNECTIONS + 1   # the bound, and a connection being replaced
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=10) as probe:
            assert (probe.status, probe.read()) == (200, b"ok")
        for sock in held:
            sock.settimeout(REQUEST_SECONDS + 5)
            assert closed_by_server(sock), "a one-byte connection was kept past the deadline"
    finally:
        for sock in held:
            sock.close()


def test_a_client_trickling_its_request_is_closed_at_the_deadline_not_per_read(health):
    """A byte every 0.2 s keeps every read short; the deadline counts from the connection."""
    host, port = health
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Padding: " + b"a" * 200 + b"\r\n\r\n"
    with socket.create_connection((host, port), timeout=REQUEST_SECONDS + 5) as sock:
        start, closed_after = time.monotonic(), None
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - start
                break
            sock.settimeout(0.2)   # the client's pace, under test; not a synchronisation
            try:
                if sock.recv(1024) == b"":
                    closed_after = time.monotonic() - start
                    break
            except TimeoutError:
                pass
            except ConnectionError:
                closed_after = time.monotonic() - start
                break
    assert closed_after is not None, "the server did not close the connection"
    assert REQUEST_SECONDS - 0.1 <= closed_after < REQUEST_SECONDS + 2


def test_a_probe_is_answered_and_its_connection_closed(health):
    host, port = health
    with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=10) as probe:
        assert (probe.status, probe.read()) == (200, b'{"leader": true, "synced": true, "dryRun": false, '
                                                     b'"firstSync": true}')
