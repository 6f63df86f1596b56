"""A JobSet gang kept within one rack under Volcano (rules N3, N5, R18), end to end: ``topology.gangs.within: rack``
(levels declared with a rack Node label) makes policylib's controller put ``spec.networkTopology {mode: hard,
highestTierAllowed: 1}`` on the Volcano PodGroup of a JobSet the real JobSet v0.12.0 controller turns into pods
(``testcluster --volcano --jobset``). Volcano's label discovery builds one tier-1 HyperNode per rack from the same
label, and vc-scheduler (with its ``network-topology-aware`` plugin, ``e2e/cmd/testcluster/volcano.go``) lands the
gang in one rack, or binds none of it when its pods fit in the cluster only across racks. ``policylib check`` and
``simulate`` on the same objects give the same verdicts."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from policylib.check import check
from policylib.simulate import simulate

from .gang_operators import GROUP, LEASE_NS
from .harness import Cluster, bound, gang_webhook_and_controller, require_built, wait_for

RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
HYPERNODES = "hypernodes.topology.volcano.sh"
VC_PODGROUP = "podgroups.scheduling.volcano.sh"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: Volcano's label discovery of the racks: the rack label is tier 1, the hostname the node level.
DISCOVERY = [{"source": "label", "enabled": True,
              "config": {"networkTopologyTypes": {"racks": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}}}]
CONFIG = {"gang": {"method": "podgroup", "scheduler": "volcano"},
          "topology": {"levels": [{"name": "rack", "nodeLabel": RACK}, {"name": "host", "nodeLabel": HOST}],
                       "gangs": {"within": "rack", "mode": "required"}},
          "volcano": {"networkTopologyDiscovery": DISCOVERY},
          "controller": {"leaseDurationSeconds": 6}}
#: The same gangs without the topology declaration: where the pods fit at all.
UNPLACED = {"gang": {"method": "podgroup", "scheduler": "volcano"}}
#: Two racks of two Nodes of 2 CPUs: a rack holds 4 pods of 1 CPU, the two 8.
RACK_NODES = [(f"rack-{r}-{i}", f"rack-{r}") for r in "ab" for i in range(2)]
RACKS = {"rack-a": ["rack-a-0", "rack-a-1"], "rack-b": ["rack-b-0", "rack-b-1"]}
HARD_RACK = {"mode": "hard", "highestTierAllowed": 1}


def nodes_list() -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": name, "labels": {GROUP: "racks", RACK: rack, HOST: name}},
         "status": {"allocatable": {"cpu": "2", "memory": "64Gi", "pods": "110"}}} for name, rack in RACK_NODES]}


def discovery_configmap() -> dict:
    """Volcano's controller configuration (ConfigMap volcano-controller-configmap): label discovery of the racks."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "volcano-controller-configmap", "namespace": "volcano-system"},
            "data": {"volcano-controller.conf": yaml.safe_dump({"networkTopologyDiscovery": DISCOVERY})}}


def racks_discovered(c: Cluster) -> dict[str, list[str]] | None:
    """The rack of each label-discovered HyperNode and its member Nodes once there is one HyperNode per rack; a copy
    of one (Volcano v1.14.1's discovery can create two for one label value at start, see test_volcano_e2e's
    ``settle_hypernodes``) is deleted, the oldest kept, and discovery rebuilds from an up-to-date informer."""
    hns = c.list(HYPERNODES, selector="volcano.sh/network-topology-source=label")
    by_rack: dict[str, list[dict]] = {}
    for h in hns:
        by_rack.setdefault(h["metadata"]["labels"].get(RACK, "?"), []).append(h)
    extra = [h["metadata"]["name"] for group in by_rack.values()
             for h in sorted(group, key=lambda h: (h["metadata"]["creationTimestamp"], h["metadata"]["name"]))[1:]]
    if extra:
        c.kubectl("delete", HYPERNODES, *extra, "--ignore-not-found", "--wait=false")
        return None
    out = {rack: sorted(m["selector"]["exactMatch"]["name"] for m in h["spec"]["members"])
           for rack, [h] in by_rack.items() if h["spec"]["tier"] == 1}
    return out if out == RACKS else None


@pytest.fixture(scope="module")
def vt(harness_built, tmp_path_factory):
    """Volcano and JobSet's controller on two racks; Volcano's label discovery makes a tier-1 HyperNode per rack;
    policylib's webhook and controller with ``topology.gangs.within: rack``."""
    require_built("testcluster-volcano")
    tmp = tmp_path_factory.mktemp("gang-trainer-volcano-topology")
    nodes = tmp / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(nodes_list()))
    c = Cluster(tmp / "c", nodes=nodes, extra_args=("--volcano",), jobset=True)
    try:
        c.apply(discovery_configmap())
        wait_for("Volcano's label discovery makes one tier-1 HyperNode per rack", lambda: racks_discovered(c),
                 timeout=180, interval=1)
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, CONFIG, tmp, "gang-trainer-volcano-topology", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


@pytest.fixture
def ns(vt, request):
    """A namespace for policylib's webhook; deleted with its JobSet and pods afterwards, so each test has both
    racks free."""
    name = vt.namespace(request.node.name.replace("_", "-")[5:45].strip("-"), config="gang")
    yield name
    vt.kubectl("delete", "namespace", name, "--wait=true", "--timeout=180s", timeout=240)


def jobset(name: str, ns: str, pods: int) -> dict:
    """A JobSet of one ReplicatedJob: one Indexed Job of ``pods`` pods of 1 CPU on the racks, for Volcano."""
    spec = {"schedulerName": "volcano", "nodeSelector": {GROUP: "racks"}, "containers": [
        {"name": "worker", "image": "registry.example/train:1",
         "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {"spec": spec}}}}]}}


def rack_nodes(c: Cluster) -> list[dict]:
    return [n for n in c.list("nodes") if n["metadata"]["labels"].get(GROUP) == "racks"]


def rack_of(node: str) -> str:
    return dict(RACK_NODES)[node]


def jobset_pods(c: Cluster, ns: str) -> list[dict]:
    return c.list("pods", ns, selector=f"{JOBSET_NAME_LABEL}=train")


def submit(c: Cluster, obj: dict, pods: int) -> dict:
    """The JobSet through the API server; returns policylib's Volcano PodGroup once its controller made it and the
    Job controller made the ``pods`` pods."""
    c.kubectl("create", "-f", "-", input=json.dumps(obj))
    ns = obj["metadata"]["namespace"]
    pg = wait_for("the controller creates the Volcano PodGroup", lambda: c.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    wait_for(f"JobSet {ns}/train's Job creates {pods} pods", lambda: len(jobset_pods(c, ns)) == pods, timeout=150)
    return pg


@pytest.mark.proves(
    scheduler="Volcano v1.14.1 (`network-topology-aware`), HyperNodes from label discovery of the rack label",
    settings="`method: podgroup`, `scheduler: volcano`, `topology.gangs.within: rack` (required)",
    operator="JobSet v0.12.0 controller", jobs="JobSet of one Indexed Job of 4 pods; two racks of 4 CPUs",
    outcome=("policylib's PodGroup carries `networkTopology {mode: hard, highestTierAllowed: 1}`; all 4 pods bind in "
             "one rack, as `simulate` predicts and `check` finds no error"))
@pytest.mark.timeout(420)
def test_a_volcano_jobset_gang_within_a_rack_lands_in_one_rack(report, vt, ns):
    c = vt
    obj = jobset("train", ns, 4)
    assert [(f.key, f.message) for f in check(CONFIG, rack_nodes(c), [obj]) if f.severity == "error"] == []
    [predicted] = simulate([obj], rack_nodes(c), CONFIG)
    assert predicted.pending == 0 and sum(predicted.placed.values()) == 4, predicted
    assert len({rack_of(n) for n in predicted.placed}) == 1, predicted
    pg = submit(c, obj, 4)
    assert (pg["spec"]["minMember"], pg["spec"]["networkTopology"]) == (4, HARD_RACK)
    wait_for("all 4 pods bound", lambda: len(bound(jobset_pods(c, ns))) == 4, timeout=180)
    nodes = sorted(p["spec"]["nodeName"] for p in jobset_pods(c, ns))
    assert len({rack_of(n) for n in nodes}) == 1, nodes
    assert nodes == sorted(RACKS[rack_of(nodes[0])] * 2), nodes   # the rack's two Nodes, full
    report(f"Volcano, topology.gangs.within rack: JobSet {ns}/train's 4 pods bound on {', '.join(nodes)} "
           f"(all in {rack_of(nodes[0])})")


@pytest.mark.proves(
    scheduler="Volcano v1.14.1 (`network-topology-aware`), HyperNodes from label discovery of the rack label",
    settings="`method: podgroup`, `scheduler: volcano`, `topology.gangs.within: rack` (required)",
    operator="JobSet v0.12.0 controller", jobs="JobSet of 5 pods; two racks of 4 CPUs (8 in all)",
    outcome=("`simulate` places the 5 pods without the declaration and none with it, `check` names the rack; none "
             "binds; Volcano marks the PodGroup Unschedulable with its own reason"))
@pytest.mark.timeout(420)
def test_a_volcano_jobset_gang_that_fits_only_across_racks_binds_nothing(report, vt, ns):
    c = vt
    obj = jobset("train", ns, 5)
    [anywhere] = simulate([obj], rack_nodes(c), UNPLACED)
    assert (anywhere.pending, sum(anywhere.placed.values())) == (0, 5), anywhere
    [predicted] = simulate([obj], rack_nodes(c), CONFIG)
    assert (predicted.pending, predicted.placed) == (5, {}), predicted
    assert re.fullmatch(r"wave 1: networkTopology hard highestTierAllowed 1: no HyperNode of tier <= 1 holds the "
                        r"gang's minimum 5 pods at once \(pods placeable per HyperNode: hypernode-racks-tier1-\w{5} 4, "
                        r"hypernode-racks-tier1-\w{5} 4\): .*", predicted.reasons[0]), predicted.reasons
    assert [(f.key, f.message) for f in check(CONFIG, rack_nodes(c), [obj]) if f.severity == "error"] == [(
        "gang.topology", f"JobSet {ns}/train: its gang needs 5 pods at once; the one HyperNode of tier <= 1 can hold 4 "
                         "of them now: Volcano would keep its PodGroup Unschedulable and start none of them")]
    pg = submit(c, obj, 5)
    assert (pg["spec"]["minMember"], pg["spec"]["networkTopology"]) == (5, HARD_RACK)
    ever: set[str] = set()

    def gang_verdict():
        """Volcano's gang plugin's condition once the session saw all 5 pods (before that, the session's job
        validity check may write one of its own, with the same reason: `... 3 Pending, 5 minAvailable`)."""
        ever.update(bound(jobset_pods(c, ns)))
        status = c.get(VC_PODGROUP, "train", ns).get("status") or {}
        found = [x for x in status.get("conditions") or [] if x.get("type") == "Unschedulable"
                 and x.get("reason") == "NotEnoughResources" and "5 Pending" in x.get("message", "")]
        return ever or found
    seen = wait_for("Volcano marks the gang Unschedulable", gang_verdict, timeout=180)
    assert not ever, f"pods of a gang that fits no rack were bound: {sorted(ever)}"
    [condition] = seen
    # The gang plugin (v1.14.1 gang.go OnSessionClose): minAvailable less the pods allocated in the last HyperNode
    # tried (4 of a rack's 4 CPUs), then the fit error of the pod that did not fit there.
    origin = re.fullmatch(
        r"1/5 tasks in gang unschedulable: pod group is not ready, 5 Pending, 5 minAvailable; Pending: 1 "
        r"Unschedulable, 4 Schedulable\. Origin reason is (?P<pod>\S+): In hyperNode (?P<hypernode>\S+): 0/2 nodes "
        r"are unavailable: 2 Insufficient cpu\.", condition["message"])
    assert (condition["status"], origin is not None) == ("True", True), condition
    assert origin["pod"] in {p["metadata"]["name"] for p in jobset_pods(c, ns)}, condition
    assert origin["hypernode"] in {h["metadata"]["name"] for h in c.list(HYPERNODES)}, condition
    assert bound(jobset_pods(c, ns)) == []
    report(f"Volcano, topology.gangs.within rack: JobSet {ns}/train's 5 pods all Pending; PodGroup Unschedulable, "
           f"{condition['reason']}: {condition['message']}")
