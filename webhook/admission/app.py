"""The Flask shell around :mod:`.review`: HTTP, metrics, one log line per review.

Routes: ``POST /mutate`` (AdmissionReview v1, answered by :mod:`.mutate`), ``GET /healthz`` (the startup probe),
``GET /readyz`` (config and certificates loaded, cluster facts synced),
``GET /metrics`` (Prometheus). Bad input gets a JSON error with 400, 405 or
413, never a 500, and an error's message is cut to :data:`~.mutate.ERROR_CHARS`. Rule W13:
with client certificates required, a review without one is refused (403); and
``/readyz`` details its answer only to a caller with a verified client
certificate or on loopback (``kubectl port-forward``, the pod itself):
anyone else learns ready or not.
"""
from __future__ import annotations

import ipaddress
import logging
import os
from typing import Any, Callable

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, InternalServerError

import policylib

from ..protocols import Callers, FactsSource, ServingTls
from .facts import ObjectOnlyFacts
from .metrics import Metrics
from .mutate import JSON, MUTATE_PATH, ReviewRoute, Reviews, error_message

REVIEW_LOG = "webhook.review"
#: The paths the app serves: the label values of the server-errors metric.
KNOWN_PATHS = (MUTATE_PATH, "/healthz", "/readyz", "/metrics")


class NoClientCertificates:
    """The :class:`~webhook.protocols.Callers` of an app that is not told about client certificates: none required,
    none verified."""

    required = False

    def verified(self, environ: dict[str, Any]) -> bool:
        return False


def on_loopback(environ: dict[str, Any]) -> bool:
    """The request came from this host's (the pod's) own loopback address."""
    try:
        address = ipaddress.ip_address(str(environ.get("REMOTE_ADDR", "")).split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=JSON)


class Probes:
    """``GET /healthz``, ``/readyz`` and ``/metrics``, and the JSON answer to a request Flask refuses."""

    def __init__(self, config: policylib.Config, facts: policylib.ClusterFacts, metrics: Metrics,
                 tls: ServingTls | None, callers: Callers):
        self.config, self.facts, self.metrics, self.tls, self.callers = config, facts, metrics, tls, callers

    def healthz(self) -> Response:
        return _json({"status": "ok"})

    def readyz(self) -> Response:
        """Ready or not (200 or 503); rule W13: the detail (facts, certificate, pid) only to a caller with a
        verified client certificate or on loopback."""
        tls_status = self.tls.status() if self.tls is not None else {"loaded": True, "served": "by the caller"}
        source = self.facts if isinstance(self.facts, FactsSource) else None
        facts_status = source.status() if source is not None else {"facts": "given"}
        ready = bool((source is None or source.ready) and tls_status.get("loaded"))
        if not (self.callers.verified(request.environ) or on_loopback(request.environ)):
            return _json({"ready": ready}, 200 if ready else 503)
        body = {"ready": ready, "config": "loaded", "failureMode": self.config.webhook.failureMode,
                **facts_status, "tls": tls_status, "pid": os.getpid()}
        return _json(body, 200 if ready else 503)

    def metrics_text(self) -> Response:
        if self.tls is not None and self.tls.not_after is not None:
            self.metrics.cert_not_after.set(self.tls.not_after)
        return Response(self.metrics.render(), mimetype="text/plain; version=0.0.4; charset=utf-8")

    def http_error(self, error: HTTPException) -> Response:
        if isinstance(error, InternalServerError):
            # A failure of ours (Flask logs its traceback and hands it here as a 500): counted apart
            # from the requests refused for what the client sent.
            self.metrics.server_errors.labels(request.path if request.path in KNOWN_PATHS else "other").inc()
            return _json({"error": "internal error", "code": 500}, 500)
        self.metrics.bad_requests.labels(str(error.code)).inc()
        response = _json({"error": error_message(error.description or ""), "code": error.code}, error.code or 400)
        if error.code == 405:
            response.headers["Allow"] = ", ".join(getattr(error, "valid_methods", None) or ())
        return response


def create_app(config: policylib.Config | dict[str, Any] | str | None = None, *,
               facts: policylib.ClusterFacts | None = None, tls: ServingTls | None = None,
               review_log: Callable[[str], None] | None = None, callers: Callers | None = None) -> Flask:
    """Build the webhook app (Flask's app-factory pattern: no module-level state). Rule W13: who may ask what.

    ``config`` is anything ``policylib.load_config`` takes. ``facts`` is a
    ``policylib.ClusterFacts``, default object-only; a :class:`~webhook.protocols.FactsSource` (the ones in
    :mod:`.facts`) also tells ``/readyz`` whether it is ``ready`` and its ``status()``. ``tls``
    (a :class:`~webhook.protocols.ServingTls`) is given when the app serves TLS itself.
    ``review_log`` takes each review's JSON line; default: the ``webhook.review``
    logger at INFO (the server passes a buffered writer instead). ``callers`` (a
    :class:`~webhook.protocols.Callers`) says whether reviews need a verified client certificate and whether
    a request has one; default: none needed, none verified.
    """
    config = policylib.load_config(config)
    callers = callers if callers is not None else NoClientCertificates()
    facts = facts if facts is not None else ObjectOnlyFacts("no facts source given")
    metrics = Metrics()
    reviews = Reviews(config, facts, metrics, callers, review_log or logging.getLogger(REVIEW_LOG).info)
    probes = Probes(config, facts, metrics, tls, callers)
    app = Flask("webhook")
    app.extensions["policylib"] = {"config": config, "facts": facts, "metrics": metrics, "tls": tls,
                                   "bodies": reviews.bodies}
    # The rule without a view: ReviewRoute answers every request it matches, and Flask answers other methods
    # 405 with Allow.
    app.add_url_rule(MUTATE_PATH, endpoint="mutate", methods=["POST"])
    app.add_url_rule("/healthz", view_func=probes.healthz, methods=["GET"])
    app.add_url_rule("/readyz", view_func=probes.readyz, methods=["GET"])
    app.add_url_rule("/metrics", endpoint="metrics_text", view_func=probes.metrics_text, methods=["GET"])
    app.register_error_handler(HTTPException, probes.http_error)
    app.wsgi_app = ReviewRoute(reviews, app.wsgi_app)  # type: ignore[method-assign]
    return app
