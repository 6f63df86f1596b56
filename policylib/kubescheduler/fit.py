"""What one Node holds of a pod alone, through the registry's eligibility filters (rule V18): the admission
policies' capacity verdict asks this of the simulator's model, and only this, so the policies never import the
simulation that runs them."""
from __future__ import annotations

from typing import Any

from .model import NodeState, PodShape
from .plugins import node_failure


def pods_per_node(template: dict[str, Any], node: dict[str, Any]) -> int | None:
    """Rule V18: how many of a task's pods a Node holds alone: none where the registry's eligibility filters
    refuse the pod (a cordoned node it does not tolerate, an untolerated taint, node affinity); else its
    allocatable over what the pod requests (rule R1), None when either is unknown (counted as one pod)."""
    pod = PodShape.of_template(template, "", "")
    state = NodeState.of(node)
    if node_failure(pod, state) is not None:
        return 0
    wanted = {k: v for k, v in pod.requests.items() if v > 0}
    if not wanted or not (node.get("status") or {}).get("allocatable"):
        return None
    return min(state.allocatable.get(k, 0) // v for k, v in wanted.items())
