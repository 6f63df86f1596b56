"""Production behaviour on the real API server, deployment controller and scheduler:
how many ReplicaSets each way of changing a Deployment's count creates under ``rewrite:
OnCountChange`` (today's behaviour, the default) and ``OnNextRollout`` (rules S11, S19); apply order
(rule S21); a required anti-affinity kept hard (rule S18); a Deployment admitted while the webhook
was down (rule S20).

The ReplicaSet counts are printed as a table at the end of the module (``-s`` shows it).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from policylib import load_config
from policylib.order import apply_order_note, helm_sorted, stored_in_order
from policylib.plan import plan

from .conftest import CONFIGS
from .harness import Controller, deployment, scope_args, wait_for
from .util import host_constraint, pods_of, replicasets, wait_rolled_out

RECORD = "policylib.io/spread-effective-replicas"
PENDING = "policylib.io/spread-pending"
LEASES = "policylib-e2e-production"
POLICYLIB = str(Path(sys.executable).parent / "policylib")   # the installed console script
#: scenario -> {mode: ReplicaSets created}
COUNTS: dict[str, dict[str, int]] = {}


def hpa(ns: str, minimum: int) -> dict:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": minimum, "maxReplicas": 20}}


def annotations(d: dict) -> dict:
    return d["metadata"].get("annotations") or {}


def revisions(cluster, ns: str) -> dict[int, dict]:
    """The Deployment's ReplicaSets by revision (deployment.kubernetes.io/revision)."""
    return {int(annotations(rs)["deployment.kubernetes.io/revision"]): rs for rs in replicasets(cluster, ns, "web")}


def acted(cluster, ns: str, count: int, mode: str):
    """Wait until the count change is handled: written (OnCountChange) or recorded as pending (OnNextRollout),
    or already right (nothing to hold)."""
    def done():
        d = cluster.get("deployment", "web", ns)
        a = annotations(d)
        if a.get(RECORD) == str(count) or (mode == "nextrollout" and PENDING in a):
            return d
        return None
    return wait_for(f"{ns}/web handled for {count} effective replicas", done, timeout=120)


def settled(cluster, ns: str, mode: str, hpas: tuple = ()) -> dict:
    """Rolled out, and the controller's own plan for what is stored has no rollout left: the count is final."""
    d = wait_rolled_out(cluster, ns, "web")
    writes = plan([d, *hpas], CONFIGS[mode])
    assert not [w for w in writes if w.rollout], [w.as_dict() for w in writes]
    return d


def record(scenario: str, mode: str, cluster, ns: str) -> int:
    n = len(replicasets(cluster, ns, "web"))
    COUNTS.setdefault(scenario, {})[mode] = n
    return n


@pytest.fixture(params=["enforce", "nextrollout"])
def mode(request, cluster, webhooks, tmp_path):
    """The webhook and a controller with ``rewrite: OnCountChange`` (enforce) or ``OnNextRollout``."""
    webhooks(request.param)
    cluster.namespace(LEASES)
    c = Controller(cluster, CONFIGS[request.param], tmp_path, f"production-{request.param}", LEASES)
    wait_for("the controller leads and has listed", lambda: c.status().items() >= {
        "leader": True, "synced": True, "firstSync": True, "dryRun": False}.items(), timeout=60)
    yield request.param
    c.stop()
    # the next mode's controller must not act on this mode's Deployments (a controller is cluster-wide)
    # (a controller with another rewrite setting and this mode's webhook would undo each other's writes)
    if CREATED:
        cluster.kubectl("delete", "namespace", *CREATED, "--ignore-not-found", "--timeout=180s", timeout=240)
    CREATED.clear()


CREATED: list[str] = []


def namespace_for(cluster, name: str, mode: str) -> str:
    CREATED.append(name)
    return cluster.namespace(name, config=mode)


def test_scale_up_and_down_with_kubectl_patch(cluster, mode, ns):
    for scenario, start, end in (("scale up (kubectl patch 4 -> 7)", 4, 7), ("scale down (kubectl patch 7 -> 4)", 7, 4)):
        space = namespace_for(cluster, f"{ns}-{start}{end}", mode)
        cluster.apply(deployment("web", space, start))
        before = wait_rolled_out(cluster, space, "web")
        cluster.kubectl("patch", "deployment/web", "-n", space, "--type=merge", "-p", json.dumps({"spec": {"replicas": end}}))
        acted(cluster, space, end, mode)
        after = settled(cluster, space, mode)
        n = record(scenario, mode, cluster, space)
        if mode == "enforce":
            assert n == 2 and host_constraint(after)["maxSkew"] == {7: 3, 4: 2}[end]   # one rollout
        else:
            assert n == 1 and after["spec"]["template"] == before["spec"]["template"]   # none
            assert annotations(after)[RECORD] == str(start) and PENDING in annotations(after)


def test_scale_subresource_then_the_controller_rolls_at_most_once(cluster, mode, ns):
    space = namespace_for(cluster, ns, mode)
    cluster.apply(deployment("web", space, 4))
    before = wait_rolled_out(cluster, space, "web")
    cluster.kubectl("scale", "deployment/web", "-n", space, "--replicas=7")   # no admission review for scale
    acted(cluster, space, 7, mode)
    after = settled(cluster, space, mode)
    n = record("scale subresource (kubectl scale 4 -> 7)", mode, cluster, space)
    assert max(revisions(cluster, space)) == n
    if mode == "enforce":
        assert n == 2 and host_constraint(after)["maxSkew"] == 3
    else:
        assert n == 1 and after["spec"]["template"] == before["spec"]["template"]
        assert annotations(after)[PENDING].startswith("7 effective replicas (written for 4)")
        # (a SpreadViolated Event, rule S28, may come too: 7 pods placed by the template written for 4)
        events = wait_for("the SpreadPending Event", lambda: [
            e for e in cluster.list("events.events.k8s.io", space)
            if e.get("reportingController") == "policylib.io/controller" and e.get("reason") != "SpreadViolated"],
            timeout=60)
        assert [(e["reason"], e["regarding"]["name"]) for e in events] == [("SpreadPending", "web")]
        # the user's next rollout carries the pending constraints: one more ReplicaSet, not two
        cluster.kubectl("rollout", "restart", "deployment/web", "-n", space)
        wait_for("the pending record is gone", lambda: PENDING not in annotations(cluster.get("deployment", "web", space)))
        restarted = settled(cluster, space, mode)
        assert host_constraint(restarted)["maxSkew"] == 3 and annotations(restarted)[RECORD] == "7"
        assert len(replicasets(cluster, space, "web")) == 2


def test_hpa_minimum_change(cluster, mode, ns):
    space = namespace_for(cluster, ns, mode)
    cluster.apply(deployment("web", space, 3), hpa(space, 3))
    wait_for("record 3", lambda: annotations(cluster.get("deployment", "web", space)).get(RECORD) == "3")
    wait_rolled_out(cluster, space, "web")
    cluster.kubectl("patch", "hpa/web", "-n", space, "--type=merge", "-p", '{"spec": {"minReplicas": 12}}')
    acted(cluster, space, 12, mode)
    after = settled(cluster, space, mode, (cluster.get("hpa", "web", space),))
    n = record("HPA minReplicas 3 -> 12", mode, cluster, space)
    assert n == (2 if mode == "enforce" else 1)
    assert host_constraint(after)["maxSkew"] == (4 if mode == "enforce" else 1)


@pytest.mark.parametrize("order", ["Deployment then HPA (file)", "HPA then Deployment (file)", "Helm install order"],
                         ids=["deployment-first", "hpa-first", "helm"])
def test_apply_order(cluster, mode, ns, order, tmp_path):
    """Deployment replicas 3, HPA minReplicas 6: preview's note states what the cluster goes through."""
    space = namespace_for(cluster, ns, mode)
    objs = [deployment("web", space, 3), hpa(space, 6)]
    objs = {"Deployment then HPA (file)": objs, "HPA then Deployment (file)": objs[::-1],
            "Helm install order": helm_sorted(objs[::-1])}[order]
    position = next(i for i, o in enumerate(objs) if o["kind"] == "Deployment")
    note = apply_order_note(objs, position, load_config(CONFIGS[mode]))
    if note is None:   # the HPA first: stored for its minimum at once, whether or not the watch had it (W4)
        hpa_first_every_time(cluster, mode, space, objs, f"apply order: {order}")
        return
    cluster.apply(*objs)
    acted(cluster, space, 6, mode)
    final = settled(cluster, space, mode, (cluster.get("hpa", "web", space),))
    n = record(f"apply order: {order}", mode, cluster, space)
    first = host_constraint(revisions(cluster, space)[1])   # the template first stored
    # The Deployment first: it is first stored for its own 3 replicas, as preview's note says.
    assert "first stored with effective replicas 3 (host spread DoNotSchedule, maxSkew 1)" in note
    assert first["maxSkew"] == 1
    if mode == "enforce":
        assert "one rollout right after the first" in note
        assert (n, host_constraint(final)["maxSkew"], annotations(final)[RECORD]) == (2, 2, "6")
    else:
        assert (n, host_constraint(final)["maxSkew"], annotations(final)[RECORD]) == (1, 1, "3")
        assert PENDING in annotations(final)
        assert "as pending" in note
        shown = stored_in_order(objs, position, load_config(CONFIGS[mode]))   # what preview prints
        assert shown is not None and annotations(final)[PENDING] == annotations(shown.object)[PENDING]
        assert final["spec"]["template"]["spec"]["topologySpreadConstraints"] == \
            shown.object["spec"]["template"]["spec"]["topologySpreadConstraints"]


#: Rule W4 holds whatever the watch's timing: the HPA-first apply is repeated this many times in a row.
HPA_FIRST_RUNS = 20


def hpa_first_every_time(cluster, mode: str, space: str, objs: list[dict], scenario: str) -> None:
    """Rule W4, strictly: the HPA then its Deployment in one ``kubectl apply``, :data:`HPA_FIRST_RUNS` times in a
    row (each in a namespace of its own, applied one after another as fast as kubectl goes): every time the
    Deployment is stored for the HPA's minimum at once (its first template has maxSkew 2 and records 6) and
    makes exactly one ReplicaSet. The rollouts are waited for together, after the last apply."""
    spaces = [space] + [namespace_for(cluster, f"{space}-{i}", mode) for i in range(1, HPA_FIRST_RUNS)]
    stored = {}
    for s in spaces:
        cluster.apply(*[{**o, "metadata": {**o["metadata"], "namespace": s}} for o in objs])
        stored[s] = cluster.get("deployment", "web", s)   # as admitted: before any controller wrote to it
    wrong = {s: (host_constraint(d)["maxSkew"], annotations(d).get(RECORD)) for s, d in stored.items()
             if (host_constraint(d)["maxSkew"], annotations(d).get(RECORD)) != (2, "6")}
    assert not wrong, f"stored for another count than the HPA's minimum 6: {wrong}"
    for s in spaces:
        acted(cluster, s, 6, mode)
        final = settled(cluster, s, mode, (cluster.get("hpa", "web", s),))
        n = record(scenario, mode, cluster, s)
        first = host_constraint(revisions(cluster, s)[1])   # the template first stored
        assert (s, n, first["maxSkew"], annotations(final)[RECORD]) == (s, 1, 2, "6")


def test_required_anti_affinity_stays_hard_on_the_real_scheduler(cluster, webhooks, ns):
    """enforceForRequiredAntiAffinity: 3 replicas whose required anti-affinity goes, pinned to the two
    nodes of group "two": DoNotSchedule maxSkew 1 keeps one per node (one Pending), as the anti-affinity
    did (the default); with it false (a preference) they crowd."""
    spec = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    placed = {}
    for config in ("required", "soft"):
        webhooks(config)
        space = cluster.namespace(f"{ns}-{config}", config=config)
        d = deployment("web", space, 3, node_selector={"e2e.policylib.io/group": "two"})
        d["spec"]["template"]["spec"]["affinity"] = spec
        cluster.apply(d)
        stored = cluster.get("deployment", "web", space)
        assert "affinity" not in stored["spec"]["template"]["spec"]
        want = "DoNotSchedule" if config == "required" else "ScheduleAnyway"
        assert host_constraint(stored)["whenUnsatisfiable"] == want

        def spread(space=space):
            pods = pods_of(cluster, space, "web")
            bound = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")]
            return (len(pods), sorted(bound)) if len(pods) == 3 and len(bound) >= 2 else None
        placed[config] = wait_for(f"{space}: pods placed", spread, timeout=120)
    assert placed["required"][1] == ["two-a", "two-b"]                              # one per node, one Pending
    # check --cluster names the Pending replica and the rule that holds it, in the scheduler's words
    import subprocess
    run = subprocess.run([POLICYLIB, "check", "--cluster", "-n", f"{ns}-required", "-o", "json", *scope_args(cluster)],
                         capture_output=True,
                         text=True, env=cluster.env, timeout=120)
    assert run.returncode == 3, run.stderr
    [pending] = [f for f in json.loads(run.stdout) if f["key"] == "pending"]
    # the real scheduler's message counts every node by the filter that left it out: the 2 of group "two" by
    # the spread, the others by the nodeSelector or a taint
    assert pending["message"].startswith(f"Deployment {ns}-required/web: 1 Pod(s) Pending now, held by a DoNotSchedule "
                                         "topology spread (hostTopologySpread), the pod's node affinity/selector")
    assert "2 node(s) didn't match pod topology spread constraints" in pending["message"]
    wait_for("the preference places all three", lambda: len([p for p in pods_of(cluster, f"{ns}-soft", "web")
                                                             if p["spec"].get("nodeName")]) == 3, timeout=120)
    cluster.kubectl("delete", "namespace", f"{ns}-required", f"{ns}-soft", "--timeout=180s", timeout=240)


def test_a_deployment_admitted_while_the_webhook_is_down_is_noticed_and_brought_right(cluster, webhooks, ns,
                                                                                      tmp_path):
    """Rule S20: the webhook stopped (failurePolicy Ignore admits unchanged), a controller without
    reconcileDrift counts the Deployment and records a Warning Event, ``plan --cluster`` names it; with
    the webhook back, a controller with reconcileDrift brings it right."""
    import subprocess

    from .harness import ROOT
    hook = webhooks("failopen")
    space = cluster.namespace(ns, config="failopen")
    hook.stop()
    d = deployment("web", space, 4)
    d["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    cluster.apply(d)
    stored = cluster.get("deployment", "web", space)
    assert not [k for k in annotations(stored) if k.startswith("policylib.io/")]     # admitted unchanged
    cluster.namespace(LEASES)
    watcher = Controller(cluster, CONFIGS["enforce"], tmp_path, "production-failopen", LEASES)
    try:
        wait_for("the unrecorded gauge counts it",
                 lambda: watcher.metric("policylib_controller_unrecorded_deployments") >= 1, timeout=90)
        events = wait_for("a Warning Event", lambda: [e for e in cluster.list("events.events.k8s.io", space)
                                                      if e["reason"] == "AdmittedWithoutPolicy"], timeout=60)
        assert [(e["type"], e["regarding"]["name"]) for e in events] == [("Warning", "web")]
        run = subprocess.run([POLICYLIB, "plan", "--cluster", "--namespace", space, "-o", "json", *scope_args(cluster)],
                             capture_output=True, text=True, cwd=ROOT, env=cluster.env, timeout=120)
        assert run.returncode == 0, run.stderr
        [entry] = json.loads(run.stdout)
        assert (entry["name"], entry["unrecorded"], entry["action"]) == ("web", True, "none")
    finally:
        watcher.stop()
    hook.start()
    fixer = Controller(cluster, CONFIGS["failopen"], tmp_path, "production-drift", LEASES)
    try:
        right = wait_for("reconcileDrift brings it right", lambda: (lambda x: x if annotations(x).get(RECORD) == "4"
                                                                    else None)(cluster.get("deployment", "web", space)),
                         timeout=120)
        assert "affinity" not in right["spec"]["template"]["spec"]
        assert host_constraint(right)["whenUnsatisfiable"] == "DoNotSchedule"
        run = subprocess.run([POLICYLIB, "plan", "--cluster", "--namespace", space, "-o", "json", *scope_args(cluster)],
                             capture_output=True, text=True, cwd=ROOT, env=cluster.env, timeout=120)
        assert (run.returncode, json.loads(run.stdout)) == (0, [])     # nothing unrecorded, nothing to write
    finally:
        fixer.stop()


@pytest.fixture(scope="module", autouse=True)
def replicaset_table():
    """Print the ReplicaSet counts of this module's scenarios (``-s`` or the terminal summary shows them)."""
    yield
    if COUNTS:
        lines = ["| scenario | OnCountChange (today) | OnNextRollout |", "|---|---|---|"]
        for scenario, by_mode in COUNTS.items():
            lines.append(f"| {scenario} | {by_mode.get('enforce', '-')} | {by_mode.get('nextrollout', '-')} |")
        print("\nReplicaSets per scenario:\n" + "\n".join(lines))
