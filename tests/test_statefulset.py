"""StatefulSets get the Deployments' zone and host spread (rules A1-A6), read through the StatefulSet's own kind."""
import copy

import jsonpatch
import pytest

from policylib import ClusterFacts, PolicyError, load_config, mutate, spread_drift
from policylib.families import PLANNERS, family_of, is_unhandled_workload
from policylib.plan import plan
from policylib.planners import plan_statefulset
from policylib.spread import PENDING, RECORD_KEYS, RECORD_REPLICAS, RECORD_REQUIRED, RECORD_SETTINGS, STATEFULSET
from tests.helpers import by_key, constraints, deployment, hpa, legacy_anti_affinity, pod_spec

ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
NO_REVISION_KEY = ("matchLabelKeys pod-template-hash not written: StatefulSet pods have no pod-template-hash, and each "
                   "ordinal's successor is counted with the whole set (no revision key)")


def statefulset(name="redis", namespace="serving", replicas=3, **kw):
    """A valid apps/v1 StatefulSet: the Deployment helper's object with a StatefulSet's own fields."""
    obj = deployment(name, namespace, replicas, **kw)
    obj["kind"] = "StatefulSet"
    obj["spec"]["serviceName"] = name
    return obj


def sts_hpa(target, min_replicas, namespace="serving", name=None):
    h = hpa(target, min_replicas, namespace, name)
    h["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    return h


def without_revision_key(obj):
    """A Deployment's result as a StatefulSet's would be: no pod-template-hash key, the kind changed."""
    out = copy.deepcopy(obj)
    out["kind"] = "StatefulSet"
    out["spec"]["serviceName"] = out["metadata"]["name"]
    for c in pod_spec(out).get("topologySpreadConstraints") or []:
        c.pop("matchLabelKeys", None)
    return out


# --- CREATE: the written constraints and reasons -------------------------------------------------

def test_a_three_replica_statefulset_gets_both_spreads_without_a_revision_key():
    s = statefulset()
    s["spec"]["template"]["spec"]["affinity"] = legacy_anti_affinity({"app": "redis"})
    r = mutate(s)
    assert constraints(r.object) == [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "redis"}}, "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "redis"}}, "minDomains": 3, "nodeTaintsPolicy": "Honor"},
    ]
    assert "affinity" not in pod_spec(r.object)
    assert r.object["metadata"]["annotations"] == {
        RECORD_REPLICAS: "3", RECORD_SETTINGS: STATEFULSET.settings(load_config(None)).spread_fingerprint(),
        RECORD_KEYS: f"{ZONE},{HOST}", RECORD_REQUIRED: "true"}
    assert r.reasons == [
        "effective replicas 3 (spec.replicas 3)", NO_REVISION_KEY,
        "zone spread on topology.kubernetes.io/zone: maxSkew 1, ScheduleAnyway",
        "host spread enforced: it replaces a required anti-affinity "
        "(hostTopologySpread.enforceForRequiredAntiAffinity); maxSkew 1",
        "removed 1 pod anti-affinity term(s) selecting the StatefulSet's own pods: the spread replaces them"]
    assert r.warnings == [] and not r.unhandled
    assert jsonpatch.apply_patch(s, r.patch) == r.object


#: The settings the Deployment tests use (tests/test_spread.py), each as a StatefulSet must see it.
CONFIGS = {
    "defaults": None,
    "enforce": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "hardMinReplicas": 3}},
    "no-derived-skew": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule",
                                               "enableReplicaDerivedMaxSkewRule": False}},
    "host-maxSkew-5": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "maxSkew": 5}},
    "hardMin-5": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 5}},
    "zone-key": {"zoneTopologySpread": {"topologyKey": "example.com/zone", "matchLabelKeys": "none"}},
    "both-off": {"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}},
    "zone-off": {"zoneTopologySpread": {"enabled": False}},
    "remove-all": {"removePodAntiAffinity": "all"},
    "soft-required": {"hostTopologySpread": {"enforceForRequiredAntiAffinity": False}},
    "on-next-rollout": {"hostTopologySpread": {"rewrite": "OnNextRollout"}},
}


@pytest.mark.parametrize("replicas", [1, 3, 7, 12])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_deployment_config_writes_the_deployments_spread_less_the_revision_key(name, replicas):
    config = load_config(CONFIGS[name])
    affinity = legacy_anti_affinity({"app": "redis"})
    d, s = deployment("redis", "serving", replicas), statefulset(replicas=replicas)
    d["spec"]["template"]["spec"]["affinity"] = copy.deepcopy(affinity)
    s["spec"]["template"]["spec"]["affinity"] = copy.deepcopy(affinity)
    want = without_revision_key(mutate(d, config).object)
    got = mutate(s, config).object
    want["metadata"].get("annotations", {}).pop(RECORD_SETTINGS, None)
    recorded = got["metadata"].get("annotations", {}).pop(RECORD_SETTINGS, None)
    assert got == want
    assert recorded == (None if name == "both-off" else STATEFULSET.settings(config).spread_fingerprint())


def test_a_label_key_of_the_users_is_kept_and_only_pod_template_hash_goes():
    config = load_config({"zoneTopologySpread": {"matchLabelKeys": ["pod-template-hash", "app.example/version"]},
                          "hostTopologySpread": {"matchLabelKeys": ["app.example/version"]}})
    r = mutate(statefulset(), config)
    assert [c.get("matchLabelKeys") for c in constraints(r.object)] == [["app.example/version"]] * 2
    assert NO_REVISION_KEY in r.reasons
    assert NO_REVISION_KEY not in mutate(statefulset(), load_config({"zoneTopologySpread": {"matchLabelKeys": "none"},
                                                                      "hostTopologySpread": {"matchLabelKeys": "none"}})).reasons


# --- effective replicas (rule A2) ---------------------------------------------------------------

def test_an_hpa_whose_scale_target_is_the_statefulset_sets_the_effective_count():
    facts = ClusterFacts.from_objects([sts_hpa("redis", 7)])
    r = mutate(statefulset(replicas=2), load_config(CONFIGS["enforce"]), facts=facts)
    assert r.reasons[0] == "effective replicas 7 (HorizontalPodAutoscaler redis minReplicas 7)"
    assert by_key(r.object)[HOST]["maxSkew"] == 3


def test_an_hpa_of_a_deployment_with_the_same_name_does_not_count_and_neither_the_other_way():
    facts = ClusterFacts.from_objects([hpa("redis", 9, "serving")])
    assert mutate(statefulset(replicas=2), facts=facts).reasons[0] == "effective replicas 2 (spec.replicas 2)"
    facts = ClusterFacts.from_objects([sts_hpa("redis", 9)])
    assert mutate(deployment("redis", "serving", 2), facts=facts).reasons[0] == "effective replicas 2 (spec.replicas 2)"


def test_an_hpa_naming_another_api_group_for_a_statefulset_does_not_count():
    h = sts_hpa("redis", 9)
    h["spec"]["scaleTargetRef"]["apiVersion"] = "extensions/v1beta1"
    assert mutate(statefulset(replicas=2), facts=ClusterFacts.from_objects([h])).reasons[0] == \
        "effective replicas 2 (spec.replicas 2)"


# --- validation (rule A1) -----------------------------------------------------------------------

def test_every_error_of_a_statefulset_is_named_at_once_with_its_field_path():
    s = statefulset()
    s["spec"].update({"podManagementPolicy": "Burst", "ordinals": {"start": -1}, "volumeClaimTemplates": [{}, "data"],
                      "updateStrategy": {"type": "Rolling"}, "replicas": "3"})
    with pytest.raises(PolicyError) as err:
        mutate(s)
    assert [(e.field, e.type.value[1]) for e in err.value.errors] == [
        ("spec.replicas", "Invalid value"), ("spec.podManagementPolicy", "Unsupported value"),
        ("spec.updateStrategy.type", "Unsupported value"), ("spec.ordinals.start", "Invalid value"),
        ("spec.volumeClaimTemplates[1]", "Invalid value")]
    assert str(err.value).startswith("StatefulSet serving/redis: ")


def test_a_statefulset_without_a_selector_or_template_says_so_in_its_own_words():
    s = statefulset()
    del s["spec"]["selector"], s["spec"]["template"]
    with pytest.raises(PolicyError) as err:
        mutate(s)
    assert [(e.field, e.detail) for e in err.value.errors] == [
        ("spec.selector", "apps/v1 StatefulSets need a non-empty selector"),
        ("spec.template.spec", "a StatefulSet needs a pod template")]


# --- UPDATE: no surprise restarts, re-apply idempotence (rules A4, S11-S13, S22) ----------------

def test_an_update_with_the_same_count_keeps_the_placement_and_a_count_change_waits_for_the_next_rollout():
    created = mutate(statefulset(replicas=3), load_config(CONFIGS["enforce"])).object
    manifest = statefulset(replicas=3)
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/app:2"
    kept = mutate(manifest, load_config(CONFIGS["enforce"]), old=created)
    assert constraints(kept.object) == constraints(created)
    assert kept.reasons == ["effective replicas 3 (spec.replicas 3)", NO_REVISION_KEY,
                            f"restored the spread on {HOST}, {ZONE} from the old object",
                            "effective replica count unchanged: placement rules kept"]
    # rule A9: a count change alone (kubectl scale, an HPA) never restarts the set: held, pending recorded
    grown = mutate(statefulset(replicas=7), load_config(CONFIGS["enforce"]), old=created)
    assert constraints(grown.object) == constraints(created)
    assert grown.object["metadata"]["annotations"][PENDING] == (
        f"7 effective replicas (written for 3): {HOST} DoNotSchedule, maxSkew 1, minDomains 3 -> DoNotSchedule, "
        "maxSkew 3, minDomains 3")
    # the user's own rollout carries the new count's constraints
    rolled = statefulset(replicas=7)
    rolled["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/app:2"
    rolled = mutate(rolled, load_config(CONFIGS["enforce"]), old=created)
    assert "effective replicas changed 3 -> 7" in rolled.reasons
    assert by_key(rolled.object)[HOST]["maxSkew"] == 3


def test_re_applying_the_manifest_with_its_anti_affinity_changes_nothing():
    manifest = statefulset()
    manifest["spec"]["template"]["spec"]["affinity"] = legacy_anti_affinity({"app": "redis"})
    stored = mutate(manifest).object
    again = copy.deepcopy(manifest)
    again["metadata"]["annotations"] = dict(stored["metadata"]["annotations"])
    again["spec"]["template"]["spec"]["topologySpreadConstraints"] = constraints(stored)
    r = mutate(again, old=stored)
    assert r.object["spec"]["template"] == stored["spec"]["template"]
    assert jsonpatch.apply_patch(again, r.patch) == r.object


# --- the family (rules A4-A6) -------------------------------------------------------------------

def test_statefulsets_are_handled_and_their_setting_turns_them_off():
    s = statefulset()
    assert family_of(s).name == "StatefulSet" and not is_unhandled_workload(s)
    off = mutate(s, load_config({"statefulSets": {"enabled": False}}))
    assert off.patch == [] and off.reasons == ["StatefulSet policies are off (statefulSets.enabled: false): left unchanged"]
    assert not off.unhandled


def test_a_statefulset_owned_by_a_controller_is_left_to_it():
    s = statefulset()
    s["metadata"]["ownerReferences"] = [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                         "name": "vllm", "uid": "u1", "controller": True}]
    r = mutate(s)
    assert r.patch == [] and r.reasons == ["owned by LeaderWorkerSet vllm: its controller writes this StatefulSet's pod "
                                           "template, so the spread is left to it"]
    s["metadata"]["uid"] = "u2"
    assert plan_statefulset(s, load_config(None), ClusterFacts()) is None


def test_on_delete_warns_that_the_spread_reaches_pods_only_when_they_are_recreated():
    s = statefulset()
    s["spec"]["updateStrategy"] = {"type": "OnDelete"}
    assert mutate(s).warnings == ["updateStrategy OnDelete: the spread reaches each pod only when it is deleted and "
                                  "re-created"]


# --- plan and reconcileDrift (rules A4, S11, S17) -----------------------------------------------

@pytest.mark.parametrize("rewrite", ["OnCountChange", "OnNextRollout"])
def test_plan_holds_a_statefulsets_count_change_for_its_next_rollout(rewrite):
    config = load_config({**CONFIGS["enforce"], "hostTopologySpread": {
        **CONFIGS["enforce"].get("hostTopologySpread", {}), "rewrite": rewrite}})
    stored = mutate(statefulset(replicas=3), config).object
    stored["metadata"]["uid"] = "u1"
    writes = plan([stored, sts_hpa("redis", 9)], config, PLANNERS)
    # rule A9: whatever hostTopologySpread.rewrite says, the pod template is left alone (no restart of every pod)
    assert [(w.kind, w.name, w.rollout) for w in writes] == [("StatefulSet", "redis", False)]
    assert writes[0].reasons[0] == ("effective replicas changed: 3 when the spread was written, 9 now "
                                    "(HorizontalPodAutoscaler redis minReplicas 9)")
    patched = jsonpatch.apply_patch(stored, writes[0].patch)
    assert patched["spec"]["template"] == stored["spec"]["template"]
    assert patched["metadata"]["annotations"][PENDING] == (
        f"9 effective replicas (written for 3): {HOST} DoNotSchedule, maxSkew 1, minDomains 3 -> DoNotSchedule, "
        "maxSkew 3, minDomains 3")


def test_recreate_warns_that_a_template_change_deletes_every_pod_first():
    s = statefulset()
    s["spec"]["updateStrategy"] = {"type": "Recreate"}
    assert mutate(s).warnings == ["updateStrategy Recreate: a change of the pod template (the spread's included) "
                                  "deletes every pod before the new ones are created"]


def test_preview_says_a_statefulset_applied_before_its_hpa_waits_for_its_next_rollout(tmp_path):
    import io

    import yaml

    from policylib.cli import main
    path, config = tmp_path / "in.yaml", tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump_all([statefulset(replicas=3), sts_hpa("redis", 9)]))
    config.write_text(yaml.safe_dump(CONFIGS["enforce"]))
    err = io.StringIO()
    assert main(["preview", "-f", str(path), "--config", str(config), "-o", "diff"], stdout=io.StringIO(),
                stderr=err) == 0
    assert err.getvalue().splitlines()[0] == (
        f"policylib: note: {path}: StatefulSet {statefulset()['metadata']['namespace']}/redis: applied in this order "
        "(the StatefulSet before HorizontalPodAutoscaler redis, as kubectl apply -f creates them in file order), it "
        "is first stored with effective replicas 3 (host spread DoNotSchedule, maxSkew 1); the controller then "
        "records the change to 9 (host spread DoNotSchedule, maxSkew 3) as pending: it is written on the "
        "StatefulSet's next rollout (rewrite: OnNextRollout); to store it right at once, apply the HPA first or "
        "annotate the StatefulSet policylib.io/autoscaling-min-replicas: \"9\"")


def test_reconcile_drift_rewrites_a_legacy_statefulset_and_a_written_one_has_no_drift():
    legacy = statefulset(replicas=3)
    legacy["spec"]["template"]["spec"]["affinity"] = legacy_anti_affinity({"app": "redis"})
    drift = spread_drift(legacy)
    assert drift.needs_rewrite and drift.replaces_anti_affinity
    assert drift.reasons == ("has pod anti-affinity that the spread replaces",
                             f"missing spread on {HOST} (DoNotSchedule, maxSkew 1, minDomains 3)",
                             f"missing spread on {ZONE} (ScheduleAnyway, maxSkew 1)")
    assert not spread_drift(mutate(legacy).object).needs_rewrite
    config = load_config({"hostTopologySpread": {"reconcileDrift": True}})
    writes = plan([legacy], config, PLANNERS)
    assert [(w.kind, w.rollout, w.legacy_anti_affinity) for w in writes] == [("StatefulSet", True, True)]
    assert plan([legacy], load_config({"hostTopologySpread": {"reconcileDrift": True},
                                       "statefulSets": {"enabled": False}}), PLANNERS) == []


# --- zonal volumes (rules A7, A8) ---------------------------------------------------------------

def node(name, zone, cpu="8"):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {HOST: name, ZONE: zone}},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}}}


NODES = [node("a1", "zone-a"), node("a2", "zone-a"), node("b1", "zone-b"), node("b2", "zone-b"), node("c1", "zone-c")]


def with_claims(s, template="data"):
    s["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": template},
                                          "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "wffc"}}]
    return s


def bound(ordinal, zones, set_name="redis", template="data", namespace="serving", labels=None, key=ZONE):
    """A claim of ``ordinal`` bound to a PV whose node affinity allows ``zones``."""
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": f"{template}-{set_name}-{ordinal}", "namespace": namespace},
             "spec": {"volumeName": f"pv-{set_name}-{ordinal}"}, "status": {"phase": "Bound"}}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{set_name}-{ordinal}"},
          "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
              {"matchExpressions": [{"key": key, "operator": "In", "values": list(zones)}]}]}}}}
    if labels:
        pv["metadata"]["labels"] = labels
    return [claim, pv]


def test_check_names_a_statefulset_whose_bound_volumes_already_break_its_zone_spread():
    from policylib.check import check
    s = with_claims(statefulset(replicas=4))
    objects = [s] + bound(0, ["zone-a"]) + bound(1, ["zone-a"]) + bound(2, ["zone-a"])
    [finding] = [f for f in check(None, NODES, objects) if f.key == "volume-pinned-skew"]
    assert (finding.severity, finding.message) == ("warning", (
        "statefulset serving/redis: bound volumes pin its 4 ordinal(s) to zone-a=3, zone-b=0, zone-c=0; 1 ordinal(s) "
        "not pinned (zone skew at least 3 > maxSkew 1): the scheduler cannot move a pod off its volume's zone, so "
        "the spread cannot repair this; only new claims (their data moved) can"))
    # a CSI driver's own zone key on the PV: the Nodes it matches decide, whatever the key
    csi = [s] + [o for i in range(3) for o in bound(i, ["use1-az1"], key="topology.ebs.csi.aws.com/zone")]
    nodes = [dict(n, metadata=dict(n["metadata"], labels=dict(n["metadata"]["labels"], **{
        "topology.ebs.csi.aws.com/zone": "use1-az1" if n["metadata"]["name"].startswith("a") else "use1-az2"})))
        for n in NODES]
    assert [f.message.split(":")[1] for f in check(None, nodes, csi) if f.key == "volume-pinned-skew"] == [
        " bound volumes pin its 4 ordinal(s) to zone-a=3, zone-b=0, zone-c=0; 1 ordinal(s) not pinned (zone skew at "
        "least 3 > maxSkew 1)"]


@pytest.mark.parametrize("pins,replicas,config", [
    ({0: ["zone-a"], 1: ["zone-b"], 2: ["zone-c"]}, 3, None),            # balanced
    ({0: ["zone-a"], 1: ["zone-a"]}, 5, None),                          # the three unpinned ordinals can even it out
    ({0: ["zone-a"], 1: ["zone-a"], 2: ["zone-a"]}, 3, {"zoneTopologySpread": {"maxSkew": 3}}),   # within maxSkew
    ({0: ["zone-a"], 1: ["zone-a"], 2: ["zone-a"]}, 3, {"zoneTopologySpread": {"enabled": False}}),
    ({0: ["zone-a"], 1: ["zone-a"], 2: ["zone-a"]}, 3, {"statefulSets": {"enabled": False}}),
    ({3: ["zone-a"], 4: ["zone-a"], 5: ["zone-a"]}, 3, None),           # retained claims above the current ordinals
])
def test_check_says_nothing_where_the_pins_leave_the_spread_possible(pins, replicas, config):
    from policylib.check import check
    objects = [with_claims(statefulset(replicas=replicas))] + [o for i, z in pins.items() for o in bound(i, z)]
    assert [f for f in check(config, NODES, objects) if f.key == "volume-pinned-skew"] == []


def test_check_never_crashes_on_a_malformed_statefulset_or_persistent_volume():
    from policylib.check import check
    from policylib.statefulset import pv_nodes
    bad = with_claims(statefulset(replicas=4))
    bad["spec"]["ordinals"] = {"start": "x"}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv"}, "spec": "oops"}
    assert [f for f in check(None, NODES, [bad, pv]) if f.key == "volume-pinned-skew"] == []
    # a malformed PV pins nothing; the pinned set still gets its finding beside it
    pinned = [with_claims(statefulset(replicas=4)), pv] + [o for i in range(3) for o in bound(i, ["zone-a"])]
    assert [f.key for f in check(None, NODES, pinned) if f.key == "volume-pinned-skew"] == ["volume-pinned-skew"]
    assert pv_nodes(pv, NODES) == ["a1", "a2", "b1", "b2", "c1"]


def test_a_pv_allows_the_nodes_its_node_affinity_matches_and_its_zone_label_narrows():
    from policylib.statefulset import pv_nodes
    [_, pv] = bound(0, ["zone-a", "zone-b"])
    assert pv_nodes(pv, NODES) == ["a1", "a2", "b1", "b2"]
    [_, labelled] = bound(0, ["zone-a", "zone-b"], labels={ZONE: "zone-b"})
    assert pv_nodes(labelled, NODES) == ["b1", "b2"]
    [_, both] = bound(0, ["zone-a"], labels={ZONE: "zone-a__zone-c"})
    assert pv_nodes(both, NODES) == ["a1", "a2"]


def test_simulate_places_each_pinned_ordinal_in_its_volumes_zone_and_the_others_by_the_spread():
    from policylib.simulate import simulate
    s = with_claims(statefulset(replicas=4))
    [p] = simulate([s] + bound(0, ["zone-c"]) + bound(1, ["zone-c"]), NODES)
    assert (p.kind, p.placed, p.zones, p.pending) == ("StatefulSet", {"a1": 1, "b1": 1, "c1": 2},
                                                      {"zone-a": 1, "zone-b": 1, "zone-c": 2}, 0)
    assert p.reasons == ["2 of 4 ordinal(s) kept to the Nodes their bound PersistentVolumes allow (VolumeBinding, VolumeZone)"]
    [free] = simulate([s], NODES)
    assert free.zones == {"zone-a": 2, "zone-b": 1, "zone-c": 1} and free.reasons == []


def test_a_pinned_ordinal_whose_zone_cannot_take_it_stays_pending_naming_its_volume():
    from policylib.simulate import simulate
    s = with_claims(statefulset(replicas=3))
    s["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "6"}}
    [p] = simulate([s] + bound(1, ["zone-c"]) + bound(2, ["zone-c"]), NODES)
    assert (p.placed, p.pending, p.pending_max) == ({"a1": 1, "c1": 1}, 1, 1)
    assert p.reasons[0] == ("redis-2 (its bound volumes allow only c1): 0/5 nodes are available: 1 Insufficient cpu, "
                            "4 node(s) didn't match Pod's node affinity/selector.")


def test_a_pinned_ordinal_keeps_the_templates_own_node_affinity():
    from policylib.simulate.ordered import pinned_template
    template = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}}}
    assert pinned_template(template, ["b2", "b1"])["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}],
         "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b1", "b2"]}]}]
    assert pinned_template({}, ["a1"])["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a1"]}]}]}
