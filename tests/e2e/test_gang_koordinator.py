"""Koordinator's gang methods on koord-scheduler (``testcluster --koordinator``, built by ``make
testcluster-koordinator``), the pods made by the real training-operator: the annotation method, the
lightweight labels, a GangGroup across two roles, mixed priorities refused before the scheduler sees
them, and the match policies once-satisfied and waiting-and-running after members are deleted. Each
test creates only the job. Rows of docs/compatibility.md name these tests."""
from __future__ import annotations

import json

import pytest

from .gang_operators import (
    GROUP,
    KOORD,
    bound,
    check_gang,
    create,
    job_pods,
    rejected_everyone,
    start_cluster,
    tfjob,
    wait_pods,
)
from .harness import Webhook, wait_for

KOORD_NAME = "gang.scheduling.koordinator.sh/name"
KOORD_MIN = "gang.scheduling.koordinator.sh/min-available"
KOORD_WAIT = "gang.scheduling.koordinator.sh/waiting-time"
KOORD_GROUPS = "gang.scheduling.koordinator.sh/groups"
CONFIGS = {
    "koord": {"gang": {"method": "koordinator", "scheduler": "koordinator", "scheduleTimeoutSeconds": 30}},
    "koordlabels": {"gang": {"method": "labels", "scheduler": "koordinator"}},
    "koordroles": {"gang": {"method": "koordinator", "scheduler": "koordinator", "groupByRole": True,
                            "scheduleTimeoutSeconds": 30}},
    "koorddeny": {"gang": {"method": "koordinator", "scheduler": "koordinator", "onViolation": "deny"}},
    "once": {"gang": {"method": "koordinator", "scheduler": "koordinator", "matchPolicy": "once-satisfied"}},
    "war": {"gang": {"method": "koordinator", "scheduler": "koordinator", "matchPolicy": "waiting-and-running"}},
}


@pytest.fixture(scope="module")
def koord(harness_built, tmp_path_factory):
    """koord-scheduler and training-operator, and one webhook per Koordinator gang config."""
    tmp = tmp_path_factory.mktemp("gang-koordinator")
    c = start_cluster(tmp, "--koordinator", "--training-operator",
                      targets=("testcluster-koordinator", "testcluster-training-operator"))
    hooks: list[Webhook] = []
    try:
        for name, cfg in CONFIGS.items():
            hook = Webhook(c, name, cfg, tmp).start()
            hooks.append(hook)
            hook.register()
        yield c
    finally:
        for hook in hooks:
            hook.stop()
        assert c.stop() == 0


def annotations(pod: dict) -> dict:
    return pod["metadata"].get("annotations") or {}


@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: koordinator`, `scheduler: koordinator`",
    operator="training-operator, none",
    jobs="TFJob",
    outcome="name, min-available, waiting-time on every pod; all bind")
@pytest.mark.timeout(300)
def test_annotation_method_gang_binds_on_koord_scheduler(koord):
    """name, min-available and waiting-time on every pod the operator made; all 3 bind."""
    ns = koord.namespace("koord-ann", config="koord")
    stored = create(koord, tfjob("train", ns, "fits3", KOORD))
    pods = wait_pods(koord, ns, stored, 3)
    assert {(annotations(p).get(KOORD_NAME), annotations(p).get(KOORD_MIN), annotations(p).get(KOORD_WAIT))
            for p in pods} == {("train", "3", "30s")}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(koord, ns, stored))) == 3, timeout=150)


@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: koordinator`",
    operator="training-operator, none",
    jobs="TFJob that cannot fit",
    outcome="`policylib check` predicts it; nothing binds")
@pytest.mark.timeout(300)
def test_annotation_method_gang_that_cannot_fit_binds_nothing(koord):
    """4 pods on 3 CPUs: check predicts it; koord-scheduler binds none of them."""
    ns = koord.namespace("koord-short", config="koord")
    stored = create(koord, tfjob("train", ns, "short", KOORD, workers=3))
    assert check_gang(CONFIGS["koord"], koord, stored, "short") == [
        f"TFJob {ns}/train: its gang needs 4 pods at once; the Nodes can hold 3 of them now: it would wait for its "
        "scheduleTimeout and never start"]
    names = sorted(p["metadata"]["name"] for p in wait_pods(koord, ns, stored, 4))
    ever: set[str] = set()
    wait_for("every pod rejected", lambda: rejected_everyone(koord, ns, names, ever, stored), timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"


@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: labels`, `scheduler: koordinator`",
    operator="training-operator, none",
    jobs="TFJob",
    outcome="lightweight labels on every pod; all bind")
@pytest.mark.timeout(300)
def test_lightweight_labels_gang_binds_on_koord_scheduler(koord):
    ns = koord.namespace("koord-labels", config="koordlabels")
    stored = create(koord, tfjob("train", ns, "fits3b", KOORD))
    pods = wait_pods(koord, ns, stored, 3)
    assert {(p["metadata"]["labels"].get("pod-group.scheduling.sigs.k8s.io/name"),
             p["metadata"]["labels"].get("pod-group.scheduling.sigs.k8s.io/min-available")) for p in pods} == {
        ("train", "3")}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(koord, ns, stored))) == 3, timeout=150)


@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: koordinator`, `groupByRole: true`",
    operator="training-operator, none",
    jobs="TFJob PS fits, Worker does not",
    outcome="GangGroup: nothing binds; room added: all bind")
@pytest.mark.timeout(300)
def test_gang_group_across_roles_binds_nothing_until_room_is_added(koord):
    """PS (1) fits on the group's 2 CPUs, Worker (3) does not: as one GangGroup nothing binds, not even PS;
    a Node with 2 more CPUs lets all 4 bind."""
    ns = koord.namespace("koord-roles", config="koordroles")
    stored = create(koord, tfjob("train", ns, "role", KOORD, workers=3))
    pods = wait_pods(koord, ns, stored, 4)
    assert {annotations(p).get(KOORD_GROUPS) for p in pods} == {json.dumps([f"{ns}/train-ps", f"{ns}/train-worker"])}
    names = sorted(p["metadata"]["name"] for p in pods)
    ever: set[str] = set()
    wait_for("every pod rejected", lambda: rejected_everyone(koord, ns, names, ever, stored), timeout=150)
    assert not ever, f"a member of a GangGroup that does not fit was bound: {sorted(ever)}"
    koord.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "role-extra", "labels": {GROUP: "role"}}})
    koord.kubectl("patch", "node", "role-extra", "--subresource=status", "--type=merge", "-p",
                  '{"status": {"allocatable": {"cpu": "2", "memory": "64Gi", "pods": "110"}, '
                  '"capacity": {"cpu": "2", "memory": "64Gi", "pods": "110"}}}')
    wait_for("all 4 pods bound", lambda: len(bound(job_pods(koord, ns, stored))) == 4, timeout=200)


@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: koordinator`, `onViolation: deny`",
    operator="training-operator, none",
    jobs="TFJob with mixed priorities",
    outcome="refused at admission; no pod is made")
def test_mixed_priorities_are_refused_before_the_scheduler_sees_them(koord):
    """PS and Worker with different priority classes under ``onViolation: deny``: the API server refuses the
    job with policylib's reason, so no pod is ever created."""
    ns = koord.namespace("koord-prio", config="koorddeny")
    job = tfjob("train", ns, "fits3c", KOORD)
    job["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["priorityClassName"] = "high"
    run = koord.kubectl("create", "-f", "-", input=json.dumps(job), check=False)
    assert run.returncode != 0
    assert "different priorityClassName" in run.stderr, run.stderr
    assert koord.get_or_none("tfjobs.kubeflow.org", "train", ns) is None



def failed_scheduling_uids(c, ns: str) -> set[str]:
    return {e["involvedObject"].get("uid") for e in c.list("events", ns)
            if e.get("reason") == "FailedScheduling" and e["involvedObject"]["kind"] == "Pod"}


@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: koordinator`, `matchPolicy: once-satisfied` (Koordinator's default)",
    operator="training-operator, none",
    jobs="TFJob (`enableDynamicWorker: true`), 2 of 3 members deleted and recreated by the operator, room for 1",
    outcome="the replacement that fits binds alone: the job runs with 2 of its minimum 3 (koordinator issue 2244)")
@pytest.mark.proves(
    scheduler="koord-scheduler",
    settings="`method: koordinator`, `matchPolicy: waiting-and-running`",
    operator="training-operator, none",
    jobs="as above",
    outcome="running + waiting = 2 < 3: neither replacement binds")
@pytest.mark.timeout(400)
@pytest.mark.parametrize("policy, replacements_bound", [("once-satisfied", 1), ("waiting-and-running", 0)])
def test_match_policy_after_members_are_deleted(koord, policy, replacements_bound):
    """A 3-pod gang (min 3) runs on three 1-CPU Nodes; one Node is tainted, the members on it (B) and on
    another Node (A) are deleted and training-operator recreates them, with room for one (A's Node).
    once-satisfied (Koordinator's default) lets A's replacement bind: the job runs with 2 of its minimum 3
    (koordinator issue 2244: the gang stays "once resource satisfied"); waiting-and-running counts the
    running member plus the waiting ones, 2 < 3, and binds neither (coscheduling/core/gang.go
    isGangValidForPermit).

    Koordinator counts a member as bound until its pod is gone, terminating or not: if A's replacement
    reached Permit while B was still terminating, 1 waiting + 2 "bound" would let it through under
    waiting-and-running too (seen on the first run). So A is held by a finalizer until B is gone.

    ``enableDynamicWorker: true``: training-operator v1.9.3 counts a Running pod with a deletionTimestamp
    as failed (pkg/core/status.go UpdateJobReplicaStatuses), which fails a TFJob whatever its restartPolicy
    (a Restarting condition is set only for pods in phase Failed) and a finished job is never reconciled
    again, so without it no member is ever recreated; with it Worker failures do not fail the job."""
    group = "once" if policy == "once-satisfied" else "war"
    ns = koord.namespace(f"koord-{group}", config=group)
    job = tfjob("train", ns, group, KOORD, ps=0, workers=3)
    job["spec"]["enableDynamicWorker"] = True
    stored = create(koord, job)
    pods = wait_pods(koord, ns, stored, 3)
    assert {annotations(p).get("gang.scheduling.koordinator.sh/match-policy") for p in pods} == {policy}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(koord, ns, stored))) == 3, timeout=150)
    placed = {p["spec"]["nodeName"]: p for p in job_pods(koord, ns, stored)}
    a, b = placed[f"{group}-1"], placed[f"{group}-2"]
    old_uids = {a["metadata"]["uid"], b["metadata"]["uid"]}
    names = {a["metadata"]["name"], b["metadata"]["name"]}
    koord.kubectl("patch", "pod", a["metadata"]["name"], "-n", ns, "--type=merge", "-p",
                  '{"metadata": {"finalizers": ["e2e.policylib.io/hold"]}}')
    koord.kubectl("taint", "node", f"{group}-2", "e2e=full:NoSchedule")
    for p in (b, a):
        koord.kubectl("delete", "pod", p["metadata"]["name"], "-n", ns, "--wait=false")

    def recreated(name: str):
        return next((p for p in job_pods(koord, ns, stored) if p["metadata"]["name"] == name
                     and p["metadata"]["uid"] not in old_uids), None)
    wait_for("the operator recreates B", lambda: recreated(b["metadata"]["name"]), timeout=120)
    koord.kubectl("patch", "pod", a["metadata"]["name"], "-n", ns, "--type=json", "-p",
                  '[{"op": "remove", "path": "/metadata/finalizers"}]')

    def replacements():
        current = [p for p in job_pods(koord, ns, stored) if p["metadata"]["uid"] not in old_uids
                   and p["metadata"]["name"] in names]
        return current if len(current) == 2 and not any(p["metadata"].get("deletionTimestamp") for p in current) \
            else None
    new = wait_for("the operator recreates A", replacements, timeout=120)
    new_uids = {p["metadata"]["uid"] for p in new}

    def new_bound() -> int:
        return len([p for p in job_pods(koord, ns, stored) if p["metadata"]["uid"] in new_uids
                    and p["spec"].get("nodeName")])
    if replacements_bound:
        wait_for("A's replacement binds, B's is rejected",
                 lambda: new_bound() == 1 and new_uids & failed_scheduling_uids(koord, ns), timeout=150)
    else:
        # A's replacement fits its Node: only the gang can reject it (a FailedScheduling of its new uid)
        wait_for("both replacements rejected", lambda: new_uids <= failed_scheduling_uids(koord, ns), timeout=150)
    assert new_bound() == replacements_bound
    assert koord.get("tfjobs.kubeflow.org", "train", ns)["status"]["conditions"][-1]["type"] == "Running"
