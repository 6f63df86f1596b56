"""Each group of a LeaderWorkerSet kept within one domain of the gang placement's level (rules E5, E6).

kube-scheduler's words for "this group's pods in one rack" on a template that serves every group: a pod affinity
to the pods of this LeaderWorkerSet, with ``matchLabelKeys: [leaderworkerset.sigs.k8s.io/group-key]`` (the API
server adds ``group-key In [<the pod's own>]`` to the selector at pod creation; GA since Kubernetes 1.33) on the
level's node label. LWS labels the leader with its group's key (its pod webhook) and the workers too (their
StatefulSet's template), so each group's pods select their own group only. The first pod of a group has no pod to
join: kube-scheduler lets a pod whose required affinity no pod matches anywhere through when the pod matches its
own term (rule R6), and the leader does; the workers then follow it into its domain.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..constants import LWS_GROUP_KEY_LABEL, LWS_NAME_LABEL
from ..patch import Draft
from ..topology.levels import PREFERRED, placement
from .model import exclusive_annotations

REQUIRED_TERMS = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_TERMS = "preferredDuringSchedulingIgnoredDuringExecution"
#: The weight of a preferred packing term: the highest kube-scheduler takes, as a preferred placement is meant.
PREFERRED_WEIGHT = 100


@dataclass(frozen=True)
class Packing:
    """Rule E5: the node label every pod of a group shares one value of, and whether it is required."""

    node_label: str
    mode: str

    @property
    def record(self) -> str:
        return f"{self.node_label} {self.mode}"


def group_packing(obj: dict[str, Any], config: Config) -> tuple[Packing | None, str]:
    """Rules E5, E6: the packing the configuration asks of each group (``topology.gangs.within``, rule N1, and its
    mode), with the reason; none without a gang placement, and none where the user set LWS's own
    ``exclusive-topology`` or ``subgroup-exclusive-topology`` (one group per domain, enforced by LWS's pod webhook
    and worker nodeSelector: a packing term beside it would only restate part of it, so placement is left to it)."""
    p = placement(config)
    if p.within is None:
        return None, f"{p.describe_within()}: each group's pods are placed by the spread alone (no packing written)"
    exclusive = exclusive_annotations(obj)
    if exclusive:
        named = ", ".join(f"{k}={v}" for k, v in exclusive.items())
        return None, (f"{p.describe_within()}: no group packing written: {named} places one group per domain "
                      "(LWS's own rule); policylib never writes or overrides it")
    packing = Packing(p.within.node_label, p.mode)
    how = "preferred (weight 100)" if p.mode == PREFERRED else "required"
    volcano = ("; Volcano reads it as a pod affinity (no HyperNode networkTopology: LWS's PodGroups carry none)"
               if config.gang.scheduler == "volcano" else "")
    return packing, (f"{p.describe_within()}: each group packed within one {p.within.name} domain: a {how} pod "
                     f"affinity on {p.within.node_label} to this LeaderWorkerSet's pods, matchLabelKeys "
                     f"{LWS_GROUP_KEY_LABEL}, in the leader and the worker templates{volcano}")


def packing_term(name: str, node_label: str) -> dict[str, Any]:
    """The pod affinity term of rule E5: this LeaderWorkerSet's pods of the same group, on ``node_label``."""
    return {"labelSelector": {"matchLabels": {LWS_NAME_LABEL: name}}, "matchLabelKeys": [LWS_GROUP_KEY_LABEL],
            "topologyKey": node_label}


def _is_packing_term(term: Any, name: str) -> bool:
    return isinstance(term, dict) and term.get("labelSelector") == {"matchLabels": {LWS_NAME_LABEL: name}} \
        and term.get("matchLabelKeys") == [LWS_GROUP_KEY_LABEL]


def _without_packing(terms: Any, name: str, weighted: bool) -> Any:
    if not isinstance(terms, list):
        return terms
    return [t for t in terms if not _is_packing_term(t.get("podAffinityTerm") if weighted and isinstance(t, dict)
                                                     else t, name)]


def write_packing(draft: Draft, template_path: tuple[str, ...], name: str, packing: Packing | None,
                  owned: bool) -> None:
    """Rule E5: the template at ``template_path`` with the packing term as ``packing`` says (required or preferred,
    replacing one written before) or, with none, without the one policylib wrote (``owned``: the record says it
    wrote one); the user's other affinity terms are kept in order."""
    affinity_path = template_path + ("spec", "affinity")
    pod_affinity_path = affinity_path + ("podAffinity",)
    current = draft.get(pod_affinity_path)
    if packing is None and not (owned and isinstance(current, dict)):
        return
    pod_affinity = draft.dict_at(pod_affinity_path)
    for key, weighted in ((REQUIRED_TERMS, False), (PREFERRED_TERMS, True)):
        if key in pod_affinity:
            pod_affinity[key] = _without_packing(pod_affinity[key], name, weighted)
    if packing is not None:
        term = packing_term(name, packing.node_label)
        if packing.mode == PREFERRED:
            pod_affinity[PREFERRED_TERMS] = list(pod_affinity.get(PREFERRED_TERMS) or []) + \
                [{"weight": PREFERRED_WEIGHT, "podAffinityTerm": term}]
        else:
            pod_affinity[REQUIRED_TERMS] = list(pod_affinity.get(REQUIRED_TERMS) or []) + [term]
    for key in (REQUIRED_TERMS, PREFERRED_TERMS):
        if pod_affinity.get(key) == []:
            pod_affinity.pop(key)
    draft.prune_empty(pod_affinity_path)

