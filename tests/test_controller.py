"""The controller: leader election, guarded writes, conflicts, the rollout cap, dry-run, watches.

No API server runs here: the real ``kubernetes`` client talks to recorded API
responses served on loopback (tests/fakeapi.py), and the tests assert exactly
which calls the controller made.
"""
import copy
import datetime as dt
import json
import urllib.request

import jsonpatch
import pytest

from policylib import load_config, mutate
from policylib.families import PLANNERS
from policylib.plan import plan
from tests.controller_driver import deliver, log_entries, sync, work
from tests.fakeapi import FakeAPI, paged_list, watch_stream
from tests.helpers import deployment, hpa, legacy_anti_affinity
from tests.test_scope import MANIFEST
from webhook.controller import Controller, Options, RolloutGate, lease_decision, micro_time, rollout_complete, serve_health

NOW = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.timezone.utc)
LEASE = "/apis/coordination.k8s.io/v1/namespaces/policylib-system/leases/policylib-controller"
DEPLOYS = "/apis/apps/v1/deployments"
STATEFULSETS = "/apis/apps/v1/statefulsets"
HPAS = "/apis/autoscaling/v2/horizontalpodautoscalers"
NAMESPACES = "/api/v1/namespaces"
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def lease(holder, renewed, rv="7", duration=15):
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "policylib-controller", "namespace": "policylib-system", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": micro_time(renewed)}}


# --- pure decisions -------------------------------------------------------------------------

@pytest.mark.parametrize("current,observed_ago,expected", [
    (None, 0, "create"),
    (lease("me", NOW), 5, "renew"),
    (lease("me", NOW), 500, "renew"),
    (lease("other", NOW), 5, "wait"),
    (lease("other", NOW - dt.timedelta(hours=1)), 5, "wait"),   # their clock is not ours: we saw it 5 s ago
    (lease("other", NOW), 16, "acquire"),                        # unchanged for longer than its duration
    (lease("", NOW), 0, "acquire"),
])
def test_lease_decision(current, observed_ago, expected):
    assert lease_decision(current, "me", 1000.0, 1000.0 - observed_ago) == expected


def rolled(name, generation=2, observed=2, updated=3, available=3, replicas=3):
    d = deployment(name, replicas=replicas)
    d["metadata"]["generation"] = generation
    d["status"] = {"observedGeneration": observed, "updatedReplicas": updated, "availableReplicas": available,
                   "replicas": replicas}
    return d


@pytest.mark.parametrize("d,done", [
    (rolled("a"), True),
    (rolled("a", observed=1), False),
    (rolled("a", updated=2), False),
    (rolled("a", available=2), False),
])
def test_rollout_complete_like_kubectl_rollout_status(d, done):
    assert rollout_complete(d) is done


def test_rollout_gate_caps_concurrent_rollouts():
    gate = RolloutGate(2)
    assert gate.admit(("ml", "a")) and (gate.started(("ml", "a")) or True)
    gate.started(("ml", "b"))
    assert not gate.admit(("ml", "c")) and gate.admit(("ml", "a"))
    gate.update(rolled("a"))
    assert gate.admit(("ml", "c"))


# --- against recorded API responses -----------------------------------------------------------

def strip_type(objs):
    out = copy.deepcopy(list(objs))
    for o in out:
        o.pop("apiVersion", None), o.pop("kind", None)
    return out


def legacy(name, rv="1"):
    d = deployment(name, replicas=4, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                               "affinity": legacy_anti_affinity({"app": name})})
    d["metadata"]["resourceVersion"] = rv
    return d


def installed(configuration: dict, rv: str = "1") -> dict:
    """``configuration`` as the API server stores it (a resourceVersion)."""
    return dict(copy.deepcopy(configuration), metadata=dict(configuration["metadata"], resourceVersion=rv))


class Cluster:
    """Routes for a cluster with the given Deployments, StatefulSets and HPAs; PATCH applies the JSON patch."""

    def __init__(self, api: FakeAPI, deployments, hpas=(), conflicts=0, namespaces=(), configurations=None,
                 statefulsets=()):
        self.api, self.conflicts = api, conflicts
        self.deployments = {d["metadata"]["name"]: copy.deepcopy(d) for d in deployments}
        self.statefulsets = {s["metadata"]["name"]: copy.deepcopy(s) for s in statefulsets}
        api.route("GET", NAMESPACES, paged_list("Namespace", list(namespaces), 500))
        if configurations is None:   # the shipped configuration, installed: its selectors are the scope
            configurations = [installed(MANIFEST)]
        api.route("GET", WEBHOOK_CONFIGURATIONS, paged_list("MutatingWebhookConfiguration", list(configurations), 500))
        api.route("GET", DEPLOYS, lambda req: paged_list("Deployment", strip_type(self.deployments.values()), 500)(req))
        api.route("GET", STATEFULSETS,
                  lambda req: paged_list("StatefulSet", strip_type(self.statefulsets.values()), 500)(req))
        api.route("GET", HPAS, paged_list("HorizontalPodAutoscaler", strip_type(hpas), 500))
        api.route("GET", LEASE, (404, {"kind": "Status", "code": 404}))
        api.route("POST", LEASE.rsplit("/", 1)[0], lambda req: (201, req["body"]))
        for name in self.deployments:
            path = f"/apis/apps/v1/namespaces/ml/deployments/{name}"
            api.route("PATCH", path, lambda req, n=name: self.patch(n, req))
            api.route("GET", path, lambda req, n=name: (200, self.deployments[n]))
        for name in self.statefulsets:
            path = f"/apis/apps/v1/namespaces/ml/statefulsets/{name}"
            api.route("PATCH", path, lambda req, n=name: self.patch(n, req, self.statefulsets))
            api.route("GET", path, lambda req, n=name: (200, self.statefulsets[n]))

    def patch(self, name, req, objects=None):
        objects = self.deployments if objects is None else objects
        current = objects[name]
        guard, ops = req["body"][0], req["body"][1:]
        if self.conflicts:
            self.conflicts -= 1
            current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        if guard != {"op": "replace", "path": "/metadata/resourceVersion",
                     "value": current["metadata"]["resourceVersion"]}:
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        updated = jsonpatch.apply_patch(current, ops)
        updated["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        objects[name] = updated
        return 200, updated

    def patches(self):
        return [r for r in self.api.requests if r["method"] == "PATCH"]


def controller(api_fake, tmp_path, config=None, **opts):
    from policylib.shell.kube import Api, api_client
    c = Controller(Api(api_client(kubeconfig=api_fake.kubeconfig(tmp_path / "kubeconfig"))),
                   Options(load_config(config), identity="me", **opts), clock=lambda: NOW)
    return c


DRIFT = {"hostTopologySpread": {"reconcileDrift": True}}


def test_first_round_creates_the_lease(tmp_path):
    with FakeAPI() as api:
        Cluster(api, [])
        c = controller(api, tmp_path)
        assert c.elector.try_lead() is True
    post = [r for r in api.requests if r["method"] == "POST"][0]
    assert post["body"]["spec"]["holderIdentity"] == "me"
    assert post["body"]["spec"]["leaseDurationSeconds"] == 15


def test_a_fresh_lease_held_by_another_replica_means_no_writes(tmp_path):  # noqa: D103
    with FakeAPI() as api:
        Cluster(api, [legacy("a")])
        api.route("GET", LEASE, (200, lease("other", NOW - dt.timedelta(seconds=3))))
        c = controller(api, tmp_path, DRIFT)
        assert c.elector.try_lead() is False
        sync(c)
        deliver(c, api, "MODIFIED", legacy("a", rv="2"))
    assert [r["method"] for r in api.requests if r["method"] != "GET"] == []


def test_expired_lease_is_acquired_with_a_guarded_update(tmp_path):
    with FakeAPI() as api:
        Cluster(api, [])
        api.route("GET", LEASE, (200, lease("other", NOW - dt.timedelta(seconds=60), rv="41")))
        api.route("PUT", LEASE, lambda req: (200, req["body"]))
        c = controller(api, tmp_path)
        assert c.elector.try_lead() is False           # first sight of this record: wait a lease duration
        record, seen = c.elector.observed
        c.elector.observed = (record, seen - 16)       # ... 16 s later, still unchanged
        assert c.elector.try_lead() is True
    put = [r for r in api.requests if r["method"] == "PUT"][0]
    assert put["body"]["metadata"]["resourceVersion"] == "41"
    assert put["body"]["spec"]["holderIdentity"] == "me" and put["body"]["spec"]["leaseTransitions"] == 1


def test_losing_the_race_for_the_lease_means_not_leading(tmp_path):
    with FakeAPI() as api:
        Cluster(api, [])
        api.route("GET", LEASE, (200, lease("", NOW)))
        api.route("PUT", LEASE, (409, {"kind": "Status", "code": 409}))
        c = controller(api, tmp_path)
        assert c.elector.try_lead() is False and c.leading is False


def test_writes_stop_when_the_renewal_runs_out_mid_pass(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a"), legacy("b")])
        c = controller(api, tmp_path, DRIFT)
        assert c.elector.try_lead()
        c.elector.lease_deadline = 0.0  # the lease thread could not renew in time
        c.reconciler.enqueue_all("resync")  # keys queued while leading ...
        for reflector in c.reflectors:
            reflector.list()
        c.reconciler.enqueue_all("resync")
        work(c)                 # ... are planned, but nothing is written
    assert cluster.patches() == []


def test_after_failover_rollouts_still_running_count_against_the_cap(tmp_path):
    config = {"hostTopologySpread": {"reconcileDrift": True}, "controller": {"maxConcurrentRollouts": 2}}
    rolling = mutate(deployment("r", replicas=4), load_config(config)).object
    rolling["metadata"].update(resourceVersion="1", generation=3)
    rolling["status"] = {"observedGeneration": 3, "updatedReplicas": 1, "availableReplicas": 3, "replicas": 5}
    with FakeAPI() as api:
        cluster = Cluster(api, [rolling] + [legacy(n) for n in "abc"])
        c = controller(api, tmp_path, config)
        c.elector.try_lead()
        sync(c)
    assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a"]


def test_watch_of_a_resource_the_cluster_does_not_serve_backs_off(tmp_path):
    import threading

    from policylib.shell.kube import KUBEFLOW_JOBS
    from webhook.informer import Reflector, Store
    with FakeAPI() as api:
        Cluster(api, [])
        c = controller(api, tmp_path)
        reflector = Reflector(c.api, KUBEFLOW_JOBS[0], Store(), lambda *a: None, max_backoff=0.5)
        stop = threading.Event()
        t = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
        t.start()
        assert reflector.synced.wait(5) and not reflector.served  # not served counts as synced: nothing to wait for
        stop.wait(1.2)
        stop.set()
        t.join(5)
    lists = [r for r in api.requests if r["path"] == "/apis/kubeflow.org/v1/tfjobs"]
    assert 2 <= len(lists) <= 4  # looked again every 0.5 s, no hot loop


def test_only_podgroup_method_watches_kubeflow_jobs_and_podgroups(tmp_path):
    from webhook.controller import watched_resources
    assert [r.plural for r in watched_resources(load_config(None))] == ["deployments", "horizontalpodautoscalers",
                                                                        "statefulsets"]
    assert [r.plural for r in watched_resources(load_config({"statefulSets": {"enabled": False}}))] == [
        "deployments", "horizontalpodautoscalers"]
    podgroup = [r.plural for r in watched_resources(load_config({"gang": {"method": "podgroup"}}))]
    assert podgroup == ["deployments", "horizontalpodautoscalers", "statefulsets", "tfjobs", "pytorchjobs", "mpijobs",
                        "mpijobs", "jobsets", "trainjobs", "trainingruntimes", "clustertrainingruntimes", "podgroups",
                        "podgroups"]   # MPIJob v1 and v2beta1; Trainer's runtimes (rule T7); x-k8s.io and sigs.k8s.io
    assert len(watched_resources(load_config({"gang": {"method": "podgroup", "scheduler": "volcano"}}))) == 12


def test_compliant_cluster_sees_zero_writes(tmp_path):
    compliant = [mutate(deployment(f"d{i}", replicas=i + 1), load_config(DRIFT)).object for i in range(5)]
    for i, d in enumerate(compliant):
        d["metadata"]["resourceVersion"] = str(i + 1)
    with FakeAPI() as api:
        cluster = Cluster(api, compliant)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
    assert cluster.patches() == []


def test_drift_writes_exactly_the_planned_patches_guarded_by_resource_version(tmp_path):
    objs = [legacy("a", rv="5"), mutate(deployment("ok", replicas=4), load_config(DRIFT)).object]
    objs[1]["metadata"]["resourceVersion"] = "9"
    with FakeAPI() as api:
        cluster = Cluster(api, objs)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
    [patch] = cluster.patches()
    assert patch["path"] == "/apis/apps/v1/namespaces/ml/deployments/a"
    assert patch["headers"]["content-type"] == "application/json-patch+json"
    [expected] = plan([legacy("a", rv="5")], DRIFT)
    assert patch["body"] == [{"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}] + expected.patch
    assert "affinity" not in cluster.deployments["a"]["spec"]["template"]["spec"]


def test_conflict_is_retried_on_fresh_state(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a", rv="5")], conflicts=1)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
        assert c.metrics.conflicts._value.get() == 1
    first, second = cluster.patches()
    assert first["body"][0]["value"] == "5" and second["body"][0]["value"] == "6"
    assert any(r["method"] == "GET" and r["path"].endswith("/deployments/a") for r in api.requests)
    assert "affinity" not in cluster.deployments["a"]["spec"]["template"]["spec"]


def test_conflict_with_an_already_fixed_object_stops(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a", rv="5")], conflicts=1)
        fixed = mutate(deployment("a", replicas=4), load_config(DRIFT)).object
        fixed["metadata"]["resourceVersion"] = "6"
        api.route("GET", "/apis/apps/v1/namespaces/ml/deployments/a", (200, fixed))
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
    assert len(cluster.patches()) == 1  # the conflicted one only: nothing left to write


def test_rollout_cap_holds_back_the_rest_until_a_rollout_completes(tmp_path):
    config = {"hostTopologySpread": {"reconcileDrift": True}, "controller": {"maxConcurrentRollouts": 2}}
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy(n) for n in "abcde"])
        c = controller(api, tmp_path, config)
        c.elector.try_lead()
        sync(c)
        assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a", "b"]
        assert c.metrics.deferred._value.get() == 3
        done = copy.deepcopy(cluster.deployments["a"])
        done["apiVersion"], done["kind"] = "apps/v1", "Deployment"
        done["metadata"]["generation"] = 2
        done["status"] = {"observedGeneration": 2, "updatedReplicas": 4, "availableReplicas": 4, "replicas": 4}
        deliver(c, api, "MODIFIED", done)
    assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a", "b", "c"]


def test_dry_run_logs_and_writes_nothing(tmp_path, caplog):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a")])
        c = controller(api, tmp_path, DRIFT, dry_run=True)
        c.elector.try_lead()
        with caplog.at_level("INFO", logger="webhook.controller"):
            sync(c)
    assert cluster.patches() == []
    entry = [e for e in log_entries(caplog.records) if e["msg"] == "dry-run"][0]
    assert (entry["kind"], entry["object_name"], entry["rollout"]) == ("Deployment", "a", True)


def test_watched_hpa_change_rewrites_its_target(tmp_path):
    enforce = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
    from policylib import ClusterFacts
    written = mutate(deployment("web", replicas=3), load_config(enforce),
                     facts=ClusterFacts.from_objects([hpa("web", 3)])).object
    written["metadata"]["resourceVersion"] = "3"
    moved = hpa("web", 9)
    moved["metadata"]["resourceVersion"] = "50"

    def hpas(req):
        if req["query"].get("watch"):
            return 200, watch_stream([("MODIFIED", strip_type([moved])[0])])
        return paged_list("HorizontalPodAutoscaler", strip_type([hpa("web", 3)]), 500)(req)

    with FakeAPI() as api:
        cluster = Cluster(api, [written])
        api.route("GET", HPAS, hpas)
        c = controller(api, tmp_path, enforce)
        c.elector.try_lead()
        sync(c)
        assert cluster.patches() == []
        from policylib.shell.kube import HPAS as HPA_RES
        [reflector] = [r for r in c.reflectors if r.res == HPA_RES]
        reflector.resource_version = "40"
        reflector.watch_once()
        assert reflector.resource_version == "50"
        work(c)
    [patch] = cluster.patches()
    watch_req = [r for r in api.requests if r["query"].get("watch")][0]
    assert watch_req["query"]["resourceVersion"] == "40"
    host = cluster.deployments["web"]["spec"]["template"]["spec"]["topologySpreadConstraints"][1]
    assert (host["whenUnsatisfiable"], host["maxSkew"]) == ("DoNotSchedule", 3)


def test_readyz_is_503_until_the_first_sync_is_done_and_says_how_far(tmp_path):
    """Rule W8: listed, then planned key by key; ready only when every key queued on leading is planned."""
    with FakeAPI() as api:
        Cluster(api, [legacy(n) for n in ("a", "b", "c")])
        c = controller(api, tmp_path)
        server = serve_health(c, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.server_address[1]}/readyz"

        def readyz():
            try:
                return 200, json.loads(urllib.request.urlopen(url).read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())
        try:
            code, standby = readyz()
            assert (code, standby["leader"], standby["synced"]) == (503, False, False)   # not listed yet
            for reflector in c.reflectors:
                reflector.list()
            code, standby = readyz()
            assert (code, standby["listed"]["deployments"], standby["firstSync"]) == (200, 3, False)
            c.elector.try_lead()
            c.reconciler.enqueue_all("leader")
            code, state = readyz()
            assert (code, state["planned"], state["toPlan"], state["firstSync"]) == (503, 0, 3, False)
            c.worker.process_next(timeout=0)
            assert readyz()[1]["planned"] == 1
            work(c)
            code, state = readyz()
            assert (code, state["planned"], state["toPlan"], state["firstSync"]) == (200, 3, 3, True)
        finally:
            server.shutdown()


def test_the_webhook_configuration_listed_first_does_not_end_the_first_sync(tmp_path):
    """Rule W8 with the scope (W5): a leader that lists the installed webhook configuration before its
    Deployments (its list is one object) is not ready until the Deployments are listed and planned."""
    with FakeAPI() as api:
        Cluster(api, [legacy(n) for n in ("a", "b", "c")], namespaces=[namespace("ml")],
                configurations=[opt_in_configuration()])
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        first = sorted(c.reflectors, key=lambda r: r.res.kind != "MutatingWebhookConfiguration")
        assert first[0].res.kind == "MutatingWebhookConfiguration"
        first[0].list()
        work(c)
        assert not c.reconciler.first_sync.is_set()
        for reflector in first[1:]:
            reflector.list()
        work(c)
        assert not c.reconciler.first_sync.is_set()        # listed: the leader's pass plans every key first
        c.reconciler.enqueue_all("leader")
        assert (c.reconciler.to_plan, c.reconciler.planned) == (3, 0)
        work(c)
        assert c.reconciler.first_sync.is_set() and c.reconciler.planned == 3


def test_health_endpoints(tmp_path):
    with FakeAPI() as api:
        Cluster(api, [])
        c = controller(api, tmp_path)
        server = serve_health(c, "127.0.0.1", 0)
        port = server.server_address[1]
        try:
            assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read() == b"ok"
            c.elector.try_lead()
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz")
            assert e.value.code == 503  # leading but not listed yet
            sync(c)
            assert json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz").read())["synced"] is True
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            assert "policylib_controller_leader 1.0" in metrics
            assert 'policylib_controller_reconciles_total{trigger="leader"} 1.0' in metrics
        finally:
            server.shutdown()


def test_controller_creates_a_missing_podgroup(tmp_path):
    from tests.test_plan import PODGROUP, tfjob
    job = tfjob()
    job["metadata"]["resourceVersion"] = "8"
    with FakeAPI() as api:
        Cluster(api, [])
        api.route("GET", "/apis/kubeflow.org/v1/tfjobs", paged_list("TFJob", strip_type([job]), 500))
        api.route("GET", "/apis/kubeflow.org/v1/pytorchjobs", paged_list("PyTorchJob", [], 500))
        created = []
        api.route("POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups",
                  lambda req: (created.append(dict(req["body"], metadata=dict(req["body"]["metadata"],
                                                                               resourceVersion="9"))) or
                               (201, created[-1])))
        api.route("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
                  lambda req: paged_list("PodGroup", strip_type(created), 500)(req))
        c = controller(api, tmp_path, PODGROUP)
        c.elector.try_lead()
        sync(c)
        posts = [r for r in api.requests if r["method"] == "POST" and r["path"].endswith("/podgroups")]
        assert len(posts) == 1
        assert posts[0]["body"]["spec"]["minMember"] == 5
        assert posts[0]["body"]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        sync(c)  # the API now lists the created PodGroup: nothing more to do
        assert len([r for r in api.requests if r["method"] == "POST" and r["path"].endswith("/podgroups")]) == 1


def test_podgroup_conflict_is_retried_on_fresh_state(tmp_path):
    from tests.test_plan import PODGROUP, podgroup, tfjob
    job = tfjob(workers=6)
    stale = podgroup(5, rv="3")
    calls = []

    def patch(req):
        calls.append(req["body"])
        if len(calls) == 1:
            return 409, {"kind": "Status", "code": 409}
        return 200, dict(stale, metadata=dict(stale["metadata"], resourceVersion="5"), spec={"minMember": 7})

    with FakeAPI() as api:
        Cluster(api, [])
        api.route("GET", "/apis/kubeflow.org/v1/tfjobs", paged_list("TFJob", strip_type([job]), 500))
        api.route("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", paged_list("PodGroup", strip_type([stale]), 500))
        path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups/tf-smoke-gpu"
        api.route("GET", path, (200, strip_type([podgroup(5, rv="4")])[0]))
        api.route("PATCH", path, patch)
        c = controller(api, tmp_path, PODGROUP)
        c.elector.try_lead()
        sync(c)
    assert [b[0]["value"] for b in calls] == ["3", "4"]
    assert calls[1][1:] == [{"op": "replace", "path": "/spec/minMember", "value": 7}]


# --- Events on the objects written ----------------------------------------------------------------

EVENTS = "/apis/events.k8s.io/v1/namespaces/ml/events"


def record_events(api: FakeAPI, status: int = 201) -> list[dict]:
    """Route the events endpoint: each POST's body is kept; answer ``status``."""
    posted: list[dict] = []

    def create(req):
        posted.append(req["body"])
        return (status, req["body"]) if status < 300 else (status, {"kind": "Status", "code": status,
                                                                     "reason": "Forbidden", "message": "no"})
    api.route("POST", EVENTS, create)
    return posted


def with_uid(d: dict, uid: str) -> dict:
    d["metadata"]["uid"] = uid
    return d


def test_each_rewritten_deployment_gets_one_normal_event_with_the_writes_reasons(tmp_path):
    objs = [with_uid(legacy("a", rv="5"), "uid-a"), with_uid(legacy("b", rv="7"), "uid-b"),
            mutate(deployment("ok", replicas=4), load_config(DRIFT)).object]
    objs[2]["metadata"]["resourceVersion"] = "9"
    with FakeAPI() as api:
        cluster = Cluster(api, objs)
        posted = record_events(api)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
    assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a", "b"]
    warnings = [e for e in posted if e["type"] == "Warning"]   # rule S20: a and b carry no record of ours
    assert [(e["regarding"]["name"], e["reason"]) for e in warnings] == [("a", "AdmittedWithoutPolicy"),
                                                                         ("b", "AdmittedWithoutPolicy")]
    posted = [e for e in posted if e["type"] == "Normal"]
    assert [e["regarding"]["name"] for e in posted] == ["a", "b"]   # "ok" is compliant: no write, no event
    [expected] = plan([legacy("a", rv="5")], DRIFT)
    event = posted[0]
    assert event["metadata"]["namespace"] == "ml" and event["metadata"]["name"].startswith("a.")
    assert {k: v for k, v in event.items() if k not in ("metadata", "eventTime")} == {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "namespace": "ml",
                      "uid": "uid-a", "resourceVersion": "6"},   # as the write left it
        "reason": "SpreadRewritten", "note": "; ".join(expected.reasons), "type": "Normal", "action": "Rewrite",
        "reportingController": "policylib.io/controller", "reportingInstance": "me"}
    assert event["eventTime"] == micro_time(NOW) == "2026-11-30T12:00:00.000000Z"
    assert posted[0]["metadata"]["name"] != posted[1]["metadata"]["name"]
    assert c.metrics.errors.labels("event")._value.get() == 0


def test_a_failed_event_is_logged_and_never_fails_or_retries_the_write(tmp_path, caplog):
    with FakeAPI() as api:   # no events route: the plain-text 404 of an API that does not serve events.k8s.io
        cluster = Cluster(api, [legacy("a", rv="5")])
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        with caplog.at_level("WARNING", logger="webhook.controller"):
            sync(c)
            sync(c)
    assert len(cluster.patches()) == 1
    assert [r["path"] for r in api.requests if r["method"] == "POST" and "events" in r["path"]] == [EVENTS]
    assert c.metrics.retries._value.get() == 0 and len(c.reconciler.queue) == 0
    assert c.metrics.errors.labels("event")._value.get() == 1 and c.metrics.errors.labels("write")._value.get() == 0
    assert c.metrics.writes.labels("Deployment", "patch", "true", "false")._value.get() == 1
    [warning] = [e for e in log_entries(caplog.records) if "event" in e["msg"]]
    assert warning["msg"] == "could not record event" and warning["object_name"] == "a"
    assert warning["error"].startswith("HTTP 404: 404 page not found")


def test_a_forbidden_event_does_not_stop_the_next_writes(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy(n) for n in "abc"])
        posted = record_events(api, status=403)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
    assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a", "b", "c"]
    assert len(posted) == 3 and c.metrics.errors.labels("event")._value.get() == 3
    assert c.metrics.retries._value.get() == 0


def test_dry_run_records_no_event(tmp_path):
    with FakeAPI() as api:
        Cluster(api, [legacy("a")])
        posted = record_events(api)
        c = controller(api, tmp_path, DRIFT, dry_run=True)
        c.elector.try_lead()
        sync(c)
    assert posted == []


def test_podgroup_writes_record_podgroup_created_and_updated(tmp_path):
    from tests.test_plan import PODGROUP, podgroup, tfjob
    pg_path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups"
    posted = {}
    for case, job, existing in (("create", tfjob(), []), ("patch", tfjob(workers=6), [podgroup(5)])):
        with FakeAPI() as api:
            Cluster(api, [])
            posted[case] = record_events(api)
            api.route("GET", "/apis/kubeflow.org/v1/tfjobs", paged_list("TFJob", strip_type([job]), 500))
            api.route("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
                      paged_list("PodGroup", strip_type(existing), 500))
            api.route("POST", pg_path, lambda req: (201, dict(req["body"], metadata=dict(
                req["body"]["metadata"], uid="pg-1", resourceVersion="9"))))
            api.route("PATCH", f"{pg_path}/tf-smoke-gpu", lambda req: (200, dict(
                podgroup(7), metadata=dict(podgroup(7)["metadata"], uid="pg-2", resourceVersion="4"))))
            c = controller(api, tmp_path, PODGROUP)
            c.elector.try_lead()
            sync(c)
    [created], [updated] = posted["create"], posted["patch"]
    assert created["reason"] == "PodGroupCreated" and updated["reason"] == "PodGroupUpdated"
    assert created["regarding"] == {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                    "name": "tf-smoke-gpu", "namespace": "ml", "uid": "pg-1", "resourceVersion": "9"}
    assert (updated["regarding"]["uid"], updated["regarding"]["resourceVersion"]) == ("pg-2", "4")
    assert updated["note"].startswith("minMember 5 -> 7")
    assert created["action"] == updated["action"] == "Rewrite"


def test_event_note_is_cut_to_the_apis_1024_bytes():
    from webhook.controller import NOTE_LIMIT, event_note
    assert NOTE_LIMIT == 1024
    assert event_note(["a", "b"]) == "a; b"
    exact = "x" * 1024
    assert event_note([exact]) == exact
    long = event_note(["é" * 600])        # 1200 bytes: cut at a character boundary
    assert len(long.encode()) <= 1024 and long.endswith("...") and long.startswith("é" * 510)


def test_event_for_a_long_name_and_identity_stays_within_the_apis_limits():
    from policylib.plan import Write
    from webhook.controller import event_for
    write = Write("Deployment", "ml", "d" * 253, ["r"], True)
    event = event_for(write, None, "i" * 300, NOW, 0xabc)
    assert len(event["metadata"]["name"]) == 253 and event["metadata"]["name"].endswith(".abc")
    assert len(event["reportingInstance"]) == 128
    assert event["regarding"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d" * 253, "namespace": "ml"}
    cut = event_for(Write("Deployment", "ml", "d" * 248 + "-abc", ["r"], True), None, "me", NOW, 0xabc)
    assert cut["metadata"]["name"] == "d" * 248 + ".abc"   # a DNS label never ends with '-'


# --- the scope: what the installed webhook configuration sends (rules W5, W6) ----------------------

def opt_in_configuration(rv="3") -> dict:
    configuration = copy.deepcopy(MANIFEST)
    configuration["metadata"]["resourceVersion"] = rv
    for hook in configuration["webhooks"]:
        hook["namespaceSelector"]["matchExpressions"].insert(
            0, {"key": "policylib.io/enabled", "operator": "In", "values": ["true"]})
    return configuration


def namespace(name, rv="1", **labels):
    return {"metadata": {"name": name, "resourceVersion": rv,
                         "labels": {"kubernetes.io/metadata.name": name, **labels}}}


def test_outside_the_webhooks_scope_nothing_is_written_or_reported(tmp_path):
    objs = [with_uid(legacy("a"), "uid-a"), with_uid(legacy("b"), "uid-b")]
    with FakeAPI() as api:
        cluster = Cluster(api, objs, namespaces=[namespace("ml")], configurations=[opt_in_configuration()])
        posted = record_events(api)
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
        assert cluster.patches() == [] and posted == []       # ml is not opted in: no write, no Event
        assert c.metrics.unrecorded._value.get() == 0
        # the one configuration, by name: RBAC's resourceNames can then name it
        assert [r["query"].get("fieldSelector") for r in api.requests if r["path"] == WEBHOOK_CONFIGURATIONS] == \
            ["metadata.name=policylib-webhook"]
        # the namespace opts in: its Deployments are planned again and written
        deliver(c, api, "MODIFIED", dict(namespace("ml", rv="2", **{"policylib.io/enabled": "true"}),
                                  apiVersion="v1", kind="Namespace"))
        assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a", "b"]
        assert sorted(e["reason"] for e in posted) == ["AdmittedWithoutPolicy", "AdmittedWithoutPolicy",
                                                       "SpreadRewritten", "SpreadRewritten"]


def test_a_change_of_the_webhook_configuration_replans_every_key(tmp_path):
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a")], namespaces=[namespace("ml")], configurations=[opt_in_configuration()])
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
        assert cluster.patches() == []
        # back to opt-out: ml is in scope
        deliver(c, api, "MODIFIED", dict(copy.deepcopy(MANIFEST), metadata={"name": "policylib-webhook",
                                                                     "resourceVersion": "4"}))
        assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a"]


def test_a_change_the_scope_does_not_read_replans_nothing(tmp_path):
    """The leader's certificate rotation writes the caBundle of the configuration the scope is read from:
    no key is queued for that; a selector change queues every key."""
    with FakeAPI() as api:
        Cluster(api, [legacy("a")], namespaces=[namespace("ml")], configurations=[opt_in_configuration()])
        c = controller(api, tmp_path, DRIFT)
        c.elector.try_lead()
        sync(c)
        replans = c.metrics.reconciles.labels("scope")
        before = replans._value.get()
        rotated = opt_in_configuration(rv="4")
        for hook in rotated["webhooks"]:
            hook["clientConfig"]["caBundle"] = "bmV3IENB"
            hook["timeoutSeconds"] = 7
        deliver(c, api, "MODIFIED", rotated)
        assert replans._value.get() == before
        deliver(c, api, "MODIFIED", dict(copy.deepcopy(MANIFEST), metadata={"name": "policylib-webhook", "resourceVersion": "5"}))
        assert replans._value.get() == before + 1


def test_the_controllers_own_namespace_is_never_in_scope(tmp_path):
    with FakeAPI() as api:   # the manifests' selectors, which ml matches: never ml
        cluster = Cluster(api, [with_uid(legacy("a"), "uid-a")])
        lease_path = LEASE.replace("/policylib-system/", "/ml/")
        api.route("GET", lease_path, (404, {"kind": "Status", "code": 404}))
        api.route("POST", lease_path.rsplit("/", 1)[0], lambda req: (201, req["body"]))
        posted = record_events(api)
        c = controller(api, tmp_path, DRIFT, namespace="ml")
        assert c.elector.try_lead()
        sync(c)
        assert c.reconciler.scopes.scope().excluded_namespaces == {"ml", "policylib-system"}
    assert cluster.patches() == [] and posted == []


def test_memory_gauges_read_the_process_and_its_cgroup_limit(tmp_path):
    from prometheus_client import generate_latest

    from webhook.controller import ControllerMetrics, memory_limit_bytes
    text = generate_latest(ControllerMetrics().registry).decode()
    [resident] = [line for line in text.splitlines() if line.startswith("policylib_controller_memory_bytes ")]
    assert float(resident.split()[1]) > 10 * 2 ** 20      # a Python process holds more than 10 MiB
    # the same quantity as prometheus_client's process collector, read a moment apart in one scrape
    [process] = [line for line in text.splitlines() if line.startswith("process_resident_memory_bytes ")]
    assert abs(float(process.split()[1]) - float(resident.split()[1])) < 0.2 * float(process.split()[1])
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")
    assert memory_limit_bytes((str(v2), str(v1))) == 0.0       # cgroup v2 without a limit
    v2.write_text("536870912\n")
    assert memory_limit_bytes((str(v2), str(v1))) == 536870912.0
    v1.write_text("9223372036854771712\n")                    # cgroup v1's "no limit"
    assert memory_limit_bytes((str(tmp_path / "none"), str(v1))) == 0.0
    assert memory_limit_bytes((str(tmp_path / "none"),)) == 0.0


# --- the scope fails closed (rule W5) ---------------------------------------------------------------------

OWN_POD = "policylib-controller-6b7f9c5d4-x2x7q"
OWN_EVENTS = "/apis/events.k8s.io/v1/namespaces/policylib-system/events"


def own_deployment() -> dict:
    """The controller's own Deployment (its Pod OWN_POD), in the release's namespace."""
    d = deployment("policylib-controller", namespace="policylib-system", replicas=2)
    d["metadata"].update(uid="uid-own", resourceVersion="4")
    return d


def scope_report(c, api, posted_own) -> tuple:
    """What the controller says of its scope: the two gauges, /readyz's detail, the Events on its own Deployment."""
    from prometheus_client import generate_latest
    text = generate_latest(c.registry).decode()
    gauges = tuple(float(line.split()[1]) for line in text.splitlines()
                   if line.startswith(("policylib_controller_scope_closed ", "policylib_controller_scope_skipped_webhooks ")))
    return gauges, c.sync_progress()["scope"], [(e["reason"], e["type"], e["regarding"]["name"], e["note"])
                                                for e in posted_own]


def test_without_its_webhook_configuration_the_controller_acts_on_nothing_says_why_and_resumes(tmp_path, caplog):
    """Rule W5 fails closed: with no policylib-webhook configuration (every family off, a renamed one, an
    overlay without it) nothing is written or noticed, and the controller says why: a warning in its log,
    policylib_controller_scope_closed 1, /readyz's scope detail, a Warning Event ScopeClosed on its own
    Deployment. The configuration appears (its watch): every key is planned and written, ScopeRestored; it
    goes again: closed again, and a change of a Deployment writes nothing."""
    closed = "no MutatingWebhookConfiguration policylib-webhook is installed"
    with FakeAPI() as api:
        cluster = Cluster(api, [with_uid(legacy("a"), "uid-a"), own_deployment()], configurations=[])
        posted = record_events(api)
        posted_own = []
        api.route("POST", OWN_EVENTS, lambda req: (posted_own.append(req["body"]), (201, req["body"]))[1])
        c = controller(api, tmp_path, DRIFT, pod=OWN_POD)
        c.elector.try_lead()
        with caplog.at_level("INFO", logger="webhook.controller.reconciler"):
            sync(c)
        assert cluster.patches() == [] and posted == []            # no write, no AdmittedWithoutPolicy
        assert c.metrics.unrecorded._value.get() == 0
        assert scope_report(c, api, posted_own) == (
            (1.0, 0.0), {"acting": False, "source": closed, "notes": [f"nothing is acted on: {closed}"]},
            [("ScopeClosed", "Warning", "policylib-controller", f"nothing is acted on: {closed}")])
        [line] = [e for e in log_entries(caplog.records) if e["msg"] == "scope"]
        assert (line["level"].lower(), line["acting"], line["notes"]) == ("warning", False, [f"nothing is acted on: {closed}"])
        sync(c)                                                       # a resync: said once per change, not again
        assert len(posted_own) == 1 and cluster.patches() == []

        shipped = dict(installed(MANIFEST, rv="6"), apiVersion="admissionregistration.k8s.io/v1",
                       kind="MutatingWebhookConfiguration")
        deliver(c, api, "ADDED", shipped)                            # installed: acts at once, says so
        assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a"]
        assert sorted(e["reason"] for e in posted) == ["AdmittedWithoutPolicy", "SpreadRewritten"]
        gauges, detail, events = scope_report(c, api, posted_own)
        assert (gauges, detail["acting"], detail["notes"]) == ((0.0, 0.0), True, [])
        assert events[1] == ("ScopeRestored", "Normal", "policylib-controller",
                             "acting on the objects MutatingWebhookConfiguration policylib-webhook sends to the webhook")

        deliver(c, api, "DELETED", shipped)                          # gone again: closed again
        assert scope_report(c, api, posted_own)[0] == (1.0, 0.0)
        assert [e[0] for e in scope_report(c, api, posted_own)[2]] == ["ScopeClosed", "ScopeRestored", "ScopeClosed"]
        written = len(cluster.patches())
        changed = copy.deepcopy(cluster.deployments["a"])
        changed["spec"]["template"]["spec"]["affinity"] = legacy_anti_affinity({"app": "a"})
        changed["metadata"]["resourceVersion"] = "9"
        deliver(c, api, "MODIFIED", changed)
        assert len(cluster.patches()) == written


def test_match_conditions_keep_the_controller_off_that_webhooks_objects_and_say_so(tmp_path):
    """Rule W5: a webhook with matchConditions (CEL the API server evaluates per request) adds nothing to
    the scope: its Deployments are not written; the gauge counts it and the Event names it. Without them
    (a change of the configuration, by its watch) the Deployments are written."""
    conditional = installed(MANIFEST, rv="3")
    conditional["webhooks"][0]["matchConditions"] = [{"name": "not-dry-run", "expression": "!request.dryRun"}]
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a"), own_deployment()], configurations=[conditional])
        record_events(api)
        posted_own = []
        api.route("POST", OWN_EVENTS, lambda req: (posted_own.append(req["body"]), (201, req["body"]))[1])
        c = controller(api, tmp_path, DRIFT, pod=OWN_POD)
        c.elector.try_lead()
        sync(c)
        assert cluster.patches() == []
        gauges, detail, events = scope_report(c, api, posted_own)
        assert (gauges, detail["acting"]) == ((0.0, 1.0), True)
        [(reason, kind, name, note)] = events
        assert (reason, kind, name) == ("ScopeClosed", "Warning", "policylib-controller")
        assert note.startswith("the objects of MutatingWebhookConfiguration policylib-webhook: deployments.policylib.io "
                               "are not acted on: matchConditions not-dry-run (CEL the API server evaluates per request")
        deliver(c, api, "MODIFIED", dict(installed(MANIFEST, rv="4"), apiVersion="admissionregistration.k8s.io/v1",
                                         kind="MutatingWebhookConfiguration"))
        assert [p["path"].rsplit("/", 1)[1] for p in cluster.patches()] == ["a"]
        assert scope_report(c, api, posted_own)[0] == (0.0, 0.0)


def test_the_controllers_own_deployment_is_found_by_its_pods_name(tmp_path):
    """The Pod ``<Deployment>-<ReplicaSet hash>-<5 characters>``: the longest Deployment of its namespace that
    names it; none when no Deployment fits (a controller run outside a Deployment logs, records no Event)."""
    other = deployment("policylib", namespace="policylib-system")
    with FakeAPI() as api:
        Cluster(api, [own_deployment(), other, deployment("web", namespace="ml")], configurations=[])
        for pod, found in ((OWN_POD, "policylib-controller"), ("policylib-6b7f9c5d4-x2x7q", "policylib"),
                           ("policylib-controller", None), ("web-6b7f9c5d4-x2x7q", None), ("local-run", None), ("", None)):
            c = controller(api, tmp_path, pod=pod)
            for r in c.reflectors:
                r.list()
            own = c.reconciler.scopes.own_deployment()
            assert ((own or {}).get("metadata") or {}).get("name") == found, pod
            if own:
                assert own["metadata"]["namespace"] == "policylib-system"


# --- StatefulSets (rule A4) -------------------------------------------------------------------

def legacy_statefulset(name, rv="1", replicas=4):
    s = legacy(name, rv)
    s["kind"] = "StatefulSet"
    s["spec"].update(replicas=replicas, serviceName=name)
    return s


def test_event_keys_send_a_statefulset_and_an_hpa_of_one_to_the_statefulsets_key():
    from webhook.controller.core import event_keys
    sts = legacy_statefulset("db")
    assert event_keys("ADDED", sts, None) == [("apps/v1", "StatefulSet", "ml", "db")]
    moved = hpa("db", 5)
    moved["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    assert event_keys("MODIFIED", moved, hpa("db", 3)) == [("apps/v1", "StatefulSet", "ml", "db"),
                                                           ("apps/v1", "Deployment", "ml", "db")]


@pytest.mark.parametrize("status,done", [
    ({"observedGeneration": 2, "readyReplicas": 4, "currentRevision": "db-1", "updateRevision": "db-1"}, True),
    ({"observedGeneration": 1, "readyReplicas": 4, "currentRevision": "db-1", "updateRevision": "db-1"}, False),
    ({"observedGeneration": 2, "readyReplicas": 3, "currentRevision": "db-1", "updateRevision": "db-1"}, False),
    ({"observedGeneration": 2, "readyReplicas": 4, "currentRevision": "db-0", "updateRevision": "db-1"}, False),
])
def test_a_statefulset_rollout_is_complete_as_kubectl_rollout_status_says(status, done):
    sts = legacy_statefulset("db")
    sts["metadata"]["generation"] = 2
    sts["status"] = status
    assert rollout_complete(sts) is done
    sts["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    sts["status"] = dict(status, updatedReplicas=2, currentRevision="db-0")
    assert rollout_complete(sts) is (status["observedGeneration"] == 2 and status["readyReplicas"] == 4)
    sts["spec"]["updateStrategy"] = {"type": "Recreate"}   # every pod re-created: done as RollingUpdate is
    sts["status"] = status
    assert rollout_complete(sts) is done
    sts["spec"]["updateStrategy"] = {"type": "OnDelete"}
    assert rollout_complete(sts) is True


def test_drift_rewrites_a_legacy_statefulset_guarded_and_counts_it_against_the_rollout_cap(tmp_path):
    config = {"hostTopologySpread": {"reconcileDrift": True}, "controller": {"maxConcurrentRollouts": 1}}
    with FakeAPI() as api:
        cluster = Cluster(api, [legacy("a", rv="3")], statefulsets=[legacy_statefulset("a", rv="5")])
        c = controller(api, tmp_path, config)
        c.elector.try_lead()
        sync(c)
        [patch] = cluster.patches()   # the cap is one rollout: the second waits (a Deployment and a StatefulSet named a)
        assert c.metrics.deferred._value.get() == 1
        first = patch["path"].rsplit("/", 2)[1]
        done = copy.deepcopy(cluster.deployments["a"] if first == "deployments" else cluster.statefulsets["a"])
        done["apiVersion"], done["kind"] = "apps/v1", "Deployment" if first == "deployments" else "StatefulSet"
        done["metadata"]["generation"] = 2
        done["status"] = {"observedGeneration": 2, "updatedReplicas": 4, "availableReplicas": 4, "replicas": 4,
                          "readyReplicas": 4, "currentRevision": "r2", "updateRevision": "r2"}
        deliver(c, api, "MODIFIED", done)
    sts_patch = next(p for p in cluster.patches() if "/statefulsets/" in p["path"])
    assert sts_patch["path"] == "/apis/apps/v1/namespaces/ml/statefulsets/a"
    [expected] = plan([legacy_statefulset("a", rv="5")], config, PLANNERS)
    assert (expected.kind, expected.rollout) == ("StatefulSet", True)
    assert sts_patch["body"] == [{"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}] + expected.patch
    stored = cluster.statefulsets["a"]["spec"]["template"]["spec"]
    assert "affinity" not in stored and [c["topologyKey"] for c in stored["topologySpreadConstraints"]] == [
        "topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert len(cluster.patches()) == 2


def test_a_statefulset_that_finished_rolling_frees_its_rollout_slot(tmp_path):
    config = {"hostTopologySpread": {"reconcileDrift": True}, "controller": {"maxConcurrentRollouts": 1}}
    with FakeAPI() as api:
        cluster = Cluster(api, [], statefulsets=[legacy_statefulset(n, rv="5") for n in "ab"])
        c = controller(api, tmp_path, config)
        c.elector.try_lead()
        sync(c)
        [patch] = cluster.patches()   # the cap is one rollout: the other StatefulSet waits
        first = patch["path"].rsplit("/", 1)[1]
        assert (c.reconciler.rollouts.rolling(), c.metrics.deferred._value.get()) == (1, 1)
        done = copy.deepcopy(cluster.statefulsets[first])
        done["apiVersion"], done["kind"] = "apps/v1", "StatefulSet"
        done["metadata"]["generation"] = 2
        done["status"] = {"observedGeneration": 2, "readyReplicas": 4, "replicas": 4, "currentRevision": "r2",
                          "updateRevision": "r2"}
        deliver(c, api, "MODIFIED", done)
    assert sorted(p["path"].rsplit("/", 1)[1] for p in cluster.patches()) == ["a", "b"]
    assert c.reconciler.rollouts.rolling() == 1   # the first freed its slot; the second holds it


def test_statefulsets_off_are_neither_watched_nor_written(tmp_path):
    config = {"hostTopologySpread": {"reconcileDrift": True}, "statefulSets": {"enabled": False}}
    with FakeAPI() as api:
        cluster = Cluster(api, [], statefulsets=[legacy_statefulset("a", rv="5")])
        c = controller(api, tmp_path, config)
        c.elector.try_lead()
        sync(c)
    assert cluster.patches() == []
    assert not any(r["path"] == STATEFULSETS for r in api.requests)
