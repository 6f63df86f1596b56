"""Gang scheduling end to end with the real Kubeflow operators (rules G1-G20): each test creates only the job;
the webhook mutates it, training-operator (``testcluster --training-operator``) or the MPI Operator
(``--mpi-operator``) creates its pods, and scheduler-plugins' Coscheduling (``--coscheduling``) places
them. Rows of docs/compatibility.md name these tests."""
from __future__ import annotations

import pytest

from .gang_operators import (
    COSCHEDULING,
    LEASE_NS,
    POD_GROUP_LABEL,
    bound,
    check_gang,
    create,
    job_pods,
    mpijob,
    podgroup_crd,
    pytorchjob,
    rejected_everyone,
    start_cluster,
    tfjob,
    wait_pods,
)
from .harness import Controller, Webhook, gang_webhook_and_controller, wait_for

PODGROUP = "podgroups.scheduling.x-k8s.io"
CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins", "scheduleTimeoutSeconds": 5},
          "controller": {"leaseDurationSeconds": 6}}
#: policylib told that training-operator gangs jobs itself (--gang-scheduler-name).
OPERATOR_CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins", "operatorGang": "scheduler-plugins"}}


@pytest.fixture(scope="module")
def sp(harness_built, tmp_path_factory):
    """Coscheduling, training-operator (no gang mode of its own) and the MPI Operator; policylib's webhook
    (method podgroup) and controller (creates the PodGroups)."""
    tmp = tmp_path_factory.mktemp("gang-operators")
    c = start_cluster(tmp, "--coscheduling", "--crd", str(podgroup_crd()), "--training-operator", "--mpi-operator",
                      targets=("testcluster-coscheduling", "testcluster-training-operator", "testcluster-mpi-operator"))
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, CONFIG, tmp, "gang-operators", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


JOBS = {"TFJob": (tfjob, "fits3"), "PyTorchJob": (pytorchjob, "fits3b"), "MPIJob": (mpijob, "fits3c")}


@pytest.mark.proves(
    scheduler="Coscheduling (scheduler-plugins)",
    settings="`method: podgroup`, `scheduler: scheduler-plugins`",
    operator="training-operator, none",
    jobs="TFJob PS+Worker, PyTorchJob Master+Worker",
    outcome="the operator's pods carry policylib's label; policylib's controller makes the PodGroup; all bind together")
@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="`method: podgroup`",
    operator="MPI Operator, none",
    jobs="MPIJob v2beta1 Launcher+Worker",
    outcome="as above")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_operator_pods_carry_the_podgroup_label_and_bind_as_one_gang(sp, kind):
    """3 pods of 1 CPU on 3 CPUs: the operator's pods carry the label policylib wrote on the templates, the
    controller's PodGroup says minMember 3, and Coscheduling binds all three."""
    build, group = JOBS[kind]
    ns = sp.namespace(f"op-{kind.lower()}", config="gang")
    stored = create(sp, build("train", ns, group, COSCHEDULING))
    assert check_gang(CONFIG, sp, stored, group) == []
    pg = wait_for("the controller creates the PodGroup", lambda: sp.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 3
    pods = wait_pods(sp, ns, stored, 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {COSCHEDULING}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(sp, ns, stored))) == 3, timeout=150)


@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="`method: podgroup`",
    operator="training-operator, none",
    jobs="TFJob that cannot fit",
    outcome="`policylib check` predicts it; nothing binds")
@pytest.mark.timeout(300)
def test_operator_gang_that_cannot_fit_binds_nothing_as_check_predicted(sp):
    """4 pods on 3 CPUs: check predicts it; Coscheduling rejects every pod the operator made, none binds."""
    ns = sp.namespace("op-short", config="gang")
    stored = create(sp, tfjob("train", ns, "short", COSCHEDULING, workers=3))
    assert check_gang(CONFIG, sp, stored, "short") == [
        f"TFJob {ns}/train: its gang needs 4 pods at once; the Nodes can hold 3 of them now: it would wait for its "
        "scheduleTimeout and never start"]
    pods = wait_pods(sp, ns, stored, 4)
    names = sorted(p["metadata"]["name"] for p in pods)
    ever: set[str] = set()
    wait_for("every pod rejected", lambda: rejected_everyone(sp, ns, names, ever, stored), timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"


@pytest.fixture(scope="module")
def sp_operator_gang(harness_built, tmp_path_factory):
    """training-operator with ``--gang-scheduler-name scheduler-plugins-scheduler`` and the MPI Operator with
    ``--gang-scheduling scheduler-plugins-scheduler`` (both create PodGroups)."""
    tmp = tmp_path_factory.mktemp("gang-operator-mode")
    c = start_cluster(tmp, "--coscheduling", "--crd", str(podgroup_crd()), "--training-operator",
                      "--training-operator-gang", "scheduler-plugins", "--mpi-operator", "--mpi-operator-gang",
                      "scheduler-plugins", targets=("testcluster-coscheduling", "testcluster-training-operator",
                                                    "testcluster-mpi-operator"))
    procs: list = []
    try:
        c.namespace(LEASE_NS)
        for name, cfg in (("gang", CONFIG), ("operator", OPERATOR_CONFIG)):
            hook = Webhook(c, name, cfg, tmp).start()
            procs.append(hook)
            hook.register()
        ctl = Controller(c, CONFIG, tmp, "gang-operator-mode", LEASE_NS)
        procs.append(ctl)
        wait_for("the controller leads", lambda: ctl.status()["leader"], timeout=60)
        yield c
    finally:
        for proc in procs:
            proc.stop()
        assert c.stop() == 0


@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="none (policylib off)",
    operator="training-operator, scheduler-plugins",
    jobs="TFJob",
    outcome="the operator's PodGroup (named after the job, minMember = all replicas); all bind")
@pytest.mark.timeout(300)
def test_operator_gang_mode_alone_makes_its_own_podgroup(sp_operator_gang):
    """No policylib: training-operator names the PodGroup after the job (minMember = every replica), sets
    the schedulerName and the pod label, and the gang binds."""
    c = sp_operator_gang
    ns = c.namespace("opmode-alone")
    stored = create(c, tfjob("train", ns, "fits3", None))
    pg = wait_for("the operator creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [r["kind"] for r in pg["metadata"]["ownerReferences"]] == ["TFJob"]
    pods = wait_pods(c, ns, stored, 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {COSCHEDULING}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 3, timeout=150)


@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="`method: podgroup`, operator not told",
    operator="training-operator, scheduler-plugins",
    jobs="TFJob",
    outcome=("one PodGroup, one label value: no duplicate; all bind; but the spec is the operator's "
             "(`minResources` added, policylib's `scheduleTimeoutSeconds` dropped): set `operatorGang`"))
@pytest.mark.timeout(300)
def test_operator_gang_mode_with_policylib_podgroup_method_one_podgroup(sp_operator_gang):
    """Both on (policylib not told): one PodGroup (same name, both owned by the job), one label value, and the
    gang binds: no duplicate. But the spec is the operator's, whoever created it first: training-operator
    replaces the whole spec (minResources added, policylib's scheduleTimeoutSeconds dropped) on every sync,
    so policylib's timeout is silently lost: tell policylib (gang.operatorGang, rule G15)."""
    c = sp_operator_gang
    ns = c.namespace("opmode-both", config="gang")
    stored = create(c, tfjob("train", ns, "fits3b", None))
    assert {r["template"]["metadata"]["labels"][POD_GROUP_LABEL] for r in stored["spec"]["tfReplicaSpecs"].values()} \
        == {"train"}
    wait_for("a PodGroup exists", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    pods = wait_pods(c, ns, stored, 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 3, timeout=150)
    groups = c.list(PODGROUP, ns)
    assert [g["metadata"]["name"] for g in groups] == ["train"]
    assert groups[0]["spec"] == {"minMember": 3, "minResources": {"cpu": "3"}}


@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="`method: podgroup`, `operatorGang: scheduler-plugins`",
    operator="training-operator, scheduler-plugins",
    jobs="TFJob",
    outcome="policylib writes nothing (rule G15); the operator's PodGroup only; all bind")
@pytest.mark.timeout(300)
def test_operator_gang_mode_told_to_policylib_leaves_the_job_alone(sp_operator_gang):
    """``gang.operatorGang: scheduler-plugins``: the webhook writes nothing and the controller creates
    nothing; the operator's PodGroup is the only one and the gang binds."""
    c = sp_operator_gang
    ns = c.namespace("opmode-told", config="operator")
    stored = create(c, tfjob("train", ns, "fits3c", None))
    for rspec in stored["spec"]["tfReplicaSpecs"].values():
        assert POD_GROUP_LABEL not in (rspec["template"].get("metadata") or {}).get("labels", {})
    pg = wait_for("the operator creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert [r["kind"] for r in pg["metadata"]["ownerReferences"]] == ["TFJob"]
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 3, timeout=150)
    assert [g["metadata"]["name"] for g in c.list(PODGROUP, ns)] == ["train"]


@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="`method: podgroup`, operator not told",
    operator="MPI Operator, scheduler-plugins (`--gang-scheduling=scheduler-plugins-scheduler`)",
    jobs="MPIJob v2beta1",
    outcome=("one PodGroup, owned by the MPIJob, one label value; all bind; the spec is the operator's "
             "(`scheduleTimeoutSeconds: 0` when the job sets none, `minResources` added); the operator "
             "overwrites `schedulerName`: set `operatorGang`"))
@pytest.mark.timeout(300)
def test_mpi_operator_gang_mode_with_policylib_podgroup_method_one_podgroup(sp_operator_gang):
    """The MPI Operator's --gang-scheduling with policylib's podgroup method on and not told: one PodGroup
    (both owned by the MPIJob, so the operator adopts and rewrites whichever exists first), one label value,
    the gang binds. The spec is the operator's (its scheduleTimeoutSeconds 0 when the job sets none,
    minResources added): set gang.operatorGang (rule G15). The operator also overwrites schedulerName."""
    c = sp_operator_gang
    ns = c.namespace("mpimode-both", config="gang")
    stored = create(c, mpijob("train", ns, "fits3d", None))
    assert {r["template"]["metadata"]["labels"][POD_GROUP_LABEL] for r in stored["spec"]["mpiReplicaSpecs"].values()} \
        == {"train"}
    wait_for("a PodGroup exists", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    pods = wait_pods(c, ns, stored, 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {COSCHEDULING}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 3, timeout=150)
    groups = c.list(PODGROUP, ns)
    assert [g["metadata"]["name"] for g in groups] == ["train"]
    assert [r["kind"] for r in groups[0]["metadata"]["ownerReferences"]] == ["MPIJob"]
    assert groups[0]["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 0, "minResources": {"cpu": "3"}}


@pytest.mark.proves(
    scheduler="Coscheduling",
    settings="`method: podgroup`, `operatorGang: scheduler-plugins`",
    operator="MPI Operator, scheduler-plugins",
    jobs="MPIJob v2beta1",
    outcome="policylib writes nothing (G15); the operator's PodGroup (minMember = workers + 1) only; all bind")
@pytest.mark.timeout(300)
def test_mpi_operator_gang_mode_told_to_policylib_leaves_the_job_alone(sp_operator_gang):
    """``gang.operatorGang: scheduler-plugins`` with the MPI Operator's --gang-scheduling: the webhook
    writes nothing; the operator's PodGroup (minMember = workers + 1) is the only one, all 3 bind."""
    c = sp_operator_gang
    ns = c.namespace("mpimode-told", config="operator")
    stored = create(c, mpijob("train", ns, "fits3e", None))
    for rspec in stored["spec"]["mpiReplicaSpecs"].values():
        assert POD_GROUP_LABEL not in (rspec["template"].get("metadata") or {}).get("labels", {})
    pg = wait_for("the operator creates the PodGroup", lambda: c.get_or_none(PODGROUP, "train", ns), timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [r["kind"] for r in pg["metadata"]["ownerReferences"]] == ["MPIJob"]
    pods = wait_pods(c, ns, stored, 3)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(c, ns, stored))) == 3, timeout=150)
    assert [g["metadata"]["name"] for g in c.list(PODGROUP, ns)] == ["train"]
