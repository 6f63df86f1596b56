"""Rule G21: gang method podgroup on scheduler volcano. policylib writes the annotation
scheduling.k8s.io/group-name on every template and its controller creates the Volcano PodGroup
(scheduling.volcano.sh/v1beta1), for when the operator's own Volcano gang mode is off. The e2e proof
with the real training-operator and Volcano is tests/e2e/test_gang_volcano_operators.py."""
from __future__ import annotations

import copy

import pytest

from policylib import PolicyError, load_config, mutate_kubeflow_job
from policylib.check import check
from policylib.config import ConfigError
from policylib.gang import operator_gang_reason
from policylib.plan import PLANNERS, plan
from policylib.shell import kube
from webhook.controller import watched_resources


def cfg(**gang):
    return load_config({"gang": {"method": "podgroup", "scheduler": "volcano", **gang}})


def job(kind="TFJob", api_version="kubeflow.org/v1", scheduler="volcano", name="train", ns="ml", policy=None,
        priority=None) -> dict:
    key = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[kind]
    types = {"TFJob": ("PS", "Worker"), "PyTorchJob": ("Master", "Worker"), "MPIJob": ("Launcher", "Worker")}[kind]
    spec: dict = {"containers": [{"name": "c", "image": "registry.example/c:1", "resources": {"requests": {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if priority:
        spec["priorityClassName"] = priority
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns, "uid": "u-1"},
           "spec": {key: {t: {"replicas": 1 + i, "template": {"spec": copy.deepcopy(spec)}}
                          for i, t in enumerate(types)}}}
    if policy is not None:
        obj["spec"]["runPolicy"] = {"schedulingPolicy": policy}
    return obj


@pytest.mark.parametrize("kind, api_version, types", [
    ("TFJob", "kubeflow.org/v1", ("PS", "Worker")),
    ("PyTorchJob", "kubeflow.org/v1", ("Master", "Worker")),
    ("MPIJob", "kubeflow.org/v2beta1", ("Launcher", "Worker")),
])
def test_volcano_podgroup_method_annotates_every_template_and_returns_a_volcano_podgroup(kind, api_version, types):
    r = mutate_kubeflow_job(job(kind, api_version), cfg())
    key = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[kind]
    specs = r.object["spec"][key]
    assert [specs[t]["template"]["metadata"] for t in types] == [
        {"annotations": {"scheduling.k8s.io/group-name": "train"}}] * 2
    assert r.extra_objects == [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                "metadata": {"name": "train", "namespace": "ml"}, "spec": {"minMember": 3}}]
    assert r.warnings == [] and r.reasons == [
        "method podgroup, scheduler volcano: gang train (min-available 3 of 3 pods: "
        f"{types[0]} and {types[1]})"]
    assert mutate_kubeflow_job(r.object, cfg()).patch == []   # idempotent


def test_volcano_podgroup_takes_queue_min_available_and_the_shared_priority_class_from_the_job():
    obj = job(policy={"minAvailable": 2, "queue": "research", "scheduleTimeoutSeconds": 30}, priority="high")
    r = mutate_kubeflow_job(obj, cfg())
    assert r.extra_objects[0]["spec"] == {"minMember": 2, "queue": "research", "priorityClassName": "high"}


def test_a_queue_that_is_not_a_string_is_an_error_naming_the_field():
    with pytest.raises(PolicyError) as e:
        mutate_kubeflow_job(job(policy={"queue": 7}), cfg())
    assert "spec.runPolicy.schedulingPolicy.queue" in str(e.value) and "must be a string" in str(e.value)


def test_a_template_not_scheduled_by_volcano_is_annotated_with_a_warning():
    """Volcano's controller and scheduler see only pods whose schedulerName is volcano."""
    obj = job()
    del obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"]
    r = mutate_kubeflow_job(obj, cfg())
    assert r.object["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] == {
        "annotations": {"scheduling.k8s.io/group-name": "train"}}
    assert r.warnings == ["gang.scheduler volcano: the pods of Worker (default-scheduler) are not scheduled by "
                          "'volcano', which alone reads the Volcano PodGroup: they are not held as one gang (set "
                          "spec.schedulerName: volcano in their templates)"]


def test_operator_volcano_mode_still_wins_over_the_volcano_podgroup_method():
    """Rule G15 before G21: with the operator's Volcano gang mode named, policylib writes nothing."""
    r = mutate_kubeflow_job(job(), cfg(operatorGang="volcano"))
    assert (r.patch, r.extra_objects, r.warnings) == ([], [], [])
    assert r.reasons[0].startswith("gang.operatorGang volcano: training-operator gangs the job itself")


def test_volcano_templates_are_ours_only_with_the_volcano_podgroup_method():
    assert operator_gang_reason(job(), cfg().gang) is None
    other = load_config({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}).gang
    assert "gang.scheduler: volcano" in (operator_gang_reason(job(), other) or "")
    mpi = operator_gang_reason(job("MPIJob", "kubeflow.org/v2beta1"), other) or ""
    assert "the MPI Operator run with --gang-scheduling=volcano" in mpi


def test_check_warns_when_nobody_gangs_a_volcano_job_and_is_quiet_when_policylib_does():
    node = {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8", "pods": "110"}}}
    other = load_config({"gang": {"method": "labels", "scheduler": "ack"}})
    assert [(f.severity, f.key) for f in check(other, [node], [job()]) if f.key.startswith("gang")] == [
        ("warning", "gang.operatorGang")]
    assert [f for f in check(cfg(), [node], [job()]) if f.key.startswith("gang")] == []
    small = {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "2", "pods": "110"}}}
    assert [(f.severity, f.key, f.message) for f in check(cfg(), [small], [job()]) if f.key.startswith("gang")] == [
        ("error", "gang.method", "TFJob ml/train: its gang needs 3 pods at once; the Nodes can hold 2 of them now: "
                                 "Volcano would keep its PodGroup Unschedulable and start none of them")]


@pytest.mark.parametrize("gang, message", [
    ({"method": "labels"}, "gang.method 'labels' is not supported on scheduler 'volcano'"),
    ({"method": "koordinator"}, "gang.method 'koordinator' is not supported on scheduler 'volcano'"),
    ({"method": "podgroup", "matchPolicy": "once-satisfied"},
     "gang.matchPolicy 'once-satisfied' is not supported on scheduler 'volcano'"),
    ({"method": "podgroup", "groupByRole": True}, "gang.groupByRole true is not supported on scheduler 'volcano'"),
])
def test_unsupported_combinations_on_volcano_are_configuration_errors(gang, message):
    with pytest.raises(ConfigError) as e:
        load_config({"gang": {"scheduler": "volcano", **gang}})
    assert message in str(e.value)
    assert str(e.value).count("not supported") == 1


def test_the_controller_creates_the_volcano_podgroup_owned_by_the_job_and_watches_volcano_podgroups():
    stored = mutate_kubeflow_job(job(), cfg()).object
    writes = plan([stored], cfg(), planners=PLANNERS)
    assert [(w.kind, w.action, w.api_version) for w in writes] == [
        ("PodGroup", "create", "scheduling.volcano.sh/v1beta1")]
    assert writes[0].object["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "train", "uid": "u-1", "controller": True,
         "blockOwnerDeletion": True}]
    existing = dict(writes[0].object, metadata=dict(writes[0].object["metadata"], resourceVersion="5"))
    assert plan([stored, existing], cfg(), planners=PLANNERS) == []
    assert kube.VOLCANO_PODGROUPS in watched_resources(cfg())
    assert not set(kube.PODGROUPS) & set(watched_resources(cfg()))
    assert kube.resource_for("scheduling.volcano.sh/v1beta1", "PodGroup") == kube.VOLCANO_PODGROUPS


def test_workload_on_volcano_is_one_error_not_two():
    """G16 and G21 both refuse method workload on scheduler volcano: the user reads it once."""
    with pytest.raises(ConfigError) as e:
        load_config({"gang": {"enabled": True, "method": "workload", "scheduler": "volcano"}})
    assert str(e.value).count("gang.method 'workload' is not supported on scheduler 'volcano'") == 1


@pytest.mark.parametrize("gang, extra", [
    ({}, set()),
    ({"enabled": True, "method": "podgroup", "scheduler": "scheduler-plugins"}, set()),
    ({"enabled": True, "method": "podgroup", "scheduler": "volcano"}, {"scheduling.volcano.sh/v1beta1 PodGroup"}),
    ({"enabled": True, "method": "workload", "scheduler": "kube-scheduler"},
     {"scheduling.k8s.io/v1beta1 Workload", "scheduling.k8s.io/v1beta1 PodGroup",
      "scheduling.k8s.io/v1alpha2 Workload", "scheduling.k8s.io/v1alpha2 PodGroup"}),
])
def test_cluster_reads_list_only_the_podgroups_the_settings_use(gang, extra):
    """plan/check --cluster read Volcano's and Kubernetes' own gang objects only when the settings use them: a
    Volcano cluster has a PodGroup per pod, and a namespaced user's role may not cover those groups."""
    from policylib.shell.kube import snapshot_resources
    always = {"apps/v1 Deployment", "apps/v1 StatefulSet", "autoscaling/v2 HorizontalPodAutoscaler", "kubeflow.org/v1 TFJob",
              "kubeflow.org/v1 PyTorchJob", "kubeflow.org/v1 MPIJob", "kubeflow.org/v2beta1 MPIJob",
              "jobset.x-k8s.io/v1alpha2 JobSet", "scheduling.x-k8s.io/v1alpha1 PodGroup",
              "scheduling.sigs.k8s.io/v1alpha1 PodGroup",
              "trainer.kubeflow.org/v1alpha1 TrainJob"}   # (their runtimes: live_runtimes, rule T7)
    listed = {f"{r.api_version} {r.kind}" for r in snapshot_resources(load_config({"gang": gang}))}
    assert listed == always | extra
