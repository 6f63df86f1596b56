"""InterPodAffinity (``pkg/scheduler/framework/plugins/interpodaffinity``): required pod affinity and
anti-affinity (the pod's own, and bound pods' toward it) filter, preferred terms score."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..arrays import np
from ..framework import MAX_SCORE, Plugin
from ..model import PodTerm

if TYPE_CHECKING:
    from ..framework import Cycle

NAME = "InterPodAffinity"
MSG_POD_AFFINITY = "node(s) didn't match pod affinity rules"
MSG_POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
MSG_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


def term_counts(cy: Cycle, term: PodTerm) -> tuple[np.ndarray, np.ndarray]:
    """Matching pods per node's domain for ``term`` (0 without the key), and whether a node has the key."""
    domain, values = cy.snapshot.domains(term.key)
    has = domain >= 0
    matched = cy.snapshot.matched(term.namespaces, term.selector)
    per = np.bincount(domain[has], weights=matched[has], minlength=max(len(values), 1)).astype(np.int64)
    return np.where(has, per[np.where(has, domain, 0)], 0), has


def prefilter(cy: Cycle) -> bool:
    """Whether the filter has anything to check: the pod's required terms, or a bound pod's anti-affinity."""
    return bool(cy.pod.affinity_terms or cy.pod.anti_terms or cy.snapshot.anti)


def masks(cy: Cycle) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rule R6: (existing pods' anti-affinity, the pod's affinity, the pod's anti-affinity), each True where the
    node passes."""
    pod = cy.pod
    n = len(cy.snapshot.states)
    existing = np.ones(n, dtype=bool)
    for i, _ns, term in cy.snapshot.anti:
        if term.matches(pod.namespace, pod.labels):
            domain, _ = cy.snapshot.domains(term.key)
            if domain[i] >= 0:
                existing &= domain != domain[i]
    affinity = np.ones(n, dtype=bool)
    if pod.affinity_terms:
        exist = np.ones(n, dtype=bool)
        any_match = False
        for term in pod.affinity_terms:
            cnt, has = term_counts(cy, term)
            affinity &= has
            exist &= cnt > 0
            any_match = any_match or bool(cnt.any())
        self_match = all(t.matches(pod.namespace, pod.labels) for t in pod.affinity_terms)
        if not (not any_match and self_match):
            affinity &= exist
    anti = np.ones(n, dtype=bool)
    for term in pod.anti_terms:
        cnt, has = term_counts(cy, term)
        anti &= ~(has & (cnt > 0))
    return existing, affinity, anti


def pod_affinity_filter(cy: Cycle) -> np.ndarray | None:
    """Rule R6: the three masks of :func:`masks` together; None when there is nothing to check."""
    if not cy.state[NAME]:
        return None
    existing, affinity, anti = masks(cy)
    out: np.ndarray = existing & affinity & anti
    return out


def failures(cy: Cycle) -> Callable[[int], list[str]] | None:
    if not cy.state[NAME]:
        return None
    existing, affinity, anti = masks(cy)
    order = ((affinity, MSG_POD_AFFINITY), (anti, MSG_POD_ANTI_AFFINITY), (existing, MSG_EXISTING_ANTI_AFFINITY))

    def why(i: int) -> list[str]:
        return next(([msg] for mask, msg in order if not mask[i]), [])   # in the plugin's order
    return why


def score(cy: Cycle, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
    """Rule R7: the pod's preferred terms' weights (negative for anti-affinity) times the matching pods in the
    node's domain, min-max normalised; None for a pod without preferred terms."""
    if not cy.pod.preferred_pod_terms:
        return None
    n = len(cy.snapshot.states)
    raw = np.zeros(n, dtype=np.int64)
    seen = False
    for sign, term in cy.pod.preferred_pod_terms:
        cnt, _ = term_counts(cy, term)
        seen = seen or bool(cnt.any())
        raw += sign * term.weight * cnt
    if not seen:
        return np.zeros(len(chosen), dtype=np.int64)
    hi, lo = int(raw[feasible].max()), int(raw[feasible].min())
    if hi == lo:
        return np.zeros(len(chosen), dtype=np.int64)
    out: np.ndarray = (MAX_SCORE * ((raw - lo) / (hi - lo))).astype(np.int64)[chosen]
    return out


PLUGIN = Plugin(NAME, ("R6", "R7"), (MSG_POD_AFFINITY, MSG_POD_ANTI_AFFINITY, MSG_EXISTING_ANTI_AFFINITY),
                prefilter=prefilter, filter=pod_affinity_filter, failures=failures, score=score, weight=2)
