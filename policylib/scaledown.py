"""Spread-aware scale-down: the pod deletion costs that make the ReplicaSet controller remove the pods of
the most-populated zone first (rules S23 to S27), its victim ranking replayed (``simulate --scale``), and
the zone and host skew a Deployment's pods have now (``check --cluster``, ``plan --cluster``, the
controller's ``SpreadViolated``).

The ReplicaSet controller (k/k ``pkg/controller/replicaset/replica_set.go`` ``getPodsToDelete``) sorts the
pods of the ReplicaSet it scales down by ``ActivePodsWithRanks.Less`` (``pkg/controller/controller_utils.go``)
and deletes the first ones: unassigned before assigned, Pending < Unknown < Running, not ready before
ready, then the lower ``controller.kubernetes.io/pod-deletion-cost``, then the pod with more active pods
of the Deployment on its Node, then the shorter ready time and more restarts, then the newer pod. It
reads no zone. The cost comes before the Node colocation, so a cost per pod decides among bound, ready
pods.

The costs (:func:`desired_costs`): in each zone, a ReplicaSet's bound pods get the levels 0, 1, 2, ...
round-robin over the zone's Nodes (the pods of a Node in the order they have, then by age), and a pod's
cost is minus its level. Deleting the lowest costs first removes the highest levels: the zone with most
pods loses one first, and within it the Node with most pods, so after removing any number of pods every
zone keeps ``min(its pods, t)`` or ``t + 1`` pods for some level ``t``: the least skew a scale-down can
leave. A new pod takes the next level of its zone (one write, when it binds); pods removed from the top
change no other pod's level; only a pod removed below the top (a Node lost, an eviction) renumbers the
levels above it in its zone.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

from .constants import POD_TEMPLATE_HASH
from .errors import INT32_MAX
from .labels import selector_matches

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: The field manager of the controller's cost writes: how ``managedFields`` tells our costs from others'.
FIELD_MANAGER = "policylib-scaledown"
TEMPLATE_HASH = POD_TEMPLATE_HASH
_COST_FIELD = f"f:{DELETION_COST}"
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}
_INT32 = (-INT32_MAX - 1, INT32_MAX)

#: Rule W7 for Pods: what the controller's pod watch holds (identity, owner, Node, phase, labels for the
#: constraints' selectors, the cost annotation and, of ``managedFields``, only who owns the cost).
POD_FIELDS = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels",
              "ownerReferences")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def cost_owner(pod: Mapping[str, Any]) -> str | None:
    """The field manager that owns the pod's deletion cost annotation (``managedFields``), or None."""
    for entry in _meta(pod).get("managedFields") or ():
        fields = (entry or {}).get("fieldsV1") or {}
        annotations = ((fields.get("f:metadata") or {}).get("f:annotations") or {})
        if _COST_FIELD in annotations:
            return str(entry.get("manager") or "")
    return None


def project_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Rule S27: what the pod watch keeps of a Pod; ``managedFields`` is cut to the entry owning the cost."""
    meta = _meta(pod)
    kept: dict[str, Any] = {k: meta[k] for k in POD_FIELDS if k in meta}
    cost = (meta.get("annotations") or {}).get(DELETION_COST)
    if cost is not None:
        kept["annotations"] = {DELETION_COST: cost}
        owner = cost_owner(pod)
        if owner is not None:
            kept["managedFields"] = [{"manager": owner, "fieldsV1": {"f:metadata": {"f:annotations": {_COST_FIELD: {}}}}}]
    status: Mapping[str, Any] = pod.get("status") or {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept,
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName") or ""},
            "status": {"phase": status.get("phase") or ""}}


# --- the pods of a ReplicaSet ----------------------------------------------------------------------------

def is_active(pod: Mapping[str, Any]) -> bool:
    """controller.IsPodActive: not Succeeded, not Failed, not being deleted."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and \
        not _meta(pod).get("deletionTimestamp")


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def owner_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the ReplicaSet that controls the pod, or None (not a ReplicaSet's pod)."""
    for ref in _meta(pod).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "ReplicaSet":
            return str(ref.get("uid") or ref.get("name") or "")
    return None


def deployment_name(pod: Mapping[str, Any]) -> str | None:
    """The Deployment a ReplicaSet's pod belongs to: its ReplicaSet's name less ``-<pod-template-hash>``."""
    hash_ = (_meta(pod).get("labels") or {}).get(TEMPLATE_HASH)
    for ref in _meta(pod).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "ReplicaSet" and hash_:
            name = str(ref.get("name") or "")
            if name.endswith(f"-{hash_}"):
                return name[: -len(hash_) - 1]
    return None


def parse_cost(value: object) -> int | None:
    """The deletion cost as the API reads it (an int32 in decimal), or None when unset or not one."""
    if not isinstance(value, str):
        return None
    try:
        cost = int(value, 10)
    except ValueError:
        return None
    return cost if _INT32[0] <= cost <= _INT32[1] else None


def current_cost(pod: Mapping[str, Any]) -> int | None:
    return parse_cost((_meta(pod).get("annotations") or {}).get(DELETION_COST))


def foreign_cost(pod: Mapping[str, Any]) -> bool:
    """Rule S25: the pod has a deletion cost another field manager set (its owner is not ours)."""
    return DELETION_COST in (_meta(pod).get("annotations") or {}) and cost_owner(pod) != FIELD_MANAGER


# --- the costs (rules S23, S24) ---------------------------------------------------------------------------

def _level(pod: Mapping[str, Any]) -> float:
    cost = current_cost(pod)
    return -cost if cost is not None and cost <= 0 and not foreign_cost(pod) else math.inf


def _age_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(pod)
    return str(meta.get("creationTimestamp") or "~"), str(meta.get("name") or "")


def zone_levels(pods: Sequence[Mapping[str, Any]]) -> list[int]:
    """Rule S23: the levels of one zone's pods of one ReplicaSet (same order as ``pods``): each Node's pods
    in the order of their present levels (a pod without one last, older first), then the zone's pods
    round-robin over its Nodes, the n-th pod of every Node before any Node's (n+1)-th."""
    by_node: dict[str, list[int]] = {}
    for i, pod in enumerate(pods):
        by_node.setdefault(node_of(pod), []).append(i)
    slot: dict[int, int] = {}
    for members in by_node.values():
        for j, i in enumerate(sorted(members, key=lambda i: (_level(pods[i]), _age_key(pods[i])))):
            slot[i] = j
    order = sorted(range(len(pods)), key=lambda i: (slot[i], _level(pods[i]), node_of(pods[i]), _age_key(pods[i])))
    levels = [0] * len(pods)
    for level, i in enumerate(order):
        levels[i] = level
    return levels


def desired_costs(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str]) -> dict[str, int]:
    """Rules S23, S25: the deletion cost each pod should have, by uid: per ReplicaSet and zone (the Node's
    ``zone_of``; a Node without the zone label is a zone of its own, ``""``), minus the pod's level. Only
    active bound pods whose cost is ours or unset are given one; another manager's cost is left alone."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        owner = owner_uid(pod)
        if owner is None or not node_of(pod) or not is_active(pod) or foreign_cost(pod):
            continue
        groups.setdefault((owner, zone_of.get(node_of(pod), "")), []).append(pod)
    costs: dict[str, int] = {}
    for members in groups.values():
        for pod, level in zip(members, zone_levels(members), strict=True):
            costs[str(_meta(pod).get("uid") or "")] = -level
    return costs


@dataclass(frozen=True)
class CostWrite:
    """One pod whose cost must change (rule S24)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    cost: int

    def patch(self) -> dict[str, Any]:
        """A JSON merge patch: the cost, guarded by the resourceVersion and the uid."""
        return {"metadata": {"annotations": {DELETION_COST: str(self.cost)}, "resourceVersion": self.resource_version,
                             "uid": self.uid}}


def cost_writes(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str]) -> list[CostWrite]:
    """Rule S24: the pods whose deletion cost differs from :func:`desired_costs` (none at steady state)."""
    pods = list(pods)
    costs = desired_costs(pods, zone_of)
    out = []
    for pod in pods:
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        if uid in costs and current_cost(pod) != costs[uid]:
            out.append(CostWrite(str(meta.get("namespace") or ""), str(meta.get("name") or ""), uid,
                                 str(meta.get("resourceVersion") or ""), costs[uid]))
    return sorted(out, key=lambda w: (w.namespace, w.name))


# --- the ReplicaSet controller's choice (rule S26) ------------------------------------------------------

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
    ua, ub = str(_meta(a).get("uid") or ""), str(_meta(b).get("uid") or "")
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
    ka, kb = _time(_meta(a).get("creationTimestamp")), _time(_meta(b).get("creationTimestamp"))
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


def costs_as_they_are(pods: Iterable[Mapping[str, Any]], ours: bool) -> dict[str, int | None]:
    """Each pod's deletion cost as the ReplicaSet controller would read it: with ``ours`` False, costs
    policylib's controller wrote are dropped (the setting off)."""
    return {str(_meta(p).get("uid") or ""): (current_cost(p) if ours or foreign_cost(p) else None) for p in pods}


# --- skew now (rule S28) ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Violation:
    """A Deployment whose pods break one of its own spread constraints now."""

    namespace: str
    name: str
    topology_key: str
    when_unsatisfiable: str
    max_skew: int
    skew: int
    counts: dict[str, int] = field(default_factory=dict)
    group: str = ""

    @property
    def reference(self) -> str:
        return f"deployment {self.namespace}/{self.name}"

    def message(self) -> str:
        domains = ", ".join(f"{d}={n}" for d, n in sorted(self.counts.items()))
        of = f" ({self.group})" if self.group else ""
        return (f"{self.reference}{of}: {self.topology_key} skew {self.skew} > maxSkew {self.max_skew} "
                f"({self.when_unsatisfiable}); pods per domain: {domains}")

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "topologyKey": self.topology_key,
                "whenUnsatisfiable": self.when_unsatisfiable, "maxSkew": self.max_skew, "skew": self.skew,
                "counts": dict(sorted(self.counts.items())), "group": self.group}


def skew_of(counts: Mapping[str, int], min_domains: int = 1) -> int:
    """The scheduler's skew of a placement: most pods in a domain less the fewest (0 when there are fewer
    eligible domains than ``minDomains``)."""
    if not counts:
        return 0
    least = 0 if len(counts) < min_domains else min(counts.values())
    return max(counts.values()) - least


def spread_violations(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
                      nodes: Iterable[Mapping[str, Any]]) -> list[Violation]:
    """Rule S28: for each topology spread constraint of the Deployment's pod template, the skew its active
    bound pods in the Deployment's namespace that match the constraint's selector have now, over every
    Node with the key (each domain counted, empty ones too), per value of its ``matchLabelKeys``; the
    constraints whose skew exceeds their maxSkew."""
    meta = _meta(deployment)
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector: Mapping[str, Any] = spec.get("nodeSelector") or {}
    tolerations = [t for t in spec.get("tolerations") or () if isinstance(t, dict)]
    nodes = list(nodes)
    mine = [p for p in pods if is_active(p) and node_of(p) and str(_meta(p).get("namespace") or "default") == ns]
    out: list[Violation] = []
    for c in spec.get("topologySpreadConstraints") or ():
        if not isinstance(c, dict) or not isinstance(c.get("topologyKey"), str):
            continue
        key = c["topologyKey"]
        node_labels = {str(_meta(n).get("name") or ""): (_meta(n).get("labels") or {}) for n in nodes
                       if (c.get("nodeAffinityPolicy") == "Ignore"
                           or all((_meta(n).get("labels") or {}).get(k) == v for k, v in selector.items()))
                       and (c.get("nodeTaintsPolicy") != "Honor" or _tolerated(n, tolerations))}
        domains = {labels[key] for labels in node_labels.values() if key in labels}
        keys = [k for k in c.get("matchLabelKeys") or () if isinstance(k, str)]
        groups: dict[tuple[str, ...], dict[str, int]] = {}
        for pod in mine:
            labels = _meta(pod).get("labels") or {}
            domain = node_labels.get(node_of(pod), {}).get(key)
            if domain is None or not selector_matches(c.get("labelSelector"), labels):
                continue
            counts = groups.setdefault(tuple(str(labels.get(k, "")) for k in keys), dict.fromkeys(domains, 0))
            counts[domain] += 1
        max_skew = int(c.get("maxSkew") or 1)
        for values, counts in sorted(groups.items()):
            skew = skew_of(counts, int(c.get("minDomains") or 1))
            if skew > max_skew:
                group = ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))
                out.append(Violation(ns, name, key, str(c.get("whenUnsatisfiable") or ""), max_skew, skew,
                                     counts, group))
    return out


def _tolerated(node: Mapping[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    """Every NoSchedule and NoExecute taint of the Node is tolerated (nodeTaintsPolicy Honor)."""
    for taint in (node.get("spec") or {}).get("taints") or ():
        if not isinstance(taint, dict) or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any((not t.get("effect") or t.get("effect") == taint.get("effect"))
                   and (not t.get("key") or t.get("key") == taint.get("key"))
                   and (t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""))
                   and (t.get("key") or t.get("operator") == "Exists") for t in tolerations):
            return False
    return True


def deployment_pods(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of a Deployment: same namespace, matched by its selector, owned by a ReplicaSet."""
    meta = _meta(deployment)
    ns = str(meta.get("namespace") or "default")
    selector = (deployment.get("spec") or {}).get("selector")
    return [p for p in pods if isinstance(p, dict) and p.get("kind", "Pod") == "Pod"
            and str(_meta(p).get("namespace") or "default") == ns and owner_uid(p) is not None
            and selector_matches(selector, _meta(p).get("labels") or {})]


# --- simulate --scale (rule S26) -------------------------------------------------------------------------

@dataclass(frozen=True)
class ScaleDown:
    """What the ReplicaSet controller removes scaling a Deployment's bound pods to ``replicas``."""

    namespace: str
    name: str
    replicas: int
    before: dict[str, int]
    removed_without: list[str]
    after_without: dict[str, int]
    removed_with: list[str]
    after_with: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "replicas": self.replicas, "zonesBefore": self.before,
                "withoutCosts": {"removed": self.removed_without, "zones": self.after_without,
                                 "zoneSkew": skew_of(self.after_without)},
                "withCosts": {"removed": self.removed_with, "zones": self.after_with, "zoneSkew": skew_of(self.after_with)}}


def _zone_counts(pods: Iterable[Mapping[str, Any]], zone_of: Mapping[str, str], zones: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(zones, 0)
    for p in pods:
        z = zone_of.get(node_of(p), "")
        counts[z] = counts.get(z, 0) + 1
    return dict(sorted(counts.items()))


def scale_down(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]],
               replicas: int, zone_key: str, now: datetime | None = None) -> ScaleDown:
    """Rule S26: the pods the ReplicaSet controller would delete scaling ``deployment`` to ``replicas``,
    with the costs as the pods have them less policylib's (the setting off) and with the costs
    :func:`desired_costs` gives (on). The newest ReplicaSet (the most pods) is the one scaled."""
    now = now or datetime.now(timezone.utc)
    meta = _meta(deployment)
    nodes = list(nodes)
    zone_of = {str(_meta(n).get("name") or ""): str((_meta(n).get("labels") or {}).get(zone_key, "")) for n in nodes}
    zones = sorted({z for z in zone_of.values()})
    related = [p for p in deployment_pods(deployment, pods) if is_active(p)]
    by_owner: dict[str, list[Mapping[str, Any]]] = {}
    for p in related:
        by_owner.setdefault(owner_uid(p) or "", []).append(p)
    mine = max(by_owner.values(), key=len) if by_owner else []
    diff = max(0, len(mine) - replicas)
    off = costs_as_they_are(related, ours=False)
    on: dict[str, int | None] = {**off, **desired_costs(related, zone_of)}
    out_without = pods_to_delete(mine, related, diff, now, off)
    out_with = pods_to_delete(mine, related, diff, now, on)

    def names(ps: Iterable[Mapping[str, Any]]) -> list[str]:
        return sorted(str(_meta(p).get("name")) for p in ps)

    def left(removed: list[Mapping[str, Any]]) -> dict[str, int]:
        gone = {id(p) for p in removed}
        return _zone_counts([p for p in mine if id(p) not in gone], zone_of, zones)
    return ScaleDown(str(meta.get("namespace") or "default"), str(meta.get("name") or ""), replicas,
                     _zone_counts(mine, zone_of, zones), names(out_without), left(out_without),
                     names(out_with), left(out_with))


def least_skew_after(counts: Mapping[str, int], remaining: int) -> int:
    """The least zone skew any choice of pods to delete can leave with ``remaining`` pods kept (pods are
    only removed): fill the zones level by level, each up to what it has."""
    keep = dict.fromkeys(counts, 0)
    left = min(remaining, sum(counts.values()))
    while left:
        open_ = sorted((keep[z], z) for z in counts if keep[z] < counts[z])
        keep[open_[0][1]] += 1
        left -= 1
    return skew_of(keep)


# --- what check --cluster and plan --cluster report (rules S25, S28) ------------------------------------

def is_managed(deployment: Mapping[str, Any]) -> bool:
    """A Deployment whose spread policylib wrote: it carries S15's record, and is not opted out (rule P1)."""
    from .result import is_opted_out
    from .spread import RECORD_REPLICAS, is_deployment
    return is_deployment(deployment) and not is_opted_out(dict(deployment)) and \
        RECORD_REPLICAS in (_meta(deployment).get("annotations") or {})


def cluster_report(objects: Iterable[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) \
        -> tuple[list[Violation], list[str]]:
    """Rules S25, S28: the spread violations of the managed Deployments among ``objects`` (their Pods
    among them too), and a note per managed Deployment whose pods carry a deletion cost another field
    manager owns (policylib leaves those alone)."""
    objects = list(objects)
    pods = [o for o in objects if isinstance(o, dict) and o.get("kind") == "Pod"]
    violations: list[Violation] = []
    notes: list[str] = []
    for d in objects:
        if not is_managed(d):
            continue
        mine = deployment_pods(d, pods)
        violations += spread_violations(d, mine, nodes)
        foreign = sorted({cost_owner(p) or "(unknown)" for p in mine if foreign_cost(p)})
        if foreign:
            count = sum(1 for p in mine if foreign_cost(p))
            meta = _meta(d)
            notes.append(f"deployment {meta.get('namespace') or 'default'}/{meta.get('name')}: {count} pod(s) carry a "
                         f"{DELETION_COST} set by {', '.join(foreign)}; policylib leaves their cost alone, so a "
                         "scale-down may not keep the zone spread")
    return violations, notes


def scale_table(results: Sequence[ScaleDown]) -> str:
    """``simulate --scale``'s table: per Deployment, the pods removed and the zones left, without and with
    the costs."""
    lines = []
    for r in results:
        lines.append(f"deployment {r.namespace}/{r.name}: {sum(r.before.values())} -> {r.replicas} replicas; "
                     f"pods per zone now {_zones(r.before)}")
        for label, removed, after in (("without the costs", r.removed_without, r.after_without),
                                      ("with the costs", r.removed_with, r.after_with)):
            lines.append(f"  {label}: removes {', '.join(removed) or 'nothing'}; leaves {_zones(after)} "
                         f"(zone skew {skew_of(after)})")
    return "\n".join(lines) + "\n"


def _zones(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{z or '(no zone)'}={n}" for z, n in counts.items())


def scale_report(specs: Sequence[str], objects: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                 zone_key: str, output: str = "table", now: datetime | None = None) -> str:
    """``simulate --scale NAME=N`` (rule S26): each named Deployment among ``objects`` scaled to N over its
    bound pods among them; an unknown name or a count that is not a non-negative int32 is an InputError."""
    from .errors import InputError
    from .spread import is_deployment
    deployments = [d for d in objects if is_deployment(d)]
    results = []
    for spec in specs:
        name, sep, count = spec.partition("=")
        if not sep or not count.isdigit() or int(count) > _INT32[1]:
            raise InputError(f"--scale {spec}: expected NAME=N or NAMESPACE/NAME=N with N a replica count (0 to "
                             f"{_INT32[1]})")
        ns, _, short = name.rpartition("/")
        found = [d for d in deployments if _meta(d).get("name") == short
                 and (not ns or (_meta(d).get("namespace") or "default") == ns)]
        if len(found) != 1:
            known = ", ".join(sorted(f"{_meta(d).get('namespace') or 'default'}/{_meta(d).get('name')}"
                                     for d in deployments)) or "none"
            what = "no Deployment" if not found else "more than one Deployment (give NAMESPACE/NAME)"
            raise InputError(f"--scale {spec}: {what} named {name} in the input; Deployments: {known}")
        results.append(scale_down(found[0], objects, nodes, int(count), zone_key, now))
    if output == "json":
        import json
        return json.dumps([r.as_dict() for r in results], indent=2) + "\n"
    return scale_table(results)
