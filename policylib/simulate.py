"""Where every replica would land, and which stay Pending: kube-scheduler's filters replayed on the
Nodes, after policylib's mutation, before anything is installed.

For each workload, in the order given, its effective replica count is placed one pod at a time as
kube-scheduler's default profile would (upstream ``pkg/scheduler/framework/plugins``):

- **filters** (a node must pass all): ``spec.unschedulable``; taints with effect NoSchedule or NoExecute
  the pod does not tolerate (TaintToleration); ``nodeSelector`` and required node affinity
  (NodeAffinity); requests against allocatable minus what bound pods request, and the pod count
  (NodeResourcesFit; a pod requests the larger of its containers' sum and any init container); every
  DoNotSchedule topology spread constraint (PodTopologySpread: eligible domains honour
  nodeAffinityPolicy and nodeTaintsPolicy; with fewer eligible domains than minDomains the global
  minimum is 0; the pod counts itself; a node without the topology key fails);
- **scores**, to choose among the nodes that pass: PodTopologySpread for ScheduleAnyway constraints
  (weight 2), least allocated and balanced allocation (1 each), PreferNoSchedule taints (3) and
  preferred node affinity (2), normalised to 0-100 per plugin as the scheduler does. Nodes with the
  same score are a tie the real scheduler breaks at random: the workload is placed again with the
  ties broken other ways, and where the Pending count differs, the range is reported.

Bound pods in the input count as load (and, in their namespace, towards the spread of the pods their
labels match). Volcano Jobs: each partition must fit inside one HyperNode of at most the allowed tier
(HyperNodes discovered from the Nodes' labels, as ``policylib hypernodes`` builds them).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import quantity
from .config import Config, load_config
from .errors import PolicyError, object_ref
from .facts import ClusterFacts, namespace_of
from .hypernodes import discover_hypernodes, leaf_nodes
from .labels import selector_matches
from .spread import effective_replicas, is_deployment, mutate_deployment
from .validation import DO_NOT_SCHEDULE

HARD_EFFECTS = ("NoSchedule", "NoExecute")
ZONE_LABEL = "topology.kubernetes.io/zone"
#: What the scheduler assumes for scoring when a container requests nothing (NodeResourcesFit).
DEFAULT_CPU_MILLI, DEFAULT_MEMORY = 100, 200 * 1024 * 1024
#: Tie-breaking orders tried to find the range of Pending counts: name order, reversed, two shuffles.
TIE_ORDERS = ("name", "reverse", 1, 2)

MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
MSG_SPREAD = "node(s) didn't match pod topology spread constraints"
MSG_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
MSG_UNSCHEDULABLE = "node(s) were unschedulable"
MSG_TOO_MANY_PODS = "Too many pods"


# --- nodes ---------------------------------------------------------------------------------------

def _amounts(resources: Any) -> dict[str, int]:
    """A ResourceList as integers: CPU in millicores, everything else in its unit."""
    out: dict[str, int] = {}
    if not isinstance(resources, dict):
        return out
    for name, value in resources.items():
        try:
            q = quantity.parse_quantity(value)
        except ValueError:
            continue
        out[name] = math.ceil(q * 1000) if name == "cpu" else math.ceil(q)
    return out


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

    @classmethod
    def of(cls, node: dict[str, Any]) -> "NodeState":
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        allocatable = _amounts(status.get("allocatable") or status.get("capacity") or {})
        return cls(meta.get("name", ""), dict(meta.get("labels") or {}), [t for t in spec.get("taints") or []
                                                                         if isinstance(t, dict)],
                   bool(spec.get("unschedulable")), allocatable)

    def copy(self) -> "NodeState":
        return NodeState(self.name, self.labels, self.taints, self.unschedulable, self.allocatable,
                         dict(self.requested), self.pods, {ns: list(v) for ns, v in self.bound.items()})

    def bind(self, pod: "PodShape") -> None:
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        self.pods += 1
        self.bound.setdefault(pod.namespace, []).append(pod.labels)


# --- pods ----------------------------------------------------------------------------------------

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


def node_selector_term_matches(term: dict[str, Any], node: NodeState) -> bool:
    """A NodeSelectorTerm: every expression on labels and every field (metadata.name) matches; an
    empty term matches nothing."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_requirement_matches(r, node.labels) for r in exprs) and \
        all(_requirement_matches(r, {"metadata.name": node.name}) for r in fields)


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

    @classmethod
    def of_template(cls, template: dict[str, Any], namespace: str, revision: str) -> "PodShape":
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        labels = dict(meta.get("labels") or {})
        labels.setdefault("pod-template-hash", revision)   # the ReplicaSet's label, unique per revision
        return cls(namespace, labels, dict(spec.get("nodeSelector") or {}),
                   None if required is None else list(required.get("nodeSelectorTerms") or []),
                   list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []),
                   list(spec.get("tolerations") or []), pod_requests(spec),
                   [c for c in spec.get("topologySpreadConstraints") or [] if isinstance(c, dict)])

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


def pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    """The larger, per resource, of the containers' summed requests and any one init container's (a
    container without requests for a resource it limits requests its limit, as the API defaults it)."""
    def of(container: Any) -> dict[str, int]:
        res = (container.get("resources") or {}) if isinstance(container, dict) else {}
        return _amounts({**(res.get("limits") or {}), **(res.get("requests") or {})})
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    return {k: v for k, v in total.items() if v > 0}


# --- topology spread -----------------------------------------------------------------------------

@dataclass
class Spread:
    """One topology spread constraint of the incoming pod, with its counts per domain."""

    key: str
    max_skew: int
    hard: bool
    min_domains: int
    selector: dict[str, Any]
    eligible: set[str] = field(default_factory=set)    # domains of nodes that pass the inclusion policies
    counts: dict[str, int] = field(default_factory=dict)

    def global_min(self) -> int:
        if len(self.eligible) < self.min_domains:
            return 0
        return min((self.counts.get(d, 0) for d in self.eligible), default=0)


def _spreads(pod: PodShape, nodes: list[NodeState], matches: dict[str, bool] | None = None,
             tolerated: dict[str, bool] | None = None) -> list[Spread]:
    """The pod's constraints, counted as PodTopologySpread's PreFilter counts them (``matches`` and
    ``tolerated``: what is already known of each node's affinity and taints)."""
    hard_keys = {c.get("topologyKey") for c in pod.constraints if c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE}
    matches = {} if matches is None else matches
    tolerated = {} if tolerated is None else tolerated
    out = []
    for c in pod.constraints:
        selector = dict(c.get("labelSelector") or {}) if c.get("labelSelector") is not None else None
        if selector is not None:
            exprs = list(selector.get("matchExpressions") or [])
            for k in c.get("matchLabelKeys") or []:
                if k in pod.labels:
                    exprs.append({"key": k, "operator": "In", "values": [pod.labels[k]]})
            selector["matchExpressions"] = exprs
        hard = c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE
        s = Spread(c.get("topologyKey", ""), int(c.get("maxSkew") or 1), hard,
                   int(c.get("minDomains") or 1) if hard else 1, selector or {"matchLabels": {"\0": "\0"}})
        affinity_policy = c.get("nodeAffinityPolicy") or "Honor"
        taints_policy = c.get("nodeTaintsPolicy") or "Ignore"
        keys = (hard_keys or {s.key}) | {s.key}
        for node in nodes:
            if any(k not in node.labels for k in keys):
                continue
            if affinity_policy == "Honor":
                if node.name not in matches:
                    matches[node.name] = pod.matches_affinity(node)
                if not matches[node.name]:
                    continue
            if taints_policy == "Honor":
                if node.name not in tolerated:
                    tolerated[node.name] = pod.untolerated(node) is None
                if not tolerated[node.name]:
                    continue
            domain = node.labels[s.key]
            s.eligible.add(domain)
            same_namespace = node.bound.get(pod.namespace)
            if same_namespace:
                matched = sum(1 for labels in same_namespace if selector_matches(s.selector, labels))
                s.counts[domain] = s.counts.get(domain, 0) + matched
        out.append(s)
    return out


# --- one workload --------------------------------------------------------------------------------

@dataclass
class Placement:
    """Where one workload's replicas would go."""

    kind: str
    namespace: str
    name: str
    replicas: int
    placed: dict[str, int]
    zones: dict[str, int]
    pending: int
    pending_max: int
    reasons: list[str]
    node_zones: dict[str, str] = field(default_factory=dict)   # for the chart: each used node's zone

    @property
    def pending_range(self) -> str:
        return str(self.pending) if self.pending == self.pending_max else f"{self.pending}-{self.pending_max}"

    def as_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "namespace": self.namespace, "name": self.name, "replicas": self.replicas,
               "placed": self.placed, "zones": self.zones, "pending": self.pending, "reasons": self.reasons}
        if self.pending_max != self.pending:
            out["pendingMax"] = self.pending_max
        return out


def _static_failure(pod: PodShape, node: NodeState, matches: dict[str, Any], tolerated: dict[str, Any]) -> str | None:
    """The filters that do not change while a workload is placed (records what it learns)."""
    taint = pod.untolerated(node)
    tolerated[node.name] = taint is None
    matches[node.name] = pod.matches_affinity(node)
    if node.unschedulable:
        return MSG_UNSCHEDULABLE
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    if not matches[node.name]:
        return MSG_AFFINITY
    return None


def _dynamic_failures(pod: PodShape, node: NodeState, spreads: list[Spread], mins: list[int]) -> list[str]:
    out = []
    if node.pods + 1 > node.allocatable.get("pods", 0):
        out.append(MSG_TOO_MANY_PODS)
    for k, v in pod.requests.items():
        if node.requested.get(k, 0) + v > node.allocatable.get(k, 0):
            out.append(f"Insufficient {k}")
    if out:
        return out
    for s, low in zip(spreads, mins, strict=True):
        if not s.hard:
            continue
        if s.key not in node.labels:
            return [MSG_SPREAD_LABEL]
        if s.counts.get(node.labels[s.key], 0) + 1 - low > s.max_skew:
            return [MSG_SPREAD]
    return []


def _normalize(raw: dict[str, float], reverse: bool) -> dict[str, int]:
    """0-100 as the scheduler's DefaultNormalizeScore; ``reverse``: lower raw is better."""
    top = max(raw.values(), default=0)
    if top <= 0:
        return {n: (100 if reverse else 0) for n in raw}
    return {n: int(100 - v * 100 / top) if reverse else int(v * 100 / top) for n, v in raw.items()}


def _scores(pod: PodShape, feasible: list[NodeState], spreads: list[Spread]) -> dict[str, int]:
    total = {n.name: 0 for n in feasible}
    soft = [s for s in spreads if not s.hard]
    if soft:
        sizes = {id(s): len({n.labels[s.key] for n in feasible if s.key in n.labels}) for s in soft}
        raw: dict[str, float] = {}
        for n in feasible:
            if any(s.key not in n.labels for s in soft):
                continue   # a node without a topology key scores 0 for the spread
            raw[n.name] = sum(s.counts.get(n.labels[s.key], 0) * math.log(sizes[id(s)] + 2) + (s.max_skew - 1)
                              for s in soft)
        if raw:
            lo, hi = min(raw.values()), max(raw.values())
            for name, v in raw.items():
                total[name] += 2 * (100 if hi == 0 else int(100 * (hi + lo - v) / hi))
    cpu = pod.requests.get("cpu", 0) or DEFAULT_CPU_MILLI
    mem = pod.requests.get("memory", 0) or DEFAULT_MEMORY
    for n in feasible:
        fractions = []
        least = 0
        for res, want in (("cpu", cpu), ("memory", mem)):
            alloc = n.allocatable.get(res, 0)
            used = n.requested.get(res, 0) + want
            if alloc > 0:
                least += max(0, (alloc - used) * 100 // alloc)
                fractions.append(min(1.0, used / alloc))
        total[n.name] += least // 2
        if len(fractions) == 2:
            total[n.name] += int((1 - abs(fractions[0] - fractions[1]) / 2) * 100)
    prefer = {n.name: float(sum(1 for t in n.taints if t.get("effect") == "PreferNoSchedule"
                                and not tolerates(pod.tolerations, t))) for n in feasible}
    for name, v in _normalize(prefer, reverse=True).items():
        total[name] += 3 * v
    if pod.preferred_terms:
        weights = {n.name: float(sum(int(t.get("weight") or 0) for t in pod.preferred_terms if isinstance(t, dict)
                                     and node_selector_term_matches(t.get("preference") or {}, n)))
                   for n in feasible}
        for name, v in _normalize(weights, reverse=False).items():
            total[name] += 2 * v
    return total


def _tie_rank(names: list[str], order: Any) -> dict[str, int]:
    ordered = sorted(names)
    if order == "reverse":
        ordered.reverse()
    elif isinstance(order, int):
        random.Random(order).shuffle(ordered)
    return {n: i for i, n in enumerate(ordered)}


def place_pods(pod: PodShape, count: int, nodes: list[NodeState], order: Any = "name") -> tuple[dict[str, Any], int, list[Any]]:
    """Place ``count`` replicas on ``nodes`` (bound in place); returns (pods per node, Pending, reasons)."""
    candidates: list[NodeState] = []
    static: dict[str, int] = {}
    matches: dict[str, bool] = {}
    tolerated: dict[str, bool] = {}
    for node in nodes:
        why = _static_failure(pod, node, matches, tolerated)
        if why:
            static[why] = static.get(why, 0) + 1
        else:
            candidates.append(node)
    spreads = _spreads(pod, nodes, matches, tolerated)
    rank = _tie_rank([n.name for n in candidates], order)
    placed: dict[str, int] = {}
    fast = _fast_path(pod, candidates, spreads)
    if fast is not None:
        return _place_fast(pod, count, nodes, candidates, spreads, static, rank, fast)
    for i in range(count):
        feasible, failures = [], dict(static)
        mins = [s.global_min() for s in spreads]
        for node in candidates:
            problems = _dynamic_failures(pod, node, spreads, mins)
            if problems:
                for w in problems:
                    failures[w] = failures.get(w, 0) + 1
            else:
                feasible.append(node)
        if not feasible:
            parts = sorted(f"{n} {w}" for w, n in failures.items())
            return placed, count - i, [f"0/{len(nodes)} nodes are available: {', '.join(parts)}."]
        scores = _scores(pod, feasible, spreads) if len(feasible) > 1 else {feasible[0].name: 0}
        best = max(feasible, key=lambda n: (scores[n.name], -rank[n.name]))
        _bind(pod, best, spreads)
        placed[best.name] = placed.get(best.name, 0) + 1
    return placed, 0, []


def _bind(pod: PodShape, node: NodeState, spreads: list[Spread]) -> None:
    node.bind(pod)
    for s in spreads:
        if s.key in node.labels and node.labels[s.key] in s.eligible and selector_matches(s.selector, pod.labels):
            s.counts[node.labels[s.key]] = s.counts.get(node.labels[s.key], 0) + 1


def _failure_message(pod: PodShape, nodes: list[NodeState], candidates: list[NodeState], spreads: list[Spread],
                     static: dict[str, Any]) -> str:
    failures = dict(static)
    mins = [s.global_min() for s in spreads]
    for node in candidates:
        for w in _dynamic_failures(pod, node, spreads, mins):
            failures[w] = failures.get(w, 0) + 1
    parts = sorted(f"{n} {w}" for w, n in failures.items())
    return f"0/{len(nodes)} nodes are available: {', '.join(parts)}."


# --- the fast path: every hard constraint's domains are single nodes ---------------------------------

def _fast_path(pod: PodShape, candidates: list[NodeState], spreads: list[Spread]) -> dict[str, Any] | None:
    """When every DoNotSchedule constraint's domain is one node (kubernetes.io/hostname, the common
    case), a node's feasibility depends on its own count and the global minimum only, and the number
    placed does not depend on which feasible node is chosen: nodes are kept in heaps per zone instead
    of being scored one by one. Returns the zone constraint (or None) and the weights, or None when
    the general path is needed."""
    hard = [s for s in spreads if s.hard]
    for s in hard:
        seen: set[Any] = set()
        for n in candidates:
            value = n.labels.get(s.key)
            if value is None or value in seen:
                return None
            seen.add(value)
    def shared(s: Spread) -> bool:   # a domain holds more than one node
        values = [n.labels.get(s.key) for n in candidates]
        return len(set(values)) < len(values)
    soft_zone = [s for s in spreads if not s.hard and shared(s)]
    if len(soft_zone) > 1 or pod.preferred_terms:
        return None
    zone = soft_zone[0] if soft_zone else None
    domains = len({n.labels.get(zone.key) for n in candidates}) if zone else 1
    per_node = [s for s in spreads if s is not zone]
    return {"zone": zone, "hard": hard, "zone_weight": math.log(domains + 2) if zone else 0.0,
            "node_weight": math.log(len(candidates) + 2) if any(not s.hard for s in per_node) else 0.0,
            "node_spreads": [s for s in per_node if not s.hard]}


def _place_fast(pod: PodShape, count: int, nodes: list[NodeState], candidates: list[NodeState],
                spreads: list[Spread], static: dict[str, Any], rank: dict[str, Any],
                fast: dict[str, Any]) -> tuple[dict[str, Any], int, list[Any]]:
    import heapq
    zone, hard = fast["zone"], fast["hard"]
    version = {n.name: 0 for n in candidates}

    def fits(n: NodeState) -> bool:
        if n.pods + 1 > n.allocatable.get("pods", 0):
            return False
        return all(n.requested.get(k, 0) + v <= n.allocatable.get(k, 0) for k, v in pod.requests.items())

    def node_key(n: NodeState) -> tuple[Any, ...]:
        cpu = n.allocatable.get("cpu", 0)
        free = (cpu - n.requested.get("cpu", 0)) / cpu if cpu else 0.0
        soft = sum(s.counts.get(n.labels.get(s.key, ""), 0) for s in fast["node_spreads"]) * fast["node_weight"]
        return (soft, -round(free, 3), rank[n.name], n.name)

    heaps: dict[str, list[Any]] = {}
    for n in candidates:
        z = n.labels.get(zone.key, "") if zone else ""
        heapq.heappush(heaps.setdefault(z, []), (node_key(n), 0, n))
    placed: dict[str, int] = {}
    for i in range(count):
        mins = [s.global_min() for s in hard]
        best = None
        for heap in heaps.values():
            while heap:
                key, ver, n = heap[0]
                if ver != version[n.name]:
                    heapq.heappop(heap)
                    continue
                if not fits(n):             # requests only grow within a workload: never again
                    heapq.heappop(heap)
                    version[n.name] = -1
                    continue
                break
            if not heap:
                continue
            key, _, n = heap[0]
            if any(s.counts.get(n.labels[s.key], 0) + 1 - low > s.max_skew for s, low in zip(hard, mins, strict=True)):
                # the least-loaded feasible node of this zone is at the skew limit: so is the rest of the zone,
                # unless a less-loaded one is full; look past it
                alt = [e for e in heap if e[1] == version[e[2].name] and fits(e[2]) and not any(
                    s.counts.get(e[2].labels[s.key], 0) + 1 - low > s.max_skew for s, low in zip(hard, mins, strict=True))]
                if not alt:
                    continue
                key, _, n = min(alt, key=lambda e: e[0])
            score = ((zone.counts.get(n.labels.get(zone.key, ""), 0) * fast["zone_weight"]) if zone else 0.0) + key[0]
            cand = (score, key[1], key[2], n.name)
            if best is None or cand < best[0]:
                best = (cand, n)
        if best is None:
            return placed, count - i, [_failure_message(pod, nodes, candidates, spreads, static)]
        n = best[1]
        _bind(pod, n, spreads)
        placed[n.name] = placed.get(n.name, 0) + 1
        version[n.name] += 1
        z = n.labels.get(zone.key, "") if zone else ""
        heapq.heappush(heaps[z], (node_key(n), version[n.name], n))
    return placed, 0, []


def order_independent(pod: PodShape, nodes: list[NodeState]) -> bool:
    """Whether the number placed cannot depend on the scheduler's choices: no DoNotSchedule constraint,
    or only ones whose domains are single nodes (each node then holds at most the global minimum plus
    maxSkew, whatever the order)."""
    hard = [c.get("topologyKey") for c in pod.constraints if c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE]
    for key in hard:
        values = [n.labels.get(key) for n in nodes if key in n.labels]
        if len(set(values)) < len(values):
            return False
    return True


def _zones(placed: dict[str, int], nodes: dict[str, NodeState]) -> dict[str, int]:
    zones: dict[str, int] = {}
    for name, n in placed.items():
        zone = nodes[name].labels.get(ZONE_LABEL, "")
        zones[zone] = zones.get(zone, 0) + n
    return dict(sorted(zones.items()))


def _node_zones(placed: dict[str, int], nodes: dict[str, NodeState]) -> dict[str, str]:
    return {name: nodes[name].labels.get(ZONE_LABEL, "") for name in placed}


def simulate_deployment(obj: dict[str, Any], config: Config, facts: ClusterFacts, nodes: list[NodeState]) -> Placement:
    ns = namespace_of(obj)
    mutated = mutate_deployment(obj, config, facts=facts, namespace=ns).object
    count = effective_replicas(mutated, facts, ns).replicas
    template = (mutated.get("spec") or {}).get("template") or {}
    pod = PodShape.of_template(template, ns, f"sim-{(obj.get('metadata') or {}).get('name', '')}")
    pendings = []
    if count > 1 and not order_independent(pod, nodes):
        for order in TIE_ORDERS[1:]:
            _, pending, _ = place_pods(pod, count, [n.copy() for n in nodes], order)
            pendings.append(pending)
    placed, pending, reasons = place_pods(pod, count, nodes, TIE_ORDERS[0])
    pendings.append(pending)
    by_name = {n.name: n for n in nodes}
    return Placement("Deployment", ns, (obj.get("metadata") or {}).get("name", ""), count,
                     dict(sorted(placed.items())), _zones(placed, by_name), min(pendings), max(pendings), reasons,
                     _node_zones(placed, by_name))


# --- Volcano Jobs: partitions inside HyperNodes --------------------------------------------------

def simulate_volcano_job(obj: dict[str, Any], config: Config, nodes: list[NodeState],
                         raw_nodes: list[dict[str, Any]]) -> Placement:
    """Each partition inside one HyperNode of at most the allowed tier; other tasks pod by pod. The Job is
    a gang: unless its minimum binds (:func:`gang_shortfall`), nothing binds and every pod stays Pending."""
    ns = namespace_of(obj)
    from .mutate import mutate
    from .validation import unenforced_partition_tier_name
    from .volcano import tier_limit
    mutated = mutate(obj, config, namespace=ns).object
    hypernodes = discover_hypernodes(raw_nodes, config.volcano.networkTopologyDiscovery)
    leaves = leaf_nodes(hypernodes)
    trial = [n.copy() for n in nodes]
    by_name = {n.name: n for n in trial}
    placed: dict[str, int] = {}
    pending, reasons, replicas = 0, [], 0
    bound: list[tuple[dict[str, Any], int, int]] = []   # per task: (task, pods placed, partitions placed)
    for task in (mutated.get("spec") or {}).get("tasks") or []:
        count = int(task.get("replicas") or 0)
        replicas += count
        pod = PodShape.of_template(task.get("template") or {}, ns, f"sim-{task.get('name')}")
        policy = task.get("partitionPolicy")
        unbounded = unenforced_partition_tier_name(policy, config.volcano.version)
        if not isinstance(policy, dict) or unbounded:
            got, left, why = place_pods(pod, count, trial)
            for k, v in got.items():
                placed[k] = placed.get(k, 0) + v
            pending += left
            reasons += [f"task {task.get('name')}: {w}" for w in why]
            if unbounded:
                reasons.append(f"task {task.get('name')}: Volcano {config.volcano.version} ignores the partitions' "
                               f"highestTierName {unbounded!r}: placed without a HyperNode bound")
            size = int(policy.get("partitionSize") or 1) if unbounded else 1
            bound.append((task, count - left, (count - left) // size if unbounded else 0))
            continue
        size, total = int(policy.get("partitionSize") or 1), int(policy.get("totalPartitions") or 0)
        tier = tier_limit(policy, hypernodes)
        groups = [leaves[h["metadata"]["name"]] for h in hypernodes if tier is not None and h["spec"]["tier"] <= tier]
        partitions = 0
        for p in range(total):
            for group in groups:
                members = [by_name[n] for n in group if n in by_name]
                attempt = [m.copy() for m in members]
                got, left, _ = place_pods(pod, size, attempt)
                if left == 0:
                    place_pods(pod, size, members)
                    for k, v in got.items():
                        placed[k] = placed.get(k, 0) + v
                    partitions += 1
                    break
            else:
                pending += size
                limit = f"tier-{tier}" if tier is not None else "any"
                reasons.append(f"task {task.get('name')}: partition {p + 1} of {total} ({size} pods) fits in no "
                               f"{limit} HyperNode")
        bound.append((task, partitions * size, partitions))
    shortfall = gang_shortfall(mutated, bound)
    if shortfall:
        placed, pending = {}, replicas
        reasons.append(f"{shortfall}: the gang binds nothing, all {replicas} pods stay Pending")
    else:
        for node, state in zip(nodes, trial, strict=True):
            node.requested, node.pods, node.bound = state.requested, state.pods, state.bound
    return Placement("Job", ns, (obj.get("metadata") or {}).get("name", ""), replicas,
                     dict(sorted(placed.items())), _zones(placed, by_name), pending, pending, reasons,
                     _node_zones(placed, by_name))


def gang_shortfall(job: dict[str, Any], bound: list[tuple[dict[str, Any], int, int]]) -> str | None:
    """Rule V21: why Volcano's gang would bind none of the Job's pods, or None: fewer pods placeable than the Job's
    minAvailable (default: each task's minAvailable, else its replicas), than a task's minAvailable, or
    fewer partitions than a task's minPartitions (the PodGroup's minMember, minTaskMember and
    subGroupPolicy minSubGroups)."""
    for task, pods, partitions in bound:
        name = task.get("name")
        raw = task.get("partitionPolicy")
        policy: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if partitions < int(policy.get("minPartitions") or 0):
            return f"task {name}: {partitions} of minPartitions {policy['minPartitions']} partitions placeable"
        if task.get("minAvailable") is not None and pods < int(task["minAvailable"]):
            return f"task {name}: {pods} of minAvailable {task['minAvailable']} pods placeable"
    spec = job.get("spec") or {}
    minimum = spec.get("minAvailable")
    if minimum is None:
        minimum = sum(int(t["minAvailable"]) if t.get("minAvailable") is not None else int(t.get("replicas") or 0)
                      for t, _, _ in bound)
    placeable = sum(pods for _, pods, _ in bound)
    if placeable < int(minimum):
        return f"{placeable} of the Job's minAvailable {minimum} pods placeable"
    return None


# --- the whole input -----------------------------------------------------------------------------

def is_bound_pod(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1" and \
        bool((obj.get("spec") or {}).get("nodeName")) and \
        (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def is_volcano_job(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Job" and obj.get("apiVersion") == "batch.volcano.sh/v1alpha1"


def node_states(nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]] = ()) -> list[NodeState]:
    """Nodes with the bound pods' requests and labels on them, sorted by name."""
    states = {n.name: n for n in (NodeState.of(node) for node in nodes) if n.name}
    for pod in pods:
        state = states.get(pod["spec"]["nodeName"])
        if state is not None:
            shape = PodShape.of_template({"metadata": pod.get("metadata") or {}, "spec": pod.get("spec") or {}},
                                         namespace_of(pod), "")
            state.bind(shape)
    return [states[k] for k in sorted(states)]


def simulate(objects: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]],
             config: Config | dict[str, Any] | None = None) -> list[Placement]:
    """Place every Deployment and Volcano Job of ``objects`` on ``nodes``, in order. Bound Pods among
    ``objects`` count as load; HPAs give the effective replica counts. Pure: nothing is changed."""
    config = load_config(config)
    objects = [o for o in objects if isinstance(o, dict)]
    raw_nodes = [n for n in nodes if isinstance(n, dict)]
    facts = ClusterFacts.from_objects(objects)
    states = node_states(raw_nodes, [o for o in objects if is_bound_pod(o)])
    out = []
    for obj in objects:
        try:
            if is_deployment(obj):
                out.append(simulate_deployment(obj, config, facts, states))
            elif is_volcano_job(obj):
                out.append(simulate_volcano_job(obj, config, states, raw_nodes))
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            raise PolicyError(object_ref(obj), "spec", f"cannot be simulated: {type(e).__name__}: {e}") from None
    return out
