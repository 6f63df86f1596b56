"""Gang scheduling on the scheduler it targets: a TFJob mutated by the webhook, its PodGroup created by the
controller, and its pods scheduled by scheduler-plugins' Coscheduling plugin (``testcluster --coscheduling``,
built by ``make testcluster-coscheduling``), on a cluster of its own.

The pods are created the way training-operator creates them from the stored job's replica templates (it is
not run here): one pod per replica, named ``<job>-<type>-<index>``, with the template's labels and
annotations plus training-operator's own labels, owned by the job.
"""
from __future__ import annotations

import copy
import json
import time

import pytest
import yaml

from policylib.check import check

from .harness import (
    NODE_GROUP_LABEL,
    SHARED,
    Cluster,
    Timeout,
    bound,
    gang_webhook_and_controller,
    node_list,
    refused,
    require_built,
    scheduling_failures,
    wait_for,
)

PODGROUP_CRD = "schemas/scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml"
TFJOB_CRD = "schemas/kubeflow/kubeflow.org_tfjobs.yaml"
SCHEDULER = "scheduler-plugins-scheduler"
GROUP = NODE_GROUP_LABEL
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
LEASE_NS = "policylib-system"
#: Short, so that the test sees a gang outlive its PodGroup's timeout.
TIMEOUT = 5
CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins", "scheduleTimeoutSeconds": TIMEOUT},
          "controller": {"leaseDurationSeconds": 6}}
#: Node groups, in CPUs per node: the gangs below ask for 1 CPU per pod, 5 pods.
NODE_GROUPS = {
    "fits": [2, 2, 1],       # exactly the 5 CPUs of a 5-pod gang
    "short": [2, 2],         # one pod fewer
    "min": [2, 2],           # 4 pods, for a gang whose minAvailable is 4
    "ten": [2, 2, 2, 2, 2],  # 10 of an 11-pod gang
}


@pytest.fixture(scope="module")
def cosched(harness_built, tmp_path_factory):
    """Its own cluster with the Coscheduling scheduler; the gang webhook and the controller running."""
    if not SHARED.is_dir():
        pytest.skip("../shared/ (the scheduler-plugins PodGroup and Kubeflow TFJob CRDs) is not beside the project")
    require_built("testcluster-coscheduling")   # a missing binary fails the tests
    tmp = tmp_path_factory.mktemp("coscheduling")
    nodes = tmp / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(node_list(NODE_GROUPS)))
    c = Cluster(tmp / "c", nodes=nodes, extra_args=("--coscheduling", "--crd", str(SHARED / PODGROUP_CRD)))
    try:
        c.install_crds(TFJOB_CRD)
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, CONFIG, tmp, "cosched", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


def tfjob(name: str, namespace: str, group: str, workers: int = 4, min_available: int | None = None) -> dict:
    """1 PS and ``workers`` Workers of 1 CPU each, on node group ``group``, scheduled by the Coscheduling
    scheduler (policylib does not set schedulerName: docs/gang.md)."""
    def spec(replicas: int) -> dict:
        return {"replicas": replicas, "restartPolicy": "Never", "template": {"spec": {
            "schedulerName": SCHEDULER, "nodeSelector": {GROUP: group},
            "containers": [{"name": "tensorflow", "image": "registry.example/tf:1",
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": namespace},
           "spec": {"tfReplicaSpecs": {"PS": spec(1), "Worker": spec(workers)}}}
    if min_available is not None:
        job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return job


def operator_pods(job: dict) -> list[dict]:
    """The pods training-operator v1 creates for a stored TFJob (pkg/controller.v1/common/pod.go): per
    replica, the template with its labels plus training.kubeflow.org/{job-name,replica-type,replica-index,
    operator-name} (job-role=master for a Chief/Master), the replica spec's restartPolicy, and the job as
    controller owner."""
    meta = job["metadata"]
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}
    pods = []
    for rtype, rspec in job["spec"]["tfReplicaSpecs"].items():
        for index in range(rspec.get("replicas", 1)):
            template = copy.deepcopy(rspec["template"])
            labels = dict(template.get("metadata", {}).get("labels") or {})
            labels.update({"training.kubeflow.org/job-name": meta["name"],
                           "training.kubeflow.org/replica-type": rtype.lower(),
                           "training.kubeflow.org/replica-index": str(index),
                           "training.kubeflow.org/operator-name": "tfjob-controller"})
            if rtype.lower() in ("chief", "master"):
                labels["training.kubeflow.org/job-role"] = "master"
            spec = template["spec"]
            spec["restartPolicy"] = rspec.get("restartPolicy", "Never")
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{meta['name']}-{rtype.lower()}-{index}", "namespace": meta["namespace"], "labels": labels,
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "ownerReferences": [owner]}, "spec": spec})
    return pods


def submit(c: Cluster, job: dict) -> tuple[dict, dict]:
    """Create the job through the webhook; returns the stored job and the PodGroup the controller made."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    c.kubectl("create", "-f", "-", input=json.dumps(job))
    stored = c.get("tfjobs.kubeflow.org", name, ns)
    for rtype, rspec in stored["spec"]["tfReplicaSpecs"].items():
        assert rspec["template"]["metadata"]["labels"][POD_GROUP_LABEL] == name, rtype
    pg = wait_for(f"the controller creates PodGroup {ns}/{name}",
                  lambda: c.get_or_none("podgroups.scheduling.x-k8s.io", name, ns), timeout=90)
    return stored, pg


def check_says(c: Cluster, job: dict) -> list[str]:
    """``policylib check``'s gang findings for the job on this cluster's real Nodes."""
    nodes = [n for n in c.list("nodes") if n["metadata"]["labels"].get(GROUP)]
    return [f.message for f in check(CONFIG, nodes, [job]) if f.key == "gang.method"]


def create_pods(c: Cluster, pods: list[dict]) -> None:
    c.kubectl("create", "-f", "-", input=yaml.safe_dump_all(pods))


def pods_of(c: Cluster, ns: str, job: str) -> list[dict]:
    return c.list("pods", ns, selector=f"training.kubeflow.org/job-name={job}")


@pytest.mark.timeout(300)
def test_gang_binds_only_once_every_member_exists_and_then_together(cosched):
    """Capacity for all 5: with 4 of the 5 pods created, the scheduler holds them all, citing the minMember
    policylib wrote; the 5th pod releases the gang and all 5 bind."""
    ns = cosched.namespace("gang-fits", config="gang")
    stored, pg = submit(cosched, tfjob("train", ns, "fits"))
    assert pg["spec"] == {"minMember": 5, "scheduleTimeoutSeconds": TIMEOUT}
    assert check_says(cosched, stored) == []
    pods = operator_pods(stored)
    assert [p["metadata"]["labels"][POD_GROUP_LABEL] for p in pods] == ["train"] * 5
    create_pods(cosched, pods[:4])

    # Coscheduling's PreFilter counts the group's pods against the PodGroup's minMember and says both.
    def held_for_a_fifth():
        failures = scheduling_failures(cosched, ns)
        return [m for msgs in failures.values() for m in msgs
                if "cannot find enough sibling pods, current pods number: 4, minMember of group: 5" in m]
    wait_for("the scheduler holds the 4 pods for minMember 5", held_for_a_fifth, timeout=120)
    assert bound(pods_of(cosched, ns, "train")) == []

    create_pods(cosched, pods[4:])
    names = sorted(p["metadata"]["name"] for p in pods)
    wait_for("all 5 pods bound", lambda: bound(pods_of(cosched, ns, "train")) == names, timeout=120)
    placed = pods_of(cosched, ns, "train")
    # one CPU each, on the group's 5 CPUs: every node full
    per_node: dict[str, int] = {}
    for p in placed:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert per_node == {"fits-0": 2, "fits-1": 2, "fits-2": 1}
    wait_for("all 5 pods Running", lambda: all(p["status"].get("phase") == "Running"
                                              for p in pods_of(cosched, ns, "train")), timeout=60)


@pytest.mark.timeout(300)
def test_gang_one_pod_short_never_half_binds(cosched):
    """Capacity for 4 of 5: every pod is tried and rejected by Coscheduling, and none is bound, before or
    after the PodGroup's scheduleTimeoutSeconds."""
    ns = cosched.namespace("gang-short", config="gang")
    stored, pg = submit(cosched, tfjob("train", ns, "short"))
    assert pg["spec"]["minMember"] == 5
    assert check_says(cosched, stored) == [f"TFJob {ns}/train: its gang needs 5 pods at once; the Nodes can hold 4 of "
                                           "them now: it would wait for its scheduleTimeout and never start"]
    pods = operator_pods(stored)
    created = time.monotonic()
    create_pods(cosched, pods)
    names = sorted(p["metadata"]["name"] for p in pods)
    ever_bound: set[str] = set()

    def all_rejected():
        # Pods created one by one are first rejected for missing siblings; once all exist, the ones that
        # fitted are assumed and the group rejected for want of CPU. Wait for that, on a loaded machine too.
        ever_bound.update(bound(pods_of(cosched, ns, "train")))
        failures = scheduling_failures(cosched, ns)
        said = seen["said"] = " ".join(m for msgs in failures.values() for m in msgs)
        group = "PodGroup " + ns + "/train gets rejected" in said or "rejection in Unreserve" in said
        return ever_bound or (sorted(failures) == names and "Insufficient cpu" in said and group and failures)
    seen: dict[str, str] = {}
    try:
        failures = wait_for("every pod rejected, the gang for want of CPU", all_rejected, timeout=180)
    except Timeout as e:
        raise AssertionError(f"{e}; the scheduler said: {seen.get('said')}") from None
    assert not ever_bound, f"pods of a gang that does not fit were bound: {sorted(ever_bound)}"
    messages = " ".join(m for msgs in failures.values() for m in msgs)
    # The pods that fitted were assumed and then rejected as a group, not left bound.
    assert "Insufficient cpu" in messages
    assert "PodGroup " + ns + "/train gets rejected" in messages or "rejection in Unreserve" in messages, messages

    # Past the PodGroup's timeout (with margin for a loaded machine): still nothing bound, nothing Running.
    def past_timeout():
        ever_bound.update(bound(pods_of(cosched, ns, "train")))
        return ever_bound or time.monotonic() - created > 3 * TIMEOUT
    wait_for("the PodGroup's timeout has passed", past_timeout, timeout=120, interval=0.5)
    assert not ever_bound, f"pods of a gang that does not fit were bound: {sorted(ever_bound)}"
    final = pods_of(cosched, ns, "train")
    assert bound(final) == [] and {p["status"].get("phase") for p in final} == {"Pending"}


@pytest.mark.timeout(300)
def test_members_wait_the_podgroups_timeout_then_all_are_released(cosched):
    """11 pods, capacity for 10: one missing member is under Coscheduling's podGroupRejectPercentage (10%), so
    the 10 placed pods wait at Permit for the PodGroup's scheduleTimeoutSeconds (policylib's, not the plugin's
    permitWaitingTimeSeconds 10), then are all rejected; none is ever bound."""
    ns = cosched.namespace("gang-timeout", config="gang")
    stored, pg = submit(cosched, tfjob("train", ns, "ten", workers=10))
    assert pg["spec"] == {"minMember": 11, "scheduleTimeoutSeconds": TIMEOUT}
    assert check_says(cosched, stored) == [f"TFJob {ns}/train: its gang needs 11 pods at once; the Nodes can hold 10 "
                                           "of them now: it would wait for its scheduleTimeout and never start"]
    create_pods(cosched, operator_pods(stored))
    ever_bound: set[str] = set()

    def timed_out():
        ever_bound.update(bound(pods_of(cosched, ns, "train")))
        return ever_bound or [m for msgs in scheduling_failures(cosched, ns).values() for m in msgs
                              if f"rejected due to timeout after waiting {TIMEOUT}s at plugin Coscheduling" in m]
    wait_for("the waiting members time out after the PodGroup's scheduleTimeoutSeconds", timed_out, timeout=120)
    wait_for("every member released", lambda: ever_bound.update(bound(pods_of(cosched, ns, "train"))) or
             ever_bound or "rejection in Unreserve" in " ".join(m for msgs in scheduling_failures(cosched, ns).values()
                                                                for m in msgs), timeout=60)
    assert not ever_bound, f"pods of a gang that does not fit were bound: {sorted(ever_bound)}"
    final = pods_of(cosched, ns, "train")
    assert len(final) == 11 and bound(final) == [] and {p["status"].get("phase") for p in final} == {"Pending"}


@pytest.mark.timeout(300)
def test_min_available_is_the_minimum_the_scheduler_enforces(cosched):
    """runPolicy.schedulingPolicy.minAvailable 4 of 5 pods, capacity for 4: the PodGroup says minMember 4 and
    the scheduler starts exactly 4, leaving the fifth Pending."""
    ns = cosched.namespace("gang-min", config="gang")
    stored, pg = submit(cosched, tfjob("train", ns, "min", min_available=4))
    assert pg["spec"]["minMember"] == 4
    assert check_says(cosched, stored) == []
    create_pods(cosched, operator_pods(stored))
    wait_for("4 pods bound", lambda: len(bound(pods_of(cosched, ns, "train"))) == 4, timeout=120)
    [fifth] = {p["metadata"]["name"] for p in pods_of(cosched, ns, "train")} - set(bound(pods_of(cosched, ns, "train")))
    wait_for("the fifth pod rejected for want of CPU",
             lambda: any("Insufficient cpu" in m for m in scheduling_failures(cosched, ns).get(fifth, [])), timeout=120)
    assert len(bound(pods_of(cosched, ns, "train"))) == 4


BAD_CRDS = {
    "not-a-crd": ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "must be an apiextensions.k8s.io/v1 "
                                                                            "CustomResourceDefinition"),
    "no-name": ("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {}\n",
                "metadata.name: required"),
    "empty": ("# nothing\n", "no CustomResourceDefinition"),
}


@pytest.mark.parametrize("name", sorted(BAD_CRDS))
def test_bad_crd_file_is_one_line_and_exit_2(harness_built, tmp_path, name):
    text, expected = BAD_CRDS[name]
    crd = tmp_path / "crd.yaml"
    crd.write_text(text)
    line = refused("--dir", str(tmp_path / "c"), "--crd", str(crd))
    assert line.startswith(f"testcluster: error: --crd {crd}: ") and expected in line, line


def test_coscheduling_without_the_podgroup_crd_is_exit_2(harness_built, tmp_path):
    require_built("testcluster-coscheduling")
    assert refused("--dir", str(tmp_path / "c"), "--coscheduling") == (
        "testcluster: error: --coscheduling: the Coscheduling plugin watches "
        "podgroups.scheduling.x-k8s.io: pass its CRD with --crd FILE (scheduler-plugins' "
        "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml)")
