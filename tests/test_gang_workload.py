"""Gang method ``workload`` (rules G16-G20, G22-G25): Kubernetes' own gang scheduling for Kubeflow jobs, in the
version of the Workload API each cluster serves (``scheduling.k8s.io/v1beta1`` on 1.37, ``v1alpha2`` on 1.36): the
configuration it accepts, the label on the templates, the Workload and PodGroup of each version (checked against
the upstream schemas of both minors), the Pod's ``spec.schedulingGroup`` or its refusal, the topology constraint,
the plan and the controller that follows what the API server serves."""
from __future__ import annotations

import base64
import copy
import json

import kubernetes_validate
import pytest

from policylib import ClusterFacts, load_config, mutate
from policylib.errors import ConfigError, InputError
from policylib.gang.workload import mutate_pod, native_gang, workload_objects
from policylib.plan import PLANNERS, plan
from policylib.workload_api import missing_message, parse_kube_version, removed_by_upgrade, resolve
from tests.controller_driver import deliver, sync
from tests.fakeapi import FakeAPI, paged_list, serve_workload_api
from webhook.admission import review

WORKLOAD = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}
LABEL = "policylib.io/scheduling-group"
#: Each minor, the API version written there and the Kubernetes schemas (kubernetes-validate) of that minor.
MINORS = {36: ("scheduling.k8s.io/v1alpha2", "1.36.0"), 37: ("scheduling.k8s.io/v1beta1", "1.37.0")}
RACKS = {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {"racks": [
    {"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]}
TOPOLOGY = {"gang": {**WORKLOAD["gang"], "topology": "tier-1"}, "volcano": RACKS}
ENABLE_137 = ("start kube-apiserver, kube-scheduler and kube-controller-manager with --feature-gates=GenericWorkload=true "
              "and kube-apiserver with --runtime-config=scheduling.k8s.io/v1beta1=true")
ENABLE_136 = ("start kube-apiserver, kube-scheduler and kube-controller-manager with "
              "--feature-gates=GangScheduling=true,GenericWorkload=true and kube-apiserver with "
              "--runtime-config=scheduling.k8s.io/v1alpha2=true")


def on(minor: int | None = None, served: tuple[str, ...] | None = None) -> ClusterFacts:
    """The facts of a cluster of Kubernetes 1.``minor`` (``--kube-version``), or one whose served versions were read."""
    facts = ClusterFacts()
    facts.workload_api = resolve("auto", served, minor)
    return facts


def tfjob(workers: int = 2, uid: str | None = "uid-1", name: str = "train", **run_policy) -> dict:
    meta = {"name": name, "namespace": "ml"}
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


def admitted(job: dict, config: dict = WORKLOAD) -> dict:
    return mutate(job, config).object


def pod(labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-worker-0", "namespace": "ml", "labels": labels if labels is not None else
                         {LABEL: "train", "training.kubeflow.org/job-name": "train"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "x"}], **spec}}


def config_error(config: dict) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(config)
    return str(e.value)


# --- configuration (rules G16, G22, G25) -----------------------------------------------------------------

def test_workload_method_on_kube_scheduler_is_accepted_with_auto_version_and_no_topology():
    g = load_config(WORKLOAD).gang
    assert (g.method, g.scheduler, g.workloadAPIVersion, g.topology) == ("workload", "kube-scheduler", "auto", "none")


@pytest.mark.parametrize("gang, message", [
    ({"method": "workload"},
     "gang.method and gang.scheduler: gang.method 'workload' is not supported on scheduler 'ack': only the default "
     "kube-scheduler reads scheduling.k8s.io PodGroups (supported: kube-scheduler)"),
    ({"method": "podgroup", "scheduler": "kube-scheduler"},
     "gang.method and gang.scheduler: gang.method 'podgroup' is not supported on scheduler 'kube-scheduler': the "
     "default scheduler gangs only pods whose spec.schedulingGroup names a scheduling.k8s.io PodGroup (supported "
     "there: workload)"),
    ({"method": "workload", "scheduler": "kube-scheduler", "workloadAPIVersion": "v1alpha3"},
     "gang.workloadAPIVersion: must be one of auto, v1beta1, v1alpha2; got 'v1alpha3'"),
])
def test_workload_method_and_kube_scheduler_go_together(gang, message):
    assert message in config_error({"gang": gang})


def test_what_the_native_api_cannot_express_is_refused_all_at_once():
    text = config_error({"gang": {"method": "workload", "scheduler": "kube-scheduler", "groupByRole": True,
                                  "matchPolicy": "once-satisfied", "operatorGang": "volcano"}})
    expected = [
        "gang.matchPolicy and gang.method: gang.matchPolicy 'once-satisfied' is not supported with gang.method "
        "workload: a scheduling.k8s.io gang policy has only minCount (supported: none)",
        "gang.groupByRole and gang.method: gang.groupByRole true is not supported with gang.method workload: "
        "Kubernetes gangs each PodGroup on its own in the versions policylib writes (the GangScheduling plugin's "
        "Permit counts one PodGroup's pods; the CompositePodGroup that binds several is 1.37 alpha, v1alpha3 only) "
        "(supported: false)",
        "gang.operatorGang and gang.method: gang.operatorGang 'volcano' is not supported with gang.method workload: "
        "the operator's gang mode makes its own PodGroups for its own scheduler (supported: none)",
    ]
    for message in expected:
        assert message in text, text
    assert text.index(expected[0]) < text.index(expected[1]) < text.index(expected[2])


@pytest.mark.parametrize("config, message", [
    ({"gang": {"topology": "zone"}},
     "gang.topology and gang.method: gang.topology 'zone' is not supported with gang.method 'labels': the level is "
     "written as the schedulingConstraints of a scheduling.k8s.io PodGroup, method workload only (supported: none)"),
    ({"gang": {**WORKLOAD["gang"], "topology": "tier-1"}},
     'gang.topology: Invalid value: "tier-1": names a tier, but volcano.networkTopologyDiscovery declares no enabled '
     "label topology: list the node labels of the tiers there (top tier first, kubernetes.io/hostname last), or use "
     "zone"),
    ({"gang": {**WORKLOAD["gang"], "topology": "tier-2"}, "volcano": RACKS},
     'gang.topology: Invalid value: "tier-2": volcano.networkTopologyDiscovery\'s label topologies have at most 1 '
     "tier(s)"),
    ({"gang": {**WORKLOAD["gang"], "topology": "example.com/row"}, "volcano": RACKS},
     'gang.topology: Invalid value: "example.com/row": is not a tier of volcano.networkTopologyDiscovery (its tiers\' '
     "node labels: example.com/rack); use none, zone, tier-N or one of those"),
    ({"gang": {**WORKLOAD["gang"], "topology": "rack 1"}},
     "gang.topology: 'rack 1' is not a valid label key"),
])
def test_a_topology_level_the_configuration_does_not_declare_is_refused(config, message):
    assert message in config_error(config)


@pytest.mark.parametrize("topology, key", [("tier-1", "example.com/rack"), ("example.com/rack", "example.com/rack"),
                                           ("zone", "topology.kubernetes.io/zone")])
def test_the_topology_level_names_a_declared_node_label(topology, key):
    config = load_config({"gang": {**WORKLOAD["gang"], "topology": topology}, "volcano": RACKS})
    assert native_gang(config, None).topology.key == key


# --- which version (rule G22) ------------------------------------------------------------------------

@pytest.mark.parametrize("setting, served, minor, version, source", [
    ("auto", None, None, "v1beta1", "Kubernetes 1.37 assumed"),
    ("v1alpha2", None, None, "v1alpha2", "gang.workloadAPIVersion"),
    ("auto", None, 37, "v1beta1", "Kubernetes 1.37"),
    ("auto", None, 36, "v1alpha2", "Kubernetes 1.36"),
    ("auto", None, 38, "v1beta1", "Kubernetes 1.38"),
    ("auto", None, 35, None, "Kubernetes 1.35"),
    ("v1alpha2", None, 37, None, "Kubernetes 1.37"),
    ("auto", ("v1beta1",), 37, "v1beta1", "Kubernetes 1.37: the API server serves scheduling.k8s.io/v1beta1"),
    ("auto", ("v1alpha2", "v1beta1"), None, "v1beta1",
     "the API server serves scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha2"),
    ("v1alpha2", ("v1alpha2", "v1beta1"), None, "v1alpha2",
     "the API server serves scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha2"),
    ("auto", (), 37, None, "Kubernetes 1.37: the API server serves no Workload API"),
])
def test_the_version_written_is_what_the_cluster_serves(setting, served, minor, version, source):
    api = resolve(setting, served, minor)
    assert (api.version, api.source) == (version, source)
    assert api.known is (served is not None or minor is not None)


@pytest.mark.parametrize("text, minor", [("1.36", 36), ("v1.37", 37), ("1.37.2", 37), ("v1.36.3-eks-1", 36)])
def test_kube_version_takes_helms_forms(text, minor):
    assert parse_kube_version(text) == minor


@pytest.mark.parametrize("text", ["1", "2.1", "latest", "1.x"])
def test_a_kube_version_that_is_not_one_is_refused(text):
    with pytest.raises(InputError) as e:
        parse_kube_version(text)
    assert str(e.value) == f"--kube-version {text!r}: not a Kubernetes version like 1.37 or v1.36.3"


@pytest.mark.parametrize("setting, served, minor, message", [
    ("auto", (), 37, "the API server does not serve scheduling.k8s.io/v1beta1 (gang.method workload; Kubernetes "
                     f"1.37): {ENABLE_137}"),
    ("auto", (), 36, "the API server does not serve scheduling.k8s.io/v1alpha2 (gang.method workload; Kubernetes "
                     f"1.36): {ENABLE_136}"),
    ("auto", None, 35, "Kubernetes 1.35 serves no Workload API policylib writes (gang.method workload: "
                       "scheduling.k8s.io/v1alpha2 from 1.36, scheduling.k8s.io/v1beta1 from 1.37): upgrade the cluster, "
                       "or choose another gang.method"),
    ("v1alpha2", ("v1beta1",), 37,
     "Kubernetes 1.37 cannot serve scheduling.k8s.io/v1alpha2 (gang.method workload, gang.workloadAPIVersion "
     "v1alpha2): it serves scheduling.k8s.io/v1beta1: set gang.workloadAPIVersion to auto or v1beta1"),
    ("auto", (), None, "the API server does not serve scheduling.k8s.io/v1beta1 or v1alpha2 (gang.method workload): "
                       f"on Kubernetes 1.37: {ENABLE_137}; on Kubernetes 1.36: {ENABLE_136}"),
])
def test_a_missing_api_is_named_with_the_flags_of_its_minor(setting, served, minor, message):
    assert missing_message(resolve(setting, served, minor)) == message


def test_1_37_has_no_gang_scheduling_gate_and_an_upgrade_removes_v1alpha2():
    """k8s.io/kubernetes v1.37.2 pkg/features: GangScheduling is gone (the gang plugin follows GenericWorkload): the
    1.36 flags would stop 1.37's components from starting."""
    assert "GangScheduling" not in ENABLE_137
    assert removed_by_upgrade(36) == (37, ("v1alpha2",))
    assert removed_by_upgrade(35) == (36, ("v1alpha1",))
    assert removed_by_upgrade(37) is None     # 1.38 is not known to policylib


# --- the job: label and objects (rules G16, G18, G22, G25) --------------------------------------------

def test_every_template_gets_the_scheduling_group_label_only():
    result = mutate(tfjob(), WORKLOAD)
    assert result.patch == [
        {"op": "add", "path": "/spec/tfReplicaSpecs/PS/template/metadata", "value": {"labels": {LABEL: "train"}}},
        {"op": "add", "path": "/spec/tfReplicaSpecs/Worker/template/metadata", "value": {"labels": {LABEL: "train"}}}]
    assert result.reasons == ["method workload, scheduler kube-scheduler: gang train (min-available 3 of 3 pods: PS "
                              "and Worker)",
                              "Workload and PodGroup in scheduling.k8s.io/v1beta1 (Kubernetes 1.37 assumed)"]
    assert result.warnings == []


def expected_objects(minor: int, min_count: int, constraints: dict | None = None) -> list[dict]:
    """The Workload and PodGroup of k8s.io/api's types of each minor (scheduling/v1alpha2 at v0.36.3,
    scheduling/v1beta1 at v0.37.2), written out by hand."""
    api = MINORS[minor][0]
    gang = {"gang": {"minCount": min_count}}
    extra = {"schedulingConstraints": constraints} if constraints else {}
    ref = {"podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "gang"}}} \
        if minor == 36 else {"workloadRef": {"workloadName": "train", "templateName": "gang"}}
    return [
        {"apiVersion": api, "kind": "Workload", "metadata": {"name": "train", "namespace": "ml"},
         "spec": {"controllerRef": {"apiGroup": "kubeflow.org", "kind": "TFJob", "name": "train"},
                  "podGroupTemplates": [{"name": "gang", "schedulingPolicy": gang, **extra}]}},
        {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "train", "namespace": "ml"},
         "spec": {**ref, "schedulingPolicy": gang, **extra}}]


@pytest.mark.parametrize("minor", sorted(MINORS))
def test_the_workload_and_podgroup_carry_the_gang_minimum_in_the_shape_of_each_minor(minor):
    result = mutate(tfjob(workers=4, minAvailable=3), WORKLOAD, facts=on(minor))
    assert result.extra_objects == expected_objects(minor, 3)
    assert result.reasons[-1] == f"Workload and PodGroup in {MINORS[minor][0]} (Kubernetes 1.{minor})"


@pytest.mark.parametrize("minor", sorted(MINORS))
@pytest.mark.parametrize("config", [WORKLOAD, TOPOLOGY], ids=["plain", "topology"])
def test_every_object_emitted_validates_against_its_minors_schema_and_not_the_others(minor, config):
    """kubernetes-validate 1.37.0 (constraints.txt) carries the strict OpenAPI schemas of 1.36 and 1.37: what is
    written for a minor is valid there, and 1.37 has no v1alpha2 (1.36 no v1beta1 Workload API)."""
    objects = mutate(tfjob(), config, facts=on(minor)).extra_objects
    assert [o["kind"] for o in objects] == ["Workload", "PodGroup"]
    other = MINORS[73 - minor][1]
    for obj in objects:
        kubernetes_validate.validate(obj, MINORS[minor][1], strict=True)
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(obj, other, strict=True)


def test_the_1_36_podgroup_shape_under_v1beta1_fails_the_1_37_schema():
    """What the method wrote before it followed the served version: 1.37 refuses it."""
    wrong = expected_objects(36, 3)[1] | {"apiVersion": "scheduling.k8s.io/v1beta1"}
    with pytest.raises(kubernetes_validate.ValidationError) as e:
        kubernetes_validate.validate(wrong, "1.37.0", strict=True)
    assert "'podGroupTemplateRef' was unexpected" in str(e.value)


@pytest.mark.parametrize("minor", sorted(MINORS))
def test_the_topology_level_is_the_podgroups_scheduling_constraint_with_its_reason(minor):
    result = mutate(tfjob(), TOPOLOGY, facts=on(minor))
    assert result.extra_objects == expected_objects(minor, 3, {"topology": [{"key": "example.com/rack"}]})
    assert result.reasons[-1] == (
        "schedulingConstraints.topology [example.com/rack]: the gang's pods all in one example.com/rack domain "
        "(gang.topology tier-1: tier 1 of volcano.networkTopologyDiscovery topology 'racks', node label "
        "example.com/rack; kube-scheduler needs the TopologyAwareWorkloadScheduling gate)")


def test_on_a_cluster_without_a_workload_api_the_job_is_labelled_with_a_warning_and_no_objects():
    result = mutate(tfjob(), WORKLOAD, facts=on(35))
    assert result.extra_objects == [] and len(result.patch) == 2
    assert result.warnings == [
        "gang.method workload: Kubernetes 1.35 has no Workload API policylib writes, so the job's pods are refused "
        "(rule G23): no Workload or PodGroup can be made: " + missing_message(resolve("auto", None, 35))]
    assert resolve("auto", (), 37).missing_in_short() == "scheduling.k8s.io/v1beta1 is not served"
    assert resolve("v1alpha2", ("v1beta1",), 37).missing_in_short() == \
        "Kubernetes 1.37 cannot serve scheduling.k8s.io/v1alpha2"


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
    config = load_config({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}})
    assert native_gang(config, on(37)) is None
    assert workload_objects(j, plan_gangs(j, config.gang), None) == []


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


# --- the Pod (rules G17, G23) ---------------------------------------------------------------------------

def test_a_labelled_pod_gets_its_scheduling_group():
    p = pod()
    result = mutate_pod(p, WORKLOAD)
    assert result.patch == [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "train"}}]
    assert result.object["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    assert "schedulingGroup" not in p["spec"]       # the input is not changed
    assert result.reasons == [f"spec.schedulingGroup.podGroupName train from {LABEL} (gang method workload)"]
    again = mutate(result.object, WORKLOAD)
    assert again.patch == [] and again.reasons == ["spec.schedulingGroup.podGroupName is train already"]


@pytest.mark.parametrize("minor", sorted(MINORS))
def test_a_labelled_pod_gets_its_scheduling_group_where_the_api_is_served(minor):
    served = (MINORS[minor][0].rpartition("/")[2],)
    result = mutate(pod(), WORKLOAD, facts=on(minor, served))
    assert result.patch == [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "train"}}]
    assert result.denial is None


@pytest.mark.parametrize("minor, enable", [(37, ENABLE_137), (36, ENABLE_136)])
def test_a_labelled_pod_is_refused_where_no_podgroup_can_be_made_naming_the_api_and_flags(minor, enable):
    """Rule G23: the API server serves no Workload API policylib writes: the pod is refused (the operator retries
    it), not left to wait for a PodGroup that never comes nor run outside its gang."""
    result = mutate(pod(), WORKLOAD, facts=on(minor, ()))
    version = MINORS[minor][0]
    assert result.patch == [] and result.denial == (
        f"{LABEL}=train: no PodGroup train can be made, so the pod is refused rather than left waiting for one or "
        f"run outside its gang: the API server does not serve {version} (gang.method workload; Kubernetes "
        f"1.{minor}): {enable}")


def test_the_webhook_refuses_the_pod_with_the_message_and_admits_it_once_the_api_is_served():
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "ml", "object": pod()}}).encode()
    req = review.parse_review(body)
    refused = review.response_review(req, review.decide(req, load_config(WORKLOAD), on(37, ())))["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"].startswith(f"policylib: {LABEL}=train: no PodGroup train can be made")
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in refused["status"]["message"]
    admitted_now = review.response_review(req, review.decide(req, load_config(WORKLOAD), on(37, ("v1beta1",))))
    assert admitted_now["response"]["allowed"] is True
    assert json.loads(base64.b64decode(admitted_now["response"]["patch"])) == [
        {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "train"}}]


def test_a_pod_is_not_refused_when_the_cluster_was_not_read():
    """Without discovery (no cluster access, or every read failed) nothing says the API is missing: the field is
    written, as the controller makes the PodGroup if the API is served."""
    assert mutate(pod(), WORKLOAD, facts=ClusterFacts()).denial is None
    assert mutate(pod(), WORKLOAD).patch != []


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
    update = mutate(pod(), WORKLOAD, old=pod(), facts=on(37, ()))
    assert update.patch == [] and update.denial is None and update.reasons == [
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


# --- the plan (rules G19, G22-G25) ---------------------------------------------------------------------------

def native(kind: str, min_count: int, owner_uid: str | None = "uid-1", minor: int = 37, config: dict = WORKLOAD) -> dict:
    obj = copy.deepcopy(next(o for o in mutate(tfjob(workers=min_count - 1), config, facts=on(minor)).extra_objects
                             if o["kind"] == kind))
    if owner_uid:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "train",
                                               "uid": owner_uid, "controller": True}]
    obj["metadata"]["resourceVersion"] = "5"
    return obj


def plan_on(objects: list[dict], minor: int, config: dict = WORKLOAD, served: tuple | None = None) -> list:
    facts = ClusterFacts.from_objects(objects)
    facts.workload_api = resolve("auto", served, minor)
    return plan(objects, config, planners=PLANNERS, facts=facts)


@pytest.mark.parametrize("minor", sorted(MINORS))
def test_plan_creates_the_workload_then_the_podgroup_owned_by_the_job(minor):
    writes = plan_on([admitted(tfjob())], minor)
    api = MINORS[minor][0]
    assert [(w.kind, w.action, w.api_version, w.name) for w in writes] == [
        ("Workload", "create", api, "train"), ("PodGroup", "create", api, "train")]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "train", "uid": "uid-1", "controller": True,
             "blockOwnerDeletion": True}
    assert [w.object["metadata"]["ownerReferences"] for w in writes] == [[owner], [owner]]
    assert writes[0].reasons == ["TFJob ml/train carries gang train and has no Workload (minCount 3)"]


def test_plan_leaves_existing_objects_and_flags_a_changed_minimum_where_it_is_immutable():
    """v1alpha2 (1.36): the gang policy is immutable: an error entry, delete both to have them made again."""
    job = admitted(tfjob())
    assert plan_on([job, native("Workload", 3, minor=36), native("PodGroup", 3, minor=36)], 36) == []
    writes = plan_on([admitted(tfjob(workers=3)), native("Workload", 3, minor=36), native("PodGroup", 3, minor=36)], 36)
    assert [(w.kind, w.action, w.error) for w in writes] == [("Workload", "none", True), ("PodGroup", "none", True)]
    assert writes[1].reasons == ["PodGroup ml/train has minCount 3 but the gang of TFJob ml/train needs 4: its gang "
                                 "policy is immutable; delete the Workload and PodGroup to have them made again"]
    theirs = [native("Workload", 3, owner_uid="someone", minor=36), native("PodGroup", 3, owner_uid="someone", minor=36)]
    assert plan_on([admitted(tfjob(workers=3)), *theirs], 36) == []


def test_plan_patches_a_changed_minimum_where_v1beta1_lets_it_change():
    """v1beta1 (1.37): gang.minCount is mutable (NoSet/NoUnset on gang, no immutable on minCount): both are
    patched, guarded by their resourceVersion."""
    assert plan_on([admitted(tfjob()), native("Workload", 3), native("PodGroup", 3)], 37) == []
    writes = plan_on([admitted(tfjob(workers=3)), native("Workload", 3), native("PodGroup", 3)], 37)
    assert [(w.kind, w.action, w.error, w.api_version, w.resource_version, w.patch) for w in writes] == [
        ("Workload", "patch", False, "scheduling.k8s.io/v1beta1", "5",
         [{"op": "replace", "path": "/spec/podGroupTemplates/0/schedulingPolicy/gang/minCount", "value": 4}]),
        ("PodGroup", "patch", False, "scheduling.k8s.io/v1beta1", "5",
         [{"op": "replace", "path": "/spec/schedulingPolicy/gang/minCount", "value": 4}])]
    assert writes[1].reasons == ["minCount 3 -> 4: the job's minimum changed"]


def test_plan_flags_a_topology_constraint_that_differs_from_the_setting():
    """The constraint is immutable in both versions; an API server without the gate drops it on create."""
    dropped = [native("Workload", 3), native("PodGroup", 3)]        # made without a constraint
    writes = plan_on([admitted(tfjob(), TOPOLOGY), *dropped], 37, TOPOLOGY)
    assert [(w.kind, w.error) for w in writes] == [("Workload", True), ("PodGroup", True)]
    assert writes[1].reasons == [
        "PodGroup ml/train has schedulingConstraints.topology none but the gang needs ['example.com/rack'] "
        "(gang.topology): the constraint is immutable, so delete the Workload and PodGroup to have them made again "
        "(an API server without the TopologyAwareWorkloadScheduling gate drops the constraint on create)"]
    kept = [native("Workload", 3, config=TOPOLOGY), native("PodGroup", 3, config=TOPOLOGY)]
    assert plan_on([admitted(tfjob(), TOPOLOGY), *kept], 37, TOPOLOGY) == []


def test_plan_on_a_cluster_serving_no_version_is_one_entry_naming_the_api():
    writes = plan_on([admitted(tfjob())], 37, served=())
    assert [(w.kind, w.name, w.action, w.error) for w in writes] == [("Workload", "train", "none", True)]
    assert writes[0].reasons == [f"TFJob ml/train carries gang train: no Workload or PodGroup can be made: "
                                 f"{missing_message(resolve('auto', (), 37))}"]


def test_plan_of_a_job_the_webhook_did_not_admit_is_empty():
    assert plan([tfjob()], WORKLOAD, planners=PLANNERS) == []   # the policy would still change it


# --- the controller (rules G18-G20, G22) ------------------------------------------------------------------

def test_workload_method_watches_jobs_and_both_versions_of_workloads_and_podgroups():
    from webhook.controller import watched_resources
    assert [(r.api_version, r.plural) for r in watched_resources(load_config(WORKLOAD))][-4:] == [
        ("scheduling.k8s.io/v1beta1", "workloads"), ("scheduling.k8s.io/v1beta1", "podgroups"),
        ("scheduling.k8s.io/v1alpha2", "workloads"), ("scheduling.k8s.io/v1alpha2", "podgroups")]


def controller_for(api: FakeAPI, tmp_path, *jobs: dict):
    from tests.test_controller import Cluster, controller, strip_type
    Cluster(api, [])
    api.route("GET", "/apis/kubeflow.org/v1/tfjobs", paged_list("TFJob", strip_type(list(jobs)), 500))
    c = controller(api, tmp_path, WORKLOAD)
    c.elector.try_lead()
    return c


class NativeObjects:
    """The Workloads and PodGroups a fake API server stores, by version: created by POST, listed by GET."""

    def __init__(self, api: FakeAPI):
        self.api = api
        self.created: dict[tuple[str, str], list[dict]] = {}

    def serve(self, version: str) -> None:
        for plural, kind in (("workloads", "Workload"), ("podgroups", "PodGroup")):
            store = self.created.setdefault((version, plural), [])
            self.api.route("POST", f"/apis/scheduling.k8s.io/{version}/namespaces/ml/{plural}",
                           lambda req, s=store, p=plural: (s.append(dict(req["body"], metadata=dict(
                               req["body"]["metadata"], resourceVersion="9", uid=f"{p}-uid"))) or (201, s[-1])))
            self.api.route("GET", f"/apis/scheduling.k8s.io/{version}/{plural}",
                           lambda req, s=store, k=kind: paged_list(k, copy.deepcopy(s), 500)(req))

    def remove(self, version: str) -> None:
        for plural in ("workloads", "podgroups"):
            self.api.routes.pop(("POST", f"/apis/scheduling.k8s.io/{version}/namespaces/ml/{plural}"), None)
            self.api.routes.pop(("GET", f"/apis/scheduling.k8s.io/{version}/{plural}"), None)


def native_posts(api: FakeAPI) -> list[tuple[str, str]]:
    return [(r["path"].split("/")[3], r["path"].rsplit("/", 1)[1]) for r in api.requests
            if r["method"] == "POST" and "/apis/scheduling.k8s.io/" in r["path"]]


@pytest.mark.parametrize("minor", sorted(MINORS))
def test_controller_creates_the_workload_and_podgroup_once_in_the_served_version(tmp_path, minor):
    job = admitted(tfjob())
    job["metadata"]["resourceVersion"] = "8"
    version = MINORS[minor][0].rpartition("/")[2]
    with FakeAPI() as api:
        serve_workload_api(api, minor)
        NativeObjects(api).serve(version)
        c = controller_for(api, tmp_path, job)
        sync(c)
        assert native_posts(api) == [(version, "workloads"), (version, "podgroups")]
        posts = [r["body"] for r in api.requests if r["method"] == "POST" and "scheduling.k8s.io" in r["path"]]
        assert posts[1]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
        assert posts[1]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
        assert [e["reason"] for e in events] == ["WorkloadCreated", "PodGroupCreated"]
        sync(c)   # both listed now: nothing more
        assert len(native_posts(api)) == 2


@pytest.mark.parametrize("minor, enable", [(37, ENABLE_137), (36, ENABLE_136)])
def test_controller_warns_on_the_job_once_when_the_api_is_not_served(tmp_path, minor, enable):
    job = admitted(tfjob())
    job["metadata"]["resourceVersion"] = "8"
    with FakeAPI() as api:          # the group lists v1 only: no Workload API
        serve_workload_api(api, minor, enabled=False)
        c = controller_for(api, tmp_path, job)
        sync(c)
        sync(c)
        assert native_posts(api) == []    # discovery says so: nothing is tried
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
    assert len(events) == 1
    event = events[0]
    assert (event["type"], event["reason"]) == ("Warning", "WorkloadAPINotServed")
    assert event["regarding"]["kind"] == "TFJob" and event["regarding"]["name"] == "train"
    assert event["regarding"]["uid"] == "uid-1"
    version = MINORS[minor][0]
    assert event["note"] == (f"TFJob ml/train: no Workload train made: the API server does not serve {version} "
                             f"(gang.method workload; Kubernetes 1.{minor}): {enable}")
    assert c.metrics.registry.get_sample_value("policylib_controller_errors_total", {"stage": "unserved"}) == 2


def test_controller_follows_an_upgrade_from_1_36_to_1_37(tmp_path):
    """Rule G22: on 1.36 the controller writes v1alpha2; the control plane is upgraded (1.37 serves v1beta1, not
    v1alpha2); a job planned before the next resync gets a NotFound for v1alpha2, the controller reads the served
    versions again and makes v1beta1 objects; the resync makes the first job's in v1beta1 too."""
    first = admitted(tfjob())
    first["metadata"]["resourceVersion"] = "8"
    second = admitted(tfjob(name="train2", uid="uid-2"))
    second["metadata"]["resourceVersion"] = "10"
    with FakeAPI() as api:
        serve_workload_api(api, 36)
        stored = NativeObjects(api)
        stored.serve("v1alpha2")
        c = controller_for(api, tmp_path, first)
        sync(c)
        assert native_posts(api) == [("v1alpha2", "workloads"), ("v1alpha2", "podgroups")]
        serve_workload_api(api, 37)             # the upgrade: 1.37 neither serves nor decodes v1alpha2
        stored.remove("v1alpha2")
        stored.serve("v1beta1")
        deliver(c, api, "ADDED", dict(second, apiVersion="kubeflow.org/v1", kind="TFJob"))
        assert native_posts(api)[2:] == [("v1alpha2", "workloads"), ("v1beta1", "workloads"), ("v1beta1", "podgroups")]
        assert [o["metadata"]["name"] for o in stored.created[("v1beta1", "podgroups")]] == ["train2"]
        sync(c)
        assert sorted(o["metadata"]["name"] for o in stored.created[("v1beta1", "podgroups")]) == ["train", "train2"]
        assert stored.created[("v1beta1", "podgroups")][0]["spec"]["workloadRef"] == {
            "workloadName": "train2", "templateName": "gang"}


# --- check (rules G20, G22-G25) ------------------------------------------------------------------------------

def test_check_names_the_version_served_and_what_must_be_on():
    from policylib.check import Finding
    from policylib.check.workload_api import check_workload_api
    config = load_config(WORKLOAD)
    assert check_workload_api(config, resolve("auto", ("v1beta1",), 37)) == [
        Finding("info", "gang.workloadAPIVersion", "scheduling.k8s.io/v1beta1 (Kubernetes 1.37: the API server serves "
                "scheduling.k8s.io/v1beta1): policylib writes its Workloads and PodGroups in scheduling.k8s.io/v1beta1"),
        Finding("info", "gang.method", f"Kubernetes 1.37: {ENABLE_137} (served, so kube-apiserver runs with them); "
                "check cannot see kube-scheduler's flags: without --feature-gates=GenericWorkload=true it schedules "
                "the pods one by one")]
    assert check_workload_api(config, None) == []
    assert check_workload_api(load_config(None), resolve("auto", (), 37)) == []   # another method: the API does not matter


@pytest.mark.parametrize("minor", sorted(MINORS))
def test_check_says_when_the_cluster_does_not_serve_the_api(minor):
    from policylib.check import Finding
    from policylib.check.workload_api import check_workload_api
    config = load_config(WORKLOAD)
    api = resolve("auto", (), minor)
    error = Finding("error", "gang.method", f"{api.missing()}: no job's pods would be gang-scheduled (the webhook "
                                            "refuses them)")
    assert check_workload_api(config, api) == [error]


def test_checks_old_keyword_still_says_the_api_is_not_served():
    from policylib.check import Finding, check
    message = f"{missing_message(resolve('auto', ()))}: no job's pods would be gang-scheduled (the webhook refuses them)"
    assert Finding("error", "gang.method", message) in check(load_config(WORKLOAD), [], [], workload_api_served=False)


def test_check_warns_before_an_upgrade_that_leaves_stored_objects_in_a_removed_version():
    from policylib.check import Finding
    from policylib.check.workload_api import check_workload_api
    stored = {("scheduling.k8s.io/v1alpha2", "workloads"): 2, ("scheduling.k8s.io/v1alpha2", "podgroups"): 3}
    found = check_workload_api(load_config(WORKLOAD), resolve("auto", ("v1alpha2",), 36), stored=stored)
    assert found[-1] == Finding("warning", "gang.workloadAPIVersion", (
        "upgrading to Kubernetes 1.37 removes v1alpha2: 3 podgroups in scheduling.k8s.io/v1alpha2, 2 workloads in "
        "scheduling.k8s.io/v1alpha2 would be left in a version 1.37's API server neither serves nor decodes; delete "
        "them before the upgrade (policylib's controller makes its own again in the version 1.37 serves once it is "
        "enabled; bound pods keep running)"))
    none = check_workload_api(load_config(WORKLOAD), resolve("auto", ("v1alpha2",), 36),
                              stored={("scheduling.k8s.io/v1alpha2", "workloads"): 0})
    assert [f.severity for f in none] == ["info", "info"]


def test_check_says_which_gates_the_topology_needs_and_which_nodes_lack_its_label():
    from policylib.check import Finding
    from policylib.check.workload_api import check_workload_api
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels}}
             for n, labels in (("a", {"example.com/rack": "r1"}), ("b", {}))]
    config = load_config(TOPOLOGY)
    why = "gang.topology tier-1: tier 1 of volcano.networkTopologyDiscovery topology 'racks', node label example.com/rack"
    found = check_workload_api(config, resolve("auto", ("v1beta1",), 37), nodes, topology_kept=False)
    assert found[2:] == [
        Finding("warning", "gang.topology", f"{why}: kube-apiserver drops PodGroup schedulingConstraints (its "
                "TopologyAwareWorkloadScheduling gate is off): start kube-apiserver and kube-scheduler with "
                "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"),
        Finding("warning", "gang.topology", "1 of 2 Nodes have no example.com/rack label, so no gang is placed there: b")]
    kept = check_workload_api(config, resolve("auto", ("v1alpha2",), 36), nodes[:1], topology_kept=True)
    assert kept[2:] == [Finding("info", "gang.topology", f"{why}: every gang's pods in one example.com/rack domain; "
                                "kube-apiserver and kube-scheduler need --feature-gates=GangScheduling=true,"
                                "GenericWorkload=true,TopologyAwareWorkloadScheduling=true (alpha)")]


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
    from policylib.check.gangs import gang_stuck_outcome
    assert gang_stuck_outcome(load_config({"gang": {"enabled": True, **gang}}), None) == outcome


@pytest.mark.parametrize("answer, kept", [
    ((201, "echo"), True),
    ((201, "dropped"), False),
    ((403, {"kind": "Status", "code": 403, "message": "forbidden"}), None),
])
def test_check_clusters_dry_run_tells_whether_the_api_server_keeps_the_topology(tmp_path, answer, kept):
    """Rule G25: a server-side dry-run create of a PodGroup with the constraint and no Workload reference (the API
    server's admission refuses a PodGroup whose Workload does not exist): an API server without
    TopologyAwareWorkloadScheduling answers without it; one that refuses the create tells nothing."""
    import argparse

    from policylib.cli.cluster import topology_kept
    seen = []

    def create(req):
        seen.append(req)
        status, how = answer
        if how == "echo":
            return status, req["body"]
        if how == "dropped":
            return status, dict(req["body"], spec={"schedulingPolicy": req["body"]["spec"]["schedulingPolicy"]})
        return status, how
    with FakeAPI() as api:
        api.route("POST", "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups", create)
        args = argparse.Namespace(context=None, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"), namespace="ml")
        config = load_config({"gang": {**WORKLOAD["gang"], "topology": "zone"}})
        assert topology_kept(args, config, resolve("auto", ("v1beta1",), 37)) is kept
        assert topology_kept(args, load_config(WORKLOAD), resolve("auto", ("v1beta1",), 37)) is None   # no level
    assert [(r["query"], r["body"]["spec"]) for r in seen] == [({"dryRun": "All"}, {
        "schedulingPolicy": {"gang": {"minCount": 1}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]}})]
