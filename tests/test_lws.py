"""LeaderWorkerSets: the Deployments' spread on the leaders, counting groups, each group packed within the gang
placement's level, and what gangs each group said (rules E1-E8)."""
import copy
import io
import json

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webhook
from policylib import ClusterFacts, PolicyError, load_config, mutate
from policylib.cli import main
from policylib.facts import hpa_target
from policylib.families import family_of, is_unhandled_workload
from policylib.spread import LEADER_WORKER_SET, PENDING, RECORD_KEYS, RECORD_REPLICAS, RECORD_SETTINGS
from tests.helpers import hpa
from tests.webhook_support import patch_of, patched, review_of

ZONE, HOST, RACK = "topology.kubernetes.io/zone", "kubernetes.io/hostname", "example.com/rack"
NAME_LABEL, INDEX_LABEL = "leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
GENERATED = "policylib.io/leader-template"
PACKING = "policylib.io/group-packing"
LEADERS = {"matchLabels": {NAME_LABEL: "vllm", INDEX_LABEL: "0"}}
NO_REVISION_KEY = ("matchLabelKeys pod-template-hash not written: LeaderWorkerSet pods have no pod-template-hash; each "
                   "recreated group's leader is counted with all the leaders (no revision key)")
LEVELS = [{"name": "zone", "nodeLabel": ZONE}, {"name": "rack", "nodeLabel": RACK}, {"name": "host", "nodeLabel": HOST}]


def pod_template(image="vllm/vllm-openai:v0.6.0"):
    return {"metadata": {"labels": {"app": "vllm"}},
            "spec": {"containers": [{"name": "vllm", "image": image,
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def lws(name="vllm", namespace="serving", replicas=3, size=4, leader=False, annotations=None, **spec):
    """A valid leaderworkerset.x-k8s.io/v1 LeaderWorkerSet, with a leaderTemplate of its own when ``leader``."""
    template = {"size": size, "workerTemplate": pod_template()}
    if leader:
        template["leaderTemplate"] = pod_template("vllm/vllm-openai:v0.6.0-leader")
    meta = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"replicas": replicas, "leaderWorkerTemplate": template, **spec}}


def lws_hpa(target, min_replicas, namespace="serving", name=None):
    h = hpa(target, min_replicas, namespace, name)
    h["spec"]["scaleTargetRef"] = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                   "name": target}
    return h


def leader_pod_spec(obj):
    return obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def worker_pod_spec(obj):
    return obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]


def by_key(obj):
    return {c["topologyKey"]: c for c in leader_pod_spec(obj).get("topologySpreadConstraints") or []}


def packed(within="rack", mode="required", **gang):
    config = {"topology": {"levels": LEVELS, "gangs": {"within": within, "mode": mode}}}
    if gang:
        config["gang"] = gang
    return config


def packing_term(label=RACK):
    return {"labelSelector": {"matchLabels": {NAME_LABEL: "vllm"}}, "matchLabelKeys": [GROUP_KEY],
            "topologyKey": label}


# --- CREATE without a leaderTemplate: one is generated (rules E2, E3) ------------------------------

def test_a_set_without_leader_template_gets_one_generated_from_the_worker_template_with_the_leaders_spread():
    obj = lws()
    r = mutate(obj)
    leader = r.object["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert leader["metadata"] == {"labels": {"app": "vllm"}}
    assert leader["spec"]["containers"] == worker_pod_spec(obj)["containers"]
    assert leader["spec"]["topologySpreadConstraints"] == [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": LEADERS,
         "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": LEADERS,
         "nodeTaintsPolicy": "Honor"}]
    assert r.object["spec"]["leaderWorkerTemplate"]["workerTemplate"] == obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert r.object["metadata"]["annotations"] == {
        RECORD_REPLICAS: "3", RECORD_SETTINGS: LEADER_WORKER_SET.settings(load_config(None)).spread_fingerprint(),
        RECORD_KEYS: f"{ZONE},{HOST}", GENERATED: "generated"}
    assert r.reasons == [
        "effective replicas 3 (spec.replicas 3)", NO_REVISION_KEY,
        "zone spread on topology.kubernetes.io/zone: maxSkew 1, ScheduleAnyway",
        "host spread is a preference: whenUnsatisfiable ScheduleAnyway",
        "gang.topology none: each group's pods are placed by the spread alone (no packing written)",
        "leaderTemplate generated from the workerTemplate: it carries the leaders' spread, and is derived again from "
        "the workerTemplate on every update",
        "gang per group (size 4): not written: ack gangs (method labels) for LeaderWorkerSets are not built by "
        "policylib yet, and LWS v0.10.0 gangs only through Volcano; the groups are not gang-scheduled"]
    assert r.warnings == [
        "spec.leaderWorkerTemplate.leaderTemplate generated from the workerTemplate (policylib.io/leader-template: "
        "generated) to carry the leaders' spread: a GitOps tool shows it as drift; ignore that field there "
        "(docs/gitops.md)"]
    assert [op["path"] for op in r.patch] == ["/metadata/annotations", "/spec/leaderWorkerTemplate/leaderTemplate"]
    assert jsonpatch.apply_patch(obj, r.patch) == r.object
    assert obj == lws()   # the input is never changed


def test_with_nothing_for_the_leaders_alone_no_leader_template_is_generated():
    r = mutate(lws(), {"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}})
    assert r.patch == [] and "leaderTemplate" not in r.object["spec"]["leaderWorkerTemplate"]


def test_a_users_leader_template_is_written_in_place_and_the_worker_template_left_alone():
    obj = lws(leader=True)
    r = mutate(obj, {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 3}})
    assert leader_pod_spec(r.object)["containers"][0]["image"] == "vllm/vllm-openai:v0.6.0-leader"
    assert by_key(r.object)[HOST] == {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
                                      "labelSelector": LEADERS, "minDomains": 3, "nodeTaintsPolicy": "Honor"}
    assert GENERATED not in r.object["metadata"]["annotations"] and r.warnings == []
    assert r.object["spec"]["leaderWorkerTemplate"]["workerTemplate"] == obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert [op["path"] for op in r.patch] == ["/metadata/annotations",
                                              "/spec/leaderWorkerTemplate/leaderTemplate/spec/topologySpreadConstraints"]


def test_the_leaders_own_anti_affinity_is_replaced_and_the_workers_is_kept():
    """Rule E2 (S9 on the leaders): a required anti-affinity among the leaders goes, replaced by an enforced host
    spread; the same term in the workerTemplate is the group's own intent and stays."""
    obj = lws(leader=True)
    term = {"labelSelector": {"matchLabels": {NAME_LABEL: "vllm", INDEX_LABEL: "0"}}, "topologyKey": HOST}
    obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"].update({NAME_LABEL: "vllm",
                                                                                        INDEX_LABEL: "0"})
    obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [copy.deepcopy(term)]}}
    r = mutate(obj)
    assert "affinity" not in leader_pod_spec(r.object)
    assert by_key(r.object)[HOST]["whenUnsatisfiable"] == "DoNotSchedule"
    assert worker_pod_spec(r.object)["affinity"] == worker_pod_spec(obj)["affinity"]
    assert ("removed 1 pod anti-affinity term(s) selecting the LeaderWorkerSet's own pods: the spread replaces them"
            in r.reasons)


# --- rule E1: every error at once, with its field path ----------------------------------------------

def test_every_error_of_a_leaderworkerset_is_named_at_once_with_its_field_path():
    obj = lws(replicas=-1, startupPolicy="WhenReady")
    del obj["metadata"]["name"]
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = 0
    lwt["workerTemplate"]["spec"]["topologySpreadConstraints"] = "zone"
    lwt["leaderTemplate"] = {"metadata": {"labels": "app=vllm"}, "spec": {"affinity": []}}
    with pytest.raises(PolicyError) as err:
        mutate(obj)
    assert [(e.field, e.detail) for e in err.value.errors] == [
        ("metadata.name", "the leaders' selector names the LeaderWorkerSet"),
        ("spec.replicas", "must be greater than or equal to 0"),
        ("spec.startupPolicy", 'supported values: "LeaderCreated", "LeaderReady"'),
        ("spec.leaderWorkerTemplate.size", "must be greater than or equal to 1"),
        ("spec.leaderWorkerTemplate.workerTemplate.spec.topologySpreadConstraints", "must be a list"),
        ("spec.leaderWorkerTemplate.leaderTemplate.metadata.labels", "must be a map"),
        ("spec.leaderWorkerTemplate.leaderTemplate.spec.affinity", "must be an object")]
    assert str(err.value).startswith("LeaderWorkerSet serving/<no name>: ")


@pytest.mark.parametrize("spec, field", [
    ({}, "spec.leaderWorkerTemplate"),
    ({"leaderWorkerTemplate": "big"}, "spec.leaderWorkerTemplate"),
    ({"leaderWorkerTemplate": {"size": 2}}, "spec.leaderWorkerTemplate.workerTemplate.spec"),
    ({"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": "x"}}},
     "spec.leaderWorkerTemplate.workerTemplate.spec"),
])
def test_a_missing_or_malformed_template_is_named(spec, field):
    obj = lws()
    obj["spec"] = spec
    with pytest.raises(PolicyError) as err:
        mutate(obj)
    assert [e.field for e in err.value.errors] == [field]


def test_a_malformed_stored_object_is_named_under_old_object():
    old = lws()
    old["spec"]["leaderWorkerTemplate"]["size"] = "four"
    with pytest.raises(PolicyError) as err:
        mutate(lws(), old=old)
    assert [e.field for e in err.value.errors] == ["oldObject.spec.leaderWorkerTemplate.size"]


# --- rule E2: groups counted, the HPA of the LeaderWorkerSet ---------------------------------------

def test_an_hpa_of_the_leaderworkerset_counts_and_one_of_a_deployment_of_the_same_name_does_not():
    assert hpa_target(lws_hpa("vllm", 5)) == ("serving", "LeaderWorkerSet/vllm")
    enforce = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "hardMinReplicas": 3}}
    r = mutate(lws(replicas=2), enforce, facts=ClusterFacts.from_objects([lws_hpa("vllm", 7)]))
    assert r.reasons[0] == "effective replicas 7 (HorizontalPodAutoscaler vllm minReplicas 7)"
    assert by_key(r.object)[HOST]["maxSkew"] == 3
    other = mutate(lws(replicas=2), enforce, facts=ClusterFacts.from_objects([hpa("vllm", 7, "serving")]))
    assert other.reasons[0] == "effective replicas 2 (spec.replicas 2)"
    # an HPA naming another group's kind is not this LeaderWorkerSet's
    wrong = lws_hpa("vllm", 7)
    wrong["spec"]["scaleTargetRef"]["apiVersion"] = "apps/v1"
    assert hpa_target(wrong) is None


def test_the_group_count_not_the_pod_count_is_the_effective_count():
    r = mutate(lws(replicas=5, size=8))
    assert r.reasons[0] == "effective replicas 5 (spec.replicas 5)"
    assert r.object["metadata"]["annotations"][RECORD_REPLICAS] == "5"


def test_a_key_of_the_users_is_kept_and_only_pod_template_hash_goes():
    """Rule E4."""
    config = load_config({"zoneTopologySpread": {"matchLabelKeys": ["pod-template-hash", "app.example/version"]}})
    r = mutate(lws(), config)
    assert by_key(r.object)[ZONE]["matchLabelKeys"] == ["app.example/version"]
    assert "matchLabelKeys" not in by_key(r.object)[HOST]
    assert NO_REVISION_KEY in r.reasons


# --- rules E5, E6: each group within one domain --------------------------------------------------

@pytest.mark.parametrize("leader", [False, True])
def test_a_required_gang_placement_packs_each_group_in_both_templates(leader):
    r = mutate(lws(leader=leader), packed())
    for spec in (leader_pod_spec(r.object), worker_pod_spec(r.object)):
        assert spec["affinity"] == {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [packing_term()]}}
    assert r.object["metadata"]["annotations"][PACKING] == f"{RACK} required"
    assert ("topology.gangs.within rack (example.com/rack, Volcano tier 1), required: each group packed within one "
            "rack domain: a required pod affinity on example.com/rack to this LeaderWorkerSet's pods, matchLabelKeys "
            "leaderworkerset.sigs.k8s.io/group-key, in the leader and the worker templates") in r.reasons
    # the spread of the leaders is written beside it
    assert set(by_key(r.object)) == {ZONE, HOST}


def test_a_preferred_gang_placement_is_a_weight_100_preference_beside_the_users_terms():
    obj = lws()
    users = {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST}}
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"] = {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [users]}}
    r = mutate(obj, packed(mode="preferred"))
    want = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        users, {"weight": 100, "podAffinityTerm": packing_term()}]}}
    assert worker_pod_spec(r.object)["affinity"] == want == leader_pod_spec(r.object)["affinity"]


@pytest.mark.parametrize("key", ["leaderworkerset.sigs.k8s.io/exclusive-topology",
                                 "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"])
def test_lws_exclusive_topology_means_no_packing_with_the_reason(key):
    r = mutate(lws(annotations={key: RACK}), packed())
    assert "affinity" not in worker_pod_spec(r.object) and "affinity" not in leader_pod_spec(r.object)
    assert PACKING not in r.object["metadata"]["annotations"]
    assert r.object["metadata"]["annotations"][key] == RACK
    assert (f"topology.gangs.within rack (example.com/rack, Volcano tier 1), required: no group packing written: "
            f"{key}={RACK} places one group per domain (LWS's own rule); policylib never writes or overrides it"
            ) in r.reasons


def test_packing_removed_when_the_placement_goes_with_a_template_change_and_kept_without_one():
    first = mutate(lws(), packed()).object
    # the settings change alone: the stored packing is kept (writing it would recreate every group)
    same = mutate(copy.deepcopy(first), None, old=first)
    assert same.patch == []
    assert ("leaderWorkerTemplate unchanged by this update: each group's packing kept as stored (writing it now "
            "would recreate every group)") in same.reasons
    # with an image change (a rollout anyway) the packing follows the settings: none now
    changed = copy.deepcopy(first)
    changed["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm:v2"
    r = mutate(changed, None, old=first)
    assert "affinity" not in worker_pod_spec(r.object) and "affinity" not in leader_pod_spec(r.object)
    assert PACKING not in r.object["metadata"]["annotations"]
    assert leader_pod_spec(r.object)["containers"][0]["image"] == "vllm:v2"


def test_a_packing_written_before_is_replaced_not_repeated_and_goes_beside_exclusive_topology():
    stored = mutate(lws(), packed()).object
    changed = copy.deepcopy(stored)
    changed["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm:v2"
    preferred = mutate(changed, packed(mode="preferred"), old=stored).object
    assert worker_pod_spec(preferred)["affinity"] == {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": packing_term()}]}}
    assert preferred["metadata"]["annotations"][PACKING] == f"{RACK} preferred"
    exclusive = copy.deepcopy(changed)
    exclusive["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] = RACK
    r = mutate(exclusive, packed(), old=stored).object
    assert "affinity" not in worker_pod_spec(r) and "affinity" not in leader_pod_spec(r)
    assert PACKING not in r["metadata"]["annotations"]


# --- rule E3 on UPDATE: the generated leaderTemplate follows the workerTemplate ----------------------

def test_a_generated_leader_template_is_derived_again_from_an_updated_worker_template():
    config = packed()
    stored = mutate(lws(), config).object
    incoming = copy.deepcopy(stored)
    incoming["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm:v2"
    r = mutate(incoming, config, old=stored)
    leader = leader_pod_spec(r.object)
    assert leader["containers"][0]["image"] == "vllm:v2"
    assert leader["topologySpreadConstraints"] == leader_pod_spec(stored)["topologySpreadConstraints"]
    assert leader["affinity"] == worker_pod_spec(r.object)["affinity"]
    assert r.object["metadata"]["annotations"][GENERATED] == "generated"
    assert r.warnings == []   # said once, when it was first generated
    # kubectl replace of the original manifest (no leaderTemplate): derived again, the same as stored
    replaced = mutate(lws(), config, old=stored)
    assert replaced.object["spec"] == stored["spec"]


def test_a_leader_template_the_user_changed_becomes_the_users():
    stored = mutate(lws()).object
    incoming = copy.deepcopy(stored)
    incoming["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"] = "leader:v2"
    r = mutate(incoming, None, old=stored)
    assert leader_pod_spec(r.object)["containers"][0]["image"] == "leader:v2"
    assert GENERATED not in r.object["metadata"]["annotations"]
    assert "leaderTemplate written by the user: it is the user's from now on (mutated in place)" in r.reasons


def test_a_count_change_alone_is_held_for_the_next_template_change():
    """Rule E2 (A9's reason): a change of the leaderWorkerTemplate recreates every group, so a scale alone writes
    the new count's constraints as pending only."""
    config = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 1}}
    stored = mutate(lws(replicas=3), config).object
    scaled = copy.deepcopy(stored)
    scaled["spec"]["replicas"] = 9
    r = mutate(scaled, config, old=stored)
    assert r.object["spec"]["leaderWorkerTemplate"] == stored["spec"]["leaderWorkerTemplate"]
    assert PENDING in r.object["metadata"]["annotations"]


# --- rules E7, E8: what gangs each group ---------------------------------------------------------

@pytest.mark.parametrize("gang, reason", [
    ({"method": "podgroup", "scheduler": "volcano"},
     "gang per group (size 4): given by the LWS controller's gangSchedulingManagement.schedulerProvider: volcano (one "
     "Volcano PodGroup per group, minMember the group's size; a setting of the LWS controller that policylib cannot "
     "see); the pods must name schedulerName: volcano; policylib writes no gang object for LeaderWorkerSets"),
    ({"method": "workload", "scheduler": "kube-scheduler"},
     "gang per group (size 4): not written: kube-scheduler's Workload API gangs for LeaderWorkerSets are not built by "
     "policylib yet, and LWS v0.10.0 makes none; the groups are not gang-scheduled"),
    ({"method": "podgroup", "scheduler": "scheduler-plugins"},
     "gang per group (size 4): not written: scheduler-plugins gangs (method podgroup) for LeaderWorkerSets are not "
     "built by policylib yet, and LWS v0.10.0 gangs only through Volcano; the groups are not gang-scheduled"),
    ({"enabled": False},
     "gang.enabled false: no gang for the groups (policylib writes none for LeaderWorkerSets)"),
])
def test_each_gang_scheduler_says_what_gangs_the_groups(gang, reason):
    r = mutate(lws(), {"gang": gang})
    assert r.reasons[-1] == reason
    assert r.extra_objects == []


def test_leader_ready_warns_that_a_gang_of_the_groups_size_can_never_be_met():
    volcano = mutate(lws(startupPolicy="LeaderReady"), {"gang": {"method": "podgroup", "scheduler": "volcano"}})
    assert volcano.warnings[-1] == (
        "startupPolicy LeaderReady: the workers wait for a Ready leader, so a gang of the group's size can never be "
        "met: LWS's Volcano provider sets the PodGroup's minMember to 1, and the group is not gang-scheduled (the "
        "leader may run while its workers stay Pending)")
    other = mutate(lws(startupPolicy="LeaderReady"))
    assert other.warnings[-1].endswith("a group gang must use startupPolicy LeaderCreated")
    assert not any("LeaderReady" in w for w in mutate(lws(startupPolicy="LeaderCreated")).warnings)
    assert not any("LeaderReady" in w for w in mutate(lws(startupPolicy="LeaderReady", size=1)).warnings)


# --- the family ------------------------------------------------------------------------------------

def test_leaderworkersets_are_handled_and_their_setting_turns_them_off():
    assert family_of(lws()).name == "LeaderWorkerSet" and not is_unhandled_workload(lws())
    off = mutate(lws(), {"leaderWorkerSets": {"enabled": False}})
    assert off.patch == [] and off.reasons == [
        "LeaderWorkerSet policies are off (leaderWorkerSets.enabled: false): left unchanged"]
    skipped = mutate(lws(annotations={"policylib.io/skip": "true"}))
    assert skipped.patch == [] and skipped.reasons == ["skipped: policylib.io/skip=true"]


#: The Deployment tests' settings (tests/test_statefulset.py) and the gang placements and schedulers.
CONFIGS = {
    "defaults": None,
    "enforce": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "hardMinReplicas": 3}},
    "no-derived-skew": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule",
                                               "enableReplicaDerivedMaxSkewRule": False}},
    "zone-key": {"zoneTopologySpread": {"topologyKey": "example.com/zone", "matchLabelKeys": "none"}},
    "both-off": {"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}},
    "remove-all": {"removePodAntiAffinity": "all"},
    "on-next-rollout": {"hostTopologySpread": {"rewrite": "OnNextRollout"}},
    "rack-required": packed(),
    "rack-preferred": packed(mode="preferred"),
    "rack-volcano": packed(method="podgroup", scheduler="volcano"),
    "rack-workload": packed(method="workload", scheduler="kube-scheduler"),
    "both-off-rack": {**packed(), "zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}},
}


@pytest.mark.parametrize("leader", [False, True], ids=["generated", "users"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reapply_is_idempotent_under_every_config(name, leader):
    """Mutating the result again, as a CREATE and as an UPDATE of the stored object, changes nothing."""
    config = load_config(CONFIGS[name])
    facts = ClusterFacts.from_objects([lws_hpa("vllm", 5)])
    first = mutate(lws(leader=leader), config, facts=facts)
    assert jsonpatch.apply_patch(lws(leader=leader), first.patch) == first.object
    assert mutate(copy.deepcopy(first.object), config, facts=facts).patch == []
    assert mutate(copy.deepcopy(first.object), config, old=first.object, facts=facts).patch == []
    if not leader:   # the original manifest applied again over the stored object
        again = mutate(lws(), config, old=first.object, facts=facts)
        assert again.object == first.object


# --- preview and the webhook ---------------------------------------------------------------------

@pytest.mark.parametrize("leader", [False, True], ids=["generated", "users"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_preview_prints_the_written_constraints_and_reasons_under_every_config(tmp_path, name, leader):
    path = tmp_path / "lws.yaml"
    path.write_text(yaml.safe_dump(lws(leader=leader)))
    args = ["preview", "-f", str(path), "-o", "diff"]
    if CONFIGS[name] is not None:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIGS[name]))
        args += ["--config", str(tmp_path / "config.yaml")]
    out, err = io.StringIO(), io.StringIO()
    assert main(args, stdout=out, stderr=err) == 0, err.getvalue()
    text = out.getvalue()
    result = mutate(lws(leader=leader), load_config(CONFIGS[name]))
    # written under every config but with both spreads off and no packing: then said unchanged, with the reasons
    assert text.splitlines()[0] == ("= LeaderWorkerSet serving/vllm: unchanged" if name == "both-off" else
                                    "--- a/LeaderWorkerSet serving/vllm")
    for reason in result.reasons:
        assert f"# {reason}" in text
    if "both-off" not in name:
        assert f"+          topologyKey: {ZONE}" in text or "topologyKey: example.com/zone" in text
    if "rack" in name:
        assert f"topologyKey: {RACK}" in text and GROUP_KEY in text


def test_a_leaderworkerset_review_is_answered_with_the_familys_json_patch_and_a_second_review_is_a_no_op():
    app = webhook.create_app(load_config(packed()), review_log=lambda line: None).test_client()

    def answer(review):
        response = app.post("/mutate", data=json.dumps(review), content_type="application/json")
        assert response.status_code == 200
        return response.get_json()["response"]

    obj = lws()
    response = answer(review_of(obj))
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    expected = mutate(obj, load_config(packed()), namespace="serving")
    assert patch_of(response) == expected.patch
    assert patched(obj, response) == expected.object
    assert [op["path"] for op in patch_of(response)] == [
        "/metadata/annotations", "/spec/leaderWorkerTemplate/leaderTemplate",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/affinity"]
    once = patched(obj, response)
    again = answer(review_of(once, "UPDATE", old=once))
    assert "patch" not in again and "patchType" not in again
    # a malformed one is a clear error admitted unchanged (failureMode open), never a 500
    bad = lws(size=0)
    failed = answer(review_of(bad))
    assert failed["allowed"] is True and "patch" not in failed
    assert any("spec.leaderWorkerTemplate.size" in w for w in failed.get("warnings", []))


# --- no crash: a malformed LeaderWorkerSet is a PolicyError naming its fields, never another exception ---------

JUNK = st.one_of(st.none(), st.integers(-3, 5), st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.sampled_from(["spec", "metadata", "labels", "x"]), st.integers(), max_size=2))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from([("spec", "replicas"), ("spec", "startupPolicy"), ("spec", "leaderWorkerTemplate"),
                              ("spec", "leaderWorkerTemplate", "size"),
                              ("spec", "leaderWorkerTemplate", "workerTemplate"),
                              ("spec", "leaderWorkerTemplate", "leaderTemplate"),
                              ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "affinity"),
                              ("spec", "leaderWorkerTemplate", "workerTemplate", "metadata"),
                              ("metadata", "annotations"), ("metadata", "name")]),
       value=JUNK, packing=st.booleans(), update=st.booleans())
def test_any_malformed_field_is_a_policy_error_or_a_patch_that_applies(field, value, packing, update):
    obj = lws()
    node = obj
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    config = load_config(packed() if packing else None)
    try:
        r = mutate(copy.deepcopy(obj), config, old=lws() if update else None)
    except PolicyError as err:
        assert err.errors and all(e.field for e in err.errors)
        return
    assert jsonpatch.apply_patch(obj, r.patch) == r.object
