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
    drift = check({"hostTopologySpread": {"reconcileDrift": True, "enforceForRequiredAntiAffinity": False}}, THREE,
                  [legacy])
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


def _tf_workers(name: str, workers: int) -> dict:
    job = _tf_ps_workers("1")
    job["metadata"]["name"] = name
    del job["spec"]["tfReplicaSpecs"]["PS"]
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = workers
    return job


def test_check_reads_one_simulation_for_every_kubeflow_job(monkeypatch):
    """Rules G14, R15: every gang's capacity is asked of the one simulation of the input, not of a simulation
    per job."""
    from policylib.check import simulated
    runs = []
    real = simulated.simulate_with_load
    monkeypatch.setattr(simulated, "simulate_with_load", lambda *a, **k: runs.append(a) or real(*a, **k))
    jobs = [_tf_workers(f"tf-{i}", 2) for i in range(3)]
    found = check(None, [node("a", cpu="4"), node("b", cpu="2")], [*jobs, deploy(replicas=1, requests={"cpu": "1"})])
    assert len(runs) == 1
    assert [f.message for f in found if f.key == "gang.method"] == []
    found = check(None, [node("a", cpu="4")], jobs)
    assert len(runs) == 2
    # tf-0 and tf-1 take the node, as simulate places them; tf-2 alone does not fit beside them
    assert [f.message for f in found if f.key in ("gang.method", "simulate")] == [
        "TFJob ml/tf-2: its gang needs 2 pods at once; the Nodes can hold 0 of them now: it would wait for its "
        "scheduleTimeout and never start"]


def test_check_gang_capacity_is_the_simulation_s_with_the_job_s_own_pods_released():
    """Rule G14 on the one simulation: a job ``simulate`` places is no gang error, even where the workloads after
    it take what it would need without it (it went first: they were placed around it)."""
    nodes = [node("a", cpu="2"), node("b", cpu="2")]
    found = check(None, nodes, [_tf_workers("tf", 3), deploy(replicas=2, requests={"cpu": "1"})])
    assert [(f.key, f.message) for f in found if f.severity == "error"] == [
        ("simulate", "Deployment ml/web: 1 of its 2 replicas would stay Pending: 0/2 nodes are available: "
                     "2 Insufficient cpu.")]
    # the Deployment first: it takes 2 CPUs, and the job's 3 do not fit in what is left
    found = check(None, nodes, [deploy(replicas=2, requests={"cpu": "1"}), _tf_workers("tf", 3)])
    assert [f.key for f in found if f.severity == "error"] == ["gang.method"]
    assert "needs 3 pods at once; the Nodes can hold 2 of them now" in found[0].message


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


# --- the placement engine: kube-scheduler 1.36's plugins (docs/specification.md, rules R1-R11) ---------------

OFF = {"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}}


def bound_pod(name, node_name, namespace="ml", labels=None, requests=None, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                            "labels": labels or {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x", "resources": {
                "requests": requests} if requests else {}}], **spec}, "status": {"phase": "Running"}}


def test_pod_requests_follow_component_helpers():
    from policylib.simulate import pod_requests
    spec = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                               {"name": "init", "resources": {"requests": {"cpu": "2"}}}]}
    assert pod_requests(spec) == {"cpu": 3000}          # max(500m + 1 sidecar, 2 + the sidecar before it)
    spec["initContainers"].pop()
    assert pod_requests(spec) == {"cpu": 1500}          # the sidecar adds to the containers
    spec["resources"] = {"limits": {"cpu": "4", "example.com/gpu": "1"}}
    assert pod_requests(spec) == {"cpu": 4000}          # pod-level resources (cpu, memory, hugepages) replace them
    spec["overhead"] = {"cpu": "250m"}
    assert pod_requests(spec) == {"cpu": 4250}
    assert pod_requests({"containers": [{"name": "a"}, {"name": "b", "resources": {"requests": {"cpu": "0"}}}]},
                        {"cpu": 100, "memory": 1}) == {"cpu": 100, "memory": 2}   # scoring's non-zero defaults


def test_sidecars_and_pod_level_resources_count_against_the_node():
    sidecar = deploy(replicas=2, requests={"cpu": "500m"}, initContainers=[
        {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}])
    [p] = simulate([sidecar], [node("a", cpu="2")], OFF)
    assert (p.placed, p.pending, p.reasons) == ({"a": 1}, 1, ["0/1 nodes are available: 1 Insufficient cpu."])
    pod_level = deploy(replicas=2, requests={"cpu": "100m"}, resources={"requests": {"cpu": "1500m"}})
    [p] = simulate([pod_level], [node("a", cpu="2")], OFF)
    assert (p.placed, p.pending) == ({"a": 1}, 1)


def test_check_and_simulate_share_one_fit():
    """Rule R2: check's gang capacity places through the engine's NodeResourcesFit, so a sidecar's requests
    count for both (a 1-CPU container beside a 1-CPU sidecar needs 2 CPUs)."""
    from policylib.kubescheduler.plugins import node_resources
    spec = {"template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
                                  "initContainers": [{"name": "s", "image": "x", "restartPolicy": "Always",
                                                      "resources": {"requests": {"cpu": "1"}}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf", "namespace": "ml"},
           "spec": {"tfReplicaSpecs": {"Worker": dict(spec, replicas=2)}}}
    assert node_resources.fits is sys.modules["policylib.kubescheduler.resources"].fits
    gang = [f.message for f in check(None, [node("a", cpu="2"), node("b", cpu="1500m")], [job])
            if f.key == "gang.method"]
    assert gang == ["TFJob ml/tf: its gang needs 2 pods at once; the Nodes can hold 1 of them now: it would wait "
                    "for its scheduleTimeout and never start"]
    [p] = simulate([job], [node("a", cpu="2"), node("b", cpu="1500m")], None)
    assert (p.kind, p.placed, p.pending) == ("TFJob", {}, 2)
    assert p.reasons == ["Worker: 0/2 nodes are available: 2 Insufficient cpu.",
                         "gang: 1 of its minimum 2 pods placeable at once: the gang binds nothing, all 2 pods stay "
                         "Pending"]


def test_required_pod_anti_affinity_to_itself_and_to_others():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    [p] = simulate([deploy(replicas=3, affinity=anti)], [node("a"), node("b")], OFF)
    assert (p.placed, p.pending) == ({"a": 1, "b": 1}, 1)
    assert p.reasons == ["0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."]
    # a bound pod's anti-affinity keeps the incoming pods off its node (and the zone-less node is no domain)
    guard = bound_pod("guard", "a", labels={"app": "guard"}, affinity=anti)
    [p] = simulate([guard, deploy(replicas=2)], [node("a"), node("b")], OFF)
    assert p.placed == {"b": 2}


def test_required_pod_affinity_follows_the_pods_it_names():
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}
    db = bound_pod("db", "b", labels={"app": "db"})
    [p] = simulate([db, deploy(replicas=3, affinity=aff)], [node("a", "zone-a"), node("b", "zone-b"),
                                                            node("c", "zone-b")], OFF)
    assert (sum(p.placed.values()), set(p.placed) <= {"b", "c"}, p.pending) == (3, True, 0)
    [p] = simulate([deploy(replicas=1, affinity=aff)], [node("a")], OFF)   # no db pod anywhere, and not itself one
    assert p.reasons == ["0/1 nodes are available: 1 node(s) didn't match pod affinity rules."]


def test_preferred_pod_affinity_scores():
    pref = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}}]}}
    cache = bound_pod("cache", "b", labels={"app": "cache"})
    [p] = simulate([cache, deploy(replicas=1, affinity=pref)], [node("a"), node("b")], OFF)
    assert p.placed == {"b": 1}


def test_an_empty_selector_counts_no_pods_and_a_foreign_one_no_self():
    def spread(selector):
        return [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": selector}]
    nodes = [node("a"), node("b", pods="0")]
    [p] = simulate([deploy(replicas=4, topologySpreadConstraints=spread({}))], nodes, OFF)
    assert (p.placed, p.pending) == ({"a": 4}, 0)
    [p] = simulate([deploy(replicas=4, topologySpreadConstraints=spread({"matchLabels": {"app": "other"}}))], nodes, OFF)
    assert (p.placed, p.pending) == ({"a": 4}, 0)
    [p] = simulate([deploy(replicas=4, topologySpreadConstraints=spread({"matchLabels": {"app": "web"}}))], nodes, OFF)
    assert (p.placed, p.pending) == ({"a": 1}, 3)


@pytest.mark.parametrize("toleration,placed", [
    (None, {}),
    ({"operator": "Exists"}, {"a": 1}),
    ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}, {"a": 1}),
])
def test_cordoned_nodes_take_pods_that_tolerate_unschedulable(toleration, placed):
    cordoned = node("a")
    cordoned["spec"] = {"unschedulable": True}
    obj = deploy(replicas=1, tolerations=[toleration] if toleration else [])
    [p] = simulate([obj], [cordoned], OFF)
    assert p.placed == placed
    if not placed:
        assert p.reasons == ["0/1 nodes are available: 1 node(s) were unschedulable."]


def test_scores_zone_less_nodes_prefer_no_schedule_and_default_requests():
    soft_zone = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                  "labelSelector": {"matchLabels": {"app": "web"}}}]
    zoneless = node("a")
    del zoneless["metadata"]["labels"]["topology.kubernetes.io/zone"]
    [p] = simulate([deploy(replicas=1, topologySpreadConstraints=soft_zone)], [zoneless, node("b")], OFF)
    assert p.placed == {"b": 1}                       # the node without the key scores 0 for the spread
    prefer = node("a", taints=[{"key": "spot", "effect": "PreferNoSchedule"}])
    [p] = simulate([deploy(replicas=1, requests={"cpu": "1"})], [prefer, node("b")], OFF)
    assert p.placed == {"b": 1}
    busy = [bound_pod(f"p{i}", "a", namespace="other") for i in range(10)]    # no requests: 100m each for scoring
    [p] = simulate([*busy, deploy(replicas=1)], [node("a"), node("b")], OFF)
    assert p.placed == {"b": 1}


def test_system_default_spread_applies_without_constraints():
    nodes = [node("a", cpu="16"), node("b", cpu="4")]
    [p] = simulate([deploy(replicas=2, requests={"cpu": "100m"})], nodes, OFF)
    assert p.placed == {"a": 1, "b": 1}    # LeastAllocated alone would put both on the bigger node


def test_balanced_allocation_scores_the_change_in_balance():
    from policylib.kubescheduler.plugins.node_resources import balanced_allocation, init
    from policylib.kubescheduler.snapshot import Snapshot
    states = [NodeState.of(node("a", cpu="4", memory="4Gi"))]
    states[0].requested = {"cpu": 2000}
    snapshot = Snapshot(states)
    shared = init(snapshot)
    pod = PodShape.of_template(deploy(requests={"cpu": "1", "memory": "1Gi"})["spec"]["template"], "ml", "h")
    assert balanced_allocation(pod, snapshot, shared).tolist() == [75]     # 75 before, 75 after: 50 + (50 + 0) / 2
    pod = PodShape.of_template(deploy(requests={"memory": "2Gi"})["spec"]["template"], "ml", "h")
    assert balanced_allocation(pod, snapshot, shared).tolist() == [87]     # 75 before, 100 after: 50 + (50 + 25) / 2


def test_what_is_not_modelled_is_named_and_gives_a_range():
    pvc = deploy(replicas=3, volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    [p] = simulate([pvc], [node("a")], OFF)
    assert (p.placed, p.pending, p.pending_max) == ({"a": 3}, 0, 3)
    assert p.as_dict()["notModelled"] == ["persistent volumes (VolumeBinding, VolumeZone, NodeVolumeLimits, "
                                          "VolumeRestrictions)"]
    other = deploy(replicas=2, schedulerName="volcano")
    [p] = simulate([other], [node("a")], OFF)
    assert (p.placed, p.pending, p.pending_max) == ({}, 0, 2)
    assert p.reasons == ["not simulated: schedulerName 'volcano' is not kube-scheduler's default profile"]
    gated = deploy(replicas=2, schedulingGates=[{"name": "example.com/quota"}])
    [p] = simulate([gated], [node("a")], OFF)
    assert (p.placed, p.pending, p.pending_max) == ({}, 2, 2)


def test_host_ports_take_one_pod_per_node():
    ports = deploy(replicas=3)
    ports["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    [p] = simulate([ports], [node("a"), node("b")], OFF)
    assert (p.placed, p.pending) == ({"a": 1, "b": 1}, 1)
    assert p.reasons == ["0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."]


def _random_cluster(rng):
    nodes = []
    for j in range(rng.randint(1, 9)):
        n = node(f"n{j}", rng.choice(["zone-a", "zone-b", "zone-c"]), cpu=rng.choice(["2", "4", "8"]),
                 memory=rng.choice(["4Gi", "16Gi"]), pods=rng.choice(["4", "110"]))
        if rng.random() < 0.15:
            del n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        if rng.random() < 0.2:
            n["spec"] = {"taints": [{"key": "spot", "effect": rng.choice(["PreferNoSchedule", "NoSchedule"])}]}
        nodes.append(n)
    objects = [bound_pod(f"b{i}", f"n{rng.randrange(len(nodes))}", labels={"app": rng.choice(["w0", "w1", "x"])},
                         requests={"cpu": rng.choice(["250m", "1"])} if rng.random() < 0.6 else None)
               for i in range(rng.randint(0, 6))]
    for w in range(rng.randint(1, 3)):
        extra = {}
        if rng.random() < 0.3:
            extra["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": f"w{w}"}}, "topologyKey": rng.choice(
                    ["kubernetes.io/hostname", "topology.kubernetes.io/zone"])}]}}
        if rng.random() < 0.3:
            extra["tolerations"] = [{"key": "spot", "operator": "Exists"}]
        objects.append(deploy(f"w{w}", rng.randint(1, 10), requests={"cpu": rng.choice(["250m", "500m", "1"])}
                              if rng.random() < 0.7 else None, **extra))
    config = {"hostTopologySpread": {"whenUnsatisfiable": rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                                     "minDomains": rng.randint(1, 3)},
              "zoneTopologySpread": {"enabled": rng.random() < 0.7}}
    return nodes, objects, config


@pytest.mark.parametrize("seed", range(60))
def test_incremental_engine_places_each_pod_where_recomputing_everything_does(seed, monkeypatch):
    """Rule R9's property: the fast path (after a bind, only the bound node's entries are recomputed) places every
    replica on the same node as recomputing every filter and score from the bound pods for each replica."""
    import random

    from policylib.simulate.engine import Cluster
    nodes, objects, config = _random_cluster(random.Random(seed))
    fast = [(p.placed, p.pending) for p in simulate(objects, nodes, config)]
    place = Cluster.place
    monkeypatch.setattr(Cluster, "place", lambda self, pod, count, rank=None, incremental=True:
                        place(self, pod, count, rank, incremental=False))
    full = [(p.placed, p.pending) for p in simulate(objects, nodes, config)]
    assert fast == full


def test_least_allocated_counts_the_incoming_pod_without_pod_level_resources():
    """1.36's NodeResourcesFit scorer is built without the PodLevelResources feature: it scores the incoming pod by
    its containers (100m/200Mi for each that requests nothing) while the Node's load counts pod-level requests.
    Found by the differential test: three placements differed until the simulator did the same."""
    from policylib.kubescheduler.model import least_allocated_requests, nonzero_requests
    spec = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "3Gi"}}}],
            "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}}],
            "resources": {"requests": {"cpu": "850m"}}}
    assert least_allocated_requests(spec) == {"cpu": 350, "memory": 3 * 2**30 + 200 * 2**20}
    assert nonzero_requests(spec) == {"cpu": 850, "memory": 3 * 2**30}
    pod = PodShape.of_template({"spec": spec}, "ml", "h")
    assert (pod.requests["cpu"], pod.fit_score["cpu"], pod.nonzero["cpu"]) == (850, 350, 850)


def test_pods_in_the_nodes_file_count_as_bound(tmp_path):
    """A file input carries existing pods too: Pods bound to a Node in the --nodes files (as in -f)."""
    busy = bound_pod("old", "a", requests={"cpu": "7"})
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump_all([node("a"), busy]))
    (tmp_path / "deploy.yaml").write_text(yaml.safe_dump(deploy(replicas=2, requests={"cpu": "1"})))
    (tmp_path / "off.yaml").write_text(yaml.safe_dump(OFF))
    out = run("simulate", "-f", "deploy.yaml", "--nodes", "nodes.yaml", "--config", "off.yaml", "-o", "json",
              cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    [row] = json.loads(out.stdout)
    assert (row["placed"], row["pending"]) == ({"a": 1}, 1)


def test_a_tie_broken_earlier_gives_later_workloads_a_range():
    """The real scheduler picks among equally scored nodes at random: the first Deployment may take either node,
    so the second, which only fits on a, may or may not stay Pending."""
    first = deploy("first", 1, requests={"cpu": "1500m"})
    second = deploy("second", 1, requests={"cpu": "1"}, nodeSelector={"kubernetes.io/hostname": "a"})
    p0, p1 = simulate([first, second], [node("a", cpu="2"), node("b", cpu="2")], OFF)
    assert (p0.placed, p0.deterministic) == ({"a": 1}, False)
    assert (p1.placed, p1.pending_range) == ({}, "0-1")     # placed as the name order left it; Pending 0 or 1

