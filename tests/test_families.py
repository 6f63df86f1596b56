"""The workload families' table (policylib.families.FAMILIES): one entry per family, read by ``mutate()`` and by
``plan()``; adding a family is adding an entry (rule P2)."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

import policylib.families as families
from policylib import load_config, mutate
from policylib.families import FAMILIES, PLANNERS, Family, family_of
from policylib.plan import PLANNERS as PLAN_PLANNERS
from policylib.plan import Write, plan
from policylib.result import Result
from tests.helpers import deployment

TFJOB = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t", "namespace": "ml"},
         "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}}}
VCJOB = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v", "namespace": "ml"},
         "spec": {"tasks": [{"name": "w", "replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}]}}
HYPERJOB = {"apiVersion": "training.volcano.sh/v1alpha1", "kind": "HyperJob", "metadata": {"name": "h"}}
STS = deployment("s", "ml") | {"kind": "StatefulSet"}
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j", "namespace": "ml"},
          "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"parallelism": 2, "template": {
              "spec": {"containers": [{"name": "c"}]}}}}}]}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": []}}
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}


@pytest.mark.parametrize("obj,name", [(deployment(), "Deployment"), (TFJOB, "gang"), (JOBSET, "JobSet"),
                                      (VCJOB, "Volcano"), (HYPERJOB, "Volcano"), (POD, "Pod"), (CONFIGMAP, None)])
def test_each_kind_has_exactly_its_family(obj, name):
    found = [f.name for f in FAMILIES if f.matches(obj)]
    assert found == ([name] if name else [])
    assert (family_of(obj).name if family_of(obj) else None) == name


def test_plan_runs_every_familys_planners_in_table_order():
    assert PLANNERS == PLAN_PLANNERS == tuple(dict.fromkeys(p for f in FAMILIES for p in f.planners))
    assert [p.__name__ for p in PLANNERS] == ["plan_deployment", "plan_statefulset", "plan_podgroups", "plan_workload"]
    # Kubeflow jobs, JobSets and TrainJobs share the gang planners: each runs once per object, on each family's objects
    assert [f.name for f in FAMILIES if f.planners == FAMILIES[3].planners] == ["gang", "JobSet", "TrainJob"]


@pytest.mark.parametrize("obj,setting", [(TFJOB, "gang.enabled"), (STS, "statefulSets.enabled"), (JOBSET, "gang.enabled"),
                                         (VCJOB, "volcano.enabled"), (HYPERJOB, "volcano.enabled")])
def test_a_family_switched_off_by_its_setting_is_left_unchanged_naming_the_setting(obj, setting):
    section, key = setting.split(".")
    result = mutate(obj, {section: {key: False}})
    assert result.patch == [] and result.object == obj
    assert result.reasons == [f"{family_of(obj).name} policies are off ({setting}: false): left unchanged"]
    assert family_of(obj).enabled == setting


def test_adding_a_family_is_adding_an_entry(monkeypatch):
    """A new family, one entry: mutate() applies its policy and plan() runs its planner on its objects only."""
    def is_daemonset(obj: object) -> bool:
        return isinstance(obj, dict) and obj.get("kind") == "DaemonSet"

    def label_it(obj, config, *, old, facts, namespace):
        changed = dict(obj, metadata=dict(obj["metadata"], labels={"seen": "yes"}))
        return Result(changed, patch=[{"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}}])

    def plan_daemonset(obj, config, facts):
        return Write("DaemonSet", "ml", obj["metadata"]["name"], ["seen"], False, action="none")

    entry = Family("DaemonSet", is_daemonset, label_it, enabled="gang.enabled", planners=(plan_daemonset,))
    monkeypatch.setattr(families, "FAMILIES", FAMILIES + (entry,))
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "s", "namespace": "ml"}}
    assert mutate(ds).object["metadata"]["labels"] == {"seen": "yes"}
    assert mutate(ds, {"gang": {"enabled": False}}).reasons == [
        "DaemonSet policies are off (gang.enabled: false): left unchanged"]
    writes = plan([ds, TFJOB, deployment()], load_config(None), planners=(plan_daemonset,))
    assert [(w.kind, w.name) for w in writes] == [("DaemonSet", "s")]


def test_a_planner_of_no_family_runs_on_every_object():
    seen = []

    def mine(obj, config, facts):
        seen.append(obj["kind"])

    plan([deployment(), TFJOB, CONFIGMAP], None, planners=(mine,))
    assert seen == ["Deployment", "TFJob", "ConfigMap"]


def test_family_entries_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FAMILIES[0].name = "x"  # type: ignore[misc]


def test_a_kind_no_family_handles_says_so_in_the_result_and_in_preview(tmp_path):
    """Rule P9."""
    import io

    from policylib.cli import main
    from policylib.families import HANDLED_KINDS, HANDLED_SUMMARY, UNHANDLED_WORKLOADS, is_unhandled_workload
    trainjob = {"apiVersion": "ray.io/v1", "kind": "RayJob",
                "metadata": {"name": "llama", "namespace": "ml"}, "spec": {"entrypoint": "python train.py"}}
    result = mutate(trainjob, None)
    assert (result.object, result.patch, result.changed) == (trainjob, [], False)
    assert result.unhandled == ("not handled: policylib has no policy for ray.io/v1 RayJob "
                                "(it handles Deployments, StatefulSets, LeaderWorkerSets, Kubeflow TFJobs, PyTorchJobs and "
                                "MPIJobs, JobSets, TrainJobs, Volcano Jobs and gang Pods)")
    assert result.reasons == [result.unhandled]
    # a handled kind with nothing to do is not "unhandled"
    assert mutate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}, None).unhandled is None
    assert all(kind.split()[1].removesuffix("Job") in HANDLED_SUMMARY for kind in HANDLED_KINDS)
    assert is_unhandled_workload(trainjob) and ("apps", "DaemonSet") in UNHANDLED_WORKLOADS
    assert ("apps", "StatefulSet") not in UNHANDLED_WORKLOADS
    assert not is_unhandled_workload({"apiVersion": "v1", "kind": "ConfigMap"})
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([trainjob, {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "c", "namespace": "ml"}}]))
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "-f", str(path), "-o", "diff"], stdout=out, stderr=err) == 0
    assert out.getvalue().splitlines()[0::2] == ["= RayJob ml/llama: not handled",
                                                 "= ConfigMap ml/c: not handled"]
    assert err.getvalue() == f"policylib: note: {path}: RayJob ml/llama: {result.unhandled}\n"
    # -v prints each reason once: the workload's note is not repeated as a reason; a ConfigMap's is a reason only
    err = io.StringIO()
    assert main(["preview", "-f", str(path), "-o", "diff", "-v"], stdout=io.StringIO(), stderr=err) == 0
    configmap = mutate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}}, None)
    assert err.getvalue().splitlines() == [f"policylib: note: {path}: RayJob ml/llama: {result.unhandled}",
                                           f"policylib: {path}: ConfigMap ml/c: {configmap.unhandled}"]
