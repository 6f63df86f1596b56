"""Session fixtures: one real control plane (``e2e/bin/testcluster``) for the whole run, and local
webhook processes registered with it by URL, one per policy config."""
from __future__ import annotations

import os
import time

import pytest

from .harness import TESTCLUSTER, Cluster, Webhook, have_go, require_built

HERE = os.path.dirname(__file__)

#: The policy configs the scenarios need; a namespace picks one with its CONFIG_LABEL.
CONFIGS = {
    "default": {},
    "enforce": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}},
    "flat": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "enableReplicaDerivedMaxSkewRule": False}},
    "drift": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}},
    "nextrollout": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "rewrite": "OnNextRollout"}},
    "required": {"hostTopologySpread": {"enforceForRequiredAntiAffinity": True}},   # the default, stated
    "soft": {"hostTopologySpread": {"enforceForRequiredAntiAffinity": False}},
    "failopen": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}},
    "gang": {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"},
             "volcano": {"partitionSize": 2}},
}

TIMINGS: dict[str, float] = {}
#: Lines the tests report for the run's summary (the native gang tests: the API versions written on each minor).
REPORTED: list[str] = []


@pytest.fixture
def report():
    """``report(line)``: a line printed in the run's summary, past pytest's capture."""
    return REPORTED.append


def pytest_collection_modifyitems(config, items):
    if have_go():
        return
    skip = pytest.mark.skip(reason="go is not on PATH: the end-to-end tests build kube-apiserver, kube-scheduler and "
                                   "kube-controller-manager from Go modules (make testcluster)")
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def harness_built() -> None:
    """e2e/bin/testcluster and e2e/bin/kubectl exist (``make testcluster``; a missing one fails the tests)."""
    require_built("testcluster")
    assert TESTCLUSTER.exists()


@pytest.fixture(scope="session")
def cluster(harness_built, tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster") / "c"
    c = Cluster(directory, nodes=os.path.join(HERE, "nodes.yaml"))
    TIMINGS["ready"] = c.ready_seconds
    yield c
    started = time.monotonic()
    code = c.stop()
    TIMINGS["stop"] = time.monotonic() - started
    assert code == 0, f"testcluster exited {code} on SIGTERM: {c.stderr_text()}"


@pytest.fixture(scope="session")
def webhooks(cluster, tmp_path_factory):
    """``webhooks("enforce")``: the local webhook serving that config, started and registered once."""
    tmp = tmp_path_factory.mktemp("webhooks")
    running: dict[str, Webhook] = {}

    def get(name: str) -> Webhook:
        if name not in running:
            hook = Webhook(cluster, name, CONFIGS[name], tmp).start()
            hook.register()
            running[name] = hook
        return running[name]

    yield get
    for hook in running.values():
        hook.stop()


_counter = iter(range(1, 10_000))


@pytest.fixture
def ns(cluster, request):
    """A fresh namespace name for this test (not yet created)."""
    base = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")[:40].strip("-")
    return f"{base}-{next(_counter)}"


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in TIMINGS.items())
        terminalreporter.write_line(f"e2e harness: {parts}")
    if REPORTED:
        terminalreporter.section("what the end-to-end tests saw")
        for line in REPORTED:
            terminalreporter.write_line(line)
