"""NodeUnschedulable (``pkg/scheduler/framework/plugins/nodeunschedulable``): a cordoned node."""
from __future__ import annotations

from ...constants import UNSCHEDULABLE_TAINT as UNSCHEDULABLE_TAINT_KEY
from ..framework import Plugin
from ..model import NodeState, PodShape, tolerates

NAME = "NodeUnschedulable"
MSG_UNSCHEDULABLE = "node(s) were unschedulable"
#: The taint a pod tolerates to be placed on a cordoned node (``v1.TaintNodeUnschedulable``).
UNSCHEDULABLE_TAINT = {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}


def unschedulable(pod: PodShape, node: NodeState) -> str | None:
    """Rule R3: a cordoned node (``spec.unschedulable``) takes only a pod that tolerates the
    ``node.kubernetes.io/unschedulable:NoSchedule`` taint (an ``operator: Exists`` toleration without a key
    included); the reason, or None."""
    if node.unschedulable and not tolerates(pod.tolerations, UNSCHEDULABLE_TAINT):
        return MSG_UNSCHEDULABLE
    return None


PLUGIN = Plugin(NAME, ("R3",), (MSG_UNSCHEDULABLE,), node_filter=unschedulable)
