"""The policylib controller against a real API server, on a cluster of its own (the controller acts on
every namespace, so the shared cluster's other scenarios would be part of its plan)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import jsonpatch
import pytest
import yaml

from webhook.controller import event_note

from .harness import ROOT, SHARED, Cluster, Controller, Webhook, deployment, scope_args, wait_for
from .util import POLICYLIB, managed, wait_rolled_out

LEASE_NS = "policylib-system"
LEASE_SECONDS = 6
CONFIG = {
    "hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True},
    "gang": {"method": "podgroup", "scheduler": "scheduler-plugins"},
    "controller": {"leaseDurationSeconds": LEASE_SECONDS, "maxConcurrentRollouts": 3},
}
RECORD = "policylib.io/spread-effective-replicas"
LEGACY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "NAME"}}, "topologyKey": "kubernetes.io/hostname"}]}}


@pytest.fixture(scope="module")
def own(harness_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("controller-cluster")
    # Eight nodes in three zones: room for the legacy required anti-affinity of up to 8 replicas.
    nodes = tmp / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": f"node-{i}", "labels": {"topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}"}}}
        for i in range(8)]}))
    c = Cluster(tmp / "c", nodes=nodes)
    c.namespace(LEASE_NS)
    c.tmp = tmp
    yield c
    assert c.stop() == 0


@pytest.fixture
def controllers(own, tmp_path):
    started: list[Controller] = []

    def start(identity: str, config: dict = CONFIG) -> Controller:
        ctl = Controller(own, config, tmp_path, identity, LEASE_NS)
        started.append(ctl)
        return ctl
    yield start
    for ctl in started:
        ctl.stop(signal.SIGKILL)
    # The next test starts from no leader: a killed controller never releases the Lease.
    own.kubectl("delete", "lease", CONFIG.get("controller", {}).get("leaseName", "policylib-controller"),
                "-n", LEASE_NS, "--ignore-not-found")


def legacy(name: str, namespace: str, replicas: int, **kw) -> dict:
    d = deployment(name, namespace, replicas, **kw)
    d["spec"]["template"]["spec"]["affinity"] = json.loads(json.dumps(LEGACY).replace("NAME", name))
    return d


def plan_cluster(cluster: Cluster, tmp, writes_only: bool = True) -> list[dict]:
    """``policylib plan --cluster``: its writes (``writes_only``), or every entry, the Deployments without
    policylib's record that get no write (rule S20, ``action: none``) included."""
    cfg = tmp / "plan-config.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    run = subprocess.run([*POLICYLIB, "plan", "--cluster", "--config", str(cfg), "-o", "json", *scope_args(cluster)],
                         capture_output=True, text=True, cwd=ROOT, env=cluster.env, timeout=120)
    assert run.returncode == 0, run.stderr
    return [e for e in json.loads(run.stdout) if not (writes_only and e["action"] == "none")]


def leader(cluster: Cluster) -> str | None:
    lease = cluster.get_or_none("lease", "policylib-controller", LEASE_NS)
    return (lease or {}).get("spec", {}).get("holderIdentity") or None


def test_drift_writes_are_the_plan_then_nothing(own, controllers, tmp_path):
    ns = own.namespace("drift")   # no webhook here: these are Deployments from before the install
    objs = [legacy("big", ns, 4), legacy("small", ns, 2), deployment("plain", ns, 5), legacy("huge", ns, 7)]
    own.apply(*objs)
    before = {o["metadata"]["name"]: wait_rolled_out(own, ns, o["metadata"]["name"]) for o in objs}
    planned = plan_cluster(own, tmp_path)
    assert sorted(w["name"] for w in planned) == ["big", "huge", "plain"]   # small: below hardMinReplicas
    listed = [(e["name"], e["action"], e.get("unrecorded")) for e in plan_cluster(own, tmp_path, writes_only=False)
              if e["namespace"] == ns and e["action"] == "none"]
    assert listed == [("small", "none", True)]   # rule S20: listed, never written below hardMinReplicas

    ctl = controllers("a")
    wait_for("the controller made the planned writes",
             lambda: len(ctl.log_entries("write")) >= len(planned), timeout=120)
    writes = ctl.log_entries("write")
    assert sorted((w["namespace"], w["object_name"], w["action"], w["rollout"], tuple(w["reasons"])) for w in writes) == \
        sorted((p["namespace"], p["name"], p["action"], p["rollout"], tuple(p["reasons"])) for p in planned)
    for p in planned:
        after = wait_rolled_out(own, ns, p["name"])
        expected = jsonpatch.apply_patch(before[p["name"]], p["patch"])
        assert managed(after) == managed(expected), p["name"]
    small = own.get("deployment", "small", ns)
    assert RECORD not in (small["metadata"].get("annotations") or {})
    assert small["spec"]["template"] == before["small"]["spec"]["template"]
    # One Event per rewritten Deployment, regarding it, with the write's reasons as its note.
    def spread_events():
        events = [e for e in own.list("events.events.k8s.io", ns) if e.get("reason") == "SpreadRewritten"]
        return events if len(events) >= len(planned) else None
    events = wait_for("an Event per write", spread_events, timeout=30)
    assert sorted(e["regarding"]["name"] for e in events) == sorted(p["name"] for p in planned)
    for e in events:
        [p] = [p for p in planned if p["name"] == e["regarding"]["name"]]
        assert (e["type"], e["action"], e["reportingController"], e["reportingInstance"]) == \
            ("Normal", "Rewrite", "policylib.io/controller", ctl.identity)
        assert e["regarding"]["kind"] == "Deployment" and e["regarding"]["uid"] == before[p["name"]]["metadata"]["uid"]
        assert e["note"] == event_note(p["reasons"])
    ctl.stop()

    # A compliant cluster: a fresh controller lists, plans, and writes nothing.
    assert plan_cluster(own, tmp_path) == []
    fresh = controllers("b")
    wait_for("b leads and has listed", lambda: fresh.status()["synced"], timeout=LEASE_SECONDS * 4)
    # Leading, it queued every key; each of the four Deployments is planned once.
    wait_for("b planned every Deployment", lambda: fresh.metric("policylib_controller_reconciles_total", trigger="leader") >= 1
             and fresh.metric("policylib_controller_reconciles_total", trigger="key") >= len(objs)
             and fresh.metric("policylib_controller_queue_depth") == 0)
    assert fresh.metric("policylib_controller_writes_total") == 0
    own.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s")


def test_rollout_cap(own, controllers, tmp_path):
    """maxConcurrentRollouts 1 and three Deployments whose rollouts never finish (no node fits them):
    exactly one is rewritten, the others wait."""
    ns = own.namespace("capped")
    names = ["one", "two", "three"]
    own.apply(*[legacy(n, ns, 4, node_selector={"e2e.policylib.io/group": "none"}) for n in names])
    ctl = controllers("cap", dict(CONFIG, controller=dict(CONFIG["controller"], maxConcurrentRollouts=1)))
    wait_for("one write and two deferred", lambda: ctl.metric("policylib_controller_writes_total") == 1
             and ctl.metric("policylib_controller_deferred_rollouts_total") >= 2, timeout=120)
    rewritten = [n for n in names if RECORD in (own.get("deployment", n, ns)["metadata"].get("annotations") or {})]
    assert len(rewritten) == 1
    assert ctl.metric("policylib_controller_rolling") == 1
    own.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s")


def test_leader_failover(own, controllers):
    a, b = controllers("a"), controllers("b")
    first = wait_for("one controller leads", lambda: leader(own), timeout=LEASE_SECONDS * 4)
    assert first in ("a", "b")
    wait_for("exactly one says it leads", lambda: [a.status()["leader"], b.status()["leader"]].count(True) == 1)
    holder, standby = (a, b) if first == "a" else (b, a)
    holder.stop(signal.SIGKILL)
    killed = time.monotonic()
    # timed by the standby's own status (a local call), the Lease read after: a kubectl per poll on a loaded
    # host would add its own seconds to what is measured
    wait_for("the standby leads", lambda: standby.status()["leader"], timeout=LEASE_SECONDS * 4)
    took = time.monotonic() - killed
    assert leader(own) == standby.identity
    # client-go's rule: the Lease must go unrenewed for leaseDurationSeconds, counted from when the standby first
    # saw its last record (up to a round, a third of the duration, after the renewal), and the standby looks once a
    # round: at most the duration and two rounds
    assert took < LEASE_SECONDS + 2 * LEASE_SECONDS / 3 + 3, f"failover took {took:.1f}s"

    # A leader stopped with SIGTERM (a rolling update) gives the Lease up: the next one leads at its next
    # round (a third of the lease), not a whole lease duration later.
    third = controllers("c")
    wait_for("c stands by", lambda: third.status()["leader"] is False and third.log_entries("controller started"))
    standby.stop(signal.SIGTERM)
    released = time.monotonic()
    assert standby.proc.returncode == 0
    assert (own.get("lease", "policylib-controller", LEASE_NS)["spec"].get("holderIdentity") or "") in ("", "c")
    wait_for("c leads", lambda: third.status()["leader"], timeout=LEASE_SECONDS * 4)
    took = time.monotonic() - released
    assert leader(own) == "c"
    assert took < LEASE_SECONDS / 3 + 3, f"took {took:.1f}s after a release"


def test_watch_gap_does_not_miss_a_deletion(own, controllers):
    """The controller is frozen while an HPA is deleted and the API server restarts (its watch breaks and
    its resourceVersion is compacted away): on resume it must see the deletion, and rewrite the spread for
    spec.replicas, long before the next full resync."""
    ns = own.namespace("gap")
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": ns},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 6, "maxReplicas": 10}}
    own.apply(hpa, deployment("web", ns, 3))
    # A long Lease: the freeze must not cost the leadership (re-leading lists everything again).
    ctl = controllers("gap", dict(CONFIG, controller=dict(CONFIG["controller"], resyncSeconds=3600,
                                                         leaseDurationSeconds=120)))
    wait_for("the spread follows the HPA minimum 6",
             lambda: own.get("deployment", "web", ns)["metadata"].get("annotations", {}).get(RECORD) == "6", timeout=90)
    os.kill(ctl.proc.pid, signal.SIGSTOP)
    try:
        # The restart closes the frozen controller's watches; everything after it reaches the controller
        # only through a new watch or list.
        own.restart_apiserver()
        wait_for("the API server is back", lambda: own.kubectl("get", "ns", "default", check=False).returncode == 0
                 and own.kubectl("get", "hpa", "web", "-n", ns, check=False).returncode == 0, timeout=120)
        own.kubectl("delete", "hpa", "web", "-n", ns)
        for i in range(20):   # history the frozen controller has not seen
            own.kubectl("annotate", "deployment", "web", "-n", ns, f"e2e.policylib.io/n={i}", "--overwrite")
        own.proc.send_signal(signal.SIGUSR1)   # compact etcd: the controller's last resourceVersion is gone
        wait_for("etcd compacted", lambda: "etcd compacted" in own.stderr_text(), timeout=60)
    finally:
        os.kill(ctl.proc.pid, signal.SIGCONT)
    wait_for("the controller rewrites the spread for spec.replicas 3",
             lambda: own.get("deployment", "web", ns)["metadata"]["annotations"].get(RECORD) == "3", timeout=90)


def test_podgroup_owned_by_its_job(own, controllers, tmp_path):
    if not SHARED.is_dir():
        pytest.skip("../shared/ (Kubeflow and scheduler-plugins CRDs) is not beside the project")
    own.install_crds("schemas/kubeflow/kubeflow.org_tfjobs.yaml",
                     "schemas/scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml")
    hook = Webhook(own, "gang", CONFIG, tmp_path).start()
    try:
        hook.register()
        ns = own.namespace("gang", config="gang")
        ctl = controllers("pg")
        wait_for("the controller leads", lambda: ctl.status()["leader"], timeout=LEASE_SECONDS * 4)
        job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "train", "namespace": ns},
               "spec": {"tfReplicaSpecs": {
                   "PS": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}},
                   "Worker": {"replicas": 4, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}}}}}
        own.kubectl("create", "-f", "-", input=json.dumps(job))
        stored = own.get("tfjobs.kubeflow.org", "train", ns)
        labels = stored["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
        assert labels["scheduling.x-k8s.io/pod-group"] == "train"
        pg = wait_for("the PodGroup", lambda: own.get_or_none("podgroups.scheduling.x-k8s.io", "train", ns), timeout=90)
        assert pg["spec"]["minMember"] == 5
        [owner] = pg["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "TFJob", "train", stored["metadata"]["uid"], True)
        own.kubectl("delete", "tfjobs.kubeflow.org", "train", "-n", ns)
        wait_for("the garbage collector deletes the PodGroup with its job",
                 lambda: own.get_or_none("podgroups.scheduling.x-k8s.io", "train", ns) is None, timeout=120)
    finally:
        hook.stop()


def test_mpi_operator_v2beta1_mpijob_gets_its_podgroup(own, controllers, tmp_path):
    """The MPI Operator's kubeflow.org/v2beta1 MPIJob: admitted with gang metadata, and its PodGroup created
    owned by it (this cluster serves mpijobs.kubeflow.org from the MPI Operator's CRD)."""
    if not SHARED.is_dir():
        pytest.skip("../shared/ (MPI Operator and scheduler-plugins CRDs) is not beside the project")
    own.install_crds("schemas/mpi-operator/kubeflow.org_mpijobs.v2beta1.yaml",
                     "schemas/scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml")
    hook = Webhook(own, "mpi", CONFIG, tmp_path).start()
    try:
        hook.register()
        ns = own.namespace("mpi", config="mpi")
        ctl = controllers("mpi")
        wait_for("the controller leads", lambda: ctl.status()["leader"], timeout=LEASE_SECONDS * 4)
        job = yaml.safe_load((SHARED / "examples/mpi-operator/pi.yaml").read_text())
        job["metadata"]["namespace"] = ns
        own.kubectl("create", "-f", "-", input=json.dumps(job))
        stored = own.get("mpijobs.v2beta1.kubeflow.org", "pi", ns)
        for role in ("Launcher", "Worker"):
            labels = stored["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"]["labels"]
            assert labels["scheduling.x-k8s.io/pod-group"] == "pi"
        workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
        pg = wait_for("the PodGroup", lambda: own.get_or_none("podgroups.scheduling.x-k8s.io", "pi", ns), timeout=90)
        assert pg["spec"]["minMember"] == workers + 1
        [owner] = pg["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["uid"]) == ("kubeflow.org/v2beta1", "MPIJob",
                                                                       stored["metadata"]["uid"])
    finally:
        hook.stop()
