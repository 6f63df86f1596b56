"""The API server's failures as typed errors: one class per status a caller decides on."""
from __future__ import annotations

from typing import Any


class ApiError(RuntimeError):
    """A non-2xx answer, with the status code, the Status reason and its message."""

    def __init__(self, status: int, message: str, reason: str = ""):
        self.status, self.reason, self.message = status, reason, message
        super().__init__(f"HTTP {status}{' ' + reason if reason else ''}: {message}")


class NotFound(ApiError):
    """404: the object does not exist, or the cluster does not serve the resource (a CRD not installed)."""


class Conflict(ApiError):
    """409: the object changed since the resourceVersion we sent, or it already exists."""


class Gone(ApiError):
    """410: the resourceVersion is older than what the server keeps; list again."""


class Forbidden(ApiError):
    """403: RBAC does not allow it."""


_ERRORS = {403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone}


def error_for(status: int, body: Any) -> ApiError:
    """The typed error for an answer (``body`` a Status object, or anything else the server sent)."""
    if isinstance(body, dict):
        message, reason = str(body.get("message", "")), str(body.get("reason", ""))
    else:
        message, reason = str(body), ""
    return _ERRORS.get(status, ApiError)(status, message, reason)
