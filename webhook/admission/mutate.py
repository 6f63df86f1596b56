"""``POST /mutate``: one AdmissionReview answered straight from the WSGI environ (Flask's middleware pattern,
``app.wsgi_app``), skipping Flask's request and response objects (a third of a review's time in the app).

:class:`Reviews` reads, parses, decides (rule W4's read overlapped with the policy), encodes, counts and logs one
review; :class:`ReviewRoute` sends ``POST /mutate`` to it and every other request to Flask.
"""
from __future__ import annotations

import gc
import logging
import time
from http import HTTPStatus
from typing import Any, Callable, Iterable

import orjson
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import get_content_length

import policylib
from policylib.errors import MAX_NAME_CHARS, cut

from ..protocols import Callers
from . import review
from .bodies import ORDINARY_ROOM, BodyBudget, NoRoom, discard_body, not_the_clients_time, read_body
from .confirm import ConfirmedHpas, decide_overlapped, for_review
from .metrics import Metrics, kind_label

log = logging.getLogger(__name__)
JSON = "application/json"
MUTATE_PATH = "/mutate"
#: WSGI status lines by code.
STATUS_LINES = {s.value: f"{s.value} {s.phrase}" for s in HTTPStatus}
#: An error body's message is cut to this many characters: a message may quote what the client sent.
ERROR_CHARS = 200
CLIENT_CERTIFICATE_REQUIRED = orjson.dumps({"error": "a client certificate verified by the webhook's client CA is "
                                            "required", "code": 403})
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def error_message(text: str) -> str:
    """Rule W13: at most :data:`ERROR_CHARS` characters of an error's message go back to the client."""
    return review.truncate(text[: 4 * ERROR_CHARS], ERROR_CHARS)


def error_body(code: int, message: str) -> bytes:
    return orjson.dumps({"error": error_message(message), "code": code})


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


class Reviews:
    """The answers to ``POST /mutate``: status and JSON body of each, counted in ``metrics`` and logged by
    ``review_log``. Bad input gets 400, 403, 408, 413 or 503, never a 500; a failure of ours gets a JSON 500."""

    def __init__(self, config: policylib.Config, facts: policylib.ClusterFacts, metrics: Metrics,
                 callers: Callers, review_log: Callable[[str], None]):
        self.config, self.facts, self.metrics = config, facts, metrics
        self.callers, self.review_log = callers, review_log
        self.limit = config.webhook.maxRequestBytes
        self.bodies = BodyBudget(self.limit + ORDINARY_ROOM)

    def __call__(self, environ: dict[str, Any]) -> tuple[int, bytes]:
        """Rule W13: answered only for a caller with a verified client certificate when one is required (nothing
        is read or looked up for another). The body is read, parsed and answered within its room in the worker's
        :class:`~.bodies.BodyBudget` (a declared length past the limit is refused before that), with the cyclic
        garbage collector paused: a parsed review holds no cycle, and the collector's passes over its hundreds of
        thousands of new maps and lists found nothing while costing up to half of a large review's CPU
        (bench/bench_review_size.py); it runs again once the review is answered (refcounting frees the review
        itself)."""
        if self.callers.required and not self.callers.verified(environ):
            self.metrics.bad_requests.labels("403").inc()
            return 403, CLIENT_CERTIFICATE_REQUIRED
        gc.disable()
        try:
            return self._answer(environ)
        finally:
            gc.enable()

    def _answer(self, environ: dict[str, Any]) -> tuple[int, bytes]:
        try:
            return self._review(environ)
        except review.BadReview as e:
            self.metrics.bad_requests.labels("400").inc()
            return 400, error_body(400, str(e))
        except HTTPException as e:
            code = e.code or 400
            self.metrics.bad_requests.labels(str(code)).inc()
            return code, error_body(code, e.description or "")
        except Exception:  # noqa: BLE001 -- a failure of ours: logged with its traceback, counted, a JSON 500
            log.exception("exception on POST /mutate")
            self.metrics.server_errors.labels(MUTATE_PATH).inc()
            return 500, orjson.dumps({"error": "internal error", "code": 500})

    def _review(self, environ: dict[str, Any]) -> tuple[int, bytes]:
        start = time.perf_counter()
        declared = get_content_length(environ)
        if declared is not None and declared > self.limit:
            raise RequestEntityTooLarge()
        size = self.limit if declared is None else declared
        try:
            with self.metrics.in_flight.track_inprogress(), self.bodies.hold(size) as waited:
                not_the_clients_time(environ, waited)
                req = review.parse_review(read_body(environ, self.limit))
                answer, payload = self.decide(req)
        except NoRoom as e:
            not_the_clients_time(environ, e.waited)
            discard_body(environ, size)
            raise
        self.record(req, answer, time.perf_counter() - start)
        # Freed here, with the collector still paused: alive when it resumes, the review (hundreds of thousands
        # of objects, all new) would be walked whole by its first pass.
        del req, answer
        return 200, payload

    def count_hpa_read(self, result: str) -> None:
        self.metrics.hpa_reads.labels(result).inc()

    def count_runtime_read(self, result: str) -> None:
        self.metrics.runtime_reads.labels(result).inc()

    def decide(self, req: review.ReviewRequest) -> tuple[review.Answer, bytes]:
        """Rule W4 unless ``webhook.readHpasOnCreate`` is false, its read overlapped with the policy (and with
        encoding its answer: the answer is ready when the read finds no HPA, the common case)."""
        if not self.config.webhook.readHpasOnCreate:
            return self.encoded(req, review.decide(req, self.config, self.facts))
        reviewed = for_review(self.facts, req.operation, self.count_hpa_read, self.count_runtime_read)
        if isinstance(reviewed, ConfirmedHpas):
            return decide_overlapped(lambda f: self.encoded(req, review.decide(req, self.config, f)), reviewed,
                                     req.namespace, req.obj)
        return self.encoded(req, review.decide(req, self.config, reviewed))

    def encoded(self, req: review.ReviewRequest, answer: review.Answer) -> tuple[review.Answer, bytes]:
        """The answer and its AdmissionReview JSON. An answer JSON cannot carry (a number past 64 bits, nesting
        past orjson's limit in a value the policy kept) is answered as a policy failure, never a 500."""
        try:
            return answer, orjson.dumps(review.response_review(req, answer))
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            answer = review.failure_answer(review.AnswerNotEncodable(f"{type(e).__name__}: {e}"),
                                           self.config.webhook.failureMode)
            return answer, orjson.dumps(review.response_review(req, answer))

    def record(self, req: review.ReviewRequest, answer: review.Answer, seconds: float) -> None:
        kind = kind_label(req.group, req.kind)  # a bounded label: never the request's free text
        self.metrics.review(kind, req.operation, answer.outcome, seconds, len(answer.patch))
        if answer.error:
            self.metrics.policy_failures.labels(kind, self.config.webhook.failureMode).inc()
            if not isinstance(answer.exception, policylib.PolicylibError):
                log.error("policy raised an unexpected exception", exc_info=answer.exception,
                          extra={"exception": type(answer.exception).__name__, "kind": req.kind,
                                 "namespace": req.namespace, "object_name": req.name})
        self.review_log(review_log_line(req, answer, seconds))


class ReviewRoute:
    """The app's WSGI callable: ``POST /mutate`` answered by ``reviews``, every other request by ``flask_wsgi``.
    The method is matched as Flask's routing matches it (whatever its case): every request Flask would route to
    ``/mutate``'s POST rule comes here, so that rule has no view (Flask keeps it to answer other methods 405 with
    ``Allow``)."""

    def __init__(self, reviews: Reviews, flask_wsgi: WSGIApp):
        self.reviews, self.flask_wsgi = reviews, flask_wsgi

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != MUTATE_PATH or str(environ.get("REQUEST_METHOD", "")).upper() != "POST":
            return self.flask_wsgi(environ, start_response)
        status, body = self.reviews(environ)
        start_response(STATUS_LINES[status], [("Content-Type", JSON), ("Content-Length", str(len(body)))])
        return [body]

