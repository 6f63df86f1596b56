"""The Flask shell around :mod:`webhook.review`: HTTP, metrics, one log line per review.

Routes: ``POST /mutate`` (AdmissionReview v1), ``GET /healthz`` (liveness),
``GET /readyz`` (config and certificates loaded, cluster facts synced),
``GET /metrics`` (Prometheus). Bad input gets a JSON error with 400, 405 or
413, never a 500.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

import policylib
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import review
from .cache import ObjectOnlyFacts
from .metrics import Metrics

REVIEW_LOG = "webhook.review"
JSON = "application/json"


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype=JSON)


def review_log_line(req: review.ReviewRequest, answer: review.Answer, seconds: float) -> str:
    """The structured log line of one review (JSON, one line)."""
    line = {"msg": "review", "uid": req.uid, "kind": req.kind, "group": req.group,
            "namespace": req.namespace, "name": req.name, "operation": req.operation,
            "dryRun": req.dry_run, "outcome": answer.outcome,
            "mutated": bool(answer.patch), "patchOps": len(answer.patch), "allowed": answer.allowed,
            "durationMs": round(seconds * 1000, 3)}
    if answer.error:
        line["error"] = answer.error
    return json.dumps(line, separators=(",", ":"))


def create_app(config: policylib.Config | dict | str | None = None, *, facts: Any = None,
               tls: Any = None) -> Flask:
    """Build the webhook app (Flask's app-factory pattern: no module-level state).

    ``config`` is anything ``policylib.load_config`` takes. ``facts`` gives
    ``hpas_for``, ``ready`` and ``status()`` (see :mod:`webhook.cache`), default
    object-only. ``tls`` gives ``not_after`` and ``status()`` (see
    :class:`webhook.server.ServingCertificate`) when the app serves TLS itself.
    """
    config = policylib.load_config(config)
    facts = facts if facts is not None else ObjectOnlyFacts("no facts source given")
    metrics = Metrics()
    log = logging.getLogger(REVIEW_LOG)
    app = Flask("webhook")
    app.config["MAX_CONTENT_LENGTH"] = config.webhook.maxRequestBytes
    app.extensions["policylib"] = {"config": config, "facts": facts, "metrics": metrics, "tls": tls}

    @app.post("/mutate")
    def mutate() -> Response:
        start = time.perf_counter()
        with metrics.in_flight.track_inprogress():
            req = review.parse_review(request.get_data(cache=False))
            answer = review.decide(req, config, facts)
            body = review.response_review(req, answer)
        seconds = time.perf_counter() - start
        record(req, answer, seconds)
        return _json(body)

    def record(req: review.ReviewRequest, answer: review.Answer, seconds: float) -> None:
        metrics.reviews.labels(req.kind, req.operation, answer.outcome).inc()
        metrics.latency.labels(req.kind, req.operation).observe(seconds)
        metrics.patch_operations.labels(req.kind).observe(len(answer.patch))
        if answer.error:
            metrics.policy_failures.labels(req.kind, config.webhook.failureMode).inc()
            log.warning(review_log_line(req, answer, seconds))
        else:
            log.info(review_log_line(req, answer, seconds))

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        tls_status = tls.status() if tls is not None else {"loaded": True, "served": "by the caller"}
        ready = bool(facts.ready and tls_status.get("loaded"))
        body = {"ready": ready, "config": "loaded", "failureMode": config.webhook.failureMode,
                **facts.status(), "tls": tls_status}
        return _json(body, 200 if ready else 503)

    @app.get("/metrics")
    def metrics_text() -> Response:
        if tls is not None and tls.not_after is not None:
            metrics.cert_not_after.set(tls.not_after)
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4; charset=utf-8")

    @app.errorhandler(review.BadReview)
    def bad_review(error: review.BadReview) -> Response:
        metrics.bad_requests.labels("400").inc()
        return _json({"error": str(error), "code": 400}, 400)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        metrics.bad_requests.labels(str(error.code)).inc()
        response = _json({"error": error.description, "code": error.code}, error.code or 400)
        if error.code == 405:
            response.headers["Allow"] = ", ".join(error.valid_methods or ())
        return response

    return app
