"""One scheduler model: ``check`` and ``simulate`` ask the same registry of plugins (the same eligible nodes on
generated clusters), and gangs go through the same engine beside the other workloads of the input."""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policylib.check import check
from policylib.config import load_config
from policylib.simulate import simulate
from tests.test_simulate import deploy, node

# --- gangs through the engine, beside the other workloads --------------------------------------------

GPU = "nvidia.com/gpu"


def _gpu_node(name):
    n = node(name)
    n["status"]["allocatable"][GPU] = "8"
    return n


def _pytorch(workers=4, gpus="4"):
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {"containers": [
                {"name": "pytorch", "image": "x", "resources": {"limits": {GPU: gpus}}}]}}}}}}


def test_a_kubeflow_gang_beside_a_deployment_binds_all_or_nothing():
    """Rules R15, G14: a PyTorchJob of four 4-GPU pods beside a Deployment that takes 2 GPUs on each of two
    8-GPU nodes: only two of the four fit, so check finds the gang short and simulate keeps all four Pending;
    alone, all four fit."""
    nodes = [_gpu_node("gpu-a"), _gpu_node("gpu-b")]
    serving = deploy("serve", 2, requests={GPU: "2"})
    serving["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {GPU: "2"}
    assert [f for f in check(None, nodes, [_pytorch()]) if f.severity == "error"] == []
    [alone] = simulate([_pytorch()], nodes, None)
    assert (alone.kind, alone.placed, alone.pending) == ("PyTorchJob", {"gpu-a": 2, "gpu-b": 2}, 0)

    errors = [f for f in check(None, nodes, [serving, _pytorch()]) if f.severity == "error"]
    assert [(f.key, f.message) for f in errors] == [
        ("gang.method", "PyTorchJob ml/train: its gang needs 4 pods at once; the Nodes can hold 2 of them now: it "
                        "would wait for its scheduleTimeout and never start")]
    deployment, job = simulate([serving, _pytorch()], nodes, None)
    assert (deployment.placed, deployment.pending) == ({"gpu-a": 1, "gpu-b": 1}, 0)
    assert (job.kind, job.name, job.replicas, job.placed, job.pending) == ("PyTorchJob", "train", 4, {}, 4)
    assert job.reasons == [f"Worker: 0/2 nodes are available: 2 Insufficient {GPU}.",
                           "gang: 2 of its minimum 4 pods placeable at once: the gang binds nothing, all 4 pods stay "
                           "Pending"]
    # the job first: it takes its room, and the Deployment is what stays Pending (one verdict, in input order)
    job, deployment = simulate([_pytorch(), serving], nodes, None)
    assert (job.pending, deployment.pending) == (0, 2)
    # minAvailable 2: the gang's minimum fits, so two bind and two wait
    partial = _pytorch()
    partial["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}
    _, job = simulate([serving, partial], nodes, None)
    assert (job.placed, job.pending) == ({"gpu-a": 1, "gpu-b": 1}, 2)
    assert [f for f in check(None, nodes, [serving, partial]) if f.key == "gang.method"] == []


# --- one scheduler model: check's eligibility is simulate's -------------------------------------------------

UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
GEN_TAINTS = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, {"key": "spot", "effect": "NoExecute"},
              {"key": "maintenance", "effect": "PreferNoSchedule"},
              {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]   # what kubectl cordon adds
GEN_TOLERATIONS = [UNSCHEDULABLE, {"operator": "Exists"}, {"key": "dedicated", "value": "gpu"},
                   {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, {"key": "spot", "operator": "Exists"}]
GEN_AFFINITY = [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                       "values": ["zone-a", "zone-b"]}]},
                {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["silver"]}]},
                {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0", "n2"]}]}]


def _generated_cluster(draw_nodes, cordoned, taints, tiers, zones):
    nodes = []
    for i in range(draw_nodes):
        labels = {"tier": tiers[i]} if tiers[i] else {}
        n = node(f"n{i}", zones[i] or "zone-a", **labels)
        if not zones[i]:
            del n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        n["spec"] = {"unschedulable": cordoned[i], "taints": [GEN_TAINTS[t] for t in taints[i]]}
        nodes.append(n)
    return nodes


@st.composite
def _clusters_and_pods(draw):
    count = draw(st.integers(1, 7))
    per_node = st.lists(st.integers(0, len(GEN_TAINTS) - 1), max_size=2, unique=True)
    nodes = _generated_cluster(count, draw(st.lists(st.booleans(), min_size=count, max_size=count)),
                               draw(st.lists(per_node, min_size=count, max_size=count)),
                               draw(st.lists(st.sampled_from([None, "gold", "silver"]), min_size=count,
                                             max_size=count)),
                               draw(st.lists(st.sampled_from([None, "zone-a", "zone-b", "zone-c"]), min_size=count,
                                             max_size=count)))
    pod = {"tolerations": draw(st.lists(st.sampled_from(GEN_TOLERATIONS), max_size=3, unique_by=str))}
    if draw(st.booleans()):
        pod["nodeSelector"] = {"tier": draw(st.sampled_from(["gold", "silver"]))}
    terms = draw(st.lists(st.sampled_from(GEN_AFFINITY), max_size=2, unique_by=str))
    if terms:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    return nodes, pod


OFF_SPREADS = {"hostTopologySpread": {"enabled": False}, "zoneTopologySpread": {"enabled": False}}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_clusters_and_pods())
def test_check_and_simulate_find_the_same_eligible_nodes(case):
    """One scheduler model: on generated clusters (cordoned nodes with and without the unschedulable toleration,
    taints, nodeSelector and node affinity), the nodes check counts as eligible for a Deployment are those
    simulate places its pods on (a host port keeps one pod per node, and one replica more than the nodes), and
    check's gang capacity for a job of the same pods is their number."""
    from policylib.check.deployments import deployment_eligible_nodes
    from policylib.facts import ClusterFacts
    from policylib.kubescheduler.snapshot import node_states
    nodes, pod = case
    ports = [{"containerPort": 80, "hostPort": 8080}]
    d = deploy("web", len(nodes) + 1, **pod)
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = ports
    eligible = {n.name for n in deployment_eligible_nodes(d, load_config(OFF_SPREADS), ClusterFacts.from_objects([]),
                                                          node_states(nodes))}
    [p] = simulate([d], nodes, OFF_SPREADS)
    assert (set(p.placed), p.pending) == (eligible, len(nodes) + 1 - len(eligible))
    assert all(v == 1 for v in p.placed.values())
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf", "namespace": "ml"},
           "spec": {"tfReplicaSpecs": {"Worker": {"replicas": len(nodes) + 1,
                                                  "template": d["spec"]["template"]}}}}
    [gang] = [f.message for f in check(OFF_SPREADS, nodes, [job]) if f.key == "gang.method"]
    assert f"needs {len(nodes) + 1} pods at once; the Nodes can hold {len(eligible)} of them now" in gang


def test_a_cordoned_node_is_eligible_for_check_and_simulate_when_the_pod_tolerates_it():
    """A cordoned node takes a pod that tolerates node.kubernetes.io/unschedulable, for check as for simulate
    (kube-scheduler's NodeUnschedulable); without the toleration, for neither."""
    from policylib.check.deployments import deployment_eligible_nodes
    from policylib.facts import ClusterFacts
    from policylib.kubescheduler.snapshot import node_states
    nodes = _generated_cluster(2, [True, False], [[], []], [None, None], ["zone-a", "zone-b"])
    for tolerations, expected in (([UNSCHEDULABLE], {"n0", "n1"}), ([], {"n1"})):
        d = deploy("web", 2, tolerations=tolerations)
        found = deployment_eligible_nodes(d, load_config(OFF_SPREADS), ClusterFacts.from_objects([]), node_states(nodes))
        assert {n.name for n in found} == expected
        [p] = simulate([d], nodes, OFF_SPREADS)
        assert set(p.placed) == expected


#: kube-scheduler 1.36's default profile (pkg/scheduler/apis/config/v1/default_plugins.go): the filters in the
#: framework's order and the score weights, of the plugins the simulator models.
DEFAULT_PROFILE_FILTERS = ["NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
                           "PodTopologySpread", "InterPodAffinity"]
DEFAULT_PROFILE_SCORES = {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "PodTopologySpread": 2,
                          "InterPodAffinity": 2, "NodeResourcesBalancedAllocation": 1}


def test_the_registry_is_the_default_profile_and_every_entry_names_its_rules_and_reasons():
    import re
    from pathlib import Path

    from policylib.kubescheduler.framework import Plugin
    from policylib.kubescheduler.plugins import CYCLE_FILTERS, NODE_FILTERS, PLUGINS, SCORES
    spec = (Path(__file__).resolve().parent.parent / "docs" / "specification.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| (R\d+) \|", spec, re.MULTILINE))
    filters = [p.name for p in PLUGINS if p.node_filter is not None or p.filter is not None]
    assert filters == DEFAULT_PROFILE_FILTERS
    assert [n for n, _ in NODE_FILTERS] + [n for n, _, _ in CYCLE_FILTERS] == DEFAULT_PROFILE_FILTERS
    assert {n: w for n, w, _ in SCORES} == DEFAULT_PROFILE_SCORES
    for p in PLUGINS:
        assert p.rules and set(p.rules) <= rows, p.name
        assert bool(p.reasons) == (p.name in DEFAULT_PROFILE_FILTERS), p.name
    with pytest.raises(ValueError, match="does not change while pods bind"):
        Plugin("Broken", ("R3",), ("x",), node_filter=lambda pod, node: None, filter=lambda cy: None)


def test_every_failure_reason_comes_from_the_registry():
    """The failure messages simulate prints are the registered plugins' reason strings (kube-scheduler's)."""
    from policylib.kubescheduler.plugins import PLUGINS
    patterns = [re.escape(r).replace(r"\{resource\}", ".+").replace(r"\{\{\{key\}:\ \{value\}\}\}", r"\{.*\}")
                for p in PLUGINS for r in p.reasons]
    cordoned = node("c")
    cordoned["spec"] = {"unschedulable": True}
    tainted = node("t", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    nodes = [cordoned, tainted, node("g", group="other"), node("small", cpu="1"), node("full", pods="0")]
    ports = deploy("web", 2, requests={"cpu": "2"}, group="g")
    [p] = simulate([ports], nodes, {"hostTopologySpread": {"enabled": False}, "zoneTopologySpread": {"enabled": False}})
    [message] = p.reasons
    assert message == ("0/5 nodes are available: 1 Insufficient cpu, 1 Too many pods, 1 node(s) didn't match Pod's "
                       "node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were "
                       "unschedulable.")
    counted = re.fullmatch(r"0/5 nodes are available: (.*)\.", message)
    assert counted, message
    parts = [re.sub(r"^\d+ ", "", part) for part in counted.group(1).split(", ")]
    assert parts == sorted(parts) and len(parts) == 5
    assert all(any(re.fullmatch(pat, part) for pat in patterns) for part in parts), parts


def test_partition_feasibility_counts_no_pod_on_a_node_the_filters_refuse():
    """Rule V18 through the registry: a cordoned node (or one with an untolerated taint) holds none of a task's
    pods, so its tier-1 HyperNode cannot hold a partition; tolerating the taint gives the room back."""
    from policylib import mutate
    from policylib.facts import ClusterFacts
    from tests.test_volcano import DISCOVERY, job, seed_nodes, task
    config = load_config({"volcano": {"partitionSize": 2, "networkTopologyDiscovery": DISCOVERY}})
    nodes = seed_nodes({"huawei.com/ascend-1980": "16", "cpu": "64"})
    for n in nodes:
        if n["metadata"]["name"] in ("192.168.5.17", "192.168.5.235", "192.168.5.240", "192.168.5.83"):
            n["spec"] = {"unschedulable": True}        # one node of every tier-1 HyperNode
    r = mutate(job(task(replicas=4)), config, facts=ClusterFacts.from_objects(nodes))
    assert ("task t0: 2 partitions of 2 pods each need one tier-1 HyperNode holding 2 pods; the largest holds 1 pods "
            "(by allocatable)") in r.warnings
    tolerant = task(replicas=4)
    tolerant["template"]["spec"]["tolerations"] = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    r = mutate(job(tolerant), config, facts=ClusterFacts.from_objects(nodes))
    assert ("task t0: 2 partitions of 2 pods each fit in one tier-1 HyperNode (2 pods by allocatable); 4 tier-1 "
            "HyperNodes hold 8 pods") in r.reasons


# --- one snapshot, no circle: the import graph of the scheduler model --------------------------------

def _imports() -> dict[str, set[str]]:
    """Every policylib module and the policylib modules it imports (inside functions and TYPE_CHECKING too)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    out: dict[str, set[str]] = {}
    for path in sorted((root / "policylib").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[:-1]
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found: set[str] = set()
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom):
                base = package[: len(package) - n.level + 1] if n.level else []
                module = ".".join(base + ([n.module] if n.module else []))
                found.add(module)
                found.update(f"{module}.{a.name}" for a in n.names)
            elif isinstance(n, ast.Import):
                found.update(a.name for a in n.names)
        out[name] = {m for m in found if m.startswith("policylib")}
    return out


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_scheduler_model_sits_below_the_policies_and_the_simulator():
    """kube-scheduler's model (snapshot, plugins, registry) imports no policy, no simulator and no check; the
    engine walks the registry and imports no plugin module; the admission policies never import the simulator
    or check; check reaches the simulator through its facade only."""
    imports = _imports()
    model = {m: i for m, i in imports.items() if _under(m, "policylib.kubescheduler")}
    assert len(model) >= 10
    for module, names in model.items():
        assert not {n for n in names if _under(n, "policylib.simulate", "policylib.check", "policylib.mutate",
                                                "policylib.families", "policylib.spread", "policylib.gang",
                                                "policylib.volcano", "policylib.planners")}, module
    plugin_modules = {m for m in model if m.startswith("policylib.kubescheduler.plugins.")}
    assert not imports["policylib.simulate.engine"] & plugin_modules
    policies = [m for m in imports if _under(m, "policylib.families", "policylib.mutate", "policylib.volcano",
                                              "policylib.spread", "policylib.gang", "policylib.planners",
                                              "policylib.hypernodes")]
    for module in policies:
        assert not {n for n in imports[module] if _under(n, "policylib.simulate", "policylib.check")}, module
    inside = [m for m in imports if m.startswith("policylib.simulate.")]
    assert len(inside) >= 3
    for module in (m for m in imports if _under(m, "policylib.check")):
        assert not {n for n in imports[module] if _under(n, *inside)}, module


def test_the_volcano_package_names_the_kinds_without_loading_names_on_first_use():
    """policylib.volcano defines ``is_volcano_job`` (once in policylib) and no PEP 562 ``__getattr__``."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    defined = {}
    for path in (root / "policylib").rglob("*.py"):
        for n in ast.parse(path.read_text()).body:
            if isinstance(n, ast.FunctionDef) and n.name in ("is_volcano_job", "__getattr__"):
                defined.setdefault(n.name, []).append(str(path.relative_to(root)))
    assert defined == {"is_volcano_job": ["policylib/volcano/__init__.py"]}
