"""What the API server serves of Kubernetes' Workload API, for the webhook and the controller (rule G22).

:class:`WorkloadApiDiscovery` reads the ``scheduling.k8s.io`` discovery documents (which of the versions policylib
writes list both ``workloads`` and ``podgroups``) and the server's ``/version``, and reads them again when asked
(the controller: on every resync and on a NotFound from a create of a Workload or PodGroup; the webhook: every
:data:`REFRESH_SECONDS` in its own thread), so a control-plane upgrade that changes the served version, or turns
the API on or off, is followed without a restart. What it knows is a :class:`policylib.workload_api.WorkloadApi`
decided for ``auto``; each policy decides again for its own ``gang.workloadAPIVersion``. A failed read keeps what
was known before (none: the policies assume Kubernetes 1.37, and the webhook refuses no pod).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from policylib.shell import kube
from policylib.workload_api import WorkloadApi, parse_kube_version, resolve

log = logging.getLogger(__name__)

#: How often the webhook reads the served versions again (an upgrade is followed within this).
REFRESH_SECONDS = 30.0
#: The (connect, read) timeout of each discovery request.
TIMEOUT = (2.0, 5.0)


def read_workload_api(api: kube.Api) -> WorkloadApi:
    """The served versions and the server's minor, read now (raises what the API client raises)."""
    served = kube.served_workload_versions(api, timeout=TIMEOUT)
    try:
        minor: int | None = parse_kube_version(kube.server_version(api, timeout=TIMEOUT))
    except (ValueError, kube.ApiError):   # the minor only words the messages: the served versions decide
        minor = None
    return resolve("auto", served, minor)


class WorkloadApiDiscovery:
    """Rule G22: the last Workload API state read from the API server (None before the first read succeeds)."""

    def __init__(self, api: kube.Api, on_change: Callable[[WorkloadApi], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.api, self.on_change, self.clock = api, on_change, clock
        self.known: WorkloadApi | None = None
        self.read_at: float | None = None
        self.last_error: str | None = None
        #: Set once a read was made, whatever its outcome (the webhook is ready once it has asked).
        self.attempted = threading.Event()

    def read(self) -> WorkloadApi | None:
        """Read again now; what is known after (the previous state when the read fails, logged)."""
        try:
            found = read_workload_api(self.api)
        except Exception as e:  # noqa: BLE001 -- the network or the server: keep what was known, say why
            self.last_error = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]
            log.warning("workload API discovery failed", extra={"error": self.last_error})
            self.attempted.set()
            return self.known
        self.read_at, self.last_error = self.clock(), None
        if self.known is None or (found.served, found.minor) != (self.known.served, self.known.minor):
            log.info("workload API", extra={"served": list(found.served or ()), "minor": found.minor,
                                            "writes": found.api_version})
            self.known = found
            if self.on_change is not None:
                self.on_change(found)
        self.attempted.set()
        return self.known

    def run(self, stop: threading.Event, every: float = REFRESH_SECONDS) -> None:
        """Read now and every ``every`` seconds until ``stop`` is set (the webhook's discovery thread)."""
        while not stop.is_set():
            self.read()
            stop.wait(every)

    def status(self) -> dict[str, Any]:
        known = self.known
        return {"served": list(known.served or ()) if known else None, "minor": known.minor if known else None,
                "lastError": self.last_error}
