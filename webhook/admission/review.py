"""The AdmissionReview protocol as pure functions: bytes in, answer out.

Follows ``k8s.io/api/admission/v1`` (types.go) and the API server's mutating
dispatcher: the response echoes ``request.uid``; ``patch`` is base64 of an RFC
6902 JSON patch and ``patchType: JSONPatch`` is set only with a patch;
``auditAnnotations`` keys get the webhook's name as prefix, so ours are plain
names (``reasons``) that keep ``<webhook name>/<key>`` a qualified name.
No Flask, no I/O: :mod:`.app` and :mod:`.mutate` are the shell around this. JSON goes through
orjson: parsing and encoding were a third of a review's cost with the stdlib.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

import policylib
from policylib.constants import ADMISSION_API_VERSION
from policylib.errors import MAX_QUOTED_CHARS, cut, render_value

API_VERSION = ADMISSION_API_VERSION
KIND = "AdmissionReview"
MUTATING_OPERATIONS = ("CREATE", "UPDATE")
OPERATIONS = MUTATING_OPERATIONS + ("DELETE", "CONNECT")
#: kubectl prints every warning on every apply: keep each one short.
MAX_WARNING_CHARS = 120
MAX_WARNINGS = 10
MAX_AUDIT_CHARS = 512
AUDIT_REASONS_KEY = "reasons"

# Outcomes, one label value each in the reviews metric.
MUTATED, UNCHANGED, SKIPPED, DENIED = "mutated", "unchanged", "skipped", "denied"
FAIL_OPEN, FAIL_CLOSED = "fail_open", "fail_closed"
#: ``status.code`` of a denial: a policy's verdict (as Gatekeeper answers), or an object the policy cannot handle.
DENIED_CODE, FAIL_CLOSED_CODE = 403, 400


class AnswerNotEncodable(policylib.PolicylibError):
    """The answer to a review cannot be written as JSON; handled like any policy failure."""

    def __str__(self) -> str:
        return f"the answer could not be encoded as JSON ({self.args[0]})"


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer (HTTP 400)."""


@dataclass(frozen=True)
class ReviewRequest:
    """The parts of ``AdmissionReview.request`` the webhook reads."""

    uid: str
    operation: str
    group: str
    version: str
    kind: str
    namespace: str | None
    name: str | None
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    dry_run: bool


@dataclass
class Answer:
    """What to answer for one request; ``outcome`` and ``error`` are for metrics and logs."""

    outcome: str
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    denial: str | None = None
    code: int = DENIED_CODE
    error: str | None = None
    exception: Exception | None = None

    @property
    def allowed(self) -> bool:
        return self.denial is None


# --- parsing ------------------------------------------------------------------

def quoted(value: Any) -> str:
    """Rule W15: a value of the client's as an error message quotes it: its ``repr``, at most 64 characters
    (rule P8)."""
    if isinstance(value, str):
        return repr(value[:MAX_QUOTED_CHARS]) + ("..." if len(value) > MAX_QUOTED_CHARS else "")
    if isinstance(value, (dict, list)):
        return render_value(value)   # encoded only as far as it is quoted
    return cut(repr(value))


def _string(request: dict[str, Any], key: str, required: bool = False) -> str | None:
    value = request.get(key)
    if value is None or value == "":
        if required:
            raise BadReview(f"request.{key} is required")
        return None
    if not isinstance(value, str):
        raise BadReview(f"request.{key} must be a string, got {type(value).__name__}")
    return value


def _object(request: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = request.get(key)
    if value is not None and not isinstance(value, dict):
        raise BadReview(f"request.{key} must be an object, got {type(value).__name__}")
    return value


def parse_review(body: bytes) -> ReviewRequest:
    """Parse and check an ``admission.k8s.io/v1`` AdmissionReview; raises :class:`BadReview`."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadReview(f"body is not valid JSON: {e}") from None
    if not isinstance(review, dict):
        raise BadReview(f"body must be a JSON object, got {type(review).__name__}")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise BadReview(f"body must be an {API_VERSION} {KIND}, got apiVersion={quoted(review.get('apiVersion'))} "
                        f"kind={quoted(review.get('kind'))}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("request is required and must be an object")
    uid = _string(request, "uid", required=True)
    operation = _string(request, "operation", required=True)
    if operation not in OPERATIONS:
        raise BadReview(f"request.operation must be one of {', '.join(OPERATIONS)}, got {quoted(operation)}")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        raise BadReview("request.kind must be an object with group, version and kind")
    obj, old = _object(request, "object"), _object(request, "oldObject")
    if operation in MUTATING_OPERATIONS and obj is None:
        raise BadReview(f"request.object is required for {operation}")
    assert uid is not None and operation is not None  # required above
    return ReviewRequest(uid=uid, operation=operation, group=str(kind.get("group") or ""),
                         version=str(kind.get("version") or ""), kind=kind["kind"],
                         namespace=_string(request, "namespace"), name=_string(request, "name"),
                         obj=obj, old=old, dry_run=request.get("dryRun") is True)


# --- deciding -----------------------------------------------------------------

def decide(req: ReviewRequest, config: policylib.Config, facts: policylib.ClusterFacts | None = None) -> Answer:
    """Rule W1: run policylib for CREATE and UPDATE; DELETE and CONNECT pass untouched.

    A policy's ``Result.denial`` rejects the object (403, no patch). A policy
    failure follows ``config.webhook.failureMode``: ``open`` admits the object
    unchanged with a warning, ``closed`` denies it with the message (400).
    ``dryRun`` changes nothing: policylib has no side effects.
    """
    if req.operation not in MUTATING_OPERATIONS:
        return Answer(SKIPPED)
    assert req.obj is not None  # parse_review requires it for CREATE and UPDATE
    try:
        result = policylib.mutate(req.obj, config, old=req.old if req.operation == "UPDATE" else None,
                                  facts=facts, namespace=req.namespace)
    except Exception as e:  # noqa: BLE001 -- any policy failure follows the failure mode
        return failure_answer(e, config.webhook.failureMode)
    warnings, reasons = short_warnings(result.warnings), list(result.reasons)
    if result.denial:
        return Answer(DENIED, warnings=warnings, reasons=reasons, denial=f"policylib: {result.denial}")
    return Answer(MUTATED if result.patch else UNCHANGED, list(result.patch), warnings, reasons)


def failure_message(error: Exception) -> str:
    """One line naming the problem; a programming error names its type too."""
    if isinstance(error, policylib.PolicylibError):
        return str(error)
    return f"internal error {type(error).__name__}: {cut(str(error), MAX_AUDIT_CHARS)}"


def failure_answer(error: Exception, mode: str) -> Answer:
    """Rule W2: fail-open: allowed, no patch, a warning; fail-closed: denied with the message."""
    message = failure_message(error)
    if mode == "closed":
        return Answer(FAIL_CLOSED, denial=f"policylib: {message}", code=FAIL_CLOSED_CODE, error=message,
                      exception=error)
    return Answer(FAIL_OPEN, warnings=short_warnings([f"policylib not applied: {message}"]), error=message,
                  exception=error)


def truncate(text: str, limit: int) -> str:
    """Rule W3: at most ``limit`` characters, cut at a word boundary when one is near, marked ``...``."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "..."


def short_warnings(warnings: list[str]) -> list[str]:
    """Each warning at most 120 characters, duplicates dropped, at most ten (the first ten: the rest is not read)."""
    out: list[str] = []
    for w in warnings:
        short = truncate(str(w), MAX_WARNING_CHARS)
        if short and short not in out:
            out.append(short)
            if len(out) == MAX_WARNINGS:
                break
    return out


def audit_annotations(answer: Answer) -> dict[str, str]:
    """A short summary of policylib's reasons, or of the failure."""
    summary = "; ".join(answer.reasons)
    if answer.error:
        summary = f"policy failed ({answer.outcome}): {answer.error}"
    return {AUDIT_REASONS_KEY: truncate(summary, MAX_AUDIT_CHARS)} if summary else {}


def response_review(req: ReviewRequest, answer: Answer) -> dict[str, Any]:
    """The AdmissionReview answer (admission/v1 AdmissionResponse)."""
    response: dict[str, Any] = {"uid": req.uid, "allowed": answer.allowed}
    if answer.denial is not None:
        response["status"] = {"code": answer.code, "message": answer.denial}
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(answer.patch)).decode("ascii")
    if answer.warnings:
        response["warnings"] = answer.warnings
    annotations = audit_annotations(answer)
    if annotations:
        response["auditAnnotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
