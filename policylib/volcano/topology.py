"""The Volcano Job policy's network topology: whether ``volcano.networkTopology`` is written (rule V25) and
whether the partitions fit the HyperNodes it allows (rules V18, V26), the verdict ``simulate`` and ``check``
share through :func:`policylib.hypernodes.partition_bound`."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import Config, VolcanoSettings
from ..facts import ClusterFacts
from ..hypernodes import PartitionBound, hypernodes_given, partition_bound, scheduler_hypernodes
from ..kubescheduler.fit import pods_per_node
from ..result import Outcome
from ..volcano_api.partitions import unenforced_partition_tier_name

# --- feasibility (rule V18) -----------------------------------------------------

def partition_feasibility(task: dict[str, Any], hypernodes: list[dict[str, Any]],
                          nodes: list[dict[str, Any]]) -> tuple[str, bool]:
    """Rule V18: whether each partition fits inside one of the HyperNodes its network topology allows
    (:func:`policylib.hypernodes.partition_bound`, rule V26, the candidates ``simulate`` places in too).

    Capacity counts one pod per node unless requests and node allocatable are
    both known, then how many pods each node's allocatable holds; a node the
    scheduler's eligibility filters refuse the pod holds none
    (:func:`policylib.kubescheduler.fit.pods_per_node`, the registry ``simulate`` runs).
    """
    bound = partition_bound(task["partitionPolicy"], hypernodes, nodes)
    if not bound.bounded:
        return f"task {task.get('name')}: its partitions are not bounded by a HyperNode: {bound.why}", True
    return _capacity_verdict(task, bound, nodes)


def hypernode_capacities(template: dict[str, Any] | None, bound: PartitionBound,
                         nodes: list[dict[str, Any]]) -> tuple[list[tuple[int, int]], bool]:
    """Rule V18: how many of a task's pods each candidate HyperNode of ``bound`` holds, with its tier, and whether
    every figure is exact: a Node holds :func:`policylib.kubescheduler.fit.pods_per_node` of them, one where
    that is unknown (no requests, no allocatable, a Node not in the input) or no pod ``template`` is given."""
    by_name = {n["metadata"]["name"]: n for n in nodes}
    capacities = []
    exact = True
    for _, domain_tier, members in bound.domains:
        per_node = [pods_per_node(template, by_name[n]) if template is not None and n in by_name else None
                    for n in members]
        exact = exact and all(p is not None for p in per_node)
        capacities.append((sum(1 if p is None else p for p in per_node), domain_tier))
    return capacities, exact


def _capacity_verdict(task: dict[str, Any], bound: PartitionBound, nodes: list[dict[str, Any]]) -> tuple[str, bool]:
    policy = task["partitionPolicy"]
    name, size, total = task.get("name"), policy["partitionSize"], policy["totalPartitions"]
    tier = bound.tier
    capacities, exact = hypernode_capacities(task.get("template") or {}, bound, nodes)
    if not capacities:
        return f"task {name}: no HyperNode of tier <= {tier} exists", False
    highest = max(t for _, t in capacities)
    top = [c for c, t in capacities if t == highest]
    placeable = sum(c // size for c in top)
    largest = max(c for c, _ in capacities)
    basis = "by allocatable" if exact else "counting one pod per node"
    need = f"task {name}: {total} partitions of {size} pods each need one tier-{tier} HyperNode holding {size} pods"
    if largest < size:
        return f"{need}; the largest holds {largest} pods ({basis})", False
    if placeable < total:
        return (f"{need}; the {len(top)} tier-{tier} HyperNodes hold {sum(top)} pods ({basis}), room for "
                f"{placeable} partitions"), False
    return (f"task {name}: {total} partitions of {size} pods each fit in one tier-{tier} HyperNode ({largest} pods "
            f"{basis}); {len(top)} tier-{tier} HyperNodes hold {sum(top)} pods"), True


# --- the network topology written (rule V25) --------------------------------------------------------

#: The first Volcano release that schedules a partitioned task without a network topology (volcano issue
#: 4871; fixed by PR 5038, cherry-picked to v1.14.1 as PR 5041).
PARTITIONS_WITHOUT_TOPOLOGY_FROM = (1, 14, 1)


def partitions_without_topology_schedule(version: str) -> bool:
    return tuple(int(x) for x in version.lstrip("v").split(".")[:3]) >= PARTITIONS_WITHOUT_TOPOLOGY_FROM


def _topology_text(spec: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in spec.items()) + "}"


#: Rule V25's warning (within the 120 characters a webhook warning keeps, rule W3): it names the setting to enable.
UNWRITTEN_TOPOLOGY = ("hard volcano.networkTopology not written (no HyperNodes): enable a label source in "
                      "volcano.networkTopologyDiscovery")


def written_topology(settings: VolcanoSettings, facts: ClusterFacts) -> tuple[VolcanoSettings, str | None]:
    """Rule V25: the settings partitions are written with, and why ``volcano.networkTopology`` is left out.

    A hard network topology is written only where something gives the scheduler HyperNodes to meet it:
    HyperNode objects (the input's) or an enabled source of ``volcano.networkTopologyDiscovery``. With no
    HyperNode, Volcano's scheduler meets a hard bound of tier >= 1 with its virtual cluster-top HyperNode
    (every Node), so the bound does nothing; the partitionPolicy cannot change after CREATE, so the bound would
    hold the Job's partitions the day HyperNodes appear."""
    topology = settings.networkTopology
    if topology is None or topology.mode != "hard" or hypernodes_given(settings.networkTopologyDiscovery,
                                                                       facts.hypernodes):
        return settings, None
    return replace(settings, networkTopology=None), (
        f"volcano.networkTopology {_topology_text(topology.as_spec())} not written: nothing gives the scheduler "
        "HyperNodes to meet it (no enabled source in volcano.networkTopologyDiscovery, no HyperNode object), and "
        "without any Volcano places every partition anywhere")


def feasibility_notes(tasks: list[dict[str, Any]], config: Config, facts: ClusterFacts, notes: Outcome) -> None:
    """Rules V18, V26: with Nodes in the input: does each partition fit (see :func:`partition_feasibility`),
    and does a hard ``highestTierName`` name a tier that exists (one that does not is
    silently not enforced by the scheduler)? The HyperNodes are the input's and label discovery's (rule V26)."""
    partitioned = [t for t in tasks if isinstance(t.get("partitionPolicy"), dict)]
    if not partitioned or not facts.nodes:
        return
    hypernodes, unknown = scheduler_hypernodes(config.volcano.networkTopologyDiscovery, facts.nodes, facts.hypernodes)
    if unknown:
        notes.reason(f"feasibility not checked: {unknown}")
        return
    tier_names = {h["spec"].get("tierName") for h in hypernodes}
    for task in partitioned:
        topo = task["partitionPolicy"].get("networkTopology") or {}
        name = topo.get("highestTierName") if isinstance(topo, dict) else None
        if name and topo.get("mode", "hard") == "hard" and name not in tier_names:
            notes.warn(f"task {task.get('name')}: highestTierName {name!r} matches no HyperNode tierName; "
                                  "the scheduler will not enforce it")
        if unenforced_partition_tier_name(task["partitionPolicy"], config.volcano.version):
            notes.reason(f"task {task.get('name')}: feasibility not checked: Volcano "
                                 f"{config.volcano.version} places its partitions without a HyperNode bound")
            continue
        message, ok = partition_feasibility(task, hypernodes, facts.nodes)
        notes.note(message, ok)
