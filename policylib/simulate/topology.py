"""The topology level written on a gang, read as its scheduler reads it (rules R17, R18): ``simulate`` and
``check`` take the level from the words on the gang's own objects, not from the configuration, so they judge
what the cluster would be given whoever wrote them (policylib's writers, Trainer's PodGroup, a user).

- Kubernetes' PodGroup (``scheduling.k8s.io``): ``spec.schedulingConstraints.topology[0].key`` (the Workload's
  ``podGroupTemplates[0].schedulingConstraints`` where no PodGroup is given): one domain per value of that Node
  label, as kube-scheduler's TopologyPlacement plugin makes them (:func:`label_domains`).
- Volcano's PodGroup (``scheduling.volcano.sh``): ``spec.networkTopology`` in mode ``hard`` with
  ``highestTierAllowed`` or ``highestTierName``: the HyperNodes of tier <= the allowed tier (the input's or the
  cluster's HyperNode objects and label discovery's, rule V26's candidates), lowest tier first. Mode ``soft`` is a
  preference: no constraint in the verdict.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..constants import NATIVE_GANG_GROUP, VOLCANO_SCHEDULING_GROUP
from ..hypernodes import partition_bound
from ..kubescheduler.model import NodeState

#: Whose gang a PodGroup is, as its words say: Kubernetes' own, Volcano's, scheduler-plugins' Coscheduling.
KUBE_SCHEDULER, VOLCANO, COSCHEDULING = "kube-scheduler", "volcano", "coscheduling"


@dataclass(frozen=True)
class GangLevel:
    """Rules R17, R18: where a gang's scheduler lets all of its minimum land: one of ``domains`` ((name, tier,
    Node names), in the order the scheduler tries them), as the words on the gang (``words``) say."""

    scheduler: str
    words: str
    domains: tuple[tuple[str, int, tuple[str, ...]], ...]
    #: The Node label whose values are the domains (kube-scheduler), or None (Volcano's HyperNodes).
    key: str | None = None
    tier: int | None = None


def label_domains(nodes: Sequence[NodeState], key: str) -> dict[str, list[int]]:
    """The one reading of "the domains of a level" (rules R16, G14, R17): the positions in ``nodes`` of each value
    of the Node label ``key``, by value in name order; a Node without the label is in none."""
    domains: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        if key in n.labels:
            domains.setdefault(str(n.labels[key]), []).append(i)
    return dict(sorted(domains.items()))


def _group(obj: dict[str, Any]) -> str:
    return str(obj.get("apiVersion") or "").rpartition("/")[0]


def native_key(obj: dict[str, Any]) -> str | None:
    """Rule R17: the key of a Kubernetes PodGroup's ``spec.schedulingConstraints.topology[0]``, or of a Workload's
    first podGroupTemplate's; None without one."""
    raw = obj.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    holder: Any = spec
    if obj.get("kind") == "Workload":
        templates = spec.get("podGroupTemplates")
        holder = templates[0] if isinstance(templates, list) and templates and isinstance(templates[0], dict) else {}
    constraints = holder.get("schedulingConstraints") if isinstance(holder, dict) else None
    topology = constraints.get("topology") if isinstance(constraints, dict) else None
    first = topology[0] if isinstance(topology, list) and topology and isinstance(topology[0], dict) else {}
    key = first.get("key")
    return key if isinstance(key, str) and key else None


def gang_level(obj: dict[str, Any] | None, nodes: Sequence[NodeState], raw_nodes: Sequence[dict[str, Any]],
               hypernodes: list[dict[str, Any]]) -> GangLevel | None:
    """Rules R17, R18: the level the words on one gang object (a PodGroup or a Workload) hold its gang to, or None
    where they hold it nowhere (no words, Volcano's ``soft`` mode, a tier name no HyperNode has)."""
    if not isinstance(obj, dict):
        return None
    group = _group(obj)
    if group == NATIVE_GANG_GROUP and obj.get("kind") in ("PodGroup", "Workload"):
        key = native_key(obj)
        if key is None:
            return None
        domains = label_domains(nodes, key)
        return GangLevel(KUBE_SCHEDULER, f"schedulingConstraints.topology [{key}]", tuple(
            (value, 0, tuple(nodes[i].name for i in members)) for value, members in domains.items()), key)
    if group == VOLCANO_SCHEDULING_GROUP and obj.get("kind") == "PodGroup":
        raw = obj.get("spec")
        spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
        topo = spec.get("networkTopology")
        if not isinstance(topo, dict) or topo.get("mode", "hard") != "hard":
            return None
        bound = partition_bound(spec, hypernodes, raw_nodes)
        if not bound.bounded:
            return None
        tier = "highestTierAllowed" if topo.get("highestTierAllowed") is not None else "highestTierName"
        words = f"networkTopology hard {tier} {topo.get(tier)}"
        ordered = sorted(bound.domains, key=lambda d: (d[1], d[0]))   # the gradients: the lowest tier first
        return GangLevel(VOLCANO, words, tuple((name, t, tuple(members)) for name, t, members in ordered),
                         tier=bound.tier)
    return None


def gang_objects(objects: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The gang objects among ``objects`` (a mutation's extra objects, a runtime's PodGroup) by gang name: the
    PodGroup, which the scheduler reads, else the Workload it is made from."""
    out: dict[str, dict[str, Any]] = {}
    for obj in objects:
        if not isinstance(obj, dict) or obj.get("kind") not in ("PodGroup", "Workload"):
            continue
        name = str((obj.get("metadata") or {}).get("name") or "")
        if name not in out or obj.get("kind") == "PodGroup":
            out[name] = obj
    return out
