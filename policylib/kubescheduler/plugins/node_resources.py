"""NodeResourcesFit and NodeResourcesBalancedAllocation (``pkg/scheduler/framework/plugins/noderesources``):
requests within allocatable filter, LeastAllocated and the balance of cpu and memory score.

The fit and both scores of a pod shape are kept by the plugin across workloads, in its per-snapshot state
(:class:`Shared`): after a bind only the bound node's entries are recomputed (:func:`refresh_resources`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..arrays import np
from ..framework import MAX_SCORE, Plugin
from ..model import PodShape
from ..resources import NON_MISSING, fits

if TYPE_CHECKING:
    from ..framework import Cycle
    from ..snapshot import Snapshot

FIT = "NodeResourcesFit"
BALANCED = "NodeResourcesBalancedAllocation"
MSG_TOO_MANY_PODS = "Too many pods"
MSG_INSUFFICIENT = "Insufficient {resource}"


@dataclass
class Shared:
    """What the plugin derives from the snapshot's allocatable and keeps for the snapshot's life: the divisors
    of the cpu and memory fractions, each node's balance without the incoming pod (updated after each bind),
    and each pod shape's (fit, LeastAllocated, BalancedAllocation) arrays with how much of the snapshot's
    ``bind_log`` they have seen."""

    safe: dict[str, np.ndarray]
    weights: np.ndarray
    half_both: np.ndarray
    balance: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    shapes: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray, int]] = field(default_factory=dict)


def init(snap: Snapshot) -> Shared:
    alloc = snap.alloc
    shared = Shared({k: np.where(alloc[k] > 0, alloc[k], 1) for k in NON_MISSING},
                    np.maximum((alloc["cpu"] > 0).astype(np.int64) + (alloc["memory"] > 0), 1),
                    ((alloc["cpu"] > 0) & (alloc["memory"] > 0)) / 2)
    shared.balance = balance(snap.req["cpu"], snap.req["memory"], shared)    # each node's, without the pod
    return shared


def least_allocated(pod: PodShape, c: Snapshot, shared: Shared) -> np.ndarray:
    """Rule R10: NodeResourcesFit's score (LeastAllocated, cpu and memory weight 1): the free share after the pod, with pods
    that request nothing counted as 100m cpu and 200Mi memory; resources a node has none of are left out."""
    total = np.zeros(len(c.states), dtype=np.int64)
    for k in ("cpu", "memory"):
        alloc = c.alloc[k]
        used = c.nonzero[k] + pod.fit_score.get(k, 0)
        total = total + np.where(used <= alloc, (alloc - used) * MAX_SCORE // shared.safe[k], 0)
    out: np.ndarray = total // shared.weights
    return out


def balance(cpu: np.ndarray, memory: np.ndarray, shared: Shared) -> np.ndarray:
    fc = np.minimum(cpu / shared.safe["cpu"], 1.0)
    fm = np.minimum(memory / shared.safe["memory"], 1.0)
    out: np.ndarray = ((1 - np.abs(fc - fm) * shared.half_both) * MAX_SCORE).astype(np.int64)
    return out


def balanced_allocation(pod: PodShape, c: Snapshot, shared: Shared) -> np.ndarray:
    """Rule R12: NodeResourcesBalancedAllocation (1.36): 50 + (50 + balance with the pod - balance without it) / 2, the balance
    being 100 x (1 - std of the cpu and memory fractions); skipped (0) for a pod that requests neither."""
    cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if not cpu and not memory:
        return np.zeros(len(c.states), dtype=np.int64)
    after = balance(c.req["cpu"] + cpu, c.req["memory"] + memory, shared)
    out: np.ndarray = MAX_SCORE // 2 + (MAX_SCORE // 2 + after - shared.balance) // 2
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


def refresh_resources(c: Snapshot, shared: Shared, pod: PodShape, i: int, fit: np.ndarray, least: np.ndarray,
                       balanced: np.ndarray) -> None:
    """Node i's entries of :func:`fits`, :func:`least_allocated` and :func:`balanced_allocation` for ``pod``, from the
    node's state (after a bind there; ``shared.balance`` already holds the node's balance without the pod)."""
    node = c.states[i]
    requested, allocatable = node.requested, node.allocatable
    fit[i] = fits(pod.requests, allocatable, requested, node.pods, allocatable.get("pods", 0))
    alloc = (allocatable.get("cpu", 0), allocatable.get("memory", 0))
    least[i] = least_one(alloc, (node.nonzero.get("cpu", 0) + pod.fit_score.get("cpu", 0),
                                  node.nonzero.get("memory", 0) + pod.fit_score.get("memory", 0)))
    cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if cpu or memory:
        after = balance_one((requested.get("cpu", 0) + cpu, requested.get("memory", 0) + memory), alloc)
        balanced[i] = MAX_SCORE // 2 + (MAX_SCORE // 2 + after - int(shared.balance[i])) // 2


@dataclass
class Resources:
    """The fit, LeastAllocated and BalancedAllocation arrays of one pod's cycle (every node)."""

    fit: np.ndarray
    least: np.ndarray
    balanced: np.ndarray
    key: tuple[Any, ...] | None      # the shape they are kept under (None: recomputed per replica)
    balances: bool                   # whether the pod requests cpu or memory (else BalancedAllocation skips it)


def fit_failures(requests: dict[str, int], allocatable: dict[str, int], requested: dict[str, int], pods: int,
                 max_pods: int) -> list[str]:
    """Why :func:`policylib.kubescheduler.resources.fits` fails on one node, in the scheduler's words."""
    out = []
    if pods + 1 > max_pods:
        out.append(MSG_TOO_MANY_PODS)
    for k, v in requests.items():
        if v > 0 and requested.get(k, 0) + v > allocatable.get(k, 0):
            out.append(MSG_INSUFFICIENT.format(resource=k))
    return out


def shared_state(cy: Cycle) -> Shared:
    out: Shared = cy.plugins[FIT]
    return out


def shape_arrays(c: Snapshot, shared: Shared, pod: PodShape,
                 key: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pod's fit, LeastAllocated and BalancedAllocation arrays on every node. Kept per pod shape (``key``,
    :func:`resource_key`) across workloads: a later workload of the same shape recomputes only the nodes bound
    since (rule R9), and its cycle updates the same arrays after each bind."""
    if key not in shared.shapes:
        arrays = (fits(pod.requests, c.alloc, c.req, c.pods, c.max_pods),
                  least_allocated(pod, c, shared), balanced_allocation(pod, c, shared))
    else:
        *old, seen = shared.shapes[key]
        arrays = (old[0], old[1], old[2])
        for i in set(c.bind_log[seen:]):
            refresh_resources(c, shared, pod, i, *arrays)
    shared.shapes[key] = (*arrays, len(c.bind_log))
    return arrays


def prefilter(cy: Cycle) -> Resources:
    pod, c, shared = cy.pod, cy.snapshot, shared_state(cy)
    balances = bool(pod.requests.get("cpu", 0) or pod.requests.get("memory", 0))
    if cy.incremental:
        key = resource_key(pod)
        return Resources(*shape_arrays(c, shared, pod, key), key, balances)
    return Resources(fits(pod.requests, c.alloc, c.req, c.pods, c.max_pods), least_allocated(pod, c, shared),
                     balanced_allocation(pod, c, shared), None, balances)


def state(cy: Cycle) -> Resources:
    out: Resources = cy.state[FIT]
    return out


def fit_filter(cy: Cycle) -> np.ndarray | None:
    """Rule R2: NodeResourcesFit's filter on every node (:func:`policylib.kubescheduler.resources.fits`)."""
    return state(cy).fit


def fit_reasons(cy: Cycle) -> Callable[[int], list[str]] | None:
    fit, pod = state(cy).fit, cy.pod

    def why(i: int) -> list[str]:
        node = cy.snapshot.states[i]
        return [] if fit[i] else fit_failures(pod.requests, node.allocatable, node.requested, node.pods,
                                              node.allocatable.get("pods", 0))
    return why


def bound(cy: Cycle, i: int) -> None:
    """Rule R9: after a bind on node i, the node's balance, its fit and resource scores for the pod, and the
    shape's kept arrays."""
    s, c, shared = state(cy), cy.snapshot, shared_state(cy)
    node = c.states[i]
    shared.balance[i] = balance_one((node.requested.get("cpu", 0), node.requested.get("memory", 0)),
                                    (node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0)))
    refresh_resources(c, shared, cy.pod, i, s.fit, s.least, s.balanced)
    if s.key is not None:      # the shape's kept arrays have seen every bind so far
        shared.shapes[s.key] = (s.fit, s.least, s.balanced, len(c.bind_log))


def fit_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R10: LeastAllocated (:func:`least_allocated`)."""
    score: np.ndarray = state(cy).least[chosen]
    return score


def balanced_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R12: :func:`balanced_allocation`; skipped for a pod that requests neither cpu nor memory."""
    s = state(cy)
    return s.balanced[chosen] if s.balances else None


FIT_PLUGIN = Plugin(FIT, ("R1", "R2", "R9", "R10", "R13"), (MSG_TOO_MANY_PODS, MSG_INSUFFICIENT), init=init,
                    prefilter=prefilter, filter=fit_filter, failures=fit_reasons, bound=bound, score=fit_score, weight=1)
BALANCED_PLUGIN = Plugin(BALANCED, ("R12",), score=balanced_score, weight=1)
