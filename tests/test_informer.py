"""The informer pieces on their own: store, reflector (resume, 410 relist), work queue; and the
controller's event-to-key mapping and Lease release."""
from __future__ import annotations

import threading

import pytest

from policylib import load_config
from policylib.shell import kube
from tests.controller_driver import work
from tests.fakeapi import FakeAPI, kubeconfig_for, paged_list, watch_stream
from tests.helpers import deployment, hpa
from webhook.controller import Controller, Options
from webhook.informer import Reflector, Store, is_older

HPAS = "/apis/autoscaling/v2/horizontalpodautoscalers"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/policylib-system/leases/policylib-controller"


def versioned(obj: dict, rv: str, uid: str = "u1") -> dict:
    obj["metadata"].update(resourceVersion=rv, uid=uid)
    return obj


def api_for(fake: FakeAPI, tmp_path) -> kube.Api:
    return kube.Api(kube.api_client(kubeconfig=fake.kubeconfig(tmp_path / "kubeconfig")))


# --- Store ---------------------------------------------------------------------------------------

def test_store_ignores_an_event_older_than_what_it_holds():
    store = Store()
    assert store.apply("ADDED", versioned(hpa("web", 3), "10"))[0]
    applied, held = store.apply("MODIFIED", versioned(hpa("web", 9), "7"))
    assert not applied and held["spec"]["minReplicas"] == 3
    assert store.get("ml", "web")["metadata"]["resourceVersion"] == "10"
    # a stale DELETED does not remove a newer object either
    assert store.apply("DELETED", versioned(hpa("web", 3), "9"))[0] is False
    # a recreated object (another uid) is never "older"
    assert not is_older(versioned(hpa("web", 3), "5", uid="u2"), store.get("ml", "web"))


def test_store_index_follows_changes_of_target():
    store = Store({"target": lambda o: [(o["metadata"]["namespace"], o["spec"]["scaleTargetRef"]["name"])]})
    moved = versioned(hpa("web", 3), "1")
    store.apply("ADDED", moved)
    moved = versioned(hpa("web", 3), "2")
    moved["spec"]["scaleTargetRef"]["name"] = "api"
    store.apply("MODIFIED", moved)
    assert store.by_index("target", ("ml", "web")) == []
    assert [o["metadata"]["resourceVersion"] for o in store.by_index("target", ("ml", "api"))] == ["2"]


def test_replace_synthesizes_deleted_for_what_vanished():
    store = Store()
    store.apply("ADDED", versioned(hpa("gone", 3), "1"))
    store.apply("ADDED", versioned(hpa("kept", 3), "2"))
    store.apply("ADDED", versioned(hpa("changed", 3), "3"))
    events = store.replace([versioned(hpa("kept", 3), "2"), versioned(hpa("changed", 5), "8"),
                            versioned(hpa("new", 1), "9")])
    assert sorted((t, o["metadata"]["name"]) for t, o, _ in events) == [
        ("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "changed")]
    assert sorted(k[1] for k in store.keys()) == ["changed", "kept", "new"]  # noqa: SIM118 -- Store.keys() is a method


# --- Reflector -------------------------------------------------------------------------------------

def run_reflector(reflector: Reflector, until, timeout: float = 10.0) -> None:
    stop = threading.Event()
    t = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    t.start()
    try:
        deadline = threading.Event()
        for _ in range(int(timeout / 0.02)):
            if until():
                return
            deadline.wait(0.02)
        raise AssertionError("reflector did not get there in time")
    finally:
        stop.set()
        t.join(5)


def test_watch_resumes_from_the_last_resource_version_without_listing_again(tmp_path):
    watches = []

    def hpas(req):
        if not req["query"].get("watch"):
            return paged_list("HorizontalPodAutoscaler", [versioned(hpa("web", 3), "90")], 500)(req)
        watches.append(req["query"]["resourceVersion"])
        if len(watches) == 1:
            return 200, watch_stream([("MODIFIED", versioned(hpa("web", 4), "101")),
                                      ("BOOKMARK", {"kind": "HorizontalPodAutoscaler",
                                                    "metadata": {"resourceVersion": "105"}})])
        return 200, b""  # the server ends the watch: nothing new

    with FakeAPI() as fake:
        fake.route("GET", HPAS, hpas)
        seen = []
        r = Reflector(api_for(fake, tmp_path), kube.HPAS, Store(),
                      lambda t, o, old: seen.append((t, o["metadata"]["resourceVersion"])))
        run_reflector(r, lambda: len(watches) >= 3)
        lists = [q for q in fake.requests if q["path"] == HPAS and not q["query"].get("watch")]
    assert len(lists) == 1
    assert watches[:3] == ["100", "105", "105"]  # from the list, then from the bookmark
    assert seen == [("ADDED", "90"), ("MODIFIED", "101")]


def test_gone_relists_and_delivers_the_deletion_missed_in_the_gap(tmp_path):
    state = {"items": [versioned(hpa("web", 3), "90"), versioned(hpa("old", 2), "91", uid="u2")], "watches": 0}

    def hpas(req):
        if not req["query"].get("watch"):
            return paged_list("HorizontalPodAutoscaler", state["items"], 500)(req)
        state["watches"] += 1
        if state["watches"] == 1:
            # the HPA "old" is deleted while no watch runs, and the history is compacted
            state["items"] = [versioned(hpa("web", 3), "90")]
            return 200, watch_stream([("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                                 "message": "too old resource version: 100 (200)"})])
        return 200, b""

    with FakeAPI() as fake:
        fake.route("GET", HPAS, hpas)
        seen = []
        store = Store()
        r = Reflector(api_for(fake, tmp_path), kube.HPAS, store, lambda t, o, old: seen.append((t, o["metadata"]["name"])))
        relists = []
        r.metrics.relist = relists.append
        run_reflector(r, lambda: ("DELETED", "old") in seen)
    assert sorted(k[1] for k in store.keys()) == ["web"]  # noqa: SIM118 -- Store.keys() is a method
    assert relists == ["horizontalpodautoscalers"]
    assert seen[-1] == ("DELETED", "old") and seen.count(("ADDED", "web")) == 1


# --- WorkQueue -------------------------------------------------------------------------------------

# --- controller: events to keys, Lease release ------------------------------------------------------

def controller(fake, tmp_path, config=None, identity="me"):
    return Controller(api_for(fake, tmp_path), Options(load_config(config), identity=identity))


def test_hpa_events_queue_their_targets_old_and_new(tmp_path):
    with FakeAPI() as fake:
        c = controller(fake, tmp_path)
        c.elector.lease_deadline = float("inf")
        moved = hpa("web", 3)
        moved["spec"]["scaleTargetRef"]["name"] = "api"
        c.reconciler.on_event("MODIFIED", moved, hpa("web", 3))
        c.reconciler.on_event("DELETED", hpa("db", 3), hpa("db", 3))
        c.reconciler.on_event("ADDED", deployment("front"))
        keys = []
        while (k := c.reconciler.queue.get(0)) is not None:
            keys.append(k)
    assert keys == [("apps/v1", "Deployment", "ml", "api"), ("apps/v1", "Deployment", "ml", "web"),
                    ("apps/v1", "Deployment", "ml", "db"), ("apps/v1", "Deployment", "ml", "front")]


def test_work_per_event_is_one_plan_of_one_object(tmp_path, monkeypatch):
    """An HPA event plans its target only, however many Deployments are stored."""
    import webhook.controller.reconciler as reconciler_module
    calls = []
    real_plan = reconciler_module.plan
    monkeypatch.setattr(reconciler_module, "plan", lambda objs, *a, **kw: calls.append(len(objs)) or real_plan(objs, *a, **kw))
    deployments = [versioned(deployment(f"d{i}"), str(i + 1), uid=f"u{i}") for i in range(500)]
    for d in deployments:
        d.pop("apiVersion"), d.pop("kind")
    with FakeAPI() as fake:
        fake.route("GET", "/apis/apps/v1/deployments", paged_list("Deployment", deployments, 500))
        fake.route("GET", HPAS, paged_list("HorizontalPodAutoscaler", [], 500))
        c = controller(fake, tmp_path)
        for reflector in c.reflectors:   # every list through the API (the scope's: no configuration, no Namespace)
            reflector.sync()
        assert len(c.stores[kube.DEPLOYMENTS]) == 500 and len(c.reconciler.queue) == 0   # listed by a standby
        c.elector.lease_deadline = float("inf")
        fake.push(HPAS, [("ADDED", versioned(hpa("d7", 4), "900"))])
        [hpas] = [r for r in c.reflectors if r.res == kube.HPAS]
        hpas.watch_once()
        work(c)
    assert calls == [1]


def test_release_gives_the_lease_up_for_the_next_replica(tmp_path):
    held = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "policylib-controller", "namespace": "policylib-system", "resourceVersion": "7"},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15, "leaseTransitions": 2}}
    with FakeAPI() as fake:
        fake.route("POST", LEASE.rsplit("/", 1)[0], lambda req: (201, dict(req["body"], metadata=dict(
            req["body"]["metadata"], resourceVersion="7"))))
        fake.route("PUT", LEASE, lambda req: (200, req["body"]))
        c = controller(fake, tmp_path)
        assert c.elector.try_lead()
        c.elector.release()
        assert not c.leading
        [put] = [r for r in fake.requests if r["method"] == "PUT"]
    assert put["body"]["metadata"]["resourceVersion"] == "7"
    assert (put["body"]["spec"]["holderIdentity"], put["body"]["spec"]["leaseDurationSeconds"]) == ("", 1)
    assert put["body"]["spec"]["leaseTransitions"] == 0
    from webhook.controller import lease_decision
    assert lease_decision(put["body"], "other", 100.0, 100.0) == "acquire"   # at once, not a lease later
    assert held["spec"]["holderIdentity"] == "me"


class LeaseServer:
    """The Lease as the API server keeps it: an update must carry the stored resourceVersion (409 otherwise).
    The first renewal after :attr:`hold_renewal` is set is committed, then answered only once a release arrives
    or :data:`RELEASE_WINDOW` passes: a stop that lands while a renewal's answer is on its way."""

    def __init__(self, fake):
        self.lease, self.version = None, 0
        self.lock = threading.Lock()
        self.hold_renewal, self.renewal_committed, self.release_arrived = (threading.Event() for _ in range(3))
        self.answers: list[tuple[str, int]] = []
        fake.route("GET", LEASE, lambda req: (200, self.lease) if self.lease else (404, {"kind": "Status", "code": 404}))
        fake.route("POST", LEASE.rsplit("/", 1)[0], self.create)
        fake.route("PUT", LEASE, self.update)

    def stored(self, body):
        self.version += 1
        self.lease = dict(body, metadata=dict(body["metadata"], resourceVersion=str(self.version)))
        return self.lease

    def create(self, req):
        with self.lock:
            return 201, self.stored(req["body"])

    def update(self, req):
        holder = req["body"]["spec"]["holderIdentity"]
        if not holder:
            self.release_arrived.set()
        with self.lock:
            if req["body"]["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
                self.answers.append((holder, 409))
                return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
            stored = self.stored(req["body"])
            self.answers.append((holder, 200))
        if holder and self.hold_renewal.is_set() and not self.renewal_committed.is_set():
            self.renewal_committed.set()
            self.release_arrived.wait(RELEASE_WINDOW)
        return 200, stored


#: How long a committed renewal's answer waits for a release that overtakes it (one arrives within
#: milliseconds of the stop when the release does not wait for the round in flight).
RELEASE_WINDOW = 1.0


@pytest.mark.timeout(60)
def test_a_stop_during_a_renewal_gives_the_lease_up_after_it(tmp_path):
    """Stopped (SIGTERM) while the renewal thread's update is committed but not yet answered: the release waits
    for that round, so it carries the renewed resourceVersion and the next replica can lead at once."""
    with FakeAPI() as fake:
        server = LeaseServer(fake)
        c = Controller(api_for(fake, tmp_path), Options(load_config({"controller": {"leaseDurationSeconds": 9}}),
                                                        identity="me"))
        # the held answer ends well within the renewal's deadline, and no second round begins before the stop
        assert c.elector.try_lead() and c.elector.stop_wait == 6.0 and c.elector.round_seconds == 3.0
        server.hold_renewal.set()
        thread = threading.Thread(target=c.run, daemon=True)
        thread.start()
        try:
            assert server.renewal_committed.wait(30), "the renewal thread renewed"
        finally:
            c.stop.set()
            thread.join(30)
    assert not thread.is_alive()
    assert server.answers == [("me", 200), ("", 200)]
    assert (server.lease["spec"]["holderIdentity"], server.lease["spec"]["leaseDurationSeconds"]) == ("", 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("server", ["silent", "refusing"])
def test_a_release_the_server_does_not_answer_is_given_up_and_the_stop_goes_on(tmp_path, monkeypatch, caplog, server):
    """A server that accepts the connection and never answers, or refuses it: the release is logged as not made,
    within its own timeout, and never raises out of the stop."""
    import socket

    import webhook.controller.leaderelection as leaderelection
    monkeypatch.setattr(leaderelection, "RELEASE_SECONDS", 0.3)
    held = socket.create_server(("127.0.0.1", 0))   # listening: connections are queued and never answered
    port = held.getsockname()[1]
    if server == "refusing":
        held.close()
    try:
        api = kube.Api(kube.api_client(kubeconfig=kubeconfig_for(f"http://127.0.0.1:{port}", tmp_path / "kubeconfig")))
        c = Controller(api, Options(load_config(None), identity="me"))
        c.elector.lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "policylib-controller", "namespace": "policylib-system",
                                        "resourceVersion": "7"}, "spec": {"holderIdentity": "me"}}
        c.elector.set_leading(True, float("inf"))
        with caplog.at_level("WARNING", logger=leaderelection.__name__):
            c.elector.release()
    finally:
        held.close()
    assert not c.leading
    assert [r.getMessage() for r in caplog.records if r.name == leaderelection.__name__] == [
        "could not release the Lease"]


@pytest.mark.parametrize("status,error", [(403, kube.Forbidden), (404, kube.NotFound), (409, kube.Conflict),
                                          (410, kube.Gone), (500, kube.ApiError)])
def test_typed_errors(status, error):
    e = kube.error_for(status, {"kind": "Status", "code": status, "reason": "R", "message": "m"})
    assert type(e) is error and (e.status, e.reason, e.message) == (status, "R", "m")
    assert kube.error_for(404, kube.decode(b"404 page not found\n")).message == "404 page not found"


def test_registry_has_every_kind_read_or_written():
    assert kube.resource_for("apps/v1", "Deployment").path("ml", "web") == "/apis/apps/v1/namespaces/ml/deployments/web"
    assert kube.resource_for("scheduling.x-k8s.io/v1alpha1", "PodGroup").plural == "podgroups"
    assert kube.resource_for("v1", "Node").path("ignored", "n1") == "/api/v1/nodes/n1"
    with pytest.raises(ValueError, match="no resource registered for Widget in example.com/v1"):
        kube.resource_for("example.com/v1", "Widget")


def test_no_kubeconfig_says_where_it_looked(tmp_path, monkeypatch):
    import subprocess
    import sys
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    env = {k: v for k, v in __import__("os").environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env.update(KUBECONFIG=str(tmp_path / "missing"), HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "webhook", "controller"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip() == (f"webhook: error: no kubeconfig found at {tmp_path / 'missing'} ($KUBECONFIG, "
                                  "then ~/.kube/config), and not running in a pod")
    run = subprocess.run([sys.executable, "-m", "policylib.cli", "plan", "--cluster"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert run.returncode == 2
    assert f"no kubeconfig found at {tmp_path / 'missing'}" in run.stderr and "Traceback" not in run.stderr
