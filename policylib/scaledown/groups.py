"""``simulate --scale`` of a LeaderWorkerSet (rule S26): LWS scales its leader StatefulSet, whose controller removes
the leaders of the highest group indices (as for any StatefulSet: no pod deletion cost read), and each removed
leader takes its worker StatefulSet, and so its workers, with it (they are owned by the leader pod). So what a
scale-in leaves per zone is where the kept groups were placed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..constants import LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL
from .pods import is_active, metadata_of, node_of
from .skew import skew_of


@dataclass(frozen=True)
class GroupScaleIn:
    """What scaling a LeaderWorkerSet's groups to ``groups`` removes; ``found`` is how many of its bound pods the
    input held (none: nothing to replay). Zones count leaders (``leaders_before``, ``leaders_after``) and every pod
    (``pods_after``)."""

    namespace: str
    name: str
    groups: int
    found: int
    leaders_before: dict[str, int]
    removed_groups: list[int]
    removed: list[str]
    leaders_after: dict[str, int]
    pods_after: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "LeaderWorkerSet", "namespace": self.namespace, "name": self.name, "replicas": self.groups,
                "podsInInput": self.found, "zonesBefore": self.leaders_before, "removedGroups": self.removed_groups,
                "removed": self.removed, "zones": self.leaders_after, "podZones": self.pods_after,
                "zoneSkew": skew_of(self.leaders_after)}


def group_of(pod: Mapping[str, Any]) -> tuple[int, bool] | None:
    """(group index, whether the pod leads it) from the labels LWS puts on the pod; None without them."""
    labels = metadata_of(pod).get("labels") or {}
    group, worker = labels.get(LWS_GROUP_INDEX_LABEL), labels.get(LWS_WORKER_INDEX_LABEL)
    if not (isinstance(group, str) and group.isdigit() and isinstance(worker, str)):
        return None
    return int(group), worker == "0"


def scale_in_groups(lws: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str],
                    groups: int) -> GroupScaleIn:
    """Rule S26 for a LeaderWorkerSet: its bound pods among ``pods`` (same namespace, labelled with its name) of the
    groups ``groups`` and above are removed, leaders and workers, the highest group first."""
    meta = metadata_of(lws)
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    mine = [(p, g) for p in pods if isinstance(p, dict) and p.get("kind", "Pod") == "Pod" and is_active(p)
            and node_of(p) and str(metadata_of(p).get("namespace") or "default") == ns
            and (metadata_of(p).get("labels") or {}).get(LWS_NAME_LABEL) == name and (g := group_of(p)) is not None]
    zones = sorted(set(zone_of.values()))

    def counts(chosen: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        out = dict.fromkeys(zones, 0)
        for p in chosen:
            z = zone_of.get(node_of(p), "")
            out[z] = out.get(z, 0) + 1
        return dict(sorted(out.items()))
    gone = sorted({g for _, (g, _) in mine if g >= groups}, reverse=True)
    removed = sorted(((g, not leads, str(metadata_of(p).get("name"))) for p, (g, leads) in mine if g >= groups),
                     key=lambda t: (-t[0], t[1], t[2]))
    kept = [(p, leads) for p, (g, leads) in mine if g < groups]
    return GroupScaleIn(ns, name, groups, len(mine), counts(p for p, (_, leads) in mine if leads), gone,
                        [n for _, _, n in removed], counts(p for p, leads in kept if leads), counts(p for p, _ in kept))
