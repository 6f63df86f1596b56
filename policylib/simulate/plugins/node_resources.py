"""NodeResourcesFit and NodeResourcesBalancedAllocation (``pkg/scheduler/framework/plugins/noderesources``):
requests within allocatable filter, LeastAllocated and the balance of cpu and memory score.

The fit and both scores of a pod shape are kept by the cluster across workloads (:meth:`Cluster.resources`):
after a bind only the bound node's entries are recomputed (:func:`refresh_resources`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..framework import MAX_SCORE, Plugin, np
from ..model import PodShape
from ..resources import fits

if TYPE_CHECKING:
    from ..engine import Cluster, Cycle

FIT = "NodeResourcesFit"
BALANCED = "NodeResourcesBalancedAllocation"
MSG_TOO_MANY_PODS = "Too many pods"
MSG_INSUFFICIENT = "Insufficient {resource}"


def least_allocated(pod: PodShape, c: Cluster) -> np.ndarray:
    """Rule R10: NodeResourcesFit's score (LeastAllocated, cpu and memory weight 1): the free share after the pod, with pods
    that request nothing counted as 100m cpu and 200Mi memory; resources a node has none of are left out."""
    total = np.zeros(len(c.states), dtype=np.int64)
    for k in ("cpu", "memory"):
        alloc = c.alloc[k]
        used = c.nonzero[k] + pod.fit_score.get(k, 0)
        total = total + np.where(used <= alloc, (alloc - used) * MAX_SCORE // c.safe[k], 0)
    out: np.ndarray = total // c.weights
    return out


def balance(cpu: np.ndarray, memory: np.ndarray, c: Cluster) -> np.ndarray:
    fc = np.minimum(cpu / c.safe["cpu"], 1.0)
    fm = np.minimum(memory / c.safe["memory"], 1.0)
    out: np.ndarray = ((1 - np.abs(fc - fm) * c.half_both) * MAX_SCORE).astype(np.int64)
    return out


def balanced_allocation(pod: PodShape, c: Cluster) -> np.ndarray:
    """Rule R12: NodeResourcesBalancedAllocation (1.36): 50 + (50 + balance with the pod - balance without it) / 2, the balance
    being 100 x (1 - std of the cpu and memory fractions); skipped (0) for a pod that requests neither."""
    cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if not cpu and not memory:
        return np.zeros(len(c.states), dtype=np.int64)
    after = balance(c.req["cpu"] + cpu, c.req["memory"] + memory, c)
    out: np.ndarray = MAX_SCORE // 2 + (MAX_SCORE // 2 + after - c.balance) // 2
    return out


def least_one(alloc: tuple[int, int], used: tuple[int, int]) -> int:
    """:func:`least_allocated` for one node (the incremental update after a bind)."""
    total = weights = 0
    for a, u in zip(alloc, used, strict=True):
        if a > 0:
            total += (a - u) * MAX_SCORE // a if u <= a else 0
            weights += 1
    return total // weights if weights else 0


def balance_one(requested: tuple[int, int], alloc: tuple[int, int]) -> int:
    both = alloc[0] > 0 and alloc[1] > 0
    std = abs(min(requested[0] / alloc[0], 1.0) - min(requested[1] / alloc[1], 1.0)) / 2 if both else 0.0
    return int((1 - std) * MAX_SCORE)


def resource_key(pod: PodShape) -> tuple[Any, ...]:
    """What :func:`fits`, :func:`least_allocated` and :func:`balanced_allocation` read of a pod."""
    return tuple(sorted(pod.requests.items())), tuple(sorted(pod.fit_score.items()))


def refresh_resources(c: Cluster, pod: PodShape, i: int, fit: np.ndarray, least: np.ndarray,
                       balanced: np.ndarray) -> None:
    """Node i's entries of :func:`fits`, :func:`least_allocated` and :func:`balanced_allocation` for ``pod``, from the
    node's state (after a bind there; ``c.balance`` already holds the node's balance without the pod)."""
    node = c.states[i]
    requested, allocatable = node.requested, node.allocatable
    fit[i] = fits(pod.requests, allocatable, requested, node.pods, allocatable.get("pods", 0))
    alloc = (allocatable.get("cpu", 0), allocatable.get("memory", 0))
    least[i] = least_one(alloc, (node.nonzero.get("cpu", 0) + pod.fit_score.get("cpu", 0),
                                  node.nonzero.get("memory", 0) + pod.fit_score.get("memory", 0)))
    cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if cpu or memory:
        after = balance_one((requested.get("cpu", 0) + cpu, requested.get("memory", 0) + memory), alloc)
        balanced[i] = MAX_SCORE // 2 + (MAX_SCORE // 2 + after - int(c.balance[i])) // 2


@dataclass
class Resources:
    """The fit, LeastAllocated and BalancedAllocation arrays of one pod's cycle (every node)."""

    fit: np.ndarray
    least: np.ndarray
    balanced: np.ndarray
    key: tuple[Any, ...] | None      # the cluster's cache entry they are kept in (None: recomputed per replica)
    balances: bool                   # whether the pod requests cpu or memory (else BalancedAllocation skips it)


def fit_failures(requests: dict[str, int], allocatable: dict[str, int], requested: dict[str, int], pods: int,
                 max_pods: int) -> list[str]:
    """Why :func:`policylib.simulate.resources.fits` fails on one node, in the scheduler's words."""
    out = []
    if pods + 1 > max_pods:
        out.append(MSG_TOO_MANY_PODS)
    for k, v in requests.items():
        if v > 0 and requested.get(k, 0) + v > allocatable.get(k, 0):
            out.append(MSG_INSUFFICIENT.format(resource=k))
    return out


def prefilter(cy: Cycle) -> Resources:
    pod, c = cy.pod, cy.c
    balances = bool(pod.requests.get("cpu", 0) or pod.requests.get("memory", 0))
    if cy.incremental:
        key = resource_key(pod)
        return Resources(*c.resources(pod, key), key, balances)
    return Resources(fits(pod.requests, c.alloc, c.req, c.pods, c.max_pods), least_allocated(pod, c),
                     balanced_allocation(pod, c), None, balances)


def state(cy: Cycle) -> Resources:
    out: Resources = cy.state[FIT]
    return out


def fit_filter(cy: Cycle) -> np.ndarray | None:
    """Rule R2: NodeResourcesFit's filter on every node (:func:`policylib.simulate.resources.fits`)."""
    return state(cy).fit


def fit_reasons(cy: Cycle) -> Callable[[int], list[str]] | None:
    fit, pod = state(cy).fit, cy.pod

    def why(i: int) -> list[str]:
        node = cy.c.states[i]
        return [] if fit[i] else fit_failures(pod.requests, node.allocatable, node.requested, node.pods,
                                              node.allocatable.get("pods", 0))
    return why


def bound(cy: Cycle, i: int) -> None:
    """Rule R9: after a bind on node i, its fit and resource scores for the pod, and the cluster's cache."""
    s = state(cy)
    refresh_resources(cy.c, cy.pod, i, s.fit, s.least, s.balanced)
    if s.key is not None:      # the shape's cached arrays have seen every bind so far
        cy.c.keep_resources(s.key, (s.fit, s.least, s.balanced))


def fit_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R10: LeastAllocated (:func:`least_allocated`)."""
    score: np.ndarray = state(cy).least[chosen]
    return score


def balanced_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R12: :func:`balanced_allocation`; skipped for a pod that requests neither cpu nor memory."""
    s = state(cy)
    return s.balanced[chosen] if s.balances else None


FIT_PLUGIN = Plugin(FIT, ("R1", "R2", "R9", "R10", "R13"), (MSG_TOO_MANY_PODS, MSG_INSUFFICIENT), prefilter=prefilter,
                    filter=fit_filter, failures=fit_reasons, bound=bound, score=fit_score, weight=1)
BALANCED_PLUGIN = Plugin(BALANCED, ("R12",), score=balanced_score, weight=1)
