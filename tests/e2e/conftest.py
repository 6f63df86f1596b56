"""Session fixtures: one real control plane (``e2e/bin/testcluster``) per Kubernetes minor for the whole run, and
local webhook processes registered with it by URL, one per policy config.

A test runs on the default minor (``harness.DEFAULT_MINOR``) unless it is marked ``@pytest.mark.minors(...)``:
then once per minor named (every one of ``harness.MINORS`` when none is), its ``minor`` fixture the minor of that
run, and ``cluster`` and ``webhooks`` that minor's. A test marked so must use ``minor`` (directly, or through
``cluster``, ``webhooks`` or a fixture of its own). The runs of one minor are grouped, and each minor's control
plane starts once, when a test first needs it."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from .harness import DEFAULT_MINOR, MINORS, TESTCLUSTER, Cluster, Webhook, have_go, require_built

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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "minors(*minors): run the test once on each Kubernetes minor named (every one the harness runs "
                   "when none is), through the `minor` fixture; unmarked tests run on the default minor only")


def pytest_generate_tests(metafunc):
    """A test marked ``minors`` is run once per minor it names: ``minor`` parametrized at session scope, so that
    pytest groups the runs of one minor and each minor's session fixtures are made once."""
    marker = metafunc.definition.get_closest_marker("minors")
    if marker is None:
        return
    minors = marker.args or MINORS
    unknown = [m for m in minors if m not in MINORS]
    if unknown:
        raise ValueError(f"{metafunc.definition.nodeid}: minors {unknown}: the harness runs {', '.join(MINORS)}")
    if "minor" not in metafunc.fixturenames:
        raise ValueError(f"{metafunc.definition.nodeid} is marked minors{tuple(minors)} but uses no fixture that "
                         "depends on `minor` (cluster, webhooks, or minor itself): it would run on one minor only")
    metafunc.parametrize("minor", minors, indirect=True, scope="session")


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
def minor(request) -> str:
    """The Kubernetes minor of this run of the test: the default minor, or each of those a ``minors`` mark names."""
    return getattr(request, "param", DEFAULT_MINOR)


@pytest.fixture(scope="session")
def clusters(harness_built, tmp_path_factory):
    """``clusters(minor)``: the shared control plane of that minor (tests/e2e/nodes.yaml), started when first asked
    for and stopped at the end of the session."""
    running: dict[str, Cluster] = {}

    def get(minor: str) -> Cluster:
        if minor not in running:
            directory = tmp_path_factory.mktemp(f"cluster-{minor}") / "c"
            running[minor] = Cluster(directory, nodes=os.path.join(HERE, "nodes.yaml"), minor=minor)
            TIMINGS[f"{minor} ready"] = running[minor].ready_seconds
        return running[minor]

    yield get
    codes = {}
    for minor, c in running.items():
        started = time.monotonic()
        codes[minor] = c.stop()
        TIMINGS[f"{minor} stop"] = time.monotonic() - started
    assert all(code == 0 for code in codes.values()), \
        {m: f"testcluster exited {code} on SIGTERM: {running[m].stderr_text()}" for m, code in codes.items() if code}


@pytest.fixture(scope="session")
def cluster(clusters, minor) -> Cluster:
    """The shared control plane of this run's minor."""
    return clusters(minor)


@pytest.fixture(scope="session")
def all_webhooks(clusters, tmp_path_factory):
    """``all_webhooks(minor, "enforce")``: the local webhook serving that config for that minor's shared cluster,
    started and registered once."""
    tmp: dict[str, Path] = {}
    running: dict[tuple[str, str], Webhook] = {}

    def get(minor: str, name: str) -> Webhook:
        if (minor, name) not in running:
            if minor not in tmp:
                tmp[minor] = tmp_path_factory.mktemp(f"webhooks-{minor}")
            hook = Webhook(clusters(minor), name, CONFIGS[name], tmp[minor])
            running[(minor, name)] = hook.start()
            hook.register()
        return running[(minor, name)]

    yield get
    for hook in running.values():
        hook.stop()


@pytest.fixture(scope="session")
def webhooks(all_webhooks, minor):
    """``webhooks("enforce")``: the local webhook serving that config for this run's minor."""
    return lambda name: all_webhooks(minor, name)


_counter = iter(range(1, 10_000))


@pytest.fixture
def ns(cluster, request):
    """A fresh namespace name for this test (not yet created)."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))[:40].strip("-")
    return f"{base}-{next(_counter)}"


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in TIMINGS.items())
        terminalreporter.write_line(f"e2e harness: {parts}")
    if REPORTED:
        terminalreporter.section("what the end-to-end tests saw")
        for line in REPORTED:
            terminalreporter.write_line(line)
