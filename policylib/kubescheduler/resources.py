"""What a pod requests and whether it fits a node: defined once, for ``simulate`` and ``check``.

Rule R1: ``k8s.io/component-helpers/resource`` ``PodRequests`` as kube-scheduler 1.36 calls it (PodLevelResources
on, overhead included): the containers' requests summed; a restartable init container (a sidecar,
``restartPolicy: Always``) adds to that sum and stays for every later init container; each other init container
needs its own requests plus the sidecars started before it; the pod requests the larger of the two. Pod-level
``spec.resources.requests`` of cpu, memory and hugepages-* replace the containers' figure. A container (or the
pod) that limits a resource without requesting it requests its limit (the API server's defaulting).
"""
from __future__ import annotations

import math
from typing import Any

from .. import quantity

#: What NodeResourcesFit's and BalancedAllocation's scoring assume for a container that requests no cpu or memory
#: (``pkg/scheduler/util`` DefaultMilliCPURequest, DefaultMemoryRequest).
DEFAULT_CPU_MILLI, DEFAULT_MEMORY = 100, 200 * 1024 * 1024
NON_MISSING = {"cpu": DEFAULT_CPU_MILLI, "memory": DEFAULT_MEMORY}


def amounts(resources: Any) -> dict[str, int]:
    """A ResourceList as integers: CPU in millicores, everything else in its unit."""
    out: dict[str, int] = {}
    if not isinstance(resources, dict):
        return out
    for name, value in resources.items():
        try:
            q = quantity.parse_quantity(value)
        except ValueError:
            continue
        out[name] = math.ceil(q * 1000) if name == "cpu" else math.ceil(q)
    return out


def _pod_level_supported(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _container_requests(container: Any, non_missing: dict[str, int] | None) -> dict[str, int]:
    res = (container.get("resources") or {}) if isinstance(container, dict) else {}
    res = res if isinstance(res, dict) else {}
    raw = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    out = amounts(raw)
    for k, v in (non_missing or {}).items():
        if k not in raw:
            out[k] = out.get(k, 0) + v
    return out


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def _max(total: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        if v > total.get(k, 0):
            total[k] = v


def pod_requests(spec: dict[str, Any], non_missing: dict[str, int] | None = None,
                 pod_level: bool = True) -> dict[str, int]:
    """Rule R1: what a pod with this spec requests (``non_missing``: the amounts scoring assumes for a container
    that requests nothing of a resource, as ``PodResourcesOptions.NonMissingContainerRequests``; ``pod_level``
    False: the containers' figure alone, as ``SkipPodLevelResources``)."""
    reqs: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(reqs, _container_requests(c, non_missing))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        mine = _container_requests(c, non_missing)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":
            _add(reqs, mine)
            _add(sidecars, mine)
            need = dict(sidecars)
        else:
            need = dict(mine)
            _add(need, sidecars)
        _max(init_max, need)
    _max(reqs, init_max)
    level: dict[str, Any] = spec["resources"] if pod_level and isinstance(spec.get("resources"), dict) else {}
    raw = {**(level.get("limits") or {}), **(level.get("requests") or {})}
    raw = {k: v for k, v in raw.items() if _pod_level_supported(str(k))}
    reqs.update(amounts(raw))
    _add(reqs, amounts(spec.get("overhead")))
    return reqs


def fits(requests: dict[str, int], allocatable: dict[str, Any], requested: dict[str, Any], pods: Any,
         max_pods: Any) -> Any:
    """Rule R2: NodeResourcesFit's filter: one more pod within the node's pod count, and every resource the pod
    requests (more than zero of) within allocatable minus what the bound pods request. Works on one node's
    integers or on arrays of every node's (then it returns an array of booleans)."""
    ok = pods + 1 <= max_pods
    for k, v in requests.items():
        if v > 0:
            ok = ok & (requested.get(k, 0) + v <= allocatable.get(k, 0))
    return ok
