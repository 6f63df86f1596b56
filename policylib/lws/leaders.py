"""The leaders as the spread sees them (rule E2), and the leader template policylib generates (rule E3).

The spread's rules read a pod-template workload: ``spec.selector``, ``spec.replicas``, ``spec.template`` and the
object's annotations. A LeaderWorkerSet's leaders are one: the leader StatefulSet ``<lws>`` runs one leader per
group from the leader template, and selects ``{name: <lws>, worker-index: "0"}``. :func:`leader_view` shows
them so, and the family writes the view's template back as the ``leaderTemplate``.
"""
from __future__ import annotations

import copy
from typing import Any

from ..constants import LWS_API_VERSION
from .model import (
    GENERATED,
    KIND,
    LEADER_TEMPLATE,
    LEADER_TEMPLATE_RECORD,
    WORKER_TEMPLATE,
    annotations_of,
    at,
    leader_selector,
    name_of,
)


def leader_view(obj: dict[str, Any], template: Any) -> dict[str, Any]:
    """Rule E2: the LeaderWorkerSet's leaders as a pod-template workload: its metadata (the spread's records go on
    the LeaderWorkerSet), ``spec.replicas`` (groups: one leader each, absent as LWS's default of 1), the leaders'
    selector and ``template`` as the pod template. The spread counts the HPA whose ``scaleTargetRef`` is the
    LeaderWorkerSet (its scale subresource scales groups)."""
    spec: dict[str, Any] = {"selector": leader_selector(name_of(obj)), "template": template}
    replicas = at(obj, ("spec", "replicas"))
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": LWS_API_VERSION, "kind": KIND, "metadata": obj.get("metadata"), "spec": spec}


def leader_template_generated(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Rule E3: whether the ``leaderTemplate`` is policylib's to derive from the ``workerTemplate``: there is none,
    or the LeaderWorkerSet records it as generated (``policylib.io/leader-template: generated``) and, on an UPDATE,
    the incoming one is the stored one (a ``leaderTemplate`` the user changed is the user's from then on)."""
    template = at(obj, LEADER_TEMPLATE)
    if template is None:
        return True
    if annotations_of(obj).get(LEADER_TEMPLATE_RECORD) != GENERATED:
        return False
    return old is None or template == at(old, LEADER_TEMPLATE)


def leader_template(obj: dict[str, Any], generated: bool) -> Any:
    """The leaders' pod template before the spread: a copy of the ``workerTemplate`` where the leader template is
    generated (rule E3: LWS's leaders follow the workerTemplate when there is no leaderTemplate), else the user's
    ``leaderTemplate``."""
    return copy.deepcopy(at(obj, WORKER_TEMPLATE)) if generated else at(obj, LEADER_TEMPLATE)


def old_leader_template(old: dict[str, Any]) -> Any:
    """The stored leaders' pod template: the ``leaderTemplate``, else the ``workerTemplate`` LWS uses for them."""
    template = at(old, LEADER_TEMPLATE)
    return template if template is not None else at(old, WORKER_TEMPLATE)
