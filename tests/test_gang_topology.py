"""A native gang in one topology domain (rule G25): ``simulate`` places it as kube-scheduler 1.37's pod group
placement algorithm does (TopologyPlacement's one placement per value of the key, GangScheduling's minimum,
NodeResourcesFit's MostAllocated placement score plus PodGroupPodsCount's), ``check`` counts what one domain holds,
and ``preview``, ``plan``, ``simulate`` and ``check`` take ``--kube-version`` (rule G22)."""
from __future__ import annotations

import io
import json

import pytest
import yaml

from policylib import simulate
from policylib.check import check
from policylib.cli import main
from policylib.kubescheduler.model import NodeState
from policylib.simulate.gangs import placement_fit_score
from policylib.workload_api import resolve

RACK = "example.com/rack"
RACKS = {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {"racks": [
    {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]}
TOPOLOGY = {"gang": {"method": "workload", "scheduler": "kube-scheduler", "topology": "tier-1"}, "volcano": RACKS}
PLAIN = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}


def node(name: str, rack: str | None, cpu: str = "4") -> dict:
    labels = {"kubernetes.io/hostname": name, **({RACK: rack} if rack else {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


NODES = [node("a1", "rack-a"), node("a2", "rack-a"), node("b1", "rack-b"), node("b2", "rack-b"), node("x1", None, "16")]


def tfjob(workers: int, cpu: str = "2", name: str = "train") -> dict:
    template = {"spec": {"containers": [{"name": "tensorflow", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers, "template": template}}}}


def bound(name: str, node_name: str, cpu: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x",
                                                            "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def racks_of(placed: dict[str, int]) -> set[str]:
    return {n[0] for n in placed}


def test_a_gang_that_fits_a_rack_is_placed_in_one_rack_only():
    [p] = simulate([tfjob(3)], NODES, TOPOLOGY)
    assert (p.pending, sum(p.placed.values())) == (0, 3)
    assert racks_of(p.placed) == {"a"}          # both racks hold it: a tie, broken in name order
    assert p.reasons[0] == f"topology {RACK}: placed in {RACK}=rack-a (2 of 2 domains hold the gang; placement score 139)"
    assert p.reasons[-1] == (f"topology {RACK}: domains rack-a, rack-b score the same (139): kube-scheduler picks one "
                             "at random; simulated in rack-a")
    [spread] = simulate([tfjob(3)], NODES, PLAIN)     # without the level: the big unlabelled node is the best fit
    assert spread.pending == 0 and "x1" in spread.placed


def test_the_fuller_rack_wins_as_the_most_allocated_placement_score_says():
    """NodeResourcesFit scores a placement MostAllocated over its Nodes together: the rack already loaded ends
    fuller, so the gang goes there (no tie)."""
    load = [bound("busy", "b1", "1")]
    [p] = simulate([tfjob(3), *load], NODES, TOPOLOGY)
    assert racks_of(p.placed) == {"b"}
    assert p.reasons == [f"topology {RACK}: placed in {RACK}=rack-b (2 of 2 domains hold the gang; placement score 145)"]


def test_the_placement_score_is_most_allocated_over_the_domain():
    states = [NodeState.of(node("a1", "rack-a")), NodeState.of(node("a2", "rack-a"))]
    states[0].requested = {"cpu": 7000}
    states[0].nonzero = {"cpu": 7000, "memory": 3 * 200 * 1024 * 1024}
    # cpu 7000/8000 -> 87; memory 600Mi/16Gi -> 3; averaged: 45
    assert placement_fit_score(states) == 45


def test_a_gang_that_fits_no_single_rack_stays_pending_with_the_schedulers_reason():
    """5 pods of 2 CPU: 10 CPU, more than a rack's 8 though the racks have 16 between them."""
    [p] = simulate([tfjob(5)], NODES[:4], TOPOLOGY)
    assert (p.pending, p.placed) == (5, {})
    assert p.reasons == [
        f"topology {RACK}: 0/2 placements are available: no {RACK} domain holds the gang's minimum 5 pods at once "
        "(pods placeable per domain: rack-a 4, rack-b 4)",
        "gang: 0 of its minimum 5 pods placeable at once: the gang binds nothing, all 5 pods stay Pending"]
    [spread] = simulate([tfjob(5)], NODES[:4], PLAIN)
    assert spread.pending == 0


def test_check_counts_what_one_domain_holds():
    [finding] = [f for f in check(TOPOLOGY, NODES[:4], [tfjob(5)]) if f.severity == "error"]
    assert (finding.key, finding.message) == ("gang.topology", (
        "TFJob ml/train: its gang needs 5 pods at once; the one example.com/rack domain can hold 4 of them now: "
        "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"))
    assert [f for f in check(PLAIN, NODES[:4], [tfjob(5)]) if f.severity == "error"] == []


def test_simulate_on_a_cluster_without_a_workload_api_says_the_pods_are_refused():
    [p] = simulate([tfjob(3)], NODES, PLAIN, workload_api=resolve("auto", None, 35))
    assert (p.pending, p.placed) == (3, {})
    assert p.reasons == ["the webhook refuses the job's pods (rule G23): " + resolve("auto", None, 35).missing()]


# --- the commands' --kube-version ---------------------------------------------------------------------

def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def files(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(TOPOLOGY))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tfjob(3)))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": NODES}))
    return config, job, nodes


@pytest.mark.parametrize("version, api, ref", [
    ("1.36", "scheduling.k8s.io/v1alpha2", "podGroupTemplateRef"), ("v1.37.2", "scheduling.k8s.io/v1beta1", "workloadRef"),
    (None, "scheduling.k8s.io/v1beta1", "workloadRef")])
def test_preview_writes_the_shapes_of_the_kube_version_with_the_topology_and_its_reason(files, version, api, ref):
    config, job, _ = files
    code, out, err = run(["preview", "--config", str(config), "-f", str(job), "-v"]
                         + (["--kube-version", version] if version else []))
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    podgroup = docs[2]
    assert (podgroup["apiVersion"], podgroup["kind"]) == (api, "PodGroup")
    assert ref in podgroup["spec"]
    assert podgroup["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    assert f"policylib: {job}: TFJob ml/train: schedulingConstraints.topology [{RACK}]: the gang's pods all in one " \
           f"{RACK} domain" in err
    minor = {"1.36": "Kubernetes 1.36", "v1.37.2": "Kubernetes 1.37", None: "Kubernetes 1.37 assumed"}[version]
    assert f"Workload and PodGroup in {api} ({minor})" in err


def test_preview_for_a_minor_without_the_api_warns_and_a_bad_version_is_refused(files):
    config, job, _ = files
    code, out, err = run(["preview", "--config", str(config), "-f", str(job), "--kube-version", "1.35", "--exit-code"])
    assert code == 4
    assert len(list(yaml.safe_load_all(out))) == 1       # the job alone: nothing can be made
    assert "Kubernetes 1.35 serves no Workload API policylib writes" in err


def test_a_kube_version_that_is_not_one_exits_2_naming_it(files, capsys):
    _, job, _ = files
    with pytest.raises(SystemExit) as e:
        run(["preview", "-f", str(job), "--kube-version", "latest"])
    assert e.value.code == 2
    assert "argument --kube-version: --kube-version 'latest': not a Kubernetes version like 1.37 or v1.36.3" in \
        capsys.readouterr().err


@pytest.mark.parametrize("version, api", [("1.36", "scheduling.k8s.io/v1alpha2"), ("1.37", "scheduling.k8s.io/v1beta1")])
def test_plan_takes_the_kube_version(files, version, api):
    config, job, _ = files
    admitted = run(["preview", "--config", str(config), "-f", str(job)])[1].split("---\n")[0]
    stored = yaml.safe_load(admitted)
    stored["metadata"]["uid"] = "uid-1"
    job.write_text(yaml.safe_dump(stored))
    code, out, err = run(["plan", "--config", str(config), "-f", str(job), "-o", "json", "--kube-version", version])
    assert code == 0, err
    writes = json.loads(out)
    assert [(w["kind"], w["action"], w["object"]["apiVersion"]) for w in writes] == [
        ("Workload", "create", api), ("PodGroup", "create", api)]


def test_simulate_and_check_take_the_kube_version(files):
    config, job, nodes = files
    code, out, err = run(["simulate", "--config", str(config), "-f", str(job), "--nodes", str(nodes), "-o", "json",
                          "--kube-version", "1.36"])
    assert code == 0, err
    [placement] = json.loads(out)
    assert {n[0] for n in placement["placed"]} == {"a"}
    code, out, err = run(["simulate", "--config", str(config), "-f", str(job), "--nodes", str(nodes), "-o", "json",
                          "--kube-version", "1.35"])
    assert code == 3 and json.loads(out)[0]["pending"] == 3
    code, out, err = run(["check", "--config", str(config), "--nodes", str(nodes), "-o", "json", "--kube-version", "1.37"])
    findings = json.loads(out)
    assert {"severity": "info", "key": "gang.workloadAPIVersion", "message": "scheduling.k8s.io/v1beta1 (Kubernetes "
            "1.37): policylib writes its Workloads and PodGroups in scheduling.k8s.io/v1beta1"} in findings
    assert {"severity": "warning", "key": "gang.topology", "message": "1 of 5 Nodes have no example.com/rack label, so "
            "no gang is placed there: x1"} in findings
    assert code == 0, err


def test_kube_version_and_cluster_are_not_given_together(files):
    config, job, nodes = files
    code, _, err = run(["check", "--config", str(config), "--cluster", "--kube-version", "1.37",
                        "--kubeconfig", "/nonexistent"])
    assert (code, err) == (2, "policylib: error: --kube-version is for files; with --cluster the API server's own "
                                 "versions are read\n")


def test_a_running_gangs_own_pods_do_not_crowd_it_out_of_checks_capacity():
    """``check --cluster`` reads a stored job with its bound pods: those pods are the gang itself, not load beside
    it (counted as load, a full cluster running the gang read as one it cannot fit)."""
    job = dict(tfjob(3, cpu="2"), metadata={"name": "train", "namespace": "ml", "uid": "uid-1"})
    pods = [dict(bound(f"train-worker-{i}", n, "2"), metadata={
        "name": f"train-worker-{i}", "namespace": "ml", "labels": {"training.kubeflow.org/job-name": "train"}})
        for i, n in enumerate(("b1", "b2", "b1"))]
    rack_b = [node("b1", "rack-b"), node("b2", "rack-b")]
    assert [f for f in check(TOPOLOGY, rack_b, [job, *pods]) if f.severity == "error"] == []
    strangers = [dict(p, metadata={"name": p["metadata"]["name"], "namespace": "ml"}) for p in pods]
    [error] = [f.message for f in check(TOPOLOGY, rack_b, [job, *strangers]) if f.severity == "error"]
    assert error.startswith("TFJob ml/train: its gang needs 3 pods at once; the one example.com/rack domain can hold 1")
