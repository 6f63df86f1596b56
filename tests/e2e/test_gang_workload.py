"""Gang method ``workload`` end to end (rules G16-G18): Kubernetes' own gang scheduling (1.36 alpha, ``testcluster
--kubernetes 1.36 --feature-gates GangScheduling=true,GenericWorkload=true``) for a TFJob that training-operator
(``--training-operator``) turns into pods. The test creates only the job: policylib's webhook labels its
templates, the operator creates the pods, the webhook's gang-pods entry writes each pod's
``spec.schedulingGroup``, policylib's controller creates the Workload and PodGroup, and the default
kube-scheduler places the gang. Rows of docs/compatibility.md name these tests."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from policylib.gang.workload import API_NOT_SERVED

from .gang_operators import (
    LEASE_NS,
    bound,
    check_gang,
    create,
    job_pods,
    mpijob,
    pytorchjob,
    start_cluster,
    tfjob,
    wait_pods,
)
from .harness import WORKLOAD_GATES, Controller, Webhook, gang_webhook_and_controller, wait_for
from .util import POLICYLIB

#: On Kubernetes 1.36 only: the method writes scheduling.k8s.io/v1alpha2 (rule G19), which 1.37 does not serve.
pytestmark = pytest.mark.minors("1.36")
LABEL = "policylib.io/scheduling-group"
WORKLOAD = "workloads.scheduling.k8s.io"
PODGROUP = "podgroups.scheduling.k8s.io"
CONFIG = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}, "controller": {"leaseDurationSeconds": 6}}


@pytest.fixture(scope="module")
def native_setup(harness_built, tmp_path_factory, minor):
    """training-operator and the MPI Operator (no gang mode of their own) on a cluster with the native gang
    gates; policylib's webhook and controller with gang method workload."""
    tmp = tmp_path_factory.mktemp("gang-workload")
    c = start_cluster(tmp, "--training-operator", "--mpi-operator", "--feature-gates", WORKLOAD_GATES[minor],
                      targets=("testcluster-training-operator", "testcluster-mpi-operator"), minor=minor)
    hook = ctl = None
    try:
        c.namespace(LEASE_NS)
        hook = Webhook(c, "gang", CONFIG, tmp).start()
        hook.register()
        ctl = leader = Controller(c, CONFIG, tmp, "gang-workload", LEASE_NS)
        wait_for("the controller leads", lambda: leader.status()["leader"], timeout=60)
        yield c, hook
    finally:
        for proc in (ctl, hook):
            if proc:
                proc.stop()
        assert c.stop() == 0


@pytest.fixture(scope="module")
def native(native_setup):
    return native_setup[0]


def scheduled_condition(c, ns: str) -> tuple[str, str] | None:
    """(status, reason) of the PodGroup's PodGroupScheduled condition, written by kube-scheduler's pod group
    cycle (pkg/scheduler/schedule_one_podgroup.go), or None before it has one."""
    pg = c.get_or_none(PODGROUP, "train", ns) or {}
    found = [(x["status"], x["reason"]) for x in (pg.get("status") or {}).get("conditions") or []
             if x["type"] == "PodGroupScheduled"]
    return found[0] if found else None


def owner(obj: dict) -> list[tuple[str, str, bool]]:
    return [(r["kind"], r["uid"], r.get("controller", False)) for r in obj["metadata"].get("ownerReferences") or []]


JOBS = {"TFJob": (tfjob, "fits3", "tfReplicaSpecs", {"PS", "Worker"}),
        "PyTorchJob": (pytorchjob, "fits3b", "pytorchReplicaSpecs", {"Master", "Worker"}),
        "MPIJob": (mpijob, "fits3c", "mpiReplicaSpecs", {"Launcher", "Worker"})}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_workload_method_operator_pods_carry_the_scheduling_group_and_bind_together(native, kind):
    """3 pods of 1 CPU on 3 CPUs (TFJob PS+Worker, PyTorchJob Master+Worker, MPIJob Launcher+Worker): the
    templates carry the label, the operator's pods carry spec.schedulingGroup (written by the webhook), the
    controller's Workload and PodGroup say minCount 3 and are owned by the job, and kube-scheduler binds all
    three."""
    build, group, specs_key, roles = JOBS[kind]
    ns = native.namespace(f"workload-{kind.lower()}", config="gang")
    stored = create(native, build("train", ns, group, None))
    specs = stored["spec"][specs_key]
    assert {k: v["template"]["metadata"]["labels"] for k, v in specs.items()} == {r: {LABEL: "train"} for r in roles}
    assert check_gang(CONFIG, native, stored, group) == []
    pg = wait_for("the controller creates the PodGroup", lambda: native.get_or_none(PODGROUP, "train", ns), timeout=90)
    wl = native.get(WORKLOAD, "train", ns)
    uid = stored["metadata"]["uid"]
    assert owner(wl) == owner(pg) == [(kind, uid, True)]
    # the API server stores schedulingConstraints as null (the template's field has no omitempty)
    assert wl["spec"]["podGroupTemplates"] == [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 3}},
                                                "schedulingConstraints": None}]
    assert wl["spec"]["controllerRef"] == {"apiGroup": "kubeflow.org", "kind": kind, "name": "train"}
    assert pg["spec"]["podGroupTemplateRef"] == {"workload": {"workloadName": "train", "podGroupTemplateName": "gang"}}
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    pods = wait_pods(native, ns, stored, 3)
    assert {p["metadata"]["labels"].get(LABEL) for p in pods} == {"train"}
    assert [p["spec"].get("schedulingGroup") for p in pods] == [{"podGroupName": "train"}] * 3
    assert {p["spec"].get("schedulerName") for p in pods} == {"default-scheduler"}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(native, ns, stored))) == 3, timeout=150)
    assert wait_for("the PodGroup's condition", lambda: scheduled_condition(native, ns), timeout=60) == (
        "True", "Scheduled")


@pytest.mark.timeout(300)
def test_workload_method_gang_that_cannot_fit_binds_nothing_as_check_predicted(native):
    """PS 1 + Worker 3 on 3 CPUs: check predicts it; kube-scheduler judges every pod of the gang
    unschedulable and binds none."""
    ns = native.namespace("workload-short", config="gang")
    stored = create(native, tfjob("train", ns, "short", None, workers=3))
    assert check_gang(CONFIG, native, stored, "short") == [
        f"TFJob {ns}/train: its gang needs 4 pods at once; the Nodes can hold 3 of them now: kube-scheduler would "
        "keep its PodGroup Unschedulable and bind none of them"]
    pods = wait_pods(native, ns, stored, 4)
    assert [p["spec"].get("schedulingGroup") for p in pods] == [{"podGroupName": "train"}] * 4
    pg = wait_for("the controller creates the PodGroup", lambda: native.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    ever: set[str] = set()

    def all_unschedulable():
        listed = job_pods(native, ns, stored)
        ever.update(bound(listed))
        conds = [c for p in listed for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
        return ever or (len(conds) == 4 and all(c["status"] == "False" for c in conds))
    wait_for("every pod judged unschedulable", all_unschedulable, timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"
    assert wait_for("the PodGroup's condition", lambda: scheduled_condition(native, ns), timeout=60) == (
        "False", "Unschedulable")


@pytest.fixture(scope="module")
def no_gates(harness_built, tmp_path_factory, minor):
    """The same setup on a cluster without the gates: scheduling.k8s.io/v1alpha2 is not served."""
    tmp = tmp_path_factory.mktemp("gang-workload-off")
    c = start_cluster(tmp, "--training-operator", targets=("testcluster-training-operator",), minor=minor)
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, CONFIG, tmp, "gang-workload-off", LEASE_NS):
            yield c, tmp
    finally:
        assert c.stop() == 0


@pytest.mark.timeout(300)
def test_workload_method_without_the_gates_warns_on_the_job_and_check_says_so(no_gates):
    """Rule G20 on a real API server that does not serve scheduling.k8s.io/v1alpha2: one Warning Event on the
    job names the gates; `policylib check --cluster` says the same; the API server drops the pods'
    schedulingGroup (the GenericWorkload gate is off), so they are scheduled one by one."""
    c, tmp = no_gates
    ns = c.namespace("workload-off", config="gang")
    stored = create(c, tfjob("train", ns, "fits3", None))

    def warnings():
        events = c.list("events.events.k8s.io", ns)
        found = [e for e in events if e.get("reason") == "WorkloadAPINotServed"]
        return found or None
    found = wait_for("the controller's Warning Event on the job", warnings, timeout=90)
    assert [(e["type"], e["regarding"]["kind"], e["regarding"]["name"], e["regarding"]["uid"]) for e in found] == [
        ("Warning", "TFJob", "train", stored["metadata"]["uid"])]
    assert found[0]["note"] == f"TFJob {ns}/train: no Workload train made: {API_NOT_SERVED}"
    cfg = tmp / "check-workload.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    run = subprocess.run([*POLICYLIB, "check", "--cluster", "--config", str(cfg), "-n", ns, "-o", "json"],
                         capture_output=True, text=True, env=c.env, timeout=120)
    assert run.returncode == 3, run.stderr
    assert {"severity": "error", "key": "gang.method",
            "message": f"{API_NOT_SERVED}: no job's pods would be gang-scheduled"} in json.loads(run.stdout)
    pods = wait_pods(c, ns, stored, 3)
    assert {p["metadata"]["labels"].get(LABEL) for p in pods} == {"train"}
    assert [p["spec"].get("schedulingGroup") for p in pods] == [None] * 3


@pytest.mark.timeout(300)
def test_workload_method_gang_pods_wait_while_the_webhook_is_down(native_setup):
    """failurePolicy Fail of the gang-pods webhook (rule G17): while the webhook is down the API server
    refuses the operator's labelled pods (none is admitted without its schedulingGroup, to run alone); the
    operator retries, and once the webhook is back every pod carries it and the gang binds."""
    c, hook = native_setup
    ns = c.namespace("workload-down", config="gang")
    job = tfjob("train", ns, "role", None, ps=1, workers=1)
    job["spec"]["runPolicy"] = {"suspend": True}     # no pods until the webhook is down
    stored = create(c, job)
    wait_for("the controller creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    hook.stop()
    try:
        c.kubectl("patch", "tfjobs.kubeflow.org", "train", "-n", ns, "--type=merge",
                  "-p", json.dumps({"spec": {"runPolicy": {"suspend": False}}}))

        def refused():
            events = [e for e in c.list("events", ns) if e.get("reason") == "FailedCreatePod"
                      and e["involvedObject"]["name"] == "train"]
            return events or None
        events = wait_for("the operator's pod creates refused", refused, timeout=90)
        assert 'failed calling webhook "gang-pods.gang.e2e.policylib.io"' in events[0]["message"], events[0]["message"]
        assert job_pods(c, ns, stored) == []
    finally:
        hook.start()
    pods = wait_pods(c, ns, stored, 2, timeout=150)
    assert [p["spec"].get("schedulingGroup") for p in pods] == [{"podGroupName": "train"}] * 2
    wait_for("both pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 2, timeout=150)
