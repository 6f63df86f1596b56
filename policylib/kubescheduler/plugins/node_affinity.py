"""NodeAffinity (``pkg/scheduler/framework/plugins/nodeaffinity``): nodeSelector and required node affinity filter,
preferred node affinity scores."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..framework import Plugin, default_normalize
from ..model import NodeState, PodShape, node_selector_term_matches

if TYPE_CHECKING:
    import numpy as np

    from ..framework import Cycle

NAME = "NodeAffinity"
MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def node_affinity(pod: PodShape, node: NodeState) -> str | None:
    """Rule R3: the pod's nodeSelector and required node affinity terms (one must match) against the node's
    labels and name; the reason, or None."""
    return None if pod.matches_affinity(node) else MSG_AFFINITY


def preferred_weights(pod: PodShape, node: NodeState) -> int:
    """The summed weights of the pod's preferred node affinity terms that the node matches."""
    return sum(int(t.get("weight") or 0) for t in pod.preferred_terms if isinstance(t, dict)
               and node_selector_term_matches(t.get("preference") or {}, node))


def score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R10: the summed weights of the matching preferred terms (normalised)."""
    raw = cy.st.raw[NAME]
    return default_normalize(raw, feasible, reverse=False)[chosen] if NAME in cy.st.scored else None


PLUGIN = Plugin(NAME, ("R3", "R10"), (MSG_AFFINITY,), node_filter=node_affinity,
                node_score=preferred_weights, score=score, weight=2)
