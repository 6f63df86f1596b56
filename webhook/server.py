"""gunicorn run from Python: gthread workers over TLS, certificates reloaded from disk.

What it sets and why (facts measured on this kind of machine are in the
project's engineering notes):

- TLS 1.2 minimum, ECDSA or RSA certificate from ``--cert-dir``
  (``tls.crt``/``tls.key``). The context is built once per worker and rebuilt
  when either file changes (a Secret volume's update, ``webhook certs``), so
  new connections get the new certificate without a restart while open ones
  finish on the old (:class:`ServingCertificate`).
- keep-alive 120 s, longer than Go's 90 s idle-connection timeout, so the API
  server, not us, closes idle connections and never races our close.
- :class:`TLSThreadWorker`: gunicorn's gthread worker blocks a thread, with no
  time limit, on a new TLS connection's handshake and on reading each request;
  Go clients keep spare connections idle right after the handshake, and a slow
  or stalled client (part of a TLS record, part of a request) holds the thread
  as long as it likes, so a few of them stop a worker. This worker takes a
  connection in a thread only as far as the client's bytes go, parks it on the
  poller in between, and closes it when the handshake or a request is not
  complete within :data:`CLIENT_DEADLINE` (2 s). It also leaves a new
  connection to a sibling worker that holds fewer (:class:`ConnectionBalance`):
  kept-alive connections stay with the worker that accepted them, and without
  this one worker could hold most of them while another idles.
- no control socket (it needs a writable ``$HOME`` or ``$XDG_RUNTIME_DIR``);
  SIGTERM drains in-flight requests for up to ``--graceful-timeout`` seconds.
- Prometheus multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` is set (and
  emptied) before any worker starts; a dead worker's live gauges are dropped.
"""
from __future__ import annotations

import atexit
import io
import logging
import mmap
import os
import select
import selectors
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from gunicorn import http as gunicorn_http
from gunicorn import sock as gunicorn_sock
from gunicorn.app.base import BaseApplication
from gunicorn.http.errors import NoMoreData
from gunicorn.workers.gthread import _DEFER, ThreadWorker

from .certs import TLS_CERT, TLS_KEY, CertError, certificate_not_after

#: A client has this long for its TLS handshake (from the moment it connects) and, separately,
#: for each request (from its first byte): a connection still short of either is closed. Well
#: under the API server's 3 s ``timeoutSeconds``, far over what a working client needs.
CLIENT_DEADLINE = 2.0
#: How long a worker thread waits for a client's next bytes before it parks the connection on
#: the worker's poller, which hands it to a thread again when they arrive.
STEP_WAIT = 0.02
#: How long a thread waits for the first request after the handshake before parking the
#: connection as idle (keep-alive timeout, no deadline).
FIRST_REQUEST_WAIT = 0.02
#: A request is gathered whole before gunicorn parses it when its headers fit in
#: HEADER_GATE_BYTES and its declared body in BODY_GATE_BYTES (a parked connection's
#: buffer is at most about their sum); reads beyond go through :class:`DeadlineReader`.
HEADER_GATE_BYTES = 64 * 1024
BODY_GATE_BYTES = 256 * 1024
READ_SIZE = 64 * 1024
#: A closing connection waits this long, reading at most this much, for the client to close too.
LINGER_SECONDS = 2.0
LINGER_MAX_BYTES = 64 * 1024
KEEPALIVE_SECONDS = 120
#: How long a busier worker leaves a pending connection to its siblings before taking it.
YIELD_WINDOW = 0.02
#: A sibling that has not reported for this long is ignored (hung or gone).
SIBLING_STALE = 3.0
log = logging.getLogger("webhook.server")
#: ``handle``'s answer for a connection parked mid-handshake or mid-request until readable.
_STALLED = object()


class ServingCertificate:
    """``tls.crt`` and ``tls.key`` as an ``ssl.SSLContext``, rebuilt when they change.

    Each new connection stats both files (microseconds). A pair that does not
    load (mid-rotation: one file new, the other old) keeps the previous context
    and is tried again on the next connection.
    """

    def __init__(self, cert_dir: str | Path):
        self.cert_path = Path(cert_dir) / TLS_CERT
        self.key_path = Path(cert_dir) / TLS_KEY
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._signature: tuple | None = None
        self.not_after: float | None = None
        self.error: str | None = None
        if self.context() is None:
            raise CertError(f"cannot load {self.cert_path} and {self.key_path}: "
                            f"{self.error or 'one of them is missing or unreadable'}")

    def _files_signature(self) -> tuple | None:
        try:
            return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in map(os.stat, (self.cert_path, self.key_path)))
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

    def _reload(self, signature: tuple) -> None:
        try:
            context = make_server_context(self.cert_path, self.key_path)
            not_after = certificate_not_after(self.cert_path)
        except (ssl.SSLError, OSError, ValueError) as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("serving certificate not (re)loaded, keeping the previous one: %s", self.error)
            return
        if self._files_signature() != signature:
            return  # changed while loading: load again on the next connection
        self._context, self._signature, self.not_after, self.error = context, signature, not_after, None
        log.info("serving certificate loaded from %s (notAfter %.0f)", self.cert_path, not_after)

    def status(self) -> dict:
        return {"loaded": self._context is not None, "certificate": str(self.cert_path),
                "notAfter": self.not_after, "error": self.error}


def make_server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """Server-side TLS: 1.2 or newer, OpenSSL's default secure ciphers, HTTP/1.1 by ALPN."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(cert_path), keyfile=str(key_path))
    context.set_alpn_protocols(["http/1.1"])
    return context


class ConnectionBalance:
    """Each worker's open connections in memory shared by all workers (an anonymous mmap
    made before the workers fork), so a busier worker leaves new connections to the others.

    Slot ``i`` holds ``[connections, last report on the monotonic clock]``; ``-1``
    connections marks a free slot. Only the master claims and releases slots.
    """

    def __init__(self, slots: int):
        self.slots = slots
        self._memory = mmap.mmap(-1, 16 * slots)
        self._view = memoryview(self._memory).cast("d")
        for slot in range(slots):
            self._view[2 * slot] = -1.0

    def claim(self) -> int | None:
        for slot in range(self.slots):
            if self._view[2 * slot] < 0:
                self.publish(slot, 0)
                return slot
        return None

    def release(self, slot: int | None) -> None:
        if slot is not None:
            self._view[2 * slot] = -1.0

    def publish(self, slot: int | None, connections: int) -> None:
        if slot is not None:
            self._view[2 * slot], self._view[2 * slot + 1] = float(connections), time.monotonic()

    def busier_than_a_sibling(self, slot: int | None, connections: int) -> bool:
        """Whether a live sibling holds fewer connections than ``connections``."""
        if slot is None:
            return False
        now = time.monotonic()
        others = [self._view[2 * i] for i in range(self.slots)
                  if i != slot and self._view[2 * i] >= 0 and now - self._view[2 * i + 1] < SIBLING_STALE]
        return bool(others) and connections > min(others)


class ClientTooSlow(NoMoreData, TimeoutError):
    """A client did not send its request within :data:`CLIENT_DEADLINE` (raised by :class:`DeadlineReader`).

    A :class:`~gunicorn.http.errors.NoMoreData`, so gunicorn drops the
    connection quietly; a ``TimeoutError``, so the app answers 408 when it
    happens while the body is read, and gunicorn's body drain gives up.
    """

    def __str__(self) -> str:
        return f"client did not send its request within {CLIENT_DEADLINE:g} s"


class DeadlineReader:
    """The socket as gunicorn's request parser sees it: every ``recv`` ends by the deadline.

    Only reads that the request gate (:meth:`TLSThreadWorker._gather_request`)
    did not do go through here: headers over :data:`HEADER_GATE_BYTES`, chunked
    bodies and bodies over :data:`BODY_GATE_BYTES`. Then the socket goes back to
    a :data:`CLIENT_DEADLINE` timeout, which bounds each write of the answer.
    """

    def __init__(self, conn):
        self.conn = conn

    def recv(self, size: int) -> bytes:
        sock = self.conn.sock
        deadline = getattr(self.conn, "deadline", None) or time.monotonic() + CLIENT_DEADLINE
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ClientTooSlow()
        sock.settimeout(remaining)
        try:
            return sock.recv(size)
        except TimeoutError:
            raise ClientTooSlow() from None
        finally:
            sock.settimeout(CLIENT_DEADLINE)


def _wait(sock, events: int, timeout: float) -> bool:
    """Whether ``sock`` is ready for ``events`` (selectors' bits) within ``timeout`` seconds.

    poll, not select: a worker's descriptors can go past select's 1024.
    """
    if events & selectors.EVENT_READ and getattr(sock, "pending", None) and sock.pending():
        return True
    poller = select.poll()
    poller.register(sock, (select.POLLIN if events & selectors.EVENT_READ else 0)
                    | (select.POLLOUT if events & selectors.EVENT_WRITE else 0))
    try:
        return bool(poller.poll(max(timeout, 0) * 1000))
    except (OSError, ValueError):
        return True  # closed: the next read or handshake step finds out


def request_complete(data: bytes | bytearray) -> bool:
    """Whether ``data`` holds a whole request, or as much as the gate waits for.

    A whole request is its header block and, with a ``Content-Length`` of at
    most :data:`BODY_GATE_BYTES`, its body. Headers over
    :data:`HEADER_GATE_BYTES`, chunked bodies, bigger bodies and
    ``Expect: 100-continue`` (the client waits for our answer before the body)
    are left to gunicorn's parser, whose reads end by the deadline as well.
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return len(data) > HEADER_GATE_BYTES
    length = 0
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name in (b"transfer-encoding", b"expect"):
            return True
        if name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return True  # gunicorn answers 400
    return length > BODY_GATE_BYTES or len(data) - (end + 4) >= length


class TLSThreadWorker(ThreadWorker):
    """gthread worker whose threads never wait on a slow, stalled or idle TLS client.

    gunicorn's worker does the TLS handshake and reads a request with blocking
    reads and no time limit: a client that sends part of a TLS record, or part
    of a request, holds a thread for as long as it likes, and a few such
    clients stop the worker. Here a thread takes a connection only as far as
    its bytes go, without blocking:

    - the handshake runs on a non-blocking socket; when the client's next
      bytes are not there within :data:`STEP_WAIT`, the connection goes back
      to the worker's poller (``_STALLED``) until they are;
    - the same for the request: a thread gathers its header block and body
      (see :func:`request_complete`) and only a complete request reaches
      gunicorn's parser and the app;
    - both have :data:`CLIENT_DEADLINE`: the handshake from the moment the
      client connects, the request from its first byte. A connection still
      short of either then is closed (:meth:`murder_pending`; counted in
      ``policylib_webhook_slow_clients_total``).

    Between requests the connection is kept alive as gunicorn does
    (:data:`KEEPALIVE_SECONDS`). A connection idle right after its handshake
    (Go's spare connections) waits on the poller the same way, not in a
    thread (gunicorn's ``_DEFER`` path). And a connection being closed waits
    for the client's side of the close on the poller too
    (:meth:`_close_gracefully`), not on the worker's event-loop thread.
    """

    slot: int | None = None  # set by the master's pre_fork hook
    _yield_since = _yield_last = 0.0

    def init_process(self):
        self.stalled: dict = {}  # parked mid-handshake or mid-request: conn -> True
        self.lingering: dict = {}  # closing: FIN sent, waiting for the client's (no longer counted in nr_conns)
        super().init_process()

    @property
    def balance(self) -> ConnectionBalance | None:
        return getattr(self.app, "balance", None)

    def _publish(self) -> None:
        if self.balance is not None:
            self.balance.publish(self.slot, self.nr_conns)

    def notify(self):
        super().notify()
        self._publish()

    def accept(self, listener):
        """Take the connection unless a sibling holds fewer; then leave it to them briefly.

        The waiting sleeps (releasing the GIL) rather than spins, and ends after
        :data:`YIELD_WINDOW`, so a connection is never left unaccepted.
        """
        if self.balance is not None and self.balance.busier_than_a_sibling(self.slot, self.nr_conns):
            now = time.monotonic()
            if now - self._yield_last > YIELD_WINDOW:
                self._yield_since = now  # a new connection is pending
            self._yield_last = now
            if now - self._yield_since < YIELD_WINDOW:
                time.sleep(0.001)
                return
        super().accept(listener)
        self._publish()

    def finish_request(self, conn, fs):
        """On the main thread: park a stalled connection, close one without blocking, or
        keep it alive as gunicorn does."""
        result = False if fs.cancelled() or fs.exception() is not None else fs.result()
        if result is _STALLED and self.alive:
            self._park(conn)
        elif result is _STALLED:
            self.nr_conns -= 1
            conn.close()
        elif not result:
            self.nr_conns -= 1
            self._close_gracefully(conn)
        else:
            super().finish_request(conn, fs)
        self._publish()

    def _close_gracefully(self, conn) -> None:
        """gunicorn's graceful close (RFC 9112 9.6: FIN, then read until the client closes, so
        unread request bytes do not turn into a reset that cuts off our answer), but on the
        poller: gunicorn's waits up to 2 s on this, the worker's only event-loop thread, for
        a client that may never close."""
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_lingering_readable, conn))
        except (OSError, ValueError, KeyError):
            conn.close()
            return
        conn.deadline, conn.drained = time.monotonic() + LINGER_SECONDS, 0
        self.lingering[conn] = True

    def _on_lingering_readable(self, conn, client) -> None:
        try:
            data = conn.sock.recv(LINGER_MAX_BYTES)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            return
        except OSError:
            data = b""
        conn.drained += len(data)
        if not data or conn.drained >= LINGER_MAX_BYTES:
            self._end_linger(conn)

    def _end_linger(self, conn) -> None:
        del self.lingering[conn]
        try:
            self.poller.unregister(conn.sock)
        except (OSError, KeyError, ValueError):
            pass
        conn.close()

    def _park(self, conn) -> None:
        try:
            conn.sock.setblocking(False)
            self.poller.register(conn.sock, conn.wants, partial(self._on_stalled_ready, conn))
        except (OSError, ValueError, KeyError):
            self.nr_conns -= 1
            conn.close()
            return
        self.stalled[conn] = True

    def _on_stalled_ready(self, conn, client) -> None:
        self.poller.unregister(client)
        del self.stalled[conn]
        self.enqueue_req(conn)

    def murder_pending(self):
        """gunicorn's idle connections, then the stalled and closing ones past their deadline."""
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c in self.lingering if c.deadline <= now]:
            self._end_linger(conn)
        for conn in [c for c in self.stalled if c.deadline <= now]:
            del self.stalled[conn]
            try:
                self.poller.unregister(conn.sock)
            except (OSError, KeyError, ValueError):
                pass
            self.nr_conns -= 1
            self._too_slow(conn)
            conn.close()

    def murder_keepalived(self, force=False):
        super().murder_keepalived(force)
        self._publish()

    def _too_slow(self, conn) -> None:
        stage = "request" if conn.initialized else "handshake"
        self.log.debug("closing %s: no complete TLS %s within %g s", conn.client, stage, CLIENT_DEADLINE)
        metrics = getattr(getattr(self, "wsgi", None), "extensions", {}).get("policylib", {}).get("metrics")
        if metrics is not None:
            metrics.slow_clients.labels(stage).inc()

    def handle(self, conn):
        """In a thread: serve the connection once its handshake and request are complete."""
        if not self.cfg.is_ssl:
            return super().handle(conn)
        try:
            outcome = self._gather(conn)
        except Exception as e:  # noqa: BLE001 -- a client's bytes must not escape as a worker error
            self.log.debug("closing %s: %s: %s", conn.client, type(e).__name__, e)
            return False
        if outcome is not None:
            return outcome
        try:
            return super().handle(conn)
        finally:
            conn.deadline = None  # served: the keep-alive timeout applies until the next request

    def handle_request(self, req, conn):
        """The answer's writes time out too (reads go through :class:`DeadlineReader`)."""
        conn.sock.settimeout(CLIENT_DEADLINE)
        return super().handle_request(req, conn)

    def _gather(self, conn):
        """None once a request is complete; ``_STALLED``, ``_DEFER`` or False (close) otherwise."""
        if getattr(conn, "deadline", None) is None:
            conn.deadline = time.monotonic() + CLIENT_DEADLINE
        if not conn.initialized:
            outcome = self._handshake(conn)
            if outcome is not None:
                return outcome
            conn.deadline = None  # the request's deadline starts with its first byte
            if not _wait(conn.sock, selectors.EVENT_READ, FIRST_REQUEST_WAIT):
                return _DEFER  # idle after the handshake: wait on the poller, keep-alive timeout
            conn.deadline = time.monotonic() + CLIENT_DEADLINE
        return self._gather_request(conn)

    def _handshake(self, conn):
        """The TLS handshake on a non-blocking socket, as far as the client's bytes go."""
        sock = conn.sock
        if not isinstance(sock, ssl.SSLSocket):
            sock.setblocking(False)
            sock = conn.sock = gunicorn_sock.ssl_context(self.cfg).wrap_socket(
                sock, server_side=True, suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                do_handshake_on_connect=False)
        while True:
            try:
                sock.do_handshake()
                break
            except ssl.SSLWantReadError:
                events = selectors.EVENT_READ
            except ssl.SSLWantWriteError:
                events = selectors.EVENT_WRITE
            except (ssl.SSLError, OSError) as e:
                self.log.debug("TLS handshake with %s failed: %s", conn.client, e)
                return False
            outcome = self._wait_or_park(conn, events)
            if outcome is not None:
                return outcome
        conn.initialized = True
        conn.parser = gunicorn_http.get_parser(self.cfg, sock, conn.client)
        conn.parser.unreader.sock = DeadlineReader(conn)
        return None

    def _gather_request(self, conn):
        """Read what the client has sent into the parser's buffer until :func:`request_complete`."""
        unreader = conn.parser.unreader
        data = bytearray(unreader.buf.getvalue())
        if request_complete(data):
            return None
        conn.sock.setblocking(False)
        try:
            while True:
                try:
                    chunk = conn.sock.recv(READ_SIZE)
                except ssl.SSLWantReadError:
                    events = selectors.EVENT_READ
                except ssl.SSLWantWriteError:
                    events = selectors.EVENT_WRITE
                except (ssl.SSLError, OSError) as e:
                    self.log.debug("reading from %s failed: %s", conn.client, e)
                    return False
                else:
                    if not chunk:
                        return False  # the client closed the connection
                    data += chunk
                    if request_complete(data):
                        return None
                    continue
                outcome = self._wait_or_park(conn, events)
                if outcome is not None:
                    return outcome
        finally:
            unreader.buf = io.BytesIO(data)
            unreader.buf.seek(0, os.SEEK_END)

    def _wait_or_park(self, conn, events: int):
        """None when the client's next bytes came within :data:`STEP_WAIT`; else park or close."""
        remaining = conn.deadline - time.monotonic()
        if remaining <= 0:
            self._too_slow(conn)
            return False
        if _wait(conn.sock, events, min(STEP_WAIT, remaining)):
            return None
        conn.wants = events
        return _STALLED


@dataclass(frozen=True)
class ServeOptions:
    """``webhook serve``'s settings."""

    cert_dir: str
    config: str | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    workers: int = 2
    threads: int = 4
    graceful_timeout: int = 20
    facts: str = "auto"
    kubeconfig: str | None = None
    log_level: str = "info"


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

    def __init__(self, stream=None, interval: float = 0.2):
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
    """The webhook's own messages on stderr, formatted like gunicorn's."""
    other = logging.getLogger("webhook")
    if not other.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"))
        other.addHandler(handler)
    other.setLevel(level.upper())


class WebhookServer(BaseApplication):
    """A gunicorn application serving :func:`webhook.create_app` with these options."""

    def __init__(self, options: ServeOptions, policy_config, certificate: ServingCertificate, facts):
        self.options = options
        self.policy_config = policy_config
        self.certificate = certificate
        self.facts = facts
        self.balance = ConnectionBalance(options.workers)
        super().__init__()

    def load_config(self) -> None:
        o = self.options
        settings = {
            "bind": [bind_address(o.host, o.port)],
            "workers": o.workers,
            "worker_class": "webhook.server.TLSThreadWorker",
            "threads": o.threads,
            "keepalive": KEEPALIVE_SECONDS,
            "graceful_timeout": o.graceful_timeout,
            "timeout": 30,
            "certfile": str(self.certificate.cert_path),
            "keyfile": str(self.certificate.key_path),
            "ssl_context": lambda conf, default_factory: self.certificate.context(),
            "control_socket_disable": True,
            "http_protocols": "h1",
            "proc_name": "policylib-webhook",
            "accesslog": None,
            "errorlog": "-",
            "loglevel": o.log_level,
            "pre_fork": self._pre_fork,
            "child_exit": self._child_exit,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self):
        """In each worker: logging, the facts watch, and the app; review lines go to stdout."""
        from . import create_app
        configure_logging(self.options.log_level)
        return create_app(self.policy_config, facts=self.facts.start(), tls=self.certificate,
                          review_log=LineBuffer(sys.stdout).write)


    def _pre_fork(self, server, worker) -> None:
        """In the master: give the new worker a slot in the connection balance."""
        worker.slot = self.balance.claim()

    def _child_exit(self, server, worker) -> None:
        """In the master: free the worker's slot and drop its live metrics."""
        from .metrics import worker_exited
        self.balance.release(getattr(worker, "slot", None))
        worker_exited(worker.pid)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def missing_certificates(cert_dir: str | Path, host: str = "0.0.0.0") -> str | None:
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


def serve(options: ServeOptions) -> None:
    """Check config, certificates and facts source, then run gunicorn until stopped."""
    import policylib
    from .cache import facts_source
    policy_config = policylib.load_config(options.config)
    missing = missing_certificates(options.cert_dir, options.host)
    if missing:
        raise CertError(missing)
    certificate = ServingCertificate(options.cert_dir)
    facts = facts_source(options.facts, options.kubeconfig)
    created = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    metrics_dir = prepare_metrics_dir()
    try:
        WebhookServer(options, policy_config, certificate, facts).run()
    finally:
        if created:
            shutil.rmtree(metrics_dir, ignore_errors=True)
