"""The topology level a native gang must fit in (rules G25, N4): the gang placement of the one topology
declaration (:func:`policylib.topology.placement`: ``topology.gangs.within``, or the older ``gang.topology`` read
against the levels the configuration declares).

The key becomes the PodGroup's ``spec.schedulingConstraints.topology: [{key}]``: kube-scheduler's
``TopologyPlacement`` plugin (``pkg/scheduler/framework/plugins/topologyaware``, behind the
``TopologyAwareWorkloadScheduling`` gate) then places the whole gang inside the Nodes of one value of that label.
kube-scheduler has no word for a preferred placement: a preferred one writes nothing (rule N4).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..topology.levels import PREFERRED, TIER, Level, discovery_tiers, gang_words_reason, placement
from ..topology.volcano import network_topology


@dataclass(frozen=True)
class TopologyLevel:
    """Rule G25: the Node label key a gang's pods must share one value of, and what in the config named it."""

    key: str
    why: str
    #: The key that named the level (``topology.gangs.within``, ``gang.topology``, ...).
    setting: str = "gang.topology"


def gang_topology(config: Any) -> TopologyLevel | None:
    """Rules G25 and N4: the level a native gang must fit in, or None (no placement, a preferred one, or another
    method)."""
    if config.gang.method != "workload":
        return None
    p = placement(config)
    if p.within is None or p.mode == PREFERRED:
        return None
    return TopologyLevel(p.within.node_label, level_why(config, p.within_setting, p.within), p.within_setting)


@dataclass(frozen=True)
class GangWords:
    """Rules N4 and N5: the Volcano PodGroup's ``networkTopology`` for the gang placement (None: none), and the
    reasons for the gang scheduler's words (written or not)."""

    network_topology: dict[str, Any] | None = None
    reasons: tuple[str, ...] = ()


def gang_words(config: Any) -> GangWords:
    """Rules N4, N5 and N9: what the gang scheduler reads of the placement: on Volcano (method podgroup) the
    PodGroup's ``networkTopology``; kube-scheduler's constraint is :func:`gang_topology`; the others have none. One
    reason for each decision, written or not."""
    p = placement(config)
    spec, reasons = None, []
    if config.gang.method == "podgroup" and config.gang.scheduler == "volcano":
        spec, why = network_topology(p)
        reasons += [why] if why else []
    other = gang_words_reason(config, p)
    return GangWords(spec, tuple(reasons + ([other] if other else [])))


def jobset_topology(config: Any) -> TopologyLevel | None:
    """Rules J5 and N7: the level each Job of a JobSet gets a domain of to itself, or None."""
    p = placement(config)
    if p.job_per_domain is None:
        return None
    return TopologyLevel(p.job_per_domain.node_label, level_why(config, p.job_setting, p.job_per_domain),
                         p.job_setting)


def level_why(config: Any, setting: str, level: Level) -> str:
    """What in the configuration named ``level`` for ``setting``: the declared level, or the older key's value read
    against the zone key or Volcano's label discovery."""
    if setting.startswith("topology."):
        return f"{setting} {level.name}: {level.source} nodeLabel {level.node_label}"
    value = getattr(config.gang, setting.split(".")[1])
    if value == "zone":
        return f"{setting} zone: zoneTopologySpread.topologyKey {level.node_label}"
    match = TIER.fullmatch(value)
    for name, keys in discovery_tiers(config.volcano):
        if match and int(match.group(1)) <= len(keys):
            return (f"{setting} {value}: tier {match.group(1)} of volcano.networkTopologyDiscovery topology {name!r}, "
                    f"node label {level.node_label}")
        if not match and value in keys:
            return f"{setting} {value}: tier {keys.index(value) + 1} of volcano.networkTopologyDiscovery topology {name!r}"
    return f"{setting} {value}: level {level.describe()}"
