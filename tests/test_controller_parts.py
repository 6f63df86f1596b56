"""The controller's parts on their own: the overlay (the informer's store has one writer), the retry
cap, the rollout gate recovered by the worker, resourceVersion comparison, and a reconciler added
beside the built-in one under the same Lease. Driven through the fake API (tests/fakeapi.py)."""
from __future__ import annotations

import threading
import time

import pytest

from policylib import load_config, mutate
from policylib.shell import kube
from tests.controller_driver import deliver, log_entries, sync, work
from tests.fakeapi import FakeAPI, paged_list
from tests.helpers import deployment
from tests.test_controller import DRIFT, Cluster, controller, legacy, record_events
from webhook.controller import DONE, MAX_RETRIES, Controller, Overlay, Result
from webhook.controller.workqueue import ItemExponentialFailureRateLimiter, WorkQueue
from webhook.informer import Store, compare_resource_versions, is_older

KEY = ("apps/v1", "Deployment", "ml", "a")


def wait_for(what, predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --- resourceVersions --------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,order", [
    ("9", "10", -1), ("10", "9", 1), ("10", "10", 0), ("123", "124", -1), ("99", "100", -1),
    ("010", "9", None),        # a leading zero: not of the documented form
    ("0", "1", None),          # zero is never a live version
    ("abc", "1", None), ("", "1", None), (None, "1", None), ("1", 2, None),
])
def test_resource_versions_compare_only_in_the_form_the_api_server_documents(a, b, order):
    assert compare_resource_versions(a, b) == order


def test_an_opaque_resource_version_is_never_older():
    held = {"metadata": {"name": "x", "uid": "u", "resourceVersion": "b-2"}}
    assert not is_older({"metadata": {"name": "x", "uid": "u", "resourceVersion": "a-1"}}, held)
    assert is_older({"metadata": {"name": "x", "uid": "u", "resourceVersion": "9"}},
                    {"metadata": {"name": "x", "uid": "u", "resourceVersion": "10"}})   # "9" < "10": not as strings


# --- the overlay: what the worker wrote, never the store ----------------------------------------------

def test_overlay_is_read_until_the_store_moves_on():
    overlay = Overlay()
    stored = {"metadata": {"name": "a", "resourceVersion": "x7"}}
    written = {"metadata": {"name": "a", "resourceVersion": "q1"}, "spec": {"replicas": 2}}
    overlay.put(KEY, stored, written)
    assert overlay.get(KEY, stored)["metadata"]["resourceVersion"] == "q1"      # the store is behind
    newer = {"metadata": {"name": "a", "resourceVersion": "z9"}}
    assert overlay.get(KEY, newer) is newer and len(overlay) == 0              # moved on: dropped
    overlay.put(KEY, None, written)                                            # created: not stored yet
    assert overlay.get(KEY, None)["metadata"]["resourceVersion"] == "q1"


def test_the_worker_reads_its_own_write_before_the_watch_brings_it_and_never_writes_the_store(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a", rv="5")])
        record_events(api)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
        assert len(cluster.patches()) == 1
        store = c.stores[kube.DEPLOYMENTS]
        assert store.get("ml", "a")["metadata"]["resourceVersion"] == "5"     # the reflector's alone
        assert c.reconciler.facts.get(*KEY)["metadata"]["resourceVersion"] == "6"
        c.reconciler.queue.add(KEY)                                            # planned again before the watch
        work(c)
        assert len(cluster.patches()) == 1                                     # the overlay: nothing to do
        deliver(c, api, "MODIFIED", dict(cluster.deployments["a"], apiVersion="apps/v1", kind="Deployment"))
        assert store.get("ml", "a")["metadata"]["resourceVersion"] == "6" and len(c.reconciler.overlay) == 0
        assert len(cluster.patches()) == 1


def test_a_conflict_rereads_into_the_overlay_not_the_store(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a", rv="5")], conflicts=1)
        record_events(api)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
        assert c.stores[kube.DEPLOYMENTS].get("ml", "a")["metadata"]["resourceVersion"] == "5"
    [first, second] = cluster.patches()
    assert first["body"][0]["value"] == "5" and second["body"][0]["value"] == "6"   # planned on the re-read
    assert c.metrics.conflicts._value.get() == 1


# --- the retry cap -----------------------------------------------------------------------------------

def test_a_key_that_keeps_failing_is_given_up_after_the_cap_and_logged(tmp_path, caplog):
    with FakeAPI() as api:
        Cluster(api, [legacy("a", rv="5")])
        api.route("PATCH", "/apis/apps/v1/namespaces/ml/deployments/a", (500, {"kind": "Status", "code": 500}))
        c = controller(api, tmp_path, DRIFT)
        c.reconciler.queue.rate_limiter = ItemExponentialFailureRateLimiter(0.0, 0.0)   # no waiting here
        c.elector.try_lead()
        with caplog.at_level("ERROR", logger="webhook.controller"):
            sync(c)
        patches = [r for r in api.requests if r["method"] == "PATCH"]
    assert len(patches) == MAX_RETRIES + 1                 # the first try and the retries, then no more
    assert c.metrics.retries._value.get() == MAX_RETRIES and c.metrics.gave_up._value.get() == 1
    assert len(c.reconciler.queue) == 0 and c.reconciler.queue.retries(KEY) == 0
    [entry] = [e for e in log_entries(caplog.records) if e["level"] == "error"]
    assert entry["msg"] == "gave up on key until the next resync" and entry["key"] == list(KEY)
    assert c.registry.get_sample_value("workqueue_retries_total", {"name": "controller"}) == MAX_RETRIES


# --- the rollout gate: the worker's -----------------------------------------------------------------------

def test_the_worker_recovers_the_rollout_gate_not_the_run_loop(tmp_path):
    config = {"hostTopologySpread": {"reconcileDrift": True}, "controller": {"maxConcurrentRollouts": 1}}
    rolling = mutate(deployment("r", replicas=4), load_config(config)).object
    rolling["metadata"].update(resourceVersion="1", generation=3)
    rolling["status"] = {"observedGeneration": 3, "updatedReplicas": 1, "availableReplicas": 3, "replicas": 5}
    with FakeAPI() as api:
        cluster = Cluster(api, [rolling, legacy("a")])
        record_events(api)
        c = controller(api, tmp_path, config)
        c.elector.try_lead()
        for reflector in c.reflectors:
            reflector.sync()
        c.reconciler.started_leading()                 # what the worker does first in a new term ...
        assert c.reconciler.rollouts.rolling() == 0     # ... touches no per-key state
        work(c)
        assert c.reconciler.rollouts.rolling() == 1     # the worker counted the previous leader's rollout
    assert cluster.patches() == []                      # so "a" waits for it
    assert c.metrics.deferred._value.get() == 1


# --- another reconciler under the same Lease ------------------------------------------------------------

class PodCounter:
    """A reconciler as another feature adds one: its own informer (Pods), queue and keys."""

    name = "pods"

    def __init__(self, c: Controller):
        self.store = Store()
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue(self.name)
        self.seen: list[str] = []
        self.reflectors = [c.informer(kube.PODS, lambda t, obj, old: self.seen.append(obj["metadata"]["name"]),
                                      store=self.store)]
        self.terms = 0
        self.reconciled: list[tuple[str, str]] = []

    def started_leading(self) -> None:
        self.terms += 1
        for key in self.store.keys():  # noqa: SIM118 -- Store.keys(), not a dict's
            self.queue.add(key)

    def resync(self) -> None:
        pass

    def reconcile(self, key: tuple[str, str]) -> Result:
        self.reconciled.append(key)
        return DONE


@pytest.mark.timeout(60)
def test_an_added_reconciler_runs_under_the_same_lease(tmp_path):
    pod = {"metadata": {"name": "p1", "namespace": "ml", "resourceVersion": "3"}}
    with FakeAPI() as api:
        Cluster(api, [legacy("a")])
        record_events(api)
        api.route("GET", "/api/v1/pods", paged_list("Pod", [pod], 500))
        c = controller(api, tmp_path)
        pods = PodCounter(c)
        worker = c.add(pods)
        assert pods.reflectors[0] in c.reflectors and worker.needs_leader
        thread = threading.Thread(target=c.run, daemon=True)
        thread.start()
        try:
            wait_for("the reconciler's first term", lambda: pods.terms == 1 and c.leading)
            wait_for("its worker", lambda: pods.reconciled == [("ml", "p1")])
            assert pods.store.get("ml", "p1") is not None and pods.seen[0] == "p1"
            # the built-in reconciler's own worker, beside it: its first sync ends on its own time
            wait_for("the reconciler's first sync", c.reconciler.first_sync.is_set)
        finally:
            c.stop.set()
            thread.join(30)
    assert not thread.is_alive()
    assert not any(t.is_alive() for t in threading.enumerate() if t.name in ("worker-pods", "worker-controller"))


def store_writes(source: str) -> list[str]:
    """Calls that apply or replace a store's content (``<...store...>.apply(...)``/``.replace(...)``)."""
    import ast
    return [ast.unparse(node) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("apply", "replace") and "store" in ast.unparse(node.func.value).lower()]


def test_the_stores_have_one_writer():
    """Nothing in the controller writes to an informer's store: only its reflector does."""
    from pathlib import Path

    import webhook.controller as package
    assert store_writes("self.stores[res].apply('MODIFIED', body)") == ["self.stores[res].apply('MODIFIED', body)"]
    files = sorted(Path(package.__file__).parent.glob("*.py"))
    assert len(files) >= 8
    assert {p.name: store_writes(p.read_text()) for p in files} == {p.name: [] for p in files}
