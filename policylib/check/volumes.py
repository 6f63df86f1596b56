"""StatefulSets whose bound PersistentVolumes already break their zone spread (rule A7)."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..facts import namespace_of
from ..kubescheduler.model import NodeState, PodShape
from ..kubescheduler.plugins import eligible_nodes
from ..result import is_opted_out
from ..spread.shape import deployment_shape_errors
from ..statefulset import is_statefulset
from ..statefulset.mutate import owned_skip
from ..statefulset.shape import statefulset_errors
from ..statefulset.volumes import least_skew, ordinal_range, pinned_zones, volume_pins
from .finding import Finding

KEY = "volume-pinned-skew"


def check_volume_pins(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]]) -> list[Finding]:
    """Rule A7: each managed StatefulSet (the family on, the zone spread on, not opted out, not owned by a
    controller) whose current ordinals' bound volumes pin them to zones so unevenly that no placement of its
    unpinned ordinals brings the zone skew within ``zoneTopologySpread.maxSkew``: a warning naming the pinned
    count per zone among the zones of the Nodes its pods may use. The scheduler cannot move a pod off its volume's
    zone, so the spread cannot repair this."""
    if not (config.statefulSets.enabled and config.zone.enabled):
        return []
    key = config.zone.topologyKey
    states = [NodeState.of(n) for n in nodes]
    claims = [o for o in objects if o.get("kind") in ("PersistentVolumeClaim", "PersistentVolume")]
    out = []
    for sts in objects:
        if not is_statefulset(sts) or is_opted_out(sts) or owned_skip(sts) is not None \
                or statefulset_errors(sts) or deployment_shape_errors(sts):
            continue   # one the API server would refuse: preview and simulate name its fields
        if not (sts.get("spec") or {}).get("volumeClaimTemplates"):
            continue
        ordinals = ordinal_range(sts)
        pins = volume_pins(sts, claims, claims, nodes, key)
        pinned = pinned_zones(pins, ordinals.start, len(ordinals))
        if not pinned:
            continue
        template = (sts.get("spec") or {}).get("template") or {}
        pod = PodShape.of_template(template, namespace_of(sts), "check")
        zones = sorted({str(n.labels[key]) for n in eligible_nodes(pod, states) if key in n.labels} | set(pinned))
        free = len(ordinals) - sum(pinned.values())
        skew = least_skew(pinned, zones, free)
        if skew <= config.zone.maxSkew:
            continue
        counts = ", ".join(f"{z}={pinned.get(z, 0)}" for z in zones)
        unpinned = f"; {free} ordinal(s) not pinned" if free else ""
        out.append(Finding("warning", KEY, f"statefulset {namespace_of(sts)}/{(sts.get('metadata') or {}).get('name')}: "
                                           f"bound volumes pin its {len(ordinals)} ordinal(s) to {counts}{unpinned} "
                                           f"(zone skew at least {skew} > maxSkew {config.zone.maxSkew}): the "
                                           "scheduler cannot move a pod off its volume's zone, so the spread cannot "
                                           "repair this; only new claims (their data moved) can"))
    return out
