"""Connections one client cannot exhaust, and workers whose exit never stops the server: ``python -m webhook serve``
as a real TLS server (the helpers of tests/test_webhook_server.py), and its connection bookkeeping alone.

Rule W12: a new connection's first request must begin within ``--first-request-timeout`` of its handshake; a
worker at ``--max-connections`` closes, for each new connection, the one that has waited longest without a request
(never one in the middle of a request), so connections that say nothing cannot lock new clients out.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import time

import pytest

from bench.bench_connections import hold_idle, new_client_review
from tests.helpers import deployment
from tests.test_webhook_server import Server, closed_by_server, make_certs
from tests.webhook_support import SVC_HOST, review_of
from webhook.admission.connections import FIRST_REQUEST, KEEP_ALIVE, Connections
from webhook.admission.worker import LIMIT_LOG_SECONDS

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("connections") / "certs"
    make_certs(directory)
    return directory


def tls_connection(server: Server) -> ssl.SSLSocket:
    """A connection that finishes its TLS handshake and sends nothing."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.context.wrap_socket(raw, server_hostname=SVC_HOST)


def eof(peer: socket.socket) -> bool:
    """Whether ``peer``'s other end was shut down (end of file now), without waiting."""
    peer.setblocking(False)
    try:
        return peer.recv(1) == b""
    except BlockingIOError:
        return False


# --- the bookkeeping alone ------------------------------------------------------------------------------------------

def test_at_the_limit_a_new_connection_closes_the_one_waiting_longest_without_a_request():
    """Rule W12: those that never sent a request go first (by arrival), then the kept-alive idle ones (by when they
    went idle); one in the middle of a request never; each closed connection's client sees the end of the stream."""
    reached: list[str] = []
    connections = Connections(3, reached.append)
    pairs = [socket.socketpair() for _ in range(6)]
    try:
        a = connections.opened(pairs[0][0])
        a.waiting(FIRST_REQUEST)
        b = connections.opened(pairs[1][0])
        b.waiting(FIRST_REQUEST)
        b.busy()
        b.waiting(KEEP_ALIVE)                       # answered one request, kept alive
        assert reached == []
        c = connections.opened(pairs[2][0])         # the third: the limit; a has waited longest without a request
        assert reached == ["first-request"] and a.evicted and eof(pairs[0][1])
        connections.closed(a)
        c.waiting(FIRST_REQUEST)
        c.busy()                                    # in a request
        d = connections.opened(pairs[3][0])         # no connection without a request but d itself: the idle one
        assert reached[-1] == "keep-alive" and b.evicted and eof(pairs[1][1])
        connections.closed(b)
        e = connections.opened(pairs[4][0])         # d, still in its handshake
        assert reached[-1] == "handshake" and d.evicted and eof(pairs[3][1])
        d.waiting(FIRST_REQUEST)                    # its handshake ends anyway: it stays out of the queue
        connections.closed(d)
        e.busy()
        f = connections.opened(pairs[5][0])         # c and e in requests: nothing to close
        assert reached[-1] == "none"
        assert not (c.evicted or e.evicted or f.evicted)
        assert not (eof(pairs[2][1]) or eof(pairs[4][1]) or eof(pairs[5][1]))
        assert connections.open == 3 and len(reached) == 4
    finally:
        for left, right in pairs:
            left.close()
            right.close()


def test_a_connection_whose_request_is_arriving_is_not_the_one_closed():
    """Bytes waiting unread on the oldest connection: its greenlet is about to begin a request (closing it would lose
    that request, which the API server does not resend); the next oldest is closed instead."""
    reached: list[str] = []
    connections = Connections(3, reached.append)
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        a = connections.opened(pairs[0][0])
        a.waiting(FIRST_REQUEST)
        b = connections.opened(pairs[1][0])
        b.waiting(FIRST_REQUEST)
        pairs[0][1].sendall(b"POST /mutate HTTP/1.1\r\n")
        connections.opened(pairs[2][0])
        assert reached == ["first-request"] and b.evicted and not a.evicted
        assert eof(pairs[1][1]) and not eof(pairs[0][1])
    finally:
        for left, right in pairs:
            left.close()
            right.close()


# --- a real server ---------------------------------------------------------------------------------------------------

def test_no_first_request_within_the_timeout_closes_the_connection_and_a_kept_alive_one_stays(certs, tmp_path):
    """``--first-request-timeout 1``: a connection that says nothing after its handshake is closed after 1 s
    (counted as a slow client, stage first-request); one that has been answered waits for its next request under
    the keep-alive timeout (120 s), and is still served after idling longer than 1 s."""
    server = Server(certs, tmp_path, workers=1, extra=("--first-request-timeout", "1"))
    try:
        counter = 'policylib_webhook_slow_clients_total{stage="first-request"}'
        before = server.metric(counter)
        kept = server.connection(timeout=10)
        assert server.review(review_of(deployment("web", "ml"), uid="kept-1"), kept)["allowed"] is True
        silent = tls_connection(server)
        opened = time.monotonic()
        silent.settimeout(5)
        assert closed_by_server(silent), "a connection without a first request was kept past the timeout"
        closed_after = time.monotonic() - opened
        assert 0.9 <= closed_after < 4, closed_after
        assert server.review(review_of(deployment("web", "ml"), uid="kept-2"), kept)["allowed"] is True
        assert server.metric(counter) == before + 1
        kept.close()
        silent.close()
    finally:
        assert server.stop() == 0


def test_at_the_limit_the_longest_waiting_connections_make_room_and_a_kept_alive_one_stays(certs, tmp_path):
    """One worker, ``--max-connections 20``, no first-request timeout to speak of (60 s): 40 connections that
    handshake and say nothing. The oldest of them are closed to make room, a prefix in the order they were opened;
    the kept-alive connection is not; a new client is served; the limit is counted and logged once (not per
    connection)."""
    server = Server(certs, tmp_path, workers=1, extra=("--max-connections", "20", "--first-request-timeout", "60"))
    held: list[ssl.SSLSocket] = []
    started = time.monotonic()
    try:
        limit = "policylib_webhook_connection_limit_reached_total"
        before = server.metric(limit)
        kept = server.connection(timeout=10)
        assert server.review(review_of(deployment("web", "ml"), uid="limit-kept-1"), kept)["allowed"] is True
        held = [tls_connection(server) for _ in range(40)]
        status, answer, seconds = new_client_review(("127.0.0.1", server.port), server.context, "limit-new")
        assert (status, answer["response"]["uid"]) == (200, "limit-new")
        closed_at_limit = server.metric(f'{limit}{{closed="first-request"}}') + server.metric(
            f'{limit}{{closed="handshake"}}')
        assert closed_at_limit >= 21   # 40 silent ones, the kept one, the new client and the metric requests in 20

        def closed() -> list[bool]:
            return [_tls_closed(sock) for sock in held]
        deadline = time.monotonic() + 30
        while sum(closed()) < 21:
            assert time.monotonic() < deadline, f"only {sum(closed())} connections closed"
            time.sleep(0.05)
        state = closed()
        first_open = state.index(False)
        assert all(state[:first_open]) and not any(state[first_open:]), state   # the oldest ones, in order
        assert server.review(review_of(deployment("web", "ml"), uid="limit-kept-2"), kept)["allowed"] is True
        assert server.metric(limit) > before
        lines = [json.loads(line) for line in server.logs().splitlines() if "connection limit reached" in line]
        at_most = 1 + int((time.monotonic() - started) // LIMIT_LOG_SECONDS)   # one line per 10 s, not per connection
        assert 1 <= len(lines) <= at_most, lines
        assert {(line["level"], line["limit"]) for line in lines} == {("warning", 20)}
        kept.close()
    finally:
        for sock in held:
            sock.close()
        assert server.stop() == 0


def _tls_closed(sock: ssl.SSLSocket) -> bool:
    """Whether the server closed a TLS connection that has not sent anything (end of stream or reset), now."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except (ConnectionError, ssl.SSLError):
        return True


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["tls", "tcp"])
def test_4000_idle_connections_do_not_keep_a_new_client_out(certs, tmp_path, kind, record_property):
    """The chart's settings (2 workers, ``--max-connections`` 1000, ``--first-request-timeout`` 5 s) and 4,000
    connections held: TLS handshakes then nothing (``tls``), or TCP connections that never send a ClientHello
    (``tcp``). A new client (connect, TLS, one review) is served. Its latency is recorded (the 1 s target is the
    benchmark's: bench/bench_connections.py, docs/figures.md), never asserted here."""
    server = Server(certs, tmp_path, workers=2)
    held = None
    try:
        context = server.context if kind == "tls" else None
        held = hold_idle([("127.0.0.1", server.port)], 4000, context, server_name=SVC_HOST, timeout=120)
        status, answer, seconds = new_client_review(("127.0.0.1", server.port), server.context, f"after-{kind}",
                                                    server_name=SVC_HOST, timeout=60)
        record_property("new_client_seconds", round(seconds, 3))
        record_property("held", len(held.writers))
        record_property("opening_seconds", round(held.seconds, 1))
        assert (status, answer["response"]["uid"], answer["response"]["allowed"]) == (200, f"after-{kind}", True)
        assert len(held.writers) + held.failed == 4000
    finally:
        try:
            if held is not None:
                held.close()
        finally:
            assert server.stop() == 0
    assert "Traceback" not in server.logs() and "[ERROR]" not in server.logs(), server.logs()[-3000:]


# --- a worker's exit never stops the server -------------------------------------------------------------------------

@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_workers_exit_never_stops_the_server_without_a_metrics_directory_given(tmp_path, signal_name):
    """``run-local`` (the image's default command: no ``PROMETHEUS_MULTIPROC_DIR``) with two workers: one killed
    (SIGKILL: the kernel's OOM kill; SIGTERM: an exit that unwinds through ``serve``), the master starts another and
    the server keeps answering, metrics included, and still does after the new worker's first reviews."""
    server = Server(tmp_path / "certs", tmp_path, workers=2, command="run-local")
    try:
        workers = server.workers()
        assert len(workers) == 2
        victim = workers[0]
        os.kill(victim, getattr(signal, signal_name))
        deadline = time.monotonic() + 60
        while True:
            now = server.workers()
            if victim not in now and len(now) == 2:
                break
            assert server.proc.poll() is None, f"the master exited {server.proc.returncode}:\n{server.logs()}"
            assert time.monotonic() < deadline, f"no new worker: {now}\n{server.logs()}"
            time.sleep(0.05)
        for i in range(8):   # new connections: each worker, the new one among them, answers some
            assert server.review(review_of(deployment("web", "ml"), uid=f"after-exit-{i}"))["allowed"] is True
        assert server.metric('policylib_webhook_reviews_total{kind="Deployment"') >= 8
        assert server.proc.poll() is None
        assert "Worker failed to boot" not in server.logs()
    finally:
        assert server.stop() == 0
