"""Match policy and GangGroup keys: where each scheduler reads them."""
from __future__ import annotations

import json

from ..config import GangSettings
from .gangs import GangPlan
from .keys import ACK_GROUPS, ACK_MATCH_POLICY, KOORD_GROUPS, KOORD_MATCH_POLICY


def match_policy_key(settings: GangSettings, on_podgroup: bool) -> tuple[str, str] | None:
    """Rule G12: ``(labels|annotations, key)`` for the match policy, or None for ``none``.

    ACK: a label on each pod (method labels) or on the PodGroup; its annotation
    method takes the
    Koordinator annotation. Koordinator reads annotations only: on pods
    GetGangMatchPolicy reads ``gang.scheduling.koordinator.sh/match-policy``,
    on a PodGroup tryInitByPodGroup reads the same key (coscheduling/core/gang.go).
    """
    if settings.matchPolicy == "none":
        return None
    if settings.scheduler == "ack" and (on_podgroup or settings.method == "labels"):
        return "labels", ACK_MATCH_POLICY
    return "annotations", KOORD_MATCH_POLICY


def groups_key(settings: GangSettings) -> str:
    """The GangGroup key (rule G4): ACK's sigs.k8s.io key for methods labels and
    podgroup, Koordinator's annotation otherwise and on every Koordinator object
    (Koordinator reads only ``gang.scheduling.koordinator.sh/groups``)."""
    if settings.scheduler == "ack" and settings.method in ("labels", "podgroup"):
        return ACK_GROUPS
    return KOORD_GROUPS


def groups_value(plan: GangPlan) -> str:
    """A JSON array of ``"<namespace>/<gang>"``, sorted so that every template and every run agree."""
    return json.dumps(list(plan.groups))
