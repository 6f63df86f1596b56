"""An Event recorder, as client-go's ``tools/record`` and ``tools/events``: every write is recorded as an
``events.k8s.io/v1`` Event on the object written, best effort (a failed Event never fails or retries
the write). The Event's shape is pure (:func:`event_for`); :class:`EventRecorder` makes the call."""
from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any, Callable

from policylib.constants import EVENTS_API_VERSION
from policylib.plan import Write
from policylib.shell import kube

from .leaderelection import micro_time
from .metrics import ControllerMetrics

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "policylib.io/controller"
EVENT_ACTION = "Rewrite"
#: The API server's limits on an events.k8s.io/v1 Event (pkg/apis/core/validation/events.go): ``note``
#: at most 1 KiB (bytes), ``reportingInstance``, ``action`` and ``reason`` at most 128 characters.
NOTE_LIMIT = 1024
FIELD_LIMIT = 128


def event_reason(write: Write) -> str:
    """``SpreadRewritten`` (``SpreadPending``) for a Deployment or a StatefulSet; ``PodGroupCreated`` /
    ``PodGroupUpdated`` for a PodGroup."""
    if write.kind == "PodGroup":
        return "PodGroupCreated" if write.action == "create" else "PodGroupUpdated"
    if write.kind == "Workload" and write.action == "create":
        return "WorkloadCreated"
    if write.kind in ("Deployment", "StatefulSet") and write.pending:
        return "SpreadPending"
    if write.kind in ("Deployment", "StatefulSet"):
        return "SpreadRewritten"
    return f"{write.kind}Rewritten"[:FIELD_LIMIT]


def event_note(reasons: list[str], limit: int = NOTE_LIMIT) -> str:
    """The write's reasons joined with ``; ``, cut to ``limit`` UTF-8 bytes (ending ``...`` when cut)."""
    note = "; ".join(reasons)
    data = note.encode("utf-8")
    if len(data) <= limit:
        return note
    return data[:limit - 3].decode("utf-8", "ignore") + "..."


def event_body(namespace: str, name: str, regarding: dict[str, Any], *, reason: str, note: str, action: str,
               warning: bool, identity: str, now: dt.datetime, unique: int) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event in ``namespace`` regarding an object named ``name``. ``unique`` makes its
    name unique, as client-go's ``<object name>.<hex nanoseconds>``."""
    suffix = f".{unique:x}"
    return {
        "apiVersion": EVENTS_API_VERSION, "kind": "Event",
        "metadata": {"name": name[:253 - len(suffix)].rstrip("-.") + suffix, "namespace": namespace},
        "eventTime": micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": identity[:FIELD_LIMIT],
        "action": action,
        "reason": reason,
        "type": "Warning" if warning else "Normal",
        "regarding": {k: v for k, v in regarding.items() if v},
        "note": note,
    }


def event_for(write: Write, written: dict[str, Any] | None, identity: str, now: dt.datetime, unique: int) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event that records ``write``, regarding the object as the write left it
    (``written``: the API's answer, which carries the uid and the new resourceVersion)."""
    meta = (written or {}).get("metadata") or {}
    regarding = {"apiVersion": (written or {}).get("apiVersion") or write.api_version, "kind": write.kind,
                 "name": write.name, "namespace": write.namespace, "uid": meta.get("uid"),
                 "resourceVersion": meta.get("resourceVersion")}
    return event_body(write.namespace, write.name, regarding, reason=event_reason(write), note=event_note(write.reasons),
                      action=EVENT_ACTION, warning=False, identity=identity, now=now, unique=unique)


class EventRecorder:
    """Records Events as ``identity`` (the Event's ``reportingInstance``)."""

    def __init__(self, api: kube.Api, identity: str, metrics: ControllerMetrics, clock: Callable[[], dt.datetime]):
        self.api, self.identity, self.metrics, self.clock = api, identity, metrics, clock

    def record(self, write: Write, written: dict[str, Any] | None, reason: str | None = None,
               note: str | None = None, warning: bool = False) -> None:
        """Record an Event on the object just written. Best effort: a failure is logged and counted
        (``errors{stage="event"}``), and never fails or retries the write."""
        try:
            event = event_for(write, written if isinstance(written, dict) else None, self.identity,
                              self.clock(), time.time_ns())
            if reason:
                event.update(reason=reason, note=event_note([note or reason]), type="Warning" if warning else "Normal")
            self.api.create(kube.EVENTS, write.namespace, event)
        except Exception as e:  # noqa: BLE001 -- no RBAC for events, events API away, odd answer: the write stands
            self.metrics.errors.labels("event").inc()
            log.warning("could not record event", extra={"kind": write.kind, "namespace": write.namespace,
                                                         "object_name": write.name, "error": str(e)[:500]})

    def warn(self, obj: dict[str, Any], reason: str, note: str, action: str) -> None:
        """Record a Warning Event regarding ``obj`` (its apiVersion, kind, name, namespace and uid), best effort
        as :meth:`record`."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace"))
        regarding = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
                     "namespace": meta.get("namespace"), "uid": meta.get("uid")}
        try:
            event = event_body(namespace, str(meta.get("name")), regarding, reason=reason, note=event_note([note]),
                               action=action, warning=True, identity=self.identity, now=self.clock(),
                               unique=time.time_ns())
            self.api.create(kube.EVENTS, namespace, event)
        except Exception as e:  # noqa: BLE001 -- best effort, as the Events of writes
            self.metrics.errors.labels("event").inc()
            log.warning("could not record event", extra={"reason": reason, "error": str(e)[:300]})
