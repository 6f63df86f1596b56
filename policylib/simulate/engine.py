"""One placement engine: kube-scheduler 1.36's default profile as a table of filter and score plugins.

Each replica goes through the filters in the order the framework runs them (the first that fails names the
node's reason) and the feasible nodes are scored by the weighted plugins of ``SCORE_PLUGINS`` (weights of
``pkg/scheduler/apis/config/v1/default_plugins.go``), each normalised as its plugin normalises. Every node's
state lives in arrays (one entry per node), so a filter or a score is computed for all nodes at once; after a
bind only the bound node's entries change and are recomputed (``incremental``). With ``incremental=False``
everything is recomputed from the pods for every replica: the same model, slower; the property test in
tests/test_simulate.py holds both to the same placement per node. On the incremental path a pod shape's fit and
resource scores are also kept across workloads (only the nodes bound since are recomputed), and only the feasible
nodes are scored; a score that every feasible node shares is skipped, as it cannot change which node wins.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..constants import ANY_ADDRESS, HOSTNAME_LABEL, POD_TEMPLATE_HASH
from ..constants import UNSCHEDULABLE_TAINT as UNSCHEDULABLE_TAINT_KEY
from ..constants import ZONE_LABEL as ZONE_LABEL

if TYPE_CHECKING:
    import numpy as np
else:
    class _Numpy:
        """numpy, imported on first use: ``import policylib`` (the webhook, the CLI's other commands) does not
        load it."""

        def __getattr__(self, name: str) -> Any:
            import numpy
            globals()["np"] = numpy
            return getattr(numpy, name)

    np = _Numpy()

from ..labels import selector_matches
from ..validation import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY
from .resources import NON_MISSING, fit_failures, fits, pod_requests

HARD_EFFECTS = ("NoSchedule", "NoExecute")
HOSTNAME = HOSTNAME_LABEL
UNSCHEDULABLE_TAINT = {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}
#: PodTopologySpread's System default constraints (pods without constraints of their own, owned by a ReplicaSet).
SYSTEM_DEFAULT_SPREAD = ((HOSTNAME, 3), (ZONE_LABEL, 5))
MAX_SCORE = 100

MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
MSG_SPREAD = "node(s) didn't match pod topology spread constraints"
MSG_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
MSG_UNSCHEDULABLE = "node(s) were unschedulable"
MSG_TOO_MANY_PODS = "Too many pods"
MSG_PORTS = "node(s) didn't have free ports for the requested pod ports"
MSG_POD_AFFINITY = "node(s) didn't match pod affinity rules"
MSG_POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
MSG_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


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
    key: tuple[Any, ...] = ()        # the label set, as the cluster indexes it

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

    @classmethod
    def of(cls, node: dict[str, Any]) -> "NodeState":
        from .resources import amounts
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        allocatable = amounts(status.get("allocatable") or status.get("capacity") or {})
        return cls(meta.get("name", ""), dict(meta.get("labels") or {}), [t for t in spec.get("taints") or []
                                                                         if isinstance(t, dict)],
                   bool(spec.get("unschedulable")), allocatable)

    def copy(self) -> "NodeState":
        return NodeState(self.name, self.labels, self.taints, self.unschedulable, self.allocatable,
                         dict(self.requested), self.pods, {ns: list(v) for ns, v in self.bound.items()},
                         dict(self.nonzero), list(self.pod_list))

    def bind(self, pod: "PodShape") -> None:
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        for k, v in pod.nonzero.items():
            self.nonzero[k] = self.nonzero.get(k, 0) + v
        self.pods += 1
        self.bound.setdefault(pod.namespace, []).append(pod.labels)
        self.pod_list.append(pod.bound_as)


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

    @classmethod
    def of_template(cls, template: dict[str, Any], namespace: str, revision: str,
                    owner_selector: dict[str, Any] | None = None) -> "PodShape":
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
                   preferred, _host_ports(spec), default_selector, unmodelled, least_allocated_requests(spec))

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


# --- the cluster as arrays -----------------------------------------------------------------------

@dataclass
class Static:
    """The filters and scores that do not change while pods are bound, for one pod signature."""

    ok: np.ndarray               # NodeUnschedulable, TaintToleration, NodeAffinity
    affinity: np.ndarray         # NodeAffinity alone (nodeAffinityPolicy Honor)
    tolerated: np.ndarray        # no untolerated NoSchedule/NoExecute taint (nodeTaintsPolicy Honor)
    reasons: list[str | None]
    prefer: np.ndarray           # untolerated PreferNoSchedule taints
    preferred: np.ndarray        # summed weights of the matching preferred node affinity terms
    sig: str = ""

    def __post_init__(self) -> None:
        self.has_prefer, self.has_preferred = bool(self.prefer.any()), bool(self.preferred.any())


@dataclass
class Spread:
    """One topology spread constraint of the incoming pod, as PodTopologySpread holds it."""

    key: str
    max_skew: int
    hard: bool
    min_domains: int
    selector: dict[str, Any] | None
    counts_pods: bool               # False for an empty or null selector: countPodsMatchSelector counts none
    self_match: int
    included: np.ndarray            # nodes that pass the inclusion policies (and carry the keys required)
    domain: np.ndarray              # each node's domain index, -1 without the key
    arrays: tuple[np.ndarray, bool, np.ndarray] | None = None    # _domain_arrays(domain), if known
    matched: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # matching pods per node
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))    # per domain (included nodes)
    eligible: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))      # domains with an included node
    domains: int = 0                                                                      # how many
    any_matched: bool = False                                                             # a pod counted
    node_domains: bool = False          # domain i is node i, on every node (counts are per node)

    def __post_init__(self) -> None:
        self.has, self.every_node, self.dom0 = self.arrays or _domain_arrays(self.domain)


def _domain_arrays(domain: np.ndarray) -> tuple[np.ndarray, bool, np.ndarray]:
    """Where a topology key is set, whether on every node, and each node's domain index with 0 where unset."""
    has = domain >= 0
    return has, bool(has.all()), np.where(has, domain, 0)


class Cluster:
    """Every node's state in arrays, kept equal to the :class:`NodeState` list it was built from."""

    def __init__(self, states: list[NodeState]):
        self.states = states
        n = len(states)
        self.index = {s.name: i for i, s in enumerate(states)}
        self.max_pods = np.array([s.allocatable.get("pods", 0) for s in states], dtype=np.int64)
        self.pods = np.array([s.pods for s in states], dtype=np.int64)
        names = {k for s in states for k in list(s.allocatable) + list(s.requested)} - {"pods"}
        self.alloc = {k: np.array([s.allocatable.get(k, 0) for s in states], dtype=np.int64) for k in names}
        self.req = {k: np.array([s.requested.get(k, 0) for s in states], dtype=np.int64) for k in names}
        self.nonzero = {k: np.array([s.nonzero.get(k, 0) for s in states], dtype=np.int64) for k in NON_MISSING}
        for k in NON_MISSING:
            self.alloc.setdefault(k, np.zeros(n, dtype=np.int64))
            self.req.setdefault(k, np.zeros(n, dtype=np.int64))
        self.safe = {k: np.where(self.alloc[k] > 0, self.alloc[k], 1) for k in NON_MISSING}
        self.weights = np.maximum((self.alloc["cpu"] > 0).astype(np.int64) + (self.alloc["memory"] > 0), 1)
        self.half_both = ((self.alloc["cpu"] > 0) & (self.alloc["memory"] > 0)) / 2
        self.balance = _balance(self.req["cpu"], self.req["memory"], self)    # each node's, without the pod
        self._eligible: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
        # namespace -> label set -> (labels, pods per node); namespace -> (key, value) -> label sets
        self.groups: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], np.ndarray]]] = {}
        self.pairs: dict[str, dict[tuple[str, Any], set[tuple[Any, ...]]]] = {}
        self.anti: list[tuple[int, str, PodTerm]] = []
        self.ports: list[list[tuple[str, int, str]]] = [[] for _ in states]
        self._domains: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._domain_arrays: dict[str, tuple[np.ndarray, bool, np.ndarray]] = {}
        self._node_domains: dict[str, bool] = {}
        self._static: dict[str, Static] = {}
        self.bind_log: list[int] = []     # the node of every bind, in order
        # a pod shape's (fit, LeastAllocated, BalancedAllocation) arrays and how much of bind_log they have seen
        self._resources: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
        for i, s in enumerate(states):
            for p in s.pod_list:
                self._index_pod(i, p)

    # --- bookkeeping ---

    def _index_pod(self, i: int, p: BoundPod) -> None:
        key = p.key
        groups = self.groups.setdefault(p.namespace, {})
        if key not in groups:
            groups[key] = (p.labels, np.zeros(len(self.states), dtype=np.int64))
            pairs = self.pairs.setdefault(p.namespace, {})
            for kv in p.labels.items():
                pairs.setdefault(kv, set()).add(key)
        groups[key][1][i] += 1
        for t in p.anti_terms:
            self.anti.append((i, p.namespace, t))
        self.ports[i].extend(p.ports)

    def domain_arrays(self, key: str) -> tuple[np.ndarray, bool, np.ndarray]:
        """:func:`_domain_arrays` of ``key``'s domains, computed once."""
        if key not in self._domain_arrays:
            self._domain_arrays[key] = _domain_arrays(self.domains(key)[0])
        return self._domain_arrays[key]

    def node_domains(self, key: str) -> bool:
        """Whether node i is alone in domain i for ``key``, on every node."""
        if key not in self._node_domains:
            idx, values = self.domains(key)
            self._node_domains[key] = len(values) == len(idx) and bool((idx == np.arange(len(idx))).all())
        return self._node_domains[key]

    def domains(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Each node's domain index for a topology key (-1 without the label), and the domains."""
        if key not in self._domains:
            values: dict[str, int] = {}
            idx = np.array([values.setdefault(s.labels[key], len(values)) if key in s.labels else -1
                            for s in self.states], dtype=np.int64)
            self._domains[key] = (idx, list(values))
        return self._domains[key]

    def single_node_domains(self, key: str) -> bool:
        """Whether every domain of ``key`` holds one node."""
        idx, values = self.domains(key)
        return len(values) == int((idx >= 0).sum())

    def matched(self, namespaces: frozenset[str] | None, selector: dict[str, Any] | None) -> np.ndarray:
        """Pods per node whose namespace is among ``namespaces`` (None: all) and whose labels ``selector`` matches."""
        out = np.zeros(len(self.states), dtype=np.int64)
        if not isinstance(selector, dict):
            return out
        first = next(iter((selector.get("matchLabels") or {}).items()), None)
        for ns in (self.groups if namespaces is None else namespaces):
            groups = self.groups.get(ns)
            if not groups:
                continue
            keys: Any = groups.keys() if first is None else self.pairs.get(ns, {}).get(first, ())
            for key in keys:
                labels, counts = groups[key]
                if selector_matches(selector, labels):
                    out += counts
        return out

    def static(self, pod: PodShape) -> Static:
        sig = pod.signature()
        if sig not in self._static:
            n = len(self.states)
            ok, aff, tol = np.ones(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
            reasons: list[str | None] = [None] * n
            prefer, preferred = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
            for i, s in enumerate(self.states):
                taint = pod.untolerated(s)
                tol[i] = taint is None
                aff[i] = pod.matches_affinity(s)
                reasons[i] = static_failure(pod, s, taint, bool(aff[i]))
                ok[i] = reasons[i] is None
                prefer[i] = sum(1 for t in s.taints if t.get("effect") == "PreferNoSchedule"
                                and not tolerates(pod.tolerations, t))
                preferred[i] = sum(int(t.get("weight") or 0) for t in pod.preferred_terms if isinstance(t, dict)
                                   and node_selector_term_matches(t.get("preference") or {}, s))
            self._static[sig] = Static(ok, aff, tol, reasons, prefer, preferred, sig)
        return self._static[sig]

    def bind(self, i: int, pod: PodShape) -> None:
        s = self.states[i]
        s.bind(pod)
        for k, v in pod.requests.items():
            if k not in self.req:
                self.req[k] = np.zeros(len(self.states), dtype=np.int64)
                self.alloc[k] = np.array([x.allocatable.get(k, 0) for x in self.states], dtype=np.int64)
            self.req[k][i] += v
        for k, v in pod.nonzero.items():
            self.nonzero[k][i] += v
        self.pods[i] += 1
        self.balance[i] = _balance_one((s.requested.get("cpu", 0), s.requested.get("memory", 0)),
                                       (s.allocatable.get("cpu", 0), s.allocatable.get("memory", 0)))
        self._index_pod(i, s.pod_list[-1])
        self.bind_log.append(i)

    def resources(self, pod: PodShape, key: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pod's NodeResourcesFit filter, LeastAllocated and BalancedAllocation scores on every node. Kept per pod
        shape (``key``, :func:`resource_key`) across workloads: a later workload of the same shape recomputes only
        the nodes bound since (rule R9), and its cycle updates the same arrays after each bind."""
        if key not in self._resources:
            arrays = (fits(pod.requests, self.alloc, self.req, self.pods, self.max_pods),
                      least_allocated(pod, self), balanced_allocation(pod, self))
        else:
            *old, seen = self._resources[key]
            arrays = (old[0], old[1], old[2])
            for i in set(self.bind_log[seen:]):
                _refresh_resources(self, pod, i, *arrays)
        self._resources[key] = (*arrays, len(self.bind_log))
        return arrays

    # --- one workload ---

    def place(self, pod: PodShape, count: int, rank: np.ndarray | None = None,
              incremental: bool = True) -> tuple[dict[str, int], int, list[str], bool]:
        """Place ``count`` replicas, binding each; returns (pods per node, Pending, reasons, whether every choice
        was the only best-scored node). ``rank`` breaks ties (lowest wins; default: name order)."""
        n = len(self.states)
        rank = np.arange(n) if rank is None else rank
        placed: dict[str, int] = {}
        deterministic = True
        state = Cycle(self, pod, incremental)
        for r in range(count):
            if not incremental and r:
                state = Cycle(self, pod, incremental)
            feasible = state.feasible()
            chosen = feasible.nonzero()[0]
            if not len(chosen):
                return placed, count - r, [state.failure_message()], deterministic
            if len(chosen) > 1:
                total = state.scores(feasible, chosen)
                if total is not None:
                    chosen = chosen[total == total.max()]
            if len(chosen) > 1:
                deterministic = False
                i = int(chosen[rank[chosen].argmin()])
            else:
                i = int(chosen[0])
            self.bind(i, pod)
            state.bound(i)
            name = self.states[i].name
            placed[name] = placed.get(name, 0) + 1
        return placed, 0, [], deterministic


def static_failure(pod: PodShape, node: NodeState, taint: dict[str, Any] | None, affinity: bool) -> str | None:
    """Rule R3: the filters that do not change while pods are bound, in the framework's order: NodeUnschedulable
    (a cordoned node, unless the pod tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint),
    TaintToleration (NoSchedule and NoExecute taints), NodeAffinity (nodeSelector and required terms)."""
    if node.unschedulable and not tolerates(pod.tolerations, UNSCHEDULABLE_TAINT):
        return MSG_UNSCHEDULABLE
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    if not affinity:
        return MSG_AFFINITY
    return None


# --- one scheduling cycle's state ----------------------------------------------------------------

def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.floor(x + 0.5).astype(np.int64)


def least_allocated(pod: PodShape, c: Cluster) -> np.ndarray:
    """Rule R10: NodeResourcesFit's score (LeastAllocated, cpu and memory weight 1): the free share after the pod, with pods
    that request nothing counted as 100m cpu and 200Mi memory; resources a node has none of are left out."""
    total = np.zeros(len(c.states), dtype=np.int64)
    for k in ("cpu", "memory"):
        alloc = c.alloc[k]
        used = c.nonzero[k] + pod.fit_score.get(k, 0)
        total = total + np.where(used <= alloc, (alloc - used) * MAX_SCORE // c.safe[k], 0)
    out: np.ndarray = total // c.weights
    return out


def _balance(cpu: np.ndarray, memory: np.ndarray, c: Cluster) -> np.ndarray:
    fc = np.minimum(cpu / c.safe["cpu"], 1.0)
    fm = np.minimum(memory / c.safe["memory"], 1.0)
    out: np.ndarray = ((1 - np.abs(fc - fm) * c.half_both) * MAX_SCORE).astype(np.int64)
    return out


def balanced_allocation(pod: PodShape, c: Cluster) -> np.ndarray:
    """Rule R12: NodeResourcesBalancedAllocation (1.36): 50 + (50 + balance with the pod - balance without it) / 2, the balance
    being 100 x (1 - std of the cpu and memory fractions); skipped (0) for a pod that requests neither."""
    cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if not cpu and not memory:
        return np.zeros(len(c.states), dtype=np.int64)
    after = _balance(c.req["cpu"] + cpu, c.req["memory"] + memory, c)
    out: np.ndarray = MAX_SCORE // 2 + (MAX_SCORE // 2 + after - c.balance) // 2
    return out


def _least_one(alloc: tuple[int, int], used: tuple[int, int]) -> int:
    """:func:`least_allocated` for one node (the incremental update after a bind)."""
    total = weights = 0
    for a, u in zip(alloc, used, strict=True):
        if a > 0:
            total += (a - u) * MAX_SCORE // a if u <= a else 0
            weights += 1
    return total // weights if weights else 0


def _balance_one(requested: tuple[int, int], alloc: tuple[int, int]) -> int:
    both = alloc[0] > 0 and alloc[1] > 0
    std = abs(min(requested[0] / alloc[0], 1.0) - min(requested[1] / alloc[1], 1.0)) / 2 if both else 0.0
    return int((1 - std) * MAX_SCORE)


def resource_key(pod: PodShape) -> tuple[Any, ...]:
    """What :func:`fits`, :func:`least_allocated` and :func:`balanced_allocation` read of a pod."""
    return tuple(sorted(pod.requests.items())), tuple(sorted(pod.fit_score.items()))


def _refresh_resources(c: Cluster, pod: PodShape, i: int, fit: np.ndarray, least: np.ndarray,
                       balanced: np.ndarray) -> None:
    """Node i's entries of :func:`fits`, :func:`least_allocated` and :func:`balanced_allocation` for ``pod``, from the
    node's state (after a bind there; ``c.balance`` already holds the node's balance without the pod)."""
    node = c.states[i]
    requested, allocatable = node.requested, node.allocatable
    fit[i] = fits(pod.requests, allocatable, requested, node.pods, allocatable.get("pods", 0))
    alloc = (allocatable.get("cpu", 0), allocatable.get("memory", 0))
    least[i] = _least_one(alloc, (node.nonzero.get("cpu", 0) + pod.fit_score.get("cpu", 0),
                                  node.nonzero.get("memory", 0) + pod.fit_score.get("memory", 0)))
    cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    if cpu or memory:
        after = _balance_one((requested.get("cpu", 0) + cpu, requested.get("memory", 0) + memory), alloc)
        balanced[i] = MAX_SCORE // 2 + (MAX_SCORE // 2 + after - int(c.balance[i])) // 2


def _default_normalize(raw: np.ndarray, feasible: np.ndarray, reverse: bool) -> np.ndarray:
    top = raw[feasible].max() if feasible.any() else 0
    if top == 0:
        return np.full(raw.shape, MAX_SCORE if reverse else 0, dtype=np.int64)
    score = MAX_SCORE * raw // top
    return MAX_SCORE - score if reverse else score


class Cycle:
    """PreFilter and PreScore state of one pod against the cluster, updated as its siblings bind."""

    def __init__(self, cluster: Cluster, pod: PodShape, incremental: bool = True):
        self.c, self.pod = cluster, pod
        self.st = cluster.static(pod)
        self.resource_key: tuple[Any, ...] | None = None
        if incremental:
            self.resource_key = resource_key(pod)
            self.fit, self.least, self.balanced = cluster.resources(pod, self.resource_key)
        else:
            self.fit = fits(pod.requests, cluster.alloc, cluster.req, cluster.pods, cluster.max_pods)
            self.least = least_allocated(pod, cluster)
            self.balanced = balanced_allocation(pod, cluster)
        self.balances = bool(pod.requests.get("cpu", 0) or pod.requests.get("memory", 0))   # else skipped: 0
        self.hard = self._spreads(DO_NOT_SCHEDULE)
        self.soft = self._spreads(SCHEDULE_ANYWAY)
        self.soft_keys: np.ndarray | None = None    # the pod's own constraints: nodes without a key score 0
        if self.soft and pod.constraints and not all(s.every_node for s in self.soft):
            self.soft_keys = np.logical_and.reduce([s.has for s in self.soft])
        # whether any constraint counts a pod yet, and whether every scored node then has the same raw score
        # (the pod's own constraints: scored nodes carry every key; the System defaults: every node the keys)
        self.soft_counted = any(s.any_matched for s in self.soft)
        self.soft_uniform = self.soft_keys is not None or all(s.every_node for s in self.soft)
        self.soft_nonnegative = all(s.max_skew >= 1 for s in self.soft)
        self.uses_pod_affinity = bool(pod.affinity_terms or pod.anti_terms or cluster.anti)

    # PodTopologySpread
    def _spreads(self, action: str) -> list[Spread]:
        pod, c = self.pod, self.c
        n = len(c.states)
        raw = [x for x in pod.constraints if x.get("whenUnsatisfiable") == action]
        own = bool(pod.constraints)
        if not own:
            if action != SCHEDULE_ANYWAY or pod.default_selector is None:
                return []
            raw = [{"topologyKey": k, "maxSkew": skew, "whenUnsatisfiable": action,
                    "labelSelector": pod.default_selector} for k, skew in SYSTEM_DEFAULT_SPREAD]
        if not raw:
            return []
        keys = [str(x.get("topologyKey") or "") for x in raw]
        has_all = np.ones(n, dtype=bool)
        if own:   # the scheduler requires every key of the pod's own constraints (not of the System defaults)
            for k in keys:
                has_all &= c.domains(k)[0] >= 0
        out = []
        for x, key in zip(raw, keys, strict=True):
            selector = x.get("labelSelector")
            if isinstance(selector, dict):
                selector = dict(selector)
                exprs = list(selector.get("matchExpressions") or [])
                for k in x.get("matchLabelKeys") or []:
                    if k in pod.labels:
                        exprs.append({"key": k, "operator": "In", "values": [pod.labels[k]]})
                selector["matchExpressions"] = exprs
            else:
                selector = None
            counts_pods = bool(selector and (selector.get("matchLabels") or selector.get("matchExpressions")))
            honor_affinity = (x.get("nodeAffinityPolicy") or "Honor") == "Honor"
            honor_taints = (x.get("nodeTaintsPolicy") or "Ignore") == "Honor"
            domain, values = c.domains(key)
            cache_key = (self.st.sig, key, tuple(keys) if own else (), honor_affinity, honor_taints)
            if cache_key not in c._eligible:
                included = has_all.copy()
                if honor_affinity:
                    included &= self.st.affinity
                if honor_taints:
                    included &= self.st.tolerated
                sel = included & (domain >= 0)
                c._eligible[cache_key] = (included, np.bincount(domain[sel], minlength=max(len(values), 1)) > 0)
            included, eligible = c._eligible[cache_key]
            hard = action == DO_NOT_SCHEDULE
            s = Spread(key, int(x.get("maxSkew") or 1), hard, int(x.get("minDomains") or 1) if hard else 1,
                       selector, counts_pods, int(selector is not None and selector_matches(selector, pod.labels)),
                       included, domain, c.domain_arrays(key))
            s.matched = c.matched(frozenset([pod.namespace]), selector) if counts_pods else np.zeros(n, dtype=np.int64)
            s.eligible = eligible
            s.node_domains = c.node_domains(key)
            s.domains = int(np.count_nonzero(eligible))
            s.any_matched = bool(s.matched.any())
            if s.any_matched:
                sel = included & s.has
                s.counts = np.bincount(domain[sel], weights=s.matched[sel], minlength=max(len(values), 1)).astype(np.int64)
            else:
                s.counts = np.zeros(max(len(values), 1), dtype=np.int64)
            out.append(s)
        return out

    def _spread_ok(self, s: Spread) -> np.ndarray:
        """Rule R4: PodTopologySpread's filter for one DoNotSchedule constraint."""
        if not s.any_matched and s.max_skew >= s.self_match:
            return s.has                  # no pod counted yet: every domain at 0, every node with the key passes
        counts = s.counts
        low = 0 if s.domains < s.min_domains or s.domains == 0 else \
            int((counts if s.domains == len(counts) else counts[s.eligible]).min())
        ok: np.ndarray = (counts if s.node_domains else counts[s.dom0]) <= s.max_skew + low - s.self_match
        return ok if s.every_node else ok & s.has

    def _spread_score(self, chosen: np.ndarray) -> np.ndarray | None:
        """Rule R5: PodTopologySpread's score for the ScheduleAnyway constraints (or the System defaults): per
        node, the sum over constraints of matching pods in its domain x log(domains among the filtered nodes + 2)
        + maxSkew - 1, rounded; nodes without a key of the pod's own constraints score 0; the rest normalised
        100 x (max + min - score) / max. Computed for the feasible nodes ``chosen`` only (their scores, in that
        order); None where every one of them scores the same."""
        keyed = self.soft_keys[chosen] if self.soft_keys is not None else None
        scored = chosen if keyed is None else chosen[keyed]
        if not len(scored):
            return None                                   # every feasible node scores 0
        if not self.soft_counted and self.soft_uniform:
            # no matching pod yet: every scored node's raw score is the same, so each normalises to 100
            return None if keyed is None else keyed * MAX_SCORE
        raw: Any = None
        for s in self.soft:
            if s.key == HOSTNAME:
                size = len(scored)
                cnt = s.matched[scored]
            elif s.every_node:          # no node without the key: its domains among the scored nodes
                d = s.dom0[scored]
                size = int(np.count_nonzero(np.bincount(d)))
                cnt = s.counts[d]
            else:                       # nodes without the key count as one more domain
                size = int(np.count_nonzero(np.bincount(s.domain[scored] + 1, minlength=len(s.counts) + 1)))
                cnt = s.counts[s.dom0[scored]]
            term = cnt * math.log(size + 2)
            if s.max_skew != 1:
                term = term + (s.max_skew - 1)
            if not s.every_node:
                term = term * s.has[scored]
            raw = term if raw is None else raw + term
        # rounded half up; where no term can be negative, truncation is the floor
        score: np.ndarray = (raw + 0.5).astype(np.int64) if self.soft_nonnegative else \
            np.floor(raw + 0.5).astype(np.int64)
        hi, lo = int(score.max()), int(score.min())
        if hi == lo:
            return None if keyed is None else keyed * MAX_SCORE
        normalised = MAX_SCORE * (hi + lo - score) // hi
        if keyed is None:
            return normalised
        out = np.zeros(len(chosen), dtype=np.int64)
        out[keyed] = normalised
        return out

    # InterPodAffinity
    def _term_counts(self, term: PodTerm) -> tuple[np.ndarray, np.ndarray]:
        """Matching pods per node's domain for ``term`` (0 without the key), and whether a node has the key."""
        domain, values = self.c.domains(term.key)
        has = domain >= 0
        matched = self.c.matched(term.namespaces, term.selector)
        per = np.bincount(domain[has], weights=matched[has], minlength=max(len(values), 1)).astype(np.int64)
        return np.where(has, per[np.where(has, domain, 0)], 0), has

    def _pod_affinity(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rule R6: InterPodAffinity's filter: (existing pods' anti-affinity, the pod's affinity, the pod's
        anti-affinity), each True where the node passes."""
        n = len(self.c.states)
        existing = np.ones(n, dtype=bool)
        for i, _ns, term in self.c.anti:
            if term.matches(self.pod.namespace, self.pod.labels):
                domain, _ = self.c.domains(term.key)
                if domain[i] >= 0:
                    existing &= domain != domain[i]
        affinity = np.ones(n, dtype=bool)
        if self.pod.affinity_terms:
            exist = np.ones(n, dtype=bool)
            any_match = False
            for term in self.pod.affinity_terms:
                cnt, has = self._term_counts(term)
                affinity &= has
                exist &= cnt > 0
                any_match = any_match or bool(cnt.any())
            self_match = all(t.matches(self.pod.namespace, self.pod.labels) for t in self.pod.affinity_terms)
            if not (not any_match and self_match):
                affinity &= exist
        anti = np.ones(n, dtype=bool)
        for term in self.pod.anti_terms:
            cnt, has = self._term_counts(term)
            anti &= ~(has & (cnt > 0))
        return existing, affinity, anti

    def _pod_affinity_score(self, feasible: np.ndarray) -> np.ndarray:
        """Rule R7: InterPodAffinity's score for the pod's preferred terms: the terms' weights (negative for
        anti-affinity) times the matching pods in the node's domain, min-max normalised."""
        n = len(self.c.states)
        raw = np.zeros(n, dtype=np.int64)
        seen = False
        for sign, term in self.pod.preferred_pod_terms:
            cnt, _ = self._term_counts(term)
            seen = seen or bool(cnt.any())
            raw += sign * term.weight * cnt
        if not seen:
            return np.zeros(n, dtype=np.int64)
        hi, lo = int(raw[feasible].max()), int(raw[feasible].min())
        if hi == lo:
            return np.zeros(n, dtype=np.int64)
        return (MAX_SCORE * ((raw - lo) / (hi - lo))).astype(np.int64)

    def _ports_ok(self) -> np.ndarray:
        """Rule R8: NodePorts: a host port (protocol, port) taken on the node, on the same or a wildcard IP."""
        out = np.ones(len(self.c.states), dtype=bool)
        for i, used in enumerate(self.c.ports):
            for proto, port, ip in self.pod.host_ports:
                if any(p == proto and q == port and (a == ip or ANY_ADDRESS in (a, ip)) for p, q, a in used):
                    out[i] = False
        return out

    # the cycle
    def feasible(self) -> np.ndarray:
        ok: np.ndarray = self.st.ok & self.fit
        if self.pod.host_ports:
            ok &= self._ports_ok()
        for s in self.hard:
            ok &= self._spread_ok(s)
        if self.uses_pod_affinity:
            for mask in self._pod_affinity():
                ok &= mask
        return ok

    def scores(self, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
        """Rule R10: the weighted sum of the score plugins of :data:`SCORE_PLUGINS` on the feasible nodes
        ``chosen`` (each normalised as its plugin does), in that order; None where every one scores the same.
        Computed only when more than one node is feasible, as the scheduler does."""
        total = None
        for _name, weight, plugin in SCORE_PLUGINS:
            score = plugin(self, feasible, chosen)
            if score is not None:
                score = score if weight == 1 else weight * score
                total = score if total is None else total + score
        return total

    def bound(self, i: int) -> None:
        """Rule R9: what a bind changes for the next sibling: node i's fit and resource scores, and the counts of
        every constraint whose selector the pod matches (a node included by the constraint)."""
        c = self.c
        _refresh_resources(c, self.pod, i, self.fit, self.least, self.balanced)
        if self.resource_key is not None:      # the shape's cached arrays have seen every bind so far
            c._resources[self.resource_key] = (self.fit, self.least, self.balanced, len(c.bind_log))
        for s in self.hard + self.soft:
            if s.counts_pods and s.self_match:
                s.any_matched = True
                if not s.hard:
                    self.soft_counted = True
                s.matched[i] += 1
                if s.included[i] and s.domain[i] >= 0:
                    s.counts[s.domain[i]] += 1

    def failure_message(self) -> str:
        failures: dict[str, int] = {}
        ports = self._ports_ok() if self.pod.host_ports else None
        spread_ok = [self._spread_ok(s) for s in self.hard]
        pod_aff = self._pod_affinity() if self.uses_pod_affinity else None
        for i, node in enumerate(self.c.states):
            why: list[str] = []
            if self.st.reasons[i]:
                why = [str(self.st.reasons[i])]
            elif ports is not None and not ports[i]:
                why = [MSG_PORTS]
            elif not self.fit[i]:
                why = fit_failures(self.pod.requests, node.allocatable, node.requested, node.pods,
                                   node.allocatable.get("pods", 0))
            else:
                for s, ok in zip(self.hard, spread_ok, strict=True):
                    if not ok[i]:
                        why = [MSG_SPREAD_LABEL if s.domain[i] < 0 else MSG_SPREAD]
                        break
                if not why and pod_aff is not None:
                    existing, affinity, anti = pod_aff     # in the plugin's order
                    for mask, msg in ((affinity, MSG_POD_AFFINITY), (anti, MSG_POD_ANTI_AFFINITY),
                                      (existing, MSG_EXISTING_ANTI_AFFINITY)):
                        if not mask[i]:
                            why = [msg]
                            break
            for w in why:
                failures[w] = failures.get(w, 0) + 1
        parts = sorted(f"{n} {w}" for w, n in failures.items())
        return f"0/{len(self.c.states)} nodes are available: {', '.join(parts)}."


# A score plugin returns None where it scores every node the same (the framework's Skip, or a constant): it cannot
# change which node wins.

def _taint_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """TaintToleration's score: fewer untolerated PreferNoSchedule taints is better (normalised, reversed)."""
    return _default_normalize(cy.st.prefer, feasible, reverse=True)[chosen] if cy.st.has_prefer else None


def _node_affinity_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """NodeAffinity's score: the summed weights of the matching preferred terms (normalised)."""
    return _default_normalize(cy.st.preferred, feasible, reverse=False)[chosen] if cy.st.has_preferred else None


def _fit_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    score: np.ndarray = cy.least[chosen]
    return score


def _balanced_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    return cy.balanced[chosen] if cy.balances else None


def _spread_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    return cy._spread_score(chosen) if cy.soft else None


def _pod_affinity_score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    return cy._pod_affinity_score(feasible)[chosen] if cy.pod.preferred_pod_terms else None


#: Rule R10: the score plugins of kube-scheduler 1.36's default profile and their weights. ImageLocality (weight 1)
#: is not modelled: it scores 0 on every node here (no node reports images in the simulator's input).
SCORE_PLUGINS: tuple[tuple[str, int, Callable[[Cycle, np.ndarray, np.ndarray], np.ndarray | None]], ...] = (
    ("TaintToleration", 3, _taint_score),
    ("NodeAffinity", 2, _node_affinity_score),
    ("NodeResourcesFit", 1, _fit_score),
    ("PodTopologySpread", 2, _spread_score),
    ("InterPodAffinity", 2, _pod_affinity_score),
    ("NodeResourcesBalancedAllocation", 1, _balanced_score),
)

#: The filter plugins, in the order the framework runs them; each node's reason is the first that fails.
FILTER_PLUGINS = ("NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
                  "PodTopologySpread", "InterPodAffinity")
