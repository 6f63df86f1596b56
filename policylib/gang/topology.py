"""The topology level a native gang must fit in (rule G25): ``gang.topology`` read against the topology the
configuration already declares, the zone key (``zoneTopologySpread.topologyKey``) and the tiers of Volcano's
label discovery (``volcano.networkTopologyDiscovery``: node label keys, top tier first, the node level last;
tier 1 is the one just above the nodes, as :func:`policylib.labels.tier_labels` reads them).

The key becomes the PodGroup's ``spec.schedulingConstraints.topology: [{key}]``: kube-scheduler's
``TopologyPlacement`` plugin (``pkg/scheduler/framework/plugins/topologyaware``, behind the
``TopologyAwareWorkloadScheduling`` gate) then places the whole gang inside the Nodes of one value of that label.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..constants import HOSTNAME_LABEL
from ..errors import ErrorType, FieldError
from ..labels import tier_labels

TIER = re.compile(r"tier-([1-9][0-9]*)")


@dataclass(frozen=True)
class TopologyLevel:
    """Rule G25: the Node label key a gang's pods must share one value of, and what in the config named it."""

    key: str
    why: str


def _tiers(volcano: Any) -> list[tuple[str, list[str]]]:
    """(topology name, its tier label keys, tier 1 first) of every enabled label topology of the discovery."""
    return [(name, tier_labels(keys)) for source in volcano.networkTopologyDiscovery
            if source.source == "label" and source.enabled for name, keys in source.topologies]


def gang_topology(config: Any) -> TopologyLevel | None:
    """Rule G25: the level ``gang.topology`` names for a native gang, or None (``none``, another method, or a
    level the configuration does not declare: loading refuses that, see :func:`topology_errors`)."""
    gang = config.gang
    value = gang.topology
    if value == "none" or gang.method != "workload":
        return None
    if value == "zone":
        return TopologyLevel(config.zoneTopologySpread.topologyKey,
                             f"gang.topology zone: zoneTopologySpread.topologyKey {config.zoneTopologySpread.topologyKey}")
    match = TIER.fullmatch(value)
    for name, keys in _tiers(config.volcano):
        if match and int(match.group(1)) <= len(keys):
            key = keys[int(match.group(1)) - 1]
            return TopologyLevel(key, f"gang.topology {value}: tier {match.group(1)} of volcano.networkTopologyDiscovery "
                                      f"topology {name!r}, node label {key}")
        if not match and value in keys:
            return TopologyLevel(value, f"gang.topology {value}: tier {keys.index(value) + 1} of "
                                        f"volcano.networkTopologyDiscovery topology {name!r}")
    return None


def topology_errors(gang: Any, volcano: Any) -> list[FieldError]:
    """Rule G25: a ``gang.topology`` the configuration does not declare: a tier that no enabled label topology of
    ``volcano.networkTopologyDiscovery`` has, a tier number whose topologies name different keys, a label key
    listed as no tier."""
    value = gang.topology
    if value in ("none", "zone"):
        return []
    tiers = _tiers(volcano)
    if not tiers:
        return [FieldError(ErrorType.INVALID, "gang.topology", value,
                           "names a tier, but volcano.networkTopologyDiscovery declares no enabled label topology: "
                           f"list the node labels of the tiers there (top tier first, {HOSTNAME_LABEL} last), "
                           "or use zone")]
    match = TIER.fullmatch(value)
    if match:
        n = int(match.group(1))
        keys = sorted({keys[n - 1] for _, keys in tiers if n <= len(keys)})
        if not keys:
            deepest = max(len(keys) for _, keys in tiers)
            return [FieldError(ErrorType.INVALID, "gang.topology", value,
                               f"volcano.networkTopologyDiscovery's label topologies have at most {deepest} tier(s)")]
        if len(keys) > 1:
            return [FieldError(ErrorType.INVALID, "gang.topology", value,
                               f"tier {n} is a different node label in each label topology ({', '.join(keys)}): "
                               "name the tier by its label key")]
        return []
    listed = sorted({k for _, keys in tiers for k in keys})
    if value not in listed:
        return [FieldError(ErrorType.INVALID, "gang.topology", value,
                           f"is not a tier of volcano.networkTopologyDiscovery (its tiers' node labels: "
                           f"{', '.join(listed)}); use none, zone, tier-N or one of those")]
    return []
