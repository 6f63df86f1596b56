"""Rule W7: the watches hold only what the planners read, and the planners cannot tell.

Every planner (policylib.plan.PLANNERS), the facts and the controller's own reads run on the objects as
the API server returns them and on their projections (policylib.projection.project); the writes (every
field: patch, reasons, resourceVersion, created objects), the facts and the controller's decisions must
be identical. A planner that starts reading a field the projection drops fails here: the projection hands
it the field's absence, and the plan differs (the last test proves this check catches a dropped field).
"""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bench.scale_objects import LAST_APPLIED, deployment_as_stored, hpa_as_stored
from policylib import load_config, mutate
from policylib import projection as projection_module
from policylib.facts import ClusterFacts
from policylib.plan import PLANNERS, admitted_without_policy, plan
from policylib.projection import project
from tests.helpers import legacy_anti_affinity
from webhook.cache import hpa_targets, slim_hpa
from webhook.controller import controller_owners, event_keys, rollout_complete

SAMPLES = Path(__file__).resolve().parent.parent / "webhook" / "samples"
CONFIGS = [
    None,
    {"hostTopologySpread": {"reconcileDrift": True}},
    {"hostTopologySpread": {"reconcileDrift": True, "rewrite": "OnNextRollout"}},
    {"hostTopologySpread": {"reconcileDrift": True, "whenUnsatisfiable": "DoNotSchedule"},
     "zoneTopologySpread": {"enabled": True}},
    {"gang": {"enabled": True, "method": "podgroup", "scheduler": "scheduler-plugins"}},
    {"gang": {"enabled": True, "method": "workload", "scheduler": "kube-scheduler"}},
]


def server_fields(obj: dict[str, Any], i: int) -> dict[str, Any]:
    """What the API server adds: uid, resourceVersion, managedFields, a status."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta.update(uid=f"uid-{i}", resourceVersion=str(100 + i), generation=2,
                managedFields=[{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}])
    obj["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    return obj


def legacy(i: int) -> dict[str, Any]:
    """A realistic Deployment stored with the pod anti-affinity policylib replaces (reconcileDrift rewrites
    it: a rollout), half of them with kubectl's last-applied annotation."""
    d = deployment_as_stored(i)
    d["spec"]["template"]["spec"]["affinity"] = legacy_anti_affinity({"app": d["metadata"]["name"]})
    return d


def jobs() -> list[dict[str, Any]]:
    """The Kubeflow samples, as the webhook stored them under each gang method, with server fields."""
    out = []
    for i, name in enumerate(("pytorchjob-create.json", "tfjob-create.json", "mpijob-create.json")):
        job = json.loads((SAMPLES / name).read_text())["request"]["object"]
        for config in (CONFIGS[4], CONFIGS[5]):
            stored = mutate(job, config).object
            stored["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(job)
            out.append(server_fields(stored, 1000 + 10 * i + len(out)))
    return out


def cluster() -> list[dict[str, Any]]:
    """Deployments stored with and without policylib, legacy ones, HPAs whose minimum moved since, and
    the gang samples with a PodGroup one of them already owns (minMember out of date)."""
    objs: list[dict[str, Any]] = [deployment_as_stored(i, compliant=i % 2 == 0) for i in range(24)]
    objs += [legacy(i) for i in range(100, 108)]
    hpas = [hpa_as_stored(i) for i in range(0, 24, 4)] + [hpa_as_stored(i) for i in (100, 101)]
    for h in hpas[::2]:
        h["spec"]["minReplicas"] = 6   # the recorded count differs now: a rewrite
    objs += hpas + jobs()
    owner = next(o for o in objs if o.get("kind") == "PyTorchJob")
    objs.append(server_fields({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                               "metadata": {"name": owner["metadata"]["name"], "namespace": owner["metadata"]["namespace"],
                                            "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                                                 "name": owner["metadata"]["name"],
                                                                 "uid": owner["metadata"]["uid"], "controller": True}]},
                               "spec": {"minMember": 1}}, 2000))
    return objs


def outcomes(objs: list[dict[str, Any]], config: Any) -> dict[str, Any]:
    """Everything the controller and the webhook's cache decide from ``objs``."""
    config = load_config(config)
    facts = ClusterFacts.from_objects(objs)
    writes = plan(objs, config, planners=PLANNERS, facts=facts)
    deployments = [o for o in objs if o.get("kind") == "Deployment"]
    hpas = [o for o in objs if o.get("kind") == "HorizontalPodAutoscaler"]
    return {
        "writes": [dataclasses.asdict(w) for w in writes],
        "facts": [sorted(facts.hpas), sorted(facts.podgroups), sorted(facts.native)],
        "rollout_complete": [rollout_complete(d) for d in deployments],
        "unrecorded": [admitted_without_policy(d, config) for d in deployments],
        "event_keys": [event_keys(t, o, o) for o in objs for t in ("ADDED", "DELETED")],
        "owners": [controller_owners(o) for o in objs],
        "hpa_targets": [hpa_targets(h) for h in hpas],
        "slim": [slim_hpa(h) for h in hpas],
    }


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: json.dumps(c) if c else "defaults")
def test_planners_decide_the_same_on_projected_objects(config):
    whole = cluster()
    projected = [project(o) for o in copy.deepcopy(whole)]
    expected = outcomes(whole, config)
    assert expected["writes"], "the cluster must give the planners something to write"
    assert outcomes(projected, config) == expected


def test_the_cluster_exercises_rollouts_metadata_writes_creates_and_the_annotation():
    whole = cluster()
    writes = plan(whole, load_config(CONFIGS[1]), planners=PLANNERS)
    assert any(w.rollout for w in writes) and any(w.action == "patch" and not w.rollout for w in writes)
    gang = plan(whole, load_config(CONFIGS[4]), planners=PLANNERS)
    assert {w.action for w in gang if w.kind == "PodGroup"} == {"create", "patch"}
    # a patch made from a projection whose last-applied annotation was dropped adds to the annotations,
    # never replaces the map (which would delete kubectl's annotation on the server)
    annotated = [w for w in writes if w.name == "app-000101"]
    assert annotated and all(op["path"] != "/metadata/annotations" for w in annotated for op in w.patch)


def test_projection_drops_what_is_not_read():
    d = deployment_as_stored(1)
    p = project(d)
    assert "managedFields" not in p["metadata"] and p["metadata"]["annotations"] == {LAST_APPLIED: ""}
    assert p["spec"]["template"]["spec"] == {} and set(p["status"]) == {"observedGeneration", "replicas",
                                                                       "updatedReplicas", "availableReplicas"}
    assert len(json.dumps(p)) * 8 < len(json.dumps(d))
    assert d["metadata"]["managedFields"] and d["metadata"]["annotations"][LAST_APPLIED]   # the input is untouched


def test_malformed_values_are_kept_as_the_server_sent_them():
    d = deployment_as_stored(2)
    d["spec"]["template"] = ["not", "a", "mapping"]
    assert project(d)["spec"]["template"] == ["not", "a", "mapping"]
    assert project("junk") == "junk"


def test_a_projection_that_drops_a_field_a_planner_reads_fails_the_check(monkeypatch):
    fields = copy.deepcopy(projection_module.FIELDS)
    del fields[("apps/v1", "Deployment")]["spec"]["template"]["spec"]["affinity"]   # type: ignore[index]
    monkeypatch.setattr(projection_module, "FIELDS", fields)
    whole = cluster()
    projected = [project(o) for o in copy.deepcopy(whole)]
    assert outcomes(projected, CONFIGS[1]) != outcomes(whole, CONFIGS[1])


def test_the_scope_reads_the_same_of_projected_configurations_and_namespaces():
    """Rules W5, W7: the controller's scope is built from its projected webhook configuration and Namespaces:
    the same scope, and the same Namespace labels, as from the objects the API server returns."""
    import yaml

    from policylib.scope import namespace_labels, scope_fields, scope_from_configuration
    root = Path(__file__).resolve().parent.parent
    configuration = yaml.safe_load((root / "manifests/base/mutatingwebhookconfiguration.yaml").read_text())
    configuration["metadata"].update(uid="u", resourceVersion="7", managedFields=[{"manager": "kubectl"}])
    for hook in configuration["webhooks"]:
        hook["clientConfig"]["caBundle"] = "Q0E="
    namespaces = [{"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": n, "uid": n, "resourceVersion": "1", "labels": labels,
                                "annotations": {"a": "b"}, "managedFields": [{"manager": "kubectl"}]},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
                  for n, labels in (("ml", {"team": "a"}), ("optout", {"policylib.io/skip": "true"}))]
    projected = project(configuration)
    assert scope_from_configuration(projected) == scope_from_configuration(configuration)
    assert scope_fields(projected) == scope_fields(configuration)
    assert namespace_labels([project(n) for n in namespaces]) == namespace_labels(namespaces)
    assert "managedFields" not in projected["metadata"] and "status" not in project(namespaces[0])
