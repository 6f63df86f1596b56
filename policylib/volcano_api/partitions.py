"""Volcano's network topology and partition policy rules, ported (admit_job.go validatePartitionPolicy and the
v1.14+ partitionPolicy rules; rules V4-V7, V20), and the Volcano releases they differ between."""
from __future__ import annotations

from typing import Any

from ..constants import VOLCANO_VERSION
from ..errors import (
    FieldError,
    Path,
    as_path,
    forbidden,
    invalid,
    is_int,
    not_supported,
    required,
)
from ..quantity import whole_units

NETWORK_TOPOLOGY_MODES = ("hard", "soft")


def is_soft(topology: Any) -> bool:
    return isinstance(topology, dict) and topology.get("mode") == "soft"


def validate_network_topology(spec: Any, path: Path) -> list[FieldError]:
    """Rule V4: mode hard or soft; highestTierAllowed and highestTierName are exclusive; a hard mode
    without either is not enforced by the scheduler."""
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [invalid(path, spec, "must be an object")]
    path = as_path(path)
    errs = []
    if spec.get("mode", "hard") not in NETWORK_TOPOLOGY_MODES:
        errs.append(not_supported(path.child("mode"), spec.get("mode"), NETWORK_TOPOLOGY_MODES))
    tier, name = spec.get("highestTierAllowed"), spec.get("highestTierName")
    if tier is not None and (not is_int(tier) or tier < 1):
        errs.append(invalid(path.child("highestTierAllowed"), tier, "must be an integer >= 1"))
    if name is not None and (not isinstance(name, str) or not name):
        errs.append(invalid(path.child("highestTierName"), name, "must be a non-empty tier name"))
    if tier is not None and name:
        errs.append(forbidden(path, "highestTierAllowed and highestTierName are exclusive: set one"))
    if spec.get("mode", "hard") == "hard" and tier is None and not name:
        errs.append(required(path, "hard mode needs highestTierAllowed or highestTierName; without one the "
                                   "Volcano scheduler silently does not enforce it"))
    return errs


def validate_partition_topology_mode(topology: Any, path: Path) -> list[FieldError]:
    """Rule V5: a partition policy does not support a soft network topology."""
    if not is_soft(topology):
        return []
    return [forbidden(as_path(path).child("mode"), "soft mode is not supported with a partition policy")]


#: Volcano releases whose job admission requires a task's minAvailable to equal minPartitions *
#: partitionSize even when minPartitions is omitted (0); later ones check it only for minPartitions > 0
#: (volcano issue 5401, fixed in v1.14.3 and v1.15.1).
STRICT_MIN_PARTITIONS = ("v1.14.0", "v1.14.1", "v1.14.2", "v1.15.0")


DEFAULT_VOLCANO_VERSION = VOLCANO_VERSION


def strict_min_partitions(version: str) -> bool:
    return version in STRICT_MIN_PARTITIONS


def partition_tier_name_enforced(version: str) -> bool:
    """Rule V20: whether Volcano's scheduler honours a partition's ``networkTopology.highestTierName``: from
    v1.15.0 (volcano issue 5189). Before, a partition bounded only by a tier name is not constrained at all
    (seen on vc-scheduler v1.14.1: a partition's two pods bound in two tier-1 HyperNodes)."""
    major, minor, _ = (int(x) for x in version.lstrip("v").split("."))
    return (major, minor) >= (1, 15)


def unenforced_partition_tier_name(policy: object, version: str) -> str | None:
    """Rule V20: the tier name a partitionPolicy is bounded by that ``version``'s scheduler ignores, or None."""
    topo = policy.get("networkTopology") if isinstance(policy, dict) else None
    if not isinstance(topo, dict) or partition_tier_name_enforced(version):
        return None
    if topo.get("highestTierName") and topo.get("highestTierAllowed") is None:
        return str(topo["highestTierName"])
    return None


def validate_partition_policy(task: dict[str, Any], path: Path, version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    """Rule V6: replicas == totalPartitions * partitionSize; minPartitions <= totalPartitions; a task
    minAvailable equals minPartitions * partitionSize when minPartitions > 0 (always, in the releases
    of :data:`STRICT_MIN_PARTITIONS`) (admit_job.go validatePartitionPolicy)."""
    pp = task.get("partitionPolicy")
    if pp is None:
        return []
    path = as_path(path)
    p = path.child("partitionPolicy")
    if not isinstance(pp, dict):
        return [invalid(p, pp, "must be an object")]
    errs = []
    total, size, min_parts = pp.get("totalPartitions"), pp.get("partitionSize"), pp.get("minPartitions", 0)
    for key, value in (("totalPartitions", total), ("partitionSize", size)):
        if not is_int(value) or value < 1:
            errs.append(invalid(p.child(key), value, "must be an integer >= 1"))
    if not is_int(min_parts) or min_parts < 0:
        errs.append(invalid(p.child("minPartitions"), min_parts, "must be an integer >= 0"))
    if errs:
        return errs
    assert isinstance(total, int) and isinstance(size, int) and isinstance(min_parts, int)  # checked above
    replicas = task.get("replicas", 0)
    if replicas != total * size:
        errs.append(invalid(path.child("replicas"), replicas, "must equal totalPartitions * partitionSize "
                                                              f"({total} * {size} = {total * size})"))
    if min_parts > total:
        errs.append(invalid(p.child("minPartitions"), min_parts, f"must be <= totalPartitions {total}"))
    if task.get("minAvailable") is not None and (min_parts > 0 or strict_min_partitions(version)) \
            and task["minAvailable"] != min_parts * size:
        errs.append(invalid(path.child("minAvailable"), task["minAvailable"],
                            f"must equal minPartitions * partitionSize ({min_parts} * {size} = {min_parts * size})"))
    errs += validate_network_topology(pp.get("networkTopology"), p.child("networkTopology"))
    errs += validate_partition_topology_mode(pp.get("networkTopology"), p.child("networkTopology"))
    return errs


def validate_task_topology_policy(task: dict[str, Any], path: Path) -> list[FieldError]:
    """Rule V7: a task with a topologyPolicy (other than none) needs a whole number of CPUs requested
    by every container and init container; a container without requests uses its limits
    (admit_job.go validateTaskTopoPolicy, guaranteedCPUs)."""
    policy = task.get("topologyPolicy")
    if not policy or policy == "none":
        return []
    pod = ((task.get("template") or {}).get("spec") or {}) if isinstance(task.get("template"), dict) else {}
    containers = [("containers", i, c) for i, c in enumerate(pod.get("containers") or [])] + \
        [("initContainers", i, c) for i, c in enumerate(pod.get("initContainers") or [])]
    for group, i, container in containers:
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        requests = resources.get("requests") or resources.get("limits") or {}
        if not whole_units(requests.get("cpu")):
            return [invalid(as_path(path).child("template", "spec", group).index(i).child("resources", "requests", "cpu"),
                            requests.get("cpu"),
                            f"the cpu request isn't an integer (topologyPolicy {policy} needs whole CPUs)")]
    return []
