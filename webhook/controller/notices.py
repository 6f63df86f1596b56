"""Rules S19 and S20: the Deployments whose new constraints wait for their next rollout (pending) and those
admitted without policylib's record (unrecorded): their gauges, and one Event per new state."""
from __future__ import annotations

from typing import Any

from policylib.plan import UNRECORDED_REASON, Write

from .events import EventRecorder
from .metrics import ControllerMetrics
from .rollouts import ObjectKey


class Notices:
    """What each Deployment key was last noticed for (pending note, unrecorded uid), with its Event recorded
    once per state; the gauges count these. The worker alone reads and writes it."""

    def __init__(self, metrics: ControllerMetrics, recorder: EventRecorder):
        self.metrics, self.recorder = metrics, recorder
        self.notices: dict[ObjectKey, dict[str, str]] = {}
        #: How many of ``notices`` hold each kind of notice, kept as they change (the gauges' values: a sum
        #: over every notice per key would make the initial sync quadratic in the Deployments).
        self.counts: dict[str, int] = {"pending": 0, "unrecorded": 0}

    def notice(self, key: ObjectKey, obj: dict[str, Any], writes: list[Write], tell: bool) -> None:
        """Keep the pending and unrecorded gauges and, when ``tell`` (leading, not a dry run), record one Event
        per new state (``SpreadPending``, Normal, for a rewrite held for the next rollout: the metadata write
        that records it carries its own; ``AdmittedWithoutPolicy``, Warning, for a Deployment without our
        record)."""
        before = self.notices.get(key, {})
        now: dict[str, str] = {}
        for w in writes:
            if w.pending:
                now["pending"] = w.pending
            if w.unrecorded:
                now["unrecorded"] = (obj.get("metadata") or {}).get("uid", "") or "yes"
        self.set(key, now)
        if "unrecorded" in now and before.get("unrecorded") != now["unrecorded"]:
            self.metrics.unrecorded_seen.inc()
        if not tell:
            return
        for w in writes:
            if w.pending and w.action == "none" and before.get("pending") != w.pending:
                self.recorder.record(w, obj)
            if w.unrecorded and before.get("unrecorded") != now["unrecorded"]:
                self.recorder.record(w, obj, reason="AdmittedWithoutPolicy", note=UNRECORDED_REASON, warning=True)

    def set(self, key: ObjectKey, now: dict[str, str]) -> None:
        """Store ``key``'s notices and move the gauges by the change alone (constant work per key)."""
        before = self.notices.pop(key, {})
        if now:
            self.notices[key] = now
        for kind in self.counts:
            self.counts[kind] += (kind in now) - (kind in before)
        self.metrics.pending.set(self.counts["pending"])
        self.metrics.unrecorded.set(self.counts["unrecorded"])
