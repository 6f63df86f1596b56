"""What the scheduler reads of Nodes and Pods: a Node as the snapshot holds it (:class:`NodeState`), one replica as
the filters and scores read it (:class:`PodShape`), and the matching rules they share (tolerations, node selector
terms, pod affinity terms). Plain data; the plugins (:mod:`policylib.kubescheduler.plugins`) decide with it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..constants import ANY_ADDRESS, HOSTNAME_LABEL, POD_TEMPLATE_HASH
from ..constants import ZONE_LABEL as ZONE_LABEL
from ..labels import selector_matches
from .resources import NON_MISSING, amounts, pod_requests

HARD_EFFECTS = ("NoSchedule", "NoExecute")
HOSTNAME = HOSTNAME_LABEL


# --- matching ------------------------------------------------------------------------------------

def tolerates(tolerations: list[Any], taint: dict[str, Any]) -> bool:
    """A toleration matches the taint's key (or tolerates every key with Exists), its value (Equal,
    the default) and its effect (or every effect) (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement_matches(req: dict[str, Any], labels: dict[str, Any]) -> bool:
    key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_term_matches(term: dict[str, Any], node: "NodeState") -> bool:
    """A NodeSelectorTerm: every expression on labels and every field (metadata.name) matches; an
    empty term matches nothing."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_requirement_matches(r, node.labels) for r in exprs) and \
        all(_requirement_matches(r, {"metadata.name": node.name}) for r in fields)


# --- nodes and pods ------------------------------------------------------------------------------

@dataclass
class BoundPod:
    """What later pods' filters read of a pod bound to a node."""

    namespace: str
    labels: dict[str, Any]
    anti_terms: list["PodTerm"]
    ports: list[tuple[str, int, str]]
    key: tuple[Any, ...] = ()        # the label set, as the snapshot indexes it

    def __post_init__(self) -> None:
        if not self.key:
            self.key = tuple(sorted(self.labels.items()))


@dataclass
class NodeState:
    """A Node as the scheduler's snapshot holds it: labels, taints, allocatable and what is bound."""

    name: str
    labels: dict[str, Any]
    taints: list[Any]
    unschedulable: bool
    allocatable: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    bound: dict[str, Any] = field(default_factory=dict)       # namespace -> label sets of the pods bound here
    nonzero: dict[str, int] = field(default_factory=dict)     # cpu and memory as scoring counts them
    pod_list: list[BoundPod] = field(default_factory=list)
    owned: dict[str, list["PodShape"]] = field(default_factory=dict)   # owner -> the pods it bound here

    @classmethod
    def of(cls, node: dict[str, Any]) -> "NodeState":
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        allocatable = amounts(status.get("allocatable") or status.get("capacity") or {})
        return cls(meta.get("name", ""), dict(meta.get("labels") or {}), [t for t in spec.get("taints") or []
                                                                         if isinstance(t, dict)],
                   bool(spec.get("unschedulable")), allocatable)

    def copy(self) -> "NodeState":
        return NodeState(self.name, self.labels, self.taints, self.unschedulable, self.allocatable,
                         dict(self.requested), self.pods, {ns: list(v) for ns, v in self.bound.items()},
                         dict(self.nonzero), list(self.pod_list), {o: list(v) for o, v in self.owned.items()})

    def bind(self, pod: "PodShape") -> None:
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        for k, v in pod.nonzero.items():
            self.nonzero[k] = self.nonzero.get(k, 0) + v
        self.pods += 1
        self.bound.setdefault(pod.namespace, []).append(pod.labels)
        self.pod_list.append(pod.bound_as)
        if pod.owner:
            self.owned.setdefault(pod.owner, []).append(pod)

    def unbind(self, pod: "PodShape") -> None:
        """What :meth:`bind` did for ``pod`` (or for a bound pod with the same facts) undone."""
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
        for k, v in pod.nonzero.items():
            self.nonzero[k] = self.nonzero.get(k, 0) - v
        self.pods -= 1
        self.bound[pod.namespace].remove(pod.labels)
        self.pod_list.remove(pod.bound_as)
        if pod.owner:
            self.owned[pod.owner].remove(pod)

    def release(self, owner: str) -> None:
        """Every pod ``owner`` bound here unbound (a gang's pods, rule G14: the gang does not crowd out itself)."""
        for pod in list(self.owned.get(owner, ())):
            self.unbind(pod)
        self.owned.pop(owner, None)


@dataclass
class PodTerm:
    """A pod (anti-)affinity term: which pods (namespaces, None for all; selector) in which domain (key)."""

    selector: dict[str, Any] | None
    namespaces: frozenset[str] | None
    key: str
    weight: int = 0

    def matches(self, namespace: str, labels: dict[str, Any]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and selector_matches(self.selector, labels)


def _pod_terms(raw: Any, namespace: str, labels: dict[str, Any], weighted: bool,
               unmodelled: list[str]) -> list[PodTerm]:
    out = []
    for item in raw or []:
        if not isinstance(item, dict):
            continue
        term = (item.get("podAffinityTerm") or {}) if weighted else item
        selector = term.get("labelSelector")
        if isinstance(selector, dict):
            selector = dict(selector)
            exprs = list(selector.get("matchExpressions") or [])
            for k in term.get("matchLabelKeys") or []:
                if k in labels:
                    exprs.append({"key": k, "operator": "In", "values": [labels[k]]})
            for k in term.get("mismatchLabelKeys") or []:
                if k in labels:
                    exprs.append({"key": k, "operator": "NotIn", "values": [labels[k]]})
            selector["matchExpressions"] = exprs
        ns_selector = term.get("namespaceSelector")
        names = [n for n in term.get("namespaces") or [] if isinstance(n, str)]
        namespaces: frozenset[str] | None
        if ns_selector is not None and (ns_selector.get("matchLabels") or ns_selector.get("matchExpressions")):
            unmodelled.append("a pod affinity term's namespaceSelector (Namespace labels are not read)")
            namespaces = None
        elif ns_selector is not None:
            namespaces = None                          # an empty namespaceSelector: every namespace
        else:
            namespaces = frozenset(names or [namespace])
        out.append(PodTerm(selector, namespaces, str(term.get("topologyKey") or ""),
                           int(item.get("weight") or 0) if weighted else 0))
    return out


def _host_ports(spec: dict[str, Any]) -> list[tuple[str, int, str]]:
    out = []
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        for p in (c.get("ports") or []) if isinstance(c, dict) else []:
            if isinstance(p, dict) and p.get("hostPort"):
                out.append((str(p.get("protocol") or "TCP"), int(p["hostPort"]), str(p.get("hostIP") or ANY_ADDRESS)))
    return out


@dataclass
class PodShape:
    """What the scheduler reads of one replica."""

    namespace: str
    labels: dict[str, Any]
    node_selector: dict[str, Any]
    required_terms: list[Any] | None      # None: no required node affinity
    preferred_terms: list[Any]
    tolerations: list[Any]
    requests: dict[str, int]
    constraints: list[dict[str, Any]]
    nonzero: dict[str, int] = field(default_factory=dict)
    affinity_terms: list[PodTerm] = field(default_factory=list)
    anti_terms: list[PodTerm] = field(default_factory=list)
    preferred_pod_terms: list[tuple[int, PodTerm]] = field(default_factory=list)   # (+1 affinity, -1 anti)
    host_ports: list[tuple[str, int, str]] = field(default_factory=list)
    default_selector: dict[str, Any] | None = None     # the owning ReplicaSet's selector (default spreading)
    unmodelled: list[str] = field(default_factory=list)
    fit_score: dict[str, int] = field(default_factory=dict)   # what LeastAllocated counts the pod as
    owner: str = ""          # whose pod it is, where a caller releases them later (NodeState.release)

    @classmethod
    def of_template(cls, template: dict[str, Any], namespace: str, revision: str,
                    owner_selector: dict[str, Any] | None = None, owner: str = "") -> "PodShape":
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        affinity = spec.get("affinity") or {}
        node_affinity = affinity.get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        labels = dict(meta.get("labels") or {})
        if revision:
            labels.setdefault(POD_TEMPLATE_HASH, revision)   # the ReplicaSet's label, unique per revision
        unmodelled: list[str] = []
        pod_aff, pod_anti = affinity.get("podAffinity") or {}, affinity.get("podAntiAffinity") or {}
        key = "requiredDuringSchedulingIgnoredDuringExecution"
        pkey = "preferredDuringSchedulingIgnoredDuringExecution"
        preferred = [(1, t) for t in _pod_terms(pod_aff.get(pkey), namespace, labels, True, unmodelled)] + \
            [(-1, t) for t in _pod_terms(pod_anti.get(pkey), namespace, labels, True, unmodelled)]
        default_selector = None
        if owner_selector is not None and revision:
            default_selector = {"matchLabels": {**(owner_selector.get("matchLabels") or {}),
                                                POD_TEMPLATE_HASH: labels[POD_TEMPLATE_HASH]},
                                "matchExpressions": list(owner_selector.get("matchExpressions") or [])}
        return cls(namespace, labels, dict(spec.get("nodeSelector") or {}),
                   None if required is None else list(required.get("nodeSelectorTerms") or []),
                   list(node_affinity.get(pkey) or []),
                   list(spec.get("tolerations") or []), pod_requests(spec),
                   [c for c in spec.get("topologySpreadConstraints") or [] if isinstance(c, dict)],
                   nonzero_requests(spec),
                   _pod_terms(pod_aff.get(key), namespace, labels, False, unmodelled),
                   _pod_terms(pod_anti.get(key), namespace, labels, False, unmodelled),
                   preferred, _host_ports(spec), default_selector, unmodelled, least_allocated_requests(spec), owner)

    def __post_init__(self) -> None:
        self.bound_as = BoundPod(self.namespace, self.labels, self.anti_terms, self.host_ports)

    def matches_affinity(self, node: NodeState) -> bool:
        """nodeSelector and required node affinity (the NodeAffinity filter, and nodeAffinityPolicy Honor)."""
        if any(node.labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        return self.required_terms is None or any(node_selector_term_matches(t, node) for t in self.required_terms
                                                  if isinstance(t, dict))

    def untolerated(self, node: NodeState, effects: tuple[str, ...] = HARD_EFFECTS) -> dict[str, Any] | None:
        for taint in node.taints:
            if taint.get("effect") in effects and not tolerates(self.tolerations, taint):
                return dict(taint)
        return None

    def signature(self) -> str:
        return json.dumps([self.node_selector, self.required_terms, self.tolerations, self.preferred_terms],
                          sort_keys=True, default=str)


def nonzero_requests(spec: dict[str, Any]) -> dict[str, int]:
    """The cpu and memory a pod counts as for scoring (framework ``PodInfo.CalculateResource``): each container
    without a cpu or memory request counts 100m and 200Mi; with pod-level requests set, only for a resource that
    neither the containers nor the pod request."""
    pod_level = spec.get("resources") if isinstance(spec.get("resources"), dict) else None
    non_missing = NON_MISSING
    if pod_level and any(str(k) in ("cpu", "memory") or str(k).startswith("hugepages-")
                         for k in (pod_level.get("requests") or {})):
        present = pod_requests(spec)
        non_missing = {k: v for k, v in NON_MISSING.items() if k not in present}
    requests = pod_requests(spec, non_missing)
    return {k: requests.get(k, 0) for k in NON_MISSING}


def least_allocated_requests(spec: dict[str, Any]) -> dict[str, int]:
    """Rule R13: the cpu and memory NodeResourcesFit's LeastAllocated score counts the incoming pod as: the containers'
    requests with 100m and 200Mi for each container that requests none, without pod-level resources (1.36's Fit
    plugin never passes PodLevelResources to its scorer, so ``SkipPodLevelResources`` is true there)."""
    requests = pod_requests(spec, NON_MISSING, pod_level=False)
    return {k: requests.get(k, 0) for k in NON_MISSING}
