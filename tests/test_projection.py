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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from bench.scale_objects import LAST_APPLIED, deployment_as_stored, hpa_as_stored
from policylib import load_config, mutate
from policylib import projection as projection_module
from policylib.facts import ClusterFacts, hpa_targets
from policylib.plan import PLANNERS, admitted_without_policy, plan
from policylib.projection import project, project_simulated
from tests.helpers import legacy_anti_affinity
from webhook.admission.hpacache import slim_hpa
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


def statefulsets() -> list[dict[str, Any]]:
    """StatefulSets as stored (rule A4): a legacy one, one the webhook wrote whose HPA minimum moved since, one a
    LeaderWorkerSet owns (rule A5) and one with claim templates, OnDelete and an ordinal start (rule A1)."""
    out = []
    for i, name in enumerate(("db-legacy", "db-hpa", "db-owned", "db-claims")):
        s = legacy(300 + i) if i in (0, 2) else deployment_as_stored(300 + i, compliant=True)
        s["kind"] = "StatefulSet"
        s["metadata"]["name"] = name
        s["spec"]["serviceName"] = name
        out.append(s)
    out[1] = server_fields(mutate(dict(out[1], status={}), CONFIGS[0]).object, 301)
    out[2]["metadata"]["ownerReferences"] = [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                              "name": "vllm", "uid": "u-lws", "controller": True}]
    out[3]["spec"].update(updateStrategy={"type": "OnDelete"}, ordinals={"start": 2}, podManagementPolicy="Parallel",
                          volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}])
    target = hpa_as_stored(301)
    target["spec"]["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db-hpa"}
    target["spec"]["minReplicas"] = 7
    return out + [target]


def cluster() -> list[dict[str, Any]]:
    """Deployments stored with and without policylib, legacy ones, HPAs whose minimum moved since, and
    the gang samples with a PodGroup one of them already owns (minMember out of date)."""
    objs: list[dict[str, Any]] = [deployment_as_stored(i, compliant=i % 2 == 0) for i in range(24)]
    objs += [legacy(i) for i in range(100, 108)]
    hpas = [hpa_as_stored(i) for i in range(0, 24, 4)] + [hpa_as_stored(i) for i in (100, 101)]
    for h in hpas[::2]:
        h["spec"]["minReplicas"] = 6   # the recorded count differs now: a rewrite
    objs += hpas + jobs() + statefulsets()
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
    deployments = [o for o in objs if o.get("kind") in ("Deployment", "StatefulSet")]
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
    # StatefulSets (rules A4, A9): the HPA's new minimum is recorded as pending on one, never a restart of its pods
    # even once the host spread is enforced; the one a LeaderWorkerSet owns gets nothing (rule A5)
    enforced = plan(whole, load_config(CONFIGS[3]), planners=PLANNERS)
    assert [(w.name, w.action, w.rollout, bool(w.pending)) for w in enforced
            if w.kind == "StatefulSet" and w.action != "none"] == [("db-hpa", "patch", False, True)]
    assert not [w for w in enforced if w.name == "db-owned"]
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
                       "capacity": {"cpu": str(int(cpu) + 1), "memory": memory, "pods": "110"},
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
    # without the controller's costs, the ReplicaSet controller removes them in this order (rule S26): the lowest
    # deletion cost (p3); of two on one Node (p0, p4 on a1, p2, p5 on b2) more restarts (p0), then the younger
    # (p5, then p2 and p4 by uid); p1 last
    managed = managed_deployment(objs)
    for i, (where, restarts, cost, created) in enumerate((("a1", 4, None, OLD), ("b1", 0, None, OLD),
                                                          ("b2", 0, None, YOUNG), ("c1", 0, "-5", OLD),
                                                          ("a1", 0, None, YOUNG))):
        objs.append(pod_of(managed, i, where, restarts=restarts, cost=cost, created=created, manager="descheduler"))
    # the controller's cost (rule S25): not counted without it; the youngest
    objs.append(pod_of(managed, 5, "b2", cost="100", created="2026-12-01T23:00:00Z"))
    small = next(o for o in objs if o["metadata"]["name"] == "small-pool")
    objs.append(pod_of(small, 9, "", phase="Pending", scheduled={
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/6 nodes are available: 4 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu."}))
    objs += [scheduler_pod("volcano-scheduler-7d9", "volcanosh/vc-scheduler:v1.14.1"),
             scheduler_pod("gang-0", "registry.example/koordinator-sh/koord-scheduler:v1.6.0")]
    # rules A7, A8: db-claims' ordinals 2 and 3 bound to volumes in zone c (a CSI driver's own key, as the API
    # server stores claims and volumes: status, managedFields)
    claims = next(o for o in objs if o["metadata"]["name"] == "db-claims")
    for ordinal in (2, 3):
        objs.append(server_fields({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                   "metadata": {"name": f"data-db-claims-{ordinal}",
                                                "namespace": claims["metadata"]["namespace"]},
                                   "spec": {"volumeName": f"pv-{ordinal}", "accessModes": ["ReadWriteOnce"],
                                            "resources": {"requests": {"storage": "1Gi"}}}}, 400 + ordinal))
        objs.append(server_fields({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{ordinal}"},
                                   "spec": {"capacity": {"storage": "1Gi"}, "csi": {"driver": "x", "volumeHandle": "h"},
                                            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                                {"key": "topology.kubernetes.io/zone", "operator": "In",
                                                 "values": ["c"]}]}]}}}}, 410 + ordinal))
    return objs


def managed_deployment(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objs if o.get("kind") == "Deployment" and "spread-effective-replicas" in
                str(o["metadata"].get("annotations")))


OLD, YOUNG = "2026-11-01T00:00:00Z", "2026-12-01T12:00:00Z"


def pod_of(owner: dict[str, Any], i: int, node_name: str, phase: str = "Running", restarts: int = 0,
           cost: str | None = None, created: str = OLD, scheduled: dict[str, Any] | None = None,
           manager: str | None = None) -> dict[str, Any]:
    """A Pod of ``owner``'s ReplicaSet as the API server returns it: ``managedFields`` (whose cost it is),
    its containers whole, a status with conditions, container statuses and more that nothing reads."""
    from policylib.scaledown import DELETION_COST, FIELD_MANAGER
    meta = owner["metadata"]
    annotations = {DELETION_COST: cost} if cost else {}
    template = owner["spec"]["template"]
    ready = phase == "Running"
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": OLD}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta['name']}-abc-{i}", "uid": f"pod-{meta['name']}-{i}", "namespace": meta["namespace"],
                         "resourceVersion": str(9000 + i), "creationTimestamp": created, "generateName": f"{meta['name']}-abc-",
                         "labels": {**template["metadata"]["labels"], "pod-template-hash": "abc"},
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                              "name": f"{meta['name']}-abc", "uid": f"rs-{meta['name']}"}],
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                            "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
                         + ([{"manager": manager or FIELD_MANAGER, "operation": "Update",
                              "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{DELETION_COST}": {}}}}}] if cost else [])},
            "spec": {**copy.deepcopy(template["spec"]), "nodeName": node_name, "serviceAccountName": "default"},
            "status": {"phase": phase, "conditions": conditions + ([scheduled] if scheduled else []),
                       "hostIP": "10.0.0.1", "podIP": f"10.1.0.{i}", "qosClass": "Burstable",
                       "containerStatuses": [{"name": c["name"], "restartCount": restarts, "image": c["image"],
                                              "imageID": "sha256:0", "ready": ready, "started": True,
                                              "state": {"running": {"startedAt": created}}}
                                             for c in template["spec"]["containers"]]}}


def scheduler_pod(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "kube-system", "uid": f"uid-{name}",
                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"nodeName": "b2", "containers": [{"name": "scheduler", "image": image,
                                                       "args": ["--config=/etc/scheduler.yaml"]}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "scheduler", "restartCount": 0}]}}


REPLAY_CONFIGS = CONFIGS + [
    {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "hardMinReplicas": 2},
     "zoneTopologySpread": {"enabled": True}},
    {"hostTopologySpread": {"enabled": False}},
]


def replayed(objs: list[dict[str, Any]], config: Any, nodes: list[dict[str, Any]] = NODES) -> dict[str, Any]:
    """Everything ``check --cluster``, ``plan --cluster``'s spread report and ``simulate`` (``--scale`` too)
    report from ``objs`` on ``nodes``."""
    from policylib.check import check
    from policylib.scaledown import cluster_report, scale_report
    from policylib.simulate import simulate
    violations, notes = cluster_report(objs, nodes)
    managed = managed_deployment(objs)["metadata"]
    scale = [f"{managed['namespace']}/{managed['name']}={n}" for n in (1, 2, 3, 4)]
    return {"check": [f.as_dict() for f in check(config, nodes, objs, served_apis=["scheduling.x-k8s.io/v1alpha1"])],
            "simulate": [p.as_dict() for p in simulate(objs, nodes, config)],
            "report": [[v.message() for v in violations], notes],
            "scale": scale_report(scale, objs, nodes, "topology.kubernetes.io/zone", "json",
                                  now=datetime(2026, 12, 2, tzinfo=timezone.utc))}


def held(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``check --cluster`` and ``simulate --cluster`` hold of ``objs``."""
    from policylib.cli.cluster import strip_pod
    return [strip_pod(o) if o.get("kind") == "Pod" else project_simulated(o) for o in copy.deepcopy(objs)]


@pytest.mark.parametrize("config", REPLAY_CONFIGS, ids=lambda c: json.dumps(c) if c else "defaults")
def test_check_and_simulate_report_the_same_on_the_simulated_projection(config):
    """Rule W7: ``check --cluster`` holds :func:`project_simulated` of each object (and each Pod's cost owner):
    every finding, every placement (its reasons and what is not modelled), the spread report and the
    ReplicaSet controller's victims are those of the whole objects."""
    whole = replayed_cluster()
    assert replayed(held(whole), config, held(NODES)) == replayed(whole, config)


def test_the_replayed_cluster_exercises_requests_ports_and_what_is_not_modelled():
    found = replayed(replayed_cluster(), REPLAY_CONFIGS[-2])
    messages = " ".join(f["message"] for f in found["check"])
    for words in ("small-pool: 1 Pod(s) Pending now", "volcano (Pod kube-system/volcano-scheduler-7d9 running)",
                  "koordinator (Pod kube-system/gang-0 running)"):
        assert words in messages
    assert found["report"][0]
    name = managed_deployment(replayed_cluster())["metadata"]["name"]
    removed = [r["withoutCosts"]["removed"] for r in json.loads(found["scale"])]
    assert removed == [[f"{name}-abc-{i}" for i in sorted(order)]
                       for order in ((3, 0, 5, 2, 4), (3, 0, 5, 2), (3, 0, 5), (3, 0))]
    by_name = {p["name"]: p for p in found["simulate"]}
    assert [by_name[n]["pending"] for n in ("small-pool", "host-ports", "init", "pod-level", "overhead")] == [5, 3, 2, 4, 2]
    reasons = " ".join(r for p in found["simulate"] for r in p["reasons"])
    for words in ("persistent volumes", "DRA resource claims", "priority and preemption", "schedulerName 'volcano'",
                  "spec.nodeName 'b1'", "SchedulingGated"):
        assert words in reasons
    assert any(f["key"] == "hostTopologySpread.minDomains" and "would stay Pending" in f["message"]
               for f in found["check"])
    # rules A7, A8: the claims and volumes are read through the projection too
    assert [f["message"].split(":")[0] for f in found["check"] if f["key"] == "volume-pinned-skew"] == [
        "statefulset scale-03/db-claims"]
    assert "2 of 2 ordinal(s) kept to the Nodes their bound PersistentVolumes allow" in reasons


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
    assert replayed(held(whole), REPLAY_CONFIGS[-2], held(NODES)) != replayed(whole, REPLAY_CONFIGS[-2])


@pytest.mark.parametrize("kind,path", [
    ("Pod", ("spec", "containers")), ("Pod", ("spec", "nodeName")), ("Pod", ("status", "conditions")),
    ("Pod", ("status", "containerStatuses")), ("Pod", ("metadata", "creationTimestamp")),
    ("Pod", ("metadata", "annotations")), ("Node", ("spec",)), ("Node", ("status", "allocatable")),
    ("Node", ("metadata", "labels"))])
def test_a_simulated_projection_of_pods_or_nodes_that_drops_a_field_read_fails_the_check(monkeypatch, kind, path):
    fields = copy.deepcopy(projection_module.SIMULATED)
    parent = fields[("v1", kind)]
    for key in path[:-1]:
        parent = parent[key]   # type: ignore[assignment]
    del parent[path[-1]]
    monkeypatch.setattr(projection_module, "SIMULATED", fields)
    whole = replayed_cluster()
    assert replayed(held(whole), REPLAY_CONFIGS[-2], held(NODES)) != replayed(whole, REPLAY_CONFIGS[-2])


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
    # a kind the replay does not list is stripped, as before
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p", "managedFields": [{}]},
           "spec": {"pytorchReplicaSpecs": {}}, "status": {"conditions": []}}
    assert project_simulated(job) == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
                                      "spec": {"pytorchReplicaSpecs": {}}, "status": {"conditions": []}}
    assert project_simulated(NODES[0]) == {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "a1", "uid": "uid-a1", "labels": NODES[0]["metadata"]["labels"]}, "spec": SMALL,
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                   "capacity": {"cpu": "3", "memory": "8Gi", "pods": "110"}, "nodeInfo": {"kubeletVersion": "v1.36.0"}}}


def test_a_list_the_simulated_projection_expects_is_kept_whole_when_malformed():
    d = deployment_as_stored(3)
    spec = d["spec"]["template"]["spec"]
    spec["containers"] = {"not": "a list"}
    spec["initContainers"] = ["not a mapping", {"name": "init", "image": "i", "resources": {}}]
    p = project_simulated(d)["spec"]["template"]["spec"]
    assert p["containers"] == {"not": "a list"} and p["initContainers"] == ["not a mapping", {"resources": {}}]
