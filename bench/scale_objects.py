"""Realistic objects for the scale benchmark and the scale tests: Deployments as a user's ``kubectl apply``
leaves them in the API server (two containers with probes, resources, eight environment variables, a
volume; ``managedFields``; half carrying ``kubectl.kubernetes.io/last-applied-configuration``) and HPAs
targeting a quarter of them, spread over namespaces."""
from __future__ import annotations

import json
from typing import Any

NAMESPACES = 50
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def namespace(i: int, namespaces: int = NAMESPACES) -> str:
    return f"scale-{i % namespaces:02d}"


def container(name: str, image: str, port: int) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"}, "initialDelaySeconds": 5,
             "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3}
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-{name}"} for k in range(8)],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
            "livenessProbe": probe, "readinessProbe": dict(probe, httpGet=dict(probe["httpGet"], path="/readyz")),
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}


def deployment_manifest(i: int, namespaces: int = NAMESPACES) -> dict[str, Any]:
    """What a user applies (no server fields)."""
    name = f"app-{i:06d}"
    labels = {"app": name, "team": f"team-{i % 17}", "tier": "backend"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace(i, namespaces), "labels": labels},
            "spec": {"replicas": 2 + i % 3, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container("app", f"registry.example/app:{i % 7}", 8080),
                                                          container("sidecar", "registry.example/proxy:1.4", 9090)],
                                           "volumes": [{"name": "config",
                                                        "configMap": {"name": f"{name}-config", "defaultMode": 420}}],
                                           "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                                           "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                                           "securityContext": {}}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                     "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}}


def with_last_applied(manifest: dict[str, Any], i: int) -> dict[str, Any]:
    """Half of them carry the annotation client-side ``kubectl apply`` writes."""
    if i % 2:
        meta = manifest["metadata"]
        meta["annotations"] = {LAST_APPLIED: json.dumps(manifest, separators=(",", ":")) + "\n"}
    return manifest


def admitted(manifest: dict[str, Any], i: int, namespaces: int = NAMESPACES) -> dict[str, Any]:
    """``manifest`` as policylib's webhook would have stored it (default settings; its HPA, for every
    fourth, known): compliant, with policylib's record."""
    from policylib import mutate
    from policylib.facts import ClusterFacts
    facts = ClusterFacts.from_objects([hpa_manifest(i, namespaces)] if i % 4 == 0 else [])
    return mutate(manifest, None, facts=facts).object


def deployment_as_stored(i: int, namespaces: int = NAMESPACES, compliant: bool = False) -> dict[str, Any]:
    """A Deployment as the API server returns it: uid, resourceVersion, managedFields, status; stored
    through policylib's webhook (``compliant``) or without it."""
    manifest = deployment_manifest(i, namespaces)
    d = with_last_applied(admitted(manifest, i, namespaces) if compliant else manifest, i)
    meta = d["metadata"]
    meta.update(uid=f"00000000-0000-4000-8000-{i:012d}", resourceVersion=str(1000 + i), generation=1,
                creationTimestamp="2026-12-01T00:00:00Z",
                managedFields=[{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                                "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1",
                                "fieldsV1": _fields(d["spec"])},
                               {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                                "time": "2026-12-01T00:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                                "fieldsV1": {"f:status": {"f:availableReplicas": {}, "f:conditions": {},
                                                          "f:observedGeneration": {}, "f:readyReplicas": {},
                                                          "f:replicas": {}, "f:updatedReplicas": {}}}}])
    replicas = d["spec"]["replicas"]
    d["status"] = {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                   "readyReplicas": replicas, "availableReplicas": replicas,
                   "conditions": [{"type": t, "status": "True", "lastUpdateTime": "2026-12-01T00:00:01Z",
                                   "lastTransitionTime": "2026-12-01T00:00:01Z", "reason": r,
                                   "message": f'ReplicaSet "{d["metadata"]["name"]}-5d8f7c9b6" {m}'}
                                  for t, r, m in (("Available", "MinimumReplicasAvailable", "has minimum availability"),
                                                  ("Progressing", "NewReplicaSetAvailable", "has successfully progressed"))]}
    return d


def _fields(value: Any) -> Any:
    """A FieldsV1-shaped tree of ``value``'s keys (what managedFields records)."""
    if isinstance(value, dict):
        return {f"f:{k}": _fields(v) for k, v in value.items()}
    if isinstance(value, list):
        return {f"k:{json.dumps(v.get('name'))}" if isinstance(v, dict) and "name" in v else f"v:{json.dumps(v)}":
                _fields(v) for v in value}
    return {}


def hpa_manifest(i: int, namespaces: int = NAMESPACES) -> dict[str, Any]:
    """An autoscaling/v2 HPA on Deployment ``i`` (one per four Deployments: i = 0, 4, 8, ...)."""
    name = f"app-{i:06d}"
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace(i, namespaces)},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 3, "maxReplicas": 10,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                                   "target": {"type": "Utilization",
                                                                              "averageUtilization": 70}}}]}}


def hpa_as_stored(i: int, namespaces: int = NAMESPACES) -> dict[str, Any]:
    h = hpa_manifest(i, namespaces)
    h["metadata"].update(uid=f"00000000-0000-4000-9000-{i:012d}", resourceVersion=str(500000 + i),
                         creationTimestamp="2026-12-01T00:00:00Z",
                         managedFields=[{"manager": "kubectl-client-side-apply", "operation": "Update",
                                         "apiVersion": "autoscaling/v2", "time": "2026-12-01T00:00:00Z",
                                         "fieldsType": "FieldsV1", "fieldsV1": _fields(h["spec"])}])
    h["status"] = {"currentReplicas": 3, "desiredReplicas": 3,
                   "conditions": [{"type": "AbleToScale", "status": "True", "lastTransitionTime": "2026-12-01T00:00:01Z",
                                   "reason": "SucceededGetScale",
                                   "message": "the HPA controller was able to get the target's current scale"}]}
    return h
