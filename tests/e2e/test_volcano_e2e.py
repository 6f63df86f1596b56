"""Volcano for real: ``testcluster --volcano --volcano-vap`` runs Volcano's admission webhooks, its
ValidatingAdmissionPolicies, its controller manager (jobs, PodGroups, queues, HyperNode label
discovery) and its scheduler with the network-topology-aware plugin (``make testcluster-volcano``
builds them from the volcano.sh/volcano module; e2e/volcano/go.mod says which release).

On a cluster of its own: the eight Nodes and four leaf HyperNodes of the specification's example
(node0..node7 labelled test-tier-1/2/3), whose Nodes each hold one pod of the example's Job (16
``huawei.com/ascend-1980``). Four of them also offer one ``example.com/accel``: both nodes of one
tier-1 HyperNode and one node of two others, so only one tier-1 HyperNode has room for a partition
of two accelerator pods.
"""
from __future__ import annotations

import json
import subprocess
from itertools import count

import pytest
import yaml

from .harness import ROOT, SHARED, Cluster, Timeout, Webhook, refused, require_built, wait_for
from .util import POLICYLIB

EXAMPLES = SHARED / "examples" / "volcano"
TOPOLOGY = [{"nodeLabel": k} for k in ("test-tier-3", "test-tier-2", "test-tier-1", "kubernetes.io/hostname")]
DISCOVERY = [{"source": "label", "enabled": True, "config": {"networkTopologyTypes": {"testtopology": TOPOLOGY}}}]
#: The policy config of the webhook under test: Volcano v1.14.1's rules, partitions of 2, tier 1.
CONFIG = {"volcano": {"version": "v1.14.1", "partitionSize": 2, "networkTopologyDiscovery": DISCOVERY}}
ACCEL = "example.com/accel"
ASCEND = "huawei.com/ascend-1980"
TIER1 = ["HyperNode0", "HyperNode0", "HyperNode1", "HyperNode1", "HyperNode2", "HyperNode2", "HyperNode3", "HyperNode3"]
WITH_ACCEL = {"node0", "node1", "node2", "node4"}

#: The specification's own Job (its example of rescheduling by partition), verbatim.
SPEC_JOB = yaml.safe_load("""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: network-topology-job
  namespace: default
spec:
  schedulerName: volcano
  policies:
  - action: RestartPartition
    event: PodEvicted
  minAvailable: 4
  tasks:
    - replicas: 4
      name: t0
      partitionPolicy:
        totalPartitions: 2
        partitionSize: 2
        networkTopology:
          mode: hard
          highestTierAllowed: 1
      template:
        spec:
          containers:
            - name: container1
              image: nginx:latest
              resources:
                requests:
                  huawei.com/ascend-1980: 16
                limits:
                  huawei.com/ascend-1980: 16
""")


def nodes_list() -> dict:
    items = []
    for i, leaf in enumerate(TIER1):
        allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110", ASCEND: "16"}
        if f"node{i}" in WITH_ACCEL:
            allocatable[ACCEL] = "1"
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node{i}", "labels": {
            "test-tier-3": "HyperNode6", "test-tier-2": f"HyperNode{4 + i // 4}", "test-tier-1": leaf}},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable)}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def discovery_configmap() -> dict:
    """Volcano's controller configuration (ConfigMap volcano-controller-configmap): label discovery."""
    conf = {"networkTopologyDiscovery": DISCOVERY}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "volcano-controller-configmap", "namespace": "volcano-system"},
            "data": {"volcano-controller.conf": yaml.safe_dump(conf)}}


@pytest.fixture(scope="module")
def volcano(harness_built, tmp_path_factory) -> Cluster:
    """The cluster with Volcano; ``make testcluster-volcano`` first (a failed build fails the tests)."""
    require_built("testcluster-volcano")
    tmp = tmp_path_factory.mktemp("volcano-cluster")
    nodes = tmp / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(nodes_list()))
    config = tmp / "policylib.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    c = Cluster(tmp / "c", nodes=nodes, extra_args=("--volcano", "--volcano-vap"))
    c.tmp, c.nodes_file, c.config_file = tmp, nodes, config
    c.apply(discovery_configmap())
    c.removed_copies = settle_hypernodes(c)
    yield c
    assert c.stop() == 0, c.stderr_text()


@pytest.fixture(scope="module")
def hook(volcano) -> Webhook:
    """policylib's webhook with CONFIG, for namespaces labelled with its name."""
    h = Webhook(volcano, "volcano", CONFIG, volcano.tmp).start()
    h.register()
    yield h
    h.stop()


_serial = count(1)


@pytest.fixture
def vns(volcano, request):
    """A fresh namespace name (the test creates it, labelled for the webhook or not); deleted afterwards."""
    base = request.node.name.lower().replace('_', '-').replace('[', '-').replace(']', '').replace('.', '-')[:40]
    name = f"{base.strip('-')}-{next(_serial)}"
    yield name
    volcano.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=180s", timeout=240)


# --- policylib's side ---------------------------------------------------------------------------

def policylib(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*POLICYLIB, *args], input=input, capture_output=True, text=True, cwd=ROOT, timeout=120)


def preview(volcano: Cluster, job: dict, output: str, with_nodes: bool = False) -> subprocess.CompletedProcess:
    args = ["preview", "--config", str(volcano.config_file), "-f", "-", "-o", output]
    if with_nodes:
        args += ["-f", str(volcano.nodes_file)]
    run = policylib(*args, input=yaml.safe_dump(job))
    assert run.returncode == 0, run.stderr
    return run


def policylib_patch(volcano: Cluster, job: dict) -> list[dict]:
    """The JSON patch policylib's webhook would answer for ``job`` (``policylib preview -o patch``)."""
    return json.loads(preview(volcano, job, "patch").stdout.splitlines()[0])


def policylib_object(volcano: Cluster, job: dict) -> dict:
    return next(d for d in yaml.safe_load_all(preview(volcano, job, "yaml").stdout) if d)


# --- reading what was stored --------------------------------------------------------------------

_MISSING = object()


def at(obj, path: str):
    """The value at a JSON pointer, or _MISSING."""
    for part in [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]:
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return _MISSING
    return obj


def carries(stored, wrote) -> bool:
    """``stored`` holds everything of ``wrote`` (the API server and Volcano may add defaults beside it)."""
    if isinstance(wrote, dict):
        return isinstance(stored, dict) and all(k in stored and carries(stored[k], v) for k, v in wrote.items())
    if isinstance(wrote, list):
        return isinstance(stored, list) and len(stored) == len(wrote) and all(map(carries, stored, wrote))
    return stored == wrote


def fields_policylib_wrote(patch: list[dict], mutated: dict) -> dict[str, object]:
    """Each path policylib's patch touched and its value in policylib's result (_MISSING: removed)."""
    out = {}
    for op in patch:
        path = op["path"]
        parent, _, last = path.rpartition("/")
        if last.isdigit() or last == "-":   # an element of a list: the whole list is policylib's answer
            path = parent
        out[path] = at(mutated, path)
    return out


# --- the examples: mutated, admitted by Volcano, stored with what policylib wrote -----------------

def example_jobs() -> list:
    if not EXAMPLES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{EXAMPLES} is absent"))]
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Job" and "invalid" not in path.name:
                out.append(pytest.param(doc, id=path.stem))
    return out + [pytest.param(SPEC_JOB, id="specification-job")]


@pytest.mark.parametrize("job", example_jobs())
def test_example_mutated_admitted_by_volcano_and_stored_as_written(volcano, hook, vns, job):
    job = json.loads(json.dumps(job))
    job["metadata"]["namespace"] = vns
    volcano.namespace(vns, config=hook.name)
    patch = policylib_patch(volcano, job)
    wrote = fields_policylib_wrote(patch, policylib_object(volcano, job))
    # policylib's port of Volcano's job admission agrees: nothing it would still deny.
    assert "would still be denied" not in preview(volcano, job, "patch").stderr
    run = volcano.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(job), check=False)
    assert run.returncode == 0, f"Volcano denied {job['metadata']['name']} as policylib mutated it: {run.stderr}"
    stored = volcano.get("jobs.batch.volcano.sh", job["metadata"]["name"], vns)
    for path, value in wrote.items():
        got = at(stored, path)
        if value is _MISSING:
            assert got is _MISSING, f"{path}: policylib removed it, stored has {got!r}"
        else:
            assert carries(got, value), f"{path}: policylib wrote {value!r}, stored has {got!r}"
    # Volcano's own mutation ran too: it names the queue and the job-level minAvailable.
    assert stored["spec"]["queue"] == "default" and stored["spec"]["minAvailable"] >= 1


def test_invalid_example_is_denied_by_volcano(volcano, hook, vns):
    path = EXAMPLES / "invalid-duplicated-policy-event.yaml"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    job = yaml.safe_load(path.read_text())
    job["metadata"]["namespace"] = vns
    volcano.namespace(vns, config=hook.name)
    run = volcano.kubectl("create", "-f", "-", input=json.dumps(job), check=False)
    assert run.returncode != 0
    assert "job-validation-policy" in run.stderr and "duplicate policy event found" in run.stderr, run.stderr
    # policylib said so too (its port of Volcano's job admission), and left the Job alone.
    said = preview(volcano, job, "patch")
    assert json.loads(said.stdout) == []
    assert ("would still be denied by Volcano's job admission (v1.14.1): spec.policies[1]: Invalid value: "
            "\"PodFailed\": duplicate event PodFailed across different policy (also in spec.policies[0])") in said.stderr


def test_volcano_vap_denies_the_specification_job_unless_policylib_moved_its_policy(volcano, vns):
    """--volcano-vap is in force: Volcano's job ValidatingAdmissionPolicy denies a job-level RestartPartition
    (its action list lacks it), which is why policylib moves that policy into the partitioned task."""
    volcano.namespace(vns)   # no policylib webhook here
    job = json.loads(json.dumps(SPEC_JOB))
    job["metadata"]["namespace"] = vns
    run = volcano.kubectl("create", "-f", "-", input=json.dumps(job), check=False)
    assert run.returncode != 0 and "job-validation-policy" in run.stderr and "invalid policy action" in run.stderr, \
        run.stderr
    mutated = policylib_object(volcano, job)
    assert volcano.kubectl("create", "-f", "-", input=json.dumps(mutated), check=False).returncode == 0


# --- HyperNodes: Volcano's label discovery == policylib hypernodes ----------------------------------

def canonical_each(hypernodes: list[dict]) -> list[tuple[str, tuple]]:
    """(name, the HyperNode without its random name): tier, tierName, its label value, its labels, its
    member types and members (Node names; member HyperNodes by their label value)."""
    key = {h["metadata"]["name"]: h["metadata"]["labels"].get(h["spec"].get("tierName", ""), "?") for h in hypernodes}
    out = []
    for h in hypernodes:
        members = sorted(key.get(m["selector"]["exactMatch"]["name"], "?") if m["type"] == "HyperNode"
                         else m["selector"]["exactMatch"]["name"] for m in h["spec"]["members"])
        labels = tuple(sorted(h["metadata"]["labels"].items()))
        out.append((h["metadata"]["name"], (h["spec"]["tier"], h["spec"].get("tierName"), key[h["metadata"]["name"]],
                                            labels, tuple(sorted({m["type"] for m in h["spec"]["members"]})),
                                            tuple(members))))
    return out


def canonical(hypernodes: list[dict]) -> list[tuple]:
    return sorted(entry for _, entry in canonical_each(hypernodes))


def volcano_hypernodes(volcano: Cluster) -> list[dict]:
    return volcano.list("hypernodes.topology.volcano.sh", selector="volcano.sh/network-topology-source=label")


def copies(hypernodes: list[dict]) -> list[dict]:
    """HyperNodes that duplicate another one exactly (same tier, label, members): of each such group one
    stays, one that a parent HyperNode references if any, else the oldest."""
    referenced = {m["selector"]["exactMatch"]["name"] for h in hypernodes for m in h["spec"]["members"]
                  if m["type"] == "HyperNode"}
    groups: dict[tuple, list[dict]] = {}
    by_name = {h["metadata"]["name"]: h for h in hypernodes}
    for name, entry in canonical_each(hypernodes):
        groups.setdefault(entry, []).append(by_name[name])
    out = []
    for group in groups.values():
        group.sort(key=lambda h: (h["metadata"]["name"] not in referenced, h["metadata"]["creationTimestamp"],
                                  h["metadata"]["name"]))
        out += group[1:]
    return out


def settle_hypernodes(volcano: Cluster) -> list[str]:
    """Wait until label discovery has built the 7 HyperNodes of the 8 Nodes, with no copies.

    Volcano v1.14.1's discovery runs twice at start (the ConfigMap, then the Node informer's adds). The
    second run looks existing HyperNodes up through an informer that can lag the first run's creates, so it
    creates a second HyperNode for the same label value (seen at every tier); a tier-2 HyperNode then has two
    tier-3 parents and vc-scheduler refuses the topology ("already has a parent"). Deleting the copies
    makes the controller rediscover (it watches HyperNode deletes) with an up-to-date informer, and it
    reconciles. Returns the names of the copies deleted."""
    removed: list[str] = []

    def settled():
        hns = volcano_hypernodes(volcano)
        extra = [h["metadata"]["name"] for h in copies(hns)]
        if extra:
            volcano.kubectl("delete", "hypernodes.topology.volcano.sh", *extra, "--ignore-not-found", "--wait=false")
            removed.extend(extra)
            return None
        members = {m["selector"]["exactMatch"]["name"] for h in hns if h["spec"]["tier"] == 1 for m in h["spec"]["members"]}
        return len(hns) == 7 and len(members) == 8
    wait_for("Volcano's label discovery settled on 7 HyperNodes without copies", settled, timeout=180, interval=1)
    return removed


def test_label_discovery_builds_what_policylib_hypernodes_builds(volcano):
    run = policylib("hypernodes", "-f", str(volcano.nodes_file), "--config", str(volcano.config_file))
    assert run.returncode == 0, run.stderr
    ours = canonical([h for h in yaml.safe_load_all(run.stdout) if h])
    assert [(t, n) for t, n, *_ in ours] == [(1, "test-tier-1")] * 4 + [(2, "test-tier-2")] * 2 + [(3, "test-tier-3")]

    def discovered():
        hns = volcano_hypernodes(volcano)
        extra = [h["metadata"]["name"] for h in copies(hns)]
        if extra:   # the start-up race settle_hypernodes describes, run again by a later rediscovery under load
            volcano.kubectl("delete", "hypernodes.topology.volcano.sh", *extra, "--ignore-not-found", "--wait=false")
            volcano.removed_copies.extend(extra)
            return None
        seen[:] = [canonical(hns)]
        return seen[0] if seen[0] == ours else None
    seen: list = []
    try:
        wait_for("Volcano's label discovery builds policylib's HyperNodes", discovered, timeout=180)
    except Timeout as e:
        raise AssertionError(f"{e}: Volcano's {seen}, policylib's {ours}") from None
    # Copies the fixture removed (settle_hypernodes: a race in Volcano v1.14.1) are listed in the log.
    print(f"copies of HyperNodes Volcano made at start and the fixture deleted: {volcano.removed_copies}")


# --- scheduling: partitions inside one tier-1 HyperNode, gangs, RestartPartition -------------------

def leaf_of(volcano: Cluster) -> dict[str, str]:
    """Node name -> the label value of the tier-1 HyperNode that Volcano's discovery put it in."""
    out = {}
    for h in volcano_hypernodes(volcano):
        if h["spec"]["tier"] == 1:
            for m in h["spec"]["members"]:
                out[m["selector"]["exactMatch"]["name"]] = h["metadata"]["labels"]["test-tier-1"]
    return out


def job_pods(volcano: Cluster, ns: str, job: str) -> list[dict]:
    return [p for p in volcano.list("pods", ns, f"volcano.sh/job-name={job}") if not p["metadata"].get("deletionTimestamp")]


def partitions(pods: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        out.setdefault(p["metadata"]["labels"]["volcano.sh/partition-id"], []).append(p)
    return out


def running(volcano: Cluster, ns: str, job: str, n: int) -> list[dict] | None:
    pods = job_pods(volcano, ns, job)
    ok = len(pods) == n and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def submit_spec_job(volcano: Cluster, hook: Webhook | None, ns: str) -> list[dict]:
    """The specification's Job through policylib's webhook (as submitted without ``hook``); returns its
    four pods once Running."""
    volcano.namespace(ns, config=hook.name if hook else None)
    job = json.loads(json.dumps(SPEC_JOB))
    job["metadata"]["namespace"] = ns
    volcano.kubectl("create", "-f", "-", input=json.dumps(job))
    return wait_for(f"{ns}: 4 pods of the specification's Job Running", lambda: running(volcano, ns, "network-topology-job", 4),
                    timeout=180)


def assert_each_partition_in_one_leaf(volcano: Cluster, pods: list[dict]) -> dict[str, str]:
    leaf = leaf_of(volcano)
    where = {}
    for pid, members in partitions(pods).items():
        leaves = {leaf[p["spec"]["nodeName"]] for p in members}
        assert len(members) == 2 and len(leaves) == 1, \
            f"partition {pid}: {[(p['metadata']['name'], p['spec']['nodeName']) for p in members]}"
        where[pid] = leaves.pop()
    return where


def test_specification_job_partitions_land_inside_one_tier1_hypernode(volcano, hook, vns):
    wait_for("HyperNodes discovered", lambda: len(leaf_of(volcano)) == 8, timeout=120)
    pods = submit_spec_job(volcano, hook, vns)
    where = assert_each_partition_in_one_leaf(volcano, pods)
    assert sorted(where) == ["0", "1"] and len(set(where.values())) == 2   # one node per pod: two leaves
    pg = volcano.list("podgroups.scheduling.volcano.sh", vns)[0]
    assert pg["spec"]["minMember"] == 4
    assert [(g["subGroupSize"], g["networkTopology"]) for g in pg["spec"]["subGroupPolicy"]] == \
        [(2, {"mode": "hard", "highestTierAllowed": 1})]
    # policylib simulate agrees: every pod placed, each partition inside one tier-1 HyperNode.
    sim = simulate(volcano, SPEC_JOB)
    assert (sim["pending"], sum(sim["placed"].values())) == (0, 4)


def simulate(volcano: Cluster, job: dict) -> dict:
    run = policylib("simulate", "--config", str(volcano.config_file), "-f", "-", "--nodes",
                    str(volcano.nodes_file), "-o", "json", input=yaml.safe_dump(job))
    assert run.returncode in (0, 3), run.stderr
    [placement] = json.loads(run.stdout)
    assert (run.returncode == 3) == (placement["pending"] > 0)
    return placement


def accel_job(ns: str) -> dict:
    """Four pods of one accelerator each; policylib partitions them in two of two (partitionSize 2)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "accel", "namespace": ns},
            "spec": {"schedulerName": "volcano", "tasks": [{"name": "worker", "replicas": 4, "template": {"spec": {
                "containers": [{"name": "c", "image": "registry.example/train:1",
                                "resources": {"limits": {ACCEL: "1"}}}]}}}]}}


def test_job_stays_pending_as_a_gang_when_one_tier1_hypernode_has_room(volcano, hook, vns):
    job = accel_job(vns)
    # What policylib says: not feasible (preview), nothing placed (simulate).
    warnings = preview(volcano, job, "yaml", with_nodes=True).stderr
    assert ("task worker: 2 partitions of 2 pods each need one tier-1 HyperNode holding 2 pods; the 4 tier-1 "
            "HyperNodes hold 4 pods (by allocatable), room for 1 partitions") in warnings
    sim = simulate(volcano, job)
    assert (sim["placed"], sim["pending"]) == ({}, 4)
    # What Volcano does.
    volcano.namespace(vns, config=hook.name)
    volcano.kubectl("create", "-f", "-", input=json.dumps(job))
    stored = volcano.get("jobs.batch.volcano.sh", "accel", vns)
    assert stored["spec"]["tasks"][0]["partitionPolicy"]["minPartitions"] == 2

    def held():
        pods = job_pods(volcano, vns, "accel")
        pgs = volcano.list("podgroups.scheduling.volcano.sh", vns)
        unschedulable = [c for pg in pgs for c in (pg.get("status") or {}).get("conditions") or []
                         if c["type"] == "Unschedulable" and c["status"] == "True"]
        return (pods, unschedulable) if len(pods) == 4 and unschedulable else None
    pods, conditions = wait_for("the scheduler found the gang unschedulable", held, timeout=120)
    assert "Insufficient example.com/accel" in conditions[0]["message"], conditions
    bound = [p["metadata"]["name"] for p in job_pods(volcano, vns, "accel") if p["spec"].get("nodeName")]
    assert bound == [], f"half-bound gang: {bound}"


def test_partition_tier_name_is_not_enforced_by_volcano_v1_14(volcano, hook, vns):
    """A partition bounded by ``highestTierName`` (not ``highestTierAllowed``): vc-scheduler v1.14.1 ignores it
    (volcano issue 5189, fixed in v1.15.0) and binds the whole Job across tier-1 HyperNodes, although only
    one of them has room for a partition. policylib for v1.14.1 says so: a warning, and simulate places all."""
    job = accel_job(vns)
    job["spec"]["tasks"][0]["partitionPolicy"] = {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
                                                  "networkTopology": {"mode": "hard", "highestTierName": "test-tier-1"}}
    warnings = preview(volcano, job, "yaml", with_nodes=True).stderr
    assert ("task worker: partitionPolicy.networkTopology.highestTierName 'test-tier-1' is not enforced by Volcano "
            "v1.14.1's scheduler (from v1.15.0); use highestTierAllowed") in warnings
    sim = simulate(volcano, job)
    assert (sorted(sim["placed"]), sim["pending"]) == (sorted(WITH_ACCEL), 0)
    volcano.namespace(vns, config=hook.name)
    volcano.kubectl("create", "-f", "-", input=json.dumps(job))
    pods = wait_for(f"{vns}: all 4 accelerator pods Running", lambda: running(volcano, vns, "accel", 4), timeout=120)
    assert {p["spec"]["nodeName"] for p in pods} == WITH_ACCEL
    leaf = leaf_of(volcano)
    spans = {pid: sorted({leaf[p["spec"]["nodeName"]] for p in ps}) for pid, ps in partitions(pods).items()}
    assert any(len(leaves) == 2 for leaves in spans.values()), spans   # a partition across two tier-1 HyperNodes


def restart_partition_scenario(volcano: Cluster, hook: Webhook | None, ns: str, hit) -> None:
    """Run the specification's Job, ``hit`` one pod of partition 1, and check that Volcano restarts
    partition 1's pods only (new UIDs, Running, inside one tier-1 HyperNode) and keeps partition 0's."""
    before = partitions(submit_spec_job(volcano, hook, ns))
    uids = {pid: {p["metadata"]["uid"] for p in pods} for pid, pods in before.items()}
    hit(before["1"][1])

    def restarted():
        pods = running(volcano, ns, "network-topology-job", 4)
        if not pods:
            return None
        now = {pid: {p["metadata"]["uid"] for p in ps} for pid, ps in partitions(pods).items()}
        return pods if now["1"].isdisjoint(uids["1"]) else None
    pods = wait_for(f"{ns}: partition 1 restarted and Running", restarted, timeout=180)
    after = partitions(pods)
    assert {p["metadata"]["uid"] for p in after["0"]} == uids["0"], "partition 0 was restarted too"
    assert_each_partition_in_one_leaf(volcano, pods)
    def job_running():
        status = volcano.get("jobs.batch.volcano.sh", "network-topology-job", ns)["status"]
        return status if status["state"]["phase"] == "Running" and status.get("running") == 4 else None
    status = wait_for(f"{ns}: the Job Running again", job_running, timeout=120)
    assert status.get("retryCount") == 1, status   # one restart: partition 1's
    assert {p["metadata"]["uid"] for p in partitions(job_pods(volcano, ns, "network-topology-job"))["0"]} == uids["0"]


def evict(volcano: Cluster, pod: dict) -> None:
    """The eviction API, as kubectl drain uses it."""
    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
    volcano.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", "-f", "-", input=json.dumps(body))


def test_restart_partition_when_a_pod_fails(volcano, hook, vns):
    def fail(pod):   # as the kubelet reports a failed pod: the status subresource
        volcano.kubectl("patch", "pod", pod["metadata"]["name"], "-n", vns, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"phase": "Failed"}}))
    restart_partition_scenario(volcano, hook, vns, fail)


def test_restart_partition_when_a_pod_is_evicted(volcano, hook, vns):
    restart_partition_scenario(volcano, hook, vns, lambda pod: evict(volcano, pod))


@pytest.fixture(scope="module")
def volcano_without_vap(volcano, tmp_path_factory) -> Cluster:
    """A second cluster with Volcano's webhooks but not its ValidatingAdmissionPolicies."""
    tmp = tmp_path_factory.mktemp("volcano-novap")
    c = Cluster(tmp / "c", nodes=volcano.nodes_file, extra_args=("--volcano",))
    c.apply(discovery_configmap())
    settle_hypernodes(c)
    yield c
    assert c.stop() == 0, c.stderr_text()


def test_job_level_restart_partition_acts_where_volcano_vap_is_off(volcano_without_vap, vns):
    """The specification's Job as submitted (RestartPartition at job level): Volcano's VAP denies it (above);
    without the VAP, Volcano v1.14.1 restarts the evicted pod's partition from the job-level policy too.
    policylib moves it into the task either way, where it does the same and passes the VAP."""
    restart_partition_scenario(volcano_without_vap, None, vns, lambda pod: evict(volcano_without_vap, pod))


# --- the flags -------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (("--volcano", "--volcano-dir", "/nonexistent"),
     "testcluster: error: --volcano: /nonexistent/vc-scheduler: not found (make testcluster-volcano builds it)"),
    (("--volcano-vap",), "testcluster: error: --volcano-vap and --volcano-dir need --volcano; usage: testcluster "
                         "--dir DIR [--kubernetes 1.37|1.36] [--nodes FILE] [--scheduler-config FILE] [--crd FILE]... "
                         "[--coscheduling] [--volcano [--volcano-vap] [--volcano-dir DIR]] [--training-operator "
                         "[--training-operator-gang "
                             "volcano|scheduler-plugins|none]] [--mpi-operator [--mpi-operator-gang "
                             "volcano|scheduler-plugins|none]] [--koordinator] [--jobset] [--trainer] "
                             "[--lws [--lws-gang volcano|none]] [--feature-gates GATES] "
                             "[--real-node [--real-nodes N] [--image ARCHIVE]...] "
                             "[--admission-control-config-file FILE]"),
])
def test_volcano_flag_errors_are_one_line_and_exit_2(harness_built, tmp_path, args, message):
    assert refused("--dir", str(tmp_path / "c"), *args) == message
