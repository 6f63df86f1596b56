"""TrainJobs in a cluster (rules T6, T7): the admission server's facts watch Kubeflow Trainer's runtimes where the
cluster serves them and read a missing one through; the webhook answers a TrainJob review with policylib's runtime
patch; the controller makes the TrainJob's PodGroup from its own watch of the runtimes."""
from __future__ import annotations

import copy
import re
import threading

import pytest

import policylib
import webhook
from tests.controller_driver import deliver, sync
from tests.fakeapi import FakeAPI, paged_list
from tests.test_controller import Cluster, controller, strip_type
from tests.test_trainjob import PODGROUP, TORCH, entry, trainjob
from tests.test_webhook_cache import cache_for, wait_for
from tests.webhook_support import patch_of as webhook_patch
from tests.webhook_support import review_of

HPA_PATH = "/apis/autoscaling/v2/horizontalpodautoscalers"
TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
CLUSTER_RUNTIMES = f"{TRAINER_API}/clustertrainingruntimes"
RUNTIMES = f"{TRAINER_API}/trainingruntimes"
#: Trainer v2.3.0's discovery document of trainer.kubeflow.org/v1alpha1 (its three CRDs).
DISCOVERY = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "trainer.kubeflow.org/v1alpha1",
             "resources": [{"name": "clustertrainingruntimes", "namespaced": False, "kind": "ClusterTrainingRuntime"},
                           {"name": "trainingruntimes", "namespaced": True, "kind": "TrainingRuntime"},
                           {"name": "trainjobs", "namespaced": True, "kind": "TrainJob"},
                           {"name": "trainjobs/status", "namespaced": True, "kind": "TrainJob"}]}


def versioned(obj: dict, rv: str, uid: str = "u-1") -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv, "uid": uid,
                                "managedFields": [{"manager": "kubectl"}]}}


def namespaced(name: str = "team-torch", namespace: str = "ml") -> dict:
    runtime = copy.deepcopy(TORCH)
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": name, "namespace": namespace}
    return runtime


class OpenWatch:
    """A list of ``items``, then watches that stay open until the test ends (no event)."""

    def __init__(self, kind: str, items: list[dict]):
        self.kind, self.items, self.done = kind, items, threading.Event()

    def __call__(self, req: dict) -> tuple:
        if req["query"].get("watch") != "true":
            return paged_list(self.kind, self.items, 500)(req)
        self.done.wait(10)
        return 200, b""


@pytest.fixture
def api():
    with FakeAPI() as fake:
        hpas = OpenWatch("HorizontalPodAutoscaler", [])
        fake.route("GET", HPA_PATH, hpas)
        yield fake
        hpas.done.set()


def serve_trainer(api: FakeAPI, cluster: list[dict], namespaced_: list[dict]) -> list[OpenWatch]:
    api.route("GET", TRAINER_API, (200, DISCOVERY))
    watches = [OpenWatch("ClusterTrainingRuntime", cluster), OpenWatch("TrainingRuntime", namespaced_)]
    api.route("GET", CLUSTER_RUNTIMES, watches[0])
    api.route("GET", RUNTIMES, watches[1])
    return watches



def runtime_reads(api, since: int) -> list[str]:
    """The GETs of one runtime by name made since request ``since`` (the read-through's; the watches' own lists and
    re-watches, which run beside the test, are not counted)."""
    return [r["path"] for r in api.requests[since:]
            if r["method"] == "GET" and re.search(r"/(cluster)?trainingruntimes/[^/]+$", r["path"])]

def test_the_facts_cache_watches_the_runtimes_where_trainer_is_served_and_hands_them_to_the_policy(api, tmp_path):
    """Rule T6: discovery finds both runtime resources, each is listed then watched, projected (no managedFields),
    and ``runtime`` answers from the cache without an API call; the status says what is watched."""
    watches = serve_trainer(api, [versioned(TORCH, "5")], [versioned(namespaced(), "6", "u-2")])
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready and cache.runtimes_watch.ready and len(cache.runtimes_watch.reflectors) == 2)
        before = len(api.requests)
        found = cache.runtime("ClusterTrainingRuntime", "ml", "torch-distributed")
        assert found == {**TORCH, "metadata": {"name": "torch-distributed", "resourceVersion": "5", "uid": "u-1"}}
        assert cache.runtime("TrainingRuntime", "ml", "team-torch")["metadata"]["uid"] == "u-2"
        assert runtime_reads(api, before) == []
        assert cache.status()["trainerRuntimes"] == {
            "served": ["trainingruntimes", "clustertrainingruntimes"],
            "watched": ["trainingruntimes", "clustertrainingruntimes"], "synced": True,
            "trainingRuntimes": 1, "clusterTrainingRuntimes": 1, "lastError": None}
        # through the real app: /readyz (loopback) says what is watched
        ready = webhook.create_app(None, facts=cache).test_client().get("/readyz").get_json()
        assert (ready["ready"], ready["trainerRuntimes"]["watched"]) == (True, ["trainingruntimes",
                                                                                "clustertrainingruntimes"])
    finally:
        cache.stop()
        for w in watches:
            w.done.set()


def test_a_cluster_without_trainer_is_ready_and_watches_no_runtime(api, tmp_path):
    """Rule T6: the group not served (404 on its discovery document): no list, no watch, ready as without it."""
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready)
        assert cache.status()["trainerRuntimes"] == {
            "served": [], "watched": [], "synced": True, "trainingRuntimes": 0, "clusterTrainingRuntimes": 0,
            "lastError": None}
        assert not [r for r in api.requests if r["path"] in (RUNTIMES, CLUSTER_RUNTIMES)]
    finally:
        cache.stop()


def test_a_forbidden_runtime_list_leaves_the_webhook_ready_and_says_why(api, tmp_path):
    """Rule T6: Trainer served but the runtimes may not be listed (the webhook's ClusterRole without them): admission
    stays ready for every kind (a TrainJob reads its runtime through), and the status names the error."""
    api.route("GET", TRAINER_API, (200, DISCOVERY))
    forbidden = (403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden",
                       "message": "clustertrainingruntimes.trainer.kubeflow.org is forbidden"})
    api.route("GET", CLUSTER_RUNTIMES, forbidden)
    watch = OpenWatch("TrainingRuntime", [])
    api.route("GET", RUNTIMES, watch)
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.runtimes_watch.status()["lastError"] is not None)
        wait_for(lambda: cache.ready)
        response = webhook.create_app(None, facts=cache).test_client().get("/readyz")
        assert response.status_code == 200
        runtimes = response.get_json()["trainerRuntimes"]
        assert (runtimes["synced"], runtimes["lastError"]) == (
            False, "Forbidden: HTTP 403 Forbidden: clustertrainingruntimes.trainer.kubeflow.org is forbidden")
    finally:
        cache.stop()
        watch.done.set()


def trainjob_review(obj: dict, operation: str = "CREATE", old: dict | None = None) -> dict:
    return review_of(obj, operation=operation, old=old)


def patch_of(answer: dict) -> list:
    return webhook_patch(answer["response"])


def test_the_webhook_answers_a_trainjob_with_its_runtime_patch_from_the_cache(api, tmp_path):
    """Rules T3, T6: a TrainJob CREATE through the real app gets policylib's runtimePatch entry, its runtime read from
    the watch (no API call during the review)."""
    watches = serve_trainer(api, [versioned(TORCH, "5")], [])
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready and cache.runtimes_watch.ready and len(cache.runtimes_watch.reflectors) == 2)
        app = webhook.create_app(PODGROUP, facts=cache, review_log=lambda line: None).test_client()
        before = len(api.requests)
        answer = app.post("/mutate", json=trainjob_review(trainjob())).get_json()
        assert runtime_reads(api, before) == []
        assert answer["response"]["allowed"] is True
        assert patch_of(answer) == [{"op": "add", "path": "/spec/runtimePatches",
                                     "value": [entry({"scheduling.x-k8s.io/pod-group": "llama"})]}]
        metrics = app.get("/metrics").get_data(as_text=True)
        assert 'policylib_webhook_reviews_total{kind="TrainJob",operation="CREATE",outcome="mutated"} 1.0' in metrics
    finally:
        cache.stop()
        for w in watches:
            w.done.set()


def test_a_runtime_the_watch_has_not_brought_is_read_through_once(api, tmp_path):
    """Rule T6: the runtime is not in the cache (created just before the TrainJob): one GET of it, then the entry;
    a runtime the API server does not have either: one GET, the policy's warning, nothing written, allowed; a read
    that fails: the same, counted as an error."""
    watches = serve_trainer(api, [], [])
    fresh = versioned(namespaced("fresh"), "9")
    api.route("GET", f"{TRAINER_API}/namespaces/ml/trainingruntimes/fresh", (200, fresh))
    api.route("GET", f"{TRAINER_API}/namespaces/ml/trainingruntimes/broken",
              (500, {"kind": "Status", "code": 500, "message": "etcd timeout"}))
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready and cache.runtimes_watch.ready and len(cache.runtimes_watch.reflectors) == 2)
        app = webhook.create_app(PODGROUP, facts=cache, review_log=lambda line: None).test_client()

        def review(runtime: str) -> tuple[dict, list[str]]:
            before = len(api.requests)
            answer = app.post("/mutate", json=trainjob_review(trainjob(runtime, kind="TrainingRuntime"))).get_json()
            return answer, [r["path"] for r in api.requests[before:] if r["query"].get("watch") != "true"]

        answer, calls = review("fresh")
        assert calls == [f"{TRAINER_API}/namespaces/ml/trainingruntimes/fresh"]
        assert patch_of(answer) == [{"op": "add", "path": "/spec/runtimePatches",
                                     "value": [entry({"scheduling.x-k8s.io/pod-group": "llama"})]}]

        answer, calls = review("missing")
        assert calls == [f"{TRAINER_API}/namespaces/ml/trainingruntimes/missing"]
        assert answer["response"]["allowed"] is True and patch_of(answer) == []
        assert answer["response"]["warnings"] == [
            "runtime TrainingRuntime missing not found (not in the input or the cluster): no gang written (its "
            "replicated jobs..."]

        answer, calls = review("broken")
        assert calls == [f"{TRAINER_API}/namespaces/ml/trainingruntimes/broken"]
        assert answer["response"]["allowed"] is True and patch_of(answer) == []
        metrics = app.get("/metrics").get_data(as_text=True)
        for result, count in (("found", 1), ("none", 1), ("error", 1)):
            assert f'policylib_webhook_trainer_runtime_reads_total{{result="{result}"}} {count}.0' in metrics
    finally:
        cache.stop()
        for w in watches:
            w.done.set()


def test_an_update_reads_no_runtime(api, tmp_path):
    """Rule T4: an UPDATE keeps the stored entry; it needs no runtime, so none is read."""
    watches = serve_trainer(api, [], [])
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready and cache.runtimes_watch.ready and len(cache.runtimes_watch.reflectors) == 2)
        app = webhook.create_app(PODGROUP, facts=cache, review_log=lambda line: None).test_client()
        stored = trainjob(patches=[{**entry({"scheduling.x-k8s.io/pod-group": "llama"}),
                                    "time": "2026-12-07T10:00:00Z"}])
        review = trainjob_review(trainjob(), operation="UPDATE", old=stored)
        before = len(api.requests)
        answer = app.post("/mutate", json=review).get_json()
        assert runtime_reads(api, before) == []
        assert patch_of(answer) == [{"op": "add", "path": "/spec/runtimePatches", "value": stored["spec"]["runtimePatches"]}]
    finally:
        cache.stop()
        for w in watches:
            w.done.set()



# --- the controller (rule T7) ---------------------------------------------------------------------------------

def admitted(runtime_kind: str | None = None, name: str = "torch-distributed") -> dict:
    """A TrainJob as the API server stores it after the webhook wrote policylib's entry (rule T3)."""
    job = policylib.mutate(trainjob(name, kind=runtime_kind), PODGROUP,
                           facts=policylib.ClusterFacts.from_objects([TORCH, namespaced()])).object
    job["metadata"].update(uid="tj-uid", resourceVersion="8")
    return job


def serve_controller_cluster(api: FakeAPI, trainjobs: list[dict], cluster: list[dict]) -> list[dict]:
    """The controller's cluster: the TrainJobs, the runtimes, and scheduler-plugins' PodGroups (created ones
    listed)."""
    Cluster(api, [])
    api.route("GET", f"{TRAINER_API}/trainjobs", paged_list("TrainJob", strip_type(trainjobs), 500))
    api.route("GET", CLUSTER_RUNTIMES, paged_list("ClusterTrainingRuntime", strip_type(cluster), 500))
    api.route("GET", RUNTIMES, paged_list("TrainingRuntime", [], 500))
    created: list[dict] = []
    api.route("POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups",
              lambda req: (created.append(dict(req["body"], metadata=dict(req["body"]["metadata"],
                                                                           resourceVersion="9"))) or
                           (201, created[-1])))
    api.route("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
              lambda req: paged_list("PodGroup", strip_type(created), 500)(req))
    return created


def podgroup_posts(api: FakeAPI) -> list[dict]:
    return [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/podgroups")]


def test_the_controller_makes_a_trainjobs_podgroup_owned_by_it_from_its_own_watch_of_the_runtime(tmp_path):
    """Rule T7: TrainJobs and runtimes are watched with gang method podgroup; a TrainJob carrying policylib's entry
    gets its PodGroup (named after it, minMember from its runtime), owned by it (its uid); once listed, nothing more."""
    with FakeAPI() as api:
        created = serve_controller_cluster(api, [admitted()], [versioned(TORCH, "5")])
        c = controller(api, tmp_path, PODGROUP)
        assert {r.res.plural for r in c.reflectors} >= {"trainjobs", "trainingruntimes", "clustertrainingruntimes"}
        c.elector.try_lead()
        sync(c)
        assert podgroup_posts(api) == [{
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "llama", "namespace": "ml", "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llama", "uid": "tj-uid",
                "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"scheduleTimeoutSeconds": 10, "minMember": 4}}]
        sync(c)   # the API now lists the created PodGroup: nothing more to do
        assert len(podgroup_posts(api)) == len(created) == 1


def test_a_runtime_the_controllers_watch_brings_late_replans_the_trainjobs_that_name_it(tmp_path):
    """Rule T7: the runtime not listed yet: nothing planned for the TrainJob; its ADDED event queues the TrainJobs
    that name it (the TrainJob store's runtime index), and the PodGroup is made."""
    with FakeAPI() as api:
        serve_controller_cluster(api, [admitted()], [])
        c = controller(api, tmp_path, PODGROUP)
        c.elector.try_lead()
        sync(c)
        assert podgroup_posts(api) == []
        deliver(c, api, "ADDED", versioned(TORCH, "11"))
        assert [(p["metadata"]["name"], p["spec"]["minMember"]) for p in podgroup_posts(api)] == [("llama", 4)]


def test_the_controller_steps_aside_when_the_runtime_makes_its_own_podgroup(tmp_path):
    """Rule T3: a runtime with podGroupPolicy: Trainer makes the PodGroup; the controller makes none (the TrainJob
    carries no entry of policylib's, and one that does is not its to gang)."""
    own = copy.deepcopy(TORCH)
    own["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    with FakeAPI() as api:
        serve_controller_cluster(api, [admitted()], [versioned(own, "5")])
        c = controller(api, tmp_path, PODGROUP)
        c.elector.try_lead()
        sync(c)
        assert podgroup_posts(api) == []


def test_plan_cluster_shows_the_podgroup_of_a_trainjob_from_the_clusters_runtime(tmp_path):
    """Rule T7: ``plan --cluster`` reads TrainJobs and Trainer's runtimes: the TrainJob's PodGroup, owned by it."""
    import io

    import yaml

    from policylib.cli import main
    from tests.test_installed import NAMESPACES, install
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", PODGROUP)}, [], NAMESPACES)
        api.route("GET", f"{TRAINER_API}/trainjobs", paged_list("TrainJob", strip_type([admitted()]), 500))
        api.route("GET", CLUSTER_RUNTIMES, paged_list("ClusterTrainingRuntime", strip_type([versioned(TORCH, "5")]),
                                                      500))
        out, err = io.StringIO(), io.StringIO()
        code = main(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"],
                    io.StringIO(), out, err)
    assert code == 0, err.getvalue()
    assert [(w["kind"], w["namespace"], w["name"], w["action"], w["reasons"]) for w in yaml.safe_load(out.getvalue())] \
        == [("PodGroup", "ml", "llama", "create", ["TrainJob ml/llama carries gang llama and has no PodGroup "
                                                  "(minMember 4)"])]


def test_plan_on_a_cluster_serving_no_workload_api_names_the_api_for_a_trainjob_too():
    """Rules G23, T7: a TrainJob admitted with gang method workload, on a cluster that serves no version of the
    Workload API, gets one error entry naming the API to enable, its gang computed from its runtime."""
    from policylib.plan import PLANNERS, plan
    from policylib.workload_api import missing_message, resolve
    workload = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}
    job = policylib.mutate(trainjob(), workload, facts=policylib.ClusterFacts.from_objects([TORCH])).object
    facts = policylib.ClusterFacts.from_objects([job, TORCH])
    facts.workload_api = resolve("auto", (), 37)
    writes = plan([job, TORCH], workload, planners=PLANNERS, facts=facts)
    assert [(w.kind, w.name, w.action, w.error, w.reasons) for w in writes] == [
        ("Workload", "llama", "none", True, [f"TrainJob ml/llama carries gang llama: no Workload or PodGroup can be "
                                             f"made: {missing_message(resolve('auto', (), 37))}"])]
