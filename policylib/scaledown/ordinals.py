"""``simulate --scale`` of a StatefulSet (rule S26): the StatefulSet controller removes the pods whose ordinals
fall outside ``[start, start + replicas)``, highest first, and reads no pod deletion cost, so what a scale-in
leaves per zone is where the kept ordinals were placed."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..labels import selector_matches
from .pods import is_active, metadata_of, node_of
from .skew import skew_of


@dataclass(frozen=True)
class OrdinalScaleIn:
    """What the StatefulSet controller removes scaling a StatefulSet's pods to ``replicas``; ``found`` is how
    many of its pods the input held (none: nothing to replay)."""

    namespace: str
    name: str
    replicas: int
    found: int
    before: dict[str, int]
    removed: list[str]
    after: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "StatefulSet", "namespace": self.namespace, "name": self.name, "replicas": self.replicas,
                "podsInInput": self.found, "zonesBefore": self.before, "removed": self.removed, "zones": self.after,
                "zoneSkew": skew_of(self.after)}


def pod_ordinal(statefulset_name: str, pod: Mapping[str, Any]) -> int | None:
    """The ordinal of a StatefulSet's pod, from its name ``<set>-<ordinal>`` (the StatefulSet controller's
    ``getParentNameAndOrdinal``); None for a pod whose name is not of that set."""
    match = re.fullmatch(re.escape(statefulset_name) + r"-(\d+)", str(metadata_of(pod).get("name") or ""))
    return int(match.group(1)) if match else None


def statefulset_pods(statefulset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) \
        -> dict[int, Mapping[str, Any]]:
    """The active, bound pods of a StatefulSet by ordinal: same namespace, matched by its selector, named
    ``<set>-<ordinal>``."""
    meta = metadata_of(statefulset)
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    selector = (statefulset.get("spec") or {}).get("selector")
    out: dict[int, Mapping[str, Any]] = {}
    for p in pods:
        if not isinstance(p, dict) or p.get("kind", "Pod") != "Pod" or not is_active(p) or not node_of(p) \
                or str(metadata_of(p).get("namespace") or "default") != ns \
                or not selector_matches(selector, metadata_of(p).get("labels") or {}):
            continue
        ordinal = pod_ordinal(name, p)
        if ordinal is not None:
            out[ordinal] = p
    return out


def scale_in(statefulset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str],
             replicas: int) -> OrdinalScaleIn:
    """Rule S26 for a StatefulSet: its bound pods among ``pods`` whose ordinals are outside ``[start, start +
    replicas)`` (``spec.ordinals.start``, 0 by default) are removed, highest ordinal first (the controller's
    ``descendingOrdinal``, with OrderedReady and Parallel alike); the zones the others are in are what remains."""
    meta = metadata_of(statefulset)
    start = ((statefulset.get("spec") or {}).get("ordinals") or {}).get("start") or 0
    start = start if isinstance(start, int) and not isinstance(start, bool) else 0
    mine = statefulset_pods(statefulset, pods)
    zones = sorted(set(zone_of.values()))
    removed = sorted((o for o in mine if not start <= o < start + replicas), reverse=True)

    def counts(ordinals: Iterable[int]) -> dict[str, int]:
        out = dict.fromkeys(zones, 0)
        for o in ordinals:
            z = zone_of.get(node_of(mine[o]), "")
            out[z] = out.get(z, 0) + 1
        return dict(sorted(out.items()))
    return OrdinalScaleIn(str(meta.get("namespace") or "default"), str(meta.get("name") or ""), replicas, len(mine),
                          counts(mine), [str(metadata_of(mine[o]).get("name")) for o in removed],
                          counts(o for o in mine if o not in removed))
