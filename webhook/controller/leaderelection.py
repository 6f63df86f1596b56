"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``tools/leaderelection``:
only the holder writes; it renews on its own thread and gives the Lease up when stopped
(``ReleaseOnCancel``). The decisions are pure functions; :class:`LeaderElector` makes the calls."""
from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any, Callable

from policylib.constants import COORDINATION_API_VERSION, LEASE_DURATION_SECONDS
from policylib.shell import kube

from .metrics import ControllerMetrics

log = logging.getLogger(__name__)

#: How long a stopping leader waits for the round in flight at most (client-go's default RenewDeadline), and
#: for each attempt of its release to connect and to be answered (the API client tries a request four times):
#: at most 10 + 4 x 3 s, within the pod's terminationGracePeriodSeconds (30), whatever leaseDurationSeconds is.
ROUND_WAIT_SECONDS = 10.0
RELEASE_SECONDS = 3.0


def micro_time(now: dt.datetime) -> str:
    """metav1.MicroTime as the API serialises it."""
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_record(lease: dict[str, Any] | None) -> tuple[Any, ...]:
    """What identifies one state of the Lease: a change means its holder is alive."""
    spec = (lease or {}).get("spec") or {}
    return spec.get("holderIdentity"), spec.get("renewTime"), ((lease or {}).get("metadata") or {}).get("resourceVersion")


def lease_decision(lease: dict[str, Any] | None, identity: str, now: float, observed_at: float) -> str:
    """What to do with the Lease, as client-go's leaderelection decides it.

    ``create`` when there is none; ``renew`` when we hold it; ``acquire`` when
    nobody holds it, or when its record has not changed for longer than
    ``leaseDurationSeconds`` since this replica first saw it (``observed_at``,
    local monotonic time: like client-go, expiry never compares another
    replica's clock with ours); otherwise ``wait``.
    """
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if holder == identity:
        return "renew"
    duration = spec.get("leaseDurationSeconds") or LEASE_DURATION_SECONDS
    if not holder or observed_at + duration < now:
        return "acquire"
    return "wait"


def lease_spec(lease: dict[str, Any] | None, identity: str, now: dt.datetime, duration: int, decision: str) -> dict[str, Any]:
    """The Lease spec to write for ``decision``; ``now`` is wall-clock time for the record."""
    spec = dict((lease or {}).get("spec") or {})
    spec.update(holderIdentity=identity, leaseDurationSeconds=duration, renewTime=micro_time(now))
    if decision in ("create", "acquire"):
        spec["acquireTime"] = micro_time(now)
        spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + (1 if decision == "acquire" else 0)
    return spec


def released_spec(lease: dict[str, Any]) -> dict[str, Any]:
    """The Lease spec that gives leadership up at once, as client-go's ``ReleaseOnCancel`` writes it:
    no holder, a one-second duration."""
    spec = dict(lease.get("spec") or {})
    now = micro_time(dt.datetime.now(dt.timezone.utc))
    spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now, acquireTime=now)
    return spec


class LeaderElector:
    """One replica's side of the election for the Lease ``namespace/name``. :attr:`leading` is checked
    before every write; :meth:`run` renews (or tries to take) the Lease every third of its duration on
    its own thread, so a long reconcile never lets it lapse."""

    def __init__(self, api: kube.Api, namespace: str, name: str, identity: str, duration: int,
                 metrics: ControllerMetrics, clock: Callable[[], dt.datetime]):
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.duration, self.metrics, self.clock = duration, metrics, clock
        self.lease_deadline = 0.0          # monotonic time until which our last renewal holds
        self.observed: tuple[Any, ...] = (None, 0.0)  # (Lease record, monotonic time first seen)
        self.lease: dict[str, Any] | None = None      # the Lease as we last wrote it
        #: Why this replica cannot lead, when it knows (shown by /readyz).
        self.not_leading = ""
        #: Called on this thread when a round makes this replica leader, and when one (or the release) ends
        #: that (client-go's ``OnStartedLeading``/``OnStoppedLeading``); the manager sets them.
        self.on_started_leading: Callable[[], None] | None = None
        self.on_stopped_leading: Callable[[], None] | None = None
        self._announced = False

    @property
    def leading(self) -> bool:
        """We hold the Lease and our last renewal has not run out."""
        return time.monotonic() < self.lease_deadline

    def try_lead(self) -> bool:
        """One leader-election round: create, acquire, renew or wait. Returns whether we lead."""
        started = time.monotonic()
        try:
            lease = self.api.get(kube.LEASES, self.namespace, self.name)
        except kube.NotFound:
            lease = None
        record = lease_record(lease)
        if record != self.observed[0]:
            self.observed = (record, started)
        decision = lease_decision(lease, self.identity, started, self.observed[1])
        if decision == "wait":
            self.set_leading(False)
            return False
        spec = lease_spec(lease, self.identity, self.clock(), self.duration, decision)
        try:
            if decision == "create":
                self.lease = self.api.create(kube.LEASES, self.namespace, {
                    "apiVersion": COORDINATION_API_VERSION, "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec})
            else:  # carries metadata.resourceVersion: a racing update gets 409
                assert lease is not None  # decision "update" means a Lease was read
                self.lease = self.api.update(kube.LEASES, self.namespace, self.name, dict(lease, spec=spec))
            won = True
        except kube.Conflict:
            won = False
        except kube.NotFound:
            self.metrics.errors.labels("lease").inc()
            self.not_leading = (f"the Lease namespace {self.namespace} does not exist: create it, or start "
                                "the controller with --namespace of one that does")
            log.error("cannot create the Lease", extra={"namespace": self.namespace, "reason": self.not_leading})
            won = False
        except kube.ApiError:
            self.metrics.errors.labels("lease").inc()
            won = False
        if won:
            self.not_leading = ""
        # the renewal holds for a little less than the lease, counted from before the round began
        self.set_leading(won, started + self.renew_deadline)
        return won

    def release(self) -> None:
        """Give the Lease up (SIGTERM): the next replica leads at once instead of a lease duration later."""
        if not self.leading or self.lease is None:
            return
        self.set_leading(False)
        try:
            self.api.update(kube.LEASES, self.namespace, self.name, dict(self.lease, spec=released_spec(self.lease)),
                            timeout=(RELEASE_SECONDS, RELEASE_SECONDS))
            log.info("released the Lease", extra={"identity": self.identity})
        except Exception as e:  # noqa: BLE001 -- someone else holds it already (409), or the server is away or
            # does not answer in time: nothing to give up, and the stop goes on (the next replica leads a lease later)
            log.warning("could not release the Lease", extra={"error": str(e)[:300]})

    def set_leading(self, leading: bool, until: float = 0.0) -> None:
        """Record a round's outcome; a change from the last one is logged and reported to the callbacks. A
        renewal that lapsed between two rounds (:attr:`leading` turned False on its own) and was renewed
        again is no change: writes were held while it had lapsed, and the components go on."""
        self.lease_deadline = until if leading else 0.0
        self.metrics.leader.set(1 if leading else 0)
        if leading == self._announced:
            return
        self._announced = leading
        log.info("leader" if leading else "not leader", extra={"identity": self.identity})
        callback = self.on_started_leading if leading else self.on_stopped_leading
        if callback is not None:
            callback()

    @property
    def renew_deadline(self) -> float:
        """How long one renewal keeps this replica leading: two thirds of the Lease's duration, counted from
        before its round began (client-go's RenewDeadline, 10 s of the default 15)."""
        return self.duration * 2 / 3

    @property
    def stop_wait(self) -> float:
        """How long a stopping replica waits for the round in flight before it releases: the renewal's deadline
        (a round unanswered by then cannot keep it leading, so nothing is released), at most
        :data:`ROUND_WAIT_SECONDS`."""
        return min(self.renew_deadline, ROUND_WAIT_SECONDS)

    @property
    def round_seconds(self) -> float:
        """How often a round begins: a third of the Lease's duration (at least a second)."""
        return max(1.0, self.duration / 3)

    def run(self, stop: threading.Event) -> None:
        """Election rounds until ``stop``; a failed round (the server away) is tried again next time."""
        every = self.round_seconds
        while not stop.is_set():
            was_leading = self.leading
            try:
                if not self.try_lead() and was_leading:
                    log.error("lost the Lease; stopping writes")
            except Exception as e:  # noqa: BLE001 -- the server may be away: try again next round
                self.metrics.errors.labels("lease").inc()
                log.warning("lease round failed", extra={"error": str(e)[:300]})
            stop.wait(every)
