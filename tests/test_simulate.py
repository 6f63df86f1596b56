"""policylib.simulate and policylib.check, and their commands: the scheduler's filters replayed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policylib.check import check
from policylib.render import placements_svg, placements_table
from policylib.simulate import NodeState, Placement, PodShape, order_independent, simulate, tolerates
from tests.test_volcano import DISCOVERY, seed_nodes

ENFORCE = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
GROUP = "e2e.policylib.io/group"


def node(name, zone="zone-a", group="g", cpu="8", memory="32Gi", pods="110", taints=None, **labels):
    n = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone, GROUP: group, **labels}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}
    if taints:
        n["spec"] = {"taints": taints}
    return n


def deploy(name="web", replicas=3, group=None, requests=None, namespace="ml", **pod):
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests} if requests else {}}], **pod}
    if group:
        spec["nodeSelector"] = {GROUP: group}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


TWO = [node("two-a", "zone-a", "two"), node("two-b", "zone-b", "two")]
THREE = [node(f"three-{z}", f"zone-{z}", "three") for z in "abc"]
TAINT = {"key": "dedicated", "value": "other", "effect": "NoSchedule"}
TAINTED = [node(f"t-{z}", f"zone-{z}", "t") for z in "abc"] + [node("t-x", "zone-c", "t", taints=[TAINT])]


@pytest.mark.parametrize("replicas,nodes,group,placed,pending", [
    (3, TWO, "two", {"two-a": 1, "two-b": 1}, 1),          # the specification's own example
    (4, TWO, "two", {"two-a": 2, "two-b": 2}, 0),          # maxSkew rises to 2
    (12, TWO, "two", {"two-a": 4, "two-b": 4}, 4),
    (12, THREE, "three", {"three-a": 4, "three-b": 4, "three-c": 4}, 0),
    (2, TWO, "two", {"two-a": 1, "two-b": 1}, 0),          # below hardMinReplicas: a preference
])
def test_enforced_host_spread_as_documented(replicas, nodes, group, placed, pending):
    [p] = simulate([deploy(replicas=replicas, group=group)], nodes, ENFORCE)
    assert (p.placed, p.pending, p.pending_max, p.replicas) == (placed, pending, pending, replicas)
    if pending:
        assert p.reasons == [f"0/{len(nodes)} nodes are available: {len(nodes)} node(s) didn't match pod topology "
                             "spread constraints."]


def test_untolerated_taint_is_not_a_domain_but_tolerated_it_is():
    flat = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "enableReplicaDerivedMaxSkewRule": False}}
    [p] = simulate([deploy(replicas=6, group="t")], TAINTED, flat)
    assert (p.placed, p.pending) == ({"t-a": 2, "t-b": 2, "t-c": 2}, 0)
    tolerant = deploy(replicas=8, group="t", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    [p] = simulate([tolerant], TAINTED, flat)
    assert (p.placed, p.pending) == ({"t-a": 2, "t-b": 2, "t-c": 2, "t-x": 2}, 0)


def test_resources_and_pod_counts_filter_and_explain():
    nodes = [node("a", cpu="2"), node("b", cpu="4", pods="1")]
    [p] = simulate([deploy(replicas=4, requests={"cpu": "1500m"})], nodes, None)
    assert (p.placed, p.pending) == ({"a": 1, "b": 1}, 2)
    assert p.reasons == ["0/2 nodes are available: 1 Insufficient cpu, 1 Too many pods."]


def test_init_container_requests_count_when_larger():
    obj = deploy(replicas=2, requests={"cpu": "1"}, initContainers=[{"name": "i", "image": "x", "resources": {
        "requests": {"cpu": "3"}}}])
    [p] = simulate([obj], [node("a", cpu="4")], None)
    assert (p.placed, p.pending) == ({"a": 1}, 1)


def test_bound_pods_are_load_and_workloads_stack_in_order():
    bound = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "old", "namespace": "x"},
             "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]},
             "status": {"phase": "Running"}}
    workloads = [deploy(n, 1, requests={"cpu": "1"}) for n in ("one", "two", "three")]
    placements = simulate([bound, *workloads], [node("a", cpu="4"), node("b", cpu="1")], None)
    assert sorted(n for p in placements for n in p.placed) == ["a", "b"]   # one fits beside the bound pod
    assert [p.pending for p in placements] == [0, 0, 1]
    assert placements[2].reasons == ["0/2 nodes are available: 2 Insufficient cpu."]


def test_hpa_minimum_is_what_is_placed():
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": "ml"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 6, "maxReplicas": 9}}
    [p] = simulate([hpa, deploy(replicas=2, group="three")], THREE, ENFORCE)
    assert (p.replicas, p.placed) == (6, {"three-a": 2, "three-b": 2, "three-c": 2})


@pytest.mark.parametrize("term,name,expected", [
    ({"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["3"]}]}, "a", True),
    ({"matchExpressions": [{"key": "gpu", "operator": "Lt", "values": ["3"]}]}, "a", False),
    ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, "a", False),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}, "a", True),
    ({}, "a", False),                                        # an empty term matches nothing
])
def test_required_node_affinity(term, name, expected):
    pod = PodShape.of_template({"spec": {"containers": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}}, "ns", "h")
    assert pod.matches_affinity(NodeState.of(node(name, gpu="4"))) is expected


@pytest.mark.parametrize("toleration,expected", [
    ({"key": "dedicated", "operator": "Exists"}, True),
    ({"key": "dedicated", "value": "other"}, True),
    ({"key": "dedicated", "value": "gpu"}, False),
    ({"operator": "Exists"}, True),
    ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
])
def test_tolerations(toleration, expected):
    assert tolerates([toleration], TAINT) is expected


def test_shared_hard_domains_are_searched_for_a_range():
    pod = PodShape.of_template(deploy(group="t")["spec"]["template"], "ml", "h")
    pod.constraints = [{"topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}]
    racks = [NodeState.of(node(n, rack=r)) for n, r in (("a", "1"), ("b", "1"), ("c", "2"))]
    assert order_independent(pod, racks) is False
    pod.constraints[0]["topologyKey"] = "kubernetes.io/hostname"
    assert order_independent(pod, racks) is True
    p = Placement("Deployment", "ml", "web", 5, {"a": 2}, {"zone-a": 2}, 1, 3, [])
    assert p.pending_range == "1-3" and p.as_dict()["pendingMax"] == 3


def test_volcano_partitions_inside_tier_one_hypernodes():
    config = {"volcano": {"partitionSize": 2, "networkTopologyDiscovery": DISCOVERY}}
    nodes = seed_nodes({"cpu": "8", "memory": "32Gi", "pods": "110"})
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"tasks": [{"name": "t0", "replicas": 4, "template": {"spec": {"containers": [
               {"name": "c", "image": "x", "resources": {"requests": {"cpu": "8"}}}]}}}]}}
    [p] = simulate([job], nodes, config)
    assert (p.kind, p.replicas, sum(p.placed.values()), p.pending) == ("Job", 4, 4, 0)
    tier1 = [{"192.168.5.17", "192.168.5.224"}, {"192.168.5.235", "192.168.5.239"},
             {"192.168.5.240", "192.168.5.251"}, {"192.168.5.83", "192.168.5.95"}]
    used = [g for g in tier1 if g & set(p.placed)]
    assert len(used) == 2 and set(p.placed) == used[0] | used[1]   # each partition inside one tier-1 HyperNode
    config["volcano"]["partitionSize"] = 4
    job["spec"]["tasks"][0]["replicas"] = 8
    [p] = simulate([job], nodes, config)
    assert (p.pending, p.reasons) == (8, ["task t0: partition 1 of 2 (4 pods) fits in no tier-1 HyperNode",
                                          "task t0: partition 2 of 2 (4 pods) fits in no tier-1 HyperNode",
                                          "task t0: 0 of minPartitions 2 partitions placeable: the gang binds "
                                          "nothing, all 8 pods stay Pending"])


def test_volcano_job_is_a_gang_when_one_partition_fits():
    """Only one tier-1 HyperNode has room for a partition: Volcano binds none of the Job's pods (the
    end-to-end test against vc-scheduler saw all four Pending), so nothing is placed and the nodes stay free."""
    config = {"volcano": {"partitionSize": 2, "networkTopologyDiscovery": DISCOVERY}}
    nodes = seed_nodes({"cpu": "8", "memory": "32Gi", "pods": "110"})
    for n in nodes:   # one accelerator on both nodes of one tier-1 HyperNode, and on one node of two others
        if n["metadata"]["name"] in ("192.168.5.17", "192.168.5.224", "192.168.5.235", "192.168.5.240"):
            n["status"]["allocatable"]["example.com/accel"] = "1"
    pod = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"example.com/accel": "1"}}}]}}
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"tasks": [{"name": "t0", "replicas": 4, "template": pod}]}}
    other = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "one", "namespace": "ml"},
             "spec": {"tasks": [{"name": "t0", "replicas": 2, "template": pod}]}}
    gang, after = simulate([job, other], nodes, config)
    assert (gang.placed, gang.pending) == ({}, 4)
    assert gang.reasons == ["task t0: partition 2 of 2 (2 pods) fits in no tier-1 HyperNode",
                            "task t0: 1 of minPartitions 2 partitions placeable: the gang binds nothing, "
                            "all 4 pods stay Pending"]
    assert (after.placed, after.pending) == ({"192.168.5.17": 1, "192.168.5.224": 1}, 0)   # the gang held nothing


def test_table_and_chart():
    placements = simulate([deploy(replicas=3, group="two")], TWO, ENFORCE)
    text = placements_table(placements)
    assert text.splitlines()[0].split() == ["KIND", "NAMESPACE", "NAME", "REPLICAS", "PLACED", "PENDING", "NODES", "ZONES"]
    assert text.splitlines()[1].split() == ["Deployment", "ml", "web", "3", "2", "1", "two-a=1,two-b=1",
                                            "zone-a=1,zone-b=1"]
    svg = placements_svg(placements)
    assert svg.startswith("<svg") and svg.count("<rect") == 4   # background, two nodes, Pending
    assert "ml/web: 3 replicas, 2 placed, 1 Pending" in svg and ">Pending<" in svg and ">zone-b<" in svg


# --- check -----------------------------------------------------------------------------------------

def keys(findings):
    return [(f.severity, f.key) for f in findings]


def test_check_enforced_deployment_on_too_few_nodes():
    findings = check(ENFORCE, TWO, [deploy(replicas=3, group="two")])
    [error] = [f for f in findings if f.severity == "error"]
    assert error.key == "hostTopologySpread.minDomains"
    assert "ml/web (2 eligible: two-a, two-b; 1 of its 3 replicas would stay Pending)" in error.message


def test_check_thresholds_zones_labels_and_versions():
    cfg = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 2}}
    one_zone = [node(f"n{i}", "zone-a") for i in range(4)]
    assert ("warning", "hostTopologySpread.hardMinReplicas") in keys(check(cfg, one_zone))
    assert ("info", "zoneTopologySpread.enabled") in keys(check(None, one_zone))
    bare = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {}},
             "status": {"nodeInfo": {"kubeletVersion": "v1.26.3"}}}]
    assert keys(check(ENFORCE, bare)) == [("error", "hostTopologySpread.topologyKey"),
                                         ("error", "zoneTopologySpread.matchLabelKeys"),
                                         ("error", "hostTopologySpread.matchLabelKeys"),
                                         ("warning", "zoneTopologySpread.topologyKey")]
    assert check(None, one_zone, server_version="v1.36.3") == [f for f in check(None, one_zone) if f.severity == "info"]


def test_check_drift_partitions_and_gangs():
    legacy = deploy(replicas=4)
    legacy["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    drift = check({"hostTopologySpread": {"reconcileDrift": True}}, THREE, [legacy])
    assert [f.key for f in drift if f.severity == "warning"] == ["hostTopologySpread.reconcileDrift",
                                                                 "hostTopologySpread.enforceForRequiredAntiAffinity"]
    assert "1 Deployment would roll, 1 for legacy anti-affinity" in drift[0].message
    big = check({"volcano": {"partitionSize": 4, "networkTopologyDiscovery": DISCOVERY}}, seed_nodes())
    assert keys(big)[0] == ("error", "volcano.partitionSize")
    assert "partitionSize 4 needs 4 nodes inside one HyperNode of tier <= 1; the largest has 2" in big[0].message
    tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf", "namespace": "ml"},
          "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4, "template": {"spec": {"containers": [
              {"name": "tensorflow", "image": "x", "resources": {"requests": {"cpu": "6"}}}]}}}}}}
    gang = check(None, THREE, [tf])
    assert keys(gang)[:1] == [("error", "gang.method")]
    assert "needs 4 pods at once; the Nodes can hold 3 of them now" in gang[0].message


def _tf_ps_workers(cpu: str, min_available: int | None = None) -> dict:
    spec = {"template": {"spec": {"containers": [{"name": "tensorflow", "image": "x",
                                                  "resources": {"requests": {"cpu": cpu}}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf", "namespace": "ml"},
           "spec": {"tfReplicaSpecs": {"PS": dict(spec, replicas=1), "Worker": dict(spec, replicas=4)}}}
    if min_available is not None:
        job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return job


def test_check_gang_replica_types_share_the_nodes():
    """Found against scheduler-plugins' Coscheduling (tests/e2e/test_coscheduling.py): 1 PS and 4 Workers of
    1 CPU on 4 free CPUs never start, so check must not count the PS and the Workers on the same CPUs."""
    four = [node("a", cpu="2"), node("b", cpu="2")]
    gang = check(None, four, [_tf_ps_workers("1")])
    assert keys(gang)[:1] == [("error", "gang.method")]
    assert "needs 5 pods at once; the Nodes can hold 4 of them now" in gang[0].message
    assert [f for f in check(None, four + [node("c", cpu="1")], [_tf_ps_workers("1")]) if f.key == "gang.method"] == []
    # minAvailable 4: four of them are the gang the scheduler waits for
    assert [f for f in check(None, four, [_tf_ps_workers("1", 4)]) if f.key == "gang.method"] == []


# --- the commands ----------------------------------------------------------------------------------

def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "policylib.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def test_simulate_and_check_commands(tmp_path):
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": TWO}))
    (tmp_path / "deploy.yaml").write_text(yaml.safe_dump_all([deploy(replicas=3, group="two"),
                                                              deploy("small", 1, group="two")]))
    (tmp_path / "enforce.yaml").write_text(yaml.safe_dump(ENFORCE))
    base = ("-f", "deploy.yaml", "--nodes", "nodes.yaml", "--config", "enforce.yaml")
    out = run("simulate", *base, "-o", "json", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["name"], r["pending"], r["placed"]) for r in rows] == [("web", 1, {"two-a": 1, "two-b": 1}),
                                                                      ("small", 0, {"two-a": 1})]
    assert set(rows[0]) == {"kind", "namespace", "name", "replicas", "placed", "zones", "pending", "reasons"}
    assert run("simulate", *base, "-o", "svg", cwd=tmp_path).stdout.startswith("<svg")
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(deploy("small", 2, group="two")))
    assert run("simulate", "-f", "ok.yaml", "--nodes", "nodes.yaml", "--config", "enforce.yaml", cwd=tmp_path).returncode == 0
    no_nodes = run("simulate", "-f", "deploy.yaml", cwd=tmp_path)
    assert (no_nodes.returncode, no_nodes.stderr) == (2, "policylib: error: no Nodes: give --nodes FILE (kubectl get "
                                                         "nodes -o yaml), Nodes among -f, or --cluster\n")
    found = run("check", *base, "-o", "json", cwd=tmp_path)
    assert found.returncode == 3
    assert json.loads(found.stdout)[0]["key"] == "hostTopologySpread.minDomains"
    quiet = run("check", "--nodes", "nodes.yaml", cwd=tmp_path)
    assert quiet.returncode == 0 and "no findings" in quiet.stdout


def test_simulate_speed_is_a_benchmark_not_a_test():
    assert (Path(__file__).parent.parent / "bench" / "bench_simulate.py").exists()


def test_volcano_partitions_bounded_by_tier_name_before_v1_15_are_unbounded():
    """vc-scheduler v1.14.1 ignores a partition's highestTierName: with room for only one partition inside a
    tier-1 HyperNode, it bound all four pods (tests/e2e); simulate for v1.14.1 places them likewise."""
    nodes = seed_nodes({"cpu": "8", "memory": "32Gi", "pods": "110"})
    for n in nodes:
        if n["metadata"]["name"] in ("192.168.5.17", "192.168.5.224", "192.168.5.235", "192.168.5.240"):
            n["status"]["allocatable"]["example.com/accel"] = "1"
    policy = {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
              "networkTopology": {"mode": "hard", "highestTierName": "test-tier-1"}}
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"tasks": [{"name": "t0", "replicas": 4, "partitionPolicy": policy, "template": {"spec": {
               "containers": [{"name": "c", "image": "x", "resources": {"limits": {"example.com/accel": "1"}}}]}}}]}}
    [old] = simulate([job], nodes, {"volcano": {"version": "v1.14.1", "networkTopologyDiscovery": DISCOVERY}})
    assert (sorted(old.placed), old.pending) == (["192.168.5.17", "192.168.5.224", "192.168.5.235", "192.168.5.240"], 0)
    assert old.reasons == ["task t0: Volcano v1.14.1 ignores the partitions' highestTierName 'test-tier-1': placed "
                           "without a HyperNode bound"]
    [new] = simulate([job], nodes, {"volcano": {"version": "v1.15.1", "networkTopologyDiscovery": DISCOVERY}})
    assert (new.placed, new.pending) == ({}, 4)
