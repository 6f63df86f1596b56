"""The controller's Prometheus metrics (docs/reference/metrics.md is generated from them), one
registry per replica; the work queue's own metrics (client-go's ``workqueue_*``) and prometheus_client's
process metrics (``process_*``) join it."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from ..informer import ReflectorMetrics
from .workqueue import QueueMetrics


def resident_bytes(process: ProcessCollector) -> float:
    """This process's resident memory, as ``process``'s ``process_resident_memory_bytes`` reads it; 0 where it
    reads none (no ``/proc``)."""
    for family in process.collect():
        if family.name == "process_resident_memory_bytes":
            return float(family.samples[0].value)
    return 0.0


def memory_limit_bytes(paths: tuple[str, ...] = ("/sys/fs/cgroup/memory.max",
                                                 "/sys/fs/cgroup/memory/memory.limit_in_bytes")) -> float:
    """The container's memory limit (cgroup v2, then v1); 0 when unlimited or unknown."""
    for path in paths:
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 2 ** 60:   # v1 writes a huge number for "no limit", v2 "max"
            return float(raw)
        return 0.0
    return 0.0


class ControllerMetrics(ReflectorMetrics):
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        #: client-go's workqueue metrics, for every queue of this replica (labelled by the queue's name)
        self.queue = QueueMetrics(self.registry)
        self.gave_up = Counter("policylib_controller_gave_up",
                               "Keys dropped after failing the retry cap in a row (the next resync queues them again)",
                               registry=self.registry)
        self.reconciles = Counter("policylib_controller_reconciles",
                                  "Plans made: trigger=key for one object, resync/leader for a pass that queues every key",
                                  ["trigger"], registry=self.registry)
        self.writes = Counter("policylib_controller_writes", "Writes made (or logged in dry-run)",
                              ["kind", "action", "rollout", "dry_run"], registry=self.registry)
        self.conflicts = Counter("policylib_controller_conflicts", "409 Conflict answers, planned again on fresh state",
                                 registry=self.registry)
        self.errors = Counter("policylib_controller_errors", "Failed API calls and unplannable objects",
                              ["stage"], registry=self.registry)
        self.retries = Counter("policylib_controller_retries", "Keys queued again after a failed write (with backoff)",
                               registry=self.registry)
        self.deferred = Counter("policylib_controller_deferred_rollouts",
                                "Rollouts held back by maxConcurrentRollouts", registry=self.registry)
        self.leader = Gauge("policylib_controller_leader", "1 while this replica holds the Lease", registry=self.registry)
        self.rolling = Gauge("policylib_controller_rolling", "Deployments and StatefulSets rolled by us still rolling",
                             registry=self.registry)
        self.queue_depth = Gauge("policylib_controller_queue_depth", "Keys waiting to be reconciled",
                                 registry=self.registry)
        self.latency = Histogram("policylib_controller_reconcile_seconds", "Time to plan and write one key",
                                 buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=self.registry)
        self.watch_restarts = Counter("policylib_controller_watch_restarts", "Watches started again (ended or failed)",
                                      ["resource"], registry=self.registry)
        self.relists = Counter("policylib_controller_relists", "Lists after 410 Gone", ["resource"],
                               registry=self.registry)
        self.pending = Gauge("policylib_controller_pending_rewrites",
                             "Deployments whose new constraints wait for their next rollout (rewrite: OnNextRollout)",
                             registry=self.registry)
        self.unrecorded = Gauge("policylib_controller_unrecorded_deployments",
                                "Managed Deployments without policylib's record annotations: admitted while the "
                                "webhook was unreachable (fail-open), or created before the install",
                                registry=self.registry)
        #: prometheus_client's process metrics (``process_resident_memory_bytes``, ``process_cpu_seconds_total``,
        #: ``process_open_fds``, ...), as every client library exports them.
        self.process = ProcessCollector(registry=self.registry)
        #: The same quantity as ``process_resident_memory_bytes``, under the name the chart's alert rule and
        #: dashboard read.
        self.memory = Gauge("policylib_controller_memory_bytes", "Resident memory of this replica (the value of "
                            "process_resident_memory_bytes)", registry=self.registry)
        self.memory.set_function(lambda: resident_bytes(self.process))
        self.memory_limit = Gauge("policylib_controller_memory_limit_bytes",
                                  "This replica's memory limit (its cgroup's; 0 without one)", registry=self.registry)
        self.memory_limit.set_function(memory_limit_bytes)
        self.scope_closed = Gauge("policylib_controller_scope_closed",
                                  "1 while the controller acts on nothing: its MutatingWebhookConfiguration is not "
                                  "installed, cannot be read, or has matchConditions on every webhook (rule W5)",
                                  registry=self.registry)
        self.scope_skipped = Gauge("policylib_controller_scope_skipped_webhooks",
                                   "Webhooks of its MutatingWebhookConfiguration whose objects the controller does not "
                                   "act on: they have matchConditions (rule W5)", registry=self.registry)
        self.unrecorded_seen = Counter("policylib_controller_unrecorded_detected",
                                       "Managed Deployments found without policylib's record (each once)",
                                       registry=self.registry)

    def watch_restart(self, plural: str) -> None:
        self.watch_restarts.labels(plural).inc()

    def relist(self, plural: str) -> None:
        self.relists.labels(plural).inc()
