"""What the scale-down rules read of a Pod: its ReplicaSet, Node, phase and deletion cost, and what the
controller's pod watch keeps of it (rule S27)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..constants import POD_TEMPLATE_HASH
from ..errors import INT32_MAX
from ..labels import selector_matches

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: The field manager of the controller's cost writes: how ``managedFields`` tells our costs from others'.
FIELD_MANAGER = "policylib-scaledown"
#: The int32 range the API reads a deletion cost in.
COST_RANGE = (-INT32_MAX - 1, INT32_MAX)
_COST_FIELD = f"f:{DELETION_COST}"

#: Rule W7 for Pods: what the controller's pod watch holds (identity, owner, Node, phase, labels for the
#: constraints' selectors, the cost annotation and, of ``managedFields``, only who owns the cost).
POD_FIELDS = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels",
              "ownerReferences")


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's ``metadata``, or an empty mapping when it has none or not a mapping."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def cost_owner(pod: Mapping[str, Any]) -> str | None:
    """The field manager that owns the pod's deletion cost annotation (``managedFields``), or None."""
    for entry in metadata_of(pod).get("managedFields") or ():
        fields = (entry or {}).get("fieldsV1") or {}
        annotations = ((fields.get("f:metadata") or {}).get("f:annotations") or {})
        if _COST_FIELD in annotations:
            return str(entry.get("manager") or "")
    return None


def project_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Rule S27: what the pod watch keeps of a Pod; ``managedFields`` is cut to the entry owning the cost."""
    meta = metadata_of(pod)
    kept: dict[str, Any] = {k: meta[k] for k in POD_FIELDS if k in meta}
    cost = (meta.get("annotations") or {}).get(DELETION_COST)
    if cost is not None:
        kept["annotations"] = {DELETION_COST: cost}
        owner = cost_owner(pod)
        if owner is not None:
            kept["managedFields"] = [{"manager": owner, "fieldsV1": {"f:metadata": {"f:annotations": {_COST_FIELD: {}}}}}]
    status: Mapping[str, Any] = pod.get("status") or {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept,
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName") or ""},
            "status": {"phase": status.get("phase") or ""}}


def is_active(pod: Mapping[str, Any]) -> bool:
    """controller.IsPodActive: not Succeeded, not Failed, not being deleted."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and \
        not metadata_of(pod).get("deletionTimestamp")


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def owner_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the ReplicaSet that controls the pod, or None (not a ReplicaSet's pod)."""
    for ref in metadata_of(pod).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "ReplicaSet":
            return str(ref.get("uid") or ref.get("name") or "")
    return None


def deployment_name(pod: Mapping[str, Any]) -> str | None:
    """The Deployment a ReplicaSet's pod belongs to: its ReplicaSet's name less ``-<pod-template-hash>``."""
    hash_ = (metadata_of(pod).get("labels") or {}).get(POD_TEMPLATE_HASH)
    for ref in metadata_of(pod).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "ReplicaSet" and hash_:
            name = str(ref.get("name") or "")
            if name.endswith(f"-{hash_}"):
                return name[: -len(hash_) - 1]
    return None


def deployment_pods(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of a Deployment: same namespace, matched by its selector, owned by a ReplicaSet; of a StatefulSet
    (rule S28): owned by that StatefulSet."""
    ns = str(metadata_of(deployment).get("namespace") or "default")
    selector = (deployment.get("spec") or {}).get("selector")
    statefulset = metadata_of(deployment).get("name") if deployment.get("kind") == "StatefulSet" else None
    return [p for p in pods if isinstance(p, dict) and p.get("kind", "Pod") == "Pod"
            and str(metadata_of(p).get("namespace") or "default") == ns
            and (owner_uid(p) is not None if statefulset is None else owned_by_statefulset(p, str(statefulset)))
            and selector_matches(selector, metadata_of(p).get("labels") or {})]


def owned_by_statefulset(pod: Mapping[str, Any], name: str) -> bool:
    """The pod's controller is the StatefulSet ``name`` (of the pod's namespace)."""
    return any(isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "StatefulSet"
               and ref.get("name") == name for ref in metadata_of(pod).get("ownerReferences") or ())


def parse_cost(value: object) -> int | None:
    """The deletion cost as the API reads it (an int32 in decimal), or None when unset or not one."""
    if not isinstance(value, str):
        return None
    try:
        cost = int(value, 10)
    except ValueError:
        return None
    return cost if COST_RANGE[0] <= cost <= COST_RANGE[1] else None


def current_cost(pod: Mapping[str, Any]) -> int | None:
    return parse_cost((metadata_of(pod).get("annotations") or {}).get(DELETION_COST))


def foreign_cost(pod: Mapping[str, Any]) -> bool:
    """Rule S25: the pod has a deletion cost another field manager set (its owner is not ours)."""
    return DELETION_COST in (metadata_of(pod).get("annotations") or {}) and cost_owner(pod) != FIELD_MANAGER
