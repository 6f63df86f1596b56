"""Rule G15: a job whose gang its operator manages (training-operator --gang-scheduler-name, the MPI
Operator --gang-scheduling) gets no gang metadata and no second PodGroup, and check says so. The e2e
proofs with the real operators are in tests/e2e/test_gang_operators.py."""
from __future__ import annotations

import copy

import pytest

from policylib import PolicyError, load_config, mutate_kubeflow_job
from policylib.check import check
from policylib.config import ConfigError
from policylib.gang import operator_gang_reason, template_scheduler_names
from policylib.plan import PLANNERS, plan


def cfg(**gang):
    return load_config({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins", **gang}})


def job(kind="TFJob", api_version="kubeflow.org/v1", scheduler=None, name="train", ns="ml") -> dict:
    key = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[kind]
    types = {"TFJob": ("PS", "Worker"), "PyTorchJob": ("Master", "Worker"), "MPIJob": ("Launcher", "Worker")}[kind]
    spec = {"containers": [{"name": "c", "image": "registry.example/c:1", "resources": {"requests": {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns, "uid": "u-1"},
            "spec": {key: {t: {"replicas": 1 + i, "template": {"spec": copy.deepcopy(spec)}}
                           for i, t in enumerate(types)}}}


@pytest.mark.parametrize("mode, api_version, key", [
    ("scheduler-plugins", "scheduling.x-k8s.io/v1alpha1", "label scheduling.x-k8s.io/pod-group=train"),
    ("volcano", "scheduling.volcano.sh/v1beta1", "annotation scheduling.k8s.io/group-name=train"),
])
def test_operator_gang_mode_leaves_the_job_alone_and_names_the_operators_podgroup(mode, api_version, key):
    obj = job()
    r = mutate_kubeflow_job(obj, cfg(operatorGang=mode))
    assert (r.patch, r.object is obj, r.warnings, r.extra_objects) == ([], True, [], [])
    assert r.reasons == [f"gang.operatorGang {mode}: training-operator gangs the job itself (PodGroup {api_version} "
                         f"train, owned by the job, and the {key} on every pod); policylib writes no gang metadata "
                         "and creates no second PodGroup"]


def test_mpijob_v2beta1_names_the_mpi_operator():
    r = mutate_kubeflow_job(job("MPIJob", "kubeflow.org/v2beta1"), cfg(operatorGang="scheduler-plugins"))
    assert r.patch == [] and r.reasons[0].startswith("gang.operatorGang scheduler-plugins: the MPI Operator gangs")


def test_without_the_setting_the_podgroup_method_writes_as_before():
    r = mutate_kubeflow_job(job(), cfg())
    assert [pg["metadata"]["name"] for pg in r.extra_objects] == ["train"] and r.patch


def test_a_template_scheduled_by_volcano_is_detected_from_the_job():
    """Volcano gangs only pods of a Volcano PodGroup: metadata for scheduler-plugins would be read by nobody,
    so none is written, and the warning names the two settings that gang the job (operator or policylib)."""
    obj = job(scheduler="volcano")
    r = mutate_kubeflow_job(obj, cfg())
    assert (r.patch, r.extra_objects, r.reasons) == ([], [], [])
    assert r.warnings == [
        "the pods are scheduled by 'volcano': policylib writes no gang metadata and no PodGroup for them. Only "
        "training-operator run with --gang-scheduler-name=volcano gangs them (PodGroup scheduling.volcano.sh/v1beta1 "
        "train; set gang.operatorGang: volcano to say so); without it Volcano makes a one-pod PodGroup per pod and "
        "nothing gangs the job: set gang.method: podgroup and gang.scheduler: volcano for policylib to create the "
        "Volcano PodGroup"]
    assert template_scheduler_names(obj) == {"volcano"}
    assert operator_gang_reason(job(scheduler="scheduler-plugins-scheduler"), cfg().gang) is None


def test_the_controller_plans_no_podgroup_for_an_operator_managed_job():
    """The same stored job (labelled by the webhook earlier): a PodGroup to create, unless the operator gangs it."""
    stored = mutate_kubeflow_job(job(), cfg()).object
    assert [(w.kind, w.action) for w in plan([stored], cfg(), planners=PLANNERS)] == [("PodGroup", "create")]
    assert plan([stored], cfg(operatorGang="volcano"), planners=PLANNERS) == []


def test_check_says_the_operator_gangs_the_job():
    node = {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8", "pods": "110"}}}
    found = [(f.severity, f.key, f.message) for f in check(cfg(operatorGang="volcano"), [node], [job()])
             if f.key.startswith("gang")]
    assert found == [("info", "gang.operatorGang", "TFJob ml/train: gang.operatorGang volcano: training-operator "
                      "gangs the job itself (PodGroup scheduling.volcano.sh/v1beta1 train, owned by the job, and the "
                      "annotation scheduling.k8s.io/group-name=train on every pod); policylib writes no gang metadata "
                      "and creates no second PodGroup")]


def test_operator_gang_value_is_checked():
    with pytest.raises(ConfigError) as e:
        load_config({"gang": {"operatorGang": "kueue"}})
    assert "gang.operatorGang" in str(e.value) and "scheduler-plugins" in str(e.value)


def test_bad_job_is_still_a_policy_error_with_the_setting():
    bad = job()
    bad["spec"]["tfReplicaSpecs"]["PS"]["replicas"] = -1
    with pytest.raises(PolicyError):
        check(cfg(operatorGang="volcano"), [], [bad])


@pytest.mark.parametrize("spec", [True, {"tfReplicaSpecs": {"PS": {"template": True}}}])
def test_malformed_job_is_a_policy_error_not_a_crash_with_a_volcano_template_check(spec):
    """Found by the fuzz suite: the scheduler-name detection runs only on a job that reads well (G7)."""
    bad = job()
    bad["spec"] = spec
    assert template_scheduler_names(bad) == set()
    with pytest.raises(PolicyError):
        mutate_kubeflow_job(bad, cfg())
