"""What a watch holds of each object: the fields the planners (:mod:`policylib.plan`), the facts
(:mod:`policylib.facts`) and the controller's rollout gate read, and nothing else (rule W7).

A Deployment as the API server returns it carries ``metadata.managedFields``, often kubectl's
``last-applied-configuration`` annotation (a second copy of the object), its containers (images, probes,
environment, mounts) and a status with conditions; none of that is read. :func:`project` keeps, per kind,
the fields listed in :data:`FIELDS` and drops the rest, as each object is decoded, before it is stored;
tests/test_projection.py runs every planner on whole and on projected objects and fails when a planner
reads a field the projection drops.

``check --cluster`` and ``simulate --cluster`` replay kube-scheduler on what they read, which reads more of a
pod template than the planners do (its containers' requests and ports, volumes, priority, scheduler):
:func:`project_simulated` keeps, per kind, the fields in :data:`SIMULATED` (the planners' fields and the
scheduler's), and strips the kinds not listed (:func:`strip`); tests/test_projection.py runs ``check`` and
``simulate`` on whole and on projected objects and fails when they differ.

A dropped annotation keeps its key with an empty value: a patch made from the projection then has the
same paths as one made from the whole object (an ``add`` of one annotation, never of the whole map), and
the writes carry the object's ``resourceVersion``, so the server applies them to the object the
projection was made from or answers 409.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union, cast

from .constants import ADMISSIONREGISTRATION_API_VERSION, APPS_API_VERSION, AUTOSCALING_API_VERSION

#: Keep the value whole.
ALL = True
Fields = dict[str, Union[bool, "Fields", "Each"]]


@dataclass(frozen=True)
class Each:
    """A list whose items are mappings: each keeps ``fields`` (an item that is not a mapping is kept whole)."""

    fields: Fields

#: Annotations nobody reads that can be as large as the object: kept as a key with an empty value.
DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

#: Object metadata the planners read: identity and version (writes and Events), labels and annotations
#: (opt-out, policylib's record, gang metadata), owners (PodGroups and Workloads to their job), generation
#: (the rollout gate). ``managedFields`` and the rest are dropped.
METADATA: Fields = {k: ALL for k in ("name", "namespace", "uid", "resourceVersion", "generation", "labels",
                                     "annotations", "ownerReferences", "deletionTimestamp", "generateName")}

#: Per (apiVersion, kind): what is kept. Kinds not listed keep everything but ``managedFields``, the
#: dropped annotations and ``status``.
FIELDS: dict[tuple[str, str], Fields] = {
    # plan_deployment (rules S11, S17, S19, S20), mutate_deployment's owned paths (annotations, the pod
    # template's topologySpreadConstraints and affinity), its selector and template labels, and the
    # controller's rollout gate (rollout_complete: generation and four status counts)
    (APPS_API_VERSION, "Deployment"): {
        "apiVersion": ALL, "kind": ALL, "metadata": METADATA,
        "spec": {"replicas": ALL, "selector": ALL,
                 "template": {"metadata": {"labels": ALL, "annotations": ALL},
                              "spec": {"affinity": ALL, "topologySpreadConstraints": ALL,
                                       # rule S28: the Nodes a constraint counts (its inclusion policies)
                                       "nodeSelector": ALL, "tolerations": ALL}}},
        "status": {"observedGeneration": ALL, "replicas": ALL, "updatedReplicas": ALL, "availableReplicas": ALL},
    },
    # plan_statefulset (rules A1-A6): the Deployment's fields, the StatefulSet's own that rule A1 reads (its
    # claim templates among them), and the rollout gate's status (statefulset_rollout_complete)
    (APPS_API_VERSION, "StatefulSet"): {
        "apiVersion": ALL, "kind": ALL, "metadata": METADATA,
        "spec": {"replicas": ALL, "selector": ALL, "podManagementPolicy": ALL, "updateStrategy": ALL,
                 "ordinals": ALL, "volumeClaimTemplates": ALL,
                 "template": {"metadata": {"labels": ALL, "annotations": ALL},
                              "spec": {"affinity": ALL, "topologySpreadConstraints": ALL,
                                       "nodeSelector": ALL, "tolerations": ALL}}},
        "status": {"observedGeneration": ALL, "replicas": ALL, "readyReplicas": ALL, "updatedReplicas": ALL,
                   "currentRevision": ALL, "updateRevision": ALL},
    },
    # policylib.facts.hpa_target, policylib.spread.hpa_min_replicas
    (AUTOSCALING_API_VERSION, "HorizontalPodAutoscaler"): {
        "apiVersion": ALL, "kind": ALL,
        "metadata": {k: ALL for k in ("name", "namespace", "uid", "resourceVersion")},
        "spec": {"minReplicas": ALL, "maxReplicas": ALL, "scaleTargetRef": ALL},
    },
    # the scope (rules W5, W6): a Namespace's labels, and the webhook configuration's webhooks (their rules,
    # selectors and Services), which are not under ``spec``
    ("v1", "Namespace"): {"apiVersion": ALL, "kind": ALL,
                          "metadata": {k: ALL for k in ("name", "uid", "resourceVersion", "labels")}},
    (ADMISSIONREGISTRATION_API_VERSION, "MutatingWebhookConfiguration"): {
        "apiVersion": ALL, "kind": ALL, "metadata": METADATA, "webhooks": ALL},
}
#: Every other watched kind (Kubeflow jobs, PodGroups, Workloads): the gang planners read their specs.
OTHER: Fields = {"apiVersion": ALL, "kind": ALL, "metadata": METADATA, "spec": ALL}

#: What kube-scheduler's replay reads of a container: its requests and limits (rule R1; a restartable init
#: container is a sidecar) and its host ports (NodePorts). Names, images, commands, environment, probes and
#: mounts are dropped.
SCHEDULED_CONTAINER: Fields = {"resources": ALL, "restartPolicy": ALL,
                               "ports": Each({"hostPort": ALL, "hostIP": ALL, "protocol": ALL})}
#: What the replay reads of a pod's spec besides the planners' fields: requests (containers, init containers,
#: pod-level resources, overhead; rule R1), what places the pods outside the default profile (scheduler name,
#: node name, scheduling gates), and what it names as not modelled (rule R11: persistent volumes, DRA claims,
#: priority).
SCHEDULED_POD_SPEC: Fields = {
    "affinity": ALL, "topologySpreadConstraints": ALL, "nodeSelector": ALL, "tolerations": ALL,
    "containers": Each(SCHEDULED_CONTAINER), "initContainers": Each(SCHEDULED_CONTAINER),
    "resources": ALL, "overhead": ALL, "volumes": Each({"persistentVolumeClaim": ALL, "ephemeral": ALL}),
    "resourceClaims": ALL, "priorityClassName": ALL, "priority": ALL, "schedulerName": ALL, "nodeName": ALL,
    "schedulingGates": ALL,
}


def _with_pod_spec(fields: Fields, pod_spec: Fields) -> Fields:
    """A Deployment's ``fields`` with its pod template's spec replaced by ``pod_spec``."""
    spec = cast(Fields, fields["spec"])
    template = cast(Fields, spec["template"])
    return {**fields, "spec": {**spec, "template": {**template, "spec": pod_spec}}}


#: Per (apiVersion, kind): what ``check --cluster`` and ``simulate --cluster`` keep (:func:`project_simulated`).
SIMULATED: dict[tuple[str, str], Fields] = {
    (APPS_API_VERSION, "Deployment"): _with_pod_spec(FIELDS[(APPS_API_VERSION, "Deployment")], SCHEDULED_POD_SPEC),
    (APPS_API_VERSION, "StatefulSet"): _with_pod_spec(FIELDS[(APPS_API_VERSION, "StatefulSet")], SCHEDULED_POD_SPEC),
    # rules A7, A8: a claim's name and the volume bound to it; the volume's node affinity and zone labels
    ("v1", "PersistentVolumeClaim"): {"apiVersion": ALL, "kind": ALL, "metadata": METADATA,
                                      "spec": {"volumeName": ALL, "storageClassName": ALL}, "status": {"phase": ALL}},
    ("v1", "PersistentVolume"): {"apiVersion": ALL, "kind": ALL, "metadata": METADATA,
                                 "spec": {"nodeAffinity": ALL, "claimRef": ALL}},
    (AUTOSCALING_API_VERSION, "HorizontalPodAutoscaler"): FIELDS[(AUTOSCALING_API_VERSION, "HorizontalPodAutoscaler")],
    # a bound Pod loads its Node (the replay); a Pending one is reported with its scheduler's condition; a
    # running scheduler is known by its name or image (rule D5); the ReplicaSet controller ranks victims by
    # readiness, restarts and age (rule S26); the deletion cost is an annotation (rule S25)
    ("v1", "Pod"): {
        "apiVersion": ALL, "kind": ALL, "metadata": {**METADATA, "creationTimestamp": ALL},
        "spec": {**SCHEDULED_POD_SPEC, "containers": Each({**SCHEDULED_CONTAINER, "image": ALL})},
        "status": {"phase": ALL, "conditions": ALL, "containerStatuses": Each({"restartCount": ALL}),
                   "initContainerStatuses": Each({"restartCount": ALL})},
    },
    # the replay's snapshot (labels, taints, unschedulable, allocatable), node groups and autoscalers (labels,
    # annotations), the oldest kubelet; not the images, addresses, conditions and daemon endpoints
    ("v1", "Node"): {
        "apiVersion": ALL, "kind": ALL, "metadata": METADATA, "spec": ALL,
        "status": {"allocatable": ALL, "capacity": ALL, "nodeInfo": {"kubeletVersion": ALL}},
    },
}


def fields_for(obj: dict[str, Any]) -> Fields:
    return FIELDS.get((str(obj.get("apiVersion")), str(obj.get("kind"))), OTHER)


def project(obj: Any, fields: Fields | None = None) -> Any:
    """Rule W7: ``obj`` with only the fields its kind's planners read (a new object; ``obj`` is not changed).
    Anything not shaped as the API serves it (not a mapping where one is expected) is kept whole, so
    a planner meets exactly the malformed value the server returned."""
    if not isinstance(obj, dict):
        return obj
    return _keep(obj, fields if fields is not None else fields_for(obj))


def _keep(value: dict[str, Any], fields: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in fields.items():
        if key not in value:
            continue
        item = value[key]
        if key == "annotations" and isinstance(item, dict) and not DROPPED_ANNOTATIONS.isdisjoint(item):
            item = {k: ("" if k in DROPPED_ANNOTATIONS else v) for k, v in item.items()}
        if isinstance(sub, Each):
            out[key] = [_keep(i, sub.fields) if isinstance(i, dict) else i for i in item] \
                if isinstance(item, list) else item
        elif sub is ALL or not isinstance(item, dict) or not isinstance(sub, dict):
            out[key] = item
        else:
            out[key] = _keep(item, sub)
    return out


def project_simulated(obj: Any) -> Any:
    """Rule W7 for ``check --cluster`` and ``simulate --cluster``: ``obj`` with only what the planners and
    kube-scheduler's replay read of its kind (:data:`SIMULATED`); a kind not listed is only stripped
    (:func:`strip`). A new object; ``obj`` is not changed."""
    fields = SIMULATED.get((str(obj.get("apiVersion")), str(obj.get("kind")))) if isinstance(obj, dict) else None
    return strip(obj) if fields is None else _keep(obj, fields)


def strip(obj: Any) -> Any:
    """``obj`` without what nothing in policylib reads of any kind: ``metadata.managedFields`` and the
    :data:`DROPPED_ANNOTATIONS` (their keys kept, empty). What ``check`` and ``simulate`` hold of a live
    cluster, whose readers (the scheduler's replay) read containers, Nodes and Pods whole."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return obj
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and not DROPPED_ANNOTATIONS.isdisjoint(annotations):
        meta["annotations"] = {k: ("" if k in DROPPED_ANNOTATIONS else v) for k, v in annotations.items()}
    return dict(obj, metadata=meta)
