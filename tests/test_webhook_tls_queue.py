"""Rule W16: one connection's failed TLS step never fails another's. A gevent worker serves every connection on one
thread, and OpenSSL keeps one error queue per thread; OpenSSL 3.2 and later leave a failed socket write's system error
on it (another connection's client reset while its handshake or answer was written), Python's ``ssl`` raises that
error without emptying the queue, and OpenSSL's next "would block" on any connection of the thread then reads as it.

Here the server's own pieces (:class:`~webhook.admission.deadline.DeadlineSocket`,
:func:`~webhook.admission.tlsqueue.tls_step`) serve a real TLS connection on this thread's gevent hub, the client on a
thread of its own (its own queue). What such a failure leaves is put on this thread's queue through OpenSSL's own
``ERR_raise`` (``ERR_new``, ``ERR_set_error``: a system error, EPIPE), found as the server finds ``ERR_clear_error``:
the libcrypto the ``ssl`` module runs on (OpenSSL 3.0, which this test environment's Python links, does not leave it
there itself; the image's 3.5 does).
"""
from __future__ import annotations

import ctypes
import errno
import importlib.util
import json
import os
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Callable

import gevent
import gevent.socket
import gevent.ssl
import pytest

from tests.helpers import deployment
from tests.test_webhook_server import client_context, make_certs
from tests.webhook_support import SVC_HOST, review_of
from webhook.admission.certificate import make_server_context
from webhook.admission.connections import FIRST_REQUEST, Connections
from webhook.admission.deadline import DeadlineSocket
from webhook.admission.tlsqueue import clear_tls_errors, tls_step

pytestmark = pytest.mark.timeout(120)

#: OpenSSL's ERR_LIB_SYS: an error whose reason is an errno.
ERR_LIB_SYS = 2


def libcrypto() -> ctypes.CDLL:
    spec = importlib.util.find_spec("_ssl")
    origin = spec.origin if spec is not None and spec.origin and os.path.isfile(spec.origin) else None
    return ctypes.CDLL(origin)


def stale_error(code: int = errno.EPIPE) -> None:
    """What a TLS write that failed in its socket leaves on this thread's OpenSSL error queue since OpenSSL 3.2."""
    lib = libcrypto()
    lib.ERR_new()
    lib.ERR_set_debug(b"tests/test_webhook_tls_queue.py", 0, b"stale_error")
    lib.ERR_set_error(ERR_LIB_SYS, code, None)
    lib.ERR_peek_error.restype = ctypes.c_ulong
    assert lib.ERR_peek_error() != 0


def queue_empty() -> bool:
    lib = libcrypto()
    lib.ERR_peek_error.restype = ctypes.c_ulong
    return lib.ERR_peek_error() == 0


class Worker:
    """What :class:`DeadlineSocket` asks of its gunicorn worker."""

    first_request_timeout = 5.0
    alive = True

    def __init__(self) -> None:
        self.slow: list[str] = []

    def client_too_slow(self, stage: str) -> None:
        self.slow.append(stage)


class Client(threading.Thread):
    """A TLS client on a thread of its own: ``script`` gets its TLS socket and the step events."""

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext,
                 script: Callable[[ssl.SSLSocket, threading.Event], None]):
        super().__init__(daemon=True)
        self.address, self.context, self.script = address, context, script
        self.go = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with socket.create_connection(self.address, timeout=30) as raw, \
                    self.context.wrap_socket(raw, server_hostname=SVC_HOST) as tls:
                self.script(tls, self.go)
        except BaseException as e:  # noqa: BLE001 -- reported by the test
            self.error = e


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tls-queue") / "certs"
    make_certs(directory)
    return directory


@pytest.fixture
def serve(certs):
    """``serve(script)``: a client running ``script`` and the server's end of its connection, its TLS handshake done by
    :func:`tls_step` on this thread's hub; both closed afterwards, the queue left empty."""
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    context = make_server_context(certs / "tls.crt", certs / "tls.key", gevent.ssl.SSLContext)
    opened: list = []

    def serve(script: Callable[[ssl.SSLSocket, threading.Event], None]) -> tuple[Client, ssl.SSLSocket]:
        client = Client(listener.getsockname(), client_context(certs), script)
        client.start()
        with gevent.Timeout(30):
            raw, _ = listener.accept()
        tls = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        opened.append((client, tls))
        tls_step(tls, tls.do_handshake, time.monotonic() + 30)
        return client, tls

    yield serve
    for client, tls in opened:
        client.go.set()
        tls.close()
        client.join(30)
    listener.close()
    clear_tls_errors()


def deadline_socket(tls: ssl.SSLSocket) -> DeadlineSocket:
    connection = Connections(100, lambda stage: None).opened(tls)
    connection.waiting(FIRST_REQUEST)
    return DeadlineSocket(tls, Worker(), connection)  # type: ignore[arg-type]  # what it asks of a worker


def test_a_stale_error_on_the_queue_does_not_fail_a_request_body_still_on_its_way(serve):
    """The cause of the API server's fail-opens under load on the image's OpenSSL 3.5: the request's head was read,
    its body had not all arrived, and the read that would have waited for it raised another connection's EPIPE
    (the app answered 400, "the request body could not be read: BrokenPipeError"; Python 3.11 raises it as
    ``SSLError: [SYS] unknown error``). The body is sent only once the server waits for it (a greenlet that runs when
    the server's greenlet blocks), so the read meets the stale error."""
    body = json.dumps(review_of(deployment("queued", replicas=3))).encode()
    head = (f"POST /mutate HTTP/1.1\r\nHost: {SVC_HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()

    def script(tls: ssl.SSLSocket, go: threading.Event) -> None:
        tls.sendall(head)
        assert go.wait(30), "the server never waited for the body"
        tls.sendall(body)
        tls.recv(1)  # until the server closes

    client, tls = serve(script)
    sock = deadline_socket(tls)
    assert sock.recv(65536) == head
    stale_error()
    gevent.spawn(client.go.set)   # runs only once the server's greenlet waits for the socket
    received = b""
    while len(received) < len(body):
        received += sock.recv(65536)
    assert received == body and client.error is None
    assert queue_empty()


def test_a_stale_error_on_the_queue_does_not_fail_an_answer_the_client_takes_slowly(serve):
    """An answer larger than the sockets' buffers: its write waits for the client (OpenSSL's "would block") while
    another connection's error is on the queue."""
    answer = os.urandom(8 * 1024 * 1024)   # far more than the two sockets' buffers hold before the client reads

    def script(tls: ssl.SSLSocket, go: threading.Event) -> None:
        assert go.wait(30), "the server never waited for the client to read"
        got = bytearray()
        while len(got) < len(answer):
            chunk = tls.recv(1024 * 1024)
            assert chunk, f"closed after {len(got)} bytes"
            got += chunk
        assert bytes(got) == answer

    client, tls = serve(script)
    sock = deadline_socket(tls)
    stale_error(errno.ECONNRESET)
    gevent.spawn(client.go.set)
    sock.sendall(answer)
    client.join(30)
    assert client.error is None and not client.is_alive()
    assert queue_empty()


def test_a_stale_error_on_the_queue_does_not_fail_a_handshake_still_on_its_way(certs):
    """A new connection's handshake (the API server dials one whenever its idle ones are busy) waits for the client's
    second flight while another connection's error is on the queue: the handshake completes."""
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    context = make_server_context(certs / "tls.crt", certs / "tls.key", gevent.ssl.SSLContext)

    def script(tls: ssl.SSLSocket, go: threading.Event) -> None:
        go.wait(30)

    client = Client(listener.getsockname(), client_context(certs), script)
    client.start()
    try:
        with gevent.Timeout(30):
            raw, _ = listener.accept()
        tls = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        stale_error()   # after the TLS socket was made (Python empties the queue then), before the handshake
        tls_step(tls, tls.do_handshake, time.monotonic() + 30)
        assert tls.version() is not None and queue_empty()
        client.go.set()
        client.join(30)
        assert client.error is None
        tls.close()
    finally:
        client.go.set()
        listener.close()
        clear_tls_errors()
