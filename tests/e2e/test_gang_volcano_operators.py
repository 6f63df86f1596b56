"""Kubeflow jobs on Volcano with the operators' Volcano gang modes (``testcluster --volcano
--training-operator --training-operator-gang volcano --mpi-operator --mpi-operator-gang volcano``): the
operator creates the Volcano PodGroup and policylib, not set to make one (rule G21), steps aside (G15). Each test creates
only the job. Rows of docs/compatibility.md name these tests."""
from __future__ import annotations

import pytest

from .gang_operators import bound, create, job_pods, mpijob, pytorchjob, start_cluster, tfjob, wait_pods
from .harness import Webhook, wait_for

VC_PODGROUP = "podgroups.scheduling.volcano.sh"
GROUP_NAME = "scheduling.k8s.io/group-name"
CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}


@pytest.fixture(scope="module")
def vc(harness_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gang-volcano-operators")
    c = start_cluster(tmp, "--volcano", "--training-operator", "--training-operator-gang", "volcano",
                      "--mpi-operator", "--mpi-operator-gang", "volcano",
                      targets=("testcluster-volcano", "testcluster-training-operator", "testcluster-mpi-operator"))
    hook = None
    try:
        hook = Webhook(c, "gang", CONFIG, tmp).start()
        hook.register()
        yield c
    finally:
        if hook:
            hook.stop()
        assert c.stop() == 0


@pytest.mark.proves(
    scheduler="Volcano",
    settings=("any but `scheduler: volcano` (templates scheduled by `volcano`: policylib steps aside with a "
              "warning, G15)"),
    operator="training-operator, volcano",
    jobs="TFJob, PyTorchJob",
    outcome="the operator's Volcano PodGroup only; all bind")
@pytest.mark.proves(
    scheduler="Volcano",
    settings="as above",
    operator="MPI Operator, volcano (`--gang-scheduling=volcano`)",
    jobs="MPIJob v2beta1 Launcher+Worker",
    outcome="the operator's Volcano PodGroup (minMember = workers + 1) only; all bind")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["TFJob", "PyTorchJob", "MPIJob"])
def test_operator_volcano_mode_podgroup_and_gang_binds(vc, kind):
    """policylib's webhook sees the job (templates scheduled by volcano) and writes nothing; the operator's
    Volcano PodGroup (minMember 3) is the only one; all 3 pods bind. MPIJob: the MPI Operator's
    --gang-scheduling=volcano (minMember = workers + 1)."""
    build, group = {"TFJob": (tfjob, "fits3"), "PyTorchJob": (pytorchjob, "fits3b"), "MPIJob": (mpijob, "fits3c")}[kind]
    ns = vc.namespace(f"vc-{kind.lower()}", config="gang")
    job = build("train", ns, group, "volcano")
    stored = create(vc, job)
    specs = stored["spec"][{"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs",
                            "MPIJob": "mpiReplicaSpecs"}[kind]]
    assert [r["template"].get("metadata") for r in specs.values()] == [None, None]   # policylib wrote nothing
    pg = wait_for("the operator creates the Volcano PodGroup", lambda: vc.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 3
    assert [r["kind"] for r in pg["metadata"]["ownerReferences"]] == [kind]
    pods = wait_pods(vc, ns, stored, 3, timeout=150)
    assert {(p["metadata"].get("annotations") or {}).get(GROUP_NAME) for p in pods} == {"train"}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(vc, ns, stored))) == 3, timeout=150)
    assert [g["metadata"]["name"] for g in vc.list(VC_PODGROUP, ns)] == ["train"]


@pytest.mark.proves(
    scheduler="Volcano",
    settings="any but `scheduler: volcano`",
    operator="training-operator, volcano",
    jobs="TFJob that cannot fit",
    outcome="Volcano marks the gang Unschedulable; nothing binds")
@pytest.mark.timeout(300)
def test_operator_volcano_mode_gang_that_cannot_fit_binds_nothing(vc):
    """4 pods on 3 CPUs: Volcano's gang plugin marks the PodGroup Unschedulable (whether the operator has
    created the pods yet or still withholds them for a Pending group) and binds none of them."""
    ns = vc.namespace("vc-short", config="gang")
    stored = create(vc, tfjob("train", ns, "short", "volcano", workers=3))
    pg = wait_for("the operator creates the Volcano PodGroup", lambda: vc.get_or_none(VC_PODGROUP, "train", ns),
                  timeout=90)
    assert pg["spec"]["minMember"] == 4
    ever: set[str] = set()

    def unschedulable():
        ever.update(bound(job_pods(vc, ns, stored)))
        status = vc.get(VC_PODGROUP, "train", ns).get("status") or {}
        return ever or [c for c in status.get("conditions") or [] if c.get("type") == "Unschedulable"]
    wait_for("Volcano marks the gang Unschedulable", unschedulable, timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"
    assert bound(job_pods(vc, ns, stored)) == []
