"""The Flask shell around :mod:`webhook.review`: HTTP, metrics, one log line per review.

Routes: ``POST /mutate`` (AdmissionReview v1), ``GET /healthz`` (liveness),
``GET /readyz`` (config and certificates loaded, cluster facts synced),
``GET /metrics`` (Prometheus). Bad input gets a JSON error with 400, 405 or
413, never a 500, and an error's message is cut to :data:`ERROR_CHARS`. Rule W13:
with client certificates required, a review without one is refused (403); and
``/readyz`` details its answer only to a caller with a verified client
certificate or on loopback (``kubectl port-forward``, the pod itself):
anyone else learns ready or not.
"""
from __future__ import annotations

import gc
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any, Callable, Iterable

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    InternalServerError,
    RequestEntityTooLarge,
    RequestTimeout,
    ServiceUnavailable,
)
from werkzeug.wsgi import get_content_length

import policylib
from policylib.errors import MAX_NAME_CHARS, cut

from . import review
from .cache import ConfirmedHpas, ObjectOnlyFacts, decide_overlapped, for_review
from .metrics import Metrics, kind_label
from .protocols import Callers, FactsSource, ServingTls

log = logging.getLogger(__name__)
REVIEW_LOG = "webhook.review"
JSON = "application/json"
#: The paths the app serves: the label values of the server-errors metric.
KNOWN_PATHS = ("/mutate", "/healthz", "/readyz", "/metrics")
#: WSGI status lines by code.
STATUS_LINES = {s.value: f"{s.value} {s.phrase}" for s in HTTPStatus}
#: An error body's message is cut to this many characters: a message may quote what the client sent.
ERROR_CHARS = 200
CLIENT_CERTIFICATE_REQUIRED = orjson.dumps({"error": "a client certificate verified by the webhook's client CA is "
                                            "required", "code": 403})


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


def error_message(text: str) -> str:
    """Rule W13: at most :data:`ERROR_CHARS` characters of an error's message go back to the client."""
    return review.truncate(text[: 4 * ERROR_CHARS], ERROR_CHARS)


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=JSON)


#: Room kept beside the largest review in a worker's budget (rule W11): ordinary reviews (a few KiB) never wait
#: behind one that takes ``maxRequestBytes``.
ORDINARY_ROOM = 64 * 1024
#: How long a review waits for room among the bodies its worker holds (rule W11) before it is answered 503: well
#: within the client's deadline for sending its body (2 s) and the API server's timeoutSeconds (3 s).
ROOM_WAIT_SECONDS = 1.0


class BodyBudget:
    """Rule W11: the bytes of review bodies one worker holds at once, at most ``budget``.

    A review's body becomes tens of times its size once parsed (a 6 MiB review of small maps: 250 MiB), and a
    worker reads and answers many connections at once (a gevent worker switches on every read and on the HPA read
    of rule W4), so its memory is bounded only if what it holds is. A review takes its declared length (the limit
    when it declares none) before its body is read, and gives it back once answered; one that would pass the
    budget waits up to :data:`ROOM_WAIT_SECONDS` for earlier ones to finish, then is answered 503. A review alone
    always fits, and the app's budget is the largest body read and :data:`ORDINARY_ROOM` more, so ordinary reviews
    pass beside the largest one. Under gevent's monkey patching the condition is cooperative: a waiting review holds
    no thread.
    """

    def __init__(self, budget: int):
        self.budget = budget
        self.held = 0
        self._room = threading.Condition()

    @contextmanager
    def hold(self, size: int, wait: float | None = None) -> Iterator[None]:
        """Room for ``size`` bytes while the block runs, waiting at most ``wait`` seconds (default
        :data:`ROOM_WAIT_SECONDS`) for it; else :class:`~werkzeug.exceptions.ServiceUnavailable`."""
        with self._room:
            fits = self._room.wait_for(lambda: self.held == 0 or self.held + size <= self.budget,
                                       ROOM_WAIT_SECONDS if wait is None else wait)
            if not fits:
                raise ServiceUnavailable(f"the worker holds {self.held} bytes of reviews (at most {self.budget}): "
                                         "try again")
            self.held += size
        try:
            yield
        finally:
            with self._room:
                self.held -= size
                self._room.notify_all()


def read_body(environ: dict[str, Any], limit: int) -> bytes:
    """The request body, at most ``limit`` bytes, else 413 (before reading it when the length is declared).

    Reads ``wsgi.input`` directly: werkzeug's stream wrapper cost more than the read.
    A client too slow to send it (the server's deadline, a ``TimeoutError``)
    gets 408; a body that cannot be read (a broken chunked encoding, the client
    gone) gets 400. Either way the server closes the connection afterwards.
    """
    length = get_content_length(environ)
    if length is not None and length > limit:
        raise RequestEntityTooLarge()
    try:
        data = environ["wsgi.input"].read(limit + 1 if length is None else length)
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    except Exception as e:  # noqa: BLE001 -- whatever the input stream raises, the client caused it
        raise BadRequest(f"the request body could not be read: {type(e).__name__}") from None
    if len(data) > limit:
        raise RequestEntityTooLarge()
    return bytes(data)


def _short(text: str | None) -> str | None:
    """A string of the request's as a log line carries it: at most the API's longest name (rule P8)."""
    return text if text is None else cut(text, MAX_NAME_CHARS)


def review_log_line(req: review.ReviewRequest, answer: review.Answer, seconds: float) -> str:
    """The structured log line of one review (JSON, one line)."""
    line = {"msg": "review", "uid": _short(req.uid), "kind": _short(req.kind), "group": _short(req.group),
            "namespace": _short(req.namespace), "name": _short(req.name), "operation": req.operation,
            "dryRun": req.dry_run, "outcome": answer.outcome,
            "mutated": bool(answer.patch), "patchOps": len(answer.patch), "allowed": answer.allowed,
            "durationMs": round(seconds * 1000, 3)}
    if answer.error:
        line["error"] = answer.error
    return orjson.dumps(line).decode()


def create_app(config: policylib.Config | dict[str, Any] | str | None = None, *,
               facts: policylib.ClusterFacts | None = None, tls: ServingTls | None = None,
               review_log: Callable[[str], None] | None = None, callers: Callers | None = None) -> Flask:
    """Build the webhook app (Flask's app-factory pattern: no module-level state). Rule W13: who may ask what.

    ``config`` is anything ``policylib.load_config`` takes. ``facts`` is a
    ``policylib.ClusterFacts``, default object-only; a :class:`~webhook.protocols.FactsSource` (the ones in
    :mod:`webhook.cache`) also tells ``/readyz`` whether it is ``ready`` and its ``status()``. ``tls``
    (a :class:`~webhook.protocols.ServingTls`) is given when the app serves TLS itself.
    ``review_log`` takes each review's JSON line; default: the ``webhook.review``
    logger at INFO (the server passes a buffered writer instead). ``callers`` (a
    :class:`~webhook.protocols.Callers`) says whether reviews need a verified client certificate and whether
    a request has one; default: none needed, none verified.
    """
    config = policylib.load_config(config)
    callers = callers if callers is not None else NoClientCertificates()
    facts = facts if facts is not None else ObjectOnlyFacts("no facts source given")
    review_log = review_log or logging.getLogger(REVIEW_LOG).info
    errors = log
    metrics = Metrics()
    app = Flask("webhook")
    limit = config.webhook.maxRequestBytes
    bodies = BodyBudget(limit + ORDINARY_ROOM)
    app.extensions["policylib"] = {"config": config, "facts": facts, "metrics": metrics, "tls": tls,
                                   "bodies": bodies}

    def answer(environ: dict[str, Any]) -> tuple[int, bytes]:
        """``POST /mutate``: the status and JSON body of the answer to one AdmissionReview; rule W13: only for a
        caller with a verified client certificate when one is required (nothing is read or looked up for another).
        The body is read, parsed and answered within its room in the worker's :class:`BodyBudget` (a declared length
        past the limit is refused before that), with the cyclic garbage collector paused: a parsed review holds no
        cycle, and the collector's passes over its hundreds of thousands of new maps and lists found nothing while
        costing up to half of a large review's CPU (bench/bench_review_size.py); it runs again once the review is
        answered (refcounting frees the review itself)."""
        if callers.required and not callers.verified(environ):
            metrics.bad_requests.labels("403").inc()
            return 403, CLIENT_CERTIFICATE_REQUIRED
        gc.disable()
        try:
            return _answer(environ)
        finally:
            gc.enable()

    def _answer(environ: dict[str, Any]) -> tuple[int, bytes]:
        try:
            start = time.perf_counter()
            declared = get_content_length(environ)
            if declared is not None and declared > limit:
                raise RequestEntityTooLarge()
            with metrics.in_flight.track_inprogress(), bodies.hold(limit if declared is None else declared):
                req = review.parse_review(read_body(environ, limit))
                answer, payload = decide(req)
            record(req, answer, time.perf_counter() - start)
            # Freed here, with the collector still paused: alive when it resumes, the review (hundreds of thousands
            # of objects, all new) would be walked whole by its first pass.
            del req, answer
            return 200, payload
        except review.BadReview as e:
            metrics.bad_requests.labels("400").inc()
            return 400, orjson.dumps({"error": error_message(str(e)), "code": 400})
        except HTTPException as e:
            code = e.code or 400
            metrics.bad_requests.labels(str(code)).inc()
            return code, orjson.dumps({"error": error_message(e.description or ""), "code": code})
        except Exception:  # noqa: BLE001 -- a failure of ours: logged with its traceback, counted, a JSON 500
            errors.exception("exception on POST /mutate")
            metrics.server_errors.labels("/mutate").inc()
            return 500, orjson.dumps({"error": "internal error", "code": 500})

    def count_hpa_read(result: str) -> None:
        metrics.hpa_reads.labels(result).inc()

    def decide(req: review.ReviewRequest) -> tuple[review.Answer, bytes]:
        """Rule W4 unless ``webhook.readHpasOnCreate`` is false, its read overlapped with the policy (and with
        encoding its answer: the answer is ready when the read finds no HPA, the common case)."""
        if not config.webhook.readHpasOnCreate:
            return encoded(req, review.decide(req, config, facts))
        reviewed = for_review(facts, req.operation, count_hpa_read)
        if isinstance(reviewed, ConfirmedHpas):
            return decide_overlapped(lambda f: encoded(req, review.decide(req, config, f)), reviewed, req.namespace,
                                     req.obj)
        return encoded(req, review.decide(req, config, reviewed))

    def encoded(req: review.ReviewRequest, answer: review.Answer) -> tuple[review.Answer, bytes]:
        """The answer and its AdmissionReview JSON. An answer JSON cannot carry (a number past 64 bits, nesting
        past orjson's limit in a value the policy kept) is answered as a policy failure, never a 500."""
        try:
            return answer, orjson.dumps(review.response_review(req, answer))
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            answer = review.failure_answer(review.AnswerNotEncodable(f"{type(e).__name__}: {e}"),
                                           config.webhook.failureMode)
            return answer, orjson.dumps(review.response_review(req, answer))

    def record(req: review.ReviewRequest, answer: review.Answer, seconds: float) -> None:
        kind = kind_label(req.group, req.kind)  # a bounded label: never the request's free text
        metrics.review(kind, req.operation, answer.outcome, seconds, len(answer.patch))
        if answer.error:
            metrics.policy_failures.labels(kind, config.webhook.failureMode).inc()
            if not isinstance(answer.exception, policylib.PolicylibError):
                errors.error("policy raised an unexpected exception", exc_info=answer.exception,
                             extra={"exception": type(answer.exception).__name__, "kind": req.kind,
                                    "namespace": req.namespace, "object_name": req.name})
        review_log(review_log_line(req, answer, seconds))

    @app.post("/mutate")
    def mutate() -> Response:
        """The route Flask knows (``url_map``, 405 with ``Allow`` for other methods); POSTs are answered by
        :func:`reviews` before Flask's request handling."""
        status, body = answer(request.environ)
        return Response(body, status=status, mimetype=JSON)

    flask_wsgi = app.wsgi_app

    def reviews(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Flask's WSGI middleware pattern (``app.wsgi_app``): ``POST /mutate`` answered straight from the
        WSGI environ, skipping Flask's request and response objects (a third of a review's time in the
        app); every other request, Flask's."""
        if environ.get("PATH_INFO") != "/mutate" or environ.get("REQUEST_METHOD") != "POST":
            return flask_wsgi(environ, start_response)
        status, body = answer(environ)
        start_response(STATUS_LINES[status], [("Content-Type", JSON), ("Content-Length", str(len(body)))])
        return [body]

    app.wsgi_app = reviews  # type: ignore[method-assign]

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """Ready or not (200 or 503); rule W13: the detail (facts, certificate, pid) only to a caller with a
        verified client certificate or on loopback."""
        tls_status = tls.status() if tls is not None else {"loaded": True, "served": "by the caller"}
        source = facts if isinstance(facts, FactsSource) else None
        facts_status = source.status() if source is not None else {"facts": "given"}
        ready = bool((source is None or source.ready) and tls_status.get("loaded"))
        if not (callers.verified(request.environ) or on_loopback(request.environ)):
            return _json({"ready": ready}, 200 if ready else 503)
        body = {"ready": ready, "config": "loaded", "failureMode": config.webhook.failureMode,
                **facts_status, "tls": tls_status, "pid": os.getpid()}
        return _json(body, 200 if ready else 503)

    @app.get("/metrics")
    def metrics_text() -> Response:
        if tls is not None and tls.not_after is not None:
            metrics.cert_not_after.set(tls.not_after)
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4; charset=utf-8")

    @app.errorhandler(review.BadReview)
    def bad_review(error: review.BadReview) -> Response:
        metrics.bad_requests.labels("400").inc()
        return _json({"error": error_message(str(error)), "code": 400}, 400)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        if isinstance(error, InternalServerError):
            # A failure of ours (Flask logs its traceback and hands it here as a 500): counted apart
            # from the requests refused for what the client sent.
            metrics.server_errors.labels(request.path if request.path in KNOWN_PATHS else "other").inc()
            return _json({"error": "internal error", "code": 500}, 500)
        metrics.bad_requests.labels(str(error.code)).inc()
        response = _json({"error": error_message(error.description or ""), "code": error.code}, error.code or 400)
        if error.code == 405:
            response.headers["Allow"] = ", ".join(getattr(error, "valid_methods", None) or ())
        return response

    return app
