"""Prometheus metrics, correct with one process or several gunicorn workers.

Every :class:`Metrics` has its own registry, so apps built by ``create_app``
never collide. With ``PROMETHEUS_MULTIPROC_DIR`` set before prometheus_client
is first imported (``webhook serve`` does that), each worker writes its values
to files in that directory and ``/metrics`` adds them up with
``MultiProcessCollector``; gauges say how (``livesum``, ``livemostrecent``).
See prometheus_client's "Multiprocess Mode" documentation.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from policylib.constants import (
    APPS_GROUP,
    JOBSET_GROUP,
    KUBEFLOW_GROUP,
    LWS_GROUP,
    TRAINER_GROUP,
    VOLCANO_BATCH_GROUP,
    VOLCANO_DOMAIN,
)

from .metricsdir import multiprocess_dir

PREFIX = "policylib_webhook"
#: Includes the API server's own webhook latency buckets 5 ms, 25 ms and 100 ms.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


#: The ``kind`` label's values besides :data:`OTHER_KIND`: the kinds policylib has a policy for,
#: by API group (``request.kind``). Every label value comes from a fixed set: with one taken
#: from the request, random kinds would add series (and bytes to every worker's multiprocess
#: file, on a small emptyDir) without bound.
POLICY_KINDS = {
    APPS_GROUP: frozenset({"Deployment", "StatefulSet"}),
    VOLCANO_BATCH_GROUP: frozenset({"Job"}),
    KUBEFLOW_GROUP: frozenset({"TFJob", "PyTorchJob", "MPIJob"}),
    JOBSET_GROUP: frozenset({"JobSet"}),
    TRAINER_GROUP: frozenset({"TrainJob"}),
    LWS_GROUP: frozenset({"LeaderWorkerSet"}),
    "": frozenset({"Pod"}),   # gang method workload: labelled Pods only (rule G17)
}
#: Volcano's HyperJob, in whichever ``*volcano.sh`` group (as policylib matches it).
VOLCANO_GROUP_SUFFIX, HYPERJOB = VOLCANO_DOMAIN, "HyperJob"
OTHER_KIND = "other"


def kind_label(group: str, kind: str) -> str:
    """``kind`` for a kind policylib handles, else ``"other"``."""
    if kind in POLICY_KINDS.get(group, ()):
        return kind
    if kind == HYPERJOB and group.endswith(VOLCANO_GROUP_SUFFIX):
        return kind
    return OTHER_KIND


class Metrics:
    """The webhook's metrics; ``render()`` gives the exposition text."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[str, str, str], tuple[Counter, Histogram, Counter]] = {}
        r = self.registry
        self.reviews = Counter(f"{PREFIX}_reviews", "Admission reviews answered, by kind, operation and outcome "
                               "(mutated, unchanged, skipped, denied, fail_open, fail_closed).",
                               ["kind", "operation", "outcome"], registry=r)
        self.latency = Histogram(f"{PREFIX}_review_duration_seconds", "Time to answer an admission review.",
                                 ["kind", "operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.patch_operations = Counter(f"{PREFIX}_patch_operations", "JSON patch operations sent, by kind.",
                                        ["kind"], registry=r)
        self.policy_failures = Counter(f"{PREFIX}_policy_failures", "Reviews where a policy failed, by kind "
                                       "and failure mode.", ["kind", "mode"], registry=r)
        self.bad_requests = Counter(f"{PREFIX}_bad_requests", "Requests refused before review, by HTTP status.",
                                    ["code"], registry=r)
        self.server_errors = Counter(f"{PREFIX}_server_errors", "Requests that failed inside the webhook "
                                     "(HTTP 500), by path; no input should cause one.", ["path"], registry=r)
        self.slow_clients = Counter(f"{PREFIX}_slow_clients", "Connections closed because the TLS handshake "
                                    "or a request was not complete within the deadline, or no first request "
                                    "began within --first-request-timeout of the handshake, by stage "
                                    "(handshake, first-request, request).", ["stage"], registry=r)
        self.connection_limit = Counter(f"{PREFIX}_connection_limit_reached", "Connections accepted while their "
                                        "worker held --max-connections, each closing the connection that had "
                                        "waited longest without a request, by that connection's stage "
                                        "(handshake, first-request, keep-alive; none: every other connection "
                                        "was in a request, and none was closed).", ["closed"], registry=r)
        self.open_connections = Gauge(f"{PREFIX}_open_connections", "Client connections open, summed over "
                                      "workers (each holds at most --max-connections).",
                                      multiprocess_mode="livesum", registry=r)
        self.tls_handshakes = Counter(f"{PREFIX}_tls_handshakes", "TLS handshakes completed: new connections "
                                      "(a client that reuses its connections makes few), by the protocol "
                                      "agreed by ALPN (none when the client offered none).", ["protocol"],
                                      registry=r)
        self.hpa_reads = Counter(f"{PREFIX}_hpa_confirming_reads", "Deployment CREATEs for which the HPA "
                                 "watch cache had no HPA, so the namespace's HPAs were read from the API "
                                 "server (rule W4), by result (found: the watch had not caught up; none; "
                                 "error: the cache's answer was used).", ["result"], registry=r)
        self.runtime_reads = Counter(f"{PREFIX}_trainer_runtime_reads", "TrainJob reviews whose Trainer runtime "
                                     "the watch cache did not hold, so it was read from the API server (rule T6), "
                                     "by result (found: the watch had not caught up; none: no such runtime; "
                                     "error: the runtime stayed unknown).", ["result"], registry=r)
        self.in_flight = Gauge(f"{PREFIX}_in_flight_requests", "Admission reviews being answered.",
                               multiprocess_mode="livesum", registry=r)
        self.cert_not_after = Gauge(f"{PREFIX}_certificate_not_after_seconds", "notAfter of the serving "
                                    "certificate, seconds since the epoch.", multiprocess_mode="livemostrecent",
                                    registry=r)

        # Series that alerts and the dashboard query exist from the start at 0 (docs/operations.md, "Alerts"):
        # a failure counter that appears only with its first event has no rate() until its second.
        for kind in sorted({k for kinds in POLICY_KINDS.values() for k in kinds} | {HYPERJOB}):
            for mode in ("open", "closed"):
                self.policy_failures.labels(kind, mode)
        self.server_errors.labels("/mutate")
        for stage in ("handshake", "first-request", "keep-alive", "none"):
            self.connection_limit.labels(stage)
        for result in ("found", "none", "error"):
            self.hpa_reads.labels(result)
            self.runtime_reads.labels(result)

    def review(self, kind: str, operation: str, outcome: str, seconds: float, patch_ops: int) -> None:
        """Count one answered review; the labelled children are looked up once per label set.

        ``kind`` is a :func:`kind_label`, ``operation`` one of the four AdmissionReview
        operations, ``outcome`` one of the webhook's: never free text from a request.
        """
        key = (kind, operation, outcome)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (self.reviews.labels(kind, operation, outcome),
                                              self.latency.labels(kind, operation),
                                              self.patch_operations.labels(kind))
        reviews, latency, patch_operations = children
        reviews.inc()
        latency.observe(seconds)
        if patch_ops:
            patch_operations.inc(patch_ops)

    def render(self) -> bytes:
        """The exposition text: summed over workers in multiprocess mode."""
        directory = multiprocess_dir()
        if directory is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        return generate_latest(registry)


def worker_exited(pid: int) -> None:
    """gunicorn ``child_exit``: drop a dead worker's live gauges."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
