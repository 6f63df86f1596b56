"""Rules G20 and G22: what the API server serves of the Workload API (gang method workload only), as the
reconciler plans with it: read before the first plan, on every resync, on a NotFound from a create of a Workload
or PodGroup, and every :data:`DISCOVERY_RETRY_SECONDS` while no read has succeeded; and the jobs told that no
version policylib writes is served."""
from __future__ import annotations

import logging
import time

import policylib
from policylib.gang.workload import workload_api_for
from policylib.plan import Write
from policylib.shell import kube
from policylib.workload_api import WorkloadApi

from ..discovery import WorkloadApiDiscovery
from .events import EventRecorder
from .metrics import ControllerMetrics
from .overlay import OverlayFacts
from .rollouts import ObjectKey

log = logging.getLogger(__name__)

#: Rule G22: while the served Workload API versions are not known (every read failed), how often a key's plan
#: tries to read them again.
DISCOVERY_RETRY_SECONDS = 10.0


class ServedWorkloadApi:
    """The served Workload API versions in ``facts`` (the facts the reconciler plans with), kept by the worker."""

    def __init__(self, api: kube.Api, config: policylib.Config, facts: OverlayFacts, metrics: ControllerMetrics,
                 recorder: EventRecorder):
        self.config, self.facts, self.metrics, self.recorder = config, facts, metrics, recorder
        self.discovery = WorkloadApiDiscovery(api) if config.gang.enabled and config.gang.method == "workload" \
            else None
        self._tried: float | None = None
        #: Rule G20: the jobs (key, uid) already told by a Warning Event that the API server serves no Workload
        #: API version policylib writes (one Event per job, not one per resync).
        self.told: set[tuple[ObjectKey, str]] = set()

    def retry_due(self) -> bool:
        """No read has succeeded yet, and the last was :data:`DISCOVERY_RETRY_SECONDS` ago or more."""
        return self.discovery is not None and self.discovery.known is None and (
            self._tried is None or time.monotonic() - self._tried >= DISCOVERY_RETRY_SECONDS)

    def rediscover(self) -> WorkloadApi | None:
        """Read the served Workload API versions again into the facts; what is known after."""
        if self.discovery is None:
            return None
        self._tried = time.monotonic()
        self.facts.workload_api = self.discovery.read()
        return self.facts.workload_api

    def native_not_found(self, key: ObjectKey, write: Write) -> str:
        """Rules G20, G22: a create of a Workload or PodGroup answered NotFound: the served versions are read
        again (an upgrade may have changed them); ``replan`` when another version is served now, ``unserved``
        (with the job's Warning Event) when none policylib writes is, ``gone`` otherwise (the namespace went)."""
        self.rediscover()
        api = self.unserved()
        if api is not None:
            self.api_not_served(key, write)
            return "unserved"
        now = workload_api_for(self.config.gang, self.facts)
        return "replan" if now.api_version != write.api_version else "gone"

    def unserved(self) -> WorkloadApi | None:
        """The Workload API as discovered, when it is known that the cluster serves no version policylib writes."""
        if self.discovery is None or self.facts.workload_api is None:
            return None
        api = workload_api_for(self.config.gang, self.facts)
        return api if api.version is None else None

    def api_not_served(self, key: ObjectKey, write: Write) -> None:
        """Rule G20: a job of gang method workload on a cluster that serves no Workload API version policylib
        writes (rule G22): an error in the log, and a Warning Event on the job naming what to enable (the flags
        of the cluster's minor), once per job."""
        api_version, kind, ns, name = key
        job = self.facts.get(*key)
        uid = ((job or {}).get("metadata") or {}).get("uid") or ""
        found = self.unserved()
        missing = found.missing() if found is not None else workload_api_for(self.config.gang, self.facts).missing()
        message = f"{kind} {ns}/{name}: no Workload {write.name} made: {missing}"
        log.error("API not served", extra={"object": f"{kind} {ns}/{name}", "error": message})
        self.metrics.errors.labels("unserved").inc()
        if (key, uid) in self.told:
            return
        self.told.add((key, uid))
        self.recorder.record(Write(kind, ns, name, [message], False, action="none", api_version=api_version), job,
                             reason="WorkloadAPINotServed", note=message, warning=True)
