"""Gang method ``workload`` (rules G16-G18): Kubernetes' own gang scheduling (scheduling.k8s.io/v1alpha2) for
Kubeflow jobs: the configuration it accepts, the label on the templates, the Workload and PodGroup, the Pod's
``spec.schedulingGroup``, and the controller that creates the objects."""
from __future__ import annotations

import base64
import copy
import json

import pytest

from policylib import load_config, mutate
from policylib.errors import ConfigError
from policylib.gang.workload import API_NOT_SERVED, mutate_pod, workload_objects
from policylib.plan import PLANNERS, plan
from tests.controller_driver import sync
from tests.fakeapi import FakeAPI, paged_list
from webhook import review

WORKLOAD = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}
LABEL = "policylib.io/scheduling-group"
API = "scheduling.k8s.io/v1alpha2"


def tfjob(workers: int = 2, uid: str | None = "uid-1", **run_policy) -> dict:
    meta = {"name": "train", "namespace": "ml"}
    if uid:
        meta["uid"] = uid
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta,
           "spec": {"tfReplicaSpecs": {
               "PS": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}},
               "Worker": {"replicas": workers,
                          "template": {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}}}}}
    if run_policy:
        job["spec"]["runPolicy"] = {"schedulingPolicy": run_policy}
    return job


def admitted(job: dict) -> dict:
    return mutate(job, WORKLOAD).object


def pod(labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-worker-0", "namespace": "ml", "labels": labels if labels is not None else
                         {LABEL: "train", "training.kubeflow.org/job-name": "train"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "x"}], **spec}}


def config_error(gang: dict) -> str:
    with pytest.raises(ConfigError) as e:
        load_config({"gang": gang})
    return str(e.value)


# --- configuration (rule G16) -----------------------------------------------------------------------

def test_workload_method_on_kube_scheduler_is_accepted():
    g = load_config(WORKLOAD).gang
    assert (g.method, g.scheduler) == ("workload", "kube-scheduler")


@pytest.mark.parametrize("gang, message", [
    ({"method": "workload"},
     "gang.method and gang.scheduler: gang.method 'workload' is not supported on scheduler 'ack': only the default "
     "kube-scheduler reads scheduling.k8s.io/v1alpha2 PodGroups (supported: kube-scheduler)"),
    ({"method": "podgroup", "scheduler": "kube-scheduler"},
     "gang.method and gang.scheduler: gang.method 'podgroup' is not supported on scheduler 'kube-scheduler': the "
     "default scheduler gangs only pods whose spec.schedulingGroup names a scheduling.k8s.io PodGroup (supported "
     "there: workload)"),
])
def test_workload_method_and_kube_scheduler_go_together(gang, message):
    assert message in config_error(gang)


def test_what_the_native_api_cannot_express_is_refused_all_at_once():
    text = config_error({"method": "workload", "scheduler": "kube-scheduler", "groupByRole": True,
                         "matchPolicy": "once-satisfied", "operatorGang": "volcano"})
    expected = [
        "gang.matchPolicy and gang.method: gang.matchPolicy 'once-satisfied' is not supported with gang.method "
        "workload: a scheduling.k8s.io/v1alpha2 gang policy has only minCount (supported: none)",
        "gang.groupByRole and gang.method: gang.groupByRole true is not supported with gang.method workload: "
        "Kubernetes 1.36 gangs each PodGroup on its own (the GangScheduling plugin's Permit counts one PodGroup's "
        "pods); nothing binds several PodGroups together as a GangGroup (supported: false)",
        "gang.operatorGang and gang.method: gang.operatorGang 'volcano' is not supported with gang.method workload: "
        "the operator's gang mode makes its own PodGroups for its own scheduler (supported: none)",
    ]
    for message in expected:
        assert message in text, text
    assert text.index(expected[0]) < text.index(expected[1]) < text.index(expected[2])


# --- the job: label and objects (rules G16, G18) ----------------------------------------------------

def test_every_template_gets_the_scheduling_group_label_only():
    result = mutate(tfjob(), WORKLOAD)
    assert result.patch == [
        {"op": "add", "path": "/spec/tfReplicaSpecs/PS/template/metadata", "value": {"labels": {LABEL: "train"}}},
        {"op": "add", "path": "/spec/tfReplicaSpecs/Worker/template/metadata", "value": {"labels": {LABEL: "train"}}}]
    assert result.reasons == ["method workload, scheduler kube-scheduler: gang train (min-available 3 of 3 pods: PS "
                              "and Worker)"]
    assert result.warnings == []


def test_the_workload_and_podgroup_carry_the_gang_minimum():
    result = mutate(tfjob(workers=4, minAvailable=3), WORKLOAD)
    gang = {"gang": {"minCount": 3}}
    assert result.extra_objects == [
        {"apiVersion": API, "kind": "Workload", "metadata": {"name": "train", "namespace": "ml"},
         "spec": {"controllerRef": {"apiGroup": "kubeflow.org", "kind": "TFJob", "name": "train"},
                  "podGroupTemplates": [{"name": "gang", "schedulingPolicy": gang}]}},
        {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": "train", "namespace": "ml"},
         "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "gang"}},
                  "schedulingPolicy": gang}}]


def test_second_run_is_a_no_op_and_still_returns_the_objects():
    once = mutate(tfjob(), WORKLOAD)
    again = mutate(once.object, WORKLOAD)
    assert again.patch == []
    assert again.extra_objects == once.extra_objects
    assert again.reasons[0].startswith("gang metadata up to date: method workload")


def test_other_methods_make_no_native_objects():
    job = admitted(tfjob())
    from policylib.gang import plan_gangs, read_job
    j = read_job(job, "ml")
    settings = load_config({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}).gang
    assert workload_objects(j, plan_gangs(j, settings), settings) == []


def test_a_job_with_another_methods_metadata_is_left_alone():
    job = mutate(tfjob(), {"gang": {"method": "labels"}}).object
    result = mutate(job, WORKLOAD)
    assert result.patch == [] and result.extra_objects == []
    assert result.reasons[0].startswith("already carries gang metadata (pod-group.scheduling.sigs.k8s.io/min-available")


def test_a_long_job_name_gives_a_dns_subdomain_gang_name_on_label_and_objects():
    job = tfjob()
    job["metadata"]["name"] = "a" * 70
    result = mutate(job, WORKLOAD)
    names = {o["metadata"]["name"] for o in result.extra_objects}
    label = result.object["spec"]["tfReplicaSpecs"]["PS"]["template"]["metadata"]["labels"][LABEL]
    assert names == {label} and len(label) == 63


# --- the Pod (rule G17) ------------------------------------------------------------------------------

def test_a_labelled_pod_gets_its_scheduling_group():
    p = pod()
    result = mutate_pod(p, WORKLOAD)
    assert result.patch == [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "train"}}]
    assert result.object["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    assert "schedulingGroup" not in p["spec"]       # the input is not changed
    assert result.reasons == [f"spec.schedulingGroup.podGroupName train from {LABEL} (gang method workload)"]
    again = mutate(result.object, WORKLOAD)
    assert again.patch == [] and again.reasons == ["spec.schedulingGroup.podGroupName is train already"]


def test_a_pod_with_another_scheduling_group_keeps_it_with_a_warning():
    result = mutate(pod(schedulingGroup={"podGroupName": "other"}), WORKLOAD)
    assert result.patch == []
    assert result.warnings == [f"spec.schedulingGroup.podGroupName is 'other', not 'train' as {LABEL} says: left as "
                               "it is (the field is the pod's own)"]


@pytest.mark.parametrize("labels, config, warning", [
    ({LABEL: "Train_1"}, WORKLOAD,
     f"{LABEL}=Train_1 is not a PodGroup name (a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
     "characters, '-' or '.', and must start and end with an alphanumeric character): spec.schedulingGroup not "
     "written"),
    ({LABEL: "train"}, {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}},
     f"{LABEL}=train is ignored: gang.method is podgroup, not workload (no PodGroup is made for it)"),
    ({LABEL: "train"}, {"gang": {"enabled": False}},
     f"{LABEL}=train is ignored: gang.method is off, not workload (no PodGroup is made for it)"),
])
def test_a_pod_is_left_unchanged_when_no_podgroup_would_match(labels, config, warning):
    result = mutate(pod(labels), config)
    assert result.patch == [] and result.warnings == [warning]


def test_pods_without_the_label_updates_and_opted_out_pods_are_unchanged():
    assert mutate(pod({"app": "x"}), WORKLOAD).patch == []
    assert mutate(pod({"app": "x"}), WORKLOAD).reasons == []
    update = mutate(pod(), WORKLOAD, old=pod())
    assert update.patch == [] and update.reasons == [
        f"{LABEL}=train: spec.schedulingGroup is immutable: an UPDATE is left unchanged"]
    skipped = mutate(pod({LABEL: "train", "policylib.io/skip": "true"}), WORKLOAD)
    assert skipped.patch == [] and skipped.reasons == ["skipped: policylib.io/skip=true"]


def test_the_webhook_answers_a_pod_review_with_the_patch():
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "ml", "object": pod()}}).encode()
    answer = review.response_review(req := review.parse_review(body), review.decide(req, load_config(WORKLOAD)))
    response = answer["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "train"}}]


# --- the plan (rule G18) ---------------------------------------------------------------------------------

def native(kind: str, min_count: int, owner_uid: str | None = "uid-1") -> dict:
    obj = copy.deepcopy(next(o for o in mutate(tfjob(workers=min_count - 1), WORKLOAD).extra_objects
                             if o["kind"] == kind))
    if owner_uid:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "train",
                                               "uid": owner_uid, "controller": True}]
    return obj


def test_plan_creates_the_workload_then_the_podgroup_owned_by_the_job():
    writes = plan([admitted(tfjob())], WORKLOAD, planners=PLANNERS)
    assert [(w.kind, w.action, w.api_version, w.name) for w in writes] == [
        ("Workload", "create", API, "train"), ("PodGroup", "create", API, "train")]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "train", "uid": "uid-1", "controller": True,
             "blockOwnerDeletion": True}
    assert [w.object["metadata"]["ownerReferences"] for w in writes] == [[owner], [owner]]
    assert writes[0].reasons == ["TFJob ml/train carries gang train and has no Workload (minCount 3)"]


def test_plan_leaves_existing_objects_and_flags_a_changed_minimum():
    job = admitted(tfjob())
    assert plan([job, native("Workload", 3), native("PodGroup", 3)], WORKLOAD, planners=PLANNERS) == []
    writes = plan([admitted(tfjob(workers=3)), native("Workload", 3), native("PodGroup", 3)], WORKLOAD,
                  planners=PLANNERS)
    assert [(w.kind, w.action, w.error) for w in writes] == [("Workload", "none", True), ("PodGroup", "none", True)]
    assert writes[1].reasons == ["PodGroup ml/train has minCount 3 but the gang of TFJob ml/train needs 4: its gang "
                                 "policy is immutable; delete the Workload and PodGroup to have them made again"]
    theirs = [native("Workload", 3, owner_uid="someone"), native("PodGroup", 3, owner_uid="someone")]
    assert plan([admitted(tfjob(workers=3)), *theirs], WORKLOAD, planners=PLANNERS) == []


def test_plan_of_a_job_the_webhook_did_not_admit_is_empty():
    assert plan([tfjob()], WORKLOAD, planners=PLANNERS) == []   # the policy would still change it


# --- the controller (rule G18) ------------------------------------------------------------------------------

def test_workload_method_watches_jobs_workloads_and_native_podgroups():
    from webhook.controller import watched_resources
    assert [(r.group, r.plural) for r in watched_resources(load_config(WORKLOAD))][-2:] == [
        ("scheduling.k8s.io", "workloads"), ("scheduling.k8s.io", "podgroups")]


def controller_for(api: FakeAPI, tmp_path, job: dict):
    from tests.test_controller import Cluster, controller, strip_type
    Cluster(api, [])
    api.route("GET", "/apis/kubeflow.org/v1/tfjobs", paged_list("TFJob", strip_type([job]), 500))
    c = controller(api, tmp_path, WORKLOAD)
    c.elector.try_lead()
    return c


def test_controller_creates_the_workload_and_podgroup_once(tmp_path):
    job = admitted(tfjob())
    job["metadata"]["resourceVersion"] = "8"
    created: dict[str, list] = {"workloads": [], "podgroups": []}
    with FakeAPI() as api:
        for plural, kind in (("workloads", "Workload"), ("podgroups", "PodGroup")):
            api.route("POST", f"/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/{plural}",
                      lambda req, p=plural: (created[p].append(dict(req["body"], metadata=dict(
                          req["body"]["metadata"], resourceVersion="9", uid=f"{p}-uid"))) or (201, created[p][-1])))
            api.route("GET", f"/apis/scheduling.k8s.io/v1alpha2/{plural}",
                      lambda req, p=plural, k=kind: paged_list(k, copy.deepcopy(created[p]), 500)(req))
        c = controller_for(api, tmp_path, job)
        sync(c)
        posts = [(r["path"].rsplit("/", 1)[1], r["body"]) for r in api.requests if r["method"] == "POST"
                 and "scheduling.k8s.io" in r["path"]]
        assert [p for p, _ in posts] == ["workloads", "podgroups"]
        assert posts[1][1]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
        assert posts[1][1]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
        assert [e["reason"] for e in events] == ["WorkloadCreated", "PodGroupCreated"]
        sync(c)   # both listed now: nothing more
        assert len([r for r in api.requests if r["method"] == "POST" and "scheduling.k8s.io" in r["path"]]) == 2


def test_controller_warns_on_the_job_once_when_the_api_is_not_served(tmp_path, caplog):
    job = admitted(tfjob())
    job["metadata"]["resourceVersion"] = "8"
    with FakeAPI() as api:          # nothing serves scheduling.k8s.io/v1alpha2: 404 on list, create, discovery
        c = controller_for(api, tmp_path, job)
        sync(c)
        sync(c)
        posts = [r for r in api.requests if r["method"] == "POST" and "scheduling.k8s.io" in r["path"]]
        assert len(posts) == 4     # Workload and PodGroup, each resync: the gates may have been turned on since
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
    assert len(events) == 1
    event = events[0]
    assert (event["type"], event["reason"]) == ("Warning", "WorkloadAPINotServed")
    assert event["regarding"]["kind"] == "TFJob" and event["regarding"]["name"] == "train"
    assert event["regarding"]["uid"] == "uid-1"
    assert event["note"] == f"TFJob ml/train: no Workload train made: {API_NOT_SERVED}"
    assert "--feature-gates=GangScheduling=true,GenericWorkload=true" in API_NOT_SERVED
    assert "--runtime-config=scheduling.k8s.io/v1alpha2=true" in API_NOT_SERVED
    assert c.metrics.registry.get_sample_value("policylib_controller_errors_total", {"stage": "unserved"}) == 4


# --- check (rule G20) ------------------------------------------------------------------------------------

def test_check_says_when_the_cluster_does_not_serve_the_api():
    from policylib.check import Finding, check_workload_api
    config = load_config(WORKLOAD)
    assert check_workload_api(config, False) == [
        Finding("error", "gang.method", f"{API_NOT_SERVED}: no job's pods would be gang-scheduled")]
    assert check_workload_api(config, True) == check_workload_api(config, None) == []
    assert check_workload_api(load_config(None), False) == []   # another method: the API does not matter


def test_a_pod_without_a_spec_gets_one_and_a_bad_spec_is_left_alone():
    bare = {k: v for k, v in pod().items() if k != "spec"}
    assert mutate(bare, WORKLOAD).patch == [{"op": "add", "path": "/spec",
                                              "value": {"schedulingGroup": {"podGroupName": "train"}}}]
    bad = dict(pod(), spec=["x"])
    result = mutate(bad, WORKLOAD)
    assert result.patch == [] and result.warnings == [
        f"{LABEL}=train: spec is not an object: spec.schedulingGroup not written"]


def test_templates_scheduled_by_another_scheduler_warn():
    job = tfjob()
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "koord-scheduler"
    job["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    result = mutate(job, WORKLOAD)
    assert result.warnings == [
        "gang.method workload: replica templates are scheduled by 'koord-scheduler': only kube-scheduler's "
        "GangScheduling plugin gangs pods by spec.schedulingGroup; unless that is a kube-scheduler profile, those "
        "pods are not gang-scheduled"]
    assert len(result.patch) == 2   # the label is still written: a kube-scheduler profile would read it
    assert mutate(tfjob(), WORKLOAD).warnings == []


@pytest.mark.parametrize("metadata", [["x"], {"labels": ["a"]}, None])
def test_malformed_pod_metadata_is_left_alone(metadata):
    bad = dict(pod(), metadata=metadata)
    result = mutate(bad, WORKLOAD)
    assert (result.patch, result.warnings, result.object) == ([], [], bad)


@pytest.mark.parametrize("gang, outcome", [
    ({"method": "workload", "scheduler": "kube-scheduler"},
     "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"),
    ({"method": "podgroup", "scheduler": "volcano"}, "Volcano would keep its PodGroup Unschedulable and start none of them"),
    ({"method": "podgroup", "scheduler": "scheduler-plugins"}, "it would wait for its scheduleTimeout and never start"),
])
def test_check_says_what_each_scheduler_does_with_a_gang_that_cannot_fit(gang, outcome):
    """Kubernetes' own gang and Volcano's have no timeout of ours (G18, G21): check says what happens instead."""
    from policylib.check import gang_stuck_outcome
    assert gang_stuck_outcome(load_config({"gang": {"enabled": True, **gang}}), None) == outcome
