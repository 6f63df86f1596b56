"""A native gang in one rack, end to end on both minors (rule G25): ``gang.topology: tier-1`` (the rack label of
``volcano.networkTopologyDiscovery``) writes ``schedulingConstraints.topology`` on the PodGroup (``v1beta1`` on 1.37,
``v1alpha2`` on 1.36), and the real kube-scheduler with ``TopologyAwareWorkloadScheduling`` (``testcluster
--kubernetes 1.37 --feature-gates GenericWorkload=true,TopologyAwareWorkloadScheduling=true``; on 1.36 with
``GangScheduling`` too) places the gang inside one rack of two, or leaves it Pending with its reason when no rack
holds it. ``policylib simulate`` and ``check`` predict both outcomes."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from policylib.simulate import simulate

from .gang_operators import GROUP, LEASE_NS, bound, create, job_pods, tfjob, wait_pods
from .harness import WORKLOAD_API, WORKLOAD_GATES, Cluster, Controller, Webhook, require_built, wait_for
from .util import POLICYLIB

#: Both minors (the ``minor`` fixture): the field and the plugin are in 1.36's v1alpha2 and 1.37's v1beta1.
pytestmark = pytest.mark.minors()
RACK = "example.com/rack"
GATES = {minor: f"{gates},TopologyAwareWorkloadScheduling=true" for minor, gates in WORKLOAD_GATES.items()}
VERSION = {minor: api.rpartition("/")[2] for minor, api in WORKLOAD_API.items()}
#: The PodGroup condition kube-scheduler's pod group cycle writes (scheduling/v1alpha2 and v1beta1 types.go).
CONDITION = {"1.36": "PodGroupScheduled", "1.37": "PodGroupInitiallyScheduled"}
CONFIG = {"gang": {"method": "workload", "scheduler": "kube-scheduler", "topology": "tier-1"},
          "volcano": {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {"racks": [
              {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]},
          "controller": {"leaseDurationSeconds": 6}}
#: Two racks of two Nodes of 2 CPUs: a rack holds 4 pods of 1 CPU, the two 8.
NODES = [(f"rack-{r}-{i}", f"rack-{r}") for r in "ab" for i in range(2)]


def node_file(tmp) -> str:
    items = [{"kind": "Node", "metadata": {"name": name, "labels": {GROUP: "racks", RACK: rack,
                                                                    "kubernetes.io/hostname": name}},
              "status": {"allocatable": {"cpu": "2", "memory": "64Gi", "pods": "110"}}} for name, rack in NODES]
    path = tmp / "rack-nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.fixture(scope="module")
def racks(harness_built, tmp_path_factory, minor):
    """training-operator on a cluster of each minor with the topology gate and Nodes in two racks; policylib's
    webhook and controller with gang method workload and gang.topology tier-1."""
    tmp = tmp_path_factory.mktemp(f"gang-topology-{minor}")
    require_built("testcluster-training-operator")
    c = Cluster(tmp / "c", nodes=node_file(tmp), extra_args=("--training-operator", "--feature-gates", GATES[minor]),
                minor=minor)
    hook = ctl = None
    try:
        c.namespace(LEASE_NS)
        hook = Webhook(c, "gang", CONFIG, tmp).start()
        hook.register()
        ctl = leader = Controller(c, CONFIG, tmp, "gang-topology", LEASE_NS)
        wait_for("the controller leads", lambda: leader.status()["leader"], timeout=60)
        yield c, tmp
    finally:
        for proc in (ctl, hook):
            if proc:
                proc.stop()
        assert c.stop() == 0


def rack_of(c, node: str) -> str:
    return c.get("nodes", node)["metadata"]["labels"][RACK]


def podgroup(c, ns: str) -> dict | None:
    return c.get_or_none(f"podgroups.{VERSION[c.minor]}.scheduling.k8s.io", "train", ns)


@pytest.mark.proves(scheduler="kube-scheduler, the gates of each minor and `TopologyAwareWorkloadScheduling`; Nodes "
                              "in two racks",
                    settings="`method: workload`, `topology: tier-1` (the rack label of `networkTopologyDiscovery`)",
                    operator="training-operator, none", jobs="TFJob of 3 pods, which one rack holds",
                    outcome=("the PodGroup carries `schedulingConstraints.topology [example.com/rack]`; all 3 pods bind "
                             "in one rack, as `policylib simulate` predicts"))
@pytest.mark.timeout(300)
def test_a_gang_that_fits_one_rack_lands_in_one_rack(report, racks):
    c, tmp = racks
    ns = c.namespace("topology-fits", config="gang")
    job = tfjob("train", ns, "racks", None, ps=1, workers=2)
    [predicted] = simulate([job], c.list("nodes"), CONFIG)
    assert len({rack_of(c, n) for n in predicted.placed}) == 1 and predicted.pending == 0
    stored = create(c, job)
    pg = wait_for("the controller creates the PodGroup", lambda: podgroup(c, ns), timeout=90)
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    assert pg["apiVersion"] == f"scheduling.k8s.io/{VERSION[c.minor]}"
    wait_pods(c, ns, stored, 3)
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 3, timeout=150)
    nodes = sorted(p["spec"]["nodeName"] for p in job_pods(c, ns, stored))
    placed = {rack_of(c, n) for n in nodes}
    assert len(placed) == 1, nodes
    report(f"Kubernetes {c.minor}: TFJob {ns}/train, PodGroup {pg['apiVersion']} topology {RACK}: 3 pods bound "
                    f"on {', '.join(nodes)}, all in {placed.pop()}")


@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="`method: workload`, `topology: tier-1`",
                    operator="training-operator, none",
                    jobs="TFJob of 5 pods: the two racks hold 8 between them, neither 5",
                    outcome=("`policylib check` and `simulate` predict it; nothing binds; the PodGroup says "
                             "`0/2 placements are available`"))
@pytest.mark.timeout(300)
def test_a_gang_that_fits_no_rack_stays_pending_with_the_schedulers_reason(report, racks):
    c, tmp = racks
    ns = c.namespace("topology-none", config="gang")
    job = tfjob("train", ns, "racks", None, ps=1, workers=4)
    nodes = [n for n in c.list("nodes") if n["metadata"]["labels"].get(GROUP) == "racks"]
    [predicted] = simulate([job], nodes, CONFIG)
    assert (predicted.pending, predicted.placed) == (5, {})
    assert predicted.reasons[0].startswith(f"topology {RACK}: 0/2 placements are available")
    cfg = tmp / "check-topology.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    stored = create(c, job)
    wait_pods(c, ns, stored, 5)
    pg = wait_for("the controller creates the PodGroup", lambda: podgroup(c, ns), timeout=90)
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    ever: set[str] = set()

    def condition():
        ever.update(bound(job_pods(c, ns, stored)))
        found = [x for x in ((podgroup(c, ns) or {}).get("status") or {}).get("conditions") or []
                 if x["type"] == CONDITION[c.minor]]
        return ever or (found[0] if found else None)
    seen = wait_for("the scheduler's verdict on the PodGroup", condition, timeout=150)
    assert not ever, f"pods of a gang that fits no rack were bound: {sorted(ever)}"
    assert (seen["status"], seen["reason"]) == ("False", "Unschedulable")
    assert "0/2 placements are available" in seen["message"], seen["message"]
    run = subprocess.run([*POLICYLIB, "check", "--cluster", "--config", str(cfg), "-n", ns, "-o", "json"],
                         capture_output=True, text=True, env=c.env, timeout=120)
    findings = json.loads(run.stdout or "[]")
    errors = [f["message"] for f in findings if f["severity"] == "error" and f["key"] == "gang.topology"]
    assert errors == [f"TFJob {ns}/train: its gang needs 5 pods at once; the one {RACK} domain can hold 4 of them now: "
                      "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"], (findings, run.stderr)
    assert any(f["key"] == "gang.topology" and f["severity"] == "info" and "TopologyAwareWorkloadScheduling" in
               f["message"] for f in findings), findings   # the API server kept the constraint: no warning
    report(f"Kubernetes {c.minor}: TFJob {ns}/train (5 pods), topology {RACK}: 0 bound; PodGroup "
                    f"{seen['type']} {seen['status']} {seen['reason']}: {seen['message']}")
