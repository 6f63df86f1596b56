"""The log of the webhook and the controller: one JSON object per line on stderr (docs/operations.md, "Logs").

Every module logs through its own logger, ``log = logging.getLogger(__name__)``. A message is a short
constant string saying what happened; the values go in ``extra={...}`` with snake_case keys, and each
becomes a field of the line::

    log.warning("certificate round failed", extra={"error": str(e)})

gives ``{"time":"2026-12-02T04:10:00.123Z","level":"warning","logger":"webhook.controller.certrotator",
"msg":"certificate round failed","error":"..."}``. Never ``json.dumps`` into a message and never
``%s`` values: a reader (``jq``, Loki, Cloud Logging) then filters on fields instead of parsing text
(``tests/test_contracts.py`` checks every log call in the tree).

:func:`configure` installs the one handler, on the root logger, once per process: ``python -m webhook``
calls it before any command, and the server's workers keep it.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

#: The fields every line has, in this order; ``extra`` keys may not reuse them.
FIELDS = ("time", "level", "logger", "msg")
#: A LogRecord's own attributes: everything else on a record came from ``extra``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime",
                                                                                       "taskName"}


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: :data:`FIELDS`, then the ``extra`` fields, then, for a record logged
    with an exception, ``error`` (its type and message) and ``traceback``. A value JSON cannot carry is
    written as its ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        when = dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
        line: dict[str, Any] = {"time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                                "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_") and key not in line:
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            line["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


class JsonHandler(logging.StreamHandler):  # type: ignore[type-arg]  # StreamHandler is generic in typeshed only
    """The stream handler :func:`configure` installs (told apart from any other on the root logger)."""


def configure(level: str = "info", stream: TextIO | None = None) -> logging.Handler:
    """Send every logger's records at ``level`` and above to ``stream`` (default stderr) as JSON lines.
    Calling it again replaces the handler it installed (a new level or stream), never adds a second."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, JsonHandler):
            root.removeHandler(handler)
    handler = JsonHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
