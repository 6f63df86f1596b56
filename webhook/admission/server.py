"""gunicorn run from Python: gevent workers over TLS, certificates reloaded from disk.

What it sets and why (facts measured on this kind of machine are in
docs/figures.md, "Reliability"):

- gunicorn's stock **gevent worker** (:class:`~.worker.TLSGeventWorker` subclasses it
  through its public methods only): each connection is a greenlet, so idle,
  slow or stalled clients cost memory, never a thread; at most
  ``--max-connections`` per worker (gunicorn's ``worker_connections``). A
  worker that holds that many closes the connection that has waited longest
  without a request for each new one (:class:`~.connections.Connections`), so connections
  that say nothing cannot lock new clients out; logged and counted in
  ``policylib_webhook_connection_limit_reached_total``.
- TLS 1.2 with AEAD suites only (:data:`~.certificate.TLS12_CIPHERS`), or TLS 1.3 only
  (``--tls-min-version``); ECDSA or RSA certificate from ``--cert-dir``
  (``tls.crt``/``tls.key``). The worker does the handshake itself with the
  context :class:`~.certificate.ServingCertificate` holds, which is rebuilt when either file
  changes (a Secret volume's update, ``webhook certs``), so each new
  connection gets the current certificate without a restart while open ones
  finish on theirs. With ``--client-ca`` the context asks for a client
  certificate and verifies one against that CA (the API server presents one
  when its AdmissionConfiguration says so); the app answers reviews only on
  connections that presented one (:class:`~.worker.ClientCertificates`).
- deadlines (:data:`~.deadline.CLIENT_DEADLINE`, 2 s): a TLS handshake from the moment
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
  OpenSSL error queue empty (:func:`~.tlsqueue.tls_step`): every connection of a worker shares that one queue, and a step that
  failed on one (a client that reset while its handshake or answer was written) must not fail another's
  (rule W16).
- an answer's head and body go out in one TLS write (one record, one wake-up
  of the client) instead of gunicorn's two (docs/performance.md).
- gunicorn does not terminate TLS here, so it is told twice over that the
  connection is TLS: each request's scheme is ``https`` (``wsgi.url_scheme``),
  and ``sendfile`` is off (gunicorn's setting, and :meth:`.deadline.DeadlineSocket.sendfile`
  writes through TLS whatever gunicorn decides): a file answer can never go to
  the client's socket unencrypted or ahead of its head.
- no control socket (it needs a writable ``$HOME`` or ``$XDG_RUNTIME_DIR``);
  SIGTERM stops accepting, answers each kept-alive connection's next request
  with ``Connection: close`` (an idle one is closed after
  :data:`~.deadline.SHUTDOWN_IDLE_SECONDS`), and drains in-flight requests for up to
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

import logging
import os
import shutil
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication

from policylib.constants import WEBHOOK_NAME

from ..certs import CertError
from ..options import SERVE, defaults
from .certificate import ServingCertificate, client_ca_problem, missing_certificates
from .deadline import KEEPALIVE_SECONDS
from .logbuffer import LineBuffer
from .metricsdir import MULTIPROC_ENV, prepare_metrics_dir
from .worker import ClientCertificates, TLSGeventWorker

if TYPE_CHECKING:
    from flask import Flask

    import policylib

#: gunicorn's ``worker_class``: the worker that does the TLS.
WORKER_CLASS = f"{TLSGeventWorker.__module__}.{TLSGeventWorker.__qualname__}"

#: The declared defaults of ``serve``'s settings (webhook/options.py).
DEFAULTS = defaults(SERVE)


@dataclass(frozen=True)
class ServeOptions:
    """``webhook serve``'s settings; each default is its flag's declared default."""

    cert_dir: str
    config: str | None = None
    host: str = DEFAULTS["host"]
    port: int = DEFAULTS["port"]
    workers: int = DEFAULTS["workers"]
    max_connections: int = DEFAULTS["max_connections"]
    first_request_timeout: float = DEFAULTS["first_request_timeout"]
    #: A key of :data:`~webhook.admission.certificate.TLS_VERSIONS`.
    tls_min_version: str = DEFAULTS["tls_min_version"]
    #: PEM file of the CAs whose client certificates the server verifies; reviews then need one.
    client_ca: str | None = None
    graceful_timeout: int = DEFAULTS["graceful_timeout"]
    facts: str = DEFAULTS["facts"]
    kubeconfig: str | None = None
    log_level: str = DEFAULTS["log_level"]
    #: SO_REUSEPORT: several ``webhook serve`` processes on one address, the kernel spreading connections.
    reuse_port: bool = False


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def configure_logging(level: str) -> None:
    """The webhook's own messages on stderr, as JSON lines (webhook/logs.py)."""
    from ..logs import configure
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
            "worker_class": WORKER_CLASS,
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
        server.log.info("Serving https://%s (TLS %s or newer by %s, certificate %s%s)",
                        bind_address(self.options.host, self.options.port), self.options.tls_min_version, WORKER_CLASS,
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


def serve(options: ServeOptions) -> None:
    """Check config, certificates and facts source, then run gunicorn until stopped."""
    import policylib

    from .facts import facts_source
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
    created = not os.environ.get(MULTIPROC_ENV)
    metrics_dir = prepare_metrics_dir()
    master = os.getpid()
    try:
        WebhookServer(options, policy_config, certificate, facts).run()
    finally:
        # gunicorn forks the workers inside run(): a worker's exit unwinds to here in the worker too, and the
        # directory is every worker's until the master exits.
        if created and os.getpid() == master:
            shutil.rmtree(metrics_dir, ignore_errors=True)
