"""The LeaderWorkerSet's vocabulary: where its templates are, the leaders' selector, and policylib's records on it.

LWS v0.10.0 builds the leader StatefulSet ``<lws>`` from ``leaderTemplate`` (the ``workerTemplate`` when there is
none) and each group's worker StatefulSet from ``workerTemplate``; it labels every pod with the LWS's name, the
pod's ``worker-index`` (``"0"`` on the leader) and its group's ``group-key``. Its scale subresource scales groups
(``spec.replicas``), and the HPA's selector is that of the leaders.
"""
from __future__ import annotations

from typing import Any

from ..constants import (
    LWS_API_VERSION,
    LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    LWS_NAME_LABEL,
    LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    LWS_WORKER_INDEX_LABEL,
)
from ..result import DOMAIN

KIND = "LeaderWorkerSet"
LEADER_WORKER_TEMPLATE = ("spec", "leaderWorkerTemplate")
LEADER_TEMPLATE = LEADER_WORKER_TEMPLATE + ("leaderTemplate",)
WORKER_TEMPLATE = LEADER_WORKER_TEMPLATE + ("workerTemplate",)
ANNOTATIONS = ("metadata", "annotations")
#: Rule E3: the LeaderWorkerSet's ``leaderTemplate`` is policylib's, derived from its ``workerTemplate``.
LEADER_TEMPLATE_RECORD = f"{DOMAIN}/leader-template"
GENERATED = "generated"
#: Rule E5: the level each group was packed within (``<node label> <mode>``), so a later write can take it back.
GROUP_PACKING_RECORD = f"{DOMAIN}/group-packing"
#: ``spec.startupPolicy``: the workers are created with the leader (default) or once it is Ready.
STARTUP_POLICIES = ("LeaderCreated", "LeaderReady")
LEADER_READY = "LeaderReady"
#: The LWS annotations that place one group (or subgroup) per domain (rule E6).
EXCLUSIVE_ANNOTATIONS = (LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION, LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION)
#: The paths the family writes (rule P3): its records, the leader template, the worker template's affinity.
OWNED_PATHS = (ANNOTATIONS, LEADER_TEMPLATE, WORKER_TEMPLATE + ("spec", "affinity"))


def is_leaderworkerset(obj: object) -> bool:
    """A ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet."""
    return isinstance(obj, dict) and obj.get("kind") == KIND and obj.get("apiVersion") == LWS_API_VERSION


def at(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (None where a level is missing or not a mapping)."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def name_of(obj: dict[str, Any]) -> str:
    name = at(obj, ("metadata", "name"))
    return name if isinstance(name, str) else ""


def annotations_of(obj: dict[str, Any]) -> dict[str, Any]:
    value = at(obj, ANNOTATIONS)
    return value if isinstance(value, dict) else {}


def leader_selector(name: str) -> dict[str, Any]:
    """The leader pods of the LeaderWorkerSet ``name`` (its leader StatefulSet's selector, and the HPA's)."""
    return {"matchLabels": {LWS_NAME_LABEL: name, LWS_WORKER_INDEX_LABEL: "0"}}


def group_size(obj: dict[str, Any]) -> int:
    """``spec.leaderWorkerTemplate.size``, defaulted as LWS does (1)."""
    size = at(obj, LEADER_WORKER_TEMPLATE + ("size",))
    return size if isinstance(size, int) and not isinstance(size, bool) else 1


def startup_policy(obj: dict[str, Any]) -> str:
    """``spec.startupPolicy``, defaulted as LWS does (LeaderCreated)."""
    return str(at(obj, ("spec", "startupPolicy")) or STARTUP_POLICIES[0])


def exclusive_annotations(obj: dict[str, Any]) -> dict[str, str]:
    """The exclusive-topology annotations the user set on the LeaderWorkerSet (rule E6)."""
    annotations = annotations_of(obj)
    return {k: str(annotations[k]) for k in EXCLUSIVE_ANNOTATIONS if annotations.get(k)}
