"""The workloads the spread reads: an ``apps/v1`` object with a selector and a pod template (rules S1, A1).

The spread's rules read such a workload through :class:`PodTemplateKind`, which says what differs per kind:
the kind's name in messages, the name its HPAs are indexed by, and the ``matchLabelKeys`` its pods can never
carry. A Deployment's pods carry ``pod-template-hash`` (its ReplicaSet's); a StatefulSet's pods do not: its
controller labels them ``controller-revision-hash``, ``statefulset.kubernetes.io/pod-name`` and
``apps.kubernetes.io/pod-index``. For a StatefulSet the setting ``matchLabelKeys: pod-template-hash`` ("spread
each revision on its own") writes no revision key at all (rule A3): a StatefulSet deletes a pod before it
creates its successor, so old and new pods of one ordinal never coexist and there is no surge to discount;
keyed on ``controller-revision-hash`` a rolling update would spread the updated pods among themselves, from the
highest ordinal down, instead of sending each successor back to the zone its predecessor left.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..config import ON_NEXT_ROLLOUT, Config
from ..constants import APPS_API_VERSION, LWS_API_VERSION, POD_TEMPLATE_HASH
from ..facts import scale_target_name


@dataclass(frozen=True)
class PodTemplateKind:
    """One kind of pod-template workload the spread writes."""

    kind: str
    #: ``matchLabelKeys`` the kind's pods never carry: left out of what the spread writes for it (rule A3).
    absent_pod_labels: frozenset[str] = frozenset()
    #: A change of the effective count alone never rewrites the pod template: ``hostTopologySpread.rewrite`` is
    #: read as ``OnNextRollout`` (rule A9: a StatefulSet's template change restarts every pod, one at a time).
    holds_count_changes: bool = False
    api_version: str = APPS_API_VERSION

    def matches(self, obj: object) -> bool:
        return isinstance(obj, dict) and obj.get("kind") == self.kind and obj.get("apiVersion") == self.api_version

    def hpa_index_name(self, name: str) -> str:
        """The name the HPA facts index this kind's object ``name`` by (rules S2, A2)."""
        return scale_target_name(self.kind, name)

    def settings(self, config: Config) -> Config:
        """The spread settings as written for this kind: ``matchLabelKeys`` without the keys its pods never carry
        (rule A3), and count changes held for the next rollout where the kind holds them (rule A9); the same
        object when nothing differs."""
        zone = tuple(k for k in config.zone.matchLabelKeys if k not in self.absent_pod_labels)
        host = tuple(k for k in config.host.matchLabelKeys if k not in self.absent_pod_labels)
        rewrite = ON_NEXT_ROLLOUT if self.holds_count_changes else config.host.rewrite
        if (zone, host, rewrite) == (config.zone.matchLabelKeys, config.host.matchLabelKeys, config.host.rewrite):
            return config
        return replace(config, zoneTopologySpread=replace(config.zone, matchLabelKeys=zone),
                       hostTopologySpread=replace(config.host, matchLabelKeys=host, rewrite=rewrite))


DEPLOYMENT = PodTemplateKind("Deployment")
STATEFULSET = PodTemplateKind("StatefulSet", absent_pod_labels=frozenset({POD_TEMPLATE_HASH}), holds_count_changes=True)
#: Every kind the spread writes, in the order the families list them.
POD_TEMPLATE_KINDS = (DEPLOYMENT, STATEFULSET)
#: A LeaderWorkerSet's leaders, as the LeaderWorkerSet family shows them to the spread (rule E2): a view with the
#: leader template as ``spec.template`` and the leaders' selector as ``spec.selector``; never matched on a
#: LeaderWorkerSet itself (its templates are elsewhere), so it is not among :data:`POD_TEMPLATE_KINDS`. Its
#: leaders have no ``pod-template-hash``, and a change of its templates recreates every group, so a count change
#: alone is held for the next rollout (rules E2, A3, A9).
LEADER_WORKER_SET = PodTemplateKind("LeaderWorkerSet", absent_pod_labels=frozenset({POD_TEMPLATE_HASH}),
                                    holds_count_changes=True, api_version=LWS_API_VERSION)


def pod_template_kind(obj: object) -> PodTemplateKind | None:
    """The kind of a workload the spread reads, or None for any other object."""
    return next((k for k in POD_TEMPLATE_KINDS if k.matches(obj)), None)


def scaled_kind(obj: object) -> PodTemplateKind | None:
    """The kind an HPA of ``obj`` is indexed by (rules S2, A2, E2): a Deployment's, a StatefulSet's or a
    LeaderWorkerSet's (whose leaders the spread writes); None for any other object."""
    return pod_template_kind(obj) or (LEADER_WORKER_SET if LEADER_WORKER_SET.matches(obj) else None)


def is_spread_workload(obj: object) -> bool:
    """A Deployment or a StatefulSet: an object the spread writes."""
    return pod_template_kind(obj) is not None


def kind_of(obj: dict[str, Any]) -> PodTemplateKind:
    """The object's kind (a LeaderWorkerSet's leader view too); a Deployment's rules for anything else (the callers
    checked the kind first)."""
    return pod_template_kind(obj) or (LEADER_WORKER_SET if LEADER_WORKER_SET.matches(obj) else DEPLOYMENT)
