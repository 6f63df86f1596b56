"""PodTopologySpread (``pkg/scheduler/framework/plugins/podtopologyspread``): DoNotSchedule constraints filter
(``filtering.go``), ScheduleAnyway constraints (or the System defaults) score (``scoring.go``); the same PreFilter
counts answer the skew a workload's pods have now (rule S28, :func:`skews_now`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ...constants import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY
from ...labels import selector_matches
from ..arrays import np
from ..framework import MAX_SCORE, Plugin
from ..model import HOSTNAME, ZONE_LABEL
from .node_affinity import NAME as NODE_AFFINITY
from .taint_toleration import NAME as TAINT_TOLERATION

if TYPE_CHECKING:
    from ..framework import Cycle
    from ..snapshot import Snapshot

NAME = "PodTopologySpread"
MSG_SPREAD = "node(s) didn't match pod topology spread constraints"
MSG_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
#: PodTopologySpread's System default constraints (pods without constraints of their own, owned by a ReplicaSet).
SYSTEM_DEFAULT_SPREAD = ((HOSTNAME, 3), (ZONE_LABEL, 5))


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
    arrays: tuple[np.ndarray, bool, np.ndarray] | None = None    # domain_arrays(domain), if known
    matched: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # matching pods per node
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))    # per domain (included nodes)
    eligible: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))      # domains with an included node
    domains: int = 0                                                                      # how many
    any_matched: bool = False                                                             # a pod counted
    node_domains: bool = False          # domain i is node i, on every node (counts are per node)
    constraint: dict[str, Any] = field(default_factory=dict)   # the pod's constraint (empty: a System default)

    def __post_init__(self) -> None:
        self.has, self.every_node, self.dom0 = self.arrays or domain_arrays(self.domain)


def domain_arrays(domain: np.ndarray) -> tuple[np.ndarray, bool, np.ndarray]:
    """Where a topology key is set, whether on every node, and each node's domain index with 0 where unset."""
    has = domain >= 0
    return has, bool(has.all()), np.where(has, domain, 0)


@dataclass
class Shared:
    """What the plugin keeps for the snapshot's life: each topology key's :func:`domain_arrays`, and each
    constraint's included nodes and eligible domains per pod signature (they read node labels and the node
    filters' verdicts, which binds do not change)."""

    domains: dict[str, tuple[np.ndarray, bool, np.ndarray]] = field(default_factory=dict)
    inclusion: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def arrays(self, key: str, domain: np.ndarray) -> tuple[np.ndarray, bool, np.ndarray]:
        if key not in self.domains:
            self.domains[key] = domain_arrays(domain)
        return self.domains[key]


def init(snap: Snapshot) -> Shared:
    return Shared()


def shared_state(cy: Cycle) -> Shared:
    out: Shared = cy.plugins[NAME]
    return out


def spreads(cy: Cycle, action: str) -> list[Spread]:
    pod, c, shared = cy.pod, cy.snapshot, shared_state(cy)
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
        cache_key = (cy.st.sig, key, tuple(keys) if own else (), honor_affinity, honor_taints)
        if cache_key not in shared.inclusion:
            included = has_all.copy()
            if honor_affinity:
                included &= cy.st.passes[NODE_AFFINITY]
            if honor_taints:
                included &= cy.st.passes[TAINT_TOLERATION]
            sel = included & (domain >= 0)
            shared.inclusion[cache_key] = (included, np.bincount(domain[sel], minlength=max(len(values), 1)) > 0)
        included, eligible = shared.inclusion[cache_key]
        hard = action == DO_NOT_SCHEDULE
        s = Spread(key, int(x.get("maxSkew") or 1), hard, int(x.get("minDomains") or 1) if hard else 1,
                   selector, counts_pods, int(selector is not None and selector_matches(selector, pod.labels)),
                   included, domain, shared.arrays(key, domain))
        s.constraint = x if own else {}
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


def global_minimum(counts: Sequence[int] | np.ndarray, min_domains: int) -> int:
    """filtering.go's minMatchNum: the fewest matching pods in an eligible domain (``counts``: one entry per
    eligible domain, empty ones too), 0 where there are fewer eligible domains than minDomains."""
    return 0 if len(counts) < min_domains or not len(counts) else int(np.min(counts))


def skew_of(counts: Mapping[str, int] | Sequence[int] | np.ndarray, min_domains: int = 1) -> int:
    """The skew of matching pods per eligible domain (by domain, or one entry each; empty domains included):
    the most in one domain less the global minimum (:func:`global_minimum`); 0 without a domain."""
    values = list(counts.values()) if isinstance(counts, Mapping) else counts
    return int(np.max(values)) - global_minimum(values, min_domains) if len(values) else 0


def eligible_counts(s: Spread) -> np.ndarray:
    """Matching pods per eligible domain of the constraint (a domain with a node its inclusion policies admit)."""
    return s.counts if s.domains == len(s.counts) else s.counts[s.eligible]


def spread_ok(s: Spread) -> np.ndarray:
    """Rule R4: PodTopologySpread's filter for one DoNotSchedule constraint."""
    if not s.any_matched and s.max_skew >= s.self_match:
        return s.has                  # no pod counted yet: every domain at 0, every node with the key passes
    counts = s.counts
    low = global_minimum(eligible_counts(s), s.min_domains)
    ok: np.ndarray = (counts if s.node_domains else counts[s.dom0]) <= s.max_skew + low - s.self_match
    return ok if s.every_node else ok & s.has


@dataclass(frozen=True)
class SkewNow:
    """One of the pod's own constraints as PodTopologySpread counts it now: matching pods per eligible domain
    (empty ones too) and their skew."""

    constraint: dict[str, Any]
    counts: dict[str, int]
    skew: int


def skews_now(cy: Cycle) -> list[SkewNow]:
    """Rule S28: each of the pod's own topology spread constraints, in the pod's order, as the PreFilter counts
    it (:func:`spreads`: the pods of the pod's namespace that its selector, with the pod's ``matchLabelKeys``
    values, matches, on the nodes that carry every key of the pod's constraints and that its inclusion policies
    admit) and its skew (:func:`skew_of`, minDomains for DoNotSchedule)."""
    st = prefilter(cy)
    out = []
    own = [s for s in st.hard + st.soft if s.constraint]
    for s in sorted(own, key=lambda s: cy.pod.constraints.index(s.constraint)):
        names = cy.snapshot.domains(s.key)[1]
        counts = {names[d]: int(s.counts[d]) for d in np.flatnonzero(s.eligible)}
        out.append(SkewNow(s.constraint, counts, skew_of(eligible_counts(s), s.min_domains)))
    return out

def score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R5: PodTopologySpread's score for the ScheduleAnyway constraints (or the System defaults): per
    node, the sum over constraints of matching pods in its domain x log(domains among the filtered nodes + 2)
    + maxSkew - 1, rounded; nodes without a key of the pod's own constraints score 0; the rest normalised
    100 x (max + min - score) / max. Computed for the feasible nodes ``chosen`` only (their scores, in that
    order); None where every one of them scores the same."""
    st = state(cy)
    if not st.soft:
        return None
    keyed = st.soft_keys[chosen] if st.soft_keys is not None else None
    scored = chosen if keyed is None else chosen[keyed]
    if not len(scored):
        return None                                   # every feasible node scores 0
    if not st.soft_counted and st.soft_uniform:
        # no matching pod yet: every scored node's raw score is the same, so each normalises to 100
        return None if keyed is None else keyed * MAX_SCORE
    raw: Any = None
    for s in st.soft:
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
    score: np.ndarray = (raw + 0.5).astype(np.int64) if st.soft_nonnegative else \
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


@dataclass
class SpreadState:
    """The pod's constraints in one cycle: DoNotSchedule (``hard``) and ScheduleAnyway or System default (``soft``)."""

    hard: list[Spread]
    soft: list[Spread]
    soft_keys: np.ndarray | None = None   # the pod's own constraints: nodes without a key score 0
    soft_counted: bool = False            # whether a soft constraint counts a pod yet
    soft_uniform: bool = False            # whether every scored node then has the same raw score
    soft_nonnegative: bool = False


def prefilter(cy: Cycle) -> SpreadState:
    st = SpreadState(spreads(cy, DO_NOT_SCHEDULE), spreads(cy, SCHEDULE_ANYWAY))
    if st.soft and cy.pod.constraints and not all(s.every_node for s in st.soft):
        st.soft_keys = np.logical_and.reduce([s.has for s in st.soft])
    # (the pod's own constraints: scored nodes carry every key; the System defaults: every node the keys)
    st.soft_counted = any(s.any_matched for s in st.soft)
    st.soft_uniform = st.soft_keys is not None or all(s.every_node for s in st.soft)
    st.soft_nonnegative = all(s.max_skew >= 1 for s in st.soft)
    return st


def state(cy: Cycle) -> SpreadState:
    out: SpreadState = cy.state[NAME]
    return out


def spread_filter(cy: Cycle) -> np.ndarray | None:
    """Rule R4: every DoNotSchedule constraint of the pod (:func:`spread_ok`); None without one."""
    hard = state(cy).hard
    if not hard:
        return None
    ok = spread_ok(hard[0])
    for s in hard[1:]:
        ok = ok & spread_ok(s)
    return ok


def failures(cy: Cycle) -> Callable[[int], list[str]] | None:
    hard = state(cy).hard
    if not hard:
        return None
    oks = [spread_ok(s) for s in hard]

    def why(i: int) -> list[str]:
        for s, ok in zip(hard, oks, strict=True):
            if not ok[i]:
                return [MSG_SPREAD_LABEL if s.domain[i] < 0 else MSG_SPREAD]
        return []
    return why


def bound(cy: Cycle, i: int) -> None:
    """Rule R9: a bind on node i adds to the counts of every constraint whose selector the pod matches (where
    the constraint includes the node)."""
    st = state(cy)
    for s in st.hard + st.soft:
        if s.counts_pods and s.self_match:
            s.any_matched = True
            if not s.hard:
                st.soft_counted = True
            s.matched[i] += 1
            if s.included[i] and s.domain[i] >= 0:
                s.counts[s.domain[i]] += 1


PLUGIN = Plugin(NAME, ("R4", "R5", "R9"), (MSG_SPREAD, MSG_SPREAD_LABEL), init=init,
                prefilter=prefilter, filter=spread_filter, failures=failures, bound=bound, score=score, weight=2)
