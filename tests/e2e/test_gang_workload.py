"""Gang method ``workload`` end to end on both Kubernetes minors (rules G16-G20, G22-G24; ``pytest.mark.minors()``):
Kubernetes' own gang scheduling in the version each API server serves (``testcluster --kubernetes 1.36``:
``scheduling.k8s.io/v1alpha2`` behind ``GangScheduling,GenericWorkload``; ``--kubernetes 1.37``: ``v1beta1`` behind
``GenericWorkload``, with the runtime-config of each) for TFJobs, PyTorchJobs and MPIJobs that training-operator
and the MPI Operator turn into pods. The test creates only the job: policylib's webhook labels its templates, the
operator creates the pods, the webhook's gang-pods entry writes each pod's ``spec.schedulingGroup`` (or refuses it
where no PodGroup can be made), policylib's controller creates the Workload and PodGroup in the served version, and
the default kube-scheduler places the gang all or nothing. Each test reports the API versions written in the run's
summary. docs/compatibility.md is generated from the ``proves`` declarations here."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

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
from .harness import WORKLOAD_API, WORKLOAD_GATES, Controller, Webhook, gang_webhook_and_controller, wait_for
from .util import POLICYLIB

#: Every test here runs on each minor the harness runs (the ``minor`` fixture).
pytestmark = pytest.mark.minors()
#: The gates of each minor (1.37 has no GangScheduling gate); testcluster turns on the minor's Workload API with them.
GATES = WORKLOAD_GATES
VERSION = {minor: api.rpartition("/")[2] for minor, api in WORKLOAD_API.items()}
#: The PodGroup condition kube-scheduler's pod group cycle writes (scheduling/v1alpha2 and v1beta1 types.go).
CONDITION = {"1.36": "PodGroupScheduled", "1.37": "PodGroupInitiallyScheduled"}
LABEL = "policylib.io/scheduling-group"
CONFIG = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}, "controller": {"leaseDurationSeconds": 6}}


def workloads(minor: str) -> str:
    return f"workloads.{VERSION[minor]}.scheduling.k8s.io"


def podgroups(minor: str) -> str:
    return f"podgroups.{VERSION[minor]}.scheduling.k8s.io"


@pytest.fixture(scope="module")
def native_setup(harness_built, tmp_path_factory, minor):
    """training-operator and the MPI Operator (no gang mode of their own) on a cluster of each minor with its
    Workload API on; policylib's webhook and controller with gang method workload."""
    tmp = tmp_path_factory.mktemp(f"gang-workload-{minor}")
    c = start_cluster(tmp, "--training-operator", "--mpi-operator", "--feature-gates", GATES[minor],
                      targets=("testcluster-training-operator", "testcluster-mpi-operator"), minor=minor)
    hook = ctl = None
    try:
        c.namespace(LEASE_NS)
        hook = Webhook(c, "gang", CONFIG, tmp).start()
        hook.register()
        ctl = leader = Controller(c, CONFIG, tmp, "gang-workload", LEASE_NS)
        wait_for("the controller leads", lambda: leader.status()["leader"], timeout=60)
        yield c, hook, minor, tmp, ctl
    finally:
        for proc in (ctl, hook):
            if proc:
                proc.stop()
        assert c.stop() == 0


def scheduled_condition(c, ns: str, minor: str) -> tuple[str, str, str] | None:
    """(status, reason, message) of the PodGroup's scheduling condition, written by kube-scheduler's pod group cycle
    (pkg/scheduler/schedule_one_podgroup.go), or None before it has one."""
    pg = c.get_or_none(podgroups(minor), "train", ns) or {}
    found = [(x["status"], x["reason"], x.get("message", "")) for x in (pg.get("status") or {}).get("conditions") or []
             if x["type"] == CONDITION[minor]]
    return found[0] if found else None


def owner(obj: dict) -> list[tuple[str, str, bool]]:
    return [(r["kind"], r["uid"], r.get("controller", False)) for r in obj["metadata"].get("ownerReferences") or []]


JOBS = {"TFJob": (tfjob, "fits3", "tfReplicaSpecs", {"PS", "Worker"}),
        "PyTorchJob": (pytorchjob, "fits3b", "pytorchReplicaSpecs", {"Master", "Worker"}),
        "MPIJob": (mpijob, "fits3c", "mpiReplicaSpecs", {"Launcher", "Worker"})}


@pytest.mark.proves(scheduler="kube-scheduler (gates of each minor: 1.36 `GangScheduling`, `GenericWorkload`; 1.37 "
                              "`GenericWorkload`; and the runtime-config of its Workload API)",
                    settings="`method: workload`, `scheduler: kube-scheduler`", operator="training-operator, none",
                    jobs="TFJob PS+Worker, PyTorchJob Master+Worker",
                    outcome=("the operator's pods carry the label policylib wrote and the `spec.schedulingGroup` its "
                             "webhook wrote; policylib's controller makes the Workload and PodGroup in the served "
                             "version (`v1alpha2` on 1.36, `v1beta1` on 1.37; minCount 3, owned by the job); all bind"))
@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="`method: workload`", operator="MPI Operator, none",
                    jobs="MPIJob v2beta1 Launcher+Worker (the launcher's pod made by the Job controller)",
                    outcome="as above", )
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(JOBS))
def test_workload_method_operator_pods_carry_the_scheduling_group_and_bind_together(report, native_setup, kind):
    """3 pods of 1 CPU on 3 CPUs (TFJob PS+Worker, PyTorchJob Master+Worker, MPIJob Launcher+Worker): the
    templates carry the label, the operator's pods carry spec.schedulingGroup (written by the webhook), the
    controller's Workload and PodGroup are in the minor's version, say minCount 3 and are owned by the job, and
    kube-scheduler binds all three."""
    native, _, minor, _, _ = native_setup
    build, group, specs_key, roles = JOBS[kind]
    ns = native.namespace(f"workload-{kind.lower()}", config="gang")
    stored = create(native, build("train", ns, group, None))
    specs = stored["spec"][specs_key]
    assert {k: v["template"]["metadata"]["labels"] for k, v in specs.items()} == {r: {LABEL: "train"} for r in roles}
    assert check_gang(CONFIG, native, stored, group) == []
    pg = wait_for("the controller creates the PodGroup", lambda: native.get_or_none(podgroups(minor), "train", ns),
                  timeout=90)
    wl = native.get(workloads(minor), "train", ns)
    api = f"scheduling.k8s.io/{VERSION[minor]}"
    assert (wl["apiVersion"], pg["apiVersion"]) == (api, api)
    uid = stored["metadata"]["uid"]
    assert owner(wl) == owner(pg) == [(kind, uid, True)]
    # the API server stores schedulingConstraints as null (the template's field has no omitempty)
    assert wl["spec"]["podGroupTemplates"] == [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 3}},
                                                "schedulingConstraints": None}]
    assert wl["spec"]["controllerRef"] == {"apiGroup": "kubeflow.org", "kind": kind, "name": "train"}
    if minor == "1.36":
        assert pg["spec"]["podGroupTemplateRef"] == {"workload": {"workloadName": "train",
                                                                  "podGroupTemplateName": "gang"}}
    else:
        assert pg["spec"]["workloadRef"] == {"workloadName": "train", "templateName": "gang"}
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    pods = wait_pods(native, ns, stored, 3)
    assert {p["metadata"]["labels"].get(LABEL) for p in pods} == {"train"}
    assert [p["spec"].get("schedulingGroup") for p in pods] == [{"podGroupName": "train"}] * 3
    assert {p["spec"].get("schedulerName") for p in pods} == {"default-scheduler"}
    wait_for("all 3 pods bound", lambda: len(bound(job_pods(native, ns, stored))) == 3, timeout=150)
    condition = wait_for("the PodGroup's condition", lambda: scheduled_condition(native, ns, minor), timeout=60)
    assert condition[:2] == ("True", "Scheduled")
    report(f"Kubernetes {minor}: {kind} {ns}/train: Workload {wl['apiVersion']}, PodGroup {pg['apiVersion']} "
                    f"(minCount 3): 3 of 3 pods bound")


@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="`method: workload`",
                    operator="training-operator, none", jobs="TFJob that cannot fit",
                    outcome="`policylib check` predicts it; every pod judged unschedulable; nothing binds")
@pytest.mark.timeout(300)
def test_workload_method_gang_that_cannot_fit_binds_nothing_as_check_predicted(report, native_setup):
    """PS 1 + Worker 3 on 3 CPUs: check predicts it; kube-scheduler judges every pod of the gang
    unschedulable and binds none."""
    native, _, minor, _, _ = native_setup
    ns = native.namespace("workload-short", config="gang")
    stored = create(native, tfjob("train", ns, "short", None, workers=3))
    assert check_gang(CONFIG, native, stored, "short") == [
        f"TFJob {ns}/train: its gang needs 4 pods at once; the Nodes can hold 3 of them now: kube-scheduler would "
        "keep its PodGroup Unschedulable and bind none of them"]
    pods = wait_pods(native, ns, stored, 4)
    assert [p["spec"].get("schedulingGroup") for p in pods] == [{"podGroupName": "train"}] * 4
    pg = wait_for("the controller creates the PodGroup", lambda: native.get_or_none(podgroups(minor), "train", ns),
                  timeout=90)
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    ever: set[str] = set()

    def all_unschedulable():
        listed = job_pods(native, ns, stored)
        ever.update(bound(listed))
        conds = [c for p in listed for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
        return ever or (len(conds) == 4 and all(c["status"] == "False" for c in conds))
    wait_for("every pod judged unschedulable", all_unschedulable, timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"
    condition = wait_for("the PodGroup's condition", lambda: scheduled_condition(native, ns, minor), timeout=60)
    assert condition[:2] == ("False", "Unschedulable")
    report(f"Kubernetes {minor}: TFJob {ns}/train: PodGroup {pg['apiVersion']} (minCount 4): 0 of 4 pods "
                    f"bound ({condition[2]})")


@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="`method: workload`",
                    operator="training-operator, none", jobs="TFJob unsuspended while policylib's webhook is down",
                    outcome=("the API server refuses the operator's pods (`gang-pods` is `failurePolicy: Fail`; "
                             "`FailedCreatePod` on the job), none runs alone; once the webhook is back the operator's "
                             "retry creates them with `schedulingGroup`; all bind"))
@pytest.mark.timeout(300)
def test_workload_method_gang_pods_wait_while_the_webhook_is_down(native_setup):
    """failurePolicy Fail of the gang-pods webhook (rule G17): while the webhook is down the API server
    refuses the operator's labelled pods (none is admitted without its schedulingGroup, to run alone); the
    operator retries, and once the webhook is back every pod carries it and the gang binds."""
    c, hook, minor, _, _ = native_setup
    ns = c.namespace("workload-down", config="gang")
    job = tfjob("train", ns, "role", None, ps=1, workers=1)
    job["spec"]["runPolicy"] = {"suspend": True}     # no pods until the webhook is down
    stored = create(c, job)
    wait_for("the controller creates the PodGroup", lambda: c.get_or_none(podgroups(minor), "train", ns), timeout=90)
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


@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="`method: workload`",
                    operator="training-operator, none", jobs="TFJob whose Worker replicas change (suspended)",
                    outcome=("1.37: the controller patches both `gang.minCount`s (mutable in `v1beta1`); 1.36: it "
                             "leaves them and logs that `v1alpha2`'s are immutable"))
@pytest.mark.timeout(300)
def test_a_changed_minimum_is_patched_where_the_version_lets_it_change(report, native_setup):
    """Rule G19 on the real API servers: v1beta1 accepts a new minCount on the PodGroup and the Workload's template;
    v1alpha2's is immutable, so the controller only says so."""
    c, _, minor, _, ctl = native_setup
    ns = c.namespace("workload-resize", config="gang")
    job = tfjob("train", ns, "fits3", None, ps=1, workers=2)
    job["spec"]["runPolicy"] = {"suspend": True}     # no pods: only the gang objects
    create(c, job)
    wait_for("the controller creates the PodGroup", lambda: c.get_or_none(podgroups(minor), "train", ns), timeout=90)
    c.kubectl("patch", "tfjobs.kubeflow.org", "train", "-n", ns, "--type=merge",
              "-p", json.dumps({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}))

    def min_counts():
        pg, wl = c.get(podgroups(minor), "train", ns), c.get(workloads(minor), "train", ns)
        return (pg["spec"]["schedulingPolicy"]["gang"]["minCount"],
                wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"])
    if minor == "1.36":
        refused = wait_for("the controller's verdict", lambda: [
            e for e in ctl.log_entries("cannot plan") if e.get("object") == f"PodGroup {ns}/train"], timeout=90)
        assert "its gang policy is immutable" in refused[0]["reasons"][0], refused
        assert min_counts() == (3, 3)
    else:
        wait_for("both minCounts patched to 4", lambda: min_counts() == (4, 4), timeout=90)
    report(f"Kubernetes {minor}: TFJob {ns}/train resized to a minimum of 4: PodGroup and Workload "
           f"{WORKLOAD_API[minor]} minCount {min_counts()[0]}")


def check_cluster(c, tmp, ns: str, config: dict = CONFIG) -> tuple[int, list[dict], str]:
    cfg = tmp / "check-workload.yaml"
    cfg.write_text(yaml.safe_dump(config))
    run = subprocess.run([*POLICYLIB, "check", "--cluster", "--config", str(cfg), "-n", ns, "-o", "json"],
                         capture_output=True, text=True, env=c.env, timeout=120)
    return run.returncode, json.loads(run.stdout or "[]"), run.stderr


@pytest.mark.timeout(300)
def test_check_cluster_names_the_served_version_what_must_be_on_and_the_upgrade_ahead(report, native_setup):
    """Rules G22 and G24 on the real API server: the version served and written, the flags of the minor; on 1.36,
    with v1alpha2 objects stored (the earlier tests' jobs made them), a warning before the upgrade to 1.37."""
    c, _, minor, tmp, _ = native_setup
    ns = c.namespace("workload-check", config="gang")
    stored = create(c, tfjob("train", ns, "fits3d", None))
    wait_for("the controller creates the PodGroup", lambda: c.get_or_none(podgroups(minor), "train", ns), timeout=90)
    code, findings, err = check_cluster(c, tmp, ns)
    api = f"scheduling.k8s.io/{VERSION[minor]}"
    served = {"key": "gang.workloadAPIVersion", "severity": "info",
              "message": f"{api} (Kubernetes {minor}: the API server serves {api}): policylib writes its Workloads and "
                         f"PodGroups in {api}"}
    assert served in findings, (findings, err)
    flags = [f["message"] for f in findings if f["key"] == "gang.method" and f["severity"] == "info"]
    assert len(flags) == 1 and f"--feature-gates={GATES[minor]} " in flags[0], flags
    assert f"--runtime-config={api}=true" in flags[0]
    upgrade = [f["message"] for f in findings if f["severity"] == "warning" and f["key"] == "gang.workloadAPIVersion"]
    if minor == "1.36":
        counts = {kind: len(c.list(f"{kind}.v1alpha2.scheduling.k8s.io")) for kind in ("podgroups", "workloads")}
        assert upgrade == [f"upgrading to Kubernetes 1.37 removes v1alpha2: {counts['podgroups']} podgroups in "
                           f"{api}, {counts['workloads']} workloads in {api} would be left in a version 1.37's API "
                           "server neither serves nor decodes; delete them before the upgrade (policylib's controller "
                           "makes its own again in the version 1.37 serves once it is enabled; bound pods keep running)"]
    else:
        assert upgrade == []     # 1.38 is not known to policylib
    assert code == 0, findings
    report(f"Kubernetes {minor}: check --cluster on TFJob {ns}/{stored['metadata']['name']}: "
                    f"{served['message']}; {len(upgrade)} upgrade warning(s)")
    # rule G25: this API server runs without TopologyAwareWorkloadScheduling: a dry run shows it drops the constraint
    topology = {**CONFIG, "gang": {**CONFIG["gang"], "topology": "zone"}}
    _, findings, err = check_cluster(c, tmp, ns, topology)
    dropped = [f["message"] for f in findings if f["key"] == "gang.topology" and f["severity"] == "warning"
               and "drops PodGroup schedulingConstraints" in f["message"]]
    assert len(dropped) == 1, (findings, err)


@pytest.fixture(scope="module")
def no_api(harness_built, tmp_path_factory, minor):
    """The same setup on a cluster of each minor without the gates: no Workload API is served."""
    tmp = tmp_path_factory.mktemp(f"gang-workload-off-{minor}")
    c = start_cluster(tmp, "--training-operator", targets=("testcluster-training-operator",), minor=minor)
    try:
        c.namespace(LEASE_NS)
        with gang_webhook_and_controller(c, CONFIG, tmp, "gang-workload-off", LEASE_NS):
            yield c, tmp, minor
    finally:
        assert c.stop() == 0


ENABLE = {"1.36": ("start kube-apiserver, kube-scheduler and kube-controller-manager with "
                   "--feature-gates=GangScheduling=true,GenericWorkload=true and kube-apiserver with "
                   "--runtime-config=scheduling.k8s.io/v1alpha2=true"),
          "1.37": ("start kube-apiserver, kube-scheduler and kube-controller-manager with "
                   "--feature-gates=GenericWorkload=true and kube-apiserver with "
                   "--runtime-config=scheduling.k8s.io/v1beta1=true")}


@pytest.mark.proves(scheduler="kube-scheduler, without the Workload API", settings="`method: workload`",
                    operator="training-operator, none", jobs="TFJob",
                    outcome=("no Workload API: the webhook refuses the operator's pods naming the API and the flags "
                             "of the minor (`FailedCreatePod` on the job), none runs alone; a Warning Event "
                             "`WorkloadAPINotServed` on the job, and `policylib check --cluster`, say the same"))
@pytest.mark.timeout(300)
def test_workload_method_without_the_api_refuses_the_pods_and_says_what_to_enable(report, no_api):
    """Rules G20, G23 on a real API server that serves no Workload API: the job is admitted with a warning; its
    operator's pods are refused with the message naming the minor's version and flags (none waits for a PodGroup
    that never comes, none runs outside its gang); one Warning Event on the job says the same; and so does
    `policylib check --cluster`."""
    c, tmp, minor = no_api
    ns = c.namespace("workload-off", config="gang")
    job = tfjob("train", ns, "fits3e", None)
    made = c.kubectl("create", "-f", "-", input=json.dumps(job))
    version = VERSION[minor]
    missing = (f"the API server does not serve scheduling.k8s.io/{version} (gang.method workload; Kubernetes {minor}): "
               f"{ENABLE[minor]}")
    # kubectl prints the admission warning (the webhook cuts each at 120 characters)
    assert f"Warning: gang.method workload: scheduling.k8s.io/{version} is not served, so the job's pods are refused" \
        in made.stderr, made.stderr
    stored = c.get("tfjobs.kubeflow.org", "train", ns)

    def refused():
        events = [e for e in c.list("events", ns) if e.get("reason") == "FailedCreatePod"
                  and e["involvedObject"]["name"] == "train"]
        return events or None
    events = wait_for("the operator's pod creates refused", refused, timeout=90)
    assert "no PodGroup train can be made, so the pod is refused" in events[0]["message"], events[0]["message"]
    assert missing in events[0]["message"]
    assert job_pods(c, ns, stored) == []

    def warnings():
        found = [e for e in c.list("events.events.k8s.io", ns) if e.get("reason") == "WorkloadAPINotServed"]
        return found or None
    found = wait_for("the controller's Warning Event on the job", warnings, timeout=90)
    assert [(e["type"], e["regarding"]["kind"], e["regarding"]["name"], e["regarding"]["uid"]) for e in found] == [
        ("Warning", "TFJob", "train", stored["metadata"]["uid"])]
    assert found[0]["note"] == f"TFJob {ns}/train: no Workload train made: {missing}"
    code, findings, err = check_cluster(c, tmp, ns)
    assert code == 3, err
    assert {"severity": "error", "key": "gang.method",
            "message": f"{missing}: no job's pods would be gang-scheduled (the webhook refuses them)"} in findings
    report(f"Kubernetes {minor} without the Workload API: pods refused: {missing}")
