"""Admissions under a day-2 operation: a client that creates Deployments continuously through the API server
(server-side dry run: admitted, never stored) while a test upgrades, deletes, drains or rotates the webhook, and the
API server's own count of what went wrong around it (docs/e2e.md, "Day-2 operations on the real node").

    with AdmissionLoad(cluster, "day2") as load:
        ...  # the operation
    print(load.result)          # sent, failed, unmutated, and the API server's counters' increase
    load.result.assert_clean()  # 0 failed, 0 admitted unmutated, 0 fail-open, 0 rejected

A create *fails* when the API server answers anything but 201 or the connection breaks; it is *unmutated* when it
comes back without the spread constraints the webhook writes (the API server called no webhook, or one that
failed open). The API server's ``apiserver_admission_webhook_fail_open_count`` counts calls that failed and were
ignored (``failurePolicy: Ignore``), ``apiserver_admission_webhook_rejection_count`` calls that failed or refused
with ``failurePolicy: Fail``; both are read from its ``/metrics`` before and after, for the webhooks named.
"""
from __future__ import annotations

import http.client
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

from bench.bench_apiserver import Client, deployment, spread_keys

from .harness import Cluster

log = logging.getLogger(__name__)

FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
REJECTED = "apiserver_admission_webhook_rejection_count"
#: What the webhook writes on every Deployment it mutates (the zone and the host spread).
SPREAD = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]


def webhook_counters(client: Client, webhooks: tuple[str, ...]) -> dict[str, float]:
    """The API server's fail-open and rejection counters, summed over ``webhooks`` (its ``name`` label)."""
    conn = http.client.HTTPSConnection(client.host, client.port, context=client.context, timeout=30)
    try:
        conn.request("GET", "/metrics", headers=client.headers)
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    if response.status != 200:
        raise AssertionError(f"GET /metrics: {response.status} {text[:300]}")
    return parse_counters(text, webhooks)


def parse_counters(text: str, webhooks: tuple[str, ...]) -> dict[str, float]:
    """:data:`FAIL_OPEN` and :data:`REJECTED` in a Prometheus text exposition, summed over ``webhooks``."""
    totals = {FAIL_OPEN: 0.0, REJECTED: 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # the parser names a counter's sample NAME_total, whatever the server wrote
            name = sample.name.removesuffix("_total")
            if name in totals and sample.labels.get("name") in webhooks:
                totals[name] += sample.value
    return totals


@dataclass
class LoadResult:
    """What one run of :class:`AdmissionLoad` saw."""

    sent: int = 0
    failed: int = 0
    unmutated: int = 0
    fail_open: float = 0.0
    rejected: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"creates sent {self.sent}, failed {self.failed}, admitted unmutated {self.unmutated}, "
                f"API server fail-open {self.fail_open:g}, rejected {self.rejected:g} "
                f"({self.seconds:.1f} s, {self.sent / max(self.seconds, 1e-9):.1f}/s)")

    def assert_clean(self, least: int = 1) -> None:
        assert self.sent >= least, f"only {self.sent} creates sent: the load did not run ({self})"
        assert (self.failed, self.unmutated, self.fail_open, self.rejected) == (0, 0, 0, 0), \
            f"{self}; first errors: {self.errors[:5]}"


class AdmissionLoad:
    """``threads`` clients, each creating a Deployment (dry run) every ``interval`` seconds (0: back to back)
    in ``namespace`` until the ``with`` block ends."""

    def __init__(self, cluster: Cluster, namespace: str, *, threads: int = 2, interval: float = 0.05,
                 webhooks: tuple[str, ...] = ("deployments.policylib.io",)):
        self.client = Client(cluster.kubeconfig)
        self.namespace = namespace
        self.threads = threads
        self.interval = interval
        self.webhooks = webhooks
        self.result = LoadResult()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._names = itertools.count()
        self._workers: list[threading.Thread] = []
        self._before: dict[str, float] = {}
        self._started = 0.0

    def __enter__(self) -> AdmissionLoad:
        self._before = webhook_counters(self.client, self.webhooks)
        self._started = time.monotonic()
        self._workers = [threading.Thread(target=self._run, daemon=True, name=f"load-{i}")
                         for i in range(self.threads)]
        for w in self._workers:
            w.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        for w in self._workers:
            w.join(60)
        self.result.seconds = time.monotonic() - self._started
        after = webhook_counters(self.client, self.webhooks)
        self.result.fail_open = after[FAIL_OPEN] - self._before[FAIL_OPEN]
        self.result.rejected = after[REJECTED] - self._before[REJECTED]

    def _run(self) -> None:
        while not self._stop.is_set():
            name = f"load-{next(self._names)}"
            error = None
            try:
                _, got = self.client.create(deployment(name, self.namespace), dry_run=True)
                mutated = spread_keys(got) == SPREAD
            except (OSError, http.client.HTTPException, AssertionError, json.JSONDecodeError) as e:
                error, mutated = f"{name}: {e}", False
            with self._lock:
                self.result.sent += 1
                if error:
                    self.result.failed += 1
                    self.result.errors.append(error)
                elif not mutated:
                    self.result.unmutated += 1
                    self.result.errors.append(f"{name}: admitted without the spread")
            if self.interval:
                self._stop.wait(self.interval)
