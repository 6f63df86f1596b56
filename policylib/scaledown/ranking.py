"""The ReplicaSet controller's choice of the pods to delete when it scales down (rule S26), replayed.

The ReplicaSet controller (k/k ``pkg/controller/replicaset/replica_set.go`` ``getPodsToDelete``) sorts the
pods of the ReplicaSet it scales down by ``ActivePodsWithRanks.Less`` (``pkg/controller/controller_utils.go``)
and deletes the first ones: unassigned before assigned, Pending < Unknown < Running, not ready before
ready, then the lower ``controller.kubernetes.io/pod-deletion-cost``, then the pod with more active pods
of the Deployment on its Node, then the shorter ready time and more restarts, then the newer pod. It
reads no zone. The cost comes before the Node colocation, so a cost per pod decides among bound, ready
pods.
"""
from __future__ import annotations

import functools
import math
from datetime import datetime
from typing import Any, Mapping, Sequence

from .pods import is_active, metadata_of, node_of

_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ready(pod: Mapping[str, Any]) -> tuple[bool, datetime | None]:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Ready":
            ok = c.get("status") == "True"
            return ok, _time(c.get("lastTransitionTime")) if ok else None
    return False, None


def _restarts(pod: Mapping[str, Any]) -> tuple[int, int]:
    status = pod.get("status") or {}
    regular = max([int(s.get("restartCount") or 0) for s in status.get("containerStatuses") or ()] or [0])
    sidecar = max([int(s.get("restartCount") or 0) for s in status.get("initContainerStatuses") or ()] or [0])
    return regular, sidecar


def _log_rank(t: datetime, now: datetime) -> int:
    d = (now - t).total_seconds() * 1e9
    return int(math.log2(d)) if d > 0 else -1


def _later(t1: datetime | None, t2: datetime | None) -> bool:
    """afterOrZero: a zero time, else the later time, is less."""
    if t1 is None or t2 is None:
        return t1 is None
    return t1 > t2


def rank_less(a: Mapping[str, Any], b: Mapping[str, Any], rank_a: int, rank_b: int, now: datetime,
              cost: Mapping[str, int | None]) -> bool:
    """``ActivePodsWithRanks.Less`` (k/k 1.36 ``pkg/controller/controller_utils.go``, PodDeletionCost and
    LogarithmicScaleDown on, their defaults): whether ``a`` is deleted before ``b``. ``cost`` gives each
    pod's deletion cost by uid (0 when absent)."""
    na, nb = node_of(a), node_of(b)
    if na != nb and (not na or not nb):
        return not na
    pa, pb = _PHASE_ORDINAL.get(str((a.get("status") or {}).get("phase")), 0), \
        _PHASE_ORDINAL.get(str((b.get("status") or {}).get("phase")), 0)
    if pa != pb:
        return pa < pb
    (ra, ta), (rb, tb) = _ready(a), _ready(b)
    if ra != rb:
        return not ra
    ua, ub = str(metadata_of(a).get("uid") or ""), str(metadata_of(b).get("uid") or "")
    ca, cb = cost.get(ua) or 0, cost.get(ub) or 0
    if ca != cb:
        return ca < cb
    if rank_a != rank_b:
        return rank_a > rank_b
    if ra and rb and ta != tb:
        if ta is None or tb is None:
            return _later(ta, tb)
        diff = _log_rank(ta, now) - _log_rank(tb, now)
        return ua < ub if diff == 0 else diff < 0
    (xa, sa), (xb, sb) = _restarts(a), _restarts(b)
    if xa != xb:
        return xa > xb
    if sa != sb:
        return sa > sb
    ka, kb = _time(metadata_of(a).get("creationTimestamp")), _time(metadata_of(b).get("creationTimestamp"))
    if ka != kb:
        if ka is None or kb is None:
            return _later(ka, kb)
        diff = _log_rank(ka, now) - _log_rank(kb, now)
        return ua < ub if diff == 0 else diff < 0
    return False


def pods_to_delete(pods: Sequence[Mapping[str, Any]], related: Sequence[Mapping[str, Any]], diff: int,
                   now: datetime, cost: Mapping[str, int | None]) -> list[Mapping[str, Any]]:
    """Rule S26: ``getPodsToDelete``: the ``diff`` pods of a ReplicaSet (its active ``pods``) the ReplicaSet
    controller deletes, ranked by :func:`rank_less` with each pod's rank the count of active ``related``
    pods (every ReplicaSet of the Deployment) on its Node."""
    if diff >= len(pods):
        return list(pods)
    on_node: dict[str, int] = {}
    for pod in related:
        if is_active(pod):
            on_node[node_of(pod)] = on_node.get(node_of(pod), 0) + 1
    ranked = [(pod, on_node.get(node_of(pod), 0)) for pod in pods]

    def compare(x: tuple[Mapping[str, Any], int], y: tuple[Mapping[str, Any], int]) -> int:
        if rank_less(x[0], y[0], x[1], y[1], now, cost):
            return -1
        return 1 if rank_less(y[0], x[0], y[1], x[1], now, cost) else 0
    return [pod for pod, _ in sorted(ranked, key=functools.cmp_to_key(compare))[:diff]]
