"""The one topology declaration, resolved (rules N1-N3): the cluster's levels, widest first, and the placement every
writer turns into its scheduler's words.

``topology.levels`` declares the levels (``{name, nodeLabel}``, widest first); without it the levels are derived
from the older keys (rule N2): ``zoneTopologySpread.topologyKey`` (named ``zone``), the tiers of
``volcano.networkTopologyDiscovery``'s enabled label topologies (named ``tier-N``) and
``hostTopologySpread.topologyKey`` (named ``host``). A level's Volcano tier (rule N3) is its distance from the
nodes, as Volcano's label discovery numbers HyperNode tiers: the node label list is walked bottom-up, its last
entry (``kubernetes.io/hostname``, the nodes) skipped, so the level just above the nodes is tier 1.

Every writer reads :func:`placement` and nothing else: no writer derives levels of its own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..constants import HOSTNAME_LABEL
from ..labels import tier_labels

NONE = "none"
REQUIRED, PREFERRED = "required", "preferred"
#: An older key's ``tier-N`` (rules G25, J5).
TIER = re.compile(r"tier-([1-9][0-9]*)")


@dataclass(frozen=True)
class Level:
    """One topology level: its name, the node label whose values are its domains, its Volcano tier (rule N3;
    None for the node level itself) and the setting that declared it."""

    name: str
    node_label: str
    tier: int | None
    source: str

    def describe(self) -> str:
        tier = f", Volcano tier {self.tier}" if self.tier is not None else ""
        return f"{self.name} ({self.node_label}{tier})"


@dataclass(frozen=True)
class Placement:
    """Rules N1 and N2: the resolved declaration. ``within``: the level every gang is kept within (None: no
    constraint), ``mode`` required or preferred, ``within_setting`` the key that said so; ``job_per_domain``: the
    level each Job of a JobSet gets a domain of to itself, ``job_setting`` the key that said so; ``declared``:
    whether ``topology.levels`` was given (else the levels are derived)."""

    levels: tuple[Level, ...]
    within: Level | None = None
    mode: str = REQUIRED
    within_setting: str = "topology.gangs.within"
    job_per_domain: Level | None = None
    job_setting: str = "topology.jobSets.jobPerDomain"
    declared: bool = False

    def level(self, name: str) -> Level | None:
        return next((lv for lv in self.levels if lv.name == name), None)

    def by_label(self, label: str) -> Level | None:
        return next((lv for lv in self.levels if lv.node_label == label), None)

    def by_tier(self, tier: int) -> Level | None:
        return next((lv for lv in self.levels if lv.tier == tier), None)

    def describe_within(self) -> str:
        """``topology.gangs.within rack (example.com/rack, Volcano tier 1), required``."""
        if self.within is None:
            return f"{self.within_setting} none"
        return f"{self.within_setting} {self.within.describe()}, {self.mode}"


def volcano_tiers(labels: Sequence[str]) -> list[int | None]:
    """Rule N3: the Volcano tier of each level of ``labels`` (widest first): the distance from the nodes, the node
    level (``kubernetes.io/hostname``, last) itself tierless; without a node level the last level is tier 1."""
    n = len(labels)
    host_last = bool(labels) and labels[-1] == HOSTNAME_LABEL
    return [None if host_last and i == n - 1 else (n - 1 - i if host_last else n - i) for i in range(n)]


def declared_levels(pairs: Sequence[tuple[str, str]]) -> tuple[Level, ...]:
    """Rule N1: the levels ``topology.levels`` declares, with their tiers."""
    tiers = volcano_tiers([label for _, label in pairs])
    return tuple(Level(name, label, tier, f"topology.levels[{i}]")
                 for i, ((name, label), tier) in enumerate(zip(pairs, tiers, strict=True)))


def discovery_tiers(volcano: Any) -> list[tuple[str, list[str]]]:
    """(topology name, its tier label keys, tier 1 first) of every enabled label topology of
    ``volcano.networkTopologyDiscovery``."""
    return [(name, tier_labels(keys)) for source in volcano.networkTopologyDiscovery
            if source.source == "label" and source.enabled for name, keys in source.topologies]


def derived_levels(config: Any) -> tuple[Level, ...]:
    """Rule N2: without ``topology.levels``, the levels the older keys declare, widest first: the zone key, the
    tiers of the enabled label topologies (highest tier first; a tier whose topologies name different labels is
    listed once per label), then the host key. A label is listed once."""
    zone, host = config.zoneTopologySpread.topologyKey, config.hostTopologySpread.topologyKey
    tiered: dict[str, int] = {}
    for _, keys in discovery_tiers(config.volcano):
        for n, key in enumerate(keys, 1):
            tiered.setdefault(key, n)
    out = [Level("zone", zone, tiered.get(zone), "zoneTopologySpread.topologyKey")]
    for key, n in sorted(tiered.items(), key=lambda kv: -kv[1]):
        if key in (zone, host):
            continue
        name = f"tier-{n}" if not any(lv.name == f"tier-{n}" for lv in out) else f"tier-{n}-{len(out)}"
        out.append(Level(name, key, n, "volcano.networkTopologyDiscovery"))
    if host != zone:
        out.append(Level("host", host, tiered.get(host), "hostTopologySpread.topologyKey"))
    return tuple(out)


def old_key_level(levels: Sequence[Level], value: str, zone_key: str) -> Level | None:
    """Rules G25 and J5 read against the levels (rule N2): the level an older key's value names: ``zone`` the zone
    key's, ``tier-N`` the level of Volcano tier N, a node label key the level of that label; None for ``none``
    or a value no level has."""
    if value == NONE:
        return None
    label = zone_key if value == "zone" else value
    match = TIER.fullmatch(value)
    if match:
        return next((lv for lv in levels if lv.tier == int(match.group(1))), None)
    return next((lv for lv in levels if lv.node_label == label), None)


def placement(config: Any) -> Placement:
    """Rules N1 and N2: the declaration every writer reads, resolved once per configuration
    (``Config.placement``, :func:`resolve_placement`)."""
    return config.placement  # type: ignore[no-any-return]


def resolve_placement(config: Any) -> Placement:
    """Rules N1 and N2: the declaration resolved. With ``topology.levels``: its levels,
    ``topology.gangs`` and ``topology.jobSets`` (loading has checked that the older keys agree). Without: the
    derived levels, ``gang.topology`` as a required placement and ``gang.jobSetExclusiveTopology``."""
    section = config.topology
    if section.levels:
        levels = declared_levels(section.levels)
        within = next((lv for lv in levels if lv.name == section.gangs.within), None)
        per_domain = next((lv for lv in levels if lv.name == section.jobSets.jobPerDomain), None)
        return Placement(levels, within, section.gangs.mode, "topology.gangs.within", per_domain,
                         "topology.jobSets.jobPerDomain", True)
    levels = derived_levels(config)
    zone = config.zoneTopologySpread.topologyKey
    return Placement(levels, old_key_level(levels, config.gang.topology, zone), REQUIRED, "gang.topology",
                     old_key_level(levels, config.gang.jobSetExclusiveTopology, zone), "gang.jobSetExclusiveTopology",
                     False)


def gang_words_reason(config: Any, p: Placement) -> str | None:
    """Rules N4 and N5: the one reason for the gang scheduler's words when the scheduler has none to write:
    kube-scheduler for a preferred placement (its ``schedulingConstraints.topology`` is required only),
    scheduler-plugins, ACK and Koordinator (their gangs carry no topology). None where the words are written
    (their writers give the reason) or there is no placement."""
    if p.within is None:
        return None
    method, scheduler = config.gang.method, config.gang.scheduler
    if method == "workload" and p.mode == PREFERRED:
        return (f"{p.describe_within()}: kube-scheduler: schedulingConstraints.topology not written: it is a "
                "required placement only, and kube-scheduler has no preferred word")
    if method == "workload" or (method == "podgroup" and scheduler == "volcano"):
        return None
    return (f"{p.describe_within()}: {scheduler}: nothing written: its gang (method {method}) has no topology "
            "words")
