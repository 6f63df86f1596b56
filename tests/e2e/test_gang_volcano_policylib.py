"""Kubeflow jobs on Volcano with the operators' own gang modes off (``testcluster --volcano
--training-operator --mpi-operator``, no ``--training-operator-gang``): nobody but policylib makes a
Volcano PodGroup, so policylib does (``gang.method: podgroup``, ``gang.scheduler: volcano``, rule G21):
the webhook writes the annotation scheduling.k8s.io/group-name on every template and the controller
creates the scheduling.volcano.sh/v1beta1 PodGroup owned by the job. Each test creates only the job; the
real operator creates the pods and Volcano's scheduler places them. Rows of docs/compatibility.md name
these tests."""
from __future__ import annotations

import pytest

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
from .harness import gang_webhook_and_controller, refused, wait_for

VC_PODGROUP = "podgroups.scheduling.volcano.sh"
GROUP_NAME = "scheduling.k8s.io/group-name"
CONFIG = {"gang": {"method": "podgroup", "scheduler": "volcano"}, "controller": {"leaseDurationSeconds": 6}}
SPECS = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}
JOBS = {"TFJob": (tfjob, "fits3"), "PyTorchJob": (pytorchjob, "fits3b"), "MPIJob": (mpijob, "fits3c")}


@pytest.fixture(scope="module")
def vcp(harness_built, tmp_path_factory):
    """Volcano, training-operator and the MPI Operator without gang modes; policylib's webhook and
    controller with method podgroup on scheduler volcano."""
    tmp = tmp_path_factory.mktemp("gang-volcano-policylib")
    c = start_cluster(tmp, "--volcano", "--training-operator", "--mpi-operator",
                      targets=("testcluster-volcano", "testcluster-training-operator", "testcluster-mpi-operator"))
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, CONFIG, tmp, "gang-volcano-policylib", LEASE_NS):
            yield c
    finally:
        assert c.stop() == 0


@pytest.mark.proves(
    scheduler="Volcano",
    settings="`method: podgroup`, `scheduler: volcano` (G21)",
    operator="training-operator, none; MPI Operator, none",
    jobs="TFJob PS+Worker, PyTorchJob Master+Worker, MPIJob v2beta1 Launcher+Worker",
    outcome=("policylib's annotation `scheduling.k8s.io/group-name` on every pod; policylib's controller makes"
             " the Volcano PodGroup (owned by the job), the only one (Volcano's controller makes no per-pod "
             "ones); all bind"))
@pytest.mark.timeout(360)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_policylib_volcano_podgroup_gangs_the_operators_pods(vcp, kind):
    """3 pods of 1 CPU on 3 CPUs: the templates carry policylib's group-name annotation, the controller's
    Volcano PodGroup (minMember 3, owned by the job) is the only PodGroup of the namespace (Volcano's own
    controller makes none for pods that name one), the operator's pods carry the annotation, all 3 bind."""
    build, group = JOBS[kind]
    ns = vcp.namespace(f"vcp-{kind.lower()}", config="gang")
    stored = create(vcp, build("train", ns, group, "volcano"))
    assert [r["template"]["metadata"] for r in stored["spec"][SPECS[kind]].values()] == [
        {"annotations": {GROUP_NAME: "train"}}] * 2
    assert check_gang(CONFIG, vcp, stored, group) == []
    pg = wait_for("the controller creates the Volcano PodGroup", lambda: vcp.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [(r["kind"], r["name"], r.get("controller")) for r in pg["metadata"]["ownerReferences"]] == [
        (kind, "train", True)]
    pods = wait_pods(vcp, ns, stored, 3, timeout=150)
    assert {p["metadata"]["annotations"].get(GROUP_NAME) for p in pods} == {"train"}
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(vcp, ns, stored))) == 3, timeout=180)
    assert [g["metadata"]["name"] for g in vcp.list(VC_PODGROUP, ns)] == ["train"]


@pytest.mark.proves(
    scheduler="Volcano",
    settings="`method: podgroup`, `scheduler: volcano`",
    operator="training-operator, none",
    jobs="TFJob that cannot fit",
    outcome="`policylib check` predicts it; Volcano marks policylib's PodGroup Unschedulable; nothing binds")
@pytest.mark.timeout(360)
def test_policylib_volcano_podgroup_gang_that_cannot_fit_binds_nothing_as_check_predicted(vcp):
    """4 pods on 3 CPUs: check predicts it; the operator creates all 4 pods (its gang mode is off, so it
    withholds nothing), Volcano's gang plugin marks policylib's PodGroup Unschedulable and binds none."""
    ns = vcp.namespace("vcp-short", config="gang")
    stored = create(vcp, tfjob("train", ns, "short", "volcano", workers=3))
    assert check_gang(CONFIG, vcp, stored, "short") == [
        f"TFJob {ns}/train: its gang needs 4 pods at once; the Nodes can hold 3 of them now: Volcano would keep its "
        "PodGroup Unschedulable and start none of them"]
    pg = wait_for("the controller creates the Volcano PodGroup", lambda: vcp.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 4
    wait_pods(vcp, ns, stored, 4, timeout=150)
    ever: set[str] = set()

    def unschedulable():
        ever.update(bound(job_pods(vcp, ns, stored)))
        status = vcp.get(VC_PODGROUP, "train", ns).get("status") or {}
        return ever or [c for c in status.get("conditions") or [] if c.get("type") == "Unschedulable"]
    wait_for("Volcano marks the gang Unschedulable", unschedulable, timeout=180)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"
    assert bound(job_pods(vcp, ns, stored)) == []
    assert [g["metadata"]["name"] for g in vcp.list(VC_PODGROUP, ns)] == ["train"]


@pytest.mark.parametrize("args, expected", [
    (("--mpi-operator-gang", "volcano"), "--mpi-operator-gang needs --mpi-operator"),
    (("--mpi-operator", "--mpi-operator-gang", "kueue"),
     '--mpi-operator-gang "kueue": must be one of none, scheduler-plugins, volcano'),
    (("--mpi-operator", "--mpi-operator-gang", "volcano"),
     "--mpi-operator-gang volcano needs --volcano (the operator creates Volcano PodGroups)"),
    (("--mpi-operator", "--mpi-operator-gang", "scheduler-plugins"),
     "--mpi-operator-gang scheduler-plugins needs --coscheduling (the operator names its scheduler, "
     "scheduler-plugins-scheduler)"),
])
def test_mpi_operator_gang_flag_is_checked(harness_built, tmp_path, args, expected):
    """``testcluster --mpi-operator-gang`` (the MPI Operator's --gang-scheduling) is checked like
    --training-operator-gang: exit 2 and one line naming the flag."""
    line = refused("--dir", str(tmp_path / "c"), *args)
    assert line.startswith("testcluster: error: ") and expected in line, line
