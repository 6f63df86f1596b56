"""The topology level a native gang must fit in (rule G25): ``gang.topology`` read against the topology the
configuration already declares, the zone key (``zoneTopologySpread.topologyKey``) and the tiers of Volcano's
label discovery (``volcano.networkTopologyDiscovery``: node label keys, top tier first, the node level last;
tier 1 is the one just above the nodes, as :func:`policylib.labels.tier_labels` reads them).

The key becomes the PodGroup's ``spec.schedulingConstraints.topology: [{key}]``: kube-scheduler's
``TopologyPlacement`` plugin (``pkg/scheduler/framework/plugins/topologyaware``, behind the
``TopologyAwareWorkloadScheduling`` gate) then places the whole gang inside the Nodes of one value of that label.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.validate import TIER, label_tiers


@dataclass(frozen=True)
class TopologyLevel:
    """Rule G25: the Node label key a gang's pods must share one value of, and what in the config named it."""

    key: str
    why: str


def gang_topology(config: Any) -> TopologyLevel | None:
    """Rule G25: the level ``gang.topology`` names for a native gang, or None (``none``, another method, or a
    level the configuration does not declare: loading refuses that, see :func:`policylib.config.validate.topology_errors`)."""
    if config.gang.method != "workload":
        return None
    return topology_level(config, "gang.topology", config.gang.topology)


def topology_level(config: Any, setting: str, value: str) -> TopologyLevel | None:
    """Rules G25 and J5: the Node label key a level setting (``setting``, its ``value``) names: ``zone`` the
    zone spread's key, ``tier-N`` or a label key a tier of ``volcano.networkTopologyDiscovery``'s label
    topologies; None for ``none`` (or a level the configuration does not declare, which loading refuses)."""
    if value == "none":
        return None
    if value == "zone":
        return TopologyLevel(config.zoneTopologySpread.topologyKey,
                             f"{setting} zone: zoneTopologySpread.topologyKey {config.zoneTopologySpread.topologyKey}")
    match = TIER.fullmatch(value)
    for name, keys in label_tiers(config.volcano):
        if match and int(match.group(1)) <= len(keys):
            key = keys[int(match.group(1)) - 1]
            return TopologyLevel(key, f"{setting} {value}: tier {match.group(1)} of volcano.networkTopologyDiscovery "
                                      f"topology {name!r}, node label {key}")
        if not match and value in keys:
            return TopologyLevel(value, f"{setting} {value}: tier {keys.index(value) + 1} of "
                                        f"volcano.networkTopologyDiscovery topology {name!r}")
    return None
