"""``simulate --scale`` (rule S26): which pods the ReplicaSet controller removes scaling a Deployment down,
without and with the deletion costs of rule S23."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from .costs import costs_as_they_are, desired_costs
from .pods import deployment_pods, is_active, metadata_of, node_of, owner_uid
from .ranking import pods_to_delete
from .skew import skew_of


@dataclass(frozen=True)
class ScaleDown:
    """What the ReplicaSet controller removes scaling a Deployment's bound pods to ``replicas``."""

    namespace: str
    name: str
    replicas: int
    before: dict[str, int]
    removed_without: list[str]
    after_without: dict[str, int]
    removed_with: list[str]
    after_with: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "replicas": self.replicas, "zonesBefore": self.before,
                "withoutCosts": {"removed": self.removed_without, "zones": self.after_without,
                                 "zoneSkew": skew_of(self.after_without)},
                "withCosts": {"removed": self.removed_with, "zones": self.after_with, "zoneSkew": skew_of(self.after_with)}}


def _zone_counts(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str], zones: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(zones, 0)
    for p in pods:
        z = zone_of.get(node_of(p), "")
        counts[z] = counts.get(z, 0) + 1
    return dict(sorted(counts.items()))


def scale_down(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]],
               replicas: int, zone_key: str, now: datetime | None = None) -> ScaleDown:
    """Rule S26: the pods the ReplicaSet controller would delete scaling ``deployment`` to ``replicas``,
    with the costs as the pods have them less policylib's (the setting off) and with the costs
    :func:`~policylib.scaledown.costs.desired_costs` gives (on). The newest ReplicaSet (the most pods) is the one scaled."""
    now = now or datetime.now(timezone.utc)
    meta = metadata_of(deployment)
    nodes = list(nodes)
    zone_of = {str(metadata_of(n).get("name") or ""): str((metadata_of(n).get("labels") or {}).get(zone_key, ""))
               for n in nodes}
    zones = sorted({z for z in zone_of.values()})
    related = [p for p in deployment_pods(deployment, pods) if is_active(p)]
    by_owner: dict[str, list[Mapping[str, Any]]] = {}
    for p in related:
        by_owner.setdefault(owner_uid(p) or "", []).append(p)
    mine = max(by_owner.values(), key=len) if by_owner else []
    diff = max(0, len(mine) - replicas)
    off = costs_as_they_are(related, ours=False)
    on: dict[str, int | None] = {**off, **desired_costs(related, zone_of)}
    out_without = pods_to_delete(mine, related, diff, now, off)
    out_with = pods_to_delete(mine, related, diff, now, on)

    def names(ps: Iterable[Mapping[str, Any]]) -> list[str]:
        return sorted(str(metadata_of(p).get("name")) for p in ps)

    def left(removed: list[Mapping[str, Any]]) -> dict[str, int]:
        gone = {id(p) for p in removed}
        return _zone_counts([p for p in mine if id(p) not in gone], zone_of, zones)
    return ScaleDown(str(meta.get("namespace") or "default"), str(meta.get("name") or ""), replicas,
                     _zone_counts(mine, zone_of, zones), names(out_without), left(out_without),
                     names(out_with), left(out_with))
