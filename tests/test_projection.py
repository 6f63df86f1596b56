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
from policylib.projection import project, project_simulated
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


# --- check --cluster and simulate --cluster: what the scheduler's replay reads too -------------------

def node(name: str, zone: str, cpu: str, memory: str = "512Gi", **more: Any) -> dict[str, Any]:
    """A Node as the API server returns it (its status's images and conditions, which nothing reads)."""
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone, **more.pop("labels", {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels,
                         "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]},
            "spec": more.pop("spec", {}),
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "nodeInfo": {"kubeletVersion": "v1.36.0"},
                       "images": [{"names": [f"registry.example/app:{i}"], "sizeBytes": 10 ** 7} for i in range(3)]}}


SMALL = {"taints": [{"key": "pool", "value": "small", "effect": "NoSchedule"}]}
NODES = [node("a1", "a", "2", "8Gi", labels={"pool": "small"}, spec=SMALL),
         node("a2", "a", "2", "8Gi", labels={"pool": "small"}, spec=SMALL),
         node("b1", "b", "128"), node("b2", "b", "128"),
         node("c1", "c", "128", spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}),
         node("c2", "c", "128", spec={"unschedulable": True})]


def scheduled(i: int, name: str, replicas: int, **pod_spec: Any) -> dict[str, Any]:
    """A Deployment stored without policylib whose pod spec uses ``pod_spec`` (beside two containers
    requesting 500m each, with probes, environment and mounts nobody replays)."""
    d = deployment_as_stored(i)
    d["metadata"]["name"] = name
    d["spec"]["replicas"] = replicas
    for labels in (d["metadata"]["labels"], d["spec"]["selector"]["matchLabels"],
                   d["spec"]["template"]["metadata"]["labels"]):
        labels["app"] = name
    spec = d["spec"]["template"]["spec"]
    for c in spec["containers"]:
        c["resources"] = {"requests": {"cpu": "500m", "memory": "256Mi"}}
    spec.update(pod_spec)
    return d


def sidecar(cpu: str) -> dict[str, Any]:
    return {"name": "proxy", "image": "registry.example/proxy:1", "restartPolicy": "Always",
            "env": [{"name": "A", "value": "b"}], "resources": {"requests": {"cpu": cpu}}}


def replayed_cluster() -> list[dict[str, Any]]:
    """:func:`cluster`, and Deployments using what kube-scheduler's replay reads of a pod spec (requests of
    containers, sidecars, init containers, the pod and its overhead; host ports; node selectors, affinity and
    tolerations; what it does not model: volumes, DRA claims, priority; what it does not place: another
    scheduler, a node name, scheduling gates), with Pods bound to the Nodes."""
    pvc = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}, {"name": "tmp", "emptyDir": {}}]
    objs = cluster() + [
        scheduled(201, "small-pool", 6, nodeSelector={"pool": "small"}, initContainers=[sidecar("300m")],
                  tolerations=[{"key": "pool", "operator": "Exists"}]),
        scheduled(202, "host-ports", 5),
        scheduled(203, "init", 2, initContainers=[{"name": "init", "image": "busybox",
                                                   "resources": {"requests": {"cpu": "130"}}}]),
        scheduled(204, "pod-level", 4, resources={"requests": {"cpu": "100"}}),
        scheduled(205, "overhead", 2, overhead={"cpu": "130"}),
        scheduled(206, "gpu", 3, tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                          "effect": "NoSchedule"}],
                  affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                      "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone",
                                                                   "operator": "In", "values": ["c"]}]}]}}}),
        scheduled(207, "volumes", 3, volumes=pvc),
        scheduled(208, "claims", 3, resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu"}]),
        scheduled(209, "priority", 3, priorityClassName="high"),
        scheduled(210, "other-scheduler", 3, schedulerName="volcano"),
        scheduled(211, "pinned", 3, nodeName="b1"),
        scheduled(212, "gated", 3, schedulingGates=[{"name": "example.com/quota"}]),
    ]
    host_ports = next(o for o in objs if o["metadata"]["name"] == "host-ports")
    host_ports["spec"]["template"]["spec"]["containers"][0]["ports"].append(
        {"name": "metrics", "containerPort": 9100, "hostPort": 9100, "hostIP": "0.0.0.0", "protocol": "TCP"})
    managed = next(o for o in objs if o.get("kind") == "Deployment" and "spread-effective-replicas" in
                   str(o["metadata"].get("annotations")))
    labels = managed["spec"]["template"]["metadata"]["labels"]
    for i, where in enumerate(("a1", "a1", "b1")):
        objs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{managed['metadata']['name']}-abc-{i}", "uid": f"pod-{i}",
                                  "namespace": managed["metadata"]["namespace"],
                                  "labels": {**labels, "pod-template-hash": "abc"},
                                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                                       "name": f"{managed['metadata']['name']}-abc", "uid": "rs"}]},
                     "spec": {"nodeName": where, "containers": [{"name": "app", "image": "registry.example/app:1",
                                                                 "resources": {"requests": {"cpu": "1"}}}]},
                     "status": {"phase": "Running"}})
    return objs


REPLAY_CONFIGS = CONFIGS + [
    {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 2},
     "zoneTopologySpread": {"enabled": True}},
    {"hostTopologySpread": {"enabled": False}},
]


def replayed(objs: list[dict[str, Any]], config: Any) -> dict[str, Any]:
    """Everything ``check --cluster`` and ``simulate`` report from ``objs`` on :data:`NODES`."""
    from policylib.check import check
    from policylib.scaledown import cluster_report
    from policylib.simulate import simulate
    violations, notes = cluster_report(objs, NODES)
    return {"check": [f.as_dict() for f in check(config, NODES, objs, served_apis=[])],
            "simulate": [p.as_dict() for p in simulate(objs, NODES, config)],
            "report": [[v.message() for v in violations], notes]}


@pytest.mark.parametrize("config", REPLAY_CONFIGS, ids=lambda c: json.dumps(c) if c else "defaults")
def test_check_and_simulate_report_the_same_on_the_simulated_projection(config):
    """Rule W7: ``check --cluster`` holds :func:`project_simulated` of each object: every finding, every
    placement (its reasons and what is not modelled) and the spread report are those of the whole objects."""
    whole = replayed_cluster()
    projected = [project_simulated(o) for o in copy.deepcopy(whole)]
    assert replayed(projected, config) == replayed(whole, config)


def test_the_replayed_cluster_exercises_requests_ports_and_what_is_not_modelled():
    found = replayed(replayed_cluster(), REPLAY_CONFIGS[-2])
    by_name = {p["name"]: p for p in found["simulate"]}
    assert [by_name[n]["pending"] for n in ("small-pool", "host-ports", "init", "pod-level", "overhead")] == [5, 3, 2, 3, 2]
    reasons = " ".join(r for p in found["simulate"] for r in p["reasons"])
    for words in ("persistent volumes", "DRA resource claims", "priority and preemption", "schedulerName 'volcano'",
                  "spec.nodeName 'b1'", "SchedulingGated"):
        assert words in reasons
    assert any(f["key"] == "hostTopologySpread.minDomains" and "would stay Pending" in f["message"]
               for f in found["check"])


@pytest.mark.parametrize("path", [("containers",), ("initContainers",), ("resources",), ("overhead",), ("volumes",),
                                  ("resourceClaims",), ("priorityClassName",), ("schedulerName",), ("nodeName",),
                                  ("schedulingGates",), ("tolerations",), ("containers", "ports"),
                                  ("initContainers", "restartPolicy")])
def test_a_simulated_projection_that_drops_a_field_the_replay_reads_fails_the_check(monkeypatch, path):
    fields = copy.deepcopy(projection_module.SIMULATED)
    spec = fields[("apps/v1", "Deployment")]["spec"]["template"]["spec"]   # type: ignore[index]
    if len(path) == 1:
        del spec[path[0]]   # type: ignore[union-attr]
    else:
        del spec[path[0]].fields[path[1]]   # type: ignore[union-attr]
    monkeypatch.setattr(projection_module, "SIMULATED", fields)
    whole = replayed_cluster()
    projected = [project_simulated(o) for o in copy.deepcopy(whole)]
    assert replayed(projected, REPLAY_CONFIGS[-2]) != replayed(whole, REPLAY_CONFIGS[-2])


def test_the_simulated_projection_keeps_what_the_replay_reads_and_drops_the_rest():
    d = deployment_as_stored(1)
    p = project_simulated(d)
    assert p["spec"]["template"]["spec"] == {
        "containers": [{"resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                      "limits": {"cpu": "1", "memory": "512Mi"}},
                        "ports": [{"protocol": "TCP"}]}] * 2,
        "volumes": [{}], "schedulerName": "default-scheduler"}
    assert p["metadata"]["annotations"] == {LAST_APPLIED: ""} and "managedFields" not in p["metadata"]
    assert {k: v for k, v in p.items() if k != "spec"} == {k: v for k, v in project(d).items() if k != "spec"}
    assert d["metadata"]["managedFields"] and d["spec"]["template"]["spec"]["containers"][0]["env"]   # untouched
    # the same string in two projections is one object
    a, b = project_simulated(deployment_as_stored(2)), project_simulated(deployment_as_stored(9))
    assert a["metadata"]["labels"]["tier"] is b["metadata"]["labels"]["tier"]
    # a kind the replay does not list is stripped, as before: a Pod keeps its containers
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "managedFields": [{}]},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert project_simulated(pod) == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                      "spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_a_list_the_simulated_projection_expects_is_kept_whole_when_malformed():
    d = deployment_as_stored(3)
    spec = d["spec"]["template"]["spec"]
    spec["containers"] = {"not": "a list"}
    spec["initContainers"] = ["not a mapping", {"name": "init", "image": "i", "resources": {}}]
    p = project_simulated(d)["spec"]["template"]["spec"]
    assert p["containers"] == {"not": "a list"} and p["initContainers"] == ["not a mapping", {"resources": {}}]
