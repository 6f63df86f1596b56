"""The deletion costs the controller keeps on a ReplicaSet's bound pods (rules S23 to S25).

In each zone, a ReplicaSet's bound pods get the levels 0, 1, 2, ... round-robin over the zone's Nodes (the
pods of a Node in the order they have, then by age), and a pod's cost is minus its level. Deleting the lowest
costs first removes the highest levels: the zone with most pods loses one first, and within it the Node with
most pods, so after removing any number of pods every zone keeps ``min(its pods, t)`` or ``t + 1`` pods for
some level ``t``: the least skew a scale-down can leave. A new pod takes the next level of its zone (one
write, when it binds); pods removed from the top change no other pod's level; only a pod removed below the top
(a Node lost, an eviction) renumbers the levels above it in its zone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .pods import DELETION_COST, current_cost, foreign_cost, is_active, metadata_of, node_of, owner_uid


def _level(pod: Mapping[str, Any]) -> float:
    cost = current_cost(pod)
    return -cost if cost is not None and cost <= 0 and not foreign_cost(pod) else math.inf


def _age_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = metadata_of(pod)
    return str(meta.get("creationTimestamp") or "~"), str(meta.get("name") or "")


def zone_levels(pods: Sequence[Mapping[str, Any]]) -> list[int]:
    """Rule S23: the levels of one zone's pods of one ReplicaSet (same order as ``pods``): each Node's pods
    in the order of their present levels (a pod without one last, older first), then the zone's pods
    round-robin over its Nodes, the n-th pod of every Node before any Node's (n+1)-th."""
    by_node: dict[str, list[int]] = {}
    for i, pod in enumerate(pods):
        by_node.setdefault(node_of(pod), []).append(i)
    slot: dict[int, int] = {}
    for members in by_node.values():
        for j, i in enumerate(sorted(members, key=lambda i: (_level(pods[i]), _age_key(pods[i])))):
            slot[i] = j
    order = sorted(range(len(pods)), key=lambda i: (slot[i], _level(pods[i]), node_of(pods[i]), _age_key(pods[i])))
    levels = [0] * len(pods)
    for level, i in enumerate(order):
        levels[i] = level
    return levels


def desired_costs(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str]) -> dict[str, int]:
    """Rules S23, S25: the deletion cost each pod should have, by uid: per ReplicaSet and zone (the Node's
    ``zone_of``; a Node without the zone label is a zone of its own, ``""``), minus the pod's level. Only
    active bound pods whose cost is ours or unset are given one; another manager's cost is left alone."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        owner = owner_uid(pod)
        if owner is None or not node_of(pod) or not is_active(pod) or foreign_cost(pod):
            continue
        groups.setdefault((owner, zone_of.get(node_of(pod), "")), []).append(pod)
    costs: dict[str, int] = {}
    for members in groups.values():
        for pod, level in zip(members, zone_levels(members), strict=True):
            costs[str(metadata_of(pod).get("uid") or "")] = -level
    return costs


@dataclass(frozen=True)
class CostWrite:
    """One pod whose cost must change (rule S24)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    cost: int

    def patch(self) -> dict[str, Any]:
        """A JSON merge patch: the cost, guarded by the resourceVersion and the uid."""
        return {"metadata": {"annotations": {DELETION_COST: str(self.cost)}, "resourceVersion": self.resource_version,
                             "uid": self.uid}}


def cost_writes(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str]) -> list[CostWrite]:
    """Rule S24: the pods whose deletion cost differs from :func:`desired_costs` (none at steady state)."""
    pods = list(pods)
    costs = desired_costs(pods, zone_of)
    out = []
    for pod in pods:
        meta = metadata_of(pod)
        uid = str(meta.get("uid") or "")
        if uid in costs and current_cost(pod) != costs[uid]:
            out.append(CostWrite(str(meta.get("namespace") or ""), str(meta.get("name") or ""), uid,
                                 str(meta.get("resourceVersion") or ""), costs[uid]))
    return sorted(out, key=lambda w: (w.namespace, w.name))


def costs_as_they_are(pods: Iterable[Mapping[str, Any]], ours: bool) -> dict[str, int | None]:
    """Each pod's deletion cost as the ReplicaSet controller would read it: with ``ours`` False, costs
    policylib's controller wrote are dropped (the setting off)."""
    return {str(metadata_of(p).get("uid") or ""): (current_cost(p) if ours or foreign_cost(p) else None)
            for p in pods}
