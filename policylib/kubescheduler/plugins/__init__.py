"""The registry: kube-scheduler 1.36's default profile as the simulator runs it (``framework/plugins/registry.go``
and ``apis/config/v1/default_plugins.go``), one module per plugin (or per family).

:data:`PLUGINS` lists the plugins in the order the framework runs their filters; a node's reason is the first
filter it fails. Every caller walks this one list: the engine's scheduling cycle (filters, scores, binds), the
failure messages, ``check`` and the admission policies' capacity verdict (a node's eligibility is the filters
that do not change while pods bind: :func:`eligible_nodes`), and the skew a Deployment's pods have now (rule S28:
:func:`skews_now`, PodTopologySpread's own counting). Adding a filter or a score is adding a module with
a :class:`Plugin` and its entry here (docs/architecture.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ..arrays import np
from ..framework import Failures, Mask, NodeFilter, NodeScore, Plugin, Score, Static
from ..model import NodeState, PodShape
from ..snapshot import Snapshot
from . import (
    inter_pod_affinity,
    node_affinity,
    node_ports,
    node_resources,
    node_unschedulable,
    pod_topology_spread,
    taint_toleration,
)

if TYPE_CHECKING:
    from ..framework import Cycle
    from .pod_topology_spread import SkewNow

#: Rules R3, R10: the default profile's filter and score plugins, filters in the framework's order. ImageLocality
#: (score weight 1) is not modelled: it scores 0 on every node here (no node reports images in the input).
PLUGINS: tuple[Plugin, ...] = (
    node_unschedulable.PLUGIN,
    taint_toleration.PLUGIN,
    node_affinity.PLUGIN,
    node_ports.PLUGIN,
    node_resources.FIT_PLUGIN,
    pod_topology_spread.PLUGIN,
    inter_pod_affinity.PLUGIN,
    node_resources.BALANCED_PLUGIN,
)
#: The filters whose verdict does not change while pods bind: a node's eligibility for a pod.
NODE_FILTERS: tuple[tuple[str, NodeFilter], ...] = tuple((p.name, p.node_filter) for p in PLUGINS
                                                         if p.node_filter is not None)
#: The raw scores that do not change while pods bind (normalised by their plugin's score).
NODE_SCORES: tuple[tuple[str, NodeScore], ...] = tuple((p.name, p.node_score) for p in PLUGINS
                                                       if p.node_score is not None)
#: The filters that read what is bound, run per replica: (name, filter, failures).
CYCLE_FILTERS: tuple[tuple[str, Mask, Failures], ...] = tuple(
    (p.name, p.filter, p.failures) for p in PLUGINS if p.filter is not None and p.failures is not None)
#: The score plugins: (name, weight, score).
SCORES: tuple[tuple[str, int, Score], ...] = tuple((p.name, p.weight, p.score) for p in PLUGINS if p.score is not None)
#: The plugins that keep state for a snapshot's life (each built from the snapshot, as a plugin instance is).
INITS: tuple[tuple[str, Callable[[Snapshot], Any]], ...] = tuple((p.name, p.init) for p in PLUGINS if p.init is not None)
#: The plugins that keep per-cycle state (their PreFilter), and those that update it after a bind.
PREFILTERS: tuple[tuple[str, Callable[[Cycle], Any]], ...] = tuple(
    (p.name, p.prefilter) for p in PLUGINS if p.prefilter is not None)
BINDS: tuple[tuple[str, Callable[[Cycle, int], None]], ...] = tuple(
    (p.name, p.bound) for p in PLUGINS if p.bound is not None)


def node_failure(pod: PodShape, node: NodeState) -> str | None:
    """Rule R3: the first filter that never changes while pods bind (NodeUnschedulable, TaintToleration,
    NodeAffinity) that the node fails for the pod, in the scheduler's words; None when it passes them all."""
    for _name, node_filter in NODE_FILTERS:
        why = node_filter(pod, node)
        if why is not None:
            return why
    return None


def eligible_nodes(pod: PodShape, nodes: Iterable[NodeState]) -> list[NodeState]:
    """The nodes whose eligibility filters (:func:`node_failure`) the pod passes: where it could ever be placed,
    whatever is bound. ``check`` and the engine's cycle use the same filters."""
    return [n for n in nodes if node_failure(pod, n) is None]


def node_verdicts(pod: PodShape, states: Sequence[NodeState]) -> Static:
    """The registry's node filters and node scores for ``pod`` on every node: what does not change while pods
    bind (each filter's verdict, each node's first failure, each raw score)."""
    n = len(states)
    passes = {name: np.ones(n, dtype=bool) for name, _ in NODE_FILTERS}
    raw = {name: np.zeros(n, dtype=np.int64) for name, _ in NODE_SCORES}
    reasons: list[str | None] = [None] * n
    for i, s in enumerate(states):
        for name, node_filter in NODE_FILTERS:
            why = node_filter(pod, s)
            if why is not None:
                passes[name][i] = False
                reasons[i] = reasons[i] or why
        for name, node_score in NODE_SCORES:
            raw[name][i] = node_score(pod, s)
    ok = np.array([r is None for r in reasons], dtype=bool)
    return Static(ok, passes, reasons, raw, pod.signature())


@dataclass
class PodCycle:
    """One pod's cycle over a snapshot with nothing bound in it (:class:`~policylib.kubescheduler.framework.Cycle`):
    what a question asked of the plugins beside a simulation reads."""

    snapshot: Snapshot
    pod: PodShape
    st: Static
    plugins: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)
    incremental: bool = False

    @classmethod
    def of(cls, snapshot: Snapshot, pod: PodShape, st: Static | None = None) -> "PodCycle":
        """``st``: :func:`node_verdicts` for the pod on these nodes, where the caller keeps them."""
        return cls(snapshot, pod, node_verdicts(pod, snapshot.states) if st is None else st,
                   {name: init(snapshot) for name, init in INITS})


def skews_now(snapshot: Snapshot, pod: PodShape, st: Static | None = None) -> list[SkewNow]:
    """Rule S28: the skew of each of ``pod``'s own topology spread constraints over the pods bound in
    ``snapshot`` (:func:`policylib.kubescheduler.plugins.pod_topology_spread.skews_now`); ``st`` as for
    :meth:`PodCycle.of`."""
    return pod_topology_spread.skews_now(PodCycle.of(snapshot, pod, st))
