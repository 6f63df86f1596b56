"""JobSets made into pods by the real JobSet v0.12.0 controller (``testcluster --jobset``/``--trainer``, built by
``make testcluster-trainer``) and gang scheduled through policylib's webhook and controller (rules J1, J3, J7): under
scheduler-plugins' Coscheduling, Volcano, and Kubernetes' own Workload API with a rack topology (rule G25) on both
minors. Each test creates only the JobSet; JobSet's controller makes its Jobs, the Job controller their pods, the
real scheduler places them; ``policylib check``/``simulate`` on the same objects give the scheduler's verdict."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from policylib.check import check
from policylib.simulate import simulate

from .gang_operators import (
    COSCHEDULING,
    GROUP,
    LEASE_NS,
    NODE_GROUPS,
    POD_GROUP_LABEL,
    podgroup_crd,
)
from .harness import (
    WORKLOAD_API,
    WORKLOAD_GATES,
    Cluster,
    bound,
    gang_webhook_and_controller,
    node_list,
    scheduling_failures,
    wait_for,
)

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
PODGROUP = "podgroups.scheduling.x-k8s.io"
VC_PODGROUP = "podgroups.scheduling.volcano.sh"
GROUP_NAME = "scheduling.k8s.io/group-name"
COSCHEDULING_CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins", "scheduleTimeoutSeconds": 5},
                       "controller": {"leaseDurationSeconds": 6}}
VOLCANO_CONFIG = {"gang": {"method": "podgroup", "scheduler": "volcano"}, "controller": {"leaseDurationSeconds": 6}}
RACK = "example.com/rack"
NATIVE_CONFIG = {"gang": {"method": "workload", "scheduler": "kube-scheduler", "topology": "tier-1"},
                 "volcano": {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {
                     "racks": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]},
                 "controller": {"leaseDurationSeconds": 6}}
NATIVE_GATES = {minor: f"{gates},TopologyAwareWorkloadScheduling=true" for minor, gates in WORKLOAD_GATES.items()}
NATIVE_VERSION = {minor: api.rpartition("/")[2] for minor, api in WORKLOAD_API.items()}
#: The PodGroup condition kube-scheduler's pod group cycle writes (scheduling/v1alpha2 and v1beta1 types.go).
NATIVE_CONDITION = {"1.36": "PodGroupScheduled", "1.37": "PodGroupInitiallyScheduled"}
#: Two racks of two Nodes of 2 CPUs: a rack holds 4 pods of 1 CPU, the two 8.
RACK_NODES = [(f"rack-{r}-{i}", f"rack-{r}") for r in "ab" for i in range(2)]


def write_nodes(tmp: Path, racks: bool = False) -> Path:
    """The gang tests' node groups (``gang_operators.NODE_GROUPS``), and with ``racks`` the Nodes in two racks."""
    nodes = node_list(NODE_GROUPS)
    if racks:
        nodes["items"] += [{"kind": "Node", "metadata": {"name": name, "labels": {
            GROUP: "racks", RACK: rack, "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "2", "memory": "64Gi", "pods": "110"}}} for name, rack in RACK_NODES]
    path = tmp / "nodes.yaml"
    path.write_text(yaml.safe_dump(nodes))
    return path


def jobset(name: str, ns: str, group: str, scheduler: str | None, pods: int) -> dict:
    """A JobSet of one ReplicatedJob: one Indexed Job of ``pods`` pods of 1 CPU on the node group."""
    spec: dict = {"nodeSelector": {GROUP: group}, "containers": [
        {"name": "worker", "image": "registry.example/train:1",
         "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {"spec": spec}}}}]}}


def create(c: Cluster, obj: dict) -> dict:
    """Create through the API server (policylib's webhook and JobSet's own); returns the stored JobSet."""
    c.kubectl("create", "-f", "-", input=json.dumps(obj))
    return c.get("jobsets.jobset.x-k8s.io", obj["metadata"]["name"], obj["metadata"]["namespace"])


def pod_template(stored: dict) -> dict:
    [rjob] = stored["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]["template"]


def jobset_pods(c: Cluster, ns: str, name: str) -> list[dict]:
    return c.list("pods", ns, selector=f"{JOBSET_NAME_LABEL}={name}")


def wait_pods(c: Cluster, ns: str, name: str, n: int) -> list[dict]:
    """JobSet's controller makes the Job, the Job controller its ``n`` pods."""
    return wait_for(f"JobSet {ns}/{name}'s Job creates {n} pods",
                    lambda: (lambda ps: ps if len(ps) == n else None)(jobset_pods(c, ns, name)), timeout=150)


def group_nodes(c: Cluster, group: str) -> list[dict]:
    return [n for n in c.list("nodes") if n["metadata"]["labels"].get(GROUP) == group]


def check_errors(config: dict, c: Cluster, obj: dict, group: str) -> list[tuple[str, str]]:
    """``policylib check``'s errors (key, message) for the JobSet on the group's real Nodes."""
    return [(f.key, f.message) for f in check(config, group_nodes(c, group), [obj]) if f.severity == "error"]


def none_bound_all_rejected(c: Cluster, ns: str, name: str, n: int) -> dict[str, list[str]]:
    """Waits until each of the ``n`` pods has a FailedScheduling event; fails when any was ever bound. Returns
    the events' messages by pod."""
    ever: set[str] = set()

    def rejected():
        pods = jobset_pods(c, ns, name)
        ever.update(bound(pods))
        failures = scheduling_failures(c, ns)
        names = {p["metadata"]["name"] for p in pods}
        return ever or (len(names) == n and names <= set(failures) and failures)
    seen = wait_for("every pod rejected by the scheduler", rejected, timeout=180)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"
    return seen


#: ``policylib check``'s verdict on a gang of 4 pods on 3 CPUs (rule G26), by the scheduler's words.
SHORT_VERDICT = "{kind} {ns}/train: its gang needs 4 pods at once; the Nodes can hold 3 of them now: {outcome}"
COSCHEDULING_OUTCOME = "it would wait for its scheduleTimeout and never start"
VOLCANO_OUTCOME = "Volcano would keep its PodGroup Unschedulable and start none of them"


# --- Coscheduling ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cosched(harness_built, tmp_path_factory, minor):
    """Coscheduling, JobSet's and Trainer's controllers on a cluster of each minor; policylib's webhook (method
    podgroup, scheduler-plugins) and controller (makes the PodGroups)."""
    tmp = tmp_path_factory.mktemp(f"gang-trainer-cosched-{minor}")
    c = Cluster(tmp / "c", nodes=write_nodes(tmp), extra_args=("--coscheduling", "--crd", str(podgroup_crd())),
                minor=minor, trainer=True)
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, COSCHEDULING_CONFIG, tmp, f"gang-trainer-{minor}", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Coscheduling (scheduler-plugins)", settings="`method: podgroup`, `scheduler: scheduler-plugins`",
    operator="JobSet v0.12.0 controller", jobs="JobSet of one Indexed Job of 3 pods",
    outcome=("the stored pod template carries policylib's label; policylib's controller makes the PodGroup "
             "(minMember 3, owned by the JobSet); the pods JobSet's Job makes bind together, as `check` predicts"))
@pytest.mark.timeout(360)
def test_a_jobset_under_coscheduling_binds_as_one_gang(cosched):
    c = cosched
    ns = c.namespace("js-cosched", config="gang")
    obj = jobset("train", ns, "fits3", COSCHEDULING, 3)
    assert check_errors(COSCHEDULING_CONFIG, c, obj, "fits3") == []
    stored = create(c, obj)
    assert pod_template(stored)["metadata"]["labels"] == {POD_GROUP_LABEL: "train"}
    assert pod_template(stored)["spec"]["restartPolicy"] == "OnFailure"   # JobSet's own defaulter ran too
    pg = wait_for("the controller creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [(r["kind"], r["name"], r.get("controller")) for r in pg["metadata"]["ownerReferences"]] == [
        ("JobSet", "train", True)]
    pods = wait_pods(c, ns, "train", 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {COSCHEDULING}
    assert {r["kind"] for p in pods for r in p["metadata"]["ownerReferences"]} == {"Job"}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=150)


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Coscheduling", settings="`method: podgroup`", operator="JobSet v0.12.0 controller",
    jobs="JobSet of 4 pods on 3 CPUs",
    outcome=("`policylib check` and `simulate` predict it; none binds; Coscheduling rejects the PodGroup for a pod "
             "without room (`Insufficient cpu`)"))
@pytest.mark.timeout(360)
def test_a_jobset_that_cannot_fit_binds_nothing_under_coscheduling(cosched):
    c = cosched
    ns = c.namespace("js-cosched-short", config="gang")
    obj = jobset("train", ns, "short", COSCHEDULING, 4)
    assert check_errors(COSCHEDULING_CONFIG, c, obj, "short") == [
        ("gang.method", SHORT_VERDICT.format(kind="JobSet", ns=ns, outcome=COSCHEDULING_OUTCOME))]
    [predicted] = simulate([obj], group_nodes(c, "short"), COSCHEDULING_CONFIG)
    assert (predicted.pending, predicted.placed) == (4, {})
    create(c, obj)
    wait_pods(c, ns, "train", 4)
    failures = none_bound_all_rejected(c, ns, "train", 4)
    messages = [m for ms in failures.values() for m in ms]
    assert any("2 Insufficient cpu" in m and f"PodGroup {ns}/train gets rejected due to Pod" in m
               for m in messages), messages


# --- Volcano -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vc(harness_built, tmp_path_factory, minor):
    """Volcano, JobSet's and Trainer's controllers on a cluster of each minor; policylib's webhook (method podgroup,
    scheduler volcano) and controller (makes the Volcano PodGroups)."""
    tmp = tmp_path_factory.mktemp(f"gang-trainer-volcano-{minor}")
    c = Cluster(tmp / "c", nodes=write_nodes(tmp), extra_args=("--volcano",), minor=minor, trainer=True)
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, VOLCANO_CONFIG, tmp, f"gang-trainer-volcano-{minor}", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Volcano", settings="`method: podgroup`, `scheduler: volcano`", operator="JobSet v0.12.0 controller",
    jobs="JobSet of one Indexed Job of 3 pods",
    outcome=("policylib's annotation `scheduling.k8s.io/group-name` on the stored pod template; policylib's controller "
             "makes the Volcano PodGroup (minMember 3, owned by the JobSet), the namespace's only one; all 3 bind"))
@pytest.mark.timeout(360)
def test_a_jobset_under_volcano_binds_as_one_gang(vc):
    c = vc
    ns = c.namespace("js-volcano", config="gang")
    obj = jobset("train", ns, "fits3", "volcano", 3)
    assert check_errors(VOLCANO_CONFIG, c, obj, "fits3") == []
    stored = create(c, obj)
    assert pod_template(stored)["metadata"]["annotations"] == {GROUP_NAME: "train"}
    pg = wait_for("the controller creates the Volcano PodGroup", lambda: c.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [(r["kind"], r["name"], r.get("controller")) for r in pg["metadata"]["ownerReferences"]] == [
        ("JobSet", "train", True)]
    pods = wait_pods(c, ns, "train", 3)
    assert {p["metadata"]["annotations"].get(GROUP_NAME) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=180)
    assert [g["metadata"]["name"] for g in c.list(VC_PODGROUP, ns)] == ["train"]


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Volcano", settings="`method: podgroup`, `scheduler: volcano`", operator="JobSet v0.12.0 controller",
    jobs="JobSet of 4 pods on 3 CPUs",
    outcome="`policylib check` and `simulate` predict it; Volcano marks policylib's PodGroup Unschedulable; none binds")
@pytest.mark.timeout(360)
def test_a_jobset_that_cannot_fit_binds_nothing_under_volcano(vc):
    c = vc
    ns = c.namespace("js-volcano-short", config="gang")
    obj = jobset("train", ns, "short", "volcano", 4)
    assert check_errors(VOLCANO_CONFIG, c, obj, "short") == [
        ("gang.method", SHORT_VERDICT.format(kind="JobSet", ns=ns, outcome=VOLCANO_OUTCOME))]
    create(c, obj)
    pg = wait_for("the controller creates the Volcano PodGroup", lambda: c.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 4
    wait_pods(c, ns, "train", 4)
    ever: set[str] = set()

    def unschedulable():
        ever.update(bound(jobset_pods(c, ns, "train")))
        status = c.get(VC_PODGROUP, "train", ns).get("status") or {}
        # the condition once Volcano tried the whole gang: one written while the Job controller had made only some
        # of the pods says the gang is not ready yet, and names no resource
        return ever or [x for x in status.get("conditions") or [] if x.get("type") == "Unschedulable"
                        and "Insufficient cpu" in x.get("message", "")]
    [condition, *_] = wait_for("Volcano marks the gang Unschedulable for want of CPU", unschedulable, timeout=180)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"
    assert condition["reason"] == "NotEnoughResources"
    assert "4 minAvailable" in condition["message"] and "Insufficient cpu" in condition["message"], condition
    assert bound(jobset_pods(c, ns, "train")) == []


# --- Kubernetes' Workload API, one rack ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def native(harness_built, tmp_path_factory, minor):
    """JobSet's and Trainer's controllers on a cluster of each minor with the Workload API's gates and
    TopologyAwareWorkloadScheduling, Nodes in two racks; policylib's webhook and controller with gang method workload
    and ``gang.topology`` the rack tier."""
    tmp = tmp_path_factory.mktemp(f"gang-trainer-native-{minor}")
    c = Cluster(tmp / "c", nodes=write_nodes(tmp, racks=True), extra_args=("--feature-gates", NATIVE_GATES[minor]),
                minor=minor, trainer=True)
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, NATIVE_CONFIG, tmp, f"gang-trainer-native-{minor}", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


def rack_of(c: Cluster, node: str) -> str:
    return c.get("nodes", node)["metadata"]["labels"][RACK]


def native_podgroup(c: Cluster, ns: str) -> dict | None:
    return c.get_or_none(f"podgroups.{NATIVE_VERSION[c.minor]}.scheduling.k8s.io", "train", ns)


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="kube-scheduler, the Workload API's gates of each minor and `TopologyAwareWorkloadScheduling`; Nodes in "
              "two racks",
    settings="`method: workload`, `topology: tier-1` (the rack label)", operator="JobSet v0.12.0 controller",
    jobs="JobSet of 3 pods, which one rack holds",
    outcome=("the PodGroup (`v1alpha2` on 1.36, `v1beta1` on 1.37) carries `schedulingConstraints.topology`; the "
             "pods JobSet's Job makes carry `schedulingGroup`; all 3 bind in one rack, as `simulate` predicts"))
@pytest.mark.timeout(360)
def test_a_native_jobset_gang_lands_in_one_rack(report, native):
    c = native
    ns = c.namespace("js-native-fits", config="gang")
    obj = jobset("train", ns, "racks", None, 3)
    [predicted] = simulate([obj], group_nodes(c, "racks"), NATIVE_CONFIG)
    assert predicted.pending == 0 and len({rack_of(c, n) for n in predicted.placed}) == 1, predicted
    create(c, obj)
    pg = wait_for("the controller creates the PodGroup", lambda: native_podgroup(c, ns), timeout=90)
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    pods = wait_pods(c, ns, "train", 3)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=150)
    nodes = sorted(p["spec"]["nodeName"] for p in jobset_pods(c, ns, "train"))
    placed = {rack_of(c, n) for n in nodes}
    assert len(placed) == 1, nodes
    report(f"Kubernetes {c.minor}: JobSet {ns}/train, PodGroup {pg['apiVersion']} topology {RACK}: 3 pods bound on "
           f"{', '.join(nodes)}, all in {placed.pop()}")


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="kube-scheduler (as above)", settings="`method: workload`, `topology: tier-1`",
    operator="JobSet v0.12.0 controller", jobs="JobSet of 5 pods: the two racks hold 8 between them, neither 5",
    outcome=("`policylib check` and `simulate` predict it; none binds; the PodGroup says `0/2 placements are "
             "available`"))
@pytest.mark.timeout(360)
def test_a_native_jobset_gang_that_fits_no_rack_stays_pending_with_the_schedulers_reason(native):
    c = native
    ns = c.namespace("js-native-none", config="gang")
    obj = jobset("train", ns, "racks", None, 5)
    [predicted] = simulate([obj], group_nodes(c, "racks"), NATIVE_CONFIG)
    assert (predicted.pending, predicted.placed) == (5, {})
    assert predicted.reasons[0].startswith(f"wave 1: topology {RACK}: 0/2 placements are available"), predicted
    assert check_errors(NATIVE_CONFIG, c, obj, "racks") == [("gang.topology", (
        f"JobSet {ns}/train: its gang needs 5 pods at once; the one {RACK} domain can hold 4 of them now: "
        "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"))]
    create(c, obj)
    pg = wait_for("the controller creates the PodGroup", lambda: native_podgroup(c, ns), timeout=90)
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    wait_pods(c, ns, "train", 5)
    ever: set[str] = set()

    def condition():
        ever.update(bound(jobset_pods(c, ns, "train")))
        found = [x for x in ((native_podgroup(c, ns) or {}).get("status") or {}).get("conditions") or []
                 if x["type"] == NATIVE_CONDITION[c.minor]]
        return ever or (found[0] if found else None)
    seen = wait_for("the scheduler's verdict on the PodGroup", condition, timeout=180)
    assert not ever, f"pods of a gang that fits no rack were bound: {sorted(ever)}"
    assert (seen["status"], seen["reason"]) == ("False", "Unschedulable")
    assert "0/2 placements are available" in seen["message"], seen["message"]


# --- TrainJobs: Trainer's controller makes the JobSet ---------------------------------------------------------------


TRAINJOBS = "trainjobs.trainer.kubeflow.org"
RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"


def torch_runtime(name: str, group: str, scheduler: str, pod_group_policy: dict | None = None) -> dict:
    """A ClusterTrainingRuntime as Trainer's torch runtimes are (one replicated job, ``node``, the trainer step),
    its pods of 1 CPU on the node group with the gang's scheduler; ``podGroupPolicy`` only when given. The CPU is the
    runtime's, not the TrainJob's ``resourcesPerNode``, which policylib's simulation does not read."""
    spec: dict = {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node", "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"schedulerName": scheduler, "nodeSelector": {GROUP: group},
                                           "containers": [{"name": "node", "image": "registry.example/torch:1", "resources": {
                                               "requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}}}]}}}
    if pod_group_policy:
        spec["podGroupPolicy"] = pod_group_policy
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name}, "spec": spec}


def trainjob(name: str, ns: str, runtime: str, nodes: int) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": nodes}}}


def submit_trainjob(c: Cluster, runtime: dict, job: dict) -> dict:
    """The runtime, then the TrainJob through the API server (policylib's webhook and Trainer's); the stored one."""
    c.apply(runtime)
    c.kubectl("create", "-f", "-", input=json.dumps(job))
    return c.get(TRAINJOBS, job["metadata"]["name"], job["metadata"]["namespace"])


def policylib_patches(stored: dict) -> list[dict]:
    return [p for p in stored["spec"].get("runtimePatches") or [] if p.get("manager") == "policylib.io/gang"]


def made_by_trainer(c: Cluster, ns: str, name: str) -> dict:
    """The JobSet Trainer makes of the TrainJob (its name, controlled by the TrainJob)."""
    js = wait_for("Trainer creates the JobSet", lambda: c.get_or_none("jobsets.jobset.x-k8s.io", name, ns), timeout=90)
    assert [(r["kind"], r["name"], r.get("controller")) for r in js["metadata"]["ownerReferences"]] == [
        ("TrainJob", name, True)]
    return js


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Coscheduling", settings="`method: podgroup`, `scheduler: scheduler-plugins`",
    operator="Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers",
    jobs="TrainJob of 3 nodes, torch-like ClusterTrainingRuntime without `podGroupPolicy`",
    outcome=("the stored TrainJob carries policylib's `runtimePatches` entry (Trainer stamped its `time`); Trainer's "
             "JobSet, its Job and 3 pods carry the pod-group label; policylib's controller makes the PodGroup "
             "(minMember 3, owned by the TrainJob); all bind, as `check` predicts"))
@pytest.mark.timeout(360)
def test_a_trainjob_becomes_a_jobset_whose_pods_bind_as_one_gang_under_coscheduling(cosched):
    c = cosched
    ns = c.namespace("tj-cosched", config="gang")
    runtime = torch_runtime("torch-fits3d", "fits3d", COSCHEDULING)
    job = trainjob("train", ns, "torch-fits3d", 3)
    assert [(f.key, f.message) for f in check(COSCHEDULING_CONFIG, group_nodes(c, "fits3d"), [runtime, job])
            if f.severity == "error"] == []
    stored = submit_trainjob(c, runtime, job)
    [entry] = policylib_patches(stored)
    assert entry["time"]   # Trainer's defaulter ran after policylib's webhook wrote the entry
    assert entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] == [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"labels": {POD_GROUP_LABEL: "train"}}}}}}]
    made_by_trainer(c, ns, "train")
    pg = wait_for("the controller creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [(r["kind"], r["name"], r.get("controller")) for r in pg["metadata"]["ownerReferences"]] == [
        ("TrainJob", "train", True)]
    pods = wait_pods(c, ns, "train", 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {COSCHEDULING}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=150)


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Coscheduling", settings="`method: podgroup`",
    operator="Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers", jobs="TrainJob of 4 nodes on 3 CPUs",
    outcome=("`policylib check` predicts it; none of the 4 pods Trainer's JobSet makes binds; Coscheduling rejects "
             "the PodGroup (`Insufficient cpu`)"))
@pytest.mark.timeout(360)
def test_a_trainjob_that_cannot_fit_binds_nothing_under_coscheduling(cosched):
    c = cosched
    ns = c.namespace("tj-cosched-short", config="gang")
    runtime = torch_runtime("torch-short", "short", COSCHEDULING)
    job = trainjob("train", ns, "torch-short", 4)
    assert [(f.key, f.message) for f in check(COSCHEDULING_CONFIG, group_nodes(c, "short"), [runtime, job])
            if f.severity == "error"] == [
                ("gang.method", SHORT_VERDICT.format(kind="TrainJob", ns=ns, outcome=COSCHEDULING_OUTCOME))]
    stored = submit_trainjob(c, runtime, job)
    assert len(policylib_patches(stored)) == 1
    pg = wait_for("the controller creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 4
    wait_pods(c, ns, "train", 4)
    failures = none_bound_all_rejected(c, ns, "train", 4)
    messages = [m for ms in failures.values() for m in ms]
    assert any("2 Insufficient cpu" in m and f"PodGroup {ns}/train gets rejected due to Pod" in m
               for m in messages), messages


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Coscheduling", settings="`method: podgroup`",
    operator="Kubeflow Trainer v2.3.0 (`podGroupPolicy.coscheduling` in the runtime) and JobSet v0.12.0",
    jobs="TrainJob of 3 nodes whose runtime has `podGroupPolicy`",
    outcome=("policylib writes no `runtimePatches` entry and makes no PodGroup; Trainer's own PodGroup (minMember 3) "
             "is the namespace's only one; all bind"))
@pytest.mark.timeout(360)
def test_policylib_steps_aside_for_a_runtime_with_pod_group_policy(cosched):
    c = cosched
    ns = c.namespace("tj-own-podgroup", config="gang")
    runtime = torch_runtime("torch-own", "fits3e", COSCHEDULING,
                            pod_group_policy={"coscheduling": {"scheduleTimeoutSeconds": 30}})
    job = trainjob("train", ns, "torch-own", 3)
    [predicted] = simulate([runtime, job], group_nodes(c, "fits3e"), COSCHEDULING_CONFIG)
    assert (predicted.kind, predicted.pending, sum(predicted.placed.values())) == ("TrainJob", 0, 3)
    stored = submit_trainjob(c, runtime, job)
    assert policylib_patches(stored) == []
    made_by_trainer(c, ns, "train")
    pg = wait_for("Trainer creates its PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert (pg["spec"]["minMember"], pg["spec"]["scheduleTimeoutSeconds"]) == (3, 30)
    pods = wait_pods(c, ns, "train", 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=150)
    assert [g["metadata"]["name"] for g in c.list(PODGROUP, ns)] == ["train"]


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Volcano", settings="`method: podgroup`, `scheduler: volcano`",
    operator="Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers",
    jobs="TrainJob of 3 nodes, torch-like ClusterTrainingRuntime without `podGroupPolicy`",
    outcome=("policylib's `runtimePatches` entry puts `scheduling.k8s.io/group-name` on Trainer's pods; policylib's "
             "controller makes the Volcano PodGroup (minMember 3, owned by the TrainJob), the only one; all bind"))
@pytest.mark.timeout(360)
def test_a_trainjob_becomes_a_jobset_whose_pods_bind_as_one_gang_under_volcano(vc):
    c = vc
    ns = c.namespace("tj-volcano", config="gang")
    runtime = torch_runtime("torch-volcano", "fits3b", "volcano")
    job = trainjob("train", ns, "torch-volcano", 3)
    assert [(f.key, f.message) for f in check(VOLCANO_CONFIG, group_nodes(c, "fits3b"), [runtime, job])
            if f.severity == "error"] == []
    stored = submit_trainjob(c, runtime, job)
    [entry] = policylib_patches(stored)
    assert entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] == [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {GROUP_NAME: "train"}}}}}}]
    made_by_trainer(c, ns, "train")
    pg = wait_for("the controller creates the Volcano PodGroup", lambda: c.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [(r["kind"], r["name"], r.get("controller")) for r in pg["metadata"]["ownerReferences"]] == [
        ("TrainJob", "train", True)]
    pods = wait_pods(c, ns, "train", 3)
    assert {p["metadata"]["annotations"].get(GROUP_NAME) for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=180)
    assert [g["metadata"]["name"] for g in c.list(VC_PODGROUP, ns)] == ["train"]


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="kube-scheduler, the Workload API's gates of each minor and `TopologyAwareWorkloadScheduling`; Nodes in "
              "two racks",
    settings="`method: workload`, `topology: tier-1`", operator="Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers",
    jobs="TrainJob of 3 nodes, torch-like ClusterTrainingRuntime without `podGroupPolicy`",
    outcome=("policylib's controller makes the Workload and PodGroup (owned by the TrainJob, "
             "`schedulingConstraints.topology`); Trainer's pods carry `schedulingGroup`; all 3 bind in one rack, as "
             "`simulate` predicts"))
@pytest.mark.timeout(360)
def test_a_native_trainjob_gang_lands_in_one_rack(report, native):
    c = native
    ns = c.namespace("tj-native", config="gang")
    runtime = torch_runtime(f"torch-racks-{c.minor.replace('.', '-')}", "racks", "default-scheduler")
    job = trainjob("train", ns, runtime["metadata"]["name"], 3)
    [predicted] = [p for p in simulate([runtime, job], group_nodes(c, "racks"), NATIVE_CONFIG) if p.kind == "TrainJob"]
    assert predicted.pending == 0 and len({rack_of(c, n) for n in predicted.placed}) == 1, predicted
    stored = submit_trainjob(c, runtime, job)
    assert len(policylib_patches(stored)) == 1
    made_by_trainer(c, ns, "train")
    pg = wait_for("the controller creates the PodGroup", lambda: native_podgroup(c, ns), timeout=90)
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    assert [(r["kind"], r["name"], r.get("controller")) for r in pg["metadata"]["ownerReferences"]] == [
        ("TrainJob", "train", True)]
    pods = wait_pods(c, ns, "train", 3)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(jobset_pods(c, ns, "train"))) == 3, timeout=150)
    nodes = sorted(p["spec"]["nodeName"] for p in jobset_pods(c, ns, "train"))
    placed = {rack_of(c, n) for n in nodes}
    assert len(placed) == 1, nodes
    report(f"Kubernetes {c.minor}: TrainJob {ns}/train, PodGroup {pg['apiVersion']} topology {RACK}: 3 pods bound on "
           f"{', '.join(nodes)}, all in {placed.pop()}")


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Coscheduling", settings="`method: podgroup` (policylib makes no PodGroup for it)",
    operator="Kubeflow Trainer v2.3.0 (`podGroupPolicy.coscheduling`) and JobSet v0.12.0",
    jobs="TrainJob of 4 nodes on 3 CPUs whose runtime has `podGroupPolicy`",
    outcome=("`policylib check` and `simulate` predict it; none of the 4 pods binds; Coscheduling rejects Trainer's "
             "PodGroup (`Insufficient cpu`)"))
@pytest.mark.timeout(360)
def test_a_trainjob_with_the_runtimes_pod_group_that_cannot_fit_binds_nothing(cosched):
    c = cosched
    ns = c.namespace("tj-own-podgroup-short", config="gang")
    runtime = torch_runtime("torch-own-short", "war", COSCHEDULING, {"coscheduling": {"scheduleTimeoutSeconds": 30}})
    job = trainjob("train", ns, "torch-own-short", 4)
    [predicted] = simulate([runtime, job], group_nodes(c, "war"), COSCHEDULING_CONFIG)
    assert (predicted.pending, predicted.placed) == (4, {})
    assert [(f.key, f.message) for f in check(COSCHEDULING_CONFIG, group_nodes(c, "war"), [runtime, job])
            if f.severity == "error"] == [
                ("gang.method", SHORT_VERDICT.format(kind="TrainJob", ns=ns, outcome=COSCHEDULING_OUTCOME))]
    submit_trainjob(c, runtime, job)
    pg = wait_for("Trainer creates its PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 4
    wait_pods(c, ns, "train", 4)
    failures = none_bound_all_rejected(c, ns, "train", 4)
    messages = [m for ms in failures.values() for m in ms]
    assert any("Insufficient cpu" in m and f"PodGroup {ns}/train gets rejected due to Pod" in m
               for m in messages), messages
