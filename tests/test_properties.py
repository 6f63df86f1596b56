"""Properties over generated Deployments and settings: idempotence, patch fidelity, validity."""
import copy

import jsonpatch
import kubernetes_validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policylib import ClusterFacts, load_config, mutate, validate_topology_spread_constraints
from tests.helpers import deployment, hpa

K8S_VERSION = "1.33"  # MatchLabelKeys and nodeTaintsPolicy are GA/beta-on; any shipped >= 1.27 works

label_values = st.sampled_from(["web", "api", "x-1", "Model.A"])
topology_keys = st.sampled_from(["topology.kubernetes.io/zone", "kubernetes.io/hostname", "example.com/rack",
                                 "example.com/gpu-island"])


@st.composite
def configs(draw):
    mlk = draw(st.sampled_from(["pod-template-hash", "none", ["pod-template-hash", "example.com/rev"]]))
    return load_config({
        "zoneTopologySpread": {"enabled": draw(st.booleans()), "maxSkew": draw(st.integers(1, 4)),
                               "matchLabelKeys": mlk},
        "hostTopologySpread": {"enabled": draw(st.booleans()),
                               "whenUnsatisfiable": draw(st.sampled_from(["ScheduleAnyway", "DoNotSchedule"])),
                               "maxSkew": draw(st.integers(1, 4)), "minDomains": draw(st.integers(1, 5)),
                               "hardMinReplicas": draw(st.integers(1, 6)),
                               "enableReplicaDerivedMaxSkewRule": draw(st.booleans()), "matchLabelKeys": mlk},
        "removePodAntiAffinity": draw(st.sampled_from(["own", "all"])),
    })


@st.composite
def deployments(draw):
    labels = {"app": draw(label_values)}
    if draw(st.booleans()):
        labels["pod-template-hash"] = "5d8f"
    if draw(st.booleans()):
        labels["tier"] = draw(label_values)
    selector: dict = {"matchLabels": dict(labels)}
    if draw(st.booleans()):
        selector["matchExpressions"] = [{"key": "tier", "operator": draw(st.sampled_from(["Exists", "DoesNotExist"]))}]
    existing = []
    for key in draw(st.lists(topology_keys, unique=True, max_size=3)):
        c = {"maxSkew": draw(st.integers(1, 3)), "topologyKey": key,
             "whenUnsatisfiable": draw(st.sampled_from(["ScheduleAnyway", "DoNotSchedule"])),
             "labelSelector": {"matchLabels": {"app": labels["app"]}}}
        existing.append(c)
    spec: dict = {"containers": [{"name": "app", "image": "img"}]}
    if existing:
        spec["topologySpreadConstraints"] = existing
    terms = []
    if draw(st.booleans()):
        terms.append({"labelSelector": {"matchLabels": {"app": labels["app"]}}, "topologyKey": "kubernetes.io/hostname"})
    if draw(st.booleans()):
        terms.append({"labelSelector": {"matchLabels": {"app": "other"}}, "topologyKey": "kubernetes.io/hostname"})
    if terms:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
    replicas = draw(st.one_of(st.none(), st.integers(0, 40)))
    d = deployment(replicas=replicas, labels=labels, selector=selector, pod_spec=spec)
    facts = ClusterFacts.from_objects([hpa("web", draw(st.integers(1, 20)))] if draw(st.booleans()) else [])
    d["metadata"]["name"] = "web"
    return d, facts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments(), configs())
def test_mutation_is_idempotent_pure_and_its_patch_reproduces_it(case, config):
    d, facts = case
    snapshot = copy.deepcopy(d)
    r = mutate(d, config, facts=facts)
    assert d == snapshot
    assert jsonpatch.apply_patch(d, r.patch) == r.object
    assert mutate(r.object, config, facts=facts).patch == []
    assert mutate(copy.deepcopy(r.object), config, old=r.object, facts=facts).patch == []
    assert validate_topology_spread_constraints(
        r.object["spec"]["template"]["spec"].get("topologySpreadConstraints")) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments(), configs())
def test_every_emitted_deployment_passes_the_api_schema_strictly(case, config):
    d, facts = case
    r = mutate(d, config, facts=facts)
    kubernetes_validate.validate(r.object, K8S_VERSION, strict=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments(), configs(), configs(), st.integers(0, 40))
def test_updates_never_roll_on_a_settings_change_and_count_changes_converge(case, before, after, new_count):
    d, facts = case
    old = mutate(d, before, facts=facts).object
    same = mutate(copy.deepcopy(old), after, old=old, facts=facts)
    assert same.patch == [] or all(not op["path"].startswith("/spec/template") for op in same.patch)
    changed = copy.deepcopy(old)
    changed["spec"]["replicas"] = new_count
    r = mutate(changed, after, old=old, facts=facts)
    assert jsonpatch.apply_patch(changed, r.patch) == r.object
    assert mutate(copy.deepcopy(r.object), after, old=r.object, facts=facts).patch == []
    if not facts.hpas and new_count != (d["spec"].get("replicas") if d["spec"].get("replicas") is not None else 1):
        assert mutate(r.object, after, facts=facts).patch == []  # a count change wrote the current settings
    assert validate_topology_spread_constraints(
        r.object["spec"]["template"]["spec"].get("topologySpreadConstraints")) == []
