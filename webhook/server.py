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
- :class:`TLSThreadWorker`: gunicorn's gthread worker blocks a thread on a new
  TLS connection until its first request; Go clients keep spare connections
  idle right after the handshake, which stalls a worker. This worker hands
  such a connection back to the poller instead. It also leaves a new
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
import logging
import mmap
import os
import select
import shutil
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import _DEFER, ThreadWorker

from .certs import TLS_CERT, TLS_KEY, CertError, certificate_not_after

#: How long a worker thread waits for the ClientHello, then for the first request
#: after the handshake, before handing the connection back to the poller.
CLIENT_HELLO_WAIT = 1.0
FIRST_REQUEST_WAIT = 0.02
KEEPALIVE_SECONDS = 120
#: How long a busier worker leaves a pending connection to its siblings before taking it.
YIELD_WINDOW = 0.02
#: A sibling that has not reported for this long is ignored (hung or gone).
SIBLING_STALE = 3.0
log = logging.getLogger("webhook.server")


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
            raise CertError(f"cannot load {self.cert_path} and {self.key_path}: {self.error}")

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


def _readable(sock, timeout: float) -> bool:
    """Decrypted bytes are buffered, or the socket has bytes within ``timeout``."""
    if getattr(sock, "pending", None) and sock.pending():
        return True
    try:
        return bool(select.select([sock], [], [], timeout)[0])
    except (OSError, ValueError):
        return True  # closed: let the request parser find out and close it


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


class TLSThreadWorker(ThreadWorker):
    """gthread worker that never blocks a thread on an idle TLS connection.

    gunicorn's worker waits for the first bytes, then in one go does the TLS
    handshake and blocks reading the first request. A client that completes
    the handshake and sends nothing (Go's spare connections) holds that thread
    until the client gives up. Here the handshake is done first; if no request
    follows within :data:`FIRST_REQUEST_WAIT`, the connection goes back to the
    worker's poller (gunicorn's own ``_DEFER`` path), which hands it to a
    thread when it becomes readable.
    """

    slot: int | None = None  # set by the master's pre_fork hook
    _yield_since = _yield_last = 0.0

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
        super().finish_request(conn, fs)
        self._publish()

    def murder_keepalived(self, force=False):
        super().murder_keepalived(force)
        self._publish()

    def handle(self, conn):
        if self.cfg.is_ssl and not conn.initialized:
            outcome = self._handshake(conn)
            if outcome is not None:
                return outcome
        return super().handle(conn)

    def _handshake(self, conn):
        """None to go on serving; ``_DEFER`` to park the connection; False to close it."""
        if not conn.wait_for_data(CLIENT_HELLO_WAIT):
            return _DEFER
        try:
            conn.sock.setblocking(True)
            conn.init()
        except (ssl.SSLError, OSError) as e:
            self.log.debug("TLS handshake failed with %s: %s", conn.client, e)
            return False
        if conn.is_http2 or _readable(conn.sock, FIRST_REQUEST_WAIT):
            return None
        return _DEFER


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


def serve(options: ServeOptions) -> None:
    """Check config, certificates and facts source, then run gunicorn until stopped."""
    import policylib
    from .cache import facts_source
    policy_config = policylib.load_config(options.config)
    certificate = ServingCertificate(options.cert_dir)
    facts = facts_source(options.facts, options.kubeconfig)
    created = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    metrics_dir = prepare_metrics_dir()
    try:
        WebhookServer(options, policy_config, certificate, facts).run()
    finally:
        if created:
            shutil.rmtree(metrics_dir, ignore_errors=True)
