"""Seed 000 "LRS topology spread", rule by rule, with the seed's own examples as cases."""
import copy

import jsonpatch
import pytest

from policylib import ClusterFacts, PolicyError, load_config, mutate, spread_drift
from policylib.spread import (
    AUTOSCALING_MIN_ANNOTATION,
    RECORD_KEYS,
    RECORD_REPLICAS,
    RECORD_SETTINGS,
    SKIP_KEY,
    derived_max_skew,
    effective_replicas,
    term_selects_own_pods,
)
from tests.helpers import by_key, constraints, deployment, hpa, legacy_anti_affinity, pod_spec

ENFORCE = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "minDomains": 3,
                                              "hardMinReplicas": 3}})  # seed "Example: Enforce the host spread"
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"


# --- defaults (seed "Default values") -----------------------------------------

def test_defaults_write_two_preferences_exactly():
    r = mutate(deployment(replicas=5))
    assert constraints(r.object) == [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "web"}}, "nodeTaintsPolicy": "Honor",
         "matchLabelKeys": ["pod-template-hash"]},
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "web"}}, "nodeTaintsPolicy": "Honor",
         "matchLabelKeys": ["pod-template-hash"]},
    ]


def test_create_patch_is_exactly_the_owned_additions():
    d = deployment(replicas=5)
    r = mutate(d)
    assert [op["path"] for op in r.patch] == ["/metadata/annotations", "/spec/template/spec/topologySpreadConstraints"]
    assert all(op["op"] == "add" for op in r.patch)
    assert r.patch[0]["value"] == {RECORD_REPLICAS: "5", RECORD_SETTINGS: load_config(None).spread_fingerprint(),
                                   RECORD_KEYS: f"{ZONE},{HOST}"}
    assert jsonpatch.apply_patch(d, r.patch) == r.object


# --- replica-derived maxSkew (seed "Preference or requirement") ---------------

@pytest.mark.parametrize("replicas,when,max_skew", [
    (1, "ScheduleAnyway", 1), (2, "ScheduleAnyway", 1),       # below hardMinReplicas: a preference
    (3, "DoNotSchedule", 1),
    (4, "DoNotSchedule", 2), (5, "DoNotSchedule", 2), (6, "DoNotSchedule", 2),
    (7, "DoNotSchedule", 3), (8, "DoNotSchedule", 3), (9, "DoNotSchedule", 3),
    (12, "DoNotSchedule", 4),
])
def test_seed_table_with_enforced_host_spread(replicas, when, max_skew):
    host = by_key(mutate(deployment(replicas=replicas), ENFORCE).object)[HOST]
    assert (host["whenUnsatisfiable"], host["maxSkew"]) == (when, max_skew)
    assert ("minDomains" in host) == (when == "DoNotSchedule")
    if when == "DoNotSchedule":
        assert host["minDomains"] == 3


@pytest.mark.parametrize("replicas,expected", [(1, 1), (3, 1), (4, 2), (6, 2), (7, 3), (9, 3), (12, 4)])
def test_derived_max_skew_defaults(replicas, expected):
    assert derived_max_skew(replicas, ENFORCE.host) == expected


def test_three_replicas_need_three_nodes_seed_example():
    host = by_key(mutate(deployment(replicas=3), ENFORCE).object)[HOST]
    assert host == {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}, "minDomains": 3,
                    "nodeTaintsPolicy": "Honor", "matchLabelKeys": ["pod-template-hash"]}


def test_without_the_rule_twelve_replicas_keep_max_skew_one():
    cfg = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule",
                                              "enableReplicaDerivedMaxSkewRule": False}})
    assert by_key(mutate(deployment(replicas=12), cfg).object)[HOST]["maxSkew"] == 1


def test_with_schedule_anyway_the_rule_has_no_effect():
    host = by_key(mutate(deployment(replicas=12)).object)[HOST]
    assert (host["whenUnsatisfiable"], host["maxSkew"], "minDomains" in host) == ("ScheduleAnyway", 1, False)


def test_configured_max_skew_is_a_floor():
    cfg = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "maxSkew": 5}})
    assert by_key(mutate(deployment(replicas=12), cfg).object)[HOST]["maxSkew"] == 5


def test_reason_explains_the_enforced_skew():
    r = mutate(deployment(replicas=7), ENFORCE)
    assert "host spread enforced: 7 effective replicas >= hardMinReplicas 3; maxSkew 3 = ceil(7/3)" in r.reasons


def test_hard_min_replicas_gate_uses_its_own_threshold():
    cfg = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 5}})
    assert by_key(mutate(deployment(replicas=4), cfg).object)[HOST]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert by_key(mutate(deployment(replicas=5), cfg).object)[HOST]["whenUnsatisfiable"] == "DoNotSchedule"


def test_zone_spread_is_always_a_preference_even_when_host_is_enforced():
    zone = by_key(mutate(deployment(replicas=12), ENFORCE).object)[ZONE]
    assert zone["whenUnsatisfiable"] == "ScheduleAnyway" and "minDomains" not in zone


def test_custom_topology_keys_and_match_label_keys_none():
    cfg = load_config({"zoneTopologySpread": {"topologyKey": "example.com/zone", "matchLabelKeys": "none"},
                       "hostTopologySpread": {"topologyKey": "example.com/rack", "matchLabelKeys": "none"}})
    out = constraints(mutate(deployment(), cfg).object)
    assert [c["topologyKey"] for c in out] == ["example.com/zone", "example.com/rack"]
    assert all("matchLabelKeys" not in c for c in out)


# --- enabled: false (seed "Example: Turn off both spreads") -------------------

def test_both_spreads_off_adds_nothing():
    cfg = load_config({"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}})
    d = deployment(replicas=6, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                         "affinity": legacy_anti_affinity({"app": "web"})})
    r = mutate(d, cfg)
    assert r.patch == [] and r.object is d


def test_disabled_zone_spread_removes_the_one_we_wrote_before():
    old = mutate(deployment(replicas=4)).object
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    r = mutate(new, load_config({"zoneTopologySpread": {"enabled": False}}), old=old)
    assert [c["topologyKey"] for c in constraints(r.object)] == [HOST]
    assert r.object["metadata"]["annotations"][RECORD_KEYS] == HOST


def test_disabled_zone_spread_keeps_a_users_own_zone_constraint():
    user_zone = {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}}
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}], "topologySpreadConstraints": [user_zone]})
    out = constraints(mutate(d, load_config({"zoneTopologySpread": {"enabled": False}})).object)
    assert out[0] == user_zone and [c["topologyKey"] for c in out] == [ZONE, HOST]


# --- label selector ---------------------------------------------------------------

def test_label_selector_is_the_deployments_own_selector_with_expressions():
    sel = {"matchLabels": {"app": "web", "tier": "serve"},
           "matchExpressions": [{"key": "track", "operator": "In", "values": ["stable", "canary"]}]}
    d = deployment(labels={"app": "web", "tier": "serve", "track": "stable"}, selector=sel)
    assert len(constraints(mutate(d).object)) == 2   # zone and host
    for c in constraints(mutate(d).object):
        assert c["labelSelector"] == sel


def test_label_selector_never_contains_a_match_label_key():
    sel = {"matchLabels": {"app": "web", "pod-template-hash": "abc"},
           "matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]}
    d = deployment(labels={"app": "web", "pod-template-hash": "abc"}, selector=sel)
    assert len(constraints(mutate(d).object)) == 2   # zone and host
    for c in constraints(mutate(d).object):
        assert c["labelSelector"] == {"matchLabels": {"app": "web"}}
        assert c["matchLabelKeys"] == ["pod-template-hash"]


# --- effective replica count (seed "Settings reference") ----------------------

@pytest.mark.parametrize("version", ["v1", "v2"])
def test_hpa_minimum_is_the_effective_count(version):
    facts = ClusterFacts.from_objects([hpa("web", 9, version=version)])
    r = mutate(deployment(replicas=2), ENFORCE, facts=facts)
    assert by_key(r.object)[HOST]["maxSkew"] == 3
    assert r.object["metadata"]["annotations"][RECORD_REPLICAS] == "9"


def test_hpa_without_min_replicas_means_one():
    facts = ClusterFacts.from_objects([hpa("web", None)])
    assert effective_replicas(deployment(replicas=10), facts).replicas == 1


def test_hpa_in_another_namespace_or_for_another_target_is_ignored():
    facts = ClusterFacts.from_objects([hpa("web", 9, namespace="other"), hpa("api", 9)])
    assert effective_replicas(deployment(replicas=4), facts).replicas == 4


def test_two_hpas_use_the_highest_minimum_with_a_warning():
    facts = ClusterFacts.from_objects([hpa("web", 2, name="a"), hpa("web", 6, name="b")])
    eff = effective_replicas(deployment(), facts)
    assert eff.replicas == 6 and "2 HorizontalPodAutoscalers" in eff.warnings[0]


def test_autoscaling_min_annotation_when_the_hpa_is_not_visible():
    d = deployment(replicas=2, annotations={AUTOSCALING_MIN_ANNOTATION: "7"})
    assert effective_replicas(d).replicas == 7
    facts = ClusterFacts.from_objects([hpa("web", 4)])
    assert effective_replicas(d, facts).replicas == 4  # a visible HPA wins


def test_absent_replicas_means_one():
    assert effective_replicas(deployment(replicas=None)).replicas == 1


@pytest.mark.parametrize("mutator,field,fragment", [
    (lambda d: d["spec"].update(replicas="three"), "spec.replicas", 'Invalid value: "three": must be an integer'),
    (lambda d: d["spec"].update(replicas=-1), "spec.replicas", "Invalid value: -1: must be greater than or equal to 0"),
    (lambda d: d["spec"].pop("selector"), "spec.selector", "Required value"),
    (lambda d: d["spec"].update(selector={}), "spec.selector", "Required value"),
    (lambda d: d["spec"]["template"].pop("spec"), "spec.template.spec", "Required value"),
    (lambda d: d["metadata"].update(annotations={AUTOSCALING_MIN_ANNOTATION: "many"}),
     f"metadata.annotations[{AUTOSCALING_MIN_ANNOTATION}]", "whole number"),
])
def test_bad_deployments_raise_a_policy_error_naming_object_and_field(mutator, field, fragment):
    d = deployment()
    mutator(d)
    with pytest.raises(PolicyError) as e:
        mutate(d)
    assert e.value.obj_ref == "Deployment ml/web" and e.value.field == field and fragment in e.value.message


def test_bad_hpa_min_replicas_names_the_hpa():
    facts = ClusterFacts.from_objects([hpa("web", "two")])
    with pytest.raises(PolicyError) as e:
        mutate(deployment(), facts=facts)
    assert (e.value.obj_ref, e.value.field) == ("HorizontalPodAutoscaler ml/web", "spec.minReplicas")


# --- existing constraints ----------------------------------------------------------

def test_managed_keys_are_replaced_and_other_keys_kept_in_order():
    rack = {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}}}
    gpu = dict(rack, topologyKey="example.com/gpu-island")
    old_host = {"maxSkew": 9, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}}
    old_host_soft = dict(old_host, whenUnsatisfiable="ScheduleAnyway")
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}],
                             "topologySpreadConstraints": [old_host, rack, old_host_soft, gpu]})
    out = constraints(mutate(d).object)
    assert [c["topologyKey"] for c in out] == ["example.com/rack", "example.com/gpu-island", ZONE, HOST]
    assert out[0] == rack and out[1] == gpu and out[3]["maxSkew"] == 1


# --- legacy anti-affinity (seed "Existing deployments") ----------------------------

@pytest.mark.parametrize("preferred", [False, True])
def test_own_anti_affinity_is_removed_and_empty_maps_go(preferred):
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}],
                             "affinity": legacy_anti_affinity({"app": "web"}, preferred=preferred)})
    r = mutate(d)
    assert "affinity" not in pod_spec(r.object)
    assert {"op": "remove", "path": "/spec/template/spec/affinity"} in r.patch


def test_anti_affinity_against_other_workloads_stays():
    other = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
    own = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
    node_aff = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}], "affinity": {
        "nodeAffinity": node_aff, "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [own, other]}}})
    aff = pod_spec(mutate(d).object)["affinity"]
    assert aff == {"nodeAffinity": node_aff, "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [other]}}


def test_remove_all_setting_removes_every_anti_affinity_term():
    other = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}], "affinity": {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [other]}}})
    assert "affinity" not in pod_spec(mutate(d, load_config({"removePodAntiAffinity": "all"})).object)
    assert "affinity" in pod_spec(mutate(d).object)


@pytest.mark.parametrize("term,expected", [
    ({"labelSelector": {"matchLabels": {"app": "web"}}}, True),
    ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "x"]}]}}, True),
    ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}}, False),
    ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}, True),
    ({"labelSelector": {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}}, True),
    ({"labelSelector": {}}, True),                       # empty selector: every pod
    ({}, False),                                         # null selector: no pod
    ({"labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": ["other"]}, False),
    ({"labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": ["ml"]}, True),
    ({"labelSelector": {"matchLabels": {"app": "web"}}, "namespaceSelector": {}}, True),
    ({"labelSelector": {"matchLabels": {"app": "web"}}, "namespaceSelector": {"matchLabels": {"t": "x"}}}, False),
    ({"labelSelector": {"matchLabels": {"app": "web"}}, "mismatchLabelKeys": ["tenant"]}, False),
])
def test_which_terms_select_the_deployments_own_pods(term, expected):
    assert term_selects_own_pods(term, {"app": "web"}, "ml") is expected


# --- when to write (seed "Pod rollouts", "Existing deployments") -------------------

def test_update_without_count_change_keeps_old_rules_under_new_settings():
    old = mutate(deployment(replicas=6), ENFORCE).object
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/app:2"
    r = mutate(new, load_config({"hostTopologySpread": {"maxSkew": 3}}), old=old)
    assert r.patch == []
    assert "effective replica count unchanged: placement rules kept" in r.reasons


def test_update_restores_rules_dropped_by_kubectl_replace():
    old = mutate(deployment(replicas=6), ENFORCE).object
    replaced = deployment(replicas=6)  # the user's manifest: no spread, no record
    r = mutate(replaced, ENFORCE, old=old)
    assert constraints(r.object) == constraints(old)
    assert r.object["metadata"]["annotations"] == old["metadata"]["annotations"]
    assert jsonpatch.apply_patch(replaced, r.patch) == r.object


def test_update_that_edits_a_managed_constraint_is_reverted_with_a_warning():
    old = mutate(deployment(replicas=6), ENFORCE).object
    new = copy.deepcopy(old)
    by_key(new)[HOST]["maxSkew"] = 1
    r = mutate(new, ENFORCE, old=old)
    assert constraints(r.object) == constraints(old)
    assert any("reverted" in w for w in r.warnings)


def test_update_of_a_legacy_deployment_keeps_its_anti_affinity():
    legacy = deployment(replicas=4, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                              "affinity": legacy_anti_affinity({"app": "web"})})
    new = copy.deepcopy(legacy)
    new["metadata"]["labels"] = {"team": "ml"}
    assert mutate(new, ENFORCE, old=legacy).patch == []


def test_update_with_count_change_writes_current_settings():
    old = mutate(deployment(replicas=3), ENFORCE).object
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 7
    r = mutate(new, ENFORCE, old=old)
    assert by_key(r.object)[HOST]["maxSkew"] == 3
    assert "effective replicas changed 3 -> 7" in r.reasons
    assert r.object["metadata"]["annotations"][RECORD_REPLICAS] == "7"


def test_update_where_hpa_minimum_moved_since_the_record_writes():
    old = mutate(deployment(replicas=3), ENFORCE, facts=ClusterFacts.from_objects([hpa("web", 3)])).object
    facts = ClusterFacts.from_objects([hpa("web", 9)])
    r = mutate(copy.deepcopy(old), ENFORCE, old=old, facts=facts)
    assert by_key(r.object)[HOST]["maxSkew"] == 3
    assert "effective replicas 9 differ from the 3 recorded when the spread was written" in r.reasons


def test_hpa_driven_replica_changes_do_not_rewrite():
    facts = ClusterFacts.from_objects([hpa("web", 3)])
    old = mutate(deployment(replicas=3), ENFORCE, facts=facts).object
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 11
    assert mutate(new, ENFORCE, old=old, facts=facts).patch == []


def test_record_goes_on_the_deployment_not_the_pod_template():
    r = mutate(deployment())
    assert set(r.object["metadata"]["annotations"]) == {RECORD_REPLICAS, RECORD_SETTINGS, RECORD_KEYS}
    assert "annotations" not in r.object["spec"]["template"]["metadata"]


# --- opt-out, other kinds, purity ---------------------------------------------------

@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_opt_out_label_or_annotation(where):
    d = deployment()
    d["metadata"][where] = {SKIP_KEY: "true"}
    r = mutate(d)
    assert r.patch == [] and r.object is d and r.reasons == [f"skipped: {SKIP_KEY}=true"]


@pytest.mark.parametrize("obj", [
    {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "s"}, "spec": {}},
    {"apiVersion": "apps/v1beta2", "kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {}},
    {"apiVersion": "extensions/v1beta1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}},
])
def test_other_kinds_come_back_unchanged(obj):
    r = mutate(obj)
    assert r.patch == [] and r.object is obj


def test_input_is_never_modified_and_unowned_fields_keep_their_order():
    d = deployment(replicas=8, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                         "affinity": legacy_anti_affinity({"app": "web"}),
                                         "tolerations": [{"key": "gpu", "operator": "Exists"}],
                                         "nodeSelector": {"pool": "gpu"}})
    snapshot = copy.deepcopy(d)
    r = mutate(d, ENFORCE)
    assert d == snapshot
    assert list(pod_spec(r.object)) == ["containers", "tolerations", "nodeSelector", "topologySpreadConstraints"]
    assert list(r.object) == list(d) and list(r.object["spec"]) == list(d["spec"])
    assert pod_spec(r.object)["containers"] is pod_spec(d)["containers"]  # untouched subtrees are shared


def test_second_mutation_is_a_no_op():
    r = mutate(deployment(replicas=12, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                                 "affinity": legacy_anti_affinity({"app": "web"})}), ENFORCE)
    again = mutate(r.object, ENFORCE)
    assert again.patch == [] and again.object is r.object


def test_existing_invalid_user_constraints_are_reported_not_hidden():
    bad = {"maxSkew": 0, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway"}
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}], "topologySpreadConstraints": [bad]})
    r = mutate(d)
    assert constraints(r.object)[0] == bad
    assert any("topologySpreadConstraints[0].maxSkew" in w for w in r.warnings)


# --- drift (seed "Existing deployments", reconcileDrift) -----------------------------

def test_drift_legacy_anti_affinity_at_or_above_hard_min():
    d = deployment(replicas=3, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                         "affinity": legacy_anti_affinity({"app": "web"})})
    drift = spread_drift(d)
    assert drift.needs_rewrite
    assert drift.reasons[0] == "has pod anti-affinity that the spread replaces"
    # the anti-affinity is required: its spread is enforced (rule S18's default)
    assert f"missing spread on {HOST} (DoNotSchedule, maxSkew 1, minDomains 3)" in drift.reasons
    soft = load_config({"hostTopologySpread": {"enforceForRequiredAntiAffinity": False}})
    assert f"missing spread on {HOST} (ScheduleAnyway, maxSkew 1)" in spread_drift(d, soft).reasons


def test_drift_below_hard_min_is_left_alone():
    d = deployment(replicas=2, pod_spec={"containers": [{"name": "a", "image": "x"}],
                                         "affinity": legacy_anti_affinity({"app": "web"})})
    assert not spread_drift(d).needs_rewrite


def test_drift_after_a_settings_change_names_the_difference():
    written = mutate(deployment(replicas=7)).object
    drift = spread_drift(written, ENFORCE)
    assert drift.needs_rewrite
    assert drift.reasons == (f"spread on {HOST} differs: ScheduleAnyway, maxSkew 1 -> "
                             "DoNotSchedule, maxSkew 3, minDomains 3",)


def test_compliant_deployment_has_no_drift():
    assert not spread_drift(mutate(deployment(replicas=7), ENFORCE).object, ENFORCE).needs_rewrite


def test_drift_ignores_anti_affinity_the_policy_keeps():
    other = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
    d = deployment(replicas=5, pod_spec={"containers": [{"name": "a", "image": "x"}], "affinity": {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [other]}}})
    written = mutate(d).object
    assert not spread_drift(written).needs_rewrite


def test_update_of_a_deployment_never_written_keeps_the_users_own_constraints():
    old = deployment(replicas=4)
    new = copy.deepcopy(old)
    mine = {"maxSkew": 2, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}}}
    new["spec"]["template"]["spec"]["topologySpreadConstraints"] = [mine]
    r = mutate(new, ENFORCE, old=old)
    assert r.patch == [] and r.warnings == []


@pytest.mark.parametrize("mutator,field", [
    (lambda d: d["spec"]["selector"].update(matchLabels=["app", "web"]), "spec.selector.matchLabels"),
    (lambda d: d["spec"]["selector"].update(matchExpressions=["app"]), "spec.selector.matchExpressions[0]"),
    (lambda d: d["metadata"].update(annotations=["a"]), "metadata.annotations"),
    (lambda d: d["spec"]["template"]["metadata"].update(labels="app=web"), "spec.template.metadata.labels"),
    (lambda d: d["spec"]["template"]["spec"].update(affinity="none"), "spec.template.spec.affinity"),
])
def test_odd_types_are_policy_errors_not_crashes(mutator, field):
    d = deployment()
    mutator(d)
    with pytest.raises(PolicyError) as e:
        mutate(d)
    assert e.value.field == field


@pytest.mark.parametrize("term", [
    {"labelSelector": "app=web"},
    {"labelSelector": {"matchLabels": ["app"]}},
    {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": "web"}]}},
    {"labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": "ml"},
])
def test_malformed_anti_affinity_terms_are_kept_not_crashed_on(term):
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}], "affinity": {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
    r = mutate(d)
    assert pod_spec(r.object)["affinity"] == pod_spec(d)["affinity"]


# --- UPDATE of Deployments policylib never wrote, and warnings ------------------------------------

def _pre_existing(replicas=4):
    """Created before the webhook: the legacy anti-affinity and the user's own host constraint."""
    spec = {"containers": [{"name": "app", "image": "x"}], "affinity": legacy_anti_affinity({"app": "web"}),
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}},
                {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"app": "web"}}}]}
    return deployment(replicas=replicas, pod_spec=spec)


def test_update_dropping_the_placement_of_an_unwritten_deployment_keeps_it():
    old = _pre_existing()
    new = deployment(replicas=4)   # a new generator version: no affinity, no constraints
    r = mutate(new, load_config(None), old=old)
    spec = pod_spec(r.object)
    assert spec["affinity"] == legacy_anti_affinity({"app": "web"})
    # the managed host constraint comes back; the rack constraint the update dropped is the user's change
    assert spec["topologySpreadConstraints"] == [pod_spec(old)["topologySpreadConstraints"][0]]
    assert r.warnings == ["kept the dropped placement (anti-affinity; spread on kubernetes.io/hostname) until replicas "
                          "change, or reconcileDrift"]
    assert all(len(w) <= 120 for w in r.warnings)   # the webhook passes warnings of at most 120 characters
    assert jsonpatch.apply_patch(new, r.patch) == r.object
    assert mutate(r.object, load_config(None), old=old).patch == []     # idempotent


def test_update_changing_the_count_writes_the_spread_instead():
    r = mutate(deployment(replicas=6), load_config(None), old=_pre_existing(4))
    assert "affinity" not in pod_spec(r.object)
    assert [c["topologyKey"] for c in pod_spec(r.object)["topologySpreadConstraints"]] == [
        "topology.kubernetes.io/zone", "kubernetes.io/hostname"]


def test_update_dropping_one_managed_constraint_restores_that_one():
    old = _pre_existing()
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}}}
    pod_spec(old)["topologySpreadConstraints"].append(zone)
    new = deployment(replicas=4, pod_spec={"containers": [{"name": "app", "image": "x"}],
                                           "affinity": legacy_anti_affinity({"app": "web"}),
                                           "topologySpreadConstraints": [zone]})
    r = mutate(new, load_config(None), old=old)
    assert pod_spec(r.object)["topologySpreadConstraints"] == [zone, pod_spec(old)["topologySpreadConstraints"][0]]
    assert r.warnings == ["kept the dropped placement (spread on kubernetes.io/hostname) until replicas change, or "
                          "reconcileDrift"]


def test_update_with_both_spreads_off_is_the_users():
    off = load_config({"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}})
    r = mutate(deployment(replicas=4), off, old=_pre_existing())
    assert (r.patch, r.warnings) == ([], [])


def test_update_keeping_its_own_rules_is_left_alone():
    old = _pre_existing()
    r = mutate(copy.deepcopy(old), load_config(None), old=old)
    assert (r.patch, r.warnings) == ([], [])


def test_removing_a_required_anti_affinity_under_a_preference_warns():
    legacy = deployment(replicas=4, pod_spec={"containers": [{"name": "app", "image": "x"}],
                                              "affinity": legacy_anti_affinity({"app": "web"})})
    assert mutate(legacy, load_config(None)).warnings == []   # the default keeps it hard (rule S18)
    soft = {"enforceForRequiredAntiAffinity": False}
    r = mutate(legacy, load_config({"hostTopologySpread": soft}))
    assert r.warnings == ["required anti-affinity removed; host spread only preferred: set "
                          "hostTopologySpread.enforceForRequiredAntiAffinity: true"]
    enforced = mutate(legacy, load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", **soft}}))
    assert enforced.warnings == []
    small = deployment(replicas=2, pod_spec=pod_spec(legacy))   # enforced only from hardMinReplicas 3
    assert mutate(small, load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", **soft}})).warnings \
        == ["required anti-affinity removed; host spread only preferred: set hostTopologySpread.hardMinReplicas <= 2"]
    assert mutate(legacy, load_config({"hostTopologySpread": {"enabled": False}})).warnings == [
        "required anti-affinity removed; host spread only preferred: enable hostTopologySpread"]
    preferred = deployment(replicas=4, pod_spec={"containers": [{"name": "app", "image": "x"}],
                                                 "affinity": legacy_anti_affinity({"app": "web"}, preferred=True)})
    assert mutate(preferred, load_config(None)).warnings == []   # a preference becoming a preference


def test_revert_warning_names_only_the_reverted_key():
    config = load_config(None)
    written = mutate(deployment(replicas=4), config).object
    edited = copy.deepcopy(written)
    host = [c for c in pod_spec(edited)["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname"][0]
    host["maxSkew"] = 5
    r = mutate(edited, config, old=written)
    assert r.warnings == ["reverted changes to the managed spread on kubernetes.io/hostname: set by policylib when the "
                          "effective replica count changes (opt out: label policylib.io/skip=true)"]
    assert pod_spec(r.object)["topologySpreadConstraints"] == pod_spec(written)["topologySpreadConstraints"]


# --- numbers that fit their fields, objects that are objects ----------------------------------------

@pytest.mark.parametrize("raw", ["2147483648", "9000000000", "99999999999999999999"])
def test_autoscaling_annotation_past_int32_is_ignored_with_a_warning(raw):
    config = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}})
    r = mutate(deployment(replicas=3, annotations={AUTOSCALING_MIN_ANNOTATION: raw}), config)
    assert [c["maxSkew"] for c in constraints(r.object)] == [1, 1]
    assert r.object["metadata"]["annotations"][RECORD_REPLICAS] == "3"
    shown = raw if len(raw) <= 20 else raw[:20] + "..."
    assert r.warnings == [f"policylib.io/autoscaling-min-replicas {shown!r} is over int32 (2147483647): ignored, "
                          "spec.replicas counts"]
    assert all(len(w) <= 120 for w in r.warnings)
    top = mutate(deployment(replicas=3, annotations={AUTOSCALING_MIN_ANNOTATION: "2147483647"}), config)
    assert [c["maxSkew"] for c in constraints(top.object)] == [1, 715827883] and top.warnings == []


@pytest.mark.parametrize("mutilate,field", [
    (lambda d: d.update(metadata=None), "metadata: Invalid value: null: must be an object"),
    (lambda d: d.update(metadata=[1]), "metadata: Invalid value: [1]: must be an object"),
    (lambda d: d["spec"]["template"].update(metadata=1.5), "spec.template.metadata: Invalid value: 1.5: must be a map"),
])
def test_metadata_that_is_not_a_map_is_a_policy_error(mutilate, field):
    d = deployment(replicas=3)
    mutilate(d)
    with pytest.raises(PolicyError) as e:
        mutate(d, load_config(None))
    assert str(e.value).endswith(field)
