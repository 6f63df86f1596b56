"""Planning rules (seed 000 "Pod rollouts", "Existing deployments") and ``policylib plan``."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml

from policylib import ClusterFacts, load_config, mutate
from policylib.plan import plan, summarize
from policylib.spread import RECORD_REPLICAS
from tests.fakeapi import FakeAPI, paged_list
from tests.helpers import deployment, hpa, legacy_anti_affinity
from tests.test_scope import MANIFEST

ENFORCE = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
DRIFT = {"hostTopologySpread": {"reconcileDrift": True}}
POLICYLIB = str(Path(sys.executable).parent / "policylib")


def written(d, config=None, facts=None):
    """A Deployment as the webhook admitted it."""
    return mutate(d, load_config(config), facts=facts).object


def legacy(name="legacy", replicas=4):
    return deployment(name, replicas=replicas, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                                         "affinity": legacy_anti_affinity({"app": name})})


# --- compliant clusters see zero writes ------------------------------------------------

@pytest.mark.parametrize("config", [None, ENFORCE, DRIFT, {**ENFORCE, **{"hostTopologySpread": {
    "whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}}}])
def test_compliant_deployments_get_no_write(config):
    facts_hpa = hpa("b", 6)
    snapshot = [written(deployment("a", replicas=7), config),
                written(deployment("b", replicas=2), config, ClusterFacts.from_objects([facts_hpa])), facts_hpa,
                written(deployment("c", replicas=1), config)]
    assert plan(snapshot, config) == []


def test_without_record_or_drift_nothing_is_written():
    assert plan([legacy(), deployment("plain", replicas=9)]) == []


# --- effective replica count changes -------------------------------------------------------

def test_hpa_min_replicas_change_rewrites_and_rolls_when_the_spread_changes():
    d = written(deployment(replicas=3), ENFORCE, ClusterFacts.from_objects([hpa("web", 3)]))
    [w] = plan([d, hpa("web", 9)], ENFORCE)
    assert (w.kind, w.namespace, w.name, w.rollout, w.action) == ("Deployment", "ml", "web", True, "patch")
    assert w.reasons[0] == ("effective replicas changed: 3 when the spread was written, 9 now "
                            "(HorizontalPodAutoscaler web minReplicas 9)")
    assert "host spread enforced: 9 effective replicas >= hardMinReplicas 3; maxSkew 3 = ceil(9/3)" in w.reasons
    after = jsonpatch.apply_patch(d, w.patch)
    assert after == mutate(deployment(replicas=3), load_config(ENFORCE),
                           facts=ClusterFacts.from_objects([hpa("web", 9)])).object


def test_count_change_with_the_same_spread_is_a_metadata_only_write():
    d = written(deployment(replicas=3))
    changed = copy.deepcopy(d)
    changed["spec"]["replicas"] = 5  # kubectl scale: the scale subresource, no webhook
    [w] = plan([changed])
    assert w.rollout is False
    assert w.patch == [{"op": "replace", "path": f"/metadata/annotations/{RECORD_REPLICAS.replace('/', '~1')}",
                        "value": "5"}]
    assert summarize([w]) == "0 Deployments would roll, 0 for legacy anti-affinity; 1 Deployment would get a metadata-only write"


def test_resource_version_is_carried_for_a_guarded_write():
    d = written(deployment(replicas=3))
    d["metadata"]["resourceVersion"] = "4711"
    d["spec"]["replicas"] = 6
    assert plan([d])[0].resource_version == "4711"


# --- reconcileDrift ---------------------------------------------------------------------------

def test_reconcile_drift_rewrites_legacy_anti_affinity_at_or_above_hard_min():
    [w] = plan([legacy(replicas=3), legacy("tiny", replicas=2)], DRIFT)
    assert w.name == "legacy" and w.rollout and w.legacy_anti_affinity
    assert w.reasons[0] == "reconcileDrift: has pod anti-affinity that the spread replaces"
    after = jsonpatch.apply_patch(legacy(replicas=3), w.patch)
    assert "affinity" not in after["spec"]["template"]["spec"]


def test_reconcile_drift_after_a_settings_change():
    d = written(deployment(replicas=7))
    [w] = plan([d], {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}})
    assert w.rollout
    assert w.reasons[0] == ("reconcileDrift: spread on kubernetes.io/hostname differs: ScheduleAnyway, maxSkew 1 "
                            "-> DoNotSchedule, maxSkew 3, minDomains 3")


def test_reconcile_drift_off_keeps_old_settings():
    d = written(deployment(replicas=7))
    assert plan([d], ENFORCE) == []


def test_opted_out_and_other_kinds_are_not_planned():
    d = legacy()
    d["metadata"]["labels"] = {"policylib.io/skip": "true"}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert plan([d, cm], DRIFT) == []


def test_unreadable_objects_become_error_entries_not_a_crash():
    bad = deployment(replicas=4)
    bad["spec"]["replicas"] = "four"
    writes = plan([bad, legacy()], DRIFT)
    assert [(w.name, w.error) for w in writes] == [("web", True), ("legacy", False)]
    assert writes[0].reasons == ['error: Deployment ml/web: spec.replicas: Invalid value: "four": must be an integer']


def test_summary_counts_rollouts_and_legacy_anti_affinity():
    snapshot = [legacy(f"l{i}", replicas=3) for i in range(3)] + \
               [written(deployment(f"d{i}", replicas=9)) for i in range(9)]
    writes = plan(snapshot, {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}})
    assert summarize(writes) == "12 Deployments would roll, 3 for legacy anti-affinity"


def test_legacy_anti_affinity_is_a_fact_of_the_drift_not_its_words():
    """Counting legacy rewrites reads Drift.replaces_anti_affinity, never the reason text."""
    from policylib.plan import Write
    from policylib.spread import spread_drift
    drift = spread_drift(legacy(replicas=3), load_config(DRIFT))
    assert drift.needs_rewrite and drift.replaces_anti_affinity
    assert not spread_drift(legacy("tiny", replicas=2), load_config(DRIFT)).replaces_anti_affinity
    # the words alone are no fact: a write that only mentions them is not counted
    words = Write("Deployment", "ml", "w", ["reconcileDrift: has pod anti-affinity that the spread replaces"], True)
    assert not words.legacy_anti_affinity
    assert summarize([words]) == "1 Deployment would roll, 0 for legacy anti-affinity"


# --- the command ------------------------------------------------------------------------------

def kubectl_get_output(objs):
    """What ``kubectl get deploy,hpa -A -o yaml`` prints: a v1 List."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": objs})


def test_plan_table_and_json_from_a_snapshot(tmp_path):
    snap = tmp_path / "snap.yaml"
    snap.write_text(kubectl_get_output([legacy(replicas=3), hpa("other", 2), deployment("plain", replicas=1)]))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(DRIFT))
    table = subprocess.run([POLICYLIB, "plan", "-f", str(snap), "--config", str(cfg)], capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["KIND", "NAMESPACE", "NAME", "ROLLOUT", "REASONS"]
    assert lines[1].split()[:4] == ["Deployment", "ml", "legacy", "yes"]
    assert lines[-1] == "1 Deployment would roll, 1 for legacy anti-affinity"
    js = subprocess.run([POLICYLIB, "plan", "-f", str(snap), "--config", str(cfg), "-o", "json"],
                        capture_output=True, text=True, check=True)
    [entry] = json.loads(js.stdout)
    assert {k: entry[k] for k in ("kind", "namespace", "name", "rollout")} == \
        {"kind": "Deployment", "namespace": "ml", "name": "legacy", "rollout": True}
    assert entry["reasons"][0] == "reconcileDrift: has pod anti-affinity that the spread replaces"


def test_plan_on_a_compliant_snapshot_says_so(tmp_path):
    snap = tmp_path / "snap.yaml"
    snap.write_text(kubectl_get_output([written(deployment(replicas=4))]))
    out = subprocess.run([POLICYLIB, "plan", "-f", str(snap)], capture_output=True, text=True, check=True)
    assert out.stdout == "no writes: every object is compliant\n0 Deployments would roll, 0 for legacy anti-affinity\n"


def test_plan_cluster_reads_the_api_page_by_page(tmp_path):
    deployments = [legacy(f"l{i}", replicas=3) for i in range(3)] + [written(deployment(f"d{i}")) for i in range(4)]
    for d in deployments:  # list items come without apiVersion and kind
        d.pop("apiVersion"), d.pop("kind")
    with FakeAPI() as api:
        api.route("GET", "/apis/apps/v1/deployments", paged_list("Deployment", deployments, page=2))
        api.route("GET", "/apis/autoscaling/v2/horizontalpodautoscalers", paged_list("HorizontalPodAutoscaler", [], 2))
        api.route("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/policylib-webhook",
                  (200, MANIFEST))   # the scope (rule W5): the shipped selectors, which ml matches
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump(DRIFT))
        env = dict(os.environ, KUBECONFIG=kubeconfig)
        out = subprocess.run([POLICYLIB, "plan", "--cluster", "--config", str(cfg), "-o", "json"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [w["name"] for w in json.loads(out.stdout)] == ["l0", "l1", "l2"]
    pages = [r for r in api.requests if r["path"] == "/apis/apps/v1/deployments"]
    assert [r["query"].get("continue") for r in pages] == [None, "2", "4", "6"]
    assert all(r["headers"].get("authorization") == "Bearer t0ken" for r in pages)
    assert "listing deployments: 7" in out.stderr
    # CRDs the cluster does not serve (Kubeflow, PodGroups) are skipped, not errors
    assert any(r["path"] == "/apis/kubeflow.org/v1/tfjobs" for r in api.requests)


def test_plan_cluster_without_access_is_one_clear_line(tmp_path):
    env = dict(os.environ, KUBECONFIG=str(tmp_path / "missing"))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    out = subprocess.run([POLICYLIB, "plan", "--cluster"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("policylib: error: cannot read the cluster: ") and "Traceback" not in out.stderr


# --- PodGroups for gang method podgroup ---------------------------------------------------

PODGROUP = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}


def tfjob(workers=4, uid="uid-1"):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
           "metadata": {"name": "tf-smoke-gpu", "namespace": "ml", "uid": uid},
           "spec": {"tfReplicaSpecs": {
               "PS": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}},
               "Worker": {"replicas": workers, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}}}}}
    return mutate(job, load_config(PODGROUP)).object   # as the webhook admitted it


def podgroup(min_member, owner_uid="uid-1", rv="3"):
    meta = {"name": "tf-smoke-gpu", "namespace": "ml", "resourceVersion": rv}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "tf-smoke-gpu",
                                    "uid": owner_uid, "controller": True}]
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": meta,
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 10}}


def planned(objs, config=PODGROUP):
    from policylib.plan import PLANNERS
    return plan(objs, config, planners=PLANNERS)


def test_missing_podgroup_is_created_owned_by_the_job():
    [w] = planned([tfjob()])
    assert (w.kind, w.action, w.namespace, w.name, w.rollout) == ("PodGroup", "create", "ml", "tf-smoke-gpu", False)
    assert w.object["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert w.object["spec"] == {"scheduleTimeoutSeconds": 10, "minMember": 5}
    assert w.object["metadata"]["ownerReferences"] == [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                                        "name": "tf-smoke-gpu", "uid": "uid-1", "controller": True,
                                                        "blockOwnerDeletion": True}]


def test_existing_podgroup_with_the_right_minimum_needs_nothing():
    assert planned([tfjob(), podgroup(5)]) == []


def test_min_member_follows_the_jobs_replicas():
    [w] = planned([tfjob(workers=6), podgroup(5)])
    assert w.patch == [{"op": "replace", "path": "/spec/minMember", "value": 7}]
    assert w.resource_version == "3" and w.action == "patch"


def test_podgroup_owned_by_someone_else_is_left_alone():
    assert planned([tfjob(workers=6), podgroup(5, owner_uid="training-operator-uid")]) == []


def test_jobs_without_our_gang_metadata_or_other_methods_get_no_podgroup():
    raw = tfjob()
    for spec in raw["spec"]["tfReplicaSpecs"].values():
        spec["template"].pop("metadata", None)
    assert planned([raw]) == []
    assert planned([tfjob()], {"gang": {"method": "labels"}}) == []


def test_a_controller_rewrite_passes_the_webhook_unchanged():
    """The controller's PATCH goes through admission too: the webhook must accept it, not revert it."""
    old_settings, new_settings = load_config(None), load_config({"hostTopologySpread": {
        "whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}})
    for existing in (written(deployment(replicas=7)), legacy(replicas=5)):
        [w] = plan([existing], new_settings)
        patched = jsonpatch.apply_patch(existing, w.patch)
        assert mutate(patched, new_settings, old=existing).patch == []
        assert plan([patched], new_settings) == []
    assert old_settings.spread_fingerprint() != new_settings.spread_fingerprint()


def test_hand_edits_of_a_managed_constraint_are_still_reverted():
    old = written(deployment(replicas=7))
    edited = copy.deepcopy(old)
    edited["spec"]["template"]["spec"]["topologySpreadConstraints"][1]["maxSkew"] = 5
    r = mutate(edited, load_config(None), old=old)
    assert r.object["spec"]["template"]["spec"]["topologySpreadConstraints"] == \
        old["spec"]["template"]["spec"]["topologySpreadConstraints"]
