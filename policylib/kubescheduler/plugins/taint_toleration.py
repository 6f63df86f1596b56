"""TaintToleration (``pkg/scheduler/framework/plugins/tainttoleration``): NoSchedule and NoExecute taints filter,
PreferNoSchedule taints score."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..framework import Plugin, default_normalize
from ..model import NodeState, PodShape, tolerates

if TYPE_CHECKING:
    import numpy as np

    from ..framework import Cycle

NAME = "TaintToleration"
MSG_TAINT = "node(s) had untolerated taint {{{key}: {value}}}"


def untolerated_taint(pod: PodShape, node: NodeState) -> str | None:
    """Rule R3: the first NoSchedule or NoExecute taint of the node that the pod does not tolerate, as the
    scheduler names it; None when it tolerates them all."""
    taint = pod.untolerated(node)
    return None if taint is None else MSG_TAINT.format(key=taint.get("key"), value=taint.get("value", ""))


def prefer_no_schedule(pod: PodShape, node: NodeState) -> int:
    """The node's PreferNoSchedule taints that the pod does not tolerate."""
    return sum(1 for t in node.taints if t.get("effect") == "PreferNoSchedule" and not tolerates(pod.tolerations, t))


def score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R10: fewer untolerated PreferNoSchedule taints is better (normalised, reversed)."""
    raw = cy.st.raw[NAME]
    return default_normalize(raw, feasible, reverse=True)[chosen] if NAME in cy.st.scored else None


PLUGIN = Plugin(NAME, ("R3", "R10"), (MSG_TAINT,), node_filter=untolerated_taint,
                node_score=prefer_no_schedule, score=score, weight=3)
