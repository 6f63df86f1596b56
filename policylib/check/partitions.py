"""Volcano's partitions against the HyperNodes (rules V25, V26)."""
from __future__ import annotations

from typing import Any, Sequence

from ..config import Config
from ..facts import ClusterFacts
from ..hypernodes import partition_bound, scheduler_hypernodes
from ..volcano.topology import UNWRITTEN_TOPOLOGY, hypernode_capacities, written_topology
from .finding import Finding


def check_partitions(config: Config, nodes: list[dict[str, Any]],
                     objects: Sequence[dict[str, Any]] = ()) -> list[Finding]:
    """Rules V25 and V26 on the settings: whether ``volcano.networkTopology`` is written at all (what ``preview``
    warns per Job), and whether the HyperNodes it allows (:func:`policylib.hypernodes.partition_bound`, the
    candidates ``preview`` and ``simulate`` use) hold a partition of ``partitionSize``, counted by the partition
    verdict's capacity model (:func:`policylib.volcano.topology.hypernode_capacities`; without a pod, one per node)."""
    size = config.volcano.partitionSize
    if size is None or not config.volcano.enabled:
        return []
    facts = ClusterFacts.from_objects(objects)
    settings, unwritten = written_topology(config.volcano, facts)
    if unwritten:
        return [Finding("warning", "volcano.networkTopologyDiscovery", f"{UNWRITTEN_TOPOLOGY}: {unwritten}")]
    topology = settings.networkTopology
    if topology is None or not nodes:
        return []
    hypernodes, unknown = scheduler_hypernodes(config.volcano.networkTopologyDiscovery, nodes, facts.hypernodes)
    if unknown:
        return [Finding("info", "volcano.networkTopologyDiscovery", f"partitions not checked: {unknown}")]
    if not hypernodes:
        return [Finding("warning", "volcano.networkTopologyDiscovery",
                        "no Node carries any of the configured topology labels: no HyperNode would be discovered, "
                        "and the hard network topology bounds nothing until HyperNodes appear")]
    bound = partition_bound({"networkTopology": topology.as_spec()}, hypernodes, nodes)
    if not bound.bounded:
        return []
    largest = max((pods for pods, _ in hypernode_capacities(None, bound, nodes)[0]), default=0)
    if largest < size:
        return [Finding("error", "volcano.partitionSize",
                        f"partitionSize {size} needs {size} nodes inside one HyperNode of tier <= {bound.tier}; the "
                        f"largest has {largest} (counting one pod per node): every partitioned Job would stay Pending")]
    return []
